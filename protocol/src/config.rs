//! A replica's configuration: cluster shape, journal geometry, and every bound and timeout, each a
//! named limit with its unit last.

/// Deliberate protocol bugs, for the tests that prove each simulator checker can fail. Never set
/// outside those tests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bug {
    /// A backup sends prepare_ok as soon as a prepare arrives, before it is durable.
    AckBeforeDurable,
    /// A primary commits an op as soon as it has written it, without a replication quorum.
    CommitWithoutQuorum,
    /// The client table forgets a request's number, so a retried request is applied again.
    ApplyRetryTwice,
    /// Partition logs report batches durable once written, before any sync (handed to the
    /// simulator's partition logs, not to the replica).
    PartitionDurableBeforeSync,
    /// The node's front door admits a send without checking the user's send permission.
    SkipSendPermission,
    /// The node's front door logs in a known user whatever password it is given.
    AcceptAnyPassword,
    /// A deleted partition group's files are kept, and a partition created again under its
    /// namespace is the same group (no new incarnation): the old data comes back.
    DeletedGroupsKeepTheirFiles,
    /// A new primary takes the longest log among the do_view_change votes, whatever its log_view.
    ViewChangeTakesLongestLog,
    /// Restart drops a prepare whose redundant header survived but whose body did not, as if it
    /// were a torn tail never acknowledged: the replica may then nack an op it acknowledged.
    RestartDropsDamagedPrepares,
    /// A node answers a poll without auto-commit from its replica's log as if every prepare it
    /// holds were committed (on a primary holding prepares past its commit point, at once,
    /// without a read index): a primary serves messages a view change may still discard.
    PollPastCommit,
    /// A replica of a group whose durability is enforced acknowledges prepares once written,
    /// before they are synced (it skips the WAL's fdatasyncs).
    AckBeforeSync,
    /// A node's segment log of a partition never seals where its machine's segments end: its
    /// files no longer end at the batches every replica's do.
    SegmentLogIgnoresSeals,
    /// A partition group acknowledges prepares and writes checkpoints without waiting for its
    /// segment log to hold their batches durably: the WAL then overwrites prepares whose batches
    /// no log may hold.
    LogDurabilityIgnored,
    /// A partition's segment log takes the batches it appended from prepares not yet committed
    /// as the committed log, without checking them against what the machine applied: a tail a
    /// view change replaced stays in its files.
    SegmentLogTrustsItsTail,
    /// A replica whose WAL leaves batches to the segment log writes its prepares' redundant
    /// headers without waiting for the log to hold those batches: after a power loss a durable
    /// header may name a batch no log holds, a prepare its replica keeps as possibly acknowledged
    /// (never nacked) that no replica can give back.
    WalHeadersBeforeLog,
    /// A node removes a deleted group's files as soon as it applies the deletion, and does not
    /// make its metadata's commit point durable first: a restart may then publish the older
    /// metadata, reopen the group and find its checkpoint gone.
    DeletionNotDurable,
    /// A replica that lost its disk formats and takes part in view changes and repairs at once,
    /// as if it had never acknowledged anything (`Config::rejoin_guard` ignored).
    RejoinWithoutGuard,
    /// A node sends a connection's pipelined requests to a group all at once: a later one
    /// that overtakes an earlier one on the way makes the earlier one stale in the group's
    /// client table, never applied and never answered.
    PipelinedRequestsOvertake,
    /// A node answers a poll without auto-commit from its replica's committed state as it
    /// stands, with no read index: a backup that has not yet heard of a commit answers without
    /// a send acknowledged before the poll was sent.
    PollWithoutReadIndex,
    /// A node answers the reads that need no consensus (get_stream(s), get_topic(s),
    /// get_consumer_group(s), get_user(s), get_clients, get_stats, get_consumer_offset) without
    /// checking the user's permission to read.
    SkipReadPermission,
    /// A partition's segment log, with the topic's durability enforced, reports the batches it
    /// wrote as held before it synced them: a replica that leaves its prepares' batches to the
    /// log acknowledges batches a power loss may take.
    SegmentLogAckBeforeSync,
    /// The metadata group's replicas (always enforced) acknowledge prepares once written, before
    /// they are synced: `AckBeforeSync` for the metadata group alone.
    MetadataAckBeforeSync,
    /// A partition's segment log serves reads up to its end, past what it has checked against
    /// its machine: a tail appended from prepares a view change replaced, or that a crash took
    /// from the WAL, is read as if committed until the log cuts it.
    ReadUncheckedTail,
    /// A replica's WAL writes each prepare's redundant header in the group commit that writes the
    /// prepare, under the same sync: a power loss may leave the header durable and the prepare
    /// not, which recovery takes for a durable prepare damaged since.
    WalHeaderWithItsPrepare,
    /// A backup keeps the frames it forwarded after their prepares arrived whole, and rebuilds an
    /// elided prepare from the oldest frame its client forwarded, whichever request that was,
    /// without checking it against the prepare's checksum.
    ElidedFromStaleKeptCopy,
    /// A node's front door admits sends while its disk is below the free-space reserve.
    SendPastDiskReserve,
    /// A single replica whose external log could not store a prepare's batches (a full disk)
    /// refuses its sends at once but keeps the op, which the log stores and commits once space
    /// is back: a client told "not stored" finds its messages.
    NoSpaceRefusalKeepsOp,
}

