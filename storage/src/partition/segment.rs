//! One segment of a partition log: its extent in offsets and bytes, its sparse index, and how much
//! of it has reached the file.
//!
//! The `.index` file is a run of 24-byte entries (offset u64, timestamp u64, position u64), one for
//! the first batch of the segment and then one for each batch that starts at least
//! `index_interval_bytes` past the previous entry. A read by offset or timestamp starts at the last
//! entry at or before its target and scans forward from there.

use vireo_io::{FileId, FileKind, Namespace};

use crate::batch::{BatchError, BatchHeader, BATCH_HEADER_SIZE};

pub const INDEX_ENTRY_SIZE: usize = 24;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IndexEntry {
    pub offset: u64,
    pub timestamp: u64,
    pub position: u64,
}

impl IndexEntry {
    pub fn encode_into(&self, bytes: &mut Vec<u8>) {
        bytes.extend_from_slice(&self.offset.to_le_bytes());
        bytes.extend_from_slice(&self.timestamp.to_le_bytes());
        bytes.extend_from_slice(&self.position.to_le_bytes());
    }

    fn decode(bytes: &[u8]) -> IndexEntry {
        let u64_at = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap());
        IndexEntry { offset: u64_at(0), timestamp: u64_at(8), position: u64_at(16) }
    }
}

/// Decodes an index file and checks it against its segment; `None` when it is not one to trust
/// (torn, out of order, pointing past the log): the caller rebuilds it from the log.
pub fn decode_index(bytes: &[u8], start_offset: u64, log_size: u64) -> Option<Vec<IndexEntry>> {
    if !bytes.len().is_multiple_of(INDEX_ENTRY_SIZE) {
        return None;
    }
    let entries: Vec<IndexEntry> = bytes.chunks_exact(INDEX_ENTRY_SIZE).map(IndexEntry::decode).collect();
    match entries.first() {
        None => return (log_size == 0).then_some(entries),
        Some(first) if first.offset != start_offset || first.position != 0 => return None,
        Some(_) => {}
    }
    let ordered = entries.windows(2).all(|pair| {
        pair[0].offset < pair[1].offset && pair[0].position < pair[1].position && pair[0].timestamp <= pair[1].timestamp
    });
    // Index files carry no checksum: any value is possible, so no arithmetic may overflow.
    let inside = entries
        .last()
        .is_some_and(|last| last.position.checked_add(BATCH_HEADER_SIZE as u64).is_some_and(|end| end <= log_size));
    (ordered && inside).then_some(entries)
}

/// What scanning a run of segment bytes found: the whole, valid batches from its start, and why it
/// stopped.
#[derive(Debug)]
pub struct Scan {
    /// (position relative to the scanned bytes, header) of each valid batch, in order.
    pub batches: Vec<(usize, BatchHeader)>,
    /// Bytes of whole valid batches from the start.
    pub valid_len: usize,
    pub stop: ScanStop,
}

#[derive(Debug, PartialEq, Eq)]
pub enum ScanStop {
    /// The bytes ended exactly after a batch (or were empty).
    End,
    /// The bytes end inside a batch whose header says it is this long: read more to see it whole.
    Partial { batch_length: u64 },
    /// A batch failed its checks, or did not continue the offsets.
    Invalid(BatchError),
    /// A valid batch whose base offset is not the one expected.
    Discontinuous { expected: u64, found: u64 },
}

/// Scans `bytes` as consecutive batches, checking each whole (`validate`) and that offsets continue
/// from `expected_offset` when it is given.
pub fn scan(bytes: &[u8], mut expected_offset: Option<u64>) -> Scan {
    let mut batches = Vec::new();
    let mut at = 0;
    let stop = loop {
        let rest = &bytes[at..];
        if rest.is_empty() {
            break ScanStop::End;
        }
        let header = match BatchHeader::decode(rest) {
            Ok(header) => header,
            Err(BatchError::Short) => break ScanStop::Partial { batch_length: BATCH_HEADER_SIZE as u64 },
            Err(error) => break ScanStop::Invalid(error),
        };
        if (rest.len() as u64) < header.batch_length {
            break ScanStop::Partial { batch_length: header.batch_length };
        }
        if let Err(error) = crate::batch::validate(rest) {
            break ScanStop::Invalid(error);
        }
        if let Some(expected) = expected_offset {
            if header.base_offset != expected {
                break ScanStop::Discontinuous { expected, found: header.base_offset };
            }
        }
        expected_offset = Some(header.end_offset());
        batches.push((at, header));
        at += header.batch_length as usize;
    };
    Scan { batches, valid_len: at, stop }
}

