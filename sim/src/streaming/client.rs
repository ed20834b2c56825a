//! A simulated streaming client: one session per group it talks to (the metadata group, each
//! partition's group), one request in flight, retried with the same request number until it is
//! answered (so a retried send must land once), and a script by role:
//! - the administrator creates the stream, the topic and a consumer group, then adds partitions
//!   and creates and deletes a second topic while traffic runs;
//! - a producer sends batches of unique values (message ids) with every partitioning kind;
//! - a consumer polls every partition in turn, from its own position (strategy offset) or from
//!   its stored offset with auto-commit (strategy next);
//! - a member joins and leaves the consumer group, so that its assignment keeps changing.
//!
//! The client reports what it saw as `Observation`s; the cluster feeds them to the checkers.

use std::collections::BTreeMap;

use vireo_io::{Namespace, Peer};
use vireo_node::metadata_plane::operation_of;
use vireo_node::partition::request::{
    decode_poll_reply, decode_send_reply, reply_status, ConsumerKey, PartitionRequest,
};
use vireo_node::partitioning::{partition_for, Partitioning};
use vireo_node::routing::primary_offset;
use vireo_protocol::header::{group_of, Command, Header, Message};
use vireo_protocol::request::OPERATION_REGISTER;
use vireo_protocol::wire::{self, ClientRequest, LoginRegister, Name, ResultSection, ShortBytes};
use vireo_storage::batch::{self, BatchBuilder};
use vireo_storage::partition::PollingStrategy;

use crate::kafka_log::PartitionKey;
use crate::rng::SimRng;

/// Ticks a request waits for its reply before it is sent again (to another node).
pub const REQUEST_TIMEOUT_TICKS: u64 = 40;
/// The stream and topic every producer and consumer uses (ids from 0).
pub const STREAM: u32 = 0;
pub const TOPIC: u32 = 0;
pub const GROUP: u32 = 0;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    Admin,
    Producer,
    Consumer { committing: bool },
    Member,
}

/// What the cluster learns from the administrator's replies: the topic's partitions.
#[derive(Clone, Debug, Default)]
pub struct Topology {
    pub partitions: Vec<u32>,
    pub group_created: bool,
}

#[derive(Clone, Debug)]
enum Work {
    Register,
    Admin(AdminStep),
    Send { partition: u32, values: Vec<u128> },
    Poll { partition: u32, from: u64 },
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
    CreateChurnGroup,
    DeleteChurnGroup,
}

#[derive(Clone, Debug)]
struct Pending {
    group: Namespace,
    work: Work,
    frame: Vec<u8>,
    request: u64,
    sent_tick: u64,
    target: u8,
    /// Times sent: a denial of a retry says nothing of the first attempt's fate.
    attempts: u32,
}

#[derive(Clone, Copy, Debug, Default)]
struct Session {
    session: u64,
    request: u64,
    view: u32,
}

/// What a reply meant, for the checkers and the trace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Observation {
    Nothing,
    Registered {
        group: Namespace,
        session: u64,
    },
    SendAcked {
        partition: PartitionKey,
        base_offset: u64,
        values: Vec<u128>,
    },
    /// The session was evicted or refused with the batch in flight: it may or may not be in.
    SendIndeterminate {
        values: Vec<u128>,
    },
    /// Denied before commit: definitely not in.
    SendFailed {
        values: Vec<u128>,
        status: u32,
    },
    Polled {
        partition: PartitionKey,
        from: u64,
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
    Evicted {
        group: Namespace,
    },
    /// A poll given up without its reply: it may have been applied (and, with auto-commit,
    /// moved the stored offset past messages this consumer never saw).
    PollAbandoned {
        partition: PartitionKey,
    },
    Denied {
        group: Namespace,
        status: u32,
    },
}

