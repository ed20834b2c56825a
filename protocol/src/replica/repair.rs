//! Repair: finding the prepares this replica's log lacks and fetching them from peers
//! (request_prepares, answered with the prepares themselves), and state transfer for a replica
//! that fell behind the point where its peers' WALs still hold what it needs (request_checkpoint,
//! answered with a checkpoint).
//!
//! A checkpoint crosses in chunks of at most `Config::checkpoint_chunk_bytes`, each asked for by
//! the replica that assembles it: request_checkpoint names the checkpoint (`checkpoint_op`, 0 for
//! the peer's newest) and the byte offset wanted (`request`); a checkpoint chunk carries the
//! checkpoint's op and checksum (`op`, `parent`), its whole size (`session`), the xxh3-64 of its
//! whole bytes (`context`) and where the chunk starts (`request`). Chunks are taken in order only,
//! the assembly is bounded by `snapshot_size_max`, a newer checkpoint restarts it, and it is
//! installed only once whole and matching its checksum.
//!
//! What to fetch is decided by the hash chain alone: walking down from the head of the view, each
//! prepare names its parent's checksum, so a missing or wrong prepare is asked for by (op,
//! checksum), and any peer's copy that matches is the right one, whoever sends it. Breaks in the
//! chain are filled with headers in bulk first (request_headers), then bodies.
//!
//! A primary whose view change gave it an uncommitted op that nobody can supply (its only durable
//! copy was on a disk that lost it) asks every backup; a backup that never held it durably says so
//! (nack_prepare). Enough nacks prove the op never committed, and the primary cuts its log short
//! there and starts the view's log again with a higher start_view sequence (see `view_change`).

use vireo_io::{Bytes, Io};
use vireo_storage::checksum::checksum64;

use super::durability::LogMark;
use super::{Replica, ReplicaEvent, Status};
use vireo_storage::superblock::VIEW_HEADERS_MAX;

use super::view_change::{decode_headers, encode_headers};
use crate::header::{Command, Header, Message};
use crate::journal::Entry;
use crate::state_machine::StateMachine;

/// One (op, checksum) pair of a request_prepares body; checksum 0 asks for the sender's own
/// prepare of that op in the current view.
const REPAIR_ENTRY_SIZE: usize = 24;

/// Ticks a backup's commits may stall behind a peer's checkpoint before it asks for state transfer.
const STATE_TRANSFER_STALL_TICKS: u64 = 100;

/// A peer's checkpoint being assembled from its chunks (state transfer).
#[derive(Debug)]
pub(super) struct Transfer {
    op: u64,
    checksum: u128,
    size: u64,
    checksum64: u64,
    /// The peer that sent the chunks so far: the next one is asked of it first.
    from: u8,
    /// The checkpoint's bytes received so far, in order.
    bytes: Vec<u8>,
    /// Repair rounds since the last chunk was taken (`TRANSFER_STALL_ROUNDS_MAX`).
    stalled_rounds: u32,
    /// Chunks taken so far.
    chunks: u32,
}

/// Repair rounds an assembly may go without a chunk before it is dropped and started again from
/// any peer (its peer may be gone, or have moved on; another's checkpoint of the same op may
/// differ in bytes, so chunks are never mixed).
const TRANSFER_STALL_ROUNDS_MAX: u32 = 4;

pub(super) struct ChainWalk {
    /// The chain reaches the last executed op.
    pub complete: bool,
    /// The head is further above the last executed op than the journal has slots: only state
    /// transfer can catch this replica up.
    pub behind: bool,
    /// The lowest op whose header is known but whose body is not.
    pub lowest_missing_body: Option<u64>,
    /// (op, checksum) pairs to ask peers for, highest first.
    pub repair: Vec<(u64, u128)>,
}

