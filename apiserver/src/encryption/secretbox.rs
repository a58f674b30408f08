//! The `secretbox` provider (upstream's `storage/value/encrypt/secretbox`): NaCl's
//! XSalsa20-Poly1305 with a 32-byte key. Stored as a random 24-byte nonce, then the box
//! (16-byte Poly1305 tag, then the ciphertext), exactly Go's `secretbox.Seal` output.
//! Upstream does not bind the value to its etcd key here, so neither do we.

use crypto_secretbox::aead::{Aead, KeyInit};
use crypto_secretbox::{Nonce, XSalsa20Poly1305};

use super::transformer::{Transformer, fill_random};

/// The only key size secretbox accepts.
pub const KEY_SIZE: usize = 32;
const NONCE: usize = 24;
const OVERHEAD: usize = 16;

pub struct Secretbox {
    cipher: XSalsa20Poly1305,
}

impl Secretbox {
    pub fn new(key: &[u8]) -> Result<Self, String> {
        if key.len() != KEY_SIZE {
            return Err(format!("expected key size 32 for secretbox provider, got {}", key.len()));
        }
        let cipher =
            XSalsa20Poly1305::new_from_slice(key).map_err(|_| "invalid secretbox key".to_string())?;
        Ok(Self { cipher })
    }
}

impl Transformer for Secretbox {
    fn to_storage(&self, data: &[u8], _aad: &[u8]) -> Result<Vec<u8>, String> {
        let mut nonce = [0u8; NONCE];
        fill_random(&mut nonce)?;
        let sealed = self
            .cipher
            .encrypt(Nonce::from_slice(&nonce), data)
            .map_err(|_| "failed to encrypt with secretbox".to_string())?;
        Ok([nonce.as_slice(), &sealed].concat())
    }

    fn from_storage(&self, data: &[u8], _aad: &[u8]) -> Result<Vec<u8>, String> {
        if data.len() < OVERHEAD + NONCE {
            return Err("the stored data was shorter than the required size".into());
        }
        let (nonce, sealed) = data.split_at(NONCE);
        self.cipher
            .decrypt(Nonce::from_slice(nonce), sealed)
            // Upstream's (odd) wording for a box that does not open.
            .map_err(|_| "output array was not large enough for encryption".to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_wrong_key() {
        let t = Secretbox::new(&[3u8; 32]).unwrap();
        let ct = t.to_storage(b"{\"data\":1}", b"").unwrap();
        assert_eq!(ct.len(), NONCE + OVERHEAD + 10);
        assert_eq!(t.from_storage(&ct, b"").unwrap(), b"{\"data\":1}");
        let other = Secretbox::new(&[4u8; 32]).unwrap();
        assert_eq!(
            other.from_storage(&ct, b""),
            Err("output array was not large enough for encryption".into())
        );
        assert!(t.from_storage(&ct[..30], b"").is_err());
        assert!(Secretbox::new(&[0u8; 16]).is_err());
    }

    /// Go's `secretbox.Seal` writes the 16-byte Poly1305 tag before the ciphertext; the
    /// stored value must have the same layout to be read by the other server.
    #[test]
    fn tag_comes_before_the_ciphertext() {
        use crypto_secretbox::aead::AeadInPlace;
        let key = hex("1b27556473e985d462cd51197a9a46c76009549eac6474f206c4ee0844f68389");
        let nonce = hex("69696ee955b62b73cd62bda875fc73d68219e0036b7a0b37");
        let t = Secretbox::new(&key).unwrap();
        let msg = b"hello world";
        let boxed = t.cipher.encrypt(Nonce::from_slice(&nonce), &msg[..]).unwrap();
        let mut detached = msg.to_vec();
        let tag = t.cipher.encrypt_in_place_detached(Nonce::from_slice(&nonce), b"", &mut detached).unwrap();
        assert_eq!(&boxed[..OVERHEAD], tag.as_slice());
        assert_eq!(&boxed[OVERHEAD..], detached.as_slice());
        let mut stored = nonce.clone();
        stored.extend_from_slice(&boxed);
        assert_eq!(t.from_storage(&stored, b"").unwrap(), msg);
        let last = stored.len() - 1;
        stored[last] ^= 1;
        assert!(t.from_storage(&stored, b"").is_err());
    }

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
    }
}
