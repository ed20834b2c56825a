//! `GroupIo`: the `Io` one consensus group sees on a shard that hosts many. It passes every ask
//! through and marks each I/O token with the group's slot (bits 40..56), so that the shard can
//! hand each completion back to the group that asked for it, and counts the group's I/O in
//! flight (a closed group's files are removed only once none of its writes can land after).

use vireo_io::{Completion, FileId, Instant, Io, Namespace, Peer, Token};

const SLOT_SHIFT: u32 = 40;
const SLOT_MASK: u64 = 0xffff << SLOT_SHIFT;

/// Slots a shard hands out to its groups (one per group it hosts, never reused while a
/// completion of the old owner may still arrive: the shard counts them up and wraps).
pub const SLOTS_MAX: u32 = 1 << 16;

pub struct GroupIo<'a, I: Io> {
    io: &'a mut I,
    slot: u16,
    /// The group's I/O requests whose completions have not come back yet.
    in_flight: &'a mut u32,
}

impl<'a, I: Io> GroupIo<'a, I> {
    pub fn new(io: &'a mut I, slot: u16, in_flight: &'a mut u32) -> GroupIo<'a, I> {
        GroupIo { io, slot, in_flight }
    }

    fn mark(&mut self, token: Token) -> Token {
        assert_eq!(token.0 & SLOT_MASK, 0, "token {:#x} uses the slot bits", token.0);
        *self.in_flight += 1;
        Token(token.0 | (self.slot as u64) << SLOT_SHIFT)
    }
}

/// The slot a completion's token was marked with, and the completion as its group issued it.
pub fn unmark(completion: Completion) -> (u16, Completion) {
    let token = completion.token();
    let slot = ((token.0 & SLOT_MASK) >> SLOT_SHIFT) as u16;
    let original = Token(token.0 & !SLOT_MASK);
    let completion = match completion {
        Completion::Read { result, .. } => Completion::Read { token: original, result },
        Completion::Write { result, .. } => Completion::Write { token: original, result },
        Completion::Sync { result, .. } => Completion::Sync { token: original, result },
        Completion::Truncate { result, .. } => Completion::Truncate { token: original, result },
        Completion::Remove { result, .. } => Completion::Remove { token: original, result },
        Completion::List { result, .. } => Completion::List { token: original, result },
    };
    (slot, completion)
}

impl<I: Io> Io for GroupIo<'_, I> {
    fn now(&self) -> Instant {
        self.io.now()
    }
    fn send(&mut self, to: Peer, message: Vec<u8>) {
        self.io.send(to, message)
    }
    fn send_frame(&mut self, to: Peer, frame: vireo_io::OutFrame) {
        self.io.send_frame(to, frame)
    }
    fn read(&mut self, file: FileId, offset: u64, len: usize, token: Token) {
        let token = self.mark(token);
        self.io.read(file, offset, len, token)
    }
    fn write(&mut self, file: FileId, offset: u64, bytes: vireo_io::Bytes, token: Token) {
        let token = self.mark(token);
        self.io.write(file, offset, bytes, token)
    }
    fn write_vectored(&mut self, file: FileId, offset: u64, parts: [vireo_io::Bytes; 2], token: Token) {
        let token = self.mark(token);
        self.io.write_vectored(file, offset, parts, token)
    }
    fn sync(&mut self, file: FileId, token: Token) {
        let token = self.mark(token);
        self.io.sync(file, token)
    }
    fn truncate(&mut self, file: FileId, len: u64, token: Token) {
        let token = self.mark(token);
        self.io.truncate(file, len, token)
    }
    fn remove(&mut self, file: FileId, token: Token) {
        let token = self.mark(token);
        self.io.remove(file, token)
    }
    fn list(&mut self, namespace: Namespace, token: Token) {
        let token = self.mark(token);
        self.io.list(namespace, token)
    }
    fn random(&mut self) -> u64 {
        self.io.random()
    }
    fn disk_space(&self) -> Option<vireo_io::DiskSpace> {
        self.io.disk_space()
    }
}
