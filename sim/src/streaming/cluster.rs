//! The streaming cluster harness: N nodes of S shards each, every shard the real `Shard` state
//! machine of `vireo-node` (the metadata group on shard 0, partition groups where the routing
//! puts them), one simulated disk per node, the simulated network, the streaming clients, and
//! the checkers, all on one event queue of virtual time.
//!
//! A node admits a client's frame on its entry shard (0): it checks the login against the
//! committed users, or that the client holds a metadata session and may send or poll the topic,
//! and stamps the session's user into the request. A frame for another shard crosses a bounded
//! inter-shard channel (`CHANNEL_FRAMES_MAX`); a full channel drops the frame and counts it, and
//! the sender's timeout retries it (VSR tolerates a lost message; a client retries its request).
//! Committed metadata is published to the node's other shards as events, and every shard opens
//! the partition groups it owns as they appear.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use vireo_io::{Completion, Namespace, Peer, Token, TICK_NS};
use vireo_node::metadata::permissions::ReadKind;
use vireo_node::metadata::verify_password;
use vireo_node::metadata_plane::MetadataMachine;
use vireo_node::partition::request::OPERATION_SEND_MESSAGES;
use vireo_node::routing::shard_of;
use vireo_node::shard::{MetadataPlane, Shard, ShardConfig, ShardEvent};
use vireo_protocol::config::Bug;
use vireo_protocol::header::{Command, Header, Message};
use vireo_protocol::request::OPERATION_REGISTER;
use vireo_protocol::wire::{self, ClientRequest};
use vireo_protocol::{Config, ReplicaEvent, Status};
use vireo_storage::checksum::checksum64;
use vireo_storage::layout::WalLayout;

use super::client::{new_client_id, Observation, Role, StreamClient, Topology, GROUP, STREAM, TOPIC};
use super::scenario::StreamingScenario;
use crate::cluster::Outcome;
use crate::disk::{DiskRequest, SimDisk, Zone};
use crate::kafka_log::{KafkaLogChecker, PartitionKey};
use crate::network::Network;
use crate::queue::EventQueue;
use crate::rng::SimRng;
use crate::scenario::FaultRates;
use crate::sim_io::{SimEvent, SimIo};

pub const CLUSTER: u128 = 0x0056_4952_454f_5354;
/// Frames in flight on one inter-shard channel (entry shard to owner).
pub const CHANNEL_FRAMES_MAX: usize = 256;
const CHANNEL_DELAY_NS: u64 = 5_000;
const PREPARE_SIZE_MAX: u64 = 16 * 1024;
const SNAPSHOT_SIZE_MAX: u64 = 4 * 1024 * 1024;
/// Denial codes the entry shard answers with (Iggy's): not logged in, bad credentials.
const STATUS_UNAUTHENTICATED: u32 = 40;
const STATUS_INVALID_CREDENTIALS: u32 = 42;
const STATUS_INVALID_COMMAND: u32 = 3;

enum Event {
    Tick,
    Deliver { to: Peer, from: Peer, bytes: Vec<u8> },
    Channel { node: u8, incarnation: u64, shard: u16, bytes: Vec<u8> },
    Publish { node: u8, incarnation: u64, shard: u16 },
    Complete { node: u8, incarnation: u64, shard: u16, request: DiskRequest, token: Token },
}

struct SimNode {
    /// Empty while the node is down.
    shards: Vec<Shard<MetadataMachine>>,
    disk: SimDisk,
    incarnation: u64,
    restart_at_tick: Option<u64>,
    crashes: u64,
    channel_depth: Vec<usize>,
    published_op: u64,
}

/// Counters a run reports.
#[derive(Clone, Copy, Debug, Default)]
pub struct StreamingCounters {
    pub messages_acked: u64,
    pub bytes_acked: u64,
    pub messages_polled: u64,
    pub sends_indeterminate: u64,
    pub channel_full_drops: u64,
    pub denials: u64,
    pub assignments_checked: u64,
}

impl SimEvent for Event {
    /// The node, its incarnation and the shard that asked.
    type Issuer = (u8, u64, u16);
    fn deliver(to: Peer, from: Peer, bytes: Vec<u8>) -> Event {
        Event::Deliver { to, from, bytes }
    }
    fn complete((node, incarnation, shard): (u8, u64, u16), request: DiskRequest, token: Token) -> Event {
        Event::Complete { node, incarnation, shard, request, token }
    }
}

