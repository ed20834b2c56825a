//! The checksum a prepare's header carries over its body (`checksum_body`), and its check.
//!
//! A prepare's body is request frames back to back (`request`). A send's message batch is hashed
//! as the primary stamps it: each message's checksum, then the batch's over those (`batch`).
//! Hashing the batch again, whole, to seal the prepare would be a second pass over every payload
//! byte. So a request whose header has `batch_at` set vouches for its batch itself: the prepare's
//! checksum covers the body with that batch's messages left out, and the batch's 256-byte header
//! stands in for them.
//!
//! # Why every byte is still vouched for, on the wire and in the WAL
//!
//! The chain is:
//! - the prepare's header checksum covers `checksum_body`;
//! - `checksum_body` covers every byte outside the vouched messages, among them each request's
//!   `batch_at` (where its batch is) and each vouched batch's header (its `batch_length` and
//!   `batch_checksum`);
//! - the batch checksum covers each message's checksum, in order;
//! - each message's checksum covers the rest of its frame, its payload and its user headers.
//!
//! A reader checks the whole chain (`valid`): the xxh3-128 of the rest, and `batch::validate` of
//! every vouched batch. That is one pass over every payload byte, as checking a plain xxh3-128 of
//! the body was. A flipped bit fails one of the checks:
//! - in a message, its 64-bit checksum;
//! - in a frame's checksum field, the batch checksum;
//! - anywhere else, the 128-bit one.
//!
//! What changes is the strength against random damage inside one message: 64 bits instead of 128,
//! a miss once in 2^64 damaged messages. A WAL slot holds the same bytes, or, elided, the rest of
//! the body while the segment log holds the batches; put back together, the body is checked the
//! same way. So the WAL is protected as the wire is.
//!
//! A body without vouched batches (every other operation, a send whose batch did not stamp, or a
//! body that is not request frames) is checksummed whole: exactly `checksum128(body)`. Prepares
//! sealed before `batch_at` existed verify unchanged.

use crate::header::{Command, Header};
use vireo_storage::batch::{self, BatchHeader, BATCH_HEADER_SIZE};
use vireo_storage::checksum::{checksum128, Checksum128};
use vireo_storage::layout::HEADER_SIZE;

/// The `checksum_body` of a prepare over `body`, as its primary seals it: the vouched batches'
/// own checksums are taken as written (the primary's `stamp` wrote them).
pub fn checksum(body: &[u8]) -> u128 {
    walk(body, false).expect("a walk that validates nothing fails nothing")
}

/// Whether `body` is the body a prepare's `checksum_body` vouches for: the checksum over the
/// body without its vouched batches' messages, and every vouched batch checked whole.
pub fn valid(body: &[u8], checksum_body: u128) -> bool {
    walk(body, true) == Some(checksum_body)
}

/// The checksum; `None` when `validate` finds a vouched batch whose own checksums fail.
fn walk(body: &[u8], validate: bool) -> Option<u128> {
    let mut hasher = Checksum128::new();
    // Body bytes before this one have been fed to the hasher.
    let mut hashed_to = 0usize;
    let mut at = 0usize;
    while at < body.len() {
        let Some((size, batch_at)) = request_frame(&body[at..]) else { return Some(checksum128(body)) };
        if let Some(batch_at) = batch_at {
            let (start, end) = (at + HEADER_SIZE + batch_at, at + size);
            if !whole_batch(&body[start..end]) {
                return Some(checksum128(body));
            }
            if validate && batch::validate(&body[start..end]).is_err() {
                return None;
            }
            hasher.update(&body[hashed_to..start + BATCH_HEADER_SIZE]);
            hashed_to = end;
        }
        at += size;
    }
    if hashed_to == 0 {
        // Nothing vouched for: the plain checksum, in one call.
        return Some(checksum128(body));
    }
    hasher.update(&body[hashed_to..]);
    Some(hasher.digest())
}

/// The size of the request frame `bytes` starts with, and where in its body a vouched batch
/// starts; `None` when the bytes are not a request frame that fits.
fn request_frame(bytes: &[u8]) -> Option<(usize, Option<usize>)> {
    let request = Header::decode(bytes).ok()?;
    let size = request.size as usize;
    if request.command != Command::Request || size < HEADER_SIZE || size > bytes.len() {
        return None;
    }
    let batch_at = match request.batch_at as usize {
        0 => None,
        batch_at if batch_at <= size - HEADER_SIZE => Some(batch_at),
        _ => return None,
    };
    Some((size, batch_at))
}

