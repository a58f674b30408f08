//! The Certificates API's controllers, as upstream's:
//! - `csrsigning`: one signer per `kubernetes.io/*` signer name that has a CA
//!   (`--cluster-signing-cert-file`/`-key-file`, or the signer's own pair), issuing the
//!   certificate of every approved request the signer's policy accepts and failing the rest
//!   (`Failed`, reason `SignerValidationFailure`);
//! - `csrapproving`: auto-approves kubelet client certificates
//!   (`kubernetes.io/kube-apiserver-client-kubelet`) when a SubjectAccessReview says the
//!   requester may create `certificatesigningrequests/nodeclient` (a bootstrapping node) or
//!   `certificatesigningrequests/selfnodeclient` (a node renewing its own identity);
//! - `csrcleaner`: deletes requests that are done with (denied, failed or issued an hour
//!   ago, pending a day, or whose certificate has expired).

pub mod signer;

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use k8s_openapi::api::authorization::v1::{ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec};
use k8s_openapi::api::certificates::v1::{CertificateSigningRequest, CertificateSigningRequestCondition};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, DeleteParams, PostParams};

use crate::controller::{self, Context, Error};
use crate::informers::{Event, Informer};
use signer::{CertificateAuthority, SignError};

/// Requests approved, denied or failed this long ago are deleted.
const FINISHED_EXPIRATION: Duration = Duration::from_secs(60 * 60);
/// Requests nobody acted on are deleted after a day.
const PENDING_EXPIRATION: Duration = Duration::from_secs(24 * 60 * 60);
/// How often the cleaner looks.
const CLEANER_PERIOD: Duration = Duration::from_secs(60 * 60);

fn condition<'a>(
    csr: &'a CertificateSigningRequest,
    kind: &str,
) -> Option<&'a CertificateSigningRequestCondition> {
    csr.status.as_ref()?.conditions.as_ref()?.iter().find(|c| c.type_ == kind)
}

fn has_certificate(csr: &CertificateSigningRequest) -> bool {
    csr.status.as_ref().and_then(|s| s.certificate.as_ref()).is_some_and(|c| !c.0.is_empty())
}

fn new_condition(kind: &str, reason: &str, message: String) -> CertificateSigningRequestCondition {
    let now = Time(k8s_openapi::jiff::Timestamp::now());
    CertificateSigningRequestCondition {
        type_: kind.into(),
        status: "True".into(),
        reason: Some(reason.into()),
        message: Some(message),
        last_update_time: Some(now.clone()),
        last_transition_time: Some(now),
    }
}

fn watch_requests(
    ctx: &Context,
    name: &str,
) -> (Arc<Informer<CertificateSigningRequest>>, Arc<crate::workqueue::Queue>) {
    let csrs = ctx.informers.get::<CertificateSigningRequest>();
    let queue = ctx.queue(name);
    let q = queue.clone();
    csrs.add_handler(move |e| match e {
        Event::Add(c) | Event::Update(_, c) => q.add(c.metadata.name.clone().unwrap_or_default()),
        Event::Delete(_) => {}
    });
    (csrs, queue)
}

/// `csrsigning`: a worker per signer that has a CA.
pub fn start_signing(ctx: &Context) -> Result<(), Error> {
    if ctx.options.csr_signers.is_empty() {
        tracing::info!("no --cluster-signing-cert-file/--cluster-signing-key-file: not signing certificates");
        return Ok(());
    }
    let mut cas = Vec::new();
    for (name, cert, key) in &ctx.options.csr_signers {
        let ca = CertificateAuthority::from_files(cert, key)
            .map_err(|e| Error::Other(format!("signer {name}: {e}")))?;
        cas.push((*name, Arc::new(ca)));
    }
    let cas = Arc::new(cas);
    let duration = ctx.options.cluster_signing_duration;
    let (csrs, queue) = watch_requests(ctx, "certificate");
    let client = ctx.client.clone();
    controller::run_workers(ctx, queue, 1, move |name| {
        sign(client.clone(), csrs.clone(), cas.clone(), duration, name)
    });
    Ok(())
}

