//! The free-space reserve: a node refuses new data while the file system that holds its data
//! directory has less free space than the reserve, so that what it already took (its superblocks,
//! checkpoints, the prepares in flight, the deletes that bring space back) still finds room, and
//! a client learns at once that its send cannot be stored instead of waiting for a write that
//! cannot land.
//!
//! Refused while low: sends, and the creates that make partitions (streams, topics, partitions),
//! each with the reference's nearest error code. Everything else goes on: polls, logins, the
//! reads, consumer offsets (a few bytes in a file that exists), deletes and purges (which are how
//! space comes back). Judged on the node's clock: every tick reads `Io::disk_space` (a counter
//! the file system keeps in memory), so the state follows a roll, a retention pass or an
//! operator's cleanup within one tick, and leaves it by itself once space is back.
//!
//! The reserve is `min_free_bytes`, but never more than a twentieth of the file system: the
//! default is sized for a server's disk, and on a small one it would leave nothing to write.
//! It is left only once free space is a tenth of the reserve above it, so that a node that
//! hovers at the line does not flip on every tick.
//!
//! A disk that failed a write or sync (EIO, EROFS) is worse: no write is retried and trusted
//! after that ("fsyncgate"), so a single node whose group stopped on one refuses every request
//! that would write (`on_storage_failed`; the reference's codes above, 1 "Error" for the rest:
//! logins, logouts, offsets, the other metadata commands) and answers reads from what it holds,
//! until it is restarted on a good disk. A cluster node exits instead: its peers go on, and
//! repair it once it restarts.

use vireo_io::DiskSpace;

use crate::metadata_plane::OPERATIONS;
use crate::node::OPERATION_NON_REPLICATED;
use crate::partition::request::OPERATION_SEND_MESSAGES;

/// The reference's error codes (`IggyError`) a refusal answers with, by what was refused:
/// `CannotSaveMessagesToSegment`, `CannotCreateStream`, `CannotCreateTopic`,
/// `CannotCreatePartition`.
pub const STATUS_CANNOT_SAVE_MESSAGES: u32 = 4006;
pub const STATUS_CANNOT_CREATE_STREAM: u32 = 1006;
pub const STATUS_CANNOT_CREATE_TOPIC: u32 = 2006;
pub const STATUS_CANNOT_CREATE_PARTITION: u32 = 3000;
/// `CannotWriteToFile`: a write the reserve lets through that still met a full disk.
pub const STATUS_CANNOT_WRITE_TO_FILE: u32 = 10006;
/// `Error`: what any other write is refused with once the disk failed.
pub const STATUS_ERROR: u32 = 1;

/// The reserve is at most the file system's size divided by this.
pub const RESERVE_SHARE_OF_TOTAL: u64 = 20;

/// A node's view of its disk's free space, and whether it refuses new data.
#[derive(Clone, Debug)]
pub struct DiskReserve {
    min_free_bytes: u64,
    /// The last reading (`None`: never read, or the driver does not know).
    space: Option<DiskSpace>,
    low: bool,
    /// Requests refused since the node last went low.
    refused_in_episode: u64,
    /// A write or sync of one of the node's groups failed: every write is refused for good.
    storage_failed: bool,
}

/// A change of state, for the driver's log (one line in, one line out).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReserveChange {
    /// Free space fell below the reserve: new data is refused from now on.
    Low { free: u64, reserve: u64 },
    /// Free space is back above the reserve: new data is taken again. `refused`: the requests
    /// refused in between.
    Recovered { free: u64, reserve: u64, refused: u64 },
}

impl DiskReserve {
    /// `min_free_bytes` 0: no reserve.
    pub fn new(min_free_bytes: u64) -> DiskReserve {
        DiskReserve { min_free_bytes, space: None, low: false, refused_in_episode: 0, storage_failed: false }
    }

