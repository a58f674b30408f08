//! PATCH: JSON merge patch (RFC 7386), JSON patch (RFC 6902) and, for kinds with a schema,
//! strategic merge patch ([`strategic`]). A patch is applied to the stored object in a
//! read-modify-write that retries on conflicts, unless the patch itself pins a
//! resourceVersion.

mod duplicate_keys;
pub mod strategic;

use http::HeaderMap;
use serde_json::{Map, Value, json};

use crate::errors::{ApiError, ApiResult};
use crate::field_validation::FieldValidation;
use crate::fieldmanager::{self, Manager};
use crate::handlers::Query;
use crate::openapi::OpenApi;
use crate::registry::store::Store;

/// Most operations one JSON patch may have (upstream's limit).
const MAX_JSON_PATCH_OPS: usize = 10_000;

/// RFC 7386: objects merge recursively, `null` removes, anything else replaces.
pub fn merge_patch(target: &mut Value, patch: &Value) {
    match patch {
        Value::Object(p) => {
            if !target.is_object() {
                *target = Value::Object(Map::new());
            }
            let t = target.as_object_mut().expect("made an object");
            for (k, v) in p {
                if v.is_null() {
                    t.remove(k);
                } else {
                    merge_patch(t.entry(k.clone()).or_insert(Value::Null), v);
                }
            }
        }
        other => *target = other.clone(),
    }
}

/// A JSON pointer's tokens (RFC 6901), with `~1` and `~0` unescaped.
fn pointer(path: &str) -> ApiResult<Vec<String>> {
    if path.is_empty() {
        return Ok(Vec::new());
    }
    let rest = path
        .strip_prefix('/')
        .ok_or_else(|| ApiError::bad_request(format!("invalid JSON pointer {path:?}")))?;
    Ok(rest.split('/').map(|t| t.replace("~1", "/").replace("~0", "~")).collect())
}

fn parent_mut<'a>(doc: &'a mut Value, tokens: &[String], op: &str) -> ApiResult<&'a mut Value> {
    let mut cur = doc;
    for t in tokens {
        cur = match cur {
            Value::Object(m) => m.get_mut(t),
            Value::Array(a) => t.parse::<usize>().ok().and_then(|i| a.get_mut(i)),
            _ => None,
        }
        .ok_or_else(|| ApiError::unprocessable_patch(op, &format!("path {t:?} does not exist")))?;
    }
    Ok(cur)
}

fn get<'a>(doc: &'a Value, tokens: &[String]) -> Option<&'a Value> {
    let mut cur = doc;
    for t in tokens {
        cur = match cur {
            Value::Object(m) => m.get(t)?,
            Value::Array(a) => a.get(t.parse::<usize>().ok()?)?,
            _ => return None,
        };
    }
    Some(cur)
}

fn add(doc: &mut Value, tokens: &[String], value: Value, op: &str) -> ApiResult<()> {
    let Some((last, parent)) = tokens.split_last() else {
        *doc = value;
        return Ok(());
    };
    match parent_mut(doc, parent, op)? {
        Value::Object(m) => {
            m.insert(last.clone(), value);
        }
        Value::Array(a) => {
            let i = if last == "-" {
                a.len()
            } else {
                last.parse::<usize>()
                    .ok()
                    .filter(|i| *i <= a.len())
                    .ok_or_else(|| ApiError::unprocessable_patch(op, &format!("index {last} out of range")))?
            };
            a.insert(i, value);
        }
        _ => return Err(ApiError::unprocessable_patch(op, "parent is not a container")),
    }
    Ok(())
}

fn remove(doc: &mut Value, tokens: &[String], op: &str) -> ApiResult<Value> {
    let (last, parent) =
        tokens.split_last().ok_or_else(|| ApiError::unprocessable_patch(op, "cannot remove the root"))?;
    match parent_mut(doc, parent, op)? {
        Value::Object(m) => m
            .remove(last)
            .ok_or_else(|| ApiError::unprocessable_patch(op, &format!("path {last:?} does not exist"))),
        Value::Array(a) => {
            let i =
                last.parse::<usize>().ok().filter(|i| *i < a.len()).ok_or_else(|| {
                    ApiError::unprocessable_patch(op, &format!("index {last} out of range"))
                })?;
            Ok(a.remove(i))
        }
        _ => Err(ApiError::unprocessable_patch(op, "parent is not a container")),
    }
}

