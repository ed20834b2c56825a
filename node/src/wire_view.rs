//! The committed metadata as the client protocol shows it: streams, topics, consumer groups,
//! users and permissions turned into the wire bodies of `PROTOCOL.md`, and wire permissions
//! turned into the metadata's. One place, so that a create's reply and a get's show the same.

use vireo_io::Namespace;
use vireo_protocol::wire::{self, Name};

use crate::partition_figures::NodeFigures;

use crate::metadata::{
    Compression, ConsumerGroup, GlobalPermissions, Metadata, Permissions, Stream, StreamPermissions, Topic,
    TopicPermissions, User, UserStatus,
};

fn name(text: &str) -> Name {
    Name::new(text).expect("names in the metadata are valid wire names")
}

/// Microseconds, the wire's unit, from the metadata's nanoseconds.
fn micros(nanos: u64) -> u64 {
    nanos / 1_000
}

/// A stream with its size and messages as `figures` say (`partition_figures`: node-local, so a
/// committed reply passes none, the zeros of a new stream).
pub fn stream(stream: &Stream, figures: &NodeFigures) -> wire::Stream {
    let (size, messages_count) = stream.topics.values().fold((0, 0), |(size, messages), topic| {
        let (topic_size, topic_messages) = topic_totals(stream.id, topic, figures);
        (size + topic_size, messages + topic_messages)
    });
    wire::Stream {
        id: stream.id,
        created_at: micros(stream.created_at),
        topics_count: stream.topics.len() as u32,
        size,
        messages_count,
        name: name(&stream.name),
        options: wire::Options::empty(),
    }
}

pub fn stream_details(of: &Stream, figures: &NodeFigures) -> wire::StreamDetails {
    wire::StreamDetails {
        stream: stream(of, figures),
        topics: of.topics.values().map(|each| topic(of.id, each, figures)).collect(),
    }
}

fn topic_totals(stream: u32, topic: &Topic, figures: &NodeFigures) -> (u64, u64) {
    figures.topic_totals(stream, topic.id, topic.partitions.iter().map(|partition| partition.id))
}

/// Iggy's numbering of compression algorithms.
pub fn compression_code(compression: Compression) -> u8 {
    match compression {
        Compression::None => 1,
        Compression::Gzip => 2,
    }
}

pub fn topic(stream: u32, topic: &Topic, figures: &NodeFigures) -> wire::Topic {
    let (size, messages_count) = topic_totals(stream, topic, figures);
    wire::Topic {
        id: topic.id,
        created_at: micros(topic.created_at),
        partitions_count: topic.partitions_count(),
        message_expiry: topic.options.message_expiry,
        compression: compression_code(topic.options.compression),
        max_topic_size: topic.options.max_topic_size,
        size,
        messages_count,
        name: name(&topic.name),
        options: wire::Options::empty(),
        derived_options: wire::Options::empty(),
    }
}

pub fn topic_details(stream: u32, of: &Topic, figures: &NodeFigures) -> wire::TopicDetails {
    let partitions = of
        .partitions
        .iter()
        .map(|partition| {
            let held = figures.of(Namespace::partition(stream, of.id, partition.id));
            wire::Partition {
                id: partition.id,
                created_at: micros(partition.created_at),
                segments_count: held.segments,
                current_offset: held.current_offset,
                size: held.size,
                messages_count: held.messages,
            }
        })
        .collect();
    wire::TopicDetails { topic: topic(stream, of, figures), partitions }
}

/// A group with its members, numbered in the order of their client ids.
pub fn consumer_group(group: &ConsumerGroup, partitions_count: u32) -> wire::ConsumerGroup {
    wire::ConsumerGroup {
        id: group.id,
        partitions_count,
        name: name(&group.name),
        members: group
            .members
            .values()
            .enumerate()
            .map(|(index, partitions)| wire::ConsumerGroupMember { id: index as u32, partitions: partitions.clone() })
            .collect(),
    }
}

