//! The vireo-server process: flags, configuration, logging, the data directory (its lock,
//! `--fresh`, `runtime/current_config.toml`), the listeners (bound here, so a port in use is one
//! clear line before any shard starts), signals, the shards, and the exit code (0 after a
//! graceful shutdown; 1 with one line on stderr for anything that stops the server).

use std::io::Read as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use clap::Parser;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;

use vireo_io::glommio::{run_shards, ClientTls};
use vireo_protocol::config::Config;
use vireo_protocol::wire;

use crate::metadata::PasswordCost;
use crate::node::NodeConfig;
use crate::server::config::{self, ConfigError, ServerConfig, ENV_CONFIG_PATH, ENV_ROOT_PASSWORD, ENV_ROOT_USERNAME};
use crate::server::metrics::ShardStats;
use crate::server::replica_links::{ClusterHealth, LinkIdentity};
use crate::server::root_credentials::RootPlan;
use crate::server::shard_loop::{run_shard, ClusterPlane, ServerShared};
use crate::server::tls;
use crate::shard::ShardConfig;

/// Partition groups one shard hosts at most.
const PARTITIONS_PER_SHARD_MAX: usize = 16_384;
/// Client sessions the metadata group's and each partition group's client tables keep.
const METADATA_CLIENTS_MAX: usize = 4096;
const PARTITION_CLIENTS_MAX: usize = 1024;
/// Length of a generated root password (alphanumeric).
const GENERATED_PASSWORD_LEN: usize = 24;

#[derive(Parser, Debug)]
#[command(
    name = "vireo-server",
    version,
    about = "Vireo: a persistent message-streaming server that speaks the Iggy protocol, every change replicated by VSR."
)]
pub struct Args {
    /// The configuration file (TOML). Without it, VIREO_CONFIG_PATH; without that, the embedded
    /// default. Any key can be overridden by VIREO_ + its path in upper case.
    #[arg(long, short = 'c', value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Delete the data directory (system.path) before starting.
    #[arg(long)]
    pub fresh: bool,
    /// Keep the root user's default credentials (iggy / iggy) at first boot, unless
    /// VIREO_ROOT_USERNAME and VIREO_ROOT_PASSWORD set others.
    #[arg(long)]
    pub with_default_root_credentials: bool,
    /// This node's replica_id in [[cluster.nodes]] (0 for a single node); overrides
    /// cluster.replica_id.
    #[arg(long, value_name = "N")]
    pub replica_id: Option<u8>,
}

pub fn main() -> ExitCode {
    let args = Args::parse();
    // Batches are hundreds of kB: with glibc's default thresholds each one is an mmap, page
    // faults on first touch and an munmap; kept in the heap they are reused.
    if let Err(reason) = vireo_io::glommio::keep_freed_memory() {
        eprintln!("vireo-server: {reason}: batches will be mapped and unmapped one by one");
    }
    match run(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(reason) => {
            // Once logging is up this line also goes nowhere else: stderr is where it is read.
            eprintln!("vireo-server: {reason}");
            ExitCode::FAILURE
        }
    }
}

/// The process's environment as strings; a `VIREO_` variable that is not UTF-8 is an error.
fn environment() -> Result<Vec<(String, String)>, String> {
    let mut variables = Vec::new();
    for (name, value) in std::env::vars_os() {
        let Some(name) = name.to_str().map(str::to_string) else { continue };
        if !name.starts_with(config::ENV_PREFIX) && name != "RUST_LOG" {
            continue;
        }
        let value = value.into_string().map_err(|_| format!("environment variable {name}: not valid UTF-8"))?;
        variables.push((name, value));
    }
    Ok(variables)
}

fn env_value<'a>(env: &'a [(String, String)], name: &str) -> Option<&'a str> {
    env.iter().find(|(key, _)| key == name).map(|(_, value)| value.as_str())
}

fn random_bytes<const N: usize>() -> Result<[u8; N], String> {
    let mut bytes = [0u8; N];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut random| random.read_exact(&mut bytes))
        .map_err(|error| format!("cannot read /dev/urandom: {error}"))?;
    Ok(bytes)
}

