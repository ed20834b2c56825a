//! `vireo-storage-bench`: partition logs through the glommio driver on a real directory.
//!
//! `run` (the default) appends 1 GiB of 1000-byte messages in batches of 250 to 1, 4 and 16
//! partitions, without and with per-batch durability, measures the same directory's raw O_DIRECT
//! sequential write rate and fdatasync latency, reads everything back cold and warm, and prints a
//! table (or, with `--json`, one JSON object).
//!
//! `soak` appends durable batches until killed, printing `durable <partition> <offset>` as each
//! group commit completes; `verify` reopens a directory, reports what recovery found and reads
//! every message back. Together they are the SIGKILL test (`storage/tests/sigkill.rs`).

use std::collections::VecDeque;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand};
use vireo_io::glommio::{
    evict_page_cache, flush_all_filesystems, keep_freed_memory, measure_fdatasync, measure_raw_write, yield_to_io,
    DriverConfig, GlommioIo,
};
use vireo_io::Namespace;
use vireo_storage::batch::{self, BatchBuilder};
use vireo_storage::partition::{
    token_owner, PartitionConfig, PartitionEvent, PartitionLog, ReadRequest, ReadStart, RecoveryReport, Status,
};

const MESSAGE_SIZE: usize = 1000;
const BATCH_MESSAGES: u32 = 250;
/// Batches a producer keeps in flight per partition, waiting to be durable.
const DURABLE_WINDOW: usize = 64;
/// Reads in flight per partition while reading back.
const READ_WINDOW: usize = 4;

#[derive(Parser)]
#[command(name = "vireo-storage-bench", about = "Partition-log throughput through the glommio io_uring driver")]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    run: RunArgs,
}

#[derive(clap::Args, Clone)]
struct RunArgs {
    /// Print one JSON object instead of a table.
    #[arg(long)]
    json: bool,
    /// The directory to write in (on the disk to measure); emptied first and removed after.
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Payload bytes appended per run, in MiB.
    #[arg(long, default_value_t = 1024)]
    size_mib: u64,
    /// Run only these append runs (e.g. `unsynced1,durable16`); every run when absent. The
    /// read-back needs `durable16`.
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
    /// The CPU the benchmark's shard is pinned to.
    #[arg(long, default_value_t = 0)]
    cpu: usize,
}

#[derive(Subcommand)]
enum Command {
    /// Append durable batches until killed, printing `durable <partition> <offset>` lines.
    Soak {
        #[arg(long)]
        dir: PathBuf,
        #[arg(long, default_value_t = 4)]
        partitions: u32,
    },
    /// Reopen a directory, print what recovery found, read every message back and check it.
    Verify {
        #[arg(long)]
        dir: PathBuf,
        #[arg(long, default_value_t = 4)]
        partitions: u32,
    },
}

fn main() {
    // glommio logs an ERROR about iopoll on every DmaFile open on these machines: harmless.
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new("warn,glommio=off"))
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    if let Err(reason) = keep_freed_memory() {
        eprintln!("vireo-storage-bench: {reason}");
    }
    let result = match cli.command {
        None => run_in_shard(cli.run.cpu, move || bench(cli.run)),
        Some(Command::Soak { dir, partitions }) => run_in_shard(0, move || soak(dir, partitions)),
        Some(Command::Verify { dir, partitions }) => run_in_shard(0, move || verify(dir, partitions)),
    };
    if let Err(error) = result {
        eprintln!("vireo-storage-bench: {error}");
        std::process::exit(1);
    }
}

type BenchResult<T> = Result<T, String>;

fn run_in_shard<F, Fut>(cpu: usize, main: F) -> BenchResult<()>
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: std::future::Future<Output = BenchResult<()>> + 'static,
{
    vireo_io::glommio::run_on_cpu(cpu, "vireo-bench", main).map_err(|error| format!("the shard failed: {error}"))?
}

fn namespace(partition: u32) -> Namespace {
    Namespace::partition(0, 0, partition)
}

fn config(partition: u32) -> PartitionConfig {
    PartitionConfig { partition_id: partition as u64, ..PartitionConfig::default() }
}

/// One shard's partition logs on the glommio driver, and the loop that feeds them completions.
struct Shard {
    io: GlommioIo,
    logs: Vec<PartitionLog>,
    events: Vec<(usize, PartitionEvent)>,
}

