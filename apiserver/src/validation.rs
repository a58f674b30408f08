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
const DNS1035_LABEL_MSG: &str = "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')";
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

/// Errors for a DNS-1035 label (service names: like a DNS-1123 label, but starting with a
/// letter).
pub fn dns1035_label(field: &str, value: &str) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if value.len() > DNS1123_LABEL_MAX {
        errs.push(FieldError::invalid(
            field,
            value,
            format!("must be no more than {DNS1123_LABEL_MAX} characters"),
        ));
    }
    if !value.chars().all(|c| is_lower_alnum(c) || c == '-')
        || !value.starts_with(|c: char| c.is_ascii_lowercase())
        || !value.ends_with(is_lower_alnum)
    {
        errs.push(FieldError::invalid(field, value, DNS1035_LABEL_MSG));
    }
    errs
}

/// How a resource's names are checked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NameRule {
    Subdomain,
    Label,
    /// Services: a DNS-1035 label (must start with a letter).
    Dns1035Label,
    /// Path segment safe only (no `/`, `%`, `.` or `..`), for names like RBAC roles.
    PathSegment,
}

impl NameRule {
    pub fn check(self, field: &str, name: &str) -> Vec<FieldError> {
        match self {
            Self::Subdomain => dns1123_subdomain(field, name),
            Self::Label => dns1123_label(field, name),
            Self::Dns1035Label => dns1035_label(field, name),
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
        errs.extend(label_value(field, v.as_str().unwrap_or_default()));
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
/// annotations, finalizers (built-in kinds' rules when `kube_finalizers`, see
/// [`finalizer_name`]; else any qualified name, as upstream's generic validation that CRDs
/// and custom resources get).
pub fn object_meta(obj: &Value, namespaced: bool, rule: NameRule, kube_finalizers: bool) -> Vec<FieldError> {
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
    } else if namespaced {
        errs.extend(dns1123_label("metadata.namespace", ns));
    } else if !ns.is_empty() {
        errs.push(FieldError::forbidden("metadata.namespace", "not allowed on this type"));
    }
    errs.extend(labels("metadata.labels", meta.get("labels")));
    errs.extend(annotations("metadata.annotations", meta.get("annotations")));
    errs.extend(owner_references("metadata.ownerReferences", meta.get("ownerReferences")));
    if let Some(fins) = meta["finalizers"].as_array() {
        for (i, f) in fins.iter().enumerate() {
            let (field, name) = (format!("metadata.finalizers[{i}]"), f.as_str().unwrap_or_default());
            errs.extend(if kube_finalizers {
                finalizer_name(&field, name)
            } else {
                qualified_name(&field, name)
            });
        }
    }
    errs
}

/// Finalizers without a `/` must be one of the standard ones (upstream's
/// `validateKubeFinalizerName`); the others are qualified names.
pub fn finalizer_name(field: &str, name: &str) -> Vec<FieldError> {
    let mut errs = qualified_name(field, name);
    if errs.is_empty()
        && !name.contains('/')
        && !["kubernetes", "orphan", "foregroundDeletion"].contains(&name)
    {
        errs.push(FieldError::invalid(
            field,
            name,
            "name is neither a standard finalizer name nor is it fully qualified",
        ));
    }
    errs
}

/// `metadata.ownerReferences`: every reference names its owner fully, and at most one is
/// the controller.
pub fn owner_references(field: &str, refs: Option<&Value>) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let Some(list) = refs.and_then(Value::as_array) else { return errs };
    let mut controller: Option<String> = None;
    for r in list {
        let s = |k: &str| r[k].as_str().unwrap_or_default().to_string();
        let version = s("apiVersion").rsplit('/').next().unwrap_or_default().to_string();
        if version.is_empty() {
            errs.push(FieldError::invalid(
                child(field, "apiVersion"),
                s("apiVersion"),
                "version must not be empty",
            ));
        }
        for f in ["kind", "name", "uid"] {
            if s(f).is_empty() {
                errs.push(FieldError::invalid(child(field, f), "", "must not be empty"));
            }
        }
        if r["controller"].as_bool() == Some(true) {
            let this = format!("{}/{}", s("kind"), s("name"));
            match &controller {
                Some(first) => errs.push(FieldError::invalid(
                    field,
                    Value::Array(list.clone()),
                    format!(
                        "Only one reference can have Controller set to true. Found \"true\" in references for {first} and {this}"
                    ),
                )),
                None => controller = Some(this),
            }
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

// ---------------------------------------------------------------------------------------
// Field paths and the checks resources share (upstream's `util/validation`,
// `apis/meta/v1/validation` and the helpers of `apis/core/validation`).
// ---------------------------------------------------------------------------------------

/// `parent.name` (or `name` at the root), as upstream's `field.Path.Child`.
pub fn child(parent: &str, name: &str) -> String {
    if parent.is_empty() { name.to_string() } else { format!("{parent}.{name}") }
}

/// `parent[i]`, as `field.Path.Index`.
pub fn index(parent: &str, i: usize) -> String {
    format!("{parent}[{i}]")
}

/// `parent[key]`, as `field.Path.Key`.
pub fn key(parent: &str, k: &str) -> String {
    format!("{parent}[{k}]")
}

/// A Too many error (`field.TooMany`).
pub fn too_many(field: impl Into<String>, actual: usize, max: usize) -> FieldError {
    FieldError {
        kind: crate::errors::FieldErrorKind::TooMany,
        field: field.into(),
        value: Some(actual.to_string()),
        detail: format!("must have at most {max} items"),
    }
}

pub const NONNEGATIVE_MSG: &str = "must be greater than or equal to 0";
pub const IMMUTABLE_MSG: &str = "field is immutable";

pub fn inclusive_range(lo: i64, hi: i64) -> String {
    format!("must be between {lo} and {hi}, inclusive")
}

/// `ValidateNonnegativeField` for a number that may be absent (absent is fine).
pub fn nonnegative(field: &str, v: &Value) -> Vec<FieldError> {
    match v.as_i64() {
        Some(n) if n < 0 => vec![FieldError::invalid(field, n, NONNEGATIVE_MSG)],
        _ => Vec::new(),
    }
}

/// A value as upstream's messages print composite values (here: compact JSON).
pub fn show(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => "null".to_string(),
        other => other.to_string(),
    }
}

/// `ValidateImmutableField`: `new` must equal `old`.
pub fn immutable(field: &str, new: &Value, old: &Value) -> Vec<FieldError> {
    if new == old { Vec::new() } else { vec![FieldError::invalid(field, show(new), IMMUTABLE_MSG)] }
}

/// `IsValidPortNum`.
pub fn port_num(field: &str, port: i64) -> Vec<FieldError> {
    if (1..=65535).contains(&port) {
        Vec::new()
    } else {
        vec![FieldError::invalid(field, port, inclusive_range(1, 65535))]
    }
}

/// `IsValidPortName` (an IANA service name).
pub fn port_name(field: &str, name: &str) -> Vec<FieldError> {
    let mut msgs = Vec::new();
    if name.len() > 15 {
        msgs.push("must be no more than 15 characters".to_string());
    }
    if name.is_empty() || !name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-') {
        msgs.push("must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)".to_string());
    } else if !name.chars().any(|c| c.is_ascii_lowercase()) {
        msgs.push("must contain at least one letter (a-z)".to_string());
    }
    if name.contains("--") {
        msgs.push("must not contain consecutive hyphens".to_string());
    }
    if name.starts_with('-') || name.ends_with('-') {
        msgs.push("must not begin or end with a hyphen".to_string());
    }
    msgs.into_iter().map(|m| FieldError::invalid(field, name, m)).collect()
}

/// `ValidatePortNumOrName` for an int-or-string port.
pub fn port_num_or_name(field: &str, port: &Value) -> Vec<FieldError> {
    match port {
        Value::Number(n) => port_num(field, n.as_i64().unwrap_or(0)),
        Value::String(s) => port_name(field, s),
        _ => vec![FieldError::invalid(field, show(port), "must be an integer or a port name")],
    }
}

pub const SUPPORTED_PROTOCOLS: &[&str] = &["SCTP", "TCP", "UDP"];

/// A protocol of a port: required, and one of TCP, UDP, SCTP.
pub fn protocol(field: &str, v: &Value) -> Vec<FieldError> {
    match v.as_str() {
        None | Some("") => vec![FieldError::required(field, "")],
        Some(p) if SUPPORTED_PROTOCOLS.contains(&p) => Vec::new(),
        Some(p) => vec![FieldError::not_supported(field, p, SUPPORTED_PROTOCOLS)],
    }
}

fn ch_dir_prefix(value: &str) -> Option<&'static str> {
    match value {
        "." => Some("must not be '.'"),
        ".." => Some("must not be '..'"),
        v if v.starts_with("..") => Some("must not start with '..'"),
        _ => None,
    }
}

/// `IsRelaxedEnvVarName` (the RelaxedEnvironmentVariableValidation rules, on by default
/// since 1.32): any printable ASCII but `=`.
pub fn env_var_name(field: &str, name: &str) -> Vec<FieldError> {
    if name.chars().all(|c| c.is_ascii_graphic() || c == ' ') && !name.contains('=') {
        Vec::new()
    } else {
        vec![FieldError::invalid(
            field,
            name,
            "a valid environment variable name must consist only of printable ASCII characters other than '='",
        )]
    }
}

const CONFIG_MAP_KEY_MSG: &str = "a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')";

/// `IsConfigMapKey` (ConfigMap and Secret keys, key selectors).
pub fn config_map_key(field: &str, k: &str) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if k.len() > DNS1123_SUBDOMAIN_MAX {
        errs.push(FieldError::invalid(
            field,
            k,
            format!("must be no more than {DNS1123_SUBDOMAIN_MAX} characters"),
        ));
    }
    if k.is_empty() || !k.chars().all(|c| c.is_ascii_alphanumeric() || "-._".contains(c)) {
        errs.push(FieldError::invalid(field, k, CONFIG_MAP_KEY_MSG));
    }
    if let Some(m) = ch_dir_prefix(k) {
        errs.push(FieldError::invalid(field, k, m));
    }
    errs
}

