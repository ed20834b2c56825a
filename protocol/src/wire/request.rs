//! Request bodies, client to server: one `ClientRequest` variant per command code, decoded from
//! the body that follows a request header and encoded back to the same bytes.
//!
//! A decoded request is exactly its body: every field is read with a check, flags are 0 or 1, an
//! absent partition is written as 0, and a body longer than its fields is refused, so that
//! `decode(code, body)?.encode() == body` whenever decode succeeds. The layouts are the SDK's
//! (`iggy_binary_protocol` 0.11.0-edge.4, `requests/`); options end a request bare.
//!
//! The two logins travel as operation Register with no command code in the header, so a server
//! decodes their body with `decode_login`; `ClientRequest::decode` still knows them by their
//! codes (40, 45), the form tests and simulated clients use.

use vireo_storage::batch::{check_client_batch, BatchHeader};

use super::command::*;
use super::options::Options;
use super::permissions::Permissions;
use super::primitives::{Consumer, Identifier, Name, Partitioning, PollingStrategy, ShortBytes};
use super::reader::{bytes_u32, Put, Reader};
use super::WireError;

/// login_register (40): the client registers a session and logs in with one request.
/// `[protocol_version u32][sdk_name Name][sdk_version Name][username Name][password u8-len]
/// [context u32-len]`.
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

/// login_register_with_personal_access_token (45): the same version prefix as `LoginRegister`,
/// then the token in place of username and password. `[protocol_version u32][sdk_name Name]
/// [sdk_version Name][token u8-len][context u32-len]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoginWithToken {
    pub protocol_version: u32,
    pub sdk_name: Name,
    pub sdk_version: Name,
    pub token: ShortBytes,
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

/// Whose offset, where: the body of get_consumer_offset (120), and the start of
/// store_consumer_offset (121) and delete_consumer_offset (122).
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
        let (head, batch) = SendMessagesHead::read(reader)?;
        let SendMessagesHead { stream, topic, partitioning, message_count, .. } = head;
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

/// A send_messages body read without taking its batch: what admission decides by, and where
/// the batch starts in the body. The batch stays in the client's frame and is copied once,
/// into the request that goes to its partition group.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SendMessagesHead {
    pub stream: Identifier,
    pub topic: Identifier,
    pub partitioning: Partitioning,
    pub message_count: u32,
    /// Where the batch starts in the body; it runs to the body's end.
    pub batch_at: usize,
}

impl SendMessagesHead {
    /// Checks the whole body as `ClientRequest::decode` does for send_messages.
    pub fn decode(body: &[u8]) -> Result<SendMessagesHead, WireError> {
        SendMessagesHead::read(&mut Reader::new(body)).map(|(head, _)| head)
    }

    fn read<'a>(reader: &mut Reader<'a>) -> Result<(SendMessagesHead, &'a [u8]), WireError> {
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
        let batch_at = reader.offset();
        let batch = reader.rest();
        let header: BatchHeader =
            check_client_batch(batch).map_err(|source| WireError::Batch { offset: batch_at, source })?;
        if header.message_count != message_count {
            return Err(WireError::Invalid { offset: count_offset, what: "message count (the batch's message_count)" });
        }
        Ok((SendMessagesHead { stream, topic, partitioning, message_count, batch_at }, batch))
    }
}

