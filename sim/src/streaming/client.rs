//! A simulated streaming client that speaks to a node exactly as an Iggy SDK does
//! (`PROTOCOL.md`): one connection to one node at a time, one login (a Register carrying the
//! credentials, with a client id drawn anew for every login), metadata commands numbered by the
//! client in its session, partition requests and reads carrying the number it has not used yet,
//! and one request in flight, except that a producer may pipeline up to `sends_in_flight_max`
//! sends, matching each reply by the request_checksum it stamped (replies to sends that went to
//! different partitions come back in the order the partitions commit them). The node does the
//! rest (sessions in partition groups, re-sends, one request per group at a time in the order
//! sent).
//!
//! When a reply does not come within `REQUEST_TIMEOUT_TICKS`, or the connection breaks, the
//! client does what an SDK's application would: it drops the connection, connects to another
//! node and logs in again (a new client id), and treats what was in flight as of unknown fate
//! (a send is indeterminate and its values are never sent again; a committing poll abandons its
//! run).
//!
//! Scripts by role:
//! - the administrator creates the stream, the topic and a consumer group, then adds partitions
//!   and creates and deletes a second stream and group while traffic runs;
//! - a producer sends batches of unique values (message ids) with every partitioning kind, and
//!   now and then a small batch (values marked `CHURN_VALUE`) to the churn topic, which the
//!   administrator deletes and creates again while they arrive;
//! - a consumer polls every partition in turn, from its own position (strategy offset) or from
//!   its stored offset with auto-commit (strategy next), and now and then the churn topic's first
//!   partition from offset 0;
//! - a member joins and leaves the consumer group, so that its assignment keeps changing.
//!
//! The client reports what it saw as `Observation`s; the cluster feeds them to the checkers.

use std::collections::BTreeMap;

use super::scenario::TopicRetention;
use vireo_node::metadata_plane::operation_of;
use vireo_node::node::{OPERATION_LOGOUT, OPERATION_NON_REPLICATED};
use vireo_node::partition::machine::POLL_BYTES_MAX;
use vireo_node::partition::request::OPERATION_SEND_MESSAGES;
use vireo_node::ConnectionId;
use vireo_protocol::header::{Command, Header, Message};
use vireo_protocol::request::OPERATION_REGISTER;
use vireo_protocol::wire::{
    self, ClientRequest, Consumer, ConsumerKind, CreatedPersonalAccessToken, LoginRegister, LoginReply, LoginWithToken,
    MessagesKey, Name, Partitioning, PollMessages, PollingKind, PollingStrategy, ResultSection, SendMessages,
    SendMessagesReply, ShortBytes,
};
use vireo_storage::batch::{self, BatchBuilder};
use vireo_storage::checksum::checksum64;

use crate::access::{token_name, Action, Answer, Read, Rights};
use crate::kafka_log::{PartitionKey, PollAsk};
use crate::rng::SimRng;
use crate::scenario::Volume;

/// The mark of a value sent to the churn topic (bit 63 of its sequence half): the Kafka-log
/// checker never sees these, the churn ledger does.
pub const CHURN_VALUE: u128 = 1 << 63;

/// Of the times a client (other than the administrator) picks its next request, how often (ppm)
/// it asks one of the reads of `Read::ALL` instead.
const READ_PPM: u32 = 30_000;

/// Ticks a request waits for its reply before the client gives up on the connection.
pub const REQUEST_TIMEOUT_TICKS: u64 = 300;
/// The stream and topic every producer and consumer uses (ids from 0).
pub const STREAM: u32 = 0;
pub const TOPIC: u32 = 0;
pub const GROUP: u32 = 0;

/// Who a client logs in as: one of the workload's users, with its password and what the
/// access checker's model says it may do on the workload's topic.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Identity {
    pub username: &'static str,
    pub password: &'static str,
    pub rights: Rights,
}

pub const ROOT: Identity = Identity { username: "iggy", password: "iggy", rights: Rights::ALL };
/// May send to the topic, not poll it or read anything.
pub const WRITER: Identity =
    Identity { username: "writer", password: "writer-secret", rights: Rights { send: true, ..Rights::NONE } };
/// May read the topic (and so poll it), not send to it or read its stream.
pub const READER: Identity = Identity {
    username: "reader",
    password: "reader-secret",
    rights: Rights { poll: true, read_topic: true, ..Rights::NONE },
};
/// May read the server's stats and clients and the users, nothing on any stream.
pub const STRANGER: Identity = Identity {
    username: "stranger",
    password: "stranger-secret",
    rights: Rights { read_servers: true, read_users: true, ..Rights::NONE },
};
/// Its permissions flip and it is deleted and created again while it works.
pub const TEMP: Identity =
    Identity { username: "temp", password: "temp-secret", rights: Rights { fixed: false, ..Rights::ALL } };

/// The users the administrator creates, in order, after the topic.
pub const USERS: [Identity; 4] = [WRITER, READER, STRANGER, TEMP];

/// A personal access token a client made, and whether a login with it must succeed.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Token {
    name: String,
    token: String,
    valid: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    Admin,
    Producer,
    Consumer { committing: bool },
    Member,
}

/// What the cluster learns from the committed metadata: the topic's partitions.
#[derive(Clone, Debug, Default)]
pub struct Topology {
    pub partitions: Vec<u32>,
    pub group_created: bool,
}

