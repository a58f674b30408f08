//! `kube-system/extension-apiserver-authentication` (upstream's cluster authentication
//! trust controller, started as a post-start hook): the ConfigMap that servers delegating
//! authentication to this one (the scheduler, the controller manager, aggregated API
//! servers) read to trust its clients: `client-ca-file` (`--client-ca-file`) and, with
//! `--requestheader-client-ca-file`, the `requestheader-*` settings, the lists as JSON
//! arrays.
//!
//! Written at start and kept: the map is rewritten whenever it changes or is deleted
//! (the controller watches it) and checked every minute (and so picks up a rotated CA
//! file). As upstream, what is already published is merged in, not replaced: CA
//! certificates are the union of the published and this server's (expired ones dropped,
//! duplicates once), header lists the union in order, so several API servers with
//! different CAs share one map. Unlike upstream, a published value that does not parse is
//! dropped instead of stopping the controller.

use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use serde_json::{Map, Value, json};

use crate::authn::options::Options;
use crate::cacher::Filter;
use crate::errors::ApiResult;
use crate::registry::Registry;
use crate::registry::store::Store;

pub const NAMESPACE: &str = "kube-system";
pub const NAME: &str = "extension-apiserver-authentication";
const CLIENT_CA: &str = "client-ca-file";
const REQUESTHEADER_CA: &str = "requestheader-client-ca-file";
const REQUESTHEADER_LISTS: [&str; 4] = [
    "requestheader-username-headers",
    "requestheader-group-headers",
    "requestheader-extra-headers-prefix",
    "requestheader-allowed-names",
];
/// How often the map is checked without a change being seen (upstream's resync).
const RESYNC: Duration = Duration::from_secs(60);
/// How long after a failed write the next try comes.
const RETRY: Duration = Duration::from_secs(1);

/// What this server requires of the map, read from its flags' files.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Required {
    pub client_ca: Vec<Vec<u8>>,
    /// None without `--requestheader-client-ca-file`: no `requestheader-*` keys then.
    pub request_header: Option<RequestHeader>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RequestHeader {
    pub ca: Vec<Vec<u8>>,
    /// In `REQUESTHEADER_LISTS` order.
    pub lists: [Vec<String>; 4],
}

impl Required {
    /// Reads the CA files now (each sync, so a rotated file is published).
    pub fn from_options(opts: &Options) -> Result<Self, String> {
        let read = |path: &std::path::Path| -> Result<Vec<Vec<u8>>, String> {
            let pem = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
            Ok(certificates(&pem))
        };
        let client_ca = match &opts.client_ca_file {
            Some(p) => read(p)?,
            None => Vec::new(),
        };
        let rh = &opts.request_header;
        let request_header = match &rh.requestheader_client_ca_file {
            Some(p) => Some(RequestHeader {
                ca: read(p)?,
                lists: [
                    rh.requestheader_username_headers.clone(),
                    rh.requestheader_group_headers.clone(),
                    rh.requestheader_extra_headers_prefix.clone(),
                    rh.requestheader_allowed_names.clone(),
                ],
            }),
            None => None,
        };
        Ok(Required { client_ca, request_header })
    }
}

/// The DER certificates of a PEM bundle that are still valid (upstream drops expired
/// ones when it merges).
fn certificates(pem: &[u8]) -> Vec<Vec<u8>> {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_secs()
        as i64;
    crate::registry::resources::certificates::pem::blocks(pem)
        .into_iter()
        .filter(|b| b.label == "CERTIFICATE")
        .filter(|b| match x509_parser::parse_x509_certificate(&b.der) {
            Ok((_, c)) => c.validity().not_after.timestamp() > now,
            Err(_) => false,
        })
        .map(|b| b.der)
        .collect()
}

/// PEM of certificates, as Go's `pem.Encode` writes them (64-column lines).
fn encode_certificates(certs: &[Vec<u8>]) -> String {
    let mut out = String::new();
    for der in certs {
        out.push_str("-----BEGIN CERTIFICATE-----\n");
        let b64 = base64::engine::general_purpose::STANDARD.encode(der);
        for chunk in b64.as_bytes().chunks(64) {
            out.push_str(std::str::from_utf8(chunk).unwrap_or_default());
            out.push('\n');
        }
        out.push_str("-----END CERTIFICATE-----\n");
    }
    out
}

fn union<T: PartialEq + Clone>(a: &[T], b: &[T]) -> Vec<T> {
    let mut out: Vec<T> = Vec::new();
    for x in a.iter().chain(b) {
        if !out.contains(x) {
            out.push(x.clone());
        }
    }
    out
}

fn string_list(v: Option<&Value>) -> Vec<String> {
    v.and_then(Value::as_str).and_then(|s| serde_json::from_str::<Vec<String>>(s).ok()).unwrap_or_default()
}

