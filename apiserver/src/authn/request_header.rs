//! The front-proxy authenticator (`--requestheader-*`, upstream's `request/headerrequest`
//! behind `request/x509`'s verifier): an authenticating proxy (the aggregation layer, or
//! another API server) connects with a client certificate signed by the request-header CA
//! and names the user it vouches for in headers (`X-Remote-User`, `X-Remote-Group`,
//! `X-Remote-Extra-<key>`).
//!
//! Asked first, as upstream. A request without a client certificate is not its concern;
//! one whose certificate does not verify against the request-header CA, or whose common
//! name is not allowed, fails here and the next authenticator (the client-CA one) is
//! asked; one that verifies but carries no user header is not its concern either.

use std::collections::BTreeMap;
use std::path::Path;

use http::HeaderMap;
use rustls::pki_types::CertificateDer;

use super::x509::ClientCertAuthenticator;
use super::{Authenticated, User, Verdict};

/// `--requestheader-*`, validated.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Config {
    pub allowed_names: Vec<String>,
    pub username_headers: Vec<String>,
    pub group_headers: Vec<String>,
    pub extra_headers_prefix: Vec<String>,
}

pub struct RequestHeaderAuthenticator {
    verifier: ClientCertAuthenticator,
    config: Config,
}

impl RequestHeaderAuthenticator {
    pub fn from_file(ca_file: &Path, config: Config) -> Result<Self, String> {
        let roots = component_base::tls::load_certs(ca_file)
            .map_err(|e| format!("--requestheader-client-ca-file: {e}"))?;
        let verifier = ClientCertAuthenticator::new(roots)
            .map_err(|e| e.replace("--client-ca-file", "--requestheader-client-ca-file"))?;
        Ok(Self { verifier, config })
    }

