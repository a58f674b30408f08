//! The CSR signer's certificate authority and its policy: which requests each of the
//! `kubernetes.io/*` signers accepts, and the certificate it issues for one.
//!
//! As upstream's `csrsigning` controller: the subject and subject alternative names come
//! from the request, the key usages from `spec.usages`, the lifetime is the shorter of
//! `spec.expirationSeconds` (at least ten minutes) and `--cluster-signing-duration`,
//! backdated five minutes for clock skew and never past the CA's own expiry.

use std::net::IpAddr;
use std::path::Path;
use std::time::{Duration, SystemTime};

use component_base::keyutil::{self, Algorithm};
use rcgen::{
    CertificateParams, DistinguishedName, DnType, DnValue, ExtendedKeyUsagePurpose, IsCa, Issuer,
    KeyIdMethod, KeyUsagePurpose, PublicKeyData, SanType, SerialNumber, SignatureAlgorithm,
};
use rustls_pki_types::pem::PemObject;
use x509_parser::der_parser::asn1_rs::Tag;
use x509_parser::prelude::{
    FromDer, GeneralName, ParsedExtension, X509Certificate, X509CertificationRequest, X509Name,
};

pub const KUBE_APISERVER_CLIENT: &str = "kubernetes.io/kube-apiserver-client";
pub const KUBE_APISERVER_CLIENT_KUBELET: &str = "kubernetes.io/kube-apiserver-client-kubelet";
pub const KUBELET_SERVING: &str = "kubernetes.io/kubelet-serving";
pub const LEGACY_UNKNOWN: &str = "kubernetes.io/legacy-unknown";

/// How far back a certificate's validity starts, for clocks behind ours.
const BACKDATE: Duration = Duration::from_secs(5 * 60);
/// The shortest lifetime `spec.expirationSeconds` may ask for.
const MIN_EXPIRATION: Duration = Duration::from_secs(10 * 60);

/// Why a CA cannot be loaded or a request cannot be signed.
#[derive(Debug, thiserror::Error)]
pub enum SignError {
    #[error("{0}")]
    Ca(String),
    /// The request is not one this signer issues for (a `Failed` condition, not a retry).
    #[error("{0}")]
    Invalid(String),
    #[error("signing: {0}")]
    Sign(#[from] rcgen::Error),
}

/// A CA key usable by rcgen: keyutil's key (RSA PKCS#1/PKCS#8, EC SEC1/PKCS#8), whose EC
/// signatures come out fixed-width (r || s, for JWS) and are re-encoded as X.509 wants them.
struct CaKey {
    key: keyutil::SigningKey,
    public: Vec<u8>,
}

impl PublicKeyData for CaKey {
    fn der_bytes(&self) -> &[u8] {
        &self.public
    }

    fn algorithm(&self) -> &'static SignatureAlgorithm {
        match self.key.algorithm() {
            Algorithm::ES256 => &rcgen::PKCS_ECDSA_P256_SHA256,
            Algorithm::ES384 => &rcgen::PKCS_ECDSA_P384_SHA384,
            _ => &rcgen::PKCS_RSA_SHA256,
        }
    }
}

impl rcgen::SigningKey for CaKey {
    fn sign(&self, msg: &[u8]) -> Result<Vec<u8>, rcgen::Error> {
        let sig = self.key.sign(msg).map_err(|_| rcgen::Error::RemoteKeyError)?;
        Ok(match self.key.algorithm() {
            Algorithm::ES256 | Algorithm::ES384 => ecdsa_der(&sig),
            _ => sig,
        })
    }
}

/// An ECDSA signature as the DER `SEQUENCE { r INTEGER, s INTEGER }` X.509 carries.
fn ecdsa_der(fixed: &[u8]) -> Vec<u8> {
    let (r, s) = fixed.split_at(fixed.len() / 2);
    let int = |v: &[u8]| {
        let v = &v[v.iter().position(|b| *b != 0).unwrap_or(v.len() - 1)..];
        let mut out = vec![0x02];
        let pad = v[0] & 0x80 != 0;
        out.extend(der_len(v.len() + usize::from(pad)));
        if pad {
            out.push(0);
        }
        out.extend_from_slice(v);
        out
    };
    let body = [int(r), int(s)].concat();
    let mut out = vec![0x30];
    out.extend(der_len(body.len()));
    out.extend(body);
    out
}

