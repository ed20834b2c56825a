//! View change: start_view_change, do_view_change, start_view, request_start_view.
//!
//! The primary of view v is `v % replica_count`: nobody is elected. Backups that stop hearing from
//! their primary move to view v+1 and say so (start_view_change). A replica that has heard a
//! view-change quorum of those makes its vote durable (the superblock's `view`) and sends its log
//! (do_view_change: log_view, op, commit_max and the headers of its uncommitted suffix) to the new
//! primary. With a quorum of votes the new primary takes the log of the highest log_view, longest
//! first: every op any replication quorum acknowledged is in it, because every view-change quorum
//! meets every replication quorum, and a replica votes only with everything it acknowledged. It
//! makes that log durable, then broadcasts start_view; backups install it, make it durable, and
//! acknowledge its uncommitted suffix so the new primary can commit it.
//!
//! Within one view the log normally only grows, but a primary may cut it short once (nack quorum,
//! see `repair`): each such start_view carries a higher sequence, persisted with `log_view`, and
//! logs compare by (log_view, sequence) before length. A prepare carries the sequence it was made
//! under: backups append, and take commit numbers, only from prepares of their exact log.

use vireo_io::Io;
use vireo_storage::layout::HEADER_SIZE;
use vireo_storage::superblock::VIEW_HEADERS_MAX;

use super::{PipelineEntry, Replica, Status};
use crate::config::Bug;
use crate::header::{Command, Header, Message};
use crate::journal::Entry;
use crate::state_machine::StateMachine;

#[derive(Clone, Debug)]
pub struct DoViewChangeVote {
    pub log_view: u32,
    /// Which start_view of `log_view` the voter's log is (see `start_view_sequence`).
    pub log_view_sequence: u64,
    pub op: u64,
    pub op_checksum: u128,
    pub commit_max: u64,
    /// The voter's log suffix, oldest first, down to its commit_max where it holds it.
    pub headers: Vec<Header>,
}

pub fn encode_headers(headers: &[Header]) -> Vec<u8> {
    let mut body = Vec::with_capacity(headers.len() * HEADER_SIZE);
    for header in headers {
        body.extend_from_slice(&header.encode());
    }
    body
}

/// Decodes a list of prepare headers; `None` if any is malformed or not a prepare.
pub fn decode_headers(body: &[u8]) -> Option<Vec<Header>> {
    if !body.len().is_multiple_of(HEADER_SIZE) || body.len() / HEADER_SIZE > VIEW_HEADERS_MAX {
        return None;
    }
    let mut headers = Vec::with_capacity(body.len() / HEADER_SIZE);
    for chunk in body.chunks(HEADER_SIZE) {
        let header = Header::decode(chunk).ok()?;
        if header.command != Command::Prepare || !header.valid_checksum() {
            return None;
        }
        if let Some(previous) = headers.last() {
            let previous: &Header = previous;
            if Some(header.op) != previous.op.checked_add(1) || header.parent != previous.checksum {
                return None;
            }
        }
        headers.push(header);
    }
    Some(headers)
}

impl<S: StateMachine> Replica<S> {
    /// The headers of this replica's log suffix: from the head down, contiguous, to the op at
    /// commit_max (the anchor below the uncommitted part), at most `VIEW_HEADERS_MAX`.
    pub(super) fn view_headers(&self) -> Vec<Header> {
        if self.op > self.commit_min && self.journal.get_exact(self.op, self.op_checksum).is_none() {
            // The head is beyond what our journal holds yet: the suffix as it was installed still
            // names it, and it must survive a restart.
            if self.log_headers.last().is_some_and(|last| last.op == self.op && last.checksum == self.op_checksum) {
                return self.log_headers.clone();
            }
        }
        let mut headers = Vec::new();
        let mut op = self.op;
        let mut expected = self.op_checksum;
        while op > 0 && headers.len() < VIEW_HEADERS_MAX {
            let Some(entry) = self.journal.get_exact(op, expected) else { break };
            headers.push(entry.header);
            if op <= self.commit_max {
                break;
            }
            expected = entry.header.parent;
            op -= 1;
        }
        headers.reverse();
        headers
    }

