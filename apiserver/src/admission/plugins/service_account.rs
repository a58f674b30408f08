//! ServiceAccount (upstream's `plugin/pkg/admission/serviceaccount`): a new pod runs as a
//! service account that exists (`default` unless it names one), gets that account's image
//! pull secrets when it has none, and unless it or the account opts out, a projected
//! volume with a bound token, the cluster CA and its namespace, mounted in every container
//! at `/var/run/secrets/kubernetes.io/serviceaccount`.
//!
//! Mirror pods (the kubelet's copies of static pods) are never changed, and may not use
//! service accounts or secrets at all.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use super::Context;
use crate::admission::{Attributes, Operation, Plugin, forbidden, lookup};
use crate::errors::ApiResult;
use crate::registry::store::Store;

pub const DEFAULT_SERVICE_ACCOUNT: &str = "default";
pub const MOUNT_PATH: &str = "/var/run/secrets/kubernetes.io/serviceaccount";
const VOLUME_PREFIX: &str = "kube-api-access-";
const MIRROR_ANNOTATION: &str = "kubernetes.io/config.mirror";
const ENFORCE_MOUNTABLE_SECRETS: &str = "kubernetes.io/enforce-mountable-secrets";
/// The bound token's lifetime: an hour and seven seconds, the value the token issuer
/// recognises as "admission's token" (it extends it and warns when it is used late).
const TOKEN_EXPIRATION_SECONDS: i64 = 3607;
/// Characters of generated name suffixes (upstream's `SimpleNameGenerator`).
const NAME_CHARS: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

pub struct ServiceAccount {
    service_accounts: Arc<Store>,
}

impl ServiceAccount {
    pub fn new(ctx: &Context<'_>) -> Result<Self, String> {
        Ok(Self { service_accounts: lookup::store(ctx.registry, "", "v1", "serviceaccounts")? })
    }

    /// The service account, from the cache, else from etcd; the `default` account is
    /// retried for a while, as its controller may be creating it right now.
    async fn service_account(&self, attrs: &Attributes<'_>, ns: &str, name: &str) -> ApiResult<Value> {
        let attempts = if name == DEFAULT_SERVICE_ACCOUNT { 10 } else { 1 };
        if let Ok(sa) = self.service_accounts.get(Some(ns), name, Some(0)).await {
            return Ok(sa);
        }
        let interval = Duration::from_millis(100 + rand::random_range(0..100));
        for attempt in 0..attempts {
            if attempt > 0 {
                tokio::time::sleep(interval).await;
            }
            match self.service_accounts.get_fresh(Some(ns), name).await {
                Ok((sa, _)) => return Ok(sa),
                Err(e) if e.is_not_found() => {}
                Err(e) => {
                    return Err(forbidden(
                        attrs,
                        format!("error looking up service account {ns}/{name}: {}", e.message),
                    ));
                }
            }
        }
        Err(forbidden(
            attrs,
            format!("error looking up service account {ns}/{name}: serviceaccount \"{name}\" not found"),
        ))
    }
}

fn applies(attrs: &Attributes<'_>) -> bool {
    attrs.is("", "pods") && attrs.operation == Operation::Create && attrs.object.is_some()
}

pub fn is_mirror(pod: &Value) -> bool {
    pod["metadata"]["annotations"].get(MIRROR_ANNOTATION).is_some()
}

/// A generated name: `prefix` and five random characters.
pub fn generate_name(prefix: &str) -> String {
    let suffix: String =
        (0..5).map(|_| NAME_CHARS[rand::random_range(0..NAME_CHARS.len())] as char).collect();
    format!("{prefix}{suffix}")
}

/// The projected volume with the pod's token, the cluster CA and its namespace.
pub fn token_volume(name: &str) -> Value {
    json!({
        "name": name,
        "projected": {
            "defaultMode": 420,
            "sources": [
                { "serviceAccountToken": { "expirationSeconds": TOKEN_EXPIRATION_SECONDS, "path": "token" } },
                { "configMap": { "name": "kube-root-ca.crt", "items": [{ "key": "ca.crt", "path": "ca.crt" }] } },
                { "downwardAPI": { "items": [{ "path": "namespace", "fieldRef": { "apiVersion": "v1", "fieldPath": "metadata.namespace" } }] } },
            ],
        },
    })
}

