//! Opening a replica: reading its superblock, checkpoint and WAL back through `Io`, and rebuilding
//! the log it had promised. A replica with no superblock at all formats itself (a new replica
//! never acknowledged anything, so starting empty breaks no promise).
//!
//! The log after a restart is: the checkpoint; then the view's suffix that the superblock recorded
//! when the view's log was installed (those headers win over whatever the WAL slots hold, since a
//! crash may have left older prepares there); then every prepare that continues that chain in the
//! same view. Slots whose prepare is damaged but whose redundant header survived come back as
//! headers without bodies, repaired from peers later. What does not chain (a torn tail, prepares
//! a view change discarded) is dropped: none of it was ever acknowledged. The replica then waits
//! in `Recovering` for the current view's start_view, or starts a view change if none comes.
//!
//! A partition group's cluster id is its lineage (high 64 bits) and its incarnation (low 64
//! bits): a group deleted and created again with the same namespace has a newer incarnation (the
//! node derives it from the group's creation). Files of an earlier incarnation are removed, the
//! superblocks last (so a crash in between finds them again and goes on removing), and the
//! replica formats itself: the new group never sees the old one's log, checkpoint or client
//! table. Files of a *newer* incarnation mean this replica was opened from metadata that lags:
//! it stays opening, touches nothing, and is superseded (the node closes it without removing
//! anything). The metadata group's cluster id never changes: another one is a misconfiguration.

use vireo_io::{Completion, FileId, FileKind, Io, IoError};
use vireo_storage::checksum::checksum64;
use vireo_storage::layout::{snapshot_file, snapshot_region_offset, superblock_files, wal_file, HEADER_SIZE};
use vireo_storage::superblock::{choose, Superblock, SuperblockError, SUPERBLOCK_SIZE_MAX};

use super::durability::LogMark;
use super::durability::{token, token_detail, Snapshot, TokenKind};
use super::{CheckpointRecord, Replica, ReplicaEvent, Status};
use crate::config::Bug;
use crate::header::{Command, Header};
use crate::journal::{recover_slot, Entry, RecoveredSlot};
use crate::state_machine::StateMachine;

const READ_SUPERBLOCK: u64 = 0;
const READ_SNAPSHOT: u64 = 1;
const READ_WAL_HEADER: u64 = 2;
const READ_WAL_PREPARE: u64 = 3;
/// The first bytes of a slot's prepares zone: the prepare's header and the start of an elided
/// body, which say how much more to read.
const READ_WAL_PREPARE_HEAD: u64 = 4;
/// Bytes of that first read.
const PREPARE_HEAD_BYTES: usize = HEADER_SIZE + crate::elided::ENCODED_HEAD;
const WIPE_LIST: u64 = 4;
const WIPE_REMOVE: u64 = 5;
const WIPE_REMOVE_SUPERBLOCK: u64 = 6;
const WIPE_REMOVE_SUPERBLOCK_LAST: u64 = 7;
// Below bit 40: a shard marks bits 40..56 of a token with the group it belongs to.
const READ_SHIFT: u32 = 32;

/// Times the superblock pair is read before recovery gives up on it.
const SUPERBLOCK_READ_ATTEMPTS_MAX: u32 = 8;
/// Times a WAL slot's header or prepare that reads as damaged (written, but failing its checks)
/// is read again: a read may be corrupted on its way up, and a prepare taken for damaged is one
/// the replica may no longer know it acknowledged.
const WAL_SLOT_READ_ATTEMPTS_MAX: u8 = 3;

type ReadResult = Option<Result<Vec<u8>, IoError>>;

#[derive(Default)]
pub struct Opening {
    superblocks: [ReadResult; 2],
    /// Reads of the superblock pair so far (a read may be corrupted on its way up: read again).
    superblock_attempts: u32,
    wal_headers: Vec<ReadResult>,
    wal_prepares: Vec<ReadResult>,
    /// Reads of each slot's header and prepare so far.
    wal_attempts: Vec<(u8, u8)>,
    outstanding: usize,
    /// While an earlier incarnation's files are wiped: the superblock copy recovery read it from
    /// (0 a, 1 b), removed last.
    wipe_superblock_last: usize,
    /// The WAL's slots as recovered, while elided prepares among them wait for the external log
    /// to give back their spans (`fills_wanted`, `fill`).
    awaiting_fill: Option<Vec<RecoveredSlot>>,
}

