//! Identities for authentication tests: a test CA that issues client certificates (the
//! subject's CN is the user, its O the group, as kube-apiserver's `--client-ca-file`
//! authenticator reads them) and serving certificates, and kubeconfigs that point real
//! kubectl at a [`KubeApiserver`] as one of those identities.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
    KeyUsagePurpose,
};

use crate::apiserver::{KUBECTL, KubeApiserver};

/// A certificate authority living in a tempdir; `cert` is its PEM certificate, the file
/// `--client-ca-file` takes and a webhook's `caBundle` holds.
pub struct TestCa {
    issuer: CertifiedIssuer<'static, KeyPair>,
    pub dir: tempfile::TempDir,
    pub cert: PathBuf,
}

/// A client certificate and its key, as PEM files.
#[derive(Clone, Debug)]
pub struct ClientCert {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// A serving certificate (chained to a [`TestCa`]) in both encodings: DER for rustls in
/// the test, PEM for files.
pub struct ServingCert {
    pub cert_der: Vec<u8>,
    /// PKCS#8.
    pub key_der: Vec<u8>,
    pub cert_pem: String,
    pub key_pem: String,
}

impl TestCa {
    pub fn new(name: &str) -> TestCa {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::DigitalSignature];
        let issuer = CertifiedIssuer::self_signed(params, KeyPair::generate().expect("key")).expect("CA");
        let cert = dir.path().join("ca.crt");
        std::fs::write(&cert, issuer.pem()).expect("write CA");
        TestCa { issuer, dir, cert }
    }

    /// The CA certificate, PEM.
    pub fn pem(&self) -> String {
        self.issuer.pem()
    }

    /// A client certificate for `user` in `group` (the subject's O; rcgen's distinguished
    /// names hold one value per attribute type, so at most one group).
    pub fn client_cert(&self, user: &str, group: Option<&str>) -> ClientCert {
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
        params.distinguished_name.push(DnType::CommonName, user);
        if let Some(g) = group {
            params.distinguished_name.push(DnType::OrganizationName, g);
        }
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature, KeyUsagePurpose::KeyEncipherment];
        let key = KeyPair::generate().expect("key");
        let cert = params.signed_by(&key, &*self.issuer).expect("sign");
        let file = user.replace(':', "_");
        let cert_path = self.dir.path().join(format!("{file}.crt"));
        let key_path = self.dir.path().join(format!("{file}.key"));
        std::fs::write(&cert_path, cert.pem()).expect("write cert");
        std::fs::write(&key_path, key.serialize_pem()).expect("write key");
        ClientCert { cert: cert_path, key: key_path }
    }

    /// A client certificate made the way many guides make one: `openssl req` for a key and
    /// CSR, then `openssl x509 -req -CA ...` without an extensions file, which gives an
    /// X.509 v1 certificate (no extensions at all).
    pub fn openssl_client_cert(&self, user: &str, group: Option<&str>) -> ClientCert {
        let dir = self.dir.path();
        let ca_key = dir.join("ca.key");
        std::fs::write(&ca_key, self.issuer.key().serialize_pem()).expect("write CA key");
        let file = format!("openssl-{}", user.replace(':', "_"));
        let (key, csr, cert) = (
            dir.join(format!("{file}.key")),
            dir.join(format!("{file}.csr")),
            dir.join(format!("{file}.crt")),
        );
        let subject = match group {
            Some(g) => format!("/CN={user}/O={g}"),
            None => format!("/CN={user}"),
        };
        let run = |c: &mut Command| {
            let out = c.output().expect("openssl");
            assert!(out.status.success(), "openssl: {}", String::from_utf8_lossy(&out.stderr));
        };
        run(Command::new("openssl")
            .args(["req", "-newkey", "rsa:2048", "-nodes", "-subj", &subject, "-keyout"])
            .arg(&key)
            .arg("-out")
            .arg(&csr));
        run(Command::new("openssl")
            .args(["x509", "-req", "-days", "1", "-CAcreateserial", "-in"])
            .arg(&csr)
            .arg("-CA")
            .arg(&self.cert)
            .arg("-CAkey")
            .arg(&ca_key)
            .arg("-out")
            .arg(&cert));
        ClientCert { cert, key }
    }

    /// A serving certificate for `ip` (an IP SAN, as a webhook's `https://<ip>:<port>` URL
    /// needs).
    pub fn serving_cert(&self, ip: IpAddr) -> ServingCert {
        self.serving_cert_for(&ip.to_string())
    }

    /// A serving certificate for `san`, a DNS name or an IP (`<svc>.<ns>.svc` for a server
    /// reached through a Service).
    pub fn serving_cert_for(&self, san: &str) -> ServingCert {
        let mut params = CertificateParams::new(vec![san.to_string()]).expect("params");
        params.distinguished_name.push(DnType::CommonName, "e2e webhook");
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let key = KeyPair::generate().expect("key");
        let cert = params.signed_by(&key, &*self.issuer).expect("sign");
        ServingCert {
            cert_der: cert.der().to_vec(),
            key_der: key.serialize_der(),
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        }
    }
}

