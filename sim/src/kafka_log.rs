//! The checker for a Kafka-like partitioned log, for the anomalies Jepsen's Kafka workload names.
//! The simulation feeds it client observations as the run goes (sends and their outcomes, polls,
//! consumer resets, committed group assignments), then a final read of every partition from
//! offset 0, then calls `finish`. Every method that can see an anomaly at once returns it, so the
//! run stops at the first violation; `finish` runs the checks that need the whole history.
//!
//! Model: a partition is a log of unique values (the workload's message ids) at offsets dense
//! from 0, never trimmed. Because the log is dense, an observation of offset `o` proves that every
//! offset below `o` exists: a reader that jumps over an offset skipped something real. A value
//! is *committed* once an ack placed it or a poll returned it (consumers only see committed data).
//!
//! The rules, exactly:
//! - `InconsistentOffsets`: two observations (acks, polls, the final read) put different values
//!   at one offset of one partition. Checked at once.
//! - `Duplicate`: one value observed at two places (two offsets, or two partitions), in any
//!   mix of acks, polls and the final read. A value acknowledged at two different places is a
//!   `Duplicate` too: it is the same fact (the value sits at two places), whoever reported it.
//!   Checked at once; the offset check runs first, so a value moved onto an offset already
//!   known to hold another value is `InconsistentOffsets`.
//! - `NonmonotonicPoll`: a reader's run (per consumer and partition, since its last reset or
//!   assignment) expects its next offset: the offset after the last one it was returned, or the
//!   assigned start offset, or (with no position yet, after a reset) the offset the poll asked
//!   from. A returned offset below the expected one went backwards. Checked at once, per message.
//! - `PollSkip`: a returned offset above the expected one skipped the offsets in between, which
//!   exist since the log is dense (so this needs no wait for the final read). Covers a gap inside
//!   one poll and a gap between consecutive polls of a run. Checked at once.
//! - The final read is a reader too: it must return offsets 0, 1, 2, ... (`PollSkip` and
//!   `NonmonotonicPoll` with `Reader::FinalRead`), and its length is the log's length.
//! - With retention (`KafkaLogChecker::with_retention`) a prefix of each partition may go, and
//!   what went only ever grows. The final read then starts where the log does (its *start*), and a
//!   skip at the head of a poll (the server starting a run later than expected) is allowed if
//!   everything it skipped is below the final start: it was retained away, not lost. Such skips
//!   are checked at `finish`, `PollSkip` otherwise. A skip inside a poll is never allowed.
//! - An auto-commit poll a consumer gave up on (`commit_abandoned`) may land later and store the
//!   consumer's offset past messages it never returned (auto-commit delivers at most once): a
//!   head skip of at most that poll's count is allowed, once per such poll.
//!   Values below the final start are exempt from `LostWrite` and `Unseen`.
//! - `NonmonotonicSend`: a producer's values acknowledged to one partition must sit at offsets
//!   increasing in the order the producer sent them (its latest send of each value). Checked at once.
//! - `LostWrite`: a committed value (acknowledged, or returned by a poll) at offset `o` of a
//!   partition whose final read ends before `o`. (A final read holding another value at `o` is
//!   `InconsistentOffsets`, holding the value elsewhere is `Duplicate`, both caught earlier.)
//!   Checked at `finish`.
//! - `Unseen`: for each partition, with H the highest offset any poll returned, an acknowledged
//!   value at an offset <= H that no poll returned. Checked at `finish`.
//! - `GroupOverlap`: in one committed assignment two members (or one member twice) own a
//!   partition. `GroupUncovered`: in an assignment with at least one member, some partition in
//!   `0..partitions_count` is owned by nobody, or a member owns a partition id >=
//!   `partitions_count`. Checked at once.
//! - `StaleRead` (real-time order, what makes reads linearizable): a poll by offset invoked
//!   after a send's acknowledgement (at an earlier instant of `advance`'s clock), asking from at
//!   or below the send's offset and for enough messages to reach it, returns it. Each poll names
//!   its range and when it was invoked (`polled_at`); the acknowledged offsets in that range it
//!   did not return are stale unless the reply was cut by its size (`PollAsk::size_cut`), or,
//!   with retention, they lie below the first offset returned and the final read starts past
//!   them (checked at `finish`). Polls that auto-commit name no range: they are replicated,
//!   so consensus orders them.
//! - Two more, beyond Jepsen's list, that the observations make free to check: `AbortedRead`, a
//!   read (poll or final) of a value whose every send definitely failed; `UnknownValue`, a read
//!   of a value no producer ever sent (a corrupted or invented message).
//!
//! Bounds: the checker keeps O(values + sends + consumer runs) state: one record per value, one
//! entry per observed offset, one per acknowledged send, one position per (consumer, partition).
//! Polls themselves are not kept. The simulation bounds the history (runs are short), so this is
//! bounded by what it is given. It is pure: no I/O, no clock, no randomness; the anomaly reported
//! first depends only on the order of observations, because `finish` walks `BTreeMap`s.

use std::collections::{BTreeMap, HashMap};
use std::fmt;

/// One partition of one topic of one stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PartitionKey {
    pub stream: u32,
    pub topic: u32,
    pub partition: u32,
}

impl fmt::Display for PartitionKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "stream {} topic {} partition {}", self.stream, self.topic, self.partition)
    }
}

/// A consumer group: (stream, topic, group).
pub type GroupKey = (u32, u32, u32);

/// Who reported an observation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// The server's acknowledgement of a send by this producer.
    Ack { producer: u64 },
    /// A poll by this consumer.
    Poll { consumer: u64 },
    /// The final read of the partition.
    FinalRead,
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Ack { producer } => write!(f, "the ack to producer {producer}"),
            Source::Poll { consumer } => write!(f, "a poll by consumer {consumer}"),
            Source::FinalRead => write!(f, "the final read"),
        }
    }
}

/// Who read in order: a consumer's run, or the final read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reader {
    Consumer(u64),
    FinalRead,
}

impl fmt::Display for Reader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reader::Consumer(consumer) => write!(f, "consumer {consumer}"),
            Reader::FinalRead => write!(f, "the final read"),
        }
    }
}