/// What `Replica::fill` made of the WAL's elided prepares past the checkpoint.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Filled {
    /// Prepares that came back whole from the external log.
    pub whole: u64,
    /// Prepares that did not (repaired from peers, or never durable).
    pub missing: u64,
    /// Spans a single replica applies as lost: its log holds them damaged.
    pub spans_lost: u64,
}

/// The external log offsets a recovering replica's elided prepares need back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FillsWanted {
    /// The range `[from, to)` their spans lie in.
    pub from: u64,
    pub to: u64,
    /// Where each span starts, in order (a read that runs into damage goes on from the next).
    pub starts: Vec<u64>,
    /// The log held every batch below this once (synced, or written where durability is not
    /// enforced and only the process can crash): the highest cursor of a prepare whose redundant
    /// header is durable (written only once the log held its batches). A batch there that fails
    /// its checks is damage, not a torn write.
    pub durable: u64,
}

/// The checksum of op 0, the root every log chains from: a prepare with an empty body.
pub fn root_checksum(cluster: u128) -> u128 {
    let mut root = Header::new(Command::Prepare, cluster, 0);
    root.seal(&[]);
    root.checksum
}

impl<S: StateMachine> Replica<S> {
    pub(super) fn open_start(&mut self, io: &mut impl Io) {
        assert_eq!(self.status, Status::Opening);
        self.opening = Some(Opening::default());
        for (copy, file) in superblock_files(self.config.namespace).into_iter().enumerate() {
            io.read(file, 0, SUPERBLOCK_SIZE_MAX, token(TokenKind::Open, READ_SUPERBLOCK << READ_SHIFT | copy as u64));
        }
        self.opening.as_mut().expect("set").outstanding = 2;
    }

    pub(super) fn open_on_completion(&mut self, io: &mut impl Io, completion: Completion) {
        assert_eq!(self.status, Status::Opening);
        let detail = token_detail(completion.token());
        let (what, index) = (detail >> READ_SHIFT, (detail & ((1 << READ_SHIFT) - 1)) as usize);
        let completion = match completion {
            Completion::List { result, .. } => return self.wipe_listed(io, result),
            Completion::Remove { result, .. } => return self.wipe_removed(io, what, result),
            other => other,
        };
        let Completion::Read { result, .. } = completion else {
            panic!("opening issues only reads, lists and removes");
        };
        let opening = self.opening.as_mut().expect("opening");
        opening.outstanding -= 1;
        match what {
            READ_SUPERBLOCK => {
                opening.superblocks[index] = Some(result);
                if opening.outstanding == 0 {
                    self.open_superblock_read(io);
                }
            }
            READ_SNAPSHOT => match result {
                Ok(bytes) => self.open_snapshot_read(io, &bytes),
                Err(error) => self.fail_stop(error, "checkpoint read"),
            },
            READ_WAL_PREPARE_HEAD => {
                // Read only what the slot holds: a WAL of large slots is mostly empty space, and
                // reading every slot whole would cost its whole size in time and memory.
                let layout = self.journal.layout;
                let need = match &result {
                    Ok(head) => prepare_bytes_held(head, layout.prepare_size_max as usize),
                    Err(_) => 0,
                };
                match result {
                    Ok(head) if need > head.len() => {
                        opening.outstanding += 1;
                        io.read(
                            wal_file(self.config.namespace),
                            layout.prepare_offset(index as u64),
                            need,
                            token(TokenKind::Open, READ_WAL_PREPARE << READ_SHIFT | index as u64),
                        );
                    }
                    result => self.open_wal_read_done(io, READ_WAL_PREPARE, index, result),
                }
            }
            READ_WAL_HEADER | READ_WAL_PREPARE => self.open_wal_read_done(io, what, index, result),
            other => panic!("unknown open read {other}"),
        }
    }

