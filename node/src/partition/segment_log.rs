//! `SegmentLog`: a partition group's segment log on its node, kept by the shard beside the group's
//! replica. It holds the batches the group committed as the replica's `PartitionMachine` holds
//! them: the same offsets, the same segments (the log never seals by itself: it seals where the
//! machine's segments end, so every replica's files end at the same batches), the same retention
//! (a segment goes once the machine's first offset passes it). Its superblock is the group's
//! (`PartitionLog::open_owned`): the log writes none of its own.
//!
//! The machine still holds its batches in memory and in its checkpoints, and polls are served from
//! there: this log follows the machine (`follow`, after every step of the replica) and is checked
//! against it, so that the files, their recovery and their retention run under every fault the
//! simulator injects before reads and checkpoints move onto them. Until the group's checkpoints
//! wait for the log's syncs, the group claims nothing of it at open (frontier 0): recovery keeps
//! every valid batch and cuts at the first bad one, and the log catches up from the machine.
//!
//! Bounds: appends stop at the log's own bound (`unwritten_bytes_max`, refused as `Busy`) and
//! go on at the next step; the machine holds what is not written yet.

use std::collections::VecDeque;
use vireo_io::{Completion, Io, Namespace};
use vireo_protocol::config::Bug;

use vireo_storage::partition::{
    AppendError, OwnerClaim, PartitionConfig, PartitionEvent, PartitionLog, ReadBatches, ReadError, ReadRequest,
    RecoveryReport, Status,
};

use super::PartitionMachine;

/// Owner number of every group's log: a group's I/O tokens carry its slot in the bits a log's
/// owner would use, so the owner is always 0 and the slot tells groups apart.
pub const LOG_OWNER: u16 = 0;

/// What a group's segment log did, since its shard started.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SegmentLogCounters {
    pub batches_appended: u64,
    /// Bytes of stamped batches appended.
    pub segment_bytes: u64,
    pub segments_sealed: u64,
    pub segments_deleted: u64,
    /// Appends refused because too much waited to be written (retried at the next step).
    pub appends_busy: u64,
    /// Appends refused for any other reason (the log failed, or does not continue where the
    /// machine's batch starts: a divergence the simulator's end check reports).
    pub appends_refused: u64,
    /// Times the log started again at the machine's first offset, having none of its batches.
    pub skips_ahead: u64,
    pub failures: u64,
    /// Opens whose recovery cut the log (a torn tail, or damage: the group claims nothing yet) or
    /// reported damaged batches; the log takes them again from the machine.
    pub opens_cut: u64,
}

pub struct SegmentLog {
    namespace: Namespace,
    config: PartitionConfig,
    log: Option<PartitionLog>,
    bug: Option<Bug>,
    /// Reads finished and not yet taken (`take_read`): at most the log's `reads_max`.
    reads_done: VecDeque<(u64, Result<ReadBatches, ReadError>)>,
    /// The last open's report.
    pub opened: Option<RecoveryReport>,
    pub counters: SegmentLogCounters,
}

impl SegmentLog {
    /// A log not opened yet: `follow` opens it once the group's replica is open (so that a wipe
    /// of an earlier incarnation's files is done).
    pub fn new(namespace: Namespace, partition_id: u64, bug: Option<Bug>) -> SegmentLog {
        let config = PartitionConfig {
            partition_id,
            // The machine says where segments end (`follow`).
            segment_size: u64::MAX,
            ..PartitionConfig::default()
        };
        SegmentLog {
            namespace,
            config,
            log: None,
            bug,
            reads_done: VecDeque::new(),
            opened: None,
            counters: SegmentLogCounters::default(),
        }
    }

    pub fn log(&self) -> Option<&PartitionLog> {
        self.log.as_ref().filter(|log| log.status() == Status::Open)
    }

    /// Starts a read of the open log; its result comes back through `take_read`.
    pub fn read(&mut self, io: &mut impl Io, request: ReadRequest) -> Result<(), ReadError> {
        let log = self.log.as_mut().filter(|log| log.status() == Status::Open).ok_or(ReadError::NotOpen)?;
        log.read(io, request)?;
        self.drain_events();
        Ok(())
    }

