//! Request bodies, client to server: one `ClientRequest` variant per command code, decoded from
//! the body that follows a request header and encoded back to the same bytes.
//!
//! A decoded request is exactly its body: every field is read with a check, flags are 0 or 1, an
//! absent partition is written as 0, and a body longer than its fields is refused, so that
//! `decode(code, body)?.encode() == body` whenever decode succeeds.

use vireo_storage::batch::{check_client_batch, BatchHeader};

use super::command::*;
use super::options::Options;
use super::primitives::{Consumer, Identifier, Name, Partitioning, PollingStrategy, ShortBytes};
use super::reader::{bytes_u32, Put, Reader};
use super::WireError;

/// login_register (40): the client registers a session and logs in with one request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoginRegister {
    /// `major << 20 | minor << 10 | patch`; 0.11.0 is 0x2C00.
    pub protocol_version: u32,
    pub sdk_name: Name,
    pub sdk_version: Name,
    pub username: Name,
    pub password: ShortBytes,
    /// Opaque to the server, `[len u32][bytes]`.
    pub context: Vec<u8>,
}

/// poll_messages (100).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PollMessages {
    pub consumer: Consumer,
    pub stream: Identifier,
    pub topic: Identifier,
    /// `[has_partition u8][partition u32]`; None is sent as 0, 0.
    pub partition_id: Option<u32>,
    pub strategy: PollingStrategy,
    pub count: u32,
    pub auto_commit: bool,
}

/// Whose offset, where: the body of get_consumer_offset (120) and delete_consumer_offset (122),
/// and the start of store_consumer_offset (121).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConsumerOffsetKey {
    pub consumer: Consumer,
    pub stream: Identifier,
    pub topic: Identifier,
    pub partition_id: Option<u32>,
}

/// send_messages (101): `[metadata length u32][stream Id][topic Id][Partitioning]
/// [message count u32][batch]`.
///
/// The metadata length counts the bytes after itself up to the batch: stream, topic,
/// partitioning and the 4 bytes of the message count (not its own 4 bytes). The message count
/// repeats the batch header's `message_count` and must equal it. The batch is kept as the bytes
/// the client sent; it is checked to be one structurally whole client batch (checksums are the
/// server's to compute when it stamps the batch).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SendMessages {
    stream: Identifier,
    topic: Identifier,
    partitioning: Partitioning,
    batch: Vec<u8>,
    message_count: u32,
}

impl SendMessages {
    pub fn new(
        stream: Identifier,
        topic: Identifier,
        partitioning: Partitioning,
        batch: Vec<u8>,
    ) -> Result<SendMessages, WireError> {
        let header = check_client_batch(&batch).map_err(|source| WireError::Batch { offset: 0, source })?;
        Ok(SendMessages { stream, topic, partitioning, batch, message_count: header.message_count })
    }

    pub fn stream(&self) -> &Identifier {
        &self.stream
    }

    pub fn topic(&self) -> &Identifier {
        &self.topic
    }

    pub fn partitioning(&self) -> &Partitioning {
        &self.partitioning
    }

    /// One unstamped batch, as `vireo_storage::batch::BatchBuilder` makes them.
    pub fn batch(&self) -> &[u8] {
        &self.batch
    }

    pub fn into_batch(self) -> Vec<u8> {
        self.batch
    }

    pub fn message_count(&self) -> u32 {
        self.message_count
    }

    fn metadata_len(&self) -> usize {
        self.stream.encoded_len() + self.topic.encoded_len() + self.partitioning.encoded_len() + 4
    }

    fn read(reader: &mut Reader<'_>) -> Result<SendMessages, WireError> {
        let metadata_len_offset = reader.offset();
        let metadata_len = reader.u32("metadata length")?;
        let metadata_start = reader.offset();
        let stream = Identifier::read(reader)?;
        let topic = Identifier::read(reader)?;
        let partitioning = Partitioning::read(reader)?;
        let count_offset = reader.offset();
        let message_count = reader.u32("message count")?;
        if (reader.offset() - metadata_start) as u64 != metadata_len as u64 {
            return Err(WireError::Invalid {
                offset: metadata_len_offset,
                what: "metadata length (bytes of stream, topic, partitioning and message count)",
            });
        }
        let batch_offset = reader.offset();
        let batch = reader.rest();
        let header: BatchHeader =
            check_client_batch(batch).map_err(|source| WireError::Batch { offset: batch_offset, source })?;
        if header.message_count != message_count {
            return Err(WireError::Invalid { offset: count_offset, what: "message count (the batch's message_count)" });
        }
        Ok(SendMessages { stream, topic, partitioning, batch: batch.to_vec(), message_count })
    }

