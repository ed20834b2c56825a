//! The replica plane between vireo-server processes: TCP links on each node's `tcp_replica` port,
//! authenticated by the cluster's shared secret, carrying the VSR frames the node's groups send
//! (`Peer::Replica`) and the replies a group sends back to the node a request came from.
//!
//! Shape: every shard of every node dials every peer once (its *outbound link* to that peer) and
//! only writes on it; the peer's shard 0 accepts, runs the handshake and hands the socket to its
//! shard of the same number, which only reads it. A frame from shard s of node A therefore lands
//! on shard s of node B, where the same group lives when both nodes have as many shards (a node
//! with another count routes it on, as any node routes a frame to the shard owning its group).
//!
//! Handshake (all integers little-endian), before any frame:
//! 1. listener -> dialer, `CHALLENGE_SIZE` bytes: magic `VIREO-C1`, cluster u128, nonce `[24]`.
//! 2. dialer -> listener, `HELLO_SIZE` bytes: magic `VIREO-H1`, cluster u128, replica u8,
//!    replica_count u8, shard u16, 4 zero bytes, roster hash u64, nonce `[24]`, then
//!    `blake3::keyed_hash(key, "hello" | challenge nonce | the 64 bytes before)`.
//! 3. listener -> dialer, `VERDICT_SIZE` bytes: magic `VIREO-V1`, verdict u8, 7 zero bytes,
//!    roster hash u64, the head (op) of the listener's metadata log u64 (`HISTORY_UNKNOWN` while
//!    its metadata group is still opening), then `keyed_hash(key, "verdict" | hello nonce | the
//!    32 bytes before)`. A node that starts with an empty data directory waits for enough such
//!    answers: any above 0 means the cluster has history, so it rejoins (`Config::rejoin_guard`).
//!
//! The key is `blake3::derive_key(KEY_CONTEXT, secret)`. Each side proves it holds the key over
//! the other's fresh nonce, so a recorded handshake cannot be replayed and neither side talks to
//! an impostor; a peer without the secret is refused (`Verdict::NotAuthenticated`) and counted.
//! The listener checks the MAC before anything else, so an unauthenticated dialer learns nothing
//! of the cluster. A peer whose roster differs (`ServerConfig::roster_hash`) is refused too: a
//! node that a quorum of its peers refuse for that stops with one line (`ClusterHealth`), while
//! the nodes that agree with each other go on.
//!
//! Bounds: an outbound link queues at most `LINK_QUEUE_FRAMES_MAX` frames and
//! `LINK_QUEUE_BYTES_MAX` bytes; a frame past them, or sent while the link is down, is dropped
//! and counted: VSR's timeouts send again what matters. Inbound frames not yet handled by the
//! shard are bounded by `INBOUND_FRAMES_MAX` and `INBOUND_BYTES_MAX`: a reader waits, which
//! back-pressures its peer through TCP. At most `HANDSHAKES_MAX` handshakes run at once, each
//! for at most `HANDSHAKE_TIMEOUT`. A shard reads at most one inbound link per (peer, peer's
//! shard): a newer one (the peer reconnected) shuts the older one down, so a peer that dials
//! again and again holds no more sockets than it has shards.

use std::cell::{Cell, RefCell};
use std::collections::{BTreeSet, VecDeque};
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use futures_lite::{AsyncReadExt, AsyncWriteExt};
use glommio::channels::local_channel::{self, LocalSender};
use glommio::net::TcpStream;
use glommio::sync::Semaphore;

use vireo_io::OutFrame;
use vireo_protocol::header::FRAME_SIZE_MAX;

/// What the shared secret is derived into the link key with (blake3's key derivation context).
const KEY_CONTEXT: &str = "vireo 2026-12 replica link key";
pub const CHALLENGE_SIZE: usize = 48;
pub const HELLO_SIZE: usize = 96;
pub const VERDICT_SIZE: usize = 64;
/// A listener's metadata commit while its metadata group has not opened yet.
pub const HISTORY_UNKNOWN: u64 = u64::MAX;
const MAGIC_CHALLENGE: &[u8; 8] = b"VIREO-C1";
const MAGIC_HELLO: &[u8; 8] = b"VIREO-H1";
const MAGIC_VERDICT: &[u8; 8] = b"VIREO-V1";
const NONCE_SIZE: usize = 24;
const MAC_SIZE: usize = 32;