    /// The reserve on a file system of `total` bytes.
    pub fn reserve_of(&self, total: u64) -> u64 {
        self.min_free_bytes.min(total / RESERVE_SHARE_OF_TOTAL)
    }

    pub fn space(&self) -> Option<DiskSpace> {
        self.space
    }

    /// The reserve on the disk last read (0 when none was).
    pub fn reserve(&self) -> u64 {
        self.space.map_or(0, |space| self.reserve_of(space.total))
    }

    pub fn is_low(&self) -> bool {
        self.low
    }

    pub fn storage_failed(&self) -> bool {
        self.storage_failed
    }

    /// A group's write or sync failed: from now on every write is refused.
    pub fn on_storage_failed(&mut self) {
        self.storage_failed = true;
    }

    /// A new reading of the disk. A disk that cannot be read any more refuses nothing: the
    /// writes themselves answer for it then.
    pub fn observe(&mut self, space: Option<DiskSpace>) -> Option<ReserveChange> {
        self.space = space;
        let Some(space) = space else {
            return self.low.then(|| self.recover(0, 0));
        };
        let reserve = self.reserve_of(space.total);
        if !self.low && space.free < reserve {
            self.low = true;
            self.refused_in_episode = 0;
            return Some(ReserveChange::Low { free: space.free, reserve });
        }
        if self.low && space.free >= reserve + reserve / 10 {
            return Some(self.recover(space.free, reserve));
        }
        None
    }

    fn recover(&mut self, free: u64, reserve: u64) -> ReserveChange {
        self.low = false;
        ReserveChange::Recovered { free, reserve, refused: std::mem::take(&mut self.refused_in_episode) }
    }

    /// The status a request of `operation` is refused with now, if it is.
    pub fn refusal(&mut self, operation: u8) -> Option<u32> {
        if self.storage_failed && operation != OPERATION_NON_REPLICATED {
            return Some(refused_with(operation).unwrap_or(STATUS_ERROR));
        }
        if !self.low {
            return None;
        }
        let status = refused_with(operation)?;
        self.refused_in_episode += 1;
        Some(status)
    }
}

/// What a request of `operation` is answered with when a group refused it because a write for
/// it met a full disk (`vireo_protocol::replica::STATUS_NO_SPACE`): the same code as a refusal
/// below the reserve, and `CannotWriteToFile` for the writes the reserve lets through (a login,
/// an offset, a poll that commits its offset).
pub fn no_space_status(operation: u8) -> u32 {
    refused_with(operation).unwrap_or(STATUS_CANNOT_WRITE_TO_FILE)
}

/// Whether a request of `operation` is new data refused while the disk is low (a send, a
/// create): also the one a group refuses when its write met a full disk.
pub fn refused_when_low(operation: u8) -> bool {
    refused_with(operation).is_some()
}

