//! Who may do what: Iggy's permission model, kept compact.
//!
//! A user has global permissions plus optional overrides per stream and, inside a stream override,
//! per topic. Overrides only grant: a right held at any level suffices. Stronger rights imply weaker
//! ones, as Iggy documents them:
//! - manage_streams implies read_streams and manage_topics; read_streams implies read_topics;
//! - manage_topics implies read_topics and send_messages; read_topics implies poll_messages;
//! - manage_users implies read_users; manage_servers implies read_servers.
//!
//! Stream and topic ids are reused after a delete (the lowest free id is taken), so deleting a
//! stream or topic also drops every override that names it: a new stream never inherits the
//! rights granted on a dead one. An override may name a stream or topic that does not exist yet,
//! as the reference allows (its clients provision users before their streams): it is granted
//! for the object created with that id, deliberately.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Rights over the whole cluster.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GlobalPermissions {
    pub manage_servers: bool,
    pub read_servers: bool,
    pub manage_users: bool,
    pub read_users: bool,
    pub manage_streams: bool,
    pub read_streams: bool,
    pub manage_topics: bool,
    pub read_topics: bool,
    pub poll_messages: bool,
    pub send_messages: bool,
}

impl GlobalPermissions {
    /// Everything: the root user's rights.
    pub const ALL: GlobalPermissions = GlobalPermissions {
        manage_servers: true,
        read_servers: true,
        manage_users: true,
        read_users: true,
        manage_streams: true,
        read_streams: true,
        manage_topics: true,
        read_topics: true,
        poll_messages: true,
        send_messages: true,
    };
}

/// Extra rights on one stream (its topics included).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamPermissions {
    pub manage_stream: bool,
    pub read_stream: bool,
    pub manage_topics: bool,
    pub read_topics: bool,
    pub poll_messages: bool,
    pub send_messages: bool,
    /// Extra rights on single topics of this stream, by topic id.
    pub topics: BTreeMap<u32, TopicPermissions>,
}

/// Extra rights on one topic.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopicPermissions {
    pub manage_topic: bool,
    pub read_topic: bool,
    pub poll_messages: bool,
    pub send_messages: bool,
}

/// A user's rights: global ones plus overrides by stream id.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Permissions {
    pub global: GlobalPermissions,
    pub streams: BTreeMap<u32, StreamPermissions>,
}

impl Permissions {
    /// Every right: the root user's.
    pub fn root() -> Permissions {
        Permissions { global: GlobalPermissions::ALL, streams: BTreeMap::new() }
    }

    fn stream_override(&self, stream: u32) -> Option<&StreamPermissions> {
        self.streams.get(&stream)
    }

    fn topic_override(&self, stream: u32, topic: u32) -> Option<&TopicPermissions> {
        self.stream_override(stream).and_then(|overrides| overrides.topics.get(&topic))
    }

    pub fn manage_servers(&self) -> bool {
        self.global.manage_servers
    }

    pub fn read_servers(&self) -> bool {
        self.manage_servers() || self.global.read_servers
    }

    pub fn manage_users(&self) -> bool {
        self.global.manage_users
    }

    pub fn read_users(&self) -> bool {
        self.manage_users() || self.global.read_users
    }

    /// Create a stream, or list all of them (reading every stream).
    pub fn manage_streams(&self) -> bool {
        self.global.manage_streams
    }

    pub fn read_streams(&self) -> bool {
        self.manage_streams() || self.global.read_streams
    }

    pub fn manage_stream(&self, stream: u32) -> bool {
        self.manage_streams() || self.stream_override(stream).is_some_and(|s| s.manage_stream)
    }

    pub fn read_stream(&self, stream: u32) -> bool {
        self.manage_stream(stream) || self.read_streams() || self.stream_override(stream).is_some_and(|s| s.read_stream)
    }

    /// Create topics in `stream` (and manage every topic in it).
    pub fn manage_topics(&self, stream: u32) -> bool {
        self.manage_stream(stream)
            || self.global.manage_topics
            || self.stream_override(stream).is_some_and(|s| s.manage_topics)
    }

    pub fn manage_topic(&self, stream: u32, topic: u32) -> bool {
        self.manage_topics(stream) || self.topic_override(stream, topic).is_some_and(|t| t.manage_topic)
    }

