//! The metadata state machine against a model of it: random sequences of every `MetadataCommand`,
//! sent by the root user, by users with narrow rights and by users that do not exist, are applied
//! both to `Metadata` and to `Model`, a plain re-statement of the commands' documented semantics
//! (`metadata/command.rs`, `permissions.rs`, `error.rs`) that shares no code with the state machine.
//! After every command the two must agree on the outcome (the exact `MetadataResult`, or the exact
//! status code), a denied command must leave the snapshot byte-identical, `check_invariants` must
//! hold, and the visible state must be equal.
//!
//! What the model keeps: streams and their topics (ids, the lowest free one from 0; names unique
//! in their scope), each topic's partition count and options, consumer groups with their member
//! sets, users (root with id 0 plus created ones: name, status, password hash, rights), and each
//! user's personal access tokens (name, hash, expiry). Limits are small (`LIMITS`) so each is hit.
//!
//! Rights are a few shapes (`Grant`): every right, none, global manage_streams, manage_stream on
//! one stream, and send/poll on one topic; the model decides permissions from those shapes alone,
//! following the implications `permissions.rs` documents.
//!
//! What it leaves out: which partitions each group member owns (the assignment; `check_invariants`
//! checks it after every command), creation timestamps, the token and name indexes (checked by
//! `check_invariants` too), logins and reads (`authorize_read`, `user_by_token`), and rights shapes
//! the generator never grants (manage_users alone, read-only rights, manage_topic overrides).
//!
//! `EndSession` (a closed connection's client leaves every group) is made by a node, not a client:
//! it needs no acting user and is never denied.
//!
//! The order of checks the model predicts, when a command breaks several rules: the acting user
//! (exists, then active); a permission that does not depend on the target (manage_users,
//! manage_streams); the objects the command names, outermost first (an empty or over-long name
//! identifier is malformed, code 6); a permission that depends on them; then the new name, its
//! uniqueness, options (in the order `TopicOption` lists them) and limits; a permissions value's
//! stream and topic targets come last.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::ops::Range;
use std::sync::OnceLock;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use vireo_node::metadata::{
    hash_password, Compression, GlobalPermissions, Identifier, Metadata, MetadataCommand, MetadataLimits,
    MetadataResult, PasswordCost, Permissions, StreamPermissions, TopicOptions, TopicPermissions, TopicUpdate,
    UserStatus, ROOT_USERNAME, ROOT_USER_ID, SALT_SIZE_BYTES,
};

/// Random sequences run per test, and the most commands in one (after the prelude).
const CASES: u32 = 256;
const STEPS_MAX: usize = 60;

/// Small enough that every limit is reached within a sequence.
const LIMITS: MetadataLimits = MetadataLimits {
    streams_max: 3,
    topics_per_stream_max: 2,
    partitions_per_topic_max: 4,
    consumer_groups_per_topic_max: 2,
    members_per_group_max: 2,
    users_max: 5,
    tokens_per_user_max: 1,
};

/// Prepare timestamps: the first command's, then one step per command, in nanoseconds.
const TIMESTAMP_START_NS: u64 = 1_000_000;
const TIMESTAMP_STEP_NS: u64 = 1_000;

/// The users the prelude creates (their rights are in `PRELUDE_USERS`), with the lowest free ids.
const ALICE: u32 = 1;
const BOB: u32 = 2;
const CAROL: u32 = 3;
const DAVE: u32 = 4;

/// The status codes the model predicts (Apache Iggy's numbering, as `metadata/error.rs` tables it).
mod code {
    pub const INVALID_IDENTIFIER: u32 = 6;
    /// A user, or a personal access token.
    pub const NOT_FOUND: u32 = 20;
    pub const UNAUTHENTICATED: u32 = 40;
    pub const PERMISSION_DENIED: u32 = 41;
    pub const INVALID_USERNAME: u32 = 43;
    pub const INVALID_PASSWORD: u32 = 44;
    pub const USER_EXISTS: u32 = 46;
    pub const USER_INACTIVE: u32 = 47;
    pub const CANNOT_DELETE_ROOT: u32 = 48;
    pub const CANNOT_CHANGE_ROOT: u32 = 49;
    pub const INVALID_TOKEN_NAME: u32 = 50;
    pub const TOKEN_EXISTS: u32 = 51;
    pub const TOKENS_LIMIT: u32 = 52;
    pub const USERS_LIMIT: u32 = 55;
    pub const STREAM_NOT_FOUND: u32 = 1009;
    pub const STREAM_EXISTS: u32 = 1012;
    pub const INVALID_STREAM_NAME: u32 = 1013;
    pub const INVALID_TOPIC_SIZE: u32 = 1019;
    pub const STREAMS_LIMIT: u32 = 1020;
    pub const TOPIC_NOT_FOUND: u32 = 2010;
    pub const TOPIC_EXISTS: u32 = 2013;
    pub const INVALID_TOPIC_NAME: u32 = 2014;
    pub const PARTITIONS_LIMIT: u32 = 2015;
    pub const INVALID_REPLICATION_FACTOR: u32 = 2018;
    pub const INVALID_PARTITIONS_COUNT: u32 = 2019;
    pub const TOPICS_LIMIT: u32 = 2021;
    pub const PARTITION_NOT_FOUND: u32 = 3007;
    /// Too many consumer groups in a topic, or members in a group.
    pub const TOPIC_FULL: u32 = 3009;
    pub const INVALID_SEGMENT_SIZE: u32 = 4002;
    pub const INVALID_OPTION_VALUE: u32 = 4042;
    pub const GROUP_NOT_FOUND: u32 = 5000;
    pub const GROUP_EXISTS: u32 = 5004;
    pub const INVALID_GROUP_NAME: u32 = 5005;
    pub const MEMBER_NOT_FOUND: u32 = 5006;

    /// Every code a generated command can provoke: each must be seen in a run.
    pub const REACHABLE: [u32; 34] = [
        INVALID_IDENTIFIER,
        NOT_FOUND,
        UNAUTHENTICATED,
        PERMISSION_DENIED,
        INVALID_USERNAME,
        INVALID_PASSWORD,
        USER_EXISTS,
        USER_INACTIVE,
        CANNOT_DELETE_ROOT,
        CANNOT_CHANGE_ROOT,
        INVALID_TOKEN_NAME,
        TOKEN_EXISTS,
        TOKENS_LIMIT,
        USERS_LIMIT,
        STREAM_NOT_FOUND,
        STREAM_EXISTS,
        INVALID_STREAM_NAME,
        INVALID_TOPIC_SIZE,
        STREAMS_LIMIT,
        TOPIC_NOT_FOUND,
        TOPIC_EXISTS,
        INVALID_TOPIC_NAME,
        PARTITIONS_LIMIT,
        INVALID_REPLICATION_FACTOR,
        INVALID_PARTITIONS_COUNT,
        TOPICS_LIMIT,
        PARTITION_NOT_FOUND,
        TOPIC_FULL,
        INVALID_SEGMENT_SIZE,
        INVALID_OPTION_VALUE,
        GROUP_NOT_FOUND,
        GROUP_EXISTS,
        INVALID_GROUP_NAME,
        MEMBER_NOT_FOUND,
    ];
}

// ---------------------------------------------------------------------------------------------
// The visible state, as both the model and the state machine show it.
// ---------------------------------------------------------------------------------------------

