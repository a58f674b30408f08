//! The Swagger 2.0 document as protobuf: gnostic's `openapi.v2.Document`
//! (`openapiv2/OpenAPIv2.proto` in github.com/google/gnostic-models), which is what upstream
//! serves for `Accept: application/com.github.proto-openapi.spec.v2@v1.0+protobuf` and what
//! kubectl asks for when it falls back to v2.
//!
//! [`encode`] walks the JSON form of the document, so the two can never disagree. Each
//! function below writes one gnostic message and is named after it; the field numbers are
//! upstream's. JSON maps become gnostic's ordered `Named*` pairs, in the JSON's key order.
//! Values gnostic keeps as free-form YAML (`default`, `enum`, `example`, every `x-*`
//! extension) go into `Any.yaml`, which is how gnostic itself stores them and how
//! kube-openapi reads them back.
//!
//! Nothing here panics on an odd document: a key of the wrong JSON type, or one that gnostic
//! has no field for, is left out.

use serde_json::{Map, Value};

use crate::protobuf::wire::{WireType, put_bytes, put_key, put_varint};

/// The protobuf encoding of a Swagger 2.0 document given as JSON.
pub fn encode(doc: &Value) -> Vec<u8> {
    let mut out = Vec::new();
    if let Some(o) = doc.as_object() {
        document(&mut out, o);
    }
    out
}

/// `Document`.
fn document(out: &mut Vec<u8>, o: &Map<String, Value>) {
    string(out, 1, o.get("swagger"));
    if let Some(info) = o.get("info").and_then(Value::as_object) {
        message(out, 2, |b| self::info(b, info));
    }
    string(out, 3, o.get("host"));
    string(out, 4, o.get("basePath"));
    strings(out, 5, o.get("schemes"));
    strings(out, 6, o.get("consumes"));
    strings(out, 7, o.get("produces"));
    if let Some(p) = o.get("paths").and_then(Value::as_object) {
        message(out, 8, |b| paths(b, p));
    }
    if let Some(d) = o.get("definitions").and_then(Value::as_object) {
        // `Definitions`: the schemas by name.
        message(out, 9, |b| named_schemas(b, 1, d));
    }
    security_requirements(out, 12, o.get("security"));
    if let Some(s) = o.get("securityDefinitions").and_then(Value::as_object) {
        message(out, 13, |b| security_definitions(b, s));
    }
    vendor_extensions(out, 16, o);
}

/// `Info`.
fn info(out: &mut Vec<u8>, o: &Map<String, Value>) {
    string(out, 1, o.get("title"));
    string(out, 2, o.get("version"));
    string(out, 3, o.get("description"));
    string(out, 4, o.get("termsOfService"));
    vendor_extensions(out, 7, o);
}

/// `Paths`: extensions first (field 1), then each path as a `NamedPathItem` (field 2).
fn paths(out: &mut Vec<u8>, o: &Map<String, Value>) {
    vendor_extensions(out, 1, o);
    for (name, item) in o.iter().filter(|(k, _)| !k.starts_with("x-")) {
        if let Some(item) = item.as_object() {
            named(out, 2, name, |b| path_item(b, item));
        }
    }
}

/// `PathItem`.
fn path_item(out: &mut Vec<u8>, o: &Map<String, Value>) {
    string(out, 1, o.get("$ref"));
    for (tag, method) in
        [(2, "get"), (3, "put"), (4, "post"), (5, "delete"), (6, "options"), (7, "head"), (8, "patch")]
    {
        if let Some(op) = o.get(method).and_then(Value::as_object) {
            message(out, tag, |b| operation(b, op));
        }
    }
    parameters_items(out, 9, o.get("parameters"));
    vendor_extensions(out, 10, o);
}

