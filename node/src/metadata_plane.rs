//! `MetadataMachine`: the metadata state machine as the metadata VSR group replicates it. It
//! decodes each committed request's `PROTOCOL.md` body into a `MetadataCommand` (or, for the
//! commands that carry secrets, the command the admitting node made: `internal_body`), applies it
//! for the user the node stamped in the request, and answers with a result section (`PROTOCOL.md`
//! "Reply") followed by what the SDK decodes (`encode_reply`).
//!
//! A request that does not decode, or that the state machine denies, changes nothing and is
//! answered with a one-entry result section holding the error code.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use vireo_io::Namespace;
use vireo_protocol::wire::{self, ClientRequest, ResultEntry, ResultSection};
use vireo_protocol::{Header, StateMachine};

use crate::metadata::{
    hash_password, Identifier, Metadata, MetadataCommand, MetadataLimits, MetadataResult, PasswordCost, TopicOptions,
    TopicUpdate, UserStatus,
};
use crate::partition_figures::NodeFigures;
use crate::shard::{MetadataPlane, PartitionGroup};
use crate::wire_view;

/// The root user's password at first boot (Iggy's default; change it after the first login).
pub const ROOT_PASSWORD_DEFAULT: &str = "iggy";
/// The genesis hash must be the same on every replica, so its salt is fixed; it protects only
/// the public default password, which a ChangePassword replaces with a randomly salted hash.
const ROOT_GENESIS_SALT: [u8; 16] = *b"vireo-genesis-01";

/// Whether the root user still has the genesis credentials (`iggy` with its default password):
/// what a server changes at first boot unless told to keep them.
pub fn root_has_genesis_credentials(metadata: &Metadata) -> bool {
    let genesis = hash_password(ROOT_PASSWORD_DEFAULT, ROOT_GENESIS_SALT, PasswordCost::Test);
    metadata
        .user(crate::metadata::ROOT_USER_ID)
        .is_some_and(|root| root.username == crate::metadata::ROOT_USERNAME && root.password_hash == genesis)
}

/// Request operations of the metadata plane (`PROTOCOL.md`, request operation 128..149), and
/// the command code each one's body is laid out as.
pub const OPERATIONS: [(u8, u32); 22] = [
    (128, wire::command::CREATE_STREAM),
    (129, wire::command::UPDATE_STREAM),
    (130, wire::command::DELETE_STREAM),
    (131, wire::command::PURGE_STREAM),
    (132, wire::command::CREATE_TOPIC),
    (133, wire::command::UPDATE_TOPIC),
    (134, wire::command::DELETE_TOPIC),
    (135, wire::command::PURGE_TOPIC),
    (136, wire::command::CREATE_PARTITIONS),
    (137, wire::command::DELETE_PARTITIONS),
    (138, wire::command::DELETE_SEGMENTS),
    (139, wire::command::CREATE_CONSUMER_GROUP),
    (140, wire::command::DELETE_CONSUMER_GROUP),
    (141, wire::command::CREATE_USER),
    (142, wire::command::UPDATE_USER),
    (143, wire::command::DELETE_USER),
    (144, wire::command::CHANGE_PASSWORD),
    (145, wire::command::UPDATE_PERMISSIONS),
    (146, wire::command::CREATE_PERSONAL_ACCESS_TOKEN),
    (147, wire::command::DELETE_PERSONAL_ACCESS_TOKEN),
    (148, wire::command::JOIN_CONSUMER_GROUP),
    (149, wire::command::LEAVE_CONSUMER_GROUP),
];

/// Operations whose client body carries a secret (a password, or asks for a token): the node
/// that admits them replaces the body with the `MetadataCommand` it made (`internal_body`), with
/// the password hashed or the token's hash, so that no secret reaches the log.
pub const OPERATIONS_WITH_SECRETS: [u8; 3] = [141, 144, 146];

/// The operation a metadata command code travels as.
pub fn operation_of(command_code: u32) -> Option<u8> {
    OPERATIONS.iter().find(|(_, code)| *code == command_code).map(|(operation, _)| *operation)
}