/// Everything the comparison looks at.
#[derive(Debug, Clone, PartialEq, Eq)]
struct View {
    streams: BTreeMap<u32, StreamView>,
    users: BTreeMap<u32, UserView>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct StreamView {
    name: String,
    topics: BTreeMap<u32, TopicView>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct TopicView {
    name: String,
    partitions_count: u32,
    options: TopicOptions,
    groups: BTreeMap<u32, GroupView>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct GroupView {
    name: String,
    members: BTreeSet<u128>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct UserView {
    name: String,
    status: UserStatus,
    password_hash: String,
    /// `None`: the user's permissions were never given (its details say none).
    permissions: Option<Permissions>,
    /// Token name to its hash and expiry.
    tokens: BTreeMap<String, (u128, Option<u64>)>,
}

/// What the state machine shows, read through its public fields only.
fn view_of(metadata: &Metadata) -> View {
    let streams = metadata
        .streams()
        .map(|stream| {
            let topics = stream
                .topics
                .values()
                .map(|topic| {
                    let groups = topic
                        .consumer_groups
                        .values()
                        .map(|group| {
                            let members = group.members.keys().copied().collect();
                            (group.id, GroupView { name: group.name.clone(), members })
                        })
                        .collect();
                    let partitions_count = u32::try_from(topic.partitions.len()).expect("few partitions");
                    let options = topic.options.clone();
                    (topic.id, TopicView { name: topic.name.clone(), partitions_count, options, groups })
                })
                .collect();
            (stream.id, StreamView { name: stream.name.clone(), topics })
        })
        .collect();
    let users = metadata
        .users()
        .map(|user| {
            let tokens =
                user.tokens.values().map(|token| (token.name.clone(), (token.token_hash, token.expires_at))).collect();
            let view = UserView {
                name: user.username.clone(),
                status: user.status,
                password_hash: user.password_hash.clone(),
                permissions: user.permissions_given.then(|| user.permissions.clone()),
                tokens,
            };
            (user.id, view)
        })
        .collect();
    View { streams, users }
}

/// `Err` names every difference, one a line: an object on one side only, or one field (a stream's
/// or topic's name, a partition count, a group's members, a user's rights ...) of an object on both.
fn compare_views(model: &View, actual: &View) -> Result<(), String> {
    let mut differences = Vec::new();
    let out = &mut differences;
    differences_by_id("stream", &model.streams, &actual.streams, out, |at, model, actual, out| {
        field(at, "name", &model.name, &actual.name, out);
        differences_by_id(&format!("{at} topic"), &model.topics, &actual.topics, out, |at, model, actual, out| {
            field(at, "name", &model.name, &actual.name, out);
            field(at, "partitions_count", &model.partitions_count, &actual.partitions_count, out);
            field(at, "options", &model.options, &actual.options, out);
            differences_by_id(&format!("{at} group"), &model.groups, &actual.groups, out, |at, model, actual, out| {
                field(at, "name", &model.name, &actual.name, out);
                field(at, "members", &model.members, &actual.members, out);
            });
        });
    });
    differences_by_id("user", &model.users, &actual.users, out, |at, model, actual, out| {
        field(at, "name", &model.name, &actual.name, out);
        field(at, "status", &model.status, &actual.status, out);
        field(at, "password_hash", &model.password_hash, &actual.password_hash, out);
        field(at, "permissions", &model.permissions, &actual.permissions, out);
        field(at, "tokens", &model.tokens, &actual.tokens, out);
    });
    if differences.is_empty() {
        Ok(())
    } else {
        Err(differences.join("\n"))
    }
}

/// Reports each id on one side only, and compares the objects on both with `on_both`.
fn differences_by_id<V: fmt::Debug>(
    what: &str,
    model: &BTreeMap<u32, V>,
    actual: &BTreeMap<u32, V>,
    differences: &mut Vec<String>,
    on_both: impl Fn(&str, &V, &V, &mut Vec<String>),
) {
    let ids: BTreeSet<u32> = model.keys().chain(actual.keys()).copied().collect();
    for id in ids {
        match (model.get(&id), actual.get(&id)) {
            (Some(expected), Some(found)) => on_both(&format!("{what} {id}"), expected, found, differences),
            (expected, found) => {
                differences.push(format!("{what} {id}: model has {expected:?}, state machine has {found:?}"))
            }
        }
    }
}

fn field<T: PartialEq + fmt::Debug>(at: &str, name: &str, model: &T, actual: &T, differences: &mut Vec<String>) {
    if model != actual {
        differences.push(format!("{at} {name}: model has {model:?}, state machine has {actual:?}"));
    }
}

// ---------------------------------------------------------------------------------------------
// The model.
// ---------------------------------------------------------------------------------------------

/// The rights a model user holds: the shapes the generator grants, plus what a delete leaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Grant {
    /// Every right (the root user's, or a created user's copy of them).
    All,
    Nothing,
    /// Global manage_streams: create streams, and manage, read and poll every stream and topic.
    ManageStreams,
    /// manage_stream on one stream: manage it and its topics, read and poll them.
    ManageStream(u32),
    /// send and/or poll on one topic only (not read: no consumer group creation).
    Topic {
        stream: u32,
        topic: u32,
        send: bool,
        poll: bool,
    },
    /// What a `Topic` grant leaves when its topic is deleted: an empty stream override, no rights.
    EmptyStream(u32),
}

impl Grant {
    fn manages_users(self) -> bool {
        self == Grant::All
    }

    fn manages_streams(self) -> bool {
        matches!(self, Grant::All | Grant::ManageStreams)
    }

    /// manage_stream; in these shapes it is also manage_topics, manage_topic and read_topic there.
    fn manages_stream(self, stream: u32) -> bool {
        self.manages_streams() || self == Grant::ManageStream(stream)
    }

    /// read_topic (what creating or deleting a consumer group needs).
    fn reads_topic(self, stream: u32) -> bool {
        self.manages_stream(stream)
    }

    /// poll_messages (what joining or leaving a consumer group needs): read_topic implies it.
    fn polls(self, stream: u32, topic: u32) -> bool {
        let granted = matches!(self, Grant::Topic { stream: s, topic: t, poll: true, .. } if s == stream && t == topic);
        self.reads_topic(stream) || granted
    }

    /// The stream (and topic) an override names (it need not exist yet).
    fn target(self) -> Option<(u32, Option<u32>)> {
        match self {
            Grant::All | Grant::Nothing | Grant::ManageStreams => None,
            Grant::ManageStream(stream) | Grant::EmptyStream(stream) => Some((stream, None)),
            Grant::Topic { stream, topic, .. } => Some((stream, Some(topic))),
        }
    }

    /// What is left once `stream` is deleted: overrides naming it go.
    fn without_stream(self, deleted: u32) -> Grant {
        match self.target() {
            Some((stream, _)) if stream == deleted => Grant::Nothing,
            _ => self,
        }
    }

    /// What is left once `topic` of `stream` is deleted: the topic override goes, its stream's stays.
    fn without_topic(self, deleted_stream: u32, deleted_topic: u32) -> Grant {
        match self {
            Grant::Topic { stream, topic, .. } if (stream, topic) == (deleted_stream, deleted_topic) => {
                Grant::EmptyStream(stream)
            }
            _ => self,
        }
    }

    /// The `Permissions` value that states this shape.
    fn permissions(self) -> Permissions {
        let mut permissions = Permissions::default();
        match self {
            Grant::All => permissions.global = GlobalPermissions::ALL,
            Grant::Nothing => {}
            Grant::ManageStreams => permissions.global.manage_streams = true,
            Grant::ManageStream(stream) => {
                let on_stream = StreamPermissions { manage_stream: true, ..StreamPermissions::default() };
                permissions.streams.insert(stream, on_stream);
            }
            Grant::Topic { stream, topic, send, poll } => {
                let on_topic =
                    TopicPermissions { send_messages: send, poll_messages: poll, ..TopicPermissions::default() };
                let mut on_stream = StreamPermissions::default();
                on_stream.topics.insert(topic, on_topic);
                permissions.streams.insert(stream, on_stream);
            }
            Grant::EmptyStream(stream) => {
                permissions.streams.insert(stream, StreamPermissions::default());
            }
        }
        permissions
    }

    /// The shape a generated `Permissions` value states (the inverse of `permissions`).
    fn recognize(permissions: &Permissions) -> Grant {
        let mut candidates = vec![Grant::All, Grant::Nothing, Grant::ManageStreams];
        for (stream, on_stream) in &permissions.streams {
            candidates.push(Grant::ManageStream(*stream));
            candidates.push(Grant::EmptyStream(*stream));
            for (topic, on_topic) in &on_stream.topics {
                let (send, poll) = (on_topic.send_messages, on_topic.poll_messages);
                candidates.push(Grant::Topic { stream: *stream, topic: *topic, send, poll });
            }
        }
        candidates
            .into_iter()
            .find(|grant| grant.permissions() == *permissions)
            .unwrap_or_else(|| panic!("the generator made rights the model does not know: {permissions:?}"))
    }
}

#[derive(Debug, Clone)]
struct ModelUser {
    name: String,
    status: UserStatus,
    password_hash: String,
    grant: Grant,
    /// Whether `grant` was given (a user created or updated without permissions has none).
    given: bool,
    /// Token name to its hash and expiry.
    tokens: BTreeMap<String, (u128, Option<u64>)>,
}

/// The metadata as the commands' documentation describes it. Every method checks everything first
/// and changes the model only on success.
#[derive(Debug, Clone)]
struct Model {
    streams: BTreeMap<u32, StreamView>,
    users: BTreeMap<u32, ModelUser>,
}

/// A stream, topic or group name, and a name identifier: 1..=255 bytes.
fn is_wire_name(name: &str) -> bool {
    (1..=255).contains(&name.len())
}

fn is_username(name: &str) -> bool {
    (1..=50).contains(&name.chars().count())
}

fn is_token_name(name: &str) -> bool {
    (1..=30).contains(&name.chars().count())
}

/// The shape of a PHC string: `$` and something more, at most 1024 bytes.
fn is_password_hash(hash: &str) -> bool {
    hash.starts_with('$') && (2..=1024).contains(&hash.len())
}

/// The first option a topic cannot work with, in the order `TopicOption` lists them.
fn options_error(options: &TopicOptions) -> Option<u32> {
    if options.segment_size == 0 {
        Some(code::INVALID_SEGMENT_SIZE)
    } else if options.max_topic_size != 0 && options.max_topic_size < options.segment_size {
        Some(code::INVALID_TOPIC_SIZE)
    } else if options.messages_required_to_save == 0 || options.size_of_messages_required_to_save == 0 {
        Some(code::INVALID_OPTION_VALUE)
    } else if options.replication_factor == Some(0) {
        Some(code::INVALID_REPLICATION_FACTOR)
    } else {
        None
    }
}

fn lowest_free_id<V>(map: &BTreeMap<u32, V>) -> u32 {
    (0..).find(|id| !map.contains_key(id)).expect("ids are not exhausted")
}

/// Resolves an identifier among `map`'s values, named by `name_of`; `missing` is the not-found code.
fn find<V>(
    map: &BTreeMap<u32, V>,
    identifier: &Identifier,
    name_of: impl Fn(&V) -> &str,
    missing: u32,
) -> Result<u32, u32> {
    match identifier {
        Identifier::Numeric(id) if map.contains_key(id) => Ok(*id),
        Identifier::Numeric(_) => Err(missing),
        Identifier::Name(name) if !is_wire_name(name) => Err(code::INVALID_IDENTIFIER),
        Identifier::Name(name) => {
            map.iter().find(|(_, value)| name_of(value) == name).map(|(id, _)| *id).ok_or(missing)
        }
    }
}

fn deny_unless(allowed: bool) -> Result<(), u32> {
    if allowed {
        Ok(())
    } else {
        Err(code::PERMISSION_DENIED)
    }
}

impl Model {
    fn genesis(root_password_hash: &str) -> Model {
        let root = ModelUser {
            name: ROOT_USERNAME.to_owned(),
            status: UserStatus::Active,
            password_hash: root_password_hash.to_owned(),
            grant: Grant::All,
            given: true,
            tokens: BTreeMap::new(),
        };
        Model { streams: BTreeMap::new(), users: BTreeMap::from([(ROOT_USER_ID, root)]) }
    }

    fn view(&self) -> View {
        let users = self
            .users
            .iter()
            .map(|(id, user)| {
                let view = UserView {
                    name: user.name.clone(),
                    status: user.status,
                    password_hash: user.password_hash.clone(),
                    permissions: user.given.then(|| user.grant.permissions()),
                    tokens: user.tokens.clone(),
                };
                (*id, view)
            })
            .collect();
        View { streams: self.streams.clone(), users }
    }

    /// What `Metadata::apply` should answer, with a denial as its status code.
    fn apply(&mut self, actor: u32, now: u64, command: &MetadataCommand) -> Result<MetadataResult, u32> {
        use MetadataCommand as C;
        if let C::EndSession { member } = command {
            return Ok(self.end_session(*member));
        }
        let grant = self.acting_grant(actor)?;
        match command {
            C::CreateUser { username, password_hash, status, permissions } => {
                self.create_user(grant, username, password_hash, *status, permissions.as_ref())
            }
            C::UpdateUser { user, username, status } => self.update_user(grant, user, username.as_deref(), *status),
            C::DeleteUser { user } => self.delete_user(grant, user),
            C::UpdatePermissions { user, permissions } => self.update_permissions(grant, user, permissions.as_ref()),
            C::ChangePassword { user, password_hash } => self.change_password(actor, grant, user, password_hash),
            C::CreatePersonalAccessToken { name, token_hash, expiry } => {
                self.create_token(actor, now, name, *token_hash, *expiry)
            }
            C::DeletePersonalAccessToken { name } => self.delete_token(actor, name),
            C::CreateStream { name } => self.create_stream(grant, name),
            C::UpdateStream { stream, name } => self.update_stream(grant, stream, name),
            C::PurgeStream { stream } => self.purge_stream(grant, stream),
            C::DeleteStream { stream } => self.delete_stream(grant, stream),
            C::CreateTopic { stream, name, partitions_count, options } => {
                self.create_topic(grant, stream, name, *partitions_count, options)
            }
            C::UpdateTopic { stream, topic, name, update } => self.update_topic(grant, stream, topic, name, update),
            C::DeleteTopic { stream, topic } => self.delete_topic(grant, stream, topic),
            C::PurgeTopic { stream, topic } => {
                let (stream, topic) = self.managed_topic(grant, stream, topic)?;
                let partitions_count = self.streams[&stream].topics[&topic].partitions_count;
                Ok(MetadataResult::TopicPurged { stream, topic, partitions_count })
            }
            C::DeleteSegments { stream, topic, partition, count } => {
                let (stream, topic) = self.managed_topic(grant, stream, topic)?;
                if *partition >= self.streams[&stream].topics[&topic].partitions_count {
                    return Err(code::PARTITION_NOT_FOUND);
                }
                Ok(MetadataResult::SegmentsDeleted { stream, topic, partition: *partition, count: *count })
            }
            C::CreatePartitions { stream, topic, count } => self.create_partitions(grant, stream, topic, *count),
            C::DeletePartitions { stream, topic, count } => self.delete_partitions(grant, stream, topic, *count),
            C::CreateConsumerGroup { stream, topic, name } => self.create_group(grant, stream, topic, name),
            C::DeleteConsumerGroup { stream, topic, group } => self.delete_group(grant, stream, topic, group),
            C::JoinConsumerGroup { stream, topic, group, member } => self.join(grant, stream, topic, group, *member),
            C::LeaveConsumerGroup { stream, topic, group, member } => self.leave(grant, stream, topic, group, *member),
            C::EndSession { .. } => unreachable!("answered above"),
        }
    }

    /// The acting user's rights: it must exist and be active.
    fn acting_grant(&self, actor: u32) -> Result<Grant, u32> {
        let user = self.users.get(&actor).ok_or(code::UNAUTHENTICATED)?;
        if user.status == UserStatus::Inactive {
            return Err(code::USER_INACTIVE);
        }
        Ok(user.grant)
    }

    fn find_user(&self, user: &Identifier) -> Result<u32, u32> {
        find(&self.users, user, |user| &user.name, code::NOT_FOUND)
    }

    fn find_stream(&self, stream: &Identifier) -> Result<u32, u32> {
        find(&self.streams, stream, |stream| &stream.name, code::STREAM_NOT_FOUND)
    }

    fn find_topic(&self, stream: &Identifier, topic: &Identifier) -> Result<(u32, u32), u32> {
        let stream = self.find_stream(stream)?;
        let topic = find(&self.streams[&stream].topics, topic, |topic| &topic.name, code::TOPIC_NOT_FOUND)?;
        Ok((stream, topic))
    }

    fn find_group(&self, stream: &Identifier, topic: &Identifier, group: &Identifier) -> Result<(u32, u32, u32), u32> {
        let (stream, topic) = self.find_topic(stream, topic)?;
        let groups = &self.streams[&stream].topics[&topic].groups;
        let group = find(groups, group, |group| &group.name, code::GROUP_NOT_FOUND)?;
        Ok((stream, topic, group))
    }

    /// A topic the acting user may manage.
    fn managed_topic(&self, grant: Grant, stream: &Identifier, topic: &Identifier) -> Result<(u32, u32), u32> {
        let (stream, topic) = self.find_topic(stream, topic)?;
        deny_unless(grant.manages_stream(stream))?;
        Ok((stream, topic))
    }

    fn topic_mut(&mut self, stream: u32, topic: u32) -> &mut TopicView {
        self.streams.get_mut(&stream).and_then(|stream| stream.topics.get_mut(&topic)).expect("found before")
    }

    /// Each topic of a stream with its partition count, as purge and delete report them.
    fn topic_sizes(&self, stream: u32) -> Vec<(u32, u32)> {
        self.streams[&stream].topics.iter().map(|(id, topic)| (*id, topic.partitions_count)).collect()
    }

    fn create_user(
        &mut self,
        grant: Grant,
        username: &str,
        password_hash: &str,
        status: UserStatus,
        permissions: Option<&Permissions>,
    ) -> Result<MetadataResult, u32> {
        deny_unless(grant.manages_users())?;
        if !is_username(username) {
            return Err(code::INVALID_USERNAME);
        }
        if !is_password_hash(password_hash) {
            return Err(code::INVALID_PASSWORD);
        }
        if self.users.values().any(|user| user.name == username) {
            return Err(code::USER_EXISTS);
        }
        if self.users.len() >= LIMITS.users_max as usize {
            return Err(code::USERS_LIMIT);
        }
        // An override may name a stream or topic not created yet (as the reference allows).
        let granted = permissions.map_or(Grant::Nothing, Grant::recognize);

        let id = lowest_free_id(&self.users);
        let user = ModelUser {
            name: username.to_owned(),
            status,
            password_hash: password_hash.to_owned(),
            grant: granted,
            given: permissions.is_some(),
            tokens: BTreeMap::new(),
        };
        self.users.insert(id, user);
        Ok(MetadataResult::UserCreated { user: id })
    }

    fn update_user(
        &mut self,
        grant: Grant,
        user: &Identifier,
        username: Option<&str>,
        status: Option<UserStatus>,
    ) -> Result<MetadataResult, u32> {
        deny_unless(grant.manages_users())?;
        let id = self.find_user(user)?;
        if id == ROOT_USER_ID && status == Some(UserStatus::Inactive) {
            return Err(code::CANNOT_CHANGE_ROOT);
        }
        if let Some(username) = username {
            if !is_username(username) {
                return Err(code::INVALID_USERNAME);
            }
            if self.users.iter().any(|(other, user)| *other != id && user.name == username) {
                return Err(code::USER_EXISTS);
            }
        }

        let target = self.users.get_mut(&id).expect("found above");
        if let Some(username) = username {
            target.name = username.to_owned();
        }
        if let Some(status) = status {
            target.status = status;
        }
        Ok(MetadataResult::UserUpdated { user: id })
    }

    fn delete_user(&mut self, grant: Grant, user: &Identifier) -> Result<MetadataResult, u32> {
        deny_unless(grant.manages_users())?;
        let id = self.find_user(user)?;
        if id == ROOT_USER_ID {
            return Err(code::CANNOT_DELETE_ROOT);
        }
        self.users.remove(&id);
        Ok(MetadataResult::UserDeleted { user: id })
    }

    fn update_permissions(
        &mut self,
        grant: Grant,
        user: &Identifier,
        permissions: Option<&Permissions>,
    ) -> Result<MetadataResult, u32> {
        deny_unless(grant.manages_users())?;
        let id = self.find_user(user)?;
        if id == ROOT_USER_ID {
            return Err(code::CANNOT_CHANGE_ROOT);
        }
        // An override may name a stream or topic not created yet (as the reference allows).
        let target = self.users.get_mut(&id).expect("found above");
        target.grant = permissions.map_or(Grant::Nothing, Grant::recognize);
        target.given = permissions.is_some();
        Ok(MetadataResult::PermissionsUpdated { user: id })
    }

    /// A user may change its own password; anyone else's needs manage_users.
    fn change_password(
        &mut self,
        actor: u32,
        grant: Grant,
        user: &Identifier,
        password_hash: &str,
    ) -> Result<MetadataResult, u32> {
        let id = self.find_user(user)?;
        deny_unless(id == actor || grant.manages_users())?;
        if !is_password_hash(password_hash) {
            return Err(code::INVALID_PASSWORD);
        }
        self.users.get_mut(&id).expect("found above").password_hash = password_hash.to_owned();
        Ok(MetadataResult::PasswordChanged { user: id })
    }

    /// A token of the acting user; its name is unique among the user's tokens, its hash in the cluster.
    fn create_token(
        &mut self,
        actor: u32,
        now: u64,
        name: &str,
        token_hash: u128,
        expiry: Option<u64>,
    ) -> Result<MetadataResult, u32> {
        if !is_token_name(name) {
            return Err(code::INVALID_TOKEN_NAME);
        }
        let hash_taken = self.users.values().flat_map(|user| user.tokens.values()).any(|(hash, _)| *hash == token_hash);
        let tokens = &self.users[&actor].tokens;
        if tokens.contains_key(name) || hash_taken {
            return Err(code::TOKEN_EXISTS);
        }
        if tokens.len() >= LIMITS.tokens_per_user_max as usize {
            return Err(code::TOKENS_LIMIT);
        }
        let expires_at = expiry.map(|lifetime| now.saturating_add(lifetime));
        let user = self.users.get_mut(&actor).expect("the acting user exists");
        user.tokens.insert(name.to_owned(), (token_hash, expires_at));
        Ok(MetadataResult::PersonalAccessTokenCreated { user: actor, expires_at })
    }

    fn delete_token(&mut self, actor: u32, name: &str) -> Result<MetadataResult, u32> {
        let user = self.users.get_mut(&actor).expect("the acting user exists");
        user.tokens.remove(name).ok_or(code::NOT_FOUND)?;
        Ok(MetadataResult::PersonalAccessTokenDeleted { user: actor })
    }

    fn create_stream(&mut self, grant: Grant, name: &str) -> Result<MetadataResult, u32> {
        deny_unless(grant.manages_streams())?;
        if !is_wire_name(name) {
            return Err(code::INVALID_STREAM_NAME);
        }
        if self.streams.values().any(|stream| stream.name == name) {
            return Err(code::STREAM_EXISTS);
        }
        if self.streams.len() >= LIMITS.streams_max as usize {
            return Err(code::STREAMS_LIMIT);
        }
        let id = lowest_free_id(&self.streams);
        self.streams.insert(id, StreamView { name: name.to_owned(), topics: BTreeMap::new() });
        Ok(MetadataResult::StreamCreated { stream: id })
    }

    fn update_stream(&mut self, grant: Grant, stream: &Identifier, name: &str) -> Result<MetadataResult, u32> {
        let id = self.find_stream(stream)?;
        deny_unless(grant.manages_stream(id))?;
        if !is_wire_name(name) {
            return Err(code::INVALID_STREAM_NAME);
        }
        if self.streams.iter().any(|(other, stream)| *other != id && stream.name == name) {
            return Err(code::STREAM_EXISTS);
        }
        self.streams.get_mut(&id).expect("found above").name = name.to_owned();
        Ok(MetadataResult::StreamUpdated { stream: id })
    }

    fn purge_stream(&mut self, grant: Grant, stream: &Identifier) -> Result<MetadataResult, u32> {
        let id = self.find_stream(stream)?;
        deny_unless(grant.manages_stream(id))?;
        Ok(MetadataResult::StreamPurged { stream: id, topics: self.topic_sizes(id) })
    }

    /// Deleting a stream drops every override that names it: its id will be handed out again.
    fn delete_stream(&mut self, grant: Grant, stream: &Identifier) -> Result<MetadataResult, u32> {
        let id = self.find_stream(stream)?;
        deny_unless(grant.manages_stream(id))?;
        let topics = self.topic_sizes(id);
        self.streams.remove(&id);
        for user in self.users.values_mut() {
            user.grant = user.grant.without_stream(id);
        }
        Ok(MetadataResult::StreamDeleted { stream: id, topics })
    }

    fn create_topic(
        &mut self,
        grant: Grant,
        stream: &Identifier,
        name: &str,
        partitions_count: u32,
        options: &TopicOptions,
    ) -> Result<MetadataResult, u32> {
        let stream = self.find_stream(stream)?;
        deny_unless(grant.manages_stream(stream))?;
        if !is_wire_name(name) {
            return Err(code::INVALID_TOPIC_NAME);
        }
        let topics = &self.streams[&stream].topics;
        if topics.values().any(|topic| topic.name == name) {
            return Err(code::TOPIC_EXISTS);
        }
        if let Some(error) = options_error(options) {
            return Err(error);
        }
        if topics.len() >= LIMITS.topics_per_stream_max as usize {
            return Err(code::TOPICS_LIMIT);
        }
        if partitions_count > LIMITS.partitions_per_topic_max {
            return Err(code::PARTITIONS_LIMIT);
        }
        let id = lowest_free_id(topics);
        let topic =
            TopicView { name: name.to_owned(), partitions_count, options: options.clone(), groups: BTreeMap::new() };
        self.streams.get_mut(&stream).expect("found above").topics.insert(id, topic);
        Ok(MetadataResult::TopicCreated { stream, topic: id, partitions_count })
    }

    /// Renames a topic and changes the options the update names; the result must still be valid.
    fn update_topic(
        &mut self,
        grant: Grant,
        stream: &Identifier,
        topic: &Identifier,
        name: &str,
        update: &TopicUpdate,
    ) -> Result<MetadataResult, u32> {
        let (stream, topic) = self.managed_topic(grant, stream, topic)?;
        if !is_wire_name(name) {
            return Err(code::INVALID_TOPIC_NAME);
        }
        let topics = &self.streams[&stream].topics;
        if topics.iter().any(|(other, existing)| *other != topic && existing.name == name) {
            return Err(code::TOPIC_EXISTS);
        }
        let mut options = topics[&topic].options.clone();
        options.compression = update.compression.unwrap_or(options.compression);
        options.message_expiry = update.message_expiry.unwrap_or(options.message_expiry);
        options.max_topic_size = update.max_topic_size.unwrap_or(options.max_topic_size);
        if let Some(error) = options_error(&options) {
            return Err(error);
        }
        let updated = self.topic_mut(stream, topic);
        updated.name = name.to_owned();
        updated.options = options;
        Ok(MetadataResult::TopicUpdated { stream, topic })
    }

    /// Deleting a topic drops every override that names it (the stream's override stays).
    fn delete_topic(&mut self, grant: Grant, stream: &Identifier, topic: &Identifier) -> Result<MetadataResult, u32> {
        let (stream, topic) = self.managed_topic(grant, stream, topic)?;
        let removed = self.streams.get_mut(&stream).and_then(|entry| entry.topics.remove(&topic));
        let partitions_count = removed.expect("found above").partitions_count;
        for user in self.users.values_mut() {
            user.grant = user.grant.without_topic(stream, topic);
        }
        Ok(MetadataResult::TopicDeleted { stream, topic, partitions_count })
    }

    fn create_partitions(
        &mut self,
        grant: Grant,
        stream: &Identifier,
        topic: &Identifier,
        count: u32,
    ) -> Result<MetadataResult, u32> {
        let (stream, topic) = self.managed_topic(grant, stream, topic)?;
        let existing = self.streams[&stream].topics[&topic].partitions_count;
        if count == 0 {
            return Err(code::INVALID_PARTITIONS_COUNT);
        }
        if u64::from(existing) + u64::from(count) > u64::from(LIMITS.partitions_per_topic_max) {
            return Err(code::PARTITIONS_LIMIT);
        }
        self.topic_mut(stream, topic).partitions_count = existing + count;
        Ok(MetadataResult::PartitionsCreated { stream, topic, first: existing, count })
    }

    fn delete_partitions(
        &mut self,
        grant: Grant,
        stream: &Identifier,
        topic: &Identifier,
        count: u32,
    ) -> Result<MetadataResult, u32> {
        let (stream, topic) = self.managed_topic(grant, stream, topic)?;
        let existing = self.streams[&stream].topics[&topic].partitions_count;
        if count == 0 || count > existing {
            return Err(code::INVALID_PARTITIONS_COUNT);
        }
        self.topic_mut(stream, topic).partitions_count = existing - count;
        Ok(MetadataResult::PartitionsDeleted { stream, topic, first: existing - count, count })
    }

    fn create_group(
        &mut self,
        grant: Grant,
        stream: &Identifier,
        topic: &Identifier,
        name: &str,
    ) -> Result<MetadataResult, u32> {
        let (stream, topic) = self.find_topic(stream, topic)?;
        deny_unless(grant.reads_topic(stream))?;
        if !is_wire_name(name) {
            return Err(code::INVALID_GROUP_NAME);
        }
        let groups = &self.streams[&stream].topics[&topic].groups;
        if groups.values().any(|group| group.name == name) {
            return Err(code::GROUP_EXISTS);
        }
        if groups.len() >= LIMITS.consumer_groups_per_topic_max as usize {
            return Err(code::TOPIC_FULL);
        }
        let id = lowest_free_id(groups);
        self.topic_mut(stream, topic).groups.insert(id, GroupView { name: name.to_owned(), members: BTreeSet::new() });
        Ok(MetadataResult::ConsumerGroupCreated { stream, topic, group: id })
    }

    fn delete_group(
        &mut self,
        grant: Grant,
        stream: &Identifier,
        topic: &Identifier,
        group: &Identifier,
    ) -> Result<MetadataResult, u32> {
        let (stream, topic, group) = self.find_group(stream, topic, group)?;
        deny_unless(grant.reads_topic(stream))?;
        self.topic_mut(stream, topic).groups.remove(&group);
        Ok(MetadataResult::ConsumerGroupDeleted { stream, topic, group })
    }

    /// Joining a group one is already in succeeds and changes nothing.
    fn join(
        &mut self,
        grant: Grant,
        stream: &Identifier,
        topic: &Identifier,
        group: &Identifier,
        member: u128,
    ) -> Result<MetadataResult, u32> {
        let (stream, topic, group) = self.find_group(stream, topic, group)?;
        deny_unless(grant.polls(stream, topic))?;
        let members = &mut self.topic_mut(stream, topic).groups.get_mut(&group).expect("found above").members;
        if members.contains(&member) {
            return Ok(MetadataResult::ConsumerGroupJoined { stream, topic, group, already_member: true });
        }
        if members.len() >= LIMITS.members_per_group_max as usize {
            return Err(code::TOPIC_FULL);
        }
        members.insert(member);
        Ok(MetadataResult::ConsumerGroupJoined { stream, topic, group, already_member: false })
    }

    fn leave(
        &mut self,
        grant: Grant,
        stream: &Identifier,
        topic: &Identifier,
        group: &Identifier,
        member: u128,
    ) -> Result<MetadataResult, u32> {
        let (stream, topic, group) = self.find_group(stream, topic, group)?;
        deny_unless(grant.polls(stream, topic))?;
        let members = &mut self.topic_mut(stream, topic).groups.get_mut(&group).expect("found above").members;
        if !members.remove(&member) {
            return Err(code::MEMBER_NOT_FOUND);
        }
        Ok(MetadataResult::ConsumerGroupLeft { stream, topic, group })
    }

    /// A closed connection's client leaves every group it was in. The node makes this command, not
    /// a client, so whoever the acting user is (deleted or deactivated meanwhile) it cannot fail.
    fn end_session(&mut self, member: u128) -> MetadataResult {
        let mut groups = Vec::new();
        for (stream_id, stream) in &mut self.streams {
            for (topic_id, topic) in &mut stream.topics {
                for (group_id, group) in &mut topic.groups {
                    if group.members.remove(&member) {
                        groups.push((*stream_id, *topic_id, *group_id));
                    }
                }
            }
        }
        MetadataResult::SessionEnded { groups }
    }
}

// ---------------------------------------------------------------------------------------------
// One step: the command applied to both, and every comparison.
// ---------------------------------------------------------------------------------------------

/// One committed command and the user it acts as.
#[derive(Clone)]
struct Step {
    actor: u32,
    command: MetadataCommand,
}

impl fmt::Debug for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "user {} applies {:?}", self.actor, self.command)
    }
}