type ShardIo<'a> = SimIo<'a, Event>;

/// One shard's `Io`, built from disjoint fields of the cluster.
macro_rules! shard_io {
    ($cluster:ident, $node:ident, $index:expr, $shard:expr) => {
        ShardIo {
            now: $cluster.now,
            node: $index,
            issuer: ($index, $node.incarnation, $shard),
            disk: &mut $node.disk,
            rng: &mut $cluster.rng,
            network: &$cluster.network,
            rates: if $cluster.faults { &$cluster.scenario.core.faults } else { &$cluster.quiet },
            queue: &mut $cluster.queue,
            disk_faults: $cluster.faults,
        }
    };
}

pub struct StreamingCluster {
    pub scenario: StreamingScenario,
    rng: SimRng,
    now: u64,
    pub tick: u64,
    queue: EventQueue<Event>,
    nodes: Vec<SimNode>,
    network: Network,
    clients: Vec<StreamClient>,
    pub checker: KafkaLogChecker,
    shard_config: Vec<ShardConfig>,
    quiet: FaultRates,
    faults: bool,
    liveness_started_tick: Option<u64>,
    trace: Option<Vec<String>>,
    print_trace: bool,
    trace_hash: u64,
    pub events_processed: u64,
    max_down: usize,
    /// (group, op) -> (checksum, digest) as the first replica committed it.
    committed: BTreeMap<(Namespace, u64), (u128, u64)>,
    pub counters: StreamingCounters,
    topology: Topology,
}

impl StreamingCluster {
    pub fn new(scenario: StreamingScenario, rng: SimRng, bug: Option<Bug>) -> StreamingCluster {
        let n = scenario.core.replica_count;
        let mut metadata = Config::new(CLUSTER, n);
        metadata.journal_slots = scenario.core.journal_slots;
        metadata.prepare_size_max = PREPARE_SIZE_MAX;
        metadata.prepare_queue_max = scenario.core.prepare_queue_max;
        metadata.clients_max = scenario.core.clients_max;
        metadata.batch_requests_max = 8;
        metadata.request_queue_max = 16;
        metadata.snapshot_size_max = SNAPSHOT_SIZE_MAX;
        metadata.bug = bug;
        let partition = metadata.clone();
        let layout = WalLayout::new(metadata.journal_slots, metadata.prepare_size_max);
        let mut rng = rng;
        let nodes = (0..n)
            .map(|index| {
                let zone = (index < scenario.core.faults.faulty_disks).then(|| {
                    if rng.below(2) == 0 {
                        Zone::WalHeaders
                    } else {
                        Zone::WalPrepares
                    }
                });
                SimNode {
                    shards: Vec::new(),
                    disk: SimDisk::new(layout, zone),
                    incarnation: 0,
                    restart_at_tick: None,
                    crashes: 0,
                    channel_depth: vec![0; scenario.shards as usize],
                    published_op: 0,
                }
            })
            .collect();
        let shard_config = (0..scenario.shards)
            .map(|shard| ShardConfig {
                node: 0,
                shard,
                shards: scenario.shards,
                metadata: metadata.clone(),
                partition: partition.clone(),
                partitions_max: 4096,
            })
            .collect();
        let mut clients = Vec::new();
        let mut roles = vec![Role::Admin];
        roles.extend((0..scenario.producers).map(|_| Role::Producer));
        roles.extend((0..scenario.consumers).map(|index| Role::Consumer { committing: index % 2 == 1 }));
        roles.extend((0..scenario.members).map(|_| Role::Member));
        for (index, role) in roles.into_iter().enumerate() {
            let budget = match role {
                Role::Admin => scenario.partitions_max as u64,
                Role::Producer => scenario.sends_per_producer,
                Role::Member => rng.range(2, 8),
                Role::Consumer { .. } => 0,
            };
            let mut client = StreamClient::new(index, new_client_id(&mut rng), role, budget);
            client.initial_partitions = scenario.partitions;
            clients.push(client);
        }
        let faults = scenario.core.fault_level != crate::scenario::FaultLevel::None;
        let mut cluster = StreamingCluster {
            quiet: crate::cluster::quiet_rates(&scenario.core.faults),
            max_down: (n as usize / 2).max(1),
            scenario,
            rng,
            now: 0,
            tick: 0,
            queue: EventQueue::default(),
            nodes,
            network: Network::new(n as usize),
            clients,
            checker: KafkaLogChecker::new(),
            shard_config,
            faults,
            liveness_started_tick: None,
            trace: None,
            print_trace: false,
            trace_hash: 0,
            events_processed: 0,
            committed: BTreeMap::new(),
            counters: StreamingCounters::default(),
            topology: Topology::default(),
        };
        cluster.network.faults_enabled = faults;
        for node in 0..n {
            cluster.start_node(node);
        }
        cluster.queue.push(TICK_NS, Event::Tick);
        cluster
    }

