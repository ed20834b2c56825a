//! One bench connection: a TCP stream on glommio speaking the client protocol (`PROTOCOL.md`)
//! with the project's own codec, one request in flight. It logs in, runs the setup's metadata
//! commands, and sends the hot path's frames, which an actor builds once and patches in place
//! (`SendFrame`, `PollFrame`): the hot path allocates nothing per request, let alone per
//! message, and reads every reply into one reused buffer.

use std::fmt;

use futures_lite::{AsyncReadExt, AsyncWriteExt};
use glommio::net::TcpStream;

use vireo_node::metadata_plane::operation_of;
use vireo_node::node::OPERATION_NON_REPLICATED;
use vireo_node::partition::request::OPERATION_SEND_MESSAGES;
use vireo_protocol::header::{Command, Header, Message};
use vireo_protocol::request::OPERATION_REGISTER;
use vireo_protocol::wire::{
    self, ClientRequest, Identifier, LoginRegister, Name, PollMessages, SendMessages, ShortBytes,
};
use vireo_storage::batch::{stamp, BATCH_HEADER_SIZE, MESSAGE_FRAME_SIZE};
use vireo_storage::layout::HEADER_SIZE;

/// The protocol version this bench speaks (0.11.0, `major << 20 | minor << 10 | patch`).
const PROTOCOL_VERSION: u32 = 0x2C00;
/// Where the size of a frame is, in its header.
const SIZE_AT: usize = 48;
/// Where a request's number is, in a request's header and in a reply's.
const REQUEST_AT: usize = 168;
const REPLY_REQUEST_AT: usize = 200;
/// Where a reply's status is, in its header.
const STATUS_AT: usize = 216;
/// A reply larger than this is refused (the protocol's frame cap).
const REPLY_SIZE_MAX: usize = 64 << 20;
/// A batch header's origin timestamp (microseconds), from the batch's start.
const ORIGIN_TIMESTAMP_AT: usize = 24;

#[derive(Debug)]
pub enum ClientError {
    Io(String),
    /// The server refused a request: its status code and what was asked.
    Status {
        status: u32,
        what: &'static str,
    },
    Protocol(String),
}

impl fmt::Display for ClientError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClientError::Io(reason) => write!(f, "{reason}"),
            ClientError::Status { status, what } => write!(f, "{what} refused with status {status}"),
            ClientError::Protocol(reason) => write!(f, "the server's reply is not what the protocol says: {reason}"),
        }
    }
}

impl std::error::Error for ClientError {}

impl ClientError {
    pub fn status(&self) -> Option<u32> {
        match self {
            ClientError::Status { status, .. } => Some(*status),
            _ => None,
        }
    }
}

fn io_error(what: &str, error: impl fmt::Display) -> ClientError {
    ClientError::Io(format!("{what}: {error}"))
}

pub struct Connection {
    stream: TcpStream,
    client: u128,
    session: u64,
    /// The last request number used; every request takes the next.
    request: u64,
    /// The last reply's body (reused).
    reply: Vec<u8>,
}

impl Connection {
    pub async fn connect(address: &str, nodelay: bool, client: u128) -> Result<Connection, ClientError> {
        assert_ne!(client, 0, "a client id is non-zero");
        let stream =
            TcpStream::connect(address).await.map_err(|error| io_error(&format!("connect to {address}"), error))?;
        stream.set_nodelay(nodelay).map_err(|error| io_error("TCP_NODELAY", error))?;
        Ok(Connection { stream, client, session: 0, request: 0, reply: Vec::new() })
    }

    fn header(&self, operation: u8, request: u64) -> Header {
        let mut header = Header::new(Command::Request, 0, 0);
        header.client = self.client;
        header.operation = operation;
        header.request = request;
        header.session = self.session;
        header
    }

    /// Writes one frame and reads its reply into `self.reply`; a non-zero status is an error.
    async fn call(&mut self, frame: &[u8], what: &'static str) -> Result<&[u8], ClientError> {
        self.stream.write_all(frame).await.map_err(|error| io_error(what, error))?;
        self.read_reply(what).await?;
        Ok(&self.reply)
    }

