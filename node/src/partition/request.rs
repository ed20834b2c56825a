//! The partition plane's requests and replies, as they travel inside prepares: compact, fixed
//! layouts that the node builds from a client's `PROTOCOL.md` request once it has routed it
//! (stream and topic resolved, the partition chosen). All integers little-endian.
//!
//! - `OPERATION_SEND_MESSAGES` (160): partition u32, the topic's retention (segment_size u64,
//!   message_expiry u64 in microseconds, max_bytes u64 for this partition; 0 is no limit for the
//!   last two), then one batch: unstamped as the node builds it, stamped in place by the primary
//!   as it prepares it (`PartitionMachine::prepare`). The retention travels in the send so that
//!   every replica applies the one its op carries, whatever metadata its node has seen.
//!   Reply: status u32, partition u32, base_offset u64, message_count u32.
//! - `OPERATION_STORE_CONSUMER_OFFSET` (161): partition u32, consumer, offset u64. Reply: status.
//! - `OPERATION_DELETE_CONSUMER_OFFSET` (162): partition u32, consumer. Reply: status.
//! - `OPERATION_POLL_MESSAGES` (163): partition u32, consumer, strategy kind u8 + value u64,
//!   count u32, auto_commit u8. Reply: status u32, partition u32, current_offset u64 (the
//!   partition's last offset, or u64::MAX when empty), count u32 (messages delivered: offsets
//!   start..start+count), start u64, then whole stamped batches that hold them. A replicated
//!   poll's reply, as the group commits and caches it, carries no batches: the replica that
//!   sends it fills them in from its log (`PartitionMachine::fill`).
//!
//! - `OPERATION_GET_CONSUMER_OFFSET` (164): partition u32, consumer. Reply: status u32, partition
//!   u32, current_offset u64 (u64::MAX when empty), stored u64.
//! - `OPERATION_PURGE` (165): partition u32. Reply: status. Every stored message goes; offsets go
//!   on from where they were (a consumer's stored offset stays meaningful).
//! - `OPERATION_DELETE_SEGMENTS` (166): partition u32, count u32. Reply: status. The oldest
//!   `count` sealed segments go, never the newest segment (as retention: a consumer always finds
//!   where the log goes on).
//!
//! Polls are replicated requests too: a poll with auto-commit stores its consumer's offset in the
//! same op that chose the messages, so a retried poll gets the same range (re-read from the log,
//! never cached with its bytes) and never skips any.
//! Consumer: kind u8 (1 consumer, 2 consumer group) + id u32.

use thiserror::Error;
use vireo_io::Bytes;
use vireo_storage::partition::PollingStrategy;

pub const OPERATION_SEND_MESSAGES: u8 = 160;
pub const OPERATION_STORE_CONSUMER_OFFSET: u8 = 161;
pub const OPERATION_DELETE_CONSUMER_OFFSET: u8 = 162;
pub const OPERATION_POLL_MESSAGES: u8 = 163;
pub const OPERATION_GET_CONSUMER_OFFSET: u8 = 164;
pub const OPERATION_PURGE: u8 = 165;
pub const OPERATION_DELETE_SEGMENTS: u8 = 166;

/// Where a send's batch starts in its body (after the partition and the retention).
pub const SEND_BATCH_AT: usize = 4 + 24;

/// A topic's retention as one partition applies it, in the send that carries it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Retention {
    /// A segment is sealed once it holds this many bytes of batches (never 0).
    pub segment_size: u64,
    /// Sealed segments whose newest batch is older than this go; 0 keeps them.
    pub message_expiry_us: u64,
    /// The oldest sealed segments go while the partition holds more; 0 is unlimited.
    pub max_bytes: u64,
}

impl Default for Retention {
    /// Iggy's topic defaults: 1 GiB segments, kept forever.
    fn default() -> Retention {
        Retention { segment_size: 1 << 30, message_expiry_us: 0, max_bytes: 0 }
    }
}

/// Whose offset: a single consumer or a consumer group (their ids are separate spaces).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ConsumerKey {
    Consumer(u32),
    Group(u32),
}