fn generated_password() -> Result<String, String> {
    const ALPHABET: &[u8] = b"ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz23456789";
    let bytes = random_bytes::<GENERATED_PASSWORD_LEN>()?;
    Ok(bytes.iter().map(|byte| ALPHABET[*byte as usize % ALPHABET.len()] as char).collect())
}

fn root_plan(args: &Args, env: &[(String, String)]) -> Result<RootPlan, String> {
    match (env_value(env, ENV_ROOT_USERNAME), env_value(env, ENV_ROOT_PASSWORD)) {
        (Some(username), Some(password)) => {
            if username.is_empty() || username.len() > 50 {
                return Err(format!("{ENV_ROOT_USERNAME}: a username has 1 to 50 bytes"));
            }
            if password.len() < 3 || password.len() > 100 {
                return Err(format!("{ENV_ROOT_PASSWORD}: a password has 3 to 100 bytes"));
            }
            Ok(RootPlan::Set { username: username.to_string(), password: password.to_string(), generated: false })
        }
        (None, None) if args.with_default_root_credentials => Ok(RootPlan::KeepDefault),
        (None, None) => Ok(RootPlan::Set {
            username: crate::metadata::ROOT_USERNAME.to_string(),
            password: generated_password()?,
            generated: true,
        }),
        _ => Err(format!("{ENV_ROOT_USERNAME} and {ENV_ROOT_PASSWORD} are set together or not at all")),
    }
}

fn init_logging(config: &ServerConfig, env: &[(String, String)]) -> Result<(), String> {
    let filter = match env_value(env, "RUST_LOG") {
        Some(filter) => {
            tracing_subscriber::EnvFilter::try_new(filter).map_err(|error| format!("RUST_LOG `{filter}`: {error}"))?
        }
        None => tracing_subscriber::EnvFilter::try_new(&config.system.logging.level).expect("validated"),
    };
    let logs = config.system.path.join("logs");
    std::fs::create_dir_all(&logs).map_err(|error| format!("cannot create {}: {error}", logs.display()))?;
    let path = logs.join("vireo-server.log");
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .map_err(|error| format!("cannot open {}: {error}", path.display()))?;
    tracing_subscriber::registry()
        .with(filter)
        .with(
            tracing_subscriber::fmt::layer()
                .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
                .with_writer(std::io::stderr),
        )
        .with(tracing_subscriber::fmt::layer().with_ansi(false).with_writer(Mutex::new(file)))
        .try_init()
        .map_err(|error| format!("logging: {error}"))
}

/// How long a listener whose address is in use, but by no live process, is tried again: a
/// killed predecessor's socket outlives its process briefly (its io_uring instance is torn
/// down after it).
const BIND_RETRY_MS: u64 = 10_000;
const BIND_RETRY_STEP_MS: u64 = 100;

fn bind(key: &str, address: SocketAddr) -> Result<std::net::TcpListener, String> {
    let started = std::time::Instant::now();
    let mut warned = false;
    loop {
        let error = match std::net::TcpListener::bind(address) {
            Ok(listener) => {
                if warned {
                    let waited_ms = started.elapsed().as_millis() as u64;
                    tracing::info!(%address, waited_ms, "the address is free now: listening");
                }
                return Ok(listener);
            }
            Err(error) => error,
        };
        let reason = match error.kind() {
            std::io::ErrorKind::AddrInUse => match address_holder(address.port()) {
                Holder::Process(holder) => format!("the address is in use ({holder} listens there)"),
                _ if started.elapsed() < Duration::from_millis(BIND_RETRY_MS) => {
                    if !warned {
                        warned = true;
                        tracing::warn!(
                            %address,
                            "the address is in use by no live process (a killed one's socket, still closing?): trying again for up to {} s",
                            BIND_RETRY_MS / 1000
                        );
                    }
                    std::thread::sleep(Duration::from_millis(BIND_RETRY_STEP_MS));
                    continue;
                }
                Holder::Orphan => format!(
                    "the address is in use (by a listening socket no process holds, for {} s)",
                    BIND_RETRY_MS / 1000
                ),
                Holder::Unknown => format!("the address is in use (tried for {} s)", BIND_RETRY_MS / 1000),
            },
            std::io::ErrorKind::AddrNotAvailable => "no interface of this machine has that address".to_string(),
            std::io::ErrorKind::PermissionDenied => {
                "permission denied (a port below 1024 needs privileges)".to_string()
            }
            _ => error.to_string(),
        };
        return Err(format!("key `{key}`: cannot listen on {address}: {reason}"));
    }
}

