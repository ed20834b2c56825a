//! The two appends and the cut a replicated log needs: `append_stamped` takes a batch a VSR primary
//! already stamped (its offsets continue the log), and `truncate` cuts the uncommitted tail a view
//! change discards, so the same offsets can be written again with other batches.
//!
//! A cut below the superblock frontier (bytes that were synced) is ordered: the superblock that no
//! longer claims them durable is written and synced first, then the files are cut and later
//! segments removed, and only then may writes resume. A crash between the two leaves the old,
//! valid batches past the frontier: recovery keeps them as an unsynced tail (never as damage), and
//! the replicated log above decides what stays.

use std::collections::VecDeque;

use vireo_io::{Bytes, Io};

use super::segment::INDEX_ENTRY_SIZE;
use super::{AppendError, Appended, Op, PartitionLog, Status, Unit};
use crate::batch::{self, BatchHeader};

/// Why a cut was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TruncateError {
    #[error("the partition is not open")]
    NotOpen,
    #[error("writes, a sync or an earlier cut are in flight: cut once they complete")]
    Busy,
    #[error("offset {offset} is outside the log ({first}..={end})")]
    OutOfRange { offset: u64, first: u64, end: u64 },
    #[error("no batch starts at offset {offset}")]
    NotABatchStart { offset: u64 },
    #[error("offset {offset} is older than the batches the log remembers (from {oldest})")]
    TooDeep { offset: u64, oldest: u64 },
}

/// One of the newest batches, as the log remembers it: where a cut may go, and what a replicated
/// log above checks its speculative tail against (a batch is named by its offsets, its length
/// and its `batch_checksum`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TailBatch {
    pub base_offset: u64,
    pub end_offset: u64,
    pub len: u64,
    pub checksum: u64,
    pub segment_start: u64,
    pub position: u64,
}

/// A cut whose file operations wait for a superblock.
#[derive(Debug)]
pub(super) struct PendingCut {
    /// This superblock sequence must be durable first; `None`: nothing past the cut was synced.
    after_sequence: Option<u64>,
    segment_start: u64,
    position: u64,
    index_len: u64,
    /// Later segments whose files go.
    removed: Vec<u64>,
}

impl PartitionLog {
    /// Appends a batch a VSR primary stamped: valid, for this partition, and starting exactly at
    /// the log's end offset. The bytes are stored as they are. Its messages' checksums are the
    /// caller's to vouch for (`batch::check_stamped`: a prepare's body checksum covers them, or
    /// the caller validated bytes fetched from a peer), so a batch is not hashed again here.
    pub fn append_stamped(&mut self, io: &mut impl Io, batch: Bytes) -> Result<Appended, AppendError> {
        self.admit_append(batch.len())?;
        let (header, timestamp_max) = batch::check_stamped_with_timestamp_max(&batch)?;
        if header.partition_id != self.config.partition_id {
            return Err(AppendError::WrongPartition { expected: self.config.partition_id, found: header.partition_id });
        }
        if header.base_offset != self.end_offset() {
            return Err(AppendError::NotNext { expected: self.end_offset(), found: header.base_offset });
        }
        self.last_timestamp = self.last_timestamp.max(header.base_timestamp);
        self.push_batch(io, &header, timestamp_max, batch);
        Ok(Appended {
            base_offset: header.base_offset,
            last_offset: header.last_offset(),
            timestamp: header.base_timestamp,
        })
    }