impl<S: StateMachine> Replica<S> {
    /// Walks the hash chain down from the head to the last executed op.
    pub(super) fn walk_chain(&self, repair_max: usize) -> ChainWalk {
        let mut walk = ChainWalk { complete: false, behind: false, lowest_missing_body: None, repair: Vec::new() };
        if !self.journal_holds(self.op) {
            walk.behind = true;
            return walk;
        }
        let mut expected = self.op_checksum;
        let mut op = self.op;
        while op > self.commit_min {
            let Some(entry) = self.journal.get_exact(op, expected) else {
                if walk.repair.len() < repair_max {
                    walk.repair.push((op, expected));
                }
                return walk;
            };
            if entry.body.is_none() {
                walk.lowest_missing_body = Some(op);
                if walk.repair.len() < repair_max {
                    walk.repair.push((op, expected));
                }
            }
            expected = entry.header.parent;
            op -= 1;
        }
        if self.status == Status::Normal {
            assert_eq!(
                expected, self.commit_min_checksum,
                "replica {}: the log of view {} does not chain to executed op {}",
                self.replica, self.view, self.commit_min
            );
        }
        walk.complete = expected == self.commit_min_checksum;
        walk
    }

    /// Whether the journal can hold `op` without evicting an op not yet executed.
    pub(super) fn journal_holds(&self, op: u64) -> bool {
        op <= self.commit_min + self.config.journal_slots
    }

    /// The checksum our chain expects at `op` (between our last executed op and our head).
    pub(super) fn expected_checksum(&self, op: u64) -> Option<u128> {
        assert!(op > self.commit_min && op <= self.op);
        let mut expected = self.op_checksum;
        let mut at = self.op;
        while at > op {
            expected = self.journal.get_exact(at, expected)?.header.parent;
            at -= 1;
        }
        Some(expected)
    }

    /// Takes a prepare our log is missing (the header, or only the body). True if it was used.
    pub(super) fn repair_accept(&mut self, io: &mut impl Io, header: &Header, body: &Bytes) -> bool {
        let header = *header;
        if self.status == Status::Opening || !header.valid_checksum_body(body) || !self.journal_holds(header.op) {
            return false;
        }
        if let Some(entry) = self.journal.get_mut(header.op) {
            if entry.header.checksum == header.checksum {
                if entry.body.is_some() {
                    return false;
                }
                entry.body = Some(body.clone());
                self.wal_enqueue(io, header.op);
                return true;
            }
        }
        if self.expected_checksum(header.op) != Some(header.checksum) {
            return false;
        }
        self.journal.insert(Entry::prepare(header, body.clone()));
        self.wal_enqueue(io, header.op);
        true
    }

    fn repair_allowed(&self) -> bool {
        self.status == Status::Normal || (self.status == Status::ViewChange && self.start_view_installed)
    }

