//! Reply bodies, server to client: one type per reply layout of `PROTOCOL.md` ("Bodies") and of
//! the reference's `responses/` (what the SDK decodes), each with `encode` and `decode` (the whole
//! body) and `read`/`write` for use inside other bodies. List replies have `encode_list` and
//! `decode_list`; where a list item carries less than the single reply (get_clients,
//! get_consumer_groups), `decode_list` returns a summary type that keeps exactly its bytes.
//!
//! Counts are checked against the bytes left before any loop trusts them, and every list grows
//! one decoded item at a time, so a lying count costs nothing. Where a reply layout carries a
//! count that also sizes a list that follows it (a stream's topics, a topic's partitions), the
//! list's length is the count: `encode` asserts it, `decode` reads exactly that many.

use vireo_storage::batch::{check_client_batch, BatchError, BatchHeader};

use super::options::Options;
use super::permissions::Permissions;
use super::primitives::Name;
use super::reader::{bytes_u32, string_u32, Put, Reader};
use super::WireError;

/// Decodes a whole body with `read`, refusing trailing bytes.
fn decode_whole<T>(body: &[u8], read: impl FnOnce(&mut Reader<'_>) -> Result<T, WireError>) -> Result<T, WireError> {
    let mut reader = Reader::new(body);
    let value = read(&mut reader)?;
    reader.finish()?;
    Ok(value)
}

/// Items back to back until the body ends: the list replies that carry no count of their own
/// (get_streams, get_clients, get_users, get_personal_access_tokens, get_consumer_groups).
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

/// `[count u32]` then that many items (get_topics, describe_options).
fn read_counted<T>(
    reader: &mut Reader<'_>,
    what: &'static str,
    item_size_min: usize,
    read: impl Fn(&mut Reader<'_>) -> Result<T, WireError>,
) -> Result<Vec<T>, WireError> {
    let count = reader.count(what, item_size_min)?;
    let mut items = Vec::new();
    for _ in 0..count {
        items.push(read(reader)?);
    }
    Ok(items)
}

fn write_counted<T>(out: &mut Vec<u8>, items: &[T], write: impl Fn(&T, &mut Vec<u8>)) {
    out.put_len_u32(items.len());
    for item in items {
        write(item, out);
    }
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

/// The reply to get_me and get_client: `[client_id u32][user_id u32][transport u8]
/// [address u32-len][group count u32]` then the groups.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientInfo {
    pub client_id: u32,
    pub user_id: u32,
    /// Iggy's transport numbering (1 TCP, 2 QUIC, ...), passed through as sent.
    pub transport: u8,
    pub address: String,
    pub groups: Vec<GroupMembership>,
}

/// An item of get_clients' reply: a client as `ClientInfo` writes it, with the count of its groups
/// but not the groups.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientSummary {
    pub client_id: u32,
    /// u32::MAX when no user is logged in on the connection.
    pub user_id: u32,
    pub transport: u8,
    pub address: String,
    pub groups_count: u32,
}

impl ClientSummary {
    pub fn read(reader: &mut Reader<'_>) -> Result<ClientSummary, WireError> {
        Ok(ClientSummary {
            client_id: reader.u32("client id")?,
            user_id: reader.u32("user id")?,
            transport: reader.u8("transport")?,
            address: string_u32(reader, "address")?,
            groups_count: reader.u32("group count")?,
        })
    }

    pub fn write(&self, out: &mut Vec<u8>) {
        out.put_u32(self.client_id);
        out.put_u32(self.user_id);
        out.put_u8(self.transport);
        out.put_bytes_u32(self.address.as_bytes());
        out.put_u32(self.groups_count);
    }

    pub fn encode_list(clients: &[ClientSummary]) -> Vec<u8> {
        encode_with(|out| clients.iter().for_each(|client| client.write(out)))
    }
}
whole_body_codec!(ClientSummary);

impl ClientInfo {
    pub fn summary(&self) -> ClientSummary {
        ClientSummary {
            client_id: self.client_id,
            user_id: self.user_id,
            transport: self.transport,
            address: self.address.clone(),
            groups_count: u32::try_from(self.groups.len()).expect("a client's groups fit in u32"),
        }
    }

    /// get_clients' reply: clients back to back, each without its groups (an empty body is no
    /// clients).
    pub fn encode_list(clients: &[ClientInfo]) -> Vec<u8> {
        encode_with(|out| clients.iter().for_each(|client| client.summary().write(out)))
    }

    pub fn decode_list(body: &[u8]) -> Result<Vec<ClientSummary>, WireError> {
        decode_whole(body, |reader| read_to_end(reader, ClientSummary::read))
    }

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

    /// get_streams' reply: streams back to back, without their topics, no count.
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

    /// get_topics' reply: `[count u32]` then the topics, without their partitions.
    pub fn decode_list(body: &[u8]) -> Result<Vec<Topic>, WireError> {
        decode_whole(body, |reader| read_counted(reader, "topics count", TOPIC_SIZE_MIN, Topic::read))
    }

    pub fn encode_list(topics: &[Topic]) -> Vec<u8> {
        encode_with(|out| write_counted(out, topics, Topic::write))
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

/// The reply to get_consumer_group (and to create_consumer_group, after its result section):
/// `[id u32][partitions_count u32][members_count u32][Name]` then per member
/// `[id u32][partitions count u32][partition ids u32]`.
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

    pub fn summary(&self) -> ConsumerGroupSummary {
        ConsumerGroupSummary {
            id: self.id,
            partitions_count: self.partitions_count,
            members_count: u32::try_from(self.members.len()).expect("a group's members fit in u32"),
            name: self.name.clone(),
        }
    }

    /// get_consumer_groups' reply: groups back to back, each without its members (an empty body
    /// is no groups).
    pub fn encode_list(groups: &[ConsumerGroup]) -> Vec<u8> {
        encode_with(|out| groups.iter().for_each(|group| group.summary().write(out)))
    }

    pub fn decode_list(body: &[u8]) -> Result<Vec<ConsumerGroupSummary>, WireError> {
        decode_whole(body, |reader| read_to_end(reader, ConsumerGroupSummary::read))
    }
}
whole_body_codec!(ConsumerGroup);

/// An item of get_consumer_groups' reply: a group's head as `ConsumerGroup` writes it, with the
/// count of its members but not the members.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConsumerGroupSummary {
    pub id: u32,
    pub partitions_count: u32,
    pub members_count: u32,
    pub name: Name,
}

impl ConsumerGroupSummary {
    pub fn read(reader: &mut Reader<'_>) -> Result<ConsumerGroupSummary, WireError> {
        Ok(ConsumerGroupSummary {
            id: reader.u32("consumer group id")?,
            partitions_count: reader.u32("partitions count")?,
            members_count: reader.u32("members count")?,
            name: Name::read(reader)?,
        })
    }

    pub fn write(&self, out: &mut Vec<u8>) {
        out.put_u32(self.id);
        out.put_u32(self.partitions_count);
        out.put_u32(self.members_count);
        self.name.write(out);
    }

    pub fn encode_list(groups: &[ConsumerGroupSummary]) -> Vec<u8> {
        encode_with(|out| groups.iter().for_each(|group| group.write(out)))
    }
}
whole_body_codec!(ConsumerGroupSummary);

/// The reply to sync_consumer_group: the member's assignment, `[generation u64][n u32]
/// [partition ids u32 x n]`. (A client that is not a member gets an empty body.)
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SyncConsumerGroupReply {
    pub generation: u64,
    pub partitions: Vec<u32>,
}

impl SyncConsumerGroupReply {
    pub fn read(reader: &mut Reader<'_>) -> Result<SyncConsumerGroupReply, WireError> {
        let generation = reader.u64("generation")?;
        let partitions = read_counted(reader, "partitions count", 4, |reader| reader.u32("partition id"))?;
        Ok(SyncConsumerGroupReply { generation, partitions })
    }

    pub fn write(&self, out: &mut Vec<u8>) {
        out.put_u64(self.generation);
        write_counted(out, &self.partitions, |partition, out| out.put_u32(*partition));
    }
}
whole_body_codec!(SyncConsumerGroupReply);

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

/// A user without permissions: an item of get_users' reply and the head of `UserDetails`.
/// `[id u32][created_at u64][status u8][username Name][options, len u32-prefixed]`.
#[derive(Clone, Debug, PartialEq)]
pub struct UserResponse {
    pub id: u32,
    /// Microseconds since the Unix epoch.
    pub created_at: u64,
    /// 1 active, 2 inactive; the SDK refuses any other value.
    pub status: u8,
    pub username: Name,
    pub options: Options,
}

impl UserResponse {
    pub fn read(reader: &mut Reader<'_>) -> Result<UserResponse, WireError> {
        Ok(UserResponse {
            id: reader.u32("user id")?,
            created_at: reader.u64("created_at")?,
            status: reader.u8("user status")?,
            username: Name::read(reader)?,
            options: Options::read(reader)?,
        })
    }

    pub fn write(&self, out: &mut Vec<u8>) {
        out.put_u32(self.id);
        out.put_u64(self.created_at);
        out.put_u8(self.status);
        self.username.write(out);
        self.options.write(out);
    }

    /// get_users' reply: users back to back, no count (an empty body is no users).
    pub fn decode_list(body: &[u8]) -> Result<Vec<UserResponse>, WireError> {
        decode_whole(body, |reader| read_to_end(reader, UserResponse::read))
    }

    pub fn encode_list(users: &[UserResponse]) -> Vec<u8> {
        encode_with(|out| users.iter().for_each(|user| user.write(out)))
    }
}
whole_body_codec!(UserResponse);

/// The reply to get_user, and to create_user after its result section: the user, then
/// `[0u8; 4]` without permissions or `[1u8][len u32][permissions]` with them.
#[derive(Clone, Debug, PartialEq)]
pub struct UserDetails {
    pub user: UserResponse,
    pub permissions: Option<Permissions>,
}

impl UserDetails {
    pub fn read(reader: &mut Reader<'_>) -> Result<UserDetails, WireError> {
        let user = UserResponse::read(reader)?;
        let flag_offset = reader.offset();
        let permissions = match reader.u8("has_permissions")? {
            0 => {
                let offset = reader.offset();
                if reader.bytes(3, "no permissions (zero)")? != [0, 0, 0] {
                    return Err(WireError::Invalid { offset, what: "no permissions (3 zero bytes after the 0 flag)" });
                }
                None
            }
            1 => Some(Permissions::read_sized(reader)?),
            _ => return Err(WireError::Invalid { offset: flag_offset, what: "has_permissions (0 or 1)" }),
        };
        Ok(UserDetails { user, permissions })
    }

    pub fn write(&self, out: &mut Vec<u8>) {
        self.user.write(out);
        match &self.permissions {
            None => out.put_u32(0),
            Some(permissions) => {
                out.put_u8(1);
                permissions.write_sized(out);
            }
        }
    }
}
whole_body_codec!(UserDetails);

/// A personal access token as get_personal_access_tokens lists it: `[name Name][expiry_at u64]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PersonalAccessTokenInfo {
    pub name: Name,
    /// Microseconds since the Unix epoch; 0 never expires.
    pub expiry_at: u64,
}