impl ConsumerKey {
    fn encode(self, bytes: &mut Vec<u8>) {
        let (kind, id) = match self {
            ConsumerKey::Consumer(id) => (1u8, id),
            ConsumerKey::Group(id) => (2, id),
        };
        bytes.push(kind);
        bytes.extend_from_slice(&id.to_le_bytes());
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PartitionRequest {
    Send { partition: u32, retention: Retention, batch: Vec<u8> },
    StoreOffset { partition: u32, consumer: ConsumerKey, offset: u64 },
    DeleteOffset { partition: u32, consumer: ConsumerKey },
    Poll { partition: u32, consumer: ConsumerKey, strategy: PollingStrategy, count: u32, auto_commit: bool },
    GetOffset { partition: u32, consumer: ConsumerKey },
    Purge { partition: u32 },
    DeleteSegments { partition: u32, count: u32 },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Error)]
pub enum RequestError {
    #[error("body ends at byte {offset}: {what} needs more")]
    Short { offset: usize, what: &'static str },
    #[error("byte {offset}: invalid {what}")]
    Invalid { offset: usize, what: &'static str },
    #[error("operation {0} is not a partition operation")]
    Operation(u8),
}

struct Reader<'a> {
    bytes: &'a [u8],
    offset: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], RequestError> {
        let end = self.offset.checked_add(n).filter(|end| *end <= self.bytes.len());
        let end = end.ok_or(RequestError::Short { offset: self.offset, what })?;
        let slice = &self.bytes[self.offset..end];
        self.offset = end;
        Ok(slice)
    }
    fn u8(&mut self, what: &'static str) -> Result<u8, RequestError> {
        Ok(self.take(1, what)?[0])
    }
    fn u32(&mut self, what: &'static str) -> Result<u32, RequestError> {
        Ok(u32::from_le_bytes(self.take(4, what)?.try_into().unwrap()))
    }
    fn u64(&mut self, what: &'static str) -> Result<u64, RequestError> {
        Ok(u64::from_le_bytes(self.take(8, what)?.try_into().unwrap()))
    }
    fn consumer(&mut self) -> Result<ConsumerKey, RequestError> {
        let at = self.offset;
        let kind = self.u8("consumer kind")?;
        let id = self.u32("consumer id")?;
        match kind {
            1 => Ok(ConsumerKey::Consumer(id)),
            2 => Ok(ConsumerKey::Group(id)),
            _ => Err(RequestError::Invalid { offset: at, what: "consumer kind" }),
        }
    }
    fn end(&self) -> Result<(), RequestError> {
        if self.offset == self.bytes.len() {
            Ok(())
        } else {
            Err(RequestError::Invalid { offset: self.offset, what: "trailing bytes" })
        }
    }
}

/// A send's partition and retention, the part of its body before the batch: `decode` and
/// `PartitionMachine::prepare` both read a send by this, so they agree on which bodies are sends.
/// The bytes of a send's body before its batch (`decode_send_head` reads them back).
pub fn encode_send_head(partition: u32, retention: &Retention) -> [u8; SEND_BATCH_AT] {
    let mut head = [0u8; SEND_BATCH_AT];
    head[..4].copy_from_slice(&partition.to_le_bytes());
    for (index, word) in [retention.segment_size, retention.message_expiry_us, retention.max_bytes].iter().enumerate() {
        head[4 + index * 8..12 + index * 8].copy_from_slice(&word.to_le_bytes());
    }
    head
}

pub fn decode_send_head(body: &[u8]) -> Result<(u32, Retention), RequestError> {
    let mut reader = Reader { bytes: body, offset: 0 };
    let partition = reader.u32("partition")?;
    let at = reader.offset;
    let segment_size = reader.u64("segment_size")?;
    if segment_size == 0 {
        return Err(RequestError::Invalid { offset: at, what: "segment_size" });
    }
    let message_expiry_us = reader.u64("message_expiry")?;
    let max_bytes = reader.u64("max_bytes")?;
    debug_assert_eq!(reader.offset, SEND_BATCH_AT);
    Ok((partition, Retention { segment_size, message_expiry_us, max_bytes }))
}

impl PartitionRequest {
    pub fn operation(&self) -> u8 {
        match self {
            PartitionRequest::Send { .. } => OPERATION_SEND_MESSAGES,
            PartitionRequest::StoreOffset { .. } => OPERATION_STORE_CONSUMER_OFFSET,
            PartitionRequest::DeleteOffset { .. } => OPERATION_DELETE_CONSUMER_OFFSET,
            PartitionRequest::Poll { .. } => OPERATION_POLL_MESSAGES,
            PartitionRequest::GetOffset { .. } => OPERATION_GET_CONSUMER_OFFSET,
            PartitionRequest::Purge { .. } => OPERATION_PURGE,
            PartitionRequest::DeleteSegments { .. } => OPERATION_DELETE_SEGMENTS,
        }
    }