/// Frames and bytes one outbound link queues at most.
pub const LINK_QUEUE_FRAMES_MAX: usize = 4096;
pub const LINK_QUEUE_BYTES_MAX: usize = 128 << 20;
/// Frames and bytes received by one shard and not yet handled at most.
pub const INBOUND_FRAMES_MAX: u64 = 4096;
pub const INBOUND_BYTES_MAX: u64 = 2 * FRAME_SIZE_MAX as u64;
/// Handshakes shard 0 runs at once, and how long each may take.
pub const HANDSHAKES_MAX: u64 = 64;
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(3);
/// Reconnection backoff: doubles from the first to the last.
const BACKOFF_FIRST: Duration = Duration::from_millis(20);
const BACKOFF_LAST: Duration = Duration::from_millis(500);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// Bytes one write to a link gathers from its queue at most.
const WRITE_GATHER_BYTES_MAX: usize = 1 << 20;
/// A frame's part this long or longer is written from its own buffer, not gathered (copied).
const WRITE_DIRECT_BYTES_MIN: usize = 16 << 10;

/// The listener's answer to a hello.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    Accepted = 0,
    /// The hello's MAC is not the cluster key's: the dialer does not hold the secret.
    NotAuthenticated = 1,
    /// The dialer belongs to a cluster of another name.
    OtherCluster = 2,
    /// The dialer's roster differs from the listener's.
    RosterDiffers = 3,
    /// The dialer claims a replica id that is the listener's own or outside the roster.
    NotAPeer = 4,
}

impl Verdict {
    fn from_byte(byte: u8) -> Option<Verdict> {
        [Verdict::Accepted, Verdict::NotAuthenticated, Verdict::OtherCluster, Verdict::RosterDiffers, Verdict::NotAPeer]
            .into_iter()
            .find(|verdict| *verdict as u8 == byte)
    }

    pub fn reason(self) -> &'static str {
        match self {
            Verdict::Accepted => "accepted",
            Verdict::NotAuthenticated => "not authenticated (the shared secret differs)",
            Verdict::OtherCluster => "another cluster",
            Verdict::RosterDiffers => "the roster ([[cluster.nodes]]) differs",
            Verdict::NotAPeer => "not a peer in the roster",
        }
    }
}

/// Who a node is on the replica plane.
#[derive(Clone, Debug)]
pub struct LinkIdentity {
    pub cluster: u128,
    pub replica: u8,
    pub replica_count: u8,
    pub roster_hash: u64,
    pub key: [u8; 32],
}

impl LinkIdentity {
    pub fn new(cluster: u128, replica: u8, replica_count: u8, roster_hash: u64, secret: &str) -> LinkIdentity {
        LinkIdentity {
            cluster,
            replica,
            replica_count,
            roster_hash,
            key: blake3::derive_key(KEY_CONTEXT, secret.as_bytes()),
        }
    }

    fn mac(&self, label: &[u8], nonce: &[u8], bytes: &[u8]) -> [u8; MAC_SIZE] {
        let mut hasher = blake3::Hasher::new_keyed(&self.key);
        hasher.update(label).update(nonce).update(bytes);
        *hasher.finalize().as_bytes()
    }

    fn verify(&self, label: &[u8], nonce: &[u8], bytes: &[u8], mac: &[u8]) -> bool {
        let mut hasher = blake3::Hasher::new_keyed(&self.key);
        hasher.update(label).update(nonce).update(bytes);
        // blake3's `Hash` compares in constant time.
        mac.len() == MAC_SIZE && hasher.finalize() == blake3::Hash::from_bytes(mac.try_into().expect("32 bytes"))
    }

    pub fn challenge(&self, nonce: &[u8; NONCE_SIZE]) -> [u8; CHALLENGE_SIZE] {
        let mut out = [0u8; CHALLENGE_SIZE];
        out[..8].copy_from_slice(MAGIC_CHALLENGE);
        out[8..24].copy_from_slice(&self.cluster.to_le_bytes());
        out[24..].copy_from_slice(nonce);
        out
    }

    /// The dialer's hello in answer to `challenge`; `None` when the challenge is not one.
    pub fn hello(&self, challenge: &[u8], shard: u16, nonce: &[u8; NONCE_SIZE]) -> Option<[u8; HELLO_SIZE]> {
        if challenge.len() != CHALLENGE_SIZE || &challenge[..8] != MAGIC_CHALLENGE {
            return None;
        }
        let mut out = [0u8; HELLO_SIZE];
        out[..8].copy_from_slice(MAGIC_HELLO);
        out[8..24].copy_from_slice(&self.cluster.to_le_bytes());
        out[24] = self.replica;
        out[25] = self.replica_count;
        out[26..28].copy_from_slice(&shard.to_le_bytes());
        out[32..40].copy_from_slice(&self.roster_hash.to_le_bytes());
        out[40..64].copy_from_slice(nonce);
        let mac = self.mac(b"hello", &challenge[24..], &out[..64]);
        out[64..].copy_from_slice(&mac);
        Some(out)
    }

