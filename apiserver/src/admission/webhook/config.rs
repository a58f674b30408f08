//! One webhook as the dispatchers use it (upstream's `webhook.WebhookAccessor`): read
//! once from a stored, defaulted configuration, with its TLS trust parsed ahead of the
//! calls.

use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use serde_json::Value;

use super::client;
use crate::registry::resources::admissionregistration::webhook_configuration::{
    DEFAULT_SERVICE_PORT, DEFAULT_TIMEOUT_SECONDS,
};

/// What a failed call (not a rejection) does to the request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailurePolicy {
    /// The request fails with 500 (the default).
    Fail,
    /// The webhook is skipped.
    Ignore,
}

/// One `rules[]` entry (upstream's `RuleWithOperations`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Rule {
    pub operations: Vec<String>,
    pub api_groups: Vec<String>,
    pub api_versions: Vec<String>,
    /// `res`, `res/sub`, `*`, `*/sub`, `res/*`, `*/*`.
    pub resources: Vec<String>,
    /// `*`, `Cluster` or `Namespaced`.
    pub scope: String,
}

/// Where the webhook listens.
#[derive(Clone, Debug, PartialEq)]
pub enum Endpoint {
    Url(url::Url),
    /// A Service, reached at one of its ready endpoints; its certificate must name
    /// `<name>.<namespace>.svc`.
    Service {
        namespace: String,
        name: String,
        path: String,
        port: u16,
    },
}

/// A webhook of a MutatingWebhookConfiguration or ValidatingWebhookConfiguration.
pub struct Webhook {
    /// `<configuration>/<name>/<index>`: tells webhooks apart across configurations
    /// (names are unique only within one), for reinvocation.
    pub uid: String,
    pub configuration: String,
    pub name: String,
    pub rules: Vec<Rule>,
    pub namespace_selector: Value,
    pub object_selector: Value,
    pub failure_policy: FailurePolicy,
    pub side_effects: String,
    pub timeout: Duration,
    pub review_versions: Vec<String>,
    /// `reinvocationPolicy: IfNeeded` (mutating webhooks only).
    pub reinvoke_if_needed: bool,
    /// Unusable client configurations (a URL that does not parse) fail at call time, as
    /// upstream's "could not get REST client", and so obey the failure policy.
    pub endpoint: Result<Endpoint, String>,
    pub tls: Result<Arc<rustls::ClientConfig>, String>,
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array().into_iter().flatten().filter_map(Value::as_str).map(str::to_string).collect()
}

/// Where a `clientConfig` (`url` or `service`) points.
pub(crate) fn endpoint(cc: &Value) -> Result<Endpoint, String> {
    if let Some(u) = cc.get("url").and_then(Value::as_str) {
        return url::Url::parse(u).map(Endpoint::Url).map_err(|e| format!("invalid webhook url {u:?}: {e}"));
    }
    let svc = cc.get("service").filter(|s| s.is_object()).ok_or("no url or service in clientConfig")?;
    let port = svc["port"].as_i64().unwrap_or(DEFAULT_SERVICE_PORT);
    Ok(Endpoint::Service {
        namespace: svc["namespace"].as_str().unwrap_or_default().to_string(),
        name: svc["name"].as_str().unwrap_or_default().to_string(),
        path: svc["path"].as_str().unwrap_or_default().to_string(),
        port: u16::try_from(port).map_err(|_| format!("invalid service port {port}"))?,
    })
}

/// A `clientConfig`'s `caBundle`, decoded (empty when it has none).
pub(crate) fn ca_bundle(cc: &Value) -> Result<Vec<u8>, String> {
    match cc.get("caBundle").and_then(Value::as_str) {
        None => Ok(Vec::new()),
        Some(b64) => base64::engine::general_purpose::STANDARD
            .decode(b64)
            .map_err(|e| format!("caBundle is not base64: {e}")),
    }
}

/// The webhooks of one stored configuration, in order. Fields are read with their
/// upstream defaults, so objects written before defaulting existed read the same.
pub fn compile(configuration: &Value) -> Vec<Arc<Webhook>> {
    let config_name = configuration["metadata"]["name"].as_str().unwrap_or_default();
    let hooks = configuration["webhooks"].as_array().map(Vec::as_slice).unwrap_or_default();
    hooks
        .iter()
        .enumerate()
        .map(|(i, h)| {
            let name = h["name"].as_str().unwrap_or_default().to_string();
            let cc = &h["clientConfig"];
            let rules = h["rules"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|r| Rule {
                    operations: strings(&r["operations"]),
                    api_groups: strings(&r["apiGroups"]),
                    api_versions: strings(&r["apiVersions"]),
                    resources: strings(&r["resources"]),
                    scope: r["scope"].as_str().unwrap_or("*").to_string(),
                })
                .collect();
            let timeout = h["timeoutSeconds"].as_i64().unwrap_or(DEFAULT_TIMEOUT_SECONDS).clamp(1, 30);
            Arc::new(Webhook {
                uid: format!("{config_name}/{name}/{i}"),
                configuration: config_name.to_string(),
                rules,
                namespace_selector: h.get("namespaceSelector").cloned().unwrap_or(Value::Null),
                object_selector: h.get("objectSelector").cloned().unwrap_or(Value::Null),
                failure_policy: if h["failurePolicy"] == "Ignore" {
                    FailurePolicy::Ignore
                } else {
                    FailurePolicy::Fail
                },
                side_effects: h["sideEffects"].as_str().unwrap_or_default().to_string(),
                timeout: Duration::from_secs(timeout as u64),
                review_versions: strings(&h["admissionReviewVersions"]),
                reinvoke_if_needed: h["reinvocationPolicy"] == "IfNeeded",
                endpoint: endpoint(cc),
                tls: ca_bundle(cc).and_then(|ca| client::tls_config(&ca)),
                name,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn reads_defaults_and_endpoints() {
        let c = json!({
            "metadata": { "name": "cfg" },
            "webhooks": [
                {
                    "name": "a.example.com",
                    "clientConfig": { "service": { "namespace": "ns", "name": "svc", "path": "/m" } },
                    "rules": [{ "operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"] }],
                    "failurePolicy": "Ignore",
                    "reinvocationPolicy": "IfNeeded",
                    "sideEffects": "None",
                    "admissionReviewVersions": ["v1"],
                },
                { "name": "b.example.com", "clientConfig": { "url": "https://h.example.com/v" }, "caBundle": "!!" },
                { "name": "c.example.com", "clientConfig": { "url": "https://h", "caBundle": "not base64!" } },
            ],
        });
        let hooks = compile(&c);
        assert_eq!(hooks.len(), 3);
        let a = &hooks[0];
        assert_eq!(a.uid, "cfg/a.example.com/0");
        assert_eq!(a.failure_policy, FailurePolicy::Ignore);
        assert!(a.reinvoke_if_needed);
        assert_eq!(a.timeout, Duration::from_secs(10));
        assert_eq!(a.rules[0].scope, "*");
        assert_eq!(
            a.endpoint,
            Ok(Endpoint::Service {
                namespace: "ns".into(),
                name: "svc".into(),
                path: "/m".into(),
                port: 443
            })
        );
        let b = &hooks[1];
        assert_eq!(b.failure_policy, FailurePolicy::Fail);
        assert!(matches!(&b.endpoint, Ok(Endpoint::Url(u)) if u.path() == "/v"));
        assert!(hooks[2].tls.as_ref().is_err_and(|e| e.contains("base64")));
    }
}