#[derive(Clone, Debug)]
enum Work {
    /// `right`: the credentials are the user's own and valid; `token`: a token login.
    Login {
        right: bool,
    },
    Logout,
    /// `expiry` in microseconds (0: never).
    CreateToken {
        name: String,
        expiry: u64,
    },
    DeleteToken {
        name: String,
    },
    Admin(AdminStep),
    Send {
        values: Vec<u128>,
    },
    /// A send to the churn topic (by name, balanced).
    ChurnSend {
        values: Vec<u128>,
    },
    Poll {
        partition: u32,
        from: u64,
        /// How many messages it asks for.
        count: u32,
    },
    /// A poll of the churn topic's partition 0 from offset 0.
    ChurnPoll,
    /// A read of the workload's objects, for the access checker.
    Read(Read),
    Join,
    Leave,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum AdminStep {
    CreateStream,
    CreateTopic,
    CreateGroup,
    AddPartition,
    CreateChurnStream,
    DeleteChurnStream,
    DeleteChurnTopic,
    CreateChurnGroup,
    DeleteChurnGroup,
    CreateUser(usize),
    /// Flips the temp user's rights on the topic (on: send and poll).
    SetTempRights(bool),
    DeleteTemp,
    CreateChurnTopic,
    UpdateChurnTopic,
    PurgeChurnTopic,
    PurgeChurnStream,
    UpdateChurnStream,
}

impl AdminStep {
    fn name(self) -> &'static str {
        match self {
            AdminStep::CreateStream => "create_stream",
            AdminStep::CreateTopic => "create_topic",
            AdminStep::CreateGroup => "create_consumer_group",
            AdminStep::AddPartition => "create_partitions",
            AdminStep::CreateChurnStream => "create_stream churn",
            AdminStep::DeleteChurnStream => "delete_stream churn",
            AdminStep::DeleteChurnTopic => "delete_topic churn",
            AdminStep::CreateChurnGroup => "create_consumer_group churn",
            AdminStep::DeleteChurnGroup => "delete_consumer_group churn",
            AdminStep::CreateUser(_) => "create_user",
            AdminStep::SetTempRights(_) => "update_permissions temp",
            AdminStep::DeleteTemp => "delete_user temp",
            AdminStep::CreateChurnTopic => "create_topic churn",
            AdminStep::UpdateChurnTopic => "update_topic churn",
            AdminStep::PurgeChurnTopic => "purge_topic churn",
            AdminStep::PurgeChurnStream => "purge_stream churn",
            AdminStep::UpdateChurnStream => "update_stream churn",
        }
    }
}

#[derive(Clone, Debug)]
struct Pending {
    work: Work,
    request: u64,
    /// The request_checksum the request carried (0 if none): its reply echoes it.
    checksum: u128,
    sent_tick: u64,
    /// The partition a send named (`Partitioning::PartitionId`), if it named one.
    partition: Option<u32>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Login {
    Anonymous,
    Pending,
    LoggedIn { session: u64 },
}

/// What the client asks the world to do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClientAction {
    /// Open a connection to this node (the cluster answers with `connected`).
    Connect { node: u8 },
    /// Send this frame on the connection.
    Frame(Vec<u8>),
    /// Close the connection.
    Disconnect,
}

/// What a reply meant, for the checkers and the trace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Observation {
    LoggedIn {
        session: u64,
    },
    SendAcked {
        partition: PartitionKey,
        base_offset: u64,
        values: Vec<u128>,
    },
    /// The connection broke or the session was lost with the batch in flight: it may or may
    /// not be in.
    SendIndeterminate {
        values: Vec<u128>,
    },
    /// Refused before it reached a group: definitely not in.
    SendFailed {
        values: Vec<u128>,
        status: u32,
    },
    Polled {
        partition: PartitionKey,
        from: u64,
        /// What a poll by offset asked, and when (none for a poll that auto-commits).
        ask: Option<PollAsk>,
        messages: Vec<(u64, u128)>,
        current_offset: u64,
    },
    Admin {
        step: &'static str,
        ids: Vec<u32>,
        status: u32,
    },
    Membership {
        joined: bool,
        status: u32,
    },
    /// A poll given up without its reply: it may have been applied (and, with auto-commit,
    /// moved the stored offset past messages this consumer never saw).
    PollAbandoned {
        partition: PartitionKey,
        /// For an auto-commit poll: the most messages it may still store the offset past, if
        /// it lands after all.
        late_commit_max: Option<u64>,
    },
    /// A request refused by the node (status in the reply header).
    Denied {
        operation: u8,
        status: u32,
    },
    Disconnected,
    Nothing,
    /// What the front door answered this client's user (for the access checker).
    Access {
        user: &'static str,
        rights: Rights,
        action: Action,
        answer: Answer,
    },
    LoggedOut,
    TokenCreated {
        name: String,
    },
    /// A send to the churn topic was acknowledged (somewhere in whichever incarnation of it
    /// the node found by name).
    ChurnSendAcked {
        values: Vec<u128>,
    },
    /// A poll of the churn topic answered with these values.
    ChurnPolled {
        values: Vec<u128>,
    },
    /// Names a read's reply gave this client's user that only their owner may see.
    Names {
        user: &'static str,
        read: Read,
        names: Vec<String>,
    },
    /// A send to `partition` was acknowledged while an earlier send to it on the same connection
    /// was unanswered.
    Overtaken {
        partition: u32,
    },
    /// A read's reply that does not decode.
    Malformed {
        read: Read,
        error: String,
    },
}

pub struct StreamClient {
    pub index: usize,
    /// The client id of the current login (an SDK draws a new one for every login).
    pub id: u128,
    pub role: Role,
    pub identity: Identity,
    tokens: Vec<Token>,
    tokens_made: u32,
    connection: Option<(ConnectionId, u8)>,
    login: Login,
    /// The SDK's request counter: the next number a metadata command takes (from 1).
    request_counter: u64,
    /// In the order sent; more than one only for a producer's pipelined sends.
    pending: Vec<Pending>,
    /// Sends a producer keeps in flight at once (1: it waits for each reply).
    pub sends_in_flight_max: usize,
    /// Sends left (producers), membership flips left (members), admin steps done.
    budget: u64,
    sequence: u64,
    positions: BTreeMap<u32, u64>,
    poll_cursor: usize,
    member: bool,
    admin_steps: Vec<AdminStep>,
    finishing: bool,
    idle_until: u64,
    /// The next node to connect to (clients go round the nodes when one fails them).
    next_node: u8,
    /// The administrator's topic starts with this many partitions.
    pub initial_partitions: u32,
    /// The durability mode the administrator creates and updates topics with.
    pub enforce_fsync: bool,
    pub retention: TopicRetention,
    /// Messages in one send: 1 to one less than this.
    pub batch_messages_max: u32,
    pub volume: Volume,
    /// Values of a send this client just started, for the checker (taken by the cluster).
    pub invoked: Option<Vec<u128>>,
    /// The partition the send being built names, if it names one (taken by `start`).
    named_partition: Option<u32>,
    /// What the client saw since the cluster last took them.
    pub observations: Vec<Observation>,
}

/// Per-message frame bytes (`PROTOCOL.md`).
const MESSAGE_FRAME_SIZE: usize = 48;