/// Whether `bytes` hold exactly one batch by its header (its checksums are not checked here).
fn whole_batch(bytes: &[u8]) -> bool {
    BatchHeader::decode(bytes).is_ok_and(|header| header.batch_length == bytes.len() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use vireo_storage::batch::BatchBuilder;

    /// A request frame of `head` bytes then, with `batch`, a batch of `messages` stamped (and
    /// vouched for, `batch_at` set) when `stamped`.
    fn request(head: &[u8], messages: &[Vec<u8>], stamped: bool) -> Vec<u8> {
        let mut body = head.to_vec();
        if !messages.is_empty() {
            let mut builder = BatchBuilder::new();
            for (index, payload) in messages.iter().enumerate() {
                builder.push(index as u128 + 1, payload, &[]);
            }
            let mut batch = builder.finish(0);
            if stamped {
                batch::stamp(&mut batch, 3, 100, 1_000).expect("stamps");
            }
            body.extend_from_slice(&batch);
        }
        let mut header = Header::new(Command::Request, 1, 0);
        header.operation = 160;
        header.request = 7;
        header.batch_at = if stamped && !messages.is_empty() { head.len() as u32 } else { 0 };
        header.seal_header_only(body.len());
        let mut frame = header.encode().to_vec();
        frame.extend_from_slice(&body);
        frame
    }

    /// A request's head bytes, its batch's message payloads, and whether the batch is stamped.
    type RequestParts = (Vec<u8>, Vec<Vec<u8>>, bool);

    fn body_of(requests: &[RequestParts]) -> Vec<u8> {
        requests.iter().flat_map(|(head, messages, stamped)| request(head, messages, *stamped)).collect()
    }

    fn arb_requests() -> impl Strategy<Value = Vec<RequestParts>> {
        let message = proptest::collection::vec(any::<u8>(), 0..300);
        let request =
            (proptest::collection::vec(any::<u8>(), 0..40), proptest::collection::vec(message, 0..6), any::<bool>());
        proptest::collection::vec(request, 0..4)
    }

    #[test]
    fn a_body_without_vouched_batches_has_the_plain_checksum() {
        let body = body_of(&[(vec![1; 28], vec![vec![5; 100]; 3], false), (vec![2; 10], vec![], true)]);
        assert_eq!(checksum(&body), checksum128(&body));
        assert!(valid(&body, checksum128(&body)));
        // Not request frames at all (a test's prepare, a damaged body): plain too.
        assert_eq!(checksum(b"not a request"), checksum128(b"not a request"));
    }

    #[test]
    fn a_vouched_batch_is_hashed_once_to_seal_and_once_to_check() {
        let messages = vec![vec![9u8; 1000]; 50];
        let body = body_of(&[(vec![1; 28], messages, true)]);
        let before = vireo_storage::checksum::bytes_hashed();
        let sealed = checksum(&body);
        let sealing = vireo_storage::checksum::bytes_hashed() - before;
        assert!(sealing < 1024, "sealing hashed {sealing} bytes of a {} byte body", body.len());
        assert_ne!(sealed, checksum128(&body), "the batch's messages are left out");
        let before = vireo_storage::checksum::bytes_hashed();
        assert!(valid(&body, sealed));
        let checking = vireo_storage::checksum::bytes_hashed() - before;
        assert!(checking as usize <= body.len(), "checking hashed {checking} bytes of {}", body.len());
    }

    #[test]
    fn a_vouched_batch_that_fails_its_own_checksums_fails_the_body() {
        // batch_at says vouched, but the batch was never stamped: its checksums are zero.
        let mut body = body_of(&[(vec![1; 28], vec![vec![4; 64]; 2], true)]);
        let sealed = checksum(&body);
        assert!(valid(&body, sealed));
        let payload_at = HEADER_SIZE + 28 + BATCH_HEADER_SIZE + 48;
        body[payload_at] ^= 1;
        assert_eq!(checksum(&body), sealed, "the seal does not read the messages");
        assert!(!valid(&body, sealed), "the check does");
    }

    proptest! {
        /// The checksum and its check agree on every body the primary seals, and no single
        /// flipped bit anywhere in it escapes the check.
        #[test]
        fn a_sealed_body_is_valid_and_no_flipped_bit_escapes(requests in arb_requests(), flip in any::<prop::sample::Index>(), bit in 0u8..8) {
            let body = body_of(&requests);
            let sealed = checksum(&body);
            prop_assert!(valid(&body, sealed));
            if !body.is_empty() {
                let mut flipped = body.clone();
                flipped[flip.index(body.len())] ^= 1 << bit;
                prop_assert!(!valid(&flipped, sealed));
            }
        }

        /// Any bytes at all: the walk never panics, and the check never takes a body the seal
        /// would not give the same checksum for.
        #[test]
        fn any_bytes_walk_without_panic(bytes in proptest::collection::vec(any::<u8>(), 0..2000)) {
            let sealed = checksum(&bytes);
            prop_assert!(valid(&bytes, sealed) || walk(&bytes, true).is_none());
        }
    }
}
