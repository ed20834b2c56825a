//! A client connection as the shard that holds it sees it: who is logged in on it, the sessions
//! the node opened in partition groups on the client's behalf, and the requests in flight.
//!
//! An Iggy client logs in once (a Register in the metadata group, whose session it then echoes)
//! and numbers its own metadata requests; it sends partition requests and reads with a number it
//! does not advance (`PROTOCOL.md`). The node is therefore the VSR client of every partition
//! group the connection uses: it registers the connection's client id there, numbers the
//! group's requests itself, and re-sends a request in flight with the same number until it is
//! answered, so that a request is applied once however often it is re-sent, also across view
//! changes.
//!
//! A group's client table answers one request per session (VSR's rule): a later number that
//! overtakes an earlier one on the way (a drop, a full channel, a view change) would make the
//! earlier one stale, never applied and never answered. So a connection that pipelines has one
//! request at a time in each group; the others wait, in the order the client sent them
//! (`Stage::Queued`), and are applied in that order.
//!
//! Invariants: a connection has at most `IN_FLIGHT_MAX` requests in flight and at most
//! `GROUP_SESSIONS_MAX` partition-group sessions (the least recently used goes); a request in
//! flight to a partition group is either waiting for its group's session, queued behind an
//! earlier request to the same group, or was sent with it; at most one per group is sent.

use std::collections::BTreeMap;

use vireo_io::Namespace;
use vireo_protocol::header::{Header, Origin};
use vireo_storage::layout::HEADER_SIZE;

use crate::node_io::ConnectionId;
use crate::partition::request::SEND_BATCH_AT;

/// Requests one connection may have in flight; an Iggy SDK waits for each reply (one), a
/// client that pipelines past this is refused as busy.
pub const IN_FLIGHT_MAX: usize = 16;
/// Partition-group sessions one connection keeps; past it the least recently used is dropped
/// (a later request registers again and the group answers with the same session).
pub const GROUP_SESSIONS_MAX: usize = 4096;
/// Ticks a request in flight waits for its reply before the node sends it again.
pub const RESEND_TICKS: u64 = 40;
/// Partitions a purge empties at once (its other partitions wait their turn).
pub const PURGE_WINDOW: usize = 8;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Login {
    /// Nothing but ping is accepted yet.
    Anonymous,
    /// The credentials were verified; the metadata group has not answered the register yet.
    Registering { client: u128, user_id: u32 },
    /// Logged in: `session` is the metadata group's session for `client`.
    LoggedIn { client: u128, user_id: u32, session: u64 },
}

/// How the group's reply to a request becomes the reply the client decodes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReplyKind {
    /// login_register: the register's session, answered as a `LoginReply`.
    Login { user_id: u32 },
    /// A metadata command: the state machine's result section and payload, as they are.
    Metadata,
    /// send_messages to one partition.
    Send { stream: u32, topic: u32 },
    /// poll_messages of one partition.
    Poll,
    /// store_consumer_offset / delete_consumer_offset: an empty body.
    Offset,
    /// get_consumer_offset of one partition.
    ConsumerOffset,
    /// create_personal_access_token: the token the node drew, shown once.
    CreatedToken { token: String },
    /// purge_stream / purge_topic: the metadata group checked and committed it; then every
    /// partition it names is emptied (`PURGE_WINDOW` at a time) before the client is answered.
    Purge { waiting: PurgeQueue, outstanding: usize, reply: Vec<u8> },
    /// One partition of a purge (`parent`: the purge's key).
    PurgePartition { parent: u64 },
}

/// The partitions a purge has yet to empty: per topic (stream, topic, next partition, count),
/// so that a stream of many partitions costs a few words, not one per partition.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PurgeQueue {
    topics: std::collections::VecDeque<(u32, u32, u32, u32)>,
}

