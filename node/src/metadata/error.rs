//! Every way a metadata command or read can be denied, each with a stable status code.
//!
//! Codes follow Apache Iggy's `IggyError` numbering, as the reference server sends them (the SDK
//! maps them back to its own errors; a code it does not know becomes a generic error). A lookup
//! by name that finds nothing gets the same code as one by id, as the reference does. Where Iggy
//! has no denial of its own, the nearest one is used (`InvalidOptionValue` 4042 for a topic
//! option out of range, `TooManyTopics`-style limits for Vireo's limits):
//!
//! | code | variant | Iggy name |
//! |---|---|---|
//! | 6 | InvalidIdentifier | InvalidIdentifier |
//! | 20 | UserNotFound, TokenNotFound | ResourceNotFound |
//! | 40 | Unauthenticated | Unauthenticated |
//! | 41 | PermissionDenied | Unauthorized |
//! | 43 | InvalidUsername | InvalidUsername |
//! | 44 | InvalidPasswordHash | InvalidPassword |
//! | 46 | UserAlreadyExists | UserAlreadyExists |
//! | 47 | UserInactive | UserInactive |
//! | 48 | CannotDeleteRoot | CannotDeleteUser |
//! | 49 | CannotChangeRoot | CannotChangePermissions |
//! | 50 | InvalidTokenName | InvalidPersonalAccessTokenName |
//! | 51 | TokenAlreadyExists | PersonalAccessTokenAlreadyExists |
//! | 52 | LimitReached(TokensPerUser) | PersonalAccessTokensLimitReached |
//! | 54 | TokenExpired | PersonalAccessTokenExpired |
//! | 55 | LimitReached(Users) | UsersLimitReached |
//! | 1009 | StreamNotFound | StreamIdNotFound |
//! | 1012 | StreamAlreadyExists | StreamNameAlreadyExists |
//! | 1013 | InvalidStreamName | InvalidStreamName |
//! | 1019 | InvalidOption(MaxTopicSize) | InvalidTopicSize |
//! | 1020 | LimitReached(Streams) | TooManyStreams |
//! | 2010 | TopicNotFound | TopicIdNotFound |
//! | 2013 | TopicAlreadyExists | TopicNameAlreadyExists |
//! | 2014 | InvalidTopicName | InvalidTopicName |
//! | 2015 | LimitReached(PartitionsPerTopic) | TooManyPartitions |
//! | 2018 | InvalidOption(ReplicationFactor) | InvalidReplicationFactor |
//! | 2019 | InvalidPartitionsCount | InvalidPartitionsCount |
//! | 3007 | PartitionNotFound | PartitionNotFound |
//! | 2021 | LimitReached(TopicsPerStream) | TooManyTopics |
//! | 4042 | InvalidOption(MessagesRequiredToSave, SizeOfMessagesRequiredToSave) | InvalidOptionValue |
//! | 4002 | InvalidOption(SegmentSize) | InvalidSegmentSize |
//! | 5000 | ConsumerGroupNotFound | ConsumerGroupIdNotFound |
//! | 5004 | ConsumerGroupAlreadyExists | ConsumerGroupNameAlreadyExists |
//! | 5005 | InvalidConsumerGroupName | InvalidConsumerGroupName |
//! | 5006 | ConsumerGroupMemberNotFound | ConsumerGroupMemberNotFound |
//! | 3009 | LimitReached(ConsumerGroupsPerTopic, MembersPerGroup) | TopicFull |

use serde::{Deserialize, Serialize};

use super::command::Identifier;
use super::limits::Limit;

/// A topic option a command set to a value the topic cannot work with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum TopicOption {
    /// Zero: a segment must hold at least one byte.
    SegmentSize,
    /// Set (non-zero) but smaller than one segment.
    MaxTopicSize,
    /// Zero: a flush threshold of zero messages never flushes by count.
    MessagesRequiredToSave,
    /// Zero, likewise for bytes.
    SizeOfMessagesRequiredToSave,
    /// Zero replicas.
    ReplicationFactor,
}

