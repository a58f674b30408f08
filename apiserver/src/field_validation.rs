//! Server-side field validation (`fieldValidation=Ignore|Warn|Strict`): fields of a written
//! object that its kind's schema does not have. Upstream's decoder drops them in any case
//! (here the typed round trip of [`crate::registry::resource::normalize`] does); this module
//! only finds them, so that `Strict` can refuse the write with upstream's
//! `strict decoding error: unknown field "spec.replicaz"` and `Warn` (the default, as
//! upstream) can return them as `Warning` headers. kubectl v1.32 sends `Strict` for
//! `--validate=true` (its default) once the OpenAPI document declares the parameter.
//!
//! The walk uses the OpenAPI definitions ([`PatchMeta`]), so server and kubectl judge a
//! field by one table. Duplicate fields of a JSON body ([`duplicate_fields`]) are found in
//! the raw bytes, since the decoded map keeps only the last.

use serde_json::Value;

use crate::errors::{ApiError, ApiResult};
use crate::handlers::Query;
use crate::openapi::PatchMeta;

/// What to do with unknown fields, from the request's `fieldValidation` parameter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FieldValidation {
    Ignore,
    Warn,
    Strict,
}

impl FieldValidation {
    /// The request's directive; `Warn` when absent, as upstream.
    pub fn from_query(q: &Query) -> ApiResult<Self> {
        match q.get("fieldValidation").map(String::as_str) {
            None | Some("") | Some("Warn") => Ok(Self::Warn),
            Some("Ignore") => Ok(Self::Ignore),
            Some("Strict") => Ok(Self::Strict),
            Some(other) => Err(ApiError::bad_request(format!(
                "fieldValidation: Unsupported value: \"{other}\": supported values: \"Ignore\", \"Warn\", \"Strict\""
            ))),
        }
    }

    /// Checks `obj` of `kind` in `version` against `meta`: an error under `Strict`, the
    /// warnings to send under `Warn`, nothing under `Ignore`.
    pub fn check(
        self,
        meta: Option<PatchMeta<'_>>,
        kind: &str,
        version: &str,
        obj: &Value,
    ) -> ApiResult<Vec<String>> {
        if self == Self::Ignore {
            return Ok(Vec::new());
        }
        self.verdict(kind, version, unknown_fields(meta, obj))
    }

    /// [`FieldValidation::check`] for a request `body` that decoded to `obj`: a JSON body
    /// is scanned once, so that unknown and duplicate fields are reported in the order the
    /// document has them, as upstream's strict decoder does (`unknown field
    /// "spec.unknownField", duplicate field "spec.replicas"`); any other encoding is judged
    /// on the decoded object, which cannot repeat a field.
    pub fn check_body(
        self,
        meta: Option<PatchMeta<'_>>,
        kind: &str,
        version: &str,
        obj: &Value,
        body: &[u8],
    ) -> ApiResult<Vec<String>> {
        if self == Self::Ignore {
            return Ok(Vec::new());
        }
        let problems = match scan_json(body, meta) {
            Some(problems) => problems,
            None => unknown_fields(meta, obj),
        };
        self.verdict(kind, version, problems)
    }

    /// [`FieldValidation::check_body`] for a kind whose unknown fields are already known
    /// (a custom resource's, which pruning finds): duplicates still come from the body.
    pub fn check_unknown(
        self,
        kind: &str,
        version: &str,
        unknown: Vec<String>,
        body: &[u8],
    ) -> ApiResult<Vec<String>> {
        if self == Self::Ignore {
            return Ok(Vec::new());
        }
        let mut problems: Vec<Problem> = unknown.into_iter().map(Problem::Unknown).collect();
        if let Some(scanned) = scan_json(body, None) {
            problems.extend(scanned.into_iter().filter(|p| matches!(p, Problem::Duplicate(_))));
        }
        self.verdict(kind, version, problems)
    }

    fn verdict(self, kind: &str, version: &str, problems: Vec<Problem>) -> ApiResult<Vec<String>> {
        let messages: Vec<String> = problems.iter().map(Problem::message).collect();
        match self {
            Self::Strict if !messages.is_empty() => Err(ApiError::bad_request(format!(
                "{kind} in version \"{version}\" cannot be handled as a {kind}: strict decoding error: {}",
                messages.join(", ")
            ))),
            Self::Strict | Self::Ignore => Ok(Vec::new()),
            Self::Warn => Ok(messages),
        }
    }
}

/// A field the strict decoder refuses, by its path (`spec.replicas`).
#[derive(Clone, Debug, PartialEq, Eq)]
enum Problem {
    Unknown(String),
    Duplicate(String),
}

