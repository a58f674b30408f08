//! JSON as upstream's serializer writes it. Upstream encodes Go structs, so an object's
//! fields come in declaration order (`kind`, `apiVersion`, `metadata`, `spec`, `status`;
//! a `Status` as `kind, apiVersion, metadata, status, message, reason, details, code`), and
//! its `json.Encoder` ends the body with a newline. Upstream's `pretty` output (for
//! `?pretty=true` and curl/wget/browsers) is its `json.MarshalIndent`: two-space indents,
//! `"key": value`, empty objects and arrays as `{}`/`[]`, and no final newline; [`indent`]
//! turns a compact body into it. Our objects are
//! `serde_json::Value`s, whose maps are sorted, so the well-known fields are put first here
//! and the rest follow sorted (as Go writes its maps). Clients that print or compare the
//! raw text of an error see what upstream's would show.

use serde::ser::{Serialize, SerializeMap, SerializeSeq, Serializer};
use serde_json::Value;

/// A top-level object (or list) as a compact body ending in a newline.
pub fn to_vec(v: &Value) -> Vec<u8> {
    let mut out = object_bytes(v);
    out.push(b'\n');
    out
}

/// An object, compact and without the newline (for the watch cache, whose encodings
/// become list items and watch events).
pub fn object_bytes(v: &Value) -> Vec<u8> {
    let mut out = Vec::new();
    write_object(&mut out, v);
    out
}

/// [`object_bytes`] appended to `out` (a list body being assembled).
pub fn write_object(out: &mut Vec<u8>, v: &Value) {
    // Writing JSON into memory fails only for maps with non-string keys, which a Value
    // cannot have.
    let _ = serde_json::to_writer(out, &Ordered(v, Role::Object));
}

/// Where a map sits, which decides the order of its well-known keys.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Role {
    /// Anything else: keys sorted.
    Plain,
    /// A top-level object, a list's item, a table row's object.
    Object,
    /// `ObjectMeta` or `ListMeta`.
    Meta,
    /// A `Status`'s `details`.
    Details,
    /// One of `details.causes`.
    Cause,
    /// One of a `Table`'s `rows`.
    Row,
}

const OBJECT: &[&str] = &["kind", "apiVersion", "metadata", "spec", "status"];
const STATUS: &[&str] = &["kind", "apiVersion", "metadata", "status", "message", "reason", "details", "code"];
const TABLE: &[&str] = &["kind", "apiVersion", "metadata", "columnDefinitions", "rows"];
const LIST: &[&str] = &["kind", "apiVersion", "metadata", "items"];
/// `ObjectMeta`'s fields, then `ListMeta`'s that it lacks (in `ListMeta`'s order
/// `selfLink, resourceVersion, continue, remainingItemCount`, which this keeps).
pub const META: &[&str] = &[
    "name",
    "generateName",
    "namespace",
    "selfLink",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "labels",
    "annotations",
    "ownerReferences",
    "finalizers",
    "managedFields",
    "continue",
    "remainingItemCount",
];
const DETAILS: &[&str] = &["name", "group", "kind", "uid", "causes", "retryAfterSeconds"];
const CAUSE: &[&str] = &["reason", "message", "field"];
const ROW: &[&str] = &["cells", "conditions", "object"];

impl Role {
    fn first_keys(self, m: &serde_json::Map<String, Value>) -> &'static [&'static str] {
        match self {
            Role::Plain => &[],
            Role::Object => match m.get("kind").and_then(Value::as_str) {
                Some("Status") => STATUS,
                Some("Table") => TABLE,
                _ if m.contains_key("items") => LIST,
                _ => OBJECT,
            },
            Role::Meta => META,
            Role::Details => DETAILS,
            Role::Cause => CAUSE,
            Role::Row => ROW,
        }
    }

    fn child(self, key: &str) -> Role {
        match (self, key) {
            (Role::Object, "metadata") => Role::Meta,
            (Role::Object, "items") => Role::Object,
            (Role::Object, "details") => Role::Details,
            (Role::Object, "rows") => Role::Row,
            (Role::Row, "object") => Role::Object,
            (Role::Details, "causes") => Role::Cause,
            _ => Role::Plain,
        }
    }
}

struct Ordered<'a>(&'a Value, Role);

