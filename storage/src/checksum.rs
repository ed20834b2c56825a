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
}
