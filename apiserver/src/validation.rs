//! Validation shared by every resource: names (DNS-1123), object metadata, labels and
//! annotations, with upstream's rules and error wording (`apimachinery/pkg/util/validation`).

use serde_json::Value;

use crate::errors::FieldError;

pub const DNS1123_LABEL_MAX: usize = 63;
pub const DNS1123_SUBDOMAIN_MAX: usize = 253;
const LABEL_VALUE_MAX: usize = 63;
const QUALIFIED_NAME_MAX: usize = 63;
/// Total size of all annotations on an object.
const ANNOTATIONS_MAX_BYTES: usize = 256 * 1024;

const DNS1123_LABEL_MSG: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";
const DNS1123_SUBDOMAIN_MSG: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
const QUALIFIED_NAME_MSG: &str = "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";
const LABEL_VALUE_MSG: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')";

fn is_lower_alnum(c: char) -> bool {
    c.is_ascii_lowercase() || c.is_ascii_digit()
}

pub fn is_dns1123_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= DNS1123_LABEL_MAX
        && s.chars().all(|c| is_lower_alnum(c) || c == '-')
        && s.starts_with(is_lower_alnum)
        && s.ends_with(is_lower_alnum)
}

pub fn is_dns1123_subdomain(s: &str) -> bool {
    !s.is_empty() && s.len() <= DNS1123_SUBDOMAIN_MAX && s.split('.').all(is_dns1123_label)
}

/// Errors for a DNS-1123 label (namespaces, services, container names, ...).
pub fn dns1123_label(field: &str, value: &str) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if value.len() > DNS1123_LABEL_MAX {
        errs.push(FieldError::invalid(
            field,
            value,
            format!("must be no more than {DNS1123_LABEL_MAX} characters"),
        ));
    }
    if !value.chars().all(|c| is_lower_alnum(c) || c == '-')
        || !value.starts_with(is_lower_alnum)
        || !value.ends_with(is_lower_alnum)
    {
        errs.push(FieldError::invalid(field, value, DNS1123_LABEL_MSG));
    }
    errs
}

/// Errors for a DNS-1123 subdomain (most object names).
pub fn dns1123_subdomain(field: &str, value: &str) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if value.len() > DNS1123_SUBDOMAIN_MAX {
        errs.push(FieldError::invalid(
            field,
            value,
            format!("must be no more than {DNS1123_SUBDOMAIN_MAX} characters"),
        ));
    }
    if !value.split('.').all(|l| {
        !l.is_empty()
            && l.chars().all(|c| is_lower_alnum(c) || c == '-')
            && l.starts_with(is_lower_alnum)
            && l.ends_with(is_lower_alnum)
    }) {
        errs.push(FieldError::invalid(field, value, DNS1123_SUBDOMAIN_MSG));
    }
    errs
}

/// How a resource's names are checked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NameRule {
    Subdomain,
    Label,
    /// Path segment safe only (no `/`, `%`, `.` or `..`), for names like RBAC roles.
    PathSegment,
}

impl NameRule {
    pub fn check(self, field: &str, name: &str) -> Vec<FieldError> {
        match self {
            Self::Subdomain => dns1123_subdomain(field, name),
            Self::Label => dns1123_label(field, name),
            Self::PathSegment => {
                if name == "." || name == ".." {
                    vec![FieldError::invalid(field, name, format!("may not be '{name}'"))]
                } else if let Some(bad) = ["/", "%"].iter().find(|b| name.contains(*b)) {
                    vec![FieldError::invalid(field, name, format!("may not contain '{bad}'"))]
                } else {
                    Vec::new()
                }
            }
        }
    }
}

/// A qualified name (`prefix/name` with a DNS subdomain prefix), as label keys are.
pub fn qualified_name(field: &str, value: &str) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let (prefix, name) = match value.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, value),
    };
    if let Some(p) = prefix {
        if p.is_empty() {
            errs.push(FieldError::invalid(field, value, "prefix part must be non-empty"));
        } else if !is_dns1123_subdomain(p) {
            errs.push(FieldError::invalid(field, value, format!("prefix part {DNS1123_SUBDOMAIN_MSG}")));
        }
    }
    if name.is_empty() {
        errs.push(FieldError::invalid(field, value, "name part must be non-empty"));
    } else if name.len() > QUALIFIED_NAME_MAX {
        errs.push(FieldError::invalid(
            field,
            value,
            format!("name part must be no more than {QUALIFIED_NAME_MAX} characters"),
        ));
    } else if !name.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
        || !name.starts_with(|c: char| c.is_ascii_alphanumeric())
        || !name.ends_with(|c: char| c.is_ascii_alphanumeric())
    {
        errs.push(FieldError::invalid(field, value, QUALIFIED_NAME_MSG));
    }
    errs
}

