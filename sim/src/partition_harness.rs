//! Drives one partition log on a `LocalWorld` against an in-memory model of what it must hold:
//! the model-based tests and the data-directory snapshots use it.
//!
//! The model is the list of messages appended, by offset, and the offset below which the log said
//! everything is durable. After a crash and reopen the log must hold every durable message, may
//! hold some of the rest, and everything it serves must be exactly what was appended, at dense
//! offsets.

use vireo_io::{Io, Namespace};
use vireo_storage::batch::{self, BatchBuilder};
use vireo_storage::partition::{
    OwnerClaim, PartitionConfig, PartitionEvent, PartitionLog, ReadBatches, ReadRequest, ReadStart, RecoveryReport,
    Status,
};

use crate::local::LocalWorld;

pub const NAMESPACE: Namespace = Namespace(0);
const OWNER: u16 = 7;

/// The payload of message `id`: derived from the id so any mix-up shows.
pub fn payload(id: u128, len: usize) -> Vec<u8> {
    (0..len).map(|at| (id as usize).wrapping_mul(31).wrapping_add(at) as u8).collect()
}

pub struct PartitionHarness {
    pub world: LocalWorld,
    pub log: PartitionLog,
    pub config: PartitionConfig,
    /// (id, payload length) of every message at offset `model_first + index`.
    pub model: Vec<(u128, usize)>,
    pub model_first: u64,
    pub durable: u64,
    pub next_id: u128,
    read_next: u64,
    reads: Vec<(u64, Result<ReadBatches, vireo_storage::partition::ReadError>)>,
    pub reports: Vec<RecoveryReport>,
    /// Offset ranges recovery reported damaged (lost on this copy): reads step over them.
    pub lost: Vec<(u64, u64)>,
    /// The base offset of every batch appended and not cut, in order.
    pub batch_bases: Vec<u64>,
    /// The log's superblock is the harness's (`PartitionLog::open_owned`).
    owned: bool,
}

impl PartitionHarness {
    pub fn new(world: LocalWorld, config: PartitionConfig) -> PartitionHarness {
        PartitionHarness::start(world, config, None)
    }

    /// A harness that owns the log's superblock: it opens the log with what it claims
    /// (`crash_and_reopen_claimed`), as a partition group opens its log from its checkpoint.
    pub fn new_owned(world: LocalWorld, config: PartitionConfig) -> PartitionHarness {
        PartitionHarness::start(world, config, Some(OwnerClaim::default()))
    }

    fn start(world: LocalWorld, config: PartitionConfig, claim: Option<OwnerClaim>) -> PartitionHarness {
        let mut world = world;
        let log = match claim {
            Some(claim) => PartitionLog::open_owned(&mut world, config.clone(), NAMESPACE, OWNER, claim),
            None => PartitionLog::open(&mut world, config.clone(), NAMESPACE, OWNER),
        };
        let mut harness = PartitionHarness {
            world,
            log,
            config,
            model: Vec::new(),
            model_first: 0,
            durable: 0,
            next_id: 1,
            read_next: 0,
            reads: Vec::new(),
            reports: Vec::new(),
            lost: Vec::new(),
            batch_bases: Vec::new(),
            owned: claim.is_some(),
        };
        harness.wait_open();
        harness
    }

    pub fn model_end(&self) -> u64 {
        self.model_first + self.model.len() as u64
    }

    fn drain_events(&mut self) {
        while let Some(event) = self.log.poll_event() {
            match event {
                PartitionEvent::Opened(report) => self.reports.push(report),
                PartitionEvent::Durable { offset } => {
                    assert!(offset >= self.durable, "durable went back from {} to {offset}", self.durable);
                    assert!(offset <= self.log.end_offset());
                    self.durable = offset;
                }
                PartitionEvent::Read { id, result } => self.reads.push((id, result)),
                PartitionEvent::Rejected { from_offset, .. } => {
                    assert!(from_offset >= self.durable, "a rejected write took durable messages");
                    self.model.truncate((from_offset - self.model_first) as usize);
                }
                PartitionEvent::SegmentDeleted { .. } => {}
                PartitionEvent::Failed(error) => panic!("partition failed: {error}"),
            }
        }
    }