    /// A slot's header or prepare is read: kept, or read again if it looks damaged and has not
    /// been read `WAL_SLOT_READ_ATTEMPTS_MAX` times.
    fn open_wal_read_done(&mut self, io: &mut impl Io, what: u64, index: usize, result: Result<Vec<u8>, IoError>) {
        let layout = self.journal.layout;
        let (cluster, namespace) = (self.config.cluster, self.config.namespace);
        let opening = self.opening.as_mut().expect("opening");
        let slot = index as u64;
        let header = what == READ_WAL_HEADER;
        let damaged = result.as_ref().is_ok_and(|bytes| {
            let recovered = if header {
                recover_slot(&layout, slot, cluster, Some(bytes), None)
            } else {
                recover_slot(&layout, slot, cluster, None, Some(bytes))
            };
            bytes.iter().any(|byte| *byte != 0) && matches!(recovered, RecoveredSlot::Empty)
        });
        let attempts = if header { &mut opening.wal_attempts[index].0 } else { &mut opening.wal_attempts[index].1 };
        if damaged && *attempts + 1 < WAL_SLOT_READ_ATTEMPTS_MAX {
            *attempts += 1;
            opening.outstanding += 1;
            let (offset, len, kind) = if header {
                (layout.header_offset(slot), HEADER_SIZE, READ_WAL_HEADER)
            } else {
                (
                    layout.prepare_offset(slot),
                    PREPARE_HEAD_BYTES.min(layout.prepare_size_max as usize),
                    READ_WAL_PREPARE_HEAD,
                )
            };
            io.read(wal_file(namespace), offset, len, token(TokenKind::Open, kind << READ_SHIFT | slot));
            return;
        }
        let reads = if header { &mut opening.wal_headers } else { &mut opening.wal_prepares };
        reads[index] = Some(result);
        if opening.outstanding == 0 {
            self.open_finish(io);
        }
    }

    fn open_superblock_read(&mut self, io: &mut impl Io) {
        let opening = self.opening.as_mut().expect("opening");
        opening.superblock_attempts += 1;
        let decode = |read: &mut ReadResult| match read.take().expect("read done") {
            Ok(bytes) => Some(Superblock::decode(&bytes)),
            Err(_) => None,
        };
        let a = decode(&mut opening.superblocks[0]);
        let b = decode(&mut opening.superblocks[1]);
        let b_never_written = matches!(b, Some(Err(SuperblockError::Empty)));
        let a = a.unwrap_or(Err(SuperblockError::Empty));
        let b = b.unwrap_or(Err(SuperblockError::Empty));
        // The next update writes first whichever copy recovery did not resume from: the copy it
        // did resume from stays whole until the other one is.
        let a_sequence = a.as_ref().map(|superblock| superblock.sequence).ok();
        let superblock = match choose(a, b) {
            Ok(superblock) => {
                let resumed_from_a = a_sequence == Some(superblock.sequence);
                self.superblock.first_copy = if resumed_from_a { 1 } else { 0 };
                superblock
            }
            Err(_) if b_never_written => {
                // Copy b is written only after copy a is synced: b never written means no
                // superblock update ever completed, so this replica never acknowledged anything.
                self.format(io);
                return;
            }
            Err(errors) => {
                // Neither copy reads whole, yet one was written: a read was damaged on its way up,
                // or the disk lost both copies. Read again; if the pair never comes back whole,
                // this replica cannot know what it promised and must not guess.
                assert!(
                    opening.superblock_attempts < SUPERBLOCK_READ_ATTEMPTS_MAX,
                    "replica {}: both superblock copies unreadable: {errors:?}",
                    self.replica
                );
                for (copy, file) in superblock_files(self.config.namespace).into_iter().enumerate() {
                    let token = token(TokenKind::Open, READ_SUPERBLOCK << READ_SHIFT | copy as u64);
                    io.read(file, 0, SUPERBLOCK_SIZE_MAX, token);
                }
                opening.outstanding = 2;
                return;
            }
        };
        let state = &superblock.vsr_state;
        if state.cluster != self.config.cluster {
            assert!(!self.config.namespace.is_metadata(), "superblock of another cluster");
            let (ours, theirs) = (self.config.cluster, state.cluster);
            if ours >> 64 == theirs >> 64 && theirs as u64 > ours as u64 {
                self.superseded = true;
                self.opening = None;
                self.event(ReplicaEvent::Superseded);
                return;
            }
            self.wipe(io);
            return;
        }
        assert_eq!(state.replica, self.replica, "superblock of another replica");
        assert_eq!(state.replica_count, self.config.replica_count, "superblock of another cluster shape");
        self.superblock.durable = superblock;
        let state = self.superblock_durable().clone();
        if state.snapshot_size > 0 {
            let offset = snapshot_region_offset(state.snapshot_region, self.config.snapshot_size_max);
            io.read(
                snapshot_file(self.config.namespace),
                offset,
                state.snapshot_size as usize,
                token(TokenKind::Open, READ_SNAPSHOT << READ_SHIFT),
            );
            self.opening.as_mut().expect("opening").outstanding = 1;
        } else {
            self.commit_min_checksum = state.checkpoint_checksum;
            self.open_wal_read(io);
        }
    }

