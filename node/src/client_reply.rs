//! The replies a client decodes: a group's reply to a request the node made on a client's
//! behalf, turned into the body of the command the client sent (`PROTOCOL.md`, "Bodies"), and
//! the frames of the node's own answers (refusals, reads, pongs).
//!
//! The reply header carries the client's own request number and operation: an Iggy SDK reads
//! the operation byte to know whether a result section leads the body (`PROTOCOL.md`, "Reply"),
//! so a poll answered by a partition group (operation 163 inside the cluster) goes back as the
//! read (operation 2) the client sent.

use vireo_io::{Bytes, OutFrame};
use vireo_protocol::header::{Command, Header};
use vireo_protocol::wire::{
    Appended, ConsumerOffsetReply, CreatedPersonalAccessToken, LoginReply, Name, ResultSection, SendMessagesReply,
};
use vireo_storage::batch;
use vireo_storage::layout::HEADER_SIZE;

use crate::admission::{STATUS_INVALID_COMMAND, STATUS_PARTITION_NOT_FOUND};
use crate::connection::ReplyKind;
use crate::partition::request::{
    decode_offset_reply, decode_poll_reply, decode_send_reply, reply_status, PartitionStatus, PollReply,
};

/// The protocol version this server speaks (0.11.0, `major << 20 | minor << 10 | patch`).
pub const SERVER_PROTOCOL_VERSION: u32 = 0x2C00;
pub const SERVER_VERSION: &str = concat!("vireo-", env!("CARGO_PKG_VERSION"));

/// Iggy's code for a partition group's refusal.
pub fn partition_status_code(status: PartitionStatus) -> u32 {
    match status {
        PartitionStatus::Malformed => STATUS_INVALID_COMMAND,
        // InvalidFormat: the batch does not hold what its header says.
        PartitionStatus::InvalidBatch => 4,
        PartitionStatus::WrongPartition => STATUS_PARTITION_NOT_FOUND,
        // Iggy's "consumer offsets limit reached" has no code of its own: FeatureUnavailable.
        PartitionStatus::ConsumersFull => 5,
        // ResourceNotFound.
        PartitionStatus::OffsetNotFound => 20,
        PartitionStatus::OffsetBeyondEnd => 4,
    }
}

/// The body of a poll's reply (`PROTOCOL.md`: partition u32, current_offset u64, count u32, then
/// the batches), built in one buffer from the batches the partition read: exactly the messages
/// chosen, batches cut where the poll starts and ends, a whole batch copied once. For a reply
/// whose body a reader needs whole (a group's reply decoded for the client).
pub fn poll_reply_body(polled: &PollReply) -> Result<Vec<u8>, u32> {
    let mut body = Vec::with_capacity(POLL_REPLY_HEAD + polled.batches.len());
    write_poll_reply(polled, &mut body, None)?;
    Ok(body)
}

/// A local poll's whole reply frame for `request`, in parts: the header and the reply's head,
/// then the batches, each large one a slice of the read that brought it in (no copy); a batch
/// cut where the poll starts or ends is the cut one, and small batches are gathered into one
/// buffer, so that a reply of many small batches is not as many writes to the socket. A refusal
/// if the batches do not make a reply.
pub fn poll_reply_frame(request: &Header, cluster: u128, replica: u8, polled: &PollReply) -> OutFrame {
    let mut head = Vec::with_capacity(HEADER_SIZE + POLL_REPLY_HEAD);
    head.resize(HEADER_SIZE, 0);
    // A slice pins the whole read until the client has taken the reply, while a connection's
    // send queue counts the reply's bytes: a reply whose slices would be under half of the read
    // (its edges cut from large batches, copied) is gathered whole, and the read goes at once.
    // A slice then pins at most twice what the queue counts.
    let slice_min = if 2 * sliced_bytes(polled) >= polled.batches.len() { SLICED_BATCH_MIN } else { usize::MAX };
    let mut parts = ReplyParts { slice_min, sliced: Vec::new(), gathered: Vec::new() };
    match write_poll_reply(polled, &mut head, Some(&mut parts)) {
        Ok(()) => {
            let parts = parts.finish();
            let body_len = head.len() - HEADER_SIZE + parts.iter().map(Bytes::len).sum::<usize>();
            OutFrame::new(node_reply_head(request, cluster, replica, head, body_len), parts)
        }
        Err(status) => node_reply(request, cluster, replica, status, Vec::new()).into(),
    }
}