/// `IsValidIP`.
pub fn ip(field: &str, v: &str) -> Vec<FieldError> {
    if v.parse::<std::net::IpAddr>().is_ok() {
        Vec::new()
    } else {
        vec![FieldError::invalid(field, v, "must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)")]
    }
}

/// `IsValidCIDR`.
pub fn cidr(field: &str, v: &str) -> Vec<FieldError> {
    let ok = v.split_once('/').is_some_and(|(addr, bits)| {
        match (addr.parse::<std::net::IpAddr>(), bits.parse::<u8>()) {
            (Ok(std::net::IpAddr::V4(_)), Ok(b)) => b <= 32,
            (Ok(std::net::IpAddr::V6(_)), Ok(b)) => b <= 128,
            _ => false,
        }
    });
    if ok {
        Vec::new()
    } else {
        vec![FieldError::invalid(field, v, "must be a valid CIDR value, (e.g. 10.9.8.0/24 or 2001:db8::/64)")]
    }
}

/// `ValidateNonSpecialIP` without the loopback rule: the `kubernetes` endpoints this
/// server bootstraps point at its advertise address, which is loopback in single-host
/// setups (upstream rejects 127.0.0.0/8 here).
pub fn endpoint_ip(field: &str, v: &str) -> Vec<FieldError> {
    let Ok(addr) = v.parse::<std::net::IpAddr>() else {
        return vec![FieldError::invalid(field, v, "must be a valid IP address")];
    };
    let mut errs = Vec::new();
    if addr.is_unspecified() {
        errs.push(FieldError::invalid(field, v, format!("may not be unspecified ({v})")));
    }
    let (link_local, link_local_mc) = match addr {
        std::net::IpAddr::V4(a) => (a.is_link_local(), a.octets()[..3] == [224, 0, 0]),
        std::net::IpAddr::V6(a) => {
            let s = a.segments();
            ((s[0] & 0xffc0) == 0xfe80, (s[0] & 0xff0f) == 0xff02)
        }
    };
    if link_local {
        errs.push(FieldError::invalid(
            field,
            v,
            "may not be in the link-local range (169.254.0.0/16, fe80::/10)",
        ));
    }
    if link_local_mc {
        errs.push(FieldError::invalid(
            field,
            v,
            "may not be in the link-local multicast range (224.0.0.0/24, ff02::/10)",
        ));
    }
    errs
}