async fn sign(
    client: kube::Client,
    csrs: Arc<Informer<CertificateSigningRequest>>,
    cas: Arc<Vec<(&'static str, Arc<CertificateAuthority>)>>,
    max_duration: Duration,
    name: String,
) -> Result<(), Error> {
    let Some(csr) = csrs.get(&name) else { return Ok(()) };
    let approved = condition(&csr, "Approved").is_some();
    if !approved || condition(&csr, "Failed").is_some() || has_certificate(&csr) {
        return Ok(());
    }
    let Some((_, ca)) = cas.iter().find(|(s, _)| *s == csr.spec.signer_name) else { return Ok(()) };
    let usages = csr.spec.usages.clone().unwrap_or_default();
    let result = signer::parse_request(&csr.spec.request.0)
        .and_then(|req| match signer::refuse(&csr.spec.signer_name, &req, &usages) {
            Some(why) => Err(SignError::Invalid(why)),
            None => Ok(()),
        })
        .and_then(|()| {
            ca.sign(
                &csr.spec.request.0,
                &usages,
                csr.spec.expiration_seconds,
                max_duration,
                SystemTime::now(),
            )
        });
    let mut updated = (*csr).clone();
    let status = updated.status.get_or_insert_default();
    match result {
        Ok(pem) => status.certificate = Some(k8s_openapi::ByteString(pem.into_bytes())),
        Err(SignError::Invalid(why)) => {
            tracing::info!(csr = %name, %why, "signer refused the request");
            status.conditions.get_or_insert_default().push(new_condition(
                "Failed",
                "SignerValidationFailure",
                why,
            ));
        }
        Err(e) => return Err(Error::Other(e.to_string())),
    }
    let api = Api::<CertificateSigningRequest>::all(client);
    match api.replace_status(&name, &PostParams::default(), &updated).await {
        Ok(_) => Ok(()),
        Err(e) if controller::api_code(&e) == Some(404) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// `csrapproving`: kubelet client certificates approved after a SubjectAccessReview.
pub fn start_approving(ctx: &Context) -> Result<(), Error> {
    let (csrs, queue) = watch_requests(ctx, "csrapproving");
    let client = ctx.client.clone();
    controller::run_workers(ctx, queue, 1, move |name| approve(client.clone(), csrs.clone(), name));
    Ok(())
}

/// Whether the request is for a kubelet client certificate: the node identity as subject,
/// no alternative names, client usages only.
fn is_node_client_cert(csr: &CertificateSigningRequest, req: &signer::Request) -> bool {
    csr.spec.signer_name == signer::KUBE_APISERVER_CLIENT_KUBELET
        && signer::refuse(
            signer::KUBE_APISERVER_CLIENT_KUBELET,
            req,
            csr.spec.usages.as_deref().unwrap_or_default(),
        )
        .is_none()
}

async fn approve(
    client: kube::Client,
    csrs: Arc<Informer<CertificateSigningRequest>>,
    name: String,
) -> Result<(), Error> {
    let Some(csr) = csrs.get(&name) else { return Ok(()) };
    if csr.spec.signer_name != signer::KUBE_APISERVER_CLIENT_KUBELET
        || condition(&csr, "Approved").is_some()
        || condition(&csr, "Denied").is_some()
        || has_certificate(&csr)
    {
        return Ok(());
    }
    // A request that does not parse or is not a node client certificate is left for a
    // person (or the signer, which fails it) to decide.
    let Ok(req) = signer::parse_request(&csr.spec.request.0) else { return Ok(()) };
    if !is_node_client_cert(&csr, &req) {
        return Ok(());
    }
    // A node renewing its own certificate first, then any bootstrapper.
    let mut recognizers = Vec::new();
    if csr.spec.username.as_deref() == Some(req.common_name.as_str()) {
        recognizers.push((
            "selfnodeclient",
            "Auto approving self kubelet client certificate after SubjectAccessReview.",
        ));
    }
    recognizers.push(("nodeclient", "Auto approving kubelet client certificate after SubjectAccessReview."));
    for (subresource, message) in recognizers {
        if !authorized(&client, &csr, subresource).await? {
            continue;
        }
        let mut updated = (*csr).clone();
        updated.status.get_or_insert_default().conditions.get_or_insert_default().push(new_condition(
            "Approved",
            "AutoApproved",
            message.into(),
        ));
        let api = Api::<CertificateSigningRequest>::all(client);
        return match api.replace_subresource("approval", &name, &PostParams::default(), &updated).await {
            Ok(_) => Ok(()),
            Err(e) if controller::api_code(&e) == Some(404) => Ok(()),
            Err(e) => Err(e.into()),
        };
    }
    tracing::debug!(csr = %name, "recognized as a node client certificate but the requester may not create it");
    Ok(())
}

async fn authorized(
    client: &kube::Client,
    csr: &CertificateSigningRequest,
    subresource: &str,
) -> Result<bool, Error> {
    let review = SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: csr.spec.username.clone(),
            uid: csr.spec.uid.clone(),
            groups: csr.spec.groups.clone(),
            extra: csr.spec.extra.clone(),
            resource_attributes: Some(ResourceAttributes {
                group: Some("certificates.k8s.io".into()),
                resource: Some("certificatesigningrequests".into()),
                verb: Some("create".into()),
                subresource: Some(subresource.into()),
                ..ResourceAttributes::default()
            }),
            ..SubjectAccessReviewSpec::default()
        },
        ..SubjectAccessReview::default()
    };
    let api = Api::<SubjectAccessReview>::all(client.clone());
    let review = api.create(&PostParams::default(), &review).await?;
    Ok(review.status.is_some_and(|s| s.allowed))
}

/// `csrcleaner`: a sweep at start and every hour.
pub fn start_cleaner(ctx: &Context) -> Result<(), Error> {
    let csrs = ctx.informers.get::<CertificateSigningRequest>();
    let client = ctx.client.clone();
    let (informers, shutdown) = (ctx.informers.clone(), ctx.shutdown.clone());
    tokio::spawn(async move {
        informers.wait_synced().await;
        let mut tick = tokio::time::interval(CLEANER_PERIOD);
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = shutdown.wait() => return,
            }
            let api = Api::<CertificateSigningRequest>::all(client.clone());
            let now = SystemTime::now();
            for csr in csrs.list() {
                let Some(why) = expired(&csr, now) else { continue };
                let name = csr.metadata.name.clone().unwrap_or_default();
                tracing::info!(csr = %name, why, "deleting certificate signing request");
                if let Err(e) = api.delete(&name, &DeleteParams::default()).await {
                    if controller::api_code(&e) != Some(404) {
                        tracing::info!(csr = %name, %e, "deleting failed; retried next sweep");
                    }
                }
            }
        }
    });
    Ok(())
}

