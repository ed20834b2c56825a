//! Vireo's codec against the SDK it must speak to (`PROTOCOL.md`): `iggy` 0.11.0-edge.4, through
//! its own crates. `iggy_binary_protocol` holds the wire types the SDK encodes requests with and
//! decodes replies with; `iggy_common` holds the client code that builds those requests from
//! domain values and turns replies back into domain values. Nothing here restates a layout: the
//! SDK encodes and Vireo decodes and re-encodes, or Vireo encodes and the SDK decodes.
//!
//! One test per area:
//! - requests: every command code of `PROTOCOL.md`, built with the SDK's wire types (a table with
//!   rich values: string and numeric ids, options, permissions) and as the SDK's client methods
//!   send them (captured by `FakeServer`, a transport that records requests and answers with
//!   canned bodies); each decodes with `ClientRequest::decode(code, body)` (a login also with
//!   `decode_login`) and re-encodes to the same bytes.
//! - replies: every reply body the SDK decodes, encoded by Vireo, decoded by the SDK's wire types
//!   (every byte used, fields equal) and, through `FakeServer`, by the SDK's client methods into
//!   domain values; result sections split by the SDK's own `result_code`/`result_section_len`.
//! - headers: the 256-byte request header as the SDK builds it, decoded by `Header::decode`; and
//!   Vireo's reply and eviction headers read back as the SDK's `ReplyHeader`/`EvictionHeader`.
//! - batches: a batch stamped by `vireo_storage::batch::stamp` passes the SDK's verifying decoder,
//!   a batch the SDK encodes passes Vireo's `validate`, and a poll reply reads back in the SDK.

use std::collections::{BTreeMap, HashMap};
use std::str::FromStr;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use bytes::{Bytes, BytesMut};
use iggy_binary_protocol::batch::decode_batch_slice;
use iggy_binary_protocol::codec::{WireDecode, WireEncode};
use iggy_binary_protocol::codes::*;
use iggy_binary_protocol::consensus::{
    Command, EvictionHeader, EvictionReason, Operation, ReplyHeader, RequestHeader, HEADER_SIZE,
};
use iggy_binary_protocol::requests::consumer_groups::*;
use iggy_binary_protocol::requests::consumer_offsets::*;
use iggy_binary_protocol::requests::messages::*;
use iggy_binary_protocol::requests::partitions::*;
use iggy_binary_protocol::requests::personal_access_tokens::*;
use iggy_binary_protocol::requests::segments::*;
use iggy_binary_protocol::requests::streams::*;
use iggy_binary_protocol::requests::system::*;
use iggy_binary_protocol::requests::topics::*;
use iggy_binary_protocol::requests::users::*;
use iggy_binary_protocol::responses;
use iggy_binary_protocol::{
    result_code, result_section_len, AckLevel, ClientVersionInfo, WireConsumer, WireIdentifier, WireName, WireOptions,
    WirePartitioning, WirePermissions, WirePollingStrategy, IGGY_PROTOCOL_VERSION,
};
use iggy_common::wire_conversions::permissions_to_wire;
use iggy_common::{
    BinaryClient, BinaryTransport, ClientState, ClusterClient, CompressionAlgorithm, Consumer, ConsumerGroupClient,
    ConsumerGroupClientState, ConsumerOffsetClient, DiagnosticEvent, IggyByteSize, IggyDuration, IggyError, IggyExpiry,
    IggyMessage, MaxTopicSize, MessageClient, OptionsScope, PartitionClient, Partitioning, PersonalAccessTokenClient,
    PollingStrategy, SegmentClient, SnapshotCompression, StreamClient, StreamUpdateOptions, SystemClient,
    SystemSnapshotType, TopicClient, TopicCreateOptions, TopicUpdateOptions, UserClient, UserStatus, UserUpdateOptions,
    VsrSessionControl, VsrSessionSealed,
};
use vireo_protocol::header::{self, Header};
use vireo_protocol::wire::{self, command, decode_login, ClientRequest, Login, Name, OptionValue, Options};
use vireo_storage::batch::{self as vireo_batch, BatchBuilder};

// ---------------------------------------------------------------------------------------------
// The command set of `PROTOCOL.md` ("Command codes"), obsolete logins (38, 44) aside.

const PROTOCOL_CODES: [u32; 49] = [
    1, 10, 11, 12, 13, 20, 21, 22, 31, 32, 41, 100, 102, 120, 200, 201, 300, 301, 600, 601, 606, // reads
    40, 45, 39, // sessions
    202, 204, 203, 205, 302, 304, 303, 305, 402, 403, 503, 602, 603, 33, 35, 34, 37, 36, 42, 43, 604,
    605, // metadata
    101, 121, 122, // partitions
];

// ---------------------------------------------------------------------------------------------
// A transport for the SDK's client code: it records every request and answers each command code
// with a canned body, as the SDK's TCP client would hand it over (result section stripped).

#[derive(Debug, Default)]
struct FakeServer {
    sent: Mutex<Vec<(u32, Vec<u8>)>>,
    answers: Mutex<HashMap<u32, Vec<u8>>>,
    groups: Arc<ConsumerGroupClientState>,
}

impl FakeServer {
    fn answer(&self, code: u32, body: Vec<u8>) {
        self.answers.lock().unwrap().insert(code, body);
    }

    fn take_sent(&self) -> Vec<(u32, Vec<u8>)> {
        std::mem::take(&mut self.sent.lock().unwrap())
    }
}

#[async_trait]
impl BinaryTransport for FakeServer {
    async fn get_state(&self) -> ClientState {
        ClientState::Authenticated
    }
    async fn set_state(&self, _state: ClientState) {}
    async fn publish_event(&self, _event: DiagnosticEvent) {}
    async fn send_raw_with_response(&self, code: u32, payload: Bytes) -> Result<Bytes, IggyError> {
        self.sent.lock().unwrap().push((code, payload.to_vec()));
        Ok(Bytes::from(self.answers.lock().unwrap().get(&code).cloned().unwrap_or_default()))
    }
    fn get_heartbeat_interval(&self) -> IggyDuration {
        IggyDuration::from(1_000_000u64)
    }
    fn consumer_group_state(&self) -> Arc<ConsumerGroupClientState> {
        self.groups.clone()
    }
}

impl VsrSessionSealed for FakeServer {}

#[async_trait]
impl VsrSessionControl for FakeServer {
    async fn bind_vsr_session(&self, _session: u64) -> Result<(), IggyError> {
        Ok(())
    }
    async fn reset_vsr_session(&self) -> Result<(), IggyError> {
        Ok(())
    }
    fn sdk_version(&self) -> &'static str {
        "0.11.0-edge.4"
    }
}

#[async_trait]
impl iggy_common::Client for FakeServer {
    async fn connect(&self) -> Result<(), IggyError> {
        Ok(())
    }
    async fn disconnect(&self) -> Result<(), IggyError> {
        Ok(())
    }
    async fn shutdown(&self) -> Result<(), IggyError> {
        Ok(())
    }
    async fn subscribe_events(&self) -> async_broadcast::Receiver<DiagnosticEvent> {
        async_broadcast::broadcast(1).1
    }
}

impl BinaryClient for FakeServer {}

fn block_on<F: std::future::Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(future)
}

// ---------------------------------------------------------------------------------------------
// SDK values used across the areas.

fn id(value: u32) -> WireIdentifier {
    WireIdentifier::numeric(value)
}

fn named(value: &str) -> WireIdentifier {
    WireIdentifier::named(value).unwrap()
}

fn wire_name(value: &str) -> WireName {
    WireName::new(value).unwrap()
}

fn version_info() -> ClientVersionInfo {
    ClientVersionInfo {
        protocol_version: IGGY_PROTOCOL_VERSION,
        sdk_name: wire_name("rust-sdk"),
        sdk_version: wire_name("0.11.0-edge.4"),
    }
}

fn sdk_permissions() -> iggy_common::Permissions {
    use iggy_common::{GlobalPermissions, StreamPermissions, TopicPermissions};
    let topic = TopicPermissions { manage_topic: false, read_topic: true, poll_messages: true, send_messages: false };
    let stream = |topics| StreamPermissions {
        manage_stream: false,
        read_stream: true,
        manage_topics: true,
        read_topics: false,
        poll_messages: true,
        send_messages: false,
        topics,
    };
    iggy_common::Permissions {
        global: GlobalPermissions {
            manage_servers: true,
            read_servers: false,
            manage_users: false,
            read_users: true,
            manage_streams: true,
            read_streams: false,
            manage_topics: false,
            read_topics: true,
            poll_messages: true,
            send_messages: false,
        },
        streams: Some(BTreeMap::from([
            (1, stream(None)),
            (4, stream(Some(BTreeMap::from([(2, topic.clone()), (9, topic)])))),
        ])),
    }
}

fn wire_permissions() -> WirePermissions {
    permissions_to_wire(&sdk_permissions())
}

fn topic_options() -> TopicCreateOptions {
    TopicCreateOptions {
        partitions_count: Some(3),
        compression_algorithm: Some(CompressionAlgorithm::Gzip),
        message_expiry: Some(IggyExpiry::ExpireDuration(IggyDuration::from(60_000_000u64))),
        max_topic_size: Some(MaxTopicSize::Custom(IggyByteSize::from(1u64 << 30))),
        segment_size: Some(IggyByteSize::from(1u64 << 20)),
        enforce_fsync: Some(true),
        messages_required_to_save: Some(1_000),
        size_of_messages_required_to_save: Some(IggyByteSize::from(4096u64)),
        preallocate_segments: Some(false),
        raw: BTreeMap::from([("custom_key".to_string(), "custom value".to_string())]),
    }
}

fn sdk_batch_body(partitioning: &WirePartitioning) -> Bytes {
    let messages = [
        RawMessage { id: 11, origin_timestamp: 1_000_000, headers: None, payload: b"first" },
        RawMessage {
            id: 12,
            origin_timestamp: 1_000_250,
            headers: Some(b"\x02\x01\x00\x00\x00k\x02\x01\x00\x00\x00v"),
            payload: b"second",
        },
        RawMessage { id: 13, origin_timestamp: 1_000_100, headers: None, payload: b"x" },
    ];
    let mut body = BytesMut::new();
    SendMessagesEncoder::encode(&mut body, &named("orders"), &id(2), partitioning, &messages).unwrap();
    body.freeze()
}

// ---------------------------------------------------------------------------------------------
// Requests.

