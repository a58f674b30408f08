//! certificates.k8s.io/v1: CertificateSigningRequests, with the `status` subresource
//! (signers write the certificate and Failed conditions) and the `approval` subresource
//! (approvers write Approved or Denied conditions, e.g. `kubectl certificate approve`).

pub mod certificate_signing_request;
pub mod pem;

use std::sync::Arc;

use k8s_openapi::api::certificates::v1;

use crate::registry::resource::{Resource, info_of};

pub fn resources() -> Vec<Arc<Resource>> {
    vec![Resource::new::<v1::CertificateSigningRequest>(
        info_of::<v1::CertificateSigningRequest>(
            "certificatesigningrequest",
            &["csr"],
            &[],
            false,
            &["status", "approval"],
            "certificatesigningrequests",
        ),
        certificate_signing_request::CertificateSigningRequestHooks,
    )]
}
