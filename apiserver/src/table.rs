//! Server-side printing (`Accept: application/json;as=Table;v=v1;g=meta.k8s.io`): the
//! columns `kubectl get` shows for each kind, with upstream's names and priorities
//! (priority 1 columns appear with `-o wide`).

use serde_json::{Value, json};

use crate::registry::resource::{PrinterColumn, Resource, ResourceInfo};

/// What each row carries besides its cells (`includeObject`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IncludeObject {
    None,
    Metadata,
    Object,
}

impl IncludeObject {
    pub fn parse(s: Option<&str>) -> Self {
        match s {
            Some("None") => Self::None,
            Some("Object") => Self::Object,
            _ => Self::Metadata,
        }
    }
}

/// One column: (name, type, format, description, priority).
pub struct Column {
    pub name: &'static str,
    pub kind: &'static str,
    pub format: &'static str,
    pub description: &'static str,
    pub priority: i32,
}

const fn col(name: &'static str, kind: &'static str, format: &'static str, priority: i32) -> Column {
    Column { name, kind, format, description: "", priority }
}

/// Columns and cells per kind: the name column first, then the kind's own.
pub fn columns(info: &ResourceInfo) -> Vec<Column> {
    let mut cols = vec![Column {
        name: "Name",
        kind: "string",
        format: "name",
        description: NAME_DESCRIPTION,
        priority: 0,
    }];
    cols.extend(crate::printers::columns(info.kind));
    // A kind with a printer has exactly upstream's columns (with or without Age).
    if !crate::printers::has_printer(info.kind) {
        cols.push(col("Age", "string", "", 0));
    }
    cols
}

/// The cells of one object, in [`columns`]'s order.
pub fn cells(info: &ResourceInfo, obj: &Value, now: i64) -> Vec<Value> {
    let mut row = vec![json!(crate::printers::name_cell(info.kind, obj))];
    row.extend(crate::printers::cells(info.kind, obj, now));
    if !crate::printers::has_printer(info.kind) {
        row.push(json!(age(&obj["metadata"]["creationTimestamp"], now)));
    }
    row
}

/// The Table of one object or a list of them, with the resource's columns: its
/// printer's, or the printer columns of its CRD.
pub fn table_of(res: &Resource, v: &Value, include: IncludeObject, with_columns: bool) -> Value {
    match res.hooks.printer_columns() {
        Some(cols) => custom_table(cols, v, include, with_columns),
        None => to_table(&res.info, v, include, with_columns),
    }
}

/// Builds a Table from one object or a list of them.
pub fn to_table(info: &ResourceInfo, v: &Value, include: IncludeObject, with_columns: bool) -> Value {
    let now = unix_now();
    let defs: Vec<Value> = if with_columns {
        columns(info)
            .into_iter()
            .map(|c| json!({ "name": c.name, "type": c.kind, "format": c.format, "description": c.description, "priority": c.priority }))
            .collect()
    } else {
        Vec::new()
    };
    build(v, include, defs, |o| cells(info, o, now))
}

/// The Name column's description (ObjectMeta's `name`), as upstream's tables give it.
const NAME_DESCRIPTION: &str = "Name must be unique within a namespace. Is required when creating resources, although some resources may allow a client to request the generation of an appropriate name automatically. Name is primarily intended for creation idempotence and configuration definition. Cannot be updated. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names";

/// A custom resource's Table (upstream's CRD `tableconvertor`): Name, then each printer
/// column's value at its JSON path; `date` columns print as ages.
fn custom_table(cols: &[PrinterColumn], v: &Value, include: IncludeObject, with_columns: bool) -> Value {
    let now = unix_now();
    let defs: Vec<Value> = if with_columns {
        let mut d = vec![json!({"name": "Name", "type": "string", "format": "name",
                                "description": NAME_DESCRIPTION, "priority": 0})];
        d.extend(cols.iter().map(|c| {
            json!({ "name": c.name, "type": c.kind, "format": c.format, "description": c.description, "priority": c.priority })
        }));
        d
    } else {
        Vec::new()
    };
    build(v, include, defs, |o| {
        let mut row = vec![o["metadata"]["name"].clone()];
        for c in cols {
            let cell = match crate::apiextensions::custom_resource::lookup(o, &c.json_path) {
                None | Some(Value::Null) => Value::Null,
                Some(Value::String(s)) if c.kind == "date" => match parse_time(s) {
                    Some(t) => json!(human_duration(now - t)),
                    None => json!(s),
                },
                Some(x) if c.kind == "string" && !x.is_string() => json!(x.to_string()),
                Some(x) => x.clone(),
            };
            row.push(cell);
        }
        row
    })
}

