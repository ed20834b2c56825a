//! A simulated disk: one per replica, holding its files as byte vectors, with the crash semantics
//! of a real disk under a page cache and the faults of a real device.
//!
//! - A write completes into the page cache; only a sync of its file makes it durable. On a crash,
//!   every write not yet synced, and every write still in flight, is independently lost, torn (a
//!   prefix of it persists) or persisted.
//! - Faults (only on disks the fault atlas names, and only in the one WAL zone it gives each, so
//!   that no prepare loses both its copies and every run stays recoverable; partition files only
//!   on disks whose WAL headers are whole, since a prepare's batches live there alone): write corruption (a
//!   bit flips on the way down), misdirected writes (the write lands on another slot of its zone),
//!   latent sector errors (a read of those bytes fails until they are rewritten), read corruption
//!   (a bit flips on the way up, this read only). Superblock copies take read corruption only: a
//!   torn write of one copy plus a damaged other copy is more than two copies can survive.

use std::collections::{BTreeMap, BTreeSet};

use vireo_io::{Completion, FileId, FileKind, IoError, Namespace, Token};
use vireo_protocol::config::Bug;
use vireo_storage::layout::{WalLayout, HEADER_SIZE};

use crate::rng::SimRng;
use crate::scenario::FaultRates;

/// Torn writes persist a prefix in units of this many bytes.
const TEAR_UNIT: usize = 64;
/// Partition files (segments, indexes, 32-byte offset slots) tear at a finer grain.
const PARTITION_TEAR_UNIT: usize = 16;
/// Latent sector errors are tracked at this granularity.
const SECTOR_SIZE: u64 = 256;
/// A misdirected partition write lands up to this many sectors away from where it was aimed.
const MISDIRECT_SECTORS_MAX: u64 = 16;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Zone {
    WalHeaders,
    WalPrepares,
    Superblock,
    /// A partition's segments, indexes and consumer offsets.
    Partition,
}

/// An I/O request waiting for its completion time; carried out by `SimDisk::carry_out`.
pub enum DiskRequest {
    /// A write already submitted (`submit_write`): it lands when it completes.
    Write {
        id: u64,
    },
    Read {
        file: FileId,
        offset: u64,
        len: usize,
    },
    /// Covers the writes completed before it was issued (`SimDisk::sync_point` then).
    Sync {
        file: FileId,
        upto: u64,
    },
    Truncate {
        file: FileId,
        len: u64,
    },
    Remove {
        file: FileId,
    },
    List {
        namespace: Namespace,
    },
}

/// A file: what is on stable storage, and the writes since its last sync (the page cache). A read
/// sees the durable bytes with the unsynced writes laid over them in order.
#[derive(Default)]
struct SimFile {
    durable: Vec<u8>,
    /// (offset, bytes, completion number): a sync makes durable those completed before it was
    /// issued, and only those.
    unsynced: Vec<(u64, Vec<u8>, u64)>,
    /// The file's directory entry is durable: it has been synced once since it was created.
    entry_durable: bool,
}

impl SimFile {
    fn len(&self) -> u64 {
        let overlay = self.unsynced.iter().map(|(offset, bytes, _)| offset + bytes.len() as u64).max().unwrap_or(0);
        overlay.max(self.durable.len() as u64)
    }
}

fn apply(target: &mut Vec<u8>, offset: u64, bytes: &[u8]) {
    let end = offset as usize + bytes.len();
    if target.len() < end {
        target.resize(end, 0);
    }
    target[offset as usize..end].copy_from_slice(bytes);
}

/// Which of a disk's WALs belong to groups that sync before they acknowledge (`sync_writes`).
/// Recovery takes a durable redundant header for a durable prepare, so such a WAL must never
/// write a slot's header while the prepare in that slot is not durable (`SimDisk::submit_write`
/// checks it as the write is issued).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SyncedWals {
    #[default]
    None,
    /// The metadata group's only (partitions whose topics do not enforce fsync).
    Metadata,
    All,
}

