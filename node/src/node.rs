//! `Node`: one shard of a Vireo node, whole, as a sans-IO state machine. It is quinn-proto's
//! `Endpoint` to the replicas' `Connection`s: it owns the client connections this shard holds
//! (the front door) and the VSR groups it hosts (`Shard`), and a driver feeds it events through
//! the same entry points whether it is the simulator or the glommio server:
//! - a connection opened or closed, a client frame from a connection (`on_client_frame`);
//! - a replica frame from another node (`on_replica_frame`), a message from another shard of
//!   this node (`on_shard_message`), an I/O completion, a tick.
//!
//! What it does with them (the path of a request):
//! 1. **Admission** on the shard holding the connection: a login is verified against the
//!    committed users and its password dropped; every other request needs a login and the
//!    user's permission (`admission`), checked against the committed metadata this shard reads.
//!    A refusal is a reply with a status and no body.
//! 2. **Sessions**: the client's own session is the metadata group's (its login); in each
//!    partition group the node registers the client on its behalf and numbers the group's
//!    requests itself (`connection`).
//! 3. **Routing**: the request goes to the shard owning its group (`routing::shard_of`) over a
//!    bounded channel, stamped with its origin (this node and shard); the group's replica there
//!    forwards it to the primary's node if it is not the primary.
//! 4. **Replies** come back to the origin (another node, another shard, or here), where the
//!    group's reply becomes the body of the command the client sent (`client_reply`).
//!    A request in flight is sent again, with the same number, until it is answered: exactly
//!    once, however often.
//! 5. **Reads** that need no consensus are answered here from committed metadata (`reads`); a
//!    poll without auto-commit is answered by the shard hosting its group once that replica has
//!    executed up to the poll's read index (`Replica::read_round`), so it sees every send
//!    acknowledged before it arrived, through any node.
//!
//! Shard 0 hosts the metadata group and publishes each newly committed metadata to the node's
//! other shards (`ShardMessage::Metadata`); a shard opens and closes its partition groups as
//! the published metadata names them.
//!
//! Bounds: connections per shard (`NodeConfig::connections_max`, one more is closed at once),
//! requests in flight per connection and sessions per connection (`connection`), events
//! buffered for the driver (`EVENTS_MAX`); a full channel to another shard drops the message
//! and the sender's resend (or VSR's timeouts) tries again.
//!
//! # The path of a request, in detail
//!
//! A node of S shards is S `Node`s, one per core, joined by bounded channels
//! (`NodeIo::send_to_shard`, which may refuse). What a shard does with a client's frame:
//!
//! 1. **Admission**, on the shard that holds the connection, against the committed metadata that
//!    shard reads (shard 0 publishes each newly committed metadata to the others).
//!    - Before a login only ping is answered; anything else gets status 40.
//!    - A login (a Register carrying a password or a personal access token, told apart by the body)
//!      is verified here, and the password goes no further: the metadata group gets a proof of
//!      which credential was checked and checks it again as it applies. So a password changed, or a
//!      token deleted or expired, meanwhile never opens a session, however far behind the admitting
//!      node was.
//!    - Sends, polls and consumer offsets are resolved (stream and topic by id or name, the
//!      partition chosen, the consumer named) and checked against the user's permissions (41).
//!    - create_user and change_password are hashed here, and create_personal_access_token draws its
//!      token here, so no secret reaches a log.
//!    - A body that does not match its stamped checksum is refused (4).
//!    - Every refusal is a reply with the reference's code and no body.
//! 2. **Sessions**: the client's own session is the metadata group's. In every partition group it
//!    uses, the node registers the client on its behalf and numbers the group's requests itself,
//!    because an SDK does not number partition requests; so a request the node re-sends until it is
//!    answered is applied once.
//! 3. **Routing** to the shard that owns the group, stamped with its origin (node and shard); a
//!    backup forwards it to its primary's node. The reply comes back to the origin and becomes the
//!    body of the command the client sent (a poll's batches cut to exactly the messages chosen).
//! 4. **Reads** that need no consensus are answered from committed metadata: get_stream(s),
//!    get_topic(s), get_consumer_group(s), get_me, get_client(s), get_user(s),
//!    get_personal_access_tokens, get_stats, get_cluster_metadata, describe_options,
//!    sync_consumer_group. The figures get_stream and get_topic report (sizes, message counts,
//!    segments, current offsets) come from the partition groups, which every shard sends to the
//!    node's others every 10 ticks (`partition_figures`): they are at most 100 ms old.
//! 5. **Purges** commit in the metadata group (permission, existence), then empty every partition
//!    they name, eight at a time, before the client is answered. A closed connection or a logout
//!    takes its client out of every consumer group.
//! 6. **Pipelining**: a connection may have up to 16 requests in flight, but one at a time in each
//!    group (VSR's one request per client session); the others wait in the order they came. So a
//!    request lost on the way is never overtaken, made stale and left unanswered, and a
//!    connection's sends to one partition are applied in the order it sent them. Replies to
//!    requests that went to different groups come back in the order those groups answer; each reply
//!    carries the request_checksum and request number its request carried, which is how a
//!    pipelining client tells them apart (an Iggy SDK waits for each reply and needs neither).
//!
//! Besides the bounds above, the sessions being ended are bounded too.
//!
//! Every command code of `PROTOCOL.md` is answered (`sim/tests/front_door.rs`). delete_segments
//! goes to the partition's group, which drops its oldest sealed segments, never the newest (the
//! user must be allowed to manage the topic, as for update_topic). flush_unsaved_buffer answers
//! FeatureUnavailable and get_snapshot_file InvalidCommand, as the reference does.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use vireo_io::{Bytes, Completion, Io, Namespace, OutFrame, Peer};
use vireo_protocol::config::Bug;
use vireo_protocol::header::{
    encode_frame, group_namespace, group_of, Command, Header, Message, Origin, FRAME_SIZE_MAX,
};
use vireo_protocol::replica::STATUS_NO_SPACE;
use vireo_protocol::request::{batched_requests, OPERATION_REGISTER, OPERATION_UNREGISTER};
use vireo_protocol::wire::{self, ClientRequest, SendMessagesHead};
use vireo_protocol::{StateMachine, Status};
use vireo_storage::batch::BatchHeader;
use vireo_storage::layout::HEADER_SIZE;
use vireo_storage::partition::{ReadBatches, ReadError, ReadRequest, ReadStart};

use crate::partition::machine::POLL_BYTES_MAX;
use crate::partition_figures::{NodeFigures, PartitionFigures, FIGURES_TICKS};

use crate::admission::{
    admit_delete_segments, admit_offset, admit_poll, admit_send, identifier, verify_login, verify_token, Admitted,
    OffsetAction, PollAdmission, STATUS_INVALID_COMMAND, STATUS_INVALID_CREDENTIALS, STATUS_INVALID_FORMAT,
    STATUS_PARTITION_NOT_FOUND, STATUS_TRANSIENT_NOT_ACCEPTED, STATUS_UNAUTHENTICATED,
};
use crate::client_reply::{client_reply_body, node_reply, poll_reply_frame};
use crate::connection::{
    Connection, InFlight, Login, PurgeQueue, ReplyKind, RequestBody, Stage, PURGE_WINDOW, RESEND_TICKS,
};
use crate::disk_reserve::{self, DiskReserve, ReserveChange};
use crate::metadata::{
    hash_password, token_hash, verify_password, MetadataCommand, PasswordCost, ReadKind, UserStatus, SALT_SIZE_BYTES,
};
use crate::metadata_plane::{internal_body, purged_topics, LoginProof, MetadataMachine, OPERATION_END_SESSION};
use crate::node_io::{ConnectionId, LocalRead, MetadataView, NodeIo, ShardMessage};
use crate::partition::request::{
    decode_poll_reply, encode_poll_reply, encode_send_head, PartitionRequest, PollReply,
    OPERATION_DELETE_CONSUMER_OFFSET, OPERATION_POLL_MESSAGES, OPERATION_SEND_MESSAGES,
    OPERATION_STORE_CONSUMER_OFFSET,
};
use crate::reads::{self, Reader};
use crate::routing::shard_of;
use crate::shard::{MetadataPlane, Published, Shard, ShardConfig, ShardEvent};
use crate::wire_view;

/// Events a node buffers for its driver; past it the oldest go (drivers poll after every input).
pub const EVENTS_MAX: usize = 16_384;
/// Request operations of `PROTOCOL.md`: a read (its command code at byte 196), a logout, and
/// the first and last metadata operations.
pub const OPERATION_NON_REPLICATED: u8 = 2;
pub const OPERATION_LOGOUT: u8 = 3;
pub const OPERATION_METADATA_FIRST: u8 = 128;
pub const OPERATION_METADATA_LAST: u8 = 149;
pub const OPERATION_PURGE_STREAM: u8 = 131;
pub const OPERATION_PURGE_TOPIC: u8 = 135;
pub const OPERATION_DELETE_SEGMENTS: u8 = 138;
pub const OPERATION_CREATE_USER: u8 = 141;
pub const OPERATION_CHANGE_PASSWORD: u8 = 144;
pub const OPERATION_CREATE_PERSONAL_ACCESS_TOKEN: u8 = 146;

#[derive(Clone, Debug)]
pub struct NodeConfig {
    pub shard: ShardConfig,
    /// Client connections this shard holds at most.
    pub connections_max: usize,
    /// What get_cluster_metadata reports.
    pub cluster_name: String,
    pub roster: Vec<wire::ClusterNode>,
    /// How expensive the password hashes this node makes are (`Test` only in the simulator).
    pub password_cost: PasswordCost,
    /// The free-space reserve (`disk_reserve`); 0: none.
    pub min_free_bytes: u64,
}

/// What a node did, for the driver's log and the simulator's trace and checkers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NodeEvent {
    Replica(ShardEvent),
    ConnectionOpened {
        connection: ConnectionId,
    },
    /// The disk's free space crossed the reserve (`disk_reserve`).
    Disk(ReserveChange),
    /// Over `connections_max`: closed at once.
    ConnectionRefused {
        connection: ConnectionId,
    },
    ConnectionClosed {
        connection: ConnectionId,
    },
    /// A frame that is not a well-formed request: the connection is closed.
    Malformed {
        connection: ConnectionId,
    },
    LoginVerified {
        connection: ConnectionId,
        user_id: u32,
    },
    /// Admitted for `group`, sent towards the shard that owns it.
    Admitted {
        connection: ConnectionId,
        request: u64,
        operation: u8,
        group: Namespace,
        shard: u16,
    },
    /// The node registers the connection's client in `group` before its request goes there.
    SessionOpening {
        connection: ConnectionId,
        group: Namespace,
    },
    SessionOpened {
        connection: ConnectionId,
        group: Namespace,
        session: u64,
    },
    /// Refused by admission (nothing was sent to any group).
    Denied {
        connection: ConnectionId,
        request: u64,
        operation: u8,
        status: u32,
    },
    /// A poll answered from this shard's replica of its group, without consensus.
    ReadLocally {
        group: Namespace,
        count: u32,
    },
    /// The client of a closed connection (or a logout) is being taken out of its groups.
    SessionEnding {
        client: u128,
    },
    /// A snapshot archive was asked for and allowed (`ReadKind::Servers`): the driver collects
    /// it (files, processes: nothing a state machine may touch) and hands it to
    /// `answer_snapshot` for this request. `types` holds valid codes, `All` expanded.
    SnapshotRequested {
        connection: ConnectionId,
        request: Header,
        compression: u8,
        types: Vec<u8>,
    },
    /// A reply went back on the connection (status 0: a success).
    Answered {
        connection: ConnectionId,
        request: u64,
        operation: u8,
        status: u32,
    },
}

/// A snapshot's sections as the reference reads them: codes 1 to 6, or 100 (`all`, alone) for
/// every one but `test` (4); compression 1 to 6 (stored, deflated, bzip2, zstd, lzma, xz) but
/// lzma (5), which the archive library cannot write (xz, 6, is the same algorithm).
pub fn snapshot_types(compression: u8, types: &[u8]) -> Result<Vec<u8>, u32> {
    const ALL: u8 = 100;
    const LZMA: u8 = 5;
    if !(1..=6).contains(&compression) || compression == LZMA || types.is_empty() {
        return Err(STATUS_INVALID_COMMAND);
    }
    if types.contains(&ALL) {
        return if types.len() == 1 { Ok(vec![1, 2, 3, 5, 6]) } else { Err(STATUS_INVALID_COMMAND) };
    }
    if types.iter().any(|code| !(1..=6).contains(code)) {
        return Err(STATUS_INVALID_COMMAND);
    }
    let mut types = types.to_vec();
    types.dedup();
    Ok(types)
}

