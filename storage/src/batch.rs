//! Message batches: the one byte format Vireo uses on the wire, in prepares and in segment files
//! (`PROTOCOL.md`, "Message batches").
//!
//! A batch is a 256-byte header followed by `message_count` messages, each a 48-byte frame, its
//! payload and its user headers. A client sends a batch with `partition_id`, `base_offset` and
//! `base_timestamp` zero; the partition that stores it *stamps* it (those three fields, each
//! message's `offset_delta`, and every checksum), so the stored bytes say where they belong and
//! prove they are whole.
//!
//! Checksums, the reference's (`iggy_binary_protocol::batch`, `calculate_batch_checksum`): a
//! message's is xxh3-64 over frame[8..48], payload and headers; the batch's is one xxh3-64 over
//! partition_id, base_offset, base_timestamp, origin_timestamp, batch_length (u64 LE each) and
//! message_count (u32 LE), that is header bytes 0..40 and 48..52, then each message's 8-byte
//! checksum in order. The batch checksum binds the message bodies only through their checksums,
//! so a batch whose header checksum holds but one of whose messages is damaged is caught by
//! recomputing that message's checksum: `validate` does both. Header bytes 52..256 are not
//! hashed; `BatchHeader::decode` requires them zero instead.
//!
//! A frame's reserved bytes 40..48 are zero: every reader refuses a frame that says otherwise
//! (the SDK's decoders do too, so such a frame stored once would break every poll of it).

use xxhash_rust::xxh3::Xxh3;

pub const BATCH_HEADER_SIZE: usize = 256;
pub const MESSAGE_FRAME_SIZE: usize = 48;
/// No batch is larger than this: the bound on what one append, one prepare body or one read holds.
pub const BATCH_SIZE_MAX: usize = 64 * 1024 * 1024;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BatchHeader {
    pub partition_id: u64,
    pub base_offset: u64,
    /// Microseconds since the Unix epoch, assigned by the partition.
    pub base_timestamp: u64,
    /// The producer's own timestamp, kept as sent.
    pub origin_timestamp: u64,
    /// The whole batch: header, frames, payloads and headers.
    pub batch_length: u64,
    pub batch_checksum: u64,
    pub message_count: u32,
}

impl BatchHeader {
    /// The offset of the batch's last message.
    pub fn last_offset(&self) -> u64 {
        self.base_offset + self.message_count as u64 - 1
    }

    /// Whether the base timestamp leaves room for any message's u32 delta: a stamped batch must.
    pub fn has_timestamp_room(&self) -> bool {
        self.base_timestamp.checked_add(u32::MAX as u64).is_some()
    }

    /// The offset just past the batch.
    pub fn end_offset(&self) -> u64 {
        self.base_offset + self.message_count as u64
    }

    pub fn encode_into(&self, bytes: &mut [u8]) {
        bytes[..BATCH_HEADER_SIZE].fill(0);
        bytes[0..8].copy_from_slice(&self.partition_id.to_le_bytes());
        bytes[8..16].copy_from_slice(&self.base_offset.to_le_bytes());
        bytes[16..24].copy_from_slice(&self.base_timestamp.to_le_bytes());
        bytes[24..32].copy_from_slice(&self.origin_timestamp.to_le_bytes());
        bytes[32..40].copy_from_slice(&self.batch_length.to_le_bytes());
        bytes[40..48].copy_from_slice(&self.batch_checksum.to_le_bytes());
        bytes[48..52].copy_from_slice(&self.message_count.to_le_bytes());
    }

