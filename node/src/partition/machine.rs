//! `PartitionMachine`: what one partition's VSR group replicates. It owns the partition's batch
//! directory (offsets dense from `first_offset` to `next_offset`: each stamped batch's offsets,
//! size, checksum and newest timestamp), its segments and its consumer offsets, but not the
//! batches' bytes: those live once, in the group's segment log on each node. The primary stamps
//! every send's batch as it prepares it (`prepare`: the partition id, the next offsets, the
//! prepare's timestamp and every checksum), so a prepare carries the bytes exactly as every
//! replica stores them; `apply` enters the batch in the directory and hands its bytes on
//! (`take_applied`) to the segment log, which the group's checkpoints wait for
//! (`StateMachine::EXTERNAL_LOG`).
//!
//! The batches are grouped into segments as the segment log groups them: a segment is sealed once
//! it holds the topic's `segment_size`, and the next batch opens a new one. Retention goes by
//! whole sealed segments, as the reference's does: after each send, the oldest sealed segment goes
//! while its newest batch is older than the topic's message expiry (by the send's prepare
//! timestamp, so every replica drops the same segments at the same op) or while the partition
//! holds more than its share of the topic's maximum size. The newest segment always stays.
//!
//! Invariants (asserted after every apply): the directory is contiguous, its message counts sum
//! to `next_offset - first_offset`, the segments cover exactly the batches, `retained_bytes` is
//! their total size, and the directory holds at most `BATCHES_MAX` batches (what one checkpoint
//! may carry: beyond it the oldest batches go, whatever the topic says).

use std::collections::{BTreeMap, VecDeque};

use vireo_io::Bytes;
use vireo_protocol::elided::ExternalSpan;
use vireo_protocol::request::batched_requests;
use vireo_protocol::state_machine::Prepared;
use vireo_protocol::{Header, StateMachine};
use vireo_storage::batch::{self, BatchHeader};
use vireo_storage::checksum::checksum64;
use vireo_storage::partition::PollingStrategy;

use super::request::{
    decode_send_head, encode_offset_reply, encode_poll_reply, encode_send_reply, encode_status, ConsumerKey,
    OffsetReply, PartitionRequest, PartitionStatus, PollReply, Retention, SendReply, OPERATION_SEND_MESSAGES,
    SEND_BATCH_AT,
};

/// Batches one partition's directory holds; past it the oldest batches are dropped. It bounds the
/// directory's memory (`BatchEntry` each) and the checkpoint that carries it (24 bytes each).
pub const BATCHES_MAX: usize = 1 << 20;
/// Consumer and group offsets one partition stores.
pub const CONSUMERS_MAX: usize = 1024;
/// Bytes of batches one poll returns at most (it always returns at least one whole batch).
pub const POLL_BYTES_MAX: u64 = 256 << 10;
/// Messages one poll may ask for.
pub const POLL_COUNT_MAX: u32 = 100_000;
/// Bytes of one directory entry in a snapshot.
const ENTRY_SNAPSHOT_BYTES: usize = 24;

/// One stamped batch as the partition knows it, without its bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BatchEntry {
    pub base_offset: u64,
    pub message_count: u32,
    /// The whole batch's size (frames cap it far below 4 GiB).
    pub len: u32,
    /// The batch's `batch_checksum`: a batch fetched from a peer must carry exactly it.
    pub checksum: u64,
    /// The newest message timestamp in the batch (what a poll by timestamp goes by).
    pub timestamp_max: u64,
}

impl BatchEntry {
    pub fn end_offset(&self) -> u64 {
        self.base_offset + self.message_count as u64
    }

    /// Whether `batch` is the stamped batch this entry describes.
    pub fn matches(&self, header: &BatchHeader) -> bool {
        header.base_offset == self.base_offset
            && header.message_count == self.message_count
            && header.batch_length == self.len as u64
            && header.batch_checksum == self.checksum
    }
}

/// Batches applied and not yet taken by the segment log (`take_applied`). Not part of the
/// replicated state: equality ignores it, snapshots and digests leave it out.
#[derive(Clone, Debug, Default)]
struct Applied(VecDeque<(u64, Bytes)>);

impl PartialEq for Applied {
    fn eq(&self, _: &Applied) -> bool {
        true
    }
}

impl Eq for Applied {}

/// Batches a single replica's recovery found damaged in its segment log, by base offset: (end
/// offset, bytes). The prepares past the checkpoint that hold them are applied with those batches
/// zeroed, and each takes its place in the log without its content (`StateMachine::span_lost`).
/// Filled only while the replica opens, from its WAL's slots (so at most `journal_slots` prepares'
/// batches), and emptied as they apply. Not part of the replicated state, like `Applied`.
#[derive(Clone, Debug, Default)]
struct LostBatches(BTreeMap<u64, (u64, u32)>);

impl PartialEq for LostBatches {
    fn eq(&self, _: &LostBatches) -> bool {
        true
    }
}

impl Eq for LostBatches {}

/// A send's batch as `prepare` stamps it for `partition` at `next_offset` and `timestamp_us`,
/// and that alone: whole, valid, not empty, stamped exactly there. `prepare` counts a send's
/// messages and `apply` stores its batch by this one test, so the two can never disagree on
/// where the next batch starts (a client's bytes that fail to stamp stay unstamped and fail it).
/// The messages' checksums are not hashed again (`batch::check_stamped`): `prepare` just wrote
/// them, and everywhere else the batch is a prepare's body, which its `checksum_body` vouches for.
/// A client's batch that `stamp` refused fails the structure checks here as it failed them there.
fn stamped_send(batch: &[u8], partition: u32, next_offset: u64, timestamp_us: u64) -> Option<BatchHeader> {
    stamped_send_with_timestamp_max(batch, partition, next_offset, timestamp_us).map(|(header, _)| header)
}

/// `stamped_send`, with the batch's largest message timestamp read in the same walk.
fn stamped_send_with_timestamp_max(
    batch: &[u8],
    partition: u32,
    next_offset: u64,
    timestamp_us: u64,
) -> Option<(BatchHeader, u64)> {
    let (header, timestamp_max) = batch::check_stamped_with_timestamp_max(batch).ok()?;
    let exact = batch.len() == header.batch_length as usize
        && header.message_count > 0
        && header.partition_id == partition as u64
        && header.base_offset == next_offset
        && header.base_timestamp == timestamp_us;
    exact.then_some((header, timestamp_max))
}

/// What a prepared request holds for the segment log, read before it commits.
#[derive(Debug, PartialEq, Eq)]
pub enum PreparedSend<'a> {
    /// Not a send, or a send `apply` refuses: it takes no offsets.
    Nothing,
    /// A batch stamped where the log goes on (`cursor`), the topic's retention with it.
    Batch { batch: &'a [u8], header: BatchHeader, retention: Retention },
    /// A valid batch stamped for another place: the primary counted a send before it that the
    /// client table skipped, and `apply` stamps this one again where the log is.
    Elsewhere,
}