fn build(
    v: &Value,
    include: IncludeObject,
    defs: Vec<Value>,
    cells_of: impl Fn(&Value) -> Vec<Value>,
) -> Value {
    let items: Vec<&Value> = match v["items"].as_array() {
        Some(items) => items.iter().collect(),
        None => vec![v],
    };
    let rows: Vec<Value> = items
        .into_iter()
        .map(|o| {
            let mut row = json!({ "cells": cells_of(o) });
            match include {
                IncludeObject::None => {}
                IncludeObject::Object => row["object"] = o.clone(),
                IncludeObject::Metadata => {
                    row["object"] = json!({
                        "kind": "PartialObjectMetadata",
                        "apiVersion": "meta.k8s.io/v1",
                        "metadata": o["metadata"],
                    })
                }
            }
            row
        })
        .collect();
    let mut meta = json!({});
    if let Some(rv) = v["metadata"]["resourceVersion"].as_str().filter(|_| v.get("items").is_some()) {
        meta["resourceVersion"] = json!(rv);
    }
    if let Some(c) = v["metadata"]["continue"].as_str() {
        meta["continue"] = json!(c);
    }
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": meta,
        "columnDefinitions": defs,
        "rows": rows,
    })
}

pub fn unix_now() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs() as i64)
}

/// Parses an RFC 3339 UTC timestamp (`2024-01-02T03:04:05Z`) into Unix seconds.
pub fn parse_time(s: &str) -> Option<i64> {
    let b = s.as_bytes();
    if b.len() < 20 {
        return None;
    }
    let n = |r: std::ops::Range<usize>| s.get(r)?.parse::<i64>().ok();
    let (y, mo, d, h, mi, se) = (n(0..4)?, n(5..7)?, n(8..10)?, n(11..13)?, n(14..16)?, n(17..19)?);
    // Days from civil date (inverse of store::rfc3339).
    let y2 = if mo <= 2 { y - 1 } else { y };
    let era = y2.div_euclid(400);
    let yoe = y2 - era * 400;
    let mp = (mo + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(days * 86_400 + h * 3600 + mi * 60 + se)
}

/// kubectl's human-readable duration (`5s`, `3m20s`, `2d3h`, ...), as `duration.HumanDuration`.
pub fn human_duration(secs: i64) -> String {
    let s = secs.max(0);
    if s < 120 {
        return format!("{s}s");
    }
    let m = s / 60;
    if m < 10 {
        let rs = s % 60;
        return if rs == 0 { format!("{m}m") } else { format!("{m}m{rs}s") };
    }
    if m < 180 {
        return format!("{m}m");
    }
    let h = s / 3600;
    if h < 8 {
        let rm = (s % 3600) / 60;
        return if rm == 0 { format!("{h}h") } else { format!("{h}h{rm}m") };
    }
    if h < 48 {
        return format!("{h}h");
    }
    if h < 192 {
        let d = h / 24;
        let rh = h % 24;
        return if rh == 0 { format!("{d}d") } else { format!("{d}d{rh}h") };
    }
    let d = h / 24;
    if d < 365 * 2 {
        return format!("{d}d");
    }
    let y = d / 365;
    let dy = d % 365;
    if y < 8 { format!("{y}y{dy}d") } else { format!("{y}y") }
}

/// The AGE cell of a timestamp (`<unknown>` when absent).
pub fn age(ts: &Value, now: i64) -> String {
    match ts.as_str().and_then(parse_time) {
        Some(t) => human_duration(now - t),
        None => "<unknown>".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_print_like_kubectl() {
        assert_eq!(human_duration(5), "5s");
        assert_eq!(human_duration(200), "3m20s");
        assert_eq!(human_duration(3600 * 5 + 60), "5h1m");
        assert_eq!(human_duration(3600 * 50), "2d2h");
        assert_eq!(parse_time("2023-11-14T22:13:20Z"), Some(1_700_000_000));
    }
}