/// Applies `step` to both and returns the outcome (`Err` holds the status code), or `Err` with
/// the first disagreement: the outcome, a denial that changed the state, a broken invariant, or
/// the visible state.
fn check_step(
    model: &mut Model,
    metadata: &mut Metadata,
    step: &Step,
    timestamp: u64,
) -> Result<Result<(), u32>, String> {
    let before = metadata.snapshot();
    let predicted = model.apply(step.actor, timestamp, &step.command);
    let actual = metadata.apply(step.actor, timestamp, &step.command);
    let outcome = match (&predicted, &actual) {
        (Ok(expected), Ok(done)) if expected == done => Ok(()),
        (Err(expected), Err(error)) if *expected == error.code() => {
            if metadata.snapshot() != before {
                return Err(format!("denied ({error}) but the state changed"));
            }
            Err(*expected)
        }
        _ => return Err(format!("model predicted {predicted:?}, state machine answered {actual:?}")),
    };
    metadata.check_invariants().map_err(|broken| format!("invariant broken: {broken}"))?;
    compare_views(&model.view(), &view_of(metadata))?;
    Ok(outcome)
}

fn timestamp_of(index: usize) -> u64 {
    TIMESTAMP_START_NS + TIMESTAMP_STEP_NS * u64::try_from(index).expect("few steps")
}

