//! A cluster of vireo-server processes on 127.0.0.1 for the fault tests: configs from
//! `vireo-cluster --configs-only`, one `Server` per node (killed when dropped), and a replica-link
//! proxy in front of every node that the test cuts and heals. The proxy reads the handshake's
//! hello (`replica_links`: the dialer's replica id is byte 24) so it knows which link each
//! connection is, and a cut of a node closes every link to and from it and refuses new ones.
//!
//! The workload (`Workload`) is the Jepsen Kafka one, through the Iggy SDK: producers pinned to
//! partitions, consumers polling each partition by offset, every observation fed to the
//! simulator's `KafkaLogChecker`, and a final read of every partition at the end.

#![allow(dead_code)]

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Command;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use iggy::prelude::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use vireo_sim::kafka_log::{KafkaLogChecker, PartitionKey};

use crate::server_process::{data_dir, Server};

pub const CLUSTER: &str = env!("CARGO_BIN_EXE_vireo-cluster");
const CHALLENGE_SIZE: usize = 48;
const HELLO_SIZE: usize = 96;

/// Which directed links (from, to) are cut now.
#[derive(Default)]
pub struct Cuts {
    cut: Mutex<BTreeSet<(u8, u8)>>,
    generation: AtomicU64,
    /// Links the proxies closed or refused because they were cut (a cut that did nothing would
    /// prove nothing).
    pub severed: AtomicU64,
}

impl Cuts {
    pub fn isolate(&self, node: u8, count: u8) {
        let mut cut = self.cut.lock().unwrap();
        for other in (0..count).filter(|other| *other != node) {
            cut.insert((node, other));
            cut.insert((other, node));
        }
        self.generation.fetch_add(1, Ordering::SeqCst);
    }

    pub fn heal(&self) {
        self.cut.lock().unwrap().clear();
        self.generation.fetch_add(1, Ordering::SeqCst);
    }

    fn is_cut(&self, from: u8, to: u8) -> bool {
        self.cut.lock().unwrap().contains(&(from, to))
    }
}

pub struct Node {
    pub server: Option<Server>,
    pub config: PathBuf,
    pub data: PathBuf,
    pub client: SocketAddr,
    /// Where the node itself listens for its peers (behind its proxy).
    pub replica_listen: SocketAddr,
    /// Its roster's replica address, where its proxy listens.
    pub roster_replica: SocketAddr,
}

pub struct Cluster {
    pub nodes: Vec<Node>,
    pub cuts: Arc<Cuts>,
    name: String,
}

/// Every port this test process has handed out: what `free_port` picked and what
/// `vireo-cluster` wrote into the rosters. A port is free when it is checked but is bound only
/// later (by a node, or by a proxy after the configs are read), so without this two clusters
/// of concurrent tests could be given the same port: CI once saw a proxy of one test sit on
/// the replica port another test's node was about to bind.
static HANDED_OUT: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());

/// How many times the configs are written again when `vireo-cluster` picked a port this process
/// already handed out (it picks from the same range in another process).
const CONFIG_ATTEMPTS: usize = 20;

/// A free port below the kernel's ephemeral range (as vireo-cluster picks them), so that no
/// outgoing connection takes it between now and the node's bind, and never one this process
/// handed out before. Each call moves on from the last, from a start that differs between test
/// processes.
fn free_port(handed_out: &mut BTreeSet<u16>) -> u16 {
    use std::sync::atomic::AtomicU32;
    const FIRST: u32 = 10_000;
    const SPAN: u32 = 22_000;
    static NEXT: AtomicU32 = AtomicU32::new(u32::MAX);
    let _ = NEXT.compare_exchange(
        u32::MAX,
        std::process::id().wrapping_mul(7919) % SPAN,
        Ordering::SeqCst,
        Ordering::SeqCst,
    );
    for _ in 0..SPAN {
        let port = (FIRST + NEXT.fetch_add(1, Ordering::SeqCst) % SPAN) as u16;
        if !handed_out.contains(&port) && std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            handed_out.insert(port);
            return port;
        }
    }
    panic!("no free port on 127.0.0.1 between {FIRST} and {}", FIRST + SPAN);
}

