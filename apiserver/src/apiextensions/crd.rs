//! The `apiextensions.k8s.io/v1` CustomResourceDefinition resource: its defaults and
//! validation (upstream's `apis/apiextensions/validation` and the CRD strategy).

use std::sync::Arc;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde_json::{Value, json};

use crate::errors::FieldError;
use crate::registry::resource::{Hooks, Resource, info_of};
use crate::validation;

pub fn resource() -> Arc<Resource> {
    Resource::new::<CustomResourceDefinition>(
        info_of::<CustomResourceDefinition>(
            "customresourcedefinition",
            &["crd", "crds"],
            &["api-extensions"],
            false,
            &["status"],
            "apiextensions.k8s.io/customresourcedefinitions",
        ),
        CrdHooks,
    )
}

struct CrdHooks;

/// The version marked `storage: true` (validation makes sure there is exactly one).
pub fn storage_version(crd: &Value) -> Option<&str> {
    versions(crd).find(|v| v["storage"].as_bool() == Some(true)).and_then(|v| v["name"].as_str())
}

pub fn versions(crd: &Value) -> impl Iterator<Item = &Value> {
    crd["spec"]["versions"].as_array().into_iter().flatten()
}

impl Hooks for CrdHooks {
    fn default(&self, crd: &mut Value) {
        let Some(spec) = crd.get_mut("spec").and_then(Value::as_object_mut) else { return };
        if !spec.contains_key("conversion") {
            spec.insert("conversion".into(), json!({"strategy": "None"}));
        }
        if let Some(names) = spec.get_mut("names").and_then(Value::as_object_mut) {
            let kind = names.get("kind").and_then(Value::as_str).unwrap_or_default().to_string();
            if names.get("singular").and_then(Value::as_str).is_none_or(str::is_empty) {
                names.insert("singular".into(), json!(kind.to_lowercase()));
            }
            if names.get("listKind").and_then(Value::as_str).is_none_or(str::is_empty) && !kind.is_empty() {
                names.insert("listKind".into(), json!(format!("{kind}List")));
            }
        }
    }

    /// Status starts empty but for the storage version (upstream's PrepareForCreate).
    fn prepare_for_create(&self, crd: &mut Value) {
        let stored: Vec<Value> = storage_version(crd).map(|v| json!(v)).into_iter().collect();
        crd["status"] = json!({"storedVersions": stored, "conditions": [],
                               "acceptedNames": {"kind": "", "plural": ""}});
    }

    /// A new storage version joins `status.storedVersions` (upstream's PrepareForUpdate).
    fn prepare_for_update(&self, new: &mut Value, old: &Value) {
        crate::registry::resource::copy_field(new, old, "status");
        if let Some(v) = storage_version(new).map(str::to_string) {
            let stored = &mut new["status"]["storedVersions"];
            if !stored.is_array() {
                *stored = json!([]);
            }
            if let Some(list) = stored.as_array_mut()
                && !list.iter().any(|s| s.as_str() == Some(&v))
            {
                list.push(json!(v));
            }
        }
    }

    /// Upstream's CRD status strategy: the spec, labels, annotations and owner references
    /// stay as stored (finalizers come from the write).
    fn prepare_for_status_update(&self, new: &mut Value, old: &Value) {
        crate::registry::resource::keep_spec(new, old);
        for f in ["labels", "annotations", "ownerReferences"] {
            crate::registry::resource::copy_meta_field(new, old, f);
        }
    }

    fn tracks_generation(&self) -> bool {
        true
    }

    fn kube_finalizers(&self) -> bool {
        false
    }

    fn validate(&self, crd: &Value) -> Vec<FieldError> {
        validate_crd(crd)
    }

    fn validate_update(&self, new: &Value, old: &Value) -> Vec<FieldError> {
        let mut errs = Vec::new();
        for f in ["group", "scope"] {
            if new["spec"][f] != old["spec"][f] {
                errs.push(FieldError::invalid(
                    format!("spec.{f}"),
                    new["spec"][f].as_str().unwrap_or_default(),
                    "field is immutable",
                ));
            }
        }
        errs
    }

