//! A partition's files through its life on the simulated disk: the data-directory listing at each
//! step, damage found on read or at open, a missing or bad index rebuilt, a full disk.

use vireo_io::{FileId, FileKind};
use vireo_sim::local::{no_faults, LocalWorld};
use vireo_sim::partition_harness::{PartitionHarness, NAMESPACE};
use vireo_storage::offsets::{Consumer, ConsumerOffsets, OffsetsEvent};
use vireo_storage::partition::{OwnerClaim, PartitionConfig, ReadError, ReadStart};

fn config() -> PartitionConfig {
    PartitionConfig { segment_size: 8192, index_interval_bytes: 1024, ..PartitionConfig::default() }
}

/// `path size` per file, sorted by path as `ls -R` would show them.
fn listing(harness: &PartitionHarness) -> String {
    let mut lines: Vec<String> =
        harness.world.disk.listing().into_iter().map(|(file, size)| format!("{} {size}", file.path())).collect();
    lines.sort();
    lines.join("\n")
}

fn sync_and_settle(harness: &mut PartitionHarness) {
    harness.log.sync(&mut harness.world);
    harness.settle();
    assert_eq!(harness.durable, harness.log.end_offset());
}

#[test]
fn data_directory_through_a_partition_lifecycle() {
    let mut harness = PartitionHarness::new(LocalWorld::new(1, no_faults(), false), config());
    harness.settle();
    let fresh = listing(&harness);
    for _ in 0..12 {
        harness.append(10, 100);
    }
    sync_and_settle(&mut harness);
    let sealed = listing(&harness);
    let mut offsets = ConsumerOffsets::load(&mut harness.world, NAMESPACE, 9, 16);
    while let Some(completion) = harness.world.step() {
        offsets.on_completion(&mut harness.world, completion);
    }
    offsets.store(&mut harness.world, Consumer::Consumer(1), 42).unwrap();
    offsets.store(&mut harness.world, Consumer::Group(2), 17).unwrap();
    while let Some(completion) = harness.world.step() {
        offsets.on_completion(&mut harness.world, completion);
    }
    let report = harness.crash_and_reopen();
    assert_eq!(report.truncated_from, None);
    harness.check_all();
    let restarted = listing(&harness);
    assert!(harness.log.purge(&mut harness.world));
    harness.settle();
    let purged = listing(&harness);
    assert_eq!(harness.log.first_offset(), 120);
    assert_eq!(harness.log.end_offset(), 120);
    let report = harness.crash_and_reopen();
    assert_eq!((report.first_offset, report.end_offset, report.segments), (120, 120, 1));
    insta::assert_snapshot!(format!(
        "fresh:\n{fresh}\n\nsealed (12 batches of 10 x 100 B, 8 KiB segments):\n{sealed}\n\n\
         restarted (with two consumer offsets):\n{restarted}\n\npurged:\n{purged}"
    ));
}

/// A partition with several sealed, synced segments and an active one.
fn sealed_partition(seed: u64) -> PartitionHarness {
    let mut harness = PartitionHarness::new(LocalWorld::new(seed, no_faults(), false), config());
    for _ in 0..20 {
        harness.append(10, 100);
    }
    sync_and_settle(&mut harness);
    assert!(harness.log.segment_count() >= 3);
    harness
}

/// The (start, end) offsets of the second segment.
fn second_segment(harness: &PartitionHarness) -> (u64, u64) {
    let (start, end, ..) = harness.log.segments().nth(1).unwrap();
    (start, end)
}

#[test]
fn a_damaged_batch_below_the_frontier_is_reported_and_never_served() {
    let mut harness = sealed_partition(2);
    let (start, end) = second_segment(&harness);
    // Damage a payload byte well inside the segment: a batch past the first.
    let file = FileId::new(NAMESPACE, FileKind::Segment(start));
    harness.world.disk.flip_durable_bit(file, 2000);
    harness.crash_and_reopen();
    // Below the frontier the index is trusted: the damage shows on the read that reaches it.
    let damaged = (start..end)
        .find(|&offset| matches!(harness.read(ReadStart::Offset(offset), 1, 1 << 20), Err(ReadError::Corrupt { .. })))
        .expect("the damaged batch is reported");
    match harness.read(ReadStart::Offset(damaged), 100, 1 << 20) {
        Err(ReadError::Corrupt { offset }) => assert!(offset <= damaged + 10),
        other => panic!("served a damaged batch: {other:?}"),
    }
    // Everything before it is served, checked against what was appended.
    let read = harness.read(ReadStart::Offset(0), (damaged - 1) as u32, 1 << 20).unwrap();
    harness.check_batches(&read);
}