/// Password hashes made the way the node makes them (the first one is the root user's).
fn password_hashes() -> &'static [String; 3] {
    static HASHES: OnceLock<[String; 3]> = OnceLock::new();
    HASHES.get_or_init(|| {
        let hash = |password: &str, salt: u8| hash_password(password, [salt; SALT_SIZE_BYTES], PasswordCost::Test);
        [hash("root secret", 1), hash("user secret", 2), hash("new secret", 3)]
    })
}

/// What every sequence starts from: stream "s0" (id 0) with topics "t0" (2 partitions, groups
/// "g0" with members 1 and 2, and "g1") and "t1" (3 partitions, group "g0"), stream "s1" (id 1)
/// with topic "t0" (1 partition, group "g0"), and the users `PRELUDE_USERS` lists. Users, the
/// topics of "s0", the groups of its "t0" and the members of their "g0" are at their limits.
fn prelude() -> Vec<Step> {
    let by_root = |command| Step { actor: ROOT_USER_ID, command };
    let create_user = |username: &str, grant: Grant| {
        by_root(MetadataCommand::CreateUser {
            username: username.to_owned(),
            password_hash: password_hashes()[1].clone(),
            status: UserStatus::Active,
            permissions: Some(grant.permissions()),
        })
    };
    let create_topic = |stream: &str, name: &str, partitions_count| {
        by_root(MetadataCommand::CreateTopic {
            stream: stream.into(),
            name: name.into(),
            partitions_count,
            options: TopicOptions::default(),
        })
    };
    let create_group = |stream: &str, topic: &str, name: &str| {
        by_root(MetadataCommand::CreateConsumerGroup { stream: stream.into(), topic: topic.into(), name: name.into() })
    };
    let join = |stream: &str, topic: &str, group: &str, member| {
        by_root(MetadataCommand::JoinConsumerGroup {
            stream: stream.into(),
            topic: topic.into(),
            group: group.into(),
            member,
        })
    };
    let streams = vec![
        by_root(MetadataCommand::CreateStream { name: "s0".into() }),
        create_topic("s0", "t0", 2),
        create_topic("s0", "t1", 3),
        create_group("s0", "t0", "g0"),
        create_group("s0", "t0", "g1"),
        create_group("s0", "t1", "g0"),
        join("s0", "t0", "g0", 1),
        join("s0", "t0", "g0", 2),
        by_root(MetadataCommand::CreateStream { name: "s1".into() }),
        create_topic("s1", "t0", 1),
        create_group("s1", "t0", "g0"),
    ];
    streams.into_iter().chain(PRELUDE_USERS.iter().map(|(_, username, grant)| create_user(username, *grant))).collect()
}

