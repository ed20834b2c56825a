//! The metadata state machine: users, personal access tokens, streams, topics, partitions and
//! consumer groups, as the metadata VSR group replicates them.
//!
//! It is pure and deterministic: no clock (a command's time is its prepare's timestamp, passed in),
//! no randomness (password hashes and token hashes arrive made), no I/O, and only ordered maps, so
//! every replica applying the same commands reaches byte-identical snapshots.
//!
//! `apply` checks everything a command needs (acting user, objects it names, permission, names,
//! options, limits) before it changes anything, so a denied command leaves the state untouched.
//! After every command it asserts the invariants of what it touched, in release builds too:
//! - ids are unique map keys below their limits, and names are unique in their scope;
//! - the root user (id 0) exists, is active and holds every permission;
//! - permission overrides name only existing streams and topics (ids are reused);
//! - every consumer group with members owns each partition of its topic exactly once, with owned
//!   counts differing by at most one (`groups.rs`).
//!
//! `check_invariants` checks the whole state; `restore` refuses a snapshot that breaks it.

pub mod command;
pub mod error;
pub mod groups;
pub mod limits;
pub mod password;
pub mod permissions;
pub mod streams;
pub mod users;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

pub use command::{Identifier, MetadataCommand, MetadataResult, TopicUpdate};
pub use error::{MetadataError, TopicOption};
pub use groups::ConsumerGroup;
pub use limits::{Limit, MetadataLimits};
pub use password::{hash_password, verify_password, PasswordCost, SALT_SIZE_BYTES};
pub use permissions::{GlobalPermissions, Permissions, ReadKind, StreamPermissions, TopicPermissions};
pub use streams::{Compression, Partition, Stream, Topic, TopicOptions};
pub use users::{token_hash, PersonalAccessToken, User, UserStatus, ROOT_USERNAME, ROOT_USER_ID};

/// The replicated metadata of a cluster.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Metadata {
    limits: MetadataLimits,
    users: BTreeMap<u32, User>,
    user_ids_by_name: BTreeMap<String, u32>,
    /// Every user's tokens by hash, to the user holding it: a token login is one lookup.
    tokens: BTreeMap<u128, u32>,
    streams: BTreeMap<u32, Stream>,
    stream_ids_by_name: BTreeMap<String, u32>,
}

/// The lowest id not a key of `map`: how streams, topics, groups and users get their ids.
fn lowest_free_id<V>(map: &BTreeMap<u32, V>) -> u32 {
    let mut candidate = 0;
    for id in map.keys() {
        if *id != candidate {
            break;
        }
        candidate += 1;
    }
    candidate
}

/// A name identifier must be a legal wire name (1..=255 bytes).
fn validate_identifier(identifier: &Identifier) -> Result<(), MetadataError> {
    match identifier {
        Identifier::Numeric(_) => Ok(()),
        Identifier::Name(name) if streams::validate_name(name) => Ok(()),
        Identifier::Name(_) => Err(MetadataError::InvalidIdentifier(identifier.clone())),
    }
}

impl Metadata {
    /// The state before the first command: only the root user, with `root_password_hash` (a PHC
    /// string the node made with `password::hash_password`).
    pub fn genesis(root_password_hash: &str, limits: MetadataLimits) -> Metadata {
        users::validate_password_hash(root_password_hash).expect("the root password hash is a PHC string");
        assert!(limits.users_max >= 1, "the root user must fit");
        let root = User {
            id: ROOT_USER_ID,
            username: ROOT_USERNAME.to_owned(),
            status: UserStatus::Active,
            password_hash: root_password_hash.to_owned(),
            permissions: Permissions::root(),
            permissions_given: true,
            created_at: 0,
            tokens: BTreeMap::new(),
        };
        let metadata = Metadata {
            limits,
            users: BTreeMap::from([(ROOT_USER_ID, root)]),
            user_ids_by_name: BTreeMap::from([(ROOT_USERNAME.to_owned(), ROOT_USER_ID)]),
            tokens: BTreeMap::new(),
            streams: BTreeMap::new(),
            stream_ids_by_name: BTreeMap::new(),
        };
        metadata.assert_invariants();
        metadata
    }

