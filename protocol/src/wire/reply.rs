//! Reply bodies, server to client: one type per reply layout of `PROTOCOL.md` ("Bodies"), each
//! with `encode` and `decode` (the whole body) and `read`/`write` for use inside other bodies.
//!
//! Counts are checked against the bytes left before any loop trusts them, and every list grows
//! one decoded item at a time, so a lying count costs nothing. Where a reply layout carries a
//! count that also sizes a list that follows it (a stream's topics, a topic's partitions), the
//! list's length is the count: `encode` asserts it, `decode` reads exactly that many.

use vireo_storage::batch::{check_client_batch, BatchError, BatchHeader};

use super::options::Options;
use super::primitives::Name;
use super::reader::{string_u32, Put, Reader};
use super::WireError;

/// Decodes a whole body with `read`, refusing trailing bytes.
fn decode_whole<T>(body: &[u8], read: impl FnOnce(&mut Reader<'_>) -> Result<T, WireError>) -> Result<T, WireError> {
    let mut reader = Reader::new(body);
    let value = read(&mut reader)?;
    reader.finish()?;
    Ok(value)
}

/// Items back to back until the body ends: the list replies (get_streams, get_topics,
/// get_consumer_groups), which carry no count of their own.
fn read_to_end<T>(
    reader: &mut Reader<'_>,
    read: impl Fn(&mut Reader<'_>) -> Result<T, WireError>,
) -> Result<Vec<T>, WireError> {
    let mut items = Vec::new();
    while !reader.is_empty() {
        items.push(read(reader)?);
    }
    Ok(items)
}

fn encode_with(write: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
    let mut out = Vec::new();
    write(&mut out);
    out
}

macro_rules! whole_body_codec {
    ($type:ty) => {
        impl $type {
            pub fn decode(body: &[u8]) -> Result<$type, WireError> {
                decode_whole(body, <$type>::read)
            }

            pub fn encode(&self) -> Vec<u8> {
                encode_with(|out| self.write(out))
            }
        }
    };
}

/// One entry of a result section: the outcome of the request's `index`-th part.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ResultEntry {
    pub index: u32,
    /// 0 for success, else an error code.
    pub result: u32,
}

/// `[count u32][count x (index u32, result u32)]`, at the start of replies to metadata ops,
/// store/delete consumer offset and Register. The payload, if any, follows it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ResultSection {
    pub entries: Vec<ResultEntry>,
}

impl ResultSection {
    pub fn ok() -> ResultSection {
        ResultSection::default()
    }

    /// OK when there are no entries or the first result is 0 (`PROTOCOL.md`).
    pub fn is_ok(&self) -> bool {
        self.entries.first().is_none_or(|entry| entry.result == 0)
    }

    pub fn read(reader: &mut Reader<'_>) -> Result<ResultSection, WireError> {
        let count = reader.count("result count", 8)?;
        let mut entries = Vec::new();
        for _ in 0..count {
            entries.push(ResultEntry { index: reader.u32("result index")?, result: reader.u32("result")? });
        }
        Ok(ResultSection { entries })
    }

    pub fn write(&self, out: &mut Vec<u8>) {
        out.put_len_u32(self.entries.len());
        for entry in &self.entries {
            out.put_u32(entry.index);
            out.put_u32(entry.result);
        }
    }

    /// Splits a reply body into its result section and the payload after it.
    pub fn decode_prefix(body: &[u8]) -> Result<(ResultSection, &[u8]), WireError> {
        let mut reader = Reader::new(body);
        let section = ResultSection::read(&mut reader)?;
        Ok((section, reader.rest()))
    }
}
whole_body_codec!(ResultSection);

/// The reply to login_register.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoginReply {
    pub result: ResultSection,
    pub user_id: u32,
    pub session: u64,
    pub server_protocol_version: u32,
    pub server_version: Name,
}

impl LoginReply {
    pub fn read(reader: &mut Reader<'_>) -> Result<LoginReply, WireError> {
        Ok(LoginReply {
            result: ResultSection::read(reader)?,
            user_id: reader.u32("user id")?,
            session: reader.u64("session")?,
            server_protocol_version: reader.u32("server protocol version")?,
            server_version: Name::read(reader)?,
        })
    }

    pub fn write(&self, out: &mut Vec<u8>) {
        self.result.write(out);
        out.put_u32(self.user_id);
        out.put_u64(self.session);
        out.put_u32(self.server_protocol_version);
        self.server_version.write(out);
    }
}
whole_body_codec!(LoginReply);

