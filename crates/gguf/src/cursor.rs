//! A bounds-checked little-endian reader over the file bytes.
//!
//! Every read checks the remaining length first and reports the byte offset on failure,
//! so parsing never indexes out of bounds.

use crate::{GgufError, Result};

pub(crate) struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        Cursor { buf, pos: 0 }
    }

    /// Current byte offset.
    pub fn pos(&self) -> usize {
        self.pos
    }

    /// Bytes left after the current position.
    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    /// Takes `n` bytes, or reports what was being read and where.
    pub fn take(&mut self, n: u64, what: &'static str) -> Result<&'a [u8]> {
        let available = self.remaining();
        if n > available as u64 {
            return Err(GgufError::Truncated {
                what,
                offset: self.pos as u64,
                needed: n,
                available: available as u64,
            });
        }
        let start = self.pos;
        self.pos += n as usize;
        Ok(&self.buf[start..self.pos])
    }

    fn array<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N]> {
        let bytes = self.take(N as u64, what)?;
        Ok(bytes.try_into().expect("take returned exactly N bytes"))
    }

    pub fn u8(&mut self, what: &'static str) -> Result<u8> {
        Ok(self.array::<1>(what)?[0])
    }
    pub fn u16(&mut self, what: &'static str) -> Result<u16> {
        self.array(what).map(u16::from_le_bytes)
    }
    pub fn u32(&mut self, what: &'static str) -> Result<u32> {
        self.array(what).map(u32::from_le_bytes)
    }
    pub fn u64(&mut self, what: &'static str) -> Result<u64> {
        self.array(what).map(u64::from_le_bytes)
    }
    pub fn f32(&mut self, what: &'static str) -> Result<f32> {
        self.array(what).map(f32::from_le_bytes)
    }
    pub fn f64(&mut self, what: &'static str) -> Result<f64> {
        self.array(what).map(f64::from_le_bytes)
    }

    /// A GGUF string: u64 length + UTF-8 bytes, length capped at `limit`.
    pub fn string(&mut self, what: &'static str, limit: u64) -> Result<String> {
        let len_offset = self.pos as u64;
        let len = self.u64(what)?;
        if len > limit {
            return Err(GgufError::LimitExceeded {
                what: "string length",
                offset: len_offset,
                value: len,
                limit,
            });
        }
        let start = self.pos as u64;
        let bytes = self.take(len, what)?;
        std::str::from_utf8(bytes)
            .map(str::to_owned)
            .map_err(|_| GgufError::InvalidUtf8 {
                what,
                offset: start,
            })
    }

    /// Reads a count and checks it against `limit` and against the bytes left, assuming
    /// each item needs at least `min_item_bytes`. WHY: callers may then allocate
    /// `count` items without trusting the file.
    pub fn count(&mut self, what: &'static str, limit: u64, min_item_bytes: u64) -> Result<u64> {
        let offset = self.pos as u64;
        let count = self.u64(what)?;
        if count > limit {
            return Err(GgufError::LimitExceeded {
                what,
                offset,
                value: count,
                limit,
            });
        }
        let needed = count.saturating_mul(min_item_bytes);
        if needed > self.remaining() as u64 {
            return Err(GgufError::Truncated {
                what,
                offset: self.pos as u64,
                needed,
                available: self.remaining() as u64,
            });
        }
        Ok(count)
    }
}