/// Every command of `PROTOCOL.md` built with the SDK's wire types.
fn sdk_wire_requests() -> Vec<(&'static str, u32, Bytes)> {
    let consumer = WireConsumer { kind: 1, id: named("reader") };
    let group = WireConsumer { kind: 2, id: id(5) };
    let create_topic_options = topic_options().to_wire().unwrap();
    let update_topic_options = TopicUpdateOptions {
        compression_algorithm: Some(CompressionAlgorithm::None),
        message_expiry: Some(IggyExpiry::NeverExpire),
        max_topic_size: Some(MaxTopicSize::Unlimited),
        raw: BTreeMap::new(),
    }
    .to_wire()
    .unwrap();
    let stream_options =
        StreamUpdateOptions { raw: BTreeMap::from([("owner".to_string(), "team-a".to_string())]) }.to_wire().unwrap();
    let user_options =
        UserUpdateOptions { raw: BTreeMap::from([("quota".to_string(), "10".to_string())]) }.to_wire().unwrap();
    vec![
        ("ping", PING_CODE, PingRequest.to_bytes()),
        ("get_stats", GET_STATS_CODE, GetStatsRequest.to_bytes()),
        (
            "get_snapshot_file",
            GET_SNAPSHOT_FILE_CODE,
            GetSnapshotRequest { compression: 2, snapshot_types: vec![1, 3, 100] }.to_bytes(),
        ),
        ("get_cluster_metadata", GET_CLUSTER_METADATA_CODE, GetClusterMetadataRequest.to_bytes()),
        ("describe_options", DESCRIBE_OPTIONS_CODE, DescribeOptionsRequest { scope: OPTIONS_SCOPE_STREAM }.to_bytes()),
        ("get_me", GET_ME_CODE, GetMeRequest.to_bytes()),
        ("get_client", GET_CLIENT_CODE, GetClientRequest { client_id: 77 }.to_bytes()),
        ("get_clients", GET_CLIENTS_CODE, GetClientsRequest.to_bytes()),
        ("get_user", GET_USER_CODE, GetUserRequest { user_id: named("ann") }.to_bytes()),
        ("get_users", GET_USERS_CODE, GetUsersRequest.to_bytes()),
        (
            "create_user with permissions and options",
            CREATE_USER_CODE,
            CreateUserRequest {
                username: wire_name("ann"),
                password: "secret-pw".into(),
                status: 2,
                permissions: Some(wire_permissions()),
                options: user_options.clone(),
            }
            .to_bytes(),
        ),
        (
            "create_user without permissions",
            CREATE_USER_CODE,
            CreateUserRequest {
                username: wire_name("bob"),
                password: "secret-pw".into(),
                status: 1,
                permissions: None,
                options: WireOptions::empty(),
            }
            .to_bytes(),
        ),
        ("delete_user", DELETE_USER_CODE, DeleteUserRequest { user_id: id(3) }.to_bytes()),
        (
            "update_user with username, status and options",
            UPDATE_USER_CODE,
            UpdateUserRequest {
                user_id: id(3),
                username: Some(wire_name("carol")),
                status: Some(1),
                options: user_options,
            }
            .to_bytes(),
        ),
        (
            "update_user with nothing",
            UPDATE_USER_CODE,
            UpdateUserRequest { user_id: named("ann"), username: None, status: None, options: WireOptions::empty() }
                .to_bytes(),
        ),
        (
            "update_permissions",
            UPDATE_PERMISSIONS_CODE,
            UpdatePermissionsRequest { user_id: id(3), permissions: Some(wire_permissions()) }.to_bytes(),
        ),
        (
            "update_permissions to none",
            UPDATE_PERMISSIONS_CODE,
            UpdatePermissionsRequest { user_id: id(3), permissions: None }.to_bytes(),
        ),
        (
            "change_password",
            CHANGE_PASSWORD_CODE,
            ChangePasswordRequest {
                user_id: named("ann"),
                current_password: "old-pw".into(),
                new_password: "new-pw".into(),
            }
            .to_bytes(),
        ),
        ("logout", LOGOUT_USER_CODE, LogoutUserRequest.to_bytes()),
        (
            "login_register",
            LOGIN_REGISTER_CODE,
            LoginRegisterRequest {
                version_info: version_info(),
                username: wire_name("iggy"),
                password: "iggy".to_string().into(),
                client_context: Some("ctx".into()),
            }
            .to_bytes(),
        ),
        ("get_personal_access_tokens", GET_PERSONAL_ACCESS_TOKENS_CODE, GetPersonalAccessTokensRequest.to_bytes()),
        (
            "create_personal_access_token",
            CREATE_PERSONAL_ACCESS_TOKEN_CODE,
            CreatePersonalAccessTokenRequest { name: wire_name("ci"), expiry: u64::MAX }.to_bytes(),
        ),
        (
            "delete_personal_access_token",
            DELETE_PERSONAL_ACCESS_TOKEN_CODE,
            DeletePersonalAccessTokenRequest { name: wire_name("ci") }.to_bytes(),
        ),
        (
            "login_register_with_personal_access_token",
            LOGIN_REGISTER_WITH_PAT_CODE,
            LoginRegisterWithPatRequest {
                version_info: version_info(),
                token: "a-token-of-some-length".to_string().into(),
                client_context: None,
            }
            .to_bytes(),
        ),
        (
            "poll_messages",
            POLL_MESSAGES_CODE,
            PollMessagesRequest {
                consumer: group.clone(),
                stream_id: named("orders"),
                topic_id: id(2),
                partition_id: Some(0),
                strategy: WirePollingStrategy { kind: 2, value: 1_700_000_000_000_000 },
                count: 100,
                auto_commit: true,
            }
            .to_bytes(),
        ),
        (
            "poll_messages without partition",
            POLL_MESSAGES_CODE,
            PollMessagesRequest {
                consumer: consumer.clone(),
                stream_id: id(1),
                topic_id: id(2),
                partition_id: None,
                strategy: WirePollingStrategy { kind: 5, value: 0 },
                count: 1,
                auto_commit: false,
            }
            .to_bytes(),
        ),
        ("send_messages", SEND_MESSAGES_CODE, sdk_batch_body(&WirePartitioning::PartitionId(1))),
        ("send_messages balanced", SEND_MESSAGES_CODE, sdk_batch_body(&WirePartitioning::Balanced)),
        (
            "send_messages by key",
            SEND_MESSAGES_CODE,
            sdk_batch_body(&WirePartitioning::MessagesKey(b"user-42".to_vec())),
        ),
        (
            "flush_unsaved_buffer",
            FLUSH_UNSAVED_BUFFER_CODE,
            FlushUnsavedBufferRequest { stream_id: id(1), topic_id: named("events"), partition_id: 3, fsync: true }
                .to_bytes(),
        ),
        (
            "get_consumer_offset",
            GET_CONSUMER_OFFSET_CODE,
            GetConsumerOffsetRequest {
                consumer: consumer.clone(),
                stream_id: id(1),
                topic_id: id(2),
                partition_id: Some(4),
            }
            .to_bytes(),
        ),
        (
            "store_consumer_offset",
            STORE_CONSUMER_OFFSET_CODE,
            StoreConsumerOffsetRequest {
                consumer: group.clone(),
                stream_id: id(1),
                topic_id: id(2),
                partition_id: None,
                offset: 12_345,
                ack: AckLevel::Quorum,
            }
            .to_bytes(),
        ),
        (
            "delete_consumer_offset",
            DELETE_CONSUMER_OFFSET_CODE,
            DeleteConsumerOffsetRequest {
                consumer,
                stream_id: named("orders"),
                topic_id: id(2),
                partition_id: Some(1),
                ack: AckLevel::NoAck,
            }
            .to_bytes(),
        ),
        ("get_stream", GET_STREAM_CODE, GetStreamRequest { stream_id: named("orders") }.to_bytes()),
        ("get_streams", GET_STREAMS_CODE, GetStreamsRequest.to_bytes()),
        (
            "create_stream",
            CREATE_STREAM_CODE,
            CreateStreamRequest { name: wire_name("orders"), options: WireOptions::empty() }.to_bytes(),
        ),
        (
            "create_stream with options",
            CREATE_STREAM_CODE,
            CreateStreamRequest { name: wire_name("orders"), options: stream_options.clone() }.to_bytes(),
        ),
        ("delete_stream", DELETE_STREAM_CODE, DeleteStreamRequest { stream_id: id(1) }.to_bytes()),
        (
            "update_stream",
            UPDATE_STREAM_CODE,
            UpdateStreamRequest { stream_id: id(1), name: wire_name("orders-2"), options: stream_options }.to_bytes(),
        ),
        ("purge_stream", PURGE_STREAM_CODE, PurgeStreamRequest { stream_id: named("orders") }.to_bytes()),
        ("get_topic", GET_TOPIC_CODE, GetTopicRequest { stream_id: id(1), topic_id: named("events") }.to_bytes()),
        ("get_topics", GET_TOPICS_CODE, GetTopicsRequest { stream_id: id(1) }.to_bytes()),
        (
            "create_topic with every option",
            CREATE_TOPIC_CODE,
            CreateTopicRequest {
                stream_id: id(1),
                partitions_count: 3,
                name: wire_name("events"),
                options: create_topic_options,
            }
            .to_bytes(),
        ),
        (
            "create_topic without options",
            CREATE_TOPIC_CODE,
            CreateTopicRequest {
                stream_id: named("orders"),
                partitions_count: 1,
                name: wire_name("events"),
                options: WireOptions::empty(),
            }
            .to_bytes(),
        ),
        ("delete_topic", DELETE_TOPIC_CODE, DeleteTopicRequest { stream_id: id(1), topic_id: id(2) }.to_bytes()),
        (
            "update_topic",
            UPDATE_TOPIC_CODE,
            UpdateTopicRequest {
                stream_id: id(1),
                topic_id: id(2),
                name: wire_name("events-2"),
                options: update_topic_options,
            }
            .to_bytes(),
        ),
        ("purge_topic", PURGE_TOPIC_CODE, PurgeTopicRequest { stream_id: id(1), topic_id: id(2) }.to_bytes()),
        (
            "create_partitions",
            CREATE_PARTITIONS_CODE,
            CreatePartitionsRequest { stream_id: id(1), topic_id: id(2), partitions_count: 4 }.to_bytes(),
        ),
        (
            "delete_partitions",
            DELETE_PARTITIONS_CODE,
            DeletePartitionsRequest { stream_id: id(1), topic_id: id(2), partitions_count: 1 }.to_bytes(),
        ),
        (
            "delete_segments",
            DELETE_SEGMENTS_CODE,
            DeleteSegmentsRequest { stream_id: id(1), topic_id: id(2), partition_id: 0, segments_count: 5 }.to_bytes(),
        ),
        (
            "get_consumer_group",
            GET_CONSUMER_GROUP_CODE,
            GetConsumerGroupRequest { stream_id: id(1), topic_id: id(2), group_id: named("readers") }.to_bytes(),
        ),
        (
            "get_consumer_groups",
            GET_CONSUMER_GROUPS_CODE,
            GetConsumerGroupsRequest { stream_id: id(1), topic_id: id(2) }.to_bytes(),
        ),
        (
            "create_consumer_group",
            CREATE_CONSUMER_GROUP_CODE,
            CreateConsumerGroupRequest { stream_id: id(1), topic_id: id(2), name: wire_name("readers") }.to_bytes(),
        ),
        (
            "delete_consumer_group",
            DELETE_CONSUMER_GROUP_CODE,
            DeleteConsumerGroupRequest { stream_id: id(1), topic_id: id(2), group_id: id(5) }.to_bytes(),
        ),
        (
            "join_consumer_group",
            JOIN_CONSUMER_GROUP_CODE,
            JoinConsumerGroupRequest { stream_id: id(1), topic_id: id(2), group_id: id(5) }.to_bytes(),
        ),
        (
            "leave_consumer_group",
            LEAVE_CONSUMER_GROUP_CODE,
            LeaveConsumerGroupRequest { stream_id: id(1), topic_id: id(2), group_id: named("readers") }.to_bytes(),
        ),
        (
            "sync_consumer_group",
            SYNC_CONSUMER_GROUP_CODE,
            SyncConsumerGroupRequest { stream_id: id(1), topic_id: id(2), group_id: id(5) }.to_bytes(),
        ),
    ]
}

