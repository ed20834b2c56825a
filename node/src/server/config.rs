//! vireo-server's configuration: the embedded default (`node/config.toml`), a TOML file over it,
//! `VIREO_*` environment variables over both, and the checks that turn every mistake into one
//! line naming the key and the reason (`ConfigError`), never a panic.
//!
//! The default file is also the schema: a key the default does not have is unknown, and a value
//! must have the default's type. Array-of-table elements (`[[cluster.nodes]]`) are checked, and
//! completed, against the default's first element.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use toml::{Table, Value};

use vireo_io::glommio::CpuAllocation;

/// The default configuration, embedded: used whole when no file is given.
pub const DEFAULT_CONFIG: &str = include_str!("../../config.toml");

/// What the environment variables begin with.
pub const ENV_PREFIX: &str = "VIREO_";
/// Variables with the prefix that are not configuration keys.
pub const ENV_CONFIG_PATH: &str = "VIREO_CONFIG_PATH";
pub const ENV_ROOT_USERNAME: &str = "VIREO_ROOT_USERNAME";
pub const ENV_ROOT_PASSWORD: &str = "VIREO_ROOT_PASSWORD";
const ENV_NOT_KEYS: [&str; 3] = [ENV_CONFIG_PATH, ENV_ROOT_USERNAME, ENV_ROOT_PASSWORD];

/// Keys whose values are secrets: left out when the effective configuration is written, masked in
/// errors.
const SECRET_KEYS: [&str; 2] = ["cluster.auth.secret", "http.jwt.secret"];

/// The replica links' secret has at least this many bytes when set.
pub const CLUSTER_SECRET_BYTES_MIN: usize = 32;
/// Nodes a cluster's roster has at most (VSR's replica count).
pub const CLUSTER_NODES_MAX: usize = 6;

/// A configuration that cannot be used, as the one line the server prints before it exits.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(pub String);

