//! Options: the typed key/value settings of streams, topics and users (`PROTOCOL.md`, "Options").
//!
//! A block is pairs back to back. A pair is two entries, each `[kind u8][len u32][bytes]`: the key
//! (kind 2, string) and then the value, whose kind fixes its length for the scalar kinds. The
//! block travels in two forms, as the SDK sends and reads it:
//! - bare, running to the end of the body with no length in front: the last field of the requests
//!   create_stream, update_stream, create_topic, update_topic, create_user and update_user
//!   (`read_bare` / `write_bare`);
//! - `[len u32]` then `len` bytes of pairs: inside replies, where more follows (`read` / `write`).
//!
//! Invariants kept by `Options::new` and checked by both reads (the SDK's rules, so that whatever
//! Vireo stores and echoes the SDK can decode): at most `OPTIONS_PAIRS_MAX` pairs and
//! `OPTIONS_SIZE_MAX` bytes of pairs, every entry (key or value) of 1..=255 bytes, keys UTF-8 and
//! never twice, every value's kind known (1..=15) and its length right for that kind.

use super::reader::{utf8, Put, Reader};
use super::WireError;

pub const OPTIONS_PAIRS_MAX: usize = 1024;
/// The bytes of the pairs, not counting the u32 length in front (100 kB, decimal).
pub const OPTIONS_SIZE_MAX: usize = 100_000;
pub const OPTION_KEY_LEN_MAX: usize = 255;
/// The longest value entry (raw bytes or a string); scalar values are shorter by their kind.
pub const OPTION_VALUE_LEN_MAX: usize = 255;

const KIND_STRING: u8 = 2;
/// Kind byte and u32 length of one entry.
const ENTRY_OVERHEAD: usize = 5;

#[derive(Clone, Debug, PartialEq)]
pub enum OptionValue {
    Raw(Vec<u8>),
    String(String),
    Bool(bool),
    I8(i8),
    I16(i16),
    I32(i32),
    I64(i64),
    I128(i128),
    U8(u8),
    U16(u16),
    U32(u32),
    U64(u64),
    U128(u128),
    F32(f32),
    F64(f64),
}

impl OptionValue {
    pub fn kind(&self) -> u8 {
        match self {
            OptionValue::Raw(_) => 1,
            OptionValue::String(_) => 2,
            OptionValue::Bool(_) => 3,
            OptionValue::I8(_) => 4,
            OptionValue::I16(_) => 5,
            OptionValue::I32(_) => 6,
            OptionValue::I64(_) => 7,
            OptionValue::I128(_) => 8,
            OptionValue::U8(_) => 9,
            OptionValue::U16(_) => 10,
            OptionValue::U32(_) => 11,
            OptionValue::U64(_) => 12,
            OptionValue::U128(_) => 13,
            OptionValue::F32(_) => 14,
            OptionValue::F64(_) => 15,
        }
    }

    fn value_bytes(&self) -> Vec<u8> {
        match self {
            OptionValue::Raw(bytes) => bytes.clone(),
            OptionValue::String(string) => string.as_bytes().to_vec(),
            OptionValue::Bool(value) => vec![*value as u8],
            OptionValue::I8(value) => value.to_le_bytes().to_vec(),
            OptionValue::I16(value) => value.to_le_bytes().to_vec(),
            OptionValue::I32(value) => value.to_le_bytes().to_vec(),
            OptionValue::I64(value) => value.to_le_bytes().to_vec(),
            OptionValue::I128(value) => value.to_le_bytes().to_vec(),
            OptionValue::U8(value) => value.to_le_bytes().to_vec(),
            OptionValue::U16(value) => value.to_le_bytes().to_vec(),
            OptionValue::U32(value) => value.to_le_bytes().to_vec(),
            OptionValue::U64(value) => value.to_le_bytes().to_vec(),
            OptionValue::U128(value) => value.to_le_bytes().to_vec(),
            OptionValue::F32(value) => value.to_le_bytes().to_vec(),
            OptionValue::F64(value) => value.to_le_bytes().to_vec(),
        }
    }

