//! MutatingWebhookConfigurations and ValidatingWebhookConfigurations (upstream's
//! `SetDefaults_{Mutating,Validating}Webhook`, `SetDefaults_Rule`,
//! `SetDefaults_ServiceReference` and `Validate{Mutating,Validating}WebhookConfiguration`).
//!
//! The two kinds differ only in `reinvocationPolicy`, which mutating webhooks have.
//!
//! `matchConditions` are CEL expressions; this server has no CEL evaluator, so a
//! configuration that sets them is refused rather than stored and silently ignored (a
//! webhook would otherwise be called for requests its conditions exclude).

use std::collections::HashSet;

use serde_json::{Map, Value, json};

use crate::errors::FieldError;
use crate::registry::resource::Hooks;
use crate::validation::{self as v, child, index};

pub struct WebhookConfigurationHooks {
    pub mutating: bool,
}

/// The side-effect classes a v1 webhook may declare (upstream's `noSideEffectClasses`).
pub const NO_SIDE_EFFECT_CLASSES: &[&str] = &["None", "NoneOnDryRun"];
/// The AdmissionReview versions this server can send (upstream's
/// `AcceptedAdmissionReviewVersions`).
pub const REVIEW_VERSIONS: &[&str] = &["v1", "v1beta1"];
/// `timeoutSeconds` when unset.
pub const DEFAULT_TIMEOUT_SECONDS: i64 = 10;
/// `clientConfig.service.port` when unset.
pub const DEFAULT_SERVICE_PORT: i64 = 443;

const FAILURE_POLICIES: &[&str] = &["Fail", "Ignore"];
const MATCH_POLICIES: &[&str] = &["Equivalent", "Exact"];
const REINVOCATION_POLICIES: &[&str] = &["IfNeeded", "Never"];
const OPERATIONS: &[&str] = &["*", "CONNECT", "CREATE", "DELETE", "UPDATE"];
const SCOPES: &[&str] = &["*", "Cluster", "Namespaced"];
const URL_FORM: &str = "; desired format: https://host[/path]";

impl Hooks for WebhookConfigurationHooks {
    fn default(&self, obj: &mut Value) {
        let Some(hooks) = obj.get_mut("webhooks").and_then(Value::as_array_mut) else { return };
        for hook in hooks.iter_mut().filter_map(Value::as_object_mut) {
            set_if_unset(hook, "failurePolicy", json!("Fail"));
            set_if_unset(hook, "matchPolicy", json!("Equivalent"));
            set_if_unset(hook, "namespaceSelector", json!({}));
            set_if_unset(hook, "objectSelector", json!({}));
            set_if_unset(hook, "timeoutSeconds", json!(DEFAULT_TIMEOUT_SECONDS));
            if self.mutating {
                set_if_unset(hook, "reinvocationPolicy", json!("Never"));
            }
            if let Some(rules) = hook.get_mut("rules").and_then(Value::as_array_mut) {
                for rule in rules.iter_mut().filter_map(Value::as_object_mut) {
                    set_if_unset(rule, "scope", json!("*"));
                }
            }
            if let Some(svc) =
                hook.get_mut("clientConfig").and_then(|c| c.get_mut("service")).and_then(Value::as_object_mut)
            {
                set_if_unset(svc, "port", json!(DEFAULT_SERVICE_PORT));
            }
        }
    }

    fn validate(&self, obj: &Value) -> Vec<FieldError> {
        let mut errs = Vec::new();
        let mut names = HashSet::new();
        for (i, hook) in obj["webhooks"].as_array().into_iter().flatten().enumerate() {
            let path = index("webhooks", i);
            errs.extend(validate_webhook(hook, &path, self.mutating));
            errs.extend(review_versions(
                &hook["admissionReviewVersions"],
                &child(&path, "admissionReviewVersions"),
            ));
            let name = hook["name"].as_str().unwrap_or_default();
            if !name.is_empty() && !names.insert(name) {
                errs.push(FieldError::duplicate(child(&path, "name"), name));
            }
        }
        errs
    }

    fn has_status(&self) -> bool {
        false
    }
}

/// Sets `key` when it is absent or null (a missing pointer field in Go).
fn set_if_unset(m: &mut Map<String, Value>, key: &str, value: Value) {
    if m.get(key).is_none_or(Value::is_null) {
        m.insert(key.to_string(), value);
    }
}