    /// Delivers one completion; false when nothing is in flight.
    pub fn step(&mut self) -> bool {
        let Some(completion) = self.world.step() else { return false };
        self.log.on_completion(&mut self.world, completion);
        self.drain_events();
        true
    }

    pub fn settle(&mut self) {
        while self.step() {}
        self.drain_events();
    }

    fn wait_open(&mut self) {
        while self.log.status() == Status::Opening {
            assert!(self.step(), "recovery stalled with nothing in flight");
        }
        self.drain_events();
    }

    /// Appends a batch of `count` messages of `len` bytes each, waiting out back-pressure.
    pub fn append(&mut self, count: u32, len: usize) -> u64 {
        let mut builder = BatchBuilder::new();
        let ids: Vec<u128> = (0..count as u128).map(|at| self.next_id + at).collect();
        for &id in &ids {
            builder.push(id, &payload(id, len), &id.to_le_bytes()[..2]);
        }
        self.next_id += count as u128;
        let bytes = builder.finish(self.world.now());
        loop {
            let now_us = self.world.now() / 1000;
            match self.log.append(&mut self.world, bytes.clone(), now_us) {
                Ok(appended) => {
                    assert_eq!(appended.base_offset, self.model_end(), "offsets are dense");
                    self.model.extend(ids.iter().map(|&id| (id, len)));
                    self.batch_bases.push(appended.base_offset);
                    self.drain_events();
                    return appended.base_offset;
                }
                Err(vireo_storage::partition::AppendError::Busy) => assert!(self.step(), "busy with nothing in flight"),
                Err(error) => panic!("append failed: {error}"),
            }
        }
    }

    /// Reads and waits for the result.
    pub fn read(
        &mut self,
        start: ReadStart,
        count: u32,
        bytes_max: u64,
    ) -> Result<ReadBatches, vireo_storage::partition::ReadError> {
        self.read_next += 1;
        let id = self.read_next;
        self.log.read(&mut self.world, ReadRequest { id, start, count, bytes_max })?;
        loop {
            self.drain_events();
            if let Some(at) = self.reads.iter().position(|(read, _)| *read == id) {
                return self.reads.remove(at).1;
            }
            assert!(self.step(), "read {id} never completed");
        }
    }

    /// Checks a read's batches against the model: whole, valid, dense, and the messages appended.
    pub fn check_batches(&self, read: &ReadBatches) -> Vec<u64> {
        let mut offsets = Vec::new();
        let mut at = 0;
        while at < read.bytes.len() {
            let header = batch::validate(&read.bytes[at..]).expect("a served batch is valid");
            for message in batch::messages(&read.bytes[at..at + header.batch_length as usize]).unwrap() {
                assert!(message.offset >= self.model_first && message.offset < self.model_end());
                let (id, len) = self.model[(message.offset - self.model_first) as usize];
                assert_eq!(message.id, id, "offset {} holds the wrong message", message.offset);
                assert_eq!(message.payload, &payload(id, len)[..]);
                if let Some(&last) = offsets.last() {
                    assert_eq!(message.offset, last + 1, "offsets in a read are dense");
                }
                offsets.push(message.offset);
            }
            at += header.batch_length as usize;
        }
        offsets
    }

    /// Reads the whole log back from its first offset and checks it is the model's, message by
    /// message; only offsets recovery reported damaged may be missing. Returns the offsets served.
    pub fn check_all(&mut self) -> u64 {
        let mut next = self.log.first_offset();
        assert!(next >= self.model_first);
        let end = self.log.end_offset();
        assert_eq!(end, self.model_end());
        let mut served = 0;
        while next < end {
            let read = self.read(ReadStart::Offset(next), 1000, 1 << 20).expect("read back");
            let offsets = self.check_batches(&read);
            let Some(&first) = offsets.iter().find(|&&offset| offset >= next) else {
                assert!(
                    self.lost.iter().any(|&(from, to)| from <= next && to >= end),
                    "nothing served from {next} to the end {end}, and it is not reported damaged"
                );
                break;
            };
            if first > next {
                assert!(
                    self.lost.iter().any(|&(from, to)| from <= next && first <= to),
                    "offsets {next}..{first} are missing and not reported damaged (damaged: {:?})",
                    self.lost
                );
            }
            let last = *offsets.last().unwrap();
            served += last + 1 - first;
            next = last + 1;
        }
        served
    }