/// The requests the SDK's client methods send, as the fake server recorded them.
fn sdk_client_requests() -> Vec<(String, u32, Vec<u8>)> {
    use iggy_common::Identifier;
    let server = FakeServer::default();
    // Answers the client methods need to get as far as sending (and, for two-step calls, on).
    server.answer(LOGIN_REGISTER_CODE, login_reply_payload());
    server.answer(LOGIN_REGISTER_WITH_PAT_CODE, login_reply_payload());
    server.answer(GET_TOPIC_CODE, topic_details().encode());
    server
        .answer(SYNC_CONSUMER_GROUP_CODE, wire::SyncConsumerGroupReply { generation: 3, partitions: vec![1] }.encode());
    server.answer(POLL_MESSAGES_CODE, poll_reply().encode());
    server.answer(CREATE_USER_CODE, user_details().encode());
    server.answer(CREATE_STREAM_CODE, stream_details().encode());
    server.answer(CREATE_TOPIC_CODE, topic_details().encode());
    server.answer(CREATE_CONSUMER_GROUP_CODE, consumer_group().encode());
    server.answer(CREATE_PERSONAL_ACCESS_TOKEN_CODE, wire::CreatedPersonalAccessToken { token: name("tok") }.encode());

    let stream = Identifier::named("orders").unwrap();
    let topic = Identifier::numeric(2).unwrap();
    let group = Identifier::named("readers").unwrap();
    let user = Identifier::named("ann").unwrap();
    let mut recorded = Vec::new();
    let mut record = |call: &str, server: &FakeServer| {
        for (index, (code, body)) in server.take_sent().into_iter().enumerate() {
            recorded.push((format!("{call} (request {index})"), code, body));
        }
    };
    block_on(async {
        let s = &server;
        s.ping().await.unwrap();
        record("ping", s);
        s.get_stats().await.ok();
        record("get_stats", s);
        s.snapshot(
            SnapshotCompression::Deflated,
            vec![SystemSnapshotType::ProcessList, SystemSnapshotType::ServerLogs],
        )
        .await
        .ok();
        record("snapshot", s);
        s.get_cluster_metadata().await.ok();
        record("get_cluster_metadata", s);
        s.describe_options(OptionsScope::Topic).await.ok();
        record("describe_options", s);
        s.get_me().await.ok();
        record("get_me", s);
        s.get_client(9).await.unwrap();
        record("get_client", s);
        s.get_clients().await.unwrap();
        record("get_clients", s);
        s.get_user(&user).await.unwrap();
        record("get_user", s);
        s.get_users().await.unwrap();
        record("get_users", s);
        s.create_user("ann", "secret-pw", UserStatus::Active, Some(sdk_permissions())).await.unwrap();
        record("create_user", s);
        s.delete_user(&user).await.unwrap();
        record("delete_user", s);
        s.update_user(&user, Some("anne"), Some(UserStatus::Inactive), &UserUpdateOptions::default()).await.unwrap();
        record("update_user", s);
        s.update_permissions(&user, Some(sdk_permissions())).await.unwrap();
        record("update_permissions", s);
        s.update_permissions(&user, None).await.unwrap();
        record("update_permissions to none", s);
        s.change_password(&user, "secret-pw", "new-secret").await.unwrap();
        record("change_password", s);
        s.login_user("iggy", "iggy-password").await.unwrap();
        record("login_user (logout, then login_register)", s);
        s.logout_user().await.unwrap();
        record("logout_user", s);
        s.get_personal_access_tokens().await.unwrap();
        record("get_personal_access_tokens", s);
        s.create_personal_access_token("ci", IggyExpiry::NeverExpire).await.unwrap();
        record("create_personal_access_token", s);
        s.delete_personal_access_token("ci").await.unwrap();
        record("delete_personal_access_token", s);
        s.login_with_personal_access_token("a-raw-token").await.unwrap();
        record("login_with_personal_access_token (logout, then the token login)", s);
        s.poll_messages(
            &stream,
            &topic,
            Some(1),
            &Consumer::new(Identifier::numeric(7).unwrap()),
            &PollingStrategy::offset(5),
            10,
            true,
        )
        .await
        .unwrap();
        record("poll_messages", s);
        s.poll_messages(&stream, &topic, None, &Consumer::group(group.clone()), &PollingStrategy::next(), 10, false)
            .await
            .unwrap();
        record("poll_messages as a group (sync_consumer_group, then poll)", s);
        let mut messages = vec![IggyMessage::from_str("hello").unwrap(), IggyMessage::from_str("world").unwrap()];
        s.send_messages(&stream, &topic, &Partitioning::partition_id(0), &mut messages).await.unwrap();
        record("send_messages", s);
        s.send_messages(&stream, &topic, &Partitioning::messages_key_str("key").unwrap(), &mut messages).await.unwrap();
        record("send_messages by key (get_topic, then send)", s);
        s.flush_unsaved_buffer(&stream, &topic, 0, true).await.unwrap();
        record("flush_unsaved_buffer", s);
        let consumer = Consumer::new(Identifier::named("reader").unwrap());
        s.get_consumer_offset(&consumer, &stream, &topic, Some(0)).await.unwrap();
        record("get_consumer_offset", s);
        s.store_consumer_offset(&consumer, &stream, &topic, None, 99).await.unwrap();
        record("store_consumer_offset", s);
        s.delete_consumer_offset(&consumer, &stream, &topic, Some(0)).await.unwrap();
        record("delete_consumer_offset", s);
        s.get_stream(&stream).await.unwrap();
        record("get_stream", s);
        s.get_streams().await.unwrap();
        record("get_streams", s);
        s.create_stream("orders").await.unwrap();
        record("create_stream", s);
        s.update_stream(&stream, "orders-2", &StreamUpdateOptions::default()).await.unwrap();
        record("update_stream", s);
        s.delete_stream(&stream).await.unwrap();
        record("delete_stream", s);
        s.purge_stream(&stream).await.unwrap();
        record("purge_stream", s);
        s.get_topic(&stream, &topic).await.unwrap();
        record("get_topic", s);
        s.get_topics(&stream).await.unwrap();
        record("get_topics", s);
        s.create_topic(&stream, "events", &topic_options()).await.unwrap();
        record("create_topic", s);
        s.update_topic(&stream, &topic, "events-2", &TopicUpdateOptions::default()).await.unwrap();
        record("update_topic", s);
        s.delete_topic(&stream, &topic).await.unwrap();
        record("delete_topic", s);
        s.purge_topic(&stream, &topic).await.unwrap();
        record("purge_topic", s);
        s.create_partitions(&stream, &topic, 2).await.unwrap();
        record("create_partitions", s);
        s.delete_partitions(&stream, &topic, 1).await.unwrap();
        record("delete_partitions", s);
        s.delete_segments(&stream, &topic, 0, 3).await.unwrap();
        record("delete_segments", s);
        s.get_consumer_group(&stream, &topic, &group).await.unwrap();
        record("get_consumer_group", s);
        s.get_consumer_groups(&stream, &topic).await.unwrap();
        record("get_consumer_groups", s);
        s.create_consumer_group(&stream, &topic, "readers").await.unwrap();
        record("create_consumer_group", s);
        s.delete_consumer_group(&stream, &topic, &group).await.unwrap();
        record("delete_consumer_group", s);
        s.join_consumer_group(&stream, &topic, &group).await.unwrap();
        record("join_consumer_group", s);
        s.leave_consumer_group(&stream, &topic, &group).await.unwrap();
        record("leave_consumer_group", s);
    });
    recorded
}

/// Decodes an SDK request body with Vireo and re-encodes it; the bytes must not change.
fn assert_decodes_and_re_encodes(what: &str, code: u32, body: &[u8]) {
    let request = ClientRequest::decode(code, body)
        .unwrap_or_else(|error| panic!("{what} (code {code}): Vireo cannot decode the SDK's body: {error}"));
    assert_eq!(request.command_code(), code, "{what}: decoded as another command");
    assert_eq!(request.encode(), body, "{what} (code {code}): Vireo re-encodes the SDK's body to other bytes");
    // Both logins travel as operation Register with no code: the body alone must tell them apart.
    match (code, decode_login(body)) {
        (LOGIN_REGISTER_CODE, Ok(Login::Password(login))) => {
            assert_eq!(ClientRequest::LoginRegister(login), request, "{what}: decode_login differs")
        }
        (LOGIN_REGISTER_WITH_PAT_CODE, Ok(Login::Token(login))) => {
            assert_eq!(ClientRequest::LoginWithPersonalAccessToken(login), request, "{what}: decode_login differs")
        }
        (LOGIN_REGISTER_CODE | LOGIN_REGISTER_WITH_PAT_CODE, other) => {
            panic!("{what}: decode_login tells the wrong shape: {other:?}")
        }
        _ => {}
    }
}

