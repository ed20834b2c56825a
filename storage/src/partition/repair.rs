//! Repairing damage in place: a damaged run that recovery kept inside the log (valid batches
//! follow it) is written again, at its place, with the batches a peer holds there. A replicated
//! log whose copies hold the same bytes at the same offsets (a VSR partition's: every replica
//! stores the primary's stamped batches) gets its run back whole, and reads no longer step over
//! it. Until the rewrite completes the run stays damaged; a crash before it is synced may leave
//! it damaged again, and recovery finds it again.

use vireo_io::{IoError, Token};

use super::segment::Damage;
use super::{Op, PartitionLog, Status};
use crate::batch;

/// Why a repair was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RepairError {
    #[error("the partition is not open")]
    NotOpen,
    #[error("no damaged run starts at offset {offset}")]
    NoDamageAt { offset: u64 },
    #[error("a repair of this run is in flight")]
    InFlight,
    #[error("the batches do not fill the damaged run exactly: {reason}")]
    Mismatch { reason: &'static str },
}

/// A rewrite of a damaged run in flight.
#[derive(Debug)]
pub(super) struct RepairWrite {
    pub(super) segment_start: u64,
    pub(super) from_offset: u64,
}

impl PartitionLog {
    /// Every damaged run the log holds, oldest first.
    pub fn damaged_runs(&self) -> Vec<Damage> {
        self.segments.iter().flat_map(|segment| segment.damaged.iter().copied()).collect()
    }

    /// Whether the rewrite of the damaged run at `from_offset` is in flight.
    pub fn repair_in_flight(&self, from_offset: u64) -> bool {
        self.repairing.iter().any(|write| write.from_offset == from_offset)
    }

    /// Writes `batches` (whole stamped batches, back to back) over the damaged run that starts
    /// at `from_offset`: they must start there, continue each other, end where the run ends and
    /// take exactly its bytes. The run stays damaged until the write completes.
    pub fn repair(
        &mut self,
        io: &mut impl vireo_io::Io,
        from_offset: u64,
        batches: Vec<u8>,
    ) -> Result<(), RepairError> {
        if self.status != Status::Open {
            return Err(RepairError::NotOpen);
        }
        if self.repairing.iter().any(|write| write.from_offset == from_offset) {
            return Err(RepairError::InFlight);
        }
        let (segment_start, damage) = self
            .segments
            .iter()
            .find_map(|segment| {
                segment
                    .damaged
                    .iter()
                    .find(|damage| damage.from_offset == from_offset)
                    .map(|d| (segment.start_offset, *d))
            })
            .ok_or(RepairError::NoDamageAt { offset: from_offset })?;
        if batches.len() as u64 != damage.len {
            return Err(RepairError::Mismatch { reason: "not the run's length" });
        }
        let mut at = 0usize;
        let mut expected = damage.from_offset;
        while at < batches.len() {
            let header = batch::validate(&batches[at..])
                .map_err(|_| RepairError::Mismatch { reason: "a batch does not validate" })?;
            if header.base_offset != expected || header.partition_id != self.config.partition_id {
                return Err(RepairError::Mismatch { reason: "a batch is not where the run goes on" });
            }
            expected = header.end_offset();
            at += header.batch_length as usize;
        }
        if expected != damage.to_offset || at != batches.len() {
            return Err(RepairError::Mismatch { reason: "the batches do not end where the run does" });
        }
        let file = self.file(vireo_io::FileKind::Segment(segment_start));
        let token: Token = self.token(Op::Repair { from_offset });
        io.write(file, damage.position, batches.into(), token);
        self.repairing.push(RepairWrite { segment_start, from_offset });
        Ok(())
    }

    /// A repair's write completed: the run is whole again (synced with the next sync), or the
    /// write failed and the run stays damaged (the owner may try again).
    pub(super) fn on_repair_written(&mut self, from_offset: u64, result: Result<(), IoError>) {
        let at = self.repairing.iter().position(|write| write.from_offset == from_offset).expect("a repair in flight");
        let write = self.repairing.remove(at);
        if result.is_err() {
            return;
        }
        let file = self.file(vireo_io::FileKind::Segment(write.segment_start));
        let Some(at) = self.segment_position(write.segment_start) else { return };
        let segment = &mut self.segments[at];
        segment.damaged.retain(|damage| damage.from_offset != write.from_offset);
        self.dirty.insert(file);
        self.repairs_unsynced = true;
        self.repaired += 1;
    }
}