/// A message's payload length, 0 bytes and up, from its value (so the checker can count bytes
/// without being told): batches of many messages carry short payloads, a single message up to
/// the volume's message limit; with every header a batch stays within the groups' prepare limit.
pub fn payload_len(value: u128, batch_messages: usize, volume: Volume) -> usize {
    let most = (volume.batch_payload_bytes_max() / batch_messages.max(1))
        .saturating_sub(MESSAGE_FRAME_SIZE)
        .min(volume.message_payload_bytes_max());
    (vireo_storage::checksum::checksum64(&value.to_le_bytes()) % (most as u64 + 1)) as usize
}

pub fn new_client_id(rng: &mut SimRng) -> u128 {
    ((rng.next_u64() as u128) << 64 | rng.next_u64() as u128) | 1
}

impl StreamClient {
    pub fn new(index: usize, id: u128, role: Role, identity: Identity, budget: u64, first_node: u8) -> StreamClient {
        let admin_steps = if role == Role::Admin {
            let mut steps = vec![AdminStep::CreateStream, AdminStep::CreateTopic, AdminStep::CreateGroup];
            steps.extend((0..USERS.len()).map(AdminStep::CreateUser));
            steps
        } else {
            Vec::new()
        };
        StreamClient {
            index,
            id,
            role,
            identity,
            tokens: Vec::new(),
            tokens_made: 0,
            connection: None,
            login: Login::Anonymous,
            request_counter: 1,
            pending: Vec::new(),
            sends_in_flight_max: 1,
            budget,
            sequence: 0,
            positions: BTreeMap::new(),
            poll_cursor: 0,
            member: false,
            admin_steps,
            finishing: false,
            idle_until: 0,
            next_node: first_node,
            initial_partitions: 1,
            enforce_fsync: true,
            retention: TopicRetention::KEEP,
            batch_messages_max: Volume::Normal.batch_messages_max(),
            volume: Volume::Normal,
            invoked: None,
            named_partition: None,
            observations: Vec::new(),
        }
    }

    /// The options of every topic the administrator creates or updates: the run's durability
    /// and retention.
    fn topic_options(&self) -> wire::Options {
        let mut pairs = vec![("enforce_fsync".to_string(), wire::OptionValue::Bool(self.enforce_fsync))];
        if self.retention != TopicRetention::KEEP {
            pairs.push(("segment_size".to_string(), wire::OptionValue::U64(self.retention.segment_size)));
            pairs.push(("message_expiry".to_string(), wire::OptionValue::U64(self.retention.message_expiry_us)));
            pairs.push(("max_topic_size".to_string(), wire::OptionValue::U64(self.retention.max_topic_size)));
        }
        wire::Options::new(pairs).expect("four short options")
    }

    /// The producer or consumer number the checker knows this client by.
    pub fn actor(&self) -> u64 {
        self.index as u64
    }

    /// Requests in flight (more than one: pipelined sends).
    pub fn in_flight(&self) -> usize {
        self.pending.len()
    }

    /// The connection this client holds, if any.
    pub fn connection(&self) -> Option<(ConnectionId, u8)> {
        self.connection
    }

    /// The liveness phase: stop starting new disruptive work, finish what the script needs.
    pub fn finish(&mut self) {
        if self.role == Role::Admin && !self.finishing {
            // The run ends with a churn topic, whose final read the churn ledger checks: an
            // incarnation created after the others were deleted must hold none of their values.
            self.admin_steps.extend([AdminStep::CreateChurnStream, AdminStep::CreateChurnTopic]);
        }
        self.finishing = true;
    }

    /// Whether the script is done: nothing in flight and nothing left to do. A consumer is done
    /// once it has read every partition up to the ends `ends` gives (the final state).
    pub fn done(&self, ends: &BTreeMap<u32, u64>) -> bool {
        if !self.pending.is_empty() || !self.finishing {
            return false;
        }
        // A user whose rights race (it may be deleted for good) or who may not read has no
        // script to finish.
        let racing = !self.identity.rights.fixed;
        match self.role {
            Role::Admin => self.admin_steps.is_empty(),
            Role::Producer => self.budget == 0 || racing,
            Role::Member => true,
            Role::Consumer { .. } if racing || !self.identity.rights.poll => true,
            Role::Consumer { .. } => {
                ends.iter().all(|(partition, end)| self.positions.get(partition).copied().unwrap_or(0) >= *end)
            }
        }
    }

    /// What keeps this client from being done, for a liveness report.
    pub fn waiting_on(&self, ends: &BTreeMap<u32, u64>) -> String {
        let mut what =
            format!("{} {:?} pending={} finishing={}", self.index, self.role, self.pending.len(), self.finishing);
        match self.role {
            Role::Admin => {
                what += &format!(" steps={:?}", self.admin_steps.iter().map(|step| step.name()).collect::<Vec<_>>())
            }
            Role::Producer => what += &format!(" budget={}", self.budget),
            Role::Consumer { .. } => what += &format!(" positions={:?} ends={ends:?}", self.positions),
            Role::Member => {}
        }
        what
    }

    /// The cluster opened the connection this client asked for.
    pub fn connected(&mut self, connection: ConnectionId, node: u8) {
        assert!(self.connection.is_none());
        self.connection = Some((connection, node));
        self.login = Login::Anonymous;
    }

    /// The node to connect to was down: the next one, a little later.
    pub fn connect_failed(&mut self, nodes: u8) {
        self.next_node = (self.next_node + 1) % nodes;
        self.idle_until = self.idle_until.max(1);
    }

    /// The connection broke (the node crashed or closed it, or a frame was lost on it): what
    /// was in flight has an unknown fate.
    pub fn disconnected(&mut self, nodes: u8) {
        if self.connection.take().is_none() {
            return;
        }
        self.next_node = (self.next_node + 1) % nodes;
        self.login = Login::Anonymous;
        self.abandon_all();
        self.observations.push(Observation::Disconnected);
    }

    fn abandon_all(&mut self) {
        for pending in std::mem::take(&mut self.pending) {
            self.abandon(pending);
        }
    }

