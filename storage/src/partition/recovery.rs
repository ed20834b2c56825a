//! Opening a partition: what is on disk, checked, before anything is appended or served.
//!
//! 1. List the partition's directory and read both superblock copies; the valid one with the
//!    higher sequence gives the *frontier* (every segment ending at or below it was sealed, synced
//!    and verified) and `retained_from` (segments wholly below it were purged: delete them).
//! 2. Each segment below the frontier is trusted if its index is whole and consistent: only the
//!    bytes after its last index entry are read and checked. Every other segment (the active one,
//!    and any whose index is missing or bad) is read in full and every batch checked, rebuilding
//!    its index.
//! 3. A batch that fails its checks below the superblock frontier (every byte there was synced
//!    once) is *damage*, not a tear: recovery searches the bytes after it for the next valid batch
//!    (or the next segment), keeps everything from there, records the damaged run (reads step over
//!    it) and reports it. Only a bad batch at or past the frontier, or damage with no valid batch
//!    after it, ends the log: the segment is truncated there, later segments are deleted, and the
//!    report says from which offset and whether durable messages were lost (`corrupt`).
//! 4. Rebuilt indexes are rewritten, everything touched is synced, and a new superblock is written:
//!    a fresh partition has only `superblock.a`; `superblock.b` appears at the first restart.

use std::collections::BTreeMap;

use vireo_io::{Completion, FileKind, Io, IoError};

use super::segment::{self, decode_index, IndexEntry, ScanStop, Segment, INDEX_ENTRY_SIZE};
use super::{Op, PartitionEvent, PartitionLog, Status};
use crate::batch::{BATCH_HEADER_SIZE, BATCH_SIZE_MAX};
use crate::superblock::{choose, Superblock, SUPERBLOCK_SIZE_MAX};

/// What recovery found and did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RecoveryReport {
    /// No superblock and no segment: a new partition.
    pub fresh: bool,
    pub segments: usize,
    pub first_offset: u64,
    pub end_offset: u64,
    /// The log was cut at this offset: a batch there was torn or damaged (or offsets broke).
    pub truncated_from: Option<u64>,
    /// Bytes cut from the end of the segment the log was cut in.
    pub truncated_bytes: u64,
    /// Durable messages are missing: damaged runs were found, or the cut lies below the superblock
    /// frontier. They must be repaired from a peer (a cut past the frontier is the torn, unsynced
    /// tail, and loses nothing that was durable).
    pub corrupt: bool,
    /// (first offset, end offset) of each damaged run kept inside the log: its messages are lost
    /// on this copy, every batch after it is kept.
    pub damaged: Vec<(u64, u64)>,
    /// Bytes those runs take.
    pub damaged_bytes: u64,
    /// The durable point the superblock recorded before this open: every message below it was
    /// synced once, so a log that ends short of it lost durable messages (`corrupt`).
    pub frontier: u64,
    /// Later segments deleted by the cut.
    pub segments_dropped: usize,
    /// Segments whose index was missing or bad and was rebuilt from the log.
    pub indexes_rebuilt: usize,
    /// Leftovers deleted: segments below a purge, indexes without a log.
    pub leftovers_deleted: usize,
    /// Segments trusted from their index (below the superblock frontier).
    pub segments_trusted: usize,
}

#[derive(Debug)]
enum Stage {
    Listing,
    Superblocks {
        outstanding: usize,
    },
    /// Reading the `.index` of the segment being examined.
    Index,
    /// Reading the bytes after a trusted index's last entry.
    Tail {
        entries: Vec<IndexEntry>,
    },
    /// Reading the segment in full, from `position`.
    Scan {
        position: u64,
    },
    /// Searching the bytes read at `position` for the first valid batch after damage that starts
    /// at `damaged_at`.
    Resync {
        damaged_at: u64,
        position: u64,
        len: u64,
    },
    /// Truncates, removes, index rewrites and file creations in flight.
    FixupWrites {
        outstanding: usize,
    },
    /// Then the syncs that make them (and anything unsynced from before the crash) durable.
    Fixups {
        outstanding: usize,
    },
    /// The superblock write (completed by the log itself).
    Superblock,
}

