//! FlowSchemas (upstream's v1 `SetDefaults_FlowSchemaSpec` and `ValidateFlowSchema`): which
//! requests go to which priority level. Status writes change status only.

use serde_json::{Value, json};

use crate::errors::FieldError;
use crate::registry::resource::{Hooks, keep_all_but_status};
use crate::validation::{dns1123_subdomain, index};

pub struct FlowSchemaHooks;

/// Upstream's `FlowSchemaMaxMatchingPrecedence` and default.
const MAX_MATCHING_PRECEDENCE: i64 = 10_000;
const DEFAULT_MATCHING_PRECEDENCE: i64 = 1000;
const EXEMPT: &str = "exempt";

fn strings(v: &Value) -> Vec<&str> {
    v.as_array().into_iter().flatten().filter_map(Value::as_str).collect()
}

/// `*` stands alone in a list of verbs, groups, resources or namespaces.
fn star_alone(field: &str, list: &[&str], what: &str) -> Vec<FieldError> {
    if list.len() > 1 && list.contains(&"*") {
        vec![FieldError::invalid(
            field,
            format!("[{}]", list.join(" ")),
            format!("if '*' is present, must not specify other {what}"),
        )]
    } else {
        Vec::new()
    }
}

fn subject(field: &str, s: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    match s["kind"].as_str().unwrap_or_default() {
        "User" => match s.get("user").filter(|u| u.is_object()) {
            None => errs.push(FieldError::required(
                format!("{field}.user"),
                "user is required when subject kind is 'User'",
            )),
            Some(u) if u["name"].as_str().is_none_or(str::is_empty) => {
                errs.push(FieldError::required(format!("{field}.user.name"), "username is required"))
            }
            _ => {}
        },
        "Group" => match s.get("group").filter(|g| g.is_object()) {
            None => errs.push(FieldError::required(
                format!("{field}.group"),
                "group is required when subject kind is 'Group'",
            )),
            Some(g) if g["name"].as_str().is_none_or(str::is_empty) => {
                errs.push(FieldError::required(format!("{field}.group.name"), ""))
            }
            _ => {}
        },
        "ServiceAccount" => match s.get("serviceAccount").filter(|a| a.is_object()) {
            None => errs.push(FieldError::required(
                format!("{field}.serviceAccount"),
                "serviceAccount is required when subject kind is 'ServiceAccount'",
            )),
            Some(a) => {
                if a["name"].as_str().is_none_or(str::is_empty) {
                    errs.push(FieldError::required(format!("{field}.serviceAccount.name"), ""));
                }
                if a["namespace"].as_str().is_none_or(str::is_empty) {
                    errs.push(FieldError::required(
                        format!("{field}.serviceAccount.namespace"),
                        "must specify namespace for service account",
                    ));
                }
            }
        },
        other => errs.push(FieldError::not_supported(
            format!("{field}.kind"),
            other,
            &["Group", "ServiceAccount", "User"],
        )),
    }
    errs
}

fn resource_rule(field: &str, r: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let verbs = strings(&r["verbs"]);
    if verbs.is_empty() {
        errs.push(FieldError::required(format!("{field}.verbs"), "verbs must contain at least one value"));
    }
    errs.extend(star_alone(&format!("{field}.verbs"), &verbs, "verbs"));
    let groups = strings(&r["apiGroups"]);
    if groups.is_empty() {
        errs.push(FieldError::required(
            format!("{field}.apiGroups"),
            "resource rules must supply at least one api group",
        ));
    }
    errs.extend(star_alone(&format!("{field}.apiGroups"), &groups, "api groups"));
    let resources = strings(&r["resources"]);
    if resources.is_empty() {
        errs.push(FieldError::required(
            format!("{field}.resources"),
            "resource rules must supply at least one resource",
        ));
    }
    errs.extend(star_alone(&format!("{field}.resources"), &resources, "resources"));
    let namespaces = strings(&r["namespaces"]);
    if namespaces.is_empty() && r["clusterScope"].as_bool() != Some(true) {
        errs.push(FieldError::required(
            format!("{field}.namespaces"),
            "resource rules that are not cluster scoped must supply at least one namespace",
        ));
    }
    errs.extend(star_alone(&format!("{field}.namespaces"), &namespaces, "namespaces"));
    errs
}

fn non_resource_rule(field: &str, r: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let verbs = strings(&r["verbs"]);
    if verbs.is_empty() {
        errs.push(FieldError::required(format!("{field}.verbs"), "verbs must contain at least one value"));
    }
    errs.extend(star_alone(&format!("{field}.verbs"), &verbs, "verbs"));
    let urls = strings(&r["nonResourceURLs"]);
    if urls.is_empty() {
        errs.push(FieldError::required(
            format!("{field}.nonResourceURLs"),
            "nonResourceURLs must contain at least one value",
        ));
    }
    errs.extend(star_alone(&format!("{field}.nonResourceURLs"), &urls, "non-resource urls"));
    errs
}

impl Hooks for FlowSchemaHooks {
    fn default(&self, obj: &mut Value) {
        if !obj["spec"].is_object() {
            obj["spec"] = json!({});
        }
        if obj["spec"]["matchingPrecedence"].as_i64().unwrap_or(0) == 0 {
            obj["spec"]["matchingPrecedence"] = json!(DEFAULT_MATCHING_PRECEDENCE);
        }
    }

    fn prepare_for_status_update(&self, new: &mut Value, old: &Value) {
        keep_all_but_status(new, old);
    }