    /// Reads a header's fields and checks that they are plausible (lengths, the zero tail). It does
    /// not check checksums: see `validate`.
    pub fn decode(bytes: &[u8]) -> Result<BatchHeader, BatchError> {
        if bytes.len() < BATCH_HEADER_SIZE {
            return Err(BatchError::Short);
        }
        let u64_at = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap());
        let header = BatchHeader {
            partition_id: u64_at(0),
            base_offset: u64_at(8),
            base_timestamp: u64_at(16),
            origin_timestamp: u64_at(24),
            batch_length: u64_at(32),
            batch_checksum: u64_at(40),
            message_count: u32::from_le_bytes(bytes[48..52].try_into().unwrap()),
        };
        if bytes[52..BATCH_HEADER_SIZE].iter().any(|&b| b != 0) {
            return Err(BatchError::Header("bytes 52..256 are not zero"));
        }
        if header.message_count == 0 {
            return Err(BatchError::Header("message_count is zero"));
        }
        let frames_min = BATCH_HEADER_SIZE as u64 + header.message_count as u64 * MESSAGE_FRAME_SIZE as u64;
        if header.batch_length < frames_min || header.batch_length > BATCH_SIZE_MAX as u64 {
            return Err(BatchError::Header("batch_length does not fit message_count"));
        }
        if header.base_offset.checked_add(header.message_count as u64).is_none() {
            return Err(BatchError::Header("base_offset + message_count overflows"));
        }
        Ok(header)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BatchError {
    #[error("the batch is shorter than its header says")]
    Short,
    #[error("bad batch header: {0}")]
    Header(&'static str),
    #[error("message {0}: its frame does not fit in the batch")]
    Frame(u32),
    #[error("message {0}: reserved bytes 40..48 of its frame are not zero")]
    FrameReserved(u32),
    #[error("message {0}: checksum mismatch")]
    MessageChecksum(u32),
    #[error("batch checksum mismatch")]
    BatchChecksum,
    #[error("the batch is longer than its messages")]
    TrailingBytes,
}

/// One message of a batch, borrowed from the batch's bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Message<'a> {
    pub checksum: u64,
    pub id: u128,
    pub offset: u64,
    /// Microseconds since the Unix epoch.
    pub timestamp: u64,
    pub payload: &'a [u8],
    pub user_headers: &'a [u8],
}

/// Where each message of a batch lies: (frame start, total length), in order. Checks every frame
/// fits, has its reserved bytes zero, and that the messages fill the batch exactly.
fn message_spans(bytes: &[u8], header: &BatchHeader) -> Result<Vec<(usize, usize)>, BatchError> {
    let mut spans = Vec::with_capacity(header.message_count as usize);
    walk_frames(bytes, header, |_, at, len| spans.push((at, len)))?;
    Ok(spans)
}

/// Hands `visit` each message's (index, frame start, total length) in order, checking the frames
/// as `message_spans` does; a frame that fails ends the walk with its error. One pass and no
/// allocation: the checks that run on every send and every apply walk the frames once.
fn walk_frames(bytes: &[u8], header: &BatchHeader, mut visit: impl FnMut(u32, usize, usize)) -> Result<(), BatchError> {
    let end = header.batch_length as usize;
    if bytes.len() < end {
        return Err(BatchError::Short);
    }
    let mut at = BATCH_HEADER_SIZE;
    for index in 0..header.message_count {
        if at + MESSAGE_FRAME_SIZE > end {
            return Err(BatchError::Frame(index));
        }
        let frame = &bytes[at..at + MESSAGE_FRAME_SIZE];
        if u64::from_le_bytes(frame[40..48].try_into().unwrap()) != 0 {
            return Err(BatchError::FrameReserved(index));
        }
        let len = message_len(frame);
        if at + len > end {
            return Err(BatchError::Frame(index));
        }
        visit(index, at, len);
        at += len;
    }
    if at != end {
        return Err(BatchError::TrailingBytes);
    }
    Ok(())
}

/// A message's whole length (frame, payload, user headers), as its frame says.
fn message_len(frame: &[u8]) -> usize {
    let headers_len = u32::from_le_bytes(frame[32..36].try_into().unwrap()) as usize;
    let payload_len = u32::from_le_bytes(frame[36..40].try_into().unwrap()) as usize;
    MESSAGE_FRAME_SIZE + payload_len + headers_len
}

fn message_checksum(message: &[u8]) -> u64 {
    crate::checksum::checksum64(&message[8..])
}

/// The reference's batch checksum: header fields 0..40 (five u64s) and 48..52 (message_count),
/// then the messages' checksums, fed one at a time as a walk over the frames finds them. They are
/// gathered into blocks before they reach the hasher, whose per-update cost would otherwise be
/// paid for every 8 bytes.
struct ChecksumChain {
    hasher: Xxh3,
    pending: [u8; CHECKSUM_CHAIN_BLOCK],
    filled: usize,
}

/// How many bytes of message checksums `ChecksumChain` gathers per hasher update.
const CHECKSUM_CHAIN_BLOCK: usize = 512;

impl ChecksumChain {
    fn new(header_bytes: &[u8]) -> ChecksumChain {
        let mut hasher = Xxh3::new();
        hasher.update(&header_bytes[0..40]);
        hasher.update(&header_bytes[48..52]);
        ChecksumChain { hasher, pending: [0; CHECKSUM_CHAIN_BLOCK], filled: 0 }
    }

