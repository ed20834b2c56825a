//! `PartitionMachine`: what one partition's VSR group replicates. It owns the partition's stamped
//! batches (offsets dense from `first_offset` to `next_offset`) and its consumer offsets. The
//! primary stamps every send's batch as it prepares it (`prepare`: the partition id, the next
//! offsets, the prepare's timestamp and every checksum), so a prepare carries the bytes exactly
//! as every replica stores them.
//!
//! Invariants (asserted after every apply): the batches are contiguous, their message counts sum
//! to `next_offset - first_offset`, and `retained_bytes` is their total size, at most
//! `RETAINED_BYTES_MAX` (beyond it the oldest batches go: retention by size).

use std::collections::{BTreeMap, VecDeque};

use vireo_protocol::{Header, StateMachine};
use vireo_storage::batch::{self, BatchHeader};
use vireo_storage::checksum::checksum64;
use vireo_storage::partition::PollingStrategy;

use super::request::{
    encode_offset_reply, encode_poll_reply, encode_send_reply, encode_status, ConsumerKey, OffsetReply,
    PartitionRequest, PartitionStatus, PollReply, SendReply, OPERATION_SEND_MESSAGES, SEND_BATCH_AT,
};

/// Bytes of batches a partition keeps; past it the oldest batches are dropped.
pub const RETAINED_BYTES_MAX: u64 = 64 << 20;
/// Consumer and group offsets one partition stores.
pub const CONSUMERS_MAX: usize = 1024;
/// Bytes of batches one poll returns at most (it always returns at least one whole batch).
pub const POLL_BYTES_MAX: u64 = 256 << 10;
/// Messages one poll may ask for.
pub const POLL_COUNT_MAX: u32 = 100_000;

/// A send's batch as `prepare` stamps it for `partition` at `next_offset` and `timestamp_us`,
/// and that alone: whole, valid, not empty, stamped exactly there. `prepare` counts a send's
/// messages and `apply` stores its batch by this one test, so the two can never disagree on
/// where the next batch starts (a client's bytes that fail to stamp stay unstamped and fail it).
fn stamped_send(batch: &[u8], partition: u32, next_offset: u64, timestamp_us: u64) -> Option<BatchHeader> {
    let header = batch::validate(batch).ok()?;
    let exact = batch.len() == header.batch_length as usize
        && header.message_count > 0
        && header.partition_id == partition as u64
        && header.base_offset == next_offset
        && header.base_timestamp == timestamp_us;
    exact.then_some(header)
}

/// A poll's choice: `count` messages from `start`, held by the stored batches at `batches`.
struct Chosen {
    start: u64,
    count: u32,
    batches: std::ops::Range<usize>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PartitionMachine {
    /// (base offset, stamped batch), oldest first.
    batches: VecDeque<(u64, Vec<u8>)>,
    first_offset: u64,
    next_offset: u64,
    retained_bytes: u64,
    consumer_offsets: BTreeMap<ConsumerKey, u64>,
    /// A chain over every applied request and its reply: equal digests, equal histories.
    digest: u64,
}

impl PartitionMachine {
    pub fn first_offset(&self) -> u64 {
        self.first_offset
    }

    /// The offset the next message will get.
    pub fn next_offset(&self) -> u64 {
        self.next_offset
    }

    pub fn retained_bytes(&self) -> u64 {
        self.retained_bytes
    }

    pub fn consumer_offset(&self, consumer: ConsumerKey) -> Option<u64> {
        self.consumer_offsets.get(&consumer).copied()
    }

    /// The stamped batches, oldest first.
    pub fn batches(&self) -> impl Iterator<Item = &[u8]> {
        self.batches.iter().map(|(_, bytes)| bytes.as_slice())
    }