pub fn consumer_group_summary(group: &ConsumerGroup, partitions_count: u32) -> wire::ConsumerGroupSummary {
    wire::ConsumerGroupSummary {
        id: group.id,
        partitions_count,
        members_count: group.members.len() as u32,
        name: name(&group.name),
    }
}

pub fn user(user: &User) -> wire::UserResponse {
    wire::UserResponse {
        id: user.id,
        created_at: micros(user.created_at),
        status: match user.status {
            UserStatus::Active => 1,
            UserStatus::Inactive => 2,
        },
        username: name(&user.username),
        options: wire::Options::empty(),
    }
}

pub fn user_details(of: &User) -> wire::UserDetails {
    wire::UserDetails { user: user(of), permissions: of.permissions_given.then(|| permissions(&of.permissions)) }
}

pub fn permissions(permissions: &Permissions) -> wire::Permissions {
    let global = permissions.global;
    wire::Permissions {
        global: wire::GlobalPermissions {
            manage_servers: global.manage_servers,
            read_servers: global.read_servers,
            manage_users: global.manage_users,
            read_users: global.read_users,
            manage_streams: global.manage_streams,
            read_streams: global.read_streams,
            manage_topics: global.manage_topics,
            read_topics: global.read_topics,
            poll_messages: global.poll_messages,
            send_messages: global.send_messages,
        },
        streams: permissions
            .streams
            .iter()
            .map(|(id, stream)| {
                let topics = stream
                    .topics
                    .iter()
                    .map(|(id, topic)| {
                        let topic = wire::TopicPermissions {
                            manage_topic: topic.manage_topic,
                            read_topic: topic.read_topic,
                            poll_messages: topic.poll_messages,
                            send_messages: topic.send_messages,
                        };
                        (*id, topic)
                    })
                    .collect();
                let stream = wire::StreamPermissions {
                    manage_stream: stream.manage_stream,
                    read_stream: stream.read_stream,
                    manage_topics: stream.manage_topics,
                    read_topics: stream.read_topics,
                    poll_messages: stream.poll_messages,
                    send_messages: stream.send_messages,
                    topics,
                };
                (*id, stream)
            })
            .collect(),
    }
}

/// The metadata's permissions for wire permissions.
pub fn permissions_from_wire(wire: &wire::Permissions) -> Permissions {
    let global = wire.global;
    Permissions {
        global: GlobalPermissions {
            manage_servers: global.manage_servers,
            read_servers: global.read_servers,
            manage_users: global.manage_users,
            read_users: global.read_users,
            manage_streams: global.manage_streams,
            read_streams: global.read_streams,
            manage_topics: global.manage_topics,
            read_topics: global.read_topics,
            poll_messages: global.poll_messages,
            send_messages: global.send_messages,
        },
        streams: wire
            .streams
            .iter()
            .map(|(id, stream)| {
                let topics = stream
                    .topics
                    .iter()
                    .map(|(id, topic)| {
                        let topic = TopicPermissions {
                            manage_topic: topic.manage_topic,
                            read_topic: topic.read_topic,
                            poll_messages: topic.poll_messages,
                            send_messages: topic.send_messages,
                        };
                        (*id, topic)
                    })
                    .collect();
                let stream = StreamPermissions {
                    manage_stream: stream.manage_stream,
                    read_stream: stream.read_stream,
                    manage_topics: stream.manage_topics,
                    read_topics: stream.read_topics,
                    poll_messages: stream.poll_messages,
                    send_messages: stream.send_messages,
                    topics,
                };
                (*id, stream)
            })
            .collect(),
    }
}

/// Counts get_stats reports from the metadata alone.
pub fn counts(metadata: &Metadata) -> (u32, u32, u32, u32) {
    let (mut topics, mut partitions, mut groups) = (0u32, 0u32, 0u32);
    for stream in metadata.streams() {
        for topic in stream.topics.values() {
            topics += 1;
            partitions += topic.partitions_count();
            groups += topic.consumer_groups.len() as u32;
        }
    }
    (metadata.streams().count() as u32, topics, partitions, groups)
}
