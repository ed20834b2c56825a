//! The client codec: every request and reply body of `PROTOCOL.md` ("Bodies"), the bytes after
//! the 256-byte header (`crate::header`), both directions, Apache Iggy 0.9.0 compatible: byte for
//! byte the layouts of the SDK `iggy` 0.11.0-edge.4 (`iggy_binary_protocol`), which
//! `protocol/tests/sdk_differential.rs` checks against the SDK's own encoders and decoders.
//!
//! It owns the byte layouts and nothing else: no I/O, no sessions, no meaning of the fields.
//! Invariants it keeps:
//! - Untrusted bodies never panic a decode, and no decode allocates more than the body's length
//!   justifies (counts are checked against the bytes left before they are trusted).
//! - Every error names the byte offset, from the start of the body, where decoding stopped.
//! - Decoding is exact: a body that decodes re-encodes to the same bytes, so the types are the
//!   bytes, and `encode` never writes what `decode` would refuse.
//!
//! Message batches inside bodies (send_messages, poll replies) stay raw bytes in the format of
//! `vireo_storage::batch`, checked structurally here.

pub mod command;
mod error;
pub mod options;
pub mod permissions;
pub mod primitives;
pub mod reader;
pub mod reply;
pub mod request;

pub use error::WireError;
pub use options::{OptionValue, Options};
pub use permissions::{GlobalPermissions, Permissions, StreamPermissions, TopicPermissions};
pub use primitives::{
    Consumer, ConsumerKind, Identifier, MessagesKey, Name, Partitioning, PollingKind, PollingStrategy, ShortBytes,
};
pub use reader::Reader;
pub use reply::{
    Appended, CacheMetric, ClientInfo, ClientSummary, ClusterMetadata, ClusterNode, ConsumerGroup, ConsumerGroupMember,
    ConsumerGroupSummary, ConsumerOffsetReply, CreatedPersonalAccessToken, GroupMembership, LoginReply,
    OptionDescription, Partition, PersonalAccessTokenInfo, PollReply, ResultEntry, ResultSection, SendMessagesReply,
    StatsReply, Stream, StreamDetails, SyncConsumerGroupReply, Topic, TopicDetails, UserDetails, UserResponse,
};
pub use request::{
    decode_login, ClientRequest, ConsumerOffsetKey, Login, LoginRegister, LoginWithToken, PollMessages, SendMessages,
    SendMessagesHead,
};

#[cfg(test)]
mod tests;