/// RFC 6902.
pub fn json_patch(doc: &mut Value, patch: &Value) -> ApiResult<()> {
    let ops = patch
        .as_array()
        .ok_or_else(|| ApiError::bad_request("a JSON patch must be an array of operations"))?;
    if ops.len() > MAX_JSON_PATCH_OPS {
        return Err(ApiError::too_large(format!(
            "the JSON patch has {} operations, more than the allowed {MAX_JSON_PATCH_OPS}",
            ops.len()
        )));
    }
    for op in ops {
        let name =
            op["op"].as_str().ok_or_else(|| ApiError::bad_request("JSON patch operation without \"op\""))?;
        let path = pointer(
            op["path"]
                .as_str()
                .ok_or_else(|| ApiError::bad_request("JSON patch operation without \"path\""))?,
        )?;
        match name {
            "add" => add(
                doc,
                &path,
                op.get("value").cloned().ok_or_else(|| ApiError::bad_request("add without value"))?,
                name,
            )?,
            "remove" => {
                remove(doc, &path, name)?;
            }
            "replace" => {
                let value =
                    op.get("value").cloned().ok_or_else(|| ApiError::bad_request("replace without value"))?;
                remove(doc, &path, name)?;
                add(doc, &path, value, name)?;
            }
            "move" | "copy" => {
                let from = pointer(
                    op["from"]
                        .as_str()
                        .ok_or_else(|| ApiError::bad_request(format!("{name} without from")))?,
                )?;
                let value = if name == "move" {
                    remove(doc, &from, name)?
                } else {
                    get(doc, &from)
                        .cloned()
                        .ok_or_else(|| ApiError::unprocessable_patch(name, "from path does not exist"))?
                };
                add(doc, &path, value, name)?;
            }
            "test" => {
                let want = op.get("value").cloned().unwrap_or(Value::Null);
                if get(doc, &path) != Some(&want) {
                    return Err(ApiError::unprocessable_patch(name, "testing value failed"));
                }
            }
            other => return Err(ApiError::bad_request(format!("unknown JSON patch operation {other:?}"))),
        }
    }
    Ok(())
}

impl ApiError {
    fn unprocessable_patch(op: &str, why: &str) -> Self {
        let mut e = ApiError::bad_request(format!(
            "the server rejected our request due to an error in our request: {op} operation does not apply: {why}"
        ));
        e.code = 422;
        e.reason = "Invalid";
        e
    }
}

/// A PATCH body, decoded by its `Content-Type`.
#[derive(Debug)]
pub enum Patch {
    /// `application/json-patch+json`: a list of operations.
    Json(Value),
    /// `application/merge-patch+json`.
    Merge(Value),
    /// `application/strategic-merge-patch+json`.
    Strategic(Value),
    /// `application/apply-patch+yaml`: server-side apply of a configuration (YAML or JSON).
    /// The configuration, and the keys it repeats (`line 11: key "foo" already set in
    /// map`), which field validation judges.
    Apply(Value, Vec<String>),
}

impl Patch {
    /// Decodes a PATCH body; 415 for a type that is no patch.
    pub fn decode(headers: &HeaderMap, body: &[u8]) -> ApiResult<Self> {
        let ct = headers.get(http::header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or_default();
        let make: fn(Value) -> Self = match ct.split(';').next().unwrap_or_default().trim() {
            "application/json-patch+json" => Self::Json,
            "application/merge-patch+json" => Self::Merge,
            "application/strategic-merge-patch+json" => Self::Strategic,
            "application/apply-patch+yaml" => {
                let config: Value = serde_yaml::from_slice(body)
                    .map_err(|e| ApiError::bad_request(format!("error decoding YAML: {e}")))?;
                if !config.is_object() {
                    return Err(ApiError::bad_request("an applied configuration must be an object"));
                }
                return Ok(Self::Apply(config, duplicate_keys::find(body)));
            }
            other => return Err(ApiError::unsupported_media_type(other)),
        };
        serde_json::from_slice(body)
            .map(make)
            .map_err(|e| ApiError::bad_request(format!("error decoding patch: {e}")))
    }
}

/// Upstream's answer to a strategic merge patch of a kind without Go struct (a custom
/// resource): the types it does take.
fn strategic_unsupported() -> ApiError {
    let mut e = ApiError::unsupported_media_type("application/strategic-merge-patch+json");
    e.message = "the body of the request was in an unknown format - accepted media types include: \
                 application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml"
        .into();
    e
}

/// The object a PATCH request addresses.
pub struct Target<'a> {
    pub ns: Option<&'a str>,
    pub name: &'a str,
    /// `status` for the status subresource (whose kind is the resource's).
    pub subresource: Option<&'a str>,
}