#[test]
fn every_request_the_sdk_builds_decodes_and_re_encodes_exactly() {
    let mut protocol_codes = PROTOCOL_CODES.to_vec();
    protocol_codes.sort_unstable();
    let mut vireo_codes = command::CLIENT_COMMAND_CODES.to_vec();
    vireo_codes.sort_unstable();
    assert_eq!(vireo_codes, protocol_codes, "Vireo's command codes are not PROTOCOL.md's");

    let wire_requests = sdk_wire_requests();
    for (what, code, body) in &wire_requests {
        assert_decodes_and_re_encodes(what, *code, body);
    }
    let client_requests = sdk_client_requests();
    for (what, code, body) in &client_requests {
        assert_decodes_and_re_encodes(what, *code, body);
    }

    for code in PROTOCOL_CODES {
        assert!(wire_requests.iter().any(|(_, sent, _)| *sent == code), "no SDK wire request with code {code}");
    }
    // Every command the SDK's client methods can send at all (the SDK has no client method for
    // sync_consumer_group alone; a group poll sends it).
    for code in PROTOCOL_CODES {
        assert!(client_requests.iter().any(|(_, sent, _)| *sent == code), "no SDK client call sent code {code}");
    }
}

// ---------------------------------------------------------------------------------------------
// Replies.

fn name(value: &str) -> Name {
    Name::new(value).unwrap()
}

fn vireo_options(pairs: Vec<(&str, OptionValue)>) -> Options {
    Options::new(pairs.into_iter().map(|(key, value)| (key.to_string(), value)).collect()).unwrap()
}

fn login_reply_payload() -> Vec<u8> {
    // What the SDK's client code sees of a login reply: the payload after the result section.
    let reply = wire::LoginReply {
        result: wire::ResultSection::ok(),
        user_id: 7,
        session: 42,
        server_protocol_version: IGGY_PROTOCOL_VERSION,
        server_version: name("0.9.0-edge.5"),
    };
    sdk_split(Operation::Register, &reply.encode()).unwrap()
}

fn vireo_permissions() -> wire::Permissions {
    let topic =
        wire::TopicPermissions { manage_topic: true, read_topic: false, poll_messages: true, send_messages: true };
    wire::Permissions {
        global: wire::GlobalPermissions { read_servers: true, send_messages: true, ..Default::default() },
        streams: BTreeMap::from([
            (2, wire::StreamPermissions { read_stream: true, ..Default::default() }),
            (
                3,
                wire::StreamPermissions {
                    manage_topics: true,
                    topics: BTreeMap::from([(1, topic), (8, topic)]),
                    ..Default::default()
                },
            ),
        ]),
    }
}

fn user_response(id: u32, username: &str) -> wire::UserResponse {
    wire::UserResponse {
        id,
        created_at: 1_700_000_000_000_000 + id as u64,
        status: 1 + id as u8 % 2,
        username: name(username),
        options: vireo_options(vec![("quota", OptionValue::String("10".into()))]),
    }
}

fn user_details() -> wire::UserDetails {
    wire::UserDetails { user: user_response(3, "ann"), permissions: Some(vireo_permissions()) }
}

fn stream_head(id: u32, topics_count: u32) -> wire::Stream {
    wire::Stream {
        id,
        created_at: 1_700_000_000_000_000,
        topics_count,
        size: 4096,
        messages_count: 17,
        name: name(&format!("stream-{id}")),
        options: vireo_options(vec![("owner", OptionValue::String("team-a".into()))]),
    }
}

fn topic_head(id: u32, partitions_count: u32) -> wire::Topic {
    wire::Topic {
        id,
        created_at: 1_700_000_000_000_001,
        partitions_count,
        message_expiry: 60_000_000,
        compression: 2,
        max_topic_size: 1 << 30,
        size: 8192,
        messages_count: 21,
        name: name(&format!("topic-{id}")),
        options: vireo_options(vec![
            ("compression_algorithm", OptionValue::String("gzip".into())),
            ("message_expiry", OptionValue::U64(60_000_000)),
            ("max_topic_size", OptionValue::U64(1 << 30)),
        ]),
        derived_options: vireo_options(vec![
            ("segment_size", OptionValue::U64(1 << 20)),
            ("enforce_fsync", OptionValue::Bool(false)),
            ("messages_required_to_save", OptionValue::U32(1_000)),
            ("size_of_messages_required_to_save", OptionValue::U64(4096)),
            ("preallocate_segments", OptionValue::Bool(true)),
        ]),
    }
}

fn topic_details() -> wire::TopicDetails {
    let partitions = (0..3)
        .map(|id| wire::Partition {
            id,
            created_at: 1_700_000_000_000_002,
            segments_count: 1 + id,
            current_offset: 100 * id as u64,
            size: 512,
            messages_count: 100 * id as u64 + 1,
        })
        .collect();
    wire::TopicDetails { topic: topic_head(2, 3), partitions }
}

fn stream_details() -> wire::StreamDetails {
    wire::StreamDetails { stream: stream_head(1, 2), topics: vec![topic_head(1, 1), topic_head(2, 3)] }
}

fn consumer_group() -> wire::ConsumerGroup {
    wire::ConsumerGroup {
        id: 5,
        partitions_count: 3,
        name: name("readers"),
        members: vec![
            wire::ConsumerGroupMember { id: 1, partitions: vec![0, 2] },
            wire::ConsumerGroupMember { id: 2, partitions: vec![1] },
        ],
    }
}

fn client_info(client_id: u32) -> wire::ClientInfo {
    wire::ClientInfo {
        client_id,
        user_id: if client_id.is_multiple_of(2) { u32::MAX } else { 1 },
        transport: 1,
        address: format!("10.0.0.{client_id}:5000"),
        groups: vec![
            wire::GroupMembership { stream_id: 1, topic_id: 2, group_id: 5 },
            wire::GroupMembership { stream_id: 1, topic_id: 3, group_id: 6 },
        ],
    }
}

fn stats() -> wire::StatsReply {
    wire::StatsReply {
        process_id: 4242,
        cpu_usage: 12.5,
        total_cpu_usage: 40.25,
        memory_usage: 1 << 20,
        total_memory: 1 << 34,
        available_memory: 1 << 33,
        run_time: 3_600_000_000,
        start_time: 1_700_000_000_000_000,
        read_bytes: 10,
        written_bytes: 20,
        messages_size_bytes: 30,
        streams_count: 1,
        topics_count: 2,
        partitions_count: 3,
        segments_count: 4,
        messages_count: 5,
        clients_count: 6,
        consumer_groups_count: 7,
        hostname: "vireo-1".into(),
        os_name: "Linux".into(),
        os_version: "6.1".into(),
        kernel_version: "6.1.0".into(),
        iggy_server_version: "0.9.0-edge.5".into(),
        iggy_server_semver: 9 << 10, // 0.9.0
        cache_metrics: vec![
            wire::CacheMetric { stream_id: 1, topic_id: 2, partition_id: 0, hits: 9, misses: 1, hit_ratio: 0.9 },
            wire::CacheMetric { stream_id: 1, topic_id: 2, partition_id: 1, hits: 0, misses: 0, hit_ratio: 0.0 },
        ],
        threads_count: 8,
        free_disk_space: 1 << 35,
        total_disk_space: 1 << 36,
    }
}

fn option_descriptions() -> Vec<wire::OptionDescription> {
    vec![
        wire::OptionDescription {
            key: name("segment_size"),
            kind: 12,
            default_value: (1u64 << 30).to_le_bytes().to_vec(),
            description: "bytes per segment".into(),
        },
        wire::OptionDescription {
            key: name("enforce_fsync"),
            kind: 3,
            default_value: vec![0],
            description: String::new(),
        },
    ]
}

fn cluster_metadata() -> wire::ClusterMetadata {
    wire::ClusterMetadata {
        name: "vireo".into(),
        nodes: vec![wire::ClusterNode {
            name: "node-1".into(),
            ip: "127.0.0.1".into(),
            tcp_port: 8090,
            quic_port: 8080,
            http_port: 3000,
            websocket_port: 8092,
            role: 0,
            status: 0,
        }],
    }
}

/// Two stamped batches back to back, as a partition stores them.
fn stored_batches() -> Vec<u8> {
    let mut first = BatchBuilder::new().message(21, b"alpha", b"").message(22, b"beta", b"h").finish(1_000);
    vireo_batch::stamp(&mut first, 1, 40, 2_000).unwrap();
    let mut second = BatchBuilder::new().message(23, b"gamma", b"").finish(1_500);
    vireo_batch::stamp(&mut second, 1, 42, 2_500).unwrap();
    [first, second].concat()
}

fn poll_reply() -> wire::PollReply {
    wire::PollReply::new(1, 42, stored_batches()).unwrap()
}

/// What the SDK's TCP client does with a reply body under `operation` (`vsr.rs`,
/// `split_metadata_result`): a result-framed reply must lead with a section whose first result is
/// 0, and the payload after it is what the client code decodes.
fn sdk_split(operation: Operation, body: &[u8]) -> Result<Vec<u8>, u32> {
    let framed = operation.is_result_framed() || (operation == Operation::Register && !body.is_empty());
    if !framed {
        return Ok(body.to_vec());
    }
    match result_code(body) {
        Some(0) => Ok(body[result_section_len(body).expect("a result section the SDK can measure")..].to_vec()),
        Some(code) => Err(code),
        None => Err(u32::MAX),
    }
}

/// The SDK's wire decode of a whole reply body: it must succeed and use every byte.
fn sdk_decode<T: WireDecode>(what: &str, body: &[u8]) -> T {
    let (value, used) =
        T::decode(body).unwrap_or_else(|error| panic!("{what}: the SDK cannot decode Vireo's reply: {error}"));
    assert_eq!(used, body.len(), "{what}: the SDK reads {used} of Vireo's {} reply bytes", body.len());
    value
}

fn framed(payload: Vec<u8>) -> Vec<u8> {
    [wire::ResultSection::ok().encode(), payload].concat()
}

/// An options block as (key, value kind, value bytes), in order.
fn sdk_options(options: &WireOptions) -> Vec<(String, u8, Vec<u8>)> {
    options
        .iter()
        .map(|entry| (String::from_utf8(entry.key.to_vec()).unwrap(), entry.value_kind.0, entry.value.to_vec()))
        .collect()
}

fn vireo_options_as_sdk(options: &Options) -> Vec<(String, u8, Vec<u8>)> {
    let mut bytes = Vec::new();
    options.write_bare(&mut bytes);
    sdk_options(&WireOptions::from_slice(&bytes).expect("the SDK accepts Vireo's options"))
}

