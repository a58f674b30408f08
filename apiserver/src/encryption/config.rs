//! `EncryptionConfiguration` (`apiserver.config.k8s.io/v1`, YAML or JSON): parsing,
//! upstream's validation, and the transformers it describes per group-resource.
//!
//! ```yaml
//! apiVersion: apiserver.config.k8s.io/v1
//! kind: EncryptionConfiguration
//! resources:
//!   - resources: [secrets, "*.apps"]
//!     providers:
//!       - aescbc: {keys: [{name: key1, secret: <base64 of 32 bytes>}]}
//!       - identity: {}
//! ```
//!
//! A resource named in several entries gets the providers of all of them, in order.
//! Lookup is exact (`secrets`, `deployments.apps`), then the group's wildcard (`*.apps`,
//! `*.` for the core group), then `*.*`; anything else is stored as is.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use base64::Engine;
use serde::Deserialize;

use super::aes::{self, Cbc, Gcm};
use super::secretbox::{self, Secretbox};
use super::transformer::{Identity, PrefixTransformer, PrefixTransformers, Transformer};

pub const API_VERSION: &str = "apiserver.config.k8s.io/v1";
pub const KIND: &str = "EncryptionConfiguration";

const AES_CBC_PREFIX: &str = "k8s:enc:aescbc:v1:";
const AES_GCM_PREFIX: &str = "k8s:enc:aesgcm:v1:";
const SECRETBOX_PREFIX: &str = "k8s:enc:secretbox:v1:";

/// Largest configuration file read.
const MAX_FILE: u64 = 1 << 20;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ConfigError {
    #[error("error opening encryption provider configuration file {path:?}: {message}")]
    Read { path: String, message: String },
    #[error("encryption provider configuration file {0:?} is empty")]
    Empty(String),
    #[error("error while parsing file: {0}")]
    Parse(String),
    #[error("error while parsing file: {0}")]
    Invalid(String),
    #[error("error while building transformers: {0}")]
    Build(String),
}

/// A group and resource as the configuration names them (`deployments.apps` is
/// resource `deployments` of group `apps`; `*.` is every core resource).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct GroupResource {
    pub group: String,
    pub resource: String,
}

impl GroupResource {
    /// Upstream's `schema.ParseGroupResource`: the group is whatever follows the first dot.
    pub fn parse(s: &str) -> Self {
        match s.split_once('.') {
            Some((r, g)) => Self { group: g.to_string(), resource: r.to_string() },
            None => Self { group: String::new(), resource: s.to_string() },
        }
    }

    pub fn new(group: &str, resource: &str) -> Self {
        Self { group: group.to_string(), resource: resource.to_string() }
    }

    /// How the configuration spells it (`*.` for every core resource).
    fn yaml(&self) -> String {
        match (self.group.as_str(), self.resource.as_str()) {
            ("", "*") => "*.".into(),
            ("", r) => r.into(),
            (g, r) => format!("{r}.{g}"),
        }
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct File {
    api_version: Option<String>,
    kind: Option<String>,
    #[serde(default)]
    resources: Vec<ResourceConfiguration>,
}

#[derive(Deserialize)]
struct ResourceConfiguration {
    #[serde(default)]
    resources: Vec<String>,
    #[serde(default)]
    providers: Vec<ProviderConfiguration>,
}

#[derive(Deserialize)]
struct ProviderConfiguration {
    aesgcm: Option<Keys>,
    aescbc: Option<Keys>,
    secretbox: Option<Keys>,
    identity: Option<serde_yaml::Value>,
    kms: Option<serde_yaml::Value>,
}

#[derive(Deserialize)]
struct Keys {
    #[serde(default)]
    keys: Vec<Key>,
}

#[derive(Deserialize)]
struct Key {
    #[serde(default)]
    name: String,
    #[serde(default)]
    secret: String,
}

/// The transformers of a loaded configuration, by group-resource (wildcards included).
pub struct EncryptionConfig {
    by_resource: HashMap<GroupResource, Arc<PrefixTransformers>>,
}

impl std::fmt::Debug for EncryptionConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print keys.
        f.debug_struct("EncryptionConfig").field("resources", &self.by_resource.len()).finish()
    }
}

