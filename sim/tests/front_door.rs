//! The node's front door as conversations: one node of two shards, the real `Node` on a quiet
//! simulated disk, and a client that sends exactly the SDK's bytes on one connection. What the
//! node does with each frame (connection, login, admission, the shard that owns the group, the
//! group, the reply) is the story these tests tell and check.

use std::collections::{BTreeMap, VecDeque};

use vireo_io::{Completion, FileId, Io, Namespace, OutFrame, Peer, Token};
use vireo_node::metadata::PasswordCost;
use vireo_node::metadata_plane::operation_of;
use vireo_node::node::{Node, NodeConfig, NodeEvent, OPERATION_LOGOUT, OPERATION_NON_REPLICATED};
use vireo_node::partition::request::{
    OPERATION_DELETE_CONSUMER_OFFSET, OPERATION_SEND_MESSAGES, OPERATION_STORE_CONSUMER_OFFSET,
};
use vireo_node::shard::{MetadataPlane, ShardConfig, ShardEvent};
use vireo_node::{ChannelFull, ConnectionId, NodeIo, ShardMessage};
use vireo_protocol::config::Bug;
use vireo_protocol::header::{encode_frame, Command, Header, Message};
use vireo_protocol::request::OPERATION_REGISTER;
use vireo_protocol::wire::{
    self, command, ClientRequest, Consumer, ConsumerKind, ConsumerOffsetKey, Identifier, LoginRegister, LoginWithToken,
    Name, Options, Partitioning, PollMessages, PollingKind, PollingStrategy, SendMessages, ShortBytes,
};
use vireo_protocol::{Config, ReplicaEvent};
use vireo_sim::disk::{DiskRequest, SimDisk};
use vireo_sim::rng::SimRng;
use vireo_sim::scenario::FaultRates;
use vireo_storage::batch::{BatchBuilder, BATCH_HEADER_SIZE, MESSAGE_FRAME_SIZE};
use vireo_storage::checksum::{self, checksum64};
use vireo_storage::layout::WalLayout;
use vireo_storage::layout::HEADER_SIZE;

/// Counts the allocations (and their bytes) the node makes, so a test can see what it allocates
/// per request: the world runs every shard on the test's own thread, and counts only while a
/// node handles an input (`node_side`), not while the world carries out its asks
/// (`world_side`: the simulated disk keeps its own copy of every write).
struct CountingAllocator;

thread_local! {
    static ALLOCATIONS: std::cell::Cell<(u64, u64)> = const { std::cell::Cell::new((0, 0)) };
    static COUNTING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

fn count_allocation(bytes: usize) {
    // try_with: a thread being torn down has no counter left, and is not measured.
    if COUNTING.try_with(std::cell::Cell::get) != Ok(true) {
        return;
    }
    let _ = ALLOCATIONS.try_with(|cell| {
        let (count, total) = cell.get();
        cell.set((count + 1, total + bytes as u64));
    });
}

fn counting_while<T>(counting: bool, action: impl FnOnce() -> T) -> T {
    let before = COUNTING.with(|cell| cell.replace(counting));
    let result = action();
    COUNTING.with(|cell| cell.set(before));
    result
}

fn node_side<T>(action: impl FnOnce() -> T) -> T {
    counting_while(true, action)
}

fn world_side<T>(action: impl FnOnce() -> T) -> T {
    counting_while(false, action)
}

// SAFETY: every call is passed on to the system allocator unchanged; counting touches only a
// const-initialized thread-local, which never allocates.
unsafe impl std::alloc::GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: std::alloc::Layout) -> *mut u8 {
        count_allocation(layout.size());
        unsafe { std::alloc::System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: std::alloc::Layout) -> *mut u8 {
        count_allocation(layout.size());
        unsafe { std::alloc::System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: std::alloc::Layout, new_size: usize) -> *mut u8 {
        count_allocation(new_size);
        unsafe { std::alloc::System.realloc(ptr, layout, new_size) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: std::alloc::Layout) {
        unsafe { std::alloc::System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static COUNTING_ALLOCATOR: CountingAllocator = CountingAllocator;

/// Copies of at least this many bytes are counted: payload-sized ones (a frame, a batch), not the
/// headers and small fields the node copies by the thousand.
const COPY_COUNTED_MIN: usize = 4096;

thread_local! {
    /// (copies, bytes copied) the node made of at least `COPY_COUNTED_MIN` bytes.
    static COPIES: std::cell::Cell<(u64, u64)> = const { std::cell::Cell::new((0, 0)) };
}

fn count_copy(bytes: usize) {
    // Never allocates nor copies: const-initialized thread-locals, as the allocator's.
    if bytes < COPY_COUNTED_MIN || COUNTING.try_with(std::cell::Cell::get) != Ok(true) {
        return;
    }
    let _ = COPIES.try_with(|cell| {
        let (count, total) = cell.get();
        cell.set((count + 1, total + bytes as u64));
    });
}

type CopyFn = unsafe extern "C" fn(*mut libc::c_void, *const libc::c_void, usize) -> *mut libc::c_void;

static LIBC_MEMCPY: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
static LIBC_MEMMOVE: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// The C library's `name`: the next definition after this binary's own, looked up once.
fn libc_copy(slot: &std::sync::atomic::AtomicUsize, name: &std::ffi::CStr) -> CopyFn {
    let mut found = slot.load(std::sync::atomic::Ordering::Relaxed);
    if found == 0 {
        // SAFETY: a NUL-terminated name; RTLD_NEXT skips this binary's definition.
        found = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) } as usize;
        if found == 0 {
            // No way to copy at all: nothing sensible can go on (a panic would copy).
            std::process::abort();
        }
        slot.store(found, std::sync::atomic::Ordering::Relaxed);
    }
    // SAFETY: glibc's memcpy and memmove have exactly this signature.
    unsafe { std::mem::transmute::<usize, CopyFn>(found) }
}

/// Every copy Rust code in this test binary makes of a size not known at compile time is a call to
/// `memcpy` or `memmove` (`copy_from_slice`, `extend_from_slice`, `to_vec`, `clone`): these stand
/// in for the C library's, count the payload-sized ones the node makes, and pass each on. The copies
/// the C library makes inside itself (a `realloc`'s) do not come here; the allocation count sees
/// those.
///
/// # Safety
/// As the C library's `memcpy`.
#[no_mangle]
pub unsafe extern "C" fn memcpy(dst: *mut libc::c_void, src: *const libc::c_void, n: usize) -> *mut libc::c_void {
    count_copy(n);
    // SAFETY: the caller's promises are memcpy's.
    unsafe { libc_copy(&LIBC_MEMCPY, c"memcpy")(dst, src, n) }
}

/// As `memcpy`, for overlapping copies.
///
/// # Safety
/// As the C library's `memmove`.
#[no_mangle]
pub unsafe extern "C" fn memmove(dst: *mut libc::c_void, src: *const libc::c_void, n: usize) -> *mut libc::c_void {
    count_copy(n);
    // SAFETY: the caller's promises are memmove's.
    unsafe { libc_copy(&LIBC_MEMMOVE, c"memmove")(dst, src, n) }
}

/// The payload-sized copies (count, bytes) the node made while `action` ran.
fn copies_during<T>(action: impl FnOnce() -> T) -> (T, u64, u64) {
    let (count_before, bytes_before) = COPIES.with(std::cell::Cell::get);
    let result = action();
    let (count_after, bytes_after) = COPIES.with(std::cell::Cell::get);
    (result, count_after - count_before, bytes_after - bytes_before)
}

/// The allocations, and bytes allocated, by the node while `action` ran.
fn allocations_during<T>(action: impl FnOnce() -> T) -> (T, u64, u64) {
    let (count_before, bytes_before) = ALLOCATIONS.with(std::cell::Cell::get);
    let result = action();
    let (count_after, bytes_after) = ALLOCATIONS.with(std::cell::Cell::get);
    (result, count_after - count_before, bytes_after - bytes_before)
}

const SHARDS: u16 = 2;
const CONNECTION: ConnectionId = 7;

/// What one shard asked for while it ran, carried out by the world afterwards.
#[derive(Default)]
struct Asks {
    disk: Vec<(Token, DiskRequest)>,
    shard_messages: Vec<(u16, ShardMessage)>,
    to_client: Vec<Vec<u8>>,
    closed: bool,
}

struct ShardIo<'a> {
    now: u64,
    shard: u16,
    /// Channels between shards refuse every message (full) while this is set.
    channels_full: bool,
    disk: &'a mut SimDisk,
    rng: &'a mut SimRng,
    asks: &'a mut Asks,
}

impl Io for ShardIo<'_> {
    fn now(&self) -> u64 {
        self.now
    }
    fn send(&mut self, to: Peer, _message: Vec<u8>) {
        panic!("a one-node cluster sends nothing to {to}");
    }
    fn read(&mut self, file: FileId, offset: u64, len: usize, token: Token) {
        world_side(|| self.asks.disk.push((token, DiskRequest::Read { file, offset, len })));
    }
    fn write(&mut self, file: FileId, offset: u64, bytes: vireo_io::Bytes, token: Token) {
        world_side(|| {
            let id = self.disk.submit_write(file, offset, bytes.to_vec());
            self.asks.disk.push((token, DiskRequest::Write { id }));
        });
    }
    /// As a driver with pwritev does: the parts go to the disk as they are, with no joined copy
    /// on the node's side (the simulated disk keeps its own).
    fn write_vectored(&mut self, file: FileId, offset: u64, parts: [vireo_io::Bytes; 2], token: Token) {
        world_side(|| {
            let id = self.disk.submit_write(file, offset, [&parts[0][..], &parts[1][..]].concat());
            self.asks.disk.push((token, DiskRequest::Write { id }));
        });
    }
    fn sync(&mut self, file: FileId, token: Token) {
        world_side(|| {
            let upto = self.disk.sync_point();
            self.asks.disk.push((token, DiskRequest::Sync { file, upto }));
        });
    }
    fn truncate(&mut self, file: FileId, len: u64, token: Token) {
        world_side(|| self.asks.disk.push((token, DiskRequest::Truncate { file, len })));
    }
    fn remove(&mut self, file: FileId, token: Token) {
        world_side(|| self.asks.disk.push((token, DiskRequest::Remove { file })));
    }
    fn list(&mut self, namespace: Namespace, token: Token) {
        world_side(|| self.asks.disk.push((token, DiskRequest::List { namespace })));
    }
    fn random(&mut self) -> u64 {
        self.rng.next_u64()
    }
    fn disk_space(&self) -> Option<vireo_io::DiskSpace> {
        self.disk.space()
    }
}

impl NodeIo for ShardIo<'_> {
    fn send_to_shard(&mut self, shard: u16, message: ShardMessage) -> Result<(), ChannelFull> {
        assert_ne!(shard, self.shard);
        if self.channels_full {
            return Err(ChannelFull(shard));
        }
        world_side(|| self.asks.shard_messages.push((shard, message)));
        Ok(())
    }
    fn send_to_connection(&mut self, connection: ConnectionId, frame: Vec<u8>) {
        assert_eq!(connection, CONNECTION);
        world_side(|| self.asks.to_client.push(frame));
    }
    /// The parts join on the world's side, as the kernel's socket buffer takes them one by one.
    fn send_frame_to_connection(&mut self, connection: ConnectionId, frame: OutFrame) {
        assert_eq!(connection, CONNECTION);
        world_side(|| self.asks.to_client.push(frame.into_whole()));
    }
    fn close_connection(&mut self, _connection: ConnectionId) {
        self.asks.closed = true;
    }
}