    fn validate_subresource_update(&self, _sub: &str, new: &Value, _old: &Value) -> Vec<FieldError> {
        // Every stored version must still be defined.
        let defined: Vec<&str> = versions(new).filter_map(|v| v["name"].as_str()).collect();
        let mut errs = Vec::new();
        for (i, s) in new["status"]["storedVersions"].as_array().into_iter().flatten().enumerate() {
            if let Some(s) = s.as_str()
                && !defined.contains(&s)
            {
                errs.push(FieldError::invalid(
                    format!("status.storedVersions[{i}]"),
                    s,
                    "must appear in spec.versions",
                ));
            }
        }
        errs
    }
}

fn is_lowercase_label(s: &str) -> bool {
    validation::is_dns1123_label(s)
}

fn validate_crd(crd: &Value) -> Vec<FieldError> {
    let spec = &crd["spec"];
    let mut errs = Vec::new();
    let group = spec["group"].as_str().unwrap_or_default();
    let names = &spec["names"];
    let plural = names["plural"].as_str().unwrap_or_default();
    let name = crd["metadata"]["name"].as_str().unwrap_or_default();
    if name != format!("{plural}.{group}") {
        errs.push(FieldError::invalid("metadata.name", name, "must be spec.names.plural+\".\"+spec.group"));
    }
    if group.is_empty() {
        errs.push(FieldError::required("spec.group", ""));
    } else {
        errs.extend(validation::dns1123_subdomain("spec.group", group));
        if !group.contains('.') {
            errs.push(FieldError::invalid("spec.group", group, "should be a domain with at least one dot"));
        }
    }
    match spec["scope"].as_str() {
        Some("Namespaced" | "Cluster") => {}
        Some(other) => errs.push(FieldError::not_supported("spec.scope", other, &["Cluster", "Namespaced"])),
        None => errs.push(FieldError::required("spec.scope", "")),
    }
    for (field, required) in [("plural", true), ("singular", false), ("kind", true), ("listKind", true)] {
        let path = format!("spec.names.{field}");
        match names[field].as_str().filter(|s| !s.is_empty()) {
            None if required => errs.push(FieldError::required(path, "")),
            None => {}
            Some(v) if matches!(field, "plural" | "singular") && !is_lowercase_label(v) => {
                errs.push(FieldError::invalid(path, v, "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"));
            }
            Some(v) if matches!(field, "kind" | "listKind") && !is_kind_name(v) => {
                errs.push(FieldError::invalid(
                    path,
                    v,
                    "may have mixed case, but should otherwise match: [a-z0-9]([-a-z0-9]*[a-z0-9])?",
                ));
            }
            Some(_) => {}
        }
    }
    if names["kind"].as_str().is_some_and(|k| !k.is_empty()) && names["kind"] == names["listKind"] {
        errs.push(FieldError::invalid(
            "spec.names.listKind",
            names["listKind"].as_str().unwrap_or_default(),
            "kind and listKind may not be the same",
        ));
    }
    for (field, items) in [("shortNames", &names["shortNames"]), ("categories", &names["categories"])] {
        for (i, s) in items.as_array().into_iter().flatten().enumerate() {
            let s = s.as_str().unwrap_or_default();
            if field == "shortNames" && !is_lowercase_label(s) {
                errs.push(FieldError::invalid(format!("spec.names.{field}[{i}]"), s, "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character"));
            }
        }
    }
    let vs: Vec<&Value> = versions(crd).collect();
    if vs.is_empty() {
        errs.push(FieldError::invalid(
            "spec.versions",
            "null",
            "must have exactly one version marked as storage version",
        ));
    }
    let storage = vs.iter().filter(|v| v["storage"].as_bool() == Some(true)).count();
    if !vs.is_empty() && storage != 1 {
        errs.push(FieldError::invalid(
            "spec.versions",
            serde_json::to_string(&spec["versions"]).unwrap_or_default(),
            "must have exactly one version marked as storage version",
        ));
    }
    let mut seen = Vec::new();
    for (i, v) in vs.iter().enumerate() {
        let path = format!("spec.versions[{i}]");
        let vname = v["name"].as_str().unwrap_or_default();
        if !is_lowercase_label(vname) {
            errs.push(FieldError::invalid(
                format!("{path}.name"),
                vname,
                "a DNS-1035 label must consist of lower case alphanumeric characters or '-'",
            ));
        }
        if seen.contains(&vname) {
            errs.push(FieldError::duplicate(format!("{path}.name"), vname));
        }
        seen.push(vname);
        match v.pointer("/schema/openAPIV3Schema") {
            None => errs
                .push(FieldError::required(format!("{path}.schema.openAPIV3Schema"), "schemas are required")),
            Some(s) => {
                let schema_path = format!("{path}.schema.openAPIV3Schema");
                errs.extend(structural(s, &schema_path, true));
                errs.extend(super::cel::Rules::compile(s, &schema_path).1);
            }
        }
        if let Some(scale) = v.pointer("/subresources/scale") {
            for (f, required) in
                [("specReplicasPath", true), ("statusReplicasPath", true), ("labelSelectorPath", false)]
            {
                match scale[f].as_str() {
                    None if required => {
                        errs.push(FieldError::required(format!("{path}.subresources.scale.{f}"), ""))
                    }
                    Some(p) if !p.starts_with('.') || p.contains('[') => errs.push(FieldError::invalid(
                        format!("{path}.subresources.scale.{f}"),
                        p,
                        "should be a json path under .spec or .status",
                    )),
                    _ => {}
                }
            }
        }
    }
    if !vs.iter().any(|v| v["served"].as_bool() == Some(true)) && !vs.is_empty() {
        errs.push(FieldError::invalid("spec.versions", "", "must have at least one served version"));
    }
    errs.extend(validate_conversion(&spec["conversion"]));
    errs
}