impl EncryptionConfig {
    /// Reads and builds the file at `path`; also returns the SHA-256 of its content, so
    /// a reload can tell whether it changed without keeping the keys around.
    pub fn load(path: &std::path::Path) -> Result<(Self, [u8; 32]), ConfigError> {
        use std::io::Read;
        let shown = path.display().to_string();
        let read_err = |e: std::io::Error| ConfigError::Read { path: shown.clone(), message: e.to_string() };
        let mut data = Vec::new();
        std::fs::File::open(path)
            .map_err(read_err)?
            .take(MAX_FILE + 1)
            .read_to_end(&mut data)
            .map_err(read_err)?;
        if data.len() as u64 > MAX_FILE {
            return Err(ConfigError::Parse(format!("{shown}: larger than {MAX_FILE} bytes")));
        }
        if data.is_empty() {
            return Err(ConfigError::Empty(shown));
        }
        let hash = ring::digest::digest(&ring::digest::SHA256, &data);
        let mut sum = [0u8; 32];
        sum.copy_from_slice(hash.as_ref());
        Ok((Self::parse(&data)?, sum))
    }

    /// Parses, validates and builds a configuration (YAML or JSON).
    pub fn parse(data: &[u8]) -> Result<Self, ConfigError> {
        let file: File = serde_yaml::from_slice(data).map_err(|e| ConfigError::Parse(e.to_string()))?;
        match (file.api_version.as_deref(), file.kind.as_deref()) {
            (Some(API_VERSION), Some(KIND)) => {}
            (v, k) => {
                return Err(ConfigError::Parse(format!(
                    "unsupported configuration apiVersion {:?} kind {:?}: want apiVersion {API_VERSION}, kind {KIND}",
                    v.unwrap_or_default(),
                    k.unwrap_or_default()
                )));
            }
        }
        let errs = validate(&file);
        if !errs.is_empty() {
            return Err(ConfigError::Invalid(aggregate(&errs)));
        }
        build(&file).map_err(ConfigError::Build)
    }

    /// The transformer for `gr`: its own entry, its group's wildcard, `*.*`; None when the
    /// configuration does not name it (it is stored as is).
    pub fn for_resource(&self, gr: &GroupResource) -> Option<Arc<PrefixTransformers>> {
        self.by_resource
            .get(gr)
            .or_else(|| self.by_resource.get(&GroupResource::new(&gr.group, "*")))
            .or_else(|| self.by_resource.get(&GroupResource::new("*", "*")))
            .cloned()
    }
}

/// Upstream's `field.ErrorList.ToAggregate` format.
fn aggregate(errs: &[String]) -> String {
    match errs {
        [one] => one.clone(),
        many => format!("[{}]", many.join(", ")),
    }
}

fn quoted_list(v: &[String]) -> String {
    let items: Vec<String> = v.iter().map(|s| format!("{s:?}")).collect();
    format!("[]string{{{}}}", items.join(", "))
}

