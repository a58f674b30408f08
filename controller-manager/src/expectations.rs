//! Controller expectations: what a controller has asked the API server to create or delete
//! and not yet seen in its informer. Until they are met, a sync must not act on the
//! informer's (stale) count, or it would create or delete a second time. Expectations
//! expire after five minutes, as upstream, so a lost watch event cannot wedge a controller.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use parking_lot::Mutex;
use tokio::time::Instant;

const TTL: Duration = Duration::from_secs(5 * 60);

#[derive(Debug)]
struct Expectation {
    adds: i64,
    /// Keys of the objects whose deletion was asked for and not yet observed.
    deletes: HashSet<String>,
    set_at: Instant,
}

/// Expectations per controller key (`namespace/name` of the owner).
#[derive(Debug, Default)]
pub struct Expectations {
    map: Mutex<HashMap<String, Expectation>>,
}

impl Expectations {
    /// Whether the owner may be synced from the informer's state.
    pub fn satisfied(&self, key: &str) -> bool {
        match self.map.lock().get(key) {
            None => true,
            Some(e) => (e.adds <= 0 && e.deletes.is_empty()) || e.set_at.elapsed() > TTL,
        }
    }

    /// Records that `adds` creations are in flight for `key`.
    pub fn expect_creations(&self, key: &str, adds: usize) {
        self.map.lock().insert(
            key.to_owned(),
            Expectation { adds: adds as i64, deletes: HashSet::new(), set_at: Instant::now() },
        );
    }

    /// Records that the objects `deleted` are being deleted for `key`.
    pub fn expect_deletions(&self, key: &str, deleted: impl IntoIterator<Item = String>) {
        self.map.lock().insert(
            key.to_owned(),
            Expectation { adds: 0, deletes: deleted.into_iter().collect(), set_at: Instant::now() },
        );
    }

    /// Records creations and deletions in flight together, for controllers that create on
    /// some nodes and delete on others in one step (the DaemonSet controller).
    pub fn expect(&self, key: &str, adds: usize, deleted: impl IntoIterator<Item = String>) {
        self.map.lock().insert(
            key.to_owned(),
            Expectation { adds: adds as i64, deletes: deleted.into_iter().collect(), set_at: Instant::now() },
        );
    }

    /// One creation was observed (or failed, and will never be).
    pub fn creation_observed(&self, key: &str) {
        if let Some(e) = self.map.lock().get_mut(key) {
            e.adds -= 1;
        }
    }

    /// The deletion of `object` was observed (or failed); counted once per object.
    pub fn deletion_observed(&self, key: &str, object: &str) {
        if let Some(e) = self.map.lock().get_mut(key) {
            e.deletes.remove(object);
        }
    }

    /// Forgets `key` (its owner is gone).
    pub fn delete(&self, key: &str) {
        self.map.lock().remove(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn creations_and_deletions_must_be_observed() {
        let e = Expectations::default();
        assert!(e.satisfied("ns/rs"));
        e.expect_creations("ns/rs", 2);
        e.creation_observed("ns/rs");
        assert!(!e.satisfied("ns/rs"));
        e.creation_observed("ns/rs");
        assert!(e.satisfied("ns/rs"));
        e.expect_deletions("ns/rs", ["ns/a".to_string(), "ns/b".to_string()]);
        e.deletion_observed("ns/rs", "ns/a");
        e.deletion_observed("ns/rs", "ns/a");
        assert!(!e.satisfied("ns/rs"));
        e.deletion_observed("ns/rs", "ns/b");
        assert!(e.satisfied("ns/rs"));
    }
}
