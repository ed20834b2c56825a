//! What a replica replicates: any deterministic state machine over committed requests.

use crate::header::Header;

/// A deterministic state machine. Every replica applies the same requests in the same order and
/// must reach the same state: nothing here may read a clock, a file or a random source.
pub trait StateMachine: Sized {
    /// Applies one committed request and returns its reply body. `request` is the client's
    /// request header (client, session, request number, operation, command code); `user_id` is
    /// the user its session registered as (the node vouched for it at register time).
    fn apply(&mut self, op: u64, timestamp: u64, request: &Header, user_id: u32, body: &[u8]) -> Vec<u8>;

    /// Whether a committed register (a login) may open its session, checked as it applies so
    /// that a credential revoked before it commits is refused on every replica alike. `Err` is
    /// the status the client is refused with; the session is not opened. Most state machines
    /// take every register.
    fn check_register(&self, _timestamp: u64, _request: &Header, _body: &[u8]) -> Result<(), u32> {
        Ok(())
    }

    /// A digest of the whole state, compared across replicas by the simulator.
    fn digest(&self) -> u64;

    /// The whole state, for a checkpoint.
    fn snapshot(&self) -> Vec<u8>;

    /// The state a snapshot describes; `None` when the bytes are not a snapshot.
    fn restore(snapshot: &[u8]) -> Option<Self>;

    /// A fresh, empty state.
    fn empty() -> Self;
}