    /// A finished read, if any.
    pub fn take_read(&mut self) -> Option<(u64, Result<ReadBatches, ReadError>)> {
        self.reads_done.pop_front()
    }

    /// A completion of this log's I/O (the shard tells them from the replica's by their tag).
    pub fn on_completion(&mut self, io: &mut impl Io, completion: Completion) {
        if let Some(log) = self.log.as_mut() {
            log.on_completion(io, completion);
        }
        self.drain_events();
    }

    fn drain_events(&mut self) {
        let Some(log) = self.log.as_mut() else { return };
        while let Some(event) = log.poll_event() {
            match event {
                PartitionEvent::Opened(report) => {
                    if !report.damaged.is_empty() || report.truncated_from.is_some() {
                        self.counters.opens_cut += 1;
                    }
                    self.opened = Some(report);
                }
                PartitionEvent::SegmentDeleted { .. } => self.counters.segments_deleted += 1,
                PartitionEvent::Failed(_) => self.counters.failures += 1,
                // A rejected write (a full disk) takes the batches from its offset: the log is
                // cut there and the machine's copies are appended again.
                PartitionEvent::Read { id, result } => self.reads_done.push_back((id, result)),
                PartitionEvent::Durable { .. } | PartitionEvent::Rejected { .. } => {}
            }
        }
    }

    /// Brings the log to the machine: opens it, skips ahead or drops what the machine no longer
    /// holds, seals where the machine's segments end, and appends the committed batches it lacks.
    pub fn follow(&mut self, io: &mut impl Io, machine: &PartitionMachine, ready: bool) {
        match self.log.as_ref().map(PartitionLog::status) {
            None => {
                // The claim must be where the machine is retained from now: only once its state
                // is restored (the replica is open, but may still wait for a view or a checkpoint).
                if !ready {
                    return;
                }
                let claim = OwnerClaim { frontier: 0, retained_from: machine.first_offset() };
                self.log = Some(PartitionLog::open_owned(io, self.config.clone(), self.namespace, LOG_OWNER, claim));
                self.drain_events();
                return;
            }
            Some(Status::Opening) => return,
            Some(Status::Failed(_)) => {
                // Opened again from its files once no completion of this one can arrive.
                if self.log.as_ref().is_some_and(|log| log.ops_in_flight() == 0) {
                    self.log = None;
                }
                return;
            }
            Some(Status::Open) => {}
        }
        let log = self.log.as_mut().expect("open");
        let (first, next) = (machine.first_offset(), machine.next_offset());
        let end = log.end_offset();
        if end > next {
            // Recovery kept batches the machine has not applied again yet (it replays, or waits
            // to learn the commits): they are committed, so it will. Wait for it.
            return;
        }
        if first >= end && log.first_offset() < end || first > end {
            // Nothing the log holds is kept any more (a purge), or the machine holds nothing
            // from where the log ends (it took a checkpoint past it).
            if log.purge_to(io, first) {
                self.counters.skips_ahead += u64::from(first > end);
            }
            self.drain_events();
            return;
        }
        log.retain_from(io, first);
        let mut appended = false;
        for (base, batch, starts_segment) in machine.batches_from(log.end_offset()) {
            let sealing = starts_segment && self.bug != Some(Bug::SegmentLogIgnoresSeals);
            if sealing && log.segments().last().is_some_and(|(start, end, ..)| start < end) {
                log.seal(io);
                self.counters.segments_sealed += 1;
            }
            match log.append_stamped(io, batch.to_vec()) {
                Ok(appended_at) => {
                    debug_assert_eq!(appended_at.base_offset, base);
                    self.counters.batches_appended += 1;
                    self.counters.segment_bytes += batch.len() as u64;
                    appended = true;
                }
                Err(AppendError::Busy) => {
                    self.counters.appends_busy += 1;
                    break;
                }
                Err(_) => {
                    self.counters.appends_refused += 1;
                    break;
                }
            }
        }
        if appended {
            log.sync(io);
        }
        self.drain_events();
    }
}
