//! Token signing keys read from PEM (upstream's `keyutil.PrivateKeyFromFile` and
//! `keyutil.PublicKeysFromFile`), for the API server's service-account tokens and etcd's
//! JWT auth tokens: RSA (PKCS#1 or PKCS#8) and ECDSA P-256/P-384 (PKCS#8 or
//! SEC1) private keys, and public keys as `PUBLIC KEY` blocks, certificates, or the
//! public half of a private key.
//!
//! Every key carries upstream's key ID: the unpadded base64url SHA-256 of its DER PKIX
//! (`SubjectPublicKeyInfo`) encoding, so a token's `kid` picks the key that verifies it
//! and tokens stay interchangeable with upstream's.

use std::path::Path;

use base64::Engine;
use ring::rand::SystemRandom;
use ring::signature::{
    self, EcdsaKeyPair, EcdsaSigningAlgorithm, KeyPair, RsaKeyPair, UnparsedPublicKey, VerificationAlgorithm,
};
use rustls_pki_types::pem::{PemObject, SectionKind};
use sha2::{Digest, Sha256};

#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error("reading {path}: {source}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: {message}")]
    File { path: String, message: String },
    #[error("malformed PEM: {0}")]
    Pem(String),
    #[error("data does not contain a valid RSA or ECDSA private key")]
    NoPrivateKey,
    #[error("data does not contain any valid RSA or ECDSA public keys")]
    NoPublicKeys,
    #[error("signing the token failed")]
    Sign,
}

/// The JWS algorithms tokens are signed with: one per key type, as upstream's signer
/// picks (`RS256` for RSA, `ES256`/`ES384` by curve).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Algorithm {
    RS256,
    ES256,
    ES384,
}

impl Algorithm {
    pub fn name(self) -> &'static str {
        match self {
            Algorithm::RS256 => "RS256",
            Algorithm::ES256 => "ES256",
            Algorithm::ES384 => "ES384",
        }
    }

    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "RS256" => Some(Algorithm::RS256),
            "ES256" => Some(Algorithm::ES256),
            "ES384" => Some(Algorithm::ES384),
            _ => None,
        }
    }

    fn verification(self) -> &'static dyn VerificationAlgorithm {
        match self {
            Algorithm::RS256 => &signature::RSA_PKCS1_2048_8192_SHA256,
            Algorithm::ES256 => &signature::ECDSA_P256_SHA256_FIXED,
            Algorithm::ES384 => &signature::ECDSA_P384_SHA384_FIXED,
        }
    }

    fn ecdsa_signing(self) -> Option<&'static EcdsaSigningAlgorithm> {
        match self {
            Algorithm::ES256 => Some(&signature::ECDSA_P256_SHA256_FIXED_SIGNING),
            Algorithm::ES384 => Some(&signature::ECDSA_P384_SHA384_FIXED_SIGNING),
            Algorithm::RS256 => None,
        }
    }

    /// DER of the AlgorithmIdentifier of a public key of this kind.
    fn algorithm_identifier(self) -> Vec<u8> {
        match self {
            Algorithm::RS256 => der::tlv(der::SEQUENCE, &[OID_RSA_ENCRYPTION, der::NULL].concat()),
            Algorithm::ES256 => der::tlv(der::SEQUENCE, &[OID_EC_PUBLIC_KEY, OID_P256].concat()),
            Algorithm::ES384 => der::tlv(der::SEQUENCE, &[OID_EC_PUBLIC_KEY, OID_P384].concat()),
        }
    }
}

// Encoded OIDs (tag and length included).
const OID_RSA_ENCRYPTION: &[u8] = &[0x06, 0x09, 0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x01];
const OID_EC_PUBLIC_KEY: &[u8] = &[0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01];
const OID_P256: &[u8] = &[0x06, 0x08, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07];
const OID_P384: &[u8] = &[0x06, 0x05, 0x2b, 0x81, 0x04, 0x00, 0x22];

/// A key tokens are verified with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PublicKey {
    /// Upstream's key ID (`kid`).
    pub key_id: String,
    pub alg: Algorithm,
    /// What ring verifies with: the PKCS#1 `RSAPublicKey` DER, or the uncompressed EC point.
    raw: Vec<u8>,
}

