//! Field sets: which fields of an object a manager owns, as upstream's structured-merge-diff
//! `fieldpath.Set`, and their `FieldsV1` JSON form in `metadata.managedFields`.
//!
//! A path is a list of elements, each in FieldsV1's spelling: `f:<field>`, `k:<key fields
//! as JSON>` (an element of a `map` list, e.g. `k:{"name":"web"}`), `v:<JSON value>` (an
//! element of a `set` list). A set holds every owned path: leaves, and the list elements
//! themselves (FieldsV1's `.` entry under an element).

use std::collections::BTreeSet;

use serde_json::{Map, Value};

use crate::openapi::{FieldMeta, PatchMeta};

pub type Path = Vec<String>;
pub type FieldSet = BTreeSet<Path>;

/// metadata fields the server owns: never part of a manager's set.
const SERVER_METADATA: &[&str] = &[
    "name",
    "namespace",
    "generateName",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "managedFields",
    "selfLink",
];

/// The paths `obj` sets, judged by its kind's schema. apiVersion, kind, the server's
/// metadata and (for the main resource) status are left out, as upstream resets them.
pub fn set_of(meta: Option<PatchMeta<'_>>, obj: &Value, status: bool) -> FieldSet {
    let mut out = FieldSet::new();
    let Some(map) = obj.as_object() else { return out };
    let mut path = Path::new();
    for (k, v) in map {
        match k.as_str() {
            "apiVersion" | "kind" => continue,
            "status" if !status => continue,
            "metadata" => {
                let Some(m) = v.as_object() else { continue };
                let object_meta = meta.and_then(|m| m.field("metadata"));
                path.push("f:metadata".into());
                for (mk, mv) in m.iter().filter(|(mk, _)| !SERVER_METADATA.contains(&mk.as_str())) {
                    path.push(format!("f:{mk}"));
                    walk(object_meta.and_then(|f| f.meta.field(mk)), mv, &mut path, &mut out);
                    path.pop();
                }
                path.pop();
            }
            _ => {
                path.push(format!("f:{k}"));
                walk(meta.and_then(|m| m.field(k)), v, &mut path, &mut out);
                path.pop();
            }
        }
    }
    out
}

/// Adds the paths of value `v` at `path`, the value of field `field`.
fn walk(field: Option<FieldMeta<'_>>, v: &Value, path: &mut Path, out: &mut FieldSet) {
    match v {
        Value::Object(map)
            if !map.is_empty() && field.is_some_and(|f| f.meta.declares_fields() && !f.meta.is_atomic()) =>
        {
            let meta = field.expect("checked").meta;
            for (k, child) in map {
                path.push(format!("f:{k}"));
                walk(meta.field(k), child, path, out);
                path.pop();
            }
        }
        Value::Array(items) if !items.is_empty() => match list_kind(field) {
            ListKind::Map(keys) => {
                let meta = field.expect("a map list has a schema").meta;
                for item in items {
                    // An element without its keys cannot be owned apart: the list is.
                    let Some(key) = key_of(item, keys) else {
                        out.insert(path.clone());
                        continue;
                    };
                    path.push(key);
                    out.insert(path.clone());
                    if let Some(m) = item.as_object() {
                        for (k, child) in m {
                            path.push(format!("f:{k}"));
                            walk(meta.field(k), child, path, out);
                            path.pop();
                        }
                    }
                    path.pop();
                }
            }
            ListKind::Set => {
                for item in items {
                    path.push(format!("v:{item}"));
                    out.insert(path.clone());
                    path.pop();
                }
            }
            ListKind::Atomic => {
                out.insert(path.clone());
            }
        },
        _ => {
            out.insert(path.clone());
        }
    }
}

/// How a list is merged and owned (its `x-kubernetes-list-type`; atomic by default).
pub enum ListKind<'a> {
    Atomic,
    Set,
    Map(&'a [Value]),
}

pub fn list_kind<'a>(field: Option<FieldMeta<'a>>) -> ListKind<'a> {
    match field.and_then(|f| f.list_type.map(|t| (t, f.map_keys))) {
        Some(("map", keys)) if !keys.is_empty() => ListKind::Map(keys),
        Some(("set", _)) => ListKind::Set,
        _ => ListKind::Atomic,
    }
}

/// The `k:` element naming `item` of a map list by `keys` (key fields in name order, as
/// upstream writes them). None when the item lacks every key.
pub fn key_of(item: &Value, keys: &[Value]) -> Option<String> {
    let mut k = Map::new();
    for key in keys.iter().filter_map(Value::as_str) {
        if let Some(v) = item.get(key) {
            k.insert(key.to_string(), v.clone());
        }
    }
    (!k.is_empty()).then(|| format!("k:{}", Value::Object(k)))
}