pub(super) struct Recovery {
    stage: Stage,
    /// The first error a fixup met: recovery fails with it once the others are back.
    failed: Option<IoError>,
    logs: Vec<(u64, u64)>,
    indexes: BTreeMap<u64, u64>,
    superblocks: [Option<Result<Superblock, ()>>; 2],
    superblock_files: Vec<FileKind>,
    /// The segment being examined (index into `logs`) and what is built of it.
    current: usize,
    building: Option<Segment>,
    rebuilt: Vec<bool>,
    report: RecoveryReport,
    /// Where the log was cut: (segment index, valid size of that segment).
    cut: Option<(usize, u64)>,
    /// The cut only removed a sync's zero padding after the last batch: nothing is reported.
    padding_cut: bool,
    /// A scan read that ended short, being read again: (position, attempts so far, the read
    /// that got furthest, the checksum of the last read's bytes).
    reread: Option<(u64, u32, Option<ScanRead>, Option<u64>)>,
}

/// Zero bytes, shorter than one I/O block: what a direct-I/O sync pads a partial block with.
fn padding_only(rest: &[u8]) -> bool {
    !rest.is_empty() && rest.len() < PADDING_BLOCK && rest.iter().all(|&byte| byte == 0)
}

/// A chunk of a segment as read, and what scanning it found.
type ScanRead = (Vec<u8>, segment::Scan);

/// Reads of a scan chunk that ends short, at most, before recovery believes the furthest.
const READ_ATTEMPTS_MAX: u32 = 8;

/// The block size of the production driver's direct-I/O segment writes.
const PADDING_BLOCK: usize = 4096;

impl Recovery {
    pub(super) fn start(log: &mut PartitionLog, io: &mut impl Io) -> Recovery {
        let token = log.token(Op::Recovery);
        io.list(log.namespace, token);
        Recovery {
            failed: None,
            stage: Stage::Listing,
            logs: Vec::new(),
            indexes: BTreeMap::new(),
            superblocks: [None, None],
            superblock_files: Vec::new(),
            current: 0,
            building: None,
            rebuilt: Vec::new(),
            report: RecoveryReport::default(),
            cut: None,
            padding_cut: false,
            reread: None,
        }
    }

