//! Vireo's on-disk formats and the arithmetic of where things live in a file.
//!
//! This crate owns bytes at rest: message batches, partition logs (segments, sparse indexes,
//! partition superblocks, recovery), consumer offsets, the two-copy superblock (`superblock.a` /
//! `superblock.b`), the layout of the VSR write-ahead log (`journal.wal`) and of the checkpoint file
//! (`snapshot.bin`).
//! It knows nothing of replication: the replica in `vireo-protocol` decides *what* to write and
//! *when*; this crate says *where* and *how the bytes look*, and checks them on the way back in.
//!
//! # Where a partition lives
//!
//! A partition lives in `streams/{stream}/topics/{topic}/partitions/{partition}/` (ids from 0):
//! - segments `{start_offset:020}.log`, of stamped batches (their format is in `PROTOCOL.md`);
//! - each segment's sparse `.index`: 24-byte entries of offset, timestamp and position;
//! - `superblock.a` and `superblock.b`, of which the newest valid copy wins. A partition superblock
//!   records the frontier below which every message was synced; it is rewritten after each group
//!   commit, and rewrites are coalesced;
//! - consumer offsets, in `offsets/consumers/{id}` and `offsets/groups/{id}`.
//!
//! The metadata group's WAL, checkpoint and superblocks are in `metadata/`.
//!
//! # Appends, syncs, reads and retention
//!
//! An append is stamped (offset, timestamp, checksums) and buffered per segment until the topic's
//! flush thresholds (1024 messages or 1 MiB) are reached or the device is idle. A segment is sealed
//! at the topic's segment size (1 GiB); the batch that crosses it is written whole.
//!
//! A sync covers every write completed before it, and the next sync covers every batch that arrived
//! meanwhile (group commit), so many appends share one sync.
//!
//! Reads, by offset or by timestamp, return whole batches, each checked against its checksums: a
//! damaged batch is reported, never served.
//!
//! Retention deletes the oldest sealed segments, by message expiry or by topic size.
//!
//! A full disk rejects the appends whose write failed (with the offset each would have had), keeps
//! every byte below them, and keeps serving reads.
//!
//! # Recovery
//!
//! On open, recovery:
//! 1. reads the superblock;
//! 2. trusts the sealed segments below its frontier when their index is whole, and checks only
//!    their tail (`verify_on_open`, which `vireo-storage-bench verify` uses, checks every batch);
//! 3. reads everything else batch by batch;
//! 4. rebuilds missing or bad indexes.
//!
//! Damage is not a tear. A batch that fails its checks below the frontier was durable, so recovery
//! does not stop there: it searches on for the next valid batch (or segment), keeps every batch
//! after the damage, records the damaged run (reads step over it) and reports it (`damaged`,
//! `corrupt`). One flipped bit loses the batch it hits and nothing else. Only two things cut the
//! log: a bad batch past the frontier (the torn tail of the last, unsynced writes), and damage with
//! no valid batch after it. A log that ends short of the recorded frontier is reported `corrupt`.
//! `vireo-storage-bench verify` exits non-zero on any damage.
//!
//! A damaged run that recovery kept inside the log can be written again in place with the same
//! batches from another copy (`PartitionLog::repair`, in `partition/repair.rs`). On a cluster the
//! node's segment log does so with a peer's batches; a single node has no other copy and keeps
//! every batch but the damaged one.
//!
//! # vireo-storage-bench
//!
//! The storage bench runs on a real disk, through the glommio driver (about 15 s and 2.5 GB of free
//! space):
//! - it appends 1 GiB of 1000-byte messages, in batches of 250, to 1, 4 and 16 partitions, without
//!   and with per-batch durability (every batch waits for a sync; syncs are group-committed);
//! - it measures the same directory's raw O_DIRECT write rate (1 MiB writes, 16 in flight) and its
//!   fdatasync latency;
//! - it reads the 16-partition log back, cold and warm.
//!
//! ```sh
//! vireo-storage-bench                # a table
//! vireo-storage-bench --json         # one JSON object
//! # options: --dir D (default: $TMPDIR/vireo-storage-bench), --size-mib N,
//! #          --only unsynced1,durable16
//! ```
//!
//! `vireo-storage-bench soak` and `verify` are the two halves of the SIGKILL test
//! (`storage/tests/sigkill.rs`).

pub mod batch;
pub mod checksum;
pub mod layout;
pub mod offsets;
pub mod partition;
pub mod superblock;

pub use layout::{snapshot_file, superblock_files, wal_file, WalLayout};
pub use superblock::{Superblock, SuperblockError, VsrState};
