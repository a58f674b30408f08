//! Label and field selectors, parsed from the `labelSelector` and `fieldSelector` query
//! parameters with upstream's grammar and evaluated against objects in the watch cache.

use serde_json::Value;

use crate::errors::{ApiError, ApiResult};

#[derive(Clone, Debug, PartialEq)]
enum LabelOp {
    Equals(String),
    NotEquals(String),
    In(Vec<String>),
    NotIn(Vec<String>),
    Exists,
    DoesNotExist,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct LabelSelector {
    reqs: Vec<(String, LabelOp)>,
}

/// Splits on commas that are not inside parentheses (`a in (x,y),b`).
fn split_top_level(s: &str) -> Vec<String> {
    let mut parts = Vec::new();
    let mut depth = 0;
    let mut cur = String::new();
    for c in s.chars() {
        match c {
            '(' => {
                depth += 1;
                cur.push(c);
            }
            ')' => {
                depth -= 1;
                cur.push(c);
            }
            ',' if depth == 0 => parts.push(std::mem::take(&mut cur)),
            _ => cur.push(c),
        }
    }
    parts.push(cur);
    parts.into_iter().map(|p| p.trim().to_string()).filter(|p| !p.is_empty()).collect()
}

fn set_values(s: &str) -> ApiResult<Vec<String>> {
    let inner = s.trim().strip_prefix('(').and_then(|x| x.strip_suffix(')')).ok_or_else(|| {
        ApiError::bad_request(format!(
            "unable to parse requirement: expected a set in parentheses, found {s:?}"
        ))
    })?;
    Ok(inner.split(',').map(|v| v.trim().to_string()).filter(|v| !v.is_empty()).collect())
}

impl LabelSelector {
    pub fn parse(s: &str) -> ApiResult<Self> {
        let mut reqs = Vec::new();
        for part in split_top_level(s) {
            let req = if let Some(key) = part.strip_prefix('!') {
                (key.trim().to_string(), LabelOp::DoesNotExist)
            } else if let Some((k, v)) = part.split_once("!=") {
                (k.trim().to_string(), LabelOp::NotEquals(v.trim().to_string()))
            } else if let Some((k, v)) = part.split_once("==") {
                (k.trim().to_string(), LabelOp::Equals(v.trim().to_string()))
            } else if let Some((k, v)) = part.split_once('=') {
                (k.trim().to_string(), LabelOp::Equals(v.trim().to_string()))
            } else if let Some((k, v)) = part.split_once(" notin ") {
                (k.trim().to_string(), LabelOp::NotIn(set_values(v)?))
            } else if let Some((k, v)) = part.split_once(" in ") {
                (k.trim().to_string(), LabelOp::In(set_values(v)?))
            } else if part.chars().all(|c| c.is_ascii_alphanumeric() || "-_./".contains(c)) {
                (part.clone(), LabelOp::Exists)
            } else {
                return Err(ApiError::bad_request(format!("unable to parse requirement: {part:?}")));
            };
            if req.0.is_empty() {
                return Err(ApiError::bad_request(format!(
                    "unable to parse requirement: {part:?}: empty key"
                )));
            }
            reqs.push(req);
        }
        Ok(Self { reqs })
    }

    pub fn is_empty(&self) -> bool {
        self.reqs.is_empty()
    }

    /// Whether an object with `labels` (its `metadata.labels`, possibly absent) matches.
    pub fn matches(&self, labels: Option<&Value>) -> bool {
        let get = |k: &str| labels.and_then(|l| l.get(k)).and_then(Value::as_str);
        self.reqs.iter().all(|(k, op)| match op {
            LabelOp::Equals(v) => get(k) == Some(v.as_str()),
            LabelOp::NotEquals(v) => get(k) != Some(v.as_str()),
            LabelOp::In(vs) => get(k).is_some_and(|x| vs.iter().any(|v| v == x)),
            LabelOp::NotIn(vs) => get(k).is_none_or(|x| !vs.iter().any(|v| v == x)),
            LabelOp::Exists => get(k).is_some(),
            LabelOp::DoesNotExist => get(k).is_none(),
        })
    }
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct FieldSelector {
    /// (field, wanted value, equal?)
    reqs: Vec<(String, String, bool)>,
}

impl FieldSelector {
    /// Parses a field selector; `allowed` lists the fields the resource supports (besides
    /// metadata.name and metadata.namespace), as upstream refuses unknown ones.
    pub fn parse(s: &str, allowed: &[&str]) -> ApiResult<Self> {
        let mut reqs = Vec::new();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (field, value, eq) = if let Some((f, v)) = part.split_once("!=") {
                (f, v, false)
            } else if let Some((f, v)) = part.split_once("==") {
                (f, v, true)
            } else if let Some((f, v)) = part.split_once('=') {
                (f, v, true)
            } else {
                return Err(ApiError::bad_request(format!(
                    "invalid selector: '{s}'; can't understand '{part}'"
                )));
            };
            let field = field.trim();
            if field != "metadata.name" && field != "metadata.namespace" && !allowed.contains(&field) {
                return Err(ApiError::bad_request(format!("field label not supported: {field}")));
            }
            reqs.push((field.to_string(), value.trim().to_string(), eq));
        }
        Ok(Self { reqs })
    }

    pub fn is_empty(&self) -> bool {
        self.reqs.is_empty()
    }

    /// The value an equality requirement asks of `field` (for index lookups).
    pub fn equals(&self, field: &str) -> Option<&str> {
        self.reqs.iter().find(|(f, _, eq)| f == field && *eq).map(|(_, v, _)| v.as_str())
    }

    /// Whether an object with these field values matches.
    pub fn matches(&self, fields: &[(&str, String)]) -> bool {
        self.reqs.iter().all(|(f, v, eq)| {
            let have = fields.iter().find(|(name, _)| name == f).map_or("", |(_, x)| x.as_str());
            (have == v) == *eq
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn label_selectors() {
        let labels = json!({"app": "web", "tier": "front"});
        let m = |s: &str| LabelSelector::parse(s).unwrap().matches(Some(&labels));
        assert!(m("app=web"));
        assert!(m("app==web,tier!=back"));
        assert!(m("app in (web, api),tier"));
        assert!(!m("app notin (web)"));
        assert!(m("!missing"));
        assert!(!m("missing"));
        assert!(LabelSelector::parse("").unwrap().matches(None));
        assert!(LabelSelector::parse("a in x").is_err());
    }

    #[test]
    fn field_selectors() {
        let f = FieldSelector::parse("spec.nodeName=n1,metadata.name!=x", &["spec.nodeName"]).unwrap();
        assert!(f.matches(&[("spec.nodeName", "n1".into()), ("metadata.name", "p".into())]));
        assert!(!f.matches(&[("spec.nodeName", "n2".into())]));
        assert_eq!(f.equals("spec.nodeName"), Some("n1"));
        assert!(FieldSelector::parse("spec.bogus=1", &["spec.nodeName"]).is_err());
    }
}