/// What the request `body` of a prepare stamped at `timestamp` (nanoseconds) holds for the log
/// at `cursor`, by the rules `apply` goes by.
pub fn prepared_send<'a>(operation: u8, body: &'a [u8], cursor: u64, timestamp: u64) -> PreparedSend<'a> {
    if operation != OPERATION_SEND_MESSAGES {
        return PreparedSend::Nothing;
    }
    let Ok((partition, retention)) = decode_send_head(body) else { return PreparedSend::Nothing };
    let batch = &body[SEND_BATCH_AT..];
    match stamped_send(batch, partition, cursor, timestamp / 1000) {
        Some(header) => PreparedSend::Batch { batch, header, retention },
        None if batch::check_stamped(batch).is_ok_and(|header| header.partition_id == partition as u64) => {
            PreparedSend::Elsewhere
        }
        None => PreparedSend::Nothing,
    }
}

/// A poll's choice: `count` messages from `start`.
struct Chosen {
    start: u64,
    count: u32,
}

/// A run of batches as one segment of the log holds them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct SegmentSpan {
    start_offset: u64,
    end_offset: u64,
    bytes: u64,
    /// The server timestamp (microseconds) of its newest batch: what expiry goes by.
    newest_timestamp: u64,
    sealed: bool,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PartitionMachine {
    /// The directory, oldest first.
    batches: VecDeque<BatchEntry>,
    /// The segments the batches fall in, oldest first; the last one is active unless sealed.
    segments: VecDeque<SegmentSpan>,
    first_offset: u64,
    next_offset: u64,
    retained_bytes: u64,
    consumer_offsets: BTreeMap<ConsumerKey, u64>,
    segments_expired: u64,
    /// A chain over every applied request and its reply: equal digests, equal histories.
    digest: u64,
    applied: Applied,
    lost: LostBatches,
}

impl PartitionMachine {
    pub fn first_offset(&self) -> u64 {
        self.first_offset
    }

    /// The offset the next message will get.
    pub fn next_offset(&self) -> u64 {
        self.next_offset
    }

    /// Segments the partition holds (sealed ones and the one being written).
    pub fn segments_count(&self) -> u32 {
        self.segments.len() as u32
    }

    pub fn retained_bytes(&self) -> u64 {
        self.retained_bytes
    }

    pub fn consumer_offset(&self, consumer: ConsumerKey) -> Option<u64> {
        self.consumer_offsets.get(&consumer).copied()
    }

    /// The directory, oldest first.
    pub fn directory(&self) -> impl Iterator<Item = &BatchEntry> {
        self.batches.iter()
    }

    /// Whether a segment starts at `offset`.
    pub fn starts_segment(&self, offset: u64) -> bool {
        self.segments.binary_search_by_key(&offset, |segment| segment.start_offset).is_ok()
    }

    /// Whether the newest segment is sealed: the next batch starts a new one.
    pub fn last_segment_sealed(&self) -> bool {
        self.segments.back().is_some_and(|segment| segment.sealed)
    }

    /// The entry of the batch that starts at `offset`.
    pub fn batch_at(&self, offset: u64) -> Option<&BatchEntry> {
        let at = self.batches.binary_search_by_key(&offset, |entry| entry.base_offset).ok()?;
        self.batches.get(at)
    }

    /// The batch a single replica's recovery found lost at `offset`, not applied yet: (end
    /// offset, bytes). Its prepare's body holds zeros in its place.
    pub fn lost_batch(&self, offset: u64) -> Option<(u64, u32)> {
        self.lost.0.get(&offset).copied()
    }

    /// Whether the request `body` of a prepare is the send whose batch was lost at `offset`
    /// (`lost_batch`): its batch zeroed, of the lost one's length. Returns where it ends.
    pub fn lost_send(&self, operation: u8, body: &[u8], offset: u64) -> Option<u64> {
        let (end, len) = self.lost_batch(offset)?;
        let batch = body.get(SEND_BATCH_AT..).filter(|_| operation == OPERATION_SEND_MESSAGES)?;
        (batch.len() == len as usize && batch.iter().all(|byte| *byte == 0)).then_some(end)
    }

    /// The next batch applied and not yet taken, oldest first: (base offset, stamped bytes). The
    /// group's segment log takes each after every step of its replica.
    pub fn take_applied(&mut self) -> Option<(u64, Bytes)> {
        self.applied.0.pop_front()
    }