fn error(message: impl Into<String>) -> ConfigError {
    ConfigError(message.into())
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ServerConfig {
    pub system: SystemConfig,
    pub tcp: TcpConfig,
    pub http: HttpConfig,
    pub cluster: ClusterConfig,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SystemConfig {
    pub path: PathBuf,
    /// The free-space reserve (`disk_reserve`).
    pub min_free_bytes: u64,
    pub logging: LoggingConfig,
    pub sharding: ShardingConfig,
    pub journal: JournalConfig,
    pub segment: SegmentConfig,
    pub shutdown: ShutdownConfig,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SegmentConfig {
    pub direct_io: bool,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct LoggingConfig {
    pub level: String,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ShardingConfig {
    pub cpu_allocation: String,
    pub inbox_capacity: u64,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct JournalConfig {
    pub metadata_slots: u64,
    pub partition_slots: u64,
    pub prepare_size_max: u64,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ShutdownConfig {
    pub drain_timeout_ms: u64,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct TcpConfig {
    pub enabled: bool,
    pub address: String,
    pub connections_max_per_shard: u64,
    pub frame_size_max: u64,
    pub send_queue_bytes_max: u64,
    pub inbound_bytes_max: u64,
    pub tls: TlsConfig,
}

/// TLS on a port (`[tcp.tls]`, `[http.tls]`, as the reference names them): the certificate chain
/// and key files (PEM), or with `self_signed` and no `cert_file` on disk, a pair the node makes for
/// localhost once and keeps in its data directory (`tls::SELF_SIGNED_DIRECTORY`).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct TlsConfig {
    pub enabled: bool,
    pub self_signed: bool,
    pub cert_file: String,
    pub key_file: String,
    /// A connection that has not finished its handshake by then is closed.
    pub handshake_timeout_ms: u64,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct HttpConfig {
    pub enabled: bool,
    pub address: String,
    pub metrics_path: String,
    /// Bytes of one request's body at most (413 past it).
    pub max_request_size: u64,
    /// Serve the reference's Web UI at `/ui` (`server::web_ui`).
    pub web_ui: bool,
    /// The directory holding the Web UI's static build (`ci/web-ui.sh` makes one); relative to
    /// the server's working directory.
    pub web_ui_path: String,
    pub cors: CorsConfig,
    pub jwt: JwtConfig,
    pub tls: TlsConfig,
}

/// Cross-origin requests (`[http.cors]`, keyed as the reference's; mapped in `server::cors`).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct CorsConfig {
    pub enabled: bool,
    pub allowed_methods: Vec<String>,
    pub allowed_origins: Vec<String>,
    pub allowed_headers: Vec<String>,
    pub exposed_headers: Vec<String>,
    pub allow_credentials: bool,
    pub allow_private_network: bool,
}

/// The HTTP API's tokens (`[http.jwt]`).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct JwtConfig {
    /// How long a token is valid, in seconds.
    pub access_token_expiry_secs: u64,
    /// The HS256 key (at least 32 bytes); empty: one the node makes once and keeps in its data
    /// directory (`http/jwt.key`).
    pub secret: String,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ClusterConfig {
    pub enabled: bool,
    pub name: String,
    /// This node's place in `nodes` (a cluster node only).
    pub replica_id: u64,
    /// Where this node listens for its peers if not at its roster address (empty: there).
    pub replica_listen_address: String,
    pub nodes: Vec<ClusterNodeConfig>,
    pub auth: ClusterAuthConfig,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ClusterNodeConfig {
    pub name: String,
    pub ip: String,
    pub replica_id: u64,
    pub ports: NodePorts,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct NodePorts {
    pub tcp: u64,
    pub quic: u64,
    pub http: u64,
    pub websocket: u64,
    pub tcp_replica: u64,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ClusterAuthConfig {
    pub secret: String,
}

/// Where the configuration came from, for the startup banner.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ConfigSource {
    Embedded,
    File(PathBuf),
}

impl std::fmt::Display for ConfigSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ConfigSource::Embedded => f.write_str("the embedded default"),
            ConfigSource::File(path) => write!(f, "{}", path.display()),
        }
    }
}

/// A configuration as loaded: the values, where they came from, and which keys the
/// environment set.
#[derive(Clone, Debug)]
pub struct LoadedConfig {
    pub config: ServerConfig,
    pub source: ConfigSource,
    pub overridden: Vec<String>,
}

impl ServerConfig {
    /// The embedded default as a `ServerConfig`.
    pub fn embedded() -> ServerConfig {
        load_from(None, "", &[]).expect("the embedded default is valid").config
    }

    pub fn tcp_address(&self) -> SocketAddr {
        self.tcp.address.parse().expect("validated")
    }

    pub fn http_address(&self) -> SocketAddr {
        self.http.address.parse().expect("validated")
    }

    /// The roster's fingerprint: what two nodes compare when they link (names, addresses and
    /// ports of every node, in order, and the cluster's name). This node's `replica_id` is not in
    /// it: it is the one thing that differs between nodes.
    pub fn roster_hash(&self) -> u64 {
        let mut canonical = format!("{}\n", self.cluster.name);
        for node in &self.cluster.nodes {
            let ports = &node.ports;
            canonical.push_str(&format!(
                "{} {} {} {} {} {} {} {}\n",
                node.replica_id,
                node.name,
                node.ip,
                ports.tcp,
                ports.quic,
                ports.http,
                ports.websocket,
                ports.tcp_replica
            ));
        }
        xxhash_rust::xxh3::xxh3_64(canonical.as_bytes())
    }

    /// The nodes of the cluster (a single node when clustering is off: the roster's first entry).
    pub fn replica_count(&self) -> u8 {
        if self.cluster.enabled {
            self.cluster.nodes.len() as u8
        } else {
            1
        }
    }

    pub fn cpu_allocation(&self) -> CpuAllocation {
        parse_cpu_allocation(&self.system.sharding.cpu_allocation).expect("validated")
    }

    /// The configuration as TOML with every secret masked (what `current_config.toml` holds).
    pub fn to_toml_without_secrets(&self) -> String {
        let mut value = Value::try_from(self).expect("a config serializes");
        for key in SECRET_KEYS {
            if let Some(Value::String(secret)) = lookup_mut(&mut value, key) {
                // Left out, not masked: the file stays a valid config (an empty secret is "none").
                secret.clear();
            }
        }
        toml::to_string(&value).expect("a config serializes")
    }
}

/// Loads the configuration: the file at `path` (or the embedded default) with the `VIREO_*`
/// variables of `env` over it, checked.
pub fn load(path: Option<&Path>, env: &[(String, String)]) -> Result<LoadedConfig, ConfigError> {
    match path {
        None => load_from(None, DEFAULT_CONFIG, env),
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .map_err(|reason| error(format!("cannot read the config file {}: {reason}", path.display())))?;
            load_from(Some(path), &text, env)
        }
    }
}

/// `load` from a file's text (`path` only names it in errors; `None`: the embedded default).
pub fn load_from(path: Option<&Path>, text: &str, env: &[(String, String)]) -> Result<LoadedConfig, ConfigError> {
    let default: Table = DEFAULT_CONFIG.parse().expect("the embedded default is TOML");
    let source = path.map_or(ConfigSource::Embedded, |path| ConfigSource::File(path.to_path_buf()));
    let mut merged = Value::Table(default.clone());
    if path.is_some() {
        let file: Table = text.parse().map_err(|parse: toml::de::Error| {
            let line = parse.span().map(|span| text[..span.start].lines().count().max(1));
            let at = line.map_or(String::new(), |line| format!(" line {line}"));
            error(format!("config {source}{at}: not valid TOML: {}", one_line(parse.message())))
        })?;
        merge(&mut merged, &Value::Table(file), &Value::Table(default.clone()), "", &source)?;
    }
    let overridden = apply_env(&mut merged, env)?;
    let config = ServerConfig::deserialize(merged)
        .map_err(|reason| error(format!("config {source}: {}", one_line(&reason.to_string()))))?;
    validate(&config)?;
    Ok(LoadedConfig { config, source, overridden })
}

/// A message of several lines as one (the parser's explanations span lines).
fn one_line(message: &str) -> String {
    message.lines().map(str::trim).filter(|line| !line.is_empty()).collect::<Vec<_>>().join("; ")
}

fn type_name(value: &Value) -> &'static str {
    match value {
        Value::String(_) => "a string",
        Value::Integer(_) => "an integer",
        Value::Float(_) => "a number",
        Value::Boolean(_) => "a boolean",
        Value::Datetime(_) => "a date",
        Value::Array(_) => "an array",
        Value::Table(_) => "a table",
    }
}

fn join(prefix: &str, key: &str) -> String {
    if prefix.is_empty() {
        key.to_string()
    } else {
        format!("{prefix}.{key}")
    }
}

/// Writes `file` over `into`, each key checked against `schema` (the default's value there).
fn merge(into: &mut Value, file: &Value, schema: &Value, at: &str, source: &ConfigSource) -> Result<(), ConfigError> {
    match (schema, file) {
        (Value::Table(schema), Value::Table(file)) => {
            let Value::Table(into) = into else { unreachable!("merged like the schema") };
            for (key, value) in file {
                let path = join(at, key);
                let Some(expected) = schema.get(key) else {
                    return Err(error(format!("config {source}: unknown key `{path}`")));
                };
                let slot = into.entry(key.clone()).or_insert_with(|| expected.clone());
                merge(slot, value, expected, &path, source)?;
            }
            Ok(())
        }
        (Value::Array(schema), Value::Array(file)) => {
            let element_schema = schema.first();
            let mut elements = Vec::with_capacity(file.len());
            for (index, element) in file.iter().enumerate() {
                let path = format!("{at}.{index}");
                match element_schema {
                    Some(element_schema @ Value::Table(_)) => {
                        let mut merged = element_schema.clone();
                        merge(&mut merged, element, element_schema, &path, source)?;
                        elements.push(merged);
                    }
                    Some(element_schema) => {
                        if std::mem::discriminant(element_schema) != std::mem::discriminant(element) {
                            return Err(error(format!(
                                "config {source}: key `{path}`: expected {}, found {}",
                                type_name(element_schema),
                                type_name(element)
                            )));
                        }
                        elements.push(element.clone());
                    }
                    None => elements.push(element.clone()),
                }
            }
            *into = Value::Array(elements);
            Ok(())
        }
        (schema, file) if std::mem::discriminant(schema) == std::mem::discriminant(file) => {
            *into = file.clone();
            Ok(())
        }
        (schema, file) => Err(error(format!(
            "config {source}: key `{at}`: expected {}, found {}",
            type_name(schema),
            type_name(file)
        ))),
    }
}

/// Every leaf of `value` with its dotted path (array elements by index).
fn leaves(value: &Value, at: &str, out: &mut Vec<(String, Value)>) {
    match value {
        Value::Table(table) => {
            for (key, value) in table {
                leaves(value, &join(at, key), out);
            }
        }
        Value::Array(array) if array.iter().all(|element| element.is_table()) && !array.is_empty() => {
            for (index, element) in array.iter().enumerate() {
                leaves(element, &format!("{at}.{index}"), out);
            }
        }
        leaf => out.push((at.to_string(), leaf.clone())),
    }
}

/// The variable that overrides the key at `path`.
pub fn env_name(path: &str) -> String {
    format!("{ENV_PREFIX}{}", path.replace(['.', '-'], "_").to_uppercase())
}

fn lookup_mut<'a>(value: &'a mut Value, path: &str) -> Option<&'a mut Value> {
    let mut at = value;
    for part in path.split('.') {
        at = match at {
            Value::Table(table) => table.get_mut(part)?,
            Value::Array(array) => array.get_mut(part.parse::<usize>().ok()?)?,
            _ => return None,
        };
    }
    Some(at)
}

/// Applies the `VIREO_*` variables; returns the keys they set.
fn apply_env(merged: &mut Value, env: &[(String, String)]) -> Result<Vec<String>, ConfigError> {
    let mut known = Vec::new();
    leaves(merged, "", &mut known);
    let by_env: BTreeMap<String, (String, Value)> =
        known.into_iter().map(|(path, value)| (env_name(&path), (path, value))).collect();
    let mut overridden = Vec::new();
    let mut variables: Vec<&(String, String)> = env.iter().filter(|(name, _)| name.starts_with(ENV_PREFIX)).collect();
    variables.sort();
    for (name, raw) in variables {
        if ENV_NOT_KEYS.contains(&name.as_str()) {
            continue;
        }
        let Some((path, current)) = by_env.get(name) else {
            return Err(error(format!("environment variable {name}: unknown key (no configuration key is named so)")));
        };
        let secret = SECRET_KEYS.contains(&path.as_str());
        let shown = if secret { "<secret>".to_string() } else { format!("`{raw}`") };
        let value =
            match current {
                Value::String(_) => Value::String(raw.clone()),
                Value::Integer(_) => raw.trim().parse::<i64>().map(Value::Integer).map_err(|_| {
                    error(format!("environment variable {name} (key `{path}`): {shown} is not an integer"))
                })?,
                Value::Boolean(_) => match raw.trim() {
                    "true" => Value::Boolean(true),
                    "false" => Value::Boolean(false),
                    _ => {
                        return Err(error(format!(
                            "environment variable {name} (key `{path}`): {shown} is not true or false"
                        )))
                    }
                },
                Value::Float(_) => raw.trim().parse::<f64>().map(Value::Float).map_err(|_| {
                    error(format!("environment variable {name} (key `{path}`): {shown} is not a number"))
                })?,
                other => {
                    return Err(error(format!(
                        "environment variable {name} (key `{path}`): {} cannot be set from the environment",
                        type_name(other)
                    )))
                }
            };
        *lookup_mut(merged, path).expect("a known leaf") = value;
        overridden.push(path.clone());
    }
    Ok(overridden)
}

/// `all`, `numa:auto`, a count `N` or a range `a..b`.
pub fn parse_cpu_allocation(text: &str) -> Result<CpuAllocation, String> {
    let text = text.trim();
    match text {
        "all" => return Ok(CpuAllocation::All),
        // One machine's NUMA nodes together hold every online core: the shards take them all.
        "numa:auto" => return Ok(CpuAllocation::All),
        _ => {}
    }
    if let Some((start, end)) = text.split_once("..") {
        let (start, end) = match (start.trim().parse::<usize>(), end.trim().parse::<usize>()) {
            (Ok(start), Ok(end)) => (start, end),
            _ => return Err(format!("`{text}` is not a range of core numbers like 0..2")),
        };
        let online = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
        if start >= end || end > online {
            return Err(format!("`{text}` must name cores within 0..{online}, start below end"));
        }
        return Ok(CpuAllocation::Range(start, end));
    }
    match text.parse::<usize>() {
        Ok(0) => Err("0 shards: at least one core must run a shard".to_string()),
        Ok(count) => {
            let online = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
            if count > online {
                return Err(format!("{count} shards but {online} cores are online"));
            }
            Ok(CpuAllocation::Count(count))
        }
        Err(_) => Err(format!("`{text}` is not all, numa:auto, a count or a range a..b")),
    }
}

fn validate(config: &ServerConfig) -> Result<(), ConfigError> {
    let key = |key: &str, reason: String| error(format!("key `{key}`: {reason}"));
    let address = |name: &str, text: &str| {
        text.parse::<SocketAddr>()
            .map(|_| ())
            .map_err(|_| key(name, format!("`{text}` is not an IP address and port like 127.0.0.1:8090")))
    };
    if config.system.path.as_os_str().is_empty() {
        return Err(key("system.path", "the data directory must be named".to_string()));
    }
    tracing_subscriber::EnvFilter::try_new(&config.system.logging.level).map_err(|reason| {
        key("system.logging.level", format!("`{}` is not a log filter: {reason}", config.system.logging.level))
    })?;
    parse_cpu_allocation(&config.system.sharding.cpu_allocation)
        .map_err(|reason| key("system.sharding.cpu_allocation", reason))?;
    let inbox = config.system.sharding.inbox_capacity;
    if !(1..=1 << 20).contains(&inbox) {
        return Err(key("system.sharding.inbox_capacity", format!("{inbox} is outside 1..=1048576")));
    }
    let journal = &config.system.journal;
    for (name, slots) in [
        ("system.journal.metadata_slots", journal.metadata_slots),
        ("system.journal.partition_slots", journal.partition_slots),
    ] {
        if !(64..=1 << 16).contains(&slots) {
            return Err(key(name, format!("{slots} slots is outside 64..=65536")));
        }
    }
    let prepare = journal.prepare_size_max;
    if !(64 << 10..=config.tcp.frame_size_max).contains(&prepare) || !prepare.is_multiple_of(256) {
        return Err(key(
            "system.journal.prepare_size_max",
            format!(
                "{prepare} must be a multiple of 256 from 65536 up to tcp.frame_size_max ({})",
                config.tcp.frame_size_max
            ),
        ));
    }
    if config.tcp.enabled {
        address("tcp.address", &config.tcp.address)?;
    } else {
        return Err(key(
            "tcp.enabled",
            "false leaves no way for a client to connect: TCP is the only transport".to_string(),
        ));
    }
    let connections = config.tcp.connections_max_per_shard;
    if !(1..=1_000_000).contains(&connections) {
        return Err(key("tcp.connections_max_per_shard", format!("{connections} is outside 1..=1000000")));
    }
    let frame = config.tcp.frame_size_max;
    if !(4096..=64 << 20).contains(&frame) {
        return Err(key("tcp.frame_size_max", format!("{frame} is outside 4096..=67108864 (64 MiB)")));
    }
    if config.tcp.send_queue_bytes_max < 1 << 20 {
        return Err(key("tcp.send_queue_bytes_max", format!("{} is below 1 MiB", config.tcp.send_queue_bytes_max)));
    }
    if config.tcp.inbound_bytes_max < frame {
        return Err(key(
            "tcp.inbound_bytes_max",
            format!("{} is below tcp.frame_size_max ({frame})", config.tcp.inbound_bytes_max),
        ));
    }
    for (section, tls) in [("tcp.tls", &config.tcp.tls), ("http.tls", &config.http.tls)] {
        if !tls.enabled {
            continue;
        }
        if !tls.self_signed && (tls.cert_file.is_empty() || tls.key_file.is_empty()) {
            return Err(key(
                &format!("{section}.cert_file"),
                "TLS without self_signed needs cert_file and key_file (PEM files)".to_string(),
            ));
        }
        if !(100..=600_000).contains(&tls.handshake_timeout_ms) {
            return Err(key(
                &format!("{section}.handshake_timeout_ms"),
                format!("{} is outside 100..=600000", tls.handshake_timeout_ms),
            ));
        }
    }
    if config.http.enabled {
        address("http.address", &config.http.address)?;
        let expiry = config.http.jwt.access_token_expiry_secs;
        if !(1..=366 * 24 * 3600).contains(&expiry) {
            return Err(key("http.jwt.access_token_expiry_secs", format!("{expiry} is outside 1..=31622400 (a year)")));
        }
        if !config.http.jwt.secret.is_empty() && config.http.jwt.secret.len() < 32 {
            return Err(key("http.jwt.secret", "must be at least 32 bytes (or empty: the node makes one)".to_string()));
        }
        let body = config.http.max_request_size;
        if !(1 << 10..=64 << 20).contains(&body) {
            return Err(key("http.max_request_size", format!("{body} is outside 1024..=67108864 (64 MiB)")));
        }
        crate::server::cors::layer(&config.http.cors).map_err(|message| {
            let (name, reason) = message.split_once(": ").unwrap_or(("http.cors", message.as_str()));
            key(name, reason.to_string())
        })?;
        if !config.http.metrics_path.starts_with('/') {
            return Err(key("http.metrics_path", format!("`{}` must start with /", config.http.metrics_path)));
        }
    }
    if config.cluster.name.is_empty() || config.cluster.name.len() > 255 {
        return Err(key("cluster.name", "must be 1 to 255 bytes".to_string()));
    }
    for (index, node) in config.cluster.nodes.iter().enumerate() {
        if node.ip.parse::<std::net::IpAddr>().is_err() {
            return Err(key(&format!("cluster.nodes.{index}.ip"), format!("`{}` is not an IP address", node.ip)));
        }
        for (port, value) in [
            ("tcp", node.ports.tcp),
            ("quic", node.ports.quic),
            ("http", node.ports.http),
            ("websocket", node.ports.websocket),
            ("tcp_replica", node.ports.tcp_replica),
        ] {
            if value > u16::MAX as u64 {
                return Err(key(&format!("cluster.nodes.{index}.ports.{port}"), format!("{value} is not a port")));
            }
        }
        if node.replica_id != index as u64 {
            return Err(key(
                &format!("cluster.nodes.{index}.replica_id"),
                format!("{} must be the node's place in the roster, {index}", node.replica_id),
            ));
        }
    }
    let secret = &config.cluster.auth.secret;
    if !secret.is_empty() && secret.len() < CLUSTER_SECRET_BYTES_MIN {
        return Err(key("cluster.auth.secret", format!("must be at least {CLUSTER_SECRET_BYTES_MIN} bytes")));
    }
    if config.cluster.enabled {
        let nodes = &config.cluster.nodes;
        if !(1..=CLUSTER_NODES_MAX).contains(&nodes.len()) {
            return Err(key("cluster.nodes", format!("{} nodes: a cluster has 1 to {CLUSTER_NODES_MAX}", nodes.len())));
        }
        if config.cluster.replica_id >= nodes.len() as u64 {
            return Err(key(
                "cluster.replica_id",
                format!(
                    "{} is not in the roster ([[cluster.nodes]] has {} nodes)",
                    config.cluster.replica_id,
                    nodes.len()
                ),
            ));
        }
        if nodes.len() > 1 && secret.is_empty() {
            return Err(key(
                "cluster.auth.secret",
                "must be set (the same on every node) for a cluster of more than one node".to_string(),
            ));
        }
        let mut seen = std::collections::BTreeSet::new();
        for (index, node) in nodes.iter().enumerate() {
            for (port, value) in [("tcp", node.ports.tcp), ("tcp_replica", node.ports.tcp_replica)] {
                if value == 0 {
                    return Err(key(
                        &format!("cluster.nodes.{index}.ports.{port}"),
                        "0: a cluster node's ports are fixed (its peers and clients are told them)".to_string(),
                    ));
                }
                if !seen.insert((node.ip.clone(), value)) {
                    return Err(key(
                        &format!("cluster.nodes.{index}.ports.{port}"),
                        format!("{}:{value} is used twice in the roster", node.ip),
                    ));
                }
            }
        }
        let listen = &config.cluster.replica_listen_address;
        if !listen.is_empty() {
            address("cluster.replica_listen_address", listen)?;
        }
    } else if config.cluster.replica_id != 0 {
        return Err(key("cluster.replica_id", "must be 0 when cluster.enabled is false".to_string()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs.iter().map(|(name, value)| (name.to_string(), value.to_string())).collect()
    }

    fn file_error(text: &str) -> String {
        load_from(Some(Path::new("bad.toml")), text, &[]).unwrap_err().0
    }

    #[test]
    fn the_embedded_default_is_the_reference_shape() {
        let config = ServerConfig::embedded();
        assert_eq!(config.tcp.address, "127.0.0.1:8090");
        assert_eq!(config.system.path, PathBuf::from("local_data"));
        assert_eq!(config.cluster.nodes[0].ports.tcp_replica, 9090);
        let mut names: Vec<(String, Value)> = Vec::new();
        let value = Value::try_from(&config).unwrap();
        leaves(&value, "", &mut names);
        let mut env_names: Vec<String> = names.iter().map(|(path, _)| env_name(path)).collect();
        let count = env_names.len();
        env_names.sort();
        env_names.dedup();
        assert_eq!(env_names.len(), count, "two keys share an environment variable");
        assert!(env_names.contains(&"VIREO_SYSTEM_SHARDING_CPU_ALLOCATION".to_string()));
        assert!(env_names.contains(&"VIREO_CLUSTER_NODES_0_PORTS_TCP_REPLICA".to_string()));
    }

    #[test]
    fn environment_variables_override_keys_by_their_paths() {
        let loaded = load_from(
            None,
            "",
            &env(&[
                ("VIREO_TCP_ADDRESS", "127.0.0.1:9999"),
                ("VIREO_SYSTEM_SHARDING_CPU_ALLOCATION", "1"),
                ("VIREO_CLUSTER_NODES_0_PORTS_TCP_REPLICA", "9191"),
                ("VIREO_HTTP_ENABLED", "false"),
                ("VIREO_ROOT_PASSWORD", "not a key"),
                ("PATH", "/bin"),
            ]),
        )
        .unwrap();
        assert_eq!(loaded.config.tcp.address, "127.0.0.1:9999");
        assert_eq!(loaded.config.system.sharding.cpu_allocation, "1");
        assert_eq!(loaded.config.cluster.nodes[0].ports.tcp_replica, 9191);
        assert!(!loaded.config.http.enabled);
        assert_eq!(loaded.overridden.len(), 4);
    }

    #[test]
    fn every_mistake_is_one_line_naming_the_key() {
        let unknown = load_from(None, "", &env(&[("VIREO_TCP_ADRESS", "x")])).unwrap_err().0;
        assert_eq!(unknown, "environment variable VIREO_TCP_ADRESS: unknown key (no configuration key is named so)");
        let not_integer = load_from(None, "", &env(&[("VIREO_TCP_FRAME_SIZE_MAX", "big")])).unwrap_err().0;
        assert!(
            not_integer.contains("key `tcp.frame_size_max`") && not_integer.contains("not an integer"),
            "{not_integer}"
        );
        assert_eq!(file_error("[tcp]\nadress = \"x\"\n"), "config bad.toml: unknown key `tcp.adress`");
        assert_eq!(
            file_error("[tcp]\nframe_size_max = \"64MB\"\n"),
            "config bad.toml: key `tcp.frame_size_max`: expected an integer, found a string"
        );
        assert!(file_error("[tcp\n").starts_with("config bad.toml line 1: not valid TOML"));
        assert!(
            file_error("[tcp]\naddress = \"localhost\"\n").starts_with("key `tcp.address`: `localhost` is not an IP")
        );
        assert!(file_error("[system.sharding]\ncpu_allocation = \"most\"\n")
            .starts_with("key `system.sharding.cpu_allocation`"));
        assert!(file_error("[system.sharding]\ncpu_allocation = \"0\"\n").contains("at least one core"));
        assert!(file_error("[cluster]\nenabled = true\nreplica_id = 1\n").starts_with("key `cluster.replica_id`"));
        assert!(file_error("[cluster]\nreplica_id = 1\n").starts_with("key `cluster.replica_id`"));
        assert!(file_error("[cluster.auth]\nsecret = \"short\"\n").starts_with("key `cluster.auth.secret`"));
        assert!(file_error("[[cluster.nodes]]\nname = \"a\"\nip = \"1.2.3\"\n").starts_with("key `cluster.nodes.0.ip`"));
        for message in [unknown, not_integer] {
            assert!(!message.contains('\n'));
        }
    }

    #[test]
    fn a_file_overrides_part_of_the_default_and_array_elements_are_completed() {
        let text = "[system]\npath = \"/tmp/v\"\n[[cluster.nodes]]\nname = \"a\"\nip = \"127.0.0.1\"\nreplica_id = 0\n";
        let config = load_from(Some(Path::new("f.toml")), text, &[]).unwrap().config;
        assert_eq!(config.system.path, PathBuf::from("/tmp/v"));
        assert_eq!(config.system.logging.level, "info");
        assert_eq!(config.cluster.nodes.len(), 1);
        assert_eq!(config.cluster.nodes[0].name, "a");
        assert_eq!(config.cluster.nodes[0].ports.tcp, 8090);
    }

    #[test]
    fn the_written_config_holds_no_secret() {
        let secret = "s".repeat(40);
        let config = load_from(None, "", &env(&[("VIREO_CLUSTER_AUTH_SECRET", &secret)])).unwrap().config;
        let written = config.to_toml_without_secrets();
        assert!(!written.contains(&secret));
        let reread = load_from(Some(Path::new("current_config.toml")), &written, &[]).unwrap().config;
        assert_eq!(reread.tcp, config.tcp);
    }
}