enum Work {
    Disk {
        shard: u16,
        token: Token,
        request: DiskRequest,
    },
    Shard {
        shard: u16,
        message: ShardMessage,
    },
    /// A snapshot the driver collects (files and processes, not the node's): here, a stand-in.
    Snapshot {
        shard: u16,
        connection: u64,
        request: Header,
    },
}

/// One node of `SHARDS` shards; the client's connection is held by shard 1 (so every metadata
/// request crosses to shard 0, and partitions live on either).
struct World {
    shards: Vec<Node>,
    disk: SimDisk,
    rng: SimRng,
    rates: FaultRates,
    now: u64,
    work: VecDeque<Work>,
    replies: VecDeque<Vec<u8>>,
    pub story: Vec<String>,
    client: u128,
    session: u64,
    request: u64,
    channels_full: bool,
    node_configs: Vec<NodeConfig>,
    /// Groups failed (`ReplicaEvent::Failed`), as "namespace: what".
    failures: Vec<String>,
    /// Deleted groups watched after every step (`watch_deletion`).
    watch: Option<DeletionWatch>,
}

/// Checks after every step that a deleted group's files are gone only once the metadata holds
/// its deletion durably.
struct DeletionWatch {
    namespaces: Vec<Namespace>,
    /// The metadata op at which the groups were first seen deleted.
    deleted_at: Option<u64>,
    /// Steps at which the files were gone before the deletion was durable.
    early: Vec<String>,
}

impl World {
    fn new() -> World {
        World::with_bug(None)
    }

    fn with_bug(bug: Option<Bug>) -> World {
        let mut config = Config::new(0x5649, 1);
        config.bug = bug;
        config.prepare_size_max = 64 * 1024;
        config.journal_slots = 64;
        config.snapshot_size_max = 4 << 20;
        let layout = WalLayout::new(config.journal_slots, config.prepare_size_max);
        let mut world = World {
            shards: Vec::new(),
            disk: SimDisk::new(layout, None),
            rng: SimRng::new(1),
            rates: FaultRates::none(),
            now: 1_000_000,
            work: VecDeque::new(),
            replies: VecDeque::new(),
            story: Vec::new(),
            // An SDK draws its client id before it connects.
            client: 0x5eed_0001,
            session: 0,
            request: 1,
            channels_full: false,
            node_configs: Vec::new(),
            failures: Vec::new(),
            watch: None,
        };
        for shard in 0..SHARDS {
            let node_config = NodeConfig {
                shard: ShardConfig {
                    node: 0,
                    shard,
                    shards: SHARDS,
                    metadata: config.clone(),
                    partition: config.clone(),
                    partitions_max: 64,
                },
                connections_max: 4,
                cluster_name: "front-door".into(),
                roster: Vec::new(),
                password_cost: PasswordCost::Test,
                min_free_bytes: 1 << 20,
            };
            world.node_configs.push(node_config);
        }
        world.open_nodes();
        world.settle();
        assert!(!world.open_connection(CONNECTION), "the first connection fits");
        world.settle();
        world.story.clear();
        world
    }

    fn open_nodes(&mut self) {
        for config in self.node_configs.clone() {
            let node = self.with_io(config.shard.shard, |io| Node::open(config, io));
            self.shards.push(node);
        }
    }

    /// The node's process is killed (every completed write stays) and started again.
    fn restart(&mut self) {
        self.disk.crash_process(&mut self.rng);
        self.shards.clear();
        self.work.clear();
        self.replies.clear();
        self.open_nodes();
        self.settle();
        for _ in 0..20 {
            self.now += 10_000_000;
            for shard in 0..SHARDS {
                self.run(shard, |node, io| node.tick(io));
            }
            self.settle();
        }
    }

