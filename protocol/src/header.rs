//! The 256-byte message header every frame starts with, both directions, client and replica.
//!
//! Common part (`PROTOCOL.md`): checksum u128 @0, checksum_body u128 @16, cluster u128 @32,
//! size u32 @48, view u32 @52, release u32 @56, command u8 @60, replica u8 @61, zero to 128.
//!
//! Bytes 128..256 depend on the command:
//! - Request (5), as `PROTOCOL.md`: client u128 @128, request_checksum u128 @144, timestamp u64 @160,
//!   request u64 @168, operation u8 @176, session u64 @184, user_id u32 @192, command_code u32 @196;
//!   then Vireo's origin @200 (see below) and batch_at u32 @204 (a request inside a prepare's body
//!   only: where in its body a message batch starts that its own checksums vouch for, set by the
//!   primary, see `prepare_body`; zero everywhere else).
//! - Eviction (13), as `PROTOCOL.md`: client u128 @128, server_protocol_version u32 @144,
//!   min version u32 @148, origin @152, reason u8 @255.
//! - Reply (8) and every replica command, one layout (a superset of the Reply of `PROTOCOL.md`):
//!   parent u128 @128 (Reply: request_checksum), context u128 @144, client u128 @160, op u64 @176,
//!   commit u64 @184, timestamp u64 @192, request u64 @200, operation u8 @208, log_view u32 @212,
//!   status u32 @216, session u64 @224, checkpoint_op u64 @232, count u32 @240, origin @244, cursor
//!   u64 @248 (a prepare's state machine cursor after its op, see `StateMachine::prepare`; zero in
//!   every other command).
//!
//! The origin (4 bytes: present u8, node u8, shard u16) says which node and shard hold the client
//! connection a request came in on; the node that admits a client's frame stamps it, a replica
//! copies it from a request into the reply or eviction it answers with, and the node that holds
//! the connection clears it before the client sees the frame. Clients send zeros there.
//!
//! Between replicas `checksum` is xxh3-128 of bytes 16..256 and `checksum_body` xxh3-128 of the
//! body (a prepare's leaves out the messages of the batches its requests vouch for, which their
//! own checksums cover: `prepare_body`), so a header commits to its body and, through `parent`, a
//! prepare to the whole log before it. Clients may send both as 0.

use vireo_storage::checksum::checksum128;
use vireo_storage::layout::HEADER_SIZE;

/// Set in `Header::group` when the frame names its group; namespaces never use bit 62.
pub const GROUP_NAMED: u64 = 1 << 62;

/// The `group` field that names a namespace's consensus group.
pub fn group_of(namespace: vireo_io::Namespace) -> u64 {
    assert_eq!(namespace.0 & GROUP_NAMED, 0);
    namespace.0 | GROUP_NAMED
}

/// The namespace a `group` field names, if it names one.
pub fn group_namespace(group: u64) -> Option<vireo_io::Namespace> {
    (group & GROUP_NAMED != 0).then_some(vireo_io::Namespace(group & !GROUP_NAMED))
}

/// Where a client's connection lives: the node and the shard that admitted its request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Origin {
    pub node: u8,
    pub shard: u16,
}

fn put_origin(bytes: &mut [u8], at: usize, origin: Option<Origin>) {
    if let Some(origin) = origin {
        bytes[at] = 1;
        bytes[at + 1] = origin.node;
        bytes[at + 2..at + 4].copy_from_slice(&origin.shard.to_le_bytes());
    }
}

/// `Err(offset)` for a present byte that is neither 0 nor 1, or an absent origin with bytes set.
fn get_origin(bytes: &[u8], at: usize) -> Result<Option<Origin>, usize> {
    match bytes[at] {
        0 => match (at + 1..at + 4).find(|at| bytes[*at] != 0) {
            None => Ok(None),
            Some(at) => Err(at),
        },
        1 => Ok(Some(Origin { node: bytes[at + 1], shard: u16::from_le_bytes([bytes[at + 2], bytes[at + 3]]) })),
        _ => Err(at),
    }
}

