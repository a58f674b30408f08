//! The filter over in-memory streams, whole and in every small piece.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::Empty;
use hyper::body::Incoming;
use hyper::service::service_fn;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpListener, TcpStream};

use crate::http::{ServeOptions, serve};
use crate::shutdown::Shutdown;

use super::huffman::tests::encode as huffman_encode;
use super::*;

const DATA: u8 = 0x0;
const SETTINGS: u8 = 0x4;
const WINDOW_UPDATE: u8 = 0x8;
const CONTINUATION: u8 = 0x9;
const END_STREAM: u8 = 0x1;

fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let mut out = (payload.len() as u32).to_be_bytes()[1..].to_vec();
    out.push(kind);
    out.push(flags);
    out.extend_from_slice(&stream.to_be_bytes());
    out.extend_from_slice(payload);
    out
}

/// A string literal, Huffman-coded or plain (lengths below 127 only).
fn str_lit(value: &[u8], huffman: bool) -> Vec<u8> {
    let bytes = if huffman { huffman_encode(value) } else { value.to_vec() };
    assert!(bytes.len() < 127);
    let mut out = vec![(u8::from(huffman) << 7) | bytes.len() as u8];
    out.extend_from_slice(&bytes);
    out
}

/// A GET request's header block whose `:authority` is a literal with
/// incremental indexing (static name index 1).
fn request_block(authority: &[u8], huffman: bool) -> Vec<u8> {
    let mut block = vec![0x82, 0x86, 0x84, 0x41];
    block.extend(str_lit(authority, huffman));
    block.push(0x5f); // content-type (index 31), literal with incremental indexing
    block.extend(str_lit(b"application/grpc", true));
    block
}

/// An in-memory connection that hands out at most `step` bytes per read and
/// returns `Pending` (after waking itself) before every other read, to cut
/// the stream at every possible place.
struct Trickle {
    data: Vec<u8>,
    pos: usize,
    step: usize,
    stall: bool,
    written: Vec<u8>,
}

impl Trickle {
    fn new(data: Vec<u8>, step: usize) -> Self {
        Self { data, pos: 0, step, stall: false, written: Vec::new() }
    }
}