    fn encoded_len(&self) -> usize {
        ENTRY_OVERHEAD
            + match self {
                OptionValue::Raw(bytes) => bytes.len(),
                OptionValue::String(string) => string.len(),
                _ => scalar_len(self.kind()).expect("scalar kinds have a fixed length"),
            }
    }

    fn read(reader: &mut Reader<'_>) -> Result<OptionValue, WireError> {
        let kind_offset = reader.offset();
        let kind = reader.u8("option value kind")?;
        let len_offset = reader.offset();
        let len = reader.u32("option value length")? as usize;
        if !(1..=15).contains(&kind) {
            return Err(WireError::Invalid { offset: kind_offset, what: "option value kind (1..=15)" });
        }
        if scalar_len(kind).is_some_and(|expected| expected != len) {
            return Err(WireError::Invalid { offset: len_offset, what: "option value length for its kind" });
        }
        if len == 0 || len > OPTION_VALUE_LEN_MAX {
            return Err(WireError::Invalid { offset: len_offset, what: "option value length (1..=255 bytes)" });
        }
        let offset = reader.offset();
        let bytes = reader.bytes(len, "option value")?;
        fn array<const N: usize>(bytes: &[u8]) -> [u8; N] {
            bytes.try_into().expect("length checked against the kind")
        }
        Ok(match kind {
            1 => OptionValue::Raw(bytes.to_vec()),
            2 => OptionValue::String(utf8(bytes, offset, "option string value (UTF-8)")?),
            3 => match bytes[0] {
                0 => OptionValue::Bool(false),
                1 => OptionValue::Bool(true),
                _ => return Err(WireError::Invalid { offset, what: "option bool value (0 or 1)" }),
            },
            4 => OptionValue::I8(i8::from_le_bytes(array(bytes))),
            5 => OptionValue::I16(i16::from_le_bytes(array(bytes))),
            6 => OptionValue::I32(i32::from_le_bytes(array(bytes))),
            7 => OptionValue::I64(i64::from_le_bytes(array(bytes))),
            8 => OptionValue::I128(i128::from_le_bytes(array(bytes))),
            9 => OptionValue::U8(bytes[0]),
            10 => OptionValue::U16(u16::from_le_bytes(array(bytes))),
            11 => OptionValue::U32(u32::from_le_bytes(array(bytes))),
            12 => OptionValue::U64(u64::from_le_bytes(array(bytes))),
            13 => OptionValue::U128(u128::from_le_bytes(array(bytes))),
            14 => OptionValue::F32(f32::from_le_bytes(array(bytes))),
            _ => OptionValue::F64(f64::from_le_bytes(array(bytes))),
        })
    }
}

/// The length a value of `kind` must have, for kinds with a fixed length.
fn scalar_len(kind: u8) -> Option<usize> {
    match kind {
        3 | 4 | 9 => Some(1),
        5 | 10 => Some(2),
        6 | 11 | 14 => Some(4),
        7 | 12 | 15 => Some(8),
        8 | 13 => Some(16),
        _ => None,
    }
}

/// Key/value pairs, in the order they were sent.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Options {
    pairs: Vec<(String, OptionValue)>,
}

impl Options {
    pub fn empty() -> Options {
        Options::default()
    }

    pub fn new(pairs: Vec<(String, OptionValue)>) -> Result<Options, WireError> {
        if pairs.len() > OPTIONS_PAIRS_MAX {
            return Err(WireError::TooLarge {
                offset: 0,
                what: "option pairs",
                len: pairs.len() as u64,
                max: OPTIONS_PAIRS_MAX as u64,
            });
        }
        for (index, (key, _)) in pairs.iter().enumerate() {
            if key.is_empty() || key.len() > OPTION_KEY_LEN_MAX {
                return Err(WireError::Invalid { offset: 0, what: "option key length (1..=255 bytes)" });
            }
            if pairs[..index].iter().any(|(earlier, _)| earlier == key) {
                return Err(WireError::Invalid { offset: 0, what: "option key (given twice)" });
            }
        }
        for (_, value) in &pairs {
            let len = value.encoded_len() - ENTRY_OVERHEAD;
            if len == 0 || len > OPTION_VALUE_LEN_MAX {
                return Err(WireError::Invalid { offset: 0, what: "option value length (1..=255 bytes)" });
            }
        }
        let options = Options { pairs };
        let size = options.pairs_len();
        if size > OPTIONS_SIZE_MAX {
            return Err(WireError::TooLarge {
                offset: 0,
                what: "options size",
                len: size as u64,
                max: OPTIONS_SIZE_MAX as u64,
            });
        }
        Ok(options)
    }

