//! Vireo's on-disk formats and the arithmetic of where things live in a file.
//!
//! This crate owns bytes at rest: message batches, partition logs (segments, sparse indexes,
//! partition superblocks, recovery), consumer offsets, the two-copy superblock (`superblock.a` /
//! `superblock.b`), the layout of the VSR write-ahead log (`journal.wal`) and of the checkpoint file
//! (`snapshot.bin`).
//! It knows nothing of replication: the replica in `vireo-protocol` decides *what* to write and
//! *when*; this crate says *where* and *how the bytes look*, and checks them on the way back in.

pub mod batch;
pub mod checksum;
pub mod layout;
pub mod offsets;
pub mod partition;
pub mod superblock;

pub use layout::{snapshot_file, superblock_files, wal_file, WalLayout};
pub use superblock::{Superblock, SuperblockError, VsrState};