    /// The listener's judgement of a hello: the verdict, and the dialer's replica and shard.
    pub fn judge(&self, challenge_nonce: &[u8], hello: &[u8]) -> (Verdict, u8, u16) {
        if hello.len() != HELLO_SIZE
            || &hello[..8] != MAGIC_HELLO
            || !self.verify(b"hello", challenge_nonce, &hello[..64], &hello[64..])
        {
            return (Verdict::NotAuthenticated, 0, 0);
        }
        let replica = hello[24];
        let shard = u16::from_le_bytes([hello[26], hello[27]]);
        let cluster = u128::from_le_bytes(hello[8..24].try_into().expect("16 bytes"));
        let roster = u64::from_le_bytes(hello[32..40].try_into().expect("8 bytes"));
        let verdict = if cluster != self.cluster {
            Verdict::OtherCluster
        } else if roster != self.roster_hash || hello[25] != self.replica_count {
            Verdict::RosterDiffers
        } else if replica == self.replica || replica >= self.replica_count {
            Verdict::NotAPeer
        } else {
            Verdict::Accepted
        };
        (verdict, replica, shard)
    }

    pub fn verdict(&self, verdict: Verdict, hello: &[u8], metadata_commit: u64) -> [u8; VERDICT_SIZE] {
        let mut out = [0u8; VERDICT_SIZE];
        out[..8].copy_from_slice(MAGIC_VERDICT);
        out[8] = verdict as u8;
        out[16..24].copy_from_slice(&self.roster_hash.to_le_bytes());
        out[24..32].copy_from_slice(&metadata_commit.to_le_bytes());
        let nonce = hello.get(40..64).unwrap_or(&[]);
        let mac = self.mac(b"verdict", nonce, &out[..32]);
        out[32..].copy_from_slice(&mac);
        out
    }

    /// The dialer's reading of the listener's verdict and metadata commit; `None` when it is
    /// not authentic (the listener does not hold the key).
    pub fn read_verdict(&self, hello: &[u8], verdict: &[u8]) -> Option<(Verdict, u64)> {
        if verdict.len() != VERDICT_SIZE || &verdict[..8] != MAGIC_VERDICT {
            return None;
        }
        if !self.verify(b"verdict", &hello[40..64], &verdict[..32], &verdict[32..]) {
            return None;
        }
        let commit = u64::from_le_bytes(verdict[24..32].try_into().expect("8 bytes"));
        Some((Verdict::from_byte(verdict[8])?, commit))
    }
}

/// What the node's shards share about their peers: which refused this node's roster, and the
/// counters `/metrics` reports. A node a quorum of its peers refuse for its roster stops.
pub struct ClusterHealth {
    replica_count: u8,
    roster_refusals: Mutex<BTreeSet<u8>>,
    pub auth_refused: AtomicU64,
    pub roster_refused: AtomicU64,
    pub handshakes_failed: AtomicU64,
    pub links_up: AtomicU64,
    /// This node's metadata commit, as its verdicts tell dialers (`HISTORY_UNKNOWN` until its
    /// metadata group opened; 0 from the start for an empty data directory).
    pub metadata_commit: AtomicU64,
    /// The metadata commits peers' verdicts reported, by peer (known ones only).
    peer_commits: Mutex<std::collections::BTreeMap<u8, u64>>,
    fatal: Mutex<Option<String>>,
}

impl ClusterHealth {
    pub fn new(replica_count: u8, empty_data_directory: bool) -> ClusterHealth {
        ClusterHealth {
            metadata_commit: AtomicU64::new(if empty_data_directory { 0 } else { HISTORY_UNKNOWN }),
            peer_commits: Mutex::new(std::collections::BTreeMap::new()),
            replica_count,
            roster_refusals: Mutex::new(BTreeSet::new()),
            auth_refused: AtomicU64::new(0),
            roster_refused: AtomicU64::new(0),
            handshakes_failed: AtomicU64::new(0),
            links_up: AtomicU64::new(0),
            fatal: Mutex::new(None),
        }
    }

    /// Peers whose refusal of this node's roster stop it: a quorum of the cluster's others
    /// (so one misconfigured node cannot stop the ones that agree).
    fn refusals_to_stop(&self) -> usize {
        let others = self.replica_count as usize - 1;
        (self.replica_count as usize / 2 + 1).min(others).max(1)
    }