/// A whole batch of at least this many bytes goes out as a slice of its read; a smaller one is
/// copied into the part being gathered. A reply's parts are then at most two per this many
/// bytes of it (a slice and the gathered bytes before it), about 33 for the largest poll
/// (`POLL_BYTES_MAX`), while a copy costs less than a write of its own would.
const SLICED_BATCH_MIN: usize = 16 << 10;

/// The bytes of the whole batches of at least `SLICED_BATCH_MIN` the poll answers with: what a
/// reply in parts would hold as slices of its read.
fn sliced_bytes(polled: &PollReply) -> usize {
    let (from, to) = (polled.start, polled.start + polled.count as u64);
    let (mut total, mut at) = (0, 0);
    while at < polled.batches.len() {
        let Ok(header) = batch::BatchHeader::decode(&polled.batches[at..]) else { break };
        let length = header.batch_length as usize;
        if length == 0 || length > polled.batches.len() - at {
            break;
        }
        if length >= SLICED_BATCH_MIN && header.base_offset >= from && header.end_offset() <= to {
            total += length;
        }
        at += length;
    }
    total
}

/// The batches of a reply going out in parts, in order.
struct ReplyParts {
    /// Whole batches of at least this many bytes are sliced (`usize::MAX`: none is).
    slice_min: usize,
    sliced: Vec<Bytes>,
    /// Small batches (and cut ones) since the last slice.
    gathered: Vec<u8>,
}

impl ReplyParts {
    fn slice(&mut self, batch: Bytes) {
        self.close_gathered();
        self.sliced.push(batch);
    }

    fn gather(&mut self, batch: &[u8]) {
        self.gathered.extend_from_slice(batch);
    }

    fn close_gathered(&mut self) {
        if !self.gathered.is_empty() {
            self.sliced.push(Bytes::from(std::mem::take(&mut self.gathered)));
        }
    }

    fn finish(mut self) -> Vec<Bytes> {
        self.close_gathered();
        self.sliced
    }
}

/// Appends a poll reply's body to `out` (what `poll_reply_body` returns); given `parts`, `out`
/// gets only the reply's head and the batches go to the parts.
fn write_poll_reply(polled: &PollReply, out: &mut Vec<u8>, mut parts: Option<&mut ReplyParts>) -> Result<(), u32> {
    let (from, to) = (polled.start, polled.start + polled.count as u64);
    let reply_at = out.len();
    let current_offset = if polled.current_offset == u64::MAX { 0 } else { polled.current_offset };
    out.extend_from_slice(&polled.partition.to_le_bytes());
    out.extend_from_slice(&current_offset.to_le_bytes());
    out.extend_from_slice(&0u32.to_le_bytes());
    let mut count = 0u64;
    let mut at = 0;
    while at < polled.batches.len() {
        let rest = &polled.batches[at..];
        let header = batch::BatchHeader::decode(rest).map_err(|_| STATUS_INVALID_COMMAND)?;
        let length = header.batch_length as usize;
        if length > rest.len() {
            return Err(STATUS_INVALID_COMMAND);
        }
        let one = &rest[..length];
        if header.base_offset >= from && header.end_offset() <= to {
            batch::check_client_batch(one).map_err(|_| STATUS_INVALID_COMMAND)?;
            match parts.as_deref_mut() {
                Some(parts) if length >= parts.slice_min => parts.slice(polled.batches.slice(at..at + length)),
                Some(parts) => parts.gather(one),
                None => out.extend_from_slice(one),
            }
            count += header.message_count as u64;
        } else if let Some(kept) = batch::slice(one, from, to).map_err(|_| STATUS_INVALID_COMMAND)? {
            count += batch::BatchHeader::decode(&kept).map_err(|_| STATUS_INVALID_COMMAND)?.message_count as u64;
            match parts.as_deref_mut() {
                Some(parts) => parts.gather(&kept),
                None => out.extend_from_slice(&kept),
            }
        }
        at += length;
    }
    let count = u32::try_from(count).map_err(|_| STATUS_INVALID_COMMAND)?;
    out[reply_at + 12..reply_at + POLL_REPLY_HEAD].copy_from_slice(&count.to_le_bytes());
    Ok(())
}

/// partition u32, current_offset u64, count u32.
const POLL_REPLY_HEAD: usize = 16;

