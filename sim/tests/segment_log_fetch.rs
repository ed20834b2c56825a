//! A partition group's segment log fetching what its machine holds and it lacks from a peer's
//! log: the answer is appended only where it matches the machine's directory, batch by batch.

use vireo_io::{Io, Namespace, Peer};
use vireo_node::partition::request::{PartitionRequest, Retention, OPERATION_SEND_MESSAGES};
use vireo_node::partition::segment_log::SegmentLog;
use vireo_node::partition::PartitionMachine;
use vireo_protocol::header::{group_of, Command, Header, Message};
use vireo_protocol::StateMachine;
use vireo_sim::local::{no_faults, LocalWorld};
use vireo_storage::batch::BatchBuilder;

const CLUSTER: u128 = 7;

/// The local disk, and the frames the log sends its peers (kept to be looked at).
struct Node {
    world: LocalWorld,
    sent: Vec<(Peer, Header)>,
}

impl Io for Node {
    vireo_io::forward_asks_but_send!(world);

    fn send(&mut self, to: Peer, message: Vec<u8>) {
        self.sent.push((to, Message::decode(&message, true).expect("a sealed frame").header));
    }
}

/// The stamped batch of a send of `ids` at op `op`, applied to `machine` as a replica applies it.
fn send(machine: &mut PartitionMachine, op: u64, ids: std::ops::Range<u128>) -> Vec<u8> {
    let mut builder = BatchBuilder::new();
    for id in ids {
        builder.push(id, &id.to_le_bytes(), b"");
    }
    let request = PartitionRequest::Send { partition: 0, retention: Retention::default(), batch: builder.finish(0) };
    let mut header = Header::new(Command::Request, 1, 0);
    header.operation = OPERATION_SEND_MESSAGES;
    let mut body = request.encode();
    let timestamp = op * 1_000_000;
    machine.prepare(machine.prepare_cursor(), timestamp, &header, &mut body);
    let reply = machine.apply(op, timestamp, &header, 0, &body.into());
    assert_eq!(reply[..4], [0; 4], "stored");
    let (_, batch) = machine.take_applied().expect("applied");
    batch.to_vec()
}

/// Runs the disk until nothing is in flight, then lets the log follow the machine once more.
fn settle(node: &mut Node, log: &mut SegmentLog, machine: &mut PartitionMachine) {
    for _ in 0..1_000 {
        while let Some(completion) = node.world.step() {
            log.on_completion(node, completion);
        }
        log.follow(node, machine, true, Default::default());
        if node.world.in_flight() == 0 {
            return;
        }
    }
    panic!("the log's I/O never settled");
}

fn answer(from: u8, first_offset: u64, batches: &[Vec<u8>]) -> Message {
    let mut header = Header::new(Command::Batches, CLUSTER, from);
    header.group = group_of(Namespace::partition(1, 1, 0));
    header.op = first_offset;
    Message::new(header, batches.concat())
}

/// A log whose machine took its batches from elsewhere (a state transfer: nothing was applied
/// here) asks a peer for them; an answer that does not match the directory (another batch,
/// stamped for the same offsets, with checksums of its own) is refused and the next peer asked;
/// the right batches are appended, synced, and reported durable.
#[test]
fn a_fetched_batch_goes_in_only_if_the_directory_names_it() {
    let namespace = Namespace::partition(1, 1, 0);
    let mut world = Node { world: LocalWorld::new(3, no_faults(), false), sent: Vec::new() };
    let mut machine = PartitionMachine::empty();
    let held: Vec<Vec<u8>> =
        (0..3).map(|op| send(&mut machine, op + 1, op as u128 * 10..op as u128 * 10 + 4)).collect();
    let mut log = SegmentLog::new(namespace, 0, None, CLUSTER, 0, 3);
    settle(&mut world, &mut log, &mut machine);
    assert_eq!(log.log().expect("open").end_offset(), 0);
    assert_eq!(log.counters.fetches_sent, 1, "the hole is asked for");
    let (to, asked) = world.sent.last().copied().expect("a fetch");
    assert_eq!((to, asked.command, asked.op, asked.commit), (Peer::Replica(1), Command::RequestBatches, 0, 12));

    // Another batch at offset 0: valid on its own, not the one the directory names.
    let mut other = PartitionMachine::empty();
    let forged = send(&mut other, 1, 100..104);
    log.on_batches(&mut world, &machine, &answer(1, 0, &[forged]));
    settle(&mut world, &mut log, &mut machine);
    assert_eq!(log.counters.fetch_answers_refused, 1);
    assert_eq!(log.log().expect("open").end_offset(), 0, "nothing the directory does not name");
    assert_eq!(log.counters.fetches_sent, 1, "the next peer is asked at the next tick, not at once");
    log.tick();
    settle(&mut world, &mut log, &mut machine);
    assert_eq!(log.counters.fetches_sent, 2, "the next peer is asked");
    assert_eq!(world.sent.last().map(|(to, _)| *to), Some(Peer::Replica(2)));

    // An answer from a peer not asked is ignored; the asked one's right batches go in.
    log.on_batches(&mut world, &machine, &answer(1, 0, &held));
    assert_eq!(log.log().expect("open").end_offset(), 0, "peer 1 was not asked this time");
    log.on_batches(&mut world, &machine, &answer(2, 0, &held));
    settle(&mut world, &mut log, &mut machine);
    let opened = log.log().expect("open");
    assert_eq!((opened.first_offset(), opened.end_offset()), (0, machine.next_offset()));
    assert_eq!(log.durable_cursor(), machine.next_offset(), "synced and reported durable");
    assert_eq!(log.counters.batches_fetched, 3);
}