/// The users the prelude creates, with the ids they get and their rights.
const PRELUDE_USERS: [(u32, &str, Grant); 4] = [
    (ALICE, "alice", Grant::ManageStreams),
    (BOB, "bob", Grant::Nothing),
    (CAROL, "carol", Grant::ManageStream(0)),
    (DAVE, "dave", Grant::Topic { stream: 0, topic: 0, send: true, poll: true }),
];

/// A model and a state machine that have both applied the prelude.
fn after_prelude() -> (Model, Metadata) {
    let root_hash = &password_hashes()[0];
    let mut model = Model::genesis(root_hash);
    let mut metadata = Metadata::genesis(root_hash, LIMITS);
    for (index, step) in prelude().iter().enumerate() {
        let outcome = check_step(&mut model, &mut metadata, step, timestamp_of(index));
        assert_eq!(outcome, Ok(Ok(())), "prelude step {index}: {step:?}");
    }
    for (id, username, _) in PRELUDE_USERS {
        assert_eq!(model.users[&id].name, username, "the prelude's users get the lowest free ids");
    }
    (model, metadata)
}

/// Runs the prelude and then `steps`, recording each outcome in `coverage`.
fn run_sequence(steps: &[Step], coverage: &mut Coverage) -> Result<(), String> {
    let (mut model, mut metadata) = after_prelude();
    let first = prelude().len();
    for (index, step) in steps.iter().enumerate() {
        let outcome = check_step(&mut model, &mut metadata, step, timestamp_of(first + index))
            .map_err(|difference| format!("step {index}, {step:?}:\n{difference}"))?;
        coverage.record(&step.command, outcome);
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Coverage: every variant must both succeed and be denied, and every reachable code must show.
// ---------------------------------------------------------------------------------------------

fn variant(command: &MetadataCommand) -> &'static str {
    use MetadataCommand as C;
    match command {
        C::CreateUser { .. } => "CreateUser",
        C::UpdateUser { .. } => "UpdateUser",
        C::DeleteUser { .. } => "DeleteUser",
        C::UpdatePermissions { .. } => "UpdatePermissions",
        C::ChangePassword { .. } => "ChangePassword",
        C::CreatePersonalAccessToken { .. } => "CreatePersonalAccessToken",
        C::DeletePersonalAccessToken { .. } => "DeletePersonalAccessToken",
        C::CreateStream { .. } => "CreateStream",
        C::UpdateStream { .. } => "UpdateStream",
        C::PurgeStream { .. } => "PurgeStream",
        C::DeleteStream { .. } => "DeleteStream",
        C::CreateTopic { .. } => "CreateTopic",
        C::DeleteTopic { .. } => "DeleteTopic",
        C::UpdateTopic { .. } => "UpdateTopic",
        C::PurgeTopic { .. } => "PurgeTopic",
        C::DeleteSegments { .. } => "DeleteSegments",
        C::CreatePartitions { .. } => "CreatePartitions",
        C::DeletePartitions { .. } => "DeletePartitions",
        C::CreateConsumerGroup { .. } => "CreateConsumerGroup",
        C::DeleteConsumerGroup { .. } => "DeleteConsumerGroup",
        C::JoinConsumerGroup { .. } => "JoinConsumerGroup",
        C::LeaveConsumerGroup { .. } => "LeaveConsumerGroup",
        C::EndSession { .. } => "EndSession",
    }
}

const VARIANTS_COUNT: usize = 23;

/// The variants no acting user can be denied.
const NEVER_DENIED: [&str; 1] = ["EndSession"];

#[derive(Debug, Default)]
struct Coverage {
    applied: BTreeMap<&'static str, u32>,
    /// Per variant, each status code it was denied with and how often.
    denied: BTreeMap<&'static str, BTreeMap<u32, u32>>,
}

impl Coverage {
    fn record(&mut self, command: &MetadataCommand, outcome: Result<(), u32>) {
        let variant = variant(command);
        match outcome {
            Ok(()) => *self.applied.entry(variant).or_default() += 1,
            Err(code) => *self.denied.entry(variant).or_default().entry(code).or_default() += 1,
        }
    }

    fn assert_complete(&self) {
        for (variant, applied) in &self.applied {
            let denied = self.denied.get(variant).map(|codes| codes.values().sum::<u32>()).unwrap_or(0);
            println!("{variant:>26}: {applied:>5} applied, {denied:>5} denied {:?}", self.denied.get(variant));
        }
        let applied: BTreeSet<_> = self.applied.keys().collect();
        let denied: BTreeSet<_> = self.denied.keys().collect();
        assert_eq!(applied.len(), VARIANTS_COUNT, "some variants never succeeded: only {applied:?}");
        assert_eq!(
            denied.len(),
            VARIANTS_COUNT - NEVER_DENIED.len(),
            "some variants were never denied: only {denied:?}"
        );
        assert!(NEVER_DENIED.iter().all(|variant| !denied.contains(variant)), "denied: {denied:?}");
        let seen: BTreeSet<u32> = self.denied.values().flat_map(|codes| codes.keys().copied()).collect();
        let unseen: Vec<u32> = code::REACHABLE.into_iter().filter(|code| !seen.contains(code)).collect();
        assert!(unseen.is_empty(), "no command was denied with codes {unseen:?}");
    }
}

// ---------------------------------------------------------------------------------------------
// Generators: small pools of ids and names, so commands often name existing objects, collide
// with existing names and reach limits; a few names and values sit just past a rule's edge.
// ---------------------------------------------------------------------------------------------

const STREAM_NAMES: &[&str] = &["s0", "s1", "s2", "s3", "s4"];
const TOPIC_NAMES: &[&str] = &["t0", "t1", "t2", "t3"];
const GROUP_NAMES: &[&str] = &["g0", "g1", "g2"];
const USERNAMES: &[&str] = &["alice", "bob", "iggy", "carol", "dave", "erin", "frank", "grace", "heidi"];
const TOKEN_NAMES: &[&str] = &["ci", "laptop"];

/// Mostly the prelude's users, often root, sometimes ids no user can have (ids stay below the
/// users limit). A deleted user's id acts as nobody until a new user takes it, with new rights.
fn actor() -> BoxedStrategy<u32> {
    prop_oneof![6 => Just(ROOT_USER_ID), 8 => ALICE..=DAVE, 1 => prop_oneof![Just(LIMITS.users_max), Just(1_000)]]
        .boxed()
}

/// A name from `pool`, sometimes one of `edges` (legal or not, at the edge of the name rules).
fn name(pool: &'static [&'static str], edges: Vec<String>) -> BoxedStrategy<String> {
    prop_oneof![8 => prop::sample::select(pool).prop_map(str::to_owned), 1 => prop::sample::select(edges)].boxed()
}

