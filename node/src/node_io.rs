//! `NodeIo`: what one shard of a node asks of its driver beyond `Io`: messages to the node's other
//! shards over bounded channels, frames to the client connections it holds, and closing them.
//! The simulator and the glommio driver each implement it; the node never sees a socket, a
//! thread or a channel, only these asks and their defined answers.

use std::collections::BTreeMap;
use std::sync::Arc;

use vireo_io::{Io, Namespace, OutFrame};

use vireo_protocol::header::Header;

use crate::metadata::Metadata;
use crate::partition::request::PartitionRequest;
use crate::partition_figures::PartitionFigures;

/// A client connection, numbered by the driver (never reused while the driver runs).
pub type ConnectionId = u64;

/// The committed metadata as shard 0's replica applied it up to `op`, shared read-only by every
/// shard of the node (a new view replaces the old one whole: readers never lock).
#[derive(Clone, Debug)]
pub struct MetadataView {
    pub op: u64,
    /// The commit point the metadata replica's superblock holds (`Replica::persist_commit`).
    pub commit_durable: u64,
    pub metadata: Arc<Metadata>,
    /// Every partition, with its incarnation (when it was created).
    pub partitions: Arc<BTreeMap<Namespace, crate::shard::PartitionGroup>>,
}

/// What crosses from one shard of a node to another.
#[derive(Clone, Debug)]
pub enum ShardMessage {
    /// A frame for a group the receiving shard owns: a replica frame from another node, or a
    /// client request the sending shard admitted (its origin stamped).
    Frame(Vec<u8>),
    /// A reply or eviction for a client whose connection the receiving shard holds.
    ClientReply(Vec<u8>),
    /// The committed metadata, published by shard 0.
    Metadata(MetadataView),
    /// A poll without auto-commit for a group the receiving shard hosts, answered from its
    /// replica's committed log (no consensus): the reply goes back as `ToConnection`.
    Read(Box<LocalRead>),
    /// A reply frame for a connection the receiving shard holds (a poll's: in parts, its
    /// batches slices of the read that brought them in).
    ToConnection { connection: ConnectionId, frame: OutFrame },
    /// The figures of the partition groups `shard` hosts, for the reads that report them.
    /// Shard 0's also say which replica is the metadata group's primary, when its replica is in
    /// normal status (what get_cluster_metadata reports as the leader).
    Figures { shard: u16, figures: BTreeMap<Namespace, PartitionFigures>, metadata_leader: Option<u8> },
}

impl ShardMessage {
    /// Bytes the message carries (what a channel's bound is counted against).
    pub fn size_bytes(&self) -> usize {
        match self {
            ShardMessage::Frame(bytes) | ShardMessage::ClientReply(bytes) => bytes.len(),
            ShardMessage::ToConnection { frame, .. } => frame.len(),
            ShardMessage::Metadata(_) | ShardMessage::Read(_) | ShardMessage::Figures { .. } => 0,
        }
    }
}

/// A poll one shard hands to the shard of its node that hosts the poll's group.
#[derive(Clone, Debug)]
pub struct LocalRead {
    pub connection: ConnectionId,
    pub request: Header,
    pub poll: PartitionRequest,
}

/// The channel to a shard holds as many messages as it may: the message was not sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("the channel to shard {0} is full")]
pub struct ChannelFull(pub u16);

pub trait NodeIo: Io {
    /// Queues a message for another shard of this node. `Err` when its channel is full: the
    /// caller decides (a client request is refused as busy, a replica frame is dropped and
    /// repaired by VSR's timeouts, a metadata publication is tried again next tick).
    fn send_to_shard(&mut self, shard: u16, message: ShardMessage) -> Result<(), ChannelFull>;

    /// Queues a frame on a connection this shard holds. The driver bounds each connection's
    /// send queue and closes a connection whose client does not read (then reports it closed).
    fn send_to_connection(&mut self, connection: ConnectionId, frame: Vec<u8>);

    /// As `send_to_connection`, for a frame in parts (a poll's reply: its batches are slices of
    /// what its read brought in). Joining the parts and queuing the frame whole, as this does, is
    /// always correct; a driver that writes the parts one after the other saves a copy of every
    /// byte polled.
    fn send_frame_to_connection(&mut self, connection: ConnectionId, frame: OutFrame) {
        self.send_to_connection(connection, frame.into_whole());
    }

    /// A frame a client sent that the node is done with (its request answered): the driver may
    /// read a later frame into it. Dropping it, as this does, is always correct.
    fn recycle(&mut self, frame: Vec<u8>) {
        drop(frame);
    }

    /// Closes a connection (a malformed frame, a refused login past its bound). The driver
    /// reports it closed afterwards, like any other.
    fn close_connection(&mut self, connection: ConnectionId);
}