/// What a node dropped or refused, and why: nothing goes uncounted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NodeCounters {
    pub connections_refused: u64,
    pub frames_malformed: u64,
    pub denials: u64,
    /// Messages a full channel to another shard did not take.
    pub channel_full: u64,
    /// Replies without an origin, or for a node, shard or client that is not here any more.
    pub replies_unrouted: u64,
    /// Replies no request in flight was waiting for (a late copy of an answered one).
    pub replies_unmatched: u64,
    pub resends: u64,
    /// Ends of sessions given up (`ENDING_SESSIONS_MAX`, `ENDING_ATTEMPTS_MAX`).
    pub sessions_not_ended: u64,
    /// Partition-group sessions freed for clients that left.
    pub sessions_unregistered: u64,
    /// Polls without auto-commit that returned messages, answered from the segment log, and from
    /// the machine's memory (the log did not hold the range, or was busy, or its read failed or
    /// took too long).
    pub polls_from_log: u64,
    /// Polls without auto-commit answered with less than the machine chose (the log here does not
    /// hold all of it yet, or a read failed, or `PARKED_READS_MAX`): a prefix, possibly empty.
    pub polls_cut: u64,
    /// Replicated poll replies not sent (their batches could not be read here in time): the
    /// client asks again, and its retry is filled afresh.
    pub poll_replies_dropped: u64,
    /// Polls without auto-commit that waited for their read index before they were answered.
    pub reads_indexed: u64,
    /// Polls without auto-commit refused as retriable: `READS_WAITING_MAX` were waiting, or no
    /// read index came within `READ_INDEX_ROUNDS_MAX` rounds (no quorum answers, or the group's
    /// replica here does not catch up).
    pub reads_refused: u64,
    /// Writes refused for the disk: sends and creates while its free space was below the
    /// reserve, and every write once it failed (`disk_reserve`).
    pub writes_refused_disk: u64,
}

/// A poll waiting for its segment-log read.
struct ParkedRead {
    /// The range the machine chose; the log's batches fill it (`plan.batches`: those read so
    /// far, whole and without a gap from its start, up to `covered_to`).
    plan: PollReply,
    covered_to: u64,
    since_tick: u64,
    answer: PendingAnswer,
}

impl PendingAnswer {
    /// The `group` field of the request or reply: the group whose log is read.
    fn group_field(&self) -> u64 {
        match self {
            PendingAnswer::Local { request, .. } => request.group,
            PendingAnswer::Replicated { header } => header.group,
        }
    }

    /// Whether a read parked at `since_tick` waited too long to go on reading.
    fn given_up(&self, tick: u64, since_tick: u64) -> bool {
        since_tick + PARKED_READ_TICKS_MAX <= tick
    }
}

/// `first` then `then`, in one buffer: a poll answered by more than one read.
fn joined(first: &[u8], then: &[u8]) -> Bytes {
    let mut bytes = Vec::with_capacity(first.len() + then.len());
    bytes.extend_from_slice(first);
    bytes.extend_from_slice(then);
    bytes.into()
}

/// Who a parked read's batches go to.
enum PendingAnswer {
    /// A poll without auto-commit, answered by this shard.
    /// `past_commit`: the planted bug `PollPastCommit`'s uncommitted messages (count, batches),
    /// appended to the committed ones read.
    Local { connection: ConnectionId, request: Header, past_commit: Option<(u32, Vec<u8>)> },
    /// A replicated poll's reply (its header), routed on once filled.
    Replicated { header: Header },
}

/// A poll without auto-commit waiting for its read index (`Replica::read_round`): answered once
/// this shard's replica of the group executed up to it and the group's segment log here holds
/// the range the poll reads.
struct WaitingRead {
    connection: ConnectionId,
    request: Header,
    poll: PartitionRequest,
    /// The read round it waits for (`None` while the group's replica here is still opening).
    round: Option<u64>,
    /// The read index, once its round ended.
    index: Option<u64>,
    since_tick: u64,
    rounds: u32,
}

/// Metadata operations that create partitions: their replies wait until this node hosts them.
pub const OPERATION_CREATE_TOPIC: u8 = 132;
pub const OPERATION_CREATE_PARTITIONS: u8 = 136;
/// Replies to creates one shard holds; past it a reply goes at once.
pub const CREATE_REPLIES_HELD_MAX: usize = 1024;
/// Ticks a reply to a create is held at most (a shard that cannot open the group, say).
pub const CREATE_REPLY_HELD_TICKS_MAX: u64 = 300;

/// Polls one shard keeps waiting for their read index; past it a poll is refused as retriable.
pub const READS_WAITING_MAX: usize = 1024;
/// Ticks a poll waits for its read index and for the replica to execute up to it before it
/// asks a fresh round (the index may name an op a view change discarded, reused only by the
/// next write).
pub const READ_INDEX_WAIT_TICKS: u64 = 100;
/// Rounds a poll asks before it is refused as retriable.
pub const READ_INDEX_ROUNDS_MAX: u32 = 3;

/// Polls one shard keeps waiting for segment-log reads; past it, a poll without auto-commit is
/// answered with no messages and a replicated reply is not sent (the client asks again).
pub const PARKED_READS_MAX: usize = 256;
/// Of those, the polls of one connection (the rest of its polls are answered as above).
pub const PARKED_READS_PER_CONNECTION_MAX: usize = 16;
/// Ticks a parked poll waits for its read before it is given up as above.
pub const PARKED_READ_TICKS_MAX: u64 = 50;

/// The `Io` the groups run on: every ask passes through, but what a replica sends to a client
/// is held for the node to route (the client's connection is the node's to find).
struct ReplyTap<'a, I: NodeIo> {
    io: &'a mut I,
    replies: Vec<Vec<u8>>,
}

impl<I: NodeIo> Io for ReplyTap<'_, I> {
    vireo_io::forward_asks_but_send!(io);

    fn send(&mut self, to: Peer, message: Vec<u8>) {
        match to {
            Peer::Client(_) => self.replies.push(message),
            Peer::Replica(_) => self.io.send(to, message),
        }
    }

    fn send_frame(&mut self, to: Peer, frame: OutFrame) {
        match to {
            Peer::Client(_) => self.replies.push(frame.into_whole()),
            Peer::Replica(_) => self.io.send_frame(to, frame),
        }
    }
}

/// A session the node ends on behalf of a client that is gone.
#[derive(Clone, Debug)]
struct EndingSession {
    frame: Vec<u8>,
    sent_tick: u64,
    attempts: u32,
}

/// What a client's request said of itself, answered back in its reply header.
#[derive(Clone, Copy, Debug)]
struct ClientRef {
    request: u64,
    checksum: u128,
    operation: u8,
}

/// Sessions a shard ends at once; past it a closed client stays in its groups until its session
/// is evicted (counted).
pub const ENDING_SESSIONS_MAX: usize = 1024;
/// Partition-group sessions a leaving client frees at once.
pub const UNREGISTERS_MAX: usize = 64;
/// Times an end of session is sent before it is given up (counted).
pub const ENDING_ATTEMPTS_MAX: u32 = 16;

pub struct Node {
    config: NodeConfig,
    shard: Shard<MetadataMachine>,
    /// The committed metadata this shard reads (`None` until shard 0 first publishes).
    view: Option<MetadataView>,
    /// Shard 0: the metadata op and durable commit point last handed to each shard.
    published: Vec<Option<(u64, u64)>>,
    /// Whether this process published metadata yet: the first view waits until the metadata
    /// replica is normal and has applied every commit it knows of, so that a restart does not
    /// publish a replayed state that still holds a partition deleted before the crash (whose
    /// files the deletion may have half removed).
    first_published: bool,
    connections: BTreeMap<ConnectionId, Connection>,
    /// The connection each logged-in (or logging-in) client id is on.
    clients: BTreeMap<u128, ConnectionId>,
    /// Sessions of closed connections (or logouts) whose clients are being taken out of their
    /// consumer groups (`OPERATION_END_SESSION`), by client.
    ending: BTreeMap<u128, EndingSession>,
    events: VecDeque<NodeEvent>,
    tick: u64,
    /// Polls waiting for their read index, oldest first (`READS_WAITING_MAX`).
    reads_waiting: VecDeque<WaitingRead>,
    /// Replies to creates of partitions, held until this node hosts them (`CREATE_REPLIES_HELD_MAX`):
    /// (the metadata op that created them, the tick it was held at, the reply).
    creates_held: VecDeque<(u64, u64, Vec<u8>)>,
    /// Polls waiting for their segment-log reads, by read id (`PARKED_READS_MAX`).
    parked_reads: BTreeMap<u64, ParkedRead>,
    read_next: u64,
    /// What every shard's partition groups last said of themselves (`partition_figures`).
    figures: NodeFigures,
    /// The free-space reserve, read every tick.
    disk: DiskReserve,
    pub counters: NodeCounters,
}

/// A request for a partition group, as admission made it.
#[derive(Clone, Debug, PartialEq, Eq)]
struct GroupRequest {
    group: Namespace,
    operation: u8,
    body: RequestBody,
    kind: ReplyKind,
}

impl From<Admitted> for GroupRequest {
    fn from(admitted: Admitted) -> GroupRequest {
        GroupRequest {
            group: admitted.group,
            operation: admitted.request.operation(),
            body: RequestBody::Encoded(admitted.request.encode()),
            kind: admitted.kind,
        }
    }
}

impl Node {
    pub fn open(config: NodeConfig, io: &mut impl NodeIo) -> Node {
        assert!(config.connections_max >= 1);
        let mut tap = ReplyTap { io, replies: Vec::new() };
        let shard = Shard::open(config.shard.clone(), &mut tap);
        assert!(tap.replies.is_empty(), "a replica that just opened answers no one");
        let shards = config.shard.shards as usize;
        let disk = DiskReserve::new(config.min_free_bytes);
        let mut node = Node {
            config,
            shard,
            view: None,
            published: vec![None; shards],
            first_published: false,
            connections: BTreeMap::new(),
            clients: BTreeMap::new(),
            ending: BTreeMap::new(),
            events: VecDeque::new(),
            tick: 0,
            reads_waiting: VecDeque::new(),
            creates_held: VecDeque::new(),
            parked_reads: BTreeMap::new(),
            read_next: 0,
            figures: NodeFigures::default(),
            disk,
            counters: NodeCounters::default(),
        };
        node.drain_shard_events();
        node
    }

    pub fn config(&self) -> &NodeConfig {
        &self.config
    }

    /// The groups this shard hosts.
    pub fn shard(&self) -> &Shard<MetadataMachine> {
        &self.shard
    }

    pub fn view(&self) -> Option<&MetadataView> {
        self.view.as_ref()
    }

    pub fn connections(&self) -> usize {
        self.connections.len()
    }

    /// Client requests this shard admitted and has not answered yet (what a graceful shutdown
    /// waits for).
    pub fn requests_in_flight(&self) -> usize {
        self.connections.values().map(|connection| connection.in_flight.len()).sum()
    }

    /// What the node last read of its disk, and whether it refuses new data.
    pub fn disk_reserve(&self) -> &DiskReserve {
        &self.disk
    }

    /// A group of this node (a single node) stopped on a failed write or sync: from now on the
    /// node refuses every write and answers reads, until it is restarted (`disk_reserve`).
    pub fn on_storage_failed(&mut self) {
        self.disk.on_storage_failed();
    }

    pub fn poll_event(&mut self) -> Option<NodeEvent> {
        self.events.pop_front()
    }

    /// Whether this shard has recovered what it hosts, so that its node may take clients: it
    /// reads published metadata (on shard 0: its metadata replica is in normal status and has
    /// executed every commit it knows of), and every partition group the metadata gives this
    /// shard is open, in normal status, has executed every commit it knows of (a single
    /// replica: every op its WAL holds, all of them committed) and its segment log holds what
    /// it executed. The groups that cannot yet (no quorum) are what a driver's bound is for.
    pub fn recovered(&self) -> bool {
        let Some(view) = &self.view else { return false };
        let shards = self.config.shard.shards;
        view.partitions.keys().filter(|group| shard_of(**group, shards) == self.shard_index()).all(|group| {
            let Some(replica) = self.shard.partition(*group) else { return false };
            let executed = replica.status() == Status::Normal
                && replica.commit_min() == replica.commit_max()
                && (replica.config().replica_count > 1 || replica.commit_min() == replica.op());
            let next_offset = replica.state_machine().next_offset();
            let held = self.shard.segment_log(*group).is_some_and(|log| log.readable_to() >= next_offset);
            replica.superseded() || (executed && held)
        })
    }