/// Damage that recovery keeps inside the log (below the durable point the group claims) is
/// written again in place, with a peer's batches that the machine's directory names there: the
/// log is not dropped, and nothing else in it is touched. A forged answer is refused.
#[test]
fn a_damaged_batch_is_repaired_in_place_from_a_peer() {
    use vireo_io::{FileId, FileKind};
    use vireo_protocol::replica::LogMark;
    let namespace = Namespace::partition(1, 1, 0);
    let mut world = Node { world: LocalWorld::new(4, no_faults(), false), sent: Vec::new() };
    let mut machine = PartitionMachine::empty();
    let mut log = SegmentLog::new(namespace, 0, None, CLUSTER, 0, 3);
    settle(&mut world, &mut log, &mut machine);
    let held: Vec<Vec<u8>> =
        (0..3).map(|op| send(&mut machine, op + 1, op as u128 * 10..op as u128 * 10 + 4)).collect();
    // The log fetches them from a peer (as after a state transfer).
    settle(&mut world, &mut log, &mut machine);
    let (to, _) = world.sent.last().copied().expect("a fetch");
    let Peer::Replica(peer) = to else { panic!("asked of a replica") };
    log.on_batches(&mut world, &machine, &answer(peer, 0, &held));
    settle(&mut world, &mut log, &mut machine);
    assert_eq!(log.durable_cursor(), 12);

    // A bit flips in the second batch, on the platter; the node restarts.
    let file = FileId::new(namespace, FileKind::Segment(0));
    world.world.disk.flip_durable_bit(file, held[0].len() as u64 + 100);
    world.world.crash();
    let mut log = SegmentLog::new(namespace, 0, None, CLUSTER, 0, 3);
    let mark = LogMark { cursor: 12, retained_from: 0 };
    for _ in 0..100 {
        while let Some(completion) = world.world.step() {
            log.on_completion(&mut world, completion);
        }
        log.follow(&mut world, &mut machine, true, mark);
    }
    assert_eq!(log.opened.as_ref().map(|report| report.damaged.clone()), Some(vec![(4, 8)]));
    let (to, asked) = world.sent.last().copied().expect("the run is asked for");
    assert_eq!((asked.command, asked.op, asked.commit), (Command::RequestBatches, 4, 8));
    let Peer::Replica(peer) = to else { panic!("asked of a replica") };

    let mut other = PartitionMachine::empty();
    send(&mut other, 1, 100..104);
    let forged = send(&mut other, 2, 100..104);
    log.on_batches(&mut world, &machine, &answer(peer, 4, &[forged]));
    assert_eq!((log.counters.runs_repaired, log.counters.fetch_answers_refused), (0, 1));
    log.tick();
    log.tick();
    for _ in 0..100 {
        while let Some(completion) = world.world.step() {
            log.on_completion(&mut world, completion);
        }
        log.follow(&mut world, &mut machine, true, mark);
    }
    let (to, asked) = world.sent.last().copied().expect("asked again");
    assert_eq!((asked.op, asked.commit), (4, 8));
    let Peer::Replica(peer) = to else { panic!("asked of a replica") };
    log.on_batches(&mut world, &machine, &answer(peer, 4, &held[1..2]));
    settle(&mut world, &mut log, &mut machine);
    assert_eq!(log.counters.runs_repaired, 1);
    assert_eq!(log.counters.logs_dropped, 0, "the log is kept");
    assert!(log.log().expect("open").damaged_runs().is_empty());
    assert_eq!(log.log().unwrap().end_offset(), 12);
}
