//! A whole Vireo node as a library. For now it is the replication core, the Io boundary it runs
//! on, and the metadata state machine (`metadata`); shards, routing, the partition state machine
//! and the server binaries arrive with the streaming issues, on top of exactly these pieces.

pub use vireo_io as io;
pub use vireo_protocol as protocol;

pub mod metadata;
