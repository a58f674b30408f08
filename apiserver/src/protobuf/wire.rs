//! The protobuf wire format: varints, keys, length-delimited and fixed-width values.
//!
//! [`Reader`] never panics and never reads past its slice: every malformation (a varint
//! longer than 10 bytes, a length past the end, a group or an unknown wire type, tag 0) is a
//! [`WireError`].

use std::fmt;

/// How a field's value is laid out on the wire (the low 3 bits of its key).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WireType {
    Varint = 0,
    Fixed64 = 1,
    Len = 2,
    Fixed32 = 5,
}

impl fmt::Display for WireType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Varint => "varint",
            Self::Fixed64 => "fixed64",
            Self::Len => "length-delimited",
            Self::Fixed32 => "fixed32",
        })
    }
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    #[error("unexpected end of data")]
    Truncated,
    #[error("varint longer than 64 bits")]
    VarintOverflow,
    #[error("invalid field number 0")]
    ZeroTag,
    #[error("field number {0} out of range")]
    TagRange(u64),
    #[error("unsupported wire type {0} (groups are not used by Kubernetes)")]
    UnsupportedWireType(u8),
}

/// A cursor over one message's bytes.
pub struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        Self { buf, pos: 0 }
    }

    pub fn is_empty(&self) -> bool {
        self.pos >= self.buf.len()
    }

    pub fn varint(&mut self) -> Result<u64, WireError> {
        let mut v = 0u64;
        for i in 0..10 {
            let b = *self.buf.get(self.pos).ok_or(WireError::Truncated)?;
            self.pos += 1;
            if i == 9 && b > 1 {
                return Err(WireError::VarintOverflow);
            }
            v |= u64::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(WireError::VarintOverflow)
    }

    /// A field key: (field number, wire type).
    pub fn key(&mut self) -> Result<(u32, WireType), WireError> {
        let k = self.varint()?;
        let tag = k >> 3;
        if tag == 0 {
            return Err(WireError::ZeroTag);
        }
        let tag = u32::try_from(tag).ok().filter(|t| *t < 1 << 29).ok_or(WireError::TagRange(tag))?;
        let wt = match k & 7 {
            0 => WireType::Varint,
            1 => WireType::Fixed64,
            2 => WireType::Len,
            5 => WireType::Fixed32,
            other => return Err(WireError::UnsupportedWireType(other as u8)),
        };
        Ok((tag, wt))
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], WireError> {
        let end = self.pos.checked_add(n).filter(|e| *e <= self.buf.len()).ok_or(WireError::Truncated)?;
        let s = &self.buf[self.pos..end];
        self.pos = end;
        Ok(s)
    }

    /// A length-delimited value.
    pub fn bytes(&mut self) -> Result<&'a [u8], WireError> {
        let n = self.varint()?;
        self.take(usize::try_from(n).map_err(|_| WireError::Truncated)?)
    }

    pub fn fixed64(&mut self) -> Result<u64, WireError> {
        let s = self.take(8)?;
        Ok(u64::from_le_bytes(s.try_into().map_err(|_| WireError::Truncated)?))
    }

    pub fn fixed32(&mut self) -> Result<u32, WireError> {
        let s = self.take(4)?;
        Ok(u32::from_le_bytes(s.try_into().map_err(|_| WireError::Truncated)?))
    }

    /// Skips a value of wire type `wt` (an unknown field).
    pub fn skip(&mut self, wt: WireType) -> Result<(), WireError> {
        match wt {
            WireType::Varint => self.varint().map(drop),
            WireType::Fixed64 => self.take(8).map(drop),
            WireType::Len => self.bytes().map(drop),
            WireType::Fixed32 => self.take(4).map(drop),
        }
    }
}

pub fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

pub fn put_key(out: &mut Vec<u8>, tag: u32, wt: WireType) {
    put_varint(out, (u64::from(tag) << 3) | wt as u64);
}

pub fn put_bytes(out: &mut Vec<u8>, tag: u32, b: &[u8]) {
    put_key(out, tag, WireType::Len);
    put_varint(out, b.len() as u64);
    out.extend_from_slice(b);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_round_trip_and_reject_overflow() {
        for v in [0u64, 1, 127, 128, 300, u32::MAX as u64, (-1i64) as u64, u64::MAX] {
            let mut b = Vec::new();
            put_varint(&mut b, v);
            assert_eq!(Reader::new(&b).varint(), Ok(v));
            assert_eq!(Reader::new(&b[..b.len() - 1]).varint(), Err(WireError::Truncated));
        }
        let eleven = [0xffu8; 11];
        assert_eq!(Reader::new(&eleven).varint(), Err(WireError::VarintOverflow));
        let tenth_too_big = [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02];
        assert_eq!(Reader::new(&tenth_too_big).varint(), Err(WireError::VarintOverflow));
    }

    #[test]
    fn keys_and_lengths_are_checked() {
        assert_eq!(Reader::new(&[0x00]).key(), Err(WireError::ZeroTag));
        assert_eq!(Reader::new(&[0x0b]).key(), Err(WireError::UnsupportedWireType(3)));
        assert_eq!(Reader::new(&[0x0a]).key(), Ok((1, WireType::Len)));
        // A length far past the end, and one that overflows usize arithmetic.
        assert_eq!(Reader::new(&[0x05, 1, 2]).bytes(), Err(WireError::Truncated));
        let mut huge = Vec::new();
        put_varint(&mut huge, u64::MAX);
        assert_eq!(Reader::new(&huge).bytes(), Err(WireError::Truncated));
    }
}
