//! One simulator run from a seed, with its result, timing and exit code; panics (a replica's
//! assertion) are caught and become exit code 127.

use std::cell::RefCell;
use std::panic::{self, AssertUnwindSafe};
use std::time::Instant;

use vireo_io::TICK_NS;
use vireo_protocol::config::Bug;

use crate::cluster::{Cluster, Outcome};
use crate::rng::SimRng;
use crate::scenario::{Overrides, Scenario, Workload};
use crate::streaming::{StreamingCluster, StreamingScenario};

pub const EXIT_PANIC: i32 = 127;

#[derive(Clone, Debug)]
pub struct RunReport {
    pub seed: u64,
    pub scenario: String,
    /// 0 pass, 127 panic or assertion, 128 liveness, 129 correctness.
    pub exit_code: i32,
    pub message: String,
    pub trace_hash: u64,
    pub simulated_ns: u64,
    pub wall_seconds: f64,
    pub ticks: u64,
    pub events: u64,
    pub commits: u64,
    pub replies_checked: u64,
    pub crashes: u64,
    pub disk_faults: u64,
    pub partitions: u64,
    /// The streaming workload's figures (messages and bytes acknowledged and polled, drops).
    pub streaming: Option<String>,
}

impl RunReport {
    pub fn speedup(&self) -> f64 {
        self.simulated_ns as f64 / 1e9 / self.wall_seconds.max(1e-9)
    }

    pub fn ticks_per_second(&self) -> f64 {
        self.ticks as f64 / self.wall_seconds.max(1e-9)
    }
}

thread_local! {
    static PANIC_MESSAGE: RefCell<Option<String>> = const { RefCell::new(None) };
    static IN_SIMULATION: RefCell<bool> = const { RefCell::new(false) };
}

/// Keeps a simulated replica's panic off the terminal (a sweep runs thousands of seeds) and
/// remembers its message and location for the report; any other panic prints as usual.
pub fn install_panic_hook() {
    let default = panic::take_hook();
    panic::set_hook(Box::new(move |info| {
        if !IN_SIMULATION.with(|flag| *flag.borrow()) {
            default(info);
            return;
        }
        let payload = info
            .payload()
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| info.payload().downcast_ref::<&str>().map(|text| text.to_string()))
            .unwrap_or_else(|| "panic".to_string());
        let location = info.location().map(|at| format!(" at {}:{}", at.file(), at.line())).unwrap_or_default();
        PANIC_MESSAGE.with(|message| *message.borrow_mut() = Some(format!("{payload}{location}")));
    }));
}

pub fn scenario_for(seed: u64, overrides: &Overrides) -> (Scenario, SimRng) {
    let mut rng = SimRng::new(seed);
    let scenario = Scenario::draw(seed, overrides, &mut rng);
    (scenario, rng)
}

pub fn run_seed(seed: u64, overrides: &Overrides, bug: Option<Bug>) -> RunReport {
    run_with(seed, overrides, bug, false)
}

/// Like `run_seed`, printing the readable trace to stdout as it goes.
pub fn run_traced(seed: u64, overrides: &Overrides, bug: Option<Bug>) -> RunReport {
    run_with(seed, overrides, bug, true)
}

fn run_with(seed: u64, overrides: &Overrides, bug: Option<Bug>, trace: bool) -> RunReport {
    let (scenario, rng) = scenario_for(seed, overrides);
    let description = scenario.to_string();
    let started = Instant::now();
    let mut report = RunReport {
        seed,
        scenario: description,
        exit_code: 0,
        message: String::new(),
        trace_hash: 0,
        simulated_ns: 0,
        wall_seconds: 0.0,
        ticks: 0,
        events: 0,
        commits: 0,
        replies_checked: 0,
        crashes: 0,
        disk_faults: 0,
        partitions: 0,
        streaming: None,
    };
    if overrides.workload == Workload::Streaming {
        return run_streaming(seed, overrides, bug, trace, report);
    }
    let mut cluster = None;
    run_caught(&mut report, started, || {
        let built = cluster.insert(Cluster::new(scenario, rng, bug));
        if trace {
            built.enable_trace();
            built.print_trace();
        }
        built.run()
    });
    if let Some(cluster) = &cluster {
        report.trace_hash = cluster.trace_hash();
        report.simulated_ns = cluster.tick * TICK_NS;
        report.ticks = cluster.tick;
        report.events = cluster.events_processed;
        report.commits = cluster.checker.history_len();
        report.replies_checked = cluster.checker.replies_checked;
        report.crashes = cluster.crashes();
        report.disk_faults = cluster.disk_faults();
        report.partitions = cluster.partitions();
    }
    report
}

