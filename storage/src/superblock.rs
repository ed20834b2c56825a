//! The superblock: a replica's small, slowly changing durable state, kept in two copies.
//!
//! Record (all little-endian): magic u32 "SBLK", version u16, reserved u16, sequence u64,
//! parent_checksum u64, payload_len u32, payload, then xxh3-64 of everything before it.
//!
//! VSR payload: cluster u128, replica u8, replica_count u8, view u32, log_view u32, commit_max u64,
//! checkpoint_op u64, checkpoint_checksum u128, offset_frontier u64 (the fields `PROTOCOL.md`
//! fixes), then Vireo's extension: snapshot_size u64, snapshot_checksum u64, snapshot_region u8,
//! log_view_sequence u64 (how many times the primary of `log_view` cut that view's log short),
//! log_op u64 and log_op_checksum u128 (the head of that log, which the replica may not hold yet),
//! retained_from u64 (partitions: the first offset kept; purge moves it),
//! view_headers_count u32 and that many 256-byte prepare headers (the log suffix of `log_view` as
//! its start_view gave it).
//!
//! Crash safety: an update writes one copy, syncs, then the other, syncs, both with the same new
//! sequence; the state is durable (and acted upon) only once both are. The copy written first is
//! never the one recovery last resumed from, so at every instant one copy is whole: a crash tears
//! at most the copy being written, and the other holds either the old state (crash during the
//! first write) or the new one (crash during the second). Recovery takes the valid copy with the
//! higher sequence; an older one is safe to resume from, because nothing was done on the strength
//! of a state until both copies held it. Reads that come back damaged are read again.

use crate::checksum::checksum64;
use crate::layout::HEADER_SIZE;

pub const MAGIC: u32 = u32::from_le_bytes(*b"SBLK");
pub const VERSION: u16 = 1;

const RECORD_PREFIX_SIZE: usize = 4 + 2 + 2 + 8 + 8 + 4;
const PAYLOAD_FIXED_SIZE: usize = 16 + 1 + 1 + 4 + 4 + 8 + 8 + 16 + 8 + 8 + 8 + 1 + 8 + 8 + 16 + 8 + 4;

/// How many view headers a superblock may carry: bounds its size on disk.
pub const VIEW_HEADERS_MAX: usize = 64;

/// The largest encoded superblock; the size of each copy's file.
pub const SUPERBLOCK_SIZE_MAX: usize = RECORD_PREFIX_SIZE + PAYLOAD_FIXED_SIZE + VIEW_HEADERS_MAX * HEADER_SIZE + 8;

