//! Encryption at rest: values of the configured resources are transformed before they
//! reach etcd and back after they are read (upstream's `storage/value`).
//!
//! - [`options`]: `--encryption-provider-config` and its automatic reload.
//! - [`config`]: the `EncryptionConfiguration` file and the transformers it describes.
//! - [`transformer`]: choosing a transformer by a value's prefix; the identity.
//! - [`aes`], [`secretbox`]: the providers.
//!
//! [`Encryption`] is what [`crate::storage::etcd3::Etcd`] calls for every value
//! ([`crate::storage::value::ValueTransformer`]): it maps the etcd key to its resource
//! (longest store prefix), and the resource to its transformer. Keys of resources the
//! configuration does not name are stored as they are, but still refuse to read a value
//! that is encrypted. With `--encryption-provider-config-automatic-reload` the file is
//! polled every minute and a changed, valid configuration replaces the old one at once;
//! an invalid one is logged and the old one kept (upstream's behaviour).

pub mod aes;
pub mod config;
pub mod options;
pub mod secretbox;
pub mod transformer;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::{Mutex, RwLock};

use crate::storage::value::{TransformError, ValueTransformer};
use config::{EncryptionConfig, GroupResource};
use transformer::{Identity, PrefixTransformers, Transformer};

/// How often `--encryption-provider-config-automatic-reload` looks at the file.
pub const RELOAD_INTERVAL: Duration = Duration::from_secs(60);

/// The transformer of every stored resource, under the configuration in force.
struct Resolved {
    /// (etcd key prefix of a store, its transformer); resources stored as is have none.
    by_prefix: Vec<(String, Arc<PrefixTransformers>)>,
}

/// Encryption at rest for the whole store; see the module docs.
pub struct Encryption {
    path: PathBuf,
    /// Every store's etcd key prefix and resource, fixed at start.
    stores: Vec<(String, GroupResource)>,
    current: RwLock<Arc<Resolved>>,
    /// SHA-256 of the file content in force, to notice changes without keeping keys.
    hash: Mutex<[u8; 32]>,
}

impl std::fmt::Debug for Encryption {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Encryption").field("path", &self.path).finish_non_exhaustive()
    }
}

impl Encryption {
    /// Loads `--encryption-provider-config` (None when the flag is not set). `stores`
    /// are the etcd key prefixes of the served resources (`/registry/secrets/`) with their
    /// group and plural; where several share a prefix the first listed wins.
    pub fn new(
        opts: &options::Options,
        stores: Vec<(String, GroupResource)>,
    ) -> Result<Option<Arc<Self>>, String> {
        let Some(path) = &opts.encryption_provider_config else {
            if opts.encryption_provider_config_automatic_reload {
                return Err(
                    "--encryption-provider-config-automatic-reload must be set with --encryption-provider-config".into()
                );
            }
            return Ok(None);
        };
        let (cfg, hash) =
            EncryptionConfig::load(path).map_err(|e| format!("--encryption-provider-config: {e}"))?;
        let current = RwLock::new(Arc::new(resolve(&cfg, &stores)));
        Ok(Some(Arc::new(Self { path: path.clone(), stores, current, hash: Mutex::new(hash) })))
    }

    /// Reads the file again; replaces the configuration when it changed and is valid.
    /// Returns whether it was replaced.
    pub fn reload(&self) -> Result<bool, String> {
        let (cfg, hash) = EncryptionConfig::load(&self.path).map_err(|e| e.to_string())?;
        let mut current_hash = self.hash.lock();
        if *current_hash == hash {
            return Ok(false);
        }
        *self.current.write() = Arc::new(resolve(&cfg, &self.stores));
        *current_hash = hash;
        Ok(true)
    }

