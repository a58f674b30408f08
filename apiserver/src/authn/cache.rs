//! Remembers successful authentications for a few seconds (upstream's cached token
//! authenticator, `--token-success-cache-ttl` 10 s, failures not cached), so a client
//! sending many requests with one credential pays for signature checks and lookups once
//! per period. Entries are keyed by a SHA-256 of the credential: no secret is kept.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use parking_lot::RwLock;
use sha2::{Digest, Sha256};

use super::Authenticated;

/// How long a success is reused: a revoked credential (deleted Secret or service
/// account) keeps working at most this long, as upstream.
pub const SUCCESS_TTL: Duration = Duration::from_secs(10);

/// Beyond this many entries the cache starts over, bounding its memory.
const MAX_ENTRIES: usize = 10_000;

pub type Key = [u8; 32];

#[derive(Default)]
pub struct Cache {
    entries: RwLock<HashMap<Key, (Authenticated, Instant)>>,
}

impl Cache {
    /// The key of a credential: its kind, the audiences asked for, and its bytes.
    pub fn key<'a>(kind: &str, audiences: &[String], parts: impl IntoIterator<Item = &'a [u8]>) -> Key {
        let mut h = Sha256::new();
        h.update(kind.as_bytes());
        for a in audiences {
            h.update([0]);
            h.update(a.as_bytes());
        }
        for p in parts {
            h.update([1]);
            h.update((p.len() as u64).to_be_bytes());
            h.update(p);
        }
        h.finalize().into()
    }

    pub fn get(&self, key: &Key, now: Instant) -> Option<Authenticated> {
        let entries = self.entries.read();
        let (a, expires) = entries.get(key)?;
        (*expires > now).then(|| a.clone())
    }

    pub fn put(&self, key: Key, a: &Authenticated, now: Instant) {
        let mut entries = self.entries.write();
        if entries.len() >= MAX_ENTRIES {
            entries.retain(|_, (_, expires)| *expires > now);
            if entries.len() >= MAX_ENTRIES {
                entries.clear();
            }
        }
        entries.insert(key, (a.clone(), now + SUCCESS_TTL));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_expire_and_keys_separate_credentials() {
        let cache = Cache::default();
        let now = Instant::now();
        let a = Authenticated::default();
        let k = Cache::key("token", &[], [b"t1".as_slice()]);
        assert_ne!(k, Cache::key("token", &["aud".into()], [b"t1".as_slice()]));
        assert_ne!(k, Cache::key("token", &[], [b"t2".as_slice()]));
        cache.put(k, &a, now);
        assert_eq!(cache.get(&k, now + Duration::from_secs(9)), Some(a));
        assert_eq!(cache.get(&k, now + SUCCESS_TTL), None);
    }
}