impl PersonalAccessTokenInfo {
    pub fn read(reader: &mut Reader<'_>) -> Result<PersonalAccessTokenInfo, WireError> {
        Ok(PersonalAccessTokenInfo { name: Name::read(reader)?, expiry_at: reader.u64("token expiry")? })
    }

    pub fn write(&self, out: &mut Vec<u8>) {
        self.name.write(out);
        out.put_u64(self.expiry_at);
    }

    /// get_personal_access_tokens' reply: tokens back to back, no count.
    pub fn decode_list(body: &[u8]) -> Result<Vec<PersonalAccessTokenInfo>, WireError> {
        decode_whole(body, |reader| read_to_end(reader, PersonalAccessTokenInfo::read))
    }

    pub fn encode_list(tokens: &[PersonalAccessTokenInfo]) -> Vec<u8> {
        encode_with(|out| tokens.iter().for_each(|token| token.write(out)))
    }
}
whole_body_codec!(PersonalAccessTokenInfo);

/// The reply to create_personal_access_token, after its result section: the raw token, shown
/// once.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CreatedPersonalAccessToken {
    pub token: Name,
}

impl CreatedPersonalAccessToken {
    pub fn read(reader: &mut Reader<'_>) -> Result<CreatedPersonalAccessToken, WireError> {
        Ok(CreatedPersonalAccessToken { token: Name::read(reader)? })
    }

