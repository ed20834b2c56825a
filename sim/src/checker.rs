//! The safety checkers, fed by the cluster as replicas commit and clients hear back:
//! - commit history: every replica that commits op k commits the same prepare (checksum, which
//!   hash-chains it to every op before it) and reaches the same state digest;
//! - model: the committed prepares, applied in order to an independent model of the replicated
//!   state machine with exactly-once client sessions, must give the digest every replica reports
//!   (a request applied twice or lost changes it) and the exact reply every client receives;
//! - no acknowledged request lost: every reply a client got names an op of the final history
//!   that holds that request, and at the end every replica has executed it.

use std::collections::{BTreeMap, HashMap, HashSet};

use vireo_protocol::client_table::{ClientEntry, ClientTable, RequestOutcome};
use vireo_protocol::request::{batched_requests, OPERATION_REGISTER};
use vireo_protocol::StateMachine;

use crate::register_log::RegisterLog;

/// A reply a client received, checked once the model has reached its op.
#[derive(Clone, Debug)]
struct ReplyCheck {
    client: u128,
    session: u64,
    request: u64,
    op: u64,
    body: Vec<u8>,
}

pub struct Checker {
    /// op -> (checksum, digest after it).
    history: BTreeMap<u64, (u128, u64)>,
    /// Prepare bodies waiting for the model to reach them: op -> (checksum, timestamp, body).
    bodies: BTreeMap<u64, (u128, Vec<u8>)>,
    model: RegisterLog,
    model_table: ClientTable,
    model_op: u64,
    /// (client, session, request) -> (op, reply) for every request the model applied.
    applied: HashMap<(u128, u64, u64), (u64, Vec<u8>)>,
    /// (client, session) for every register the model applied: a register retried after its
    /// client was evicted registers it again, so one client may hold several over time.
    sessions: HashSet<(u128, u64)>,
    pending: Vec<ReplyCheck>,
    pub replies_checked: u64,
    pub commits_checked: u64,
}

impl Checker {
    pub fn new(clients_max: usize) -> Checker {
        Checker {
            history: BTreeMap::new(),
            bodies: BTreeMap::new(),
            model: RegisterLog::empty(),
            model_table: ClientTable::new(clients_max),
            model_op: 0,
            applied: HashMap::new(),
            sessions: HashSet::new(),
            pending: Vec::new(),
            replies_checked: 0,
            commits_checked: 0,
        }
    }

    pub fn history_len(&self) -> u64 {
        self.history.keys().next_back().copied().unwrap_or(0)
    }

    /// Whether the model still needs the prepare body of `op`.
    pub fn needs_body(&self, op: u64) -> bool {
        op > self.model_op && !self.bodies.contains_key(&op)
    }

    /// Digest of the committed state after `op`, if some replica reported it.
    pub fn digest_at(&self, op: u64) -> Option<u64> {
        self.history.get(&op).map(|(_, digest)| *digest)
    }

    /// A replica executed `op`. `body` is the prepare's body, if the replica still holds it.
    pub fn on_commit(
        &mut self,
        replica: u8,
        op: u64,
        checksum: u128,
        digest: u64,
        body: Option<&[u8]>,
    ) -> Result<(), String> {
        self.commits_checked += 1;
        match self.history.get(&op) {
            Some((known, known_digest)) => {
                if *known != checksum {
                    return Err(format!(
                        "replica {replica} committed op {op} with checksum {checksum:032x}, history has {known:032x}"
                    ));
                }
                if *known_digest != digest {
                    return Err(format!(
                        "replica {replica} reached digest {digest:016x} after op {op}, history has {known_digest:016x}"
                    ));
                }
                return Ok(());
            }
            None => {
                self.history.insert(op, (checksum, digest));
            }
        }
        if self.needs_body(op) {
            if let Some(body) = body {
                self.bodies.insert(op, (checksum, body.to_vec()));
            }
        }
        self.advance_model()
    }

    fn advance_model(&mut self) -> Result<(), String> {
        while let Some((checksum, body)) = self.bodies.remove(&(self.model_op + 1)) {
            let op = self.model_op + 1;
            assert_eq!(self.history[&op].0, checksum);
            self.model_apply(op, &body);
            self.model_op = op;
            let expected = self.history[&op].1;
            if self.model.digest() != expected {
                return Err(format!(
                    "after op {op} the replicas' digest is {expected:016x} but the model's is {:016x}: a request was applied twice, lost or reordered",
                    self.model.digest()
                ));
            }
        }
        self.bodies.retain(|op, _| *op > self.model_op);
        self.check_pending()
    }