    fn validate(&self, obj: &Value) -> Vec<FieldError> {
        let spec = &obj["spec"];
        let name = obj["metadata"]["name"].as_str().unwrap_or_default();
        let mut errs = Vec::new();
        let precedence = spec["matchingPrecedence"].as_i64().unwrap_or(0);
        if precedence <= 0 {
            errs.push(FieldError::invalid("spec.matchingPrecedence", precedence, "must be a positive value"));
        }
        if precedence > MAX_MATCHING_PRECEDENCE {
            errs.push(FieldError::invalid(
                "spec.matchingPrecedence",
                precedence,
                format!("must not be greater than {MAX_MATCHING_PRECEDENCE}"),
            ));
        }
        if precedence == 1 && name != EXEMPT {
            errs.push(FieldError::invalid(
                "spec.matchingPrecedence",
                precedence,
                "only the schema named 'exempt' may have matchingPrecedence 1",
            ));
        }
        if let Some(t) = spec["distinguisherMethod"]["type"].as_str()
            && !["ByNamespace", "ByUser"].contains(&t)
        {
            errs.push(FieldError::not_supported(
                "spec.distinguisherMethod.type",
                t,
                &["ByNamespace", "ByUser"],
            ));
        }
        match spec["priorityLevelConfiguration"]["name"].as_str().unwrap_or_default() {
            "" => errs.push(FieldError::required(
                "spec.priorityLevelConfiguration.name",
                "must reference a priority level",
            )),
            pl => errs.extend(dns1123_subdomain("spec.priorityLevelConfiguration.name", pl)),
        }
        for (i, rule) in spec["rules"].as_array().into_iter().flatten().enumerate() {
            let p = index("spec.rules", i);
            let subjects = rule["subjects"].as_array().cloned().unwrap_or_default();
            if subjects.is_empty() {
                errs.push(FieldError::required(
                    format!("{p}.subjects"),
                    "subjects must contain at least one value",
                ));
            }
            for (j, s) in subjects.iter().enumerate() {
                errs.extend(subject(&index(&format!("{p}.subjects"), j), s));
            }
            let rrs = rule["resourceRules"].as_array().cloned().unwrap_or_default();
            for (j, r) in rrs.iter().enumerate() {
                errs.extend(resource_rule(&index(&format!("{p}.resourceRules"), j), r));
            }
            let nrs = rule["nonResourceRules"].as_array().cloned().unwrap_or_default();
            for (j, r) in nrs.iter().enumerate() {
                errs.extend(non_resource_rule(&index(&format!("{p}.nonResourceRules"), j), r));
            }
            if rrs.is_empty() && nrs.is_empty() {
                errs.push(FieldError::required(
                    p,
                    "at least one of resourceRules and nonResourceRules has to be non-empty",
                ));
            }
        }
        errs
    }

    fn tracks_generation(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_rules() {
        let mut fs = json!({ "metadata": { "name": "f1" }, "spec": { "priorityLevelConfiguration": { "name": "x" },
            "rules": [{ "subjects": [{ "kind": "User", "user": { "name": "a" } }], "nonResourceRules": [{ "verbs": ["get"], "nonResourceURLs": ["/x"] }] }] } });
        FlowSchemaHooks.default(&mut fs);
        assert_eq!(fs["spec"]["matchingPrecedence"], 1000);
        assert!(FlowSchemaHooks.validate(&fs).is_empty());
        let bad = json!({ "metadata": { "name": "f2" }, "spec": { "priorityLevelConfiguration": { "name": "" }, "matchingPrecedence": 20000,
            "rules": [
                { "subjects": [], "resourceRules": [{ "verbs": [], "apiGroups": [], "resources": [], "namespaces": [] }] },
                { "subjects": [{ "kind": "User" }, { "kind": "Group", "group": { "name": "" } }, { "kind": "ServiceAccount", "serviceAccount": { "namespace": "", "name": "" } }, { "kind": "Bad" }] },
            ] } });
        let texts: Vec<String> = FlowSchemaHooks.validate(&bad).iter().map(FieldError::to_text).collect();
        assert_eq!(
            texts,
            [
                "spec.matchingPrecedence: Invalid value: 20000: must not be greater than 10000",
                "spec.priorityLevelConfiguration.name: Required value: must reference a priority level",
                "spec.rules[0].subjects: Required value: subjects must contain at least one value",
                "spec.rules[0].resourceRules[0].verbs: Required value: verbs must contain at least one value",
                "spec.rules[0].resourceRules[0].apiGroups: Required value: resource rules must supply at least one api group",
                "spec.rules[0].resourceRules[0].resources: Required value: resource rules must supply at least one resource",
                "spec.rules[0].resourceRules[0].namespaces: Required value: resource rules that are not cluster scoped must supply at least one namespace",
                "spec.rules[1].subjects[0].user: Required value: user is required when subject kind is 'User'",
                "spec.rules[1].subjects[1].group.name: Required value",
                "spec.rules[1].subjects[2].serviceAccount.name: Required value",
                "spec.rules[1].subjects[2].serviceAccount.namespace: Required value: must specify namespace for service account",
                "spec.rules[1].subjects[3].kind: Unsupported value: \"Bad\": supported values: \"Group\", \"ServiceAccount\", \"User\"",
                "spec.rules[1]: Required value: at least one of resourceRules and nonResourceRules has to be non-empty",
            ]
        );
    }
}
