//! `vireo-sim`: run one seed, sweep many, or replay a seed file.
//!
//! Exit codes: 0 pass, 127 panic or assertion, 128 liveness, 129 correctness (a sweep exits 1 if
//! any seed failed, 2 on bad arguments).

use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use clap::{Args, Parser, Subcommand};
use vireo_protocol::config::Bug;
use vireo_sim::run::{install_panic_hook, run_seed, run_traced, RunReport};
use vireo_sim::scenario::{FaultLevel, Overrides, Volume, Workload};
use vireo_sim::{planted, seeds};

#[derive(Parser)]
#[command(name = "vireo-sim", about = "Vireo's deterministic cluster simulator")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Args, Clone)]
struct OverrideArgs {
    /// What to run: `register` (the core replica) or `streaming` (whole streaming clusters).
    #[arg(long, value_parser = parse_workload, default_value = "register")]
    workload: Workload,
    /// Shards per node (1..=4, streaming workload) instead of the seed's draw.
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..=4))]
    shards: Option<u16>,
    /// Streaming: crash one node every this many ticks (10 ms each), round robin, restarting it
    /// a third of that later, instead of random crashes.
    #[arg(long)]
    rolling_restart_ticks: Option<u64>,
    /// Replica (node) count (1..=6; 1..=5 for streaming) instead of the seed's draw.
    #[arg(long, value_parser = clap::value_parser!(u8).range(1..=6))]
    replicas: Option<u8>,
    /// Client count (1..=8) instead of the seed's draw.
    #[arg(long, value_parser = clap::value_parser!(u8).range(1..=8))]
    clients: Option<u8>,
    /// Fault level: none, default or heavy, instead of the seed's draw.
    #[arg(long, value_parser = parse_faults)]
    faults: Option<FaultLevel>,
    /// Requests per client instead of the seed's draw.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    requests: Option<u64>,
    /// Streaming: `normal` (small batches, many prepares) or `large` (batches of up to 1,000
    /// messages of up to 64 KiB, 1 MiB segments, hundreds of MiB a run) instead of the seed's
    /// draw (one seed in 16 moves large batches, with its drawn retention scaled to them).
    #[arg(long, value_parser = parse_volume)]
    volume: Option<Volume>,
    /// Register workload: one crash in the run may lose the replica's disk whole; it restarts
    /// empty and rejoins.
    #[arg(long)]
    disk_loss: bool,
    /// Streaming: segment logs sync ten times slower than WALs in every seed (by default a third
    /// of the seeds).
    #[arg(long)]
    slow_segment_syncs: bool,
}

fn parse_volume(text: &str) -> Result<Volume, String> {
    Volume::parse(text).ok_or_else(|| format!("unknown volume {text:?}: expected normal or large"))
}

fn parse_workload(text: &str) -> Result<Workload, String> {
    Workload::parse(text).ok_or_else(|| format!("unknown workload {text:?}: expected register or streaming"))
}

fn parse_bug(text: &str) -> Result<Bug, String> {
    Bug::parse(text).ok_or_else(|| {
        let names: Vec<String> = Bug::ALL.iter().map(|bug| bug.name()).collect();
        format!("unknown bug {text:?}: expected one of {}", names.join(", "))
    })
}

fn parse_faults(text: &str) -> Result<FaultLevel, String> {
    FaultLevel::parse(text).ok_or_else(|| format!("unknown fault level {text:?}: expected none, default or heavy"))
}

impl OverrideArgs {
    fn overrides(&self) -> Overrides {
        Overrides {
            replicas: self.replicas,
            clients: self.clients,
            faults: self.faults,
            requests: self.requests,
            shards: self.shards,
            workload: self.workload,
            rolling_restart_ticks: self.rolling_restart_ticks,
            volume: self.volume,
            disk_loss: self.disk_loss,
            slow_segment_syncs: self.slow_segment_syncs,
        }
    }
}