impl Shard {
    /// Opens `partitions` logs in `dir`; with `verify`, recovery checks every batch of every
    /// segment instead of trusting sealed segments' indexes.
    async fn open(dir: &Path, partitions: u32, verify: bool) -> BenchResult<(Shard, Vec<RecoveryReport>)> {
        let io = GlommioIo::new(&DriverConfig::new(dir)).map_err(|error| format!("{}: {error}", dir.display()))?;
        let mut shard = Shard { io, logs: Vec::new(), events: Vec::new() };
        for partition in 0..partitions {
            let config = PartitionConfig { verify_on_open: verify, ..config(partition) };
            let log = PartitionLog::open(&mut shard.io, config, namespace(partition), partition as u16);
            shard.logs.push(log);
        }
        let mut reports = vec![None; partitions as usize];
        while reports.iter().any(Option::is_none) {
            shard.step().await?;
            for (partition, event) in std::mem::take(&mut shard.events) {
                match event {
                    PartitionEvent::Opened(report) => reports[partition] = Some(report),
                    other => return Err(format!("partition {partition} while opening: {other:?}")),
                }
            }
        }
        Ok((shard, reports.into_iter().map(Option::unwrap).collect()))
    }

    /// Waits for one completion and hands it to its log; collects the logs' events.
    async fn step(&mut self) -> BenchResult<()> {
        let completion = self.io.next_completion().await.ok_or("waiting with nothing in flight")?;
        self.deliver(completion)?;
        self.collect_events()
    }

    /// Appends the producer's next batch to `partition` (asking for it to be durable if
    /// `durable`), then lets the I/O run; `None` when the log was busy and a completion was
    /// waited for instead.
    async fn produce(
        &mut self,
        partition: usize,
        producer: &mut Producer,
        durable: bool,
    ) -> BenchResult<Option<vireo_storage::partition::Appended>> {
        let appended = match self.logs[partition].append(&mut self.io, producer.batch(), now_us()) {
            Ok(appended) => {
                if durable {
                    self.logs[partition].sync(&mut self.io);
                }
                Some(appended)
            }
            Err(vireo_storage::partition::AppendError::Busy) => {
                producer.next_id -= BATCH_MESSAGES as u128;
                self.step().await?;
                None
            }
            Err(error) => return Err(format!("append: {error}")),
        };
        yield_to_io().await;
        self.drain()?;
        Ok(appended)
    }

    /// Hands every completion already in to its log, without waiting.
    fn drain(&mut self) -> BenchResult<()> {
        while let Some(completion) = self.io.try_completion() {
            self.deliver(completion)?;
        }
        self.collect_events()
    }

    fn deliver(&mut self, completion: vireo_io::Completion) -> BenchResult<()> {
        let owner = token_owner(completion.token()).ok_or("a completion no log asked for")? as usize;
        self.logs[owner].on_completion(&mut self.io, completion);
        Ok(())
    }

    fn collect_events(&mut self) -> BenchResult<()> {
        for (partition, log) in self.logs.iter_mut().enumerate() {
            while let Some(event) = log.poll_event() {
                if let PartitionEvent::Failed(error) | PartitionEvent::Rejected { error, .. } = event {
                    return Err(format!("partition {partition}: {error}"));
                }
                self.events.push((partition, event));
            }
        }
        Ok(())
    }

    async fn settle(&mut self) -> BenchResult<()> {
        while self.io.in_flight() > 0 {
            self.step().await?;
        }
        Ok(())
    }
}

/// A batch of 250 messages of 1000 bytes as a producer sends it; `next_id` numbers the messages.
struct Producer {
    template: Vec<u8>,
    frames: Vec<usize>,
    next_id: u128,
}

impl Producer {
    fn new() -> Producer {
        let mut builder = BatchBuilder::new();
        let payload: Vec<u8> = (0..MESSAGE_SIZE).map(|at| (at % 251) as u8).collect();
        for _ in 0..BATCH_MESSAGES {
            builder.push(0, &payload, b"");
        }
        let template = builder.finish(0);
        let frames = (0..BATCH_MESSAGES as usize)
            .map(|at| batch::BATCH_HEADER_SIZE + at * (batch::MESSAGE_FRAME_SIZE + MESSAGE_SIZE))
            .collect();
        Producer { template, frames, next_id: 0 }
    }

    fn batch(&mut self) -> Vec<u8> {
        let mut bytes = self.template.clone();
        for &frame in &self.frames {
            bytes[frame + 8..frame + 24].copy_from_slice(&self.next_id.to_le_bytes());
            self.next_id += 1;
        }
        bytes
    }
}

