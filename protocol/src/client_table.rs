//! The client table: one entry per registered client session, replicated (every replica updates it
//! when it applies a committed prepare) and carried in checkpoints.
//!
//! It is what makes a retried request land exactly once: a request whose number the table has seen
//! is answered from the cached reply, never applied again, on whichever replica is primary, after
//! any number of view changes and restarts. Bounded by `clients_max`: registering past it evicts
//! the session that was least recently active (ties broken by client id, so every replica evicts
//! the same one), and that client's next request is answered with an eviction.

use std::collections::BTreeMap;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientEntry {
    pub session: u64,
    /// The user the session registered as (the register request's `user_id`).
    pub user_id: u32,
    /// The last request number applied for this session (0 after register).
    pub request: u64,
    /// The op that applied it, and the reply it produced.
    pub reply_op: u64,
    pub reply_timestamp: u64,
    pub reply_operation: u8,
    pub reply: Vec<u8>,
}

/// Every outcome of looking a request up in the table.
#[derive(Debug, PartialEq, Eq)]
pub enum RequestOutcome<'a> {
    /// Never seen: prepare it.
    New,
    /// Already applied: answer with this cached reply, apply nothing.
    Duplicate(&'a ClientEntry),
    /// Older than the last applied request: the client has moved on; ignore it.
    Stale,
    /// The client has no session here (never registered, or evicted), or another session: tell
    /// the client it was evicted.
    Evicted,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClientTable {
    entries: BTreeMap<u128, ClientEntry>,
    clients_max: usize,
}

impl ClientTable {
    pub fn new(clients_max: usize) -> ClientTable {
        assert!(clients_max >= 1);
        ClientTable { entries: BTreeMap::new(), clients_max }
    }

    pub fn clients_max(&self) -> usize {
        self.clients_max
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn get(&self, client: u128) -> Option<&ClientEntry> {
        self.entries.get(&client)
    }

    pub fn outcome(&self, client: u128, session: u64, request: u64) -> RequestOutcome<'_> {
        match self.entries.get(&client) {
            None => RequestOutcome::Evicted,
            Some(entry) if entry.session != session => RequestOutcome::Evicted,
            Some(entry) if request < entry.request => RequestOutcome::Stale,
            Some(entry) if request == entry.request => RequestOutcome::Duplicate(entry),
            Some(_) => RequestOutcome::New,
        }
    }

    /// Registers a session (the op that committed the register). Returns the client evicted to
    /// make room, if any.
    pub fn register(&mut self, client: u128, entry: ClientEntry) -> Option<u128> {
        assert!(!self.entries.contains_key(&client));
        let mut evicted = None;
        if self.entries.len() == self.clients_max {
            let (oldest, _) = self
                .entries
                .iter()
                .min_by_key(|(client, entry)| (entry.reply_op, **client))
                .expect("a full table has entries");
            let oldest = *oldest;
            self.entries.remove(&oldest);
            evicted = Some(oldest);
        }
        self.entries.insert(client, entry);
        assert!(self.entries.len() <= self.clients_max);
        evicted
    }

    /// Ends a session: its entry goes.
    pub fn unregister(&mut self, client: u128) {
        self.entries.remove(&client);
    }

    /// Records an applied request and its reply.
    pub fn update(&mut self, client: u128, entry: ClientEntry) {
        let existing = self.entries.get_mut(&client).expect("update of a registered client");
        assert_eq!(existing.session, entry.session);
        assert!(entry.request > existing.request);
        *existing = entry;
    }

    pub fn encode(&self, bytes: &mut Vec<u8>) {
        bytes.extend_from_slice(&(self.clients_max as u32).to_le_bytes());
        bytes.extend_from_slice(&(self.entries.len() as u32).to_le_bytes());
        for (client, entry) in &self.entries {
            bytes.extend_from_slice(&client.to_le_bytes());
            bytes.extend_from_slice(&entry.session.to_le_bytes());
            bytes.extend_from_slice(&entry.user_id.to_le_bytes());
            bytes.extend_from_slice(&entry.request.to_le_bytes());
            bytes.extend_from_slice(&entry.reply_op.to_le_bytes());
            bytes.extend_from_slice(&entry.reply_timestamp.to_le_bytes());
            bytes.push(entry.reply_operation);
            bytes.extend_from_slice(&(entry.reply.len() as u32).to_le_bytes());
            bytes.extend_from_slice(&entry.reply);
        }
    }

    /// Decodes a table; returns it and the bytes consumed. `None` on malformed input.
    pub fn decode(bytes: &[u8]) -> Option<(ClientTable, usize)> {
        let mut offset = 0usize;
        let mut take = |n: usize| -> Option<&[u8]> {
            let slice = bytes.get(offset..offset.checked_add(n)?)?;
            offset += n;
            Some(slice)
        };
        let clients_max = u32::from_le_bytes(take(4)?.try_into().ok()?) as usize;
        let count = u32::from_le_bytes(take(4)?.try_into().ok()?) as usize;
        if clients_max == 0 || count > clients_max {
            return None;
        }
        let mut table = ClientTable::new(clients_max);
        for _ in 0..count {
            let client = u128::from_le_bytes(take(16)?.try_into().ok()?);
            let session = u64::from_le_bytes(take(8)?.try_into().ok()?);
            let user_id = u32::from_le_bytes(take(4)?.try_into().ok()?);
            let request = u64::from_le_bytes(take(8)?.try_into().ok()?);
            let reply_op = u64::from_le_bytes(take(8)?.try_into().ok()?);
            let reply_timestamp = u64::from_le_bytes(take(8)?.try_into().ok()?);
            let reply_operation = take(1)?[0];
            let reply_len = u32::from_le_bytes(take(4)?.try_into().ok()?) as usize;
            let reply = take(reply_len)?.to_vec();
            let entry = ClientEntry { session, user_id, request, reply_op, reply_timestamp, reply_operation, reply };
            table.entries.insert(client, entry);
        }
        Some((table, offset))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(session: u64, op: u64) -> ClientEntry {
        ClientEntry {
            session,
            user_id: 0,
            request: 0,
            reply_op: op,
            reply_timestamp: 0,
            reply_operation: 1,
            reply: vec![],
        }
    }

    #[test]
    fn outcomes_and_eviction() {
        let mut table = ClientTable::new(2);
        assert_eq!(table.register(1, entry(10, 10)), None);
        assert_eq!(table.register(2, entry(11, 11)), None);
        assert_eq!(table.outcome(1, 10, 1), RequestOutcome::New);
        assert_eq!(table.outcome(1, 9, 1), RequestOutcome::Evicted);
        let mut applied = entry(10, 12);
        applied.request = 1;
        table.update(1, applied);
        assert!(matches!(table.outcome(1, 10, 1), RequestOutcome::Duplicate(_)));
        assert_eq!(table.outcome(1, 10, 0), RequestOutcome::Stale);
        // Client 2 was least recently active: it goes.
        assert_eq!(table.register(3, entry(13, 13)), Some(2));
        assert_eq!(table.outcome(2, 11, 1), RequestOutcome::Evicted);
        let mut bytes = Vec::new();
        table.encode(&mut bytes);
        assert_eq!(ClientTable::decode(&bytes), Some((table, bytes.len())));
    }
}
