//! Helpers the printers share: field access on JSON objects, placeholders, ages, and
//! upstream's label and selector formats (`labels.FormatLabels`,
//! `metav1.FormatLabelSelector`).

use serde_json::Value;

use crate::table;

/// The string at `ptr` (a JSON pointer), or `""`.
pub fn str_at<'a>(v: &'a Value, ptr: &str) -> &'a str {
    v.pointer(ptr).and_then(Value::as_str).unwrap_or("")
}

/// The integer at `ptr`, or 0.
pub fn int_at(v: &Value, ptr: &str) -> i64 {
    v.pointer(ptr).and_then(Value::as_i64).unwrap_or(0)
}

/// The array at `ptr`, or an empty slice.
pub fn arr_at<'a>(v: &'a Value, ptr: &str) -> &'a [Value] {
    v.pointer(ptr).and_then(Value::as_array).map_or(&[], Vec::as_slice)
}

/// The object at `ptr`, if there is one (Go's non-nil pointer to a struct).
pub fn obj_at<'a>(v: &'a Value, ptr: &str) -> Option<&'a Value> {
    v.pointer(ptr).filter(|x| x.is_object())
}

/// The number of entries of the object or array at `ptr`.
pub fn len_at(v: &Value, ptr: &str) -> i64 {
    match v.pointer(ptr) {
        Some(Value::Object(m)) => m.len() as i64,
        Some(Value::Array(a)) => a.len() as i64,
        _ => 0,
    }
}

/// `s`, or `placeholder` when empty.
pub fn or(s: &str, placeholder: &str) -> String {
    if s.is_empty() { placeholder.to_string() } else { s.to_string() }
}

pub fn text(s: impl Into<String>) -> Value {
    Value::String(s.into())
}

pub fn num(n: i64) -> Value {
    Value::from(n)
}

/// A count in a column upstream declares `string` but fills with a number: the same
/// text, typed as the column.
pub fn count(n: i64) -> Value {
    Value::String(n.to_string())
}

/// Unix seconds of the timestamp (metav1.Time or MicroTime) at `ptr`, if set.
pub fn time_at(v: &Value, ptr: &str) -> Option<i64> {
    v.pointer(ptr).and_then(Value::as_str).and_then(table::parse_time)
}

/// `translateTimestampSince`: how long ago `t` was, `<unknown>` when unset.
pub fn since(t: Option<i64>, now: i64) -> String {
    match t {
        Some(t) => table::human_duration(now - t),
        None => "<unknown>".to_string(),
    }
}

/// The AGE cell of `obj`.
pub fn age(obj: &Value, now: i64) -> Value {
    text(table::age(&obj["metadata"]["creationTimestamp"], now))
}

/// `labels.FormatLabels`: `k=v` pairs sorted by key, comma-separated; `<none>` when empty.
pub fn labels(map: &Value) -> String {
    let Some(m) = map.as_object().filter(|m| !m.is_empty()) else { return "<none>".to_string() };
    let mut pairs: Vec<(&String, &str)> = m.iter().map(|(k, v)| (k, v.as_str().unwrap_or(""))).collect();
    pairs.sort();
    pairs.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(",")
}

/// `metav1.LabelSelectorAsSelector(sel).String()`: requirements sorted by key, `""` for
/// a missing or empty selector; `Err` for an operator it rejects.
pub fn selector(sel: &Value) -> Result<String, ()> {
    let mut reqs: Vec<(String, String)> = Vec::new();
    if let Some(m) = sel["matchLabels"].as_object() {
        for (k, v) in m {
            reqs.push((k.clone(), format!("{k}={}", v.as_str().unwrap_or(""))));
        }
    }
    for e in sel["matchExpressions"].as_array().map_or(&[][..], Vec::as_slice) {
        let key = e["key"].as_str().unwrap_or("");
        let mut values: Vec<&str> =
            e["values"].as_array().map_or(Vec::new(), |a| a.iter().filter_map(Value::as_str).collect());
        values.sort_unstable();
        let s = match e["operator"].as_str().unwrap_or("") {
            "In" if !values.is_empty() => format!("{key} in ({})", values.join(",")),
            "NotIn" if !values.is_empty() => format!("{key} notin ({})", values.join(",")),
            "Exists" if values.is_empty() => key.to_string(),
            "DoesNotExist" if values.is_empty() => format!("!{key}"),
            _ => return Err(()),
        };
        reqs.push((key.to_string(), s));
    }
    reqs.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(reqs.into_iter().map(|(_, s)| s).collect::<Vec<_>>().join(","))
}

