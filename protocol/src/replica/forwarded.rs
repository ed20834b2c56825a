//! Requests a backup forwarded to its primary, and the prepares that come back for them without
//! their bytes: a batch crosses each replica link at most once.
//!
//! A backup that forwards a client's request (`forward_request`) keeps the frame it sent. The
//! primary knows who forwarded a request by its origin (the node where the client's connection
//! lives, whose replica forwarded it: in a group that spans every node, replica index and node
//! index are the same). When every request of a prepare came from one backup, the prepare it sends
//! that backup is a `PrepareElided`: the prepare's header, the cursor before its first request and
//! each request's header as the prepare's body holds it (stamped: `batch_at` set), but not the
//! requests' bodies. The backup rebuilds the body from the frames it kept, stamping each batch as
//! the primary did (`StateMachine::prepare` is a pure function of the batch, the cursor and the
//! timestamp), and takes it as the prepare only if the rebuilt body is the one the prepare's
//! header vouches for (`checksum_body`, over the batches' own checksums, which the backup's
//! stamping wrote). Anything else (the kept copy is gone: evicted, or lost in a restart; a
//! checksum that differs) is a miss: the backup asks the primary for the prepare whole, as for
//! any prepare it lacks.
//!
//! Only the primary's first send of a prepare is elided; a retransmission or a repair carries
//! the body. Kept frames are bounded (`FORWARDED_KEPT_MAX`, `FORWARDED_KEPT_BYTES_MAX`, and
//! `FORWARDED_KEPT_TICKS_MAX` each): the oldest goes first, which at worst costs a miss. A frame
//! is dropped once a prepare holding its request arrives, elided or whole.
//!
//! Layout of a `PrepareElided` body (little-endian): `prepare header [256] | cursor_before u64 |
//! count x request header [256]`, `count` the prepare header's.

use std::collections::VecDeque;

use vireo_io::{Bytes, Io, OutFrame, Peer};
use vireo_storage::layout::HEADER_SIZE;

use super::Replica;
use crate::config::Bug;
use crate::header::{Command, Header, Message};
use crate::request::batched_requests;
use crate::state_machine::StateMachine;

/// Frames a backup keeps for prepares still to come, at most: a node's front door sends one
/// request at a time per client and group, so this covers as many clients sending at once.
pub const FORWARDED_KEPT_MAX: usize = 64;
/// Bytes of kept frames at most (whatever their count).
pub const FORWARDED_KEPT_BYTES_MAX: usize = 8 << 20;
/// Ticks a kept frame waits for its prepare at most: a prepare comes back within a round trip,
/// and one that does not (its primary gone, the request dropped) must not pin the frame.
pub const FORWARDED_KEPT_TICKS_MAX: u64 = 100;
/// `Config::elide_bytes_min` by default: requests smaller than this are not kept, and their
/// prepares not elided: what their bytes cost on the link is about what the elided form costs.
pub const FORWARDED_KEEP_BYTES_MIN: usize = 4 << 10;
const CURSOR_SIZE: usize = 8;

/// A frame kept: its header's checksum, its client, the tick it was kept at, the frame.
struct Kept {
    checksum: u128,
    client: u128,
    tick: u64,
    frame: Bytes,
}

/// What a backup keeps of the requests it forwarded.
#[derive(Default)]
pub struct Forwarded {
    /// The frames as sent, by their header's checksum, oldest first.
    kept: VecDeque<Kept>,
    bytes: usize,
    /// Ticks this replica counted (the kept frames' clock).
    ticks: u64,
    /// Prepares rebuilt from kept frames, and elided prepares that missed.
    rebuilt: u64,
    missed: u64,
    /// Elided prepares a primary sent.
    pub(super) elided_sent: u64,
}

impl Forwarded {
    fn keep(&mut self, checksum: u128, client: u128, frame: Bytes) {
        if self.kept.iter().any(|kept| kept.checksum == checksum) {
            // A resend of a frame kept already.
            return;
        }
        self.bytes += frame.len();
        self.kept.push_back(Kept { checksum, client, tick: self.ticks, frame });
        while self.kept.len() > FORWARDED_KEPT_MAX || self.bytes > FORWARDED_KEPT_BYTES_MAX {
            self.drop_oldest();
        }
    }

    fn drop_oldest(&mut self) {
        let evicted = self.kept.pop_front().expect("dropping from a non-empty queue");
        self.bytes -= evicted.frame.len();
    }

    /// A tick: frames kept too long go.
    pub(super) fn tick(&mut self) {
        self.ticks += 1;
        while self.kept.front().is_some_and(|kept| kept.tick + FORWARDED_KEPT_TICKS_MAX < self.ticks) {
            self.drop_oldest();
        }
    }

    fn take_at(&mut self, at: usize) -> Bytes {
        let kept = self.kept.remove(at).expect("in range");
        self.bytes -= kept.frame.len();
        kept.frame
    }

    fn take(&mut self, checksum: u128) -> Option<Bytes> {
        let at = self.kept.iter().position(|kept| kept.checksum == checksum)?;
        Some(self.take_at(at))
    }

