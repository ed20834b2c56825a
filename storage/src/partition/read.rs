//! Reads from a partition log: by offset or by timestamp, returning whole stamped batches.
//!
//! A read finds its segment from the in-memory extents, starts at the sparse index entry at or
//! before its target, and reads only up to the index entry past what it needs (or its byte budget).
//! Batches before the target in that window are skipped; the result is one contiguous run of whole
//! batches sliced out of the read buffer, each checked against its checksums. A read that starts in
//! a batch larger than its window reads again with the batch's own length; one whose window held
//! only batches before its target continues from where it stopped, into the next segment if need be.
//! Index files carry no checksum, so an entry is a hint: when nothing valid starts where an entry
//! sent a read, the read scans again from the entry before it (the segment's start at worst) and
//! reports damage only if the scan from there meets it too.

use vireo_io::{Bytes, Completion, Io, IoError};

use super::segment::{self, ScanStop};
use super::{Op, PartitionEvent, PartitionLog, Status};
use crate::batch::{self, BATCH_HEADER_SIZE, BATCH_SIZE_MAX};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadStart {
    /// From this offset (clamped to the first offset still held).
    Offset(u64),
    /// From the first message stamped at or after this timestamp (microseconds).
    Timestamp(u64),
}

/// How a consumer polls (`PROTOCOL.md`, polling strategy kinds 1 to 5).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PollingStrategy {
    Offset(u64),
    Timestamp(u64),
    /// From the first message the partition still holds.
    First,
    /// The last `count` messages.
    Last,
    /// After the consumer's stored offset (from the first message when it has none).
    Next,
}

