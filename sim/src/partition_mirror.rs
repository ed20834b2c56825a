//! Partition files on the simulated disks: every node keeps a partition log of the register entries
//! its replica has applied, one message per entry, on the same simulated disk as its WAL, under the
//! same crashes and faults.
//!
//! The cluster feeds each node's log from its replica's state and checks it on every reopen: the
//! log must hold every message it reported durable (unless the disk damaged that partition's
//! files, when the node repairs by appending again from its replicated state: what VSR repair
//! does for a partition), and everything it serves must be the committed entry at that offset.

use vireo_io::{Completion, Io, Namespace};
use vireo_storage::batch::{self, BatchBuilder};
use vireo_storage::partition::{
    PartitionBug, PartitionConfig, PartitionEvent, PartitionLog, ReadRequest, ReadStart, Status,
};

/// The mirror's partition: stream 0, topic 0, partition 0.
pub const MIRROR_NAMESPACE: Namespace = Namespace(0);
/// Entries appended in one batch at most.
const BATCH_ENTRIES_MAX: usize = 32;
/// Attempts at a verification read that fails before it counts (read corruption is transient).
const READ_ATTEMPTS_MAX: u32 = 3;
/// Messages one verification read asks for.
const VERIFY_READ_COUNT: u32 = 64;

pub fn mirror_config(bug: Option<PartitionBug>) -> PartitionConfig {
    PartitionConfig {
        bug,
        segment_size: 4096,
        flush_messages: 16,
        flush_bytes: 2048,
        index_interval_bytes: 512,
        unwritten_bytes_max: 64 * 1024,
        reads_max: 4,
        read_bytes_max: 16 * 1024,
        scan_chunk_bytes: 2048,
        ..PartitionConfig::default()
    }
}

/// The message a register entry becomes: its client as the id, its value as the payload.
fn entry_matches(message: &batch::Message<'_>, entry: (u128, u64)) -> bool {
    message.id == entry.0 && message.payload == entry.1.to_le_bytes()
}

pub struct PartitionMirror {
    log: PartitionLog,
    /// Tells this log's completions from those of an earlier log of the same node, reopened.
    owner: u16,
    /// A read-back of the whole log after an open, in progress: the next offset to read.
    verifying: Option<u64>,
    read_next: u64,
    /// Failed attempts at the current verification read.
    read_failures: u32,
    /// Offset ranges the last open reported damaged: reads step over them.
    damaged_runs: Vec<(u64, u64)>,
}

/// What a mirror reports to the cluster after handling something.
#[derive(Debug, Default)]
pub struct MirrorNews {
    /// Every message below this is durable.
    pub durable: Option<u64>,
    /// The log reopened (after a crash or failure) and recovered up to this end offset.
    pub reopened_end: Option<u64>,
    /// The log failed and must be reopened (once none of its I/O is in flight).
    pub failed: bool,
}

impl PartitionMirror {
    pub fn open(io: &mut impl Io, owner: u16, bug: Option<PartitionBug>) -> PartitionMirror {
        let log = PartitionLog::open(io, mirror_config(bug), MIRROR_NAMESPACE, owner);
        PartitionMirror { log, owner, verifying: None, read_next: 0, read_failures: 0, damaged_runs: Vec::new() }
    }

    pub fn owner(&self) -> u16 {
        self.owner
    }

    pub fn end_offset(&self) -> u64 {
        self.log.end_offset()
    }

    pub fn is_open(&self) -> bool {
        self.log.status() == Status::Open
    }

    /// The log failed (a sync failed, or its recovery could not list or fix up its files): it is
    /// to be opened again once `ops_in_flight` is 0.
    pub fn is_failed(&self) -> bool {
        matches!(self.log.status(), Status::Failed(_))
    }

    /// The log's I/O requests not completed yet: its writes may still land on the disk.
    pub fn ops_in_flight(&self) -> usize {
        self.log.ops_in_flight()
    }

    /// Appends the entries the replica has applied beyond the log's end, and asks for them to be
    /// durable. Nothing while opening or verifying.
    pub fn feed(&mut self, io: &mut impl Io, applied: &[(u128, u64)], now_us: u64) {
        if !self.is_open() || self.verifying.is_some() {
            return;
        }
        let end = self.log.end_offset() as usize;
        if applied.len() <= end {
            return;
        }
        let mut builder = BatchBuilder::new();
        for (client, value) in &applied[end..applied.len().min(end + BATCH_ENTRIES_MAX)] {
            builder.push(*client, &value.to_le_bytes(), b"");
        }
        // Busy (too much unwritten) or a failed log: the next feed tries again.
        if self.log.append(io, builder.finish(now_us), now_us).is_ok() {
            self.log.sync(io);
        }
    }

