//! Every way a metadata command or read can be denied, each with a stable status code.
//!
//! Codes follow Apache Iggy's `IggyError` numbering where Iggy has the same denial (the SDK maps
//! them back to its own errors). Where Iggy has no code, Vireo uses its own, at the Iggy family
//! plus 100 (1100 streams, 2100 topics, 3100 partitions, 5100 consumer groups) so they cannot be
//! mistaken for an Iggy code of that family:
//!
//! | code | variant | Iggy name |
//! |---|---|---|
//! | 6 | InvalidIdentifier | InvalidIdentifier |
//! | 20 | UserNotFound | ResourceNotFound |
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
//! | 53 | TokenNotFound | InvalidPersonalAccessToken |
//! | 54 | TokenExpired | PersonalAccessTokenExpired |
//! | 55 | LimitReached(Users) | UsersLimitReached |
//! | 1009 / 1010 | StreamNotFound (by id / by name) | StreamIdNotFound / StreamNameNotFound |
//! | 1012 | StreamAlreadyExists | StreamNameAlreadyExists |
//! | 1013 | InvalidStreamName | InvalidStreamName |
//! | 1019 | InvalidOption(MaxTopicSize) | InvalidTopicSize |
//! | 1100 | LimitReached(Streams) | (Vireo) |
//! | 2010 / 2011 | TopicNotFound (by id / by name) | TopicIdNotFound / TopicNameNotFound |
//! | 2013 | TopicAlreadyExists | TopicNameAlreadyExists |
//! | 2014 | InvalidTopicName | InvalidTopicName |
//! | 2015 | LimitReached(PartitionsPerTopic) | TooManyPartitions |
//! | 2018 | InvalidOption(ReplicationFactor) | InvalidReplicationFactor |
//! | 2100 | LimitReached(TopicsPerStream) | (Vireo) |
//! | 2101 | InvalidOption(MessagesRequiredToSave) | (Vireo) |
//! | 2102 | InvalidOption(SizeOfMessagesRequiredToSave) | (Vireo) |
//! | 3100 | InvalidPartitionsCount | (Vireo) |
//! | 4002 | InvalidOption(SegmentSize) | InvalidSegmentSize |
//! | 5000 / 5003 | ConsumerGroupNotFound (by id / by name) | ConsumerGroupIdNotFound / ConsumerGroupNameNotFound |
//! | 5004 | ConsumerGroupAlreadyExists | ConsumerGroupNameAlreadyExists |
//! | 5005 | InvalidConsumerGroupName | InvalidConsumerGroupName |
//! | 5006 | ConsumerGroupMemberNotFound | ConsumerGroupMemberNotFound |
//! | 5100 | LimitReached(ConsumerGroupsPerTopic) | (Vireo) |
//! | 5101 | LimitReached(MembersPerGroup) | (Vireo) |

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
            MetadataError::TokenNotFound => 53,
            MetadataError::TokenExpired { .. } => 54,
            MetadataError::StreamNotFound(Identifier::Numeric(_)) => 1009,
            MetadataError::StreamNotFound(Identifier::Name(_)) => 1010,
            MetadataError::StreamAlreadyExists(_) => 1012,
            MetadataError::InvalidStreamName => 1013,
            MetadataError::TopicNotFound { topic: Identifier::Numeric(_), .. } => 2010,
            MetadataError::TopicNotFound { topic: Identifier::Name(_), .. } => 2011,
            MetadataError::TopicAlreadyExists { .. } => 2013,
            MetadataError::InvalidTopicName => 2014,
            MetadataError::InvalidOption(option) => match option {
                TopicOption::MaxTopicSize => 1019,
                TopicOption::ReplicationFactor => 2018,
                TopicOption::MessagesRequiredToSave => 2101,
                TopicOption::SizeOfMessagesRequiredToSave => 2102,
                TopicOption::SegmentSize => 4002,
            },
            MetadataError::InvalidPartitionsCount { .. } => 3100,
            MetadataError::ConsumerGroupNotFound { group: Identifier::Numeric(_), .. } => 5000,
            MetadataError::ConsumerGroupNotFound { group: Identifier::Name(_), .. } => 5003,
            MetadataError::ConsumerGroupAlreadyExists { .. } => 5004,
            MetadataError::InvalidConsumerGroupName => 5005,
            MetadataError::ConsumerGroupMemberNotFound { .. } => 5006,
            MetadataError::LimitReached(limit) => match limit {
                Limit::TokensPerUser => 52,
                Limit::Users => 55,
                Limit::Streams => 1100,
                Limit::PartitionsPerTopic => 2015,
                Limit::TopicsPerStream => 2100,
                Limit::ConsumerGroupsPerTopic => 5100,
                Limit::MembersPerGroup => 5101,
            },
        }
    }
}