    fn abandon(&mut self, pending: Pending) {
        match pending.work {
            // Deleted or not: a login with it proves nothing either way, so it is not tried.
            Work::DeleteToken { name } => self.tokens.retain(|token| token.name != name),
            Work::Send { values } => self.observations.push(Observation::SendIndeterminate { values }),
            Work::Poll { partition, .. } => self.observations.push(Observation::PollAbandoned {
                partition: PartitionKey { stream: STREAM, topic: TOPIC, partition },
                late_commit_max: self.late_commit_max(),
            }),
            _ => {}
        }
    }

    /// The most messages one of this client's polls asks for, if its polls auto-commit (`count`
    /// in the poll request).
    fn late_commit_max(&self) -> Option<u64> {
        matches!(self.role, Role::Consumer { committing: true }).then(|| 16 + 4 * self.batch_messages_max as u64)
    }

    /// What the client does next, if anything.
    pub fn tick(&mut self, tick: u64, rng: &mut SimRng, topology: &Topology, nodes: u8) -> Option<ClientAction> {
        if let Some(oldest) = self.pending.first() {
            if tick >= oldest.sent_tick + REQUEST_TIMEOUT_TICKS {
                // No answer: give the node up.
                self.disconnected(nodes);
                self.idle_until = tick + rng.range(1, 10);
                return Some(ClientAction::Disconnect);
            }
        }
        if tick < self.idle_until {
            return None;
        }
        if !self.pending.is_empty() {
            // Only a producer pipelines, and only sends.
            let pipelining = self.role == Role::Producer
                && self.pending.len() < self.sends_in_flight_max
                && self
                    .pending
                    .iter()
                    .all(|pending| matches!(pending.work, Work::Send { .. } | Work::ChurnSend { .. }));
            if !pipelining {
                return None;
            }
            let work = self.next_send(rng, topology)?;
            return Some(self.start(work, tick, rng, topology));
        }
        let Some(_) = self.connection else {
            return Some(ClientAction::Connect { node: self.next_node % nodes });
        };
        match self.login {
            Login::Pending => return None,
            Login::Anonymous => {
                self.id = new_client_id(rng);
                self.request_counter = 1;
                self.login = Login::Pending;
                let (body, right) = self.login_body(rng);
                let mut header = self.request_header(OPERATION_REGISTER, 0, 0);
                header.parent = checksum64(&body) as u128;
                let checksum = header.parent;
                let login =
                    Pending { work: Work::Login { right }, request: 0, checksum, sent_tick: tick, partition: None };
                self.pending.push(login);
                return Some(ClientAction::Frame(Message::new(header, body).encode()));
            }
            Login::LoggedIn { .. } => {}
        }
        let work = self.next_work(rng, topology)?;
        Some(self.start(work, tick, rng, topology))
    }

    /// Sends `work`'s request and keeps it in flight.
    fn start(&mut self, work: Work, tick: u64, rng: &mut SimRng, topology: &Topology) -> ClientAction {
        let (header, body) = self.request(&work, rng, topology);
        if let Work::Send { values } = &work {
            self.invoked = Some(values.clone());
        }
        let partition = self.named_partition.take();
        let pending = Pending { work, request: header.request, checksum: header.parent, sent_tick: tick, partition };
        self.pending.push(pending);
        ClientAction::Frame(Message::new(header, body).encode())
    }

    /// A login body: mostly the user's password, sometimes a wrong one, one of the client's
    /// tokens (valid, expired or deleted); and whether it must succeed.
    fn login_body(&self, rng: &mut SimRng) -> (Vec<u8>, bool) {
        let (sdk_name, sdk_version) = (Name::new("vireo-sim").expect("name"), Name::new("0.1.0").expect("name"));
        if !self.tokens.is_empty() && rng.chance(300_000) {
            let token = rng.pick(&self.tokens).clone();
            let login = LoginWithToken {
                protocol_version: 0x2C00,
                sdk_name,
                sdk_version,
                token: ShortBytes::new(token.token.into_bytes()).expect("a short token"),
                context: Vec::new(),
            };
            return (ClientRequest::LoginWithPersonalAccessToken(login).encode(), token.valid);
        }
        let right = !rng.chance(100_000);
        let password = if right { self.identity.password } else { "not-the-password" };
        let login = LoginRegister {
            protocol_version: 0x2C00,
            sdk_name,
            sdk_version,
            username: Name::new(self.identity.username).expect("name"),
            password: ShortBytes::new(password.as_bytes().to_vec()).expect("password"),
            context: Vec::new(),
        };
        (ClientRequest::LoginRegister(login).encode(), right)
    }

    /// A connection's sends to one partition are answered in the order sent: the node hands a
    /// group one request of a connection at a time, and the connection keeps replies in order.
    /// A send acknowledged while an earlier send to its partition on the same connection waits
    /// for its answer overtook it (the earlier may never be applied, or be applied after it).
    fn check_send_order(&mut self, index: usize, body: &[u8]) {
        if !matches!(self.pending[index].work, Work::Send { .. }) {
            return;
        }
        let Ok(reply) = SendMessagesReply::decode(body) else { return };
        let Some(appended) = reply.appended.first() else { return };
        let partition = appended.partition_id;
        let overtaken = self.pending[..index]
            .iter()
            .any(|earlier| matches!(earlier.work, Work::Send { .. }) && earlier.partition == Some(partition));
        if overtaken {
            self.observations.push(Observation::Overtaken { partition });
        }
    }

    fn access(&mut self, action: Action, answer: Answer) {
        let (user, rights) = (self.identity.username, self.identity.rights);
        self.observations.push(Observation::Access { user, rights, action, answer });
    }

    fn session(&self) -> u64 {
        match self.login {
            Login::LoggedIn { session } => session,
            _ => 0,
        }
    }

    fn request_header(&self, operation: u8, request: u64, session: u64) -> Header {
        let mut header = Header::new(Command::Request, 0, 0);
        header.client = self.id;
        header.operation = operation;
        header.request = request;
        header.session = session;
        header
    }