/// An int-or-percent (`ValidatePositiveIntOrPercent` + `IsNotMoreThan100Percent` when
/// `max_100`).
pub fn int_or_percent(field: &str, v: &Value, max_100: bool) -> Vec<FieldError> {
    match v {
        Value::Null => Vec::new(),
        Value::Number(n) => nonnegative(field, &Value::from(n.as_i64().unwrap_or(-1))),
        Value::String(s) => match percent(s) {
            Some(p) if max_100 && p > 100 => {
                vec![FieldError::invalid(field, s, "must not be greater than 100%")]
            }
            Some(_) => Vec::new(),
            None => vec![FieldError::invalid(
                field,
                s,
                "a valid percent string must be a numeric string followed by an ending '%' (e.g. '1%',  or '93%', regex used for validation is '[0-9]+%')",
            )],
        },
        other => vec![FieldError::invalid(field, show(other), "must be an integer or percentage (e.g '5%')")],
    }
}

/// The number of a valid percent string (`[0-9]+%`).
pub fn percent(s: &str) -> Option<i64> {
    let digits = s.strip_suffix('%')?;
    if digits.is_empty() || !digits.chars().all(|c| c.is_ascii_digit()) {
        return None;
    }
    Some(digits.parse().unwrap_or(i64::MAX))
}