/// A consumer group a client belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GroupMembership {
    pub stream_id: u32,
    pub topic_id: u32,
    pub group_id: u32,
}

/// The reply to get_me and get_client.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientInfo {
    pub client_id: u32,
    pub user_id: u32,
    /// Iggy's transport numbering (1 TCP, 2 QUIC, ...), passed through as sent.
    pub transport: u8,
    pub address: String,
    pub groups: Vec<GroupMembership>,
}

impl ClientInfo {
    pub fn read(reader: &mut Reader<'_>) -> Result<ClientInfo, WireError> {
        let client_id = reader.u32("client id")?;
        let user_id = reader.u32("user id")?;
        let transport = reader.u8("transport")?;
        let address = string_u32(reader, "address")?;
        let count = reader.count("group count", 12)?;
        let mut groups = Vec::new();
        for _ in 0..count {
            groups.push(GroupMembership {
                stream_id: reader.u32("group stream id")?,
                topic_id: reader.u32("group topic id")?,
                group_id: reader.u32("group id")?,
            });
        }
        Ok(ClientInfo { client_id, user_id, transport, address, groups })
    }

    pub fn write(&self, out: &mut Vec<u8>) {
        out.put_u32(self.client_id);
        out.put_u32(self.user_id);
        out.put_u8(self.transport);
        out.put_bytes_u32(self.address.as_bytes());
        out.put_len_u32(self.groups.len());
        for group in &self.groups {
            out.put_u32(group.stream_id);
            out.put_u32(group.topic_id);
            out.put_u32(group.group_id);
        }
    }
}
whole_body_codec!(ClientInfo);

/// A stream without its topics: an item of get_streams' reply and the head of get_stream's.
#[derive(Clone, Debug, PartialEq)]
pub struct Stream {
    pub id: u32,
    /// Microseconds since the Unix epoch.
    pub created_at: u64,
    pub topics_count: u32,
    pub size: u64,
    pub messages_count: u64,
    pub name: Name,
    pub options: Options,
}

impl Stream {
    pub fn read(reader: &mut Reader<'_>) -> Result<Stream, WireError> {
        Ok(Stream {
            id: reader.u32("stream id")?,
            created_at: reader.u64("created_at")?,
            topics_count: reader.u32("topics count")?,
            size: reader.u64("size")?,
            messages_count: reader.u64("messages count")?,
            name: Name::read(reader)?,
            options: Options::read(reader)?,
        })
    }

    pub fn write(&self, out: &mut Vec<u8>) {
        out.put_u32(self.id);
        out.put_u64(self.created_at);
        out.put_u32(self.topics_count);
        out.put_u64(self.size);
        out.put_u64(self.messages_count);
        self.name.write(out);
        self.options.write(out);
    }

    /// get_streams' reply: streams back to back, without their topics (Vireo's choice; the
    /// protocol describes only get_stream).
    pub fn decode_list(body: &[u8]) -> Result<Vec<Stream>, WireError> {
        decode_whole(body, |reader| read_to_end(reader, Stream::read))
    }

    pub fn encode_list(streams: &[Stream]) -> Vec<u8> {
        encode_with(|out| streams.iter().for_each(|stream| stream.write(out)))
    }
}

/// get_stream's reply: the stream, then `topics_count` topics (without their partitions).
#[derive(Clone, Debug, PartialEq)]
pub struct StreamDetails {
    pub stream: Stream,
    pub topics: Vec<Topic>,
}

impl StreamDetails {
    pub fn read(reader: &mut Reader<'_>) -> Result<StreamDetails, WireError> {
        let stream = Stream::read(reader)?;
        reader.check_count(stream.topics_count, TOPIC_SIZE_MIN, "topics")?;
        let mut topics = Vec::new();
        for _ in 0..stream.topics_count {
            topics.push(Topic::read(reader)?);
        }
        Ok(StreamDetails { stream, topics })
    }

    pub fn write(&self, out: &mut Vec<u8>) {
        assert_eq!(self.stream.topics_count as usize, self.topics.len(), "topics_count sizes the topics that follow");
        self.stream.write(out);
        for topic in &self.topics {
            topic.write(out);
        }
    }
}
whole_body_codec!(StreamDetails);

