//! The structural merge of an applied configuration into the live object: maps and
//! structs field by field, `map` lists element by element (by their keys), `set` lists as
//! a union, everything else (scalars, atomic lists and structs) replaced.

use serde_json::{Map, Value};

use super::fieldset::{ListKind, key_of, list_kind};
use crate::openapi::{FieldMeta, PatchMeta};

pub fn merge(meta: Option<PatchMeta<'_>>, live: &mut Value, config: &Value) {
    match (live.as_object_mut(), config.as_object()) {
        (Some(l), Some(c)) => merge_map(meta, l, c),
        _ => *live = config.clone(),
    }
}

fn merge_map(meta: Option<PatchMeta<'_>>, live: &mut Map<String, Value>, config: &Map<String, Value>) {
    for (k, cv) in config {
        let field = meta.and_then(|m| m.field(k));
        match live.get_mut(k) {
            Some(lv) => merge_value(field, lv, cv),
            None => {
                live.insert(k.clone(), cv.clone());
            }
        }
    }
}

fn merge_value(field: Option<FieldMeta<'_>>, live: &mut Value, config: &Value) {
    match (live, config) {
        (Value::Object(l), Value::Object(c))
            if field.is_some_and(|f| f.meta.declares_fields() && !f.meta.is_atomic()) =>
        {
            merge_map(field.map(|f| f.meta), l, c);
        }
        (Value::Array(l), Value::Array(c)) => match list_kind(field) {
            ListKind::Map(keys) => {
                let elem = field.map(|f| f.meta);
                for ce in c {
                    let key = key_of(ce, keys);
                    match l.iter_mut().find(|le| key.is_some() && key_of(le, keys) == key) {
                        Some(Value::Object(le)) => {
                            if let Some(ce) = ce.as_object() {
                                merge_map(elem, le, ce);
                            }
                        }
                        _ => l.push(ce.clone()),
                    }
                }
            }
            ListKind::Set => {
                for ce in c {
                    if !l.contains(ce) {
                        l.push(ce.clone());
                    }
                }
            }
            ListKind::Atomic => *l = c.clone(),
        },
        (live, config) => *live = config.clone(),
    }
}