    pub(super) fn start_view_change(&mut self, io: &mut impl Io, view: u32) {
        assert!(view > self.view || (view == self.view && self.status == Status::Recovering));
        self.view = view;
        self.set_status(Status::ViewChange);
        self.start_view_change_votes = 1 << self.replica;
        self.do_view_change_votes.iter_mut().for_each(|vote| *vote = None);
        self.do_view_change_sent = false;
        self.start_view_installed = false;
        self.pipeline.clear();
        self.request_queue.clear();
        self.timeouts_for_status(io);
        // No promise yet: a replica that hears no quorum may still return to the view it left.
        self.send_start_view_change(io);
        self.view_change_progress(io);
    }

    /// start_view_change carries the view its sender has promised (`context`): a replica that
    /// promised a view can never again follow an older one, so the others must come up to it.
    fn send_start_view_change(&mut self, io: &mut impl Io) {
        let mut header = self.header(Command::StartViewChange);
        header.context = self.view_promised as u128;
        let message = Message::new(header, Vec::new());
        self.send_to_others(io, &message);
    }

    pub(super) fn on_start_view_change(&mut self, io: &mut impl Io, message: Message) {
        let view = message.header.view;
        if view < self.view {
            return;
        }
        // The sender promised a view above ours: it will never take part in ours again (its
        // vote may have counted towards a view-change quorum), so ours cannot go on without it
        // for long: move up even if ours still works.
        let promised_above = message.header.context > self.view as u128;
        let join = match self.status {
            Status::Opening => false,
            Status::Recovering => true,
            // A backup that still hears its primary, or a primary that still hears a replication
            // quorum acknowledge, does not let one partitioned replica disrupt a working view.
            Status::Normal => view > self.view && (!self.leading_recently() || promised_above),
            Status::ViewChange => view > self.view,
        };
        if join {
            self.start_view_change(io, view);
        }
        if self.status == Status::ViewChange && view == self.view {
            self.start_view_change_votes |= 1 << message.header.replica;
            self.view_change_progress(io);
        }
    }

    /// Whether this view is visibly working from where this replica stands.
    fn leading_recently(&self) -> bool {
        let recent = self.config.normal_heartbeat_timeout_ticks;
        if self.is_primary() {
            let acking = (0..self.replica_count())
                .filter(|replica| *replica == self.replica || self.ack_silent_ticks[*replica as usize] < recent)
                .count();
            acking >= self.config.quorum_replication()
        } else {
            self.primary_silent_ticks * 2 < recent
        }
    }

    pub(super) fn on_do_view_change(&mut self, io: &mut impl Io, message: Message) {
        let header = message.header;
        if header.view < self.view || self.primary_of(header.view) != self.replica {
            return;
        }
        // A voter may know of commits beyond its own log (commit > op): that is allowed.
        if header.log_view > header.view {
            return;
        }
        let Some(headers) = decode_headers(&message.body) else { return };
        if headers.last().is_some_and(|last| last.op != header.op || last.checksum != header.parent) {
            return;
        }
        if header.view > self.view || self.status != Status::ViewChange {
            if self.status == Status::Opening || (header.view == self.view && self.status == Status::Normal) {
                return;
            }
            self.start_view_change(io, header.view);
        }
        self.peer_checkpoint(header.checkpoint_op, header.replica);
        if self.start_view_installed {
            return;
        }
        self.do_view_change_votes[header.replica as usize] = Some(DoViewChangeVote {
            log_view: header.log_view,
            log_view_sequence: header.request,
            op: header.op,
            op_checksum: header.parent,
            commit_max: header.commit,
            headers,
        });
        self.view_change_progress(io);
    }

