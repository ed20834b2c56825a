//! A user's permissions, as create_user, update_permissions and the user replies carry them
//! (the reference's layout, `core/binary_protocol/src/primitives/permissions.rs`).
//!
//! Wire form:
//! ```text
//! [10 flags: global]  manage_servers, read_servers, manage_users, read_users, manage_streams,
//!                     read_streams, manage_topics, read_topics, poll_messages, send_messages
//! [has_streams u8]    1: streams follow, each
//!     [stream_id u32][6 flags] manage_stream, read_stream, manage_topics, read_topics,
//!                              poll_messages, send_messages
//!     [has_topics u8] 1: topics follow, each
//!         [topic_id u32][4 flags] manage_topic, read_topic, poll_messages, send_messages
//!         [has_next_topic u8]
//!     [has_next_stream u8]
//! ```
//!
//! Exactness: every flag and every "has" byte is 0 or 1, and streams (and a stream's topics) come
//! in strictly ascending id order, as the SDK writes them from its ordered maps. Anything else is
//! refused, so a decoded value re-encodes to the bytes it came from; the maps here hold only what
//! that form can carry, so `write` never produces what `read` refuses.

use std::collections::BTreeMap;

use super::reader::{Put, Reader};
use super::WireError;

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Permissions {
    pub global: GlobalPermissions,
    /// Per-stream grants, by stream id.
    pub streams: BTreeMap<u32, StreamPermissions>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GlobalPermissions {
    pub manage_servers: bool,
    pub read_servers: bool,
    pub manage_users: bool,
    pub read_users: bool,
    pub manage_streams: bool,
    pub read_streams: bool,
    pub manage_topics: bool,
    pub read_topics: bool,
    pub poll_messages: bool,
    pub send_messages: bool,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StreamPermissions {
    pub manage_stream: bool,
    pub read_stream: bool,
    pub manage_topics: bool,
    pub read_topics: bool,
    pub poll_messages: bool,
    pub send_messages: bool,
    /// Per-topic grants within the stream, by topic id.
    pub topics: BTreeMap<u32, TopicPermissions>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TopicPermissions {
    pub manage_topic: bool,
    pub read_topic: bool,
    pub poll_messages: bool,
    pub send_messages: bool,
}

/// Reads `has_first` and then entries while their `has_next` byte says 1; each id must exceed the
/// one before it. `read_entry` reads the entry after its id, up to (not including) `has_next`.
/// Every entry takes bytes, so the chain ends with the body however long it claims to be.
fn read_chain<T>(
    reader: &mut Reader<'_>,
    what: &'static str,
    id_what: &'static str,
    order_what: &'static str,
    mut read_entry: impl FnMut(&mut Reader<'_>) -> Result<T, WireError>,
) -> Result<BTreeMap<u32, T>, WireError> {
    let mut entries = BTreeMap::new();
    let mut more = reader.bool(what)?;
    while more {
        let id_offset = reader.offset();
        let id = reader.u32(id_what)?;
        if entries.last_key_value().is_some_and(|(last, _)| *last >= id) {
            return Err(WireError::Invalid { offset: id_offset, what: order_what });
        }
        entries.insert(id, read_entry(reader)?);
        more = reader.bool(what)?;
    }
    Ok(entries)
}

/// Writes `has_first`, then each entry (`write_entry` after its id) and its `has_next` byte.
fn write_chain<T>(out: &mut Vec<u8>, entries: &BTreeMap<u32, T>, write_entry: impl Fn(&T, &mut Vec<u8>)) {
    out.put_bool(!entries.is_empty());
    for (index, (id, entry)) in entries.iter().enumerate() {
        out.put_u32(*id);
        write_entry(entry, out);
        out.put_bool(index + 1 < entries.len());
    }
}

impl Permissions {
    pub fn read(reader: &mut Reader<'_>) -> Result<Permissions, WireError> {
        let global = GlobalPermissions::read(reader)?;
        let streams = read_chain(
            reader,
            "has stream permissions (0 or 1)",
            "stream id",
            "stream id (ascending, each once)",
            StreamPermissions::read,
        )?;
        Ok(Permissions { global, streams })
    }

    pub fn write(&self, out: &mut Vec<u8>) {
        self.global.write(out);
        write_chain(out, &self.streams, StreamPermissions::write);
    }

    /// `[len u32][permissions]`, the length exactly the permissions' bytes.
    pub(crate) fn read_sized(reader: &mut Reader<'_>) -> Result<Permissions, WireError> {
        let len = reader.u32("permissions length")?;
        let mut block = reader.nested(len as usize, "permissions")?;
        let permissions = Permissions::read(&mut block)?;
        block.finish()?;
        Ok(permissions)
    }

    pub(crate) fn write_sized(&self, out: &mut Vec<u8>) {
        let mut block = Vec::new();
        self.write(&mut block);
        out.put_bytes_u32(&block);
    }
}

impl GlobalPermissions {
    fn read(reader: &mut Reader<'_>) -> Result<GlobalPermissions, WireError> {
        Ok(GlobalPermissions {
            manage_servers: reader.bool("manage_servers (0 or 1)")?,
            read_servers: reader.bool("read_servers (0 or 1)")?,
            manage_users: reader.bool("manage_users (0 or 1)")?,
            read_users: reader.bool("read_users (0 or 1)")?,
            manage_streams: reader.bool("manage_streams (0 or 1)")?,
            read_streams: reader.bool("read_streams (0 or 1)")?,
            manage_topics: reader.bool("manage_topics (0 or 1)")?,
            read_topics: reader.bool("read_topics (0 or 1)")?,
            poll_messages: reader.bool("poll_messages (0 or 1)")?,
            send_messages: reader.bool("send_messages (0 or 1)")?,
        })
    }

    fn write(&self, out: &mut Vec<u8>) {
        for flag in [
            self.manage_servers,
            self.read_servers,
            self.manage_users,
            self.read_users,
            self.manage_streams,
            self.read_streams,
            self.manage_topics,
            self.read_topics,
            self.poll_messages,
            self.send_messages,
        ] {
            out.put_bool(flag);
        }
    }
}

impl StreamPermissions {
    fn read(reader: &mut Reader<'_>) -> Result<StreamPermissions, WireError> {
        Ok(StreamPermissions {
            manage_stream: reader.bool("manage_stream (0 or 1)")?,
            read_stream: reader.bool("read_stream (0 or 1)")?,
            manage_topics: reader.bool("manage_topics (0 or 1)")?,
            read_topics: reader.bool("read_topics (0 or 1)")?,
            poll_messages: reader.bool("poll_messages (0 or 1)")?,
            send_messages: reader.bool("send_messages (0 or 1)")?,
            topics: read_chain(
                reader,
                "has topic permissions (0 or 1)",
                "topic id",
                "topic id (ascending, each once)",
                TopicPermissions::read,
            )?,
        })
    }

    fn write(&self, out: &mut Vec<u8>) {
        for flag in [
            self.manage_stream,
            self.read_stream,
            self.manage_topics,
            self.read_topics,
            self.poll_messages,
            self.send_messages,
        ] {
            out.put_bool(flag);
        }
        write_chain(out, &self.topics, TopicPermissions::write);
    }
}

impl TopicPermissions {
    fn read(reader: &mut Reader<'_>) -> Result<TopicPermissions, WireError> {
        Ok(TopicPermissions {
            manage_topic: reader.bool("manage_topic (0 or 1)")?,
            read_topic: reader.bool("read_topic (0 or 1)")?,
            poll_messages: reader.bool("poll_messages (0 or 1)")?,
            send_messages: reader.bool("send_messages (0 or 1)")?,
        })
    }

    fn write(&self, out: &mut Vec<u8>) {
        for flag in [self.manage_topic, self.read_topic, self.poll_messages, self.send_messages] {
            out.put_bool(flag);
        }
    }
}