/// The body the client decodes for the group's reply `group_reply` to a request of `kind`, or
/// the status the client gets instead (a refusal the group committed).
pub fn client_reply_body(kind: &ReplyKind, session: u64, group_reply: &[u8]) -> Result<Vec<u8>, u32> {
    let status = |reply: &[u8]| match reply_status(reply) {
        Ok(Some(status)) => partition_status_code(status),
        Ok(None) | Err(_) => STATUS_INVALID_COMMAND,
    };
    match kind {
        ReplyKind::Login { user_id } => {
            let reply = LoginReply {
                result: ResultSection::ok(),
                user_id: *user_id,
                session,
                server_protocol_version: SERVER_PROTOCOL_VERSION,
                server_version: Name::new(SERVER_VERSION).expect("a short name"),
            };
            Ok(reply.encode())
        }
        ReplyKind::Metadata => Ok(group_reply.to_vec()),
        ReplyKind::Send { stream, topic } => {
            let sent = decode_send_reply(group_reply).map_err(|_| status(group_reply))?;
            let appended = Appended {
                stream_id: *stream,
                topic_id: *topic,
                partition_id: sent.partition,
                base_offset: sent.base_offset,
            };
            Ok(SendMessagesReply { appended: vec![appended] }.encode())
        }
        ReplyKind::Poll => {
            let polled = decode_poll_reply(group_reply).map_err(|_| status(group_reply))?;
            poll_reply_body(&polled)
        }
        ReplyKind::Offset => match reply_status(group_reply) {
            Ok(None) => {
                let mut body = Vec::new();
                ResultSection::ok().write(&mut body);
                Ok(body)
            }
            _ => Err(status(group_reply)),
        },
        ReplyKind::ConsumerOffset => match decode_offset_reply(group_reply) {
            Ok(offset) => Ok(ConsumerOffsetReply {
                partition_id: offset.partition,
                current_offset: if offset.current_offset == u64::MAX { 0 } else { offset.current_offset },
                stored_offset: offset.stored,
            }
            .encode()),
            // Nothing stored: an empty body, the SDK's None.
            Err(_) if matches!(reply_status(group_reply), Ok(Some(PartitionStatus::OffsetNotFound))) => Ok(Vec::new()),
            Err(_) => Err(status(group_reply)),
        },
        ReplyKind::CreatedToken { token } => {
            let Ok((section, _)) = ResultSection::decode_prefix(group_reply) else {
                return Err(STATUS_INVALID_COMMAND);
            };
            let mut body = Vec::new();
            section.write(&mut body);
            if section.is_ok() {
                CreatedPersonalAccessToken { token: Name::new(token.as_str()).expect("a short token") }
                    .write(&mut body);
            }
            Ok(body)
        }
        // Answered by the node once every partition is empty (see `Node`).
        ReplyKind::Purge { reply, .. } => Ok(reply.clone()),
        ReplyKind::PurgePartition { .. } => match reply_status(group_reply) {
            Ok(None) => Ok(Vec::new()),
            _ => Err(status(group_reply)),
        },
    }
}

/// A reply frame the node makes itself for `request`: a refusal (`status` non-zero, no body),
/// or an answer it holds (a read, a pong, a logout).
pub fn node_reply(request: &Header, cluster: u128, replica: u8, status: u32, body: Vec<u8>) -> Vec<u8> {
    assert!(status == 0 || body.is_empty(), "a refusal carries no body");
    let mut frame = Vec::with_capacity(HEADER_SIZE + body.len());
    frame.resize(HEADER_SIZE, 0);
    frame.extend_from_slice(&body);
    node_reply_in_place(request, cluster, replica, status, frame)
}

/// `node_reply` for a `frame` whose body already follows `HEADER_SIZE` bytes of room: the header
/// is written there. Only the header is sealed: the frame goes from this process to a client over
/// its one TCP connection, and a client checks no body checksum (a zero one is one its sender left
/// out, `PROTOCOL.md`), so hashing a poll's megabytes again would buy nothing.
pub fn node_reply_in_place(request: &Header, cluster: u128, replica: u8, status: u32, frame: Vec<u8>) -> Vec<u8> {
    assert!(frame.len() >= HEADER_SIZE, "room for the header");
    assert!(status == 0 || frame.len() == HEADER_SIZE, "a refusal carries no body");
    let body_len = frame.len() - HEADER_SIZE;
    reply_header_into(request, cluster, replica, status, frame, body_len)
}

/// The head of a successful reply whose body is `body_len` bytes, of which `head` holds the first
/// after `HEADER_SIZE` bytes of room (the rest follows it in parts): the header is written there.
fn node_reply_head(request: &Header, cluster: u128, replica: u8, head: Vec<u8>, body_len: usize) -> Vec<u8> {
    assert!(head.len() >= HEADER_SIZE && head.len() - HEADER_SIZE <= body_len, "room for the header");
    reply_header_into(request, cluster, replica, 0, head, body_len)
}

