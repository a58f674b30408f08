//! Multi-version concurrency control, as etcd's `mvcc` package: every write creates a new
//! revision, history stays readable until compacted, and watchers follow the revisions.

pub mod index;
pub mod key_index;
pub mod kvstore;
pub mod revision;
pub mod watchable;

pub use index::{KeyRange, RangeEnd};
pub use kvstore::{KvStore, MvccError, RangeOptions, RangeResult};
pub use revision::Revision;
pub use watchable::{WatchMsg, WatchSpec, WatchableStore, WatcherKey};
