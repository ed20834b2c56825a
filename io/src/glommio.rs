//! The production driver: `Io` on glommio (io_uring), one `LocalExecutor` per shard, pinned.
//!
//! Every ask becomes a local task on the shard's executor; its completion is queued and handed to
//! the state machine by the shard's loop (`next_completion`), never inline. Files are opened by
//! path on first use (created, with their directories, by a write) and kept in a bounded LRU of
//! open descriptors, so thousands of segments never mean thousands of open files. A file this
//! driver created has its directory synced along with its first sync, so its existence is as
//! durable as its bytes.
//!
//! Segment files (`.log`) are written through the page cache by default, like every other file:
//! an append is one pwrite(2) on the shard's thread straight from the buffer the log shares with
//! the journal, and a poll of fresh messages reads memory. iggy-bench measured that faster than
//! O_DIRECT on these machines (`node/config.toml`, `system.segment.direct_io`): O_DIRECT needs a
//! copy into aligned buffers, and an extending O_DIRECT write goes to an io_uring worker thread.
//! `vireo-storage-bench` had measured O_DIRECT at ~1.0 of the raw device rate for one partition
//! against 0.6-0.9 buffered, so it stays an option (`DriverConfig::segments_direct`).
//!
//! With O_DIRECT, appends land at any byte position, so the driver keeps each direct file's last partial block in
//! memory: full blocks go to the device as they fill, and a sync writes the partial block padded
//! with zeros (later rewritten whole). A direct file's writes, syncs and truncates run one at a
//! time in the order asked (measured: a second O_DIRECT write queued behind the first in the
//! kernel costs more than it overlaps), and appends that queue meanwhile go out as one write. A segment file on disk may therefore end in up to one block
//! of zeros past its last batch; recovery knows. Everything else (indexes, superblocks, offsets,
//! the metadata WAL) is a buffered file.

use std::cell::{Cell, RefCell};
use std::collections::{HashMap, HashSet, VecDeque};
use std::io;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::time::Duration;

use glommio::io::{BufferedFile, OpenOptions};
use glommio::sync::Semaphore;

use crate::{Completion, DiskSpace, FileId, FileKind, Instant, Io, IoError, Namespace, OutFrame, Peer, Token, TICK_NS};

#[derive(Clone, Debug)]
pub struct DriverConfig {
    pub data_dir: PathBuf,
    /// Open file descriptors kept at most; the least recently used is closed past this.
    pub open_files_max: usize,
    /// Seeds `Io::random` (the node draws it from the OS at boot).
    pub seed: u64,
    pub net: NetLimits,
    /// TLS on the client connections, when the port serves it.
    pub tls: Option<ClientTls>,
    /// Segments are appended with O_DIRECT (each append copied into aligned buffers, the page
    /// cache left alone) rather than written through the page cache like every other file, from
    /// the buffers the log holds. Off by default: measured slower (`node/config.toml`).
    pub segments_direct: bool,
}

impl DriverConfig {
    pub fn new(data_dir: impl Into<PathBuf>) -> DriverConfig {
        DriverConfig {
            data_dir: data_dir.into(),
            open_files_max: 512,
            seed: 0x5eed,
            net: NetLimits::default(),
            tls: None,
            segments_direct: false,
        }
    }
}

/// TLS on a port's connections: each accepted connection completes a rustls handshake within
/// `handshake_timeout` before anything else is read from it. One that does not (a plain-text
/// client, another protocol, a client that stalls) is closed and counted (`tls_refused`), and
/// connections still shaking hands count against `connections_max` like open ones, so a flood of
/// them is bounded too.
#[derive(Clone)]
pub struct ClientTls {
    pub acceptor: futures_rustls::TlsAcceptor,
    pub handshake_timeout: Duration,
}

impl std::fmt::Debug for ClientTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientTls").field("handshake_timeout", &self.handshake_timeout).finish_non_exhaustive()
    }
}

impl ClientTls {
    /// The handshake on `stream`, bounded by `handshake_timeout`; `None` when it failed or
    /// timed out (the stream is then dropped, which closes it).
    pub async fn accept<S>(&self, stream: S) -> Option<futures_rustls::server::TlsStream<S>>
    where
        S: futures_lite::AsyncRead + futures_lite::AsyncWrite + Unpin,
    {
        let handshake = async { self.acceptor.accept(stream).await.ok() };
        let deadline = async {
            glommio::timer::sleep(self.handshake_timeout).await;
            None
        };
        futures_lite::future::or(handshake, deadline).await
    }
}

/// The bounds on what client connections can make one shard hold, each with its answer when
/// reached (counted in `NetCounters`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NetLimits {
    /// Connections one shard serves at once; one more is closed on arrival.
    pub connections_max: usize,
    /// A frame (header and body) larger than this closes its connection.
    pub frame_size_max: usize,
    /// Bytes queued to one client and not yet written to its socket; past it the client, which
    /// is not reading its replies, is disconnected.
    pub send_queue_bytes_max: usize,
    /// Bytes of frames received from all clients of the shard and not yet taken by its loop; a
    /// reader waits for room before it reads a body (TCP back-pressure, never a buffer without
    /// bound).
    pub inbound_bytes_max: usize,
}

impl Default for NetLimits {
    fn default() -> NetLimits {
        NetLimits {
            connections_max: CONNECTIONS_MAX,
            frame_size_max: FRAME_SIZE_MAX,
            send_queue_bytes_max: SEND_QUEUE_BYTES_MAX,
            inbound_bytes_max: INBOUND_BYTES_MAX,
        }
    }
}

/// What the client connections of one shard did, and what was refused.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NetCounters {
    pub accepted: u64,
    /// Closed on arrival: `connections_max` were open.
    pub refused_full: u64,
    /// Closed for a frame whose size field was below a header or above `frame_size_max`.
    pub frames_oversized: u64,
    /// Disconnected for not reading: `send_queue_bytes_max` or `OUTBOUND_FRAMES_MAX` reached.
    pub slow_readers_cut: u64,
    /// Closed by the shard (`close_client`).
    pub closed_by_server: u64,
    /// Closed before their first frame: the TLS handshake failed or took too long.
    pub tls_refused: u64,
    pub frames_in: u64,
    pub bytes_in: u64,
    pub frames_out: u64,
    pub bytes_out: u64,
}

thread_local! {
    /// The errno of the last OS error this shard's driver mapped to an `IoError`: read when the
    /// failed request completes (on the same thread, in the same poll of its task), so that a
    /// failed write or sync is reported with the operating system's own word for it.
    static LAST_ERRNO: Cell<Option<i32>> = const { Cell::new(None) };
}

fn io_error(error: &io::Error) -> IoError {
    LAST_ERRNO.set(error.raw_os_error());
    match error.raw_os_error() {
        Some(libc::ENOSPC) | Some(libc::EDQUOT) => IoError::NoSpace,
        Some(libc::ENOENT) => IoError::NotFound,
        _ if error.kind() == io::ErrorKind::NotFound => IoError::NotFound,
        _ => IoError::Device,
    }
}

/// glommio wraps most of its I/O errors with the operation and path, which loses the errno in
/// the conversion to `io::Error`: it is taken from the error itself (ENOSPC is `NoSpace`, not a
/// device failure, whichever way it came).
fn glommio_error<T>(error: glommio::GlommioError<T>) -> IoError {
    match error.raw_os_error() {
        Some(errno) => io_error(&io::Error::from_raw_os_error(errno)),
        None => io_error(&io::Error::from(error)),
    }
}

struct FileCache {
    /// Open handles by file and access: a segment has a direct handle for its appends and may
    /// have a buffered one for reads.
    open: HashMap<(FileId, Access), (Handle, u64)>,
    /// The logical length of direct files closed here: on disk they may end in zero padding, and
    /// reopened for appends they must continue where the bytes end, not where the padding does.
    closed_direct_ends: HashMap<FileId, u64>,
    clock: u64,
    max: usize,
}

impl FileCache {
    fn get(&mut self, file: (FileId, Access)) -> Option<Handle> {
        self.clock += 1;
        let clock = self.clock;
        self.open.get_mut(&file).map(|(handle, used)| {
            *used = clock;
            handle.clone()
        })
    }

    fn insert(&mut self, file: (FileId, Access), handle: Handle) -> Handle {
        if let Some(existing) = self.get(file) {
            return existing;
        }
        self.clock += 1;
        self.open.insert(file, (handle.clone(), self.clock));
        handle
    }