/// The value of an int-or-percent as a number (a percent's number), as upstream's
/// `getIntOrPercentValue`.
pub fn int_or_percent_value(v: &Value) -> i64 {
    match v {
        Value::String(s) => percent(s).unwrap_or(0),
        other => other.as_i64().unwrap_or(0),
    }
}

/// A label selector (`metav1.LabelSelector`): label keys/values and requirements.
pub fn label_selector(field: &str, sel: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if !sel.is_object() {
        return errs;
    }
    errs.extend(labels(&child(field, "matchLabels"), sel.get("matchLabels")));
    for (i, req) in sel["matchExpressions"].as_array().into_iter().flatten().enumerate() {
        let p = index(&child(field, "matchExpressions"), i);
        let values = req["values"].as_array().map(Vec::len).unwrap_or(0);
        match req["operator"].as_str().unwrap_or_default() {
            "In" | "NotIn" => {
                if values == 0 {
                    errs.push(FieldError::required(
                        child(&p, "values"),
                        "must be specified when `operator` is 'In' or 'NotIn'",
                    ));
                }
            }
            "Exists" | "DoesNotExist" => {
                if values > 0 {
                    errs.push(FieldError::forbidden(
                        child(&p, "values"),
                        "may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
                    ));
                }
            }
            op => errs.push(FieldError::invalid(child(&p, "operator"), op, "not a valid selector operator")),
        }
        errs.extend(qualified_name(&child(&p, "key"), req["key"].as_str().unwrap_or_default()));
        for (j, v) in req["values"].as_array().into_iter().flatten().enumerate() {
            errs.extend(label_value(&index(&child(&p, "values"), j), v.as_str().unwrap_or_default()));
        }
    }
    errs
}

