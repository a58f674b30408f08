//! The `Webhook` authorization mode (upstream's `plugin/pkg/authorizer/webhook`): each
//! decision is asked of a remote service as a SubjectAccessReview (authorization.k8s.io
//! `v1`, or `v1beta1` whose groups field is `group`), POSTed to the server of the
//! kubeconfig named by `--authorization-webhook-config-file`. Answers are cached by the
//! review's spec for `--authorization-webhook-cache-authorized-ttl` (allowed) or
//! `--authorization-webhook-cache-unauthorized-ttl` (otherwise). A webhook that cannot be
//! reached, answers an error or garbage abstains and reports why, as upstream's default:
//! the next mode decides.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine;
use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use parking_lot::Mutex;
use rustls::ClientConfig;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use serde::Deserialize;
use serde_json::{Value, json};

use super::options::Options;
use super::{Attributes, Authorizer, Decision, Evaluation, RuleSet};
use crate::authn::User;

/// How long one review may take (upstream's webhook request timeout).
const TIMEOUT: Duration = Duration::from_secs(30);
/// Largest response body read.
const MAX_RESPONSE: usize = 1024 * 1024;
/// Decisions cached at most (upstream's LRU size).
const CACHE_SIZE: usize = 8192;

/// Why the webhook could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("reading {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("parsing kubeconfig {path}: {source}")]
    Parse {
        path: PathBuf,
        #[source]
        source: serde_yaml::Error,
    },
    #[error("kubeconfig {path}: {what}")]
    Invalid { path: PathBuf, what: String },
}

/// The parts of a kubeconfig the webhook uses.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "kebab-case", default)]
struct Kubeconfig {
    clusters: Vec<Named<Cluster>>,
    users: Vec<Named<AuthInfo>>,
    contexts: Vec<Named<Context>>,
    current_context: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Named<T> {
    name: String,
    #[serde(alias = "cluster", alias = "user", alias = "context")]
    value: T,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "kebab-case", default)]
struct Cluster {
    server: String,
    certificate_authority: Option<String>,
    certificate_authority_data: Option<String>,
    insecure_skip_tls_verify: bool,
    tls_server_name: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "kebab-case", default)]
