//! The admission configuration file (`--admission-control-config-file`, upstream's
//! `ReadAdmissionConfiguration`): an `AdmissionConfiguration` naming plugins, each with its
//! configuration inline (`configuration`) or in a file of its own (`path`, relative to the
//! configuration file's directory).
//!
//! ```yaml
//! apiVersion: apiserver.config.k8s.io/v1
//! kind: AdmissionConfiguration
//! plugins:
//! - name: PodSecurity
//!   configuration:
//!     apiVersion: pod-security.admission.config.k8s.io/v1
//!     kind: PodSecurityConfiguration
//!     defaults: { enforce: baseline }
//! ```
//!
//! A plugin takes its configuration with [`AdmissionConfig::take`] while the chain is built;
//! configuration left for an enabled plugin that upstream configures this way, but this
//! server does not, is refused at startup rather than silently ignored.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;
use std::path::{Path, PathBuf};

use parking_lot::Mutex;
use serde_json::Value;

/// Largest configuration file read (the files are small; this bounds a mistaken path).
const MAX_FILE: u64 = 3 * 1024 * 1024;

/// The `AdmissionConfiguration` API versions upstream decodes.
const API_VERSIONS: &[&str] =
    &["apiserver.config.k8s.io/v1", "apiserver.config.k8s.io/v1alpha1", "apiserver.k8s.io/v1alpha1"];

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("reading {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path} is larger than {MAX_FILE} bytes")]
    TooLarge { path: PathBuf },
    #[error("decoding {path}: {message}")]
    Decode { path: PathBuf, message: String },
    #[error("{0}")]
    Invalid(String),
}

/// The per-plugin configurations of the file (none without the flag).
#[derive(Debug, Default)]
pub struct AdmissionConfig {
    plugins: BTreeMap<String, Value>,
    taken: Mutex<BTreeSet<String>>,
}

fn read_limited(path: &Path) -> Result<String, ConfigError> {
    let read = |source| ConfigError::Read { path: path.to_path_buf(), source };
    let file = std::fs::File::open(path).map_err(read)?;
    let mut text = String::new();
    file.take(MAX_FILE + 1).read_to_string(&mut text).map_err(read)?;
    if text.len() as u64 > MAX_FILE {
        return Err(ConfigError::TooLarge { path: path.to_path_buf() });
    }
    Ok(text)
}

fn decode(path: &Path, text: &str) -> Result<Value, ConfigError> {
    serde_yaml::from_str::<Value>(text)
        .map_err(|e| ConfigError::Decode { path: path.to_path_buf(), message: e.to_string() })
}

impl AdmissionConfig {
    /// Reads the file of `--admission-control-config-file`, if given.
    pub fn load(path: Option<&Path>) -> Result<Self, ConfigError> {
        let Some(path) = path else { return Ok(Self::default()) };
        let text = read_limited(path)?;
        let doc = decode(path, &text)?;
        let base = path.parent().unwrap_or(Path::new("."));
        Self::from_document(path, &doc, base)
    }

    /// Builds the configuration from a decoded `AdmissionConfiguration`; plugin `path`s
    /// are read relative to `base`.
    pub fn from_document(path: &Path, doc: &Value, base: &Path) -> Result<Self, ConfigError> {
        let api_version = doc["apiVersion"].as_str().unwrap_or_default();
        let kind = doc["kind"].as_str().unwrap_or_default();
        if kind != "AdmissionConfiguration" || !API_VERSIONS.contains(&api_version) {
            return Err(ConfigError::Invalid(format!(
                "{}: expected kind AdmissionConfiguration of {}, got kind {kind:?} of {api_version:?} \
                 (the legacy per-plugin file formats are not supported)",
                path.display(),
                API_VERSIONS.join(", "),
            )));
        }
        let mut plugins = BTreeMap::new();
        for entry in doc["plugins"].as_array().into_iter().flatten() {
            let name = entry["name"].as_str().unwrap_or_default();
            if name.is_empty() {
                return Err(ConfigError::Invalid(format!("{}: plugins[].name is required", path.display())));
            }
            if plugins.contains_key(name) {
                return Err(ConfigError::Invalid(format!(
                    "{}: duplicate plugin name {name:?} in plugins",
                    path.display()
                )));
            }
            // Inline configuration wins over a path, as upstream.
            let config = match (&entry["configuration"], entry["path"].as_str().filter(|p| !p.is_empty())) {
                (Value::Null, Some(p)) => {
                    let file = base.join(p);
                    let text = read_limited(&file)?;
                    decode(&file, &text)?
                }
                (Value::Null, None) => Value::Null,
                (inline, _) => inline.clone(),
            };
            plugins.insert(name.to_string(), config);
        }
        Ok(Self { plugins, taken: Mutex::new(BTreeSet::new()) })
    }

    /// The configuration given for `plugin`, marked as used.
    pub fn take(&self, plugin: &str) -> Option<&Value> {
        let v = self.plugins.get(plugin).filter(|v| !v.is_null())?;
        self.taken.lock().insert(plugin.to_string());
        Some(v)
    }

    /// Plugins among `enabled` with a configuration no plugin took.
    pub fn unused<'a>(&self, enabled: &[&'a str]) -> Vec<&'a str> {
        let taken = self.taken.lock();
        enabled
            .iter()
            .copied()
            .filter(|p| self.plugins.get(*p).is_some_and(|v| !v.is_null()) && !taken.contains(*p))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn inline_and_path_configurations() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("psa.yaml"),
            "kind: PodSecurityConfiguration\ndefaults:\n  enforce: baseline\n",
        )
        .unwrap();
        let doc = json!({
            "apiVersion": "apiserver.config.k8s.io/v1",
            "kind": "AdmissionConfiguration",
            "plugins": [
                { "name": "PodSecurity", "path": "psa.yaml" },
                { "name": "EventRateLimit", "configuration": { "kind": "Configuration" } },
            ],
        });
        let c = AdmissionConfig::from_document(Path::new("admission.yaml"), &doc, dir.path()).unwrap();
        assert_eq!(c.take("PodSecurity").unwrap()["defaults"]["enforce"], "baseline");
        assert_eq!(c.unused(&["PodSecurity", "EventRateLimit", "LimitRanger"]), vec!["EventRateLimit"]);
    }

    #[test]
    fn refuses_other_kinds_and_duplicates() {
        let base = Path::new(".");
        let other = json!({ "apiVersion": "v1", "kind": "ConfigMap" });
        assert!(AdmissionConfig::from_document(Path::new("f"), &other, base).is_err());
        let dup = json!({
            "apiVersion": "apiserver.config.k8s.io/v1",
            "kind": "AdmissionConfiguration",
            "plugins": [{ "name": "PodSecurity" }, { "name": "PodSecurity" }],
        });
        let e = AdmissionConfig::from_document(Path::new("f"), &dup, base).unwrap_err();
        assert!(e.to_string().contains("duplicate plugin name"), "{e}");
    }
}