    async fn read_reply(&mut self, what: &'static str) -> Result<(), ClientError> {
        let mut header = [0u8; HEADER_SIZE];
        self.stream.read_exact(&mut header).await.map_err(|error| io_error(what, error))?;
        let size = u32::from_le_bytes(header[SIZE_AT..SIZE_AT + 4].try_into().expect("4 bytes")) as usize;
        if !(HEADER_SIZE..=REPLY_SIZE_MAX).contains(&size) {
            return Err(ClientError::Protocol(format!("a frame of {size} bytes")));
        }
        self.reply.resize(size - HEADER_SIZE, 0);
        self.stream.read_exact(&mut self.reply).await.map_err(|error| io_error(what, error))?;
        match Command::from_u8(header[60]) {
            Some(Command::Reply) => {}
            Some(Command::Eviction) => return Err(ClientError::Io(format!("{what}: the server evicted the session"))),
            other => return Err(ClientError::Protocol(format!("a {other:?} frame where a reply belongs"))),
        }
        let request = u64::from_le_bytes(header[REPLY_REQUEST_AT..REPLY_REQUEST_AT + 8].try_into().expect("8 bytes"));
        if request != self.request {
            return Err(ClientError::Protocol(format!(
                "the reply to request {request} while {} is in flight",
                self.request
            )));
        }
        let status = u32::from_le_bytes(header[STATUS_AT..STATUS_AT + 4].try_into().expect("4 bytes"));
        if status != 0 {
            return Err(ClientError::Status { status, what });
        }
        // Results of metadata commands: `[count u32][count x (index u32, result u32)]`.
        Ok(())
    }

    pub async fn login(&mut self, username: &str, password: &str) -> Result<(), ClientError> {
        let login = LoginRegister {
            protocol_version: PROTOCOL_VERSION,
            sdk_name: Name::new("vireo-bench").expect("a name"),
            sdk_version: Name::new(env!("CARGO_PKG_VERSION")).expect("a name"),
            username: Name::new(username).map_err(|error| ClientError::Io(format!("username: {error}")))?,
            password: ShortBytes::new(password.as_bytes().to_vec())
                .map_err(|error| ClientError::Io(format!("password: {error}")))?,
            context: Vec::new(),
        };
        let body = ClientRequest::LoginRegister(login).encode();
        let mut header = self.header(OPERATION_REGISTER, 0);
        header.session = 0;
        header.parent = xxhash_rust::xxh3::xxh3_64(&body) as u128;
        self.request = 0;
        let frame = Message::new(header, body).encode();
        let reply = self.call(&frame, "login").await?;
        let (results, rest) =
            wire::ResultSection::decode_prefix(reply).map_err(|error| ClientError::Protocol(error.to_string()))?;
        if !results.is_ok() {
            return Err(ClientError::Status {
                status: results.entries.first().map_or(1, |entry| entry.result),
                what: "login",
            });
        }
        // After the result section: user_id u32, then the session u64.
        let session = rest.get(4..12).ok_or_else(|| ClientError::Protocol("a login reply without a session".into()))?;
        self.session = u64::from_le_bytes(session.try_into().expect("8 bytes"));
        Ok(())
    }

    /// A metadata command (create, delete, join): replicated, numbered, its body checksummed.
    pub async fn metadata(&mut self, request: ClientRequest, what: &'static str) -> Result<(), ClientError> {
        let operation = operation_of(request.command_code()).expect("a metadata command");
        let body = request.encode();
        self.request += 1;
        let mut header = self.header(operation, self.request);
        header.parent = xxhash_rust::xxh3::xxh3_64(&body) as u128;
        let frame = Message::new(header, body).encode();
        let reply = self.call(&frame, what).await?;
        let (results, _) =
            wire::ResultSection::decode_prefix(reply).map_err(|error| ClientError::Protocol(error.to_string()))?;
        match results.entries.first() {
            Some(entry) if !results.is_ok() => Err(ClientError::Status { status: entry.result, what }),
            _ => Ok(()),
        }
    }

