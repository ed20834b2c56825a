//! One shard of vireo-server: a pinned glommio executor running one `Node` (the same code the
//! simulator runs) over `GlommioIo`. Its loop drains what is ready (I/O completions, client
//! frames, messages from the other shards) into the node, ticks it every `TICK_NS`, and carries
//! out what the node asks through `ServerIo`, the driver's `NodeIo`.
//!
//! Shard 0 also accepts the client connections and hands each to a shard, round-robin, as an
//! accepted descriptor over the shard channels (the reference's way: one listener, no
//! SO_REUSEPORT race between processes), serves `/metrics`, and sets the root credentials at
//! first boot (`root_credentials`) before it accepts anyone.
//!
//! Shutdown (SIGINT/SIGTERM sets `ServerShared::shutdown`): the listener stops; frames that
//! arrive are no longer admitted (counted, their connections closed at the end); requests in
//! flight get `drain_timeout_ms` to be answered; then every connection closes, the I/O in
//! flight completes, and the shard returns. The process syncs and exits 0.

use std::cell::{Cell, RefCell};
use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::os::fd::{FromRawFd, IntoRawFd};
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use glommio::channels::channel_mesh::Senders;
use glommio::sync::Semaphore;
use vireo_io::glommio::{ClientTls, DriverConfig, DriverEvent, GlommioIo, NetEvent, NetLimits, ShardContext};
use vireo_io::{Io, OutFrame, Peer, TICK_NS};
use vireo_protocol::replica::{ReplicaEvent, Status};

use crate::disk_reserve::ReserveChange;
use crate::node::{Node, NodeConfig, NodeEvent};
use crate::node_io::{ChannelFull, ConnectionId, NodeIo, ShardMessage};
use crate::server::accept_backoff::{is_exhaustion, AcceptBackoff, EpisodeLine, SpareDescriptor};
use crate::server::config::ServerConfig;
use crate::server::gateway::{Gateway, GatewayInput};
use crate::server::http_api::linearizable::{MetadataLeader, PrimaryRedirect};
use crate::server::http_api::HttpApi;
use crate::server::metrics::{command_name, AllStats, DiskFigures, ShardFigures};
use crate::server::replica_links::{accept_links, ClusterHealth, LinkIdentity, ReplicaLinks};
use crate::server::root_credentials::{RootPlan, RootSetup, INTERNAL_CONNECTION};
use crate::server::snapshot;
use crate::shard::ShardEvent;

/// What crosses between the server's shards.
pub enum ShardMail {
    Node(ShardMessage),
    /// A connection shard 0 accepted, for the receiving shard to serve.
    Accepted(glommio::net::AcceptedTcpStream),
    /// A replica link from `peer` that shard 0 authenticated, for the receiving shard to read.
    ReplicaLink {
        socket: std::os::fd::OwnedFd,
        peer: u8,
        /// The peer's shard that dialled it.
        peer_shard: u16,
    },
}

/// A cluster node's replica plane: who it is, where its peers listen, and what its shards share
/// about them.
pub struct ClusterPlane {
    pub identity: LinkIdentity,
    /// Each replica's `tcp_replica` address, `None` for this node.
    pub peers: Vec<Option<SocketAddr>>,
    pub listener: Mutex<Option<std::net::TcpListener>>,
    pub health: Arc<ClusterHealth>,
}

/// What every shard shares (read-only but for the listeners shard 0 takes and the flags).
pub struct ServerShared {
    pub config: ServerConfig,
    pub node: NodeConfig,
    pub tcp_listener: Mutex<Option<std::net::TcpListener>>,
    pub http_listener: Mutex<Option<std::net::TcpListener>>,
    pub stats: AllStats,
    pub shutdown: Arc<AtomicBool>,
    pub root: RootPlan,
    pub seed: u64,
    /// `None` for a single node.
    pub cluster: Option<ClusterPlane>,
    /// The data directory held no metadata when the server started: a first boot, or a node
    /// that lost its disk (a cluster node asks its peers which, `wait_for_cluster_history`).
    pub empty_data_directory: bool,
    /// Each shard's `Node::recovered`, once it said so: shard 0 takes clients when all have.
    pub shards_recovered: Vec<AtomicBool>,
    /// When the process started, for the time recovery took.
    pub started: std::time::Instant,
    /// TLS on the client port (`tcp.tls`) and on the HTTP port (`http.tls`), when enabled.
    pub tcp_tls: Option<ClientTls>,
    pub http_tls: Option<ClientTls>,
    /// HTTPS connections closed for their handshake (shard 0 serves HTTP).
    pub http_tls_refused: AtomicU64,
    /// A single node's group stopped on a failed write or sync (the first failure): every shard
    /// refuses writes from then on, and `/health` says unhealthy.
    pub storage_failed: Mutex<Option<String>>,
    /// Client connections accepted only to be closed: the process was out of file descriptors
    /// (`accept_backoff`).
    pub descriptors_refused: Arc<AtomicU64>,
    /// The HTTP API's signing key (`http.jwt`).
    pub jwt_secret: Vec<u8>,
}

/// Ticks shard 0 waits for every shard to recover before it takes clients all the same (a
/// cluster node without a quorum, a group that cannot catch up): their requests then get the
/// retriable error (`STATUS_TRANSIENT_NOT_ACCEPTED`) or wait for their read index.
pub const RECOVERY_WAIT_TICKS: u64 = 1_000;

/// Requests one connection may have waiting for their replies in the latency table; past it the
/// oldest is forgotten (its latency is not recorded).
const TIMED_REQUESTS_MAX: usize = 64;
/// Ticks between two publications of a shard's figures for `/metrics`.
const PUBLISH_TICKS: u64 = 10;
/// Inputs the loop takes before it lets the shard's I/O tasks run.
const INPUTS_PER_TURN: usize = 256;
/// How long the I/O in flight gets to complete once every connection is closed.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(5);
/// Ticks between two "waiting for a quorum" lines while a cluster node has too few peers.
const QUORUM_LOG_TICKS: u64 = 500;

