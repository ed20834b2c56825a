//! The in-memory journal: the window of prepares a replica holds (at most one per WAL slot), and
//! the rules that turn the bytes of `journal.wal` back into that window after a restart.
//!
//! An entry always has a header (the prepare's identity: op, checksum, parent). Its body may be
//! missing: the header arrived alone (in a start_view or from the redundant headers zone) and the
//! body must be repaired from a peer before the op can be committed. `durable` is set only once the
//! prepare *and* its redundant header are synced: only then may the replica acknowledge it.

use crate::elided::ElidedBody;
use crate::header::{encode_frame, Command, Header};
use vireo_io::Bytes;
use vireo_storage::layout::{WalLayout, HEADER_SIZE};

#[derive(Clone, Debug)]
pub struct Entry {
    pub header: Header,
    /// Shared: the WAL writes it, the external log appends slices of it, and the state machine
    /// keeps slices of it, all without a copy.
    pub body: Option<Bytes>,
    /// The prepare and its redundant header are on stable storage.
    pub durable: bool,
    /// Recovered from its redundant header alone: this replica once held the prepare durably and
    /// may have acknowledged it, so it never tells a primary it lacks it (never nacks it).
    pub faulty: bool,
}

impl Entry {
    /// A whole prepare not yet on stable storage.
    pub fn prepare(header: Header, body: impl Into<Bytes>) -> Entry {
        Entry { header, body: Some(body.into()), durable: false, faulty: false }
    }

    /// A prepare known by its header only (from a view change, or a peer's headers).
    pub fn header_only(header: Header) -> Entry {
        Entry { header, body: None, durable: false, faulty: false }
    }
}

pub struct Journal {
    pub layout: WalLayout,
    slots: Vec<Option<Entry>>,
    /// A prepare was replaced by another of its op, or dropped from the head (a view change, a
    /// state transfer), since the replica's external log last reported what it holds: until it
    /// reports again, it may hold the batches of prepares this journal no longer has.
    pub replaced: bool,
}

impl Journal {
    pub fn new(layout: WalLayout) -> Journal {
        let slots = (0..layout.slot_count).map(|_| None).collect();
        Journal { layout, slots, replaced: false }
    }

    fn index(&self, op: u64) -> usize {
        self.layout.slot(op) as usize
    }

    /// The entry for exactly this op, if the journal holds one.
    pub fn get(&self, op: u64) -> Option<&Entry> {
        self.slots[self.index(op)].as_ref().filter(|entry| entry.header.op == op)
    }

    pub fn get_mut(&mut self, op: u64) -> Option<&mut Entry> {
        let index = self.index(op);
        self.slots[index].as_mut().filter(|entry| entry.header.op == op)
    }

    /// The entry for `op` if it is the prepare with this checksum.
    pub fn get_exact(&self, op: u64, checksum: u128) -> Option<&Entry> {
        self.get(op).filter(|entry| entry.header.checksum == checksum)
    }

    /// Puts an entry in its slot, replacing whatever was there (an older op, or another prepare of
    /// the same op that a view change discarded).
    pub fn insert(&mut self, entry: Entry) {
        if let Some(body) = &entry.body {
            // Every body came in checked (a frame's checksums) or was just sealed: proving it
            // again would hash each prepare twice more (insert, and the put-back after execute).
            debug_assert!(entry.header.valid_checksum_body(body));
        }
        self.put(entry);
    }

    /// Puts an entry in its slot whose body does not match its header's `checksum_body`: a
    /// single replica's recovered prepare with lost spans zeroed (`RecoveredSlot::Holed`). It is
    /// durable already, so it is never written again.
    pub fn insert_holed(&mut self, entry: Entry) {
        assert!(entry.durable, "a holed prepare is never written again");
        self.put(entry);
    }

    fn put(&mut self, entry: Entry) {
        assert_eq!(entry.header.command, Command::Prepare);
        let index = self.index(entry.header.op);
        if self.slots[index]
            .as_ref()
            .is_some_and(|old| old.header.op >= entry.header.op && old.header.checksum != entry.header.checksum)
        {
            self.replaced = true;
        }
        self.slots[index] = Some(entry);
    }