pub struct StreamClient {
    pub index: usize,
    pub id: u128,
    pub role: Role,
    sessions: BTreeMap<Namespace, Session>,
    pending: Option<Pending>,
    /// Sends left (producers), membership flips left (members), admin steps done.
    budget: u64,
    sequence: u64,
    positions: BTreeMap<u32, u64>,
    /// The end of each partition as the last poll saw it (last offset + 1).
    seen_ends: BTreeMap<u32, u64>,
    poll_cursor: usize,
    member: bool,
    admin_steps: Vec<AdminStep>,
    finishing: bool,
    idle_until: u64,
    /// The administrator's topic starts with this many partitions.
    pub initial_partitions: u32,
    /// Messages in one send: 1 to one less than this.
    pub batch_messages_max: u32,
    /// Values of a send this client just started, for the checker (taken by the cluster).
    pub invoked: Option<Vec<u128>>,
}

pub fn new_client_id(rng: &mut SimRng) -> u128 {
    ((rng.next_u64() as u128) << 64 | rng.next_u64() as u128) | 1
}

impl StreamClient {
    pub fn new(index: usize, id: u128, role: Role, budget: u64) -> StreamClient {
        let admin_steps = if role == Role::Admin {
            vec![AdminStep::CreateStream, AdminStep::CreateTopic, AdminStep::CreateGroup]
        } else {
            Vec::new()
        };
        StreamClient {
            index,
            id,
            role,
            sessions: BTreeMap::new(),
            pending: None,
            budget,
            sequence: 0,
            positions: BTreeMap::new(),
            seen_ends: BTreeMap::new(),
            poll_cursor: 0,
            member: false,
            admin_steps,
            finishing: false,
            idle_until: 0,
            initial_partitions: 1,
            invoked: None,
            batch_messages_max: 4,
        }
    }

    /// The producer or consumer number the checker knows this client by.
    pub fn actor(&self) -> u64 {
        self.index as u64
    }

    /// The liveness phase: stop starting new disruptive work, finish what the script needs.
    pub fn finish(&mut self) {
        self.finishing = true;
    }

    /// Whether the script is done: nothing in flight and nothing left to do. A consumer is done
    /// once it has read every partition up to the ends `ends` gives (the final state).
    pub fn done(&self, ends: &BTreeMap<u32, u64>) -> bool {
        if self.pending.is_some() || !self.finishing {
            return false;
        }
        match self.role {
            Role::Admin => self.admin_steps.is_empty(),
            Role::Producer => self.budget == 0,
            Role::Member => true,
            Role::Consumer { .. } => {
                ends.iter().all(|(partition, end)| self.positions.get(partition).copied().unwrap_or(0) >= *end)
            }
        }
    }

    fn guess_primary(&self, group: Namespace, nodes: u8) -> u8 {
        let view = self.sessions.get(&group).map_or(0, |session| session.view);
        ((view as u64 + primary_offset(group, nodes) as u64) % nodes as u64) as u8
    }

    /// The next frame to send, if any: a retry of the request in flight once it timed out, or
    /// the script's next request.
    pub fn tick(&mut self, tick: u64, rng: &mut SimRng, topology: &Topology, nodes: u8) -> Option<(Peer, Vec<u8>)> {
        if let Some(pending) = &mut self.pending {
            if tick < pending.sent_tick + REQUEST_TIMEOUT_TICKS {
                return None;
            }
            // The node may be down or not the primary any more: try another.
            pending.sent_tick = tick;
            pending.attempts += 1;
            pending.target = rng.below(nodes as u64) as u8;
            return Some((Peer::Replica(pending.target), pending.frame.clone()));
        }
        if tick < self.idle_until {
            return None;
        }
        let (group, work) = self.next_work(rng, topology)?;
        // Every group's session is vouched for by a metadata session: log in first.
        let logged_in = self.sessions.get(&Namespace::METADATA).is_some_and(|session| session.session != 0);
        let group = if logged_in { group } else { Namespace::METADATA };
        let registered = self.sessions.get(&group).is_some_and(|session| session.session != 0);
        let work = if registered { work } else { Work::Register };
        if let Work::Send { values, .. } = &work {
            self.invoked = Some(values.clone());
        }
        let (operation, body, request, session) = match &work {
            Work::Register => (OPERATION_REGISTER, self.register_body(group), 0, 0),
            other => {
                let (operation, body) = self.request_body(other);
                let session = self.sessions.get_mut(&group).expect("registered");
                session.request += 1;
                (operation, body, session.request, session.session)
            }
        };
        let mut header = Header::new(Command::Request, 0, 0);
        header.client = self.id;
        header.group = group_of(group);
        header.operation = operation;
        header.request = request;
        header.session = session;
        let frame = Message::new(header, body).encode();
        let target = self.guess_primary(group, nodes);
        self.pending =
            Some(Pending { group, work, frame: frame.clone(), request, sent_tick: tick, target, attempts: 1 });
        Some((Peer::Replica(target), frame))
    }

