//! Field management (upstream's `fieldmanager`): `metadata.managedFields` records which
//! manager set which fields, by operation. Server-side apply
//! (`application/apply-patch+yaml`) uses it to merge a manager's configuration into the
//! live object, to refuse taking fields another manager set to other values (409 naming
//! them, unless `force`), and to remove the fields a manager applied before and no longer
//! does. Every other write (create, update, patch) records its changed fields as an
//! `Update` entry of its manager and takes them from the others, as upstream.
//!
//! Lists and maps follow the schema's `x-kubernetes-list-type` / `-list-map-keys` /
//! `-map-type` ([`fieldset`]); the merge is structural ([`merge`]).

pub mod fieldset;
mod merge;
#[cfg(test)]
mod tests;

use serde_json::{Value, json};

use crate::errors::{ApiError, ApiResult};
use crate::openapi::PatchMeta;
use crate::registry::store::now_rfc3339;
use fieldset::{FieldSet, display, from_fields_v1, is_element, remove_at, set_of, to_fields_v1, value_at};

/// Who is writing and how (the `fieldManager` parameter, or the client's name).
pub struct Manager<'a> {
    pub name: &'a str,
    /// `apps/v1`: the version the fields are recorded in.
    pub api_version: &'a str,
    /// The subresource written (`status`), if any.
    pub subresource: Option<&'a str>,
}

/// Longest manager name upstream accepts.
const MAX_MANAGER_LEN: usize = 128;

/// The manager of a request: `fieldManager`, else the user agent's program name (as
/// upstream: `kubectl/v1.32.0 (linux/amd64)` → `kubectl`).
pub fn manager_name(field_manager: Option<&str>, user_agent: Option<&str>) -> ApiResult<String> {
    if let Some(m) = field_manager {
        if m.len() > MAX_MANAGER_LEN || m.chars().any(|c| c.is_control()) {
            return Err(ApiError::bad_request(format!(
                "fieldManager: Invalid value: \"{m}\": must be at most {MAX_MANAGER_LEN} printable characters"
            )));
        }
        return Ok(m.to_string());
    }
    let ua = user_agent.unwrap_or_default();
    let name = ua.split('/').next().unwrap_or_default().trim();
    Ok(if name.is_empty() { "unknown".to_string() } else { name.chars().take(MAX_MANAGER_LEN).collect() })
}

/// One `managedFields` entry.
struct Entry {
    manager: String,
    operation: String,
    api_version: String,
    time: Option<String>,
    subresource: Option<String>,
    fields: FieldSet,
}

impl Entry {
    fn is(&self, m: &Manager<'_>, operation: &str) -> bool {
        self.manager == m.name && self.operation == operation && self.subresource.as_deref() == m.subresource
    }
}

fn read_entries(obj: &Value) -> Vec<Entry> {
    let Some(list) = obj["metadata"]["managedFields"].as_array() else { return Vec::new() };
    list.iter()
        .map(|e| Entry {
            manager: e["manager"].as_str().unwrap_or_default().to_string(),
            operation: e["operation"].as_str().unwrap_or("Update").to_string(),
            api_version: e["apiVersion"].as_str().unwrap_or_default().to_string(),
            time: e["time"].as_str().map(str::to_string),
            subresource: e["subresource"].as_str().filter(|s| !s.is_empty()).map(str::to_string),
            fields: from_fields_v1(&e["fieldsV1"]),
        })
        .collect()
}

fn write_entries(obj: &mut Value, entries: Vec<Entry>) {
    let list: Vec<Value> = entries
        .into_iter()
        .filter(|e| !e.fields.is_empty())
        .map(|e| {
            let mut v = json!({
                "manager": e.manager,
                "operation": e.operation,
                "apiVersion": e.api_version,
                "fieldsType": "FieldsV1",
                "fieldsV1": to_fields_v1(&e.fields),
            });
            if let Some(t) = e.time {
                v["time"] = json!(t);
            }
            if let Some(s) = e.subresource {
                v["subresource"] = json!(s);
            }
            v
        })
        .collect();
    if let Some(m) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        if list.is_empty() {
            m.remove("managedFields");
        } else {
            m.insert("managedFields".into(), Value::Array(list));
        }
    }
}

/// The entry of `m` for `operation`, created if missing.
fn entry_of<'e>(entries: &'e mut Vec<Entry>, m: &Manager<'_>, operation: &str) -> &'e mut Entry {
    let i = match entries.iter().position(|e| e.is(m, operation)) {
        Some(i) => i,
        None => {
            entries.push(Entry {
                manager: m.name.to_string(),
                operation: operation.to_string(),
                api_version: m.api_version.to_string(),
                time: None,
                subresource: m.subresource.map(str::to_string),
                fields: FieldSet::new(),
            });
            entries.len() - 1
        }
    };
    let e = &mut entries[i];
    e.api_version = m.api_version.to_string();
    e.time = Some(now_rfc3339());
    e
}

