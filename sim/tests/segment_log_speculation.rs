//! A partition group's segment log appending its prepares' batches as they arrive, before they
//! commit: a tail that the group's log no longer holds (a view change replaced it, the journal's
//! head went back) is cut, and what commits is checked against the machine's directory before
//! the log reports it durable.

use vireo_io::{Bytes, Io, Namespace, Peer};
use vireo_node::partition::request::{PartitionRequest, Retention, OPERATION_SEND_MESSAGES};
use vireo_node::partition::segment_log::{Prepares, SegmentLog};
use vireo_node::partition::PartitionMachine;
use vireo_protocol::config::Bug;
use vireo_protocol::header::{Command, Header, Message};
use vireo_protocol::StateMachine;
use vireo_sim::local::{no_faults, LocalWorld};
use vireo_storage::batch::BatchBuilder;
use vireo_storage::partition::{ReadError, ReadRequest, ReadStart};

const CLUSTER: u128 = 7;

struct Node {
    world: LocalWorld,
}

impl Io for Node {
    vireo_io::forward_asks_but_send!(world);

    fn send(&mut self, _to: Peer, _message: Vec<u8>) {}
}

/// One send request of `ids`, stamped by a primary at `cursor`: the prepare's header and body.
fn prepare(machine: &PartitionMachine, op: u64, cursor: u64, ids: std::ops::Range<u128>) -> (Header, Bytes) {
    let mut builder = BatchBuilder::new();
    for id in ids {
        builder.push(id, &id.to_le_bytes(), b"");
    }
    let send = PartitionRequest::Send { partition: 0, retention: Retention::default(), batch: builder.finish(0) };
    let mut request = Header::new(Command::Request, CLUSTER, 0);
    request.operation = OPERATION_SEND_MESSAGES;
    let mut body = send.encode();
    let timestamp = op * 1_000_000;
    let prepared = machine.prepare(cursor, timestamp, &request, &mut body);
    // As the primary writes it: the batch it stamped vouches for itself in the prepare's checksum.
    request.batch_at = prepared.batch_at.unwrap_or(0);
    let mut header = Header::new(Command::Prepare, CLUSTER, 0);
    header.op = op;
    header.timestamp = timestamp;
    header.cursor = prepared.cursor;
    header.count = 1;
    let message = Message::new(header, Message::new(request, body).encode());
    (message.header, message.body.into())
}

/// A journal as a replica's, reduced to what the segment log reads of it.
struct Journal {
    machine: PartitionMachine,
    commit_min: u64,
    /// The prepare of op `index + 1`.
    prepares: Vec<(Header, Bytes)>,
}

impl Journal {
    fn cursor(&self) -> u64 {
        self.prepares.last().map_or(self.machine.next_offset(), |(header, _)| header.cursor)
    }

    /// A primary prepares a send of `ids` after the journal's head.
    fn push(&mut self, ids: std::ops::Range<u128>) {
        let op = self.prepares.len() as u64 + 1;
        let prepared = prepare(&self.machine, op, self.cursor(), ids);
        self.prepares.push(prepared);
    }

    /// A view change keeps the ops below `op` and drops the rest.
    fn truncate(&mut self, op: u64) {
        assert!(op > self.commit_min);
        self.prepares.truncate(op as usize - 1);
    }

    /// Applies every op through `op`.
    fn commit(&mut self, op: u64) {
        for (header, body) in &self.prepares[self.commit_min as usize..op as usize] {
            let request = Header::decode(body).unwrap();
            let reply = self.machine.apply(header.op, header.timestamp, &request, 0, &body.slice(256..));
            assert_eq!(reply[..4], [0; 4], "stored");
        }
        self.commit_min = op;
    }
}

impl Prepares for Journal {
    fn machine(&self) -> &PartitionMachine {
        &self.machine
    }

    fn commit_min(&self) -> u64 {
        self.commit_min
    }

    fn head_op(&self) -> u64 {
        self.prepares.len() as u64
    }

    fn prepare(&self, op: u64) -> Option<(&Header, Option<&Bytes>)> {
        let (header, body) = self.prepares.get(op.checked_sub(1)? as usize)?;
        Some((header, Some(body)))
    }
}

/// Runs the disk until nothing is in flight, the log following the machine and the journal.
fn settle(node: &mut Node, log: &mut SegmentLog, journal: &mut Journal) {
    for _ in 0..1_000 {
        while let Some(completion) = node.world.step() {
            log.on_completion(node, completion);
        }
        log.follow(node, &mut journal.machine, true, Default::default());
        log.speculate(node, journal);
        if node.world.in_flight() == 0 {
            return;
        }
    }
    panic!("the log's I/O never settled");
}

