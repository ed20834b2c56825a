//! Elided prepare bodies: how a WAL slot holds a prepare whose bulk its external log already
//! stores at its final place (a partition's stamped batches, in its segment log), so that those
//! bytes are written once.
//!
//! The slot holds the prepare's header (unchanged: its `size` and `checksum_body` are the whole
//! body's) and, after it, this encoding: the spans left out (where in the body, how long, and at
//! which log offset the external log holds them) and the rest of the body. Recovery puts the body
//! back together from the external log and checks it against the header's `checksum_body`: a
//! span the log lost or holds differently leaves the prepare without its body, as a damaged slot
//! would, and it is repaired from a peer.
//!
//! Layout, little-endian: `magic u64 | checksum u64 | rest_len u32 | body_len u32 | span_count u32
//! | span_count x (at u32, len u32, offset u64) | residual`, where `checksum` covers the `rest_len`
//! bytes after it.

use vireo_storage::checksum::checksum64;

const MAGIC: u64 = u64::from_le_bytes(*b"vireo-el");
const FIXED: usize = 8 + 8 + 4 + 4 + 4;
/// What `ElidedBody::encoded_len` needs to see of an encoding.
pub const ENCODED_HEAD: usize = 20;
const SPAN: usize = 4 + 4 + 8;

/// A part of a prepare's body that its external log stores: `len` bytes at `at` in the body,
/// held by the log from `offset` on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExternalSpan {
    pub at: u32,
    pub len: u32,
    pub offset: u64,
}

/// A prepare body with its external spans left out, as a WAL slot holds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ElidedBody {
    pub body_len: u32,
    /// In body order, not overlapping.
    pub spans: Vec<ExternalSpan>,
    /// The body without the spans.
    pub residual: Vec<u8>,
}

impl ElidedBody {
    /// `body` with `spans` (in order, inside it, not overlapping) left out.
    pub fn of(body: &[u8], spans: &[ExternalSpan]) -> ElidedBody {
        let mut residual = Vec::with_capacity(body.len() - spans.iter().map(|span| span.len as usize).sum::<usize>());
        let mut at = 0usize;
        for span in spans {
            let start = span.at as usize;
            assert!(start >= at && start + span.len as usize <= body.len(), "spans in order, inside the body");
            residual.extend_from_slice(&body[at..start]);
            at = start + span.len as usize;
        }
        residual.extend_from_slice(&body[at..]);
        ElidedBody { body_len: body.len() as u32, spans: spans.to_vec(), residual }
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut bytes = Vec::with_capacity(FIXED + SPAN * self.spans.len() + self.residual.len());
        bytes.extend_from_slice(&MAGIC.to_le_bytes());
        bytes.extend_from_slice(&0u64.to_le_bytes());
        let rest_len = (4 + 4 + SPAN * self.spans.len() + self.residual.len()) as u32;
        bytes.extend_from_slice(&rest_len.to_le_bytes());
        bytes.extend_from_slice(&self.body_len.to_le_bytes());
        bytes.extend_from_slice(&(self.spans.len() as u32).to_le_bytes());
        for span in &self.spans {
            bytes.extend_from_slice(&span.at.to_le_bytes());
            bytes.extend_from_slice(&span.len.to_le_bytes());
            bytes.extend_from_slice(&span.offset.to_le_bytes());
        }
        bytes.extend_from_slice(&self.residual);
        let checksum = checksum64(&bytes[20..]);
        bytes[8..16].copy_from_slice(&checksum.to_le_bytes());
        bytes
    }

    /// Bytes an elided body's encoding that starts `head` takes in all, read off its first
    /// `ENCODED_HEAD` bytes; `None` when `head` does not start one.
    pub fn encoded_len(head: &[u8]) -> Option<usize> {
        if head.get(0..8)? != MAGIC.to_le_bytes() {
            return None;
        }
        Some(20 + u32::from_le_bytes(head.get(16..20)?.try_into().ok()?) as usize)
    }

    /// The elided body `bytes` start with (what follows it is ignored), if they hold a whole one.
    pub fn decode(bytes: &[u8]) -> Option<ElidedBody> {
        let u32_at = |at: usize| Some(u32::from_le_bytes(bytes.get(at..at + 4)?.try_into().ok()?));
        let u64_at = |at: usize| Some(u64::from_le_bytes(bytes.get(at..at + 8)?.try_into().ok()?));
        if u64_at(0)? != MAGIC {
            return None;
        }
        let rest_len = u32_at(16)? as usize;
        let rest = bytes.get(20..20 + rest_len)?;
        if checksum64(rest) != u64_at(8)? {
            return None;
        }
        let body_len = u32_at(20)?;
        let count = u32_at(24)? as usize;
        let spans_end = FIXED.checked_add(count.checked_mul(SPAN)?)?;
        if spans_end > 20 + rest_len {
            return None;
        }
        let spans: Vec<ExternalSpan> = (0..count)
            .map(|index| {
                let at = FIXED + index * SPAN;
                ExternalSpan { at: u32_at(at).unwrap(), len: u32_at(at + 4).unwrap(), offset: u64_at(at + 8).unwrap() }
            })
            .collect();
        let residual = bytes[spans_end..20 + rest_len].to_vec();
        let mut at = 0u64;
        for span in &spans {
            if (span.at as u64) < at {
                return None;
            }
            at = span.at as u64 + span.len as u64;
        }
        let elided: u64 = spans.iter().map(|span| span.len as u64).sum();
        if at > body_len as u64 || residual.len() as u64 + elided != body_len as u64 {
            return None;
        }
        Some(ElidedBody { body_len, spans, residual })
    }