/// `spec.conversion` (upstream's `validateCustomResourceConversion`; its error paths name
/// the internal fields, `webhookClientConfig` and `conversionReviewVersions`).
fn validate_conversion(conversion: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let path = "spec.conversion";
    let client_config = conversion.pointer("/webhook/clientConfig").filter(|c| !c.is_null());
    let review_versions = conversion.pointer("/webhook/conversionReviewVersions").and_then(Value::as_array);
    match conversion["strategy"].as_str() {
        None | Some("None") => {
            if client_config.is_some() {
                errs.push(FieldError::forbidden(
                    format!("{path}.webhookClientConfig"),
                    "should not be set when strategy is not set to Webhook",
                ));
            }
            if review_versions.is_some_and(|v| !v.is_empty()) {
                errs.push(FieldError::forbidden(
                    format!("{path}.conversionReviewVersions"),
                    "should not be set when strategy is not set to Webhook",
                ));
            }
        }
        Some("Webhook") => {
            match client_config {
                None => errs.push(FieldError::required(
                    format!("{path}.webhookClientConfig"),
                    "required when strategy is set to Webhook",
                )),
                Some(cc) => errs.extend(validate_client_config(cc, &format!("{path}.webhookClientConfig"))),
            }
            let versions: Vec<&str> =
                review_versions.into_iter().flatten().filter_map(Value::as_str).collect();
            let field = format!("{path}.conversionReviewVersions");
            if versions.is_empty() {
                errs.push(FieldError::required(field.clone(), "must specify one of v1, v1beta1"));
            } else if !versions.iter().any(|v| matches!(*v, "v1" | "v1beta1")) {
                errs.push(FieldError::invalid(
                    field.clone(),
                    json!(versions),
                    "must include at least one of v1, v1beta1",
                ));
            }
            for (i, v) in versions.iter().enumerate() {
                if versions[..i].contains(v) {
                    errs.push(FieldError::invalid(format!("{field}[{i}]"), *v, "duplicate version"));
                }
            }
        }
        Some(other) => {
            errs.push(FieldError::not_supported(format!("{path}.strategy"), other, &["None", "Webhook"]))
        }
    }
    errs
}