    /// Appends a send's batch as the primary stamped it (`prepare`), when it is the batch
    /// `prepare` counted: every replica appends the same bytes at the same offsets.
    fn send(&mut self, partition: u32, bytes: Vec<u8>, timestamp_us: u64) -> Result<SendReply, PartitionStatus> {
        let header =
            stamped_send(&bytes, partition, self.next_offset, timestamp_us).ok_or(PartitionStatus::InvalidBatch)?;
        let count = header.message_count;
        let base_offset = self.next_offset;
        self.next_offset += count as u64;
        self.retained_bytes += bytes.len() as u64;
        self.batches.push_back((base_offset, bytes));
        while self.retained_bytes > RETAINED_BYTES_MAX && self.batches.len() > 1 {
            let (_, oldest) = self.batches.pop_front().expect("more than one batch");
            self.retained_bytes -= oldest.len() as u64;
            self.first_offset = self.batches.front().expect("one left").0;
        }
        Ok(SendReply { partition, base_offset, message_count: count })
    }

    /// The first offset at or after `timestamp_us`, or the end.
    fn offset_at_timestamp(&self, timestamp_us: u64) -> u64 {
        for (_, bytes) in &self.batches {
            let messages = batch::messages(bytes).expect("stored batches are valid");
            if let Some(message) = messages.iter().find(|message| message.timestamp >= timestamp_us) {
                return message.offset;
            }
        }
        self.next_offset
    }

    /// A replicated poll: chooses the messages and (with auto-commit) stores the consumer's
    /// offset past them in the same op, so a retried poll gets the same range and never skips
    /// any. The reply names the range only (`start`, `count`, no batch bytes): the replica that
    /// sends it re-reads the messages from its log (`fill`), so client tables and checkpoints never
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
            batches: Vec::new(),
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
        let mut batches = 0..0;
        let mut end = start;
        if count > 0 && start < self.next_offset {
            let first = self.batches.partition_point(|(base, _)| *base <= start) - 1;
            batches = first..first;
            let mut taken_bytes = 0u64;
            for (base, bytes) in self.batches.iter().skip(first) {
                if end >= start + count as u64 || (taken_bytes > 0 && taken_bytes + bytes.len() as u64 > POLL_BYTES_MAX)
                {
                    break;
                }
                let header = BatchHeader::decode(bytes).expect("stored batches are valid");
                debug_assert_eq!(header.base_offset, *base);
                taken_bytes += bytes.len() as u64;
                batches.end += 1;
                end = header.end_offset();
            }
        }
        let delivered = end.saturating_sub(start).min(count as u64) as u32;
        Chosen { start, count: delivered, batches }
    }

    fn copy_batches(&self, batches: std::ops::Range<usize>) -> Vec<u8> {
        let mut bytes = Vec::new();
        for (_, batch) in self.batches.range(batches) {
            bytes.extend_from_slice(batch);
        }
        bytes
    }

    /// What a poll returns, changing nothing: the messages of the applied (so committed) log
    /// from where `strategy` says, at most `count` (and `POLL_BYTES_MAX` of whole batches). A node
    /// answers a poll without auto-commit with this, from its own replica: a replica that lags
    /// returns a prefix of the log, never a message that is not committed.
    pub fn read(&self, partition: u32, consumer: ConsumerKey, strategy: PollingStrategy, count: u32) -> PollReply {
        let chosen = self.choose(consumer, strategy, count);
        let batches = self.copy_batches(chosen.batches);
        PollReply {
            partition,
            current_offset: self.current_offset(),
            start: chosen.start,
            count: chosen.count,
            batches,
        }
    }