/// Whether the token is mounted: the pod's choice, else the account's, else yes.
fn automount(sa: &Value, pod: &Value) -> bool {
    pod["spec"]["automountServiceAccountToken"]
        .as_bool()
        .or_else(|| sa["automountServiceAccountToken"].as_bool())
        .unwrap_or(true)
}

/// Adds the token volume (or reuses one already there) and mounts it in every container
/// and init container that has nothing mounted at the service account path.
pub fn mount_token(spec: &mut Value, volume_name: impl FnOnce() -> String) {
    let existing = spec["volumes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|v| v["name"].as_str())
        .find(|n| n.starts_with(VOLUME_PREFIX))
        .map(str::to_string);
    let name = existing.clone().unwrap_or_else(volume_name);
    let mount = json!({ "name": name, "readOnly": true, "mountPath": MOUNT_PATH });
    let mut needed = false;
    for list in ["initContainers", "containers"] {
        for c in spec.get_mut(list).and_then(Value::as_array_mut).into_iter().flatten() {
            let mounted =
                c["volumeMounts"].as_array().into_iter().flatten().any(|m| m["mountPath"] == MOUNT_PATH);
            if mounted {
                continue;
            }
            if !c["volumeMounts"].is_array() {
                c["volumeMounts"] = json!([]);
            }
            if let Some(mounts) = c["volumeMounts"].as_array_mut() {
                mounts.push(mount.clone());
            }
            needed = true;
        }
    }
    if existing.is_none() && needed {
        if !spec["volumes"].is_array() {
            spec["volumes"] = json!([]);
        }
        if let Some(volumes) = spec["volumes"].as_array_mut() {
            volumes.push(token_volume(&name));
        }
    }
}

/// Names of the secrets a pod refers to anywhere (upstream's `VisitPodSecretNames` over
/// all containers).
pub fn secret_names(spec: &Value) -> Vec<String> {
    let mut out = Vec::new();
    let mut push = |v: &Value| {
        if let Some(n) = v.as_str() {
            out.push(n.to_string());
        }
    };
    for s in spec["imagePullSecrets"].as_array().into_iter().flatten() {
        push(&s["name"]);
    }
    for list in ["initContainers", "containers", "ephemeralContainers"] {
        for c in spec[list].as_array().into_iter().flatten() {
            for e in c["envFrom"].as_array().into_iter().flatten() {
                push(&e["secretRef"]["name"]);
            }
            for e in c["env"].as_array().into_iter().flatten() {
                push(&e["valueFrom"]["secretKeyRef"]["name"]);
            }
        }
    }
    for v in spec["volumes"].as_array().into_iter().flatten() {
        push(&v["secret"]["secretName"]);
        push(&v["azureFile"]["secretName"]);
        for source in ["cephfs", "cinder", "flexVolume", "rbd", "scaleIO", "iscsi", "storageos"] {
            push(&v[source]["secretRef"]["name"]);
        }
        push(&v["csi"]["nodePublishSecretRef"]["name"]);
        for p in v["projected"]["sources"].as_array().into_iter().flatten() {
            push(&p["secret"]["name"]);
        }
    }
    out
}

/// Whether a pod uses a service account token projection.
fn projects_token(spec: &Value) -> bool {
    spec["volumes"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|v| v["projected"]["sources"].as_array().into_iter().flatten())
        .any(|s| s["serviceAccountToken"].is_object())
}

/// The refusal of a mirror pod that refers to API objects, if it does.
pub fn mirror_pod_problem(pod: &Value) -> Option<&'static str> {
    let spec = &pod["spec"];
    if spec["serviceAccountName"].as_str().is_some_and(|s| !s.is_empty()) {
        return Some("a mirror pod may not reference service accounts");
    }
    if !secret_names(spec).is_empty() {
        return Some("a mirror pod may not reference secrets");
    }
    if projects_token(spec) {
        return Some("a mirror pod may not use ServiceAccountToken volume projections");
    }
    None
}

