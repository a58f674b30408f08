//! Auth tokens (`--auth-token`), as etcd's two token providers:
//!
//! - `simple`: a random string assigned through raft, so every member knows it, kept in
//!   memory with a TTL (`--auth-token-ttl`) that each use renews; lost on restart, which
//!   clients answer by authenticating again.
//! - `jwt,pub-key=...,priv-key=...,sign-method=...,ttl=...`: a signed JWT carrying the
//!   user name, the auth revision it was issued at and its expiry; any member with the
//!   public key verifies it, with no state.

use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use component_base::keyutil::{Algorithm, PublicKey, SigningKey, public_keys_from_file};
use parking_lot::Mutex;
use rand::Rng;

/// Letters of a simple token's random part (etcd's `letters`).
const LETTERS: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";
const SIMPLE_TOKEN_PREFIX_LEN: usize = 16;
/// etcd's default JWT lifetime.
const DEFAULT_JWT_TTL: Duration = Duration::from_secs(300);
/// Longest token accepted from a client; real ones are far shorter.
const MAX_TOKEN_BYTES: usize = 8192;

#[derive(Debug, thiserror::Error)]
pub enum TokenConfigError {
    #[error("unknown token type {0:?} (want \"simple\" or \"jwt\")")]
    UnknownType(String),
    #[error("jwt option {0:?} is not key=value")]
    Malformed(String),
    #[error("unknown jwt option {0:?} (known: pub-key, priv-key, sign-method, ttl)")]
    UnknownOption(String),
    #[error("jwt needs pub-key")]
    NoPublicKey,
    #[error("jwt sign-method {0:?} is not supported (RS256, ES256, ES384)")]
    SignMethod(String),
    #[error("jwt sign-method {method} does not match the {key} key")]
    KeyMismatch { method: &'static str, key: &'static str },
    #[error("jwt ttl: {0}")]
    Ttl(String),
    #[error("jwt keys: {0}")]
    Key(#[from] component_base::keyutil::KeyError),
}

/// Who a token stands for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TokenInfo {
    pub username: String,
    /// The auth revision the token was issued at (JWT); `None` for simple tokens, which
    /// are invalidated when their user changes instead.
    pub revision: Option<u64>,
}

pub enum TokenProvider {
    Simple(SimpleTokens),
    Jwt(JwtTokens),
}

impl TokenProvider {
    /// Parses `--auth-token`; `simple_ttl` is `--auth-token-ttl`.
    pub fn from_flag(spec: &str, simple_ttl: Duration) -> Result<Self, TokenConfigError> {
        let mut parts = spec.split(',');
        match parts.next().unwrap_or_default() {
            "simple" => Ok(TokenProvider::Simple(SimpleTokens::new(simple_ttl))),
            "jwt" => Ok(TokenProvider::Jwt(JwtTokens::from_options(parts)?)),
            other => Err(TokenConfigError::UnknownType(other.to_string())),
        }
    }

    pub fn is_simple(&self) -> bool {
        matches!(self, TokenProvider::Simple(_))
    }

    /// The user a client's token stands for, or `None` when it is unknown, expired,
    /// forged or malformed.
    pub fn info(&self, token: &str) -> Option<TokenInfo> {
        if token.len() > MAX_TOKEN_BYTES {
            return None;
        }
        match self {
            TokenProvider::Simple(s) => s.info(token).map(|username| TokenInfo { username, revision: None }),
            TokenProvider::Jwt(j) => j.info(token),
        }
    }

    /// Forgets a user's simple tokens (deleted, or its password changed).
    pub fn invalidate_user(&self, user: &str) {
        if let TokenProvider::Simple(s) = self {
            s.tokens.lock().retain(|_, (u, _)| u != user);
        }
    }

    /// Forgets one simple token (issued against a state that changed meanwhile).
    pub fn forget(&self, token: &str) {
        if let TokenProvider::Simple(s) = self {
            s.tokens.lock().remove(token);
        }
    }

    /// Forgets every simple token (auth disabled).
    pub fn clear(&self) {
        if let TokenProvider::Simple(s) = self {
            s.tokens.lock().clear();
        }
    }
}

/// `now + ttl`, or as far as an `Instant` goes for an absurd TTL.
fn deadline(now: Instant, ttl: Duration) -> Instant {
    now.checked_add(ttl).unwrap_or_else(|| now + Duration::from_secs(100 * 365 * 24 * 3600))
}

/// The random part of a simple token, chosen by the member that received the request.
pub fn simple_token_prefix() -> String {
    let mut rng = rand::rng();
    (0..SIMPLE_TOKEN_PREFIX_LEN).map(|_| LETTERS[rng.random_range(0..LETTERS.len())] as char).collect()
}

pub struct SimpleTokens {
    ttl: Duration,
    /// token → (user, expiry).
    tokens: Mutex<HashMap<String, (String, Instant)>>,
}

impl SimpleTokens {
    fn new(ttl: Duration) -> Self {
        Self { ttl, tokens: Mutex::new(HashMap::new()) }
    }

    /// Records a token (from an applied Authenticate, on every member).
    pub fn assign(&self, token: String, user: &str) {
        let now = Instant::now();
        let mut tokens = self.tokens.lock();
        tokens.retain(|_, (_, expiry)| *expiry > now);
        tokens.insert(token, (user.to_string(), deadline(now, self.ttl)));
    }

