//! The log backend (`--audit-log-path`): events go through a bounded queue to one writer
//! thread, which writes them to the rotating file (or stdout) and flushes whenever the
//! queue runs dry, so a burst costs one flush.
//!
//! Modes, as upstream's `--audit-log-mode`:
//! - `blocking`: the request waits until its event is written; write errors are logged.
//! - `blocking-strict`: as blocking, and a failure to write the RequestReceived event
//!   fails the request (500).
//! - `batch`: the request only queues the event; when the queue
//!   (`--audit-log-batch-buffer-size`) is full the event is dropped and counted.

use std::io::{self, Write};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::sync::{mpsc, oneshot};

use super::event::Event;
use super::rotate::Rotator;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Batch,
    Blocking,
    BlockingStrict,
}

impl Mode {
    pub const ALLOWED: &'static str = "batch,blocking,blocking-strict";

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "batch" => Some(Mode::Batch),
            "blocking" => Some(Mode::Blocking),
            "blocking-strict" => Some(Mode::BlockingStrict),
            _ => None,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Json,
    Legacy,
}

impl Format {
    pub const ALLOWED: &'static str = "legacy,json";

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "json" => Some(Format::Json),
            "legacy" => Some(Format::Legacy),
            _ => None,
        }
    }
}

/// Where encoded events end up.
pub trait Sink: Send + 'static {
    fn write_event(&mut self, line: &[u8]) -> io::Result<()>;
    fn flush(&mut self) -> io::Result<()>;
}

impl Sink for Rotator {
    fn write_event(&mut self, line: &[u8]) -> io::Result<()> {
        self.write(line)
    }

    fn flush(&mut self) -> io::Result<()> {
        Rotator::flush(self)
    }
}

/// `--audit-log-path=-`.
pub struct Stdout(io::BufWriter<io::Stdout>);

impl Stdout {
    pub fn new() -> Self {
        Self(io::BufWriter::new(io::stdout()))
    }
}

impl Default for Stdout {
    fn default() -> Self {
        Self::new()
    }
}

impl Sink for Stdout {
    fn write_event(&mut self, line: &[u8]) -> io::Result<()> {
        self.0.write_all(line)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.0.flush()
    }
}

struct Item {
    line: Vec<u8>,
    /// Told the outcome once the line is flushed (blocking modes).
    done: Option<oneshot::Sender<Result<(), String>>>,
}

pub struct LogBackend {
    tx: mpsc::Sender<Item>,
    mode: Mode,
    format: Format,
    dropped: AtomicU64,
}

impl std::fmt::Debug for LogBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogBackend").field("mode", &self.mode).field("format", &self.format).finish()
    }
}

impl LogBackend {
    /// Starts the writer thread over `sink`. `buffer` bounds the queue (batch mode's
    /// `--audit-log-batch-buffer-size`).
    pub fn start(sink: impl Sink, mode: Mode, format: Format, buffer: usize) -> Arc<Self> {
        let (tx, rx) = mpsc::channel(buffer.max(1));
        std::thread::Builder::new()
            .name("audit-log".into())
            .spawn(move || write_loop(sink, rx))
            .map_err(|e| tracing::error!("starting the audit log writer: {e}"))
            .ok();
        Arc::new(Self { tx, mode, format, dropped: AtomicU64::new(0) })
    }

    pub fn mode(&self) -> Mode {
        self.mode
    }

    fn encode(&self, ev: &Event) -> Vec<u8> {
        match self.format {
            Format::Json => ev.to_json_line(),
            Format::Legacy => ev.to_legacy_line(),
        }
    }

    /// Records `ev` as the mode says; Err only when a blocking write failed.
    pub async fn process(&self, ev: &Event) -> Result<(), String> {
        let line = self.encode(ev);
        if self.mode == Mode::Batch {
            self.enqueue(line);
            return Ok(());
        }
        let (done, wait) = oneshot::channel();
        self.tx
            .send(Item { line, done: Some(done) })
            .await
            .map_err(|_| "the audit log writer stopped".to_string())?;
        let r = wait.await.unwrap_or_else(|_| Err("the audit log writer stopped".into()));
        if let Err(e) = &r {
            tracing::error!(audit_id = ev.audit_id, "writing audit event: {e}");
        }
        r
    }