    pub fn partition(&self) -> u32 {
        match self {
            PartitionRequest::Send { partition, .. }
            | PartitionRequest::StoreOffset { partition, .. }
            | PartitionRequest::DeleteOffset { partition, .. }
            | PartitionRequest::Poll { partition, .. }
            | PartitionRequest::GetOffset { partition, .. }
            | PartitionRequest::Purge { partition }
            | PartitionRequest::DeleteSegments { partition, .. } => *partition,
        }
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut bytes = Vec::new();
        bytes.extend_from_slice(&self.partition().to_le_bytes());
        match self {
            PartitionRequest::Send { partition, retention, batch } => {
                bytes.clear();
                bytes.extend_from_slice(&encode_send_head(*partition, retention));
                bytes.extend_from_slice(batch)
            }
            PartitionRequest::StoreOffset { consumer, offset, .. } => {
                consumer.encode(&mut bytes);
                bytes.extend_from_slice(&offset.to_le_bytes());
            }
            PartitionRequest::DeleteOffset { consumer, .. } | PartitionRequest::GetOffset { consumer, .. } => {
                consumer.encode(&mut bytes)
            }
            PartitionRequest::Purge { .. } => {}
            PartitionRequest::DeleteSegments { count, .. } => bytes.extend_from_slice(&count.to_le_bytes()),
            PartitionRequest::Poll { consumer, strategy, count, auto_commit, .. } => {
                consumer.encode(&mut bytes);
                let (kind, value) = match *strategy {
                    PollingStrategy::Offset(offset) => (1u8, offset),
                    PollingStrategy::Timestamp(timestamp) => (2, timestamp),
                    PollingStrategy::First => (3, 0),
                    PollingStrategy::Last => (4, 0),
                    PollingStrategy::Next => (5, 0),
                };
                bytes.push(kind);
                bytes.extend_from_slice(&value.to_le_bytes());
                bytes.extend_from_slice(&count.to_le_bytes());
                bytes.push(*auto_commit as u8);
            }
        }
        bytes
    }

    pub fn decode(operation: u8, body: &[u8]) -> Result<PartitionRequest, RequestError> {
        let mut reader = Reader { bytes: body, offset: 0 };
        let partition = reader.u32("partition")?;
        let request = match operation {
            OPERATION_SEND_MESSAGES => {
                let (partition, retention) = decode_send_head(body)?;
                reader.offset = body.len();
                PartitionRequest::Send { partition, retention, batch: body[SEND_BATCH_AT..].to_vec() }
            }
            OPERATION_STORE_CONSUMER_OFFSET => {
                let consumer = reader.consumer()?;
                PartitionRequest::StoreOffset { partition, consumer, offset: reader.u64("offset")? }
            }
            OPERATION_DELETE_CONSUMER_OFFSET => {
                PartitionRequest::DeleteOffset { partition, consumer: reader.consumer()? }
            }
            OPERATION_GET_CONSUMER_OFFSET => PartitionRequest::GetOffset { partition, consumer: reader.consumer()? },
            OPERATION_PURGE => PartitionRequest::Purge { partition },
            OPERATION_DELETE_SEGMENTS => PartitionRequest::DeleteSegments { partition, count: reader.u32("count")? },
            OPERATION_POLL_MESSAGES => {
                let consumer = reader.consumer()?;
                let at = reader.offset;
                let kind = reader.u8("strategy kind")?;
                let value = reader.u64("strategy value")?;
                let strategy = match kind {
                    1 => PollingStrategy::Offset(value),
                    2 => PollingStrategy::Timestamp(value),
                    3 => PollingStrategy::First,
                    4 => PollingStrategy::Last,
                    5 => PollingStrategy::Next,
                    _ => return Err(RequestError::Invalid { offset: at, what: "strategy kind" }),
                };
                let count = reader.u32("count")?;
                let at = reader.offset;
                let auto_commit = match reader.u8("auto_commit")? {
                    0 => false,
                    1 => true,
                    _ => return Err(RequestError::Invalid { offset: at, what: "auto_commit" }),
                };
                PartitionRequest::Poll { partition, consumer, strategy, count, auto_commit }
            }
            other => return Err(RequestError::Operation(other)),
        };
        reader.end()?;
        Ok(request)
    }
}

/// A partition reply's status word: 0 or one of these.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Error)]
#[repr(u32)]
pub enum PartitionStatus {
    #[error("the request body is malformed")]
    Malformed = 1,
    #[error("the batch is invalid")]
    InvalidBatch = 2,
    #[error("the batch was stamped for another partition")]
    WrongPartition = 3,
    #[error("the partition holds as many consumer offsets as it may")]
    ConsumersFull = 4,
    #[error("no offset is stored for this consumer")]
    OffsetNotFound = 5,
    #[error("the offset is beyond the partition's end")]
    OffsetBeyondEnd = 6,
}

impl PartitionStatus {
    pub fn from_code(code: u32) -> Option<PartitionStatus> {
        use PartitionStatus::*;
        [Malformed, InvalidBatch, WrongPartition, ConsumersFull, OffsetNotFound, OffsetBeyondEnd]
            .into_iter()
            .find(|status| *status as u32 == code)
    }
}

/// A decoded send reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SendReply {
    pub partition: u32,
    pub base_offset: u64,
    pub message_count: u32,
}