/// With `kubernetes.io/enforce-mountable-secrets: "true"` on the account, the secrets a pod
/// uses must be ones the account lists.
fn limit_secret_references(sa: &Value, spec: &Value) -> Option<String> {
    let sa_name = sa["metadata"]["name"].as_str().unwrap_or_default();
    let names = |list: &Value| -> BTreeSet<String> {
        list.as_array().into_iter().flatten().filter_map(|s| s["name"].as_str().map(str::to_string)).collect()
    };
    let mountable = names(&sa["secrets"]);
    for v in spec["volumes"].as_array().into_iter().flatten() {
        if let Some(secret) = v["secret"]["secretName"].as_str()
            && !mountable.contains(secret)
        {
            return Some(format!(
                "volume with secret.secretName=\"{secret}\" is not allowed because service account {sa_name} does not reference that secret"
            ));
        }
    }
    for (list, what) in [("initContainers", "init container"), ("containers", "container")] {
        for c in spec[list].as_array().into_iter().flatten() {
            for e in c["env"].as_array().into_iter().flatten() {
                if let Some(secret) = e["valueFrom"]["secretKeyRef"]["name"].as_str()
                    && !mountable.contains(secret)
                {
                    return Some(format!(
                        "{what} {} with envVar {} referencing secret.secretName=\"{secret}\" is not allowed because service account {sa_name} does not reference that secret",
                        c["name"].as_str().unwrap_or_default(),
                        e["name"].as_str().unwrap_or_default(),
                    ));
                }
            }
        }
    }
    let pull = names(&sa["imagePullSecrets"]);
    for (i, s) in spec["imagePullSecrets"].as_array().into_iter().flatten().enumerate() {
        let name = s["name"].as_str().unwrap_or_default();
        if !pull.contains(name) {
            return Some(format!(
                "imagePullSecrets[{i}].name=\"{name}\" is not allowed because service account {sa_name} does not reference that imagePullSecret"
            ));
        }
    }
    None
}