    /// The planted bug's lookup: the oldest frame this client had forwarded, whichever request.
    fn take_oldest_of(&mut self, client: u128) -> Option<Bytes> {
        let at = self.kept.iter().position(|kept| kept.client == client)?;
        Some(self.take_at(at))
    }

    /// Drops the frames of the requests a prepare's body holds: they are prepared.
    fn forget(&mut self, body: &[u8]) {
        if self.kept.is_empty() {
            return;
        }
        for request in batched_requests(body) {
            let _ = self.take(request.header.checksum);
        }
    }
}

impl<S: StateMachine> Replica<S> {
    /// Whether a request of this header is kept when forwarded, and elided when prepared.
    fn elidable(&self, request: &Header) -> bool {
        request.size as usize >= self.config.elide_bytes_min
    }

    /// A backup passes a client's request on to its primary, keeping the frame when the primary
    /// will take it for this replica's (its origin is this node).
    pub(super) fn forward_request(&mut self, io: &mut impl Io, mut header: Header, mut frame: Vec<u8>) {
        // The client's request as it sent it (its group field, if it names one, routes it on
        // the primary's node), sealed whole for the network.
        header.seal_for_network(&frame[HEADER_SIZE..]);
        frame[..HEADER_SIZE].copy_from_slice(&header.encode());
        let frame = Bytes::from(frame);
        if self.elidable(&header) && header.origin.is_some_and(|origin| origin.node == self.replica) {
            self.forwarded.keep(header.checksum, header.client, frame.clone());
        }
        io.send_frame(Peer::Replica(self.primary_of(self.view)), OutFrame::new(Vec::new(), vec![frame]));
    }

    /// The backup that forwarded every request of a prepare (`body`), if one did and they are
    /// worth eliding.
    pub(super) fn forwarded_by(&self, body: &[u8]) -> Option<u8> {
        let mut by = None;
        for request in batched_requests(body) {
            let origin = request.header.origin?;
            if !self.elidable(&request.header)
                || origin.node == self.replica
                || origin.node >= self.replica_count()
                || by.is_some_and(|by| by != origin.node)
            {
                return None;
            }
            by = Some(origin.node);
        }
        by
    }

    /// The elided form of a prepare (`header`, `body`) whose first request was prepared at
    /// `cursor_before`.
    pub(super) fn elided_prepare(&self, header: &Header, body: &[u8], cursor_before: u64) -> Message {
        let mut elided = Vec::with_capacity(HEADER_SIZE + CURSOR_SIZE + header.count as usize * HEADER_SIZE);
        elided.extend_from_slice(&header.encode());
        elided.extend_from_slice(&cursor_before.to_le_bytes());
        for request in batched_requests(body) {
            elided.extend_from_slice(&request.header.encode());
        }
        let mut outer = self.header(Command::PrepareElided);
        outer.op = header.op;
        outer.count = header.count;
        Message::new(outer, elided)
    }

    /// A prepare without its requests' bodies, for requests this backup forwarded.
    pub(super) fn on_prepare_elided(&mut self, io: &mut impl Io, message: Message) {
        let body = &message.body;
        let fixed = HEADER_SIZE + CURSOR_SIZE;
        if body.len() < fixed || !(body.len() - fixed).is_multiple_of(HEADER_SIZE) {
            return;
        }
        let Ok(prepare) = Header::decode(&body[..HEADER_SIZE]) else { return };
        if prepare.command != Command::Prepare
            || !prepare.valid_checksum()
            || prepare.replica != message.header.replica
            || prepare.view != message.header.view
            || prepare.count as usize != (body.len() - fixed) / HEADER_SIZE
            || prepare.size as u64 > self.config.prepare_size_max
        {
            return;
        }
        if let Some(held) = self.journal.get_exact(prepare.op, prepare.checksum).and_then(|entry| entry.body.clone()) {
            // Held already (a repair overtook it): acknowledge and commit as a prepare would.
            self.forget_forwarded_of(&message.body[fixed..]);
            self.on_prepare(io, prepare, held);
            return;
        }
        let cursor_before = u64::from_le_bytes(body[HEADER_SIZE..fixed].try_into().expect("8 bytes"));
        match self.rebuild_prepare(&prepare, cursor_before, &body[fixed..]) {
            Some(rebuilt) => {
                self.forwarded.rebuilt += 1;
                self.on_prepare(io, prepare, rebuilt);
            }
            None => {
                self.forwarded.missed += 1;
                // As for any prepare we lack: the primary sends it whole.
                self.forget_forwarded_of(&message.body[fixed..]);
                if prepare.view == self.view && prepare.op > self.op && !self.repair_after_head_requested {
                    self.repair_after_head_requested = true;
                    self.request_prepares_after_head(io);
                }
            }
        }
    }

    fn forget_forwarded_of(&mut self, request_headers: &[u8]) {
        for bytes in request_headers.chunks(HEADER_SIZE) {
            if let Ok(request) = Header::decode(bytes) {
                let _ = self.forwarded.take(request.checksum);
            }
        }
    }

