//! Structural schemas (upstream's `apiextensions-apiserver/pkg/apiserver/schema`): what a
//! custom resource's `openAPIV3Schema` does to the objects written and read. Three passes,
//! in upstream's order: [`prune`] drops the fields the schema does not declare (unless it
//! says `x-kubernetes-preserve-unknown-fields`), [`apply_defaults`] fills in `default`s,
//! and [`validate`] checks the OpenAPI v3 keywords (types, formats, bounds, enums,
//! patterns, required fields, the `allOf`/`anyOf`/`oneOf`/`not` combinators). The schema is
//! the JSON of the CRD's `JSONSchemaProps`, walked as is.

use serde_json::{Map, Value};

use crate::errors::FieldError;

/// The top-level fields every object has, which the schema need not declare.
const OBJECT_FIELDS: &[&str] = &["apiVersion", "kind", "metadata"];

/// Fields of `metadata` an embedded resource keeps (upstream prunes embedded metadata to
/// these, as `ObjectMeta` decoding does).
const EMBEDDED_META_FIELDS: &[&str] =
    &["name", "generateName", "namespace", "labels", "annotations", "finalizers", "ownerReferences"];

fn path_join(path: &str, key: &str) -> String {
    if path.is_empty() { key.to_string() } else { format!("{path}.{key}") }
}

fn preserves_unknown(schema: &Value) -> bool {
    schema.get("x-kubernetes-preserve-unknown-fields").and_then(Value::as_bool) == Some(true)
}

fn is_embedded(schema: &Value) -> bool {
    schema.get("x-kubernetes-embedded-resource").and_then(Value::as_bool) == Some(true)
}

/// Drops the fields `schema` does not declare from a whole object (`root`: apiVersion,
/// kind and metadata stay). Returns the dropped fields' paths (`spec.foo`), which field
/// validation reports as unknown.
pub fn prune(obj: &mut Value, schema: &Value) -> Vec<String> {
    let mut dropped = Vec::new();
    prune_at(obj, schema, "", true, &mut dropped);
    dropped
}

fn prune_at(v: &mut Value, schema: &Value, path: &str, object_root: bool, dropped: &mut Vec<String>) {
    match v {
        Value::Object(map) => {
            let props = schema.get("properties").and_then(Value::as_object);
            let additional = schema.get("additionalProperties");
            let keep_unknown = preserves_unknown(schema) || additional.and_then(Value::as_bool) == Some(true);
            let keys: Vec<String> = map.keys().cloned().collect();
            for key in keys {
                let child_path = path_join(path, &key);
                if object_root && OBJECT_FIELDS.contains(&key.as_str()) {
                    if key == "metadata"
                        && !path.is_empty()
                        && let Some(Value::Object(meta)) = map.get_mut("metadata")
                    {
                        // Embedded metadata: only ObjectMeta's fields that make sense there.
                        let meta_keys: Vec<String> = meta.keys().cloned().collect();
                        for k in meta_keys {
                            if !EMBEDDED_META_FIELDS.contains(&k.as_str()) {
                                meta.remove(&k);
                                dropped.push(format!("{child_path}.{k}"));
                            }
                        }
                    }
                    continue;
                }
                let child_schema =
                    props.and_then(|p| p.get(&key)).or_else(|| additional.filter(|a| a.is_object()));
                match (child_schema, map.get_mut(&key)) {
                    (Some(s), Some(child)) => prune_at(child, s, &child_path, is_embedded(s), dropped),
                    (None, Some(child)) if keep_unknown => {
                        // Kept whole; nested schemas do not apply to what no schema declares.
                        let _ = child;
                    }
                    (None, _) => {
                        map.remove(&key);
                        dropped.push(child_path);
                    }
                    _ => {}
                }
            }
        }
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items") {
                for (i, item) in items.iter_mut().enumerate() {
                    let p = format!("{path}[{i}]");
                    prune_at(item, item_schema, &p, is_embedded(item_schema), dropped);
                }
            }
        }
        _ => {}
    }
}