/// Whether a label selector has no requirements (selects everything).
pub fn selector_is_empty(sel: &Value) -> bool {
    sel["matchLabels"].as_object().is_none_or(|m| m.is_empty())
        && sel["matchExpressions"].as_array().is_none_or(|a| a.is_empty())
}

/// Whether `labels` (an object, or null) satisfy a label selector.
pub fn selector_matches(sel: &Value, labels: &Value) -> bool {
    let get = |k: &str| labels.get(k).and_then(Value::as_str);
    if let Some(m) = sel["matchLabels"].as_object()
        && !m.iter().all(|(k, v)| get(k) == v.as_str())
    {
        return false;
    }
    sel["matchExpressions"].as_array().into_iter().flatten().all(|req| {
        let k = req["key"].as_str().unwrap_or_default();
        let values: Vec<&str> =
            req["values"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
        match req["operator"].as_str().unwrap_or_default() {
            "In" => get(k).is_some_and(|v| values.contains(&v)),
            "NotIn" => get(k).is_none_or(|v| !values.contains(&v)),
            "Exists" => get(k).is_some(),
            "DoesNotExist" => get(k).is_none(),
            _ => false,
        }
    })
}

/// Whether `labels` satisfy a map selector (`map[string]string`, as RCs and services
/// select).
pub fn map_selector_matches(sel: &Value, labels: &Value) -> bool {
    sel.as_object().into_iter().flatten().all(|(k, v)| labels.get(k).and_then(Value::as_str) == v.as_str())
}

// ---------------------------------------------------------------------------------------
// Quantities (`resource.Quantity`): parsed exactly to nano units, printed canonically.
// ---------------------------------------------------------------------------------------

/// How a quantity is written: the suffix family decides its canonical form.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QuantityFormat {
    BinarySI,
    DecimalSI,
    DecimalExponent,
}

/// A quantity in nano units (10^-9), rounded up past nano precision; `None` nanos when
/// it does not fit (such values are kept as written).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Quantity {
    pub nanos: Option<i128>,
    pub format: QuantityFormat,
}

pub const QUANTITY_MSG: &str =
    "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'";

fn pow10(e: u32) -> Option<i128> {
    10i128.checked_pow(e)
}

impl Quantity {
    pub fn parse(s: &str) -> Option<Self> {
        let s = s.trim();
        let (negative, rest) = match s.as_bytes().first()? {
            b'-' => (true, &s[1..]),
            b'+' => (false, &s[1..]),
            _ => (false, s),
        };
        let num_end = rest.find(|c: char| !c.is_ascii_digit() && c != '.').unwrap_or(rest.len());
        let (num, suffix) = rest.split_at(num_end);
        let (int_part, frac) = num.split_once('.').unwrap_or((num, ""));
        if frac.contains('.') || int_part.len() + frac.len() == 0 {
            return None;
        }
        let (exp10, exp2, format): (i64, u32, QuantityFormat) = match suffix {
            "" => (0, 0, QuantityFormat::DecimalSI),
            "n" => (-9, 0, QuantityFormat::DecimalSI),
            "u" => (-6, 0, QuantityFormat::DecimalSI),
            "m" => (-3, 0, QuantityFormat::DecimalSI),
            "k" => (3, 0, QuantityFormat::DecimalSI),
            "M" => (6, 0, QuantityFormat::DecimalSI),
            "G" => (9, 0, QuantityFormat::DecimalSI),
            "T" => (12, 0, QuantityFormat::DecimalSI),
            "P" => (15, 0, QuantityFormat::DecimalSI),
            "E" => (18, 0, QuantityFormat::DecimalSI),
            "Ki" => (0, 10, QuantityFormat::BinarySI),
            "Mi" => (0, 20, QuantityFormat::BinarySI),
            "Gi" => (0, 30, QuantityFormat::BinarySI),
            "Ti" => (0, 40, QuantityFormat::BinarySI),
            "Pi" => (0, 50, QuantityFormat::BinarySI),
            "Ei" => (0, 60, QuantityFormat::BinarySI),
            e if e.starts_with(['e', 'E']) => {
                let n = &e[1..];
                let digits = n.strip_prefix(['+', '-']).unwrap_or(n);
                if digits.is_empty() || !digits.chars().all(|c| c.is_ascii_digit()) {
                    return None;
                }
                (n.parse().ok()?, 0, QuantityFormat::DecimalExponent)
            }
            _ => return None,
        };
        // mantissa * 10^(exp10 - len(frac) + 9) * 2^exp2, in nano units.
        let digits = format!("{int_part}{frac}");
        let digits = digits.trim_start_matches('0');
        let scale = exp10 - frac.len() as i64 + 9;
        let nanos = (|| {
            let mut m: i128 = if digits.is_empty() { 0 } else { digits.parse().ok()? };
            m = m.checked_mul(1i128.checked_shl(exp2)?)?;
            if scale >= 0 {
                m.checked_mul(pow10(u32::try_from(scale).ok()?)?)
            } else {
                let d = pow10(u32::try_from(-scale).ok()?).unwrap_or(i128::MAX);
                Some(m / d + i128::from(m % d != 0))
            }
        })();
        Some(Self { nanos: nanos.map(|n| if negative { -n } else { n }), format })
    }

