//! PersistentVolumes (upstream's `SetDefaults_PersistentVolume`,
//! `ValidatePersistentVolume` and its update rules).

use serde_json::{Value, json};

use super::pod_spec::{node_selector, set_default};
use crate::errors::FieldError;
use crate::registry::resource::Hooks;
use crate::registry::store::now_rfc3339;
use crate::validation::{self as v, child, key};

pub struct PersistentVolumeHooks;

pub const ACCESS_MODES: &[&str] = &["ReadOnlyMany", "ReadWriteMany", "ReadWriteOnce", "ReadWriteOncePod"];

const SOURCES: &[&str] = &[
    "hostPath",
    "gcePersistentDisk",
    "awsElasticBlockStore",
    "glusterfs",
    "flocker",
    "nfs",
    "rbd",
    "quobyte",
    "cephfs",
    "iscsi",
    "cinder",
    "fc",
    "flexVolume",
    "azureFile",
    "vsphereVolume",
    "photonPersistentDisk",
    "portworxVolume",
    "azureDisk",
    "scaleIO",
    "local",
    "storageos",
    "csi",
];

/// Access modes: at least one (`required_msg`), supported, ReadWriteOncePod alone.
pub fn access_modes(modes: &Value, path: &str, required_msg: &str) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let list: Vec<&str> = modes.as_array().into_iter().flatten().filter_map(Value::as_str).collect();
    if list.is_empty() {
        errs.push(FieldError::required(path, required_msg));
    }
    for m in &list {
        if !ACCESS_MODES.contains(m) {
            errs.push(FieldError::not_supported(path, *m, ACCESS_MODES));
        }
    }
    if list.contains(&"ReadWriteOncePod")
        && list.iter().any(|m| *m != "ReadWriteOncePod" && ACCESS_MODES.contains(m))
    {
        errs.push(FieldError::forbidden(path, "may not use ReadWriteOncePod with other access modes"));
    }
    errs
}

impl Hooks for PersistentVolumeHooks {
    fn default(&self, obj: &mut Value) {
        let spec = &mut obj["spec"];
        if spec.is_object() {
            if spec["persistentVolumeReclaimPolicy"].as_str().is_none_or(str::is_empty) {
                spec["persistentVolumeReclaimPolicy"] = json!("Retain");
            }
            set_default(spec, "volumeMode", json!("Filesystem"));
            if let Some(c) = spec.get_mut("capacity") {
                v::canonicalize_resource_list(c);
            }
        }
        if obj["status"]["phase"].as_str().is_none_or(str::is_empty) {
            obj["status"]["phase"] = json!("Pending");
        }
    }

    fn prepare_for_create(&self, obj: &mut Value) {
        obj["status"] = json!({ "phase": "Pending", "lastPhaseTransitionTime": now_rfc3339() });
    }

