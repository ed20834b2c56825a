//! The VSR replica: one sans-IO state machine per replica of a consensus group, generic over the
//! state machine it replicates.
//!
//! Inputs are `open` (the process started), `on_message`, `on_completion` and `tick`; outputs are
//! calls on `Io` (messages, reads, writes, syncs) and `ReplicaEvent`s for whoever drives it. One
//! handler per message (`on_prepare`, `on_prepare_ok`, `on_start_view_change`, ...), each opening
//! with the checks that decide whether the message is ignored.
//!
//! The invariants it keeps (asserted where they are relied on, in release builds too):
//! - `commit_min <= commit_max` and `commit_min <= op`: nothing is executed that is not in the log;
//! - the journal's headers form a hash chain from `op` down; an op is executed only once the chain
//!   from the head of the current view reaches it and its body is present, and the chain always
//!   reaches the checksum of the last executed op;
//! - a replica acknowledges a prepare (prepare_ok, or counting itself as primary) only once the
//!   prepare and its redundant header are synced and the superblock durably says `log_view == view`;
//! - a replica sends do_view_change for view v only after the superblock durably says `view >= v`,
//!   so after any crash it never again acknowledges a prepare of a view older than one it voted in;
//! - a primary enters normal status only after the superblock durably holds the new view's log.
//!
//! The submodules hold one part of the protocol each: `normal` (requests, prepares, commits,
//! replies), `view_change`, `repair` (missing prepares and state transfer), `durability` (the WAL,
//! superblock and checkpoint pipelines) and `recovery` (open and restart).

mod disk_low;
mod durability;
mod forwarded;
mod no_space;
mod normal;
mod read_index;
mod recovery;
mod repair;
mod timeout;
mod view_change;

use std::collections::VecDeque;

use vireo_io::{Bytes, Completion, Io, IoError, OutFrame, Peer};
use vireo_storage::layout::WalLayout;
use vireo_storage::superblock::VsrState;

use crate::client_table::ClientTable;
use crate::config::Config;
use crate::header::{Command, Header, Message};
use crate::journal::Journal;
use crate::state_machine::StateMachine;

pub use durability::{CheckpointRecord, LogMark};
use durability::{SnapshotPipeline, SuperblockPipeline, WalPipeline};
pub use forwarded::{FORWARDED_KEEP_BYTES_MIN, FORWARDED_KEPT_BYTES_MAX, FORWARDED_KEPT_MAX, FORWARDED_KEPT_TICKS_MAX};
pub use no_space::STATUS_NO_SPACE;
use read_index::ReadRounds;
pub use read_index::READ_ROUND_RESEND_TICKS;
use recovery::Opening;
pub use recovery::{Filled, FillsWanted};
use timeout::Timeout;
use view_change::DoViewChangeVote;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    /// Reading the superblock, checkpoint and WAL back after a (re)start.
    Opening,
    /// Restarted, or saw a newer view: waiting for that view's start_view before acting.
    Recovering,
    Normal,
    ViewChange,
}

/// What a replica tells its driver (the simulator's checkers and traces read these).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReplicaEvent {
    Opened {
        view: u32,
        log_view: u32,
        op: u64,
        commit_min: u64,
        formatted: bool,
    },
    StatusChanged {
        status: Status,
        view: u32,
    },
    Committed {
        op: u64,
        checksum: u128,
        digest: u64,
    },
    CheckpointDurable {
        op: u64,
    },
    /// A peer's checkpoint, assembled from `chunks` messages, replaced this replica's state.
    StateTransferred {
        op: u64,
        chunks: u32,
    },
    /// A replica that formatted under `Config::rejoin_guard` caught up to `commit`, the commit its
    /// primary announced: from now on it votes and nacks like any other.
    Rejoined {
        commit: u64,
    },
    /// A primary cut its view's log short below `op` (a nack quorum proved it uncommitted).
    LogTruncated {
        op: u64,
        sequence: u64,
    },
    /// A write met a full disk (a single replica, `no_space`): the log was cut below `op`; the
    /// new data among its requests (`refused`) is refused once the cut is durable, the rest
    /// (`again`) is prepared again.
    CutForNoSpace {
        op: u64,
        refused: u32,
        again: u32,
    },
    /// The namespace held an earlier incarnation's files (another cluster id): they are being
    /// removed, and the replica formats itself after.
    Wiping,
    /// The namespace holds a newer incarnation's files: this replica stays opening for good.
    Superseded,
    /// A write or sync of the replica's own files failed: it stopped, answers nothing more, and
    /// must be opened again (its driver restarts it) to recover from what is durable.
    Failed {
        what: &'static str,
        error: IoError,
    },
}

