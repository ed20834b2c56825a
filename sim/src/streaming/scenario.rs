//! A streaming run's scenario: the core scenario's cluster shape and fault rates (swarm
//! testing), plus the shards per node and the workload's mix of clients.

use std::fmt;

use crate::rng::SimRng;
use crate::scenario::{Overrides, Scenario, Volume};

/// Nodes in a streaming cluster (the 1..=5).
pub const NODES_MAX: u8 = 5;
pub const SHARDS_MAX: u16 = 4;

#[derive(Clone, Debug)]
pub struct StreamingScenario {
    pub core: Scenario,
    pub volume: Volume,
    pub shards: u16,
    /// Partitions the topic starts with; the administrator adds more while traffic runs.
    pub partitions: u32,
    pub partitions_max: u32,
    pub producers: u8,
    pub consumers: u8,
    pub members: u8,
    /// Send requests each producer makes.
    pub sends_per_producer: u64,
    pub rolling_restart_ticks: Option<u64>,
    /// Clients that open bursts of connections and never log in.
    pub lurkers: u8,
    /// Client connections one shard of a node holds; small in some runs, so lurkers fill it.
    pub connections_per_shard_max: usize,
    /// The topics' retention, racing the consumers.
    pub retention: TopicRetention,
    /// A window in which one node's disk is full: every write that would grow a file fails with
    /// `NoSpace` until the window ends (space freed), in a quarter of the runs.
    pub disk_full: Option<DiskFull>,
    /// Now and then, a node that has just answered a poll of a partition whose primary it hosts,
    /// with prepares past the commit point, is cut off from its peers (its clients still reach
    /// it; with three nodes or more), or loses power (fewer nodes, durability enforced), in a
    /// third of the runs with faults.
    pub primary_isolation: Option<PrimaryIsolation>,
}

/// Cutting off primaries with prepares in flight: their segment logs hold batches of those
/// prepares (appended before they commit) that the view change the others hold replaces, while
/// the polls of the primary's clients wait for a read index the heal answers. Serving such a
/// tail before checking it against the machine is what this is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PrimaryIsolation {
    /// Armed every this many ticks; it fires at the next such poll.
    pub every_ticks: u64,
    /// How long the primary's node is cut off.
    pub ticks: u64,
}

impl PrimaryIsolation {
    /// From the seed alone, like the retention.
    fn draw(seed: u64, faults: bool) -> Option<PrimaryIsolation> {
        let hash = vireo_storage::checksum::checksum64(&(seed ^ ISOLATION_SALT).to_le_bytes());
        if !faults || !hash.is_multiple_of(3) {
            return None;
        }
        Some(PrimaryIsolation { every_ticks: 150 + (hash >> 8) % 250, ticks: 30 + (hash >> 24) % 200 })
    }
}

const ISOLATION_SALT: u64 = 0x4953_4f4c_4154_4521;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DiskFull {
    pub node: u8,
    pub from_tick: u64,
    pub ticks: u64,
    /// In half the windows the disk keeps a little room, less than the node's free-space
    /// reserve: the node refuses its clients' sends while the writes it already took (and its
    /// peers' prepares) still land, until they fill it.
    pub room: bool,
    /// In half of the others no node keeps a reserve: the disk fills under writes already
    /// taken, as when another process fills it, and a single node's group refuses the sends whose
    /// writes met it (`vireo_protocol::replica::no_space`).
    pub unforeseen: bool,
}