/// The operation a node sends, in a closed connection's session, to take its client out of every
/// consumer group (`MetadataCommand::EndSession`); no client may send it.
pub const OPERATION_END_SESSION: u8 = 150;

/// The command code a metadata operation's body is laid out as.
pub fn command_code_of(operation: u8) -> Option<u32> {
    OPERATIONS.iter().find(|(op, _)| *op == operation).map(|(_, code)| *code)
}

/// The body a node sends for an operation of `OPERATIONS_WITH_SECRETS`.
pub fn internal_body(command: &MetadataCommand) -> Vec<u8> {
    bincode::serde::encode_to_vec(command, bincode::config::standard()).expect("commands always encode")
}

/// The topics a purge reply names (`encode_reply`) as (stream, topic, partitions count), or
/// `None` for a body that is not one. A stream's topics are few (`MetadataLimits`), its
/// partitions possibly many: the node walks them without listing them.
pub fn purged_topics(payload: &[u8]) -> Option<Vec<(u32, u32, u32)>> {
    let count = u32::from_le_bytes(payload.get(..4)?.try_into().ok()?) as usize;
    if payload.len() != 4 + count.checked_mul(12)? {
        return None;
    }
    let mut topics = Vec::with_capacity(count);
    for entry in payload[4..].chunks_exact(12) {
        let value = |at: usize| u32::from_le_bytes(entry[at..at + 4].try_into().expect("4 bytes"));
        let (stream, topic, partitions) = (value(0), value(4), value(8));
        if stream > Namespace::STREAM_MAX || topic > Namespace::TOPIC_MAX || partitions > Namespace::PARTITION_MAX + 1 {
            return None;
        }
        topics.push((stream, topic, partitions));
    }
    Some(topics)
}

/// What a login's register carries to the metadata group instead of the credentials: which
/// credential the admitting node verified, so that the metadata group, applying the register,
/// refuses it if that credential changed or went meanwhile (a password changed, a token deleted
/// or expired, the user deleted or deactivated): a revoked credential never opens a session,
/// however far behind the admitting node was.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum LoginProof {
    /// The user's password hash (PHC string) the password was verified against.
    Password { user_id: u32, password_hash: String },
    /// The hash of the token the login presented.
    Token { user_id: u32, token_hash: u128 },
}

impl LoginProof {
    pub fn encode(&self) -> Vec<u8> {
        bincode::serde::encode_to_vec(self, bincode::config::standard()).expect("proofs always encode")
    }

    pub fn decode(body: &[u8]) -> Option<LoginProof> {
        let (proof, read) = bincode::serde::decode_from_slice(body, bincode::config::standard()).ok()?;
        (read == body.len()).then_some(proof)
    }
}

/// Iggy's codes for a login refused as it applies.
const STATUS_INVALID_CREDENTIALS: u32 = 42;
const STATUS_USER_INACTIVE: u32 = 47;
const STATUS_INVALID_TOKEN: u32 = 53;

/// Result code for a body that does not decode (Iggy's "invalid command").
pub const ERROR_INVALID_COMMAND: u32 = 3;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MetadataMachine {
    metadata: Metadata,
}

impl MetadataMachine {
    pub fn metadata(&self) -> &Metadata {
        &self.metadata
    }

