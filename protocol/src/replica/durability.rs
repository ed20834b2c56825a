//! The replica's three write pipelines, each one request in flight at a time:
//! - the WAL: group commit. Every prepare that arrives while a commit is in flight waits for the
//!   next one, and one commit costs one sync however many prepares it holds (an fsync costs
//!   about 4 ms on our machines). A commit writes the prepares queued since the last one and the
//!   redundant headers of the prepares the last one made durable, then syncs the file once: a
//!   header never shares a sync with its own prepare, so a durable header still means a durable
//!   prepare (see `vireo_storage::layout`), and a prepare is acknowledged when the commit that
//!   wrote its header completes (two syncs after it was written, as a prepare-then-header order
//!   costs, but half the syncs under load). A group whose durability is not enforced
//!   (`Config::sync_writes` false) skips the syncs: a commit is complete once its writes
//!   completed, which survives the process but not the machine;
//! - the superblock: both copies in turn, each synced (see `vireo_storage::superblock`); a request
//!   made while a write is in flight is coalesced into one more write of the then-current state;
//! - checkpoints: a snapshot of the executed state into the free region of `snapshot.bin`, synced,
//!   then named by the superblock. The WAL never overwrites a slot whose op the durable checkpoint
//!   does not cover.

use std::collections::VecDeque;

use vireo_io::{Completion, Io, IoError, Token};
use vireo_storage::checksum::checksum64;
use vireo_storage::layout::{snapshot_file, snapshot_region_offset, superblock_files, wal_file, HEADER_SIZE};
use vireo_storage::superblock::{Superblock, VsrState, SUPERBLOCK_SIZE_MAX};

use super::{Replica, ReplicaEvent, Status};
use crate::client_table::ClientTable;
use crate::config::Bug;
use crate::elided::ElidedBody;
use crate::journal::elided_prepare_bytes;
use crate::state_machine::StateMachine;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TokenKind {
    Open,
    Wal,
    Superblock,
    Snapshot,
}

const TOKEN_KIND_SHIFT: u32 = 56;

pub fn token(kind: TokenKind, detail: u64) -> Token {
    assert!(detail < 1 << TOKEN_KIND_SHIFT);
    let kind = match kind {
        TokenKind::Open => 1u64,
        TokenKind::Wal => 2,
        TokenKind::Superblock => 3,
        TokenKind::Snapshot => 4,
    };
    Token(kind << TOKEN_KIND_SHIFT | detail)
}

pub fn token_kind(token: Token) -> TokenKind {
    match token.0 >> TOKEN_KIND_SHIFT {
        1 => TokenKind::Open,
        2 => TokenKind::Wal,
        3 => TokenKind::Superblock,
        4 => TokenKind::Snapshot,
        other => panic!("completion with a token no request of ours carries: kind {other}"),
    }
}