/// How a kubeconfig's user authenticates.
pub enum Credential<'a> {
    Token(&'a str),
    Cert(&'a ClientCert),
}

/// A kubeconfig for one identity, and kubectl runs with it.
pub struct Kubeconfig {
    pub path: PathBuf,
}

impl Kubeconfig {
    /// Writes `<name>.kubeconfig` into `dir`, pointing at `api` (trusting its serving
    /// certificate) as `cred`.
    pub fn write(api: &KubeApiserver, dir: &Path, name: &str, cred: Credential<'_>) -> Kubeconfig {
        let user = match cred {
            Credential::Token(t) => format!("  user:\n    token: {t}\n"),
            Credential::Cert(c) => {
                format!(
                    "  user:\n    client-certificate: {}\n    client-key: {}\n",
                    c.cert.display(),
                    c.key.display()
                )
            }
        };
        let text = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- cluster:\n    server: {}\n    certificate-authority: {}\n  name: e2e\ncontexts:\n- context:\n    cluster: e2e\n    user: {name}\n  name: e2e\ncurrent-context: e2e\nusers:\n- name: {name}\n{user}",
            api.url(),
            api.dir.path().join("certs").join("apiserver.crt").display(),
        );
        let path = dir.join(format!("{}.kubeconfig", name.replace(':', "_")));
        std::fs::write(&path, text).expect("write kubeconfig");
        Kubeconfig { path }
    }

    pub fn kubectl_cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new(KUBECTL);
        c.env("KUBECONFIG", &self.path).env_remove("KUBERNETES_SERVICE_HOST").args(args);
        c
    }

    pub fn kubectl(&self, args: &[&str]) -> Output {
        self.kubectl_cmd(args).stdin(Stdio::null()).output().expect("running kubectl")
    }

    /// Runs kubectl and returns stdout, failing the test (with stderr) if it fails.
    pub fn kubectl_ok(&self, args: &[&str]) -> String {
        let out = self.kubectl(args);
        assert!(
            out.status.success(),
            "kubectl {args:?} ({}) failed: {}\n{}",
            self.path.display(),
            String::from_utf8_lossy(&out.stderr),
            String::from_utf8_lossy(&out.stdout)
        );
        String::from_utf8(out.stdout).expect("utf-8 output")
    }

    /// Runs kubectl expecting failure; returns stderr, failing the test if it succeeds.
    pub fn kubectl_err(&self, args: &[&str]) -> String {
        let out = self.kubectl(args);
        assert!(
            !out.status.success(),
            "kubectl {args:?} ({}) succeeded, expected a failure:\n{}",
            self.path.display(),
            String::from_utf8_lossy(&out.stdout)
        );
        String::from_utf8_lossy(&out.stderr).into_owned()
    }
}

/// A 2048-bit RSA key pair made with openssl in `dir`: (`<name>.key` PKCS#8 private key,
/// `<name>.pub` public key), as `--service-account-signing-key-file` and
/// `--service-account-key-file` take them.
pub fn rsa_key(dir: &Path, name: &str) -> (PathBuf, PathBuf) {
    let key = dir.join(format!("{name}.key"));
    let public = dir.join(format!("{name}.pub"));
    let ok = |c: &mut Command| {
        let out = c.output().expect("openssl");
        assert!(out.status.success(), "openssl: {}", String::from_utf8_lossy(&out.stderr));
    };
    ok(Command::new("openssl")
        .args(["genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048", "-out"])
        .arg(&key));
    ok(Command::new("openssl").args(["pkey", "-pubout", "-in"]).arg(&key).arg("-out").arg(&public));
    (key, public)
}
