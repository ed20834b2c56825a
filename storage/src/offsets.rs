//! Server-side consumer offsets of one partition: `offsets/consumers/{id}` and
//! `offsets/groups/{id}` in the partition's directory, as a sans-IO state machine.
//!
//! Each file holds two 32-byte slots: magic u32 "COFF", reserved u32, sequence u64, offset u64,
//! xxh3-64 of the 24 bytes before it. A store writes the slot its sequence picks (sequence % 2),
//! syncs, and only then reports the offset stored; loading takes the valid slot with the higher
//! sequence. A crash tears at most the slot being written, and the other still holds the offset
//! stored before, so a stored offset is never lost and a half-written one is never believed.
//! Stores to one consumer are serialised; one that arrives while another is in flight replaces any
//! store already waiting (the newest offset is the one that matters).

use std::collections::{BTreeMap, VecDeque};

use vireo_io::{Completion, FileId, FileKind, Io, IoError, Namespace, Token};

use crate::checksum::checksum64;

const MAGIC: u32 = u32::from_le_bytes(*b"COFF");
const SLOT_SIZE: usize = 32;
/// Tokens of consumer-offset stores carry this tag in their top byte.
pub const OFFSETS_TOKEN_TAG: u64 = 0x21;
const TOKEN_OWNER_SHIFT: u32 = 40;

