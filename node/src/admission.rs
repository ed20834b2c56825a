//! Admission: what the shard holding a connection decides about a client's request before any
//! group sees it, from the committed metadata it reads. A login's credentials are checked here
//! (and the password goes no further); a send, poll or offset request is resolved (stream and
//! topic by id or name, the partition chosen, the consumer named), checked against the user's
//! permissions, and turned into the partition group's request. Every refusal is a status code
//! of the reference's (`IggyError` numbering), which the client receives in the reply header.
//!
//! Pure functions over `Metadata`: no state, no I/O, so the simulator exercises exactly what the
//! server runs.

use vireo_io::Namespace;
use vireo_protocol::config::Bug;
use vireo_protocol::wire::{self, ConsumerKind, LoginRegister, LoginWithToken, PollMessages, SendMessagesHead};
use vireo_storage::partition::PollingStrategy;

use crate::connection::ReplyKind;
use crate::metadata::{token_hash, verify_password, Identifier, Metadata, ReadKind, UserStatus};
use crate::partition::request::{ConsumerKey, PartitionRequest, Retention};
use crate::partitioning::{partition_for, Partitioning};

/// Status codes of refusals made before a request reaches a group (Iggy's numbering).
pub const STATUS_INVALID_COMMAND: u32 = 3;
pub const STATUS_INVALID_FORMAT: u32 = 4;
pub const STATUS_FEATURE_UNAVAILABLE: u32 = 5;
pub const STATUS_UNAUTHENTICATED: u32 = 40;
pub const STATUS_UNAUTHORIZED: u32 = 41;
pub const STATUS_INVALID_CREDENTIALS: u32 = 42;
pub const STATUS_USER_INACTIVE: u32 = 47;
pub const STATUS_INVALID_TOKEN: u32 = 53;
/// The server did not take the request (a queue on its way was full): it may be sent again.
pub const STATUS_TRANSIENT_NOT_ACCEPTED: u32 = 58;
pub const STATUS_PARTITION_NOT_FOUND: u32 = 3007;
pub const STATUS_NO_PARTITIONS: u32 = 3008;
pub const STATUS_CONSUMER_GROUP_MEMBER_NOT_FOUND: u32 = 5006;

/// The metadata's identifier for a wire identifier.
pub fn identifier(wire: &wire::Identifier) -> Identifier {
    match wire {
        wire::Identifier::Numeric(id) => Identifier::Numeric(*id),
        wire::Identifier::Name(name) => Identifier::Name(name.as_str().to_owned()),
    }
}

/// The user a password login logs in as. An unknown user and a wrong password are refused
/// alike (`STATUS_INVALID_CREDENTIALS`), so a login does not tell which names exist.
pub fn verify_login(metadata: &Metadata, login: &LoginRegister, bug: Option<Bug>) -> Result<u32, u32> {
    let user = metadata.user_by_name(login.username.as_str()).ok_or(STATUS_INVALID_CREDENTIALS)?;
    let password = std::str::from_utf8(login.password.as_bytes()).map_err(|_| STATUS_INVALID_CREDENTIALS)?;
    if bug != Some(Bug::AcceptAnyPassword) && !verify_password(&user.password_hash, password) {
        return Err(STATUS_INVALID_CREDENTIALS);
    }
    if user.status == UserStatus::Inactive {
        return Err(STATUS_USER_INACTIVE);
    }
    Ok(user.id)
}

/// A request admitted for a partition group: which group, the body it applies, and how its
/// reply goes back to the client.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Admitted {
    pub group: Namespace,
    pub request: PartitionRequest,
    pub kind: ReplyKind,
}

/// What a poll comes to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PollAdmission {
    Group(Admitted),
    /// A consumer-group member that owns no partition now: an empty poll, answered at once.
    NothingAssigned,
}

fn authorize(metadata: &Metadata, user_id: u32, kind: ReadKind) -> Result<(), u32> {
    metadata.authorize_read(user_id, kind).map_err(|error| error.code())
}

fn resolve_topic(metadata: &Metadata, stream: &wire::Identifier, topic: &wire::Identifier) -> Result<(u32, u32), u32> {
    let (stream, topic) =
        metadata.resolve_topic(&identifier(stream), &identifier(topic)).map_err(|error| error.code())?;
    Ok((stream.id, topic.id))
}

