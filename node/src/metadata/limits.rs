//! How much metadata one cluster may hold.
//!
//! The stream, topic and partition bounds come from the namespace packing (20, 12 and 20 bits of a
//! u64, see PROTOCOL.md): because ids are always the lowest free ones (see `streams.rs`), a count
//! bound is also an id bound, so the production defaults keep every id inside its bit field. Tests
//! shrink these to reach a limit without creating a million objects.

use serde::{Deserialize, Serialize};

/// Every count the metadata state machine bounds. Part of the state (and of its snapshot), so
/// replicas that restore a checkpoint keep deciding the same way.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct MetadataLimits {
    /// Streams in the cluster; stream ids stay below this (20 bits).
    pub streams_max: u32,
    /// Topics in one stream; topic ids stay below this (12 bits).
    pub topics_per_stream_max: u32,
    /// Partitions in one topic; partition ids stay below this (fits 20 bits).
    pub partitions_per_topic_max: u32,
    /// Consumer groups in one topic (Vireo's own bound: a group costs an assignment per rebalance).
    pub consumer_groups_per_topic_max: u32,
    /// Members of one consumer group (Vireo's own bound: every rebalance walks all members).
    pub members_per_group_max: u32,
    /// Users, the root user included (Vireo's own bound).
    pub users_max: u32,
    /// Personal access tokens of one user (Iggy's 100).
    pub tokens_per_user_max: u32,
}

impl MetadataLimits {
    /// The bounds a real node runs with.
    pub const PRODUCTION: MetadataLimits = MetadataLimits {
        streams_max: 1 << 20,
        topics_per_stream_max: 1 << 12,
        partitions_per_topic_max: 1_000_000,
        consumer_groups_per_topic_max: 1 << 12,
        members_per_group_max: 1 << 16,
        users_max: 1 << 16,
        tokens_per_user_max: 100,
    };
}

impl Default for MetadataLimits {
    fn default() -> Self {
        MetadataLimits::PRODUCTION
    }
}

/// Which bound a command ran into.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Limit {
    Streams,
    TopicsPerStream,
    PartitionsPerTopic,
    ConsumerGroupsPerTopic,
    MembersPerGroup,
    Users,
    TokensPerUser,
}

impl std::fmt::Display for Limit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Limit::Streams => "streams in the cluster",
            Limit::TopicsPerStream => "topics in a stream",
            Limit::PartitionsPerTopic => "partitions in a topic",
            Limit::ConsumerGroupsPerTopic => "consumer groups in a topic",
            Limit::MembersPerGroup => "members in a consumer group",
            Limit::Users => "users",
            Limit::TokensPerUser => "personal access tokens of a user",
        })
    }
}
