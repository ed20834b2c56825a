//! A whole Vireo node as a library. For now it is the replication core and the Io boundary it runs
//! on; shards, routing, the metadata and partition state machines and the server binaries arrive
//! with the streaming issues, on top of exactly these pieces.

pub use vireo_io as io;
pub use vireo_protocol as protocol;