    fn watch_step(&mut self) {
        let Some(watch) = self.watch.as_mut() else { return };
        let Some(metadata) = self.shards.first().and_then(|node| node.shard().metadata()) else { return };
        let partitions = metadata.state_machine().partitions();
        if watch.deleted_at.is_none() && watch.namespaces.iter().all(|namespace| !partitions.contains_key(namespace)) {
            watch.deleted_at = Some(metadata.commit_min());
        }
        let durable = metadata.superblock_durable().commit_max;
        for namespace in &watch.namespaces {
            let gone = self.disk.list(*namespace).is_empty();
            if gone && watch.deleted_at.is_none_or(|op| durable < op) {
                watch.early.push(format!("{namespace:?} gone, deleted at {:?}, durable {durable}", watch.deleted_at));
            }
        }
    }

    /// Opens a connection on shard 1; true when the node closed it at once.
    fn open_connection(&mut self, connection: ConnectionId) -> bool {
        let mut asks = Asks::default();
        let node = &mut self.shards[1];
        let mut io = ShardIo {
            now: self.now,
            shard: 1,
            channels_full: self.channels_full,
            disk: &mut self.disk,
            rng: &mut self.rng,
            asks: &mut asks,
        };
        node.on_connection_opened(&mut io, connection);
        let closed = std::mem::take(&mut asks.closed);
        self.absorb(1, asks);
        closed
    }

    fn with_io<T>(&mut self, shard: u16, action: impl FnOnce(&mut ShardIo) -> T) -> T {
        let mut asks = Asks::default();
        let mut io = ShardIo {
            now: self.now,
            shard,
            channels_full: self.channels_full,
            disk: &mut self.disk,
            rng: &mut self.rng,
            asks: &mut asks,
        };
        let result = action(&mut io);
        self.absorb(shard, asks);
        result
    }

    fn absorb(&mut self, shard: u16, asks: Asks) {
        assert!(!asks.closed, "the node closed the connection");
        for (token, request) in asks.disk {
            self.work.push_back(Work::Disk { shard, token, request });
        }
        for (to, message) in asks.shard_messages {
            self.work.push_back(Work::Shard { shard: to, message });
        }
        self.replies.extend(asks.to_client);
    }

    /// Runs one input on a shard, then tells the story of what its node did.
    fn run(&mut self, shard: u16, action: impl FnOnce(&mut Node, &mut ShardIo)) {
        let mut asks = Asks::default();
        let node = &mut self.shards[shard as usize];
        let mut io = ShardIo {
            now: self.now,
            shard,
            channels_full: self.channels_full,
            disk: &mut self.disk,
            rng: &mut self.rng,
            asks: &mut asks,
        };
        node_side(|| action(node, &mut io));
        while let Some(event) = node_side(|| node.poll_event()) {
            if let NodeEvent::Replica(ShardEvent { namespace, event: ReplicaEvent::Failed { what, .. }, .. }) = &event {
                self.failures.push(format!("{namespace:?}: {what}"));
            }
            if let Some(line) = tell(shard, &event) {
                self.story.push(line);
            }
            if let NodeEvent::SnapshotRequested { connection, request, .. } = event {
                self.work.push_back(Work::Snapshot { shard, connection, request });
            }
        }
        self.absorb(shard, asks);
        self.watch_step();
    }

    /// Carries out every ask until nothing is left, with a tick now and then.
    fn settle(&mut self) {
        for step in 0..100_000 {
            let Some(work) = self.work.pop_front() else {
                return;
            };
            self.now += 10_000;
            match work {
                Work::Disk { shard, token, request } => {
                    let completion: Completion = self.disk.carry_out(request, token, &mut self.rng, &self.rates);
                    self.run(shard, |node, io| node.on_completion(io, completion));
                }
                Work::Shard { shard, message } => self.run(shard, |node, io| node.on_shard_message(io, message)),
                Work::Snapshot { shard, connection, request } => self.run(shard, |node, io| {
                    node.answer_snapshot(io, connection, &request, Ok(b"the driver's archive".to_vec()))
                }),
            }
            if step % 64 == 63 {
                for shard in 0..SHARDS {
                    self.run(shard, |node, io| node.tick(io));
                }
            }
        }
        panic!("the node did not settle");
    }

    /// Sends one frame as the SDK would and returns the node's answer (its header and body).
    fn ask(&mut self, mut header: Header, body: Vec<u8>) -> (Header, Vec<u8>) {
        // As the Iggy SDK frames it: no header or body checksum (zero is one left out).
        header.size = (HEADER_SIZE + body.len()) as u32;
        let frame = encode_frame(&header, &body);
        self.story.push(format!(
            "client -> connection {CONNECTION}: request={} operation={}{}",
            header.request,
            header.operation,
            if header.command_code != 0 { format!(" code={}", header.command_code) } else { String::new() }
        ));
        self.run(1, move |node, io| node.on_client_frame(io, CONNECTION, frame));
        for _ in 0..50 {
            self.settle();
            if let Some(reply) = self.replies.pop_front() {
                // As a client reads it: the header is sealed, a body checksum is checked when
                // the node sent one (answers it makes itself leave it out).
                let message = Message::decode(&reply, false).expect("a whole reply");
                assert_ne!(message.header.checksum, 0, "a reply's header is sealed");
                self.story.push(format!(
                    "client <- {}: request={} operation={} status={} body={}B",
                    message.header.command.name(),
                    message.header.request,
                    message.header.operation,
                    message.header.status,
                    message.body.len()
                ));
                return (message.header, message.body);
            }
            // Waiting on a timer (a re-send): let time pass.
            self.now += 10_000_000;
            for shard in 0..SHARDS {
                self.run(shard, |node, io| node.tick(io));
            }
        }
        panic!("no answer to request {} operation {}:\n{}", header.request, header.operation, self.story.join("\n"));
    }

    fn header(&self, operation: u8, request: u64) -> Header {
        let mut header = Header::new(Command::Request, 0, 0);
        header.client = self.client;
        header.operation = operation;
        header.request = request;
        header.session = self.session;
        header
    }

    fn login(&mut self, username: &str, password: &str) -> (Header, Vec<u8>) {
        self.client = (self.rng.next_u64() as u128) << 64 | 1;
        self.session = 0;
        self.request = 1;
        let login = LoginRegister {
            protocol_version: 0x2C00,
            sdk_name: Name::new("test").unwrap(),
            sdk_version: Name::new("0").unwrap(),
            username: Name::new(username).unwrap(),
            password: ShortBytes::new(password.as_bytes().to_vec()).unwrap(),
            context: Vec::new(),
        };
        let body = ClientRequest::LoginRegister(login).encode();
        let mut header = self.header(OPERATION_REGISTER, 0);
        header.parent = checksum64(&body) as u128;
        let (reply, body) = self.ask(header, body);
        if reply.status == 0 {
            self.session = wire::LoginReply::decode(&body).expect("a login reply").session;
        }
        (reply, body)
    }

    /// Sends `request` framed as the SDK frames its command code.
    fn command(&mut self, request: ClientRequest) -> (Header, Vec<u8>) {
        let code = request.command_code();
        let body = request.encode();
        let header = match code {
            command::SEND_MESSAGES => self.header(OPERATION_SEND_MESSAGES, self.request),
            command::STORE_CONSUMER_OFFSET => self.header(OPERATION_STORE_CONSUMER_OFFSET, self.request),
            command::DELETE_CONSUMER_OFFSET => self.header(OPERATION_DELETE_CONSUMER_OFFSET, self.request),
            command::LOGOUT => {
                self.request += 1;
                self.header(OPERATION_LOGOUT, self.request - 1)
            }
            _ => match operation_of(code) {
                Some(operation) => {
                    self.request += 1;
                    let mut header = self.header(operation, self.request - 1);
                    header.parent = checksum64(&body) as u128;
                    header
                }
                None => {
                    let mut header = self.header(OPERATION_NON_REPLICATED, self.request);
                    header.command_code = code;
                    header
                }
            },
        };
        self.ask(header, body)
    }
}