    fn node_index(&self) -> u8 {
        self.config.shard.node
    }

    fn shard_index(&self) -> u16 {
        self.config.shard.shard
    }

    fn bug(&self) -> Option<Bug> {
        self.config.shard.metadata.bug
    }

    fn event(&mut self, event: NodeEvent) {
        if self.events.len() == EVENTS_MAX {
            self.events.pop_front();
        }
        self.events.push_back(event);
    }

    // Events from the driver.

    pub fn on_connection_opened(&mut self, io: &mut impl NodeIo, connection: ConnectionId) {
        assert!(!self.connections.contains_key(&connection), "the driver numbers connections once");
        if self.connections.len() == self.config.connections_max {
            self.counters.connections_refused += 1;
            self.event(NodeEvent::ConnectionRefused { connection });
            io.close_connection(connection);
            return;
        }
        let origin = Origin { node: self.node_index(), shard: self.shard_index() };
        self.connections.insert(connection, Connection::new(connection, origin));
        self.event(NodeEvent::ConnectionOpened { connection });
    }

    /// The connection is gone: its requests in flight are no one's now (a group may still apply
    /// them; their replies find no connection and are dropped).
    pub fn on_connection_closed(&mut self, io: &mut impl NodeIo, connection: ConnectionId) {
        let Some(closed) = self.connections.remove(&connection) else { return };
        if let Some(client) = closed.client() {
            if self.clients.get(&client) == Some(&connection) {
                self.clients.remove(&client);
            }
        }
        self.end_session(io, &closed, closed.last_request + 1);
        self.unregister_sessions(io, &closed);
        self.event(NodeEvent::ConnectionClosed { connection });
    }

    /// Frees the sessions a gone client held in partition groups (at most
    /// `UNREGISTERS_MAX`; the groups' client tables evict the rest when they fill).
    fn unregister_sessions(&mut self, io: &mut impl NodeIo, gone: &Connection) {
        let Some((client, user_id, _)) = gone.logged_in() else { return };
        let cluster = self.config.shard.metadata.cluster;
        for (group, session) in gone.group_sessions.iter().take(UNREGISTERS_MAX) {
            let mut header = Header::new(Command::Request, cluster, 0);
            header.client = client;
            header.session = session.session;
            header.request = session.request + 1;
            header.operation = OPERATION_UNREGISTER;
            header.user_id = user_id;
            header.group = group_of(*group);
            header.origin = Some(gone.origin);
            let frame = Message::new(header, Vec::new()).encode();
            self.counters.sessions_unregistered += 1;
            self.route_to_group(io, &header, frame);
        }
    }

    /// Takes a client that is gone (its connection closed, or it logged out) out of every
    /// consumer group it is in, in its own metadata session, with `request` as the number.
    fn end_session(&mut self, io: &mut impl NodeIo, gone: &Connection, request: u64) {
        let Some((client, user_id, session)) = gone.logged_in() else { return };
        let in_groups = self.view.as_ref().is_some_and(|view| !view.metadata.groups_of_client(client).is_empty());
        if !in_groups || self.ending.contains_key(&client) {
            return;
        }
        if self.ending.len() == ENDING_SESSIONS_MAX {
            self.counters.sessions_not_ended += 1;
            return;
        }
        let mut header = Header::new(Command::Request, self.config.shard.metadata.cluster, 0);
        header.client = client;
        header.session = session;
        header.request = request;
        header.operation = OPERATION_END_SESSION;
        header.user_id = user_id;
        header.group = group_of(Namespace::METADATA);
        header.origin = Some(gone.origin);
        let frame = Message::new(header, Vec::new()).encode();
        self.ending.insert(client, EndingSession { frame: frame.clone(), sent_tick: self.tick, attempts: 1 });
        self.event(NodeEvent::SessionEnding { client });
        self.route_to_group(io, &header, frame);
    }

    fn resend_ending_sessions(&mut self, io: &mut impl NodeIo) {
        let tick = self.tick;
        let due: Vec<u128> = self
            .ending
            .iter()
            .filter(|(_, ending)| ending.sent_tick + RESEND_TICKS <= tick)
            .map(|(client, _)| *client)
            .collect();
        for client in due {
            let ending = self.ending.get_mut(&client).expect("listed");
            if ending.attempts == ENDING_ATTEMPTS_MAX {
                self.ending.remove(&client);
                self.counters.sessions_not_ended += 1;
                continue;
            }
            ending.attempts += 1;
            ending.sent_tick = tick;
            let frame = ending.frame.clone();
            let header = Header::decode(&frame).expect("a frame of our own");
            self.route_to_group(io, &header, frame);
        }
    }

    /// A frame a client sent on `connection`.
    pub fn on_client_frame(&mut self, io: &mut impl NodeIo, connection: ConnectionId, frame: Vec<u8>) {
        if !self.connections.contains_key(&connection) {
            return;
        }
        // Borrowed: a send's batch stays in the client's frame, which its request in flight keeps.
        let (header, body) = match Message::decode_borrowed(&frame, false) {
            Ok((header, body)) if header.command == Command::Request && header.client != 0 => (header, body),
            _ => {
                self.counters.frames_malformed += 1;
                self.event(NodeEvent::Malformed { connection });
                io.close_connection(connection);
                return;
            }
        };
        // A client that stamps its body's checksum (`PROTOCOL.md`, request_checksum) gets a body
        // that matches it applied, or nothing: InvalidFormat, as the reference answers.
        if header.parent != 0 && header.parent != vireo_storage::checksum::checksum64(body) as u128 {
            self.deny(io, connection, &header, STATUS_INVALID_FORMAT);
            return;
        }
        self.forget_stale_login(connection);
        // A login is refused only once the disk failed (it would be written); anything else only
        // for a client that may make it.
        let logged_in = self.connections.get(&connection).is_some_and(|conn| conn.logged_in().is_some())
            || header.operation == OPERATION_REGISTER;
        let refusal = self.disk.refusal(header.operation).filter(|_| logged_in);
        if let Some(status) = refusal.filter(|_| self.bug() != Some(Bug::SendPastDiskReserve)) {
            self.counters.writes_refused_disk += 1;
            self.deny(io, connection, &header, status);
            return;
        }
        let result = match header.operation {
            OPERATION_REGISTER => self.on_login(io, connection, header, body),
            OPERATION_LOGOUT => self.on_logout(io, connection, header),
            OPERATION_NON_REPLICATED => self.on_read(io, connection, header, body),
            OPERATION_METADATA_FIRST..=OPERATION_METADATA_LAST => {
                self.on_metadata_request(io, connection, header, body.to_vec())
            }
            OPERATION_SEND_MESSAGES | OPERATION_STORE_CONSUMER_OFFSET | OPERATION_DELETE_CONSUMER_OFFSET => {
                self.on_partition_request(io, connection, header, frame)
            }
            _ => Err(STATUS_INVALID_COMMAND),
        };
        if let Err(status) = result {
            self.deny(io, connection, &header, status);
        }
    }

    /// A frame from another node: a replica message for one of this node's groups, a client
    /// request a replica forwarded to its primary here, or a reply for a client of this node.
    pub fn on_replica_frame(&mut self, io: &mut impl NodeIo, bytes: Vec<u8>) {
        let Ok(header) = Header::decode(&bytes) else {
            self.counters.frames_malformed += 1;
            return;
        };
        if matches!(header.command, Command::Reply | Command::Eviction) {
            self.route_client_reply(io, bytes);
            return;
        }
        self.route_to_group(io, &header, bytes);
    }

    pub fn on_shard_message(&mut self, io: &mut impl NodeIo, message: ShardMessage) {
        match message {
            ShardMessage::Frame(bytes) => self.with_groups(io, |shard, io| shard.on_message(io, bytes)),
            ShardMessage::ClientReply(bytes) => self.on_client_reply(io, &bytes),
            ShardMessage::Metadata(view) => self.on_metadata_view(io, view),
            ShardMessage::Figures { shard, figures, metadata_leader } => {
                if shard == 0 {
                    self.figures.metadata_leader = metadata_leader;
                }
                self.figures.replace(shard, figures)
            }
            ShardMessage::Read(read) => self.serve_poll(io, read.connection, read.request, read.poll),
            ShardMessage::ToConnection { connection, frame } => {
                if self.connections.contains_key(&connection) {
                    io.send_frame_to_connection(connection, frame);
                }
            }
        }
    }

    pub fn on_completion(&mut self, io: &mut impl NodeIo, completion: Completion) {
        self.with_groups(io, |shard, io| shard.on_completion(io, completion));
        self.finish_log_reads(io);
    }

    /// Answers the parked polls whose segment-log reads finished.
    fn finish_log_reads(&mut self, io: &mut impl NodeIo) {
        while let Some((id, result)) = self.shard.take_segment_read() {
            self.finish_log_read(io, id, result);
        }
    }

    pub fn tick(&mut self, io: &mut impl NodeIo) {
        self.tick += 1;
        if let Some(change) = self.disk.observe(io.disk_space()) {
            self.event(NodeEvent::Disk(change));
        }
        self.shard.set_disk_low(self.disk.is_low());
        self.with_groups(io, |shard, io| shard.tick(io));
        self.finish_log_reads(io);
        let late: Vec<u64> = self
            .parked_reads
            .iter()
            .filter(|(_, parked)| parked.since_tick + PARKED_READ_TICKS_MAX <= self.tick)
            .map(|(id, _)| *id)
            .collect();
        for id in late {
            self.finish_log_read(io, id, Err(ReadError::Busy));
        }
        self.serve_waiting_reads(io);
        if self.tick.is_multiple_of(FIGURES_TICKS) {
            self.send_figures(io);
        }
        self.answer_held_creates(io);
        self.resend_in_flight(io);
        self.resend_ending_sessions(io);
        if self.shard_index() == 0 {
            self.publish(io);
        }
    }

    // The groups.

    /// Runs one input on the hosted groups, then routes what they answered clients, buffers
    /// their events, and (shard 0) publishes newly committed metadata.
    fn with_groups<I: NodeIo>(
        &mut self,
        io: &mut I,
        action: impl FnOnce(&mut Shard<MetadataMachine>, &mut ReplyTap<I>),
    ) {
        self.with_groups_then(io, true, action)
    }

    fn with_groups_then<I: NodeIo>(
        &mut self,
        io: &mut I,
        publish: bool,
        action: impl FnOnce(&mut Shard<MetadataMachine>, &mut ReplyTap<I>),
    ) {
        let mut tap = ReplyTap { io: &mut *io, replies: Vec::new() };
        action(&mut self.shard, &mut tap);
        let replies = std::mem::take(&mut tap.replies);
        // The groups' events first: a reply follows the commit that made it.
        self.drain_shard_events();
        for reply in replies {
            if let Some(reply) = self.fill_poll_reply(io, reply) {
                self.route_client_reply(io, reply);
            }
        }
        self.serve_waiting_reads(io);
        if publish && self.shard_index() == 0 {
            self.publish(io);
        }
    }

    /// A replicated poll's reply names its range only (`PartitionMachine::poll`): the messages
    /// come from the segment log of the replica here that applied it and sends the reply, read
    /// afresh for every answer (a retried poll's cached reply too); the reply is parked until
    /// they arrive (`None` here). Anything else goes on as it is.
    fn fill_poll_reply(&mut self, io: &mut impl NodeIo, frame: Vec<u8>) -> Option<Vec<u8>> {
        let Ok(header) = Header::decode(&frame) else { return Some(frame) };
        if header.command != Command::Reply || header.operation != OPERATION_POLL_MESSAGES || header.status != 0 {
            return Some(frame);
        }
        let Some(group) = group_namespace(header.group).filter(|group| self.shard.partition(*group).is_some()) else {
            return Some(frame);
        };
        let Ok(mut reply) = decode_poll_reply(&frame[HEADER_SIZE..]) else {
            // A refusal (a status word): no messages to fill in.
            return Some(frame);
        };
        if !reply.batches.is_empty() {
            return Some(frame);
        }
        self.shard.partition(group).expect("checked").state_machine().held(&mut reply);
        if reply.count == 0 {
            return Some(Message::new(header, encode_poll_reply(&reply)).encode());
        }
        match self.issue_log_read(io, group, &reply) {
            Some(id) => {
                let answer = PendingAnswer::Replicated { header };
                let covered_to = reply.start;
                self.parked_reads.insert(id, ParkedRead { plan: reply, covered_to, since_tick: self.tick, answer });
            }
            None => self.counters.poll_replies_dropped += 1,
        }
        None
    }

