//! Strategic merge patch (`application/strategic-merge-patch+json`), applied on the server
//! as upstream's `strategicpatch.StrategicMergeMapPatch` does (k8s.io/apimachinery, patch
//! format v2, the one `kubectl apply`, `patch`, `edit`, `set` and `label` send), driven by
//! the `x-kubernetes-patch-strategy` / `x-kubernetes-patch-merge-key` of the kind's schema.
//!
//! # Semantics
//!
//! - Maps merge recursively; `null` deletes a key; scalars and mistyped values replace.
//! - A list whose field has strategy `merge` and a merge key merges element by element:
//!   the patch element with the same key merges into the original one, a new one is added.
//!   A list of primitives with strategy `merge` is a set union. Any other list is replaced.
//! - Directives:
//!   - `{"$patch": "replace", ...}` replaces the map it is in; `{"$patch": "delete"}`
//!     empties it. In a merged list, `{"name": "x", "$patch": "delete"}` deletes element
//!     `x` and `{"$patch": "replace"}` makes the other patch elements the whole list.
//!   - `"$retainKeys": [..]` (fields with strategy `retainKeys`) drops the keys of the
//!     original map that are not listed.
//!   - `"$setElementOrder/<list>": [..]` orders the merged list: the listed elements in
//!     that order, the others where they were (see [`normalize_element_order`]).
//!   - `"$deleteFromPrimitiveList/<list>": [..]` removes primitives from a merged list.
//!
//! ```text
//! original  {"containers": [{"name": "a", "image": "1"}, {"name": "b", "image": "1"}]}
//! patch     {"$setElementOrder/containers": [{"name": "a"}, {"name": "b"}],
//!            "containers": [{"name": "b", "image": "2"}]}
//! result    {"containers": [{"name": "a", "image": "1"}, {"name": "b", "image": "2"}]}
//! ```
//!
//! # Where this differs from upstream (deliberately)
//!
//! - A value set where the original has none is cleaned like the rest of the patch: its
//!   directives are resolved against nothing (`{"$patch": "replace", ..}` keeps its content;
//!   upstream drops such a map) and its nulls dropped (as upstream).
//! - A `$`-key that is neither a directive nor a field of the schema is refused here (400);
//!   upstream drops it when decoding, or refuses it under `fieldValidation=Strict`, which is
//!   what kubectl sends.
//! - `$deleteFromPrimitiveList/<list>` always deletes; upstream replaces the list with the
//!   deletion list when the field does not merge (a patch kubectl never sends).

use serde_json::{Map, Value};

use crate::openapi::{FieldMeta, PatchMeta};

const PATCH: &str = "$patch";
const RETAIN_KEYS: &str = "$retainKeys";
const SET_ELEMENT_ORDER: &str = "$setElementOrder";
const DELETE_FROM_PRIMITIVE_LIST: &str = "$deleteFromPrimitiveList";

