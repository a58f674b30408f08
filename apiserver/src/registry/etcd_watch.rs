//! Watches served straight from etcd, for `--watch-cache=false`: each client watch gets its
//! own etcd watch on the resource's prefix (the namespace's, when the watch is namespaced),
//! as upstream's etcd3 watcher does. No bookmarks are sent (upstream sends none without the
//! cache either); a start revision etcd has compacted ends the stream with an ERROR event
//! carrying 410 Gone.

use std::sync::Arc;

use serde_json::Value;
use tokio::sync::mpsc;

use super::store::{Store, to_served};
use crate::cacher::{CachedObject, Event, EventType, Filter, translate, with_rv};
use crate::errors::{ApiError, ApiResult};
use crate::registry::resource::Resource;
use crate::storage::etcd3::{Change, StorageError, WatchItem};

/// Events queued for one client before the etcd stream waits for it.
const BUFFER: usize = 256;

/// Starts a watch of `store`'s objects matching `filter`. `rv` None or 0: the current
/// objects first, as ADDED events; otherwise the changes after `rv`.
pub async fn watch(store: &Store, filter: Filter, rv: Option<i64>) -> ApiResult<mpsc::Receiver<Event>> {
    let prefix = match &filter.namespace {
        Some(ns) => format!("{}{ns}/", store.prefix),
        None => store.prefix.clone(),
    };
    let storage_error = |e: StorageError| ApiError::internal(format!("etcd: {e}"));
    let mut initial = Vec::new();
    let from = match rv {
        None | Some(0) => {
            let (kvs, rev) = store.etcd.list(&prefix, 0).await.map_err(storage_error)?;
            for kv in kvs {
                let change = Change {
                    key: kv.key,
                    value: Some(kv.value),
                    prev_value: None,
                    mod_revision: kv.mod_revision,
                };
                match event_of(&store.res, &store.prefix, &filter, change).await {
                    Ok(ev) => initial.extend(ev),
                    Err(e) => {
                        initial.push(error_event(&e));
                        break;
                    }
                }
            }
            rev + 1
        }
        Some(r) => r + 1,
    };
    let mut stream = store.etcd.watch(&prefix, from).await.map_err(storage_error)?;
    let (tx, rx) = mpsc::channel(BUFFER);
    let (res, base) = (store.res.clone(), store.prefix.clone());
    tokio::spawn(async move {
        for ev in initial {
            let last = ev.kind == EventType::Error;
            if tx.send(ev).await.is_err() || last {
                return;
            }
        }
        loop {
            let item = tokio::select! {
                item = stream.items.recv() => item,
                _ = tx.closed() => return,
            };
            let events = match item {
                None => return,
                Some(Ok(WatchItem::Progress(_))) => continue,
                Some(Ok(WatchItem::Changes(changes))) => {
                    let mut events: Vec<Event> = Vec::with_capacity(changes.len());
                    for c in changes {
                        match event_of(&res, &base, &filter, c).await {
                            Ok(ev) => events.extend(ev),
                            // The watcher learns of it (and the watch ends) rather than
                            // missing the change.
                            Err(e) => {
                                events.push(error_event(&e));
                                break;
                            }
                        }
                    }
                    events
                }
                Some(Err(StorageError::Compacted(compacted))) => {
                    let e = ApiError::gone(format!("too old resource version: {} ({compacted})", from - 1));
                    vec![error_event(&e)]
                }
                Some(Err(e)) => vec![error_event(&ApiError::internal(format!("etcd watch: {e}")))],
            };
            for ev in events {
                let last = ev.kind == EventType::Error;
                if tx.send(ev).await.is_err() || last {
                    return;
                }
            }
        }
    });
    Ok(rx)
}

/// The event a change means to a watcher with `filter` (see [`translate`]), if any; an
/// error when a stored value does not decode or convert.
async fn event_of(res: &Resource, base: &str, filter: &Filter, c: Change) -> Result<Option<Event>, ApiError> {
    let Some(key) = c.key.strip_prefix(base).map(str::to_string) else { return Ok(None) };
    let decode = |bytes: &[u8]| -> Result<Value, ApiError> {
        serde_json::from_slice(bytes).map_err(|e| {
            tracing::error!(key = c.key, "stored object does not decode: {e}");
            ApiError::internal(format!("unable to decode an event from the watch stream: {}: {e}", c.key))
        })
    };
    // The new value and the previous one, converted together.
    let mut values = Vec::with_capacity(2);
    if let Some(bytes) = &c.value {
        values.push(decode(bytes)?);
    }
    if let Some(bytes) = &c.prev_value {
        values.push(decode(bytes)?);
    }
    let mut values = to_served(res, values).await?.into_iter();
    let cached = |v: Value| Arc::new(CachedObject::new(res, &with_rv(v, c.mod_revision), c.mod_revision));
    let obj = if c.value.is_some() { values.next().map(cached) } else { None };
    let prev = if c.prev_value.is_some() { values.next().map(cached) } else { None };
    let (kind, obj) = match obj {
        Some(o) => (if prev.is_some() { EventType::Modified } else { EventType::Added }, o),
        // A deletion reports the last state, at the deletion's revision.
        None => match prev.clone() {
            Some(p) => (EventType::Deleted, p),
            None => return Ok(None),
        },
    };
    Ok(translate(filter, &Event { kind, key, obj, prev, rv: c.mod_revision }))
}

fn error_event(e: &ApiError) -> Event {
    Event {
        kind: EventType::Error,
        key: String::new(),
        obj: Arc::new(CachedObject::plain(&e.to_status())),
        prev: None,
        rv: 0,
    }
}