    /// Applies one committed command on behalf of `user_id` at `timestamp` (the prepare's, in
    /// nanoseconds). A denied command changes nothing.
    pub fn apply(
        &mut self,
        user_id: u32,
        timestamp: u64,
        command: &MetadataCommand,
    ) -> Result<MetadataResult, MetadataError> {
        use MetadataCommand as C;
        let result = match command {
            C::CreateUser { username, password_hash, status, permissions } => {
                self.create_user(user_id, timestamp, username, password_hash, *status, permissions.as_ref())
            }
            C::UpdateUser { user, username, status } => self.update_user(user_id, user, username.as_deref(), *status),
            C::DeleteUser { user } => self.delete_user(user_id, user),
            C::UpdatePermissions { user, permissions } => self.update_permissions(user_id, user, permissions.as_ref()),
            C::ChangePassword { user, password_hash } => self.change_password(user_id, user, password_hash),
            C::CreatePersonalAccessToken { name, token_hash, expiry } => {
                self.create_personal_access_token(user_id, timestamp, name, *token_hash, *expiry)
            }
            C::DeletePersonalAccessToken { name } => self.delete_personal_access_token(user_id, name),
            C::CreateStream { name } => self.create_stream(user_id, timestamp, name),
            C::UpdateStream { stream, name } => self.update_stream(user_id, stream, name),
            C::PurgeStream { stream } => self.purge_stream(user_id, stream),
            C::UpdateTopic { stream, topic, name, update } => self.update_topic(user_id, stream, topic, name, update),
            C::PurgeTopic { stream, topic } => self.purge_topic(user_id, stream, topic),
            C::DeleteSegments { stream, topic, partition, count } => {
                self.delete_segments(user_id, stream, topic, *partition, *count)
            }
            C::DeleteStream { stream } => self.delete_stream(user_id, stream),
            C::CreateTopic { stream, name, partitions_count, options } => {
                self.create_topic(user_id, timestamp, stream, name, *partitions_count, options)
            }
            C::DeleteTopic { stream, topic } => self.delete_topic(user_id, stream, topic),
            C::CreatePartitions { stream, topic, count } => {
                self.create_partitions(user_id, timestamp, stream, topic, *count)
            }
            C::DeletePartitions { stream, topic, count } => self.delete_partitions(user_id, stream, topic, *count),
            C::CreateConsumerGroup { stream, topic, name } => self.create_consumer_group(user_id, stream, topic, name),
            C::DeleteConsumerGroup { stream, topic, group } => {
                self.delete_consumer_group(user_id, stream, topic, group)
            }
            C::JoinConsumerGroup { stream, topic, group, member } => {
                self.join_consumer_group(user_id, stream, topic, group, *member)
            }
            C::LeaveConsumerGroup { stream, topic, group, member } => {
                self.leave_consumer_group(user_id, stream, topic, group, *member)
            }
            C::EndSession { member } => {
                Ok(MetadataResult::SessionEnded { groups: self.remove_client_everywhere(*member) })
            }
        };
        if let Ok(done) = &result {
            self.assert_invariants_after(done);
        }
        result
    }

    /// Whether `user_id` may make a non-replicated request (a read, or a send) now.
    pub fn authorize_read(&self, user_id: u32, what: ReadKind) -> Result<(), MetadataError> {
        let user = self.acting_user(user_id)?;
        if what.allowed_by(&user.permissions) {
            Ok(())
        } else {
            Err(MetadataError::PermissionDenied(user_id))
        }
    }

    pub fn limits(&self) -> &MetadataLimits {
        &self.limits
    }

    /// Every user, by ascending id.
    pub fn users(&self) -> impl Iterator<Item = &User> {
        self.users.values()
    }

    pub fn user(&self, id: u32) -> Option<&User> {
        self.users.get(&id)
    }

    /// The user a password login names (the node then runs `password::verify_password`).
    pub fn user_by_name(&self, username: &str) -> Option<&User> {
        self.user_ids_by_name.get(username).and_then(|id| self.users.get(id))
    }

