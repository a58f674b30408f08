//! Client certificates (`--client-ca-file`, upstream's `request/x509` authenticator).
//!
//! As upstream (Go's `tls.RequestClientCert`), the TLS handshake asks for a certificate
//! but neither requires one nor judges its chain: [`RequestClientCert`] only checks that
//! the client holds the key of the certificate it sent. The chain is verified here, per
//! request, by [`ClientCertAuthenticator`], so a certificate from an unknown CA gets an
//! HTTP 401 rather than a failed handshake, and a client with a bad certificate can
//! still authenticate with a bearer token.
//!
//! The chain is judged as Go's `x509` package judges it ([`chain`]): X.509 v1 client
//! certificates, which `openssl x509 -req` makes without an extensions file, are accepted
//! as upstream accepts them.
//!
//! The user is the leaf's subject CommonName, its groups the subject Organizations, with
//! upstream's `authentication.kubernetes.io/credential-id` `X509SHA256=<hex digest>`.

pub mod chain;

use std::path::Path;
use std::sync::Arc;

use rustls::client::danger::HandshakeSignatureValid;
use rustls::crypto::{
    CryptoProvider, WebPkiSupportedAlgorithms, verify_tls12_signature, verify_tls13_signature,
    verify_tls13_signature_with_raw_key,
};
use rustls::pki_types::{CertificateDer, SubjectPublicKeyInfoDer, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{CertificateError, DigitallySignedStruct, DistinguishedName, RootCertStore, SignatureScheme};
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
        let algs = &self.provider.signature_verification_algorithms;
        match v1_public_key(cert)? {
            Some(spki) => verify_tls12_with_key(message, &spki, dss, algs),
            None => verify_tls12_signature(message, cert, dss, algs),
        }
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        let algs = &self.provider.signature_verification_algorithms;
        match v1_public_key(cert)? {
            Some(spki) => verify_tls13_signature_with_raw_key(message, &spki, dss, algs),
            None => verify_tls13_signature(message, cert, dss, algs),
        }
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider.signature_verification_algorithms.supported_schemes()
    }
}

/// The public key (SubjectPublicKeyInfo DER) of an X.509 v1 certificate; None for other
/// versions. rustls checks handshake signatures with webpki, which parses only v3
/// end-entity certificates, so for v1 the key is taken out here and checked as a raw key.
fn v1_public_key(
    cert: &CertificateDer<'_>,
) -> Result<Option<SubjectPublicKeyInfoDer<'static>>, rustls::Error> {
    let (_, parsed) = x509_parser::parse_x509_certificate(cert.as_ref())
        .map_err(|_| rustls::Error::InvalidCertificate(CertificateError::BadEncoding))?;
    if parsed.version() != x509_parser::x509::X509Version::V1 {
        return Ok(None);
    }
    Ok(Some(SubjectPublicKeyInfoDer::from(parsed.public_key().raw.to_vec())))
}

/// One DER element: (contents, what follows). Definite lengths of up to four bytes.
fn der_element(input: &[u8]) -> Option<(&[u8], &[u8])> {
    let (&first, rest) = input.get(1..).and_then(|r| r.split_first())?;
    let (len, rest) = if first < 0x80 {
        (first as usize, rest)
    } else {
        let n = (first & 0x7f) as usize;
        if n == 0 || n > 4 || rest.len() < n {
            return None;
        }
        (rest[..n].iter().fold(0usize, |acc, b| (acc << 8) | *b as usize), &rest[n..])
    };
    (rest.len() >= len).then(|| rest.split_at(len))
}

/// A TLS 1.2 handshake signature checked with a raw key, as rustls checks it with a v3
/// certificate's: each verification algorithm of the scheme whose key type matches.
fn verify_tls12_with_key(
    message: &[u8],
    spki: &SubjectPublicKeyInfoDer<'_>,
    dss: &DigitallySignedStruct,
    algs: &WebPkiSupportedAlgorithms,
) -> Result<HandshakeSignatureValid, rustls::Error> {
    let bad = || rustls::Error::InvalidCertificate(CertificateError::BadEncoding);
    // SubjectPublicKeyInfo ::= SEQUENCE { algorithm AlgorithmIdentifier, subjectPublicKey BIT STRING }
    let (info, _) = der_element(spki.as_ref()).ok_or_else(bad)?;
    let (alg_id, rest) = der_element(info).ok_or_else(bad)?;
    let (bits, _) = der_element(rest).ok_or_else(bad)?;
    let key = bits.get(1..).ok_or_else(bad)?; // after the unused-bits count
    let candidates =
        algs.mapping.iter().filter(|(scheme, _)| *scheme == dss.scheme).flat_map(|(_, a)| a.iter());
    for alg in candidates.filter(|a| a.public_key_alg_id().as_ref() == alg_id) {
        if alg.verify_signature(key, message, dss.signature()).is_ok() {
            return Ok(HandshakeSignatureValid::assertion());
        }
    }
    Err(rustls::Error::InvalidCertificate(CertificateError::BadSignature))
}

/// The request side: verifies a connection's certificate chain against the client CA
/// (validity, client-auth usage, chain to a root) and maps it to a user.
pub struct ClientCertAuthenticator {
    roots: chain::Roots,
}

impl ClientCertAuthenticator {
    pub fn from_file(ca_file: &Path) -> Result<Self, String> {
        let certs = component_base::tls::load_certs(ca_file).map_err(|e| format!("--client-ca-file: {e}"))?;
        Self::new(certs)
    }

    /// An authenticator trusting `roots` (the CA bundle's certificates).
    pub fn new(roots: Vec<CertificateDer<'static>>) -> Result<Self, String> {
        Ok(ClientCertAuthenticator {
            roots: chain::Roots::new(roots).map_err(|e| format!("--client-ca-file: {e}"))?,
        })
    }

    /// Judges the chain a client presented (leaf first) at the current time.
    pub fn authenticate(&self, chain: &[CertificateDer<'static>]) -> Verdict {
        self.authenticate_at(chain, UnixTime::now())
    }

    pub fn authenticate_at(&self, chain: &[CertificateDer<'static>], now: UnixTime) -> Verdict {
        let Some((leaf, intermediates)) = chain.split_first() else { return Verdict::NotMine };
        if let Err(e) = self.roots.verify(leaf, intermediates, now.as_secs() as i64) {
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
        ClientCertAuthenticator::new(vec![ca.der().clone()]).unwrap()
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
