//! Users and their personal access tokens.
//!
//! Invariants: user ids and usernames are unique; the root user (id 0, "iggy") always exists with
//! every permission and active; a token's name is unique among its user's tokens and its hash is
//! unique in the cluster, and `Metadata::tokens` indexes exactly the tokens users hold; a user
//! whose permissions were not given holds none.
//!
//! Secrets never enter the state machine: a password arrives as a PHC hash made by the node
//! (`password.rs`), a token as its xxh3-128 (`token_hash`), so a snapshot leaks neither.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::command::{Identifier, MetadataResult};
use super::error::MetadataError;
use super::limits::Limit;
use super::permissions::Permissions;
use super::Metadata;

/// The root user's id and name.
pub const ROOT_USER_ID: u32 = 0;
pub const ROOT_USERNAME: &str = "iggy";
/// Bounds on names, in characters (Iggy's: usernames up to 50, token names up to 30).
pub const USERNAME_CHARS_MAX: usize = 50;
pub const TOKEN_NAME_CHARS_MAX: usize = 30;
/// A PHC string is far shorter; this only keeps a hostile command from bloating the state.
pub const PASSWORD_HASH_SIZE_MAX: usize = 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum UserStatus {
    Active,
    Inactive,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct User {
    pub id: u32,
    pub username: String,
    pub status: UserStatus,
    /// A PHC string (`$argon2id$...`), checked by `password::verify_password`.
    pub password_hash: String,
    /// The user's rights (none when `permissions_given` is false).
    pub permissions: Permissions,
    /// Whether the user's permissions were stated (on creation or since): the reference keeps
    /// "none given" apart from "all false", and its clients read the difference.
    pub permissions_given: bool,
    pub created_at: u64,
    /// The user's tokens by name.
    pub tokens: BTreeMap<String, PersonalAccessToken>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PersonalAccessToken {
    pub name: String,
    /// `token_hash` of the secret token.
    pub token_hash: u128,
    /// Nanoseconds (the clock of prepare timestamps) from which it no longer logs in.
    pub expires_at: Option<u64>,
}

impl PersonalAccessToken {
    pub fn is_expired(&self, now: u64) -> bool {
        self.expires_at.is_some_and(|expires_at| now >= expires_at)
    }
}

/// What the state machine stores for a personal access token: its xxh3-128. Tokens are long random
/// strings, so a fast hash is enough (unlike passwords, nothing to brute-force).
pub fn token_hash(token: &str) -> u128 {
    xxhash_rust::xxh3::xxh3_128(token.as_bytes())
}

pub(super) fn validate_username(username: &str) -> Result<(), MetadataError> {
    let chars = username.chars().count();
    if chars == 0 || chars > USERNAME_CHARS_MAX {
        return Err(MetadataError::InvalidUsername);
    }
    Ok(())
}

/// A PHC string starts with `$` and names its algorithm; the state machine checks the shape only,
/// since parsing it fully would tie replicated state to one hashing library's version.
pub(super) fn validate_password_hash(password_hash: &str) -> Result<(), MetadataError> {
    if !password_hash.starts_with('$') || password_hash.len() < 2 || password_hash.len() > PASSWORD_HASH_SIZE_MAX {
        return Err(MetadataError::InvalidPasswordHash);
    }
    Ok(())
}

fn validate_token_name(name: &str) -> Result<(), MetadataError> {
    let chars = name.chars().count();
    if chars == 0 || chars > TOKEN_NAME_CHARS_MAX {
        return Err(MetadataError::InvalidTokenName);
    }
    Ok(())
}

impl Metadata {
    /// The user a committed command acts as: it must exist and be active.
    pub(super) fn acting_user(&self, user_id: u32) -> Result<&User, MetadataError> {
        let user = self.users.get(&user_id).ok_or(MetadataError::Unauthenticated(user_id))?;
        if user.status == UserStatus::Inactive {
            return Err(MetadataError::UserInactive(user_id));
        }
        Ok(user)
    }

    fn require_manage_users(&self, actor: &User) -> Result<(), MetadataError> {
        if actor.permissions.manage_users() {
            Ok(())
        } else {
            Err(MetadataError::PermissionDenied(actor.id))
        }
    }

    /// Resolves a user by id or name.
    pub fn resolve_user(&self, user: &Identifier) -> Result<&User, MetadataError> {
        let found = match user {
            Identifier::Numeric(id) => self.users.get(id),
            Identifier::Name(name) => {
                super::validate_identifier(user)?;
                self.user_ids_by_name.get(name).and_then(|id| self.users.get(id))
            }
        };
        found.ok_or_else(|| MetadataError::UserNotFound(user.clone()))
    }

    pub(super) fn create_user(
        &mut self,
        actor_id: u32,
        timestamp: u64,
        username: &str,
        password_hash: &str,
        status: UserStatus,
        permissions: Option<&Permissions>,
    ) -> Result<MetadataResult, MetadataError> {
        let actor = self.acting_user(actor_id)?;
        self.require_manage_users(actor)?;
        validate_username(username)?;
        validate_password_hash(password_hash)?;
        if self.user_ids_by_name.contains_key(username) {
            return Err(MetadataError::UserAlreadyExists(username.to_owned()));
        }
        if self.users.len() >= self.limits.users_max as usize {
            return Err(MetadataError::LimitReached(Limit::Users));
        }

        let id = super::lowest_free_id(&self.users);
        let user = User {
            id,
            username: username.to_owned(),
            status,
            password_hash: password_hash.to_owned(),
            permissions: permissions.cloned().unwrap_or_default(),
            permissions_given: permissions.is_some(),
            created_at: timestamp,
            tokens: BTreeMap::new(),
        };
        self.users.insert(id, user);
        self.user_ids_by_name.insert(username.to_owned(), id);
        Ok(MetadataResult::UserCreated { user: id })
    }

    pub(super) fn update_user(
        &mut self,
        actor_id: u32,
        user: &Identifier,
        username: Option<&str>,
        status: Option<UserStatus>,
    ) -> Result<MetadataResult, MetadataError> {
        let actor = self.acting_user(actor_id)?;
        self.require_manage_users(actor)?;
        let target = self.resolve_user(user)?;
        let id = target.id;
        if id == ROOT_USER_ID && status == Some(UserStatus::Inactive) {
            return Err(MetadataError::CannotChangeRoot);
        }
        if let Some(username) = username {
            validate_username(username)?;
            if self.user_ids_by_name.get(username).is_some_and(|owner| *owner != id) {
                return Err(MetadataError::UserAlreadyExists(username.to_owned()));
            }
        }

        let target = self.users.get_mut(&id).expect("resolved above");
        if let Some(username) = username {
            let previous = std::mem::replace(&mut target.username, username.to_owned());
            self.user_ids_by_name.remove(&previous);
            self.user_ids_by_name.insert(username.to_owned(), id);
        }
        if let Some(status) = status {
            target.status = status;
        }
        Ok(MetadataResult::UserUpdated { user: id })
    }

    pub(super) fn delete_user(&mut self, actor_id: u32, user: &Identifier) -> Result<MetadataResult, MetadataError> {
        let actor = self.acting_user(actor_id)?;
        self.require_manage_users(actor)?;
        let id = self.resolve_user(user)?.id;
        if id == ROOT_USER_ID {
            return Err(MetadataError::CannotDeleteRoot);
        }

        let removed = self.users.remove(&id).expect("resolved above");
        self.user_ids_by_name.remove(&removed.username);
        for token in removed.tokens.values() {
            self.tokens.remove(&token.token_hash);
        }
        Ok(MetadataResult::UserDeleted { user: id })
    }

    pub(super) fn update_permissions(
        &mut self,
        actor_id: u32,
        user: &Identifier,
        permissions: Option<&Permissions>,
    ) -> Result<MetadataResult, MetadataError> {
        let actor = self.acting_user(actor_id)?;
        self.require_manage_users(actor)?;
        let id = self.resolve_user(user)?.id;
        if id == ROOT_USER_ID {
            return Err(MetadataError::CannotChangeRoot);
        }

        let target = self.users.get_mut(&id).expect("resolved above");
        target.permissions = permissions.cloned().unwrap_or_default();
        target.permissions_given = permissions.is_some();
        Ok(MetadataResult::PermissionsUpdated { user: id })
    }

    pub(super) fn change_password(
        &mut self,
        actor_id: u32,
        user: &Identifier,
        password_hash: &str,
    ) -> Result<MetadataResult, MetadataError> {
        let actor = self.acting_user(actor_id)?;
        let id = self.resolve_user(user)?.id;
        if id != actor_id {
            self.require_manage_users(actor)?;
        }
        validate_password_hash(password_hash)?;

        self.users.get_mut(&id).expect("resolved above").password_hash = password_hash.to_owned();
        Ok(MetadataResult::PasswordChanged { user: id })
    }

    pub(super) fn create_personal_access_token(
        &mut self,
        actor_id: u32,
        timestamp: u64,
        name: &str,
        token_hash: u128,
        expiry: Option<u64>,
    ) -> Result<MetadataResult, MetadataError> {
        let actor = self.acting_user(actor_id)?;
        validate_token_name(name)?;
        if actor.tokens.contains_key(name) || self.tokens.contains_key(&token_hash) {
            return Err(MetadataError::TokenAlreadyExists { user: actor_id, name: name.to_owned() });
        }
        if actor.tokens.len() >= self.limits.tokens_per_user_max as usize {
            return Err(MetadataError::LimitReached(Limit::TokensPerUser));
        }

        let expires_at = expiry.map(|lifetime| timestamp.saturating_add(lifetime));
        let token = PersonalAccessToken { name: name.to_owned(), token_hash, expires_at };
        self.users.get_mut(&actor_id).expect("acting user exists").tokens.insert(name.to_owned(), token);
        self.tokens.insert(token_hash, actor_id);
        Ok(MetadataResult::PersonalAccessTokenCreated { user: actor_id, expires_at })
    }

    pub(super) fn delete_personal_access_token(
        &mut self,
        actor_id: u32,
        name: &str,
    ) -> Result<MetadataResult, MetadataError> {
        self.acting_user(actor_id)?;
        let user = self.users.get_mut(&actor_id).expect("acting user exists");
        let token = user.tokens.remove(name).ok_or(MetadataError::TokenNotFound)?;
        self.tokens.remove(&token.token_hash);
        Ok(MetadataResult::PersonalAccessTokenDeleted { user: actor_id })
    }

    /// The user a personal access token logs in as, at `now`: the token must exist, be unexpired,
    /// and belong to an active user.
    pub fn user_by_token(&self, token_hash: u128, now: u64) -> Result<&User, MetadataError> {
        let user_id = self.tokens.get(&token_hash).ok_or(MetadataError::TokenNotFound)?;
        let user = self.users.get(user_id).expect("the token index names existing users");
        let token = user.tokens.values().find(|token| token.token_hash == token_hash).expect("indexed token exists");
        if token.is_expired(now) {
            return Err(MetadataError::TokenExpired { user: user.id, name: token.name.clone() });
        }
        if user.status == UserStatus::Inactive {
            return Err(MetadataError::UserInactive(user.id));
        }
        Ok(user)
    }

    /// Drops every permission override that names `stream` (or only its `topic`): called when that
    /// object is deleted, because its id will be handed out again.
    pub(super) fn forget_permission_targets(&mut self, stream: u32, topic: Option<u32>) {
        for user in self.users.values_mut() {
            match topic {
                None => {
                    user.permissions.streams.remove(&stream);
                }
                Some(topic) => {
                    if let Some(stream_permissions) = user.permissions.streams.get_mut(&stream) {
                        stream_permissions.topics.remove(&topic);
                    }
                }
            }
        }
    }

    /// Users' invariants (see the module documentation); `Err` names the first one broken.
    pub(super) fn check_users(&self) -> Result<(), String> {
        let root = self.users.get(&ROOT_USER_ID).ok_or("the root user is missing")?;
        if root.permissions != Permissions::root() || !root.permissions_given || root.status != UserStatus::Active {
            return Err("the root user lost permissions or was deactivated".into());
        }
        if self.users.len() > self.limits.users_max as usize || self.users.len() != self.user_ids_by_name.len() {
            return Err("users exceed their limit or the name index is stale".into());
        }
        let mut tokens_indexed = 0;
        for (id, user) in &self.users {
            if user.id != *id || self.user_ids_by_name.get(&user.username) != Some(id) {
                return Err(format!("user {id} is keyed or indexed wrongly"));
            }
            if user.tokens.len() > self.limits.tokens_per_user_max as usize {
                return Err(format!("user {id} holds too many tokens"));
            }
            for (name, token) in &user.tokens {
                if token.name != *name || self.tokens.get(&token.token_hash) != Some(id) {
                    return Err(format!("token {name:?} of user {id} is keyed or indexed wrongly"));
                }
                tokens_indexed += 1;
            }
            if !user.permissions_given && user.permissions != Permissions::default() {
                return Err(format!("user {id} holds rights it was never given"));
            }
        }
        if tokens_indexed != self.tokens.len() {
            return Err("the token index holds tokens no user has".into());
        }
        Ok(())
    }
}