    /// Polls the file every [`RELOAD_INTERVAL`] until the process ends.
    pub async fn reload_forever(self: Arc<Self>) {
        let mut ticker = tokio::time::interval(RELOAD_INTERVAL);
        ticker.tick().await;
        loop {
            ticker.tick().await;
            let this = self.clone();
            match tokio::task::spawn_blocking(move || this.reload()).await {
                Ok(Ok(true)) => {
                    tracing::info!(path = %self.path.display(), "loaded new encryption configuration")
                }
                Ok(Ok(false)) => {}
                Ok(Err(e)) => {
                    tracing::error!(path = %self.path.display(), "keeping the encryption configuration in force: {e}")
                }
                Err(e) => tracing::error!("encryption configuration reload: {e}"),
            }
        }
    }

    fn transformer_for(&self, key: &str) -> Option<Arc<PrefixTransformers>> {
        let resolved = self.current.read().clone();
        resolved
            .by_prefix
            .iter()
            .filter(|(p, _)| key.starts_with(p.as_str()))
            .max_by_key(|(p, _)| p.len())
            .map(|(_, t)| t.clone())
    }
}

/// The transformer of each store under `cfg`.
fn resolve(cfg: &EncryptionConfig, stores: &[(String, GroupResource)]) -> Resolved {
    let mut by_prefix: Vec<(String, Arc<PrefixTransformers>)> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for (prefix, gr) in stores {
        // The first store of a shared prefix decides (core `events` before events.k8s.io).
        if !seen.insert(prefix.as_str()) {
            continue;
        }
        if let Some(t) = cfg.for_resource(gr) {
            by_prefix.push((prefix.clone(), t));
        }
    }
    Resolved { by_prefix }
}

impl ValueTransformer for Encryption {
    fn to_storage(&self, key: &str, value: Vec<u8>) -> Result<Vec<u8>, TransformError> {
        match self.transformer_for(key) {
            None => Ok(value),
            Some(t) => t.to_storage(&value, key.as_bytes()).map_err(TransformError),
        }
    }