    /// Asks peers for what the chain says is missing, and a stalled backup for state transfer.
    pub(super) fn repair(&mut self, io: &mut impl Io) {
        if !self.repair_allowed() {
            return;
        }
        // Headers a start_view gave us while they lay beyond our journal's window (we were too far
        // behind to hold them) are taken in once the window reaches them: maybe nobody else has them.
        for index in (0..self.log_headers.len()).rev() {
            let header = self.log_headers[index];
            if header.op > self.commit_min
                && header.op <= self.op
                && self.journal_holds(header.op)
                && self.journal.get_exact(header.op, header.checksum).is_none()
                && self.expected_checksum(header.op) == Some(header.checksum)
            {
                self.journal.insert(Entry::header_only(header));
            }
        }
        let walk = self.walk_chain(self.config.repair_batch_max);
        if !walk.complete {
            if let Some(&(op_max, _)) = walk.repair.last() {
                // The chain breaks here: fetch the headers below in bulk, so the next walk can
                // ask for many bodies at once instead of one op per round trip.
                let op_min = (self.commit_min + 1).max(op_max.saturating_sub(VIEW_HEADERS_MAX as u64 - 1));
                let mut header = self.header(Command::RequestHeaders);
                header.op = op_max;
                header.commit = op_min;
                let message = Message::new(header, Vec::new());
                if let Some(peer) = self.repair_peer(io) {
                    self.send(io, peer, &message);
                }
            }
        }
        if !walk.repair.is_empty() {
            let mut body = Vec::with_capacity(walk.repair.len() * REPAIR_ENTRY_SIZE);
            for (op, checksum) in &walk.repair {
                body.extend_from_slice(&op.to_le_bytes());
                body.extend_from_slice(&checksum.to_le_bytes());
            }
            let mut header = self.header(Command::RequestPrepares);
            header.count = walk.repair.len() as u32;
            let message = Message::new(header, body);
            if let Some(peer) = self.repair_peer(io) {
                self.send(io, peer, &message);
            }
        }
        if self.status == Status::Normal && !self.is_primary() && self.commit_max > self.op {
            self.request_prepares_after_head(io);
        }
        if self.status == Status::Normal && self.is_primary() {
            self.primary_repair_pipeline(io);
        }
        // Commits stalled for long: the prepares we lack may be gone from every WAL (checkpointed
        // over), even if no peer told us of its checkpoint (an idle cluster sends us nothing).
        let stalled = self.commit_stall_ticks >= STATE_TRANSFER_STALL_TICKS;
        if self.transfer.as_ref().is_some_and(|transfer| transfer.op <= self.commit_min) {
            // Caught up some other way.
            self.transfer = None;
        }
        if let Some(transfer) = &mut self.transfer {
            // An assembly goes on with the peer that sent its chunks so far; one that does not
            // move on (its peer is gone, or moved on to a newer checkpoint) is dropped and asked
            // for anew.
            transfer.stalled_rounds += 1;
            if transfer.stalled_rounds > TRANSFER_STALL_ROUNDS_MAX {
                self.transfer = None;
            } else {
                let from = transfer.from;
                let message = self.request_checkpoint_message();
                self.send(io, from, &message);
                return;
            }
        }
        if walk.behind || stalled {
            // Ask the replica that told us of the newest checkpoint, and one more at random in
            // case that one is gone; only a peer whose checkpoint is ahead of us answers.
            let message = self.request_checkpoint_message();
            if self.peer_checkpoint_replica != self.replica && self.peer_checkpoint_op > self.commit_min {
                self.send(io, self.peer_checkpoint_replica, &message);
            }
            if let Some(peer) = self.repair_peer(io).filter(|peer| *peer != self.peer_checkpoint_replica) {
                self.send(io, peer, &message);
            }
            self.commit_stall_ticks = 0;
        }
    }

    /// A request for the next chunk of the checkpoint being assembled, or for the first chunk of
    /// a peer's newest.
    fn request_checkpoint_message(&self) -> Message {
        let mut header = self.header(Command::RequestCheckpoint);
        header.commit = self.commit_min;
        if let Some(transfer) = &self.transfer {
            header.checkpoint_op = transfer.op;
            header.request = transfer.bytes.len() as u64;
        }
        Message::new(header, Vec::new())
    }

    /// A peer other than us, chosen with seeded randomness so that one dead peer cannot starve
    /// repair.
    fn repair_peer(&mut self, io: &mut impl Io) -> Option<u8> {
        let count = self.replica_count() as u64;
        if count == 1 {
            return None;
        }
        let mut peer = (io.random() % count) as u8;
        if peer == self.replica {
            peer = (peer + 1) % count as u8;
        }
        Some(peer)
    }

    /// Asks the primary for the ops after our head (their checksums are not known yet; in this
    /// view they can only be the primary's).
    pub(super) fn request_prepares_after_head(&mut self, io: &mut impl Io) {
        if self.status != Status::Normal || self.is_primary() {
            return;
        }
        // Never past what the WAL has room for: a prepare beyond it would be dropped as it
        // arrives, and asked for again (each time whole). The checkpoint that makes room asks.
        let last = self
            .commit_max
            .max(self.op + 1)
            .min(self.op + self.config.repair_batch_max as u64)
            .min(self.wal_op_limit());
        if last <= self.op {
            self.wal_full_dropped = true;
            return;
        }
        let mut body = Vec::new();
        for op in self.op + 1..=last {
            body.extend_from_slice(&op.to_le_bytes());
            body.extend_from_slice(&0u128.to_le_bytes());
        }
        let mut header = self.header(Command::RequestPrepares);
        header.count = (last - self.op) as u32;
        let message = Message::new(header, body);
        self.send(io, self.primary_of(self.view), &message);
    }

