//! `OutFrame`: a frame going out to a client in parts, so that bytes another buffer already holds
//! (a poll's batches, slices of what a read brought in) reach the socket without being copied
//! into one buffer first. Its head is the frame's own header and the small fields the node writes;
//! its tail the slices that follow, in order. The driver writes the parts one after the other;
//! whoever needs the frame whole (a gateway translating it, the simulator's digest) joins it.
//!
//! Invariant: the frame's bytes are exactly `head` followed by each of `tail`, in order.

use crate::Bytes;

/// Slices one frame's tail may carry: a poll's reply holds a few dozen at most (its large batches
/// sliced, its small ones gathered between them); past this, the tail is joined into the head
/// (correct, only slower): a bound on the parts a driver writes one by one.
pub const TAIL_PARTS_MAX: usize = 1024;

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OutFrame {
    pub head: Vec<u8>,
    pub tail: Vec<Bytes>,
}

impl OutFrame {
    /// A frame of `head` and the slices of `tail`. A tail longer than `TAIL_PARTS_MAX` is
    /// joined into the head.
    pub fn new(mut head: Vec<u8>, tail: Vec<Bytes>) -> OutFrame {
        if tail.len() > TAIL_PARTS_MAX {
            head.reserve(tail.iter().map(Bytes::len).sum());
            for part in &tail {
                head.extend_from_slice(part);
            }
            return OutFrame { head, tail: Vec::new() };
        }
        OutFrame { head, tail }
    }

    /// The frame's length in bytes.
    pub fn len(&self) -> usize {
        self.head.len() + self.tail.iter().map(Bytes::len).sum::<usize>()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The frame's parts in order, empty ones left out.
    pub fn parts(&self) -> impl Iterator<Item = &[u8]> {
        std::iter::once(&self.head[..]).chain(self.tail.iter().map(|part| &part[..])).filter(|part| !part.is_empty())
    }

    /// The frame's bytes from `at` on, in parts: what is left to write after a write that took
    /// `at` bytes.
    pub fn parts_from(&self, at: usize) -> impl Iterator<Item = &[u8]> {
        let mut skip = at;
        self.parts().filter_map(move |part| {
            if skip >= part.len() {
                skip -= part.len();
                return None;
            }
            let rest = &part[skip..];
            skip = 0;
            Some(rest)
        })
    }

    /// The frame in one buffer: the head as it is when there is no tail, else a copy of the
    /// parts (for a reader that needs it whole).
    pub fn into_whole(self) -> Vec<u8> {
        if self.tail.is_empty() {
            return self.head;
        }
        let mut whole = Vec::with_capacity(self.len());
        for part in self.parts() {
            whole.extend_from_slice(part);
        }
        whole
    }
}

impl From<Vec<u8>> for OutFrame {
    fn from(head: Vec<u8>) -> OutFrame {
        OutFrame { head, tail: Vec::new() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Whatever its parts, a frame is their bytes in order, and its length theirs.
        #[test]
        fn a_frame_is_its_parts_in_order(
            head in proptest::collection::vec(any::<u8>(), 0..64),
            tail in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..64), 0..8),
        ) {
            let expected: Vec<u8> = head.iter().copied().chain(tail.iter().flatten().copied()).collect();
            let frame = OutFrame::new(head, tail.into_iter().map(Bytes::from).collect());
            prop_assert_eq!(frame.len(), expected.len());
            prop_assert_eq!(frame.parts().flatten().copied().collect::<Vec<u8>>(), expected.clone());
            prop_assert!(frame.parts().all(|part| !part.is_empty()));
            for at in 0..=expected.len() + 1 {
                let rest: Vec<u8> = frame.parts_from(at).flatten().copied().collect();
                prop_assert_eq!(&rest[..], &expected[at.min(expected.len())..]);
                prop_assert!(frame.parts_from(at).all(|part| !part.is_empty()));
            }
            prop_assert_eq!(frame.into_whole(), expected);
        }
    }

    #[test]
    fn a_tail_past_its_bound_is_joined_into_the_head() {
        let tail: Vec<Bytes> = (0..=TAIL_PARTS_MAX).map(|index| Bytes::from(vec![index as u8; 3])).collect();
        let frame = OutFrame::new(vec![9; 2], tail);
        assert!(frame.tail.is_empty());
        assert_eq!(frame.len(), 2 + 3 * (TAIL_PARTS_MAX + 1));
        assert_eq!(frame.head[2..5], [0, 0, 0]);
    }

    #[test]
    fn a_frame_without_a_tail_is_its_head_unmoved() {
        let head = vec![1, 2, 3];
        let pointer = head.as_ptr();
        let whole = OutFrame::from(head).into_whole();
        assert_eq!(whole.as_ptr(), pointer);
    }
}