/// No frame may be larger (`PROTOCOL.md`: cap a frame at 64 MiB).
pub const FRAME_SIZE_MAX: u32 = 64 * 1024 * 1024;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum Command {
    Ping = 1,
    Pong = 2,
    PingClient = 3,
    PongClient = 4,
    Request = 5,
    Prepare = 6,
    PrepareOk = 7,
    Reply = 8,
    Commit = 9,
    StartViewChange = 10,
    DoViewChange = 11,
    StartView = 12,
    Eviction = 13,
    RequestStartView = 17,
    RequestPrepares = 18,
    RepairPrepare = 19,
    NackPrepare = 20,
    RangeEvicted = 21,
    RequestCheckpoint = 22,
    Checkpoint = 23,
    RequestHeaders = 24,
    Headers = 25,
    /// A partition group's segment log asks a peer's for batches it lacks (`op` the first offset
    /// wanted, `commit` the end): a log behind its machine after a state transfer or damage.
    RequestBatches = 26,
    /// The answer: whole stamped batches from `op` on in the body (empty: the peer holds none).
    Batches = 27,
    /// A prepare for the backup that forwarded its requests, without their bodies, which that
    /// backup kept (`replica::forwarded`).
    PrepareElided = 28,
}

impl Command {
    pub fn from_u8(value: u8) -> Option<Command> {
        use Command::*;
        Some(match value {
            1 => Ping,
            2 => Pong,
            3 => PingClient,
            4 => PongClient,
            5 => Request,
            6 => Prepare,
            7 => PrepareOk,
            8 => Reply,
            9 => Commit,
            10 => StartViewChange,
            11 => DoViewChange,
            12 => StartView,
            13 => Eviction,
            17 => RequestStartView,
            18 => RequestPrepares,
            19 => RepairPrepare,
            20 => NackPrepare,
            21 => RangeEvicted,
            22 => RequestCheckpoint,
            23 => Checkpoint,
            24 => RequestHeaders,
            25 => Headers,
            26 => RequestBatches,
            27 => Batches,
            28 => PrepareElided,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        use Command::*;
        match self {
            Ping => "ping",
            Pong => "pong",
            PingClient => "ping_client",
            PongClient => "pong_client",
            Request => "request",
            Prepare => "prepare",
            PrepareOk => "prepare_ok",
            Reply => "reply",
            Commit => "commit",
            StartViewChange => "start_view_change",
            DoViewChange => "do_view_change",
            StartView => "start_view",
            Eviction => "eviction",
            RequestStartView => "request_start_view",
            RequestPrepares => "request_prepares",
            RepairPrepare => "repair_prepare",
            NackPrepare => "nack_prepare",
            RangeEvicted => "range_evicted",
            RequestCheckpoint => "request_checkpoint",
            Checkpoint => "checkpoint",
            RequestHeaders => "request_headers",
            Headers => "headers",
            RequestBatches => "request_batches",
            Batches => "batches",
            PrepareElided => "prepare_elided",
        }
    }
}

/// Every field any command uses; a command's layout says which ones go on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    pub checksum: u128,
    pub checksum_body: u128,
    pub cluster: u128,
    pub size: u32,
    pub view: u32,
    pub release: u32,
    pub command: Command,
    pub replica: u8,
    /// Which consensus group a frame belongs to (Vireo's field in the common part's reserved
    /// bytes, @64): 0 for frames that do not name one (Iggy clients), else `GROUP_NAMED` | the
    /// group's namespace. Replicas stamp every frame they send with their own group.
    pub group: u64,
    pub parent: u128,
    pub context: u128,
    pub client: u128,
    pub op: u64,
    pub commit: u64,
    pub timestamp: u64,
    pub request: u64,
    pub operation: u8,
    pub log_view: u32,
    pub status: u32,
    pub session: u64,
    pub checkpoint_op: u64,
    pub count: u32,
    pub user_id: u32,
    pub command_code: u32,
    pub reason: u8,
    /// Requests, replies and evictions: where the client's connection lives (Vireo's).
    pub origin: Option<Origin>,
    /// A prepare's state machine cursor after its op (for a partition: the offset its next
    /// message gets), so that a new primary prepares on from its log's head without its bodies.
    pub cursor: u64,
    /// A request inside a prepare's body: where in its body the message batch starts that runs
    /// to the body's end and that its own checksums vouch for (`prepare_body`); 0 for none. Only
    /// the primary sets it, as it prepares the request.
    pub batch_at: u32,
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("frame of {got} bytes is shorter than the 256-byte header")]
    Short { got: usize },
    #[error("size field at offset 48 says {size} bytes, frame has {got}")]
    Size { size: u32, got: usize },
    #[error("unknown command {0} at offset 60")]
    Command(u8),
    #[error("non-zero reserved byte at offset {0}")]
    Reserved(usize),
    #[error("header checksum mismatch at offset 0")]
    Checksum,
    #[error("body checksum mismatch at offset 16")]
    ChecksumBody,
}