    /// Records `ev` without waiting (the end of a watch, seen from a body being dropped).
    pub fn process_detached(&self, ev: &Event) {
        self.enqueue(self.encode(ev));
    }

    fn enqueue(&self, line: Vec<u8>) {
        if let Err(e) = self.tx.try_send(Item { line, done: None }) {
            let n = self.dropped.fetch_add(1, Ordering::Relaxed) + 1;
            if n == 1 || n.is_power_of_two() {
                let why = match e {
                    mpsc::error::TrySendError::Full(_) => "audit buffer queue blocked",
                    mpsc::error::TrySendError::Closed(_) => "the audit log writer stopped",
                };
                tracing::error!(dropped = n, "audit event dropped: {why}");
            }
        }
    }

    /// Events dropped because the queue was full.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
}

/// Writes what is queued, flushing when the queue is empty, until every sender is gone.
fn write_loop(mut sink: impl Sink, mut rx: mpsc::Receiver<Item>) {
    let mut waiting = Vec::new();
    while let Some(first) = rx.blocking_recv() {
        let mut next = Some(first);
        let mut failed: Option<String> = None;
        while let Some(item) = next {
            if let Err(e) = sink.write_event(&item.line) {
                failed = Some(e.to_string());
                if item.done.is_none() {
                    tracing::error!("writing audit event: {e}");
                }
            }
            waiting.extend(item.done);
            next = rx.try_recv().ok();
        }
        if let Err(e) = sink.flush() {
            tracing::error!("flushing audit log: {e}");
            failed.get_or_insert(e.to_string());
        }
        for done in waiting.drain(..) {
            let _ = done.send(failed.clone().map_or(Ok(()), Err));
        }
    }
    let _ = sink.flush();
}

#[cfg(test)]
mod tests {
    use super::*;
    use parking_lot::Mutex;

    /// Keeps written lines in memory; fails writes containing "fail".
    #[derive(Clone, Default)]
    struct Memory(Arc<Mutex<Vec<String>>>);

    impl Sink for Memory {
        fn write_event(&mut self, line: &[u8]) -> io::Result<()> {
            let s = String::from_utf8_lossy(line).into_owned();
            if s.contains("fail") {
                return Err(io::Error::other("disk full"));
            }
            self.0.lock().push(s);
            Ok(())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    fn event(id: &str) -> Event {
        Event::new(id.into(), std::time::UNIX_EPOCH)
    }

    #[tokio::test]
    async fn blocking_waits_for_the_write() {
        let mem = Memory::default();
        let b = LogBackend::start(mem.clone(), Mode::Blocking, Format::Json, 16);
        b.process(&event("a")).await.unwrap();
        assert_eq!(mem.0.lock().len(), 1, "written before process returned");
        assert!(mem.0.lock()[0].contains("\"auditID\":\"a\""));
        assert_eq!(b.process(&event("fail")).await, Err("disk full".into()));
    }

    #[tokio::test]
    async fn batch_queues_and_drops_when_full() {
        let mem = Memory::default();
        let b = LogBackend::start(mem.clone(), Mode::Batch, Format::Legacy, 4);
        for i in 0..1000 {
            b.process(&event(&i.to_string())).await.unwrap();
        }
        // Everything queued is written eventually; what did not fit was dropped.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while (mem.0.lock().len() as u64) + b.dropped() < 1000 && std::time::Instant::now() < deadline {
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        assert_eq!(mem.0.lock().len() as u64 + b.dropped(), 1000);
        assert!(mem.0.lock()[0].contains(" AUDIT: id=\"0\""));
    }

    #[test]
    fn modes_and_formats() {
        assert_eq!(Mode::parse("blocking-strict"), Some(Mode::BlockingStrict));
        assert_eq!(Mode::parse("async"), None);
        assert_eq!(Format::parse("legacy"), Some(Format::Legacy));
        assert_eq!(Format::parse("yaml"), None);
    }
}
