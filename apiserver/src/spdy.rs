//! SPDY/3.1 framing, the client side as much of it as the stream translator needs to talk
//! to a kubelet's streaming endpoints: open streams (`SYN_STREAM` with a compressed header
//! block), send and receive `DATA` (with `FLAG_FIN` for a half-close), answer `PING`.
//!
//! Frame layouts (all big-endian):
//!
//! - control: `1 | version:15 | type:16`, `flags:8 | length:24`, payload;
//! - data: `0 | stream-id:31`, `flags:8 | length:24`, data.
//!
//! Header blocks are one zlib stream per connection, each block ending in a sync flush.
//! SPDY presets a dictionary on it; a compressor need not use it (a reader presets it
//! either way and only back-references would need it), so this one does not. Header
//! blocks the server sends (`SYN_REPLY`) are not decoded: nothing in them is needed, and
//! streams are named by the ids this side chose.
//!
//! Kubernetes' SPDY peers (moby/spdystream) do no flow control, so neither does this.

use bytes::Bytes;
use flate2::{Compress, Compression, FlushCompress};
use tokio::io::{AsyncRead, AsyncReadExt};

pub const VERSION: u16 = 3;
pub const FLAG_FIN: u8 = 0x01;

pub const SYN_STREAM: u16 = 1;
pub const SYN_REPLY: u16 = 2;
pub const RST_STREAM: u16 = 3;
pub const PING: u16 = 6;
pub const GOAWAY: u16 = 7;

/// The largest payload accepted from a peer (the length field's own limit is 16 MiB).
pub const MAX_FRAME: usize = 1 << 20;

/// One frame as read.
#[derive(Debug, PartialEq, Eq)]
pub enum Frame {
    Data { stream: u32, flags: u8, data: Bytes },
    Control { kind: u16, flags: u8, payload: Bytes },
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("reading a SPDY frame: {0}")]
    Io(#[from] std::io::Error),
    #[error("SPDY frame of {0} bytes is over the limit of {MAX_FRAME}")]
    TooLarge(usize),
    #[error("SPDY version {0} is not 3")]
    Version(u16),
    #[error("compressing a SPDY header block: {0}")]
    Compression(String),
}

/// The next frame, or None at a clean end of the connection.
pub async fn read_frame(r: &mut (impl AsyncRead + Unpin)) -> Result<Option<Frame>, Error> {
    let mut head = [0u8; 8];
    match r.read_exact(&mut head).await {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e.into()),
    }
    let flags = head[4];
    let len = u32::from_be_bytes([0, head[5], head[6], head[7]]) as usize;
    if len > MAX_FRAME {
        return Err(Error::TooLarge(len));
    }
    let mut payload = vec![0u8; len];
    r.read_exact(&mut payload).await?;
    let first = u32::from_be_bytes([head[0], head[1], head[2], head[3]]);
    if first & 0x8000_0000 != 0 {
        let version = ((first >> 16) & 0x7fff) as u16;
        if version != VERSION {
            return Err(Error::Version(version));
        }
        Ok(Some(Frame::Control { kind: (first & 0xffff) as u16, flags, payload: payload.into() }))
    } else {
        Ok(Some(Frame::Data { stream: first, flags, data: payload.into() }))
    }
}

fn with_head(first: u32, flags: u8, payload: &[u8]) -> Vec<u8> {
    let len = payload.len() as u32;
    let mut f = Vec::with_capacity(8 + payload.len());
    f.extend_from_slice(&first.to_be_bytes());
    f.extend_from_slice(&((u32::from(flags) << 24) | (len & 0x00ff_ffff)).to_be_bytes());
    f.extend_from_slice(payload);
    f
}

pub fn control(kind: u16, flags: u8, payload: &[u8]) -> Vec<u8> {
    with_head(0x8000_0000 | (u32::from(VERSION) << 16) | u32::from(kind), flags, payload)
}

/// A `DATA` frame; payloads over [`MAX_FRAME`] must be split by the caller.
pub fn data(stream: u32, fin: bool, data: &[u8]) -> Vec<u8> {
    with_head(stream & 0x7fff_ffff, if fin { FLAG_FIN } else { 0 }, data)
}

/// `SYN_STREAM` opening `stream` (odd ids from the client), priority 0, with `block`.
pub fn syn_stream(stream: u32, block: &[u8]) -> Vec<u8> {
    let mut p = Vec::with_capacity(10 + block.len());
    p.extend_from_slice(&(stream & 0x7fff_ffff).to_be_bytes());
    p.extend_from_slice(&0u32.to_be_bytes());
    p.extend_from_slice(&[0, 0]);
    p.extend_from_slice(block);
    control(SYN_STREAM, 0, &p)
}