/// One line of the story for what a node did (commits of groups, not their every step).
fn tell(shard: u16, event: &NodeEvent) -> Option<String> {
    let group = |namespace: Namespace| {
        if namespace.is_metadata() {
            "metadata".to_string()
        } else {
            let (stream, topic, partition) = namespace.unpack();
            format!("partition {stream}/{topic}/{partition}")
        }
    };
    Some(format!(
        "  s{shard} {}",
        match event {
            NodeEvent::Replica(shard_event) => match shard_event.event {
                ReplicaEvent::Committed { op, .. } => format!("{} committed op {op}", group(shard_event.namespace)),
                ReplicaEvent::CutForNoSpace { op, refused, again } => format!(
                    "{} cut its log below op {op} for a full disk: {refused} refused, {again} again",
                    group(shard_event.namespace)
                ),
                ref other if std::env::var("FRONT_DOOR_ALL").is_ok() =>
                    format!("{} {other:?}", group(shard_event.namespace)),
                _ => return None,
            },
            NodeEvent::Disk(change) => format!("disk: {change:?}"),
            NodeEvent::ConnectionOpened { connection } => format!("connection {connection} opened"),
            NodeEvent::ConnectionRefused { connection } => format!("connection {connection} refused"),
            NodeEvent::ConnectionClosed { connection } => format!("connection {connection} closed"),
            NodeEvent::Malformed { connection } => format!("connection {connection}: malformed frame"),
            NodeEvent::LoginVerified { user_id, .. } => format!("login verified: user {user_id}; register -> metadata"),
            NodeEvent::Admitted { request, operation, group: to, shard, .. } => {
                format!("admitted request={request} operation={operation} -> {} on s{shard}", group(*to))
            }
            NodeEvent::SessionOpening { group: to, .. } => format!("opening the client's session in {}", group(*to)),
            NodeEvent::ReadLocally { group: from, count } => format!("{} read locally: {count} messages", group(*from)),
            NodeEvent::SessionEnding { .. } => "the client is gone: leaving its groups".to_string(),
            NodeEvent::SessionOpened { group: to, session, .. } => format!("session {session} in {}", group(*to)),
            NodeEvent::Denied { request, operation, status, .. } => {
                format!("denied request={request} operation={operation} status={status}")
            }
            NodeEvent::Answered { request, operation, status, .. } => {
                format!("reply request={request} operation={operation} status={status}")
            }
            NodeEvent::SnapshotRequested { request, types, .. } => {
                format!("snapshot request={} sections={types:?}: the driver collects it", request.request)
            }
        }
    ))
}

fn id(value: u32) -> Identifier {
    Identifier::Numeric(value)
}

fn name(text: &str) -> Name {
    Name::new(text).unwrap()
}

/// A writer may send to topic 0/0 and nothing else.
fn writer_permissions() -> wire::Permissions {
    let mut permissions = wire::Permissions::default();
    let mut stream = wire::StreamPermissions::default();
    stream.topics.insert(0, wire::TopicPermissions { send_messages: true, ..Default::default() });
    permissions.streams.insert(0, stream);
    permissions
}

fn setup(world: &mut World) {
    assert_eq!(world.login("iggy", "iggy").0.status, 0);
    for request in [
        ClientRequest::CreateStream { name: name("orders"), options: Options::empty() },
        ClientRequest::CreateTopic {
            stream: id(0),
            partitions_count: 2,
            name: name("events"),
            options: Options::empty(),
        },
        ClientRequest::CreateUser {
            username: name("writer"),
            password: ShortBytes::new(b"writer-secret".to_vec()).unwrap(),
            status: 1,
            permissions: Some(writer_permissions()),
            options: Options::empty(),
        },
    ] {
        let (reply, body) = world.command(request);
        assert_eq!(reply.status, 0);
        assert_eq!(wire::ResultSection::decode_prefix(&body).unwrap().0, wire::ResultSection::ok());
    }
}

fn send(partition: u32, values: &[u128]) -> ClientRequest {
    let mut batch = BatchBuilder::new();
    for value in values {
        batch.push(*value, b"payload", &[]);
    }
    let send = SendMessages::new(id(0), id(0), Partitioning::PartitionId(partition), batch.finish(0)).unwrap();
    ClientRequest::SendMessages(send)
}

fn poll(partition: u32) -> ClientRequest {
    ClientRequest::PollMessages(PollMessages {
        consumer: Consumer { kind: ConsumerKind::Consumer, id: id(1) },
        stream: id(0),
        topic: id(0),
        partition_id: Some(partition),
        strategy: PollingStrategy { kind: PollingKind::Offset, value: 0 },
        count: 10,
        auto_commit: false,
    })
}

/// Login, a send and a denied poll by a user that may send but not poll: the path of each
/// through the node (connection, admission, the owning shard, the group, the reply).
#[test]
fn a_login_a_send_and_a_denied_poll() {
    let mut world = World::new();
    setup(&mut world);
    world.story.clear();
    let (login, _) = world.login("writer", "writer-secret");
    assert_eq!(login.status, 0);
    let (sent, body) = world.command(send(1, &[41, 42]));
    assert_eq!(sent.status, 0);
    let appended = wire::SendMessagesReply::decode(&body).unwrap().appended;
    assert_eq!((appended[0].partition_id, appended[0].base_offset), (1, 0));
    let (polled, _) = world.command(poll(1));
    assert_eq!(polled.status, 41, "unauthorized");
    insta::assert_snapshot!("front_door_login_send_denied_poll", world.story.join("\n"));
}

/// A disk whose free space falls below the reserve: every shard says so once, sends and the
/// creates of topics are refused at once with the reference's codes while polls are answered,
/// and once space is back (a tick later) sends are taken again.
#[test]
fn a_disk_below_its_reserve_refuses_sends_and_creates_and_answers_the_rest() {
    let mut world = World::new();
    setup(&mut world);
    assert_eq!(world.command(send(1, &[41])).0.status, 0);
    world.story.clear();
    // Full: what the files hold now is all the space there is.
    world.disk.capacity = Some(world.disk.listing().iter().map(|(_, size)| size).sum());
    for shard in 0..SHARDS {
        world.run(shard, |node, io| node.tick(io));
    }
    assert_eq!(world.command(send(1, &[42])).0.status, 4006, "CannotSaveMessagesToSegment");
    let topic = ClientRequest::CreateTopic {
        stream: id(0),
        partitions_count: 1,
        name: name("more"),
        options: Options::empty(),
    };
    assert_eq!(world.command(topic.clone()).0.status, 2006, "CannotCreateTopic");
    let (polled, body) = world.command(poll(1));
    assert_eq!(polled.status, 0);
    assert_eq!(polled_ids(&body), [41], "the message sent before");
    // Space is back.
    world.disk.capacity = None;
    for shard in 0..SHARDS {
        world.run(shard, |node, io| node.tick(io));
    }
    assert_eq!(world.command(send(1, &[42])).0.status, 0);
    assert_eq!(world.shards.iter().map(|node| node.counters.writes_refused_disk).sum::<u64>(), 2);
    insta::assert_snapshot!("front_door_disk_below_reserve", world.story.join("\n"));
}

