//! The checksums every Vireo format uses: xxh3, 64-bit for records at rest, 128-bit for message
//! headers and bodies (which chain prepares into a hash-linked log).

pub fn checksum64(bytes: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64(bytes)
}

pub fn checksum128(bytes: &[u8]) -> u128 {
    xxhash_rust::xxh3::xxh3_128(bytes)
}
