//! JSON written the way Go's `encoding/json` writes a struct: keys in the struct's field
//! order (serde_json's maps sort them), map keys sorted, no spaces. The autoscaling/v1
//! round-trip annotations hold such text, and clients compare them as written.

use serde_json::Value;

/// A value to write: a struct (ordered fields), a list, or plain JSON (whose object keys
/// are written sorted, as Go writes maps).
pub enum Go {
    Struct(Vec<(&'static str, Go)>),
    List(Vec<Go>),
    Plain(Value),
}

impl Go {
    /// A struct with its `omitempty` fields left out when null.
    pub fn fields(fields: Vec<(&'static str, Go)>) -> Go {
        Go::Struct(fields.into_iter().filter(|(_, v)| !matches!(v, Go::Plain(Value::Null))).collect())
    }

    pub fn render(&self) -> String {
        let mut out = String::new();
        self.write(&mut out);
        out
    }

    fn write(&self, out: &mut String) {
        match self {
            Go::Struct(fields) => {
                out.push('{');
                for (i, (k, v)) in fields.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    out.push_str(&Value::String((*k).to_string()).to_string());
                    out.push(':');
                    v.write(out);
                }
                out.push('}');
            }
            Go::List(items) => {
                out.push('[');
                for (i, v) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    v.write(out);
                }
                out.push(']');
            }
            // serde_json writes object keys sorted (its map is ordered by key), escaping
            // as Go does for the characters object names hold. Go also escapes <, > and &.
            Go::Plain(v) => out.push_str(&go_escape(&v.to_string())),
        }
    }
}

/// Go's `HTMLEscape` of encoded JSON: `<`, `>` and `&` become `\u003c`, `\u003e`, `\u0026`.
fn go_escape(s: &str) -> String {
    s.replace('<', "\\u003c").replace('>', "\\u003e").replace('&', "\\u0026")
}

/// `metav1.LabelSelector` in Go's field order.
pub fn selector(v: &Value) -> Go {
    if v.is_null() {
        return Go::Plain(Value::Null);
    }
    let exprs = v["matchExpressions"].as_array().map(|a| {
        Go::List(
            a.iter()
                .map(|e| {
                    Go::fields(vec![
                        ("key", Go::Plain(e["key"].clone())),
                        ("operator", Go::Plain(e["operator"].clone())),
                        ("values", Go::Plain(e["values"].clone())),
                    ])
                })
                .collect(),
        )
    });
    Go::fields(vec![
        ("matchLabels", Go::Plain(v["matchLabels"].clone())),
        ("matchExpressions", exprs.unwrap_or(Go::Plain(Value::Null))),
    ])
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn field_order_and_maps() {
        let g = Go::fields(vec![
            ("type", Go::Plain(json!("Object"))),
            ("skipped", Go::Plain(Value::Null)),
            ("selector", selector(&json!({ "matchLabels": { "b": "2", "a": "1" } }))),
            ("list", Go::List(vec![Go::Plain(json!(1)), Go::Plain(json!("x<y"))])),
        ]);
        assert_eq!(
            g.render(),
            r#"{"type":"Object","selector":{"matchLabels":{"a":"1","b":"2"}},"list":[1,"x\u003cy"]}"#
        );
    }
}
