//! `Shard`: one core's share of a node, as a sans-IO state machine. It hosts the VSR groups the
//! routing gives it (the metadata group on shard 0, every partition whose namespace hashes to
//! it), hands each frame to the group its header names, each completion to the group whose slot
//! marks its token, and ticks them all.
//!
//! Which partition groups exist follows the committed metadata, published to every shard
//! (`sync_partitions`): a group is opened when its partition appears and closed when it goes.
//! Invariants: every hosted partition is owned by this shard (`routing::shard_of`), slots map
//! one-to-one onto hosted groups, and the events buffered for the driver stay under
//! `EVENTS_MAX`.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use vireo_io::{Completion, Io, Namespace};
use vireo_protocol::header::{group_namespace, Header};
use vireo_protocol::{Config, Replica, ReplicaEvent, StateMachine};

use crate::group_io::{unmark, GroupIo};
use crate::partition::PartitionMachine;
use crate::routing::{primary_offset, shard_of};

/// Replica events a shard buffers for its driver; past it the oldest go (drivers poll often).
pub const EVENTS_MAX: usize = 16_384;

/// What a metadata state machine must tell the shards: which partitions exist.
pub trait MetadataPlane: StateMachine {
    fn partitions(&self) -> BTreeSet<Namespace>;
}

#[derive(Clone, Debug)]
pub struct ShardConfig {
    /// This node's index in the cluster (its replica index in every group).
    pub node: u8,
    pub shard: u16,
    pub shards: u16,
    /// The metadata group's configuration (shard 0 only).
    pub metadata: Config,
    /// The template every partition group's configuration is made from (namespace and primary
    /// offset are set per partition).
    pub partition: Config,
    /// Partition groups one shard hosts at most; the metadata limits keep clusters under it.
    pub partitions_max: usize,
}

struct Group<S: StateMachine> {
    slot: u16,
    replica: Replica<S>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShardEvent {
    pub namespace: Namespace,
    pub event: ReplicaEvent,
}

/// What a shard dropped, and why: nothing it drops goes uncounted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ShardCounters {
    /// Frames for a group this shard does not host (not created yet, deleted, or misrouted).
    pub frames_without_group: u64,
    /// Frames whose header does not decode.
    pub frames_malformed: u64,
    /// Partitions the metadata holds that this shard could not open (`partitions_max`).
    pub partitions_refused: u64,
}

pub struct Shard<M: MetadataPlane> {
    config: ShardConfig,
    metadata: Option<Group<M>>,
    partitions: BTreeMap<Namespace, Group<PartitionMachine>>,
    slots: BTreeMap<u16, Namespace>,
    slot_next: u16,
    events: VecDeque<ShardEvent>,
    pub counters: ShardCounters,
}

impl<M: MetadataPlane> Shard<M> {
    /// Starts a shard; shard 0 opens the metadata group at once, partition groups open as the
    /// published metadata names them.
    pub fn open(config: ShardConfig, io: &mut impl Io) -> Shard<M> {
        assert!(config.shard < config.shards);
        assert!(config.metadata.namespace.is_metadata());
        let mut shard = Shard {
            metadata: None,
            partitions: BTreeMap::new(),
            slots: BTreeMap::new(),
            slot_next: 1,
            events: VecDeque::new(),
            counters: ShardCounters::default(),
            config,
        };
        if shard.config.shard == 0 {
            let replica = Replica::open(shard.config.metadata.clone(), shard.config.node, &mut GroupIo::new(io, 0));
            shard.slots.insert(0, Namespace::METADATA);
            shard.metadata = Some(Group { slot: 0, replica });
            shard.drain_events(Namespace::METADATA);
        }
        shard
    }

    pub fn config(&self) -> &ShardConfig {
        &self.config
    }

    pub fn metadata(&self) -> Option<&Replica<M>> {
        self.metadata.as_ref().map(|group| &group.replica)
    }

    pub fn partition(&self, namespace: Namespace) -> Option<&Replica<PartitionMachine>> {
        self.partitions.get(&namespace).map(|group| &group.replica)
    }

    pub fn partitions(&self) -> impl Iterator<Item = (Namespace, &Replica<PartitionMachine>)> {
        self.partitions.iter().map(|(namespace, group)| (*namespace, &group.replica))
    }

    pub fn poll_event(&mut self) -> Option<ShardEvent> {
        self.events.pop_front()
    }

    /// The group a frame belongs to: the one its header names, else the metadata group (frames
    /// of clients that do not name groups are metadata requests until the node routes them).
    pub fn group_of_frame(header: &Header) -> Namespace {
        group_namespace(header.group).unwrap_or(Namespace::METADATA)
    }