/// An uncommitted prepare of the primary's pipeline, with the backups that acknowledged it.
#[derive(Clone, Debug)]
struct PipelineEntry {
    op: u64,
    checksum: u128,
    acks: u64,
    /// Backups that told us they never acknowledged it (see `repair::primary_truncate`).
    nacks: u64,
}

/// Events a replica buffers for its driver before they are polled.
const EVENTS_MAX: usize = 4096;

/// Where a replica that formatted under `Config::rejoin_guard` is in rejoining its cluster.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rejoining {
    /// Heard from no primary yet: nothing to catch up to is known.
    Listening,
    /// A primary announced `commit`: the replica rejoins once it executed up to it.
    CatchingUp { commit: u64 },
}

pub struct Replica<S: StateMachine> {
    config: Config,
    replica: u8,
    status: Status,
    /// `Some` while this replica, formatted under `Config::rejoin_guard`, has not caught up: it
    /// casts no do_view_change and sends no nack_prepare (its storage may have forgotten
    /// prepares it acknowledged).
    rejoining: Option<Rejoining>,
    /// While rejoining: the replicas heard from, and the highest view any of them named (or
    /// promised): the replica forgot the views it promised, so only enough of its peers can
    /// tell it which view is current.
    rejoin_heard: u64,
    rejoin_view_max: u32,
    /// After rejoining: ops up to here may be ones it acknowledged before its storage was lost
    /// and still uncommitted when it caught up (at most a pipeline's worth past what it held):
    /// it never nacks them.
    nack_floor: u64,
    view: u32,
    /// The highest view this replica promised not to go below (voted in, or installed): what the
    /// superblock persists as `view`.
    view_promised: u32,
    superseded: bool,
    failed: bool,
    /// The view whose log this replica's log is (the latest view it installed a log from).
    log_view: u32,
    /// The head of the log and its checksum.
    op: u64,
    op_checksum: u128,
    /// The last executed op and its checksum.
    commit_min: u64,
    commit_min_checksum: u128,
    /// The highest op known to be committed.
    commit_max: u64,
    journal: Journal,
    state_machine: S,
    client_table: ClientTable,
    /// The log suffix as the last start_view (or our own view change) installed it: names the
    /// head in the superblock while the journal cannot hold it yet.
    log_headers: Vec<Header>,
    /// The timestamp of the newest prepare: prepares' timestamps strictly increase.
    timestamp_last: u64,

    pipeline: VecDeque<PipelineEntry>,
    /// Requests waiting for a prepare: each one's header and whole frame (`on_frame`).
    request_queue: VecDeque<(Header, Vec<u8>)>,

    start_view_change_votes: u64,
    do_view_change_votes: Vec<Option<DoViewChangeVote>>,
    do_view_change_sent: bool,
    /// The new primary has installed the view's log and waits for the superblock to hold it.
    start_view_installed: bool,
    /// How many times this view's log was cut short by its primary (nack quorum); a start_view
    /// of the same view is installed again only with a higher number.
    start_view_sequence: u64,
    /// A start_view was asked for this tick already (rate limit).
    start_view_requested: bool,

