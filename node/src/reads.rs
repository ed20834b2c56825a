//! The reads that need no consensus (`PROTOCOL.md`, operation 2), answered by the shard that
//! holds the connection from the committed metadata it reads: a node that lags answers with
//! what it has committed, never with anything uncommitted.

use vireo_protocol::config::Bug;
use vireo_protocol::wire::{self, ClientRequest, Name};

use crate::admission::{identifier, STATUS_FEATURE_UNAVAILABLE, STATUS_INVALID_COMMAND};
use crate::client_reply::{SERVER_PROTOCOL_VERSION, SERVER_VERSION};
use crate::metadata::{Metadata, ReadKind};
use crate::partition_figures::NodeFigures;
use crate::wire_view;

/// Who asks, and what of the node only the asking shard knows.
#[derive(Clone, Debug)]
pub struct Reader<'a> {
    pub user_id: u32,
    pub client: u128,
    pub connection: u64,
    /// This shard's connections (id, user logged in on it, consumer groups it is in).
    pub clients: &'a [wire::ClientSummary],
    /// The metadata op the view was committed at: a consumer group's generation.
    pub metadata_op: u64,
    /// What the partition groups say of themselves (get_stream, get_topic).
    pub figures: &'a NodeFigures,
    /// The node's last reading of its disk (get_stats).
    pub disk: Option<vireo_io::DiskSpace>,
    /// The simulator's planted bug, if any (`Bug::SkipReadPermission` skips every check here).
    pub bug: Option<Bug>,
}

impl Reader<'_> {
    fn authorize(&self, metadata: &Metadata, kind: ReadKind) -> Result<(), u32> {
        if self.bug == Some(Bug::SkipReadPermission) {
            return Ok(());
        }
        metadata.authorize_read(self.user_id, kind).map_err(|error| error.code())
    }
}

/// The option keys each describe_options scope knows: (key, kind, default, description).
fn option_descriptions(scope: u8) -> Result<Vec<wire::OptionDescription>, u32> {
    let describe = |key: &str, kind: u8, default: Vec<u8>, description: &str| wire::OptionDescription {
        key: Name::new(key).expect("a short key"),
        kind,
        default_value: default,
        description: description.to_string(),
    };
    let u64_value = |value: u64| value.to_le_bytes().to_vec();
    match scope {
        // Topic.
        1 => Ok(vec![
            describe("compression_algorithm", 2, b"none".to_vec(), "none or gzip"),
            describe("enforce_fsync", 3, vec![0], "acknowledge a send only once a quorum has synced it"),
            describe(
                "max_topic_size",
                12,
                u64_value(0),
                "bytes the topic keeps before its oldest segments go; 0 is unlimited",
            ),
            describe("message_expiry", 12, u64_value(0), "microseconds a message lives; 0 keeps it forever"),
            describe(
                "messages_required_to_save",
                11,
                1024u32.to_le_bytes().to_vec(),
                "messages buffered before a flush",
            ),
            describe("preallocate_segments", 3, vec![0], "allocate a segment's file whole when it opens"),
            describe("segment_size", 12, u64_value(1 << 30), "bytes at which a segment is sealed"),
            describe("size_of_messages_required_to_save", 12, u64_value(1 << 20), "bytes buffered before a flush"),
        ]),
        // Streams and users take no options.
        2 | 3 => Ok(Vec::new()),
        _ => Err(STATUS_INVALID_COMMAND),
    }
}

