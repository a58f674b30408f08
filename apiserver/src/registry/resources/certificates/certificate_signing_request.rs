//! CertificateSigningRequests (upstream's csr strategies and `ValidateCertificateSigningRequest*`).
//!
//! - Create: the requester (`spec.username`, `uid`, `groups`, `extra`) is whoever sent the
//!   request, whatever the body says, and status starts empty: nobody creates an approved
//!   request.
//! - Update of the main resource: spec and status stay as stored (only metadata changes).
//! - `status`: the spec stays; Approved/Denied conditions may be neither added nor
//!   removed nor changed there (their stored instances are kept), Failed ones may not be
//!   removed, and an issued certificate never changes.
//! - `approval`: only the conditions change; Approved/Denied ones may not be removed.
//!
//! Every write checks the request PEM (a CERTIFICATE REQUEST whose signature verifies),
//! usages, signer name, duration, conditions and certificate PEM. Condition timestamps
//! are filled in as upstream's `populateConditionTimestamps` does.

use std::collections::HashSet;

use base64::Engine;
use serde_json::{Value, json};

use super::pem;
use crate::errors::FieldError;
use crate::registry::resource::{Hooks, copy_field, keep_spec};
use crate::registry::store::now_rfc3339;
use crate::validation::{DNS1123_SUBDOMAIN_MAX, NameRule, index, is_dns1123_label};

pub struct CertificateSigningRequestHooks;

/// `certificates.KeyUsage` values, sorted.
const USAGES: &[&str] = &[
    "any",
    "cert sign",
    "client auth",
    "code signing",
    "content commitment",
    "crl sign",
    "data encipherment",
    "decipher only",
    "digital signature",
    "email protection",
    "encipher only",
    "ipsec end system",
    "ipsec tunnel",
    "ipsec user",
    "key agreement",
    "key encipherment",
    "microsoft sgc",
    "netscape sgc",
    "ocsp signing",
    "s/mime",
    "server auth",
    "signing",
    "timestamping",
];
const LEGACY_SIGNER: &str = "kubernetes.io/legacy-unknown";
const SIGNER_FORM: &str = "must be a fully qualified domain and path of the form 'example.com/signer-name'";
const MIN_EXPIRATION_SECONDS: i64 = 600;

fn conditions(obj: &Value) -> &[Value] {
    obj["status"]["conditions"].as_array().map(Vec::as_slice).unwrap_or_default()
}

fn count_of(obj: &Value, kind: &str) -> usize {
    conditions(obj).iter().filter(|c| c["type"] == kind).count()
}

/// Bytes of a `[]byte` field (base64 in JSON).
fn bytes_of(v: &Value) -> Vec<u8> {
    v.as_str().and_then(|s| base64::engine::general_purpose::STANDARD.decode(s).ok()).unwrap_or_default()
}

/// Go's `%#v` of a byte slice, as upstream prints an invalid request.
fn go_bytes(b: &[u8]) -> String {
    let items: Vec<String> = b.iter().map(|x| format!("0x{x:x}")).collect();
    format!("[]byte{{{}}}", items.join(", "))
}

/// Parses the request PEM and checks its signature (upstream's `ParseCSR` and
/// `CheckSignature`).
fn check_request(pem_bytes: &[u8]) -> Result<(), String> {
    let block = pem::blocks(pem_bytes).into_iter().next();
    let Some(block) = block.filter(|b| b.label == "CERTIFICATE REQUEST") else {
        return Err("PEM block type must be CERTIFICATE REQUEST".into());
    };
    use x509_parser::prelude::FromDer;
    let (_, csr) = x509_parser::certification_request::X509CertificationRequest::from_der(&block.der)
        .map_err(|e| format!("asn1: structure error: {e}"))?;
    verify_signature(&csr)
}