    wal: WalPipeline,
    superblock: SuperblockPipeline,
    snapshot: SnapshotPipeline,
    /// The newest checkpoint whose snapshot is on disk (durable once the superblock names it).
    checkpoint_ready: Option<CheckpointRecord>,
    /// The state machine's external log is durable below this cursor (`u64::MAX` without one).
    external_durable_cursor: u64,
    /// Below this offset the external log holds the batches of this journal's prepares (durably,
    /// or written when durability is not enforced): a prepare is acknowledged only once its
    /// cursor is at or below it (`ack_safe`).
    external_ack_cursor: u64,

    /// A peer's checkpoint being assembled from its chunks (bounded by `snapshot_size_max`).
    transfer: Option<repair::Transfer>,
    /// The newest checkpoint a peer told us of, and who.
    peer_checkpoint_op: u64,
    peer_checkpoint_replica: u8,
    commit_stall_ticks: u64,

    timeout_prepare: Timeout,
    timeout_commit_message: Timeout,
    timeout_normal_heartbeat: Timeout,
    timeout_view_change_message: Timeout,
    timeout_view_change_status: Timeout,
    timeout_repair: Timeout,
    timeout_request_start_view: Timeout,
    /// Ticks since this backup last heard from its primary.
    primary_silent_ticks: u64,
    /// Ticks since each replica last acknowledged one of our prepares (as primary).
    ack_silent_ticks: Vec<u64>,
    /// Every op up to here is either under the durable superblock's log head or a durable prepare
    /// chained above it (see `ack_safe`); reset whenever the log is replaced.
    durable_chain_op: u64,
    /// Prepares after our head were asked for this tick already.
    repair_after_head_requested: bool,
    /// A prepare after our head was dropped, or not asked for, for want of a free WAL slot: the
    /// next durable checkpoint asks for it (`on_superblock_durable`).
    wal_full_dropped: bool,
    /// Prepares of our log's next ops that came while the WAL had no free slot, in order, at
    /// most `prepare_queue_max`: taken up when the next checkpoint is durable.
    held_for_wal: VecDeque<(Header, Bytes)>,
    /// Requests this backup forwarded, kept for the elided prepares of them (`forwarded`).
    forwarded: forwarded::Forwarded,
    /// The node's disk is below its reserve (`disk_low`), and a prepare past the head was refused
    /// meanwhile (asked for again once space is back).
    disk_low: bool,
    disk_low_dropped: bool,

    /// Read rounds: the read index of reads served from this replica (`read_index`).
    read_rounds: ReadRounds,
    /// Requests refused because a write met a full disk (`no_space`, a single replica only).
    no_space: no_space::NoSpace,

    opening: Option<Opening>,
    events: VecDeque<ReplicaEvent>,
}

/// The command a frame's header names (byte 60), if it is one.
fn command_of(bytes: &[u8]) -> Option<Command> {
    bytes.get(60).and_then(|command| Command::from_u8(*command))
}

