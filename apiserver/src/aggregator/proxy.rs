//! Requests for a service-backed APIService's group version, sent on to its extension API
//! server (upstream's kube-aggregator `proxyHandler`).
//!
//! Such a request has passed this server's authentication and authorization already; it
//! goes on over TLS presenting the front-proxy client certificate
//! (`--proxy-client-cert-file`/`--proxy-client-key-file`), with who asked in
//! `X-Remote-User`, `X-Remote-Group` and `X-Remote-Extra-<key>` (the extension server
//! trusts those headers from a client certificate signed by the
//! `--requestheader-client-ca-file` it reads from the `extension-apiserver-authentication`
//! ConfigMap). The backend's certificate is checked against the APIService's `caBundle`
//! for the name `<service>.<namespace>.svc`, unless `insecureSkipTLSVerify`.
//!
//! Where it goes: one ready endpoint of the Service, as `--enable-aggregator-routing=true`
//! does upstream (this server does not assume it can reach cluster IPs; the admission and
//! conversion webhooks are dialed the same way). Upstream's default dials the cluster IP.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, Method, Request, Response, header};
use http_body_util::{BodyExt, Empty, Limited};
use hyper::body::Incoming;
use parking_lot::RwLock;
use rustls::ClientConfig;
use serde_json::Value;

use crate::admission::webhook::Cluster;
use crate::authn::User;
use crate::errors::{ApiError, ApiResult};
use crate::handlers::BoxBody;
use crate::proxy::{self, Location};

/// How long connecting to an extension server may take (upstream's proxy dialer).
const DIAL_TIMEOUT: Duration = Duration::from_secs(30);
/// How long the availability check waits for the discovery document (upstream: 5 s).
pub const DISCOVERY_TIMEOUT: Duration = Duration::from_secs(5);
/// The largest discovery document read from an extension server.
const MAX_DISCOVERY_BYTES: usize = 3 * 1024 * 1024;

/// The front-proxy client flags, with upstream's names.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct Options {
    /// Client certificate used to prove the identity of the aggregator or kube-apiserver
    /// when it must call out during a request (proxying to extension API servers).
    #[arg(long)]
    pub proxy_client_cert_file: Option<PathBuf>,
    /// Private key for the client certificate in --proxy-client-cert-file.
    #[arg(long)]
    pub proxy_client_key_file: Option<PathBuf>,
}

impl Options {
    pub fn validate(&self) -> Result<(), String> {
        if self.proxy_client_cert_file.is_some() != self.proxy_client_key_file.is_some() {
            return Err("--proxy-client-cert-file and --proxy-client-key-file go together".into());
        }
        Ok(())
    }
}

/// How one service-backed group version is reached, and what the last check found.
#[derive(Clone)]
pub struct Backend {
    /// The APIService's name (`v1alpha1.wardle.example.com`).
    pub api_service: String,
    pub group: String,
    pub version: String,
    pub namespace: String,
    pub service: String,
    pub port: u16,
    pub tls: Arc<ClientConfig>,
    pub group_priority_minimum: i64,
    pub version_priority: i64,
    /// The `Available` condition is true: requests are sent on (else 503).
    pub available: bool,
    /// The extension server's APIResourceList for the group version, from the last
    /// successful discovery check (what aggregated discovery shows of it).
    pub resources: Option<Value>,
}

impl Backend {
    /// The name the extension server's certificate must carry.
    fn server_name(&self) -> String {
        format!("{}.{}.svc", self.service, self.namespace)
    }
}

/// The aggregator's view of the service-backed APIServices, shared by the availability
/// controller (which writes it) and the request handlers (which read it).
pub struct Aggregator {
    backends: RwLock<HashMap<(String, String), Arc<Backend>>>,
    client_cert: Option<(PathBuf, PathBuf)>,
    cluster: Arc<dyn Cluster>,
}

impl Aggregator {
    pub fn new(opts: &Options, cluster: Arc<dyn Cluster>) -> Result<Self, String> {
        opts.validate()?;
        let client_cert = opts.proxy_client_cert_file.clone().zip(opts.proxy_client_key_file.clone());
        let aggregator = Self { backends: RwLock::default(), client_cert, cluster };
        // Fail at start, not at the first proxied request, on unreadable files.
        aggregator.tls(b"", true)?;
        Ok(aggregator)
    }