    /// (start, end, sealed) of every segment, oldest first.
    pub fn segments(&self) -> impl Iterator<Item = (u64, u64, bool)> + '_ {
        self.segments.iter().map(|segment| (segment.start_offset, segment.end_offset, segment.sealed))
    }

    /// Sealed segments dropped by retention (expiry or size), since this state was created.
    pub fn segments_expired(&self) -> u64 {
        self.segments_expired
    }

    /// Appends a send's batch as the primary stamped it (`prepare`): every replica appends the
    /// same bytes at the same offsets. Then the topic's retention runs.
    fn send(
        &mut self,
        partition: u32,
        retention: Retention,
        mut bytes: Bytes,
        timestamp_us: u64,
    ) -> Result<SendReply, PartitionStatus> {
        self.lost.0.retain(|offset, _| *offset >= self.next_offset);
        if let Some((end, len)) = self.lost_batch(self.next_offset) {
            if bytes.len() == len as usize && bytes.iter().all(|byte| *byte == 0) {
                // The batch recovery found damaged in a single node's log: its offsets and bytes
                // stay taken, so that the batches after it stay where the log holds them. Its
                // checksum and newest timestamp went with it.
                self.lost.0.remove(&self.next_offset);
                let base_offset = self.next_offset;
                let count = u32::try_from(end - base_offset).expect("a batch holds at most u32::MAX messages");
                let entry =
                    BatchEntry { base_offset, message_count: count, len, checksum: 0, timestamp_max: timestamp_us };
                self.store(entry, retention, timestamp_us);
                return Ok(SendReply { partition, base_offset, message_count: count });
            }
        }
        if stamped_send(&bytes, partition, self.next_offset, timestamp_us).is_none() {
            // Stamped for another place: a send the primary counted before it was not applied
            // (its session was evicted by an op in between, so the client table skipped it).
            // Every replica stamps it again here, alike, and the primary's cursor is ahead of
            // the log until its pipeline drains (`prepare_cursor_at_head`). A copy: the
            // prepare's body stays as it was prepared.
            let mut restamped = bytes.to_vec();
            let _ = batch::stamp(&mut restamped, partition as u64, self.next_offset, timestamp_us);
            bytes = restamped.into();
        }
        let (header, timestamp_max) =
            stamped_send_with_timestamp_max(&bytes, partition, self.next_offset, timestamp_us)
                .ok_or(PartitionStatus::InvalidBatch)?;
        let count = header.message_count;
        let base_offset = self.next_offset;
        let entry = BatchEntry {
            base_offset,
            message_count: count,
            len: u32::try_from(bytes.len()).expect("a frame holds the batch"),
            checksum: header.batch_checksum,
            timestamp_max: timestamp_max.max(timestamp_us),
        };
        self.applied.0.push_back((base_offset, bytes));
        self.store(entry, retention, timestamp_us);
        Ok(SendReply { partition, base_offset, message_count: count })
    }

    /// Puts a batch at the end of the directory and its segments, and runs the topic's retention.
    fn store(&mut self, entry: BatchEntry, retention: Retention, timestamp_us: u64) {
        assert_eq!(entry.base_offset, self.next_offset);
        let len = entry.len as u64;
        self.next_offset = entry.end_offset();
        self.retained_bytes += len;
        self.batches.push_back(entry);
        match self.segments.back_mut().filter(|segment| !segment.sealed) {
            Some(active) => {
                active.end_offset = self.next_offset;
                active.bytes += len;
                active.newest_timestamp = timestamp_us;
            }
            None => self.segments.push_back(SegmentSpan {
                start_offset: entry.base_offset,
                end_offset: self.next_offset,
                bytes: len,
                newest_timestamp: timestamp_us,
                sealed: false,
            }),
        }
        let active = self.segments.back_mut().expect("just appended to");
        active.sealed = active.bytes >= retention.segment_size;
        self.apply_retention(retention, timestamp_us);
        while self.batches.len() > BATCHES_MAX {
            self.drop_oldest_batch();
        }
    }

    /// Drops the oldest sealed segments that the topic's expiry or size no longer keeps, all but
    /// the newest.
    fn apply_retention(&mut self, retention: Retention, now_us: u64) {
        // The newest segment stays even once sealed: retention never empties a partition, so a
        // consumer always finds where the log goes on.
        while let Some(oldest) =
            self.segments.front().copied().filter(|segment| segment.sealed && self.segments.len() > 1)
        {
            let expired = retention.message_expiry_us != 0
                && oldest.newest_timestamp.saturating_add(retention.message_expiry_us) <= now_us;
            let oversize = retention.max_bytes != 0 && self.retained_bytes > retention.max_bytes;
            if !expired && !oversize {
                return;
            }
            while self.batches.front().is_some_and(|entry| entry.base_offset < oldest.end_offset) {
                self.drop_oldest_batch();
            }
            self.segments_expired += 1;
        }
    }

    /// delete_segments: drops the oldest `count` sealed segments, all but the newest segment (as
    /// retention does; the segment log removes their files as the first offset passes them).
    fn delete_oldest_segments(&mut self, count: u32) {
        for _ in 0..count {
            let Some(oldest) =
                self.segments.front().copied().filter(|segment| segment.sealed && self.segments.len() > 1)
            else {
                return;
            };
            while self.batches.front().is_some_and(|entry| entry.base_offset < oldest.end_offset) {
                self.drop_oldest_batch();
            }
            self.segments_expired += 1;
        }
    }

    /// Drops the oldest batch, and its segment with it when it was the segment's last.
    fn drop_oldest_batch(&mut self) {
        let oldest = self.batches.pop_front().expect("a batch to drop");
        let len = oldest.len as u64;
        self.retained_bytes -= len;
        self.first_offset = self.batches.front().map_or(self.next_offset, |entry| entry.base_offset);
        let segment = self.segments.front_mut().expect("every batch is in a segment");
        segment.start_offset = self.first_offset;
        segment.bytes -= len;
        if segment.start_offset == segment.end_offset {
            self.segments.pop_front();
        }
    }

    /// The start of the first batch holding a message at or after `timestamp_us`, or the end.
    /// By whole batches: the directory knows each batch's newest timestamp, not every message's.
    fn offset_at_timestamp(&self, timestamp_us: u64) -> u64 {
        self.batches
            .iter()
            .find(|entry| entry.timestamp_max >= timestamp_us)
            .map_or(self.next_offset, |entry| entry.base_offset)
    }

    /// A replicated poll: chooses the messages and (with auto-commit) stores the consumer's
    /// offset past them in the same op, so a retried poll gets the same range and never skips
    /// any. The reply names the range only (`start`, `count`, no batch bytes): the replica that
    /// sends it reads the messages from its segment log, so client tables and checkpoints never
    /// hold message bytes.
    fn poll(
        &mut self,
        partition: u32,
        consumer: ConsumerKey,
        strategy: PollingStrategy,
        count: u32,
        auto_commit: bool,
    ) -> Result<PollReply, PartitionStatus> {
        let chosen = self.choose(consumer, strategy, count);
        if auto_commit && chosen.count > 0 {
            self.store_offset(consumer, chosen.start + chosen.count as u64 - 1)?;
        }
        Ok(PollReply {
            partition,
            current_offset: self.current_offset(),
            start: chosen.start,
            count: chosen.count,
            batches: Bytes::new(),
        })
    }

    /// The partition's last offset, or `u64::MAX` while it has none.
    fn current_offset(&self) -> u64 {
        self.next_offset.checked_sub(1).unwrap_or(u64::MAX)
    }

    /// Where a poll starts, how many messages it delivers and which stored batches hold them,
    /// changing nothing: at most `count` (and `POLL_BYTES_MAX` of whole batches, at least one).
    fn choose(&self, consumer: ConsumerKey, strategy: PollingStrategy, count: u32) -> Chosen {
        let count = count.min(POLL_COUNT_MAX);
        let stored = self.consumer_offsets.get(&consumer).copied();
        let start = match strategy {
            PollingStrategy::Offset(offset) => offset,
            PollingStrategy::Timestamp(timestamp) => self.offset_at_timestamp(timestamp),
            PollingStrategy::First => self.first_offset,
            PollingStrategy::Last => self.next_offset.saturating_sub(count as u64),
            PollingStrategy::Next => stored.map_or(self.first_offset, |offset| offset + 1),
        }
        .max(self.first_offset);
        let mut end = start;
        if count > 0 && start < self.next_offset {
            let first = self.batches.partition_point(|entry| entry.base_offset <= start) - 1;
            let mut taken_bytes = 0u64;
            for entry in self.batches.iter().skip(first) {
                if end >= start + count as u64 || (taken_bytes > 0 && taken_bytes + entry.len as u64 > POLL_BYTES_MAX) {
                    break;
                }
                taken_bytes += entry.len as u64;
                end = entry.end_offset();
            }
        }
        let delivered = end.saturating_sub(start).min(count as u64) as u32;
        Chosen { start, count: delivered }
    }

    /// What a poll without auto-commit returns, changing nothing: the range of the applied (so
    /// committed) log from where `strategy` says, at most `count` messages (and `POLL_BYTES_MAX`
    /// of whole batches), without the batches (the reader takes them from the segment log). A
    /// node answers such a poll from its own replica: a replica that lags returns a prefix of the
    /// log, never a message that is not committed.
    pub fn plan_read(&self, partition: u32, consumer: ConsumerKey, strategy: PollingStrategy, count: u32) -> PollReply {
        let chosen = self.choose(consumer, strategy, count);
        PollReply {
            partition,
            current_offset: self.current_offset(),
            start: chosen.start,
            count: chosen.count,
            batches: Bytes::new(),
        }
    }

    /// A replicated poll's reply cut to what the directory still holds: this replica applied the
    /// poll, so it holds the range unless retention or a purge removed some of it since (then the
    /// part left, which starts later). Its batches come from the segment log.
    pub fn held(&self, reply: &mut PollReply) {
        if reply.count == 0 {
            return;
        }
        // By offset: whose the poll was does not matter any more.
        let held = self.choose(ConsumerKey::Consumer(0), PollingStrategy::Offset(reply.start), reply.count);
        if held.start != reply.start {
            let lost = (held.start - reply.start).min(reply.count as u64) as u32;
            reply.start = held.start;
            reply.count -= lost;
        }
        reply.count = reply.count.min(held.count);
    }

    fn store_offset(&mut self, consumer: ConsumerKey, offset: u64) -> Result<(), PartitionStatus> {
        if offset >= self.next_offset {
            return Err(PartitionStatus::OffsetBeyondEnd);
        }
        if !self.consumer_offsets.contains_key(&consumer) && self.consumer_offsets.len() == CONSUMERS_MAX {
            return Err(PartitionStatus::ConsumersFull);
        }
        self.consumer_offsets.insert(consumer, offset);
        Ok(())
    }

    fn execute(&mut self, timestamp_us: u64, operation: u8, body: &Bytes) -> Vec<u8> {
        if operation == OPERATION_SEND_MESSAGES {
            // The batch is kept as a slice of the prepare's body: applying a send copies nothing.
            let Ok((partition, retention)) = decode_send_head(body) else {
                return encode_status(Some(PartitionStatus::Malformed));
            };
            return match self.send(partition, retention, body.slice(SEND_BATCH_AT..), timestamp_us) {
                Ok(reply) => encode_send_reply(&reply),
                Err(status) => encode_status(Some(status)),
            };
        }
        let Ok(request) = PartitionRequest::decode(operation, body) else {
            return encode_status(Some(PartitionStatus::Malformed));
        };
        match request {
            PartitionRequest::Send { .. } => unreachable!("a send is applied from the prepare's body, above"),
            PartitionRequest::Poll { partition, consumer, strategy, count, auto_commit } => {
                match self.poll(partition, consumer, strategy, count, auto_commit) {
                    Ok(reply) => encode_poll_reply(&reply),
                    Err(status) => encode_status(Some(status)),
                }
            }
            PartitionRequest::StoreOffset { consumer, offset, .. } => {
                encode_status(self.store_offset(consumer, offset).err())
            }
            PartitionRequest::DeleteOffset { consumer, .. } => {
                let removed = self.consumer_offsets.remove(&consumer);
                encode_status(removed.is_none().then_some(PartitionStatus::OffsetNotFound))
            }
            PartitionRequest::GetOffset { partition, consumer } => match self.consumer_offsets.get(&consumer) {
                Some(stored) => encode_offset_reply(&OffsetReply {
                    partition,
                    current_offset: self.current_offset(),
                    stored: *stored,
                }),
                None => encode_status(Some(PartitionStatus::OffsetNotFound)),
            },
            PartitionRequest::DeleteSegments { count, .. } => {
                self.delete_oldest_segments(count);
                encode_status(None)
            }
            PartitionRequest::Purge { .. } => {
                // `applied` stays: batches applied in the same step as the purge (before the
                // segment log took them) are still needed there. The WAL's elided prepares of
                // those sends take their batches back from the log at a restart until a durable
                // checkpoint covers the purge, and the log keeps them until then (`follow`'s
                // floor), as it does for what retention passed (seed 153).
                self.batches.clear();
                self.segments.clear();
                self.retained_bytes = 0;
                self.first_offset = self.next_offset;
                encode_status(None)
            }
        }
    }

    fn assert_invariants(&self) {
        assert!(self.first_offset <= self.next_offset);
        assert!(self.batches.len() <= BATCHES_MAX);
        assert!(self.consumer_offsets.len() <= CONSUMERS_MAX);
        if let (Some(first), Some(last)) = (self.batches.front(), self.batches.back()) {
            assert_eq!(first.base_offset, self.first_offset);
            assert_eq!(last.end_offset(), self.next_offset);
        } else {
            assert_eq!(self.first_offset, self.next_offset);
        }
        debug_assert!(
            self.batches.iter().zip(self.batches.iter().skip(1)).all(|(a, b)| a.end_offset() == b.base_offset),
            "the directory is contiguous"
        );
        let mut start = self.first_offset;
        for (index, segment) in self.segments.iter().enumerate() {
            assert_eq!(segment.start_offset, start, "segments are contiguous from the first offset");
            assert!(segment.start_offset < segment.end_offset, "no segment is empty");
            assert!(segment.sealed || index + 1 == self.segments.len(), "only the last segment is active");
            start = segment.end_offset;
        }
        assert_eq!(start, self.next_offset, "the segments cover every batch");
        assert_eq!(self.segments.iter().map(|segment| segment.bytes).sum::<u64>(), self.retained_bytes);
    }
}

