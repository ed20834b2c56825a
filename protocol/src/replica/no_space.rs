//! A single replica whose write met a full disk (ENOSPC) although its node keeps a free-space
//! reserve (something else filled the disk, or the reserve was set too small): the new data
//! that write was for is refused at once with an error, and leaves nothing behind.
//!
//! Which ops: a prepare whose WAL write (its slot, or its redundant header) was refused
//! (`wal_on_completion`), or whose batches its external log could not hold (`refuse_unstored`:
//! the segment log has cut itself where its write failed). Neither is committed: a single
//! replica commits an op only once its WAL holds it durably, header and all, and its external
//! log holds its batches. The log is cut below the lowest such op (`cut_log_at`, as a primary
//! that proved an op uncommitted cuts it), and every op after it goes too: each chains to the
//! one before.
//!
//! What becomes of their requests: the new data a full node refuses at its front door (sends,
//! creates: `StateMachine::refused_when_disk_full`) is refused with `STATUS_NO_SPACE`; the rest
//! (logins, offsets, polls that commit their offset), which the reserve lets through, goes back
//! to the front of the request queue and is prepared again after `NO_SPACE_PAUSE_TICKS`: it
//! waits for space, at the pace of one try per pause, and is not refused for it.
//!
//! When the refusals go: only once the superblock names the cut log. Before that a crash would
//! recover the prepares from the WAL and commit them, and a client told "not stored" would find
//! its messages there. The superblock's copies are written whole (`SUPERBLOCK_SIZE_MAX`) so
//! that they never need new space, and a copy's write a full disk refuses anyway is made again.
//!
//! A refused request that comes again (a front door sends again what it has not heard back
//! about, and the answer may be on its way) is refused again, never prepared: each client's
//! highest refused request is kept (`refused`, one entry per client, at most the client
//! table's `clients_max`).
//!
//! A cluster does not do this: there the others may hold the op and commit it without us, so an
//! error would be a lie. A replica whose node runs short of space steps down instead
//! (`disk_low`), and one whose WAL write still fails stops, as on any failed write; the others
//! go on and repair it.

use std::collections::BTreeMap;

use vireo_io::Io;

use super::{Replica, ReplicaEvent, Status};
use crate::config::Bug;
use crate::header::Header;
use crate::request::{batched_requests, OPERATION_REGISTER};
use crate::state_machine::StateMachine;

/// The status of a reply to a request refused for want of space: the reference's
/// `CannotSaveMessagesToSegment` (a node answers a refused create with the create's own code).
pub const STATUS_NO_SPACE: u32 = 4006;

/// Ticks a single replica prepares nothing after a full disk refused one of its writes: the
/// requests it put back wait, and the disk is not asked again at once.
pub const NO_SPACE_PAUSE_TICKS: u64 = 10;

/// Requests refused for want of space, and the ones waiting for their answer.
#[derive(Debug, Default)]
pub struct NoSpace {
    /// Requests of the ops cut, answered once the superblock holds the cut: at most a pipeline
    /// of prepares' requests (`prepare_queue_max` times `batch_requests_max`).
    unanswered: Vec<Header>,
    /// The start_view of the log the cut began (the superblock must hold it or a later one).
    cut_sequence: u64,
    /// Each client's highest refused request: one entry per client, at most `clients_max`.
    refused: BTreeMap<u128, u64>,
    /// Requests refused so, since the replica opened.
    pub refusals: u64,
    /// Ticks left before the primary prepares again (`NO_SPACE_PAUSE_TICKS`).
    pause_ticks: u64,
}

impl<S: StateMachine> Replica<S> {
    /// Requests refused for want of space since the replica opened.
    pub fn refused_for_no_space(&self) -> u64 {
        self.no_space.refusals
    }

    /// The external log could not store what follows `stored_to` (a full disk refused its write,
    /// and it cut itself there): the ops whose batches it lacks are cut and their requests
    /// refused. Nothing happens on a cluster, or for ops committed already (a single replica
    /// commits none before its log holds it: the log waits for space then).
    pub fn refuse_unstored(&mut self, io: &mut impl Io, stored_to: u64) {
        if !self.refuses_for_no_space() {
            return;
        }
        let first = (self.commit_max + 1..=self.op)
            .find(|op| self.journal.get(*op).is_none_or(|e| e.header.cursor > stored_to));
        let Some(op) = first else { return };
        self.cut_for_no_space(io, op);
    }

    fn refuses_for_no_space(&self) -> bool {
        self.config.replica_count == 1 && self.status == Status::Normal && self.is_primary() && !self.failed
    }

