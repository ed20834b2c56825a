//! Where each durable thing of a VSR replica lives.
//!
//! `journal.wal` has two zones, both indexed by slot = op % slot_count:
//! - the *headers zone*: slot_count redundant 256-byte prepare headers, at offset 0;
//! - the *prepares zone*: slot_count slots of `prepare_size_max` bytes, each `[header][body]`.
//!
//! A prepare is written to the prepares zone and synced *before* its redundant header is written.
//! So a valid redundant header proves that its prepare was once durable, and recovery can tell a
//! prepare torn by a crash (never acknowledged: no redundant header yet) from one damaged later by
//! the disk (possibly acknowledged: its header survives, its body is repaired from a peer).
//!
//! `snapshot.bin` holds two checkpoint regions of `snapshot_size_max` bytes; a new checkpoint is
//! written to the region the durable superblock does not point at, so a crash while writing it
//! leaves the previous checkpoint whole.

use vireo_io::{FileId, FileKind, Namespace};

/// The two superblock copies of a group, in the order `superblock.a`, `superblock.b`.
pub fn superblock_files(namespace: Namespace) -> [FileId; 2] {
    [FileId::new(namespace, FileKind::SuperblockA), FileId::new(namespace, FileKind::SuperblockB)]
}

pub fn wal_file(namespace: Namespace) -> FileId {
    FileId::new(namespace, FileKind::Wal)
}

pub fn snapshot_file(namespace: Namespace) -> FileId {
    FileId::new(namespace, FileKind::Snapshot)
}

/// Every message header, and so every WAL header slot, is this many bytes.
pub const HEADER_SIZE: usize = 256;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WalLayout {
    pub slot_count: u64,
    pub prepare_size_max: u64,
}

impl WalLayout {
    pub fn new(slot_count: u64, prepare_size_max: u64) -> Self {
        assert!(slot_count >= 8, "journal_slots must be at least 8");
        assert!(prepare_size_max >= HEADER_SIZE as u64);
        assert!(prepare_size_max.is_multiple_of(HEADER_SIZE as u64));
        WalLayout { slot_count, prepare_size_max }
    }

    pub fn slot(&self, op: u64) -> u64 {
        op % self.slot_count
    }

    pub fn header_offset(&self, slot: u64) -> u64 {
        assert!(slot < self.slot_count);
        slot * HEADER_SIZE as u64
    }

    pub fn headers_zone_size(&self) -> u64 {
        self.slot_count * HEADER_SIZE as u64
    }

    pub fn prepare_offset(&self, slot: u64) -> u64 {
        assert!(slot < self.slot_count);
        self.headers_zone_size() + slot * self.prepare_size_max
    }

    pub fn prepares_zone_size(&self) -> u64 {
        self.slot_count * self.prepare_size_max
    }

    pub fn file_size(&self) -> u64 {
        self.headers_zone_size() + self.prepares_zone_size()
    }
}

/// The two checkpoint regions of `snapshot.bin`.
pub fn snapshot_region_offset(region: u8, snapshot_size_max: u64) -> u64 {
    assert!(region < 2);
    region as u64 * snapshot_size_max
}