    fn validate(&self, obj: &Value) -> Vec<FieldError> {
        let spec = &obj["spec"];
        let mut errs = access_modes(&spec["accessModes"], "spec.accessModes", "");
        let capacity = spec["capacity"].as_object();
        if capacity.is_none_or(|c| c.is_empty()) {
            errs.push(FieldError::required("spec.capacity", ""));
        }
        if capacity.is_none_or(|c| !c.contains_key("storage") || c.len() > 1) {
            errs.push(FieldError::not_supported("spec.capacity", v::show(&spec["capacity"]), &["storage"]));
        }
        for (k, q) in capacity.into_iter().flatten() {
            let fp = key("spec.capacity", k);
            match v::quantity(&fp, q) {
                Err(e) => errs.push(e),
                Ok(Some(n)) if n <= 0 => {
                    errs.push(FieldError::invalid(fp, v::show(q), "must be greater than zero"))
                }
                _ => {}
            }
        }
        if let Some(p) = spec["persistentVolumeReclaimPolicy"].as_str().filter(|p| !p.is_empty())
            && !["Delete", "Recycle", "Retain"].contains(&p)
        {
            errs.push(FieldError::not_supported(
                "spec.persistentVolumeReclaimPolicy",
                p,
                &["Delete", "Recycle", "Retain"],
            ));
        }
        let mut n = 0;
        for src in SOURCES {
            if spec[*src].is_null() {
                continue;
            }
            let sp = child("spec", src);
            if n > 0 && *src != "flexVolume" {
                errs.push(FieldError::forbidden(sp, "may not specify more than 1 volume type"));
                continue;
            }
            n += 1;
            let body = &spec[*src];
            let req = |f: &str, errs: &mut Vec<FieldError>| {
                if body[f].as_str().is_none_or(str::is_empty) {
                    errs.push(FieldError::required(child(&sp, f), ""));
                }
            };
            match *src {
                "hostPath" | "local" => req("path", &mut errs),
                "nfs" => {
                    req("server", &mut errs);
                    req("path", &mut errs);
                }
                "csi" => {
                    req("driver", &mut errs);
                    req("volumeHandle", &mut errs);
                }
                _ => {}
            }
            if *src == "local" && !spec["nodeAffinity"].is_object() {
                errs.push(FieldError::required("spec.nodeAffinity", "Local volume requires node affinity"));
            }
        }
        if n == 0 {
            errs.push(FieldError::required("spec", "must specify a volume type"));
        }
        let na = &spec["nodeAffinity"];
        if na.is_object() {
            if na["required"].is_object() {
                errs.extend(node_selector(&na["required"], "spec.nodeAffinity.required"));
            } else {
                errs.push(FieldError::required(
                    "spec.nodeAffinity.required",
                    "must specify required node constraints",
                ));
            }
        }
        if let Some(sc) = spec["storageClassName"].as_str().filter(|s| !s.is_empty()) {
            errs.extend(v::dns1123_subdomain("spec.storageClassName", sc));
        }
        if let Some(m) = spec["volumeMode"].as_str()
            && !["Block", "Filesystem"].contains(&m)
        {
            errs.push(FieldError::not_supported("spec.volumeMode", m, &["Block", "Filesystem"]));
        }
        errs
    }

    fn validate_update(&self, new: &Value, old: &Value) -> Vec<FieldError> {
        let mut errs = Vec::new();
        let source = |pv: &Value| -> Value {
            let mut m = serde_json::Map::new();
            for src in SOURCES {
                if let Some(b) = pv["spec"].get(*src).filter(|b| !b.is_null()) {
                    m.insert(src.to_string(), b.clone());
                }
            }
            Value::Object(m)
        };
        let (ns, os) = (source(new), source(old));
        if ns != os {
            errs.push(FieldError::forbidden(
                "spec.persistentvolumesource",
                format!("spec.persistentvolumesource is immutable after creation\n- {os}\n+ {ns}\n"),
            ));
        }
        // Upstream reports this one at the root `volumeMode`.
        errs.extend(v::immutable("volumeMode", &new["spec"]["volumeMode"], &old["spec"]["volumeMode"]));
        errs
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_rules() {
        let mut pv = json!({ "spec": { "capacity": { "storage": "1024Mi" }, "accessModes": ["ReadWriteOnce"], "hostPath": { "path": "/data" } } });
        PersistentVolumeHooks.prepare_for_create(&mut pv);
        PersistentVolumeHooks.default(&mut pv);
        assert_eq!(pv["spec"]["persistentVolumeReclaimPolicy"], "Retain");
        assert_eq!(pv["spec"]["volumeMode"], "Filesystem");
        assert_eq!(pv["spec"]["capacity"]["storage"], "1Gi");
        assert_eq!(pv["status"]["phase"], "Pending");
        assert!(PersistentVolumeHooks.validate(&pv).is_empty(), "{:?}", PersistentVolumeHooks.validate(&pv));
        let mut moved = pv.clone();
        moved["spec"]["hostPath"]["path"] = json!("/other");
        assert!(PersistentVolumeHooks.validate_update(&moved, &pv)[0].to_text().starts_with(
            "spec.persistentvolumesource: Forbidden: spec.persistentvolumesource is immutable after creation"
        ));
        let empty = json!({ "spec": {} });
        let texts: Vec<String> =
            PersistentVolumeHooks.validate(&empty).iter().map(FieldError::to_text).collect();
        assert!(texts.contains(&"spec.accessModes: Required value".to_string()), "{texts:?}");
        assert!(texts.contains(&"spec: Required value: must specify a volume type".to_string()));
    }
}