struct AuthInfo {
    client_certificate: Option<String>,
    client_certificate_data: Option<String>,
    client_key: Option<String>,
    client_key_data: Option<String>,
    token: Option<String>,
    token_file: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Context {
    cluster: String,
    user: String,
}

/// Where and how to send reviews.
#[derive(Clone)]
pub struct Endpoint {
    pub uri: http::Uri,
    /// None for `http://` servers.
    pub tls: Option<Arc<ClientConfig>>,
    pub server_name: String,
    pub token: Option<String>,
}

fn invalid(path: &Path, what: impl Into<String>) -> ConfigError {
    ConfigError::Invalid { path: path.to_owned(), what: what.into() }
}

/// The bytes of a file-or-data pair; a relative file is relative to the kubeconfig.
fn file_or_data(
    base: &Path,
    kubeconfig: &Path,
    file: &Option<String>,
    data: &Option<String>,
) -> Result<Option<Vec<u8>>, ConfigError> {
    if let Some(d) = data.as_deref().filter(|d| !d.is_empty()) {
        return base64::engine::general_purpose::STANDARD
            .decode(d.trim())
            .map(Some)
            .map_err(|e| invalid(kubeconfig, format!("bad base64 data: {e}")));
    }
    match file.as_deref().filter(|f| !f.is_empty()) {
        Some(f) => {
            let p = base.join(f);
            std::fs::read(&p).map(Some).map_err(|source| ConfigError::Read { path: p, source })
        }
        None => Ok(None),
    }
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

impl Endpoint {
    /// Reads the kubeconfig at `path`: its current context (or the first cluster and
    /// user) gives the server, the CA to trust, and the client certificate or token.
    pub fn from_kubeconfig(path: &Path) -> Result<Self, ConfigError> {
        let text =
            std::fs::read(path).map_err(|source| ConfigError::Read { path: path.to_owned(), source })?;
        let kc: Kubeconfig = serde_yaml::from_slice(&text)
            .map_err(|source| ConfigError::Parse { path: path.to_owned(), source })?;
        let base = path.parent().unwrap_or(Path::new("."));
        let ctx = kc.contexts.iter().find(|c| c.name == kc.current_context).map(|c| &c.value);
        let cluster = match ctx {
            Some(c) => kc.clusters.iter().find(|x| x.name == c.cluster),
            None => kc.clusters.first(),
        }
        .map(|c| &c.value)
        .ok_or_else(|| invalid(path, "no cluster"))?;
        let user = match ctx {
            Some(c) => kc.users.iter().find(|x| x.name == c.user).map(|u| &u.value),
            None => kc.users.first().map(|u| &u.value),
        };
        let uri: http::Uri =
            cluster.server.parse().map_err(|e| invalid(path, format!("server {:?}: {e}", cluster.server)))?;
        let host =
            uri.host().ok_or_else(|| invalid(path, format!("server {:?} has no host", cluster.server)))?;
        let server_name = cluster
            .tls_server_name
            .clone()
            .unwrap_or_else(|| host.trim_start_matches('[').trim_end_matches(']').to_string());
        let default_user = AuthInfo::default();
        let user = user.unwrap_or(&default_user);
        let token = match (&user.token, &user.token_file) {
            (Some(t), _) if !t.is_empty() => Some(t.clone()),
            (_, Some(f)) if !f.is_empty() => {
                let p = base.join(f);
                let t =
                    std::fs::read_to_string(&p).map_err(|source| ConfigError::Read { path: p, source })?;
                Some(t.trim().to_string())
            }
            _ => None,
        };
        let tls = match uri.scheme_str() {
            Some("https") => {
                if cluster.insecure_skip_tls_verify {
                    return Err(invalid(path, "insecure-skip-tls-verify is not supported"));
                }
                let roots = match file_or_data(
                    base,
                    path,
                    &cluster.certificate_authority,
                    &cluster.certificate_authority_data,
                )? {
                    Some(pem) => {
                        let mut roots = rustls::RootCertStore::empty();
                        for c in CertificateDer::pem_slice_iter(&pem) {
                            let c = c.map_err(|e| invalid(path, format!("certificate authority: {e}")))?;
                            roots.add(c).map_err(|e| invalid(path, format!("certificate authority: {e}")))?;
                        }
                        if roots.is_empty() {
                            return Err(invalid(path, "certificate authority holds no certificate"));
                        }
                        roots
                    }
                    None => {
                        component_base::tls::load_system_roots().map_err(|e| invalid(path, e.to_string()))?
                    }
                };
                let builder = ClientConfig::builder_with_provider(provider())
                    .with_safe_default_protocol_versions()
                    .map_err(|e| invalid(path, e.to_string()))?
                    .with_root_certificates(roots);
                let cert = file_or_data(base, path, &user.client_certificate, &user.client_certificate_data)?;
                let key = file_or_data(base, path, &user.client_key, &user.client_key_data)?;
                let mut config = match (cert, key) {
                    (Some(cert), Some(key)) => {
                        let chain = CertificateDer::pem_slice_iter(&cert)
                            .collect::<Result<Vec<_>, _>>()
                            .map_err(|e| invalid(path, format!("client certificate: {e}")))?;
                        let key = PrivateKeyDer::from_pem_slice(&key)
                            .map_err(|e| invalid(path, format!("client key: {e}")))?;
                        builder
                            .with_client_auth_cert(chain, key)
                            .map_err(|e| invalid(path, format!("client certificate: {e}")))?
                    }
                    (None, None) => builder.with_no_client_auth(),
                    _ => return Err(invalid(path, "client certificate and key go together")),
                };
                config.alpn_protocols = vec![b"http/1.1".to_vec()];
                Some(Arc::new(config))
            }
            Some("http") => None,
            other => return Err(invalid(path, format!("server scheme {other:?}: want https"))),
        };
        Ok(Self { uri, tls, server_name, token })
    }

    /// POSTs `body`; the response body (at most [`MAX_RESPONSE`]) of a 2xx answer.
    async fn post(&self, body: Vec<u8>) -> Result<Bytes, String> {
        let host =
            self.uri.host().unwrap_or_default().trim_start_matches('[').trim_end_matches(']').to_string();
        let port = self.uri.port_u16().unwrap_or(if self.tls.is_some() { 443 } else { 80 });
        let tcp = tokio::net::TcpStream::connect((host.as_str(), port)).await.map_err(|e| e.to_string())?;
        let _ = tcp.set_nodelay(true);
        let mut req = http::Request::post(self.uri.clone())
            .header(http::header::CONTENT_TYPE, "application/json")
            .header(http::header::ACCEPT, "application/json")
            .header(http::header::HOST, self.uri.authority().map(|a| a.as_str()).unwrap_or(&host));
        if let Some(t) = &self.token {
            req = req.header(http::header::AUTHORIZATION, format!("Bearer {t}"));
        }
        let req = req.body(Full::new(Bytes::from(body))).map_err(|e| e.to_string())?;
        let resp = match &self.tls {
            Some(cfg) => {
                let name = ServerName::try_from(self.server_name.clone()).map_err(|e| e.to_string())?;
                let tls = tokio_rustls::TlsConnector::from(cfg.clone())
                    .connect(name, tcp)
                    .await
                    .map_err(|e| e.to_string())?;
                send(hyper_util::rt::TokioIo::new(tls), req).await?
            }
            None => send(hyper_util::rt::TokioIo::new(tcp), req).await?,
        };
        let status = resp.status();
        let body = Limited::new(resp.into_body(), MAX_RESPONSE)
            .collect()
            .await
            .map_err(|e| format!("reading the response: {e}"))?
            .to_bytes();
        if !status.is_success() {
            let text = String::from_utf8_lossy(&body[..body.len().min(512)]).to_string();
            return Err(format!("the server responded with status {}: {text}", status.as_u16()));
        }
        Ok(body)
    }
}

async fn send<IO>(
    io: IO,
    req: http::Request<Full<Bytes>>,
) -> Result<http::Response<hyper::body::Incoming>, String>
where
    IO: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let (mut sender, conn) = hyper::client::conn::http1::handshake(io).await.map_err(|e| e.to_string())?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    sender.send_request(req).await.map_err(|e| e.to_string())
}

/// The SubjectAccessReview API version spoken.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Version {
    V1,
    V1Beta1,
}