    /// Feeds one completion; true once recovery needs nothing more of it (the superblock write
    /// then finishes it through `finish`).
    pub(super) fn on_completion(&mut self, log: &mut PartitionLog, io: &mut impl Io, completion: Completion) -> bool {
        match std::mem::replace(&mut self.stage, Stage::Listing) {
            Stage::Listing => {
                let Completion::List { result, .. } = completion else { panic!("listing completed as {completion:?}") };
                let files = match result {
                    Ok(files) => files,
                    Err(error) => return self.fail(log, error),
                };
                for (kind, size) in files {
                    match kind {
                        FileKind::Segment(start) => self.logs.push((start, size)),
                        FileKind::Index(start) => {
                            self.indexes.insert(start, size);
                        }
                        // An owned log's superblock is its owner's: the claim stands for it.
                        FileKind::SuperblockA | FileKind::SuperblockB if !log.owned => self.superblock_files.push(kind),
                        _ => {}
                    }
                }
                self.logs.sort();
                if log.owned {
                    self.report.frontier = log.frontier;
                }
                if self.superblock_files.is_empty() {
                    self.plan(log, io);
                } else {
                    for kind in self.superblock_files.clone() {
                        let token = log.token(Op::Recovery);
                        io.read(log.file(kind), 0, SUPERBLOCK_SIZE_MAX, token);
                    }
                    self.stage = Stage::Superblocks { outstanding: self.superblock_files.len() };
                }
            }
            Stage::Superblocks { outstanding } => {
                let Completion::Read { result, .. } = completion else { panic!("superblock read as {completion:?}") };
                let decoded = result.map_err(|_| ()).and_then(|bytes| Superblock::decode(&bytes).map_err(|_| ()));
                // Which copy this was does not matter: the higher valid sequence wins.
                let slot = if self.superblocks[0].is_none() { 0 } else { 1 };
                self.superblocks[slot] = Some(decoded);
                if outstanding > 1 {
                    self.stage = Stage::Superblocks { outstanding: outstanding - 1 };
                } else {
                    let to_result = |copy: &Option<Result<Superblock, ()>>| match copy {
                        Some(Ok(superblock)) => Ok(superblock.clone()),
                        _ => Err(crate::superblock::SuperblockError::Empty),
                    };
                    if let Ok(superblock) = choose(to_result(&self.superblocks[0]), to_result(&self.superblocks[1])) {
                        log.superblock_sequence = superblock.sequence;
                        log.frontier = superblock.vsr_state.offset_frontier;
                        self.report.frontier = log.frontier;
                        log.retained_from = superblock.vsr_state.retained_from;
                    } else {
                        // Both copies damaged: trust nothing below, scan every segment.
                        log.superblock_sequence = 2;
                    }
                    self.plan(log, io);
                }
            }
            Stage::Index => {
                let Completion::Read { result, .. } = completion else { panic!("index read as {completion:?}") };
                let (start, size) = self.logs[self.current];
                match result
                    .ok()
                    .and_then(|bytes| decode_index(&bytes, start, size))
                    .filter(|entries| !entries.is_empty())
                {
                    Some(entries) => {
                        let position = entries.last().expect("entries").position;
                        let token = log.token(Op::Recovery);
                        io.read(log.file(FileKind::Segment(start)), position, (size - position) as usize, token);
                        self.stage = Stage::Tail { entries };
                    }
                    None => {
                        self.report.indexes_rebuilt += 1;
                        self.scan_from(log, io, 0)
                    }
                }
            }
            Stage::Tail { entries } => {
                let Completion::Read { result, .. } = completion else { panic!("tail read as {completion:?}") };
                let (start, _) = self.logs[self.current];
                let last = *entries.last().expect("entries");
                let next_start = self.logs.get(self.current + 1).map(|(next, _)| *next);
                let tail_ok = result.ok().and_then(|bytes| {
                    let scan = segment::scan(&bytes, Some(last.offset));
                    let whole = scan.stop == ScanStop::End || padding_only(&bytes[scan.valid_len..]);
                    let end = scan.batches.last().map(|(_, header)| header.end_offset());
                    let timestamp_max = scan
                        .batches
                        .iter()
                        .map(|&(at, header)| {
                            segment::batch_timestamp_max(&bytes[at..at + header.batch_length as usize])
                        })
                        .max();
                    let logical_size = last.position + scan.valid_len as u64;
                    for &(at, header) in &scan.batches {
                        log.remember_batch(&header, start, last.position + at as u64);
                    }
                    (whole && end.is_some() && end == next_start)
                        .then(|| (end.unwrap(), timestamp_max.unwrap_or(0), logical_size))
                });
                match tail_ok {
                    Some((end_offset, timestamp_max, logical_size)) => {
                        let mut trusted = Segment::new(start);
                        trusted.end_offset = end_offset;
                        trusted.size = logical_size;
                        trusted.written_size = logical_size;
                        trusted.first_timestamp = entries[0].timestamp;
                        trusted.last_timestamp = timestamp_max.max(last.timestamp);
                        trusted.index_written = entries.len();
                        trusted.index = entries;
                        trusted.sealed = true;
                        self.report.segments_trusted += 1;
                        self.building = Some(trusted);
                        self.segment_done(log, io, logical_size);
                    }
                    None => {
                        self.report.indexes_rebuilt += 1;
                        self.scan_from(log, io, 0)
                    }
                }
            }
            Stage::Scan { position } => {
                let Completion::Read { result, .. } = completion else { panic!("scan read as {completion:?}") };
                let (_, size) = self.logs[self.current];
                let expected = self.building.as_ref().expect("segment being built").end_offset;
                let this = result.ok().map(|bytes| {
                    let scan = segment::scan(&bytes, Some(expected));
                    (bytes, scan)
                });
                // Whether a read ends the log short of the file's end: an unreadable sector, a
                // damaged batch, a torn one. A read can be damaged on the way up: read again, a
                // few times, and keep the read that got furthest, since a cut drops every batch
                // after it.
                let short = |read: &Option<ScanRead>| match read {
                    None => true,
                    Some((bytes, scan)) => match scan.stop {
                        ScanStop::End => false,
                        ScanStop::Partial { batch_length } => position + scan.valid_len as u64 + batch_length > size,
                        _ => !(position + bytes.len() as u64 == size && padding_only(&bytes[scan.valid_len..])),
                    },
                };
                let reach = |read: &Option<ScanRead>| read.as_ref().map(|(_, scan)| scan.valid_len);
                let (attempts, best, previous) = match self.reread.take() {
                    Some((at, attempts, best, previous)) if at == position => (attempts, best, previous),
                    _ => (0, None, None),
                };
                // Believe a short read once two reads in a row return the same bytes (bit flips on
                // the way up do not repeat; an unreadable sector does), or when the attempts run out.
                let fingerprint = this.as_ref().map(|(bytes, _)| crate::checksum::checksum64(bytes));
                let confirmed = attempts > 0 && fingerprint == previous;
                let candidate = if reach(&best) > reach(&this) { best } else { this };
                if short(&candidate) && !confirmed && attempts + 1 < READ_ATTEMPTS_MAX {
                    let len = candidate.as_ref().map_or(log.config.scan_chunk_bytes, |(bytes, _)| bytes.len() as u64);
                    self.reread = Some((position, attempts + 1, candidate, fingerprint));
                    self.scan_read(log, io, position, len.max(1));
                    return false;
                }
                let (bytes, scan) = match candidate {
                    Some(read) => read,
                    // Unreadable every time: damage, as a batch that fails its checks is.
                    None => {
                        self.damaged_or_torn(log, io, position);
                        return false;
                    }
                };
                let building = self.building.as_mut().expect("segment being built");
                let segment_start = building.start_offset;
                for &(at, header) in &scan.batches {
                    let timestamp_max = segment::batch_timestamp_max(&bytes[at..at + header.batch_length as usize]);
                    building.record_batch(&header, timestamp_max, log.config.index_interval_bytes);
                    log.remember_batch(&header, segment_start, position + at as u64);
                }
                let scanned_to = position + scan.valid_len as u64;
                let read_to_end = position + bytes.len() as u64 == size;
                if scan.stop != ScanStop::End && read_to_end && padding_only(&bytes[scan.valid_len..]) {
                    // The zeros a direct-I/O sync pads a last block with: the segment ends here,
                    // whole. A sealed one keeps them (nothing appends to it again); the last one
                    // is cut so that appends continue at its logical end.
                    if self.current + 1 < self.logs.len() {
                        self.segment_done(log, io, scanned_to);
                    } else {
                        self.padding_cut = true;
                        self.cut_at(log, io, scanned_to, size);
                    }
                    return false;
                }
                match scan.stop {
                    ScanStop::End if scanned_to == size => self.segment_done(log, io, size),
                    ScanStop::End => self.scan_from(log, io, scanned_to),
                    ScanStop::Partial { batch_length } if scanned_to + batch_length <= size => {
                        if batch_length > bytes.len() as u64 - scan.valid_len as u64 {
                            self.scan_read(log, io, scanned_to, batch_length.min(BATCH_SIZE_MAX as u64));
                        } else {
                            self.scan_from(log, io, scanned_to);
                        }
                    }
                    ScanStop::Discontinuous { .. } => self.cut_at(log, io, scanned_to, size),
                    _ => self.damaged_or_torn(log, io, scanned_to),
                }
            }
            Stage::Resync { damaged_at, position, len } => {
                let Completion::Read { result, .. } = completion else { panic!("resync read as {completion:?}") };
                let (_, size) = self.logs[self.current];
                let expected = self.building.as_ref().expect("segment being built").end_offset;
                let upper = self.logs.get(self.current + 1).map_or(u64::MAX, |(next, _)| *next);
                let bytes = match result {
                    Ok(bytes) => bytes,
                    // An unreadable run is part of the damage: search on after it.
                    Err(_) => {
                        self.resync_read(log, io, damaged_at, position + len, 0);
                        return false;
                    }
                };
                match segment::resync(&bytes, 0, expected..upper) {
                    segment::Resync::Found { at, header } => {
                        let resume = position + at as u64;
                        let building = self.building.as_mut().expect("segment being built");
                        building.record_damage(header.base_offset, resume - damaged_at);
                        self.report_damage(expected, header.base_offset, resume - damaged_at);
                        self.scan_from(log, io, resume);
                    }
                    segment::Resync::Partial { at, batch_length } => {
                        let candidate = position + at as u64;
                        if at > 0 && candidate + batch_length <= size {
                            self.resync_read(log, io, damaged_at, candidate, batch_length);
                        } else {
                            // It cannot be whole (the file ends first): search past it.
                            self.resync_read(log, io, damaged_at, candidate + 1, 0);
                        }
                    }
                    segment::Resync::NotFound => {
                        let searched_to = position + bytes.len() as u64;
                        if searched_to >= size {
                            self.damage_to_segment_end(log, io, damaged_at);
                        } else {
                            // A header may straddle the end of what was read.
                            let next = searched_to.saturating_sub(BATCH_HEADER_SIZE as u64 - 1).max(position + 1);
                            self.resync_read(log, io, damaged_at, next, 0);
                        }
                    }
                }
            }
            Stage::FixupWrites { outstanding } => {
                // Cutting the log where appends will continue must work; a failed index rewrite
                // only means the next open rebuilds it again, and a file already gone is fine.
                match completion {
                    Completion::Truncate { result: Err(error), .. } if error != IoError::NotFound => {
                        self.failed.get_or_insert(error);
                    }
                    _ => {}
                }
                if outstanding > 1 {
                    self.stage = Stage::FixupWrites { outstanding: outstanding - 1 };
                } else if let Some(error) = self.failed {
                    // Only once every fixup is back: none may complete into a recovery that ended.
                    return self.fail(log, error);
                } else {
                    self.sync_all(log, io);
                }
            }
            Stage::Fixups { outstanding } => {
                if let Completion::Sync { result: Err(error), .. } | Completion::Write { result: Err(error), .. } =
                    completion
                {
                    self.failed.get_or_insert(error);
                }
                if outstanding > 1 {
                    self.stage = Stage::Fixups { outstanding: outstanding - 1 };
                } else if let Some(error) = self.failed {
                    return self.fail(log, error);
                } else {
                    self.write_superblock(log);
                }
            }
            Stage::Superblock => unreachable!("the log completes the superblock write"),
        }
        false
    }