/// The owner a token was issued for, when it is a consumer-offset store's.
pub fn token_owner(token: Token) -> Option<u16> {
    (token.0 >> 56 == OFFSETS_TOKEN_TAG).then_some(((token.0 >> TOKEN_OWNER_SHIFT) & 0xffff) as u16)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Consumer {
    Consumer(u32),
    Group(u32),
}

impl Consumer {
    fn file_kind(self) -> FileKind {
        match self {
            Consumer::Consumer(id) => FileKind::ConsumerOffset(id),
            Consumer::Group(id) => FileKind::GroupOffset(id),
        }
    }
}

fn encode_slot(sequence: u64, offset: u64) -> Vec<u8> {
    let mut slot = Vec::with_capacity(SLOT_SIZE);
    slot.extend_from_slice(&MAGIC.to_le_bytes());
    slot.extend_from_slice(&0u32.to_le_bytes());
    slot.extend_from_slice(&sequence.to_le_bytes());
    slot.extend_from_slice(&offset.to_le_bytes());
    let checksum = checksum64(&slot);
    slot.extend_from_slice(&checksum.to_le_bytes());
    slot
}

/// (sequence, offset) of the newer valid slot of a file's bytes.
fn decode_file(bytes: &[u8]) -> Option<(u64, u64)> {
    bytes
        .chunks_exact(SLOT_SIZE)
        .take(2)
        .filter_map(|slot| {
            let u64_at = |at: usize| u64::from_le_bytes(slot[at..at + 8].try_into().unwrap());
            let valid = slot[0..4] == MAGIC.to_le_bytes() && u64_at(24) == checksum64(&slot[..24]);
            valid.then(|| (u64_at(8), u64_at(16)))
        })
        .max()
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum OffsetsError {
    #[error("the offsets are not loaded")]
    NotLoaded,
    #[error("too many consumers on this partition")]
    TooMany,
}

#[derive(Debug, PartialEq, Eq)]
pub enum OffsetsEvent {
    /// Every stored offset is loaded (the count of consumers and groups found).
    Loaded { consumers: usize },
    /// The directory or a file could not be read: nothing is loaded and stores are refused, since
    /// storing over an offset not read could go back below it. Load again.
    LoadFailed { error: IoError },
    /// The offset is durable.
    Stored { consumer: Consumer, offset: u64 },
    /// The store failed. If the write failed, the previously stored offset still holds; if the
    /// sync failed, either may be on disk after a crash (what fsync's failure means).
    Failed { consumer: Consumer, offset: u64, error: IoError },
}

#[derive(Debug)]
enum Op {
    List,
    Load(Consumer),
    Write(Consumer),
    Sync(Consumer),
}

#[derive(Default, Debug)]
struct Entry {
    /// The durable offset and the sequence of its slot.
    stored: Option<(u64, u64)>,
    /// The file exists but neither slot is valid: the next store writes both slots, so that no
    /// leftover with a higher sequence can outrank it.
    rewrite_both: bool,
    /// The offset being written, and the one waiting behind it.
    in_flight: Option<u64>,
    waiting: Option<u64>,
}

pub struct ConsumerOffsets {
    namespace: Namespace,
    owner: u16,
    consumers_max: usize,
    loaded: bool,
    loads_outstanding: usize,
    load_error: Option<IoError>,
    entries: BTreeMap<Consumer, Entry>,
    ops: BTreeMap<u64, Op>,
    token_next: u64,
    events: VecDeque<OffsetsEvent>,
}

impl ConsumerOffsets {
    pub fn load(io: &mut impl Io, namespace: Namespace, owner: u16, consumers_max: usize) -> ConsumerOffsets {
        let mut offsets = ConsumerOffsets {
            namespace,
            owner,
            consumers_max,
            loaded: false,
            loads_outstanding: 0,
            load_error: None,
            entries: BTreeMap::new(),
            ops: BTreeMap::new(),
            token_next: 0,
            events: VecDeque::new(),
        };
        let token = offsets.token(Op::List);
        io.list(namespace, token);
        offsets
    }

    fn token(&mut self, op: Op) -> Token {
        let sequence = self.token_next & ((1 << TOKEN_OWNER_SHIFT) - 1);
        self.token_next += 1;
        self.ops.insert(sequence, op);
        Token((OFFSETS_TOKEN_TAG << 56) | ((self.owner as u64) << TOKEN_OWNER_SHIFT) | sequence)
    }

    fn file(&self, consumer: Consumer) -> FileId {
        FileId::new(self.namespace, consumer.file_kind())
    }

    pub fn is_loaded(&self) -> bool {
        self.loaded
    }

    /// The durable offset of a consumer, if it ever stored one.
    pub fn get(&self, consumer: Consumer) -> Option<u64> {
        self.entries.get(&consumer).and_then(|entry| entry.stored.map(|(_, offset)| offset))
    }

    pub fn poll_event(&mut self) -> Option<OffsetsEvent> {
        self.events.pop_front()
    }

    /// Stores `offset` for `consumer`; `Stored` reports it durable.
    pub fn store(&mut self, io: &mut impl Io, consumer: Consumer, offset: u64) -> Result<(), OffsetsError> {
        if !self.loaded {
            return Err(OffsetsError::NotLoaded);
        }
        if !self.entries.contains_key(&consumer) && self.entries.len() >= self.consumers_max {
            return Err(OffsetsError::TooMany);
        }
        let entry = self.entries.entry(consumer).or_default();
        if entry.in_flight.is_some() {
            entry.waiting = Some(offset);
            return Ok(());
        }
        self.write(io, consumer, offset);
        Ok(())
    }

    fn write(&mut self, io: &mut impl Io, consumer: Consumer, offset: u64) {
        let entry = self.entries.get_mut(&consumer).expect("entry");
        let sequence = entry.stored.map_or(1, |(sequence, _)| sequence + 1);
        entry.in_flight = Some(offset);
        let (at, record) = if entry.rewrite_both {
            let mut both = encode_slot(sequence, offset);
            both.extend(encode_slot(sequence, offset));
            (0, both)
        } else {
            ((sequence % 2) * SLOT_SIZE as u64, encode_slot(sequence, offset))
        };
        let token = self.token(Op::Write(consumer));
        io.write(self.file(consumer), at, record.into(), token);
    }

    pub fn on_completion(&mut self, io: &mut impl Io, completion: Completion) {
        let token = completion.token();
        assert_eq!(token_owner(token), Some(self.owner), "completion for another owner");
        let op = self.ops.remove(&(token.0 & ((1 << TOKEN_OWNER_SHIFT) - 1))).expect("op in flight");
        match (op, completion) {
            (Op::List, Completion::List { result, .. }) => {
                let files = match result {
                    Ok(files) => files,
                    Err(error) => {
                        self.events.push_back(OffsetsEvent::LoadFailed { error });
                        return;
                    }
                };
                let consumers: Vec<Consumer> = files
                    .into_iter()
                    .filter_map(|(kind, _)| match kind {
                        FileKind::ConsumerOffset(id) => Some(Consumer::Consumer(id)),
                        FileKind::GroupOffset(id) => Some(Consumer::Group(id)),
                        _ => None,
                    })
                    .collect();
                self.loads_outstanding = consumers.len();
                for consumer in consumers {
                    let token = self.token(Op::Load(consumer));
                    io.read(self.file(consumer), 0, 2 * SLOT_SIZE, token);
                }
                self.check_loaded();
            }
            (Op::Load(consumer), Completion::Read { result, .. }) => {
                match result {
                    Ok(bytes) => {
                        let entry = self.entries.entry(consumer).or_default();
                        match decode_file(&bytes) {
                            Some(stored) => entry.stored = Some(stored),
                            // Both slots damaged: the consumer starts over, and its next store
                            // overwrites both.
                            None => entry.rewrite_both = true,
                        }
                    }
                    Err(error) => {
                        self.load_error.get_or_insert(error);
                    }
                }
                self.loads_outstanding -= 1;
                self.check_loaded();
            }
            (Op::Write(consumer), Completion::Write { result, .. }) => match result {
                Ok(()) => {
                    let token = self.token(Op::Sync(consumer));
                    io.sync(self.file(consumer), token);
                }
                Err(error) => self.finish(io, consumer, Err(error)),
            },
            (Op::Sync(consumer), Completion::Sync { result, .. }) => self.finish(io, consumer, result),
            (op, completion) => panic!("{op:?} completed as {completion:?}"),
        }
    }

    fn check_loaded(&mut self) {
        if self.loads_outstanding > 0 || self.loaded {
            return;
        }
        if let Some(error) = self.load_error {
            self.events.push_back(OffsetsEvent::LoadFailed { error });
            return;
        }
        self.loaded = true;
        self.events.push_back(OffsetsEvent::Loaded { consumers: self.entries.len() });
    }

    fn finish(&mut self, io: &mut impl Io, consumer: Consumer, result: Result<(), IoError>) {
        let entry = self.entries.get_mut(&consumer).expect("entry");
        let offset = entry.in_flight.take().expect("store in flight");
        match result {
            Ok(()) => {
                let sequence = entry.stored.map_or(1, |(sequence, _)| sequence + 1);
                entry.stored = Some((sequence, offset));
                entry.rewrite_both = false;
                self.events.push_back(OffsetsEvent::Stored { consumer, offset });
            }
            Err(error) => self.events.push_back(OffsetsEvent::Failed { consumer, offset, error }),
        }
        if let Some(next) = self.entries.get_mut(&consumer).and_then(|entry| entry.waiting.take()) {
            self.write(io, consumer, next);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_newer_valid_slot_wins_and_a_torn_slot_is_ignored() {
        let mut file = encode_slot(2, 50);
        file.extend(encode_slot(3, 70));
        assert_eq!(decode_file(&file), Some((3, 70)));
        file[40] ^= 1;
        assert_eq!(decode_file(&file), Some((2, 50)));
        assert_eq!(decode_file(&[0u8; 64]), None);
        assert_eq!(decode_file(&[]), None);
    }
}
