//! raft-rs logs through slog; this drain forwards its records to `tracing`, so raft's
//! messages share the process's log format and level.

use std::fmt::{self, Write as _};

use slog::{Drain, Key, Level, OwnedKVList, Record, Serializer};

struct TracingDrain;

struct Fields(String);

impl Serializer for Fields {
    fn emit_arguments(&mut self, key: Key, val: &fmt::Arguments<'_>) -> slog::Result {
        let _ = write!(self.0, " {key}={val}");
        Ok(())
    }
}

impl Drain for TracingDrain {
    type Ok = ();
    type Err = slog::Never;

    fn log(&self, record: &Record<'_>, values: &OwnedKVList) -> Result<(), slog::Never> {
        let mut fields = Fields(String::new());
        let _ = slog::KV::serialize(&record.kv(), record, &mut fields);
        let _ = slog::KV::serialize(values, record, &mut fields);
        let msg = record.msg();
        match record.level() {
            Level::Critical | Level::Error => tracing::error!(target: "raft", "{msg}{}", fields.0),
            Level::Warning => tracing::warn!(target: "raft", "{msg}{}", fields.0),
            Level::Info => tracing::info!(target: "raft", "{msg}{}", fields.0),
            Level::Debug => tracing::debug!(target: "raft", "{msg}{}", fields.0),
            Level::Trace => tracing::trace!(target: "raft", "{msg}{}", fields.0),
        }
        Ok(())
    }
}

/// A logger for raft-rs that writes through `tracing`.
pub fn logger() -> slog::Logger {
    slog::Logger::root(TracingDrain.fuse(), slog::o!())
}
