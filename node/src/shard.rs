//! `Shard`: one core's share of a node, as a sans-IO state machine. It hosts the VSR groups the
//! routing gives it (the metadata group on shard 0, every partition whose namespace hashes to
//! it), hands each frame to the group its header names, each completion to the group whose slot
//! marks its token, and ticks them all.
//!
//! Which partition groups exist follows the committed metadata, published to every shard
//! (`sync_partitions`): a group is opened when its partition appears and closed when it goes,
//! and its files are then removed (a *janitor* lists the namespace and removes each file). A
//! partition deleted and created again is a new incarnation with its own cluster id
//! (`routing::group_cluster`): its group is reopened, and a namespace is not reopened while its
//! janitor still runs; a replica that finds an earlier incarnation's files wipes them itself.
//! A janitor starts only once the metadata's durable commit point covers the deletion
//! (`Published::commit_durable`): a restart then never publishes metadata that still holds the
//! group and reopens it with its files half gone.
//! Invariants: every hosted partition is owned by this shard (`routing::shard_of`), slots map
//! one-to-one onto hosted groups, and the events buffered for the driver stay under
//! `EVENTS_MAX`.

use std::collections::{BTreeMap, VecDeque};

use vireo_io::{Completion, FileId, FileKind, Io, Namespace, Token};
use vireo_protocol::config::Bug;
use vireo_protocol::header::{group_namespace, Command, Header, Message};
use vireo_protocol::replica::LogMark;
use vireo_protocol::{Config, Replica, ReplicaEvent, StateMachine, Status};
use vireo_storage::partition::{token_owner, ReadBatches, ReadError, ReadRequest};

use crate::group_io::{unmark, GroupIo};
use crate::partition::segment_log::{SegmentLog, LOG_OWNER};
use crate::partition::PartitionMachine;
use crate::routing::{group_cluster, primary_offset, shard_of};

/// The tokens of a janitor's asks (its slot marks them as its own).
const JANITOR_LIST: u64 = 1;
const JANITOR_REMOVE: u64 = 2;

/// Replica events a shard buffers for its driver; past it the oldest go (drivers poll often).
pub const EVENTS_MAX: usize = 16_384;

/// What the committed metadata says of one partition's group.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PartitionGroup {
    /// A number no earlier partition of that namespace had.
    pub incarnation: u64,
    /// Its topic's durability mode (`Config::sync_writes`).
    pub enforce_fsync: bool,
}

/// What a metadata state machine must tell the shards: which partitions exist, each with its
/// incarnation and durability mode.
pub trait MetadataPlane: StateMachine {
    fn partitions(&self) -> BTreeMap<Namespace, PartitionGroup>;
}

/// Janitors a shard runs at once; the other removals wait their turn in `removals`.
pub const JANITORS_MAX: usize = 64;

/// Deleted groups whose files wait for a janitor (for the deletion to be durable, or a free
/// janitor); past it a deleted group's files stay (counted) until a new incarnation of its
/// namespace wipes them.
pub const REMOVALS_MAX: usize = 4096;

/// Which committed metadata a publication is: the op it was applied to, and the commit point
/// the metadata replica's superblock holds durably.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Published {
    pub op: u64,
    pub commit_durable: u64,
}

/// A deleted group's files, to be removed once the metadata that deleted it (at `op` or
/// before) is durably committed.
#[derive(Clone, Copy, Debug)]
struct Removal {
    namespace: Namespace,
    op: u64,
}

/// The removal of a deleted group's files: a listing, a remove per file, then the superblocks
/// (last, so that a crash in between leaves a namespace a new incarnation still recognises).
struct Janitor {
    namespace: Namespace,
    outstanding: u32,
    superblocks_left: bool,
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
    /// The partition's incarnation (0 for the metadata group).
    incarnation: u64,
    /// I/O requests of the group not completed yet (its replica's and its segment log's).
    in_flight: u32,
    replica: Replica<S>,
    /// A partition group's segment log (none for the metadata group).
    segments: Option<SegmentLog>,
    /// The log's durable and acknowledgeable cursors as last reported to the replica
    /// (`external_log_durable`).
    reported: (u64, u64),
}

