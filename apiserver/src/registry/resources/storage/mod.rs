//! storage.k8s.io/v1 beyond StorageClass: the CSI objects the scheduler, the kubelet and
//! the attach/detach controller read and write (CSIDriver, CSINode, CSIStorageCapacity,
//! VolumeAttachment). StorageClass lives in [`super::others`].

pub mod csi_driver;
pub mod csi_node;
pub mod csi_storage_capacity;
pub mod volume_attachment;

use std::sync::Arc;

use k8s_openapi::api::storage::v1 as storage;

use crate::errors::FieldError;
use crate::registry::resource::{Resource, info_of};
use crate::validation::DNS1123_LABEL_MAX;

/// A CSI driver's name where a spec names one (upstream's `ValidateCSIDriverName`): a
/// DNS subdomain (compared in lower case) of at most 63 characters.
pub fn csi_driver_name(field: &str, name: &str) -> (Vec<FieldError>, Vec<FieldError>) {
    let mut required = Vec::new();
    let mut invalid = Vec::new();
    if name.is_empty() {
        required.push(FieldError::required(field, ""));
    }
    if name.len() > DNS1123_LABEL_MAX {
        invalid.push(FieldError::invalid(
            field,
            name,
            format!("must be no more than {DNS1123_LABEL_MAX} characters"),
        ));
    }
    for mut e in crate::validation::dns1123_subdomain(field, &name.to_lowercase()) {
        e.value = Some(name.to_string());
        invalid.push(e);
    }
    (required, invalid)
}

pub fn resources() -> Vec<Arc<Resource>> {
    vec![
        Resource::new::<storage::CSIDriver>(
            info_of::<storage::CSIDriver>("csidriver", &[], &[], false, &[], "csidrivers"),
            csi_driver::CSIDriverHooks,
        ),
        Resource::new::<storage::CSINode>(
            info_of::<storage::CSINode>("csinode", &[], &[], false, &[], "csinodes"),
            csi_node::CSINodeHooks,
        ),
        Resource::new::<storage::CSIStorageCapacity>(
            info_of::<storage::CSIStorageCapacity>(
                "csistoragecapacity",
                &[],
                &[],
                true,
                &[],
                "csistoragecapacities",
            ),
            csi_storage_capacity::CSIStorageCapacityHooks,
        ),
        Resource::new::<storage::VolumeAttachment>(
            info_of::<storage::VolumeAttachment>(
                "volumeattachment",
                &[],
                &[],
                false,
                &["status"],
                "volumeattachments",
            ),
            volume_attachment::VolumeAttachmentHooks,
        ),
    ]
}