    fn write(&self, out: &mut Vec<u8>) {
        out.put_len_u32(self.metadata_len());
        self.stream.write(out);
        self.topic.write(out);
        self.partitioning.write(out);
        out.put_u32(self.message_count);
        out.extend_from_slice(&self.batch);
    }
}

/// A client request body, one variant per command code (`command::*`).
#[derive(Clone, Debug, PartialEq)]
pub enum ClientRequest {
    Ping,
    GetStats,
    GetClusterMetadata,
    GetMe,
    GetClient {
        client_id: u32,
    },
    Logout,
    LoginRegister(LoginRegister),
    /// Laid out like login_register's credentials: token `[len u8][bytes]`, then context
    /// `[len u32][bytes]`.
    LoginWithPersonalAccessToken {
        token: ShortBytes,
        context: Vec<u8>,
    },
    PollMessages(PollMessages),
    SendMessages(SendMessages),
    GetConsumerOffset(ConsumerOffsetKey),
    StoreConsumerOffset {
        key: ConsumerOffsetKey,
        offset: u64,
        ack: u8,
    },
    DeleteConsumerOffset(ConsumerOffsetKey),
    GetStream {
        stream: Identifier,
    },
    GetStreams,
    CreateStream {
        name: Name,
        options: Options,
    },
    DeleteStream {
        stream: Identifier,
    },
    GetTopic {
        stream: Identifier,
        topic: Identifier,
    },
    GetTopics {
        stream: Identifier,
    },
    CreateTopic {
        stream: Identifier,
        partitions_count: u32,
        name: Name,
        options: Options,
    },
    DeleteTopic {
        stream: Identifier,
        topic: Identifier,
    },
    CreatePartitions {
        stream: Identifier,
        topic: Identifier,
        count: u32,
    },
    DeletePartitions {
        stream: Identifier,
        topic: Identifier,
        count: u32,
    },
    GetConsumerGroup {
        stream: Identifier,
        topic: Identifier,
        group: Identifier,
    },
    GetConsumerGroups {
        stream: Identifier,
        topic: Identifier,
    },
    CreateConsumerGroup {
        stream: Identifier,
        topic: Identifier,
        name: Name,
    },
    DeleteConsumerGroup {
        stream: Identifier,
        topic: Identifier,
        group: Identifier,
    },
    JoinConsumerGroup {
        stream: Identifier,
        topic: Identifier,
        group: Identifier,
    },
    LeaveConsumerGroup {
        stream: Identifier,
        topic: Identifier,
        group: Identifier,
    },
}

fn read_partition_id(reader: &mut Reader<'_>) -> Result<Option<u32>, WireError> {
    let has_partition = reader.bool("has_partition (0 or 1)")?;
    let offset = reader.offset();
    let partition_id = reader.u32("partition id")?;
    match (has_partition, partition_id) {
        (true, id) => Ok(Some(id)),
        (false, 0) => Ok(None),
        (false, _) => Err(WireError::Invalid { offset, what: "partition id (0 when has_partition is 0)" }),
    }
}

fn write_partition_id(out: &mut Vec<u8>, partition_id: Option<u32>) {
    out.put_bool(partition_id.is_some());
    out.put_u32(partition_id.unwrap_or(0));
}

impl ConsumerOffsetKey {
    fn read(reader: &mut Reader<'_>) -> Result<ConsumerOffsetKey, WireError> {
        Ok(ConsumerOffsetKey {
            consumer: Consumer::read(reader)?,
            stream: Identifier::read(reader)?,
            topic: Identifier::read(reader)?,
            partition_id: read_partition_id(reader)?,
        })
    }

    fn write(&self, out: &mut Vec<u8>) {
        self.consumer.write(out);
        self.stream.write(out);
        self.topic.write(out);
        write_partition_id(out, self.partition_id);
    }
}

impl LoginRegister {
    fn read(reader: &mut Reader<'_>) -> Result<LoginRegister, WireError> {
        Ok(LoginRegister {
            protocol_version: reader.u32("protocol version")?,
            sdk_name: Name::read(reader)?,
            sdk_version: Name::read(reader)?,
            username: Name::read(reader)?,
            password: ShortBytes::read(reader, "password")?,
            context: bytes_u32(reader, "context")?.to_vec(),
        })
    }

    fn write(&self, out: &mut Vec<u8>) {
        out.put_u32(self.protocol_version);
        self.sdk_name.write(out);
        self.sdk_version.write(out);
        self.username.write(out);
        self.password.write(out);
        out.put_bytes_u32(&self.context);
    }
}