    fn info(&self, token: &str) -> Option<String> {
        let now = Instant::now();
        let mut tokens = self.tokens.lock();
        let (user, expiry) = tokens.get_mut(token)?;
        if *expiry <= now {
            tokens.remove(token);
            return None;
        }
        *expiry = deadline(now, self.ttl);
        Some(user.clone())
    }
}

pub struct JwtTokens {
    alg: Algorithm,
    verify: Vec<PublicKey>,
    /// Without a private key this member only verifies tokens other members issued.
    sign: Option<SigningKey>,
    ttl: Duration,
}

#[derive(serde::Serialize, serde::Deserialize)]
struct Claims {
    exp: i64,
    revision: u64,
    username: String,
}

impl JwtTokens {
    fn from_options<'a>(opts: impl Iterator<Item = &'a str>) -> Result<Self, TokenConfigError> {
        let (mut pub_key, mut priv_key, mut method, mut ttl) = (None, None, None, DEFAULT_JWT_TTL);
        for opt in opts.filter(|o| !o.is_empty()) {
            let (k, v) = opt.split_once('=').ok_or_else(|| TokenConfigError::Malformed(opt.to_string()))?;
            match k {
                "pub-key" => pub_key = Some(v.to_string()),
                "priv-key" => priv_key = Some(v.to_string()),
                "sign-method" => method = Some(v.to_string()),
                "ttl" => ttl = component_base::duration::parse(v).map_err(TokenConfigError::Ttl)?,
                other => return Err(TokenConfigError::UnknownOption(other.to_string())),
            }
        }
        let pub_key = pub_key.ok_or(TokenConfigError::NoPublicKey)?;
        let verify = public_keys_from_file(Path::new(&pub_key))?;
        let sign = priv_key.map(|p| SigningKey::from_file(Path::new(&p))).transpose()?;
        let key_alg = sign.as_ref().map(|s| s.algorithm()).unwrap_or(verify[0].alg);
        let alg = match method {
            None => key_alg,
            Some(m) => Algorithm::from_name(&m).ok_or(TokenConfigError::SignMethod(m))?,
        };
        if alg != key_alg {
            return Err(TokenConfigError::KeyMismatch { method: alg.name(), key: key_alg.name() });
        }
        Ok(Self { alg, verify, sign, ttl })
    }

    /// A token for `user` at auth revision `revision`; `None` on a verify-only member.
    pub fn assign(&self, user: &str, revision: u64) -> Option<String> {
        let key = self.sign.as_ref()?;
        let now = SystemTime::now().duration_since(UNIX_EPOCH).ok()?.as_secs();
        let exp = now.saturating_add(self.ttl.as_secs()).min(i64::MAX as u64) as i64;
        let header = serde_json::json!({"alg": self.alg.name(), "typ": "JWT"});
        let claims = Claims { exp, revision, username: user.to_string() };
        let signing_input = format!(
            "{}.{}",
            URL_SAFE_NO_PAD.encode(header.to_string()),
            URL_SAFE_NO_PAD.encode(serde_json::to_vec(&claims).ok()?)
        );
        let sig = key.sign(signing_input.as_bytes()).ok()?;
        Some(format!("{signing_input}.{}", URL_SAFE_NO_PAD.encode(sig)))
    }

    fn info(&self, token: &str) -> Option<TokenInfo> {
        let (signing_input, sig) = token.rsplit_once('.')?;
        let (header, payload) = signing_input.split_once('.')?;
        let header: serde_json::Value = serde_json::from_slice(&URL_SAFE_NO_PAD.decode(header).ok()?).ok()?;
        if header.get("alg").and_then(|a| a.as_str()) != Some(self.alg.name()) {
            return None;
        }
        let sig = URL_SAFE_NO_PAD.decode(sig).ok()?;
        if !self.verify.iter().any(|k| k.verify(self.alg, signing_input.as_bytes(), &sig)) {
            return None;
        }
        let claims: Claims = serde_json::from_slice(&URL_SAFE_NO_PAD.decode(payload).ok()?).ok()?;
        let now = SystemTime::now().duration_since(UNIX_EPOCH).ok()?.as_secs() as i64;
        if claims.exp <= now || claims.username.is_empty() {
            return None;
        }
        Some(TokenInfo { username: claims.username, revision: Some(claims.revision) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn simple_tokens_expire_and_renew() {
        let s = SimpleTokens::new(Duration::from_millis(50));
        s.assign("abc.1".into(), "alice");
        assert_eq!(s.info("abc.1").as_deref(), Some("alice"));
        assert_eq!(s.info("abc.2"), None);
        std::thread::sleep(Duration::from_millis(60));
        assert_eq!(s.info("abc.1"), None, "expired");
        let p = TokenProvider::Simple(s);
        if let TokenProvider::Simple(s) = &p {
            s.assign("x.3".into(), "bob");
        }
        p.invalidate_user("bob");
        assert_eq!(p.info("x.3"), None);
        assert_eq!(simple_token_prefix().len(), 16);
    }

    #[test]
    fn flag_errors_name_the_problem() {
        let err = |s: &str| TokenProvider::from_flag(s, DEFAULT_JWT_TTL).err().map(|e| e.to_string());
        assert!(err("simple").is_none());
        assert!(err("bogus").unwrap().contains("unknown token type"));
        assert!(err("jwt").unwrap().contains("pub-key"));
        assert!(err("jwt,pub-key=/x,color=red").unwrap().contains("unknown jwt option"));
        assert!(err("jwt,ttl").unwrap().contains("not key=value"));
    }
}
