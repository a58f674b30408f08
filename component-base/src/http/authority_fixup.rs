//! A read filter that turns an HTTP/2 `:authority` holding a URL
//! (`http://127.0.0.1:2379`) into the authority it names (`127.0.0.1:2379`)
//! before the HTTP/2 server parses it.
//!
//! # Why
//!
//! grpc-go clients that dial a URL as their target (etcdctl 3.4 does so for
//! per-endpoint calls: `endpoint status`, `endpoint hashkv`, `defrag`) send
//! that URL as `:authority`. grpc-go servers, and so real etcd, accept it; the
//! h2 crate rejects it as a malformed authority and resets the stream with
//! PROTOCOL_ERROR. h2 has no switch for that, so [`AuthorityFixup`] rewrites
//! the bytes on their way in.
//!
//! # How
//!
//! Writes pass through. Reads: if the connection starts with the HTTP/2 client
//! preface, the inbound stream is split into frames (RFC 7540 §4.1); otherwise
//! (HTTP/1) it passes through untouched. Every frame passes through as is,
//! its payload straight into the reader's buffer where possible, except a
//! HEADERS frame carrying a whole header block (END_HEADERS set): that one is
//! buffered, and each literal `:authority` field in it whose value is not a
//! valid authority but contains a URL with one is re-encoded with that
//! authority as a plain string, keeping its representation (incremental
//! indexing, never indexed, ...) and its name encoding. The rewritten frame
//! drops the padding; everything else is kept.
//!
//! # Why HPACK state stays consistent
//!
//! The filter does not track the dynamic table, and need not: a rewritten
//! value is a part of the original, so whenever the client adds an entry of
//! size `s`, the server adds the same entry with size `s' <= s`. Both insert at
//! the front and evict from the back to stay within the same maximum size, so
//! the client's list of entries (newest first) is always a prefix of the
//! server's: the server's copy of that prefix is no larger than the client's
//! whole table, so the server never has to evict from it, and it may keep
//! older entries the client already evicted, which nobody references. Every
//! index the client uses thus names the same entry on both sides, and an
//! indexed reference to a rewritten `:authority` resolves to the fixed value.
//!
//! # Limits
//!
//! - A header block continued in CONTINUATION frames is passed through as
//!   is, as is a HEADERS frame longer than [`MAX_FRAME_PAYLOAD`] (the server
//!   rejects those anyway).
//! - `:authority` named through a dynamic table index is not recognized.
//! - A rewrite that would make the frame longer than [`MAX_FRAME_PAYLOAD`]
//!   (the plain value can be longer than a Huffman-coded original) is not
//!   made.
//! - Anything malformed is passed through unchanged for the server to report.