#[test]
fn damage_in_the_active_segment_below_the_durable_point_keeps_every_batch_after_it() {
    let mut harness = PartitionHarness::new(LocalWorld::new(3, no_faults(), false), config());
    for _ in 0..4 {
        harness.append(10, 100);
    }
    sync_and_settle(&mut harness);
    assert_eq!(harness.log.segment_count(), 1);
    harness.world.disk.flip_durable_bit(FileId::new(NAMESPACE, FileKind::Segment(0)), 2500);
    let report = harness.crash_and_reopen();
    // Batches are 1756 bytes (256 + 10 x (48 + 100 + 2)): byte 2500 is in the second, offsets
    // 10..20. It was synced, so it is damage, not a torn tail: the two batches after it stay.
    assert_eq!(report.damaged, vec![(10, 20)], "{report:?}");
    assert_eq!((report.damaged_bytes, report.truncated_from, report.end_offset), (1756, None, 40));
    assert!(report.corrupt);
    assert_eq!(harness.check_all(), 30);
    // A read from inside the damage starts after it; appends go on after the last batch.
    let read = harness.read(ReadStart::Offset(12), 5, 1 << 20).unwrap();
    assert_eq!(read.start_offset, 20);
    assert_eq!(harness.append(10, 100), 40);
    sync_and_settle(&mut harness);
    let report = harness.crash_and_reopen();
    assert_eq!(report.damaged, vec![(10, 20)], "the damage is found again: {report:?}");
    assert_eq!(harness.check_all(), 40);
}

/// (segment start, position, base offset, end offset) of every batch of the log, from its files.
fn batch_map(harness: &PartitionHarness) -> Vec<(u64, u64, u64, u64)> {
    let mut batches = Vec::new();
    for (start, _, size, _) in harness.log.segments().collect::<Vec<_>>() {
        let bytes = harness.world.disk.durable_bytes(FileId::new(NAMESPACE, FileKind::Segment(start)));
        assert_eq!(bytes.len() as u64, size);
        let mut at = 0;
        while at < bytes.len() {
            let header = vireo_storage::batch::validate(&bytes[at..]).expect("a valid batch");
            batches.push((start, at as u64, header.base_offset, header.end_offset()));
            at += header.batch_length as usize;
        }
    }
    batches
}

/// A damaged run kept inside the log is written again in place with the batches a peer holds
/// there (every replica stores the same stamped bytes): reads serve it again, a crash keeps it
/// whole, and batches that do not fill the run exactly are refused.
#[test]
fn a_damaged_run_is_repaired_in_place_from_a_peers_batches() {
    use vireo_storage::partition::RepairError;
    for seed in 0..16 {
        let mut harness = PartitionHarness::new(LocalWorld::new(seed, no_faults(), false), config());
        for _ in 0..4 {
            harness.append(10, 100);
        }
        sync_and_settle(&mut harness);
        let file = FileId::new(NAMESPACE, FileKind::Segment(0));
        // The second batch, offsets 10..20, bytes 1756..3512 (as in the test above): a peer's copy.
        let peer_copy = harness.world.disk.durable_bytes(file)[1756..3512].to_vec();
        harness.world.disk.flip_durable_bit(file, 2500);
        let report = harness.crash_and_reopen();
        assert_eq!(report.damaged, vec![(10, 20)], "{report:?}");
        assert_eq!(harness.log.damaged_runs().len(), 1);
        let world = &mut harness.world;
        assert_eq!(harness.log.repair(world, 11, peer_copy.clone()), Err(RepairError::NoDamageAt { offset: 11 }));
        assert!(matches!(harness.log.repair(world, 10, peer_copy[..1000].to_vec()), Err(RepairError::Mismatch { .. })));
        let mut forged = peer_copy.clone();
        forged[600] ^= 1;
        assert!(matches!(harness.log.repair(world, 10, forged), Err(RepairError::Mismatch { .. })));
        harness.log.repair(world, 10, peer_copy).unwrap();
        sync_and_settle(&mut harness);
        assert!(harness.log.damaged_runs().is_empty());
        assert_eq!(harness.log.repaired(), 1);
        harness.lost.clear();
        assert_eq!(harness.check_all(), 40, "every message is served again");
        let report = harness.crash_and_reopen();
        assert!(report.damaged.is_empty() && !report.corrupt, "seed {seed}: the repair is durable: {report:?}");
        assert_eq!(harness.check_all(), 40);
    }
}