/// Why a strategic merge patch does not apply; the messages are upstream's
/// (`k8s.io/apimachinery/pkg/util/mergepatch`), with maps printed as JSON.
#[derive(Debug, PartialEq, thiserror::Error)]
pub enum Error {
    #[error("a strategic merge patch must be a JSON object, got {0}")]
    NotAnObject(&'static str),
    #[error("unknown patch type: {value} in map: {map}")]
    BadPatchType { value: String, map: String },
    #[error("map: {map} does not contain declared merge key: {key}")]
    NoMergeKey { map: String, key: String },
    #[error("cannot merge lists of maps without a merge key")]
    NoMergeKeyInSchema,
    #[error("merging lists cannot yet be specified in the patch")]
    MergeDirectiveInList,
    #[error("expected a {expected}, but received a {got} for {key}")]
    BadArgType { key: String, expected: &'static str, got: &'static str },
    #[error("lists of lists are not supported")]
    ListOfLists,
    #[error("list element types are not identical: {0}")]
    MixedElementTypes(String),
    #[error("invalid patch format of primitive list")]
    BadPrimitiveListFormat,
    #[error("invalid patch format of retainKeys")]
    BadRetainKeysFormat,
    #[error("invalid patch format of setElementOrder list")]
    BadSetElementOrderFormat,
    #[error("the order in patch list:\n{patch}\n doesn't match $setElementOrder list:\n{order}")]
    OrderMismatch { patch: String, order: String },
    #[error("unknown field {0:?}: not a strategic merge patch directive nor a field of the schema")]
    UnknownDirective(String),
}

impl Error {
    /// The HTTP code upstream answers with (`interpretStrategicMergePatchError`); errors it
    /// passes through unclassified are 400 here, as every one of them is the patch's fault.
    pub fn code(&self) -> u16 {
        match self {
            Self::ListOfLists => 422,
            _ => 400,
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Applies `patch` to `original` (both objects). `meta` is the kind's schema; without one
/// every list is replaced, as for a field the schema does not describe.
pub fn strategic_merge(original: &Value, patch: &Value, meta: Option<PatchMeta<'_>>) -> Result<Value> {
    let Value::Object(patch) = patch else { return Err(Error::NotAnObject(kind_name(patch))) };
    let original = match original {
        Value::Object(o) => o.clone(),
        _ => Map::new(),
    };
    merge_map(original, patch.clone(), meta).map(Value::Object)
}

/// upstream's `mergeMap`: directives of this map first (`$patch`, `$retainKeys`,
/// `$setElementOrder/*`), then every key.
fn merge_map(
    mut original: Map<String, Value>,
    mut patch: Map<String, Value>,
    meta: Option<PatchMeta<'_>>,
) -> Result<Map<String, Value>> {
    if let Some(directive) = patch.remove(PATCH) {
        return match directive.as_str() {
            Some("replace") => merge_map(Map::new(), patch, meta),
            Some("delete") => Ok(Map::new()),
            _ => Err(bad_patch_type(&directive, &patch)),
        };
    }
    retain_keys(&mut original, &mut patch)?;
    set_element_order(&mut original, &mut patch, meta)?;
    for (key, value) in patch {
        let (key, delete_list) = match directive_target(&key, DELETE_FROM_PRIMITIVE_LIST)? {
            Some(list) => (list.to_string(), true),
            None => (key, false),
        };
        if !delete_list && is_unknown_directive(&key, meta) {
            return Err(Error::UnknownDirective(key));
        }
        if value.is_null() {
            original.remove(&key);
            continue;
        }
        let field = field(meta, &key);
        let merged = match (original.remove(&key), value) {
            (Some(Value::Object(o)), Value::Object(p)) if !delete_list => {
                if field.is_some_and(|f| has_strategy(f, "replace")) {
                    Some(Value::Object(merge_map(Map::new(), p, field.map(|f| f.meta))?))
                } else {
                    Some(Value::Object(merge_map(o, p, field.map(|f| f.meta))?))
                }
            }
            (Some(Value::Array(o)), Value::Array(p)) if delete_list => Some(Value::Array(delete_from(o, &p))),
            (Some(Value::Array(o)), Value::Array(p)) => Some(Value::Array(merge_list(o, p, field)?)),
            // A deletion list deletes nothing where there is no list.
            (o, _) if delete_list => o,
            // New, or of another type than the original: the patch's value, cleaned.
            (_, p) => clean(p, field.map(|f| f.meta))?,
        };
        if let Some(v) = merged {
            original.insert(key, v);
        }
    }
    Ok(original)
}

/// upstream's `mergeSlice`, for a field whose list may merge.
fn merge_list(original: Vec<Value>, patch: Vec<Value>, field: Option<FieldMeta<'_>>) -> Result<Vec<Value>> {
    let elem_meta = field.map(|f| f.meta);
    if !field.is_some_and(|f| f.merges()) {
        return clean_list(patch, elem_meta);
    }
    if original.is_empty() && patch.is_empty() {
        return Ok(original);
    }
    let key = field.and_then(|f| f.merge_key);
    let (original, patch, merged) = if element_kind(&original, &patch)? == Kind::Object {
        let key = key.ok_or(Error::NoMergeKeyInSchema)?;
        let (original, patch) = special_elements(original, patch, key, elem_meta)?;
        let merged = merge_elements(original.clone(), patch.clone(), key, elem_meta)?;
        (original, patch, merged)
    } else {
        // A set of primitives: the union, each value once, in first-seen order.
        let mut merged: Vec<Value> = Vec::with_capacity(original.len() + patch.len());
        for v in original.iter().chain(&patch) {
            if !merged.contains(v) {
                merged.push(v.clone());
            }
        }
        (original, patch, merged)
    };
    let patch_order = identities(&patch, key)?;
    let (patch_items, server_only) = partition(merged, &patch_order, key)?;
    Ok(normalize_element_order(patch_items, server_only, &patch_order, &identities(&original, key)?, key))
}

/// upstream's `mergeSliceWithSpecialElements`: applies the `$patch` elements of a merged list
/// of maps and returns the original and the patch left to merge.
fn special_elements(
    mut original: Vec<Value>,
    patch: Vec<Value>,
    key: &str,
    elem_meta: Option<PatchMeta<'_>>,
) -> Result<(Vec<Value>, Vec<Value>)> {
    let mut replace = false;
    let mut rest = Vec::with_capacity(patch.len());
    for element in patch {
        let Some(directive) = element.get(PATCH) else {
            rest.push(element);
            continue;
        };
        match directive.as_str() {
            Some("delete") => {
                let id = element.get(key).ok_or_else(|| no_merge_key(&element, key))?;
                original.retain(|o| o.get(key) != Some(id));
            }
            // Keep going: the other `$patch` elements are pruned all the same.
            Some("replace") => replace = true,
            Some("merge") => return Err(Error::MergeDirectiveInList),
            _ => return Err(bad_patch_type(directive, element.as_object().expect("a list of maps"))),
        }
    }
    if replace {
        return Ok((clean_list(rest, elem_meta)?, Vec::new()));
    }
    Ok((original, rest))
}

/// upstream's `mergeSliceWithoutSpecialElements`: each patch element merges into the
/// original element with its merge key, or is added at the end.
fn merge_elements(
    mut original: Vec<Value>,
    patch: Vec<Value>,
    key: &str,
    elem_meta: Option<PatchMeta<'_>>,
) -> Result<Vec<Value>> {
    for element in patch {
        let id = element.get(key).ok_or_else(|| no_merge_key(&element, key))?.clone();
        let Value::Object(element) = element else { unreachable!("a list of maps") };
        match original.iter().position(|o| o.get(key) == Some(&id)) {
            Some(i) => {
                let o = std::mem::take(original[i].as_object_mut().expect("a list of maps"));
                original[i] = Value::Object(merge_map(o, element, elem_meta)?);
            }
            None => original.extend(clean(Value::Object(element), elem_meta)?),
        }
    }
    Ok(original)
}

/// upstream's `mergePatchIntoOriginal`: merges each list that has a `$setElementOrder/<list>`
/// (removing both from the patch) and orders the result by it.
fn set_element_order(
    original: &mut Map<String, Value>,
    patch: &mut Map<String, Value>,
    meta: Option<PatchMeta<'_>>,
) -> Result<()> {
    let directives: Vec<String> =
        patch.keys().filter(|k| k.starts_with(SET_ELEMENT_ORDER)).cloned().collect();
    for directive in directives {
        let order = patch.remove(&directive).expect("a key of the patch");
        let list = directive_target(&directive, SET_ELEMENT_ORDER)?.ok_or(Error::BadSetElementOrderFormat)?;
        let Value::Array(order) = order else { return Err(bad_arg_type(&directive, "list", &order)) };
        let field = field(meta, list);
        let key = field.and_then(|f| f.merge_key);
        let original_list = match original.remove(list) {
            Some(Value::Array(a)) => Some(a),
            Some(other) => return Err(bad_arg_type(list, "list", &other)),
            None => None,
        };
        let patch_list = match patch.remove(list) {
            Some(Value::Array(a)) => Some(a),
            Some(other) => return Err(bad_arg_type(list, "list", &other)),
            None => None,
        };
        if let Some(p) = &patch_list {
            validate_order(p, &order, key)?;
        }
        let server_order = identities(original_list.as_deref().unwrap_or_default(), key)?;
        let merged = match (original_list, patch_list) {
            (Some(o), None) => o,
            (None, Some(p)) => clean_list(p, field.map(|f| f.meta))?,
            (Some(o), Some(p)) => merge_list(o, p, field)?,
            (None, None) => continue,
        };
        let order = identities(&order, key)?;
        let (patch_items, server_only) = partition(merged, &order, key)?;
        let both = normalize_element_order(patch_items, server_only, &order, &server_order, key);
        original.insert(list.to_string(), Value::Array(both));
    }
    Ok(())
}

/// upstream's `validatePatchWithSetOrderList`: the patch's elements (deletions aside) must
/// appear in the order list, in the same relative order.
fn validate_order(patch: &[Value], order: &[Value], key: Option<&str>) -> Result<()> {
    let kept: Vec<&Value> = patch
        .iter()
        .filter(|v| key.is_none() || v.get(PATCH).and_then(Value::as_str) != Some("delete"))
        .collect();
    let (mut p, mut o) = (0, 0);
    while p < kept.len() && o < order.len() {
        if kept[p].get(PATCH).is_some() {
            p += 1;
            continue;
        }
        if identity(kept[p], key)? == identity(&order[o], key)? {
            p += 1;
        }
        o += 1;
    }
    if p < kept.len() {
        return Err(Error::OrderMismatch { patch: to_json(patch), order: to_json(order) });
    }
    Ok(())
}

/// upstream's `applyRetainKeysDirective`: every key the patch sets must be listed, and the
/// original keeps only the listed keys.
fn retain_keys(original: &mut Map<String, Value>, patch: &mut Map<String, Value>) -> Result<()> {
    let Some(list) = patch.remove(RETAIN_KEYS) else { return Ok(()) };
    let Value::Array(list) = list else { return Err(Error::BadRetainKeysFormat) };
    let listed = |k: &str| list.iter().any(|v| v.as_str() == Some(k));
    let unlisted = patch.iter().any(|(k, v)| {
        !v.is_null()
            && !k.starts_with(DELETE_FROM_PRIMITIVE_LIST)
            && !k.starts_with(SET_ELEMENT_ORDER)
            && !listed(k)
    });
    if unlisted {
        return Err(Error::BadRetainKeysFormat);
    }
    original.retain(|k, _| listed(k));
    Ok(())
}

/// upstream's `normalizeElementOrder`: sorts the patch's items by `patch_order` and the
/// server-only items by `server_order`, then interleaves them: a server-only item goes
/// before a patch item only when both are in the original and it came first there. So a
/// new item without a `$setElementOrder` lands before the original's items that follow it.
fn normalize_element_order(
    mut patch_items: Vec<Value>,
    mut server_only: Vec<Value>,
    patch_order: &[Value],
    server_order: &[Value],
    key: Option<&str>,
) -> Vec<Value> {
    let position = |order: &[Value], v: &Value| {
        let id = identity(v, key).ok();
        order.iter().position(|o| Some(o) == id)
    };
    // Stable: items the order does not name keep their place among themselves, last.
    patch_items.sort_by_key(|v| position(patch_order, v).unwrap_or(usize::MAX));
    server_only.sort_by_key(|v| position(server_order, v).unwrap_or(usize::MAX));

    let mut out = Vec::with_capacity(patch_items.len() + server_only.len());
    let mut left = server_only.into_iter().peekable();
    let mut right = patch_items.into_iter().peekable();
    loop {
        let take_left = match (left.peek(), right.peek()) {
            (None, None) => break,
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (Some(l), Some(r)) => matches!(
                (position(server_order, l), position(server_order, r)),
                (Some(li), Some(ri)) if li < ri
            ),
        };
        out.extend(if take_left { left.next() } else { right.next() });
    }
    out
}

/// Splits `merged` into the items `order` names and the others, keeping their order.
fn partition(merged: Vec<Value>, order: &[Value], key: Option<&str>) -> Result<(Vec<Value>, Vec<Value>)> {
    let mut named = Vec::new();
    let mut others = Vec::new();
    for v in merged {
        if order.contains(identity(&v, key)?) {
            named.push(v);
        } else {
            others.push(v);
        }
    }
    Ok((named, others))
}

/// What identifies a list element: its merge key's value, or the value itself in a list of
/// primitives.
fn identity<'v>(v: &'v Value, key: Option<&str>) -> Result<&'v Value> {
    match key {
        None => Ok(v),
        Some(key) => match v {
            Value::Object(_) => v.get(key).ok_or_else(|| no_merge_key(v, key)),
            other => Err(bad_arg_type(key, "map", other)),
        },
    }
}

fn identities(list: &[Value], key: Option<&str>) -> Result<Vec<Value>> {
    list.iter().map(|v| identity(v, key).cloned()).collect()
}

/// Removes the values of `delete` from a list of primitives (`$deleteFromPrimitiveList`).
fn delete_from(list: Vec<Value>, delete: &[Value]) -> Vec<Value> {
    list.into_iter().filter(|v| !delete.contains(v)).collect()
}

/// The value a patch sets where there is nothing to merge with: its directives resolved
/// against nothing and its nulls dropped (upstream's `removeDirectives` and
/// `discardNullValuesFromPatch`). None when nothing is left to set.
fn clean(value: Value, meta: Option<PatchMeta<'_>>) -> Result<Option<Value>> {
    Ok(match value {
        Value::Null => None,
        Value::Object(m) => match m.get(PATCH).map(Value::as_str) {
            Some(Some("delete")) => None,
            Some(Some("replace")) | None => Some(Value::Object(merge_map(Map::new(), m, meta)?)),
            Some(_) => return Err(bad_patch_type(&m[PATCH], &m)),
        },
        Value::Array(a) => Some(Value::Array(clean_list(a, meta)?)),
        scalar => Some(scalar),
    })
}

/// A list set whole: elements that are directives (`{"$patch": ..}`) are dropped, the others
/// cleaned. Nulls in a list are kept, as upstream does.
fn clean_list(list: Vec<Value>, elem_meta: Option<PatchMeta<'_>>) -> Result<Vec<Value>> {
    let mut out = Vec::with_capacity(list.len());
    for v in list {
        if let Some(directive) = v.get(PATCH) {
            if !matches!(directive.as_str(), Some("delete" | "replace")) {
                return Err(bad_patch_type(directive, v.as_object().expect("has a key")));
            }
            continue;
        }
        match v {
            Value::Null => out.push(Value::Null),
            v => out.extend(clean(v, elem_meta)?),
        }
    }
    Ok(out)
}

/// `<prefix>/<list>` → `Some(list)`; None for a key without the prefix.
fn directive_target<'k>(key: &'k str, prefix: &str) -> Result<Option<&'k str>> {
    if !key.starts_with(prefix) {
        return Ok(None);
    }
    match key.split_once('/') {
        Some((p, list)) if p == prefix => Ok(Some(list)),
        _ if prefix == DELETE_FROM_PRIMITIVE_LIST => Err(Error::BadPrimitiveListFormat),
        _ => Err(Error::BadSetElementOrderFormat),
    }
}

