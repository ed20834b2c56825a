//! The access checker: holds every answer the node's front door gives a client to what that
//! client's user may do, against an independent model of the workload's users (who they are,
//! their passwords, and what their permissions allow on the workload's topic).
//!
//! The rules, exactly:
//! - `WrongPasswordAccepted`: a login with a wrong password (or an unknown or deleted token)
//!   succeeded. Such a login must always be refused: a node that lags may not know the user
//!   yet, but it cannot know a password that is not the user's.
//! - `DeniedActionTookEffect`: a send, poll or read (`Read`: every get_* command the reference
//!   gates) by a user whose permissions (fixed for the whole run) do not allow it was answered
//!   with success. A read answered with nothing (the object is not there: the reference looks an
//!   object up before it checks the permission) shows nothing and passes.
//! - `AllowedActionDenied`: a send, poll or read by a user whose fixed permissions allow it was
//!   refused as unauthorized (41). A node that lags may refuse it otherwise (the topic not there
//!   yet), never as forbidden: a node that logged the user in knows the user's permissions, which
//!   never change for these users.
//! - `Leaked`: a reply named an object the user may not see whatever its permissions: another
//!   user's personal access token, or another user's details where its own were asked.
//! - `UnexpectedCode`: any refusal carries one of the reference's codes for what went wrong
//!   (`EXPECTED_CODES`), never another.
//!
//! Users whose permissions change, or who are deleted, while they work are judged by the last
//! rule only: a racing change may take effect on either side of a request.

use std::fmt;

use vireo_node::disk_reserve::STATUS_CANNOT_SAVE_MESSAGES;

/// Codes a refusal of a login, send, poll or read may carry in this workload.
pub const EXPECTED_CODES: [u32; 15] = [
    3,    // InvalidCommand
    20,   // ResourceNotFound (a deleted user's token)
    40,   // Unauthenticated (not logged in, or the user is gone)
    41,   // Unauthorized
    42,   // InvalidCredentials
    47,   // UserInactive
    53,   // InvalidPersonalAccessToken
    54,   // PersonalAccessTokenExpired
    58,   // TransientNotAccepted (a node still opening)
    1009, // StreamIdNotFound (a node that lags)
    2010, // TopicIdNotFound (a node that lags)
    3007, // PartitionNotFound (a partition not there yet)
    3008, // NoPartitions
    4006, // CannotSaveMessagesToSegment (a send to a node whose disk is below its reserve)
    5006, // ConsumerGroupMemberNotFound
];

/// What the model says a user may do: on the workload's stream and topic, and on the server.
/// The implications the reference draws (read_stream from read_streams, poll from read_topic)
/// are written out here, not derived: the model states what each user may do, independently of
/// the node's permission code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rights {
    pub send: bool,
    pub poll: bool,
    /// Every stream (get_streams).
    pub read_streams: bool,
    /// The workload's stream (get_stream, get_topics).
    pub read_stream: bool,
    /// The workload's topic (get_topic, get_consumer_group(s)).
    pub read_topic: bool,
    /// get_stats, get_clients.
    pub read_servers: bool,
    /// get_users, get_user of another user.
    pub read_users: bool,
    /// Fixed for the run: only then are the rules beyond `UnexpectedCode` applied.
    pub fixed: bool,
}

impl Rights {
    /// Nothing at all, fixed.
    pub const NONE: Rights = Rights {
        send: false,
        poll: false,
        read_streams: false,
        read_stream: false,
        read_topic: false,
        read_servers: false,
        read_users: false,
        fixed: true,
    };
    /// Everything (the root user).
    pub const ALL: Rights = Rights {
        send: true,
        poll: true,
        read_streams: true,
        read_stream: true,
        read_topic: true,
        read_servers: true,
        read_users: true,
        fixed: true,
    };
}