/// A request waiting for its reply: its number, when it arrived, which command it is.
struct Timed {
    request: u64,
    arrived: u64,
    command: &'static str,
}

/// The driver's client ids and the node's connection numbers, both ways, and each
/// connection's requests being timed.
#[derive(Default)]
struct Links {
    by_connection: HashMap<ConnectionId, (u128, VecDeque<Timed>)>,
    by_client: HashMap<u128, ConnectionId>,
    next: ConnectionId,
}

/// Messages from the other shards, taken by the loop without waiting; the forwarders wait for
/// `space` (the inbox's bound) before they take the next one off a channel.
struct Inbox {
    queue: RefCell<VecDeque<ShardMail>>,
    ready: Semaphore,
    space: Semaphore,
}

/// The `NodeIo` the node runs on: the shard's `GlommioIo`, its channels, its connections.
struct ServerIo<'a> {
    io: &'a mut GlommioIo,
    senders: &'a Senders<ShardMail>,
    links: &'a mut Links,
    figures: &'a mut ShardFigures,
    replicas: &'a ReplicaLinks,
    /// Replies to the shard's own internal connection (the root credentials setup).
    internal: &'a mut Vec<Vec<u8>>,
    /// The HTTP API's connections (shard 0).
    gateway: Option<&'a Gateway>,
}

impl Io for ServerIo<'_> {
    vireo_io::forward_asks_but_send!(io);

    fn send(&mut self, to: Peer, message: Vec<u8>) {
        match to {
            // A single node has no peers: a replica of a one-replica group sends to none, and
            // whatever it did is dropped and counted.
            Peer::Replica(_) if self.replicas.peers() == 0 => self.figures.replica_frames_dropped += 1,
            Peer::Replica(replica) => self.replicas.send(replica, message.into()),
            Peer::Client(_) => self.io.send(to, message),
        }
    }

    fn send_frame(&mut self, to: Peer, frame: OutFrame) {
        match to {
            Peer::Replica(_) if self.replicas.peers() == 0 => self.figures.replica_frames_dropped += 1,
            Peer::Replica(replica) => self.replicas.send(replica, frame),
            Peer::Client(_) => self.io.send_frame(to, frame),
        }
    }
}

impl NodeIo for ServerIo<'_> {
    fn send_to_shard(&mut self, shard: u16, message: ShardMessage) -> Result<(), ChannelFull> {
        self.senders.try_send_to(shard as usize, ShardMail::Node(message)).map_err(|_| ChannelFull(shard))
    }

    fn send_to_connection(&mut self, connection: ConnectionId, frame: Vec<u8>) {
        self.send_frame_to_connection(connection, frame.into());
    }

    /// A client's socket takes the frame's parts one after the other; the internal connection
    /// and the HTTP gateway read it whole.
    fn send_frame_to_connection(&mut self, connection: ConnectionId, frame: OutFrame) {
        if connection == INTERNAL_CONNECTION {
            self.internal.push(frame.into_whole());
            return;
        }
        if Gateway::owns(connection) {
            if let Some(gateway) = self.gateway {
                gateway.on_reply(connection, frame.into_whole());
            }
            return;
        }
        let Some((client, timed)) = self.links.by_connection.get_mut(&connection) else { return };
        let client = *client;
        let head = &frame.head;
        if head.len() >= 256 && head[60] == 8 {
            let request = u64::from_le_bytes(head[200..208].try_into().expect("8 bytes"));
            let status = u32::from_le_bytes(head[216..220].try_into().expect("4 bytes"));
            if let Some(at) = timed.iter().position(|entry| entry.request == request) {
                let entry = timed.remove(at).expect("found");
                let figures = self.figures.commands.entry(entry.command).or_default();
                figures.requests += 1;
                figures.errors += (status != 0) as u64;
                figures.bytes_out += frame.len() as u64;
                let micros = (self.io.now().saturating_sub(entry.arrived) / 1000).max(1);
                figures.latency_us.saturating_record(micros);
            }
        }
        self.io.send_to_client(client, frame);
    }

    fn recycle(&mut self, frame: Vec<u8>) {
        self.io.recycle_frame(frame);
    }

    fn close_connection(&mut self, connection: ConnectionId) {
        if Gateway::owns(connection) {
            if let Some(gateway) = self.gateway {
                gateway.dropped(connection);
            }
            return;
        }
        if let Some((client, _)) = self.links.by_connection.get(&connection) {
            self.io.close_client(*client);
        }
    }
}

macro_rules! with_node {
    ($state:ident, |$node:ident, $sio:ident| $action:expr) => {{
        let mut $sio = ServerIo {
            io: &mut $state.io,
            senders: &$state.senders,
            links: &mut $state.links,
            figures: &mut $state.figures,
            replicas: &$state.replicas,
            internal: &mut $state.internal,
            gateway: $state.gateway.as_deref(),
        };
        let $node = &mut $state.node;
        $action
    }};
}

enum Phase {
    Running,
    /// Shutting down: no new request is admitted; waits for those in flight until `deadline`.
    Draining {
        deadline: u64,
    },
    /// Every connection closed; waits for the I/O in flight until `deadline`.
    Closing {
        deadline: u64,
    },
}

/// A snapshot a connection of this shard waits for.
struct PendingSnapshot {
    connection: ConnectionId,
    request: vireo_protocol::header::Header,
    archive: std::sync::mpsc::Receiver<Result<Vec<u8>, u32>>,
}

