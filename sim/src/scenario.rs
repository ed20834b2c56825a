//! A run's scenario, drawn from its seed (swarm testing: every seed gets its own cluster shape and
//! its own mix of fault rates), unless the command line overrides part of it.

use std::fmt;

use crate::rng::SimRng;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FaultLevel {
    None,
    Default,
    Heavy,
}

impl FaultLevel {
    pub fn parse(text: &str) -> Option<FaultLevel> {
        match text {
            "none" => Some(FaultLevel::None),
            "default" => Some(FaultLevel::Default),
            "heavy" => Some(FaultLevel::Heavy),
            _ => None,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            FaultLevel::None => "none",
            FaultLevel::Default => "default",
            FaultLevel::Heavy => "heavy",
        }
    }
}

/// What a run exercises: the core replica with its register log, or whole streaming clusters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Workload {
    #[default]
    Register,
    Streaming,
}

impl Workload {
    pub fn parse(text: &str) -> Option<Workload> {
        match text {
            "register" => Some(Workload::Register),
            "streaming" => Some(Workload::Streaming),
            _ => None,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            Workload::Register => "register",
            Workload::Streaming => "streaming",
        }
    }
}

/// What the command line may fix instead of letting the seed draw it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Overrides {
    pub replicas: Option<u8>,
    pub clients: Option<u8>,
    pub faults: Option<FaultLevel>,
    pub requests: Option<u64>,
    /// Shards per node (the streaming workload).
    pub shards: Option<u16>,
    pub workload: Workload,
    /// Streaming: crash one node every this many ticks of the safety phase, round robin, and
    /// restart it a third of that later (instead of random crashes).
    pub rolling_restart_ticks: Option<u64>,
    /// Streaming: how much data the run moves (by default drawn from the seed: one run in 16
    /// moves large batches).
    pub volume: Option<Volume>,
    /// Register workload: one crash in the run (of a replica whose disk takes no other faults,
    /// when the fault budget has room) loses the replica's disk whole; it restarts empty and
    /// rejoins (`Config::rejoin_guard`).
    pub disk_loss: bool,
    /// Streaming: segment logs sync ten times slower than WALs in every seed (instead of a third
    /// of them): a WAL that does not wait for its log shows.
    pub slow_segment_syncs: bool,
}

/// How much data a streaming run moves.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Volume {
    /// Batches of 1 to 200 messages of at most 256 bytes, 8 KB a batch: many small prepares.
    #[default]
    Normal,
    /// Batches of 1 to 1,000 messages of up to 64 KiB, 1 MiB a batch, in 1 MiB segments: what
    /// the bytes cost on disk (`disk_bytes_written` against `segment_bytes`).
    Large,
}

impl Volume {
    pub fn parse(text: &str) -> Option<Volume> {
        match text {
            "normal" => Some(Volume::Normal),
            "large" => Some(Volume::Large),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Volume::Normal => "normal",
            Volume::Large => "large",
        }
    }

    /// Messages one batch holds at most.
    pub fn batch_messages_max(self) -> u32 {
        match self {
            Volume::Normal => 200,
            Volume::Large => 1000,
        }
    }

    /// Payload bytes one batch holds at most, and one message.
    pub fn batch_payload_bytes_max(self) -> usize {
        match self {
            Volume::Normal => 8000,
            Volume::Large => 1 << 20,
        }
    }

    pub fn message_payload_bytes_max(self) -> usize {
        match self {
            Volume::Normal => 256,
            Volume::Large => 64 << 10,
        }
    }

    /// The groups' prepare limit: one batch and its request headers, with room for a few more.
    pub fn prepare_size_max(self) -> u64 {
        match self {
            Volume::Normal => 16 * 1024,
            Volume::Large => 2 << 20,
        }
    }
}

