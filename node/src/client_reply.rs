//! The replies a client decodes: a group's reply to a request the node made on a client's
//! behalf, turned into the body of the command the client sent (`PROTOCOL.md`, "Bodies"), and
//! the frames of the node's own answers (refusals, reads, pongs).
//!
//! The reply header carries the client's own request number and operation: an Iggy SDK reads
//! the operation byte to know whether a result section leads the body (`PROTOCOL.md`, "Reply"),
//! so a poll answered by a partition group (operation 163 inside the cluster) goes back as the
//! read (operation 2) the client sent.

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
/// chosen, batches cut where the poll starts and ends, a whole batch copied once.
pub fn poll_reply_body(polled: &PollReply) -> Result<Vec<u8>, u32> {
    let mut body = Vec::with_capacity(POLL_REPLY_HEAD + polled.batches.len());
    write_poll_reply(polled, &mut body)?;
    Ok(body)
}

/// A local poll's whole reply frame for `request`: the body is written once, after room for the
/// header, and the frame goes out as it is (`node_reply_in_place`); a refusal if the batches do
/// not make a reply.
pub fn poll_reply_frame(request: &Header, cluster: u128, replica: u8, polled: &PollReply) -> Vec<u8> {
    let mut frame = Vec::with_capacity(HEADER_SIZE + POLL_REPLY_HEAD + polled.batches.len());
    frame.resize(HEADER_SIZE, 0);
    match write_poll_reply(polled, &mut frame) {
        Ok(()) => node_reply_in_place(request, cluster, replica, 0, frame),
        Err(status) => node_reply(request, cluster, replica, status, Vec::new()),
    }
}

/// Appends a poll reply's body to `out` (what `poll_reply_body` returns).
fn write_poll_reply(polled: &PollReply, out: &mut Vec<u8>) -> Result<(), u32> {
    let (from, to) = (polled.start, polled.start + polled.count as u64);
    let head = out.len();
    let current_offset = if polled.current_offset == u64::MAX { 0 } else { polled.current_offset };
    out.extend_from_slice(&polled.partition.to_le_bytes());
    out.extend_from_slice(&current_offset.to_le_bytes());
    out.extend_from_slice(&0u32.to_le_bytes());
    let mut count = 0u64;
    let mut rest = &polled.batches[..];
    while !rest.is_empty() {
        let header = batch::BatchHeader::decode(rest).map_err(|_| STATUS_INVALID_COMMAND)?;
        let length = header.batch_length as usize;
        if length > rest.len() {
            return Err(STATUS_INVALID_COMMAND);
        }
        let (one, tail) = rest.split_at(length);
        if header.base_offset >= from && header.end_offset() <= to {
            batch::check_client_batch(one).map_err(|_| STATUS_INVALID_COMMAND)?;
            out.extend_from_slice(one);
            count += header.message_count as u64;
        } else if let Some(kept) = batch::slice(one, from, to).map_err(|_| STATUS_INVALID_COMMAND)? {
            count += batch::BatchHeader::decode(&kept).map_err(|_| STATUS_INVALID_COMMAND)?.message_count as u64;
            out.extend_from_slice(&kept);
        }
        rest = tail;
    }
    let count = u32::try_from(count).map_err(|_| STATUS_INVALID_COMMAND)?;
    out[head + 12..head + POLL_REPLY_HEAD].copy_from_slice(&count.to_le_bytes());
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
pub fn node_reply_in_place(request: &Header, cluster: u128, replica: u8, status: u32, mut frame: Vec<u8>) -> Vec<u8> {
    assert!(frame.len() >= HEADER_SIZE, "room for the header");
    assert!(status == 0 || frame.len() == HEADER_SIZE, "a refusal carries no body");
    let mut header = Header::new(Command::Reply, cluster, replica);
    header.client = request.client;
    header.parent = request.parent;
    header.request = request.request;
    header.operation = request.operation;
    header.session = request.session;
    header.status = status;
    header.seal_header_only(frame.len() - HEADER_SIZE);
    frame[..HEADER_SIZE].copy_from_slice(&header.encode());
    frame
}