impl SyncedWals {
    /// The WALs a run syncs: every group's with `enforce_fsync`, else the metadata group's where
    /// it has one (it always syncs). A planted bug that skips the syncs leaves none: those bugs'
    /// windows prove that the acknowledgement checker catches them, which this check would
    /// otherwise see first.
    pub fn of(enforce_fsync: bool, has_metadata: bool, bug: Option<Bug>) -> SyncedWals {
        if matches!(bug, Some(Bug::AckBeforeSync | Bug::MetadataAckBeforeSync)) {
            return SyncedWals::None;
        }
        match (enforce_fsync, has_metadata) {
            (true, _) => SyncedWals::All,
            (false, true) => SyncedWals::Metadata,
            (false, false) => SyncedWals::None,
        }
    }

    fn holds(self, namespace: Namespace) -> bool {
        match self {
            SyncedWals::None => false,
            SyncedWals::Metadata => namespace.is_metadata(),
            SyncedWals::All => true,
        }
    }
}

pub struct SimDisk {
    files: BTreeMap<FileId, SimFile>,
    /// Writes submitted but not completed: (write id, file, offset, bytes).
    in_flight: Vec<(u64, FileId, u64, Vec<u8>)>,
    write_id_next: u64,
    layout: WalLayout,
    /// The WAL zone this disk's faults hit, if it is one of the faulty disks. A faulty disk's
    /// partition files take faults too: the partition plane repairs from its replicated state.
    pub fault_zone: Option<Zone>,
    latent: BTreeSet<(FileId, u64)>,
    pub faults_injected: u64,
    /// Of those, the ones that left a segment's bytes damaged on the platter (a partition log may
    /// lose durable messages to them and must repair from its peers). Read corruption is not
    /// counted: it is gone at the next read.
    pub segment_damage: u64,
    /// Bytes of every write submitted, whatever became of it: what the node wrote.
    pub bytes_written: u64,
    /// Of those, bytes written to segment files (stamped batches) and to the WAL.
    pub segment_bytes_written: u64,
    pub wal_bytes_written: u64,
    /// Segment files created (a first write to a file not there): sealed ones, and the active.
    pub segments_created: u64,
    /// Writes refused because the disk was full (`capacity`).
    pub writes_refused_full: u64,
    /// Writes completed so far: numbers them for `sync`.
    completed_writes: u64,
    /// WAL syncs completed, and of those the ones that made both redundant headers and prepares
    /// durable: a group commit writes the headers of the prepares the one before made durable
    /// beside its own prepares, under one sync.
    pub wal_syncs: u64,
    pub wal_syncs_shared: u64,
    /// The WALs whose header order is checked (see `SyncedWals`).
    pub synced_wals: SyncedWals,
    /// The first header a synced WAL wrote over a prepare that was not durable: a violation the
    /// harness reports.
    pub wal_order_violation: Option<String>,
    /// Bytes the disk holds at most (all files together); a write that would grow past it
    /// fails with `NoSpace` and lands nothing. `None`: unbounded.
    pub capacity: Option<u64>,
}

impl SimDisk {
    pub fn new(layout: WalLayout, fault_zone: Option<Zone>) -> SimDisk {
        SimDisk {
            files: BTreeMap::new(),
            in_flight: Vec::new(),
            write_id_next: 0,
            layout,
            fault_zone,
            latent: BTreeSet::new(),
            faults_injected: 0,
            segment_damage: 0,
            bytes_written: 0,
            segment_bytes_written: 0,
            wal_bytes_written: 0,
            segments_created: 0,
            writes_refused_full: 0,
            completed_writes: 0,
            wal_syncs: 0,
            wal_syncs_shared: 0,
            synced_wals: SyncedWals::None,
            wal_order_violation: None,
            capacity: None,
        }
    }

    fn zone(&self, file: FileId, offset: u64) -> Option<Zone> {
        match file.kind {
            FileKind::Wal if offset < self.layout.headers_zone_size() => Some(Zone::WalHeaders),
            FileKind::Wal => Some(Zone::WalPrepares),
            // Every group's superblock: the replicas' and the partition logs' alike.
            FileKind::SuperblockA | FileKind::SuperblockB => Some(Zone::Superblock),
            FileKind::Snapshot => None,
            _ => Some(Zone::Partition),
        }
    }

    fn faulty(&self, file: FileId, offset: u64) -> bool {
        match (self.fault_zone, self.zone(file, offset)) {
            // A disk whose only faulty zone is its partition files.
            (Some(Zone::Partition), at) => at == Some(Zone::Partition),
            // A partition's WAL prepares leave out the batches its segment log holds: on a disk
            // whose headers zone is faulty the batches are the prepare's only sure copy, so
            // that disk's partition files stay whole (no prepare loses both its copies).
            (Some(Zone::WalHeaders), Some(Zone::Partition)) => false,
            (Some(_), Some(Zone::Superblock | Zone::Partition)) => true,
            (Some(zone), Some(at)) => zone == at,
            _ => false,
        }
    }