/// What a request of `operation` is refused with while the disk is low; `None` for the ones
/// that go on.
fn refused_with(operation: u8) -> Option<u32> {
    use vireo_protocol::wire::command as c;
    if operation == OPERATION_SEND_MESSAGES {
        return Some(STATUS_CANNOT_SAVE_MESSAGES);
    }
    let code = OPERATIONS.iter().find(|(op, _)| *op == operation).map(|(_, code)| *code)?;
    match code {
        c::CREATE_STREAM => Some(STATUS_CANNOT_CREATE_STREAM),
        c::CREATE_TOPIC => Some(STATUS_CANNOT_CREATE_TOPIC),
        c::CREATE_PARTITIONS => Some(STATUS_CANNOT_CREATE_PARTITION),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::partition::request::{OPERATION_POLL_MESSAGES, OPERATION_STORE_CONSUMER_OFFSET};

    const MIB: u64 = 1 << 20;

    fn disk(free: u64, total: u64) -> Option<DiskSpace> {
        Some(DiskSpace { free, total })
    }

    #[test]
    fn the_reserve_is_the_configured_bytes_or_a_twentieth_of_a_small_disk() {
        let reserve = DiskReserve::new(1024 * MIB);
        assert_eq!(reserve.reserve_of(100 * 1024 * MIB), 1024 * MIB);
        assert_eq!(reserve.reserve_of(100 * MIB), 5 * MIB);
        assert_eq!(DiskReserve::new(0).reserve_of(100 * MIB), 0);
    }

    #[test]
    fn below_the_reserve_sends_and_creates_are_refused_and_the_rest_goes_on() {
        let mut reserve = DiskReserve::new(10 * MIB);
        assert_eq!(reserve.observe(disk(11 * MIB, 1000 * MIB)), None);
        assert_eq!(reserve.refusal(OPERATION_SEND_MESSAGES), None);
        assert_eq!(
            reserve.observe(disk(9 * MIB, 1000 * MIB)),
            Some(ReserveChange::Low { free: 9 * MIB, reserve: 10 * MIB })
        );
        assert_eq!(reserve.observe(disk(8 * MIB, 1000 * MIB)), None, "one change per episode");
        assert_eq!(reserve.refusal(OPERATION_SEND_MESSAGES), Some(STATUS_CANNOT_SAVE_MESSAGES));
        assert_eq!(reserve.refusal(128), Some(STATUS_CANNOT_CREATE_STREAM));
        assert_eq!(reserve.refusal(132), Some(STATUS_CANNOT_CREATE_TOPIC));
        assert_eq!(reserve.refusal(136), Some(STATUS_CANNOT_CREATE_PARTITION));
        // Deletes, purges, consumer groups, users, offsets and polls go on.
        for operation in
            [130, 131, 134, 135, 137, 138, 139, 141, OPERATION_STORE_CONSUMER_OFFSET, OPERATION_POLL_MESSAGES]
        {
            assert_eq!(reserve.refusal(operation), None, "operation {operation}");
        }
        // Just above the reserve is not enough to leave: a tenth of it above.
        assert_eq!(reserve.observe(disk(10 * MIB + 1, 1000 * MIB)), None);
        assert!(reserve.is_low());
        assert_eq!(
            reserve.observe(disk(12 * MIB, 1000 * MIB)),
            Some(ReserveChange::Recovered { free: 12 * MIB, reserve: 10 * MIB, refused: 4 })
        );
        assert_eq!(reserve.refusal(OPERATION_SEND_MESSAGES), None);
    }

    #[test]
    fn a_failed_disk_refuses_every_write_for_good_and_no_read() {
        let mut reserve = DiskReserve::new(10 * MIB);
        reserve.on_storage_failed();
        assert_eq!(reserve.refusal(OPERATION_SEND_MESSAGES), Some(STATUS_CANNOT_SAVE_MESSAGES));
        assert_eq!(reserve.refusal(132), Some(STATUS_CANNOT_CREATE_TOPIC));
        for operation in [1, 3, 130, 141, OPERATION_STORE_CONSUMER_OFFSET] {
            assert_eq!(reserve.refusal(operation), Some(STATUS_ERROR), "operation {operation}");
        }
        assert_eq!(reserve.refusal(OPERATION_NON_REPLICATED), None, "reads are answered");
        reserve.observe(disk(500 * MIB, 1000 * MIB));
        assert_eq!(
            reserve.refusal(OPERATION_SEND_MESSAGES),
            Some(STATUS_CANNOT_SAVE_MESSAGES),
            "space does not heal it"
        );
    }

    #[test]
    fn a_disk_that_cannot_be_read_refuses_nothing() {
        let mut reserve = DiskReserve::new(10 * MIB);
        assert_eq!(reserve.observe(None), None);
        reserve.observe(disk(0, 1000 * MIB));
        assert!(reserve.is_low());
        assert_eq!(reserve.observe(None), Some(ReserveChange::Recovered { free: 0, reserve: 0, refused: 0 }));
        assert!(!reserve.is_low());
    }
}