impl StateMachine for PartitionMachine {
    const EXTERNAL_LOG: bool = true;

    fn refused_when_disk_full(request: &Header) -> bool {
        crate::disk_reserve::refused_when_low(request.operation)
    }

    fn apply(&mut self, op: u64, timestamp: u64, request: &Header, _user_id: u32, body: &Bytes) -> Vec<u8> {
        // Prepare timestamps are nanoseconds; message timestamps are microseconds.
        let reply = self.execute(timestamp / 1000, request.operation, body);
        let mut link = [0u8; 24];
        link[..8].copy_from_slice(&self.digest.to_le_bytes());
        link[8..16].copy_from_slice(&op.to_le_bytes());
        link[16..].copy_from_slice(&checksum64(&reply).to_le_bytes());
        self.digest = checksum64(&link);
        self.assert_invariants();
        reply
    }

    /// A send the client table skipped still holds the offsets its primary stamped it at: the
    /// batch is stored there, so that the log goes on as the prepares say (the segment log wrote
    /// it there as the prepare came).
    fn apply_skipped(&mut self, op: u64, timestamp: u64, request: &Header, body: &Bytes) {
        let lost = self.lost_send(request.operation, body, self.next_offset).is_some();
        let retention = match prepared_send(request.operation, body, self.next_offset, timestamp) {
            PreparedSend::Batch { retention, .. } => retention,
            _ if lost => match decode_send_head(body) {
                Ok((_, retention)) => retention,
                Err(_) => return,
            },
            _ => return,
        };
        let Ok((partition, _)) = decode_send_head(body) else { return };
        let stored = self.send(partition, retention, body.slice(SEND_BATCH_AT..), timestamp / 1000);
        debug_assert!(stored.is_ok(), "a stamped send is stored");
        let mut link = [0u8; 16];
        link[..8].copy_from_slice(&self.digest.to_le_bytes());
        link[8..].copy_from_slice(&op.to_le_bytes());
        self.digest = checksum64(&link);
        self.assert_invariants();
    }