fn stream_name() -> BoxedStrategy<String> {
    // 128 two-byte characters: 256 bytes, one too many.
    name(STREAM_NAMES, vec![String::new(), "é".repeat(128)])
}

fn topic_name() -> BoxedStrategy<String> {
    name(TOPIC_NAMES, vec![String::new(), "t".repeat(256)])
}

fn group_name() -> BoxedStrategy<String> {
    name(GROUP_NAMES, vec![String::new(), "g".repeat(256)])
}

fn username() -> BoxedStrategy<String> {
    // Usernames count characters: 50 two-byte ones are legal, 51 are not.
    name(USERNAMES, vec![String::new(), "é".repeat(50), "u".repeat(51)])
}

fn token_name() -> BoxedStrategy<String> {
    name(TOKEN_NAMES, vec![String::new(), "é".repeat(30), "t".repeat(31)])
}

/// Mostly ids 0 and 1 and the first two of `names` (what the prelude creates), sometimes any id of
/// `ids` (up to one that never exists: ids stay below their limit) or name of `names`, and
/// sometimes a malformed name.
fn identifier(ids: Range<u32>, names: &'static [&'static str]) -> BoxedStrategy<Identifier> {
    prop_oneof![
        12 => (0..2u32).prop_map(Identifier::Numeric),
        4 => ids.prop_map(Identifier::Numeric),
        12 => prop::sample::select(&names[..2]).prop_map(Identifier::from),
        4 => prop::sample::select(names).prop_map(Identifier::from),
        1 => prop::sample::select(vec![String::new(), "n".repeat(256)]).prop_map(Identifier::Name),
    ]
    .boxed()
}