    /// Every stream, by ascending id.
    pub fn streams(&self) -> impl Iterator<Item = &Stream> {
        self.streams.values()
    }

    pub fn stream(&self, id: u32) -> Option<&Stream> {
        self.streams.get(&id)
    }

    pub fn stream_by_name(&self, name: &str) -> Option<&Stream> {
        self.stream_ids_by_name.get(name).and_then(|id| self.streams.get(id))
    }

    pub fn topic(&self, stream: u32, topic: u32) -> Option<&Topic> {
        self.streams.get(&stream)?.topics.get(&topic)
    }

    pub fn consumer_group(&self, stream: u32, topic: u32, group: u32) -> Option<&ConsumerGroup> {
        self.topic(stream, topic)?.consumer_groups.get(&group)
    }

    /// The whole state, for a checkpoint (bincode 2, standard configuration).
    pub fn snapshot(&self) -> Vec<u8> {
        bincode::serde::encode_to_vec(self, bincode::config::standard()).expect("metadata always encodes")
    }

    /// The state a snapshot describes; `None` when the bytes are not a snapshot, have bytes left
    /// over, or describe a state that breaks an invariant.
    pub fn restore(snapshot: &[u8]) -> Option<Metadata> {
        let (metadata, read): (Metadata, usize) =
            bincode::serde::decode_from_slice(snapshot, bincode::config::standard()).ok()?;
        if read != snapshot.len() {
            return None;
        }
        metadata.check_invariants().ok()?;
        Some(metadata)
    }

    /// A digest of the whole state: xxh3-64 of the snapshot.
    pub fn digest(&self) -> u64 {
        xxhash_rust::xxh3::xxh3_64(&self.snapshot())
    }

    /// Checks every invariant of the whole state; `Err` names the first one broken.
    pub fn check_invariants(&self) -> Result<(), String> {
        self.check_users()?;
        self.check_streams()
    }

    fn assert_invariants(&self) {
        if let Err(broken) = self.check_invariants() {
            panic!("metadata invariant broken: {broken}");
        }
    }

    /// Checks what a successful command touched: the whole users side for user commands and
    /// deletes (it is small, and deletes drop permission overrides), only the touched stream or
    /// topic otherwise, so a cluster with a million partitions is not walked on every join.
    fn assert_invariants_after(&self, done: &MetadataResult) {
        use MetadataResult as R;
        let checked = match done {
            R::StreamCreated { stream } | R::StreamUpdated { stream } => {
                let entry = self.streams.get(stream).expect("the created stream exists");
                self.check_stream_entry(*stream, entry)
            }
            R::StreamPurged { .. } | R::TopicPurged { .. } | R::SegmentsDeleted { .. } => Ok(()),
            R::SessionEnded { .. } => self.check_streams(),
            R::TopicCreated { stream, topic, .. }
            | R::TopicUpdated { stream, topic }
            | R::PartitionsCreated { stream, topic, .. }
            | R::PartitionsDeleted { stream, topic, .. }
            | R::ConsumerGroupCreated { stream, topic, .. }
            | R::ConsumerGroupDeleted { stream, topic, .. }
            | R::ConsumerGroupJoined { stream, topic, .. }
            | R::ConsumerGroupLeft { stream, topic, .. } => {
                let entry = self.streams.get(stream).expect("the touched stream exists");
                let touched = entry.topics.get(topic).expect("the touched topic exists");
                entry.check_topic_entry(*topic, touched, &self.limits)
            }
            R::StreamDeleted { .. }
            | R::TopicDeleted { .. }
            | R::UserCreated { .. }
            | R::UserUpdated { .. }
            | R::UserDeleted { .. }
            | R::PermissionsUpdated { .. }
            | R::PasswordChanged { .. }
            | R::PersonalAccessTokenCreated { .. }
            | R::PersonalAccessTokenDeleted { .. } => self.check_users(),
        };
        let checked = checked.and_then(|()| {
            if self.streams.len() == self.stream_ids_by_name.len() {
                Ok(())
            } else {
                Err("the stream name index is stale".to_owned())
            }
        });
        if let Err(broken) = checked {
            panic!("metadata invariant broken after {done:?}: {broken}");
        }
    }
}