    /// Power loss, then reopen; checks the durability promise and trims the model to what survived.
    /// An owned log's claim is what the harness knows: durable to where the log said, retained
    /// from its first offset.
    pub fn crash_and_reopen(&mut self) -> RecoveryReport {
        let claim = OwnerClaim { frontier: self.durable, retained_from: self.model_first, checked_to: None };
        self.crash_and_reopen_claimed(claim)
    }

    /// Power loss, then reopen; an owned log is opened with `claim` (ignored otherwise).
    pub fn crash_and_reopen_claimed(&mut self, claim: OwnerClaim) -> RecoveryReport {
        self.world.crash();
        self.log = if self.owned {
            PartitionLog::open_owned(&mut self.world, self.config.clone(), NAMESPACE, OWNER, claim)
        } else {
            PartitionLog::open(&mut self.world, self.config.clone(), NAMESPACE, OWNER)
        };
        self.reads.clear();
        self.wait_open();
        let report = self.reports.last().cloned().expect("opened");
        self.lost.extend(report.damaged.iter().copied());
        let end = self.log.end_offset();
        // Damage may take synced messages, but never silently. An owned log promises what its
        // owner claims.
        let promised = if self.owned { claim.frontier } else { self.durable };
        assert!(
            end >= promised || report.corrupt,
            "synced messages lost unreported: durable {promised} but recovered to {end}"
        );
        assert!(end <= self.model_end(), "recovered more than was appended");
        self.model.truncate((end - self.model_first) as usize);
        let first = self.log.first_offset();
        assert!(first >= self.model_first && first <= end);
        self.model.drain(..(first - self.model_first) as usize);
        self.model_first = first;
        self.durable = end;
        self.batch_bases.retain(|base| *base < end);
        report
    }

    /// Cuts the log at the base of a batch (waiting out `Busy`) and lets the cut land; the model
    /// forgets what was cut, and the synced point falls to the cut.
    pub fn truncate(&mut self, from_offset: u64) -> Result<(), vireo_storage::partition::TruncateError> {
        loop {
            match self.log.truncate(&mut self.world, from_offset) {
                Ok(()) => break,
                Err(vireo_storage::partition::TruncateError::Busy) => {
                    assert!(self.step(), "busy with nothing in flight")
                }
                Err(error) => return Err(error),
            }
        }
        assert_eq!(self.log.end_offset(), from_offset);
        self.model.truncate((from_offset - self.model_first) as usize);
        self.batch_bases.retain(|base| *base < from_offset);
        self.durable = self.durable.min(from_offset);
        self.settle();
        Ok(())
    }

    /// Deletes everything and goes on at `offset` (`PartitionLog::purge_to`: at least the end,
    /// unless the log is empty); the model follows.
    pub fn purge_to(&mut self, offset: u64) {
        self.settle();
        let empty = self.log.first_offset() == self.log.end_offset();
        if empty {
            // Starting over lower down: nothing below `offset` is held, durable or not.
            self.durable = self.durable.min(offset);
        }
        assert!(self.log.purge_to(&mut self.world, offset), "an idle log purges");
        self.settle();
        let end = if empty { offset } else { self.model_end().max(offset) };
        assert_eq!((self.log.first_offset(), self.log.end_offset()), (end, end));
        self.model.clear();
        self.model_first = end;
        self.batch_bases.clear();
    }

    /// Retention as the log applies it; the model follows the first offset.
    pub fn retention(&mut self, now_us: u64) {
        self.log.apply_retention(&mut self.world, now_us);
        self.settle();
        let first = self.log.first_offset();
        assert!(first >= self.model_first);
        self.model.drain(..(first - self.model_first) as usize);
        self.model_first = first;
    }
}