#[test]
fn one_flipped_bit_anywhere_below_the_durable_point_loses_only_the_batch_it_hits() {
    let verified = PartitionConfig { verify_on_open: true, ..config() };
    for seed in 0..100u64 {
        let mut harness = PartitionHarness::new(LocalWorld::new(100 + seed, no_faults(), false), verified.clone());
        for round in 0..40u64 {
            harness.append(1 + ((seed + round * 7) % 9) as u32, ((seed * 13 + round * 29) % 300) as usize);
        }
        sync_and_settle(&mut harness);
        assert!(harness.log.segment_count() >= 5, "seed {seed}: a many-segment log");
        let end = harness.log.end_offset();
        let batches = batch_map(&harness);
        let total: u64 = harness.log.segments().map(|(_, _, size, _)| size).sum();
        // A byte chosen uniformly over the whole log.
        let mut pick = harness.world.rng.below(total);
        let (segment, position) = harness
            .log
            .segments()
            .find_map(|(start, _, size, _)| {
                if pick < size {
                    Some((start, pick))
                } else {
                    pick -= size;
                    None
                }
            })
            .unwrap();
        let &(_, at, base, batch_end) =
            batches.iter().rev().find(|&&(start, at, ..)| start == segment && at <= position).unwrap();
        harness.world.disk.flip_durable_bit(FileId::new(NAMESPACE, FileKind::Segment(segment)), position);
        let report = harness.crash_and_reopen();
        assert!(report.corrupt, "seed {seed}: damage at {segment}:{position} (batch at {at}) not reported: {report:?}");
        if batch_end == end {
            // The very last batch: nothing after it to keep, it is cut.
            assert_eq!((report.truncated_from, report.end_offset), (Some(base), base), "seed {seed}: {report:?}");
            assert!(report.damaged.is_empty());
        } else {
            assert_eq!(report.damaged, vec![(base, batch_end)], "seed {seed}: {report:?}");
            assert_eq!((report.truncated_from, report.end_offset), (None, end), "seed {seed}: {report:?}");
        }
        assert_eq!(
            harness.check_all(),
            base + end.min(harness.log.end_offset()) - batch_end.min(harness.log.end_offset()),
            "seed {seed}"
        );
    }
}

#[test]
fn a_missing_or_bad_index_is_rebuilt_from_the_log() {
    let mut harness = sealed_partition(4);
    let (start, _) = second_segment(&harness);
    let index = FileId::new(NAMESPACE, FileKind::Index(start));
    harness.world.disk.flip_durable_bit(index, 30);
    let first_index = FileId::new(NAMESPACE, FileKind::Index(0));
    harness.world.disk.remove(first_index);
    let report = harness.crash_and_reopen();
    assert_eq!(report.indexes_rebuilt, 2, "{report:?}");
    assert_eq!(report.truncated_from, None);
    harness.check_all();
    assert!(harness.world.disk.listing().iter().any(|(file, size)| *file == first_index && *size > 0));
}

/// A sync per group commit flushes the active segment's log, not its index: recovery reads the
/// active segment whole and rebuilds its index, so a crash that loses the index costs nothing.
/// The index is synced once its segment is sealed, before the frontier passes the segment's end
/// (from then on recovery trusts it).
#[test]
fn the_active_index_is_synced_only_once_its_segment_is_sealed() {
    let mut harness = PartitionHarness::new(LocalWorld::new(7, no_faults(), false), config());
    harness.settle();
    for _ in 0..3 {
        harness.append(10, 100);
    }
    sync_and_settle(&mut harness);
    assert_eq!(harness.log.segment_count(), 1, "still one active segment");
    let (log, index) = (FileId::new(NAMESPACE, FileKind::Segment(0)), FileId::new(NAMESPACE, FileKind::Index(0)));
    assert_eq!(harness.world.disk.durable_bytes(log), harness.world.disk.bytes(log), "the log is synced");
    assert!(!harness.world.disk.bytes(index).is_empty(), "the index has entries");
    assert!(harness.world.disk.durable_bytes(index).is_empty(), "the active index was synced with its batches");
    let report = harness.crash_and_reopen();
    assert_eq!((report.truncated_from, report.corrupt, report.end_offset), (None, false, 30), "{report:?}");
    harness.check_all();
    // Until the segment is sealed: then the sync that covers its end flushes its index too.
    while harness.log.segment_count() == 1 {
        harness.append(10, 100);
    }
    sync_and_settle(&mut harness);
    assert!(!harness.world.disk.durable_bytes(index).is_empty());
    assert_eq!(harness.world.disk.durable_bytes(index), harness.world.disk.bytes(index), "the sealed index is synced");
    let end = harness.log.end_offset();
    let report = harness.crash_and_reopen();
    assert_eq!((report.truncated_from, report.corrupt, report.end_offset), (None, false, end), "{report:?}");
    harness.check_all();
}