    fn push(&mut self, checksum: u64) {
        if self.filled == CHECKSUM_CHAIN_BLOCK {
            self.hasher.update(&self.pending);
            self.filled = 0;
        }
        self.pending[self.filled..self.filled + 8].copy_from_slice(&checksum.to_le_bytes());
        self.filled += 8;
    }

    fn finish(mut self) -> u64 {
        self.hasher.update(&self.pending[..self.filled]);
        self.hasher.digest()
    }
}

/// Checks a whole batch: header, frame lengths, every message checksum and the batch checksum.
/// `bytes` may run past the batch; only `batch_length` bytes are read. One hash pass over every
/// payload byte: for bytes nothing else vouches for (read from a disk, fetched from a peer).
pub fn validate(bytes: &[u8]) -> Result<BatchHeader, BatchError> {
    check(bytes, true).map(|(header, _)| header)
}

/// As `validate`, but the messages' checksums are taken as stored, not recomputed: for bytes a
/// covering checksum already vouches for, so that a batch is hashed once on its way to disk and
/// not at each step. Those are a batch `stamp` just wrote in this process, and a prepare's body
/// (a prepare's `checksum_body` is checked when it arrives from a peer and when its WAL slot is
/// read back). Everything else is checked: the header, the frames' lengths, the dense offsets,
/// the timestamp room, and the batch checksum over the stored message checksums.
pub fn check_stamped(bytes: &[u8]) -> Result<BatchHeader, BatchError> {
    check(bytes, false).map(|(header, _)| header)
}

/// As `check_stamped`, with the batch's largest message timestamp (`timestamp_max`) read in the
/// same walk over its frames: what an append and an apply need, for one walk instead of two.
pub fn check_stamped_with_timestamp_max(bytes: &[u8]) -> Result<(BatchHeader, u64), BatchError> {
    check(bytes, false)
}

/// The header, and the largest message timestamp (0 without messages, as `timestamp_max`).
///
/// One walk over the frames does every check. The errors are the ones separate passes would give,
/// in the same precedence: a frame that does not fit first, then the timestamp room, then the
/// first message that fails its checksum or its dense offset, then the batch checksum.
fn check(bytes: &[u8], hash_messages: bool) -> Result<(BatchHeader, u64), BatchError> {
    let header = BatchHeader::decode(bytes)?;
    let mut chain = ChecksumChain::new(&bytes[..BATCH_HEADER_SIZE]);
    let mut message_error = None;
    let mut delta_max = None;
    walk_frames(bytes, &header, |index, at, len| {
        let stored = u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap());
        chain.push(stored);
        if message_error.is_some() {
            return;
        }
        if hash_messages && stored != message_checksum(&bytes[at..at + len]) {
            message_error = Some(BatchError::MessageChecksum(index));
        // A stamped batch's offsets are dense: message i is at base_offset + i.
        } else if u32::from_le_bytes(bytes[at + 24..at + 28].try_into().unwrap()) != index {
            message_error = Some(BatchError::Frame(index));
        }
        let delta = u32::from_le_bytes(bytes[at + 28..at + 32].try_into().unwrap());
        delta_max = delta_max.max(Some(delta));
    })?;
    if !header.has_timestamp_room() {
        return Err(BatchError::Header("base_timestamp leaves no room for message timestamps"));
    }
    if let Some(error) = message_error {
        return Err(error);
    }
    if chain.finish() != header.batch_checksum {
        return Err(BatchError::BatchChecksum);
    }
    // No overflow: the base leaves room for any u32 delta (checked above).
    Ok((header, delta_max.map_or(0, |delta| header.base_timestamp + delta as u64)))
}