/// `Operation`.
fn operation(out: &mut Vec<u8>, o: &Map<String, Value>) {
    strings(out, 1, o.get("tags"));
    string(out, 2, o.get("summary"));
    string(out, 3, o.get("description"));
    string(out, 5, o.get("operationId"));
    strings(out, 6, o.get("produces"));
    strings(out, 7, o.get("consumes"));
    parameters_items(out, 8, o.get("parameters"));
    if let Some(r) = o.get("responses").and_then(Value::as_object) {
        message(out, 9, |b| responses(b, r));
    }
    strings(out, 10, o.get("schemes"));
    boolean(out, 11, o.get("deprecated"));
    security_requirements(out, 12, o.get("security"));
    vendor_extensions(out, 13, o);
}

/// Repeated `ParametersItem`: a `$ref` is a `JsonReference` (field 2), anything else a
/// `Parameter` (field 1). A parameter whose `in` gnostic does not know is left out rather
/// than sent as an empty oneof.
fn parameters_items(out: &mut Vec<u8>, tag: u32, v: Option<&Value>) {
    for p in v.and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_object) {
        let mut item = Vec::new();
        if p.contains_key("$ref") {
            message(&mut item, 2, |b| json_reference(b, p));
        } else {
            let mut param = Vec::new();
            parameter(&mut param, p);
            if param.is_empty() {
                continue;
            }
            put_bytes(&mut item, 1, &param);
        }
        put_bytes(out, tag, &item);
    }
}

/// `JsonReference`.
fn json_reference(out: &mut Vec<u8>, o: &Map<String, Value>) {
    string(out, 1, o.get("$ref"));
    string(out, 2, o.get("description"));
}

/// `Parameter`: a `BodyParameter` (field 1) or a `NonBodyParameter` (field 2), by `in`.
/// Writes nothing for an unknown `in`.
fn parameter(out: &mut Vec<u8>, o: &Map<String, Value>) {
    let location = o.get("in").and_then(Value::as_str).unwrap_or("");
    if location == "body" {
        message(out, 1, |b| body_parameter(b, o));
        return;
    }
    // `NonBodyParameter`'s oneof: header 1, formData 2, query 3, path 4. Query and formData
    // have `allow_empty_value` at 5, which shifts their later fields up by one.
    let (tag, shift) = match location {
        "header" => (1, 0),
        "formData" => (2, 1),
        "query" => (3, 1),
        "path" => (4, 0),
        _ => return,
    };
    message(out, 2, |b| message(b, tag, |s| parameter_sub_schema(s, o, shift)));
}

/// `BodyParameter`.
fn body_parameter(out: &mut Vec<u8>, o: &Map<String, Value>) {
    string(out, 1, o.get("description"));
    string(out, 2, o.get("name"));
    string(out, 3, o.get("in"));
    boolean(out, 4, o.get("required"));
    if let Some(s) = o.get("schema").and_then(Value::as_object) {
        message(out, 5, |b| schema(b, s));
    }
    vendor_extensions(out, 6, o);
}

/// `HeaderParameterSubSchema`, `FormDataParameterSubSchema`, `QueryParameterSubSchema` and
/// `PathParameterSubSchema`: the same fields, with `allow_empty_value` (5) only in the
/// query and formData forms (`shift` 1).
fn parameter_sub_schema(out: &mut Vec<u8>, o: &Map<String, Value>, shift: u32) {
    boolean(out, 1, o.get("required"));
    string(out, 2, o.get("in"));
    string(out, 3, o.get("description"));
    string(out, 4, o.get("name"));
    if shift == 1 {
        boolean(out, 5, o.get("allowEmptyValue"));
    }
    primitive_fields(out, o, 5 + shift);
}

/// `PrimitivesItems`.
fn primitives_items(out: &mut Vec<u8>, o: &Map<String, Value>) {
    primitive_fields(out, o, 1);
}