impl Overrides {
    /// The command-line words that reproduce these overrides.
    pub fn arguments(&self) -> String {
        let mut words = String::new();
        if self.workload != Workload::Register {
            words.push_str(&format!(" --workload {}", self.workload.name()));
        }
        if let Some(replicas) = self.replicas {
            words.push_str(&format!(" --replicas {replicas}"));
        }
        if let Some(clients) = self.clients {
            words.push_str(&format!(" --clients {clients}"));
        }
        if let Some(faults) = self.faults {
            words.push_str(&format!(" --faults {}", faults.name()));
        }
        if let Some(requests) = self.requests {
            words.push_str(&format!(" --requests {requests}"));
        }
        if let Some(ticks) = self.rolling_restart_ticks {
            words.push_str(&format!(" --rolling-restart-ticks {ticks}"));
        }
        if let Some(shards) = self.shards {
            words.push_str(&format!(" --shards {shards}"));
        }
        if let Some(volume) = self.volume {
            words.push_str(&format!(" --volume {}", volume.name()));
        }
        if self.disk_loss {
            words.push_str(" --disk-loss");
        }
        if self.slow_segment_syncs {
            words.push_str(" --slow-segment-syncs");
        }
        words
    }
}

/// Every fault rate of a run. Probabilities in ppm, durations in ticks, latencies in ns.
#[derive(Clone, Debug)]
pub struct FaultRates {
    pub packet_loss_ppm: u32,
    pub packet_duplicate_ppm: u32,
    pub network_delay_min_ns: u64,
    pub network_delay_max_ns: u64,
    /// Per tick: a new partition (symmetric, asymmetric or one node isolated) starts.
    pub partition_ppm: u32,
    pub partition_ticks_max: u64,
    /// Per tick: one path is clogged (every message on it delayed) for a while.
    pub clog_ppm: u32,
    pub clog_delay_ns: u64,
    /// Per event a replica handles: it crashes right after.
    pub crash_ppm: u32,
    /// Added to `crash_ppm` while the replica's disk has writes in flight: crashes in the middle
    /// of writes, where bugs in durability ordering (acknowledging, committing or truncating
    /// before a write lands) show.
    pub crash_in_write_ppm: u32,
    /// When a replica crashes, another one crashes with it (a shared power feed): a primary and
    /// a backup down at once is when a view change must rebuild the log from what is durable.
    pub crash_pair_ppm: u32,
    /// When a partition ends, the primary crashes: the view change that follows meets the
    /// replicas that were cut off, with whatever stale logs they kept (from the seed).
    pub crash_primary_on_heal_ppm: u32,
    pub restart_ticks_min: u64,
    pub restart_ticks_max: u64,
    /// Replicas whose disks take faults: at most quorum_replication - 1 of them.
    pub faulty_disks: u8,
    /// The other replicas' partition files (never their WAL) take faults too.
    pub partition_rot: bool,
    pub write_corruption_ppm: u32,
    pub misdirected_write_ppm: u32,
    pub latent_sector_ppm: u32,
    pub read_corruption_ppm: u32,
    /// Per I/O: the disk is slow for this one (x20 latency).
    pub slow_disk_ppm: u32,
    /// Segment-file syncs take this many times longer than others (a partition's segment log on
    /// a slower device than its WAL): from the seed, not the RNG.
    pub segment_sync_factor: u64,
    /// Per write or sync of a faulty disk's WAL: the device reports an error (EIO). A failed
    /// sync loses the writes it was to make durable (as Linux drops dirty pages on an fsync
    /// error); the replica must stop and recover from what is durable.
    pub wal_error_ppm: u32,
}

/// Mixed into the seed for draws made from it rather than from the RNG.
const CRASH_IN_WRITE_SALT: u64 = 0x6372_6173_6877_7269;
const PARTITION_ROT_SALT: u64 = 0x7061_7274_726f_7421;
const CRASH_PAIR_SALT: u64 = 0x7061_6972_6564_2121;
const CHUNK_SALT: u64 = 0x6368_756e_6b73_2121;
const HEAL_CRASH_SALT: u64 = 0x6865_616c_6372_6173;
const DURABILITY_SALT: u64 = 0x6673_796e_6321_2121;

/// Bytes of a checkpoint one state-transfer message carries, per seed: small in most runs, so
/// that a replica that falls behind assembles its checkpoint from many chunks.
const CHECKPOINT_CHUNK_BYTES: [u64; 4] = [16 << 10, 64 << 10, 256 << 10, 1 << 20];

