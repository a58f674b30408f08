//! One served version of a CustomResourceDefinition as a [`Resource`] the generic store
//! serves: its names, its schema's pruning, defaulting and validation, its `status` and
//! `scale` subresources and printer columns (upstream's `customresource` strategy and
//! `tableconvertor`).

use std::sync::Arc;

use serde_json::{Value, json};

use super::schema;
use crate::errors::{ApiError, ApiResult, FieldError};
use crate::registry::resource::{
    Converter, Hooks, PrinterColumn, Resource, ResourceInfo, ScalePaths, copy_field, intern, intern_list,
    keep_spec,
};

struct CustomHooks {
    schema: Value,
    status: bool,
    scale: Option<ScalePaths>,
    columns: Vec<PrinterColumn>,
    api_version: String,
    storage_api_version: String,
    deprecation: Option<String>,
    /// The kind's OpenAPI definitions (with ObjectMeta's) and its definition's name.
    definitions: (serde_json::Map<String, Value>, String),
    /// Its `x-kubernetes-validations` rules, compiled.
    rules: std::sync::Arc<super::cel::Rules>,
    /// The CRD's conversion webhook (None: the `None` strategy).
    converter: Option<Arc<super::conversion::WebhookConverter>>,
}

/// The `openAPIV3Schema` of `version` of `crd` (an object that keeps any field when none).
pub fn schema_of(crd: &Value, version: &str) -> Value {
    super::crd::versions(crd)
        .find(|v| v["name"].as_str() == Some(version))
        .and_then(|v| v.pointer("/schema/openAPIV3Schema").cloned())
        .unwrap_or(json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true}))
}

/// The resource serving `version` of `crd`, converting through `converter` when the CRD
/// has a conversion webhook; None when the CRD does not define the version.
pub fn resource(
    crd: &Value,
    version: &str,
    converter: Option<Arc<super::conversion::WebhookConverter>>,
) -> Option<Arc<Resource>> {
    let spec = &crd["spec"];
    let v = super::crd::versions(crd).find(|v| v["name"].as_str() == Some(version))?;
    let names = &crd["status"]["acceptedNames"];
    let names = if names["plural"].as_str().is_some_and(|p| !p.is_empty()) { names } else { &spec["names"] };
    let group = spec["group"].as_str()?;
    let str_of = |v: &Value| v.as_str().unwrap_or_default().to_string();
    let list = |v: &Value| -> Vec<String> {
        v.as_array().into_iter().flatten().filter_map(Value::as_str).map(str::to_string).collect()
    };
    let has_status = v.pointer("/subresources/status").is_some();
    let scale = v.pointer("/subresources/scale").map(|s| ScalePaths {
        spec_replicas: str_of(&s["specReplicasPath"]),
        status_replicas: str_of(&s["statusReplicasPath"]),
        label_selector: s["labelSelectorPath"].as_str().map(str::to_string),
    });
    let mut subresources = Vec::new();
    if has_status {
        subresources.push("status".to_string());
    }
    if scale.is_some() {
        subresources.push("scale".to_string());
    }
    let plural = str_of(&names["plural"]);
    let storage = super::crd::storage_version(crd).unwrap_or(version);
    let info = ResourceInfo {
        group: intern(group),
        version: intern(version),
        kind: intern(&str_of(&names["kind"])),
        plural: intern(&plural),
        singular: intern(&str_of(&names["singular"])),
        short_names: intern_list(&list(&names["shortNames"])),
        categories: intern_list(&list(&names["categories"])),
        namespaced: spec["scope"].as_str() == Some("Namespaced"),
        subresources: intern_list(&subresources),
        etcd_resource: intern(&format!("{group}/{plural}")),
        verbs: ResourceInfo::ALL_VERBS,
        storage_version: Some((intern(group), intern(storage))),
    };
    let columns = match v["additionalPrinterColumns"].as_array() {
        Some(cols) => cols
            .iter()
            .map(|c| PrinterColumn {
                name: str_of(&c["name"]),
                kind: str_of(&c["type"]),
                format: str_of(&c["format"]),
                description: str_of(&c["description"]),
                priority: c["priority"].as_i64().unwrap_or(0),
                json_path: str_of(&c["jsonPath"]),
            })
            .collect(),
        // Upstream's default: the age.
        None => vec![PrinterColumn {
            name: "Age".into(),
            kind: "date".into(),
            format: String::new(),
            description: String::new(),
            priority: 0,
            json_path: ".metadata.creationTimestamp".into(),
        }],
    };
    let deprecation = (v["deprecated"].as_bool() == Some(true)).then(|| {
        v["deprecationWarning"]
            .as_str()
            .map(str::to_string)
            .unwrap_or_else(|| format!("{group}/{version} {} is deprecated", info.kind))
    });
    let schema = schema_of(crd, version);
    let definitions = crate::openapi::patch_definitions(info.group, info.version, info.kind, &schema);
    // The CRD's validation compiled these already; a rule that fails to compile here
    // (a CRD stored before) is left out.
    let rules = super::cel::Rules::compile(&schema, "").0;
    let hooks = CustomHooks {
        converter,
        rules,
        definitions,
        schema,
        status: has_status,
        scale,
        columns,
        api_version: format!("{group}/{version}"),
        storage_api_version: format!("{group}/{storage}"),
        deprecation,
    };
    let (api_version, kind) = (hooks.api_version.clone(), info.kind.to_string());
    Some(Arc::new(Resource {
        info,
        normalize: Box::new(move |obj| check_type(obj, &api_version, &kind)),
        hooks: Box::new(hooks),
    }))
}