    pub fn remove(&mut self, op: u64) {
        let index = self.index(op);
        if self.slots[index].as_ref().is_some_and(|entry| entry.header.op == op) {
            self.slots[index] = None;
            self.replaced = true;
        }
    }

    /// Drops every entry above `op` (a view change truncated them) or at or below `floor`.
    pub fn retain(&mut self, floor: u64, op: u64) {
        for slot in &mut self.slots {
            if slot.as_ref().is_some_and(|entry| entry.header.op > op || entry.header.op <= floor) {
                self.replaced |= slot.as_ref().is_some_and(|entry| entry.header.op > op);
                *slot = None;
            }
        }
    }
}

/// What recovery makes of one WAL slot from its two copies of the header.
#[derive(Debug, PartialEq, Eq)]
pub enum RecoveredSlot {
    /// Neither copy is readable: the slot never held a durable prepare, or a torn write left it.
    Empty,
    /// The prepare is whole; `redundant`: its redundant header is too (it was durable, and may
    /// have been acknowledged).
    Prepare { header: Header, body: Vec<u8>, redundant: bool },
    /// Only the redundant header survived: the prepare was durable once and is damaged now. Its
    /// body must come from a peer; it may have been acknowledged, so it is never forgotten.
    HeaderOnly(Header),
    /// The prepare is whole but its external spans were left out (`elided`): its body is put
    /// back together from the external log (`Elided::settle`).
    Elided { header: Header, elided: ElidedBody, redundant: bool },
    /// A single replica's durable elided prepare whose external log holds some of its spans
    /// damaged: the body with those spans zeroed (so it fails `checksum_body`), applied with them
    /// lost (`StateMachine::span_lost`).
    Holed { header: Header, body: Vec<u8> },
}

impl RecoveredSlot {
    /// An elided slot once the external log was asked for its spans (`held`): the prepare if the
    /// body comes back exactly (its `checksum_body`); else, the header if its redundant copy says
    /// the prepare was durable (its batches were, too: the header is written only once the
    /// external log holds them, so the log lost them to damage, and a peer has them), else
    /// nothing (never acknowledged).
    pub fn settle(self, held: impl FnMut(u64, u32) -> Option<Vec<u8>>) -> RecoveredSlot {
        let RecoveredSlot::Elided { header, elided, redundant } = self else { return self };
        match elided.restore(held).filter(|body| header.valid_checksum_body(body)) {
            Some(body) => RecoveredSlot::Prepare { header, body, redundant },
            None if redundant => RecoveredSlot::HeaderOnly(header),
            None => RecoveredSlot::Empty,
        }
    }
}

fn valid_prepare_header(header: Header, layout: &WalLayout, slot: u64) -> bool {
    header.command == Command::Prepare
        && header.valid_checksum()
        && layout.slot(header.op) == slot
        && header.size as u64 <= layout.prepare_size_max
}