    pub fn write(&self, out: &mut Vec<u8>) {
        self.token.write(out);
    }
}
whole_body_codec!(CreatedPersonalAccessToken);

/// One partition's cache counters in get_stats' reply (32 bytes).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CacheMetric {
    pub stream_id: u32,
    pub topic_id: u32,
    pub partition_id: u32,
    pub hits: u64,
    pub misses: u64,
    pub hit_ratio: f32,
}

const CACHE_METRIC_SIZE: usize = 4 + 4 + 4 + 8 + 8 + 4;

/// The reply to get_stats: 108 bytes of fixed fields, five `[len u32][UTF-8]` strings, the
/// server's packed semver, the cache metrics (`[count u32]` then 32 bytes each), threads and disk
/// space. Every field is required.
#[derive(Clone, Debug, PartialEq)]
pub struct StatsReply {
    pub process_id: u32,
    pub cpu_usage: f32,
    pub total_cpu_usage: f32,
    pub memory_usage: u64,
    pub total_memory: u64,
    pub available_memory: u64,
    /// Microseconds.
    pub run_time: u64,
    /// Microseconds since the Unix epoch.
    pub start_time: u64,
    pub read_bytes: u64,
    pub written_bytes: u64,
    pub messages_size_bytes: u64,
    pub streams_count: u32,
    pub topics_count: u32,
    pub partitions_count: u32,
    pub segments_count: u32,
    pub messages_count: u64,
    pub clients_count: u32,
    pub consumer_groups_count: u32,
    pub hostname: String,
    pub os_name: String,
    pub os_version: String,
    pub kernel_version: String,
    pub iggy_server_version: String,
    /// `major << 20 | minor << 10 | patch` of the server; 0 when unknown.
    pub iggy_server_semver: u32,
    pub cache_metrics: Vec<CacheMetric>,
    pub threads_count: u32,
    pub free_disk_space: u64,
    pub total_disk_space: u64,
}

