//! Service-account tokens: JWTs signed with `--service-account-signing-key-file` and
//! verified with `--service-account-key-file` (upstream's `pkg/serviceaccount`).
//!
//! - [`keys`]: PEM keys and upstream's key IDs.
//! - [`jwt`]: signing, parsing and verifying compact JWS tokens.
//! - [`claims`]: bound and legacy token claims and their validation.
//! - [`token_request`]: the `serviceaccounts/token` subresource (TokenRequest API).
//! - [`openid`]: service account issuer discovery (`/.well-known/openid-configuration`).
//!
//! [`TokenAuthenticator`] accepts bound tokens of any `--service-account-issuer` and
//! legacy tokens (issuer `kubernetes/serviceaccount`); [`Issuer`] signs new tokens with
//! the first issuer.

pub mod claims;
pub mod jwt;
pub use component_base::keyutil as keys;
pub mod openid;
pub mod token_request;

use std::sync::Arc;

use base64::Engine;
use serde_json::Value;

use super::{Authenticated, Objects, Verdict};
use claims::{LEGACY_ISSUER, TokenClaims};
use keys::{KeyError, PublicKey, SigningKey};

/// A token request for exactly this many seconds, bound to a pod and for the API's own
/// audiences, is what the ServiceAccount admission plugin asks for on behalf of
/// pods that predate bound tokens: it gets [`EXPIRATION_EXTENSION_SECONDS`] instead,
/// with `warnafter` at the requested time (`--service-account-extend-token-expiration`).
pub const WARN_ONLY_BOUND_TOKEN_EXPIRATION_SECONDS: i64 = 60 * 60 + 7;
pub const EXPIRATION_EXTENSION_SECONDS: i64 = 24 * 365 * 60 * 60;

/// Verifies service-account tokens (upstream's `jwtTokenAuthenticator` for the bound
/// issuers and for the legacy issuer).
pub struct TokenAuthenticator {
    pub keys: Vec<PublicKey>,
    /// `--service-account-issuer`: bound tokens of these issuers are accepted.
    pub issuers: Vec<String>,
    /// `--api-audiences`: the audiences tokens without `aud` (legacy tokens) get.
    pub api_audiences: Vec<String>,
    /// `--service-account-lookup`, for legacy tokens; bound tokens are always checked
    /// against their objects, as upstream.
    pub lookup: bool,
    pub objects: Arc<dyn Objects>,
}

impl TokenAuthenticator {
    /// Judges `token` for a request that targets `requested` audiences (the API
    /// audiences when empty).
    pub fn authenticate(&self, token: &str, requested: &[String], now: i64) -> Verdict {
        let Some(parsed) = jwt::parse(token) else { return Verdict::NotMine };
        let legacy = parsed.issuer() == LEGACY_ISSUER;
        if !legacy && !self.issuers.iter().any(|i| i == parsed.issuer()) {
            return Verdict::NotMine;
        }
        if let Err(e) = parsed.verify(&self.keys) {
            return Verdict::Rejected(e.to_string());
        }
        let mut token_audiences = parsed.audiences();
        if token_audiences.is_empty() {
            token_audiences = self.api_audiences.clone();
        }
        let requested = if requested.is_empty() { self.api_audiences.as_slice() } else { requested };
        let audiences: Vec<String> =
            token_audiences.iter().filter(|a| requested.contains(a)).cloned().collect();
        if audiences.is_empty() && !self.api_audiences.is_empty() {
            return Verdict::Rejected(format!(
                "token audiences {} is invalid for the target audiences {}",
                go_quoted(&token_audiences),
                go_quoted(requested)
            ));
        }
        let info = if legacy {
            claims::validate_legacy(&parsed, token, self.objects.as_ref(), self.lookup)
        } else {
            claims::validate_bound(&parsed, self.objects.as_ref(), now)
        };
        match info {
            Ok(info) => Verdict::Authenticated(Authenticated { user: info.user(), audiences }),
            Err(e) => Verdict::Rejected(e),
        }
    }
}

/// A string list as Go's `%q` prints it: `["a" "b"]`.
fn go_quoted(list: &[String]) -> String {
    let items: Vec<String> = list.iter().map(|s| format!("{s:?}")).collect();
    format!("[{}]", items.join(" "))
}

/// Signs bound tokens for the TokenRequest API (upstream's `JWTTokenGenerator` plus the
/// TokenRequest settings).
#[derive(Debug)]
pub struct Issuer {
    /// The first `--service-account-issuer`.
    pub issuer: String,
    key: SigningKey,
    /// Defaults a request's audiences; decides the expiration extension.
    pub api_audiences: Vec<String>,
    /// `--service-account-max-token-expiration` in seconds; 0 for no cap.
    pub max_expiration_seconds: i64,
    pub extend_expiration: bool,
}

impl Issuer {
    pub fn new(
        issuer: String,
        key: SigningKey,
        api_audiences: Vec<String>,
        max_expiration_seconds: i64,
        extend_expiration: bool,
    ) -> Self {
        Issuer { issuer, key, api_audiences, max_expiration_seconds, extend_expiration }
    }

    pub fn public_key(&self) -> &PublicKey {
        &self.key.public
    }

    /// Signs a token with `claims` issued at `now`.
    pub fn sign(&self, claims: &TokenClaims<'_>, now: i64) -> Result<String, KeyError> {
        jwt::sign(&self.key, &claims.to_json(now))
    }
}

/// A Secret's `data[key]`, base64-decoded.
pub fn secret_data(secret: &Value, key: &str) -> Option<Vec<u8>> {
    let encoded = secret["data"][key].as_str()?;
    base64::engine::general_purpose::STANDARD.decode(encoded).ok()
}

#[cfg(test)]
mod tests;
