//! Timeouts counted in ticks, each with seeded jitter so that replicas which started together do
//! not keep firing together. No wall clock: the driver's `tick` is the only notion of time.

use vireo_io::Io;

pub struct Timeout {
    after_ticks: u64,
    deadline_ticks: u64,
    ticks: u64,
    running: bool,
    /// Firings since the timeout was last started: the backoff exponent.
    pub attempts: u32,
    /// Whether the deadline doubles per firing (timeouts that retry something that keeps failing,
    /// like a view change) or stays (heartbeats, retransmissions).
    backoff: bool,
}

/// Backoff doubles the deadline per attempt, up to this factor.
const BACKOFF_FACTOR_MAX: u64 = 8;

impl Timeout {
    pub fn new(after_ticks: u64, backoff: bool) -> Timeout {
        assert!(after_ticks > 0);
        Timeout { after_ticks, deadline_ticks: after_ticks, ticks: 0, running: false, attempts: 0, backoff }
    }

    fn arm(&mut self, random: u64) {
        let backoff = if self.backoff { (1u64 << self.attempts.min(3)).min(BACKOFF_FACTOR_MAX) } else { 1 };
        let base = self.after_ticks * backoff;
        self.deadline_ticks = base + random % (base / 4 + 1);
        self.ticks = 0;
    }

    pub fn start(&mut self, io: &mut impl Io) {
        self.running = true;
        self.attempts = 0;
        self.arm(io.random());
    }

    pub fn stop(&mut self) {
        self.running = false;
        self.ticks = 0;
        self.attempts = 0;
    }

    /// Starts (if not running) or stops the timeout.
    pub fn set(&mut self, running: bool, io: &mut impl Io) {
        if running && !self.running {
            self.start(io);
        } else if !running {
            self.stop();
        }
    }

    /// Pushes the deadline back without forgetting the backoff.
    pub fn reset(&mut self) {
        self.ticks = 0;
    }

    /// Counts one tick; true when the timeout fires (it re-arms itself with backoff).
    pub fn tick(&mut self) -> bool {
        if !self.running {
            return false;
        }
        self.ticks += 1;
        if self.ticks < self.deadline_ticks {
            return false;
        }
        self.attempts = self.attempts.saturating_add(1);
        // Re-armed without fresh randomness (tick has no Io): the jitter is derived from the
        // previous deadline, still deterministic.
        let random = self.deadline_ticks.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 7;
        self.arm(random);
        true
    }
}