fn reply_header_into(
    request: &Header,
    cluster: u128,
    replica: u8,
    status: u32,
    mut frame: Vec<u8>,
    body_len: usize,
) -> Vec<u8> {
    let mut header = Header::new(Command::Reply, cluster, replica);
    header.client = request.client;
    header.parent = request.parent;
    header.request = request.request;
    header.operation = request.operation;
    header.session = request.session;
    header.status = status;
    header.seal_header_only(body_len);
    frame[..HEADER_SIZE].copy_from_slice(&header.encode());
    frame
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Stamped batches of `sizes` (messages, payload bytes each) back to back from offset 0, as a
    /// read brings them in.
    fn log_of(sizes: &[(u32, usize)]) -> Vec<u8> {
        let mut log = Vec::new();
        let mut offset = 0u64;
        for &(messages, payload) in sizes {
            let mut builder = batch::BatchBuilder::new();
            for index in 0..messages {
                builder.push(offset as u128 + index as u128, &vec![index as u8; payload], b"");
            }
            let mut one = builder.finish(5);
            batch::stamp(&mut one, 1, offset, 1_000).expect("a valid batch");
            log.extend_from_slice(&one);
            offset += messages as u64;
        }
        log
    }

    fn poll_request() -> Header {
        let mut request = Header::new(Command::Request, 9, 0);
        request.request = 4;
        request.operation = 2;
        request
    }

    proptest! {
        /// A reply in parts is, joined, exactly the reply built in one buffer, whatever batches
        /// it slices, gathers or cuts; and its parts stay few.
        #[test]
        fn a_reply_in_parts_is_the_reply_in_one_buffer(
            sizes in proptest::collection::vec((1u32..6, prop_oneof![0usize..300, 4000usize..9000]), 1..12),
            start_at in 0.0f64..1.0,
            count_share in 0.0f64..1.0,
        ) {
            let log = log_of(&sizes);
            let total: u64 = sizes.iter().map(|&(messages, _)| messages as u64).sum();
            let start = ((total as f64) * start_at) as u64 % total;
            let count = (((total - start) as f64 * count_share) as u32).max(1);
            let polled = PollReply { partition: 3, current_offset: total - 1, start, count, batches: Bytes::from(log) };
            let request = poll_request();
            let frame = poll_reply_frame(&request, 9, 1, &polled);
            let whole = node_reply(&request, 9, 1, 0, poll_reply_body(&polled).expect("a reply"));
            prop_assert!(frame.tail.len() <= 2 * frame.len() / SLICED_BATCH_MIN + 1);
            prop_assert_eq!(frame.into_whole(), whole);
        }
    }

    #[test]
    fn a_reply_that_would_pin_a_read_twice_its_size_is_gathered_whole() {
        // A poll of the last message of a large batch and one whole 20 KB batch after it: the
        // slice would pin the large batch too.
        let log = Bytes::from(log_of(&[(100, 1000), (4, 5000)]));
        let polled = PollReply { partition: 3, current_offset: 103, start: 99, count: 5, batches: log.clone() };
        let frame = poll_reply_frame(&poll_request(), 9, 1, &polled);
        let read = log.as_ptr() as usize..log.as_ptr() as usize + log.len();
        assert!(frame.tail.iter().all(|part| !read.contains(&(part.as_ptr() as usize))), "no part pins the read");
        let whole = node_reply(&poll_request(), 9, 1, 0, poll_reply_body(&polled).expect("a reply"));
        assert_eq!(frame.into_whole(), whole);
    }

    #[test]
    fn a_large_batch_goes_out_as_a_slice_of_its_read_and_small_ones_gathered() {
        let log = Bytes::from(log_of(&[(2, 100), (4, 8000), (1, 10), (1, 10)]));
        let polled = PollReply { partition: 3, current_offset: 7, start: 0, count: 8, batches: log.clone() };
        let frame = poll_reply_frame(&poll_request(), 9, 1, &polled);
        assert_eq!(frame.head.len(), HEADER_SIZE + POLL_REPLY_HEAD);
        assert_eq!(frame.tail.len(), 3, "the small first batch, the large one, the two small last ones");
        let large = &frame.tail[1];
        assert!(large.len() >= SLICED_BATCH_MIN);
        let read = log.as_ptr() as usize..log.as_ptr() as usize + log.len();
        assert!(read.contains(&(large.as_ptr() as usize)), "the large batch is not a copy");
        assert!(!read.contains(&(frame.tail[0].as_ptr() as usize)));
    }
}