impl<S: StateMachine> Replica<S> {
    /// Creates a replica and starts reading its durable state; it acts once `Opened` is reported.
    pub fn open(config: Config, replica: u8, io: &mut impl Io) -> Replica<S> {
        config.validate();
        assert!(replica < config.replica_count);
        let layout = WalLayout::new(config.journal_slots, config.prepare_size_max);
        let count = config.replica_count as usize;
        let mut replica = Replica {
            replica,
            rejoining: None,
            rejoin_heard: 0,
            rejoin_view_max: 0,
            nack_floor: 0,
            status: Status::Opening,
            view: 0,
            view_promised: 0,
            superseded: false,
            failed: false,
            log_view: 0,
            op: 0,
            op_checksum: 0,
            commit_min: 0,
            commit_min_checksum: 0,
            commit_max: 0,
            journal: Journal::new(layout),
            state_machine: S::empty(),
            client_table: ClientTable::new(config.clients_max),
            log_headers: Vec::new(),
            timestamp_last: 0,
            pipeline: VecDeque::new(),
            request_queue: VecDeque::new(),
            start_view_change_votes: 0,
            do_view_change_votes: vec![None; count],
            do_view_change_sent: false,
            start_view_installed: false,
            start_view_sequence: 0,
            start_view_requested: false,
            wal: WalPipeline::default(),
            superblock: SuperblockPipeline::default(),
            snapshot: SnapshotPipeline::default(),
            external_durable_cursor: if S::EXTERNAL_LOG { 0 } else { u64::MAX },
            external_ack_cursor: if S::EXTERNAL_LOG { 0 } else { u64::MAX },
            checkpoint_ready: None,
            peer_checkpoint_op: 0,
            transfer: None,
            peer_checkpoint_replica: 0,
            commit_stall_ticks: 0,
            timeout_prepare: Timeout::new(config.prepare_timeout_ticks, false),
            timeout_commit_message: Timeout::new(config.commit_message_timeout_ticks, false),
            timeout_normal_heartbeat: Timeout::new(config.normal_heartbeat_timeout_ticks, false),
            timeout_view_change_message: Timeout::new(config.view_change_message_timeout_ticks, false),
            timeout_view_change_status: Timeout::new(config.view_change_status_timeout_ticks, true),
            timeout_repair: Timeout::new(config.repair_timeout_ticks, false),
            timeout_request_start_view: Timeout::new(config.request_start_view_timeout_ticks, true),
            primary_silent_ticks: 0,
            ack_silent_ticks: vec![u64::MAX / 2; count],
            durable_chain_op: 0,
            repair_after_head_requested: false,
            wal_full_dropped: false,
            held_for_wal: VecDeque::new(),
            disk_low: false,
            disk_low_dropped: false,
            forwarded: forwarded::Forwarded::default(),
            read_rounds: ReadRounds::default(),
            no_space: no_space::NoSpace::default(),
            opening: None,
            events: VecDeque::new(),
            config,
        };
        replica.open_start(io);
        replica
    }

    // Getters.

    pub fn replica(&self) -> u8 {
        self.replica
    }
    pub fn status(&self) -> Status {
        self.status
    }
    pub fn view(&self) -> u32 {
        self.view
    }
    pub fn log_view(&self) -> u32 {
        self.log_view
    }
    pub fn op(&self) -> u64 {
        self.op
    }
    pub fn commit_min(&self) -> u64 {
        self.commit_min
    }
    pub fn commit_max(&self) -> u64 {
        self.commit_max
    }
    /// The state machine, to change what it keeps outside the replicated state (its digest,
    /// snapshot and equality ignore it): a partition's batches applied and not yet in its log.
    pub fn state_machine_mut(&mut self) -> &mut S {
        &mut self.state_machine
    }

    pub fn state_machine(&self) -> &S {
        &self.state_machine
    }
    /// Opened for an older incarnation than its namespace's files hold (see `recovery`).
    pub fn superseded(&self) -> bool {
        self.superseded
    }

    /// Stopped by a failed write or sync (`ReplicaEvent::Failed`).
    pub fn failed(&self) -> bool {
        self.failed
    }

    /// A write or sync of a file the group keeps beside its own (a partition's segment log)
    /// failed on the device: the replica stops as if its own had (`fail_stop`).
    pub fn fail_storage(&mut self, what: &'static str) {
        self.fail_stop(IoError::Device, what);
    }

    /// A write or sync failed: nothing this replica holds in memory may be promised any more.
    /// It stops taking inputs; its driver opens it again from what is durable.
    pub(super) fn fail_stop(&mut self, error: IoError, what: &'static str) {
        if !self.failed {
            self.failed = true;
            self.event(ReplicaEvent::Failed { what, error });
        }
    }

    pub fn client_table(&self) -> &ClientTable {
        &self.client_table
    }
    pub fn config(&self) -> &Config {
        &self.config
    }
    pub fn is_primary(&self) -> bool {
        self.config.primary_index(self.view) == self.replica
    }
    /// The superblock state on stable storage.
    pub fn superblock_durable(&self) -> &VsrState {
        &self.superblock.durable.vsr_state
    }
    /// The prepare body of an op this replica holds (for checkers reading committed history).
    pub fn prepare_body(&self, op: u64, checksum: u128) -> Option<&[u8]> {
        self.journal.get_exact(op, checksum).and_then(|entry| entry.body.as_deref())
    }