/// An owner seals its log between batches (`seal`), after the segment's last write completed: no
/// write is left to mark its index, so the seal syncs it, and the next segment's writes wait for
/// that; else a checkpoint past the segment would leave recovery trusting an index never synced
/// (two reviews of this change found the hole and then the order).
#[test]
fn an_owner_sealing_between_batches_syncs_the_sealed_index() {
    let config = PartitionConfig { segment_size: u64::MAX, ..config() };
    let mut harness = PartitionHarness::new_owned(LocalWorld::new(8, no_faults(), false), config);
    harness.settle();
    for _ in 0..3 {
        harness.append(10, 100);
    }
    sync_and_settle(&mut harness);
    let index = FileId::new(NAMESPACE, FileKind::Index(0));
    assert!(harness.world.disk.durable_bytes(index).is_empty(), "the active index was synced with its batches");
    harness.log.seal(&mut harness.world);
    harness.append(10, 100);
    // Recovery trusts the sealed index once the next segment exists below the frontier: the
    // next segment is not written before the sealed index is durable.
    let next = FileId::new(NAMESPACE, FileKind::Segment(30));
    loop {
        if !harness.world.disk.bytes(next).is_empty() {
            assert_eq!(
                harness.world.disk.durable_bytes(index),
                harness.world.disk.bytes(index),
                "the next segment was written before the sealed index was durable"
            );
        }
        if !harness.step() {
            break;
        }
    }
    sync_and_settle(&mut harness);
    assert_eq!(harness.log.segment_count(), 2);
    assert!(!harness.world.disk.bytes(index).is_empty());
    assert_eq!(harness.world.disk.durable_bytes(index), harness.world.disk.bytes(index), "the sealed index is synced");
    let report = harness.crash_and_reopen();
    // The sealed segment is below the owner's frontier: its index is trusted, and whole.
    assert_eq!(
        (report.truncated_from, report.corrupt, report.end_offset, report.segments_trusted, report.indexes_rebuilt),
        (None, false, 40, 1, 0),
        "{report:?}"
    );
    harness.check_all();
}

#[test]
fn an_index_entry_that_points_off_its_batch_costs_no_message() {
    let mut harness = sealed_partition(5);
    let (start, end) = second_segment(&harness);
    // Batches here are 1756 bytes, so every batch has an entry. One bit of the third entry's
    // position flips (byte 16 of the entry, its low byte): the entries stay in order and inside
    // the log, so recovery trusts the index and the entry points one byte past its batch (seed
    // 10064: a write corruption of an `.index` write).
    let index = FileId::new(NAMESPACE, FileKind::Index(start));
    harness.world.disk.flip_durable_bit(index, 2 * 24 + 16);
    let report = harness.crash_and_reopen();
    assert_eq!((report.indexes_rebuilt, report.corrupt), (0, false), "{report:?}");
    // The segment's batches are whole: every offset is served, from wherever a read starts.
    for offset in start..end {
        let read = harness.read(ReadStart::Offset(offset), 1, 1 << 20).expect("an intact batch is served");
        assert!(harness.check_batches(&read).contains(&offset), "offset {offset}");
    }
    harness.check_all();
}

#[test]
fn a_full_disk_rejects_appends_keeps_every_durable_byte_and_serves_reads() {
    let mut harness = PartitionHarness::new(LocalWorld::new(5, no_faults(), false), config());
    for _ in 0..5 {
        harness.append(10, 100);
    }
    sync_and_settle(&mut harness);
    let durable = harness.durable;
    let used: u64 = harness.world.disk.listing().iter().map(|(_, size)| size).sum();
    harness.world.disk.capacity = Some(used + 3000);
    // Appends go on until a write finds the disk full: those messages are rejected, not lost
    // silently, and the log continues from the first of them.
    for _ in 0..10 {
        harness.append(10, 100);
        harness.log.sync(&mut harness.world);
        harness.settle();
    }
    assert!(harness.log.end_offset() < 150, "some appends must have been rejected");
    assert!(harness.durable >= durable);
    harness.check_all();
    // Reads keep working on a full disk.
    let read = harness.read(ReadStart::Offset(0), 1000, 1 << 20).unwrap();
    assert!(!harness.check_batches(&read).is_empty());
    // Space comes back: appends succeed again, and a crash loses nothing durable.
    harness.world.disk.capacity = None;
    harness.append(10, 100);
    sync_and_settle(&mut harness);
    let report = harness.crash_and_reopen();
    assert_eq!(report.truncated_from, None, "{report:?}");
    harness.check_all();
}