/// A violation of the log's guarantees. Values print in hex.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Anomaly {
    #[error(
        "lost write: value {value:#x} at offset {offset} of {partition} (known from {known_from}) is missing from the final read, which ends before offset {final_len}"
    )]
    LostWrite { partition: PartitionKey, offset: u64, value: u128, known_from: Source, final_len: u64 },
    #[error(
        "lost write: value {value:#x} of producer {producer}, acknowledged to {partition} without an offset, is {}",
        match found { Some((partition, offset)) => format!("at offset {offset} of {partition} instead"), None => "in no poll and not in the final read".to_string() }
    )]
    LostUnplacedWrite { partition: PartitionKey, value: u128, producer: u64, found: Option<(PartitionKey, u64)> },
    #[error(
        "duplicate: value {value:#x} is at offset {first_offset} of {first_partition} (per {first_source}) and at offset {second_offset} of {second_partition} (per {second_source})"
    )]
    Duplicate {
        value: u128,
        first_partition: PartitionKey,
        first_offset: u64,
        first_source: Source,
        second_partition: PartitionKey,
        second_offset: u64,
        second_source: Source,
    },
    #[error(
        "inconsistent offsets: offset {offset} of {partition} holds value {first_value:#x} per {first_source} but value {second_value:#x} per {second_source}"
    )]
    InconsistentOffsets {
        partition: PartitionKey,
        offset: u64,
        first_value: u128,
        first_source: Source,
        second_value: u128,
        second_source: Source,
    },
    #[error(
        "unseen: value {value:#x} was acknowledged at offset {offset} of {partition} but no poll returned it, though polls reached offset {highest_polled}"
    )]
    Unseen { partition: PartitionKey, offset: u64, value: u128, highest_polled: u64 },
    #[error("poll skip: {reader} reading {partition} expected offset {expected} next but was returned offset {offset}, skipping {} offsets", offset - expected)]
    PollSkip { reader: Reader, partition: PartitionKey, expected: u64, offset: u64 },
    #[error(
        "nonmonotonic poll: {reader} reading {partition} expected offset {expected} or later but was returned offset {offset}"
    )]
    NonmonotonicPoll { reader: Reader, partition: PartitionKey, expected: u64, offset: u64 },
    #[error(
        "nonmonotonic send: producer {producer} sent value {earlier_value:#x} before value {later_value:#x}, but {partition} acknowledged them at offsets {earlier_offset} and {later_offset}"
    )]
    NonmonotonicSend {
        producer: u64,
        partition: PartitionKey,
        earlier_value: u128,
        earlier_offset: u64,
        later_value: u128,
        later_offset: u64,
    },
    #[error(
        "group overlap: in the assignment committed at {at} of group {group:?}, members {first_member:#x} and {second_member:#x} both own partition {partition}"
    )]
    GroupOverlap { at: u64, group: GroupKey, partition: u32, first_member: u128, second_member: u128 },
    #[error(
        "group uncovered: in the assignment committed at {at} of group {group:?} with {partitions_count} partitions, partition {partition} {}",
        match owner { Some(owner) => format!("is owned by member {owner:#x} but does not exist"), None => "is owned by no member".to_string() }
    )]
    GroupUncovered { at: u64, group: GroupKey, partitions_count: u32, partition: u32, owner: Option<u128> },
    #[error(
        "stale read: {reader} polled {partition} from offset {from} for {count} messages at instant {invoked_at}, after value {value:#x} was acknowledged at offset {offset} (instant {acked_at}), and was returned {}",
        match returned_to { Some(last) => format!("offsets up to {last} only"), None => "nothing".to_string() }
    )]
    StaleRead {
        reader: Reader,
        partition: PartitionKey,
        from: u64,
        count: u64,
        invoked_at: u64,
        offset: u64,
        value: u128,
        acked_at: u64,
        returned_to: Option<u64>,
    },
    #[error(
        "aborted read: value {value:#x} at offset {offset} of {partition} (per {reported_by}) was never written: every send of it definitely failed"
    )]
    AbortedRead { partition: PartitionKey, offset: u64, value: u128, reported_by: Source },
    #[error(
        "unknown value: offset {offset} of {partition} holds value {value:#x} (per {reported_by}) that no producer sent"
    )]
    UnknownValue { partition: PartitionKey, offset: u64, value: u128, reported_by: Source },
}

/// What the checker saw, for the run's report (and for tests to prove a history was exercised).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CheckSummary {
    pub sends_invoked: u64,
    pub sends_acked: u64,
    pub sends_failed: u64,
    pub sends_indeterminate: u64,
    /// Values acknowledged (counting each value once).
    pub values_acked: u64,
    pub polls_checked: u64,
    /// Messages returned by all polls, repeats included.
    pub messages_polled: u64,
    /// Distinct values some poll returned.
    pub values_polled: u64,
    pub partitions_read: u64,
    /// Messages in all final reads.
    pub values_final: u64,
    pub assignments_checked: u64,
}

/// The latest send attempt's outcome for a value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SendOutcome {
    InFlight,
    Acked,
    Failed,
    Indeterminate,
}

struct ValueRecord {
    producer: u64,
    /// The producer's send number of the latest send carrying this value: a retry counts from
    /// the retry, since that is the send the producer ordered after its previous ones.
    send: u64,
    outcome: SendOutcome,
    /// Some send of the value was acknowledged or timed out: only when none was is a failure
    /// proof that the value was never written.
    maybe_written: bool,
    acked: bool,
    /// Where the value was first observed.
    place: Option<(PartitionKey, u64, Source)>,
}

struct OffsetRecord {
    value: u128,
    /// The first observation of this offset, named in anomalies.
    source: Source,
    acked: bool,
    /// The instant (`advance`) of the first acknowledgement that placed the value here.
    acked_at: Option<u64>,
    polled: bool,
}

/// What a poll by offset asked, for the real-time rule (`StaleRead`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PollAsk {
    pub from: u64,
    pub count: u64,
    /// The instant (`advance`'s clock) the poll was sent: acknowledgements observed at an
    /// earlier instant happened before it.
    pub invoked_at: u64,
    /// The reply may hold fewer messages than asked because of its size, not its staleness.
    pub size_cut: bool,
}

#[derive(Default)]
struct PartitionRecord {
    offsets: BTreeMap<u64, OffsetRecord>,
    highest_polled: Option<u64>,
    /// The final read's length, once read.
    final_len: Option<u64>,
    /// Where the final read started (0 without retention).
    final_start: u64,
}

/// An acknowledged send's extent in one partition: the lowest and highest offsets (with values)
/// of its values there.
#[derive(Clone, Copy)]
struct SendExtent {
    first: (u64, u128),
    last: (u64, u128),
}

struct ProducerRecord {
    sends: u64,
}

pub struct KafkaLogChecker {
    values: HashMap<u128, ValueRecord>,
    partitions: BTreeMap<PartitionKey, PartitionRecord>,
    producers: HashMap<u64, ProducerRecord>,
    /// (producer, partition) -> send number -> extent: the order the producer sent in, against
    /// the offsets the partition gave.
    send_order: HashMap<(u64, PartitionKey), BTreeMap<u64, SendExtent>>,
    /// (consumer, partition) -> the next offset the run expects, if it has a position.
    positions: HashMap<(u64, PartitionKey), Option<u64>>,
    /// Whether retention may remove a prefix of each partition.
    retention: bool,
    /// (consumer, partition) -> offsets that auto-commit polls the consumer gave up on may still
    /// move its stored offset past (`commit_abandoned`): a skip of at most that many is theirs.
    late_commits: HashMap<(u64, PartitionKey), u64>,
    /// Skips at the head of a poll, allowed only if the final read starts at or past them:
    /// (reader, partition, expected, returned).
    head_skips: Vec<(Reader, PartitionKey, u64, u64)>,
    /// Acks without offsets, placed by `place_unplaced_acks`: (producer, partition, values).
    unplaced: Vec<(u64, PartitionKey, Vec<u128>)>,
    /// The instant observations are made at (`advance`): real time, for `StaleRead`.
    now: u64,
    /// Acknowledged offsets a poll did not return below its first returned offset, allowed only
    /// if retention removed them (the final read starts past them): checked at `finish`.
    stale_below_start: Vec<Anomaly>,
    summary: CheckSummary,
}

impl Default for KafkaLogChecker {
    fn default() -> Self {
        Self::new()
    }
}

impl KafkaLogChecker {
    pub fn new() -> KafkaLogChecker {
        KafkaLogChecker {
            values: HashMap::new(),
            partitions: BTreeMap::new(),
            producers: HashMap::new(),
            send_order: HashMap::new(),
            positions: HashMap::new(),
            retention: false,
            late_commits: HashMap::new(),
            head_skips: Vec::new(),
            unplaced: Vec::new(),
            now: 0,
            stale_below_start: Vec::new(),
            summary: CheckSummary::default(),
        }
    }

    /// A checker for partitions whose retention may remove a prefix of each.
    pub fn with_retention() -> KafkaLogChecker {
        KafkaLogChecker { retention: true, ..KafkaLogChecker::new() }
    }

    /// Observations from now on are made at instant `now` (never earlier than before): what
    /// orders an acknowledgement before a poll's invocation.
    pub fn advance(&mut self, now: u64) {
        assert!(now >= self.now, "time goes forward");
        self.now = now;
    }