/// What searching damaged bytes for the next valid batch found.
#[derive(Debug, PartialEq, Eq)]
pub enum Resync {
    /// A whole, valid batch starts at this position of the searched bytes.
    Found { at: usize, header: BatchHeader },
    /// A batch header that fits starts here, but the bytes end before the batch does: read
    /// `batch_length` bytes from here to see whether it is whole.
    Partial { at: usize, batch_length: u64 },
    /// No batch starts in the searched bytes (the last `BATCH_HEADER_SIZE - 1` cannot hold one).
    NotFound,
}

/// Looks, byte by byte from `from`, for the first whole, valid batch whose offsets lie in
/// `offsets`: where a log continues after damaged bytes. A header must decode (204 zero bytes,
/// a length that fits its message count) before its checksums are computed, so the search is
/// cheap and a false match needs a whole batch with valid checksums inside the damage.
pub fn resync(bytes: &[u8], from: usize, offsets: std::ops::Range<u64>) -> Resync {
    let mut at = from;
    while at + BATCH_HEADER_SIZE <= bytes.len() {
        if let Ok(header) = BatchHeader::decode(&bytes[at..]) {
            if offsets.contains(&header.base_offset) && header.end_offset() <= offsets.end {
                if ((bytes.len() - at) as u64) < header.batch_length {
                    return Resync::Partial { at, batch_length: header.batch_length };
                }
                if crate::batch::validate(&bytes[at..]).is_ok() {
                    return Resync::Found { at, header };
                }
            }
        }
        at += 1;
    }
    Resync::NotFound
}

/// The largest timestamp of any message in a valid batch.
pub fn batch_timestamp_max(bytes: &[u8]) -> u64 {
    crate::batch::timestamp_max(bytes).unwrap_or(0)
}

/// Bytes of a segment that failed their checks with valid batches after them: the messages they
/// held are lost on this copy of the log (a peer may hold them), and reads step over them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Damage {
    pub from_offset: u64,
    pub to_offset: u64,
    pub position: u64,
    pub len: u64,
}

#[derive(Clone, Debug)]
pub struct Segment {
    pub start_offset: u64,
    /// The offset after the last message appended (written or not).
    pub end_offset: u64,
    /// Bytes appended (written or not).
    pub size: u64,
    /// Bytes whose writes completed: readable from the file.
    pub written_size: u64,
    pub index: Vec<IndexEntry>,
    /// Index entries already handed to a write of the `.index` file.
    pub index_written: usize,
    /// The smallest and largest message timestamps (0 while empty).
    pub first_timestamp: u64,
    pub last_timestamp: u64,
    pub sealed: bool,
    /// Damaged runs found by recovery, in log order.
    pub damaged: Vec<Damage>,
}

impl Segment {
    pub fn new(start_offset: u64) -> Segment {
        Segment {
            start_offset,
            end_offset: start_offset,
            size: 0,
            written_size: 0,
            index: Vec::new(),
            index_written: 0,
            first_timestamp: 0,
            last_timestamp: 0,
            sealed: false,
            damaged: Vec::new(),
        }
    }

    pub fn log_file(&self, namespace: Namespace) -> FileId {
        FileId::new(namespace, FileKind::Segment(self.start_offset))
    }

    pub fn index_file(&self, namespace: Namespace) -> FileId {
        FileId::new(namespace, FileKind::Index(self.start_offset))
    }

    pub fn is_empty(&self) -> bool {
        self.size == 0
    }

    /// Records a batch appended at `position == self.size`, adding an index entry when due.
    pub fn record_batch(&mut self, header: &BatchHeader, timestamp_max: u64, index_interval_bytes: u64) {
        assert_eq!(header.base_offset, self.end_offset, "offsets in a segment are dense");
        let position = self.size;
        // The first batch after damage always gets an entry: reads resume there.
        let after_damage = self.damaged.last().is_some_and(|damage| damage.position + damage.len == position);
        let due = after_damage || self.index.last().is_none_or(|last| position - last.position >= index_interval_bytes);
        if due {
            self.index.push(IndexEntry { offset: header.base_offset, timestamp: header.base_timestamp, position });
        }
        if self.is_empty() {
            self.first_timestamp = header.base_timestamp;
        }
        self.last_timestamp = self.last_timestamp.max(timestamp_max);
        self.end_offset = header.end_offset();
        self.size += header.batch_length;
    }

    /// Records `len` damaged bytes at `position == self.size`, standing for the offsets up to
    /// `to_offset` (the first valid batch after them, or the next segment's start).
    pub fn record_damage(&mut self, to_offset: u64, len: u64) {
        assert!(to_offset >= self.end_offset && len > 0);
        match self.damaged.last_mut() {
            // Damage right after damage is one run: reads step over it in one go.
            Some(last) if last.position + last.len == self.size => {
                last.to_offset = to_offset;
                last.len += len;
            }
            _ => self.damaged.push(Damage { from_offset: self.end_offset, to_offset, position: self.size, len }),
        }
        self.end_offset = to_offset;
        self.size += len;
    }

