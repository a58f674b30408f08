//! Rewriting `:authority` fields inside one HPACK header block (RFC 7541 §6)
//! without decoding the rest of it and without tracking the dynamic table.
//!
//! The block is walked representation by representation:
//!
//! | first byte  | representation                          | prefix of the int |
//! |-------------|-----------------------------------------|-------------------|
//! | `1xxxxxxx`  | indexed field                           | 7-bit index       |
//! | `01xxxxxx`  | literal with incremental indexing       | 6-bit name index  |
//! | `001xxxxx`  | dynamic table size update               | 5-bit size        |
//! | `0001xxxx`  | literal never indexed                   | 4-bit name index  |
//! | `0000xxxx`  | literal without indexing                | 4-bit name index  |
//!
//! A literal's name index 0 means a name string follows; then comes the value
//! string. A string is an H bit (Huffman-coded), a 7-bit-prefix length, and
//! that many bytes.
//!
//! Only a literal named `:authority` (static index 1, or the literal name) is
//! touched: its value string is replaced, and everything before it (the
//! representation type, name index or literal name) is kept byte for byte.
//! A name given by a dynamic table index is not recognized; the encoders we
//! care about (grpc-go's) name `:authority` by static index 1.

use std::ops::Range;

use http::uri::Authority;

use super::huffman;

/// Static table index of `:authority` (RFC 7541 Appendix A).
const AUTHORITY_INDEX: usize = 1;
const AUTHORITY: &[u8] = b":authority";

/// HPACK integers longer than this many continuation bytes are treated as
/// malformed (values up to 2^35, far beyond any header block).
const MAX_INTEGER_CONTINUATIONS: usize = 5;

/// One replaced value string: the encoded bytes at `range` in the block
/// become `encoded` (a plain, H=0 string).
#[derive(Debug, PartialEq)]
struct Edit {
    range: Range<usize>,
    encoded: Vec<u8>,
}

/// The block with every fixable `:authority` value replaced, or `None` if
/// nothing needed fixing or the block is malformed (then the caller passes
/// the original on and lets the HTTP/2 server report the error).
pub(super) fn fix_authorities(block: &[u8]) -> Option<Vec<u8>> {
    let edits = edits(block)?;
    if edits.is_empty() {
        return None;
    }
    let mut out = Vec::with_capacity(block.len());
    let mut copied = 0;
    for edit in edits {
        out.extend_from_slice(&block[copied..edit.range.start]);
        out.extend_from_slice(&edit.encoded);
        copied = edit.range.end;
    }
    out.extend_from_slice(&block[copied..]);
    Some(out)
}

/// The edits for `block`, in order, or `None` if it is malformed.
fn edits(block: &[u8]) -> Option<Vec<Edit>> {
    let mut edits = Vec::new();
    let mut pos = 0;
    while let Some(&first) = block.get(pos) {
        let name_prefix = if first & 0x80 != 0 {
            // Indexed field: nothing but an index.
            integer(block, &mut pos, 7)?;
            continue;
        } else if first & 0xe0 == 0x20 {
            // Dynamic table size update: nothing but a size.
            integer(block, &mut pos, 5)?;
            continue;
        } else if first & 0xc0 == 0x40 {
            6
        } else {
            4
        };
        let is_authority = match integer(block, &mut pos, name_prefix)? {
            0 => {
                let name = string(block, &mut pos)?;
                name.decoded()?.as_slice() == AUTHORITY
            }
            index => index == AUTHORITY_INDEX,
        };
        let value = string(block, &mut pos)?;
        if is_authority && let Some(fixed) = fixed_authority(&value.decoded()?) {
            let mut encoded = Vec::with_capacity(fixed.len() + 1);
            encode_integer(&mut encoded, 0x00, 7, fixed.len());
            encoded.extend_from_slice(fixed);
            edits.push(Edit { range: value.range, encoded });
        }
    }
    Some(edits)
}

