//! What a replica replicates: any deterministic state machine over committed requests.

use crate::elided::ExternalSpan;
use crate::header::Header;
use vireo_io::Bytes;

/// What `StateMachine::prepare` made of one request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Prepared {
    /// The cursor after the request.
    pub cursor: u64,
    /// Where in the request's body a message batch starts that runs to the body's end and that
    /// `prepare` stamped whole, so that `batch::validate` takes it: the prepare's checksum leaves
    /// its messages to their own checksums (`prepare_body`). `None` for anything else.
    pub batch_at: Option<u32>,
}

/// A deterministic state machine. Every replica applies the same requests in the same order and
/// must reach the same state: nothing here may read a clock, a file or a random source.
pub trait StateMachine: Sized {
    /// Whether the state's bulk lives in a log outside the snapshot (a partition's segment log):
    /// then a checkpoint is written only once its owner reports that log durable through the
    /// checkpoint's cursor (`Replica::external_log_durable`), because the WAL may overwrite the
    /// checkpoint's ops once it is, and the snapshot alone no longer holds what they wrote.
    const EXTERNAL_LOG: bool = false;

    /// Whether `request` brings new data that a node refuses when its disk is full (a send, a
    /// create): a single replica whose write met a full disk refuses these among the ops it cut
    /// (`replica::no_space`); the others are prepared again once space allows.
    fn refused_when_disk_full(_request: &Header) -> bool {
        false
    }

    /// Applies one committed request and returns its reply body. `request` is the client's
    /// request header (client, session, request number, operation, command code); `user_id` is
    /// the user its session registered as (the node vouched for it at register time). `body` is
    /// a slice of the prepare's shared body: a machine may keep (a slice of) it without a copy.
    fn apply(&mut self, op: u64, timestamp: u64, request: &Header, user_id: u32, body: &Bytes) -> Vec<u8>;

    /// A committed request the client table skipped (its session was evicted by an op in
    /// between, or it was already applied): no reply comes of it. What `prepare` decided for it
    /// may still stand: a partition keeps a send's batch at the offsets the primary stamped, so
    /// that its log goes on exactly as the prepares said (the client hears of an eviction, and
    /// may find its messages stored: at least once). Most state machines do nothing.
    fn apply_skipped(&mut self, _op: u64, _timestamp: u64, _request: &Header, _body: &Bytes) {}

    /// Whether a committed register (a login) may open its session, checked as it applies so
    /// that a credential revoked before it commits is refused on every replica alike. `Err` is
    /// the status the client is refused with; the session is not opened. Most state machines
    /// take every register.
    fn check_register(&self, _timestamp: u64, _request: &Header, _body: &[u8]) -> Result<(), u32> {
        Ok(())
    }

    /// The cursor after the last applied op: where a primary whose log holds nothing above its
    /// commit point prepares on from (see `prepare`).
    fn prepare_cursor(&self) -> u64 {
        0
    }

    /// Where an external log is needed from (a partition's first offset): it deletes nothing
    /// from there until a checkpoint that no longer needs it is durable.
    fn retained_from(&self) -> u64 {
        0
    }

    /// Called by the primary for each request it puts into a prepare, in op order, before the
    /// prepare is sealed: it may rewrite the request's body in place (a partition stamps a send's
    /// batch with its offsets and timestamp, so the prepare carries the bytes as they will be
    /// stored) and returns the cursor after it, and where a batch it stamped whole lies. `cursor` is the one after the request before
    /// (after the op before, for the first: its header's `cursor`); the prepare's header keeps
    /// the cursor after its last request. Every replica applies the rewritten body, so this must
    /// decide only what `apply` would: given the same cursor, the same bytes.
    fn prepare(&self, cursor: u64, _timestamp: u64, _request: &Header, _body: &mut [u8]) -> Prepared {
        Prepared { cursor, batch_at: None }
    }

    /// The parts of a prepare's body (`prepare` its header) that the external log stores at
    /// their final place as the prepare arrives: a replica with peers leaves them out of its WAL
    /// slot, so that they are written once, and recovery takes them back from the log. Only
    /// spans the log will hold exactly (stamped where the log goes on); none by default.
    fn external_spans(_prepare: &Header, _body: &[u8]) -> Vec<ExternalSpan> {
        Vec::new()
    }

    /// A single replica's recovery found a span of a durable prepare past its checkpoint damaged
    /// in the external log (`end`: the log offset after it, `len`: its bytes), and it has no
    /// peer to take the prepare from. The prepare is applied with that span zeroed: told first,
    /// the machine takes the span's offsets and bytes in its log as it would have, without the
    /// content, so that the batches after it stay where they are (a flipped bit costs the batch
    /// it hits, not the log after it). Called only while the replica opens, before it applies
    /// the prepare.
    fn span_lost(&mut self, _offset: u64, _end: u64, _len: u32) {}

    /// A digest of the whole state, compared across replicas by the simulator.
    fn digest(&self) -> u64;

    /// The whole state, for a checkpoint.
    fn snapshot(&self) -> Vec<u8>;

    /// The state a snapshot describes; `None` when the bytes are not a snapshot.
    fn restore(snapshot: &[u8]) -> Option<Self>;

    /// A fresh, empty state.
    fn empty() -> Self;
}