impl PublicKey {
    fn new(alg: Algorithm, raw: Vec<u8>) -> Self {
        let mut key = PublicKey { key_id: String::new(), alg, raw };
        key.key_id = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(Sha256::digest(key.spki_der()));
        key
    }

    /// The key as a JSON Web Key for signature checks (RFC 7517/7518), with the members
    /// upstream's JWKS documents carry (`use`, `kty`, `kid`, `alg`, `crv`, and `n`/`e` or
    /// `x`/`y`). `None` if the stored key cannot be read back (never for a parsed key).
    pub fn jwk(&self) -> Option<serde_json::Value> {
        use serde_json::json;
        let b64 = |b: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(b);
        match self.alg {
            Algorithm::RS256 => {
                let mut rsa = der::Reader::new(der::Reader::new(&self.raw).read(der::SEQUENCE)?);
                let strip = |i: &'_ [u8]| -> Vec<u8> {
                    let skip = i.iter().take_while(|b| **b == 0).count().min(i.len().saturating_sub(1));
                    i[skip..].to_vec()
                };
                let n = strip(rsa.read(der::INTEGER)?);
                let e = strip(rsa.read(der::INTEGER)?);
                Some(
                    json!({"use": "sig", "kty": "RSA", "kid": self.key_id, "alg": "RS256", "n": b64(&n), "e": b64(&e)}),
                )
            }
            Algorithm::ES256 | Algorithm::ES384 => {
                let (crv, size) = if self.alg == Algorithm::ES256 { ("P-256", 32) } else { ("P-384", 48) };
                let point = self.raw.strip_prefix(&[0x04])?;
                if point.len() != 2 * size {
                    return None;
                }
                let (x, y) = point.split_at(size);
                Some(
                    json!({"use": "sig", "kty": "EC", "kid": self.key_id, "crv": crv, "alg": self.alg.name(), "x": b64(x), "y": b64(y)}),
                )
            }
        }
    }

    /// Parses a DER `SubjectPublicKeyInfo` of an RSA or P-256/P-384 key.
    pub fn from_spki(spki: &[u8]) -> Option<Self> {
        let mut outer = der::Reader::new(der::Reader::new(spki).read(der::SEQUENCE)?);
        let mut alg_id = der::Reader::new(outer.read(der::SEQUENCE)?);
        let bits = outer.read(der::BIT_STRING)?;
        let (&unused, key) = bits.split_first()?;
        if unused != 0 {
            return None;
        }
        let oid = alg_id.read_raw(der::OID)?;
        let alg = if oid == OID_RSA_ENCRYPTION {
            Algorithm::RS256
        } else if oid == OID_EC_PUBLIC_KEY {
            match alg_id.read_raw(der::OID)? {
                c if c == OID_P256 => Algorithm::ES256,
                c if c == OID_P384 => Algorithm::ES384,
                _ => return None,
            }
        } else {
            return None;
        };
        Some(PublicKey::new(alg, key.to_vec()))
    }

    /// The DER PKIX encoding, as Go's `x509.MarshalPKIXPublicKey` writes it.
    pub fn spki_der(&self) -> Vec<u8> {
        let mut bits = vec![0u8];
        bits.extend_from_slice(&self.raw);
        let content = [self.alg.algorithm_identifier(), der::tlv(der::BIT_STRING, &bits)].concat();
        der::tlv(der::SEQUENCE, &content)
    }

    /// Whether `sig` is this key's `alg` signature of `msg`; a token claiming another
    /// algorithm than the key's never verifies.
    pub fn verify(&self, alg: Algorithm, msg: &[u8], sig: &[u8]) -> bool {
        alg == self.alg && UnparsedPublicKey::new(alg.verification(), &self.raw).verify(msg, sig).is_ok()
    }
}

enum Signer {
    Rsa(RsaKeyPair),
    Ecdsa(EcdsaKeyPair),
}

/// The private key tokens are signed with (`--service-account-signing-key-file`).
pub struct SigningKey {
    signer: Signer,
    pub public: PublicKey,
}