    /// Closes the least recently used files while more than `max` are open. A direct file whose
    /// tail block only the driver holds cannot close yet: those are returned, to have their tail
    /// written first (they close on a later pass).
    fn evict(&mut self, busy: &HashSet<FileId>) -> Vec<Rc<DirectFile>> {
        let mut unpadded = Vec::new();
        if self.open.len() <= self.max {
            return unpadded;
        }
        let mut by_age: Vec<((FileId, Access), u64)> = self.open.iter().map(|(key, (_, used))| (*key, *used)).collect();
        by_age.sort_by_key(|(_, used)| *used);
        let mut excess = self.open.len() - self.max;
        for (key, _) in by_age {
            if excess == 0 {
                break;
            }
            let closable = match &self.open[&key].0 {
                Handle::Buffered(_) => true,
                // A file whose sequencer is running an op stays: its state is about to change.
                Handle::Direct(_) if busy.contains(&key.0) => false,
                Handle::Direct(direct) => {
                    let state = direct.state.borrow();
                    let closable = state.in_flight.is_empty() && (state.tail.is_empty() || state.tail_on_disk);
                    if !closable && !state.pad_requested {
                        unpadded.push(direct.clone());
                    }
                    closable
                }
            };
            if closable {
                if let Handle::Direct(direct) = &self.open[&key].0 {
                    self.closed_direct_ends.insert(key.0, direct.state.borrow().logical_end);
                }
                // Dropping the last handle closes the descriptor on the next I/O cycle; a task
                // still using it keeps its own handle until it finishes.
                self.open.remove(&key);
                excess -= 1;
            }
        }
        unpadded
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Access {
    /// O_DIRECT: segment appends, syncs and truncates.
    Direct,
    /// Through the page cache: every other file, and reads of segments (O_DIRECT reads of small
    /// unaligned ranges fail on some devices here with EOPNOTSUPP, and the page cache serves
    /// repeated reads of a segment's hot tail).
    Buffered,
}

/// The I/O block of direct files: offsets, lengths and buffers of O_DIRECT writes are multiples.
const BLOCK: u64 = 4096;
/// Consecutive appends to one direct file are gathered into one write up to this size.
const COALESCE_BYTES_MAX: usize = 8 << 20;

/// A segment file opened with O_DIRECT, and what the driver holds of it in memory.
struct DirectFile {
    id: FileId,
    file: glommio::io::DmaFile,
    state: RefCell<DirectState>,
}

struct DirectState {
    /// Bytes written by the state machine (the file's logical length).
    logical_end: u64,
    /// The bytes of the last, partial block: [align_down(logical_end), logical_end).
    tail: Vec<u8>,
    /// Block writes in flight, for reads to see until the device has them.
    in_flight: Vec<(u64, Rc<glommio::io::DmaBuffer>)>,
    /// The tail is in the file too (a padded block write completed since it last changed).
    tail_on_disk: bool,
    /// A padded write of the tail is queued so that the file can close.
    pad_requested: bool,
}

struct OverlaySources {
    in_flight: Vec<(u64, Rc<glommio::io::DmaBuffer>)>,
    tail: (u64, Vec<u8>),
}

fn overlay(sources: &OverlaySources, offset: u64, bytes: &mut [u8]) {
    let blocks = sources.in_flight.iter().map(|(at, buffer)| (*at, buffer.as_bytes()));
    for (at, source) in blocks.chain(std::iter::once((sources.tail.0, &sources.tail.1[..]))) {
        let from = at.max(offset);
        let to = (at + source.len() as u64).min(offset + bytes.len() as u64);
        if from < to {
            bytes[(from - offset) as usize..(to - offset) as usize]
                .copy_from_slice(&source[(from - at) as usize..(to - at) as usize]);
        }
    }
}

#[derive(Clone)]
enum Handle {
    Buffered(Rc<BufferedFile>),
    Direct(Rc<DirectFile>),
}

struct Shared {
    root: PathBuf,
    segments_direct: bool,
    files: RefCell<FileCache>,
    /// Files this driver created whose directory entry is not yet synced.
    unsynced_entries: RefCell<HashSet<FileId>>,
    /// Writes, syncs and truncates of each direct file, applied in the order they were asked for.
    direct_queues: RefCell<HashMap<FileId, VecDeque<DirectOp>>>,
    /// Completions in the order they finished, and one permit per completion queued: the
    /// shard's loop waits on the permits.
    completions: RefCell<VecDeque<Completion>>,
    ready: Semaphore,
    /// What the connections brought in, in order; `any` wakes a loop waiting for either kind.
    net_events: RefCell<VecDeque<NetEvent>>,
    any: Semaphore,
    /// Frames received and not yet taken by the shard's loop may number at most
    /// `INBOUND_FRAMES_MAX`: a connection's reader waits for a credit before queueing one, so a
    /// client that floods frames is slowed by TCP back-pressure, not buffered without bound.
    inbound_credits: Semaphore,
    /// The same for their bytes (`NetLimits::inbound_bytes_max`): one permit a byte.
    inbound_bytes: Semaphore,
    /// Each open client connection's bounded queue of frames to send.
    connections: RefCell<HashMap<u128, ConnectionEntry>>,
    connection_next: Cell<u64>,
    limits: NetLimits,
    tls: Option<ClientTls>,
    /// Connections still in their TLS handshake (not yet in `connections`).
    handshaking: Cell<usize>,
    net_counters: Cell<NetCounters>,
    /// What client frames are read into, given back by the node once answered.
    receive_buffers: RefCell<crate::receive_buffers::ReceiveBuffers>,
    /// Writes, syncs and truncates that failed, for the shard's log (`take_storage_failures`):
    /// at most `STORAGE_FAILURES_MAX` wait; past it they are only counted.
    storage_failures: RefCell<VecDeque<StorageFailure>>,
    storage_failures_dropped: Cell<u64>,
}

/// Failed writes, syncs and truncates held for the shard's log at most.
pub const STORAGE_FAILURES_MAX: usize = 16;

/// A write, sync or truncate of a data file that failed: what the operator reads in the log.
#[derive(Clone, Debug)]
pub struct StorageFailure {
    pub path: PathBuf,
    pub what: &'static str,
    /// The operating system's error number (EIO, EROFS, ENOSPC, ...), when it gave one.
    pub errno: Option<i32>,
    pub error: IoError,
}

impl std::fmt::Display for StorageFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.errno {
            Some(errno) => write!(
                f,
                "{} of {} failed: {} (errno {errno})",
                self.what,
                self.path.display(),
                io::Error::from_raw_os_error(errno)
            ),
            None => write!(f, "{} of {} failed: {}", self.what, self.path.display(), self.error),
        }
    }
}

/// An open client connection as the driver holds it.
struct ConnectionEntry {
    queue: glommio::channels::local_channel::LocalSender<OutFrame>,
    /// Bytes in `queue` not yet written to the socket.
    queued_bytes: Rc<Cell<usize>>,
    fd: std::os::fd::RawFd,
}

impl ConnectionEntry {
    /// Ends both directions of the socket: the reader sees the end and reports the connection
    /// closed, and dropping the queue ends the writer.
    fn shut_down(&self) {
        // SAFETY: the descriptor stays open until the connection's tasks end, which this only
        // asks them to do; shutdown(2) on a socket has no other effect.
        unsafe { libc::shutdown(self.fd, libc::SHUT_RDWR) };
    }
}

impl Shared {
    fn path(&self, file: FileId) -> PathBuf {
        self.root.join(file.path())
    }

    /// Whether `file` is appended with O_DIRECT through its sequencer.
    fn is_direct(&self, file: FileId) -> bool {
        self.segments_direct && matches!(file.kind, FileKind::Segment(_))
    }

    /// The handle appends, syncs and truncates use: direct for segments, buffered otherwise.
    async fn open(self: &Rc<Self>, file: FileId, create: bool) -> Result<Handle, IoError> {
        let access = if self.is_direct(file) { Access::Direct } else { Access::Buffered };
        self.open_as(file, access, create).await
    }

    /// The handle reads use: always buffered.
    async fn open_for_read(self: &Rc<Self>, file: FileId) -> Result<Handle, IoError> {
        self.open_as(file, Access::Buffered, false).await
    }

