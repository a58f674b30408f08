//! The `aescbc` and `aesgcm` providers, byte-compatible with upstream's
//! (`storage/value/encrypt/aes`): a value written by one server reads back in the other.
//!
//! - AES-CBC: a random 16-byte IV, then the PKCS#7-padded ciphertext. Nothing binds it to
//!   its key in etcd.
//! - AES-GCM: a random 12-byte nonce, then ciphertext and 16-byte tag; the etcd key is the
//!   additional authenticated data, so a value copied under another key fails to open.
//!   Random nonces mean a key must be rotated well before 2^32 writes.
//!
//! Keys may be 16, 24 or 32 bytes (AES-128/192/256), as upstream. ring has no AES-192, so
//! both modes use the RustCrypto implementations.

use aes::{Aes128, Aes192, Aes256};
use aes_gcm::aead::consts::U12;
use aes_gcm::aead::{Aead, KeyInit, Payload};
use aes_gcm::{Aes128Gcm, Aes256Gcm, AesGcm, Nonce};
use cbc::cipher::block_padding::{NoPadding, Pkcs7};
use cbc::cipher::{BlockDecryptMut, BlockEncryptMut, KeyIvInit};

use super::transformer::{Transformer, fill_random};

/// The key sizes AES accepts.
pub const KEY_SIZES: [usize; 3] = [16, 24, 32];

const BLOCK: usize = 16;
const GCM_NONCE: usize = 12;
const TOO_SHORT: &str = "the stored data was shorter than the required size";

type Aes192Gcm = AesGcm<Aes192, U12>;

/// AES-CBC with PKCS#7 padding.
pub struct Cbc {
    key: Vec<u8>,
}

impl Cbc {
    pub fn new(key: &[u8]) -> Result<Self, String> {
        if !KEY_SIZES.contains(&key.len()) {
            return Err(format!("crypto/aes: invalid key size {}", key.len()));
        }
        Ok(Self { key: key.to_vec() })
    }
}

impl Transformer for Cbc {
    fn to_storage(&self, data: &[u8], _aad: &[u8]) -> Result<Vec<u8>, String> {
        let mut iv = [0u8; BLOCK];
        fill_random(&mut iv)?;
        let bad = |_| "invalid key or IV length".to_string();
        let ct = match self.key.len() {
            16 => cbc::Encryptor::<Aes128>::new_from_slices(&self.key, &iv)
                .map_err(bad)?
                .encrypt_padded_vec_mut::<Pkcs7>(data),
            24 => cbc::Encryptor::<Aes192>::new_from_slices(&self.key, &iv)
                .map_err(bad)?
                .encrypt_padded_vec_mut::<Pkcs7>(data),
            _ => cbc::Encryptor::<Aes256>::new_from_slices(&self.key, &iv)
                .map_err(bad)?
                .encrypt_padded_vec_mut::<Pkcs7>(data),
        };
        Ok([iv.as_slice(), &ct].concat())
    }

    /// Decrypts, then checks the padding itself to report upstream's errors.
    fn from_storage(&self, data: &[u8], _aad: &[u8]) -> Result<Vec<u8>, String> {
        if data.len() < BLOCK {
            return Err(TOO_SHORT.into());
        }
        let (iv, ct) = data.split_at(BLOCK);
        if ct.len() % BLOCK != 0 {
            return Err("the stored data is not a multiple of the block size".into());
        }
        let bad = |_| "invalid key or IV length".to_string();
        let unpad = |_| "the stored data is not a multiple of the block size".to_string();
        let mut out = match self.key.len() {
            16 => cbc::Decryptor::<Aes128>::new_from_slices(&self.key, iv)
                .map_err(bad)?
                .decrypt_padded_vec_mut::<NoPadding>(ct)
                .map_err(unpad)?,
            24 => cbc::Decryptor::<Aes192>::new_from_slices(&self.key, iv)
                .map_err(bad)?
                .decrypt_padded_vec_mut::<NoPadding>(ct)
                .map_err(unpad)?,
            _ => cbc::Decryptor::<Aes256>::new_from_slices(&self.key, iv)
                .map_err(bad)?
                .decrypt_padded_vec_mut::<NoPadding>(ct)
                .map_err(unpad)?,
        };
        let pad = out.last().copied().map_or(0, usize::from);
        if pad == 0 || pad > out.len() {
            return Err("invalid PKCS7 data (empty or not padded)".into());
        }
        let size = out.len() - pad;
        if out[size..].iter().any(|&b| usize::from(b) != pad) {
            return Err("invalid padding on input".into());
        }
        out.truncate(size);
        Ok(out)
    }
}

/// AES-GCM with a random 96-bit nonce.
pub enum Gcm {
    A128(Box<Aes128Gcm>),
    A192(Box<Aes192Gcm>),
    A256(Box<Aes256Gcm>),
}

impl Gcm {
    pub fn new(key: &[u8]) -> Result<Self, String> {
        let bad = |_| format!("crypto/aes: invalid key size {}", key.len());
        Ok(match key.len() {
            16 => Gcm::A128(Box::new(Aes128Gcm::new_from_slice(key).map_err(bad)?)),
            24 => Gcm::A192(Box::new(Aes192Gcm::new_from_slice(key).map_err(bad)?)),
            32 => Gcm::A256(Box::new(Aes256Gcm::new_from_slice(key).map_err(bad)?)),
            n => return Err(format!("crypto/aes: invalid key size {n}")),
        })
    }
}