fn put_u128(bytes: &mut [u8], at: usize, value: u128) {
    bytes[at..at + 16].copy_from_slice(&value.to_le_bytes());
}
fn put_u64(bytes: &mut [u8], at: usize, value: u64) {
    bytes[at..at + 8].copy_from_slice(&value.to_le_bytes());
}
fn put_u32(bytes: &mut [u8], at: usize, value: u32) {
    bytes[at..at + 4].copy_from_slice(&value.to_le_bytes());
}
fn get_u128(bytes: &[u8], at: usize) -> u128 {
    u128::from_le_bytes(bytes[at..at + 16].try_into().unwrap())
}
fn get_u64(bytes: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap())
}
fn get_u32(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap())
}

enum Layout {
    Request,
    Eviction,
    Replica,
}

fn layout(command: Command) -> Layout {
    match command {
        Command::Request => Layout::Request,
        Command::Eviction => Layout::Eviction,
        _ => Layout::Replica,
    }
}

impl Header {
    pub fn new(command: Command, cluster: u128, replica: u8) -> Header {
        Header {
            checksum: 0,
            checksum_body: 0,
            cluster,
            size: HEADER_SIZE as u32,
            view: 0,
            release: 0,
            command,
            replica,
            group: 0,
            parent: 0,
            context: 0,
            client: 0,
            op: 0,
            commit: 0,
            timestamp: 0,
            request: 0,
            operation: 0,
            log_view: 0,
            status: 0,
            session: 0,
            checkpoint_op: 0,
            count: 0,
            user_id: 0,
            command_code: 0,
            reason: 0,
            origin: None,
            cursor: 0,
            batch_at: 0,
        }
    }

    /// Writes the header's bytes (with whatever checksums it holds).
    pub fn encode(&self) -> [u8; HEADER_SIZE] {
        let mut bytes = [0u8; HEADER_SIZE];
        put_u128(&mut bytes, 0, self.checksum);
        put_u128(&mut bytes, 16, self.checksum_body);
        put_u128(&mut bytes, 32, self.cluster);
        put_u32(&mut bytes, 48, self.size);
        put_u32(&mut bytes, 52, self.view);
        put_u32(&mut bytes, 56, self.release);
        bytes[60] = self.command as u8;
        bytes[61] = self.replica;
        put_u64(&mut bytes, 64, self.group);
        match layout(self.command) {
            Layout::Request => {
                put_u128(&mut bytes, 128, self.client);
                put_u128(&mut bytes, 144, self.parent);
                put_u64(&mut bytes, 160, self.timestamp);
                put_u64(&mut bytes, 168, self.request);
                bytes[176] = self.operation;
                put_u64(&mut bytes, 184, self.session);
                put_u32(&mut bytes, 192, self.user_id);
                put_u32(&mut bytes, 196, self.command_code);
                put_origin(&mut bytes, 200, self.origin);
                put_u32(&mut bytes, 204, self.batch_at);
            }
            Layout::Eviction => {
                put_u128(&mut bytes, 128, self.client);
                put_u32(&mut bytes, 144, self.status);
                put_u32(&mut bytes, 148, self.count);
                put_origin(&mut bytes, 152, self.origin);
                bytes[255] = self.reason;
            }
            Layout::Replica => {
                put_u128(&mut bytes, 128, self.parent);
                put_u128(&mut bytes, 144, self.context);
                put_u128(&mut bytes, 160, self.client);
                put_u64(&mut bytes, 176, self.op);
                put_u64(&mut bytes, 184, self.commit);
                put_u64(&mut bytes, 192, self.timestamp);
                put_u64(&mut bytes, 200, self.request);
                bytes[208] = self.operation;
                put_u32(&mut bytes, 212, self.log_view);
                put_u32(&mut bytes, 216, self.status);
                put_u64(&mut bytes, 224, self.session);
                put_u64(&mut bytes, 232, self.checkpoint_op);
                put_u32(&mut bytes, 240, self.count);
                put_origin(&mut bytes, 244, self.origin);
                put_u64(&mut bytes, 248, self.cursor);
            }
        }
        bytes
    }