    fn fail(&mut self, log: &mut PartitionLog, error: IoError) -> bool {
        log.status = Status::Failed(error);
        log.events.push_back(PartitionEvent::Failed(error));
        true
    }

    /// Deletes leftovers and starts examining the first segment.
    fn plan(&mut self, log: &mut PartitionLog, io: &mut impl Io) {
        let logs = std::mem::take(&mut self.logs);
        let mut kept = Vec::new();
        for (index, &(start, size)) in logs.iter().enumerate() {
            // A purge moved `retained_from` to the start of the segment after everything it
            // deleted: anything starting below it is a leftover of that purge. An owner's claim
            // may fall inside a segment: only the ones wholly below it go.
            let below = match logs.get(index + 1) {
                Some((next, _)) if log.owned => *next <= log.retained_from,
                None if log.owned => false,
                _ => start < log.retained_from,
            };
            if below {
                self.delete(log, io, start);
            } else {
                kept.push((start, size));
            }
        }
        // The log must start where the superblock says it is retained from. If that segment is
        // gone (a file never synced can vanish in a crash, and writes complete out of order, so a
        // later segment's may survive it), the ones after it cannot stand alone: their offsets
        // would start with a hole. An owned log keeps what it has, wherever it starts: its owner
        // may have retained it from later than the state it claims from now (the owner's state
        // came back older than its log, and catches up), and dropping it would drop durable
        // batches the owner counts on.
        let hole = |start: u64| !log.owned && start != log.retained_from;
        if kept.first().is_some_and(|(start, _)| hole(*start)) {
            self.report.truncated_from = Some(log.retained_from);
            self.report.segments_dropped = kept.len();
            self.report.truncated_bytes = kept.iter().map(|(_, size)| size).sum();
            self.report.corrupt = log.retained_from < log.frontier;
            for (start, _) in std::mem::take(&mut kept) {
                self.delete(log, io, start);
            }
        }
        for &start in self.indexes.keys() {
            if !kept.iter().any(|(log_start, _)| *log_start == start) && !logs.iter().any(|(s, _)| *s == start) {
                let token = log.token(Op::Ordering);
                io.remove(log.file(FileKind::Index(start)), token);
                log.ordering_ops += 1;
                self.report.leftovers_deleted += 1;
            }
        }
        self.logs = kept;
        self.rebuilt = vec![false; self.logs.len()];
        self.report.fresh = self.logs.is_empty() && self.superblock_files.is_empty();
        self.current = 0;
        self.examine(log, io);
    }