    /// A frame for one of this shard's groups (the node routed it here by `shard_of`).
    pub fn on_message(&mut self, io: &mut impl Io, bytes: &[u8]) {
        let Ok(header) = Header::decode(bytes) else {
            self.counters.frames_malformed += 1;
            return;
        };
        let namespace = Shard::<M>::group_of_frame(&header);
        if namespace.is_metadata() {
            match self.metadata.as_mut() {
                Some(group) => group.replica.on_message(&mut GroupIo::new(io, group.slot), bytes),
                None => self.counters.frames_without_group += 1,
            }
        } else {
            match self.partitions.get_mut(&namespace) {
                Some(group) => group.replica.on_message(&mut GroupIo::new(io, group.slot), bytes),
                None => self.counters.frames_without_group += 1,
            }
        }
        self.drain_events(namespace);
    }

    pub fn on_completion(&mut self, io: &mut impl Io, completion: Completion) {
        let (slot, completion) = unmark(completion);
        // A completion for a group closed since: its files are no one's now.
        let Some(&namespace) = self.slots.get(&slot) else { return };
        if namespace.is_metadata() {
            let group = self.metadata.as_mut().expect("slot 0 is the metadata group");
            group.replica.on_completion(&mut GroupIo::new(io, slot), completion);
        } else {
            let group = self.partitions.get_mut(&namespace).expect("slots map onto hosted groups");
            group.replica.on_completion(&mut GroupIo::new(io, slot), completion);
        }
        self.drain_events(namespace);
    }

    pub fn tick(&mut self, io: &mut impl Io) {
        if let Some(group) = self.metadata.as_mut() {
            group.replica.tick(&mut GroupIo::new(io, group.slot));
            self.drain_events(Namespace::METADATA);
        }
        let namespaces: Vec<Namespace> = self.partitions.keys().copied().collect();
        for namespace in namespaces {
            let group = self.partitions.get_mut(&namespace).expect("listed");
            group.replica.tick(&mut GroupIo::new(io, group.slot));
            self.drain_events(namespace);
        }
    }

    /// Opens the group of every published partition this shard owns and does not host yet, and
    /// closes the groups of partitions the metadata no longer holds.
    pub fn sync_partitions(&mut self, io: &mut impl Io, published: &BTreeSet<Namespace>) {
        let (shard, shards) = (self.config.shard, self.config.shards);
        let gone: Vec<Namespace> =
            self.partitions.keys().filter(|namespace| !published.contains(namespace)).copied().collect();
        for namespace in gone {
            let group = self.partitions.remove(&namespace).expect("listed");
            self.slots.remove(&group.slot);
        }
        for &namespace in published.iter().filter(|namespace| shard_of(**namespace, shards) == shard) {
            if self.partitions.contains_key(&namespace) {
                continue;
            }
            if self.partitions.len() == self.config.partitions_max {
                self.counters.partitions_refused += 1;
                continue;
            }
            let slot = self.next_slot();
            let mut config = self.config.partition.clone();
            config.namespace = namespace;
            config.primary_offset = primary_offset(namespace, config.replica_count);
            let replica = Replica::open(config, self.config.node, &mut GroupIo::new(io, slot));
            self.slots.insert(slot, namespace);
            self.partitions.insert(namespace, Group { slot, replica });
            self.drain_events(namespace);
        }
        assert_eq!(self.slots.len(), self.partitions.len() + self.metadata.is_some() as usize);
    }

    /// A slot no hosted group uses; slots go round before one is reused, so a late completion
    /// of a closed group finds no one (or, after 65535 openings, is misdelivered: groups check
    /// their tokens' kinds and ignore what they did not ask for).
    fn next_slot(&mut self) -> u16 {
        loop {
            let slot = self.slot_next;
            self.slot_next = self.slot_next.checked_add(1).unwrap_or(1);
            if !self.slots.contains_key(&slot) {
                return slot;
            }
        }
    }

    fn drain_events(&mut self, namespace: Namespace) {
        loop {
            let event = if namespace.is_metadata() {
                self.metadata.as_mut().and_then(|group| group.replica.poll_event())
            } else {
                self.partitions.get_mut(&namespace).and_then(|group| group.replica.poll_event())
            };
            let Some(event) = event else { return };
            if self.events.len() == EVENTS_MAX {
                self.events.pop_front();
            }
            self.events.push_back(ShardEvent { namespace, event });
        }
    }
}