    /// The backend serving `group`/`version`, if an APIService with a Service says so.
    pub fn backend(&self, group: &str, version: &str) -> Option<Arc<Backend>> {
        self.backends.read().get(&(group.to_string(), version.to_string())).cloned()
    }

    /// Every backend, sorted by group then by descending version priority.
    pub fn backends(&self) -> Vec<Arc<Backend>> {
        let mut all: Vec<(String, Arc<Backend>)> =
            self.backends.read().iter().map(|((g, _), b)| (g.clone(), b.clone())).collect();
        all.sort_by(|(ga, a), (gb, b)| {
            ga.cmp(gb)
                .then(b.version_priority.cmp(&a.version_priority))
                .then(a.api_service.cmp(&b.api_service))
        });
        all.into_iter().map(|(_, b)| b).collect()
    }

    /// Replaces the table (the availability controller, after each pass).
    pub fn set_backends(&self, backends: HashMap<(String, String), Arc<Backend>>) {
        *self.backends.write() = backends;
    }

    /// TLS to an extension server: trusting `ca_bundle` (the system roots when empty) or
    /// nothing at all, presenting the front-proxy client certificate when configured. The
    /// files are read each time, so a renewed certificate is used from the next pass on.
    pub fn tls(&self, ca_bundle: &[u8], insecure: bool) -> Result<Arc<ClientConfig>, String> {
        let cert_and_key = self.client_cert.as_ref().map(|(c, k)| (c.as_path(), k.as_path()));
        let alpn: &[&[u8]] = &[b"http/1.1"];
        let cfg = if insecure {
            component_base::tls::insecure_client_config(cert_and_key, alpn)
        } else {
            let roots = crate::admission::webhook::client::roots(ca_bundle)?;
            component_base::tls::client_config_trusting(roots, cert_and_key, alpn)
        };
        cfg.map_err(|e| format!("--proxy-client-cert-file/--proxy-client-key-file: {e}"))
    }

    /// Where a request for `backend` goes.
    async fn location(&self, backend: &Backend, path_and_query: String) -> Result<Location, String> {
        let (ip, port) = self.cluster.resolve(&backend.namespace, &backend.service, backend.port).await?;
        Ok(Location {
            tls: Some(backend.tls.clone()),
            hosts: vec![ip],
            port,
            path_and_query,
            server_name: Some(backend.server_name()),
        })
    }

    /// Sends `req` on to `backend` as `user` (upstream's `proxyHandler.ServeHTTP`).
    pub async fn proxy(
        &self,
        backend: &Backend,
        user: &User,
        mut req: Request<Incoming>,
    ) -> ApiResult<Response<BoxBody>> {
        if !backend.available {
            crate::handlers::discard_body(req.into_body());
            return Err(ApiError::new(503, "ServiceUnavailable", "service unavailable"));
        }
        let path_and_query = req.uri().path_and_query().map(|p| p.to_string()).unwrap_or_else(|| "/".into());
        let loc = self
            .location(backend, path_and_query)
            .await
            .map_err(|e| ApiError::new(503, "ServiceUnavailable", format!("service unavailable: {e}")))?;
        set_auth_proxy_headers(req.headers_mut(), user);
        proxy::forward(&loc, req, false, DIAL_TIMEOUT).await
    }