    /// Reads a header without checking its checksums (see `Message::decode`). Never panics.
    pub fn decode(bytes: &[u8]) -> Result<Header, DecodeError> {
        if bytes.len() < HEADER_SIZE {
            return Err(DecodeError::Short { got: bytes.len() });
        }
        let command = Command::from_u8(bytes[60]).ok_or(DecodeError::Command(bytes[60]))?;
        if let Some(at) = (62..64).chain(72..128).find(|at| bytes[*at] != 0) {
            return Err(DecodeError::Reserved(at));
        }
        let mut header = Header::new(command, get_u128(bytes, 32), bytes[61]);
        header.group = get_u64(bytes, 64);
        header.checksum = get_u128(bytes, 0);
        header.checksum_body = get_u128(bytes, 16);
        header.size = get_u32(bytes, 48);
        header.view = get_u32(bytes, 52);
        header.release = get_u32(bytes, 56);
        let reserved = match layout(command) {
            Layout::Request => {
                header.client = get_u128(bytes, 128);
                header.parent = get_u128(bytes, 144);
                header.timestamp = get_u64(bytes, 160);
                header.request = get_u64(bytes, 168);
                header.operation = bytes[176];
                header.session = get_u64(bytes, 184);
                header.user_id = get_u32(bytes, 192);
                header.command_code = get_u32(bytes, 196);
                match get_origin(bytes, 200) {
                    Ok(origin) => header.origin = origin,
                    Err(at) => return Err(DecodeError::Reserved(at)),
                }
                header.batch_at = get_u32(bytes, 204);
                (177..184).chain(208..256).find(|at| bytes[*at] != 0)
            }
            Layout::Eviction => {
                header.client = get_u128(bytes, 128);
                header.status = get_u32(bytes, 144);
                header.count = get_u32(bytes, 148);
                header.reason = bytes[255];
                match get_origin(bytes, 152) {
                    Ok(origin) => header.origin = origin,
                    Err(at) => return Err(DecodeError::Reserved(at)),
                }
                (156..255).find(|at| bytes[*at] != 0)
            }
            Layout::Replica => {
                header.parent = get_u128(bytes, 128);
                header.context = get_u128(bytes, 144);
                header.client = get_u128(bytes, 160);
                header.op = get_u64(bytes, 176);
                header.commit = get_u64(bytes, 184);
                header.timestamp = get_u64(bytes, 192);
                header.request = get_u64(bytes, 200);
                header.operation = bytes[208];
                header.log_view = get_u32(bytes, 212);
                header.status = get_u32(bytes, 216);
                header.session = get_u64(bytes, 224);
                header.checkpoint_op = get_u64(bytes, 232);
                header.count = get_u32(bytes, 240);
                match get_origin(bytes, 244) {
                    Ok(origin) => header.origin = origin,
                    Err(at) => return Err(DecodeError::Reserved(at)),
                }
                header.cursor = get_u64(bytes, 248);
                (209..212).chain(220..224).find(|at| bytes[*at] != 0)
            }
        };
        if let Some(at) = reserved {
            return Err(DecodeError::Reserved(at));
        }
        Ok(header)
    }

    /// The checksum this header should carry: xxh3-128 of its bytes 16..256.
    pub fn calculate_checksum(&self) -> u128 {
        checksum128(&self.encode()[16..])
    }