    fn own_vote(&self) -> DoViewChangeVote {
        DoViewChangeVote {
            log_view: self.log_view,
            log_view_sequence: self.start_view_sequence,
            op: self.op,
            op_checksum: self.op_checksum,
            commit_max: self.commit_max,
            headers: self.view_headers(),
        }
    }

    /// Moves a view change along as far as votes and durability allow.
    pub(super) fn view_change_progress(&mut self, io: &mut impl Io) {
        if self.status != Status::ViewChange {
            return;
        }
        let primary = self.primary_of(self.view) == self.replica;
        let start_view_change_quorum = self.start_view_change_votes.count_ones() as usize
            >= self.config.quorum_view_change()
            || self.do_view_change_votes.iter().any(Option::is_some);
        if start_view_change_quorum && self.view_promised < self.view {
            // The promise a do_view_change makes (never again acknowledge an older view) must
            // outlive a crash before the vote is cast.
            self.view_promised = self.view;
            self.superblock_update(io);
        }
        // A rejoining replica may have forgotten prepares it acknowledged: its vote could let the
        // new primary's log drop them, so it sits the view change out until it caught up, unless
        // the other votes of any quorum alone meet every replication quorum.
        let may_vote = self.rejoining.is_none() || self.config.rejoining_vote_is_safe();
        if start_view_change_quorum && !self.do_view_change_sent && self.view_durable() && may_vote {
            self.do_view_change_sent = true;
            if primary {
                self.do_view_change_votes[self.replica as usize] = Some(self.own_vote());
            } else {
                self.send_do_view_change(io);
            }
        }
        if primary && !self.start_view_installed {
            let votes = self.do_view_change_votes.iter().flatten().count();
            if votes >= self.config.quorum_view_change() && self.do_view_change_votes[self.replica as usize].is_some() {
                self.install_canonical_log(io);
            }
        }
        if primary && self.start_view_installed && self.log_view_durable() {
            self.become_primary(io);
        }
    }

    fn send_do_view_change(&mut self, io: &mut impl Io) {
        let vote = self.own_vote();
        let mut header = self.header(Command::DoViewChange);
        header.log_view = vote.log_view;
        header.request = vote.log_view_sequence;
        header.op = vote.op;
        header.parent = vote.op_checksum;
        header.commit = vote.commit_max;
        header.checkpoint_op = self.superblock_durable().checkpoint_op;
        header.count = vote.headers.len() as u32;
        let message = Message::new(header, encode_headers(&vote.headers));
        self.send(io, self.primary_of(self.view), &message);
    }

    /// The new primary adopts the log of the votes with the highest log_view, the longest of
    /// them, and the highest commit_max any vote knows.
    fn install_canonical_log(&mut self, io: &mut impl Io) {
        let votes: Vec<&DoViewChangeVote> = self.do_view_change_votes.iter().flatten().collect();
        // The newest log: highest log_view, then the latest start_view of that view (a primary
        // may have cut its view's log short), then the longest.
        let newest = if self.config.bug == Some(Bug::ViewChangeTakesLongestLog) {
            let longest = votes.iter().max_by_key(|vote| vote.op).expect("a quorum of votes");
            (longest.log_view, longest.log_view_sequence)
        } else {
            votes.iter().map(|vote| (vote.log_view, vote.log_view_sequence)).max().expect("a quorum of votes")
        };
        let best = votes
            .iter()
            .filter(|vote| (vote.log_view, vote.log_view_sequence) == newest)
            .max_by_key(|vote| vote.op)
            .expect("a vote with the newest log");
        let commit_max = votes.iter().map(|vote| vote.commit_max).max().expect("votes");
        assert!(best.op >= commit_max, "canonical head {} below a known commit {}", best.op, commit_max);
        assert!(best.op >= self.commit_min, "canonical head {} below our executed op {}", best.op, self.commit_min);
        let (op, op_checksum, headers) = (best.op, best.op_checksum, best.headers.clone());
        for vote in &votes {
            // Votes of the same log come from one primary's start_view and prepares: they agree
            // where they meet.
            if (vote.log_view, vote.log_view_sequence) == newest {
                for header in &vote.headers {
                    if let Some(canonical) = headers.iter().find(|canonical| canonical.op == header.op) {
                        assert_eq!(canonical.checksum, header.checksum, "two logs in view {}", newest.0);
                    }
                }
            }
        }
        self.start_view_sequence = 0;
        self.install_log(op, op_checksum, &headers, commit_max);
        self.start_view_installed = true;
        self.superblock_update(io);
    }