    fn delete(&mut self, log: &mut PartitionLog, io: &mut impl Io, start: u64) {
        for kind in [FileKind::Segment(start), FileKind::Index(start)] {
            let token = log.token(Op::Ordering);
            io.remove(log.file(kind), token);
            log.ordering_ops += 1;
        }
        self.report.leftovers_deleted += 1;
    }

    fn examine(&mut self, log: &mut PartitionLog, io: &mut impl Io) {
        let Some(&(start, _)) = self.logs.get(self.current) else {
            return self.fixups(log, io);
        };
        let expected = log.segments.back().map(|previous| previous.end_offset);
        if expected.is_some_and(|expected| expected != start) {
            // A gap or an overlap between segments: the log ends where the previous one did.
            let previous = self.current - 1;
            let size = self.logs[previous].1;
            self.current = previous;
            self.cut = Some((previous, size));
            return self.fixups(log, io);
        }
        let trusted_to = log.checked_to.unwrap_or(log.frontier).min(log.frontier);
        let below_frontier = self.logs.get(self.current + 1).is_some_and(|(next, _)| *next <= trusted_to);
        match self.indexes.get(&start) {
            Some(&index_size) if below_frontier && index_size > 0 && !log.config.verify_on_open => {
                let token = log.token(Op::Recovery);
                io.read(log.file(FileKind::Index(start)), 0, index_size as usize, token);
                self.stage = Stage::Index;
            }
            _ => {
                let (_, size) = self.logs[self.current];
                if size > 0 && (below_frontier || !self.indexes.contains_key(&start)) {
                    self.report.indexes_rebuilt += 1;
                }
                self.scan_from(log, io, 0)
            }
        }
    }