#[derive(Subcommand)]
enum Command {
    /// Run one seed and print its scenario, outcome, speed and trace hash.
    Run {
        #[arg(long)]
        seed: u64,
        /// Print the run's readable trace (every replica message, commit and status change).
        #[arg(long)]
        trace: bool,
        /// Plant a deliberate bug (kebab case, as `sweep --bug` takes it).
        #[arg(long, value_parser = parse_bug)]
        bug: Option<Bug>,
        #[command(flatten)]
        overrides: OverrideArgs,
    },
    /// Run seeds start..start+seeds on every core; print each failure's replay command.
    Sweep {
        #[arg(long)]
        seeds: u64,
        #[arg(long, default_value_t = 0)]
        start: u64,
        /// Worker threads (default: all cores).
        #[arg(long)]
        jobs: Option<usize>,
        /// Plant a deliberate bug (kebab case: ack-before-durable, view-change-takes-longest-log,
        /// ...) and count the seeds that catch it: a failing seed is a catch.
        #[arg(long, value_parser = parse_bug)]
        bug: Option<Bug>,
        #[command(flatten)]
        overrides: OverrideArgs,
    },
    /// Replay a seed file from seeds/.
    Replay { file: std::path::PathBuf },
    /// Run every planted bug's window (`vireo_sim::planted`), or one bug's, whole, and print
    /// how many of its seeds catch it (a catch must pass without the bug).
    Planted {
        #[arg(long, value_parser = parse_bug)]
        bug: Option<Bug>,
        /// Worker threads, one bug's window each (default: all cores).
        #[arg(long)]
        jobs: Option<usize>,
    },
}

fn replay_command(seed: u64, overrides: &Overrides) -> String {
    format!("cargo run --release -p vireo-sim -- run --seed {seed}{}", overrides.arguments())
}

fn print_report(report: &RunReport) {
    println!(
        "outcome={} ticks={} simulated_s={:.1} events={} commits={} replies_checked={} crashes={} partitions={} disk_faults={}{}",
        if report.exit_code == 0 { "passed" } else { "failed" },
        report.ticks,
        report.simulated_ns as f64 / 1e9,
        report.events,
        report.commits,
        report.replies_checked,
        report.crashes,
        report.partitions,
        report.disk_faults,
        report.streaming.as_ref().map_or(String::new(), |figures| format!(" {figures}")),
    );
    if report.exit_code != 0 {
        println!("failure (exit {}): {}", report.exit_code, report.message);
    }
    println!(
        "speedup={:.0}x ticks_per_second={:.0} wall_s={:.3}",
        report.speedup(),
        report.ticks_per_second(),
        report.wall_seconds
    );
    println!("trace_hash={:016x}", report.trace_hash);
}

fn run_one(seed: u64, overrides: &Overrides, trace: bool, bug: Option<Bug>) -> ExitCode {
    println!("scenario {}", vireo_sim::run::describe(seed, overrides));
    let report = if trace { run_traced(seed, overrides, bug) } else { run_seed(seed, overrides, bug) };
    print_report(&report);
    if report.exit_code != 0 {
        eprintln!("replay: {}", replay_command(seed, overrides));
    }
    ExitCode::from(report.exit_code as u8)
}