    fn count_fault(&mut self, file: FileId) {
        self.faults_injected += 1;
        if matches!(file.kind, FileKind::Segment(_)) {
            self.segment_damage += 1;
        }
    }

    /// Faults that change what lands on the platter: not for superblocks (read corruption only).
    fn write_faulty(&self, file: FileId, offset: u64) -> bool {
        self.faulty(file, offset) && self.zone(file, offset) != Some(Zone::Superblock)
    }

    pub fn submit_write(&mut self, file: FileId, offset: u64, bytes: Vec<u8>) -> u64 {
        if file.kind == FileKind::Wal
            && offset < self.layout.headers_zone_size()
            && self.synced_wals.holds(file.namespace)
        {
            self.check_header_follows_its_prepare(file, offset, &bytes);
        }
        self.bytes_written += bytes.len() as u64;
        let new_file = !self.files.contains_key(&file) && !self.in_flight.iter().any(|(_, other, ..)| *other == file);
        if matches!(file.kind, FileKind::Segment(_)) && new_file {
            self.segments_created += 1;
        }
        match file.kind {
            FileKind::Segment(_) => self.segment_bytes_written += bytes.len() as u64,
            FileKind::Wal => self.wal_bytes_written += bytes.len() as u64,
            _ => {}
        }
        let id = self.write_id_next;
        self.write_id_next += 1;
        self.in_flight.push((id, file, offset, bytes));
        id
    }

    pub fn with_synced_wals(mut self, synced_wals: SyncedWals) -> SimDisk {
        self.synced_wals = synced_wals;
        self
    }

    /// A synced WAL writes the redundant header at `offset`: the prepare in its slot must be
    /// durable, no write to it in flight or completed since the file's last sync, and it must be
    /// this header's prepare (a slot starts with its prepare's header), unless the disk's own
    /// faults changed what landed there.
    fn check_header_follows_its_prepare(&mut self, file: FileId, offset: u64, header: &[u8]) {
        let slot = offset / HEADER_SIZE as u64;
        let start = self.layout.prepare_offset(slot);
        let end = start + self.layout.prepare_size_max;
        let overlaps = |at: u64, len: usize| at < end && at + len as u64 > start;
        let in_flight =
            self.in_flight.iter().any(|(_, written, at, bytes)| *written == file && overlaps(*at, bytes.len()));
        let unsynced = self
            .files
            .get(&file)
            .is_some_and(|target| target.unsynced.iter().any(|(at, bytes, _)| overlaps(*at, bytes.len())));
        let durable =
            self.files.get(&file).and_then(|target| target.durable.get(start as usize..start as usize + HEADER_SIZE));
        let another = !self.write_faulty(file, start) && durable != Some(header);
        if (in_flight || unsynced || another) && self.wal_order_violation.is_none() {
            let state = if in_flight {
                "its write still in flight"
            } else if unsynced {
                "written but not synced"
            } else {
                "the slot durably holds another prepare"
            };
            let group =
                if file.namespace.is_metadata() { "metadata".to_string() } else { file.namespace.0.to_string() };
            self.wal_order_violation = Some(format!(
                "the WAL of group {group} wrote slot {slot}'s redundant header while the prepare in that slot \
                 was not durable ({state}): recovery would take that header for a durable prepare"
            ));
        }
    }