    fn scan_from(&mut self, log: &mut PartitionLog, io: &mut impl Io, position: u64) {
        if position == 0 {
            let (start, _) = self.logs[self.current];
            self.building = Some(Segment::new(start));
            self.rebuilt[self.current] = true;
        }
        let (_, size) = self.logs[self.current];
        if position == size {
            return self.segment_done(log, io, size);
        }
        self.scan_read(log, io, position, log.config.scan_chunk_bytes);
    }

    fn scan_read(&mut self, log: &mut PartitionLog, io: &mut impl Io, position: u64, len: u64) {
        let (start, size) = self.logs[self.current];
        let len = len.min(size - position);
        let token = log.token(Op::Recovery);
        io.read(log.file(FileKind::Segment(start)), position, len as usize, token);
        self.stage = Stage::Scan { position };
    }

    /// The scan of the current segment found a batch at `position` that fails its checks (or
    /// bytes it cannot read). Below the frontier that batch was durable: it is damage, and the log
    /// continues at the next valid batch. At or past it, it is the torn tail of the last writes.
    fn damaged_or_torn(&mut self, log: &mut PartitionLog, io: &mut impl Io, position: u64) {
        let (_, size) = self.logs[self.current];
        let expected = self.building.as_ref().expect("segment being built").end_offset;
        if expected >= log.frontier {
            return self.cut_at(log, io, position, size);
        }
        self.resync_read(log, io, position, position + 1, 0);
    }

