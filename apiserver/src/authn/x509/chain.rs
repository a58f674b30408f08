//! A client certificate's chain judged as upstream judges it: Go's
//! `x509.Certificate.Verify` with the client CA bundle as roots, the other presented
//! certificates as intermediates and `KeyUsages: [ClientAuth]`.
//!
//! webpki (rustls' verifier) only accepts X.509 v3 end-entity certificates, but the
//! certificates most guides make (`openssl x509 -req ...` without an extensions file) are
//! v1; Go accepts them, so does this. What is checked, as Go does:
//! - every certificate in the chain is within its validity period;
//! - each is signed by the next (SHA-1 signatures refused, as Go has since 1.18);
//! - intermediates are CAs (basicConstraints `CA:TRUE`) and their `pathLenConstraint`
//!   holds; a root is trusted because it is in the bundle;
//! - an extended key usage, where a certificate has one, allows client authentication;
//!   key usage bits are not judged (Go ignores them);
//! - a critical extension the verifier does not understand fails the chain.
//!
//! Name constraints are not evaluated: a chain through a CA that carries them is refused
//! (fail closed) rather than accepted unchecked.

use rustls::pki_types::CertificateDer;
use x509_parser::certificate::X509Certificate;
use x509_parser::oid_registry::{
    OID_PKCS1_SHA1WITHRSA, OID_SHA1_WITH_RSA, OID_X509_EXT_AUTHORITY_KEY_IDENTIFIER,
    OID_X509_EXT_BASIC_CONSTRAINTS, OID_X509_EXT_CERTIFICATE_POLICIES, OID_X509_EXT_CRL_DISTRIBUTION_POINTS,
    OID_X509_EXT_EXTENDED_KEY_USAGE, OID_X509_EXT_KEY_USAGE, OID_X509_EXT_NAME_CONSTRAINTS,
    OID_X509_EXT_SUBJECT_ALT_NAME, OID_X509_EXT_SUBJECT_KEY_IDENTIFIER,
};
use x509_parser::prelude::FromDer;

/// Intermediates between a leaf and its root, at most (Go has no fixed bound; the
/// search has to have one, and real client chains are one or two long).
const MAX_INTERMEDIATES: usize = 8;

pub const UNKNOWN_AUTHORITY: &str = "x509: certificate signed by unknown authority";