    /// Replaces our log by a view's log (its head and suffix headers); ops above it are dropped.
    fn install_log(&mut self, op: u64, op_checksum: u128, headers: &[Header], commit_max: u64) {
        assert!(op >= self.commit_min);
        for header in headers {
            if header.op <= self.commit_min || !self.journal_holds(header.op) {
                // Executed already, or beyond what the journal can hold before we catch up
                // (state transfer will).
                continue;
            }
            if self.journal.get_exact(header.op, header.checksum).is_none() {
                self.journal.insert(Entry::header_only(*header));
            }
        }
        self.journal.retain(0, op);
        if self.journal.get(op).is_some_and(|entry| entry.header.checksum != op_checksum) {
            // Our own prepare at the new head is another view's: the view's log names a different one.
            self.journal.remove(op);
        }
        if op == self.commit_min {
            assert_eq!(op_checksum, self.commit_min_checksum, "the view's head is our executed op, another prepare");
        }
        self.log_headers = headers.to_vec();
        self.durable_chain_op = 0;
        self.view_promised = self.view;
        self.op = op;
        self.op_checksum = op_checksum;
        self.log_view = self.view;
        self.commit_max_advance(commit_max);
    }

    fn become_primary(&mut self, io: &mut impl Io) {
        assert!(self.start_view_installed);
        self.set_status(Status::Normal);
        self.start_view_installed = false;
        self.pipeline.clear();
        for op in self.commit_max.saturating_add(1)..=self.op {
            // 0 until repair finds the header the chain expects here.
            let checksum = self.expected_checksum(op).unwrap_or(0);
            self.pipeline.push_back(PipelineEntry { op, checksum, acks: 0, nacks: 0 });
        }
        if let Some(head) = self.journal.get(self.op) {
            self.timestamp_last = self.timestamp_last.max(head.header.timestamp);
        }
        self.timeouts_for_status(io);
        self.send_start_view(io, None);
        self.repair(io);
        self.primary_commit(io);
    }

    /// Sends this view's start_view to one replica, or to all.
    pub(super) fn send_start_view(&mut self, io: &mut impl Io, to: Option<u8>) {
        let headers = self.view_headers();
        let mut header = self.header(Command::StartView);
        header.log_view = self.log_view;
        header.op = self.op;
        header.parent = self.op_checksum;
        header.commit = self.commit_max;
        header.checkpoint_op = self.superblock_durable().checkpoint_op;
        header.count = headers.len() as u32;
        header.request = self.start_view_sequence;
        let message = Message::new(header, encode_headers(&headers));
        match to {
            Some(to) => self.send(io, to, &message),
            None => self.send_to_others(io, &message),
        }
    }

