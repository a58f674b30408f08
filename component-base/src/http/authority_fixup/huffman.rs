//! The Huffman code of HPACK (RFC 7541 §5.2 and Appendix B), decoding only.
//!
//! The code is canonical and complete (its Kraft sum is exactly 1), so every
//! bit sequence walks somewhere in the tree; what makes an encoded string
//! invalid is the end: the last partial code must be at most 7 bits, all ones
//! (a prefix of EOS), and EOS itself must never be decoded.

use std::sync::LazyLock;

/// The end-of-string symbol, which only ever appears (truncated) as padding.
const EOS: u16 = 256;

/// `(code, length in bits)` of each symbol 0..=255 and of EOS (256), from
/// RFC 7541 Appendix B. Codes are right-aligned: the code's first bit is bit
/// `length - 1`.
#[rustfmt::skip]
const CODES: [(u32, u8); 257] = [
    (0x1ff8, 13), (0x7fffd8, 23), (0xfffffe2, 28), (0xfffffe3, 28), // 0x00
    (0xfffffe4, 28), (0xfffffe5, 28), (0xfffffe6, 28), (0xfffffe7, 28), // 0x04
    (0xfffffe8, 28), (0xffffea, 24), (0x3ffffffc, 30), (0xfffffe9, 28), // 0x08
    (0xfffffea, 28), (0x3ffffffd, 30), (0xfffffeb, 28), (0xfffffec, 28), // 0x0c
    (0xfffffed, 28), (0xfffffee, 28), (0xfffffef, 28), (0xffffff0, 28), // 0x10
    (0xffffff1, 28), (0xffffff2, 28), (0x3ffffffe, 30), (0xffffff3, 28), // 0x14
    (0xffffff4, 28), (0xffffff5, 28), (0xffffff6, 28), (0xffffff7, 28), // 0x18
    (0xffffff8, 28), (0xffffff9, 28), (0xffffffa, 28), (0xffffffb, 28), // 0x1c
    (0x14, 6), (0x3f8, 10), (0x3f9, 10), (0xffa, 12), // 0x20
    (0x1ff9, 13), (0x15, 6), (0xf8, 8), (0x7fa, 11), // 0x24
    (0x3fa, 10), (0x3fb, 10), (0xf9, 8), (0x7fb, 11), // 0x28
    (0xfa, 8), (0x16, 6), (0x17, 6), (0x18, 6), // 0x2c
    (0x0, 5), (0x1, 5), (0x2, 5), (0x19, 6), // 0x30
    (0x1a, 6), (0x1b, 6), (0x1c, 6), (0x1d, 6), // 0x34
    (0x1e, 6), (0x1f, 6), (0x5c, 7), (0xfb, 8), // 0x38
    (0x7ffc, 15), (0x20, 6), (0xffb, 12), (0x3fc, 10), // 0x3c
    (0x1ffa, 13), (0x21, 6), (0x5d, 7), (0x5e, 7), // 0x40
    (0x5f, 7), (0x60, 7), (0x61, 7), (0x62, 7), // 0x44
    (0x63, 7), (0x64, 7), (0x65, 7), (0x66, 7), // 0x48
    (0x67, 7), (0x68, 7), (0x69, 7), (0x6a, 7), // 0x4c
    (0x6b, 7), (0x6c, 7), (0x6d, 7), (0x6e, 7), // 0x50
    (0x6f, 7), (0x70, 7), (0x71, 7), (0x72, 7), // 0x54
    (0xfc, 8), (0x73, 7), (0xfd, 8), (0x1ffb, 13), // 0x58
    (0x7fff0, 19), (0x1ffc, 13), (0x3ffc, 14), (0x22, 6), // 0x5c
    (0x7ffd, 15), (0x3, 5), (0x23, 6), (0x4, 5), // 0x60
    (0x24, 6), (0x5, 5), (0x25, 6), (0x26, 6), // 0x64
    (0x27, 6), (0x6, 5), (0x74, 7), (0x75, 7), // 0x68
    (0x28, 6), (0x29, 6), (0x2a, 6), (0x7, 5), // 0x6c
    (0x2b, 6), (0x76, 7), (0x2c, 6), (0x8, 5), // 0x70
    (0x9, 5), (0x2d, 6), (0x77, 7), (0x78, 7), // 0x74
    (0x79, 7), (0x7a, 7), (0x7b, 7), (0x7ffe, 15), // 0x78
    (0x7fc, 11), (0x3ffd, 14), (0x1ffd, 13), (0xffffffc, 28), // 0x7c
    (0xfffe6, 20), (0x3fffd2, 22), (0xfffe7, 20), (0xfffe8, 20), // 0x80
    (0x3fffd3, 22), (0x3fffd4, 22), (0x3fffd5, 22), (0x7fffd9, 23), // 0x84
    (0x3fffd6, 22), (0x7fffda, 23), (0x7fffdb, 23), (0x7fffdc, 23), // 0x88
    (0x7fffdd, 23), (0x7fffde, 23), (0xffffeb, 24), (0x7fffdf, 23), // 0x8c
    (0xffffec, 24), (0xffffed, 24), (0x3fffd7, 22), (0x7fffe0, 23), // 0x90
    (0xffffee, 24), (0x7fffe1, 23), (0x7fffe2, 23), (0x7fffe3, 23), // 0x94
    (0x7fffe4, 23), (0x1fffdc, 21), (0x3fffd8, 22), (0x7fffe5, 23), // 0x98
    (0x3fffd9, 22), (0x7fffe6, 23), (0x7fffe7, 23), (0xffffef, 24), // 0x9c
    (0x3fffda, 22), (0x1fffdd, 21), (0xfffe9, 20), (0x3fffdb, 22), // 0xa0
    (0x3fffdc, 22), (0x7fffe8, 23), (0x7fffe9, 23), (0x1fffde, 21), // 0xa4
    (0x7fffea, 23), (0x3fffdd, 22), (0x3fffde, 22), (0xfffff0, 24), // 0xa8
    (0x1fffdf, 21), (0x3fffdf, 22), (0x7fffeb, 23), (0x7fffec, 23), // 0xac
    (0x1fffe0, 21), (0x1fffe1, 21), (0x3fffe0, 22), (0x1fffe2, 21), // 0xb0
    (0x7fffed, 23), (0x3fffe1, 22), (0x7fffee, 23), (0x7fffef, 23), // 0xb4
    (0xfffea, 20), (0x3fffe2, 22), (0x3fffe3, 22), (0x3fffe4, 22), // 0xb8
    (0x7ffff0, 23), (0x3fffe5, 22), (0x3fffe6, 22), (0x7ffff1, 23), // 0xbc
    (0x3ffffe0, 26), (0x3ffffe1, 26), (0xfffeb, 20), (0x7fff1, 19), // 0xc0
    (0x3fffe7, 22), (0x7ffff2, 23), (0x3fffe8, 22), (0x1ffffec, 25), // 0xc4
    (0x3ffffe2, 26), (0x3ffffe3, 26), (0x3ffffe4, 26), (0x7ffffde, 27), // 0xc8
    (0x7ffffdf, 27), (0x3ffffe5, 26), (0xfffff1, 24), (0x1ffffed, 25), // 0xcc
    (0x7fff2, 19), (0x1fffe3, 21), (0x3ffffe6, 26), (0x7ffffe0, 27), // 0xd0
    (0x7ffffe1, 27), (0x3ffffe7, 26), (0x7ffffe2, 27), (0xfffff2, 24), // 0xd4
    (0x1fffe4, 21), (0x1fffe5, 21), (0x3ffffe8, 26), (0x3ffffe9, 26), // 0xd8
    (0xffffffd, 28), (0x7ffffe3, 27), (0x7ffffe4, 27), (0x7ffffe5, 27), // 0xdc
    (0xfffec, 20), (0xfffff3, 24), (0xfffed, 20), (0x1fffe6, 21), // 0xe0
    (0x3fffe9, 22), (0x1fffe7, 21), (0x1fffe8, 21), (0x7ffff3, 23), // 0xe4
    (0x3fffea, 22), (0x3fffeb, 22), (0x1ffffee, 25), (0x1ffffef, 25), // 0xe8
    (0xfffff4, 24), (0xfffff5, 24), (0x3ffffea, 26), (0x7ffff4, 23), // 0xec
    (0x3ffffeb, 26), (0x7ffffe6, 27), (0x3ffffec, 26), (0x3ffffed, 26), // 0xf0
    (0x7ffffe7, 27), (0x7ffffe8, 27), (0x7ffffe9, 27), (0x7ffffea, 27), // 0xf4
    (0x7ffffeb, 27), (0xffffffe, 28), (0x7ffffec, 27), (0x7ffffed, 27), // 0xf8
    (0x7ffffee, 27), (0x7ffffef, 27), (0x7fffff0, 27), (0x3ffffee, 26), // 0xfc
    (0x3fffffff, 30), // 0x100
];