    async fn open_as(self: &Rc<Self>, file: FileId, access: Access, create: bool) -> Result<Handle, IoError> {
        if let Some(handle) = self.files.borrow_mut().get((file, access)) {
            return Ok(handle);
        }
        let path = self.path(file);
        if create {
            let parent = path.parent().expect("files live in directories");
            if !parent.exists() {
                std::fs::create_dir_all(parent).map_err(|error| io_error(&error))?;
            }
            if !path.exists() {
                self.unsynced_entries.borrow_mut().insert(file);
            }
        }
        let mut options = OpenOptions::new();
        options.read(true).write(true).create(create);
        let handle = match access {
            Access::Direct => {
                settle_polled_ring_probe(&self.root).await;
                let dma = options.dma_open(&path).await.map_err(glommio_error)?;
                let closed_end = self.files.borrow_mut().closed_direct_ends.remove(&file);
                let logical_end = match closed_end {
                    Some(end) => end,
                    None => dma.file_size().await.map_err(glommio_error)?,
                };
                let tail_start = logical_end / BLOCK * BLOCK;
                let tail = read_tail(&path, tail_start, logical_end)?;
                let state =
                    DirectState { logical_end, tail, in_flight: Vec::new(), tail_on_disk: true, pad_requested: false };
                Handle::Direct(Rc::new(DirectFile { id: file, file: dma, state: RefCell::new(state) }))
            }
            Access::Buffered => Handle::Buffered(Rc::new(options.buffered_open(&path).await.map_err(glommio_error)?)),
        };
        let handle = self.files.borrow_mut().insert((file, access), handle);
        let busy: HashSet<FileId> = self.direct_queues.borrow().keys().copied().collect();
        let unpadded = self.files.borrow_mut().evict(&busy);
        for direct in unpadded {
            direct.state.borrow_mut().pad_requested = true;
            self.enqueue_direct(direct.id, DirectOp::PadTail(direct.clone()));
        }
        Ok(handle)
    }

    /// Queues an operation on a direct file, starting its sequencer if none runs.
    fn enqueue_direct(self: &Rc<Self>, file: FileId, op: DirectOp) {
        let mut queues = self.direct_queues.borrow_mut();
        let start = !queues.contains_key(&file);
        queues.entry(file).or_default().push_back(op);
        drop(queues);
        if start {
            glommio::spawn_local(run_direct_queue(self.clone(), file)).detach();
        }
    }

    /// After a file's first sync: sync its directory entry, and the entries of the directories
    /// the driver created for it.
    fn sync_entry(&self, file: FileId) -> Result<(), IoError> {
        if self.unsynced_entries.borrow_mut().remove(&file) {
            let path = self.path(file);
            let mut directory = path.parent();
            while let Some(at) = directory.filter(|at| at.starts_with(&self.root)) {
                sync_directory(at)?;
                if at == self.root {
                    break;
                }
                directory = at.parent();
            }
        }
        Ok(())
    }

    fn complete(&self, file: Option<FileId>, completion: Completion) {
        let failed = match &completion {
            Completion::Write { result: Err(error), .. } => Some(("write", *error)),
            Completion::Sync { result: Err(error), .. } => Some(("sync", *error)),
            Completion::Truncate { result: Err(error), .. } => Some(("truncate", *error)),
            _ => None,
        };
        // A file that is not there is an answer, not a failure (a truncate or sync of a file not
        // written yet).
        let failed = failed.filter(|(_, error)| *error != IoError::NotFound);
        if let (Some(file), Some((what, error))) = (file, failed) {
            let errno = LAST_ERRNO.take();
            let mut failures = self.storage_failures.borrow_mut();
            if failures.len() < STORAGE_FAILURES_MAX {
                failures.push_back(StorageFailure { path: self.path(file), what, errno, error });
            } else {
                self.storage_failures_dropped.set(self.storage_failures_dropped.get() + 1);
            }
        }
        self.completions.borrow_mut().push_back(completion);
        self.ready.signal(1);
        self.any.signal(1);
    }

    fn count(&self, change: impl FnOnce(&mut NetCounters)) {
        let mut counters = self.net_counters.get();
        change(&mut counters);
        self.net_counters.set(counters);
    }

    /// Queues a frame to a client; a client that let `NetLimits::send_queue_bytes_max` (or
    /// `OUTBOUND_FRAMES_MAX` frames) pile up is cut off instead of buffered without bound.
    fn send_to_client(&self, client: u128, frame: OutFrame) {
        let len = frame.len();
        let full = match self.connections.borrow().get(&client) {
            // Gone already: a reply to a closed connection is dropped, as TCP would.
            None => return,
            Some(entry) => {
                let queued = entry.queued_bytes.get();
                // One frame always fits in an empty queue, whatever its size.
                let over = queued + len > self.limits.send_queue_bytes_max && queued > 0;
                if over || entry.queue.try_send(frame).is_err() {
                    true
                } else {
                    entry.queued_bytes.set(queued + len);
                    false
                }
            }
        };
        if full {
            if let Some(entry) = self.connections.borrow_mut().remove(&client) {
                entry.shut_down();
            }
            self.count(|counters| counters.slow_readers_cut += 1);
        }
    }

    fn net_event(&self, event: NetEvent) {
        self.net_events.borrow_mut().push_back(event);
        self.any.signal(1);
    }
}

/// Syncs a directory so the entries of files created in it are durable.
fn sync_directory(path: &Path) -> Result<(), IoError> {
    let directory = std::fs::File::open(path).map_err(|error| io_error(&error))?;
    directory.sync_all().map_err(|error| io_error(&error))
}

enum DirectOp {
    Write {
        offset: u64,
        bytes: crate::Bytes,
        token: Token,
    },
    Sync {
        token: Token,
    },
    Truncate {
        len: u64,
        token: Token,
    },
    /// The driver's own: write the tail block padded, so the file can be closed.
    PadTail(Rc<DirectFile>),
}

impl DirectFile {
    /// The bytes the device may not have yet, in the order to lay them over a read: block writes
    /// in flight (shared, not copied), then a copy of the tail (under one block).
    fn overlay_sources(&self) -> OverlaySources {
        let state = self.state.borrow();
        let tail_start = state.logical_end - state.tail.len() as u64;
        OverlaySources { in_flight: state.in_flight.clone(), tail: (tail_start, state.tail.clone()) }
    }

    /// Appends (consecutive, in order), in one write from the block the tail starts: the tail,
    /// the parts, and the last partial block padded with zeros, so that a completed append is in
    /// the file (it survives the process, as a completed write must) and not only in the tail
    /// this driver keeps for the next append, which writes that block again. Returns the write
    /// to run; the state is updated before any await, so appends apply in the order asked.
    fn append(
        self: &Rc<Self>,
        offset: u64,
        parts: &[crate::Bytes],
    ) -> Result<Option<impl std::future::Future<Output = Result<(), IoError>>>, IoError> {
        let mut state = self.state.borrow_mut();
        let len: usize = parts.iter().map(|part| part.len()).sum();
        if len == 0 {
            return Ok(None);
        }
        if offset != state.logical_end {
            // Segments are append-only: anything else is a bug in the caller.
            return Err(IoError::Device);
        }
        let start = state.logical_end - state.tail.len() as u64;
        let kept = state.tail.len();
        let filled = kept + len;
        let full = filled / BLOCK as usize * BLOCK as usize;
        let padded = filled.div_ceil(BLOCK as usize) * BLOCK as usize;
        let before = (state.logical_end, state.tail.clone(), state.tail_on_disk);
        state.logical_end += len as u64;
        // One copy, into the aligned buffer the device reads: the tail, then each part, then
        // zeros to the block's end.
        let mut buffer = self.file.alloc_dma_buffer(padded);
        let target = buffer.as_bytes_mut();
        target[..kept].copy_from_slice(&state.tail);
        let mut at = kept;
        for part in parts {
            target[at..at + part.len()].copy_from_slice(part);
            at += part.len();
        }
        target[filled..].fill(0);
        state.tail = target[full..filled].to_vec();
        state.tail_on_disk = false;
        let buffer = Rc::new(buffer);
        state.in_flight.push((start, buffer.clone()));
        let direct = self.clone();
        Ok(Some(async move {
            let result = match direct.file.write_rc_at(buffer.clone(), start).await.map_err(glommio_error) {
                Ok(written) if written >= padded => Ok(()),
                Ok(_) => Err(IoError::NoSpace),
                Err(error) => Err(error),
            };
            let mut state = direct.state.borrow_mut();
            state.in_flight.retain(|(_, held)| !Rc::ptr_eq(held, &buffer));
            if result.is_err() {
                // The appends of this write did not happen: the file is as it was before them,
                // tail bytes of earlier (completed) appends included. Ops on one file run one at
                // a time, so nothing changed the state meanwhile.
                (state.logical_end, state.tail, state.tail_on_disk) = before;
            } else {
                state.tail_on_disk = true;
            }
            result
        }))
    }