fn sweep(seeds: u64, start: u64, jobs: Option<usize>, overrides: &Overrides, bug: Option<Bug>) -> ExitCode {
    let jobs = jobs.unwrap_or_else(|| std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)).max(1);
    let next = AtomicU64::new(0);
    let done = AtomicU64::new(0);
    let failures: Mutex<Vec<RunReport>> = Mutex::new(Vec::new());
    let started = Instant::now();
    eprintln!("sweeping seeds {start}..{} on {jobs} jobs", start + seeds);
    std::thread::scope(|scope| {
        for _ in 0..jobs {
            scope.spawn(|| loop {
                let index = next.fetch_add(1, Ordering::Relaxed);
                if index >= seeds {
                    break;
                }
                let seed = start + index;
                let report = run_seed(seed, overrides, bug);
                if report.exit_code != 0 && bug.is_some() {
                    eprintln!("CAUGHT seed {seed} exit {}: {}", report.exit_code, report.message);
                    failures.lock().expect("no poisoning: workers catch panics").push(report);
                } else if report.exit_code != 0 {
                    eprintln!(
                        "FAIL seed {seed} exit {}: {}\n  scenario {}\n  replay: {}",
                        report.exit_code,
                        report.message,
                        report.scenario,
                        replay_command(seed, overrides)
                    );
                    failures.lock().expect("no poisoning: workers catch panics").push(report);
                }
                let finished = done.fetch_add(1, Ordering::Relaxed) + 1;
                if finished.is_multiple_of(100) || finished == seeds {
                    let failed = failures.lock().expect("no poisoning").len();
                    eprintln!("{finished}/{seeds} seeds, {failed} failed, {:.0}s", started.elapsed().as_secs_f64());
                }
            });
        }
    });
    let failures = failures.into_inner().expect("no poisoning");
    for report in &failures {
        println!(
            "failed seed {} (exit {}): replay with: {}",
            report.seed,
            report.exit_code,
            replay_command(report.seed, overrides)
        );
    }
    println!("wall_s={:.1}", started.elapsed().as_secs_f64());
    if let Some(bug) = bug {
        let caught = failures.len() as f64 * 100.0 / seeds.max(1) as f64;
        println!("{} caught by {} of {seeds} seeds ({caught:.1}%)", bug.name(), failures.len());
        return ExitCode::SUCCESS;
    }
    println!("{} passed, {} failed", seeds - failures.len() as u64, failures.len());
    if failures.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

fn planted(only: Option<Bug>, jobs: Option<usize>) -> ExitCode {
    let bugs: Vec<Bug> = only.map_or_else(|| Bug::ALL.to_vec(), |bug| vec![bug]);
    let jobs = jobs.unwrap_or_else(|| std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)).max(1);
    let next = AtomicU64::new(0);
    let blind = AtomicU64::new(0);
    let started = Instant::now();
    std::thread::scope(|scope| {
        for _ in 0..jobs {
            scope.spawn(|| loop {
                let at = next.fetch_add(1, Ordering::Relaxed) as usize;
                let Some(&bug) = bugs.get(at) else { break };
                let run = planted::run_window(bug, None);
                let caught = run.catches.len();
                let blind_spot = planted::blind_spot(bug);
                if (caught < planted::CATCHES_MIN) != blind_spot.is_some() || !run.failing_without_bug.is_empty() {
                    blind.fetch_add(1, Ordering::Relaxed);
                }
                let first: Vec<u64> = run.catches.iter().take(5).map(|catch| catch.seed).collect();
                println!(
                    "{:<30} caught by {caught:>3} of {} seeds ({:.1}%), first {first:?}: {}",
                    bug.name(),
                    run.seeds_run,
                    caught as f64 * 100.0 / run.seeds_run.max(1) as f64,
                    planted::window(bug).command(bug)
                );
                if let Some(why) = blind_spot {
                    println!("  a known blind spot: {why}");
                }
                for clean in &run.failing_without_bug {
                    println!("  seed {} fails without the bug too: {}", clean.seed, clean.message);
                }
            });
        }
    });
    println!("wall_s={:.1}", started.elapsed().as_secs_f64());
    if blind.load(Ordering::Relaxed) == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

fn main() -> ExitCode {
    install_panic_hook();
    let cli = Cli::parse();
    match cli.command {
        Command::Run { seed, trace, bug, overrides } => run_one(seed, &overrides.overrides(), trace, bug),
        Command::Sweep { seeds, start, jobs, bug, overrides } => sweep(seeds, start, jobs, &overrides.overrides(), bug),
        Command::Planted { bug, jobs } => planted(bug, jobs),
        Command::Replay { file } => {
            let text = match std::fs::read_to_string(&file) {
                Ok(text) => text,
                Err(error) => {
                    eprintln!("cannot read {}: {error}", file.display());
                    return ExitCode::from(2);
                }
            };
            let seed_file = match seeds::parse(&text) {
                Ok(seed_file) => seed_file,
                Err(error) => {
                    eprintln!("{}: {error}", file.display());
                    return ExitCode::from(2);
                }
            };
            println!("replaying {} ({})", file.display(), seed_file.bug);
            run_one(seed_file.seed, &seed_file.overrides, false, None)
        }
    }
}