/// A write that meets a full disk although the reserve let its send in (here no reserve at
/// all): the send is refused with 4006 once the cut log is durable, a poll is answered, and
/// neither a restart on the full disk nor space coming back brings the refused message in.
#[test]
fn a_send_whose_write_meets_a_full_disk_is_refused_and_never_stored() {
    let mut world = World::new();
    for config in &mut world.node_configs {
        config.min_free_bytes = 0;
    }
    world.restart();
    assert!(!world.open_connection(CONNECTION));
    world.settle();
    setup(&mut world);
    assert_eq!(world.command(send(1, &[41])).0.status, 0);
    world.story.clear();
    world.disk.capacity = Some(world.disk.listing().iter().map(|(_, size)| size).sum());
    assert_eq!(world.command(send(1, &[42])).0.status, 4006, "CannotSaveMessagesToSegment");
    insta::assert_snapshot!("front_door_write_meets_full_disk", world.story.join("\n"));
    let (polled, body) = world.command(poll(1));
    assert_eq!(polled.status, 0);
    assert_eq!(polled_ids(&body), [41]);
    // The refused prepare is in no log a restart recovers: the node opens on the full disk (a
    // login waits for space there: its register needs the metadata WAL to grow), then space
    // comes back.
    world.restart();
    world.disk.capacity = None;
    assert!(!world.open_connection(CONNECTION));
    world.settle();
    assert_eq!(world.login("iggy", "iggy").0.status, 0);
    let (polled, body) = world.command(poll(1));
    assert_eq!((polled.status, polled_ids(&body)), (0, vec![41]));
    assert_eq!(world.command(send(1, &[43])).0.status, 0);
    let (_, body) = world.command(poll(1));
    assert_eq!(polled_ids(&body), [41, 43]);
    assert!(world.failures.is_empty(), "no group stopped: {:?}", world.failures);
}

/// Refusals the front door makes itself, each with the reference's code, and a connection past
/// the shard's bound closed at once.
#[test]
fn refusals_carry_the_reference_codes() {
    let mut world = World::new();
    // Nothing but ping before a login.
    let (pong, _) = world.command(ClientRequest::Ping);
    assert_eq!(pong.status, 0);
    assert_eq!(world.command(ClientRequest::GetStreams).0.status, 40);
    setup(&mut world);
    assert_eq!(world.login("writer", "wrong").0.status, 42, "invalid credentials");
    assert_eq!(world.login("nobody", "x").0.status, 42, "an unknown user looks like a wrong password");
    assert_eq!(world.login("writer", "writer-secret").0.status, 0);
    assert_eq!(world.command(ClientRequest::GetStreams).0.status, 41, "the writer may not list streams");
    // A read of a topic in a stream that is not there is an empty body (the SDK's None), as the
    // reference answers; a list of a missing topic's groups names the stream that is not there.
    let (missing, body) = world.command(ClientRequest::GetTopic { stream: id(9), topic: id(0) });
    assert_eq!((missing.status, body.len()), (0, 0), "topic not found: an empty body");
    let (missing, _) = world.command(ClientRequest::GetConsumerGroups { stream: id(9), topic: id(0) });
    assert_eq!(missing.status, 1009, "stream not found");
    assert_eq!(world.command(ClientRequest::CreateStream { name: name("x"), options: Options::empty() }).1, {
        let mut section = Vec::new();
        wire::ResultSection { entries: vec![wire::ResultEntry { index: 0, result: 41 }] }.write(&mut section);
        section
    });
    // A body that does not match the checksum its header stamps is refused, not applied.
    let body = ClientRequest::CreateStream { name: name("y"), options: Options::empty() }.encode();
    let mut stamped = world.header(operation_of(command::CREATE_STREAM).unwrap(), world.request);
    stamped.parent = checksum64(b"another body") as u128;
    assert_eq!(world.ask(stamped, body).0.status, 4, "invalid format");
    let token_login = LoginWithToken {
        protocol_version: 0x2C00,
        sdk_name: name("test"),
        sdk_version: name("0"),
        token: ShortBytes::new(b"no-such-token".to_vec()).unwrap(),
        context: Vec::new(),
    };
    let body = ClientRequest::LoginWithPersonalAccessToken(token_login).encode();
    world.client += 2;
    world.session = 0;
    let (refused, _) = world.ask(world.header(OPERATION_REGISTER, 0), body);
    assert_eq!(refused.status, 53, "invalid personal access token");
    // The shard holds at most 4 connections: the fifth is closed at once.
    let mut refused_at = None;
    for connection in 100..104 {
        if world.open_connection(connection) {
            refused_at.get_or_insert(connection);
        }
    }
    assert_eq!(refused_at, Some(103), "one connection open already, three more fit");
}

/// Every command code of `PROTOCOL.md` goes through the node and is answered, none as an
/// unknown command (but get_snapshot_file, which the reference answers so).
#[test]
fn every_command_code_is_answered() {
    let mut world = World::new();
    setup(&mut world);
    let token_login = |token: &[u8]| LoginWithToken {
        protocol_version: 0x2C00,
        sdk_name: name("test"),
        sdk_version: name("0"),
        token: ShortBytes::new(token.to_vec()).unwrap(),
        context: Vec::new(),
    };
    let key = |partition: u32| ConsumerOffsetKey {
        consumer: Consumer { kind: ConsumerKind::Consumer, id: id(1) },
        stream: id(0),
        topic: id(0),
        partition_id: Some(partition),
    };
    let mut answered = BTreeMap::new();
    let requests = vec![
        ClientRequest::Ping,
        ClientRequest::GetStats,
        ClientRequest::GetSnapshotFile { compression: 1, types: vec![1] },
        ClientRequest::GetClusterMetadata,
        ClientRequest::DescribeOptions { scope: 1 },
        ClientRequest::GetMe,
        ClientRequest::GetClient { client_id: CONNECTION as u32 },
        ClientRequest::GetClients,
        ClientRequest::GetUser { user: Identifier::Name(name("writer")) },
        ClientRequest::GetUsers,
        ClientRequest::CreateUser {
            username: name("temp"),
            password: ShortBytes::new(b"temp-secret".to_vec()).unwrap(),
            status: 1,
            permissions: None,
            options: Options::empty(),
        },
        ClientRequest::UpdateUser {
            user: Identifier::Name(name("temp")),
            username: Some(name("temp2")),
            status: None,
            options: Options::empty(),
        },
        ClientRequest::UpdatePermissions {
            user: Identifier::Name(name("temp2")),
            permissions: Some(writer_permissions()),
        },
        ClientRequest::ChangePassword {
            user: Identifier::Name(name("temp2")),
            current_password: ShortBytes::new(b"temp-secret".to_vec()).unwrap(),
            new_password: ShortBytes::new(b"new-secret".to_vec()).unwrap(),
        },
        ClientRequest::DeleteUser { user: Identifier::Name(name("temp2")) },
        ClientRequest::CreatePersonalAccessToken { name: name("t1"), expiry: 0 },
        ClientRequest::GetPersonalAccessTokens,
        ClientRequest::DeletePersonalAccessToken { name: name("t1") },
        send(0, &[1, 2, 3]),
        poll(0),
        ClientRequest::StoreConsumerOffset { key: key(0), offset: 1, ack: 1 },
        ClientRequest::GetConsumerOffset(key(0)),
        ClientRequest::DeleteConsumerOffset { key: key(0), ack: 1 },
        ClientRequest::FlushUnsavedBuffer { stream: id(0), topic: id(0), partition_id: 0, fsync: false },
        ClientRequest::GetStream { stream: id(0) },
        ClientRequest::GetStreams,
        ClientRequest::UpdateStream { stream: id(0), name: name("orders2"), options: Options::empty() },
        ClientRequest::GetTopic { stream: id(0), topic: id(0) },
        ClientRequest::GetTopics { stream: id(0) },
        ClientRequest::UpdateTopic { stream: id(0), topic: id(0), name: name("events2"), options: Options::empty() },
        ClientRequest::CreatePartitions { stream: id(0), topic: id(0), count: 1 },
        ClientRequest::DeletePartitions { stream: id(0), topic: id(0), count: 1 },
        ClientRequest::DeleteSegments { stream: id(0), topic: id(0), partition_id: 0, segments_count: 1 },
        ClientRequest::CreateConsumerGroup { stream: id(0), topic: id(0), name: name("readers") },
        ClientRequest::GetConsumerGroup { stream: id(0), topic: id(0), group: id(0) },
        ClientRequest::GetConsumerGroups { stream: id(0), topic: id(0) },
        ClientRequest::JoinConsumerGroup { stream: id(0), topic: id(0), group: id(0) },
        ClientRequest::SyncConsumerGroup { stream: id(0), topic: id(0), group: id(0) },
        ClientRequest::LeaveConsumerGroup { stream: id(0), topic: id(0), group: id(0) },
        ClientRequest::DeleteConsumerGroup { stream: id(0), topic: id(0), group: id(0) },
        ClientRequest::PurgeTopic { stream: id(0), topic: id(0) },
        ClientRequest::PurgeStream { stream: id(0) },
        ClientRequest::CreateTopic {
            stream: id(0),
            partitions_count: 1,
            name: name("gone"),
            options: Options::empty(),
        },
        ClientRequest::DeleteTopic { stream: id(0), topic: Identifier::Name(name("gone")) },
        ClientRequest::CreateStream { name: name("gone"), options: Options::empty() },
        ClientRequest::DeleteStream { stream: Identifier::Name(name("gone")) },
        ClientRequest::Logout,
    ];
    for request in requests {
        let code = request.command_code();
        let (reply, body) = world.command(request);
        answered.insert(code, (reply.status, body));
    }
    assert_eq!(answered[&command::GET_SNAPSHOT_FILE].1, b"the driver's archive", "the archive is the reply");
    // The two logins travel as a Register, told apart by their bodies.
    let (login, _) = world.login("iggy", "iggy");
    answered.insert(command::LOGIN_REGISTER, (login.status, Vec::new()));
    let body = ClientRequest::LoginWithPersonalAccessToken(token_login(b"unknown")).encode();
    world.client += 2;
    world.session = 0;
    let (token, _) = world.ask(world.header(OPERATION_REGISTER, 0), body);
    answered.insert(command::LOGIN_WITH_PERSONAL_ACCESS_TOKEN, (token.status, Vec::new()));

    for code in command::CLIENT_COMMAND_CODES {
        let (status, body) = answered.get(&code).unwrap_or_else(|| panic!("code {code} was not sent"));
        let expected = match code {
            command::FLUSH_UNSAVED_BUFFER => 5,
            command::LOGIN_WITH_PERSONAL_ACCESS_TOKEN => 53,
            _ => 0,
        };
        assert_eq!(*status, expected, "code {code}: status");
        if let Ok((section, _)) = wire::ResultSection::decode_prefix(body) {
            if operation_of(code).is_some() {
                assert!(section.is_ok(), "code {code}: committed as {section:?}");
            }
        }
    }
}