/// Applies a PATCH request by `manager` to the stored object and stores the result.
/// `openapi` gives the kind's schema: patch strategies, field validation, field ownership.
pub async fn apply_patch(
    store: &Store,
    openapi: &OpenApi,
    target: Target<'_>,
    patch: Patch,
    q: &Query,
    manager: &str,
) -> ApiResult<(Value, Vec<String>)> {
    let Target { ns, name, subresource } = target;
    let fields = FieldValidation::from_query(q)?;
    let info = &store.res.info;
    // The schema: for strategic merge, field validation and managed fields.
    let schema = match store.res.hooks.patch_meta() {
        Some(m) => Some(m),
        None => {
            openapi.rendered().await;
            openapi.patch_meta(info.group, info.version, info.kind)
        }
    };
    let api_version = info.api_version();
    let manager = Manager { name: manager, api_version: &api_version, subresource };
    if let Patch::Apply(config, duplicates) = &patch {
        return server_side_apply(store, schema, ns, name, config, duplicates, q, &manager, fields).await;
    }
    let meta = match patch {
        Patch::Strategic(_) if store.res.hooks.strategic_merge() => {
            Some(schema.ok_or_else(strategic_unsupported)?)
        }
        Patch::Strategic(_) => return Err(strategic_unsupported()),
        _ => None,
    };
    // The warnings of the last attempt of the update loop.
    let warnings = parking_lot::Mutex::new(Vec::new());
    let dry = crate::handlers::dry_run(q);
    let pinned = match &patch {
        Patch::Json(_) | Patch::Apply(..) => None,
        Patch::Merge(p) | Patch::Strategic(p) => {
            p["metadata"]["resourceVersion"].as_str().map(str::to_string)
        }
    };
    store
        .guaranteed_update(ns, name, subresource, dry, |old| {
            let doc = match &patch {
                Patch::Json(p) => {
                    let mut doc = old.clone();
                    json_patch(&mut doc, p)?;
                    doc
                }
                Patch::Merge(p) => {
                    let mut doc = old.clone();
                    merge_patch(&mut doc, p);
                    doc
                }
                Patch::Strategic(p) => strategic::strategic_merge(old, p, meta).map_err(|e| {
                    let mut err = ApiError::bad_request(e.to_string());
                    if e.code() == 422 {
                        err.code = 422;
                        err.reason = "Invalid";
                    }
                    err
                })?,
                Patch::Apply(..) => unreachable!("applied above"),
            };
            if let Some(rv) = &pinned
                && old["metadata"]["resourceVersion"].as_str() != Some(rv.as_str())
            {
                return Err(ApiError::stale(store.res.info.plural, store.res.info.group, name));
            }
            if doc["metadata"]["name"].as_str() != Some(name) {
                return Err(ApiError::bad_request("metadata.name cannot be changed by a patch"));
            }
            // The stored object has no unknown fields, so any found came with the patch.
            *warnings.lock() = match store.res.hooks.unknown_fields(&doc) {
                Some(unknown) => fields.check_unknown(info.kind, info.version, unknown, b"")?,
                None => fields.check(schema, info.kind, info.version, &doc)?,
            };
            let mut doc = doc;
            fieldmanager::record_update(schema, Some(old), &mut doc, &manager);
            Ok(doc)
        })
        .await
        .map(|obj| (obj, warnings.into_inner()))
}