    /// A checkpoint that does not match what its superblock says of it is gone or damaged: a
    /// device lost it (a node removes a deleted group's files, superblocks last, only once the
    /// deletion is durably committed, so a restart does not reopen such a group). The replica
    /// stops, loudly, rather than run on a state it cannot trust.
    fn open_snapshot_read(&mut self, io: &mut impl Io, bytes: &[u8]) {
        let state = self.superblock_durable().clone();
        if checksum64(bytes) != state.snapshot_checksum {
            self.fail_stop(IoError::Device, "checkpoint read: the checkpoint is gone or damaged");
            return;
        }
        let snapshot = Snapshot::<S>::decode(bytes).expect("a checkpoint with a valid checksum decodes");
        assert_eq!(snapshot.op, state.checkpoint_op);
        assert_eq!(snapshot.checksum, state.checkpoint_checksum);
        self.state_machine = snapshot.state_machine;
        self.client_table = snapshot.client_table;
        self.timestamp_last = snapshot.timestamp;
        self.commit_min_checksum = snapshot.checksum;
        let record = CheckpointRecord {
            op: state.checkpoint_op,
            checksum: state.checkpoint_checksum,
            size: state.snapshot_size,
            checksum64: state.snapshot_checksum,
            region: state.snapshot_region,
            mark: LogMark::of(&self.state_machine),
        };
        self.checkpoint_recovered(record, bytes.to_vec());
        self.open_wal_read(io);
    }

    fn open_wal_read(&mut self, io: &mut impl Io) {
        let layout = self.journal.layout;
        let slots = layout.slot_count as usize;
        let opening = self.opening.as_mut().expect("opening");
        opening.wal_headers = vec![None; slots];
        opening.wal_prepares = vec![None; slots];
        opening.wal_attempts = vec![(0, 0); slots];
        opening.outstanding = 2 * slots;
        for slot in 0..layout.slot_count {
            io.read(
                wal_file(self.config.namespace),
                layout.header_offset(slot),
                HEADER_SIZE,
                token(TokenKind::Open, READ_WAL_HEADER << READ_SHIFT | slot),
            );
            io.read(
                wal_file(self.config.namespace),
                layout.prepare_offset(slot),
                PREPARE_HEAD_BYTES.min(layout.prepare_size_max as usize),
                token(TokenKind::Open, READ_WAL_PREPARE_HEAD << READ_SHIFT | slot),
            );
        }
    }

    /// Removes an earlier incarnation's files from the namespace, then formats.
    fn wipe(&mut self, io: &mut impl Io) {
        self.event(ReplicaEvent::Wiping);
        // The next update was to write first the copy recovery did not resume from.
        let resumed = if self.superblock.first_copy == 1 { 0 } else { 1 };
        self.opening.as_mut().expect("opening").wipe_superblock_last = resumed;
        // Formatted afresh: copy a is written first, as on a new disk (copy b existing then
        // proves copy a was synced once).
        self.superblock.first_copy = 0;
        io.list(self.config.namespace, token(TokenKind::Open, WIPE_LIST << READ_SHIFT));
        self.opening.as_mut().expect("opening").outstanding = 1;
    }

    fn wipe_listed(&mut self, io: &mut impl Io, result: Result<Vec<(FileKind, u64)>, IoError>) {
        let files = result.unwrap_or_else(|error| panic!("replica {}: cannot list its files: {error}", self.replica));
        let namespace = self.config.namespace;
        let mut outstanding = 0;
        for (kind, _) in files {
            if !matches!(kind, FileKind::SuperblockA | FileKind::SuperblockB) {
                io.remove(FileId::new(namespace, kind), token(TokenKind::Open, WIPE_REMOVE << READ_SHIFT));
                outstanding += 1;
            }
        }
        let opening = self.opening.as_mut().expect("opening");
        opening.outstanding = outstanding;
        if outstanding == 0 {
            self.wipe_superblocks(io);
        }
    }

