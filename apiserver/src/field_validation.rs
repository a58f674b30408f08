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
        self.check_with_duplicates(meta, kind, version, obj, &[])
    }

    /// [`FieldValidation::check`], also reporting the `duplicates` found in the body.
    pub fn check_with_duplicates(
        self,
        meta: Option<PatchMeta<'_>>,
        kind: &str,
        version: &str,
        obj: &Value,
        duplicates: &[String],
    ) -> ApiResult<Vec<String>> {
        if self == Self::Ignore {
            return Ok(Vec::new());
        }
        let mut unknown = Vec::new();
        if let Some(meta) = meta {
            walk(meta, obj, &mut String::new(), &mut unknown);
        }
        let messages: Vec<String> = duplicates
            .iter()
            .map(|path| format!("duplicate field \"{path}\""))
            .chain(unknown.iter().map(|path| format!("unknown field \"{path}\"")))
            .collect();
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
    use serde::de::DeserializeSeed;
    let mut out = Vec::new();
    let mut de = serde_json::Deserializer::from_slice(body);
    let _ = Scan { path: String::new(), out: &mut out }.deserialize(&mut de);
    out
}

/// Walks a JSON value, noting repeated keys; the value itself is discarded.
struct Scan<'o> {
    path: String,
    out: &'o mut Vec<String>,
}

impl<'de> serde::de::DeserializeSeed<'de> for Scan<'_> {
    type Value = ();
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> serde::de::Visitor<'de> for Scan<'_> {
    type Value = ();
    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("JSON")
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let mut seen = std::collections::HashSet::new();
        while let Some(key) = map.next_key::<String>()? {
            let path = if self.path.is_empty() { key.clone() } else { format!("{}.{key}", self.path) };
            if !seen.insert(key) {
                self.out.push(path.clone());
            }
            map.next_value_seed(Scan { path, out: &mut *self.out })?;
        }
        Ok(())
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let mut i = 0;
        while seq
            .next_element_seed(Scan { path: format!("{}[{i}]", self.path), out: &mut *self.out })?
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
            .check_with_duplicates(None, "Pod", "v1", &json!({}), &["metadata.name".into()])
            .unwrap_err();
        assert!(
            err.message.ends_with("strict decoding error: duplicate field \"metadata.name\""),
            "{}",
            err.message
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
