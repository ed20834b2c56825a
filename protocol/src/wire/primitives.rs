//! The building blocks bodies are made of (`PROTOCOL.md`, "Building blocks"): Identifier, Name,
//! Consumer, Partitioning, PollingStrategy, and the u8-length byte strings of login bodies.
//!
//! Each type can hold only what its wire form can carry (constructors check lengths and UTF-8),
//! so `write` never produces bytes that `read` would refuse.

use super::reader::{utf8, Put, Reader};
use super::WireError;

/// The longest Name, string Identifier, messages key or u8-length byte string.
pub const SHORT_LEN_MAX: usize = 255;

/// `[len u8][1..=255 bytes UTF-8]`: stream, topic, consumer group and SDK names.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Name(String);

impl Name {
    pub fn new(name: impl Into<String>) -> Result<Name, WireError> {
        let name = name.into();
        if name.is_empty() || name.len() > SHORT_LEN_MAX {
            return Err(WireError::Invalid { offset: 0, what: "name length (1..=255 bytes)" });
        }
        Ok(Name(name))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn read(reader: &mut Reader<'_>) -> Result<Name, WireError> {
        let offset = reader.offset();
        let len = reader.u8("name length")?;
        if len == 0 {
            return Err(WireError::Invalid { offset, what: "name length (1..=255 bytes)" });
        }
        let bytes = reader.bytes(len as usize, "name")?;
        Ok(Name(utf8(bytes, offset + 1, "name (UTF-8)")?))
    }

    pub fn write(&self, out: &mut Vec<u8>) {
        out.put_u8(self.0.len() as u8);
        out.extend_from_slice(self.0.as_bytes());
    }
}

/// `[len u8][0..=255 bytes]`, not necessarily UTF-8: a password or a personal access token.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ShortBytes(Vec<u8>);

impl ShortBytes {
    pub fn new(bytes: impl Into<Vec<u8>>) -> Result<ShortBytes, WireError> {
        let bytes = bytes.into();
        if bytes.len() > SHORT_LEN_MAX {
            return Err(WireError::Invalid { offset: 0, what: "length (0..=255 bytes)" });
        }
        Ok(ShortBytes(bytes))
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    pub fn read(reader: &mut Reader<'_>, what: &'static str) -> Result<ShortBytes, WireError> {
        let len = reader.u8(what)?;
        Ok(ShortBytes(reader.bytes(len as usize, what)?.to_vec()))
    }

    pub fn write(&self, out: &mut Vec<u8>) {
        out.put_u8(self.0.len() as u8);
        out.extend_from_slice(&self.0);
    }
}

/// A stream, topic or consumer group, by number or by name.
/// Wire: `[kind u8][len u8]` then a u32 (kind 1, len 4) or the name's bytes (kind 2).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Identifier {
    Numeric(u32),
    Name(Name),
}

impl Identifier {
    pub fn read(reader: &mut Reader<'_>) -> Result<Identifier, WireError> {
        let kind_offset = reader.offset();
        let kind = reader.u8("identifier kind")?;
        let len_offset = reader.offset();
        let len = reader.u8("identifier length")?;
        match kind {
            1 if len == 4 => Ok(Identifier::Numeric(reader.u32("numeric identifier")?)),
            1 => Err(WireError::Invalid { offset: len_offset, what: "numeric identifier length (4)" }),
            2 if len == 0 => Err(WireError::Invalid { offset: len_offset, what: "string identifier length (1..=255)" }),
            2 => {
                let bytes = reader.bytes(len as usize, "string identifier")?;
                Ok(Identifier::Name(Name(utf8(bytes, len_offset + 1, "string identifier (UTF-8)")?)))
            }
            _ => Err(WireError::Invalid { offset: kind_offset, what: "identifier kind (1 numeric, 2 string)" }),
        }
    }

    pub fn write(&self, out: &mut Vec<u8>) {
        match self {
            Identifier::Numeric(id) => {
                out.put_u8(1);
                out.put_u8(4);
                out.put_u32(*id);
            }
            Identifier::Name(name) => {
                out.put_u8(2);
                name.write(out);
            }
        }
    }

