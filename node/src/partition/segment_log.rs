//! `SegmentLog`: a partition group's segment log on its node, kept by the shard beside the group's
//! replica. It is where the group's messages live: the replica's `PartitionMachine` keeps only
//! their directory.
//!
//! **Written as prepares arrive** (`speculate`): a prepare's stamped batches go to their final
//! place in the active segment as soon as the journal holds the prepare, before it commits, and
//! the replica acknowledges a prepare only once the log holds its batches (`ack_cursor`: synced,
//! or written when the topic does not enforce fsync). The log seals where the machine will (once
//! a batch leaves its segment holding the topic's `segment_size`). A tail the group's log no
//! longer holds (a view change replaced those prepares, or a crash took them from the WAL) is cut.
//!
//! **Checked as they commit** (`follow`): past `verified_to`, every batch the log holds is compared
//! with the machine's directory (offsets, length, `batch_checksum`, where segments start) as the
//! machine applies it; a batch that differs is cut and the applied one appended. Applied batches
//! the log lacks are appended from what was applied (`pending`), or fetched from a peer's log.
//! Retention follows the machine's first offset, but no further than the group's durable
//! checkpoint still needs. Its superblock is the group's (`PartitionLog::open_owned`): the log
//! writes none; the group's checkpoints wait until the log is durable and checked through their
//! cursor (`durable_cursor`), and the log opens claiming the durable checkpoint's cursor, so that
//! damage below it is told from a torn tail.
//!
//! **Fetched and repaired from peers**: a log that lacks batches its machine holds (a checkpoint
//! from a peer, a crash or damage that cut the files) asks a peer's log for the range from its
//! end (`RequestBatches`, answered with whole batches, at most `FETCH_BYTES_MAX`, each checked
//! against the directory before it goes in). A damaged run that recovery kept inside the log is
//! written again in place with a peer's batches (`repair_next`). Damage that cannot be repaired
//! so (a run past what the machine applied, larger than one answer, or not exactly its batches),
//! or that a read finds twice in a row, drops the whole log on a cluster: it is fetched again. A
//! single node keeps every batch but the damaged one.
//!
//! Bounds: the batches waiting here are bounded by the group's WAL (its checkpoints wait for this
//! log, and the WAL holds at most `journal_slots` ops past the durable one); appends stop at the
//! log's own bound (`unwritten_bytes_max`, refused as `Busy`) and go on at the next step; one
//! fetch and one repair in flight, `FETCHES_SERVED_MAX` peers' fetches served at once (more are
//! dropped: the peer asks again), the batches it checks by the log's `tail_batches_max`.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use vireo_io::{Bytes, Completion, FileId, FileKind, Io, IoError, Namespace, Peer};
use vireo_protocol::config::Bug;
use vireo_protocol::header::{group_of, Command, Header, Message};
use vireo_protocol::replica::{FillsWanted, LogMark};
use vireo_protocol::request::batched_requests;
use vireo_protocol::Replica;

use vireo_storage::batch::{self, BatchHeader};
use vireo_storage::partition::{
    owner_token, AppendError, OwnerClaim, PartitionConfig, PartitionEvent, PartitionLog, ReadBatches, ReadError,
    ReadRequest, ReadStart, RecoveryReport, Status, TruncateError,
};

use super::machine::{prepared_send, PreparedSend};
use super::PartitionMachine;

/// Owner number of every group's log: a group's I/O tokens carry its slot in the bits a log's
/// owner would use, so the owner is always 0 and the slot tells groups apart.
pub const LOG_OWNER: u16 = 0;
/// Bytes of batches one `Batches` answer carries at most (it carries at least one whole batch).
pub const FETCH_BYTES_MAX: u64 = 1 << 20;
/// Ticks a fetch waits for its answer before it asks the next peer.
pub const FETCH_TICKS_MAX: u64 = 20;
/// Batches a log remembers (offsets, length, checksum) to check what commits against: 1024 WAL
/// slots past the checkpoint times 32 sends a prepare (48 bytes each, about 1.5 MiB at most).
pub const TAIL_BATCHES_MAX: usize = 1 << 15;
/// Refused answers in a row for one damaged run before the log is dropped and fetched whole.
pub const REPAIRS_REFUSED_MAX: u32 = 8;
/// Peers' fetches one log serves at once.
pub const FETCHES_SERVED_MAX: usize = 4;
/// Ticks the log waits after a write was refused (a full disk, a failing one) before it appends
/// again: the batches wait in `pending` (they are in the WAL), and the disk is not asked again
/// at once after every refusal.
pub const REFUSED_APPEND_PAUSE_TICKS: u64 = 10;
/// Read ids of served fetches carry this bit (the node's poll reads never do).
const FETCH_READ: u64 = 1 << 63;
/// Read ids of fills (the group's elided prepares, read back while its replica opens).
const FILL_READ: u64 = 1 << 62;

/// What a group's segment log did, since its shard started.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SegmentLogCounters {
    pub batches_appended: u64,
    /// Bytes of stamped batches appended.
    pub segment_bytes: u64,
    pub segments_sealed: u64,
    pub segments_deleted: u64,
    /// Appends refused because too much waited to be written (retried at the next step).
    pub appends_busy: u64,
    /// Appends refused for any other reason (the log failed, or does not continue where the
    /// batch starts: a divergence the simulator's end check reports).
    pub appends_refused: u64,
    /// Times the log started again at the machine's first offset, having none of its batches.
    pub skips_ahead: u64,
    pub failures: u64,
    /// Opens whose recovery cut the log (a torn tail, or damage: the group claims nothing yet) or
    /// reported damaged batches; the log takes them again from a peer.
    pub opens_cut: u64,
    /// Reads that found a damaged batch or an unreadable sector.
    pub reads_damaged: u64,
    /// Logs dropped for damage confirmed, or for a lost first segment (`head_gaps`), to be
    /// fetched again whole from a peer's.
    pub logs_dropped: u64,
    pub head_gaps: u64,
    /// Fetches asked of peers, batches they brought, and answers refused (empty, not where the
    /// log ends, or not what the directory says).
    pub fetches_sent: u64,
    pub batches_fetched: u64,
    pub fetch_answers_refused: u64,
    /// Peers' fetches answered, and dropped (the log not open, or `FETCHES_SERVED_MAX` in flight).
    pub fetches_served: u64,
    pub fetches_dropped: u64,
    /// Batches appended from prepares not committed yet (`speculate`).
    pub batches_speculated: u64,
    /// Cuts of a tail that was not what the group went on with (a view change replaced its
    /// prepares, a crash lost them from the WAL, or the client table skipped a send).
    pub cuts: u64,
    /// Tails that could not be checked (deeper than the batches the log remembers), dropped with
    /// the log on a cluster.
    pub unverifiable: u64,
    /// Damaged runs written again in place with a peer's batches.
    pub runs_repaired: u64,
    /// Elided WAL prepares put back together from this log as the replica opened, and those
    /// whose batches it did not hold (repaired from peers, or never durable).
    pub prepares_filled: u64,
    pub prepares_unfilled: u64,
    /// Batches a single node's elided prepares lost to damage in this log, applied as lost.
    pub batches_lost: u64,
}

/// The group's prepares as its segment log reads them: the replica's journal past its commit
/// point, and the machine it applies them to.
pub trait Prepares {
    fn machine(&self) -> &PartitionMachine;
    /// The last op applied to the machine.
    fn commit_min(&self) -> u64;
    /// The newest op the journal holds.
    fn head_op(&self) -> u64;
    /// The prepare of `op`: its header, and its body if the journal holds it.
    fn prepare(&self, op: u64) -> Option<(&Header, Option<&Bytes>)>;
}

