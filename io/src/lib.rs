//! The `Io` boundary: everything a Vireo state machine may ask of the world, and the events the
//! world answers with.
//!
//! State machines are sans-IO (quinn-proto's model): they never block, never await, never read a
//! clock, a socket, a file, an environment variable or an unseeded random source. They call the
//! *asks* below and later receive *events* (`Completion`s, messages, ticks) from their driver. A
//! completion is never delivered inline from the call that asked for it: that is what lets the
//! simulator delay, reorder, fail or lose it.
//!
//! Two drivers implement this trait: the simulator in `vireo-sim` (virtual time, seeded faults) and,
//! later, the glommio io_uring driver (one shard per core).

use std::fmt;

/// Virtual or real time in nanoseconds since the driver started. Monotonic.
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

/// A file a state machine owns, named by the state machine's own numbering (the driver maps it to a
/// path under the data directory).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FileId(pub u8);

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
}

/// The result of one I/O request, delivered later as an event.
#[derive(Debug, PartialEq, Eq)]
pub enum Completion {
    Read { token: Token, result: Result<Vec<u8>, IoError> },
    Write { token: Token, result: Result<(), IoError> },
    Sync { token: Token, result: Result<(), IoError> },
}

impl Completion {
    pub fn token(&self) -> Token {
        match self {
            Completion::Read { token, .. } | Completion::Write { token, .. } | Completion::Sync { token, .. } => *token,
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

    /// Reads `len` bytes at `offset`; bytes past the end of the file read as zero.
    fn read(&mut self, file: FileId, offset: u64, len: usize, token: Token);

    /// Writes `bytes` at `offset`. Not durable until a later `sync` of the same file completes.
    fn write(&mut self, file: FileId, offset: u64, bytes: Vec<u8>, token: Token);

    /// Makes every write to `file` that completed before this call durable.
    fn sync(&mut self, file: FileId, token: Token);

    /// Seeded randomness (jitter, nonces, peer choice). Deterministic in the simulator.
    fn random(&mut self) -> u64;
}