/// A read command a user asks of the workload's objects (the reference's gated reads, and
/// those every logged-in user may make).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Read {
    Streams,
    Stream,
    Topics,
    Topic,
    ConsumerGroups,
    ConsumerGroup,
    Users,
    /// `own`: the user asks for itself.
    User {
        own: bool,
    },
    Clients,
    Stats,
    PersonalAccessTokens,
    ConsumerOffset,
    ClusterMetadata,
    DescribeOptions,
}

impl Read {
    pub const ALL: [Read; 15] = [
        Read::Streams,
        Read::Stream,
        Read::Topics,
        Read::Topic,
        Read::ConsumerGroups,
        Read::ConsumerGroup,
        Read::Users,
        Read::User { own: true },
        Read::User { own: false },
        Read::Clients,
        Read::Stats,
        Read::PersonalAccessTokens,
        Read::ConsumerOffset,
        Read::ClusterMetadata,
        Read::DescribeOptions,
    ];

    /// Whether a user with `rights` may make this read (the reference's rules).
    pub fn allowed(self, rights: Rights) -> bool {
        match self {
            Read::Streams => rights.read_streams,
            Read::Stream | Read::Topics => rights.read_stream,
            Read::Topic | Read::ConsumerGroups | Read::ConsumerGroup => rights.read_topic,
            Read::Users | Read::User { own: false } => rights.read_users,
            Read::Clients | Read::Stats => rights.read_servers,
            Read::ConsumerOffset => rights.poll,
            // Self-scoped, or describing nothing a user owns: authentication is the rule.
            Read::User { own: true } | Read::PersonalAccessTokens | Read::ClusterMetadata | Read::DescribeOptions => {
                true
            }
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// `right`: the password (or token) is the user's own and valid.
    Login {
        right: bool,
    },
    Send,
    Poll,
    Read(Read),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Answer {
    Succeeded,
    /// A read answered with an empty body: the object is not there (or not yet, on a node
    /// that lags). It shows nothing, so no rule holds it against the user's rights.
    Absent,
    Refused(u32),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AccessAnomaly {
    WrongPasswordAccepted { actor: u64, user: String },
    DeniedActionTookEffect { actor: u64, user: String, action: Action },
    AllowedActionDenied { actor: u64, user: String, action: Action },
    UnexpectedCode { actor: u64, user: String, action: Action, code: u32 },
    Leaked { actor: u64, user: String, read: Read, name: String },
}

impl fmt::Display for AccessAnomaly {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AccessAnomaly::WrongPasswordAccepted { actor, user } => {
                write!(f, "access: client {actor} logged in as {user:?} with a wrong password or token")
            }
            AccessAnomaly::DeniedActionTookEffect { actor, user, action } => {
                write!(f, "access: client {actor} as {user:?}: {action:?} succeeded without permission")
            }
            AccessAnomaly::AllowedActionDenied { actor, user, action } => {
                write!(f, "access: client {actor} as {user:?}: {action:?} denied as unauthorized though allowed")
            }
            AccessAnomaly::UnexpectedCode { actor, user, action, code } => {
                write!(f, "access: client {actor} as {user:?}: {action:?} refused with unexpected code {code}")
            }
            AccessAnomaly::Leaked { actor, user, read, name } => {
                write!(f, "access: client {actor} as {user:?}: {read:?} answered with another user's {name:?}")
            }
        }
    }
}

/// Counts of what the checker judged, for the run's report.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AccessSummary {
    pub logins: u64,
    pub wrong_passwords_refused: u64,
    pub allowed: u64,
    pub forbidden_refused: u64,
    pub refusals: u64,
    /// Reads answered (with something or with nothing).
    pub reads_answered: u64,
    /// Names in replies held to their owner (tokens, a user's own details).
    pub names_checked: u64,
}

#[derive(Debug, Default)]
pub struct AccessChecker {
    pub summary: AccessSummary,
}

impl AccessChecker {
    pub fn new() -> AccessChecker {
        AccessChecker::default()
    }