/// Who holds a listening TCP socket on a port, as far as /proc tells.
enum Holder {
    /// A live process: "process PID (NAME)".
    Process(String),
    /// A listening socket no process holds any more (a killed process's, being torn down).
    Orphan,
    /// Nothing known (no such socket seen, or /proc not readable).
    Unknown,
}

fn address_holder(port: u16) -> Holder {
    let mut inodes = Vec::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = std::fs::read_to_string(table) else { continue };
        for line in text.lines().skip(1) {
            let fields: Vec<&str> = line.split_whitespace().collect();
            // local_address is ADDR:PORT in hex; state 0A is LISTEN; the inode is field 9.
            let listening = fields.get(3) == Some(&"0A");
            let local_port = fields.get(1).and_then(|local| local.rsplit(':').next());
            let on_port = local_port.and_then(|hex| u16::from_str_radix(hex, 16).ok()) == Some(port);
            if let (true, true, Some(inode)) = (listening, on_port, fields.get(9)) {
                inodes.push(format!("socket:[{inode}]"));
            }
        }
    }
    if inodes.is_empty() {
        return Holder::Unknown;
    }
    let Ok(processes) = std::fs::read_dir("/proc") else { return Holder::Unknown };
    for process in processes.flatten() {
        let Some(pid) = process.file_name().to_str().and_then(|name| name.parse::<u32>().ok()) else { continue };
        let Ok(descriptors) = std::fs::read_dir(process.path().join("fd")) else { continue };
        for descriptor in descriptors.flatten() {
            let Ok(target) = std::fs::read_link(descriptor.path()) else { continue };
            if inodes.iter().any(|inode| target.as_os_str() == inode.as_str()) {
                let name = std::fs::read_to_string(process.path().join("comm")).unwrap_or_default();
                return Holder::Process(format!("process {pid} ({})", name.trim()));
            }
        }
    }
    Holder::Orphan
}

/// Takes the data directory's lock: two servers on one directory would corrupt it.
fn lock_data_directory(path: &Path) -> Result<std::fs::File, String> {
    use std::os::fd::AsRawFd;
    let runtime = path.join("runtime");
    std::fs::create_dir_all(&runtime).map_err(|error| format!("cannot create {}: {error}", runtime.display()))?;
    let lock_path = runtime.join("vireo.lock");
    let lock = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .map_err(|error| format!("cannot open {}: {error}", lock_path.display()))?;
    // SAFETY: flock on a descriptor this function owns.
    if unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        return Err(format!("the data directory {} is in use by another vireo-server", path.display()));
    }
    Ok(lock)
}

/// Where a node keeps the HTTP API's signing key it made, under its data directory.
const JWT_KEY_FILE: &str = "http/jwt.key";

/// The HTTP API's signing key: `http.jwt.secret`, or the one this node made on its first start
/// (32 random bytes, hex, readable by its owner only), made now if there is none yet.
fn jwt_secret(config: &ServerConfig, data: &Path) -> Result<Vec<u8>, String> {
    if !config.http.jwt.secret.is_empty() {
        return Ok(config.http.jwt.secret.as_bytes().to_vec());
    }
    let path = data.join(JWT_KEY_FILE);
    match std::fs::read_to_string(&path) {
        Ok(key) if key.trim().len() >= 64 => return Ok(key.trim().as_bytes().to_vec()),
        Ok(_) => return Err(format!("{}: not a key (64 hex digits); delete it to make a new one", path.display())),
        Err(error) if error.kind() != std::io::ErrorKind::NotFound => {
            return Err(format!("cannot read {}: {error}", path.display()))
        }
        Err(_) => {}
    }
    let key: String = random_bytes::<32>()?.iter().map(|byte| format!("{byte:02x}")).collect();
    let directory = path.parent().expect("a file in a directory");
    std::fs::create_dir_all(directory).map_err(|error| format!("cannot create {}: {error}", directory.display()))?;
    let write = || -> std::io::Result<()> {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let temporary = path.with_extension("tmp");
        let mut file =
            std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(&temporary)?;
        file.write_all(key.as_bytes())?;
        file.sync_all()?;
        std::fs::rename(&temporary, &path)
    };
    write().map_err(|error| format!("cannot write {}: {error}", path.display()))?;
    Ok(key.into_bytes())
}