    pub(super) fn on_start_view(&mut self, io: &mut impl Io, message: Message) {
        let header = message.header;
        if self.status == Status::Opening || header.view < self.view {
            return;
        }
        if header.view == self.view && self.status == Status::Normal && header.request <= self.start_view_sequence {
            return;
        }
        if header.view == self.log_view && (header.request, header.op) < (self.start_view_sequence, self.op) {
            // An older start_view of the log we already hold (delayed or duplicated, perhaps
            // arriving after a restart): installing it would cut ops we may have acknowledged.
            return;
        }
        if header.replica != self.primary_of(header.view) || header.op < header.commit {
            return;
        }
        let Some(headers) = decode_headers(&message.body) else { return };
        if headers.last().is_some_and(|last| last.op != header.op || last.checksum != header.parent) {
            return;
        }
        if header.op < self.commit_min {
            // A start_view from before our own commits: stale, and not this view's final word.
            return;
        }
        self.view = header.view;
        self.start_view_sequence = header.request;
        self.install_log(header.op, header.parent, &headers, header.commit);
        self.peer_checkpoint(header.checkpoint_op, header.replica);
        self.set_status(Status::Normal);
        self.do_view_change_sent = false;
        self.start_view_installed = false;
        self.pipeline.clear();
        self.request_queue.clear();
        self.timeouts_for_status(io);
        self.superblock_update(io);
        self.send_prepare_oks(io);
        self.repair(io);
        self.commit_journal(io);
    }

    pub(super) fn on_request_start_view(&mut self, io: &mut impl Io, message: Message) {
        if self.status == Status::Normal && self.is_primary() && message.header.view <= self.view {
            self.send_start_view(io, Some(message.header.replica));
        }
    }

    /// A view change we started found no quorum, and the view we left is working: go back to it,
    /// which is safe while we promised nothing beyond it (no do_view_change sent for a later view).
    pub(super) fn rejoin_view(&mut self, io: &mut impl Io, view: u32) {
        assert!(view < self.view && view >= self.view_promised && view >= self.log_view);
        assert_eq!(self.status, Status::ViewChange);
        self.view = view;
        self.set_status(Status::Recovering);
        self.do_view_change_sent = false;
        self.timeouts_for_status(io);
        self.send_request_start_view(io);
    }

    /// We saw a message of a view newer than ours: we missed its view change. Ask its primary for
    /// the view's log instead of acting on ours.
    pub(super) fn jump_to_newer_view(&mut self, io: &mut impl Io, view: u32) {
        assert!(view > self.view || (view == self.view && self.status == Status::ViewChange));
        if self.status == Status::ViewChange && self.primary_of(self.view) == self.replica && view == self.view {
            return;
        }
        self.view = view;
        self.set_status(Status::Recovering);
        self.pipeline.clear();
        self.request_queue.clear();
        self.timeouts_for_status(io);
        self.send_request_start_view(io);
    }

    /// Our log and this view's primary disagree: ask it for the view's log (once a tick).
    pub(super) fn request_start_view_again(&mut self, io: &mut impl Io) {
        if !self.start_view_requested && self.status == Status::Normal && !self.is_primary() {
            self.start_view_requested = true;
            self.send_request_start_view(io);
        }
    }

    fn send_request_start_view(&mut self, io: &mut impl Io) {
        let message = Message::new(self.header(Command::RequestStartView), Vec::new());
        let primary = self.primary_of(self.view);
        if primary == self.replica {
            return;
        }
        self.send(io, primary, &message);
    }

    pub(super) fn on_view_change_message_timeout(&mut self, io: &mut impl Io) {
        if self.status != Status::ViewChange {
            return;
        }
        self.send_start_view_change(io);
        if self.do_view_change_sent && self.primary_of(self.view) != self.replica {
            self.send_do_view_change(io);
        }
    }

    pub(super) fn on_view_change_status_timeout(&mut self, io: &mut impl Io) {
        if self.status != Status::ViewChange {
            return;
        }
        self.start_view_change(io, self.view.saturating_add(1));
    }

    pub(super) fn on_request_start_view_timeout(&mut self, io: &mut impl Io) {
        if self.status != Status::Recovering {
            return;
        }
        if self.timeout_request_start_view.attempts >= 4 || self.primary_of(self.view) == self.replica {
            // Nobody answers for this view: a view change will find out what the cluster holds.
            let view = if self.primary_of(self.view) == self.replica && self.replica_count() > 1 {
                self.view.saturating_add(1)
            } else {
                self.view
            };
            self.start_view_change(io, view.max(self.view));
            return;
        }
        self.send_request_start_view(io);
    }
}