    fn command(request: &Header, body: &[u8]) -> Result<MetadataCommand, u32> {
        if request.operation == OPERATION_END_SESSION {
            return if body.is_empty() {
                Ok(MetadataCommand::EndSession { member: request.client })
            } else {
                Err(ERROR_INVALID_COMMAND)
            };
        }
        if OPERATIONS_WITH_SECRETS.contains(&request.operation) {
            let (command, read): (MetadataCommand, usize) =
                bincode::serde::decode_from_slice(body, bincode::config::standard())
                    .map_err(|_| ERROR_INVALID_COMMAND)?;
            let expected = match command {
                MetadataCommand::CreateUser { .. } => 141,
                MetadataCommand::ChangePassword { .. } => 144,
                MetadataCommand::CreatePersonalAccessToken { .. } => 146,
                _ => 0,
            };
            if read != body.len() || expected != request.operation {
                return Err(ERROR_INVALID_COMMAND);
            }
            return Ok(command);
        }
        let code = command_code_of(request.operation).ok_or(ERROR_INVALID_COMMAND)?;
        let decoded = ClientRequest::decode(code, body).map_err(|_| ERROR_INVALID_COMMAND)?;
        let id = |identifier: wire::Identifier| match identifier {
            wire::Identifier::Numeric(id) => Identifier::Numeric(id),
            wire::Identifier::Name(name) => Identifier::Name(name.as_str().to_owned()),
        };
        let status = |code: u8| match code {
            1 => Ok(UserStatus::Active),
            2 => Ok(UserStatus::Inactive),
            _ => Err(ERROR_INVALID_COMMAND),
        };
        Ok(match decoded {
            ClientRequest::CreateStream { name, .. } => {
                MetadataCommand::CreateStream { name: name.as_str().to_owned() }
            }
            ClientRequest::UpdateStream { stream, name, .. } => {
                MetadataCommand::UpdateStream { stream: id(stream), name: name.as_str().to_owned() }
            }
            ClientRequest::DeleteStream { stream } => MetadataCommand::DeleteStream { stream: id(stream) },
            ClientRequest::PurgeStream { stream } => MetadataCommand::PurgeStream { stream: id(stream) },
            ClientRequest::CreateTopic { stream, partitions_count, name, options } => MetadataCommand::CreateTopic {
                stream: id(stream),
                name: name.as_str().to_owned(),
                partitions_count,
                options: topic_options(&options)?,
            },
            ClientRequest::UpdateTopic { stream, topic, name, options } => MetadataCommand::UpdateTopic {
                stream: id(stream),
                topic: id(topic),
                name: name.as_str().to_owned(),
                update: topic_update(&options)?,
            },
            ClientRequest::DeleteTopic { stream, topic } => {
                MetadataCommand::DeleteTopic { stream: id(stream), topic: id(topic) }
            }
            ClientRequest::PurgeTopic { stream, topic } => {
                MetadataCommand::PurgeTopic { stream: id(stream), topic: id(topic) }
            }
            ClientRequest::CreatePartitions { stream, topic, count } => {
                MetadataCommand::CreatePartitions { stream: id(stream), topic: id(topic), count }
            }
            ClientRequest::DeletePartitions { stream, topic, count } => {
                MetadataCommand::DeletePartitions { stream: id(stream), topic: id(topic), count }
            }
            ClientRequest::DeleteSegments { stream, topic, partition_id, segments_count } => {
                MetadataCommand::DeleteSegments {
                    stream: id(stream),
                    topic: id(topic),
                    partition: partition_id,
                    count: segments_count,
                }
            }
            ClientRequest::CreateConsumerGroup { stream, topic, name } => MetadataCommand::CreateConsumerGroup {
                stream: id(stream),
                topic: id(topic),
                name: name.as_str().to_owned(),
            },
            ClientRequest::DeleteConsumerGroup { stream, topic, group } => {
                MetadataCommand::DeleteConsumerGroup { stream: id(stream), topic: id(topic), group: id(group) }
            }
            ClientRequest::UpdateUser { user, username, status: new_status, .. } => MetadataCommand::UpdateUser {
                user: id(user),
                username: username.map(|name| name.as_str().to_owned()),
                status: new_status.map(status).transpose()?,
            },
            ClientRequest::DeleteUser { user } => MetadataCommand::DeleteUser { user: id(user) },
            ClientRequest::UpdatePermissions { user, permissions } => MetadataCommand::UpdatePermissions {
                user: id(user),
                permissions: permissions.as_ref().map(wire_view::permissions_from_wire),
            },
            ClientRequest::DeletePersonalAccessToken { name } => {
                MetadataCommand::DeletePersonalAccessToken { name: name.as_str().to_owned() }
            }
            ClientRequest::JoinConsumerGroup { stream, topic, group } => MetadataCommand::JoinConsumerGroup {
                stream: id(stream),
                topic: id(topic),
                group: id(group),
                member: request.client,
            },
            ClientRequest::LeaveConsumerGroup { stream, topic, group } => MetadataCommand::LeaveConsumerGroup {
                stream: id(stream),
                topic: id(topic),
                group: id(group),
                member: request.client,
            },
            _ => return Err(ERROR_INVALID_COMMAND),
        })
    }
}