    /// Hands a completion to the log and checks what comes out against `committed` (the longest
    /// register log any replica applied). `damaged`: the disk injected faults into partition files.
    pub fn on_completion(
        &mut self,
        io: &mut impl Io,
        completion: Completion,
        committed: &[(u128, u64)],
        durable_before: u64,
        damaged: bool,
    ) -> Result<MirrorNews, String> {
        self.log.on_completion(io, completion);
        let mut news = MirrorNews::default();
        while let Some(event) = self.log.poll_event() {
            match event {
                PartitionEvent::Opened(report) => {
                    // Damage may take durable messages, but never silently: below the durable
                    // point the superblock recorded, a loss must be reported. (Above it, damage
                    // looks like a torn tail: the superblock trails the latest group commit.)
                    let silent = report.end_offset < durable_before.min(report.frontier) && !report.corrupt;
                    if report.end_offset < durable_before && (!damaged || silent) {
                        return Err(format!(
                            "partition log lost durable messages: recovered to {} but {durable_before} was durable ({report:?})",
                            report.end_offset
                        ));
                    }
                    if !report.damaged.is_empty() && !damaged {
                        return Err(format!("the partition log found damage on a disk with no faults: {report:?}"));
                    }
                    self.damaged_runs = report.damaged.clone();
                    if report.first_offset != 0 {
                        return Err(format!("the partition log (no retention) lost its start: {report:?}"));
                    }
                    news.reopened_end = Some(report.end_offset);
                    self.verifying = Some(0);
                    self.verify_next(io);
                }
                PartitionEvent::Durable { offset } => news.durable = Some(offset),
                PartitionEvent::Read { result, .. } => {
                    let expected = self.verifying.expect("a verification read");
                    let read = match result {
                        Ok(read) => {
                            self.read_failures = 0;
                            read
                        }
                        // A read damaged on the way up: read again.
                        Err(_) if self.read_failures < READ_ATTEMPTS_MAX => {
                            self.read_failures += 1;
                            self.verify_next(io);
                            continue;
                        }
                        Err(_) if damaged => {
                            // Damage the node cannot read; verify on from the next offset.
                            self.read_failures = 0;
                            self.verifying = Some(expected + 1);
                            self.verify_next(io);
                            continue;
                        }
                        Err(error) => return Err(format!("partition log read failed with no disk fault: {error}")),
                    };
                    let mut at = 0;
                    let mut last = None;
                    let mut next = expected;
                    while at < read.bytes.len() {
                        let header = batch::validate(&read.bytes[at..])
                            .map_err(|error| format!("partition log served a damaged batch: {error}"))?;
                        let messages = batch::messages(&read.bytes[at..at + header.batch_length as usize])
                            .map_err(|error| format!("partition log batch unreadable: {error}"))?;
                        for message in messages {
                            // Whole batches: the first may start before the offset asked for.
                            let reported = |from: u64, to: u64| {
                                self.damaged_runs.iter().any(|&(start, end)| start <= from && to <= end)
                            };
                            if message.offset >= expected && message.offset != next && !reported(next, message.offset) {
                                return Err(format!(
                                    "partition log skipped from offset {next} to {}: segments {:?}, reported damaged {:?}",
                                    message.offset,
                                    self.log.segments().collect::<Vec<_>>(),
                                    self.damaged_runs
                                ));
                            }
                            next = next.max(message.offset + 1);
                            let entry = committed.get(message.offset as usize).copied();
                            if !entry.is_some_and(|entry| entry_matches(&message, entry)) {
                                return Err(format!(
                                    "partition log offset {} holds id {:x}, but the committed entry is {entry:?}",
                                    message.offset, message.id
                                ));
                            }
                            last = Some(message.offset);
                        }
                        at += header.batch_length as usize;
                    }
                    match last {
                        Some(last) if last + 1 < self.log.end_offset() => {
                            self.verifying = Some(last + 1);
                            self.verify_next(io);
                        }
                        _ => self.verifying = None,
                    }
                }
                PartitionEvent::Rejected { .. } | PartitionEvent::SegmentDeleted { .. } => {}
                PartitionEvent::Failed(_) => news.failed = true,
            }
        }
        Ok(news)
    }

    fn verify_next(&mut self, io: &mut impl Io) {
        let Some(next) = self.verifying else { return };
        if next >= self.log.end_offset() {
            self.verifying = None;
            return;
        }
        self.read_next += 1;
        let request = ReadRequest {
            id: self.read_next,
            start: ReadStart::Offset(next),
            count: VERIFY_READ_COUNT,
            bytes_max: 8192,
        };
        if self.log.read(io, request).is_err() {
            self.verifying = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::local::{no_faults, LocalWorld};

    /// Opens (or reopens) a mirror and runs it until idle; returns the first violation, if any.
    fn settle(world: &mut LocalWorld, mirror: &mut PartitionMirror, committed: &[(u128, u64)]) -> Result<(), String> {
        while let Some(completion) = world.step() {
            mirror.on_completion(world, completion, committed, 0, false)?;
        }
        Ok(())
    }

    #[test]
    fn the_mirror_checker_fires_when_a_served_message_is_not_the_committed_one() {
        let mut world = LocalWorld::new(3, no_faults(), false);
        let applied: Vec<(u128, u64)> = (0..20).map(|at| (7, at)).collect();
        let mut mirror = PartitionMirror::open(&mut world, 1, None);
        settle(&mut world, &mut mirror, &applied).unwrap();
        mirror.feed(&mut world, &applied, 1);
        settle(&mut world, &mut mirror, &applied).unwrap();
        assert_eq!(mirror.end_offset(), 20);
        // Reopen: the read-back passes against the entries it was fed...
        let mut reopened = PartitionMirror::open(&mut world, 2, None);
        settle(&mut world, &mut reopened, &applied).unwrap();
        // ...and fails against a history that differs at one offset.
        let mut other = applied.clone();
        other[13].1 += 1;
        let mut checked = PartitionMirror::open(&mut world, 3, None);
        let violation = settle(&mut world, &mut checked, &other).unwrap_err();
        assert!(violation.contains("offset 13"), "{violation}");
    }
}