/// Upstream's `validation.ValidateEncryptionConfiguration`, plus refusals of what this
/// server does not do (KMS) and of duplicate key names (reads would be ambiguous).
fn validate(file: &File) -> Vec<String> {
    let mut errs = Vec::new();
    if file.resources.is_empty() {
        errs.push("resources: Required value: at least one resources is required".to_string());
        return errs;
    }
    for (i, conf) in file.resources.iter().enumerate() {
        let r = format!("resources[{i}].resources");
        let p = format!("resources[{i}].providers");
        if conf.resources.is_empty() {
            errs.push(format!("{r}: Required value: at least one {r} is required"));
        }
        validate_overlap(&conf.resources, &r, &mut errs);
        validate_names(&conf.resources, &r, &mut errs);
        if conf.providers.is_empty() {
            errs.push(format!("{p}: Required value: at least one {p} is required"));
        }
        for (j, provider) in conf.providers.iter().enumerate() {
            let path = format!("{p}[{j}]");
            let found = [
                provider.kms.is_some(),
                provider.aesgcm.is_some(),
                provider.aescbc.is_some(),
                provider.secretbox.is_some(),
                provider.identity.is_some(),
            ]
            .iter()
            .filter(|x| **x)
            .count();
            if found == 0 {
                errs.push(format!(
                    "{path}: Invalid value: provider does not contain any of the expected providers: KMS, AESGCM, AESCBC, Secretbox, Identity"
                ));
                continue;
            }
            if found > 1 {
                errs.push(format!(
                    "{path}: Invalid value: more than one provider specified in a single element, should split into different list elements"
                ));
                continue;
            }
            if provider.kms.is_some() {
                errs.push(format!(
                    "{path}.kms: Unsupported value: KMS providers are not supported by this kube-apiserver: use aescbc, aesgcm, secretbox or identity"
                ));
            } else if let Some(k) = &provider.aesgcm {
                validate_keys(&k.keys, &format!("{path}.aesgcm.keys"), &aes::KEY_SIZES, &mut errs);
            } else if let Some(k) = &provider.aescbc {
                validate_keys(&k.keys, &format!("{path}.aescbc.keys"), &aes::KEY_SIZES, &mut errs);
            } else if let Some(k) = &provider.secretbox {
                validate_keys(&k.keys, &format!("{path}.secretbox.keys"), &[secretbox::KEY_SIZE], &mut errs);
            }
        }
    }
    errs
}

fn validate_overlap(resources: &[String], path: &str, errs: &mut Vec<String>) {
    let grs: Vec<GroupResource> = resources.iter().map(|r| GroupResource::parse(r)).collect();
    let (mut duplicate, mut overlap) = (false, false);
    for (i, a) in grs.iter().enumerate() {
        for (j, b) in grs.iter().enumerate() {
            if i == j {
                continue;
            }
            if a == b {
                duplicate = true;
                continue;
            }
            if (a.group == "*" && a.resource == "*")
                || (a.group == b.group && (a.resource == "*" || b.resource == "*"))
            {
                overlap = true;
            }
        }
    }
    if duplicate {
        errs.push(format!(
            "{path}: Invalid value: {}: the same resource cannot be specified multiple times",
            quoted_list(resources)
        ));
    }
    if overlap {
        errs.push(format!(
            "{path}: Invalid value: {}: using overlapping resources such as 'secrets' and '*.' in the same resource list is not allowed as they will be masked",
            quoted_list(resources)
        ));
    }
}

fn validate_names(resources: &[String], path: &str, errs: &mut Vec<String>) {
    for (j, res) in resources.iter().enumerate() {
        let at = format!("{path}[{j}]: Invalid value: {res:?}");
        let gr = GroupResource::parse(res);
        let problem = if res.to_lowercase() != *res {
            Some("resource name should not contain capital letters")
        } else if res == "*" {
            Some("use '*.' to encrypt all the resources from core API group or *.* to encrypt all resources")
        } else if matches!(
            res.as_str(),
            "apiserveripinfo" | "serviceipallocations" | "servicenodeportallocations"
        ) {
            Some("resources which do not have REST API/s cannot be encrypted")
        } else if gr.group == "events.k8s.io" {
            Some(
                "'*.events.k8s.io' objects are stored using the 'events' API group in etcd. Use 'events' instead in the config file",
            )
        } else if gr.group == "extensions" {
            Some("'extensions' group has been removed and cannot be used for encryption")
        } else if gr.group == "*" && gr.resource != "*" {
            Some("encrypting the same resource across groups is not supported")
        } else {
            None
        };
        if let Some(p) = problem {
            errs.push(format!("{at}: {p}"));
        }
    }
}