/// One node's place in the configs `vireo-cluster --configs-only` wrote.
struct Placement {
    config: PathBuf,
    client: SocketAddr,
    roster_replica: SocketAddr,
    replica_listen: SocketAddr,
}

/// Writes the configs of `count` nodes into `dir` (again, while `vireo-cluster` picks a port
/// this process already handed out) and picks each node's own replica port; every port is
/// recorded as handed out before the lock is let go.
fn place_nodes(dir: &std::path::Path, count: u8) -> Vec<Placement> {
    let mut handed_out = HANDED_OUT.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    for _ in 0..CONFIG_ATTEMPTS {
        let output = Command::new(CLUSTER)
            .args(["--configs-only", "--nodes", &count.to_string(), "--dir"])
            .arg(dir)
            .output()
            .expect("vireo-cluster runs");
        assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
        let text = String::from_utf8(output.stdout).unwrap();
        let mut placements = Vec::new();
        for line in text.lines().filter(|line| line.starts_with("node ")) {
            let field = |name: &str| line.split(name).nth(1).unwrap().split([',', ' ']).next().unwrap().to_string();
            let client: SocketAddr = field("clients ").parse().unwrap();
            let roster_replica: SocketAddr = field("replicas ").parse().unwrap();
            let http: SocketAddr = field("metrics http://").trim_end_matches("/metrics").parse().unwrap();
            let config = PathBuf::from(line.rsplit("config ").next().unwrap());
            placements.push((config, client, roster_replica, http));
        }
        assert_eq!(placements.len(), count as usize);
        let roster_ports: Vec<u16> = placements
            .iter()
            .flat_map(|(_, client, replica, http)| [client.port(), replica.port(), http.port()])
            .collect();
        if roster_ports.iter().any(|port| handed_out.contains(port)) {
            continue;
        }
        handed_out.extend(roster_ports);
        return placements
            .into_iter()
            .map(|(config, client, roster_replica, _)| {
                let replica_listen = format!("127.0.0.1:{}", free_port(&mut handed_out)).parse().unwrap();
                Placement { config, client, roster_replica, replica_listen }
            })
            .collect();
    }
    panic!("vireo-cluster picked a port this test process had handed out {CONFIG_ATTEMPTS} times in a row");
}

impl Cluster {
    /// Writes the configs for `count` nodes and starts a proxy in front of each node's replica
    /// port; no node runs yet.
    pub async fn new(name: &str, count: u8) -> Cluster {
        let dir = data_dir(name);
        let cuts = Arc::new(Cuts::default());
        let mut nodes = Vec::new();
        for (index, placement) in place_nodes(&dir, count).into_iter().enumerate() {
            let Placement { config, client, roster_replica, replica_listen } = placement;
            let listener = tokio::net::TcpListener::bind(roster_replica).await.expect("the proxy's port");
            tokio::spawn(proxy(listener, index as u8, replica_listen, cuts.clone()));
            let data = dir.join(format!("node-{index}"));
            nodes.push(Node { server: None, config, data, client, replica_listen, roster_replica });
        }
        Cluster { nodes, cuts, name: name.to_string() }
    }

    pub fn start(&mut self, index: usize) {
        self.start_node(index, &[], &["--with-default-root-credentials"]);
    }

    /// Node `index` keeps its data in `data` from its next start (a loop mount, say).
    pub fn set_data(&mut self, index: usize, data: PathBuf) {
        self.nodes[index].data = data;
    }

    /// Node `index`'s process, while it runs.
    pub fn server(&mut self, index: usize) -> Option<&mut Server> {
        self.nodes[index].server.as_mut()
    }

    /// Starts node `index` with more `VIREO_` variables (a wrong secret, another roster).
    pub fn start_with_env(&mut self, index: usize, env: &[(&str, &str)]) {
        self.start_node(index, env, &["--with-default-root-credentials"]);
    }