/// Fills in the `default` of every absent property (and of a `null` one that is not
/// `nullable`), depth first through what is present and what was defaulted.
pub fn apply_defaults(v: &mut Value, schema: &Value) {
    match v {
        Value::Object(map) => {
            if let Some(props) = schema.get("properties").and_then(Value::as_object) {
                for (key, s) in props {
                    let Some(default) = s.get("default") else { continue };
                    let nullable = s.get("nullable").and_then(Value::as_bool) == Some(true);
                    match map.get(key) {
                        None => {
                            map.insert(key.clone(), default.clone());
                        }
                        Some(Value::Null) if !nullable => {
                            map.insert(key.clone(), default.clone());
                        }
                        _ => {}
                    }
                }
                for (key, s) in props {
                    if let Some(child) = map.get_mut(key) {
                        apply_defaults(child, s);
                    }
                }
            }
            if let Some(additional) = schema.get("additionalProperties").filter(|a| a.is_object()) {
                let declared = schema.get("properties").and_then(Value::as_object);
                for (key, child) in map.iter_mut() {
                    if declared.is_none_or(|d| !d.contains_key(key)) {
                        apply_defaults(child, additional);
                    }
                }
            }
        }
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items") {
                for item in items {
                    apply_defaults(item, item_schema);
                }
            }
        }
        _ => {}
    }
}

/// Checks `v` against `schema`; `path` names `v` in the errors (`spec.replicas`).
pub fn validate(v: &Value, schema: &Value, path: &str) -> Vec<FieldError> {
    let mut errs = Vec::new();
    validate_at(v, schema, path, &mut errs);
    errs
}

/// The JSON type name of a value, as the OpenAPI `type` keyword spells it.
fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn display_path(path: &str) -> &str {
    if path.is_empty() { "<root>" } else { path }
}

fn type_matches(v: &Value, ty: &str) -> bool {
    match (ty, v) {
        ("integer", Value::Number(n)) => {
            n.is_i64() || n.is_u64() || n.as_f64().is_some_and(|f| f.fract() == 0.0)
        }
        ("number", Value::Number(_)) => true,
        ("string", Value::String(_)) => true,
        ("boolean", Value::Bool(_)) => true,
        ("array", Value::Array(_)) => true,
        ("object", Value::Object(_)) => true,
        _ => false,
    }
}

fn validate_at(v: &Value, schema: &Value, path: &str, errs: &mut Vec<FieldError>) {
    let name = display_path(path);
    if v.is_null() {
        let nullable = schema.get("nullable").and_then(Value::as_bool) == Some(true);
        let typed = schema.get("type").and_then(Value::as_str).is_some();
        if typed && !nullable {
            let ty = schema["type"].as_str().unwrap_or_default();
            errs.push(FieldError::invalid(
                path,
                "null",
                format!("{name} in body must be of type {ty}: \"null\""),
            ));
        }
        return;
    }
    let int_or_string = schema.get("x-kubernetes-int-or-string").and_then(Value::as_bool) == Some(true);
    if int_or_string {
        if !matches!(v, Value::String(_)) && !type_matches(v, "integer") {
            errs.push(FieldError::invalid(
                path,
                type_name(v),
                format!("{name} in body must be of type integer,string: \"{}\"", type_name(v)),
            ));
            return;
        }
    } else if let Some(ty) = schema.get("type").and_then(Value::as_str).filter(|t| !t.is_empty()) {
        if !type_matches(v, ty) {
            errs.push(FieldError::invalid(
                path,
                type_name(v),
                format!("{name} in body must be of type {ty}: \"{}\"", type_name(v)),
            ));
            return;
        }
    }
    if let Some(options) = schema.get("enum").and_then(Value::as_array)
        && !options.contains(v)
    {
        // Strings as themselves (the error quotes them), other values as JSON.
        let text = |o: &Value| o.as_str().map_or_else(|| o.to_string(), str::to_string);
        let supported: Vec<String> = options.iter().map(text).collect();
        errs.push(FieldError::not_supported(
            path,
            text(v),
            &supported.iter().map(String::as_str).collect::<Vec<_>>(),
        ));
    }
    match v {
        Value::Number(n) => validate_number(n.as_f64().unwrap_or_default(), schema, path, name, errs),
        Value::String(s) => validate_string(s, schema, path, name, errs),
        Value::Array(items) => validate_array(items, schema, path, name, errs),
        Value::Object(map) => validate_object(map, schema, path, name, errs),
        _ => {}
    }
    validate_combinators(v, schema, path, name, errs);
}