    /// Writes the partial tail block, padded with zeros, if the file does not hold it yet.
    async fn pad_tail(self: &Rc<Self>) -> Result<(), IoError> {
        let padded = {
            let mut state = self.state.borrow_mut();
            state.pad_requested = false;
            if state.tail.is_empty() || state.tail_on_disk {
                return Ok(());
            }
            let block = state.logical_end - state.tail.len() as u64;
            let mut buffer = self.file.alloc_dma_buffer(BLOCK as usize);
            buffer.as_bytes_mut().fill(0);
            buffer.as_bytes_mut()[..state.tail.len()].copy_from_slice(&state.tail);
            let buffer = Rc::new(buffer);
            state.in_flight.push((block, buffer.clone()));
            (block, buffer)
        };
        let (block, buffer) = padded;
        let result = self.file.write_rc_at(buffer.clone(), block).await.map(|_| ()).map_err(glommio_error);
        let mut state = self.state.borrow_mut();
        state.in_flight.retain(|(_, held)| !Rc::ptr_eq(held, &buffer));
        // Ops on one file run one at a time, so the tail cannot have changed meanwhile.
        state.tail_on_disk = result.is_ok();
        result
    }

    /// A sync: the partial tail block, padded with zeros, then fdatasync.
    async fn sync(self: &Rc<Self>) -> Result<(), IoError> {
        self.pad_tail().await?;
        self.file.fdatasync().await.map_err(glommio_error)
    }

    async fn truncate(&self, len: u64) -> Result<(), IoError> {
        self.file.truncate(len).await.map_err(glommio_error)?;
        let (tail_start, logical_end) = {
            let state = self.state.borrow();
            (state.logical_end - state.tail.len() as u64, state.logical_end)
        };
        if (tail_start..=logical_end).contains(&len) {
            // Within the block the driver holds: those bytes may never have reached the device.
            let mut state = self.state.borrow_mut();
            state.tail.truncate((len - tail_start) as usize);
            state.logical_end = len;
            state.tail_on_disk = false;
            return Ok(());
        }
        let path = self.file.path().map(|path| path.to_path_buf()).ok_or(IoError::Device)?;
        let tail = read_tail(&path, len / BLOCK * BLOCK, len)?;
        let mut state = self.state.borrow_mut();
        state.logical_end = len;
        state.tail = tail;
        state.tail_on_disk = true;
        Ok(())
    }
}

/// The bytes [tail_start, logical_end) of a direct file: appends need them before they can write
/// that block again. Read through the page cache (kept coherent with O_DIRECT writes by the
/// kernel): O_DIRECT reads fail on these machines' devices with EOPNOTSUPP. At most one block,
/// once per open or truncate.
fn read_tail(path: &Path, tail_start: u64, logical_end: u64) -> Result<Vec<u8>, IoError> {
    use std::os::unix::fs::FileExt;
    let mut tail = vec![0; (logical_end - tail_start) as usize];
    if !tail.is_empty() {
        let file = std::fs::File::open(path).map_err(|error| io_error(&error))?;
        file.read_exact_at(&mut tail, tail_start).map_err(|error| io_error(&error))?;
    }
    Ok(tail)
}

/// Applies a direct file's queued operations in order: one sequencer per file at a time.
async fn run_direct_queue(shared: Rc<Shared>, file: FileId) {
    loop {
        let next = shared.direct_queues.borrow_mut().get_mut(&file).and_then(VecDeque::pop_front);
        let Some(op) = next else {
            shared.direct_queues.borrow_mut().remove(&file);
            return;
        };
        if let DirectOp::PadTail(direct) = op {
            // A failed pad leaves the tail in memory: the file stays open and a sync retries.
            let _ = direct.pad_tail().await;
            continue;
        }
        let create = matches!(op, DirectOp::Write { .. });
        let handle = match shared.open(file, create).await {
            Ok(Handle::Direct(direct)) => Ok(direct),
            Ok(Handle::Buffered(_)) => unreachable!("segments are direct files"),
            Err(error) => Err(error),
        };
        match op {
            DirectOp::Write { offset, bytes, token } => {
                // One write in flight per file (measured: a second one queued behind it in the
                // kernel costs more than it overlaps), and every append queued meanwhile goes
                // out with the next one.
                let mut parts = vec![bytes];
                let mut tokens = vec![token];
                let mut end = offset + parts[0].len() as u64;
                let mut size = parts[0].len();
                while size < COALESCE_BYTES_MAX {
                    let mut queues = shared.direct_queues.borrow_mut();
                    let queue = queues.get_mut(&file).expect("this sequencer's queue");
                    match queue.front() {
                        Some(DirectOp::Write { offset: next, .. }) if *next == end => {}
                        _ => break,
                    }
                    let Some(DirectOp::Write { bytes, token, .. }) = queue.pop_front() else { unreachable!() };
                    end += bytes.len() as u64;
                    size += bytes.len();
                    parts.push(bytes);
                    tokens.push(token);
                }
                let write = handle.and_then(|direct| direct.append(offset, &parts));
                drop(parts);
                let result = match write {
                    Ok(Some(write)) => write.await,
                    Ok(None) => Ok(()),
                    Err(error) => Err(error),
                };
                for token in tokens {
                    shared.complete(Some(file), Completion::Write { token, result });
                }
            }
            DirectOp::Sync { token } => {
                let result = match handle {
                    Ok(direct) => match direct.sync().await {
                        Ok(()) => shared.sync_entry(file),
                        Err(error) => Err(error),
                    },
                    Err(IoError::NotFound) => Ok(()),
                    Err(error) => Err(error),
                };
                shared.complete(Some(file), Completion::Sync { token, result });
            }
            DirectOp::Truncate { len, token } => {
                let result = match handle {
                    Ok(direct) => direct.truncate(len).await,
                    Err(error) => Err(error),
                };
                shared.complete(Some(file), Completion::Truncate { token, result });
            }
            DirectOp::PadTail(_) => unreachable!("handled above"),
        }
    }
}

/// One shard's `Io`. Create it inside the shard's executor.
pub struct GlommioIo {
    shared: Rc<Shared>,
    in_flight: Rc<Cell<usize>>,
    started: std::time::Instant,
    /// Nanoseconds since the Unix epoch when the driver started: `now` counts from there, so the
    /// timestamps groups stamp (created_at, message timestamps, expiry) are wall-clock times,
    /// while `now` itself stays monotonic (a wall clock stepped back does not move it).
    epoch_at_start: u64,
    random_state: u64,
    outbox: Vec<(Peer, Vec<u8>)>,
}

