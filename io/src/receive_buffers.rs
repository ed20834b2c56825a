//! The buffers a driver reads client frames into, kept for the next frames once the node is done
//! with them (`NodeIo::recycle`): a large frame then costs no allocation and no zero-fill, which
//! the read would overwrite anyway.
//!
//! Bounds: at most `RECEIVE_BUFFERS_POOLED_MAX` buffers and `RECEIVE_BUFFERS_POOLED_BYTES_MAX`
//! bytes of capacity are kept; a buffer given back past either is dropped. Frames smaller than
//! `RECEIVE_BUFFER_POOLED_MIN` are neither pooled nor taken from the pool: their zero-fill costs
//! little, and they would crowd out the batches.
//!
//! Frames from peers (replica links) have a pool of their own, one per thread (`take_for_peer`):
//! a prepare's frame becomes the journal's shared body (`shared`), a `Bytes` whose last owner
//! gives the buffer back to the pool of the thread that drops it. Only the buffer's reuse is
//! pooled, never its bytes' meaning: a taken buffer is written whole before anything reads it.

/// Buffers kept at most.
pub const RECEIVE_BUFFERS_POOLED_MAX: usize = 32;
/// Capacity kept at most, over all pooled buffers.
pub const RECEIVE_BUFFERS_POOLED_BYTES_MAX: usize = 16 * 1024 * 1024;
/// The smallest frame, and buffer, the pool serves and keeps.
pub const RECEIVE_BUFFER_POOLED_MIN: usize = 64 * 1024;

#[derive(Debug, Default)]
pub struct ReceiveBuffers {
    pooled: Vec<Vec<u8>>,
    pooled_bytes: usize,
}

impl ReceiveBuffers {
    /// A buffer of exactly `size` bytes for a frame to be read into whole. A pooled one keeps its
    /// stale bytes (no zero-fill): the caller overwrites every one of them.
    pub fn take(&mut self, size: usize) -> Vec<u8> {
        if size >= RECEIVE_BUFFER_POOLED_MIN {
            if let Some(mut buffer) = self.pooled.pop() {
                self.pooled_bytes -= buffer.capacity();
                if buffer.capacity() >= size {
                    // Only the bytes past what it last held are zero-filled.
                    buffer.resize(size, 0);
                    return buffer;
                }
            }
        }
        vec![0; size]
    }

    /// A frame the node is done with: kept for a later `take` if it is large and there is room.
    pub fn give(&mut self, buffer: Vec<u8>) {
        let capacity = buffer.capacity();
        if capacity < RECEIVE_BUFFER_POOLED_MIN
            || self.pooled.len() == RECEIVE_BUFFERS_POOLED_MAX
            || self.pooled_bytes + capacity > RECEIVE_BUFFERS_POOLED_BYTES_MAX
        {
            return;
        }
        // Its bytes stay as they are: `take` cuts or grows it to exactly what it is asked for.
        self.pooled_bytes += capacity;
        self.pooled.push(buffer);
    }

    /// Buffers kept now.
    pub fn len(&self) -> usize {
        self.pooled.len()
    }

    pub fn is_empty(&self) -> bool {
        self.pooled.is_empty()
    }
}

thread_local! {
    /// The pool of the frames this thread reads from peers.
    static PEER_RECEIVE_BUFFERS: std::cell::RefCell<ReceiveBuffers> =
        std::cell::RefCell::new(ReceiveBuffers::default());
}

/// A buffer of exactly `size` bytes for a peer's frame to be read into whole (stale bytes, if
/// pooled: the caller overwrites every one).
pub fn take_for_peer(size: usize) -> Vec<u8> {
    PEER_RECEIVE_BUFFERS.with(|pool| pool.borrow_mut().take(size))
}

/// `frame`, shared, given back to this thread's peer pool when its last owner drops it.
pub fn shared(frame: Vec<u8>) -> crate::Bytes {
    if frame.capacity() < RECEIVE_BUFFER_POOLED_MIN {
        return crate::Bytes::from(frame);
    }
    crate::Bytes::from_owner(PooledFrame(frame))
}

/// A frame that goes back to a pool when dropped.
struct PooledFrame(Vec<u8>);

impl AsRef<[u8]> for PooledFrame {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

impl Drop for PooledFrame {
    fn drop(&mut self) {
        let frame = std::mem::take(&mut self.0);
        // A thread being torn down has no pool any more: the buffer is freed.
        let _ = PEER_RECEIVE_BUFFERS.try_with(|pool| pool.borrow_mut().give(frame));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_buffer_given_back_serves_the_next_large_frame_with_its_stale_bytes() {
        let mut buffers = ReceiveBuffers::default();
        let mut frame = buffers.take(100_000);
        frame.fill(7);
        let at = frame.as_ptr();
        buffers.give(frame);
        assert_eq!(buffers.len(), 1);
        let again = buffers.take(90_000);
        assert_eq!((again.as_ptr(), again.len()), (at, 90_000), "the same allocation, cut to size");
        assert!(again.iter().all(|byte| *byte == 7), "not zero-filled");
        assert!(buffers.is_empty());
    }

    #[test]
    fn small_frames_and_buffers_past_the_bounds_are_not_kept() {
        let mut buffers = ReceiveBuffers::default();
        buffers.give(vec![0; RECEIVE_BUFFER_POOLED_MIN - 1]);
        assert!(buffers.is_empty(), "a small buffer is dropped");
        buffers.give(vec![0; RECEIVE_BUFFER_POOLED_MIN]);
        let small = buffers.take(100);
        assert_eq!((small.len(), buffers.len()), (100, 1), "a small frame leaves the pool alone");
        let mut buffers = ReceiveBuffers::default();
        for _ in 0..RECEIVE_BUFFERS_POOLED_MAX + 4 {
            buffers.give(vec![0; RECEIVE_BUFFER_POOLED_MIN]);
        }
        assert_eq!(buffers.len(), RECEIVE_BUFFERS_POOLED_MAX, "at most this many buffers");
        let mut buffers = ReceiveBuffers::default();
        for _ in 0..4 {
            buffers.give(vec![0; RECEIVE_BUFFERS_POOLED_BYTES_MAX / 3]);
        }
        assert_eq!(buffers.len(), 3, "at most this many bytes");
    }

    #[test]
    fn a_shared_frame_goes_back_to_the_peer_pool_when_its_last_slice_is_dropped() {
        let mut frame = take_for_peer(RECEIVE_BUFFER_POOLED_MIN * 2);
        frame.fill(9);
        let at = frame.as_ptr();
        let whole = shared(frame);
        let body = whole.slice(256..);
        drop(whole);
        assert_eq!(body[0], 9, "a slice keeps the frame alive");
        drop(body);
        let again = take_for_peer(RECEIVE_BUFFER_POOLED_MIN * 2);
        assert_eq!(again.as_ptr(), at, "the same allocation serves the next frame");
        assert!(again.iter().all(|byte| *byte == 9), "not zero-filled");
    }

    #[test]
    fn a_pooled_buffer_too_small_for_a_frame_gives_way_to_a_new_one() {
        let mut buffers = ReceiveBuffers::default();
        buffers.give(vec![1; RECEIVE_BUFFER_POOLED_MIN]);
        let frame = buffers.take(2 * RECEIVE_BUFFER_POOLED_MIN);
        assert_eq!(frame.len(), 2 * RECEIVE_BUFFER_POOLED_MIN);
        assert!(frame.iter().all(|byte| *byte == 0), "a new buffer, zeroed");
        assert!(buffers.is_empty(), "the small one was dropped");
    }
}
