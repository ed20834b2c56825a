//! Normal operation: requests in, prepares out, prepare_oks back, commits, replies.

use vireo_io::{Bytes, Io, Peer};
use vireo_storage::layout::HEADER_SIZE;

use super::{PipelineEntry, Replica, ReplicaEvent, Status};
use crate::client_table::{ClientEntry, RequestOutcome};
use crate::config::Bug;
use crate::header::{Command, Header, Message};
use crate::journal::Entry;
use crate::request::{batched_requests, valid_batch, OPERATION_REGISTER, OPERATION_UNREGISTER};
use crate::state_machine::StateMachine;

/// The answer to a register of a client the table already holds: its session and the last
/// request number applied in it, as a register's reply (not the reply of that last request: the
/// one who registers must know the session is an existing one, and go on above its number).
fn register_answer(entry: &ClientEntry) -> ClientEntry {
    ClientEntry { reply_operation: OPERATION_REGISTER, reply: entry.session.to_le_bytes().to_vec(), ..entry.clone() }
}

/// Eviction reasons (byte 255 of an eviction).
pub const EVICTION_REASON_NO_SESSION: u8 = 1;

impl<S: StateMachine> Replica<S> {
    /// A client's request, `frame` its whole frame (the header as it came, then the body).
    pub(super) fn on_request(&mut self, io: &mut impl Io, header: Header, frame: Vec<u8>) {
        if header.client == 0 || header.operation == 0 {
            return;
        }
        if header.size as u64 > self.config.prepare_size_max - HEADER_SIZE as u64 {
            return;
        }
        let register = header.operation == OPERATION_REGISTER;
        if register != (header.session == 0 && header.request == 0) {
            return;
        }
        if self.status != Status::Normal {
            return;
        }
        if !self.is_primary() {
            // The client guessed wrong: pass the request on to the primary of our view.
            self.forward_request(io, header, frame);
            return;
        }
        if self.disk_low {
            // Stepping down (`disk_low`, never set on a single replica): the client's retry finds
            // the next primary.
            return;
        }
        if self.request_in_flight(header.client, header.request, register) {
            // Already queued or prepared; the queue may be waiting for room.
            self.primary_prepare(io);
            return;
        }
        if register {
            if let Some(entry) = self.client_table.get(header.client) {
                // Another user presenting this client id does not get its session (nor its
                // cached replies).
                if entry.user_id != header.user_id {
                    self.send_eviction(io, &header);
                    return;
                }
                let entry = register_answer(entry);
                self.send_reply(io, &header, entry.request, &entry);
                return;
            }
        } else {
            match self.client_table.outcome(header.client, header.session, header.request) {
                RequestOutcome::New => {}
                RequestOutcome::Duplicate(entry) => {
                    let entry = entry.clone();
                    self.send_reply(io, &header, header.request, &entry);
                    return;
                }
                RequestOutcome::Stale => return,
                RequestOutcome::Evicted => {
                    self.send_eviction(io, &header);
                    return;
                }
            }
        }
        if self.refused_before(io, &header) {
            return;
        }
        if self.request_queue.len() == self.config.request_queue_max {
            // Full: drop it; the client retries after its timeout.
            return;
        }
        self.request_queue.push_back((header, frame));
        self.primary_prepare(io);
    }

    /// Whether this client's request is queued or in the uncommitted log already. Conservative:
    /// an op whose body this replica lacks might hold it.
    fn request_in_flight(&self, client: u128, request: u64, register: bool) -> bool {
        let same = |header: &Header| {
            header.client == client
                && if register { header.operation == OPERATION_REGISTER } else { header.request == request }
        };
        if self.request_queue.iter().any(|(queued, _)| same(queued)) {
            return true;
        }
        for op in self.commit_min + 1..=self.op {
            match self.journal.get(op).and_then(|entry| entry.body.as_deref()) {
                None => return true,
                Some(body) => {
                    if batched_requests(body).any(|batched| same(&batched.header)) {
                        return true;
                    }
                }
            }
        }
        false
    }