/// A client request body, one variant per command code (`command::*`).
#[derive(Clone, Debug, PartialEq)]
pub enum ClientRequest {
    Ping,
    GetStats,
    /// `[compression u8][types count u8][type u8 x count]`; the reply is the ZIP archive's bytes.
    /// At most 255 types: `encode` panics on more, as no body can carry them.
    GetSnapshotFile {
        compression: u8,
        types: Vec<u8>,
    },
    GetClusterMetadata,
    /// Which options to describe: 1 topic, 2 stream, 3 user (passed through as sent).
    DescribeOptions {
        scope: u8,
    },
    GetMe,
    GetClient {
        client_id: u32,
    },
    GetClients,
    GetUser {
        user: Identifier,
    },
    GetUsers,
    /// `[username Name][password u8-len][status u8][has_permissions u8]
    /// [permissions len u32 + permissions, when present][options, bare]`.
    CreateUser {
        username: Name,
        password: ShortBytes,
        /// 1 active, 2 inactive (passed through as sent).
        status: u8,
        permissions: Option<Permissions>,
        options: Options,
    },
    DeleteUser {
        user: Identifier,
    },
    /// `[user Id][has_username u8][Name, when present][has_status u8][status u8, when present]
    /// [options, bare]`.
    UpdateUser {
        user: Identifier,
        username: Option<Name>,
        status: Option<u8>,
        options: Options,
    },
    /// `[user Id][has_permissions u8][permissions len u32 + permissions, when present]`.
    UpdatePermissions {
        user: Identifier,
        permissions: Option<Permissions>,
    },
    ChangePassword {
        user: Identifier,
        current_password: ShortBytes,
        new_password: ShortBytes,
    },
    Logout,
    /// Sent with command code 0 in the header (operation Register): see `decode_login`.
    LoginRegister(LoginRegister),
    GetPersonalAccessTokens,
    /// `expiry`: microseconds; 0 the server's default, u64::MAX never.
    CreatePersonalAccessToken {
        name: Name,
        expiry: u64,
    },
    DeletePersonalAccessToken {
        name: Name,
    },
    /// Sent with command code 0 in the header (operation Register): see `decode_login`.
    LoginWithPersonalAccessToken(LoginWithToken),
    PollMessages(PollMessages),
    SendMessages(SendMessages),
    /// The reference answers FeatureUnavailable.
    FlushUnsavedBuffer {
        stream: Identifier,
        topic: Identifier,
        partition_id: u32,
        fsync: bool,
    },
    GetConsumerOffset(ConsumerOffsetKey),
    StoreConsumerOffset {
        key: ConsumerOffsetKey,
        offset: u64,
        /// 0 no ack, 1 quorum (the SDK sends 1; passed through as sent).
        ack: u8,
    },
    DeleteConsumerOffset {
        key: ConsumerOffsetKey,
        /// As in store_consumer_offset.
        ack: u8,
    },
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
    UpdateStream {
        stream: Identifier,
        name: Name,
        options: Options,
    },
    PurgeStream {
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
    UpdateTopic {
        stream: Identifier,
        topic: Identifier,
        name: Name,
        options: Options,
    },
    PurgeTopic {
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
    DeleteSegments {
        stream: Identifier,
        topic: Identifier,
        partition_id: u32,
        segments_count: u32,
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
    SyncConsumerGroup {
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

/// `[has u8]` then the value when `has` is 1; `has` is 0 or 1.
fn read_optional<T>(
    reader: &mut Reader<'_>,
    what: &'static str,
    read: impl FnOnce(&mut Reader<'_>) -> Result<T, WireError>,
) -> Result<Option<T>, WireError> {
    if reader.bool(what)? {
        read(reader).map(Some)
    } else {
        Ok(None)
    }
}

fn write_optional<T>(out: &mut Vec<u8>, value: Option<&T>, write: impl FnOnce(&T, &mut Vec<u8>)) {
    out.put_bool(value.is_some());
    if let Some(value) = value {
        write(value, out);
    }
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

/// The version prefix both login shapes start with: `[protocol_version u32][sdk_name Name]
/// [sdk_version Name]`.
fn read_version(reader: &mut Reader<'_>) -> Result<(u32, Name, Name), WireError> {
    Ok((reader.u32("protocol version")?, Name::read(reader)?, Name::read(reader)?))
}

fn write_version(out: &mut Vec<u8>, protocol_version: u32, sdk_name: &Name, sdk_version: &Name) {
    out.put_u32(protocol_version);
    sdk_name.write(out);
    sdk_version.write(out);
}

impl LoginRegister {
    /// A whole body in the password shape.
    pub fn decode(body: &[u8]) -> Result<LoginRegister, WireError> {
        let mut reader = Reader::new(body);
        let login = LoginRegister::read(&mut reader)?;
        reader.finish()?;
        Ok(login)
    }

    fn read(reader: &mut Reader<'_>) -> Result<LoginRegister, WireError> {
        let (protocol_version, sdk_name, sdk_version) = read_version(reader)?;
        Ok(LoginRegister {
            protocol_version,
            sdk_name,
            sdk_version,
            username: Name::read(reader)?,
            password: ShortBytes::read(reader, "password")?,
            context: bytes_u32(reader, "context")?.to_vec(),
        })
    }

    fn write(&self, out: &mut Vec<u8>) {
        write_version(out, self.protocol_version, &self.sdk_name, &self.sdk_version);
        self.username.write(out);
        self.password.write(out);
        out.put_bytes_u32(&self.context);
    }
}

impl LoginWithToken {
    /// A whole body in the personal access token shape.
    pub fn decode(body: &[u8]) -> Result<LoginWithToken, WireError> {
        let mut reader = Reader::new(body);
        let login = LoginWithToken::read(&mut reader)?;
        reader.finish()?;
        Ok(login)
    }

    fn read(reader: &mut Reader<'_>) -> Result<LoginWithToken, WireError> {
        let (protocol_version, sdk_name, sdk_version) = read_version(reader)?;
        Ok(LoginWithToken {
            protocol_version,
            sdk_name,
            sdk_version,
            token: ShortBytes::read(reader, "personal access token")?,
            context: bytes_u32(reader, "context")?.to_vec(),
        })
    }

    fn write(&self, out: &mut Vec<u8>) {
        write_version(out, self.protocol_version, &self.sdk_name, &self.sdk_version);
        self.token.write(out);
        out.put_bytes_u32(&self.context);
    }
}

/// A Register request's body: one of the two login shapes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Login {
    Password(LoginRegister),
    Token(LoginWithToken),
}

/// Decodes the body of a Register request (operation 1). Both logins arrive with command code 0
/// in the header, so the shape is told from the body, as the reference does: the password shape
/// first, then the token shape. A body that decodes both ways (possible only for a crafted
/// context) is a password login; a server that, like the reference, falls back to the token
/// shape when the password is refused can try `LoginWithToken::decode` itself. A body that is
/// neither fails with the password shape's error, the shape almost every client sends.
pub fn decode_login(body: &[u8]) -> Result<Login, WireError> {
    match LoginRegister::decode(body) {
        Ok(login) => Ok(Login::Password(login)),
        Err(password_error) => LoginWithToken::decode(body).map(Login::Token).map_err(|_| password_error),
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
        let id = Identifier::read;
        let request = match command_code {
            PING => R::Ping,
            GET_STATS => R::GetStats,
            GET_SNAPSHOT_FILE => {
                let compression = r.u8("snapshot compression")?;
                let count = r.u8("snapshot types count")?;
                R::GetSnapshotFile { compression, types: r.bytes(count as usize, "snapshot types")?.to_vec() }
            }
            GET_CLUSTER_METADATA => R::GetClusterMetadata,
            DESCRIBE_OPTIONS => R::DescribeOptions { scope: r.u8("options scope")? },
            GET_ME => R::GetMe,
            GET_CLIENT => R::GetClient { client_id: r.u32("client id")? },
            GET_CLIENTS => R::GetClients,
            GET_USER => R::GetUser { user: id(r)? },
            GET_USERS => R::GetUsers,
            CREATE_USER => R::CreateUser {
                username: Name::read(r)?,
                password: ShortBytes::read(r, "password")?,
                status: r.u8("user status")?,
                permissions: read_optional(r, "has_permissions (0 or 1)", Permissions::read_sized)?,
                options: Options::read_bare(r)?,
            },
            DELETE_USER => R::DeleteUser { user: id(r)? },
            UPDATE_USER => R::UpdateUser {
                user: id(r)?,
                username: read_optional(r, "has_username (0 or 1)", Name::read)?,
                status: read_optional(r, "has_status (0 or 1)", |r| r.u8("user status"))?,
                options: Options::read_bare(r)?,
            },
            UPDATE_PERMISSIONS => R::UpdatePermissions {
                user: id(r)?,
                permissions: read_optional(r, "has_permissions (0 or 1)", Permissions::read_sized)?,
            },
            CHANGE_PASSWORD => R::ChangePassword {
                user: id(r)?,
                current_password: ShortBytes::read(r, "current password")?,
                new_password: ShortBytes::read(r, "new password")?,
            },
            LOGOUT => R::Logout,
            LOGIN_REGISTER => R::LoginRegister(LoginRegister::read(r)?),
            GET_PERSONAL_ACCESS_TOKENS => R::GetPersonalAccessTokens,
            CREATE_PERSONAL_ACCESS_TOKEN => {
                R::CreatePersonalAccessToken { name: Name::read(r)?, expiry: r.u64("token expiry")? }
            }
            DELETE_PERSONAL_ACCESS_TOKEN => R::DeletePersonalAccessToken { name: Name::read(r)? },
            LOGIN_WITH_PERSONAL_ACCESS_TOKEN => R::LoginWithPersonalAccessToken(LoginWithToken::read(r)?),
            POLL_MESSAGES => R::PollMessages(PollMessages::read(r)?),
            SEND_MESSAGES => R::SendMessages(SendMessages::read(r)?),
            FLUSH_UNSAVED_BUFFER => R::FlushUnsavedBuffer {
                stream: id(r)?,
                topic: id(r)?,
                partition_id: r.u32("partition id")?,
                fsync: r.bool("fsync (0 or 1)")?,
            },
            GET_CONSUMER_OFFSET => R::GetConsumerOffset(ConsumerOffsetKey::read(r)?),
            STORE_CONSUMER_OFFSET => {
                R::StoreConsumerOffset { key: ConsumerOffsetKey::read(r)?, offset: r.u64("offset")?, ack: r.u8("ack")? }
            }
            DELETE_CONSUMER_OFFSET => R::DeleteConsumerOffset { key: ConsumerOffsetKey::read(r)?, ack: r.u8("ack")? },
            GET_STREAM => R::GetStream { stream: id(r)? },
            GET_STREAMS => R::GetStreams,
            CREATE_STREAM => R::CreateStream { name: Name::read(r)?, options: Options::read_bare(r)? },
            DELETE_STREAM => R::DeleteStream { stream: id(r)? },
            UPDATE_STREAM => R::UpdateStream { stream: id(r)?, name: Name::read(r)?, options: Options::read_bare(r)? },
            PURGE_STREAM => R::PurgeStream { stream: id(r)? },
            GET_TOPIC => R::GetTopic { stream: id(r)?, topic: id(r)? },
            GET_TOPICS => R::GetTopics { stream: id(r)? },
            CREATE_TOPIC => R::CreateTopic {
                stream: id(r)?,
                partitions_count: r.u32("partitions count")?,
                name: Name::read(r)?,
                options: Options::read_bare(r)?,
            },
            DELETE_TOPIC => {
                let request = R::DeleteTopic { stream: id(r)?, topic: id(r)? };
                // The reference's Node SDK (apache-iggy 0.10) sends the topic's partition count
                // after the identifiers, and the reference reads the two identifiers and nothing
                // after them: exactly that u32 is read and ignored; any other tail is refused.
                if r.remaining() == 4 {
                    r.u32("partitions count (ignored)")?;
                }
                request
            }
            UPDATE_TOPIC => {
                R::UpdateTopic { stream: id(r)?, topic: id(r)?, name: Name::read(r)?, options: Options::read_bare(r)? }
            }
            PURGE_TOPIC => R::PurgeTopic { stream: id(r)?, topic: id(r)? },
            CREATE_PARTITIONS => {
                R::CreatePartitions { stream: id(r)?, topic: id(r)?, count: r.u32("partitions count")? }
            }
            DELETE_PARTITIONS => {
                R::DeletePartitions { stream: id(r)?, topic: id(r)?, count: r.u32("partitions count")? }
            }
            DELETE_SEGMENTS => R::DeleteSegments {
                stream: id(r)?,
                topic: id(r)?,
                partition_id: r.u32("partition id")?,
                segments_count: r.u32("segments count")?,
            },
            GET_CONSUMER_GROUP => R::GetConsumerGroup { stream: id(r)?, topic: id(r)?, group: id(r)? },
            GET_CONSUMER_GROUPS => R::GetConsumerGroups { stream: id(r)?, topic: id(r)? },
            CREATE_CONSUMER_GROUP => R::CreateConsumerGroup { stream: id(r)?, topic: id(r)?, name: Name::read(r)? },
            DELETE_CONSUMER_GROUP => R::DeleteConsumerGroup { stream: id(r)?, topic: id(r)?, group: id(r)? },
            JOIN_CONSUMER_GROUP => R::JoinConsumerGroup { stream: id(r)?, topic: id(r)?, group: id(r)? },
            LEAVE_CONSUMER_GROUP => R::LeaveConsumerGroup { stream: id(r)?, topic: id(r)?, group: id(r)? },
            SYNC_CONSUMER_GROUP => R::SyncConsumerGroup { stream: id(r)?, topic: id(r)?, group: id(r)? },
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
            R::GetSnapshotFile { .. } => GET_SNAPSHOT_FILE,
            R::GetClusterMetadata => GET_CLUSTER_METADATA,
            R::DescribeOptions { .. } => DESCRIBE_OPTIONS,
            R::GetMe => GET_ME,
            R::GetClient { .. } => GET_CLIENT,
            R::GetClients => GET_CLIENTS,
            R::GetUser { .. } => GET_USER,
            R::GetUsers => GET_USERS,
            R::CreateUser { .. } => CREATE_USER,
            R::DeleteUser { .. } => DELETE_USER,
            R::UpdateUser { .. } => UPDATE_USER,
            R::UpdatePermissions { .. } => UPDATE_PERMISSIONS,
            R::ChangePassword { .. } => CHANGE_PASSWORD,
            R::Logout => LOGOUT,
            R::LoginRegister(_) => LOGIN_REGISTER,
            R::GetPersonalAccessTokens => GET_PERSONAL_ACCESS_TOKENS,
            R::CreatePersonalAccessToken { .. } => CREATE_PERSONAL_ACCESS_TOKEN,
            R::DeletePersonalAccessToken { .. } => DELETE_PERSONAL_ACCESS_TOKEN,
            R::LoginWithPersonalAccessToken(_) => LOGIN_WITH_PERSONAL_ACCESS_TOKEN,
            R::PollMessages(_) => POLL_MESSAGES,
            R::SendMessages(_) => SEND_MESSAGES,
            R::FlushUnsavedBuffer { .. } => FLUSH_UNSAVED_BUFFER,
            R::GetConsumerOffset(_) => GET_CONSUMER_OFFSET,
            R::StoreConsumerOffset { .. } => STORE_CONSUMER_OFFSET,
            R::DeleteConsumerOffset { .. } => DELETE_CONSUMER_OFFSET,
            R::GetStream { .. } => GET_STREAM,
            R::GetStreams => GET_STREAMS,
            R::CreateStream { .. } => CREATE_STREAM,
            R::DeleteStream { .. } => DELETE_STREAM,
            R::UpdateStream { .. } => UPDATE_STREAM,
            R::PurgeStream { .. } => PURGE_STREAM,
            R::GetTopic { .. } => GET_TOPIC,
            R::GetTopics { .. } => GET_TOPICS,
            R::CreateTopic { .. } => CREATE_TOPIC,
            R::DeleteTopic { .. } => DELETE_TOPIC,
            R::UpdateTopic { .. } => UPDATE_TOPIC,
            R::PurgeTopic { .. } => PURGE_TOPIC,
            R::CreatePartitions { .. } => CREATE_PARTITIONS,
            R::DeletePartitions { .. } => DELETE_PARTITIONS,
            R::DeleteSegments { .. } => DELETE_SEGMENTS,
            R::GetConsumerGroup { .. } => GET_CONSUMER_GROUP,
            R::GetConsumerGroups { .. } => GET_CONSUMER_GROUPS,
            R::CreateConsumerGroup { .. } => CREATE_CONSUMER_GROUP,
            R::DeleteConsumerGroup { .. } => DELETE_CONSUMER_GROUP,
            R::JoinConsumerGroup { .. } => JOIN_CONSUMER_GROUP,
            R::LeaveConsumerGroup { .. } => LEAVE_CONSUMER_GROUP,
            R::SyncConsumerGroup { .. } => SYNC_CONSUMER_GROUP,
        }
    }

    pub fn encode(&self) -> Vec<u8> {
        use ClientRequest as R;
        let mut out = Vec::new();
        let o = &mut out;
        match self {
            R::Ping
            | R::GetStats
            | R::GetClusterMetadata
            | R::GetMe
            | R::GetClients
            | R::GetUsers
            | R::Logout
            | R::GetPersonalAccessTokens
            | R::GetStreams => {}
            R::GetSnapshotFile { compression, types } => {
                o.put_u8(*compression);
                o.put_u8(u8::try_from(types.len()).expect("get_snapshot_file carries at most 255 types"));
                o.extend_from_slice(types);
            }
            R::DescribeOptions { scope } => o.put_u8(*scope),
            R::GetClient { client_id } => o.put_u32(*client_id),
            R::GetUser { user } | R::DeleteUser { user } => user.write(o),
            R::CreateUser { username, password, status, permissions, options } => {
                username.write(o);
                password.write(o);
                o.put_u8(*status);
                write_optional(o, permissions.as_ref(), Permissions::write_sized);
                options.write_bare(o);
            }
            R::UpdateUser { user, username, status, options } => {
                user.write(o);
                write_optional(o, username.as_ref(), Name::write);
                write_optional(o, status.as_ref(), |status, o| o.put_u8(*status));
                options.write_bare(o);
            }
            R::UpdatePermissions { user, permissions } => {
                user.write(o);
                write_optional(o, permissions.as_ref(), Permissions::write_sized);
            }
            R::ChangePassword { user, current_password, new_password } => {
                user.write(o);
                current_password.write(o);
                new_password.write(o);
            }
            R::LoginRegister(login) => login.write(o),
            R::CreatePersonalAccessToken { name, expiry } => {
                name.write(o);
                o.put_u64(*expiry);
            }
            R::DeletePersonalAccessToken { name } => name.write(o),
            R::LoginWithPersonalAccessToken(login) => login.write(o),
            R::PollMessages(poll) => poll.write(o),
            R::SendMessages(send) => send.write(o),
            R::FlushUnsavedBuffer { stream, topic, partition_id, fsync } => {
                stream.write(o);
                topic.write(o);
                o.put_u32(*partition_id);
                o.put_bool(*fsync);
            }
            R::GetConsumerOffset(key) => key.write(o),
            R::StoreConsumerOffset { key, offset, ack } => {
                key.write(o);
                o.put_u64(*offset);
                o.put_u8(*ack);
            }
            R::DeleteConsumerOffset { key, ack } => {
                key.write(o);
                o.put_u8(*ack);
            }
            R::GetStream { stream }
            | R::DeleteStream { stream }
            | R::PurgeStream { stream }
            | R::GetTopics { stream } => stream.write(o),
            R::CreateStream { name, options } => {
                name.write(o);
                options.write_bare(o);
            }
            R::UpdateStream { stream, name, options } => {
                stream.write(o);
                name.write(o);
                options.write_bare(o);
            }
            R::GetTopic { stream, topic }
            | R::DeleteTopic { stream, topic }
            | R::PurgeTopic { stream, topic }
            | R::GetConsumerGroups { stream, topic } => {
                stream.write(o);
                topic.write(o);
            }
            R::CreateTopic { stream, partitions_count, name, options } => {
                stream.write(o);
                o.put_u32(*partitions_count);
                name.write(o);
                options.write_bare(o);
            }
            R::UpdateTopic { stream, topic, name, options } => {
                stream.write(o);
                topic.write(o);
                name.write(o);
                options.write_bare(o);
            }
            R::CreatePartitions { stream, topic, count } | R::DeletePartitions { stream, topic, count } => {
                stream.write(o);
                topic.write(o);
                o.put_u32(*count);
            }
            R::DeleteSegments { stream, topic, partition_id, segments_count } => {
                stream.write(o);
                topic.write(o);
                o.put_u32(*partition_id);
                o.put_u32(*segments_count);
            }
            R::CreateConsumerGroup { stream, topic, name } => {
                stream.write(o);
                topic.write(o);
                name.write(o);
            }
            R::GetConsumerGroup { stream, topic, group }
            | R::DeleteConsumerGroup { stream, topic, group }
            | R::JoinConsumerGroup { stream, topic, group }
            | R::LeaveConsumerGroup { stream, topic, group }
            | R::SyncConsumerGroup { stream, topic, group } => {
                stream.write(o);
                topic.write(o);
                group.write(o);
            }
        }
        out
    }
}
