//! The cluster harness: N replicas of the real `Replica` code, their simulated disks, the
//! simulated network and clients, driven by one event queue on virtual time.
//!
//! A run has two phases. The safety phase injects every fault the scenario allows: crashes at any
//! event, partitions, clogs, loss, duplication, disk faults. The liveness phase heals the network,
//! restarts every replica and stops injecting faults; then every client request must be answered
//! and every replica must converge on the same commit within `liveness_ticks_max`.

use std::collections::BTreeSet;
use std::fmt::Write as _;

use vireo_io::{Completion, Peer, Token, TICK_NS};
use vireo_protocol::config::Bug;
use vireo_protocol::header::{Command, Header};
use vireo_protocol::{Config, Replica, ReplicaEvent, StateMachine, Status};
use vireo_storage::checksum::checksum64;
use vireo_storage::layout::WalLayout;

use crate::checker::Checker;
use crate::client::{new_client_id, Observation, SimClient};
use crate::disk::{DiskRequest, SimDisk, SyncedWals, Zone};
use crate::network::Network;
use crate::partition_mirror::PartitionMirror;
use crate::register_log::RegisterLog;
use crate::rng::SimRng;
use crate::scenario::{FaultRates, Scenario};
use crate::sim_io::{Ack, SimEvent, SimIo};

/// The simulator's cluster id: every replica and message of a run carries it.
pub const CLUSTER: u128 = 0x0056_4952_454f;
/// With `Scenario::disk_loss`, the chance that a crash also loses the replica's disk.
const DISK_LOSS_PPM: u32 = 250_000;
/// Prepares in the simulator are small: a batch of tiny appends.
const PREPARE_SIZE_MAX: u64 = 4 * 1024;
const SNAPSHOT_SIZE_MAX: u64 = 512 * 1024;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Passed,
    /// Exit code 128.
    Liveness(String),
    /// Exit code 129.
    Correctness(String),
}

impl Outcome {
    pub fn exit_code(&self) -> i32 {
        match self {
            Outcome::Passed => 0,
            Outcome::Liveness(_) => 128,
            Outcome::Correctness(_) => 129,
        }
    }
}

enum Event {
    Tick,
    Deliver { to: Peer, from: Peer, bytes: Vec<u8> },
    Complete { replica: u8, incarnation: u64, request: DiskRequest, token: Token },
}

type EventQueue = crate::queue::EventQueue<Event>;

struct Node {
    replica: Option<Replica<RegisterLog>>,
    /// The node's partition log of applied entries (see `partition_mirror`).
    mirror: Option<PartitionMirror>,
    /// The offset below which the mirror said every message is durable: the harness's memory,
    /// which a crash does not erase.
    mirror_durable: u64,
    /// Mirrors opened on this node so far: each one's token owner.
    mirror_generation: u16,
    disk: SimDisk,
    incarnation: u64,
    restart_at_tick: Option<u64>,
    crashes: u64,
    /// The (op, checksum) of every prepare_ok the live replica sent: each a promise that the
    /// prepare survives a crash (until the journal gives it up: replaced, or checkpointed over).
    acked: BTreeSet<Ack>,
    /// What the replica had acknowledged and still held when it crashed: its recovery must find
    /// every one of them again (by body or header), or a checkpoint covering it.
    promised: BTreeSet<Ack>,
}

impl SimEvent for Event {
    /// The replica and its incarnation (a completion for an earlier one is dropped).
    type Issuer = (u8, u64);
    fn deliver(to: Peer, from: Peer, bytes: Vec<u8>) -> Event {
        Event::Deliver { to, from, bytes }
    }
    fn complete((replica, incarnation): (u8, u64), request: DiskRequest, token: Token) -> Event {
        Event::Complete { replica, incarnation, request, token }
    }
}

/// The `Io` one node's state machines run on: built from disjoint fields of the cluster, so the
/// node, its disk and the shared queue can all be borrowed at once.
macro_rules! sim_io {
    ($cluster:ident, $node:ident, $index:expr) => {
        SimIo::<Event> {
            now: $cluster.now,
            node: $index,
            issuer: ($index, $node.incarnation),
            disk: &mut $node.disk,
            rng: &mut $cluster.rng,
            network: &$cluster.network,
            rates: &$cluster.scenario.faults,
            queue: &mut $cluster.queue,
            disk_faults: $cluster.faults,
            acks: Some(&mut $node.acked),
        }
    };
}

