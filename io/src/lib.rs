//! The `Io` boundary: everything a Vireo state machine may ask of the world, and the events the
//! world answers with.
//!
//! State machines are sans-IO (quinn-proto's model): they never block, never await, never read a
//! clock, a socket, a file, an environment variable or an unseeded random source. They call the
//! *asks* below and later receive *events* (`Completion`s, messages, ticks) from their driver. A
//! completion is never delivered inline from the call that asked for it: that is what lets the
//! simulator delay, reorder, fail or lose it.
//!
//! Two drivers implement this trait: the simulator in `vireo-sim` (virtual time, seeded faults) and
//! the glommio io_uring driver in `glommio` (Linux; one shard per core).

use std::fmt;

/// A reference-counted byte buffer: what a write is handed, so that the bytes a journal or a
/// log holds go to the disk without a copy (a slice of a prepare's body is one).
pub use bytes::Bytes;

#[cfg(all(feature = "glommio", target_os = "linux"))]
pub mod glommio;

pub mod out_frame;
pub mod receive_buffers;

pub use out_frame::OutFrame;

/// Time in nanoseconds, monotonic: virtual time since the run began in the simulator, wall-clock
/// time since the Unix epoch (anchored when the driver starts) in the glommio driver.
pub type Instant = u64;

/// The fixed interval at which a driver calls a state machine's `tick`: every timeout in Vireo is
/// counted in ticks, never in wall-clock time.
pub const TICK_NS: u64 = 10_000_000;

/// Where a message goes: another replica of the same cluster, or a client connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Peer {
    Replica(u8),
    Client(u128),
}

impl fmt::Display for Peer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Peer::Replica(replica) => write!(f, "r{replica}"),
            Peer::Client(client) => write!(f, "c{:04x}", client & 0xffff),
        }
    }
}

/// A group's namespace, packed as `PROTOCOL.md` says: stream (20 bits) << 32 | topic (12 bits) << 20 |
/// partition (20 bits); bit 63 marks the metadata group. Every durable thing a replica group owns
/// lives in its namespace's directory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Namespace(pub u64);

impl Namespace {
    pub const METADATA: Namespace = Namespace(1 << 63);
    pub const STREAM_MAX: u32 = (1 << 20) - 1;
    pub const TOPIC_MAX: u32 = (1 << 12) - 1;
    pub const PARTITION_MAX: u32 = (1 << 20) - 1;

    pub fn partition(stream: u32, topic: u32, partition: u32) -> Namespace {
        assert!(stream <= Self::STREAM_MAX && topic <= Self::TOPIC_MAX && partition <= Self::PARTITION_MAX);
        Namespace(((stream as u64) << 32) | ((topic as u64) << 20) | partition as u64)
    }

    pub fn is_metadata(self) -> bool {
        self.0 >> 63 == 1
    }

    /// (stream, topic, partition) of a partition's namespace.
    pub fn unpack(self) -> (u32, u32, u32) {
        (((self.0 >> 32) & 0xf_ffff) as u32, ((self.0 >> 20) & 0xfff) as u32, (self.0 & 0xf_ffff) as u32)
    }

    /// The directory, relative to the data directory, holding this namespace's files.
    pub fn directory(self) -> String {
        if self.is_metadata() {
            "metadata".to_string()
        } else {
            let (stream, topic, partition) = self.unpack();
            format!("streams/{stream}/topics/{topic}/partitions/{partition}")
        }
    }
}

/// Which file of a namespace: the names are fixed by the data-directory layout (`ARCHITECTURE.md`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FileKind {
    SuperblockA,
    SuperblockB,
    /// `journal.wal`: the VSR write-ahead log of a group that keeps one (the metadata plane).
    Wal,
    /// `snapshot.bin`: checkpoints of that group's state.
    Snapshot,
    /// `{start_offset:020}.log`: a partition segment.
    Segment(u64),
    /// `{start_offset:020}.index`: the sparse index of that segment.
    Index(u64),
    /// `offsets/consumers/{id}`.
    ConsumerOffset(u32),
    /// `offsets/groups/{id}`.
    GroupOffset(u32),
}

impl FileKind {
    /// The file's path relative to its namespace's directory.
    pub fn file_name(self) -> String {
        match self {
            FileKind::SuperblockA => "superblock.a".to_string(),
            FileKind::SuperblockB => "superblock.b".to_string(),
            FileKind::Wal => "journal.wal".to_string(),
            FileKind::Snapshot => "snapshot.bin".to_string(),
            FileKind::Segment(start) => format!("{start:020}.log"),
            FileKind::Index(start) => format!("{start:020}.index"),
            FileKind::ConsumerOffset(id) => format!("offsets/consumers/{id}"),
            FileKind::GroupOffset(id) => format!("offsets/groups/{id}"),
        }
    }

