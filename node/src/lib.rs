//! A whole Vireo node as a library: the metadata and partition state machines, the shards that
//! host their VSR groups, and the routing that tells every node which shard owns what.

pub mod group_io;
pub mod metadata;
pub mod metadata_plane;
pub mod partition;
pub mod partitioning;
pub mod routing;
pub mod shard;

pub use vireo_io as io;
pub use vireo_protocol as protocol;