    fn drain_shard_events(&mut self) {
        while let Some(event) = self.shard.poll_event() {
            self.event(NodeEvent::Replica(event));
        }
    }

    /// A frame for a group: into the replica here if this shard owns it, else over the channel.
    fn route_to_group(&mut self, io: &mut impl NodeIo, header: &Header, bytes: Vec<u8>) {
        let group = Shard::<MetadataMachine>::group_of_frame(header);
        let owner = shard_of(group, self.config.shard.shards);
        if owner == self.shard_index() {
            self.with_groups(io, |shard, io| shard.on_message(io, bytes));
        } else if io.send_to_shard(owner, ShardMessage::Frame(bytes)).is_err() {
            self.counters.channel_full += 1;
        }
    }

    /// Shard 0: makes newly committed metadata this shard's view and hands it to every other
    /// shard (one whose channel is full gets it at a later tick).
    fn publish(&mut self, io: &mut impl NodeIo) {
        let Some(replica) = self.shard.metadata() else { return };
        if replica.status() == Status::Opening {
            return;
        }
        let caught_up = replica.status() == Status::Normal && replica.commit_min() == replica.commit_max();
        if !self.first_published && !caught_up {
            return;
        }
        self.first_published = true;
        let op = replica.commit_min();
        let commit_durable = replica.superblock_durable().commit_max;
        let last = self.view.as_ref().map(|view| (view.op, view.commit_durable));
        if last != Some((op, commit_durable)) {
            let partitions = replica.state_machine().partitions();
            // Groups this metadata deletes have their files removed only once the deletion is
            // durably committed here (`Shard::start_removals`): make it so.
            let deletes = self.view.as_ref().is_some_and(|view| {
                view.partitions.iter().any(|(namespace, group)| partitions.get(namespace) != Some(group))
            });
            let view = MetadataView {
                op,
                commit_durable,
                metadata: Arc::new(replica.state_machine().metadata().clone()),
                partitions: Arc::new(partitions),
            };
            self.on_metadata_view(io, view);
            if deletes && self.config.shard.partition.bug != Some(Bug::DeletionNotDurable) {
                self.with_groups_then(io, false, |shard, io| shard.persist_metadata_commit(io));
            }
        }
        let view = self.view.clone().expect("just made");
        for shard in 1..self.config.shard.shards {
            if self.published[shard as usize] == Some((view.op, view.commit_durable)) {
                continue;
            }
            match io.send_to_shard(shard, ShardMessage::Metadata(view.clone())) {
                Ok(()) => self.published[shard as usize] = Some((view.op, view.commit_durable)),
                Err(_) => self.counters.channel_full += 1,
            }
        }
    }

    fn on_metadata_view(&mut self, io: &mut impl NodeIo, view: MetadataView) {
        let partitions = view.partitions.clone();
        let at = Published { op: view.op, commit_durable: view.commit_durable };
        self.view = Some(view);
        self.with_groups_then(io, false, |shard, io| shard.sync_partitions(io, &partitions, at));
    }

    // Admission.

    fn deny(&mut self, io: &mut impl NodeIo, connection: ConnectionId, request: &Header, status: u32) {
        assert_ne!(status, 0);
        self.counters.denials += 1;
        let frame = node_reply(request, self.config.shard.metadata.cluster, self.node_index(), status, Vec::new());
        io.send_to_connection(connection, frame);
        self.event(NodeEvent::Denied { connection, request: request.request, operation: request.operation, status });
    }

    fn answer_here(&mut self, io: &mut impl NodeIo, connection: ConnectionId, request: &Header, body: Vec<u8>) {
        let frame = node_reply(request, self.config.shard.metadata.cluster, self.node_index(), 0, body);
        io.send_to_connection(connection, frame);
        self.event(NodeEvent::Answered {
            connection,
            request: request.request,
            operation: request.operation,
            status: 0,
        });
    }

    /// The answer to a `SnapshotRequested`: the archive, or the status refusing it.
    pub fn answer_snapshot(
        &mut self,
        io: &mut impl NodeIo,
        connection: ConnectionId,
        request: &Header,
        archive: Result<Vec<u8>, u32>,
    ) {
        match archive {
            Ok(archive) => self.answer_here(io, connection, request, archive),
            Err(status) => self.deny(io, connection, request, status),
        }
    }

    fn metadata(&self) -> Result<Arc<crate::metadata::Metadata>, u32> {
        // Before the first publication (the metadata replica is still opening) nothing can be
        // checked: the client may try again.
        self.view.as_ref().map(|view| view.metadata.clone()).ok_or(STATUS_TRANSIENT_NOT_ACCEPTED)
    }

    fn on_login(
        &mut self,
        io: &mut impl NodeIo,
        connection: ConnectionId,
        header: Header,
        body: &[u8],
    ) -> Result<(), u32> {
        if header.session != 0 || header.request != 0 {
            return Err(STATUS_INVALID_COMMAND);
        }
        // Both logins come as a Register with no command code: the body's shape tells them apart.
        let login = wire::decode_login(body).map_err(|_| STATUS_INVALID_COMMAND)?;
        let metadata = self.metadata()?;
        let (user_id, proof) = match &login {
            wire::Login::Password(login) => {
                let user_id = verify_login(&metadata, login, self.bug())?;
                let password_hash = metadata.user(user_id).expect("verified").password_hash.clone();
                (user_id, LoginProof::Password { user_id, password_hash })
            }
            wire::Login::Token(login) => {
                let user_id = verify_token(&metadata, login, io.now())?;
                let token = String::from_utf8_lossy(login.token.as_bytes()).into_owned();
                (user_id, LoginProof::Token { user_id, token_hash: token_hash(&token) })
            }
        };
        let conn = self.connections.get_mut(&connection).expect("checked by the caller");
        if conn.in_flight_full() {
            return Err(STATUS_TRANSIENT_NOT_ACCEPTED);
        }
        if let Some(client) = self.clients.get(&header.client) {
            if *client != connection {
                // Another connection of this shard holds this client id.
                return Err(STATUS_INVALID_COMMAND);
            }
        }
        // A new login is a new client (the SDK draws a new id): the old one's work is dropped.
        if let Some(previous) = conn.client() {
            self.clients.remove(&previous);
        }
        let conn = self.connections.get_mut(&connection).expect("checked by the caller");
        conn.in_flight.clear();
        conn.group_sessions.clear();
        conn.last_request = 0;
        conn.user_created_at = metadata.user(user_id).expect("verified").created_at;
        conn.login = Login::Registering { client: header.client, user_id };
        self.clients.insert(header.client, connection);
        let mut register = Header::new(Command::Request, self.config.shard.metadata.cluster, 0);
        register.client = header.client;
        register.operation = OPERATION_REGISTER;
        register.user_id = user_id;
        register.group = group_of(Namespace::METADATA);
        register.origin = Some(conn.origin);
        register.parent = header.parent;
        // The password has been checked: it goes no further than this shard. What goes on is
        // which credential was checked, for the metadata group to check again as it applies.
        let in_flight = InFlight {
            client_request: 0,
            client_checksum: header.parent,
            operation: OPERATION_REGISTER,
            group: Namespace::METADATA,
            kind: ReplyKind::Login { user_id },
            stage: Stage::Register,
            header: register,
            body: RequestBody::Encoded(proof.encode()),
            sent_tick: self.tick,
        };
        let key = conn.track(in_flight);
        self.event(NodeEvent::LoginVerified { connection, user_id });
        self.send_in_flight(io, connection, key);
        Ok(())
    }

    fn on_logout(&mut self, io: &mut impl NodeIo, connection: ConnectionId, header: Header) -> Result<(), u32> {
        let ended = self.connections[&connection].clone();
        // The logout's own number (the SDK numbers it like a metadata command) ends the session.
        self.end_session(io, &ended, header.request.max(ended.last_request + 1));
        self.unregister_sessions(io, &ended);
        let conn = self.connections.get_mut(&connection).expect("checked by the caller");
        if let Some(client) = conn.client() {
            if self.clients.get(&client) == Some(&connection) {
                self.clients.remove(&client);
            }
        }
        conn.login = Login::Anonymous;
        conn.in_flight.clear();
        conn.group_sessions.clear();
        self.answer_here(io, connection, &header, Vec::new());
        Ok(())
    }

    /// A login whose user was deleted (or deleted and its id given to another user) since is
    /// over: the connection must log in again.
    fn forget_stale_login(&mut self, connection: ConnectionId) {
        let Some(view) = &self.view else { return };
        let conn = self.connections.get_mut(&connection).expect("checked by the caller");
        let Some((client, user_id, _)) = conn.logged_in() else { return };
        if view.metadata.user(user_id).is_some_and(|user| user.created_at == conn.user_created_at) {
            return;
        }
        conn.login = Login::Anonymous;
        conn.in_flight.clear();
        conn.group_sessions.clear();
        if self.clients.get(&client) == Some(&connection) {
            self.clients.remove(&client);
        }
    }

    /// The connection's client, user and session, or `STATUS_UNAUTHENTICATED`.
    fn logged_in(&self, connection: ConnectionId) -> Result<(u128, u32, u64), u32> {
        self.connections[&connection].logged_in().ok_or(STATUS_UNAUTHENTICATED)
    }

    fn on_read(
        &mut self,
        io: &mut impl NodeIo,
        connection: ConnectionId,
        header: Header,
        body: &[u8],
    ) -> Result<(), u32> {
        if header.command_code == wire::command::PING {
            self.answer_here(io, connection, &header, Vec::new());
            return Ok(());
        }
        let (client, user_id, _) = self.logged_in(connection)?;
        let request = ClientRequest::decode(header.command_code, body).map_err(|_| STATUS_INVALID_COMMAND)?;
        let metadata = self.metadata()?;
        match &request {
            ClientRequest::PollMessages(poll) => {
                let cursor = self.bump_cursor(connection);
                match admit_poll(&metadata, user_id, client, poll, cursor)? {
                    // Without auto-commit a poll changes nothing: the owning shard of this node
                    // answers it from its replica's committed log.
                    PollAdmission::Group(admitted) if !poll.auto_commit => {
                        self.event(NodeEvent::Admitted {
                            connection,
                            request: header.request,
                            operation: header.operation,
                            group: admitted.group,
                            shard: shard_of(admitted.group, self.config.shard.shards),
                        });
                        self.read_poll(io, connection, header, admitted.group, admitted.request)
                    }
                    PollAdmission::Group(admitted) => self.submit(io, connection, &header, admitted),
                    PollAdmission::NothingAssigned => {
                        let empty = wire::PollReply::new(0, 0, Vec::new()).expect("no batches").encode();
                        self.answer_here(io, connection, &header, empty);
                        Ok(())
                    }
                }
            }
            ClientRequest::GetConsumerOffset(key) => {
                let cursor = self.bump_cursor(connection);
                let admitted = admit_offset(&metadata, user_id, client, key, OffsetAction::Get, cursor, self.bug())?;
                self.submit(io, connection, &header, admitted)
            }
            ClientRequest::GetSnapshotFile { compression, types } => {
                metadata.authorize_read(user_id, ReadKind::Servers).map_err(|error| error.code())?;
                let types = snapshot_types(*compression, types)?;
                self.event(NodeEvent::SnapshotRequested {
                    connection,
                    request: header,
                    compression: *compression,
                    types,
                });
                Ok(())
            }
            ClientRequest::GetClusterMetadata => {
                let cluster =
                    wire::ClusterMetadata { name: self.config.cluster_name.clone(), nodes: self.roster_with_roles() };
                self.answer_here(io, connection, &header, cluster.encode());
                Ok(())
            }
            _ => {
                let clients = self.client_summaries(&metadata);
                let metadata_op = self.view.as_ref().map_or(0, |view| view.op);
                let reader = Reader {
                    user_id,
                    client,
                    connection,
                    clients: &clients,
                    metadata_op,
                    figures: &self.figures,
                    disk: self.disk.space(),
                    bug: self.bug(),
                };
                let body = reads::answer(&metadata, &reader, &request)?;
                self.answer_here(io, connection, &header, body);
                Ok(())
            }
        }
    }