impl std::fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SigningKey").field("public", &self.public).finish_non_exhaustive()
    }
}

impl SigningKey {
    /// The first private key of a PEM file.
    pub fn from_file(path: &Path) -> Result<Self, KeyError> {
        let data = read(path)?;
        Self::from_pem(&data)
            .map_err(|e| KeyError::File { path: path.display().to_string(), message: e.to_string() })
    }

    /// The first private key among the PEM blocks of `pem`.
    pub fn from_pem(pem: &[u8]) -> Result<Self, KeyError> {
        for block in <(SectionKind, Vec<u8>)>::pem_slice_iter(pem) {
            let (kind, der) = block.map_err(|e| KeyError::Pem(e.to_string()))?;
            if let Some(key) = Self::from_der(kind, &der) {
                return Ok(key);
            }
        }
        Err(KeyError::NoPrivateKey)
    }

    fn from_der(kind: SectionKind, der: &[u8]) -> Option<Self> {
        match kind {
            SectionKind::RsaPrivateKey => RsaKeyPair::from_der(der).ok().map(Self::rsa),
            SectionKind::PrivateKey => RsaKeyPair::from_pkcs8(der)
                .ok()
                .map(Self::rsa)
                .or_else(|| Self::ecdsa_pkcs8(Algorithm::ES256, der))
                .or_else(|| Self::ecdsa_pkcs8(Algorithm::ES384, der)),
            // ring reads EC keys only as PKCS#8: wrap the SEC1 structure in one.
            SectionKind::EcPrivateKey => [Algorithm::ES256, Algorithm::ES384]
                .into_iter()
                .find_map(|alg| Self::ecdsa_pkcs8(alg, &sec1_to_pkcs8(alg, der))),
            _ => None,
        }
    }

    fn rsa(pair: RsaKeyPair) -> Self {
        let public = PublicKey::new(Algorithm::RS256, pair.public().as_ref().to_vec());
        SigningKey { signer: Signer::Rsa(pair), public }
    }

    fn ecdsa_pkcs8(alg: Algorithm, der: &[u8]) -> Option<Self> {
        let pair = EcdsaKeyPair::from_pkcs8(alg.ecdsa_signing()?, der, &SystemRandom::new()).ok()?;
        let public = PublicKey::new(alg, pair.public_key().as_ref().to_vec());
        Some(SigningKey { signer: Signer::Ecdsa(pair), public })
    }

    pub fn algorithm(&self) -> Algorithm {
        self.public.alg
    }

    pub fn key_id(&self) -> &str {
        &self.public.key_id
    }

    pub fn sign(&self, msg: &[u8]) -> Result<Vec<u8>, KeyError> {
        let rng = SystemRandom::new();
        match &self.signer {
            Signer::Rsa(pair) => {
                let mut sig = vec![0u8; pair.public().modulus_len()];
                pair.sign(&signature::RSA_PKCS1_SHA256, &rng, msg, &mut sig).map_err(|_| KeyError::Sign)?;
                Ok(sig)
            }
            Signer::Ecdsa(pair) => Ok(pair.sign(&rng, msg).map_err(|_| KeyError::Sign)?.as_ref().to_vec()),
        }
    }
}

/// Every public key of a PEM file (`--service-account-key-file`): public keys,
/// certificates' keys and private keys' public halves. Other blocks are skipped, as
/// upstream tolerates them; a file with no key at all is an error.
pub fn public_keys_from_file(path: &Path) -> Result<Vec<PublicKey>, KeyError> {
    let data = read(path)?;
    public_keys_from_pem(&data)
        .map_err(|e| KeyError::File { path: path.display().to_string(), message: e.to_string() })
}

pub fn public_keys_from_pem(pem: &[u8]) -> Result<Vec<PublicKey>, KeyError> {
    let mut keys = Vec::new();
    for block in <(SectionKind, Vec<u8>)>::pem_slice_iter(pem) {
        let (kind, der) = block.map_err(|e| KeyError::Pem(e.to_string()))?;
        let key = match kind {
            SectionKind::PublicKey => PublicKey::from_spki(&der),
            SectionKind::Certificate => x509_parser::parse_x509_certificate(&der)
                .ok()
                .and_then(|(_, cert)| PublicKey::from_spki(cert.public_key().raw)),
            other => SigningKey::from_der(other, &der).map(|k| k.public),
        };
        keys.extend(key);
    }
    if keys.is_empty() {
        return Err(KeyError::NoPublicKeys);
    }
    Ok(keys)
}