struct ShardState {
    shard: u16,
    io: GlommioIo,
    senders: Rc<Senders<ShardMail>>,
    links: Links,
    figures: ShardFigures,
    replicas: Rc<ReplicaLinks>,
    internal: Vec<Vec<u8>>,
    /// Shard 0: the HTTP API's way into its node.
    gateway: Option<Rc<Gateway>>,
    node: Node,
    /// Frames not admitted because the server is shutting down.
    refused_shutting_down: u64,
    /// Snapshots being collected for this shard's connections (one per process at a time).
    snapshots: Vec<PendingSnapshot>,
    /// Where the snapshot reads the logs and the effective config.
    data: std::path::PathBuf,
    fatal: Option<String>,
    /// A single node: a group of this shard stopped on a failed write or sync (what to tell the
    /// other shards, `ServerShared::storage_failed`). A cluster node exits instead (`fatal`).
    storage_failure: Option<String>,
    single_node: bool,
    /// The driver's failed writes and syncs logged in this window, and those left out
    /// (`STORAGE_FAILURE_LINES_MAX`).
    failure_lines: (u64, u64, u64),
    /// When the last "write met a full disk" line went out (the driver's clock), and the cuts
    /// since, not shown.
    no_space_lines: (Option<u64>, u64),
}

/// ERROR lines for failed writes and syncs a shard writes per `STORAGE_FAILURE_WINDOW_TICKS` at
/// most; the rest are counted in one line when the window ends.
const STORAGE_FAILURE_LINES_MAX: u64 = 8;
const STORAGE_FAILURE_WINDOW_TICKS: u64 = 1_000;

