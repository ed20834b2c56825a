//! The simulated network between replicas and clients: per-message loss, duplication and random
//! delay (which reorders), partitions (symmetric splits, one-way cuts, one replica isolated) and
//! clogged paths, all drawn from the run's seed.

use vireo_io::Peer;

use crate::rng::SimRng;
use crate::scenario::FaultRates;

pub struct Network {
    replica_count: usize,
    /// `blocked[from][to]`: replica-to-replica paths cut by the current partition.
    blocked: Vec<Vec<bool>>,
    partition_until_tick: u64,
    /// The tick at which the last partition ended of itself (0: none yet).
    pub partition_healed_tick: u64,
    /// (from, to, until_tick): paths whose messages are delayed.
    clogged: Vec<(u8, u8, u64)>,
    pub faults_enabled: bool,
    pub partitions: u64,
}

impl Network {
    pub fn new(replica_count: usize) -> Network {
        Network {
            replica_count,
            blocked: vec![vec![false; replica_count]; replica_count],
            partition_until_tick: 0,
            partition_healed_tick: 0,
            clogged: Vec::new(),
            faults_enabled: true,
            partitions: 0,
        }
    }

    /// Ends every partition and clog (the liveness phase).
    pub fn heal(&mut self) {
        for row in &mut self.blocked {
            row.iter_mut().for_each(|cut| *cut = false);
        }
        self.clogged.clear();
        self.faults_enabled = false;
    }

    /// Once per tick: partitions and clogs start and end.
    pub fn tick(&mut self, tick: u64, rng: &mut SimRng, rates: &FaultRates) {
        self.clogged.retain(|(_, _, until)| *until > tick);
        if !self.faults_enabled {
            return;
        }
        if self.partition_until_tick != 0 && tick >= self.partition_until_tick {
            self.heal_partition();
        }
        let n = self.replica_count;
        if n > 1 && self.partition_until_tick == 0 && rng.chance(rates.partition_ppm) {
            self.partitions += 1;
            match rng.below(3) {
                0 => {
                    // Symmetric: a random side against the rest.
                    let side: Vec<bool> = (0..n).map(|_| rng.below(2) == 0).collect();
                    for a in 0..n {
                        for b in 0..n {
                            self.blocked[a][b] = side[a] != side[b];
                        }
                    }
                }
                1 => {
                    // Asymmetric: some paths cut one way only.
                    for a in 0..n {
                        for b in 0..n {
                            self.blocked[a][b] = a != b && rng.below(3) == 0;
                        }
                    }
                }
                _ => {
                    // One replica isolated.
                    let isolated = rng.below(n as u64) as usize;
                    for other in 0..n {
                        if other != isolated {
                            self.blocked[isolated][other] = true;
                            self.blocked[other][isolated] = true;
                        }
                    }
                }
            }
            self.partition_until_tick = tick + rng.range(1, rates.partition_ticks_max.max(1));
        }
        if n > 1 && rng.chance(rates.clog_ppm) {
            let from = rng.below(n as u64) as u8;
            let to = rng.below(n as u64) as u8;
            self.clogged.push((from, to, tick + rng.range(10, 200)));
        }
    }

    /// Ends the partition in force (if any) at `tick` instead of when it was due.
    pub fn end_partition_at(&mut self, tick: u64) {
        if self.partition_until_tick > tick {
            self.partition_until_tick = tick;
        }
    }

    /// Cuts one replica off from every other until `until_tick` (unless a partition is on);
    /// whether it did.
    pub fn isolate(&mut self, isolated: u8, tick: u64, until_tick: u64) -> bool {
        if !self.faults_enabled || self.partition_until_tick != 0 || until_tick <= tick {
            return false;
        }
        self.partitions += 1;
        for other in 0..self.replica_count {
            if other != isolated as usize {
                self.blocked[isolated as usize][other] = true;
                self.blocked[other][isolated as usize] = true;
            }
        }
        self.partition_until_tick = until_tick;
        true
    }

    fn heal_partition(&mut self) {
        self.partition_healed_tick = self.partition_until_tick;
        for row in &mut self.blocked {
            row.iter_mut().for_each(|cut| *cut = false);
        }
        self.partition_until_tick = 0;
    }

    /// Whether the path from `from` to `to` is cut now: a message in flight on it when the cut
    /// came is lost with it, as a connection reset loses what it had not delivered.
    pub fn cut(&self, from: Peer, to: Peer) -> bool {
        match (from, to) {
            (Peer::Replica(a), Peer::Replica(b)) => self.blocked[a as usize][b as usize],
            _ => false,
        }
    }

    /// The delays (ns from now) at which copies of one message arrive: none if it is lost.
    pub fn route(&self, from: Peer, to: Peer, rng: &mut SimRng, rates: &FaultRates) -> Vec<u64> {
        if let (Peer::Replica(a), Peer::Replica(b)) = (from, to) {
            if self.blocked[a as usize][b as usize] {
                return Vec::new();
            }
        }
        if self.faults_enabled && rng.chance(rates.packet_loss_ppm) {
            return Vec::new();
        }
        let mut extra = 0;
        if let (Peer::Replica(a), Peer::Replica(b)) = (from, to) {
            if self.clogged.iter().any(|(x, y, _)| *x == a && *y == b) {
                extra = rates.clog_delay_ns;
            }
        }
        let mut delays = vec![rng.range(rates.network_delay_min_ns, rates.network_delay_max_ns) + extra];
        if self.faults_enabled && rng.chance(rates.packet_duplicate_ppm) {
            delays.push(rng.range(rates.network_delay_min_ns, rates.network_delay_max_ns * 2) + extra);
        }
        delays
    }
}
