//! Authentication: who sent a request (upstream's `pkg/authentication` and
//! `pkg/kubeapiserver/authenticator`). [`Authenticator`] asks, in upstream's order:
//!
//! 1. [`request_header`]: a front proxy's client certificate (`--requestheader-client-ca-file`)
//!    and the user it names in `X-Remote-*` headers;
//! 2. [`x509`]: the TLS client certificate, verified against `--client-ca-file`;
//! 3. bearer tokens: [`token_file`] (`--token-auth-file`), [`serviceaccount`] tokens
//!    (legacy, then bound), [`bootstrap_token`]s (`--enable-bootstrap-token-auth`);
//! 4. anonymous (`--anonymous-auth`) when no credentials were presented.
//!
//! The first method that recognises its credentials decides. Credentials that are
//! presented but fail (and none succeeds) are refused with 401 `Unauthorized`, never
//! saying which part failed. Every authenticated user other than the anonymous one also
//! gets `system:authenticated` (upstream's `AuthenticatedGroupAdder`).
//!
//! The objects tokens are checked against (Secrets, ServiceAccounts, Pods, Nodes) are
//! read through [`Objects`] from the watch caches, so a request costs no etcd round trip.
//!
//! Successes are remembered for 10 s ([`cache`]), as upstream's token cache.
//!
//! - [`reviews`]: TokenReview and SelfSubjectReview.
//! - [`options`]: the authentication flags.

pub mod bootstrap_token;
pub mod cache;
pub mod options;
pub mod request_header;
pub mod reviews;
pub mod serviceaccount;
pub mod token_file;
pub mod x509;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use component_base::http::ConnectionInfo;
use http::HeaderMap;
use serde_json::Value;

use crate::errors::{ApiError, ApiResult};
use crate::registry::Registry;

/// The identity a request acts as (upstream's `user.Info`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct User {
    pub name: String,
    pub uid: String,
    pub groups: Vec<String>,
    /// Extra attributes (e.g. `authentication.kubernetes.io/pod-name` of a bound token).
    pub extra: BTreeMap<String, Vec<String>>,
}

/// Well-known users and groups (upstream's `user` package constants).
pub mod names {
    pub const ANONYMOUS: &str = "system:anonymous";
    pub const ALL_AUTHENTICATED: &str = "system:authenticated";
    pub const ALL_UNAUTHENTICATED: &str = "system:unauthenticated";
    pub const SYSTEM_PRIVILEGED_GROUP: &str = "system:masters";
    pub const NODES_GROUP: &str = "system:nodes";
    pub const NODE_USER_PREFIX: &str = "system:node:";
    pub const SERVICE_ACCOUNT_PREFIX: &str = "system:serviceaccount:";
    pub const SERVICE_ACCOUNTS_GROUP: &str = "system:serviceaccounts";
    pub const APISERVER_USER: &str = "system:apiserver";
}

/// A successful authentication (upstream's `authenticator.Response`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Authenticated {
    pub user: User,
    /// The audiences the credential is good for among those asked for.
    pub audiences: Vec<String>,
}

/// One method's answer about a credential (upstream's `(response, ok, err)`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    Authenticated(Authenticated),
    /// Not a credential this method knows; the next one is asked.
    NotMine,
    /// This method's credential, but not valid; the reason is for logs and TokenReview.
    Rejected(String),
}

/// Reads the objects credentials are checked against. The server's implementation
/// ([`Registry`]) answers from the watch caches.
pub trait Objects: Send + Sync {
    /// The core/v1 object `resource` (plural) named `name`, if it exists.
    fn get(&self, resource: &str, namespace: Option<&str>, name: &str) -> Option<Value>;
}

impl Objects for Registry {
    fn get(&self, resource: &str, namespace: Option<&str>, name: &str) -> Option<Value> {
        let store = self.find("", "v1", resource)?;
        store.cacher.get(&crate::cacher::object_key(namespace, name)).map(|o| o.value())
    }
}

/// The request authenticator chain (see the module documentation).
pub struct Authenticator {
    request_header: Option<request_header::RequestHeaderAuthenticator>,
    x509: Option<x509::ClientCertAuthenticator>,
    tokens: token_file::TokenFile,
    service_accounts: Option<serviceaccount::TokenAuthenticator>,
    bootstrap: Option<bootstrap_token::BootstrapTokens>,
    /// Signs TokenRequest tokens; None when no signing key and issuer are configured.
    issuer: Option<Arc<serviceaccount::Issuer>>,
    anonymous: bool,
    /// `--api-audiences` (default: the first issuer): what a request's tokens must be for.
    api_audiences: Vec<String>,
    cache: cache::Cache,
}