impl Bug {
    pub const ALL: [Bug; 27] = [
        Bug::AckBeforeDurable,
        Bug::CommitWithoutQuorum,
        Bug::ApplyRetryTwice,
        Bug::PartitionDurableBeforeSync,
        Bug::SkipSendPermission,
        Bug::AcceptAnyPassword,
        Bug::DeletedGroupsKeepTheirFiles,
        Bug::ViewChangeTakesLongestLog,
        Bug::RestartDropsDamagedPrepares,
        Bug::PollPastCommit,
        Bug::AckBeforeSync,
        Bug::SegmentLogIgnoresSeals,
        Bug::LogDurabilityIgnored,
        Bug::SegmentLogTrustsItsTail,
        Bug::WalHeadersBeforeLog,
        Bug::DeletionNotDurable,
        Bug::PipelinedRequestsOvertake,
        Bug::RejoinWithoutGuard,
        Bug::PollWithoutReadIndex,
        Bug::SkipReadPermission,
        Bug::SegmentLogAckBeforeSync,
        Bug::MetadataAckBeforeSync,
        Bug::ReadUncheckedTail,
        Bug::WalHeaderWithItsPrepare,
        Bug::ElidedFromStaleKeptCopy,
        Bug::SendPastDiskReserve,
        Bug::NoSpaceRefusalKeepsOp,
    ];

    /// The bug's name in kebab case, as the simulator's `--bug` takes it.
    pub fn name(self) -> String {
        let mut name = String::new();
        for (at, letter) in format!("{self:?}").chars().enumerate() {
            if letter.is_ascii_uppercase() && at > 0 {
                name.push('-');
            }
            name.push(letter.to_ascii_lowercase());
        }
        name
    }

    pub fn parse(name: &str) -> Option<Bug> {
        Bug::ALL.into_iter().find(|bug| bug.name() == name)
    }
}

#[derive(Clone, Debug)]
pub struct Config {
    pub cluster: u128,
    pub replica_count: u8,
    /// The primary of view v is replica (v + primary_offset) % replica_count: groups with
    /// different offsets put their primaries on different nodes.
    pub primary_offset: u8,
    /// The group this replica belongs to: where its superblock, WAL and checkpoints live.
    pub namespace: vireo_io::Namespace,
    /// WAL slots; op x lives in slot x % journal_slots.
    pub journal_slots: u64,
    /// A prepare (header and body) never exceeds this, and so no WAL slot does.
    pub prepare_size_max: u64,
    /// Uncommitted prepares a primary keeps in flight.
    pub prepare_queue_max: usize,
    /// Client requests a primary holds while its prepare queue is full.
    pub request_queue_max: usize,
    /// Client requests batched into one prepare.
    pub batch_requests_max: usize,
    /// Client sessions the client table keeps; the least recently active is evicted past this.
    pub clients_max: usize,
    /// Each of the two checkpoint regions of `snapshot.bin`.
    pub snapshot_size_max: u64,
    /// Bytes of a checkpoint one state-transfer message carries at most.
    pub checkpoint_chunk_bytes: u64,
    /// Prepares asked for in one request_prepares.
    pub repair_batch_max: usize,
    /// Prepares the WAL writes in one group commit.
    pub write_batch_max: usize,
    pub prepare_timeout_ticks: u64,
    pub commit_message_timeout_ticks: u64,
    pub normal_heartbeat_timeout_ticks: u64,
    pub view_change_message_timeout_ticks: u64,
    pub view_change_status_timeout_ticks: u64,
    pub repair_timeout_ticks: u64,
    pub request_start_view_timeout_ticks: u64,
    /// The group's durability mode (a topic's `enforce_fsync`): `true`, a prepare is acknowledged
    /// once synced (group commit: one fdatasync covers every prepare of the batch); `false`, once
    /// its writes have completed, so it survives the process being killed (the bytes are in the
    /// kernel) but not a power loss. The superblock and checkpoints are synced either way.
    pub sync_writes: bool,
    /// The replica's storage may have been lost since it last ran (a node restarted with an empty
    /// data directory while its cluster has history): a replica that formats finds itself
    /// *rejoining* and casts no do_view_change vote and sends no nack until it has caught up to
    /// the commit its view's primary announces. It may have acknowledged prepares it no longer
    /// holds: a vote or a nack from it could let a view change or a repair drop them. Off when the
    /// cluster is known to be new (a first boot), where every replica formats.
    pub rejoin_guard: bool,
    /// A replica that formats starts recovering (it waits for the current view's start_view, or
    /// a view change) instead of as view 0's: its storage may be empty because it was lost while
    /// the group went on, and view 0 may hold prepares it no longer knows it made. Off for
    /// groups that are new everywhere (a partition created by committed metadata).
    pub format_waits_for_view: bool,
    /// A request a backup forwards is kept, and its prepare comes back to that backup without
    /// its body, when its frame is at least this long (`replica::forwarded`): below it, the
    /// bytes saved on the link are about the elided form's own.
    pub elide_bytes_min: usize,
    pub bug: Option<Bug>,
}