/// The run of fields that `PrimitivesItems` and the parameter sub-schemas share, in the
/// same order, from `type` at `base` to `vendor_extension` at `base + 17`.
fn primitive_fields(out: &mut Vec<u8>, o: &Map<String, Value>, base: u32) {
    string(out, base, o.get("type"));
    string(out, base + 1, o.get("format"));
    if let Some(items) = o.get("items").and_then(Value::as_object) {
        message(out, base + 2, |b| primitives_items(b, items));
    }
    string(out, base + 3, o.get("collectionFormat"));
    any(out, base + 4, o.get("default"));
    double(out, base + 5, o.get("maximum"));
    boolean(out, base + 6, o.get("exclusiveMaximum"));
    double(out, base + 7, o.get("minimum"));
    boolean(out, base + 8, o.get("exclusiveMinimum"));
    int64(out, base + 9, o.get("maxLength"));
    int64(out, base + 10, o.get("minLength"));
    string(out, base + 11, o.get("pattern"));
    int64(out, base + 12, o.get("maxItems"));
    int64(out, base + 13, o.get("minItems"));
    boolean(out, base + 14, o.get("uniqueItems"));
    anys(out, base + 15, o.get("enum"));
    double(out, base + 16, o.get("multipleOf"));
    vendor_extensions(out, base + 17, o);
}

/// `Responses`: each status code as a `NamedResponseValue` (field 1).
fn responses(out: &mut Vec<u8>, o: &Map<String, Value>) {
    for (code, r) in o.iter().filter(|(k, _)| !k.starts_with("x-")) {
        if let Some(r) = r.as_object() {
            named(out, 1, code, |b| response_value(b, r));
        }
    }
    vendor_extensions(out, 2, o);
}

/// `ResponseValue`: a `JsonReference` (field 2) for a `$ref`, else a `Response` (field 1).
fn response_value(out: &mut Vec<u8>, o: &Map<String, Value>) {
    if o.contains_key("$ref") {
        message(out, 2, |b| json_reference(b, o));
    } else {
        message(out, 1, |b| response(b, o));
    }
}

/// `Response`.
fn response(out: &mut Vec<u8>, o: &Map<String, Value>) {
    string(out, 1, o.get("description"));
    if let Some(s) = o.get("schema").and_then(Value::as_object) {
        // `SchemaItem`: a `Schema` (field 1); gnostic uses `FileSchema` only for type file.
        message(out, 2, |b| message(b, 1, |c| schema(c, s)));
    }
    vendor_extensions(out, 5, o);
}

/// `Schema`.
fn schema(out: &mut Vec<u8>, o: &Map<String, Value>) {
    string(out, 1, o.get("$ref"));
    string(out, 2, o.get("format"));
    string(out, 3, o.get("title"));
    string(out, 4, o.get("description"));
    any(out, 5, o.get("default"));
    double(out, 6, o.get("multipleOf"));
    double(out, 7, o.get("maximum"));
    boolean(out, 8, o.get("exclusiveMaximum"));
    double(out, 9, o.get("minimum"));
    boolean(out, 10, o.get("exclusiveMinimum"));
    int64(out, 11, o.get("maxLength"));
    int64(out, 12, o.get("minLength"));
    string(out, 13, o.get("pattern"));
    int64(out, 14, o.get("maxItems"));
    int64(out, 15, o.get("minItems"));
    boolean(out, 16, o.get("uniqueItems"));
    int64(out, 17, o.get("maxProperties"));
    int64(out, 18, o.get("minProperties"));
    strings(out, 19, o.get("required"));
    anys(out, 20, o.get("enum"));
    additional_properties_item(out, 21, o.get("additionalProperties"));
    type_item(out, 22, o.get("type"));
    items_item(out, 23, o.get("items"));
    for s in o.get("allOf").and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_object) {
        message(out, 24, |b| schema(b, s));
    }
    if let Some(p) = o.get("properties").and_then(Value::as_object) {
        // `Properties`: the property schemas by name.
        message(out, 25, |b| named_schemas(b, 1, p));
    }
    string(out, 26, o.get("discriminator"));
    boolean(out, 27, o.get("readOnly"));
    any(out, 30, o.get("example"));
    vendor_extensions(out, 31, o);
}