fn partition_ids(metadata: &Metadata, stream: u32, topic: u32) -> Vec<u32> {
    metadata
        .topic(stream, topic)
        .map(|topic| topic.partitions.iter().map(|partition| partition.id).collect())
        .unwrap_or_default()
}

/// A send admitted for a partition group: the batch itself stays where the client's frame
/// holds it (`RequestBody::Send`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SendAdmission {
    pub group: Namespace,
    pub partition: u32,
    pub retention: Retention,
    pub kind: ReplyKind,
}

/// send_messages: the user may send to the topic, and the partitioning names a partition of it.
pub fn admit_send(
    metadata: &Metadata,
    user_id: u32,
    send: &SendMessagesHead,
    cursor: u64,
    bug: Option<Bug>,
) -> Result<SendAdmission, u32> {
    let (stream, topic) = resolve_topic(metadata, &send.stream, &send.topic)?;
    if bug != Some(Bug::SkipSendPermission) {
        authorize(metadata, user_id, ReadKind::Send { stream, topic })?;
    }
    let partitioning = match &send.partitioning {
        wire::Partitioning::Balanced => Partitioning::Balanced,
        wire::Partitioning::PartitionId(id) => Partitioning::PartitionId(*id),
        wire::Partitioning::MessagesKey(key) => Partitioning::MessagesKey(key.as_bytes().to_vec()),
    };
    let partitions = partition_ids(metadata, stream, topic);
    if partitions.is_empty() {
        return Err(STATUS_NO_PARTITIONS);
    }
    let partition = partition_for(&partitioning, cursor, &partitions).ok_or(STATUS_PARTITION_NOT_FOUND)?;
    let options = &metadata.topic(stream, topic).expect("resolved").options;
    let retention = Retention {
        segment_size: options.segment_size,
        message_expiry_us: options.message_expiry,
        // A topic's limit, shared evenly by its partitions (each a group of its own).
        max_bytes: options.max_topic_size.div_ceil(partitions.len() as u64),
    };
    Ok(SendAdmission {
        group: Namespace::partition(stream, topic, partition),
        partition,
        retention,
        kind: ReplyKind::Send { stream, topic },
    })
}

/// Whose offset a consumer names: a consumer by number (a named consumer by the hash of its
/// name), or a consumer group of the topic.
fn consumer_key(metadata: &Metadata, stream: u32, topic: u32, consumer: &wire::Consumer) -> Result<ConsumerKey, u32> {
    match consumer.kind {
        ConsumerKind::Consumer => Ok(ConsumerKey::Consumer(match &consumer.id {
            wire::Identifier::Numeric(id) => *id,
            wire::Identifier::Name(name) => xxhash_rust::xxh3::xxh3_64(name.as_str().as_bytes()) as u32,
        })),
        ConsumerKind::ConsumerGroup => {
            let (_, _, group) = metadata
                .resolve_consumer_group(
                    &Identifier::Numeric(stream),
                    &Identifier::Numeric(topic),
                    &identifier(&consumer.id),
                )
                .map_err(|error| error.code())?;
            Ok(ConsumerKey::Group(group.id))
        }
    }
}

/// The partition a consumer's request is about: the one it names, else, for a consumer group,
/// the next of the partitions the group gave this client, else the next of the topic's.
fn consumer_partition(
    metadata: &Metadata,
    client: u128,
    stream: u32,
    topic: u32,
    consumer: ConsumerKey,
    partition_id: Option<u32>,
    cursor: u64,
) -> Result<Option<u32>, u32> {
    let partitions = partition_ids(metadata, stream, topic);
    if partitions.is_empty() {
        return Err(STATUS_NO_PARTITIONS);
    }
    if let Some(partition) = partition_id {
        return if partitions.contains(&partition) { Ok(Some(partition)) } else { Err(STATUS_PARTITION_NOT_FOUND) };
    }
    match consumer {
        ConsumerKey::Group(group) => {
            let owned =
                metadata.partitions_of(stream, topic, group, client).ok_or(STATUS_CONSUMER_GROUP_MEMBER_NOT_FOUND)?;
            if owned.is_empty() {
                return Ok(None);
            }
            Ok(Some(owned[(cursor % owned.len() as u64) as usize]))
        }
        ConsumerKey::Consumer(_) => Ok(Some(partitions[(cursor % partitions.len() as u64) as usize])),
    }
}