/// The trusted roots, kept as DER and parsed when used (parsing borrows the bytes).
pub struct Roots(Vec<CertificateDer<'static>>);

impl Roots {
    /// Roots from certificates that must each parse.
    pub fn new(certs: Vec<CertificateDer<'static>>) -> Result<Roots, String> {
        for (i, c) in certs.iter().enumerate() {
            parse(c).map_err(|e| format!("certificate {i} of the CA bundle: {e}"))?;
        }
        if certs.is_empty() {
            return Err("no certificates in the CA bundle".into());
        }
        Ok(Roots(certs))
    }

    pub fn certs(&self) -> &[CertificateDer<'static>] {
        &self.0
    }

    /// Verifies `leaf` (with the `intermediates` the client sent after it) at `now`
    /// (seconds since the Unix epoch). The error is Go's message.
    pub fn verify(
        &self,
        leaf: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: i64,
    ) -> Result<(), String> {
        let leaf = parse(leaf)?;
        check(&leaf, now)?;
        let roots: Vec<X509Certificate<'_>> = self.0.iter().filter_map(|c| parse(c).ok()).collect();
        let pool: Vec<X509Certificate<'_>> = intermediates.iter().filter_map(|c| parse(c).ok()).collect();
        let mut search = Search { roots: &roots, pool: &pool, now, used: Vec::new(), error: None };
        if search.extend(&leaf) {
            Ok(())
        } else {
            Err(search.error.unwrap_or_else(|| UNKNOWN_AUTHORITY.to_string()))
        }
    }
}

fn parse<'a>(der: &'a CertificateDer<'_>) -> Result<X509Certificate<'a>, String> {
    match X509Certificate::from_der(der.as_ref()) {
        Ok((rest, cert)) if rest.is_empty() => Ok(cert),
        Ok(_) => Err("x509: trailing data after the certificate".into()),
        Err(e) => Err(format!("x509: malformed certificate: {e}")),
    }
}

/// What every certificate of a chain must satisfy on its own: validity period, client
/// authentication allowed, no critical extension left unhandled.
fn check(c: &X509Certificate<'_>, now: i64) -> Result<(), String> {
    let v = c.validity();
    if now < v.not_before.timestamp() || now > v.not_after.timestamp() {
        let bound = if now < v.not_before.timestamp() {
            format!("is before {}", v.not_before)
        } else {
            format!("is after {}", v.not_after)
        };
        return Err(format!("x509: certificate has expired or is not yet valid: current time {bound}"));
    }
    for ext in c.extensions().iter().filter(|e| e.critical) {
        let handled = [
            OID_X509_EXT_KEY_USAGE,
            OID_X509_EXT_EXTENDED_KEY_USAGE,
            OID_X509_EXT_BASIC_CONSTRAINTS,
            OID_X509_EXT_SUBJECT_ALT_NAME,
            OID_X509_EXT_SUBJECT_KEY_IDENTIFIER,
            OID_X509_EXT_AUTHORITY_KEY_IDENTIFIER,
            OID_X509_EXT_CERTIFICATE_POLICIES,
            OID_X509_EXT_CRL_DISTRIBUTION_POINTS,
        ];
        if !handled.contains(&ext.oid) {
            return Err("x509: unhandled critical extension".into());
        }
    }
    match c.extended_key_usage() {
        Ok(None) => {}
        Ok(Some(eku)) if eku.value.any || eku.value.client_auth => {}
        Ok(Some(_)) => return Err("x509: certificate specifies an incompatible key usage".into()),
        Err(e) => return Err(format!("x509: malformed extended key usage: {e}")),
    }
    Ok(())
}

/// Whether `issuer` may sign for a chain with `below` intermediates under it.
fn may_sign(issuer: &X509Certificate<'_>, below: usize, intermediate: bool) -> Result<(), String> {
    if issuer.get_extension_unique(&OID_X509_EXT_NAME_CONSTRAINTS).ok().flatten().is_some() {
        return Err("x509: a CA with name constraints (not evaluated here) cannot be trusted".into());
    }
    let bc = issuer.basic_constraints().map_err(|e| format!("x509: malformed basic constraints: {e}"))?;
    if intermediate && !bc.as_ref().is_some_and(|b| b.value.ca) {
        return Err("x509: certificate is not authorized to sign other certificates".into());
    }
    if let Some(len) = bc.and_then(|b| b.value.path_len_constraint)
        && below > len as usize
    {
        return Err("x509: too many intermediates for path length constraint".into());
    }
    Ok(())
}

fn signed_by(c: &X509Certificate<'_>, issuer: &X509Certificate<'_>) -> Result<(), String> {
    let alg = &c.signature_algorithm.algorithm;
    if *alg == OID_PKCS1_SHA1WITHRSA || *alg == OID_SHA1_WITH_RSA {
        return Err("x509: cannot verify signature: insecure algorithm SHA1".into());
    }
    c.verify_signature(Some(issuer.public_key()))
        .map_err(|e| format!("x509: certificate signature does not verify: {e}"))
}

/// A depth-first search for a path from a certificate to a root.
struct Search<'r, 'a> {
    roots: &'r [X509Certificate<'a>],
    pool: &'r [X509Certificate<'a>],
    now: i64,
    /// Intermediates on the current path (each is used at most once).
    used: Vec<usize>,
    /// The most telling reason a candidate issuer was passed over.
    error: Option<String>,
}