    /// Upstream's discovery check of an APIService: `GET /apis/<group>/<version>` on the
    /// extension server as `system:kube-aggregator` (group `system:masters`), which must
    /// answer 2xx within [`DISCOVERY_TIMEOUT`]. The document on success; the failure as
    /// the condition's message words it.
    pub async fn discover(&self, backend: &Backend) -> Result<Value, String> {
        let path = format!("/apis/{}/{}", backend.group, backend.version);
        let loc = match self.location(backend, path.clone()).await {
            Ok(l) => l,
            Err(e) => return Err(format!("failing or missing response from {path}: {e}")),
        };
        let url = loc.url();
        let fetch = async {
            let (io, authority) = proxy::dial(&loc, DISCOVERY_TIMEOUT).await?;
            let mut headers = HeaderMap::new();
            let aggregator = User {
                name: "system:kube-aggregator".into(),
                groups: vec!["system:masters".into()],
                ..User::default()
            };
            set_auth_proxy_headers(&mut headers, &aggregator);
            headers.insert(header::ACCEPT, HeaderValue::from_static("application/json"));
            if let Ok(v) = HeaderValue::from_str(&authority) {
                headers.insert(header::HOST, v);
            }
            let mut out = Request::builder().method(Method::GET).uri(path.as_str());
            if let Some(h) = out.headers_mut() {
                *h = headers;
            }
            let out = out.body(Empty::<Bytes>::new()).map_err(|e| e.to_string())?;
            let resp = proxy::send(io, out).await?;
            let status = resp.status();
            if !status.is_success() {
                return Err(format!("bad status from {url}: {}", status.as_u16()));
            }
            let body = Limited::new(resp.into_body(), MAX_DISCOVERY_BYTES)
                .collect()
                .await
                .map_err(|e| format!("reading {url}: {e}"))?
                .to_bytes();
            serde_json::from_slice::<Value>(&body).map_err(|e| format!("decoding {url}: {e}"))
        };
        match tokio::time::timeout(DISCOVERY_TIMEOUT, fetch).await {
            Ok(Ok(doc)) => Ok(doc),
            Ok(Err(e)) => Err(format!("failing or missing response from {url}: {e}")),
            Err(_) => Err(format!(
                "failing or missing response from {url}: Get \"{url}\": context deadline exceeded"
            )),
        }
    }
}

/// Upstream's `SetAuthProxyHeaders`: who asked, replacing whatever the caller sent in
/// those headers. Extra keys are percent-encoded as upstream's `headerKeyEscape`.
pub fn set_auth_proxy_headers(headers: &mut HeaderMap, user: &User) {
    let extra_prefix = "x-remote-extra-";
    let stale: Vec<HeaderName> = headers
        .keys()
        .filter(|k| {
            let k = k.as_str();
            k == "x-remote-user" || k == "x-remote-group" || k.starts_with(extra_prefix)
        })
        .cloned()
        .collect();
    for k in stale {
        headers.remove(k);
    }
    if let Ok(v) = HeaderValue::from_str(&user.name) {
        headers.insert(HeaderName::from_static("x-remote-user"), v);
    }
    for g in &user.groups {
        if let Ok(v) = HeaderValue::from_str(g) {
            headers.append(HeaderName::from_static("x-remote-group"), v);
        }
    }
    for (key, values) in &user.extra {
        let Ok(name) = HeaderName::from_bytes(format!("{extra_prefix}{}", escape_key(key)).as_bytes()) else {
            continue;
        };
        for value in values {
            if let Ok(v) = HeaderValue::from_str(value) {
                headers.append(name.clone(), v);
            }
        }
    }
}

/// Percent-encodes what may not appear in a header name (upstream's `headerKeyEscape`:
/// every byte but letters, digits and ``!#$&'*+-.^_`|~``).
fn escape_key(key: &str) -> String {
    let mut out = String::with_capacity(key.len());
    for b in key.bytes() {
        let legal = b.is_ascii_alphanumeric() || b"!#$&'*+-.^_`|~".contains(&b);
        if legal {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auth_proxy_headers_replace_the_callers() {
        let mut h = HeaderMap::new();
        h.insert("x-remote-user", HeaderValue::from_static("mallory"));
        h.insert("x-remote-extra-scopes", HeaderValue::from_static("all"));
        h.insert("accept", HeaderValue::from_static("application/json"));
        let mut user = User { name: "alice".into(), groups: vec!["a".into(), "b".into()], ..User::default() };
        user.extra.insert("authentication.kubernetes.io/pod-name".into(), vec!["p".into()]);
        set_auth_proxy_headers(&mut h, &user);
        assert_eq!(h["x-remote-user"], "alice");
        let groups: Vec<_> = h.get_all("x-remote-group").iter().collect();
        assert_eq!(groups, ["a", "b"]);
        assert!(h.get("x-remote-extra-scopes").is_none());
        assert_eq!(h["x-remote-extra-authentication.kubernetes.io%2Fpod-name"], "p");
        assert_eq!(h["accept"], "application/json");
    }

    #[test]
    fn unpaired_client_flags_are_refused() {
        let opts = Options { proxy_client_cert_file: Some("c".into()), proxy_client_key_file: None };
        assert!(opts.validate().is_err());
    }
}