/// Checks the structure of a batch a client sent (checksums are recomputed by `stamp`, so a client
/// may leave them zero) and returns its header.
pub fn check_client_batch(bytes: &[u8]) -> Result<BatchHeader, BatchError> {
    let header = BatchHeader::decode(bytes)?;
    if bytes.len() != header.batch_length as usize {
        return Err(if bytes.len() < header.batch_length as usize {
            BatchError::Short
        } else {
            BatchError::TrailingBytes
        });
    }
    walk_frames(bytes, &header, |_, _, _| {})?;
    Ok(header)
}

/// A batch as `stamp` left it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stamped {
    pub header: BatchHeader,
    /// The largest message timestamp in the batch (the base plus the largest delta).
    pub timestamp_max: u64,
}

/// Stamps a batch in place for the partition that stores it: partition id, base offset and
/// timestamp, dense offset deltas, every checksum. Message timestamp deltas are kept as sent.
pub fn stamp(
    bytes: &mut [u8],
    partition_id: u64,
    base_offset: u64,
    base_timestamp: u64,
) -> Result<Stamped, BatchError> {
    let mut header = check_client_batch(bytes)?;
    header.partition_id = partition_id;
    header.base_offset = base_offset;
    header.base_timestamp = base_timestamp;
    header.batch_checksum = 0;
    header.encode_into(bytes);
    let mut chain = ChecksumChain::new(&bytes[..BATCH_HEADER_SIZE]);
    let mut delta_max = 0u64;
    // The frames were checked above: each one's lengths say where the next begins.
    let mut at = BATCH_HEADER_SIZE;
    for index in 0..header.message_count {
        let len = message_len(&bytes[at..at + MESSAGE_FRAME_SIZE]);
        let message = &mut bytes[at..at + len];
        at += len;
        message[24..28].copy_from_slice(&index.to_le_bytes());
        delta_max = delta_max.max(u32::from_le_bytes(message[28..32].try_into().unwrap()) as u64);
        let checksum = message_checksum(message);
        message[0..8].copy_from_slice(&checksum.to_le_bytes());
        chain.push(checksum);
    }
    header.batch_checksum = chain.finish();
    header.encode_into(bytes);
    let timestamp_max = base_timestamp.checked_add(delta_max).ok_or(BatchError::Header("timestamp overflows"))?;
    Ok(Stamped { header, timestamp_max })
}

/// The largest message timestamp of a batch (0 if it has no messages), read off the frames alone:
/// what a send's apply and append need, without a `Message` per message.
pub fn timestamp_max(bytes: &[u8]) -> Result<u64, BatchError> {
    let header = BatchHeader::decode(bytes)?;
    let mut max = None;
    for (index, (at, _)) in message_spans(bytes, &header)?.into_iter().enumerate() {
        let delta = u32::from_le_bytes(bytes[at + 28..at + 32].try_into().unwrap()) as u64;
        let timestamp = header.base_timestamp.checked_add(delta).ok_or(BatchError::Frame(index as u32))?;
        max = max.max(Some(timestamp));
    }
    Ok(max.unwrap_or(0))
}