/// Sends two messages to a topic, deletes it, creates it again under the same name and id, and
/// returns what a poll of the new topic's partition from offset 0 sees and where a new send lands.
fn recreate_a_topic(bug: Option<Bug>) -> (usize, u64) {
    let mut world = World::with_bug(bug);
    setup(&mut world);
    assert_eq!(world.command(send(1, &[7, 8])).0.status, 0);
    assert_eq!(world.command(ClientRequest::DeleteTopic { stream: id(0), topic: id(0) }).0.status, 0);
    let (created, _) = world.command(ClientRequest::CreateTopic {
        stream: id(0),
        partitions_count: 2,
        name: name("events"),
        options: Options::empty(),
    });
    assert_eq!(created.status, 0);
    // A poll is served from what the segment log has checked against its machine, which it does
    // as its group steps: let the shards tick once before polling.
    for shard in 0..SHARDS {
        world.run(shard, |node, io| node.tick(io));
    }
    world.settle();
    let (polled, body) = world.command(poll(1));
    assert_eq!(polled.status, 0, "{}", world.story.join("\n"));
    assert!(!body.is_empty(), "{}", world.story.join("\n"));
    let messages = wire::PollReply::decode(&body).unwrap().count() as usize;
    let (sent, body) = world.command(send(1, &[9]));
    assert_eq!(sent.status, 0);
    (messages, wire::SendMessagesReply::decode(&body).unwrap().appended[0].base_offset)
}

/// A topic created again after a delete starts empty: its groups are a new incarnation, and the
/// deleted one's files are gone. Planting the bug that keeps them (and the incarnation) brings
/// the deleted messages back, which this test sees.
#[test]
fn a_deleted_topic_does_not_come_back_with_a_new_one() {
    assert_eq!(recreate_a_topic(None), (0, 0), "the new topic starts empty");
    let (resurrected, next_offset) = recreate_a_topic(Some(Bug::DeletedGroupsKeepTheirFiles));
    assert_eq!((resurrected, next_offset), (2, 2), "the planted bug resurrects the old messages");
}

/// Deletes a topic of two partitions with messages in it, watching every step, and restarts the
/// node: returns the steps at which the groups' files were gone before the metadata's commit
/// point held the deletion, whether the files are gone in the end, and the groups that failed
/// after the restart.
fn delete_a_topic_and_restart(bug: Option<Bug>) -> (Vec<String>, bool, Vec<String>) {
    let mut world = World::with_bug(bug);
    setup(&mut world);
    assert_eq!(world.command(send(1, &[7, 8])).0.status, 0);
    assert_eq!(world.command(send(0, &[9])).0.status, 0);
    let namespaces = vec![Namespace::partition(0, 0, 0), Namespace::partition(0, 0, 1)];
    assert!(namespaces.iter().all(|namespace| !world.disk.list(*namespace).is_empty()), "the groups have files");
    world.watch = Some(DeletionWatch { namespaces: namespaces.clone(), deleted_at: None, early: Vec::new() });
    assert_eq!(world.command(ClientRequest::DeleteTopic { stream: id(0), topic: id(0) }).0.status, 0);
    for _ in 0..20 {
        world.now += 10_000_000;
        for shard in 0..SHARDS {
            world.run(shard, |node, io| node.tick(io));
        }
        world.settle();
    }
    let early = world.watch.take().expect("set").early;
    let gone = namespaces.iter().all(|namespace| world.disk.list(*namespace).is_empty());
    world.restart();
    (early, gone, world.failures)
}

/// A deleted topic's files go, and only once the metadata's commit point that deleted it is
/// durable: a restart then cannot publish metadata that still holds the topic and reopen its
/// groups with their checkpoints gone. The planted bug that removes them at once is seen.
#[test]
fn a_deleted_topics_files_go_once_its_deletion_is_durably_committed() {
    let (early, gone, failures) = delete_a_topic_and_restart(None);
    assert!(early.is_empty(), "files gone before the deletion was durable: {early:?}");
    assert!(gone, "the deleted groups' files are removed");
    assert!(failures.is_empty(), "after the restart: {failures:?}");
    let (early, gone, _) = delete_a_topic_and_restart(Some(Bug::DeletionNotDurable));
    assert!(gone);
    assert!(!early.is_empty(), "the planted bug removes the files before the deletion is durable");
}

/// A closed connection frees the sessions the node opened for it in partition groups.
#[test]
fn a_closed_connection_frees_its_partition_sessions() {
    let mut world = World::new();
    setup(&mut world);
    assert_eq!(world.command(send(1, &[5])).0.status, 0);
    let client = world.client;
    let group = Namespace::partition(0, 0, 1);
    let held = |world: &World| {
        let shard = &world.shards[vireo_node::routing::shard_of(group, SHARDS) as usize];
        shard.shard().partition(group).expect("hosted").client_table().get(client).is_some()
    };
    assert!(held(&world), "the send opened a session");
    world.run(1, |node, io| node.on_connection_closed(io, CONNECTION));
    world.settle();
    assert!(!held(&world), "the closed connection's session is gone");
    assert_eq!(world.shards[1].counters.sessions_unregistered, 1);
}

