//! Custom resources in the OpenAPI documents (upstream's CRD `builder`): each served
//! version of a CustomResourceDefinition becomes a definition named after its reversed
//! group (`com.example.stable.v1.CronTab`), made from the CRD's structural schema with
//! `apiVersion`, `kind` and `metadata` (ObjectMeta) added, plus its list kind; its paths are
//! those of any resource.

use std::sync::LazyLock;

use serde_json::{Map, Value, json};

use super::schemas::{self, Definitions, V2_REF};
use crate::registry::resource::ResourceInfo;

const OBJECT_META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta";

/// One served version of a CRD, as the documents need it.
#[derive(Clone, Debug)]
pub struct CustomKind {
    pub info: ResourceInfo,
    /// The version's `openAPIV3Schema`.
    pub schema: Value,
}

/// `stable.example.com`, `v1`, `CronTab` → `com.example.stable.v1.CronTab`.
pub fn definition_name(group: &str, version: &str, kind: &str) -> String {
    let reversed: Vec<&str> = group.split('.').rev().collect();
    format!("{}.{version}.{kind}", reversed.join("."))
}

/// The v2 definition of a custom kind: the schema without what Swagger 2.0 cannot say
/// (upstream drops `nullable`, the combinators and `x-kubernetes-*` validations there), with
/// the object fields every kind has.
fn definition(group: &str, version: &str, kind: &str, schema: &Value, v2: bool) -> Value {
    let mut def = if v2 { strip_for_v2(schema) } else { schema.clone() };
    if !def.is_object() {
        def = json!({"type": "object"});
    }
    let props = def.as_object_mut().expect("an object").entry("properties").or_insert_with(|| json!({}));
    if let Some(p) = props.as_object_mut() {
        p.insert(
            "apiVersion".into(),
            json!({"description": "APIVersion defines the versioned schema of this representation of an object. Servers should convert recognized schemas to the latest internal value, and may reject unrecognized values. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#resources", "type": "string"}),
        );
        p.insert(
            "kind".into(),
            json!({"description": "Kind is a string value representing the REST resource this object represents. Servers may infer this from the endpoint the client submits requests to. Cannot be updated. In CamelCase. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#types-kinds", "type": "string"}),
        );
        p.insert(
            "metadata".into(),
            json!({"$ref": format!("{V2_REF}{OBJECT_META}"), "description": "Standard object's metadata. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata"}),
        );
    }
    schemas::add_gvk(&mut def, schemas::gvk(group, version, kind));
    def
}

/// What a Swagger 2.0 schema keeps of a structural schema.
/// A free-form object (`x-kubernetes-preserve-unknown-fields` without properties) is
/// published as a plain object, as upstream publishes a CRD without a schema.
fn strip_for_v2(v: &Value) -> Value {
    match v {
        Value::Object(o) => Value::Object(
            o.iter()
                .filter(|(k, _)| {
                    !matches!(k.as_str(), "nullable" | "oneOf" | "anyOf" | "not" | "x-kubernetes-validations")
                })
                .filter(|(k, _)| {
                    k.as_str() != "x-kubernetes-preserve-unknown-fields" || o.contains_key("properties")
                })
                .map(|(k, v)| {
                    // `properties` and `additionalProperties` hold schemas; other keys (a
                    // `default`, an `enum`) hold data, kept as is.
                    let v = match k.as_str() {
                        "properties" | "patternProperties" | "definitions" => match v {
                            Value::Object(m) => {
                                Value::Object(m.iter().map(|(k, s)| (k.clone(), strip_for_v2(s))).collect())
                            }
                            other => other.clone(),
                        },
                        "items" | "additionalProperties" | "allOf" => strip_for_v2(v),
                        _ => v.clone(),
                    };
                    (k.clone(), v)
                })
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(strip_for_v2).collect()),
        other => other.clone(),
    }
}

/// Adds the custom kinds (and their list kinds) to `defs`.
pub fn add_definitions(defs: &mut Definitions, kinds: &[CustomKind]) {
    for k in kinds {
        let (g, v, kind) = (k.info.group, k.info.version, k.info.kind);
        let name = definition_name(g, v, kind);
        defs.schemas.insert(name.clone(), definition(g, v, kind, &k.schema, true));
        let list_kind = k.info.list_kind();
        let list_name = definition_name(g, v, &list_kind);
        let mut list = schemas::list_schema(kind, &name);
        schemas::add_gvk(&mut list, schemas::gvk(g, v, &list_kind));
        defs.schemas.insert(list_name.clone(), list);
        defs.names.insert((g.to_string(), v.to_string(), kind.to_string()), name);
        defs.names.insert((g.to_string(), v.to_string(), list_kind), list_name);
    }
}

/// ObjectMeta's definition and every one it refers to, in v2 form (generated once).
fn meta_definitions() -> &'static Map<String, Value> {
    static META: LazyLock<Map<String, Value>> = LazyLock::new(|| {
        let mut req = schemas::Request::default();
        if let Some(k) = super::kinds::find("", "v1", "ConfigMap") {
            req.resources.push(k);
        }
        let defs = schemas::generate(&req);
        defs.closure([OBJECT_META])
            .into_iter()
            .filter_map(|n| Some((n.clone(), defs.schemas.get(&n)?.clone())))
            .collect()
    });
    &META
}

/// The definitions a custom kind's field ownership and field validation read (its own,
/// ObjectMeta's and theirs), and the kind's definition name.
pub fn patch_definitions(
    group: &str,
    version: &str,
    kind: &str,
    schema: &Value,
) -> (Map<String, Value>, String) {
    let mut defs = meta_definitions().clone();
    let name = definition_name(group, version, kind);
    defs.insert(name.clone(), definition(group, version, kind, schema, true));
    (defs, name)
}