/// A decoded get_consumer_offset reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OffsetReply {
    pub partition: u32,
    pub current_offset: u64,
    pub stored: u64,
}

pub fn encode_offset_reply(reply: &OffsetReply) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(24);
    bytes.extend_from_slice(&0u32.to_le_bytes());
    bytes.extend_from_slice(&reply.partition.to_le_bytes());
    bytes.extend_from_slice(&reply.current_offset.to_le_bytes());
    bytes.extend_from_slice(&reply.stored.to_le_bytes());
    bytes
}

pub fn decode_offset_reply(reply: &[u8]) -> Result<OffsetReply, RequestError> {
    let mut reader = Reader { bytes: reply, offset: 0 };
    if reader.u32("status")? != 0 {
        return Err(RequestError::Invalid { offset: 0, what: "status (not a success)" });
    }
    let decoded = OffsetReply {
        partition: reader.u32("partition")?,
        current_offset: reader.u64("current_offset")?,
        stored: reader.u64("stored")?,
    };
    reader.end()?;
    Ok(decoded)
}

/// A decoded poll reply: `count` messages from `start`, inside whole `batches`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PollReply {
    pub partition: u32,
    pub current_offset: u64,
    pub start: u64,
    pub count: u32,
    /// Shared, not copied: a read's buffer (a slice of it) becomes these as it is.
    pub batches: Bytes,
}

/// The status word of any partition reply; `Err` for a reply too short to hold one.
pub fn reply_status(reply: &[u8]) -> Result<Option<PartitionStatus>, RequestError> {
    let mut reader = Reader { bytes: reply, offset: 0 };
    let code = reader.u32("status")?;
    if code == 0 {
        return Ok(None);
    }
    PartitionStatus::from_code(code).map(Some).ok_or(RequestError::Invalid { offset: 0, what: "status" })
}

pub fn encode_send_reply(reply: &SendReply) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(20);
    bytes.extend_from_slice(&0u32.to_le_bytes());
    bytes.extend_from_slice(&reply.partition.to_le_bytes());
    bytes.extend_from_slice(&reply.base_offset.to_le_bytes());
    bytes.extend_from_slice(&reply.message_count.to_le_bytes());
    bytes
}

pub fn decode_send_reply(reply: &[u8]) -> Result<SendReply, RequestError> {
    let mut reader = Reader { bytes: reply, offset: 0 };
    if reader.u32("status")? != 0 {
        return Err(RequestError::Invalid { offset: 0, what: "status (not a success)" });
    }
    let decoded = SendReply {
        partition: reader.u32("partition")?,
        base_offset: reader.u64("base_offset")?,
        message_count: reader.u32("count")?,
    };
    reader.end()?;
    Ok(decoded)
}