/// A cached status: allowed, denied, reason.
#[derive(Clone, Debug)]
struct Status {
    allowed: bool,
    denied: bool,
    reason: String,
}

/// The webhook authorizer.
pub struct Webhook {
    endpoint: Endpoint,
    version: Version,
    authorized_ttl: Duration,
    unauthorized_ttl: Duration,
    cache: Mutex<HashMap<String, (Instant, Status)>>,
}

impl Webhook {
    pub fn new(
        endpoint: Endpoint,
        version: Version,
        authorized_ttl: Duration,
        unauthorized_ttl: Duration,
    ) -> Self {
        Self { endpoint, version, authorized_ttl, unauthorized_ttl, cache: Mutex::new(HashMap::new()) }
    }

    pub fn from_options(opts: &Options) -> Result<Self, String> {
        let path = opts
            .authorization_webhook_config_file
            .as_deref()
            .ok_or("authorization-mode Webhook's authorization config file not passed")?;
        let version = match opts.authorization_webhook_version.as_str() {
            "v1" => Version::V1,
            "v1beta1" => Version::V1Beta1,
            other => return Err(format!("--authorization-webhook-version: unsupported version {other:?}")),
        };
        let endpoint = Endpoint::from_kubeconfig(path)
            .map_err(|e| format!("--authorization-webhook-config-file: {e}"))?;
        Ok(Self::new(
            endpoint,
            version,
            opts.authorization_webhook_cache_authorized_ttl,
            opts.authorization_webhook_cache_unauthorized_ttl,
        ))
    }