    /// Seals a header over its body: size, body checksum, then header checksum.
    pub fn seal(&mut self, body: &[u8]) {
        self.size = (HEADER_SIZE + body.len()) as u32;
        self.checksum_body = match self.command {
            Command::Prepare => crate::prepare_body::checksum(body),
            _ => checksum128(body),
        };
        self.checksum = self.calculate_checksum();
    }

    /// Seals a request's header alone (size, no body checksum, header checksum): what goes from
    /// a client's connection to a group in this process, where no bit can change on the way.
    pub fn seal_header_only(&mut self, body_len: usize) {
        self.size = (HEADER_SIZE + body_len) as u32;
        self.checksum_body = 0;
        self.checksum = self.calculate_checksum();
    }

    /// A request leaving the process (to its group's primary on another node) carries its body's
    /// checksum: one sealed only for the process (`seal_header_only`) is sealed whole.
    pub fn seal_for_network(&mut self, body: &[u8]) {
        if self.checksum_body == 0 {
            self.seal(body);
        }
    }

    pub fn valid_checksum(&self) -> bool {
        self.checksum == self.calculate_checksum()
    }

    /// A prepare's body is checked through its vouched batches' own checksums (`prepare_body`).
    pub fn valid_checksum_body(&self, body: &[u8]) -> bool {
        match self.command {
            Command::Prepare => crate::prepare_body::valid(body, self.checksum_body),
            _ => self.checksum_body == checksum128(body),
        }
    }
}

/// A decoded frame: a header and its body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Message {
    pub header: Header,
    pub body: Vec<u8>,
}

/// The frame of a sealed header and its body, in one allocation and one copy of the body (the
/// body may be a prepare's megabyte: no `Message` needs to own a copy of it first).
pub fn encode_frame(header: &Header, body: &[u8]) -> Vec<u8> {
    assert_eq!(header.size as usize, HEADER_SIZE + body.len());
    let mut bytes = Vec::with_capacity(header.size as usize);
    bytes.extend_from_slice(&header.encode());
    bytes.extend_from_slice(body);
    bytes
}

impl Message {
    /// A sealed message (checksummed header and body).
    pub fn new(mut header: Header, body: Vec<u8>) -> Message {
        header.seal(&body);
        Message { header, body }
    }

    pub fn encode(&self) -> Vec<u8> {
        encode_frame(&self.header, &self.body)
    }

    /// Decodes a frame and checks its checksums. `checksummed`: a replica frame, whose checksums
    /// must be right; a client frame may carry zero checksums instead.
    pub fn decode(bytes: &[u8], checksummed: bool) -> Result<Message, DecodeError> {
        let (header, body) = Message::decode_borrowed(bytes, checksummed)?;
        Ok(Message { header, body: body.to_vec() })
    }

    /// As `decode`, with the body left where it is.
    pub fn decode_borrowed(bytes: &[u8], checksummed: bool) -> Result<(Header, &[u8]), DecodeError> {
        let header = Header::decode(bytes)?;
        if header.size as usize != bytes.len() || header.size > FRAME_SIZE_MAX {
            return Err(DecodeError::Size { size: header.size, got: bytes.len() });
        }
        let body = &bytes[HEADER_SIZE..];
        // A frame that need not be checksummed (a client's request) is checked as far as it is:
        // a zero checksum is one its sender left out. A request that never left the process has
        // only its header sealed; one that goes on to another node is sealed whole first
        // (`Header::seal_for_network`).
        let header_checked = checksummed || header.checksum != 0;
        let body_checked = checksummed || header.checksum_body != 0;
        // Over the bytes as received, not as re-encoded: no bit may escape the checksum.
        if header_checked && header.checksum != checksum128(&bytes[16..HEADER_SIZE]) {
            return Err(DecodeError::Checksum);
        }
        if body_checked && !header.valid_checksum_body(body) {
            return Err(DecodeError::ChecksumBody);
        }
        Ok((header, body))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const COMMANDS: [u8; 22] = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 17, 18, 19, 20, 21, 22, 23, 24, 25];