pub fn token_detail(token: Token) -> u64 {
    token.0 & ((1 << TOKEN_KIND_SHIFT) - 1)
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum WalStage {
    #[default]
    Idle,
    /// A group commit's writes are in flight.
    Writing,
    /// Its writes completed; its sync is in flight (durability enforced).
    Syncing,
}

#[derive(Default)]
pub struct WalPipeline {
    /// Ops waiting for the next group commit (no duplicates; at most one per slot).
    queue: VecDeque<u64>,
    stage: WalStage,
    /// The prepares the group commit in flight writes into their slots.
    batch: Vec<(u64, u128)>,
    /// The redundant headers the group commit in flight writes: of prepares an earlier commit
    /// made durable, so that a durable header always follows a durable prepare.
    headers: Vec<(u64, u128)>,
    /// Prepares a completed group commit made durable whose redundant headers are not written
    /// yet: the next group commit writes them, beside its own prepares, once the external log
    /// holds what they left out. They are durable, and acknowledged, when that commit completes.
    /// At most two commits' batches (`write_batch_max` each): a commit whose headers cannot go
    /// yet leaves them here, and no third batch is taken until they do.
    headers_pending: Vec<(u64, u128)>,
    outstanding: usize,
    /// Ops whose write in the commit in flight a full disk refused (a single replica: see
    /// `no_space`), at most the commit's writes.
    refused: Vec<u64>,
}

impl WalPipeline {
    /// Queues a recovered prepare whose redundant header is missing; written once the replica is
    /// open (by the first flush).
    pub fn queue_after_open(&mut self, op: u64) {
        if !self.queue.contains(&op) {
            self.queue.push_back(op);
        }
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum SuperblockStage {
    #[default]
    Idle,
    WritingFirst,
    SyncingFirst,
    WritingSecond,
    SyncingSecond,
}

#[derive(Default)]
pub struct SuperblockPipeline {
    /// The newest superblock on stable storage (sequence 0: none yet).
    pub durable: Superblock,
    stage: SuperblockStage,
    writing: Option<Superblock>,
    dirty: bool,
    /// The copy's write in flight was refused by a full disk: made again at the next tick.
    write_refused: bool,
    /// The copy an update writes first: never the only whole one (see `vireo_storage::superblock`).
    pub first_copy: usize,
}

/// A checkpoint whose snapshot is on disk.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckpointRecord {
    pub op: u64,
    pub checksum: u128,
    pub size: u64,
    pub checksum64: u64,
    pub region: u8,
    /// Where the state machine's external log stood at `op` (the superblock records it as the
    /// `offset_frontier` and `retained_from` its owner claims when it opens the log).
    pub mark: LogMark,
}

/// Where a state machine's external log stands at a checkpoint: durable through `cursor` (its
/// `prepare_cursor`: the checkpoint was written only once the log held it), and needed from
/// `retained_from` on (its `retained_from`: the log deletes nothing from there until a later
/// checkpoint is durable, so a restart from this one finds every batch it goes on from).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LogMark {
    pub cursor: u64,
    pub retained_from: u64,
}

impl LogMark {
    pub fn of<S: StateMachine>(state_machine: &S) -> LogMark {
        LogMark { cursor: state_machine.prepare_cursor(), retained_from: state_machine.retained_from() }
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum SnapshotStage {
    #[default]
    Idle,
    Writing,
    Syncing,
}

#[derive(Default)]
pub struct SnapshotPipeline {
    stage: SnapshotStage,
    writing: Option<(CheckpointRecord, Vec<u8>)>,
    /// A snapshot to write once the previous checkpoint is durable and (for a state machine with
    /// an external log) that log is durable through its cursor: (op, checksum, cursor, bytes),
    /// the latest wins.
    pending: Option<(u64, u128, LogMark, Vec<u8>)>,
    /// The bytes of `checkpoint_ready`, served to peers for state transfer.
    ready_bytes: Vec<u8>,
}

/// A checkpoint's contents: `[op u64][checksum u128][timestamp u64][client table][len u64][state]`.
pub struct Snapshot<S> {
    pub op: u64,
    pub checksum: u128,
    pub timestamp: u64,
    pub client_table: ClientTable,
    pub state_machine: S,
}

impl<S: StateMachine> Snapshot<S> {
    pub fn encode(op: u64, checksum: u128, timestamp: u64, client_table: &ClientTable, state_machine: &S) -> Vec<u8> {
        let mut bytes = Vec::new();
        bytes.extend_from_slice(&op.to_le_bytes());
        bytes.extend_from_slice(&checksum.to_le_bytes());
        bytes.extend_from_slice(&timestamp.to_le_bytes());
        client_table.encode(&mut bytes);
        let state = state_machine.snapshot();
        bytes.extend_from_slice(&(state.len() as u64).to_le_bytes());
        bytes.extend_from_slice(&state);
        bytes
    }

    pub fn decode(bytes: &[u8]) -> Option<Snapshot<S>> {
        let op = u64::from_le_bytes(bytes.get(0..8)?.try_into().ok()?);
        let checksum = u128::from_le_bytes(bytes.get(8..24)?.try_into().ok()?);
        let timestamp = u64::from_le_bytes(bytes.get(24..32)?.try_into().ok()?);
        let (client_table, used) = ClientTable::decode(bytes.get(32..)?)?;
        let at = 32 + used;
        let len = u64::from_le_bytes(bytes.get(at..at + 8)?.try_into().ok()?) as usize;
        let state = bytes.get(at + 8..at.checked_add(8)?.checked_add(len)?)?;
        if at + 8 + len != bytes.len() {
            return None;
        }
        Some(Snapshot { op, checksum, timestamp, client_table, state_machine: S::restore(state)? })
    }
}

impl<S: StateMachine> Replica<S> {
    /// The state of the write pipelines, for failure reports.
    pub fn debug_pipelines(&self) -> String {
        let walk = self.walk_chain(4);
        format!(
            "pipeline={:?} requests_queued={} sequence={}/{} chain_complete={} missing_body={:?} repair={:?} wal={:?}/{} queued={:?} superblock={:?} snapshot={:?} wal_op_limit={}",
            self.pipeline.iter().map(|entry| (entry.op, entry.checksum as u16, entry.acks)).collect::<Vec<_>>(),
            self.request_queue.len(),
            self.start_view_sequence,
            self.superblock_durable().log_view_sequence,
            walk.complete,
            walk.lowest_missing_body,
            walk.repair.iter().map(|(op, checksum)| (*op, *checksum as u16)).collect::<Vec<_>>(),
            self.wal.stage,
            self.wal.outstanding,
            self.wal.queue.iter().take(8).collect::<Vec<_>>(),
            self.superblock.stage,
            self.snapshot.stage,
            self.wal_op_limit()
        )
    }

    /// The highest op the WAL may hold now: its slot's previous op is covered by the durable
    /// checkpoint.
    pub(super) fn wal_op_limit(&self) -> u64 {
        self.superblock_durable().checkpoint_op + self.config.journal_slots
    }

    /// The superblock durably holds our current view's log: acknowledgements may go out.
    pub(super) fn log_view_durable(&self) -> bool {
        self.superblock.durable.sequence > 0
            && self.superblock_durable().log_view == self.view
            && self.superblock_durable().log_view_sequence == self.start_view_sequence
    }

    /// Whether acknowledging `op` is a promise this replica keeps across a crash: the durable
    /// superblock holds our current log (view and start_view) with a head at or above `op`, or
    /// every op from that head up to `op` is a durable prepare of this log, a chain recovery
    /// follows. The chain's end is cached and only ever extended until the log is replaced.
    pub(super) fn ack_safe(&mut self, op: u64) -> bool {
        if !self.log_view_durable() {
            return false;
        }
        if S::EXTERNAL_LOG && self.config.bug != Some(Bug::LogDurabilityIgnored) {
            // The prepare's batches live in the external log only: it must hold them, and hold
            // this journal's (not those of prepares a view change replaced since it reported).
            let held = self.journal.get(op).is_some_and(|entry| entry.header.cursor <= self.external_ack_cursor);
            if self.journal.replaced || !held {
                return false;
            }
        }
        let durable_head = self.superblock_durable().log_op;
        self.durable_chain_op = self.durable_chain_op.max(durable_head);
        while self.durable_chain_op < op {
            let next = self.durable_chain_op + 1;
            let chained = self.journal.get(next).is_some_and(|entry| {
                entry.durable
                    && entry.header.view == self.view
                    && entry.header.context as u64 == self.start_view_sequence
            });
            if !chained {
                break;
            }
            self.durable_chain_op = next;
        }
        op <= self.durable_chain_op
    }

    pub(super) fn view_durable(&self) -> bool {
        self.superblock.durable.sequence > 0 && self.superblock_durable().view >= self.view
    }

    // The WAL.

    pub(super) fn wal_enqueue(&mut self, io: &mut impl Io, op: u64) {
        let entry = self.journal.get_mut(op).expect("enqueued op is in the journal");
        assert!(entry.body.is_some());
        entry.durable = false;
        if !self.wal.queue.contains(&op) {
            self.wal.queue.push_back(op);
        }
        assert!(self.wal.queue.len() <= self.config.journal_slots as usize * 2);
        self.wal_flush(io);
    }

    /// Starts the next group commit if none is in flight: the redundant headers of the prepares
    /// the last one made durable (once the external log holds their spans), and the prepares
    /// queued since, all covered by one sync. A header is written only in the commit after the
    /// one that made its prepare durable, so recovery's rule holds: a durable redundant header
    /// means its prepare was durable first (`vireo_storage::layout`).
    pub(super) fn wal_flush(&mut self, io: &mut impl Io) {
        if self.wal.stage != WalStage::Idle || self.status == Status::Opening {
            return;
        }
        assert!(self.wal.batch.is_empty() && self.wal.headers.is_empty());
        assert_eq!(self.wal.outstanding, 0);
        let file = wal_file(self.config.namespace);
        if !self.wal.headers_pending.is_empty() && self.wal_headers_held() {
            for (op, checksum) in std::mem::take(&mut self.wal.headers_pending) {
                // A prepare a view change replaced since gets no header, and is not made durable
                // by this commit even if the journal holds it again when the commit ends: its
                // slot may hold another prepare by then.
                if self.journal.get_exact(op, checksum).is_none() {
                    continue;
                }
                self.wal_write_header(io, op);
                self.wal.headers.push((op, checksum));
            }
        }
        // Headers that could not go stay pending while prepares go on being written beside them,
        // up to the bound: no third batch is taken while two wait for the log.
        let room =
            if self.wal.headers_pending.len() <= self.config.write_batch_max { self.config.write_batch_max } else { 0 };
        let limit = self.wal_op_limit();
        while let Some(&op) = self.wal.queue.front() {
            if self.wal.batch.len() == room {
                break;
            }
            let Some(entry) = self.journal.get(op) else {
                self.wal.queue.pop_front();
                continue;
            };
            let this = (op, entry.header.checksum);
            // Durable already, or durable and waiting for its header, or in this commit already.
            let written =
                [&self.wal.batch, &self.wal.headers, &self.wal.headers_pending].iter().any(|ops| ops.contains(&this));
            if entry.durable || entry.body.is_none() || written {
                self.wal.queue.pop_front();
                continue;
            }
            if op > limit {
                // Its slot still holds an op the durable checkpoint does not cover.
                break;
            }
            self.wal.queue.pop_front();
            let body = entry.body.as_ref().expect("checked");
            let spans = if self.elides() { S::external_spans(&entry.header, body) } else { Vec::new() };
            let slot = self.journal.layout.slot(op);
            let offset = self.journal.layout.prepare_offset(slot);
            // This write takes the slot: a prepare of it still waiting for its header is no longer
            // the one the slot holds (a view change replaced it), and must be written again before
            // its header may say it is durable, should the journal take it back.
            let layout = self.journal.layout;
            self.wal.headers_pending.retain(|(pending, _)| layout.slot(*pending) != slot);
            assert!(!self.wal.headers.iter().any(|(header_op, _)| layout.slot(*header_op) == slot));
            self.wal.batch.push(this);
            if spans.is_empty() {
                // One write from the header and the body the journal shares: the body is never
                // copied into a slot-sized buffer first.
                assert!((HEADER_SIZE + body.len()) as u64 <= self.config.prepare_size_max);
                let header = vireo_io::Bytes::copy_from_slice(&entry.header.encode());
                io.write_vectored(file, offset, [header, body.clone()], token(TokenKind::Wal, op));
            } else {
                let bytes = elided_prepare_bytes(&entry.header, &ElidedBody::of(body, &spans));
                assert!(bytes.len() as u64 <= self.config.prepare_size_max);
                io.write(file, offset, bytes.into(), token(TokenKind::Wal, op));
            }
            self.wal.outstanding += 1;
        }
        if self.config.bug == Some(Bug::WalHeaderWithItsPrepare) {
            let batch = std::mem::take(&mut self.wal.batch);
            for (op, _) in &batch {
                self.wal_write_header(io, *op);
            }
            self.wal.headers.extend(batch);
        }
        // Only headers written are kept: a commit that writes nothing has nothing to complete.
        debug_assert!(self.wal.outstanding > 0 || self.wal.headers.is_empty());
        if self.wal.outstanding > 0 {
            self.wal.stage = WalStage::Writing;
        }
    }

    /// Writes the redundant header of `op`, the journal's entry for it, into its slot.
    fn wal_write_header(&mut self, io: &mut impl Io, op: u64) {
        let entry = self.journal.get(op).expect("a header is written for an entry the journal holds");
        let offset = self.journal.layout.header_offset(self.journal.layout.slot(op));
        let header = vireo_io::Bytes::copy_from_slice(&entry.header.encode());
        io.write(wal_file(self.config.namespace), offset, header, token(TokenKind::Wal, op));
        self.wal.outstanding += 1;
    }

    pub(super) fn wal_on_completion(&mut self, io: &mut impl Io, completion: Completion) {
        match completion {
            Completion::Write { result, token: written } => {
                match result {
                    Ok(()) => {}
                    Err(IoError::NoSpace) if self.config.replica_count == 1 => {
                        // Nothing of it is promised yet: its ops are cut once the commit's other
                        // writes are in (`no_space`).
                        self.wal.refused.push(token_detail(written));
                    }
                    Err(error) => {
                        // The journal cannot promise anything it failed to write: stop the
                        // replica, it recovers from what is durable.
                        self.fail_stop(error, "WAL write");
                        return;
                    }
                }
                assert_eq!(self.wal.stage, WalStage::Writing);
                self.wal.outstanding -= 1;
                if self.wal.outstanding == 0 && !self.wal.refused.is_empty() && !self.wal_refused_cut(io) {
                    self.fail_stop(IoError::NoSpace, "WAL write");
                    return;
                }
                if self.wal.outstanding == 0 {
                    let bug = self.config.bug;
                    let unsynced = bug == Some(Bug::AckBeforeSync)
                        || (bug == Some(Bug::MetadataAckBeforeSync) && self.config.namespace.is_metadata());
                    if !self.config.sync_writes || unsynced {
                        // Durability is not enforced: completed writes are what is promised (they
                        // survive the process, in the kernel), in the same order.
                        self.wal_commit_done(io);
                        return;
                    }
                    self.wal.stage = WalStage::Syncing;
                    io.sync(wal_file(self.config.namespace), token(TokenKind::Wal, 0));
                }
            }
            Completion::Sync { result, .. } => {
                if let Err(error) = result {
                    // What the sync was to make durable may be lost (the kernel drops dirty pages
                    // on a failed fsync): nothing of it may be acknowledged, ever.
                    self.fail_stop(error, "WAL sync");
                    return;
                }
                assert_eq!(self.wal.stage, WalStage::Syncing, "WAL sync completed in stage {:?}", self.wal.stage);
                self.wal_commit_done(io);
            }
            _ => panic!("the WAL pipeline issues only writes and syncs"),
        }
    }

    /// The commit's writes are in and a full disk refused some (a single replica): every op from
    /// the lowest refused one on is cut and its requests refused (`no_space`), and the commit
    /// goes on with the writes below it. False if that cannot be done (the op is committed, or the
    /// replica is not a single primary in normal status): the replica stops then.
    fn wal_refused_cut(&mut self, io: &mut impl Io) -> bool {
        let refused = std::mem::take(&mut self.wal.refused);
        // Writes of prepares a view change or an earlier cut replaced since do not count.
        let journal = &self.journal;
        let lowest = [&self.wal.batch, &self.wal.headers]
            .into_iter()
            .flatten()
            .filter(|(op, checksum)| refused.contains(op) && journal.get_exact(*op, *checksum).is_some())
            .map(|(op, _)| *op)
            .min();
        let Some(lowest) = lowest else { return true };
        if !self.cut_for_no_space(io, lowest) {
            return false;
        }
        self.wal.batch.retain(|(op, _)| *op < lowest);
        self.wal.headers.retain(|(op, _)| *op < lowest);
        self.wal.headers_pending.retain(|(op, _)| *op < lowest);
        true
    }

    /// Whether this replica leaves its prepares' external spans out of the WAL: whenever the
    /// machine has an external log, so that message bytes are written once. A span that log
    /// loses to damage is repaired from a peer; a single replica applies it as lost
    /// (`Replica::fill`), so that damage costs the batch it hits.
    pub(super) fn elides(&self) -> bool {
        S::EXTERNAL_LOG
    }

    /// Whether the pending headers may be written: the external log holds what their prepares
    /// left out (synced if durability is enforced, else written). Recovery relies on that order:
    /// an elided prepare whose header is durable had its spans durable too, so a span missing
    /// then is damage (a peer has it), not a torn write. Until then the headers wait, and the
    /// log's report (`external_log_durable`) starts the next commit.
    fn wal_headers_held(&self) -> bool {
        let bug = self.config.bug;
        if !self.elides() || bug == Some(Bug::LogDurabilityIgnored) || bug == Some(Bug::WalHeadersBeforeLog) {
            return true;
        }
        let held = self.external_ack_cursor;
        !self.journal.replaced
            && self.wal.headers_pending.iter().all(|(op, checksum)| {
                self.journal.get_exact(*op, *checksum).is_none_or(|entry| entry.header.cursor <= held)
            })
    }

    /// A group commit completed (synced, if durability is enforced): the prepares whose headers
    /// it wrote are durable and acknowledged; its own prepares wait for their headers, which the
    /// next commit writes at once.
    fn wal_commit_done(&mut self, io: &mut impl Io) {
        let durable = std::mem::take(&mut self.wal.headers);
        let written = std::mem::take(&mut self.wal.batch);
        self.wal.headers_pending.extend(written);
        self.wal.stage = WalStage::Idle;
        for (op, checksum) in &durable {
            if let Some(entry) = self.journal.get_mut(*op) {
                if entry.header.checksum == *checksum && entry.body.is_some() {
                    entry.durable = true;
                }
            }
        }
        if self.status == Status::Normal {
            if self.is_primary() {
                self.primary_commit(io);
            } else {
                for (op, _) in &durable {
                    self.send_prepare_ok(io, *op);
                }
            }
        }
        self.wal_flush(io);
    }

    // The superblock.

    /// The superblock this replica would write now.
    fn vsr_state(&self) -> VsrState {
        let durable = self.superblock_durable();
        let (checkpoint_op, checkpoint_checksum, snapshot_size, snapshot_checksum, snapshot_region, mark) =
            match &self.checkpoint_ready {
                Some(ready) => (ready.op, ready.checksum, ready.size, ready.checksum64, ready.region, ready.mark),
                None => (
                    durable.checkpoint_op,
                    durable.checkpoint_checksum,
                    durable.snapshot_size,
                    durable.snapshot_checksum,
                    durable.snapshot_region,
                    LogMark { cursor: durable.offset_frontier, retained_from: durable.retained_from },
                ),
            };
        VsrState {
            cluster: self.config.cluster,
            replica: self.replica,
            replica_count: self.config.replica_count,
            view: self.view_promised.max(self.log_view),
            log_view: self.log_view,
            commit_max: self.commit_max,
            checkpoint_op,
            checkpoint_checksum,
            offset_frontier: mark.cursor,
            snapshot_size,
            snapshot_checksum,
            snapshot_region,
            log_view_sequence: self.start_view_sequence,
            log_op: self.op,
            log_op_checksum: self.op_checksum,
            retained_from: mark.retained_from,
            view_headers: self
                .view_headers()
                .iter()
                .filter(|header| header.op > checkpoint_op)
                .map(|header| header.encode())
                .collect(),
            rejoining: self.rejoining.is_some(),
        }
    }

    /// Makes the commit point durable: once the superblock this starts is on disk, a restart
    /// recovers `commit_max` at least at today's `commit_min`, so the replica does not call
    /// itself caught up (and its node does not publish its state) before it has applied again
    /// every op it applied so far. A node removes a deleted group's files only after that: a
    /// restart then cannot reopen the group from older metadata and find its files half gone.
    pub fn persist_commit(&mut self, io: &mut impl Io) {
        let commit = self.commit_min;
        let covered = |superblock: &Superblock| superblock.vsr_state.commit_max >= commit;
        if self.status == Status::Opening
            || covered(&self.superblock.durable)
            || self.superblock.dirty
            || self.superblock.writing.as_ref().is_some_and(covered)
        {
            return;
        }
        self.superblock_update(io);
    }

    pub(super) fn superblock_update(&mut self, io: &mut impl Io) {
        self.superblock.dirty = true;
        self.superblock_flush(io);
    }

    fn superblock_flush(&mut self, io: &mut impl Io) {
        if self.superblock.stage != SuperblockStage::Idle || !self.superblock.dirty || self.status == Status::Opening {
            return;
        }
        self.superblock.dirty = false;
        let durable = &self.superblock.durable;
        let superblock = Superblock {
            sequence: durable.sequence + 1,
            parent_checksum: if durable.sequence == 0 { 0 } else { durable.checksum() },
            vsr_state: self.vsr_state(),
        };
        self.superblock.writing = Some(superblock);
        self.superblock.stage = SuperblockStage::WritingFirst;
        self.superblock_write_copy(io);
    }

    /// Writes the superblock in flight into the copy its stage names, always the whole
    /// `SUPERBLOCK_SIZE_MAX` (the record, then zeros): a copy's file never grows after its first
    /// write, so a full disk cannot refuse the superblock that cuts a log for want of space.
    fn superblock_write_copy(&mut self, io: &mut impl Io) {
        let copy = match self.superblock.stage {
            SuperblockStage::WritingFirst => self.superblock.first_copy,
            SuperblockStage::WritingSecond => 1 - self.superblock.first_copy,
            stage => panic!("no superblock copy is written in stage {stage:?}"),
        };
        let mut bytes = self.superblock.writing.as_ref().expect("a superblock in flight").encode();
        bytes.resize(SUPERBLOCK_SIZE_MAX, 0);
        io.write(
            superblock_files(self.config.namespace)[copy],
            0,
            bytes.into(),
            token(TokenKind::Superblock, copy as u64),
        );
    }

    /// A superblock copy's write that a full disk refused (it landed nothing, and nothing was
    /// promised on it: unlike a failed sync it may be made again) is made again at the next tick.
    pub(super) fn superblock_retry_refused(&mut self, io: &mut impl Io) {
        if std::mem::take(&mut self.superblock.write_refused) {
            self.superblock_write_copy(io);
        }
    }

    pub(super) fn superblock_on_completion(&mut self, io: &mut impl Io, completion: Completion) {
        let failed = match &completion {
            Completion::Write { result, .. } | Completion::Sync { result, .. } => result.err(),
            _ => panic!("the superblock pipeline issues only writes and syncs"),
        };
        let refused_write = matches!(completion, Completion::Write { result: Err(IoError::NoSpace), .. });
        if refused_write {
            self.superblock.write_refused = true;
            return;
        }
        if let Some(error) = failed {
            self.fail_stop(error, "superblock write");
            return;
        }
        self.superblock.stage = match self.superblock.stage {
            SuperblockStage::WritingFirst => {
                let first = self.superblock.first_copy;
                io.sync(superblock_files(self.config.namespace)[first], token(TokenKind::Superblock, first as u64));
                SuperblockStage::SyncingFirst
            }
            SuperblockStage::SyncingFirst => {
                self.superblock.stage = SuperblockStage::WritingSecond;
                self.superblock_write_copy(io);
                SuperblockStage::WritingSecond
            }
            SuperblockStage::WritingSecond => {
                let second = 1 - self.superblock.first_copy;
                io.sync(superblock_files(self.config.namespace)[second], token(TokenKind::Superblock, second as u64));
                SuperblockStage::SyncingSecond
            }
            SuperblockStage::SyncingSecond => {
                let written = self.superblock.writing.take().expect("checked");
                let checkpoint_advanced = written.vsr_state.checkpoint_op > self.superblock_durable().checkpoint_op;
                self.superblock.durable = written;
                if checkpoint_advanced {
                    let op = self.superblock_durable().checkpoint_op;
                    self.event(ReplicaEvent::CheckpointDurable { op });
                }
                self.superblock.stage = SuperblockStage::Idle;
                self.on_superblock_durable(io);
                self.superblock_flush(io);
                return;
            }
            SuperblockStage::Idle => panic!("superblock completion with nothing in flight"),
        };
        self.superblock_flush(io);
    }

    fn on_superblock_durable(&mut self, io: &mut impl Io) {
        // Before anything is prepared again: a request refused must not be taken meanwhile.
        self.answer_no_space(io);
        self.view_change_progress(io);
        if self.status == Status::Normal {
            if self.is_primary() {
                self.primary_commit(io);
            } else {
                self.send_prepare_oks(io);
            }
        }
        // Whatever the status now: a prepare held for a view that is gone is refused again.
        self.release_held_for_wal(io);
        if std::mem::take(&mut self.wal_full_dropped) && self.op < self.wal_op_limit() {
            // Prepares came, past what could wait, while the WAL had no room: the checkpoint
            // made some.
            self.request_prepares_after_head(io);
        }
        self.snapshot_flush(io);
        self.wal_flush(io);
    }

    // Checkpoints.

    pub(super) fn checkpoint_if_due(&mut self, io: &mut impl Io) {
        let latest = match &self.checkpoint_ready {
            Some(ready) => ready.op,
            None => self.superblock_durable().checkpoint_op,
        };
        if self.commit_min < latest + self.config.checkpoint_interval() {
            return;
        }
        if self.snapshot.pending.as_ref().is_some_and(|(op, ..)| *op >= self.commit_min) {
            return;
        }
        if S::EXTERNAL_LOG && self.snapshot.pending.is_some() {
            // A newer checkpoint's cursor takes in batches just applied, never durable yet:
            // replacing the one that waits for its log would wait for ever under steady load.
            return;
        }
        let bytes = Snapshot::encode(
            self.commit_min,
            self.commit_min_checksum,
            self.timestamp_last,
            &self.client_table,
            &self.state_machine,
        );
        let mark = LogMark::of(&self.state_machine);
        self.checkpoint_write(io, self.commit_min, self.commit_min_checksum, mark, bytes);
    }

    /// Writes a checkpoint (ours, or one from state transfer) once the previous one is durable.
    /// The newest snapshot on disk is the one the durable superblock names.
    fn checkpoint_ready_durable(&self) -> bool {
        let durable = self.superblock_durable();
        self.checkpoint_ready.as_ref().is_some_and(|ready| {
            ready.op == durable.checkpoint_op
                && ready.region == durable.snapshot_region
                && ready.checksum64 == durable.snapshot_checksum
        })
    }

    /// `cursor` is the state machine's `prepare_cursor` at `op`: what its external log (if any)
    /// must hold durably before the checkpoint may be written.
    pub(super) fn checkpoint_write(
        &mut self,
        io: &mut impl Io,
        op: u64,
        checksum: u128,
        mark: LogMark,
        bytes: Vec<u8>,
    ) {
        let latest = self.checkpoint_ready.as_ref().map_or(self.superblock_durable().checkpoint_op, |ready| ready.op);
        if op <= latest {
            return;
        }
        assert!(
            bytes.len() as u64 <= self.config.snapshot_size_max,
            "checkpoint of {} bytes exceeds snapshot_size_max",
            bytes.len()
        );
        self.snapshot.pending = Some((op, checksum, mark, bytes));
        self.snapshot_flush(io);
    }

    /// The owner of the state machine's external log reports what it holds: durable and
    /// committed below `durable` (a checkpoint waiting for it may be written), and the batches of
    /// this journal's prepares below `acknowledgeable` (prepares up to there may be
    /// acknowledged). Reported after every step that may have changed either, and after the
    /// owner has read the journal as it is now.
    pub fn external_log_durable(&mut self, io: &mut impl Io, durable: u64, acknowledgeable: u64) {
        assert!(S::EXTERNAL_LOG, "only a state machine with an external log has one to report");
        let more = acknowledgeable > self.external_ack_cursor || self.journal.replaced;
        self.external_durable_cursor = durable;
        self.external_ack_cursor = acknowledgeable;
        self.journal.replaced = false;
        self.snapshot_flush(io);
        // Headers waiting for the log may go now (a commit in flight takes them when it ends).
        self.wal_flush(io);
        if more && self.status == Status::Normal {
            if self.is_primary() {
                self.primary_commit(io);
            } else {
                self.send_prepare_oks(io);
            }
        }
    }

    /// The cursor a pending checkpoint waits for its external log to be durable through, if one
    /// waits for it.
    pub fn checkpoint_waiting_for(&self) -> Option<u64> {
        let (_, _, mark, _) = self.snapshot.pending.as_ref()?;
        (mark.cursor > self.external_durable_cursor).then_some(mark.cursor)
    }

    fn snapshot_flush(&mut self, io: &mut impl Io) {
        if self.snapshot.stage != SnapshotStage::Idle
            || self.snapshot.pending.is_none()
            || self.status == Status::Opening
        {
            return;
        }
        let durable_region = self.superblock_durable().snapshot_region;
        if self.checkpoint_ready.is_some() && !self.checkpoint_ready_durable() {
            // The superblock does not name the previous snapshot yet: its region is not free.
            return;
        }
        let waits =
            self.snapshot.pending.as_ref().is_some_and(|(_, _, mark, _)| mark.cursor > self.external_durable_cursor);
        if waits && self.config.bug != Some(Bug::LogDurabilityIgnored) {
            // The external log does not hold the checkpoint's state durably yet.
            return;
        }
        let (op, checksum, mark, bytes) = self.snapshot.pending.take().expect("checked");
        let region = 1 - durable_region;
        let (size, checksum64) = (bytes.len() as u64, checksum64(&bytes));
        let record = CheckpointRecord { op, checksum, size, checksum64, region, mark };
        let offset = snapshot_region_offset(region, self.config.snapshot_size_max);
        io.write(snapshot_file(self.config.namespace), offset, bytes.clone().into(), token(TokenKind::Snapshot, 0));
        self.snapshot.writing = Some((record, bytes));
        self.snapshot.stage = SnapshotStage::Writing;
    }

    pub(super) fn snapshot_on_completion(&mut self, io: &mut impl Io, completion: Completion) {
        let failed = match &completion {
            Completion::Write { result, .. } | Completion::Sync { result, .. } => result.err(),
            _ => panic!("the snapshot pipeline issues only writes and syncs"),
        };
        if let Some(error) = failed {
            self.fail_stop(error, "checkpoint write");
            return;
        }
        match self.snapshot.stage {
            SnapshotStage::Writing => {
                io.sync(snapshot_file(self.config.namespace), token(TokenKind::Snapshot, 0));
                self.snapshot.stage = SnapshotStage::Syncing;
            }
            SnapshotStage::Syncing => {
                let (record, bytes) = self.snapshot.writing.take().expect("a snapshot in flight");
                self.snapshot.stage = SnapshotStage::Idle;
                self.checkpoint_ready = Some(record);
                self.snapshot.ready_bytes = bytes;
                self.superblock_update(io);
            }
            SnapshotStage::Idle => panic!("snapshot completion with nothing in flight"),
        }
    }

    /// After a restart: the checkpoint the superblock names, read back from `snapshot.bin`.
    pub(super) fn checkpoint_recovered(&mut self, record: CheckpointRecord, bytes: Vec<u8>) {
        self.checkpoint_ready = Some(record);
        self.snapshot.ready_bytes = bytes;
    }

    /// The durable checkpoint and its snapshot bytes, if this replica holds them in memory.
    pub(super) fn checkpoint_durable_snapshot(&self) -> Option<(&CheckpointRecord, &[u8])> {
        let ready = self.checkpoint_ready.as_ref()?;
        self.checkpoint_ready_durable().then_some((ready, self.snapshot.ready_bytes.as_slice()))
    }
}