pub struct Cluster {
    pub scenario: Scenario,
    rng: SimRng,
    now: u64,
    pub tick: u64,
    queue: EventQueue,
    nodes: Vec<Node>,
    network: Network,
    clients: Vec<SimClient>,
    pub checker: Checker,
    configs: Vec<Config>,
    /// The scenario's rates with every fault zeroed, for when faults are off.
    quiet: FaultRates,
    /// Faults are injected (the safety phase) or not (the liveness phase, scripted tests).
    faults: bool,
    liveness_started_tick: Option<u64>,
    trace: Option<Vec<String>>,
    print_trace: bool,
    trace_hash: u64,
    pub events_processed: u64,
    max_down: usize,
    /// A view started while replicas were cut off, and the partition was made to end soon: its
    /// end takes the primary down (see `maybe_crash_primary_on_heal`).
    crash_primary_at_heal: bool,
    /// The longest register log any replica applied: what every mirror must be a prefix of.
    committed_entries: Vec<(u128, u64)>,
    /// Disks lost whole so far (`Scenario::disk_loss`: at most one a run).
    pub disks_lost: u64,
}

impl Cluster {
    pub fn new(scenario: Scenario, rng: SimRng, bug: Option<Bug>) -> Cluster {
        let n = scenario.replica_count;
        let mut config = Config::new(CLUSTER, n);
        config.journal_slots = scenario.journal_slots;
        config.prepare_size_max = PREPARE_SIZE_MAX;
        config.prepare_queue_max = scenario.prepare_queue_max;
        config.clients_max = scenario.clients_max;
        config.batch_requests_max = 8;
        config.request_queue_max = 16;
        config.snapshot_size_max = SNAPSHOT_SIZE_MAX;
        config.checkpoint_chunk_bytes = scenario.checkpoint_chunk_bytes;
        config.sync_writes = scenario.enforce_fsync;
        config.bug = bug;
        let layout = WalLayout::new(config.journal_slots, config.prepare_size_max);
        let synced_wals = SyncedWals::of(scenario.enforce_fsync, false, bug);
        let mut rng = rng;
        let nodes = (0..n)
            .map(|index| {
                let fault_zone = (index < scenario.faults.faulty_disks)
                    .then(|| if rng.below(2) == 0 { Zone::WalHeaders } else { Zone::WalPrepares })
                    .or(scenario.faults.partition_rot.then_some(Zone::Partition));
                Node {
                    replica: None,
                    mirror: None,
                    mirror_durable: 0,
                    mirror_generation: 0,
                    disk: SimDisk::new(layout, fault_zone).with_synced_wals(synced_wals),
                    incarnation: 0,
                    restart_at_tick: None,
                    crashes: 0,
                    acked: BTreeSet::new(),
                    promised: BTreeSet::new(),
                }
            })
            .collect();
        let clients = (0..scenario.client_count)
            .map(|_| SimClient::new(new_client_id(&mut rng), scenario.requests_per_client))
            .collect();
        let faults = scenario.fault_level != crate::scenario::FaultLevel::None;
        let max_down = (n as usize / 2).max(1);
        let mut cluster = Cluster {
            checker: Checker::new(scenario.clients_max),
            configs: vec![config; n as usize],
            quiet: quiet_rates(&scenario.faults),
            scenario,
            rng,
            now: 0,
            tick: 0,
            queue: EventQueue::default(),
            nodes,
            network: Network::new(n as usize),
            clients,
            faults,
            liveness_started_tick: None,
            trace: None,
            print_trace: false,
            trace_hash: 0,
            events_processed: 0,
            max_down,
            crash_primary_at_heal: false,
            committed_entries: Vec::new(),
            disks_lost: 0,
        };
        cluster.network.faults_enabled = faults;
        for replica in 0..n {
            cluster.start_replica(replica);
        }
        cluster.queue.push(TICK_NS, Event::Tick);
        cluster
    }

    /// Records a readable trace of the run (for snapshot tests).
    pub fn enable_trace(&mut self) {
        self.trace = Some(Vec::new());
    }

    pub fn trace_lines(&self) -> &[String] {
        self.trace.as_deref().unwrap_or(&[])
    }

    pub fn trace_hash(&self) -> u64 {
        self.trace_hash
    }

    pub fn replica(&self, index: u8) -> Option<&Replica<RegisterLog>> {
        self.nodes[index as usize].replica.as_ref()
    }