    /// Switches the group's durability mode (a topic updated): the WAL batches written from now
    /// on are acknowledged after their syncs, or once written.
    pub fn set_sync_writes(&mut self, sync_writes: bool) {
        self.config.sync_writes = sync_writes;
    }

    /// Whether the journal replaced or dropped prepares since the external log last reported
    /// (`external_log_durable`): it must report again before any is acknowledged.
    pub fn journal_replaced(&self) -> bool {
        self.journal.replaced
    }

    /// The journal's prepare of `op`: its header, and its body unless only the header is here.
    pub fn journal_prepare(&self, op: u64) -> Option<(&Header, Option<&vireo_io::Bytes>)> {
        self.journal.get(op).map(|entry| (&entry.header, entry.body.as_ref()))
    }

    /// Whether the journal knows the prepare (op, checksum), by its body or by its header alone
    /// (for checkers of what a replica acknowledged).
    pub fn holds_prepare(&self, op: u64, checksum: u128) -> bool {
        self.journal.get_exact(op, checksum).is_some()
    }

    /// Whether this replica holds the prepare whole: its header and its body (a prepare whose WAL
    /// slot left its batches to an external log holds them only if the log gave them back).
    pub fn holds_prepare_whole(&self, op: u64, checksum: u128) -> bool {
        self.journal.get_exact(op, checksum).is_some_and(|entry| entry.body.is_some() && !entry.faulty)
    }

    /// The prepares this replica holds past its last executed op, in op order, as far as their
    /// bodies are here: not committed as far as it knows. For a planted bug that serves them.
    pub fn prepares_past_commit(&self) -> impl Iterator<Item = (&Header, &vireo_io::Bytes)> {
        (self.commit_min + 1..=self.op).map_while(|op| {
            let entry = self.journal.get(op)?;
            Some((&entry.header, entry.body.as_ref()?))
        })
    }

    /// The next event for the driver, if any.
    pub fn poll_event(&mut self) -> Option<ReplicaEvent> {
        self.events.pop_front()
    }

    fn event(&mut self, event: ReplicaEvent) {
        if self.events.len() == EVENTS_MAX {
            // A driver that never polls loses the oldest events, never the replica's state.
            self.events.pop_front();
        }
        self.events.push_back(event);
    }

    fn set_status(&mut self, status: Status) {
        if self.status != status {
            self.status = status;
            self.event(ReplicaEvent::StatusChanged { status, view: self.view });
        }
    }

    fn primary_of(&self, view: u32) -> u8 {
        self.config.primary_index(view)
    }

    fn replica_count(&self) -> u8 {
        self.config.replica_count
    }

    fn header(&self, command: Command) -> Header {
        let mut header = Header::new(command, self.config.cluster, self.replica);
        header.view = self.view;
        header.group = crate::header::group_of(self.config.namespace);
        header
    }

    fn send(&self, io: &mut impl Io, to: u8, message: &Message) {
        assert_ne!(to, self.replica);
        io.send(Peer::Replica(to), message.encode());
    }

    fn send_to_others(&self, io: &mut impl Io, message: &Message) {
        if self.replica_count() > 1 {
            self.send_frame_to_others(io, message.encode());
        }
    }

    /// Sends `frame` to every other replica: a copy for each but the last, which takes it.
    fn send_frame_to_others(&self, io: &mut impl Io, frame: Vec<u8>) {
        let mut others = (0..self.replica_count()).filter(|to| *to != self.replica).peekable();
        while let Some(to) = others.next() {
            if others.peek().is_some() {
                io.send(Peer::Replica(to), frame.clone());
            } else {
                io.send(Peer::Replica(to), frame);
                return;
            }
        }
    }

    /// Sends a prepare to every other replica but `except`: its encoded header and the body the
    /// journal holds, shared, not copied.
    fn send_prepare_to_others(&self, io: &mut impl Io, header: &Header, body: &Bytes, except: Option<u8>) {
        let head = header.encode().to_vec();
        for to in (0..self.replica_count()).filter(|to| *to != self.replica && Some(*to) != except) {
            io.send_frame(Peer::Replica(to), OutFrame::new(head.clone(), vec![body.clone()]));
        }
    }