#[test]
fn consumer_offsets_survive_crashes_at_any_point() {
    for seed in 0..200 {
        let mut world = LocalWorld::new(seed, no_faults(), false);
        let mut acked: Option<u64> = None;
        let mut since_ack: Vec<u64> = Vec::new();
        for round in 0..6u64 {
            let mut offsets = ConsumerOffsets::load(&mut world, NAMESPACE, 1, 4);
            let mut steps = 0;
            while !offsets.is_loaded() {
                let completion = world.step().expect("loading");
                offsets.on_completion(&mut world, completion);
                steps += 1;
                assert!(steps < 100);
            }
            let loaded = offsets.get(Consumer::Group(3));
            match acked {
                Some(_) => assert!(
                    loaded.is_some_and(|value| acked == Some(value) || since_ack.contains(&value)),
                    "seed {seed} round {round}: loaded {loaded:?}, acked {acked:?}, since {since_ack:?}"
                ),
                None => assert!(loaded.is_none_or(|value| since_ack.contains(&value))),
            }
            if let Some(value) = loaded {
                acked = Some(value);
                since_ack.clear();
            }
            // Store a few offsets, then crash after a random number of completions.
            for store in 0..3 {
                let value = round * 100 + store;
                offsets.store(&mut world, Consumer::Group(3), value).unwrap();
                since_ack.push(value);
            }
            let cut = world.rng.below(8);
            for _ in 0..cut {
                let Some(completion) = world.step() else { break };
                offsets.on_completion(&mut world, completion);
                while let Some(event) = offsets.poll_event() {
                    if let OffsetsEvent::Stored { offset, .. } = event {
                        acked = Some(offset);
                        let at = since_ack.iter().position(|value| *value == offset).unwrap();
                        since_ack.drain(..=at);
                    }
                }
            }
            world.crash();
        }
    }
}

#[test]
fn polling_strategies_start_where_a_consumer_expects() {
    use vireo_storage::partition::PollingStrategy;
    let mut harness = sealed_partition(6);
    let end = harness.log.end_offset();
    let first_offsets = |harness: &mut PartitionHarness, strategy: PollingStrategy, stored: Option<u64>| {
        let start = strategy.start(5, harness.log.end_offset(), stored);
        let read = harness.read(start, 5, 1 << 20).unwrap();
        (read.start_offset, harness.check_batches(&read))
    };
    assert_eq!(first_offsets(&mut harness, PollingStrategy::First, None).0, 0);
    let (start, offsets) = first_offsets(&mut harness, PollingStrategy::Last, None);
    assert_eq!(start, end - 5);
    assert!(offsets.contains(&(end - 1)));
    assert_eq!(first_offsets(&mut harness, PollingStrategy::Next, None).0, 0);
    assert_eq!(first_offsets(&mut harness, PollingStrategy::Next, Some(41)).0, 42);
    assert_eq!(first_offsets(&mut harness, PollingStrategy::Offset(77), None).0, 77);
    // Every batch carries its append time; a timestamp poll starts at the first batch stamped then.
    let (start, _) = first_offsets(&mut harness, PollingStrategy::Timestamp(0), None);
    assert_eq!(start, 0);
    let (start, offsets) = first_offsets(&mut harness, PollingStrategy::Timestamp(u64::MAX), None);
    assert_eq!((start, offsets.len()), (end, 0));
    // After a purge, First starts at the new first offset.
    harness.settle();
    assert!(harness.log.purge(&mut harness.world));
    harness.settle();
    harness.append(3, 10);
    let (start, offsets) = first_offsets(&mut harness, PollingStrategy::First, None);
    assert_eq!(start, end);
    assert_eq!(offsets, vec![end, end + 1, end + 2]);
}

#[test]
fn purging_an_empty_partition_keeps_its_active_segment() {
    let mut harness = PartitionHarness::new(LocalWorld::new(7, no_faults(), false), config());
    harness.settle();
    assert!(harness.log.purge(&mut harness.world));
    harness.append(5, 10);
    sync_and_settle(&mut harness);
    let report = harness.crash_and_reopen();
    assert_eq!((report.end_offset, report.truncated_from), (5, None), "{report:?}");
    harness.check_all();
}

#[test]
fn a_batch_larger_than_the_read_window_is_read_whole() {
    let mut harness = PartitionHarness::new(LocalWorld::new(8, no_faults(), false), config());
    harness.append(1, 10);
    harness.append(1, 20_000);
    harness.append(1, 10);
    // Once from memory, once from the file.
    for _ in 0..2 {
        let read = harness.read(ReadStart::Offset(1), 1, 1000).unwrap();
        assert_eq!(harness.check_batches(&read), vec![1]);
        sync_and_settle(&mut harness);
    }
}

#[test]
fn zero_padding_after_a_sealed_segment_is_not_a_tear() {
    // The glommio driver pads a direct file's last block with zeros at a sync; a sealed segment
    // scanned in full (here: no superblock to trust it by) must end at its last batch, not cut
    // the log there.
    let mut harness = sealed_partition(9);
    let end = harness.log.end_offset();
    let (start, _) = second_segment(&harness);
    let file = FileId::new(NAMESPACE, FileKind::Segment(start));
    let size = harness.world.disk.listing().into_iter().find(|(listed, _)| *listed == file).unwrap().1;
    let padding = harness.world.disk.submit_write(file, size, vec![0; 4096 - (size % 4096) as usize]);
    let rates = harness.world.rates.clone();
    harness.world.disk.complete_write(padding, &mut harness.world.rng, &rates).unwrap();
    let upto = harness.world.disk.sync_point();
    harness.world.disk.sync(file, upto).unwrap();
    for superblock in [FileKind::SuperblockA, FileKind::SuperblockB] {
        harness.world.disk.remove(FileId::new(NAMESPACE, superblock));
    }
    let report = harness.crash_and_reopen();
    assert_eq!((report.end_offset, report.truncated_from, report.segments_trusted), (end, None, 0), "{report:?}");
    harness.check_all();
}