impl Prepares for Replica<PartitionMachine> {
    fn machine(&self) -> &PartitionMachine {
        self.state_machine()
    }

    fn commit_min(&self) -> u64 {
        Replica::commit_min(self)
    }

    fn head_op(&self) -> u64 {
        self.op()
    }

    fn prepare(&self, op: u64) -> Option<(&Header, Option<&Bytes>)> {
        self.journal_prepare(op)
    }
}

/// A fetch asked of a peer and not answered yet.
#[derive(Clone, Copy, Debug)]
struct Fetch {
    from: u64,
    peer: u8,
    since_tick: u64,
}

/// The batches of the group's elided prepares being read back (`[at, to)` still to read), while
/// its replica opens.
#[derive(Debug)]
struct Filling {
    at: u64,
    to: u64,
    /// Where the prepares' spans start, in order: a read that runs into damage goes on from the
    /// next one.
    starts: Vec<u64>,
    reading: bool,
    read_next: u64,
    read: FilledBatches,
    done: bool,
}

/// What a fill read back for the group's elided prepares.
#[derive(Debug, Default)]
pub struct FilledBatches {
    /// Whole batches, by base offset.
    pub batches: BTreeMap<u64, Vec<u8>>,
    /// Span starts whose batch the log holds damaged: lost on this copy.
    pub damaged: BTreeSet<u64>,
}

pub struct SegmentLog {
    namespace: Namespace,
    config: PartitionConfig,
    log: Option<PartitionLog>,
    bug: Option<Bug>,
    cluster: u128,
    replica: u8,
    replica_count: u8,
    /// The group's topic enforces fsync (`Config::sync_writes`): every append is synced as it
    /// lands, since acknowledgements wait for it. When it does not, a completed write is all an
    /// acknowledgement promises, and the log is synced only when a checkpoint waits for it
    /// (`sync_for_checkpoint`), a fetch repaired it, or it went a tick without an append
    /// (`sync_if_idle`): an fdatasync per batch would buy nothing
    /// that mode promises and cost a device flush per batch.
    enforced: bool,
    /// The log's end at the previous tick: a log that did not grow for a whole tick is idle.
    end_at_tick: u64,
    /// Batches the machine applied that the log does not hold yet (synced when `enforced`, else
    /// written): (base, end, bytes), oldest first, contiguous.
    pending: VecDeque<(u64, u64, Bytes)>,
    /// Every message below is the committed log, as the machine's directory names it; the
    /// batches from here to the log's end were appended from prepares not committed yet (or came
    /// back from the files after a crash) and are checked as they commit.
    verified_to: u64,
    /// The durable checkpoint's cursor the log was claimed with at its last open: checked and
    /// committed below it.
    claimed: u64,
    /// Where the log was claimed to when it opened: the durable checkpoint's cursor, or past it
    /// the highest cursor of a prepare whose redundant header is durable (its batches were held
    /// here then). On a single node what lies below is trusted (`follow`).
    frontier: u64,
    /// The last uncommitted prepare whose batches the log holds: (op, checksum, the log offset
    /// after them, whether its last batch filled its segment: the next batch starts a new one).
    speculated: Option<(u64, u128, u64, bool)>,
    /// The log is cut from here once its I/O is idle: what it holds there is not the group's.
    cut_wanted: Option<u64>,
    /// Cuts made (of any kind) since the log was created, and the count each poll read in flight
    /// started at (a read that a cut overtook is failed: `served`).
    cuts_made: u64,
    reads_issued: BTreeMap<u64, u64>,
    /// A damaged run (found at open) asked of a peer, to be written again in place, and the
    /// answers refused in a row (past `REPAIRS_REFUSED_MAX` the log is fetched again whole).
    repair_fetch: Option<Fetch>,
    repairs_refused: u32,
    fetch: Option<Fetch>,
    /// The peer the next fetch asks.
    fetch_peer: u8,
    /// No fetch is asked before this tick (after a refused answer: the next peer is asked at
    /// the next tick, not at once, so that peers that hold nothing are not asked in a loop).
    fetch_not_before: u64,
    /// Where the log skipped to because a peer's retention had passed what it lacked below (its
    /// machine still holds those batches, until it catches up and retention drops them too).
    skipped_to: Option<u64>,
    /// Served fetches' reads in flight: read id to the peer that asked.
    serving: BTreeMap<u64, u8>,
    serve_next: u64,
    /// A read that found damage (the offset it named, `u64::MAX` for a device error): a second
    /// one at the same place, with no read through it in between, confirms it (a read can be
    /// damaged on the way up).
    suspect: Option<u64>,
    /// Damage confirmed: once its I/O is done the log is dropped, its files removed, and it is
    /// opened again empty and fetched from a peer's (repairing one batch in place is not built).
    damaged: bool,
    /// Files of a dropped log to remove, the last first, and whether a removal is in flight.
    removals: Vec<FileKind>,
    removing: bool,

    /// A fill in progress (`fill`), and whether the log was opened for one and waits for its
    /// machine to be ready before it follows it.
    filling: Option<Filling>,
    awaiting_ready: bool,

    tick: u64,
    /// The tick a full disk last refused an append (`REFUSED_APPEND_PAUSE_TICKS`).
    refused_at_tick: Option<u64>,
    /// The device failed a write or sync of the log (not a full disk): the group stops
    /// (`take_device_failure`) instead of writing it again and trusting it.
    device_failure: Option<&'static str>,
    /// The lowest offset a full disk refused a write at since the last `take_refused_no_space`.
    refused_no_space: Option<u64>,
    /// Reads finished and not yet taken (`take_read`): at most the log's `reads_max`.
    reads_done: VecDeque<(u64, Result<ReadBatches, ReadError>)>,
    /// The last open's report.
    pub opened: Option<RecoveryReport>,
    pub counters: SegmentLogCounters,
}

impl SegmentLog {
    /// A log not opened yet: `follow` opens it once the group's replica is open (so that a wipe
    /// of an earlier incarnation's files is done). `replica` of `replica_count` is this node's
    /// place in the group, whose peers' logs it fetches from.
    pub fn new(
        namespace: Namespace,
        partition_id: u64,
        bug: Option<Bug>,
        cluster: u128,
        replica: u8,
        replica_count: u8,
    ) -> SegmentLog {
        let config = PartitionConfig {
            partition_id,
            // The machine says where segments end (`follow`).
            segment_size: u64::MAX,
            // Everything past the durable checkpoint is checked against what commits: the WAL
            // holds at most `journal_slots` ops past it, each up to `batch_requests_max` sends.
            tail_batches_max: TAIL_BATCHES_MAX,
            ..PartitionConfig::default()
        };
        SegmentLog {
            namespace,
            config,
            log: None,
            bug,
            cluster,
            replica,
            replica_count,
            enforced: true,
            end_at_tick: 0,
            pending: VecDeque::new(),
            verified_to: 0,
            claimed: 0,
            frontier: 0,
            speculated: None,
            cut_wanted: None,
            cuts_made: 0,
            reads_issued: BTreeMap::new(),
            repair_fetch: None,
            repairs_refused: 0,
            fetch: None,
            fetch_peer: (replica + 1) % replica_count,
            fetch_not_before: 0,
            skipped_to: None,
            serving: BTreeMap::new(),
            serve_next: 0,
            suspect: None,
            damaged: false,
            removals: Vec::new(),
            removing: false,
            filling: None,
            awaiting_ready: false,
            tick: 0,
            refused_at_tick: None,
            device_failure: None,
            refused_no_space: None,
            reads_done: VecDeque::new(),
            opened: None,
            counters: SegmentLogCounters::default(),
        }
    }