/// `NamedSchema` pairs (the body of `Definitions` and `Properties`).
fn named_schemas(out: &mut Vec<u8>, tag: u32, o: &Map<String, Value>) {
    for (name, s) in o {
        if let Some(s) = s.as_object() {
            named(out, tag, name, |b| schema(b, s));
        }
    }
}

/// `AdditionalPropertiesItem`: a `Schema` (field 1) or a boolean (field 2). The boolean is a
/// oneof member, so `false` is written too: its presence is the point.
fn additional_properties_item(out: &mut Vec<u8>, tag: u32, v: Option<&Value>) {
    match v {
        Some(Value::Object(s)) => message(out, tag, |b| message(b, 1, |c| schema(c, s))),
        Some(Value::Bool(x)) => message(out, tag, |b| {
            put_key(b, 2, WireType::Varint);
            put_varint(b, u64::from(*x));
        }),
        _ => {}
    }
}

/// `TypeItem`: JSON Schema allows one type name or a list of them.
fn type_item(out: &mut Vec<u8>, tag: u32, v: Option<&Value>) {
    match v {
        Some(Value::String(_)) | Some(Value::Array(_)) => message(out, tag, |b| strings(b, 1, v)),
        _ => {}
    }
}

/// `ItemsItem`: one schema, or a list of them (tuple validation).
fn items_item(out: &mut Vec<u8>, tag: u32, v: Option<&Value>) {
    let list: Vec<&Map<String, Value>> = match v {
        Some(Value::Object(s)) => vec![s],
        Some(Value::Array(a)) => a.iter().filter_map(Value::as_object).collect(),
        _ => return,
    };
    message(out, tag, |b| {
        for s in list {
            message(b, 1, |c| schema(c, s));
        }
    });
}

/// Repeated `SecurityRequirement`: each is a map of scheme name → scopes, written as
/// `NamedStringArray` pairs whose `StringArray` holds the scopes.
fn security_requirements(out: &mut Vec<u8>, tag: u32, v: Option<&Value>) {
    for req in v.and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_object) {
        message(out, tag, |b| {
            for (name, scopes) in req {
                named(b, 1, name, |c| strings(c, 1, Some(scopes)));
            }
        });
    }
}

/// `SecurityDefinitions`: `NamedSecurityDefinitionsItem` pairs. Only the two kinds of
/// scheme an apiserver declares (apiKey and basic) are written; OAuth2 ones are left out.
fn security_definitions(out: &mut Vec<u8>, o: &Map<String, Value>) {
    for (name, def) in o {
        let Some(def) = def.as_object() else { continue };
        match def.get("type").and_then(Value::as_str) {
            Some("apiKey") => named(out, 1, name, |b| message(b, 2, |c| api_key_security(c, def))),
            Some("basic") => {
                named(out, 1, name, |b| message(b, 1, |c| basic_authentication_security(c, def)))
            }
            _ => {}
        }
    }
}

/// `ApiKeySecurity`.
fn api_key_security(out: &mut Vec<u8>, o: &Map<String, Value>) {
    string(out, 1, o.get("type"));
    string(out, 2, o.get("name"));
    string(out, 3, o.get("in"));
    string(out, 4, o.get("description"));
    vendor_extensions(out, 5, o);
}

/// `BasicAuthenticationSecurity`.
fn basic_authentication_security(out: &mut Vec<u8>, o: &Map<String, Value>) {
    string(out, 1, o.get("type"));
    string(out, 2, o.get("description"));
    vendor_extensions(out, 3, o);
}

/// Every `x-*` key of `o` as a repeated `NamedAny`.
fn vendor_extensions(out: &mut Vec<u8>, tag: u32, o: &Map<String, Value>) {
    for (name, v) in o.iter().filter(|(k, _)| k.starts_with("x-")) {
        named(out, tag, name, |b| any_body(b, v));
    }
}

