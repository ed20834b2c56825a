//! `vireo-bench`: the reference bench's workloads (pinned producer and consumer, balanced
//! producer, balanced consumer group, end-to-end producing consumer) against any server that
//! speaks the Iggy 0.9 TCP protocol, on glommio and the project's own codec. Actors (one
//! connection each) are spread over one executor per client thread; a progress line goes to
//! stderr while they run; the table (or `--json`) goes to stdout at the end.

mod args;
mod client;
mod report;
mod workload;

use std::process::ExitCode;
use std::rc::Rc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;

use args::Cli;
use report::{ActorRecord, Report};
use workload::{RunShared, Setup};

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(reason) => {
            eprintln!("vireo-bench: {reason}");
            ExitCode::FAILURE
        }
    }
}

fn executor(name: String) -> glommio::LocalExecutorBuilder {
    glommio::LocalExecutorBuilder::new(glommio::Placement::Unbound).name(&name)
}

fn run(cli: Cli) -> Result<(), String> {
    let plan = workload::plan(&cli)?;
    let (address, nodelay) = cli.tcp();
    let cli = Arc::new(cli);
    {
        let (cli, address, setup): (Arc<Cli>, String, Setup) = (cli.clone(), address.clone(), plan.setup.clone());
        executor("vireo-bench-setup".into())
            .spawn(move || async move { workload::set_up(&cli, &address, nodelay, &setup).await })
            .map_err(|error| format!("cannot start a glommio executor: {error}"))?
            .join()
            .map_err(|error| format!("the setup's executor failed: {error}"))??;
    }
    let cores = std::thread::available_parallelism().map_or(1, |cores| cores.get());
    let threads = (cli.threads.map_or(cores, |threads| threads as usize)).clamp(1, plan.actors.len());
    let shared = Arc::new(RunShared {
        start: Instant::now(),
        progress: Default::default(),
        ready: Default::default(),
        actors: plan.actors.len(),
    });
    let finished_threads = Arc::new(AtomicUsize::new(0));
    let mut handles = Vec::new();
    for thread in 0..threads {
        let actors: Vec<_> = plan.actors.iter().skip(thread).step_by(threads).cloned().collect();
        let (cli, address, shared, finished) = (cli.clone(), address.clone(), shared.clone(), finished_threads.clone());
        let handle = executor(format!("vireo-bench-{thread}"))
            .spawn(move || async move {
                let address = Rc::new(address);
                let tasks: Vec<_> = actors
                    .into_iter()
                    .map(|actor| {
                        glommio::spawn_local(workload::run_actor(
                            cli.clone(),
                            address.clone(),
                            nodelay,
                            actor,
                            shared.clone(),
                        ))
                    })
                    .collect();
                let mut records = Vec::new();
                for task in tasks {
                    records.push(task.await);
                }
                finished.fetch_add(1, Ordering::SeqCst);
                records
            })
            .map_err(|error| format!("cannot start a glommio executor: {error}"))?;
        handles.push(handle);
    }
    watch(&cli, &shared, &finished_threads, threads, plan.expected_bytes)?;
    let mut records: Vec<ActorRecord> = Vec::new();
    let mut failures = Vec::new();
    for handle in handles {
        let results = handle.join().map_err(|error| format!("a client thread failed: {error}"))?;
        for result in results {
            match result {
                Ok(record) => records.push(record),
                Err(reason) => failures.push(reason),
            }
        }
    }
    if !failures.is_empty() {
        return Err(failures.join("; "));
    }
    records.sort_by_key(|record| record.id);
    let report = Report::new(cli.kind.name(), address, cli.message_size, cli.messages_per_batch, &records);
    if cli.json {
        println!("{}", serde_json::to_string_pretty(&report.json()).expect("a JSON value prints"));
    } else {
        print!("{}", report.table());
    }
    Ok(())
}

/// The progress line, once a second, until every client thread is done; a run in which no
/// actor moves a byte for `--stall-timeout` seconds is ended with an error.
fn watch(
    cli: &Cli,
    shared: &RunShared,
    finished_threads: &AtomicUsize,
    threads: usize,
    expected_bytes: u64,
) -> Result<(), String> {
    let stall = Duration::from_secs(cli.stall_timeout);
    let (mut last_bytes, mut last_change, mut last_line) = (0u64, Instant::now(), Instant::now());
    let mut printed = false;
    while finished_threads.load(Ordering::SeqCst) < threads {
        std::thread::sleep(Duration::from_millis(50));
        let bytes = shared.progress.load(Ordering::Relaxed);
        if bytes != last_bytes {
            (last_bytes, last_change) = (bytes, Instant::now());
        } else if last_change.elapsed() > stall {
            if printed {
                eprintln!();
            }
            return Err(format!(
                "no progress for {} s at {:.1} of {:.1} MB (a consumer waiting for data no one wrote, or a server that stopped answering)",
                cli.stall_timeout,
                bytes as f64 / 1e6,
                expected_bytes as f64 / 1e6
            ));
        }
        if last_line.elapsed() >= Duration::from_secs(1) {
            last_line = Instant::now();
            let seconds = shared.start.elapsed().as_secs_f64();
            eprint!(
                "\r{:>7.1} s  {:>9.1} of {:.1} MB  {:>8.1} MB/s ",
                seconds,
                bytes as f64 / 1e6,
                expected_bytes as f64 / 1e6,
                bytes as f64 / 1e6 / seconds.max(1e-9)
            );
            printed = true;
        }
    }
    if printed {
        eprintln!();
    }
    Ok(())
}
