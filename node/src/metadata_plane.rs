//! `MetadataMachine`: the metadata state machine as the metadata VSR group replicates it. It
//! decodes each committed request's `PROTOCOL.md` body into a `MetadataCommand`, applies it for
//! the user the request's session registered as, and answers with a result section (`PROTOCOL.md`
//! "Reply") followed by the ids the command created or resolved, as u32s:
//! stream (create_stream); stream, topic, partitions_count (create_topic); stream, topic, first,
//! count (create/delete_partitions); stream, topic, group (consumer group commands).
//!
//! A request that does not decode, or that the state machine denies, changes nothing and is
//! answered with a one-entry result section holding the error code.

use std::collections::BTreeSet;

use vireo_io::Namespace;
use vireo_protocol::wire::{self, ClientRequest, ResultEntry, ResultSection};
use vireo_protocol::{Header, StateMachine};

use crate::metadata::{
    hash_password, Identifier, Metadata, MetadataCommand, MetadataLimits, MetadataResult, PasswordCost, TopicOptions,
};
use crate::shard::MetadataPlane;

/// The root user's password at first boot (Iggy's default; change it after the first login).
pub const ROOT_PASSWORD_DEFAULT: &str = "iggy";
/// The genesis hash must be the same on every replica, so its salt is fixed; it protects only
/// the public default password, which a ChangePassword replaces with a randomly salted hash.
const ROOT_GENESIS_SALT: [u8; 16] = *b"vireo-genesis-01";

/// Request operations of the metadata plane (`PROTOCOL.md`, request operation 128..149), and
/// the command code each one's body is laid out as.
pub const OPERATIONS: [(u8, u32); 10] = [
    (128, wire::command::CREATE_STREAM),
    (130, wire::command::DELETE_STREAM),
    (132, wire::command::CREATE_TOPIC),
    (134, wire::command::DELETE_TOPIC),
    (136, wire::command::CREATE_PARTITIONS),
    (137, wire::command::DELETE_PARTITIONS),
    (139, wire::command::CREATE_CONSUMER_GROUP),
    (140, wire::command::DELETE_CONSUMER_GROUP),
    (148, wire::command::JOIN_CONSUMER_GROUP),
    (149, wire::command::LEAVE_CONSUMER_GROUP),
];

/// The operation a metadata command code travels as.
pub fn operation_of(command_code: u32) -> Option<u8> {
    OPERATIONS.iter().find(|(_, code)| *code == command_code).map(|(operation, _)| *operation)
}

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
        let code = OPERATIONS
            .iter()
            .find(|(operation, _)| *operation == request.operation)
            .map(|(_, code)| *code)
            .ok_or(ERROR_INVALID_COMMAND)?;
        let decoded = ClientRequest::decode(code, body).map_err(|_| ERROR_INVALID_COMMAND)?;
        let id = |identifier: wire::Identifier| match identifier {
            wire::Identifier::Numeric(id) => Identifier::Numeric(id),
            wire::Identifier::Name(name) => Identifier::Name(name.as_str().to_owned()),
        };
        Ok(match decoded {
            ClientRequest::CreateStream { name, .. } => {
                MetadataCommand::CreateStream { name: name.as_str().to_owned() }
            }
            ClientRequest::DeleteStream { stream } => MetadataCommand::DeleteStream { stream: id(stream) },
            ClientRequest::CreateTopic { stream, partitions_count, name, options } => MetadataCommand::CreateTopic {
                stream: id(stream),
                name: name.as_str().to_owned(),
                partitions_count,
                options: topic_options(&options)?,
            },
            ClientRequest::DeleteTopic { stream, topic } => {
                MetadataCommand::DeleteTopic { stream: id(stream), topic: id(topic) }
            }
            ClientRequest::CreatePartitions { stream, topic, count } => {
                MetadataCommand::CreatePartitions { stream: id(stream), topic: id(topic), count }
            }
            ClientRequest::DeletePartitions { stream, topic, count } => {
                MetadataCommand::DeletePartitions { stream: id(stream), topic: id(topic), count }
            }
            ClientRequest::CreateConsumerGroup { stream, topic, name } => MetadataCommand::CreateConsumerGroup {
                stream: id(stream),
                topic: id(topic),
                name: name.as_str().to_owned(),
            },
            ClientRequest::DeleteConsumerGroup { stream, topic, group } => {
                MetadataCommand::DeleteConsumerGroup { stream: id(stream), topic: id(topic), group: id(group) }
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

fn encode_reply(result: Result<MetadataResult, u32>) -> Vec<u8> {
    let mut reply = Vec::new();
    let ids: Vec<u32> = match result {
        Err(code) => {
            ResultSection { entries: vec![ResultEntry { index: 0, result: code }] }.write(&mut reply);
            return reply;
        }
        Ok(done) => {
            ResultSection::ok().write(&mut reply);
            use MetadataResult as R;
            match done {
                R::StreamCreated { stream } => vec![stream],
                R::StreamDeleted { stream, .. } => vec![stream],
                R::TopicCreated { stream, topic, partitions_count }
                | R::TopicDeleted { stream, topic, partitions_count } => {
                    vec![stream, topic, partitions_count]
                }
                R::PartitionsCreated { stream, topic, first, count }
                | R::PartitionsDeleted { stream, topic, first, count } => vec![stream, topic, first, count],
                R::ConsumerGroupCreated { stream, topic, group }
                | R::ConsumerGroupDeleted { stream, topic, group }
                | R::ConsumerGroupJoined { stream, topic, group, .. }
                | R::ConsumerGroupLeft { stream, topic, group } => vec![stream, topic, group],
                _ => Vec::new(),
            }
        }
    };
    for id in ids {
        reply.extend_from_slice(&id.to_le_bytes());
    }
    reply
}

impl StateMachine for MetadataMachine {
    fn apply(&mut self, _op: u64, timestamp: u64, request: &Header, user_id: u32, body: &[u8]) -> Vec<u8> {
        let result = MetadataMachine::command(request, body)
            .and_then(|command| self.metadata.apply(user_id, timestamp, &command).map_err(|error| error.code()));
        encode_reply(result)
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
    fn partitions(&self) -> BTreeSet<Namespace> {
        let mut namespaces = BTreeSet::new();
        for stream in self.metadata.streams() {
            for topic in stream.topics.values() {
                for partition in &topic.partitions {
                    namespaces.insert(Namespace::partition(stream.id, topic.id, partition.id));
                }
            }
        }
        namespaces
    }
}