/// The request's self-signature, with the algorithms Go's x509 accepts for CSRs.
fn verify_signature(
    csr: &x509_parser::certification_request::X509CertificationRequest<'_>,
) -> Result<(), String> {
    use ring::signature as sig;
    let info = &csr.certification_request_info;
    let key = info.subject_pki.subject_public_key.data.as_ref();
    let curve = info
        .subject_pki
        .algorithm
        .parameters
        .as_ref()
        .and_then(|p| p.as_oid().ok())
        .map(|o| o.to_id_string())
        .unwrap_or_default();
    const P256: &str = "1.2.840.10045.3.1.7";
    const P384: &str = "1.3.132.0.34";
    let alg: &dyn sig::VerificationAlgorithm =
        match (csr.signature_algorithm.algorithm.to_id_string().as_str(), curve.as_str()) {
            ("1.2.840.113549.1.1.11", _) => &sig::RSA_PKCS1_2048_8192_SHA256,
            ("1.2.840.113549.1.1.12", _) => &sig::RSA_PKCS1_2048_8192_SHA384,
            ("1.2.840.113549.1.1.13", _) => &sig::RSA_PKCS1_2048_8192_SHA512,
            ("1.2.840.10045.4.3.2", P256) => &sig::ECDSA_P256_SHA256_ASN1,
            ("1.2.840.10045.4.3.2", P384) => &sig::ECDSA_P384_SHA256_ASN1,
            ("1.2.840.10045.4.3.3", P256) => &sig::ECDSA_P256_SHA384_ASN1,
            ("1.2.840.10045.4.3.3", P384) => &sig::ECDSA_P384_SHA384_ASN1,
            ("1.3.101.112", _) => &sig::ED25519,
            _ => return Err("x509: cannot verify signature: algorithm unimplemented".into()),
        };
    sig::UnparsedPublicKey::new(alg, key)
        .verify(info.raw, csr.signature_value.data.as_ref())
        .map_err(|_| "x509: signature verification failure".to_string())
}

/// Upstream's `validateCertificate`: empty, or CERTIFICATE blocks only, without headers,
/// each holding certificates.
fn check_certificate(pem_bytes: &[u8]) -> Result<(), String> {
    if pem_bytes.is_empty() {
        return Ok(());
    }
    let blocks = pem::blocks(pem_bytes);
    if blocks.is_empty() {
        return Err("must contain at least one CERTIFICATE PEM block".into());
    }
    for b in blocks {
        if b.label != "CERTIFICATE" {
            return Err(format!("only CERTIFICATE PEM blocks are allowed, found \"{}\"", b.label));
        }
        if b.has_headers {
            return Err("no PEM block headers are permitted".into());
        }
        if let Err(e) = x509_parser::parse_x509_certificate(&b.der) {
            return Err(format!("x509: malformed certificate: {e}"));
        }
    }
    Ok(())
}

/// `ValidateSignerName`.
fn signer_name(field: &str, name: &str) -> Vec<FieldError> {
    if name.is_empty() {
        return vec![FieldError::required(field, "")];
    }
    let segments: Vec<&str> = name.split('/').collect();
    let [domain, path] = segments.as_slice() else {
        return vec![FieldError::invalid(field, name, SIGNER_FORM)];
    };
    let mut errs = Vec::new();
    if domain.len() > DNS1123_SUBDOMAIN_MAX {
        errs.push(FieldError::too_long(field, DNS1123_SUBDOMAIN_MAX));
    }
    let labels: Vec<&str> = domain.split('.').collect();
    if let Some(bad) = labels.iter().find(|l| !is_dns1123_label(l)) {
        for e in crate::validation::dns1123_label(field, bad) {
            errs.push(FieldError::invalid(
                field,
                *domain,
                format!("validating label \"{bad}\": {}", e.detail),
            ));
        }
    }
    if labels.len() < 2 {
        errs.push(FieldError::invalid(
            field,
            *domain,
            "should be a domain with at least two segments separated by dots",
        ));
    }
    if let Some(bad) = path.split('.').find(|l| !is_dns1123_label(l)) {
        for e in crate::validation::dns1123_label(field, bad) {
            errs.push(FieldError::invalid(field, *path, format!("validating label \"{bad}\": {}", e.detail)));
        }
    }
    let max_path = DNS1123_SUBDOMAIN_MAX.saturating_sub(domain.len() + 1);
    if path.len() > max_path {
        errs.push(FieldError::too_long(field, max_path));
    }
    errs
}

