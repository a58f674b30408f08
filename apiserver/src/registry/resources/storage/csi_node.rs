//! CSINodes (upstream's `ValidateCSINode`): the CSI drivers a node's kubelet registered,
//! with their node IDs, topology keys and volume limits. A driver's entry never changes
//! once there (drivers come and go as a whole).

use std::collections::HashSet;

use serde_json::Value;

use super::csi_driver_name;
use crate::errors::FieldError;
use crate::registry::resource::Hooks;
use crate::validation::{NONNEGATIVE_MSG, index, qualified_name, show};

pub struct CSINodeHooks;

/// Node IDs may be this long (upstream's `csiNodeIDLongerMaxLength`).
const NODE_ID_MAX: usize = 256;

impl Hooks for CSINodeHooks {
    fn validate(&self, obj: &Value) -> Vec<FieldError> {
        let mut errs = Vec::new();
        let mut names = HashSet::new();
        for (i, d) in obj["spec"]["drivers"].as_array().into_iter().flatten().enumerate() {
            let p = index("spec.drivers", i);
            let name = d["name"].as_str().unwrap_or_default();
            let (required, invalid) = csi_driver_name(&format!("{p}.name"), name);
            errs.extend(required);
            errs.extend(invalid);
            let id = d["nodeID"].as_str().unwrap_or_default();
            if id.is_empty() {
                errs.push(FieldError::required(format!("{p}.nodeID"), ""));
            } else if id.len() > NODE_ID_MAX {
                errs.push(FieldError::invalid(
                    format!("{p}.nodeID"),
                    id,
                    format!("must be {NODE_ID_MAX} characters or less"),
                ));
            }
            if let Some(n) = d["allocatable"]["count"].as_i64().filter(|n| *n < 0) {
                errs.push(FieldError::invalid(format!("{p}.allocatable.count"), n, NONNEGATIVE_MSG));
            }
            // (Upstream reports topology key errors at the driver's path.)
            let mut keys = HashSet::new();
            for k in d["topologyKeys"].as_array().into_iter().flatten() {
                let k = k.as_str().unwrap_or_default();
                if !keys.insert(k) {
                    errs.push(FieldError::duplicate(&p, k));
                }
                errs.extend(qualified_name(&p, k));
            }
            if !names.insert(name) {
                errs.push(FieldError::duplicate(format!("{p}.name"), name));
            }
        }
        errs
    }

    fn validate_update(&self, new: &Value, old: &Value) -> Vec<FieldError> {
        let mut errs = Vec::new();
        let new_drivers = new["spec"]["drivers"].as_array().cloned().unwrap_or_default();
        for od in old["spec"]["drivers"].as_array().into_iter().flatten() {
            if let Some(nd) = new_drivers.iter().find(|d| d["name"] == od["name"])
                && nd != od
            {
                errs.push(FieldError::invalid("CSINodeDriver", show(nd), crate::validation::IMMUTABLE_MSG));
            }
        }
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
    fn drivers() {
        let ok = json!({ "spec": { "drivers": [{ "name": "d.example.com", "nodeID": "x", "topologyKeys": ["topology.example.com/zone"], "allocatable": { "count": 3 } }] } });
        assert!(CSINodeHooks.validate(&ok).is_empty());
        let bad = json!({ "spec": { "drivers": [
            { "name": "d.example.com", "nodeID": "", "topologyKeys": ["a", "a"], "allocatable": { "count": -1 } },
            { "name": "d.example.com", "nodeID": "y".repeat(300) },
        ] } });
        let texts: Vec<String> = CSINodeHooks.validate(&bad).iter().map(FieldError::to_text).collect();
        assert_eq!(texts[0], "spec.drivers[0].nodeID: Required value");
        assert_eq!(
            texts[1],
            "spec.drivers[0].allocatable.count: Invalid value: -1: must be greater than or equal to 0"
        );
        assert_eq!(texts[2], "spec.drivers[0]: Duplicate value: \"a\"");
        assert!(texts[3].ends_with("must be 256 characters or less"));
        assert_eq!(texts[4], "spec.drivers[1].name: Duplicate value: \"d.example.com\"");
        let mut changed = ok.clone();
        changed["spec"]["drivers"][0]["nodeID"] = json!("other");
        assert_eq!(CSINodeHooks.validate_update(&changed, &ok).len(), 1);
        let mut added = ok.clone();
        added["spec"]["drivers"]
            .as_array_mut()
            .unwrap()
            .push(json!({ "name": "e.example.com", "nodeID": "z" }));
        assert!(CSINodeHooks.validate_update(&added, &ok).is_empty());
    }
}