    /// This shard's groups' figures, kept here and sent to the node's other shards (a full
    /// channel skips it: the next send replaces it anyway).
    fn send_figures(&mut self, io: &mut impl NodeIo) {
        let figures: BTreeMap<Namespace, PartitionFigures> = self
            .shard
            .partitions()
            .map(|(namespace, replica)| {
                let machine = replica.state_machine();
                let (first, next) = (machine.first_offset(), machine.next_offset());
                let figures = PartitionFigures {
                    // A partition always has a segment to write to, the reference says so of
                    // an empty one too.
                    segments: machine.segments_count().max(1),
                    current_offset: next.saturating_sub(1),
                    size: machine.retained_bytes(),
                    messages: next - first,
                };
                (namespace, figures)
            })
            .collect();
        let own = self.shard_index();
        let metadata_leader = self.metadata_leader();
        if own == 0 {
            self.figures.metadata_leader = metadata_leader;
        }
        for shard in (0..self.config.shard.shards).filter(|shard| *shard != own) {
            let message = ShardMessage::Figures { shard: own, figures: figures.clone(), metadata_leader };
            if io.send_to_shard(shard, message).is_err() {
                self.counters.channel_full += 1;
            }
        }
        self.figures.replace(own, figures);
    }

    /// Shard 0: the metadata group's primary, when this node's replica of it is in normal status.
    fn metadata_leader(&self) -> Option<u8> {
        let replica = self.shard.metadata()?;
        (replica.status() == Status::Normal).then(|| replica.config().primary_index(replica.view()))
    }

    /// The roster as get_cluster_metadata reports it: the metadata group's primary is the leader
    /// (Iggy's role 0), the others followers (1); every node healthy (0) while a leader is known,
    /// else starting (1).
    fn roster_with_roles(&self) -> Vec<wire::ClusterNode> {
        let leader = if self.shard_index() == 0 { self.metadata_leader() } else { self.figures.metadata_leader };
        let mut roster = self.config.roster.clone();
        for (index, node) in roster.iter_mut().enumerate() {
            node.role = if leader == Some(index as u8) { 0 } else { 1 };
            node.status = if leader.is_some() { 0 } else { 1 };
        }
        roster
    }

    /// The incarnation of a partition's group in the committed metadata this shard reads.
    fn incarnation_of(&self, group: Namespace) -> u64 {
        self.view.as_ref().and_then(|view| view.partitions.get(&group)).map_or(0, |group| group.incarnation)
    }

    /// A poll without auto-commit, to the shard that hosts its group on this node.
    fn read_poll(
        &mut self,
        io: &mut impl NodeIo,
        connection: ConnectionId,
        mut header: Header,
        group: Namespace,
        poll: PartitionRequest,
    ) -> Result<(), u32> {
        let owner = shard_of(group, self.config.shard.shards);
        header.origin = Some(Origin { node: self.node_index(), shard: self.shard_index() });
        header.group = group_of(group);
        if owner == self.shard_index() {
            self.serve_poll(io, connection, header, poll);
            return Ok(());
        }
        io.send_to_shard(owner, ShardMessage::Read(Box::new(LocalRead { connection, request: header, poll })))
            .map_err(|_| STATUS_TRANSIENT_NOT_ACCEPTED)
    }

    /// A poll without auto-commit on this shard: it waits for its read index (`read_index`),
    /// so that it sees every send acknowledged before it arrived, on any node.
    fn serve_poll(&mut self, io: &mut impl NodeIo, connection: ConnectionId, request: Header, poll: PartitionRequest) {
        // The planted bugs: no read index at all, or none on a primary while prepares past its
        // commit point are here to serve.
        let group = group_namespace(request.group).expect("a read names its group");
        let past_commit = self.shard.partition(group).is_some_and(|replica| {
            replica.status() == Status::Normal && replica.is_primary() && replica.op() > replica.commit_min()
        });
        if self.bug() == Some(Bug::PollWithoutReadIndex) || (self.bug() == Some(Bug::PollPastCommit) && past_commit) {
            self.answer_poll(io, connection, request, poll);
            return;
        }
        // A single node whose disk failed commits nothing more (its groups stopped, its front
        // door refuses every write): what its replicas executed is the last state any client was
        // acknowledged, so it is read as it is, without a round the stopped replica would not
        // answer.
        if self.disk.storage_failed() && self.config.shard.partition.replica_count == 1 {
            self.answer_poll(io, connection, request, poll);
            return;
        }
        if self.reads_waiting.len() == READS_WAITING_MAX {
            self.refuse_read(io, connection, &request);
            return;
        }
        let round = self.shard.read_round(&mut ReplyTap { io: &mut *io, replies: Vec::new() }, group);
        let since_tick = self.tick;
        self.reads_waiting.push_back(WaitingRead {
            connection,
            request,
            poll,
            round,
            index: None,
            since_tick,
            rounds: 1,
        });
        self.serve_waiting_reads(io);
    }

    /// Answers the polls whose read index this shard's replicas reached and whose ranges their
    /// segment logs hold; asks a fresh round for those that waited `READ_INDEX_WAIT_TICKS`, and
    /// refuses those that asked `READ_INDEX_ROUNDS_MAX`.
    fn serve_waiting_reads(&mut self, io: &mut impl NodeIo) {
        let mut at = 0;
        while at < self.reads_waiting.len() {
            let group = group_namespace(self.reads_waiting[at].request.group).expect("a read names its group");
            if self.reads_waiting[at].round.is_none() {
                let round = self.shard.read_round(&mut ReplyTap { io: &mut *io, replies: Vec::new() }, group);
                self.reads_waiting[at].round = round;
            }
            let waiting = &mut self.reads_waiting[at];
            let replica = self.shard.partition(group);
            if let (None, Some(round), Some(replica)) = (waiting.index, waiting.round, replica) {
                waiting.index = replica.read_index(round);
            }
            let ready = match (waiting.index, replica) {
                (Some(index), Some(replica)) if replica.commit_min() >= index => {
                    let PartitionRequest::Poll { partition, consumer, strategy, count, .. } = waiting.poll else {
                        unreachable!("only polls are read locally");
                    };
                    let plan = replica.state_machine().plan_read(partition, consumer, strategy, count);
                    let held_end = self.shard.segment_log(group).map_or(0, |segments| segments.readable_to());
                    plan.count == 0 || held_end >= plan.start + plan.count as u64
                }
                _ => false,
            };
            if ready {
                let read = self.reads_waiting.remove(at).expect("listed");
                self.counters.reads_indexed += 1;
                self.answer_poll(io, read.connection, read.request, read.poll);
                continue;
            }
            if waiting.since_tick + READ_INDEX_WAIT_TICKS <= self.tick {
                if waiting.rounds == READ_INDEX_ROUNDS_MAX {
                    let read = self.reads_waiting.remove(at).expect("listed");
                    self.refuse_read(io, read.connection, &read.request);
                    continue;
                }
                waiting.rounds += 1;
                waiting.since_tick = self.tick;
                waiting.index = None;
                waiting.round = self.shard.read_round(&mut ReplyTap { io: &mut *io, replies: Vec::new() }, group);
            }
            at += 1;
        }
    }

    /// A poll without auto-commit this shard cannot answer truthfully now: refused as retriable.
    fn refuse_read(&mut self, io: &mut impl NodeIo, connection: ConnectionId, request: &Header) {
        self.counters.reads_refused += 1;
        let frame = node_reply(
            request,
            self.config.shard.metadata.cluster,
            self.node_index(),
            STATUS_TRANSIENT_NOT_ACCEPTED,
            Vec::new(),
        );
        self.send_read_answer(io, request.origin, connection, frame.into());
    }

    /// A poll without auto-commit answered now: the machine chooses the range, the group's
    /// segment log gives its batches (all of them, or the poll is refused as retriable).
    fn answer_poll(&mut self, io: &mut impl NodeIo, connection: ConnectionId, request: Header, poll: PartitionRequest) {
        let PartitionRequest::Poll { partition, consumer, strategy, count, .. } = poll else {
            unreachable!("only polls are read locally");
        };
        let group = group_namespace(request.group).expect("a read names its group");
        let open = self.shard.partition(group).is_some_and(|replica| replica.status() != Status::Opening);
        let (mut past_commit, mut bug_plan) = (None, None);
        if open && self.bug() == Some(Bug::PollPastCommit) {
            if let Some((committed, tail)) = self.read_past_commit(&request, &poll) {
                if committed.count == 0 {
                    let reply = PollReply { count: tail.0, batches: tail.1.into(), ..committed };
                    let frame = self.poll_answer(&request, &reply);
                    self.send_read_answer(io, request.origin, connection, frame);
                    return;
                }
                past_commit = Some(tail);
                bug_plan = Some(committed);
            }
        }
        let mut plan = match self.shard.partition(group).filter(|replica| replica.status() != Status::Opening) {
            Some(_) if bug_plan.is_some() => bug_plan.take().expect("checked"),
            Some(replica) => replica.state_machine().plan_read(partition, consumer, strategy, count),
            None => PollReply { partition, current_offset: u64::MAX, start: 0, count: 0, batches: Bytes::new() },
        };
        if open && self.bug() == Some(Bug::ReadUncheckedTail) {
            // The planted bug: the range goes on as far as the segment log does.
            let log_end = self.shard.segment_log(group).and_then(|segments| segments.log()).map(|log| log.end_offset());
            let room = log_end.unwrap_or(0).saturating_sub(plan.start).min(count as u64) as u32;
            plan.count = plan.count.max(room);
        }
        // A poll gets its whole range or is refused as retriable (a prefix would miss sends
        // acknowledged before it): the log here may not hold all of it yet (the read index waits
        // for that, the planted bugs do not).
        let held_end = self.shard.segment_log(group).map_or(0, |segments| segments.readable_to());
        // A single node whose disk failed holds what it holds for good: the part of the range its
        // log has is all there will be (every acknowledged send is in it: acknowledged only once
        // written, or synced where the topic enforces it), and waiting would never end.
        if self.disk.storage_failed() && plan.count > 0 && held_end < plan.start + plan.count as u64 {
            plan.count = held_end.saturating_sub(plan.start).min(plan.count as u64) as u32;
        }
        if plan.count > 0 && held_end < plan.start + plan.count as u64 {
            self.counters.polls_cut += 1;
            self.refuse_read(io, connection, &request);
            return;
        }
        // One connection's polls park at most `PARKED_READS_PER_CONNECTION_MAX` reads: a client
        // that pipelines polls without end gets refusals, and the others still get reads.
        let parked_here = self
            .parked_reads
            .values()
            .filter(|parked| {
                matches!(&parked.answer, PendingAnswer::Local { connection: at, request: asked, .. }
                    if *at == connection && asked.origin == request.origin)
            })
            .count();
        if plan.count > 0 {
            let issued = if parked_here < PARKED_READS_PER_CONNECTION_MAX {
                self.issue_log_read(io, group, &plan)
            } else {
                None
            };
            if let Some(id) = issued {
                let answer = PendingAnswer::Local { connection, request, past_commit };
                let covered_to = plan.start;
                self.parked_reads.insert(id, ParkedRead { plan, covered_to, since_tick: self.tick, answer });
                return;
            }
            self.counters.polls_cut += 1;
            self.refuse_read(io, connection, &request);
            return;
        }
        let frame = self.poll_answer(&request, &plan);
        self.send_read_answer(io, request.origin, connection, frame);
    }

    /// Starts reading a poll's range from its group's segment log, if the log holds all of it.
    fn issue_log_read(&mut self, io: &mut impl NodeIo, group: Namespace, plan: &PollReply) -> Option<u64> {
        if self.parked_reads.len() == PARKED_READS_MAX {
            return None;
        }
        let end = plan.start + plan.count as u64;
        let segments = self.shard.segment_log(group)?;
        let log = segments.readable_log()?;
        if log.first_offset() > plan.start || segments.readable_to() < end {
            return None;
        }
        let id = self.read_next;
        self.read_next += 1;
        let read =
            ReadRequest { id, start: ReadStart::Offset(plan.start), count: plan.count, bytes_max: POLL_BYTES_MAX };
        self.shard.read_segment_log(&mut ReplyTap { io, replies: Vec::new() }, group, read).ok()?;
        Some(id)
    }