    /// The inverse of `file_name`; `None` for a name that is not one of Vireo's files.
    pub fn parse(name: &str) -> Option<FileKind> {
        let number = |digits: &str| -> Option<u64> {
            (!digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit())).then(|| digits.parse().ok()).flatten()
        };
        match name {
            "superblock.a" => Some(FileKind::SuperblockA),
            "superblock.b" => Some(FileKind::SuperblockB),
            "journal.wal" => Some(FileKind::Wal),
            "snapshot.bin" => Some(FileKind::Snapshot),
            _ => {
                if let Some(start) = name.strip_suffix(".log").filter(|digits| digits.len() == 20) {
                    return number(start).map(FileKind::Segment);
                }
                if let Some(start) = name.strip_suffix(".index").filter(|digits| digits.len() == 20) {
                    return number(start).map(FileKind::Index);
                }
                if let Some(id) = name.strip_prefix("offsets/consumers/") {
                    return number(id).and_then(|id| u32::try_from(id).ok()).map(FileKind::ConsumerOffset);
                }
                if let Some(id) = name.strip_prefix("offsets/groups/") {
                    return number(id).and_then(|id| u32::try_from(id).ok()).map(FileKind::GroupOffset);
                }
                None
            }
        }
    }
}

/// A file a state machine owns: which group's, and which of its files. The driver maps it to a
/// path under the data directory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FileId {
    pub namespace: Namespace,
    pub kind: FileKind,
}

impl FileId {
    pub fn new(namespace: Namespace, kind: FileKind) -> FileId {
        FileId { namespace, kind }
    }

    /// The path relative to the data directory.
    pub fn path(&self) -> String {
        format!("{}/{}", self.namespace.directory(), self.kind.file_name())
    }
}

impl fmt::Display for FileId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.path())
    }
}

/// The space of the file system that holds a node's data directory, in bytes: what a node's
/// free-space reserve is judged by (`Io::disk_space`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DiskSpace {
    /// What new writes may still take (for an unprivileged writer: blocks the file system keeps
    /// for root are not counted).
    pub free: u64,
    pub total: u64,
}

/// Identifies an outstanding I/O request; handed back unchanged in its completion.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Token(pub u64);

/// Why an I/O request failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum IoError {
    /// The device reported an error for these sectors (a latent sector error, EIO).
    #[error("the device failed to read or write these sectors")]
    Device,
    /// The device is full (ENOSPC); nothing was written.
    #[error("no space left on the device")]
    NoSpace,
    /// The file does not exist (a read, sync or remove of a file never written).
    #[error("no such file")]
    NotFound,
}

/// The result of one I/O request, delivered later as an event.
#[derive(Debug, PartialEq, Eq)]
pub enum Completion {
    Read {
        token: Token,
        result: Result<Vec<u8>, IoError>,
    },
    Write {
        token: Token,
        result: Result<(), IoError>,
    },
    Sync {
        token: Token,
        result: Result<(), IoError>,
    },
    Truncate {
        token: Token,
        result: Result<(), IoError>,
    },
    Remove {
        token: Token,
        result: Result<(), IoError>,
    },
    /// The files of a namespace, with their sizes in bytes, in `FileKind` order.
    List {
        token: Token,
        result: Result<Vec<(FileKind, u64)>, IoError>,
    },
}

impl Completion {
    pub fn token(&self) -> Token {
        match self {
            Completion::Read { token, .. }
            | Completion::Write { token, .. }
            | Completion::Sync { token, .. }
            | Completion::Truncate { token, .. }
            | Completion::Remove { token, .. }
            | Completion::List { token, .. } => *token,
        }
    }
}

/// The asks. Every effect a state machine has on the world goes through one of these methods.
pub trait Io {
    /// Monotonic time in nanoseconds (virtual in the simulator).
    fn now(&self) -> Instant;

    /// Sends a whole message (header and body) to a peer. Delivery is not guaranteed: the network
    /// may drop, delay, duplicate or reorder it.
    fn send(&mut self, to: Peer, message: Vec<u8>);

    /// `send` for a message in parts whose bytes other owners share (a prepare's body, which the
    /// journal holds; a forwarded request, which its forwarder keeps): a driver that can write
    /// the parts as they are overrides it, so the bytes reach the socket without being copied
    /// into one buffer first. By default the parts are joined.
    fn send_frame(&mut self, to: Peer, frame: OutFrame) {
        self.send(to, frame.into_whole())
    }

    /// Reads `len` bytes at `offset`; bytes past the end of the file (or of a file never written)
    /// read as zero.
    fn read(&mut self, file: FileId, offset: u64, len: usize, token: Token);

    /// Writes `bytes` at `offset`, creating the file (and its directories) if need be. Not durable
    /// until a later `sync` of the same file completes.
    fn write(&mut self, file: FileId, offset: u64, bytes: Bytes, token: Token);