    /// The counts so far.
    pub fn summary(&self) -> &CheckSummary {
        &self.summary
    }

    /// A producer sends a batch, possibly while earlier ones have no outcome yet (pipelined:
    /// `NonmonotonicSend` holds the sends in the order invoked all the same). A value may be
    /// sent again only by the same producer (a retry).
    pub fn send_invoked(&mut self, producer: u64, values: &[u128]) -> Result<(), Anomaly> {
        let record = self.producers.entry(producer).or_insert(ProducerRecord { sends: 0 });
        record.sends += 1;
        let send = record.sends;
        self.summary.sends_invoked += 1;
        for &value in values {
            let record = self.values.entry(value).or_insert(ValueRecord {
                producer,
                send,
                outcome: SendOutcome::InFlight,
                maybe_written: false,
                acked: false,
                place: None,
            });
            assert_eq!(
                record.producer, producer,
                "value {value:#x} sent by two producers: the workload's ids must be unique"
            );
            record.send = send;
            if record.outcome != SendOutcome::Acked {
                record.outcome = SendOutcome::InFlight;
            }
        }
        Ok(())
    }

    /// The server acknowledged a batch: `values[i]` is at `base_offset + i` of `partition`.
    pub fn send_acked(
        &mut self,
        producer: u64,
        partition: PartitionKey,
        base_offset: u64,
        values: &[u128],
    ) -> Result<(), Anomaly> {
        self.send_outcome(producer, values, SendOutcome::Acked);
        self.summary.sends_acked += 1;
        for (index, &value) in values.iter().enumerate() {
            let offset = base_offset + index as u64;
            self.observe(partition, offset, value, Source::Ack { producer })?;
            let now = self.now;
            let entry = self.partitions.get_mut(&partition).expect("observed").offsets.get_mut(&offset);
            let entry = entry.expect("observed");
            entry.acked = true;
            entry.acked_at = Some(entry.acked_at.map_or(now, |at| at.min(now)));
            let record = self.values.get_mut(&value).expect("checked by send_outcome");
            if !record.acked {
                record.acked = true;
                self.summary.values_acked += 1;
            }
            let send = record.send;
            self.check_send_order(producer, partition, send, offset, value)?;
        }
        Ok(())
    }

    /// The server acknowledged a batch to `partition` without saying where (Iggy's send_messages
    /// answers an empty body). The values are placed where the polls and the final reads found
    /// them (`place_unplaced_acks`, after the final reads): missing or elsewhere is a lost write,
    /// and their offsets must keep the producer's order like any ack's.
    pub fn send_acked_unplaced(
        &mut self,
        producer: u64,
        partition: PartitionKey,
        values: &[u128],
    ) -> Result<(), Anomaly> {
        self.send_outcome(producer, values, SendOutcome::Acked);
        self.summary.sends_acked += 1;
        for value in values {
            let record = self.values.get_mut(value).expect("checked by send_outcome");
            if !record.acked {
                record.acked = true;
                self.summary.values_acked += 1;
            }
        }
        self.unplaced.push((producer, partition, values.to_vec()));
        Ok(())
    }

    /// Places the acks `send_acked_unplaced` took at the offsets the observations found their
    /// values at. Call once every partition had its final read, before `finish`.
    pub fn place_unplaced_acks(&mut self) -> Result<(), Anomaly> {
        for (producer, partition, values) in std::mem::take(&mut self.unplaced) {
            for value in values {
                let record = &self.values[&value];
                let send = record.send;
                match record.place {
                    Some((at, offset, _)) if at == partition => {
                        let entry = self.partitions.get_mut(&partition).expect("observed").offsets.get_mut(&offset);
                        entry.expect("observed").acked = true;
                        self.check_send_order(producer, partition, send, offset, value)?;
                    }
                    place => {
                        let found = place.map(|(partition, offset, _)| (partition, offset));
                        return Err(Anomaly::LostUnplacedWrite { partition, value, producer, found });
                    }
                }
            }
        }
        Ok(())
    }

    /// The batch was definitely not written (rejected before commit).
    pub fn send_failed(&mut self, producer: u64, values: &[u128]) -> Result<(), Anomaly> {
        self.send_outcome(producer, values, SendOutcome::Failed);
        self.summary.sends_failed += 1;
        for value in values {
            let record = &self.values[value];
            if let (false, Some((partition, offset, source))) = (record.maybe_written, record.place) {
                return Err(Anomaly::AbortedRead { partition, offset, value: *value, reported_by: source });
            }
        }
        Ok(())
    }

    /// The batch timed out: it may or may not have been written.
    pub fn send_indeterminate(&mut self, producer: u64, values: &[u128]) -> Result<(), Anomaly> {
        self.send_outcome(producer, values, SendOutcome::Indeterminate);
        self.summary.sends_indeterminate += 1;
        Ok(())
    }

    fn send_outcome(&mut self, producer: u64, values: &[u128], outcome: SendOutcome) {
        assert!(self.producers.contains_key(&producer), "an outcome for a producer that never sent");
        for value in values {
            let record = self.values.get_mut(value).expect("an outcome for a value never sent");
            assert_eq!(record.producer, producer, "value {value:#x} belongs to producer {}", record.producer);
            // An ack stays an ack: a later retry's failure does not unwrite it.
            if record.outcome != SendOutcome::Acked {
                record.outcome = outcome;
            }
            record.maybe_written |= matches!(outcome, SendOutcome::Acked | SendOutcome::Indeterminate);
        }
    }

    /// The producer's earlier sends to this partition must sit below `offset`, its later ones above.
    fn check_send_order(
        &mut self,
        producer: u64,
        partition: PartitionKey,
        send: u64,
        offset: u64,
        value: u128,
    ) -> Result<(), Anomaly> {
        let order = self.send_order.entry((producer, partition)).or_default();
        let anomaly = |earlier: (u64, u128), later: (u64, u128)| Anomaly::NonmonotonicSend {
            producer,
            partition,
            earlier_value: earlier.1,
            earlier_offset: earlier.0,
            later_value: later.1,
            later_offset: later.0,
        };
        if let Some((_, before)) = order.range(..send).next_back() {
            if before.last.0 >= offset {
                return Err(anomaly(before.last, (offset, value)));
            }
        }
        if let Some((_, after)) = order.range(send + 1..).next() {
            if after.first.0 <= offset {
                return Err(anomaly((offset, value), after.first));
            }
        }
        let extent = order.entry(send).or_insert(SendExtent { first: (offset, value), last: (offset, value) });
        if offset < extent.first.0 {
            extent.first = (offset, value);
        }
        if offset > extent.last.0 {
            extent.last = (offset, value);
        }
        Ok(())
    }

    /// What one poll returned, in order. `from_offset` is the offset the consumer asked from.
    pub fn polled(
        &mut self,
        consumer: u64,
        partition: PartitionKey,
        from_offset: u64,
        messages: &[(u64, u128)],
    ) -> Result<(), Anomaly> {
        self.summary.polls_checked += 1;
        self.summary.messages_polled += messages.len() as u64;
        let position = self.positions.entry((consumer, partition)).or_insert(None);
        // With no position (a fresh or reset run) the consumer chose where to start: the server
        // must start there.
        let mut expected = position.unwrap_or(from_offset);
        let reader = Reader::Consumer(consumer);
        if let (Some(&(first, _)), Some(allowance)) =
            (messages.first(), self.late_commits.get_mut(&(consumer, partition)))
        {
            if first > expected && first - expected <= *allowance {
                // A poll given up on landed after all and stored its offset past these.
                *allowance -= first - expected;
                expected = first;
            }
        }
        if let Some(&(first, _)) = messages.first().filter(|(first, _)| self.retention && *first > expected) {
            self.head_skips.push((reader, partition, expected, first));
            expected = first;
        }
        for &(offset, _) in messages {
            check_next(reader, partition, expected, offset)?;
            expected = offset + 1;
        }
        if !messages.is_empty() {
            *position = Some(expected);
        }
        for &(offset, value) in messages {
            self.observe(partition, offset, value, Source::Poll { consumer })?;
            let record = self.partitions.get_mut(&partition).expect("observed");
            let entry = record.offsets.get_mut(&offset).expect("observed");
            if !entry.polled {
                entry.polled = true;
                self.summary.values_polled += 1;
            }
            record.highest_polled = Some(record.highest_polled.map_or(offset, |high| high.max(offset)));
        }
        Ok(())
    }