    /// The log's following state, for failure reports.
    pub fn describe(&self) -> String {
        format!(
            "verified_to={} claimed={} speculated={:?} cut_wanted={:?} pending={:?} fetch={:?} damaged={} {:?}",
            self.verified_to,
            self.claimed,
            self.speculated.map(|(op, _, end, seal)| (op, end, seal)),
            self.cut_wanted,
            self.pending.front().map(|(base, ..)| *base)..self.pending.back().map(|(_, end, _)| *end),
            self.fetch,
            self.damaged,
            self.counters
        )
    }

    /// The log while it serves reads: open, or failed on a write or sync its group stopped on.
    pub fn readable_log(&self) -> Option<&PartitionLog> {
        self.log.as_ref().filter(|log| readable(log.status()))
    }

    /// The log while it is open for appends.
    pub fn log(&self) -> Option<&PartitionLog> {
        self.log.as_ref().filter(|log| log.status() == Status::Open)
    }

    /// Every message below this is durable in the log and committed (0 while it is not open):
    /// what the group's checkpoints wait for.
    pub fn durable_cursor(&self) -> u64 {
        if self.damaged {
            return 0;
        }
        self.log().map_or(0, |log| log.synced_offset().min(self.verified_to))
    }

    /// Follows the topic's durability mode (`enforced`: every append synced as it lands).
    pub fn set_enforced(&mut self, enforced: bool) {
        self.enforced = enforced;
    }

    /// A checkpoint of the group waits for the log to be durable through `cursor`: the log is
    /// synced (through all it holds) unless it is already, or a sync covers it. Appends do that
    /// themselves when fsync is enforced.
    pub fn sync_for_checkpoint(&mut self, io: &mut impl Io, cursor: u64) {
        if self.damaged {
            return;
        }
        let Some(log) = self.log.as_mut().filter(|log| log.status() == Status::Open) else { return };
        if log.synced_offset() < cursor.min(log.end_offset()) {
            log.sync(io);
        }
        self.drain_events(io);
    }

    /// Called every tick: a log that fsync is not enforced on is synced once it went a whole
    /// tick without growing, so that what a burst wrote is durable soon after it ends, without a
    /// device flush per batch while it lasts.
    /// The log's finished reads (and other events) taken in, nothing started: what a group that
    /// stopped on a failed write still does (`follow` is for a group that goes on).
    pub fn take_reads_only(&mut self, io: &mut impl Io) {
        self.drain_events(io);
    }