    /// The write reaches the page cache (with whatever fault the device adds).
    pub fn complete_write(&mut self, id: u64, rng: &mut SimRng, rates: &FaultRates) -> Result<(), IoError> {
        let index = self.in_flight.iter().position(|(write, ..)| *write == id).expect("write in flight");
        let (_, file, mut offset, mut bytes) = self.in_flight.remove(index);
        let zone = self.zone(file, offset);
        if let Some(capacity) = self.capacity {
            let current = self.files.get(&file).map_or(0, SimFile::len);
            let growth = (offset + bytes.len() as u64).saturating_sub(current);
            let used: u64 = self.files.values().map(SimFile::len).sum();
            if used + growth > capacity {
                self.writes_refused_full += 1;
                return Err(IoError::NoSpace);
            }
        }
        if zone == Some(Zone::Partition) && self.write_faulty(file, offset) && rng.chance(rates.latent_sector_ppm) {
            // The device is full for this write: nothing of it lands (and nothing is damaged).
            self.faults_injected += 1;
            return Err(IoError::NoSpace);
        }
        if (file.kind == FileKind::Wal || segment_file(file))
            && self.write_faulty(file, offset)
            && rng.chance(device_error_ppm(file, rates))
        {
            // The device failed the write: nothing of it lands.
            self.faults_injected += 1;
            return Err(IoError::Device);
        }
        if self.write_faulty(file, offset) {
            if rng.chance(rates.write_corruption_ppm) && !bytes.is_empty() {
                let bit = rng.below(bytes.len() as u64 * 8);
                bytes[(bit / 8) as usize] ^= 1 << (bit % 8);
                self.count_fault(file);
            } else if rng.chance(rates.misdirected_write_ppm) {
                offset = match zone {
                    Some(Zone::WalHeaders) => self.layout.header_offset(rng.below(self.layout.slot_count)),
                    Some(Zone::WalPrepares) => self.layout.prepare_offset(rng.below(self.layout.slot_count)),
                    _ => {
                        let shift = (1 + rng.below(MISDIRECT_SECTORS_MAX)) * SECTOR_SIZE;
                        if rng.chance(500_000) {
                            offset + shift
                        } else {
                            offset.saturating_sub(shift)
                        }
                    }
                };
                self.count_fault(file);
            }
        }
        let first = offset / SECTOR_SIZE;
        let last = (offset + bytes.len() as u64).div_ceil(SECTOR_SIZE);
        let stale: Vec<_> = self.latent.range((file, first)..(file, last)).copied().collect();
        for sector in stale {
            self.latent.remove(&sector);
        }
        if self.write_faulty(file, offset) && rng.chance(rates.latent_sector_ppm) {
            self.latent.insert((file, first));
            self.count_fault(file);
        }
        self.completed_writes += 1;
        let completed = self.completed_writes;
        self.files.entry(file).or_default().unsynced.push((offset, bytes, completed));
        Ok(())
    }

    pub fn read(
        &mut self,
        file: FileId,
        offset: u64,
        len: usize,
        rng: &mut SimRng,
        rates: &FaultRates,
    ) -> Result<Vec<u8>, IoError> {
        let first = offset / SECTOR_SIZE;
        let last = (offset + len as u64).div_ceil(SECTOR_SIZE);
        if self.latent.range((file, first)..(file, last)).next().is_some() {
            return Err(IoError::Device);
        }
        let mut bytes = vec![0u8; len];
        if let Some(target) = self.files.get(&file) {
            let start = (offset as usize).min(target.durable.len());
            let end = (offset as usize + len).min(target.durable.len());
            bytes[..end - start].copy_from_slice(&target.durable[start..end]);
            for (written_at, written, _) in &target.unsynced {
                let (from, to) =
                    (*written_at.max(&offset), (written_at + written.len() as u64).min(offset + len as u64));
                if from < to {
                    bytes[(from - offset) as usize..(to - offset) as usize]
                        .copy_from_slice(&written[(from - written_at) as usize..(to - written_at) as usize]);
                }
            }
        }
        if self.faulty(file, offset) && len > 0 && rng.chance(rates.read_corruption_ppm) {
            let bit = rng.below(len as u64 * 8);
            bytes[(bit / 8) as usize] ^= 1 << (bit % 8);
            self.faults_injected += 1;
        }
        Ok(bytes)
    }

    pub fn sync(&mut self, file: FileId, upto: u64) -> Result<(), IoError> {
        self.sync_failing(file, upto, false)
    }