impl PollingStrategy {
    /// Where a poll of `count` messages starts, given the partition's end offset and the
    /// consumer's stored offset (the last one it processed), if any.
    pub fn start(self, count: u32, end_offset: u64, stored: Option<u64>) -> ReadStart {
        match self {
            PollingStrategy::Offset(offset) => ReadStart::Offset(offset),
            PollingStrategy::Timestamp(timestamp) => ReadStart::Timestamp(timestamp),
            PollingStrategy::First => ReadStart::Offset(0),
            PollingStrategy::Last => ReadStart::Offset(end_offset.saturating_sub(count as u64)),
            PollingStrategy::Next => ReadStart::Offset(stored.map_or(0, |offset| offset + 1)),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReadRequest {
    /// Chosen by the caller; handed back in the `Read` event.
    pub id: u64,
    pub start: ReadStart,
    /// Messages wanted from the start on.
    pub count: u32,
    /// Bytes of batches wanted at most (at least one whole batch is returned).
    pub bytes_max: u64,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReadBatches {
    /// The first offset the request asked for; the first batch may begin before it.
    pub start_offset: u64,
    /// Whole stamped batches, back to back; empty when there is nothing at or after the start.
    /// A slice of what was read: the bytes before the first batch wanted are skipped, not moved.
    pub bytes: Bytes,
    pub batch_count: u32,
    /// The partition's end offset when the read finished.
    pub end_offset: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ReadError {
    #[error("the partition is not open")]
    NotOpen,
    #[error("too many reads in flight")]
    Busy,
    /// The batch holding this offset failed its checksums: it needs repair from a peer.
    #[error("the batch at offset {offset} is damaged")]
    Corrupt { offset: u64 },
    #[error("the device failed the read: {0}")]
    Io(IoError),
}

#[derive(Debug)]
pub(super) struct ReadInFlight {
    request: ReadRequest,
    segment_start: u64,
    position: u64,
    /// The offset of the batch that must be at `position`.
    expected: u64,
    /// The position of the index entry (or the segment start) this read last started from.
    named: Option<u64>,
}

impl PartitionLog {
    /// Starts a read; its result comes back as a `PartitionEvent::Read` with the request's id.
    pub fn read(&mut self, io: &mut impl Io, request: ReadRequest) -> Result<(), ReadError> {
        // A log that failed a write or sync still reads what it wrote before (its owner stops
        // writing on the failure, and a single node serves what it holds until it restarts).
        if self.status == Status::Opening {
            return Err(ReadError::NotOpen);
        }
        if self.reads.len() + self.parked.len() >= self.config.reads_max {
            return Err(ReadError::Busy);
        }
        assert!(!self.reads.contains_key(&request.id), "read id {} already in flight", request.id);
        self.start_read(io, request);
        Ok(())
    }

    fn finish_read(&mut self, id: u64, result: Result<ReadBatches, ReadError>) {
        self.events.push_back(PartitionEvent::Read { id, result });
    }

    fn empty_read(&mut self, request: &ReadRequest, start_offset: u64) {
        let end_offset = self.end_offset();
        self.finish_read(request.id, Ok(ReadBatches { start_offset, bytes: Bytes::new(), batch_count: 0, end_offset }));
    }

    pub(super) fn start_read(&mut self, io: &mut impl Io, request: ReadRequest) {
        let (first, end) = (self.first_offset(), self.end_offset());
        let found = match request.start {
            ReadStart::Offset(offset) => {
                let mut offset = offset.max(first);
                if offset >= end || request.count == 0 {
                    return self.empty_read(&request, offset);
                }
                let mut at = self.segments.partition_point(|segment| segment.start_offset <= offset) - 1;
                // Messages lost to damage are not there to serve: the read starts after them.
                while let Some(damage) = self.segments[at].damage_holding(offset) {
                    offset = damage.to_offset;
                    if offset >= end {
                        return self.empty_read(&request, offset);
                    }
                    at = self.segments.partition_point(|segment| segment.start_offset <= offset) - 1;
                }
                let request = ReadRequest { start: ReadStart::Offset(offset), ..request };
                let segment = &self.segments[at];
                let bound = segment.position_bound_for_offset(offset.saturating_add(request.count as u64));
                let (position, expected) = segment.entry_for_offset(offset);
                (segment.start_offset, position, expected, bound)
            }
            ReadStart::Timestamp(timestamp) => {
                let at =
                    self.segments.iter().position(|segment| !segment.is_empty() && segment.last_timestamp >= timestamp);
                let Some(at) = at.filter(|_| request.count > 0) else {
                    return self.empty_read(&request, end);
                };
                let segment = &self.segments[at];
                let (position, expected) = segment.entry_for_timestamp(timestamp);
                (segment.start_offset, position, expected, segment.size)
            }
        };
        let (segment_start, position, expected, bound) = found;
        self.read_segment_at(io, request, (segment_start, position, expected), bound, 0, Some(position));
    }

    /// Reads the segment from `position` (a batch boundary) towards `bound`, at most the request's
    /// window of bytes but at least `at_least` (a batch larger than the window is read whole).
    /// `at` is (segment start, position, offset of the batch at that position). `named`: the
    /// position of the index entry (or segment start) the read last started from, if in this
    /// segment.
    fn read_segment_at(
        &mut self,
        io: &mut impl Io,
        request: ReadRequest,
        at: (u64, u64, u64),
        bound: u64,
        at_least: u64,
        named: Option<u64>,
    ) {
        let (segment_start, position, expected) = at;
        let at = self.segment_position(segment_start).expect("segment");
        let segment = &self.segments[at];
        assert!(position < segment.size, "a read starts inside its segment");
        let window = request.bytes_max.min(self.config.read_bytes_max) + self.config.index_interval_bytes;
        let bound = bound.min(position + window).max(position + at_least.max(BATCH_HEADER_SIZE as u64));
        if position < segment.written_size {
            let end = bound.min(segment.written_size);
            let file = segment.log_file(self.namespace);
            let token = self.token(Op::Read { id: request.id });
            io.read(file, position, (end - position) as usize, token);
            self.reads.insert(request.id, ReadInFlight { request, segment_start, position, expected, named });
            return;
        }
        let writing = self.writing.iter().any(|writing| {
            writing.segment_start == segment_start
                && (writing.position..writing.position + writing.len).contains(&position)
        });
        if writing {
            self.parked.push(request);
            return;
        }
        // Not handed to a write yet: serve it from the units in memory.
        let mut bytes = Vec::new();
        let units = self.queued.iter().chain(self.appending.iter()).filter(|unit| unit.segment_start == segment_start);
        let batches = units.flat_map(|unit| {
            unit.batches.iter().scan(unit.position, |at, batch| {
                let start = *at;
                *at += batch.len() as u64;
                Some((start, batch))
            })
        });
        for (batch_at, batch) in batches {
            let batch_end = batch_at + batch.len() as u64;
            if batch_end <= position || (bytes.len() as u64) >= bound - position {
                continue;
            }
            let from = position.max(batch_at) - batch_at;
            let to = (batch.len() as u64).min(from + (bound - position) - bytes.len() as u64);
            bytes.extend_from_slice(&batch[from as usize..to as usize]);
        }
        assert!(
            !bytes.is_empty(),
            "unwritten bytes at {position} of segment {segment_start} are in no unit (written {}, size {}, writing {:?}, units {:?})",
            segment.written_size,
            segment.size,
            self.writing,
            self.queued.iter().chain(self.appending.iter()).map(|unit| (unit.segment_start, unit.position, unit.len)).collect::<Vec<_>>()
        );
        self.collect(io, request, (segment_start, position, expected), bytes, named);
    }

    pub(super) fn retry_parked(&mut self, io: &mut impl Io) {
        for request in std::mem::take(&mut self.parked) {
            self.start_read(io, request);
        }
    }

    pub(super) fn on_read(&mut self, io: &mut impl Io, id: u64, completion: Completion) {
        let in_flight = self.reads.remove(&id).expect("read in flight");
        let result = match completion {
            Completion::Read { result, .. } => result,
            other => panic!("read op completed as {other:?}"),
        };
        // Retention or a rejected write may have deleted the segment meanwhile: start again.
        let current = self
            .segment_position(in_flight.segment_start)
            .is_some_and(|at| self.segments[at].written_size > in_flight.position);
        if !current || self.status == Status::Opening {
            if self.status != Status::Opening {
                self.start_read(io, in_flight.request);
            } else {
                self.finish_read(id, Err(ReadError::NotOpen));
            }
            return;
        }
        match result {
            Ok(bytes) => {
                let at = (in_flight.segment_start, in_flight.position, in_flight.expected);
                self.collect(io, in_flight.request, at, bytes, in_flight.named)
            }
            Err(error) => self.finish_read(id, Err(ReadError::Io(error))),
        }
    }

    /// Picks the batches the request wants out of `bytes` (read at `position` of the segment), or
    /// reads on when they hold none yet.
    fn collect(
        &mut self,
        io: &mut impl Io,
        request: ReadRequest,
        at: (u64, u64, u64),
        bytes: Vec<u8>,
        named: Option<u64>,
    ) {
        let (segment_start, position, expected_first) = at;
        // Batches must be the ones expected where they are: a batch that is whole and valid but
        // misplaced (a misdirected write) is damage, not data to serve.
        let scan = segment::scan(&bytes, Some(expected_first));
        let (mut first, mut last, mut start_offset) = (None, 0, None);
        let (mut messages, mut taken_bytes, mut batch_count) = (0u64, 0u64, 0u32);
        for &(at, header) in &scan.batches {
            // A read of a file a cut has not reached yet: nothing from the cut on is served.
            if header.base_offset >= self.end_offset() {
                break;
            }
            let batch_bytes = &bytes[at..at + header.batch_length as usize];
            let wanted_from = match request.start {
                ReadStart::Offset(offset) => (header.end_offset() > offset).then_some(offset.max(header.base_offset)),
                ReadStart::Timestamp(timestamp) => batch::messages(batch_bytes).ok().and_then(|all| {
                    all.iter().find(|message| message.timestamp >= timestamp).map(|message| message.offset)
                }),
            };
            let Some(from) = wanted_from.or(start_offset.map(|_| header.base_offset)) else { continue };
            first.get_or_insert(at);
            start_offset.get_or_insert(from);
            last = at + header.batch_length as usize;
            messages += header.end_offset() - from;
            taken_bytes += header.batch_length;
            batch_count += 1;
            if messages >= request.count as u64 || taken_bytes >= request.bytes_max {
                break;
            }
        }
        if let (Some(first), Some(start_offset)) = (first, start_offset) {
            // A poll's reply holds its batches as slices of this buffer until its client has read
            // them, and the send queue counts the reply's bytes only: a read mostly past the last
            // batch served gives those bytes back to the allocator now (a shrink in place, no
            // copy; not for a few bytes, as a shrink of a mapped buffer costs a remap). The
            // allocation then keeps beyond the reply at most a third of it past its end, and what lay
            // between the index entry the read began at and the first batch served.
            let mut bytes = bytes;
            if bytes.capacity() - last > bytes.capacity() / 4 {
                bytes.truncate(last);
                bytes.shrink_to_fit();
            }
            let bytes = Bytes::from(bytes).slice(first..last);
            let end_offset = self.end_offset();
            return self.finish_read(request.id, Ok(ReadBatches { start_offset, bytes, batch_count, end_offset }));
        }
        let scanned_to = position + scan.valid_len as u64;
        let at = self.segment_position(segment_start).expect("segment");
        let expected = scan.batches.last().map_or(expected_first, |(_, header)| header.end_offset());
        if let Some(damage) = self.segments[at].damage_at(scanned_to).copied() {
            // Damage recovery found and kept the log past: step over it.
            let (resume, size) = (damage.position + damage.len, self.segments[at].size);
            let request = match request.start {
                ReadStart::Offset(offset) => {
                    ReadRequest { start: ReadStart::Offset(offset.max(damage.to_offset)), ..request }
                }
                ReadStart::Timestamp(_) => request,
            };
            if resume < size {
                return self.read_segment_at(io, request, (segment_start, resume, damage.to_offset), size, 0, None);
            }
            return match self.segments.get(at + 1) {
                Some(next) if !next.is_empty() => {
                    let (next_start, size) = (next.start_offset, next.size);
                    self.read_segment_at(io, request, (next_start, 0, next_start), size, 0, None)
                }
                _ => self.empty_read(&request, self.end_offset()),
            };
        }
        match scan.stop {
            ScanStop::Invalid(_) | ScanStop::Discontinuous { .. } => {
                // Nothing valid right where an index entry sent the read: the entry may be what
                // is damaged (index files carry no checksum, and recovery trusts a sealed
                // segment's entries below the frontier without reading the batches they point
                // at; seed 10064: one bit of an entry's position flipped on the way down, and
                // the intact batches it named were reported damaged on every read and every
                // reopen). Scan again from the entry before it, or the segment's start: from a
                // place that is a batch boundary the scan finds the batches if they are whole,
                // and meets the damage (after valid batches, so not again here) if they are not.
                // Each fallback starts strictly earlier, so a read falls back a bounded number
                // of times.
                if scan.valid_len == 0 && named == Some(position) {
                    if let Some((back, back_offset)) = self.segments[at].scan_start_before(position) {
                        let size = self.segments[at].size;
                        let at = (segment_start, back, back_offset);
                        return self.read_segment_at(io, request, at, size, 0, Some(back));
                    }
                }
                let offset = match request.start {
                    ReadStart::Offset(offset) => offset.max(expected),
                    ReadStart::Timestamp(_) => expected,
                };
                self.finish_read(request.id, Err(ReadError::Corrupt { offset }))
            }
            ScanStop::Partial { batch_length } => {
                let length = batch_length.min(BATCH_SIZE_MAX as u64);
                let at = (segment_start, scanned_to, expected);
                self.read_segment_at(io, request, at, scanned_to + length, length, named)
            }
            ScanStop::End if scanned_to < self.segments[at].size => {
                let size = self.segments[at].size;
                self.read_segment_at(io, request, (segment_start, scanned_to, expected), size, 0, named)
            }
            ScanStop::End => match self.segments.get(at + 1) {
                Some(next) if !next.is_empty() => {
                    let (next_start, size) = (next.start_offset, next.size);
                    self.read_segment_at(io, request, (next_start, 0, next_start), size, 0, None)
                }
                _ => self.empty_read(&request, self.end_offset()),
            },
        }
    }
}