    pub(super) fn on_request_prepares(&mut self, io: &mut impl Io, message: Message) {
        let body = &message.body;
        if !body.len().is_multiple_of(REPAIR_ENTRY_SIZE)
            || body.len() / REPAIR_ENTRY_SIZE > self.config.repair_batch_max
        {
            return;
        }
        for chunk in body.chunks(REPAIR_ENTRY_SIZE) {
            let op = u64::from_le_bytes(chunk[0..8].try_into().unwrap());
            let checksum = u128::from_le_bytes(chunk[8..24].try_into().unwrap());
            let Some(entry) = self.journal.get(op) else {
                if checksum != 0 && op > self.op {
                    self.send_nack_prepare(io, &message, op, checksum);
                }
                continue;
            };
            if checksum != 0 && entry.header.checksum == checksum && entry.body.is_none() && !entry.faulty {
                self.send_nack_prepare(io, &message, op, checksum);
                continue;
            }
            if checksum == 0 {
                // Only the primary of the view vouches for its ops by op number alone.
                if self.status != Status::Normal || !self.is_primary() || op > self.op {
                    continue;
                }
            } else if entry.header.checksum != checksum {
                continue;
            }
            let Some(prepare_body) = &entry.body else { continue };
            let prepare = Message { header: entry.header, body: prepare_body.to_vec() };
            self.send(io, message.header.replica, &prepare);
        }
    }

    /// Tells this view's primary we never acknowledged (op, checksum): we hold at most its header,
    /// which the view change gave us, or not even that.
    fn send_nack_prepare(&mut self, io: &mut impl Io, request: &Message, op: u64, checksum: u128) {
        let from = request.header.replica;
        if self.status != Status::Normal || request.header.view != self.view || from != self.primary_of(self.view) {
            return;
        }
        // Rejoining, it cannot tell "never acknowledged" from "acknowledged and forgotten".
        if self.rejoining.is_some() || op <= self.nack_floor {
            return;
        }
        let mut header = self.header(Command::NackPrepare);
        header.op = op;
        header.parent = checksum;
        let nack = Message::new(header, Vec::new());
        self.send(io, from, &nack);
    }

    /// The primary asks every backup for the uncommitted prepares whose bodies it lacks: a copy
    /// comes back, or enough nacks to prove the op was never committed.
    fn primary_repair_pipeline(&mut self, io: &mut impl Io) {
        let missing: Vec<(u64, u128)> = self
            .pipeline
            .iter()
            .filter(|entry| self.journal.get_exact(entry.op, entry.checksum).is_some_and(|e| e.body.is_none()))
            .map(|entry| (entry.op, entry.checksum))
            .take(self.config.repair_batch_max)
            .collect();
        if missing.is_empty() {
            return;
        }
        let mut body = Vec::with_capacity(missing.len() * REPAIR_ENTRY_SIZE);
        for (op, checksum) in &missing {
            body.extend_from_slice(&op.to_le_bytes());
            body.extend_from_slice(&checksum.to_le_bytes());
        }
        let mut header = self.header(Command::RequestPrepares);
        header.count = missing.len() as u32;
        let message = Message::new(header, body);
        self.send_to_others(io, &message);
        self.primary_truncate(io);
    }

    pub(super) fn on_nack_prepare(&mut self, io: &mut impl Io, message: Message) {
        let header = message.header;
        if self.status != Status::Normal || !self.is_primary() || header.view != self.view {
            return;
        }
        let Some(entry) = self.pipeline.iter_mut().find(|entry| entry.op == header.op) else { return };
        if entry.checksum != header.parent {
            return;
        }
        entry.nacks |= 1 << header.replica;
        self.primary_truncate(io);
    }

    /// Cuts the log short at the lowest uncommitted op that enough replicas never acknowledged.
    ///
    /// An op commits only once `quorum_replication` replicas hold it durably, and a replica that
    /// held it durably keeps at least its header through any crash (the redundant header), so it
    /// never nacks it. So `replica_count - quorum_replication + 1` nacks prove the op never
    /// committed, nor did anything after it: a new primary may then drop a prepare whose only
    /// copy a disk lost, instead of waiting for it forever.
    fn primary_truncate(&mut self, io: &mut impl Io) {
        let nack_quorum = self.replica_count() as usize - self.config.quorum_replication() + 1;
        let mut cut = None;
        for entry in &self.pipeline {
            let Some(own) = self.journal.get_exact(entry.op, entry.checksum) else { continue };
            if own.body.is_some() {
                continue;
            }
            // Its own nack too, unless it may have forgotten acknowledging the op (rejoining).
            let own_nack = !own.faulty && self.rejoining.is_none() && entry.op > self.nack_floor;
            let nacks = entry.nacks.count_ones() as usize + usize::from(own_nack);
            if nacks >= nack_quorum {
                cut = Some((entry.op, own.header.parent));
                break;
            }
        }
        let Some((op, parent)) = cut else { return };
        self.cut_log_at(io, op, parent);
        self.event(ReplicaEvent::LogTruncated { op, sequence: self.start_view_sequence });
    }