    /// Starts node `index` with `env` and `flags` besides its config and replica id.
    pub fn start_node(&mut self, index: usize, env: &[(&str, &str)], flags: &[&str]) {
        let node = &mut self.nodes[index];
        let listen = node.replica_listen.to_string();
        let config = node.config.to_string_lossy().to_string();
        let replica = index.to_string();
        let mut all =
            vec![("VIREO_CONFIG_PATH", config.as_str()), ("VIREO_CLUSTER_REPLICA_LISTEN_ADDRESS", listen.as_str())];
        all.extend_from_slice(env);
        let mut args = vec!["--replica-id", replica.as_str()];
        args.extend_from_slice(flags);
        node.server = Some(Server::start_with(&node.data, &all, &args));
    }

    /// Where the roster says node `index` takes its peers' links (its proxy).
    pub fn replica_address(&self, index: usize) -> SocketAddr {
        self.nodes[index].roster_replica
    }

    pub fn start_all(&mut self) {
        for index in 0..self.nodes.len() {
            self.start(index);
        }
    }

    pub fn kill(&mut self, index: usize) {
        if let Some(mut server) = self.nodes[index].server.take() {
            server.kill();
        }
    }

    pub fn signal(&self, index: usize, signal: i32) {
        let pid = self.nodes[index].server.as_ref().expect("running").pid();
        // SAFETY: kill(2) on a child of this test.
        unsafe { libc::kill(pid, signal) };
    }

    /// Bytes of segment files a node's data directory holds (what a node that came back empty
    /// got back from its peers).
    pub fn segment_bytes(&self, index: usize) -> u64 {
        fn walk(path: &std::path::Path) -> u64 {
            let Ok(entries) = std::fs::read_dir(path) else { return 0 };
            entries
                .flatten()
                .map(|entry| {
                    let path = entry.path();
                    if path.is_dir() {
                        walk(&path)
                    } else if path.extension().is_some_and(|extension| extension == "log") {
                        entry.metadata().map_or(0, |metadata| metadata.len())
                    } else {
                        0
                    }
                })
                .sum()
        }
        walk(&self.nodes[index].data.join("streams"))
    }

    pub fn addresses(&self) -> Vec<SocketAddr> {
        self.nodes.iter().map(|node| node.client).collect()
    }