    /// The review's spec, as upstream builds it from the attributes.
    fn spec(&self, attrs: &Attributes) -> Value {
        let u = &attrs.user;
        let groups_field = match self.version {
            Version::V1 => "groups",
            Version::V1Beta1 => "group",
        };
        let mut spec = json!({});
        let mut put = |k: &str, v: Value| {
            let empty = v.as_str() == Some("")
                || v.as_array().is_some_and(Vec::is_empty)
                || v.as_object().is_some_and(|o| o.is_empty());
            if !empty {
                spec[k] = v;
            }
        };
        if attrs.resource_request {
            let mut r = json!({});
            for (k, v) in [
                ("namespace", &attrs.namespace),
                ("verb", &attrs.verb),
                ("group", &attrs.api_group),
                ("version", &attrs.api_version),
                ("resource", &attrs.resource),
                ("subresource", &attrs.subresource),
                ("name", &attrs.name),
            ] {
                if !v.is_empty() {
                    r[k] = json!(v);
                }
            }
            put("resourceAttributes", r);
        } else {
            put("nonResourceAttributes", json!({ "path": attrs.path, "verb": attrs.verb }));
        }
        put("user", json!(u.name));
        put(groups_field, json!(u.groups));
        put("extra", json!(u.extra));
        put("uid", json!(u.uid));
        spec
    }

    fn cached(&self, key: &str) -> Option<Status> {
        let mut cache = self.cache.lock();
        match cache.get(key) {
            Some((until, st)) if *until > Instant::now() => Some(st.clone()),
            Some(_) => {
                cache.remove(key);
                None
            }
            None => None,
        }
    }

    fn remember(&self, key: String, st: &Status) {
        let ttl = if st.allowed { self.authorized_ttl } else { self.unauthorized_ttl };
        if ttl.is_zero() {
            return;
        }
        let mut cache = self.cache.lock();
        if cache.len() >= CACHE_SIZE {
            let now = Instant::now();
            cache.retain(|_, (until, _)| *until > now);
            if cache.len() >= CACHE_SIZE {
                cache.clear();
            }
        }
        cache.insert(key, (Instant::now() + ttl, st.clone()));
    }

    async fn ask(&self, spec: &Value) -> Result<Status, String> {
        let api_version = match self.version {
            Version::V1 => "authorization.k8s.io/v1",
            Version::V1Beta1 => "authorization.k8s.io/v1beta1",
        };
        let body = json!({
            "apiVersion": api_version,
            "kind": "SubjectAccessReview",
            "metadata": { "creationTimestamp": null },
            "spec": spec,
            "status": { "allowed": false },
        });
        let bytes = serde_json::to_vec(&body).map_err(|e| e.to_string())?;
        let resp = tokio::time::timeout(TIMEOUT, self.endpoint.post(bytes))
            .await
            .map_err(|_| format!("the webhook did not answer within {TIMEOUT:?}"))??;
        let review: Value =
            serde_json::from_slice(&resp).map_err(|e| format!("decoding the webhook's response: {e}"))?;
        if let Some(v) = review["apiVersion"].as_str()
            && v != api_version
        {
            return Err(format!("the webhook answered {v}, want {api_version}"));
        }
        let st = &review["status"];
        Ok(Status {
            allowed: st["allowed"].as_bool().unwrap_or(false),
            denied: st["denied"].as_bool().unwrap_or(false),
            reason: st["reason"].as_str().unwrap_or_default().to_string(),
        })
    }
}