impl AsyncRead for Trickle {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        self.stall = !self.stall;
        if self.stall {
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        let n = self.step.min(buf.remaining()).min(self.data.len() - self.pos);
        let pos = self.pos;
        buf.put_slice(&self.data[pos..pos + n]);
        self.pos += n;
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for Trickle {
    fn poll_write(mut self: Pin<&mut Self>, _: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        self.written.extend_from_slice(buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

/// Everything the filter yields for `input`, checked to be the same however
/// the input arrives and however small the reader's buffer is.
async fn filtered(input: &[u8]) -> Vec<u8> {
    let mut whole = Vec::new();
    AuthorityFixup::new(Trickle::new(input.to_vec(), usize::MAX)).read_to_end(&mut whole).await.unwrap();
    for step in [1, 2, 3, 5, 7, 9, 10, 24, 25, 100] {
        let mut pieces = Vec::new();
        AuthorityFixup::new(Trickle::new(input.to_vec(), step)).read_to_end(&mut pieces).await.unwrap();
        assert_eq!(pieces, whole, "input arriving {step} bytes at a time");
    }
    let mut fixup = AuthorityFixup::new(Trickle::new(input.to_vec(), usize::MAX));
    let mut small_reads = Vec::new();
    let mut byte = [0u8; 1];
    while fixup.read(&mut byte).await.unwrap() == 1 {
        small_reads.push(byte[0]);
    }
    assert_eq!(small_reads, whole, "read one byte at a time");
    whole
}

fn settings() -> Vec<u8> {
    frame(SETTINGS, 0, 0, &[0x00, 0x03, 0x00, 0x00, 0x00, 0x64])
}

#[tokio::test]
async fn rewrites_a_url_authority_and_passes_the_rest() {
    let data = vec![0xab; 3 * READ_CHUNK + 17];
    let mut input = PREFACE.to_vec();
    input.extend(settings());
    input.extend(frame(HEADERS, END_HEADERS, 1, &request_block(b"http://127.0.0.1:2379", true)));
    input.extend(frame(DATA, END_STREAM, 1, &data));
    input.extend(frame(WINDOW_UPDATE, 0, 0, &[0, 0, 0x10, 0]));
    // An indexed reference to the entry the first request added.
    input.extend(frame(HEADERS, END_HEADERS | END_STREAM, 3, &[0x82, 0x86, 0x84, 0xbf]));

    let mut expected = PREFACE.to_vec();
    expected.extend(settings());
    expected.extend(frame(HEADERS, END_HEADERS, 1, &request_block(b"127.0.0.1:2379", false)));
    expected.extend(frame(DATA, END_STREAM, 1, &data));
    expected.extend(frame(WINDOW_UPDATE, 0, 0, &[0, 0, 0x10, 0]));
    expected.extend(frame(HEADERS, END_HEADERS | END_STREAM, 3, &[0x82, 0x86, 0x84, 0xbf]));

    assert_eq!(filtered(&input).await, expected);
}

#[tokio::test]
async fn drops_padding_and_keeps_priority() {
    let priority = [0x80, 0, 0, 0x03, 0xff];
    let mut payload = vec![4];
    payload.extend(priority);
    payload.extend(request_block(b"https://etcd-0.etcd:2379/", false));
    payload.extend([0; 4]);
    let mut input = PREFACE.to_vec();
    input.extend(frame(HEADERS, END_HEADERS | END_STREAM | PADDED | PRIORITY, 5, &payload));

    let mut payload = priority.to_vec();
    payload.extend(request_block(b"etcd-0.etcd:2379", false));
    let mut expected = PREFACE.to_vec();
    expected.extend(frame(HEADERS, END_HEADERS | END_STREAM | PRIORITY, 5, &payload));

    assert_eq!(filtered(&input).await, expected);
}

#[tokio::test]
async fn passes_valid_and_unfixable_frames_unchanged() {
    let valid = frame(HEADERS, END_HEADERS, 1, &request_block(b"127.0.0.1:2379", true));
    // A header block continued in CONTINUATION frames.
    let block = request_block(b"http://127.0.0.1:2379", true);
    let (first, rest) = block.split_at(6);
    let continued = [frame(HEADERS, 0, 3, first), frame(CONTINUATION, END_HEADERS, 3, rest)].concat();
    // Longer than the server accepts.
    let mut big_block = request_block(b"http://127.0.0.1:2379", false);
    big_block.resize(MAX_FRAME_PAYLOAD + 1, 0x82);
    let too_big = frame(HEADERS, END_HEADERS, 5, &big_block);
    // Malformed: padding longer than the payload, and a truncated block.
    let bad_padding = frame(HEADERS, END_HEADERS | PADDED, 7, &[200, 0x82]);
    let truncated = frame(HEADERS, END_HEADERS, 9, &block[..block.len() - 20]);

    let input = [PREFACE.to_vec(), valid, continued, too_big, bad_padding, truncated].concat();
    assert_eq!(filtered(&input).await, input);
}

#[tokio::test]
async fn a_rewrite_that_would_exceed_the_frame_limit_is_not_made() {
    // A Huffman-coded value that grows when written plain.
    let url = b"http://aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    let mut block = request_block(url, true);
    let fits = frame(HEADERS, END_HEADERS, 1, &block);
    block.resize(MAX_FRAME_PAYLOAD, 0x82);
    let full = frame(HEADERS, END_HEADERS, 3, &block);
    let input = [PREFACE.to_vec(), fits, full.clone()].concat();
    let output = filtered(&input).await;
    assert!(output.ends_with(&full));
    assert!(output.len() > input.len(), "the first request's value grew");
}

#[tokio::test]
async fn http1_and_truncated_streams_pass_through() {
    for input in [
        &b"GET / HTTP/1.1\r\nHost: http://x\r\n\r\n"[..],
        b"GET /",
        b"PRI * HTTP/2.0\r\n",
        b"PRI * HTTP/1.1\r\n\r\nSM\r\n\r\n and more",
        b"",
    ] {
        assert_eq!(filtered(input).await, input);
    }
    let mut cut = PREFACE.to_vec();
    cut.extend(frame(HEADERS, END_HEADERS, 1, &request_block(b"http://127.0.0.1:2379", true)));
    cut.truncate(cut.len() - 3);
    assert_eq!(filtered(&cut).await, cut);
}

#[tokio::test]
async fn a_short_http1_request_is_not_held_back_for_the_preface() {
    let (mut client, server) = tokio::io::duplex(1024);
    let mut server = AuthorityFixup::new(server);
    client.write_all(b"GET / HTTP/1.0\r\n\r\n").await.unwrap();
    let mut buf = [0u8; 64];
    let n = tokio::time::timeout(Duration::from_secs(5), server.read(&mut buf))
        .await
        .expect("bytes handed on without waiting for more")
        .unwrap();
    assert_eq!(&buf[..n], b"GET / HTTP/1.0\r\n\r\n");
}

#[tokio::test]
async fn writes_pass_through() {
    let mut fixup = AuthorityFixup::new(Trickle::new(Vec::new(), 1));
    fixup.write_all(b"HTTP/1.1 200 OK\r\n\r\n").await.unwrap();
    fixup.flush().await.unwrap();
    fixup.shutdown().await.unwrap();
    assert_eq!(fixup.io.written, b"HTTP/1.1 200 OK\r\n\r\n");
}

const RST_STREAM: u8 = 0x3;
const GOAWAY: u8 = 0x7;
const PROTOCOL_ERROR: u32 = 0x1;

/// How the server answered one stream.
#[derive(Debug, PartialEq)]
enum Answer {
    /// Response headers whose block starts with `:status 200` (static index 8).
    Ok,
    /// Response headers with another first field.
    Headers(Vec<u8>),
    /// RST_STREAM with this error code.
    Reset(u32),
}

/// Serves on port 0 (`lenient` as the option) a service answering 200 to a
/// request for `127.0.0.1:2379` and 421 to anything else, sends it hand-made
/// HTTP/2 bytes (grpc-go's way: `:authority` a Huffman-coded literal with
/// incremental indexing, then a second request that names it by dynamic index
/// only), and returns the answers to streams 1 and 3.
async fn answers(lenient: bool, authority: &[u8]) -> (Answer, Answer) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let shutdown = Shutdown::new();
    let service = service_fn(|request: Request<Incoming>| async move {
        let status = match request.uri().authority() {
            Some(authority) if authority == "127.0.0.1:2379" => StatusCode::OK,
            _ => StatusCode::MISDIRECTED_REQUEST,
        };
        let mut response = Response::new(Empty::<Bytes>::new());
        *response.status_mut() = status;
        Ok::<_, std::convert::Infallible>(response)
    });
    let options = ServeOptions { lenient_h2_authority: lenient, ..Default::default() };
    let server = tokio::spawn(serve(listener, None, service, shutdown.clone(), options));

    let mut stream = TcpStream::connect(addr).await.unwrap();
    let mut first = vec![0x83, 0x86, 0x84, 0x41]; // POST, http, /, :authority
    first.extend(str_lit(authority, true));
    let second = [0x83, 0x86, 0x84, 0xbe]; // :authority by dynamic index 62
    let input = [
        PREFACE.to_vec(),
        frame(SETTINGS, 0, 0, &[]),
        frame(HEADERS, END_HEADERS | END_STREAM, 1, &first),
        frame(HEADERS, END_HEADERS | END_STREAM, 3, &second),
    ]
    .concat();
    stream.write_all(&input).await.unwrap();

    let read_answers = async {
        let (mut one, mut three) = (None, None);
        while one.is_none() || three.is_none() {
            let mut header = [0u8; FRAME_HEADER_LEN];
            stream.read_exact(&mut header).await.unwrap();
            let len = u32::from_be_bytes([0, header[0], header[1], header[2]]) as usize;
            let mut payload = vec![0u8; len];
            stream.read_exact(&mut payload).await.unwrap();
            let id = u32::from_be_bytes([header[5], header[6], header[7], header[8]]) & 0x7fff_ffff;
            let answer = match header[3] {
                HEADERS if payload.first() == Some(&0x88) => Answer::Ok,
                HEADERS => Answer::Headers(payload),
                RST_STREAM => Answer::Reset(u32::from_be_bytes(payload[..4].try_into().unwrap())),
                GOAWAY => panic!("connection closed: {payload:?}"),
                _ => continue,
            };
            match id {
                1 => one = Some(answer),
                3 => three = Some(answer),
                _ => panic!("answer on stream {id}"),
            }
        }
        (one.unwrap(), three.unwrap())
    };
    let answers = tokio::time::timeout(Duration::from_secs(10), read_answers)
        .await
        .expect("server answered both streams");
    drop(stream);
    shutdown.trigger();
    server.await.unwrap();
    answers
}

#[tokio::test]
async fn serve_accepts_a_url_authority_when_lenient() {
    assert_eq!(answers(true, b"http://127.0.0.1:2379").await, (Answer::Ok, Answer::Ok));
    assert_eq!(answers(true, b"127.0.0.1:2379").await, (Answer::Ok, Answer::Ok));
}

#[tokio::test]
async fn without_the_option_h2_resets_a_url_authority() {
    assert_eq!(
        answers(false, b"http://127.0.0.1:2379").await,
        (Answer::Reset(PROTOCOL_ERROR), Answer::Reset(PROTOCOL_ERROR))
    );
}
