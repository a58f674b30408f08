//! Client certificates (`--client-ca-file`, upstream's `request/x509` authenticator).
//!
//! As upstream (Go's `tls.RequestClientCert`), the TLS handshake asks for a certificate
//! but neither requires one nor judges its chain: [`RequestClientCert`] only checks that
//! the client holds the key of the certificate it sent. The chain is verified here, per
//! request, by [`ClientCertAuthenticator`], so a certificate from an unknown CA gets an
//! HTTP 401 rather than a failed handshake, and a client with a bad certificate can
//! still authenticate with a bearer token.
//!
//! The user is the leaf's subject CommonName, its groups the subject Organizations, with
//! upstream's `authentication.kubernetes.io/credential-id` `X509SHA256=<hex digest>`.

use std::path::Path;
use std::sync::Arc;

use rustls::client::danger::HandshakeSignatureValid;
use rustls::crypto::{CryptoProvider, verify_tls12_signature, verify_tls13_signature};
use rustls::pki_types::{CertificateDer, UnixTime};
use rustls::server::WebPkiClientVerifier;
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{DigitallySignedStruct, DistinguishedName, RootCertStore, SignatureScheme};
use sha2::{Digest, Sha256};

use super::serviceaccount::claims::CREDENTIAL_ID_KEY;
use super::{Authenticated, User, Verdict};

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn load_roots(ca_file: &Path) -> Result<RootCertStore, String> {
    component_base::tls::load_root_store(ca_file).map_err(|e| format!("--client-ca-file: {e}"))
}

/// The handshake side: offers client authentication without requiring it, accepts any
/// chain, and verifies the handshake signature so that presenting a certificate proves
/// possession of its key.
#[derive(Debug)]
pub struct RequestClientCert {
    /// The CA subjects, sent as hints so clients with several certificates pick one
    /// the server can verify.
    hints: Vec<DistinguishedName>,
    provider: Arc<CryptoProvider>,
}

impl RequestClientCert {
    pub fn from_file(ca_file: &Path) -> Result<Self, String> {
        Self::from_files(&[ca_file])
    }

    /// Hints from several CA files (`--client-ca-file` and `--requestheader-client-ca-file`).
    pub fn from_files(ca_files: &[&Path]) -> Result<Self, String> {
        let mut hints = Vec::new();
        for f in ca_files {
            for h in load_roots(f)?.subjects() {
                if !hints.iter().any(|x: &DistinguishedName| x.as_ref() == h.as_ref()) {
                    hints.push(h);
                }
            }
        }
        Ok(RequestClientCert { hints, provider: provider() })
    }
}