    // Inputs.

    /// A message arrived from a peer or a client. Anything malformed is dropped.
    pub fn on_message(&mut self, io: &mut impl Io, bytes: &[u8]) {
        match command_of(bytes) {
            Some(Command::Request) => self.on_request_frame(io, bytes.to_vec()),
            Some(command) => self.on_peer_message(io, command, bytes),
            None => {}
        }
    }

    /// `on_message` for a frame the caller gives up: a client's request keeps its frame, which
    /// becomes the body of a prepare of it alone as it is (the frame is the request's header,
    /// then its body: a prepare body's layout), so its bytes are not copied on the way.
    pub fn on_frame(&mut self, io: &mut impl Io, frame: Vec<u8>) {
        match command_of(&frame) {
            Some(Command::Request) => self.on_request_frame(io, frame),
            Some(Command::Prepare) => self.on_prepare_frame(io, frame),
            Some(command) => self.on_peer_message(io, command, &frame),
            None => {}
        }
    }

    /// A prepare whose frame the caller gives up: its body is kept where it arrived (the journal,
    /// the WAL write and the segment log hold slices of that one buffer).
    fn on_prepare_frame(&mut self, io: &mut impl Io, frame: Vec<u8>) {
        if self.status == Status::Opening || self.failed {
            return;
        }
        let Ok((header, _)) = Message::decode_borrowed(&frame, true) else {
            return;
        };
        if !self.peer_admitted(Command::Prepare, &header) {
            return;
        }
        let body = vireo_io::receive_buffers::shared(frame).slice(vireo_storage::layout::HEADER_SIZE..);
        self.on_prepare(io, header, body);
        self.rejoin_progress(io);
        self.assert_invariants();
    }

    fn on_request_frame(&mut self, io: &mut impl Io, frame: Vec<u8>) {
        if self.status == Status::Opening || self.failed {
            return;
        }
        // A client's frame may leave its checksums out (zero); one that has them is checked.
        let Ok((header, _)) = Message::decode_borrowed(&frame, false) else {
            return;
        };
        // A frame of another group reached us (a routing bug or a stale partition): not ours.
        if header.group != 0 && header.group != crate::header::group_of(self.config.namespace) {
            return;
        }
        self.on_request(io, header, frame);
    }

    /// A replica's message (every command but a client's request): its checksums must be right.
    fn on_peer_message(&mut self, io: &mut impl Io, command: Command, bytes: &[u8]) {
        if self.status == Status::Opening || self.failed {
            return;
        }
        let Ok(message) = Message::decode(bytes, true) else {
            return;
        };
        if !self.peer_admitted(command, &message.header) {
            return;
        }
        match command {
            Command::Request => unreachable!("requests go through on_request_frame"),
            Command::Prepare => self.on_prepare(io, message.header, message.body.into()),
            Command::PrepareElided => self.on_prepare_elided(io, message),
            Command::PrepareOk => self.on_prepare_ok(io, message),
            Command::Commit => self.on_commit(io, message),
            Command::StartViewChange => self.on_start_view_change(io, message),
            Command::DoViewChange => self.on_do_view_change(io, message),
            Command::StartView => self.on_start_view(io, message),
            Command::RequestStartView => self.on_request_start_view(io, message),
            Command::RequestPrepares => self.on_request_prepares(io, message),
            Command::NackPrepare => self.on_nack_prepare(io, message),
            Command::RequestHeaders => self.on_request_headers(io, message),
            Command::Headers => self.on_headers(io, message),
            Command::RequestCheckpoint => self.on_request_checkpoint(io, message),
            Command::Checkpoint => self.on_checkpoint(io, message),
            Command::Ping => self.on_ping(io, message),
            Command::Pong => self.on_pong(io, message),
            _ => {}
        }
        self.rejoin_progress(io);
        self.assert_invariants();
    }