    /// The whole body again, each span taken from the external log by `held(offset, len)`;
    /// `None` if the log lacks one (the caller checks the result against the header).
    pub fn restore(&self, held: impl FnMut(u64, u32) -> Option<Vec<u8>>) -> Option<Vec<u8>> {
        let (body, gaps) = self.restore_with_gaps(held);
        gaps.is_empty().then_some(body)
    }

    /// The body as far as the external log gives it back: a span it lacks is left zeroed, and
    /// its index returned (in order). A single replica, with no peer to take a prepare from,
    /// applies such a body with those spans lost (`StateMachine::span_lost`).
    pub fn restore_with_gaps(&self, mut held: impl FnMut(u64, u32) -> Option<Vec<u8>>) -> (Vec<u8>, Vec<usize>) {
        let mut body = Vec::with_capacity(self.body_len as usize);
        let mut gaps = Vec::new();
        let mut residual = 0usize;
        for (index, span) in self.spans.iter().enumerate() {
            let before = span.at as usize - body.len();
            body.extend_from_slice(&self.residual[residual..residual + before]);
            residual += before;
            match held(span.offset, span.len) {
                Some(bytes) if bytes.len() == span.len as usize => body.extend_from_slice(&bytes),
                _ => {
                    body.resize(body.len() + span.len as usize, 0);
                    gaps.push(index);
                }
            }
        }
        body.extend_from_slice(&self.residual[residual..]);
        assert_eq!(body.len(), self.body_len as usize, "decode checked the spans against the body's length");
        (body, gaps)
    }

    /// The log offset where span `index` ends: where the next span starts, or the prepare's
    /// `cursor` for the last (a prepare's spans hold its batches one after another up to its
    /// cursor; `StateMachine::external_spans`).
    pub fn span_end(&self, index: usize, cursor: u64) -> u64 {
        self.spans.get(index + 1).map_or(cursor, |next| next.offset)
    }

    /// The log offset the first span starts at.
    pub fn first_offset(&self) -> Option<u64> {
        self.spans.first().map(|span| span.offset)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn spans_in(len: usize, cuts: &[(usize, usize)]) -> Vec<ExternalSpan> {
        let mut spans = Vec::new();
        let mut at = 0usize;
        for (index, (gap, span_len)) in cuts.iter().enumerate() {
            let start = at + gap;
            let end = start + span_len;
            if end > len {
                break;
            }
            spans.push(ExternalSpan { at: start as u32, len: *span_len as u32, offset: 100 * index as u64 });
            at = end;
        }
        spans
    }

    proptest! {
        #[test]
        fn a_body_comes_back_whole_from_its_spans(
            body in proptest::collection::vec(any::<u8>(), 0..2000),
            cuts in proptest::collection::vec((0usize..300, 0usize..300), 0..8),
        ) {
            let spans = spans_in(body.len(), &cuts);
            let elided = ElidedBody::of(&body, &spans);
            let decoded = ElidedBody::decode(&elided.encode()).expect("decodes");
            prop_assert_eq!(&decoded, &elided);
            let restored = decoded.restore(|offset, len| {
                let span = spans.iter().find(|span| span.offset == offset)?;
                Some(body[span.at as usize..(span.at + len) as usize].to_vec())
            });
            prop_assert_eq!(restored, Some(body.clone()));
            // A span the log lacks leaves no body, or a body with that span zeroed.
            if !spans.is_empty() {
                prop_assert_eq!(decoded.restore(|_, _| None), None);
                let lost = spans[spans.len() / 2];
                let (holed, gaps) = decoded.restore_with_gaps(|offset, len| {
                    let span = spans.iter().find(|span| span.offset == offset && offset != lost.offset)?;
                    Some(body[span.at as usize..(span.at + len) as usize].to_vec())
                });
                prop_assert_eq!(gaps, vec![spans.len() / 2]);
                let mut expected = body.clone();
                expected[lost.at as usize..(lost.at + lost.len) as usize].fill(0);
                prop_assert_eq!(holed, expected);
            }
        }

        #[test]
        fn damaged_bytes_never_decode_as_another_body(
            body in proptest::collection::vec(any::<u8>(), 1..500),
            flip in any::<usize>(),
        ) {
            let spans = spans_in(body.len(), &[(1, body.len() / 2)]);
            let mut bytes = ElidedBody::of(&body, &spans).encode();
            let bit = flip % (bytes.len() * 8);
            bytes[bit / 8] ^= 1 << (bit % 8);
            prop_assert_eq!(ElidedBody::decode(&bytes), None);
        }
    }

    #[test]
    fn a_whole_prepare_is_not_an_elided_one() {
        assert_eq!(ElidedBody::decode(b"vireo-e"), None);
        assert_eq!(ElidedBody::decode(&[0u8; 64]), None);
    }
}