    /// The damaged run holding `offset`, if any.
    pub fn damage_holding(&self, offset: u64) -> Option<&Damage> {
        self.damaged.iter().find(|damage| (damage.from_offset..damage.to_offset).contains(&offset))
    }

    /// The damaged run starting at byte `position`, if any.
    pub fn damage_at(&self, position: u64) -> Option<&Damage> {
        self.damaged.iter().find(|damage| damage.position == position)
    }

    /// Where a scan for `offset` starts, and the offset of the batch there: the last index entry
    /// at or before it.
    pub fn entry_for_offset(&self, offset: u64) -> (u64, u64) {
        let after = self.index.partition_point(|entry| entry.offset <= offset);
        after.checked_sub(1).map_or((0, self.start_offset), |at| (self.index[at].position, self.index[at].offset))
    }

    /// Where a scan for the first message at or after `timestamp` starts, and the offset there.
    pub fn entry_for_timestamp(&self, timestamp: u64) -> (u64, u64) {
        let after = self.index.partition_point(|entry| entry.timestamp < timestamp);
        after.checked_sub(1).map_or((0, self.start_offset), |at| (self.index[at].position, self.index[at].offset))
    }

    /// Where a read may scan again when nothing valid starts at `position`, where an index entry
    /// sent it: (position, offset of the batch there) of the last index entry before it, but
    /// none before the end of the last damaged run at or before it (a read steps over a run,
    /// never scans it), else that run's end or the segment's start. `None` when `position` is
    /// that floor: nothing earlier is surely a batch boundary.
    pub fn scan_start_before(&self, position: u64) -> Option<(u64, u64)> {
        let floor = self
            .damaged
            .iter()
            .rev()
            .find(|damage| damage.position + damage.len <= position)
            .map_or((0, self.start_offset), |damage| (damage.position + damage.len, damage.to_offset));
        if position <= floor.0 {
            return None;
        }
        let entry = self.index.iter().rev().find(|entry| entry.position < position && entry.position >= floor.0);
        Some(entry.map_or(floor, |entry| (entry.position, entry.offset)))
    }

    /// A position at which every batch holding an offset below `offset` has ended: the first index
    /// entry past it, or the end of the segment.
    pub fn position_bound_for_offset(&self, offset: u64) -> u64 {
        let after = self.index.partition_point(|entry| entry.offset < offset);
        self.index.get(after).map_or(self.size, |entry| entry.position)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::{stamp, BatchBuilder};

    fn batch(base_offset: u64, count: u32, timestamp: u64) -> Vec<u8> {
        let mut builder = BatchBuilder::new();
        for index in 0..count {
            builder.push(index as u128, &[7u8; 100], b"");
        }
        let mut bytes = builder.finish(0);
        stamp(&mut bytes, 0, base_offset, timestamp).unwrap();
        bytes
    }

    #[test]
    fn scan_stops_at_a_torn_batch_and_at_a_gap() {
        let mut bytes = batch(10, 3, 1);
        bytes.extend(batch(13, 2, 2));
        let whole = bytes.len();
        bytes.extend(&batch(15, 2, 3)[..100]);
        let found = scan(&bytes, Some(10));
        assert_eq!(found.batches.len(), 2);
        assert_eq!(found.valid_len, whole);
        assert!(matches!(found.stop, ScanStop::Partial { .. }));
        let mut gap = batch(10, 3, 1);
        gap.extend(batch(14, 1, 1));
        assert_eq!(scan(&gap, Some(10)).stop, ScanStop::Discontinuous { expected: 13, found: 14 });
    }

    #[test]
    fn index_lookups_start_at_or_before_the_target() {
        let mut segment = Segment::new(100);
        for (index, count) in [5u32, 5, 5, 5].into_iter().enumerate() {
            let bytes = batch(segment.end_offset, count, 10 * index as u64);
            let header = crate::batch::validate(&bytes).unwrap();
            segment.record_batch(&header, header.base_timestamp, 1);
        }
        assert_eq!(segment.index.len(), 4);
        let batch_len = segment.size / 4;
        assert_eq!(segment.entry_for_offset(100), (0, 100));
        assert_eq!(segment.entry_for_offset(107), (batch_len, 105));
        assert_eq!(segment.entry_for_offset(119), (3 * batch_len, 115));
        assert_eq!(segment.entry_for_timestamp(15), (batch_len, 105));
        assert_eq!(segment.position_bound_for_offset(106), 2 * batch_len);
        assert_eq!(segment.position_bound_for_offset(200), segment.size);
        let mut encoded = Vec::new();
        segment.index.iter().for_each(|entry| entry.encode_into(&mut encoded));
        assert_eq!(decode_index(&encoded, 100, segment.size), Some(segment.index.clone()));
        assert_eq!(decode_index(&encoded[..30], 100, segment.size), None);
        assert_eq!(decode_index(&encoded, 101, segment.size), None);
        assert_eq!(decode_index(&encoded, 100, batch_len), None);
    }
}