/// The partition's clock: microseconds since the Unix epoch (a node takes it from its driver).
fn now_us() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_micros() as u64
}

struct AppendRun {
    bytes: u64,
    elapsed: Duration,
    /// Unsynced runs: the time until a final sync made it all durable too.
    elapsed_with_sync: Duration,
    syncs: u64,
}

/// Appends `batches` batches round-robin over `partitions` partitions; with `durable`, every batch
/// waits to be durable (a window of `DURABLE_WINDOW` per partition in flight).
async fn append_run(dir: &Path, partitions: u32, batches: u64, durable: bool) -> BenchResult<AppendRun> {
    let (mut shard, _) = Shard::open(dir, partitions, false).await?;
    let mut producer = Producer::new();
    let mut outstanding: Vec<VecDeque<u64>> = vec![VecDeque::new(); partitions as usize];
    let mut bytes = 0u64;
    let mut syncs = 0u64;
    let started = Instant::now();
    let mut sent = 0u64;
    while sent < batches {
        let partition = (sent % partitions as u64) as usize;
        if durable && outstanding[partition].len() >= DURABLE_WINDOW {
            shard.step().await?;
            syncs += drain_durable(&mut shard, &mut outstanding);
            continue;
        }
        if let Some(appended) = shard.produce(partition, &mut producer, durable).await? {
            bytes += producer.template.len() as u64;
            sent += 1;
            if durable {
                outstanding[partition].push_back(appended.last_offset + 1);
            }
        }
        syncs += drain_durable(&mut shard, &mut outstanding);
    }
    for log in shard.logs.iter_mut() {
        log.flush(&mut shard.io);
    }
    // Done when every batch is written (and, with per-batch durability, durable); a seal's own
    // background sync is not waited for here but is in the `final sync` column.
    let written = |shard: &Shard| shard.logs.iter().all(|log| log.written_offset() == log.end_offset());
    while outstanding.iter().any(|window| !window.is_empty()) || !written(&shard) {
        shard.step().await?;
        syncs += drain_durable(&mut shard, &mut outstanding);
    }
    let elapsed = started.elapsed();
    for log in shard.logs.iter_mut() {
        log.sync(&mut shard.io);
    }
    shard.settle().await?;
    let elapsed_with_sync = started.elapsed();
    Ok(AppendRun { bytes, elapsed, elapsed_with_sync, syncs })
}

fn drain_durable(shard: &mut Shard, outstanding: &mut [VecDeque<u64>]) -> u64 {
    let mut syncs = 0;
    for (partition, event) in std::mem::take(&mut shard.events) {
        if let PartitionEvent::Durable { offset } = event {
            syncs += 1;
            let window = &mut outstanding[partition];
            while window.front().is_some_and(|end| *end <= offset) {
                window.pop_front();
            }
        }
    }
    syncs
}

/// Reads every partition back from offset 0, `READ_WINDOW` reads in flight per partition, checking
/// each batch; returns bytes read and elapsed time.
async fn read_back(shard: &mut Shard) -> BenchResult<(u64, Duration)> {
    let partitions = shard.logs.len() as u32;
    let started = Instant::now();
    let mut next: Vec<u64> = vec![0; partitions as usize];
    let mut in_flight = vec![0usize; partitions as usize];
    let mut bytes = 0u64;
    let mut read_id = 0u64;
    let mut pending: Vec<std::collections::BTreeMap<u64, u64>> = vec![Default::default(); partitions as usize];
    loop {
        for partition in 0..partitions as usize {
            let end = shard.logs[partition].end_offset();
            while in_flight[partition] < READ_WINDOW && next[partition] < end {
                read_id += 1;
                let start = next[partition];
                let request =
                    ReadRequest { id: read_id, start: ReadStart::Offset(start), count: 1000, bytes_max: 1 << 20 };
                shard.logs[partition].read(&mut shard.io, request).map_err(|error| format!("read: {error}"))?;
                pending[partition].insert(read_id, start);
                // The index says where the next read can start without waiting for this one.
                next[partition] = start + 1000;
                in_flight[partition] += 1;
            }
        }
        if in_flight.iter().all(|reads| *reads == 0) {
            break;
        }
        shard.step().await?;
        for (partition, event) in std::mem::take(&mut shard.events) {
            if let PartitionEvent::Read { id, result } = event {
                let read = result.map_err(|error| format!("partition {partition}: {error}"))?;
                let start = pending[partition].remove(&id).ok_or("unknown read")?;
                // A read starts later than asked only to step over damage recovery reported.
                if read.start_offset < start {
                    return Err(format!("partition {partition}: a read from {start} began at {}", read.start_offset));
                }
                let mut at = 0;
                while at < read.bytes.len() {
                    let header =
                        batch::validate(&read.bytes[at..]).map_err(|error| format!("served batch: {error}"))?;
                    at += header.batch_length as usize;
                }
                bytes += read.bytes.len() as u64;
                in_flight[partition] -= 1;
            }
        }
    }
    Ok((bytes, started.elapsed()))
}

