//! The small deterministic state machine the core simulator replicates: an append-only log of
//! (client, value) registers. Each append replies with the entry's index and the digest of the
//! whole log after it, so a reply pins down the entire history before it: any lost, duplicated or
//! reordered application shows up in the very next reply and in every replica's digest.

use vireo_protocol::{Header, StateMachine};
use vireo_storage::checksum::checksum64;

/// The one operation: append the 8-byte value in the body.
pub const OPERATION_APPEND: u8 = 128;

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RegisterLog {
    entries: Vec<(u128, u64)>,
    digest: u64,
}

impl RegisterLog {
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The (client, value) entries, in order.
    pub fn entries(&self) -> &[(u128, u64)] {
        &self.entries
    }

    /// The reply an append produces: `[index u64][digest u64]`.
    pub fn reply(index: u64, digest: u64) -> Vec<u8> {
        let mut reply = Vec::with_capacity(16);
        reply.extend_from_slice(&index.to_le_bytes());
        reply.extend_from_slice(&digest.to_le_bytes());
        reply
    }
}

/// The request header of an append by `client` (what `apply` reads of a request).
pub fn append_request(client: u128) -> Header {
    let mut header = Header::new(vireo_protocol::Command::Request, 0, 0);
    header.client = client;
    header.operation = OPERATION_APPEND;
    header
}

impl StateMachine for RegisterLog {
    fn apply(&mut self, _op: u64, _timestamp: u64, request: &Header, _user_id: u32, body: &vireo_io::Bytes) -> Vec<u8> {
        let client = request.client;
        let value = match (request.operation, body[..].try_into()) {
            (OPERATION_APPEND, Ok(bytes)) => u64::from_le_bytes(bytes),
            // Anything else is a no-op with an empty reply: still deterministic.
            _ => return Vec::new(),
        };
        let mut link = [0u8; 40];
        link[0..8].copy_from_slice(&self.digest.to_le_bytes());
        link[8..24].copy_from_slice(&client.to_le_bytes());
        link[24..32].copy_from_slice(&value.to_le_bytes());
        link[32..40].copy_from_slice(&(self.entries.len() as u64).to_le_bytes());
        self.digest = checksum64(&link);
        self.entries.push((client, value));
        RegisterLog::reply(self.entries.len() as u64 - 1, self.digest)
    }

    fn digest(&self) -> u64 {
        self.digest
    }

    fn snapshot(&self) -> Vec<u8> {
        let mut bytes = Vec::with_capacity(16 + self.entries.len() * 24);
        bytes.extend_from_slice(&self.digest.to_le_bytes());
        bytes.extend_from_slice(&(self.entries.len() as u64).to_le_bytes());
        for (client, value) in &self.entries {
            bytes.extend_from_slice(&client.to_le_bytes());
            bytes.extend_from_slice(&value.to_le_bytes());
        }
        bytes
    }

    fn restore(snapshot: &[u8]) -> Option<Self> {
        let digest = u64::from_le_bytes(snapshot.get(0..8)?.try_into().ok()?);
        let count = u64::from_le_bytes(snapshot.get(8..16)?.try_into().ok()?) as usize;
        if snapshot.len() != 16 + count.checked_mul(24)? {
            return None;
        }
        let entries = snapshot[16..]
            .chunks(24)
            .map(|chunk| {
                (
                    u128::from_le_bytes(chunk[0..16].try_into().unwrap()),
                    u64::from_le_bytes(chunk[16..24].try_into().unwrap()),
                )
            })
            .collect();
        Some(RegisterLog { entries, digest })
    }

    fn empty() -> Self {
        RegisterLog::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshot_round_trip_and_digest_chain() {
        let mut log = RegisterLog::empty();
        let first = log.apply(
            1,
            0,
            &crate::register_log::append_request(7),
            0,
            &vireo_io::Bytes::copy_from_slice(&5u64.to_le_bytes()),
        );
        let second = log.apply(
            2,
            0,
            &crate::register_log::append_request(8),
            0,
            &vireo_io::Bytes::copy_from_slice(&6u64.to_le_bytes()),
        );
        assert_ne!(first, second);
        let restored = RegisterLog::restore(&log.snapshot()).unwrap();
        assert_eq!(restored, log);
        let mut twice = RegisterLog::empty();
        twice.apply(
            1,
            0,
            &crate::register_log::append_request(7),
            0,
            &vireo_io::Bytes::copy_from_slice(&5u64.to_le_bytes()),
        );
        twice.apply(
            2,
            0,
            &crate::register_log::append_request(7),
            0,
            &vireo_io::Bytes::copy_from_slice(&5u64.to_le_bytes()),
        );
        assert_ne!(twice.digest(), log.digest());
    }
}