    /// Rounds up to milli precision (upstream's `SetDefaults_ResourceList`).
    pub fn round_up_to_milli(mut self) -> Self {
        if let Some(n) = self.nanos {
            let r = n.rem_euclid(1_000_000);
            if r != 0 {
                self.nanos = n.checked_add(1_000_000 - r);
            }
        }
        self
    }

    /// The canonical string (`Quantity.String()`): `1Gi` for `1024Mi`, `500m` for `0.5`.
    pub fn canonical(&self) -> Option<String> {
        let n = self.nanos?;
        if n == 0 {
            return Some("0".into());
        }
        let sign = if n < 0 { "-" } else { "" };
        let a = n.unsigned_abs();
        const NANO: u128 = 1_000_000_000;
        if self.format == QuantityFormat::BinarySI && a >= 1024 * NANO && a % NANO == 0 {
            let mut v = a / NANO;
            let mut k = 0;
            while k < 6 && v.is_multiple_of(1024) {
                v /= 1024;
                k += 1;
            }
            let suffix = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"][k];
            return Some(format!("{sign}{v}{suffix}"));
        }
        let max_e: i32 = if self.format == QuantityFormat::DecimalExponent { 27 } else { 18 };
        let mut e = max_e;
        while e > -9 {
            let d = 10u128.pow((e + 9) as u32);
            if a % d == 0 {
                break;
            }
            e -= 3;
        }
        let v = a / 10u128.pow((e + 9) as u32);
        let suffix = match (self.format, e) {
            (_, 0) => String::new(),
            (QuantityFormat::DecimalExponent, e) => format!("e{e}"),
            (_, -9) => "n".into(),
            (_, -6) => "u".into(),
            (_, -3) => "m".into(),
            (_, 3) => "k".into(),
            (_, 6) => "M".into(),
            (_, 9) => "G".into(),
            (_, 12) => "T".into(),
            (_, 15) => "P".into(),
            _ => "E".into(),
        };
        Some(format!("{sign}{v}{suffix}"))
    }
}

/// The canonical form of a quantity string, or the string itself when it does not parse
/// or fit.
pub fn canonical_quantity(s: &str) -> String {
    Quantity::parse(s).and_then(|q| q.canonical()).unwrap_or_else(|| s.to_string())
}

/// Rounds every quantity of a resource list up to milli precision and writes it
/// canonically (`SetDefaults_ResourceList` and the quantity serializer).
pub fn canonicalize_resource_list(list: &mut Value) {
    let Some(m) = list.as_object_mut() else { return };
    for v in m.values_mut() {
        if let Some(s) = v.as_str()
            && let Some(c) = Quantity::parse(s).map(Quantity::round_up_to_milli).and_then(|q| q.canonical())
        {
            *v = Value::String(c);
        }
    }
}