    fn next_work(&mut self, rng: &mut SimRng, topology: &Topology) -> Option<Work> {
        if self.role != Role::Admin && rng.chance(5_000) {
            return Some(Work::Logout);
        }
        if self.role != Role::Admin && !self.finishing && rng.chance(READ_PPM) {
            return Some(Work::Read(*rng.pick(&Read::ALL)));
        }
        if self.identity != ROOT && self.identity.rights.fixed && !self.finishing {
            // A user keeps tokens: one that lasts, one that expires at once; and deletes one
            // now and then (a later login with it must fail). Several users hold tokens, so a
            // listing that shows another user's is caught.
            if self.tokens.len() < 2 && rng.chance(50_000) {
                self.tokens_made += 1;
                let lasting = self.tokens.iter().all(|token| !token.valid);
                let name = token_name(self.identity.username, self.index, self.tokens_made);
                return Some(Work::CreateToken { name, expiry: if lasting { 0 } else { 1 } });
            }
            if rng.chance(5_000) {
                if let Some(token) = self.tokens.iter().find(|token| token.valid) {
                    return Some(Work::DeleteToken { name: token.name.clone() });
                }
            }
        }
        match self.role {
            Role::Admin => {
                if self.admin_steps.is_empty() && !self.finishing && rng.chance(30_000) {
                    let step = *rng.pick(&[
                        AdminStep::AddPartition,
                        AdminStep::CreateChurnStream,
                        AdminStep::DeleteChurnStream,
                        AdminStep::DeleteChurnTopic,
                        AdminStep::DeleteChurnTopic,
                        AdminStep::CreateChurnTopic,
                        AdminStep::CreateChurnGroup,
                        AdminStep::DeleteChurnGroup,
                        AdminStep::SetTempRights(true),
                        AdminStep::SetTempRights(false),
                        AdminStep::DeleteTemp,
                        AdminStep::CreateUser(USERS.len() - 1),
                        AdminStep::CreateChurnTopic,
                        AdminStep::UpdateChurnTopic,
                        AdminStep::PurgeChurnTopic,
                        AdminStep::PurgeChurnStream,
                        AdminStep::UpdateChurnStream,
                    ]);
                    if step == AdminStep::CreateChurnTopic {
                        // Its stream first (an "already exists" is fine): the churn topic is
                        // there, with traffic, for a good share of the run.
                        self.admin_steps.push(AdminStep::CreateChurnStream);
                    }
                    if step != AdminStep::AddPartition || (topology.partitions.len() as u64) < self.budget {
                        self.admin_steps.push(step);
                    }
                }
                Some(Work::Admin(*self.admin_steps.first()?))
            }
            Role::Producer => self.next_send(rng, topology),
            Role::Consumer { .. } => {
                if topology.partitions.is_empty() {
                    return None;
                }
                if self.identity == ROOT && !self.finishing && rng.chance(100_000) {
                    return Some(Work::ChurnPoll);
                }
                self.poll_cursor = (self.poll_cursor + 1) % topology.partitions.len();
                let partition = topology.partitions[self.poll_cursor];
                let from = self.positions.get(&partition).copied().unwrap_or(0);
                // Polls scale with the batches producers send, or consumers never catch up.
                let count = 1 + (self.sequence % (16 + 4 * self.batch_messages_max as u64)) as u32;
                self.sequence += 1;
                Some(Work::Poll { partition, from, count })
            }
            Role::Member => {
                if !topology.group_created || (self.finishing && !self.member) || self.budget == 0 {
                    return None;
                }
                Some(if self.member { Work::Leave } else { Work::Join })
            }
        }
    }

    /// A producer's next send, if its script has one left (counting those in flight).
    fn next_send(&mut self, rng: &mut SimRng, topology: &Topology) -> Option<Work> {
        let spent = self.budget <= self.pending.len() as u64;
        // Outside the script's budget (and on, slower, once it is spent): a few messages for
        // whichever churn topic exists.
        if self.identity == ROOT && !self.finishing && rng.chance(if spent { 20_000 } else { 250_000 }) {
            let values = (0..rng.range(1, 8))
                .map(|_| {
                    self.sequence += 1;
                    ((self.index as u128 + 1) << 64) | CHURN_VALUE | self.sequence as u128
                })
                .collect();
            return Some(Work::ChurnSend { values });
        }
        if spent || topology.partitions.is_empty() {
            return None;
        }
        let count = rng.range(1, self.batch_messages_max as u64) as usize;
        let values = (0..count)
            .map(|_| {
                self.sequence += 1;
                ((self.index as u128 + 1) << 64) | self.sequence as u128
            })
            .collect();
        Some(Work::Send { values })
    }

