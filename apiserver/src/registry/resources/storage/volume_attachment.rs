//! VolumeAttachments (upstream's volumeattachment strategy and `ValidateVolumeAttachment`):
//! the attach/detach controller asks a CSI driver's attacher to attach a volume to a node;
//! the attacher answers in status. The spec never changes; a status write changes status
//! only (`ResetObjectMetaForStatus`), and v1 clients may not set status on create.

use serde_json::Value;

use super::csi_driver_name;
use crate::errors::FieldError;
use crate::registry::resource::{Hooks, keep_spec, reset_meta_for_status};
use crate::validation::{self as v, IMMUTABLE_MSG, show};

pub struct VolumeAttachmentHooks;

/// Upstream's `maxVolumeErrorMessageSize` and `maxAttachedVolumeMetadataSize`.
const MAX_ERROR_MESSAGE: usize = 1024;
const MAX_METADATA_BYTES: usize = 256 * 1024;
const ONE_SOURCE: &str = "must specify exactly one of inlineVolumeSpec and persistentVolumeName";

fn validate_status(status: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let size: usize = status["attachmentMetadata"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(k, v)| k.len() + v.as_str().map_or(0, str::len))
        .sum();
    if size > MAX_METADATA_BYTES {
        errs.push(FieldError::too_long("status.attachmentMetadata", MAX_METADATA_BYTES));
    }
    for e in ["attachError", "detachError"] {
        if status[e]["message"].as_str().is_some_and(|m| m.len() > MAX_ERROR_MESSAGE) {
            errs.push(FieldError::too_long(format!("status.{e}.message"), MAX_ERROR_MESSAGE));
        }
    }
    errs
}

impl Hooks for VolumeAttachmentHooks {
    /// v1 clients may not set status on create; it starts as not attached (upstream's
    /// status is a struct, so it is always there).
    fn prepare_for_create(&self, obj: &mut Value) {
        obj["status"] = serde_json::json!({ "attached": false });
    }

    fn prepare_for_status_update(&self, new: &mut Value, old: &Value) {
        keep_spec(new, old);
        reset_meta_for_status(new, old);
    }

    /// Upstream's order: the attacher's presence, the source, the node, then (for v1) the
    /// attacher's form.
    fn validate(&self, obj: &Value) -> Vec<FieldError> {
        let spec = &obj["spec"];
        let (required, invalid) =
            csi_driver_name("spec.attacher", spec["attacher"].as_str().unwrap_or_default());
        let mut errs = required;
        let src = &spec["source"];
        match (
            src.get("persistentVolumeName").filter(|p| !p.is_null()),
            src.get("inlineVolumeSpec").filter(|p| !p.is_null()),
        ) {
            (None, None) => errs.push(FieldError::required("spec.source", ONE_SOURCE)),
            (Some(_), Some(_)) => errs.push(FieldError::forbidden("spec.source", ONE_SOURCE)),
            (Some(pv), None) => {
                if pv.as_str().is_none_or(str::is_empty) {
                    errs.push(FieldError::required(
                        "spec.source.persistentVolumeName",
                        "must specify non empty persistentVolumeName",
                    ));
                }
            }
            (None, Some(inline)) => {
                if !inline["csi"].is_object() {
                    errs.push(FieldError::required(
                        "spec.source.inlineVolumeSpec.csi",
                        "must specify a CSI persistent volume source",
                    ));
                }
            }
        }
        errs.extend(v::dns1123_subdomain("spec.nodeName", spec["nodeName"].as_str().unwrap_or_default()));
        errs.extend(validate_status(&obj["status"]));
        errs.extend(invalid);
        errs
    }

    fn validate_update(&self, new: &Value, old: &Value) -> Vec<FieldError> {
        if new["spec"] != old["spec"] {
            return vec![FieldError::invalid("spec", show(&new["spec"]), IMMUTABLE_MSG)];
        }
        Vec::new()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn spec_rules_and_status_writes() {
        let ok = json!({ "metadata": { "name": "va", "labels": { "l": "1" } }, "spec": { "attacher": "d.example.com", "nodeName": "n1", "source": { "persistentVolumeName": "pv1" } } });
        assert!(VolumeAttachmentHooks.validate(&ok).is_empty());
        let bad = json!({ "spec": { "attacher": "", "nodeName": "", "source": {} } });
        let texts: Vec<String> =
            VolumeAttachmentHooks.validate(&bad).iter().map(FieldError::to_text).collect();
        assert_eq!(texts[0], "spec.attacher: Required value");
        assert_eq!(texts[1], format!("spec.source: Required value: {ONE_SOURCE}"));
        assert!(texts[2].starts_with("spec.nodeName: Invalid value: \"\""));
        assert!(texts[3].starts_with("spec.attacher: Invalid value: \"\""));
        let mut moved = ok.clone();
        moved["spec"]["nodeName"] = json!("n2");
        assert!(
            VolumeAttachmentHooks.validate_update(&moved, &ok)[0].to_text().ends_with("field is immutable")
        );
        let mut status = moved.clone();
        status["metadata"]["labels"] = json!({ "l": "2" });
        status["status"] = json!({ "attached": true });
        VolumeAttachmentHooks.prepare_for_status_update(&mut status, &ok);
        assert_eq!(
            (status["spec"]["nodeName"].as_str(), status["metadata"]["labels"]["l"].as_str()),
            (Some("n1"), Some("1"))
        );
        assert_eq!(status["status"]["attached"], true);
    }
}
