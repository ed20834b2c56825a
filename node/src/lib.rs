//! A whole Vireo node as a library: the front door (`Node`: connections, admission, sessions,
//! routing, replies, reads), the metadata and partition state machines, the shards that host
//! their VSR groups, and the routing that tells every node which shard owns what. The simulator
//! and the glommio server drive the same `Node` through the same entry points.

pub mod admission;
pub mod client_reply;
pub mod connection;
pub mod group_io;
pub mod metadata;
pub mod metadata_plane;
#[allow(clippy::module_inception)]
pub mod node;
pub mod node_io;
pub mod partition;
pub mod partition_figures;
pub mod partitioning;
pub mod reads;
pub mod routing;
pub mod server;
pub mod shard;
pub mod wire_view;

pub use node::{Node, NodeConfig, NodeCounters, NodeEvent};
pub use node_io::{ChannelFull, ConnectionId, LocalRead, MetadataView, NodeIo, ShardMessage};

pub use vireo_io as io;
pub use vireo_protocol as protocol;