    /// A parked poll's read is done (or given up): its batches are added to what was read so far
    /// as far as they go on without a gap (a read steps over a damaged run; on a single node a
    /// gap the log holds damaged is lost for good, and passed), and the next read goes on from
    /// there (a read ends at its segment's end). Once the range is covered, or the log gives no
    /// more, the answer: a local poll gets the prefix read; a replicated reply goes only whole
    /// (it stored the consumer's offset past all of it).
    fn finish_log_read(&mut self, io: &mut impl NodeIo, id: u64, result: Result<ReadBatches, ReadError>) {
        let Some(mut parked) = self.parked_reads.remove(&id) else { return };
        let start = parked.plan.start;
        let end = start + parked.plan.count as u64;
        let before = parked.covered_to;
        if let Ok(read) = result {
            let group = group_namespace(parked.answer.group_field()).expect("a parked read names its group");
            let segments = self.shard.segment_log(group);
            let lost = |from: u64, to: u64| segments.is_some_and(|segments| segments.lost_between(from, to));
            let mut rest = &read.bytes[..];
            let mut taken = 0;
            while let Ok(header) = BatchHeader::decode(rest) {
                let Some(len) = usize::try_from(header.batch_length).ok().filter(|len| *len <= rest.len()) else {
                    break;
                };
                let continues = if parked.covered_to == start {
                    header.base_offset <= start && header.end_offset() > start || lost(start, header.base_offset)
                } else {
                    header.base_offset == parked.covered_to || lost(parked.covered_to, header.base_offset)
                };
                if !continues || parked.covered_to >= end {
                    break;
                }
                parked.covered_to = header.end_offset();
                taken += len;
                rest = &rest[len..];
            }
            // The batches taken are the read's first `taken` bytes: a first read's buffer becomes
            // the reply's batches as it is, a later one's is joined to them.
            if parked.plan.batches.is_empty() {
                parked.plan.batches = read.bytes.slice(..taken);
            } else {
                parked.plan.batches = joined(&parked.plan.batches, &read.bytes[..taken]);
            }
        }
        if parked.covered_to < end
            && parked.covered_to > before
            && !parked.answer.given_up(self.tick, parked.since_tick)
        {
            let group = group_namespace(parked.answer.group_field()).expect("a parked read names its group");
            let next = ReadRequest {
                id,
                start: ReadStart::Offset(parked.covered_to),
                count: (end - parked.covered_to) as u32,
                bytes_max: POLL_BYTES_MAX.saturating_sub(parked.plan.batches.len() as u64).max(1),
            };
            if self.shard.read_segment_log(&mut ReplyTap { io, replies: Vec::new() }, group, next).is_ok() {
                self.parked_reads.insert(id, parked);
                return;
            }
        }
        let mut reply = parked.plan;
        reply.count = (parked.covered_to.min(end) - start) as u32;
        let whole = reply.count as u64 == end - start;
        if whole {
            self.counters.polls_from_log += 1;
        }
        match parked.answer {
            PendingAnswer::Local { connection, request, .. } if !whole => {
                // A read failed or took too long: refused as retriable, not answered with a prefix.
                self.counters.polls_cut += 1;
                self.refuse_read(io, connection, &request);
            }
            PendingAnswer::Local { connection, request, past_commit } => {
                let mut reply = reply;
                if let Some((count, batches)) = past_commit {
                    reply.count += count;
                    reply.batches = joined(&reply.batches, &batches);
                }
                let frame = self.poll_answer(&request, &reply);
                self.send_read_answer(io, request.origin, connection, frame);
            }
            PendingAnswer::Replicated { header } if whole => {
                self.route_client_reply(io, Message::new(header, encode_poll_reply(&reply)).encode());
            }
            PendingAnswer::Replicated { .. } => self.counters.poll_replies_dropped += 1,
        }
    }

    /// The frame that answers a local poll with `reply`.
    fn poll_answer(&mut self, request: &Header, reply: &PollReply) -> OutFrame {
        let group = group_namespace(request.group).expect("a read names its group");
        self.event(NodeEvent::ReadLocally { group, count: reply.count });
        poll_reply_frame(request, self.config.shard.metadata.cluster, self.node_index(), reply)
    }

    /// The planted bug `PollPastCommit`: a poll whose range reaches past the committed log (on
    /// a copy of the machine that applied the prepares held past the commit point) gets those
    /// uncommitted messages too. The committed part of the range (to read from the log as usual),
    /// and the uncommitted count and batches; `None` when the range stays committed.
    fn read_past_commit(&self, request: &Header, poll: &PartitionRequest) -> Option<(PollReply, (u32, Vec<u8>))> {
        let PartitionRequest::Poll { partition, consumer, strategy, count, .. } = *poll else {
            unreachable!("only polls are read locally")
        };
        let group = group_namespace(request.group).expect("a read names its group");
        let replica = self.shard.partition(group)?;
        let committed = replica.state_machine().next_offset();
        let mut ahead = replica.state_machine().clone();
        for (prepare, body) in replica.prepares_past_commit() {
            for request in batched_requests(body) {
                let user_id = request.header.user_id;
                ahead.apply(prepare.op, prepare.timestamp, &request.header, user_id, &body.slice_ref(request.body));
            }
        }
        let plan = ahead.plan_read(partition, consumer, strategy, count);
        let end = plan.start + plan.count as u64;
        if end <= committed {
            return None;
        }
        let from = plan.start.max(committed);
        let mut tail = Vec::new();
        while let Some((base, batch)) = ahead.take_applied() {
            let batch_end = BatchHeader::decode(&batch).map_or(base, |header| header.end_offset());
            if batch_end > from && base < end {
                tail.extend_from_slice(&batch);
            }
        }
        let committed_part = PollReply {
            count: (from - plan.start) as u32,
            current_offset: ahead.next_offset().checked_sub(1).unwrap_or(u64::MAX),
            ..plan
        };
        let committed_part =
            if committed_part.count == 0 { PollReply { start: from, ..committed_part } } else { committed_part };
        Some((committed_part, ((end - from) as u32, tail)))
    }

    fn send_read_answer(
        &mut self,
        io: &mut impl NodeIo,
        origin: Option<Origin>,
        connection: ConnectionId,
        frame: OutFrame,
    ) {
        let origin = origin.expect("reads carry their origin");
        if origin.shard == self.shard_index() {
            if self.connections.contains_key(&connection) {
                let header = Header::decode(&frame.head).expect("a frame of our own");
                io.send_frame_to_connection(connection, frame);
                self.event(NodeEvent::Answered {
                    connection,
                    request: header.request,
                    operation: header.operation,
                    status: header.status,
                });
            }
        } else if io.send_to_shard(origin.shard, ShardMessage::ToConnection { connection, frame }).is_err() {
            // The client's timeout covers it (a read changes nothing: it may be asked again).
            self.counters.channel_full += 1;
        }
    }

    /// This shard's connections as get_clients shows them.
    fn client_summaries(&self, metadata: &crate::metadata::Metadata) -> Vec<wire::ClientSummary> {
        self.connections
            .values()
            .map(|conn| {
                let (user_id, groups_count) = match conn.logged_in() {
                    Some((client, user_id, _)) => (user_id, metadata.groups_of_client(client).len() as u32),
                    None => (u32::MAX, 0),
                };
                wire::ClientSummary {
                    client_id: conn.id as u32,
                    user_id,
                    transport: 1,
                    address: String::new(),
                    groups_count,
                }
            })
            .collect()
    }

    fn bump_cursor(&mut self, connection: ConnectionId) -> u64 {
        let conn = self.connections.get_mut(&connection).expect("checked by the caller");
        conn.cursor += 1;
        conn.cursor
    }

    /// A metadata command: it travels in the client's own session, as the client numbered it;
    /// the metadata state machine checks the user's permissions when it applies it.
    fn on_metadata_request(
        &mut self,
        io: &mut impl NodeIo,
        connection: ConnectionId,
        header: Header,
        body: Vec<u8>,
    ) -> Result<(), u32> {
        let (client, user_id, session) = self.logged_in(connection)?;
        if header.session != session || header.request == 0 || header.client != client {
            return Err(STATUS_INVALID_COMMAND);
        }
        self.check_size(&header)?;
        let conn = self.connections.get_mut(&connection).expect("checked by the caller");
        if conn.in_flight_full() {
            return Err(STATUS_TRANSIENT_NOT_ACCEPTED);
        }
        // Segments are a partition group's: delete_segments goes to that group, not the
        // metadata's (which knows no segments).
        if header.operation == OPERATION_DELETE_SEGMENTS {
            let Ok(ClientRequest::DeleteSegments { stream, topic, partition_id, segments_count }) =
                ClientRequest::decode(wire::command::DELETE_SEGMENTS, &body)
            else {
                return Err(STATUS_INVALID_COMMAND);
            };
            let metadata = self.metadata()?;
            let admitted = admit_delete_segments(&metadata, user_id, &stream, &topic, partition_id, segments_count)?;
            return self.submit(io, connection, &header, admitted);
        }
        let (kind, body) = self.metadata_body(io, user_id, &header, body)?;
        let conn = self.connections.get_mut(&connection).expect("checked by the caller");
        conn.last_request = conn.last_request.max(header.request);
        let overtake = self.config.shard.partition.bug == Some(Bug::PipelinedRequestsOvertake);
        let queued = conn.occupied(Namespace::METADATA) && !overtake;
        let mut request = header;
        request.user_id = user_id;
        request.group = group_of(Namespace::METADATA);
        request.origin = Some(conn.origin);
        let in_flight = InFlight {
            client_request: header.request,
            client_checksum: header.parent,
            operation: header.operation,
            group: Namespace::METADATA,
            kind,
            stage: if queued { Stage::Queued } else { Stage::Sent { request: header.request } },
            header: request,
            body: RequestBody::Encoded(body),
            sent_tick: self.tick,
        };
        let key = conn.track(in_flight);
        self.event(NodeEvent::Admitted {
            connection,
            request: header.request,
            operation: header.operation,
            group: Namespace::METADATA,
            shard: 0,
        });
        self.send_in_flight(io, connection, key);
        Ok(())
    }

    /// What a metadata command's body becomes before it is replicated, and how its reply goes
    /// back: a password is checked or hashed here and a token drawn here, so no secret reaches
    /// the log (`metadata_plane::internal_body`).
    fn metadata_body(
        &mut self,
        io: &mut impl NodeIo,
        user_id: u32,
        header: &Header,
        body: Vec<u8>,
    ) -> Result<(ReplyKind, Vec<u8>), u32> {
        let decode = |code: u32| ClientRequest::decode(code, &body).map_err(|_| STATUS_INVALID_COMMAND);
        let mut salt = || {
            let mut salt = [0u8; SALT_SIZE_BYTES];
            salt[..8].copy_from_slice(&io.random().to_le_bytes());
            salt[8..].copy_from_slice(&io.random().to_le_bytes());
            salt
        };
        let password = |bytes: &wire::ShortBytes| -> Result<String, u32> {
            String::from_utf8(bytes.as_bytes().to_vec()).map_err(|_| STATUS_INVALID_COMMAND)
        };
        let cost = self.config.password_cost;
        match header.operation {
            OPERATION_CREATE_USER => {
                let ClientRequest::CreateUser { username, password: secret, status, permissions, .. } =
                    decode(wire::command::CREATE_USER)?
                else {
                    return Err(STATUS_INVALID_COMMAND);
                };
                let status = match status {
                    1 => UserStatus::Active,
                    2 => UserStatus::Inactive,
                    _ => return Err(STATUS_INVALID_COMMAND),
                };
                let command = MetadataCommand::CreateUser {
                    username: username.as_str().to_owned(),
                    password_hash: hash_password(&password(&secret)?, salt(), cost),
                    status,
                    permissions: permissions.as_ref().map(wire_view::permissions_from_wire),
                };
                Ok((ReplyKind::Metadata, internal_body(&command)))
            }
            OPERATION_CHANGE_PASSWORD => {
                let ClientRequest::ChangePassword { user, current_password, new_password } =
                    decode(wire::command::CHANGE_PASSWORD)?
                else {
                    return Err(STATUS_INVALID_COMMAND);
                };
                let metadata = self.metadata()?;
                let target = metadata.resolve_user(&identifier(&user)).map_err(|error| error.code())?;
                // The current password must be known, whoever changes it (the reference's rule).
                if !verify_password(&target.password_hash, &password(&current_password)?) {
                    return Err(STATUS_INVALID_CREDENTIALS);
                }
                let command = MetadataCommand::ChangePassword {
                    user: identifier(&user),
                    password_hash: hash_password(&password(&new_password)?, salt(), cost),
                };
                Ok((ReplyKind::Metadata, internal_body(&command)))
            }
            OPERATION_CREATE_PERSONAL_ACCESS_TOKEN => {
                let ClientRequest::CreatePersonalAccessToken { name, expiry } =
                    decode(wire::command::CREATE_PERSONAL_ACCESS_TOKEN)?
                else {
                    return Err(STATUS_INVALID_COMMAND);
                };
                // 50 characters of seeded randomness, shown once and stored only as a hash.
                let token: String = (0..50)
                    .map(|_| {
                        const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
                        ALPHABET[(io.random() % ALPHABET.len() as u64) as usize] as char
                    })
                    .collect();
                let command = MetadataCommand::CreatePersonalAccessToken {
                    name: name.as_str().to_owned(),
                    token_hash: token_hash(&token),
                    // Microseconds on the wire (0 and u64::MAX: never), nanoseconds in the metadata.
                    expiry: (expiry != 0 && expiry != u64::MAX).then(|| expiry.saturating_mul(1_000)),
                };
                Ok((ReplyKind::CreatedToken { token }, internal_body(&command)))
            }
            OPERATION_PURGE_STREAM | OPERATION_PURGE_TOPIC => {
                Ok((ReplyKind::Purge { waiting: PurgeQueue::default(), outstanding: 0, reply: Vec::new() }, body))
            }
            _ => {
                let _ = user_id;
                Ok((ReplyKind::Metadata, body))
            }
        }
    }