/// An `Any` field, when the key is present (an explicit JSON `null` is a value too, but
/// gnostic has no use for it, so it is left out).
fn any(out: &mut Vec<u8>, tag: u32, v: Option<&Value>) {
    if let Some(v) = v.filter(|v| !v.is_null()) {
        message(out, tag, |b| any_body(b, v));
    }
}

/// A repeated `Any` field from a JSON array (`enum`).
fn anys(out: &mut Vec<u8>, tag: u32, v: Option<&Value>) {
    for v in v.and_then(Value::as_array).into_iter().flatten() {
        message(out, tag, |b| any_body(b, v));
    }
}

/// `Any`: gnostic keeps free-form values as YAML text in `yaml` (field 2), never in the
/// `google.protobuf.Any` (field 1). YAML is what upstream writes; JSON text, also valid YAML,
/// is the fallback should the YAML serializer refuse a value.
fn any_body(out: &mut Vec<u8>, v: &Value) {
    let text = serde_yaml::to_string(v).or_else(|_| serde_json::to_string(v)).unwrap_or_default();
    if !text.is_empty() {
        put_bytes(out, 2, text.as_bytes());
    }
}

/// A `Named*` pair: `name` (field 1) and the value message that `value` writes (field 2),
/// as field `tag` of `out`.
fn named(out: &mut Vec<u8>, tag: u32, name: &str, value: impl FnOnce(&mut Vec<u8>)) {
    message(out, tag, |b| {
        if !name.is_empty() {
            put_bytes(b, 1, name.as_bytes());
        }
        message(b, 2, value);
    });
}

/// A message field: the bytes `body` writes, length-delimited. Written even when empty,
/// because an empty message is still a present one (and selects a oneof member).
fn message(out: &mut Vec<u8>, tag: u32, body: impl FnOnce(&mut Vec<u8>)) {
    let mut b = Vec::new();
    body(&mut b);
    put_bytes(out, tag, &b);
}

/// A `string` field; proto3 leaves the empty string out.
fn string(out: &mut Vec<u8>, tag: u32, v: Option<&Value>) {
    if let Some(s) = v.and_then(Value::as_str).filter(|s| !s.is_empty()) {
        put_bytes(out, tag, s.as_bytes());
    }
}

/// A `repeated string` field, from a JSON array of strings or a lone string.
fn strings(out: &mut Vec<u8>, tag: u32, v: Option<&Value>) {
    match v {
        Some(Value::String(s)) => put_bytes(out, tag, s.as_bytes()),
        Some(Value::Array(a)) => {
            for s in a.iter().filter_map(Value::as_str) {
                put_bytes(out, tag, s.as_bytes());
            }
        }
        _ => {}
    }
}

/// A `bool` field; proto3 leaves `false` out.
fn boolean(out: &mut Vec<u8>, tag: u32, v: Option<&Value>) {
    if v.and_then(Value::as_bool) == Some(true) {
        put_key(out, tag, WireType::Varint);
        put_varint(out, 1);
    }
}

/// An `int64` field (a varint; a negative one takes ten bytes, as in Go).
fn int64(out: &mut Vec<u8>, tag: u32, v: Option<&Value>) {
    let n = v.and_then(|v| v.as_i64().or_else(|| v.as_f64().map(|f| f as i64))).unwrap_or(0);
    if n != 0 {
        put_key(out, tag, WireType::Varint);
        put_varint(out, n as u64);
    }
}

/// A `double` field (fixed 64-bit, little-endian).
fn double(out: &mut Vec<u8>, tag: u32, v: Option<&Value>) {
    let x = v.and_then(Value::as_f64).unwrap_or(0.0);
    if x != 0.0 {
        put_key(out, tag, WireType::Fixed64);
        out.extend_from_slice(&x.to_le_bytes());
    }
}