    pub fn enable_trace(&mut self) {
        self.trace = Some(Vec::new());
    }

    pub fn print_trace(&mut self) {
        self.print_trace = true;
    }

    pub fn clients(&self) -> &[StreamClient] {
        &self.clients
    }

    pub fn trace_lines(&self) -> &[String] {
        self.trace.as_deref().unwrap_or(&[])
    }

    pub fn trace_hash(&self) -> u64 {
        self.trace_hash
    }

    pub fn crashes(&self) -> u64 {
        self.nodes.iter().map(|node| node.crashes).sum()
    }

    pub fn disk_faults(&self) -> u64 {
        self.nodes.iter().map(|node| node.disk.faults_injected).sum()
    }

    pub fn partitions(&self) -> u64 {
        self.network.partitions
    }

    fn log(&mut self, line: impl FnOnce() -> String) {
        if let Some(trace) = &mut self.trace {
            let line = format!("{:>8.3}s {}", self.now as f64 / 1e9, line());
            if self.print_trace {
                println!("{line}");
            } else {
                trace.push(line);
            }
        }
    }

    fn hash(&mut self, parts: &[u64]) {
        assert!(parts.len() <= 5);
        let mut bytes = [0u8; 48];
        bytes[..8].copy_from_slice(&self.trace_hash.to_le_bytes());
        for (index, part) in parts.iter().enumerate() {
            bytes[8 + index * 8..16 + index * 8].copy_from_slice(&part.to_le_bytes());
        }
        self.trace_hash = checksum64(&bytes[..8 + parts.len() * 8]);
    }

    fn start_node(&mut self, index: u8) {
        let node = &mut self.nodes[index as usize];
        node.restart_at_tick = None;
        node.published_op = 0;
        node.channel_depth.iter_mut().for_each(|depth| *depth = 0);
        for shard in 0..self.scenario.shards {
            let mut config = self.shard_config[shard as usize].clone();
            config.node = index;
            let node = &mut self.nodes[index as usize];
            let mut io = shard_io!(self, node, index, shard);
            let opened = Shard::open(config, &mut io);
            node.shards.push(opened);
        }
    }

    fn node_up(&self, index: u8) -> bool {
        !self.nodes[index as usize].shards.is_empty()
    }

    /// Runs one input on one shard, then drains its events into the checkers and publishes
    /// new metadata.
    fn with_shard(
        &mut self,
        index: u8,
        shard: u16,
        action: impl FnOnce(&mut Shard<MetadataMachine>, &mut ShardIo),
    ) -> Result<(), String> {
        let node = &mut self.nodes[index as usize];
        if node.shards.is_empty() {
            return Ok(());
        }
        let mut io = shard_io!(self, node, index, shard);
        action(&mut node.shards[shard as usize], &mut io);
        self.drain(index, shard)?;
        if shard == 0 {
            self.publish(index);
        }
        Ok(())
    }

    fn drain(&mut self, index: u8, shard: u16) -> Result<(), String> {
        loop {
            let node = &mut self.nodes[index as usize];
            let Some(ShardEvent { namespace, event }) = node.shards[shard as usize].poll_event() else { return Ok(()) };
            match event {
                ReplicaEvent::Committed { op, checksum, digest } => {
                    self.hash(&[1, index as u64, namespace.0, op, digest]);
                    match self.committed.get(&(namespace, op)) {
                        None => {
                            self.committed.insert((namespace, op), (checksum, digest));
                        }
                        Some(&(expected_checksum, expected_digest)) => {
                            if (checksum, digest) != (expected_checksum, expected_digest) {
                                return Err(format!(
                                    "n{index} group {namespace:?} committed op {op} as {checksum:032x}/{digest:016x}, \
                                     another replica as {expected_checksum:032x}/{expected_digest:016x}"
                                ));
                            }
                        }
                    }
                    if namespace.is_metadata() {
                        self.check_assignments(index, op)?;
                    }
                    self.log(|| format!("n{index}/s{shard} {} committed op={op}", group_name(namespace)));
                }
                ReplicaEvent::StatusChanged { status, view } => {
                    self.hash(&[2, index as u64, namespace.0, view as u64, status as u64]);
                    self.log(|| format!("n{index}/s{shard} {} status={status:?} view={view}", group_name(namespace)));
                }
                other => {
                    self.log(|| format!("n{index}/s{shard} {} {other:?}", group_name(namespace)));
                }
            }
        }
    }