    /// Turns queued requests into prepares while the pipeline and the WAL have room.
    pub(super) fn primary_prepare(&mut self, io: &mut impl Io) {
        while self.status == Status::Normal
            && self.is_primary()
            && self.log_view_durable()
            && !self.paused_for_no_space()
            && !self.request_queue.is_empty()
            && self.pipeline.len() < self.config.prepare_queue_max
            && self.op < self.wal_op_limit()
        {
            let timestamp = io.now().max(self.timestamp_last + 1);
            let cursor_before = self.prepare_cursor_at_head();
            let mut cursor = cursor_before;
            let mut body = Vec::new();
            let mut count = 0u32;
            let mut first: Option<Header> = None;
            while let Some((front, _)) = self.request_queue.front() {
                let size = front.size as usize;
                if count as usize == self.config.batch_requests_max
                    || (HEADER_SIZE + body.len() + size) as u64 > self.config.prepare_size_max
                {
                    break;
                }
                let (mut request, frame) = self.request_queue.pop_front().expect("front exists");
                let at = body.len() + HEADER_SIZE;
                if body.is_empty() {
                    // The first request's frame is the body's start as it is (a prepare of one
                    // request, the usual one, copies nothing).
                    body = frame;
                } else {
                    body.reserve(size);
                    body.extend_from_slice(&frame);
                }
                // Only the primary says which batches vouch for themselves, whatever came in.
                request.batch_at = 0;
                let prepared = self.state_machine.prepare(cursor, timestamp, &request, &mut body[at..]);
                cursor = prepared.cursor;
                request.batch_at = prepared.batch_at.unwrap_or(0);
                // The request's own checksums stay the client's: its reply names it by them.
                body[at - HEADER_SIZE..at].copy_from_slice(&request.encode());
                first.get_or_insert(request);
                count += 1;
            }
            assert!(count > 0, "a request always fits in an empty prepare");
            let first = first.expect("at least one request");
            let mut header = self.header(Command::Prepare);
            header.op = self.op + 1;
            header.parent = self.op_checksum;
            header.commit = self.commit_max;
            header.timestamp = timestamp;
            header.cursor = cursor;
            header.client = first.client;
            header.request = first.request;
            header.operation = first.operation;
            header.checkpoint_op = self.superblock_durable().checkpoint_op;
            header.count = count;
            // Which start_view of this view the prepare extends (see `start_view_sequence`).
            header.context = self.start_view_sequence as u128;
            header.seal(&body);
            // The backup that forwarded the requests gets the prepare without their bodies.
            let elided = self.forwarded_by(&body).map(|by| (by, self.elided_prepare(&header, &body, cursor_before)));
            let body = Bytes::from(body);
            self.timestamp_last = header.timestamp;
            self.journal.insert(Entry::prepare(header, body.clone()));
            self.op = header.op;
            self.op_checksum = header.checksum;
            self.pipeline.push_back(PipelineEntry { op: header.op, checksum: self.op_checksum, acks: 0, nacks: 0 });
            self.wal_enqueue(io, header.op);
            if let Some((by, elided)) = &elided {
                self.forwarded.elided_sent += 1;
                self.send(io, *by, elided);
            }
            self.send_prepare_to_others(io, &header, &body, elided.map(|(by, _)| by));
        }
    }

    /// The state machine's cursor after this replica's head op: the head's header says it, or,
    /// with nothing above the commit point, the applied state does.
    fn prepare_cursor_at_head(&self) -> u64 {
        if self.op == self.commit_min {
            return self.state_machine.prepare_cursor();
        }
        self.journal.get(self.op).expect("a replica holds the header of its head op").header.cursor
    }

