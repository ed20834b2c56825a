//! The checksums every Vireo format uses: xxh3, 64-bit for records at rest, 128-bit for message
//! headers and bodies (which chain prepares into a hash-linked log).
//!
//! Every byte hashed through here is counted, per thread (`bytes_hashed`): the tests hold a send
//! and a poll to how many times they hash each payload byte. The count is one add to a
//! thread-local per call, far below the cost of the hash itself.

use std::cell::Cell;

thread_local! {
    static BYTES_HASHED: Cell<u64> = const { Cell::new(0) };
}

fn count(bytes: &[u8]) {
    // try_with: a thread being torn down has no counter left, and is not measured.
    let _ = BYTES_HASHED.try_with(|hashed| hashed.set(hashed.get() + bytes.len() as u64));
}

/// Bytes this thread has hashed through `checksum64` and `checksum128` so far.
pub fn bytes_hashed() -> u64 {
    BYTES_HASHED.try_with(Cell::get).unwrap_or(0)
}

pub fn checksum64(bytes: &[u8]) -> u64 {
    count(bytes);
    xxhash_rust::xxh3::xxh3_64(bytes)
}

pub fn checksum128(bytes: &[u8]) -> u128 {
    count(bytes);
    xxhash_rust::xxh3::xxh3_128(bytes)
}

/// `checksum128` fed in parts: the digest of parts fed in order is `checksum128` of their
/// concatenation, and every byte fed is counted as `checksum128` counts it.
#[derive(Clone, Default)]
pub struct Checksum128 {
    hasher: xxhash_rust::xxh3::Xxh3,
}

impl Checksum128 {
    pub fn new() -> Checksum128 {
        Checksum128::default()
    }

    pub fn update(&mut self, bytes: &[u8]) {
        count(bytes);
        self.hasher.update(bytes);
    }

    pub fn digest(&self) -> u128 {
        self.hasher.digest128()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_hashed_byte_is_counted() {
        let before = bytes_hashed();
        checksum64(&[1; 100]);
        checksum128(&[2; 28]);
        assert_eq!(bytes_hashed() - before, 128);
    }

    #[test]
    fn a_checksum_fed_in_parts_is_the_checksum_of_the_whole() {
        let bytes: Vec<u8> = (0..5000u32).map(|i| (i * 7 % 251) as u8).collect();
        for cut in [0, 1, 255, 256, 2500, 5000] {
            let mut parts = Checksum128::new();
            parts.update(&bytes[..cut]);
            parts.update(&bytes[cut..]);
            assert_eq!(parts.digest(), checksum128(&bytes), "cut at {cut}");
        }
        let before = bytes_hashed();
        Checksum128::new().update(&bytes);
        assert_eq!(bytes_hashed() - before, 5000);
    }
}