fn mbps(bytes: u64, elapsed: Duration) -> f64 {
    bytes as f64 / elapsed.as_secs_f64() / 1e6
}

fn fresh_dir(dir: &Path) -> BenchResult<()> {
    if dir.exists() {
        std::fs::remove_dir_all(dir).map_err(|error| format!("{}: {error}", dir.display()))?;
    }
    std::fs::create_dir_all(dir).map_err(|error| format!("{}: {error}", dir.display()))
}

async fn bench(args: RunArgs) -> BenchResult<()> {
    let dir = args.dir.clone().unwrap_or_else(|| std::env::temp_dir().join("vireo-storage-bench"));
    fresh_dir(&dir)?;
    let payload_bytes = args.size_mib << 20;
    let batches = payload_bytes.div_ceil(MESSAGE_SIZE as u64 * BATCH_MESSAGES as u64);
    let raw_bytes = batches * Producer::new().template.len() as u64;
    let raw_bytes = raw_bytes.next_multiple_of(1 << 20);
    flush_all_filesystems();
    let raw = measure_raw_write(&dir.join("raw.bin"), raw_bytes, 1 << 20, 16)
        .await
        .map_err(|error| format!("raw O_DIRECT write: {error}"))?;
    let raw_mbps = mbps(raw_bytes, raw);
    let mut latencies =
        measure_fdatasync(&dir.join("fsync.bin"), 200).await.map_err(|error| format!("fdatasync: {error}"))?;
    latencies.sort();
    let p50 = latencies[latencies.len() / 2];
    let p99 = latencies[latencies.len() * 99 / 100];

    let mut rows = Vec::new();
    let mut json = serde_json::Map::new();
    json.insert("raw_odirect_mbps".into(), round(raw_mbps).into());
    json.insert("fdatasync_p50_us".into(), (p50.as_micros() as u64).into());
    json.insert("fdatasync_p99_us".into(), (p99.as_micros() as u64).into());
    json.insert("bytes_per_run".into(), raw_bytes.into());
    let mut read_dir = None;
    for durable in [false, true] {
        for partitions in [1u32, 4, 16] {
            let name = format!("{}{partitions}", if durable { "durable" } else { "unsynced" });
            if !args.only.is_empty() && !args.only.contains(&name) {
                continue;
            }
            let run_dir = dir.join(&name);
            fresh_dir(&run_dir)?;
            flush_all_filesystems();
            let run = append_run(&run_dir, partitions, batches, durable).await?;
            let rate = mbps(run.bytes, run.elapsed);
            rows.push((name.clone(), rate, rate / raw_mbps, mbps(run.bytes, run.elapsed_with_sync), run.syncs));
            json.insert(format!("{name}_mbps"), round(rate).into());
            json.insert(format!("{name}_ratio"), round(rate / raw_mbps).into());
            json.insert(format!("{name}_group_commits"), run.syncs.into());
            if !durable {
                json.insert(
                    format!("{name}_with_final_sync_mbps"),
                    round(mbps(run.bytes, run.elapsed_with_sync)).into(),
                );
            }
            if durable && partitions == 16 {
                read_dir = Some(run_dir);
            } else {
                std::fs::remove_dir_all(&run_dir).map_err(|error| error.to_string())?;
            }
        }
    }
    if let Some(ratio) = json.get("unsynced1_ratio").cloned() {
        json.insert("unsynced_ratio".into(), ratio);
    }
    let mut read_rates = None;
    if let Some(read_dir) = read_dir {
        evict_page_cache(&read_dir).map_err(|error| format!("evicting the page cache: {error}"))?;
        let (mut shard, _) = Shard::open(&read_dir, 16, false).await?;
        let (cold_bytes, cold) = read_back(&mut shard).await?;
        let (warm_bytes, warm) = read_back(&mut shard).await?;
        drop(shard);
        json.insert("read_cold_mbps".into(), round(mbps(cold_bytes, cold)).into());
        json.insert("read_warm_mbps".into(), round(mbps(warm_bytes, warm)).into());
        read_rates = Some((mbps(cold_bytes, cold), mbps(warm_bytes, warm)));
    }
    std::fs::remove_dir_all(&dir).map_err(|error| error.to_string())?;

    if args.json {
        println!("{}", serde_json::Value::Object(json));
        return Ok(());
    }
    println!(
        "vireo-storage-bench: {} MiB of {MESSAGE_SIZE}-byte messages in batches of {BATCH_MESSAGES} per run, dir {}",
        args.size_mib,
        dir.display()
    );
    println!(
        "raw O_DIRECT sequential write: {raw_mbps:.0} MB/s; fdatasync p50 {:.2} ms, p99 {:.2} ms",
        p50.as_secs_f64() * 1e3,
        p99.as_secs_f64() * 1e3
    );
    println!("{:<12} {:>10} {:>10} {:>22} {:>14}", "run", "MB/s", "x raw", "MB/s incl. final sync", "group commits");
    for (name, rate, ratio, with_sync, syncs) in rows {
        println!("{name:<12} {rate:>10.0} {ratio:>10.2} {with_sync:>22.0} {syncs:>14}");
    }
    if let Some((cold, warm)) = read_rates {
        println!("read back (16 partitions): cold {cold:.0} MB/s, warm {warm:.0} MB/s");
    }
    Ok(())
}