    fn span_lost(&mut self, offset: u64, end: u64, len: u32) {
        assert!(offset < end, "a lost batch holds messages");
        self.lost.0.insert(offset, (end, len));
    }

    fn prepare_cursor(&self) -> u64 {
        self.next_offset
    }

    fn retained_from(&self) -> u64 {
        self.first_offset
    }

    /// Stamps a send's batch where the log will hold it, so that the prepare carries the
    /// stored bytes. The cursor is the offset the next message gets.
    fn prepare(&self, cursor: u64, timestamp: u64, request: &Header, body: &mut [u8]) -> Prepared {
        let unstamped = Prepared { cursor, batch_at: None };
        if request.operation != OPERATION_SEND_MESSAGES {
            return unstamped;
        }
        let Ok((partition, _)) = decode_send_head(body) else { return unstamped };
        let timestamp_us = timestamp / 1000;
        let batch = &mut body[SEND_BATCH_AT..];
        // A batch that does not stamp is left as it is (or fully stamped but for a timestamp
        // that overflows): `stamped_send` refuses it, here and in `apply`. What `stamp` accepts
        // and writes passes every check `stamped_send` makes but the timestamp room, which the
        // header alone says: the frames are not walked again to count the messages.
        let stamped = batch::stamp(batch, partition as u64, cursor, timestamp_us)
            .ok()
            .filter(|stamped| stamped.header.has_timestamp_room())
            .map(|stamped| stamped.header);
        debug_assert_eq!(stamped, stamped_send(batch, partition, cursor, timestamp_us), "stamp and its check agree");
        match stamped {
            // Stamped whole, every checksum written: `batch::validate` takes what `check_stamped`
            // takes and `stamp` wrote, so the batch vouches for itself in the prepare's checksum.
            Some(header) => Prepared { cursor: header.end_offset(), batch_at: Some(SEND_BATCH_AT as u32) },
            None => unstamped,
        }
    }

    /// A prepare's send batches, if they are stamped one after another up to the prepare's cursor
    /// (then the segment log holds exactly them from where it goes on); else none, and the WAL
    /// keeps the whole body.
    fn external_spans(prepare: &Header, body: &[u8]) -> Vec<ExternalSpan> {
        let mut spans = Vec::new();
        let mut end = None;
        for request in batched_requests(body) {
            if request.header.operation != OPERATION_SEND_MESSAGES {
                continue;
            }
            let Ok((partition, _)) = decode_send_head(request.body) else { continue };
            let batch = &request.body[SEND_BATCH_AT..];
            let Ok(header) = BatchHeader::decode(batch) else { return Vec::new() };
            let Some(stamped) = stamped_send(batch, partition, header.base_offset, prepare.timestamp / 1000) else {
                // A send `apply` refuses takes no offsets and is not in the log: it stays.
                continue;
            };
            if end.is_some_and(|end| end != stamped.base_offset) {
                return Vec::new();
            }
            end = Some(stamped.end_offset());
            let at = request.body.as_ptr() as usize - body.as_ptr() as usize + SEND_BATCH_AT;
            spans.push(ExternalSpan { at: at as u32, len: batch.len() as u32, offset: stamped.base_offset });
        }
        if end != Some(prepare.cursor) {
            return Vec::new();
        }
        spans
    }

    fn digest(&self) -> u64 {
        self.digest
    }

    fn snapshot(&self) -> Vec<u8> {
        let mut bytes = Vec::with_capacity(48 + self.batches.len() * ENTRY_SNAPSHOT_BYTES);
        for word in [self.first_offset, self.next_offset, self.digest] {
            bytes.extend_from_slice(&word.to_le_bytes());
        }
        // The directory: no message bytes (the segment log holds them), offsets implied.
        bytes.extend_from_slice(&(self.batches.len() as u32).to_le_bytes());
        for entry in &self.batches {
            bytes.extend_from_slice(&entry.message_count.to_le_bytes());
            bytes.extend_from_slice(&entry.len.to_le_bytes());
            bytes.extend_from_slice(&entry.checksum.to_le_bytes());
            bytes.extend_from_slice(&entry.timestamp_max.to_le_bytes());
        }
        // A segment's start and size follow from the batches; its end, age and seal do not.
        bytes.extend_from_slice(&(self.segments.len() as u32).to_le_bytes());
        for segment in &self.segments {
            bytes.extend_from_slice(&segment.end_offset.to_le_bytes());
            bytes.extend_from_slice(&segment.newest_timestamp.to_le_bytes());
            bytes.push(segment.sealed as u8);
        }
        bytes.extend_from_slice(&self.segments_expired.to_le_bytes());
        bytes.extend_from_slice(&(self.consumer_offsets.len() as u32).to_le_bytes());
        for (consumer, offset) in &self.consumer_offsets {
            let (kind, id) = match consumer {
                ConsumerKey::Consumer(id) => (1u8, *id),
                ConsumerKey::Group(id) => (2, *id),
            };
            bytes.push(kind);
            bytes.extend_from_slice(&id.to_le_bytes());
            bytes.extend_from_slice(&offset.to_le_bytes());
        }
        bytes
    }

    fn restore(snapshot: &[u8]) -> Option<PartitionMachine> {
        let mut cursor = Cursor { bytes: snapshot, at: 0 };
        let first_offset = cursor.u64()?;
        let next_offset = cursor.u64()?;
        let digest = cursor.u64()?;
        let batch_count = cursor.u32()? as usize;
        if batch_count > BATCHES_MAX {
            return None;
        }
        let mut machine = PartitionMachine { first_offset, next_offset, digest, ..PartitionMachine::default() };
        let mut expected = first_offset;
        for _ in 0..batch_count {
            let entry = BatchEntry {
                base_offset: expected,
                message_count: cursor.u32()?,
                len: cursor.u32()?,
                checksum: cursor.u64()?,
                timestamp_max: cursor.u64()?,
            };
            if entry.message_count == 0 || (entry.len as usize) < batch::BATCH_HEADER_SIZE {
                return None;
            }
            expected = expected.checked_add(entry.message_count as u64)?;
            machine.retained_bytes += entry.len as u64;
            machine.batches.push_back(entry);
        }
        if expected != next_offset {
            return None;
        }
        let segment_count = cursor.u32()? as usize;
        if segment_count > machine.batches.len() {
            return None;
        }
        let mut batches = machine.batches.iter().peekable();
        let mut start_offset = first_offset;
        for index in 0..segment_count {
            let end_offset = cursor.u64()?;
            let newest_timestamp = cursor.u64()?;
            let sealed = match cursor.take(1)?[0] {
                0 if index + 1 == segment_count => false,
                1 => true,
                _ => return None,
            };
            let mut bytes = 0u64;
            while let Some(entry) = batches.next_if(|entry| entry.base_offset < end_offset) {
                debug_assert!(entry.base_offset >= start_offset);
                bytes += entry.len as u64;
            }
            let at_boundary = batches.peek().map_or(next_offset, |entry| entry.base_offset) == end_offset;
            if end_offset <= start_offset || !at_boundary {
                return None;
            }
            machine.segments.push_back(SegmentSpan { start_offset, end_offset, bytes, newest_timestamp, sealed });
            start_offset = end_offset;
        }
        if start_offset != next_offset {
            return None;
        }
        machine.segments_expired = cursor.u64()?;
        let consumers = cursor.u32()? as usize;
        if consumers > CONSUMERS_MAX {
            return None;
        }
        for _ in 0..consumers {
            let kind = cursor.take(1)?[0];
            let id = cursor.u32()?;
            let offset = cursor.u64()?;
            let consumer = match kind {
                1 => ConsumerKey::Consumer(id),
                2 => ConsumerKey::Group(id),
                _ => return None,
            };
            machine.consumer_offsets.insert(consumer, offset);
        }
        (cursor.at == snapshot.len()).then_some(machine)
    }