/// The compressor of a connection's header blocks.
pub struct HeaderEncoder(Compress);

impl Default for HeaderEncoder {
    fn default() -> Self {
        Self(Compress::new(Compression::default(), true))
    }
}

impl HeaderEncoder {
    /// A header block: the count, then each name (lower case, as SPDY requires) and value,
    /// every one prefixed with its 32-bit length; compressed and sync-flushed. Fails (the
    /// connection must then be given up) if the compressor errs or stops making progress,
    /// rather than retrying for ever.
    pub fn encode(&mut self, headers: &[(&str, &str)]) -> Result<Vec<u8>, Error> {
        let mut raw = Vec::new();
        raw.extend_from_slice(&(headers.len() as u32).to_be_bytes());
        for (name, value) in headers {
            for s in [name.to_ascii_lowercase().as_str(), value] {
                raw.extend_from_slice(&(s.len() as u32).to_be_bytes());
                raw.extend_from_slice(s.as_bytes());
            }
        }
        let start = self.0.total_in();
        let mut out = Vec::with_capacity(raw.len() + 64);
        loop {
            let (before_in, before_out) = (self.0.total_in(), out.len());
            let done = (before_in - start) as usize;
            self.0
                .compress_vec(&raw[done..], &mut out, FlushCompress::Sync)
                .map_err(|e| Error::Compression(e.to_string()))?;
            // The flush is complete once all input went in and output space is left.
            if (self.0.total_in() - start) as usize == raw.len() && out.len() < out.capacity() {
                return Ok(out);
            }
            // Room to spare and nothing consumed or produced: the stream is stuck.
            if out.len() < out.capacity() && self.0.total_in() == before_in && out.len() == before_out {
                return Err(Error::Compression("header compressor made no progress".into()));
            }
            out.reserve(out.capacity().max(64));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flate2::{Decompress, FlushDecompress};

    #[tokio::test]
    async fn frames_round_trip() {
        let mut wire = Vec::new();
        wire.extend(data(5, true, b"hello"));
        wire.extend(control(PING, 0, &7u32.to_be_bytes()));
        let mut r = wire.as_slice();
        assert_eq!(
            read_frame(&mut r).await.unwrap(),
            Some(Frame::Data { stream: 5, flags: FLAG_FIN, data: Bytes::from_static(b"hello") })
        );
        assert_eq!(
            read_frame(&mut r).await.unwrap(),
            Some(Frame::Control { kind: PING, flags: 0, payload: Bytes::from(7u32.to_be_bytes().to_vec()) })
        );
        assert_eq!(read_frame(&mut r).await.unwrap(), None);
        // The control bit, version 3 and type 6: 0x80 0x03 0x00 0x06.
        assert_eq!(&control(PING, 0, &[0; 4])[..4], &[0x80, 0x03, 0x00, 0x06]);
    }

    #[tokio::test]
    async fn refuses_oversized_and_other_versions() {
        let mut big = vec![0, 0, 0, 1, 0];
        big.extend_from_slice(&((MAX_FRAME as u32 + 1).to_be_bytes()[1..]));
        assert!(matches!(read_frame(&mut big.as_slice()).await, Err(Error::TooLarge(_))));
        let mut v2 = control(PING, 0, &[0; 4]);
        v2[1] = 2;
        assert!(matches!(read_frame(&mut v2.as_slice()).await, Err(Error::Version(2))));
    }

    #[test]
    fn header_blocks_are_one_zlib_stream() {
        let mut enc = HeaderEncoder::default();
        let a = enc.encode(&[("streamType", "error")]).unwrap();
        let b = enc.encode(&[("streamtype", "stdout"), ("x", "y")]).unwrap();
        let frame = syn_stream(3, &a);
        assert_eq!(frame.len(), 8 + 10 + a.len());
        let mut z = Decompress::new(true);
        let mut out = Vec::with_capacity(1024);
        z.decompress_vec(&a, &mut out, FlushDecompress::Sync).unwrap();
        let expect_a =
            [&1u32.to_be_bytes()[..], &10u32.to_be_bytes(), b"streamtype", &5u32.to_be_bytes(), b"error"]
                .concat();
        assert_eq!(out, expect_a);
        out.clear();
        z.decompress_vec(&b, &mut out, FlushDecompress::Sync).unwrap();
        assert_eq!(&out[..4], &2u32.to_be_bytes());
        assert!(out.ends_with(b"y"));
    }
}
