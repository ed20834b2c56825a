//! `SimIo`: the `Io` a simulated node's state machines run on. Messages go through the simulated
//! network into the event queue; file operations are carried out on the node's `SimDisk` when
//! their completion event comes up, after a seeded latency (a slow disk now and then). Both
//! cluster harnesses use it, each with its own event type (`SimEvent`).

use vireo_io::{FileId, Io, Namespace, Peer, Token};

use crate::disk::{DiskRequest, SimDisk};
use crate::network::Network;
use crate::queue::EventQueue;
use crate::rng::SimRng;
use crate::scenario::FaultRates;

/// The events a harness queues for what `SimIo` asks.
pub trait SimEvent {
    /// What a completion must carry back to find its issuer (node, incarnation, shard...).
    type Issuer: Copy;
    fn deliver(to: Peer, from: Peer, bytes: Vec<u8>) -> Self;
    fn complete(issuer: Self::Issuer, request: DiskRequest, token: Token) -> Self;
}

/// A prepare_ok a replica sent: the group (its cluster id, which names the incarnation, and its
/// header's group field) and the prepare (op, checksum).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Ack {
    pub cluster: u128,
    pub group: u64,
    pub op: u64,
    pub checksum: u128,
}

pub struct SimIo<'a, E: SimEvent> {
    pub now: u64,
    /// The node's index: its address on the network.
    pub node: u8,
    pub issuer: E::Issuer,
    pub disk: &'a mut SimDisk,
    pub rng: &'a mut SimRng,
    pub network: &'a Network,
    pub rates: &'a FaultRates,
    pub queue: &'a mut EventQueue<E>,
    /// Disk faults (slow I/O) are injected.
    pub disk_faults: bool,
    /// Where every prepare_ok the node sends is recorded, for the checker of what a replica
    /// promised to keep (`None`: not recorded).
    pub acks: Option<&'a mut std::collections::BTreeSet<Ack>>,
}

impl<E: SimEvent> SimIo<'_, E> {
    fn latency(&mut self, min_ns: u64, max_ns: u64) -> u64 {
        let latency = self.rng.range(min_ns, max_ns);
        if self.disk_faults && self.rng.chance(self.rates.slow_disk_ppm) {
            latency * 20
        } else {
            latency
        }
    }

    fn complete(&mut self, latency: u64, request: DiskRequest, token: Token) {
        self.queue.push(self.now + latency, E::complete(self.issuer, request, token));
    }
}

impl<E: SimEvent> Io for SimIo<'_, E> {
    fn now(&self) -> u64 {
        self.now
    }

    fn send(&mut self, to: Peer, message: Vec<u8>) {
        if let Some(acks) = self.acks.as_mut() {
            if let Ok(header) = vireo_protocol::Header::decode(&message) {
                if header.command == vireo_protocol::header::Command::PrepareOk {
                    acks.insert(Ack {
                        cluster: header.cluster,
                        group: header.group,
                        op: header.op,
                        checksum: header.parent,
                    });
                }
            }
        }
        let from = Peer::Replica(self.node);
        for delay in self.network.route(from, to, self.rng, self.rates) {
            self.queue.push(self.now + delay, E::deliver(to, from, message.clone()));
        }
    }

    fn read(&mut self, file: FileId, offset: u64, len: usize, token: Token) {
        let latency = self.latency(20_000, 100_000);
        self.complete(latency, DiskRequest::Read { file, offset, len }, token);
    }

    fn write(&mut self, file: FileId, offset: u64, bytes: vireo_io::Bytes, token: Token) {
        let id = self.disk.submit_write(file, offset, bytes.to_vec());
        let latency = self.latency(20_000, 200_000);
        self.complete(latency, DiskRequest::Write { id }, token);
    }

    fn sync(&mut self, file: FileId, token: Token) {
        // fdatasync costs about 4 ms on our machines.
        let mut latency = self.latency(1_000_000, 4_000_000);
        if matches!(file.kind, vireo_io::FileKind::Segment(_)) {
            latency *= self.rates.segment_sync_factor;
        }
        let upto = self.disk.sync_point();
        self.complete(latency, DiskRequest::Sync { file, upto }, token);
    }

    fn truncate(&mut self, file: FileId, len: u64, token: Token) {
        let latency = self.latency(20_000, 100_000);
        self.complete(latency, DiskRequest::Truncate { file, len }, token);
    }

    fn remove(&mut self, file: FileId, token: Token) {
        let latency = self.latency(20_000, 100_000);
        self.complete(latency, DiskRequest::Remove { file }, token);
    }

    fn list(&mut self, namespace: Namespace, token: Token) {
        let latency = self.latency(20_000, 100_000);
        self.complete(latency, DiskRequest::List { namespace }, token);
    }

    fn random(&mut self) -> u64 {
        self.rng.next_u64()
    }

    fn disk_space(&self) -> Option<vireo_io::DiskSpace> {
        self.disk.space()
    }
}