/// The value at `path` in `obj`, if there is one.
pub fn value_at<'v>(obj: &'v Value, path: &[String]) -> Option<&'v Value> {
    let mut cur = obj;
    for el in path {
        cur = step(cur, el)?;
    }
    Some(cur)
}

fn step<'v>(cur: &'v Value, el: &str) -> Option<&'v Value> {
    if let Some(name) = el.strip_prefix("f:") {
        return cur.get(name);
    }
    let items = cur.as_array()?;
    if let Some(key) = el.strip_prefix("k:") {
        let key: Map<String, Value> = serde_json::from_str(key).ok()?;
        return items.iter().find(|i| key.iter().all(|(k, v)| i.get(k) == Some(v)));
    }
    let value: Value = serde_json::from_str(el.strip_prefix("v:")?).ok()?;
    items.iter().find(|i| **i == value)
}

/// Removes what `path` names from `obj` (a field, or a list element).
pub fn remove_at(obj: &mut Value, path: &[String]) {
    let Some((last, parent)) = path.split_last() else { return };
    let mut cur = obj;
    for el in parent {
        let next = if let Some(name) = el.strip_prefix("f:") {
            cur.get_mut(name)
        } else {
            let index = step(cur, el)
                .and_then(|found| cur.as_array().and_then(|a| a.iter().position(|i| std::ptr::eq(i, found))));
            index.and_then(|i| cur.get_mut(i))
        };
        match next {
            Some(n) => cur = n,
            None => return,
        }
    }
    if let Some(name) = last.strip_prefix("f:") {
        if let Some(m) = cur.as_object_mut() {
            m.remove(name);
        }
        return;
    }
    let index = step(cur, last)
        .and_then(|found| cur.as_array().and_then(|a| a.iter().position(|i| std::ptr::eq(i, found))));
    if let (Some(i), Some(a)) = (index, cur.as_array_mut()) {
        a.remove(i);
    }
}

/// The FieldsV1 form of a set: nested objects, `{}` for a leaf, `".": {}` for an owned
/// element that also has owned fields.
pub fn to_fields_v1(set: &FieldSet) -> Value {
    let mut root = Map::new();
    for path in set {
        let mut node = &mut root;
        for el in path {
            node = node
                .entry(el.clone())
                .or_insert_with(|| Value::Object(Map::new()))
                .as_object_mut()
                .expect("nodes are objects");
        }
        node.insert(".".into(), Value::Object(Map::new()));
    }
    // A member without children is written `{}`, not `{".": {}}`.
    fn tidy(v: &mut Value) {
        if let Some(m) = v.as_object_mut() {
            if m.len() == 1 && m.contains_key(".") {
                m.clear();
            }
            for child in m.values_mut() {
                tidy(child);
            }
        }
    }
    let mut v = Value::Object(root);
    tidy(&mut v);
    v
}

/// The set a FieldsV1 object describes.
pub fn from_fields_v1(v: &Value) -> FieldSet {
    fn read(v: &Value, path: &mut Path, out: &mut FieldSet) {
        let Some(m) = v.as_object() else { return };
        if m.is_empty() && !path.is_empty() {
            out.insert(path.clone());
            return;
        }
        for (k, child) in m {
            if k == "." {
                out.insert(path.clone());
                continue;
            }
            path.push(k.clone());
            read(child, path, out);
            path.pop();
        }
    }
    let mut out = FieldSet::new();
    read(v, &mut Path::new(), &mut out);
    out
}

/// Whether `path` is a list element (ownership of the element itself, not of a value).
pub fn is_element(path: &[String]) -> bool {
    path.last().is_some_and(|l| l.starts_with("k:") || l.starts_with("v:"))
}

/// A path as upstream prints it in conflict messages: `.spec.replicas`,
/// `.spec.containers[name="web"].image`.
pub fn display(path: &[String]) -> String {
    let mut s = String::new();
    for el in path {
        if let Some(name) = el.strip_prefix("f:") {
            s.push('.');
            s.push_str(name);
        } else if let Some(key) = el.strip_prefix("k:") {
            let key: Map<String, Value> = serde_json::from_str(key).unwrap_or_default();
            let parts: Vec<String> = key.iter().map(|(k, v)| format!("{k}={v}")).collect();
            s.push_str(&format!("[{}]", parts.join(",")));
        } else if let Some(v) = el.strip_prefix("v:") {
            s.push_str(&format!("[={v}]"));
        }
    }
    s
}