/// The map's data: what is published merged with what this server requires (upstream's
/// `combinedClusterAuthenticationInfo` and `getConfigMapDataFor`).
pub fn combined_data(existing: &Map<String, Value>, required: &Required) -> Map<String, Value> {
    let mut data = Map::new();
    let published =
        |k: &str| certificates(existing.get(k).and_then(Value::as_str).unwrap_or_default().as_bytes());
    let client_ca = union(&published(CLIENT_CA), &required.client_ca);
    if !client_ca.is_empty() {
        data.insert(CLIENT_CA.into(), json!(encode_certificates(&client_ca)));
    }
    // The request-header keys are published with a request-header CA only.
    let published_rh_ca = published(REQUESTHEADER_CA);
    let required_rh = required.request_header.clone().unwrap_or_default();
    let rh_ca = union(&published_rh_ca, &required_rh.ca);
    if !rh_ca.is_empty() {
        for (i, key) in REQUESTHEADER_LISTS.iter().enumerate() {
            let list = union(&string_list(existing.get(*key)), &required_rh.lists[i]);
            data.insert((*key).into(), json!(serde_json::to_string(&list).unwrap_or_else(|_| "[]".into())));
        }
        data.insert(REQUESTHEADER_CA.into(), json!(encode_certificates(&rh_ca)));
    }
    data
}

/// One round: creates or rewrites the map when its data is not what it should be.
pub async fn sync(store: &Store, opts: &Options) -> ApiResult<()> {
    let required = Required::from_options(opts).map_err(crate::errors::ApiError::internal)?;
    match store.get_fresh(Some(NAMESPACE), NAME).await {
        Ok((mut cm, _)) => {
            let existing = cm["data"].as_object().cloned().unwrap_or_default();
            let data = combined_data(&existing, &required);
            if data == existing {
                return Ok(());
            }
            cm["data"] = Value::Object(data);
            // Guarded by the resourceVersion read: a concurrent change means another round.
            store.update(Some(NAMESPACE), NAME, cm, None, false, None).await?;
            tracing::info!("updated configmap {NAMESPACE}/{NAME}");
            Ok(())
        }
        Err(e) if e.is_not_found() => {
            let cm = json!({
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": { "name": NAME, "namespace": NAMESPACE },
                "data": combined_data(&Map::new(), &required),
            });
            match store.create(Some(NAMESPACE), cm, false).await {
                Ok(_) => {
                    tracing::info!("created configmap {NAMESPACE}/{NAME}");
                    Ok(())
                }
                Err(e) if e.reason == "AlreadyExists" => Ok(()),
                Err(e) => Err(e),
            }
        }
        Err(e) => Err(e),
    }
}

/// Keeps the map current until the process ends: a sync at once, then on every change
/// to the map and every minute.
pub async fn run(registry: Arc<Registry>, opts: Options) {
    let store = registry.core("configmaps");
    let filter = Filter { namespace: Some(NAMESPACE.into()), name: Some(NAME.into()), ..Default::default() };
    let mut events = None;
    loop {
        let wait = match sync(&store, &opts).await {
            Ok(()) => RESYNC,
            Err(e) => {
                tracing::warn!("keeping configmap {NAMESPACE}/{NAME}: {}", e.message);
                RETRY
            }
        };
        if events.is_none() {
            events = store.watch(filter.clone(), None, false, false).await.ok().map(|(rx, _)| rx);
        }
        let changed = async {
            match events.as_mut() {
                Some(rx) => rx.recv().await.is_some(),
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            open = changed => {
                if !open {
                    events = None;
                }
            }
            _ = tokio::time::sleep(wait) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cert(cn: &str) -> Vec<u8> {
        crate::authn::x509::tests::ca(cn).der().to_vec()
    }

    #[test]
    fn data_as_upstream_writes_it() {
        let (a, b) = (cert("client-ca"), cert("front-proxy-ca"));
        let required = Required {
            client_ca: vec![a.clone()],
            request_header: Some(RequestHeader {
                ca: vec![b.clone()],
                lists: [
                    vec!["X-Remote-User".into()],
                    vec!["X-Remote-Group".into()],
                    vec!["X-Remote-Extra-".into()],
                    vec!["front-proxy-client".into()],
                ],
            }),
        };
        let data = combined_data(&Map::new(), &required);
        assert_eq!(data["requestheader-username-headers"], "[\"X-Remote-User\"]");
        assert_eq!(data["requestheader-allowed-names"], "[\"front-proxy-client\"]");
        assert_eq!(certificates(data[CLIENT_CA].as_str().unwrap().as_bytes()), vec![a.clone()]);
        assert_eq!(certificates(data[REQUESTHEADER_CA].as_str().unwrap().as_bytes()), vec![b.clone()]);
        // Stable: the same inputs give the same map, so nothing is rewritten.
        assert_eq!(combined_data(&data, &required), data);
        // Another server's CA and names stay, after what was published.
        let c = cert("other-ca");
        let mut other = required.clone();
        other.client_ca = vec![c.clone()];
        other.request_header.as_mut().unwrap().lists[3] = vec!["other-proxy".into()];
        let merged = combined_data(&data, &other);
        assert_eq!(certificates(merged[CLIENT_CA].as_str().unwrap().as_bytes()), vec![a, c]);
        assert_eq!(merged["requestheader-allowed-names"], "[\"front-proxy-client\",\"other-proxy\"]");
        // Without a request-header CA anywhere, only the client CA is published.
        let plain = combined_data(&Map::new(), &Required { client_ca: vec![b], request_header: None });
        assert_eq!(plain.keys().collect::<Vec<_>>(), [CLIENT_CA]);
        // Garbage that was published is replaced.
        let mut junk = Map::new();
        junk.insert(CLIENT_CA.into(), json!("junk"));
        junk.insert("requestheader-group-headers".into(), json!("not json"));
        assert_eq!(combined_data(&junk, &required), data);
    }
}