    /// One answer the front door gave client `actor`, logged in (or logging in) as `user`.
    pub fn observe(
        &mut self,
        actor: u64,
        user: &str,
        rights: Rights,
        action: Action,
        answer: Answer,
    ) -> Result<(), AccessAnomaly> {
        let user_name = || user.to_string();
        if let Answer::Refused(code) = answer {
            self.summary.refusals += 1;
            // A full disk refuses new data only: a read is never refused for it.
            let refused_for_disk = code == STATUS_CANNOT_SAVE_MESSAGES && action != Action::Send;
            if !EXPECTED_CODES.contains(&code) || refused_for_disk {
                return Err(AccessAnomaly::UnexpectedCode { actor, user: user_name(), action, code });
            }
        }
        match (action, answer) {
            (Action::Login { right: false }, Answer::Succeeded) => {
                return Err(AccessAnomaly::WrongPasswordAccepted { actor, user: user_name() });
            }
            (Action::Login { right: false }, Answer::Refused(_) | Answer::Absent) => {
                self.summary.wrong_passwords_refused += 1
            }
            (Action::Login { right: true }, _) => self.summary.logins += 1,
            (Action::Send | Action::Poll | Action::Read(_), answer) => {
                let allowed = match action {
                    Action::Send => rights.send,
                    Action::Poll => rights.poll,
                    Action::Read(read) => read.allowed(rights),
                    Action::Login { .. } => unreachable!("matched above"),
                };
                if matches!(action, Action::Read(_)) && !matches!(answer, Answer::Refused(_)) {
                    self.summary.reads_answered += 1;
                }
                if !rights.fixed {
                    return Ok(());
                }
                match (allowed, answer) {
                    (false, Answer::Succeeded) => {
                        return Err(AccessAnomaly::DeniedActionTookEffect { actor, user: user_name(), action });
                    }
                    (true, Answer::Refused(41)) => {
                        return Err(AccessAnomaly::AllowedActionDenied { actor, user: user_name(), action });
                    }
                    (true, Answer::Succeeded) => self.summary.allowed += 1,
                    (false, Answer::Refused(_)) => self.summary.forbidden_refused += 1,
                    (true, Answer::Refused(_)) | (_, Answer::Absent) => {}
                }
            }
        }
        Ok(())
    }

    /// The names a read's reply gave `user` that only their owner may see: every personal
    /// access token listed, and the user named in the details of `User { own: true }`. Token
    /// names start with their owner's name and a dash (`token_name`).
    pub fn observe_names(&mut self, actor: u64, user: &str, read: Read, names: &[String]) -> Result<(), AccessAnomaly> {
        for name in names {
            self.summary.names_checked += 1;
            let owned = match read {
                Read::PersonalAccessTokens => name.strip_prefix(user).is_some_and(|rest| rest.starts_with('-')),
                Read::User { own: true } => name == user,
                _ => true,
            };
            if !owned {
                return Err(AccessAnomaly::Leaked { actor, user: user.to_string(), read, name: name.clone() });
            }
        }
        Ok(())
    }
}

/// The name of a personal access token a user makes: its owner's name first, so that a listing
/// shows whose it is.
pub fn token_name(user: &str, client: usize, number: u32) -> String {
    format!("{user}-{client}-{number}")
}

#[cfg(test)]
mod tests {
    use super::*;

    const WRITER: Rights = Rights { send: true, ..Rights::NONE };
    const CHURN: Rights = Rights { fixed: false, ..Rights::ALL };

    #[test]
    fn a_wrong_password_that_logs_in_is_caught() {
        let mut checker = AccessChecker::new();
        let login = Action::Login { right: false };
        assert_eq!(checker.observe(1, "writer", WRITER, login, Answer::Refused(42)), Ok(()));
        assert_eq!(
            checker.observe(1, "writer", WRITER, login, Answer::Succeeded),
            Err(AccessAnomaly::WrongPasswordAccepted { actor: 1, user: "writer".into() })
        );
    }