#[test]
fn a_cut_removes_the_tail_across_segments_and_new_batches_take_its_offsets() {
    let mut harness = sealed_partition(8);
    let segments_before: Vec<u64> = harness.log.segments().map(|(start, ..)| start).collect();
    assert!(segments_before.len() >= 4, "{segments_before:?}");
    // Cut inside the second segment: it is cut short, every later one is removed, and the
    // superblock stops claiming the cut bytes durable before any file is touched.
    let second = segments_before[1];
    let from = harness.batch_bases.iter().copied().find(|base| *base > second).unwrap();
    harness.truncate(from).unwrap();
    assert_eq!(harness.log.segments().map(|(start, ..)| start).collect::<Vec<_>>(), segments_before[..2]);
    let files: Vec<u64> = harness
        .world
        .disk
        .listing()
        .into_iter()
        .filter_map(|(file, _)| match file.kind {
            FileKind::Segment(start) => Some(start),
            _ => None,
        })
        .collect();
    assert_eq!(files, segments_before[..2]);
    let read = harness.read(ReadStart::Offset(from), 10, 1 << 20).unwrap();
    assert!(read.bytes.is_empty(), "nothing is served from the cut on");
    // New batches at the same offsets, synced; a crash keeps them, and nothing of the old tail.
    for _ in 0..8 {
        harness.append(7, 50);
    }
    sync_and_settle(&mut harness);
    let report = harness.crash_and_reopen();
    assert!(!report.corrupt && report.truncated_from.is_none(), "{report:?}");
    harness.check_all();
}

/// A cut exactly where a segment starts removes that segment and makes the one before active
/// again: the log is as if the batch that began the next segment had never come, and whoever
/// appends next decides again whether a new segment starts (a replicated log seals where its
/// machine does).
#[test]
fn a_cut_where_a_segment_starts_makes_the_one_before_active_again() {
    let mut harness = sealed_partition(11);
    let segments_before: Vec<(u64, u64, u64, bool)> = harness.log.segments().collect();
    let (third, ..) = segments_before[2];
    assert!(harness.log.starts_segment(third) && harness.log.remembered(third).is_some());
    harness.truncate(third).unwrap();
    let after: Vec<(u64, u64, u64, bool)> = harness.log.segments().collect();
    assert_eq!(after.len(), 2, "{after:?}");
    let (second, second_end, second_size, sealed) = after[1];
    assert_eq!((second, second_end, second_size), (segments_before[1].0, third, segments_before[1].2));
    assert!(!sealed, "the segment before the cut takes appends again");
    assert_eq!(harness.log.active_size(), second_size);
    assert!(!harness.log.starts_segment(third));
    // The next batch goes in it (this log seals by its own size: past it, a segment starts
    // after the batch), and a crash keeps it there.
    harness.append(3, 40);
    sync_and_settle(&mut harness);
    let grown = |harness: &PartitionHarness| harness.log.segments().nth(1).map(|(start, end, ..)| (start, end));
    assert_eq!(grown(&harness), Some((second, third + 3)));
    let report = harness.crash_and_reopen();
    assert!(!report.corrupt && report.truncated_from.is_none(), "{report:?}");
    assert_eq!(grown(&harness), Some((second, third + 3)));
    harness.check_all();
}

#[test]
fn a_crash_before_a_cut_lands_keeps_the_old_batches_as_an_unsynced_tail() {
    for seed in 0..20 {
        let mut harness = sealed_partition(20 + seed);
        let end = harness.log.end_offset();
        let from = harness.batch_bases[harness.batch_bases.len() - 3];
        harness.log.truncate(&mut harness.world, from).unwrap();
        // Some of the cut's steps may land before the crash: the superblock that lowers the
        // frontier, the file operations after it.
        for _ in 0..harness.world.rng.below(4) {
            harness.step();
        }
        harness.world.crash();
        let reopened = PartitionHarness::new(harness.world, config());
        let report = reopened.reports.last().unwrap();
        assert!(!report.corrupt, "seed {seed}: a cut is not damage: {report:?}");
        assert!(report.end_offset == end || report.end_offset == from, "seed {seed}: {report:?}");
    }
}