fn der_len(n: usize) -> Vec<u8> {
    if n < 0x80 { vec![n as u8] } else { vec![0x81, n as u8] }
}

/// The requester's public key as rcgen writes it into the certificate.
struct RequestKey {
    alg: &'static SignatureAlgorithm,
    key: Vec<u8>,
}

impl PublicKeyData for RequestKey {
    fn der_bytes(&self) -> &[u8] {
        &self.key
    }

    fn algorithm(&self) -> &'static SignatureAlgorithm {
        self.alg
    }
}

/// A signing CA: `--cluster-signing-cert-file` and `--cluster-signing-key-file` (or a
/// signer's own pair).
pub struct CertificateAuthority {
    issuer: Issuer<'static, CaKey>,
    not_after: SystemTime,
}

impl std::fmt::Debug for CertificateAuthority {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CertificateAuthority").field("not_after", &self.not_after).finish_non_exhaustive()
    }
}

impl CertificateAuthority {
    pub fn from_files(cert: &Path, key: &Path) -> Result<Self, SignError> {
        let read =
            |p: &Path| std::fs::read(p).map_err(|e| SignError::Ca(format!("reading {}: {e}", p.display())));
        Self::from_pem(&read(cert)?, &read(key)?)
            .map_err(|e| SignError::Ca(format!("{} / {}: {e}", cert.display(), key.display())))
    }

    pub fn from_pem(cert_pem: &[u8], key_pem: &[u8]) -> Result<Self, SignError> {
        let der = rustls_pki_types::CertificateDer::pem_slice_iter(cert_pem)
            .next()
            .ok_or_else(|| SignError::Ca("no certificate in the CA file".into()))?
            .map_err(|e| SignError::Ca(format!("CA certificate: {e}")))?;
        let (_, ca) =
            X509Certificate::from_der(&der).map_err(|e| SignError::Ca(format!("CA certificate: {e}")))?;
        let key =
            keyutil::SigningKey::from_pem(key_pem).map_err(|e| SignError::Ca(format!("CA key: {e}")))?;
        if keyutil::PublicKey::from_spki(ca.public_key().raw).map(|p| p.spki_der())
            != Some(key.public.spki_der())
        {
            return Err(SignError::Ca("the CA key does not match the CA certificate".into()));
        }
        let mut params = CertificateParams::default();
        params.distinguished_name = distinguished_name(ca.subject())?;
        // The issued certificates' authority key identifier is the CA's subject key
        // identifier as written (verifiers such as OpenSSL refuse a mismatch).
        params.key_identifier_method = match ca.extensions().iter().find_map(|e| match e.parsed_extension() {
            ParsedExtension::SubjectKeyIdentifier(id) => Some(id.0.to_vec()),
            _ => None,
        }) {
            Some(id) => KeyIdMethod::PreSpecified(id),
            None => KeyIdMethod::Sha256,
        };
        let not_after = SystemTime::UNIX_EPOCH
            + Duration::from_secs(u64::try_from(ca.validity().not_after.timestamp()).unwrap_or(0));
        let public = ca.public_key().subject_public_key.data.to_vec();
        Ok(CertificateAuthority { issuer: Issuer::new(params, CaKey { key, public }), not_after })
    }

