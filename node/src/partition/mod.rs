//! The partition plane: one VSR group per partition, replicating `PartitionMachine` (a
//! partition's stamped batches, its consumer offsets) through the requests of `request`.

pub mod machine;
pub mod request;
pub mod segment_log;

pub use machine::PartitionMachine;