    pub(super) fn on_prepare(&mut self, io: &mut impl Io, header: Header, body: Bytes) {
        if header.command != Command::Prepare
            || header.op == 0
            || header.size as u64 > self.config.prepare_size_max
            || !valid_batch(&body, header.count)
        {
            return;
        }
        // Whatever this replica kept of the requests it holds now need not be kept.
        self.forget_forwarded(&body);
        if header.view > self.view && self.status != Status::Opening {
            self.jump_to_newer_view(io, header.view);
        }
        if self.status == Status::Normal && !self.is_primary() && header.view == self.view {
            // Only this view's primary creates prepares of this view.
            self.primary_heard();
        }
        let sequence = header.context as u64;
        if header.view < self.view || (header.view == self.view && sequence <= self.start_view_sequence) {
            // A prepare's commit is an op its primary knew committed, below anything a later
            // start_view could have cut: our log holds that prefix too.
            self.commit_max_advance(header.commit);
            if self.status == Status::Normal && self.is_primary() {
                // The pipeline may have shrunk: commit what we can and prepare what waits.
                self.primary_commit(io);
            }
        } else if header.view == self.view {
            // This view's primary cut its log short since our start_view: fetch the new one
            // before trusting any of its commits.
            self.request_start_view_again(io);
            return;
        }
        if header.op <= self.op {
            // A retransmission (of this view's prepare, or of an older view's that this view's
            // log kept) or a repair: fill what we lack, acknowledge again what we hold durably.
            if header.op > self.commit_min && self.repair_accept(io, &header, &body) {
                self.commit_journal(io);
                return;
            }
            if self.journal.get_exact(header.op, header.checksum).is_some_and(|entry| entry.durable) {
                self.send_prepare_ok(io, header.op);
            } else if header.view == self.view && self.journal.get(header.op).is_some() {
                // This view's primary holds another prepare at this op: it cut the log short
                // after we installed it. Ask for the view's log as it is now.
                self.request_start_view_again(io);
            }
            self.commit_journal(io);
            return;
        }
        if self.status != Status::Normal
            || self.is_primary()
            || header.view != self.view
            || sequence != self.start_view_sequence
        {
            // Only a prepare of our exact log (this view, this start_view) may extend it.
            return;
        }
        self.peer_checkpoint(header.checkpoint_op, header.replica);
        if self.refuses_new_prepare() {
            return;
        }
        if self.hold_for_wal_room(&header, &body) {
            return;
        }
        if header.op > self.op + 1 {
            // We missed some: ask the primary for what comes after our head (at most once a
            // tick: its answers arrive as more of these).
            if !self.repair_after_head_requested {
                self.repair_after_head_requested = true;
                self.request_prepares_after_head(io);
            }
            return;
        }
        if header.parent != self.op_checksum {
            self.request_start_view_again(io);
            return;
        }
        if header.op > self.wal_op_limit() {
            // No free WAL slot until our next checkpoint: the prepare waits for it (or, past
            // that bound, is asked for again once it is durable, or the primary retransmits).
            if self.held_for_wal.iter().any(|(held, _)| held.checksum == header.checksum) {
                // A retransmission of the one that waits already.
            } else if self.held_for_wal.len() < self.config.prepare_queue_max {
                self.held_for_wal.push_back((header, body));
            } else {
                self.wal_full_dropped = true;
            }
            return;
        }
        self.journal.insert(Entry::prepare(header, body));
        self.op = header.op;
        self.op_checksum = header.checksum;
        self.timestamp_last = self.timestamp_last.max(header.timestamp);
        self.wal_enqueue(io, header.op);
        if self.config.bug == Some(Bug::AckBeforeDurable) {
            self.send_prepare_ok_unchecked(io, header.op, header.checksum);
        }
        self.commit_journal(io);
    }

    /// A prepare that extends the ones waiting for WAL room (the next link of their chain, in
    /// this view's log) waits with them, if there is room: it would otherwise arrive as a gap
    /// after our head, be dropped and be asked for again, whole, once the checkpoint is durable.
    fn hold_for_wal_room(&mut self, header: &Header, body: &Bytes) -> bool {
        let Some((last, _)) = self.held_for_wal.back() else { return false };
        if header.op != last.op + 1 || header.parent != last.checksum || header.view != last.view {
            return false;
        }
        if self.held_for_wal.len() == self.config.prepare_queue_max {
            self.wal_full_dropped = true;
            return true;
        }
        self.held_for_wal.push_back((*header, body.clone()));
        true
    }

    /// A checkpoint made room in the WAL: the prepares that waited for it go on (each checked
    /// again as it arrived: the view may have moved meanwhile).
    pub(super) fn release_held_for_wal(&mut self, io: &mut impl Io) {
        for (header, body) in std::mem::take(&mut self.held_for_wal) {
            self.on_prepare(io, header, body);
        }
    }

    /// Acknowledges a prepare to the primary, if this replica may.
    pub(super) fn send_prepare_ok(&mut self, io: &mut impl Io, op: u64) {
        if self.status != Status::Normal || self.is_primary() {
            return;
        }
        // Rejoining, its log has holes a crash would leave it unable to vouch for: its
        // acknowledgements wait until it caught up.
        if self.rejoining.is_some() {
            return;
        }
        let Some(entry) = self.journal.get(op) else { return };
        if !entry.durable || entry.body.is_none() {
            return;
        }
        if !self.ack_safe(op) {
            return;
        }
        let entry = self.journal.get(op).expect("checked");
        let checksum = entry.header.checksum;
        self.send_prepare_ok_unchecked(io, op, checksum);
    }