    /// Reads the segment from `from` (at least `at_least` bytes) to search for the first valid
    /// batch after the damage at `damaged_at`.
    fn resync_read(&mut self, log: &mut PartitionLog, io: &mut impl Io, damaged_at: u64, from: u64, at_least: u64) {
        let (start, size) = self.logs[self.current];
        if from + BATCH_HEADER_SIZE as u64 > size {
            return self.damage_to_segment_end(log, io, damaged_at);
        }
        let len = log.config.scan_chunk_bytes.max(at_least).min(size - from);
        let token = log.token(Op::Recovery);
        io.read(log.file(FileKind::Segment(start)), from, len as usize, token);
        self.stage = Stage::Resync { damaged_at, position: from, len };
    }

    /// No valid batch follows the damage at `damaged_at` in its segment. A later segment still
    /// continues the log: the damage runs to this segment's end. In the last segment nothing
    /// after it can be kept: the log is cut there (and `corrupt` says durable messages went).
    fn damage_to_segment_end(&mut self, log: &mut PartitionLog, io: &mut impl Io, damaged_at: u64) {
        let (_, size) = self.logs[self.current];
        let Some(&(next_start, _)) = self.logs.get(self.current + 1) else {
            return self.cut_at(log, io, damaged_at, size);
        };
        let building = self.building.as_mut().expect("segment being built");
        let expected = building.end_offset;
        building.record_damage(next_start.max(expected), size - damaged_at);
        self.report_damage(expected, next_start.max(expected), size - damaged_at);
        self.segment_done(log, io, size);
    }

    fn report_damage(&mut self, from: u64, to: u64, bytes: u64) {
        match self.report.damaged.last_mut() {
            Some(last) if last.1 == from => last.1 = to,
            _ => self.report.damaged.push((from, to)),
        }
        self.report.damaged_bytes += bytes;
    }

    /// The scan of the current segment stopped at `valid_size` short of its end: the log ends here.
    fn cut_at(&mut self, log: &mut PartitionLog, io: &mut impl Io, valid_size: u64, size: u64) {
        assert!(valid_size <= size);
        self.cut = Some((self.current, valid_size));
        let mut building = self.building.take().expect("segment being built");
        assert_eq!(building.size, valid_size);
        building.written_size = valid_size;
        building.index_written = building.index.len();
        log.segments.push_back(building);
        self.fixups(log, io);
    }

    fn segment_done(&mut self, log: &mut PartitionLog, io: &mut impl Io, size: u64) {
        let mut building = self.building.take().expect("segment being built");
        assert_eq!(building.size, size);
        building.written_size = size;
        building.index_written = building.index.len();
        building.sealed = self.current + 1 < self.logs.len();
        log.segments.push_back(building);
        self.current += 1;
        self.examine(log, io);
    }