impl PurgeQueue {
    pub fn new(topics: Vec<(u32, u32, u32)>) -> PurgeQueue {
        PurgeQueue {
            topics: topics
                .into_iter()
                .filter(|(_, _, count)| *count > 0)
                .map(|(s, t, count)| (s, t, 0, count))
                .collect(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.topics.is_empty()
    }

    pub fn pop(&mut self) -> Option<Namespace> {
        let (stream, topic, next, count) = self.topics.front_mut()?;
        let namespace = Namespace::partition(*stream, *topic, *next);
        *next += 1;
        if next == count {
            self.topics.pop_front();
        }
        Some(namespace)
    }
}

/// Where a request in flight stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    /// The group has no session for this client yet: a register is in flight first.
    OpeningSession,
    /// Sent to the group with this request number.
    Sent { request: u64 },
    /// The request is itself a register (a login in the metadata group).
    Register,
    /// Answered by its group; waiting for the requests it fanned out (a purge's partitions).
    Fanning,
    /// Waiting for an earlier request of this connection to the same group to be answered.
    Queued,
}

#[derive(Clone, Debug)]
pub struct InFlight {
    /// The request number the client sent (answered back in the reply header).
    pub client_request: u64,
    /// The request_checksum the client stamped (0 if none), answered back in the reply header:
    /// a client that pipelines matches its replies by it, since requests to different groups
    /// are answered in the order their groups commit them.
    pub client_checksum: u128,
    pub operation: u8,
    pub group: Namespace,
    pub kind: ReplyKind,
    pub stage: Stage,
    /// The group request's header (its session and number are filled in once the session is
    /// open) and body: what is sent, and sent again until answered.
    pub header: Header,
    pub body: RequestBody,
    pub sent_tick: u64,
}

/// The body of a group request in flight.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RequestBody {
    /// Encoded once: offsets, purges, a few bytes each.
    Encoded(Vec<u8>),
    /// A send: the partition request's head, then the client's batch where it sits in the
    /// client's own frame, which is kept as it came until the send is answered. Each time the
    /// request goes, its batch is copied once, into the frame that goes (`frame`); the group's
    /// replica takes that frame as its prepare's body.
    Send { head: [u8; SEND_BATCH_AT], client_frame: Vec<u8>, batch_at: usize },
}