/// The TLS of the client port and of the HTTP port, as their sections ask, and the self-signed
/// certificate either uses (if one does), for the banner.
struct PortsTls {
    tcp: Option<ClientTls>,
    http: Option<ClientTls>,
    self_signed: Option<PathBuf>,
}

fn client_tls(config: &ServerConfig, data: &Path) -> Result<PortsTls, String> {
    let mut self_signed = None;
    let mut port = |section: &str, tls: &crate::server::config::TlsConfig, served: bool| {
        if !tls.enabled || !served {
            return Ok(None);
        }
        let (cert, _) = tls::credential_files(section, tls, data)?;
        if cert.starts_with(data) {
            self_signed = Some(cert);
        }
        let server = tls::server_config(section, tls, data)?;
        Ok::<_, String>(Some(ClientTls {
            acceptor: futures_rustls::TlsAcceptor::from(server),
            handshake_timeout: Duration::from_millis(tls.handshake_timeout_ms),
        }))
    };
    let tcp = port("tcp.tls", &config.tcp.tls, true)?;
    let http = port("http.tls", &config.http.tls, config.http.enabled)?;
    Ok(PortsTls { tcp, http, self_signed })
}

/// Lets the process hold every connection its bounds allow: the soft limit on open files goes
/// up to the hard one.
fn raise_open_files_limit() -> u64 {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit/setrlimit with a valid pointer.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 && limit.rlim_cur < limit.rlim_max {
            limit.rlim_cur = limit.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &limit);
        }
    }
    limit.rlim_cur
}

/// The name a single node (clustering off) gives itself in cluster metadata, the reference's.
pub const SINGLE_NODE_NAME: &str = "iggy-node";

/// The node configuration a server's shards are opened with (the shard fields are set per shard).
pub fn node_config(config: &ServerConfig, tcp_port: u16, shards: u16) -> NodeConfig {
    let cluster = cluster_id(config);
    let journal = &config.system.journal;
    let mut metadata = Config::new(cluster, config.replica_count());
    metadata.journal_slots = journal.metadata_slots;
    metadata.prepare_size_max = journal.prepare_size_max;
    metadata.clients_max = METADATA_CLIENTS_MAX;
    let mut partition = metadata.clone();
    partition.journal_slots = journal.partition_slots;
    partition.clients_max = PARTITION_CLIENTS_MAX;
    metadata.validate();
    partition.validate();
    let replica = config.cluster.replica_id as usize;
    let roster = config
        .cluster
        .nodes
        .iter()
        .enumerate()
        .take(config.replica_count() as usize)
        .map(|(index, node)| wire::ClusterNode {
            // Clustering off, the reference reports itself under one fixed name, whatever its
            // roster says, and its clients (the Node SDK's tests) expect that name.
            name: if config.cluster.enabled { node.name.clone() } else { SINGLE_NODE_NAME.to_string() },
            ip: node.ip.clone(),
            // A single node reports the port it bound (which may have been 0 in the file).
            tcp_port: if index == replica && !config.cluster.enabled { tcp_port } else { node.ports.tcp as u16 },
            quic_port: node.ports.quic as u16,
            http_port: node.ports.http as u16,
            websocket_port: node.ports.websocket as u16,
            role: 0,
            status: 0,
        })
        .collect();
    NodeConfig {
        shard: ShardConfig {
            node: replica as u8,
            shard: 0,
            shards,
            metadata,
            partition,
            partitions_max: PARTITIONS_PER_SHARD_MAX,
        },
        connections_max: config.tcp.connections_max_per_shard as usize,
        cluster_name: config.cluster.name.clone(),
        roster,
        password_cost: PasswordCost::Production,
        min_free_bytes: config.system.min_free_bytes,
    }
}

/// The cluster's id, which every header between its replicas carries: from its name.
fn cluster_id(config: &ServerConfig) -> u128 {
    xxhash_rust::xxh3::xxh3_128(config.cluster.name.as_bytes()) | 1
}