fn assert_stream_equal(what: &str, sdk: &responses::streams::StreamResponse, vireo: &wire::Stream) {
    assert_eq!(
        (sdk.id, sdk.created_at, sdk.topics_count, sdk.size_bytes, sdk.messages_count, sdk.name.as_str()),
        (vireo.id, vireo.created_at, vireo.topics_count, vireo.size, vireo.messages_count, vireo.name.as_str()),
        "{what}: stream fields"
    );
    assert_eq!(sdk_options(&sdk.options), vireo_options_as_sdk(&vireo.options), "{what}: stream options");
}

fn assert_topic_equal(what: &str, sdk: &responses::streams::TopicHeader, vireo: &wire::Topic) {
    assert_eq!(
        (
            sdk.id,
            sdk.created_at,
            sdk.partitions_count,
            sdk.message_expiry,
            sdk.compression_algorithm,
            sdk.max_topic_size,
            sdk.size_bytes,
            sdk.messages_count,
            sdk.name.as_str()
        ),
        (
            vireo.id,
            vireo.created_at,
            vireo.partitions_count,
            vireo.message_expiry,
            vireo.compression,
            vireo.max_topic_size,
            vireo.size,
            vireo.messages_count,
            vireo.name.as_str()
        ),
        "{what}: topic fields"
    );
    assert_eq!(sdk_options(&sdk.options), vireo_options_as_sdk(&vireo.options), "{what}: topic options");
    assert_eq!(
        sdk_options(&sdk.derived_options),
        vireo_options_as_sdk(&vireo.derived_options),
        "{what}: derived options"
    );
}

fn assert_permissions_equal(what: &str, sdk: &WirePermissions, vireo: &wire::Permissions) {
    let g = &vireo.global;
    let s = &sdk.global;
    assert_eq!(
        [
            s.manage_servers,
            s.read_servers,
            s.manage_users,
            s.read_users,
            s.manage_streams,
            s.read_streams,
            s.manage_topics,
            s.read_topics,
            s.poll_messages,
            s.send_messages
        ],
        [
            g.manage_servers,
            g.read_servers,
            g.manage_users,
            g.read_users,
            g.manage_streams,
            g.read_streams,
            g.manage_topics,
            g.read_topics,
            g.poll_messages,
            g.send_messages
        ],
        "{what}: global permissions"
    );
    let sdk_streams: Vec<_> = sdk
        .streams
        .iter()
        .map(|stream| {
            let topics: Vec<_> = stream
                .topics
                .iter()
                .map(|t| (t.topic_id, [t.manage_topic, t.read_topic, t.poll_messages, t.send_messages]))
                .collect();
            let flags = [
                stream.manage_stream,
                stream.read_stream,
                stream.manage_topics,
                stream.read_topics,
                stream.poll_messages,
                stream.send_messages,
            ];
            (stream.stream_id, flags, topics)
        })
        .collect();
    let vireo_streams: Vec<_> = vireo
        .streams
        .iter()
        .map(|(stream_id, stream)| {
            let topics: Vec<_> = stream
                .topics
                .iter()
                .map(|(topic_id, t)| (*topic_id, [t.manage_topic, t.read_topic, t.poll_messages, t.send_messages]))
                .collect();
            let flags = [
                stream.manage_stream,
                stream.read_stream,
                stream.manage_topics,
                stream.read_topics,
                stream.poll_messages,
                stream.send_messages,
            ];
            (*stream_id, flags, topics)
        })
        .collect();
    assert_eq!(sdk_streams, vireo_streams, "{what}: stream permissions");
}

fn assert_user_equal(what: &str, sdk: &responses::users::UserResponse, vireo: &wire::UserResponse) {
    assert_eq!(
        (sdk.id, sdk.created_at, sdk.status, sdk.username.as_str()),
        (vireo.id, vireo.created_at, vireo.status, vireo.username.as_str()),
        "{what}: user fields"
    );
    assert_eq!(sdk_options(&sdk.options), vireo_options_as_sdk(&vireo.options), "{what}: user options");
}

fn assert_group_head_equal(
    what: &str,
    sdk: &responses::consumer_groups::ConsumerGroupResponse,
    id: u32,
    partitions_count: u32,
    members_count: u32,
    name: &Name,
) {
    assert_eq!(
        (sdk.id, sdk.partitions_count, sdk.members_count, sdk.name.as_str()),
        (id, partitions_count, members_count, name.as_str()),
        "{what}: consumer group fields"
    );
}

fn assert_client_equal(what: &str, sdk: &responses::clients::ClientResponse, vireo: &wire::ClientInfo) {
    assert_eq!(
        (sdk.client_id, sdk.user_id, sdk.transport, sdk.address.as_str(), sdk.consumer_groups_count as usize),
        (vireo.client_id, vireo.user_id, vireo.transport, vireo.address.as_str(), vireo.groups.len()),
        "{what}: client fields"
    );
}

