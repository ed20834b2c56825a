//! A simulated client: registers a session, then sends its appends one at a time, each retried
//! (the same bytes, so the same request number) on a timeout to the next replica until a reply
//! comes. Evicted, it starts over as a new client; the request it had in flight may or may not
//! have been applied, and the checker allows either, at most once.

use vireo_io::Peer;
use vireo_protocol::header::{Command, Header, Message};
use vireo_protocol::request::OPERATION_REGISTER;

use crate::register_log::OPERATION_APPEND;
use crate::rng::SimRng;

/// Ticks before a request is retried (doubling per retry, up to 8x).
const REQUEST_TIMEOUT_TICKS: u64 = 40;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClientState {
    Unregistered,
    Registering,
    Idle,
    Waiting { request: u64 },
    Done,
}

/// What the client saw in one message, for the checker.
#[derive(Debug)]
pub enum Observation {
    Registered { client: u128, session: u64 },
    Replied { client: u128, session: u64, request: u64, op: u64, body: Vec<u8> },
    Evicted { client: u128 },
    Nothing,
}

pub struct SimClient {
    pub id: u128,
    pub session: u64,
    pub request_last: u64,
    pub state: ClientState,
    pub requests_left: u64,
    target: u8,
    sent_tick: u64,
    retries: u32,
    in_flight: Vec<u8>,
    /// When the current request was first sent, for the liveness bound.
    pub waiting_since_tick: u64,
    pub evictions: u64,
    pub replies: u64,
}

pub fn new_client_id(rng: &mut SimRng) -> u128 {
    ((rng.next_u64() as u128) << 64 | rng.next_u64() as u128).max(1)
}

impl SimClient {
    pub fn new(id: u128, requests: u64) -> SimClient {
        SimClient {
            id,
            session: 0,
            request_last: 0,
            state: ClientState::Unregistered,
            requests_left: requests,
            target: 0,
            sent_tick: 0,
            retries: 0,
            in_flight: Vec::new(),
            waiting_since_tick: 0,
            evictions: 0,
            replies: 0,
        }
    }

    fn request(&self, operation: u8, request: u64, body: Vec<u8>) -> Vec<u8> {
        let mut header = Header::new(Command::Request, 0, 0);
        header.client = self.id;
        header.session = if operation == OPERATION_REGISTER { 0 } else { self.session };
        header.request = request;
        header.operation = operation;
        Message::new(header, body).encode()
    }

    /// Once per tick: what to send, if anything, and to which replica.
    pub fn tick(&mut self, tick: u64, rng: &mut SimRng, replica_count: u8) -> Option<(Peer, Vec<u8>)> {
        match self.state {
            ClientState::Unregistered if self.requests_left == 0 => {
                self.state = ClientState::Done;
                return None;
            }
            ClientState::Unregistered => {
                self.in_flight = self.request(OPERATION_REGISTER, 0, Vec::new());
                self.state = ClientState::Registering;
            }
            ClientState::Idle if self.requests_left == 0 => {
                self.state = ClientState::Done;
                return None;
            }
            ClientState::Idle => {
                let value = rng.next_u64();
                self.request_last += 1;
                self.in_flight = self.request(OPERATION_APPEND, self.request_last, value.to_le_bytes().to_vec());
                self.state = ClientState::Waiting { request: self.request_last };
            }
            ClientState::Registering | ClientState::Waiting { .. } => {
                let timeout = REQUEST_TIMEOUT_TICKS << self.retries.min(3);
                if tick - self.sent_tick < timeout {
                    return None;
                }
                self.retries += 1;
                self.target = (self.target + 1) % replica_count;
                self.sent_tick = tick;
                return Some((Peer::Replica(self.target), self.in_flight.clone()));
            }
            ClientState::Done => return None,
        }
        self.retries = 0;
        self.sent_tick = tick;
        self.waiting_since_tick = tick;
        Some((Peer::Replica(self.target), self.in_flight.clone()))
    }

    pub fn on_message(&mut self, bytes: &[u8]) -> Observation {
        let Ok(message) = Message::decode(bytes, true) else {
            return Observation::Nothing;
        };
        let header = message.header;
        if header.client != self.id {
            return Observation::Nothing;
        }
        match header.command {
            Command::Reply => {
                // Replies come from the primary: remember it.
                self.target = header.replica;
                if header.operation == OPERATION_REGISTER {
                    let Ok(session) = message.body.as_slice().try_into().map(u64::from_le_bytes) else {
                        return Observation::Nothing;
                    };
                    if self.state == ClientState::Registering {
                        self.session = session;
                        self.state = ClientState::Idle;
                    }
                    return Observation::Registered { client: self.id, session };
                }
                if self.state == (ClientState::Waiting { request: header.request }) && header.session == self.session {
                    self.state = ClientState::Idle;
                    self.requests_left -= 1;
                    self.replies += 1;
                }
                Observation::Replied {
                    client: self.id,
                    session: header.session,
                    request: header.request,
                    op: header.op,
                    body: message.body,
                }
            }
            Command::Eviction => Observation::Evicted { client: self.id },
            _ => Observation::Nothing,
        }
    }

    /// After an eviction: a new identity, a new session; the request in flight is abandoned (it
    /// counts as done: its outcome is unknown, which the checker allows).
    pub fn restart_as(&mut self, id: u128) {
        self.id = id;
        self.session = 0;
        self.request_last = 0;
        if let ClientState::Waiting { .. } = self.state {
            self.requests_left -= 1;
        }
        self.state = ClientState::Unregistered;
        self.evictions += 1;
    }

    /// The liveness phase: finish the request in flight, start no other.
    pub fn finish(&mut self) {
        self.requests_left = match self.state {
            ClientState::Waiting { .. } => self.requests_left.min(1),
            _ => 0,
        };
    }

    pub fn done(&self) -> bool {
        self.state == ClientState::Done
    }
}
