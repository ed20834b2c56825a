//! The root user's credentials at first boot. The metadata group's genesis holds root `iggy` with
//! the public default password, the same on every replica. Unless the server was started with
//! `--with-default-root-credentials`, shard 0 replaces them before it accepts any client: with
//! `VIREO_ROOT_USERNAME` / `VIREO_ROOT_PASSWORD`, or a random password printed once. It does so
//! as a client of its own node (an internal connection): a login, an update_user for a new
//! username and a change_password, replicated like any other, so every replica of a cluster
//! applies the same change and no secret reaches the log (the node hashes the password first).
//!
//! "First boot" is "root still holds the genesis credentials": a restart after the change finds
//! them gone and does nothing; a crash before it repeats it.
//!
//! In a cluster every node runs the setup with the same credentials (a generated password is
//! refused there: each node would make its own). The first to commit wins; the others' steps are
//! then refused (the default password no longer logs in), and a refused node waits for its
//! committed metadata to show the change and finishes. Ticks count only once the node has
//! committed metadata, so a node waiting for its quorum waits as long as that takes.

use vireo_protocol::header::{Command, Header, Message};
use vireo_protocol::request::OPERATION_REGISTER;
use vireo_protocol::wire::{ClientRequest, Identifier, LoginRegister, Name, Options, ShortBytes};

use crate::metadata::{ROOT_USERNAME, ROOT_USER_ID};
use crate::metadata_plane::{operation_of, root_has_genesis_credentials, ROOT_PASSWORD_DEFAULT};
use crate::node::Node;
use crate::node_io::ConnectionId;

/// The connection number of the server's own client on shard 0 (the driver never reaches it).
pub const INTERNAL_CONNECTION: ConnectionId = u64::MAX;
/// Ticks the whole change may take (the metadata group is local: it commits in a few).
const SETUP_TICKS_MAX: u64 = 3000;