/// Why a metadata command or read was denied. A denied command changed nothing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MetadataError {
    #[error("identifier {0} is malformed (a name must be 1..=255 bytes)")]
    InvalidIdentifier(Identifier),
    #[error("no user with {0}")]
    UserNotFound(Identifier),
    #[error("user {0} does not exist, so it cannot act")]
    Unauthenticated(u32),
    #[error("user {0} is not allowed to do that")]
    PermissionDenied(u32),
    #[error("a username must be 1..=50 characters")]
    InvalidUsername,
    #[error("a password hash must be a PHC string of at most 1024 bytes")]
    InvalidPasswordHash,
    #[error("a user named {0:?} already exists")]
    UserAlreadyExists(String),
    #[error("user {0} is inactive")]
    UserInactive(u32),
    #[error("the root user cannot be deleted")]
    CannotDeleteRoot,
    #[error("the root user's permissions and status cannot be changed")]
    CannotChangeRoot,
    #[error("a personal access token name must be 1..=30 characters")]
    InvalidTokenName,
    #[error("user {user} already has a personal access token named {name:?} (or that token exists)")]
    TokenAlreadyExists { user: u32, name: String },
    #[error("no such personal access token")]
    TokenNotFound,
    #[error("personal access token {name:?} of user {user} has expired")]
    TokenExpired { user: u32, name: String },
    #[error("stream with {0} was not found")]
    StreamNotFound(Identifier),
    #[error("a stream named {0:?} already exists")]
    StreamAlreadyExists(String),
    #[error("a stream name must be 1..=255 bytes")]
    InvalidStreamName,
    #[error("topic with {topic} in stream {stream} was not found")]
    TopicNotFound { stream: u32, topic: Identifier },
    #[error("stream {stream} already has a topic named {name:?}")]
    TopicAlreadyExists { stream: u32, name: String },
    #[error("a topic name must be 1..=255 bytes")]
    InvalidTopicName,
    #[error("topic option {0:?} has a value the topic cannot work with")]
    InvalidOption(TopicOption),
    #[error("topic {topic} of stream {stream} has no partition {partition}")]
    PartitionNotFound { stream: u32, topic: u32, partition: u32 },
    #[error("cannot create or delete {count} partitions of a topic that has {existing}")]
    InvalidPartitionsCount { count: u32, existing: u32 },
    #[error("consumer group with {group} in topic {topic} of stream {stream} was not found")]
    ConsumerGroupNotFound { stream: u32, topic: u32, group: Identifier },
    #[error("topic {topic} of stream {stream} already has a consumer group named {name:?}")]
    ConsumerGroupAlreadyExists { stream: u32, topic: u32, name: String },
    #[error("a consumer group name must be 1..=255 bytes")]
    InvalidConsumerGroupName,
    #[error("client {member} is not a member of consumer group {group}")]
    ConsumerGroupMemberNotFound { group: u32, member: u128 },
    #[error("the limit on {0} is reached")]
    LimitReached(Limit),
}

impl MetadataError {
    /// The status code a client receives (see the table in this module's documentation).
    pub fn code(&self) -> u32 {
        match self {
            MetadataError::InvalidIdentifier(_) => 6,
            MetadataError::UserNotFound(_) => 20,
            MetadataError::Unauthenticated(_) => 40,
            MetadataError::PermissionDenied(_) => 41,
            MetadataError::InvalidUsername => 43,
            MetadataError::InvalidPasswordHash => 44,
            MetadataError::UserAlreadyExists(_) => 46,
            MetadataError::UserInactive(_) => 47,
            MetadataError::CannotDeleteRoot => 48,
            MetadataError::CannotChangeRoot => 49,
            MetadataError::InvalidTokenName => 50,
            MetadataError::TokenAlreadyExists { .. } => 51,
            MetadataError::TokenNotFound => 20,
            MetadataError::TokenExpired { .. } => 54,
            MetadataError::StreamNotFound(_) => 1009,
            MetadataError::StreamAlreadyExists(_) => 1012,
            MetadataError::InvalidStreamName => 1013,
            MetadataError::TopicNotFound { .. } => 2010,
            MetadataError::TopicAlreadyExists { .. } => 2013,
            MetadataError::InvalidTopicName => 2014,
            MetadataError::InvalidOption(option) => match option {
                TopicOption::MaxTopicSize => 1019,
                TopicOption::ReplicationFactor => 2018,
                TopicOption::MessagesRequiredToSave => 4042,
                TopicOption::SizeOfMessagesRequiredToSave => 4042,
                TopicOption::SegmentSize => 4002,
            },
            MetadataError::InvalidPartitionsCount { .. } => 2019,
            MetadataError::PartitionNotFound { .. } => 3007,
            MetadataError::ConsumerGroupNotFound { .. } => 5000,
            MetadataError::ConsumerGroupAlreadyExists { .. } => 5004,
            MetadataError::InvalidConsumerGroupName => 5005,
            MetadataError::ConsumerGroupMemberNotFound { .. } => 5006,
            MetadataError::LimitReached(limit) => match limit {
                Limit::TokensPerUser => 52,
                Limit::Users => 55,
                Limit::Streams => 1020,
                Limit::PartitionsPerTopic => 2015,
                Limit::TopicsPerStream => 2021,
                Limit::ConsumerGroupsPerTopic | Limit::MembersPerGroup => 3009,
            },
        }
    }
}