fn stream() -> BoxedStrategy<Identifier> {
    identifier(0..LIMITS.streams_max + 1, STREAM_NAMES)
}

fn topic() -> BoxedStrategy<Identifier> {
    identifier(0..LIMITS.topics_per_stream_max + 1, TOPIC_NAMES)
}

fn group() -> BoxedStrategy<Identifier> {
    identifier(0..LIMITS.consumer_groups_per_topic_max + 1, GROUP_NAMES)
}

fn user() -> BoxedStrategy<Identifier> {
    identifier(0..LIMITS.users_max + 2, USERNAMES)
}

fn grant() -> BoxedStrategy<Grant> {
    prop_oneof![
        1 => Just(Grant::All),
        1 => Just(Grant::Nothing),
        1 => Just(Grant::ManageStreams),
        2 => (0..LIMITS.streams_max + 1).prop_map(Grant::ManageStream),
        2 => (0..LIMITS.streams_max + 1, 0..LIMITS.topics_per_stream_max + 1, any::<bool>(), any::<bool>())
            .prop_map(|(stream, topic, send, poll)| Grant::Topic { stream, topic, send, poll }),
    ]
    .boxed()
}

fn password_hash() -> BoxedStrategy<String> {
    prop_oneof![
        6 => (0..password_hashes().len()).prop_map(|index| password_hashes()[index].clone()),
        1 => Just("plaintext".to_owned()),
        1 => Just("$".to_owned()),
    ]
    .boxed()
}

fn status() -> BoxedStrategy<UserStatus> {
    prop_oneof![Just(UserStatus::Active), Just(UserStatus::Inactive)].boxed()
}

fn compression() -> BoxedStrategy<Compression> {
    prop_oneof![Just(Compression::None), Just(Compression::Gzip)].boxed()
}