impl Serialize for Ordered<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let Ordered(v, role) = *self;
        match v {
            _ if role == Role::Plain => v.serialize(s),
            Value::Object(m) => {
                let first = role.first_keys(m);
                let mut map = s.serialize_map(Some(m.len()))?;
                for k in first {
                    if let Some(v) = m.get(*k) {
                        map.serialize_entry(k, &Ordered(v, role.child(k)))?;
                    }
                }
                for (k, v) in m.iter().filter(|(k, _)| !first.contains(&k.as_str())) {
                    map.serialize_entry(k, &Ordered(v, role.child(k)))?;
                }
                map.end()
            }
            // A list of objects (items, rows, causes): each in the same role.
            Value::Array(a) => {
                let mut seq = s.serialize_seq(Some(a.len()))?;
                for e in a {
                    seq.serialize_element(&Ordered(e, role))?;
                }
                seq.end()
            }
            _ => v.serialize(s),
        }
    }
}

/// A compact JSON body as upstream's pretty serializer writes it (`json.MarshalIndent`
/// with two spaces); the field order and escaping of the input are kept.
pub fn indent(compact: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(compact.len() * 2);
    let mut depth = 0usize;
    let (mut in_string, mut escaped) = (false, false);
    let newline = |out: &mut Vec<u8>, depth: usize| {
        out.push(b'\n');
        out.resize(out.len() + 2 * depth, b' ');
    };
    let mut bytes = compact.iter().copied().peekable();
    while let Some(b) = bytes.next() {
        if in_string {
            out.push(b);
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => {
                in_string = true;
                out.push(b);
            }
            b'{' | b'[' => {
                out.push(b);
                let close = if b == b'{' { b'}' } else { b']' };
                if bytes.peek() == Some(&close) {
                    out.push(close);
                    bytes.next();
                } else {
                    depth += 1;
                    newline(&mut out, depth);
                }
            }
            b'}' | b']' => {
                depth = depth.saturating_sub(1);
                newline(&mut out, depth);
                out.push(b);
            }
            b',' => {
                out.push(b);
                newline(&mut out, depth);
            }
            b':' => out.extend_from_slice(b": "),
            b' ' | b'\t' | b'\n' | b'\r' => {}
            _ => out.push(b),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn text(v: &Value) -> String {
        String::from_utf8(to_vec(v)).unwrap()
    }

    #[test]
    fn status_in_upstreams_field_order_with_a_newline() {
        let s = json!({
            "code": 422, "reason": "Invalid", "message": "m", "status": "Failure", "metadata": {},
            "apiVersion": "v1", "kind": "Status",
            "details": { "kind": "pods", "name": "p", "causes": [{ "field": "f", "message": "x", "reason": "FieldValueInvalid" }] },
        });
        assert_eq!(
            text(&s),
            concat!(
                r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"m","reason":"Invalid","#,
                r#""details":{"name":"p","kind":"pods","causes":[{"reason":"FieldValueInvalid","message":"x","field":"f"}]},"code":422}"#,
                "\n"
            )
        );
    }

    #[test]
    fn objects_and_lists_put_the_well_known_fields_first() {
        let cm = json!({
            "data": { "z": "1", "kind": "k" }, "metadata": { "uid": "u", "name": "a", "namespace": "d", "labels": {"b": "1", "a": "2"} },
            "kind": "ConfigMap", "apiVersion": "v1",
        });
        assert_eq!(
            text(&cm),
            concat!(
                r#"{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"a","namespace":"d","uid":"u","labels":{"a":"2","b":"1"}},"#,
                r#""data":{"kind":"k","z":"1"}}"#,
                "\n"
            )
        );
        let list = json!({ "items": [cm], "metadata": { "resourceVersion": "5", "continue": "c" }, "kind": "ConfigMapList", "apiVersion": "v1" });
        assert!(text(&list).starts_with(
            r#"{"kind":"ConfigMapList","apiVersion":"v1","metadata":{"resourceVersion":"5","continue":"c"},"items":[{"kind":"ConfigMap","#
        ));
    }

    #[test]
    fn indent_matches_go_marshal_indent() {
        let compact = br#"{"kind":"Status","metadata":{},"items":[],"a":[1,{"b":"x,y:{[\"]}"}],"c":null}"#;
        let want = "{\n  \"kind\": \"Status\",\n  \"metadata\": {},\n  \"items\": [],\n  \"a\": [\n    1,\n    {\n      \"b\": \"x,y:{[\\\"]}\"\n    }\n  ],\n  \"c\": null\n}";
        assert_eq!(String::from_utf8(indent(compact)).unwrap(), want);
        // The compact body's final newline is not part of the pretty one.
        assert_eq!(indent(b"{\"a\":1}\n"), b"{\n  \"a\": 1\n}");
    }
}