impl DiskFull {
    /// From the seed alone, like the retention: a quarter of the runs fill one node's disk for 1
    /// to 10 simulated seconds, somewhere in the first half of the safety phase.
    fn draw(seed: u64, nodes: u8, safety_ticks: u64) -> Option<DiskFull> {
        let hash = vireo_storage::checksum::checksum64(&(seed ^ DISK_FULL_SALT).to_le_bytes());
        if !hash.is_multiple_of(4) {
            return None;
        }
        let room = (hash >> 60) & 1 == 1;
        let unforeseen = !room && (hash >> 61) & 1 == 1;
        // An unforeseen fill comes while the producers still send (their first seconds): sends
        // then meet it in flight.
        let from_tick = if unforeseen {
            20 + (hash >> 16) % 180
        } else {
            safety_ticks / 8 + (hash >> 16) % (safety_ticks / 2).max(1)
        };
        Some(DiskFull {
            node: ((hash >> 8) % nodes as u64) as u8,
            from_tick,
            ticks: 100 + (hash >> 40) % 900,
            room,
            unforeseen,
        })
    }
}

const DISK_FULL_SALT: u64 = 0x4449_534b_4655_4c4c;

/// The retention options every topic of a run is created with (`PROTOCOL.md` topic options).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TopicRetention {
    pub segment_size: u64,
    /// Microseconds; 0 keeps messages forever.
    pub message_expiry_us: u64,
    /// Bytes for the whole topic; 0 is unlimited.
    pub max_topic_size: u64,
}

impl TopicRetention {
    /// Iggy's defaults: nothing ever goes.
    pub const KEEP: TopicRetention = TopicRetention { segment_size: 1 << 30, message_expiry_us: 0, max_topic_size: 0 };

    pub fn trims(&self) -> bool {
        self.message_expiry_us != 0 || self.max_topic_size != 0
    }

    /// From the seed alone (not the RNG), so that every recorded seed replays its other draws as
    /// found. A third of the runs keep everything; the rest seal segments of 512 B to 4 KiB (runs
    /// move tens of kilobytes, so each partition seals many) and expire messages after 2 to 30
    /// simulated seconds, or hold a topic to a few segments, or both.
    fn draw(seed: u64) -> TopicRetention {
        let hash = vireo_storage::checksum::checksum64(&(seed ^ RETENTION_SALT).to_le_bytes());
        if hash.is_multiple_of(3) {
            return TopicRetention::KEEP;
        }
        let segment_size = [512u64, 1024, 2048, 4096][(hash >> 8) as usize % 4];
        let expiry_s = [0u64, 2, 5, 10, 30][(hash >> 16) as usize % 5];
        let max_segments = [0u64, 4, 16, 64][(hash >> 24) as usize % 4];
        TopicRetention {
            segment_size,
            message_expiry_us: expiry_s * 1_000_000,
            max_topic_size: max_segments * segment_size,
        }
    }
}

const RETENTION_SALT: u64 = 0x5245_5445_4e54_494f;
const VOLUME_SALT: u64 = 0x564f_4c55_4d45_5321;

