//! CSIStorageCapacities (upstream's `ValidateCSIStorageCapacity`): how much a storage
//! class can still provision in a topology segment, published by CSI drivers and read by
//! the scheduler's volume binding. The class and the segment never change.

use serde_json::Value;

use crate::errors::FieldError;
use crate::registry::resource::Hooks;
use crate::validation::{self as v, NONNEGATIVE_MSG, show};

pub struct CSIStorageCapacityHooks;

fn nonnegative_quantity(field: &str, q: &Value) -> Vec<FieldError> {
    if q.is_null() {
        return Vec::new();
    }
    match v::quantity(field, q) {
        Err(e) => vec![e],
        Ok(Some(n)) if n < 0 => vec![FieldError::invalid(field, show(q), NONNEGATIVE_MSG)],
        _ => Vec::new(),
    }
}

impl Hooks for CSIStorageCapacityHooks {
    fn validate(&self, obj: &Value) -> Vec<FieldError> {
        let mut errs = v::label_selector("nodeTopology", &obj["nodeTopology"]);
        errs.extend(v::dns1123_subdomain(
            "storageClassName",
            obj["storageClassName"].as_str().unwrap_or_default(),
        ));
        errs.extend(nonnegative_quantity("capacity", &obj["capacity"]));
        errs.extend(nonnegative_quantity("maximumVolumeSize", &obj["maximumVolumeSize"]));
        errs
    }

    fn validate_update(&self, new: &Value, old: &Value) -> Vec<FieldError> {
        let mut errs = v::immutable("storageClassName", &new["storageClassName"], &old["storageClassName"]);
        errs.extend(v::immutable("nodeTopology", &new["nodeTopology"], &old["nodeTopology"]));
        errs
    }

    fn has_status(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn class_and_quantities() {
        let ok = json!({ "storageClassName": "sc", "capacity": "1Gi", "nodeTopology": { "matchLabels": { "a": "b" } } });
        assert!(CSIStorageCapacityHooks.validate(&ok).is_empty());
        let bad = json!({ "storageClassName": "", "capacity": "-1Gi", "maximumVolumeSize": "-2" });
        let texts: Vec<String> =
            CSIStorageCapacityHooks.validate(&bad).iter().map(FieldError::to_text).collect();
        assert!(
            texts[0].starts_with("storageClassName: Invalid value: \"\": a lowercase RFC 1123 subdomain")
        );
        assert_eq!(texts[1], "capacity: Invalid value: \"-1Gi\": must be greater than or equal to 0");
        let mut moved = ok.clone();
        moved["storageClassName"] = json!("other");
        moved["capacity"] = json!("2Gi");
        let e = CSIStorageCapacityHooks.validate_update(&moved, &ok);
        assert_eq!(e.len(), 1);
        assert_eq!(e[0].to_text(), "storageClassName: Invalid value: \"other\": field is immutable");
    }
}