/// What the root credentials become at first boot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RootPlan {
    /// `--with-default-root-credentials`: `iggy` / `iggy` stay.
    KeepDefault,
    /// From the environment, or `generated` (printed once when set).
    Set { username: String, password: String, generated: bool },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stage {
    WaitingForMetadata,
    /// A request is out; `request` is its number.
    Waiting {
        step: Step,
        request: u64,
    },
    Done,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Step {
    Login,
    Rename,
    ChangePassword,
}

pub struct RootSetup {
    plan: RootPlan,
    stage: Stage,
    client: u128,
    session: u64,
    ticks: u64,
    /// Whether the internal connection is open in the node.
    pub connection_open: bool,
    result: Option<Result<(), String>>,
    /// A cluster node: another node may make the change first.
    in_cluster: bool,
    /// The internal connection is to be closed before the next attempt.
    pub reconnect: bool,
}

impl RootSetup {
    pub fn new(plan: RootPlan, client: u128, in_cluster: bool) -> RootSetup {
        assert_ne!(client, 0, "a client id is non-zero");
        RootSetup {
            plan,
            stage: Stage::WaitingForMetadata,
            client,
            session: 0,
            ticks: 0,
            connection_open: false,
            result: None,
            in_cluster,
            reconnect: false,
        }
    }

    /// `Some` once the setup is over: `Ok` when the credentials are what they should be.
    pub fn finished(&self) -> Option<Result<(), String>> {
        self.result.clone()
    }

    fn finish(&mut self, result: Result<(), String>) {
        self.stage = Stage::Done;
        self.result = Some(result);
    }

    /// Called every tick: the frames to send on the internal connection now.
    pub fn step(&mut self, node: &Node) -> Vec<Vec<u8>> {
        if node.view().is_some() {
            self.ticks += 1;
        }
        if self.result.is_some() {
            return Vec::new();
        }
        if self.ticks > SETUP_TICKS_MAX {
            self.finish(Err(format!("not done after {SETUP_TICKS_MAX} ticks (at {:?})", self.stage)));
            return Vec::new();
        }
        let (username, password) = match &self.plan {
            RootPlan::KeepDefault => {
                self.finish(Ok(()));
                return Vec::new();
            }
            RootPlan::Set { username, password, .. } => (username.clone(), password.clone()),
        };
        if self.stage != Stage::WaitingForMetadata {
            return Vec::new();
        }
        let Some(view) = node.view() else { return Vec::new() };
        if !root_has_genesis_credentials(&view.metadata) {
            tracing::info!("the root user's credentials were set before: kept");
            self.finish(Ok(()));
            return Vec::new();
        }
        if username == ROOT_USERNAME && password == ROOT_PASSWORD_DEFAULT {
            self.finish(Ok(()));
            return Vec::new();
        }
        self.stage = Stage::Waiting { step: Step::Login, request: 0 };
        let login = LoginRegister {
            protocol_version: 0x2C00,
            sdk_name: Name::new("vireo-server").expect("a name"),
            sdk_version: Name::new(env!("CARGO_PKG_VERSION")).expect("a name"),
            username: Name::new(ROOT_USERNAME).expect("a name"),
            password: ShortBytes::new(ROOT_PASSWORD_DEFAULT.as_bytes().to_vec()).expect("short"),
            context: Vec::new(),
        };
        vec![self.frame(OPERATION_REGISTER, 0, 0, ClientRequest::LoginRegister(login).encode())]
    }

    fn frame(&self, operation: u8, request: u64, session: u64, body: Vec<u8>) -> Vec<u8> {
        let mut header = Header::new(Command::Request, 0, 0);
        header.client = self.client;
        header.operation = operation;
        header.request = request;
        header.session = session;
        header.parent = xxhash_rust::xxh3::xxh3_64(&body) as u128;
        Message::new(header, body).encode()
    }

    fn metadata_frame(&self, request: u64, command: ClientRequest) -> Vec<u8> {
        let operation = operation_of(command.command_code()).expect("a metadata command");
        self.frame(operation, request, self.session, command.encode())
    }

    /// A reply on the internal connection; returns the next frame to send, if any.
    pub fn on_reply(&mut self, frame: &[u8]) -> Option<Vec<u8>> {
        let Stage::Waiting { step, request } = self.stage else { return None };
        let message = match Message::decode(frame, false) {
            Ok(message) if message.header.command == Command::Reply => message,
            _ => {
                self.finish(Err("the node answered with something that is not a reply".to_string()));
                return None;
            }
        };
        if message.header.request != request {
            return None;
        }
        let status = match message.header.status {
            0 => first_result(&message.body),
            status => status,
        };
        if status != 0 && self.in_cluster {
            // Another node may have changed the credentials first: look again at what is
            // committed (the next `step`), and log in afresh if they still are the genesis ones.
            tracing::info!(
                ?step,
                status,
                "root credentials setup refused: checking whether another node made the change"
            );
            self.stage = Stage::WaitingForMetadata;
            self.session = 0;
            // A fresh client on a fresh internal connection for the next attempt.
            self.client = (self.client.wrapping_mul(0x9e37_79b9_7f4a_7c15_f39c_c060_5ced_c835) >> 1) | 1;
            self.reconnect = true;
            return None;
        }
        if status != 0 {
            self.finish(Err(format!("{step:?} was refused with status {status}")));
            return None;
        }
        let RootPlan::Set { username, password, generated } = self.plan.clone() else { unreachable!("only Set sends") };
        match step {
            Step::Login => {
                let Some(session) = login_session(&message.body) else {
                    self.finish(Err("the login reply holds no session".to_string()));
                    return None;
                };
                self.session = session;
                if username != ROOT_USERNAME {
                    self.stage = Stage::Waiting { step: Step::Rename, request: 1 };
                    let rename = ClientRequest::UpdateUser {
                        user: Identifier::Numeric(ROOT_USER_ID),
                        username: Some(Name::new(username).ok()?),
                        status: None,
                        options: Options::empty(),
                    };
                    return Some(self.metadata_frame(1, rename));
                }
                self.change_password(1, &password)
            }
            Step::Rename => self.change_password(2, &password),
            Step::ChangePassword => {
                if generated {
                    // Printed once on stdout, on purpose: the only place this password ever
                    // appears (never in a log).
                    tracing::warn!(username, "the root user's password was generated and printed on stdout, once");
                    println!("root user {username}: generated password {password} (shown once; change it, or set VIREO_ROOT_USERNAME and VIREO_ROOT_PASSWORD at first boot)");
                } else {
                    tracing::info!(username, "root credentials set from VIREO_ROOT_USERNAME / VIREO_ROOT_PASSWORD");
                }
                self.finish(Ok(()));
                None
            }
        }
    }

    fn change_password(&mut self, request: u64, password: &str) -> Option<Vec<u8>> {
        self.stage = Stage::Waiting { step: Step::ChangePassword, request };
        let change = ClientRequest::ChangePassword {
            user: Identifier::Numeric(ROOT_USER_ID),
            current_password: ShortBytes::new(ROOT_PASSWORD_DEFAULT.as_bytes().to_vec()).ok()?,
            new_password: ShortBytes::new(password.as_bytes().to_vec()).ok()?,
        };
        Some(self.metadata_frame(request, change))
    }
}

/// The first result of a reply's result section (`PROTOCOL.md`, "Reply"); 0 when it holds none.
fn first_result(body: &[u8]) -> u32 {
    let count = body.get(0..4).map_or(0, |bytes| u32::from_le_bytes(bytes.try_into().expect("4 bytes")));
    if count == 0 {
        return 0;
    }
    body.get(8..12).map_or(u32::MAX, |bytes| u32::from_le_bytes(bytes.try_into().expect("4 bytes")))
}

/// The session of a login reply: after the result section, user_id u32 then session u64.
fn login_session(body: &[u8]) -> Option<u64> {
    let count = u32::from_le_bytes(body.get(0..4)?.try_into().ok()?) as usize;
    let at = 4 + count * 8 + 4;
    Some(u64::from_le_bytes(body.get(at..at + 8)?.try_into().ok()?))
}
