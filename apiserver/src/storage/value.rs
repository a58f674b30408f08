//! The hook through which every value passes on its way to and from etcd (upstream's
//! `storage/value.Transformer`). [`crate::storage::etcd3::Etcd`] applies it at its only
//! write points (create, update) and at every read (get, range pages, conflicts, watch
//! events and their previous values), so no reader or writer above it can bypass it.
//! Encryption at rest ([`crate::encryption`]) is the implementation.

use std::sync::Arc;

/// Why a value could not be transformed; the object is unreadable (or unwritable), which
/// the API reports as a 500 InternalError.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct TransformError(pub String);

/// Transforms the bytes stored under a key. `key` is the full etcd key (with the
/// `--etcd-prefix`): implementations pick their configuration by it and may bind the
/// stored bytes to it (AES-GCM authenticates it), so a value copied to another key does
/// not read back.
pub trait ValueTransformer: Send + Sync {
    /// The bytes to store for `value`.
    fn to_storage(&self, key: &str, value: Vec<u8>) -> Result<Vec<u8>, TransformError>;
    /// The value that was stored as `data`.
    fn from_storage(&self, key: &str, data: Vec<u8>) -> Result<Vec<u8>, TransformError>;
}

/// The transformer in use; None stores values as they are, at no cost.
pub type Slot = Arc<parking_lot::RwLock<Option<Arc<dyn ValueTransformer>>>>;