/// What a client that puts a URL where an authority belongs meant: for
/// `http://127.0.0.1:2379` (grpc-go's `:authority` when dialed with a URL as
/// its target), `127.0.0.1:2379`. `None` if `value` is a valid authority
/// already, or if no valid authority can be found in it.
///
/// The result is a part of `value`, so never longer: the invariant that keeps
/// the server's HPACK dynamic table in step with the client's (see the
/// module documentation of `authority_fixup`).
fn fixed_authority(value: &[u8]) -> Option<&[u8]> {
    if Authority::try_from(value).is_ok() {
        return None;
    }
    let after_scheme = value.windows(3).position(|w| w == b"://")? + 3;
    let rest = &value[after_scheme..];
    let end = rest.iter().position(|&b| b == b'/').unwrap_or(rest.len());
    let candidate = &rest[..end];
    Authority::try_from(candidate).is_ok().then_some(candidate)
}

/// A string literal as it appears in the block.
struct Str<'a> {
    huffman: bool,
    bytes: &'a [u8],
    /// Where the whole string (H bit and length included) sits in the block.
    range: Range<usize>,
}

impl Str<'_> {
    fn decoded(&self) -> Option<Vec<u8>> {
        if self.huffman { huffman::decode(self.bytes) } else { Some(self.bytes.to_vec()) }
    }
}

/// Reads a string literal at `pos` and moves past it.
fn string<'a>(block: &'a [u8], pos: &mut usize) -> Option<Str<'a>> {
    let start = *pos;
    let huffman = block.get(start)? & 0x80 != 0;
    let len = integer(block, pos, 7)?;
    let end = pos.checked_add(len)?;
    let bytes = block.get(*pos..end)?;
    *pos = end;
    Some(Str { huffman, bytes, range: start..end })
}

/// Reads an HPACK integer with a `prefix_bits`-bit prefix (RFC 7541 §5.1) at
/// `pos` and moves past it.
fn integer(block: &[u8], pos: &mut usize, prefix_bits: u32) -> Option<usize> {
    let max_prefix = (1usize << prefix_bits) - 1;
    let first = usize::from(*block.get(*pos)?) & max_prefix;
    *pos += 1;
    if first < max_prefix {
        return Some(first);
    }
    let mut value = max_prefix as u64;
    for shift in (0..MAX_INTEGER_CONTINUATIONS).map(|i| 7 * i) {
        let byte = *block.get(*pos)?;
        *pos += 1;
        value += u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return usize::try_from(value).ok();
        }
    }
    None
}

/// Appends `value` as an HPACK integer with a `prefix_bits`-bit prefix, the
/// bits above the prefix in the first byte taken from `high_bits`.
fn encode_integer(out: &mut Vec<u8>, high_bits: u8, prefix_bits: u32, mut value: usize) {
    let max_prefix = (1usize << prefix_bits) - 1;
    if value < max_prefix {
        out.push(high_bits | value as u8);
        return;
    }
    out.push(high_bits | max_prefix as u8);
    value -= max_prefix;
    while value >= 0x80 {
        out.push(0x80 | (value & 0x7f) as u8);
        value >>= 7;
    }
    out.push(value as u8);
}

#[cfg(test)]
mod tests {
    use super::super::huffman::tests::encode as huffman_encode;
    use super::*;

    /// A string literal, Huffman-coded or plain.
    fn str_lit(value: &[u8], huffman: bool) -> Vec<u8> {
        let (high, bytes) = if huffman { (0x80, huffman_encode(value)) } else { (0x00, value.to_vec()) };
        let mut out = Vec::new();
        encode_integer(&mut out, high, 7, bytes.len());
        out.extend_from_slice(&bytes);
        out
    }

    /// `:method GET`, `:scheme http`, `:path /` from the static table.
    const GET_HTTP_ROOT: [u8; 3] = [0x82, 0x86, 0x84];

    #[test]
    fn integers_round_trip() {
        for prefix in [4, 5, 6, 7] {
            for value in [0, 1, 14, 15, 16, 62, 63, 64, 126, 127, 128, 1337, 16_384, 1 << 28] {
                let mut out = Vec::new();
                encode_integer(&mut out, 0, prefix, value);
                let mut pos = 0;
                assert_eq!(integer(&out, &mut pos, prefix), Some(value), "{prefix} {value}");
                assert_eq!(pos, out.len());
            }
        }
        // RFC 7541 C.1.2: 1337 with a 5-bit prefix.
        let mut out = Vec::new();
        encode_integer(&mut out, 0, 5, 1337);
        assert_eq!(out, [0x1f, 0x9a, 0x0a]);
        // Too many continuation bytes, and a truncated integer.
        assert_eq!(integer(&[0x7f, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01], &mut 0, 7), None);
        assert_eq!(integer(&[0x7f, 0xff], &mut 0, 7), None);
    }

