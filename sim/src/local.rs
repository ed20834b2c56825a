//! One node's simulated disk with nothing else around it: the world the storage state machines
//! (partition logs, consumer offsets) are tested in. Completions come back in a seeded order on
//! virtual time, so a test can crash the disk between any two of them.

use std::collections::BTreeMap;

use vireo_io::{Completion, FileId, Io, Namespace, Peer, Token};
use vireo_storage::layout::WalLayout;

use crate::disk::{DiskRequest, SimDisk, Zone};
use crate::rng::SimRng;
use crate::scenario::FaultRates;

pub struct LocalWorld {
    pub disk: SimDisk,
    pub rng: SimRng,
    pub rates: FaultRates,
    now: u64,
    sequence: u64,
    /// Requests in flight by (completion time, sequence).
    pending: BTreeMap<(u64, u64), (Token, DiskRequest)>,
}

/// Rates with every fault off.
pub fn no_faults() -> FaultRates {
    FaultRates::none()
}

impl LocalWorld {
    /// `faulty`: the disk takes the faults `rates` gives (on partition files).
    pub fn new(seed: u64, rates: FaultRates, faulty: bool) -> LocalWorld {
        LocalWorld {
            disk: SimDisk::new(WalLayout::new(8, 4096), faulty.then_some(Zone::Partition)),
            rng: SimRng::new(seed),
            rates,
            now: 0,
            sequence: 0,
            pending: BTreeMap::new(),
        }
    }

    fn complete_after(&mut self, min_ns: u64, max_ns: u64, token: Token, request: DiskRequest) {
        let at = self.now + self.rng.range(min_ns, max_ns);
        self.sequence += 1;
        self.pending.insert((at, self.sequence), (token, request));
    }

    pub fn in_flight(&self) -> usize {
        self.pending.len()
    }

    /// Carries out the next request due and returns its completion.
    pub fn step(&mut self) -> Option<Completion> {
        let ((at, _), (token, request)) = self.pending.pop_first()?;
        self.now = self.now.max(at);
        Some(self.disk.carry_out(request, token, &mut self.rng, &self.rates))
    }

    /// Power loss: every request in flight is dropped, unsynced writes are lost, torn or kept.
    pub fn crash(&mut self) {
        self.pending.clear();
        self.disk.crash(&mut self.rng, false);
    }

    pub fn advance(&mut self, ns: u64) {
        self.now += ns;
    }
}

impl Io for LocalWorld {
    fn now(&self) -> u64 {
        self.now
    }

    fn send(&mut self, _to: Peer, _message: Vec<u8>) {
        panic!("a storage state machine sends no messages");
    }

    fn read(&mut self, file: FileId, offset: u64, len: usize, token: Token) {
        self.complete_after(10_000, 100_000, token, DiskRequest::Read { file, offset, len });
    }

    fn write(&mut self, file: FileId, offset: u64, bytes: vireo_io::Bytes, token: Token) {
        let id = self.disk.submit_write(file, offset, bytes.to_vec());
        self.complete_after(10_000, 200_000, token, DiskRequest::Write { id });
    }

    fn sync(&mut self, file: FileId, token: Token) {
        let upto = self.disk.sync_point();
        self.complete_after(1_000_000, 4_000_000, token, DiskRequest::Sync { file, upto });
    }

    fn truncate(&mut self, file: FileId, len: u64, token: Token) {
        self.complete_after(10_000, 100_000, token, DiskRequest::Truncate { file, len });
    }

    fn remove(&mut self, file: FileId, token: Token) {
        self.complete_after(10_000, 100_000, token, DiskRequest::Remove { file });
    }

    fn list(&mut self, namespace: Namespace, token: Token) {
        self.complete_after(10_000, 100_000, token, DiskRequest::List { namespace });
    }

    fn random(&mut self) -> u64 {
        self.rng.next_u64()
    }
}