pub fn label_value(field: &str, value: &str) -> Vec<FieldError> {
    if value.is_empty() {
        return Vec::new();
    }
    let mut errs = Vec::new();
    if value.len() > LABEL_VALUE_MAX {
        errs.push(FieldError::invalid(
            field,
            value,
            format!("must be no more than {LABEL_VALUE_MAX} characters"),
        ));
    }
    if !value.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
        || !value.starts_with(|c: char| c.is_ascii_alphanumeric())
        || !value.ends_with(|c: char| c.is_ascii_alphanumeric())
    {
        errs.push(FieldError::invalid(field, value, LABEL_VALUE_MSG));
    }
    errs
}

/// Label keys and values of a selector or an object.
pub fn labels(field: &str, labels: Option<&Value>) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let Some(map) = labels.and_then(Value::as_object) else { return errs };
    for (k, v) in map {
        errs.extend(qualified_name(field, k));
        errs.extend(label_value(&format!("{field}[{k}]"), v.as_str().unwrap_or_default()));
    }
    errs
}

pub fn annotations(field: &str, annotations: Option<&Value>) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let Some(map) = annotations.and_then(Value::as_object) else { return errs };
    let mut total = 0;
    for (k, v) in map {
        errs.extend(qualified_name(field, &k.to_lowercase()));
        total += k.len() + v.as_str().map_or(0, str::len);
    }
    if total > ANNOTATIONS_MAX_BYTES {
        errs.push(FieldError::too_long(field, ANNOTATIONS_MAX_BYTES));
    }
    errs
}

/// Errors in an object's metadata: name (per `rule`), namespace presence, labels,
/// annotations, finalizers.
pub fn object_meta(obj: &Value, namespaced: bool, rule: NameRule) -> Vec<FieldError> {
    let meta = &obj["metadata"];
    let mut errs = Vec::new();
    let name = meta["name"].as_str().unwrap_or_default();
    if name.is_empty() {
        errs.push(FieldError::required("metadata.name", "name or generateName is required"));
    } else {
        errs.extend(rule.check("metadata.name", name));
    }
    let ns = meta["namespace"].as_str().unwrap_or_default();
    if namespaced && ns.is_empty() {
        errs.push(FieldError::required("metadata.namespace", ""));
    } else if !namespaced && !ns.is_empty() {
        errs.push(FieldError::forbidden("metadata.namespace", "not allowed on this type"));
    }
    errs.extend(labels("metadata.labels", meta.get("labels")));
    errs.extend(annotations("metadata.annotations", meta.get("annotations")));
    if let Some(fins) = meta["finalizers"].as_array() {
        for (i, f) in fins.iter().enumerate() {
            let f = f.as_str().unwrap_or_default();
            errs.extend(qualified_name(&format!("metadata.finalizers[{i}]"), f));
        }
    }
    errs
}

/// Errors in a metadata change: uid and creation time never change, the name and
/// namespace were matched to the URL already.
pub fn object_meta_update(new: &Value, old: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    for field in ["uid", "creationTimestamp"] {
        let (n, o) = (&new["metadata"][field], &old["metadata"][field]);
        if !n.is_null() && n != o {
            errs.push(FieldError::invalid(
                format!("metadata.{field}"),
                n.as_str().unwrap_or_default(),
                "field is immutable",
            ));
        }
    }
    errs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert!(is_dns1123_label("my-name-1"));
        assert!(!is_dns1123_label("My"));
        assert!(!is_dns1123_label("-a"));
        assert!(is_dns1123_subdomain("a.b-c.d"));
        assert!(!is_dns1123_subdomain("a..b"));
        assert!(dns1123_subdomain("metadata.name", "Bad_Name").len() == 1);
        assert!(qualified_name("k", "app.kubernetes.io/name").is_empty());
        assert!(!qualified_name("k", "bad key").is_empty());
        assert!(label_value("v", "ok.value-1").is_empty());
        assert!(!label_value("v", "not ok").is_empty());
    }
}