#[test]
fn stamped_appends_must_continue_the_log_and_cuts_must_start_a_batch() {
    use vireo_storage::batch::{stamp, BatchBuilder};
    use vireo_storage::partition::{AppendError, TruncateError};
    let mut harness = PartitionHarness::new(LocalWorld::new(9, no_faults(), false), config());
    harness.append(5, 10);
    let stamped = |base: u64, partition: u64| {
        let mut builder = BatchBuilder::new();
        builder.push(99, b"stamped", b"");
        let mut bytes = builder.finish(1);
        stamp(&mut bytes, partition, base, 1_000).unwrap();
        bytes
    };
    let world = &mut harness.world;
    assert_eq!(
        harness.log.append_stamped(world, stamped(6, 0).into()),
        Err(AppendError::NotNext { expected: 5, found: 6 })
    );
    assert_eq!(
        harness.log.append_stamped(world, stamped(5, 1).into()),
        Err(AppendError::WrongPartition { expected: 0, found: 1 })
    );
    // Writes in flight: a cut waits for them.
    assert_eq!(harness.log.truncate(world, 0), Err(TruncateError::Busy));
    let appended = harness.log.append_stamped(world, stamped(5, 0).into()).unwrap();
    assert_eq!((appended.base_offset, appended.last_offset), (5, 5));
    harness.settle();
    let world = &mut harness.world;
    assert_eq!(harness.log.truncate(world, 3), Err(TruncateError::NotABatchStart { offset: 3 }));
    assert_eq!(harness.log.truncate(world, 7), Err(TruncateError::OutOfRange { offset: 7, first: 0, end: 6 }));
    assert_eq!(harness.log.truncate(world, 6), Ok(()), "a cut at the end cuts nothing");
    assert_eq!(harness.log.truncate(world, 5), Ok(()));
    assert_eq!(harness.log.end_offset(), 5);
}

/// An owned log (its superblock is its partition group's) writes no superblock: retention deletes
/// at once, and a crash reopens it from what its owner claims. A log that starts past the claim's
/// `retained_from` (retention ran after the owner recorded it) is taken as retained that far.
#[test]
fn an_owned_log_writes_no_superblock_and_opens_from_its_owners_claim() {
    let config = PartitionConfig { max_size: Some(12_000), ..config() };
    let mut harness = PartitionHarness::new_owned(LocalWorld::new(5, no_faults(), false), config);
    for _ in 0..20 {
        harness.append(10, 100);
    }
    sync_and_settle(&mut harness);
    harness.retention(0);
    let first = harness.log.first_offset();
    assert!(first > 0, "retention deleted the oldest segments");
    let files = listing(&harness);
    assert!(!files.contains("superblock"), "an owned log writes no superblock:\n{files}");
    assert!(!files.contains(&format!("{:020}.log", 0)), "deleted at once:\n{files}");
    // The owner recorded where it is retained from now: the log opens as it was.
    let report = harness.crash_and_reopen_claimed(OwnerClaim {
        frontier: harness.durable,
        retained_from: first,
        checked_to: None,
    });
    assert_eq!((report.first_offset, report.end_offset), (first, 200), "{report:?}");
    assert!(!report.corrupt && report.damaged.is_empty(), "{report:?}");
    assert_eq!(harness.check_all(), 200 - first);
    assert!(!listing(&harness).contains("superblock"));
}

/// An owned log that starts after its owner's claim keeps what it has: its owner may have
/// retained it from later than the state it claims from now (the owner's state came back older
/// than its log, and catches up), and dropping it would drop durable batches the owner counts on.
/// The owner decides: here the head is gone for good, and once the log is empty again (purged to
/// its end) it may start over lower down, where the owner's state goes on.
#[test]
fn an_owned_log_that_starts_after_its_claim_keeps_what_it_has() {
    let mut harness = PartitionHarness::new_owned(LocalWorld::new(8, no_faults(), false), config());
    for _ in 0..20 {
        harness.append(10, 100);
    }
    sync_and_settle(&mut harness);
    let (second, _) = second_segment(&harness);
    harness.world.disk.remove(FileId::new(NAMESPACE, FileKind::Segment(0)));
    let report = harness.crash_and_reopen_claimed(OwnerClaim { frontier: 0, retained_from: 0, checked_to: None });
    assert!(second > 0);
    assert_eq!((report.truncated_from, report.first_offset, report.end_offset), (None, second, 200), "{report:?}");
    assert_eq!(report.segments_dropped, 0, "{report:?}");
    // Emptied, the log starts over where the owner says, below where it ended.
    harness.purge_to(200);
    // An empty log may start over lower down.
    harness.purge_to(0);
    assert_eq!((harness.log.first_offset(), harness.log.end_offset()), (0, 0));
    harness.append(10, 100);
    sync_and_settle(&mut harness);
    let report = harness.crash_and_reopen_claimed(OwnerClaim { frontier: 0, retained_from: 0, checked_to: None });
    assert_eq!((report.first_offset, report.end_offset), (0, 10), "{report:?}");
}