impl GlommioIo {
    pub fn new(config: &DriverConfig) -> io::Result<GlommioIo> {
        std::fs::create_dir_all(&config.data_dir)?;
        Ok(GlommioIo {
            shared: Rc::new(Shared {
                root: config.data_dir.clone(),
                segments_direct: config.segments_direct,
                files: RefCell::new(FileCache {
                    open: HashMap::new(),
                    closed_direct_ends: HashMap::new(),
                    clock: 0,
                    max: config.open_files_max.max(1),
                }),
                unsynced_entries: RefCell::new(HashSet::new()),
                direct_queues: RefCell::new(HashMap::new()),
                completions: RefCell::new(VecDeque::new()),
                ready: Semaphore::new(0),
                net_events: RefCell::new(VecDeque::new()),
                any: Semaphore::new(0),
                inbound_credits: Semaphore::new(INBOUND_FRAMES_MAX as u64),
                inbound_bytes: Semaphore::new(config.net.inbound_bytes_max as u64),
                connections: RefCell::new(HashMap::new()),
                connection_next: Cell::new(0),
                limits: config.net,
                tls: config.tls.clone(),
                handshaking: Cell::new(0),
                net_counters: Cell::new(NetCounters::default()),
                receive_buffers: RefCell::new(crate::receive_buffers::ReceiveBuffers::default()),
                storage_failures: RefCell::new(VecDeque::new()),
                storage_failures_dropped: Cell::new(0),
            }),
            in_flight: Rc::new(Cell::new(0)),
            started: std::time::Instant::now(),
            epoch_at_start: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |since| since.as_nanos() as u64),
            random_state: config.seed,
            outbox: Vec::new(),
        })
    }

    /// Requests asked for and not yet handed back.
    pub fn in_flight(&self) -> usize {
        self.in_flight.get()
    }

    /// Open file descriptors the driver holds.
    pub fn open_files(&self) -> usize {
        self.shared.files.borrow().open.len()
    }

    /// A completion already queued, if any.
    pub fn try_completion(&mut self) -> Option<Completion> {
        if !self.shared.ready.try_acquire(1).unwrap_or(false) {
            return None;
        }
        let completion = self.shared.completions.borrow_mut().pop_front().expect("a permit per completion");
        self.in_flight.set(self.in_flight.get() - 1);
        Some(completion)
    }

    /// Waits for the next completion; `None` when nothing is in flight.
    pub async fn next_completion(&mut self) -> Option<Completion> {
        if let Some(completion) = self.try_completion() {
            return Some(completion);
        }
        if self.in_flight.get() == 0 {
            return None;
        }
        self.shared.ready.acquire(1).await.expect("the semaphore is never closed");
        let completion = self.shared.completions.borrow_mut().pop_front().expect("a permit per completion");
        self.in_flight.set(self.in_flight.get() - 1);
        Some(completion)
    }

    /// Messages the state machine sent to other replicas since the last call (the replica plane's
    /// transport carries them). Messages to clients go straight to their connections.
    pub fn take_outbox(&mut self) -> Vec<(Peer, Vec<u8>)> {
        std::mem::take(&mut self.outbox)
    }

    /// Accepts client connections on `address` (port 0: any free port); returns the address bound.
    /// Each connection becomes a `Peer::Client` whose frames arrive as `NetEvent`s.
    pub fn listen(&mut self, address: std::net::SocketAddr) -> io::Result<std::net::SocketAddr> {
        let listener = glommio::net::TcpListener::bind(address).map_err(io::Error::from)?;
        let bound = listener.local_addr().map_err(io::Error::from)?;
        let server = self.server();
        glommio::spawn_local(async move {
            loop {
                match listener.accept().await {
                    Ok(stream) => server.serve(stream),
                    // Out of descriptors or a connection reset before accept: the listener stays;
                    // try again shortly instead of spinning.
                    Err(_) => glommio::timer::sleep(Duration::from_millis(10)).await,
                }
            }
        })
        .detach();
        Ok(bound)
    }

    /// A handle that serves accepted connections on this shard (for a listener's task).
    pub fn server(&mut self) -> ConnectionServer {
        ConnectionServer { shared: self.shared.clone(), seed: self.random() }
    }

    /// Queues a frame on a client connection (what `Io::send` to a `Peer::Client` does); its parts
    /// go to the socket one after the other, never joined into one buffer.
    pub fn send_to_client(&mut self, client: u128, frame: OutFrame) {
        self.shared.send_to_client(client, frame);
    }

    /// A client frame the node is done with: the next large frame may be read into it.
    pub fn recycle_frame(&mut self, frame: Vec<u8>) {
        self.shared.receive_buffers.borrow_mut().give(frame);
    }

    /// Closes a client connection; its `Closed` event follows.
    pub fn close_client(&mut self, client: u128) {
        if let Some(entry) = self.shared.connections.borrow_mut().remove(&client) {
            entry.shut_down();
            self.shared.count(|counters| counters.closed_by_server += 1);
        }
    }

    pub fn net_counters(&self) -> NetCounters {
        self.shared.net_counters.get()
    }

    /// A completion or network event already queued, if any (the non-waiting `next_event`).
    pub fn try_event(&mut self) -> Option<DriverEvent> {
        if let Some(completion) = self.try_completion() {
            return Some(DriverEvent::Completion(completion));
        }
        let event = self.shared.net_events.borrow_mut().pop_front()?;
        if let NetEvent::Frame { frame, .. } = &event {
            self.shared.inbound_credits.signal(1);
            self.shared.inbound_bytes.signal(frame.len() as u64);
        }
        Some(DriverEvent::Net(event))
    }

    /// Waits until a completion or network event may be queued (a wake-up, not a count: the
    /// caller takes them with `try_event`).
    pub async fn wait_event(&self) {
        if !self.shared.completions.borrow().is_empty() || !self.shared.net_events.borrow().is_empty() {
            return;
        }
        let _ = self.shared.any.acquire(1).await;
        let stale = self.shared.any.available();
        let _ = self.shared.any.try_acquire(stale);
    }

    /// The next completion or network event, waiting for one.
    pub async fn next_event(&mut self) -> DriverEvent {
        loop {
            if let Some(completion) = self.try_completion() {
                return DriverEvent::Completion(completion);
            }
            let event = self.shared.net_events.borrow_mut().pop_front();
            if let Some(event) = event {
                if let NetEvent::Frame { frame, .. } = &event {
                    self.shared.inbound_credits.signal(1);
                    self.shared.inbound_bytes.signal(frame.len() as u64);
                }
                return DriverEvent::Net(event);
            }
            // A wake-up, not a count: events taken by the `try_` calls leave permits behind, and
            // each only costs one more look at the queues.
            self.shared.any.acquire(1).await.expect("the semaphore is never closed");
        }
    }

    /// Client connections open now.
    pub fn connections(&self) -> usize {
        self.shared.connections.borrow().len()
    }

    fn direct(&mut self, file: FileId, op: DirectOp) {
        self.in_flight.set(self.in_flight.get() + 1);
        self.shared.enqueue_direct(file, op);
    }

    /// Runs a request of `file` (none: a listing) to its completion.
    fn spawn(&mut self, file: Option<FileId>, task: impl std::future::Future<Output = Completion> + 'static) {
        self.in_flight.set(self.in_flight.get() + 1);
        let shared = self.shared.clone();
        glommio::spawn_local(async move {
            let completion = task.await;
            shared.complete(file, completion);
        })
        .detach();
    }

    /// The writes, syncs and truncates that failed since the last call, and how many more were
    /// only counted (`STORAGE_FAILURES_MAX`).
    pub fn take_storage_failures(&mut self) -> (Vec<StorageFailure>, u64) {
        let failures = self.shared.storage_failures.borrow_mut().drain(..).collect();
        (failures, self.shared.storage_failures_dropped.take())
    }
}

/// Writes all of `parts`, back to back, at `offset` of a file that goes through the page cache,
/// with pwritev(2) on the shard's own thread; a short write goes on from where it stopped, and a write that takes
/// nothing (the device is full) is `NoSpace`, after which the caller cuts the file back.
/// io_uring hands every buffered write to ext4 to one of its worker threads
/// (ext4 takes no non-blocking buffered writes), which costs a thread hop and two context
/// switches per WAL slot, header and index entry; a write into the page cache does not wait for
/// the device. Measured on the pinned producer, 8 rounds each: 349 -> 407 MB/s, 3.18 -> 2.65
/// CPU-seconds per GB. What it gives up: when the kernel throttles a writer past its dirty-page
/// limit, the whole shard waits, not one worker.
fn write_all(handle: &BufferedFile, offset: u64, parts: &[&[u8]]) -> Result<(), IoError> {
    use std::os::fd::AsRawFd;
    let total: usize = parts.iter().map(|part| part.len()).sum();
    let mut at = 0usize;
    while at < total {
        // The parts from `at` on (several: one pwritev(2) writes them back to back), the first
        // one cut where a short write stopped.
        let mut skip = at;
        let iovecs: Vec<libc::iovec> = parts
            .iter()
            .filter_map(|part| {
                if skip >= part.len() {
                    skip -= part.len();
                    return None;
                }
                let rest = &part[skip..];
                skip = 0;
                Some(libc::iovec { iov_base: rest.as_ptr() as *mut libc::c_void, iov_len: rest.len() })
            })
            .collect();
        // SAFETY: pwritev(2) from live buffers (`parts` outlives the call) into a file this
        // handle keeps open; the iovecs only read them.
        let written = unsafe {
            libc::pwritev(handle.as_raw_fd(), iovecs.as_ptr(), iovecs.len() as i32, (offset + at as u64) as i64)
        };
        if written < 0 {
            let error = io::Error::last_os_error();
            if error.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(io_error(&error));
        }
        if written == 0 {
            return Err(IoError::NoSpace);
        }
        at += written as usize;
    }
    Ok(())
}

impl Io for GlommioIo {
    fn now(&self) -> Instant {
        self.epoch_at_start + self.started.elapsed().as_nanos() as u64
    }

    fn send(&mut self, to: Peer, message: Vec<u8>) {
        match to {
            Peer::Replica(_) => self.outbox.push((to, message)),
            Peer::Client(client) => self.shared.send_to_client(client, message.into()),
        }
    }

    fn send_frame(&mut self, to: Peer, frame: OutFrame) {
        match to {
            Peer::Replica(_) => self.outbox.push((to, frame.into_whole())),
            Peer::Client(client) => self.shared.send_to_client(client, frame),
        }
    }