/// The options update_topic may change; any other key is refused.
fn topic_update(options: &wire::Options) -> Result<TopicUpdate, u32> {
    let topic = topic_options(options)?;
    let mut update = TopicUpdate { compression: None, message_expiry: None, max_topic_size: None };
    for (key, _) in options.pairs() {
        match key.as_str() {
            "compression_algorithm" => update.compression = Some(topic.compression),
            "message_expiry" => update.message_expiry = Some(topic.message_expiry),
            "max_topic_size" => update.max_topic_size = Some(topic.max_topic_size),
            _ => return Err(ERROR_INVALID_COMMAND),
        }
    }
    Ok(update)
}

/// Topic options from their `PROTOCOL.md` key/value pairs; unknown keys and values of the wrong
/// kind are refused (`ERROR_INVALID_COMMAND`), so that a typo is an error rather than a silently
/// ignored setting. The state machine then checks the values themselves.
fn topic_options(options: &wire::Options) -> Result<TopicOptions, u32> {
    let mut topic = TopicOptions::default();
    for (key, value) in options.pairs() {
        let number = match value {
            wire::OptionValue::U8(v) => Some(*v as u64),
            wire::OptionValue::U16(v) => Some(*v as u64),
            wire::OptionValue::U32(v) => Some(*v as u64),
            wire::OptionValue::U64(v) => Some(*v),
            _ => None,
        };
        let flag = match value {
            wire::OptionValue::Bool(v) => Some(*v),
            _ => None,
        };
        let invalid = || ERROR_INVALID_COMMAND;
        match key.as_str() {
            "message_expiry" => topic.message_expiry = number.ok_or_else(invalid)?,
            "max_topic_size" => topic.max_topic_size = number.ok_or_else(invalid)?,
            "segment_size" => topic.segment_size = number.ok_or_else(invalid)?,
            "messages_required_to_save" => {
                topic.messages_required_to_save = number.and_then(|n| u32::try_from(n).ok()).ok_or_else(invalid)?
            }
            "size_of_messages_required_to_save" => {
                topic.size_of_messages_required_to_save = number.ok_or_else(invalid)?
            }
            "enforce_fsync" => topic.enforce_fsync = flag.ok_or_else(invalid)?,
            "preallocate_segments" => topic.preallocate_segments = flag.ok_or_else(invalid)?,
            "compression_algorithm" => {
                topic.compression = match value {
                    wire::OptionValue::String(name) if name == "none" => crate::metadata::Compression::None,
                    wire::OptionValue::String(name) if name == "gzip" => crate::metadata::Compression::Gzip,
                    _ => return Err(invalid()),
                }
            }
            _ => return Err(invalid()),
        }
    }
    Ok(topic)
}

