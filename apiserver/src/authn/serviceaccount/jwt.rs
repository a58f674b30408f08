//! Compact-serialized JWS tokens (what go-jose writes for upstream): signing, structural
//! parsing, signature verification against a key set, and the time checks with go-jose's
//! leeway. What the claims mean is decided by the callers ([`super::claims`]).

use base64::Engine;
use serde_json::{Value, json};

use super::keys::{Algorithm, KeyError, PublicKey, SigningKey};

/// go-jose's `DefaultLeeway`: clock skew tolerated on `exp`, `nbf` and `iat`, and how
/// long a deleted bound object keeps its tokens valid.
pub const LEEWAY_SECS: i64 = 60;

/// Tokens longer than this are not JWTs this server issued (nor upstream's).
const MAX_TOKEN_LEN: usize = 64 * 1024;

fn b64() -> base64::engine::GeneralPurpose {
    base64::engine::general_purpose::URL_SAFE_NO_PAD
}

/// Signs `claims` (a JSON object) with `key`; the header names the key's algorithm and
/// upstream's key ID.
pub fn sign(key: &SigningKey, claims: &Value) -> Result<String, KeyError> {
    let header = json!({"alg": key.algorithm().name(), "kid": key.key_id()});
    let mut token = format!(
        "{}.{}",
        b64().encode(serde_json::to_vec(&header).unwrap_or_default()),
        b64().encode(serde_json::to_vec(claims).unwrap_or_default())
    );
    let sig = key.sign(token.as_bytes())?;
    token.push('.');
    token.push_str(&b64().encode(sig));
    Ok(token)
}

/// Why a JWT was not accepted. The messages are upstream's, as TokenReview shows them.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JwtError {
    #[error("invalid signature, no keys found")]
    NoKeys,
    #[error("square/go-jose: error in cryptographic primitive")]
    BadSignature,
    #[error("square/go-jose: unsupported algorithm {0}")]
    UnsupportedAlgorithm(String),
    #[error("service account token has expired")]
    Expired,
    #[error("service account token is not valid yet")]
    NotValidYet,
    #[error("service account token is issued in the future")]
    IssuedInTheFuture,
}

/// A token split into its parts; nothing in it is trusted until [`Parsed::verify`].
#[derive(Debug)]
pub struct Parsed<'a> {
    pub alg: String,
    pub kid: String,
    /// The payload, a JSON object.
    pub claims: Value,
    signing_input: &'a str,
    signature: Vec<u8>,
}

/// Splits a compact JWS; None for anything that is not one (other authenticators may
/// know the token).
pub fn parse(token: &str) -> Option<Parsed<'_>> {
    if token.len() > MAX_TOKEN_LEN || token.trim_start().starts_with('{') {
        return None;
    }
    let mut parts = token.split('.');
    let (header, payload, signature) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() {
        return None;
    }
    let header: Value = serde_json::from_slice(&b64().decode(header).ok()?).ok()?;
    let claims: Value = serde_json::from_slice(&b64().decode(payload).ok()?).ok()?;
    if !claims.is_object() {
        return None;
    }
    Some(Parsed {
        alg: header["alg"].as_str()?.to_string(),
        kid: header["kid"].as_str().unwrap_or_default().to_string(),
        claims,
        signing_input: &token[..token.len() - signature.len() - 1],
        signature: b64().decode(signature).ok()?,
    })
}