mod header_block;
mod huffman;

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::{Buf, Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// What every HTTP/2 client sends first (RFC 7540 §3.5).
const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
const FRAME_HEADER_LEN: usize = 9;
const HEADERS: u8 = 0x1;
const END_HEADERS: u8 = 0x4;
const PADDED: u8 = 0x8;
const PRIORITY: u8 = 0x20;
/// Bytes of a HEADERS frame's PRIORITY fields (stream dependency and weight).
const PRIORITY_LEN: usize = 5;

/// The largest HEADERS payload that is buffered and rewritten, and the largest
/// a rewrite may produce: the initial SETTINGS_MAX_FRAME_SIZE (RFC 7540
/// §6.5.2), which every peer must accept and which `serve` keeps (hyper's
/// default). A larger frame is a FRAME_SIZE_ERROR for the server anyway, so
/// passing it through costs nothing, and buffering is bounded per connection.
pub(super) const MAX_FRAME_PAYLOAD: usize = 16_384;

/// How much is read from the connection at once while looking for the
/// preface or a frame header.
const READ_CHUNK: usize = 8 * 1024;

/// Wraps a connection's IO (after TLS) so that the HTTP/2 server accepts a
/// URL as `:authority`; see the module documentation.
#[derive(Debug)]
pub struct AuthorityFixup<IO> {
    io: IO,
    state: State,
    /// Bytes read from `io` and not yet handed on or classified.
    pending: BytesMut,
    /// Bytes handed on next, before anything else.
    ready: Bytes,
    /// `io` reported end of stream.
    eof: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Matching the first bytes against the HTTP/2 preface.
    Preface,
    /// Not HTTP/2 (or given up on): everything passes through.
    PassThrough,
    /// At a frame boundary, waiting for a frame header (and, for a HEADERS
    /// frame to rewrite, its payload).
    FrameHeader,
    /// Inside a frame passed through as is, with `remaining` payload bytes
    /// still to come.
    Payload { remaining: usize },
}

impl<IO> AuthorityFixup<IO> {
    pub fn new(io: IO) -> Self {
        Self { io, state: State::Preface, pending: BytesMut::new(), ready: Bytes::new(), eof: false }
    }

    /// Moves on by what is in `pending`, as far as that can be done without
    /// reading. Returns `false` if more input is needed first.
    fn advance(&mut self) -> bool {
        debug_assert!(self.ready.is_empty());
        match self.state {
            State::PassThrough => {
                if self.pending.is_empty() {
                    return false;
                }
                self.ready = self.pending.split().freeze();
            }
            State::Preface => {
                let n = self.pending.len().min(PREFACE.len());
                if self.pending[..n] != PREFACE[..n] {
                    self.state = State::PassThrough;
                } else if n == PREFACE.len() {
                    self.ready = self.pending.split_to(n).freeze();
                    self.state = State::FrameHeader;
                } else {
                    return false;
                }
            }
            State::Payload { remaining } => {
                if self.pending.is_empty() {
                    return false;
                }
                let n = remaining.min(self.pending.len());
                self.ready = self.pending.split_to(n).freeze();
                self.state = next_after_payload(remaining - n);
            }
            State::FrameHeader => {
                let Some(header) = self.pending.get(..FRAME_HEADER_LEN) else {
                    return false;
                };
                let len =
                    (usize::from(header[0]) << 16) | (usize::from(header[1]) << 8) | usize::from(header[2]);
                let (kind, flags) = (header[3], header[4]);
                let rewritable = kind == HEADERS && flags & END_HEADERS != 0 && len <= MAX_FRAME_PAYLOAD;
                if rewritable {
                    if self.pending.len() < FRAME_HEADER_LEN + len {
                        return false;
                    }
                    let frame = self.pending.split_to(FRAME_HEADER_LEN + len).freeze();
                    self.ready = match rewrite_headers_frame(&frame) {
                        Some(rewritten) => {
                            tracing::trace!("rewrote an HTTP/2 :authority holding a URL");
                            rewritten.into()
                        }
                        None => frame,
                    };
                } else {
                    // The header and whatever of the payload is here already.
                    let n = self.pending.len().min(FRAME_HEADER_LEN + len);
                    self.ready = self.pending.split_to(n).freeze();
                    self.state = next_after_payload(FRAME_HEADER_LEN + len - n);
                }
            }
        }
        true
    }
}

fn next_after_payload(remaining: usize) -> State {
    if remaining == 0 { State::FrameHeader } else { State::Payload { remaining } }
}

/// The HEADERS frame `frame` (header and payload) with its `:authority`
/// fixed, or `None` if it needs no change or cannot be parsed.
fn rewrite_headers_frame(frame: &[u8]) -> Option<Vec<u8>> {
    let (header, payload) = frame.split_at_checked(FRAME_HEADER_LEN)?;
    let flags = header[4];
    let (padding, mut start) = if flags & PADDED != 0 { (usize::from(*payload.first()?), 1) } else { (0, 0) };
    let priority = if flags & PRIORITY != 0 {
        let fields = payload.get(start..start + PRIORITY_LEN)?;
        start += PRIORITY_LEN;
        fields
    } else {
        &[]
    };
    let end = payload.len().checked_sub(padding)?;
    let block = header_block::fix_authorities(payload.get(start..end)?)?;
    let len = priority.len() + block.len();
    if len > MAX_FRAME_PAYLOAD {
        return None;
    }
    let mut out = Vec::with_capacity(FRAME_HEADER_LEN + len);
    out.extend_from_slice(&(len as u32).to_be_bytes()[1..]);
    out.push(header[3]);
    out.push(flags & !PADDED);
    out.extend_from_slice(&header[5..9]);
    out.extend_from_slice(priority);
    out.extend_from_slice(&block);
    Some(out)
}

impl<IO: AsyncRead + Unpin> AsyncRead for AuthorityFixup<IO> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if buf.remaining() == 0 {
            return Poll::Ready(Ok(()));
        }
        loop {
            if !this.ready.is_empty() {
                let n = this.ready.len().min(buf.remaining());
                buf.put_slice(&this.ready[..n]);
                if n == this.ready.len() {
                    // Let go of the buffer, so that `pending` can reuse it.
                    this.ready = Bytes::new();
                } else {
                    this.ready.advance(n);
                }
                return Poll::Ready(Ok(()));
            }
            if this.advance() {
                continue;
            }
            // `pending` is empty here in these two states: read straight into
            // the caller's buffer, which is where frame payloads should go.
            match this.state {
                State::PassThrough => return Pin::new(&mut this.io).poll_read(cx, buf),
                State::Payload { remaining } => {
                    let mut limited = buf.take(remaining);
                    let start = limited.filled().as_ptr();
                    ready!(Pin::new(&mut this.io).poll_read(cx, &mut limited))?;
                    let n = limited.filled().len();
                    if limited.filled().as_ptr() != start {
                        return Poll::Ready(Err(io::Error::other("reader swapped the read buffer")));
                    }
                    // SAFETY: `limited` is a view of `buf`'s unfilled part, and
                    // the reader initialized its first `n` bytes (the check
                    // above makes sure it filled that memory, not another).
                    unsafe { buf.assume_init(n) };
                    buf.advance(n);
                    this.state = next_after_payload(remaining - n);
                    return Poll::Ready(Ok(()));
                }
                State::Preface | State::FrameHeader => {}
            }
            if this.eof {
                // Cut off inside the preface or a frame: hand over what there
                // is and let the server make of it what it will.
                if this.pending.is_empty() {
                    return Poll::Ready(Ok(()));
                }
                this.state = State::PassThrough;
                continue;
            }
            ready!(this.fill(cx))?;
        }
    }
}

impl<IO: AsyncRead + Unpin> AuthorityFixup<IO> {
    /// Reads what is available (up to [`READ_CHUNK`]) into `pending`.
    fn fill(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let start = self.pending.len();
        self.pending.resize(start + READ_CHUNK, 0);
        let mut read = ReadBuf::new(&mut self.pending[start..]);
        let result = Pin::new(&mut self.io).poll_read(cx, &mut read);
        let n = match &result {
            Poll::Ready(Ok(())) => read.filled().len(),
            _ => 0,
        };
        self.pending.truncate(start + n);
        if matches!(result, Poll::Ready(Ok(()))) && n == 0 {
            self.eof = true;
        }
        result
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for AuthorityFixup<IO> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests;