fn validate_keys(keys: &[Key], path: &str, sizes: &[usize], errs: &mut Vec<String>) {
    if keys.is_empty() {
        errs.push(format!("{path}: Required value: at least one keys is required"));
        return;
    }
    let mut names = HashSet::new();
    for (i, key) in keys.iter().enumerate() {
        let at = format!("{path}[{i}]");
        if key.name.is_empty() {
            errs.push(format!("{at}.name: Required value: name is a mandatory field for a key"));
        } else if !names.insert(key.name.as_str()) {
            errs.push(format!("{at}.name: Duplicate value: {:?}", key.name));
        }
        if key.secret.is_empty() {
            errs.push(format!("{at}.secret: Required value: secret is a mandatory field for a key"));
            continue;
        }
        match base64::engine::general_purpose::STANDARD.decode(&key.secret) {
            Err(_) => errs.push(format!("{at}.secret: Invalid value: \"REDACTED\": secrets must be base64 encoded")),
            Ok(secret) if !sizes.contains(&secret.len()) => errs.push(format!(
                "{at}.secret: Invalid value: \"REDACTED\": secret is not of the expected length, got {}, expected one of {sizes:?}",
                secret.len()
            )),
            Ok(_) => {}
        }
    }
}

/// Builds the validated configuration, refusing resources masked by an earlier wildcard.
fn build(file: &File) -> Result<EncryptionConfig, String> {
    let mut lists: HashMap<GroupResource, Vec<PrefixTransformer>> = HashMap::new();
    for conf in &file.resources {
        let transformers = conf.providers.iter().map(provider).collect::<Result<Vec<_>, _>>()?;
        for res in &conf.resources {
            let gr = GroupResource::parse(res);
            for mask in [GroupResource::new(&gr.group, "*"), GroupResource::new("*", "*")] {
                if lists.contains_key(&mask) {
                    return Err(format!(
                        "resource {:?} is masked by earlier rule {:?}",
                        gr.yaml(),
                        mask.yaml()
                    ));
                }
            }
            lists.entry(gr).or_default().extend(transformers.iter().cloned());
        }
    }
    let by_resource = lists
        .into_iter()
        .map(|(gr, list)| (gr, Arc::new(PrefixTransformers::new(list, "no matching prefix found"))))
        .collect();
    Ok(EncryptionConfig { by_resource })
}