    prop_compose! {
        fn arb_header()(
            command in proptest::sample::select(COMMANDS.to_vec()),
            fields in any::<(u128, u128, u128, u32, u32, u8)>(),
            numbers in any::<(u64, u64, u64, u64, u8, u32, u32, u64, u64, u32)>(),
            origin in proptest::option::of(any::<(u8, u16)>()),
        ) -> Header {
            let command = Command::from_u8(command).unwrap();
            let mut header = Header::new(command, fields.0, fields.5);
            header.view = fields.3;
            header.release = fields.4;
            if matches!(command, Command::Request | Command::Reply | Command::Eviction) {
                header.origin = origin.map(|(node, shard)| Origin { node, shard });
            }
            match command {
                Command::Request => {
                    header.client = fields.1;
                    header.parent = fields.2;
                    header.timestamp = numbers.0;
                    header.request = numbers.1;
                    header.operation = numbers.4;
                    header.session = numbers.7;
                    header.user_id = numbers.5;
                    header.command_code = numbers.6;
                    header.batch_at = numbers.9;
                }
                Command::Eviction => {
                    header.client = fields.1;
                    header.status = numbers.5;
                    header.count = numbers.6;
                    header.reason = numbers.4;
                }
                _ => {
                    header.parent = fields.1;
                    header.context = fields.2;
                    header.client = fields.1 ^ fields.2;
                    header.op = numbers.0;
                    header.commit = numbers.1;
                    header.timestamp = numbers.2;
                    header.request = numbers.3;
                    header.operation = numbers.4;
                    header.log_view = numbers.5;
                    header.status = numbers.6;
                    header.session = numbers.7;
                    header.checkpoint_op = numbers.8;
                    header.count = numbers.9;
                    header.cursor = numbers.0 ^ numbers.3;
                }
            }
            header
        }
    }

    proptest! {
        #[test]
        fn round_trip(header in arb_header(), body in proptest::collection::vec(any::<u8>(), 0..300)) {
            let message = Message::new(header, body);
            let bytes = message.encode();
            prop_assert_eq!(Message::decode(&bytes, true), Ok(message));
        }

        #[test]
        fn any_single_bit_flip_is_rejected(
            header in arb_header(),
            body in proptest::collection::vec(any::<u8>(), 0..64),
            bit in any::<usize>(),
        ) {
            let bytes = Message::new(header, body).encode();
            let mut flipped = bytes.clone();
            let bit = bit % (bytes.len() * 8);
            flipped[bit / 8] ^= 1 << (bit % 8);
            prop_assert!(Message::decode(&flipped, true).is_err());
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
            let _ = Message::decode(&bytes, false);
            let _ = Message::decode(&bytes, true);
        }
    }

    #[test]
    fn a_request_sealed_for_the_process_is_sealed_whole_before_it_leaves_it() {
        let mut header = Header::new(Command::Request, 7, 0);
        header.client = 42;
        let body = vec![9u8; 300];
        header.seal_header_only(body.len());
        let mut bytes = encode_frame(&header, &body);
        // In the process: the header is checked, the body is not hashed.
        assert!(Message::decode(&bytes, false).is_ok());
        bytes[HEADER_SIZE + 5] ^= 1;
        assert!(Message::decode(&bytes, false).is_ok());
        bytes[20] ^= 1;
        assert_eq!(Message::decode(&bytes, false), Err(DecodeError::Checksum));
        // Leaving it: sealed whole, and any flipped body bit is caught.
        header.seal_for_network(&body);
        assert_ne!(header.checksum_body, 0);
        let mut bytes = encode_frame(&header, &body);
        assert!(Message::decode(&bytes, true).is_ok());
        bytes[HEADER_SIZE + 5] ^= 1;
        assert_eq!(Message::decode(&bytes, false), Err(DecodeError::ChecksumBody));
    }

    #[test]
    fn client_frames_may_carry_zero_checksums() {
        let mut header = Header::new(Command::Request, 0, 0);
        header.client = 42;
        header.size = HEADER_SIZE as u32 + 3;
        let mut bytes = header.encode().to_vec();
        bytes.extend_from_slice(&[1, 2, 3]);
        assert!(Message::decode(&bytes, false).is_ok());
        assert_eq!(Message::decode(&bytes, true), Err(DecodeError::Checksum));
    }
}