impl ClientCertVerifier for RequestClientCert {
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        false
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &self.hints
    }

    fn verify_client_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        // Judged per request by ClientCertAuthenticator.
        Ok(ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(message, cert, dss, &self.provider.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(message, cert, dss, &self.provider.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider.signature_verification_algorithms.supported_schemes()
    }
}

/// The request side: verifies a connection's certificate chain against the client CA
/// (validity, client-auth usage, chain to a root) and maps it to a user.
pub struct ClientCertAuthenticator {
    verifier: Arc<dyn ClientCertVerifier>,
}

impl ClientCertAuthenticator {
    pub fn from_file(ca_file: &Path) -> Result<Self, String> {
        Self::new(load_roots(ca_file)?)
    }

    pub fn new(roots: RootCertStore) -> Result<Self, String> {
        let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider())
            .build()
            .map_err(|e| format!("--client-ca-file: {e}"))?;
        Ok(ClientCertAuthenticator { verifier })
    }

    /// Judges the chain a client presented (leaf first) at the current time.
    pub fn authenticate(&self, chain: &[CertificateDer<'static>]) -> Verdict {
        self.authenticate_at(chain, UnixTime::now())
    }

    pub fn authenticate_at(&self, chain: &[CertificateDer<'static>], now: UnixTime) -> Verdict {
        let Some((leaf, intermediates)) = chain.split_first() else { return Verdict::NotMine };
        if let Err(e) = self.verifier.verify_client_cert(leaf, intermediates, now) {
            return Verdict::Rejected(format!("verifying certificate failed: {e}"));
        }
        match user_of(leaf) {
            Some(user) => Verdict::Authenticated(Authenticated { user, audiences: Vec::new() }),
            // Upstream: a certificate without a CommonName names nobody.
            None => Verdict::NotMine,
        }
    }
}

/// CN → name, O → groups (upstream's `CommonNameUserConversion`); None without a CN.
pub fn user_of(leaf: &CertificateDer<'_>) -> Option<User> {
    let (_, cert) = x509_parser::parse_x509_certificate(leaf.as_ref()).ok()?;
    let subject = cert.subject();
    // Go keeps the last CommonName and every Organization.
    let name = subject.iter_common_name().filter_map(|a| a.as_str().ok()).last()?.to_string();
    if name.is_empty() {
        return None;
    }
    let groups = subject.iter_organization().filter_map(|a| a.as_str().ok()).map(str::to_string).collect();
    let digest: String = Sha256::digest(leaf.as_ref()).iter().map(|b| format!("{b:02x}")).collect();
    let mut user = User { name, groups, ..Default::default() };
    user.extra.insert(CREDENTIAL_ID_KEY.to_string(), vec![format!("X509SHA256={digest}")]);
    Some(user)
}

#[cfg(test)]
pub(crate) mod tests {
    use rcgen::{
        BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
        KeyUsagePurpose,
    };

    use super::*;

    pub(crate) fn ca(name: &str) -> CertifiedIssuer<'static, KeyPair> {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::DigitalSignature];
        CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap()
    }

    pub(crate) fn client(
        ca: &CertifiedIssuer<'static, KeyPair>,
        cn: Option<&str>,
        orgs: &[&str],
    ) -> CertificateDer<'static> {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name = rcgen::DistinguishedName::new();
        if let Some(cn) = cn {
            params.distinguished_name.push(DnType::CommonName, cn);
        }
        for o in orgs {
            params.distinguished_name.push(DnType::OrganizationName, *o);
        }
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        params.signed_by(&KeyPair::generate().unwrap(), &**ca).unwrap().der().clone()
    }

    fn authenticator(ca: &CertifiedIssuer<'static, KeyPair>) -> ClientCertAuthenticator {
        let mut roots = RootCertStore::empty();
        roots.add(ca.der().clone()).unwrap();
        ClientCertAuthenticator::new(roots).unwrap()
    }

    #[test]
    fn common_name_and_organizations_become_the_user() {
        let ca = ca("client CA");
        // (rcgen keeps one value per attribute type, so one Organization here.)
        let cert = client(&ca, Some("alice"), &["system:masters"]);
        let Verdict::Authenticated(a) = authenticator(&ca).authenticate(&[cert.clone()]) else {
            panic!("a certificate from the client CA authenticates")
        };
        assert_eq!(a.user.name, "alice");
        assert_eq!(a.user.groups, vec!["system:masters"]);
        let digest: String = Sha256::digest(cert.as_ref()).iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(a.user.extra[CREDENTIAL_ID_KEY], vec![format!("X509SHA256={digest}")]);
    }

    #[test]
    fn other_cas_and_nameless_certificates_are_refused() {
        let trusted = ca("client CA");
        let other = ca("some other CA");
        let forged = client(&other, Some("admin"), &["system:masters"]);
        assert!(matches!(authenticator(&trusted).authenticate(&[forged]), Verdict::Rejected(_)));
        let nameless = client(&trusted, None, &["system:masters"]);
        assert_eq!(authenticator(&trusted).authenticate(&[nameless]), Verdict::NotMine);
        assert_eq!(authenticator(&trusted).authenticate(&[]), Verdict::NotMine);
    }

    #[test]
    fn the_handshake_verifier_asks_but_does_not_require() {
        let trusted = ca("client CA");
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ca.crt");
        std::fs::write(&path, trusted.pem()).unwrap();
        let v = RequestClientCert::from_file(&path).unwrap();
        assert!(v.offer_client_auth() && !v.client_auth_mandatory());
        assert_eq!(v.root_hint_subjects().len(), 1);
        let stranger = client(&ca("other"), Some("x"), &[]);
        assert!(v.verify_client_cert(&stranger, &[], UnixTime::now()).is_ok());
        assert!(!v.supported_verify_schemes().is_empty());
    }
}