#[async_trait::async_trait]
impl Authorizer for Webhook {
    async fn authorize(&self, attrs: &Attributes) -> Evaluation {
        let spec = self.spec(attrs);
        let key = spec.to_string();
        let st = match self.cached(&key) {
            Some(st) => st,
            None => match self.ask(&spec).await {
                Ok(st) => {
                    self.remember(key, &st);
                    st
                }
                Err(e) => {
                    tracing::warn!("authorization webhook: {e}");
                    return Evaluation { decision: Decision::NoOpinion(String::new()), error: Some(e) };
                }
            },
        };
        let decision = if st.allowed {
            Decision::Allow(st.reason)
        } else if st.denied {
            Decision::Deny(st.reason)
        } else {
            Decision::NoOpinion(st.reason)
        };
        decision.into()
    }

    fn rules_for(&self, _user: &User, _namespace: &str) -> RuleSet {
        RuleSet {
            incomplete: true,
            errors: vec!["webhook authorizer does not support user rule resolution".into()],
            ..Default::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;
    use crate::authz::rbac::tests::{res, user};

    /// A webhook on 127.0.0.1 answering with `answer(review)`; counts requests.
    async fn serve(
        answer: fn(&Value) -> (u16, String),
    ) -> (String, Arc<AtomicUsize>, Arc<Mutex<Vec<Value>>>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let count = Arc::new(AtomicUsize::new(0));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let (c, s) = (count.clone(), seen.clone());
        tokio::spawn(async move {
            loop {
                let Ok((tcp, _)) = listener.accept().await else { return };
                let (c, s) = (c.clone(), s.clone());
                tokio::spawn(async move {
                    let svc = hyper::service::service_fn(move |req: http::Request<hyper::body::Incoming>| {
                        let (c, s) = (c.clone(), s.clone());
                        async move {
                            c.fetch_add(1, Ordering::SeqCst);
                            let body = req.into_body().collect().await.unwrap().to_bytes();
                            let review: Value = serde_json::from_slice(&body).unwrap();
                            s.lock().push(review.clone());
                            let (code, text) = answer(&review);
                            let mut resp = http::Response::new(Full::new(Bytes::from(text)));
                            *resp.status_mut() = http::StatusCode::from_u16(code).unwrap();
                            Ok::<_, std::convert::Infallible>(resp)
                        }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(tcp), svc)
                        .await;
                });
            }
        });
        (format!("http://{addr}/authorize"), count, seen)
    }

    fn kubeconfig(server: &str) -> tempfile::NamedTempFile {
        let f = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(
            f.path(),
            format!(
                "apiVersion: v1\nkind: Config\nclusters:\n- name: authz\n  cluster:\n    server: {server}\nusers:\n- name: apiserver\n  user:\n    token: secret-token\ncontexts:\n- name: webhook\n  context:\n    cluster: authz\n    user: apiserver\ncurrent-context: webhook\n"
            ),
        )
        .unwrap();
        f
    }

    fn decide(review: &Value) -> (u16, String) {
        let spec = &review["spec"];
        let allowed = spec["user"] == "alice";
        let denied = spec["user"] == "mallory";
        let body = json!({
            "apiVersion": review["apiVersion"],
            "kind": "SubjectAccessReview",
            "status": { "allowed": allowed, "denied": denied, "reason": if allowed { "alice may" } else { "" } },
        });
        (200, body.to_string())
    }

    #[tokio::test]
    async fn webhook_decides_and_caches() {
        let (url, count, seen) = serve(decide).await;
        let kc = kubeconfig(&url);
        let opts = Options {
            authorization_mode: vec!["Webhook".into()],
            authorization_webhook_config_file: Some(kc.path().to_owned()),
            authorization_webhook_version: "v1".into(),
            ..Default::default()
        };
        let w = Webhook::from_options(&opts).unwrap();
        assert_eq!(w.endpoint.token.as_deref(), Some("secret-token"));
        let alice = user("alice", &["devs"]);
        let ev = w.authorize(&res(&alice, "get", "apps", "deployments", "ns", "d")).await;
        assert_eq!(ev.decision, Decision::Allow("alice may".into()));
        let sent = seen.lock()[0].clone();
        assert_eq!(sent["apiVersion"], "authorization.k8s.io/v1");
        assert_eq!(sent["spec"]["groups"], json!(["devs"]));
        assert_eq!(
            sent["spec"]["resourceAttributes"],
            json!({ "namespace": "ns", "verb": "get", "group": "apps", "version": "v1", "resource": "deployments", "name": "d" })
        );
        // The same question again is answered from the cache.
        let _ = w.authorize(&res(&alice, "get", "apps", "deployments", "ns", "d")).await;
        assert_eq!(count.load(Ordering::SeqCst), 1);
        let ev = w.authorize(&res(&user("mallory", &[]), "get", "", "pods", "ns", "")).await;
        assert_eq!(ev.decision, Decision::Deny(String::new()));
        let ev = w.authorize(&res(&user("bob", &[]), "get", "", "pods", "ns", "")).await;
        assert_eq!(ev.decision, Decision::NoOpinion(String::new()));
        assert!(w.rules_for(&alice, "ns").incomplete);
        // v1beta1 names the groups `group`.
        let beta = Webhook::new(w.endpoint.clone(), Version::V1Beta1, Duration::ZERO, Duration::ZERO);
        let _ = beta.authorize(&res(&alice, "list", "", "pods", "", "")).await;
        let sent = seen.lock().last().cloned().unwrap();
        assert_eq!(sent["apiVersion"], "authorization.k8s.io/v1beta1");
        assert_eq!(sent["spec"]["group"], json!(["devs"]));
    }

    #[tokio::test]
    async fn webhook_errors_abstain() {
        let (url, _, _) = serve(|_| (500, "broken".into())).await;
        let kc = kubeconfig(&url);
        let w = Webhook::new(
            Endpoint::from_kubeconfig(kc.path()).unwrap(),
            Version::V1,
            Duration::from_secs(60),
            Duration::from_secs(60),
        );
        let ev = w.authorize(&res(&user("alice", &[]), "get", "", "pods", "ns", "p")).await;
        assert_eq!(ev.decision, Decision::NoOpinion(String::new()));
        assert!(ev.error.unwrap().contains("status 500"));
        // Nothing listening at all.
        let w = Webhook::new(
            Endpoint::from_kubeconfig(kubeconfig("http://127.0.0.1:9/x").path()).unwrap(),
            Version::V1,
            Duration::ZERO,
            Duration::ZERO,
        );
        assert!(w.authorize(&res(&user("a", &[]), "get", "", "pods", "", "")).await.error.is_some());
    }

    #[test]
    fn kubeconfig_problems_are_reported() {
        let f = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(f.path(), "clusters: []\n").unwrap();
        assert!(Endpoint::from_kubeconfig(f.path()).err().unwrap().to_string().contains("no cluster"));
        std::fs::write(f.path(), "clusters:\n- name: c\n  cluster:\n    server: https://h\n    certificate-authority: /nonexistent/ca.crt\n").unwrap();
        assert!(matches!(Endpoint::from_kubeconfig(f.path()), Err(ConfigError::Read { .. })));
        std::fs::write(f.path(), "clusters:\n- name: c\n  cluster:\n    server: ftp://h\n").unwrap();
        assert!(Endpoint::from_kubeconfig(f.path()).is_err());
        let opts = Options { authorization_webhook_version: "v1".into(), ..Default::default() };
        assert!(Webhook::from_options(&opts).err().unwrap().contains("config file not passed"));
    }
}