    /// Checks every consumer group's assignment in this node's committed metadata.
    fn check_assignments(&mut self, index: u8, op: u64) -> Result<(), String> {
        let node = &self.nodes[index as usize];
        let Some(replica) = node.shards[0].metadata() else { return Ok(()) };
        let metadata = replica.state_machine().metadata();
        let mut groups = Vec::new();
        for stream in metadata.streams() {
            for topic in stream.topics.values() {
                for (group_id, _) in topic.consumer_groups.iter() {
                    if let Some(assignment) = metadata.assignment(stream.id, topic.id, *group_id) {
                        groups.push(((stream.id, topic.id, *group_id), topic.partitions_count(), assignment.clone()));
                    }
                }
            }
        }
        for (group, partitions_count, assignment) in groups {
            self.counters.assignments_checked += 1;
            self.checker
                .group_assignment(op, group, partitions_count, &assignment)
                .map_err(|anomaly| anomaly.to_string())?;
        }
        Ok(())
    }

    /// Makes shard 0's newest committed metadata every shard's: shard 0 at once, the others
    /// through an event (the publication crosses to their cores).
    fn publish(&mut self, index: u8) {
        let node = &mut self.nodes[index as usize];
        let Some(replica) = node.shards.first().and_then(|shard| shard.metadata()) else { return };
        if replica.status() == Status::Opening || replica.commit_min() <= node.published_op && node.published_op != 0 {
            return;
        }
        node.published_op = replica.commit_min().max(1);
        let partitions = replica.state_machine().partitions();
        let mut io = shard_io!(self, node, index, 0);
        node.shards[0].sync_partitions(&mut io, &partitions);
        for shard in 1..self.scenario.shards {
            let event = Event::Publish { node: index, incarnation: node.incarnation, shard };
            self.queue.push(self.now + CHANNEL_DELAY_NS, event);
        }
        let _ = self.drain(index, 0);
    }

    pub fn crash(&mut self, index: u8) {
        if !self.node_up(index) {
            return;
        }
        let node = &mut self.nodes[index as usize];
        node.shards.clear();
        node.incarnation += 1;
        node.crashes += 1;
        node.disk.crash(&mut self.rng, false);
        self.hash(&[3, index as u64]);
        self.log(|| format!("n{index} crashed"));
    }

    pub fn restart(&mut self, index: u8) {
        if self.node_up(index) {
            return;
        }
        self.log(|| format!("n{index} restarting"));
        self.start_node(index);
        for shard in 0..self.scenario.shards {
            let _ = self.drain(index, shard);
        }
    }

    fn maybe_crash(&mut self, index: u8) {
        if !self.faults || self.liveness_started_tick.is_some() || !self.rng.chance(self.scenario.core.faults.crash_ppm)
        {
            return;
        }
        let down = (0..self.nodes.len() as u8).filter(|node| !self.node_up(*node)).count();
        if down < self.max_down {
            self.crash(index);
            let faults = &self.scenario.core.faults;
            let low = faults.restart_ticks_min.max(1);
            let restart = self.rng.range(low, faults.restart_ticks_max.max(low));
            self.nodes[index as usize].restart_at_tick = Some(self.tick + restart);
        }
    }