impl Transformer for Gcm {
    fn to_storage(&self, data: &[u8], aad: &[u8]) -> Result<Vec<u8>, String> {
        let mut nonce = [0u8; GCM_NONCE];
        fill_random(&mut nonce)?;
        let n = Nonce::from_slice(&nonce);
        let p = Payload { msg: data, aad };
        let sealed = match self {
            Gcm::A128(c) => c.encrypt(n, p),
            Gcm::A192(c) => c.encrypt(n, p),
            Gcm::A256(c) => c.encrypt(n, p),
        }
        .map_err(|_| "failed to encrypt with AES-GCM".to_string())?;
        Ok([nonce.as_slice(), &sealed].concat())
    }

    fn from_storage(&self, data: &[u8], aad: &[u8]) -> Result<Vec<u8>, String> {
        if data.len() < GCM_NONCE {
            return Err(TOO_SHORT.into());
        }
        let (nonce, sealed) = data.split_at(GCM_NONCE);
        let n = Nonce::from_slice(nonce);
        let p = Payload { msg: sealed, aad };
        match self {
            Gcm::A128(c) => c.decrypt(n, p),
            Gcm::A192(c) => c.decrypt(n, p),
            Gcm::A256(c) => c.decrypt(n, p),
        }
        // Go's crypto/cipher wording.
        .map_err(|_| "cipher: message authentication failed".to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(n: usize, fill: u8) -> Vec<u8> {
        vec![fill; n]
    }

    #[test]
    fn cbc_round_trips_every_key_size() {
        for n in KEY_SIZES {
            let t = Cbc::new(&key(n, 1)).unwrap();
            for msg in
                [&b""[..], b"x", b"0123456789abcdef", b"{\"kind\":\"Secret\",\"data\":{\"a\":\"Yg==\"}}"]
            {
                let ct = t.to_storage(msg, b"/k").unwrap();
                // IV, then whole blocks of padded ciphertext.
                assert_eq!(ct.len(), BLOCK + (msg.len() / BLOCK + 1) * BLOCK);
                assert_eq!(t.from_storage(&ct, b"/other").unwrap(), msg, "key size {n}");
            }
        }
        assert!(Cbc::new(&key(20, 1)).is_err());
    }

    #[test]
    fn cbc_fails_cleanly() {
        let t = Cbc::new(&key(32, 1)).unwrap();
        let ct = t.to_storage(b"secret value", b"").unwrap();
        // A different key decrypts to garbage whose padding does not check out.
        let other = Cbc::new(&key(32, 2)).unwrap();
        assert!(other.from_storage(&ct, b"").is_err());
        assert_eq!(t.from_storage(&ct[..10], b""), Err(TOO_SHORT.into()));
        assert_eq!(
            t.from_storage(&ct[..BLOCK + 5], b""),
            Err("the stored data is not a multiple of the block size".into())
        );
        assert_eq!(t.from_storage(&ct[..BLOCK], b""), Err("invalid PKCS7 data (empty or not padded)".into()));
    }

    /// Standard CBC (the NIST vector's first block) with the IV stored in front, as Go's
    /// `cipher.NewCBCEncrypter` output is stored upstream.
    #[test]
    fn cbc_matches_a_known_vector() {
        // NIST SP 800-38A F.2.1 (CBC-AES128.Encrypt), first block, with the IV in front
        // and a full block of padding after it.
        let k = hex("2b7e151628aed2a6abf7158809cf4f3c");
        let iv = hex("000102030405060708090a0b0c0d0e0f");
        let pt = hex("6bc1bee22e409f96e93d7e117393172a");
        let mut stored = iv.clone();
        stored.extend(hex("7649abac8119b246cee98e9b12e9197d"));
        // The padding block, encrypted in the same chain.
        let t = Cbc::new(&k).unwrap();
        let full =
            cbc::Encryptor::<Aes128>::new_from_slices(&k, &iv).unwrap().encrypt_padded_vec_mut::<Pkcs7>(&pt);
        assert_eq!(&full[..16], &stored[16..]);
        stored.extend_from_slice(&full[16..]);
        assert_eq!(t.from_storage(&stored, b"").unwrap(), pt);
    }

    #[test]
    fn gcm_round_trips_and_binds_the_key() {
        for n in KEY_SIZES {
            let t = Gcm::new(&key(n, 7)).unwrap();
            let ct = t.to_storage(b"hello", b"/registry/secrets/default/s").unwrap();
            assert_eq!(ct.len(), GCM_NONCE + 5 + 16);
            assert_eq!(t.from_storage(&ct, b"/registry/secrets/default/s").unwrap(), b"hello");
            // Moved to another key, the value does not authenticate.
            assert_eq!(
                t.from_storage(&ct, b"/registry/secrets/default/t"),
                Err("cipher: message authentication failed".into())
            );
        }
        let a = Gcm::new(&key(32, 7)).unwrap();
        let b = Gcm::new(&key(32, 8)).unwrap();
        let ct = a.to_storage(b"hello", b"k").unwrap();
        assert!(b.from_storage(&ct, b"k").is_err());
        assert_eq!(a.from_storage(&ct[..5], b"k"), Err(TOO_SHORT.into()));
        assert!(Gcm::new(&key(8, 1)).is_err());
        // Two writes of the same value differ (random nonces).
        assert_ne!(a.to_storage(b"x", b"k").unwrap(), a.to_storage(b"x", b"k").unwrap());
    }

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
    }
}