impl Config {
    pub fn new(cluster: u128, replica_count: u8) -> Config {
        assert!((1..=6).contains(&replica_count));
        Config {
            cluster,
            replica_count,
            primary_offset: 0,
            namespace: vireo_io::Namespace::METADATA,
            journal_slots: 1024,
            prepare_size_max: 1024 * 1024,
            prepare_queue_max: 8,
            request_queue_max: 64,
            batch_requests_max: 32,
            clients_max: 64,
            snapshot_size_max: 64 * 1024 * 1024,
            checkpoint_chunk_bytes: 1024 * 1024,
            repair_batch_max: 16,
            write_batch_max: 64,
            prepare_timeout_ticks: 20,
            commit_message_timeout_ticks: 10,
            normal_heartbeat_timeout_ticks: 100,
            view_change_message_timeout_ticks: 20,
            view_change_status_timeout_ticks: 200,
            repair_timeout_ticks: 10,
            request_start_view_timeout_ticks: 30,
            sync_writes: true,
            rejoin_guard: false,
            format_waits_for_view: false,
            elide_bytes_min: crate::replica::FORWARDED_KEEP_BYTES_MIN,
            bug: None,
        }
    }

    /// Replicas that must hold a prepare before it commits.
    pub fn quorum_replication(&self) -> usize {
        let n = self.replica_count as usize;
        (n + 1 - self.quorum_view_change()).max(n.min(2))
    }

    /// Replicas whose do_view_change a new primary needs. Any replication quorum and any
    /// view-change quorum intersect.
    pub fn quorum_view_change(&self) -> usize {
        self.replica_count as usize / 2 + 1
    }

    /// Whether a view-change quorum holding one replica that forgot its log still meets every
    /// replication quorum in a replica that remembers: its other votes number at least
    /// `replica_count - quorum_replication + 1`. True only for two replicas (where every
    /// replication quorum is both).
    pub fn rejoining_vote_is_safe(&self) -> bool {
        let others = self.quorum_view_change() - 1;
        others + self.quorum_replication() > self.replica_count as usize
    }

    /// Slots left free when a checkpoint is due: room for every prepare in flight meanwhile.
    pub fn checkpoint_margin(&self) -> u64 {
        let margin = (self.journal_slots / 4).min(64).max(2 * self.prepare_queue_max as u64 + 2);
        assert!(margin < self.journal_slots);
        margin
    }

    /// Ops between checkpoints.
    pub fn checkpoint_interval(&self) -> u64 {
        self.journal_slots - self.checkpoint_margin()
    }

    pub fn primary_index(&self, view: u32) -> u8 {
        ((view as u64 + self.primary_offset as u64) % self.replica_count as u64) as u8
    }

    pub fn validate(&self) {
        assert!(self.quorum_replication() + self.quorum_view_change() > self.replica_count as usize);
        assert!(self.prepare_queue_max >= 1);
        assert!(self.journal_slots > 2 * self.prepare_queue_max as u64 + 4);
        assert!(self.checkpoint_interval() >= 1);
        assert!(self.checkpoint_chunk_bytes >= 1);
        assert!(
            self.checkpoint_chunk_bytes + vireo_storage::layout::HEADER_SIZE as u64
                <= crate::header::FRAME_SIZE_MAX as u64
        );
        // A view's uncommitted suffix, and the header below it, fit in the superblock.
        assert!(self.prepare_queue_max * 2 + 2 <= vireo_storage::superblock::VIEW_HEADERS_MAX);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quorums_intersect() {
        for n in 1..=6u8 {
            let config = Config::new(1, n);
            config.validate();
            let expected = match n {
                1 => (1, 1),
                2 => (2, 2),
                3 => (2, 2),
                4 => (2, 3),
                5 => (3, 3),
                6 => (3, 4),
                _ => unreachable!(),
            };
            assert_eq!((config.quorum_replication(), config.quorum_view_change()), expected);
            assert_eq!(config.rejoining_vote_is_safe(), n == 2, "{n} replicas");
        }
    }
}