/// The messages of a batch that `validate` or `check_client_batch` accepted.
pub fn messages(bytes: &[u8]) -> Result<Vec<Message<'_>>, BatchError> {
    let header = BatchHeader::decode(bytes)?;
    let spans = message_spans(bytes, &header)?;
    spans
        .into_iter()
        .enumerate()
        .map(|(index, (at, len))| {
            let frame = &bytes[at..at + MESSAGE_FRAME_SIZE];
            let payload_len = u32::from_le_bytes(frame[36..40].try_into().unwrap()) as usize;
            let body = &bytes[at + MESSAGE_FRAME_SIZE..at + len];
            let offset_delta = u32::from_le_bytes(frame[24..28].try_into().unwrap()) as u64;
            let timestamp_delta = u32::from_le_bytes(frame[28..32].try_into().unwrap()) as u64;
            // Deltas come from the bytes: any value is possible, so the sums are checked.
            let overflow = BatchError::Frame(index as u32);
            Ok(Message {
                checksum: u64::from_le_bytes(frame[0..8].try_into().unwrap()),
                id: u128::from_le_bytes(frame[8..24].try_into().unwrap()),
                offset: header.base_offset.checked_add(offset_delta).ok_or(overflow)?,
                timestamp: header.base_timestamp.checked_add(timestamp_delta).ok_or(overflow)?,
                payload: &body[..payload_len],
                user_headers: &body[payload_len..],
            })
        })
        .collect()
}

/// A stamped batch holding only the messages of `bytes` (a valid stamped batch) whose offsets lie
/// in `from..to`, stamped anew for where they are (`None` when none do): what a poll that starts
/// or ends inside a stored batch answers with, so a client sees exactly the messages it asked for.
pub fn slice(bytes: &[u8], from: u64, to: u64) -> Result<Option<Vec<u8>>, BatchError> {
    let header = BatchHeader::decode(bytes)?;
    let spans = message_spans(bytes, &header)?;
    let first = from.saturating_sub(header.base_offset).min(spans.len() as u64) as usize;
    let last = to.saturating_sub(header.base_offset).min(spans.len() as u64) as usize;
    if first >= last {
        return Ok(None);
    }
    if first == 0 && last == spans.len() {
        return Ok(Some(bytes[..header.batch_length as usize].to_vec()));
    }
    let kept = &spans[first..last];
    let length: usize = BATCH_HEADER_SIZE + kept.iter().map(|(_, len)| len).sum::<usize>();
    let mut sliced = Vec::with_capacity(length);
    sliced.extend_from_slice(&bytes[..BATCH_HEADER_SIZE]);
    for &(at, len) in kept {
        sliced.extend_from_slice(&bytes[at..at + len]);
    }
    let mut sliced_header = header;
    sliced_header.batch_length = length as u64;
    sliced_header.message_count = kept.len() as u32;
    sliced_header.encode_into(&mut sliced);
    stamp(&mut sliced, header.partition_id, header.base_offset + first as u64, header.base_timestamp)?;
    Ok(Some(sliced))
}

/// Builds an unstamped batch as a client would send it.
#[derive(Default)]
pub struct BatchBuilder {
    bytes: Vec<u8>,
    count: u32,
}

impl BatchBuilder {
    pub fn new() -> BatchBuilder {
        BatchBuilder { bytes: vec![0; BATCH_HEADER_SIZE], count: 0 }
    }

    pub fn with_capacity(bytes: usize) -> BatchBuilder {
        let mut builder = BatchBuilder { bytes: Vec::with_capacity(bytes.max(BATCH_HEADER_SIZE)), count: 0 };
        builder.bytes.resize(BATCH_HEADER_SIZE, 0);
        builder
    }

    pub fn message(mut self, id: u128, payload: &[u8], user_headers: &[u8]) -> BatchBuilder {
        self.push(id, payload, user_headers);
        self
    }

    pub fn push(&mut self, id: u128, payload: &[u8], user_headers: &[u8]) {
        let mut frame = [0u8; MESSAGE_FRAME_SIZE];
        frame[8..24].copy_from_slice(&id.to_le_bytes());
        frame[32..36].copy_from_slice(&(user_headers.len() as u32).to_le_bytes());
        frame[36..40].copy_from_slice(&(payload.len() as u32).to_le_bytes());
        self.bytes.extend_from_slice(&frame);
        self.bytes.extend_from_slice(payload);
        self.bytes.extend_from_slice(user_headers);
        self.count += 1;
    }