/// Vireo's reply bodies against the SDK's wire decoders.
#[test]
fn every_reply_vireo_encodes_the_sdk_wire_types_decode() {
    use responses::clients::{ClientDetailsResponse, GetClientsResponse};
    use responses::consumer_groups::{
        ConsumerGroupDetailsResponse, GetConsumerGroupsResponse, SyncConsumerGroupResponse,
    };
    use responses::consumer_offsets::ConsumerOffsetResponse;
    use responses::messages::{PollMessagesResponse, SendMessagesResponse};
    use responses::personal_access_tokens::{GetPersonalAccessTokensResponse, RawPersonalAccessTokenResponse};
    use responses::streams::{GetStreamResponse, GetStreamsResponse};
    use responses::system::{ClusterMetadataResponse, DescribeOptionsResponse, StatsResponse};
    use responses::topics::{GetTopicResponse, GetTopicsResponse};
    use responses::users::{GetUsersResponse, LoginRegisterResponse, UserDetailsResponse};

    // Result sections: a success the SDK strips, a rejection it surfaces, under every operation of
    // the metadata plane and store/delete consumer offset. delete_segments (138) is the one
    // metadata operation the SDK does not frame: a reply under it must carry errors in `status`.
    let rejected = wire::ResultSection { entries: vec![wire::ResultEntry { index: 0, result: 1009 }] }.encode();
    for code in (128u8..=149).chain([161, 162]) {
        let operation = *bytemuck::checked::try_from_bytes::<Operation>(&[code]).unwrap();
        assert_eq!(operation.is_result_framed(), code != 138, "{operation:?}: framing");
        if code == 138 {
            continue;
        }
        assert_eq!(sdk_split(operation, &framed(vec![1, 2, 3])), Ok(vec![1, 2, 3]), "{operation:?}: success");
        assert_eq!(sdk_split(operation, &wire::ResultSection::ok().encode()), Ok(vec![]), "{operation:?}: empty");
        assert_eq!(sdk_split(operation, &rejected), Err(1009), "{operation:?}: rejection");
    }

    // login_register / the token login (operation Register, framed).
    let login = wire::LoginReply {
        result: wire::ResultSection::ok(),
        user_id: 7,
        session: 42,
        server_protocol_version: IGGY_PROTOCOL_VERSION,
        server_version: name("0.9.0-edge.5"),
    };
    let payload = sdk_split(Operation::Register, &login.encode()).expect("login_register: result section");
    let sdk: LoginRegisterResponse = sdk_decode("login_register", &payload);
    assert_eq!(
        (sdk.user_id, sdk.session, sdk.server_protocol_version, sdk.server_version.as_str()),
        (7, 42, IGGY_PROTOCOL_VERSION, "0.9.0-edge.5"),
        "login_register: fields"
    );

    // get_me / get_client, get_clients.
    let info = client_info(3);
    let sdk: ClientDetailsResponse = sdk_decode("get_client", &info.encode());
    assert_client_equal("get_client", &sdk.client, &info);
    let groups: Vec<_> = sdk.consumer_groups.iter().map(|g| (g.stream_id, g.topic_id, g.group_id)).collect();
    let expected: Vec<_> = info.groups.iter().map(|g| (g.stream_id, g.topic_id, g.group_id)).collect();
    assert_eq!(groups, expected, "get_client: groups");
    let infos = [client_info(3), client_info(4)];
    let sdk: GetClientsResponse = sdk_decode("get_clients", &wire::ClientInfo::encode_list(&infos));
    assert_eq!(sdk.clients.len(), 2, "get_clients: count");
    for (sdk, vireo) in sdk.clients.iter().zip(&infos) {
        assert_client_equal("get_clients", sdk, vireo);
    }

    // get_user / create_user (framed), get_users.
    for (what, details) in [
        ("get_user", user_details()),
        ("get_user without permissions", wire::UserDetails { user: user_response(4, "bob"), permissions: None }),
    ] {
        let sdk: UserDetailsResponse = sdk_decode(what, &details.encode());
        assert_user_equal(what, &sdk.user, &details.user);
        match (&sdk.permissions, &details.permissions) {
            (Some(sdk), Some(vireo)) => assert_permissions_equal(what, sdk, vireo),
            (None, None) => {}
            other => panic!("{what}: permissions differ: {other:?}"),
        }
    }
    let payload = sdk_split(Operation::CreateUser, &framed(user_details().encode())).unwrap();
    let sdk: UserDetailsResponse = sdk_decode("create_user", &payload);
    assert_user_equal("create_user", &sdk.user, &user_details().user);
    let users = [user_response(1, "root"), user_response(2, "ann")];
    let sdk: GetUsersResponse = sdk_decode("get_users", &wire::UserResponse::encode_list(&users));
    assert_eq!(sdk.users.len(), 2, "get_users: count");
    for (sdk, vireo) in sdk.users.iter().zip(&users) {
        assert_user_equal("get_users", sdk, vireo);
    }

    // get_personal_access_tokens, create_personal_access_token (framed).
    let tokens = [
        wire::PersonalAccessTokenInfo { name: name("ci"), expiry_at: 0 },
        wire::PersonalAccessTokenInfo { name: name("deploy"), expiry_at: 1_800_000_000_000_000 },
    ];
    let sdk: GetPersonalAccessTokensResponse =
        sdk_decode("get_personal_access_tokens", &wire::PersonalAccessTokenInfo::encode_list(&tokens));
    let sdk: Vec<_> = sdk.tokens.iter().map(|t| (t.name.to_string(), t.expiry_at)).collect();
    let vireo: Vec<_> = tokens.iter().map(|t| (t.name.as_str().to_string(), t.expiry_at)).collect();
    assert_eq!(sdk, vireo, "get_personal_access_tokens: tokens");
    let created = wire::CreatedPersonalAccessToken { token: name("raw-token-value") };
    let payload = sdk_split(Operation::CreatePersonalAccessToken, &framed(created.encode())).unwrap();
    let sdk: RawPersonalAccessTokenResponse = sdk_decode("create_personal_access_token", &payload);
    assert_eq!(sdk.token.as_str(), "raw-token-value", "create_personal_access_token: token");

    // get_stats.
    let vireo = stats();
    let sdk: StatsResponse = sdk_decode("get_stats", &vireo.encode());
    assert_eq!(
        (
            sdk.process_id,
            sdk.cpu_usage,
            sdk.total_cpu_usage,
            sdk.memory_usage,
            sdk.total_memory,
            sdk.available_memory,
            sdk.run_time,
            sdk.start_time,
            sdk.read_bytes,
            sdk.written_bytes,
            sdk.messages_size_bytes,
        ),
        (
            vireo.process_id,
            vireo.cpu_usage,
            vireo.total_cpu_usage,
            vireo.memory_usage,
            vireo.total_memory,
            vireo.available_memory,
            vireo.run_time,
            vireo.start_time,
            vireo.read_bytes,
            vireo.written_bytes,
            vireo.messages_size_bytes,
        ),
        "get_stats: process fields"
    );
    assert_eq!(
        (
            sdk.streams_count,
            sdk.topics_count,
            sdk.partitions_count,
            sdk.segments_count,
            sdk.messages_count,
            sdk.clients_count,
            sdk.consumer_groups_count,
            sdk.threads_count,
            sdk.free_disk_space,
            sdk.total_disk_space,
        ),
        (
            vireo.streams_count,
            vireo.topics_count,
            vireo.partitions_count,
            vireo.segments_count,
            vireo.messages_count,
            vireo.clients_count,
            vireo.consumer_groups_count,
            vireo.threads_count,
            vireo.free_disk_space,
            vireo.total_disk_space,
        ),
        "get_stats: counts"
    );
    assert_eq!(
        [&sdk.hostname, &sdk.os_name, &sdk.os_version, &sdk.kernel_version, &sdk.iggy_server_version],
        [&vireo.hostname, &vireo.os_name, &vireo.os_version, &vireo.kernel_version, &vireo.iggy_server_version],
        "get_stats: strings"
    );
    assert_eq!(sdk.iggy_server_semver, Some(vireo.iggy_server_semver), "get_stats: semver");
    let sdk_metrics: Vec<_> = sdk
        .cache_metrics
        .iter()
        .map(|m| (m.stream_id, m.topic_id, m.partition_id, m.hits, m.misses, m.hit_ratio))
        .collect();
    let vireo_metrics: Vec<_> = vireo
        .cache_metrics
        .iter()
        .map(|m| (m.stream_id, m.topic_id, m.partition_id, m.hits, m.misses, m.hit_ratio))
        .collect();
    assert_eq!(sdk_metrics, vireo_metrics, "get_stats: cache metrics");

    // describe_options.
    let descriptions = option_descriptions();
    let sdk: DescribeOptionsResponse =
        sdk_decode("describe_options", &wire::OptionDescription::encode_list(&descriptions));
    let sdk: Vec<_> = sdk
        .entries
        .iter()
        .map(|e| (e.key.to_string(), e.kind, e.default_value.to_vec(), e.description.clone()))
        .collect();
    let vireo: Vec<_> = descriptions
        .iter()
        .map(|d| (d.key.as_str().to_string(), d.kind, d.default_value.clone(), d.description.clone()))
        .collect();
    assert_eq!(sdk, vireo, "describe_options: entries");

    // get_cluster_metadata.
    let cluster = cluster_metadata();
    let sdk: ClusterMetadataResponse = sdk_decode("get_cluster_metadata", &cluster.encode());
    let sdk_nodes: Vec<_> = sdk
        .nodes
        .iter()
        .map(|n| {
            (n.name.clone(), n.ip.clone(), n.tcp_port, n.quic_port, n.http_port, n.websocket_port, n.role, n.status)
        })
        .collect();
    let vireo_nodes: Vec<_> = cluster
        .nodes
        .iter()
        .map(|n| {
            (n.name.clone(), n.ip.clone(), n.tcp_port, n.quic_port, n.http_port, n.websocket_port, n.role, n.status)
        })
        .collect();
    assert_eq!((sdk.name, sdk_nodes), (cluster.name, vireo_nodes), "get_cluster_metadata: fields");

    // get_stream / create_stream (framed), get_streams.
    let details = stream_details();
    for (what, body) in [
        ("get_stream", details.encode()),
        ("create_stream", sdk_split(Operation::CreateStream, &framed(details.encode())).unwrap()),
    ] {
        let sdk: GetStreamResponse = sdk_decode(what, &body);
        assert_stream_equal(what, &sdk.stream, &details.stream);
        assert_eq!(sdk.topics.len(), details.topics.len(), "{what}: topics");
        for (sdk, vireo) in sdk.topics.iter().zip(&details.topics) {
            assert_topic_equal(what, sdk, vireo);
        }
    }
    let streams = [stream_head(1, 0), stream_head(2, 5)];
    let sdk: GetStreamsResponse = sdk_decode("get_streams", &wire::Stream::encode_list(&streams));
    assert_eq!(sdk.streams.len(), 2, "get_streams: count");
    for (sdk, vireo) in sdk.streams.iter().zip(&streams) {
        assert_stream_equal("get_streams", sdk, vireo);
    }

    // get_topic / create_topic (framed), get_topics.
    let details = topic_details();
    for (what, body) in [
        ("get_topic", details.encode()),
        ("create_topic", sdk_split(Operation::CreateTopic, &framed(details.encode())).unwrap()),
    ] {
        let sdk: GetTopicResponse = sdk_decode(what, &body);
        assert_topic_equal(what, &sdk.topic, &details.topic);
        let sdk: Vec<_> = sdk
            .partitions
            .iter()
            .map(|p| (p.id, p.created_at, p.segments_count, p.current_offset, p.size_bytes, p.messages_count))
            .collect();
        let vireo: Vec<_> = details
            .partitions
            .iter()
            .map(|p| (p.id, p.created_at, p.segments_count, p.current_offset, p.size, p.messages_count))
            .collect();
        assert_eq!(sdk, vireo, "{what}: partitions");
    }
    let topics = [topic_head(1, 1), topic_head(2, 3)];
    let sdk: GetTopicsResponse = sdk_decode("get_topics", &wire::Topic::encode_list(&topics));
    assert_eq!(sdk.topics.len(), 2, "get_topics: count");
    for (sdk, vireo) in sdk.topics.iter().zip(&topics) {
        assert_topic_equal("get_topics", sdk, vireo);
    }
    let sdk: GetTopicsResponse = sdk_decode("get_topics (none)", &wire::Topic::encode_list(&[]));
    assert!(sdk.topics.is_empty(), "get_topics (none): count");

    // get_consumer_group / create_consumer_group (framed), get_consumer_groups, sync.
    let group = consumer_group();
    for (what, body) in [
        ("get_consumer_group", group.encode()),
        ("create_consumer_group", sdk_split(Operation::CreateConsumerGroup, &framed(group.encode())).unwrap()),
    ] {
        let sdk: ConsumerGroupDetailsResponse = sdk_decode(what, &body);
        assert_group_head_equal(what, &sdk.group, group.id, group.partitions_count, 2, &group.name);
        let sdk: Vec<_> = sdk.members.iter().map(|m| (m.id, m.partitions_count, m.partitions.clone())).collect();
        let vireo: Vec<_> =
            group.members.iter().map(|m| (m.id, m.partitions.len() as u32, m.partitions.clone())).collect();
        assert_eq!(sdk, vireo, "{what}: members");
    }
    let groups =
        [consumer_group(), wire::ConsumerGroup { id: 6, partitions_count: 1, name: name("idle"), members: vec![] }];
    let sdk: GetConsumerGroupsResponse = sdk_decode("get_consumer_groups", &wire::ConsumerGroup::encode_list(&groups));
    assert_eq!(sdk.groups.len(), 2, "get_consumer_groups: count");
    for (sdk, vireo) in sdk.groups.iter().zip(&groups) {
        assert_group_head_equal(
            "get_consumer_groups",
            sdk,
            vireo.id,
            vireo.partitions_count,
            vireo.members.len() as u32,
            &vireo.name,
        );
    }
    let sync = wire::SyncConsumerGroupReply { generation: 9, partitions: vec![0, 2, 4] };
    let sdk: SyncConsumerGroupResponse = sdk_decode("sync_consumer_group", &sync.encode());
    assert_eq!((sdk.generation, sdk.partitions), (9, vec![0, 2, 4]), "sync_consumer_group: fields");

    // get_consumer_offset.
    let offset = wire::ConsumerOffsetReply { partition_id: 2, current_offset: 99, stored_offset: 50 };
    let sdk: ConsumerOffsetResponse = sdk_decode("get_consumer_offset", &offset.encode());
    assert_eq!((sdk.partition_id, sdk.current_offset, sdk.stored_offset), (2, 99, 50), "get_consumer_offset: fields");

    // send_messages (operation 160, not framed).
    let appended = wire::SendMessagesReply {
        appended: vec![wire::Appended { stream_id: 1, topic_id: 2, partition_id: 0, base_offset: 40 }],
    };
    let payload = sdk_split(Operation::SendMessages, &appended.encode()).unwrap();
    let sdk: SendMessagesResponse = sdk_decode("send_messages", &payload);
    let sdk: Vec<_> =
        sdk.confirmations.iter().map(|c| (c.stream_id, c.topic_id, c.partition_id, c.base_offset)).collect();
    assert_eq!(sdk, vec![(1, 2, 0, 40)], "send_messages: confirmations");

    // poll_messages: the prefix, then every message of every batch.
    let poll = poll_reply();
    let body = poll.encode();
    let sdk = PollMessagesResponse::decode(&body).expect("poll_messages: the SDK decodes the prefix");
    assert_eq!(
        (sdk.header.partition_id, sdk.header.current_offset, sdk.header.messages_count),
        (1, 42, 3),
        "poll_messages: prefix"
    );
    let sdk: Vec<_> = sdk
        .messages
        .map(|message| message.expect("poll_messages: the SDK reads every message"))
        .map(|m| (m.id, m.offset, m.payload.to_vec(), m.user_headers.to_vec(), m.timestamp, m.origin_timestamp))
        .collect();
    let vireo = vireo_messages(poll.batches());
    assert_eq!(sdk, vireo, "poll_messages: messages");
}

/// A message as a poll shows it: id, offset, payload, user headers, timestamp (the batch's
/// `base_timestamp`), origin timestamp (the batch's `origin_timestamp` plus the delta).
type PolledMessage = (u128, u64, Vec<u8>, Vec<u8>, u64, u64);