    /// The entry shard's admission of a client frame: `Ok` with the frame to route (the user
    /// stamped in, a login's password taken out), or `Err` with the status to deny it with.
    fn admit(&self, index: u8, bytes: &[u8]) -> Result<Vec<u8>, u32> {
        let message = Message::decode(bytes, false).map_err(|_| STATUS_INVALID_COMMAND)?;
        let mut header = message.header;
        let mut body = message.body;
        let metadata = self.nodes[index as usize].shards[0].metadata().ok_or(STATUS_UNAUTHENTICATED)?;
        let namespace = Shard::<MetadataMachine>::group_of_frame(&header);
        let state = metadata.state_machine().metadata();
        if namespace.is_metadata() {
            if header.operation == OPERATION_REGISTER {
                let Ok(ClientRequest::LoginRegister(login)) =
                    ClientRequest::decode(wire::command::LOGIN_REGISTER, &body)
                else {
                    return Err(STATUS_INVALID_COMMAND);
                };
                let user = state.user_by_name(login.username.as_str()).ok_or(STATUS_INVALID_CREDENTIALS)?;
                let password =
                    std::str::from_utf8(login.password.as_bytes()).map_err(|_| STATUS_INVALID_CREDENTIALS)?;
                if !verify_password(&user.password_hash, password) {
                    return Err(STATUS_INVALID_CREDENTIALS);
                }
                header.user_id = user.id;
                // The password has been checked: it never reaches the log.
                body = Vec::new();
            }
        } else {
            let session = metadata.client_table().get(header.client).ok_or(STATUS_UNAUTHENTICATED)?;
            header.user_id = session.user_id;
            if header.operation != OPERATION_REGISTER {
                let (stream, topic, _) = namespace.unpack();
                let kind = if header.operation == OPERATION_SEND_MESSAGES {
                    ReadKind::Send { stream, topic }
                } else {
                    ReadKind::Poll { stream, topic }
                };
                state.authorize_read(header.user_id, kind).map_err(|error| error.code())?;
            }
        }
        header.checksum = 0;
        header.checksum_body = 0;
        Ok(Message::new(header, body).encode())
    }

    fn deny(&mut self, index: u8, to: u128, bytes: &[u8], status: u32) {
        let Ok(request) = Header::decode(bytes) else { return };
        self.counters.denials += 1;
        let mut header = Header::new(Command::Reply, CLUSTER, index);
        header.group = request.group;
        header.client = to;
        header.request = request.request;
        header.operation = request.operation;
        header.status = status;
        let reply = Message::new(header, Vec::new()).encode();
        let (from, to) = (Peer::Replica(index), Peer::Client(to));
        let rates = if self.faults { &self.scenario.core.faults } else { &self.quiet };
        for delay in self.network.route(from, to, &mut self.rng, rates) {
            self.queue.push(self.now + delay, Event::Deliver { to, from, bytes: reply.clone() });
        }
        self.log(|| format!("n{index} denied client request={} status={status}", request.request));
    }

    fn deliver_to_node(&mut self, index: u8, from: Peer, bytes: Vec<u8>) -> Result<(), String> {
        if !self.node_up(index) {
            return Ok(());
        }
        let Ok(header) = Header::decode(&bytes) else { return Ok(()) };
        let bytes = match from {
            Peer::Client(client) if header.command == Command::Request => match self.admit(index, &bytes) {
                Ok(admitted) => admitted,
                Err(status) => {
                    self.deny(index, client, &bytes, status);
                    return Ok(());
                }
            },
            _ => bytes,
        };
        if self.trace.is_some() {
            self.trace_frame(index, from, &header);
        }
        let namespace = Shard::<MetadataMachine>::group_of_frame(&header);
        let owner = shard_of(namespace, self.scenario.shards);
        if owner == 0 {
            self.with_shard(index, 0, |shard, io| shard.on_message(io, &bytes))?;
        } else {
            let node = &mut self.nodes[index as usize];
            if node.channel_depth[owner as usize] == CHANNEL_FRAMES_MAX {
                self.counters.channel_full_drops += 1;
                self.log(|| format!("n{index} channel to s{owner} full: frame dropped"));
            } else {
                node.channel_depth[owner as usize] += 1;
                let event = Event::Channel { node: index, incarnation: node.incarnation, shard: owner, bytes };
                self.queue.push(self.now + CHANNEL_DELAY_NS, event);
            }
        }
        self.maybe_crash(index);
        Ok(())
    }

    fn trace_frame(&mut self, index: u8, from: Peer, header: &Header) {
        let namespace = Shard::<MetadataMachine>::group_of_frame(header);
        let shard = shard_of(namespace, self.scenario.shards);
        let from = match from {
            Peer::Replica(replica) => format!("n{replica}"),
            Peer::Client(client) => {
                let position = self.clients.iter().position(|c| c.id == client);
                position.map_or("client".to_string(), |position| format!("c{position}"))
            }
        };
        let detail = match header.command {
            Command::Request => format!("request={} operation={}", header.request, header.operation),
            Command::Prepare | Command::PrepareOk => format!("view={} op={}", header.view, header.op),
            Command::Commit => format!("view={} commit={}", header.view, header.commit),
            _ => format!("view={}", header.view),
        };
        let group = group_name(namespace);
        self.log(|| format!("{from} -> n{index}/s{shard} {group} {} {detail}", header.command.name()));
    }