    /// Judges a request: its certificate chain (leaf first) and headers.
    pub fn authenticate(&self, chain: &[CertificateDer<'static>], headers: &HeaderMap) -> Verdict {
        if chain.is_empty() {
            return Verdict::NotMine;
        }
        let proxy = match self.verifier.authenticate(chain) {
            Verdict::Authenticated(a) => a.user.name,
            // A verified certificate without a common name names no proxy.
            Verdict::NotMine => String::new(),
            Verdict::Rejected(e) => return Verdict::Rejected(e),
        };
        if !self.config.allowed_names.is_empty() && !self.config.allowed_names.contains(&proxy) {
            return Verdict::Rejected(format!("x509: subject with cn={proxy} is not in the allowed list"));
        }
        let Some(name) = first_value(headers, &self.config.username_headers) else { return Verdict::NotMine };
        let user = User {
            name,
            uid: String::new(),
            groups: all_values(headers, &self.config.group_headers),
            extra: extra(headers, &self.config.extra_headers_prefix),
        };
        Verdict::Authenticated(Authenticated { user, audiences: Vec::new() })
    }
}

/// The first non-empty value of the first of `names` present (upstream's `headerValue`).
fn first_value(headers: &HeaderMap, names: &[String]) -> Option<String> {
    names.iter().find_map(|n| {
        headers.get(n.as_str()).and_then(|v| v.to_str().ok()).filter(|v| !v.is_empty()).map(str::to_string)
    })
}

/// Every non-blank value of every one of `names` (upstream's `allHeaderValues`).
fn all_values(headers: &HeaderMap, names: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    for n in names {
        for v in headers.get_all(n.as_str()) {
            if let Ok(s) = v.to_str()
                && !s.trim().is_empty()
            {
                out.push(s.to_string());
            }
        }
    }
    out
}

/// `<prefix><key>: value` headers as extra attributes: the key lower-cased and
/// percent-decoded (upstream's `newExtra`).
fn extra(headers: &HeaderMap, prefixes: &[String]) -> BTreeMap<String, Vec<String>> {
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (name, value) in headers {
        let name = name.as_str(); // http lower-cases header names
        for p in prefixes {
            let p = p.to_ascii_lowercase();
            if let Some(key) = name.strip_prefix(p.as_str())
                && !key.is_empty()
                && let Ok(v) = value.to_str()
            {
                let key = percent_decode(key).to_lowercase();
                out.entry(key).or_default().push(v.to_string());
            }
        }
    }
    out
}

/// `url.PathUnescape`, leaving malformed escapes as they are.
fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && i + 2 < bytes.len()
            && let Some(b) =
                std::str::from_utf8(&bytes[i + 1..i + 3]).ok().and_then(|h| u8::from_str_radix(h, 16).ok())
        {
            out.push(b);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Upstream's `checkForWhiteSpaceOnly` over the list flags.
pub fn validate(flags: &[(&str, &[String])]) -> Result<(), String> {
    for (flag, values) in flags {
        if values.iter().any(|v| v.trim().is_empty()) {
            return Err(format!("empty value in {flag:?}"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use http::HeaderValue;

    use super::*;
    use crate::authn::x509::tests::{ca, client};

    fn config() -> Config {
        Config {
            allowed_names: vec!["front-proxy-client".into()],
            username_headers: vec!["X-Remote-User".into()],
            group_headers: vec!["X-Remote-Group".into()],
            extra_headers_prefix: vec!["X-Remote-Extra-".into()],
        }
    }

    fn authenticator(
        ca: &rcgen::CertifiedIssuer<'static, rcgen::KeyPair>,
        config: Config,
    ) -> RequestHeaderAuthenticator {
        RequestHeaderAuthenticator {
            verifier: ClientCertAuthenticator::new(vec![ca.der().clone()]).unwrap(),
            config,
        }
    }

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, HeaderValue::from_static(v));
        }
        h
    }

    #[test]
    fn the_proxy_names_the_user() {
        let fp = ca("front-proxy-ca");
        let proxy = client(&fp, Some("front-proxy-client"), &[]);
        let h = headers(&[
            ("X-Remote-User", "alice"),
            ("X-Remote-Group", "devs"),
            ("X-Remote-Group", "ops"),
            ("X-Remote-Extra-Scopes", "a"),
            ("X-Remote-Extra-Scopes", "b"),
            ("X-Remote-Extra-Acme.com%2Fproject", "p"),
        ]);
        let Verdict::Authenticated(a) = authenticator(&fp, config()).authenticate(&[proxy.clone()], &h)
        else {
            panic!("a front proxy with an allowed name is believed")
        };
        assert_eq!(a.user.name, "alice");
        assert_eq!(a.user.groups, ["devs", "ops"]);
        assert_eq!(a.user.extra["scopes"], ["a", "b"]);
        assert_eq!(a.user.extra["acme.com/project"], ["p"]);
        // No user header: not this authenticator's request.
        assert_eq!(authenticator(&fp, config()).authenticate(&[proxy], &headers(&[])), Verdict::NotMine);
    }

    #[test]
    fn only_allowed_proxies_from_the_request_header_ca() {
        let fp = ca("front-proxy-ca");
        let h = headers(&[("X-Remote-User", "alice")]);
        let stranger = client(&fp, Some("someone-else"), &[]);
        assert!(
            matches!(authenticator(&fp, config()).authenticate(&[stranger.clone()], &h), Verdict::Rejected(m) if m.contains("cn=someone-else is not in the allowed list"))
        );
        // Without allowed names every certificate of the CA may proxy.
        let open = Config { allowed_names: Vec::new(), ..config() };
        assert!(matches!(authenticator(&fp, open).authenticate(&[stranger], &h), Verdict::Authenticated(_)));
        let other = client(&ca("client-ca"), Some("front-proxy-client"), &[]);
        assert!(matches!(authenticator(&fp, config()).authenticate(&[other], &h), Verdict::Rejected(_)));
        assert_eq!(authenticator(&fp, config()).authenticate(&[], &h), Verdict::NotMine);
    }

    #[test]
    fn flag_values_may_not_be_blank() {
        assert!(validate(&[("requestheader-username-headers", &["X-Remote-User".to_string()])]).is_ok());
        assert_eq!(
            validate(&[("requestheader-group-headers", &[" ".to_string()])]).unwrap_err(),
            "empty value in \"requestheader-group-headers\""
        );
        assert_eq!(percent_decode("a%2Fb%zz"), "a/b%zz");
    }
}