fn strings(v: &Value) -> Vec<&str> {
    v.as_array().into_iter().flatten().map(|s| s.as_str().unwrap_or_default()).collect()
}

/// A string list as Go's `%#v` prints a `[]string` in field errors.
fn go_list(items: &[&str]) -> String {
    let quoted: Vec<String> = items.iter().map(|s| format!("{s:?}")).collect();
    format!("[]string{{{}}}", quoted.join(", "))
}

fn validate_webhook(hook: &Value, path: &str, mutating: bool) -> Vec<FieldError> {
    let mut errs = fully_qualified_name(&child(path, "name"), hook["name"].as_str().unwrap_or_default());
    for (i, rule) in hook["rules"].as_array().into_iter().flatten().enumerate() {
        errs.extend(rule_with_operations(rule, &index(&child(path, "rules"), i)));
    }
    let one_of = |errs: &mut Vec<FieldError>, field: &str, allowed: &[&str]| {
        if let Some(val) = hook.get(field).and_then(Value::as_str)
            && !allowed.contains(&val)
        {
            errs.push(FieldError::not_supported(child(path, field), val, allowed));
        }
    };
    one_of(&mut errs, "failurePolicy", FAILURE_POLICIES);
    one_of(&mut errs, "matchPolicy", MATCH_POLICIES);
    match hook.get("sideEffects").and_then(Value::as_str) {
        None => errs.push(FieldError::required(
            child(path, "sideEffects"),
            format!("must specify one of {}", NO_SIDE_EFFECT_CLASSES.join(", ")),
        )),
        Some(s) if !NO_SIDE_EFFECT_CLASSES.contains(&s) => {
            errs.push(FieldError::not_supported(child(path, "sideEffects"), s, NO_SIDE_EFFECT_CLASSES));
        }
        Some(_) => {}
    }
    if let Some(t) = hook.get("timeoutSeconds").and_then(Value::as_i64)
        && !(1..=30).contains(&t)
    {
        errs.push(FieldError::invalid(
            child(path, "timeoutSeconds"),
            t,
            "the timeout value must be between 1 and 30 seconds",
        ));
    }
    for sel in ["namespaceSelector", "objectSelector"] {
        if let Some(s) = hook.get(sel) {
            errs.extend(v::label_selector(&child(path, sel), s));
        }
    }
    if mutating {
        one_of(&mut errs, "reinvocationPolicy", REINVOCATION_POLICIES);
    }
    errs.extend(client_config(&hook["clientConfig"], &child(path, "clientConfig")));
    if hook["matchConditions"].as_array().is_some_and(|a| !a.is_empty()) {
        errs.push(FieldError::forbidden(
            child(path, "matchConditions"),
            "matchConditions are not supported by this server: it cannot evaluate CEL expressions",
        ));
    }
    errs
}

/// Upstream's `IsFullyQualifiedName`: a DNS subdomain of at least three labels.
fn fully_qualified_name(field: &str, name: &str) -> Vec<FieldError> {
    if name.is_empty() {
        return vec![FieldError::required(field, "")];
    }
    let name = name.strip_suffix('.').unwrap_or(name);
    let sub = v::dns1123_subdomain(field, name);
    if !sub.is_empty() {
        let details: Vec<&str> = sub.iter().map(|e| e.detail.as_str()).collect();
        return vec![FieldError::invalid(field, name, details.join(","))];
    }
    if name.split('.').count() < 3 {
        return vec![FieldError::invalid(
            field,
            name,
            "should be a domain with at least three segments separated by dots",
        )];
    }
    Vec::new()
}

fn rule_with_operations(rule: &Value, path: &str) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let ops = strings(&rule["operations"]);
    let ops_path = child(path, "operations");
    if ops.is_empty() {
        errs.push(FieldError::required(&ops_path, ""));
    }
    if ops.len() > 1 && ops.contains(&"*") {
        let shown = go_list(&ops).replacen("[]string", "[]admissionregistration.OperationType", 1);
        errs.push(FieldError::invalid(
            &ops_path,
            shown,
            "if '*' is present, must not specify other operations",
        ));
    }
    for (i, op) in ops.iter().enumerate() {
        if !OPERATIONS.contains(op) {
            errs.push(FieldError::not_supported(index(&ops_path, i), op, OPERATIONS));
        }
    }
    errs.extend(validate_rule(rule, path));
    errs
}