    pub fn len(&self) -> u32 {
        self.count
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    pub fn finish(mut self, origin_timestamp: u64) -> Vec<u8> {
        assert!(self.count > 0, "a batch holds at least one message");
        let header = BatchHeader {
            partition_id: 0,
            base_offset: 0,
            base_timestamp: 0,
            origin_timestamp,
            batch_length: self.bytes.len() as u64,
            batch_checksum: 0,
            message_count: self.count,
        };
        header.encode_into(&mut self.bytes);
        self.bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use xxhash_rust::xxh3::xxh3_64;

    fn batch_of(messages: &[(u128, Vec<u8>, Vec<u8>)]) -> Vec<u8> {
        let mut builder = BatchBuilder::new();
        for (id, payload, headers) in messages {
            builder.push(*id, payload, headers);
        }
        builder.finish(77)
    }

    #[test]
    fn layout_matches_the_protocol() {
        let mut bytes = BatchBuilder::new().message(5, b"hello", b"h").finish(9);
        stamp(&mut bytes, 3, 100, 1_000).unwrap();
        assert_eq!(u64::from_le_bytes(bytes[0..8].try_into().unwrap()), 3);
        assert_eq!(u64::from_le_bytes(bytes[8..16].try_into().unwrap()), 100);
        assert_eq!(u64::from_le_bytes(bytes[16..24].try_into().unwrap()), 1_000);
        assert_eq!(u64::from_le_bytes(bytes[24..32].try_into().unwrap()), 9);
        assert_eq!(u64::from_le_bytes(bytes[32..40].try_into().unwrap()), (256 + 48 + 6) as u64);
        assert_eq!(u32::from_le_bytes(bytes[48..52].try_into().unwrap()), 1);
        let frame = &bytes[256..304];
        assert_eq!(u128::from_le_bytes(frame[8..24].try_into().unwrap()), 5);
        assert_eq!(u32::from_le_bytes(frame[32..36].try_into().unwrap()), 1);
        assert_eq!(u32::from_le_bytes(frame[36..40].try_into().unwrap()), 5);
        assert_eq!(u64::from_le_bytes(frame[0..8].try_into().unwrap()), xxh3_64(&bytes[264..]));
        assert_eq!(&bytes[304..], b"helloh");
    }

    #[test]
    fn the_batch_checksum_is_the_references() {
        let mut bytes = BatchBuilder::new().message(5, b"hello", b"h").message(6, b"", b"").finish(9);
        let header = stamp(&mut bytes, 3, 100, 1_000).unwrap().header;
        // partition_id, base_offset, base_timestamp, origin_timestamp, batch_length as u64 LE,
        // message_count as u32 LE, then each message's checksum: nothing of bytes 52..256.
        let mut hashed = Vec::new();
        for field in [3u64, 100, 1_000, 9, header.batch_length] {
            hashed.extend_from_slice(&field.to_le_bytes());
        }
        hashed.extend_from_slice(&2u32.to_le_bytes());
        let second = BATCH_HEADER_SIZE + MESSAGE_FRAME_SIZE + 6;
        hashed.extend_from_slice(&bytes[BATCH_HEADER_SIZE..BATCH_HEADER_SIZE + 8]);
        hashed.extend_from_slice(&bytes[second..second + 8]);
        assert_eq!(header.batch_checksum, xxh3_64(&hashed));
        assert_eq!(u64::from_le_bytes(bytes[40..48].try_into().unwrap()), header.batch_checksum);
    }

    #[test]
    fn a_frame_with_reserved_bytes_set_is_refused() {
        let reserved = BATCH_HEADER_SIZE + 40;
        let mut client = BatchBuilder::new().message(1, b"a", b"").finish(0);
        client[reserved + 7] = 1;
        assert_eq!(check_client_batch(&client), Err(BatchError::FrameReserved(0)));
        assert_eq!(stamp(&mut client, 1, 0, 0), Err(BatchError::FrameReserved(0)));

        let mut stamped = BatchBuilder::new().message(1, b"a", b"").message(2, b"b", b"").finish(0);
        stamp(&mut stamped, 1, 0, 0).unwrap();
        let second = BATCH_HEADER_SIZE + MESSAGE_FRAME_SIZE + 1;
        stamped[second + 40] = 1;
        assert_eq!(validate(&stamped), Err(BatchError::FrameReserved(1)));
    }

    /// `check` as separate passes (the spans, then the messages, then the batch checksum), as it
    /// was before it became one walk: the model the walk must agree with, error for error.
    fn check_in_passes(bytes: &[u8], hash_messages: bool) -> Result<(BatchHeader, u64), BatchError> {
        let header = BatchHeader::decode(bytes)?;
        let spans = message_spans(bytes, &header)?;
        if header.base_timestamp.checked_add(u32::MAX as u64).is_none() {
            return Err(BatchError::Header("base_timestamp leaves no room for message timestamps"));
        }
        let mut delta_max = None;
        for (index, &(at, len)) in spans.iter().enumerate() {
            let stored = u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap());
            if hash_messages && stored != xxh3_64(&bytes[at + 8..at + len]) {
                return Err(BatchError::MessageChecksum(index as u32));
            }
            if u32::from_le_bytes(bytes[at + 24..at + 28].try_into().unwrap()) != index as u32 {
                return Err(BatchError::Frame(index as u32));
            }
            delta_max = delta_max.max(Some(u32::from_le_bytes(bytes[at + 28..at + 32].try_into().unwrap())));
        }
        let mut hashed = Vec::new();
        hashed.extend_from_slice(&bytes[0..40]);
        hashed.extend_from_slice(&bytes[48..52]);
        for &(at, _) in &spans {
            hashed.extend_from_slice(&bytes[at..at + 8]);
        }
        if xxh3_64(&hashed) != header.batch_checksum {
            return Err(BatchError::BatchChecksum);
        }
        Ok((header, delta_max.map_or(0, |delta| header.base_timestamp + delta as u64)))
    }

    proptest! {
        #[test]
        fn a_slice_holds_exactly_the_messages_in_its_range(
            messages in prop::collection::vec((any::<u128>(), prop::collection::vec(any::<u8>(), 0..16),
                prop::collection::vec(any::<u8>(), 0..4)), 1..10),
            base_offset in 0u64..1000,
            from in 0u64..1015,
            span in 0u64..15,
        ) {
            let mut bytes = batch_of(&messages);
            stamp(&mut bytes, 2, base_offset, 5_000).unwrap();
            let to = from + span;
            let expected: Vec<_> = super::messages(&bytes).unwrap().into_iter()
                .filter(|message| (from..to).contains(&message.offset))
                .map(|message| (message.offset, message.id, message.timestamp, message.payload.to_vec()))
                .collect();
            match slice(&bytes, from, to).unwrap() {
                None => prop_assert!(expected.is_empty()),
                Some(sliced) => {
                    validate(&sliced).unwrap();
                    let got: Vec<_> = super::messages(&sliced).unwrap().into_iter()
                        .map(|message| (message.offset, message.id, message.timestamp, message.payload.to_vec()))
                        .collect();
                    prop_assert_eq!(got, expected);
                }
            }
        }

        #[test]
        fn the_timestamp_max_of_the_frames_is_the_messages_max(
            messages in prop::collection::vec((any::<u128>(), prop::collection::vec(any::<u8>(), 0..16),
                prop::collection::vec(any::<u8>(), 0..4)), 1..10),
            deltas in prop::collection::vec(any::<u32>(), 10),
            base_timestamp in prop_oneof![0u64..1 << 40, u64::MAX - (1 << 33)..=u64::MAX],
        ) {
            let mut bytes = batch_of(&messages);
            stamp(&mut bytes, 1, 0, 0).unwrap();
            bytes[16..24].copy_from_slice(&base_timestamp.to_le_bytes());
            let header = BatchHeader::decode(&bytes).unwrap();
            for (index, (at, _)) in message_spans(&bytes, &header).unwrap().into_iter().enumerate() {
                bytes[at + 28..at + 32].copy_from_slice(&deltas[index].to_le_bytes());
            }
            let expected = super::messages(&bytes)
                .map(|read| read.iter().map(|message| message.timestamp).max().unwrap_or(0));
            prop_assert_eq!(timestamp_max(&bytes).ok(), expected.ok());
            // Stamped again (the deltas stay as they are): the check's walk finds the same max.
            if stamp(&mut bytes, 1, 0, base_timestamp).is_ok() && base_timestamp.checked_add(u32::MAX as u64).is_some() {
                let (_, checked_max) = check_stamped_with_timestamp_max(&bytes).unwrap();
                prop_assert_eq!(Some(checked_max), expected.ok());
            }
        }

        #[test]
        fn stamped_batches_validate_and_read_back(
            messages in prop::collection::vec((any::<u128>(), prop::collection::vec(any::<u8>(), 0..64),
                prop::collection::vec(any::<u8>(), 0..16)), 1..12),
            base_offset in 0u64..u64::MAX / 2,
            base_timestamp in any::<u32>(),
        ) {
            let mut bytes = batch_of(&messages);
            let header = stamp(&mut bytes, 7, base_offset, base_timestamp as u64).unwrap().header;
            prop_assert_eq!(validate(&bytes).unwrap(), header);
            let read = super::messages(&bytes).unwrap();
            prop_assert_eq!(read.len(), messages.len());
            for (index, (message, (id, payload, headers))) in read.iter().zip(&messages).enumerate() {
                prop_assert_eq!(message.id, *id);
                prop_assert_eq!(message.offset, base_offset + index as u64);
                prop_assert_eq!(message.payload, &payload[..]);
                prop_assert_eq!(message.user_headers, &headers[..]);
            }
        }

        #[test]
        fn any_bit_flip_in_a_stamped_batch_is_caught(
            messages in prop::collection::vec((any::<u128>(), prop::collection::vec(any::<u8>(), 0..64),
                prop::collection::vec(any::<u8>(), 0..16)), 1..6),
            bit in any::<prop::sample::Index>(),
        ) {
            let mut bytes = batch_of(&messages);
            stamp(&mut bytes, 1, 10, 20).unwrap();
            let bit = bit.index(bytes.len() * 8);
            bytes[bit / 8] ^= 1 << (bit % 8);
            prop_assert!(validate(&bytes).is_err());
        }

        #[test]
        fn the_one_walk_check_gives_what_separate_passes_give(
            messages in prop::collection::vec((any::<u128>(), prop::collection::vec(any::<u8>(), 0..40),
                prop::collection::vec(any::<u8>(), 0..8)), 1..80),
            edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..4),
            base_timestamp in prop_oneof![0u64..1 << 40, u64::MAX - (1 << 33)..=u64::MAX],
            cut in any::<prop::sample::Index>(),
            cut_it in any::<bool>(),
        ) {
            // Up to 80 messages: past one `ChecksumChain` block (64 checksums).
            let mut bytes = batch_of(&messages);
            stamp(&mut bytes, 3, 40, base_timestamp).unwrap();
            for (at, value) in edits {
                let at = at.index(bytes.len());
                bytes[at] = value;
            }
            if cut_it {
                bytes.truncate(cut.index(bytes.len() + 1));
            }
            for hash_messages in [false, true] {
                prop_assert_eq!(check(&bytes, hash_messages), check_in_passes(&bytes, hash_messages));
            }
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..1024)) {
            let _ = validate(&bytes);
            let _ = check_client_batch(&bytes);
            let _ = messages(&bytes);
        }
    }
}
