//! A partition's segmented log as a sans-IO state machine: appends, flushes, group-committed syncs,
//! sealing, reads by offset and timestamp, retention and purge, and (in `recovery`) the open that
//! verifies what a crash left behind.
//!
//! Bytes flow through *units*: the batches appended to one segment since the last flush, in one
//! buffer. A flush closes the current unit; units are written one at a time, in order, each as one
//! write of the `.log` file (every batch of the unit in one submission) plus one write of the new
//! `.index` entries. While a unit is being written the next one fills, so writes pipeline without
//! ever overlapping. A sync covers every write that completed before it was issued; while it runs,
//! new batches are written, and the next sync covers all of them: one fdatasync per group, however
//! many batches arrived while the previous one ran.
//!
//! Durability: `synced_offset` is the offset below which every message is on stable storage; a
//! `PartitionEvent::Durable` reports each advance. Nothing else is promised across a crash.
//!
//! Reads see every appended message: completed writes are read from the file, units not yet handed
//! to a write are served from memory, and a read that needs the unit being written waits for that
//! write to complete. Reads return whole stamped batches, checked against their checksums on the
//! way out: a damaged batch is reported, never served.

mod read;
mod recovery;
mod repair;
pub mod segment;
mod truncate;

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use vireo_io::{Bytes, Completion, FileId, FileKind, Io, IoError, Namespace, Token};

use crate::batch::{self, BatchError, BatchHeader};
use crate::superblock::{Superblock, VsrState};
pub use read::{PollingStrategy, ReadBatches, ReadError, ReadRequest, ReadStart};
pub use recovery::RecoveryReport;
// (`OwnerClaim` is defined below, beside `open_owned`.)
pub use repair::RepairError;
pub use segment::Damage;
use segment::{IndexEntry, Segment};
pub use truncate::{TailBatch, TruncateError};

/// Tokens of partition logs carry this tag in their top byte (the replica's use 1..=4).
pub const PARTITION_TOKEN_TAG: u64 = 0x20;
const TOKEN_TAG_SHIFT: u32 = 56;
const TOKEN_OWNER_SHIFT: u32 = 40;

/// The owner a token was issued for, when it is a partition log's.
pub fn token_owner(token: Token) -> Option<u16> {
    (token.0 >> TOKEN_TAG_SHIFT == PARTITION_TOKEN_TAG).then_some(((token.0 >> TOKEN_OWNER_SHIFT) & 0xffff) as u16)
}

/// A token in a log owner's space that no log issues (`sequence` below 2^40 and the owner's own
/// business: the owner's I/O beside its log's, such as removing the files of a log it dropped).
pub fn owner_token(owner: u16, sequence: u64) -> Token {
    assert!(sequence < 1 << TOKEN_OWNER_SHIFT);
    Token((PARTITION_TOKEN_TAG << TOKEN_TAG_SHIFT) | ((owner as u64) << TOKEN_OWNER_SHIFT) | sequence)
}

/// Per-topic settings of a partition's log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PartitionConfig {
    /// Written into every batch header.
    pub partition_id: u64,
    /// A segment is sealed once it reaches this size; the batch that crosses it is written whole.
    pub segment_size: u64,
    /// Flush once this many messages wait in memory.
    pub flush_messages: u64,
    /// Flush once this many bytes wait in memory.
    pub flush_bytes: u64,
    /// An index entry at least every this many bytes of log.
    pub index_interval_bytes: u64,
    /// Sealed segments whose newest message is older than this (microseconds) are deleted.
    pub message_expiry_us: Option<u64>,
    /// The oldest sealed segments are deleted while the partition is larger than this.
    pub max_size: Option<u64>,
    /// Bytes appended but not yet written that an append may add to; past it, `Busy`.
    pub unwritten_bytes_max: u64,
    /// Reads in flight (including reads waiting for a write).
    pub reads_max: usize,
    /// Bytes of log one read request fetches at most (beyond its first whole batch).
    pub read_bytes_max: u64,
    /// Bytes one recovery read scans at a time.
    pub scan_chunk_bytes: u64,
    /// Unit writes in flight at once (each at its own position; they complete in any order and
    /// count as written in order).
    pub writes_max: usize,
    /// Batch starts the log remembers, newest first, for `truncate`: how deep a cut may go.
    pub tail_batches_max: usize,
    /// Read and check every batch at open, also in sealed segments whose index recovery would
    /// otherwise trust (slower: `verify` uses it).
    pub verify_on_open: bool,
    /// A deliberate bug, for tests that prove the simulator's checkers catch it.
    pub bug: Option<PartitionBug>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PartitionBug {
    /// Reports a batch durable as soon as its write completes, without a sync.
    DurableBeforeSync,
}