/// A tree node's child: `LEAF | symbol` for a leaf, otherwise the index of
/// an inner node (never 0, which is the root and nobody's child).
const LEAF: u16 = 0x8000;

/// The decoding tree: node `i` has children `TREE[i][0]` and `TREE[i][1]`;
/// the root is node 0. 256 inner nodes for 257 leaves.
static TREE: LazyLock<Vec<[u16; 2]>> = LazyLock::new(build_tree);

fn build_tree() -> Vec<[u16; 2]> {
    let mut tree = vec![[0u16; 2]];
    for (symbol, &(code, length)) in (0u16..).zip(CODES.iter()) {
        let mut node = 0;
        for shift in (0..length).rev() {
            let bit = ((code >> shift) & 1) as usize;
            if shift == 0 {
                tree[node][bit] = LEAF | symbol;
            } else {
                if tree[node][bit] == 0 {
                    tree.push([0; 2]);
                    tree[node][bit] = (tree.len() - 1) as u16;
                }
                node = usize::from(tree[node][bit]);
            }
        }
    }
    tree
}

/// Decodes a Huffman-coded HPACK string, or `None` if it is not valid
/// (EOS decoded, or padding longer than 7 bits or not all ones).
pub(super) fn decode(src: &[u8]) -> Option<Vec<u8>> {
    let tree = &*TREE;
    // Every symbol is at least 5 bits long.
    let mut out = Vec::with_capacity(src.len() * 8 / 5);
    let mut node = 0usize;
    // Bits of the code in progress, and whether they were all ones.
    let mut depth = 0u32;
    let mut all_ones = true;
    for &byte in src {
        for shift in (0..8).rev() {
            let bit = (byte >> shift) & 1;
            depth += 1;
            all_ones &= bit == 1;
            let next = tree[node][usize::from(bit)];
            if next & LEAF != 0 {
                let symbol = next & !LEAF;
                if symbol == EOS {
                    return None;
                }
                out.push(symbol as u8);
                node = 0;
                depth = 0;
                all_ones = true;
            } else if next == 0 {
                // Unreachable with a complete code; kept so that a bad table
                // cannot turn into an endless or wrong decode.
                return None;
            } else {
                node = usize::from(next);
            }
        }
    }
    (depth <= 7 && all_ones).then_some(out)
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// Huffman-codes `src`, padding with ones; for building test inputs.
    pub(crate) fn encode(src: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        let mut bits: u64 = 0;
        let mut count = 0u32;
        for &byte in src {
            let (code, length) = CODES[usize::from(byte)];
            bits = (bits << length) | u64::from(code);
            count += u32::from(length);
            while count >= 8 {
                count -= 8;
                out.push((bits >> count) as u8);
            }
        }
        if count > 0 {
            out.push(((bits << (8 - count)) | (0xff >> count)) as u8);
        }
        out
    }

    fn hex(s: &str) -> Vec<u8> {
        let s: String = s.split_whitespace().collect();
        (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
    }

    #[test]
    fn tree_is_complete() {
        let tree = build_tree();
        assert_eq!(tree.len(), 256, "257 leaves need 256 inner nodes");
        for (i, node) in tree.iter().enumerate() {
            for &child in node {
                assert_ne!(child, 0, "node {i} has a missing child");
            }
        }
    }

    /// The Huffman-coded strings of RFC 7541 C.4 and C.6.
    #[test]
    fn decodes_rfc7541_examples() {
        let cases = [
            ("f1e3 c2e5 f23a 6ba0 ab90 f4ff", "www.example.com"),
            ("a8eb 1064 9cbf", "no-cache"),
            ("25a8 49e9 5ba9 7d7f", "custom-key"),
            ("25a8 49e9 5bb8 e8b4 bf", "custom-value"),
            ("6402", "302"),
            ("aec3 771a 4b", "private"),
            ("d07a be94 1054 d444 a820 0595 040b 8166 e082 a62d 1bff", "Mon, 21 Oct 2013 20:13:21 GMT"),
            ("9d29 ad17 1863 c78f 0b97 c8e9 ae82 ae43 d3", "https://www.example.com"),
            (
                "94e7 821d d7f2 e6c7 b335 dfdf cd5b 3960 d5af 2708 7f36 72c1 ab27 0fb5 291f 9587 3160 65c0 03ed 4ee5 b106 3d50 07",
                "foo=ASDJKHQKBZXOQWEOPIUAXQWEOIU; max-age=3600; version=1",
            ),
        ];
        for (coded, plain) in cases {
            assert_eq!(decode(&hex(coded)).as_deref(), Some(plain.as_bytes()), "{plain}");
            assert_eq!(encode(plain.as_bytes()), hex(coded), "{plain}");
        }
    }

    #[test]
    fn every_byte_round_trips() {
        let all: Vec<u8> = (0..=255).collect();
        assert_eq!(decode(&encode(&all)).unwrap(), all);
        assert_eq!(decode(&[]).unwrap(), b"");
    }

    #[test]
    fn rejects_bad_padding_and_eos() {
        // "0" is 00000; padding with zeros instead of ones.
        assert_eq!(decode(&[0b0000_0000]), None);
        // A full byte of ones after a complete symbol: padding longer than 7 bits.
        assert_eq!(decode(&[0b0000_0111, 0xff]), None);
        // EOS (30 ones) spelled out in full.
        assert_eq!(decode(&[0xff, 0xff, 0xff, 0xfc]), None);
        assert_eq!(decode(&[0b0000_0111]).unwrap(), b"0");
    }
}
