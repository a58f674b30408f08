//! The patch metadata of the schemas, for a server-side strategic merge patch: the walk
//! upstream's `strategicpatch.LookupPatchMeta` does over a kind's OpenAPI schema, here over
//! the definitions the documents are made of (so server and kubectl read one table,
//! [`super::extensions`]).
//!
//! ```text
//! let pod = openapi.patch_meta("", "v1", "Pod")?;
//! let containers = pod.field("spec")?.meta.field("containers")?;
//! assert_eq!((containers.strategy, containers.merge_key), ("merge", Some("name")));
//! let image = containers.meta.field("image")?;   // containers.meta is the element's
//! ```

use serde_json::{Map, Value};

use super::schemas::V2_REF;

/// The schema of one object (or map) in a kind, able to answer for its fields.
#[derive(Clone, Copy)]
pub struct PatchMeta<'a> {
    definitions: &'a Map<String, Value>,
    schema: &'a Value,
}

/// What a strategic merge patch needs to know of one field.
#[derive(Clone, Copy)]
pub struct FieldMeta<'a> {
    /// `x-kubernetes-patch-strategy`: `""` (replace), `merge`, `retainKeys`, or
    /// `merge,retainKeys`.
    pub strategy: &'a str,
    /// `x-kubernetes-patch-merge-key` of a list merged element by element.
    pub merge_key: Option<&'a str>,
    /// `x-kubernetes-list-type` (`atomic`, `set`, `map`) for server-side apply.
    pub list_type: Option<&'a str>,
    /// `x-kubernetes-list-map-keys` of a `map` list.
    pub map_keys: &'a [Value],
    /// The field's value; for a list, its elements'.
    pub meta: PatchMeta<'a>,
}

impl FieldMeta<'_> {
    pub fn merges(&self) -> bool {
        self.strategy.split(',').any(|s| s == "merge")
    }

    pub fn retains_keys(&self) -> bool {
        self.strategy.split(',').any(|s| s == "retainKeys")
    }
}

impl<'a> PatchMeta<'a> {
    pub fn new(definitions: &'a Map<String, Value>, name: &str) -> Option<Self> {
        Some(Self { definitions, schema: definitions.get(name)? })
    }

    /// Follows `$ref` (and a single `allOf`) to the schema it names.
    fn resolve(&self, mut schema: &'a Value) -> &'a Value {
        for _ in 0..8 {
            if let Some([one]) = schema.get("allOf").and_then(Value::as_array).map(Vec::as_slice) {
                schema = one;
            }
            match schema.get("$ref").and_then(Value::as_str).and_then(|r| r.strip_prefix(V2_REF)) {
                Some(name) => match self.definitions.get(name) {
                    Some(s) => schema = s,
                    None => break,
                },
                None => break,
            }
        }
        schema
    }

    /// Whether the schema names its fields (`properties`) or its values
    /// (`additionalProperties`); false for free-form JSON (`RawExtension`, `JSON`), where any
    /// key may be data.
    pub fn declares_fields(&self) -> bool {
        self.schema.get("properties").is_some()
            || self.schema.get("additionalProperties").is_some_and(Value::is_object)
    }

    /// Whether the object is set as a whole (`x-kubernetes-map-type: atomic`, e.g. a label
    /// selector), never field by field.
    pub fn is_atomic(&self) -> bool {
        self.schema.get("x-kubernetes-map-type").and_then(Value::as_str) == Some("atomic")
    }

    /// The field `name` of this object, or the value schema of a map (`additionalProperties`).
    /// None for a field the schema does not have.
    pub fn field(&self, name: &str) -> Option<FieldMeta<'a>> {
        let prop = match self.schema.get("properties").and_then(|p| p.get(name)) {
            Some(p) => p,
            None => self.schema.get("additionalProperties").filter(|v| v.is_object())?,
        };
        let strategy = prop.get("x-kubernetes-patch-strategy").and_then(Value::as_str).unwrap_or("");
        let merge_key = prop.get("x-kubernetes-patch-merge-key").and_then(Value::as_str);
        let list_type = prop.get("x-kubernetes-list-type").and_then(Value::as_str);
        let map_keys =
            prop.get("x-kubernetes-list-map-keys").and_then(Value::as_array).map_or(&[][..], Vec::as_slice);
        let mut value = self.resolve(prop);
        if let Some(items) = value.get("items") {
            value = self.resolve(items);
        }
        Some(FieldMeta {
            strategy,
            merge_key,
            list_type,
            map_keys,
            meta: PatchMeta { definitions: self.definitions, schema: value },
        })
    }
}
