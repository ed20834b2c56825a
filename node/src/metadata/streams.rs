//! Streams, their topics, and the topics' partitions.
//!
//! Ids: a new stream, topic (or user, or consumer group) takes the lowest id not in use, as Iggy's
//! slab does. A plain counter would be simpler but would burn the 12-bit topic id space after 4096
//! creations in a stream, dead ones included; reuse keeps ids below the count limits forever, and
//! the reuse hazard (rights granted on a dead stream) is closed in `permissions.rs`. Partitions are
//! always `0..count`: new ones go after the highest, deletes remove the highest.
//!
//! Invariants: ids are the map keys and below their limits; names are unique (streams in the
//! cluster, topics in their stream); `Metadata::stream_ids_by_name` indexes exactly the streams.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use super::command::{Identifier, MetadataResult, TopicUpdate};
use super::error::{MetadataError, TopicOption};
use super::groups::ConsumerGroup;
use super::limits::{Limit, MetadataLimits};
use super::Metadata;

/// Stream, topic and consumer group names are 1..=255 bytes (a wire Name is length-prefixed by u8).
pub const NAME_SIZE_MAX: usize = 255;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum Compression {
    #[default]
    None,
    Gzip,
}

/// How a topic stores its messages. Defaults are Iggy's.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopicOptions {
    pub compression: Compression,
    /// Microseconds a message lives; 0 keeps it forever.
    pub message_expiry: u64,
    /// Bytes the topic may hold before its oldest segments go; 0 is unlimited.
    pub max_topic_size: u64,
    /// Bytes at which a segment is sealed.
    pub segment_size: u64,
    pub enforce_fsync: bool,
    /// Flush thresholds: a count of messages and a size in bytes.
    pub messages_required_to_save: u32,
    pub size_of_messages_required_to_save: u64,
    pub preallocate_segments: bool,
    /// Replicas of each partition; `None` follows the cluster's.
    pub replication_factor: Option<u8>,
}

impl Default for TopicOptions {
    fn default() -> Self {
        TopicOptions {
            compression: Compression::None,
            message_expiry: 0,
            max_topic_size: 0,
            segment_size: 1 << 30,
            enforce_fsync: false,
            messages_required_to_save: 1024,
            size_of_messages_required_to_save: 1 << 20,
            preallocate_segments: false,
            replication_factor: None,
        }
    }
}