#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct VsrState {
    pub cluster: u128,
    pub replica: u8,
    pub replica_count: u8,
    pub view: u32,
    pub log_view: u32,
    pub commit_max: u64,
    pub checkpoint_op: u64,
    /// Checksum of the prepare at `checkpoint_op`: the anchor of the hash chain above it.
    pub checkpoint_checksum: u128,
    pub offset_frontier: u64,
    pub snapshot_size: u64,
    pub snapshot_checksum: u64,
    pub snapshot_region: u8,
    /// Within `log_view`: which of its primary's start_views this log is (a primary that proves
    /// an uncommitted op lost cuts its log short and starts the view's log again, one higher).
    pub log_view_sequence: u64,
    /// The head of the log of `log_view` and its checksum: a replica promises at least this log,
    /// even before it holds every header of it.
    pub log_op: u64,
    pub log_op_checksum: u128,
    /// Partitions: the first offset the partition still keeps; segments wholly below it were
    /// purged and are removed by recovery if a crash left them behind.
    pub retained_from: u64,
    /// The log suffix of `log_view`, oldest first, as raw 256-byte prepare headers.
    pub view_headers: Vec<[u8; HEADER_SIZE]>,
    /// The replica formatted after its storage was lost and has not caught up yet: it must not
    /// vote, nack or acknowledge (`Config::rejoin_guard`), also after a crash. Bit 0 of the
    /// record's flags (once the reserved u16 after the version).
    pub rejoining: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Superblock {
    pub sequence: u64,
    pub parent_checksum: u64,
    pub vsr_state: VsrState,
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SuperblockError {
    #[error("superblock copy is empty (never written)")]
    Empty,
    #[error("superblock copy has bad magic {0:#010x} at offset 0")]
    Magic(u32),
    #[error("superblock copy has unknown version {0} at offset 4")]
    Version(u16),
    #[error("superblock payload length {0} at offset 24 exceeds the copy")]
    PayloadLength(u32),
    #[error("superblock checksum mismatch: stored {stored:#018x}, computed {computed:#018x}")]
    Checksum { stored: u64, computed: u64 },
    #[error("superblock payload malformed at payload offset {0}")]
    Payload(usize),
}

impl Superblock {
    pub fn encode(&self) -> Vec<u8> {
        let state = &self.vsr_state;
        assert!(state.view_headers.len() <= VIEW_HEADERS_MAX);
        assert!(state.log_view <= state.view);
        let mut payload = Vec::with_capacity(PAYLOAD_FIXED_SIZE + state.view_headers.len() * 256);
        payload.extend_from_slice(&state.cluster.to_le_bytes());
        payload.push(state.replica);
        payload.push(state.replica_count);
        payload.extend_from_slice(&state.view.to_le_bytes());
        payload.extend_from_slice(&state.log_view.to_le_bytes());
        payload.extend_from_slice(&state.commit_max.to_le_bytes());
        payload.extend_from_slice(&state.checkpoint_op.to_le_bytes());
        payload.extend_from_slice(&state.checkpoint_checksum.to_le_bytes());
        payload.extend_from_slice(&state.offset_frontier.to_le_bytes());
        payload.extend_from_slice(&state.snapshot_size.to_le_bytes());
        payload.extend_from_slice(&state.snapshot_checksum.to_le_bytes());
        payload.push(state.snapshot_region);
        payload.extend_from_slice(&state.log_view_sequence.to_le_bytes());
        payload.extend_from_slice(&state.log_op.to_le_bytes());
        payload.extend_from_slice(&state.log_op_checksum.to_le_bytes());
        payload.extend_from_slice(&state.retained_from.to_le_bytes());
        payload.extend_from_slice(&(state.view_headers.len() as u32).to_le_bytes());
        for header in &state.view_headers {
            payload.extend_from_slice(header);
        }
        let mut record = Vec::with_capacity(RECORD_PREFIX_SIZE + payload.len() + 8);
        record.extend_from_slice(&MAGIC.to_le_bytes());
        record.extend_from_slice(&VERSION.to_le_bytes());
        record.extend_from_slice(&u16::from(state.rejoining).to_le_bytes());
        record.extend_from_slice(&self.sequence.to_le_bytes());
        record.extend_from_slice(&self.parent_checksum.to_le_bytes());
        record.extend_from_slice(&(payload.len() as u32).to_le_bytes());
        record.extend_from_slice(&payload);
        let checksum = checksum64(&record);
        record.extend_from_slice(&checksum.to_le_bytes());
        assert!(record.len() <= SUPERBLOCK_SIZE_MAX);
        record
    }

    /// Decodes one copy. Never panics on any input.
    pub fn decode(bytes: &[u8]) -> Result<Superblock, SuperblockError> {
        if bytes.len() < RECORD_PREFIX_SIZE || bytes[..RECORD_PREFIX_SIZE].iter().all(|b| *b == 0) {
            return Err(SuperblockError::Empty);
        }
        let magic = u32::from_le_bytes(bytes[0..4].try_into().unwrap());
        if magic != MAGIC {
            return Err(SuperblockError::Magic(magic));
        }
        let version = u16::from_le_bytes(bytes[4..6].try_into().unwrap());
        if version != VERSION {
            return Err(SuperblockError::Version(version));
        }
        let sequence = u64::from_le_bytes(bytes[8..16].try_into().unwrap());
        let parent_checksum = u64::from_le_bytes(bytes[16..24].try_into().unwrap());
        let payload_len = u32::from_le_bytes(bytes[24..28].try_into().unwrap());
        let end = RECORD_PREFIX_SIZE + payload_len as usize;
        if payload_len as usize > SUPERBLOCK_SIZE_MAX || end + 8 > bytes.len() {
            return Err(SuperblockError::PayloadLength(payload_len));
        }
        let stored = u64::from_le_bytes(bytes[end..end + 8].try_into().unwrap());
        let computed = checksum64(&bytes[..end]);
        if stored != computed {
            return Err(SuperblockError::Checksum { stored, computed });
        }
        let flags = u16::from_le_bytes(bytes[6..8].try_into().unwrap());
        let mut vsr_state = decode_payload(&bytes[RECORD_PREFIX_SIZE..end])?;
        vsr_state.rejoining = flags & FLAG_REJOINING != 0;
        Ok(Superblock { sequence, parent_checksum, vsr_state })
    }

    pub fn checksum(&self) -> u64 {
        checksum64(&self.encode())
    }
}

struct Reader<'a> {
    bytes: &'a [u8],
    offset: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], SuperblockError> {
        let end = self.offset.checked_add(n).ok_or(SuperblockError::Payload(self.offset))?;
        let slice = self.bytes.get(self.offset..end).ok_or(SuperblockError::Payload(self.offset))?;
        self.offset = end;
        Ok(slice)
    }
    fn u8(&mut self) -> Result<u8, SuperblockError> {
        Ok(self.take(1)?[0])
    }
    fn u32(&mut self) -> Result<u32, SuperblockError> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().unwrap()))
    }
    fn u64(&mut self) -> Result<u64, SuperblockError> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().unwrap()))
    }
    fn u128(&mut self) -> Result<u128, SuperblockError> {
        Ok(u128::from_le_bytes(self.take(16)?.try_into().unwrap()))
    }
}