impl PollMessages {
    fn read(reader: &mut Reader<'_>) -> Result<PollMessages, WireError> {
        Ok(PollMessages {
            consumer: Consumer::read(reader)?,
            stream: Identifier::read(reader)?,
            topic: Identifier::read(reader)?,
            partition_id: read_partition_id(reader)?,
            strategy: PollingStrategy::read(reader)?,
            count: reader.u32("count")?,
            auto_commit: reader.bool("auto_commit (0 or 1)")?,
        })
    }

    fn write(&self, out: &mut Vec<u8>) {
        self.consumer.write(out);
        self.stream.write(out);
        self.topic.write(out);
        write_partition_id(out, self.partition_id);
        self.strategy.write(out);
        out.put_u32(self.count);
        out.put_bool(self.auto_commit);
    }
}

impl ClientRequest {
    /// Decodes the body of a request with this command code. The whole body must be used.
    pub fn decode(command_code: u32, body: &[u8]) -> Result<ClientRequest, WireError> {
        use ClientRequest as R;
        let mut reader = Reader::new(body);
        let r = &mut reader;
        let request = match command_code {
            PING => R::Ping,
            GET_STATS => R::GetStats,
            GET_CLUSTER_METADATA => R::GetClusterMetadata,
            GET_ME => R::GetMe,
            GET_CLIENT => R::GetClient { client_id: r.u32("client id")? },
            LOGOUT => R::Logout,
            LOGIN_REGISTER => R::LoginRegister(LoginRegister::read(r)?),
            LOGIN_WITH_PERSONAL_ACCESS_TOKEN => R::LoginWithPersonalAccessToken {
                token: ShortBytes::read(r, "personal access token")?,
                context: bytes_u32(r, "context")?.to_vec(),
            },
            POLL_MESSAGES => R::PollMessages(PollMessages::read(r)?),
            SEND_MESSAGES => R::SendMessages(SendMessages::read(r)?),
            GET_CONSUMER_OFFSET => R::GetConsumerOffset(ConsumerOffsetKey::read(r)?),
            STORE_CONSUMER_OFFSET => {
                R::StoreConsumerOffset { key: ConsumerOffsetKey::read(r)?, offset: r.u64("offset")?, ack: r.u8("ack")? }
            }
            DELETE_CONSUMER_OFFSET => R::DeleteConsumerOffset(ConsumerOffsetKey::read(r)?),
            GET_STREAM => R::GetStream { stream: Identifier::read(r)? },
            GET_STREAMS => R::GetStreams,
            CREATE_STREAM => R::CreateStream { name: Name::read(r)?, options: Options::read(r)? },
            DELETE_STREAM => R::DeleteStream { stream: Identifier::read(r)? },
            GET_TOPIC => R::GetTopic { stream: Identifier::read(r)?, topic: Identifier::read(r)? },
            GET_TOPICS => R::GetTopics { stream: Identifier::read(r)? },
            CREATE_TOPIC => R::CreateTopic {
                stream: Identifier::read(r)?,
                partitions_count: r.u32("partitions count")?,
                name: Name::read(r)?,
                options: Options::read(r)?,
            },
            DELETE_TOPIC => R::DeleteTopic { stream: Identifier::read(r)?, topic: Identifier::read(r)? },
            CREATE_PARTITIONS => R::CreatePartitions {
                stream: Identifier::read(r)?,
                topic: Identifier::read(r)?,
                count: r.u32("partitions count")?,
            },
            DELETE_PARTITIONS => R::DeletePartitions {
                stream: Identifier::read(r)?,
                topic: Identifier::read(r)?,
                count: r.u32("partitions count")?,
            },
            GET_CONSUMER_GROUP => R::GetConsumerGroup {
                stream: Identifier::read(r)?,
                topic: Identifier::read(r)?,
                group: Identifier::read(r)?,
            },
            GET_CONSUMER_GROUPS => R::GetConsumerGroups { stream: Identifier::read(r)?, topic: Identifier::read(r)? },
            CREATE_CONSUMER_GROUP => R::CreateConsumerGroup {
                stream: Identifier::read(r)?,
                topic: Identifier::read(r)?,
                name: Name::read(r)?,
            },
            DELETE_CONSUMER_GROUP => R::DeleteConsumerGroup {
                stream: Identifier::read(r)?,
                topic: Identifier::read(r)?,
                group: Identifier::read(r)?,
            },
            JOIN_CONSUMER_GROUP => R::JoinConsumerGroup {
                stream: Identifier::read(r)?,
                topic: Identifier::read(r)?,
                group: Identifier::read(r)?,
            },
            LEAVE_CONSUMER_GROUP => R::LeaveConsumerGroup {
                stream: Identifier::read(r)?,
                topic: Identifier::read(r)?,
                group: Identifier::read(r)?,
            },
            LOGIN_USER_OBSOLETE | LOGIN_WITH_TOKEN_OBSOLETE => return Err(WireError::ObsoleteLogin(command_code)),
            _ => return Err(WireError::UnknownCommand(command_code)),
        };
        reader.finish()?;
        Ok(request)
    }