/// Upstream's `validateRule` with subresources allowed.
fn validate_rule(rule: &Value, path: &str) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let groups = strings(&rule["apiGroups"]);
    if groups.is_empty() {
        errs.push(FieldError::required(child(path, "apiGroups"), ""));
    }
    if groups.len() > 1 && groups.contains(&"*") {
        errs.push(FieldError::invalid(
            child(path, "apiGroups"),
            go_list(&groups),
            "if '*' is present, must not specify other API groups",
        ));
    }
    let versions = strings(&rule["apiVersions"]);
    if versions.is_empty() {
        errs.push(FieldError::required(child(path, "apiVersions"), ""));
    }
    if versions.len() > 1 && versions.contains(&"*") {
        errs.push(FieldError::invalid(
            child(path, "apiVersions"),
            go_list(&versions),
            "if '*' is present, must not specify other API versions",
        ));
    }
    for (i, version) in versions.iter().enumerate() {
        if version.is_empty() {
            errs.push(FieldError::required(index(&child(path, "apiVersions"), i), ""));
        }
    }
    errs.extend(resources(&strings(&rule["resources"]), &child(path, "resources")));
    if let Some(scope) = rule.get("scope").and_then(Value::as_str)
        && !SCOPES.contains(&scope)
    {
        errs.push(FieldError::not_supported(child(path, "scope"), scope, SCOPES));
    }
    errs
}

/// Upstream's `validateResources`: `res`, `res/sub`, `*`, `*/sub`, `res/*` and `*/*`,
/// without a wildcard overlapping an explicit entry.
fn resources(list: &[&str], path: &str) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if list.is_empty() {
        errs.push(FieldError::required(path, ""));
    }
    let mut res_with_wildcard_sub = HashSet::new();
    let mut sub_with_wildcard_res = HashSet::new();
    let (mut double_wildcard, mut single_wildcard, mut without_sub) = (false, false, false);
    for (i, res_sub) in list.iter().enumerate() {
        if res_sub.is_empty() {
            errs.push(FieldError::required(index(path, i), ""));
            continue;
        }
        double_wildcard |= *res_sub == "*/*";
        single_wildcard |= *res_sub == "*";
        let Some((res, sub)) = res_sub.split_once('/') else {
            // As upstream: the last entry without a subresource decides.
            without_sub = *res_sub != "*";
            continue;
        };
        if res_with_wildcard_sub.contains(res) {
            errs.push(FieldError::invalid(
                index(path, i),
                res_sub,
                format!("if '{res}/*' is present, must not specify {res_sub}"),
            ));
        }
        if sub_with_wildcard_res.contains(sub) {
            errs.push(FieldError::invalid(
                index(path, i),
                res_sub,
                format!("if '*/{sub}' is present, must not specify {res_sub}"),
            ));
        }
        if sub == "*" {
            res_with_wildcard_sub.insert(res);
        }
        if res == "*" {
            sub_with_wildcard_res.insert(sub);
        }
    }
    if list.len() > 1 && double_wildcard {
        errs.push(FieldError::invalid(
            path,
            go_list(list),
            "if '*/*' is present, must not specify other resources",
        ));
    }
    if single_wildcard && without_sub {
        errs.push(FieldError::invalid(
            path,
            go_list(list),
            "if '*' is present, must not specify other resources without subresources",
        ));
    }
    errs
}

fn review_versions(versions: &Value, path: &str) -> Vec<FieldError> {
    let list = strings(versions);
    if list.is_empty() {
        return vec![FieldError::required(
            path,
            format!("must specify one of {}", REVIEW_VERSIONS.join(", ")),
        )];
    }
    let mut errs = Vec::new();
    let mut seen = HashSet::new();
    for (i, version) in list.iter().enumerate() {
        if !seen.insert(*version) {
            errs.push(FieldError::invalid(index(path, i), version, "duplicate version"));
            continue;
        }
        errs.extend(v::dns1035_label(&index(path, i), version));
    }
    if !list.iter().any(|v| REVIEW_VERSIONS.contains(v)) {
        errs.push(FieldError::invalid(
            path,
            go_list(&list),
            format!("must include at least one of {}", REVIEW_VERSIONS.join(", ")),
        ));
    }
    errs
}

