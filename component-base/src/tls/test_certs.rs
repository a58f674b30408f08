//! A throwaway PKI for tests: one CA, a server certificate for localhost and
//! 127.0.0.1, and a client certificate, written as PEM files in a tempdir.

use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
    KeyUsagePurpose,
};
use tempfile::TempDir;

pub(crate) struct TestPki {
    pub dir: TempDir,
    pub ca: PathBuf,
    pub server_cert: PathBuf,
    pub server_key: PathBuf,
    pub client_cert: PathBuf,
    pub client_key: PathBuf,
    /// The client key's PKCS#8 DER, for tests that re-wrap it.
    pub client_key_pkcs8: Vec<u8>,
}

impl TestPki {
    pub fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params.distinguished_name.push(DnType::CommonName, "component-base test CA");
        ca_params.key_usages =
            vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
        let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().unwrap()).unwrap();

        let leaf = |names: Vec<String>, usage: ExtendedKeyUsagePurpose| {
            let mut params = CertificateParams::new(names).unwrap();
            params.extended_key_usages = vec![usage];
            let key = KeyPair::generate().unwrap();
            let cert = params.signed_by(&key, &*ca).unwrap();
            (cert, key)
        };
        let (server, server_key) =
            leaf(vec!["localhost".into(), "127.0.0.1".into()], ExtendedKeyUsagePurpose::ServerAuth);
        let (client, client_key) = leaf(vec!["etcd-client".into()], ExtendedKeyUsagePurpose::ClientAuth);

        let write = |name: &str, pem: String| {
            let path = dir.path().join(name);
            std::fs::write(&path, pem).unwrap();
            path
        };
        TestPki {
            ca: write("ca.crt", ca.pem()),
            server_cert: write("server.crt", server.pem()),
            server_key: write("server.key", server_key.serialize_pem()),
            client_cert: write("client.crt", client.pem()),
            client_key: write("client.key", client_key.serialize_pem()),
            client_key_pkcs8: client_key.serialize_der(),
            dir,
        }
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
}

/// Writes `der` as one PEM block labelled `label` to `path`.
pub(crate) fn write_pem(path: &Path, label: &str, der: &[u8]) {
    let body = base64(der);
    let mut pem = format!("-----BEGIN {label}-----\n");
    for line in body.as_bytes().chunks(64) {
        pem.push_str(std::str::from_utf8(line).unwrap());
        pem.push('\n');
    }
    pem.push_str(&format!("-----END {label}-----\n"));
    std::fs::write(path, pem).unwrap();
}

fn base64(data: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in data.chunks(3) {
        let b = [chunk[0], *chunk.get(1).unwrap_or(&0), *chunk.get(2).unwrap_or(&0)];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// The SEC1 `ECPrivateKey` inside a PKCS#8 `PrivateKeyInfo`: the content of its
/// third element, an OCTET STRING.
pub(crate) fn sec1_from_pkcs8(pkcs8: &[u8]) -> Vec<u8> {
    let (_, outer) = der_element(pkcs8);
    let (rest, _version) = der_element(outer);
    let (rest, _algorithm) = der_element(rest);
    let (_, private_key) = der_element(rest);
    private_key.to_vec()
}

/// Splits one DER element off `input`: (what follows it, its content).
fn der_element(input: &[u8]) -> (&[u8], &[u8]) {
    let first_len = input[1];
    let (len, header) = if first_len & 0x80 == 0 {
        (usize::from(first_len), 2)
    } else {
        let n = usize::from(first_len & 0x7f);
        let len = input[2..2 + n].iter().fold(0usize, |acc, b| (acc << 8) | usize::from(*b));
        (len, 2 + n)
    };
    (&input[header + len..], &input[header..header + len])
}