/// Upstream's `validateConditions`.
fn validate_conditions(obj: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let (mut approved, mut denied) = (false, false);
    let mut seen = HashSet::new();
    for (i, c) in conditions(obj).iter().enumerate() {
        let p = index("status.conditions", i);
        let kind = c["type"].as_str().unwrap_or_default();
        let status = c["status"].as_str().unwrap_or_default();
        if kind.is_empty() {
            errs.push(FieldError::required(format!("{p}.type"), ""));
        }
        if !["True", "False", "Unknown"].contains(&status) {
            errs.push(FieldError::not_supported(
                format!("{p}.status"),
                status,
                &["False", "True", "Unknown"],
            ));
        }
        match kind {
            "Approved" | "Denied" => {
                if (kind == "Approved" && denied) || (kind == "Denied" && approved) {
                    errs.push(FieldError::invalid(
                        format!("{p}.type"),
                        kind,
                        "Approved and Denied conditions are mutually exclusive",
                    ));
                }
                if kind == "Approved" {
                    approved = true;
                } else {
                    denied = true;
                }
                if status != "True" {
                    errs.push(FieldError::not_supported(format!("{p}.status"), status, &["True"]));
                }
            }
            _ => {}
        }
        if !seen.insert(kind) {
            errs.push(FieldError::duplicate(format!("{p}.type"), kind));
        }
    }
    errs
}

/// Upstream's `populateConditionTimestamps`: a condition without `lastUpdateTime` gets
/// now; one without `lastTransitionTime` keeps the stored one of the same type and status,
/// else now.
fn populate_condition_timestamps(new: &mut Value, old: &Value) {
    let now = now_rfc3339();
    let old_conditions = conditions(old).to_vec();
    let Some(list) = new["status"].get_mut("conditions").and_then(Value::as_array_mut) else { return };
    for c in list {
        if c["lastUpdateTime"].as_str().is_none_or(str::is_empty) {
            c["lastUpdateTime"] = json!(now);
        }
        if c["lastTransitionTime"].as_str().is_none_or(str::is_empty) {
            let kept = old_conditions
                .iter()
                .find(|o| {
                    o["type"] == c["type"]
                        && o["status"] == c["status"]
                        && o["lastTransitionTime"].is_string()
                })
                .map(|o| o["lastTransitionTime"].clone());
            c["lastTransitionTime"] = kept.unwrap_or_else(|| json!(now));
        }
    }
}

/// Upstream's `preserveConditionInstances`: the stored instances of `kind` replace the
/// written ones in order, when their number did not change.
fn preserve_condition_instances(new: &mut Value, old: &Value, kind: &str) {
    let old_instances: Vec<Value> = conditions(old).iter().filter(|c| c["type"] == kind).cloned().collect();
    let Some(list) = new["status"].get_mut("conditions").and_then(Value::as_array_mut) else { return };
    let positions: Vec<usize> =
        list.iter().enumerate().filter(|(_, c)| c["type"] == kind).map(|(i, _)| i).collect();
    if positions.len() == old_instances.len() {
        for (i, o) in positions.into_iter().zip(old_instances) {
            list[i] = o;
        }
    }
}

impl Hooks for CertificateSigningRequestHooks {
    /// Any name a URL path can carry, as upstream's `ValidateCertificateRequestName`
    /// ("we don't care what you call your certificate requests"): kubelets name theirs
    /// `node-csr-<base64url digest>`, with capitals and underscores.
    fn name_rule(&self) -> NameRule {
        NameRule::PathSegment
    }