    /// The node get_cluster_metadata names the leader, asked of every node in turn (bounded).
    pub async fn leader(&self) -> usize {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            for address in self.addresses() {
                let asked = async {
                    let client = connect(address).await?;
                    let metadata = client.get_cluster_metadata().await?;
                    let leader = metadata
                        .nodes
                        .iter()
                        .find(|node| node.role == ClusterNodeRole::Leader && node.status == ClusterNodeStatus::Healthy);
                    Ok::<_, IggyError>(leader.map(|node| node.endpoints.tcp))
                };
                if let Ok(Ok(Some(port))) = tokio::time::timeout(Duration::from_secs(3), asked).await {
                    if let Some(index) = self.nodes.iter().position(|node| node.client.port() == port) {
                        return index;
                    }
                }
            }
            assert!(Instant::now() < deadline, "no node names a leader");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

/// The proxy in front of node `to`'s replica port.
async fn proxy(listener: tokio::net::TcpListener, to: u8, upstream: SocketAddr, cuts: Arc<Cuts>) {
    loop {
        let Ok((downstream, _)) = listener.accept().await else { continue };
        let cuts = cuts.clone();
        tokio::spawn(async move {
            let _ = relay(downstream, to, upstream, cuts).await;
        });
    }
}

async fn relay(
    mut downstream: tokio::net::TcpStream,
    to: u8,
    upstream: SocketAddr,
    cuts: Arc<Cuts>,
) -> std::io::Result<()> {
    let mut upstream = tokio::net::TcpStream::connect(upstream).await?;
    let _ = downstream.set_nodelay(true);
    let _ = upstream.set_nodelay(true);
    let mut challenge = [0u8; CHALLENGE_SIZE];
    upstream.read_exact(&mut challenge).await?;
    downstream.write_all(&challenge).await?;
    let mut hello = [0u8; HELLO_SIZE];
    downstream.read_exact(&mut hello).await?;
    let from = hello[24];
    if cuts.is_cut(from, to) {
        cuts.severed.fetch_add(1, Ordering::SeqCst);
        return Ok(());
    }
    upstream.write_all(&hello).await?;
    let generation = cuts.generation.load(Ordering::SeqCst);
    let (mut down_read, mut down_write) = downstream.into_split();
    let (mut up_read, mut up_write) = upstream.into_split();
    let forward = async move {
        let _ = tokio::io::copy(&mut down_read, &mut up_write).await;
    };
    let backward = async move {
        let _ = tokio::io::copy(&mut up_read, &mut down_write).await;
    };
    let watch = async {
        loop {
            tokio::time::sleep(Duration::from_millis(20)).await;
            if cuts.generation.load(Ordering::SeqCst) != generation && cuts.is_cut(from, to) {
                cuts.severed.fetch_add(1, Ordering::SeqCst);
                return;
            }
        }
    };
    tokio::select! {
        _ = forward => {}
        _ = backward => {}
        _ = watch => {}
    }
    Ok(())
}

/// An SDK client logged in as root on `address` (it follows the leader the node names).
pub async fn connect(address: SocketAddr) -> Result<IggyClient, IggyError> {
    let client = IggyClient::builder()
        .with_tcp()
        .with_server_address(address.to_string())
        .with_reconnection_max_retries(Some(0))
        .build()?;
    client.connect().await?;
    client.login_user(DEFAULT_ROOT_USERNAME, DEFAULT_ROOT_PASSWORD).await?;
    Ok(client)
}

pub fn id(name: &str) -> Identifier {
    Identifier::named(name).unwrap()
}

pub const STREAM: &str = "jepsen";
pub const TOPIC: &str = "log";
pub const PARTITIONS: u32 = 2;
const BATCH: u64 = 10;
const SEND_TIMEOUT: Duration = Duration::from_secs(4);
const POLL_COUNT: u32 = 500;
/// How long after a fault its unavailability is measured.
const UNAVAILABILITY_WINDOW: Duration = Duration::from_secs(8);

fn key(partition: u32) -> PartitionKey {
    PartitionKey { stream: 0, topic: 0, partition }
}

/// The history of one run, and what the faults did to it.
pub struct Workload {
    pub checker: Arc<Mutex<KafkaLogChecker>>,
    pub anomaly: Arc<Mutex<Option<String>>>,
    /// When each acknowledged send came back, and to which partition.
    pub acked_at: Arc<Mutex<Vec<(u32, Instant)>>>,
    pub stop: Arc<AtomicBool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    pub started: Instant,
}

/// Creates the stream and topic (through any node that answers), retrying while the cluster
/// elects its first leader.
pub async fn create_topic(addresses: &[SocketAddr], enforce_fsync: bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut attempt = 0;
    loop {
        attempt += 1;
        let address = addresses[attempt % addresses.len()];
        let created = async {
            let client = connect(address).await?;
            if client.get_stream(&id(STREAM)).await?.is_none() {
                client.create_stream(STREAM).await?;
            }
            if client.get_topic(&id(STREAM), &id(TOPIC)).await?.is_none() {
                let options = TopicCreateOptions {
                    partitions_count: Some(PARTITIONS),
                    enforce_fsync: Some(enforce_fsync),
                    ..Default::default()
                };
                client.create_topic(&id(STREAM), TOPIC, &options).await?;
            }
            Ok::<_, IggyError>(())
        };
        match tokio::time::timeout(Duration::from_secs(10), created).await {
            Ok(Ok(())) => return,
            outcome => {
                assert!(Instant::now() < deadline, "the topic could not be created: {outcome:?}");
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
        }
    }
}

impl Workload {
    pub fn start(addresses: Vec<SocketAddr>, producers: u64) -> Workload {
        let workload = Workload {
            checker: Arc::new(Mutex::new(KafkaLogChecker::new())),
            anomaly: Arc::new(Mutex::new(None)),
            acked_at: Arc::new(Mutex::new(Vec::new())),
            stop: Arc::new(AtomicBool::new(false)),
            tasks: Vec::new(),
            started: Instant::now(),
        };
        let mut tasks = Vec::new();
        for producer in 0..producers {
            tasks.push(tokio::spawn(produce(
                addresses.clone(),
                producer,
                workload.checker.clone(),
                workload.anomaly.clone(),
                workload.acked_at.clone(),
                workload.stop.clone(),
            )));
        }
        for partition in 0..PARTITIONS {
            tasks.push(tokio::spawn(consume(
                addresses.clone(),
                partition,
                workload.checker.clone(),
                workload.anomaly.clone(),
                workload.stop.clone(),
            )));
        }
        Workload { tasks, ..workload }
    }

    /// Stops the clients, reads every partition whole, and runs the checker's end checks.
    pub async fn finish(self, addresses: &[SocketAddr]) -> Result<vireo_sim::kafka_log::CheckSummary, String> {
        self.stop.store(true, Ordering::SeqCst);
        for task in self.tasks {
            let _ = task.await;
        }
        if let Some(anomaly) = self.anomaly.lock().unwrap().clone() {
            return Err(anomaly);
        }
        let mut logs = Vec::new();
        for partition in 0..PARTITIONS {
            logs.push(final_read(addresses, partition).await);
        }
        let mut checker = self.checker.lock().unwrap();
        for (partition, log) in logs.iter().enumerate() {
            checker.final_read(key(partition as u32), 0, log).map_err(|anomaly| anomaly.to_string())?;
        }
        checker.place_unplaced_acks().map_err(|anomaly| anomaly.to_string())?;
        checker.finish().map_err(|anomaly| anomaly.to_string())
    }

    /// The longest time, over the faults and the partitions, a partition went without an
    /// acknowledged send in the `UNAVAILABILITY_WINDOW` after a fault, counted from the fault
    /// (a partition whose primary the fault did not touch goes on at once; one whose primary it
    /// took waits for a view change, and for its clients to time out and reconnect). Sends
    /// already committed when the fault struck may be acknowledged just after it: the gaps
    /// between acknowledgements, not only the first, are what is measured.
    pub fn unavailability_after(&self, faults: &[Instant]) -> Duration {
        let acked = self.acked_at.lock().unwrap();
        let mut worst = Duration::ZERO;
        for fault in faults {
            let end = *fault + UNAVAILABILITY_WINDOW;
            for partition in 0..PARTITIONS {
                let mut last = *fault;
                for (_, at) in acked.iter().filter(|(of, at)| *of == partition && at > fault && *at <= end) {
                    worst = worst.max(at.duration_since(last));
                    last = *at;
                }
                if last == *fault {
                    // Nothing acknowledged in the whole window.
                    worst = worst.max(UNAVAILABILITY_WINDOW);
                }
            }
        }
        worst
    }
}

fn record(anomaly: &Mutex<Option<String>>, result: Result<(), vireo_sim::kafka_log::Anomaly>) {
    if let Err(found) = result {
        anomaly.lock().unwrap().get_or_insert(found.to_string());
    }
}

/// A client on the next node in turn; `None` (after a pause) when it does not answer.
async fn reconnect(addresses: &[SocketAddr], attempt: &mut usize) -> Option<IggyClient> {
    *attempt += 1;
    let address = addresses[*attempt % addresses.len()];
    match tokio::time::timeout(Duration::from_secs(5), connect(address)).await {
        Ok(Ok(connected)) => Some(connected),
        _ => {
            tokio::time::sleep(Duration::from_millis(100)).await;
            None
        }
    }
}

async fn produce(
    addresses: Vec<SocketAddr>,
    producer: u64,
    checker: Arc<Mutex<KafkaLogChecker>>,
    anomaly: Arc<Mutex<Option<String>>>,
    acked_at: Arc<Mutex<Vec<(u32, Instant)>>>,
    stop: Arc<AtomicBool>,
) {
    let partition = (producer % PARTITIONS as u64) as u32;
    let mut sequence = 0u64;
    let mut attempt = producer as usize;
    let mut client = None;
    while !stop.load(Ordering::SeqCst) {
        if client.is_none() {
            client = reconnect(&addresses, &mut attempt).await;
            if client.is_none() {
                continue;
            }
        }
        let values: Vec<u128> =
            (0..BATCH).map(|index| ((producer as u128) << 64) | (sequence + index) as u128).collect();
        sequence += BATCH;
        let mut batch: Vec<IggyMessage> =
            values.iter().map(|value| IggyMessage::from_str(&value.to_string()).unwrap()).collect();
        record(&anomaly, checker.lock().unwrap().send_invoked(producer, &values));
        let sent = tokio::time::timeout(
            SEND_TIMEOUT,
            client.as_ref().unwrap().send_messages(
                &id(STREAM),
                &id(TOPIC),
                &Partitioning::partition_id(partition),
                &mut batch,
            ),
        )
        .await;
        match sent {
            Ok(Ok(_)) => {
                acked_at.lock().unwrap().push((partition, Instant::now()));
                record(&anomaly, checker.lock().unwrap().send_acked_unplaced(producer, key(partition), &values));
            }
            // Timed out, refused or cut off: written or not, nobody knows. Never sent again (a
            // new connection is a new client session, so a retry could land twice).
            _ => {
                record(&anomaly, checker.lock().unwrap().send_indeterminate(producer, &values));
                client = None;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

fn parse(messages: &[IggyMessage]) -> Vec<(u64, u128)> {
    messages
        .iter()
        .map(|message| {
            let text = std::str::from_utf8(&message.payload).expect("utf-8 payload");
            (message.header.offset, text.parse().expect("a value"))
        })
        .collect()
}

async fn consume(
    addresses: Vec<SocketAddr>,
    partition: u32,
    checker: Arc<Mutex<KafkaLogChecker>>,
    anomaly: Arc<Mutex<Option<String>>>,
    stop: Arc<AtomicBool>,
) {
    let consumer_id = 1000 + partition as u64;
    let consumer = Consumer::new(Identifier::numeric(consumer_id as u32).unwrap());
    let mut next = 0u64;
    let mut attempt = partition as usize;
    let mut client = None;
    while !stop.load(Ordering::SeqCst) {
        if client.is_none() {
            client = reconnect(&addresses, &mut attempt).await;
            if client.is_none() {
                continue;
            }
        }
        let polled = tokio::time::timeout(
            SEND_TIMEOUT,
            client.as_ref().unwrap().poll_messages(
                &id(STREAM),
                &id(TOPIC),
                Some(partition),
                &consumer,
                &PollingStrategy::offset(next),
                POLL_COUNT,
                false,
            ),
        )
        .await;
        match polled {
            Ok(Ok(polled)) => {
                let messages = parse(&polled.messages);
                record(&anomaly, checker.lock().unwrap().polled(consumer_id, key(partition), next, &messages));
                match messages.last() {
                    Some((offset, _)) => next = offset + 1,
                    None => tokio::time::sleep(Duration::from_millis(20)).await,
                }
            }
            _ => client = None,
        }
    }
}

/// Every message of a partition from offset 0, through nodes in turn until one reads it to its
/// end (a node still catching up may answer short: the read goes on until the head the node
/// reports is reached and stays there).
async fn final_read(addresses: &[SocketAddr], partition: u32) -> Vec<(u64, u128)> {
    let consumer = Consumer::new(Identifier::numeric(999).unwrap());
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut attempt = 0;
    'again: loop {
        assert!(Instant::now() < deadline, "partition {partition} could not be read whole");
        attempt += 1;
        let address = addresses[attempt % addresses.len()];
        let Ok(Ok(client)) = tokio::time::timeout(Duration::from_secs(5), connect(address)).await else {
            tokio::time::sleep(Duration::from_millis(200)).await;
            continue;
        };
        let mut log = Vec::new();
        let mut empty_in_a_row = 0;
        loop {
            let polled = tokio::time::timeout(
                SEND_TIMEOUT,
                client.poll_messages(
                    &id(STREAM),
                    &id(TOPIC),
                    Some(partition),
                    &consumer,
                    &PollingStrategy::offset(log.len() as u64),
                    POLL_COUNT,
                    false,
                ),
            )
            .await;
            let Ok(Ok(polled)) = polled else { continue 'again };
            if polled.messages.is_empty() {
                empty_in_a_row += 1;
                let at_head =
                    polled.current_offset + 1 == log.len() as u64 || (log.is_empty() && polled.current_offset == 0);
                if at_head && empty_in_a_row >= 3 {
                    return log;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
            empty_in_a_row = 0;
            log.extend(parse(&polled.messages));
        }
    }
}