    /// What one poll by offset returned (`polled`), held to real time as well: every value
    /// acknowledged before `ask.invoked_at` in the range it asked is returned (`StaleRead`).
    pub fn polled_at(
        &mut self,
        consumer: u64,
        partition: PartitionKey,
        ask: PollAsk,
        messages: &[(u64, u128)],
    ) -> Result<(), Anomaly> {
        self.polled(consumer, partition, ask.from, messages)?;
        let returned_to = messages.last().map(|(offset, _)| *offset);
        let first_returned = messages.first().map(|(offset, _)| *offset);
        let Some(record) = self.partitions.get(&partition) else { return Ok(()) };
        let end = ask.from.saturating_add(ask.count);
        let acked_before = |entry: &OffsetRecord| entry.acked_at.is_some_and(|at| at < ask.invoked_at);
        // Offsets missed at the head of the range (before the first returned, or all of it when
        // nothing was), and past the last returned when the reply was not cut by its size.
        let head_end = first_returned.unwrap_or(end).clamp(ask.from, end);
        let head = record.offsets.range(ask.from..head_end).rfind(|(_, entry)| acked_before(entry));
        let tail = match returned_to {
            Some(last) if !ask.size_cut && last + 1 < end => {
                record.offsets.range(last + 1..end).find(|(_, entry)| acked_before(entry))
            }
            _ => None,
        };
        let stale_read = |(&offset, entry): (&u64, &OffsetRecord)| Anomaly::StaleRead {
            reader: Reader::Consumer(consumer),
            partition,
            from: ask.from,
            count: ask.count,
            invoked_at: ask.invoked_at,
            offset,
            value: entry.value,
            acked_at: entry.acked_at.expect("acknowledged"),
            returned_to,
        };
        if let Some(missed) = tail {
            return Err(stale_read(missed));
        }
        let Some(missed) = head else { return Ok(()) };
        let anomaly = stale_read(missed);
        // Retention may have removed the head of the range (the highest offset missed there is
        // kept): whether it did is for the final read's start to say.
        if self.retention {
            self.stale_below_start.push(anomaly);
            return Ok(());
        }
        Err(anomaly)
    }

    /// The consumer gave up on an auto-commit poll of at most `count` messages: it may still land
    /// (a request once sent can commit later), storing the consumer's offset up to `count` past
    /// wherever it then is. A later skip of at most `count` offsets, once, is that poll's.
    pub fn commit_abandoned(&mut self, consumer: u64, partition: PartitionKey, count: u64) {
        *self.late_commits.entry((consumer, partition)).or_insert(0) += count;
    }

    /// The consumer restarts reading `partition` from wherever its next poll asks.
    pub fn consumer_reset(&mut self, consumer: u64, partition: PartitionKey) {
        self.positions.insert((consumer, partition), None);
    }

    /// The consumer restarts reading `partition` at `start_offset` (a rebalance or restart
    /// fetched its group's stored offset).
    pub fn consumer_assigned(&mut self, consumer: u64, partition: PartitionKey, start_offset: u64) {
        self.positions.insert((consumer, partition), Some(start_offset));
    }

    /// The whole partition, read from its start at the end of the run (`start`: the first offset
    /// the log holds, 0 unless retention removed a prefix). Once per partition.
    pub fn final_read(&mut self, partition: PartitionKey, start: u64, messages: &[(u64, u128)]) -> Result<(), Anomaly> {
        let start = if self.retention { start } else { 0 };
        let record = self.partitions.entry(partition).or_default();
        assert!(record.final_len.is_none(), "{partition} read twice at the end");
        record.final_len = Some(start + messages.len() as u64);
        record.final_start = start;
        self.summary.partitions_read += 1;
        self.summary.values_final += messages.len() as u64;
        let mut expected = start;
        for &(offset, value) in messages {
            check_next(Reader::FinalRead, partition, expected, offset)?;
            expected = offset + 1;
            self.observe(partition, offset, value, Source::FinalRead)?;
        }
        Ok(())
    }

    /// A committed assignment of a group's partitions to its members.
    pub fn group_assignment(
        &mut self,
        at: u64,
        group: GroupKey,
        partitions_count: u32,
        assignment: &BTreeMap<u128, Vec<u32>>,
    ) -> Result<(), Anomaly> {
        self.summary.assignments_checked += 1;
        let mut owners: BTreeMap<u32, u128> = BTreeMap::new();
        for (&member, partitions) in assignment {
            for &partition in partitions {
                if partition >= partitions_count {
                    return Err(Anomaly::GroupUncovered {
                        at,
                        group,
                        partitions_count,
                        partition,
                        owner: Some(member),
                    });
                }
                if let Some(&first_member) = owners.get(&partition) {
                    return Err(Anomaly::GroupOverlap { at, group, partition, first_member, second_member: member });
                }
                owners.insert(partition, member);
            }
        }
        if assignment.is_empty() {
            return Ok(());
        }
        // The owned ids are below partitions_count and distinct: the first id whose rank differs
        // from it is the first unowned one; with none, the ids past the last owned one are.
        let unowned = owners.keys().zip(0u32..).find(|(id, rank)| *id != rank).map(|(_, rank)| rank);
        let unowned = unowned.or((owners.len() < partitions_count as usize).then_some(owners.len() as u32));
        match unowned {
            Some(partition) => Err(Anomaly::GroupUncovered { at, group, partitions_count, partition, owner: None }),
            None => Ok(()),
        }
    }

    /// The end-of-history checks: lost writes, then unseen values. Every partition observed must
    /// have had its final read.
    pub fn finish(&self) -> Result<CheckSummary, Anomaly> {
        assert!(self.unplaced.is_empty(), "place_unplaced_acks comes before finish");
        for (partition, record) in &self.partitions {
            let final_len =
                record.final_len.unwrap_or_else(|| panic!("{partition} was observed but never read at the end"));
            if let Some((&offset, entry)) = record.offsets.range(final_len..).next() {
                return Err(Anomaly::LostWrite {
                    partition: *partition,
                    offset,
                    value: entry.value,
                    known_from: entry.source,
                    final_len,
                });
            }
        }
        for anomaly in &self.stale_below_start {
            let Anomaly::StaleRead { partition, offset, .. } = anomaly else { unreachable!("only stale reads") };
            if *offset >= self.partitions.get(partition).map_or(0, |record| record.final_start) {
                return Err(anomaly.clone());
            }
        }
        for &(reader, partition, expected, offset) in &self.head_skips {
            let start = self.partitions.get(&partition).map_or(0, |record| record.final_start);
            if offset > start {
                return Err(Anomaly::PollSkip { reader, partition, expected, offset });
            }
        }
        for (partition, record) in &self.partitions {
            // Polled only below what the final read still holds: nothing left to have seen.
            let Some(highest_polled) = record.highest_polled.filter(|high| *high >= record.final_start) else {
                continue;
            };
            if let Some((&offset, entry)) = record
                .offsets
                .range(record.final_start..=highest_polled)
                .find(|(_, entry)| entry.acked && !entry.polled)
            {
                return Err(Anomaly::Unseen { partition: *partition, offset, value: entry.value, highest_polled });
            }
        }
        Ok(self.summary.clone())
    }