impl FaultRates {
    /// No faults at all, and a quick, quiet network.
    pub fn none() -> FaultRates {
        FaultRates {
            packet_loss_ppm: 0,
            packet_duplicate_ppm: 0,
            network_delay_min_ns: 50_000,
            network_delay_max_ns: 1_000_000,
            partition_ppm: 0,
            partition_ticks_max: 0,
            clog_ppm: 0,
            clog_delay_ns: 0,
            crash_ppm: 0,
            crash_in_write_ppm: 0,
            crash_pair_ppm: 0,
            crash_primary_on_heal_ppm: 0,
            restart_ticks_min: 0,
            restart_ticks_max: 0,
            faulty_disks: 0,
            partition_rot: false,
            write_corruption_ppm: 0,
            misdirected_write_ppm: 0,
            latent_sector_ppm: 0,
            read_corruption_ppm: 0,
            slow_disk_ppm: 0,
            segment_sync_factor: 1,
            wal_error_ppm: 0,
        }
    }
}

#[derive(Clone, Debug)]
pub struct Scenario {
    pub seed: u64,
    pub fault_level: FaultLevel,
    pub replica_count: u8,
    pub client_count: u8,
    pub requests_per_client: u64,
    pub journal_slots: u64,
    pub prepare_queue_max: usize,
    pub clients_max: usize,
    pub safety_ticks: u64,
    pub liveness_ticks_max: u64,
    pub faults: FaultRates,
    /// `Config::checkpoint_chunk_bytes` (from the seed, not the RNG).
    pub checkpoint_chunk_bytes: u64,
    /// The durability mode (`Config::sync_writes`, a topic's `enforce_fsync`): enforced, crashes
    /// are power losses (unsynced writes may go); not enforced (a third of the seeds), crashes
    /// kill the process and what completed stays, which is all that mode promises.
    pub enforce_fsync: bool,
    /// One crash may lose the replica's whole disk (`Overrides::disk_loss`).
    pub disk_loss: bool,
}