/// Fixed fields, the shortest Name and two empty option blocks.
const TOPIC_SIZE_MIN: usize = 4 + 8 + 4 + 8 + 1 + 8 + 8 + 8 + 2 + 4 + 4;
const PARTITION_SIZE: usize = 4 + 8 + 4 + 8 + 8 + 8;

/// A topic without its partitions: an item of a stream's topics and of get_topics' reply, and
/// the head of get_topic's reply.
#[derive(Clone, Debug, PartialEq)]
pub struct Topic {
    pub id: u32,
    pub created_at: u64,
    pub partitions_count: u32,
    pub message_expiry: u64,
    /// Iggy's compression algorithm numbering, passed through as stored.
    pub compression: u8,
    pub max_topic_size: u64,
    pub size: u64,
    pub messages_count: u64,
    pub name: Name,
    pub options: Options,
    /// Settings the server derived from `options` (defaults filled in).
    pub derived_options: Options,
}

impl Topic {
    pub fn read(reader: &mut Reader<'_>) -> Result<Topic, WireError> {
        Ok(Topic {
            id: reader.u32("topic id")?,
            created_at: reader.u64("created_at")?,
            partitions_count: reader.u32("partitions count")?,
            message_expiry: reader.u64("message expiry")?,
            compression: reader.u8("compression")?,
            max_topic_size: reader.u64("max topic size")?,
            size: reader.u64("size")?,
            messages_count: reader.u64("messages count")?,
            name: Name::read(reader)?,
            options: Options::read(reader)?,
            derived_options: Options::read(reader)?,
        })
    }

    pub fn write(&self, out: &mut Vec<u8>) {
        out.put_u32(self.id);
        out.put_u64(self.created_at);
        out.put_u32(self.partitions_count);
        out.put_u64(self.message_expiry);
        out.put_u8(self.compression);
        out.put_u64(self.max_topic_size);
        out.put_u64(self.size);
        out.put_u64(self.messages_count);
        self.name.write(out);
        self.options.write(out);
        self.derived_options.write(out);
    }

    /// get_topics' reply: topics back to back, without their partitions (Vireo's choice).
    pub fn decode_list(body: &[u8]) -> Result<Vec<Topic>, WireError> {
        decode_whole(body, |reader| read_to_end(reader, Topic::read))
    }

    pub fn encode_list(topics: &[Topic]) -> Vec<u8> {
        encode_with(|out| topics.iter().for_each(|topic| topic.write(out)))
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Partition {
    pub id: u32,
    pub created_at: u64,
    pub segments_count: u32,
    pub current_offset: u64,
    pub size: u64,
    pub messages_count: u64,
}

/// get_topic's reply: the topic, then `partitions_count` partitions.
#[derive(Clone, Debug, PartialEq)]
pub struct TopicDetails {
    pub topic: Topic,
    pub partitions: Vec<Partition>,
}

impl TopicDetails {
    pub fn read(reader: &mut Reader<'_>) -> Result<TopicDetails, WireError> {
        let topic = Topic::read(reader)?;
        reader.check_count(topic.partitions_count, PARTITION_SIZE, "partitions")?;
        let mut partitions = Vec::new();
        for _ in 0..topic.partitions_count {
            partitions.push(Partition {
                id: reader.u32("partition id")?,
                created_at: reader.u64("partition created_at")?,
                segments_count: reader.u32("segments count")?,
                current_offset: reader.u64("current offset")?,
                size: reader.u64("partition size")?,
                messages_count: reader.u64("partition messages count")?,
            });
        }
        Ok(TopicDetails { topic, partitions })
    }

    pub fn write(&self, out: &mut Vec<u8>) {
        assert_eq!(
            self.topic.partitions_count as usize,
            self.partitions.len(),
            "partitions_count sizes the partitions that follow"
        );
        self.topic.write(out);
        for partition in &self.partitions {
            out.put_u32(partition.id);
            out.put_u64(partition.created_at);
            out.put_u32(partition.segments_count);
            out.put_u64(partition.current_offset);
            out.put_u64(partition.size);
            out.put_u64(partition.messages_count);
        }
    }
}
whole_body_codec!(TopicDetails);

/// Where a sent batch went.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Appended {
    pub stream_id: u32,
    pub topic_id: u32,
    pub partition_id: u32,
    pub base_offset: u64,
}

/// The reply to send_messages: `[n u32][n x (stream u32, topic u32, partition u32, base_offset u64)]`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SendMessagesReply {
    pub appended: Vec<Appended>,
}