    fn roster_differs(&self, peer: u8) {
        self.roster_refused.fetch_add(1, Ordering::Relaxed);
        let mut refusals = self.roster_refusals.lock().expect("no panic holding it");
        refusals.insert(peer);
        if refusals.len() >= self.refusals_to_stop() {
            let peers: Vec<String> = refusals.iter().map(|peer| peer.to_string()).collect();
            self.fatal.lock().expect("no panic holding it").get_or_insert(format!(
                "roster mismatch: replicas {} have another [[cluster.nodes]] roster than this node's (every node needs the same roster, names, addresses and ports, and cluster.name)",
                peers.join(", ")
            ));
        }
    }

    fn roster_agrees(&self, peer: u8) {
        self.roster_refusals.lock().expect("no panic holding it").remove(&peer);
    }

    /// How many peers said what their metadata groups hold, and the highest op one of them
    /// reported, with which peer.
    pub fn cluster_history(&self) -> (usize, Option<(u64, u8)>) {
        let commits = self.peer_commits.lock().expect("no panic holding it");
        (commits.len(), commits.iter().map(|(peer, commit)| (*commit, *peer)).max())
    }

    /// Why the node must stop, once a quorum refused its roster.
    pub fn fatal(&self) -> Option<String> {
        self.fatal.lock().expect("no panic holding it").clone()
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LinkCounters {
    pub frames_out: u64,
    pub bytes_out: u64,
    /// Frames not sent: the link was down, or its queue full.
    pub dropped_down: u64,
    pub dropped_full: u64,
    pub frames_in: u64,
    pub bytes_in: u64,
    pub connects: u64,
}

/// One outbound link, as the shard's sends see it.
struct Outbound {
    queue: LocalSender<OutFrame>,
    queued_bytes: Rc<Cell<usize>>,
    up: Rc<Cell<bool>>,
}

/// One shard's replica links: its outbound link to each peer, and the frames its inbound links
/// received.
pub struct ReplicaLinks {
    outbound: Vec<Option<Outbound>>,
    inbound: RefCell<VecDeque<Vec<u8>>>,
    inbound_frames: Semaphore,
    inbound_bytes: Semaphore,
    any: Semaphore,
    counters: Rc<Cell<LinkCounters>>,
    /// The inbound link read now from each (peer, peer's shard), by descriptor.
    inbound_links: RefCell<std::collections::HashMap<(u8, u16), std::os::fd::RawFd>>,
}

fn count(counters: &Cell<LinkCounters>, change: impl FnOnce(&mut LinkCounters)) {
    let mut figures = counters.get();
    change(&mut figures);
    counters.set(figures);
}

impl ReplicaLinks {
    /// A node without peers (a single node): every send is dropped and counted.
    pub fn none() -> Rc<ReplicaLinks> {
        Rc::new(ReplicaLinks::empty(0))
    }

    fn empty(peers: usize) -> ReplicaLinks {
        ReplicaLinks {
            outbound: (0..peers).map(|_| None).collect(),
            inbound: RefCell::new(VecDeque::new()),
            inbound_frames: Semaphore::new(INBOUND_FRAMES_MAX),
            inbound_bytes: Semaphore::new(INBOUND_BYTES_MAX),
            any: Semaphore::new(0),
            counters: Rc::new(Cell::new(LinkCounters::default())),
            inbound_links: RefCell::new(std::collections::HashMap::new()),
        }
    }

    /// Starts this shard's outbound links, one per peer in `peers` (indexed by replica id,
    /// `None` for this node), each dialling again with backoff whenever it breaks.
    pub fn start(
        identity: Rc<LinkIdentity>,
        shard: u16,
        peers: &[Option<SocketAddr>],
        health: std::sync::Arc<ClusterHealth>,
        mut random: impl FnMut() -> u64,
    ) -> Rc<ReplicaLinks> {
        let mut links = ReplicaLinks::empty(peers.len());
        for (replica, address) in peers.iter().enumerate() {
            let Some(address) = *address else { continue };
            let (sender, receiver) = local_channel::new_bounded::<OutFrame>(LINK_QUEUE_FRAMES_MAX);
            let queued_bytes = Rc::new(Cell::new(0));
            let up = Rc::new(Cell::new(false));
            let dial = Dial {
                identity: identity.clone(),
                shard,
                replica: replica as u8,
                address,
                queued_bytes: queued_bytes.clone(),
                up: up.clone(),
                counters: links.counters.clone(),
                health: health.clone(),
                seed: random(),
            };
            glommio::spawn_local(dial.run(receiver)).detach();
            links.outbound[replica] = Some(Outbound { queue: sender, queued_bytes, up });
        }
        Rc::new(links)
    }

    /// Queues a frame to `replica`, or drops it (counted) when the link is down or full.
    pub fn send(&self, replica: u8, frame: OutFrame) {
        let Some(Some(link)) = self.outbound.get(replica as usize) else {
            count(&self.counters, |counters| counters.dropped_down += 1);
            return;
        };
        if !link.up.get() {
            count(&self.counters, |counters| counters.dropped_down += 1);
            return;
        }
        let len = frame.len();
        let queued = link.queued_bytes.get();
        if queued + len > LINK_QUEUE_BYTES_MAX || link.queue.try_send(frame).is_err() {
            count(&self.counters, |counters| counters.dropped_full += 1);
            return;
        }
        link.queued_bytes.set(queued + len);
    }

    /// Peers whose outbound link is up now.
    pub fn peers_up(&self) -> Vec<u8> {
        (0..self.outbound.len() as u8)
            .filter(|replica| self.outbound[*replica as usize].as_ref().is_some_and(|link| link.up.get()))
            .collect()
    }

    pub fn peers(&self) -> usize {
        self.outbound.iter().filter(|link| link.is_some()).count()
    }

    pub fn counters(&self) -> LinkCounters {
        self.counters.get()
    }

    /// A frame an inbound link received, if any.
    pub fn try_inbound(&self) -> Option<Vec<u8>> {
        let frame = self.inbound.borrow_mut().pop_front()?;
        self.inbound_frames.signal(1);
        self.inbound_bytes.signal(frame.len() as u64);
        Some(frame)
    }

    /// Waits until an inbound frame may be there (a wake-up, not a count).
    pub async fn wait_inbound(&self) {
        if !self.inbound.borrow().is_empty() {
            return;
        }
        let _ = self.any.acquire(1).await;
        let stale = self.any.available();
        let _ = self.any.try_acquire(stale);
    }

    /// Reads the frames of an inbound link shard 0 accepted and authenticated for this shard,
    /// dialled by `peer`'s shard `peer_shard`; an older link from there is shut down.
    pub fn serve_inbound(self: &Rc<Self>, socket: OwnedFd, peer: u8, peer_shard: u16) {
        use std::os::fd::IntoRawFd;
        let fd = socket.into_raw_fd();
        if let Some(older) = self.inbound_links.borrow_mut().insert((peer, peer_shard), fd) {
            // SAFETY: shutdown(2) on a descriptor its reader task still owns: the read fails,
            // the task ends and closes it.
            unsafe { libc::shutdown(older, libc::SHUT_RDWR) };
        }
        // SAFETY: the descriptor is a connected TCP socket whose ownership passes here.
        let stream = unsafe { TcpStream::from_raw_fd(fd) };
        let links = self.clone();
        glommio::spawn_local(async move {
            let reason = links.read_frames(stream).await;
            let mut inbound = links.inbound_links.borrow_mut();
            if inbound.get(&(peer, peer_shard)) == Some(&fd) {
                inbound.remove(&(peer, peer_shard));
            }
            tracing::info!(peer, reason, "replica link from a peer closed");
        })
        .detach();
    }

    async fn read_frames(&self, mut stream: TcpStream) -> String {
        loop {
            let mut header = [0u8; vireo_io::glommio::FRAME_HEADER_SIZE];
            if let Err(error) = stream.read_exact(&mut header).await {
                return error.to_string();
            }
            let size = u32::from_le_bytes(header[48..52].try_into().expect("4 bytes")) as usize;
            if !(header.len()..=FRAME_SIZE_MAX as usize).contains(&size) {
                return format!("frame size {size} out of bounds");
            }
            if self.inbound_bytes.acquire(size as u64).await.is_err() {
                return "closing".to_string();
            }
            // A pooled buffer (a prepare's, given back once the journal let it go): no
            // allocation and no zero-fill for a batch.
            let mut frame = vireo_io::receive_buffers::take_for_peer(size);
            frame[..header.len()].copy_from_slice(&header);
            if let Err(error) = stream.read_exact(&mut frame[vireo_io::glommio::FRAME_HEADER_SIZE..]).await {
                self.inbound_bytes.signal(size as u64);
                return error.to_string();
            }
            if self.inbound_frames.acquire(1).await.is_err() {
                return "closing".to_string();
            }
            count(&self.counters, |counters| {
                counters.frames_in += 1;
                counters.bytes_in += size as u64;
            });
            self.inbound.borrow_mut().push_back(frame);
            self.any.signal(1);
        }
    }
}

/// An outbound link's task: dial, handshake, write what the shard queues; again on any break.
struct Dial {
    identity: Rc<LinkIdentity>,
    shard: u16,
    replica: u8,
    address: SocketAddr,
    queued_bytes: Rc<Cell<usize>>,
    up: Rc<Cell<bool>>,
    counters: Rc<Cell<LinkCounters>>,
    health: std::sync::Arc<ClusterHealth>,
    seed: u64,
}

impl Dial {
    async fn run(self, receiver: local_channel::LocalReceiver<OutFrame>) {
        let mut backoff = BACKOFF_FIRST;
        let mut attempt: u64 = 0;
        let mut last_failure = String::new();
        loop {
            attempt += 1;
            match self.connect(attempt).await {
                Ok(stream) => {
                    backoff = BACKOFF_FIRST;
                    last_failure.clear();
                    count(&self.counters, |counters| counters.connects += 1);
                    self.up.set(true);
                    self.health.links_up.fetch_add(1, Ordering::Relaxed);
                    if self.shard == 0 {
                        tracing::info!(peer = self.replica, address = %self.address, "replica link up");
                    }
                    let reason = self.write_frames(stream, &receiver).await;
                    self.up.set(false);
                    self.health.links_up.fetch_sub(1, Ordering::Relaxed);
                    // Frames queued for a connection that broke are stale by the time another
                    // connects: VSR sends again what is still needed.
                    while let Some(Some(frame)) = futures_lite::future::poll_once(receiver.recv()).await {
                        self.queued_bytes.set(self.queued_bytes.get().saturating_sub(frame.len()));
                        count(&self.counters, |counters| counters.dropped_down += 1);
                    }
                    if self.shard == 0 {
                        tracing::warn!(peer = self.replica, address = %self.address, reason, "replica link down");
                    }
                }
                Err(failure) => {
                    // Logged once per kind of failure, not at every retry.
                    if failure != last_failure && self.shard == 0 {
                        tracing::warn!(peer = self.replica, address = %self.address, failure, "cannot link to a peer; retrying");
                    }
                    last_failure = failure;
                }
            }
            glommio::timer::sleep(backoff).await;
            backoff = (backoff * 2).min(BACKOFF_LAST);
        }
    }

    async fn connect(&self, attempt: u64) -> Result<TcpStream, String> {
        let stream =
            TcpStream::connect_timeout(self.address, CONNECT_TIMEOUT).await.map_err(|error| error.to_string())?;
        let _ = stream.set_nodelay(true);
        let nonce = nonce(self.seed ^ attempt.wrapping_mul(0x9e37_79b9_7f4a_7c15));
        let handshake = async {
            let mut stream = stream;
            let mut challenge = [0u8; CHALLENGE_SIZE];
            stream.read_exact(&mut challenge).await?;
            let Some(hello) = self.identity.hello(&challenge, self.shard, &nonce) else {
                return Ok::<_, std::io::Error>(Err("the peer's challenge is not a vireo replica link's".to_string()));
            };
            stream.write_all(&hello).await?;
            let mut verdict = [0u8; VERDICT_SIZE];
            stream.read_exact(&mut verdict).await?;
            Ok(match self.identity.read_verdict(&hello, &verdict) {
                None => {
                    self.health.auth_refused.fetch_add(1, Ordering::Relaxed);
                    Err("the peer's answer is not authenticated: it does not hold this cluster's secret".to_string())
                }
                Some((Verdict::Accepted, commit)) => {
                    self.health.roster_agrees(self.replica);
                    if commit != HISTORY_UNKNOWN {
                        self.health.peer_commits.lock().expect("no panic holding it").insert(self.replica, commit);
                    }
                    Ok(stream)
                }
                Some((verdict, _)) => {
                    match verdict {
                        Verdict::RosterDiffers => self.health.roster_differs(self.replica),
                        Verdict::NotAuthenticated => {
                            self.health.auth_refused.fetch_add(1, Ordering::Relaxed);
                        }
                        _ => {}
                    }
                    Err(format!("refused by the peer: {}", verdict.reason()))
                }
            })
        };
        match glommio::timer::timeout(HANDSHAKE_TIMEOUT, async { Ok(handshake.await) }).await {
            Ok(Ok(result)) => result,
            Ok(Err(error)) => Err(format!("handshake: {error}")),
            Err(_) => {
                self.health.handshakes_failed.fetch_add(1, Ordering::Relaxed);
                Err("handshake timed out".to_string())
            }
        }
    }

    async fn write_frames(&self, mut stream: TcpStream, receiver: &local_channel::LocalReceiver<OutFrame>) -> String {
        // Small frames and parts are gathered into one write; a large part (a prepare's body,
        // which the journal also holds) is written from where it lies, not copied first.
        let mut gathered = Vec::new();
        loop {
            let Some(frame) = receiver.recv().await else { return "the shard stopped".to_string() };
            gathered.clear();
            let mut frames = 0;
            let mut len = 0;
            let mut frame = Some(frame);
            while let Some(current) = frame.take() {
                frames += 1;
                len += current.len();
                for part in current.parts() {
                    if part.len() < WRITE_DIRECT_BYTES_MIN {
                        gathered.extend_from_slice(part);
                        continue;
                    }
                    if !gathered.is_empty() {
                        if let Err(error) = stream.write_all(&gathered).await {
                            self.queued_bytes.set(self.queued_bytes.get().saturating_sub(len));
                            return error.to_string();
                        }
                        gathered.clear();
                    }
                    if let Err(error) = stream.write_all(part).await {
                        self.queued_bytes.set(self.queued_bytes.get().saturating_sub(len));
                        return error.to_string();
                    }
                }
                if gathered.len() < WRITE_GATHER_BYTES_MAX {
                    if let Some(Some(queued)) = futures_lite::future::poll_once(receiver.recv()).await {
                        frame = Some(queued);
                    }
                }
            }
            if !gathered.is_empty() {
                if let Err(error) = stream.write_all(&gathered).await {
                    self.queued_bytes.set(self.queued_bytes.get().saturating_sub(len));
                    return error.to_string();
                }
            }
            self.queued_bytes.set(self.queued_bytes.get().saturating_sub(len));
            count(&self.counters, |counters| {
                counters.frames_out += frames;
                counters.bytes_out += len as u64;
            });
        }
    }
}

fn nonce(seed: u64) -> [u8; NONCE_SIZE] {
    let mut out = [0u8; NONCE_SIZE];
    let hash = blake3::hash(&seed.to_le_bytes());
    out.copy_from_slice(&hash.as_bytes()[..NONCE_SIZE]);
    out
}

/// Shard 0's replica listener: each connection is challenged, and once its hello is accepted
/// handed to the shard its dialer names (`hand_to(shard, socket, peer)`); refused ones are
/// answered with their verdict and closed.
pub fn accept_links(
    listener: std::net::TcpListener,
    identity: Rc<LinkIdentity>,
    health: std::sync::Arc<ClusterHealth>,
    mut random: impl FnMut() -> u64 + 'static,
    hand_to: impl Fn(u16, OwnedFd, u8) + 'static,
) {
    use std::os::fd::IntoRawFd;
    // SAFETY: a bound, listening TCP socket whose ownership passes here.
    let listener = unsafe { glommio::net::TcpListener::from_raw_fd(listener.into_raw_fd()) };
    let slots = Rc::new(Semaphore::new(HANDSHAKES_MAX));
    let hand_to = Rc::new(hand_to);
    glommio::spawn_local(async move {
        loop {
            let stream = match listener.accept().await {
                Ok(stream) => stream,
                Err(_) => {
                    glommio::timer::sleep(Duration::from_millis(10)).await;
                    continue;
                }
            };
            let Ok(permit) = slots.try_acquire_static_permit(1) else {
                health.handshakes_failed.fetch_add(1, Ordering::Relaxed);
                continue;
            };
            let (identity, health, hand_to) = (identity.clone(), health.clone(), hand_to.clone());
            let nonce = nonce(random());
            glommio::spawn_local(async move {
                let _permit = permit;
                let address = stream.peer_addr().ok();
                let outcome = glommio::timer::timeout(HANDSHAKE_TIMEOUT, async {
                    Ok(challenge_dialer(stream, &identity, &health, &nonce).await)
                })
                .await;
                match outcome {
                    Ok(Ok((stream, peer, shard))) => {
                        health.roster_agrees(peer);
                        // SAFETY: `dup` of a descriptor this task owns; the original closes
                        // as `stream` drops, the copy lives on in the shard it is handed to.
                        let copy = unsafe { libc::dup(stream.as_raw_fd()) };
                        drop(stream);
                        if copy >= 0 {
                            // SAFETY: `copy` is a fresh descriptor nothing else owns.
                            hand_to(shard, unsafe { OwnedFd::from_raw_fd(copy) }, peer);
                        }
                    }
                    Ok(Err((verdict, peer))) => {
                        match verdict {
                            Some(Verdict::NotAuthenticated) => {
                                health.auth_refused.fetch_add(1, Ordering::Relaxed);
                                tracing::warn!(address = ?address, "replica link refused: the dialer does not hold the cluster's secret");
                            }
                            Some(Verdict::RosterDiffers) => {
                                health.roster_differs(peer);
                                tracing::warn!(peer, address = ?address, "replica link refused: the peer's roster differs from this node's");
                            }
                            Some(verdict) => {
                                tracing::warn!(peer, address = ?address, reason = verdict.reason(), "replica link refused")
                            }
                            None => {
                                health.handshakes_failed.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                    }
                    Err(_) => {
                        health.handshakes_failed.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
            .detach();
        }
    })
    .detach();
}

/// The listener's side of one handshake: the stream, the dialer's replica and shard when it is
/// accepted; the verdict (`None`: the connection broke) and claimed replica otherwise.
async fn challenge_dialer(
    mut stream: TcpStream,
    identity: &LinkIdentity,
    health: &ClusterHealth,
    nonce: &[u8; NONCE_SIZE],
) -> Result<(TcpStream, u8, u16), (Option<Verdict>, u8)> {
    let _ = stream.set_nodelay(true);
    stream.write_all(&identity.challenge(nonce)).await.map_err(|_| (None, 0))?;
    let mut hello = [0u8; HELLO_SIZE];
    stream.read_exact(&mut hello).await.map_err(|_| (None, 0))?;
    let (verdict, peer, shard) = identity.judge(nonce, &hello);
    let answer = identity.verdict(verdict, &hello, health.metadata_commit.load(Ordering::Relaxed));
    stream.write_all(&answer).await.map_err(|_| (Some(verdict), peer))?;
    if verdict != Verdict::Accepted {
        let _ = stream.close().await;
        return Err((Some(verdict), peer));
    }
    Ok((stream, peer, shard))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn identity(replica: u8, secret: &str, roster: u64) -> LinkIdentity {
        LinkIdentity::new(7, replica, 3, roster, secret)
    }

    const SECRET: &str = "a secret of at least thirty-two bytes!!";

    fn handshake(dialer: &LinkIdentity, listener: &LinkIdentity) -> (Verdict, Option<Verdict>) {
        let challenge_nonce = [3u8; NONCE_SIZE];
        let challenge = listener.challenge(&challenge_nonce);
        let hello = dialer.hello(&challenge, 1, &[9u8; NONCE_SIZE]).expect("a challenge");
        let (verdict, peer, shard) = listener.judge(&challenge_nonce, &hello);
        if verdict == Verdict::Accepted {
            assert_eq!((peer, shard), (dialer.replica, 1));
        }
        let read = dialer.read_verdict(&hello, &listener.verdict(verdict, &hello, 42));
        if let Some((_, commit)) = read {
            assert_eq!(commit, 42);
        }
        (verdict, read.map(|(verdict, _)| verdict))
    }

    #[test]
    fn peers_with_the_secret_and_roster_link() {
        let (verdict, read) = handshake(&identity(1, SECRET, 5), &identity(0, SECRET, 5));
        assert_eq!((verdict, read), (Verdict::Accepted, Some(Verdict::Accepted)));
    }

    #[test]
    fn a_dialer_without_the_secret_is_refused_and_cannot_read_the_answer() {
        let (verdict, read) =
            handshake(&identity(1, "another secret of thirty-two bytes or more", 5), &identity(0, SECRET, 5));
        assert_eq!((verdict, read), (Verdict::NotAuthenticated, None));
    }

    #[test]
    fn a_roster_that_differs_is_refused_with_an_authentic_answer() {
        let (verdict, read) = handshake(&identity(1, SECRET, 6), &identity(0, SECRET, 5));
        assert_eq!((verdict, read), (Verdict::RosterDiffers, Some(Verdict::RosterDiffers)));
        let (verdict, _) = handshake(&identity(0, SECRET, 5), &identity(0, SECRET, 5));
        assert_eq!(verdict, Verdict::NotAPeer);
    }

    #[test]
    fn a_hello_for_another_challenge_is_refused() {
        let (dialer, listener) = (identity(1, SECRET, 5), identity(0, SECRET, 5));
        let hello = dialer.hello(&listener.challenge(&[1u8; NONCE_SIZE]), 0, &[2u8; NONCE_SIZE]).expect("a challenge");
        // Replayed against a fresh challenge: its MAC covers the old nonce.
        assert_eq!(listener.judge(&[4u8; NONCE_SIZE], &hello).0, Verdict::NotAuthenticated);
        let mut tampered = hello;
        tampered[24] = 2;
        assert_eq!(listener.judge(&[1u8; NONCE_SIZE], &tampered).0, Verdict::NotAuthenticated);
    }

    #[test]
    fn a_quorum_of_roster_refusals_stops_the_node_and_one_does_not() {
        let health = ClusterHealth::new(3, false);
        health.roster_differs(1);
        assert_eq!(health.fatal(), None);
        health.roster_agrees(1);
        health.roster_differs(2);
        assert_eq!(health.fatal(), None);
        health.roster_differs(1);
        assert!(health.fatal().expect("two of two peers").starts_with("roster mismatch: replicas 1, 2"));
    }
}