/// Key files are small; anything larger is not a key file.
const MAX_KEY_FILE: u64 = 1 << 20;

fn read(path: &Path) -> Result<Vec<u8>, KeyError> {
    use std::io::Read;
    let err = |source| KeyError::Read { path: path.display().to_string(), source };
    let mut data = Vec::new();
    std::fs::File::open(path).map_err(err)?.take(MAX_KEY_FILE).read_to_end(&mut data).map_err(err)?;
    Ok(data)
}

/// Wraps a SEC1 `ECPrivateKey` in a PKCS#8 `PrivateKeyInfo` for the curve `alg` uses.
fn sec1_to_pkcs8(alg: Algorithm, sec1: &[u8]) -> Vec<u8> {
    let content =
        [&[0x02, 0x01, 0x00][..], &alg.algorithm_identifier(), &der::tlv(der::OCTET_STRING, sec1)].concat();
    der::tlv(der::SEQUENCE, &content)
}

/// Just enough DER to read and write the key structures above.
mod der {
    pub const SEQUENCE: u8 = 0x30;
    pub const INTEGER: u8 = 0x02;
    pub const BIT_STRING: u8 = 0x03;
    pub const OCTET_STRING: u8 = 0x04;
    pub const OID: u8 = 0x06;
    pub const NULL: &[u8] = &[0x05, 0x00];

    pub fn tlv(tag: u8, content: &[u8]) -> Vec<u8> {
        let mut out = vec![tag];
        let n = content.len();
        if n < 0x80 {
            out.push(n as u8);
        } else {
            let bytes = n.to_be_bytes();
            let skip = bytes.iter().take_while(|b| **b == 0).count();
            out.push(0x80 | (bytes.len() - skip) as u8);
            out.extend_from_slice(&bytes[skip..]);
        }
        out.extend_from_slice(content);
        out
    }

