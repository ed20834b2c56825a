//! A cursor over an untrusted body: every read is checked against the bytes left and tracks the
//! offset, so a malformed body yields a `WireError` naming where it went wrong, never a panic.
//! Nothing here allocates: reads borrow from the body.

use super::WireError;

pub struct Reader<'a> {
    bytes: &'a [u8],
    offset: usize,
    /// Where `bytes` starts in the whole body, so that a nested reader's errors name body offsets.
    base: usize,
}

impl<'a> Reader<'a> {
    pub fn new(bytes: &'a [u8]) -> Reader<'a> {
        Reader { bytes, offset: 0, base: 0 }
    }

    /// The offset of the next byte, counted from the start of the body.
    pub fn offset(&self) -> usize {
        self.base + self.offset
    }

    pub fn remaining(&self) -> usize {
        self.bytes.len() - self.offset
    }

    pub fn is_empty(&self) -> bool {
        self.remaining() == 0
    }

    pub fn bytes(&mut self, len: usize, what: &'static str) -> Result<&'a [u8], WireError> {
        if len > self.remaining() {
            return Err(WireError::Short { offset: self.offset(), needed: len, what });
        }
        let bytes = &self.bytes[self.offset..self.offset + len];
        self.offset += len;
        Ok(bytes)
    }

    fn array<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N], WireError> {
        let bytes = self.bytes(N, what)?;
        let mut array = [0u8; N];
        array.copy_from_slice(bytes);
        Ok(array)
    }

    pub fn u8(&mut self, what: &'static str) -> Result<u8, WireError> {
        Ok(self.array::<1>(what)?[0])
    }

    pub fn u16(&mut self, what: &'static str) -> Result<u16, WireError> {
        self.array(what).map(u16::from_le_bytes)
    }

    pub fn u32(&mut self, what: &'static str) -> Result<u32, WireError> {
        self.array(what).map(u32::from_le_bytes)
    }

    pub fn u64(&mut self, what: &'static str) -> Result<u64, WireError> {
        self.array(what).map(u64::from_le_bytes)
    }

    /// Bit for bit, NaNs included, so that it re-encodes to the same bytes.
    pub fn f32(&mut self, what: &'static str) -> Result<f32, WireError> {
        self.array(what).map(f32::from_le_bytes)
    }

    pub fn u128(&mut self, what: &'static str) -> Result<u128, WireError> {
        self.array(what).map(u128::from_le_bytes)
    }

    /// A flag byte: 0 or 1. Anything else is refused so that a decoded body re-encodes to itself.
    pub fn bool(&mut self, what: &'static str) -> Result<bool, WireError> {
        let offset = self.offset();
        match self.u8(what)? {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(WireError::Invalid { offset, what }),
        }
    }

    /// A u32 item count, refused unless `count` items of at least `item_size_min` bytes each could
    /// fit in what is left: a lying count fails here, before any loop or allocation trusts it.
    pub fn count(&mut self, what: &'static str, item_size_min: usize) -> Result<u32, WireError> {
        let count = self.u32(what)?;
        self.check_count(count, item_size_min, what)?;
        Ok(count)
    }

    /// Refuses a count read earlier whose items could not fit in what is left.
    pub fn check_count(&self, count: u32, item_size_min: usize, what: &'static str) -> Result<(), WireError> {
        let needed = count as u64 * item_size_min as u64;
        if needed > self.remaining() as u64 {
            return Err(WireError::Short { offset: self.offset(), needed: needed as usize, what });
        }
        Ok(())
    }

    /// `len` bytes as a reader of their own, whose errors still name offsets in the whole body.
    pub fn nested(&mut self, len: usize, what: &'static str) -> Result<Reader<'a>, WireError> {
        let base = self.offset();
        let bytes = self.bytes(len, what)?;
        Ok(Reader { bytes, offset: 0, base })
    }

    /// Everything left.
    pub fn rest(&mut self) -> &'a [u8] {
        let rest = &self.bytes[self.offset..];
        self.offset = self.bytes.len();
        rest
    }

    /// Ends a decode: a body longer than its fields is malformed.
    pub fn finish(self) -> Result<(), WireError> {
        if self.is_empty() {
            Ok(())
        } else {
            Err(WireError::TrailingBytes { offset: self.offset() })
        }
    }
}

/// Appending little-endian fields to a body being encoded.
pub(crate) trait Put {
    fn put_u8(&mut self, value: u8);
    fn put_u16(&mut self, value: u16);
    fn put_u32(&mut self, value: u32);
    fn put_u64(&mut self, value: u64);
    fn put_f32(&mut self, value: f32);
    fn put_bool(&mut self, value: bool);
    /// A length as u32. Our own values never approach 4 GiB (a frame is capped at 64 MiB).
    fn put_len_u32(&mut self, len: usize);
    /// `[len u32][bytes]`.
    fn put_bytes_u32(&mut self, bytes: &[u8]);
}

impl Put for Vec<u8> {
    fn put_u8(&mut self, value: u8) {
        self.push(value);
    }
    fn put_u16(&mut self, value: u16) {
        self.extend_from_slice(&value.to_le_bytes());
    }
    fn put_u32(&mut self, value: u32) {
        self.extend_from_slice(&value.to_le_bytes());
    }
    fn put_u64(&mut self, value: u64) {
        self.extend_from_slice(&value.to_le_bytes());
    }
    fn put_f32(&mut self, value: f32) {
        self.extend_from_slice(&value.to_le_bytes());
    }
    fn put_bool(&mut self, value: bool) {
        self.push(value as u8);
    }
    fn put_len_u32(&mut self, len: usize) {
        self.put_u32(u32::try_from(len).expect("a length on the wire fits in u32"));
    }
    fn put_bytes_u32(&mut self, bytes: &[u8]) {
        self.put_len_u32(bytes.len());
        self.extend_from_slice(bytes);
    }
}

/// `[len u32][bytes]` read back.
pub(crate) fn bytes_u32<'a>(reader: &mut Reader<'a>, what: &'static str) -> Result<&'a [u8], WireError> {
    let len = reader.u32(what)?;
    reader.bytes(len as usize, what)
}

/// `[len u32][UTF-8 bytes]` read back.
pub(crate) fn string_u32(reader: &mut Reader<'_>, what: &'static str) -> Result<String, WireError> {
    let offset = reader.offset();
    let bytes = bytes_u32(reader, what)?;
    utf8(bytes, offset, what)
}

pub(crate) fn utf8(bytes: &[u8], offset: usize, what: &'static str) -> Result<String, WireError> {
    std::str::from_utf8(bytes).map(str::to_owned).map_err(|_| WireError::Invalid { offset, what })
}