/// poll_messages: the user may poll the topic; the consumer and the partition resolve.
pub fn admit_poll(
    metadata: &Metadata,
    user_id: u32,
    client: u128,
    poll: &PollMessages,
    cursor: u64,
) -> Result<PollAdmission, u32> {
    let (stream, topic) = resolve_topic(metadata, &poll.stream, &poll.topic)?;
    authorize(metadata, user_id, ReadKind::Poll { stream, topic })?;
    let consumer = consumer_key(metadata, stream, topic, &poll.consumer)?;
    let Some(partition) = consumer_partition(metadata, client, stream, topic, consumer, poll.partition_id, cursor)?
    else {
        return Ok(PollAdmission::NothingAssigned);
    };
    let strategy = match poll.strategy.kind {
        wire::PollingKind::Offset => PollingStrategy::Offset(poll.strategy.value),
        wire::PollingKind::Timestamp => PollingStrategy::Timestamp(poll.strategy.value),
        wire::PollingKind::First => PollingStrategy::First,
        wire::PollingKind::Last => PollingStrategy::Last,
        wire::PollingKind::Next => PollingStrategy::Next,
    };
    Ok(PollAdmission::Group(Admitted {
        group: Namespace::partition(stream, topic, partition),
        request: PartitionRequest::Poll {
            partition,
            consumer,
            strategy,
            count: poll.count,
            auto_commit: poll.auto_commit,
        },
        kind: ReplyKind::Poll,
    }))
}

/// delete_segments: the user may manage the topic, whose partition must exist; its group drops
/// the oldest segments.
pub fn admit_delete_segments(
    metadata: &Metadata,
    user_id: u32,
    stream: &wire::Identifier,
    topic: &wire::Identifier,
    partition: u32,
    count: u32,
) -> Result<Admitted, u32> {
    let (stream, topic) = resolve_topic(metadata, stream, topic)?;
    authorize(metadata, user_id, ReadKind::ManageTopic { stream, topic })?;
    let partitions = metadata.topic(stream, topic).map_or(0, |found| found.partitions_count());
    if partition >= partitions {
        return Err(STATUS_PARTITION_NOT_FOUND);
    }
    Ok(Admitted {
        group: Namespace::partition(stream, topic, partition),
        request: PartitionRequest::DeleteSegments { partition, count },
        kind: ReplyKind::Offset,
    })
}

/// What a consumer-offset request does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OffsetAction {
    Store(u64),
    Delete,
    Get,
}

/// store_consumer_offset, delete_consumer_offset or get_consumer_offset: the user may poll the
/// topic.
pub fn admit_offset(
    metadata: &Metadata,
    user_id: u32,
    client: u128,
    key: &wire::ConsumerOffsetKey,
    action: OffsetAction,
    cursor: u64,
    bug: Option<Bug>,
) -> Result<Admitted, u32> {
    let (stream, topic) = resolve_topic(metadata, &key.stream, &key.topic)?;
    if !(action == OffsetAction::Get && bug == Some(Bug::SkipReadPermission)) {
        authorize(metadata, user_id, ReadKind::Poll { stream, topic })?;
    }
    let consumer = consumer_key(metadata, stream, topic, &key.consumer)?;
    let partition = consumer_partition(metadata, client, stream, topic, consumer, key.partition_id, cursor)?
        .ok_or(STATUS_PARTITION_NOT_FOUND)?;
    let (request, kind) = match action {
        OffsetAction::Store(offset) => {
            (PartitionRequest::StoreOffset { partition, consumer, offset }, ReplyKind::Offset)
        }
        OffsetAction::Delete => (PartitionRequest::DeleteOffset { partition, consumer }, ReplyKind::Offset),
        OffsetAction::Get => (PartitionRequest::GetOffset { partition, consumer }, ReplyKind::ConsumerOffset),
    };
    Ok(Admitted { group: Namespace::partition(stream, topic, partition), request, kind })
}

/// The user a personal-access-token login logs in as at `now`. An unknown, deleted or expired
/// token, or an inactive user, is refused alike (`STATUS_INVALID_TOKEN`), as the reference does.
pub fn verify_token(metadata: &Metadata, login: &LoginWithToken, now: u64) -> Result<u32, u32> {
    let token = std::str::from_utf8(login.token.as_bytes()).map_err(|_| STATUS_INVALID_TOKEN)?;
    metadata.user_by_token(token_hash(token), now).map(|user| user.id).map_err(|_| STATUS_INVALID_TOKEN)
}