    /// Writes `parts` back to back at `offset`: one write, as `write` is (one completion, torn
    /// as one), from buffers that lie apart (a prepare's header and the body its journal shares).
    /// A driver that can write from several buffers at once does (`pwritev`); by default they
    /// are joined into one.
    fn write_vectored(&mut self, file: FileId, offset: u64, parts: [Bytes; 2], token: Token) {
        let mut joined = Vec::with_capacity(parts[0].len() + parts[1].len());
        joined.extend_from_slice(&parts[0]);
        joined.extend_from_slice(&parts[1]);
        self.write(file, offset, joined.into(), token)
    }

    /// Makes every write to `file` that completed before this call durable, and the file's
    /// existence and size with them. Syncing a file that does not exist (any more) succeeds.
    fn sync(&mut self, file: FileId, token: Token);

    /// Cuts the file to `len` bytes. Durable at the next completed `sync` of the file.
    fn truncate(&mut self, file: FileId, len: u64, token: Token);

    /// Deletes the file. Removing a file that does not exist succeeds.
    fn remove(&mut self, file: FileId, token: Token);

    /// Lists the files of a namespace with their sizes (what a recovery opens).
    fn list(&mut self, namespace: Namespace, token: Token);

    /// Seeded randomness (jitter, nonces, peer choice). Deterministic in the simulator.
    fn random(&mut self) -> u64;

    /// The space left where the node's files live, read now, like the clock: answered at once,
    /// because it is a counter the file system keeps in memory (`statvfs`), not I/O. `None`: not
    /// known (a disk without a bound in the simulator), which no reserve refuses on.
    fn disk_space(&self) -> Option<DiskSpace> {
        None
    }
}

/// Implements every ask of `Io` but `send` for a wrapper, by passing it to the field `$inner`
/// (an `Io`): for wrappers that only change where messages go.
#[macro_export]
macro_rules! forward_asks_but_send {
    ($inner:ident) => {
        fn now(&self) -> $crate::Instant {
            self.$inner.now()
        }
        fn read(&mut self, file: $crate::FileId, offset: u64, len: usize, token: $crate::Token) {
            self.$inner.read(file, offset, len, token)
        }
        fn write(&mut self, file: $crate::FileId, offset: u64, bytes: $crate::Bytes, token: $crate::Token) {
            self.$inner.write(file, offset, bytes, token)
        }
        fn write_vectored(
            &mut self,
            file: $crate::FileId,
            offset: u64,
            parts: [$crate::Bytes; 2],
            token: $crate::Token,
        ) {
            self.$inner.write_vectored(file, offset, parts, token)
        }
        fn sync(&mut self, file: $crate::FileId, token: $crate::Token) {
            self.$inner.sync(file, token)
        }
        fn truncate(&mut self, file: $crate::FileId, len: u64, token: $crate::Token) {
            self.$inner.truncate(file, len, token)
        }
        fn remove(&mut self, file: $crate::FileId, token: $crate::Token) {
            self.$inner.remove(file, token)
        }
        fn list(&mut self, namespace: $crate::Namespace, token: $crate::Token) {
            self.$inner.list(namespace, token)
        }
        fn random(&mut self) -> u64 {
            self.$inner.random()
        }
        fn disk_space(&self) -> Option<$crate::DiskSpace> {
            self.$inner.disk_space()
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_map_to_the_data_directory_layout_and_back() {
        let partition = Namespace::partition(3, 1, 7);
        assert_eq!(partition.unpack(), (3, 1, 7));
        let cases = [
            (FileId::new(Namespace::METADATA, FileKind::Wal), "metadata/journal.wal"),
            (FileId::new(Namespace::METADATA, FileKind::Snapshot), "metadata/snapshot.bin"),
            (FileId::new(Namespace::METADATA, FileKind::SuperblockA), "metadata/superblock.a"),
            (FileId::new(partition, FileKind::SuperblockB), "streams/3/topics/1/partitions/7/superblock.b"),
            (FileId::new(partition, FileKind::Segment(42)), "streams/3/topics/1/partitions/7/00000000000000000042.log"),
            (FileId::new(partition, FileKind::Index(42)), "streams/3/topics/1/partitions/7/00000000000000000042.index"),
            (
                FileId::new(partition, FileKind::ConsumerOffset(5)),
                "streams/3/topics/1/partitions/7/offsets/consumers/5",
            ),
            (FileId::new(partition, FileKind::GroupOffset(6)), "streams/3/topics/1/partitions/7/offsets/groups/6"),
        ];
        for (file, path) in cases {
            assert_eq!(file.path(), path);
            assert_eq!(FileKind::parse(&file.kind.file_name()), Some(file.kind));
        }
        for name in ["0.log", "000000000000000000001.log", "abc.index", "offsets/consumers/x", "superblock.c", ""] {
            assert_eq!(FileKind::parse(name), None, "{name}");
        }
    }
}