impl Problem {
    fn message(&self) -> String {
        match self {
            Problem::Unknown(path) => format!("unknown field \"{path}\""),
            Problem::Duplicate(path) => format!("duplicate field \"{path}\""),
        }
    }
}

/// The fields of `obj` that `meta` does not declare, in the decoded map's order.
fn unknown_fields(meta: Option<PatchMeta<'_>>, obj: &Value) -> Vec<Problem> {
    let mut unknown = Vec::new();
    if let Some(meta) = meta {
        walk(meta, obj, &mut String::new(), &mut unknown);
    }
    unknown.into_iter().map(Problem::Unknown).collect()
}

/// Collects the paths (`spec.template.spec.containers[0].imagee`) of the fields of `v` that
/// `meta` does not declare. Free-form values (no declared fields) are not entered.
fn walk(meta: PatchMeta<'_>, v: &Value, path: &mut String, out: &mut Vec<String>) {
    match v {
        Value::Object(map) if meta.declares_fields() => {
            for (key, value) in map {
                let len = path.len();
                if !path.is_empty() {
                    path.push('.');
                }
                path.push_str(key);
                match meta.field(key) {
                    Some(field) => walk(field.meta, value, path, out),
                    None => out.push(path.clone()),
                }
                path.truncate(len);
            }
        }
        // A list's schema is its elements' (see `PatchMeta::field`).
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                let len = path.len();
                path.push_str(&format!("[{i}]"));
                walk(meta, item, path, out);
                path.truncate(len);
            }
        }
        _ => {}
    }
}

/// The paths (`spec.replicas`, `spec.containers[0].name`) of keys a JSON document repeats
/// within one object. Empty for anything that is not JSON.
pub fn duplicate_fields(body: &[u8]) -> Vec<String> {
    scan_json(body, None)
        .unwrap_or_default()
        .into_iter()
        .filter_map(|p| match p {
            Problem::Duplicate(path) => Some(path),
            Problem::Unknown(_) => None,
        })
        .collect()
}

/// One pass over a JSON document: its repeated keys and, with `meta`, the keys the schema
/// does not declare (each reported where it first appears), in document order. `None`
/// when the body is not JSON.
fn scan_json(body: &[u8], meta: Option<PatchMeta<'_>>) -> Option<Vec<Problem>> {
    use serde::de::DeserializeSeed;
    let mut out = Vec::new();
    let mut de = serde_json::Deserializer::from_slice(body);
    Scan { path: String::new(), meta, out: &mut out }.deserialize(&mut de).ok()?;
    Some(out)
}

/// Walks a JSON value beside its schema, noting repeated and undeclared keys; the value
/// itself is discarded. Free-form values (no declared fields) are not judged.
struct Scan<'o, 'm> {
    path: String,
    meta: Option<PatchMeta<'m>>,
    out: &'o mut Vec<Problem>,
}

impl<'de> serde::de::DeserializeSeed<'de> for Scan<'_, '_> {
    type Value = ();
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> serde::de::Visitor<'de> for Scan<'_, '_> {
    type Value = ();
    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("JSON")
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let mut seen = std::collections::HashSet::new();
        let declared = self.meta.filter(|m| m.declares_fields());
        while let Some(key) = map.next_key::<String>()? {
            let path = if self.path.is_empty() { key.clone() } else { format!("{}.{key}", self.path) };
            let field = declared.and_then(|m| m.field(&key));
            let first = seen.insert(key);
            if !first {
                self.out.push(Problem::Duplicate(path.clone()));
            } else if declared.is_some() && field.is_none() {
                self.out.push(Problem::Unknown(path.clone()));
            }
            // An undeclared field's contents are not judged further, as upstream.
            let meta = field.map(|f| f.meta);
            map.next_value_seed(Scan { path, meta, out: &mut *self.out })?;
        }
        Ok(())
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let mut i = 0;
        // A list's schema is its elements' (see `PatchMeta::field`).
        while seq
            .next_element_seed(Scan {
                path: format!("{}[{i}]", self.path),
                meta: self.meta,
                out: &mut *self.out,
            })?
            .is_some()
        {
            i += 1;
        }
        Ok(())
    }
    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }
    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }
    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }
    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }
    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        Ok(())
    }
    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }
}