impl RequestBody {
    pub fn len(&self) -> usize {
        match self {
            RequestBody::Encoded(body) => body.len(),
            RequestBody::Send { client_frame, batch_at, .. } => SEND_BATCH_AT + client_frame.len() - batch_at,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The frame of `header` (sized for this body) and this body, in one buffer.
    pub fn frame(&self, header: &Header) -> Vec<u8> {
        assert_eq!(header.size as usize, HEADER_SIZE + self.len());
        let mut frame = Vec::with_capacity(header.size as usize);
        frame.extend_from_slice(&header.encode());
        match self {
            RequestBody::Encoded(body) => frame.extend_from_slice(body),
            RequestBody::Send { head, client_frame, batch_at } => {
                frame.extend_from_slice(head);
                frame.extend_from_slice(&client_frame[*batch_at..]);
            }
        }
        frame
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GroupSession {
    /// The incarnation of the group the session is in (a group created again knows it not).
    pub incarnation: u64,
    pub session: u64,
    /// The last request number used in this session.
    pub request: u64,
    pub used_tick: u64,
}

#[derive(Clone, Debug)]
pub struct Connection {
    pub id: ConnectionId,
    pub origin: Origin,
    pub login: Login,
    /// By a sequence number of the connection's own (a client may reuse request numbers).
    pub in_flight: BTreeMap<u64, InFlight>,
    in_flight_next: u64,
    pub group_sessions: BTreeMap<Namespace, GroupSession>,
    /// Round-robin position of balanced sends and consumer-group polls.
    pub cursor: u64,
    /// The highest number the client gave a metadata command in its session: the node ends
    /// the session above it when the connection closes.
    pub last_request: u64,
    /// When the logged-in user was created: user ids are reused, so a user deleted and another
    /// created with its id is not the user this connection logged in as.
    pub user_created_at: u64,
}

impl Connection {
    pub fn new(id: ConnectionId, origin: Origin) -> Connection {
        Connection {
            id,
            origin,
            login: Login::Anonymous,
            in_flight: BTreeMap::new(),
            in_flight_next: 0,
            group_sessions: BTreeMap::new(),
            cursor: 0,
            last_request: 0,
            user_created_at: 0,
        }
    }

    /// The client id of the login (pending or done).
    pub fn client(&self) -> Option<u128> {
        match self.login {
            Login::Anonymous => None,
            Login::Registering { client, .. } | Login::LoggedIn { client, .. } => Some(client),
        }
    }

    pub fn logged_in(&self) -> Option<(u128, u32, u64)> {
        match self.login {
            Login::LoggedIn { client, user_id, session } => Some((client, user_id, session)),
            _ => None,
        }
    }

    pub fn in_flight_full(&self) -> bool {
        self.in_flight.len() >= IN_FLIGHT_MAX
    }

    /// Starts tracking a request; the caller checked `in_flight_full` (a purge's partitions
    /// may go `PURGE_WINDOW` over it).
    pub fn track(&mut self, in_flight: InFlight) -> u64 {
        assert!(self.in_flight.len() < IN_FLIGHT_MAX + PURGE_WINDOW);
        let key = self.in_flight_next;
        self.in_flight_next += 1;
        self.in_flight.insert(key, in_flight);
        key
    }

    /// Whether a register for `group` is already in flight (so another request waiting for
    /// the same session does not send a second one).
    pub fn opening(&self, group: Namespace) -> bool {
        !self.waiting_for_session(group).is_empty()
    }

    /// The requests in flight waiting for the session of `group` to open.
    pub fn waiting_for_session(&self, group: Namespace) -> Vec<u64> {
        self.in_flight
            .iter()
            .filter(|(_, in_flight)| in_flight.group == group && in_flight.stage == Stage::OpeningSession)
            .map(|(key, _)| *key)
            .collect()
    }

    /// Whether a request to `group` is out there or waiting its turn: a new one queues behind.
    pub fn occupied(&self, group: Namespace) -> bool {
        self.in_flight.values().any(|in_flight| in_flight.group == group && in_flight.stage != Stage::Fanning)
    }

    /// The oldest queued request of each group that nothing of this connection occupies any
    /// more: the ones to send now (`all`: every queued one, for the planted bug that lets
    /// pipelined requests overtake each other).
    pub fn due_from_queue(&self, all: bool) -> Vec<u64> {
        let mut taken: std::collections::BTreeSet<Namespace> = self
            .in_flight
            .values()
            .filter(|in_flight| !matches!(in_flight.stage, Stage::Fanning | Stage::Queued))
            .map(|in_flight| in_flight.group)
            .collect();
        self.in_flight
            .iter()
            .filter(|(_, in_flight)| in_flight.stage == Stage::Queued && (taken.insert(in_flight.group) || all))
            .map(|(key, _)| *key)
            .collect()
    }

    /// Takes the next request number of the session in `group` (which must be open).
    pub fn next_request(&mut self, group: Namespace, tick: u64) -> (u64, u64) {
        let session = self.group_sessions.get_mut(&group).expect("an open session");
        session.request += 1;
        session.used_tick = tick;
        (session.session, session.request)
    }

    /// Records a session the group answered a register with; `request` is the last number
    /// the group applied for it (a session registered before keeps its numbers).
    pub fn open_session(&mut self, group: Namespace, incarnation: u64, session: u64, request: u64, tick: u64) {
        if !self.group_sessions.contains_key(&group) && self.group_sessions.len() == GROUP_SESSIONS_MAX {
            let (&oldest, _) =
                self.group_sessions.iter().min_by_key(|(_, session)| session.used_tick).expect("a full map has one");
            self.group_sessions.remove(&oldest);
        }
        let fresh = GroupSession { incarnation, session, request, used_tick: tick };
        let entry = self.group_sessions.entry(group).or_insert(fresh);
        if entry.session != session || entry.incarnation != incarnation {
            *entry = fresh;
        }
        entry.request = entry.request.max(request);
        assert!(self.group_sessions.len() <= GROUP_SESSIONS_MAX);
    }

    /// The request in flight a group's reply answers: the register of `group` (`request`
    /// None) or the request sent there with that number.
    pub fn answered_by(&self, group: Namespace, request: Option<u64>) -> Option<u64> {
        self.in_flight
            .iter()
            .find(|(_, in_flight)| {
                in_flight.group == group
                    && match (request, in_flight.stage) {
                        (None, Stage::OpeningSession | Stage::Register) => true,
                        (Some(number), Stage::Sent { request }) => number == request,
                        _ => false,
                    }
            })
            .map(|(key, _)| *key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_purge_queue_walks_every_partition_of_its_topics_in_order() {
        let mut queue = PurgeQueue::new(vec![(1, 0, 2), (1, 1, 0), (1, 2, 1)]);
        let mut walked = Vec::new();
        while let Some(namespace) = queue.pop() {
            walked.push(namespace.unpack());
        }
        assert_eq!(walked, [(1, 0, 0), (1, 0, 1), (1, 2, 0)]);
        assert!(queue.is_empty());
    }

    #[test]
    fn sessions_are_bounded_and_the_least_recently_used_goes() {
        let mut connection = Connection::new(1, Origin { node: 0, shard: 0 });
        for partition in 0..GROUP_SESSIONS_MAX as u32 {
            connection.open_session(Namespace::partition(0, 0, partition), 0, 1, 0, partition as u64);
        }
        connection.next_request(Namespace::partition(0, 0, 0), 1_000_000);
        connection.open_session(Namespace::partition(0, 0, 999_999), 0, 1, 0, 1_000_001);
        assert_eq!(connection.group_sessions.len(), GROUP_SESSIONS_MAX);
        assert!(connection.group_sessions.contains_key(&Namespace::partition(0, 0, 0)), "recently used: kept");
        assert!(!connection.group_sessions.contains_key(&Namespace::partition(0, 0, 1)), "least recently used: gone");
        // A session reopened keeps the highest number used, so no number is used twice.
        connection.open_session(Namespace::partition(0, 0, 0), 0, 1, 0, 1_000_002);
        assert_eq!(connection.next_request(Namespace::partition(0, 0, 0), 1_000_003), (1, 2));
    }
}
