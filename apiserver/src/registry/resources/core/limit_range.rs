//! LimitRanges (upstream's `SetDefaults_LimitRangeItem` and `ValidateLimitRange`).

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::errors::FieldError;
use crate::registry::resource::Hooks;
use crate::registry::resources::{at_mut, items_mut};
use crate::validation::{self as v, Quantity, child, index, key, qualified_name};

pub struct LimitRangeHooks;

const LISTS: &[&str] = &["max", "min", "default", "defaultRequest", "maxLimitRequestRatio"];

fn canonical(q: &Value) -> String {
    v::canonical_quantity(q.as_str().unwrap_or_default())
}

fn nanos(q: &Value) -> Option<i128> {
    Quantity::parse(q.as_str()?)?.nanos
}

impl Hooks for LimitRangeHooks {
    fn default(&self, obj: &mut Value) {
        for item in at_mut(obj, &["spec"]).into_iter().flat_map(|s| items_mut(s, "limits")) {
            for list in LISTS {
                if let Some(l) = item.get_mut(*list) {
                    v::canonicalize_resource_list(l);
                }
            }
            if item["type"] != "Container" {
                continue;
            }
            // A container limit defaults to the max, a default request to the default
            // limit, then to the min.
            for (to, from) in [("default", "max"), ("defaultRequest", "default"), ("defaultRequest", "min")] {
                let source = item[from].as_object().cloned().unwrap_or_default();
                if !item[to].is_object() {
                    item[to] = json!({});
                }
                for (k, q) in source {
                    item[to].as_object_mut().expect("made an object").entry(k).or_insert(q);
                }
            }
        }
    }

    fn validate(&self, obj: &Value) -> Vec<FieldError> {
        let mut errs = Vec::new();
        let mut types: Vec<&str> = Vec::new();
        for (i, item) in obj["spec"]["limits"].as_array().into_iter().flatten().enumerate() {
            let ip = index("spec.limits", i);
            let t = item["type"].as_str().unwrap_or_default();
            let mut type_errs = qualified_name(&child(&ip, "type"), t);
            if type_errs.is_empty()
                && !t.contains('/')
                && !["Pod", "Container", "PersistentVolumeClaim"].contains(&t)
            {
                type_errs.push(FieldError::invalid(
                    child(&ip, "type"),
                    t,
                    "must be a standard limit type or fully qualified",
                ));
            }
            errs.extend(type_errs);
            if types.contains(&t) {
                errs.push(FieldError::duplicate(child(&ip, "type"), t));
            }
            types.push(t);
            let mut by_list: BTreeMap<&str, BTreeMap<String, &Value>> = BTreeMap::new();
            for list in LISTS {
                if t == "Pod" && (*list == "default" || *list == "defaultRequest") {
                    if item[*list].as_object().is_some_and(|m| !m.is_empty()) {
                        errs.push(FieldError::forbidden(
                            child(&ip, list),
                            "may not be specified when `type` is 'Pod'",
                        ));
                    }
                    continue;
                }
                for (k, q) in item[*list].as_object().into_iter().flatten() {
                    errs.extend(qualified_name(&key(&child(&ip, list), k), k));
                    by_list.entry(list).or_default().insert(k.clone(), q);
                }
            }
            if t == "PersistentVolumeClaim"
                && !by_list.get("min").is_some_and(|m| m.contains_key("storage"))
                && !by_list.get("max").is_some_and(|m| m.contains_key("storage"))
            {
                errs.push(FieldError::required(
                    child(&ip, "limits"),
                    "either minimum or maximum storage value is required, but neither was provided",
                ));
            }
            let mut keys: Vec<&String> = by_list.values().flat_map(|m| m.keys()).collect();
            keys.sort();
            keys.dedup();
            for k in keys {
                let get = |l: &str| by_list.get(l).and_then(|m| m.get(k)).copied();
                let (min, max, def, req, ratio) = (
                    get("min"),
                    get("max"),
                    get("default"),
                    get("defaultRequest"),
                    get("maxLimitRequestRatio"),
                );
                let n = |q: Option<&Value>| q.and_then(nanos);
                let gt = |a: Option<&Value>, b: Option<&Value>| matches!((n(a), n(b)), (Some(x), Some(y)) if x > y);
                let at = |l: &str| key(&child(&ip, l), k);
                let c = |q: Option<&Value>| q.map(canonical).unwrap_or_default();
                if gt(min, max) {
                    errs.push(FieldError::invalid(
                        at("min"),
                        c(min),
                        format!("min value {} is greater than max value {}", c(min), c(max)),
                    ));
                }
                if gt(min, req) {
                    errs.push(FieldError::invalid(
                        at("defaultRequest"),
                        c(req),
                        format!("min value {} is greater than default request value {}", c(min), c(req)),
                    ));
                }
                if gt(req, max) {
                    errs.push(FieldError::invalid(
                        at("defaultRequest"),
                        c(req),
                        format!("default request value {} is greater than max value {}", c(req), c(max)),
                    ));
                }
                if gt(req, def) {
                    errs.push(FieldError::invalid(
                        at("defaultRequest"),
                        c(req),
                        format!(
                            "default request value {} is greater than default limit value {}",
                            c(req),
                            c(def)
                        ),
                    ));
                }
                if gt(min, def) {
                    errs.push(FieldError::invalid(
                        at("default"),
                        c(min),
                        format!("min value {} is greater than default value {}", c(min), c(def)),
                    ));
                }
                if gt(def, max) {
                    errs.push(FieldError::invalid(
                        at("default"),
                        c(max),
                        format!("default value {} is greater than max value {}", c(def), c(max)),
                    ));
                }
                if n(ratio).is_some_and(|r| r < 1_000_000_000) {
                    errs.push(FieldError::invalid(
                        at("maxLimitRequestRatio"),
                        c(ratio),
                        format!("ratio {} is less than 1", c(ratio)),
                    ));
                }
            }
        }
        errs
    }

    fn has_status(&self) -> bool {
        false
    }

    /// PUT may create (upstream's `AllowCreateOnUpdate`).
    fn create_on_update(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn container_defaults_and_ordering() {
        let mut lr = json!({ "spec": { "limits": [{ "type": "Container", "max": { "cpu": "2" }, "min": { "memory": "64Mi" } }] } });
        LimitRangeHooks.default(&mut lr);
        let item = &lr["spec"]["limits"][0];
        assert_eq!(item["default"], json!({ "cpu": "2" }));
        assert_eq!(item["defaultRequest"], json!({ "cpu": "2", "memory": "64Mi" }));
        assert!(LimitRangeHooks.validate(&lr).is_empty());
        let bad = json!({ "spec": { "limits": [{ "type": "Container", "min": { "cpu": "2" }, "max": { "cpu": "1" } }] } });
        assert_eq!(
            LimitRangeHooks.validate(&bad)[0].to_text(),
            "spec.limits[0].min[cpu]: Invalid value: 2: min value 2 is greater than max value 1"
        );
    }
}