    fn read(&mut self, file: FileId, offset: u64, len: usize, token: Token) {
        let shared = self.shared.clone();
        self.spawn(Some(file), async move {
            let result = async {
                let handle = match shared.open_for_read(file).await {
                    Ok(Handle::Buffered(handle)) => handle,
                    Ok(Handle::Direct(_)) => unreachable!("reads are buffered"),
                    Err(IoError::NotFound) => return Ok(vec![0; len]),
                    Err(error) => return Err(error),
                };
                // What the driver holds of a direct file before the read: a block write that
                // completes during the read leaves neither the disk (read before it landed) nor
                // the state (cleared after) with its bytes, but this snapshot has them.
                let before = match shared.files.borrow().open.get(&(file, Access::Direct)) {
                    Some((Handle::Direct(direct), _)) => Some(direct.overlay_sources()),
                    _ => None,
                };
                let mut bytes = Vec::with_capacity(len);
                while bytes.len() < len {
                    let chunk =
                        handle.read_at(offset + bytes.len() as u64, len - bytes.len()).await.map_err(glommio_error)?;
                    if chunk.is_empty() {
                        break;
                    }
                    bytes.extend_from_slice(&chunk);
                }
                bytes.resize(len, 0);
                if let Some(sources) = before {
                    overlay(&sources, offset, &mut bytes);
                }
                // What a direct file's appends hold now that the device may not have yet.
                if let Some((Handle::Direct(direct), _)) = shared.files.borrow().open.get(&(file, Access::Direct)) {
                    overlay(&direct.overlay_sources(), offset, &mut bytes);
                }
                Ok(bytes)
            }
            .await;
            Completion::Read { token, result }
        });
    }

    fn write(&mut self, file: FileId, offset: u64, bytes: crate::Bytes, token: Token) {
        if self.shared.is_direct(file) {
            return self.direct(file, DirectOp::Write { offset, bytes, token });
        }
        let shared = self.shared.clone();
        self.spawn(Some(file), async move {
            let result = async {
                let Handle::Buffered(handle) = shared.open(file, true).await? else { unreachable!("buffered file") };
                if bytes.is_empty() {
                    return Ok(());
                }
                write_all(&handle, offset, &[&bytes])
            }
            .await;
            Completion::Write { token, result }
        });
    }

    fn write_vectored(&mut self, file: FileId, offset: u64, parts: [crate::Bytes; 2], token: Token) {
        if self.shared.is_direct(file) {
            // A direct file's appends are copied into aligned buffers anyway: joined there.
            let joined: Vec<u8> = [&parts[0][..], &parts[1][..]].concat();
            return self.direct(file, DirectOp::Write { offset, bytes: joined.into(), token });
        }
        let shared = self.shared.clone();
        self.spawn(Some(file), async move {
            let result = async {
                let Handle::Buffered(handle) = shared.open(file, true).await? else { unreachable!("buffered file") };
                write_all(&handle, offset, &[&parts[0], &parts[1]])
            }
            .await;
            Completion::Write { token, result }
        });
    }

    fn sync(&mut self, file: FileId, token: Token) {
        if self.shared.is_direct(file) {
            return self.direct(file, DirectOp::Sync { token });
        }
        let shared = self.shared.clone();
        self.spawn(Some(file), async move {
            let result = async {
                let handle = match shared.open(file, false).await {
                    Ok(Handle::Buffered(handle)) => handle,
                    Ok(Handle::Direct(_)) => unreachable!("direct files sync through their sequencer"),
                    Err(IoError::NotFound) => return Ok(()),
                    Err(error) => return Err(error),
                };
                handle.fdatasync().await.map_err(glommio_error)?;
                shared.sync_entry(file)
            }
            .await;
            Completion::Sync { token, result }
        });
    }

    fn truncate(&mut self, file: FileId, len: u64, token: Token) {
        if self.shared.is_direct(file) {
            return self.direct(file, DirectOp::Truncate { len, token });
        }
        let shared = self.shared.clone();
        self.spawn(Some(file), async move {
            let result = async {
                let Handle::Buffered(handle) = shared.open(file, false).await? else { unreachable!("buffered file") };
                handle.truncate(len).await.map_err(glommio_error)
            }
            .await;
            Completion::Truncate { token, result }
        });
    }

    fn remove(&mut self, file: FileId, token: Token) {
        let shared = self.shared.clone();
        shared.files.borrow_mut().open.retain(|(open, _), _| *open != file);
        shared.files.borrow_mut().closed_direct_ends.remove(&file);
        shared.unsynced_entries.borrow_mut().remove(&file);
        self.spawn(Some(file), async move {
            let result = match glommio::io::remove(shared.path(file)).await.map_err(glommio_error) {
                Ok(()) | Err(IoError::NotFound) => Ok(()),
                Err(error) => Err(error),
            };
            Completion::Remove { token, result }
        });
    }

    fn list(&mut self, namespace: Namespace, token: Token) {
        let directory = self.shared.root.join(namespace.directory());
        self.spawn(None, async move {
            let mut files = Vec::new();
            let mut result = Ok(());
            for (sub, prefix) in
                [("", ""), ("offsets/consumers", "offsets/consumers/"), ("offsets/groups", "offsets/groups/")]
            {
                let entries = match std::fs::read_dir(directory.join(sub)) {
                    Ok(entries) => entries,
                    Err(error) if error.kind() == io::ErrorKind::NotFound => continue,
                    Err(error) => {
                        result = Err(io_error(&error));
                        break;
                    }
                };
                // A listing that skipped an entry, or guessed a size, would make recovery see a gap
                // in the log where there is none: any error fails the whole listing.
                for entry in entries {
                    let entry = match entry {
                        Ok(entry) => entry,
                        Err(error) => {
                            result = Err(io_error(&error));
                            break;
                        }
                    };
                    let name = format!("{prefix}{}", entry.file_name().to_string_lossy());
                    let Some(kind) = FileKind::parse(&name) else { continue };
                    match entry.metadata() {
                        Ok(metadata) => files.push((kind, metadata.len())),
                        Err(error) => {
                            result = Err(io_error(&error));
                            break;
                        }
                    }
                }
                if result.is_err() {
                    break;
                }
            }
            files.sort();
            Completion::List { token, result: result.map(|()| files) }
        });
    }

    fn disk_space(&self) -> Option<DiskSpace> {
        let path = std::ffi::CString::new(self.shared.root.as_os_str().as_encoded_bytes()).ok()?;
        // SAFETY: statvfs(2) fills the zeroed struct it is given from a NUL-terminated path.
        let mut stat: libc::statvfs = unsafe { std::mem::zeroed() };
        if unsafe { libc::statvfs(path.as_ptr(), &mut stat) } != 0 {
            return None;
        }
        let block = stat.f_frsize as u64;
        Some(DiskSpace { free: stat.f_bavail as u64 * block, total: stat.f_blocks as u64 * block })
    }

    fn random(&mut self) -> u64 {
        // splitmix64: a fast, well-mixed sequence from the driver's seed.
        self.random_state = self.random_state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.random_state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

/// Which CPUs the shards run on (`cpu_allocation`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CpuAllocation {
    /// One shard per online CPU.
    All,
    /// The first N CPUs.
    Count(usize),
    /// CPUs start..end.
    Range(usize, usize),
}

impl CpuAllocation {
    pub fn cpus(&self) -> Vec<usize> {
        let online = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
        match *self {
            CpuAllocation::All => (0..online).collect(),
            CpuAllocation::Count(count) => (0..count.min(online).max(1)).collect(),
            CpuAllocation::Range(start, end) => (start..end.min(online)).collect(),
        }
    }
}

/// What a shard's task gets: its number, the shard count and its ends of the bounded channels to
/// every other shard (a full send waits: back-pressure, nothing dropped).
pub struct ShardContext<M: Send + 'static> {
    pub shard: usize,
    pub shard_count: usize,
    pub senders: glommio::channels::channel_mesh::Senders<M>,
    pub receivers: glommio::channels::channel_mesh::Receivers<M>,
}

/// Runs one pinned `LocalExecutor` per CPU of `cpus`, each running `shard_main`, joined by a full
/// mesh of bounded channels of `channel_capacity` messages; returns each shard's result in order.
pub fn run_shards<M, T, F, Fut>(cpus: &[usize], channel_capacity: usize, shard_main: F) -> io::Result<Vec<T>>
where
    M: Send + 'static,
    T: Send + 'static,
    F: Fn(ShardContext<M>) -> Fut + Send + Clone + 'static,
    Fut: std::future::Future<Output = T> + 'static,
{
    let mesh = glommio::channels::channel_mesh::MeshBuilder::<M, _>::full(cpus.len(), channel_capacity);
    let shard_count = cpus.len();
    let mut handles = Vec::new();
    for (placed, &cpu) in cpus.iter().enumerate() {
        let (mesh, shard_main) = (mesh.clone(), shard_main.clone());
        let handle = glommio::LocalExecutorBuilder::new(glommio::Placement::Fixed(cpu))
            .name(&format!("vireo-shard-{placed}"))
            .spawn(move || async move {
                let (senders, receivers) = mesh.join().await.expect("shards join the mesh");
                // The mesh numbers its peers by executor, in the order they were made: a shard's
                // number is its index there, so that `senders.send_to(n)` reaches shard n.
                let shard = senders.peer_id();
                shard_main(ShardContext { shard, shard_count, senders, receivers }).await
            })
            .map_err(io::Error::from)?;
        handles.push(handle);
    }
    handles.into_iter().map(|handle| handle.join().map_err(io::Error::from)).collect()
}