fn provider(p: &ProviderConfiguration) -> Result<PrefixTransformer, String> {
    let (prefix, keys, no_match, make): (
        &str,
        &[Key],
        &'static str,
        fn(&[u8]) -> Result<Arc<dyn Transformer>, String>,
    ) = if let Some(k) = &p.aesgcm {
        (AES_GCM_PREFIX, &k.keys, "no matching key was found for the provided AES transformer", |key| {
            Ok(Arc::new(Gcm::new(key)?))
        })
    } else if let Some(k) = &p.aescbc {
        (AES_CBC_PREFIX, &k.keys, "no matching key was found for the provided AES transformer", |key| {
            Ok(Arc::new(Cbc::new(key)?))
        })
    } else if let Some(k) = &p.secretbox {
        (
            SECRETBOX_PREFIX,
            &k.keys,
            "no matching key was found for the provided Secretbox transformer",
            |key| Ok(Arc::new(Secretbox::new(key)?)),
        )
    } else if p.identity.is_some() {
        return Ok(PrefixTransformer { prefix: Vec::new(), transformer: Arc::new(Identity) });
    } else {
        return Err("provider does not contain any of the expected providers: KMS, AESGCM, AESCBC, Secretbox, Identity".into());
    };
    let mut per_key = Vec::new();
    for k in keys {
        let secret = base64::engine::general_purpose::STANDARD
            .decode(&k.secret)
            .map_err(|e| format!("could not obtain secret for named key {}: {e}", k.name))?;
        let transformer = make(&secret)
            .map_err(|e| format!("error while creating cipher for named key {}: {e}", k.name))?;
        per_key.push(PrefixTransformer { prefix: format!("{}:", k.name).into_bytes(), transformer });
    }
    Ok(PrefixTransformer {
        prefix: prefix.as_bytes().to_vec(),
        transformer: Arc::new(PrefixTransformers::new(per_key, no_match)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(n: usize, fill: u8) -> String {
        base64::engine::general_purpose::STANDARD.encode(vec![fill; n])
    }

    fn config(body: &str) -> Result<EncryptionConfig, ConfigError> {
        EncryptionConfig::parse(format!("apiVersion: {API_VERSION}\nkind: {KIND}\n{body}").as_bytes())
    }

    fn err(body: &str) -> String {
        config(body).unwrap_err().to_string()
    }

    #[test]
    fn parses_yaml_and_json() {
        let yaml = format!(
            "resources:\n- resources: [secrets, configmaps]\n  providers:\n  - aescbc:\n      keys:\n      - name: key1\n        secret: {}\n  - identity: {{}}\n",
            key(32, 1)
        );
        let c = config(&yaml).unwrap();
        assert!(c.for_resource(&GroupResource::new("", "secrets")).is_some());
        assert!(c.for_resource(&GroupResource::new("", "pods")).is_none());
        let json = format!(
            r#"{{"apiVersion":"{API_VERSION}","kind":"{KIND}","resources":[{{"resources":["*.*"],"providers":[{{"secretbox":{{"keys":[{{"name":"a","secret":"{}"}}]}}}}]}}]}}"#,
            key(32, 2)
        );
        let c = EncryptionConfig::parse(json.as_bytes()).unwrap();
        assert!(c.for_resource(&GroupResource::new("apps", "deployments")).is_some());
    }

    #[test]
    fn wildcards_and_lookup_order() {
        let body = format!(
            "resources:\n- resources: [deployments.apps]\n  providers: [{{identity: {{}}}}]\n- resources: ['*.apps']\n  providers: [{{aesgcm: {{keys: [{{name: g, secret: {k}}}]}}}}]\n- resources: ['*.']\n  providers: [{{aescbc: {{keys: [{{name: c, secret: {k}}}]}}}}]\n",
            k = key(16, 3)
        );
        let c = config(&body).unwrap();
        let write = |g: &str, r: &str| {
            let t = c.for_resource(&GroupResource::new(g, r))?;
            Some(
                String::from_utf8_lossy(&t.to_storage(b"{}", b"/k").ok()?)
                    .chars()
                    .take(18)
                    .collect::<String>(),
            )
        };
        assert_eq!(write("apps", "deployments").as_deref(), Some("{}"));
        assert_eq!(write("apps", "replicasets").as_deref(), Some("k8s:enc:aesgcm:v1:"));
        assert_eq!(write("", "secrets").as_deref(), Some("k8s:enc:aescbc:v1:"));
        assert_eq!(write("batch", "jobs"), None);
    }

    #[test]
    fn masked_resources_are_refused() {
        let body = format!(
            "resources:\n- resources: ['*.*']\n  providers: [{{identity: {{}}}}]\n- resources: [secrets]\n  providers: [{{aescbc: {{keys: [{{name: c, secret: {}}}]}}}}]\n",
            key(32, 1)
        );
        assert_eq!(
            err(&body),
            "error while building transformers: resource \"secrets\" is masked by earlier rule \"*.*\""
        );
    }

    #[test]
    fn validation_errors() {
        assert_eq!(
            err("resources: []"),
            "error while parsing file: resources: Required value: at least one resources is required"
        );
        assert_eq!(
            err("resources:\n- resources: [secrets]\n  providers: []"),
            "error while parsing file: resources[0].providers: Required value: at least one resources[0].providers is required"
        );
        assert!(err("resources:\n- resources: [secrets]\n  providers: [{aescbc: {keys: [{name: k, secret: '!!'}]}}]")
            .contains("resources[0].providers[0].aescbc.keys[0].secret: Invalid value: \"REDACTED\": secrets must be base64 encoded"));
        assert!(err(&format!(
            "resources:\n- resources: [secrets]\n  providers: [{{aesgcm: {{keys: [{{name: k, secret: {}}}]}}}}]",
            key(20, 1)
        ))
        .contains("secret is not of the expected length, got 20, expected one of [16, 24, 32]"));
        assert!(err(&format!(
            "resources:\n- resources: [secrets]\n  providers: [{{secretbox: {{keys: [{{name: k, secret: {}}}]}}}}]",
            key(16, 1)
        ))
        .contains("got 16, expected one of [32]"));
        assert!(err(&format!(
            "resources:\n- resources: [secrets]\n  providers: [{{aescbc: {{keys: [{{name: k, secret: {k}}}, {{name: k, secret: {k}}}]}}}}]",
            k = key(32, 1)
        ))
        .contains("keys[1].name: Duplicate value: \"k\""));
        assert!(
            err("resources:\n- resources: [secrets]\n  providers: [{aescbc: {keys: []}}]")
                .contains("aescbc.keys: Required value: at least one keys is required")
        );
        assert!(err("resources:\n- resources: [secrets]\n  providers: [{kms: {name: x, endpoint: 'unix:///k.sock'}}]")
            .contains("KMS providers are not supported"));
        assert!(
            err("resources:\n- resources: [secrets]\n  providers: [{identity: {}, aescbc: {keys: []}}]")
                .contains("more than one provider specified in a single element")
        );
        assert!(
            err("resources:\n- resources: [secrets]\n  providers: [{aescbcc: {}}]")
                .contains("provider does not contain any of the expected providers")
        );
        assert!(err("resources:\n- resources: [Secrets, '*', events.events.k8s.io, 'x.*']\n  providers: [{identity: {}}]")
            .contains("resource name should not contain capital letters"));
        assert!(
            err("resources:\n- resources: [secrets, '*.']\n  providers: [{identity: {}}]")
                .contains("overlapping resources")
        );
        assert!(
            err("resources:\n- resources: [secrets, secrets]\n  providers: [{identity: {}}]")
                .contains("the same resource cannot be specified multiple times")
        );
        assert!(
            EncryptionConfig::parse(b"kind: EncryptionConfig\napiVersion: v1\nresources: []")
                .unwrap_err()
                .to_string()
                .contains("unsupported configuration")
        );
        assert!(EncryptionConfig::parse(b"{not yaml").is_err());
    }

    #[test]
    fn reads_by_key_name_and_rotates() {
        // Rotation: key2 first now, key1 still listed.
        let old = config(&format!(
            "resources:\n- resources: [secrets]\n  providers: [{{aescbc: {{keys: [{{name: key1, secret: {}}}]}}}}]",
            key(32, 1)
        ))
        .unwrap();
        let new = config(&format!(
            "resources:\n- resources: [secrets]\n  providers: [{{aescbc: {{keys: [{{name: key2, secret: {}}}, {{name: key1, secret: {}}}]}}}}]",
            key(32, 2),
            key(32, 1)
        ))
        .unwrap();
        let gr = GroupResource::new("", "secrets");
        let (old, new) = (old.for_resource(&gr).unwrap(), new.for_resource(&gr).unwrap());
        let v1 = old.to_storage(b"{\"a\":1}", b"/registry/secrets/ns/s").unwrap();
        assert!(v1.starts_with(b"k8s:enc:aescbc:v1:key1:"));
        assert_eq!(new.from_storage(&v1, b"/registry/secrets/ns/s").unwrap(), b"{\"a\":1}");
        let v2 = new.to_storage(b"{\"a\":1}", b"/registry/secrets/ns/s").unwrap();
        assert!(v2.starts_with(b"k8s:enc:aescbc:v1:key2:"));
        // The old configuration does not know key2, and has no identity to fall back to.
        assert_eq!(
            old.from_storage(&v2, b"").unwrap_err(),
            "no matching key was found for the provided AES transformer"
        );
        assert_eq!(old.from_storage(b"{\"plain\":true}", b"").unwrap_err(), "no matching prefix found");
    }
}