fn client_config(cc: &Value, path: &str) -> Vec<FieldError> {
    let url = cc.get("url").and_then(Value::as_str);
    let service = cc.get("service").filter(|s| s.is_object());
    match (url, service) {
        (Some(url), None) => webhook_url(&child(path, "url"), url),
        (None, Some(svc)) => webhook_service(&child(path, "service"), svc),
        _ => vec![FieldError::required(path, "exactly one of url or service is required")],
    }
}

/// Upstream's `ValidateWebhookURL` with https forced.
pub fn webhook_url(field: &str, raw: &str) -> Vec<FieldError> {
    let u = match url::Url::parse(raw) {
        Ok(u) => u,
        Err(e) => {
            return vec![FieldError::required(field, format!("url must be a valid URL: {e}{URL_FORM}"))];
        }
    };
    let mut errs = Vec::new();
    if u.scheme() != "https" {
        errs.push(FieldError::invalid(
            field,
            u.scheme(),
            format!("'https' is the only allowed URL scheme{URL_FORM}"),
        ));
    }
    let host = u.host_str().unwrap_or_default();
    if host.is_empty() {
        errs.push(FieldError::invalid(field, host, format!("host must be specified{URL_FORM}")));
    }
    if !u.username().is_empty() || u.password().is_some() {
        let user = match u.password() {
            Some(p) => format!("{}:{p}", u.username()),
            None => u.username().to_string(),
        };
        errs.push(FieldError::invalid(field, user, "user information is not permitted in the URL"));
    }
    if let Some(f) = u.fragment().filter(|f| !f.is_empty()) {
        errs.push(FieldError::invalid(field, f, "fragments are not permitted in the URL"));
    }
    if let Some(q) = u.query().filter(|q| !q.is_empty()) {
        errs.push(FieldError::invalid(field, q, "query parameters are not permitted in the URL"));
    }
    errs
}

/// Upstream's `ValidateWebhookService`.
fn webhook_service(path: &str, svc: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if svc["name"].as_str().unwrap_or_default().is_empty() {
        errs.push(FieldError::required(child(path, "name"), "service name is required"));
    }
    if svc["namespace"].as_str().unwrap_or_default().is_empty() {
        errs.push(FieldError::required(child(path, "namespace"), "service namespace is required"));
    }
    let port = svc["port"].as_i64().unwrap_or(DEFAULT_SERVICE_PORT);
    if !(1..=65535).contains(&port) {
        errs.push(FieldError::invalid(
            child(path, "port"),
            port,
            "port is not valid: must be between 1 and 65535, inclusive",
        ));
    }
    let Some(url_path) = svc.get("path").and_then(Value::as_str) else { return errs };
    let field = child(path, "path");
    if url_path.is_empty() || url_path == "/" {
        return errs;
    }
    if url_path == "//" {
        errs.push(FieldError::invalid(&field, url_path, "segment[0] may not be empty"));
        return errs;
    }
    if !url_path.starts_with('/') {
        errs.push(FieldError::invalid(&field, url_path, "must start with a '/'"));
    }
    // As upstream: the first character is dropped whatever it is.
    let rest = url_path.get(1..).unwrap_or_default();
    let rest = rest.strip_suffix('/').unwrap_or(rest);
    for (i, step) in rest.split('/').enumerate() {
        if step.is_empty() {
            errs.push(FieldError::invalid(&field, url_path, format!("segment[{i}] may not be empty")));
            continue;
        }
        for e in v::dns1123_subdomain(&field, step) {
            errs.push(FieldError::invalid(&field, url_path, format!("segment[{i}]: {}", e.detail)));
        }
    }
    errs
}

#[cfg(test)]
mod tests {
    use super::*;

    fn texts(errs: Vec<FieldError>) -> Vec<String> {
        errs.iter().map(FieldError::to_text).collect()
    }