    /// Cuts every message at and after `from_offset`, which must start a batch the log remembers
    /// (`PartitionConfig::tail_batches_max` of the newest). Reads see the cut at once; appends go
    /// on from `from_offset`. A cut where a segment starts removes that segment and makes the one
    /// before the active one again. Refused with `Busy` while writes or a sync are in flight.
    pub fn truncate(&mut self, io: &mut impl Io, from_offset: u64) -> Result<(), TruncateError> {
        if self.status != Status::Open {
            return Err(TruncateError::NotOpen);
        }
        let (first, end) = (self.first_offset(), self.end_offset());
        if from_offset < first || from_offset > end {
            return Err(TruncateError::OutOfRange { offset: from_offset, first, end });
        }
        if from_offset == end {
            return Ok(());
        }
        if !self.writing.is_empty()
            || self.syncing.is_some()
            || self.ordering_ops > 0
            || self.creates_in_flight > 0
            || self.cut_pending.is_some()
            || !self.repairing.is_empty()
        {
            return Err(TruncateError::Busy);
        }
        let Some(&TailBatch { segment_start, position, .. }) = self.remembered(from_offset) else {
            return match self.tail.front().map(|batch| batch.base_offset) {
                Some(oldest) if oldest < from_offset => Err(TruncateError::NotABatchStart { offset: from_offset }),
                Some(oldest) => Err(TruncateError::TooDeep { offset: from_offset, oldest }),
                None => Err(TruncateError::TooDeep { offset: from_offset, oldest: end }),
            };
        };
        let (segment_start, position) = match self.segments.iter().rev().find(|s| s.start_offset < segment_start) {
            // The cut starts a segment: it goes too, and the one before takes appends again, as if
            // the batch that began the next segment had never come (its owner seals again, or
            // not, when the next batch comes).
            Some(previous) if position == 0 => (previous.start_offset, previous.size),
            _ => (segment_start, position),
        };
        self.cut_units(from_offset);
        let mut removed = Vec::new();
        while self.segments.back().is_some_and(|segment| segment.start_offset > segment_start) {
            removed.push(self.segments.pop_back().expect("segment").start_offset);
        }
        let segment = self.segments.back_mut().expect("the cut segment");
        assert_eq!(segment.start_offset, segment_start);
        segment.sealed = false;
        segment.size = position;
        segment.written_size = segment.written_size.min(position);
        segment.end_offset = from_offset;
        segment.index.retain(|entry| entry.position < position);
        segment.index_written = segment.index_written.min(segment.index.len());
        segment.damaged.retain(|damage| damage.position < position);
        let index_len = (segment.index.len() * INDEX_ENTRY_SIZE) as u64;
        self.tail.retain(|batch| batch.base_offset < from_offset);
        self.frontier_pending.retain(|sealed_end| *sealed_end <= from_offset);
        self.written_offset = self.written_offset.min(from_offset);
        self.synced_offset = self.synced_offset.min(from_offset);
        self.sync_target = self.sync_target.min(from_offset);
        let after_sequence = (self.frontier > from_offset).then(|| {
            self.frontier = from_offset;
            self.superblock_wanted = true;
            self.superblock_writing.unwrap_or(self.superblock_sequence) + 1
        });
        self.cut_pending = Some(PendingCut { after_sequence, segment_start, position, index_len, removed });
        self.pump(io);
        Ok(())
    }

    /// Drops the batches at and after `from_offset` from the units not yet handed to a write.
    fn cut_units(&mut self, from_offset: u64) {
        let units: Vec<Unit> = self.queued.drain(..).chain(self.appending.take()).collect();
        let mut kept = VecDeque::new();
        for mut unit in units {
            if unit.end_offset > from_offset {
                let base_of = |bytes: &Bytes| BatchHeader::decode(bytes).expect("units hold valid batches").base_offset;
                let at =
                    unit.batches.iter().position(|bytes| base_of(bytes) >= from_offset).unwrap_or(unit.batches.len());
                for dropped in unit.batches.drain(at..) {
                    unit.len -= dropped.len() as u64;
                    self.unwritten_bytes -= dropped.len() as u64;
                    unit.messages -= BatchHeader::decode(&dropped).expect("valid").message_count as u64;
                }
                unit.end_offset = unit.end_offset.min(from_offset);
            }
            if !unit.batches.is_empty() {
                kept.push_back(unit);
            }
        }
        self.queued = kept;
    }

    /// Issues a pending cut's file operations once its superblock is durable. Writes wait for
    /// them (they count as ordering operations).
    pub(super) fn start_pending_cut(&mut self, io: &mut impl Io) {
        let due = self
            .cut_pending
            .as_ref()
            .is_some_and(|cut| cut.after_sequence.is_none_or(|sequence| self.superblock_sequence >= sequence));
        if !due {
            return;
        }
        let cut = self.cut_pending.take().expect("a pending cut");
        let namespace = self.namespace;
        let segment = self.segment_mut(cut.segment_start);
        let (log_file, index_file) = (segment.log_file(namespace), segment.index_file(namespace));
        for (file, len) in [(log_file, cut.position), (index_file, cut.index_len)] {
            let token = self.token(Op::Ordering);
            io.truncate(file, len, token);
            self.ordering_ops += 1;
            self.dirty.insert(file);
        }
        for start in cut.removed {
            self.delete_segment_files(io, start);
        }
    }

    /// Remembers where a batch starts, for cuts: a run of the newest batches, at most
    /// `tail_batches_max`, without gaps (recovery reads only the tails of trusted segments, and
    /// damage leaves holes: a batch that does not continue the run starts a new one).
    /// The remembered batch that starts at `base_offset`, if it is among the newest
    /// `PartitionConfig::tail_batches_max`.
    pub fn remembered(&self, base_offset: u64) -> Option<&TailBatch> {
        let at = self.tail.binary_search_by_key(&base_offset, |batch| batch.base_offset).ok()?;
        self.tail.get(at)
    }

    pub(super) fn remember_batch(&mut self, header: &BatchHeader, segment_start: u64, position: u64) {
        if self.tail.back().is_some_and(|batch| batch.end_offset != header.base_offset) {
            self.tail.retain(|batch| batch.base_offset < header.base_offset);
            if self.tail.back().is_some_and(|batch| batch.end_offset != header.base_offset) {
                self.tail.clear();
            }
        }
        self.tail.push_back(TailBatch {
            base_offset: header.base_offset,
            end_offset: header.end_offset(),
            len: header.batch_length,
            checksum: header.batch_checksum,
            segment_start,
            position,
        });
        while self.tail.len() > self.config.tail_batches_max {
            self.tail.pop_front();
        }
    }
}