    fn deliver_to_client(&mut self, id: u128, bytes: &[u8]) -> Result<(), String> {
        let Some(index) = self.clients.iter().position(|client| client.id == id) else { return Ok(()) };
        let observation = self.clients[index].on_message(bytes, self.tick, &mut self.rng);
        let actor = self.clients[index].actor();
        let anomaly = |anomaly: crate::kafka_log::Anomaly| anomaly.to_string();
        match observation {
            Observation::Nothing => {}
            Observation::SendAcked { partition, base_offset, values } => {
                self.counters.messages_acked += values.len() as u64;
                self.counters.bytes_acked += values.len() as u64 * 8;
                self.log(|| {
                    format!(
                        "c{index} send acked partition={} offset={base_offset} count={}",
                        partition.partition,
                        values.len()
                    )
                });
                self.checker.send_acked(actor, partition, base_offset, &values).map_err(anomaly)?;
            }
            Observation::SendIndeterminate { values } => {
                self.counters.sends_indeterminate += 1;
                self.log(|| format!("c{index} send indeterminate (evicted)"));
                self.checker.send_indeterminate(actor, &values).map_err(anomaly)?;
            }
            Observation::SendFailed { values, status } => {
                self.log(|| format!("c{index} send failed status={status}"));
                self.checker.send_failed(actor, &values).map_err(anomaly)?;
            }
            Observation::Polled { partition, from, messages, current_offset } => {
                self.counters.messages_polled += messages.len() as u64;
                self.log(|| {
                    format!(
                        "c{index} polled partition={} from={from} count={} current_offset={}",
                        partition.partition,
                        messages.len(),
                        current_offset as i64
                    )
                });
                self.checker.polled(actor, partition, from, &messages).map_err(anomaly)?;
            }
            Observation::PollAbandoned { partition } => {
                self.log(|| format!("c{index} poll of partition {} abandoned: its run restarts", partition.partition));
                self.checker.consumer_reset(actor, partition);
            }
            other => {
                self.log(|| format!("c{index} {other:?}"));
            }
        }
        Ok(())
    }

    /// Refreshes what clients know of the topic (what `get_topic` would tell them) from the most
    /// advanced committed metadata.
    fn refresh_topology(&mut self) {
        let best = self
            .nodes
            .iter()
            .filter_map(|node| node.shards.first().and_then(|shard| shard.metadata()))
            .filter(|replica| replica.status() != Status::Opening)
            .max_by_key(|replica| replica.commit_min());
        let Some(replica) = best else { return };
        let metadata = replica.state_machine().metadata();
        if let Some(topic) = metadata.topic(STREAM, TOPIC) {
            let partitions: Vec<u32> = topic.partitions.iter().map(|partition| partition.id).collect();
            if partitions.len() >= self.topology.partitions.len() {
                self.topology.partitions = partitions;
            }
            self.topology.group_created |= metadata.consumer_group(STREAM, TOPIC, GROUP).is_some();
        }
    }

    fn on_tick(&mut self) -> Result<(), String> {
        self.tick += 1;
        if let Some(every) = self.scenario.rolling_restart_ticks {
            if self.liveness_started_tick.is_none() && self.tick.is_multiple_of(every) {
                let index = ((self.tick / every) % self.nodes.len() as u64) as u8;
                self.crash(index);
                self.nodes[index as usize].restart_at_tick = Some(self.tick + (every / 3).max(1));
            }
        }
        let rates = if self.faults { &self.scenario.core.faults } else { &self.quiet };
        self.network.tick(self.tick, &mut self.rng, rates);
        for index in 0..self.nodes.len() as u8 {
            if !self.node_up(index) {
                if self.nodes[index as usize].restart_at_tick.is_some_and(|at| at <= self.tick) {
                    self.restart(index);
                }
                continue;
            }
            for shard in 0..self.scenario.shards {
                self.with_shard(index, shard, |shard, io| shard.tick(io))?;
            }
            self.maybe_crash(index);
        }
        self.refresh_topology();
        let nodes = self.scenario.core.replica_count;
        for index in 0..self.clients.len() {
            let next = self.clients[index].tick(self.tick, &mut self.rng, &self.topology, nodes);
            if let Some(values) = self.clients[index].invoked.take() {
                let actor = self.clients[index].actor();
                self.checker.send_invoked(actor, &values).map_err(|anomaly| anomaly.to_string())?;
            }
            if let Some((to, bytes)) = next {
                let from = Peer::Client(self.clients[index].id);
                let rates = if self.faults { &self.scenario.core.faults } else { &self.quiet };
                for delay in self.network.route(from, to, &mut self.rng, rates) {
                    self.queue.push(self.now + delay, Event::Deliver { to, from, bytes: bytes.clone() });
                }
            }
        }
        Ok(())
    }

