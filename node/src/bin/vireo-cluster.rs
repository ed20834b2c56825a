//! `vireo-cluster`: a local cluster of vireo-server processes on one machine, for users and tests.
//! It picks free ports on 127.0.0.1, writes one config per node (`DIR/node-N.toml`, the same
//! roster and secret in each), starts `vireo-server --replica-id N` for each (the binary next to
//! this one) with its output in `DIR/node-N.log`, prints where each listens, and stops them all
//! (SIGTERM, then waits) on SIGINT or SIGTERM. `--configs-only` writes the configs and exits.

use std::io::{Read as _, Write as _};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;

/// How often the launcher looks at its children and at the stop flag.
const WATCH_INTERVAL: Duration = Duration::from_millis(100);

#[derive(Parser, Debug)]
#[command(name = "vireo-cluster", version, about = "Starts a local cluster of vireo-server processes on free ports.")]
struct Args {
    /// Nodes in the cluster (1 to 6).
    #[arg(long, default_value_t = 3)]
    nodes: u8,
    /// Where the configs, logs and each node's data directory (DIR/node-N/) go.
    #[arg(long, default_value = "local_cluster")]
    dir: PathBuf,
    /// Shards (cores) per node; the nodes take the machine's cores in turn.
    #[arg(long, default_value_t = 1)]
    shards: u16,
    /// Delete DIR first.
    #[arg(long)]
    fresh: bool,
    /// Write DIR/node-N.toml (and print the nodes) without starting anything.
    #[arg(long)]
    configs_only: bool,
    /// The replica links' shared secret; without it a random one (kept in the configs).
    #[arg(long)]
    secret: Option<String>,
    /// The cluster's name.
    #[arg(long, default_value = "vireo-local")]
    name: String,
}

fn main() -> ExitCode {
    match run(Args::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(reason) => {
            eprintln!("vireo-cluster: {reason}");
            ExitCode::FAILURE
        }
    }
}

/// The lowest port `free_ports` hands out: below it sit the well-known and registered services
/// most machines run.
const FIRST_LISTEN_PORT: u16 = 10_000;

/// `count` distinct free ports on 127.0.0.1 (held until all are picked, so none repeats), taken
/// below the kernel's ephemeral range: a port from that range is free now but may become the
/// local end of some outgoing connection (a peer's replica link, a client) before the node that
/// was given it starts listening. The scan starts at a random port so that launchers running at
/// once rarely meet.
fn free_ports(count: usize) -> Result<Vec<u16>, String> {
    let ephemeral_low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|range| range.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32_768);
    if ephemeral_low <= FIRST_LISTEN_PORT {
        // Nothing below the ephemeral range to choose from: let the kernel pick.
        let listeners: Vec<TcpListener> = (0..count)
            .map(|_| TcpListener::bind("127.0.0.1:0").map_err(|error| format!("cannot find a free port: {error}")))
            .collect::<Result<_, _>>()?;
        return listeners.iter().map(|listener| Ok(listener.local_addr().map_err(|e| e.to_string())?.port())).collect();
    }
    let span = ephemeral_low - FIRST_LISTEN_PORT;
    let mut start = [0u8; 2];
    read_urandom(&mut start)?;
    let start = u16::from_le_bytes(start) % span;
    let mut listeners = Vec::with_capacity(count);
    for step in 0..span {
        if listeners.len() == count {
            break;
        }
        let port = FIRST_LISTEN_PORT + (start + step) % span;
        if let Ok(listener) = TcpListener::bind(("127.0.0.1", port)) {
            listeners.push(listener);
        }
    }
    if listeners.len() < count {
        return Err(format!(
            "cannot find {count} free ports on 127.0.0.1 between {FIRST_LISTEN_PORT} and {ephemeral_low}"
        ));
    }
    listeners.iter().map(|listener| Ok(listener.local_addr().map_err(|error| error.to_string())?.port())).collect()
}

fn read_urandom(bytes: &mut [u8]) -> Result<(), String> {
    std::fs::File::open("/dev/urandom")
        .and_then(|mut random| random.read_exact(bytes))
        .map_err(|error| format!("cannot read /dev/urandom: {error}"))
}

fn random_secret() -> Result<String, String> {
    let mut bytes = [0u8; 24];
    read_urandom(&mut bytes)?;
    Ok(bytes.iter().map(|byte| format!("{byte:02x}")).collect())
}

/// One node as the configs name it.
struct NodePlan {
    tcp: u16,
    tcp_replica: u16,
    http: u16,
    config: PathBuf,
}