    /// What failed on the device since the last call, if anything did: the group stops on it.
    pub fn take_device_failure(&mut self) -> Option<&'static str> {
        self.device_failure.take()
    }

    /// Where a full disk refused a write since the last call, if one did: the log holds
    /// nothing from there (it cut itself), and a single replica refuses the requests whose
    /// batches went there (`Replica::refuse_unstored`).
    pub fn take_refused_no_space(&mut self) -> Option<u64> {
        self.refused_no_space.take()
    }

    pub fn sync_if_idle(&mut self, io: &mut impl Io) {
        let Some(log) = self.log.as_mut().filter(|log| log.status() == Status::Open) else { return };
        log.retry_refused_writes(io);
        let end = log.end_offset();
        let idle = end == self.end_at_tick;
        self.end_at_tick = end;
        if !self.enforced && !self.damaged && idle && log.synced_offset() < end {
            log.sync(io);
            self.drain_events(io);
        }
    }

    /// Below this the log holds the batches of the group's prepares as its journal has them now:
    /// what it may acknowledge. Synced when durability is `enforced`, else written.
    pub fn ack_cursor(&self, prepares: &impl Prepares, enforced: bool) -> u64 {
        if self.damaged {
            return 0;
        }
        let Some(log) = self.log() else { return 0 };
        let stored = if enforced { log.synced_offset() } else { log.written_offset() };
        let held = match self.speculated {
            Some((op, checksum, end, _))
                if self.cut_wanted.is_none()
                    && op > prepares.commit_min()
                    && end <= log.end_offset()
                    && prepares.prepare(op).is_some_and(|(header, _)| header.checksum == checksum) =>
            {
                end
            }
            _ => self.verified_to,
        };
        stored.min(held)
    }

    /// Below this the log serves reads: what it holds checked against the machine (0 while it
    /// is not open, or a cut waits).
    pub fn readable_to(&self) -> u64 {
        if self.bug == Some(Bug::ReadUncheckedTail) {
            return self.log().map_or(0, |log| log.end_offset());
        }
        match self.readable_log() {
            Some(_) if !self.damaged && self.cut_wanted.is_none() => self.verified_to,
            _ => 0,
        }
    }

    /// Whether the log holds `[from, to)` damaged on a single node (runs recovery kept inside
    /// the log, which reads step over): those messages are lost, with no peer to take them from,
    /// and a poll goes on past them. On a cluster a damaged run is repaired, and polls wait.
    pub fn lost_between(&self, from: u64, to: u64) -> bool {
        let Some(log) = self.log().filter(|_| self.replica_count == 1 && from < to) else { return false };
        let mut at = from;
        for run in log.damaged_runs() {
            if run.from_offset <= at && at < run.to_offset {
                at = run.to_offset;
            }
        }
        at >= to
    }

    /// Starts a read of the open log; its result comes back through `take_read`.
    pub fn read(&mut self, io: &mut impl Io, request: ReadRequest) -> Result<(), ReadError> {
        debug_assert_eq!(request.id & (FETCH_READ | FILL_READ), 0);
        if self.damaged {
            // Dropped once its I/O is done: no new reads keep it waiting.
            return Err(ReadError::NotOpen);
        }
        let log = self.log.as_mut().filter(|log| readable(log.status())).ok_or(ReadError::NotOpen)?;
        let start = match request.start {
            ReadStart::Offset(offset) => offset,
            _ => 0,
        };
        let unchecked = self.bug == Some(Bug::ReadUncheckedTail);
        if !unchecked && (start >= self.verified_to || self.cut_wanted.is_some()) {
            // Only what is checked against the machine is served: past it the log may hold a
            // tail the group replaced.
            return Err(ReadError::Busy);
        }
        log.read(io, request)?;
        self.reads_issued.insert(request.id, self.cuts_made);
        self.drain_events(io);
        Ok(())
    }

    /// A finished poll read as the log may serve it: failed if a cut came since it started (its
    /// bytes past the cut may be the old tail's), else trimmed to the checked part.
    fn served(&mut self, id: u64, result: Result<ReadBatches, ReadError>) -> Result<ReadBatches, ReadError> {
        let issued_at = self.reads_issued.remove(&id);
        let mut read = result?;
        if self.bug == Some(Bug::ReadUncheckedTail) {
            return Ok(read);
        }
        if issued_at != Some(self.cuts_made) {
            return Err(ReadError::Busy);
        }
        let mut at = 0usize;
        let mut count = 0u32;
        while let Ok(header) = BatchHeader::decode(&read.bytes[at..]) {
            if header.end_offset() > self.verified_to || at + header.batch_length as usize > read.bytes.len() {
                break;
            }
            at += header.batch_length as usize;
            count += 1;
        }
        read.bytes.truncate(at);
        read.batch_count = count;
        Ok(read)
    }

    /// A finished read, if any.
    pub fn take_read(&mut self) -> Option<(u64, Result<ReadBatches, ReadError>)> {
        self.reads_done.pop_front()
    }

    /// A completion of this log's I/O (the shard tells them from the replica's by their tag).
    pub fn on_completion(&mut self, io: &mut impl Io, completion: Completion) {
        match self.log.as_mut() {
            Some(log) => log.on_completion(io, completion),
            None => {
                // A removal of a dropped log's file (a failed one leaves a file the next open
                // finds, reads, and drops again if it is damaged).
                assert!(matches!(completion, Completion::Remove { .. }), "only removals run without a log");
                self.removing = false;
                self.remove_next(io);
            }
        }
        self.drain_events(io);
    }

    fn remove_next(&mut self, io: &mut impl Io) {
        if let Some(kind) = self.removals.pop() {
            io.remove(FileId::new(self.namespace, kind), owner_token(LOG_OWNER, 0));
            self.removing = true;
        }
    }

    pub fn tick(&mut self) {
        self.tick += 1;
        if self.fetch.is_some_and(|fetch| fetch.since_tick + FETCH_TICKS_MAX <= self.tick) {
            self.fetch = None;
            self.next_peer();
        }
        if self.repair_fetch.is_some_and(|fetch| fetch.since_tick + FETCH_TICKS_MAX <= self.tick) {
            self.repair_fetch = None;
            self.next_peer();
        }
    }

    fn next_peer(&mut self) {
        self.fetch_peer = (self.fetch_peer + 1) % self.replica_count;
        if self.fetch_peer == self.replica {
            self.fetch_peer = (self.fetch_peer + 1) % self.replica_count;
        }
    }

    fn drain_events(&mut self, io: &mut impl Io) {
        while let Some(event) = self.log.as_mut().and_then(PartitionLog::poll_event) {
            match event {
                PartitionEvent::Opened(report) => {
                    if !report.damaged.is_empty() || report.truncated_from.is_some() {
                        self.counters.opens_cut += 1;
                    }
                    // Below the claimed frontier the log was durable and committed when the
                    // group's checkpoint was written; what follows is checked as it commits.
                    self.verified_to = report.end_offset.min(self.claimed).max(report.first_offset);
                    self.speculated = None;
                    self.cut_wanted = None;
                    // Damage kept inside the log (below the frontier) is written again in place
                    // with a peer's batches on a cluster (`repair_next`); a single node keeps
                    // every batch but the damaged.
                    self.opened = Some(report);
                }
                PartitionEvent::SegmentDeleted { .. } => self.counters.segments_deleted += 1,
                PartitionEvent::Failed(error) => {
                    self.counters.failures += 1;
                    if error == IoError::Device {
                        self.device_failure.get_or_insert("segment log sync");
                    }
                }
                PartitionEvent::Read { id, result } if id & FILL_READ != 0 => self.on_fill_read(result),
                PartitionEvent::Read { id, result } => {
                    let damage = match &result {
                        Err(ReadError::Corrupt { offset }) => Some(*offset),
                        Err(ReadError::Io(_)) => Some(u64::MAX),
                        _ => None,
                    };
                    if let Some(at) = damage {
                        self.counters.reads_damaged += 1;
                        // Only a cluster can repair: a single node keeps what it has.
                        self.damaged |= self.suspect == Some(at) && self.replica_count > 1;
                        self.suspect = Some(at);
                    } else if let (Ok(read), Some(suspect)) = (&result, self.suspect) {
                        // Cleared only by a read that went through the suspect place: reads of
                        // other ranges in between (other consumers) must not keep a damaged run
                        // from ever being confirmed, or the polls that need it are refused for
                        // good (seed 47, three nodes, heavy faults).
                        if read_covers(read, suspect) {
                            self.suspect = None;
                        }
                    }
                    match self.serving.remove(&id) {
                        Some(peer) => {
                            // Only whole batches from where the peer's log ends.
                            let bytes = result.map(|read| Vec::from(read.bytes)).unwrap_or_default();
                            let mut header = self.header(Command::Batches);
                            header.op = BatchHeader::decode(&bytes).map_or(0, |first| first.base_offset);
                            io.send(Peer::Replica(peer), Message::new(header, bytes).encode());
                            self.counters.fetches_served += 1;
                        }
                        None => {
                            let served = self.served(id, result);
                            self.reads_done.push_back((id, served));
                        }
                    }
                }
                // A rejected write (a full disk) takes the batches from its offset: the log is
                // cut there and the pending copies are appended again.
                PartitionEvent::Rejected { error, from_offset } => {
                    self.speculated = None;
                    self.cuts_made += 1;
                    self.refused_at_tick = Some(self.tick);
                    if error == IoError::Device {
                        self.device_failure.get_or_insert("segment log write");
                    }
                    if error == IoError::NoSpace {
                        let stored_to = self.refused_no_space.map_or(from_offset, |at| at.min(from_offset));
                        self.refused_no_space = Some(stored_to);
                    }
                }
                PartitionEvent::Durable { .. } => {}
            }
        }
    }

    fn header(&self, command: Command) -> Header {
        let mut header = Header::new(command, self.cluster, self.replica);
        header.group = group_of(self.namespace);
        header
    }

    /// A peer's log asks for the batches from `op` (its end) to `commit`: answered from this log
    /// with whole batches, at most `FETCH_BYTES_MAX`, once read (an empty answer: none held).
    pub fn on_request_batches(&mut self, io: &mut impl Io, request: &Header) {
        if request.replica == self.replica || request.replica >= self.replica_count || request.commit <= request.op {
            return;
        }
        let held = !self.damaged
            && self.log().is_some_and(|log| log.first_offset() <= request.op && request.op < log.end_offset());
        if !held || self.serving.len() == FETCHES_SERVED_MAX {
            self.counters.fetches_dropped += 1;
            if !held {
                // None of it: the answer says where this log starts (`commit`), so that a log
                // asking for what retention here has passed can skip to it.
                let mut answer = self.header(Command::Batches);
                answer.commit = self.log().map_or(0, PartitionLog::first_offset);
                io.send(Peer::Replica(request.replica), Message::new(answer, Vec::new()).encode());
            }
            return;
        }
        let id = FETCH_READ | self.serve_next;
        self.serve_next += 1;
        let count = (request.commit - request.op).min(u32::MAX as u64) as u32;
        let read = ReadRequest { id, start: ReadStart::Offset(request.op), count, bytes_max: FETCH_BYTES_MAX };
        let log = self.log.as_mut().expect("held");
        match log.read(io, read) {
            Ok(()) => {
                self.serving.insert(id, request.replica);
            }
            Err(_) => self.counters.fetches_dropped += 1,
        }
        self.drain_events(io);
    }

    /// A peer's answer to our fetch: the batches that continue the log where it ends and match
    /// the machine's directory are appended (and synced), the rest refused.
    pub fn on_batches(&mut self, io: &mut impl Io, machine: &PartitionMachine, answer: &Message) {
        if self.repair_fetch.is_some_and(|fetch| fetch.peer == answer.header.replica && fetch.from == answer.header.op)
        {
            return self.on_repair_batches(io, machine, answer);
        }
        let Some(fetch) = self.fetch.filter(|fetch| fetch.peer == answer.header.replica) else { return };
        self.fetch = None;
        let Some(log) = self.log.as_mut().filter(|log| log.status() == Status::Open && !self.damaged) else { return };
        let mut rest = answer.body.as_slice();
        let mut appended = 0;
        let before = log.end_offset();
        while !rest.is_empty() && log.end_offset() < machine.next_offset() {
            let Ok(header) = BatchHeader::decode(rest) else { break };
            let Some(stored) = rest.get(..header.batch_length as usize) else { break };
            let expected = machine.batch_at(log.end_offset());
            if header.base_offset != log.end_offset()
                || log.end_offset() < fetch.from
                || !expected.is_some_and(|entry| entry.matches(&header))
                || batch::validate(stored).is_err()
            {
                break;
            }
            if machine.starts_segment(header.base_offset) {
                seal_before(log, io, self.bug, &mut self.counters);
            }
            match log.append_stamped(io, Bytes::copy_from_slice(stored)) {
                Ok(_) => {
                    appended += 1;
                    self.counters.batches_fetched += 1;
                    self.counters.batches_appended += 1;
                    self.counters.segment_bytes += stored.len() as u64;
                }
                Err(_) => break,
            }
            rest = &rest[stored.len()..];
        }
        let peer_first = answer.header.commit;
        if appended == 0
            && answer.body.is_empty()
            && peer_first > log.end_offset()
            && peer_first < machine.next_offset()
            && machine.batch_at(peer_first).is_some()
            && log.is_idle()
        {
            // The peer's retention passed everything this log lacks below `peer_first` (its
            // machine is ahead: ours will drop those batches too once it catches up). Nothing
            // below is needed to catch up: the log starts again there and fetches the rest.
            if log.purge_to(io, peer_first) {
                self.skipped_to = Some(peer_first);
                self.counters.skips_ahead += 1;
                self.verified_to = log.end_offset();
                self.forget_tail();
            }
        } else if appended == 0 {
            // The peer holds none of it (or sent something else): ask the next.
            self.counters.fetch_answers_refused += 1;
            self.fetch_not_before = self.tick + 1;
            self.next_peer();
        } else {
            if self.verified_to == before {
                // Checked against the directory, batch by batch, as they went in.
                self.verified_to = log.end_offset();
            }
            log.sync(io);
        }
        self.drain_events(io);
    }

    /// Brings the log to the machine: takes the batches it applied, opens the log, skips ahead or
    /// drops what the machine no longer holds, seals where the machine's segments end, appends
    /// the batches it lacks (from what was applied, else fetched from a peer) and syncs them.
    /// `ready`: the machine is where the group's log is (restored, and caught up with the commits
    /// it knows of), so that its first offset is where the log may be claimed from.
    /// `checkpoint`: where the log stood at the group's durable checkpoint: durable and
    /// committed below its cursor (claimed when the log opens), needed from its `retained_from`.
    pub fn follow(&mut self, io: &mut impl Io, machine: &mut PartitionMachine, ready: bool, checkpoint: LogMark) {
        while let Some((base, bytes)) = machine.take_applied() {
            let end = BatchHeader::decode(&bytes).expect("an applied batch is stamped").end_offset();
            if self.pending.back().is_some_and(|(_, last, _)| *last != base) {
                // A checkpoint (state transfer) moved the machine past what waited here (a
                // purge does not: the batches applied before it still come, in order).
                self.pending.clear();
            }
            self.pending.push_back((base, end, bytes));
        }
        let (first, next) = (machine.first_offset(), machine.next_offset());
        // The log keeps what the durable checkpoint still needs, past the machine's retention:
        // the WAL's prepares after it leave their batches out, and take them back from here.
        let floor = first.min(checkpoint.retained_from);
        while self.pending.front().is_some_and(|(_, end, _)| *end <= floor) {
            self.pending.pop_front();
        }

        match self.log.as_ref().map(PartitionLog::status) {
            None if self.removing => return,
            None => {
                // The claim must be where the machine is retained from now: only once its state
                // is restored (the replica is open, but may still wait for a view or a checkpoint).
                if ready {
                    self.open(io, first, checkpoint, 0);
                }
                return;
            }
            Some(Status::Opening) => return,
            Some(Status::Failed(_)) => {
                // Opened again from its files once no completion of this one can arrive.
                if self.log.as_ref().is_some_and(|log| log.ops_in_flight() == 0) {
                    self.log = None;
                    self.reads_issued.clear();
                }
                return;
            }
            Some(Status::Open) if self.damaged => {
                let log = self.log.as_ref().expect("open");
                if log.ops_in_flight() == 0 {
                    // Newest first, one at a time (a device may complete requests in any order): a
                    // crash part way leaves a prefix of the log, which a later open keeps as it is
                    // (what it holds is still the committed log).
                    for (start, ..) in log.segments() {
                        self.removals.push(FileKind::Segment(start));
                        self.removals.push(FileKind::Index(start));
                    }
                    self.remove_next(io);
                    self.log = None;
                    self.fetch = None;
                    self.reads_issued.clear();
                    self.counters.logs_dropped += 1;
                }
                return;
            }
            Some(Status::Open) if self.awaiting_ready && !ready => return,
            Some(Status::Open) => self.awaiting_ready = false,
        }
        let log = self.log.as_mut().expect("open");
        let skipped = self.skipped_to.is_some_and(|to| log.first_offset() <= to);
        if log.first_offset() > first && log.first_offset() < log.end_offset() && next >= log.end_offset() && !skipped {
            // The log came back starting past its machine with batches in it, and the machine has
            // applied all of them: a crash took the log's unsynced first segment while a later
            // one's writes survived (had the machine only been behind, restarted from an older
            // checkpoint, it would have passed the log's start by the log's end). On a cluster
            // it is dropped and fetched again whole; a single node keeps what it has. While the
            // machine is behind the log, the log is kept: it may hold the only durable copy left.
            if self.replica_count > 1 {
                self.damaged = true;
                self.counters.head_gaps += 1;
                return;
            }
        }
        if self.skipped_to.is_some_and(|to| first >= to) {
            self.skipped_to = None;
        }
        // Before anything below the machine's first offset counts as held (a skip over a hole
        // there, `verified_to`, and so `ack_cursor`), what the log holds there is checked against
        // the batches the machine applied: a restart's tail may be another view's.
        if !self.check_below_first(io, first) {
            return;
        }
        let log = self.log.as_mut().expect("open");
        let end = log.end_offset();
        // A log that skipped to where a peer's retention starts is past its machine on purpose.
        let skipped = self.skipped_to.is_some_and(|to| log.first_offset() <= to);
        let empty_past_first = log.first_offset() == end && end > first && !skipped;
        // The WAL's prepares past the durable checkpoint need their batches back if the replica
        // restarts (their slots leave them out): what retention passed goes only once a durable
        // checkpoint has passed it too (`floor`).
        // Below the machine's first offset no batch can be checked against its directory, so a
        // hole there is not fetched: the log starts again where the applied batches go on.
        let continues = self.pending.iter().any(|(base, ..)| *base == end);
        let pending_from = self.pending.iter().map(|(base, ..)| *base).find(|base| *base > end);
        let hole_below_first = first > end && !continues;
        let resume_at = if floor >= end && (log.first_offset() < end || floor > end) {
            // Nothing the log holds is needed any more (a purge, or retention, that the durable
            // checkpoint covers), or nothing from where the log ends (the machine took a
            // checkpoint past it).
            Some(floor)
        } else if hole_below_first {
            Some(pending_from.map_or(first, |from| from.min(first)))
        } else if empty_past_first {
            // The log holds nothing and starts past the machine (a crash took its unsynced first
            // segment).
            Some(first)
        } else {
            None
        };
        if let Some(to) = resume_at {
            if log.purge_to(io, to) {
                self.counters.skips_ahead += u64::from(to > end);
                self.verified_to = log.end_offset();
                self.forget_tail();
            }
            self.drain_events(io);
            return;
        }
        // Segments go once the durable checkpoint no longer needs them: a restart from it finds
        // every batch it goes on from (retention at the ops it replays runs again).
        log.retain_from(io, floor);
        // Below the machine's first offset its directory names nothing to check against: what
        // `check_below_first` could not check (no applied batch starts there) is taken as it is.
        self.verified_to = self.verified_to.max(first).clamp(log.first_offset(), log.end_offset());
        if !self.cut(io) {
            return;
        }
        let log = self.log.as_mut().expect("open");
        // Check what the log holds past the verified point against the machine's directory, as
        // far as the machine goes: the same batches, where the same segments start.
        if self.bug == Some(Bug::SegmentLogTrustsItsTail) {
            self.verified_to = self.verified_to.max(next.min(log.end_offset()));
        }
        while self.verified_to < next.min(log.end_offset()) {
            let at = self.verified_to;
            let held = log.remembered(at).copied();
            let same = match (machine.batch_at(at), held) {
                (Some(entry), Some(held)) => {
                    entry.end_offset() == held.end_offset
                        && entry.len as u64 == held.len
                        && entry.checksum == held.checksum
                        && (at == first || machine.starts_segment(at) == log.starts_segment(at))
                }
                _ => false,
            };
            let trusted = machine.batch_at(at).filter(|_| self.replica_count == 1 && at < self.frontier);
            match (held.filter(|_| same), trusted) {
                (Some(held), _) => self.verified_to = held.end_offset,
                // A single node's log below the WAL's durable cursors is its only copy, written
                // from this group's own prepares (no view change replaces them on one node) and
                // checked by recovery. What it does not remember there is a damaged run (its
                // batches lost, reads step over it) or the batches before one (the tail the log
                // remembers starts after the damage): cutting would lose them all.
                (None, Some(entry)) => self.verified_to = entry.end_offset(),
                (None, None) => {
                    self.cut_wanted = Some(at);
                    if !self.cut(io) {
                        return;
                    }
                    break;
                }
            }
        }
        self.repair_next(io, machine);
        if self.damaged {
            return;
        }
        let log = self.log.as_mut().expect("open");
        let mut appended = false;
        let paused = self.refused_at_tick.is_some_and(|at| self.tick < at + REFUSED_APPEND_PAUSE_TICKS);
        if self.verified_to == log.end_offset() && !paused {
            let from = self.verified_to;
            for (base, _, bytes) in self.pending.iter().filter(|(_, end, _)| *end > from) {
                if *base != log.end_offset() {
                    break;
                }
                if machine.starts_segment(*base) {
                    seal_before(log, io, self.bug, &mut self.counters);
                }
                match log.append_stamped(io, bytes.clone()) {
                    Ok(appended_at) => {
                        debug_assert_eq!(appended_at.base_offset, *base);
                        self.counters.batches_appended += 1;
                        self.counters.segment_bytes += bytes.len() as u64;
                        self.verified_to = log.end_offset();
                        appended = true;
                    }
                    Err(AppendError::Busy) => {
                        self.counters.appends_busy += 1;
                        break;
                    }
                    Err(_) => {
                        self.counters.appends_refused += 1;
                        break;
                    }
                }
            }
        }
        if appended && self.enforced {
            log.sync(io);
        }
        let stored = if self.enforced { log.synced_offset() } else { log.written_offset() };
        let settled = stored.min(self.verified_to);
        while self.pending.front().is_some_and(|(_, end, _)| *end <= settled) {
            self.pending.pop_front();
        }
        let end = log.end_offset();
        let has_next = self.pending.iter().any(|(base, _, _)| *base == end);
        if end < next
            && !has_next
            && self.fetch.is_none()
            && self.replica_count > 1
            && self.tick >= self.fetch_not_before
        {
            // A hole between the log and what was applied: a peer's log has it.
            let to = self.pending.iter().map(|(base, _, _)| *base).find(|base| *base > end).unwrap_or(next);
            let mut request = self.header(Command::RequestBatches);
            request.op = end;
            request.commit = to;
            io.send(Peer::Replica(self.fetch_peer), Message::new(request, Vec::new()).encode());
            self.fetch = Some(Fetch { from: end, peer: self.fetch_peer, since_tick: self.tick });
            self.counters.fetches_sent += 1;
        }
        self.drain_events(io);
    }

    /// Checks what the log holds from `verified_to` up to the machine's first offset, batch by
    /// batch, against the batches the machine applied since (`pending`, kept down to what the
    /// durable checkpoint still needs): the machine's retention dropped them from its directory,
    /// but the WAL's elided prepares past that checkpoint take their batches back from here at a
    /// restart, and the replica acknowledges them once this log counts them held. A batch that
    /// differs (a tail kept from before a view change replaced its prepares, at offsets the new
    /// view's batches took) is cut, and the applied ones are appended in its place. Stops where
    /// no applied batch starts. False while the cut waits for the log's I/O (or the log is
    /// dropped, for a cut deeper than it remembers). Only on a cluster: no view change replaces
    /// a single node's prepares, and a tail its crash left past its WAL's head is cut by
    /// `speculate` before anything is appended there.
    fn check_below_first(&mut self, io: &mut impl Io, first: u64) -> bool {
        if self.replica_count == 1 {
            return true;
        }
        let Some(log) = self.log.as_ref() else { return true };
        while self.verified_to < first.min(log.end_offset()) {
            let at = self.verified_to;
            let Ok(index) = self.pending.binary_search_by_key(&at, |(base, ..)| *base) else { break };
            let (_, end, bytes) = &self.pending[index];
            let applied = BatchHeader::decode(bytes).expect("an applied batch is stamped");
            let same = log.remembered(at).is_some_and(|held| {
                held.end_offset == *end && held.len == applied.batch_length && held.checksum == applied.batch_checksum
            });
            if !same {
                self.cut_wanted = Some(at);
                return self.cut(io);
            }
            self.verified_to = *end;
        }
        true
    }

    /// Opens the log from its files, claiming the group's durable checkpoint: durable and
    /// committed below its cursor (damage there is kept and repaired, not cut as a tear), needed
    /// from where the machine (restored) or the checkpoint starts.
    /// `held`: the group's WAL says the log held every batch below it once (its elided prepares'
    /// durable headers), though not all of it is committed.
    fn open(&mut self, io: &mut impl Io, first: u64, checkpoint: LogMark, held: u64) {
        self.damaged = false;
        self.suspect = None;
        self.serving.clear();
        self.repair_fetch = None;
        self.repairs_refused = 0;
        self.claimed = checkpoint.cursor;
        let frontier = checkpoint.cursor.max(held);
        self.frontier = frontier;
        let claim = OwnerClaim {
            frontier,
            retained_from: first.min(checkpoint.retained_from),
            checked_to: Some(checkpoint.cursor),
        };
        self.log = Some(PartitionLog::open_owned(io, self.config.clone(), self.namespace, LOG_OWNER, claim));
        self.drain_events(io);
    }

    /// While the group's replica opens: reads back the batches its WAL's elided prepares left
    /// out, `[from, to)` (`Replica::fills_wanted`), opening the log first if need be. Returns
    /// them, by base offset, once read as far as the log holds them, with the spans it holds
    /// damaged (stepped over; a log that cannot open gives none: those prepares are repaired
    /// from peers, or on a single node wait).
    pub fn fill(
        &mut self,
        io: &mut impl Io,
        machine: &PartitionMachine,
        checkpoint: LogMark,
        wanted: FillsWanted,
    ) -> Option<FilledBatches> {
        let FillsWanted { from, to, starts, durable } = wanted;
        match self.log.as_ref().map(PartitionLog::status) {
            None if self.removing => return None,
            None => {
                self.awaiting_ready = true;
                self.open(io, machine.first_offset(), checkpoint, durable);
                return None;
            }
            Some(Status::Opening) => return None,
            Some(Status::Failed(_)) => return Some(FilledBatches::default()),
            Some(Status::Open) => {}
        }
        let filling = self.filling.get_or_insert_with(|| Filling {
            at: from,
            to,
            starts,
            reading: false,
            read_next: 0,
            read: FilledBatches::default(),
            done: false,
        });
        let log = self.log.as_mut().expect("open");
        if filling.at.max(log.first_offset()) >= filling.to.min(log.end_offset()) {
            filling.done = true;
        }
        if filling.done {
            // Reads step over the damaged runs recovery kept inside the log: the spans that
            // start in one are lost on this copy too.
            let runs = log.damaged_runs();
            let mut filled = self.filling.take().expect("filling");
            let damaged = filled.starts.iter().filter(|start| {
                !filled.read.batches.contains_key(start)
                    && runs.iter().any(|run| run.from_offset <= **start && **start < run.to_offset)
            });
            filled.read.damaged.extend(damaged);
            if self.replica_count == 1 {
                // A single node's log that ends before batches its WAL's prepares left out lost
                // that tail to its device (a sync that failed, or a power cut of a topic that
                // does not enforce fsync; under enforce_fsync nothing acknowledged is past the
                // log's durable end). No peer holds them: they are lost, as a damaged run's are,
                // and the group goes on instead of waiting for them for ever.
                let end = log.end_offset();
                let lost =
                    filled.starts.iter().filter(|start| **start >= end && !filled.read.batches.contains_key(start));
                filled.read.damaged.extend(lost);
            }
            return Some(filled.read);
        }
        if !filling.reading {
            let start = filling.at.max(log.first_offset());
            let count = (filling.to - start).min(u32::MAX as u64) as u32;
            let id = FILL_READ | filling.read_next;
            filling.read_next += 1;
            let read = ReadRequest { id, start: ReadStart::Offset(start), count, bytes_max: FETCH_BYTES_MAX };
            if log.read(io, read).is_ok() {
                filling.reading = true;
            }
            self.drain_events(io);
        }
        None
    }

    /// A fill's read finished: its batches are kept, and the next read starts after them (or
    /// after the damaged run it ran into).
    fn on_fill_read(&mut self, result: Result<ReadBatches, ReadError>) {
        let Some(filling) = self.filling.as_mut() else { return };
        filling.reading = false;
        match result {
            Ok(read) => {
                let mut at = 0usize;
                let mut end = None;
                while let Ok(header) = BatchHeader::decode(&read.bytes[at..]) {
                    let len = header.batch_length as usize;
                    if at + len > read.bytes.len() {
                        break;
                    }
                    filling.read.batches.insert(header.base_offset, read.bytes[at..at + len].to_vec());
                    end = Some(header.end_offset());
                    at += len;
                }
                match end {
                    Some(end) if end > filling.at => filling.at = end,
                    _ => filling.done = true,
                }
            }
            Err(ReadError::Corrupt { offset }) => {
                let run = self.log.as_ref().and_then(|log| {
                    log.damaged_runs().into_iter().find(|run| run.from_offset <= offset && offset < run.to_offset)
                });
                // Damage recovery kept inside the log (a run: its spans are marked lost once the
                // fill is done), or damage this read ran into: the span it hits is lost on this
                // copy, and the read goes on from the next span.
                let next = match run {
                    Some(run) => Some(run.to_offset),
                    None => {
                        filling.read.damaged.extend(filling.starts.iter().rev().find(|start| **start <= offset));
                        filling.starts.iter().find(|start| **start > offset).copied()
                    }
                };
                match next {
                    Some(next) if next > filling.at => filling.at = next,
                    _ => filling.done = true,
                }
            }
            // Tried again at the next step.
            Err(ReadError::Busy) => {}
            Err(_) => filling.done = true,
        }
    }

    /// Asks a peer for the oldest damaged run the machine still holds, to write it again in place
    /// (one at a time). A run too large for one answer, or past what the machine has applied,
    /// costs the whole log instead: it is dropped and fetched again.
    fn repair_next(&mut self, io: &mut impl Io, machine: &PartitionMachine) {
        if self.replica_count == 1 || self.repair_fetch.is_some() || self.tick < self.fetch_not_before {
            return;
        }
        let Some(log) = self.log.as_ref().filter(|log| log.status() == Status::Open) else { return };
        let Some(run) = log.damaged_runs().into_iter().find(|run| run.to_offset > machine.first_offset()) else {
            return;
        };
        if log.repair_in_flight(run.from_offset) {
            return;
        }
        // The run must be exactly batches of the machine's, inside one of its segments (a run
        // that took a lost segment's offsets with it, or bytes that hold no offsets, is not).
        let mut at = run.from_offset;
        let mut len = 0u64;
        while at < run.to_offset {
            let Some(entry) = machine.batch_at(at).filter(|_| at == run.from_offset || !machine.starts_segment(at))
            else {
                break;
            };
            len += entry.len as u64;
            at = entry.end_offset();
        }
        let fits = run.from_offset < run.to_offset && at == run.to_offset && len == run.len;
        if !fits || run.len > FETCH_BYTES_MAX || self.repairs_refused >= REPAIRS_REFUSED_MAX {
            self.damaged = true;
            return;
        }
        let mut request = self.header(Command::RequestBatches);
        request.op = run.from_offset;
        request.commit = run.to_offset;
        io.send(Peer::Replica(self.fetch_peer), Message::new(request, Vec::new()).encode());
        self.repair_fetch = Some(Fetch { from: run.from_offset, peer: self.fetch_peer, since_tick: self.tick });
        self.counters.fetches_sent += 1;
    }

    /// A peer's answer for a damaged run: written in place if its batches are the ones the
    /// machine's directory names there and fill the run exactly; else the next peer is asked.
    fn on_repair_batches(&mut self, io: &mut impl Io, machine: &PartitionMachine, answer: &Message) {
        let fetch = self.repair_fetch.take().expect("checked");
        let Some(log) = self.log.as_mut().filter(|log| log.status() == Status::Open && !self.damaged) else { return };
        let Some(run) = log.damaged_runs().into_iter().find(|run| run.from_offset == fetch.from) else { return };
        let mut rest = answer.body.as_slice();
        let mut at = run.from_offset;
        let mut len = 0usize;
        while at < run.to_offset {
            let Ok(header) = BatchHeader::decode(rest) else { break };
            let Some(stored) = rest.get(..header.batch_length as usize) else { break };
            if header.base_offset != at
                || !machine.batch_at(at).is_some_and(|entry| entry.matches(&header))
                || batch::validate(stored).is_err()
            {
                break;
            }
            at = header.end_offset();
            len += stored.len();
            rest = &rest[stored.len()..];
        }
        let repaired = at == run.to_offset && log.repair(io, run.from_offset, answer.body[..len].to_vec()).is_ok();
        if repaired {
            self.counters.runs_repaired += 1;
            self.repairs_refused = 0;
        } else {
            self.repairs_refused += 1;
            self.counters.fetch_answers_refused += 1;
            self.fetch_not_before = self.tick + 1;
            self.next_peer();
        }
        self.drain_events(io);
    }

    /// The log's tail was cut or purged: what was speculated or waited to be cut is gone, and
    /// reads in flight may hold the old bytes (`served` fails them).
    fn forget_tail(&mut self) {
        self.speculated = None;
        self.cut_wanted = None;
        self.cuts_made += 1;
    }

    /// Makes the cut decided (`cut_wanted`) once the log's I/O is idle; false while it waits (or
    /// the log is dropped instead, when the cut goes deeper than the log remembers).
    fn cut(&mut self, io: &mut impl Io) -> bool {
        let Some(from) = self.cut_wanted else { return true };
        let log = self.log.as_mut().expect("open");
        if from >= log.end_offset() {
            self.cut_wanted = None;
            return true;
        }
        match log.truncate(io, from) {
            Ok(()) => {
                self.verified_to = self.verified_to.min(from);
                self.counters.cuts += 1;
                self.forget_tail();
                self.drain_events(io);
                true
            }
            Err(TruncateError::Busy) => {
                self.drain_events(io);
                false
            }
            Err(_) => {
                self.counters.unverifiable += 1;
                self.cut_wanted = None;
                if self.replica_count > 1 {
                    // Fetched again whole from a peer's log.
                    self.damaged = true;
                    return false;
                }
                // A single node has no other copy: it keeps what it has, unchecked, and serves
                // and acknowledges none of it (the group waits: counted, `unverifiable`).
                false
            }
        }
    }

    /// Appends the batches of the group's prepares past its commit point, in op order, as far as
    /// the journal holds them whole: a prepare's batch goes to its final place as soon as it
    /// arrives, not once it commits. What the log already holds there is checked against them;
    /// what differs, or lies past the journal's head, is cut. Only once the log holds the
    /// committed log whole (checked), so that the prepares continue it.
    pub fn speculate(&mut self, io: &mut impl Io, replica: &impl Prepares) {
        if self.damaged || self.cut_wanted.is_some() || self.awaiting_ready {
            return;
        }
        let Some(log) = self.log.as_mut().filter(|log| log.status() == Status::Open) else { return };
        let next = replica.machine().next_offset();
        if self.verified_to != next || log.end_offset() < next {
            return;
        }
        let commit_min = replica.commit_min();
        let machine_sealed = replica.machine().last_segment_sealed();
        // Segments are sealed as the machine will seal them: once a batch leaves its segment
        // holding the topic's segment size, the next batch starts a new one (sealed only then,
        // so that the log never ends with an empty segment its machine does not have).
        let (mut op, mut at, mut seal_due) = match self.speculated {
            Some((op, checksum, end, seal_due))
                if op > commit_min
                    && end <= log.end_offset()
                    && replica.prepare(op).is_some_and(|(header, _)| header.checksum == checksum) =>
            {
                (op + 1, end, seal_due)
            }
            _ => (commit_min + 1, next, machine_sealed),
        };
        let mut appended = false;
        let mut stopped = false;
        'prepares: while op <= replica.head_op() {
            let Some((header, Some(body))) = replica.prepare(op) else {
                stopped = true;
                break;
            };
            for request in batched_requests(body) {
                if let Some(end) = replica.machine().lost_send(request.header.operation, request.body, at) {
                    // Lost to damage below the frontier (a single node's recovery): the log
                    // holds its place, damaged.
                    at = end;
                    continue;
                }
                let (batch, stamped, retention) =
                    match prepared_send(request.header.operation, request.body, at, header.timestamp) {
                        PreparedSend::Nothing => continue,
                        PreparedSend::Batch { batch, header, retention } => (batch, header, retention),
                        PreparedSend::Elsewhere => {
                            // The log goes on where `apply` says: wait for the commit.
                            stopped = true;
                            break 'prepares;
                        }
                    };
                if at < log.end_offset() {
                    let held = log.remembered(at);
                    // A single node trusts its log below the frontier (see `follow`).
                    let trusted = self.replica_count == 1 && stamped.end_offset() <= self.frontier;
                    if !trusted
                        && !held.is_some_and(|held| {
                            held.end_offset == stamped.end_offset()
                                && held.len == stamped.batch_length
                                && held.checksum == stamped.batch_checksum
                        })
                    {
                        self.cut_wanted = Some(at);
                        stopped = true;
                        break 'prepares;
                    }
                } else {
                    if seal_due {
                        seal_before(log, io, self.bug, &mut self.counters);
                    }
                    // A slice of the prepare's shared body: the batch is not copied to be appended.
                    match log.append_stamped(io, body.slice_ref(batch)) {
                        Ok(_) => {
                            self.counters.batches_appended += 1;
                            self.counters.batches_speculated += 1;
                            self.counters.segment_bytes += batch.len() as u64;
                            appended = true;
                        }
                        Err(error) => {
                            if error == AppendError::Busy {
                                self.counters.appends_busy += 1;
                            } else {
                                self.counters.appends_refused += 1;
                            }
                            stopped = true;
                            break 'prepares;
                        }
                    }
                }
                at = stamped.end_offset();
                seal_due = at == log.end_offset() && log.active_size() >= retention.segment_size;
            }
            self.speculated = Some((op, header.checksum, at, seal_due));
            op += 1;
        }
        if !stopped && at < log.end_offset() {
            // Past the journal's head: prepares a view change or a crash took away.
            self.cut_wanted = Some(at);
        }
        if appended && self.enforced {
            log.sync(io);
        }
        if self.cut_wanted.is_some() {
            self.cut(io);
        }
        self.drain_events(io);
    }
}

/// Seals the log's active segment (unless empty) before a batch that starts one of the
/// machine's segments.
fn seal_before(log: &mut PartitionLog, io: &mut impl Io, bug: Option<Bug>, counters: &mut SegmentLogCounters) {
    if bug == Some(Bug::SegmentLogIgnoresSeals) {
        return;
    }
    if log.segments().last().is_some_and(|(start, end, ..)| start < end) {
        log.seal(io);
        counters.segments_sealed += 1;
    }
}

/// Whether a read's batches run through `offset` (a suspect damaged place; never `u64::MAX`,
/// which stands for an I/O error at an unknown place).
fn read_covers(read: &ReadBatches, offset: u64) -> bool {
    let mut rest = &read.bytes[..];
    while let Ok(header) = BatchHeader::decode(rest) {
        if header.base_offset <= offset && offset < header.end_offset() {
            return true;
        }
        let Some(next) = rest.get(header.batch_length as usize..) else { return false };
        rest = next;
    }
    false
}

/// Whether a log in `status` serves reads: an open one, and one that failed a write or sync (its
/// group stopped on it and writes nothing more; what it wrote before is read until a restart).
fn readable(status: Status) -> bool {
    matches!(status, Status::Open | Status::Failed(_))
}