/// Sleeps until the next tick boundary: shards call their state machines' `tick` on it.
pub async fn next_tick() {
    glommio::timer::sleep(Duration::from_nanos(TICK_NS)).await;
}

/// The raw device rate the benchmark compares against: `total` bytes written sequentially with
/// O_DIRECT in `chunk`-byte aligned writes, `depth` in flight, then one fdatasync. Returns the
/// elapsed time; the file is removed afterwards.
pub async fn measure_raw_write(path: &Path, total: u64, chunk: usize, depth: usize) -> io::Result<Duration> {
    let file = Rc::new(glommio::io::DmaFile::create(path).await.map_err(io::Error::from)?);
    let started = std::time::Instant::now();
    let mut pending = VecDeque::new();
    for at in 0..total / chunk as u64 {
        let mut buffer = file.alloc_dma_buffer(chunk);
        buffer.as_bytes_mut().fill(0xa5);
        let writer = file.clone();
        pending.push_back(glommio::spawn_local(async move { writer.write_at(buffer, at * chunk as u64).await }));
        if pending.len() >= depth {
            pending.pop_front().expect("pending").await.map_err(io::Error::from)?;
        }
    }
    for write in pending {
        write.await.map_err(io::Error::from)?;
    }
    file.fdatasync().await.map_err(io::Error::from)?;
    let elapsed = started.elapsed();
    glommio::io::remove(path).await.map_err(io::Error::from)?;
    Ok(elapsed)
}

/// fdatasync latency of `path`'s directory: `rounds` times, append 4 KiB and fdatasync; returns
/// each round's latency.
pub async fn measure_fdatasync(path: &Path, rounds: usize) -> io::Result<Vec<Duration>> {
    let file = BufferedFile::create(path).await.map_err(io::Error::from)?;
    let mut latencies = Vec::with_capacity(rounds);
    for round in 0..rounds {
        let started = std::time::Instant::now();
        file.write_at(vec![0x5a; 4096], round as u64 * 4096).await.map_err(io::Error::from)?;
        file.fdatasync().await.map_err(io::Error::from)?;
        latencies.push(started.elapsed());
    }
    file.close().await.map_err(io::Error::from)?;
    glommio::io::remove(path).await.map_err(io::Error::from)?;
    Ok(latencies)
}

/// Makes every file under `directory` durable and drops it from the page cache, so the next read
/// comes from the device (a cold read).
pub fn evict_page_cache(directory: &Path) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    for entry in std::fs::read_dir(directory)? {
        let entry = entry?;
        if entry.file_type()?.is_dir() {
            evict_page_cache(&entry.path())?;
            continue;
        }
        let file = std::fs::File::open(entry.path())?;
        file.sync_all()?;
        // SAFETY: a valid open descriptor; the advice only affects caching.
        let status = unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
        if status != 0 {
            return Err(io::Error::from_raw_os_error(status));
        }
    }
    Ok(())
}

/// Runs `main` on one `LocalExecutor` pinned to `cpu` and returns its result (tools and tests
/// that need one shard).
pub fn run_on_cpu<T, F, Fut>(cpu: usize, name: &str, main: F) -> io::Result<T>
where
    T: Send + 'static,
    F: FnOnce() -> Fut + Send + 'static,
    Fut: std::future::Future<Output = T> + 'static,
{
    glommio::LocalExecutorBuilder::new(glommio::Placement::Fixed(cpu))
        .name(name)
        .spawn(main)
        .map_err(io::Error::from)?
        .join()
        .map_err(io::Error::from)
}

/// Lets the shard's other tasks (the I/O this driver spawned) run before the caller goes on: a
/// shard's loop calls it between requests so submissions and completions keep flowing.
pub async fn yield_to_io() {
    glommio::executor().yield_now().await;
}

/// Flushes every filesystem's dirty pages (sync(2)), so a measurement does not pay for the
/// writeback of what ran before it.
pub fn flush_all_filesystems() {
    // SAFETY: sync(2) takes no arguments and cannot fail.
    unsafe { libc::sync() };
}

/// Keeps freed heap memory in the process instead of returning it to the kernel, so the buffers
/// of a steady stream of batches (hundreds of KiB each) are reused rather than page-faulted in
/// anew every time: what Iggy's memory pool does, with glibc's own allocator.
///
/// glibc takes an mmap threshold of at most 32 MiB (half its largest heap) and refuses more
/// without a word, while any threshold set turns its own adjustment off: asking for 256 MiB left
/// it at 128 KiB for good, and every batch was an mmap whose pages the kernel zeroed as they were
/// first touched (`clear_page_erms`, 5% of the pinned producer's samples). Both calls are checked.
pub fn keep_freed_memory() -> Result<(), String> {
    /// Allocations below come from the heap: batches of every usual size (a frame may reach
    /// `FRAME_SIZE_MAX`; one above this is mapped).
    const MMAP_THRESHOLD: libc::c_int = 32 << 20;
    /// Freed memory at the top of a heap is kept up to this much.
    const TRIM_THRESHOLD: libc::c_int = 256 << 20;
    for (parameter, name, value) in [
        (libc::M_MMAP_THRESHOLD, "M_MMAP_THRESHOLD", MMAP_THRESHOLD),
        (libc::M_TRIM_THRESHOLD, "M_TRIM_THRESHOLD", TRIM_THRESHOLD),
    ] {
        // SAFETY: mallopt only changes allocator thresholds.
        if unsafe { libc::mallopt(parameter, value) } != 1 {
            return Err(format!("mallopt({name}, {value}) refused"));
        }
    }
    Ok(())
}

/// Every frame, both ways, is a 256-byte header whose u32 at byte 48 is the frame's whole size
/// (`PROTOCOL.md`); frames larger than this are refused and the connection closed.
pub const FRAME_HEADER_SIZE: usize = 256;
const FRAME_SIZE_OFFSET: usize = 48;
pub const FRAME_SIZE_MAX: usize = 64 << 20;
/// Client connections one shard keeps open at most; past it new ones are closed on accept.
pub const CONNECTIONS_MAX: usize = 10_000;
/// Frames queued to one client at most; past it the client is disconnected.
pub const OUTBOUND_FRAMES_MAX: usize = 1024;
/// Frames received from all clients and not yet handled at most (see `inbound_credits`).
pub const INBOUND_FRAMES_MAX: usize = 4096;
/// Bytes queued to one client at most (`NetLimits::send_queue_bytes_max`'s default).
pub const SEND_QUEUE_BYTES_MAX: usize = 64 << 20;
/// Bytes received and not yet handled at most (`NetLimits::inbound_bytes_max`'s default): room
/// for the largest frame twice.
pub const INBOUND_BYTES_MAX: usize = 2 * FRAME_SIZE_MAX;

/// What a shard's loop gets from its driver.
#[derive(Debug)]
pub enum DriverEvent {
    Completion(Completion),
    Net(NetEvent),
}

#[derive(Debug, PartialEq, Eq)]
pub enum NetEvent {
    Connected {
        client: u128,
        address: Option<std::net::SocketAddr>,
    },
    /// One whole frame (header and body).
    Frame {
        client: u128,
        frame: Vec<u8>,
    },
    Closed {
        client: u128,
        reason: String,
    },
}