    /// Cuts this primary's log below `op` (never committed: `parent` is the header of the op
    /// before it) and starts the view's log again, one start_view higher, so that a restart
    /// cannot take the dropped prepares back from the WAL: recovery follows only prepares of the
    /// superblock's start_view.
    pub(super) fn cut_log_at(&mut self, io: &mut impl Io, op: u64, parent: u128) {
        assert!(op > self.commit_max);
        assert!(self.is_primary() && self.status == Status::Normal);
        for dropped in op..=self.op {
            self.journal.remove(dropped);
        }
        self.op = op - 1;
        self.op_checksum = if self.op == self.commit_min { self.commit_min_checksum } else { parent };
        self.pipeline.retain(|entry| entry.op < op);
        self.durable_chain_op = 0;
        self.start_view_sequence += 1;
        self.superblock_update(io);
        self.send_start_view(io, None);
    }

    pub(super) fn on_request_headers(&mut self, io: &mut impl Io, message: Message) {
        let (op_min, op_max) = (message.header.commit, message.header.op);
        if op_min > op_max || op_max - op_min >= VIEW_HEADERS_MAX as u64 || op_max > self.op {
            return;
        }
        // The contiguous chain of headers we hold, from the top of the range down.
        let mut headers = Vec::new();
        let Some(top) = self.journal.get(op_max) else { return };
        let mut expected = top.header.checksum;
        let mut op = op_max;
        while op >= op_min && op > 0 {
            let Some(entry) = self.journal.get_exact(op, expected) else { break };
            headers.push(entry.header);
            expected = entry.header.parent;
            op -= 1;
        }
        headers.reverse();
        let mut header = self.header(Command::Headers);
        header.op = op_max;
        header.count = headers.len() as u32;
        let reply = Message::new(header, encode_headers(&headers));
        self.send(io, message.header.replica, &reply);
    }

    /// Headers a peer sent for a break in our chain: taken from the top down while they are the
    /// ones our chain expects.
    pub(super) fn on_headers(&mut self, io: &mut impl Io, message: Message) {
        if !self.repair_allowed() {
            return;
        }
        let Some(headers) = decode_headers(&message.body) else { return };
        let mut inserted = false;
        for header in headers.iter().rev() {
            if header.op <= self.commit_min || header.op > self.op || !self.journal_holds(header.op) {
                continue;
            }
            if self.journal.get_exact(header.op, header.checksum).is_some() {
                continue;
            }
            if self.expected_checksum(header.op) != Some(header.checksum) {
                break;
            }
            self.journal.insert(Entry::header_only(*header));
            inserted = true;
        }
        if inserted {
            self.repair(io);
            self.primary_commit(io);
        }
    }

    pub(super) fn peer_checkpoint(&mut self, checkpoint_op: u64, replica: u8) {
        if checkpoint_op > self.peer_checkpoint_op {
            self.peer_checkpoint_op = checkpoint_op;
            self.peer_checkpoint_replica = replica;
        }
    }

    pub(super) fn on_repair_timeout(&mut self, io: &mut impl Io) {
        self.repair(io);
        self.commit_journal(io);
    }

    pub(super) fn on_request_checkpoint(&mut self, io: &mut impl Io, message: Message) {
        let Some(checkpoint) = self.checkpoint_durable_snapshot() else { return };
        let (record, snapshot) = checkpoint;
        if record.op <= message.header.commit {
            return;
        }
        // A chunk of the checkpoint asked for; a requester assembling one we no longer hold
        // gets the first chunk of ours (newer), and starts again.
        let wanted = message.header.checkpoint_op;
        let offset = if wanted == record.op { message.header.request } else { 0 };
        if offset >= snapshot.len() as u64 {
            return;
        }
        let end = snapshot.len().min(offset as usize + self.config.checkpoint_chunk_bytes as usize);
        let mut header = self.header(Command::Checkpoint);
        header.op = record.op;
        header.parent = record.checksum;
        header.session = snapshot.len() as u64;
        header.context = record.checksum64 as u128;
        header.request = offset;
        let reply = Message::new(header, snapshot[offset as usize..end].to_vec());
        self.send(io, message.header.replica, &reply);
    }