    /// `fail`: the device reports an error, and the writes the sync was to make durable are
    /// lost (what Linux does with dirty pages after a failed fsync).
    fn sync_failing(&mut self, file: FileId, upto: u64, fail: bool) -> Result<(), IoError> {
        if self.in_flight.iter().any(|(_, written, ..)| *written == file) {
            self.files.entry(file).or_default();
        }
        // A file that does not exist has nothing to make durable (fsync of an unlinked file).
        let Some(target) = self.files.get_mut(&file) else {
            return Ok(());
        };
        let (covered, later): (Vec<_>, Vec<_>) =
            std::mem::take(&mut target.unsynced).into_iter().partition(|(_, _, completed)| *completed <= upto);
        if fail {
            target.unsynced = later;
            self.faults_injected += 1;
            return Err(IoError::Device);
        }
        if file.kind == FileKind::Wal {
            let headers_zone = self.layout.headers_zone_size();
            self.wal_syncs += 1;
            let headers = covered.iter().any(|(offset, ..)| *offset < headers_zone);
            let prepares = covered.iter().any(|(offset, ..)| *offset >= headers_zone);
            self.wal_syncs_shared += (headers && prepares) as u64;
        }
        for (offset, bytes, _) in covered {
            apply(&mut target.durable, offset, &bytes);
        }
        target.unsynced = later;
        target.entry_durable = true;
        Ok(())
    }

    /// What a sync issued now covers: every write completed so far (pass it to `sync`).
    pub fn sync_point(&self) -> u64 {
        self.completed_writes
    }

    /// Truncation reaches the platter at once (a simplification: a lost truncate only brings back
    /// bytes that recovery already refused once).
    pub fn truncate(&mut self, file: FileId, len: u64) -> Result<(), IoError> {
        let Some(target) = self.files.get_mut(&file) else {
            return Err(IoError::NotFound);
        };
        target.durable.truncate(len as usize);
        for (offset, bytes, _) in target.unsynced.iter_mut() {
            bytes.truncate(len.saturating_sub(*offset) as usize);
        }
        target.unsynced.retain(|(_, bytes, _)| !bytes.is_empty());
        // Sectors wholly past the new end; one the cut runs through keeps its error.
        let stale: Vec<_> = self.latent.range((file, len.div_ceil(SECTOR_SIZE))..(file, u64::MAX)).copied().collect();
        for sector in stale {
            self.latent.remove(&sector);
        }
        Ok(())
    }

    /// Flips one bit of what is on stable storage (a test's targeted damage).
    pub fn flip_durable_bit(&mut self, file: FileId, offset: u64) {
        let target = self.files.get_mut(&file).expect("file exists");
        target.durable[offset as usize] ^= 1;
        self.count_fault(file);
    }

    /// Removal is durable at once (directory operations are not the subject of these faults).
    pub fn remove(&mut self, file: FileId) {
        // A write still in flight lands after the removal and brings the file back, as it would
        // through a driver that opens files by path.
        self.files.remove(&file);
        let stale: Vec<_> = self.latent.range((file, 0)..(file, u64::MAX)).copied().collect();
        for sector in stale {
            self.latent.remove(&sector);
        }
    }

    /// The files of a namespace and their sizes, as a directory listing would give them.
    pub fn list(&self, namespace: Namespace) -> Vec<(FileKind, u64)> {
        self.files
            .iter()
            .filter(|(file, _)| file.namespace == namespace)
            .map(|(file, f)| (file.kind, f.len()))
            .collect()
    }

    /// Writes submitted and not yet completed.
    pub fn writes_in_flight(&self) -> usize {
        self.in_flight.len()
    }

    /// The bytes of a file as a read sees them: the durable ones with the writes since laid over.
    pub fn bytes(&self, file: FileId) -> Vec<u8> {
        let Some(f) = self.files.get(&file) else { return Vec::new() };
        let mut bytes = f.durable.clone();
        for (offset, written, _) in &f.unsynced {
            apply(&mut bytes, *offset, written);
        }
        bytes
    }

    /// The bytes of a file that survive a power loss.
    pub fn durable_bytes(&self, file: FileId) -> Vec<u8> {
        self.files.get(&file).map_or_else(Vec::new, |f| f.durable.clone())
    }

    /// What is left of a bounded disk (`capacity`): nothing is known of an unbounded one.
    pub fn space(&self) -> Option<vireo_io::DiskSpace> {
        let capacity = self.capacity?;
        let used: u64 = self.files.values().map(SimFile::len).sum();
        Some(vireo_io::DiskSpace { free: capacity.saturating_sub(used), total: capacity })
    }

    /// Every file on the disk with its size: what a data-directory listing shows.
    pub fn listing(&self) -> Vec<(FileId, u64)> {
        self.files.iter().map(|(file, f)| (*file, f.len())).collect()
    }