    /// Frames over a group's prepare limit would be dropped by its replica: refused here.
    fn check_size(&self, header: &Header) -> Result<(), u32> {
        let limit = self.config.shard.partition.prepare_size_max.min(self.config.shard.metadata.prepare_size_max);
        if header.size as u64 > limit - HEADER_SIZE as u64 || header.size > FRAME_SIZE_MAX {
            // Larger than a request may be.
            return Err(STATUS_INVALID_FORMAT);
        }
        Ok(())
    }

    fn on_partition_request(
        &mut self,
        io: &mut impl NodeIo,
        connection: ConnectionId,
        header: Header,
        frame: Vec<u8>,
    ) -> Result<(), u32> {
        let body = &frame[HEADER_SIZE..];
        let (client, user_id, _) = self.logged_in(connection)?;
        self.check_size(&header)?;
        let metadata = self.metadata()?;
        let cursor = self.bump_cursor(connection);
        let admitted = match header.operation {
            OPERATION_SEND_MESSAGES => {
                let Ok(send) = SendMessagesHead::decode(body) else {
                    return Err(STATUS_INVALID_COMMAND);
                };
                let admitted = admit_send(&metadata, user_id, &send, cursor, self.bug())?;
                let request = GroupRequest {
                    group: admitted.group,
                    operation: OPERATION_SEND_MESSAGES,
                    body: RequestBody::Send {
                        head: encode_send_head(admitted.partition, &admitted.retention),
                        client_frame: frame,
                        batch_at: HEADER_SIZE + send.batch_at,
                    },
                    kind: admitted.kind,
                };
                return self.submit(io, connection, &header, request);
            }
            OPERATION_STORE_CONSUMER_OFFSET => {
                let Ok(ClientRequest::StoreConsumerOffset { key, offset, .. }) =
                    ClientRequest::decode(wire::command::STORE_CONSUMER_OFFSET, body)
                else {
                    return Err(STATUS_INVALID_COMMAND);
                };
                admit_offset(&metadata, user_id, client, &key, OffsetAction::Store(offset), cursor, self.bug())?
            }
            _ => {
                let Ok(ClientRequest::DeleteConsumerOffset { key, .. }) =
                    ClientRequest::decode(wire::command::DELETE_CONSUMER_OFFSET, body)
                else {
                    return Err(STATUS_INVALID_COMMAND);
                };
                admit_offset(&metadata, user_id, client, &key, OffsetAction::Delete, cursor, self.bug())?
            }
        };
        self.submit(io, connection, &header, admitted)
    }

    /// Sends an admitted partition request in the connection's session of its group, opening
    /// that session first if there is none.
    fn submit(
        &mut self,
        io: &mut impl NodeIo,
        connection: ConnectionId,
        header: &Header,
        admitted: impl Into<GroupRequest>,
    ) -> Result<(), u32> {
        let client = ClientRef { request: header.request, checksum: header.parent, operation: header.operation };
        self.submit_as(io, connection, client, admitted.into(), false)
    }

    /// `child`: a part of a request already admitted (a purge's partition), which may go over
    /// the connection's bound by the purge's window.
    fn submit_as(
        &mut self,
        io: &mut impl NodeIo,
        connection: ConnectionId,
        client: ClientRef,
        admitted: GroupRequest,
        child: bool,
    ) -> Result<(), u32> {
        let ClientRef { request: client_request, checksum: client_checksum, operation: client_operation } = client;
        let (client, user_id, _) = self.logged_in(connection)?;
        let tick = self.tick;
        let incarnation = self.incarnation_of(admitted.group);
        let conn = self.connections.get_mut(&connection).expect("checked by the caller");
        if conn.in_flight_full() && !child {
            return Err(STATUS_TRANSIENT_NOT_ACCEPTED);
        }
        let group = admitted.group;
        let body = admitted.body;
        let mut request = Header::new(Command::Request, self.config.shard.metadata.cluster, 0);
        request.client = client;
        request.operation = admitted.operation;
        request.user_id = user_id;
        request.group = group_of(group);
        request.origin = Some(conn.origin);
        request.size = (HEADER_SIZE + body.len()) as u32;
        // A session in an earlier incarnation of the group is no session in this one.
        if conn.group_sessions.get(&group).is_some_and(|session| session.incarnation != incarnation) {
            conn.group_sessions.remove(&group);
        }
        let opening = !conn.group_sessions.contains_key(&group);
        let already_opening = conn.opening(group);
        let overtake = self.config.shard.partition.bug == Some(Bug::PipelinedRequestsOvertake);
        let queued = !opening && conn.occupied(group) && !overtake;
        let stage = if opening {
            Stage::OpeningSession
        } else if queued {
            Stage::Queued
        } else {
            let (session, number) = conn.next_request(group, tick);
            request.session = session;
            request.request = number;
            Stage::Sent { request: number }
        };
        let in_flight = InFlight {
            client_request,
            client_checksum,
            operation: client_operation,
            group,
            kind: admitted.kind,
            stage,
            header: request,
            body,
            sent_tick: tick,
        };
        let key = conn.track(in_flight);
        let shard = shard_of(group, self.config.shard.shards);
        self.event(NodeEvent::Admitted {
            connection,
            request: client_request,
            operation: client_operation,
            group,
            shard,
        });
        if opening {
            if !already_opening {
                self.event(NodeEvent::SessionOpening { connection, group });
                self.send_in_flight(io, connection, key);
            }
        } else if !queued {
            self.send_in_flight(io, connection, key);
        }
        Ok(())
    }

    /// Sends (or sends again) a request in flight towards its group: the register of its
    /// session while that is opening, else the request itself.
    fn send_in_flight(&mut self, io: &mut impl NodeIo, connection: ConnectionId, key: u64) {
        let tick = self.tick;
        let cluster = self.config.shard.metadata.cluster;
        let conn = self.connections.get_mut(&connection).expect("checked by the caller");
        let in_flight = conn.in_flight.get_mut(&key).expect("tracked");
        in_flight.sent_tick = tick;
        let frame = match in_flight.stage {
            Stage::OpeningSession => {
                let mut register = Header::new(Command::Request, cluster, 0);
                register.client = in_flight.header.client;
                register.operation = OPERATION_REGISTER;
                register.user_id = in_flight.header.user_id;
                register.group = in_flight.header.group;
                register.origin = in_flight.header.origin;
                Message::new(register, Vec::new()).encode()
            }
            Stage::Sent { .. } | Stage::Register => {
                // For a group in this process: its replica seals it whole if it passes it on to
                // another node (`Header::seal_for_network`).
                let mut header = in_flight.header;
                header.seal_header_only(in_flight.body.len());
                in_flight.body.frame(&header)
            }
            // Its group answered; what it waits for are other requests in flight.
            Stage::Fanning => return,
            // Its turn comes once the request before it in its group is answered.
            Stage::Queued => return,
        };
        let header = Header::decode(&frame).expect("a frame of our own");
        self.route_to_group(io, &header, frame);
    }

    /// Sends again what waited `RESEND_TICKS` for its reply. A request whose partition the
    /// committed metadata no longer holds is answered `PartitionNotFound` instead: no group will
    /// ever answer it.
    fn resend_in_flight(&mut self, io: &mut impl NodeIo) {
        let tick = self.tick;
        let partitions = self.view.as_ref().map(|view| view.partitions.clone());
        let mut due = Vec::new();
        let mut gone = Vec::new();
        for (connection, conn) in &self.connections {
            let mut opening = std::collections::BTreeSet::new();
            for (key, in_flight) in &conn.in_flight {
                if in_flight.sent_tick + RESEND_TICKS > tick || in_flight.stage == Stage::Fanning {
                    continue;
                }
                if !in_flight.group.is_metadata()
                    && partitions.as_ref().is_some_and(|partitions| !partitions.contains_key(&in_flight.group))
                {
                    gone.push((*connection, *key));
                    continue;
                }
                if in_flight.stage == Stage::Queued {
                    continue;
                }
                // One register per group is enough.
                if in_flight.stage == Stage::OpeningSession && !opening.insert(in_flight.group) {
                    continue;
                }
                due.push((*connection, *key));
            }
        }
        for (connection, key) in gone {
            let conn = self.connections.get_mut(&connection).expect("listed");
            let Some(in_flight) = conn.in_flight.remove(&key) else {
                // A purge answered (and took) it as the one before it went.
                continue;
            };
            match in_flight.kind {
                ReplyKind::PurgePartition { parent } => self.on_purge_partition_done(io, connection, parent),
                _ => self.answer_in_flight(io, connection, &in_flight, None, STATUS_PARTITION_NOT_FOUND, Vec::new()),
            }
            self.send_queued(io, connection);
        }
        for (connection, key) in due {
            self.counters.resends += 1;
            self.send_in_flight(io, connection, key);
        }
    }

    // Replies.

    /// A reply or eviction a replica made for a client: to the node and shard of its origin.
    fn route_client_reply(&mut self, io: &mut impl NodeIo, frame: Vec<u8>) {
        let Ok(header) = Header::decode(&frame) else {
            self.counters.frames_malformed += 1;
            return;
        };
        let Some(origin) = header.origin else {
            self.counters.replies_unrouted += 1;
            return;
        };
        if origin.node != self.node_index() {
            if origin.node >= self.config.shard.metadata.replica_count {
                self.counters.replies_unrouted += 1;
                return;
            }
            io.send(Peer::Replica(origin.node), frame);
        } else if origin.shard != self.shard_index() {
            if origin.shard >= self.config.shard.shards {
                self.counters.replies_unrouted += 1;
            } else if io.send_to_shard(origin.shard, ShardMessage::ClientReply(frame)).is_err() {
                self.counters.channel_full += 1;
            }
        } else {
            self.on_client_reply(io, &frame);
        }
    }

    /// A group's reply for a client of this shard: the request in flight it answers gets its
    /// reply (or, for a session being opened, the requests waiting for it go out), and the
    /// request queued next behind it in its group goes.
    fn on_client_reply(&mut self, io: &mut impl NodeIo, frame: &[u8]) {
        if let Ok(header) = Header::decode(frame) {
            let creates = matches!(header.operation, OPERATION_CREATE_TOPIC | OPERATION_CREATE_PARTITIONS);
            if creates
                && header.command == Command::Reply
                && !self.hosts_partitions_of(header.op)
                && self.creates_held.len() < CREATE_REPLIES_HELD_MAX
            {
                // A resend of the request while its reply is held gets the cached reply again.
                let again = self.creates_held.iter().any(|(_, _, held)| {
                    Header::decode(held)
                        .is_ok_and(|held| (held.client, held.request) == (header.client, header.request))
                });
                if !again {
                    self.creates_held.push_back((header.op, self.tick, frame.to_vec()));
                }
                return;
            }
        }
        self.answer_client_reply(io, frame);
    }

    /// Whether this node hosts every partition of the metadata committed at `op` (this shard
    /// reads it, and its node's shards reported their groups): a create is answered only then,
    /// so that the client's next request finds the group open here.
    fn hosts_partitions_of(&self, op: u64) -> bool {
        self.view.as_ref().is_some_and(|view| {
            view.op >= op && view.partitions.keys().all(|partition| self.figures.hosted(*partition))
        })
    }

