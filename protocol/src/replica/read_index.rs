//! Read index: the op a read must wait for so that it sees every write acknowledged before it
//! arrived, learned from a quorum of the group without a prepare (ping and pong).
//!
//! A read served from a replica's committed state may be stale: a backup learns of a commit only
//! with its primary's next message, and a primary that a view change deposed does not know it
//! yet. A read round fixes that. The replica that holds the read sends ping to every peer; each
//! replica in normal status (and not rejoining) answers pong with the highest op it holds
//! (`max(op, commit_max)`). Once a view-change quorum has answered (itself included, when it is in
//! normal status), the highest op named is the round's read index; the read is served once this
//! replica has executed up to it (`commit_min >= read index`).
//!
//! Why that sees every acknowledged write: a write is acknowledged once a replication quorum holds
//! its prepare at op x. The round starts after the read arrived, so after that acknowledgement,
//! and every view-change quorum meets every replication quorum: some replica that answered holds
//! x, and a replica's log never loses a committed op (a view change installs a log holding every
//! committed op; a primary cuts only ops a nack quorum proved uncommitted; a replica that lost its
//! disk answers nothing until it rejoined and executed past its nack floor). So the read index is
//! at least x, and op numbers are canonical once committed: executing up to it executes x. No
//! leader, lease or clock is trusted,
//! so a primary changing under the read changes nothing; and the read stays off the WAL and off
//! prepares. The index may name an op that a view change later discards; the op number is then
//! reused by the next prepare, so waiting for it ends with the next write, and a reader that waits
//! too long asks for a fresh round (the node's bound, not the replica's).
//!
//! To make a backup's wait short, a primary that answers a ping also sends the asker its commit
//! message (the commit number it knows, as its heartbeat would).
//!
//! Rounds are batched: reads that arrive while a round is in flight wait for the next one, which
//! starts when that round ends (a round must start after its reads arrived). One round is in
//! flight at a time per replica, so the pings a group sends are bounded however many reads come.
//! Each round carries a random nonce, so a pong to a ping of before a restart counts for nothing.

use vireo_io::Io;

use super::{Replica, Status};
use crate::header::{Command, Message};
use crate::state_machine::StateMachine;

/// Ticks a read round waits for pongs before it pings the replicas it has not heard from again.
pub const READ_ROUND_RESEND_TICKS: u64 = 10;

/// The read rounds of one replica.
#[derive(Clone, Debug, Default)]
pub(super) struct ReadRounds {
    /// Rounds started so far; a round is numbered by the count once it started.
    started: u64,
    in_flight: Option<ReadRound>,
    /// A read waits for a round that has not started yet (it starts when the one in flight ends).
    wanted: bool,
    /// The newest round that ended, and its read index.
    done: u64,
    done_op: u64,
}

#[derive(Clone, Debug)]
struct ReadRound {
    round: u64,
    nonce: u64,
    /// Replicas whose pong arrived, as a bit set, and the highest op they named.
    heard: u64,
    op_max: u64,
    ticks: u64,
}

impl ReadRound {
    fn context(&self) -> u128 {
        ((self.nonce as u128) << 64) | self.round as u128
    }
}

impl<S: StateMachine> Replica<S> {
    /// A read arrived: the round whose read index it must wait for (`read_index`). Starts that
    /// round now if none is in flight.
    pub fn read_round(&mut self, io: &mut impl Io) -> u64 {
        if self.read_rounds.in_flight.is_some() {
            self.read_rounds.wanted = true;
            return self.read_rounds.started + 1;
        }
        self.read_round_start(io);
        self.read_rounds.started
    }

    /// The read index for a read that waits for `round`, once that round (or a later one, which
    /// also started after the read arrived) has ended.
    pub fn read_index(&self, round: u64) -> Option<u64> {
        (self.read_rounds.done >= round).then_some(self.read_rounds.done_op)
    }

    /// Whether this replica may name its op in a read round: it is in normal status, not
    /// rejoining, and past its `nack_floor`. A replica that lost its disk may have forgotten ops
    /// it acknowledged; once rejoined it may still lack some acknowledged before the loss and
    /// committed under a primary whose commit number lagged, up to its nack floor: until it
    /// executed that far, the ops it names could be below one of them.
    fn read_round_answers(&self) -> bool {
        self.status == Status::Normal && self.rejoining.is_none() && !self.failed && self.commit_min >= self.nack_floor
    }

    fn read_round_start(&mut self, io: &mut impl Io) {
        assert!(self.read_rounds.in_flight.is_none());
        self.read_rounds.started += 1;
        self.read_rounds.wanted = false;
        let round = ReadRound { round: self.read_rounds.started, nonce: io.random(), heard: 0, op_max: 0, ticks: 0 };
        self.read_rounds.in_flight = Some(round);
        self.read_round_ping(io);
        self.read_round_progress(io);
    }

    /// Pings the replicas the round in flight has not heard from.
    fn read_round_ping(&mut self, io: &mut impl Io) {
        let Some(round) = &self.read_rounds.in_flight else { return };
        let mut header = self.header(Command::Ping);
        header.context = round.context();
        let heard = round.heard;
        let message = Message::new(header, Vec::new());
        for to in (0..self.replica_count()).filter(|to| *to != self.replica && heard & (1 << to) == 0) {
            self.send(io, to, &message);
        }
    }

    /// Ends the round in flight once a view-change quorum answered (this replica counted now, if
    /// it may answer), and starts the next one if a read waits for it.
    fn read_round_progress(&mut self, io: &mut impl Io) {
        let answers_here = self.read_round_answers();
        let own_op = self.op.max(self.commit_max);
        let quorum = self.config.quorum_view_change();
        let Some(round) = &mut self.read_rounds.in_flight else { return };
        let (mut heard, mut op_max) = (round.heard, round.op_max);
        if answers_here {
            heard |= 1 << self.replica;
            op_max = op_max.max(own_op);
        }
        if (heard.count_ones() as usize) < quorum {
            return;
        }
        assert!(round.round > self.read_rounds.done);
        self.read_rounds.done = round.round;
        self.read_rounds.done_op = op_max;
        self.read_rounds.in_flight = None;
        if self.read_rounds.wanted {
            self.read_round_start(io);
        }
    }

    /// A peer asks for the highest op it holds, for one of its read rounds.
    pub(super) fn on_ping(&mut self, io: &mut impl Io, message: Message) {
        if !self.read_round_answers() {
            return;
        }
        let asker = message.header.replica;
        let mut pong = self.header(Command::Pong);
        pong.context = message.header.context;
        pong.op = self.op.max(self.commit_max);
        self.send(io, asker, &Message::new(pong, Vec::new()));
        if self.is_primary() {
            self.send(io, asker, &self.commit_message());
        }
    }

    pub(super) fn on_pong(&mut self, io: &mut impl Io, message: Message) {
        let Some(round) = &mut self.read_rounds.in_flight else { return };
        if message.header.context != round.context() {
            return;
        }
        round.heard |= 1 << message.header.replica;
        round.op_max = round.op_max.max(message.header.op);
        self.read_round_progress(io);
    }

    pub(super) fn read_round_tick(&mut self, io: &mut impl Io) {
        let Some(round) = &mut self.read_rounds.in_flight else { return };
        round.ticks += 1;
        if round.ticks.is_multiple_of(READ_ROUND_RESEND_TICKS) {
            self.read_round_ping(io);
        }
        self.read_round_progress(io);
    }
}