    #[test]
    fn fixes_urls_only() {
        assert_eq!(fixed_authority(b"http://127.0.0.1:2379"), Some(&b"127.0.0.1:2379"[..]));
        assert_eq!(fixed_authority(b"https://[::1]:2379/x/y"), Some(&b"[::1]:2379"[..]));
        assert_eq!(fixed_authority(b"127.0.0.1:2379"), None);
        assert_eq!(fixed_authority(b"localhost"), None);
        assert_eq!(fixed_authority(b"unix:///var/run/etcd.sock"), None);
        assert_eq!(fixed_authority(b"not an authority"), None);
        assert_eq!(fixed_authority(b"http://bad host/"), None);
    }

    #[test]
    fn rewrites_huffman_coded_authority_with_incremental_indexing() {
        let mut block = GET_HTTP_ROOT.to_vec();
        block.push(0x40 | 1);
        block.extend(str_lit(b"http://127.0.0.1:2379", true));
        block.extend([0x40 | 31]); // content-type, a following field kept as is
        block.extend(str_lit(b"application/grpc", true));

        let mut expected = GET_HTTP_ROOT.to_vec();
        expected.push(0x41);
        expected.extend(str_lit(b"127.0.0.1:2379", false));
        expected.extend([0x40 | 31]);
        expected.extend(str_lit(b"application/grpc", true));

        assert_eq!(fix_authorities(&block), Some(expected));
    }

    #[test]
    fn keeps_the_representation_and_a_literal_name() {
        for first in [0x00, 0x10, 0x40] {
            let mut block = vec![first];
            block.extend(str_lit(AUTHORITY, true));
            block.extend(str_lit(b"https://etcd-0:2379", false));
            block.push(0xbe); // an indexed field after it

            let mut expected = vec![first];
            expected.extend(str_lit(AUTHORITY, true));
            expected.extend(str_lit(b"etcd-0:2379", false));
            expected.push(0xbe);

            assert_eq!(fix_authorities(&block), Some(expected), "{first:#x}");
        }
        // Never indexed, static name index 1.
        let mut block = vec![0x11];
        block.extend(str_lit(b"http://a:1", false));
        let mut expected = vec![0x11];
        expected.extend(str_lit(b"a:1", false));
        assert_eq!(fix_authorities(&block), Some(expected));
    }

    #[test]
    fn leaves_valid_and_unrelated_fields_alone() {
        let mut block = vec![0x20 | 0x1f, 0x81, 0x1f]; // size update to 4096
        block.extend(GET_HTTP_ROOT);
        block.push(0x41);
        block.extend(str_lit(b"127.0.0.1:2379", true));
        block.push(0x00);
        block.extend(str_lit(b"x-url", false));
        block.extend(str_lit(b"http://127.0.0.1:2379", false));
        block.push(0x44); // :path, not :authority
        block.extend(str_lit(b"http://127.0.0.1:2379", false));
        assert_eq!(edits(&block), Some(vec![]));
        assert_eq!(fix_authorities(&block), None);
    }

    #[test]
    fn malformed_blocks_are_not_touched() {
        let mut good = vec![0x41];
        good.extend(str_lit(b"http://127.0.0.1:2379", true));
        for cut in 1..good.len() {
            assert_eq!(fix_authorities(&good[..cut]), None, "cut at {cut}");
        }
        // A Huffman value with invalid padding.
        assert_eq!(fix_authorities(&[0x41, 0x81, 0x00]), None);
        // A length running past the end.
        assert_eq!(fix_authorities(&[0x41, 0x7f, 0xff, 0xff, 0xff, 0x0f]), None);
        assert_eq!(fix_authorities(&[]), None);
    }
}
