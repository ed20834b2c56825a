//! What a client may ask of the metadata plane, and what a successful command reports.
//!
//! Commands name streams, topics, groups and users by `Identifier`, exactly as the wire does; the
//! state machine resolves them against its own state at apply time, so two replicas resolving the
//! same committed command always pick the same object.

use serde::{Deserialize, Serialize};

use super::permissions::Permissions;
use super::streams::TopicOptions;
use super::users::UserStatus;

/// A reference to a stream, topic, consumer group or user: its id or its name.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Identifier {
    Numeric(u32),
    Name(String),
}

impl std::fmt::Display for Identifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Identifier::Numeric(id) => write!(f, "id {id}"),
            Identifier::Name(name) => write!(f, "name {name:?}"),
        }
    }
}

impl From<u32> for Identifier {
    fn from(id: u32) -> Self {
        Identifier::Numeric(id)
    }
}

impl From<&str> for Identifier {
    fn from(name: &str) -> Self {
        Identifier::Name(name.to_owned())
    }
}

/// One replicated metadata command. The acting user comes with it to `apply`, not inside it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum MetadataCommand {
    /// Needs manage_users. `password_hash` is a PHC string the node computed. `permissions`
    /// `None`: created without any, as the reference allows (no rights; its details say none).
    /// Overrides may name streams and topics that do not exist yet, as in `UpdatePermissions`.
    CreateUser { username: String, password_hash: String, status: UserStatus, permissions: Option<Permissions> },
    /// Needs manage_users. Renames and/or (de)activates; the root user cannot be deactivated.
    UpdateUser { user: Identifier, username: Option<String>, status: Option<UserStatus> },
    /// Needs manage_users. Also deletes the user's tokens. The root user cannot be deleted.
    DeleteUser { user: Identifier },
    /// Needs manage_users. Overrides may name streams and topics that do not exist yet (as the
    /// reference allows): they take effect when an object of that id is created.
    /// `None` takes every right away, and the user's details then say none.
    UpdatePermissions { user: Identifier, permissions: Option<Permissions> },
    /// A user may always change its own password; anyone else's needs manage_users.
    ChangePassword { user: Identifier, password_hash: String },
    /// A token of the acting user. `token_hash` is `users::token_hash` of the secret token;
    /// `expiry` is a lifetime in nanoseconds from the command's timestamp, `None` for never.
    CreatePersonalAccessToken { name: String, token_hash: u128, expiry: Option<u64> },
    /// Deletes the acting user's token of that name.
    DeletePersonalAccessToken { name: String },
    /// Needs manage_streams.
    CreateStream { name: String },
    /// Renames a stream. Needs manage_stream on it.
    UpdateStream { stream: Identifier, name: String },
    /// Deletes every message of the stream's topics (the partitions' logs, not the partitions).
    /// Needs manage_stream on it.
    PurgeStream { stream: Identifier },
    /// Needs manage_stream on it.
    DeleteStream { stream: Identifier },
    /// Needs manage_topics on the stream.
    CreateTopic { stream: Identifier, name: String, partitions_count: u32, options: TopicOptions },
    /// Needs manage_topic on it.
    DeleteTopic { stream: Identifier, topic: Identifier },
    /// Renames a topic and sets the options that may change after creation. Needs manage_topic.
    UpdateTopic { stream: Identifier, topic: Identifier, name: String, update: TopicUpdate },
    /// Deletes every message of the topic. Needs manage_topic.
    PurgeTopic { stream: Identifier, topic: Identifier },
    /// Deletes the `count` oldest segments of one partition. Needs manage_topic.
    DeleteSegments { stream: Identifier, topic: Identifier, partition: u32, count: u32 },
    /// Appends `count` partitions after the highest. Needs manage_topic.
    CreatePartitions { stream: Identifier, topic: Identifier, count: u32 },
    /// Removes the `count` highest partitions. Needs manage_topic.
    DeletePartitions { stream: Identifier, topic: Identifier, count: u32 },
    /// Needs read_topic.
    CreateConsumerGroup { stream: Identifier, topic: Identifier, name: String },
    /// Needs read_topic.
    DeleteConsumerGroup { stream: Identifier, topic: Identifier, group: Identifier },
    /// `member` is the client session joining. Needs poll_messages on the topic. Joining a group
    /// one is already in succeeds and changes nothing (a retried join must not fail).
    JoinConsumerGroup { stream: Identifier, topic: Identifier, group: Identifier, member: u128 },
    /// Needs poll_messages on the topic.
    LeaveConsumerGroup { stream: Identifier, topic: Identifier, group: Identifier, member: u128 },
    /// The client's connection closed or it logged out: it leaves every group it was in. Made
    /// by the node that held the connection, never by a client.
    EndSession { member: u128 },
}

/// The options update_topic may change (the reference's: compression, expiry, size).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopicUpdate {
    pub compression: Option<super::streams::Compression>,
    pub message_expiry: Option<u64>,
    pub max_topic_size: Option<u64>,
}

/// What a successful command did, with the ids it created or resolved, so the node can act on
/// them (create or remove directories, route partitions) without resolving names again.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum MetadataResult {
    UserCreated {
        user: u32,
    },
    UserUpdated {
        user: u32,
    },
    UserDeleted {
        user: u32,
    },
    PermissionsUpdated {
        user: u32,
    },
    PasswordChanged {
        user: u32,
    },
    PersonalAccessTokenCreated {
        user: u32,
        expires_at: Option<u64>,
    },
    PersonalAccessTokenDeleted {
        user: u32,
    },
    StreamCreated {
        stream: u32,
    },
    StreamUpdated {
        stream: u32,
    },
    /// The topics whose messages go, each with its partition count.
    StreamPurged {
        stream: u32,
        topics: Vec<(u32, u32)>,
    },
    TopicUpdated {
        stream: u32,
        topic: u32,
    },
    TopicPurged {
        stream: u32,
        topic: u32,
        partitions_count: u32,
    },
    SegmentsDeleted {
        stream: u32,
        topic: u32,
        partition: u32,
        count: u32,
    },
    /// The topics the stream held, each with its partition count: their files go too.
    StreamDeleted {
        stream: u32,
        topics: Vec<(u32, u32)>,
    },
    TopicCreated {
        stream: u32,
        topic: u32,
        partitions_count: u32,
    },
    TopicDeleted {
        stream: u32,
        topic: u32,
        partitions_count: u32,
    },
    /// The new partitions are ids `first..first + count`.
    PartitionsCreated {
        stream: u32,
        topic: u32,
        first: u32,
        count: u32,
    },
    /// The removed partitions were ids `first..first + count`.
    PartitionsDeleted {
        stream: u32,
        topic: u32,
        first: u32,
        count: u32,
    },
    ConsumerGroupCreated {
        stream: u32,
        topic: u32,
        group: u32,
    },
    ConsumerGroupDeleted {
        stream: u32,
        topic: u32,
        group: u32,
    },
    /// `already_member`: the client was in the group before (the join changed nothing).
    ConsumerGroupJoined {
        stream: u32,
        topic: u32,
        group: u32,
        already_member: bool,
    },
    ConsumerGroupLeft {
        stream: u32,
        topic: u32,
        group: u32,
    },
    /// The groups the ended session's client left, as (stream, topic, group).
    SessionEnded {
        groups: Vec<(u32, u32, u32)>,
    },
}
