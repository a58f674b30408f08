//! A throwaway PKI for TLS tests: a CA, a server certificate for 127.0.0.1 and
//! localhost, and a client certificate, as PEM files in a tempdir.

use std::path::PathBuf;

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
    KeyUsagePurpose,
};

use crate::{ClientTls, ServerTls};

pub struct Pki {
    pub dir: tempfile::TempDir,
    pub server: ServerTls,
}

impl Pki {
    /// Certificates for a server on `ip` (plus localhost).
    pub fn new(ip: std::net::Ipv4Addr) -> Pki {
        Self::for_ips(&[ip])
    }

    /// One server certificate valid on every address in `ips` (plus localhost), as a set of
    /// members can share for their peer and client ports.
    pub fn for_ips(ips: &[std::net::Ipv4Addr]) -> Pki {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("params");
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params.distinguished_name.push(DnType::CommonName, "e2e test CA");
        ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::DigitalSignature];
        let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().expect("key")).expect("CA");
        let leaf = |names: Vec<String>, cn: &str, usage: Vec<ExtendedKeyUsagePurpose>| {
            let mut params = CertificateParams::new(names).expect("params");
            params.distinguished_name.push(DnType::CommonName, cn);
            params.extended_key_usages = usage;
            let key = KeyPair::generate().expect("key");
            let cert = params.signed_by(&key, &*ca).expect("sign");
            (cert.pem(), key.serialize_pem())
        };
        let mut names: Vec<String> = ips.iter().map(|ip| ip.to_string()).collect();
        names.extend(["localhost".to_string(), "127.0.0.1".to_string()]);
        let (server_crt, server_key) = leaf(
            names,
            "etcd-server",
            vec![ExtendedKeyUsagePurpose::ServerAuth, ExtendedKeyUsagePurpose::ClientAuth],
        );
        let (client_crt, client_key) = leaf(vec![], "root", vec![ExtendedKeyUsagePurpose::ClientAuth]);
        let write = |name: &str, pem: &str| -> PathBuf {
            let p = dir.path().join(name);
            std::fs::write(&p, pem).expect("write pem");
            p
        };
        let ca_path = write("ca.crt", &ca.pem());
        let server = ServerTls {
            cert: write("server.crt", &server_crt),
            key: write("server.key", &server_key),
            ca: ca_path.clone(),
            client: ClientTls {
                ca: ca_path,
                cert: write("client.crt", &client_crt),
                key: write("client.key", &client_key),
            },
        };
        Pki { dir, server }
    }
}
