//! The HTTP API's way into the node: HTTP is another transport into shard 0's `Node`, not a
//! second implementation. Each HTTP session is an internal connection of that node, opened,
//! fed frames and closed by the HTTP tasks through this gateway, and answered by the node as any
//! connection is: the same admission, permissions, sessions and replies as a TCP client's.
//!
//! The HTTP tasks queue inputs (`open`, `submit`, `close`); the shard's loop takes them
//! (`try_input`, woken by `wait`) and hands the node's replies for these connections back
//! (`on_reply`), each to the task waiting for that request's number.
//!
//! Until the node takes clients (`accept_clients`: every group it hosts recovered, as for TCP,
//! whose connections wait in the listener's backlog meanwhile), a request waits for it within its
//! timeout.
//!
//! Bounds: `INPUTS_MAX` inputs queued for the loop and `WAITING_MAX` requests waiting for their
//! replies; past either, `exchange` answers `Busy` at once (the HTTP answer is 503).

use std::cell::RefCell;
use std::collections::{HashMap, VecDeque};
use std::time::Duration;

use glommio::channels::local_channel::{self, LocalSender};
use glommio::sync::Semaphore;
use vireo_protocol::header::Header;

use crate::node_io::ConnectionId;
use crate::server::http_api::linearizable::MetadataLeader;

/// The first connection number the gateway hands out: far above the driver's, which count up
/// from 1 one connection at a time, and below the root setup's `INTERNAL_CONNECTION`.
pub const GATEWAY_CONNECTION_FIRST: ConnectionId = 1 << 62;
/// Inputs queued for the shard's loop at most.
pub const INPUTS_MAX: usize = 4096;
/// Requests waiting for their replies at most.
pub const WAITING_MAX: usize = 4096;
/// How often a request looks again whether the node takes clients yet (only while it starts).
const ACCEPT_POLL: Duration = Duration::from_millis(10);

/// What the HTTP tasks ask of the node.
#[derive(Debug)]
pub enum GatewayInput {
    Opened(ConnectionId),
    Frame(ConnectionId, Vec<u8>),
    Closed(ConnectionId),
}

#[derive(Debug, PartialEq, Eq)]
pub enum GatewayError {
    /// Too much is queued or waiting: the HTTP answer is 503.
    Busy,
    /// No reply within the time given (the node may still apply the request).
    Timeout,
    /// The connection closed before its reply came.
    Closed,
}

#[derive(Default)]
struct GatewayState {
    inputs: VecDeque<GatewayInput>,
    waiting: HashMap<(ConnectionId, u64), LocalSender<Vec<u8>>>,
    next_connection: ConnectionId,
}

pub struct Gateway {
    state: RefCell<GatewayState>,
    accepting: std::cell::Cell<bool>,
    /// The metadata group's primary as the shard loop last saw it.
    leader: std::cell::Cell<MetadataLeader>,
    /// A wake-up for the shard's loop, not a count (as its inbox's).
    ready: Semaphore,
}

impl Default for Gateway {
    fn default() -> Gateway {
        Gateway {
            state: RefCell::new(GatewayState { next_connection: GATEWAY_CONNECTION_FIRST, ..Default::default() }),
            accepting: std::cell::Cell::new(false),
            leader: std::cell::Cell::new(MetadataLeader::Unknown),
            ready: Semaphore::new(0),
        }
    }
}

impl Gateway {
    /// Whether `connection` is one of the gateway's.
    pub fn owns(connection: ConnectionId) -> bool {
        (GATEWAY_CONNECTION_FIRST..GATEWAY_CONNECTION_FIRST << 1).contains(&connection)
    }

    fn push(&self, input: GatewayInput) -> Result<(), GatewayError> {
        let mut state = self.state.borrow_mut();
        // A close always goes in: it frees what the others hold.
        if state.inputs.len() >= INPUTS_MAX && !matches!(input, GatewayInput::Closed(_)) {
            return Err(GatewayError::Busy);
        }
        state.inputs.push_back(input);
        drop(state);
        self.ready.signal(1);
        Ok(())
    }