    /// The checks every replica message passes before its handler sees it, and what a rejoining
    /// replica learns from it: whether the handler may take it.
    fn peer_admitted(&mut self, command: Command, header: &Header) -> bool {
        // A prepare names the primary that created it, not the replica that sent it (repair
        // relays prepares, ours included); every other replica message names its sender.
        // A frame of another group reached us (a routing bug or a stale partition): not ours.
        if header.group != 0 && header.group != crate::header::group_of(self.config.namespace) {
            return false;
        }
        if header.cluster != self.config.cluster
            || header.replica >= self.replica_count()
            || (header.replica == self.replica && command != Command::Prepare)
        {
            return false;
        }
        if self.rejoining.is_some() {
            // A prepare names the primary that made it, not the replica that sent it: repair
            // relays prepares of older views, so one made by view 0's primary can reach us from
            // anybody, long after that primary moved on to newer views. It says nothing of which
            // view its maker is in now, so it must not count as hearing from it (its view, a view
            // that did start, still bounds `rejoin_view_max` from below). Seed 1917: a replica
            // that had lost its promise of view 2 was relayed view 0 prepares by view 1's stale
            // primary, counted view 0's primary (which held view 2) as heard, rejoined view 1
            // and let that dead view commit ops which view 3's log then did not hold.
            if !matches!(command, Command::Prepare | Command::PrepareElided) {
                self.rejoin_heard |= 1 << header.replica;
            }
            let promised = if command == Command::StartViewChange { header.context as u32 } else { 0 };
            self.rejoin_view_max = self.rejoin_view_max.max(header.view).max(promised);
        }
        // The commit a primary announces (a heartbeat, or the start of its view), for a replica
        // that is rejoining: what it must hold before it votes again. Only from the primary of
        // the newest view enough peers name: any view-change quorum then holds one of them.
        if self.rejoining == Some(Rejoining::Listening)
            && matches!(command, Command::Commit | Command::StartView)
            && header.replica == self.primary_of(header.view)
            && header.view >= self.view.max(self.rejoin_view_max)
            && self.rejoin_heard_enough()
        {
            self.rejoining = Some(Rejoining::CatchingUp { commit: header.commit });
        }
        true
    }

    /// Whether a rejoining replica heard from enough peers (`replica_count - quorum_view_change
    /// + 1` of them) that every view-change quorum, and so every view promised, includes one.
    fn rejoin_heard_enough(&self) -> bool {
        let others = (self.rejoin_heard & !(1 << self.replica)).count_ones() as usize;
        others > self.replica_count() as usize - self.config.quorum_view_change()
    }

    /// Whether this replica is still rejoining (see `Config::rejoin_guard`).
    pub fn rejoining(&self) -> Option<Rejoining> {
        self.rejoining
    }

    /// Ends rejoining once the announced commit is executed here and the replica, in normal
    /// status, holds and executed every op it knows committed (a state transfer leaves the ops
    /// after its checkpoint to repair: until they are here, its log is short of its view's);
    /// a view change this replica sat out may then go on with its vote.
    fn rejoin_progress(&mut self, io: &mut impl Io) {
        if let Some(Rejoining::CatchingUp { commit }) = self.rejoining {
            let caught_up = self.status == Status::Normal
                && self.view >= self.rejoin_view_max
                && self.commit_min >= commit
                && self.commit_min == self.commit_max
                && self.op >= self.commit_max;
            if caught_up {
                self.rejoining = None;
                self.nack_floor = self.op.max(commit) + 2 * self.config.prepare_queue_max as u64;
                // The superblock stops saying "rejoining": a crash from now on keeps what it holds.
                self.superblock_update(io);
                self.event(ReplicaEvent::Rejoined { commit });
                self.view_change_progress(io);
            }
        }
    }