/// A cluster node's replica plane: the replica listener, bound, and where its peers listen.
fn cluster_plane(config: &ServerConfig, empty_data_directory: bool) -> Result<Option<ClusterPlane>, String> {
    if !config.cluster.enabled || config.cluster.nodes.len() < 2 {
        return Ok(None);
    }
    let replica = config.cluster.replica_id as usize;
    let address = |index: usize| -> SocketAddr {
        let node = &config.cluster.nodes[index];
        SocketAddr::new(node.ip.parse().expect("validated"), node.ports.tcp_replica as u16)
    };
    let listener = match config.cluster.replica_listen_address.as_str() {
        "" => bind(&format!("cluster.nodes.{replica}.ports.tcp_replica"), address(replica))?,
        listen => bind("cluster.replica_listen_address", listen.parse().expect("validated"))?,
    };
    let peers = (0..config.cluster.nodes.len()).map(|index| (index != replica).then(|| address(index))).collect();
    let identity = LinkIdentity::new(
        cluster_id(config),
        replica as u8,
        config.replica_count(),
        config.roster_hash(),
        &config.cluster.auth.secret,
    );
    Ok(Some(ClusterPlane {
        identity,
        peers,
        listener: Mutex::new(Some(listener)),
        health: Arc::new(ClusterHealth::new(config.replica_count(), empty_data_directory)),
    }))
}