    /// Removes the superblock copies one at a time, the one recovery read the earlier
    /// incarnation from last: a crash in between leaves that copy (recovery reads it and wipes
    /// again) or nothing (recovery formats), never only the other copy, which may be the one
    /// that does not read (seed 7241: a damaged copy b left alone after a was removed).
    fn wipe_superblocks(&mut self, io: &mut impl Io) {
        let opening = self.opening.as_mut().expect("opening");
        let first = 1 - opening.wipe_superblock_last;
        opening.outstanding = 1;
        io.remove(
            superblock_files(self.config.namespace)[first],
            token(TokenKind::Open, WIPE_REMOVE_SUPERBLOCK << READ_SHIFT),
        );
    }

    fn wipe_removed(&mut self, io: &mut impl Io, what: u64, result: Result<(), IoError>) {
        if let Err(error) = result {
            panic!("replica {}: cannot remove an earlier incarnation's file: {error}", self.replica);
        }
        let opening = self.opening.as_mut().expect("opening");
        opening.outstanding -= 1;
        if opening.outstanding > 0 {
            return;
        }
        match what {
            WIPE_REMOVE => self.wipe_superblocks(io),
            WIPE_REMOVE_SUPERBLOCK => {
                opening.outstanding = 1;
                let last = opening.wipe_superblock_last;
                io.remove(
                    superblock_files(self.config.namespace)[last],
                    token(TokenKind::Open, WIPE_REMOVE_SUPERBLOCK_LAST << READ_SHIFT),
                );
            }
            WIPE_REMOVE_SUPERBLOCK_LAST => self.format(io),
            other => panic!("unknown wipe step {other}"),
        }
    }

    fn format(&mut self, io: &mut impl Io) {
        self.opening = None;
        let root = root_checksum(self.config.cluster);
        self.view = 0;
        self.log_view = 0;
        self.op = 0;
        self.op_checksum = root;
        self.commit_min = 0;
        self.commit_min_checksum = root;
        self.commit_max = 0;
        self.superblock.durable = Superblock::default();
        self.superblock.durable.vsr_state.checkpoint_checksum = root;
        // A first boot starts the cluster's view 0. A replica that may have lost its disk must
        // not: its cluster may be views further on, so it waits for the current view's
        // start_view as a restarted replica does.
        let cluster = self.config.replica_count > 1;
        let waits = cluster && (self.config.format_waits_for_view || self.config.rejoin_guard);
        self.status = if waits { Status::Recovering } else { Status::Normal };
        if cluster && self.config.rejoin_guard && self.config.bug != Some(Bug::RejoinWithoutGuard) {
            self.rejoining = Some(super::Rejoining::Listening);
        }
        self.event(ReplicaEvent::Opened { view: 0, log_view: 0, op: 0, commit_min: 0, formatted: true });
        self.timeouts_for_status(io);
        self.superblock_update(io);
        if waits {
            self.on_request_start_view_timeout(io);
        }
    }

    /// Every WAL slot is read: recovered, then (if some hold elided prepares past the
    /// checkpoint) held until the external log gives their spans back.
    fn open_finish(&mut self, io: &mut impl Io) {
        let opening = self.opening.as_mut().expect("opening");
        let layout = self.journal.layout;
        let recovered: Vec<RecoveredSlot> = (0..layout.slot_count as usize)
            .map(|slot| {
                let header_bytes = opening.wal_headers[slot].as_ref().and_then(|read| read.as_ref().ok());
                let prepare_bytes = opening.wal_prepares[slot].as_ref().and_then(|read| read.as_ref().ok());
                recover_slot(
                    &layout,
                    slot as u64,
                    self.config.cluster,
                    header_bytes.map(Vec::as_slice),
                    prepare_bytes.map(Vec::as_slice),
                )
            })
            .collect();
        opening.wal_headers = Vec::new();
        opening.wal_prepares = Vec::new();
        opening.awaiting_fill = Some(recovered);
        if self.fills_wanted().is_none() {
            self.fill(io, |_, _| None, |_| false);
        }
    }