    fn model_apply(&mut self, op: u64, body: &[u8]) {
        for request in batched_requests(body) {
            let header = request.header;
            if header.operation == OPERATION_REGISTER {
                if self.model_table.get(header.client).is_some() {
                    continue;
                }
                let entry = ClientEntry {
                    session: op,
                    user_id: header.user_id,
                    request: 0,
                    reply_op: op,
                    reply_timestamp: 0,
                    reply_operation: OPERATION_REGISTER,
                    reply: Vec::new(),
                };
                self.model_table.register(header.client, entry);
                self.sessions.insert((header.client, op));
                continue;
            }
            if let RequestOutcome::New = self.model_table.outcome(header.client, header.session, header.request) {
                let reply = self.model.apply(op, 0, &header, 0, &vireo_io::Bytes::copy_from_slice(request.body));
                let entry = ClientEntry {
                    session: header.session,
                    user_id: 0,
                    request: header.request,
                    reply_op: op,
                    reply_timestamp: 0,
                    reply_operation: header.operation,
                    reply: reply.clone(),
                };
                self.model_table.update(header.client, entry);
                let previous = self.applied.insert((header.client, header.session, header.request), (op, reply));
                assert!(previous.is_none(), "the model applies a request at most once");
            }
        }
    }

    pub fn on_register_reply(&mut self, client: u128, session: u64) -> Result<(), String> {
        self.pending.push(ReplyCheck { client, session, request: 0, op: session, body: Vec::new() });
        self.check_pending()
    }

    pub fn on_reply(&mut self, client: u128, session: u64, request: u64, op: u64, body: Vec<u8>) -> Result<(), String> {
        self.pending.push(ReplyCheck { client, session, request, op, body });
        self.check_pending()
    }

    fn check_pending(&mut self) -> Result<(), String> {
        let mut index = 0;
        while index < self.pending.len() {
            let check = &self.pending[index];
            if check.op > self.model_op {
                index += 1;
                continue;
            }
            let check = self.pending.swap_remove(index);
            self.replies_checked += 1;
            if check.request == 0 {
                if !self.sessions.contains(&(check.client, check.session)) {
                    return Err(format!(
                        "client {:x} was told session {} but the history never registered it there",
                        check.client, check.session,
                    ));
                }
                continue;
            }
            match self.applied.get(&(check.client, check.session, check.request)) {
                Some((op, reply)) if *op == check.op && *reply == check.body => {}
                Some((op, reply)) => {
                    return Err(format!(
                        "client {:x} request {} got reply {:?} at op {}, the model applied it at op {op} with reply {reply:?}",
                        check.client, check.request, check.body, check.op
                    ))
                }
                None => {
                    return Err(format!(
                        "client {:x} request {} was acknowledged at op {} but the history never applied it",
                        check.client, check.request, check.op
                    ))
                }
            }
        }
        Ok(())
    }

    /// At the end of a run: every acknowledged request is in the history the model replayed.
    pub fn finish(&mut self) -> Result<(), String> {
        self.check_pending()?;
        if let Some(check) = self.pending.first() {
            return Err(format!(
                "client {:x} request {} was acknowledged at op {} which no replica ever executed (history ends at {})",
                check.client, check.request, check.op, self.model_op
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vireo_protocol::header::{Command, Header, Message};

    fn prepare_body(client: u128, session: u64, request: u64, value: u64) -> Vec<u8> {
        let mut header = Header::new(Command::Request, 0, 0);
        header.client = client;
        header.session = session;
        header.request = request;
        header.operation = if request == 0 { OPERATION_REGISTER } else { crate::register_log::OPERATION_APPEND };
        let body = if request == 0 { Vec::new() } else { value.to_le_bytes().to_vec() };
        Message::new(header, body).encode()
    }

    #[test]
    fn catches_a_diverging_commit_and_a_reply_the_history_never_applied() {
        let mut checker = Checker::new(4);
        let register = prepare_body(9, 0, 0, 0);
        checker.on_commit(0, 1, 11, 0, Some(&register)).unwrap();
        assert!(checker.on_commit(1, 1, 12, 0, None).is_err(), "a second prepare for op 1 must be caught");
        let mut log = RegisterLog::empty();
        let reply = log.apply(
            2,
            0,
            &crate::register_log::append_request(9),
            0,
            &vireo_io::Bytes::copy_from_slice(&5u64.to_le_bytes()),
        );
        checker.on_commit(0, 2, 21, log.digest(), Some(&prepare_body(9, 1, 1, 5))).unwrap();
        checker.on_reply(9, 1, 1, 2, reply.clone()).unwrap();
        assert!(checker.on_reply(9, 1, 2, 2, reply).is_err(), "a reply for a request never applied must be caught");
        // The same request again at op 3: the model skips it, so a replica whose digest moved
        // (it applied it twice) is caught.
        let mut twice = log.clone();
        twice.apply(
            3,
            0,
            &crate::register_log::append_request(9),
            0,
            &vireo_io::Bytes::copy_from_slice(&5u64.to_le_bytes()),
        );
        let result = checker.on_commit(0, 3, 31, twice.digest(), Some(&prepare_body(9, 1, 1, 5)));
        assert!(result.is_err(), "a retried request applied twice must be caught");
    }
}