fn decode_payload(bytes: &[u8]) -> Result<VsrState, SuperblockError> {
    let mut reader = Reader { bytes, offset: 0 };
    let cluster = reader.u128()?;
    let replica = reader.u8()?;
    let replica_count = reader.u8()?;
    let view = reader.u32()?;
    let log_view = reader.u32()?;
    let commit_max = reader.u64()?;
    let checkpoint_op = reader.u64()?;
    let checkpoint_checksum = reader.u128()?;
    let offset_frontier = reader.u64()?;
    let snapshot_size = reader.u64()?;
    let snapshot_checksum = reader.u64()?;
    let snapshot_region = reader.u8()?;
    let log_view_sequence = reader.u64()?;
    let log_op = reader.u64()?;
    let log_op_checksum = reader.u128()?;
    let retained_from = reader.u64()?;
    let view_headers_count = reader.u32()? as usize;
    if view_headers_count > VIEW_HEADERS_MAX || log_view > view || snapshot_region > 1 {
        return Err(SuperblockError::Payload(reader.offset));
    }
    let mut view_headers = Vec::with_capacity(view_headers_count);
    for _ in 0..view_headers_count {
        view_headers.push(reader.take(HEADER_SIZE)?.try_into().unwrap());
    }
    if reader.offset != bytes.len() {
        return Err(SuperblockError::Payload(reader.offset));
    }
    Ok(VsrState {
        cluster,
        replica,
        replica_count,
        view,
        log_view,
        commit_max,
        checkpoint_op,
        checkpoint_checksum,
        offset_frontier,
        snapshot_size,
        snapshot_checksum,
        snapshot_region,
        log_view_sequence,
        log_op,
        log_op_checksum,
        retained_from,
        view_headers,
        rejoining: false,
    })
}

/// The record's flags (the u16 after its version).
const FLAG_REJOINING: u16 = 1;

/// Picks the copy recovery resumes from: the valid one with the higher sequence.
pub fn choose(
    a: Result<Superblock, SuperblockError>,
    b: Result<Superblock, SuperblockError>,
) -> Result<Superblock, (SuperblockError, SuperblockError)> {
    match (a, b) {
        (Ok(a), Ok(b)) => Ok(if b.sequence > a.sequence { b } else { a }),
        (Ok(a), Err(_)) => Ok(a),
        (Err(_), Ok(b)) => Ok(b),
        (Err(a), Err(b)) => Err((a, b)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn sample(view_headers: usize) -> Superblock {
        Superblock {
            sequence: 7,
            parent_checksum: 9,
            vsr_state: VsrState {
                cluster: 0xabc,
                replica: 1,
                replica_count: 3,
                view: 5,
                log_view: 4,
                commit_max: 100,
                checkpoint_op: 64,
                checkpoint_checksum: 0x1234,
                offset_frontier: 0,
                snapshot_size: 10,
                snapshot_checksum: 11,
                snapshot_region: 1,
                log_view_sequence: 2,
                log_op: 99,
                log_op_checksum: 0x77,
                retained_from: 0x99,
                view_headers: vec![[7u8; HEADER_SIZE]; view_headers],
                rejoining: view_headers % 2 == 1,
            },
        }
    }

    #[test]
    fn round_trip_and_choice() {
        let a = sample(3);
        let mut b = sample(0);
        b.sequence = 8;
        assert_eq!(Superblock::decode(&a.encode()), Ok(a.clone()));
        let chosen = choose(Ok(a.clone()), Ok(b.clone())).unwrap();
        assert_eq!(chosen.sequence, 8);
        assert_eq!(Superblock::decode(&[0u8; 64]), Err(SuperblockError::Empty));
    }

    proptest! {
        #[test]
        fn any_bit_flip_is_rejected(headers in 0usize..4, bit in 0usize..100_000) {
            let bytes = sample(headers).encode();
            let mut flipped = bytes.clone();
            let bit = bit % (bytes.len() * 8);
            flipped[bit / 8] ^= 1 << (bit % 8);
            prop_assert!(Superblock::decode(&flipped).is_err());
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
            let _ = Superblock::decode(&bytes);
        }
    }
}