    pub fn step(&mut self) -> Result<(), String> {
        let (time, event) = self.queue.pop().expect("ticks reschedule themselves");
        self.now = time;
        self.events_processed += 1;
        match event {
            Event::Tick => {
                self.hash(&[4, self.tick]);
                self.on_tick()?;
                self.queue.push(self.now + TICK_NS, Event::Tick);
            }
            Event::Deliver { to, from, bytes } => {
                self.hash(&[5, peer_id(to), peer_id(from), checksum64(&bytes)]);
                match to {
                    Peer::Replica(index) => self.deliver_to_node(index, from, bytes)?,
                    Peer::Client(id) => self.deliver_to_client(id, &bytes)?,
                }
            }
            Event::Channel { node, incarnation, shard, bytes } => {
                if self.nodes[node as usize].incarnation != incarnation || !self.node_up(node) {
                    return Ok(());
                }
                self.nodes[node as usize].channel_depth[shard as usize] -= 1;
                self.hash(&[7, node as u64, shard as u64, checksum64(&bytes)]);
                self.with_shard(node, shard, |target, io| target.on_message(io, &bytes))?;
                self.maybe_crash(node);
            }
            Event::Publish { node, incarnation, shard } => {
                if self.nodes[node as usize].incarnation != incarnation || !self.node_up(node) {
                    return Ok(());
                }
                let partitions = self.nodes[node as usize].shards[0]
                    .metadata()
                    .map(|replica| replica.state_machine().partitions())
                    .unwrap_or_default();
                self.with_shard(node, shard, |target, io| target.sync_partitions(io, &partitions))?;
            }
            Event::Complete { node, incarnation, shard, request, token } => {
                if self.nodes[node as usize].incarnation != incarnation || !self.node_up(node) {
                    return Ok(());
                }
                self.hash(&[6, node as u64, shard as u64, token.0]);
                let rates = if self.faults { &self.scenario.core.faults } else { &self.quiet };
                let completion: Completion =
                    self.nodes[node as usize].disk.carry_out(request, token, &mut self.rng, rates);
                self.with_shard(node, shard, |target, io| target.on_completion(io, completion))?;
                self.maybe_crash(node);
            }
        }
        Ok(())
    }

    /// The committed end of every partition of the topic (from the most advanced replica).
    fn partition_ends(&self) -> BTreeMap<u32, u64> {
        let mut ends = BTreeMap::new();
        for node in &self.nodes {
            for shard in &node.shards {
                for (namespace, replica) in shard.partitions() {
                    let (stream, topic, partition) = namespace.unpack();
                    if (stream, topic) == (STREAM, TOPIC) {
                        let end = ends.entry(partition).or_insert(0);
                        *end = (*end).max(replica.state_machine().next_offset());
                    }
                }
            }
        }
        ends
    }

    pub fn start_liveness(&mut self) {
        self.liveness_started_tick = Some(self.tick);
        self.faults = false;
        self.network.heal();
        for index in 0..self.nodes.len() as u8 {
            self.restart(index);
        }
        for client in &mut self.clients {
            client.finish();
        }
        self.log(|| "liveness phase: network healed, all nodes up, clients finishing".to_string());
    }