/// The body answering a read, or the status refusing it. `request` is a read's body decoded.
pub fn answer(metadata: &Metadata, reader: &Reader<'_>, request: &ClientRequest) -> Result<Vec<u8>, u32> {
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
        ClientRequest::GetClient { client_id } => {
            reader.authorize(metadata, ReadKind::Servers)?;
            // An unknown client is an empty body (the SDK's None).
            Ok(reader
                .clients
                .iter()
                .find(|client| client.client_id == *client_id)
                .map(|client| {
                    wire::ClientInfo {
                        client_id: client.client_id,
                        user_id: client.user_id,
                        transport: client.transport,
                        address: client.address.clone(),
                        groups: Vec::new(),
                    }
                    .encode()
                })
                .unwrap_or_default())
        }
        ClientRequest::GetClients => {
            reader.authorize(metadata, ReadKind::Servers)?;
            Ok(wire::ClientSummary::encode_list(reader.clients))
        }
        ClientRequest::GetStats => {
            reader.authorize(metadata, ReadKind::Servers)?;
            let (streams_count, topics_count, partitions_count, consumer_groups_count) = wire_view::counts(metadata);
            let stats = wire::StatsReply {
                process_id: 0,
                cpu_usage: 0.0,
                total_cpu_usage: 0.0,
                memory_usage: 0,
                total_memory: 0,
                available_memory: 0,
                run_time: 0,
                start_time: 0,
                read_bytes: 0,
                written_bytes: 0,
                messages_size_bytes: 0,
                streams_count,
                topics_count,
                partitions_count,
                segments_count: 0,
                messages_count: 0,
                clients_count: reader.clients.len() as u32,
                consumer_groups_count,
                hostname: String::new(),
                os_name: String::new(),
                os_version: String::new(),
                kernel_version: String::new(),
                iggy_server_version: SERVER_VERSION.to_string(),
                iggy_server_semver: SERVER_PROTOCOL_VERSION,
                cache_metrics: Vec::new(),
                threads_count: 0,
                free_disk_space: reader.disk.map_or(0, |disk| disk.free),
                total_disk_space: reader.disk.map_or(0, |disk| disk.total),
            };
            Ok(stats.encode())
        }
        ClientRequest::DescribeOptions { scope } => {
            Ok(wire::OptionDescription::encode_list(&option_descriptions(*scope)?))
        }
        ClientRequest::GetUsers => {
            reader.authorize(metadata, ReadKind::Users)?;
            let users: Vec<wire::UserResponse> = metadata.users().map(wire_view::user).collect();
            Ok(wire::UserResponse::encode_list(&users))
        }
        ClientRequest::GetUser { user } => {
            // A user, stream, topic or group that is not there is an empty body (the SDK's
            // None), before any permission check: the reference answers so.
            let Ok(found) = metadata.resolve_user(&identifier(user)) else { return Ok(Vec::new()) };
            if found.id != user_id {
                reader.authorize(metadata, ReadKind::Users)?;
            }
            Ok(wire_view::user_details(found).encode())
        }
        ClientRequest::GetPersonalAccessTokens => {
            let me = metadata.user(user_id).ok_or(40u32)?;
            let tokens: Vec<wire::PersonalAccessTokenInfo> = me
                .tokens
                .values()
                .map(|token| wire::PersonalAccessTokenInfo {
                    name: Name::new(token.name.as_str()).expect("token names are valid wire names"),
                    expiry_at: token.expires_at.map_or(0, |at| at / 1_000),
                })
                .collect();
            Ok(wire::PersonalAccessTokenInfo::encode_list(&tokens))
        }
        ClientRequest::GetStreams => {
            reader.authorize(metadata, ReadKind::Streams)?;
            let streams: Vec<wire::Stream> =
                metadata.streams().map(|stream| wire_view::stream(stream, reader.figures)).collect();
            Ok(wire::Stream::encode_list(&streams))
        }
        ClientRequest::GetStream { stream } => {
            let Ok(stream) = metadata.resolve_stream(&identifier(stream)) else { return Ok(Vec::new()) };
            reader.authorize(metadata, ReadKind::Stream { stream: stream.id })?;
            Ok(wire_view::stream_details(stream, reader.figures).encode())
        }
        ClientRequest::GetTopics { stream } => {
            // A missing stream lists no topics (the reference's answer).
            let Ok(stream) = metadata.resolve_stream(&identifier(stream)) else {
                return Ok(wire::Topic::encode_list(&[]));
            };
            reader.authorize(metadata, ReadKind::Stream { stream: stream.id })?;
            let topics: Vec<wire::Topic> =
                stream.topics.values().map(|topic| wire_view::topic(stream.id, topic, reader.figures)).collect();
            Ok(wire::Topic::encode_list(&topics))
        }
        ClientRequest::GetTopic { stream, topic } => {
            let Ok((stream, topic)) = metadata.resolve_topic(&identifier(stream), &identifier(topic)) else {
                return Ok(Vec::new());
            };
            reader.authorize(metadata, ReadKind::Topic { stream: stream.id, topic: topic.id })?;
            Ok(wire_view::topic_details(stream.id, topic, reader.figures).encode())
        }
        ClientRequest::GetConsumerGroups { stream, topic } => {
            let (stream, topic) =
                metadata.resolve_topic(&identifier(stream), &identifier(topic)).map_err(|error| error.code())?;
            reader.authorize(metadata, ReadKind::ConsumerGroups { stream: stream.id, topic: topic.id })?;
            let groups: Vec<wire::ConsumerGroupSummary> = topic
                .consumer_groups
                .values()
                .map(|group| wire_view::consumer_group_summary(group, topic.partitions_count()))
                .collect();
            Ok(wire::ConsumerGroupSummary::encode_list(&groups))
        }
        ClientRequest::GetConsumerGroup { stream, topic, group } => {
            // A missing stream or topic is an error naming it; a missing group, an empty body.
            metadata.resolve_topic(&identifier(stream), &identifier(topic)).map_err(|error| error.code())?;
            let Ok((stream_id, topic_id, group)) =
                metadata.resolve_consumer_group(&identifier(stream), &identifier(topic), &identifier(group))
            else {
                return Ok(Vec::new());
            };
            reader.authorize(metadata, ReadKind::ConsumerGroups { stream: stream_id, topic: topic_id })?;
            let partitions_count = metadata.topic(stream_id, topic_id).map_or(0, |topic| topic.partitions_count());
            Ok(wire_view::consumer_group(group, partitions_count).encode())
        }
        ClientRequest::SyncConsumerGroup { stream, topic, group } => {
            let (stream_id, topic_id, group) = metadata
                .resolve_consumer_group(&identifier(stream), &identifier(topic), &identifier(group))
                .map_err(|error| error.code())?;
            reader.authorize(metadata, ReadKind::Poll { stream: stream_id, topic: topic_id })?;
            // Not a member: an empty body, which tells the SDK to join again.
            Ok(group
                .members
                .get(&reader.client)
                .map(|partitions| {
                    wire::SyncConsumerGroupReply { generation: reader.metadata_op, partitions: partitions.clone() }
                        .encode()
                })
                .unwrap_or_default())
        }
        // The reference answers this so. (A snapshot is the node's: `NodeEvent::SnapshotRequested`.)
        ClientRequest::FlushUnsavedBuffer { .. } => Err(STATUS_FEATURE_UNAVAILABLE),
        _ => Err(STATUS_INVALID_COMMAND),
    }
}