    /// The batches of a replicated poll's reply, re-read from the log by the replica that answers
    /// it (a reply names its range only, see `poll`). This replica applied the poll, so it holds
    /// the range unless retention or a purge removed it since: then it gives the part still held.
    pub fn fill(&self, reply: &mut PollReply) {
        if reply.count == 0 || !reply.batches.is_empty() {
            return;
        }
        // By offset: whose the poll was does not matter any more.
        let held = self.choose(ConsumerKey::Consumer(0), PollingStrategy::Offset(reply.start), reply.count);
        if held.start != reply.start {
            // The range's head is gone: what is left of it starts later than the reply says.
            let lost = (held.start - reply.start).min(reply.count as u64) as u32;
            reply.start = held.start;
            reply.count -= lost;
        }
        reply.count = reply.count.min(held.count);
        if reply.count > 0 {
            reply.batches = self.copy_batches(held.batches);
        }
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

    fn execute(&mut self, timestamp_us: u64, operation: u8, body: &[u8]) -> Vec<u8> {
        let Ok(request) = PartitionRequest::decode(operation, body) else {
            return encode_status(Some(PartitionStatus::Malformed));
        };
        match request {
            PartitionRequest::Send { partition, batch } => match self.send(partition, batch, timestamp_us) {
                Ok(reply) => encode_send_reply(&reply),
                Err(status) => encode_status(Some(status)),
            },
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
            PartitionRequest::Purge { .. } => {
                self.batches.clear();
                self.retained_bytes = 0;
                self.first_offset = self.next_offset;
                encode_status(None)
            }
        }
    }

    fn assert_invariants(&self) {
        assert!(self.first_offset <= self.next_offset);
        assert!(self.retained_bytes <= RETAINED_BYTES_MAX || self.batches.len() == 1);
        assert!(self.consumer_offsets.len() <= CONSUMERS_MAX);
        if let (Some((first, _)), Some((last, bytes))) = (self.batches.front(), self.batches.back()) {
            assert_eq!(*first, self.first_offset);
            let header = BatchHeader::decode(bytes).expect("stored batches are valid");
            assert_eq!(header.base_offset, *last);
            assert_eq!(header.end_offset(), self.next_offset);
        } else {
            assert_eq!(self.first_offset, self.next_offset);
        }
    }
}

impl StateMachine for PartitionMachine {
    fn apply(&mut self, op: u64, timestamp: u64, request: &Header, _user_id: u32, body: &[u8]) -> Vec<u8> {
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

    fn prepare_cursor(&self) -> u64 {
        self.next_offset
    }

    /// Stamps a send's batch where the log will hold it, so that the prepare carries the
    /// stored bytes. The cursor is the offset the next message gets.
    fn prepare(&self, cursor: u64, timestamp: u64, request: &Header, body: &mut [u8]) -> u64 {
        if request.operation != OPERATION_SEND_MESSAGES || body.len() < SEND_BATCH_AT {
            return cursor;
        }
        let partition = u32::from_le_bytes(body[..SEND_BATCH_AT].try_into().expect("four bytes"));
        let timestamp_us = timestamp / 1000;
        let batch = &mut body[SEND_BATCH_AT..];
        // A batch that does not stamp is left as it is (or half stamped): `stamped_send` refuses
        // it, here and in `apply`.
        let _ = batch::stamp(batch, partition as u64, cursor, timestamp_us);
        match stamped_send(batch, partition, cursor, timestamp_us) {
            Some(header) => cursor + header.message_count as u64,
            None => cursor,
        }
    }

    fn digest(&self) -> u64 {
        self.digest
    }

    fn snapshot(&self) -> Vec<u8> {
        let mut bytes = Vec::with_capacity(48 + self.retained_bytes as usize);
        for word in [self.first_offset, self.next_offset, self.digest] {
            bytes.extend_from_slice(&word.to_le_bytes());
        }
        bytes.extend_from_slice(&(self.batches.len() as u32).to_le_bytes());
        for (_, batch) in &self.batches {
            bytes.extend_from_slice(batch);
        }
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
        let batch_count = cursor.u32()?;
        let mut machine = PartitionMachine { first_offset, next_offset, digest, ..PartitionMachine::default() };
        let mut expected = first_offset;
        for _ in 0..batch_count {
            let header = BatchHeader::decode(snapshot.get(cursor.at..)?).ok()?;
            let batch = cursor.take(usize::try_from(header.batch_length).ok()?)?.to_vec();
            batch::validate(&batch).ok()?;
            if header.base_offset != expected {
                return None;
            }
            expected = header.end_offset();
            machine.retained_bytes += batch.len() as u64;
            machine.batches.push_back((header.base_offset, batch));
        }
        if expected != next_offset {
            return None;
        }
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
        let cursor = machine.prepare(machine.prepare_cursor(), timestamp, &header, &mut body);
        (cursor, machine.apply(op, timestamp, &header, 0, &body))
    }

    fn send(machine: &mut PartitionMachine, op: u64, ids: std::ops::Range<u128>) {
        let mut builder = BatchBuilder::new();
        for id in ids {
            builder.push(id, &id.to_le_bytes(), b"");
        }
        apply(machine, op, &PartitionRequest::Send { partition: 0, batch: builder.finish(0) });
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
        let mut first = reply.clone();
        machine.fill(&mut first);
        assert_eq!(ids(&first.batches, first.start, first.start + first.count as u64), [10, 11, 12, 13]);
        send(&mut machine, 4, 15..20);
        let mut retried = reply.clone();
        machine.fill(&mut retried);
        assert_eq!(retried, first, "a retry re-read later gets the same messages");
        let next = decode_poll_reply(&apply(&mut machine, 5, &poll)).unwrap();
        assert_eq!((next.start, next.count), (4, 4));
    }

    /// What a purge removed between a poll and its answer is not delivered.
    #[test]
    fn a_fill_gives_only_what_the_log_still_holds() {
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
        machine.fill(&mut filled);
        assert_eq!((filled.count, filled.batches.len()), (0, 0));
    }

    /// The primary stamps a send where the log will hold it: the prepare carries the stored
    /// bytes, and applying it stores exactly them.
    #[test]
    fn a_prepared_send_carries_the_batch_as_stored() {
        let mut machine = PartitionMachine::empty();
        send(&mut machine, 1, 10..13);
        let batch = BatchBuilder::new().message(20, b"twenty", b"").message(21, b"", b"h").finish(0);
        let mut body = PartitionRequest::Send { partition: 0, batch }.encode();
        let mut header = Header::new(Command::Request, 1, 0);
        header.operation = OPERATION_SEND_MESSAGES;
        let cursor = machine.prepare(machine.prepare_cursor(), 2_000_000, &header, &mut body);
        assert_eq!((machine.prepare_cursor(), cursor), (3, 5), "the cursor counts the prepared messages");
        let stamped = BatchHeader::decode(&body[SEND_BATCH_AT..]).unwrap();
        assert_eq!((stamped.base_offset, stamped.base_timestamp), (3, 2_000));
        batch::validate(&body[SEND_BATCH_AT..]).unwrap();
        machine.apply(2, 2_000_000, &header, 0, &body);
        assert_eq!(machine.batches().last().unwrap(), &body[SEND_BATCH_AT..]);
        assert_eq!(machine.next_offset(), cursor);
    }

    /// A batch that cannot be stamped, or one stamped for another place, is refused alike by
    /// `prepare` (the cursor stays) and by `apply` (nothing stored).
    #[test]
    fn a_batch_that_does_not_stamp_moves_no_cursor() {
        let mut machine = PartitionMachine::empty();
        send(&mut machine, 1, 10..12);
        let valid = BatchBuilder::new().message(1, b"x", b"").finish(0);
        let mut truncated = PartitionRequest::Send { partition: 0, batch: valid.clone() }.encode();
        truncated.pop();
        let (cursor, reply) = apply_bytes(&mut machine, 2, OPERATION_SEND_MESSAGES, truncated);
        assert_eq!((cursor, machine.next_offset()), (2, 2));
        assert_eq!(reply, encode_status(Some(PartitionStatus::InvalidBatch)));
        // Stamped by a client for offset 0, and sent raw to `apply` (no primary stamped it).
        let mut elsewhere = valid;
        batch::stamp(&mut elsewhere, 0, 0, 3_000).unwrap();
        let mut header = Header::new(Command::Request, 1, 0);
        header.operation = OPERATION_SEND_MESSAGES;
        let body = PartitionRequest::Send { partition: 0, batch: elsewhere }.encode();
        let reply = machine.apply(3, 3_000_000, &header, 0, &body);
        assert_eq!(reply, encode_status(Some(PartitionStatus::InvalidBatch)));
        assert_eq!(machine.next_offset(), 2);
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
                let mut body = PartitionRequest::Send { partition: 0, batch: builder.finish(0) }.encode();
                if let Some(at) = damage {
                    let at = at % body.len();
                    body[at] ^= 0x41;
                }
                let (cursor, _) = apply_bytes(&mut machine, op as u64 + 1, OPERATION_SEND_MESSAGES, body);
                proptest::prop_assert_eq!(cursor, machine.next_offset());
            }
        }
    }
}