    /// Cuts the log below `op`: of the requests of the ops cut, the new data a full node refuses
    /// (sends, creates: `StateMachine::refused_when_disk_full`) is kept for its refusals, and
    /// the rest (logins, offsets, polls that commit) goes back to the front of the request
    /// queue, in order, prepared again after a pause (those that do not fit are dropped: their
    /// front door sends them again). False (nothing done) where a cut is not allowed: the
    /// caller then stops.
    pub(super) fn cut_for_no_space(&mut self, io: &mut impl Io, op: u64) -> bool {
        if !self.refuses_for_no_space() || op <= self.commit_max || op > self.op {
            return false;
        }
        let Some(parent) = self.journal.get(op).map(|entry| entry.header.parent) else { return false };
        if self.config.bug == Some(Bug::NoSpaceRefusalKeepsOp) {
            // Refused, but kept: written again (the WAL) or appended again (the log) once
            // space is back, and committed.
            for kept in op..=self.op {
                let Some(entry) = self.journal.get(kept) else { continue };
                let body = entry.body.clone();
                if !entry.durable {
                    self.wal.queue_after_open(kept);
                }
                for request in body.iter().flat_map(|body| batched_requests(body)) {
                    if S::refused_when_disk_full(&request.header) {
                        self.send_no_space(io, &request.header);
                    }
                }
            }
            return true;
        }
        let mut again = Vec::new();
        let unanswered_before = self.no_space.unanswered.len();
        for cut_op in op..=self.op {
            // A prepare whose body is gone (damage) leaves its requests unanswered: their clients
            // time out, the outcome unknown to them, which is true.
            let Some(body) = self.journal.get(cut_op).and_then(|entry| entry.body.as_deref()) else { continue };
            let mut at = 0;
            for request in batched_requests(body) {
                let frame = &body[at..at + request.header.size as usize];
                at += request.header.size as usize;
                if S::refused_when_disk_full(&request.header) {
                    self.no_space.unanswered.push(request.header);
                } else {
                    again.push((request.header, frame.to_vec()));
                }
            }
        }
        let bound = self.config.prepare_queue_max * self.config.batch_requests_max;
        assert!(self.no_space.unanswered.len() <= bound, "refusals past a pipeline of prepares");
        let refused = (self.no_space.unanswered.len() - unanswered_before) as u32;
        let again_count = again.len() as u32;
        let room = self.config.request_queue_max.saturating_sub(self.request_queue.len());
        again.truncate(room);
        for queued in again.into_iter().rev() {
            self.request_queue.push_front(queued);
        }
        self.cut_log_at(io, op, parent);
        self.event(ReplicaEvent::CutForNoSpace { op, refused, again: again_count });
        self.no_space.cut_sequence = self.start_view_sequence;
        self.no_space.pause_ticks = NO_SPACE_PAUSE_TICKS;
        true
    }

    /// Whether the primary waits before it prepares again (a full disk refused a write).
    pub(super) fn paused_for_no_space(&self) -> bool {
        self.no_space.pause_ticks > 0
    }

    /// Counts the pause down; at its end the requests put back are prepared.
    pub(super) fn no_space_tick(&mut self, io: &mut impl Io) {
        if self.no_space.pause_ticks == 0 {
            return;
        }
        self.no_space.pause_ticks -= 1;
        if self.no_space.pause_ticks == 0 {
            self.primary_prepare(io);
        }
    }

    /// Answers the requests of the cut ops once the superblock holds the cut.
    pub(super) fn answer_no_space(&mut self, io: &mut impl Io) {
        let durable = self.superblock_durable();
        let held = self.superblock.durable.sequence > 0
            && durable.log_view == self.view
            && durable.log_view_sequence >= self.no_space.cut_sequence;
        if self.no_space.unanswered.is_empty() || !held {
            return;
        }
        for request in std::mem::take(&mut self.no_space.unanswered) {
            if request.operation != OPERATION_REGISTER {
                self.remember_refused(request.client, request.request);
            }
            self.send_no_space(io, &request);
        }
    }

    /// Whether `request` was refused for want of space (answered again, or soon): it must not
    /// be prepared now, or a client told "not stored" would find it stored.
    pub(super) fn refused_before(&mut self, io: &mut impl Io, request: &Header) -> bool {
        if request.operation == OPERATION_REGISTER {
            return false;
        }
        let waiting = self
            .no_space
            .unanswered
            .iter()
            .any(|unanswered| unanswered.client == request.client && unanswered.request == request.request);
        if waiting {
            return true;
        }
        if self.no_space.refused.get(&request.client).is_some_and(|refused| request.request <= *refused) {
            self.send_no_space(io, request);
            return true;
        }
        false
    }

    fn remember_refused(&mut self, client: u128, request: u64) {
        if !self.no_space.refused.contains_key(&client) && self.no_space.refused.len() >= self.config.clients_max {
            // Full: the entries of clients gone from the client table, or already past their
            // refused request, are no longer needed; failing that, the lowest client's goes.
            let table = &self.client_table;
            self.no_space.refused.retain(|client, refused| table.get(*client).is_some_and(|e| e.request < *refused));
            if self.no_space.refused.len() >= self.config.clients_max {
                self.no_space.refused.pop_first();
            }
        }
        let highest = self.no_space.refused.entry(client).or_insert(request);
        *highest = (*highest).max(request);
        assert!(self.no_space.refused.len() <= self.config.clients_max);
    }

    fn send_no_space(&mut self, io: &mut impl Io, request: &Header) {
        self.no_space.refusals += 1;
        self.send_refusal(io, request, self.commit_min, self.timestamp_last, STATUS_NO_SPACE);
    }
}