    pub fn read_topic(&self, stream: u32, topic: u32) -> bool {
        self.manage_topic(stream, topic)
            || self.read_stream(stream)
            || self.global.read_topics
            || self.stream_override(stream).is_some_and(|s| s.read_topics)
            || self.topic_override(stream, topic).is_some_and(|t| t.read_topic)
    }

    pub fn poll_messages(&self, stream: u32, topic: u32) -> bool {
        self.read_topic(stream, topic)
            || self.global.poll_messages
            || self.stream_override(stream).is_some_and(|s| s.poll_messages)
            || self.topic_override(stream, topic).is_some_and(|t| t.poll_messages)
    }

    pub fn send_messages(&self, stream: u32, topic: u32) -> bool {
        self.manage_topic(stream, topic)
            || self.global.send_messages
            || self.stream_override(stream).is_some_and(|s| s.send_messages)
            || self.topic_override(stream, topic).is_some_and(|t| t.send_messages)
    }
}

/// A non-replicated request the node answers from committed state, to be authorized first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadKind {
    /// get_stats, get_cluster_metadata, get_clients.
    Servers,
    /// get_users, get_user of another user.
    Users,
    /// get_streams.
    Streams,
    /// get_stream.
    Stream { stream: u32 },
    /// get_topic, get_topics of one stream reads each topic through this.
    Topic { stream: u32, topic: u32 },
    /// get_consumer_group(s) of a topic.
    ConsumerGroups { stream: u32, topic: u32 },
    /// poll_messages, and get / store / delete consumer offsets.
    Poll { stream: u32, topic: u32 },
    /// send_messages: not a read, but authorized from the same committed permissions.
    Send { stream: u32, topic: u32 },
    /// delete_segments: a partition group's write, authorized as update_topic (the reference's
    /// rule) by the admitting node.
    ManageTopic { stream: u32, topic: u32 },
}

impl ReadKind {
    /// Whether `permissions` allow this read.
    pub fn allowed_by(self, permissions: &Permissions) -> bool {
        match self {
            ReadKind::Servers => permissions.read_servers(),
            ReadKind::Users => permissions.read_users(),
            ReadKind::Streams => permissions.read_streams(),
            ReadKind::Stream { stream } => permissions.read_stream(stream),
            ReadKind::Topic { stream, topic } | ReadKind::ConsumerGroups { stream, topic } => {
                permissions.read_topic(stream, topic)
            }
            ReadKind::Poll { stream, topic } => permissions.poll_messages(stream, topic),
            ReadKind::Send { stream, topic } => permissions.send_messages(stream, topic),
            ReadKind::ManageTopic { stream, topic } => permissions.manage_topic(stream, topic),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_is_allowed_by_default() {
        let none = Permissions::default();
        assert!(!none.read_servers() && !none.read_users() && !none.read_streams());
        assert!(!none.read_stream(0) && !none.manage_topics(0));
        assert!(!none.poll_messages(0, 0) && !none.send_messages(0, 0));
    }

    #[test]
    fn stronger_global_rights_imply_weaker_ones() {
        let mut manager = Permissions::default();
        manager.global.manage_streams = true;
        assert!(manager.read_streams() && manager.manage_stream(3) && manager.manage_topic(3, 4));
        assert!(manager.poll_messages(3, 4) && manager.send_messages(3, 4));
        assert!(!manager.read_users());

        let mut reader = Permissions::default();
        reader.global.read_topics = true;
        assert!(reader.read_topic(1, 1) && reader.poll_messages(1, 1));
        assert!(!reader.read_stream(1) && !reader.send_messages(1, 1) && !reader.manage_topics(1));
    }

    #[test]
    fn overrides_grant_only_where_they_name() {
        let mut permissions = Permissions::default();
        let mut on_stream = StreamPermissions::default();
        on_stream.topics.insert(2, TopicPermissions { poll_messages: true, ..TopicPermissions::default() });
        permissions.streams.insert(1, on_stream);
        assert!(permissions.poll_messages(1, 2));
        assert!(!permissions.poll_messages(1, 3));
        assert!(!permissions.poll_messages(0, 2));
        assert!(!permissions.read_topic(1, 2));

        permissions.streams.get_mut(&1).unwrap().manage_stream = true;
        assert!(permissions.manage_topic(1, 9) && permissions.read_stream(1) && !permissions.read_stream(0));
    }
}
