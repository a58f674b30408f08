//! Transformers and how they are chosen by prefix (upstream's `storage/value` package).
//!
//! A stored value says how it was written by its prefix: `k8s:enc:<provider>:v1:` then,
//! inside that provider, `<keyname>:` then the provider's bytes. Plain values have no
//! prefix. Reading tries, in the configured order, every transformer whose prefix the
//! value starts with; writing always uses the first. So with
//! `[aescbc{key2, key1}, identity]`, new writes use key2, values written with key1 or in
//! plain text still read, and rewriting an object moves it to key2.

use std::sync::Arc;

/// Marks encrypted values; the identity transformer refuses to read values that start
/// with it, so an encrypted value is never served as if it were the object.
pub const ENCRYPTED_PREFIX: &[u8] = b"k8s:enc:";

/// One way of storing values.
pub trait Transformer: Send + Sync {
    /// The value stored as `data` (its prefix already stripped). `aad` is the etcd key.
    fn from_storage(&self, data: &[u8], aad: &[u8]) -> Result<Vec<u8>, String>;
    /// The bytes to store for `data` (without the prefix, which the caller adds).
    fn to_storage(&self, data: &[u8], aad: &[u8]) -> Result<Vec<u8>, String>;
}

/// A transformer and the prefix it owns in stored values; an empty prefix (identity)
/// matches every value.
#[derive(Clone)]
pub struct PrefixTransformer {
    pub prefix: Vec<u8>,
    pub transformer: Arc<dyn Transformer>,
}

/// Several prefixed transformers: reads pick by prefix, writes use the first
/// (upstream's `prefixTransformers`).
pub struct PrefixTransformers {
    list: Vec<PrefixTransformer>,
    /// The error when no prefix matches (upstream words it per level).
    no_match: &'static str,
}

impl PrefixTransformers {
    /// `list` must not be empty (configuration validation guarantees it).
    pub fn new(list: Vec<PrefixTransformer>, no_match: &'static str) -> Self {
        Self { list, no_match }
    }
}

impl Transformer for PrefixTransformers {
    /// Every transformer whose prefix matches is tried in order; one failing does not stop
    /// the next (two aescbc entries share a prefix while keys rotate). The identity's own
    /// refusal to read encrypted data is not reported: another transformer may read it.
    fn from_storage(&self, data: &[u8], aad: &[u8]) -> Result<Vec<u8>, String> {
        let mut errs = Vec::new();
        for t in &self.list {
            let Some(rest) = data.strip_prefix(t.prefix.as_slice()) else { continue };
            match t.transformer.from_storage(rest, aad) {
                Ok(v) => return Ok(v),
                Err(_) if t.prefix.is_empty() => continue,
                Err(e) => errs.push(e),
            }
        }
        Err(match errs.len() {
            0 => self.no_match.to_string(),
            1 => errs.remove(0),
            // Upstream's aggregate error format.
            _ => format!("[{}]", errs.join(", ")),
        })
    }

    fn to_storage(&self, data: &[u8], aad: &[u8]) -> Result<Vec<u8>, String> {
        let first = self.list.first().ok_or_else(|| "no transformer to write with".to_string())?;
        let out = first.transformer.to_storage(data, aad)?;
        let mut v = Vec::with_capacity(first.prefix.len() + out.len());
        v.extend_from_slice(&first.prefix);
        v.extend_from_slice(&out);
        Ok(v)
    }
}

/// Stores values as they are, and refuses to read encrypted ones (upstream's
/// `identity.NewEncryptCheckTransformer`).
pub struct Identity;

impl Identity {
    pub const ERROR: &'static str = "identity transformer tried to read encrypted data";

    /// Checks `data` in place, without copying: what unconfigured resources use.
    pub fn check(data: &[u8]) -> Result<(), String> {
        if data.starts_with(ENCRYPTED_PREFIX) { Err(Self::ERROR.to_string()) } else { Ok(()) }
    }
}

impl Transformer for Identity {
    fn from_storage(&self, data: &[u8], _aad: &[u8]) -> Result<Vec<u8>, String> {
        Self::check(data)?;
        Ok(data.to_vec())
    }

    fn to_storage(&self, data: &[u8], _aad: &[u8]) -> Result<Vec<u8>, String> {
        Ok(data.to_vec())
    }
}

/// Fills `buf` from the operating system's random source.
pub fn fill_random(buf: &mut [u8]) -> Result<(), String> {
    use ring::rand::SecureRandom;
    ring::rand::SystemRandom::new()
        .fill(buf)
        .map_err(|_| "unable to read sufficient random bytes".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reverses bytes; fails on input starting with `!`.
    struct Rev;
    impl Transformer for Rev {
        fn from_storage(&self, data: &[u8], _: &[u8]) -> Result<Vec<u8>, String> {
            if data.first() == Some(&b'!') {
                return Err("rev failed".into());
            }
            Ok(data.iter().rev().copied().collect())
        }
        fn to_storage(&self, data: &[u8], _: &[u8]) -> Result<Vec<u8>, String> {
            Ok(data.iter().rev().copied().collect())
        }
    }

    fn pt(prefix: &str, t: impl Transformer + 'static) -> PrefixTransformer {
        PrefixTransformer { prefix: prefix.as_bytes().to_vec(), transformer: Arc::new(t) }
    }

    #[test]
    fn writes_with_the_first_and_reads_by_prefix() {
        let t = PrefixTransformers::new(vec![pt("a:", Rev), pt("", Identity)], "no matching prefix found");
        assert_eq!(t.to_storage(b"xyz", b"").unwrap(), b"a:zyx");
        assert_eq!(t.from_storage(b"a:zyx", b"").unwrap(), b"xyz");
        // Plain data falls through to the identity.
        assert_eq!(t.from_storage(b"{}", b"").unwrap(), b"{}");
    }

    #[test]
    fn identity_never_reads_encrypted_data() {
        let t = PrefixTransformers::new(vec![pt("", Identity)], "no matching prefix found");
        assert_eq!(t.from_storage(b"k8s:enc:aescbc:v1:k:xx", b""), Err("no matching prefix found".into()));
        assert_eq!(Identity::check(b"k8s:enc:x"), Err(Identity::ERROR.into()));
    }

    #[test]
    fn errors_are_reported_and_later_matches_still_tried() {
        let t = PrefixTransformers::new(vec![pt("a:", Rev), pt("a:", Rev)], "none");
        assert_eq!(t.from_storage(b"a:!x", b""), Err("[rev failed, rev failed]".into()));
        assert_eq!(t.from_storage(b"b:x", b""), Err("none".into()));
        let t = PrefixTransformers::new(vec![pt("a:", Rev), pt("", Identity)], "none");
        // The identity's refusal is not reported, the matching transformer's error is.
        assert_eq!(t.from_storage(b"a:!x", b""), Ok(b"a:!x".to_vec()));
        assert_eq!(
            PrefixTransformers::new(vec![pt("k8s:enc:a:", Rev), pt("", Identity)], "none")
                .from_storage(b"k8s:enc:a:!x", b""),
            Err("rev failed".into())
        );
    }
}