    /// While opening: what the WAL's elided prepares past the checkpoint left out of it, to be
    /// read from the external log and given to `fill`.
    pub fn fills_wanted(&self) -> Option<FillsWanted> {
        let state = self.superblock_durable();
        let checkpoint_op = state.checkpoint_op;
        let slots = self.opening.as_ref()?.awaiting_fill.as_ref()?;
        // Only a prepare of the log this replica goes on with claims its batches durable: one a
        // view change truncated left offsets that other batches took since.
        let in_log = |header: &Header| {
            let installed = || {
                state.view_headers.iter().any(|bytes| {
                    Header::decode(bytes).is_ok_and(|view| view.op == header.op && view.checksum == header.checksum)
                })
            };
            header.view == state.log_view && header.context as u64 == state.log_view_sequence || installed()
        };
        let mut wanted = FillsWanted { from: u64::MAX, to: 0, starts: Vec::new(), durable: 0 };
        for slot in slots {
            if let RecoveredSlot::Elided { header, elided, redundant } = slot {
                if header.op > checkpoint_op {
                    wanted.from = wanted.from.min(elided.first_offset().unwrap_or(header.cursor));
                    wanted.to = wanted.to.max(header.cursor);
                    wanted.starts.extend(elided.spans.iter().map(|span| span.offset));
                    if *redundant && in_log(header) {
                        wanted.durable = wanted.durable.max(header.cursor);
                    }
                }
            }
        }
        wanted.starts.sort_unstable();
        wanted.starts.dedup();
        (wanted.from < wanted.to).then_some(wanted)
    }

    /// Puts the elided prepares back together from the external log (`held(offset, len)`: the
    /// batch of that length it holds at that offset; `damaged(offset)`: it holds the batch at
    /// that offset damaged, lost on this copy), and finishes opening. A prepare that does not
    /// come back whole is repaired from peers, or was never durable; on a single replica, with
    /// no peer, a durable one whose missing spans the log holds damaged comes back with them
    /// lost (`StateMachine::span_lost`).
    pub fn fill(
        &mut self,
        io: &mut impl Io,
        mut held: impl FnMut(u64, u32) -> Option<Vec<u8>>,
        damaged: impl Fn(u64) -> bool,
    ) -> Filled {
        let mut opening = self.opening.take().expect("opening");
        let slots = opening.awaiting_fill.take().expect("the WAL was read");
        let checkpoint_op = self.superblock_durable().checkpoint_op;
        let single = self.config.replica_count == 1;
        let mut filled = Filled::default();
        let settled = slots
            .into_iter()
            .map(|slot| match slot {
                // The checkpoint covers it: `open_log` drops it.
                RecoveredSlot::Elided { header, .. } if header.op <= checkpoint_op => RecoveredSlot::Empty,
                RecoveredSlot::Elided { header, elided, redundant: true } if single => {
                    let (body, gaps) = elided.restore_with_gaps(&mut held);
                    if gaps.is_empty() && header.valid_checksum_body(&body) {
                        filled.whole += 1;
                        return RecoveredSlot::Prepare { header, body, redundant: true };
                    }
                    if gaps.is_empty() || !gaps.iter().all(|index| damaged(elided.spans[*index].offset)) {
                        filled.missing += 1;
                        return RecoveredSlot::HeaderOnly(header);
                    }
                    for index in &gaps {
                        let span = elided.spans[*index];
                        self.state_machine.span_lost(span.offset, elided.span_end(*index, header.cursor), span.len);
                    }
                    filled.spans_lost += gaps.len() as u64;
                    RecoveredSlot::Holed { header, body }
                }
                RecoveredSlot::Elided { .. } => match slot.settle(&mut held) {
                    whole @ RecoveredSlot::Prepare { .. } => {
                        filled.whole += 1;
                        whole
                    }
                    other => {
                        filled.missing += 1;
                        other
                    }
                },
                other => other,
            })
            .collect();
        drop(opening);
        self.open_log(io, settled);
        filled
    }