fn mix(value: u64) -> u64 {
    let mut z = value.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Serves accepted connections on the shard it was made on: each gets an id, a bounded send
/// queue, and a reader that turns its bytes into frames.
#[derive(Clone)]
pub struct ConnectionServer {
    shared: Rc<Shared>,
    seed: u64,
}

impl ConnectionServer {
    /// Serves one accepted connection, or closes it at once when `connections_max` are open.
    pub fn serve(&self, stream: glommio::net::TcpStream) {
        let shared = &self.shared;
        if shared.connections.borrow().len() + shared.handshaking.get() >= shared.limits.connections_max {
            // Full: the new connection is closed (dropped), the others go on.
            shared.count(|counters| counters.refused_full += 1);
            return;
        }
        shared.count(|counters| counters.accepted += 1);
        // Unguessable ids: a client cannot name another's connection.
        let counter = shared.connection_next.get();
        shared.connection_next.set(counter + 1);
        let client = ((mix(self.seed ^ counter) as u128) << 64) | mix(self.seed.rotate_left(17) ^ counter) as u128;
        glommio::spawn_local(serve_connection(shared.clone(), client, stream)).detach();
    }
}

async fn serve_connection(shared: Rc<Shared>, client: u128, stream: glommio::net::TcpStream) {
    use std::os::fd::AsRawFd;
    let address = stream.peer_addr().ok();
    let _ = stream.set_nodelay(true);
    let fd = stream.as_raw_fd();
    let Some(tls) = shared.tls.clone() else {
        return serve_frames(shared, client, address, fd, Some(fd), stream).await;
    };
    shared.handshaking.set(shared.handshaking.get() + 1);
    let accepted = tls.accept(stream).await;
    shared.handshaking.set(shared.handshaking.get() - 1);
    match accepted {
        Some(stream) => serve_frames(shared, client, address, fd, None, stream).await,
        None => shared.count(|counters| counters.tls_refused += 1),
    }
}

/// Parts one gather write offers the socket; a frame's later parts go by the usual writes.
const GATHER_PARTS_MAX: usize = 64;

/// Sends as much of a frame in parts as a plain socket takes now, in one `sendmsg` that does not
/// wait: a poll's reply leaves as one train of segments, not a header alone that wakes the client
/// before its batches follow (as separate writes would). Returns the bytes sent: 0 on a full
/// socket, or on an error the next write meets again and reports.
fn send_parts_now(socket: std::os::fd::RawFd, frame: &OutFrame) -> usize {
    let empty = libc::iovec { iov_base: std::ptr::null_mut(), iov_len: 0 };
    let mut iov = [empty; GATHER_PARTS_MAX];
    let mut count = 0;
    for (slot, part) in iov.iter_mut().zip(frame.parts()) {
        *slot = libc::iovec { iov_base: part.as_ptr() as *mut libc::c_void, iov_len: part.len() };
        count += 1;
    }
    // SAFETY: a zeroed msghdr is a valid empty one; only its vector is set below.
    let mut message: libc::msghdr = unsafe { std::mem::zeroed() };
    message.msg_iov = iov.as_mut_ptr();
    message.msg_iovlen = count as _;
    // SAFETY: every iovec points into one of `frame`'s parts, alive for the whole call, and
    // sendmsg only reads them; the socket is this connection's own.
    let sent = unsafe { libc::sendmsg(socket, &message, libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL) };
    usize::try_from(sent).unwrap_or(0)
}

/// Reads a connection's frames into the shard's events and writes its queued frames, until either
/// side ends it. `plain` is the socket when the stream is the socket itself (no TLS): a frame in
/// parts is then offered to it in one gather write first (`send_parts_now`).
async fn serve_frames<S>(
    shared: Rc<Shared>,
    client: u128,
    address: Option<std::net::SocketAddr>,
    fd: std::os::fd::RawFd,
    plain: Option<std::os::fd::RawFd>,
    stream: S,
) where
    S: futures_lite::AsyncRead + futures_lite::AsyncWrite + Unpin + 'static,
{
    use futures_lite::{AsyncReadExt, AsyncWriteExt};
    let (mut reader, mut writer) = futures_lite::io::split(stream);
    let (sender, receiver) = glommio::channels::local_channel::new_bounded::<OutFrame>(OUTBOUND_FRAMES_MAX);
    let queued_bytes = Rc::new(Cell::new(0usize));
    shared
        .connections
        .borrow_mut()
        .insert(client, ConnectionEntry { queue: sender, queued_bytes: queued_bytes.clone(), fd });
    shared.net_event(NetEvent::Connected { client, address });
    let writer_shared = shared.clone();
    glommio::spawn_local(async move {
        while let Some(frame) = receiver.recv().await {
            let len = frame.len();
            // A TLS stream may hold the frame's last record until flushed (a plain socket holds
            // nothing: its flush does nothing).
            let sent = match plain {
                Some(socket) if !frame.tail.is_empty() => send_parts_now(socket, &frame),
                _ => 0,
            };
            let mut written = true;
            for part in frame.parts_from(sent) {
                if writer.write_all(part).await.is_err() {
                    written = false;
                    break;
                }
            }
            if !written || writer.flush().await.is_err() {
                break;
            }
            queued_bytes.set(queued_bytes.get().saturating_sub(len));
            writer_shared.count(|counters| {
                counters.frames_out += 1;
                counters.bytes_out += len as u64;
            });
        }
        let _ = writer.close().await;
    })
    .detach();
    let frame_size_max = shared.limits.frame_size_max.min(shared.limits.inbound_bytes_max);
    let reason = loop {
        let mut header = [0u8; FRAME_HEADER_SIZE];
        if let Err(error) = reader.read_exact(&mut header).await {
            break if error.kind() == io::ErrorKind::UnexpectedEof {
                "closed by the client".to_string()
            } else {
                error.to_string()
            };
        }
        let size = u32::from_le_bytes(header[FRAME_SIZE_OFFSET..FRAME_SIZE_OFFSET + 4].try_into().unwrap()) as usize;
        if !(FRAME_HEADER_SIZE..=frame_size_max).contains(&size) {
            shared.count(|counters| counters.frames_oversized += 1);
            break format!("frame size {size} outside {FRAME_HEADER_SIZE}..={frame_size_max}");
        }
        if !shared.connections.borrow().contains_key(&client) {
            break "disconnected by the server".to_string();
        }
        // Room for the whole frame before its body is read: what clients send and the loop has
        // not taken stays under `inbound_bytes_max`.
        if shared.inbound_bytes.acquire(size as u64).await.is_err() {
            break "shutting down".to_string();
        }
        let mut frame = shared.receive_buffers.borrow_mut().take(size);
        frame[..FRAME_HEADER_SIZE].copy_from_slice(&header);
        if let Err(error) = reader.read_exact(&mut frame[FRAME_HEADER_SIZE..]).await {
            shared.inbound_bytes.signal(size as u64);
            break error.to_string();
        }
        if shared.inbound_credits.acquire(1).await.is_err() {
            break "shutting down".to_string();
        }
        shared.count(|counters| {
            counters.frames_in += 1;
            counters.bytes_in += size as u64;
        });
        shared.net_event(NetEvent::Frame { client, frame });
    };
    // Dropping the queue ends the writer, which closes the socket.
    shared.connections.borrow_mut().remove(&client);
    shared.net_event(NetEvent::Closed { client, reason });
}

thread_local! {
    /// The devices (by id) whose polled-ring probe this thread's executor has had answered (see
    /// `settle_polled_ring_probe`).
    static POLLED_RING_PROBES_SETTLED: RefCell<HashSet<u64>> = RefCell::new(HashSet::new());
}

/// The file `settle_polled_ring_probe` writes, opens and removes in the data directory.
const POLLED_RING_PROBE: &str = ".polled-ring-probe";

/// glommio sends a direct file's reads and writes to its polled ring (`IORING_SETUP_IOPOLL`) when
/// a probe says the device completes polled I/O: the first direct file it opens on a device, per
/// thread, gets one polled read of a block at offset 0, and any answer but "not supported" counts
/// as yes. On a new, empty segment that read stops at the end of the file without reaching the
/// device, so the probe says yes whatever the device can do; and while a polled write is in
/// flight the executor cannot sleep: it spins, arming and cancelling its preemption timers each
/// turn, until the write completes (measured on the pinned producer: 14 executor turns per
/// 250 KB batch, 2 of which slept; with enforced fsync, 75). So the first direct open on each
/// device of each shard opens a file that holds a block first, where the probe asks the device
/// itself: a device that polls still says yes, one that does not (these machines' virtio disks)
/// says "not supported", and the shard's direct files then go to the ring it sleeps on. Should
/// the probe file not be written (a full disk), glommio probes the segment as before.
async fn settle_polled_ring_probe(root: &Path) {
    use std::os::unix::fs::MetadataExt;
    let Ok(device) = std::fs::metadata(root).map(|metadata| metadata.dev()) else { return };
    if !POLLED_RING_PROBES_SETTLED.with(|settled| settled.borrow_mut().insert(device)) {
        return;
    }
    let path = root.join(POLLED_RING_PROBE);
    let written = std::fs::write(&path, vec![0u8; BLOCK as usize])
        .and_then(|()| std::fs::File::open(&path).and_then(|file| file.sync_all()));
    if written.is_ok() {
        if let Ok(file) = OpenOptions::new().read(true).dma_open(&path).await {
            let _ = file.close().await;
        }
    }
    let _ = std::fs::remove_file(&path);
}

#[cfg(test)]
mod tests {
    /// glibc refuses an mmap threshold above 32 MiB silently (256 MiB once left batches mapped one
    /// by one): the thresholds asked for are ones it takes.
    #[test]
    fn the_allocator_takes_the_thresholds_that_keep_batches_in_the_heap() {
        super::keep_freed_memory().expect("glibc takes both thresholds");
    }
}