    pub fn pairs(&self) -> &[(String, OptionValue)] {
        &self.pairs
    }

    pub fn get(&self, key: &str) -> Option<&OptionValue> {
        self.pairs.iter().find(|(k, _)| k == key).map(|(_, value)| value)
    }

    pub fn is_empty(&self) -> bool {
        self.pairs.is_empty()
    }

    fn pairs_len(&self) -> usize {
        self.pairs.iter().map(|(key, value)| ENTRY_OVERHEAD + key.len() + value.encoded_len()).sum()
    }

    /// `[len u32]` then the pairs: the form inside replies.
    pub fn read(reader: &mut Reader<'_>) -> Result<Options, WireError> {
        let len_offset = reader.offset();
        let len = reader.u32("options length")? as usize;
        if len > OPTIONS_SIZE_MAX {
            return Err(WireError::TooLarge {
                offset: len_offset,
                what: "options length",
                len: len as u64,
                max: OPTIONS_SIZE_MAX as u64,
            });
        }
        Options::read_pairs(reader.nested(len, "options")?)
    }

    /// The pairs alone, running to the end of the body: the form that ends a request. Consumes
    /// everything `reader` has left.
    pub fn read_bare(reader: &mut Reader<'_>) -> Result<Options, WireError> {
        let offset = reader.offset();
        let len = reader.remaining();
        if len > OPTIONS_SIZE_MAX {
            return Err(WireError::TooLarge {
                offset,
                what: "options size",
                len: len as u64,
                max: OPTIONS_SIZE_MAX as u64,
            });
        }
        Options::read_pairs(reader.nested(len, "options")?)
    }

    fn read_pairs(mut block: Reader<'_>) -> Result<Options, WireError> {
        let mut pairs: Vec<(String, OptionValue)> = Vec::new();
        while !block.is_empty() {
            let key_offset = block.offset();
            if pairs.len() == OPTIONS_PAIRS_MAX {
                return Err(WireError::TooLarge {
                    offset: key_offset,
                    what: "option pairs",
                    len: OPTIONS_PAIRS_MAX as u64 + 1,
                    max: OPTIONS_PAIRS_MAX as u64,
                });
            }
            if block.u8("option key kind")? != KIND_STRING {
                return Err(WireError::Invalid { offset: key_offset, what: "option key kind (2, string)" });
            }
            let len_offset = block.offset();
            let key_len = block.u32("option key length")? as usize;
            if key_len == 0 || key_len > OPTION_KEY_LEN_MAX {
                return Err(WireError::Invalid { offset: len_offset, what: "option key length (1..=255 bytes)" });
            }
            let key = utf8(block.bytes(key_len, "option key")?, len_offset + 4, "option key (UTF-8)")?;
            if pairs.iter().any(|(earlier, _)| *earlier == key) {
                return Err(WireError::Invalid { offset: key_offset, what: "option key (given twice)" });
            }
            let value = OptionValue::read(&mut block)?;
            pairs.push((key, value));
        }
        Ok(Options { pairs })
    }

    /// `[len u32]` then the pairs.
    pub fn write(&self, out: &mut Vec<u8>) {
        out.put_len_u32(self.pairs_len());
        self.write_bare(out);
    }

    /// The pairs alone: only as the last field of a body.
    pub fn write_bare(&self, out: &mut Vec<u8>) {
        for (key, value) in &self.pairs {
            out.put_u8(KIND_STRING);
            out.put_bytes_u32(key.as_bytes());
            out.put_u8(value.kind());
            out.put_bytes_u32(&value.value_bytes());
        }
    }
}