    /// The prepare's body, from the frames this backup kept of its requests, if they give exactly
    /// the body its header vouches for.
    fn rebuild_prepare(&mut self, prepare: &Header, cursor_before: u64, request_headers: &[u8]) -> Option<Bytes> {
        let body_len = (prepare.size as usize).checked_sub(HEADER_SIZE)?;
        let stale = self.config.bug == Some(Bug::ElidedFromStaleKeptCopy);
        let mut requests = Vec::with_capacity(prepare.count as usize);
        for bytes in request_headers.chunks(HEADER_SIZE) {
            let request = Header::decode(bytes).ok()?;
            if request.command != Command::Request {
                return None;
            }
            let kept = if stale {
                self.forwarded.take_oldest_of(request.client)
            } else {
                self.forwarded.take(request.checksum)
            };
            requests.push((request, bytes, kept?));
        }
        let mut cursor = cursor_before;
        let single = requests.len() == 1;
        let mut body = Vec::new();
        let mut rebuilt = None;
        for (request, header_bytes, kept) in requests {
            if !stale && kept.len() != request.size as usize {
                return None;
            }
            let mut unstamped = request;
            unstamped.batch_at = 0;
            if single {
                // The usual prepare, of one request: its frame is the body, stamped in place
                // (the link is done with it by now, so it is ours alone: no copy).
                let mut frame = kept.try_into_mut().unwrap_or_else(|shared| shared[..].into());
                frame[..HEADER_SIZE].copy_from_slice(header_bytes);
                let prepared =
                    self.state_machine.prepare(cursor, prepare.timestamp, &unstamped, &mut frame[HEADER_SIZE..]);
                if !stale && prepared.batch_at.unwrap_or(0) != request.batch_at {
                    return None;
                }
                cursor = prepared.cursor;
                rebuilt = Some(frame.freeze());
            } else {
                let at = body.len() + HEADER_SIZE;
                body.extend_from_slice(header_bytes);
                body.extend_from_slice(&kept[HEADER_SIZE.min(kept.len())..]);
                let prepared = self.state_machine.prepare(cursor, prepare.timestamp, &unstamped, &mut body[at..]);
                if !stale && prepared.batch_at.unwrap_or(0) != request.batch_at {
                    return None;
                }
                cursor = prepared.cursor;
            }
        }
        let rebuilt = rebuilt.unwrap_or_else(|| Bytes::from(body));
        if stale {
            return Some(rebuilt);
        }
        // The batches' checksums are the ones this replica's stamping wrote over its own bytes:
        // the checksum over them and the rest is the whole check (no second pass over the
        // payloads, as `prepare_body::valid` would make).
        if cursor != prepare.cursor
            || rebuilt.len() != body_len
            || crate::prepare_body::checksum(&rebuilt) != prepare.checksum_body
        {
            return None;
        }
        Some(rebuilt)
    }

    /// Drops kept frames whose requests a prepare (whole) holds.
    pub(super) fn forget_forwarded(&mut self, body: &[u8]) {
        if self.config.bug == Some(Bug::ElidedFromStaleKeptCopy) {
            return;
        }
        self.forwarded.forget(body);
    }

    /// How many prepares were rebuilt from kept frames, and how many elided prepares missed.
    pub fn forwarded_figures(&self) -> (u64, u64, u64) {
        (self.forwarded.elided_sent, self.forwarded.rebuilt, self.forwarded.missed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(len: usize, fill: u8) -> Bytes {
        Bytes::from(vec![fill; len])
    }

    #[test]
    fn kept_frames_are_bounded_by_count_bytes_and_age_oldest_first() {
        let mut forwarded = Forwarded::default();
        for checksum in 0..FORWARDED_KEPT_MAX as u128 + 3 {
            forwarded.keep(checksum, 1, frame(16, 0));
        }
        assert_eq!(forwarded.kept.len(), FORWARDED_KEPT_MAX);
        assert!(forwarded.take(0).is_none(), "the oldest went first");
        assert!(forwarded.take(FORWARDED_KEPT_MAX as u128 + 2).is_some(), "the newest is kept");

        let mut forwarded = Forwarded::default();
        let big = FORWARDED_KEPT_BYTES_MAX / 3;
        for checksum in 0..4 {
            forwarded.keep(checksum, 1, frame(big, 0));
        }
        assert_eq!((forwarded.kept.len(), forwarded.bytes), (3, 3 * big));

        let mut forwarded = Forwarded::default();
        forwarded.keep(7, 1, frame(16, 0));
        forwarded.keep(7, 1, frame(16, 0));
        assert_eq!(forwarded.kept.len(), 1, "a resend is kept once");
        for _ in 0..FORWARDED_KEPT_TICKS_MAX {
            forwarded.tick();
        }
        forwarded.keep(8, 1, frame(16, 0));
        forwarded.tick();
        assert!(forwarded.take(7).is_none(), "past its age");
        assert!(forwarded.take(8).is_some());
        assert_eq!(forwarded.bytes, 0);
    }
}