/// A full channel between shards is a defined answer, not a loss: the login cannot cross to the
/// metadata group's shard, stays in flight, and is sent again once the channel has room.
#[test]
fn a_full_channel_delays_a_request_and_loses_nothing() {
    let mut world = World::new();
    world.channels_full = true;
    let login = LoginRegister {
        protocol_version: 0x2C00,
        sdk_name: name("test"),
        sdk_version: name("0"),
        username: name("iggy"),
        password: ShortBytes::new(b"iggy".to_vec()).unwrap(),
        context: Vec::new(),
    };
    let frame =
        Message::new(world.header(OPERATION_REGISTER, 0), ClientRequest::LoginRegister(login).encode()).encode();
    world.run(1, |node, io| node.on_client_frame(io, CONNECTION, frame.clone()));
    for _ in 0..50 {
        world.settle();
        world.now += 10_000_000;
        world.run(1, |node, io| node.tick(io));
    }
    assert!(world.replies.is_empty(), "nothing crossed, nothing answered");
    assert!(world.shards[1].counters.channel_full > 0);
    world.channels_full = false;
    for _ in 0..50 {
        world.settle();
        if let Some(reply) = world.replies.pop_front() {
            let message = Message::decode(&reply, false).unwrap();
            assert_eq!(message.header.status, 0);
            assert!(wire::LoginReply::decode(&message.body).unwrap().session > 0);
            return;
        }
        world.now += 10_000_000;
        for shard in 0..SHARDS {
            world.run(shard, |node, io| node.tick(io));
        }
    }
    panic!("the login was never answered once the channel had room");
}

/// A poll with auto-commit is one replicated op that stores the offset and names the messages it
/// chose, without their bytes: the group's client table caches that range, and the replica that
/// answers re-reads the messages from its log. The next poll goes on after them.
#[test]
fn an_auto_commit_poll_is_replicated_without_message_bytes() {
    let mut world = World::new();
    setup(&mut world);
    assert_eq!(world.command(send(1, &[31, 32, 33])).0.status, 0);
    let next = |count: u32| {
        ClientRequest::PollMessages(PollMessages {
            consumer: Consumer { kind: ConsumerKind::Consumer, id: id(1) },
            stream: id(0),
            topic: id(0),
            partition_id: Some(1),
            strategy: PollingStrategy { kind: PollingKind::Next, value: 0 },
            count,
            auto_commit: true,
        })
    };
    let (polled, body) = world.command(next(2));
    assert_eq!(polled.status, 0);
    assert_eq!(polled_ids(&body), [31, 32]);
    let group = Namespace::partition(0, 0, 1);
    let shard = &world.shards[vireo_node::routing::shard_of(group, SHARDS) as usize];
    let cached = shard.shard().partition(group).expect("hosted").client_table().get(world.client).expect("a session");
    // status, partition, current_offset, count, start: the range, and no batch.
    assert_eq!(cached.reply.len(), 28, "the cached reply holds no message bytes");
    let (_, body) = world.command(next(10));
    assert_eq!(polled_ids(&body), [33], "the stored offset moved past what the first poll delivered");
}

/// The ids of the messages a poll reply's body holds, in order.
fn polled_ids(body: &[u8]) -> Vec<u128> {
    let reply = wire::PollReply::decode(body).unwrap();
    let mut ids = Vec::new();
    let mut rest = reply.batches();
    while !rest.is_empty() {
        let len = vireo_storage::batch::BatchHeader::decode(rest).unwrap().batch_length as usize;
        ids.extend(vireo_storage::batch::messages(&rest[..len]).unwrap().iter().map(|message| message.id));
        rest = &rest[len..];
    }
    ids
}

/// Pipelines two creates of streams and two sends to each of two partitions on one connection,
/// the first to each group sent while the channels between shards are full (so that it is
/// dropped and sent again later); returns the world, the request numbers of the creates and
/// the answers, as many as come within a bounded wait.
/// The world after, the create requests' numbers, the answers and the requests' stamped
/// checksums.
fn pipeline(bug: Option<Bug>) -> (World, [u64; 2], Vec<Message>, Vec<u128>) {
    let mut world = World::with_bug(bug);
    setup(&mut world);
    let mut frames = Vec::new();
    for stream in ["first", "second"] {
        let body = ClientRequest::CreateStream { name: name(stream), options: Options::empty() }.encode();
        let operation = operation_of(command::CREATE_STREAM).unwrap();
        let mut header = world.header(operation, world.request);
        header.parent = checksum64(&body) as u128;
        world.request += 1;
        frames.push((header.request, Message::new(header, body).encode()));
    }
    // Two sends to each partition: the node numbers them in the group itself.
    for (partition, values) in [(0, [51, 52]), (0, [53, 54]), (1, [61, 62]), (1, [63, 64])] {
        let body = send(partition, &values).encode();
        let mut header = world.header(OPERATION_SEND_MESSAGES, world.request);
        // Stamped, as a pipelining client does, to tell the replies apart.
        header.parent = checksum64(&body) as u128;
        frames.push((world.request, Message::new(header, body).encode()));
    }
    // The first of each group crosses to another shard while the channels are full.
    world.channels_full = true;
    world.run(1, |node, io| node.on_client_frame(io, CONNECTION, frames[0].1.clone()));
    world.run(1, |node, io| node.on_client_frame(io, CONNECTION, frames[2].1.clone()));
    world.run(1, |node, io| node.on_client_frame(io, CONNECTION, frames[4].1.clone()));
    world.channels_full = false;
    for at in [1, 3, 5] {
        world.run(1, |node, io| node.on_client_frame(io, CONNECTION, frames[at].1.clone()));
    }
    let mut answers = Vec::new();
    for _ in 0..100 {
        world.settle();
        while let Some(reply) = world.replies.pop_front() {
            answers.push(Message::decode(&reply, false).expect("a whole reply"));
        }
        if answers.len() == frames.len() {
            break;
        }
        world.now += 10_000_000;
        for shard in 0..SHARDS {
            world.run(shard, |node, io| node.tick(io));
        }
    }
    let stamped = frames.iter().map(|(_, frame)| Header::decode(frame).expect("a header").parent).collect();
    (world, [frames[0].0, frames[1].0], answers, stamped)
}

/// A client that pipelines gets every request answered, each applied once and in the order it
/// sent them to its group, even when the first is lost on the way (a full channel drops it) and
/// the one after it would overtake it: the group's client table would then take the first for
/// a stale retry, never apply it and never answer it, which the planted bug shows.
#[test]
fn pipelined_requests_are_applied_once_and_in_the_order_sent() {
    let (_, _, answers, _) = pipeline(Some(Bug::PipelinedRequestsOvertake));
    println!("with the bug: {} of 6 answered", answers.len());
    assert!(answers.len() < 6, "with the bug an overtaken request is never answered: {}", answers.len());
    let (mut world, creates, answers, stamped) = pipeline(None);
    assert_eq!(answers.len(), 6, "every pipelined request is answered:\n{}", world.story.join("\n"));
    assert!(answers.iter().all(|answer| answer.header.status == 0), "{}", world.story.join("\n"));
    // Each reply carries its request's request_checksum back, whichever group answered first.
    let set = |checksums: Vec<u128>| checksums.into_iter().collect::<std::collections::BTreeSet<u128>>();
    assert_eq!(set(answers.iter().map(|answer| answer.header.parent).collect()), set(stamped));
    // A create answers with the stream's details, its id first.
    let created_id = |request: u64| {
        let answer = answers.iter().find(|answer| answer.header.request == request).expect("answered");
        let (section, payload) = wire::ResultSection::decode_prefix(&answer.body).expect("a result section");
        assert_eq!(section, wire::ResultSection::ok());
        u32::from_le_bytes(payload[..4].try_into().unwrap())
    };
    assert!(created_id(creates[0]) < created_id(creates[1]), "the streams are created in the order sent");
    for (partition, expected) in [(0, [51, 52, 53, 54]), (1, [61, 62, 63, 64])] {
        let (_, body) = world.command(poll(partition));
        assert_eq!(polled_ids(&body), expected, "partition {partition} holds each send once, in order");
    }
}

