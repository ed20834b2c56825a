//! Vireo's deterministic simulator: whole clusters of the real replica code on virtual time, with
//! a simulated network and simulated disks that fail the way real ones do, checkers for safety
//! and liveness, and seed files for every failure it ever found.
//!
//! One `u64` seed drives a ChaCha RNG that decides everything: the scenario, the workload, every
//! latency and every fault. Same seed, same binary: the same run, byte for byte (the trace hash
//! proves it).
//!
//! # A run
//!
//! Each seed draws its own scenario (swarm testing): 1 to 6 replicas, 1 to 8 clients, journal size,
//! pipeline depth, client-table size and every fault rate (none, default or heavy). A run has two
//! phases.
//!
//! The **safety phase** injects faults:
//! - on the network: loss, duplication, reordering delays, symmetric and asymmetric partitions, an
//!   isolated replica, clogged paths;
//! - a primary cut off alone (it goes on preparing what nobody else gets), and views that start
//!   while replicas are cut off and whose primary goes down as the partition ends, so that the
//!   stale logs meet the next view change;
//! - crashes at any event, which lose or tear unsynced writes: more often while writes are in
//!   flight, and in a share of seeds a backup together with its primary;
//! - on the disks: write corruption, misdirected writes, latent sector errors, read corruption,
//!   slow I/O;
//! - WAL write and fsync errors, which stop a replica; segment and index write and fsync errors,
//!   which stop a segment log (it reopens from what its files hold; `segment_log_failures=` counts
//!   them); a failed fsync losing the writes it covered.
//!
//! The **liveness phase** heals the network, restarts every replica and injects no more faults:
//! every request in flight must be answered, and every replica must converge within a bound of
//! ticks.
//!
//! # Checkers
//!
//! - one hash-chained commit history, which all replicas agree with;
//! - an independent model of the replicated register log, with exactly-once client sessions, that
//!   every state digest and every reply must match;
//! - no acknowledged request lost;
//! - every prepare_ok a replica sent is a promise: its recovery after a crash finds that prepare
//!   again (by body or by header), or a checkpoint over it;
//! - determinism (the trace hash).
//!
//! Each node also keeps a partition log of the entries it applied, on the same simulated disk
//! (segments, indexes, partition superblocks, all under the same crashes and faults, plus ENOSPC).
//! On every reopen it must hold everything it reported durable (on a damaged disk it may lose
//! messages below the recorded frontier only when it reports them), and every message it serves
//! must be the committed entry at that offset. In half the seeds every disk's partition files rot,
//! a single node's included.
//!
//! Each checker also has a test with a deliberately broken replica or partition log that it catches
//! (`sim/tests/broken_replica.rs`). The partition log also has its own model-based proptest, with
//! crashes at random points (`sim/tests/partition_model.rs`).
//!
//! # Planted bugs: checking the checkers
//!
//! `vireo-sim sweep --seeds N --bug NAME` plants one deliberate bug and counts the seeds that catch
//! it (`vireo-sim run --seed S --bug NAME --trace` shows one catch). Every planted bug has a window
//! of 200 seeds (a sweep's overrides and its first seed, in `sim/src/planted.rs`) in which at
//! least 2 seeds fail with it and pass without it. `cargo test` runs every window
//! (`sim/tests/planted_bugs.rs`), so a change that blinds the simulator to one fails CI;
//! `vireo-sim planted` prints each window's catch rate. The one bug no sweep catches yet
//! (`read-unchecked-tail`) is named there, with the reason.
//!
//! # Workloads
//!
//! ## register (the default)
//!
//! The core replica replicating a register log, under the faults and checkers above.
//!
//! ## streaming (`--workload streaming`)
//!
//! Whole clusters of real nodes (`Node`, every shard): 1 to 5 nodes of 1 to 4 shards (`--replicas`,
//! `--shards`).
//!
//! **Clients** connect to one node at a time and speak the SDK's bytes:
//! - one login per connection (a new client id each time); metadata commands numbered by the
//!   client; partition requests and reads carrying the number it has not used;
//! - producers keep 1 to 4 sends in flight (drawn per producer; `sends_pipelined=` counts the sends
//!   started while another was out), matched to their replies by request_checksum;
//! - a connection delivers its frames in order each way, as TCP does;
//! - a reply that does not come, or a connection that breaks (a frame the network loses breaks it,
//!   a crash closes all of the node's), sends the client to another node with a new login, what was
//!   in flight of unknown fate.
//!
//! **An administrator** creates the stream, topic, consumer group and users. Then, while traffic
//! runs, it adds partitions; creates, updates, purges and deletes a second stream, topic and group;
//! and flips a user's permissions, deletes the user and re-creates it. Producers logged in as root
//! also send small batches to that second ("churn") topic, and consumers poll it, while it is
//! deleted and created again; the run ends with a fresh one.
//!
//! **Producers** send batches of 1 to 199 unique values (payloads of 0 to 256 bytes, at most 8,000
//! bytes of messages a batch) with balanced, partition-id and key partitioning. In one seed in 16,
//! or with `--volume large`, batches are 1 to 999 values of up to 64 KiB, at most 1 MiB a batch, in
//! 2 MiB prepares, with the drawn segment and topic sizes 128 times larger. **Consumers** poll
//! every partition (up to 16 + 4 x the largest batch a poll), by offset or by their stored offset
//! with auto-commit; members join and leave the group.
//!
//! **Logins**: clients log in as root, as a user that may only send, one that may only poll, one
//! with no rights on the topic, and one whose rights race; now and then with a wrong password, or
//! with personal access tokens (lasting, expired and deleted ones); and they log out and in again.
//! Lurkers open bursts of connections that never log in (a ping must be answered, a read or a send
//! refused with 40), and in some runs they fill the shards' bounded connections.
//!
//! **Faults**, beyond the network's and the disks':
//! - nodes crash whole (every shard) and restart; `--rolling-restart-ticks N` crashes one node
//!   every N ticks instead of at random;
//! - in a quarter of the runs one node's disk is full for 1 to 10 simulated seconds (`disk_full=`
//!   in the scenario line): its node is below its free-space reserve and refuses sends and creates
//!   at once (`sends_refused_disk_low=`) while reads, offsets and deletes go on; every write that
//!   would grow a file fails with ENOSPC, its replicas stop and reopen from what is durable, its
//!   segment logs are refused appends, and once space is back everything must catch up
//!   (`writes_refused_full=` counts the refusals). In a quarter of those windows (`+unforeseen`)
//!   no node keeps a reserve and the disk fills while the producers send: a single node's groups
//!   cut the ops a refused write was for and refuse their sends (`cuts_for_no_space=`,
//!   `requests_refused_no_space=`, `requests_prepared_again=`), and the checker holds every
//!   refused send to never appearing;
//! - segment files rot (latent sectors, damaged writes) on at most a minority of the disks, never a
//!   single node's, and never one whose WAL headers zone takes faults (there the batches are a
//!   prepare's only sure copy); `segment_logs_cut=` counts the opens that cut or lost batches,
//!   which the logs take again from their machines;
//! - in a third of the seeds segment logs sync ten times slower than WALs;
//! - in `enforce_fsync` runs power is cut right after writes complete, before their sync, now and
//!   then with a second node on the same feed;
//! - in a third of the runs of three nodes or more, a node whose partition replica is a primary
//!   with prepares in flight is cut off for a while (a cut path loses the messages in flight on
//!   it).
//!
//! **Retention** is drawn from the seed: a third of the runs keep everything; the rest seal 512 B
//! to 4 KiB segments and expire messages after 2 to 30 s, or hold a topic to 4 to 64 segments.
//!
//! **Checkers**:
//! - the Kafka-log checker (`sim/src/kafka_log.rs`) looks for lost writes, duplicates, inconsistent
//!   offsets, unseen acknowledged values, poll skips, non-monotonic polls and sends, and stale
//!   reads (a poll by offset, invoked after a send's acknowledgement, that does not return it). It
//!   checks that every committed group assignment gives each partition exactly one member, and that
//!   a send is never acknowledged while an earlier send to its partition on the same connection
//!   waits. Under retention it lets a consumer skip only what lies below where the final read
//!   starts;
//! - the churn ledger (`sim/src/streaming/churn.rs`) holds that the churn topic's final incarnation
//!   holds no value acknowledged before it was created (a re-created topic starts empty; the
//!   planted bug `deleted-groups-keep-their-files` is caught by about a third of the seeds), and
//!   that its polls return only values sent to it;
//! - every group's replicas must agree on every committed op, and every replica of every group must
//!   find again after a crash each prepare it acknowledged (unless a checkpoint covers it, or the
//!   group was deleted): whole, batches included, on a disk that takes no faults;
//! - the deletion watch holds that a node removes a deleted group's last file only once its durable
//!   metadata commit point is past the last op that held the group;
//! - the access checker (`sim/src/access.rs`) holds that a wrong password or token never logs in;
//!   an action a user may not take (a send, a poll, or any of the reads: get_stream(s),
//!   get_topic(s), get_consumer_group(s), get_user(s), get_clients, get_stats,
//!   get_personal_access_tokens, get_consumer_offset, get_cluster_metadata, describe_options) never
//!   succeeds; an allowed one is never refused as unauthorized; a listing never shows another
//!   user's tokens; and every refusal carries one of the reference's codes;
//! - at the end, every node's segment logs must hold what their machines hold: the same end, the
//!   same segment boundaries, and on disks without faults the same bytes. The final read of each
//!   partition is read from the segment files of a node whose disk takes no faults.
//!
//! Planted bugs (a skipped send-permission check, a login that takes any password) are caught by
//! the sweep (`sim/tests/streaming.rs`).
//!
//! **What a run prints**: messages and bytes acknowledged per simulated second, connections,
//! logins, refusals, and the sessions the nodes opened and ended. For node 0, `segments_sealed=`,
//! `segment_bytes=`, `disk_bytes_written=` and `wal_bytes_written=` (bytes its disk was asked to
//! write, over the run); for every node, `prepares_filled=` / `prepares_unfilled=`,
//! `fetches_sent=`, `batches_fetched=`, `segment_logs_dropped=`, `batches_speculated=` (appended
//! before commit), `tail_cuts=` and `runs_repaired=`.
//!
//! # Command line
//!
//! ```sh
//! vireo-sim sweep --seeds 2000                    # all cores; --jobs N, --start S
//! vireo-sim sweep --seeds 1000 --disk-loss        # a replica restarts empty and rejoins
//! vireo-sim sweep --seeds 1000 --workload streaming
//! vireo-sim run --seed 42 --replicas 3 --faults heavy --trace
//! vireo-sim run --seed 1 --workload streaming --replicas 3 --shards 2 --rolling-restart-ticks 300
//! vireo-sim replay seeds/seed-105.toml
//! # Hundreds of MiB through a 3-node cluster: compare disk_bytes_written with segment_bytes.
//! vireo-sim run --seed 5 --workload streaming --replicas 3 --shards 2 --faults none --volume large
//! vireo-sim planted                               # each planted bug's catch rate
//! ```
//!
//! Exit codes: 0 pass, 127 panic or assertion, 128 liveness, 129 correctness. A sweep prints every
//! failing seed with the exact command that replays it, and ends with `K passed, F failed`. A seed
//! that fails becomes a file in `seeds/` (seed, overrides, one line on the bug), which `cargo test`
//! replays.

pub mod access;
pub mod checker;
pub mod client;
pub mod cluster;
pub mod disk;
pub mod kafka_log;
pub mod local;
pub mod network;
pub mod partition_harness;
pub mod partition_mirror;
pub mod planted;
pub mod queue;
pub mod register_log;
pub mod rng;
pub mod run;
pub mod scenario;
pub mod seeds;
pub mod sim_io;
pub mod streaming;