/// Mostly legal options; sometimes one (or several) a topic cannot work with.
fn topic_options() -> BoxedStrategy<TopicOptions> {
    let default = TopicOptions::default;
    let legal = (compression(), prop_oneof![Just(0u64), Just(60_000_000)], prop_oneof![Just(0u64), Just(2 << 30)])
        .prop_map(move |(compression, message_expiry, max_topic_size)| TopicOptions {
            compression,
            message_expiry,
            max_topic_size,
            ..default()
        });
    prop_oneof![
        5 => legal,
        1 => Just(TopicOptions { segment_size: 0, ..default() }),
        1 => Just(TopicOptions { max_topic_size: 1, ..default() }),
        1 => Just(TopicOptions { messages_required_to_save: 0, ..default() }),
        1 => Just(TopicOptions { size_of_messages_required_to_save: 0, ..default() }),
        1 => Just(TopicOptions { replication_factor: Some(0), ..default() }),
        // Several at once: the first in `TopicOption` order is the one reported.
        1 => Just(TopicOptions {
            max_topic_size: 1,
            messages_required_to_save: 0,
            replication_factor: Some(0),
            ..default()
        }),
    ]
    .boxed()
}

fn topic_update() -> BoxedStrategy<TopicUpdate> {
    let max_topic_size = prop_oneof![Just(None), Just(Some(0)), Just(Some(1)), Just(Some(2 << 30))];
    (prop::option::of(compression()), prop::option::of(Just(120_000_000u64)), max_topic_size)
        .prop_map(|(compression, message_expiry, max_topic_size)| TopicUpdate {
            compression,
            message_expiry,
            max_topic_size,
        })
        .boxed()
}

fn command() -> BoxedStrategy<MetadataCommand> {
    use MetadataCommand as C;
    let member = || 1u128..=3;
    let partitions_count = prop_oneof![8 => 0u32..=4, 1 => Just(LIMITS.partitions_per_topic_max + 1)];
    let expiry = prop_oneof![Just(None), Just(Some(1_000u64)), Just(Some(u64::MAX))];
    let created_status = prop_oneof![3 => Just(UserStatus::Active), 1 => Just(UserStatus::Inactive)];
    prop_oneof![
        4 => stream_name().prop_map(|name| C::CreateStream { name }),
        2 => (stream(), stream_name()).prop_map(|(stream, name)| C::UpdateStream { stream, name }),
        1 => stream().prop_map(|stream| C::PurgeStream { stream }),
        1 => stream().prop_map(|stream| C::DeleteStream { stream }),
        6 => (stream(), topic_name(), partitions_count, topic_options()).prop_map(
            |(stream, name, partitions_count, options)| C::CreateTopic { stream, name, partitions_count, options }
        ),
        2 => (stream(), topic(), topic_name(), topic_update())
            .prop_map(|(stream, topic, name, update)| C::UpdateTopic { stream, topic, name, update }),
        1 => (stream(), topic()).prop_map(|(stream, topic)| C::DeleteTopic { stream, topic }),
        1 => (stream(), topic()).prop_map(|(stream, topic)| C::PurgeTopic { stream, topic }),
        2 => (stream(), topic(), 0u32..5, 1u32..4).prop_map(|(stream, topic, partition, count)| {
            C::DeleteSegments { stream, topic, partition, count }
        }),
        2 => (stream(), topic(), 0u32..=5)
            .prop_map(|(stream, topic, count)| C::CreatePartitions { stream, topic, count }),
        2 => (stream(), topic(), 0u32..=5)
            .prop_map(|(stream, topic, count)| C::DeletePartitions { stream, topic, count }),
        4 => (stream(), topic(), group_name())
            .prop_map(|(stream, topic, name)| C::CreateConsumerGroup { stream, topic, name }),
        2 => (stream(), topic(), group())
            .prop_map(|(stream, topic, group)| C::DeleteConsumerGroup { stream, topic, group }),
        5 => (stream(), topic(), group(), member())
            .prop_map(|(stream, topic, group, member)| C::JoinConsumerGroup { stream, topic, group, member }),
        5 => (stream(), topic(), group(), member())
            .prop_map(|(stream, topic, group, member)| C::LeaveConsumerGroup { stream, topic, group, member }),
        4 => (username(), password_hash(), created_status, prop::option::weighted(0.9, grant()))
            .prop_map(|(username, password_hash, status, grant)| C::CreateUser {
                username,
                password_hash,
                status,
                permissions: grant.map(Grant::permissions),
            }),
        2 => (user(), prop::option::of(username()), prop::option::of(status()))
            .prop_map(|(user, username, status)| C::UpdateUser { user, username, status }),
        3 => user().prop_map(|user| C::DeleteUser { user }),
        3 => (user(), prop::option::weighted(0.9, grant()))
            .prop_map(|(user, grant)| C::UpdatePermissions { user, permissions: grant.map(Grant::permissions) }),
        1 => (user(), password_hash()).prop_map(|(user, password_hash)| C::ChangePassword { user, password_hash }),
        2 => (token_name(), 1u128..=12, expiry)
            .prop_map(|(name, token_hash, expiry)| C::CreatePersonalAccessToken { name, token_hash, expiry }),
        3 => token_name().prop_map(|name| C::DeletePersonalAccessToken { name }),
        1 => member().prop_map(|member| C::EndSession { member }),
    ]
    .boxed()
}

fn steps() -> BoxedStrategy<Vec<Step>> {
    let step = (actor(), command()).prop_map(|(actor, command)| Step { actor, command });
    prop::collection::vec(step, 1..=STEPS_MAX).boxed()
}

// ---------------------------------------------------------------------------------------------
// The tests.
// ---------------------------------------------------------------------------------------------

#[test]
fn random_command_sequences_agree_with_the_model() {
    // No regression file: this test may only add itself to the tree; a failure prints its input.
    let config = Config { cases: CASES, failure_persistence: None, ..Config::default() };
    let coverage = RefCell::new(Coverage::default());
    let mut runner = TestRunner::new(config);
    let result =
        runner.run(&steps(), |steps| run_sequence(&steps, &mut coverage.borrow_mut()).map_err(TestCaseError::fail));
    if let Err(failure) = result {
        panic!("{failure}");
    }
    coverage.into_inner().assert_complete();
}

/// The checker can fail. A model that forgot the manage_stream check (here: one that believes bob,
/// who holds no rights, manages stream 0) predicts a delete the state machine denies.
#[test]
fn the_checker_catches_a_model_that_skips_the_manage_stream_check() {
    let (mut model, mut metadata) = after_prelude();
    model.users.get_mut(&BOB).expect("bob exists").grant = Grant::ManageStream(0);
    let step = Step { actor: BOB, command: MetadataCommand::DeleteStream { stream: "s0".into() } };
    let report = check_step(&mut model, &mut metadata, &step, timestamp_of(prelude().len())).unwrap_err();
    assert!(report.starts_with("model predicted Ok(StreamDeleted"), "{report}");
    assert!(report.contains("state machine answered Err(PermissionDenied(2))"), "{report}");
}

/// The comparison names each stream and user whose visible state drifted.
#[test]
fn the_comparison_names_each_difference() {
    let (model, metadata) = after_prelude();
    compare_views(&model.view(), &view_of(&metadata)).expect("the model and the state machine agree after the prelude");

    let mut drifted = model.view();
    let topic = drifted.streams.get_mut(&0).and_then(|stream| stream.topics.get_mut(&0)).expect("topic 0 of s0");
    topic.partitions_count = 3;
    topic.groups.get_mut(&0).expect("group g0").members.remove(&2);
    drifted.users.get_mut(&CAROL).expect("carol exists").permissions = Some(Grant::Nothing.permissions());
    drifted.users.remove(&DAVE);
    let report = compare_views(&drifted, &view_of(&metadata)).unwrap_err();
    let lines: Vec<&str> = report.lines().collect();
    assert_eq!(lines.len(), 4, "{report}");
    assert_eq!(lines[0], "stream 0 topic 0 partitions_count: model has 3, state machine has 2");
    assert_eq!(lines[1], "stream 0 topic 0 group 0 members: model has {1}, state machine has {1, 2}");
    assert!(lines[2].starts_with("user 3 permissions: model has Some(Permissions {"), "{report}");
    assert!(lines[3].starts_with("user 4: model has None, state machine has Some(UserView"), "{report}");
}