    /// State transfer: one chunk of a peer's checkpoint, taken when our commits cannot otherwise
    /// catch up; once whole, the checkpoint is adopted.
    pub(super) fn on_checkpoint(&mut self, io: &mut impl Io, message: Message) {
        let header = message.header;
        if !self.repair_allowed() || header.op <= self.commit_min {
            return;
        }
        if header.op > self.commit_max {
            // Not known committed to us: a checkpoint is always of committed state, but we wait
            // for the commit to be announced rather than trust it (another peer's older
            // checkpoint may be of use now).
            return;
        }
        let size = header.session;
        let chunk = message.body.len() as u64;
        if size > self.config.snapshot_size_max
            || chunk == 0
            || chunk > self.config.checkpoint_chunk_bytes
            || header.request.checked_add(chunk).is_none_or(|end| end > size)
        {
            return;
        }
        let same = self.transfer.as_ref().is_some_and(|transfer| {
            transfer.op == header.op
                && transfer.checksum == header.parent
                && transfer.size == size
                && transfer.checksum64 as u128 == header.context
        });
        if !same {
            // The first chunk of a newer checkpoint than the one being assembled (if any) starts
            // the assembly again; anything else is a chunk we did not ask for.
            let newer = self.transfer.as_ref().is_none_or(|transfer| header.op > transfer.op);
            if header.request != 0 || !newer || header.context > u64::MAX as u128 {
                return;
            }
            self.transfer = Some(Transfer {
                op: header.op,
                checksum: header.parent,
                size,
                checksum64: header.context as u64,
                from: header.replica,
                bytes: Vec::new(),
                stalled_rounds: 0,
                chunks: 0,
            });
        }
        let transfer = self.transfer.as_mut().expect("assembling");
        if header.request != transfer.bytes.len() as u64 {
            // A chunk out of order (a duplicate, or an answer to an older request).
            return;
        }
        transfer.bytes.extend_from_slice(&message.body);
        transfer.from = header.replica;
        transfer.stalled_rounds = 0;
        transfer.chunks += 1;
        assert!(transfer.bytes.len() as u64 <= transfer.size);
        if (transfer.bytes.len() as u64) < transfer.size {
            let next = self.request_checkpoint_message();
            self.send(io, header.replica, &next);
            return;
        }
        let transfer = self.transfer.take().expect("assembling");
        if checksum64(&transfer.bytes) != transfer.checksum64 {
            return;
        }
        self.install_checkpoint(io, transfer.op, transfer.checksum, transfer.bytes, transfer.chunks);
    }

    /// Adopts a whole checkpoint of committed state from a peer.
    fn install_checkpoint(&mut self, io: &mut impl Io, op: u64, checksum: u128, bytes: Vec<u8>, chunks: u32) {
        let Some(snapshot) = super::durability::Snapshot::<S>::decode(&bytes) else { return };
        if snapshot.op != op
            || snapshot.checksum != checksum
            || snapshot.client_table.clients_max() != self.config.clients_max
        {
            return;
        }
        let cursor = LogMark::of(&snapshot.state_machine);
        self.state_machine = snapshot.state_machine;
        self.client_table = snapshot.client_table;
        self.commit_min = op;
        self.commit_min_checksum = checksum;
        if self.op <= op {
            self.op = op;
            self.op_checksum = checksum;
        }
        self.journal.retain(op, self.op);
        self.durable_chain_op = 0;
        self.timestamp_last = self.timestamp_last.max(snapshot.timestamp);
        self.commit_stall_ticks = 0;
        self.event(ReplicaEvent::StateTransferred { op, chunks });
        self.checkpoint_write(io, op, checksum, cursor, bytes);
        self.repair(io);
        self.commit_journal(io);
    }
}