fn num(schema: &Value, key: &str) -> Option<f64> {
    schema.get(key).and_then(Value::as_f64)
}

fn flag(schema: &Value, key: &str) -> bool {
    schema.get(key).and_then(Value::as_bool) == Some(true)
}

fn fmt_num(f: f64) -> String {
    if f.fract() == 0.0 && f.abs() < 1e15 { format!("{}", f as i64) } else { f.to_string() }
}

fn validate_number(n: f64, schema: &Value, path: &str, name: &str, errs: &mut Vec<FieldError>) {
    if let Some(max) = num(schema, "maximum") {
        let exclusive = flag(schema, "exclusiveMaximum");
        if n > max || (exclusive && n == max) {
            let rel = if exclusive { "less than" } else { "less than or equal to" };
            errs.push(FieldError::invalid(
                path,
                fmt_num(n),
                format!("{name} in body should be {rel} {}", fmt_num(max)),
            ));
        }
    }
    if let Some(min) = num(schema, "minimum") {
        let exclusive = flag(schema, "exclusiveMinimum");
        if n < min || (exclusive && n == min) {
            let rel = if exclusive { "greater than" } else { "greater than or equal to" };
            errs.push(FieldError::invalid(
                path,
                fmt_num(n),
                format!("{name} in body should be {rel} {}", fmt_num(min)),
            ));
        }
    }
    if let Some(m) = num(schema, "multipleOf").filter(|m| *m > 0.0)
        && ((n / m).fract()).abs() > 1e-9
    {
        errs.push(FieldError::invalid(
            path,
            fmt_num(n),
            format!("{name} in body should be a multiple of {}", fmt_num(m)),
        ));
    }
}

fn validate_string(s: &str, schema: &Value, path: &str, name: &str, errs: &mut Vec<FieldError>) {
    let len = s.chars().count();
    if let Some(max) = schema.get("maxLength").and_then(Value::as_u64)
        && len as u64 > max
    {
        errs.push(FieldError::too_long(path, max as usize));
    }
    if let Some(min) = schema.get("minLength").and_then(Value::as_u64)
        && (len as u64) < min
    {
        errs.push(FieldError::invalid(
            path,
            s,
            format!("{name} in body should be at least {min} chars long"),
        ));
    }
    if let Some(pattern) = schema.get("pattern").and_then(Value::as_str) {
        match regex::Regex::new(pattern) {
            Ok(re) if !re.is_match(s) => {
                errs.push(FieldError::invalid(path, s, format!("{name} in body should match '{pattern}'")))
            }
            Ok(_) => {}
            Err(_) => errs.push(FieldError::invalid(path, s, format!("invalid pattern '{pattern}'"))),
        }
    }
    if let Some(format) = schema.get("format").and_then(Value::as_str)
        && !format_matches(format, s)
    {
        errs.push(FieldError::invalid(path, s, format!("{name} in body must be of type {format}: \"{s}\"")));
    }
}

/// The string formats upstream checks (the others are accepted as any string, as upstream).
fn format_matches(format: &str, s: &str) -> bool {
    match format {
        "int32" => s.parse::<i32>().is_ok(),
        "int64" => s.parse::<i64>().is_ok(),
        "ipv4" => s.parse::<std::net::Ipv4Addr>().is_ok(),
        "ipv6" => s.parse::<std::net::Ipv6Addr>().is_ok(),
        "cidr" => s
            .split_once('/')
            .is_some_and(|(ip, bits)| ip.parse::<std::net::IpAddr>().is_ok() && bits.parse::<u8>().is_ok()),
        "uuid" => {
            s.len() == 36
                && s.chars().enumerate().all(|(i, c)| {
                    if matches!(i, 8 | 13 | 18 | 23) { c == '-' } else { c.is_ascii_hexdigit() }
                })
        }
        "date" => crate::protobuf::wkt::parse_time(&format!("{s}T00:00:00Z")).is_some(),
        "date-time" | "datetime" => crate::protobuf::wkt::parse_time(s).is_some(),
        "byte" => {
            use base64::Engine;
            base64::engine::general_purpose::STANDARD.decode(s).is_ok()
        }
        _ => true,
    }
}