impl SendMessagesReply {
    pub fn read(reader: &mut Reader<'_>) -> Result<SendMessagesReply, WireError> {
        let count = reader.count("appended count", 20)?;
        let mut appended = Vec::new();
        for _ in 0..count {
            appended.push(Appended {
                stream_id: reader.u32("stream id")?,
                topic_id: reader.u32("topic id")?,
                partition_id: reader.u32("partition id")?,
                base_offset: reader.u64("base offset")?,
            });
        }
        Ok(SendMessagesReply { appended })
    }

    pub fn write(&self, out: &mut Vec<u8>) {
        out.put_len_u32(self.appended.len());
        for appended in &self.appended {
            out.put_u32(appended.stream_id);
            out.put_u32(appended.topic_id);
            out.put_u32(appended.partition_id);
            out.put_u64(appended.base_offset);
        }
    }
}
whole_body_codec!(SendMessagesReply);

/// The reply to poll_messages: `[partition_id u32][current_offset u64][count u32]` then whole
/// batches back to back to the end of the body. `count` is the number of messages in those
/// batches: the sum of their `message_count` (Vireo checks it; the protocol only names it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PollReply {
    pub partition_id: u32,
    /// The partition's last offset when the poll was served.
    pub current_offset: u64,
    count: u32,
    batches: Vec<u8>,
}

impl PollReply {
    /// `batches`: zero or more whole batches, back to back, as the partition stored them.
    pub fn new(partition_id: u32, current_offset: u64, batches: Vec<u8>) -> Result<PollReply, WireError> {
        let count = walk_batches(&batches, 0)?;
        let count = u32::try_from(count).map_err(|_| WireError::TooLarge {
            offset: 0,
            what: "messages in a poll reply",
            len: count,
            max: u32::MAX as u64,
        })?;
        Ok(PollReply { partition_id, current_offset, count, batches })
    }

    pub fn count(&self) -> u32 {
        self.count
    }

    pub fn batches(&self) -> &[u8] {
        &self.batches
    }

    pub fn read(reader: &mut Reader<'_>) -> Result<PollReply, WireError> {
        let partition_id = reader.u32("partition id")?;
        let current_offset = reader.u64("current offset")?;
        let count_offset = reader.offset();
        let count = reader.u32("message count")?;
        let batches_offset = reader.offset();
        let batches = reader.rest();
        if walk_batches(batches, batches_offset)? != count as u64 {
            return Err(WireError::Invalid { offset: count_offset, what: "message count (the batches' messages)" });
        }
        Ok(PollReply { partition_id, current_offset, count, batches: batches.to_vec() })
    }

    pub fn write(&self, out: &mut Vec<u8>) {
        out.put_u32(self.partition_id);
        out.put_u64(self.current_offset);
        out.put_u32(self.count);
        out.extend_from_slice(&self.batches);
    }
}
whole_body_codec!(PollReply);

/// Checks `bytes` are whole batches back to back and returns how many messages they hold.
/// `base`: where `bytes` starts in the body, for errors.
fn walk_batches(bytes: &[u8], base: usize) -> Result<u64, WireError> {
    let mut at = 0usize;
    let mut messages = 0u64;
    while at < bytes.len() {
        let rest = &bytes[at..];
        let batch_error = |source| WireError::Batch { offset: base + at, source };
        let header: BatchHeader = BatchHeader::decode(rest).map_err(batch_error)?;
        // decode bounds batch_length by BATCH_SIZE_MAX, so it fits in usize.
        let len = header.batch_length as usize;
        if len > rest.len() {
            return Err(batch_error(BatchError::Short));
        }
        check_client_batch(&rest[..len]).map_err(batch_error)?;
        messages += header.message_count as u64;
        at += len;
    }
    Ok(messages)
}

/// The reply to get_consumer_offset.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConsumerOffsetReply {
    pub partition_id: u32,
    /// The partition's last offset.
    pub current_offset: u64,
    /// The consumer's stored offset.
    pub stored_offset: u64,
}

impl ConsumerOffsetReply {
    pub fn read(reader: &mut Reader<'_>) -> Result<ConsumerOffsetReply, WireError> {
        Ok(ConsumerOffsetReply {
            partition_id: reader.u32("partition id")?,
            current_offset: reader.u64("current offset")?,
            stored_offset: reader.u64("stored offset")?,
        })
    }

    pub fn write(&self, out: &mut Vec<u8>) {
        out.put_u32(self.partition_id);
        out.put_u64(self.current_offset);
        out.put_u64(self.stored_offset);
    }
}
whole_body_codec!(ConsumerOffsetReply);