    fn send_prepare_ok_unchecked(&mut self, io: &mut impl Io, op: u64, checksum: u128) {
        let mut header = self.header(Command::PrepareOk);
        header.op = op;
        header.parent = checksum;
        header.commit = self.commit_min;
        header.checkpoint_op = self.superblock_durable().checkpoint_op;
        let message = Message::new(header, Vec::new());
        self.send(io, self.primary_of(self.view), &message);
    }

    /// Acknowledges every durable prepare of the uncommitted suffix (after a view starts, or once
    /// the superblock holds the view).
    pub(super) fn send_prepare_oks(&mut self, io: &mut impl Io) {
        for op in self.commit_max.saturating_add(1)..=self.op {
            self.send_prepare_ok(io, op);
        }
    }

    pub(super) fn on_prepare_ok(&mut self, io: &mut impl Io, message: Message) {
        let header = message.header;
        if self.status != Status::Normal || !self.is_primary() || header.view != self.view {
            return;
        }
        self.peer_checkpoint(header.checkpoint_op, header.replica);
        self.ack_silent_ticks[header.replica as usize] = 0;
        let Some(entry) = self.pipeline.iter_mut().find(|entry| entry.op == header.op) else {
            return;
        };
        if entry.checksum != header.parent {
            return;
        }
        entry.acks |= 1 << header.replica;
        self.primary_commit(io);
    }

    /// Commits the pipeline's head while it has a replication quorum (the primary counts itself
    /// once its own copy is durable).
    pub(super) fn primary_commit(&mut self, io: &mut impl Io) {
        if self.status != Status::Normal || !self.is_primary() {
            return;
        }
        for index in 0..self.pipeline.len() {
            if self.pipeline[index].checksum == 0 {
                // A view change left this op's header to repair: learn its checksum once the
                // chain from the head reaches it.
                if let Some(checksum) = self.expected_checksum(self.pipeline[index].op) {
                    self.pipeline[index].checksum = checksum;
                }
            }
        }
        while let Some(front) = self.pipeline.front() {
            let (op, checksum) = (front.op, front.checksum);
            let own = self.journal.get_exact(op, checksum).is_some_and(|entry| entry.durable) && self.ack_safe(op);
            let front = self.pipeline.front().expect("checked");
            let acks = front.acks.count_ones() as usize + own as usize;
            let quorum =
                if self.config.bug == Some(Bug::CommitWithoutQuorum) { 1 } else { self.config.quorum_replication() };
            if acks < quorum {
                break;
            }
            assert!(front.op > self.commit_max);
            self.commit_max = front.op;
            self.pipeline.pop_front();
        }
        self.commit_journal(io);
        self.primary_prepare(io);
    }

    pub(super) fn on_commit(&mut self, io: &mut impl Io, message: Message) {
        let header = message.header;
        // A commit comes only from a primary in normal status: a view change that left us behind
        // is over, or one we are in has ended without us.
        if (header.view > self.view || (header.view == self.view && self.status == Status::ViewChange))
            && self.status != Status::Opening
            && header.replica == self.primary_of(header.view)
        {
            self.jump_to_newer_view(io, header.view);
            return;
        }
        if header.view < self.view
            && self.status == Status::ViewChange
            && header.view >= self.view_promised
            && header.view >= self.log_view
            && header.replica == self.primary_of(header.view)
        {
            self.rejoin_view(io, header.view);
            return;
        }
        if self.status != Status::Normal
            || header.view != self.view
            || self.is_primary()
            || header.replica != self.primary_of(self.view)
        {
            return;
        }
        self.primary_heard();
        if header.request > self.start_view_sequence {
            self.request_start_view_again(io);
            return;
        }
        self.commit_max_advance(header.commit);
        self.peer_checkpoint(header.checkpoint_op, header.replica);
        if self.commit_max > self.op {
            self.request_prepares_after_head(io);
        }
        self.commit_journal(io);
    }