fn run(args: Args) -> Result<(), String> {
    let started = std::time::Instant::now();
    let env = environment()?;
    let path = args.config.clone().or_else(|| env_value(&env, ENV_CONFIG_PATH).map(PathBuf::from));
    let loaded = config::load(path.as_deref(), &env).map_err(|ConfigError(line)| line)?;
    let mut config = loaded.config;
    if let Some(replica_id) = args.replica_id {
        if replica_id as usize >= config.cluster.nodes.len().max(1) {
            return Err(format!(
                "--replica-id {replica_id}: the roster ([[cluster.nodes]]) has {} node(s)",
                config.cluster.nodes.len()
            ));
        }
        if replica_id != 0 && !config.cluster.enabled {
            return Err(format!("--replica-id {replica_id}: a single node is replica 0 (cluster.enabled is false)"));
        }
        config.cluster.replica_id = replica_id as u64;
    }
    let root = root_plan(&args, &env)?;
    if config.replica_count() > 1 && matches!(root, RootPlan::Set { generated: true, .. }) {
        return Err(format!(
            "a cluster node needs its root credentials given, the same on every node: set {ENV_ROOT_USERNAME} and {ENV_ROOT_PASSWORD}, or pass --with-default-root-credentials"
        ));
    }
    let data = config.system.path.clone();
    if args.fresh && data.exists() {
        if data.parent().is_none() || data.as_os_str() == "." {
            return Err(format!("--fresh: refusing to delete {}", data.display()));
        }
        std::fs::remove_dir_all(&data)
            .map_err(|error| format!("--fresh: cannot delete {}: {error}", data.display()))?;
    }
    // Nothing of the metadata group's: a first boot, or a node that lost its disk.
    let empty_data_directory = !data.join("metadata").exists();
    std::fs::create_dir_all(&data)
        .map_err(|error| format!("key `system.path`: cannot create {}: {error}", data.display()))?;
    let _lock = lock_data_directory(&data)?;
    init_logging(&config, &env)?;
    let tcp = if config.cluster.enabled {
        // A cluster node listens where its roster entry says: its peers and clients are told so.
        let replica = config.cluster.replica_id as usize;
        let node = &config.cluster.nodes[replica];
        let address = SocketAddr::new(node.ip.parse().expect("validated"), node.ports.tcp as u16);
        bind(&format!("cluster.nodes.{replica}.ports.tcp"), address)?
    } else {
        bind("tcp.address", config.tcp_address())?
    };
    let tcp_address = tcp.local_addr().map_err(|error| error.to_string())?;
    config.tcp.address = tcp_address.to_string();
    let http = if config.http.enabled {
        // A cluster node's HTTP port is its roster entry's (a backup sends linearizable reads
        // there), on the interface http.address names, as the reference binds it.
        let roster_http =
            config.cluster.enabled.then(|| config.cluster.nodes[config.cluster.replica_id as usize].ports.http);
        let (key, address) = match roster_http {
            Some(port) if port != 0 => (
                format!("cluster.nodes.{}.ports.http", config.cluster.replica_id),
                SocketAddr::new(config.http_address().ip(), port as u16),
            ),
            _ => ("http.address".to_string(), config.http_address()),
        };
        let listener = bind(&key, address)?;
        config.http.address = listener.local_addr().map_err(|error| error.to_string())?.to_string();
        Some(listener)
    } else {
        None
    };
    let cluster = cluster_plane(&config, empty_data_directory)?;
    let PortsTls { tcp: tcp_tls, http: http_tls, self_signed } = client_tls(&config, &data)?;
    let jwt_secret = if config.http.enabled { jwt_secret(&config, &data)? } else { Vec::new() };
    let open_files = raise_open_files_limit();
    let current = data.join("runtime").join("current_config.toml");
    std::fs::write(&current, config.to_toml_without_secrets())
        .map_err(|error| format!("cannot write {}: {error}", current.display()))?;
    let cpus = config.cpu_allocation().cpus();
    let shards = cpus.len() as u16;
    let overridden = if loaded.overridden.is_empty() {
        String::new()
    } else {
        format!(" (set by the environment: {})", loaded.overridden.join(", "))
    };
    println!("vireo-server {}", env!("CARGO_PKG_VERSION"));
    println!("listening on {tcp_address} ({})", if tcp_tls.is_some() { "tcp, tls" } else { "tcp" });
    if config.http.enabled {
        let scheme = if http_tls.is_some() { "https" } else { "http" };
        println!("metrics on {scheme}://{}{}", config.http.address, config.http.metrics_path);
    }
    if let Some(cert) = &self_signed {
        println!("tls certificate {} (self-signed, for localhost: give it to clients as their CA)", cert.display());
    }
    println!("data directory {}", data.display());
    println!("{shards} shard(s), pinned to cores {cpus:?}");
    if config.cluster.enabled {
        let replica = config.cluster.replica_id as usize;
        let node = &config.cluster.nodes[replica];
        println!(
            "cluster {}: replica {replica} ({}) of {}, replica links on {}:{}",
            config.cluster.name,
            node.name,
            config.cluster.nodes.len(),
            node.ip,
            node.ports.tcp_replica
        );
    }
    println!("config from {}{overridden}; effective config in {}", loaded.source, current.display());
    tracing::info!(address = %tcp_address, data = %data.display(), shards, open_files, "starting");

    let shutdown = Arc::new(AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        // A second signal while shutting down exits at once.
        signal_hook::flag::register_conditional_shutdown(signal, 1, shutdown.clone())
            .and_then(|_| signal_hook::flag::register(signal, shutdown.clone()))
            .map_err(|error| format!("cannot handle signal {signal}: {error}"))?;
    }
    let seed = u64::from_le_bytes(random_bytes::<8>()?);
    let shared = Arc::new(ServerShared {
        node: node_config(&config, tcp_address.port(), shards),
        config,
        tcp_listener: Mutex::new(Some(tcp)),
        http_listener: Mutex::new(http),
        stats: Arc::new((0..shards).map(|_| ShardStats::default()).collect()),
        shutdown,
        root,
        seed,
        cluster,
        empty_data_directory,
        shards_recovered: (0..shards).map(|_| AtomicBool::new(false)).collect(),
        started,
        tcp_tls,
        http_tls,
        http_tls_refused: AtomicU64::new(0),
        descriptors_refused: Arc::new(AtomicU64::new(0)),
        storage_failed: Mutex::new(None),
        jwt_secret,
    });
    let capacity = shared.config.system.sharding.inbox_capacity as usize;
    let results = run_shards(&cpus, capacity, move |context| {
        let shared = shared.clone();
        async move {
            let result = run_shard(context, shared.clone()).await;
            if result.is_err() {
                // One shard stopped: the others shut down too, and the process exits non-zero.
                shared.shutdown.store(true, std::sync::atomic::Ordering::SeqCst);
            }
            result
        }
    })
    .map_err(|error| format!("cannot start the shards: {error}"))?;
    // Whatever the groups wrote and did not need synced (topics without enforce_fsync) goes to
    // the device before the process says it stopped.
    vireo_io::glommio::flush_all_filesystems();
    for result in results {
        result?;
    }
    tracing::info!("stopped");
    println!("vireo-server stopped");
    Ok(())
}