impl Scenario {
    pub fn draw(seed: u64, overrides: &Overrides, rng: &mut SimRng) -> Scenario {
        let replica_count = rng.range(1, 6) as u8;
        let replica_count = overrides.replicas.unwrap_or(replica_count);
        let client_count = overrides.clients.unwrap_or(rng.range(1, 8) as u8);
        let level = match rng.below(10) {
            0 => FaultLevel::None,
            1..=6 => FaultLevel::Default,
            _ => FaultLevel::Heavy,
        };
        let fault_level = overrides.faults.unwrap_or(level);
        let journal_slots = *rng.pick(&[32u64, 64, 128, 1024]);
        let prepare_queue_max = rng.range(1, 8) as usize;
        // Sometimes fewer sessions than clients: eviction is part of the protocol too.
        let clients_max = if rng.chance(200_000) && client_count > 1 {
            client_count as usize - 1
        } else {
            rng.range(client_count as u64, 16) as usize
        };
        let requests_per_client = overrides.requests.unwrap_or(rng.range(50, 300));
        let quorum_replication = {
            let config = vireo_protocol::Config::new(0, replica_count.max(1));
            config.quorum_replication() as u8
        };
        let heavy = fault_level == FaultLevel::Heavy;
        let faults = match fault_level {
            FaultLevel::None => FaultRates::none(),
            FaultLevel::Default | FaultLevel::Heavy => {
                let scale = if heavy { 4 } else { 1 };
                FaultRates {
                    packet_loss_ppm: rng.range(0, 20_000) as u32 * scale,
                    packet_duplicate_ppm: rng.range(0, 10_000) as u32 * scale,
                    network_delay_min_ns: 50_000,
                    network_delay_max_ns: rng.range(1_000_000, 20_000_000),
                    partition_ppm: rng.range(0, 2_000) as u32 * scale,
                    partition_ticks_max: rng.range(50, 500),
                    clog_ppm: rng.range(0, 2_000) as u32 * scale,
                    clog_delay_ns: rng.range(10_000_000, 200_000_000),
                    crash_ppm: rng.range(0, 400) as u32 * scale,
                    // From the seed, not the RNG (as `wal_error_ppm`).
                    crash_in_write_ppm: (vireo_storage::checksum::checksum64(
                        &(seed ^ CRASH_IN_WRITE_SALT).to_le_bytes(),
                    ) % 2_000) as u32
                        * scale,
                    crash_pair_ppm: (vireo_storage::checksum::checksum64(&(seed ^ CRASH_PAIR_SALT).to_le_bytes())
                        % 150_000) as u32
                        * scale,
                    crash_primary_on_heal_ppm: (vireo_storage::checksum::checksum64(
                        &(seed ^ HEAL_CRASH_SALT).to_le_bytes(),
                    ) % 1_000_000) as u32,
                    restart_ticks_min: 10,
                    restart_ticks_max: rng.range(50, 600),
                    // Heavy faults always damage a disk where the cluster can repair one.
                    faulty_disks: (rng.range(0, quorum_replication as u64 - 1) as u8)
                        .max(u8::from(heavy && quorum_replication > 1)),
                    // Partition files rot on every other disk too (a single node's included) in
                    // half the seeds: with no peer to repair from, the log must lose at most the
                    // batch hit, and say so. From the seed, not the RNG (as `wal_error_ppm`).
                    partition_rot: vireo_storage::checksum::checksum64(&(seed ^ PARTITION_ROT_SALT).to_le_bytes())
                        .is_multiple_of(2),
                    write_corruption_ppm: rng.range(0, 20_000) as u32 * scale,
                    segment_sync_factor: 1,
                    misdirected_write_ppm: rng.range(0, 10_000) as u32 * scale,
                    latent_sector_ppm: rng.range(0, 10_000) as u32 * scale,
                    read_corruption_ppm: rng.range(0, 10_000) as u32 * scale,
                    slow_disk_ppm: rng.range(0, 10_000) as u32,
                    // From the seed, not the RNG: every recorded seed replays its draws as found.
                    wal_error_ppm: (vireo_storage::checksum::checksum64(&seed.to_le_bytes()) % 2_000) as u32 * scale,
                }
            }
        };
        Scenario {
            seed,
            fault_level,
            replica_count,
            client_count,
            requests_per_client,
            journal_slots,
            prepare_queue_max,
            clients_max,
            safety_ticks: rng.range(2_000, 8_000),
            liveness_ticks_max: 6_000,
            faults,
            checkpoint_chunk_bytes: CHECKPOINT_CHUNK_BYTES
                [(vireo_storage::checksum::checksum64(&(seed ^ CHUNK_SALT).to_le_bytes()) % 4) as usize],
            enforce_fsync: !vireo_storage::checksum::checksum64(&(seed ^ DURABILITY_SALT).to_le_bytes())
                .is_multiple_of(3),
            disk_loss: overrides.disk_loss,
        }
    }
}

impl fmt::Display for Scenario {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let faults = &self.faults;
        write!(
            f,
            "seed={} replicas={} clients={} requests_per_client={} journal_slots={} prepare_queue_max={} \
             clients_max={} safety_ticks={} faults={} loss_ppm={} duplicate_ppm={} delay_max_us={} \
             partition_ppm={} clog_ppm={} crash_ppm={} faulty_disks={} write_corruption_ppm={} \
             misdirect_ppm={} latent_ppm={} read_corruption_ppm={} enforce_fsync={}{}",
            self.seed,
            self.replica_count,
            self.client_count,
            self.requests_per_client,
            self.journal_slots,
            self.prepare_queue_max,
            self.clients_max,
            self.safety_ticks,
            self.fault_level.name(),
            faults.packet_loss_ppm,
            faults.packet_duplicate_ppm,
            faults.network_delay_max_ns / 1000,
            faults.partition_ppm,
            faults.clog_ppm,
            faults.crash_ppm,
            faults.faulty_disks,
            faults.write_corruption_ppm,
            faults.misdirected_write_ppm,
            faults.latent_sector_ppm,
            faults.read_corruption_ppm,
            self.enforce_fsync,
            if self.disk_loss { " disk_loss=true" } else { "" },
        )
    }
}
