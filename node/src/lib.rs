//! A whole Vireo node as a library: the front door (`Node`: connections, admission, sessions,
//! routing, replies, reads), the metadata and partition state machines, the shards that host
//! their VSR groups, and the routing that tells every node which shard owns what. The simulator
//! and the glommio server drive the same `Node` through the same entry points.
//!
//! The sections below hold the design in depth: the data model and how it is replicated and stored,
//! then `vireo-server` and a cluster of them. The path of a client's request through a node is in
//! [`node`]'s doc, the metadata state machine's invariants in [`metadata`]'s, and the bytes at rest
//! in `vireo-storage`'s.
//!
//! # Data model
//!
//! ## What a cluster holds
//!
//! - **Streams**: ids from 0, unique names; at most 2^20.
//! - **Topics** in a stream: partitions count, compression, message expiry, max size, segment size
//!   and the other options; at most 4096 per stream.
//! - **Partitions** of a topic: ids from 0; at most 10^6 per topic.
//! - **Consumer groups** of a topic, whose members (client sessions) get an even, cooperative
//!   assignment of the topic's partitions: counts differ by at most one, and a change of members or
//!   partitions moves only the surplus. A member whose connection closes leaves.
//! - **Users**: root `iggy` exists from first boot. The node hashes passwords with Argon2id,
//!   permissions are checked on every request, and personal access tokens are stored as hashes.
//!
//! Error codes are the reference's (`IggyError`).
//!
//! ## Who replicates what
//!
//! All of it is replicated:
//! - the metadata lives in one VSR group, on shard 0 of every node;
//! - each partition is its own VSR group, on the shard `(murmur3(namespace) >> 16) % shards` picks,
//!   with its primaries spread over the nodes (`(view + partition hash) % nodes`).
//!
//! A partition's primary stamps each batch as it prepares it (offsets, timestamp, checksums). The
//! prepare's header carries the next offset, so a new primary goes on from its log's head. A
//! prepare thus carries the batch exactly as every replica stores it. The group keeps the batches
//! and the consumer offsets.
//!
//! ## Retention
//!
//! Retention is the topic's, applied by the group at each send, so that every replica drops the
//! same messages at the same op:
//! - the batches fall into segments sealed at the topic's `segment_size`;
//! - the oldest sealed segments go while their newest message is older than `message_expiry` (by
//!   the send's prepare timestamp), or while the partition holds more than its share of
//!   `max_topic_size` (the topic's limit over its partitions);
//! - the newest segment always stays.
//!
//! A send carries its topic's retention, so a replica applies the one its op holds, whatever
//! metadata its node has seen.
//!
//! ## The segment log
//!
//! Each node keeps every partition group's messages once, in its **segment log**
//! (`streams/.../partitions/{id}/{start:020}.log` and `.index`, beside the group's WAL and
//! superblocks). The group's machine keeps only:
//! - the batch directory: each batch's offsets, size, checksum and newest timestamp. At most
//!   `BATCHES_MAX` = 2^20 batches a partition, 24 bytes each in a checkpoint; beyond it the oldest
//!   batches go;
//! - its segments;
//! - its consumer offsets.
//!
//! Its checkpoints therefore hold no message bytes: a state transfer carries the directory, and
//! the messages come from a peer's segment log.
//!
//! **Written as prepares arrive.** A prepare's stamped batches go to their final place in the log
//! as soon as the prepare arrives, before it commits, and a replica acknowledges a prepare only
//! once its log holds them (synced, or written when the topic does not enforce fsync). The log
//! seals where the machine will (once a batch leaves its segment holding `segment_size`), so every
//! replica's files end at the same batches.
//!
//! **Checked as they commit.** As the machine applies batches, the log checks what it holds against
//! the directory (offsets, length, `batch_checksum`, segment starts). A tail that a view change
//! replaced, or that a crash took from the WAL, is cut; a send the client table skips still keeps
//! the offsets it was stamped at.
//!
//! **One superblock.** The log's superblock is the group's (`PartitionLog::open_owned`: the log
//! writes none of its own). The group's checkpoints wait until the log is durable and checked
//! through their cursor (`StateMachine::EXTERNAL_LOG`, `Replica::external_log_durable`), so the WAL
//! never overwrites a prepare whose batch no log holds durably. The group's superblock records the
//! checkpoint's cursor and first offset: the log opens claiming that cursor (damage below it is
//! corruption, not a torn tail) and deletes no segment that checkpoint still needs. Retention
//! removes files one segment at a time, the oldest first, so a crash never leaves a hole.
//!
//! **Fetched from peers.** A log that lacks batches its machine holds (after a state transfer, a
//! crash that cut its unsynced tail, or damage) fetches them from a peer's log (`RequestBatches` /
//! `Batches`): whole batches, up to 1 MiB an answer, each appended only if it is the batch the
//! directory names. A peer that holds none says where its log starts, and a log lacking what its
//! peers' retention already passed skips there.
//!
//! **Repaired in place.** A damaged run that recovery keeps inside the log is written again in
//! place with a peer's batches (`PartitionLog::repair`; the simulator counts `runs_repaired=`).
//! Damage that cannot be repaired so, damage that two reads in a row confirm, or a log that comes
//! back from a crash without its first segment, drops the log on a cluster, which is then fetched
//! again whole. A single node keeps every batch but the damaged one.
//!
//! ## Message bytes written once
//!
//! Message bytes are written once, on a replica of a cluster and on a single node alike: WAL
//! slots leave out the stamped batches the segment log holds (`protocol/src/elided.rs`). A slot keeps the prepare's header,
//! where each batch sat in the body and at which offset, and the rest of the body. A slot's
//! redundant header is written only once the segment log holds its batches (synced when enforced,
//! written when not).
//!
//! At open the replica reads the batches back from the log (`Replica::fills_wanted` / `fill`) and
//! checks the body against the header's `checksum_body`. A batch the log lost leaves a
//! durable-header prepare without its body, repaired from a peer like a damaged slot; a prepare
//! without a durable header was never acknowledged. The log opens claiming the WAL's durable
//! cursors (damage below them is corruption, not a tear), and retention and purges keep every batch
//! that a prepare past the durable checkpoint needs back.
//!
//! With the simulator's `--volume large` (batches of up to 1,000 messages of up to 64 KiB, in 1 MiB
//! segments), a replica's disk writes 1.001 times the batch bytes it stores (seed 5, 3 nodes,
//! 2 shards: 365 segments sealed, 407 MB acknowledged).
//!
//! A single node has no peer to repair from. A batch its log holds damaged (a run recovery kept
//! inside the log, or damage a fill's read ran into) under a durable-header prepare past the
//! checkpoint comes back zeroed, and the machine applies it as lost (`StateMachine::span_lost`):
//! its offsets and bytes stay taken, so the batches after it stay where the log holds them; polls
//! step over it (`SegmentLog::lost_between`); the node counts it (`vireo_batches_lost_total`) and
//! logs an error. Below the frontier a single node's log is its only copy, written from its own
//! prepares, so `follow` and `speculate` trust it there rather than cut what they cannot check.
//! A flipped bit costs the batch it hits, not the log after it (`server_restart`'s
//! `a_flipped_bit_in_a_single_nodes_segment_costs_only_the_batch_it_hits`).
//!
//! ## Polls
//!
//! A poll is answered from the segment log only: the machine chooses the range, and the node reads
//! those batches, reading on across segments. A read that must wait is parked: at most
//! `PARKED_READS_MAX` = 256 a shard, for at most `PARKED_READ_TICKS_MAX` = 50 ticks each.
//!
//! A poll without auto-commit gets its whole range or is refused as retriable (status 58: the log
//! here does not hold it, a read failed, or it took too long; the simulator counts `polls_cut=`),
//! never a prefix that would miss an acknowledged send. A replicated poll's reply goes only whole;
//! otherwise it is not sent, and the client's retry reads again (`poll_replies_dropped=`).
//!
//! **Without auto-commit**, a poll changes nothing. The node answers it from its own replica of the
//! group, without consensus, but only once that replica has executed up to the poll's **read
//! index** (`protocol/src/replica/read_index.rs`). A round of ping and pong to a view-change
//! quorum, started after the poll arrived, names the highest op any of them holds, and every
//! acknowledged send is at or below it, because quorums intersect. So a poll on any node, right
//! after a send was acknowledged through any node, sees it, also with the primary changing under it
//! and right after a restart. Reads stay off the WAL and off prepares; rounds are batched (one in
//! flight per group); and the primary answers a ping with its commit number too, so that a backup
//! does not wait for the next heartbeat. The simulator's Kafka-log checker holds this real-time
//! order (`StaleRead`), and the planted bug `poll-without-read-index` (the behaviour before the
//! read index: the local replica's committed prefix as it stands) is caught by about half the
//! streaming seeds.
//!
//! **With auto-commit**, a poll is applied by the group, so that it stores its offset in the same
//! op that chose its messages. Its reply (and the client table's cached copy) names the range
//! chosen, without message bytes, and the replica that answers re-reads the messages from its log,
//! so a retried poll gets the same messages.
//!
//! ## Incarnations, restarts and failed writes
//!
//! A group's cluster id names its incarnation: a partition deleted and created again under the same
//! ids is a new group.
//! - The deleted group's files are removed once its I/O is done and the metadata that deleted it is
//!   durably committed on the node, so that a restart never reopens the group with its files half
//!   gone. `removals_waiting` and `REMOVALS_MAX` = 4,096 a shard bound the queue.
//! - A replica that finds an earlier incarnation's files wipes them, and one opened from metadata
//!   that lags stands aside.
//! - A re-created topic starts empty.
//!
//! After a restart a node publishes metadata (and opens partition groups) only once its metadata
//! replica has caught up, so a partition deleted before the crash is not reopened from a replayed
//! state.
//!
//! A replica whose write or sync fails stops, and is opened again from what is durable; a failed
//! write or sync of its segment log stops it too (never written again and trusted). On a single
//! node the stopped group's log still serves reads, the node refuses every write and says it is
//! unhealthy until it is restarted; a cluster node exits and its peers repair it once it is back.
//! A single node's restart that finds the tail of a log lost to its device (past what its WAL's
//! prepares left out, which under `enforce_fsync` nothing acknowledged is) applies those batches as
//! lost instead of waiting for a peer it does not have. A full disk is another matter: below the
//! free-space reserve (`disk_reserve`) a node refuses new data at its front door, and in a cluster
//! its partition groups take no new prepares (`Replica::set_disk_low`). A write that meets a full
//! disk anyway does not stop a single node's group: it cuts the uncommitted ops that write was
//! for and refuses their sends and creates once the cut is durable (`vireo_protocol::replica`'s
//! `no_space`), and the segment log that refused tells it where (`SegmentLog::take_refused_no_space`).
//!
//! ## Durability
//!
//! Durability is the topic's (`enforce_fsync`, as in the reference):
//! - enforced, a partition's group acknowledges a WAL batch once it is synced (group commit: the
//!   prepares, one fdatasync, their redundant headers, one more);
//! - not enforced (the default), once its writes have completed. That survives the process being
//!   killed (the bytes are in the kernel) but not a power loss.
//!
//! The metadata group is always enforced. Superblocks and checkpoints are synced in either mode,
//! and update_topic switches a running group's mode. The simulator kills processes (completed
//! writes stay) in runs whose topics are not enforced, and cuts power (unsynced writes may go)
//! where they are.
//!
//! ## Sessions and state transfer
//!
//! The node holds a session per group for each logged-in client and re-sends a request with the
//! same number until it is answered, so a send lands exactly once, also across view changes and
//! restarts. A client that reconnects logs in anew (as the SDK does), and what it had in flight may
//! or may not have landed.
//!
//! A replica that fell behind what its peers' WALs still hold takes a peer's checkpoint by state
//! transfer, in chunks of at most `checkpoint_chunk_bytes` (1 MiB; the simulator draws 16 KiB
//! to 1 MiB per seed):
//! - the chunks are asked for one at a time, from the peer that sent the first;
//! - they are assembled in order, within `snapshot_size_max`;
//! - the checkpoint is installed only once whole and matching its checksum.
//!
//! A peer that goes quiet for four repair rounds is given up, and the transfer starts again from
//! any peer.
//!
//! # vireo-server
//!
//! The `server` module runs the same `Node` on glommio as a TCP server, `vireo-server`. The README
//! says how to configure and operate it; this is how it behaves.
//!
//! - **Shards**: one pinned glommio executor per core of `system.sharding.cpu_allocation` (`all`, a
//!   count, a range `a..b`, `numa:auto`). Shard 0 accepts connections and hands each to a shard in
//!   turn; shards talk over bounded channels (`inbox_capacity`).
//! - **Bounds**, each with its answer: connections per shard (one more is closed); frame size (the
//!   connection is closed); bytes queued to a client that does not read (it is disconnected); bytes
//!   received and not yet handled (readers wait: TCP back-pressure); requests in flight per
//!   connection; prepare size (a larger send is refused).
//! - **Root credentials**: without `--with-default-root-credentials`, the root user gets
//!   `VIREO_ROOT_USERNAME` / `VIREO_ROOT_PASSWORD` at first boot, or a random password printed
//!   once. The server changes the genesis credentials through its own metadata group before it
//!   accepts any client.
//! - **Startup**: a node takes clients only once every group it hosts has recovered what is durable
//!   and executed it (it prints `recovered in N ms: accepting clients`); connections made before
//!   then wait in the listener's backlog, and nothing is answered. A cluster node that cannot
//!   recover yet (no quorum) takes clients after 10 s all the same, and they get the retriable
//!   error (58).
//! - **Ports**: a listening port still held by a killed predecessor's socket (SIGKILL leaves it for
//!   about 100 ms while io_uring is torn down) is tried again for up to 10 s; a port a live process
//!   listens on is refused at once, naming the process.
//! - **TLS** (rustls, `[tcp.tls]` and `[http.tls]`): a client that does not complete a handshake
//!   within `handshake_timeout_ms` (a plain-text one, say) is closed and counted
//!   (`vireo_refusals_total{reason="tls_handshake"}`). Replica links are not encrypted yet: they
//!   authenticate with the cluster's secret.
//!
//! # A cluster
//!
//! A cluster is `vireo-server` processes whose configs enable `[cluster]` with the same roster and
//! the same secret; `vireo-cluster` writes such configs for one machine and starts
//! `vireo-server --replica-id N` for each.
//!
//! - **Listening**: a node listens for clients on its roster entry's `ip:ports.tcp`, and for its
//!   peers on `ip:ports.tcp_replica` (or `cluster.replica_listen_address`, when a proxy or NAT
//!   forwards the roster address elsewhere).
//! - **Replica links**: every shard dials every peer. Each link starts with a handshake in which
//!   both sides prove they hold the secret (a blake3 MAC over the other's fresh nonce) and compare
//!   rosters; then it carries VSR frames, reconnecting with backoff (20 ms, doubling to 500 ms). A
//!   peer without the secret is refused and counted
//!   (`vireo_refusals_total{reason="replica_link_auth"}`). A node whose roster differs from a
//!   quorum of its peers' stops with one line (`vireo-server: roster mismatch: ...`), and the nodes
//!   that agree go on.
//! - **Quorum**: start the nodes in any order. A node alone logs `waiting for a quorum` every 5 s,
//!   with the peers it reaches, and answers no writes until a majority is up.
//! - **A node that lost its disk**: a node with an empty data directory first asks its peers what
//!   their metadata logs hold (the link handshake's answer carries it). If one says the cluster has
//!   history, the node lost its disk, and its groups rejoin (`Config::rejoin_guard`): they wait for
//!   the current view and catch up from their peers (repair, or state transfer of a checkpoint),
//!   and until then they neither acknowledge, nack nor vote in a view change, since they may have
//!   forgotten prepares they acknowledged. The superblock keeps that state across a crash.
//! - **First boot**: only when every peer of the roster has answered that it holds nothing is this
//!   a first boot, as for every node of a new cluster; until then the node waits and says so every
//!   5 s. So a new cluster forms once all its nodes are up, and a node that lost its disk never
//!   formats over a cluster's history because only its empty peers answered. A node that hears
//!   last, after the others already committed, rejoins as a node that lost its disk would: safe,
//!   and over as soon as it caught up.
//! - **Forwarding**: any node takes any request and forwards it to the group's primary (the
//!   metadata group's, or a partition's: primaries are spread over the nodes by partition).
//!   `get_cluster_metadata` names the metadata group's primary the leader; the Iggy SDK and CLI
//!   connect to the leader on login. A batch crosses each replica link at most once: the
//!   forwarding backup keeps the request's frame, and the primary's prepare to it carries the
//!   header and the stamping but not the batch, which the backup stamps again from its copy and
//!   checks against the prepare's checksum (`vireo_protocol::replica` `forwarded`; a miss, the
//!   copy gone or different, asks for the prepare whole; `vireo_prepares_elided_total`,
//!   `vireo_prepares_rebuilt_total`, `vireo_prepares_elided_missed_total`). Through any node,
//!   the loopback of a three-node cluster on one machine carries 3.17 bytes per byte
//!   iggy-bench sends (the reference's cluster: 3.16): the client's, the forward, the prepare to
//!   the other backup, each with the batches' own framing. A backup whose WAL waits for a
//!   checkpoint holds the prepares that come meanwhile (at most `prepare_queue_max`) rather than
//!   drop them and ask for them again whole.
//! - **What an acknowledged send promises**: the batch is written (the write completed, in the
//!   page cache) on a quorum of the partition's replicas, the primary counted only once its own
//!   write completed; with `enforce_fsync`, synced (group commit) on that quorum. It survives
//!   `kill -9` of every node at once, and with `enforce_fsync` a power loss of every node. The
//!   reference's cluster (server-0.9.0-edge.5, read in its source) answers once the prepare is
//!   in memory on its primary and one backup (`PartitionJournalMemStorage`; a backup's
//!   prepare_ok follows its in-memory append); its batches reach the segment files when 1024
//!   messages or 1 MiB have gathered, and `enforce_fsync` only syncs those flushes. So killing two
//!   of its three nodes at once may lose acknowledged messages there, and not here.
//! - **Root credentials** must be given in a cluster, the same on every node (`VIREO_ROOT_USERNAME`
//!   / `VIREO_ROOT_PASSWORD`, or `--with-default-root-credentials`): each node would generate
//!   another.

pub mod admission;
pub mod client_reply;
pub mod connection;
pub mod disk_reserve;
pub mod group_io;
pub mod metadata;
pub mod metadata_plane;
#[allow(clippy::module_inception)]
pub mod node;
pub mod node_io;
pub mod partition;
pub mod partition_figures;
pub mod partitioning;
pub mod reads;
pub mod routing;
pub mod server;
pub mod shard;
pub mod wire_view;

pub use node::{Node, NodeConfig, NodeCounters, NodeEvent};
pub use node_io::{ChannelFull, ConnectionId, LocalRead, MetadataView, NodeIo, ShardMessage};

pub use vireo_io as io;
pub use vireo_protocol as protocol;