    fn from_storage(&self, key: &str, data: Vec<u8>) -> Result<Vec<u8>, TransformError> {
        match self.transformer_for(key) {
            None => Identity::check(&data).map(|()| data).map_err(TransformError),
            Some(t) => t.from_storage(&data, key.as_bytes()).map_err(TransformError),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::Engine;

    fn key(fill: u8) -> String {
        base64::engine::general_purpose::STANDARD.encode([fill; 32])
    }

    fn write(dir: &std::path::Path, body: &str) -> PathBuf {
        let path = dir.join("enc.yaml");
        std::fs::write(
            &path,
            format!("apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\n{body}"),
        )
        .unwrap();
        path
    }

    fn stores() -> Vec<(String, GroupResource)> {
        vec![
            ("/registry/secrets/".into(), GroupResource::new("", "secrets")),
            ("/registry/configmaps/".into(), GroupResource::new("", "configmaps")),
            ("/registry/events/".into(), GroupResource::new("", "events")),
            ("/registry/events/".into(), GroupResource::new("events.k8s.io", "events")),
        ]
    }

    fn opts(path: Option<PathBuf>, reload: bool) -> options::Options {
        options::Options {
            encryption_provider_config: path,
            encryption_provider_config_automatic_reload: reload,
        }
    }

    #[test]
    fn encrypts_configured_resources_only() {
        let dir = tempfile::tempdir().unwrap();
        let body = format!(
            "resources:\n- resources: [secrets, events]\n  providers:\n  - aescbc:\n      keys: [{{name: key1, secret: {}}}]\n  - identity: {{}}\n",
            key(1)
        );
        let enc = Encryption::new(&opts(Some(write(dir.path(), &body)), false), stores()).unwrap().unwrap();
        let k = "/registry/secrets/default/s";
        let stored = enc.to_storage(k, b"{\"data\":{\"x\":\"c2VjcmV0\"}}".to_vec()).unwrap();
        assert!(stored.starts_with(b"k8s:enc:aescbc:v1:key1:"));
        assert!(!String::from_utf8_lossy(&stored).contains("c2VjcmV0"));
        assert_eq!(enc.from_storage(k, stored.clone()).unwrap(), b"{\"data\":{\"x\":\"c2VjcmV0\"}}");
        // Values written before encryption was turned on still read (identity listed).
        assert_eq!(enc.from_storage(k, b"{}".to_vec()).unwrap(), b"{}");
        // Unconfigured resources are stored as they are but refuse encrypted bytes.
        let cm = "/registry/configmaps/default/c";
        assert_eq!(enc.to_storage(cm, b"{}".to_vec()).unwrap(), b"{}");
        assert_eq!(
            enc.from_storage(cm, stored.clone()).unwrap_err().0,
            "identity transformer tried to read encrypted data"
        );
        assert!(enc.to_storage("/registry/events/ns/e", b"{}".to_vec()).unwrap().starts_with(b"k8s:enc:"));
        // Keys outside every store are left alone.
        assert_eq!(enc.to_storage("/other/x", b"{}".to_vec()).unwrap(), b"{}");
    }

    #[test]
    fn reload_swaps_the_configuration() {
        let dir = tempfile::tempdir().unwrap();
        let one = format!(
            "resources:\n- resources: [secrets]\n  providers: [{{aesgcm: {{keys: [{{name: a, secret: {}}}]}}}}]\n",
            key(1)
        );
        let path = write(dir.path(), &one);
        let enc = Encryption::new(&opts(Some(path.clone()), true), stores()).unwrap().unwrap();
        let k = "/registry/secrets/ns/s";
        let old = enc.to_storage(k, b"{}".to_vec()).unwrap();
        assert!(!enc.reload().unwrap(), "unchanged file");
        // A broken file keeps the old configuration.
        std::fs::write(&path, "kind: nonsense").unwrap();
        assert!(enc.reload().is_err());
        assert_eq!(enc.from_storage(k, old.clone()).unwrap(), b"{}");
        let two = format!(
            "resources:\n- resources: [secrets]\n  providers: [{{secretbox: {{keys: [{{name: b, secret: {}}}]}}}}, {{aesgcm: {{keys: [{{name: a, secret: {}}}]}}}}]\n",
            key(2),
            key(1)
        );
        write(dir.path(), &two);
        assert!(enc.reload().unwrap());
        assert!(enc.to_storage(k, b"{}".to_vec()).unwrap().starts_with(b"k8s:enc:secretbox:v1:b:"));
        assert_eq!(enc.from_storage(k, old).unwrap(), b"{}");
    }

    #[test]
    fn wrong_key_fails_cleanly() {
        let dir = tempfile::tempdir().unwrap();
        let p1 = format!(
            "resources:\n- resources: ['*.*']\n  providers: [{{aescbc: {{keys: [{{name: k, secret: {}}}]}}}}]\n",
            key(1)
        );
        let a = Encryption::new(&opts(Some(write(dir.path(), &p1)), false), stores()).unwrap().unwrap();
        let stored = a.to_storage("/registry/secrets/ns/s", b"{\"a\":1}".to_vec()).unwrap();
        let p2 = format!(
            "resources:\n- resources: ['*.*']\n  providers: [{{aescbc: {{keys: [{{name: k, secret: {}}}]}}}}]\n",
            key(2)
        );
        let b = Encryption::new(&opts(Some(write(dir.path(), &p2)), false), stores()).unwrap().unwrap();
        // Same key name, different secret: decryption yields bad padding or garbage, never a panic.
        let r = b.from_storage("/registry/secrets/ns/s", stored);
        assert!(r.as_ref().map_or(true, |v| v != b"{\"a\":1}"));
    }

    #[test]
    fn flags() {
        assert!(Encryption::new(&opts(None, false), stores()).unwrap().is_none());
        assert!(Encryption::new(&opts(None, true), stores()).unwrap_err().contains("must be set with"));
        let e = Encryption::new(&opts(Some("/nonexistent/enc.yaml".into()), false), stores()).unwrap_err();
        assert!(e.contains("error opening encryption provider configuration file"), "{e}");
    }
}