    /// Carries out a request at its completion time and returns the completion.
    pub fn carry_out(
        &mut self,
        request: DiskRequest,
        token: Token,
        rng: &mut SimRng,
        rates: &FaultRates,
    ) -> Completion {
        match request {
            DiskRequest::Write { id } => Completion::Write { token, result: self.complete_write(id, rng, rates) },
            DiskRequest::Read { file, offset, len } => {
                Completion::Read { token, result: self.read(file, offset, len, rng, rates) }
            }
            DiskRequest::Sync { file, upto } => {
                // A segment log's sync fails where its files take faults: the log must then stop
                // counting anything durable and reopen from what its files really hold.
                let fail = (file.kind == FileKind::Wal
                    && self.fault_zone.is_some_and(|zone| matches!(zone, Zone::WalHeaders | Zone::WalPrepares))
                    || segment_file(file) && self.write_faulty(file, 0))
                    && rng.chance(device_error_ppm(file, rates));
                Completion::Sync { token, result: self.sync_failing(file, upto, fail) }
            }
            DiskRequest::Truncate { file, len } => Completion::Truncate { token, result: self.truncate(file, len) },
            DiskRequest::Remove { file } => {
                self.remove(file);
                Completion::Remove { token, result: Ok(()) }
            }
            DiskRequest::List { namespace } => Completion::List { token, result: Ok(self.list(namespace)) },
        }
    }

    /// The process is killed (the machine stays up): every completed write is in the kernel and
    /// stays there (still unsynced: a later power loss may take it); a write still in flight
    /// lands whole, torn or not at all.
    pub fn crash_process(&mut self, rng: &mut SimRng) {
        let in_flight = std::mem::take(&mut self.in_flight);
        for (_, file, offset, bytes) in in_flight {
            let kept = match rng.below(3) {
                0 => continue,
                1 => bytes.len(),
                _ => {
                    let unit = if consensus_file(&file) { TEAR_UNIT } else { PARTITION_TEAR_UNIT };
                    (rng.below(bytes.len().div_ceil(unit).max(1) as u64) as usize * unit).min(bytes.len())
                }
            };
            self.completed_writes += 1;
            let completed = self.completed_writes;
            self.files.entry(file).or_default().unsynced.push((offset, bytes[..kept].to_vec(), completed));
        }
    }

    /// Power loss: what was not synced is lost, torn or persisted, independently per write (or,
    /// with `tear_all`, every unsynced write torn: the scripted worst case). A file never synced
    /// may lose its directory entry too.
    pub fn crash(&mut self, rng: &mut SimRng, tear_all: bool) {
        let in_flight = std::mem::take(&mut self.in_flight);
        for (_, file, offset, bytes) in &in_flight {
            self.files.entry(*file).or_default().unsynced.push((*offset, bytes.clone(), u64::MAX));
        }
        let mut vanished = Vec::new();
        for (file, target) in self.files.iter_mut() {
            let writes = std::mem::take(&mut target.unsynced);
            if writes.is_empty() {
                continue;
            }
            for (offset, bytes, _) in writes.into_iter().filter(|(_, bytes, _)| !bytes.is_empty()) {
                // Torn: a strict prefix, in TEAR_UNIT pieces, made it to the platter.
                let fate = if tear_all { 2 } else { rng.below(3) };
                match fate {
                    0 => {}
                    1 => apply(&mut target.durable, offset, &bytes),
                    _ => {
                        let unit = if consensus_file(file) { TEAR_UNIT } else { PARTITION_TEAR_UNIT };
                        let units = bytes.len().div_ceil(unit);
                        let kept = (rng.below(units as u64) as usize * unit).min(bytes.len());
                        apply(&mut target.durable, offset, &bytes[..kept]);
                    }
                }
            }
            if !target.entry_durable && !consensus_file(file) && rng.chance(500_000) {
                vanished.push(*file);
            }
        }
        for file in vanished {
            self.files.remove(&file);
        }
        // A file that is there after the power loss has its directory entry on the platter.
        for target in self.files.values_mut() {
            target.entry_durable = true;
        }
    }
}

/// A file of a VSR group (WAL, superblock, checkpoint), of the metadata group or a partition's:
/// these tear in sectors and were created (and their directory synced) when the replica formatted.
fn consensus_file(file: &FileId) -> bool {
    file.namespace.is_metadata()
        || matches!(file.kind, FileKind::Wal | FileKind::SuperblockA | FileKind::SuperblockB | FileKind::Snapshot)
}