/// A `$`-key that is no field of a schema that names its fields.
fn is_unknown_directive(key: &str, meta: Option<PatchMeta<'_>>) -> bool {
    key.starts_with('$') && meta.is_some_and(|m| m.declares_fields() && m.field(key).is_none())
}

fn field<'a>(meta: Option<PatchMeta<'a>>, key: &str) -> Option<FieldMeta<'a>> {
    meta.and_then(|m| m.field(key))
}

fn has_strategy(field: FieldMeta<'_>, strategy: &str) -> bool {
    field.strategy.split(',').any(|s| s == strategy)
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    Null,
    Bool,
    Number,
    String,
    List,
    Object,
}

fn kind(v: &Value) -> Kind {
    match v {
        Value::Null => Kind::Null,
        Value::Bool(_) => Kind::Bool,
        Value::Number(_) => Kind::Number,
        Value::String(_) => Kind::String,
        Value::Array(_) => Kind::List,
        Value::Object(_) => Kind::Object,
    }
}

fn kind_name(v: &Value) -> &'static str {
    match kind(v) {
        Kind::Null => "null",
        Kind::Bool => "bool",
        Kind::Number => "number",
        Kind::String => "string",
        Kind::List => "list",
        Kind::Object => "map",
    }
}

/// upstream's `sliceElementType`: every element of both lists has one type, not a list.
fn element_kind(original: &[Value], patch: &[Value]) -> Result<Kind> {
    let mut kinds = original.iter().chain(patch).map(kind);
    let first = kinds.next().expect("one of the lists is not empty");
    if first == Kind::List {
        return Err(Error::ListOfLists);
    }
    if kinds.any(|k| k != first) {
        return Err(Error::MixedElementTypes(format!("{} {}", to_json(original), to_json(patch))));
    }
    Ok(first)
}

fn to_json(v: &(impl serde::Serialize + ?Sized)) -> String {
    serde_json::to_string(v).unwrap_or_default()
}

fn bad_patch_type(directive: &Value, map: &Map<String, Value>) -> Error {
    let value = directive.as_str().map_or_else(|| directive.to_string(), str::to_string);
    Error::BadPatchType { value, map: to_json(map) }
}

fn no_merge_key(element: &Value, key: &str) -> Error {
    Error::NoMergeKey { map: to_json(element), key: key.to_string() }
}

fn bad_arg_type(key: &str, expected: &'static str, got: &Value) -> Error {
    Error::BadArgType { key: key.to_string(), expected, got: kind_name(got) }
}

#[cfg(test)]
mod tests;