    #[test]
    fn a_forbidden_send_that_succeeds_and_an_allowed_one_refused_as_forbidden_are_caught() {
        let mut checker = AccessChecker::new();
        assert_eq!(checker.observe(2, "writer", WRITER, Action::Poll, Answer::Refused(41)), Ok(()));
        assert_eq!(
            checker.observe(2, "writer", WRITER, Action::Poll, Answer::Succeeded),
            Err(AccessAnomaly::DeniedActionTookEffect { actor: 2, user: "writer".into(), action: Action::Poll })
        );
        assert_eq!(checker.observe(2, "writer", WRITER, Action::Send, Answer::Refused(2010)), Ok(()));
        assert_eq!(
            checker.observe(2, "writer", WRITER, Action::Send, Answer::Refused(41)),
            Err(AccessAnomaly::AllowedActionDenied { actor: 2, user: "writer".into(), action: Action::Send })
        );
    }

    #[test]
    fn users_whose_rights_race_are_judged_by_their_codes_only() {
        let mut checker = AccessChecker::new();
        assert_eq!(checker.observe(3, "temp", CHURN, Action::Send, Answer::Refused(41)), Ok(()));
        assert_eq!(
            checker.observe(3, "temp", CHURN, Action::Send, Answer::Refused(9999)),
            Err(AccessAnomaly::UnexpectedCode { actor: 3, user: "temp".into(), action: Action::Send, code: 9999 })
        );
    }

    #[test]
    fn a_forbidden_read_answered_is_caught_and_an_absent_object_is_not() {
        let mut checker = AccessChecker::new();
        let stream = Action::Read(Read::Stream);
        assert_eq!(checker.observe(4, "writer", WRITER, stream, Answer::Refused(41)), Ok(()));
        assert_eq!(checker.observe(4, "writer", WRITER, stream, Answer::Absent), Ok(()));
        assert_eq!(
            checker.observe(4, "writer", WRITER, stream, Answer::Succeeded),
            Err(AccessAnomaly::DeniedActionTookEffect { actor: 4, user: "writer".into(), action: stream })
        );
        let own = Action::Read(Read::User { own: true });
        assert_eq!(checker.observe(4, "writer", WRITER, own, Answer::Succeeded), Ok(()));
        assert_eq!(
            checker.observe(4, "writer", WRITER, own, Answer::Refused(41)),
            Err(AccessAnomaly::AllowedActionDenied { actor: 4, user: "writer".into(), action: own })
        );
        let stats = Action::Read(Read::Stats);
        let stranger = Rights { read_servers: true, read_users: true, ..Rights::NONE };
        assert_eq!(checker.observe(5, "stranger", stranger, stats, Answer::Succeeded), Ok(()));
        assert!(checker.observe(5, "writer", WRITER, stats, Answer::Succeeded).is_err());
    }

    #[test]
    fn another_users_token_or_details_in_a_reply_is_caught() {
        let mut checker = AccessChecker::new();
        let own = [token_name("writer", 3, 1), token_name("writer", 7, 2)];
        assert_eq!(checker.observe_names(3, "writer", Read::PersonalAccessTokens, &own), Ok(()));
        let theirs = [token_name("writer", 3, 1), token_name("reader", 4, 1)];
        assert_eq!(
            checker.observe_names(3, "writer", Read::PersonalAccessTokens, &theirs),
            Err(AccessAnomaly::Leaked {
                actor: 3,
                user: "writer".into(),
                read: Read::PersonalAccessTokens,
                name: "reader-4-1".into()
            })
        );
        // A user whose name begins another's is not that user.
        let longer = [token_name("writer2", 3, 1)];
        assert!(checker.observe_names(3, "writer", Read::PersonalAccessTokens, &longer).is_err());
        assert!(checker.observe_names(3, "writer", Read::User { own: true }, &["iggy".to_string()]).is_err());
        assert_eq!(checker.observe_names(3, "writer", Read::User { own: false }, &["iggy".to_string()]), Ok(()));
    }
}