    /// A new connection in the node for an HTTP session.
    pub fn open(&self) -> Result<ConnectionId, GatewayError> {
        let connection = {
            let mut state = self.state.borrow_mut();
            let connection = state.next_connection;
            assert!(Gateway::owns(connection), "2^62 HTTP sessions");
            state.next_connection += 1;
            connection
        };
        self.push(GatewayInput::Opened(connection))?;
        Ok(connection)
    }

    /// Ends a session's connection; a request still waiting on it gets `Closed`.
    pub fn close(&self, connection: ConnectionId) {
        self.state.borrow_mut().waiting.retain(|(waiting, _), _| *waiting != connection);
        let _ = self.push(GatewayInput::Closed(connection));
    }

    /// Who leads the metadata group now (the shard loop tells, each tick).
    pub fn set_metadata_leader(&self, leader: MetadataLeader) {
        self.leader.set(leader);
    }

    pub fn metadata_leader(&self) -> MetadataLeader {
        self.leader.get()
    }

    /// The node takes clients from now on.
    pub fn accept_clients(&self) {
        self.accepting.set(true);
    }

    /// Sends one request frame (its header numbers it `request`) and waits for its reply, at
    /// most `timeout` (including the wait for the node to take clients).
    pub async fn exchange(
        &self,
        connection: ConnectionId,
        request: u64,
        frame: Vec<u8>,
        timeout: Duration,
    ) -> Result<Vec<u8>, GatewayError> {
        let started = std::time::Instant::now();
        while !self.accepting.get() {
            if started.elapsed() >= timeout {
                return Err(GatewayError::Timeout);
            }
            glommio::timer::sleep(ACCEPT_POLL).await;
        }
        let timeout = timeout.saturating_sub(started.elapsed());
        let (sender, receiver) = local_channel::new_bounded(1);
        {
            let mut state = self.state.borrow_mut();
            if state.waiting.len() >= WAITING_MAX {
                return Err(GatewayError::Busy);
            }
            state.waiting.insert((connection, request), sender);
        }
        if let Err(error) = self.push(GatewayInput::Frame(connection, frame)) {
            self.state.borrow_mut().waiting.remove(&(connection, request));
            return Err(error);
        }
        let reply = async { receiver.recv().await.ok_or(GatewayError::Closed) };
        let deadline = async {
            glommio::timer::sleep(timeout).await;
            Err(GatewayError::Timeout)
        };
        let answer = futures_lite::future::or(reply, deadline).await;
        self.state.borrow_mut().waiting.remove(&(connection, request));
        answer
    }

    // The shard's loop.

    pub fn try_input(&self) -> Option<GatewayInput> {
        self.state.borrow_mut().inputs.pop_front()
    }

    /// Waits until an input may be there.
    pub async fn wait(&self) {
        if !self.state.borrow().inputs.is_empty() {
            return;
        }
        let _ = self.ready.acquire(1).await;
        let stale = self.ready.available();
        let _ = self.ready.try_acquire(stale);
    }

    /// The node closed one of the gateway's connections: what waits on it gets `Closed`.
    pub fn dropped(&self, connection: ConnectionId) {
        self.state.borrow_mut().waiting.retain(|(waiting, _), _| *waiting != connection);
    }

    /// A frame the node sent to one of the gateway's connections: the reply of the request
    /// waiting under its number, if one still is (a late reply is dropped).
    pub fn on_reply(&self, connection: ConnectionId, frame: Vec<u8>) {
        let Ok(header) = Header::decode(&frame) else { return };
        let waiting = self.state.borrow_mut().waiting.remove(&(connection, header.request));
        if let Some(sender) = waiting {
            let _ = sender.try_send(frame);
        }
    }
}