/// Runs one shard until shutdown; `Err` when a group failed (the process exits non-zero and a
/// restart recovers from what is durable).
pub async fn run_shard(context: ShardContext<ShardMail>, shared: Arc<ServerShared>) -> Result<(), String> {
    let ShardContext { shard, shard_count, senders, mut receivers } = context;
    let config = &shared.config;
    let mut driver = DriverConfig::new(&config.system.path);
    driver.seed = shared.seed ^ (shard as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    driver.net = NetLimits {
        connections_max: config.tcp.connections_max_per_shard as usize,
        frame_size_max: config.tcp.frame_size_max as usize,
        send_queue_bytes_max: config.tcp.send_queue_bytes_max as usize,
        inbound_bytes_max: config.tcp.inbound_bytes_max as usize,
    };
    driver.tls = shared.tcp_tls.clone();
    driver.segments_direct = config.system.segment.direct_io;
    let mut io = GlommioIo::new(&driver).map_err(|error| format!("shard {shard}: {error}"))?;
    let inbox = Rc::new(Inbox {
        queue: RefCell::new(VecDeque::new()),
        ready: Semaphore::new(0),
        space: Semaphore::new(config.system.sharding.inbox_capacity),
    });
    for (_, receiver) in receivers.streams() {
        let inbox = inbox.clone();
        glommio::spawn_local(async move {
            loop {
                if inbox.space.acquire(1).await.is_err() {
                    break;
                }
                let Some(mail) = receiver.recv().await else { break };
                inbox.queue.borrow_mut().push_back(mail);
                inbox.ready.signal(1);
            }
        })
        .detach();
    }
    let mut node_config = shared.node.clone();
    node_config.shard.shard = shard as u16;
    node_config.shard.shards = shard_count as u16;
    let senders = Rc::new(senders);
    let mut links = Links::default();
    let mut figures = ShardFigures::default();
    let mut internal = Vec::new();
    let replicas = match &shared.cluster {
        None => ReplicaLinks::none(),
        Some(plane) => {
            let identity = Rc::new(plane.identity.clone());
            ReplicaLinks::start(identity, shard as u16, &plane.peers, plane.health.clone(), || io.random())
        }
    };
    if shard == 0 {
        if let Some(plane) = &shared.cluster {
            if let Some(listener) = plane.listener.lock().expect("no panic holding it").take() {
                let (replicas, senders) = (replicas.clone(), senders.clone());
                let mut random = io.random();
                accept_links(
                    listener,
                    Rc::new(plane.identity.clone()),
                    plane.health.clone(),
                    move || {
                        random = random.wrapping_add(0x9e37_79b9_7f4a_7c15);
                        random ^ (random >> 29).wrapping_mul(0xbf58_476d_1ce4_e5b9)
                    },
                    move |peer_shard, socket, peer| {
                        let target = peer_shard as usize % shard_count;
                        if target == 0 {
                            replicas.serve_inbound(socket, peer, peer_shard);
                        } else {
                            let senders = senders.clone();
                            glommio::spawn_local(async move {
                                let mail = ShardMail::ReplicaLink { socket, peer, peer_shard };
                                let _ = senders.send_to(target, mail).await;
                            })
                            .detach();
                        }
                    },
                );
            }
        }
    }
    if shared.empty_data_directory {
        if let Some(plane) = &shared.cluster {
            let peers = plane.identity.replica_count as usize - 1;
            let rejoin = wait_for_cluster_history(shard as u16, &plane.health, peers).await?;
            // A first boot (the peers that answered hold nothing) starts view 0 as every
            // replica of a new cluster does; a node that lost its disk waits for the current view.
            node_config.shard.metadata.format_waits_for_view = rejoin;
            node_config.shard.metadata.rejoin_guard = rejoin;
            node_config.shard.partition.format_waits_for_view = rejoin;
            node_config.shard.partition.rejoin_guard = rejoin;
        }
    }
    let node = {
        let mut sio = ServerIo {
            io: &mut io,
            senders: &senders,
            links: &mut links,
            figures: &mut figures,
            replicas: &replicas,
            internal: &mut internal,
            gateway: None,
        };
        Node::open(node_config, &mut sio)
    };
    let gateway = (shard == 0).then(|| Rc::new(Gateway::default()));
    let mut state = ShardState {
        shard: shard as u16,
        io,
        senders,
        links,
        figures,
        replicas,
        internal,
        gateway: gateway.clone(),
        node,
        refused_shutting_down: 0,
        snapshots: Vec::new(),
        data: config.system.path.clone(),
        fatal: None,
        storage_failure: None,
        single_node: shared.cluster.is_none(),
        failure_lines: (0, 0, 0),
        no_space_lines: (None, 0),
    };
    state.drain_node_events();
    let server = state.io.server();
    let stop_accepting = Rc::new(Cell::new(None::<std::os::fd::RawFd>));
    let mut root = (shard == 0).then(|| {
        let client = ((state.io.random() as u128) << 64 | state.io.random() as u128) | 1;
        RootSetup::new(shared.root.clone(), client, shared.cluster.is_some())
    });
    if shard == 0 {
        if let Some(listener) = shared.http_listener.lock().expect("no panic holding it").take() {
            let api = HttpApi::new(
                gateway.clone().expect("shard 0 has one"),
                shared.jwt_secret.clone(),
                config.http.jwt.access_token_expiry_secs,
                shared.seed ^ 0x4854_5450,
                PrimaryRedirect::of(config),
            );
            crate::server::http::serve(listener, shared.clone(), Rc::new(api));
        }
    }
    let mut accepting = false;
    let mut phase = Phase::Running;
    let mut ticks: u64 = 0;
    let mut next_tick = state.io.now() + TICK_NS;
    loop {
        let mut handled = 0;
        while handled < INPUTS_PER_TURN {
            if let Some(event) = state.io.try_event() {
                state.on_driver_event(event, &phase);
            } else if let Some(input) = state.gateway.as_ref().and_then(|gateway| gateway.try_input()) {
                state.on_gateway_input(input, &phase);
            } else if let Some(frame) = state.replicas.try_inbound() {
                with_node!(state, |node, sio| node.on_replica_frame(&mut sio, frame));
                state.drain_node_events();
            } else if let Some(mail) = inbox.pop() {
                match mail {
                    ShardMail::Node(message) => with_node!(state, |node, sio| node.on_shard_message(&mut sio, message)),
                    ShardMail::Accepted(accepted) if matches!(phase, Phase::Running) => {
                        server.serve(accepted.bind_to_executor())
                    }
                    // Shutting down: the connection is closed as it is dropped.
                    ShardMail::Accepted(_) => {}
                    ShardMail::ReplicaLink { socket, peer, peer_shard } => {
                        state.replicas.serve_inbound(socket, peer, peer_shard)
                    }
                }
                state.drain_node_events();
            } else {
                break;
            }
            handled += 1;
        }
        state.drive_root(&mut root, false)?;
        // Before a fatal return: the failed write that made it is said with its file first.
        state.log_storage_failures(ticks);
        if let Some(fatal) = state.fatal.take() {
            return Err(fatal);
        }
        if let Some(failure) = state.storage_failure.take() {
            shared.storage_failed.lock().expect("no panic holding it").get_or_insert(failure);
        }
        if !state.node.disk_reserve().storage_failed() {
            if let Some(failure) = shared.storage_failed.lock().expect("no panic holding it").clone() {
                state.node.on_storage_failed();
                if shard == 0 {
                    tracing::error!(
                        failure,
                        "unhealthy: writes are refused until the server is restarted on a good disk"
                    );
                }
            }
        }
        if let Some(fatal) = shared.cluster.as_ref().and_then(|plane| plane.health.fatal()) {
            return Err(fatal);
        }
        let now = state.io.now();
        if now >= next_tick {
            next_tick = (next_tick + TICK_NS).max(now + TICK_NS / 2);
            ticks += 1;
            with_node!(state, |node, sio| node.tick(&mut sio));
            state.drain_node_events();
            state.drive_root(&mut root, true)?;
            state.answer_snapshots();
            if !shared.shards_recovered[shard].load(Ordering::Relaxed) && state.node.recovered() {
                shared.shards_recovered[shard].store(true, Ordering::Relaxed);
            }
            let recovered = shared.shards_recovered.iter().all(|recovered| recovered.load(Ordering::Relaxed));
            if shard == 0
                && root.is_none()
                && !accepting
                && matches!(phase, Phase::Running)
                && (recovered || ticks >= RECOVERY_WAIT_TICKS)
            {
                accepting = true;
                let took_ms = shared.started.elapsed().as_millis();
                if recovered {
                    println!("recovered in {took_ms} ms: accepting clients");
                    tracing::info!(took_ms, "recovered: every group this node hosts executed what it holds");
                } else {
                    let waiting: Vec<usize> = (0..shared.shards_recovered.len())
                        .filter(|shard| !shared.shards_recovered[*shard].load(Ordering::Relaxed))
                        .collect();
                    println!("not recovered after {took_ms} ms (shards {waiting:?}): accepting clients, who get retriable errors until it is");
                    tracing::warn!(
                        took_ms,
                        shards = ?waiting,
                        "accepting clients before recovery finished (no quorum yet, or a group cannot catch up): their requests get retriable errors until it does"
                    );
                }
                let listener = shared.tcp_listener.lock().expect("no panic holding it").take();
                if let Some(listener) = listener {
                    accept_connections(
                        listener,
                        state.senders.clone(),
                        server.clone(),
                        shard_count,
                        stop_accepting.clone(),
                        shared.descriptors_refused.clone(),
                    );
                }
                if let Some(gateway) = &state.gateway {
                    gateway.accept_clients();
                }
                tracing::info!("accepting clients");
            }
            if let (Some(gateway), Some(metadata)) = (&state.gateway, state.node.shard().metadata()) {
                gateway.set_metadata_leader(if metadata.status() != Status::Normal {
                    MetadataLeader::Unknown
                } else if metadata.is_primary() {
                    MetadataLeader::ThisNode
                } else {
                    MetadataLeader::Replica(metadata.config().primary_index(metadata.view()))
                });
            }
            if ticks.is_multiple_of(PUBLISH_TICKS) {
                state.publish(&shared);
            }
            if shard == 0 && ticks.is_multiple_of(QUORUM_LOG_TICKS) {
                state.log_quorum_wait(&shared);
            }
            if let (0, Some(plane)) = (shard, &shared.cluster) {
                // What this node's verdicts tell a peer that starts with an empty directory.
                if let Some(metadata) = state.node.shard().metadata() {
                    if metadata.status() != vireo_protocol::Status::Opening {
                        // Its log's head: an op prepared and not yet committed is history too.
                        let head = metadata.op().max(metadata.commit_max());
                        plane.health.metadata_commit.store(head, Ordering::Relaxed);
                    }
                }
            }
            match phase {
                Phase::Running if shared.shutdown.load(Ordering::SeqCst) => {
                    if let Some(fd) = stop_accepting.take() {
                        // Ends the accept loop: accept(2) on a shut-down listener fails at once.
                        // SAFETY: the listener's descriptor stays open; shutdown(2) only stops it.
                        unsafe { libc::shutdown(fd, libc::SHUT_RDWR) };
                    }
                    let drain = Duration::from_millis(config.system.shutdown.drain_timeout_ms).as_nanos() as u64;
                    tracing::info!(
                        shard,
                        in_flight = state.node.requests_in_flight(),
                        "shutting down: draining requests in flight"
                    );
                    phase = Phase::Draining { deadline: now + drain };
                }
                Phase::Draining { deadline } => {
                    let drained = state.node.requests_in_flight() == 0;
                    if drained || now >= deadline {
                        if !drained {
                            tracing::warn!(
                                shard,
                                in_flight = state.node.requests_in_flight(),
                                "requests still in flight at the drain timeout: their connections close unanswered"
                            );
                        }
                        let clients: Vec<u128> = state.links.by_client.keys().copied().collect();
                        for client in clients {
                            state.io.close_client(client);
                        }
                        phase = Phase::Closing { deadline: now + CLOSE_TIMEOUT.as_nanos() as u64 };
                    }
                }
                Phase::Closing { deadline } => {
                    if state.io.in_flight() == 0 || now >= deadline {
                        if state.io.in_flight() != 0 {
                            tracing::warn!(shard, in_flight = state.io.in_flight(), "I/O still in flight at exit");
                        }
                        state.publish(&shared);
                        tracing::info!(shard, refused = state.refused_shutting_down, "shard stopped");
                        return Ok(());
                    }
                }
                Phase::Running => {}
            }
            continue;
        }
        if handled > 0 {
            // Let the I/O tasks the node's asks spawned submit and complete.
            glommio::executor().yield_now().await;
            continue;
        }
        let wait = Duration::from_nanos(next_tick - now);
        let io = &state.io;
        let replicas = state.replicas.clone();
        let gateway = state.gateway.clone();
        let gateway_input = async move {
            match gateway {
                Some(gateway) => gateway.wait().await,
                None => std::future::pending().await,
            }
        };
        futures_lite::future::or(
            io.wait_event(),
            futures_lite::future::or(
                replicas.wait_inbound(),
                futures_lite::future::or(
                    inbox.wait(),
                    futures_lite::future::or(gateway_input, glommio::timer::sleep(wait)),
                ),
            ),
        )
        .await;
    }
}

impl Inbox {
    fn pop(&self) -> Option<ShardMail> {
        let mail = self.queue.borrow_mut().pop_front()?;
        self.space.signal(1);
        Some(mail)
    }

    /// Waits until a message may be there (a wake-up, not a count).
    async fn wait(&self) {
        if !self.queue.borrow().is_empty() {
            return;
        }
        let _ = self.ready.acquire(1).await;
        let stale = self.ready.available();
        let _ = self.ready.try_acquire(stale);
    }
}

impl ShardState {
    /// What the HTTP API asks of the node: its connections opened, fed and closed as the
    /// driver's are.
    fn on_gateway_input(&mut self, input: GatewayInput, phase: &Phase) {
        match input {
            GatewayInput::Opened(connection) => {
                with_node!(self, |node, sio| node.on_connection_opened(&mut sio, connection));
            }
            GatewayInput::Frame(connection, frame) => {
                if !matches!(phase, Phase::Running) {
                    self.refused_shutting_down += 1;
                    return;
                }
                with_node!(self, |node, sio| node.on_client_frame(&mut sio, connection, frame));
            }
            GatewayInput::Closed(connection) => {
                with_node!(self, |node, sio| node.on_connection_closed(&mut sio, connection));
            }
        }
        self.drain_node_events();
    }

    fn on_driver_event(&mut self, event: DriverEvent, phase: &Phase) {
        match event {
            DriverEvent::Completion(completion) => {
                with_node!(self, |node, sio| node.on_completion(&mut sio, completion));
            }
            DriverEvent::Net(NetEvent::Connected { client, address }) => {
                let connection = self.links.open(client);
                tracing::info!(shard = self.shard, connection, address = %display_address(address), "connection opened");
                with_node!(self, |node, sio| node.on_connection_opened(&mut sio, connection));
            }
            DriverEvent::Net(NetEvent::Frame { client, frame }) => {
                let Some(&connection) = self.links.by_client.get(&client) else { return };
                if !matches!(phase, Phase::Running) {
                    self.refused_shutting_down += 1;
                    return;
                }
                if frame.len() >= 256 {
                    let request = u64::from_le_bytes(frame[168..176].try_into().expect("8 bytes"));
                    let operation = frame[176];
                    let code = u32::from_le_bytes(frame[196..200].try_into().expect("4 bytes"));
                    let command = command_name(code, operation);
                    self.figures.commands.entry(command).or_default().bytes_in += frame.len() as u64;
                    let now = self.io.now();
                    if let Some((_, timed)) = self.links.by_connection.get_mut(&connection) {
                        if timed.len() == TIMED_REQUESTS_MAX {
                            timed.pop_front();
                        }
                        timed.push_back(Timed { request, arrived: now, command });
                    }
                }
                with_node!(self, |node, sio| node.on_client_frame(&mut sio, connection, frame));
            }
            DriverEvent::Net(NetEvent::Closed { client, reason }) => {
                let Some(connection) = self.links.by_client.remove(&client) else { return };
                self.links.by_connection.remove(&connection);
                tracing::info!(shard = self.shard, connection, reason, "connection closed");
                with_node!(self, |node, sio| node.on_connection_closed(&mut sio, connection));
            }
        }
        self.drain_node_events();
    }

    /// One WARN line per `STORAGE_FAILURE_WINDOW_TICKS` for the logs cut because a write met a
    /// full disk (every refused send may cut one), the rest counted in the next.
    fn log_cut_for_no_space(&mut self, group: &str, op: u64, refused: u32, again: u32) {
        let now = self.io.now();
        let (window, cuts_since) = &mut self.no_space_lines;
        if window.is_some_and(|at| now < at + STORAGE_FAILURE_WINDOW_TICKS * TICK_NS) {
            *cuts_since += 1;
            return;
        }
        let earlier = std::mem::take(cuts_since);
        *window = Some(now);
        tracing::warn!(
            shard = self.shard,
            group,
            op,
            refused,
            again,
            earlier_cuts_not_shown = earlier,
            "a write met a full disk despite the free-space reserve: the uncommitted ops from `op` on were cut, \
             their sends and creates refused, the rest prepared again once space allows"
        );
    }

    /// Logs the driver's failed writes and syncs with their files and errnos, at most
    /// `STORAGE_FAILURE_LINES_MAX` per window.
    fn log_storage_failures(&mut self, tick: u64) {
        let (failures, dropped) = self.io.take_storage_failures();
        let (window, logged, left_out) = &mut self.failure_lines;
        if tick >= *window + STORAGE_FAILURE_WINDOW_TICKS {
            if *left_out > 0 {
                tracing::error!(shard = self.shard, left_out = *left_out, "more failed writes and syncs, not shown");
            }
            (*window, *logged, *left_out) = (tick, 0, 0);
        }
        *left_out += dropped;
        for failure in failures {
            if *logged < STORAGE_FAILURE_LINES_MAX {
                *logged += 1;
                tracing::error!(shard = self.shard, "{failure}");
            } else {
                *left_out += 1;
            }
        }
    }

    /// Logs what the node did that an operator wants to see, and counts it.
    fn drain_node_events(&mut self) {
        while let Some(event) = self.node.poll_event() {
            match event {
                NodeEvent::Replica(ShardEvent { namespace, event, .. }) => {
                    let group = if namespace.is_metadata() {
                        "metadata".to_string()
                    } else {
                        let (stream, topic, partition) = namespace.unpack();
                        format!("partition {stream}/{topic}/{partition}")
                    };
                    match event {
                        ReplicaEvent::Committed { .. } => self.figures.commits += 1,
                        ReplicaEvent::StatusChanged { status, view } => {
                            self.figures.view_changes += 1;
                            tracing::info!(shard = self.shard, group, view, status = ?status, "view");
                        }
                        ReplicaEvent::Opened { view, op, commit_min, formatted, .. } => {
                            tracing::info!(shard = self.shard, group, view, op, commit_min, formatted, "recovered");
                        }
                        ReplicaEvent::StateTransferred { op, chunks } => {
                            tracing::info!(shard = self.shard, group, op, chunks, "state transferred");
                        }
                        ReplicaEvent::LogTruncated { op, .. } => {
                            tracing::warn!(shard = self.shard, group, op, "log truncated")
                        }
                        ReplicaEvent::CutForNoSpace { op, refused, again } => {
                            self.log_cut_for_no_space(&group, op, refused, again)
                        }
                        ReplicaEvent::Wiping => {
                            tracing::warn!(shard = self.shard, group, "removing an earlier incarnation's files")
                        }
                        ReplicaEvent::Superseded => {
                            tracing::warn!(shard = self.shard, group, "files of a newer incarnation found: not opened")
                        }
                        ReplicaEvent::Failed { what, error } => {
                            self.figures.replica_failures += 1;
                            let failure = format!("{group}: {what} failed: {error}");
                            if self.single_node {
                                tracing::error!(
                                    shard = self.shard,
                                    group,
                                    what,
                                    %error,
                                    "group stopped: a write or sync failed and is not retried; the node refuses \
                                     writes and serves reads until it is restarted on a good disk"
                                );
                                self.storage_failure.get_or_insert(failure);
                            } else {
                                tracing::error!(
                                    shard = self.shard,
                                    group,
                                    what,
                                    %error,
                                    "group stopped: a write or sync failed; the node exits and its peers go on \
                                     (restarted on a good disk, they repair it)"
                                );
                                self.fatal.get_or_insert(failure);
                            }
                        }
                        ReplicaEvent::CheckpointDurable { .. } => {}
                        ReplicaEvent::Rejoined { commit } => {
                            tracing::info!(shard = self.shard, group, commit, "rejoined: caught up, votes again")
                        }
                    }
                }
                // Every shard reads the same disk and refuses on its own; shard 0 says so, once
                // per episode.
                NodeEvent::Disk(ReserveChange::Low { free, reserve }) if self.shard == 0 => {
                    tracing::warn!(
                        free_bytes = free,
                        reserve_bytes = reserve,
                        path = %self.data.display(),
                        "disk space below the reserve (system.min_free_bytes): sends and creates are refused \
                         until space is freed; polls, deletes and purges go on"
                    )
                }
                NodeEvent::Disk(ReserveChange::Recovered { free, reserve, refused }) if self.shard == 0 => {
                    tracing::warn!(
                        free_bytes = free,
                        reserve_bytes = reserve,
                        refused,
                        "disk space back above the reserve: sends and creates are taken again"
                    )
                }
                NodeEvent::ConnectionRefused { connection } => {
                    tracing::warn!(
                        shard = self.shard,
                        connection,
                        "connection refused: connections_max_per_shard reached"
                    )
                }
                NodeEvent::Malformed { connection } => {
                    tracing::warn!(shard = self.shard, connection, "malformed frame: connection closed")
                }
                NodeEvent::LoginVerified { connection, user_id } => {
                    tracing::info!(shard = self.shard, connection, user_id, "logged in")
                }
                NodeEvent::SnapshotRequested { connection, request, compression, types } => {
                    tracing::info!(shard = self.shard, connection, "snapshot requested");
                    match snapshot::start(self.data.clone(), compression, types) {
                        Ok(archive) => self.snapshots.push(PendingSnapshot { connection, request, archive }),
                        Err(status) => {
                            with_node!(self, |node, sio| node.answer_snapshot(
                                &mut sio,
                                connection,
                                &request,
                                Err(status)
                            ))
                        }
                    }
                }
                NodeEvent::Denied { connection, operation, status, .. } => {
                    tracing::debug!(shard = self.shard, connection, operation, status, "refused")
                }
                _ => {}
            }
        }
    }

    /// Hands each collected snapshot to the node, which answers its request.
    fn answer_snapshots(&mut self) {
        let mut index = 0;
        while index < self.snapshots.len() {
            let archive = match self.snapshots[index].archive.try_recv() {
                Ok(archive) => archive,
                Err(std::sync::mpsc::TryRecvError::Empty) => {
                    index += 1;
                    continue;
                }
                Err(std::sync::mpsc::TryRecvError::Disconnected) => Err(snapshot::STATUS_SNAPSHOT_FAILED),
            };
            let PendingSnapshot { connection, request, .. } = self.snapshots.swap_remove(index);
            with_node!(self, |node, sio| node.answer_snapshot(&mut sio, connection, &request, archive));
            self.drain_node_events();
        }
    }

    /// Moves the root credentials setup on: its next frames on the internal connection, the
    /// replies it got; ends it (closing the connection) when it is over.
    fn drive_root(&mut self, root: &mut Option<RootSetup>, tick: bool) -> Result<(), String> {
        let Some(setup) = root.as_mut() else {
            self.internal.clear();
            return Ok(());
        };
        let mut frames = if tick { setup.step(&self.node) } else { Vec::new() };
        if std::mem::take(&mut setup.reconnect) && setup.connection_open {
            setup.connection_open = false;
            with_node!(self, |node, sio| node.on_connection_closed(&mut sio, INTERNAL_CONNECTION));
            self.drain_node_events();
        }
        loop {
            for reply in std::mem::take(&mut self.internal) {
                frames.extend(setup.on_reply(&reply));
            }
            if frames.is_empty() {
                break;
            }
            if !setup.connection_open {
                setup.connection_open = true;
                with_node!(self, |node, sio| node.on_connection_opened(&mut sio, INTERNAL_CONNECTION));
            }
            for frame in std::mem::take(&mut frames) {
                with_node!(self, |node, sio| node.on_client_frame(&mut sio, INTERNAL_CONNECTION, frame));
                self.drain_node_events();
            }
        }
        let Some(result) = setup.finished() else { return Ok(()) };
        if setup.connection_open {
            with_node!(self, |node, sio| node.on_connection_closed(&mut sio, INTERNAL_CONNECTION));
            self.drain_node_events();
        }
        *root = None;
        result.map_err(|reason| format!("setting the root credentials: {reason}"))
    }

    /// A cluster node whose metadata group has no quorum says so, and which peers it reaches.
    fn log_quorum_wait(&self, shared: &ServerShared) {
        let Some(plane) = &shared.cluster else { return };
        let Some(metadata) = self.node.shard().metadata() else { return };
        let count = plane.identity.replica_count as usize;
        let up = self.replicas.peers_up();
        let quorum = count / 2 + 1;
        // A primary alone is in normal status too, and commits nothing: the links say it.
        if metadata.status() == vireo_protocol::Status::Normal && 1 + up.len() >= quorum {
            return;
        }
        tracing::warn!(
            status = ?metadata.status(),
            view = metadata.view(),
            linked = ?up,
            "waiting for a quorum: {} of the {} nodes it needs are reachable (this one and {} peers)",
            1 + up.len(),
            quorum,
            up.len()
        );
    }

    fn publish(&mut self, shared: &ServerShared) {
        let stats = &shared.stats;
        self.figures.links = self.replicas.counters();
        if let (0, Some(plane)) = (self.shard, &shared.cluster) {
            self.figures.peers_linked = self.replicas.peers_up().len() as u64;
            self.figures.replica_auth_refused = plane.health.auth_refused.load(Ordering::Relaxed);
            self.figures.replica_roster_refused = plane.health.roster_refused.load(Ordering::Relaxed);
        }
        if self.shard == 0 {
            self.figures.http_tls_refused = shared.http_tls_refused.load(Ordering::Relaxed);
            self.figures.descriptors_refused = shared.descriptors_refused.load(Ordering::Relaxed);
        }
        let figures = &mut self.figures;
        figures.net = self.io.net_counters();
        figures.node = self.node.counters;
        figures.connections = self.node.connections() as u64;
        let disk = self.node.disk_reserve();
        figures.disk = DiskFigures {
            space: disk.space().map(|space| (space.free, space.total)),
            reserve: disk.reserve(),
            below_reserve: disk.is_low(),
            failed: disk.storage_failed(),
        };
        let groups = self.node.shard();
        figures.groups = groups.partitions().count() as u64 + groups.metadata().is_some() as u64;
        let (mut elided, mut rebuilt, mut missed) = (0, 0, 0);
        for (_, replica) in groups.partitions() {
            let (group_elided, group_rebuilt, group_missed) = replica.forwarded_figures();
            (elided, rebuilt, missed) = (elided + group_elided, rebuilt + group_rebuilt, missed + group_missed);
        }
        (figures.prepares_elided, figures.prepares_rebuilt, figures.elided_missed) = (elided, rebuilt, missed);
        figures.segments =
            groups.segment_logs().filter_map(|(_, log)| log.log()).map(|log| log.segment_count() as u64).sum();
        let batches_lost = groups.segment_logs().map(|(_, log)| log.counters.batches_lost).sum();
        if batches_lost > figures.batches_lost {
            tracing::error!(
                shard = self.shard,
                batches = batches_lost - figures.batches_lost,
                "batches lost: recovery found them damaged in a segment log, and a single node has no other copy; \
                 their offsets stay taken and polls step over them (vireo_batches_lost_total)"
            );
        }
        figures.batches_lost = batches_lost;
        if let Some(metadata) = groups.metadata() {
            figures.metadata_view = metadata.view() as u64;
            figures.metadata_commit = metadata.commit_min();
        }
        if self.shard == 0 {
            figures.catalog = self.node.view().map(|view| {
                let metadata = &view.metadata;
                let streams = metadata.streams().count() as u64;
                let topics = metadata.streams().map(|stream| stream.topics.len() as u64).sum();
                (streams, topics, view.partitions.len() as u64, metadata.users().count() as u64)
            });
        }
        stats[self.shard as usize].publish(figures);
    }
}

impl Links {
    fn open(&mut self, client: u128) -> ConnectionId {
        // Never INTERNAL_CONNECTION: the count would have to reach u64::MAX.
        self.next += 1;
        let connection = self.next;
        self.by_connection.insert(connection, (client, VecDeque::new()));
        self.by_client.insert(client, connection);
        connection
    }
}

fn display_address(address: Option<SocketAddr>) -> String {
    address.map_or_else(|| "unknown".to_string(), |address| address.to_string())
}

/// A cluster node with an empty data directory: waits until its peers said what their metadata
/// groups hold. Any op there means the cluster has history this node may have been part of: it
/// rejoins (`Config::rejoin_guard`: no vote, nack or acknowledgement before it caught up), as
/// soon as one peer says so. It formats as a new cluster only once every peer of the roster has
/// answered that it holds nothing: a node that lost its disk while only empty peers answer (a
/// quorum of them, say, with the one holding the history slow to come up) must not start view 0
/// over a cluster's history. Until then it waits, and says so every `QUORUM_LOG_TICKS`.
async fn wait_for_cluster_history(shard: u16, health: &ClusterHealth, peers: usize) -> Result<bool, String> {
    let mut waited = 0u64;
    loop {
        if let Some(fatal) = health.fatal() {
            return Err(fatal);
        }
        let (answered, highest) = health.cluster_history();
        if let Some((commit, peer)) = highest.filter(|(commit, _)| *commit > 0) {
            if shard == 0 {
                tracing::warn!(
                    peer,
                    commit,
                    "empty data directory in a cluster with history: rejoining (no vote until caught up)"
                );
            }
            return Ok(true);
        }
        if answered >= peers {
            if shard == 0 {
                tracing::info!(peers, "empty data directory, and every peer has none either: a new cluster");
            }
            return Ok(false);
        }
        if shard == 0 && waited.is_multiple_of(QUORUM_LOG_TICKS) {
            tracing::warn!(
                answered,
                peers,
                "the data directory is empty: waiting for every peer to say whether the cluster has history ({answered} of {peers} answered, none with any); a new cluster forms only when all have"
            );
        }
        waited += 1;
        glommio::timer::sleep(Duration::from_nanos(TICK_NS)).await;
    }
}

/// Shard 0's accept loop: each connection goes to the next shard in turn.
fn accept_connections(
    listener: std::net::TcpListener,
    senders: Rc<Senders<ShardMail>>,
    server: vireo_io::glommio::ConnectionServer,
    shard_count: usize,
    stop: Rc<Cell<Option<std::os::fd::RawFd>>>,
    descriptors_refused: Arc<AtomicU64>,
) {
    let fd = listener.into_raw_fd();
    // SAFETY: the descriptor is a bound, listening TCP socket whose ownership passes here.
    let listener = unsafe { glommio::net::TcpListener::from_raw_fd(fd) };
    stop.set(Some(fd));
    glommio::spawn_local(async move {
        let mut next = 0usize;
        let mut backoff = AcceptBackoff::default();
        let mut spare = SpareDescriptor::new();
        loop {
            let accepted = match listener.shared_accept().await {
                Ok(accepted) => accepted,
                Err(_) if stop.get().is_none() => break,
                Err(error) => {
                    let error = std::io::Error::from(error);
                    // A connection reset before it was accepted: the next one.
                    if !is_exhaustion(&error) {
                        tracing::debug!(%error, "accept failed");
                        continue;
                    }
                    let (wait, line) = backoff.on_exhausted(std::time::Instant::now());
                    if line.is_some() {
                        tracing::warn!(
                            %error,
                            "out of file descriptors: new connections are refused until some close \
                             (raise the limit, `ulimit -n`, or lower tcp.connections_max_per_shard)"
                        );
                    }
                    // The spare descriptor makes room for one waiting connection. If the spare
                    // cannot be taken back after it, the process is still at its limit: that
                    // connection is refused (closed). Otherwise room came back meanwhile and it
                    // is served like any other.
                    if spare.release() {
                        let surplus = listener.shared_accept().await;
                        spare.retake();
                        match surplus {
                            // Refused: the next waiting one at once (an empty backlog makes the
                            // next accept wait, not fail).
                            Ok(surplus) if !spare.held() => {
                                drop(surplus.bind_to_executor());
                                spare.retake();
                                backoff.on_refused();
                                descriptors_refused.fetch_add(1, Ordering::Relaxed);
                                continue;
                            }
                            Ok(surplus) => surplus,
                            Err(_) => {
                                glommio::timer::sleep(wait).await;
                                continue;
                            }
                        }
                    } else {
                        spare.retake();
                        glommio::timer::sleep(wait).await;
                        continue;
                    }
                }
            };
            if stop.get().is_none() {
                break;
            }
            if let Some(EpisodeLine::Ended(episode)) = backoff.on_accepted() {
                tracing::warn!(
                    refused = episode.refused,
                    failed_accepts = episode.failures,
                    lasted_ms = episode.since.elapsed().as_millis() as u64,
                    "file descriptors available again: accepting connections"
                );
            }
            let target = next % shard_count;
            next += 1;
            if target == 0 {
                server.serve(accepted.bind_to_executor());
            } else if senders.send_to(target, ShardMail::Accepted(accepted)).await.is_err() {
                tracing::warn!(shard = target, "a shard is gone: connection closed");
            }
        }
    })
    .detach();
}