    /// Issues the certificate for a request this signer accepts: PEM.
    pub fn sign(
        &self,
        request_pem: &[u8],
        usages: &[String],
        expiration_seconds: Option<i32>,
        max_duration: Duration,
        now: SystemTime,
    ) -> Result<String, SignError> {
        let req = parse_request(request_pem)?;
        let mut lifetime = max_duration;
        if let Some(s) = expiration_seconds {
            lifetime = lifetime.min(Duration::from_secs(u64::try_from(s).unwrap_or(0)).max(MIN_EXPIRATION));
        }
        let not_after = (now + lifetime).min(self.not_after);
        let not_before = now - BACKDATE;
        if not_after <= now {
            return Err(SignError::Invalid("the signer's CA certificate has expired".into()));
        }
        let mut params = CertificateParams::default();
        params.distinguished_name = req.subject.clone();
        params.subject_alt_names = req.sans.clone();
        params.not_before = to_time(not_before);
        params.not_after = to_time(not_after);
        params.is_ca = IsCa::ExplicitNoCa;
        params.use_authority_key_identifier_extension = true;
        let mut serial = [0u8; 16];
        rand::fill(&mut serial);
        serial[0] &= 0x7f;
        params.serial_number = Some(SerialNumber::from_slice(&serial));
        for usage in usages {
            match usage.as_str() {
                "digital signature" => params.key_usages.push(KeyUsagePurpose::DigitalSignature),
                "content commitment" => params.key_usages.push(KeyUsagePurpose::ContentCommitment),
                "key encipherment" => params.key_usages.push(KeyUsagePurpose::KeyEncipherment),
                "key agreement" => params.key_usages.push(KeyUsagePurpose::KeyAgreement),
                "data encipherment" => params.key_usages.push(KeyUsagePurpose::DataEncipherment),
                "cert sign" => params.key_usages.push(KeyUsagePurpose::KeyCertSign),
                "crl sign" => params.key_usages.push(KeyUsagePurpose::CrlSign),
                "encipher only" => params.key_usages.push(KeyUsagePurpose::EncipherOnly),
                "decipher only" => params.key_usages.push(KeyUsagePurpose::DecipherOnly),
                "any" => params.extended_key_usages.push(ExtendedKeyUsagePurpose::Any),
                "server auth" => params.extended_key_usages.push(ExtendedKeyUsagePurpose::ServerAuth),
                "client auth" => params.extended_key_usages.push(ExtendedKeyUsagePurpose::ClientAuth),
                "code signing" => params.extended_key_usages.push(ExtendedKeyUsagePurpose::CodeSigning),
                "email protection" => {
                    params.extended_key_usages.push(ExtendedKeyUsagePurpose::EmailProtection)
                }
                "timestamping" => params.extended_key_usages.push(ExtendedKeyUsagePurpose::TimeStamping),
                "ocsp signing" => params.extended_key_usages.push(ExtendedKeyUsagePurpose::OcspSigning),
                // Usages without an X.509 counterpart Go's signer knows (s/mime, ipsec ...)
                // are refused by the signers' policies before this point.
                other => return Err(SignError::Invalid(format!("unsupported usage {other:?}"))),
            }
        }
        Ok(params.signed_by(&req.key, &self.issuer)?.pem())
    }
}