impl TopicOptions {
    fn validate(&self) -> Result<(), MetadataError> {
        if self.segment_size == 0 {
            return Err(MetadataError::InvalidOption(TopicOption::SegmentSize));
        }
        if self.max_topic_size != 0 && self.max_topic_size < self.segment_size {
            return Err(MetadataError::InvalidOption(TopicOption::MaxTopicSize));
        }
        if self.messages_required_to_save == 0 {
            return Err(MetadataError::InvalidOption(TopicOption::MessagesRequiredToSave));
        }
        if self.size_of_messages_required_to_save == 0 {
            return Err(MetadataError::InvalidOption(TopicOption::SizeOfMessagesRequiredToSave));
        }
        if self.replication_factor == Some(0) {
            return Err(MetadataError::InvalidOption(TopicOption::ReplicationFactor));
        }
        Ok(())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Partition {
    pub id: u32,
    pub created_at: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Topic {
    pub id: u32,
    pub name: String,
    pub created_at: u64,
    pub options: TopicOptions,
    /// Partition `i` is at index `i`.
    pub partitions: Vec<Partition>,
    pub consumer_groups: BTreeMap<u32, ConsumerGroup>,
}

impl Topic {
    pub fn partitions_count(&self) -> u32 {
        u32::try_from(self.partitions.len()).expect("partitions are bounded by a u32 limit")
    }

    pub fn consumer_group_by_name(&self, name: &str) -> Option<&ConsumerGroup> {
        self.consumer_groups.values().find(|group| group.name == name)
    }

    /// Appends partitions and hands them out to every group's members.
    fn append_partitions(&mut self, timestamp: u64, count: u32) {
        let first = self.partitions_count();
        self.partitions.extend((first..first + count).map(|id| Partition { id, created_at: timestamp }));
        self.rebalance_groups();
    }

    fn remove_partitions(&mut self, count: u32) {
        let kept = self.partitions.len() - count as usize;
        self.partitions.truncate(kept);
        self.rebalance_groups();
    }

    fn rebalance_groups(&mut self) {
        let partitions_count = self.partitions_count();
        for group in self.consumer_groups.values_mut() {
            group.rebalance(partitions_count);
        }
    }

    pub(super) fn check(&self, limits: &MetadataLimits) -> Result<(), String> {
        if self.partitions.len() > limits.partitions_per_topic_max as usize {
            return Err(format!("topic {} holds too many partitions", self.id));
        }
        if self.partitions.iter().enumerate().any(|(index, partition)| partition.id as usize != index) {
            return Err(format!("topic {} has partition ids that are not 0..count", self.id));
        }
        if self.consumer_groups.len() > limits.consumer_groups_per_topic_max as usize {
            return Err(format!("topic {} holds too many consumer groups", self.id));
        }
        let mut names = BTreeSet::new();
        for (id, group) in &self.consumer_groups {
            if group.id != *id || *id >= limits.consumer_groups_per_topic_max {
                return Err(format!("group {id} of topic {} is keyed wrongly", self.id));
            }
            if !names.insert(group.name.as_str()) {
                return Err(format!("topic {} has two groups named {:?}", self.id, group.name));
            }
            if group.members.len() > limits.members_per_group_max as usize {
                return Err(format!("group {id} of topic {} holds too many members", self.id));
            }
            group.check_assignment(self.partitions_count()).map_err(|broken| format!("group {id}: {broken}"))?;
        }
        Ok(())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stream {
    pub id: u32,
    pub name: String,
    pub created_at: u64,
    pub topics: BTreeMap<u32, Topic>,
}

impl Stream {
    pub fn topic_by_name(&self, name: &str) -> Option<&Topic> {
        self.topics.values().find(|topic| topic.name == name)
    }

    pub(super) fn check(&self, limits: &MetadataLimits) -> Result<(), String> {
        if self.topics.len() > limits.topics_per_stream_max as usize {
            return Err(format!("stream {} holds too many topics", self.id));
        }
        let mut names = BTreeSet::new();
        for (id, topic) in &self.topics {
            if !names.insert(topic.name.as_str()) {
                return Err(format!("stream {} has two topics named {:?}", self.id, topic.name));
            }
            self.check_topic_entry(*id, topic, limits)?;
        }
        Ok(())
    }

    /// One topic's invariants and its place in the stream, without walking the other topics' contents.
    pub(super) fn check_topic_entry(&self, id: u32, topic: &Topic, limits: &MetadataLimits) -> Result<(), String> {
        if topic.id != id
            || id >= limits.topics_per_stream_max
            || self.topics.len() > limits.topics_per_stream_max as usize
        {
            return Err(format!("topic {id} of stream {} is keyed wrongly or over the limit", self.id));
        }
        if self.topics.values().any(|other| other.id != id && other.name == topic.name) {
            return Err(format!("stream {} has two topics named {:?}", self.id, topic.name));
        }
        topic.check(limits).map_err(|broken| format!("stream {}: {broken}", self.id))
    }
}

pub(super) fn validate_name(name: &str) -> bool {
    !name.is_empty() && name.len() <= NAME_SIZE_MAX
}

impl Metadata {
    /// Resolves a stream by id or name.
    pub fn resolve_stream(&self, stream: &Identifier) -> Result<&Stream, MetadataError> {
        let found = match stream {
            Identifier::Numeric(id) => self.streams.get(id),
            Identifier::Name(name) => {
                super::validate_identifier(stream)?;
                self.stream_ids_by_name.get(name).and_then(|id| self.streams.get(id))
            }
        };
        found.ok_or_else(|| MetadataError::StreamNotFound(stream.clone()))
    }

    /// Resolves a topic by the ids or names of it and its stream.
    pub fn resolve_topic(&self, stream: &Identifier, topic: &Identifier) -> Result<(&Stream, &Topic), MetadataError> {
        let stream = self.resolve_stream(stream)?;
        let found = match topic {
            Identifier::Numeric(id) => stream.topics.get(id),
            Identifier::Name(name) => {
                super::validate_identifier(topic)?;
                stream.topic_by_name(name)
            }
        };
        let found = found.ok_or_else(|| MetadataError::TopicNotFound { stream: stream.id, topic: topic.clone() })?;
        Ok((stream, found))
    }

    /// The stream and topic a command names, once the acting user is known to manage the topic
    /// (checked in that order: acting user, objects, permission).
    fn managed_topic(
        &self,
        actor_id: u32,
        stream: &Identifier,
        topic: &Identifier,
    ) -> Result<(&Stream, &Topic), MetadataError> {
        let actor = self.acting_user(actor_id)?;
        let (stream, topic) = self.resolve_topic(stream, topic)?;
        if !actor.permissions.manage_topic(stream.id, topic.id) {
            return Err(MetadataError::PermissionDenied(actor_id));
        }
        Ok((stream, topic))
    }

    pub(super) fn topic_mut(&mut self, stream: u32, topic: u32) -> &mut Topic {
        self.streams.get_mut(&stream).and_then(|stream| stream.topics.get_mut(&topic)).expect("resolved before")
    }

    pub(super) fn create_stream(
        &mut self,
        actor_id: u32,
        timestamp: u64,
        name: &str,
    ) -> Result<MetadataResult, MetadataError> {
        let actor = self.acting_user(actor_id)?;
        if !actor.permissions.manage_streams() {
            return Err(MetadataError::PermissionDenied(actor_id));
        }
        if !validate_name(name) {
            return Err(MetadataError::InvalidStreamName);
        }
        if self.stream_ids_by_name.contains_key(name) {
            return Err(MetadataError::StreamAlreadyExists(name.to_owned()));
        }
        if self.streams.len() >= self.limits.streams_max as usize {
            return Err(MetadataError::LimitReached(Limit::Streams));
        }

        let id = super::lowest_free_id(&self.streams);
        assert!(id < self.limits.streams_max);
        let stream = Stream { id, name: name.to_owned(), created_at: timestamp, topics: BTreeMap::new() };
        self.streams.insert(id, stream);
        self.stream_ids_by_name.insert(name.to_owned(), id);
        Ok(MetadataResult::StreamCreated { stream: id })
    }

    pub(super) fn delete_stream(
        &mut self,
        actor_id: u32,
        stream: &Identifier,
    ) -> Result<MetadataResult, MetadataError> {
        let actor = self.acting_user(actor_id)?;
        let id = self.resolve_stream(stream)?.id;
        if !actor.permissions.manage_stream(id) {
            return Err(MetadataError::PermissionDenied(actor_id));
        }

        let removed = self.streams.remove(&id).expect("resolved above");
        self.stream_ids_by_name.remove(&removed.name);
        self.forget_permission_targets(id, None);
        let topics = removed.topics.values().map(|topic| (topic.id, topic.partitions_count())).collect();
        Ok(MetadataResult::StreamDeleted { stream: id, topics })
    }

    pub(super) fn update_stream(
        &mut self,
        actor_id: u32,
        stream: &Identifier,
        name: &str,
    ) -> Result<MetadataResult, MetadataError> {
        let actor = self.acting_user(actor_id)?;
        let id = self.resolve_stream(stream)?.id;
        if !actor.permissions.manage_stream(id) {
            return Err(MetadataError::PermissionDenied(actor_id));
        }
        if !validate_name(name) {
            return Err(MetadataError::InvalidStreamName);
        }
        if self.stream_ids_by_name.get(name).is_some_and(|other| *other != id) {
            return Err(MetadataError::StreamAlreadyExists(name.to_owned()));
        }

        let stream = self.streams.get_mut(&id).expect("resolved above");
        let old = std::mem::replace(&mut stream.name, name.to_owned());
        self.stream_ids_by_name.remove(&old);
        self.stream_ids_by_name.insert(name.to_owned(), id);
        Ok(MetadataResult::StreamUpdated { stream: id })
    }

    pub(super) fn purge_stream(&mut self, actor_id: u32, stream: &Identifier) -> Result<MetadataResult, MetadataError> {
        let actor = self.acting_user(actor_id)?;
        let stream = self.resolve_stream(stream)?;
        if !actor.permissions.manage_stream(stream.id) {
            return Err(MetadataError::PermissionDenied(actor_id));
        }
        let topics = stream.topics.values().map(|topic| (topic.id, topic.partitions_count())).collect();
        Ok(MetadataResult::StreamPurged { stream: stream.id, topics })
    }

    pub(super) fn update_topic(
        &mut self,
        actor_id: u32,
        stream: &Identifier,
        topic: &Identifier,
        name: &str,
        update: &TopicUpdate,
    ) -> Result<MetadataResult, MetadataError> {
        let (stream, topic) = self.managed_topic(actor_id, stream, topic)?;
        let (stream_id, topic_id) = (stream.id, topic.id);
        if !validate_name(name) {
            return Err(MetadataError::InvalidTopicName);
        }
        if stream.topic_by_name(name).is_some_and(|other| other.id != topic_id) {
            return Err(MetadataError::TopicAlreadyExists { stream: stream_id, name: name.to_owned() });
        }
        let mut options = topic.options.clone();
        if let Some(compression) = update.compression {
            options.compression = compression;
        }
        if let Some(message_expiry) = update.message_expiry {
            options.message_expiry = message_expiry;
        }
        if let Some(max_topic_size) = update.max_topic_size {
            options.max_topic_size = max_topic_size;
        }
        options.validate()?;

        let topic = self.topic_mut(stream_id, topic_id);
        topic.name = name.to_owned();
        topic.options = options;
        Ok(MetadataResult::TopicUpdated { stream: stream_id, topic: topic_id })
    }

    pub(super) fn purge_topic(
        &mut self,
        actor_id: u32,
        stream: &Identifier,
        topic: &Identifier,
    ) -> Result<MetadataResult, MetadataError> {
        let (stream, topic) = self.managed_topic(actor_id, stream, topic)?;
        Ok(MetadataResult::TopicPurged {
            stream: stream.id,
            topic: topic.id,
            partitions_count: topic.partitions_count(),
        })
    }

    pub(super) fn delete_segments(
        &mut self,
        actor_id: u32,
        stream: &Identifier,
        topic: &Identifier,
        partition: u32,
        count: u32,
    ) -> Result<MetadataResult, MetadataError> {
        let (stream, topic) = self.managed_topic(actor_id, stream, topic)?;
        if partition >= topic.partitions_count() {
            return Err(MetadataError::PartitionNotFound { stream: stream.id, topic: topic.id, partition });
        }
        Ok(MetadataResult::SegmentsDeleted { stream: stream.id, topic: topic.id, partition, count })
    }

    pub(super) fn create_topic(
        &mut self,
        actor_id: u32,
        timestamp: u64,
        stream: &Identifier,
        name: &str,
        partitions_count: u32,
        options: &TopicOptions,
    ) -> Result<MetadataResult, MetadataError> {
        let actor = self.acting_user(actor_id)?;
        let stream = self.resolve_stream(stream)?;
        let stream_id = stream.id;
        if !actor.permissions.manage_topics(stream_id) {
            return Err(MetadataError::PermissionDenied(actor_id));
        }
        if !validate_name(name) {
            return Err(MetadataError::InvalidTopicName);
        }
        if stream.topic_by_name(name).is_some() {
            return Err(MetadataError::TopicAlreadyExists { stream: stream_id, name: name.to_owned() });
        }
        options.validate()?;
        if stream.topics.len() >= self.limits.topics_per_stream_max as usize {
            return Err(MetadataError::LimitReached(Limit::TopicsPerStream));
        }
        if partitions_count > self.limits.partitions_per_topic_max {
            return Err(MetadataError::LimitReached(Limit::PartitionsPerTopic));
        }

        let id = super::lowest_free_id(&stream.topics);
        assert!(id < self.limits.topics_per_stream_max);
        let mut topic = Topic {
            id,
            name: name.to_owned(),
            created_at: timestamp,
            options: options.clone(),
            partitions: Vec::new(),
            consumer_groups: BTreeMap::new(),
        };
        topic.append_partitions(timestamp, partitions_count);
        self.streams.get_mut(&stream_id).expect("resolved above").topics.insert(id, topic);
        Ok(MetadataResult::TopicCreated { stream: stream_id, topic: id, partitions_count })
    }

    pub(super) fn delete_topic(
        &mut self,
        actor_id: u32,
        stream: &Identifier,
        topic: &Identifier,
    ) -> Result<MetadataResult, MetadataError> {
        let (stream, topic) = self.managed_topic(actor_id, stream, topic)?;
        let (stream_id, topic_id) = (stream.id, topic.id);

        let removed = self.streams.get_mut(&stream_id).and_then(|stream| stream.topics.remove(&topic_id));
        let partitions_count = removed.expect("resolved above").partitions_count();
        self.forget_permission_targets(stream_id, Some(topic_id));
        Ok(MetadataResult::TopicDeleted { stream: stream_id, topic: topic_id, partitions_count })
    }

    pub(super) fn create_partitions(
        &mut self,
        actor_id: u32,
        timestamp: u64,
        stream: &Identifier,
        topic: &Identifier,
        count: u32,
    ) -> Result<MetadataResult, MetadataError> {
        let (stream, topic) = self.managed_topic(actor_id, stream, topic)?;
        let (stream_id, topic_id, existing) = (stream.id, topic.id, topic.partitions_count());
        if count == 0 {
            return Err(MetadataError::InvalidPartitionsCount { count, existing });
        }
        if u64::from(existing) + u64::from(count) > u64::from(self.limits.partitions_per_topic_max) {
            return Err(MetadataError::LimitReached(Limit::PartitionsPerTopic));
        }

        self.topic_mut(stream_id, topic_id).append_partitions(timestamp, count);
        Ok(MetadataResult::PartitionsCreated { stream: stream_id, topic: topic_id, first: existing, count })
    }

    pub(super) fn delete_partitions(
        &mut self,
        actor_id: u32,
        stream: &Identifier,
        topic: &Identifier,
        count: u32,
    ) -> Result<MetadataResult, MetadataError> {
        let (stream, topic) = self.managed_topic(actor_id, stream, topic)?;
        let (stream_id, topic_id, existing) = (stream.id, topic.id, topic.partitions_count());
        if count == 0 || count > existing {
            return Err(MetadataError::InvalidPartitionsCount { count, existing });
        }

        self.topic_mut(stream_id, topic_id).remove_partitions(count);
        Ok(MetadataResult::PartitionsDeleted { stream: stream_id, topic: topic_id, first: existing - count, count })
    }

    /// Streams' invariants (see the module documentation); `Err` names the first one broken.
    pub(super) fn check_streams(&self) -> Result<(), String> {
        if self.streams.len() > self.limits.streams_max as usize || self.streams.len() != self.stream_ids_by_name.len()
        {
            return Err("streams exceed their limit or the name index is stale".into());
        }
        for (id, stream) in &self.streams {
            self.check_stream_entry(*id, stream)?;
        }
        Ok(())
    }

    pub(super) fn check_stream_entry(&self, id: u32, stream: &Stream) -> Result<(), String> {
        if stream.id != id || id >= self.limits.streams_max || self.stream_ids_by_name.get(&stream.name) != Some(&id) {
            return Err(format!("stream {id} is keyed or indexed wrongly"));
        }
        stream.check(&self.limits)
    }
}