    fn register_body(&self, group: Namespace) -> Vec<u8> {
        if !group.is_metadata() {
            return Vec::new();
        }
        let login = LoginRegister {
            protocol_version: 0x2C00,
            sdk_name: Name::new("vireo-sim").expect("name"),
            sdk_version: Name::new("0.1.0").expect("name"),
            username: Name::new("iggy").expect("name"),
            password: ShortBytes::new(b"iggy".to_vec()).expect("password"),
            context: Vec::new(),
        };
        ClientRequest::LoginRegister(login).encode()
    }

    fn next_work(&mut self, rng: &mut SimRng, topology: &Topology) -> Option<(Namespace, Work)> {
        match self.role {
            Role::Admin => {
                if self.admin_steps.is_empty() && !self.finishing && rng.chance(30_000) {
                    let step = *rng.pick(&[
                        AdminStep::AddPartition,
                        AdminStep::CreateChurnStream,
                        AdminStep::DeleteChurnStream,
                        AdminStep::CreateChurnGroup,
                        AdminStep::DeleteChurnGroup,
                    ]);
                    if step != AdminStep::AddPartition || (topology.partitions.len() as u64) < self.budget {
                        self.admin_steps.push(step);
                    }
                }
                let step = *self.admin_steps.first()?;
                Some((Namespace::METADATA, Work::Admin(step)))
            }
            Role::Producer => {
                if self.budget == 0 || topology.partitions.is_empty() {
                    return None;
                }
                let count = rng.range(1, self.batch_messages_max as u64) as usize;
                let values = (0..count)
                    .map(|_| {
                        self.sequence += 1;
                        ((self.index as u128 + 1) << 64) | self.sequence as u128
                    })
                    .collect();
                let partitioning = match rng.below(3) {
                    0 => Partitioning::Balanced,
                    1 => Partitioning::PartitionId(*rng.pick(&topology.partitions)),
                    _ => Partitioning::MessagesKey(format!("key-{}", rng.below(16)).into_bytes()),
                };
                let partition = partition_for(&partitioning, self.sequence, &topology.partitions)?;
                Some((Namespace::partition(STREAM, TOPIC, partition), Work::Send { partition, values }))
            }
            Role::Consumer { .. } => {
                if topology.partitions.is_empty() {
                    return None;
                }
                self.poll_cursor = (self.poll_cursor + 1) % topology.partitions.len();
                let partition = topology.partitions[self.poll_cursor];
                let from = self.positions.get(&partition).copied().unwrap_or(0);
                Some((Namespace::partition(STREAM, TOPIC, partition), Work::Poll { partition, from }))
            }
            Role::Member => {
                if !topology.group_created || (self.finishing && !self.member) || self.budget == 0 {
                    return None;
                }
                Some((Namespace::METADATA, if self.member { Work::Leave } else { Work::Join }))
            }
        }
    }