/// What upstream's unstructured decoding insists on: an object whose `apiVersion` and
/// `kind` are the served ones.
fn check_type(obj: Value, api_version: &str, kind: &str) -> ApiResult<Value> {
    if !obj.is_object() {
        return Err(ApiError::bad_request("the body of the request was in an unknown format"));
    }
    let got_kind = obj["kind"].as_str().unwrap_or_default();
    if got_kind.is_empty() {
        return Err(ApiError::bad_request("Object 'Kind' is missing in the request body"));
    }
    if got_kind != kind {
        return Err(ApiError::bad_request(format!(
            "the kind in the data ({got_kind}) does not match the expected kind ({kind})"
        )));
    }
    let got_version = obj["apiVersion"].as_str().unwrap_or_default();
    if got_version != api_version {
        return Err(ApiError::bad_request(format!(
            "the API version in the data ({got_version}) does not match the expected API version ({api_version})"
        )));
    }
    if !obj["metadata"].is_object() && !obj["metadata"].is_null() {
        return Err(ApiError::bad_request("metadata: must be an object"));
    }
    Ok(obj)
}

impl CustomHooks {
    fn prune(&self, obj: &mut Value) -> Vec<String> {
        if self.schema["x-kubernetes-preserve-unknown-fields"].as_bool() == Some(true) {
            return Vec::new();
        }
        schema::prune(obj, &self.schema)
    }
}

impl Hooks for CustomHooks {
    fn convert_in(&self, obj: &mut Value) {
        self.prune(obj);
        // Root metadata is ObjectMeta: what it does not have is dropped, as decoding does.
        let unknown = unknown_meta_fields(obj, "");
        if let Some(m) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
            for k in unknown {
                m.remove(k.trim_start_matches("metadata."));
            }
        }
    }

    fn default(&self, obj: &mut Value) {
        schema::apply_defaults(obj, &self.schema);
    }

    fn prepare_for_create(&self, obj: &mut Value) {
        if self.status
            && let Some(o) = obj.as_object_mut()
        {
            o.remove("status");
        }
    }

    fn prepare_for_update(&self, new: &mut Value, old: &Value) {
        if self.status {
            copy_field(new, old, "status");
        }
    }

    fn prepare_for_status_update(&self, new: &mut Value, old: &Value) {
        keep_spec(new, old);
    }

    fn validate_update(&self, new: &Value, old: &Value) -> Vec<FieldError> {
        if self.rules.is_empty() {
            return Vec::new();
        }
        self.rules.validate(&own_fields(new), Some(&own_fields(old)))
    }

    fn validate(&self, obj: &Value) -> Vec<FieldError> {
        // The object's own fields; metadata is ObjectMeta's (checked by the store).
        let body = own_fields(obj);
        let mut schema = self.schema.clone();
        if let Some(p) = schema.get_mut("properties").and_then(Value::as_object_mut) {
            p.remove("metadata");
            p.remove("apiVersion");
            p.remove("kind");
        }
        if let Some(r) = schema.get_mut("required").and_then(Value::as_array_mut) {
            r.retain(|f| !matches!(f.as_str(), Some("metadata" | "apiVersion" | "kind")));
        }
        let mut errs = schema::validate(&body, &schema, "");
        // Validation rules run on what the schema accepts (as upstream's, which skips them
        // on values of the wrong type).
        if errs.is_empty() && !self.rules.is_empty() {
            errs.extend(self.rules.validate(&body, None));
        }
        if let Some(scale) = &self.scale {
            for path in [&scale.spec_replicas, &scale.status_replicas] {
                let field = path.trim_start_matches('.');
                if let Some(v) = lookup(obj, path)
                    && !v.is_null()
                    && !errs.iter().any(|e| e.field == field)
                    && v.as_i64().is_none_or(|n| n < 0 || n > i64::from(i32::MAX))
                {
                    errs.push(FieldError::invalid(field, v, "should be a non-negative integer"));
                }
            }
        }
        errs
    }

    fn has_status(&self) -> bool {
        self.status
    }

    fn tracks_generation(&self) -> bool {
        true
    }

    fn kube_finalizers(&self) -> bool {
        false
    }

    fn warnings(&self, _obj: &Value) -> Vec<String> {
        self.deprecation.iter().cloned().collect()
    }

    /// Objects are stored in the storage version's shape; with the `None` conversion
    /// strategy only `apiVersion` differs between versions (with `Webhook`, the
    /// [`Hooks::converter`] has converted the object already). Either way the object is
    /// then pruned and defaulted by the served version's schema.
    fn stored_to_served(&self, mut obj: Value) -> Value {
        if obj.is_object() {
            obj["apiVersion"] = json!(self.api_version);
            self.prune(&mut obj);
            schema::apply_defaults(&mut obj, &self.schema);
        }
        obj
    }

    fn served_to_stored(&self, mut obj: Value) -> Value {
        if obj.is_object() {
            obj["apiVersion"] = json!(self.storage_api_version);
        }
        obj
    }

    fn converter(&self) -> Option<&dyn Converter> {
        self.converter.as_deref().map(|c| c as &dyn Converter)
    }

    fn unknown_fields(&self, obj: &Value) -> Option<Vec<String>> {
        let mut copy = obj.clone();
        let mut dropped = self.prune(&mut copy);
        dropped.extend(unknown_meta_fields(obj, ""));
        Some(dropped)
    }

    fn patch_meta(&self) -> Option<crate::openapi::PatchMeta<'_>> {
        crate::openapi::PatchMeta::new(&self.definitions.0, &self.definitions.1)
    }

    fn strategic_merge(&self) -> bool {
        false
    }

    fn scale_paths(&self) -> Option<&ScalePaths> {
        self.scale.as_ref()
    }

    fn printer_columns(&self) -> Option<&[PrinterColumn]> {
        Some(&self.columns)
    }

    fn generation_changed(&self, new: &Value, old: &Value) -> bool {
        // Every change but metadata's (and status's, when it is a subresource).
        let strip = |v: &Value| {
            let mut v = v.clone();
            if let Some(o) = v.as_object_mut() {
                o.remove("metadata");
                if self.status {
                    o.remove("status");
                }
            }
            v
        };
        strip(new) != strip(old)
    }
}