/// Every message of `batches`, read with Vireo's batch code.
fn vireo_messages(batches: &[u8]) -> Vec<PolledMessage> {
    let mut messages = Vec::new();
    let mut at = 0;
    while at < batches.len() {
        let header = vireo_batch::BatchHeader::decode(&batches[at..]).unwrap();
        let bytes = &batches[at..at + header.batch_length as usize];
        let mut frame_at = vireo_batch::BATCH_HEADER_SIZE;
        for message in vireo_batch::messages(bytes).unwrap() {
            let delta = u32::from_le_bytes(bytes[frame_at + 28..frame_at + 32].try_into().unwrap()) as u64;
            messages.push((
                message.id,
                message.offset,
                message.payload.to_vec(),
                message.user_headers.to_vec(),
                header.base_timestamp,
                header.origin_timestamp + delta,
            ));
            frame_at += vireo_batch::MESSAGE_FRAME_SIZE + message.payload.len() + message.user_headers.len();
        }
        at += header.batch_length as usize;
    }
    messages
}

/// Vireo's reply bodies through the SDK's client methods, down to domain values.
#[test]
fn every_reply_vireo_encodes_the_sdk_client_reads() {
    use iggy_common::Identifier;
    let server = FakeServer::default();
    let s = &server;
    let stream = Identifier::numeric(1).unwrap();
    let topic = Identifier::numeric(2).unwrap();
    let group = Identifier::numeric(5).unwrap();
    // Framed replies reach the client code as the SDK's transport leaves them.
    let answer_framed = |code: u32, operation: Operation, payload: Vec<u8>| {
        s.answer(code, sdk_split(operation, &framed(payload)).unwrap());
    };
    s.answer(LOGIN_REGISTER_CODE, login_reply_payload());
    s.answer(LOGIN_REGISTER_WITH_PAT_CODE, login_reply_payload());
    s.answer(GET_ME_CODE, client_info(3).encode());
    s.answer(GET_CLIENT_CODE, client_info(4).encode());
    s.answer(GET_CLIENTS_CODE, wire::ClientInfo::encode_list(&[client_info(3), client_info(4)]));
    s.answer(GET_USER_CODE, user_details().encode());
    s.answer(GET_USERS_CODE, wire::UserResponse::encode_list(&[user_response(1, "root"), user_response(2, "ann")]));
    answer_framed(CREATE_USER_CODE, Operation::CreateUser, user_details().encode());
    s.answer(
        GET_PERSONAL_ACCESS_TOKENS_CODE,
        wire::PersonalAccessTokenInfo::encode_list(&[
            wire::PersonalAccessTokenInfo { name: name("ci"), expiry_at: 0 },
            wire::PersonalAccessTokenInfo { name: name("deploy"), expiry_at: 1_800_000_000_000_000 },
        ]),
    );
    answer_framed(
        CREATE_PERSONAL_ACCESS_TOKEN_CODE,
        Operation::CreatePersonalAccessToken,
        wire::CreatedPersonalAccessToken { token: name("raw-token-value") }.encode(),
    );
    s.answer(GET_STATS_CODE, stats().encode());
    s.answer(DESCRIBE_OPTIONS_CODE, wire::OptionDescription::encode_list(&option_descriptions()));
    s.answer(GET_CLUSTER_METADATA_CODE, cluster_metadata().encode());
    s.answer(GET_STREAM_CODE, stream_details().encode());
    s.answer(GET_STREAMS_CODE, wire::Stream::encode_list(&[stream_head(1, 0), stream_head(2, 5)]));
    answer_framed(CREATE_STREAM_CODE, Operation::CreateStream, stream_details().encode());
    s.answer(GET_TOPIC_CODE, topic_details().encode());
    s.answer(GET_TOPICS_CODE, wire::Topic::encode_list(&[topic_head(1, 1), topic_head(2, 3)]));
    answer_framed(CREATE_TOPIC_CODE, Operation::CreateTopic, topic_details().encode());
    s.answer(GET_CONSUMER_GROUP_CODE, consumer_group().encode());
    s.answer(GET_CONSUMER_GROUPS_CODE, wire::ConsumerGroup::encode_list(&[consumer_group()]));
    answer_framed(CREATE_CONSUMER_GROUP_CODE, Operation::CreateConsumerGroup, consumer_group().encode());
    s.answer(SYNC_CONSUMER_GROUP_CODE, wire::SyncConsumerGroupReply { generation: 3, partitions: vec![1] }.encode());
    s.answer(
        GET_CONSUMER_OFFSET_CODE,
        wire::ConsumerOffsetReply { partition_id: 2, current_offset: 99, stored_offset: 50 }.encode(),
    );
    s.answer(
        SEND_MESSAGES_CODE,
        wire::SendMessagesReply {
            appended: vec![wire::Appended { stream_id: 1, topic_id: 2, partition_id: 0, base_offset: 40 }],
        }
        .encode(),
    );
    s.answer(POLL_MESSAGES_CODE, poll_reply().encode());

    block_on(async {
        let identity = s.login_user("iggy", "iggy-password").await.expect("login_register");
        assert_eq!(identity.user_id, 7, "login_register: user id");
        let identity = s.login_with_personal_access_token("a-raw-token").await.expect("token login");
        assert_eq!(identity.user_id, 7, "token login: user id");

        let me = s.get_me().await.expect("get_me");
        assert_eq!((me.client_id, me.user_id, me.consumer_groups.len()), (3, Some(1), 2), "get_me: fields");
        let client = s.get_client(4).await.expect("get_client").expect("get_client: present");
        assert_eq!(
            (client.client_id, client.user_id, client.address.as_str()),
            (4, None, "10.0.0.4:5000"),
            "get_client"
        );
        let clients = s.get_clients().await.expect("get_clients");
        let clients: Vec<_> = clients.iter().map(|c| (c.client_id, c.consumer_groups_count)).collect();
        assert_eq!(clients, vec![(3, 2), (4, 2)], "get_clients: clients");

        let user = s.get_user(&Identifier::numeric(3).unwrap()).await.expect("get_user").expect("get_user: present");
        assert_eq!((user.id, user.username.as_str(), user.status), (3, "ann", UserStatus::Inactive), "get_user");
        let permissions = user.permissions.expect("get_user: permissions");
        assert!(permissions.global.read_servers && permissions.global.send_messages, "get_user: global permissions");
        let streams = permissions.streams.expect("get_user: stream permissions");
        assert_eq!(streams.keys().copied().collect::<Vec<_>>(), vec![2, 3], "get_user: streams");
        assert_eq!(
            streams[&3].topics.as_ref().map(|topics| topics.keys().copied().collect::<Vec<_>>()),
            Some(vec![1, 8]),
            "get_user: topics"
        );
        let users = s.get_users().await.expect("get_users");
        assert_eq!(users.iter().map(|u| u.username.as_str()).collect::<Vec<_>>(), vec!["root", "ann"], "get_users");
        let created = s.create_user("ann", "secret-pw", UserStatus::Active, None).await.expect("create_user");
        assert_eq!(created.id, 3, "create_user: id");

        let tokens = s.get_personal_access_tokens().await.expect("get_personal_access_tokens");
        let tokens: Vec<_> = tokens.iter().map(|t| (t.name.as_str(), t.expiry_at.is_some())).collect();
        assert_eq!(tokens, vec![("ci", false), ("deploy", true)], "get_personal_access_tokens");
        let token = s.create_personal_access_token("ci", IggyExpiry::NeverExpire).await.expect("create token");
        assert_eq!(token.token, "raw-token-value", "create_personal_access_token");

        let stats = s.get_stats().await.expect("get_stats");
        assert_eq!(
            (stats.process_id, stats.hostname.as_str(), stats.cache_metrics.len()),
            (4242, "vireo-1", 2),
            "get_stats"
        );
        let options = s.describe_options(OptionsScope::Topic).await.expect("describe_options");
        assert_eq!(options.iter().map(|o| o.key.as_str()).collect::<Vec<_>>(), vec!["segment_size", "enforce_fsync"]);
        let cluster = s.get_cluster_metadata().await.expect("get_cluster_metadata");
        assert_eq!((cluster.name.as_str(), cluster.nodes.len()), ("vireo", 1), "get_cluster_metadata");

        let details = s.get_stream(&stream).await.expect("get_stream").expect("get_stream: present");
        assert_eq!((details.id, details.topics.len(), details.name.as_str()), (1, 2, "stream-1"), "get_stream");
        let streams = s.get_streams().await.expect("get_streams");
        assert_eq!(streams.iter().map(|s| s.id).collect::<Vec<_>>(), vec![1, 2], "get_streams");
        let created = s.create_stream("stream-1").await.expect("create_stream");
        assert_eq!(created.topics_count, 2, "create_stream");

        let details = s.get_topic(&stream, &topic).await.expect("get_topic").expect("get_topic: present");
        assert_eq!(
            (details.id, details.partitions.len(), details.compression_algorithm),
            (2, 3, CompressionAlgorithm::Gzip),
            "get_topic"
        );
        let topics = s.get_topics(&stream).await.expect("get_topics");
        assert_eq!(topics.iter().map(|t| t.partitions_count).collect::<Vec<_>>(), vec![1, 3], "get_topics");
        let created = s.create_topic(&stream, "topic-2", &TopicCreateOptions::default()).await.expect("create_topic");
        assert_eq!(created.partitions_count, 3, "create_topic");

        let details = s.get_consumer_group(&stream, &topic, &group).await.expect("get_cg").expect("present");
        assert_eq!((details.id, details.members.len()), (5, 2), "get_consumer_group");
        let groups = s.get_consumer_groups(&stream, &topic).await.expect("get_consumer_groups");
        assert_eq!(groups.iter().map(|g| (g.id, g.members_count)).collect::<Vec<_>>(), vec![(5, 2)]);
        let created = s.create_consumer_group(&stream, &topic, "readers").await.expect("create_consumer_group");
        assert_eq!(created.members_count, 2, "create_consumer_group");

        let offset = s
            .get_consumer_offset(&Consumer::new(Identifier::numeric(1).unwrap()), &stream, &topic, Some(2))
            .await
            .expect("get_consumer_offset")
            .expect("get_consumer_offset: present");
        assert_eq!((offset.current_offset, offset.stored_offset), (99, 50), "get_consumer_offset");

        let mut messages = vec![IggyMessage::from_str("hello").unwrap()];
        let sent = s.send_messages(&stream, &topic, &Partitioning::partition_id(0), &mut messages).await;
        let sent = sent.expect("send_messages");
        assert_eq!(sent.confirmations.len(), 1, "send_messages: confirmations");

        let polled = s
            .poll_messages(
                &stream,
                &topic,
                Some(1),
                &Consumer::new(Identifier::numeric(1).unwrap()),
                &PollingStrategy::offset(40),
                10,
                false,
            )
            .await
            .expect("poll_messages");
        let offsets: Vec<_> = polled.messages.iter().map(|m| m.header.offset).collect();
        assert_eq!(offsets, vec![40, 41, 42], "poll_messages: offsets");
        assert_eq!(polled.messages[1].payload.as_ref(), b"beta", "poll_messages: payload");
        let polled = s
            .poll_messages(&stream, &topic, None, &Consumer::group(group.clone()), &PollingStrategy::next(), 10, true)
            .await
            .expect("poll_messages as a group");
        assert_eq!(polled.messages.len(), 3, "poll_messages as a group");
    });
}

