//! PEM blocks as Go's `encoding/pem` finds them: `-----BEGIN <type>-----`, optional
//! `Key: value` headers, base64 lines, `-----END <type>-----`; text around blocks and
//! malformed blocks are skipped. CSR validation needs the block types and headers, which
//! certificate-loading helpers hide.

use base64::Engine;

/// One decoded block.
#[derive(Debug, PartialEq, Eq)]
pub struct Block {
    pub label: String,
    pub has_headers: bool,
    pub der: Vec<u8>,
}

const BEGIN: &str = "-----BEGIN ";
const DASHES: &str = "-----";

/// The blocks of `data`, in order.
pub fn blocks(data: &[u8]) -> Vec<Block> {
    let text = String::from_utf8_lossy(data);
    let mut out = Vec::new();
    let mut rest: &str = &text;
    while let Some(start) = rest.find(BEGIN) {
        // A BEGIN line must start a line.
        if start > 0 && !rest[..start].ends_with('\n') {
            rest = &rest[start + BEGIN.len()..];
            continue;
        }
        let after = &rest[start + BEGIN.len()..];
        let Some(label_end) = after.find(DASHES) else { break };
        let label = after[..label_end].to_string();
        let body_start = &after[label_end + DASHES.len()..];
        let end_marker = format!("-----END {label}-----");
        let Some(end) = body_start.find(&end_marker) else {
            rest = body_start;
            continue;
        };
        let body = &body_start[..end];
        let mut has_headers = false;
        let mut b64 = String::new();
        for line in body.lines().map(str::trim).filter(|l| !l.is_empty()) {
            if line.contains(':') {
                has_headers = true;
            } else {
                b64.push_str(line);
            }
        }
        rest = &body_start[end + end_marker.len()..];
        if let Ok(der) = base64::engine::general_purpose::STANDARD.decode(b64.as_bytes()) {
            out.push(Block { label, has_headers, der });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_blocks_and_skips_junk() {
        let data = b"junk\n-----BEGIN FOO-----\nA: b\n\nAAEC\n-----END FOO-----\ntext\n-----BEGIN CERTIFICATE-----\nAwQ=\n-----END CERTIFICATE-----\n";
        let b = blocks(data);
        assert_eq!(b.len(), 2);
        assert_eq!(
            (b[0].label.as_str(), b[0].has_headers, b[0].der.as_slice()),
            ("FOO", true, &[0u8, 1, 2][..])
        );
        assert_eq!(
            (b[1].label.as_str(), b[1].has_headers, b[1].der.as_slice()),
            ("CERTIFICATE", false, &[3u8, 4][..])
        );
        assert!(blocks(b"no pem here").is_empty());
    }
}