fn validate_array(items: &[Value], schema: &Value, path: &str, name: &str, errs: &mut Vec<FieldError>) {
    if let Some(max) = schema.get("maxItems").and_then(Value::as_u64)
        && items.len() as u64 > max
    {
        errs.push(FieldError::invalid(path, items.len(), format!("must have at most {max} items")));
    }
    if let Some(min) = schema.get("minItems").and_then(Value::as_u64)
        && (items.len() as u64) < min
    {
        errs.push(FieldError::invalid(
            path,
            items.len(),
            format!("{name} in body should have at least {min} items"),
        ));
    }
    let list_type = schema.get("x-kubernetes-list-type").and_then(Value::as_str);
    if flag(schema, "uniqueItems") || list_type == Some("set") {
        for (i, item) in items.iter().enumerate() {
            if items[..i].contains(item) {
                errs.push(FieldError::duplicate(format!("{path}[{i}]"), item));
            }
        }
    }
    if list_type == Some("map")
        && let Some(keys) = schema.get("x-kubernetes-list-map-keys").and_then(Value::as_array)
    {
        let key_of = |item: &Value| -> Vec<Value> {
            keys.iter()
                .filter_map(Value::as_str)
                .map(|k| item.get(k).cloned().unwrap_or(Value::Null))
                .collect()
        };
        for (i, item) in items.iter().enumerate() {
            let k = key_of(item);
            if items[..i].iter().any(|o| key_of(o) == k) {
                errs.push(FieldError::duplicate(format!("{path}[{i}]"), Value::Array(k)));
            }
        }
    }
    if let Some(item_schema) = schema.get("items") {
        for (i, item) in items.iter().enumerate() {
            validate_at(item, item_schema, &format!("{path}[{i}]"), errs);
        }
    }
}

fn validate_object(
    map: &Map<String, Value>,
    schema: &Value,
    path: &str,
    name: &str,
    errs: &mut Vec<FieldError>,
) {
    for req in
        schema.get("required").and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str)
    {
        if !map.contains_key(req) {
            errs.push(FieldError::required(path_join(path, req), ""));
        }
    }
    if let Some(max) = schema.get("maxProperties").and_then(Value::as_u64)
        && map.len() as u64 > max
    {
        errs.push(FieldError::invalid(path, map.len(), format!("must have at most {max} properties")));
    }
    if let Some(min) = schema.get("minProperties").and_then(Value::as_u64)
        && (map.len() as u64) < min
    {
        errs.push(FieldError::invalid(
            path,
            map.len(),
            format!("{name} in body should have at least {min} properties"),
        ));
    }
    let props = schema.get("properties").and_then(Value::as_object);
    let additional = schema.get("additionalProperties").filter(|a| a.is_object());
    let embedded = is_embedded(schema);
    for (key, child) in map {
        if embedded && OBJECT_FIELDS.contains(&key.as_str()) {
            continue;
        }
        let child_path = path_join(path, key);
        match props.and_then(|p| p.get(key)) {
            Some(s) => validate_at(child, s, &child_path, errs),
            None => {
                if let Some(a) = additional {
                    validate_at(child, a, &child_path, errs);
                }
            }
        }
    }
    if embedded {
        for f in ["apiVersion", "kind"] {
            if map.get(f).and_then(Value::as_str).is_none_or(str::is_empty) {
                errs.push(FieldError::required(path_join(path, f), "must not be empty"));
            }
        }
    }
}