    /// The header and body of `work`'s request, numbered as the SDK numbers them.
    fn request(&mut self, work: &Work, rng: &mut SimRng, topology: &Topology) -> (Header, Vec<u8>) {
        let id = |value: u32| wire::Identifier::Numeric(value);
        let name = |text: &str| Name::new(text).expect("name");
        let session = self.session();
        let metadata = |client: &mut StreamClient, request: ClientRequest| {
            let operation = operation_of(request.command_code()).expect("a metadata command");
            let body = request.encode();
            let number = client.request_counter;
            client.request_counter += 1;
            let mut header = client.request_header(operation, number, session);
            header.parent = checksum64(&body) as u128;
            (header, body)
        };
        let churn = || wire::Identifier::Name(Name::new("churn").expect("name"));
        let topic_rights = |send: bool, poll: bool| permissions_of(Rights { send, poll, ..Rights::NONE });
        match work {
            Work::Login { .. } => unreachable!("built by tick"),
            Work::Logout => {
                let number = self.request_counter;
                self.request_counter += 1;
                let mut header = self.request_header(OPERATION_LOGOUT, number, session);
                header.parent = checksum64(&[]) as u128;
                (header, Vec::new())
            }
            Work::CreateToken { name: token, expiry } => {
                metadata(self, ClientRequest::CreatePersonalAccessToken { name: name(token), expiry: *expiry })
            }
            Work::DeleteToken { name: token } => {
                metadata(self, ClientRequest::DeletePersonalAccessToken { name: name(token) })
            }
            Work::Admin(step) => {
                let request = match step {
                    AdminStep::CreateStream => {
                        ClientRequest::CreateStream { name: name("orders"), options: wire::Options::empty() }
                    }
                    AdminStep::CreateTopic => ClientRequest::CreateTopic {
                        stream: id(STREAM),
                        partitions_count: self.initial_partitions,
                        name: name("events"),
                        options: self.topic_options(),
                    },
                    AdminStep::CreateGroup => ClientRequest::CreateConsumerGroup {
                        stream: id(STREAM),
                        topic: id(TOPIC),
                        name: name("readers"),
                    },
                    AdminStep::AddPartition => {
                        ClientRequest::CreatePartitions { stream: id(STREAM), topic: id(TOPIC), count: 1 }
                    }
                    AdminStep::CreateChurnStream => {
                        ClientRequest::CreateStream { name: name("churn"), options: wire::Options::empty() }
                    }
                    AdminStep::DeleteChurnStream => {
                        ClientRequest::DeleteStream { stream: wire::Identifier::Name(name("churn")) }
                    }
                    AdminStep::CreateChurnGroup => {
                        ClientRequest::CreateConsumerGroup { stream: id(STREAM), topic: id(TOPIC), name: name("churn") }
                    }
                    AdminStep::DeleteChurnGroup => ClientRequest::DeleteConsumerGroup {
                        stream: id(STREAM),
                        topic: id(TOPIC),
                        group: wire::Identifier::Name(name("churn")),
                    },
                    AdminStep::CreateUser(index) => {
                        let user = USERS[*index];
                        let permissions = permissions_of(user.rights);
                        ClientRequest::CreateUser {
                            username: name(user.username),
                            password: ShortBytes::new(user.password.as_bytes().to_vec()).expect("password"),
                            status: 1,
                            permissions: Some(permissions),
                            options: wire::Options::empty(),
                        }
                    }
                    AdminStep::SetTempRights(on) => ClientRequest::UpdatePermissions {
                        user: wire::Identifier::Name(name(TEMP.username)),
                        permissions: on.then(|| topic_rights(true, true)),
                    },
                    AdminStep::DeleteTemp => {
                        ClientRequest::DeleteUser { user: wire::Identifier::Name(name(TEMP.username)) }
                    }
                    AdminStep::CreateChurnTopic => ClientRequest::CreateTopic {
                        stream: churn(),
                        partitions_count: 2,
                        name: name("churn"),
                        options: self.topic_options(),
                    },
                    AdminStep::UpdateChurnTopic => ClientRequest::UpdateTopic {
                        stream: churn(),
                        topic: churn(),
                        name: name("churn"),
                        options: self.topic_options(),
                    },
                    AdminStep::PurgeChurnTopic => ClientRequest::PurgeTopic { stream: churn(), topic: churn() },
                    AdminStep::DeleteChurnTopic => ClientRequest::DeleteTopic { stream: churn(), topic: churn() },
                    AdminStep::PurgeChurnStream => ClientRequest::PurgeStream { stream: churn() },
                    AdminStep::UpdateChurnStream => ClientRequest::UpdateStream {
                        stream: churn(),
                        name: name("churn"),
                        options: wire::Options::empty(),
                    },
                };
                metadata(self, request)
            }
            Work::Join => metadata(
                self,
                ClientRequest::JoinConsumerGroup { stream: id(STREAM), topic: id(TOPIC), group: id(GROUP) },
            ),
            Work::Leave => metadata(
                self,
                ClientRequest::LeaveConsumerGroup { stream: id(STREAM), topic: id(TOPIC), group: id(GROUP) },
            ),
            Work::ChurnSend { values } => {
                let mut builder = BatchBuilder::new();
                for value in values {
                    builder.push(*value, &value.to_le_bytes(), &[]);
                }
                let send = SendMessages::new(churn(), churn(), Partitioning::Balanced, builder.finish(0))
                    .expect("a whole batch");
                let body = ClientRequest::SendMessages(send).encode();
                let mut header = self.request_header(OPERATION_SEND_MESSAGES, self.request_counter, session);
                header.parent = checksum64(&body) as u128;
                (header, body)
            }
            Work::Read(read) => {
                let other = if self.identity == ROOT { WRITER.username } else { ROOT.username };
                let request = match read {
                    Read::Streams => ClientRequest::GetStreams,
                    Read::Stream => ClientRequest::GetStream { stream: id(STREAM) },
                    Read::Topics => ClientRequest::GetTopics { stream: id(STREAM) },
                    Read::Topic => ClientRequest::GetTopic { stream: id(STREAM), topic: id(TOPIC) },
                    Read::ConsumerGroups => ClientRequest::GetConsumerGroups { stream: id(STREAM), topic: id(TOPIC) },
                    Read::ConsumerGroup => {
                        ClientRequest::GetConsumerGroup { stream: id(STREAM), topic: id(TOPIC), group: id(GROUP) }
                    }
                    Read::Users => ClientRequest::GetUsers,
                    Read::User { own } => ClientRequest::GetUser {
                        user: wire::Identifier::Name(name(if *own { self.identity.username } else { other })),
                    },
                    Read::Clients => ClientRequest::GetClients,
                    Read::Stats => ClientRequest::GetStats,
                    Read::PersonalAccessTokens => ClientRequest::GetPersonalAccessTokens,
                    Read::ConsumerOffset => ClientRequest::GetConsumerOffset(wire::ConsumerOffsetKey {
                        consumer: Consumer { kind: ConsumerKind::Consumer, id: id(self.index as u32) },
                        stream: id(STREAM),
                        topic: id(TOPIC),
                        partition_id: Some(topology.partitions.first().copied().unwrap_or(0)),
                    }),
                    Read::ClusterMetadata => ClientRequest::GetClusterMetadata,
                    Read::DescribeOptions => ClientRequest::DescribeOptions { scope: 1 },
                };
                let mut header = self.request_header(OPERATION_NON_REPLICATED, self.request_counter, session);
                header.command_code = request.command_code();
                (header, request.encode())
            }
            Work::ChurnPoll => {
                let poll = PollMessages {
                    consumer: Consumer { kind: ConsumerKind::Consumer, id: id(self.index as u32) },
                    stream: churn(),
                    topic: churn(),
                    partition_id: Some(0),
                    strategy: PollingStrategy { kind: PollingKind::Offset, value: 0 },
                    count: 100,
                    auto_commit: false,
                };
                let body = ClientRequest::PollMessages(poll).encode();
                let mut header = self.request_header(OPERATION_NON_REPLICATED, self.request_counter, session);
                header.command_code = wire::command::POLL_MESSAGES;
                (header, body)
            }
            Work::Send { values } => {
                let mut builder = BatchBuilder::new();
                for value in values {
                    let payload: Vec<u8> = value
                        .to_le_bytes()
                        .iter()
                        .copied()
                        .cycle()
                        .take(payload_len(*value, values.len(), self.volume))
                        .collect();
                    builder.push(*value, &payload, &[]);
                }
                let partitioning = match rng.below(3) {
                    0 => Partitioning::Balanced,
                    1 => {
                        let partition = *rng.pick(&topology.partitions);
                        self.named_partition = Some(partition);
                        Partitioning::PartitionId(partition)
                    }
                    _ => Partitioning::MessagesKey(
                        MessagesKey::new(format!("key-{}", rng.below(16)).into_bytes()).expect("a short key"),
                    ),
                };
                let send =
                    SendMessages::new(id(STREAM), id(TOPIC), partitioning, builder.finish(0)).expect("a whole batch");
                let body = ClientRequest::SendMessages(send).encode();
                // Partition requests carry the number the next metadata command will take; the
                // body's checksum tells pipelined sends' replies apart (values are unique, so
                // bodies are).
                let mut header = self.request_header(OPERATION_SEND_MESSAGES, self.request_counter, session);
                header.parent = checksum64(&body) as u128;
                (header, body)
            }
            Work::Poll { partition, from, count } => {
                let committing = matches!(self.role, Role::Consumer { committing: true });
                let strategy = if committing {
                    PollingStrategy { kind: PollingKind::Next, value: 0 }
                } else {
                    PollingStrategy { kind: PollingKind::Offset, value: *from }
                };
                let poll = PollMessages {
                    consumer: Consumer { kind: ConsumerKind::Consumer, id: id(self.index as u32) },
                    stream: id(STREAM),
                    topic: id(TOPIC),
                    partition_id: Some(*partition),
                    strategy,
                    count: *count,
                    auto_commit: committing,
                };
                let body = ClientRequest::PollMessages(poll).encode();
                let mut header = self.request_header(OPERATION_NON_REPLICATED, self.request_counter, session);
                header.command_code = wire::command::POLL_MESSAGES;
                (header, body)
            }
        }
    }