    pub fn clients(&self) -> &[SimClient] {
        &self.clients
    }

    /// Prints trace lines as they happen instead of keeping them.
    pub fn print_trace(&mut self) {
        self.print_trace = true;
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

    /// Folds one event into the trace hash (at most five words: no allocation per event).
    fn hash(&mut self, parts: &[u64]) {
        assert!(parts.len() <= 5);
        let mut bytes = [0u8; 48];
        bytes[..8].copy_from_slice(&self.trace_hash.to_le_bytes());
        for (index, part) in parts.iter().enumerate() {
            bytes[8 + index * 8..16 + index * 8].copy_from_slice(&part.to_le_bytes());
        }
        self.trace_hash = checksum64(&bytes[..8 + parts.len() * 8]);
    }

    fn with_replica(
        &mut self,
        index: u8,
        action: impl FnOnce(&mut Replica<RegisterLog>, &mut SimIo<Event>),
    ) -> Result<(), String> {
        let node = &mut self.nodes[index as usize];
        let Some(replica) = node.replica.as_mut() else { return Ok(()) };
        let mut io = sim_io!(self, node, index);
        action(replica, &mut io);
        self.drain_events(index)?;
        self.feed_mirror(index);
        Ok(())
    }

    /// Brings the committed entries up to this replica's state and appends what its mirror lacks.
    fn feed_mirror(&mut self, index: u8) {
        let node = &mut self.nodes[index as usize];
        let (Some(replica), Some(mirror)) = (node.replica.as_ref(), node.mirror.as_mut()) else { return };
        let applied = replica.state_machine().entries();
        if applied.len() > self.committed_entries.len() {
            self.committed_entries.extend_from_slice(&applied[self.committed_entries.len()..]);
        }
        if applied.len() as u64 <= mirror.end_offset() {
            return;
        }
        let mut io = sim_io!(self, node, index);
        mirror.feed(&mut io, applied, self.now / 1000);
    }

    fn mirror_completion(&mut self, index: u8, completion: Completion) -> Result<(), String> {
        let node = &mut self.nodes[index as usize];
        // Lasting damage to segment bytes is never repaired in place (the mirror appends again
        // after a cut), so once a disk has had any, losses and unreadable batches are excused.
        let damaged = node.disk.segment_damage > 0;
        let Some(mirror) = node.mirror.as_mut() else { return Ok(()) };
        if vireo_storage::partition::token_owner(completion.token()) != Some(mirror.owner()) {
            // For a log this node reopened since: it is gone.
            return Ok(());
        }
        let mut io = sim_io!(self, node, index);
        let news = mirror
            .on_completion(&mut io, completion, &self.committed_entries, node.mirror_durable, damaged)
            .map_err(|violation| format!("r{index}: {violation}"))?;
        if let Some(durable) = news.durable {
            node.mirror_durable = node.mirror_durable.max(durable);
        }
        if let Some(end) = news.reopened_end {
            // Recovery synced what it kept; below a damaged cut the node appends again.
            node.mirror_durable = end;
            self.log(|| format!("r{index} partition log recovered to offset {end}"));
        }
        if news.failed {
            self.log(|| format!("r{index} partition log failed: reopening once its I/O is done"));
        }
        // A failed log is opened again from its files only once none of its I/O is in flight (as
        // vireo-node's segment log does): a write of the failed log that lands after the new log
        // listed and read the files sits past the end its recovery found, uncut, is made durable
        // by that recovery's syncs, and after the next appends (and a seal) reads back as damage
        // in a sealed segment (seed 8874).
        let mirror = self.nodes[index as usize].mirror.as_ref();
        if mirror.is_some_and(|mirror| mirror.is_failed() && mirror.ops_in_flight() == 0) {
            self.log(|| format!("r{index} partition log reopening"));
            self.open_mirror(index);
        }
        self.feed_mirror(index);
        Ok(())
    }

    fn open_mirror(&mut self, index: u8) {
        let node = &mut self.nodes[index as usize];
        let mut io = sim_io!(self, node, index);
        node.mirror_generation = node.mirror_generation.wrapping_add(1);
        let bug = (self.configs[index as usize].bug == Some(Bug::PartitionDurableBeforeSync))
            .then_some(vireo_storage::partition::PartitionBug::DurableBeforeSync);
        node.mirror = Some(PartitionMirror::open(&mut io, node.mirror_generation, bug));
    }

    fn drain_events(&mut self, index: u8) -> Result<(), String> {
        loop {
            let node = &mut self.nodes[index as usize];
            let Some(replica) = node.replica.as_mut() else { return Ok(()) };
            let Some(event) = replica.poll_event() else { return Ok(()) };
            match &event {
                ReplicaEvent::Committed { op, checksum, digest } => {
                    // Only the first replica to commit an op hands its body to the model.
                    let body = if self.checker.needs_body(*op) {
                        replica.prepare_body(*op, *checksum).map(<[u8]>::to_vec)
                    } else {
                        None
                    };
                    self.hash(&[1, index as u64, *op, *checksum as u64, *digest]);
                    self.checker.on_commit(index, *op, *checksum, *digest, body.as_deref())?;
                }
                ReplicaEvent::StatusChanged { status, view } => {
                    let primary = replica.is_primary();
                    self.hash(&[2, index as u64, *view as u64, *status as u64]);
                    if *status == Status::Normal && primary && self.faults {
                        // A view started while replicas are cut off: now and then the partition
                        // ends soon, and its end takes this primary down (see
                        // `maybe_crash_primary_on_heal`), before the ones that were cut off have
                        // learned its log.
                        if self.rng.chance(self.scenario.faults.crash_primary_on_heal_ppm) {
                            let soon = self.tick + self.rng.range(1, 20);
                            self.network.end_partition_at(soon);
                            self.crash_primary_at_heal = true;
                        }
                    }
                }
                ReplicaEvent::Opened { .. } => {
                    let checkpoint_op = replica.superblock_durable().checkpoint_op;
                    let forgotten = node
                        .promised
                        .iter()
                        .find(|ack| ack.op > checkpoint_op && !replica.holds_prepare(ack.op, ack.checksum));
                    if let Some(&Ack { op, checksum, .. }) = forgotten {
                        return Err(format!(
                            "r{index} acknowledged op {op} (prepare {checksum:x}) and lost it in a crash: \
                             recovery found neither its body nor its header"
                        ));
                    }
                    node.promised.clear();
                }
                ReplicaEvent::CheckpointDurable { op } => {
                    // What a durable checkpoint covers needs no prepare any more.
                    let op = *op;
                    node.acked.retain(|ack| ack.op > op);
                }
                ReplicaEvent::Failed { .. } => {
                    // The replica stopped on a failed write or sync: its process exits and is
                    // started again, recovering from what is durable.
                    self.log(|| format!("r{index} failed: {event:?}; restarting"));
                    self.crash(index);
                    self.nodes[index as usize].restart_at_tick = Some(self.tick + 1);
                    return Ok(());
                }
                _ => {}
            }
            if self.trace.is_some() {
                let line = match &event {
                    ReplicaEvent::Committed { op, .. } => format!("r{index} committed op={op}"),
                    ReplicaEvent::StatusChanged { status, view } => format!("r{index} status={status:?} view={view}"),
                    ReplicaEvent::Opened { view, log_view, op, commit_min, formatted } => format!(
                        "r{index} opened view={view} log_view={log_view} op={op} commit_min={commit_min}{}",
                        if *formatted { " (formatted)" } else { "" }
                    ),
                    ReplicaEvent::CheckpointDurable { op } => format!("r{index} checkpoint op={op}"),
                    ReplicaEvent::StateTransferred { op, chunks } => {
                        format!("r{index} state transfer to op={op} in {chunks} chunks")
                    }
                    ReplicaEvent::LogTruncated { op, sequence } => {
                        format!("r{index} truncated its log below op={op} (start_view sequence {sequence})")
                    }
                    ReplicaEvent::CutForNoSpace { op, refused, again } => {
                        format!("r{index} cut its log below op={op} for a full disk: {refused} refused, {again} again")
                    }
                    ReplicaEvent::Rejoined { commit } => format!("r{index} rejoined at commit={commit}"),
                    ReplicaEvent::Wiping => format!("r{index} wiping an earlier incarnation's files"),
                    ReplicaEvent::Superseded => format!("r{index} superseded by a newer incarnation"),
                    ReplicaEvent::Failed { .. } => unreachable!("handled above"),
                };
                self.log(|| line);
            }
        }
    }

    fn start_replica(&mut self, index: u8) {
        let config = self.configs[index as usize].clone();
        let node = &mut self.nodes[index as usize];
        node.restart_at_tick = None;
        let mut io = sim_io!(self, node, index);
        node.replica = Some(Replica::open(config, index, &mut io));
        self.open_mirror(index);
    }

    /// A crash of one replica: with durability enforced a power loss (its disk keeps what was
    /// synced), else its process killed (its disk keeps every completed write). It stays down
    /// until `restart` (the fault driver schedules one; scripts call it).
    pub fn crash(&mut self, index: u8) {
        self.crash_with(index, false);
    }

    /// Power loss that tears every write not yet synced (the scripted torn-tail case; whatever
    /// the run's durability mode, so scripts that use it run with `enforce_fsync`).
    pub fn crash_tearing(&mut self, index: u8) {
        self.crash_with(index, true);
    }

    fn crash_with(&mut self, index: u8, tear_all: bool) {
        let node = &mut self.nodes[index as usize];
        if node.replica.is_none() {
            return;
        }
        let replica = node.replica.take().expect("checked");
        let mut acked = std::mem::take(&mut node.acked);
        acked.retain(|ack| replica.holds_prepare(ack.op, ack.checksum));
        // Promises not checked yet (a crash while the replica was still opening) stand.
        node.promised.extend(acked);
        node.mirror = None;
        node.incarnation += 1;
        node.crashes += 1;
        if self.scenario.enforce_fsync || tear_all {
            node.disk.crash(&mut self.rng, tear_all);
        } else {
            node.disk.crash_process(&mut self.rng);
        }
        self.hash(&[3, index as u64]);
        self.log(|| format!("r{index} crashed"));
    }

    pub fn restart(&mut self, index: u8) {
        if self.nodes[index as usize].replica.is_some() {
            return;
        }
        self.log(|| format!("r{index} restarting"));
        self.start_replica(index);
        let _ = self.drain_events(index);
    }

    fn maybe_crash(&mut self, index: u8) {
        if !self.faults || self.liveness_started_tick.is_some() {
            return;
        }
        let faults = &self.scenario.faults;
        let writing = self.nodes[index as usize].disk.writes_in_flight() > 0;
        let crash_ppm = faults.crash_ppm + if writing { faults.crash_in_write_ppm } else { 0 };
        if !self.rng.chance(crash_ppm) {
            return;
        }
        let down = self.nodes.iter().filter(|node| node.replica.is_none()).count();
        if down >= self.max_down {
            return;
        }
        self.crash_until_restart(index);
        if down + 1 < self.max_down && self.rng.chance(self.scenario.faults.crash_pair_ppm) {
            let up: Vec<u8> = (0..self.scenario.replica_count)
                .filter(|&other| self.nodes[other as usize].replica.is_some())
                .collect();
            // The primary, when it is up: a backup and its primary down together is what a
            // view change has to survive.
            let primary = up
                .iter()
                .copied()
                .find(|&other| self.nodes[other as usize].replica.as_ref().is_some_and(|replica| replica.is_primary()));
            if let Some(other) = primary.or_else(|| (!up.is_empty()).then(|| *self.rng.pick(&up))) {
                self.crash_until_restart(other);
            }
        }
    }

    /// With `Scenario::disk_loss`, a quarter of the crashes (once a run) lose the crashed replica's
    /// disk whole, within the fault budget: a disk that takes no other faults, and only while the
    /// faulty disks leave room for one more damaged copy of everything.
    fn maybe_lose_disk(&mut self, index: u8) {
        if !self.scenario.disk_loss || self.disks_lost > 0 || self.scenario.replica_count < 2 {
            return;
        }
        let faulty = self.scenario.faults.faulty_disks;
        let quorum = self.configs[index as usize].quorum_replication() as u8;
        if index < faulty || faulty + 1 >= quorum || !self.rng.chance(DISK_LOSS_PPM) {
            return;
        }
        self.lose_disk(index);
    }

    /// Replaces a crashed replica's disk with an empty one: it restarts formatted, and rejoins
    /// if the cluster has history (as vireo-server decides from its peers' answers: here, any
    /// op committed, or prepared by a replica that is up). Every promise its old disk kept is
    /// gone with it.
    pub fn lose_disk(&mut self, index: u8) {
        assert!(self.nodes[index as usize].replica.is_none(), "a disk is lost only by a crashed replica");
        let history = !self.committed_entries.is_empty()
            || self.nodes.iter().filter_map(|node| node.replica.as_ref()).any(|replica| replica.op() > 0);
        let config = &mut self.configs[index as usize];
        config.rejoin_guard = history;
        config.format_waits_for_view = true;
        let layout = WalLayout::new(config.journal_slots, config.prepare_size_max);
        let node = &mut self.nodes[index as usize];
        let (zone, synced_wals) = (node.disk.fault_zone, node.disk.synced_wals);
        node.disk = SimDisk::new(layout, zone).with_synced_wals(synced_wals);
        node.promised.clear();
        node.acked.clear();
        node.mirror_durable = 0;
        self.disks_lost += 1;
        self.hash(&[8, index as u64]);
        self.log(|| {
            format!("r{index} lost its disk{}", if history { " (the cluster has history: it rejoins)" } else { "" })
        });
    }

    /// A partition just ended: now and then the primary crashes with it, so that the replicas
    /// that were cut off, and whatever logs they kept, take part in the view change at once.
    fn maybe_crash_primary_on_heal(&mut self) {
        if !self.faults || self.liveness_started_tick.is_some() {
            return;
        }
        let planned = std::mem::take(&mut self.crash_primary_at_heal);
        if !planned && !self.rng.chance(self.scenario.faults.crash_primary_on_heal_ppm) {
            return;
        }
        let down = self.nodes.iter().filter(|node| node.replica.is_none()).count();
        if down >= self.max_down {
            return;
        }
        if let Some(primary) = self.newest_primary() {
            self.crash_until_restart(primary);
        }
    }

    /// The replica that is primary of the highest view any replica is in, if it is up.
    fn newest_primary(&self) -> Option<u8> {
        (0..self.scenario.replica_count)
            .filter(|&index| {
                self.nodes[index as usize]
                    .replica
                    .as_ref()
                    .is_some_and(|replica| replica.is_primary() && replica.status() == Status::Normal)
            })
            .max_by_key(|&index| self.nodes[index as usize].replica.as_ref().map(|replica| replica.view()))
    }

    /// Now and then the primary alone is cut off (a partition of its own, as long as the
    /// scenario's others): it goes on preparing what nobody else gets, while the others change
    /// the view without it.
    fn maybe_isolate_primary(&mut self) {
        if !self.faults || self.liveness_started_tick.is_some() {
            return;
        }
        if !self.rng.chance(self.scenario.faults.partition_ppm) {
            return;
        }
        if let Some(primary) = self.newest_primary() {
            let until = self.tick + self.rng.range(1, self.scenario.faults.partition_ticks_max.max(2));
            self.network.isolate(primary, self.tick, until);
        }
    }

    /// Crashes a replica and schedules its restart.
    fn crash_until_restart(&mut self, index: u8) {
        self.crash(index);
        self.maybe_lose_disk(index);
        let faults = &self.scenario.faults;
        let restart = self
            .rng
            .range(faults.restart_ticks_min.max(1), faults.restart_ticks_max.max(faults.restart_ticks_min.max(1)));
        self.nodes[index as usize].restart_at_tick = Some(self.tick + restart);
    }

    /// Processes the next event. Errors are checker violations.
    pub fn step(&mut self) -> Result<(), String> {
        if let Some(violation) = self.nodes.iter_mut().find_map(|node| node.disk.wal_order_violation.take()) {
            return Err(violation);
        }
        let Some((time, event)) = self.queue.pop() else {
            panic!("the event queue never empties: ticks reschedule themselves");
        };
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
                    Peer::Replica(index) => {
                        if self.nodes[index as usize].replica.is_some() {
                            if self.trace.is_some() {
                                self.trace_message(from, to, &bytes);
                            }
                            self.with_replica(index, |replica, io| replica.on_message(io, &bytes))?;
                            self.maybe_crash(index);
                        }
                    }
                    Peer::Client(id) => self.deliver_to_client(id, &bytes)?,
                }
            }
            Event::Complete { replica, incarnation, request, token } => {
                let stale = {
                    let node = &self.nodes[replica as usize];
                    node.incarnation != incarnation || node.replica.is_none()
                };
                if stale {
                    return Ok(());
                }
                self.hash(&[6, replica as u64, token.0]);
                let node = &mut self.nodes[replica as usize];
                let rates = if self.faults { &self.scenario.faults } else { &self.quiet };
                let completion = node.disk.carry_out(request, token, &mut self.rng, rates);
                if vireo_storage::partition::token_owner(token).is_some() {
                    self.mirror_completion(replica, completion)?;
                } else {
                    self.with_replica(replica, |replica, io| replica.on_completion(io, completion))?;
                }
                self.maybe_crash(replica);
            }
        }
        Ok(())
    }

    fn trace_message(&mut self, from: Peer, to: Peer, bytes: &[u8]) {
        let Ok(header) = Header::decode(bytes) else { return };
        let detail = match header.command {
            Command::Prepare => format!("view={} op={} commit={}", header.view, header.op, header.commit),
            Command::PrepareOk => format!("view={} op={}", header.view, header.op),
            Command::Commit => format!("view={} commit={}", header.view, header.commit),
            Command::DoViewChange => {
                format!("view={} log_view={} op={} commit={}", header.view, header.log_view, header.op, header.commit)
            }
            Command::StartView => format!("view={} op={} commit={}", header.view, header.op, header.commit),
            Command::Request => format!("request={} operation={}", header.request, header.operation),
            _ => format!("view={}", header.view),
        };
        let (from, to) = (short_peer(from), short_peer(to));
        self.log(|| format!("{from} -> {to} {} {detail}", header.command.name()));
    }

    fn deliver_to_client(&mut self, id: u128, bytes: &[u8]) -> Result<(), String> {
        let Some(index) = self.clients.iter().position(|client| client.id == id) else { return Ok(()) };
        let observation = self.clients[index].on_message(bytes);
        match observation {
            Observation::Registered { client, session } => {
                self.log(|| format!("c{index} registered session={session}"));
                self.checker.on_register_reply(client, session)?;
            }
            Observation::Replied { client, session, request, op, body } => {
                self.log(|| format!("c{index} reply request={request} op={op}"));
                self.checker.on_reply(client, session, request, op, body)?;
            }
            Observation::Evicted { .. } => {
                let id = new_client_id(&mut self.rng);
                self.log(|| format!("c{index} evicted"));
                self.clients[index].restart_as(id);
            }
            Observation::Nothing => {}
        }
        Ok(())
    }

    fn on_tick(&mut self) -> Result<(), String> {
        self.tick += 1;
        let rates = if self.faults { &self.scenario.faults } else { &self.quiet };
        self.network.tick(self.tick, &mut self.rng, rates);
        if self.network.partition_healed_tick == self.tick {
            self.maybe_crash_primary_on_heal();
        }
        self.maybe_isolate_primary();
        for index in 0..self.scenario.replica_count {
            let node = &self.nodes[index as usize];
            match node.replica {
                None => {
                    if node.restart_at_tick.is_some_and(|at| at <= self.tick) {
                        self.restart(index);
                    }
                }
                Some(_) => {
                    self.with_replica(index, |replica, io| replica.tick(io))?;
                    self.maybe_crash(index);
                }
            }
        }
        let replica_count = self.scenario.replica_count;
        for index in 0..self.clients.len() {
            if let Some((to, bytes)) = self.clients[index].tick(self.tick, &mut self.rng, replica_count) {
                let from = Peer::Client(self.clients[index].id);
                let rates = if self.faults { &self.scenario.faults } else { &self.quiet };
                for delay in self.network.route(from, to, &mut self.rng, rates) {
                    self.queue.push(self.now + delay, Event::Deliver { to, from, bytes: bytes.clone() });
                }
            }
        }
        Ok(())
    }

    /// Starts the liveness phase: heal everything, restart everyone, stop injecting faults.
    pub fn start_liveness(&mut self) {
        self.liveness_started_tick = Some(self.tick);
        self.faults = false;
        self.network.heal();
        for index in 0..self.scenario.replica_count {
            self.restart(index);
        }
        for client in &mut self.clients {
            client.finish();
        }
        self.log(|| "liveness phase: network healed, all replicas up, clients finishing".to_string());
    }

    /// Every client is done and every replica has executed the same, final commit.
    pub fn converged(&self) -> bool {
        if !self.clients.iter().all(SimClient::done) {
            return false;
        }
        let replicas: Vec<&Replica<RegisterLog>> = self.nodes.iter().filter_map(|node| node.replica.as_ref()).collect();
        if replicas.len() != self.nodes.len() {
            return false;
        }
        let commit = replicas.iter().map(|replica| replica.commit_max()).max().unwrap_or(0);
        replicas.iter().all(|replica| {
            replica.status() == Status::Normal && replica.commit_min() == commit && replica.view() == replicas[0].view()
        })
    }

    /// Runs the whole scenario: safety phase, liveness phase, final checks.
    pub fn run(&mut self) -> Outcome {
        match self.run_inner() {
            Ok(outcome) => outcome,
            Err(violation) => Outcome::Correctness(violation),
        }
    }

    fn run_inner(&mut self) -> Result<Outcome, String> {
        while self.tick < self.scenario.safety_ticks {
            self.step()?;
        }
        self.start_liveness();
        let deadline = self.tick + self.scenario.liveness_ticks_max;
        while !self.converged() {
            if self.tick >= deadline {
                return Ok(Outcome::Liveness(self.liveness_report()));
            }
            self.step()?;
        }
        self.final_checks()?;
        Ok(Outcome::Passed)
    }

    fn final_checks(&mut self) -> Result<(), String> {
        self.checker.finish()?;
        for node in &self.nodes {
            let replica = node.replica.as_ref().expect("converged: all up");
            let op = replica.commit_min();
            let digest = replica.state_machine().digest();
            match self.checker.digest_at(op) {
                Some(expected) if expected == digest => {}
                other => {
                    return Err(format!(
                        "replica {} ends at op {op} with digest {digest:016x}, history says {other:?}",
                        replica.replica()
                    ))
                }
            }
        }
        Ok(())
    }

    pub fn liveness_report(&self) -> String {
        let mut report = String::from("no convergence within the liveness bound:");
        for node in &self.nodes {
            match &node.replica {
                None => report.push_str(" [down]"),
                Some(replica) => {
                    let _ = write!(
                        report,
                        " [r{} {:?} view={} log_view={} op={} commit_min={} commit_max={} durable_view={} durable_log_view={} {}]",
                        replica.replica(),
                        replica.status(),
                        replica.view(),
                        replica.log_view(),
                        replica.op(),
                        replica.commit_min(),
                        replica.commit_max(),
                        replica.superblock_durable().view,
                        replica.superblock_durable().log_view,
                        replica.debug_pipelines(),
                    );
                }
            }
        }
        let waiting = self.clients.iter().filter(|client| !client.done()).count();
        let _ = write!(report, " clients_waiting={waiting}");
        report
    }

    /// Runs until `until` holds or `ticks_max` ticks pass (scripted tests).
    pub fn run_until(&mut self, ticks_max: u64, mut until: impl FnMut(&Cluster) -> bool) -> Result<bool, String> {
        let deadline = self.tick + ticks_max;
        while self.tick < deadline {
            if until(self) {
                return Ok(true);
            }
            self.step()?;
        }
        Ok(until(self))
    }

    pub fn crashes(&self) -> u64 {
        self.nodes.iter().map(|node| node.crashes).sum()
    }

    pub fn disk_faults(&self) -> u64 {
        self.nodes.iter().map(|node| node.disk.faults_injected).sum()
    }

    /// The replicas' WAL syncs, and of those the ones that made both redundant headers and
    /// prepares durable (`SimDisk::wal_syncs_shared`).
    pub fn wal_syncs(&self) -> (u64, u64) {
        let syncs = self.nodes.iter().map(|node| node.disk.wal_syncs).sum();
        (syncs, self.nodes.iter().map(|node| node.disk.wal_syncs_shared).sum())
    }

    pub fn partitions(&self) -> u64 {
        self.network.partitions
    }
}

/// The same rates with every fault zeroed (network delays stay).
pub(crate) fn quiet_rates(rates: &FaultRates) -> FaultRates {
    FaultRates {
        packet_loss_ppm: 0,
        packet_duplicate_ppm: 0,
        partition_ppm: 0,
        clog_ppm: 0,
        crash_ppm: 0,
        write_corruption_ppm: 0,
        misdirected_write_ppm: 0,
        latent_sector_ppm: 0,
        read_corruption_ppm: 0,
        slow_disk_ppm: 0,
        wal_error_ppm: 0,
        ..rates.clone()
    }
}

fn peer_id(peer: Peer) -> u64 {
    match peer {
        Peer::Replica(replica) => replica as u64,
        Peer::Client(client) => (client as u64) | 1 << 63,
    }
}

fn short_peer(peer: Peer) -> String {
    match peer {
        Peer::Replica(replica) => format!("r{replica}"),
        Peer::Client(_) => "client".to_string(),
    }
}
