//! Client requests as a primary batches them into one prepare: the prepare's body is the request
//! frames, whole and back to back (`[256-byte request header][body]` each), in the order the
//! primary admitted them.

use crate::header::{Command, Header};
use vireo_storage::layout::HEADER_SIZE;

/// Operations the replica itself interprets; everything else goes to the state machine.
pub const OPERATION_REGISTER: u8 = 1;
/// Ends a session (the node sends it for a client whose connection closed): its entry leaves the
/// client table, freeing the slot. Numbered in the session like any request, so a copy that
/// arrives late finds no session and changes nothing. No client sends it (the node refuses it).
pub const OPERATION_UNREGISTER: u8 = 4;

/// One request inside a prepare body.
#[derive(Clone, Copy, Debug)]
pub struct BatchedRequest<'a> {
    pub header: Header,
    pub body: &'a [u8],
}

/// Whether a prepare body from a peer is `count` whole request frames, back to back: checked
/// before it enters the journal, so that `batched_requests` never meets a malformed one.
pub fn valid_batch(prepare_body: &[u8], count: u32) -> bool {
    let mut offset = 0usize;
    let mut seen = 0u32;
    while offset < prepare_body.len() {
        let Ok(header) = Header::decode(&prepare_body[offset..]) else { return false };
        let size = header.size as usize;
        if header.command != Command::Request || size < HEADER_SIZE || size > prepare_body.len() - offset {
            return false;
        }
        offset += size;
        seen += 1;
    }
    seen == count
}

/// Iterates over the requests of a prepare body. The primary validated every frame before
/// batching it, so a malformed body here is a broken invariant, not bad input.
pub fn batched_requests(prepare_body: &[u8]) -> impl Iterator<Item = BatchedRequest<'_>> {
    let mut offset = 0usize;
    std::iter::from_fn(move || {
        if offset == prepare_body.len() {
            return None;
        }
        let header = Header::decode(&prepare_body[offset..]).expect("batched request header");
        assert_eq!(header.command, Command::Request);
        let end = offset + header.size as usize;
        let body = &prepare_body[offset + HEADER_SIZE..end];
        offset = end;
        Some(BatchedRequest { header, body })
    })
}