fn age(t: Option<&Time>, now: SystemTime) -> Option<Duration> {
    let secs = t?.0.as_second();
    let at = SystemTime::UNIX_EPOCH + Duration::from_secs(u64::try_from(secs).ok()?);
    now.duration_since(at).ok()
}

/// Why the cleaner deletes this request now, if it does.
fn expired(csr: &CertificateSigningRequest, now: SystemTime) -> Option<&'static str> {
    let older = |c: Option<&CertificateSigningRequestCondition>, limit| {
        c.and_then(|c| age(c.last_update_time.as_ref().or(c.last_transition_time.as_ref()), now))
            .is_some_and(|a| a > limit)
    };
    if older(condition(csr, "Denied"), FINISHED_EXPIRATION) {
        return Some("denied over an hour ago");
    }
    if older(condition(csr, "Failed"), FINISHED_EXPIRATION) {
        return Some("failed over an hour ago");
    }
    if has_certificate(csr) {
        if older(condition(csr, "Approved"), FINISHED_EXPIRATION) {
            return Some("issued over an hour ago");
        }
        if certificate_expired(csr, now) {
            return Some("its certificate has expired");
        }
        return None;
    }
    if condition(csr, "Approved").is_none() && condition(csr, "Denied").is_none() {
        let created = age(csr.metadata.creation_timestamp.as_ref(), now);
        if created.is_some_and(|a| a > PENDING_EXPIRATION) {
            return Some("pending for over a day");
        }
    }
    None
}

fn certificate_expired(csr: &CertificateSigningRequest, now: SystemTime) -> bool {
    use rustls_pki_types::pem::PemObject;
    use x509_parser::prelude::{FromDer, X509Certificate};
    let Some(pem) = csr.status.as_ref().and_then(|s| s.certificate.as_ref()) else { return false };
    let Some(Ok(der)) = rustls_pki_types::CertificateDer::pem_slice_iter(&pem.0).next() else { return false };
    let Ok((_, cert)) = X509Certificate::from_der(&der) else { return false };
    let not_after = cert.validity().not_after.timestamp();
    now.duration_since(SystemTime::UNIX_EPOCH)
        .is_ok_and(|n| i64::try_from(n.as_secs()).unwrap_or(i64::MAX) > not_after)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::certificates::v1::{
        CertificateSigningRequestSpec, CertificateSigningRequestStatus,
    };

    fn at(secs_ago: u64) -> Time {
        let t = k8s_openapi::jiff::Timestamp::now()
            - k8s_openapi::jiff::SignedDuration::from_secs(secs_ago as i64);
        Time(t)
    }

    fn csr(conditions: Vec<(&str, u64)>, certificate: bool, created_ago: u64) -> CertificateSigningRequest {
        CertificateSigningRequest {
            metadata: kube::api::ObjectMeta {
                name: Some("c".into()),
                creation_timestamp: Some(at(created_ago)),
                ..Default::default()
            },
            spec: CertificateSigningRequestSpec {
                signer_name: signer::KUBE_APISERVER_CLIENT.into(),
                ..Default::default()
            },
            status: Some(CertificateSigningRequestStatus {
                certificate: certificate.then(|| k8s_openapi::ByteString(b"not a certificate".to_vec())),
                conditions: Some(
                    conditions
                        .into_iter()
                        .map(|(t, ago)| CertificateSigningRequestCondition {
                            type_: t.into(),
                            status: "True".into(),
                            last_update_time: Some(at(ago)),
                            ..Default::default()
                        })
                        .collect(),
                ),
            }),
        }
    }

    #[test]
    fn cleaner_thresholds() {
        let now = SystemTime::now();
        assert_eq!(expired(&csr(vec![("Denied", 3700)], false, 4000), now), Some("denied over an hour ago"));
        assert_eq!(expired(&csr(vec![("Denied", 60)], false, 4000), now), None);
        assert_eq!(expired(&csr(vec![("Approved", 3700)], true, 4000), now), Some("issued over an hour ago"));
        // Approved but not issued yet: the signer still has work to do.
        assert_eq!(expired(&csr(vec![("Approved", 3700)], false, 4000), now), None);
        assert_eq!(expired(&csr(vec![], false, 90_000), now), Some("pending for over a day"));
        assert_eq!(expired(&csr(vec![], false, 3600), now), None);
        assert_eq!(expired(&csr(vec![("Failed", 3700)], false, 4000), now), Some("failed over an hour ago"));
    }
}