/// Runs a simulation with its panics caught (a replica's assertion is exit code 127) and fills
/// in the report's outcome and wall time.
fn run_caught(report: &mut RunReport, started: Instant, simulation: impl FnOnce() -> Outcome) {
    IN_SIMULATION.with(|flag| *flag.borrow_mut() = true);
    let result = panic::catch_unwind(AssertUnwindSafe(simulation));
    IN_SIMULATION.with(|flag| *flag.borrow_mut() = false);
    report.wall_seconds = started.elapsed().as_secs_f64();
    match result {
        Ok(outcome) => {
            report.exit_code = outcome.exit_code();
            report.message = match outcome {
                Outcome::Passed => "passed".to_string(),
                Outcome::Liveness(message) | Outcome::Correctness(message) => message,
            };
        }
        Err(_) => {
            report.exit_code = EXIT_PANIC;
            report.message =
                PANIC_MESSAGE.with(|message| message.borrow_mut().take()).unwrap_or_else(|| "panic".to_string());
        }
    }
}

/// The scenario line a run prints.
pub fn describe(seed: u64, overrides: &Overrides) -> String {
    match overrides.workload {
        Workload::Register => scenario_for(seed, overrides).0.to_string(),
        Workload::Streaming => {
            let mut rng = SimRng::new(seed);
            StreamingScenario::draw(seed, overrides, &mut rng).to_string()
        }
    }
}

fn run_streaming(seed: u64, overrides: &Overrides, bug: Option<Bug>, trace: bool, mut report: RunReport) -> RunReport {
    let mut rng = SimRng::new(seed);
    let scenario = StreamingScenario::draw(seed, overrides, &mut rng);
    report.scenario = scenario.to_string();
    let started = Instant::now();
    let mut cluster = None;
    run_caught(&mut report, started, || {
        let built = cluster.insert(StreamingCluster::new(scenario, rng, bug));
        if trace {
            built.enable_trace();
            built.print_trace();
        }
        built.run()
    });
    if let Some(cluster) = &cluster {
        report.trace_hash = cluster.trace_hash();
        report.simulated_ns = cluster.tick * TICK_NS;
        report.ticks = cluster.tick;
        report.events = cluster.events_processed;
        report.crashes = cluster.crashes();
        report.disk_faults = cluster.disk_faults();
        report.partitions = cluster.partitions();
        let counters = cluster.counters;
        let seconds = (cluster.tick * TICK_NS) as f64 / 1e9;
        report.streaming = Some(format!(
            "messages_acked={} bytes_acked={} messages_polled={} acked_per_sim_s={:.0} acked_bytes_per_sim_s={:.0} \
             indeterminate={} sends_pipelined={} churn_values_checked={} channel_full_drops={} denials={} assignments_checked={} connections={} \
             connections_refused={} logins={} sessions_opened={} sessions_ended={} incarnations_wiped={} \
             replicas_superseded={} polls_read_locally={} fail_stops={} state_transfers={} checkpoint_chunks={} \
             segments_retained_away={} messages_retained_away={} segments_sealed={} segment_bytes={} \
             disk_bytes_written={} wal_bytes_written={} writes_refused_full={} sends_refused_disk_low={} cuts_for_no_space={} requests_refused_no_space={} requests_prepared_again={} polls_while_disk_low={} segment_logs_cut={} \
             polls_from_log={} polls_cut={} poll_replies_dropped={} fetches_sent={} batches_fetched={} \
             segment_logs_dropped={} segment_log_failures={} batches_speculated={} tail_cuts={} runs_repaired={} \
             prepares_filled={} prepares_unfilled={} reads_answered={} names_checked={} power_cuts_before_sync={} primaries_isolated={} \
             prepares_elided={} prepares_rebuilt={} elided_missed={}",
            counters.messages_acked,
            counters.bytes_acked,
            counters.messages_polled,
            counters.messages_acked as f64 / seconds.max(1e-9),
            counters.bytes_acked as f64 / seconds.max(1e-9),
            counters.sends_indeterminate,
            counters.sends_pipelined,
            counters.churn_values_checked,
            counters.channel_full_drops,
            counters.denials,
            counters.assignments_checked,
            counters.connections,
            counters.connections_refused,
            counters.logins,
            counters.sessions_opened,
            counters.sessions_ended,
            counters.incarnations_wiped,
            counters.replicas_superseded,
            counters.polls_read_locally,
            counters.fail_stops,
            counters.state_transfers,
            counters.checkpoint_chunks,
            counters.segments_retained_away,
            counters.messages_retained_away,
            counters.segments_sealed,
            counters.segment_bytes,
            counters.disk_bytes_written,
            counters.wal_bytes_written,
            counters.writes_refused_full,
            counters.sends_refused_disk_low,
            counters.cuts_for_no_space,
            counters.requests_refused_no_space,
            counters.requests_prepared_again,
            counters.polls_while_disk_low,
            counters.segment_logs_cut,
            counters.polls_from_log,
            counters.polls_cut,
            counters.poll_replies_dropped,
            counters.fetches_sent,
            counters.batches_fetched,
            counters.segment_logs_dropped,
            counters.segment_log_failures,
            counters.batches_speculated,
            counters.tail_cuts,
            counters.runs_repaired,
            counters.prepares_filled,
            counters.prepares_unfilled,
            cluster.access.summary.reads_answered,
            cluster.access.summary.names_checked,
            counters.power_cuts_before_sync,
            counters.primaries_isolated,
            counters.prepares_elided,
            counters.prepares_rebuilt,
            counters.elided_missed,
        ));
    }
    report
}