    /// A frame the node sent on this client's connection.
    pub fn on_frame(&mut self, bytes: &[u8], tick: u64, rng: &mut SimRng) {
        // As an Iggy client reads it: the node seals a reply's header and leaves its body's
        // checksum out (zero) on answers it makes itself, so a body is checked only when sealed.
        let Ok(message) = Message::decode(bytes, false) else { return };
        let header = message.header;
        if header.client != self.id || !matches!(header.command, Command::Reply | Command::Eviction) {
            return;
        }
        if self.pending.is_empty() {
            return;
        }
        if header.command == Command::Eviction {
            // The session is gone: log in again; whatever else is in flight has an unknown fate
            // (its replies come back to the old client id, which this client no longer is).
            self.login = Login::Anonymous;
            self.abandon_all();
            return;
        }
        let Some(index) = self
            .pending
            .iter()
            .position(|pending| pending.request == header.request && pending.checksum == header.parent)
        else {
            return;
        };
        if header.status == 0 {
            self.check_send_order(index, &message.body);
        }
        let pending = self.pending.remove(index);
        if header.status != 0 {
            // A short pause: a user that may not send still works through its script.
            self.idle_until = tick + rng.range(1, 8);
            let refused = Answer::Refused(header.status);
            let observation = match pending.work {
                // The churn topic may well not exist: no rule for these but that they are not in.
                Work::ChurnSend { .. } | Work::ChurnPoll => return,
                Work::Login { right } => {
                    self.login = Login::Anonymous;
                    self.access(Action::Login { right }, refused);
                    Observation::Denied { operation: OPERATION_REGISTER, status: header.status }
                }
                Work::Send { values } => {
                    self.access(Action::Send, refused);
                    // A refused send counts against the script: a user that may not send
                    // finishes its script all the same.
                    self.budget = self.budget.saturating_sub(1);
                    Observation::SendFailed { values, status: header.status }
                }
                Work::Poll { .. } => {
                    // Refused before any group saw it: its run goes on where it was.
                    self.access(Action::Poll, refused);
                    Observation::Denied { operation: OPERATION_NON_REPLICATED, status: header.status }
                }
                Work::Read(read) => {
                    self.access(Action::Read(read), refused);
                    Observation::Denied { operation: OPERATION_NON_REPLICATED, status: header.status }
                }
                Work::Admin(step) => {
                    self.admin_steps.retain(|queued| *queued != step);
                    Observation::Admin { step: step.name(), ids: Vec::new(), status: header.status }
                }
                _ => Observation::Denied { operation: header.operation, status: header.status },
            };
            self.observations.push(observation);
            return;
        }
        let observation = match pending.work {
            Work::Login { right } => match LoginReply::decode(&message.body) {
                Ok(reply) if reply.session != 0 => {
                    self.login = Login::LoggedIn { session: reply.session };
                    // A new login is a new client: whatever groups the old one was in, the node
                    // took it out of them when its connection closed.
                    self.member = false;
                    self.access(Action::Login { right }, Answer::Succeeded);
                    Observation::LoggedIn { session: reply.session }
                }
                _ => {
                    self.login = Login::Anonymous;
                    Observation::Denied { operation: OPERATION_REGISTER, status: u32::MAX }
                }
            },
            Work::Logout => {
                self.login = Login::Anonymous;
                Observation::LoggedOut
            }
            Work::CreateToken { name, expiry } => {
                let Ok((section, payload)) = ResultSection::decode_prefix(&message.body) else { return };
                if section.is_ok() {
                    if let Ok(created) = CreatedPersonalAccessToken::decode(payload) {
                        let token = created.token.as_str().to_string();
                        self.tokens.push(Token { name: name.clone(), token, valid: expiry == 0 });
                    }
                }
                Observation::TokenCreated { name }
            }
            Work::DeleteToken { name } => {
                if ResultSection::decode_prefix(&message.body).is_ok_and(|(section, _)| section.is_ok()) {
                    self.tokens.iter_mut().filter(|token| token.name == name).for_each(|token| token.valid = false);
                }
                Observation::Nothing
            }
            Work::Admin(step) => {
                let (status, ids) = match ResultSection::decode_prefix(&message.body) {
                    Ok((section, payload)) => (
                        section.entries.first().map_or(0, |entry| entry.result),
                        // A create's details start with the created object's id.
                        payload.get(..4).map(|id| u32::from_le_bytes(id.try_into().unwrap())).into_iter().collect(),
                    ),
                    Err(_) => (u32::MAX, Vec::new()),
                };
                // A step is done once answered, whatever the answer (a retried create may find
                // its own earlier success as "already exists").
                self.admin_steps.retain(|queued| *queued != step);
                Observation::Admin { step: step.name(), ids, status }
            }
            Work::Join | Work::Leave => {
                let joined = matches!(pending.work, Work::Join);
                let status = ResultSection::decode_prefix(&message.body)
                    .map_or(u32::MAX, |(section, _)| section.entries.first().map_or(0, |entry| entry.result));
                if status == 0 {
                    self.member = joined;
                    self.budget = self.budget.saturating_sub(1);
                }
                self.idle_until = tick + rng.range(5, 60);
                Observation::Membership { joined, status }
            }
            Work::ChurnSend { values } => match SendMessagesReply::decode(&message.body) {
                Ok(reply) if reply.appended.len() == 1 => Observation::ChurnSendAcked { values },
                _ => return,
            },
            Work::Read(read) => {
                // A list of no topics is what a node answers for a stream it does not hold (yet:
                // a node that lags), before any permission check, as the reference does: it tells
                // nothing, like an empty body.
                let no_topics = read == Read::Topics && message.body[..] == 0u32.to_le_bytes();
                if message.body.is_empty() || no_topics {
                    self.access(Action::Read(read), Answer::Absent);
                    return;
                }
                self.access(Action::Read(read), Answer::Succeeded);
                let names = match read {
                    Read::PersonalAccessTokens => wire::PersonalAccessTokenInfo::decode_list(&message.body)
                        .map(|tokens| tokens.iter().map(|token| token.name.as_str().to_string()).collect()),
                    Read::User { own: true } => wire::UserDetails::decode(&message.body)
                        .map(|user| vec![user.user.username.as_str().to_string()]),
                    _ => return,
                };
                match names {
                    Ok(names) => Observation::Names { user: self.identity.username, read, names },
                    Err(error) => Observation::Malformed { read, error: error.to_string() },
                }
            }
            Work::ChurnPoll => {
                let Ok(reply) = wire::PollReply::decode(&message.body) else { return };
                Observation::ChurnPolled { values: polled(&reply).into_iter().map(|(_, id)| id).collect() }
            }
            Work::Send { values } => match SendMessagesReply::decode(&message.body) {
                Ok(reply) if reply.appended.len() == 1 => {
                    let appended = reply.appended[0];
                    self.budget -= 1;
                    self.access(Action::Send, Answer::Succeeded);
                    let partition = PartitionKey { stream: STREAM, topic: TOPIC, partition: appended.partition_id };
                    Observation::SendAcked { partition, base_offset: appended.base_offset, values }
                }
                _ => Observation::SendIndeterminate { values },
            },
            Work::Poll { partition, from, count } => {
                let Ok(reply) = wire::PollReply::decode(&message.body) else {
                    self.observations.push(Observation::PollAbandoned {
                        partition: PartitionKey { stream: STREAM, topic: TOPIC, partition },
                        late_commit_max: self.late_commit_max(),
                    });
                    return;
                };
                self.access(Action::Poll, Answer::Succeeded);
                let messages = polled(&reply);
                let committing = matches!(self.role, Role::Consumer { committing: true });
                let from = if committing { messages.first().map_or(from, |(offset, _)| *offset) } else { from };
                let end = messages.last().map_or(from, |(offset, _)| offset + 1);
                let position = self.positions.entry(partition).or_insert(0);
                *position = (*position).max(end);
                if messages.is_empty() && committing {
                    // Nothing after the stored offset: this consumer is at the partition's end
                    // (a poll given up earlier may have taken it past messages it never saw).
                    *position = (*position).max(reply.current_offset + 1);
                }
                if messages.is_empty() {
                    self.idle_until = tick + rng.range(1, 10);
                    if committing {
                        return;
                    }
                }
                let partition = PartitionKey { stream: STREAM, topic: TOPIC, partition };
                // A poll by offset is held to real time: it was invoked when it was first sent.
                let ask = (!committing).then(|| PollAsk {
                    from,
                    count: count as u64,
                    invoked_at: pending.sent_tick,
                    size_cut: reply.batches().len() + batch_bytes_max(self.volume) > POLL_BYTES_MAX as usize,
                });
                Observation::Polled { partition, from, ask, messages, current_offset: reply.current_offset }
            }
        };
        self.observations.push(observation);
    }
}