    /// Answers the held replies to creates whose partitions this node now hosts, or that waited
    /// `CREATE_REPLY_HELD_TICKS_MAX`.
    fn answer_held_creates(&mut self, io: &mut impl NodeIo) {
        let mut at = 0;
        while at < self.creates_held.len() {
            let (op, since_tick, _) = self.creates_held[at];
            if self.hosts_partitions_of(op) || since_tick + CREATE_REPLY_HELD_TICKS_MAX <= self.tick {
                let (_, _, frame) = self.creates_held.remove(at).expect("listed");
                self.answer_client_reply(io, &frame);
            } else {
                at += 1;
            }
        }
    }

    fn answer_client_reply(&mut self, io: &mut impl NodeIo, frame: &[u8]) {
        let connection = Header::decode(frame).ok().and_then(|header| self.clients.get(&header.client).copied());
        self.on_group_reply(io, frame);
        if let Some(connection) = connection {
            self.send_queued(io, connection);
        }
    }

    /// Sends each group's next queued request of `connection`, now that nothing is ahead of it.
    fn send_queued(&mut self, io: &mut impl NodeIo, connection: ConnectionId) {
        let tick = self.tick;
        let Some(conn) = self.connections.get(&connection) else { return };
        let overtake = self.config.shard.partition.bug == Some(Bug::PipelinedRequestsOvertake);
        for key in conn.due_from_queue(overtake) {
            let group = self.connections[&connection].in_flight[&key].group;
            let incarnation = self.incarnation_of(group);
            let conn = self.connections.get_mut(&connection).expect("still here");
            if conn.group_sessions.get(&group).is_some_and(|session| session.incarnation != incarnation) {
                conn.group_sessions.remove(&group);
            }
            let open = group.is_metadata() || conn.group_sessions.contains_key(&group);
            let number = (open && !group.is_metadata()).then(|| conn.next_request(group, tick));
            let in_flight = conn.in_flight.get_mut(&key).expect("listed");
            in_flight.sent_tick = tick;
            in_flight.stage = match number {
                _ if group.is_metadata() => Stage::Sent { request: in_flight.header.request },
                Some((session, number)) => {
                    in_flight.header.session = session;
                    in_flight.header.request = number;
                    Stage::Sent { request: number }
                }
                // The session went meanwhile (evicted, or dropped as least recently used).
                None => Stage::OpeningSession,
            };
            if !open {
                self.event(NodeEvent::SessionOpening { connection, group });
            }
            self.send_in_flight(io, connection, key);
        }
    }

    fn on_group_reply(&mut self, io: &mut impl NodeIo, frame: &[u8]) {
        let Ok(message) = Message::decode(frame, true) else {
            self.counters.frames_malformed += 1;
            return;
        };
        let header = message.header;
        if header.operation == OPERATION_END_SESSION || header.command == Command::Eviction {
            // Answered (or the session is gone anyway): the end of session is done.
            if self.ending.remove(&header.client).is_some() {
                return;
            }
        }
        let Some(&connection) = self.clients.get(&header.client) else {
            self.counters.replies_unrouted += 1;
            return;
        };
        let group = group_namespace(header.group).unwrap_or(Namespace::METADATA);
        if header.command == Command::Eviction {
            self.on_eviction(io, connection, group, &header);
            return;
        }
        let register = header.operation == OPERATION_REGISTER;
        let conn = self.connections.get_mut(&connection).expect("clients map onto connections");
        let Some(key) = conn.answered_by(group, if register { None } else { Some(header.request) }) else {
            self.counters.replies_unmatched += 1;
            return;
        };
        if header.status != 0 {
            // Refused as it applied (a login whose credential went meanwhile), or for want of
            // space (a write met a full disk): no session.
            let in_flight = conn.in_flight.remove(&key).expect("found");
            let status = if header.status == STATUS_NO_SPACE {
                self.counters.writes_refused_disk += 1;
                disk_reserve::no_space_status(in_flight.operation)
            } else {
                header.status
            };
            let refused = conn.waiting_for_session(group);
            if matches!(in_flight.kind, ReplyKind::Login { .. }) {
                conn.login = Login::Anonymous;
                self.clients.remove(&header.client);
            }
            self.answer_in_flight(io, connection, &in_flight, Some(&header), status, Vec::new());
            for key in refused {
                let conn = self.connections.get_mut(&connection).expect("still here");
                let waiting = conn.in_flight.remove(&key).expect("listed");
                let status = if header.status == STATUS_NO_SPACE {
                    disk_reserve::no_space_status(waiting.operation)
                } else {
                    status
                };
                self.answer_in_flight(io, connection, &waiting, Some(&header), status, Vec::new());
            }
            return;
        }
        if conn.in_flight[&key].stage == Stage::OpeningSession {
            let tick = self.tick;
            let incarnation = self.incarnation_of(group);
            let conn = self.connections.get_mut(&connection).expect("clients map onto connections");
            conn.open_session(group, incarnation, header.session, header.request, tick);
            self.event(NodeEvent::SessionOpened { connection, group, session: header.session });
            // The requests that waited for the session go in the order they came, one at a time.
            let conn = self.connections.get_mut(&connection).expect("still here");
            for key in conn.waiting_for_session(group) {
                conn.in_flight.get_mut(&key).expect("listed").stage = Stage::Queued;
            }
            return;
        }
        match conn.in_flight[&key].kind {
            ReplyKind::Purge { .. } => {
                self.on_purge_committed(io, connection, key, &header, &message.body);
                return;
            }
            ReplyKind::PurgePartition { parent } => {
                conn.in_flight.remove(&key);
                self.on_purge_partition_done(io, connection, parent);
                return;
            }
            _ => {}
        }
        let in_flight = conn.in_flight.remove(&key).expect("found");
        if let ReplyKind::Login { user_id } = in_flight.kind {
            conn.login = Login::LoggedIn { client: header.client, user_id, session: header.session };
        }
        let session = match conn.login {
            Login::LoggedIn { session, .. } => session,
            _ => 0,
        };
        let (status, body) = match client_reply_body(&in_flight.kind, session, &message.body) {
            Ok(body) => (0, body),
            Err(status) => (status, Vec::new()),
        };
        self.answer_in_flight(io, connection, &in_flight, Some(&header), status, body);
        if let RequestBody::Send { client_frame, .. } = in_flight.body {
            io.recycle(client_frame);
        }
    }

    /// Sends the client its reply to `in_flight` (`group_reply`: the group's reply header, whose
    /// op, commit and timestamp it carries, if a group answered).
    fn answer_in_flight(
        &mut self,
        io: &mut impl NodeIo,
        connection: ConnectionId,
        in_flight: &InFlight,
        group_reply: Option<&Header>,
        status: u32,
        body: Vec<u8>,
    ) {
        let conn = &self.connections[&connection];
        let mut reply = Header::new(Command::Reply, self.config.shard.metadata.cluster, self.node_index());
        reply.client = in_flight.header.client;
        reply.parent = in_flight.client_checksum;
        if let Some(group_reply) = group_reply {
            reply.view = group_reply.view;
            reply.op = group_reply.op;
            reply.commit = group_reply.commit;
            reply.timestamp = group_reply.timestamp;
        }
        reply.request = in_flight.client_request;
        reply.operation = in_flight.operation;
        reply.session = conn.logged_in().map_or(0, |(_, _, session)| session);
        reply.status = status;
        // A client checks no body checksum (`node_reply_in_place` says why): the header alone.
        reply.seal_header_only(body.len());
        io.send_to_connection(connection, encode_frame(&reply, &body));
        self.event(NodeEvent::Answered {
            connection,
            request: in_flight.client_request,
            operation: in_flight.operation,
            status,
        });
    }

    /// The metadata group committed a purge: its partitions are emptied next, then the client
    /// hears the metadata group's answer.
    fn on_purge_committed(
        &mut self,
        io: &mut impl NodeIo,
        connection: ConnectionId,
        key: u64,
        header: &Header,
        body: &[u8],
    ) {
        let conn = self.connections.get_mut(&connection).expect("checked by the caller");
        let mut in_flight = conn.in_flight.remove(&key).expect("found");
        let decoded = wire::ResultSection::decode_prefix(body).ok();
        let partitions =
            decoded.as_ref().and_then(|(section, payload)| if section.is_ok() { purged_topics(payload) } else { None });
        let Some(partitions) = partitions else {
            // Refused (its result section says why) or not a purge's reply: answered as it is.
            let section = decoded.map(|(section, _)| section.encode());
            let (status, body) = section.map_or((STATUS_INVALID_COMMAND, Vec::new()), |section| (0, section));
            self.answer_in_flight(io, connection, &in_flight, Some(header), status, body);
            return;
        };
        in_flight.kind = ReplyKind::Purge {
            waiting: PurgeQueue::new(partitions),
            outstanding: 0,
            reply: wire::ResultSection::ok().encode(),
        };
        in_flight.stage = Stage::Fanning;
        let conn = self.connections.get_mut(&connection).expect("checked by the caller");
        conn.in_flight.insert(key, in_flight);
        self.pump_purge(io, connection, key);
    }

    fn on_purge_partition_done(&mut self, io: &mut impl NodeIo, connection: ConnectionId, parent: u64) {
        let conn = self.connections.get_mut(&connection).expect("checked by the caller");
        if let Some(InFlight { kind: ReplyKind::Purge { outstanding, .. }, .. }) = conn.in_flight.get_mut(&parent) {
            *outstanding -= 1;
        }
        self.pump_purge(io, connection, parent);
    }

    /// Empties the next partitions of a purge, `PURGE_WINDOW` at a time; once none is left and
    /// none is out, answers the client.
    fn pump_purge(&mut self, io: &mut impl NodeIo, connection: ConnectionId, key: u64) {
        loop {
            let conn = self.connections.get_mut(&connection).expect("checked by the caller");
            let Some(parent) = conn.in_flight.get_mut(&key) else { return };
            let client = ClientRef {
                request: parent.client_request,
                checksum: parent.client_checksum,
                operation: parent.operation,
            };
            let ReplyKind::Purge { waiting, outstanding, reply } = &mut parent.kind else { return };
            if waiting.is_empty() && *outstanding == 0 {
                let body = std::mem::take(reply);
                let parent = conn.in_flight.remove(&key).expect("found");
                self.answer_in_flight(io, connection, &parent, None, 0, body);
                return;
            }
            if *outstanding >= PURGE_WINDOW || waiting.is_empty() {
                return;
            }
            let group = waiting.pop().expect("not empty");
            *outstanding += 1;
            let (_, _, partition) = group.unpack();
            let admitted = Admitted {
                group,
                request: PartitionRequest::Purge { partition },
                kind: ReplyKind::PurgePartition { parent: key },
            };
            if self.submit_as(io, connection, client, admitted.into(), true).is_err() {
                // The login went: nothing more to do for it.
                return;
            }
        }
    }

    /// A group no longer holds the client's session (evicted, or the id is another user's):
    /// what was in flight there has an unknown fate, which the client learns as an eviction.
    fn on_eviction(&mut self, io: &mut impl NodeIo, connection: ConnectionId, group: Namespace, eviction: &Header) {
        let conn = self.connections.get_mut(&connection).expect("clients map onto connections");
        conn.group_sessions.remove(&group);
        let evicted: Vec<u64> =
            conn.in_flight.iter().filter(|(_, in_flight)| in_flight.group == group).map(|(key, _)| *key).collect();
        if evicted.is_empty() {
            self.counters.replies_unmatched += 1;
            return;
        }
        for key in evicted {
            let conn = self.connections.get_mut(&connection).expect("still here");
            let in_flight = conn.in_flight.remove(&key).expect("listed");
            let mut header = *eviction;
            header.origin = None;
            header.cluster = self.config.shard.metadata.cluster;
            io.send_to_connection(connection, Message::new(header, Vec::new()).encode());
            self.event(NodeEvent::Answered {
                connection,
                request: in_flight.client_request,
                operation: in_flight.operation,
                status: STATUS_UNAUTHENTICATED,
            });
        }
        if group.is_metadata() {
            let conn = self.connections.get_mut(&connection).expect("still here");
            if let Some(client) = conn.client() {
                self.clients.remove(&client);
            }
            let conn = self.connections.get_mut(&connection).expect("still here");
            conn.login = Login::Anonymous;
            conn.group_sessions.clear();
        }
    }
}