/// Recovers one slot from its redundant header (`header_bytes`, 256 bytes) and its prepare
/// (`prepare_bytes`, the slot's `prepare_size_max` bytes). Either may be `None` for a read error.
///
/// The prepare is synced before its redundant header is written, so:
/// - both valid and equal: the prepare;
/// - both valid, different: the newer (op, view, start_view) wins; if that is the header's, its
///   prepare was durable and has since been damaged or misdirected: header only; if it is the
///   prepare's, its header was not written yet;
/// - prepare valid, header not: the prepare (its header write was lost or damaged);
/// - header valid, prepare not: header only;
/// - neither: empty.
///
/// `cluster`: the group's cluster id; a header of another (an earlier incarnation's leftover
/// in a slot nothing overwrote since) is no header of this log.
pub fn recover_slot(
    layout: &WalLayout,
    slot: u64,
    cluster: u128,
    header_bytes: Option<&[u8]>,
    prepare_bytes: Option<&[u8]>,
) -> RecoveredSlot {
    let redundant = header_bytes
        .and_then(|bytes| Header::decode(bytes).ok())
        .filter(|header| header.cluster == cluster && valid_prepare_header(*header, layout, slot));
    let prepare = prepare_bytes.and_then(|bytes| {
        let header = Header::decode(bytes).ok()?;
        if header.cluster != cluster || !valid_prepare_header(header, layout, slot) {
            return None;
        }
        match bytes.get(HEADER_SIZE..header.size as usize) {
            Some(body) if header.valid_checksum_body(body) => Some((header, Stored::Whole(body.to_vec()))),
            _ => ElidedBody::decode(&bytes[HEADER_SIZE..]).map(|elided| (header, Stored::Elided(elided))),
        }
    });
    let found = |header: Header, stored: Stored, redundant: bool| match stored {
        Stored::Whole(body) => RecoveredSlot::Prepare { header, body, redundant },
        Stored::Elided(elided) => RecoveredSlot::Elided { header, elided, redundant },
    };
    match (prepare, redundant) {
        (Some((header, body)), Some(redundant)) => {
            // Newer means a higher op, or for the same op a later view, or a later start_view of
            // that view (`context`): a misdirected write can leave an older prepare of the same
            // op in the prepares zone while the headers zone already names its successor.
            let age = |header: &Header| (header.op, header.view, header.context);
            if age(&redundant) > age(&header) {
                RecoveredSlot::HeaderOnly(redundant)
            } else {
                let redundant = redundant.checksum == header.checksum;
                found(header, body, redundant)
            }
        }
        (Some((header, body)), None) => found(header, body, false),
        (None, Some(redundant)) => RecoveredSlot::HeaderOnly(redundant),
        (None, None) => RecoveredSlot::Empty,
    }
}

/// What a slot's prepares zone holds after the header.
enum Stored {
    Whole(Vec<u8>),
    Elided(ElidedBody),
}

/// The bytes of a prepare as its WAL slot holds them.
pub fn prepare_bytes(header: &Header, body: &[u8]) -> Vec<u8> {
    encode_frame(header, body)
}