/// A quantity's nano value, or an error for an unparseable one.
pub fn quantity(field: &str, v: &Value) -> Result<Option<i128>, FieldError> {
    let s = match v {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        other => show(other),
    };
    Quantity::parse(&s).map(|q| q.nanos).ok_or_else(|| FieldError::invalid(field, s, QUANTITY_MSG))
}

/// `ValidateNonnegativeQuantity`, plus integer resources (`ValidateResourceQuantityValue`).
pub fn resource_quantity(resource: &str, field: &str, v: &Value) -> Vec<FieldError> {
    match quantity(field, v) {
        Err(e) => vec![e],
        Ok(Some(n)) if n < 0 => vec![FieldError::invalid(field, show(v), NONNEGATIVE_MSG)],
        Ok(Some(n)) if is_integer_resource(resource) && n % 1_000_000_000 != 0 => {
            vec![FieldError::invalid(field, show(v), "must be an integer")]
        }
        _ => Vec::new(),
    }
}

/// Resources counted in whole units (upstream's `IsIntegerResourceName`).
pub fn is_integer_resource(name: &str) -> bool {
    const STANDARD_INTEGER: &[&str] = &[
        "pods",
        "services",
        "replicationcontrollers",
        "resourcequotas",
        "secrets",
        "configmaps",
        "persistentvolumeclaims",
        "services.nodeports",
        "services.loadbalancers",
    ];
    // Extended resources (a domain prefix other than kubernetes.io) count in whole units.
    let extended = name.contains('/') && !name.contains("kubernetes.io/") && !name.starts_with("requests.");
    STANDARD_INTEGER.contains(&name) || extended
}

/// The standard resource names a container may request without a domain prefix.
pub fn is_standard_container_resource(name: &str) -> bool {
    matches!(name, "cpu" | "memory" | "ephemeral-storage") || name.starts_with("hugepages-")
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
        assert!(dns1035_label("n", "web-1").is_empty());
        assert_eq!(dns1035_label("n", "1web").len(), 1);
    }

    #[test]
    fn quantities_parse_exactly_and_print_canonically() {
        for (input, canonical) in [
            ("0.5", "500m"),
            ("1000m", "1"),
            ("1024Mi", "1Gi"),
            ("1536Mi", "1536Mi"),
            ("1.5Gi", "1536Mi"),
            ("100", "100"),
            ("12000", "12k"),
            ("1e3", "1e3"),
            ("0", "0"),
            ("-2", "-2"),
            ("512", "512"),
            ("0.1Ki", "102400m"),
        ] {
            assert_eq!(canonical_quantity(input), canonical, "{input}");
        }
        assert!(Quantity::parse("lots").is_none());
        assert!(Quantity::parse("1.2.3").is_none());
        assert!(Quantity::parse("5Q").is_none());
        let q = Quantity::parse("0.0001").unwrap().round_up_to_milli();
        assert_eq!(q.canonical().unwrap(), "1m");
        assert!(Quantity::parse("2").unwrap().nanos > Quantity::parse("1500m").unwrap().nanos);
        let mut list = serde_json::json!({ "cpu": "0.25", "memory": "2048Mi", "bad": "x" });
        canonicalize_resource_list(&mut list);
        assert_eq!(list, serde_json::json!({ "cpu": "250m", "memory": "2Gi", "bad": "x" }));
    }

    #[test]
    fn selectors() {
        let sel = serde_json::json!({
            "matchLabels": { "app": "web" },
            "matchExpressions": [{ "key": "tier", "operator": "In", "values": ["a", "b"] }, { "key": "x", "operator": "DoesNotExist" }],
        });
        assert!(selector_matches(&sel, &serde_json::json!({ "app": "web", "tier": "b" })));
        assert!(!selector_matches(&sel, &serde_json::json!({ "app": "web", "tier": "c" })));
        assert!(!selector_matches(&sel, &serde_json::json!({ "app": "web", "tier": "a", "x": "1" })));
        let bad = serde_json::json!({ "matchExpressions": [{ "key": "k", "operator": "Like" }, { "key": "k", "operator": "In" }] });
        let texts: Vec<String> =
            label_selector("spec.selector", &bad).iter().map(FieldError::to_text).collect();
        assert_eq!(
            texts,
            vec![
                "spec.selector.matchExpressions[0].operator: Invalid value: \"Like\": not a valid selector operator",
                "spec.selector.matchExpressions[1].values: Required value: must be specified when `operator` is 'In' or 'NotIn'",
            ]
        );
    }

    #[test]
    fn ports_keys_names() {
        assert!(port_name("p", "http").is_empty());
        assert_eq!(
            port_name("p", "HTTP")[0].detail,
            "must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)"
        );
        assert_eq!(port_name("p", "8080")[0].detail, "must contain at least one letter (a-z)");
        assert_eq!(port_num("p", 0)[0].detail, "must be between 1 and 65535, inclusive");
        assert!(env_var_name("e", "1-weird.NAME ok").is_empty());
        assert!(!env_var_name("e", "A=B").is_empty());
        assert!(config_map_key("k", "a.b-c_D").is_empty());
        assert_eq!(config_map_key("k", "..a")[0].detail, "must not start with '..'");
        assert!(!int_or_percent("f", &serde_json::json!("25"), true).is_empty());
        assert!(int_or_percent("f", &serde_json::json!("25%"), true).is_empty());
        assert!(endpoint_ip("ip", "127.0.0.1").is_empty());
        assert!(!endpoint_ip("ip", "169.254.1.1").is_empty());
        assert_eq!(finalizer_name("f", "custom").len(), 1);
        assert!(finalizer_name("f", "example.com/custom").is_empty());
    }
}