    pub(super) fn commit_max_advance(&mut self, commit: u64) {
        if commit > self.commit_max {
            self.commit_max = commit;
            // A primary may learn of commits its view change did not tell it: those ops no
            // longer wait for acknowledgements.
            while self.pipeline.front().is_some_and(|entry| entry.op <= self.commit_max) {
                self.pipeline.pop_front();
            }
        }
    }

    fn primary_heard(&mut self) {
        self.timeout_normal_heartbeat.reset();
        self.primary_silent_ticks = 0;
    }

    /// Executes every committed op whose prepare this replica holds, in order, as far as the hash
    /// chain from the head of the view vouches for it.
    pub(super) fn commit_journal(&mut self, io: &mut impl Io) {
        if self.status != Status::Normal {
            return;
        }
        let walk = self.walk_chain(0);
        if !walk.complete {
            return;
        }
        let mut limit = self.commit_max.min(self.op);
        if let Some(missing) = walk.lowest_missing_body {
            limit = limit.min(missing - 1);
        }
        while self.commit_min < limit {
            self.execute(io, self.commit_min + 1);
        }
        self.checkpoint_if_due(io);
    }

    /// Applies one committed prepare: every request in it, through the client table.
    fn execute(&mut self, io: &mut impl Io, op: u64) {
        let entry = self.journal.get(op).expect("executed op is in the journal");
        assert_eq!(entry.header.parent, self.commit_min_checksum, "op {op} does not chain to the last executed op");
        let header = entry.header;
        // Lent out of the journal while its requests apply (nothing below reads the journal),
        // rather than copied: a prepare's body is up to a megabyte.
        let body = self.journal.get_mut(op).and_then(|entry| entry.body.take()).expect("executed op has its body");
        let primary = self.status == Status::Normal && self.is_primary();
        for request in batched_requests(&body) {
            let client = request.header.client;
            if request.header.operation == OPERATION_REGISTER {
                if let Some(entry) = self.client_table.get(client) {
                    // A register retried into a second prepare: the first one stands (for the
                    // user that made it only).
                    if primary {
                        if entry.user_id != request.header.user_id {
                            self.send_eviction(io, &request.header);
                        } else {
                            let entry = register_answer(entry);
                            self.send_reply(io, &request.header, entry.request, &entry);
                        }
                    }
                    continue;
                }
                if let Err(status) = self.state_machine.check_register(header.timestamp, &request.header, request.body)
                {
                    if primary {
                        self.send_refusal(io, &request.header, op, header.timestamp, status);
                    }
                    continue;
                }
                let entry = ClientEntry {
                    session: op,
                    user_id: request.header.user_id,
                    request: 0,
                    reply_op: op,
                    reply_timestamp: header.timestamp,
                    reply_operation: OPERATION_REGISTER,
                    reply: op.to_le_bytes().to_vec(),
                };
                self.client_table.register(client, entry.clone());
                if primary {
                    self.send_reply(io, &request.header, 0, &entry);
                }
                continue;
            }
            match self.client_table.outcome(client, request.header.session, request.header.request) {
                RequestOutcome::New if request.header.operation == OPERATION_UNREGISTER => {
                    self.client_table.unregister(client);
                }
                RequestOutcome::New => {
                    // The node that admitted the request stamped the user its connection is logged
                    // in as (a client re-logging in as someone else keeps its client id).
                    let user_id = request.header.user_id;
                    let shared = body.slice_ref(request.body);
                    let reply = self.state_machine.apply(op, header.timestamp, &request.header, user_id, &shared);
                    let entry = ClientEntry {
                        session: request.header.session,
                        user_id,
                        request: request.header.request,
                        reply_op: op,
                        reply_timestamp: header.timestamp,
                        reply_operation: request.header.operation,
                        reply,
                    };
                    if self.config.bug != Some(Bug::ApplyRetryTwice) {
                        self.client_table.update(client, entry.clone());
                    }
                    if primary {
                        self.send_reply(io, &request.header, request.header.request, &entry);
                    }
                }
                RequestOutcome::Duplicate(entry) => {
                    if primary {
                        let entry = entry.clone();
                        self.send_reply(io, &request.header, request.header.request, &entry);
                    }
                    self.state_machine.apply_skipped(
                        op,
                        header.timestamp,
                        &request.header,
                        &body.slice_ref(request.body),
                    );
                }
                RequestOutcome::Stale => {
                    self.state_machine.apply_skipped(
                        op,
                        header.timestamp,
                        &request.header,
                        &body.slice_ref(request.body),
                    );
                }
                RequestOutcome::Evicted => {
                    if primary {
                        self.send_eviction(io, &request.header);
                    }
                    self.state_machine.apply_skipped(
                        op,
                        header.timestamp,
                        &request.header,
                        &body.slice_ref(request.body),
                    );
                }
            }
        }
        let entry = self.journal.get_mut(op).expect("an executed op stays in the journal while it applies");
        assert_eq!(entry.header.checksum, header.checksum);
        entry.body = Some(body);
        self.commit_min = op;
        self.commit_min_checksum = header.checksum;
        self.commit_stall_ticks = 0;
        let digest = self.state_machine.digest();
        self.event(ReplicaEvent::Committed { op, checksum: header.checksum, digest });
    }