    fn empty() -> PartitionMachine {
        PartitionMachine::default()
    }
}

/// Checked reads over a snapshot.
struct Cursor<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let slice = self.bytes.get(self.at..self.at.checked_add(n)?)?;
        self.at += n;
        Some(slice)
    }
    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.take(4)?.try_into().ok()?))
    }
    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::partition::request::{decode_poll_reply, encode_status, PartitionStatus};
    use vireo_protocol::header::Command;
    use vireo_storage::batch::BatchBuilder;

    /// Prepares a request as a primary does (from the applied state's cursor) and applies it.
    fn apply(machine: &mut PartitionMachine, op: u64, request: &PartitionRequest) -> Vec<u8> {
        apply_bytes(machine, op, request.operation(), request.encode()).1
    }

    /// The cursor `prepare` left, and the reply.
    fn apply_bytes(machine: &mut PartitionMachine, op: u64, operation: u8, mut body: Vec<u8>) -> (u64, Vec<u8>) {
        let mut header = Header::new(Command::Request, 1, 0);
        header.operation = operation;
        let timestamp = op * 1_000_000;
        let prepared = machine.prepare(machine.prepare_cursor(), timestamp, &header, &mut body);
        // A batch vouches for itself only if it stamped whole: every checksum the check needs.
        if let Some(batch_at) = prepared.batch_at {
            batch::validate(&body[batch_at as usize..]).expect("a batch that vouches for itself validates");
        }
        (prepared.cursor, machine.apply(op, timestamp, &header, 0, &body.into()))
    }

    fn send(machine: &mut PartitionMachine, op: u64, ids: std::ops::Range<u128>) {
        send_kept(machine, op, ids, Retention::default());
    }

    /// A send at op `op` (its prepare timestamp is `op` milliseconds) under `retention`.
    fn send_kept(machine: &mut PartitionMachine, op: u64, ids: std::ops::Range<u128>, retention: Retention) {
        let mut builder = BatchBuilder::new();
        for id in ids {
            builder.push(id, &id.to_le_bytes(), b"");
        }
        let reply = apply(machine, op, &PartitionRequest::Send { partition: 0, retention, batch: builder.finish(0) });
        assert_eq!(reply[..4], [0; 4], "the send is stored");
    }

    /// Appends what the machine applied to `log`, as the segment log takes it.
    fn take_log(machine: &mut PartitionMachine, log: &mut Vec<u8>) {
        while let Some((base, batch)) = machine.take_applied() {
            assert_eq!(BatchHeader::decode(&batch).unwrap().base_offset, base);
            log.extend_from_slice(&batch);
        }
    }

    fn ids(batches: &[u8], from: u64, to: u64) -> Vec<u128> {
        let mut ids = Vec::new();
        let mut rest = batches;
        while !rest.is_empty() {
            let len = BatchHeader::decode(rest).unwrap().batch_length as usize;
            let messages = batch::messages(&rest[..len]).unwrap();
            ids.extend(messages.iter().filter(|m| m.offset >= from && m.offset < to).map(|m| m.id));
            rest = &rest[len..];
        }
        ids
    }

    /// A poll with auto-commit replies with its range only; filling that reply (as the replica
    /// that answers does, for the first answer and every retry) gives the same messages however
    /// much the log grew since, and the next poll goes on after them.
    #[test]
    fn a_replicated_poll_names_its_range_and_every_fill_gives_the_same_messages() {
        let mut machine = PartitionMachine::empty();
        send(&mut machine, 1, 10..13);
        send(&mut machine, 2, 13..15);
        let mut log = Vec::new();
        let consumer = ConsumerKey::Consumer(7);
        let poll = PartitionRequest::Poll {
            partition: 0,
            consumer,
            strategy: PollingStrategy::Next,
            count: 4,
            auto_commit: true,
        };
        let reply = decode_poll_reply(&apply(&mut machine, 3, &poll)).unwrap();
        assert_eq!((reply.start, reply.count, reply.batches.len()), (0, 4, 0), "a range, no bytes");
        assert_eq!(machine.consumer_offset(consumer), Some(3));
        take_log(&mut machine, &mut log);
        let mut first = reply.clone();
        machine.held(&mut first);
        assert_eq!(ids(&log, first.start, first.start + first.count as u64), [10, 11, 12, 13]);
        send(&mut machine, 4, 15..20);
        take_log(&mut machine, &mut log);
        let mut retried = reply.clone();
        machine.held(&mut retried);
        assert_eq!(retried, first, "a retry read later names the same messages");
        assert_eq!(ids(&log, retried.start, retried.start + retried.count as u64), [10, 11, 12, 13]);
        let next = decode_poll_reply(&apply(&mut machine, 5, &poll)).unwrap();
        assert_eq!((next.start, next.count), (4, 4));
    }

    /// What a purge removed between a poll and its answer is not delivered.
    #[test]
    fn a_reply_holds_only_what_the_directory_still_holds() {
        let mut machine = PartitionMachine::empty();
        send(&mut machine, 1, 10..13);
        let poll = PartitionRequest::Poll {
            partition: 0,
            consumer: ConsumerKey::Consumer(1),
            strategy: PollingStrategy::First,
            count: 10,
            auto_commit: true,
        };
        let reply = decode_poll_reply(&apply(&mut machine, 2, &poll)).unwrap();
        apply(&mut machine, 3, &PartitionRequest::Purge { partition: 0 });
        let mut filled = reply;
        machine.held(&mut filled);
        assert_eq!(filled.count, 0);
    }

    /// A purge applied in the same step as the sends before it (a replica catching up commits
    /// them together) leaves their batches for the segment log to take: the WAL's elided
    /// prepares of those sends need them back from the log at a restart (seed 153).
    #[test]
    fn a_purge_leaves_the_batches_applied_before_it_to_the_log() {
        let mut machine = PartitionMachine::empty();
        send(&mut machine, 1, 10..13);
        send(&mut machine, 2, 13..15);
        apply(&mut machine, 3, &PartitionRequest::Purge { partition: 0 });
        assert_eq!((machine.first_offset(), machine.next_offset()), (5, 5));
        let applied: Vec<u64> = std::iter::from_fn(|| machine.take_applied()).map(|(base, _)| base).collect();
        assert_eq!(applied, [0, 3], "both batches, contiguous up to where the log goes on");
    }

    /// A batch a single node's recovery found damaged (`span_lost`) is applied from its zeroed
    /// bytes: it takes its offsets and bytes in the log, so that the batches after it stay where
    /// the log holds them; a send that is not the lost one is not taken for it.
    #[test]
    fn a_lost_batch_keeps_its_offsets_and_the_log_goes_on_after_it() {
        let mut machine = PartitionMachine::default();
        send(&mut machine, 1, 0..3);
        let mut builder = BatchBuilder::new();
        for id in 3..8u128 {
            builder.push(id, &id.to_le_bytes(), b"");
        }
        let lost_len = builder.finish(0).len();
        machine.span_lost(3, 8, lost_len as u32);
        let zeroed =
            |len: usize| PartitionRequest::Send { partition: 0, retention: Retention::default(), batch: vec![0; len] };
        // Zeros of another length are an invalid batch, as ever.
        let refused = apply(&mut machine, 2, &zeroed(lost_len - 1));
        assert_eq!(refused, encode_status(Some(PartitionStatus::InvalidBatch)));
        assert_eq!(machine.lost_send(OPERATION_SEND_MESSAGES, &zeroed(lost_len).encode(), 3), Some(8));
        let reply = apply(&mut machine, 3, &zeroed(lost_len));
        assert_eq!(reply[..4], [0; 4], "the lost batch is stored: {reply:?}");
        assert_eq!(machine.next_offset(), 8);
        assert_eq!(machine.lost_batch(3), None, "taken once");
        let lost = machine.batch_at(3).copied().expect("in the directory");
        assert_eq!((lost.message_count, lost.len as usize, lost.checksum), (5, lost_len, 0));
        assert_eq!(machine.retained_bytes(), machine.directory().map(|entry| entry.len as u64).sum::<u64>());
        let mut log = Vec::new();
        take_log(&mut machine, &mut log);
        assert_eq!(ids(&log, 0, 8), (0..3).collect::<Vec<u128>>(), "its bytes never reach the segment log");
        send(&mut machine, 4, 8..10);
        assert_eq!(machine.next_offset(), 10);
        assert_eq!(machine.batch_at(8).map(|entry| entry.message_count), Some(2));
    }

    /// The primary stamps a send where the log will hold it: the prepare carries the stored
    /// bytes, and applying it stores exactly them.
    #[test]
    fn a_prepared_send_carries_the_batch_as_stored() {
        let mut machine = PartitionMachine::empty();
        send(&mut machine, 1, 10..13);
        let batch = BatchBuilder::new().message(20, b"twenty", b"").message(21, b"", b"h").finish(0);
        let mut body = PartitionRequest::Send { partition: 0, retention: Retention::default(), batch }.encode();
        let mut header = Header::new(Command::Request, 1, 0);
        header.operation = OPERATION_SEND_MESSAGES;
        let prepared = machine.prepare(machine.prepare_cursor(), 2_000_000, &header, &mut body);
        let cursor = prepared.cursor;
        assert_eq!((machine.prepare_cursor(), cursor), (3, 5), "the cursor counts the prepared messages");
        assert_eq!(prepared.batch_at, Some(SEND_BATCH_AT as u32));
        let stamped = BatchHeader::decode(&body[SEND_BATCH_AT..]).unwrap();
        assert_eq!((stamped.base_offset, stamped.base_timestamp), (3, 2_000));
        batch::validate(&body[SEND_BATCH_AT..]).unwrap();
        machine.apply(2, 2_000_000, &header, 0, &body.clone().into());
        let applied: Vec<_> = std::iter::from_fn(|| machine.take_applied()).collect();
        assert_eq!(applied.last().unwrap().1, &body[SEND_BATCH_AT..]);
        let entry = machine.batch_at(3).unwrap();
        assert!(entry.matches(&stamped) && entry.len as usize == body.len() - SEND_BATCH_AT);
        assert_eq!(machine.next_offset(), cursor);
    }

    /// A batch that cannot be stamped, or one stamped for another place, is refused alike by
    /// `prepare` (the cursor stays) and by `apply` (nothing stored).
    #[test]
    fn a_batch_that_does_not_stamp_moves_no_cursor() {
        let mut machine = PartitionMachine::empty();
        send(&mut machine, 1, 10..12);
        let valid = BatchBuilder::new().message(1, b"x", b"").finish(0);
        let mut truncated =
            PartitionRequest::Send { partition: 0, retention: Retention::default(), batch: valid.clone() }.encode();
        truncated.pop();
        let mut header = Header::new(Command::Request, 1, 0);
        header.operation = OPERATION_SEND_MESSAGES;
        let refused = machine.prepare(machine.prepare_cursor(), 2_000_000, &header, &mut truncated.clone());
        assert_eq!(refused, Prepared { cursor: 2, batch_at: None }, "unstamped, it cannot vouch for itself");
        let (cursor, reply) = apply_bytes(&mut machine, 2, OPERATION_SEND_MESSAGES, truncated);
        assert_eq!((cursor, machine.next_offset()), (2, 2));
        assert_eq!(reply, encode_status(Some(PartitionStatus::InvalidBatch)));
    }

    /// A send stamped for another place (the primary counted a send before it that the client
    /// table then skipped) is stamped again where the log goes on, on every replica alike.
    #[test]
    fn a_send_stamped_past_a_skipped_one_is_stamped_again_where_the_log_is() {
        let mut machine = PartitionMachine::empty();
        let mut header = Header::new(Command::Request, 1, 0);
        header.operation = OPERATION_SEND_MESSAGES;
        let body = |ids: std::ops::Range<u128>| {
            let mut builder = BatchBuilder::new();
            for id in ids {
                builder.push(id, b"m", b"");
            }
            PartitionRequest::Send { partition: 0, retention: Retention::default(), batch: builder.finish(0) }.encode()
        };
        // One prepare of two sends: the primary's cursor goes 0 -> 2 -> 5.
        let (mut skipped, mut applied) = (body(0..2), body(2..5));
        let skipped_prepared = machine.prepare(machine.prepare_cursor(), 4_000_000, &header, &mut skipped);
        assert_eq!(skipped_prepared.batch_at, Some(SEND_BATCH_AT as u32), "stamped whole, it vouches for itself");
        assert_eq!(machine.prepare(skipped_prepared.cursor, 4_000_000, &header, &mut applied).cursor, 5);
        assert_eq!(BatchHeader::decode(&applied[SEND_BATCH_AT..]).unwrap().base_offset, 2);
        // The first is skipped at commit; the second is stored at 0.
        let reply = machine.apply(1, 4_000_000, &header, 0, &applied.clone().into());
        assert_eq!(reply[..4], [0; 4], "stored");
        let (base, stored) = machine.take_applied().unwrap();
        assert_eq!((base, BatchHeader::decode(&stored).unwrap().base_offset), (0, 0));
        batch::validate(&stored).unwrap();
        assert_eq!((machine.next_offset(), machine.prepare_cursor()), (3, 3));
    }

    proptest::proptest! {
        /// Whatever bytes the sends carry, the cursor `prepare` returns is where `apply` leaves
        /// the log: a primary that prepares on from its head never stamps a batch that a
        /// replica refuses for its place.
        #[test]
        fn the_prepare_cursor_is_where_apply_leaves_the_log(
            sends in proptest::collection::vec((1usize..5, proptest::option::of(0usize..200)), 1..20),
        ) {
            let mut machine = PartitionMachine::empty();
            for (op, (messages, damage)) in sends.into_iter().enumerate() {
                let mut builder = BatchBuilder::new();
                for id in 0..messages {
                    builder.push(id as u128, &[7; 9][..id], b"");
                }
                let mut body = PartitionRequest::Send { partition: 0, retention: Retention::default(), batch: builder.finish(0) }.encode();
                if let Some(at) = damage {
                    let at = at % body.len();
                    body[at] ^= 0x41;
                }
                let (cursor, _) = apply_bytes(&mut machine, op as u64 + 1, OPERATION_SEND_MESSAGES, body);
                proptest::prop_assert_eq!(cursor, machine.next_offset());
            }
        }
    }

    /// Bytes of a one-message batch as `send_kept` sends them.
    fn one_batch_len() -> u64 {
        BatchBuilder::new().message(0, &0u128.to_le_bytes(), b"").finish(0).len() as u64
    }

    /// Sends of one message at ops `ops` (prepared `op` milliseconds in) under `retention`.
    fn send_singles(machine: &mut PartitionMachine, ops: std::ops::RangeInclusive<u64>, retention: Retention) {
        for op in ops {
            send_kept(machine, op, op as u128..op as u128 + 1, retention);
        }
    }

    /// Expiry goes by whole sealed segments and by the prepare's timestamp: a segment goes once
    /// its newest batch is older than the expiry, the newest one never.
    #[test]
    fn expiry_drops_sealed_segments_by_the_sends_timestamp() {
        let mut machine = PartitionMachine::empty();
        // Two one-message batches a segment; messages live 2.5 ms.
        let retention = Retention { segment_size: 2 * one_batch_len(), message_expiry_us: 2_500, max_bytes: 0 };
        send_singles(&mut machine, 1..=4, retention);
        // At 4 ms: segment [0, 2) is newest at 2 ms, not expired yet; [2, 4) is sealed too.
        assert_eq!((machine.first_offset(), machine.segments.len()), (0, 2));
        send_kept(&mut machine, 5, 5..6, retention);
        assert_eq!(machine.first_offset(), 2, "[0, 2) expired at 4.5 ms; [2, 4) lives to 6.5 ms");
        send_kept(&mut machine, 9, 9..10, retention);
        // At 9 ms [2, 4) is past its 6.5 ms; [4, 6) was sealed now, newest at 9 ms: kept.
        assert_eq!((machine.first_offset(), machine.next_offset(), machine.segments_expired()), (4, 6, 2));
        let never = Retention { message_expiry_us: 1, ..retention };
        send_kept(&mut machine, 100, 100..101, never);
        assert_eq!(machine.first_offset(), 6, "the newest segment stays, however old its messages");
        assert_eq!(machine.next_offset(), 7);
    }

    /// delete_segments drops as many of the oldest sealed segments as asked, never the newest.
    #[test]
    fn delete_segments_drops_the_oldest_sealed_segments_and_keeps_the_newest() {
        let mut machine = PartitionMachine::empty();
        let retention = Retention { segment_size: one_batch_len(), message_expiry_us: 0, max_bytes: 0 };
        send_singles(&mut machine, 1..=5, retention);
        assert_eq!((machine.first_offset(), machine.next_offset()), (0, 5));
        apply(&mut machine, 6, &PartitionRequest::DeleteSegments { partition: 0, count: 2 });
        assert_eq!(machine.first_offset(), 2, "segments [0, 1) and [1, 2) went");
        apply(&mut machine, 7, &PartitionRequest::DeleteSegments { partition: 0, count: 0 });
        assert_eq!(machine.first_offset(), 2, "none asked, none gone");
        apply(&mut machine, 8, &PartitionRequest::DeleteSegments { partition: 0, count: u32::MAX });
        assert_eq!((machine.first_offset(), machine.next_offset()), (4, 5), "the newest segment stays");
        assert_eq!(machine.segments_expired(), 4);
        machine.assert_invariants();
    }

    /// The size limit drops the oldest sealed segments while the partition holds more; a poll
    /// from a consumer whose offset went starts at the first message still held.
    #[test]
    fn the_size_limit_drops_the_oldest_segments_and_polls_go_on_from_what_is_left() {
        let mut machine = PartitionMachine::empty();
        let one_batch = one_batch_len();
        let retention = Retention { segment_size: one_batch, message_expiry_us: 0, max_bytes: 3 * one_batch };
        let consumer = ConsumerKey::Consumer(3);
        let poll = PartitionRequest::Poll {
            partition: 0,
            consumer,
            strategy: PollingStrategy::Next,
            count: 1,
            auto_commit: true,
        };
        send_kept(&mut machine, 1, 0..1, retention);
        decode_poll_reply(&apply(&mut machine, 2, &poll)).unwrap();
        send_singles(&mut machine, 3..=8, retention);
        assert_eq!((machine.first_offset(), machine.next_offset()), (4, 7));
        assert!(machine.retained_bytes() <= retention.max_bytes);
        let reply = decode_poll_reply(&apply(&mut machine, 9, &poll)).unwrap();
        assert_eq!((reply.start, reply.count), (4, 1), "offset 1 is gone: the poll starts at the first held");
    }

    /// A checkpoint keeps the segments (ends, ages, seals): a restored state retains exactly as
    /// the original would, and a snapshot whose segments do not fit its batches is refused.
    #[test]
    fn a_snapshot_keeps_the_segments_and_refuses_ones_that_do_not_fit() {
        let mut machine = PartitionMachine::empty();
        let one_batch = one_batch_len();
        let retention = Retention { segment_size: 2 * one_batch, message_expiry_us: 3_000, max_bytes: 0 };
        send_singles(&mut machine, 1..=5, retention);
        let snapshot = machine.snapshot();
        let entries = machine.directory().count();
        let mut restored = PartitionMachine::restore(&snapshot).expect("a snapshot restores");
        assert_eq!(restored, machine);
        send_kept(&mut machine, 7, 7..8, retention);
        send_kept(&mut restored, 7, 7..8, retention);
        assert_eq!(restored, machine);
        // The segment count sits after the directory; claim one segment more than there are.
        let at = 28 + entries * ENTRY_SNAPSHOT_BYTES;
        let mut garbage = snapshot.clone();
        let count = u32::from_le_bytes(garbage[at..at + 4].try_into().unwrap());
        garbage[at..at + 4].copy_from_slice(&(count + 1).to_le_bytes());
        assert_eq!(PartitionMachine::restore(&garbage), None);
    }
}