    /// Cuts, deletes, rewrites indexes and syncs; then the superblock.
    fn fixups(&mut self, log: &mut PartitionLog, io: &mut impl Io) {
        let mut outstanding = 0;
        let namespace = log.namespace;
        if let Some((at, valid_size)) = self.cut {
            let (start, size) = self.logs[at];
            let segment = log.segments.back_mut().expect("the cut segment");
            assert_eq!(segment.start_offset, start);
            segment.sealed = false;
            self.report.segments_dropped = self.logs.len() - at - 1;
            if !self.padding_cut || self.report.segments_dropped > 0 {
                self.report.truncated_from = Some(segment.end_offset);
                self.report.truncated_bytes = size - valid_size;
            }
            // Below the frontier every byte was synced and verified once: losing it is damage, not
            // a torn tail, and the messages must come back from a peer.
            self.report.corrupt |= segment.end_offset < log.frontier;
            let log_file = segment.log_file(namespace);
            let token = log.token(Op::Recovery);
            io.truncate(log_file, valid_size, token);
            outstanding += 1;
            for &(later, _) in &self.logs[at + 1..] {
                for kind in [FileKind::Segment(later), FileKind::Index(later)] {
                    let token = log.token(Op::Recovery);
                    io.remove(log.file(kind), token);
                    outstanding += 1;
                }
            }
            self.rebuilt[at] = true;
            self.logs.truncate(at + 1);
        }
        if log.segments.is_empty() {
            // An owned log starts where its owner checked it to: past that its owner's claim may
            // name batches another log holds (a view change cut them here).
            let start = log.checked_to.unwrap_or(log.frontier).min(log.frontier);
            log.segments.push_back(Segment::new(start.max(log.retained_from)));
        }
        let active = log.segments.back_mut().expect("active segment");
        if active.size >= log.config.segment_size {
            active.sealed = true;
            let next = Segment::new(active.end_offset);
            log.segments.push_back(next);
        }
        // Rewrite every rebuilt index whole, and create the files of a new active segment.
        let mut rewrites = Vec::new();
        for (at, segment) in log.segments.iter().enumerate() {
            if !self.rebuilt.get(at).copied().unwrap_or(true) {
                continue;
            }
            let mut index = Vec::with_capacity(segment.index.len() * INDEX_ENTRY_SIZE);
            segment.index.iter().for_each(|entry| entry.encode_into(&mut index));
            let new_file = at >= self.logs.len();
            rewrites.push((segment.index_file(namespace), index, new_file.then(|| segment.log_file(namespace))));
        }
        for (index_file, index, new_log) in rewrites {
            // The write and the cut may land in either order: both leave exactly `index`.
            let len = index.len() as u64;
            let token = log.token(Op::Recovery);
            io.write(index_file, 0, index.into(), token);
            let token = log.token(Op::Recovery);
            io.truncate(index_file, len, token);
            outstanding += 2;
            if let Some(log_file) = new_log {
                let token = log.token(Op::Recovery);
                io.write(log_file, 0, vireo_io::Bytes::new(), token);
                outstanding += 1;
            }
        }
        if outstanding == 0 {
            self.sync_all(log, io);
        } else {
            self.stage = Stage::FixupWrites { outstanding };
        }
    }

    /// Syncs every file recovery may have touched or that holds unsynced bytes from before the
    /// crash, once the fixups have landed: a torn tail's cut, rewritten indexes, new files.
    fn sync_all(&mut self, log: &mut PartitionLog, io: &mut impl Io) {
        let namespace = log.namespace;
        for segment in log.segments.iter() {
            log.dirty.insert(segment.log_file(namespace));
            log.dirty.insert(segment.index_file(namespace));
        }
        let files = std::mem::take(&mut log.dirty);
        let outstanding = files.len();
        for file in files {
            let token = log.token(Op::Recovery);
            io.sync(file, token);
        }
        self.stage = Stage::Fixups { outstanding };
    }

    fn write_superblock(&mut self, log: &mut PartitionLog) {
        // Everything kept was synced just now.
        log.frontier = log.end_offset();
        log.superblock_wanted = true;
        self.stage = Stage::Superblock;
    }

    /// The superblock is durable: the partition is open.
    pub(super) fn finish(mut self, log: &mut PartitionLog) {
        let end = log.end_offset();
        log.written_offset = end;
        log.synced_offset = end;
        log.sync_target = end;
        log.last_timestamp = log.segments.iter().map(|segment| segment.last_timestamp).max().unwrap_or(0);
        self.report.corrupt |= !self.report.damaged.is_empty() || end < self.report.frontier;
        self.report.segments = log.segments.len();
        self.report.first_offset = log.first_offset();
        self.report.end_offset = end;
        log.status = Status::Open;
        log.events.push_back(PartitionEvent::Opened(self.report));
    }
}