impl Default for PartitionConfig {
    fn default() -> PartitionConfig {
        PartitionConfig {
            partition_id: 0,
            segment_size: 1 << 30,
            flush_messages: 1024,
            flush_bytes: 1 << 20,
            index_interval_bytes: 4096,
            message_expiry_us: None,
            max_size: None,
            unwritten_bytes_max: 8 << 20,
            reads_max: 256,
            read_bytes_max: 8 << 20,
            scan_chunk_bytes: 4 << 20,
            writes_max: 8,
            tail_batches_max: 4096,
            verify_on_open: false,
            bug: None,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AppendError {
    #[error("the partition is not open")]
    NotOpen,
    #[error("too many bytes wait to be written: retry once writes complete")]
    Busy,
    #[error("invalid batch: {0}")]
    Batch(#[from] BatchError),
    #[error("the batch is stamped for partition {found}, not {expected}")]
    WrongPartition { expected: u64, found: u64 },
    #[error("the batch starts at offset {found}, but the log continues at {expected}")]
    NotNext { expected: u64, found: u64 },
    #[error("the partition failed ({0}) and must be reopened")]
    Failed(IoError),
}

/// Where an appended batch landed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Appended {
    pub base_offset: u64,
    pub last_offset: u64,
    pub timestamp: u64,
}

#[derive(Debug, PartialEq, Eq)]
pub enum PartitionEvent {
    /// Recovery finished; appends and reads may start.
    Opened(RecoveryReport),
    /// Every message below `offset` is durable.
    Durable {
        offset: u64,
    },
    Read {
        id: u64,
        result: Result<ReadBatches, ReadError>,
    },
    /// A write failed: no message at or after `from_offset` was stored. The log continues from
    /// `from_offset` (those offsets will be given again), and every byte below it is intact.
    Rejected {
        from_offset: u64,
        error: IoError,
    },
    /// Retention or purge deleted the segment starting at this offset.
    SegmentDeleted {
        start_offset: u64,
    },
    /// A sync failed: what the page cache held is unknown. Reopen the partition.
    Failed(IoError),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    Opening,
    Open,
    Failed(IoError),
}

/// Batches appended to one segment since the last flush, in one buffer.
#[derive(Debug)]
struct Unit {
    segment_start: u64,
    position: u64,
    /// The unit's batches, each in the buffer it arrived in: written as they are, one write per
    /// batch submitted together (a vectored write without gathering the bytes into one buffer).
    batches: Vec<Bytes>,
    len: u64,
    base_offset: u64,
    end_offset: u64,
    messages: u64,
}

/// A unit whose write is in flight (its bytes went to `Io`).
#[derive(Debug)]
struct Writing {
    unit: u64,
    segment_start: u64,
    position: u64,
    len: u64,
    base_offset: u64,
    end_offset: u64,
    outstanding: u32,
    error: Option<IoError>,
}

#[derive(Debug)]
struct Syncing {
    covers: u64,
    outstanding: usize,
    error: Option<IoError>,
}

#[derive(Clone, Copy, Debug)]
enum Op {
    /// The `.log` or `.index` write of a unit.
    UnitWrite {
        unit: u64,
    },
    Sync,
    Read {
        id: u64,
    },
    SuperblockWrite,
    SuperblockSync,
    /// A truncate or remove that later writes must not overtake (the file may be written again).
    Ordering,
    /// A removal of a segment's files that retention or a purge let go: one segment at a time,
    /// the oldest first.
    Deletion,
    /// The rewrite of the damaged run that starts at this offset (`repair`).
    Repair {
        from_offset: u64,
    },
    /// The sync of a segment's index when it is sealed after its last write completed: later
    /// writes wait for it, as for `Ordering`.
    SealSync,
    /// Creating an empty file: nothing waits on it.
    Create,
    Recovery,
}

pub struct PartitionLog {
    config: PartitionConfig,
    namespace: Namespace,
    owner: u16,
    status: Status,
    recovery: Option<recovery::Recovery>,
    /// Oldest first; the last one is the active segment.
    segments: VecDeque<Segment>,
    appending: Option<Unit>,
    queued: VecDeque<Unit>,
    /// Unit writes in flight, in log order.
    writing: VecDeque<Writing>,
    unit_next: u64,
    unwritten_bytes: u64,
    /// Offsets below this are in completed writes.
    written_offset: u64,
    synced_offset: u64,
    sync_target: u64,
    syncing: Option<Syncing>,
    /// Files written since the last sync was issued.
    dirty: BTreeSet<FileId>,
    /// Ends of sealed segments whose last write completed but whose files are not yet synced: a
    /// sync is due for them even when nobody asked for one.
    frontier_pending: Vec<u64>,
    /// Truncates, removes and sealed indexes' syncs in flight; no write starts until they
    /// complete.
    ordering_ops: usize,
    /// The index of a segment sealed after its last write completed, to be synced before any
    /// write of the next segment (`seal_active`); issued once no truncate or remove is in flight,
    /// so that it covers them.
    seal_sync: Option<FileId>,
    /// Writes that create files or rewrite indexes; no segment is deleted until they complete (a
    /// late write would bring a deleted file back).
    creates_in_flight: usize,
    /// The superblock: its last durable sequence, the frontier it records (every message below
    /// it was synced) and one wanted next.
    superblock_sequence: u64,
    frontier: u64,
    /// Indexes are trusted below this instead of the frontier (`OwnerClaim::checked_to`).
    checked_to: Option<u64>,
    retained_from: u64,
    superblock_writing: Option<u64>,
    superblock_wanted: bool,
    /// A superblock write a full disk refused: tried again at the next `retry_refused_writes`
    /// (a tick), not at once, or a full disk turns each refusal into the next attempt.
    superblock_refused: bool,
    /// Segments to delete, each once the superblock of that sequence (which no longer retains
    /// them) is durable: (sequence, start offset).
    delete_after_superblock: Vec<(u64, u64)>,
    reads: BTreeMap<u64, read::ReadInFlight>,
    parked: Vec<ReadRequest>,
    events: VecDeque<PartitionEvent>,
    ops: BTreeMap<u64, Op>,
    token_next: u64,
    last_timestamp: u64,
    /// (base offset, end offset, segment start, position) of the newest batches, oldest first.
    tail: VecDeque<truncate::TailBatch>,
    /// Segments let go whose files are still to be removed, oldest first, and the removals of
    /// the one being removed still in flight.
    deletions: VecDeque<u64>,
    deletions_in_flight: usize,
    deleting: Option<u64>,
    /// Rewrites of damaged runs in flight, and runs repaired since the log was opened.
    repairing: Vec<repair::RepairWrite>,
    repaired: u64,
    /// A repair's bytes are written and not yet synced: the next sync is issued for them.
    repairs_unsynced: bool,
    /// A cut whose file operations wait for its superblock; no write starts meanwhile.
    cut_pending: Option<truncate::PendingCut>,
    /// The superblock is the owner's (`open_owned`): the log writes none and reads none.
    owned: bool,
}

/// What the owner of a log's superblock (`open_owned`) recorded of it: every message below
/// `frontier` was durable, and nothing below `retained_from` is kept. The owner derives both from
/// its own durable state (a partition group's checkpoint and WAL), so the log needs no superblock
/// of its own and never writes one.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OwnerClaim {
    pub frontier: u64,
    pub retained_from: u64,
    /// Where the owner has checked the batches up to, if short of `frontier`: segments below it
    /// are trusted from their indexes, the rest are read whole, so that every batch there is
    /// remembered (`remembered`) for the owner to check and cut (its WAL may claim batches
    /// durable that it has not committed yet). `None`: the frontier.
    pub checked_to: Option<u64>,
}

impl PartitionLog {
    /// A partition log that opens (creates or recovers) its files in `namespace`. `owner` tells
    /// this log's completions from those of others on the same driver.
    pub fn open(io: &mut impl Io, config: PartitionConfig, namespace: Namespace, owner: u16) -> PartitionLog {
        assert!(config.segment_size > 0 && config.flush_bytes > 0 && config.flush_messages > 0);
        assert!(config.reads_max > 0 && config.scan_chunk_bytes >= batch::BATCH_HEADER_SIZE as u64);
        let mut log = PartitionLog {
            config,
            namespace,
            owner,
            status: Status::Opening,
            recovery: None,
            segments: VecDeque::new(),
            appending: None,
            queued: VecDeque::new(),
            writing: VecDeque::new(),
            unit_next: 0,
            unwritten_bytes: 0,
            written_offset: 0,
            synced_offset: 0,
            sync_target: 0,
            syncing: None,
            dirty: BTreeSet::new(),
            frontier_pending: Vec::new(),
            ordering_ops: 0,
            seal_sync: None,
            creates_in_flight: 0,
            superblock_sequence: 0,
            frontier: 0,
            checked_to: None,
            retained_from: 0,
            superblock_writing: None,
            superblock_wanted: false,
            superblock_refused: false,
            delete_after_superblock: Vec::new(),
            reads: BTreeMap::new(),
            parked: Vec::new(),
            events: VecDeque::new(),
            ops: BTreeMap::new(),
            token_next: 0,
            last_timestamp: 0,
            tail: VecDeque::new(),
            deletions: VecDeque::new(),
            deletions_in_flight: 0,
            deleting: None,
            repairing: Vec::new(),
            repaired: 0,
            repairs_unsynced: false,
            cut_pending: None,
            owned: false,
        };
        log.recovery = Some(recovery::Recovery::start(&mut log, io));
        log
    }

    /// A partition log whose superblock belongs to its owner, which says at open what it recorded
    /// (`claim`). Such a log reads and writes no superblock: whatever the log would record there
    /// counts as durable at once. So segments that retention or a purge removes are deleted at
    /// once, and a cut of synced bytes is the owner's to record first. The owner's claim must
    /// be where it is now retained from: a log that starts after `claim.retained_from` has lost
    /// its head (a segment whose files were never synced), and recovery drops what cannot stand
    /// after the hole, as with a superblock.
    pub fn open_owned(
        io: &mut impl Io,
        config: PartitionConfig,
        namespace: Namespace,
        owner: u16,
        claim: OwnerClaim,
    ) -> PartitionLog {
        let mut log = PartitionLog::open(io, config, namespace, owner);
        log.owned = true;
        log.frontier = claim.frontier;
        log.retained_from = claim.retained_from;
        log.checked_to = claim.checked_to;
        log
    }

    pub fn status(&self) -> Status {
        self.status
    }

    /// The first offset the partition still holds.
    pub fn first_offset(&self) -> u64 {
        self.segments.front().map_or(0, |segment| segment.start_offset)
    }

    /// The offset the next appended message gets.
    pub fn end_offset(&self) -> u64 {
        self.segments.back().map_or(0, |segment| segment.end_offset)
    }

    /// Offsets below this are in completed writes (in the page cache, not yet durable).
    pub fn written_offset(&self) -> u64 {
        self.written_offset
    }

    pub fn synced_offset(&self) -> u64 {
        self.synced_offset
    }

    /// Bytes of log held, across segments.
    pub fn size(&self) -> u64 {
        self.segments.iter().map(|segment| segment.size).sum()
    }

    pub fn segment_count(&self) -> usize {
        self.segments.len()
    }

    /// (start offset, end offset, size, sealed) of each segment, oldest first.
    pub fn segments(&self) -> impl Iterator<Item = (u64, u64, u64, bool)> + '_ {
        self.segments.iter().map(|segment| (segment.start_offset, segment.end_offset, segment.size, segment.sealed))
    }

    /// Damaged runs rewritten whole since the log was opened (`repair`).
    pub fn repaired(&self) -> u64 {
        self.repaired
    }

    /// Whether a segment starts at `offset` (an empty active one after a seal counts).
    pub fn starts_segment(&self, offset: u64) -> bool {
        let at = self.segments.partition_point(|segment| segment.start_offset < offset);
        self.segments.get(at).is_some_and(|segment| segment.start_offset == offset)
    }

    /// The active segment's size in bytes (0 when it is sealed or empty).
    pub fn active_size(&self) -> u64 {
        self.segments.back().filter(|segment| !segment.sealed).map_or(0, |segment| segment.size)
    }

    /// I/O requests of this log not completed yet (a failed log is reopened only at 0, so that no
    /// late completion of the old one reaches the new, and no late write of the old one lands in
    /// files the new one's recovery has already listed and read: past the end it found, uncut).
    pub fn ops_in_flight(&self) -> usize {
        self.ops.len()
    }

    /// True when nothing is in flight: no unit, write, sync, read, superblock or removal.
    pub fn is_idle(&self) -> bool {
        self.appending.is_none()
            && self.queued.is_empty()
            && self.ops.is_empty()
            && self.parked.is_empty()
            && self.cut_pending.is_none()
            && self.deletions.is_empty()
    }

    pub fn poll_event(&mut self) -> Option<PartitionEvent> {
        self.events.pop_front()
    }

    fn token(&mut self, op: Op) -> Token {
        let sequence = self.token_next & ((1 << TOKEN_OWNER_SHIFT) - 1);
        self.token_next += 1;
        assert!(!self.ops.contains_key(&sequence), "token space wrapped onto an op in flight");
        self.ops.insert(sequence, op);
        Token((PARTITION_TOKEN_TAG << TOKEN_TAG_SHIFT) | ((self.owner as u64) << TOKEN_OWNER_SHIFT) | sequence)
    }

    fn segment_position(&self, start_offset: u64) -> Option<usize> {
        self.segments.binary_search_by_key(&start_offset, |segment| segment.start_offset).ok()
    }

    fn segment_mut(&mut self, start_offset: u64) -> &mut Segment {
        let at = self.segment_position(start_offset).expect("segment exists");
        &mut self.segments[at]
    }

    fn file(&self, kind: FileKind) -> FileId {
        FileId::new(self.namespace, kind)
    }

    /// Stamps and appends one batch a client sent. `timestamp` (microseconds) is the partition's
    /// clock; stored timestamps never go backwards.
    pub fn append(&mut self, io: &mut impl Io, mut batch: Vec<u8>, timestamp: u64) -> Result<Appended, AppendError> {
        self.admit_append(batch.len())?;
        let timestamp = timestamp.max(self.last_timestamp);
        let base_offset = self.end_offset();
        let batch::Stamped { header, timestamp_max } =
            batch::stamp(&mut batch, self.config.partition_id, base_offset, timestamp)?;
        self.last_timestamp = timestamp;
        self.push_batch(io, &header, timestamp_max, batch.into());
        Ok(Appended { base_offset, last_offset: header.last_offset(), timestamp })
    }

    /// Whether an append of `len` bytes may go in now: the log is open, and what waits in memory
    /// for a write stays within `unwritten_bytes_max` (one batch always goes in alone).
    fn admit_append(&self, len: usize) -> Result<(), AppendError> {
        match self.status {
            Status::Open => {}
            Status::Opening => return Err(AppendError::NotOpen),
            Status::Failed(error) => return Err(AppendError::Failed(error)),
        }
        if self.unwritten_bytes + len as u64 > self.config.unwritten_bytes_max && self.unwritten_bytes > 0 {
            return Err(AppendError::Busy);
        }
        Ok(())
    }

    fn push_batch(&mut self, io: &mut impl Io, header: &BatchHeader, timestamp_max: u64, bytes: Bytes) {
        let interval = self.config.index_interval_bytes;
        let active = self.segments.back_mut().expect("an open partition has an active segment");
        assert!(!active.sealed);
        let position = active.size;
        active.record_batch(header, timestamp_max, interval);
        let (segment_start, crossed) = (active.start_offset, active.size >= self.config.segment_size);
        self.remember_batch(header, segment_start, position);
        let unit = self.appending.get_or_insert_with(|| Unit {
            segment_start,
            position,
            batches: Vec::new(),
            len: 0,
            base_offset: header.base_offset,
            end_offset: header.base_offset,
            messages: 0,
        });
        assert_eq!(unit.position + unit.len, position);
        unit.len += bytes.len() as u64;
        unit.batches.push(bytes);
        unit.end_offset = header.end_offset();
        unit.messages += header.message_count as u64;
        self.unwritten_bytes += header.batch_length;
        let full = unit.messages >= self.config.flush_messages || unit.len >= self.config.flush_bytes;
        if crossed {
            self.seal_active();
        } else if full {
            self.flush_unit();
        }
        self.pump(io);
    }

    /// Seals the active segment (its unit is closed) and starts a new, empty one after it. If
    /// every write of it completed already (an owner sealing between batches), a sync may have
    /// made its end durable without its index, and no later write will mark the index: recovery
    /// trusts a sealed segment's index once the next segment exists below the frontier, so the
    /// index is synced (`seal_sync`) before any write of the next segment.
    fn seal_active(&mut self) {
        self.flush_unit();
        let namespace = self.namespace;
        let active = self.segments.back_mut().expect("active segment");
        active.sealed = true;
        let end_offset = active.end_offset;
        if active.written_size == active.size {
            // A pending seal sync holds back every unit write, so no later segment can have all
            // of its (non-empty) writes completed while one is pending: none is ever replaced.
            assert!(self.seal_sync.is_none(), "a sealed index's sync is pending at the next seal");
            self.seal_sync = Some(active.index_file(namespace));
        }
        self.segments.push_back(Segment::new(end_offset));
    }

    fn flush_unit(&mut self) {
        if let Some(unit) = self.appending.take() {
            self.queued.push_back(unit);
        }
    }

    /// Hands every appended batch to a write now, whatever the thresholds say.
    pub fn flush(&mut self, io: &mut impl Io) {
        self.flush_unit();
        self.pump(io);
    }

    /// Asks for every message appended so far to become durable; `Durable` reports it.
    pub fn sync(&mut self, io: &mut impl Io) {
        if self.status != Status::Open {
            return;
        }
        self.sync_target = self.sync_target.max(self.end_offset());
        self.flush(io);
    }

    /// Starts whatever can start: the next unit's write, a sync, a superblock write.
    fn pump(&mut self, io: &mut impl Io) {
        if let Status::Failed(_) = self.status {
            return;
        }
        if self.owned && self.superblock_wanted && self.superblock_writing.is_none() {
            // Durable at once: what waits for it (a cut, deletions) goes in this same pump.
            self.write_superblock(io);
        }
        self.start_pending_cut(io);
        // The thresholds bound what may wait in memory; an idle device is not kept waiting for
        // them. So a unit goes out at once when no write is in flight, and while writes are in
        // flight it grows: the next write (and the next sync, the group commit) covers every
        // batch that arrived meanwhile.
        if self.writing.is_empty() && self.queued.is_empty() {
            self.flush_unit();
        }
        if self.ordering_ops == 0 {
            if let Some(index_file) = self.seal_sync.take() {
                let token = self.token(Op::SealSync);
                io.sync(index_file, token);
                self.ordering_ops += 1;
            }
        }
        let failed = self.writing.iter().any(|writing| writing.error.is_some());
        while !failed
            && self.ordering_ops == 0
            && self.seal_sync.is_none()
            && self.cut_pending.is_none()
            && self.writing.len() < self.config.writes_max
        {
            // A segment whose files a deletion still has to remove (a purge let it go, and the
            // log starts it again) is written only once they are gone.
            let deleting = |start: u64| self.deleting == Some(start) || self.deletions.contains(&start);
            if self.queued.front().is_some_and(|unit| deleting(unit.segment_start)) {
                break;
            }
            let Some(unit) = self.queued.pop_front() else { break };
            self.write_unit(io, unit);
        }
        let sync_due = self.sync_target > self.synced_offset && self.written_offset > self.synced_offset;
        let wanted = sync_due || !self.frontier_pending.is_empty() || self.repairs_unsynced;
        if self.syncing.is_none() && wanted && !self.dirty.is_empty() {
            self.issue_sync(io);
        }
        if self.superblock_wanted && self.superblock_writing.is_none() {
            self.write_superblock(io);
        }
    }

    fn write_unit(&mut self, io: &mut impl Io, unit: Unit) {
        let namespace = self.namespace;
        let segment = self.segment_mut(unit.segment_start);
        let entries_end = segment.index.partition_point(|entry| entry.position < unit.position + unit.len);
        let mut index_bytes = Vec::new();
        for entry in &segment.index[segment.index_written..entries_end] {
            entry.encode_into(&mut index_bytes);
        }
        let index_at = segment.index_written as u64 * segment::INDEX_ENTRY_SIZE as u64;
        segment.index_written = entries_end;
        let (log_file, index_file) = (segment.log_file(namespace), segment.index_file(namespace));
        let id = self.unit_next;
        self.unit_next += 1;
        let mut writing = Writing {
            unit: id,
            segment_start: unit.segment_start,
            position: unit.position,
            len: unit.len,
            base_offset: unit.base_offset,
            end_offset: unit.end_offset,
            outstanding: 1,
            error: None,
        };
        writing.outstanding = 0;
        let mut position = unit.position;
        for batch in unit.batches {
            let len = batch.len() as u64;
            let token = self.token(Op::UnitWrite { unit: id });
            io.write(log_file, position, batch, token);
            writing.outstanding += 1;
            position += len;
        }
        if !index_bytes.is_empty() {
            writing.outstanding += 1;
            let token = self.token(Op::UnitWrite { unit: id });
            io.write(index_file, index_at, index_bytes.into(), token);
        }
        self.writing.push_back(writing);
    }

    fn issue_sync(&mut self, io: &mut impl Io) {
        let files = std::mem::take(&mut self.dirty);
        self.frontier_pending.clear();
        self.repairs_unsynced = false;
        self.syncing = Some(Syncing { covers: self.written_offset, outstanding: files.len(), error: None });
        for file in files {
            let token = self.token(Op::Sync);
            io.sync(file, token);
        }
    }

    fn write_superblock(&mut self, io: &mut impl Io) {
        self.superblock_wanted = false;
        let sequence = self.superblock_sequence + 1;
        if self.owned {
            self.superblock_writing = Some(sequence);
            self.on_superblock_durable(io);
            return;
        }
        let superblock = Superblock {
            sequence,
            parent_checksum: 0,
            vsr_state: VsrState {
                offset_frontier: self.frontier,
                retained_from: self.retained_from,
                ..VsrState::default()
            },
        };
        let kind = if sequence % 2 == 1 { FileKind::SuperblockA } else { FileKind::SuperblockB };
        let token = self.token(Op::SuperblockWrite);
        io.write(self.file(kind), 0, superblock.encode().into(), token);
        self.superblock_writing = Some(sequence);
    }

    fn superblock_file(sequence: u64) -> FileKind {
        if sequence % 2 == 1 {
            FileKind::SuperblockA
        } else {
            FileKind::SuperblockB
        }
    }

    /// The superblock being written is durable (or, owned, counts as such): the segments it no
    /// longer retains go, and a recovery waiting for it finishes.
    fn on_superblock_durable(&mut self, io: &mut impl Io) {
        self.superblock_sequence = self.superblock_writing.take().expect("superblock in flight");
        let durable = self.superblock_sequence;
        let (due, later) =
            std::mem::take(&mut self.delete_after_superblock).into_iter().partition(|(at, _)| *at <= durable);
        self.delete_after_superblock = later;
        // The oldest first, one segment at a time: a crash part way leaves the newest of them,
        // a log that starts later, never one with a hole in it (devices complete requests in
        // any order).
        self.deletions.extend(due.into_iter().map(|(_, start_offset)| start_offset));
        self.delete_next(io);
        if let Some(recovery) = self.recovery.take() {
            recovery.finish(self);
        }
    }

    /// Called once a tick by the log's owner: a superblock write that a full disk refused is
    /// tried again.
    pub fn retry_refused_writes(&mut self, io: &mut impl Io) {
        if std::mem::take(&mut self.superblock_refused) {
            self.superblock_wanted = true;
            self.pump(io);
        }
    }

    /// Feeds a completion that `token_owner` says is this log's.
    pub fn on_completion(&mut self, io: &mut impl Io, completion: Completion) {
        let token = completion.token();
        assert_eq!(token_owner(token), Some(self.owner), "completion for another owner");
        let op = self.ops.remove(&(token.0 & ((1 << TOKEN_OWNER_SHIFT) - 1))).expect("completion of an op in flight");
        match op {
            Op::Recovery => {
                let mut recovery = self.recovery.take().expect("recovering");
                let done = recovery.on_completion(self, io, completion);
                if !done {
                    self.recovery = Some(recovery);
                }
            }
            Op::UnitWrite { unit } => {
                let result = match completion {
                    Completion::Write { result, .. } => result,
                    other => panic!("write op completed as {other:?}"),
                };
                self.on_write(io, unit, result);
            }
            Op::Sync => {
                let result = match completion {
                    Completion::Sync { result, .. } => result,
                    other => panic!("sync op completed as {other:?}"),
                };
                self.on_sync(result);
            }
            Op::Read { id } => self.on_read(io, id, completion),
            Op::SuperblockWrite => {
                let sequence = self.superblock_writing.expect("superblock in flight");
                match completion {
                    Completion::Write { result: Ok(()), .. } => {
                        let token = self.token(Op::SuperblockSync);
                        io.sync(self.file(Self::superblock_file(sequence)), token);
                    }
                    // The write went to the copy that does not hold the durable superblock, so a
                    // full disk damaged nothing: try again.
                    Completion::Write { result: Err(IoError::NoSpace), .. } => {
                        self.superblock_writing = None;
                        self.superblock_refused = true;
                    }
                    Completion::Write { result: Err(error), .. } => self.fail(error),
                    other => panic!("superblock write completed as {other:?}"),
                }
            }
            Op::SuperblockSync => match completion {
                Completion::Sync { result: Ok(()), .. } => self.on_superblock_durable(io),
                Completion::Sync { result: Err(error), .. } => self.fail(error),
                other => panic!("superblock sync completed as {other:?}"),
            },
            Op::Ordering => self.ordering_ops -= 1,
            Op::SealSync => {
                self.ordering_ops -= 1;
                match completion {
                    Completion::Sync { result: Ok(()), .. } => {}
                    // The kernel may have dropped the index's dirty pages: only a reopen, which
                    // checks the index against the log, can say what it holds.
                    Completion::Sync { result: Err(error), .. } => self.fail(error),
                    other => panic!("an index sync completed as {other:?}"),
                }
            }
            Op::Deletion => {
                self.deletions_in_flight -= 1;
                if self.deletions_in_flight == 0 {
                    self.deleting = None;
                }
                self.delete_next(io);
            }
            Op::Repair { from_offset } => {
                let result = match completion {
                    Completion::Write { result, .. } => result,
                    other => panic!("repair write completed as {other:?}"),
                };
                self.on_repair_written(from_offset, result);
            }
            Op::Create => self.creates_in_flight -= 1,
        }
        self.pump(io);
    }

    fn fail(&mut self, error: IoError) {
        if self.status != Status::Failed(error) {
            self.status = Status::Failed(error);
            self.events.push_back(PartitionEvent::Failed(error));
        }
    }

    fn on_write(&mut self, io: &mut impl Io, unit: u64, result: Result<(), IoError>) {
        let writing = self.writing.iter_mut().find(|writing| writing.unit == unit).expect("unit write in flight");
        writing.outstanding -= 1;
        if let Err(error) = result {
            writing.error.get_or_insert(error);
        }
        // Writes complete in any order; they count as written in log order.
        while self.writing.front().is_some_and(|front| front.outstanding == 0) {
            if let Some(error) = self.writing.front().and_then(|front| front.error) {
                // Cut only once nothing else is in flight: a later write would land past the cut.
                if self.writing.iter().all(|writing| writing.outstanding == 0) {
                    let failed = self.writing.pop_front().expect("front");
                    self.writing.clear();
                    self.reject_from(io, &failed, error);
                }
                return;
            }
            let writing = self.writing.pop_front().expect("front");
            self.written(io, writing);
        }
    }

    fn written(&mut self, io: &mut impl Io, writing: Writing) {
        let namespace = self.namespace;
        let segment = self.segment_mut(writing.segment_start);
        assert_eq!(segment.written_size, writing.position, "units are written in order");
        let (log_file, index_file) = (segment.log_file(namespace), segment.index_file(namespace));
        segment.written_size += writing.len;
        let sealed_end = (segment.sealed && segment.written_size == segment.size).then_some(segment.end_offset);
        self.unwritten_bytes -= writing.len;
        assert_eq!(self.written_offset, writing.base_offset);
        self.written_offset = writing.end_offset;
        self.frontier_pending.extend(sealed_end);
        if self.config.bug == Some(PartitionBug::DurableBeforeSync) && self.written_offset > self.synced_offset {
            self.synced_offset = self.written_offset;
            self.events.push_back(PartitionEvent::Durable { offset: self.synced_offset });
        }
        // Dirty from the moment the write completed: a sync issued before that did not cover it.
        self.dirty.insert(log_file);
        // The index of the active segment is not synced with its batches: recovery never
        // trusts it (it reads the active segment whole and rebuilds its index), so a sync per
        // group commit would flush it for nothing. It is synced once its segment is sealed, by
        // the sync that moves the frontier past the segment's end: from then on recovery trusts
        // it, and every entry of the segment was written by this unit or one before it. (A
        // segment sealed after its last write completed is synced by `seal_active`.)
        if sealed_end.is_some() {
            self.dirty.insert(index_file);
        }
        self.retry_parked(io);
    }

    /// A write failed (a full disk, a device error): every message from the failed unit on is
    /// dropped and the log continues from its first offset. Bytes below it are untouched.
    fn reject_from(&mut self, io: &mut impl Io, writing: &Writing, error: IoError) {
        let from_offset = writing.base_offset;
        self.tail.retain(|batch| batch.base_offset < from_offset);
        self.appending = None;
        self.queued.clear();
        self.unwritten_bytes = 0;
        self.frontier_pending.retain(|end| *end <= writing.segment_start);
        // Drop segments that began at or after the failed unit, then cut the one it was in.
        while self.segments.back().is_some_and(|segment| segment.start_offset > writing.segment_start) {
            let segment = self.segments.pop_back().expect("segment");
            self.delete_segment_files(io, segment.start_offset);
        }
        let namespace = self.namespace;
        let segment = self.segments.back_mut().expect("the failed unit's segment");
        assert_eq!(segment.start_offset, writing.segment_start);
        segment.sealed = false;
        segment.size = writing.position;
        segment.written_size = writing.position;
        segment.end_offset = from_offset;
        // Every entry left was handed to the write of an earlier unit, which completed.
        segment.index.retain(|entry: &IndexEntry| entry.position < writing.position);
        segment.index_written = segment.index.len();
        let (log_file, index_file) = (segment.log_file(namespace), segment.index_file(namespace));
        let index_len = segment.index_written as u64 * segment::INDEX_ENTRY_SIZE as u64;
        // A device that failed a write is not written again (its owner stops on it): the files
        // are left as they are, and what lies past the cut in memory (the failed write's bytes,
        // whole or in part) is a torn tail to the next open. Reads below the cut go on.
        if error != IoError::Device {
            let token = self.token(Op::Ordering);
            io.truncate(log_file, writing.position, token);
            let token = self.token(Op::Ordering);
            io.truncate(index_file, index_len, token);
            self.ordering_ops += 2;
        }
        // Cut files hold no durable promise until synced, as `start_pending_cut` says too.
        self.dirty.insert(log_file);
        self.dirty.insert(index_file);
        self.last_timestamp = self.segments.back().map_or(0, |segment| segment.last_timestamp).max(self.last_timestamp);
        self.sync_target = self.sync_target.min(from_offset);
        self.events.push_back(PartitionEvent::Rejected { from_offset, error });
        self.retry_parked(io);
    }

    fn on_sync(&mut self, result: Result<(), IoError>) {
        let syncing = self.syncing.as_mut().expect("sync in flight");
        syncing.outstanding -= 1;
        if let Err(error) = result {
            syncing.error.get_or_insert(error);
        }
        if syncing.outstanding > 0 {
            return;
        }
        let syncing = self.syncing.take().expect("sync in flight");
        if let Some(error) = syncing.error {
            // After a failed fsync the page cache may have dropped the dirty pages: only a
            // reopen, which reads what is really on disk, can say what is durable.
            self.fail(error);
            return;
        }
        if syncing.covers > self.synced_offset {
            self.synced_offset = syncing.covers;
            self.events.push_back(PartitionEvent::Durable { offset: self.synced_offset });
        }
        // The superblock records how far the log is durable, so that recovery can tell damage
        // below that point (corruption: keep what follows it) from a torn tail (cut it). Writes
        // coalesce: while one is in flight, the next records the latest frontier.
        if syncing.covers > self.frontier {
            self.frontier = syncing.covers;
            self.superblock_wanted = true;
        }
    }

    /// Deletes sealed segments past the topic's retention: older than the message expiry, or the
    /// oldest while the partition is over its size. Never the active segment, never one not yet
    /// synced.
    pub fn apply_retention(&mut self, io: &mut impl Io, now_us: u64) -> usize {
        let (expiry, max_size) = (self.config.message_expiry_us, self.config.max_size);
        self.delete_oldest_while(io, |log, oldest| {
            let expired = expiry.is_some_and(|expiry| oldest.last_timestamp.saturating_add(expiry) <= now_us);
            let oversized = max_size.is_some_and(|max| log.size() > max);
            expired || oversized
        })
    }

    /// Deletes the oldest segments while `goes` says so of the oldest: never the active
    /// segment, never one not yet synced. The number deleted.
    fn delete_oldest_while(&mut self, io: &mut impl Io, goes: impl Fn(&PartitionLog, &Segment) -> bool) -> usize {
        if self.status != Status::Open || self.creates_in_flight > 0 || self.cut_pending.is_some() {
            return 0;
        }
        let mut deleted = 0;
        while let Some(oldest) = self.segments.front() {
            let deletable = oldest.sealed && oldest.end_offset <= self.frontier && self.segments.len() > 1;
            if !deletable || !goes(self, oldest) {
                break;
            }
            let segment = self.segments.pop_front().expect("oldest");
            self.delete_after_superblock(segment.start_offset);
            deleted += 1;
        }
        if deleted > 0 {
            self.pump(io);
        }
        deleted
    }

    /// Forgets a segment now (reads start after it) and deletes its files once a superblock that
    /// no longer retains it is durable: a crash in between leaves files recovery deletes, never a
    /// log whose start is missing.
    fn delete_after_superblock(&mut self, start_offset: u64) {
        self.retained_from = self.first_offset().max(self.retained_from);
        let sequence = self.superblock_writing.unwrap_or(self.superblock_sequence) + 1;
        self.delete_after_superblock.push((sequence, start_offset));
        self.superblock_wanted = true;
    }

    /// Removes the files of the oldest segment let go, once the one before it is removed.
    fn delete_next(&mut self, io: &mut impl Io) {
        if self.deletions_in_flight > 0 {
            return;
        }
        let Some(start_offset) = self.deletions.pop_front() else { return };
        self.deleting = Some(start_offset);
        self.deletions_in_flight += self.remove_segment_files(io, start_offset, Op::Deletion);
    }

    /// Removes a cut segment's files at once; later writes wait for the removals.
    pub(super) fn delete_segment_files(&mut self, io: &mut impl Io, start_offset: u64) {
        self.ordering_ops += self.remove_segment_files(io, start_offset, Op::Ordering);
    }

    /// Issues the removals of a segment's two files under `op`; returns how many.
    fn remove_segment_files(&mut self, io: &mut impl Io, start_offset: u64, op: Op) -> usize {
        for kind in [FileKind::Segment(start_offset), FileKind::Index(start_offset)] {
            let file = self.file(kind);
            self.dirty.remove(&file);
            let token = self.token(op);
            io.remove(file, token);
        }
        self.events.push_back(PartitionEvent::SegmentDeleted { start_offset });
        2
    }

    /// Seals the active segment now, if it holds anything: the next batch starts a new one. An
    /// owner that decides where segments end (a partition group, whose replicas must all seal at
    /// the same batch) sets `segment_size` out of reach and seals with this.
    pub fn seal(&mut self, io: &mut impl Io) {
        if self.status != Status::Open || self.segments.back().is_none_or(Segment::is_empty) {
            return;
        }
        self.seal_active();
        self.pump(io);
    }

    /// Deletes the sealed segments that end at or below `offset`, the oldest first (an owner's
    /// retention: it decided which messages went). Never the active segment, never one not yet
    /// synced. The number deleted.
    pub fn retain_from(&mut self, io: &mut impl Io, offset: u64) -> usize {
        self.delete_oldest_while(io, |_, oldest| oldest.end_offset <= offset)
    }

    /// Deletes every message: a new, empty segment starts at the current end offset (offsets
    /// never go back). `false` while writes are in flight: purge an idle partition.
    pub fn purge(&mut self, io: &mut impl Io) -> bool {
        let end = self.end_offset();
        self.purge_to(io, end)
    }

    /// Deletes every message and goes on at `offset` (at least the end, unless the log holds
    /// nothing): the next batch appended must start there. An owner whose log must skip what it
    /// can no longer get (a group that took a checkpoint from a peer past everything this log
    /// holds) starts it again there; an owner whose empty log came back from a crash starting
    /// past what the owner holds (the first segment's file was created but never synced, and a
    /// later one's survived) starts it again where the owner's state goes on.
    pub fn purge_to(&mut self, io: &mut impl Io, offset: u64) -> bool {
        if self.status != Status::Open || !self.is_idle() || self.syncing.is_some() || self.creates_in_flight > 0 {
            return false;
        }
        let empty = self.first_offset() == self.end_offset();
        let end = if empty { offset } else { self.end_offset().max(offset) };
        if end != self.end_offset() {
            // Nothing lies between: every offset below `end` the log holds is written and synced.
            self.written_offset = end;
            self.synced_offset = end;
            self.sync_target = end;
            self.events.push_back(PartitionEvent::Durable { offset: end });
        }
        // An empty active segment already starts at the end: it stays, and only older ones go.
        let keep_active = self.segments.back().is_some_and(|active| active.is_empty() && active.start_offset == end);
        let old_count = self.segments.len() - usize::from(keep_active);
        let old: Vec<u64> = self.segments.drain(..old_count).map(|segment| segment.start_offset).collect();
        self.tail.clear();
        if !keep_active {
            self.segments.push_back(Segment::new(end));
            self.create_active_files(io);
        }
        self.frontier = end;
        for start_offset in old {
            self.delete_after_superblock(start_offset);
        }
        self.retained_from = end;
        self.superblock_wanted = true;
        self.pump(io);
        true
    }

    /// Creates the active segment's empty files (they must exist before a superblock names them).
    fn create_active_files(&mut self, io: &mut impl Io) {
        let namespace = self.namespace;
        let active = self.segments.back().expect("active segment");
        let (log_file, index_file) = (active.log_file(namespace), active.index_file(namespace));
        for file in [log_file, index_file] {
            let token = self.token(Op::Create);
            io.write(file, 0, Bytes::new(), token);
            self.creates_in_flight += 1;
            self.dirty.insert(file);
        }
    }
}