    /// A read (get_stream and the like): its reply's body (the reference answers a get of
    /// something that does not exist with an empty one). Setup only, so the copy is no cost.
    pub async fn read(&mut self, request: ClientRequest, what: &'static str) -> Result<Vec<u8>, ClientError> {
        let body = request.encode();
        self.request += 1;
        let mut header = self.header(OPERATION_NON_REPLICATED, self.request);
        header.command_code = request.command_code();
        let frame = Message::new(header, body).encode();
        self.call(&frame, what).await.map(<[u8]>::to_vec)
    }

    /// The partitions of the group this connection's client is assigned (sync_consumer_group);
    /// `None` when it is not a member.
    pub async fn assignment(
        &mut self,
        stream: Identifier,
        topic: Identifier,
        group: Identifier,
    ) -> Result<Option<Vec<u32>>, ClientError> {
        let body = self.read(ClientRequest::SyncConsumerGroup { stream, topic, group }, "sync_consumer_group").await?;
        if body.is_empty() {
            return Ok(None);
        }
        let reply = wire::SyncConsumerGroupReply::read(&mut wire::reader::Reader::new(&body))
            .map_err(|error| ClientError::Protocol(format!("sync_consumer_group: {error}")))?;
        Ok(Some(reply.partitions))
    }

    /// A send_messages frame built once: `send` patches its request number and the batch's
    /// origin timestamp and writes it.
    pub fn send_frame(&self, send: SendMessages) -> SendFrame {
        let batch_len = send.batch().len();
        let header = self.header(OPERATION_SEND_MESSAGES, 0);
        let mut frame = Message::new(header, ClientRequest::SendMessages(send).encode()).encode();
        unseal(&mut frame);
        SendFrame { batch_at: frame.len() - batch_len, frame }
    }

    /// Sends the frame's batch stamped with `origin_timestamp` (microseconds) and waits for the
    /// reply.
    pub async fn send(&mut self, frame: &mut SendFrame, origin_timestamp: u64) -> Result<(), ClientError> {
        self.request += 1;
        frame.frame[REQUEST_AT..REQUEST_AT + 8].copy_from_slice(&self.request.to_le_bytes());
        let at = frame.batch_at + ORIGIN_TIMESTAMP_AT;
        frame.frame[at..at + 8].copy_from_slice(&origin_timestamp.to_le_bytes());
        // The checksums an SDK computes (the reference refuses a batch without them): each
        // message's, and the batch's, which covers the origin timestamp. Partition, base offset
        // and base timestamp stay 0: they are the server's to stamp.
        stamp(&mut frame.frame[frame.batch_at..], 0, 0, 0)
            .map_err(|error| ClientError::Protocol(format!("the bench's own batch: {error}")))?;
        self.stream.write_all(&frame.frame).await.map_err(|error| io_error("send_messages", error))?;
        self.read_reply("send_messages").await
    }

    /// A poll_messages frame built once: `poll` patches its request number and offset.
    pub fn poll_frame(&self, poll: PollMessages) -> PollFrame {
        let mut header = self.header(OPERATION_NON_REPLICATED, 0);
        header.command_code = wire::command::POLL_MESSAGES;
        let mut frame = Message::new(header, ClientRequest::PollMessages(poll).encode()).encode();
        unseal(&mut frame);
        // The body ends `[strategy kind u8][value u64][count u32][auto_commit u8]`.
        PollFrame { value_at: frame.len() - 13, frame }
    }

    /// Polls with the strategy's value set to `value` (the offset, for the offset strategy).
    pub async fn poll(&mut self, frame: &mut PollFrame, value: u64) -> Result<Polled, ClientError> {
        self.request += 1;
        frame.frame[REQUEST_AT..REQUEST_AT + 8].copy_from_slice(&self.request.to_le_bytes());
        frame.frame[frame.value_at..frame.value_at + 8].copy_from_slice(&value.to_le_bytes());
        self.stream.write_all(&frame.frame).await.map_err(|error| io_error("poll_messages", error))?;
        self.read_reply("poll_messages").await?;
        polled(&self.reply).map_err(ClientError::Protocol)
    }
}

/// Clears a frame's header and body checksums: a client may send zeros (`PROTOCOL.md`), and a
/// frame patched in place would no longer match them.
fn unseal(frame: &mut [u8]) {
    frame[..32].fill(0);
}

pub struct SendFrame {
    frame: Vec<u8>,
    batch_at: usize,
}