fn send_of(partition: u32, messages: usize, payload: &[u8]) -> ClientRequest {
    let mut batch = BatchBuilder::new();
    for value in 0..messages {
        batch.push(value as u128 + 1, payload, &[]);
    }
    let send = SendMessages::new(id(0), id(0), Partitioning::PartitionId(partition), batch.finish(0)).unwrap();
    ClientRequest::SendMessages(send)
}

fn poll_of(partition: u32, offset: u64, count: u32) -> ClientRequest {
    ClientRequest::PollMessages(PollMessages {
        consumer: Consumer { kind: ConsumerKind::Consumer, id: id(1) },
        stream: id(0),
        topic: id(0),
        partition_id: Some(partition),
        strategy: PollingStrategy { kind: PollingKind::Offset, value: offset },
        count,
        auto_commit: false,
    })
}

/// What the whole node (connection, admission, the partition's group on another shard, its WAL
/// and segment log on the simulated disk, the reply) allocates, hashes and copies for one send and
/// one poll: a batch of 100 messages costs no more allocations than a batch of 5, so none is per
/// message; each payload byte is copied once in user space on a send and not at all on a poll. The figures
/// (allocations per batch, bytes allocated per payload and per batch byte, bytes hashed, bytes in
/// payload-sized copies) are printed for the performance notes.
#[test]
fn a_batch_costs_the_same_allocations_whatever_its_message_count() {
    const PAYLOAD: [u8; 500] = [7; 500];
    let mut world = World::new();
    setup(&mut world);
    // Each request's story line allocates too; only the node is of interest.
    let measure = |world: &mut World, request: ClientRequest| {
        world.story.clear();
        let hashed_before = checksum::bytes_hashed();
        let (((reply, _), allocations, bytes), _, copied) =
            copies_during(|| allocations_during(|| world.command(request)));
        assert_eq!(reply.status, 0, "{}", world.story.join("\n"));
        (allocations, bytes, checksum::bytes_hashed() - hashed_before, copied)
    };
    // Warm up: the first sends open the segment and grow the node's tables.
    for _ in 0..3 {
        measure(&mut world, send_of(1, 5, &PAYLOAD));
        measure(&mut world, send_of(1, 100, &PAYLOAD));
    }
    let (small_sends, _, _, _) = measure(&mut world, send_of(1, 5, &PAYLOAD));
    let (large_sends, large_send_bytes, send_hashed, send_copied) = measure(&mut world, send_of(1, 100, &PAYLOAD));
    let (small_polls, _, _, _) = measure(&mut world, poll_of(1, 0, 5));
    let (large_polls, large_poll_bytes, poll_hashed, poll_copied) = measure(&mut world, poll_of(1, 5, 100));
    let payload = 100.0 * PAYLOAD.len() as f64;
    // What is hashed is the batch: each message's 48-byte frame and payload, and its header.
    let batch = (BATCH_HEADER_SIZE + 100 * (MESSAGE_FRAME_SIZE + PAYLOAD.len())) as f64;
    println!(
        "bytes hashed per batch byte: {:.2} on a send, {:.2} on a poll",
        send_hashed as f64 / batch,
        poll_hashed as f64 / batch
    );
    // A send stamps its batch (each message hashed once); the prepare's seal takes the batch's
    // messages through their checksums (`prepare_body`), and nothing on the way to the segment
    // log hashes them again (`batch::check_stamped`). A poll validates what it read from the
    // disk once, and its reply's body is not hashed. The headers and small bodies around the
    // batch stay under a twentieth of it.
    // Built with debug assertions, the journal proves each body it takes once more.
    let send_passes = if cfg!(debug_assertions) { 2.05 } else { 1.05 };
    assert!(send_hashed as f64 <= send_passes * batch, "a send hashes {send_hashed} bytes for a batch of {batch}");
    assert!(poll_hashed as f64 <= 1.05 * batch, "a poll hashes {poll_hashed} bytes for a batch of {batch}");
    println!(
        "allocations per send: {small_sends} (5 messages), {large_sends} (100); bytes allocated per payload byte: {:.2}, per batch byte: {:.3}",
        large_send_bytes as f64 / payload,
        large_send_bytes as f64 / batch
    );
    println!(
        "allocations per poll: {small_polls} (5 messages), {large_polls} (100); bytes allocated per payload byte: {:.2}, per batch byte: {:.3}",
        large_poll_bytes as f64 / payload,
        large_poll_bytes as f64 / batch
    );
    // One batch-sized buffer is allocated on a send: the frame that carries the batch from the
    // client's frame to its group (the journal, the WAL's write and the segment log share it).
    // The rest (1.058 batch bytes in all when measured: headers, replies, the WAL slot's own
    // bytes) is small buffers around it. A poll's batches go out as slices of the buffer its
    // read filled (allocated by the world here, as a driver does): the node's own allocations
    // are its reply's head and small buffers (0.012 of the batch when measured).
    // A copy more on either path, or small buffers grown to a tenth of a batch, fail here.
    let (send_bytes, poll_bytes) = (large_send_bytes as f64 / batch, large_poll_bytes as f64 / batch);
    assert!(send_bytes <= 1.1, "a send allocates {send_bytes:.3} bytes per batch byte");
    assert!(poll_bytes <= 0.05, "a poll allocates {poll_bytes:.3} bytes per batch byte");
    // Growing a buffer to fit may cost a reallocation or two more; a per-message allocation
    // would cost 95 more.
    assert!(large_sends <= small_sends + 8, "a send allocates per message: {small_sends} for 5, {large_sends} for 100");
    assert!(large_polls <= small_polls + 8, "a poll allocates per message: {small_polls} for 5, {large_polls} for 100");
    // User-space copies a payload's size: one on a send (its batch from the client's frame into
    // the frame that goes to its group) and none on a poll: its reply goes out in parts, the
    // batches slices of the read (`OutFrame`; the read's bytes before the first batch wanted are
    // skipped by a slice, not moved). Only a batch cut at the poll's edges is copied.
    println!(
        "payload-sized copies: {:.2} batches' bytes on a send, {:.2} on a poll",
        send_copied as f64 / batch,
        poll_copied as f64 / batch
    );
    assert!(send_copied as f64 <= 1.1 * batch, "a send copies {send_copied} bytes for a batch of {batch}");
    assert!(poll_copied as f64 <= 0.1 * batch, "a poll copies {poll_copied} bytes for a batch of {batch}");
    // The copy counter can fail: a payload-sized copy on the node's side is seen.
    let original = vec![3u8; 2 * COPY_COUNTED_MIN];
    let (_, copies, copied) =
        copies_during(|| node_side(|| std::hint::black_box(std::hint::black_box(&original).clone())));
    assert!(copies >= 1 && copied >= original.len() as u64, "the copy counter sees a copy: {copies}, {copied} bytes");
    // The counter itself can fail: a per-message allocation is seen.
    let (_, per_message, _) =
        allocations_during(|| node_side(|| (0..100).map(|index| vec![index as u8; 8]).collect::<Vec<Vec<u8>>>()));
    assert!(per_message > 100, "the counting allocator sees every allocation: {per_message}");
}