/// The owner's claim is what tells damage from a tear: one flipped bit in the active segment,
/// below what the owner claims durable, loses only the batch it hits; claimed durable to nothing,
/// the same flip is a torn tail and cuts the log there.
#[test]
fn in_an_owned_log_the_claimed_frontier_tells_damage_from_a_tear() {
    for (frontier, damaged) in [(40, true), (0, false)] {
        let mut harness = PartitionHarness::new_owned(LocalWorld::new(6, no_faults(), false), config());
        for _ in 0..4 {
            harness.append(10, 100);
        }
        sync_and_settle(&mut harness);
        harness.world.disk.flip_durable_bit(FileId::new(NAMESPACE, FileKind::Segment(0)), 2500);
        // As in the superblock's case: byte 2500 is in the second batch, offsets 10..20.
        let report = harness.crash_and_reopen_claimed(OwnerClaim { frontier, retained_from: 0, checked_to: None });
        if damaged {
            assert_eq!((report.damaged.clone(), report.end_offset), (vec![(10, 20)], 40), "{report:?}");
            assert!(report.corrupt);
            assert_eq!(harness.check_all(), 30);
        } else {
            assert_eq!((report.truncated_from, report.end_offset), (Some(10), 10), "{report:?}");
            assert!(!report.corrupt, "nothing claimed durable was lost: {report:?}");
        }
    }
}

/// Retention lets many segments go at once; their files are removed one segment at a time, the
/// oldest first. A crash at any point leaves the newest of them and every segment after: a log
/// that starts later, never one with a hole, so the segments its owner still counts on stay.
#[test]
fn a_crash_while_retention_removes_files_never_leaves_a_hole() {
    let config = PartitionConfig { segment_size: u64::MAX, ..config() };
    for seed in 0..40u64 {
        let mut harness = PartitionHarness::new_owned(LocalWorld::new(60 + seed, no_faults(), false), config.clone());
        for _ in 0..12 {
            harness.append(10, 100);
            harness.log.seal(&mut harness.world);
        }
        sync_and_settle(&mut harness);
        let end = harness.log.end_offset();
        assert_eq!(harness.log.retain_from(&mut harness.world, 100), 10, "seed {seed}");
        for _ in 0..harness.world.rng.below(24) {
            harness.step();
        }
        let report = harness.crash_and_reopen_claimed(OwnerClaim { frontier: end, retained_from: 0, checked_to: None });
        let starts: Vec<u64> = harness.log.segments().map(|(start, ..)| start).collect();
        assert_eq!(report.end_offset, end, "seed {seed}: nothing after the removed segments is lost: {report:?}");
        assert!(report.truncated_from.is_none() && !report.corrupt, "seed {seed}: {report:?}");
        assert!(starts.windows(2).all(|pair| pair[1] == pair[0] + 10), "seed {seed}: a hole: {starts:?}");
        assert!(report.first_offset <= 100, "seed {seed}: {report:?}");
    }
}

/// An owner decides where segments end and which go: `seal` ends the active segment at the
/// batch the owner says, `retain_from` deletes the sealed segments below an offset, and
/// `purge_to` skips ahead to where the owner's state is. A crash keeps all three.
#[test]
fn an_owner_seals_retains_and_skips_ahead() {
    let config = PartitionConfig { segment_size: u64::MAX, ..config() };
    let mut harness = PartitionHarness::new_owned(LocalWorld::new(7, no_faults(), false), config);
    for batch in 0..6 {
        harness.append(10, 100);
        if batch % 2 == 1 {
            harness.log.seal(&mut harness.world);
        }
    }
    harness.log.seal(&mut harness.world);
    sync_and_settle(&mut harness);
    let ends: Vec<(u64, u64, bool)> =
        harness.log.segments().map(|(start, end, _, sealed)| (start, end, sealed)).collect();
    assert_eq!(ends, [(0, 20, true), (20, 40, true), (40, 60, true), (60, 60, false)]);
    // Offset 25 lies inside [20, 40): only [0, 20) is wholly below it.
    assert_eq!(harness.log.retain_from(&mut harness.world, 25), 1);
    harness.retention(0);
    assert_eq!(harness.log.first_offset(), 20);
    let report = harness.crash_and_reopen_claimed(OwnerClaim { frontier: 60, retained_from: 20, checked_to: None });
    assert_eq!((report.first_offset, report.end_offset, report.corrupt), (20, 60, false), "{report:?}");
    harness.check_all();
    harness.purge_to(1_000);
    assert_eq!(harness.append(10, 100), 1_000, "appends go on where the owner skipped to");
    sync_and_settle(&mut harness);
    let report =
        harness.crash_and_reopen_claimed(OwnerClaim { frontier: 1_010, retained_from: 1_000, checked_to: None });
    assert_eq!((report.first_offset, report.end_offset, report.corrupt), (1_000, 1_010, false), "{report:?}");
    assert_eq!(harness.check_all(), 10);
}