    pub struct Reader<'a>(&'a [u8]);

    impl<'a> Reader<'a> {
        pub fn new(data: &'a [u8]) -> Self {
            Reader(data)
        }

        /// The content of the next element, which must carry `tag`.
        pub fn read(&mut self, tag: u8) -> Option<&'a [u8]> {
            let (content, _) = self.next(tag)?;
            Some(content)
        }

        /// The whole next element (tag and length included), which must carry `tag`.
        pub fn read_raw(&mut self, tag: u8) -> Option<&'a [u8]> {
            let (_, raw) = self.next(tag)?;
            Some(raw)
        }

        fn next(&mut self, tag: u8) -> Option<(&'a [u8], &'a [u8])> {
            let start = self.0;
            let (&t, rest) = start.split_first()?;
            if t != tag {
                return None;
            }
            let (&first, mut rest) = rest.split_first()?;
            let len = if first < 0x80 {
                usize::from(first)
            } else {
                let n = usize::from(first & 0x7f);
                if n == 0 || n > 4 || rest.len() < n {
                    return None;
                }
                let len = rest[..n].iter().fold(0usize, |acc, b| (acc << 8) | usize::from(*b));
                rest = &rest[n..];
                len
            };
            if rest.len() < len {
                return None;
            }
            let (content, after) = rest.split_at(len);
            let raw = &start[..start.len() - after.len()];
            self.0 = after;
            Some((content, raw))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RSA_PKCS8: &[u8] = include_bytes!("../testdata/sa-rsa.key");
    const RSA_PKCS1: &[u8] = include_bytes!("../testdata/sa-rsa-pkcs1.key");
    const RSA_PUB: &[u8] = include_bytes!("../testdata/sa-rsa.pub");
    const EC_SEC1: &[u8] = include_bytes!("../testdata/sa-ec-sec1.key");

    /// Key IDs computed with `openssl pkey -pubout -outform DER | openssl dgst -sha256`.
    const RSA_KID: &str = "jwLDc33fEU6Lc1vXE_fNWEtB7xm8JmFPex-0E3Jsvvs";
    const EC_KID: &str = "odeWQJHv2UGF09C9_bKjUiFbVpb_q0veb77xEAz8dKc";

    #[test]
    fn key_ids_match_upstream_derivation() {
        let pkcs8 = SigningKey::from_pem(RSA_PKCS8).unwrap();
        let pkcs1 = SigningKey::from_pem(RSA_PKCS1).unwrap();
        assert_eq!(pkcs8.key_id(), RSA_KID);
        assert_eq!(pkcs1.key_id(), RSA_KID);
        assert_eq!(pkcs8.algorithm(), Algorithm::RS256);
        let public = public_keys_from_pem(RSA_PUB).unwrap();
        assert_eq!(public.len(), 1);
        assert_eq!(public[0], pkcs8.public);

        let ec = SigningKey::from_pem(EC_SEC1).unwrap();
        assert_eq!((ec.key_id(), ec.algorithm()), (EC_KID, Algorithm::ES256));
        assert_eq!(public_keys_from_pem(EC_SEC1).unwrap()[0].key_id, EC_KID);
    }

    #[test]
    fn signatures_verify_only_with_the_right_key_and_algorithm() {
        let rsa = SigningKey::from_pem(RSA_PKCS1).unwrap();
        let sig = rsa.sign(b"payload").unwrap();
        assert!(rsa.public.verify(Algorithm::RS256, b"payload", &sig));
        assert!(!rsa.public.verify(Algorithm::RS256, b"payloaD", &sig));
        assert!(!rsa.public.verify(Algorithm::ES256, b"payload", &sig));

        let generated = rcgen::KeyPair::generate().unwrap();
        let ec = SigningKey::from_pem(generated.serialize_pem().as_bytes()).unwrap();
        assert_eq!(ec.algorithm(), Algorithm::ES256);
        let spki = public_keys_from_pem(generated.public_key_pem().as_bytes()).unwrap().remove(0);
        assert_eq!(spki, ec.public);
        let sig = ec.sign(b"x").unwrap();
        assert!(spki.verify(Algorithm::ES256, b"x", &sig));
        assert!(!PublicKey::from_spki(&rsa.public.spki_der()).unwrap().verify(Algorithm::ES256, b"x", &sig));
    }

    /// Expected values read with `openssl rsa -pubin -text` / `openssl ec -text`.
    #[test]
    fn jwks_carry_the_public_parameters() {
        let rsa = public_keys_from_pem(RSA_PUB).unwrap().remove(0).jwk().unwrap();
        assert_eq!(
            (rsa["kty"].as_str(), rsa["alg"].as_str(), rsa["use"].as_str()),
            (Some("RSA"), Some("RS256"), Some("sig"))
        );
        assert_eq!(rsa["kid"], RSA_KID);
        assert_eq!(rsa["e"], "AQAB");
        let n = rsa["n"].as_str().unwrap();
        assert!(n.starts_with("tReG42-vYe2HuAOq3jT941NorAvNKQPeudAWSvTm"), "{n}");
        assert_eq!(n.len(), 342, "a 2048-bit modulus without its sign byte");

        let ec = SigningKey::from_pem(EC_SEC1).unwrap().public.jwk().unwrap();
        assert_eq!(
            ec,
            serde_json::json!({"use": "sig", "kty": "EC", "kid": EC_KID, "crv": "P-256", "alg": "ES256",
                "x": "1Ca7it2JIw3YZduETZ7KXVazlONFC-UQ5pYi1-XXnWo", "y": "-3pJv1k6f3cHywTqtXEvB_AcUCnOGm114Rzo86gZO6k"})
        );
    }

    #[test]
    fn files_without_keys_are_refused() {
        assert!(matches!(SigningKey::from_pem(RSA_PUB), Err(KeyError::NoPrivateKey)));
        assert!(matches!(public_keys_from_pem(b"nothing here"), Err(KeyError::NoPublicKeys)));
        assert!(SigningKey::from_file(Path::new("/nonexistent/key")).is_err());
    }
}