fn round(value: f64) -> f64 {
    (value * 1000.0).round() / 1000.0
}

async fn soak(dir: PathBuf, partitions: u32) -> BenchResult<()> {
    let (mut shard, _) = Shard::open(&dir, partitions, false).await?;
    let mut producer = Producer::new();
    let mut stdout = std::io::stdout();
    let mut outstanding: Vec<VecDeque<u64>> = vec![VecDeque::new(); partitions as usize];
    let mut sent = 0u64;
    loop {
        let partition = (sent % partitions as u64) as usize;
        if outstanding[partition].len() >= 8 {
            shard.step().await?;
        } else if let Some(appended) = shard.produce(partition, &mut producer, true).await? {
            sent += 1;
            outstanding[partition].push_back(appended.last_offset + 1);
        }
        for (partition, event) in std::mem::take(&mut shard.events) {
            if let PartitionEvent::Durable { offset } = event {
                let window = &mut outstanding[partition];
                while window.front().is_some_and(|end| *end <= offset) {
                    window.pop_front();
                }
                writeln!(stdout, "durable {partition} {offset}").map_err(|error| error.to_string())?;
                stdout.flush().map_err(|error| error.to_string())?;
            }
        }
    }
}

async fn verify(dir: PathBuf, partitions: u32) -> BenchResult<()> {
    let (mut shard, reports) = Shard::open(&dir, partitions, true).await?;
    for (partition, report) in reports.iter().enumerate() {
        let damaged: Vec<String> = report.damaged.iter().map(|(from, to)| format!("{from}..{to}")).collect();
        println!(
            "partition {partition} end {} truncated_from {} truncated_bytes {} corrupt {} segments {} damaged [{}] damaged_bytes {}",
            report.end_offset,
            report.truncated_from.map_or("none".to_string(), |offset| offset.to_string()),
            report.truncated_bytes,
            report.corrupt,
            report.segments,
            damaged.join(" "),
            report.damaged_bytes
        );
        if !damaged.is_empty() {
            eprintln!(
                "partition {partition}: DAMAGE FOUND: the messages at offsets [{}] are lost on this copy; every \
                 valid batch after them was kept",
                damaged.join(" ")
            );
        } else if report.corrupt {
            eprintln!(
                "partition {partition}: DAMAGE FOUND: the log was cut at offset {} below its durable point",
                report.truncated_from.map_or("?".to_string(), |offset| offset.to_string())
            );
        }
    }
    let (bytes, _) = read_back(&mut shard).await?;
    for (partition, log) in shard.logs.iter().enumerate() {
        if log.status() != Status::Open {
            return Err(format!("partition {partition} is {:?} after reading back", log.status()));
        }
    }
    println!("verified {bytes} bytes");
    let damaged = reports.iter().filter(|report| report.corrupt).count();
    if damaged > 0 {
        return Err(format!("{damaged} of {partitions} partitions are damaged"));
    }
    Ok(())
}