    fn request_body(&mut self, work: &Work) -> (u8, Vec<u8>) {
        let id = |value: u32| wire::Identifier::Numeric(value);
        let metadata = |request: ClientRequest| {
            let operation = operation_of(request.command_code()).expect("a metadata command");
            (operation, request.encode())
        };
        match work {
            Work::Register => unreachable!("built by tick"),
            Work::Admin(step) => metadata(match step {
                AdminStep::CreateStream => ClientRequest::CreateStream {
                    name: Name::new("orders").expect("name"),
                    options: wire::Options::empty(),
                },
                AdminStep::CreateTopic => ClientRequest::CreateTopic {
                    stream: id(STREAM),
                    partitions_count: self.budget_partitions(),
                    name: Name::new("events").expect("name"),
                    options: wire::Options::empty(),
                },
                AdminStep::CreateGroup => ClientRequest::CreateConsumerGroup {
                    stream: id(STREAM),
                    topic: id(TOPIC),
                    name: Name::new("readers").expect("name"),
                },
                AdminStep::AddPartition => {
                    ClientRequest::CreatePartitions { stream: id(STREAM), topic: id(TOPIC), count: 1 }
                }
                AdminStep::CreateChurnStream => ClientRequest::CreateStream {
                    name: Name::new("churn").expect("name"),
                    options: wire::Options::empty(),
                },
                AdminStep::DeleteChurnStream => {
                    ClientRequest::DeleteStream { stream: wire::Identifier::Name(Name::new("churn").expect("name")) }
                }
                AdminStep::CreateChurnGroup => ClientRequest::CreateConsumerGroup {
                    stream: id(STREAM),
                    topic: id(TOPIC),
                    name: Name::new("churn").expect("name"),
                },
                AdminStep::DeleteChurnGroup => ClientRequest::DeleteConsumerGroup {
                    stream: id(STREAM),
                    topic: id(TOPIC),
                    group: wire::Identifier::Name(Name::new("churn").expect("name")),
                },
            }),
            Work::Join | Work::Leave => metadata(if matches!(work, Work::Join) {
                ClientRequest::JoinConsumerGroup { stream: id(STREAM), topic: id(TOPIC), group: id(GROUP) }
            } else {
                ClientRequest::LeaveConsumerGroup { stream: id(STREAM), topic: id(TOPIC), group: id(GROUP) }
            }),
            Work::Send { partition, values } => {
                let mut builder = BatchBuilder::new();
                for value in values {
                    builder.push(*value, &value.to_le_bytes()[..8], &[]);
                }
                let request = PartitionRequest::Send { partition: *partition, batch: builder.finish(0) };
                (request.operation(), request.encode())
            }
            Work::Poll { partition, from } => {
                let committing = matches!(self.role, Role::Consumer { committing: true });
                let request = PartitionRequest::Poll {
                    partition: *partition,
                    consumer: ConsumerKey::Consumer(self.index as u32),
                    strategy: if committing { PollingStrategy::Next } else { PollingStrategy::Offset(*from) },
                    count: 1 + (self.sequence % 16) as u32,
                    auto_commit: committing,
                };
                self.sequence += 1;
                (request.operation(), request.encode())
            }
        }
    }

    fn budget_partitions(&self) -> u32 {
        self.initial_partitions
    }

    /// Drops every session and takes a new client id: requests of the old sessions may still be
    /// in flight, so their numbers must never be used again (the cluster would answer a new
    /// request with an old one's reply).
    fn start_over(&mut self, rng: &mut SimRng) {
        self.id = new_client_id(rng);
        self.sessions.clear();
    }