impl StreamingScenario {
    pub fn draw(seed: u64, overrides: &Overrides, rng: &mut SimRng) -> StreamingScenario {
        let mut core = Scenario::draw(seed, overrides, rng);
        if overrides.rolling_restart_ticks.is_some() {
            // Scheduled crashes replace random ones.
            core.faults.crash_ppm = 0;
        }
        core.replica_count = overrides.replicas.unwrap_or(rng.range(1, NODES_MAX as u64) as u8);
        assert!((1..=NODES_MAX).contains(&core.replica_count), "1..={NODES_MAX} nodes");
        // The fault budget: at most quorum - 1 faulty disks for the node count drawn here.
        let quorum = vireo_protocol::Config::new(0, core.replica_count).quorum_replication() as u8;
        core.faults.faulty_disks = core.faults.faulty_disks.min(quorum - 1);
        // In a third of the seeds segment logs sync ten times slower than WALs: the group's
        // checkpoints then wait long for them (a checkpoint that did not is caught).
        core.faults.segment_sync_factor = if seed % 3 == 2 || overrides.slow_segment_syncs { 10 } else { 1 };
        let shards = overrides.shards.unwrap_or(rng.range(1, SHARDS_MAX as u64) as u16);
        let producers = rng.range(1, 3) as u8;
        let consumers = rng.range(1, 3) as u8;
        let members = rng.range(0, 3) as u8;
        // Sessions: every client holds one per group it talks to; keep the table big enough for
        // all of them but sometimes not (eviction is part of the protocol).
        let clients = 1 + producers as usize + consumers as usize + members as usize;
        core.clients_max = if rng.chance(100_000) { clients.saturating_sub(1).max(1) } else { clients + 4 };
        core.client_count = clients as u8;
        let partitions = rng.range(1, 3) as u32;
        // A draw every recorded seed's run depends on (it once sized batches, which clients now
        // draw from 1 to 3 messages themselves): kept so that seeds replay as they were found.
        let _ = rng.range(1, 8);
        let mut retention = TopicRetention::draw(seed);
        let mut sends_per_producer = overrides.requests.unwrap_or(rng.range(20, 120));
        let drawn_large = vireo_storage::checksum::checksum64(&(seed ^ VOLUME_SALT).to_le_bytes()).is_multiple_of(16);
        let volume = overrides.volume.unwrap_or(if drawn_large { Volume::Large } else { Volume::Normal });
        if volume == Volume::Large {
            if overrides.volume.is_some() {
                // Hundreds of MiB in 1 MiB segments, all kept.
                retention = TopicRetention { segment_size: 1 << 20, message_expiry_us: 0, max_topic_size: 0 };
                sends_per_producer = overrides.requests.unwrap_or(400);
            } else {
                // The drawn retention scaled to batches 128 times larger (segments of 64 KiB to
                // 512 KiB, a batch often sealing one), and fewer of them.
                retention.segment_size = (retention.segment_size * 128).min(TopicRetention::KEEP.segment_size);
                retention.max_topic_size *= 128;
                if overrides.requests.is_none() {
                    sends_per_producer = sends_per_producer.div_ceil(2);
                }
            }
            // A WAL of 64 slots of 2 MiB (the simulated disk holds a file's bytes whole).
            core.journal_slots = 64;
            // Consumers read it all back after the faults end: hundreds of MiB take longer.
            core.liveness_ticks_max *= 5;
        }
        StreamingScenario {
            volume,
            shards,
            partitions,
            partitions_max: partitions + rng.range(0, 3) as u32,
            producers,
            consumers,
            members,
            sends_per_producer,
            rolling_restart_ticks: overrides.rolling_restart_ticks,
            lurkers: rng.range(0, 2) as u8,
            // Small in some runs: room for every client on any one shard, so that only lurkers'
            // bursts fill it (a bound that starves clients forever would fail liveness, not the
            // node).
            connections_per_shard_max: if rng.chance(300_000) { clients + 1 } else { 64 },
            retention,
            disk_full: DiskFull::draw(seed, core.replica_count, core.safety_ticks),
            primary_isolation: PrimaryIsolation::draw(seed, core.fault_level != crate::scenario::FaultLevel::None),
            core,
        }
    }
}

impl fmt::Display for StreamingScenario {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "workload=streaming nodes={} shards={} partitions={}..{} producers={} consumers={} members={} \
             lurkers={} connections_per_shard={} sends_per_producer={} segment_size={} message_expiry_us={} \
             max_topic_size={} disk_full={} primary_isolation={} volume={} | {}",
            self.core.replica_count,
            self.shards,
            self.partitions,
            self.partitions_max,
            self.producers,
            self.consumers,
            self.members,
            self.lurkers,
            self.connections_per_shard_max,
            self.sends_per_producer,
            self.retention.segment_size,
            self.retention.message_expiry_us,
            self.retention.max_topic_size,
            self.disk_full.map_or("none".to_string(), |full| format!(
                "n{}@{}+{}{}",
                full.node,
                full.from_tick,
                full.ticks,
                if full.room {
                    "+room"
                } else if full.unforeseen {
                    "+unforeseen"
                } else {
                    ""
                }
            )),
            self.primary_isolation
                .map_or("none".to_string(), |isolation| format!("{}/{}", isolation.ticks, isolation.every_ticks)),
            self.volume.name(),
            self.core
        )
    }
}
