//! Service account issuer discovery (upstream's `pkg/serviceaccount/openidmetadata.go`):
//! the OpenID Connect discovery document at `/.well-known/openid-configuration` and the
//! token verification keys at `/openid/v1/jwks`, so that a relying party outside the cluster
//! (or a pod, through the `kubernetes` Service) can check service-account tokens. Both are
//! rendered once at start; RBAC grants them to `system:serviceaccounts` through the
//! `system:service-account-issuer-discovery` binding.

use bytes::Bytes;
use serde_json::json;

use super::keys::PublicKey;

pub const CONFIGURATION_PATH: &str = "/.well-known/openid-configuration";
pub const JWKS_PATH: &str = "/openid/v1/jwks";
/// Upstream's `Cache-Control` on both documents.
pub const CACHE_CONTROL: &str = "public, max-age=3600";
pub const JWKS_CONTENT_TYPE: &str = "application/jwk-set+json";

/// The two pre-rendered documents.
#[derive(Clone, Debug)]
pub struct OpenIdMetadata {
    pub configuration: Bytes,
    pub jwks: Bytes,
}

impl OpenIdMetadata {
    /// From the first `--service-account-issuer`, `--service-account-jwks-uri` (default:
    /// `https://<external address>/openid/v1/jwks`) and the verification keys. Refused, as
    /// upstream, when the issuer is not an https URL without query or fragment, or the
    /// JWKS URI is not https: the server then serves neither document.
    pub fn new(
        issuer: &str,
        jwks_uri: Option<&str>,
        external_address: &str,
        keys: &[PublicKey],
    ) -> Result<Self, String> {
        let rest = issuer.strip_prefix("https://").ok_or("issuer URL must use https scheme")?;
        if rest.contains('?') {
            return Err("issuer URL may not include a query".into());
        }
        if rest.contains('#') {
            return Err("issuer URL may not include a fragment".into());
        }
        let jwks_uri = match jwks_uri.filter(|u| !u.is_empty()) {
            Some(u) if u.starts_with("https://") => u.to_string(),
            Some(_) => return Err("jwks_uri requires https scheme".into()),
            None if external_address.is_empty() => {
                return Err("either the JWKS URI or the external address must be set".into());
            }
            None => format!("https://{external_address}{JWKS_PATH}"),
        };
        let mut algs: Vec<&str> = keys.iter().map(|k| k.alg.name()).collect();
        algs.sort_unstable();
        algs.dedup();
        let configuration = json!({
            "issuer": issuer,
            "jwks_uri": jwks_uri,
            "response_types_supported": ["id_token"],
            "subject_types_supported": ["public"],
            "id_token_signing_alg_values_supported": algs,
        });
        let jwks = json!({"keys": keys.iter().filter_map(PublicKey::jwk).collect::<Vec<_>>()});
        Ok(OpenIdMetadata {
            configuration: Bytes::from(serde_json::to_vec(&configuration).map_err(|e| e.to_string())?),
            jwks: Bytes::from(serde_json::to_vec(&jwks).map_err(|e| e.to_string())?),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    fn key() -> PublicKey {
        let generated = rcgen::KeyPair::generate().unwrap();
        super::super::keys::public_keys_from_pem(generated.public_key_pem().as_bytes()).unwrap().remove(0)
    }

    #[test]
    fn documents_name_the_issuer_and_keys() {
        let k = key();
        let m = OpenIdMetadata::new(
            "https://kubernetes.default.svc.cluster.local",
            None,
            "10.0.0.1:6443",
            &[k.clone()],
        )
        .unwrap();
        let conf: Value = serde_json::from_slice(&m.configuration).unwrap();
        assert_eq!(conf["issuer"], "https://kubernetes.default.svc.cluster.local");
        assert_eq!(conf["jwks_uri"], "https://10.0.0.1:6443/openid/v1/jwks");
        assert_eq!(conf["id_token_signing_alg_values_supported"], json!(["ES256"]));
        assert_eq!(conf["response_types_supported"], json!(["id_token"]));
        let jwks: Value = serde_json::from_slice(&m.jwks).unwrap();
        assert_eq!(jwks["keys"][0]["kid"], k.key_id.as_str());
        let explicit =
            OpenIdMetadata::new("https://iss", Some("https://example.com/keys"), "", &[k]).unwrap();
        let conf: Value = serde_json::from_slice(&explicit.configuration).unwrap();
        assert_eq!(conf["jwks_uri"], "https://example.com/keys");
    }

    #[test]
    fn non_https_issuers_are_refused() {
        assert!(OpenIdMetadata::new("kubernetes/serviceaccount", None, "a:1", &[]).is_err());
        assert!(OpenIdMetadata::new("http://iss", None, "a:1", &[]).is_err());
        assert!(OpenIdMetadata::new("https://iss?x=1", None, "a:1", &[]).is_err());
        assert!(OpenIdMetadata::new("https://iss", Some("http://keys"), "a:1", &[]).is_err());
        assert!(OpenIdMetadata::new("https://iss", None, "", &[]).is_err());
    }
}