/// Upstream's `apiequality.Semantic.DeepEqual` on typed objects, for JSON: a field set to
/// its type's zero value (`false`, `0`, `""`, an empty list or map, null) equals the
/// field left out. A protobuf client writes Go's zero values (`stdinOnce: false`) that a
/// JSON client leaves out, and both mean the same object.
pub fn semantically_equal(a: &Value, b: &Value) -> bool {
    fn is_zero(v: &Value) -> bool {
        match v {
            Value::Null => true,
            Value::Bool(b) => !b,
            Value::Number(n) => n.as_f64() == Some(0.0),
            Value::String(s) => s.is_empty(),
            Value::Array(a) => a.is_empty(),
            Value::Object(o) => o.values().all(is_zero),
        }
    }
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let keys: std::collections::BTreeSet<&String> = x.keys().chain(y.keys()).collect();
            keys.into_iter().all(|k| match (x.get(k), y.get(k)) {
                (Some(p), Some(q)) => semantically_equal(p, q),
                (Some(p), None) | (None, Some(p)) => is_zero(p),
                (None, None) => true,
            })
        }
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| semantically_equal(p, q))
        }
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        _ => a == b || (is_zero(a) && is_zero(b)),
    }
}

#[cfg(test)]
mod semantic_tests {
    use serde_json::json;

    use super::semantically_equal;

    #[test]
    fn zero_values_equal_absent_fields() {
        let json_client = json!({"name": "d", "stdin": true, "resources": {}});
        let protobuf_client = json!({"name": "d", "stdin": true, "stdinOnce": false, "tty": false, "resources": {"limits": {}}});
        assert!(semantically_equal(&json_client, &protobuf_client));
        assert!(!semantically_equal(&json_client, &json!({"name": "d", "stdin": false})));
        assert!(!semantically_equal(&json!({"command": ["a"]}), &json!({"command": ["a", "b"]})));
        assert!(semantically_equal(&json!({"n": 1}), &json!({"n": 1.0})));
    }
}