    /// The requester is who sent the request; status starts empty.
    fn prepare_for_create(&self, obj: &mut Value) {
        obj["status"] = json!({});
        let Some(scope) = crate::context::current() else { return };
        let user = &scope.user;
        let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) else { return };
        for f in ["username", "uid", "groups", "extra"] {
            spec.remove(f);
        }
        if !user.name.is_empty() {
            spec.insert("username".into(), json!(user.name));
        }
        if !user.uid.is_empty() {
            spec.insert("uid".into(), json!(user.uid));
        }
        if !user.groups.is_empty() {
            spec.insert("groups".into(), json!(user.groups));
        }
        if !user.extra.is_empty() {
            spec.insert("extra".into(), json!(user.extra));
        }
    }

    fn prepare_for_update(&self, new: &mut Value, old: &Value) {
        copy_field(new, old, "spec");
        copy_field(new, old, "status");
    }

    fn prepare_for_status_update(&self, new: &mut Value, old: &Value) {
        keep_spec(new, old);
        for kind in ["Approved", "Denied"] {
            preserve_condition_instances(new, old, kind);
        }
        populate_condition_timestamps(new, old);
    }

    /// `approval`: only the conditions come from the request.
    fn prepare_for_subresource_update(&self, sub: &str, new: &mut Value, old: &Value) {
        if sub != "approval" {
            keep_spec(new, old);
            return;
        }
        keep_spec(new, old);
        let written = new["status"].get("conditions").cloned();
        copy_field(new, old, "status");
        if !new["status"].is_object() {
            new["status"] = json!({});
        }
        match written {
            Some(c) => new["status"]["conditions"] = c,
            None => {
                if let Some(s) = new["status"].as_object_mut() {
                    s.remove("conditions");
                }
            }
        }
        populate_condition_timestamps(new, old);
    }

    fn validate(&self, obj: &Value) -> Vec<FieldError> {
        let spec = &obj["spec"];
        let mut errs = Vec::new();
        let request = bytes_of(&spec["request"]);
        if let Err(e) = check_request(&request) {
            errs.push(FieldError::invalid("spec.request", go_bytes(&request), e));
        }
        let usages: Vec<&str> =
            spec["usages"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
        if usages.is_empty() {
            errs.push(FieldError::required("spec.usages", ""));
        }
        let mut seen = HashSet::new();
        for (i, u) in usages.iter().enumerate() {
            if !USAGES.contains(u) {
                errs.push(FieldError::not_supported(index("spec.usages", i), u, USAGES));
            }
        }
        for (i, u) in usages.iter().enumerate() {
            if !seen.insert(u) {
                errs.push(FieldError::duplicate(index("spec.usages", i), u));
            }
        }
        let signer = spec["signerName"].as_str().unwrap_or_default();
        if signer == LEGACY_SIGNER {
            errs.push(FieldError::invalid(
                "spec.signerName",
                signer,
                "the legacy signerName is not allowed via this API version",
            ));
        } else {
            errs.extend(signer_name("spec.signerName", signer));
        }
        if let Some(s) = spec["expirationSeconds"].as_i64().filter(|s| *s < MIN_EXPIRATION_SECONDS) {
            errs.push(FieldError::invalid(
                "spec.expirationSeconds",
                s,
                "may not specify a duration less than 600 seconds (10 minutes)",
            ));
        }
        errs.extend(validate_conditions(obj));
        if let Err(e) = check_certificate(&bytes_of(&obj["status"]["certificate"])) {
            errs.push(FieldError::invalid("status.certificate", "<certificate data>", e));
        }
        errs
    }

    fn validate_subresource_update(&self, sub: &str, new: &Value, old: &Value) -> Vec<FieldError> {
        let mut errs = Vec::new();
        match sub {
            "status" => {
                for kind in ["Approved", "Denied"] {
                    let (n, o) = (count_of(new, kind), count_of(old, kind));
                    if n > o {
                        errs.push(FieldError::forbidden(
                            "status.conditions",
                            format!("updates may not add a condition of type \"{kind}\""),
                        ));
                    } else if n < o {
                        errs.push(FieldError::forbidden(
                            "status.conditions",
                            format!("updates may not remove a condition of type \"{kind}\""),
                        ));
                    }
                }
                if count_of(new, "Failed") < count_of(old, "Failed") {
                    errs.push(FieldError::forbidden(
                        "status.conditions",
                        "updates may not remove a condition of type \"Failed\"",
                    ));
                }
                let (n, o) = (&new["status"]["certificate"], &old["status"]["certificate"]);
                if n != o && !bytes_of(o).is_empty() {
                    errs.push(FieldError::forbidden(
                        "status.certificate",
                        "updates may not modify existing certificate content",
                    ));
                }
            }
            "approval" => {
                for kind in ["Approved", "Denied"] {
                    if count_of(new, kind) < count_of(old, kind) {
                        errs.push(FieldError::forbidden(
                            "status.conditions",
                            format!("updates may not remove a condition of type \"{kind}\""),
                        ));
                    }
                }
            }
            _ => {}
        }
        errs
    }

    fn fields(&self, obj: &Value) -> Vec<(&'static str, String)> {
        vec![("spec.signerName", obj["spec"]["signerName"].as_str().unwrap_or_default().to_string())]
    }

    fn field_names(&self) -> &'static [&'static str] {
        &["spec.signerName"]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn csr_pem() -> Vec<u8> {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name.push(rcgen::DnType::CommonName, "probe");
        params.serialize_request(&key).unwrap().pem().unwrap().into_bytes()
    }

    fn csr() -> Value {
        json!({
            "metadata": { "name": "c" },
            "spec": {
                "request": base64::engine::general_purpose::STANDARD.encode(csr_pem()),
                "signerName": "example.com/s",
                "usages": ["client auth"],
            },
        })
    }

    fn texts(errs: &[FieldError]) -> Vec<String> {
        errs.iter().map(FieldError::to_text).collect()
    }

    #[test]
    fn requests_are_checked() {
        assert!(CertificateSigningRequestHooks.validate(&csr()).is_empty());
        let mut bad = csr();
        bad["spec"] = json!({
            "request": base64::engine::general_purpose::STANDARD.encode(b"junk"),
            "signerName": "nope", "usages": ["bogus", "client auth", "client auth"], "expirationSeconds": 60,
        });
        let t = texts(&CertificateSigningRequestHooks.validate(&bad));
        assert_eq!(
            t[0],
            "spec.request: Invalid value: []byte{0x6a, 0x75, 0x6e, 0x6b}: PEM block type must be CERTIFICATE REQUEST"
        );
        assert!(t[1].starts_with(
            "spec.usages[0]: Unsupported value: \"bogus\": supported values: \"any\", \"cert sign\""
        ));
        assert_eq!(t[2], "spec.usages[2]: Duplicate value: \"client auth\"");
        assert_eq!(t[3], format!("spec.signerName: Invalid value: \"nope\": {SIGNER_FORM}"));
        assert_eq!(
            t[4],
            "spec.expirationSeconds: Invalid value: 60: may not specify a duration less than 600 seconds (10 minutes)"
        );
        // A request whose signature does not verify (a byte of the signature flipped).
        let pem = String::from_utf8(csr_pem()).unwrap();
        let block = &pem::blocks(pem.as_bytes())[0];
        let mut der = block.der.clone();
        let last = der.len() - 1;
        der[last] ^= 1;
        let forged = format!(
            "-----BEGIN CERTIFICATE REQUEST-----\n{}\n-----END CERTIFICATE REQUEST-----\n",
            base64::engine::general_purpose::STANDARD.encode(&der)
        );
        assert_eq!(check_request(forged.as_bytes()), Err("x509: signature verification failure".into()));
        let mut legacy = csr();
        legacy["spec"]["signerName"] = json!(LEGACY_SIGNER);
        assert!(
            texts(&CertificateSigningRequestHooks.validate(&legacy))[0]
                .ends_with("the legacy signerName is not allowed via this API version")
        );
    }

    #[test]
    fn conditions_and_subresources() {
        let mut both = csr();
        both["status"] = json!({ "conditions": [{ "type": "Approved", "status": "True" }, { "type": "Denied", "status": "True" }] });
        assert_eq!(
            texts(&CertificateSigningRequestHooks.validate(&both)),
            [
                "status.conditions[1].type: Invalid value: \"Denied\": Approved and Denied conditions are mutually exclusive"
            ]
        );
        let mut approved = csr();
        approved["status"] =
            json!({ "conditions": [{ "type": "Approved", "status": "True", "reason": "KubectlApprove" }] });
        // Status writes may not add approval, nor change a stored approval's content.
        let e = CertificateSigningRequestHooks.validate_subresource_update("status", &approved, &csr());
        assert_eq!(
            texts(&e),
            ["status.conditions: Forbidden: updates may not add a condition of type \"Approved\""]
        );
        let mut changed = approved.clone();
        changed["status"]["conditions"][0]["reason"] = json!("changed");
        changed["spec"]["usages"] = json!(["server auth"]);
        CertificateSigningRequestHooks.prepare_for_status_update(&mut changed, &approved);
        assert_eq!(changed["status"]["conditions"][0]["reason"], "KubectlApprove");
        assert_eq!(changed["spec"]["usages"], json!(["client auth"]));
        // Approval writes change the conditions only, and fill in their timestamps.
        let mut approval = approved.clone();
        approval["status"]["certificate"] = json!("eA==");
        CertificateSigningRequestHooks.prepare_for_subresource_update("approval", &mut approval, &csr());
        assert!(approval["status"].get("certificate").is_none());
        assert!(approval["status"]["conditions"][0]["lastUpdateTime"].is_string());
        let e = CertificateSigningRequestHooks.validate_subresource_update("approval", &csr(), &approved);
        assert_eq!(
            texts(&e),
            ["status.conditions: Forbidden: updates may not remove a condition of type \"Approved\""]
        );
    }
}
