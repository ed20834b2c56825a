//! The partition plane: one VSR group per partition, replicating `PartitionMachine` (a
//! partition's batch directory and consumer offsets) through the requests of `request`, with the
//! messages themselves in each node's `SegmentLog` of the group.

pub mod machine;
pub mod request;
pub mod segment_log;

pub use machine::PartitionMachine;