    pub fn command_code(&self) -> u32 {
        use ClientRequest as R;
        match self {
            R::Ping => PING,
            R::GetStats => GET_STATS,
            R::GetClusterMetadata => GET_CLUSTER_METADATA,
            R::GetMe => GET_ME,
            R::GetClient { .. } => GET_CLIENT,
            R::Logout => LOGOUT,
            R::LoginRegister(_) => LOGIN_REGISTER,
            R::LoginWithPersonalAccessToken { .. } => LOGIN_WITH_PERSONAL_ACCESS_TOKEN,
            R::PollMessages(_) => POLL_MESSAGES,
            R::SendMessages(_) => SEND_MESSAGES,
            R::GetConsumerOffset(_) => GET_CONSUMER_OFFSET,
            R::StoreConsumerOffset { .. } => STORE_CONSUMER_OFFSET,
            R::DeleteConsumerOffset(_) => DELETE_CONSUMER_OFFSET,
            R::GetStream { .. } => GET_STREAM,
            R::GetStreams => GET_STREAMS,
            R::CreateStream { .. } => CREATE_STREAM,
            R::DeleteStream { .. } => DELETE_STREAM,
            R::GetTopic { .. } => GET_TOPIC,
            R::GetTopics { .. } => GET_TOPICS,
            R::CreateTopic { .. } => CREATE_TOPIC,
            R::DeleteTopic { .. } => DELETE_TOPIC,
            R::CreatePartitions { .. } => CREATE_PARTITIONS,
            R::DeletePartitions { .. } => DELETE_PARTITIONS,
            R::GetConsumerGroup { .. } => GET_CONSUMER_GROUP,
            R::GetConsumerGroups { .. } => GET_CONSUMER_GROUPS,
            R::CreateConsumerGroup { .. } => CREATE_CONSUMER_GROUP,
            R::DeleteConsumerGroup { .. } => DELETE_CONSUMER_GROUP,
            R::JoinConsumerGroup { .. } => JOIN_CONSUMER_GROUP,
            R::LeaveConsumerGroup { .. } => LEAVE_CONSUMER_GROUP,
        }
    }

    pub fn encode(&self) -> Vec<u8> {
        use ClientRequest as R;
        let mut out = Vec::new();
        match self {
            R::Ping | R::GetStats | R::GetClusterMetadata | R::GetMe | R::Logout | R::GetStreams => {}
            R::GetClient { client_id } => out.put_u32(*client_id),
            R::LoginRegister(login) => login.write(&mut out),
            R::LoginWithPersonalAccessToken { token, context } => {
                token.write(&mut out);
                out.put_bytes_u32(context);
            }
            R::PollMessages(poll) => poll.write(&mut out),
            R::SendMessages(send) => send.write(&mut out),
            R::GetConsumerOffset(key) | R::DeleteConsumerOffset(key) => key.write(&mut out),
            R::StoreConsumerOffset { key, offset, ack } => {
                key.write(&mut out);
                out.put_u64(*offset);
                out.put_u8(*ack);
            }
            R::GetStream { stream } | R::DeleteStream { stream } | R::GetTopics { stream } => stream.write(&mut out),
            R::CreateStream { name, options } => {
                name.write(&mut out);
                options.write(&mut out);
            }
            R::GetTopic { stream, topic }
            | R::DeleteTopic { stream, topic }
            | R::GetConsumerGroups { stream, topic } => {
                stream.write(&mut out);
                topic.write(&mut out);
            }
            R::CreateTopic { stream, partitions_count, name, options } => {
                stream.write(&mut out);
                out.put_u32(*partitions_count);
                name.write(&mut out);
                options.write(&mut out);
            }
            R::CreatePartitions { stream, topic, count } | R::DeletePartitions { stream, topic, count } => {
                stream.write(&mut out);
                topic.write(&mut out);
                out.put_u32(*count);
            }
            R::CreateConsumerGroup { stream, topic, name } => {
                stream.write(&mut out);
                topic.write(&mut out);
                name.write(&mut out);
            }
            R::GetConsumerGroup { stream, topic, group }
            | R::DeleteConsumerGroup { stream, topic, group }
            | R::JoinConsumerGroup { stream, topic, group }
            | R::LeaveConsumerGroup { stream, topic, group } => {
                stream.write(&mut out);
                topic.write(&mut out);
                group.write(&mut out);
            }
        }
        out
    }
}