    /// Answers `request` (its client, checksum and origin) with `entry`'s reply.
    fn send_reply(&self, io: &mut impl Io, request: &Header, request_number: u64, entry: &ClientEntry) {
        let client = request.client;
        let mut header = self.header(Command::Reply);
        header.parent = request.parent;
        header.client = client;
        header.origin = request.origin;
        header.op = entry.reply_op;
        header.commit = self.commit_max;
        header.timestamp = entry.reply_timestamp;
        header.request = request_number;
        header.operation = entry.reply_operation;
        header.session = entry.session;
        let message = Message::new(header, entry.reply.clone());
        io.send(Peer::Client(client), message.encode());
    }

    /// Answers a request refused with `status` and no body: a register its state machine refused
    /// (`check_register`: no session), a write a full disk refused (`no_space`).
    pub(super) fn send_refusal(&self, io: &mut impl Io, request: &Header, op: u64, timestamp: u64, status: u32) {
        assert_ne!(status, 0);
        let mut header = self.header(Command::Reply);
        header.parent = request.parent;
        header.client = request.client;
        header.origin = request.origin;
        header.op = op;
        header.commit = self.commit_max;
        header.timestamp = timestamp;
        header.operation = request.operation;
        header.request = request.request;
        header.session = request.session;
        header.status = status;
        io.send(Peer::Client(request.client), Message::new(header, Vec::new()).encode());
    }

    fn send_eviction(&self, io: &mut impl Io, request: &Header) {
        let client = request.client;
        let mut header = self.header(Command::Eviction);
        header.client = client;
        header.origin = request.origin;
        header.reason = EVICTION_REASON_NO_SESSION;
        let message = Message::new(header, Vec::new());
        io.send(Peer::Client(client), message.encode());
    }

    pub(super) fn on_prepare_timeout(&mut self, io: &mut impl Io) {
        if self.status != Status::Normal || !self.is_primary() {
            return;
        }
        let all = (1u64 << self.replica_count()) - 1;
        for index in 0..self.pipeline.len() {
            let entry = &self.pipeline[index];
            let missing = all & !entry.acks & !(1 << self.replica);
            let Some(journal_entry) = self.journal.get_exact(entry.op, entry.checksum) else { continue };
            let Some(body) = &journal_entry.body else { continue };
            let message = Message { header: journal_entry.header, body: body.to_vec() };
            for to in 0..self.replica_count() {
                if missing & (1 << to) != 0 {
                    self.send(io, to, &message);
                }
            }
        }
    }

    pub(super) fn on_commit_message_timeout(&mut self, io: &mut impl Io) {
        if self.status != Status::Normal || !self.is_primary() || self.step_down_for_disk(io) {
            return;
        }
        // Whatever made queued requests wait (a full pipeline, the superblock) may have passed.
        self.primary_prepare(io);
        let message = self.commit_message();
        self.send_to_others(io, &message);
    }

    /// A primary's commit message: the commit number it knows, its log's sequence in the view,
    /// its durable checkpoint.
    pub(super) fn commit_message(&self) -> Message {
        let mut header = self.header(Command::Commit);
        header.commit = self.commit_max;
        header.request = self.start_view_sequence;
        header.checkpoint_op = self.superblock_durable().checkpoint_op;
        Message::new(header, Vec::new())
    }

    pub(super) fn on_normal_heartbeat_timeout(&mut self, io: &mut impl Io) {
        if self.status != Status::Normal || self.is_primary() {
            return;
        }
        self.start_view_change(io, self.view.saturating_add(1));
    }
}