    /// Every node is up, every group's replicas agree on one view and one commit, and every
    /// client finished its script (consumers have read every partition to its end).
    pub fn converged(&self) -> bool {
        if (0..self.nodes.len() as u8).any(|index| !self.node_up(index)) {
            return false;
        }
        let ends = self.partition_ends();
        if !self.clients.iter().all(|client| client.done(&ends)) {
            return false;
        }
        let mut groups: BTreeMap<Namespace, Vec<(Status, u32, u64, u64)>> = BTreeMap::new();
        for node in &self.nodes {
            for shard in &node.shards {
                if let Some(replica) = shard.metadata() {
                    let state = (replica.status(), replica.view(), replica.commit_min(), replica.commit_max());
                    groups.entry(Namespace::METADATA).or_default().push(state);
                }
                for (namespace, replica) in shard.partitions() {
                    let state = (replica.status(), replica.view(), replica.commit_min(), replica.commit_max());
                    groups.entry(namespace).or_default().push(state);
                }
            }
        }
        let expected: BTreeSet<Namespace> =
            self.nodes[0].shards[0].metadata().map(|replica| replica.state_machine().partitions()).unwrap_or_default();
        if groups.len() != expected.len() + 1 {
            return false;
        }
        groups.values().all(|replicas| {
            replicas.len() == self.nodes.len()
                && replicas.iter().all(|(status, view, commit_min, commit_max)| {
                    *status == Status::Normal
                        && *view == replicas[0].1
                        && commit_min == commit_max
                        && *commit_min == replicas[0].2
                })
        })
    }

    pub fn run(&mut self) -> Outcome {
        match self.run_inner() {
            Ok(outcome) => outcome,
            Err(violation) => Outcome::Correctness(violation),
        }
    }

    fn run_inner(&mut self) -> Result<Outcome, String> {
        while self.tick < self.scenario.core.safety_ticks {
            self.step()?;
        }
        self.start_liveness();
        let deadline = self.tick + self.scenario.core.liveness_ticks_max;
        while !self.converged() {
            if self.tick >= deadline {
                return Ok(Outcome::Liveness(self.liveness_report()));
            }
            self.step()?;
        }
        self.final_checks()?;
        Ok(Outcome::Passed)
    }

    /// The final read of every partition (from node 0, which every other agrees with: the
    /// agreement check compared their digests op by op), then the checker's end-of-history
    /// checks.
    fn final_checks(&mut self) -> Result<(), String> {
        let mut reads = Vec::new();
        for shard in &self.nodes[0].shards {
            for (namespace, replica) in shard.partitions() {
                let (stream, topic, partition) = namespace.unpack();
                let mut messages = Vec::new();
                for batch in replica.state_machine().batches() {
                    for message in vireo_storage::batch::messages(batch).map_err(|error| error.to_string())? {
                        messages.push((message.offset, message.id));
                    }
                }
                reads.push((PartitionKey { stream, topic, partition }, messages));
            }
        }
        for (partition, messages) in reads {
            self.checker.final_read(partition, &messages).map_err(|anomaly| anomaly.to_string())?;
        }
        self.checker.finish().map_err(|anomaly| anomaly.to_string())?;
        Ok(())
    }

    pub fn liveness_report(&self) -> String {
        let mut report = String::from("no convergence within the liveness bound:");
        for (index, node) in self.nodes.iter().enumerate() {
            if node.shards.is_empty() {
                let _ = write!(report, " [n{index} down]");
                continue;
            }
            for shard in &node.shards {
                if let Some(replica) = shard.metadata() {
                    let _ = write!(
                        report,
                        " [n{index} meta {:?} v{} op={} commit={}/{}]",
                        replica.status(),
                        replica.view(),
                        replica.op(),
                        replica.commit_min(),
                        replica.commit_max()
                    );
                }
                for (namespace, replica) in shard.partitions() {
                    let _ = write!(
                        report,
                        " [n{index} {} {:?} v{} op={} commit={}/{}]",
                        group_name(namespace),
                        replica.status(),
                        replica.view(),
                        replica.op(),
                        replica.commit_min(),
                        replica.commit_max()
                    );
                }
            }
        }
        let ends = self.partition_ends();
        let waiting: Vec<usize> =
            self.clients.iter().filter(|client| !client.done(&ends)).map(|client| client.index).collect();
        let _ = write!(report, " clients_waiting={waiting:?}");
        report
    }
}

fn group_name(namespace: Namespace) -> String {
    if namespace.is_metadata() {
        "meta".to_string()
    } else {
        let (stream, topic, partition) = namespace.unpack();
        format!("p{stream}.{topic}.{partition}")
    }
}

fn peer_id(peer: Peer) -> u64 {
    match peer {
        Peer::Replica(replica) => replica as u64,
        Peer::Client(client) => (client as u64) | 1 << 63,
    }
}