pub fn encode_poll_reply(reply: &PollReply) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(28 + reply.batches.len());
    bytes.extend_from_slice(&0u32.to_le_bytes());
    bytes.extend_from_slice(&reply.partition.to_le_bytes());
    bytes.extend_from_slice(&reply.current_offset.to_le_bytes());
    bytes.extend_from_slice(&reply.count.to_le_bytes());
    bytes.extend_from_slice(&reply.start.to_le_bytes());
    bytes.extend_from_slice(&reply.batches);
    bytes
}

pub fn decode_poll_reply(reply: &[u8]) -> Result<PollReply, RequestError> {
    let mut reader = Reader { bytes: reply, offset: 0 };
    if reader.u32("status")? != 0 {
        return Err(RequestError::Invalid { offset: 0, what: "status (not a success)" });
    }
    let partition = reader.u32("partition")?;
    let current_offset = reader.u64("current_offset")?;
    let count = reader.u32("count")?;
    let start = reader.u64("start")?;
    Ok(PollReply { partition, current_offset, start, count, batches: Bytes::copy_from_slice(&reply[reader.offset..]) })
}

pub fn encode_status(status: Option<PartitionStatus>) -> Vec<u8> {
    status.map_or(0, |status| status as u32).to_le_bytes().to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn consumer() -> impl Strategy<Value = ConsumerKey> {
        prop_oneof![any::<u32>().prop_map(ConsumerKey::Consumer), any::<u32>().prop_map(ConsumerKey::Group)]
    }

    fn request() -> impl Strategy<Value = PartitionRequest> {
        let strategy = prop_oneof![
            any::<u64>().prop_map(PollingStrategy::Offset),
            any::<u64>().prop_map(PollingStrategy::Timestamp),
            Just(PollingStrategy::First),
            Just(PollingStrategy::Last),
            Just(PollingStrategy::Next),
        ];
        prop_oneof![
            (any::<u32>(), 1..u64::MAX, any::<(u64, u64)>(), proptest::collection::vec(any::<u8>(), 0..64)).prop_map(
                |(partition, segment_size, (message_expiry_us, max_bytes), batch)| PartitionRequest::Send {
                    partition,
                    retention: Retention { segment_size, message_expiry_us, max_bytes },
                    batch
                }
            ),
            (any::<u32>(), consumer(), any::<u64>()).prop_map(|(partition, consumer, offset)| {
                PartitionRequest::StoreOffset { partition, consumer, offset }
            }),
            (any::<u32>(), consumer())
                .prop_map(|(partition, consumer)| PartitionRequest::DeleteOffset { partition, consumer }),
            (any::<u32>(), consumer())
                .prop_map(|(partition, consumer)| PartitionRequest::GetOffset { partition, consumer }),
            any::<u32>().prop_map(|partition| PartitionRequest::Purge { partition }),
            (any::<u32>(), any::<u32>())
                .prop_map(|(partition, count)| PartitionRequest::DeleteSegments { partition, count }),
            (any::<u32>(), consumer(), strategy, any::<u32>(), any::<bool>()).prop_map(
                |(partition, consumer, strategy, count, auto_commit)| PartitionRequest::Poll {
                    partition,
                    consumer,
                    strategy,
                    count,
                    auto_commit
                }
            ),
        ]
    }

    proptest! {
        #[test]
        fn requests_round_trip(request in request()) {
            let bytes = request.encode();
            prop_assert_eq!(PartitionRequest::decode(request.operation(), &bytes), Ok(request));
        }

        #[test]
        fn arbitrary_bodies_never_panic(operation in 158u8..166, body in proptest::collection::vec(any::<u8>(), 0..40)) {
            if let Ok(request) = PartitionRequest::decode(operation, &body) {
                prop_assert_eq!(request.encode(), body.clone());
            }
            let _ = decode_poll_reply(&body);
            let _ = decode_send_reply(&body);
            let _ = decode_offset_reply(&body);
            let _ = reply_status(&body);
        }
    }

    #[test]
    fn malformed_bodies_name_the_offset() {
        assert_eq!(
            PartitionRequest::decode(OPERATION_STORE_CONSUMER_OFFSET, &[0, 0, 0, 0, 3, 0, 0, 0, 0]),
            Err(RequestError::Invalid { offset: 4, what: "consumer kind" })
        );
        assert_eq!(
            PartitionRequest::decode(OPERATION_POLL_MESSAGES, &[1, 0]),
            Err(RequestError::Short { offset: 0, what: "partition" })
        );
    }
}