fn to_time(t: SystemTime) -> time::OffsetDateTime {
    let secs = t.duration_since(SystemTime::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
    time::OffsetDateTime::from_unix_timestamp(i64::try_from(secs).unwrap_or(0))
        .unwrap_or(time::OffsetDateTime::UNIX_EPOCH)
}

/// A parsed, signature-checked PKCS#10 request.
pub struct Request {
    pub subject: DistinguishedName,
    pub common_name: String,
    pub organizations: Vec<String>,
    pub sans: Vec<SanType>,
    pub dns_names: Vec<String>,
    pub ips: Vec<IpAddr>,
    /// Whether the request names e-mail addresses or URIs.
    pub other_sans: bool,
    key: RequestKey,
}

pub fn parse_request(pem: &[u8]) -> Result<Request, SignError> {
    let der = rustls_pki_types::CertificateSigningRequestDer::pem_slice_iter(pem)
        .next()
        .ok_or_else(|| SignError::Invalid("no CERTIFICATE REQUEST PEM block".into()))?
        .map_err(|e| SignError::Invalid(format!("PEM block: {e}")))?;
    let (_, csr) = X509CertificationRequest::from_der(der.as_ref())
        .map_err(|e| SignError::Invalid(format!("request: {e}")))?;
    csr.verify_signature().map_err(|_| SignError::Invalid("the request's signature is invalid".into()))?;
    let info = &csr.certification_request_info;
    let spki = &info.subject_pki;
    let alg =
        key_algorithm(spki).ok_or_else(|| SignError::Invalid("unsupported public key algorithm".into()))?;
    let mut req = Request {
        subject: distinguished_name(&info.subject)?,
        common_name: info
            .subject
            .iter_common_name()
            .next()
            .and_then(|a| a.as_str().ok())
            .unwrap_or("")
            .into(),
        organizations: info
            .subject
            .iter_organization()
            .filter_map(|a| a.as_str().ok())
            .map(String::from)
            .collect(),
        sans: Vec::new(),
        dns_names: Vec::new(),
        ips: Vec::new(),
        other_sans: false,
        key: RequestKey { alg, key: spki.subject_public_key.data.to_vec() },
    };
    for ext in csr.requested_extensions().into_iter().flatten() {
        let ParsedExtension::SubjectAlternativeName(san) = ext else { continue };
        for name in &san.general_names {
            let ia5 =
                |s: &str| s.to_string().try_into().map_err(|_| SignError::Invalid(format!("bad name {s:?}")));
            match name {
                GeneralName::DNSName(d) => {
                    req.dns_names.push(d.to_string());
                    req.sans.push(SanType::DnsName(ia5(d)?));
                }
                GeneralName::IPAddress(b) => {
                    let ip = match b.len() {
                        4 => IpAddr::from(<[u8; 4]>::try_from(*b).unwrap_or_default()),
                        16 => IpAddr::from(<[u8; 16]>::try_from(*b).unwrap_or_default()),
                        _ => return Err(SignError::Invalid("bad IP address in subjectAltName".into())),
                    };
                    req.ips.push(ip);
                    req.sans.push(SanType::IpAddress(ip));
                }
                GeneralName::RFC822Name(m) => {
                    req.other_sans = true;
                    req.sans.push(SanType::Rfc822Name(ia5(m)?));
                }
                GeneralName::URI(u) => {
                    req.other_sans = true;
                    req.sans.push(SanType::URI(ia5(u)?));
                }
                _ => req.other_sans = true,
            }
        }
    }
    Ok(req)
}

fn key_algorithm(spki: &x509_parser::x509::SubjectPublicKeyInfo<'_>) -> Option<&'static SignatureAlgorithm> {
    use x509_parser::oid_registry::{
        OID_EC_P256, OID_KEY_TYPE_EC_PUBLIC_KEY, OID_NIST_EC_P384, OID_PKCS1_RSAENCRYPTION, OID_SIG_ED25519,
    };
    let oid = &spki.algorithm.algorithm;
    if *oid == OID_PKCS1_RSAENCRYPTION {
        Some(&rcgen::PKCS_RSA_SHA256)
    } else if *oid == OID_SIG_ED25519 {
        Some(&rcgen::PKCS_ED25519)
    } else if *oid == OID_KEY_TYPE_EC_PUBLIC_KEY {
        let curve = spki.algorithm.parameters.as_ref()?.as_oid().ok()?;
        if curve == OID_EC_P256 {
            Some(&rcgen::PKCS_ECDSA_P256_SHA256)
        } else if curve == OID_NIST_EC_P384 {
            Some(&rcgen::PKCS_ECDSA_P384_SHA384)
        } else {
            None
        }
    } else {
        None
    }
}

/// A name as rcgen writes it, each attribute in its original string type, so an issuer
/// name matches the CA's subject byte for byte (Go finds a parent by its raw subject).
fn distinguished_name(name: &X509Name<'_>) -> Result<DistinguishedName, SignError> {
    let bad = |what: &str| SignError::Invalid(format!("unsupported name: {what}"));
    let mut dn = DistinguishedName::new();
    for rdn in name.iter() {
        for attr in rdn.iter() {
            let oid: Vec<u64> = attr.attr_type().iter().ok_or_else(|| bad("attribute type"))?.collect();
            let data = attr.attr_value().data;
            let text = || std::str::from_utf8(data).map(str::to_string).map_err(|_| bad("non-UTF-8 value"));
            let value = match attr.attr_value().header.tag() {
                Tag::PrintableString => {
                    DnValue::PrintableString(text()?.try_into().map_err(|_| bad("printable"))?)
                }
                Tag::Ia5String => DnValue::Ia5String(text()?.try_into().map_err(|_| bad("ia5"))?),
                Tag::Utf8String => DnValue::Utf8String(text()?),
                Tag::T61String => DnValue::TeletexString(text()?.try_into().map_err(|_| bad("teletex"))?),
                _ => return Err(bad("attribute string type")),
            };
            dn.push(DnType::from_oid(&oid), value);
        }
    }
    Ok(dn)
}

/// Why `signer` refuses this request, as upstream's signer policies: `None` when it may sign.
pub fn refuse(signer: &str, req: &Request, usages: &[String]) -> Option<String> {
    let has = |u: &str| usages.iter().any(|x| x == u);
    let only = |allowed: &[&str]| usages.iter().all(|u| allowed.contains(&u.as_str()));
    match signer {
        KUBE_APISERVER_CLIENT => {
            if !has("client auth") || !only(&["digital signature", "key encipherment", "client auth"]) {
                return Some("usages did not match [digital signature key encipherment client auth]: invalid usage for client certificate".into());
            }
            None
        }
        KUBE_APISERVER_CLIENT_KUBELET => {
            if let Some(why) = node_subject(req) {
                return Some(why);
            }
            if !req.sans.is_empty() {
                return Some("subjectAltNames are not allowed".into());
            }
            if !has("client auth") || !only(&["digital signature", "key encipherment", "client auth"]) {
                return Some("usages did not match [digital signature key encipherment client auth]".into());
            }
            None
        }
        KUBELET_SERVING => {
            if let Some(why) = node_subject(req) {
                return Some(why);
            }
            if req.other_sans {
                return Some("email and URI subjectAltNames are not allowed".into());
            }
            if req.dns_names.is_empty() && req.ips.is_empty() {
                return Some("DNS or IP subjectAltName is required".into());
            }
            if !has("server auth") || !only(&["digital signature", "key encipherment", "server auth"]) {
                return Some("usages did not match [digital signature key encipherment server auth]".into());
            }
            None
        }
        LEGACY_UNKNOWN => None,
        _ => Some(format!("unknown signer {signer}")),
    }
}

/// The node identity a kubelet signer requires: organization exactly `system:nodes`, common
/// name `system:node:<name>`.
fn node_subject(req: &Request) -> Option<String> {
    if req.organizations != ["system:nodes"] {
        return Some("subject organization is not system:nodes".into());
    }
    if !req.common_name.starts_with("system:node:") {
        return Some("subject common name does not begin with system:node:".into());
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ca() -> (CertificateAuthority, String) {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = CertificateParams::default();
        params.is_ca = IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(DnType::CommonName, DnValue::PrintableString("test-ca".try_into().unwrap()));
        let cert = params.self_signed(&key).unwrap();
        (
            CertificateAuthority::from_pem(cert.pem().as_bytes(), key.serialize_pem().as_bytes()).unwrap(),
            cert.pem(),
        )
    }

    fn request(cn: &str, orgs: &[&str], sans: Vec<String>) -> Vec<u8> {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(sans).unwrap();
        params.distinguished_name = DistinguishedName::new();
        params.distinguished_name.push(DnType::CommonName, cn);
        for o in orgs {
            params.distinguished_name.push(DnType::OrganizationName, *o);
        }
        params.serialize_request(&key).unwrap().pem().unwrap().into_bytes()
    }

    fn usages(u: &[&str]) -> Vec<String> {
        u.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn issues_what_the_request_asks_within_the_limits() {
        let (ca, ca_pem) = ca();
        let pem = request("system:node:n1", &["system:nodes"], vec![]);
        let now = SystemTime::now();
        let cert = ca
            .sign(
                &pem,
                &usages(&["digital signature", "client auth"]),
                Some(60),
                Duration::from_secs(3600),
                now,
            )
            .unwrap();
        let der = rustls_pki_types::CertificateDer::pem_slice_iter(cert.as_bytes()).next().unwrap().unwrap();
        let (_, c) = X509Certificate::from_der(&der).unwrap();
        assert_eq!(c.subject().to_string(), "CN=system:node:n1, O=system:nodes");
        assert_eq!(c.issuer().to_string(), "CN=test-ca");
        // expirationSeconds below ten minutes is raised to ten; backdated five.
        let life = c.validity().not_after.timestamp() - c.validity().not_before.timestamp();
        assert_eq!(life, 15 * 60);
        assert!(c.extended_key_usage().unwrap().unwrap().value.client_auth);
        assert!(!c.basic_constraints().unwrap().unwrap().value.ca);
        // It chains to the CA.
        let ca_der =
            rustls_pki_types::CertificateDer::pem_slice_iter(ca_pem.as_bytes()).next().unwrap().unwrap();
        let (_, cac) = X509Certificate::from_der(&ca_der).unwrap();
        c.verify_signature(Some(cac.public_key())).unwrap();
        assert_eq!(c.issuer().as_raw(), cac.subject().as_raw());
    }

    #[test]
    fn signer_policies() {
        let node = parse_request(&request("system:node:n1", &["system:nodes"], vec![])).unwrap();
        let client = usages(&["client auth"]);
        assert_eq!(refuse(KUBE_APISERVER_CLIENT_KUBELET, &node, &client), None);
        assert!(refuse(KUBE_APISERVER_CLIENT_KUBELET, &node, &usages(&["server auth"])).is_some());
        let user = parse_request(&request("alice", &["devs"], vec![])).unwrap();
        assert!(refuse(KUBE_APISERVER_CLIENT_KUBELET, &user, &client).unwrap().contains("system:nodes"));
        assert_eq!(refuse(KUBE_APISERVER_CLIENT, &user, &client), None);
        assert!(refuse(KUBE_APISERVER_CLIENT, &user, &usages(&["server auth"])).is_some());
        let serving = parse_request(&request(
            "system:node:n1",
            &["system:nodes"],
            vec!["n1".into(), "10.0.0.5".into()],
        ))
        .unwrap();
        assert_eq!(serving.ips, vec!["10.0.0.5".parse::<IpAddr>().unwrap()]);
        assert_eq!(refuse(KUBELET_SERVING, &serving, &usages(&["server auth", "digital signature"])), None);
        assert!(refuse(KUBELET_SERVING, &node, &usages(&["server auth"])).unwrap().contains("required"));
    }

    #[test]
    fn tampered_requests_are_refused() {
        let mut pem = String::from_utf8(request("x", &[], vec![])).unwrap();
        // Flip one character of the base64 body (the signature no longer matches or the
        // DER no longer parses).
        let at = pem.len() / 2;
        let c = pem.as_bytes()[at];
        pem.replace_range(at..at + 1, if c == b'A' { "B" } else { "A" });
        assert!(matches!(parse_request(pem.as_bytes()), Err(SignError::Invalid(_))));
        assert!(matches!(parse_request(b"not pem"), Err(SignError::Invalid(_))));
    }

    #[test]
    fn ecdsa_signature_encoding() {
        let mut fixed = vec![0u8; 64];
        fixed[0] = 0x80;
        fixed[63] = 1;
        let der = ecdsa_der(&fixed);
        assert_eq!(der[0], 0x30);
        assert_eq!(&der[2..5], &[0x02, 33, 0x00]);
        assert_eq!(&der[der.len() - 3..], &[0x02, 1, 1]);
    }
}