#[async_trait::async_trait]
impl Plugin for ServiceAccount {
    fn name(&self) -> &'static str {
        "ServiceAccount"
    }

    async fn admit(&self, attrs: &mut Attributes<'_>) -> ApiResult<()> {
        if !applies(attrs) {
            return Ok(());
        }
        let Some(pod) = attrs.object.as_ref() else { return Ok(()) };
        if is_mirror(pod) {
            return self.validate(attrs).await;
        }
        let ns = attrs.namespace.unwrap_or_default().to_string();
        let name = match pod["spec"]["serviceAccountName"].as_str().filter(|s| !s.is_empty()) {
            Some(n) => n.to_string(),
            None => DEFAULT_SERVICE_ACCOUNT.to_string(),
        };
        let sa = self.service_account(attrs, &ns, &name).await?;
        let Some(pod) = attrs.object.as_mut() else { return Ok(()) };
        pod["spec"]["serviceAccountName"] = json!(name);
        if automount(&sa, pod) {
            mount_token(&mut pod["spec"], || generate_name(VOLUME_PREFIX));
        }
        let has_pull_secrets = pod["spec"]["imagePullSecrets"].as_array().is_some_and(|a| !a.is_empty());
        if let Some(secrets) =
            sa["imagePullSecrets"].as_array().filter(|a| !a.is_empty() && !has_pull_secrets)
        {
            let refs: Vec<Value> = secrets.iter().map(|s| json!({ "name": s["name"] })).collect();
            pod["spec"]["imagePullSecrets"] = Value::Array(refs);
        }
        Ok(())
    }

    async fn validate(&self, attrs: &Attributes<'_>) -> ApiResult<()> {
        if !applies(attrs) {
            return Ok(());
        }
        let Some(pod) = &attrs.object else { return Ok(()) };
        if is_mirror(pod) {
            return match mirror_pod_problem(pod) {
                Some(problem) => Err(forbidden(attrs, problem)),
                None => Ok(()),
            };
        }
        let ns = attrs.namespace.unwrap_or_default();
        let name = pod["spec"]["serviceAccountName"].as_str().unwrap_or_default();
        let sa = self.service_account(attrs, ns, name).await?;
        let enforce = sa["metadata"]["annotations"][ENFORCE_MOUNTABLE_SECRETS]
            .as_str()
            .is_some_and(|v| matches!(v, "1" | "t" | "T" | "true" | "TRUE" | "True"));
        if enforce && let Some(problem) = limit_secret_references(&sa, &pod["spec"]) {
            return Err(forbidden(attrs, problem));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_volume_shape_and_mounts() {
        let mut spec = json!({
            "initContainers": [{ "name": "init" }],
            "containers": [
                { "name": "a" },
                { "name": "b", "volumeMounts": [{ "name": "mine", "mountPath": MOUNT_PATH }] },
            ],
        });
        mount_token(&mut spec, || generate_name(VOLUME_PREFIX));
        let vol = &spec["volumes"][0];
        let name = vol["name"].as_str().unwrap();
        assert!(name.starts_with("kube-api-access-") && name.len() == "kube-api-access-".len() + 5);
        assert!(name["kube-api-access-".len()..].bytes().all(|b| NAME_CHARS.contains(&b)));
        assert_eq!(vol["projected"]["defaultMode"], 420);
        let sources = &vol["projected"]["sources"];
        assert_eq!(sources[0]["serviceAccountToken"], json!({ "expirationSeconds": 3607, "path": "token" }));
        assert_eq!(sources[1]["configMap"]["name"], "kube-root-ca.crt");
        assert_eq!(sources[1]["configMap"]["items"], json!([{ "key": "ca.crt", "path": "ca.crt" }]));
        assert_eq!(sources[2]["downwardAPI"]["items"][0]["fieldRef"]["fieldPath"], "metadata.namespace");
        let mount = json!({ "name": name, "readOnly": true, "mountPath": MOUNT_PATH });
        assert_eq!(spec["initContainers"][0]["volumeMounts"], json!([mount]));
        assert_eq!(spec["containers"][0]["volumeMounts"], json!([mount]));
        assert_eq!(spec["containers"][1]["volumeMounts"].as_array().unwrap().len(), 1);
        // A second pass reuses the volume and adds nothing.
        let before = spec.clone();
        mount_token(&mut spec, || "kube-api-access-other".into());
        assert_eq!(spec, before);
    }

    #[test]
    fn automount_opt_outs() {
        let pod = |v: Option<bool>| json!({ "spec": { "automountServiceAccountToken": v } });
        let sa = |v: Option<bool>| json!({ "automountServiceAccountToken": v });
        assert!(automount(&sa(None), &pod(None)));
        assert!(!automount(&sa(Some(false)), &pod(None)));
        assert!(automount(&sa(Some(false)), &pod(Some(true))));
        assert!(!automount(&sa(None), &pod(Some(false))));
    }

    #[test]
    fn mirror_pods_may_not_refer_to_api_objects() {
        let mirror =
            |spec: Value| json!({ "metadata": { "annotations": { MIRROR_ANNOTATION: "x" } }, "spec": spec });
        assert!(is_mirror(&mirror(json!({}))));
        assert_eq!(mirror_pod_problem(&mirror(json!({ "containers": [] }))), None);
        assert_eq!(
            mirror_pod_problem(&mirror(json!({ "serviceAccountName": "x" }))),
            Some("a mirror pod may not reference service accounts")
        );
        assert_eq!(
            mirror_pod_problem(&mirror(
                json!({ "containers": [{ "env": [{ "name": "A", "valueFrom": { "secretKeyRef": { "name": "s", "key": "k" } } }] }] })
            )),
            Some("a mirror pod may not reference secrets")
        );
    }

    #[test]
    fn mountable_secrets() {
        let sa = json!({ "metadata": { "name": "robot" }, "secrets": [{ "name": "ok" }] });
        let spec = json!({ "volumes": [{ "name": "v", "secret": { "secretName": "other" } }] });
        assert_eq!(
            limit_secret_references(&sa, &spec).unwrap(),
            "volume with secret.secretName=\"other\" is not allowed because service account robot does not reference that secret"
        );
        let fine = json!({ "volumes": [{ "name": "v", "secret": { "secretName": "ok" } }] });
        assert_eq!(limit_secret_references(&sa, &fine), None);
    }
}