/// The reply to a committed command: a result section, then what the SDK decodes after it (the
/// created object's details for create_stream, create_topic, create_consumer_group and
/// create_user), or what the node needs (the partitions a purge empties); nothing for the
/// others, whose payload the SDK ignores.
fn encode_reply(metadata: &Metadata, result: Result<MetadataResult, u32>) -> Vec<u8> {
    let mut reply = Vec::new();
    let done = match result {
        Err(code) => {
            ResultSection { entries: vec![ResultEntry { index: 0, result: code }] }.write(&mut reply);
            return reply;
        }
        Ok(done) => done,
    };
    ResultSection::ok().write(&mut reply);
    use MetadataResult as R;
    match done {
        R::StreamCreated { stream } => {
            let created = metadata.stream(stream).expect("the created stream exists");
            wire_view::stream_details(created, &NodeFigures::default()).write(&mut reply);
        }
        R::TopicCreated { stream, topic, .. } => {
            let created = metadata.topic(stream, topic).expect("the created topic exists");
            wire_view::topic_details(stream, created, &NodeFigures::default()).write(&mut reply);
        }
        R::ConsumerGroupCreated { stream, topic, group } => {
            let topic = metadata.topic(stream, topic).expect("the group's topic exists");
            let created = topic.consumer_groups.get(&group).expect("the created group exists");
            wire_view::consumer_group(created, topic.partitions_count()).write(&mut reply);
        }
        R::UserCreated { user } => {
            let created = metadata.user(user).expect("the created user exists");
            wire_view::user_details(created).write(&mut reply);
        }
        // What the node must empty: [n u32] then n x (stream u32, topic u32, partitions u32).
        R::StreamPurged { stream, topics } => {
            reply.extend_from_slice(&(topics.len() as u32).to_le_bytes());
            for (topic, partitions) in topics {
                for value in [stream, topic, partitions] {
                    reply.extend_from_slice(&value.to_le_bytes());
                }
            }
        }
        R::TopicPurged { stream, topic, partitions_count } => {
            reply.extend_from_slice(&1u32.to_le_bytes());
            for value in [stream, topic, partitions_count] {
                reply.extend_from_slice(&value.to_le_bytes());
            }
        }
        _ => {}
    }
    reply
}

impl StateMachine for MetadataMachine {
    fn refused_when_disk_full(request: &vireo_protocol::Header) -> bool {
        crate::disk_reserve::refused_when_low(request.operation)
    }

    fn check_register(&self, timestamp: u64, request: &Header, body: &[u8]) -> Result<(), u32> {
        let proof = LoginProof::decode(body).ok_or(STATUS_INVALID_CREDENTIALS)?;
        let (user_id, refused) = match &proof {
            LoginProof::Password { user_id, .. } => (*user_id, STATUS_INVALID_CREDENTIALS),
            LoginProof::Token { user_id, .. } => (*user_id, STATUS_INVALID_TOKEN),
        };
        let user = self.metadata.user(user_id).ok_or(refused)?;
        if request.user_id != user_id {
            return Err(refused);
        }
        match &proof {
            LoginProof::Password { password_hash, .. } if *password_hash != user.password_hash => return Err(refused),
            LoginProof::Token { token_hash, .. } => {
                let owner = self.metadata.user_by_token(*token_hash, timestamp).map_err(|_| refused)?;
                if owner.id != user_id {
                    return Err(refused);
                }
            }
            _ => {}
        }
        if user.status == UserStatus::Inactive {
            return Err(STATUS_USER_INACTIVE);
        }
        Ok(())
    }

    fn apply(&mut self, _op: u64, timestamp: u64, request: &Header, user_id: u32, body: &vireo_io::Bytes) -> Vec<u8> {
        let result = MetadataMachine::command(request, body)
            .and_then(|command| self.metadata.apply(user_id, timestamp, &command).map_err(|error| error.code()));
        encode_reply(&self.metadata, result)
    }

    fn digest(&self) -> u64 {
        self.metadata.digest()
    }

    fn snapshot(&self) -> Vec<u8> {
        self.metadata.snapshot()
    }

    fn restore(snapshot: &[u8]) -> Option<MetadataMachine> {
        Metadata::restore(snapshot).map(|metadata| MetadataMachine { metadata })
    }

    fn empty() -> MetadataMachine {
        let hash = hash_password(ROOT_PASSWORD_DEFAULT, ROOT_GENESIS_SALT, PasswordCost::Test);
        MetadataMachine { metadata: Metadata::genesis(&hash, MetadataLimits::default()) }
    }
}

impl MetadataPlane for MetadataMachine {
    fn partitions(&self) -> BTreeMap<Namespace, PartitionGroup> {
        let mut namespaces = BTreeMap::new();
        for stream in self.metadata.streams() {
            for topic in stream.topics.values() {
                for partition in &topic.partitions {
                    let group = PartitionGroup {
                        incarnation: partition.created_at,
                        enforce_fsync: topic.options.enforce_fsync,
                    };
                    namespaces.insert(Namespace::partition(stream.id, topic.id, partition.id), group);
                }
            }
        }
        namespaces
    }
}