impl Authenticator {
    /// Builds the chain from the flags. `objects` backs the token lookups (the registry);
    /// `serving_key` is the TLS private key, which verifies service-account tokens when no
    /// `--service-account-key-file` is given (as upstream).
    pub fn new(
        opts: &options::Options,
        objects: Arc<dyn Objects>,
        serving_key: Option<&Path>,
    ) -> Result<Self, String> {
        opts.validate()?;
        let tokens = token_file::TokenFile::load(opts.token_auth_file.as_deref())?;
        let x509 = match &opts.client_ca_file {
            Some(ca) => Some(x509::ClientCertAuthenticator::from_file(ca)?),
            None => None,
        };
        let request_header = match &opts.request_header.requestheader_client_ca_file {
            Some(ca) => {
                Some(request_header::RequestHeaderAuthenticator::from_file(ca, opts.request_header.config())?)
            }
            None => None,
        };
        let api_audiences = opts.api_audiences();

        let signing_key = match &opts.service_account_signing_key_file {
            Some(path) => Some(
                serviceaccount::keys::SigningKey::from_file(path)
                    .map_err(|e| format!("failed to parse service-account-issuer-key-file: {e}"))?,
            ),
            None => None,
        };
        let mut keys = Vec::new();
        for path in &opts.service_account_key_files {
            keys.extend(serviceaccount::keys::public_keys_from_file(path).map_err(|e| e.to_string())?);
        }
        if keys.is_empty()
            && let Some(path) = serving_key
        {
            match serviceaccount::keys::public_keys_from_file(path) {
                Ok(k) => keys.extend(k),
                Err(_) => {
                    tracing::warn!("No TLS key provided, service account token authentication disabled")
                }
            }
        }
        // A token this server signs always verifies here, whatever the key files say.
        if let Some(key) = &signing_key
            && !keys.contains(&key.public)
        {
            keys.push(key.public.clone());
        }
        let service_accounts = (!keys.is_empty()).then(|| serviceaccount::TokenAuthenticator {
            keys,
            issuers: opts.service_account_issuers.clone(),
            api_audiences: api_audiences.clone(),
            lookup: opts.service_account_lookup,
            objects: objects.clone(),
        });
        let issuer = match (signing_key, opts.service_account_issuers.first()) {
            (Some(key), Some(iss)) => Some(Arc::new(serviceaccount::Issuer::new(
                iss.clone(),
                key,
                api_audiences.clone(),
                opts.service_account_max_token_expiration.as_secs() as i64,
                opts.service_account_extend_token_expiration,
            ))),
            _ => None,
        };
        let bootstrap =
            opts.enable_bootstrap_token_auth.then(|| bootstrap_token::BootstrapTokens { objects });
        Ok(Authenticator {
            request_header,
            x509,
            tokens,
            service_accounts,
            bootstrap,
            issuer,
            anonymous: opts.anonymous_auth,
            api_audiences,
            cache: cache::Cache::default(),
        })
    }

    /// Who sent a request with these headers on this connection; 401 when credentials
    /// were presented and none was valid, or none were presented and anonymous requests
    /// are off.
    pub fn authenticate(&self, headers: &HeaderMap, conn: Option<&ConnectionInfo>) -> ApiResult<User> {
        let mut failures = Vec::new();
        // The front proxy's word is judged per request (its headers change), never cached.
        if let (Some(rh), Some(chain)) =
            (&self.request_header, conn.and_then(|c| c.client_certificates.as_deref()))
        {
            match rh.authenticate(chain, headers) {
                Verdict::Authenticated(a) => return Ok(with_authenticated_group(a.user)),
                Verdict::NotMine => {}
                Verdict::Rejected(e) => failures.push(e),
            }
        }
        if let (Some(x509), Some(chain)) = (&self.x509, conn.and_then(|c| c.client_certificates.as_deref())) {
            let key = cache::Cache::key("x509", &[], chain.iter().map(|c| c.as_ref()));
            let now = std::time::Instant::now();
            if let Some(a) = self.cache.get(&key, now) {
                return Ok(a.user);
            }
            match x509.authenticate(chain) {
                Verdict::Authenticated(mut a) => {
                    a.user = with_authenticated_group(a.user);
                    self.cache.put(key, &a, now);
                    return Ok(a.user);
                }
                Verdict::NotMine => {}
                Verdict::Rejected(e) => failures.push(e),
            }
        }
        if let Some(token) = bearer_token(headers) {
            match self.authenticate_token(token, &self.api_audiences) {
                Ok(a) => return Ok(a.user),
                Err(e) => failures.push(e),
            }
        }
        if failures.is_empty() && self.anonymous {
            return Ok(User {
                name: names::ANONYMOUS.into(),
                groups: vec![names::ALL_UNAUTHENTICATED.into()],
                ..Default::default()
            });
        }
        if !failures.is_empty() {
            tracing::debug!(reasons = %aggregate(&failures), "authentication failed");
        }
        Err(ApiError::unauthorized())
    }