/// The bytes of a prepare whose external spans are left out, as its WAL slot holds them.
pub fn elided_prepare_bytes(header: &Header, elided: &ElidedBody) -> Vec<u8> {
    let mut bytes = header.encode().to_vec();
    bytes.extend_from_slice(&elided.encode());
    bytes
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prepare(op: u64, body: &[u8], view: u32) -> (Header, Vec<u8>) {
        let mut header = Header::new(Command::Prepare, CLUSTER, 0);
        header.op = op;
        header.view = view;
        header.seal(body);
        (header, body.to_vec())
    }

    fn slot_bytes(header: &Header, body: &[u8], layout: &WalLayout) -> Vec<u8> {
        let mut bytes = prepare_bytes(header, body);
        bytes.resize(layout.prepare_size_max as usize, 0);
        bytes
    }

    const CLUSTER: u128 = 1;

    #[test]
    fn an_elided_prepare_comes_back_from_its_log_or_as_its_header() {
        use crate::elided::ExternalSpan;
        let layout = WalLayout::new(8, 1024);
        let body: Vec<u8> = (0..200u8).collect();
        let (h5, b5) = prepare(5, &body, 0);
        let span = ExternalSpan { at: 40, len: 100, offset: 7 };
        let elided = ElidedBody::of(&b5, &[span]);
        let mut slot = elided_prepare_bytes(&h5, &elided);
        assert!(slot.len() < HEADER_SIZE + b5.len(), "the span is not in the slot");
        slot.resize(layout.prepare_size_max as usize, 0);
        let batch = b5[40..140].to_vec();
        let held = |offset: u64, len: u32| (offset == 7 && len == 100).then(|| batch.clone());

        // Header durable, log holds the batch: the whole prepare, acknowledged before.
        let recovered = recover_slot(&layout, 5, CLUSTER, Some(&h5.encode()), Some(&slot));
        assert_eq!(recovered, RecoveredSlot::Elided { header: h5, elided: elided.clone(), redundant: true });
        assert_eq!(recovered.settle(held), RecoveredSlot::Prepare { header: h5, body: b5.clone(), redundant: true });
        // Header durable, the log lost the batch: it was durable, so the header stays (repaired).
        let lost = recover_slot(&layout, 5, CLUSTER, Some(&h5.encode()), Some(&slot)).settle(|_, _| None);
        assert_eq!(lost, RecoveredSlot::HeaderOnly(h5));
        // The log holds other bytes there: not this prepare's body.
        let other =
            recover_slot(&layout, 5, CLUSTER, Some(&h5.encode()), Some(&slot)).settle(|_, _| Some(vec![0; 100]));
        assert_eq!(other, RecoveredSlot::HeaderOnly(h5));
        // No header yet, batch lost: never acknowledged, nothing.
        let torn = recover_slot(&layout, 5, CLUSTER, Some(&[0u8; 256]), Some(&slot)).settle(|_, _| None);
        assert_eq!(torn, RecoveredSlot::Empty);
        // No header yet, batch held: the prepare, to be confirmed.
        let unconfirmed = recover_slot(&layout, 5, CLUSTER, None, Some(&slot)).settle(held);
        assert_eq!(unconfirmed, RecoveredSlot::Prepare { header: h5, body: b5, redundant: false });
        // A damaged elided slot under a durable header: header only, as for a whole one.
        let mut damaged = slot.clone();
        damaged[HEADER_SIZE + 30] ^= 1;
        assert_eq!(
            recover_slot(&layout, 5, CLUSTER, Some(&h5.encode()), Some(&damaged)),
            RecoveredSlot::HeaderOnly(h5)
        );
    }

    #[test]
    fn a_slot_of_another_cluster_is_empty() {
        let layout = WalLayout::new(8, 1024);
        let (h3, b3) = prepare(3, b"three", 0);
        let p3 = slot_bytes(&h3, &b3, &layout);
        assert_eq!(recover_slot(&layout, 3, CLUSTER + 1, Some(&h3.encode()), Some(&p3)), RecoveredSlot::Empty);
    }

    #[test]
    fn every_case_of_the_recovery_table() {
        let layout = WalLayout::new(8, 1024);
        let (h3, b3) = prepare(3, b"three", 0);
        let (h11, b11) = prepare(11, b"eleven", 0);
        let (h3_other, b3_other) = prepare(3, b"three again", 1);
        let p3 = slot_bytes(&h3, &b3, &layout);
        let p11 = slot_bytes(&h11, &b11, &layout);
        let torn = vec![0xAB; 1024];

        let whole = recover_slot(&layout, 3, CLUSTER, Some(&h3.encode()), Some(&p3));
        assert_eq!(whole, RecoveredSlot::Prepare { header: h3, body: b3.clone(), redundant: true });
        // Prepare written, header not yet: the prepare.
        let newer = recover_slot(&layout, 3, CLUSTER, Some(&h3.encode()), Some(&p11));
        assert_eq!(newer, RecoveredSlot::Prepare { header: h11, body: b11, redundant: false });
        // Header newer than the prepare: the prepare was damaged after it was durable.
        let damaged = recover_slot(&layout, 3, CLUSTER, Some(&h11.encode()), Some(&p3));
        assert_eq!(damaged, RecoveredSlot::HeaderOnly(h11));
        let same_op = slot_bytes(&h3_other, &b3_other, &layout);
        let rewritten = recover_slot(&layout, 3, CLUSTER, Some(&h3.encode()), Some(&same_op));
        assert_eq!(rewritten, RecoveredSlot::Prepare { header: h3_other, body: b3_other, redundant: false });
        // The header names a later view's prepare of the same op than the prepares zone holds
        // (that prepare's write went astray): header only.
        let stale = recover_slot(&layout, 3, CLUSTER, Some(&h3_other.encode()), Some(&p3));
        assert_eq!(stale, RecoveredSlot::HeaderOnly(h3_other));
        assert_eq!(recover_slot(&layout, 3, CLUSTER, Some(&h3.encode()), Some(&torn)), RecoveredSlot::HeaderOnly(h3));
        assert_eq!(recover_slot(&layout, 3, CLUSTER, None, None), RecoveredSlot::Empty);
        assert_eq!(recover_slot(&layout, 3, CLUSTER, Some(&[0u8; 256]), Some(&torn)), RecoveredSlot::Empty);
        // Misdirected: a valid prepare of another slot is not this slot's.
        assert_eq!(recover_slot(&layout, 4, CLUSTER, Some(&h3.encode()), Some(&p3)), RecoveredSlot::Empty);
    }
}