fn validate_combinators(v: &Value, schema: &Value, path: &str, name: &str, errs: &mut Vec<FieldError>) {
    for s in schema.get("allOf").and_then(Value::as_array).into_iter().flatten() {
        validate_at(v, s, path, errs);
    }
    if let Some(any) = schema.get("anyOf").and_then(Value::as_array)
        && !any.is_empty()
        && !any.iter().any(|s| validate(v, s, path).is_empty())
    {
        errs.push(FieldError::invalid(
            path,
            v,
            format!("{name} in body must be of one of the anyOf schemas"),
        ));
    }
    if let Some(one) = schema.get("oneOf").and_then(Value::as_array)
        && !one.is_empty()
        && one.iter().filter(|s| validate(v, s, path).is_empty()).count() != 1
    {
        errs.push(FieldError::invalid(
            path,
            v,
            format!("{name} in body must validate one and only one schema (oneOf)"),
        ));
    }
    if let Some(not) = schema.get("not")
        && validate(v, not, path).is_empty()
    {
        errs.push(FieldError::invalid(
            path,
            v,
            format!("{name} in body should not validate the schema (not)"),
        ));
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn schema() -> Value {
        json!({"type": "object", "properties": {
            "spec": {"type": "object", "required": ["cronSpec"], "properties": {
                "cronSpec": {"type": "string", "pattern": "^(\\d+|\\*)(/\\d+)?(\\s+(\\d+|\\*)(/\\d+)?){4}$"},
                "replicas": {"type": "integer", "minimum": 1, "maximum": 10, "default": 1},
                "image": {"type": "string", "enum": ["a", "b"]},
                "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                "port": {"x-kubernetes-int-or-string": true},
                "tags": {"type": "array", "items": {"type": "string"}, "x-kubernetes-list-type": "set"},
            }},
            "status": {"type": "object", "properties": {"replicas": {"type": "integer"}}},
        }})
    }

    #[test]
    fn prunes_unknown_fields_but_keeps_object_fields_and_preserved_ones() {
        let mut obj = json!({"apiVersion": "x/v1", "kind": "K", "metadata": {"name": "n"},
            "spec": {"cronSpec": "* * * * */5", "bogus": 1, "free": {"any": {"thing": 1}}},
            "extra": true});
        let dropped = prune(&mut obj, &schema());
        assert_eq!(dropped, vec!["extra", "spec.bogus"]);
        assert_eq!(obj["spec"]["free"]["any"]["thing"], 1);
        assert_eq!(obj["metadata"]["name"], "n");
    }

    #[test]
    fn defaults_absent_fields() {
        let mut obj = json!({"spec": {"cronSpec": "* * * * *"}});
        apply_defaults(&mut obj, &schema());
        assert_eq!(obj["spec"]["replicas"], 1);
    }

    #[test]
    fn validation_reports_upstream_messages() {
        let obj = json!({"spec": {"replicas": 11, "image": "c", "port": true, "tags": ["x", "x"]}});
        let errs: Vec<String> = validate(&obj, &schema(), "").iter().map(FieldError::to_text).collect();
        assert!(errs.contains(&"spec.cronSpec: Required value".to_string()), "{errs:?}");
        assert!(
            errs.iter().any(|e| e.contains("spec.replicas in body should be less than or equal to 10")),
            "{errs:?}"
        );
        assert!(errs.iter().any(|e| e.starts_with("spec.image: Unsupported value: \"c\"")), "{errs:?}");
        assert!(errs.iter().any(|e| e.contains("must be of type integer,string")), "{errs:?}");
        assert!(errs.iter().any(|e| e.starts_with("spec.tags[1]: Duplicate value")), "{errs:?}");
        let wrong_type = json!({"spec": {"cronSpec": 5}});
        let errs: Vec<String> =
            validate(&wrong_type, &schema(), "").iter().map(FieldError::to_text).collect();
        assert!(
            errs.iter().any(|e| e.contains("spec.cronSpec in body must be of type string: \"integer\"")),
            "{errs:?}"
        );
    }
}
