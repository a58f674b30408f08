//! The schema definitions: generated with schemars from k8s-openapi's `JsonSchema` impls
//! (whose names are already upstream's, `io.k8s.api.apps.v1.Deployment`), then given what
//! upstream's have and k8s-openapi's lack: list kinds, `x-kubernetes-group-version-kind`,
//! the patch and list extensions ([`super::extensions`]) and the int-or-string formats.
//!
//! Definitions are kept in Swagger 2.0 form (`$ref: #/definitions/<name>`, a description
//! beside a `$ref`, as upstream's v2 document has); [`to_v3`] turns one into OpenAPI 3.0
//! form (`#/components/schemas/<name>`, a `$ref` with siblings wrapped in `allOf`).

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::schemars::generate::SchemaSettings;
use serde_json::{Map, Value, json};

use super::extensions;
use super::kinds::{self, Kind};

pub const V2_REF: &str = "#/definitions/";
pub const V3_REF: &str = "#/components/schemas/";

pub const DELETE_OPTIONS: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.DeleteOptions";
pub const PATCH: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.Patch";
pub const STATUS: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.Status";
pub const WATCH_EVENT: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.WatchEvent";
pub const API_RESOURCE_LIST: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.APIResourceList";
const LIST_META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ListMeta";
const INT_OR_STRING: &str = "io.k8s.apimachinery.pkg.util.intstr.IntOrString";
const QUANTITY: &str = "io.k8s.apimachinery.pkg.api.resource.Quantity";

/// What is asked for: the kinds of the served resources (with a list kind each), the
/// kinds of their subresources, and the group-versions served.
#[derive(Default)]
pub struct Request<'a> {
    pub resources: Vec<&'a Kind>,
    pub subresources: Vec<&'a Kind>,
    pub group_versions: Vec<(&'a str, &'a str)>,
}

/// All definitions, in v2 form, and the definition name of each kind (`group/version/kind`
/// → name; list kinds included).
pub struct Definitions {
    pub schemas: Map<String, Value>,
    pub names: BTreeMap<(String, String, String), String>,
}

impl Definitions {
    pub fn name_of(&self, group: &str, version: &str, kind: &str) -> Option<&str> {
        self.names.get(&(group.to_string(), version.to_string(), kind.to_string())).map(String::as_str)
    }

    /// The names reachable through `$ref`s from `roots` (the roots included).
    pub fn closure<'a>(&self, roots: impl IntoIterator<Item = &'a str>) -> BTreeSet<String> {
        let mut seen = BTreeSet::new();
        let mut todo: Vec<String> = roots.into_iter().map(str::to_string).collect();
        while let Some(name) = todo.pop() {
            if !seen.insert(name.clone()) {
                continue;
            }
            if let Some(s) = self.schemas.get(&name) {
                collect_refs(s, &mut |r| {
                    if !seen.contains(r) {
                        todo.push(r.to_string());
                    }
                });
            }
        }
        seen
    }
}

/// Calls `f` with the definition name of every `$ref` (v2 form) in `v`.
pub fn collect_refs(v: &Value, f: &mut impl FnMut(&str)) {
    match v {
        Value::Object(o) => {
            for (k, v) in o {
                if k == "$ref" {
                    if let Some(name) = v.as_str().and_then(|r| r.strip_prefix(V2_REF)) {
                        f(name);
                    }
                } else {
                    collect_refs(v, f);
                }
            }
        }
        Value::Array(a) => a.iter().for_each(|v| collect_refs(v, f)),
        _ => {}
    }
}

pub(super) fn gvk(group: &str, version: &str, kind: &str) -> Value {
    json!({ "group": group, "kind": kind, "version": version })
}

pub(super) fn add_gvk(schema: &mut Value, entry: Value) {
    let Some(o) = schema.as_object_mut() else { return };
    let list = o.entry("x-kubernetes-group-version-kind").or_insert_with(|| json!([]));
    if let Some(a) = list.as_array_mut()
        && !a.contains(&entry)
    {
        a.push(entry);
    }
}

fn unrequire(schema: &mut Value, field: &str) {
    let Some(o) = schema.as_object_mut() else { return };
    if let Some(Value::Array(req)) = o.get_mut("required") {
        req.retain(|f| f != field);
        if req.is_empty() {
            o.remove("required");
        }
    }
}

/// The list kind upstream has for every listable kind (`DeploymentList`).
pub(super) fn list_schema(kind: &str, item: &str) -> Value {
    json!({
        "description": format!("{kind}List is a list of {kind} objects."),
        "type": "object",
        "properties": {
            "apiVersion": {
                "description": "APIVersion defines the versioned schema of this representation of an object. Servers should convert recognized schemas to the latest internal value, and may reject unrecognized values. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#resources",
                "type": "string",
            },
            "items": {
                "description": format!("List of {kind} objects."),
                "type": "array",
                "items": { "$ref": format!("{V2_REF}{item}") },
            },
            "kind": {
                "description": "Kind is a string value representing the REST resource this object represents. Servers may infer this from the endpoint the client submits requests to. Cannot be updated. In CamelCase. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#types-kinds",
                "type": "string",
            },
            "metadata": {
                "$ref": format!("{V2_REF}{LIST_META}"),
                "description": "Standard list metadata. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#types-kinds",
            },
        },
        "required": ["items"],
    })
}