/// An object without apiVersion, kind and metadata: what the schema of a custom resource
/// judges.
fn own_fields(obj: &Value) -> Value {
    let mut body = obj.clone();
    if let Some(o) = body.as_object_mut() {
        o.remove("metadata");
        o.remove("apiVersion");
        o.remove("kind");
    }
    body
}

/// Fields of the root `metadata` that ObjectMeta does not have (reported as unknown by
/// field validation, as upstream's strict decoding of a custom resource does).
fn unknown_meta_fields(obj: &Value, path: &str) -> Vec<String> {
    // ObjectMeta's fields: the serializer's list up to ListMeta's own.
    let object_meta = || crate::serializer::META.iter().take_while(|f| **f != "continue");
    let mut out = Vec::new();
    for k in obj["metadata"].as_object().into_iter().flatten().map(|(k, _)| k) {
        if !object_meta().any(|f| f == k) {
            out.push(if path.is_empty() { format!("metadata.{k}") } else { format!("{path}.metadata.{k}") });
        }
    }
    out
}

/// The value at a simple JSON path (`.spec.replicas`, `.status.items[0].name`).
pub fn lookup<'a>(obj: &'a Value, path: &str) -> Option<&'a Value> {
    let path = path.trim().trim_start_matches('{').trim_end_matches('}').trim_start_matches('.');
    let mut cur = obj;
    if path.is_empty() {
        return Some(cur);
    }
    for part in path.split('.') {
        let (name, index) = match part.split_once('[') {
            Some((n, rest)) => (n, rest.trim_end_matches(']').parse::<usize>().ok()),
            None => (part, None),
        };
        if !name.is_empty() {
            cur = cur.get(name)?;
        }
        if let Some(i) = index {
            cur = cur.get(i)?;
        }
    }
    Some(cur)
}

/// Sets the value at a simple `.a.b` path, creating the objects on the way.
pub fn set_at(obj: &mut Value, path: &str, value: Value) {
    let parts: Vec<&str> = path.trim_start_matches('.').split('.').collect();
    let mut cur = obj;
    for (i, part) in parts.iter().enumerate() {
        if !cur.is_object() {
            *cur = json!({});
        }
        if i == parts.len() - 1 {
            cur[*part] = value;
            return;
        }
        cur = &mut cur[*part];
    }
}