impl StatsReply {
    pub fn read(reader: &mut Reader<'_>) -> Result<StatsReply, WireError> {
        Ok(StatsReply {
            process_id: reader.u32("process id")?,
            cpu_usage: reader.f32("cpu usage")?,
            total_cpu_usage: reader.f32("total cpu usage")?,
            memory_usage: reader.u64("memory usage")?,
            total_memory: reader.u64("total memory")?,
            available_memory: reader.u64("available memory")?,
            run_time: reader.u64("run time")?,
            start_time: reader.u64("start time")?,
            read_bytes: reader.u64("read bytes")?,
            written_bytes: reader.u64("written bytes")?,
            messages_size_bytes: reader.u64("messages size")?,
            streams_count: reader.u32("streams count")?,
            topics_count: reader.u32("topics count")?,
            partitions_count: reader.u32("partitions count")?,
            segments_count: reader.u32("segments count")?,
            messages_count: reader.u64("messages count")?,
            clients_count: reader.u32("clients count")?,
            consumer_groups_count: reader.u32("consumer groups count")?,
            hostname: string_u32(reader, "hostname")?,
            os_name: string_u32(reader, "os name")?,
            os_version: string_u32(reader, "os version")?,
            kernel_version: string_u32(reader, "kernel version")?,
            iggy_server_version: string_u32(reader, "server version")?,
            iggy_server_semver: reader.u32("server semver")?,
            cache_metrics: read_counted(reader, "cache metrics count", CACHE_METRIC_SIZE, |reader| {
                Ok(CacheMetric {
                    stream_id: reader.u32("cache metric stream id")?,
                    topic_id: reader.u32("cache metric topic id")?,
                    partition_id: reader.u32("cache metric partition id")?,
                    hits: reader.u64("cache hits")?,
                    misses: reader.u64("cache misses")?,
                    hit_ratio: reader.f32("cache hit ratio")?,
                })
            })?,
            threads_count: reader.u32("threads count")?,
            free_disk_space: reader.u64("free disk space")?,
            total_disk_space: reader.u64("total disk space")?,
        })
    }