    /// Judges a bearer token for `audiences` (the API audiences for a request, a
    /// TokenReview's own): the user, or why not (upstream's aggregated error, or
    /// `invalid bearer token` when no method knew it).
    pub fn authenticate_token(&self, token: &str, audiences: &[String]) -> Result<Authenticated, String> {
        let key = cache::Cache::key("token", audiences, [token.as_bytes()]);
        let instant = std::time::Instant::now();
        if let Some(a) = self.cache.get(&key, instant) {
            return Ok(a);
        }
        let now = crate::table::unix_now();
        let mut errors = Vec::new();
        let token_file = || self.audience_agnostic(audiences, || self.tokens.authenticate(token));
        let service_accounts = || match &self.service_accounts {
            Some(sa) => sa.authenticate(token, audiences, now),
            None => Verdict::NotMine,
        };
        let bootstrap = || match &self.bootstrap {
            Some(b) => self.audience_agnostic(audiences, || b.authenticate(token, now)),
            None => Verdict::NotMine,
        };
        let methods: [&dyn Fn() -> Verdict; 3] = [&token_file, &service_accounts, &bootstrap];
        for method in methods {
            match method() {
                Verdict::Authenticated(mut a) => {
                    a.user = with_authenticated_group(a.user);
                    self.cache.put(key, &a, instant);
                    return Ok(a);
                }
                Verdict::NotMine => {}
                Verdict::Rejected(e) => errors.push(e),
            }
        }
        if errors.is_empty() { Err("invalid bearer token".into()) } else { Err(aggregate(&errors)) }
    }

    /// Upstream's `WrapAudienceAgnosticToken`: a method whose tokens carry no audience
    /// answers only for requests aimed at the API's own audiences, and its response is
    /// good for those.
    fn audience_agnostic(&self, requested: &[String], f: impl FnOnce() -> Verdict) -> Verdict {
        if requested.is_empty() {
            return f();
        }
        let audiences: Vec<String> =
            self.api_audiences.iter().filter(|a| requested.contains(a)).cloned().collect();
        if audiences.is_empty() {
            return Verdict::NotMine;
        }
        match f() {
            Verdict::Authenticated(a) => Verdict::Authenticated(Authenticated { audiences, ..a }),
            other => other,
        }
    }

    /// The TokenRequest signer, when `--service-account-signing-key-file` and
    /// `--service-account-issuer` are set.
    pub fn issuer(&self) -> Option<&Arc<serviceaccount::Issuer>> {
        self.issuer.as_ref()
    }

    pub fn api_audiences(&self) -> &[String] {
        &self.api_audiences
    }

    /// The service account issuer discovery documents for the first
    /// `--service-account-issuer` and the verification keys, the JWKS URI defaulting to
    /// this server's `external_address` (host:port). None, with the reason logged, when
    /// discovery cannot be served: as upstream, the server still starts.
    pub fn openid_metadata(
        &self,
        opts: &options::Options,
        external_address: &str,
    ) -> Option<serviceaccount::openid::OpenIdMetadata> {
        let issuer = opts.service_account_issuers.first()?;
        let keys = self.service_accounts.as_ref().map(|s| s.keys.as_slice()).unwrap_or_default();
        match serviceaccount::openid::OpenIdMetadata::new(
            issuer,
            opts.service_account_jwks_uri.as_deref(),
            external_address,
            keys,
        ) {
            Ok(m) => Some(m),
            Err(e) => {
                tracing::warn!(
                    error = %e,
                    "could not construct the ServiceAccountIssuerDiscovery documents: the endpoints are not served"
                );
                None
            }
        }
    }
}

/// The token of `Authorization: Bearer <token>` (scheme case-insensitive); an empty
/// token counts as none, as upstream.
pub fn bearer_token(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(http::header::AUTHORIZATION)?.to_str().ok()?;
    let mut parts = value.splitn(3, ' ');
    let scheme = parts.next()?;
    let token = parts.next()?;
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

/// Upstream's `AuthenticatedGroupAdder`.
fn with_authenticated_group(mut user: User) -> User {
    let marked = user.groups.iter().any(|g| g == names::ALL_AUTHENTICATED || g == names::ALL_UNAUTHENTICATED);
    if user.name != names::ANONYMOUS && !marked {
        user.groups.push(names::ALL_AUTHENTICATED.into());
    }
    user
}

/// Errors joined as Go's `utilerrors.NewAggregate` prints them.
fn aggregate(errors: &[String]) -> String {
    match errors {
        [one] => one.clone(),
        many => format!("[{}]", many.join(", ")),
    }
}

/// Compares secrets without leaking where they differ (Go's `subtle.ConstantTimeCompare`;
/// the length is not secret).
pub(crate) fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests;