/// A webhook's `clientConfig`: exactly one of an `https` URL and a Service.
fn validate_client_config(cc: &Value, path: &str) -> Vec<FieldError> {
    let mut errs = Vec::new();
    match (cc.get("url").filter(|u| !u.is_null()), cc.get("service").filter(|s| !s.is_null())) {
        (Some(_), Some(_)) | (None, None) => {
            errs.push(FieldError::required(path.to_string(), "exactly one of url or service is required"))
        }
        (Some(u), None) => {
            let text = u.as_str().unwrap_or_default();
            match url::Url::parse(text) {
                Err(e) => errs.push(FieldError::invalid(
                    format!("{path}.url"),
                    text,
                    format!("host must be specified ({e})"),
                )),
                Ok(parsed) => {
                    if parsed.scheme() != "https" {
                        errs.push(FieldError::invalid(
                            format!("{path}.url"),
                            text,
                            "'https' is the only allowed URL scheme",
                        ));
                    }
                    if !parsed.username().is_empty() || parsed.password().is_some() {
                        errs.push(FieldError::invalid(
                            format!("{path}.url"),
                            text,
                            "user information is not permitted in the URL",
                        ));
                    }
                    if parsed.fragment().is_some() {
                        errs.push(FieldError::invalid(
                            format!("{path}.url"),
                            text,
                            "fragments are not permitted in the URL",
                        ));
                    }
                    if parsed.query().is_some() {
                        errs.push(FieldError::invalid(
                            format!("{path}.url"),
                            text,
                            "query parameters are not permitted in the URL",
                        ));
                    }
                }
            }
        }
        (None, Some(svc)) => {
            for f in ["name", "namespace"] {
                if svc[f].as_str().is_none_or(str::is_empty) {
                    errs.push(FieldError::required(
                        format!("{path}.service.{f}"),
                        format!("service {f} is required"),
                    ));
                }
            }
            if let Some(p) = svc["path"].as_str()
                && !p.starts_with('/')
            {
                errs.push(FieldError::invalid(format!("{path}.service.path"), p, "must start with a '/'"));
            }
            if let Some(port) = svc.get("port").and_then(Value::as_i64)
                && !(1..=65535).contains(&port)
            {
                errs.push(FieldError::invalid(
                    format!("{path}.service.port"),
                    port,
                    "port is not valid: must be between 1 and 65535, inclusive",
                ));
            }
        }
    }
    if let Some(ca) = cc.get("caBundle").and_then(Value::as_str)
        && crate::admission::webhook::config::ca_bundle(cc).is_err()
    {
        errs.push(FieldError::invalid(format!("{path}.caBundle"), ca, "must be base64 encoded"));
    }
    errs
}

fn is_kind_name(s: &str) -> bool {
    is_lowercase_label(&s.to_lowercase())
}

/// Upstream's structural-schema rules, the ones that matter to pruning and validation:
/// every specified field has a type (unless `x-kubernetes-int-or-string` or
/// `x-kubernetes-preserve-unknown-fields` stands in), the root is an object, and
/// `properties` and `additionalProperties` are not both set.
fn structural(s: &Value, path: &str, root: bool) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let ty = s["type"].as_str().unwrap_or_default();
    let int_or_string = s["x-kubernetes-int-or-string"].as_bool() == Some(true);
    let preserve = s["x-kubernetes-preserve-unknown-fields"].as_bool() == Some(true);
    if root && ty != "object" {
        errs.push(FieldError::invalid(format!("{path}.type"), ty, "must be object at the root"));
    }
    if ty.is_empty() && !int_or_string && !preserve {
        errs.push(FieldError::required(
            format!("{path}.type"),
            "must not be empty for specified object fields",
        ));
    }
    if s.get("properties").is_some() && s["additionalProperties"].is_object() {
        errs.push(FieldError::forbidden(
            format!("{path}.additionalProperties"),
            "additionalProperties and properties are mutual exclusive",
        ));
    }
    if ty == "array" && s.get("items").is_none() {
        errs.push(FieldError::required(format!("{path}.items"), "must be specified"));
    }
    for (k, child) in s["properties"].as_object().into_iter().flatten() {
        errs.extend(structural(child, &format!("{path}.properties[{k}]"), false));
    }
    if let Some(items) = s.get("items").filter(|i| i.is_object()) {
        errs.extend(structural(items, &format!("{path}.items"), false));
    }
    if let Some(a) = s.get("additionalProperties").filter(|a| a.is_object()) {
        errs.extend(structural(a, &format!("{path}.additionalProperties"), false));
    }
    errs
}