/// The `Warning` header values for `messages` (RFC 7234: code 299, agent `-`, quoted text).
pub fn warning_headers(messages: &[String]) -> impl Iterator<Item = String> + '_ {
    messages.iter().map(|m| format!("299 - \"{}\"", m.replace('\\', "\\\\").replace('"', "\\\"")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::openapi::OpenApi;
    use crate::registry::resources;
    use serde_json::json;
    use std::sync::OnceLock;

    fn api() -> &'static OpenApi {
        static API: OnceLock<OpenApi> = OnceLock::new();
        API.get_or_init(|| OpenApi::with_resources(resources::all().iter().map(|r| r.info.clone()).collect()))
    }

    fn query(v: &str) -> Query {
        [("fieldValidation".to_string(), v.to_string())].into_iter().collect()
    }

    #[test]
    fn finds_unknown_fields_at_every_depth() {
        let openapi = api();
        let meta = openapi.patch_meta("apps", "v1", "Deployment");
        let d = json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "d", "labels": {"any": "x"}, "bogus": 1},
            "spec": {"replicaz": 3, "template": {"spec": {"containers": [
                {"name": "c", "image": "i"}, {"name": "e", "imagee": "i", "env": [{"name": "A", "valu": "1"}]}
            ]}}}
        });
        let warnings = FieldValidation::Warn.check(meta, "Deployment", "v1", &d).unwrap();
        assert_eq!(
            warnings,
            [
                "unknown field \"metadata.bogus\"",
                "unknown field \"spec.replicaz\"",
                "unknown field \"spec.template.spec.containers[1].env[0].valu\"",
                "unknown field \"spec.template.spec.containers[1].imagee\"",
            ]
        );
        let err = FieldValidation::Strict.check(meta, "Deployment", "v1", &d).unwrap_err();
        assert_eq!(err.code, 400);
        assert!(err.message.starts_with(
            "Deployment in version \"v1\" cannot be handled as a Deployment: strict decoding error: unknown field \"metadata.bogus\""
        ));
        assert!(FieldValidation::Ignore.check(meta, "Deployment", "v1", &d).unwrap().is_empty());
    }

    #[test]
    fn free_form_values_and_maps_are_not_judged() {
        let openapi = api();
        let meta = openapi.patch_meta("", "v1", "ConfigMap");
        let cm = json!({"metadata": {"name": "c", "annotations": {"a": "b"}}, "data": {"anything": "x"}});
        assert!(FieldValidation::Strict.check(meta, "ConfigMap", "v1", &cm).unwrap().is_empty());
    }

    #[test]
    fn duplicate_keys_are_found_with_their_paths() {
        let body = br#"{"metadata":{"name":"a","name":"b"},"spec":{"containers":[{"name":"c","image":"i","image":"j"}]}}"#;
        assert_eq!(duplicate_fields(body), ["metadata.name", "spec.containers[0].image"]);
        assert!(duplicate_fields(b"not json").is_empty());
        let err = FieldValidation::Strict
            .check_body(None, "Pod", "v1", &json!({}), br#"{"metadata":{"name":"a","name":"b"}}"#)
            .unwrap_err();
        assert!(
            err.message.ends_with("strict decoding error: duplicate field \"metadata.name\""),
            "{}",
            err.message
        );
    }

    /// Upstream's strict decoder reports what it meets in document order; the conformance
    /// spec "should detect unknown and duplicate fields of a typed object" checks the text.
    #[test]
    fn unknown_and_duplicate_fields_in_document_order() {
        let openapi = api();
        let meta = openapi.patch_meta("apps", "v1", "Deployment");
        let body = br#"{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"my-dep"},
            "spec":{"unknownField":"foo","replicas":2,"replicas":3,
            "template":{"spec":{"containers":[{"name":"c","image":"i","bogus":{"x":1},"image":"j"}]}}}}"#;
        let obj: Value = serde_json::from_slice(body).unwrap();
        let err = FieldValidation::Strict.check_body(meta, "Deployment", "v1", &obj, body).unwrap_err();
        assert!(
            err.message.ends_with(
                "strict decoding error: unknown field \"spec.unknownField\", duplicate field \"spec.replicas\", \
                 unknown field \"spec.template.spec.containers[0].bogus\", \
                 duplicate field \"spec.template.spec.containers[0].image\""
            ),
            "{}",
            err.message
        );
        // Not JSON (YAML, protobuf): judged on the decoded object.
        let warnings = FieldValidation::Warn.check_body(meta, "Deployment", "v1", &obj, b"spec: {}").unwrap();
        assert_eq!(
            warnings,
            [
                "unknown field \"spec.template.spec.containers[0].bogus\"",
                "unknown field \"spec.unknownField\""
            ]
        );
    }

    #[test]
    fn parses_the_directive() {
        assert_eq!(FieldValidation::from_query(&Query::new()).unwrap(), FieldValidation::Warn);
        assert_eq!(FieldValidation::from_query(&query("Strict")).unwrap(), FieldValidation::Strict);
        assert_eq!(FieldValidation::from_query(&query("strict")).unwrap_err().code, 400);
        let h: Vec<String> = warning_headers(&["unknown field \"a\"".to_string()]).collect();
        assert_eq!(h, ["299 - \"unknown field \\\"a\\\"\""]);
    }
}