/// Generates the definitions for `req`.
pub fn generate(req: &Request<'_>) -> Definitions {
    let mut settings = SchemaSettings::draft07();
    settings.definitions_path = "/definitions".into();
    settings.meta_schema = None;
    settings.transforms = Vec::new();
    let mut generator = settings.into_generator();

    let mut names = BTreeMap::new();
    let mut resource_names = Vec::new();
    for k in req.resources.iter().chain(&req.subresources) {
        let name = (k.add)(&mut generator);
        names.insert((k.group.to_string(), k.version.to_string(), k.kind.to_string()), name.clone());
        resource_names.push(name);
    }
    kinds::add_common(&mut generator);
    let mut schemas = generator.take_definitions(false);

    for k in &req.resources {
        let item = &names[&(k.group.to_string(), k.version.to_string(), k.kind.to_string())];
        let list_kind = format!("{}List", k.kind);
        let list_name = format!("{item}List");
        schemas.entry(list_name.clone()).or_insert_with(|| list_schema(k.kind, item));
        names.insert((k.group.to_string(), k.version.to_string(), list_kind), list_name);
    }
    for ((g, v, k), name) in &names {
        if let Some(s) = schemas.get_mut(name) {
            add_gvk(s, gvk(g, v, k));
            // k8s-openapi requires `metadata` (its field is no Option); upstream does not.
            unrequire(s, "metadata");
        }
    }
    if let Some(s) = schemas.get_mut(STATUS) {
        add_gvk(s, gvk("", "v1", "Status"));
    }
    for (g, v) in &req.group_versions {
        for (def, kind) in [(DELETE_OPTIONS, "DeleteOptions"), (WATCH_EVENT, "WatchEvent")] {
            if let Some(s) = schemas.get_mut(def) {
                add_gvk(s, gvk(g, v, kind));
            }
        }
    }
    // Upstream's int-or-string and quantity are strings with a format (the JSON value may
    // be a number; the schema says how to read it).
    if let Some(s) = schemas.get_mut(INT_OR_STRING).and_then(Value::as_object_mut) {
        s.remove("x-kubernetes-int-or-string");
        s.insert("type".into(), json!("string"));
        s.insert("format".into(), json!("int-or-string"));
    }
    if let Some(s) = schemas.get_mut(QUANTITY).and_then(Value::as_object_mut) {
        s.remove("x-kubernetes-int-or-string");
        s.insert("type".into(), json!("string"));
    }
    for missed in extensions::apply(&mut schemas) {
        tracing::warn!(field = %missed, "openapi: a patch/list extension names a field the schema lacks");
    }
    Definitions { schemas, names }
}

/// The OpenAPI 3.0 form of definition `name`: [`to_v3`], and int-or-string and quantity
/// as upstream's v3 has them, one of two types (kubectl explain then names them by kind).
pub fn definition_v3(name: &str, schema: &Value) -> Value {
    let mut out = to_v3(schema);
    let one_of = match name {
        INT_OR_STRING => json!([{ "type": "integer" }, { "type": "string" }]),
        QUANTITY => json!([{ "type": "string" }, { "type": "number" }]),
        _ => return out,
    };
    if let Some(o) = out.as_object_mut() {
        o.remove("type");
        o.insert("oneOf".into(), one_of);
    }
    out
}

/// The OpenAPI 3.0 form of a v2 schema.
pub fn to_v3(v: &Value) -> Value {
    match v {
        Value::Object(o) => {
            let mut out = Map::with_capacity(o.len());
            let mut reference = None;
            for (k, v) in o {
                if k == "properties"
                    && let Value::Object(props) = v
                {
                    // Field names, not keywords: JSONSchemaProps has fields named `$ref`
                    // and `allOf`.
                    let props = props.iter().map(|(name, s)| (name.clone(), to_v3(s))).collect();
                    out.insert(k.clone(), Value::Object(props));
                } else if k == "$ref"
                    && let Some(r) = v.as_str()
                {
                    reference = Some(match r.strip_prefix(V2_REF) {
                        Some(name) => format!("{V3_REF}{name}"),
                        None => r.to_string(),
                    });
                } else {
                    out.insert(k.clone(), to_v3(v));
                }
            }
            match reference {
                None => Value::Object(out),
                Some(r) if out.is_empty() => json!({ "$ref": r }),
                // OpenAPI 3.0 ignores the siblings of a `$ref`; upstream wraps it.
                Some(r) => {
                    out.insert("allOf".into(), json!([{ "$ref": r }]));
                    Value::Object(out)
                }
            }
        }
        Value::Array(a) => Value::Array(a.iter().map(to_v3).collect()),
        other => other.clone(),
    }
}