    /// A frame from the cluster addressed to this client.
    pub fn on_message(&mut self, bytes: &[u8], tick: u64, rng: &mut SimRng) -> Observation {
        let Ok(message) = Message::decode(bytes, true) else { return Observation::Nothing };
        let header = message.header;
        let Some(pending) = &self.pending else { return Observation::Nothing };
        let group = pending.group;
        if header.group != group_of(group) || header.client != self.id {
            return Observation::Nothing;
        }
        if header.command == Command::Eviction {
            let pending = self.pending.take().expect("pending");
            self.start_over(rng);
            return match pending.work {
                Work::Send { values, .. } => {
                    // Its fate is unknown; new values from here on (a resend could duplicate).
                    Observation::SendIndeterminate { values }
                }
                Work::Poll { partition, .. } => {
                    Observation::PollAbandoned { partition: PartitionKey { stream: STREAM, topic: TOPIC, partition } }
                }
                _ => Observation::Evicted { group },
            };
        }
        // A register answered from an existing session carries that session's last request
        // number: the next request must go above it.
        let register = matches!(pending.work, Work::Register);
        if header.command != Command::Reply || (header.request != pending.request && !register) {
            return Observation::Nothing;
        }
        let pending = self.pending.take().expect("pending");
        let session = self.sessions.entry(group).or_default();
        session.view = session.view.max(header.view);
        if header.status != 0 {
            // Refused by the node before it reached the group (not logged in, no permission):
            // nothing was applied. Wait a little and start over with a fresh login.
            self.idle_until = tick + REQUEST_TIMEOUT_TICKS;
            self.start_over(rng);
            return match pending.work {
                // A refusal proves nothing of the request's fate: an earlier attempt, or a copy
                // the network duplicated, may have been admitted before the session changed.
                Work::Send { values, .. } => Observation::SendIndeterminate { values },
                Work::Poll { partition, .. } => {
                    Observation::PollAbandoned { partition: PartitionKey { stream: STREAM, topic: TOPIC, partition } }
                }
                _ => Observation::Denied { group, status: header.status },
            };
        }
        match pending.work {
            Work::Register => {
                let session = self.sessions.entry(group).or_default();
                session.session = header.session;
                session.request = header.request;
                Observation::Registered { group, session: header.session }
            }
            Work::Admin(step) => {
                let Ok((section, payload)) = ResultSection::decode_prefix(&message.body) else {
                    return Observation::Nothing;
                };
                let status = section.entries.first().map_or(0, |entry| entry.result);
                let ids = payload.chunks_exact(4).map(|id| u32::from_le_bytes(id.try_into().unwrap())).collect();
                // A step is done once answered, whatever the answer (a retried create may find
                // its own earlier success as "already exists").
                self.admin_steps.retain(|queued| *queued != step);
                let name = match step {
                    AdminStep::CreateStream => "create_stream",
                    AdminStep::CreateTopic => "create_topic",
                    AdminStep::CreateGroup => "create_consumer_group",
                    AdminStep::AddPartition => "create_partitions",
                    AdminStep::CreateChurnStream => "create_stream churn",
                    AdminStep::DeleteChurnStream => "delete_stream churn",
                    AdminStep::CreateChurnGroup => "create_consumer_group churn",
                    AdminStep::DeleteChurnGroup => "delete_consumer_group churn",
                };
                Observation::Admin { step: name, ids, status }
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
            Work::Send { partition, values } => match decode_send_reply(&message.body) {
                Ok(reply) => {
                    assert_eq!(reply.partition, partition);
                    assert_eq!(reply.message_count as usize, values.len());
                    self.budget -= 1;
                    let partition = PartitionKey { stream: STREAM, topic: TOPIC, partition };
                    Observation::SendAcked { partition, base_offset: reply.base_offset, values }
                }
                Err(_) => {
                    let status = reply_status(&message.body).ok().flatten().map_or(u32::MAX, |status| status as u32);
                    Observation::SendFailed { values, status }
                }
            },
            Work::Poll { partition, from } => {
                let Ok(reply) = decode_poll_reply(&message.body) else { return Observation::Nothing };
                let mut messages = Vec::new();
                let mut rest = reply.batches.as_slice();
                while !rest.is_empty() {
                    let header = batch::BatchHeader::decode(rest).expect("whole batches");
                    let (one, tail) = rest.split_at(header.batch_length as usize);
                    batch::validate(one).expect("a stamped batch from the cluster");
                    for message in batch::messages(one).expect("messages") {
                        if message.offset >= reply.start && message.offset < reply.start + reply.count as u64 {
                            messages.push((message.offset, message.id));
                        }
                    }
                    rest = tail;
                }
                let end = reply.start + reply.count as u64;
                self.positions.insert(partition, end);
                let seen_end = reply.current_offset.wrapping_add(1);
                self.seen_ends.insert(partition, seen_end);
                if reply.count == 0 {
                    self.idle_until = tick + rng.range(1, 10);
                }
                let from = if matches!(self.role, Role::Consumer { committing: true }) { reply.start } else { from };
                let partition = PartitionKey { stream: STREAM, topic: TOPIC, partition };
                Observation::Polled { partition, from, messages, current_offset: reply.current_offset }
            }
        }
    }
}