    fn hook() -> Value {
        json!({
            "name": "pods.policy.example.com",
            "clientConfig": { "service": { "namespace": "ns", "name": "svc" } },
            "rules": [{
                "operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"],
            }],
            "sideEffects": "None",
            "admissionReviewVersions": ["v1"],
        })
    }

    fn config(hooks: Vec<Value>) -> Value {
        json!({ "metadata": { "name": "c" }, "webhooks": hooks })
    }

    #[test]
    fn defaults() {
        let mut c = config(vec![hook()]);
        WebhookConfigurationHooks { mutating: true }.default(&mut c);
        let h = &c["webhooks"][0];
        assert_eq!(h["failurePolicy"], "Fail");
        assert_eq!(h["matchPolicy"], "Equivalent");
        assert_eq!(h["namespaceSelector"], json!({}));
        assert_eq!(h["objectSelector"], json!({}));
        assert_eq!(h["timeoutSeconds"], 10);
        assert_eq!(h["reinvocationPolicy"], "Never");
        assert_eq!(h["rules"][0]["scope"], "*");
        assert_eq!(h["clientConfig"]["service"]["port"], 443);
        let mut c = config(vec![hook()]);
        WebhookConfigurationHooks { mutating: false }.default(&mut c);
        assert!(c["webhooks"][0].get("reinvocationPolicy").is_none());
        // No webhooks: nothing is added.
        let mut empty = json!({ "metadata": { "name": "c" } });
        WebhookConfigurationHooks { mutating: true }.default(&mut empty);
        assert_eq!(empty, json!({ "metadata": { "name": "c" } }));
    }

    #[test]
    fn valid_configuration_passes() {
        let hooks = WebhookConfigurationHooks { mutating: true };
        let mut c = config(vec![hook()]);
        hooks.default(&mut c);
        assert_eq!(texts(hooks.validate(&c)), Vec::<String>::new());
    }

    #[test]
    fn webhook_errors() {
        let hooks = WebhookConfigurationHooks { mutating: true };
        let mut bad = hook();
        bad["name"] = json!("short.name");
        bad["sideEffects"] = json!("Some");
        bad["timeoutSeconds"] = json!(31);
        bad["failurePolicy"] = json!("Sometimes");
        bad["reinvocationPolicy"] = json!("Always");
        bad["admissionReviewVersions"] = json!(["v2"]);
        bad["matchConditions"] = json!([{ "name": "x", "expression": "true" }]);
        let mut dup = hook();
        dup["sideEffects"] = json!(null);
        dup.as_object_mut().unwrap().remove("sideEffects");
        dup["clientConfig"] = json!({ "url": "http://u:p@host/x?y=1#z" });
        dup["admissionReviewVersions"] = json!([]);
        let mut third = hook();
        third["clientConfig"] = json!({});
        third["rules"] = json!([{
            "operations": ["*", "CREATE", "PATCH"], "apiGroups": [], "apiVersions": ["*", "v1"],
            "resources": ["*", "pods", "*/*"], "scope": "Everywhere",
        }]);
        let errs = texts(hooks.validate(&config(vec![bad, dup, third])));
        assert_eq!(
            errs,
            vec![
                "webhooks[0].name: Invalid value: \"short.name\": should be a domain with at least three segments separated by dots",
                "webhooks[0].failurePolicy: Unsupported value: \"Sometimes\": supported values: \"Fail\", \"Ignore\"",
                "webhooks[0].sideEffects: Unsupported value: \"Some\": supported values: \"None\", \"NoneOnDryRun\"",
                "webhooks[0].timeoutSeconds: Invalid value: 31: the timeout value must be between 1 and 30 seconds",
                "webhooks[0].reinvocationPolicy: Unsupported value: \"Always\": supported values: \"IfNeeded\", \"Never\"",
                "webhooks[0].matchConditions: Forbidden: matchConditions are not supported by this server: it cannot evaluate CEL expressions",
                "webhooks[0].admissionReviewVersions: Invalid value: []string{\"v2\"}: must include at least one of v1, v1beta1",
                "webhooks[1].sideEffects: Required value: must specify one of None, NoneOnDryRun",
                "webhooks[1].clientConfig.url: Invalid value: \"http\": 'https' is the only allowed URL scheme; desired format: https://host[/path]",
                "webhooks[1].clientConfig.url: Invalid value: \"u:p\": user information is not permitted in the URL",
                "webhooks[1].clientConfig.url: Invalid value: \"z\": fragments are not permitted in the URL",
                "webhooks[1].clientConfig.url: Invalid value: \"y=1\": query parameters are not permitted in the URL",
                "webhooks[1].admissionReviewVersions: Required value: must specify one of v1, v1beta1",
                "webhooks[2].rules[0].operations: Invalid value: []admissionregistration.OperationType{\"*\", \"CREATE\", \"PATCH\"}: if '*' is present, must not specify other operations",
                "webhooks[2].rules[0].operations[2]: Unsupported value: \"PATCH\": supported values: \"*\", \"CONNECT\", \"CREATE\", \"DELETE\", \"UPDATE\"",
                "webhooks[2].rules[0].apiGroups: Required value",
                "webhooks[2].rules[0].apiVersions: Invalid value: []string{\"*\", \"v1\"}: if '*' is present, must not specify other API versions",
                "webhooks[2].rules[0].resources: Invalid value: []string{\"*\", \"pods\", \"*/*\"}: if '*/*' is present, must not specify other resources",
                "webhooks[2].rules[0].resources: Invalid value: []string{\"*\", \"pods\", \"*/*\"}: if '*' is present, must not specify other resources without subresources",
                "webhooks[2].rules[0].scope: Unsupported value: \"Everywhere\": supported values: \"*\", \"Cluster\", \"Namespaced\"",
                "webhooks[2].clientConfig: Required value: exactly one of url or service is required",
                "webhooks[2].name: Duplicate value: \"pods.policy.example.com\"",
            ]
        );
    }

    /// What `kubectl apply -f` of a ValidatingWebhookConfiguration goes through: the
    /// typed decode (YAML arrives as JSON), defaulting and validation, and the protobuf
    /// form clients may ask for (the OpenAPI documents are checked for every resource in
    /// `openapi::tests`).
    #[test]
    fn apply_of_a_yaml_configuration_decodes() {
        let yaml = r#"
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata:
  name: pod-policy.example.com
webhooks:
- name: pod-policy.example.com
  rules:
  - apiGroups: [""]
    apiVersions: ["v1"]
    operations: ["CREATE"]
    resources: ["pods"]
    scope: Namespaced
  clientConfig:
    service:
      namespace: webhook-namespace
      name: webhook-service
    caBundle: LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCg==
  admissionReviewVersions: ["v1"]
  sideEffects: None
  timeoutSeconds: 5
"#;
        let doc: Value = serde_yaml::from_str(yaml).unwrap();
        let resources = super::super::resources();
        let res = resources.iter().find(|r| r.info.kind == "ValidatingWebhookConfiguration").unwrap();
        assert_eq!(res.info.plural, "validatingwebhookconfigurations");
        assert!(!res.info.namespaced);
        let mut obj = (res.normalize)(doc).unwrap();
        res.hooks.default(&mut obj);
        assert!(res.hooks.validate(&obj).is_empty(), "{:?}", res.hooks.validate(&obj));
        assert_eq!(obj["webhooks"][0]["clientConfig"]["service"]["port"], 443);
        assert_eq!(obj["webhooks"][0]["failurePolicy"], "Fail");
        let body = crate::protobuf::encode(&obj).expect("a protobuf form");
        assert_eq!(crate::protobuf::decode(&body).unwrap(), obj);
    }

    #[test]
    fn services_and_resources() {
        let svc = json!({ "namespace": "", "name": "s", "port": 0, "path": "/ok/Bad//x/" });
        assert_eq!(
            texts(webhook_service("s", &svc)),
            vec![
                "s.namespace: Required value: service namespace is required",
                "s.port: Invalid value: 0: port is not valid: must be between 1 and 65535, inclusive",
                "s.path: Invalid value: \"/ok/Bad//x/\": segment[1]: a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')",
                "s.path: Invalid value: \"/ok/Bad//x/\": segment[2] may not be empty",
            ]
        );
        assert!(webhook_service("s", &json!({ "namespace": "n", "name": "s", "path": "/a/b" })).is_empty());
        assert_eq!(
            texts(resources(&["pods/*", "pods/status", "*/scale", "deployments/scale"], "r")),
            vec![
                "r[1]: Invalid value: \"pods/status\": if 'pods/*' is present, must not specify pods/status",
                "r[3]: Invalid value: \"deployments/scale\": if '*/scale' is present, must not specify deployments/scale",
            ]
        );
        assert!(resources(&["*", "pods/status"], "r").is_empty());
        assert!(webhook_url("u", "https://hook.example.com:8443/validate").is_empty());
        assert!(fully_qualified_name("n", "a.b.c.").is_empty());
    }
}