    /// An I/O request completed.
    pub fn on_completion(&mut self, io: &mut impl Io, completion: Completion) {
        if self.failed {
            return;
        }
        let token = completion.token();
        match durability::token_kind(token) {
            durability::TokenKind::Open => self.open_on_completion(io, completion),
            durability::TokenKind::Wal => self.wal_on_completion(io, completion),
            durability::TokenKind::Superblock => self.superblock_on_completion(io, completion),
            durability::TokenKind::Snapshot => self.snapshot_on_completion(io, completion),
        }
        self.rejoin_progress(io);
        self.assert_invariants();
    }

    /// Called every `TICK_NS` by the driver: every timeout is counted here.
    pub fn tick(&mut self, io: &mut impl Io) {
        if !self.failed {
            self.superblock_retry_refused(io);
        }
        if self.status == Status::Opening || self.failed {
            return;
        }
        self.primary_silent_ticks += 1;
        self.repair_after_head_requested = false;
        self.forwarded.tick();
        self.start_view_requested = false;
        for silent in &mut self.ack_silent_ticks {
            *silent = silent.saturating_add(1);
        }
        if self.commit_min < self.commit_max {
            self.commit_stall_ticks += 1;
        } else {
            self.commit_stall_ticks = 0;
        }
        let fired = [
            self.timeout_prepare.tick(),
            self.timeout_commit_message.tick(),
            self.timeout_normal_heartbeat.tick(),
            self.timeout_view_change_message.tick(),
            self.timeout_view_change_status.tick(),
            self.timeout_repair.tick(),
            self.timeout_request_start_view.tick(),
        ];
        if fired[0] {
            self.on_prepare_timeout(io);
        }
        if fired[1] {
            self.on_commit_message_timeout(io);
        }
        if fired[2] {
            self.on_normal_heartbeat_timeout(io);
        }
        if fired[3] {
            self.on_view_change_message_timeout(io);
        }
        if fired[4] {
            self.on_view_change_status_timeout(io);
        }
        if fired[5] {
            self.on_repair_timeout(io);
        }
        if fired[6] {
            self.on_request_start_view_timeout(io);
        }
        self.read_round_tick(io);
        self.no_space_tick(io);
        self.rejoin_progress(io);
        self.assert_invariants();
    }

    /// Starts the timeouts of the current status and stops the others.
    fn timeouts_for_status(&mut self, io: &mut impl Io) {
        let normal = self.status == Status::Normal;
        let primary = self.is_primary();
        self.timeout_prepare.set(normal && primary, io);
        self.timeout_commit_message.set(normal && primary, io);
        self.timeout_normal_heartbeat.set(normal && !primary, io);
        self.timeout_view_change_message.set(self.status == Status::ViewChange, io);
        self.timeout_view_change_status.set(self.status == Status::ViewChange, io);
        self.timeout_repair.set(normal || self.status == Status::ViewChange, io);
        self.timeout_request_start_view.set(self.status == Status::Recovering, io);
        self.primary_silent_ticks = 0;
    }

    fn assert_invariants(&self) {
        if self.status == Status::Opening {
            return;
        }
        assert!(self.commit_min <= self.commit_max, "commit_min {} > commit_max {}", self.commit_min, self.commit_max);
        assert!(self.commit_min <= self.op, "commit_min {} > op {}", self.commit_min, self.op);
        assert!(self.log_view <= self.view_promised.max(self.log_view) && self.view_promised <= self.view);
        assert!(self.log_view <= self.view);
        assert!(self.pipeline.len() <= self.config.journal_slots as usize);
        assert!(self.request_queue.len() <= self.config.request_queue_max);
        if self.op == self.commit_min {
            assert_eq!(self.op_checksum, self.commit_min_checksum);
        }
        if let Some(entry) = self.journal.get(self.op) {
            assert_eq!(
                entry.header.checksum, self.op_checksum,
                "replica {}: the journal's op {} is not the head's prepare ({:?}, view {})",
                self.replica, self.op, self.status, self.view
            );
        }
        if self.status == Status::Normal && self.is_primary() {
            assert!(self.pipeline.iter().all(|entry| entry.op > self.commit_max && entry.op <= self.op));
        }
    }
}