impl Group<PartitionMachine> {
    /// Brings the group's segment log to its machine, once the replica is open and the files are
    /// its own (a superseded replica's are a newer incarnation's). What the log reports may
    /// commit ops (a one-replica group commits on its own acknowledgement): the log then checks
    /// their batches at once, so a client that got the reply finds them readable.
    fn follow(&mut self, io: &mut impl Io) {
        let committed = self.replica.commit_min();
        self.follow_once(io);
        if self.replica.commit_min() != committed {
            self.follow_once(io);
        }
    }

    fn follow_once(&mut self, io: &mut impl Io) {
        if self.replica.superseded() {
            return;
        }
        // A group stopped on a failed write or sync writes nothing more: its log stays as it
        // is, and only its reads are taken on.
        if self.replica.failed() {
            let segments = self.segments.as_mut().expect("a partition group has a segment log");
            segments.take_reads_only(&mut GroupIo::new(io, self.slot, &mut self.in_flight));
            return;
        }
        if self.replica.status() == Status::Opening {
            self.fill(io);
            return;
        }
        let segments = self.segments.as_mut().expect("a partition group has a segment log");
        // Caught up with the commits it knows of (a restarted replica's machine replays its WAL
        // before its first offset is where the log is retained from), or held up by the log (a
        // checkpoint waits for it, and the WAL for the checkpoint).
        let caught_up = self.replica.commit_min() == self.replica.commit_max();
        let waited_for = self.replica.checkpoint_waiting_for().is_some();
        let ready = self.replica.status() == Status::Normal && (caught_up || waited_for);
        // A device failure the log saw (in a completion since the last follow) stops the group
        // before the log is dropped and opened again: its reads go on (`take_reads_only`).
        if let Some(what) = segments.take_device_failure() {
            self.replica.fail_storage(what);
            return;
        }
        let mut group_io = GroupIo::new(io, self.slot, &mut self.in_flight);
        let durable = self.replica.superblock_durable();
        let checkpoint = LogMark { cursor: durable.offset_frontier, retained_from: durable.retained_from };
        // A full disk refused a write (since the last follow, or in this one): a single replica
        // refuses the requests whose batches it was for, before anything is appended again.
        if let Some(stored_to) = segments.take_refused_no_space() {
            self.replica.refuse_unstored(&mut group_io, stored_to);
        }
        segments.set_enforced(self.replica.config().sync_writes);
        segments.follow(&mut group_io, self.replica.state_machine_mut(), ready, checkpoint);
        if let Some(what) = segments.take_device_failure() {
            // Not written again and trusted: the group stops, as on a failed WAL write.
            self.replica.fail_storage(what);
            return;
        }
        if let Some(stored_to) = segments.take_refused_no_space() {
            self.replica.refuse_unstored(&mut group_io, stored_to);
        }
        if self.replica.status() == Status::Normal {
            segments.speculate(&mut group_io, &self.replica);
        }
        if let Some(cursor) = self.replica.checkpoint_waiting_for() {
            segments.sync_for_checkpoint(&mut group_io, cursor);
        }
        // The group's checkpoints wait for the log to hold their state durably, and its
        // acknowledgements for the log to hold the prepares' batches.
        let durable = segments.durable_cursor();
        let config = self.replica.config();
        let enforced = config.sync_writes && config.bug != Some(Bug::SegmentLogAckBeforeSync);
        let ackable = segments.ack_cursor(&self.replica, enforced);
        if (durable, ackable) != self.reported || self.replica.journal_replaced() {
            self.reported = (durable, ackable);
            self.replica.external_log_durable(&mut group_io, durable, ackable);
        }
    }

