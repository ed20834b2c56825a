//! The access checker: holds every answer the node's front door gives a client to what that
//! client's user may do, against an independent model of the workload's users (who they are,
//! their passwords, and what their permissions allow on the workload's topic).
//!
//! The rules, exactly:
//! - `WrongPasswordAccepted`: a login with a wrong password (or an unknown or deleted token)
//!   succeeded. Such a login must always be refused: a node that lags may not know the user
//!   yet, but it cannot know a password that is not the user's.
//! - `DeniedActionTookEffect`: a send or poll by a user whose permissions (fixed for the whole
//!   run) do not allow it was answered with success.
//! - `AllowedActionDenied`: a send or poll by a user whose fixed permissions allow it was refused
//!   as unauthorized (41). A node that lags may refuse it otherwise (the topic not there yet),
//!   never as forbidden: a node that logged the user in knows the user's permissions, which
//!   never change for these users.
//! - `UnexpectedCode`: any refusal carries one of the reference's codes for what went wrong
//!   (`EXPECTED_CODES`), never another.
//!
//! Users whose permissions change, or who are deleted, while they work are judged by the last
//! rule only: a racing change may take effect on either side of a request.

use std::fmt;

/// Codes a refusal of a login, send or poll may carry in this workload.
pub const EXPECTED_CODES: [u32; 14] = [
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
    5006, // ConsumerGroupMemberNotFound
];

/// What the model says a user may do on the workload's topic.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rights {
    pub send: bool,
    pub poll: bool,
    /// Fixed for the run: only then are the rules beyond `UnexpectedCode` applied.
    pub fixed: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// `right`: the password (or token) is the user's own and valid.
    Login {
        right: bool,
    },
    Send,
    Poll,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Answer {
    Succeeded,
    Refused(u32),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AccessAnomaly {
    WrongPasswordAccepted { actor: u64, user: String },
    DeniedActionTookEffect { actor: u64, user: String, action: Action },
    AllowedActionDenied { actor: u64, user: String, action: Action },
    UnexpectedCode { actor: u64, user: String, action: Action, code: u32 },
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
            if !EXPECTED_CODES.contains(&code) {
                return Err(AccessAnomaly::UnexpectedCode { actor, user: user_name(), action, code });
            }
        }
        match (action, answer) {
            (Action::Login { right: false }, Answer::Succeeded) => {
                return Err(AccessAnomaly::WrongPasswordAccepted { actor, user: user_name() });
            }
            (Action::Login { right: false }, Answer::Refused(_)) => self.summary.wrong_passwords_refused += 1,
            (Action::Login { right: true }, _) => self.summary.logins += 1,
            (Action::Send | Action::Poll, answer) => {
                let allowed = if action == Action::Send { rights.send } else { rights.poll };
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
                    (true, Answer::Refused(_)) => {}
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const WRITER: Rights = Rights { send: true, poll: false, fixed: true };
    const CHURN: Rights = Rights { send: true, poll: true, fixed: false };

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
}
