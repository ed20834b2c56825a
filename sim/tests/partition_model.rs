//! Model-based test of the partition log: random appends, reads, flushes, syncs, seals, retention
//! and crashes at random points, on the simulated disk, against an in-memory model. After every
//! crash everything synced is there, nothing half-written is served, and offsets stay dense.

use proptest::prelude::*;
use vireo_sim::local::{no_faults, LocalWorld};
use vireo_sim::partition_harness::PartitionHarness;
use vireo_storage::partition::{PartitionConfig, ReadStart, TruncateError};

#[derive(Clone, Debug)]
enum Action {
    Append {
        count: u32,
        len: usize,
    },
    Flush,
    Sync,
    Step(usize),
    Read {
        at: u16,
        count: u32,
    },
    ReadTimestamp {
        at: u16,
    },
    Retention,
    Crash,
    /// Cut at the base of the `back`-th newest batch still held (a view change's truncation).
    Truncate {
        back: usize,
    },
}

fn action() -> impl Strategy<Value = Action> {
    prop_oneof![
        6 => (1u32..30, 0usize..300).prop_map(|(count, len)| Action::Append { count, len }),
        1 => Just(Action::Flush),
        2 => Just(Action::Sync),
        3 => (1usize..20).prop_map(Action::Step),
        2 => (any::<u16>(), 1u32..100).prop_map(|(at, count)| Action::Read { at, count }),
        1 => any::<u16>().prop_map(|at| Action::ReadTimestamp { at }),
        1 => Just(Action::Retention),
        1 => Just(Action::Crash),
        1 => (0usize..6).prop_map(|back| Action::Truncate { back }),
    ]
}

fn config(segment_size: u64, flush_messages: u64, max_size: Option<u64>) -> PartitionConfig {
    PartitionConfig {
        partition_id: 3,
        segment_size,
        flush_messages,
        flush_bytes: 16 * 1024,
        index_interval_bytes: 1024,
        max_size,
        unwritten_bytes_max: 256 * 1024,
        read_bytes_max: 64 * 1024,
        scan_chunk_bytes: 8 * 1024,
        ..PartitionConfig::default()
    }
}

/// `owned`: the log's superblock is the harness's, which reopens it with what it knows (durable
/// to where the log said, retained from its first offset), as a partition group does.
fn run(seed: u64, config: PartitionConfig, actions: Vec<Action>, owned: bool) {
    let world = LocalWorld::new(seed, no_faults(), false);
    let mut harness =
        if owned { PartitionHarness::new_owned(world, config) } else { PartitionHarness::new(world, config) };
    for action in actions {
        match action {
            Action::Append { count, len } => {
                harness.append(count, len);
            }
            Action::Flush => harness.log.flush(&mut harness.world),
            Action::Sync => harness.log.sync(&mut harness.world),
            Action::Step(steps) => {
                for _ in 0..steps {
                    harness.step();
                }
            }
            Action::Read { at, count } => {
                let (first, end) = (harness.log.first_offset(), harness.log.end_offset());
                let offset = first + (at as u64 * (end - first + 1)) / (u16::MAX as u64 + 1);
                let read = harness.read(ReadStart::Offset(offset), count, 1 << 20).expect("read");
                let offsets = harness.check_batches(&read);
                if offset < end {
                    assert!(offsets.contains(&offset), "a read of {offset} (log {first}..{end}) missed it");
                } else {
                    assert!(offsets.is_empty());
                }
            }
            Action::ReadTimestamp { at } => {
                let timestamp = at as u64 * 10;
                let read = harness.read(ReadStart::Timestamp(timestamp), 10, 1 << 20).expect("read");
                harness.check_batches(&read);
            }
            Action::Retention => harness.retention(u64::MAX / 2),
            Action::Crash => {
                harness.crash_and_reopen();
                harness.check_all();
            }
            Action::Truncate { back } => {
                let first = harness.log.first_offset();
                let held: Vec<u64> = harness.batch_bases.iter().copied().filter(|base| *base >= first).collect();
                if let Some(&from) = held.iter().rev().nth(back) {
                    // After a reopen the log remembers only the batches recovery read: a deeper
                    // cut is refused, and changes nothing.
                    match harness.truncate(from) {
                        Ok(()) | Err(TruncateError::TooDeep { .. }) => {}
                        Err(error) => panic!("cut at {from} refused: {error}"),
                    }
                    harness.check_all();
                }
            }
        }
        harness.world.advance(50_000);
    }
    harness.settle();
    harness.check_all();
    harness.log.sync(&mut harness.world);
    harness.settle();
    assert_eq!(harness.durable, harness.log.end_offset(), "a sync with nothing else going on covers everything");
    let report = harness.crash_and_reopen();
    assert_eq!(report.truncated_from, None, "a synced log has no torn tail: {report:?}");
    harness.check_all();
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn partition_log_matches_its_model_across_crashes(
        seed in any::<u64>(),
        segment_size in prop::sample::select(vec![4096u64, 16 * 1024, 1 << 20]),
        flush_messages in prop::sample::select(vec![1u64, 16, 1024]),
        actions in prop::collection::vec(action(), 1..80),
    ) {
        run(seed, config(segment_size, flush_messages, None), actions, false);
    }

    #[test]
    fn retention_by_size_keeps_the_newest_messages(
        seed in any::<u64>(),
        actions in prop::collection::vec(action(), 1..80),
    ) {
        run(seed, config(4096, 16, Some(12 * 1024)), actions, false);
    }

    #[test]
    fn an_owned_log_matches_its_model_across_crashes(
        seed in any::<u64>(),
        segment_size in prop::sample::select(vec![4096u64, 16 * 1024]),
        max_size in prop::sample::select(vec![None, Some(12 * 1024u64)]),
        actions in prop::collection::vec(action(), 1..80),
    ) {
        run(seed, config(segment_size, 16, max_size), actions, true);
    }
}