    pub fn write(&self, out: &mut Vec<u8>) {
        out.put_u32(self.process_id);
        out.put_f32(self.cpu_usage);
        out.put_f32(self.total_cpu_usage);
        out.put_u64(self.memory_usage);
        out.put_u64(self.total_memory);
        out.put_u64(self.available_memory);
        out.put_u64(self.run_time);
        out.put_u64(self.start_time);
        out.put_u64(self.read_bytes);
        out.put_u64(self.written_bytes);
        out.put_u64(self.messages_size_bytes);
        out.put_u32(self.streams_count);
        out.put_u32(self.topics_count);
        out.put_u32(self.partitions_count);
        out.put_u32(self.segments_count);
        out.put_u64(self.messages_count);
        out.put_u32(self.clients_count);
        out.put_u32(self.consumer_groups_count);
        for string in [&self.hostname, &self.os_name, &self.os_version, &self.kernel_version, &self.iggy_server_version]
        {
            out.put_bytes_u32(string.as_bytes());
        }
        out.put_u32(self.iggy_server_semver);
        write_counted(out, &self.cache_metrics, |metric, out| {
            out.put_u32(metric.stream_id);
            out.put_u32(metric.topic_id);
            out.put_u32(metric.partition_id);
            out.put_u64(metric.hits);
            out.put_u64(metric.misses);
            out.put_f32(metric.hit_ratio);
        });
        out.put_u32(self.threads_count);
        out.put_u64(self.free_disk_space);
        out.put_u64(self.total_disk_space);
    }
}
whole_body_codec!(StatsReply);

/// One option of describe_options' reply: `[key Name][kind u8][default u32-len][description
/// u32-len UTF-8]`. `kind` is the option value kind (`OptionValue::kind`), `default_value` the
/// default's value bytes in that kind's form.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OptionDescription {
    pub key: Name,
    pub kind: u8,
    pub default_value: Vec<u8>,
    pub description: String,
}

/// The shortest Name, the kind and two empty u32-length fields.
const OPTION_DESCRIPTION_SIZE_MIN: usize = 2 + 1 + 4 + 4;

impl OptionDescription {
    pub fn read(reader: &mut Reader<'_>) -> Result<OptionDescription, WireError> {
        Ok(OptionDescription {
            key: Name::read(reader)?,
            kind: reader.u8("option kind")?,
            default_value: bytes_u32(reader, "option default")?.to_vec(),
            description: string_u32(reader, "option description")?,
        })
    }

    pub fn write(&self, out: &mut Vec<u8>) {
        self.key.write(out);
        out.put_u8(self.kind);
        out.put_bytes_u32(&self.default_value);
        out.put_bytes_u32(self.description.as_bytes());
    }

    /// describe_options' reply: `[count u32]` then the descriptions.
    pub fn decode_list(body: &[u8]) -> Result<Vec<OptionDescription>, WireError> {
        decode_whole(body, |reader| {
            read_counted(reader, "options count", OPTION_DESCRIPTION_SIZE_MIN, OptionDescription::read)
        })
    }

    pub fn encode_list(descriptions: &[OptionDescription]) -> Vec<u8> {
        encode_with(|out| write_counted(out, descriptions, OptionDescription::write))
    }
}
whole_body_codec!(OptionDescription);