    /// One observation of `value` at `offset` of `partition`: it must be a value some producer
    /// sent and did not definitely fail, agree with what the offset is known to hold, and be
    /// the only place the value is known at.
    fn observe(&mut self, partition: PartitionKey, offset: u64, value: u128, source: Source) -> Result<(), Anomaly> {
        let Some(record) = self.values.get_mut(&value) else {
            return Err(Anomaly::UnknownValue { partition, offset, value, reported_by: source });
        };
        if record.outcome == SendOutcome::Failed && !record.maybe_written {
            return Err(Anomaly::AbortedRead { partition, offset, value, reported_by: source });
        }
        let offsets = &mut self.partitions.entry(partition).or_default().offsets;
        if let Some(known) = offsets.get(&offset) {
            if known.value != value {
                return Err(Anomaly::InconsistentOffsets {
                    partition,
                    offset,
                    first_value: known.value,
                    first_source: known.source,
                    second_value: value,
                    second_source: source,
                });
            }
        }
        match record.place {
            Some((first_partition, first_offset, first_source)) => {
                if (first_partition, first_offset) != (partition, offset) {
                    return Err(Anomaly::Duplicate {
                        value,
                        first_partition,
                        first_offset,
                        first_source,
                        second_partition: partition,
                        second_offset: offset,
                        second_source: source,
                    });
                }
            }
            None => record.place = Some((partition, offset, source)),
        }
        offsets.entry(offset).or_insert(OffsetRecord { value, source, acked: false, acked_at: None, polled: false });
        Ok(())
    }
}

