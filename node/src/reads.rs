//! The reads that need no consensus (`PROTOCOL.md`, operation 2), answered by the shard that
//! holds the connection from the committed metadata it reads: a node that lags answers with
//! what it has committed, never with anything uncommitted.

use vireo_protocol::wire::{self, ClientRequest, Name};

use crate::admission::{identifier, STATUS_FEATURE_UNAVAILABLE, STATUS_INVALID_COMMAND};
use crate::metadata::{Metadata, ReadKind, Stream, Topic};

/// Who asks: the user a connection is logged in as, its client id and its connection number.
#[derive(Clone, Copy, Debug)]
pub struct Reader {
    pub user_id: u32,
    pub client: u128,
    pub connection: u64,
}

fn authorize(metadata: &Metadata, user_id: u32, kind: ReadKind) -> Result<(), u32> {
    metadata.authorize_read(user_id, kind).map_err(|error| error.code())
}

fn name(text: &str) -> Name {
    Name::new(text).expect("names in the metadata are valid wire names")
}

fn wire_stream(stream: &Stream) -> wire::Stream {
    wire::Stream {
        id: stream.id,
        created_at: stream.created_at / 1_000,
        topics_count: stream.topics.len() as u32,
        size: 0,
        messages_count: 0,
        name: name(&stream.name),
        options: wire::Options::empty(),
    }
}

fn wire_topic(topic: &Topic) -> wire::Topic {
    wire::Topic {
        id: topic.id,
        created_at: topic.created_at / 1_000,
        partitions_count: topic.partitions_count(),
        message_expiry: topic.options.message_expiry,
        compression: topic.options.compression as u8 + 1,
        max_topic_size: topic.options.max_topic_size,
        size: 0,
        messages_count: 0,
        name: name(&topic.name),
        options: wire::Options::empty(),
        derived_options: wire::Options::empty(),
    }
}

fn wire_group(group: &crate::metadata::ConsumerGroup, partitions_count: u32) -> wire::ConsumerGroup {
    wire::ConsumerGroup {
        id: group.id,
        partitions_count,
        name: name(&group.name),
        members: group
            .members
            .iter()
            .enumerate()
            .map(|(index, (_, partitions))| wire::ConsumerGroupMember {
                id: index as u32,
                partitions: partitions.clone(),
            })
            .collect(),
    }
}

/// The body answering a read, or the status refusing it. `request` is a read's body decoded.
pub fn answer(metadata: &Metadata, reader: Reader, request: &ClientRequest) -> Result<Vec<u8>, u32> {
    let user_id = reader.user_id;
    match request {
        ClientRequest::Ping => Ok(Vec::new()),
        ClientRequest::GetMe => {
            let groups = metadata
                .groups_of_client(reader.client)
                .into_iter()
                .map(|(stream_id, topic_id, group_id)| wire::GroupMembership { stream_id, topic_id, group_id })
                .collect();
            let me = wire::ClientInfo {
                client_id: reader.connection as u32,
                user_id,
                transport: 1,
                address: String::new(),
                groups,
            };
            Ok(me.encode())
        }
        ClientRequest::GetStreams => {
            authorize(metadata, user_id, ReadKind::Streams)?;
            let streams: Vec<wire::Stream> = metadata.streams().map(wire_stream).collect();
            Ok(wire::Stream::encode_list(&streams))
        }
        ClientRequest::GetStream { stream } => {
            let stream = metadata.resolve_stream(&identifier(stream)).map_err(|error| error.code())?;
            authorize(metadata, user_id, ReadKind::Stream { stream: stream.id })?;
            let details = wire::StreamDetails {
                stream: wire_stream(stream),
                topics: stream.topics.values().map(wire_topic).collect(),
            };
            Ok(details.encode())
        }
        ClientRequest::GetTopics { stream } => {
            let stream = metadata.resolve_stream(&identifier(stream)).map_err(|error| error.code())?;
            authorize(metadata, user_id, ReadKind::Stream { stream: stream.id })?;
            let topics: Vec<wire::Topic> = stream.topics.values().map(wire_topic).collect();
            Ok(wire::Topic::encode_list(&topics))
        }
        ClientRequest::GetTopic { stream, topic } => {
            let (stream, topic) =
                metadata.resolve_topic(&identifier(stream), &identifier(topic)).map_err(|error| error.code())?;
            authorize(metadata, user_id, ReadKind::Topic { stream: stream.id, topic: topic.id })?;
            let partitions = topic
                .partitions
                .iter()
                .map(|partition| wire::Partition {
                    id: partition.id,
                    created_at: partition.created_at / 1_000,
                    segments_count: 0,
                    current_offset: 0,
                    size: 0,
                    messages_count: 0,
                })
                .collect();
            Ok(wire::TopicDetails { topic: wire_topic(topic), partitions }.encode())
        }
        ClientRequest::GetConsumerGroups { stream, topic } => {
            let (stream, topic) =
                metadata.resolve_topic(&identifier(stream), &identifier(topic)).map_err(|error| error.code())?;
            authorize(metadata, user_id, ReadKind::ConsumerGroups { stream: stream.id, topic: topic.id })?;
            let groups: Vec<wire::ConsumerGroup> =
                topic.consumer_groups.values().map(|group| wire_group(group, topic.partitions_count())).collect();
            Ok(wire::ConsumerGroup::encode_list(&groups))
        }
        ClientRequest::GetConsumerGroup { stream, topic, group } => {
            let (stream_id, topic_id, group) = metadata
                .resolve_consumer_group(&identifier(stream), &identifier(topic), &identifier(group))
                .map_err(|error| error.code())?;
            authorize(metadata, user_id, ReadKind::ConsumerGroups { stream: stream_id, topic: topic_id })?;
            let partitions_count = metadata.topic(stream_id, topic_id).map_or(0, Topic::partitions_count);
            Ok(wire_group(group, partitions_count).encode())
        }
        // Not served by this node yet: the reference answers these with their own data.
        ClientRequest::GetStats | ClientRequest::GetClient { .. } | ClientRequest::GetConsumerOffset(_) => {
            Err(STATUS_FEATURE_UNAVAILABLE)
        }
        _ => Err(STATUS_INVALID_COMMAND),
    }
}