    /// While the replica opens: the batches its WAL's elided prepares left out are read back from
    /// the segment log (opened for it, from the restored checkpoint), and the replica finishes
    /// opening with them.
    fn fill(&mut self, io: &mut impl Io) {
        let Some(range) = self.replica.fills_wanted() else { return };
        let segments = self.segments.as_mut().expect("a partition group has a segment log");
        let mut group_io = GroupIo::new(io, self.slot, &mut self.in_flight);
        let durable = self.replica.superblock_durable();
        let checkpoint = LogMark { cursor: durable.offset_frontier, retained_from: durable.retained_from };
        let Some(read) = segments.fill(&mut group_io, self.replica.state_machine(), checkpoint, range) else {
            return;
        };
        let held =
            |offset: u64, len: u32| read.batches.get(&offset).filter(|batch| batch.len() == len as usize).cloned();
        let filled = self.replica.fill(&mut group_io, held, |offset| read.damaged.contains(&offset));
        segments.counters.prepares_filled += filled.whole;
        segments.counters.prepares_unfilled += filled.missing;
        segments.counters.batches_lost += filled.spans_lost;
    }

    /// A segment-log frame from a peer's log: a fetch to serve, or the answer to ours.
    fn on_log_frame(&mut self, io: &mut impl Io, message: &Message) {
        let segments = self.segments.as_mut().expect("a partition group has a segment log");
        let mut group_io = GroupIo::new(io, self.slot, &mut self.in_flight);
        match message.header.command {
            Command::RequestBatches => segments.on_request_batches(&mut group_io, &message.header),
            Command::Batches => segments.on_batches(&mut group_io, self.replica.state_machine(), message),
            _ => unreachable!("only segment-log frames"),
        }
    }
}