impl Search<'_, '_> {
    /// Whether `c`, with `self.used.len()` intermediates already below it, reaches a root.
    fn extend(&mut self, c: &X509Certificate<'_>) -> bool {
        let below = self.used.len();
        for root in self.roots.iter().filter(|r| r.subject().as_raw() == c.issuer().as_raw()) {
            match signed_by(c, root)
                .and_then(|_| check(root, self.now))
                .and_then(|_| may_sign(root, below, false))
            {
                Ok(()) => return true,
                Err(e) => self.error = Some(e),
            }
        }
        if below >= MAX_INTERMEDIATES {
            return false;
        }
        for (i, ic) in self.pool.iter().enumerate() {
            if self.used.contains(&i) || ic.subject().as_raw() != c.issuer().as_raw() {
                continue;
            }
            if let Err(e) =
                signed_by(c, ic).and_then(|_| check(ic, self.now)).and_then(|_| may_sign(ic, below, true))
            {
                self.error = Some(e);
                continue;
            }
            self.used.push(i);
            if self.extend(ic) {
                return true;
            }
            self.used.pop();
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use std::process::Command;

    use rcgen::{
        BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
        date_time_ymd,
    };

    use super::*;

    /// 2030-01-01, inside the default rcgen validity (1975..4096).
    const NOW: i64 = 1_893_456_000;

    fn ca_params(name: &str, constraints: BasicConstraints) -> CertificateParams {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(constraints);
        params.distinguished_name.push(DnType::CommonName, name);
        params
    }

    fn root(name: &str, constraints: BasicConstraints) -> CertifiedIssuer<'static, KeyPair> {
        CertifiedIssuer::self_signed(ca_params(name, constraints), KeyPair::generate().unwrap()).unwrap()
    }

    fn leaf_params(cn: &str) -> CertificateParams {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name.push(DnType::CommonName, cn);
        params
    }

    fn sign(params: CertificateParams, by: &CertifiedIssuer<'static, KeyPair>) -> CertificateDer<'static> {
        params.signed_by(&KeyPair::generate().unwrap(), &**by).unwrap().der().clone()
    }

    fn roots(cas: &[&CertifiedIssuer<'static, KeyPair>]) -> Roots {
        Roots::new(cas.iter().map(|c| c.der().clone()).collect()).unwrap()
    }

    #[test]
    fn openssl_v1_client_certificate_is_accepted() {
        let dir = tempfile::tempdir().unwrap();
        let run = |args: &[&str]| {
            let out = Command::new("openssl").args(args).current_dir(dir.path()).output().expect("openssl");
            assert!(out.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        };
        // As the guides do: a CA, a CSR, `x509 -req` without an extensions file (v1).
        run(&[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "ca.key",
            "-out",
            "ca.crt",
            "-subj",
            "/CN=guide-ca",
            "-days",
            "2",
        ]);
        run(&[
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "u.key",
            "-out",
            "u.csr",
            "-subj",
            "/CN=jane/O=devs",
        ]);
        run(&[
            "x509",
            "-req",
            "-in",
            "u.csr",
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            "u.crt",
            "-days",
            "1",
        ]);
        let load = |f: &str| component_base::tls::load_certs(&dir.path().join(f)).unwrap().remove(0);
        let (ca, leaf) = (load("ca.crt"), load("u.crt"));
        let (_, parsed) = X509Certificate::from_der(leaf.as_ref()).unwrap();
        assert_eq!(parsed.version().0, 0, "openssl made an X.509 v1 certificate");
        let now =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() as i64;
        let roots = Roots::new(vec![ca]).unwrap();
        assert_eq!(roots.verify(&leaf, &[], now), Ok(()));
        // Its validity still counts.
        let err = roots.verify(&leaf, &[], now + 3 * 86_400).unwrap_err();
        assert!(err.starts_with("x509: certificate has expired or is not yet valid"), "{err}");
    }

    #[test]
    fn unknown_authority_and_forged_issuer_names_are_refused() {
        let trusted = root("client CA", BasicConstraints::Unconstrained);
        // Same subject name as the trusted CA, different key.
        let impostor = root("client CA", BasicConstraints::Unconstrained);
        let other = root("other CA", BasicConstraints::Unconstrained);
        let r = roots(&[&trusted]);
        assert_eq!(r.verify(&sign(leaf_params("a"), &other), &[], NOW).unwrap_err(), UNKNOWN_AUTHORITY);
        let err = r.verify(&sign(leaf_params("a"), &impostor), &[], NOW).unwrap_err();
        assert!(err.contains("signature does not verify"), "{err}");
    }

    #[test]
    fn extended_key_usage_must_allow_client_auth() {
        let ca = root("client CA", BasicConstraints::Unconstrained);
        let r = roots(&[&ca]);
        let mut server_only = leaf_params("a");
        server_only.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        assert_eq!(
            r.verify(&sign(server_only, &ca), &[], NOW).unwrap_err(),
            "x509: certificate specifies an incompatible key usage"
        );
        let mut client = leaf_params("a");
        client.extended_key_usages =
            vec![ExtendedKeyUsagePurpose::ServerAuth, ExtendedKeyUsagePurpose::ClientAuth];
        assert_eq!(r.verify(&sign(client, &ca), &[], NOW), Ok(()));
    }

    #[test]
    fn validity_of_leaf_and_issuers() {
        let ca = root("client CA", BasicConstraints::Unconstrained);
        let r = roots(&[&ca]);
        let mut old = leaf_params("a");
        old.not_before = date_time_ymd(2020, 1, 1);
        old.not_after = date_time_ymd(2021, 1, 1);
        let err = r.verify(&sign(old, &ca), &[], NOW).unwrap_err();
        assert!(err.contains("has expired or is not yet valid"), "{err}");
        let mut expired_ca = ca_params("old CA", BasicConstraints::Unconstrained);
        expired_ca.not_after = date_time_ymd(2021, 1, 1);
        let expired_ca = CertifiedIssuer::self_signed(expired_ca, KeyPair::generate().unwrap()).unwrap();
        let err = roots(&[&expired_ca]).verify(&sign(leaf_params("a"), &expired_ca), &[], NOW).unwrap_err();
        assert!(err.contains("has expired or is not yet valid"), "{err}");
    }

    #[test]
    fn intermediates_must_be_cas_within_path_length() {
        let top = root("root", BasicConstraints::Unconstrained);
        let mid = CertifiedIssuer::signed_by(
            ca_params("intermediate", BasicConstraints::Unconstrained),
            KeyPair::generate().unwrap(),
            &top,
        )
        .unwrap();
        let leaf = sign(leaf_params("a"), &mid);
        // The intermediate comes from the client, after its leaf.
        assert_eq!(roots(&[&top]).verify(&leaf, &[mid.der().clone()], NOW), Ok(()));
        assert_eq!(roots(&[&top]).verify(&leaf, &[], NOW).unwrap_err(), UNKNOWN_AUTHORITY);

        // A root limited to no intermediates.
        let strict = root("strict root", BasicConstraints::Constrained(0));
        let mid = CertifiedIssuer::signed_by(
            ca_params("intermediate", BasicConstraints::Unconstrained),
            KeyPair::generate().unwrap(),
            &strict,
        )
        .unwrap();
        let err =
            roots(&[&strict]).verify(&sign(leaf_params("a"), &mid), &[mid.der().clone()], NOW).unwrap_err();
        assert!(err.contains("path length"), "{err}");

        // A leaf certificate cannot act as an intermediate.
        let ca = root("root", BasicConstraints::Unconstrained);
        let not_ca =
            CertifiedIssuer::signed_by(leaf_params("not a CA"), KeyPair::generate().unwrap(), &ca).unwrap();
        let err =
            roots(&[&ca]).verify(&sign(leaf_params("a"), &not_ca), &[not_ca.der().clone()], NOW).unwrap_err();
        assert!(err.contains("not authorized to sign"), "{err}");
    }
}