/// A reader expecting `expected` next was returned `offset`.
fn check_next(reader: Reader, partition: PartitionKey, expected: u64, offset: u64) -> Result<(), Anomaly> {
    if offset < expected {
        return Err(Anomaly::NonmonotonicPoll { reader, partition, expected, offset });
    }
    if offset > expected {
        return Err(Anomaly::PollSkip { reader, partition, expected, offset });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const P0: PartitionKey = PartitionKey { stream: 1, topic: 1, partition: 0 };
    const P1: PartitionKey = PartitionKey { stream: 1, topic: 1, partition: 1 };
    const Q0: PartitionKey = PartitionKey { stream: 2, topic: 7, partition: 0 };

    /// Producer sends `values` and the server acknowledges them at `base`.
    fn produce(checker: &mut KafkaLogChecker, producer: u64, partition: PartitionKey, base: u64, values: &[u128]) {
        checker.send_invoked(producer, values).unwrap();
        checker.send_acked(producer, partition, base, values).unwrap();
    }

    fn at(base: u64, values: &[u128]) -> Vec<(u64, u128)> {
        values.iter().enumerate().map(|(index, value)| (base + index as u64, *value)).collect()
    }

    /// Producer sends `values` and the server acknowledges them without an offset.
    fn produce_unplaced(checker: &mut KafkaLogChecker, producer: u64, partition: PartitionKey, values: &[u128]) {
        checker.send_invoked(producer, values).unwrap();
        checker.send_acked_unplaced(producer, partition, values).unwrap();
    }

    #[test]
    fn acks_without_offsets_are_placed_where_the_reads_found_them() {
        let mut checker = KafkaLogChecker::new();
        produce_unplaced(&mut checker, 1, P0, &[10, 11]);
        produce_unplaced(&mut checker, 2, P0, &[20]);
        produce_unplaced(&mut checker, 1, P0, &[12]);
        checker.polled(100, P0, 0, &at(0, &[10, 20])).unwrap();
        checker.final_read(P0, 0, &at(0, &[10, 20, 11, 12])).unwrap();
        checker.place_unplaced_acks().unwrap();
        assert_eq!(checker.finish().unwrap().values_acked, 4);
    }

    #[test]
    fn an_ack_without_an_offset_missing_from_every_read_is_a_lost_write() {
        let mut checker = KafkaLogChecker::new();
        produce_unplaced(&mut checker, 1, P0, &[10, 11]);
        checker.final_read(P0, 0, &at(0, &[10])).unwrap();
        let anomaly = checker.place_unplaced_acks().unwrap_err();
        assert_eq!(anomaly, Anomaly::LostUnplacedWrite { partition: P0, value: 11, producer: 1, found: None });
        // Found in another partition is lost from the one it was acknowledged to.
        let mut checker = KafkaLogChecker::new();
        produce_unplaced(&mut checker, 1, P0, &[10]);
        checker.final_read(P0, 0, &[]).unwrap();
        checker.final_read(P1, 0, &at(0, &[10])).unwrap();
        let anomaly = checker.place_unplaced_acks().unwrap_err();
        assert_eq!(anomaly, Anomaly::LostUnplacedWrite { partition: P0, value: 10, producer: 1, found: Some((P1, 0)) });
    }

    #[test]
    fn acks_without_offsets_found_out_of_the_producers_order_are_a_nonmonotonic_send() {
        let mut checker = KafkaLogChecker::new();
        produce_unplaced(&mut checker, 1, P0, &[10]);
        produce_unplaced(&mut checker, 1, P0, &[11]);
        checker.final_read(P0, 0, &at(0, &[11, 10])).unwrap();
        assert!(matches!(checker.place_unplaced_acks(), Err(Anomaly::NonmonotonicSend { .. })));
    }

    /// Three producers, three partitions over two streams, consumers with resets and
    /// assignments, a timed-out batch that was written and one that was not, a rejected batch,
    /// a retry, a committed assignment: nothing to report.
    #[test]
    fn a_clean_history_passes() {
        let mut checker = KafkaLogChecker::new();
        produce(&mut checker, 1, P0, 0, &[10, 11]);
        produce(&mut checker, 2, P0, 2, &[20]);
        produce(&mut checker, 3, Q0, 0, &[30, 31, 32]);
        checker.polled(100, P0, 0, &at(0, &[10, 11])).unwrap();
        // A timed-out batch that did land, and one that did not.
        checker.send_invoked(1, &[12, 13]).unwrap();
        checker.send_indeterminate(1, &[12, 13]).unwrap();
        checker.send_invoked(2, &[21]).unwrap();
        checker.send_indeterminate(2, &[21]).unwrap();
        // A rejected batch, then its retry with the same ids, acknowledged.
        checker.send_invoked(3, &[33]).unwrap();
        checker.send_failed(3, &[33]).unwrap();
        checker.send_invoked(3, &[33]).unwrap();
        checker.send_acked(3, P1, 0, &[33]).unwrap();
        produce(&mut checker, 1, P0, 5, &[14]);
        checker.polled(100, P0, 2, &at(2, &[20, 12])).unwrap();
        checker.polled(100, P0, 4, &[]).unwrap();
        checker.polled(100, P0, 4, &at(4, &[13, 14])).unwrap();
        // Consumer 101 starts late, is reset and rereads from the start, then is assigned the
        // partition at its group's stored offset.
        checker.polled(101, P0, 3, &at(3, &[12])).unwrap();
        checker.consumer_reset(101, P0);
        checker.polled(101, P0, 0, &at(0, &[10, 11, 20])).unwrap();
        checker.consumer_assigned(101, P0, 1);
        checker.polled(101, P0, 1, &at(1, &[11])).unwrap();
        checker.polled(101, Q0, 0, &at(0, &[30, 31, 32])).unwrap();
        checker.polled(102, P1, 0, &at(0, &[33])).unwrap();
        let assignment = BTreeMap::from([(7, vec![0, 2]), (8, vec![1]), (9, vec![])]);
        checker.group_assignment(40, (1, 1, 1), 3, &assignment).unwrap();
        checker.group_assignment(41, (1, 1, 2), 3, &BTreeMap::new()).unwrap();
        checker.final_read(P0, 0, &at(0, &[10, 11, 20, 12, 13, 14])).unwrap();
        checker.final_read(P1, 0, &at(0, &[33])).unwrap();
        checker.final_read(Q0, 0, &at(0, &[30, 31, 32])).unwrap();
        let summary = checker.finish().unwrap();
        assert_eq!(summary.sends_invoked, 8);
        assert_eq!(summary.sends_acked, 5);
        assert_eq!(summary.values_acked, 8);
        assert_eq!(summary.values_polled, 10);
        assert_eq!(summary.values_final, 10);
        assert_eq!(summary.assignments_checked, 2);
    }

    #[test]
    fn an_acknowledged_value_missing_from_the_final_read_is_a_lost_write() {
        let mut checker = KafkaLogChecker::new();
        produce(&mut checker, 1, P0, 0, &[10, 11]);
        produce(&mut checker, 2, P0, 2, &[20]);
        checker.final_read(P0, 0, &at(0, &[10, 11])).unwrap();
        let anomaly = checker.finish().unwrap_err();
        assert_eq!(
            anomaly,
            Anomaly::LostWrite {
                partition: P0,
                offset: 2,
                value: 20,
                known_from: Source::Ack { producer: 2 },
                final_len: 2
            }
        );
        assert_eq!(
            anomaly.to_string(),
            "lost write: value 0x14 at offset 2 of stream 1 topic 1 partition 0 (known from the ack to producer 2) is missing from the final read, which ends before offset 2"
        );
    }

    #[test]
    fn a_polled_value_missing_from_the_final_read_is_a_lost_write() {
        let mut checker = KafkaLogChecker::new();
        checker.send_invoked(1, &[10]).unwrap();
        checker.send_indeterminate(1, &[10]).unwrap();
        checker.polled(100, P0, 0, &at(0, &[10])).unwrap();
        checker.final_read(P0, 0, &[]).unwrap();
        assert!(matches!(checker.finish(), Err(Anomaly::LostWrite { offset: 0, value: 10, .. })));
    }

    #[test]
    fn a_value_at_two_offsets_is_a_duplicate() {
        let mut checker = KafkaLogChecker::new();
        produce(&mut checker, 1, P0, 0, &[10, 11]);
        let anomaly = checker.polled(100, P0, 0, &at(0, &[10, 11, 10])).unwrap_err();
        assert!(
            matches!(anomaly, Anomaly::Duplicate { value: 10, first_offset: 0, second_offset: 2, .. }),
            "{anomaly}"
        );
    }

    #[test]
    fn a_value_in_two_partitions_is_a_duplicate() {
        let mut checker = KafkaLogChecker::new();
        produce(&mut checker, 1, P0, 0, &[10]);
        checker.final_read(P0, 0, &at(0, &[10])).unwrap();
        let anomaly = checker.final_read(P1, 0, &at(0, &[10])).unwrap_err();
        assert!(matches!(anomaly, Anomaly::Duplicate { first_partition: P0, second_partition: P1, .. }), "{anomaly}");
    }

    #[test]
    fn a_value_acknowledged_at_two_places_is_a_duplicate() {
        let mut checker = KafkaLogChecker::new();
        produce(&mut checker, 1, P0, 0, &[10]);
        // The producer retries the same id and the server writes it again.
        checker.send_invoked(1, &[10]).unwrap();
        let anomaly = checker.send_acked(1, P0, 1, &[10]).unwrap_err();
        assert!(
            matches!(anomaly, Anomaly::Duplicate { value: 10, first_offset: 0, second_offset: 1, .. }),
            "{anomaly}"
        );
    }

    #[test]
    fn a_retry_acknowledged_at_the_same_place_is_fine() {
        let mut checker = KafkaLogChecker::new();
        checker.send_invoked(1, &[10]).unwrap();
        checker.send_indeterminate(1, &[10]).unwrap();
        checker.send_invoked(1, &[10]).unwrap();
        checker.send_acked(1, P0, 0, &[10]).unwrap();
        checker.final_read(P0, 0, &at(0, &[10])).unwrap();
        checker.finish().unwrap();
    }

    #[test]
    fn two_values_at_one_offset_are_inconsistent_offsets() {
        let mut checker = KafkaLogChecker::new();
        produce(&mut checker, 1, P0, 0, &[10]);
        produce(&mut checker, 2, P0, 1, &[20]);
        // A poll sees the ack's offsets with other values.
        let anomaly = checker.polled(100, P0, 0, &at(0, &[20])).unwrap_err();
        assert_eq!(
            anomaly,
            Anomaly::InconsistentOffsets {
                partition: P0,
                offset: 0,
                first_value: 10,
                first_source: Source::Ack { producer: 1 },
                second_value: 20,
                second_source: Source::Poll { consumer: 100 },
            }
        );
    }

    #[test]
    fn two_acks_at_one_offset_are_inconsistent_offsets() {
        let mut checker = KafkaLogChecker::new();
        produce(&mut checker, 1, P0, 0, &[10]);
        checker.send_invoked(2, &[20]).unwrap();
        let anomaly = checker.send_acked(2, P0, 0, &[20]).unwrap_err();
        assert!(matches!(anomaly, Anomaly::InconsistentOffsets { offset: 0, first_value: 10, second_value: 20, .. }));
    }

    #[test]
    fn an_acknowledged_value_below_what_polls_reached_but_never_polled_is_unseen() {
        let mut checker = KafkaLogChecker::new();
        produce(&mut checker, 1, P0, 0, &[10, 11, 12]);
        produce(&mut checker, 1, P1, 0, &[13]);
        checker.polled(100, P0, 0, &at(0, &[10])).unwrap();
        checker.consumer_assigned(100, P0, 2);
        checker.polled(100, P0, 2, &at(2, &[12])).unwrap();
        checker.final_read(P0, 0, &at(0, &[10, 11, 12])).unwrap();
        // P1 was never polled: its value is not unseen, only not yet read.
        checker.final_read(P1, 0, &at(0, &[13])).unwrap();
        let anomaly = checker.finish().unwrap_err();
        assert_eq!(anomaly, Anomaly::Unseen { partition: P0, offset: 1, value: 11, highest_polled: 2 });
    }

    #[test]
    fn a_gap_inside_one_poll_is_a_poll_skip() {
        let mut checker = KafkaLogChecker::new();
        produce(&mut checker, 1, P0, 0, &[10, 11, 12]);
        let anomaly = checker.polled(100, P0, 0, &[(0, 10), (2, 12)]).unwrap_err();
        assert_eq!(anomaly, Anomaly::PollSkip { reader: Reader::Consumer(100), partition: P0, expected: 1, offset: 2 });
    }

    #[test]
    fn a_gap_between_two_polls_is_a_poll_skip() {
        let mut checker = KafkaLogChecker::new();
        produce(&mut checker, 1, P0, 0, &[10, 11, 12]);
        checker.polled(100, P0, 0, &at(0, &[10])).unwrap();
        let anomaly = checker.polled(100, P0, 1, &at(2, &[12])).unwrap_err();
        assert!(matches!(anomaly, Anomaly::PollSkip { expected: 1, offset: 2, .. }), "{anomaly}");
    }

    #[test]
    fn a_poll_that_starts_past_the_assigned_offset_is_a_poll_skip() {
        let mut checker = KafkaLogChecker::new();
        produce(&mut checker, 1, P0, 0, &[10, 11, 12]);
        checker.consumer_assigned(100, P0, 1);
        let anomaly = checker.polled(100, P0, 1, &at(2, &[12])).unwrap_err();
        assert!(matches!(anomaly, Anomaly::PollSkip { expected: 1, offset: 2, .. }), "{anomaly}");
    }

    #[test]
    fn a_final_read_with_a_hole_is_a_poll_skip() {
        let mut checker = KafkaLogChecker::new();
        produce(&mut checker, 1, P0, 0, &[10, 11]);
        let anomaly = checker.final_read(P0, 0, &[(1, 11)]).unwrap_err();
        assert_eq!(anomaly, Anomaly::PollSkip { reader: Reader::FinalRead, partition: P0, expected: 0, offset: 1 });
    }

    #[test]
    fn a_poll_going_backwards_is_a_nonmonotonic_poll() {
        let mut checker = KafkaLogChecker::new();
        produce(&mut checker, 1, P0, 0, &[10, 11, 12]);
        checker.polled(100, P0, 0, &at(0, &[10, 11])).unwrap();
        let anomaly = checker.polled(100, P0, 2, &at(1, &[11, 12])).unwrap_err();
        assert_eq!(
            anomaly,
            Anomaly::NonmonotonicPoll { reader: Reader::Consumer(100), partition: P0, expected: 2, offset: 1 }
        );
        // The same reread after a reset is legitimate.
        checker.consumer_reset(100, P0);
        checker.polled(100, P0, 1, &at(1, &[11, 12])).unwrap();
    }

    #[test]
    fn offsets_out_of_order_inside_one_poll_are_a_nonmonotonic_poll() {
        let mut checker = KafkaLogChecker::new();
        produce(&mut checker, 1, P0, 0, &[10, 11]);
        let anomaly = checker.polled(100, P0, 0, &[(0, 10), (1, 11), (1, 11)]).unwrap_err();
        assert!(matches!(anomaly, Anomaly::NonmonotonicPoll { expected: 2, offset: 1, .. }), "{anomaly}");
    }

    #[test]
    fn acks_out_of_send_order_are_a_nonmonotonic_send() {
        let mut checker = KafkaLogChecker::new();
        produce(&mut checker, 1, P0, 5, &[10, 11]);
        // Another producer's batch in between is fine, and so is the same producer elsewhere.
        produce(&mut checker, 2, P0, 7, &[20]);
        produce(&mut checker, 1, P1, 0, &[12]);
        checker.send_invoked(1, &[13]).unwrap();
        let anomaly = checker.send_acked(1, P0, 3, &[13]).unwrap_err();
        assert_eq!(
            anomaly,
            Anomaly::NonmonotonicSend {
                producer: 1,
                partition: P0,
                earlier_value: 11,
                earlier_offset: 6,
                later_value: 13,
                later_offset: 3,
            }
        );
    }

    #[test]
    fn a_late_ack_of_an_earlier_send_is_held_to_its_send_order() {
        let mut checker = KafkaLogChecker::new();
        checker.send_invoked(1, &[10]).unwrap();
        checker.send_indeterminate(1, &[10]).unwrap();
        produce(&mut checker, 1, P0, 0, &[11]);
        // The first send's ack arrives after the second's, at a later offset.
        let anomaly = checker.send_acked(1, P0, 1, &[10]).unwrap_err();
        assert!(matches!(anomaly, Anomaly::NonmonotonicSend { earlier_value: 10, later_value: 11, .. }), "{anomaly}");
    }

    #[test]
    fn two_members_owning_one_partition_are_a_group_overlap() {
        let mut checker = KafkaLogChecker::new();
        let assignment = BTreeMap::from([(7, vec![0, 1]), (8, vec![1, 2])]);
        let anomaly = checker.group_assignment(12, (1, 1, 3), 3, &assignment).unwrap_err();
        assert_eq!(
            anomaly,
            Anomaly::GroupOverlap { at: 12, group: (1, 1, 3), partition: 1, first_member: 7, second_member: 8 }
        );
        let twice = BTreeMap::from([(7, vec![0, 0, 1])]);
        assert!(matches!(checker.group_assignment(13, (1, 1, 3), 2, &twice), Err(Anomaly::GroupOverlap { .. })));
    }

    #[test]
    fn a_partition_owned_by_nobody_is_group_uncovered() {
        let mut checker = KafkaLogChecker::new();
        let assignment = BTreeMap::from([(7, vec![0]), (8, vec![2])]);
        let anomaly = checker.group_assignment(12, (1, 1, 3), 4, &assignment).unwrap_err();
        assert_eq!(
            anomaly,
            Anomaly::GroupUncovered { at: 12, group: (1, 1, 3), partitions_count: 4, partition: 1, owner: None }
        );
        let tail = BTreeMap::from([(7, vec![0, 1])]);
        let anomaly = checker.group_assignment(13, (1, 1, 3), 3, &tail).unwrap_err();
        assert!(matches!(anomaly, Anomaly::GroupUncovered { partition: 2, owner: None, .. }), "{anomaly}");
        let no_partitions = BTreeMap::from([(7, vec![])]);
        let anomaly = checker.group_assignment(14, (1, 1, 3), 1, &no_partitions).unwrap_err();
        assert!(matches!(anomaly, Anomaly::GroupUncovered { partition: 0, .. }), "{anomaly}");
    }

    #[test]
    fn a_member_owning_a_partition_that_does_not_exist_is_group_uncovered() {
        let mut checker = KafkaLogChecker::new();
        let assignment = BTreeMap::from([(7, vec![0, 1]), (8, vec![2])]);
        let anomaly = checker.group_assignment(12, (1, 1, 3), 2, &assignment).unwrap_err();
        assert_eq!(
            anomaly,
            Anomaly::GroupUncovered { at: 12, group: (1, 1, 3), partitions_count: 2, partition: 2, owner: Some(8) }
        );
        assert_eq!(
            anomaly.to_string(),
            "group uncovered: in the assignment committed at 12 of group (1, 1, 3) with 2 partitions, partition 2 is owned by member 0x8 but does not exist"
        );
    }

    #[test]
    fn reading_a_value_whose_send_failed_is_an_aborted_read() {
        let mut checker = KafkaLogChecker::new();
        checker.send_invoked(1, &[10]).unwrap();
        checker.send_failed(1, &[10]).unwrap();
        let anomaly = checker.polled(100, P0, 0, &at(0, &[10])).unwrap_err();
        assert!(matches!(anomaly, Anomaly::AbortedRead { value: 10, reported_by: Source::Poll { consumer: 100 }, .. }));
        // Read while in flight, then declared failed: caught when the failure arrives.
        let mut checker = KafkaLogChecker::new();
        checker.send_invoked(1, &[10]).unwrap();
        checker.polled(100, P0, 0, &at(0, &[10])).unwrap();
        assert!(matches!(checker.send_failed(1, &[10]), Err(Anomaly::AbortedRead { value: 10, .. })));
    }

    #[test]
    fn reading_a_value_no_producer_sent_is_an_unknown_value() {
        let mut checker = KafkaLogChecker::new();
        produce(&mut checker, 1, P0, 0, &[10]);
        let anomaly = checker.final_read(P0, 0, &[(0, 10), (1, 99)]).unwrap_err();
        assert_eq!(
            anomaly,
            Anomaly::UnknownValue { partition: P0, offset: 1, value: 99, reported_by: Source::FinalRead }
        );
    }

    fn ask(from: u64, count: u64, invoked_at: u64) -> PollAsk {
        PollAsk { from, count, invoked_at, size_cut: false }
    }

    /// The real-time rule: a poll invoked after an acknowledgement returns the acknowledged
    /// value when it asked for its offset; one invoked before it (or at the same instant, where
    /// the order is unknown) may miss it.
    #[test]
    fn a_poll_after_an_ack_that_misses_it_is_a_stale_read() {
        let mut checker = KafkaLogChecker::new();
        checker.advance(5);
        produce(&mut checker, 1, P0, 0, &[10, 11]);
        checker.advance(6);
        produce(&mut checker, 1, P0, 2, &[12]);
        // Invoked at 5: the ack of 12 (at 6) came after it; 10 and 11 are returned.
        checker.polled_at(100, P0, ask(0, 10, 5), &[]).unwrap();
        checker.polled_at(101, P0, ask(0, 10, 6), &at(0, &[10, 11])).unwrap();
        // Invoked at 7: all three were acknowledged before, and it stops at 11.
        let anomaly = checker.polled_at(102, P0, ask(0, 10, 7), &at(0, &[10, 11])).unwrap_err();
        assert_eq!(
            anomaly,
            Anomaly::StaleRead {
                reader: Reader::Consumer(102),
                partition: P0,
                from: 0,
                count: 10,
                invoked_at: 7,
                offset: 2,
                value: 12,
                acked_at: 6,
                returned_to: Some(1),
            }
        );
        // An empty answer from a node that has not caught up is the bug the rule is for.
        let anomaly = checker.polled_at(103, P0, ask(2, 1, 7), &[]).unwrap_err();
        assert!(matches!(anomaly, Anomaly::StaleRead { offset: 2, returned_to: None, .. }));
        // Asked too few to reach it, or cut by its size: not stale.
        checker.polled_at(104, P0, ask(0, 2, 7), &at(0, &[10, 11])).unwrap();
        let cut = PollAsk { size_cut: true, ..ask(0, 10, 7) };
        checker.polled_at(105, P0, cut, &at(0, &[10])).unwrap();
        checker.polled_at(106, P0, ask(0, 10, 9), &at(0, &[10, 11, 12])).unwrap();
        checker.final_read(P0, 0, &at(0, &[10, 11, 12])).unwrap();
        checker.finish().unwrap();
    }

    /// With retention, acknowledged offsets at the head of a poll's range may have been retained
    /// away: stale only if the final read still holds them.
    #[test]
    fn retention_excuses_a_stale_head_only_below_the_final_start() {
        for (final_start, stale) in [(2, false), (1, true)] {
            let mut checker = KafkaLogChecker::with_retention();
            produce(&mut checker, 1, P0, 0, &[10, 11, 12]);
            checker.advance(1);
            checker.polled_at(100, P0, ask(0, 2, 1), &[]).unwrap();
            let held: Vec<u128> = [10, 11, 12][final_start as usize..].to_vec();
            checker.final_read(P0, final_start, &at(final_start, &held)).unwrap();
            assert_eq!(checker.finish().is_err(), stale, "final read from {final_start}");
        }
    }

    /// With retention, a consumer that finds its next offsets retained away goes on from the
    /// first one held, and the final read starts there: nothing to report.
    #[test]
    fn a_skip_over_what_retention_removed_passes() {
        let mut checker = KafkaLogChecker::with_retention();
        produce(&mut checker, 1, P0, 0, &[10, 11, 12, 13, 14]);
        checker.polled(100, P0, 0, &at(0, &[10])).unwrap();
        // Offsets 1 and 2 went before the next poll.
        checker.polled(100, P0, 1, &at(3, &[13])).unwrap();
        checker.final_read(P0, 3, &at(3, &[13, 14])).unwrap();
        checker.polled(100, P0, 4, &at(4, &[14])).unwrap();
        checker.finish().unwrap();
    }

    /// Retention removes a prefix only: a head skip over offsets the final read still holds
    /// skipped something real, and so does a gap inside one poll.
    #[test]
    fn retention_excuses_no_skip_over_what_the_log_still_holds() {
        let mut checker = KafkaLogChecker::with_retention();
        produce(&mut checker, 1, P0, 0, &[10, 11, 12, 13, 14]);
        checker.polled(100, P0, 0, &at(0, &[10])).unwrap();
        checker.polled(100, P0, 1, &at(3, &[13])).unwrap();
        checker.final_read(P0, 2, &at(2, &[12, 13, 14])).unwrap();
        let anomaly = checker.finish().unwrap_err();
        assert_eq!(anomaly, Anomaly::PollSkip { reader: Reader::Consumer(100), partition: P0, expected: 1, offset: 3 });

        let mut checker = KafkaLogChecker::with_retention();
        produce(&mut checker, 1, P0, 0, &[10, 11, 12]);
        let anomaly = checker.polled(100, P0, 0, &[(0, 10), (2, 12)]).unwrap_err();
        assert_eq!(anomaly, Anomaly::PollSkip { reader: Reader::Consumer(100), partition: P0, expected: 1, offset: 2 });

        // Without retention the head skip is caught at once, and a final read must start at 0.
        let mut checker = KafkaLogChecker::new();
        produce(&mut checker, 1, P0, 0, &[10, 11, 12]);
        checker.polled(100, P0, 0, &at(0, &[10])).unwrap();
        assert!(checker.polled(100, P0, 1, &at(2, &[12])).is_err());
        let mut checker = KafkaLogChecker::new();
        produce(&mut checker, 1, P0, 0, &[10, 11]);
        let anomaly = checker.final_read(P0, 1, &at(1, &[11])).unwrap_err();
        assert_eq!(anomaly, Anomaly::PollSkip { reader: Reader::FinalRead, partition: P0, expected: 0, offset: 1 });
    }

    /// A partition polled only early, then trimmed past everything polled, has nothing unseen.
    #[test]
    fn retention_past_every_poll_leaves_nothing_unseen() {
        let mut checker = KafkaLogChecker::with_retention();
        produce(&mut checker, 1, P0, 0, &[10, 11, 12, 13]);
        checker.polled(100, P0, 0, &at(0, &[10])).unwrap();
        checker.final_read(P0, 3, &at(3, &[13])).unwrap();
        checker.finish().unwrap();
    }

    /// An acknowledged value past the final read's end is lost, retention or not; below its
    /// start it was retained away.
    #[test]
    fn retention_excuses_only_the_prefix() {
        let mut checker = KafkaLogChecker::with_retention();
        produce(&mut checker, 1, P0, 0, &[10, 11, 12]);
        checker.final_read(P0, 1, &at(1, &[11])).unwrap();
        let anomaly = checker.finish().unwrap_err();
        assert!(matches!(anomaly, Anomaly::LostWrite { offset: 2, value: 12, .. }), "{anomaly}");
        let mut checker = KafkaLogChecker::with_retention();
        produce(&mut checker, 1, P0, 0, &[10, 11, 12]);
        checker.polled(100, P0, 2, &at(2, &[12])).unwrap();
        checker.final_read(P0, 2, &at(2, &[12])).unwrap();
        checker.finish().unwrap();
    }

    /// A consumer that gave up on an auto-commit poll may skip at most that poll's count, once:
    /// the poll landed late and stored its offset past what it chose.
    #[test]
    fn an_abandoned_auto_commit_poll_excuses_one_skip_of_its_count() {
        let mut checker = KafkaLogChecker::new();
        produce(&mut checker, 1, P0, 0, &(10..30).collect::<Vec<u128>>());
        checker.polled(100, P0, 0, &at(0, &[10, 11])).unwrap();
        checker.commit_abandoned(100, P0, 3);
        checker.polled(100, P0, 2, &at(5, &[15])).unwrap();
        let anomaly = checker.polled(100, P0, 6, &at(7, &[17])).unwrap_err();
        assert_eq!(anomaly, Anomaly::PollSkip { reader: Reader::Consumer(100), partition: P0, expected: 6, offset: 7 });
        let mut checker = KafkaLogChecker::new();
        produce(&mut checker, 1, P0, 0, &(10..30).collect::<Vec<u128>>());
        checker.polled(100, P0, 0, &at(0, &[10, 11])).unwrap();
        checker.commit_abandoned(100, P0, 3);
        assert!(checker.polled(100, P0, 2, &at(6, &[16])).is_err(), "a skip longer than the poll's count");
    }
}