/// A closed group whose I/O is still in flight: its files are removed once the last completes.
#[derive(Clone, Copy)]
struct Closing {
    namespace: Namespace,
    in_flight: u32,
    /// Whether the files are the closed group's to remove (false for a group closed while its
    /// replica was still opening: they may be a newer incarnation's).
    remove_files: bool,
    /// The metadata op that was published when the group closed (its deletion is at or before).
    deleted_at: u64,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShardEvent {
    pub namespace: Namespace,
    /// Which incarnation of the namespace's group (0 for the metadata group).
    pub incarnation: u64,
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
    /// Deleted groups whose files were left in place (`REMOVALS_MAX`, a listing that failed, or
    /// a group closed while still opening): the next incarnation of the namespace wipes them.
    pub files_left: u64,
    /// Deleted groups whose files were removed.
    pub groups_removed: u64,
}

pub struct Shard<M: MetadataPlane> {
    config: ShardConfig,
    metadata: Option<Group<M>>,
    partitions: BTreeMap<Namespace, Group<PartitionMachine>>,
    slots: BTreeMap<u16, Namespace>,
    slot_next: u16,
    janitors: BTreeMap<u16, Janitor>,
    closing: BTreeMap<u16, Closing>,
    /// The partitions last published, to open what a janitor held back once it is done.
    published: BTreeMap<Namespace, PartitionGroup>,
    published_at: Published,
    removals: VecDeque<Removal>,
    events: VecDeque<ShardEvent>,
    /// Segment-log reads finished and not yet taken by the node: at most one per read it parked
    /// (`node::PARKED_READS_MAX`).
    segment_reads: VecDeque<(u64, Result<ReadBatches, ReadError>)>,
    /// The node's disk is below its reserve: the partition groups take no new data
    /// (`Replica::set_disk_low`; the metadata group's few writes go on).
    disk_low: bool,
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
            janitors: BTreeMap::new(),
            closing: BTreeMap::new(),
            published: BTreeMap::new(),
            published_at: Published::default(),
            removals: VecDeque::new(),
            events: VecDeque::new(),
            segment_reads: VecDeque::new(),
            disk_low: false,
            counters: ShardCounters::default(),
            config,
        };
        if shard.config.shard == 0 {
            let mut in_flight = 0;
            let replica = Replica::open(
                shard.config.metadata.clone(),
                shard.config.node,
                &mut GroupIo::new(io, 0, &mut in_flight),
            );
            shard.slots.insert(0, Namespace::METADATA);
            shard.metadata =
                Some(Group { slot: 0, incarnation: 0, in_flight, replica, segments: None, reported: (0, 0) });
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

    /// A read of a hosted partition arrived: the read round it waits for (`Replica::read_round`),
    /// `None` while the group is not hosted or still opening.
    pub fn read_round(&mut self, io: &mut impl Io, namespace: Namespace) -> Option<u64> {
        let group = self.partitions.get_mut(&namespace)?;
        if group.replica.status() == Status::Opening {
            return None;
        }
        let round = group.replica.read_round(&mut GroupIo::new(io, group.slot, &mut group.in_flight));
        self.drain_events(namespace);
        Some(round)
    }

    /// Starts a read of a hosted partition's segment log (see `SegmentLog::read`).
    pub fn read_segment_log(
        &mut self,
        io: &mut impl Io,
        namespace: Namespace,
        request: ReadRequest,
    ) -> Result<(), ReadError> {
        let group = self.partitions.get_mut(&namespace).ok_or(ReadError::NotOpen)?;
        let segments = group.segments.as_mut().expect("a partition group has a segment log");
        let started = segments.read(&mut GroupIo::new(io, group.slot, &mut group.in_flight), request);
        // A read of what is still in memory finishes at once.
        while let Some(read) = segments.take_read() {
            self.segment_reads.push_back(read);
        }
        started
    }

    /// A finished segment-log read of any hosted group, if any (each group's are moved here as
    /// they finish, so taking one costs nothing per hosted group).
    pub fn take_segment_read(&mut self) -> Option<(u64, Result<ReadBatches, ReadError>)> {
        self.segment_reads.pop_front()
    }

    /// A hosted partition group's segment log.
    pub fn segment_log(&self, namespace: Namespace) -> Option<&SegmentLog> {
        self.partitions.get(&namespace).and_then(|group| group.segments.as_ref())
    }

    /// The segment log of every hosted partition group.
    pub fn segment_logs(&self) -> impl Iterator<Item = (Namespace, &SegmentLog)> {
        self.partitions.iter().map(|(namespace, group)| {
            (*namespace, group.segments.as_ref().expect("a partition group has a segment log"))
        })
    }

    pub fn poll_event(&mut self) -> Option<ShardEvent> {
        self.events.pop_front()
    }

    /// The group a frame belongs to: the one its header names, else the metadata group (frames
    /// of clients that do not name groups are metadata requests until the node routes them).
    pub fn group_of_frame(header: &Header) -> Namespace {
        group_namespace(header.group).unwrap_or(Namespace::METADATA)
    }

    /// A frame for one of this shard's groups (the node routed it here by `shard_of`). Owned, so
    /// that a client's request becomes its prepare's body without a copy (`Replica::on_frame`).
    pub fn on_message(&mut self, io: &mut impl Io, bytes: Vec<u8>) {
        let Ok(header) = Header::decode(&bytes) else {
            self.counters.frames_malformed += 1;
            return;
        };
        let namespace = Shard::<M>::group_of_frame(&header);
        if namespace.is_metadata() {
            match self.metadata.as_mut() {
                Some(group) => group.replica.on_frame(&mut GroupIo::new(io, group.slot, &mut group.in_flight), bytes),
                None => self.counters.frames_without_group += 1,
            }
        } else {
            match self.partitions.get_mut(&namespace) {
                Some(group) if matches!(header.command, Command::RequestBatches | Command::Batches) => {
                    // Between the group's logs; checked as the replica checks its own frames.
                    match Message::decode(&bytes, true) {
                        Ok(message)
                            if message.header.cluster == group.replica.config().cluster
                                && message.header.replica < group.replica.config().replica_count =>
                        {
                            group.on_log_frame(io, &message);
                            group.follow(io);
                        }
                        _ => self.counters.frames_malformed += 1,
                    }
                }
                Some(group) => {
                    group.replica.on_frame(&mut GroupIo::new(io, group.slot, &mut group.in_flight), bytes);
                    group.follow(io);
                }
                None => self.counters.frames_without_group += 1,
            }
        }
        self.drain_events(namespace);
    }

    pub fn on_completion(&mut self, io: &mut impl Io, completion: Completion) {
        let (slot, completion) = unmark(completion);
        if self.janitors.contains_key(&slot) {
            self.on_janitor_completion(io, slot, completion);
            return;
        }
        if let Some(closing) = self.closing.get_mut(&slot) {
            // A group closed since: once its last request is done, its files go.
            closing.in_flight -= 1;
            if closing.in_flight == 0 {
                let Closing { namespace, remove_files, deleted_at, .. } = *closing;
                self.closing.remove(&slot);
                if remove_files {
                    self.remove_files(io, namespace, deleted_at);
                } else {
                    self.counters.files_left += 1;
                    // The namespace may have been published again meanwhile.
                    self.sync_again(io);
                }
            }
            return;
        }
        let Some(&namespace) = self.slots.get(&slot) else { return };
        if namespace.is_metadata() {
            let group = self.metadata.as_mut().expect("slot 0 is the metadata group");
            group.in_flight -= 1;
            group.replica.on_completion(&mut GroupIo::new(io, slot, &mut group.in_flight), completion);
        } else {
            let group = self.partitions.get_mut(&namespace).expect("slots map onto hosted groups");
            group.in_flight -= 1;
            let mut group_io = GroupIo::new(io, slot, &mut group.in_flight);
            if token_owner(completion.token()) == Some(LOG_OWNER) {
                let segments = group.segments.as_mut().expect("a partition group has a segment log");
                segments.on_completion(&mut group_io, completion);
                while let Some(read) = segments.take_read() {
                    self.segment_reads.push_back(read);
                }
            } else {
                group.replica.on_completion(&mut group_io, completion);
            }
            group.follow(io);
        }
        self.drain_events(namespace);
    }

    /// Shard 0: makes the metadata replica's commit point durable (metadata that deleted groups
    /// was published: their janitors wait for it).
    pub fn persist_metadata_commit(&mut self, io: &mut impl Io) {
        if let Some(group) = self.metadata.as_mut() {
            group.replica.persist_commit(&mut GroupIo::new(io, group.slot, &mut group.in_flight));
        }
    }

    /// Whether the node's disk is below its reserve: said to every partition group at its next
    /// tick (and to groups opened later at theirs).
    pub fn set_disk_low(&mut self, low: bool) {
        self.disk_low = low;
    }

    pub fn tick(&mut self, io: &mut impl Io) {
        if let Some(group) = self.metadata.as_mut() {
            group.replica.tick(&mut GroupIo::new(io, group.slot, &mut group.in_flight));
            self.drain_events(Namespace::METADATA);
        }
        let namespaces: Vec<Namespace> = self.partitions.keys().copied().collect();
        for namespace in namespaces {
            let group = self.partitions.get_mut(&namespace).expect("listed");
            group.replica.set_disk_low(&mut GroupIo::new(io, group.slot, &mut group.in_flight), self.disk_low);
            group.replica.tick(&mut GroupIo::new(io, group.slot, &mut group.in_flight));
            let segments = group.segments.as_mut().expect("a partition group has a segment log");
            segments.tick();
            if !group.replica.failed() {
                segments.sync_if_idle(&mut GroupIo::new(io, group.slot, &mut group.in_flight));
            }
            group.follow(io);
            self.drain_events(namespace);
        }
    }

    /// Opens the group of every published partition this shard owns and does not host yet, and
    /// closes (and removes the files of) the groups of partitions the metadata no longer holds,
    /// or holds in a newer incarnation.
    pub fn sync_partitions(
        &mut self,
        io: &mut impl Io,
        published: &BTreeMap<Namespace, PartitionGroup>,
        at: Published,
    ) {
        let (shard, shards) = (self.config.shard, self.config.shards);
        assert!(at.op >= self.published_at.op, "metadata is published in commit order");
        self.published = published.clone();
        self.published_at = at;
        let gone: Vec<Namespace> = self
            .partitions
            .iter()
            .filter(|(namespace, group)| published.get(namespace).map(|p| p.incarnation) != Some(group.incarnation))
            .map(|(namespace, _)| *namespace)
            .collect();
        for namespace in gone {
            let group = self.partitions.remove(&namespace).expect("listed");
            self.slots.remove(&group.slot);
            // A replica still opening has not read whose the files are: they may be a newer
            // incarnation's (a node whose metadata lagged after a restart opened the old one, and
            // the metadata caught up before it finished). Left in place; whichever incarnation
            // opens next wipes them if they are not its own.
            let remove_files = group.replica.status() != Status::Opening;
            if group.replica.superseded() {
                // The files are a newer incarnation's: not this group's to remove.
                assert_eq!(group.in_flight, 0, "a superseded replica asks for nothing");
            } else if group.in_flight == 0 {
                if remove_files {
                    self.remove_files(io, namespace, at.op);
                } else {
                    self.counters.files_left += 1;
                }
            } else {
                let in_flight = group.in_flight;
                self.closing.insert(group.slot, Closing { namespace, in_flight, remove_files, deleted_at: at.op });
            }
        }
        for (&namespace, &PartitionGroup { incarnation, enforce_fsync }) in
            published.iter().filter(|(namespace, _)| shard_of(**namespace, shards) == shard)
        {
            if let Some(group) = self.partitions.get_mut(&namespace) {
                // update_topic may change the mode of a group that runs.
                group.replica.set_sync_writes(enforce_fsync);
                continue;
            }
            if self.janitors.values().any(|janitor| janitor.namespace == namespace)
                || self.closing.values().any(|closing| closing.namespace == namespace)
                || self.removals.iter().any(|removal| removal.namespace == namespace)
            {
                continue;
            }
            if self.partitions.len() == self.config.partitions_max {
                self.counters.partitions_refused += 1;
                continue;
            }
            let slot = self.next_slot();
            let mut config = self.config.partition.clone();
            config.namespace = namespace;
            let incarnation_named = if config.bug == Some(Bug::DeletedGroupsKeepTheirFiles) { 0 } else { incarnation };
            config.cluster = group_cluster(self.config.partition.cluster, namespace, incarnation_named);
            config.primary_offset = primary_offset(namespace, config.replica_count);
            config.sync_writes = enforce_fsync;
            let mut in_flight = 0;
            let replica = Replica::open(config, self.config.node, &mut GroupIo::new(io, slot, &mut in_flight));
            self.slots.insert(slot, namespace);
            let segments = Some(SegmentLog::new(
                namespace,
                namespace.unpack().2 as u64,
                self.config.partition.bug,
                replica.config().cluster,
                self.config.node,
                replica.config().replica_count,
            ));
            self.partitions
                .insert(namespace, Group { slot, incarnation, in_flight, replica, segments, reported: (0, 0) });
            self.drain_events(namespace);
        }
        assert_eq!(self.slots.len(), self.partitions.len() + self.metadata.is_some() as usize);
        self.start_removals(io);
    }

    fn sync_again(&mut self, io: &mut impl Io) {
        let published = std::mem::take(&mut self.published);
        self.sync_partitions(io, &published, self.published_at);
    }

    /// Queues the removal of a closed group's files, deleted by metadata op `deleted_at` or before.
    fn remove_files(&mut self, io: &mut impl Io, namespace: Namespace, deleted_at: u64) {
        if self.config.partition.bug == Some(Bug::DeletedGroupsKeepTheirFiles) {
            return;
        }
        if self.removals.len() == REMOVALS_MAX {
            self.counters.files_left += 1;
            return;
        }
        self.removals.push_back(Removal { namespace, op: deleted_at });
        self.start_removals(io);
    }

    /// Deleted groups whose files wait for the deletion to be durable (or for a janitor).
    pub fn removals_waiting(&self) -> usize {
        self.removals.len()
    }

    /// Whether a janitor is removing `namespace`'s files: a deleted group's, as opposed to an
    /// earlier incarnation's that a replica opening the namespace wipes itself.
    pub fn janitor_removing(&self, namespace: Namespace) -> bool {
        self.janitors.values().any(|janitor| janitor.namespace == namespace)
    }

    /// Starts a janitor for each removal whose deletion the metadata holds durably, in order.
    fn start_removals(&mut self, io: &mut impl Io) {
        let hasty = self.config.partition.bug == Some(Bug::DeletionNotDurable);
        while let Some(removal) = self.removals.front().copied() {
            if self.janitors.len() == JANITORS_MAX || (removal.op > self.published_at.commit_durable && !hasty) {
                return;
            }
            self.removals.pop_front();
            let slot = self.next_slot();
            let mut janitor = Janitor { namespace: removal.namespace, outstanding: 0, superblocks_left: true };
            GroupIo::new(&mut *io, slot, &mut janitor.outstanding).list(removal.namespace, Token(JANITOR_LIST));
            self.janitors.insert(slot, janitor);
        }
    }

    fn on_janitor_completion(&mut self, io: &mut impl Io, slot: u16, completion: Completion) {
        let janitor = self.janitors.get_mut(&slot).expect("checked by the caller");
        janitor.outstanding -= 1;
        let namespace = janitor.namespace;
        match completion {
            Completion::List { result: Ok(files), .. } => {
                for (kind, _) in files {
                    if !matches!(kind, FileKind::SuperblockA | FileKind::SuperblockB) {
                        let mut group_io = GroupIo::new(&mut *io, slot, &mut janitor.outstanding);
                        group_io.remove(FileId::new(namespace, kind), Token(JANITOR_REMOVE));
                    }
                }
            }
            Completion::List { result: Err(_), .. } => {
                self.counters.files_left += 1;
                janitor.superblocks_left = false;
            }
            // A file that could not be removed stays; a new incarnation wipes it.
            _ => {}
        }
        if janitor.outstanding > 0 {
            return;
        }
        if janitor.superblocks_left {
            janitor.superblocks_left = false;
            for kind in [FileKind::SuperblockA, FileKind::SuperblockB] {
                let mut group_io = GroupIo::new(&mut *io, slot, &mut janitor.outstanding);
                group_io.remove(FileId::new(namespace, kind), Token(JANITOR_REMOVE));
            }
            return;
        }
        self.janitors.remove(&slot);
        self.counters.groups_removed += 1;
        // The namespace may have been published again meanwhile.
        self.sync_again(io);
    }

    /// A slot no hosted group uses; slots go round before one is reused, so a late completion
    /// of a closed group finds no one (or, after 65535 openings, is misdelivered: groups check
    /// their tokens' kinds and ignore what they did not ask for).
    fn next_slot(&mut self) -> u16 {
        loop {
            let slot = self.slot_next;
            self.slot_next = self.slot_next.checked_add(1).unwrap_or(1);
            if !self.slots.contains_key(&slot)
                && !self.janitors.contains_key(&slot)
                && !self.closing.contains_key(&slot)
            {
                return slot;
            }
        }
    }

    fn drain_events(&mut self, namespace: Namespace) {
        loop {
            let polled = if namespace.is_metadata() {
                self.metadata.as_mut().map(|group| (0, group.replica.poll_event()))
            } else {
                self.partitions.get_mut(&namespace).map(|group| (group.incarnation, group.replica.poll_event()))
            };
            let Some((incarnation, Some(event))) = polled else { return };
            if self.events.len() == EVENTS_MAX {
                self.events.pop_front();
            }
            self.events.push_back(ShardEvent { namespace, incarnation, event });
        }
    }
}