// ---------------------------------------------------------------------------------------------
// Headers.

/// The request header the SDK builds for a body (`iggy` `vsr.rs`, `encode_request_header`).
fn sdk_request_header(code: u32, body: &[u8], request: u64, session: u64) -> RequestHeader {
    let operation = match code {
        LOGIN_REGISTER_CODE | LOGIN_REGISTER_WITH_PAT_CODE => Operation::Register,
        LOGOUT_USER_CODE => Operation::Logout,
        _ => Operation::from_command_code(code).unwrap_or(Operation::NonReplicated),
    };
    let request_checksum = if operation.is_partition() || operation == Operation::NonReplicated {
        0
    } else {
        u128::from(iggy_common::calculate_checksum(body))
    };
    let mut reserved = [0; 60];
    if operation == Operation::NonReplicated {
        reserved[0..4].copy_from_slice(&code.to_le_bytes());
    }
    RequestHeader {
        command: Command::Request,
        operation,
        size: (HEADER_SIZE + body.len()) as u32,
        client: 0x5eed_0000_0000_0000_0000_0000_0000_0001,
        request,
        session,
        request_checksum,
        timestamp: 0,
        reserved,
        ..Default::default()
    }
}

#[test]
fn request_headers_the_sdk_builds_decode_and_vireo_reply_headers_read_back_in_the_sdk() {
    for (what, code, body) in sdk_wire_requests() {
        let (request, session) =
            if code == LOGIN_REGISTER_CODE || code == LOGIN_REGISTER_WITH_PAT_CODE { (0, 0) } else { (3, 99) };
        let sdk = sdk_request_header(code, &body, request, session);
        let bytes = bytemuck::bytes_of(&sdk);
        let frame = [bytes, &body[..]].concat();
        let header =
            Header::decode(&frame).unwrap_or_else(|error| panic!("{what}: Vireo refuses the SDK's header: {error}"));
        assert_eq!(header.command, header::Command::Request, "{what}: command");
        assert_eq!(header.size as usize, frame.len(), "{what}: size");
        assert_eq!(
            (header.client, header.parent, header.timestamp, header.request, header.operation, header.session),
            (sdk.client, sdk.request_checksum, 0, request, sdk.operation as u8, session),
            "{what}: request fields (request_checksum is Vireo's parent)"
        );
        assert_eq!((header.user_id, header.group, header.origin), (0, 0, None), "{what}: zero fields");
        let expected_code = if sdk.operation == Operation::NonReplicated { code } else { 0 };
        assert_eq!(header.command_code, expected_code, "{what}: command code at 196");
        assert_eq!(header.encode()[..], *bytes, "{what}: Vireo re-encodes the SDK's header to other bytes");
    }

    // A reply as Vireo sends it to a client, read the way the SDK's transport reads it.
    for (what, operation, status) in [
        ("read reply", Operation::NonReplicated, 0u32),
        ("metadata reply", Operation::CreateStream, 0),
        ("register reply", Operation::Register, 0),
        ("send_messages reply", Operation::SendMessages, 0),
        ("denied reply", Operation::DeleteUser, 41),
    ] {
        let mut reply = Header::new(header::Command::Reply, 0, 0);
        reply.client = 0x5eed;
        reply.request = 3;
        reply.op = 17;
        reply.commit = 17;
        reply.operation = operation as u8;
        reply.status = status;
        reply.size = (HEADER_SIZE + 4) as u32;
        let bytes = reply.encode();
        let sdk: ReplyHeader = bytemuck::checked::try_pod_read_unaligned(&bytes)
            .unwrap_or_else(|error| panic!("{what}: the SDK cannot read Vireo's reply header: {error:?}"));
        assert_eq!(sdk.command, Command::Reply, "{what}: command");
        assert_eq!(
            (sdk.size, sdk.client, sdk.request, sdk.op, sdk.commit, sdk.operation, sdk.status),
            (reply.size, reply.client, 3, 17, 17, operation, status),
            "{what}: reply fields"
        );
    }

    // An eviction (a refused login), read the way the SDK reads it.
    let mut eviction = Header::new(header::Command::Eviction, 0, 0);
    eviction.client = 0x5eed;
    eviction.status = IGGY_PROTOCOL_VERSION;
    eviction.count = IGGY_PROTOCOL_VERSION;
    eviction.reason = EvictionReason::InvalidCredentials as u8;
    let bytes = eviction.encode();
    let sdk: EvictionHeader =
        bytemuck::checked::try_pod_read_unaligned(&bytes).expect("eviction: the SDK reads Vireo's eviction header");
    assert_eq!(
        (sdk.command, sdk.client, sdk.server_protocol_version, sdk.server_protocol_version_min, sdk.reason),
        (Command::Eviction, 0x5eed, IGGY_PROTOCOL_VERSION, IGGY_PROTOCOL_VERSION, EvictionReason::InvalidCredentials),
        "eviction: fields"
    );
}

// ---------------------------------------------------------------------------------------------
// Batches.

#[test]
fn batches_vireo_stamps_pass_the_sdk_verifying_decoder_and_the_sdk_s_pass_vireo_s() {
    // Vireo's stamp, the SDK's verifying decode (batch checksum and every message checksum).
    for (what, mut batch) in [
        ("one message", BatchBuilder::new().message(1, b"a", b"").finish(0)),
        (
            "three messages with headers",
            BatchBuilder::new().message(1, b"first", b"hh").message(2, b"", b"").message(3, &[7; 300], b"x").finish(5),
        ),
    ] {
        let stamped = vireo_batch::stamp(&mut batch, 3, 1_000, 1_700_000_000_000_000).unwrap().header;
        let sdk = decode_batch_slice(&batch)
            .unwrap_or_else(|error| panic!("{what}: the SDK's verifying decoder refuses Vireo's stamp: {error}"));
        assert_eq!(
            (sdk.header.partition_id, sdk.header.base_offset, sdk.header.base_timestamp, sdk.header.batch_checksum),
            (3, 1_000, 1_700_000_000_000_000, stamped.batch_checksum),
            "{what}: header"
        );
        let ids: Vec<_> = sdk.iter().map(|message| (message.header.id, message.header.offset_delta)).collect();
        assert_eq!(ids.len() as u32, stamped.message_count, "{what}: messages");
        assert!(ids.iter().enumerate().all(|(index, (_, delta))| *delta == index as u32), "{what}: offset deltas");

        // A slice of a stored batch is stamped anew and must verify too.
        if let Some(sliced) = vireo_batch::slice(&batch, 1_001, 1_003).unwrap() {
            decode_batch_slice(&sliced).unwrap_or_else(|error| panic!("{what}: the SDK refuses a slice: {error}"));
        }
    }

    // The SDK's send_messages body: Vireo takes its batch, and its checksums are Vireo's too.
    for partitioning in
        [WirePartitioning::PartitionId(1), WirePartitioning::Balanced, WirePartitioning::MessagesKey(b"k".to_vec())]
    {
        let what = format!("send_messages {partitioning:?}");
        let body = sdk_batch_body(&partitioning);
        let Ok(ClientRequest::SendMessages(send)) = ClientRequest::decode(command::SEND_MESSAGES, &body) else {
            panic!("{what}: Vireo cannot decode the SDK's body");
        };
        assert_eq!(send.message_count(), 3, "{what}: message count");
        vireo_batch::validate(send.batch())
            .unwrap_or_else(|error| panic!("{what}: Vireo's validate refuses the SDK's checksums: {error}"));
        let mut batch = send.into_batch();
        vireo_batch::stamp(&mut batch, 1, 7, 1_700_000_000_000_000).unwrap();
        let sdk = decode_batch_slice(&batch).unwrap_or_else(|error| panic!("{what}: restamped: {error}"));
        let payloads: Vec<_> = sdk.iter().map(|message| message.payload.to_vec()).collect();
        assert_eq!(payloads, vec![b"first".to_vec(), b"second".to_vec(), b"x".to_vec()], "{what}: payloads");
        // The origin timestamp is the earliest message's; deltas are after it.
        let deltas: Vec<_> = sdk.iter().map(|message| message.header.timestamp_delta).collect();
        assert_eq!((sdk.header.origin_timestamp, deltas), (1_000_000, vec![0, 250, 100]), "{what}: timestamps");
    }

    // A frame with its reserved bytes set: the SDK refuses it, and so does Vireo at admission.
    let mut batch = BatchBuilder::new().message(1, b"a", b"").finish(0);
    batch[vireo_batch::BATCH_HEADER_SIZE + 40] = 1;
    assert!(decode_batch_slice(&batch).is_err(), "reserved frame bytes: the SDK accepts them");
    assert_eq!(
        vireo_batch::check_client_batch(&batch),
        Err(vireo_batch::BatchError::FrameReserved(0)),
        "reserved frame bytes: Vireo accepts them"
    );
}

#[test]
fn the_protocol_codes_are_the_sdk_s() {
    // The codes PROTOCOL.md names are the SDK's, and map to the operations PROTOCOL.md names.
    let operations: [(u32, u8); 25] = [
        (202, 128),
        (204, 129),
        (203, 130),
        (205, 131),
        (302, 132),
        (304, 133),
        (303, 134),
        (305, 135),
        (402, 136),
        (403, 137),
        (503, 138),
        (602, 139),
        (603, 140),
        (33, 141),
        (35, 142),
        (34, 143),
        (37, 144),
        (36, 145),
        (42, 146),
        (43, 147),
        (604, 148),
        (605, 149),
        (101, 160),
        (121, 161),
        (122, 162),
    ];
    for (code, operation) in operations {
        assert_eq!(
            Operation::from_command_code(code).map(|operation| operation as u8),
            Some(operation),
            "code {code}: operation"
        );
    }
    for code in PROTOCOL_CODES {
        assert!(iggy_binary_protocol::dispatch::lookup_command(code).is_some(), "code {code}: not an SDK command");
    }
}