fn write_configs(args: &Args, dir: &Path) -> Result<Vec<NodePlan>, String> {
    let count = args.nodes as usize;
    let ports = free_ports(3 * count)?;
    let secret = match &args.secret {
        Some(secret) => secret.clone(),
        None => random_secret()?,
    };
    let mut roster = String::new();
    for index in 0..count {
        roster.push_str(&format!(
            "\n[[cluster.nodes]]\nname = \"node-{index}\"\nip = \"127.0.0.1\"\nreplica_id = {index}\nports = {{ tcp = {}, quic = 0, http = {}, websocket = 0, tcp_replica = {} }}\n",
            ports[3 * index],
            ports[3 * index + 2],
            ports[3 * index + 1]
        ));
    }
    let cores = std::thread::available_parallelism().map_or(1, |cores| cores.get());
    let shards = (args.shards as usize).clamp(1, cores);
    let mut plans = Vec::new();
    for index in 0..count {
        // The nodes' shards spread over the cores, so that one machine's nodes do not all share
        // the first ones.
        let first = (index * shards) % cores;
        let cpus =
            if first + shards <= cores { format!("{first}..{}", first + shards) } else { format!("0..{shards}") };
        let data = dir.join(format!("node-{index}"));
        let text = format!(
            "# node {index} of the local cluster `{name}` (written by vireo-cluster)\n[system]\npath = \"{}\"\n\n[system.sharding]\ncpu_allocation = \"{shards}\"\n\n[http]\naddress = \"127.0.0.1:{http}\"\n\n[cluster]\nenabled = true\nname = \"{name}\"\nreplica_id = {index}\n{roster}\n[cluster.auth]\nsecret = \"{secret}\"\n",
            data.display(),
            name = args.name,
            shards = cpus,
            http = ports[3 * index + 2],
        );
        let config = dir.join(format!("node-{index}.toml"));
        std::fs::write(&config, text).map_err(|error| format!("cannot write {}: {error}", config.display()))?;
        plans.push(NodePlan {
            tcp: ports[3 * index],
            tcp_replica: ports[3 * index + 1],
            http: ports[3 * index + 2],
            config,
        });
    }
    Ok(plans)
}

fn server_binary() -> Result<PathBuf, String> {
    let me = std::env::current_exe().map_err(|error| format!("cannot find this binary: {error}"))?;
    let server = me.with_file_name("vireo-server");
    if !server.exists() {
        return Err(format!("{} not found: build it (cargo build --release -p vireo-node)", server.display()));
    }
    Ok(server)
}

fn start(server: &Path, plan: &NodePlan, index: usize, dir: &Path) -> Result<Child, String> {
    let log_path = dir.join(format!("node-{index}.log"));
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log_path)
        .map_err(|error| format!("cannot open {}: {error}", log_path.display()))?;
    let err = log.try_clone().map_err(|error| error.to_string())?;
    let mut command = Command::new(server);
    command.arg("--config").arg(&plan.config).arg("--replica-id").arg(index.to_string());
    if std::env::var_os("VIREO_ROOT_USERNAME").is_none() {
        command.arg("--with-default-root-credentials");
    }
    command
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(err)
        .spawn()
        .map_err(|error| format!("cannot start {}: {error}", server.display()))
}

fn run(args: Args) -> Result<(), String> {
    if !(1..=6).contains(&args.nodes) {
        return Err(format!("--nodes {}: a cluster has 1 to 6 nodes", args.nodes));
    }
    let dir = args.dir.clone();
    if args.fresh && dir.exists() {
        std::fs::remove_dir_all(&dir).map_err(|error| format!("--fresh: cannot delete {}: {error}", dir.display()))?;
    }
    std::fs::create_dir_all(&dir).map_err(|error| format!("cannot create {}: {error}", dir.display()))?;
    let plans = write_configs(&args, &dir)?;
    for (index, plan) in plans.iter().enumerate() {
        println!(
            "node {index}: clients 127.0.0.1:{}, replicas 127.0.0.1:{}, metrics http://127.0.0.1:{}/metrics, config {}",
            plan.tcp,
            plan.tcp_replica,
            plan.http,
            plan.config.display()
        );
    }
    if args.configs_only {
        return Ok(());
    }
    let server = server_binary()?;
    let stop = Arc::new(AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(signal, stop.clone()).map_err(|error| format!("signal {signal}: {error}"))?;
    }
    let mut children = Vec::new();
    for (index, plan) in plans.iter().enumerate() {
        children.push(Some(start(&server, plan, index, &dir)?));
    }
    println!("{} nodes started; logs in {}/node-N.log; Ctrl-C stops them", plans.len(), dir.display());
    let _ = std::io::stdout().flush();
    while !stop.load(Ordering::SeqCst) {
        for (index, slot) in children.iter_mut().enumerate() {
            let Some(child) = slot else { continue };
            if let Ok(Some(status)) = child.try_wait() {
                eprintln!("vireo-cluster: node {index} exited ({status}); see {}/node-{index}.log", dir.display());
                *slot = None;
            }
        }
        if children.iter().all(Option::is_none) {
            return Err("every node exited".to_string());
        }
        std::thread::sleep(WATCH_INTERVAL);
    }
    for child in children.iter().flatten() {
        // SAFETY: kill(2) on a child this process started and has not reaped.
        unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    }
    for (index, child) in children.iter_mut().enumerate() {
        if let Some(child) = child {
            match child.wait() {
                Ok(status) if status.success() => {}
                Ok(status) => eprintln!("vireo-cluster: node {index} stopped with {status}"),
                Err(error) => eprintln!("vireo-cluster: node {index}: {error}"),
            }
        }
    }
    println!("stopped");
    Ok(())
}