pub struct PollFrame {
    frame: Vec<u8>,
    value_at: usize,
}

/// The partition id of an empty group poll that tells the member to sync its assignment.
pub const RESYNC_PARTITION: u32 = u32::MAX;

/// What one poll returned.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Polled {
    /// The partition polled; `RESYNC_PARTITION` in an empty reply to a group member whose
    /// assignment changed.
    pub partition_id: u32,
    pub messages: u64,
    pub payload_bytes: u64,
    /// The first message's offset and its batch's origin timestamp (microseconds), when any.
    pub first_offset: Option<u64>,
    pub first_origin_timestamp: u64,
}

/// Walks a poll reply's batches without copying them: `[partition_id u32][current_offset u64]
/// [count u32]` then stamped batches (`PROTOCOL.md`, "Message batches").
pub fn polled(body: &[u8]) -> Result<Polled, String> {
    if body.len() < 16 {
        return Err(format!("a poll reply of {} bytes", body.len()));
    }
    let count = u32::from_le_bytes(body[12..16].try_into().expect("4 bytes")) as u64;
    let mut polled =
        Polled { partition_id: u32::from_le_bytes(body[..4].try_into().expect("4 bytes")), ..Polled::default() };
    let mut rest = &body[16..];
    let read_u32 = |bytes: &[u8], at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes"));
    let read_u64 = |bytes: &[u8], at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"));
    while !rest.is_empty() {
        if rest.len() < BATCH_HEADER_SIZE {
            return Err("a batch cut short".to_string());
        }
        let length = read_u64(rest, 32) as usize;
        if length < BATCH_HEADER_SIZE || length > rest.len() {
            return Err(format!("a batch of {length} bytes in {} left", rest.len()));
        }
        if polled.first_offset.is_none() {
            polled.first_offset = Some(read_u64(rest, 8));
            polled.first_origin_timestamp = read_u64(rest, ORIGIN_TIMESTAMP_AT);
        }
        let messages = read_u32(rest, 48);
        let mut at = BATCH_HEADER_SIZE;
        for _ in 0..messages {
            if at + MESSAGE_FRAME_SIZE > length {
                return Err("a message frame cut short".to_string());
            }
            let headers = read_u32(rest, at + 32) as usize;
            let payload = read_u32(rest, at + 36) as usize;
            polled.payload_bytes += payload as u64;
            at += MESSAGE_FRAME_SIZE + payload + headers;
        }
        if at != length {
            return Err("a batch whose messages do not fill it".to_string());
        }
        polled.messages += messages as u64;
        rest = &rest[length..];
    }
    if polled.messages != count {
        return Err(format!("a poll reply that says {count} messages and holds {}", polled.messages));
    }
    Ok(polled)
}

#[cfg(test)]
mod tests {
    use super::*;
    use vireo_storage::batch::BatchBuilder;

    #[test]
    fn a_poll_reply_is_walked_to_its_messages_and_payload_bytes() {
        let mut builder = BatchBuilder::new();
        builder.push(1, &[7; 100], &[1, 2, 3]);
        builder.push(2, &[8; 50], &[]);
        let mut batch = builder.finish(1234);
        batch[8..16].copy_from_slice(&40u64.to_le_bytes());
        let mut body = Vec::new();
        body.extend_from_slice(&3u32.to_le_bytes());
        body.extend_from_slice(&41u64.to_le_bytes());
        body.extend_from_slice(&2u32.to_le_bytes());
        body.extend_from_slice(&batch);
        let polled = polled(&body).expect("walks");
        assert_eq!(
            polled,
            Polled {
                partition_id: 3,
                messages: 2,
                payload_bytes: 150,
                first_offset: Some(40),
                first_origin_timestamp: 1234
            }
        );
        // A count that disagrees, and a batch cut short, are refused.
        let mut wrong = body.clone();
        wrong[12..16].copy_from_slice(&3u32.to_le_bytes());
        assert!(super::polled(&wrong).is_err());
        assert!(super::polled(&body[..body.len() - 1]).is_err());
        let empty = [0u8; 16];
        assert_eq!(super::polled(&empty), Ok(Polled::default()));
    }
}