impl Parsed<'_> {
    /// Checks the signature with the keys named by `kid` (all keys when the token names
    /// none), as upstream's `jwtTokenAuthenticator` does.
    pub fn verify(&self, keys: &[PublicKey]) -> Result<(), JwtError> {
        let alg = Algorithm::from_name(&self.alg)
            .ok_or_else(|| JwtError::UnsupportedAlgorithm(self.alg.clone()))?;
        let mut candidates = keys.iter().filter(|k| self.kid.is_empty() || k.key_id == self.kid).peekable();
        if candidates.peek().is_none() {
            return Err(JwtError::NoKeys);
        }
        if candidates.any(|k| k.verify(alg, self.signing_input.as_bytes(), &self.signature)) {
            Ok(())
        } else {
            Err(JwtError::BadSignature)
        }
    }

    pub fn issuer(&self) -> &str {
        self.claims["iss"].as_str().unwrap_or_default()
    }

    /// `aud`, a string or a list of strings.
    pub fn audiences(&self) -> Vec<String> {
        match &self.claims["aud"] {
            Value::String(s) => vec![s.clone()],
            Value::Array(a) => a.iter().filter_map(|v| v.as_str().map(str::to_string)).collect(),
            _ => Vec::new(),
        }
    }

    /// A NumericDate claim (seconds; go-jose also reads fractions).
    pub fn time(&self, name: &str) -> Option<i64> {
        numeric_date(&self.claims[name])
    }

    /// go-jose's `Claims.Validate` at `now`: `exp`, `nbf` and `iat` with the leeway.
    pub fn check_times(&self, now: i64) -> Result<(), JwtError> {
        if self.time("exp").is_some_and(|exp| now - LEEWAY_SECS > exp) {
            return Err(JwtError::Expired);
        }
        if self.time("nbf").is_some_and(|nbf| now + LEEWAY_SECS < nbf) {
            return Err(JwtError::NotValidYet);
        }
        if self.time("iat").is_some_and(|iat| now + LEEWAY_SECS < iat) {
            return Err(JwtError::IssuedInTheFuture);
        }
        Ok(())
    }
}

pub fn numeric_date(v: &Value) -> Option<i64> {
    v.as_i64().or_else(|| v.as_f64().map(|f| f as i64))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rsa() -> SigningKey {
        SigningKey::from_pem(include_bytes!("../../../../component-base/testdata/sa-rsa.key")).unwrap()
    }

    #[test]
    fn round_trip_and_tampering() {
        let key = rsa();
        let token = sign(&key, &json!({"iss": "i", "aud": ["a"], "exp": 100})).unwrap();
        let parsed = parse(&token).unwrap();
        assert_eq!((parsed.alg.as_str(), parsed.kid.as_str()), ("RS256", key.key_id()));
        assert_eq!(parsed.issuer(), "i");
        assert_eq!(parsed.audiences(), vec!["a".to_string()]);
        assert_eq!(parsed.verify(std::slice::from_ref(&key.public)), Ok(()));

        // A changed payload under the old signature.
        let mut parts: Vec<String> = token.split('.').map(str::to_string).collect();
        parts[1] = b64().encode(br#"{"iss":"i","aud":["a"],"exp":999999}"#);
        let forged = parts.join(".");
        assert_eq!(
            parse(&forged).unwrap().verify(std::slice::from_ref(&key.public)),
            Err(JwtError::BadSignature)
        );

        // A `kid` no configured key has.
        let other =
            SigningKey::from_pem(rcgen::KeyPair::generate().unwrap().serialize_pem().as_bytes()).unwrap();
        assert_eq!(parsed.verify(std::slice::from_ref(&other.public)), Err(JwtError::NoKeys));

        // `alg: none` and garbage are refused.
        let none = format!("{}.{}.", b64().encode(br#"{"alg":"none"}"#), b64().encode(br#"{"iss":"i"}"#));
        assert!(matches!(
            parse(&none).unwrap().verify(std::slice::from_ref(&key.public)),
            Err(JwtError::UnsupportedAlgorithm(_))
        ));
        assert!(parse("a.b").is_none());
        assert!(parse("not-a-token").is_none());
    }

    #[test]
    fn times_use_the_leeway() {
        let key = rsa();
        let token = sign(&key, &json!({"exp": 1000, "nbf": 500, "iat": 500})).unwrap();
        let p = parse(&token).unwrap();
        assert_eq!(p.check_times(700), Ok(()));
        assert_eq!(p.check_times(1059), Ok(()));
        assert_eq!(p.check_times(1061), Err(JwtError::Expired));
        assert_eq!(p.check_times(445), Ok(()));
        assert_eq!(p.check_times(400), Err(JwtError::NotValidYet));
    }
}