/// Records a non-apply write: the fields `new` sets that differ from `old` become `m`'s
/// (operation `Update`) and stop being anyone else's; fields `new` dropped are no one's.
/// `old` is None for a create.
pub fn record_update(meta: Option<PatchMeta<'_>>, old: Option<&Value>, new: &mut Value, m: &Manager<'_>) {
    let status = m.subresource == Some("status");
    let new_set = set_of(meta, new, status);
    let old_set = old.map(|o| set_of(meta, o, status)).unwrap_or_default();
    let changed: FieldSet = new_set
        .iter()
        .filter(|p| match old {
            None => true,
            Some(o) if is_element(p) => value_at(o, p).is_none(),
            Some(o) => value_at(o, p) != value_at(new, p),
        })
        .cloned()
        .collect();
    let dropped: FieldSet = old_set.difference(&new_set).cloned().collect();
    // The entries of the stored object: a client cannot rewrite them by sending its own,
    // except to clear them all with an empty list (as upstream).
    let cleared = new["metadata"]["managedFields"].as_array().is_some_and(Vec::is_empty);
    let mut entries = match old {
        Some(o) if !cleared => read_entries(o),
        _ => Vec::new(),
    };
    for e in &mut entries {
        e.fields.retain(|p| !changed.contains(p) && !dropped.contains(p));
    }
    if !changed.is_empty() {
        entry_of(&mut entries, m, "Update").fields.extend(changed);
    }
    write_entries(new, entries);
}

/// Server-side apply of `config` by `m` onto `live` (None: the object does not exist yet;
/// `base` is then the object to start from). Returns the object to store.
pub fn apply(
    meta: Option<PatchMeta<'_>>,
    live: Option<&Value>,
    base: Value,
    mut config: Value,
    m: &Manager<'_>,
    force: bool,
) -> ApiResult<Value> {
    drop_nulls(&mut config);
    let status = m.subresource == Some("status");
    let applied = set_of(meta, &config, status);
    let mut entries = live.map(read_entries).unwrap_or_default();
    let previous = entries.iter().find(|e| e.is(m, "Apply")).map(|e| e.fields.clone()).unwrap_or_default();

    // Conflicts: fields another manager owns that this configuration sets to another value.
    let current = live.unwrap_or(&base);
    let mut conflicts: Vec<(String, String, String)> = Vec::new();
    for e in entries.iter().filter(|e| !e.is(m, "Apply")) {
        for p in applied.intersection(&e.fields) {
            if !is_element(p) && value_at(current, p) != value_at(&config, p) {
                conflicts.push((e.manager.clone(), e.api_version.clone(), display(p)));
            }
        }
    }
    if !conflicts.is_empty() {
        if !force {
            return Err(conflict_error(&conflicts));
        }
        // Forced: the applier takes the fields.
        for e in entries.iter_mut().filter(|e| !e.is(m, "Apply")) {
            e.fields.retain(|p| !applied.contains(p) || is_element(p));
        }
    }

    let mut obj = live.cloned().unwrap_or(base);
    merge::merge(meta, &mut obj, &config);

    // Fields this manager applied before and no longer does, and no one else owns, go.
    let others: FieldSet =
        entries.iter().filter(|e| !e.is(m, "Apply")).flat_map(|e| e.fields.iter().cloned()).collect();
    let gone: Vec<&Vec<String>> = previous
        .difference(&applied)
        .filter(|p| !others.contains(*p) && !others.iter().any(|o| o.starts_with(p)))
        .collect();
    // A removed element takes its fields with it: only the outermost paths are removed
    // (an element's key field removed first would leave the element unfindable).
    for p in gone.iter().filter(|p| !gone.iter().any(|q| q.len() < p.len() && p.starts_with(q))) {
        remove_at(&mut obj, p);
    }
    entry_of(&mut entries, m, "Apply").fields = applied;
    write_entries(&mut obj, entries);
    Ok(obj)
}

/// Upstream's apply conflict: 409 naming each manager and field.
fn conflict_error(conflicts: &[(String, String, String)]) -> ApiError {
    let lines: Vec<String> = conflicts
        .iter()
        .map(|(manager, version, field)| format!("conflict with \"{manager}\" using {version}: {field}"))
        .collect();
    let message = if lines.len() == 1 {
        format!("Apply failed with 1 conflict: {}", lines[0])
    } else {
        format!("Apply failed with {} conflicts: {}", lines.len(), lines.join("\n"))
    };
    let mut e = ApiError::new(409, "Conflict", message);
    e.details = Some(json!({
        "causes": conflicts.iter().map(|(manager, version, field)| json!({
            "reason": "FieldManagerConflict",
            "message": format!("conflict with \"{manager}\" using {version}"),
            "field": field,
        })).collect::<Vec<_>>(),
    }));
    e
}

/// An applied configuration's nulls say nothing (upstream drops them).
fn drop_nulls(v: &mut Value) {
    match v {
        Value::Object(m) => {
            m.retain(|_, x| !x.is_null());
            m.values_mut().for_each(drop_nulls);
        }
        Value::Array(a) => a.iter_mut().for_each(drop_nulls),
        _ => {}
    }
}