/// Server-side apply: merges `config` into the live object as `manager` (creating the
/// object when it does not exist), refusing fields other managers set to other values
/// unless `force=true` (see [`fieldmanager::apply`]).
#[allow(clippy::too_many_arguments)]
async fn server_side_apply(
    store: &Store,
    schema: Option<crate::openapi::PatchMeta<'_>>,
    ns: Option<&str>,
    name: &str,
    config: &Value,
    duplicates: &[String],
    q: &Query,
    manager: &Manager<'_>,
    fields: FieldValidation,
) -> ApiResult<(Value, Vec<String>)> {
    let info = &store.res.info;
    if !q.contains_key("fieldManager") {
        return Err(ApiError::bad_request(
            "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is required for apply patch",
        ));
    }
    let force = crate::handlers::query::flag(q, "force");
    if config["apiVersion"].as_str() != Some(manager.api_version)
        || config["kind"].as_str() != Some(info.kind)
    {
        return Err(ApiError::bad_request(format!(
            "the applied configuration is a {} {}, this endpoint serves {} {}",
            config["apiVersion"].as_str().unwrap_or("(no apiVersion)"),
            config["kind"].as_str().unwrap_or("(no kind)"),
            manager.api_version,
            info.kind
        )));
    }
    if config["metadata"]["name"].as_str() != Some(name) {
        return Err(ApiError::bad_request(
            "the applied configuration's metadata.name must match the request's name",
        ));
    }
    if let (Some(want), Some(have)) = (ns, config["metadata"]["namespace"].as_str())
        && want != have
    {
        return Err(ApiError::bad_request(
            "the namespace of the provided object does not match the namespace sent on the request",
        ));
    }
    let mut warnings = Vec::new();
    for d in duplicates {
        match fields {
            FieldValidation::Strict => {
                return Err(ApiError::bad_request(format!(
                    "error strict decoding YAML: error converting YAML to JSON: yaml: unmarshal errors:\n  {d}"
                )));
            }
            FieldValidation::Warn => warnings.push(d.clone()),
            FieldValidation::Ignore => {}
        }
    }
    let mut config = config.clone();
    match store.res.hooks.unknown_fields(&config) {
        // A custom resource: fields its schema lacks are refused under Strict with the
        // message of upstream's typed conversion, else pruned (with warnings under Warn).
        Some(unknown) if !unknown.is_empty() => {
            if fields == FieldValidation::Strict {
                let scope = format!("{}/{name}", ns.unwrap_or_default());
                let listed: Vec<String> =
                    unknown.iter().map(|f| format!(".{f}: field not declared in schema")).collect();
                let detail = if listed.len() == 1 {
                    listed[0].clone()
                } else {
                    format!("errors:\n  {}", listed.join("\n  "))
                };
                return Err(ApiError::bad_request(format!(
                    "failed to create typed patch object ({scope}; {}, Kind={}): {detail}",
                    manager.api_version, info.kind
                )));
            }
            if fields == FieldValidation::Warn {
                warnings.extend(unknown.iter().map(|f| format!("unknown field \"{f}\"")));
            }
            store.res.hooks.convert_in(&mut config);
        }
        Some(_) => {}
        None => warnings.extend(fields.check(schema, info.kind, info.version, &config)?),
    }
    let config = &config;
    let dry = crate::handlers::dry_run(q);
    let mut base =
        json!({ "apiVersion": manager.api_version, "kind": info.kind, "metadata": { "name": name } });
    if let Some(ns) = ns {
        base["metadata"]["namespace"] = json!(ns);
    }
    match store.get_fresh(ns, name).await {
        Err(e) if e.is_not_found() && manager.subresource.is_none() => {
            let obj = fieldmanager::apply(schema, None, base, config.clone(), manager, force)?;
            store.create(ns, obj, dry).await.map(|o| (o, warnings))
        }
        Err(e) => Err(e),
        Ok(_) => store
            .guaranteed_update(ns, name, manager.subresource, dry, |old| {
                fieldmanager::apply(schema, Some(old), base.clone(), config.clone(), manager, force)
            })
            .await
            .map(|o| (o, warnings)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn merge_patch_rfc7386() {
        let mut doc = json!({"a": "b", "c": {"d": "e", "f": "g"}});
        merge_patch(&mut doc, &json!({"a": "z", "c": {"f": null}}));
        assert_eq!(doc, json!({"a": "z", "c": {"d": "e"}}));
        let mut doc = json!({"a": [1, 2]});
        merge_patch(&mut doc, &json!({"a": [3]}));
        assert_eq!(doc, json!({"a": [3]}));
    }

    #[test]
    fn json_patch_rfc6902() {
        let mut doc = json!({"metadata": {"labels": {"a": "1"}}, "spec": {"list": [1, 2, 3]}});
        json_patch(
            &mut doc,
            &json!([
                {"op": "add", "path": "/metadata/labels/b~1c", "value": "2"},
                {"op": "replace", "path": "/spec/list/0", "value": 9},
                {"op": "remove", "path": "/spec/list/1"},
                {"op": "copy", "from": "/spec/list", "path": "/spec/copy"},
                {"op": "move", "from": "/metadata/labels/a", "path": "/metadata/labels/moved"},
                {"op": "add", "path": "/spec/list/-", "value": 4},
                {"op": "test", "path": "/spec/copy/1", "value": 3}
            ]),
        )
        .unwrap();
        assert_eq!(
            doc,
            json!({"metadata": {"labels": {"b/c": "2", "moved": "1"}}, "spec": {"list": [9, 3, 4], "copy": [9, 3]}})
        );
        let err =
            json_patch(&mut doc, &json!([{"op": "test", "path": "/spec/copy/0", "value": 1}])).unwrap_err();
        assert_eq!(err.code, 422);
        assert!(json_patch(&mut doc, &json!([{"op": "remove", "path": "/nope"}])).is_err());
    }
}