/// The permissions the administrator gives a user the access checker's model says has `rights`
/// (on the workload's stream and topic, and the server).
fn permissions_of(rights: Rights) -> wire::Permissions {
    let mut permissions = wire::Permissions::default();
    permissions.global.read_streams = rights.read_streams;
    permissions.global.read_servers = rights.read_servers;
    permissions.global.read_users = rights.read_users;
    let mut stream = wire::StreamPermissions { read_stream: rights.read_stream, ..Default::default() };
    let topic = wire::TopicPermissions {
        read_topic: rights.read_topic,
        poll_messages: rights.poll,
        send_messages: rights.send,
        manage_topic: false,
    };
    if topic != wire::TopicPermissions::default() {
        stream.topics.insert(TOPIC, topic);
    }
    if stream != wire::StreamPermissions::default() {
        permissions.streams.insert(STREAM, stream);
    }
    permissions
}

/// The bytes of the largest batch a producer of this volume sends (payloads, message frames
/// and headers, the batch header): a poll whose reply is within this of `POLL_BYTES_MAX` may
/// have been cut by its size.
fn batch_bytes_max(volume: Volume) -> usize {
    volume.batch_payload_bytes_max() + volume.batch_messages_max() as usize * 128 + 256
}

/// The (offset, id) of every message a poll reply's batches hold, which must be whole, stamped
/// batches.
fn polled(reply: &wire::PollReply) -> Vec<(u64, u128)> {
    let mut messages = Vec::new();
    let mut rest = reply.batches();
    while !rest.is_empty() {
        let header = batch::BatchHeader::decode(rest).expect("whole batches");
        let (one, tail) = rest.split_at(header.batch_length as usize);
        batch::validate(one).expect("a stamped batch from the cluster");
        messages
            .extend(batch::messages(one).expect("messages").into_iter().map(|message| (message.offset, message.id)));
        rest = tail;
    }
    messages
}