/// (base offset, batch checksum) of every batch the log holds from `from`, as it remembers them.
fn held(log: &SegmentLog, from: u64) -> Vec<(u64, u64)> {
    let log = log.log().expect("open");
    let mut batches = Vec::new();
    let mut at = from;
    while let Some(batch) = log.remembered(at) {
        batches.push((batch.base_offset, batch.checksum));
        at = batch.end_offset;
    }
    assert_eq!(at, log.end_offset(), "the log remembers every batch from {from}");
    batches
}

/// What the machine's directory names from `from`.
fn directory(machine: &PartitionMachine, from: u64) -> Vec<(u64, u64)> {
    let mut batches = Vec::new();
    let mut at = from;
    while let Some(entry) = machine.batch_at(at) {
        batches.push((entry.base_offset, entry.checksum));
        at = entry.end_offset();
    }
    batches
}

fn open(bug: Option<Bug>) -> (Node, SegmentLog, Journal) {
    let mut node = Node { world: LocalWorld::new(5, no_faults(), false) };
    let mut log = SegmentLog::new(Namespace::partition(1, 1, 0), 0, bug, CLUSTER, 0, 3);
    let mut journal = Journal { machine: PartitionMachine::empty(), commit_min: 0, prepares: Vec::new() };
    settle(&mut node, &mut log, &mut journal);
    assert!(log.log().is_some(), "opened");
    (node, log, journal)
}

#[test]
fn prepared_batches_go_in_before_they_commit_and_a_replaced_tail_is_cut() {
    let (mut node, mut log, mut journal) = open(None);
    for send in 0..3u128 {
        journal.push(send * 10..send * 10 + 4);
    }
    settle(&mut node, &mut log, &mut journal);
    // Written at their final places before any commit; nothing is durable for the group yet.
    assert_eq!(log.log().unwrap().end_offset(), 12);
    assert_eq!(log.counters.batches_speculated, 3);
    assert_eq!(log.durable_cursor(), 0, "nothing committed");
    // Nothing is served from a tail that has not committed.
    assert_eq!(log.readable_to(), 0);
    let read = ReadRequest { id: 1, start: ReadStart::Offset(0), count: 4, bytes_max: 1 << 20 };
    assert_eq!(log.read(&mut node, read), Err(ReadError::Busy));

    // A view change keeps op 1 and replaces ops 2 and 3 with one other send.
    journal.truncate(2);
    journal.push(30..33);
    settle(&mut node, &mut log, &mut journal);
    assert_eq!(log.counters.cuts, 1);
    assert_eq!(log.log().unwrap().end_offset(), 7);
    assert_eq!(log.counters.batches_speculated, 4);

    // The journal's head goes back past what the log holds: cut again.
    journal.truncate(2);
    settle(&mut node, &mut log, &mut journal);
    assert_eq!((log.counters.cuts, log.log().unwrap().end_offset()), (2, 4));

    journal.push(40..45);
    settle(&mut node, &mut log, &mut journal);
    journal.commit(2);
    settle(&mut node, &mut log, &mut journal);
    assert_eq!(held(&log, 0), directory(&journal.machine, 0), "the log holds what committed");
    assert_eq!(log.durable_cursor(), 9);
    assert_eq!(log.readable_to(), 9, "what committed is served; op 3's batch is not, yet");
    // Every batch went in once, from its prepare; the commit only checked it.
    assert_eq!((log.counters.batches_appended, log.counters.batches_speculated), (5, 5));
}

/// The check at commit, and the planted bug that skips it: the machine applies other batches
/// than the log took from the prepares (the log never saw the view change that replaced them).
#[test]
fn what_commits_is_checked_against_the_directory_and_the_unchecked_tail_is_caught() {
    for bug in [None, Some(Bug::SegmentLogTrustsItsTail)] {
        let (mut node, mut log, mut journal) = open(bug);
        for send in 0..3u128 {
            journal.push(send * 10..send * 10 + 4);
        }
        settle(&mut node, &mut log, &mut journal);
        assert_eq!(log.log().unwrap().end_offset(), 12);
        journal.truncate(2);
        journal.push(50..54);
        journal.push(60..64);
        journal.commit(3);
        settle(&mut node, &mut log, &mut journal);
        let same = held(&log, 0) == directory(&journal.machine, 0);
        match bug {
            None => {
                assert!(same, "the replaced batches were cut and the applied ones appended");
                assert_eq!(log.counters.cuts, 1);
                assert_eq!(log.durable_cursor(), 12);
            }
            Some(_) => assert!(!same, "the planted bug leaves the replaced batches in the files"),
        }
    }
}