/// `metav1.FormatLabelSelector`: [`selector`], with `<none>` for nothing and `<error>`
/// for an invalid selector.
pub fn label_selector(sel: &Value) -> String {
    match selector(sel) {
        Ok(s) if s.is_empty() => "<none>".to_string(),
        Ok(s) => s,
        Err(()) => "<error>".to_string(),
    }
}

/// `layoutContainerCells`: the containers' names and images, comma-separated.
pub fn containers(list: &[Value]) -> (String, String) {
    let names: Vec<&str> = list.iter().map(|c| c["name"].as_str().unwrap_or("")).collect();
    let images: Vec<&str> = list.iter().map(|c| c["image"].as_str().unwrap_or("")).collect();
    (names.join(","), images.join(","))
}

/// The CONTAINERS and IMAGES cells of the pod template at `ptr`.
pub fn container_cells(obj: &Value, ptr: &str) -> [Value; 2] {
    let (names, images) = containers(arr_at(obj, &format!("{ptr}/spec/containers")));
    [text(names), text(images)]
}

/// `listWithMoreString`: the first `max` items, then `+ N more...`; `<unset>` when empty.
pub fn list_with_more(list: &[String], count: usize, max: usize) -> String {
    let shown = list.iter().take(max).cloned().collect::<Vec<_>>().join(",");
    if count > max {
        format!("{shown} + {} more...", count - max)
    } else if shown.is_empty() {
        "<unset>".to_string()
    } else {
        shown
    }
}

/// An IntOrString as `IntOrString.String()` prints it.
pub fn int_or_string(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        _ => String::new(),
    }
}

/// `helper.GetAccessModesAsString`: RWO, ROX, RWX, RWOP in that order, each once.
pub fn access_modes(modes: &[Value]) -> String {
    let has = |m: &str| modes.iter().any(|x| x.as_str() == Some(m));
    [
        ("ReadWriteOnce", "RWO"),
        ("ReadOnlyMany", "ROX"),
        ("ReadWriteMany", "RWX"),
        ("ReadWriteOncePod", "RWOP"),
    ]
    .iter()
    .filter(|(m, _)| has(m))
    .map(|(_, s)| *s)
    .collect::<Vec<_>>()
    .join(",")
}

/// Whether the condition of `kind` in `conditions` has status True (the first one of
/// that type decides, as upstream's loops do).
pub fn condition_true(conditions: &[Value], kind: &str) -> bool {
    conditions.iter().find(|c| c["type"] == kind).is_some_and(|c| c["status"] == "True")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn selectors_print_like_apimachinery() {
        let sel = json!({
            "matchLabels": { "tier": "web", "app": "nginx" },
            "matchExpressions": [
                { "key": "env", "operator": "In", "values": ["prod", "dev"] },
                { "key": "zz", "operator": "DoesNotExist" },
                { "key": "canary", "operator": "Exists" },
            ],
        });
        assert_eq!(selector(&sel).unwrap(), "app=nginx,canary,env in (dev,prod),tier=web,!zz");
        assert_eq!(label_selector(&json!({})), "<none>");
        assert_eq!(label_selector(&Value::Null), "<none>");
        assert_eq!(
            label_selector(&json!({"matchExpressions": [{"key": "a", "operator": "Bad"}]})),
            "<error>"
        );
        assert_eq!(labels(&json!({ "b": "2", "a": "1" })), "a=1,b=2");
        assert_eq!(labels(&json!({})), "<none>");
    }

    #[test]
    fn lists_and_modes() {
        let l: Vec<String> = ["a", "b", "c", "d"].iter().map(|s| s.to_string()).collect();
        assert_eq!(list_with_more(&l, 5, 3), "a,b,c + 2 more...");
        assert_eq!(list_with_more(&l[..2], 2, 3), "a,b");
        assert_eq!(list_with_more(&[], 0, 3), "<unset>");
        assert_eq!(
            access_modes(&[json!("ReadWriteMany"), json!("ReadWriteOnce"), json!("ReadWriteOnce")]),
            "RWO,RWX"
        );
    }
}
