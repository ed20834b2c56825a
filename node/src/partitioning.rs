//! Which partition a send goes to (`PROTOCOL.md` Partitioning): balanced (round-robin, by the
//! request number, so a retried request goes where its first attempt went: exactly-once needs
//! that), an explicit partition id, or a stable hash of the messages key.

use core::hash::Hasher as _;

use hash32::{Hasher as _, Murmur3Hasher};

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Partitioning {
    Balanced,
    PartitionId(u32),
    MessagesKey(Vec<u8>),
}

/// The partition (one of `partitions`, the topic's ids in order) a send lands in; `None` when
/// the topic has no partitions or an explicit id is not one of them.
pub fn partition_for(partitioning: &Partitioning, request: u64, partitions: &[u32]) -> Option<u32> {
    if partitions.is_empty() {
        return None;
    }
    match partitioning {
        Partitioning::Balanced => Some(partitions[(request % partitions.len() as u64) as usize]),
        Partitioning::PartitionId(id) => partitions.contains(id).then_some(*id),
        Partitioning::MessagesKey(key) => {
            let mut hasher = Murmur3Hasher::default();
            hasher.write(key);
            Some(partitions[(hasher.finish32() as u64 % partitions.len() as u64) as usize])
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn balanced_is_round_robin_by_request_and_keys_are_stable() {
        let partitions = [0, 1, 2];
        let chosen: Vec<u32> =
            (1..=6).map(|request| partition_for(&Partitioning::Balanced, request, &partitions).unwrap()).collect();
        assert_eq!(chosen, vec![1, 2, 0, 1, 2, 0]);
        let key = Partitioning::MessagesKey(b"user-42".to_vec());
        let first = partition_for(&key, 1, &partitions);
        assert!((2..50).all(|request| partition_for(&key, request, &partitions) == first));
        assert_eq!(partition_for(&Partitioning::PartitionId(3), 1, &partitions), None);
        assert_eq!(partition_for(&Partitioning::Balanced, 1, &[]), None);
    }
}