    fn open_log(&mut self, io: &mut impl Io, slots: Vec<RecoveredSlot>) {
        let state = self.superblock_durable().clone();
        let checkpoint_op = state.checkpoint_op;
        let mut unconfirmed = Vec::new();
        for recovered in slots {
            match recovered {
                RecoveredSlot::Empty => {}
                RecoveredSlot::Prepare { header, body, redundant } if header.op > checkpoint_op => {
                    // Without its redundant header the prepare was never acknowledged, and is not
                    // yet safe to acknowledge: it is written again (prepare, then header) first.
                    self.journal.insert(Entry { header, body: Some(body.into()), durable: redundant, faulty: false });
                    if !redundant {
                        unconfirmed.push(header.op);
                    }
                }
                RecoveredSlot::Holed { header, body } if header.op > checkpoint_op => {
                    self.journal.insert_holed(Entry { header, body: Some(body.into()), durable: true, faulty: false });
                }
                RecoveredSlot::HeaderOnly(header)
                    if header.op > checkpoint_op && self.config.bug != Some(Bug::RestartDropsDamagedPrepares) =>
                {
                    self.journal.insert(Entry { header, body: None, durable: false, faulty: true });
                }
                _ => {}
            }
        }
        // The view's suffix as installed wins over the slots.
        let mut head = (checkpoint_op, state.checkpoint_checksum);
        for bytes in &state.view_headers {
            let header = Header::decode(bytes).expect("superblock view headers are whole");
            assert!(header.valid_checksum());
            if header.op <= checkpoint_op {
                continue;
            }
            self.log_headers.push(header);
            if header.op > checkpoint_op + self.config.journal_slots {
                // Beyond what the journal can hold until state transfer: named, not held.
                head = (header.op, header.checksum);
                continue;
            }
            if self.journal.get_exact(header.op, header.checksum).is_none() {
                self.journal.insert(Entry::header_only(header));
            }
            head = (header.op, header.checksum);
        }
        // The head the superblock promises, even if neither the slots nor the view headers hold
        // it (repair and state transfer fetch what lies below it).
        if state.log_op > head.0 {
            head = (state.log_op, state.log_op_checksum);
            if self.journal.get(head.0).is_some_and(|entry| entry.header.checksum != head.1) {
                self.journal.remove(head.0);
            }
        }
        // Then what this replica appended to that same log (same view, same start_view), as long
        // as it chains.
        loop {
            let next = head.0 + 1;
            match self.journal.get(next) {
                Some(entry)
                    if entry.header.parent == head.1
                        && entry.header.view == state.log_view
                        && entry.header.context as u64 == state.log_view_sequence =>
                {
                    head = (next, entry.header.checksum);
                }
                _ => break,
            }
        }
        self.journal.retain(checkpoint_op, head.0);
        for op in unconfirmed {
            if self.journal.get(op).is_some_and(|entry| entry.body.is_some() && !entry.durable) {
                self.wal.queue_after_open(op);
            }
        }
        self.view = state.view;
        self.view_promised = state.view;
        self.log_view = state.log_view;
        self.start_view_sequence = state.log_view_sequence;
        self.op = head.0;
        self.op_checksum = head.1;
        self.commit_min = checkpoint_op;
        self.commit_max = state.commit_max.max(checkpoint_op);
        // Crashed while rejoining: still may have forgotten what its lost storage held.
        if state.rejoining && self.config.bug != Some(Bug::RejoinWithoutGuard) {
            self.rejoining = Some(super::Rejoining::Listening);
        }
        if let Some(entry) = self.journal.get(self.op) {
            self.timestamp_last = self.timestamp_last.max(entry.header.timestamp);
        }
        self.status = Status::Recovering;
        self.event(ReplicaEvent::Opened {
            view: self.view,
            log_view: self.log_view,
            op: self.op,
            commit_min: self.commit_min,
            formatted: false,
        });
        self.timeouts_for_status(io);
        self.wal_flush(io);
        self.on_request_start_view_timeout(io);
    }
}

/// How many bytes of a slot's prepares zone hold its prepare, judged from the zone's first
/// `PREPARE_HEAD_BYTES`: the prepare's `size`, or an elided body's encoding after its header if
/// that is longer, at most the slot. A head that names neither (an empty slot, damage) needs
/// nothing more: recovery finds the slot empty or damaged either way.
fn prepare_bytes_held(head: &[u8], slot_bytes: usize) -> usize {
    let size = head.get(48..52).map_or(0, |size| u32::from_le_bytes(size.try_into().expect("4 bytes")) as usize);
    let size = if (HEADER_SIZE..=slot_bytes).contains(&size) { size } else { 0 };
    let elided =
        head.get(HEADER_SIZE..).and_then(crate::elided::ElidedBody::encoded_len).map_or(0, |len| HEADER_SIZE + len);
    size.max(elided).min(slot_bytes)
}