    /// Bytes `write` produces: send_messages' metadata length counts them.
    pub fn encoded_len(&self) -> usize {
        match self {
            Identifier::Numeric(_) => 6,
            Identifier::Name(name) => 2 + name.0.len(),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ConsumerKind {
    Consumer = 1,
    ConsumerGroup = 2,
}

/// Who reads: a single consumer or a consumer group. Wire: `[kind u8][Identifier]`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Consumer {
    pub kind: ConsumerKind,
    pub id: Identifier,
}

impl Consumer {
    pub fn read(reader: &mut Reader<'_>) -> Result<Consumer, WireError> {
        let offset = reader.offset();
        let kind = match reader.u8("consumer kind")? {
            1 => ConsumerKind::Consumer,
            2 => ConsumerKind::ConsumerGroup,
            _ => return Err(WireError::Invalid { offset, what: "consumer kind (1 consumer, 2 consumer group)" }),
        };
        Ok(Consumer { kind, id: Identifier::read(reader)? })
    }

    pub fn write(&self, out: &mut Vec<u8>) {
        out.put_u8(self.kind as u8);
        self.id.write(out);
    }
}

/// The key of messages_key partitioning: 1..=255 bytes, any bytes.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct MessagesKey(Vec<u8>);

impl MessagesKey {
    pub fn new(key: impl Into<Vec<u8>>) -> Result<MessagesKey, WireError> {
        let key = key.into();
        if key.is_empty() || key.len() > SHORT_LEN_MAX {
            return Err(WireError::Invalid { offset: 0, what: "messages key length (1..=255 bytes)" });
        }
        Ok(MessagesKey(key))
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }
}

/// Which partition a send goes to. Wire: `[kind u8][len u8]` then nothing (balanced, len 0),
/// a u32 (partition_id, len 4) or the key (messages_key, len 1..=255).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Partitioning {
    Balanced,
    PartitionId(u32),
    MessagesKey(MessagesKey),
}

impl Partitioning {
    pub fn read(reader: &mut Reader<'_>) -> Result<Partitioning, WireError> {
        let kind_offset = reader.offset();
        let kind = reader.u8("partitioning kind")?;
        let len_offset = reader.offset();
        let len = reader.u8("partitioning length")?;
        let bad_len = |what| Err(WireError::Invalid { offset: len_offset, what });
        match kind {
            1 if len == 0 => Ok(Partitioning::Balanced),
            1 => bad_len("balanced partitioning length (0)"),
            2 if len == 4 => Ok(Partitioning::PartitionId(reader.u32("partition id")?)),
            2 => bad_len("partition_id partitioning length (4)"),
            3 if len == 0 => bad_len("messages key length (1..=255)"),
            3 => Ok(Partitioning::MessagesKey(MessagesKey(reader.bytes(len as usize, "messages key")?.to_vec()))),
            _ => Err(WireError::Invalid {
                offset: kind_offset,
                what: "partitioning kind (1 balanced, 2 partition_id, 3 messages_key)",
            }),
        }
    }

    pub fn write(&self, out: &mut Vec<u8>) {
        match self {
            Partitioning::Balanced => {
                out.put_u8(1);
                out.put_u8(0);
            }
            Partitioning::PartitionId(id) => {
                out.put_u8(2);
                out.put_u8(4);
                out.put_u32(*id);
            }
            Partitioning::MessagesKey(key) => {
                out.put_u8(3);
                out.put_u8(key.0.len() as u8);
                out.extend_from_slice(&key.0);
            }
        }
    }

    pub fn encoded_len(&self) -> usize {
        match self {
            Partitioning::Balanced => 2,
            Partitioning::PartitionId(_) => 6,
            Partitioning::MessagesKey(key) => 2 + key.0.len(),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PollingKind {
    Offset = 1,
    Timestamp = 2,
    First = 3,
    Last = 4,
    Next = 5,
}

/// Where a poll starts. Wire: `[kind u8][value u64]`, 9 bytes. First, last and next ignore the
/// value, but it is kept so that a body re-encodes to the bytes it came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PollingStrategy {
    pub kind: PollingKind,
    pub value: u64,
}

impl PollingStrategy {
    pub fn read(reader: &mut Reader<'_>) -> Result<PollingStrategy, WireError> {
        let offset = reader.offset();
        let kind = match reader.u8("polling strategy kind")? {
            1 => PollingKind::Offset,
            2 => PollingKind::Timestamp,
            3 => PollingKind::First,
            4 => PollingKind::Last,
            5 => PollingKind::Next,
            _ => {
                return Err(WireError::Invalid {
                    offset,
                    what: "polling strategy kind (1 offset, 2 timestamp, 3 first, 4 last, 5 next)",
                })
            }
        };
        Ok(PollingStrategy { kind, value: reader.u64("polling strategy value")? })
    }

    pub fn write(&self, out: &mut Vec<u8>) {
        out.put_u8(self.kind as u8);
        out.put_u64(self.value);
    }
}