/// How often the device fails a write or sync of `file`: a segment log writes far less often
/// than a WAL (batches, not prepares), so its files fail more often per request, for the failure
/// to reach a good share of the runs.
fn device_error_ppm(file: FileId, rates: &FaultRates) -> u32 {
    if segment_file(file) {
        rates.wal_error_ppm.saturating_mul(SEGMENT_ERROR_FACTOR)
    } else {
        rates.wal_error_ppm
    }
}

/// Times more often than a WAL's a segment log's write or sync fails.
const SEGMENT_ERROR_FACTOR: u32 = 8;

/// A segment log's own files (a segment or its index).
fn segment_file(file: FileId) -> bool {
    matches!(file.kind, FileKind::Segment(_) | FileKind::Index(_))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::{FaultLevel, Overrides, Scenario};

    #[test]
    fn unsynced_writes_do_not_survive_every_crash_synced_ones_do() {
        let mut rng = SimRng::new(1);
        let scenario = Scenario::draw(1, &Overrides { faults: Some(FaultLevel::None), ..Default::default() }, &mut rng);
        let rates = scenario.faults;
        let mut lost = 0;
        for round in 0..50 {
            let mut disk = SimDisk::new(WalLayout::new(8, 1024), None);
            let wal = vireo_storage::layout::wal_file(Namespace::METADATA);
            let id = disk.submit_write(wal, 0, vec![1u8; 256]);
            disk.complete_write(id, &mut rng, &rates).unwrap();
            disk.sync(wal, disk.sync_point()).unwrap();
            let id = disk.submit_write(wal, 256, vec![2u8; 256]);
            disk.complete_write(id, &mut rng, &rates).unwrap();
            disk.crash(&mut rng, false);
            assert_eq!(disk.read(wal, 0, 256, &mut rng, &rates).unwrap(), vec![1u8; 256], "round {round}");
            if disk.read(wal, 256, 256, &mut rng, &rates).unwrap() != vec![2u8; 256] {
                lost += 1;
            }
        }
        assert!(lost > 0, "an unsynced write always survived the crash");
    }

    /// The header-order check passes a header written over its own durable prepare, and fails
    /// one written over a prepare in flight, one written but not synced, and one over another
    /// prepare; a WAL whose group does not sync is not checked.
    #[test]
    fn a_synced_wal_header_must_follow_its_own_durable_prepare() {
        let mut rng = SimRng::new(1);
        let scenario = Scenario::draw(1, &Overrides { faults: Some(FaultLevel::None), ..Default::default() }, &mut rng);
        let rates = scenario.faults;
        let layout = WalLayout::new(8, 1024);
        let wal = vireo_storage::layout::wal_file(Namespace::METADATA);
        let (header, other) = (vec![7u8; HEADER_SIZE], vec![8u8; HEADER_SIZE]);
        let slot = 3;
        let write_prepare = |disk: &mut SimDisk, rng: &mut SimRng, complete: bool, sync: bool, prepare: &[u8]| {
            let id = disk.submit_write(wal, layout.prepare_offset(slot), [prepare, &[1u8; 500]].concat());
            if complete {
                disk.complete_write(id, rng, &rates).unwrap();
            }
            if sync {
                disk.sync(wal, disk.sync_point()).unwrap();
            }
        };
        let cases: [(bool, bool, &[u8], Option<&str>); 4] = [
            (true, true, &header, None),
            (false, false, &header, Some("still in flight")),
            (true, false, &header, Some("not synced")),
            (true, true, &other, Some("another prepare")),
        ];
        for (complete, sync, prepare, expected) in cases {
            for synced_wals in [SyncedWals::All, SyncedWals::None] {
                let mut disk = SimDisk::new(layout, None).with_synced_wals(synced_wals);
                write_prepare(&mut disk, &mut rng, complete, sync, prepare);
                disk.submit_write(wal, layout.header_offset(slot), header.clone());
                let violation = disk.wal_order_violation.take();
                match (expected, synced_wals) {
                    (Some(what), SyncedWals::All) => {
                        let violation = violation.expect("the check fails");
                        assert!(violation.contains(what), "{violation}");
                    }
                    _ => assert_eq!(violation, None),
                }
            }
        }
    }
}