/// A member of a consumer group and the partitions assigned to it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConsumerGroupMember {
    pub id: u32,
    pub partitions: Vec<u32>,
}

/// The reply to get_consumer_group, and an item of get_consumer_groups' reply.
///
/// Vireo's layout, where `PROTOCOL.md` is silent: `[id u32][partitions_count u32]
/// [members_count u32][Name]` then per member `[id u32][partitions count u32][partition ids u32]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConsumerGroup {
    pub id: u32,
    /// Partitions of the topic the group shares out.
    pub partitions_count: u32,
    pub name: Name,
    pub members: Vec<ConsumerGroupMember>,
}

impl ConsumerGroup {
    pub fn read(reader: &mut Reader<'_>) -> Result<ConsumerGroup, WireError> {
        let id = reader.u32("consumer group id")?;
        let partitions_count = reader.u32("partitions count")?;
        let members_count = reader.u32("members count")?;
        let name = Name::read(reader)?;
        reader.check_count(members_count, 8, "members")?;
        let mut members = Vec::new();
        for _ in 0..members_count {
            let id = reader.u32("member id")?;
            let count = reader.count("member partitions count", 4)?;
            let mut partitions = Vec::new();
            for _ in 0..count {
                partitions.push(reader.u32("member partition id")?);
            }
            members.push(ConsumerGroupMember { id, partitions });
        }
        Ok(ConsumerGroup { id, partitions_count, name, members })
    }

    pub fn write(&self, out: &mut Vec<u8>) {
        out.put_u32(self.id);
        out.put_u32(self.partitions_count);
        out.put_len_u32(self.members.len());
        self.name.write(out);
        for member in &self.members {
            out.put_u32(member.id);
            out.put_len_u32(member.partitions.len());
            for partition in &member.partitions {
                out.put_u32(*partition);
            }
        }
    }

    /// get_consumer_groups' reply: groups back to back, each with its members (Vireo's choice).
    pub fn decode_list(body: &[u8]) -> Result<Vec<ConsumerGroup>, WireError> {
        decode_whole(body, |reader| read_to_end(reader, ConsumerGroup::read))
    }

    pub fn encode_list(groups: &[ConsumerGroup]) -> Vec<u8> {
        encode_with(|out| groups.iter().for_each(|group| group.write(out)))
    }
}
whole_body_codec!(ConsumerGroup);

/// A node of the cluster as get_cluster_metadata reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterNode {
    pub name: String,
    pub ip: String,
    pub tcp_port: u16,
    pub quic_port: u16,
    pub http_port: u16,
    pub websocket_port: u16,
    /// Iggy's numbering (leader, follower), passed through.
    pub role: u8,
    /// Iggy's numbering (healthy, starting, ...), passed through.
    pub status: u8,
}

/// The reply to get_cluster_metadata.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterMetadata {
    pub name: String,
    pub nodes: Vec<ClusterNode>,
}

impl ClusterMetadata {
    pub fn read(reader: &mut Reader<'_>) -> Result<ClusterMetadata, WireError> {
        let name = string_u32(reader, "cluster name")?;
        let count = reader.count("node count", 4 + 4 + 4 * 2 + 2)?;
        let mut nodes = Vec::new();
        for _ in 0..count {
            nodes.push(ClusterNode {
                name: string_u32(reader, "node name")?,
                ip: string_u32(reader, "node ip")?,
                tcp_port: reader.u16("tcp port")?,
                quic_port: reader.u16("quic port")?,
                http_port: reader.u16("http port")?,
                websocket_port: reader.u16("websocket port")?,
                role: reader.u8("node role")?,
                status: reader.u8("node status")?,
            });
        }
        Ok(ClusterMetadata { name, nodes })
    }

    pub fn write(&self, out: &mut Vec<u8>) {
        out.put_bytes_u32(self.name.as_bytes());
        out.put_len_u32(self.nodes.len());
        for node in &self.nodes {
            out.put_bytes_u32(node.name.as_bytes());
            out.put_bytes_u32(node.ip.as_bytes());
            out.put_u16(node.tcp_port);
            out.put_u16(node.quic_port);
            out.put_u16(node.http_port);
            out.put_u16(node.websocket_port);
            out.put_u8(node.role);
            out.put_u8(node.status);
        }
    }
}
whole_body_codec!(ClusterMetadata);
