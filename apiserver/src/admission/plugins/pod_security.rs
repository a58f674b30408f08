//! PodSecurity (upstream's `pod-security-admission`): each namespace chooses, by labels,
//! the Pod Security Standard level (`privileged`, `baseline`, `restricted`) and version
//! pods are held to in three modes —
//!
//! - `pod-security.kubernetes.io/enforce[-version]`: pods that violate it are refused;
//! - `pod-security.kubernetes.io/warn[-version]`: the client gets a warning;
//! - `pod-security.kubernetes.io/audit[-version]`: the request's audit event gets a
//!   `pod-security.kubernetes.io/audit-violations` annotation (every evaluated pod also
//!   records the `enforce-policy` it was held to), as upstream.
//!
//! Unlabelled namespaces get the configured defaults (privileged:latest unless the
//! `PodSecurityConfiguration` in `--admission-control-config-file` says otherwise), which
//! also lists exempt users, runtime classes and namespaces. Workload resources (pod
//! templates, deployments, jobs, ...) are checked against warn and audit only, never
//! enforced, as upstream. Pod updates that change no image (nor seccomp annotation) are
//! not checked. A namespace whose enforce level is tightened is answered with warnings
//! about its existing pods that would now be refused.

pub mod checks;

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::Value;

use super::Context;
use crate::admission::{Attributes, Operation, Plugin, forbidden, lookup};
use crate::errors::{ApiError, ApiResult, FieldError};
use crate::registry::store::Store;
use checks::{Level, LevelVersion, Version, Violation, evaluate, forbidden_detail, forbidden_reason};

const LABEL_PREFIX: &str = "pod-security.kubernetes.io/";
const CONFIG_API_VERSIONS: &[&str] = &[
    "pod-security.admission.config.k8s.io/v1",
    "pod-security.admission.config.k8s.io/v1beta1",
    "pod-security.admission.config.k8s.io/v1alpha1",
];
const LEVELS_MSG: &str = "must be one of privileged, baseline, restricted";
const VERSION_MSG: &str = "must be \"latest\" or \"v1.x\"";
/// Most pods checked when a namespace's enforce level is tightened.
const MAX_PODS_TO_CHECK: usize = 3000;
/// Pod subresources that cannot change what PodSecurity checks.
const IGNORED_POD_SUBRESOURCES: &[&str] =
    &["exec", "attach", "binding", "eviction", "log", "portforward", "proxy", "status"];

/// The three modes of a namespace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Policy {
    pub enforce: LevelVersion,
    pub audit: LevelVersion,
    pub warn: LevelVersion,
}

impl Policy {
    fn all_privileged(&self) -> bool {
        [self.enforce, self.audit, self.warn].iter().all(|lv| lv.level == Level::Privileged)
    }
}

impl Default for Policy {
    fn default() -> Self {
        let p = LevelVersion { level: Level::Privileged, version: Version::Latest };
        Self { enforce: p, audit: p, warn: p }
    }
}

/// The policy namespace labels choose (upstream's `PolicyToEvaluate`): a label that does
/// not parse is reported, and falls back to restricted/latest for enforce and to
/// privileged for audit and warn.
pub fn policy_from_labels(labels: &Value, defaults: &Policy) -> (Policy, Vec<FieldError>) {
    let mut p = *defaults;
    let mut errs = Vec::new();
    let label =
        |mode: &str| labels.get(format!("{LABEL_PREFIX}{mode}")).map(|v| v.as_str().unwrap_or_default());
    let field = |mode: &str| format!("metadata.labels[{LABEL_PREFIX}{mode}]");
    for (mode, lv, fallback) in [
        ("enforce", &mut p.enforce, Level::Restricted),
        ("audit", &mut p.audit, Level::Privileged),
        ("warn", &mut p.warn, Level::Privileged),
    ] {
        if let Some(v) = label(mode) {
            lv.level = Level::parse(v).unwrap_or_else(|| {
                errs.push(FieldError::invalid(field(mode), v, LEVELS_MSG));
                fallback
            });
        }
        let version_mode = format!("{mode}-version");
        if let Some(v) = label(&version_mode) {
            lv.version = Version::parse(v).unwrap_or_else(|| {
                errs.push(FieldError::invalid(field(&version_mode), v, VERSION_MSG));
                Version::Latest
            });
        }
    }
    (p, errs)
}

/// The plugin's configuration (upstream's `PodSecurityConfiguration`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Configuration {
    pub defaults: Policy,
    pub exempt_usernames: Vec<String>,
    pub exempt_runtime_classes: Vec<String>,
    pub exempt_namespaces: Vec<String>,
}

impl Configuration {
    /// Parses a `PodSecurityConfiguration` (levels default to privileged, versions to
    /// latest).
    pub fn parse(v: &Value) -> Result<Self, String> {
        let api_version = v["apiVersion"].as_str().unwrap_or_default();
        if v["kind"] != "PodSecurityConfiguration" || !CONFIG_API_VERSIONS.contains(&api_version) {
            return Err(format!(
                "PodSecurity: expected kind PodSecurityConfiguration of {}, got kind {} of {api_version:?}",
                CONFIG_API_VERSIONS.join(", "),
                v["kind"]
            ));
        }
        let d = &v["defaults"];
        let mut errs = Vec::new();
        let mut policy = Policy::default();
        for (mode, lv) in
            [("enforce", &mut policy.enforce), ("audit", &mut policy.audit), ("warn", &mut policy.warn)]
        {
            if let Some(s) = d[mode].as_str().filter(|s| !s.is_empty()) {
                match Level::parse(s) {
                    Some(l) => lv.level = l,
                    None => errs.push(format!("defaults.{mode}: Invalid value: {s:?}: {LEVELS_MSG}")),
                }
            }
            let vmode = format!("{mode}-version");
            if let Some(s) = d[vmode.as_str()].as_str().filter(|s| !s.is_empty()) {
                match Version::parse(s) {
                    Some(ver) => lv.version = ver,
                    None => errs.push(format!("defaults.{vmode}: Invalid value: {s:?}: {VERSION_MSG}")),
                }
            }
        }
        let list = |f: &str| -> Result<Vec<String>, String> {
            let items: Vec<String> = v["exemptions"][f]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|s| s.as_str().map(str::to_string))
                .collect();
            let mut seen = std::collections::BTreeSet::new();
            for (i, s) in items.iter().enumerate() {
                if s.is_empty() {
                    return Err(format!("exemptions.{f}[{i}]: Invalid value: \"\": must be non-empty"));
                }
                if !seen.insert(s) {
                    return Err(format!("exemptions.{f}[{i}]: Duplicate value: {s:?}"));
                }
            }
            Ok(items)
        };
        let (usernames, runtime_classes, namespaces) =
            (list("usernames"), list("runtimeClasses"), list("namespaces"));
        for r in [&usernames, &runtime_classes, &namespaces] {
            if let Err(e) = r {
                errs.push(e.clone());
            }
        }
        if !errs.is_empty() {
            return Err(format!("PodSecurity: invalid configuration: {}", errs.join(", ")));
        }
        Ok(Self {
            defaults: policy,
            exempt_usernames: usernames.unwrap_or_default(),
            exempt_runtime_classes: runtime_classes.unwrap_or_default(),
            exempt_namespaces: namespaces.unwrap_or_default(),
        })
    }
}

pub struct PodSecurity {
    config: Configuration,
    namespaces: Arc<Store>,
    pods: Arc<Store>,
}

impl PodSecurity {
    pub fn new(ctx: &Context<'_>) -> Result<Self, String> {
        let config = match ctx.config.take("PodSecurity") {
            Some(v) => Configuration::parse(v).map_err(|e| format!("failed to read plugin config: {e}"))?,
            None => Configuration::default(),
        };
        Ok(Self {
            config,
            namespaces: lookup::store(ctx.registry, "", "v1", "namespaces")?,
            pods: lookup::store(ctx.registry, "", "v1", "pods")?,
        })
    }

    fn exempt_runtime_class(&self, spec: &Value) -> bool {
        exempt_runtime_class(&self.config, spec)
    }

    /// Checks a pod (or a workload's pod template) against the namespace's modes: an
    /// error when `enforce` refuses it, else warnings for `warn`.
    fn evaluate_pod(
        &self,
        attrs: &Attributes<'_>,
        policy: &Policy,
        meta: &Value,
        spec: &Value,
        enforce: bool,
    ) -> ApiResult<()> {
        if self.exempt_runtime_class(spec) {
            return Ok(());
        }
        let mut cache: BTreeMap<String, Vec<Violation>> = BTreeMap::new();
        let mut run = |lv: LevelVersion| {
            cache.entry(lv.to_string()).or_insert_with(|| evaluate(lv, meta, spec)).clone()
        };
        if enforce {
            crate::audit::annotate("pod-security.kubernetes.io/enforce-policy", policy.enforce.to_string());
            let v = run(policy.enforce);
            if !v.is_empty() {
                return Err(forbidden(
                    attrs,
                    format!("violates PodSecurity \"{}\": {}", policy.enforce, forbidden_detail(&v)),
                ));
            }
        }
        let audit = run(policy.audit);
        if !audit.is_empty() {
            crate::audit::annotate(
                "pod-security.kubernetes.io/audit-violations",
                format!("would violate PodSecurity \"{}\": {}", policy.audit, forbidden_detail(&audit)),
            );
        }
        let warn = run(policy.warn);
        if !warn.is_empty()
            && let Some(scope) = crate::context::current()
        {
            scope.warn(format!("would violate PodSecurity \"{}\": {}", policy.warn, forbidden_detail(&warn)));
        }
        Ok(())
    }

    async fn namespace_policy(&self, ns: &str) -> ApiResult<Policy> {
        let found = lookup::get(&self.namespaces, None, ns)
            .await
            .map_err(|_| ApiError::internal(format!("failed to lookup namespace {ns}")))?;
        let Some(namespace) = found else {
            return Err(ApiError::internal(format!("failed to lookup namespace {ns}")));
        };
        Ok(policy_from_labels(&namespace["metadata"]["labels"], &self.config.defaults).0)
    }

    async fn validate_namespace(&self, attrs: &Attributes<'_>) -> ApiResult<()> {
        if attrs.subresource.is_some() {
            return Ok(());
        }
        let Some(ns) = &attrs.object else { return Ok(()) };
        let (new_policy, new_errs) = policy_from_labels(&ns["metadata"]["labels"], &self.config.defaults);
        let invalid = |errs: &[FieldError]| ApiError::invalid("Namespace", "", attrs.name, errs);
        match (attrs.operation, attrs.old_object) {
            (Operation::Create, _) if !new_errs.is_empty() => Err(invalid(&new_errs)),
            (Operation::Update, Some(old)) => {
                let (old_policy, old_errs) =
                    policy_from_labels(&old["metadata"]["labels"], &self.config.defaults);
                if !new_errs.is_empty() && new_errs != old_errs {
                    return Err(invalid(&new_errs));
                }
                let (n, o) = (new_policy.enforce, old_policy.enforce);
                let relaxed = n.version == o.version && n.level <= o.level;
                if n == o
                    || n.level == Level::Privileged
                    || relaxed
                    || self.config.exempt_namespaces.iter().any(|e| e == attrs.name)
                {
                    return Ok(());
                }
                let pods = lookup::list(&self.pods, Some(attrs.name)).await.ok();
                let warnings = match pods {
                    Some(pods) => existing_pod_warnings(&self.config, attrs.name, n, &pods),
                    None => {
                        vec!["failed to list pods while checking new PodSecurity enforce level".to_string()]
                    }
                };
                if let Some(scope) = crate::context::current() {
                    for w in warnings {
                        scope.warn(w);
                    }
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }
}

/// Whether the pod's runtime class is exempt.
pub fn exempt_runtime_class(config: &Configuration, spec: &Value) -> bool {
    spec["runtimeClassName"]
        .as_str()
        .is_some_and(|rc| !rc.is_empty() && config.exempt_runtime_classes.iter().any(|e| e == rc))
}

/// Warnings about existing pods a new enforce level would refuse (upstream's
/// `EvaluatePodsInNamespace`): pods with the same violations are grouped, named by the
/// first in name order.
pub fn existing_pod_warnings(
    config: &Configuration,
    namespace: &str,
    enforce: LevelVersion,
    pods: &[Value],
) -> Vec<String> {
    let total = pods.len();
    let checked = &pods[..total.min(MAX_PODS_TO_CHECK)];
    let mut order: Vec<String> = Vec::new();
    let mut groups: BTreeMap<String, (String, usize)> = BTreeMap::new();
    for pod in checked {
        if exempt_runtime_class(config, &pod["spec"]) {
            continue;
        }
        let v = evaluate(enforce, &pod["metadata"], &pod["spec"]);
        if v.is_empty() {
            continue;
        }
        let reason = forbidden_reason(&v);
        let name = lookup::name(pod).to_string();
        match groups.get_mut(&reason) {
            Some((first, count)) => {
                if name < *first {
                    *first = name;
                }
                *count += 1;
            }
            None => {
                order.push(reason.clone());
                groups.insert(reason, (name, 1));
            }
        }
    }
    let mut warnings = Vec::new();
    if checked.len() < total {
        warnings.push(format!(
            "new PodSecurity enforce level only checked against the first {} of {total} existing pods",
            checked.len()
        ));
    }
    if !order.is_empty() {
        warnings.push(format!("existing pods in namespace \"{namespace}\" violate the new PodSecurity enforce level \"{enforce}\""));
    }
    let mut pod_warnings: Vec<String> = order
        .iter()
        .map(|reason| {
            let (first, count) = &groups[reason];
            match count {
                1 => format!("{first}: {reason}"),
                2 => format!("{first} (and 1 other pod): {reason}"),
                n => format!("{first} (and {} other pods): {reason}", n - 1),
            }
        })
        .collect();
    pod_warnings.sort();
    warnings.extend(pod_warnings);
    warnings
}

/// The pod template of a workload object, if the resource has one.
pub fn pod_template<'a>(group: &str, plural: &str, obj: &'a Value) -> Option<Option<&'a Value>> {
    let t = match (group, plural) {
        ("", "podtemplates") => &obj["template"],
        ("", "replicationcontrollers")
        | ("apps", "replicasets" | "deployments" | "statefulsets" | "daemonsets")
        | ("batch", "jobs") => &obj["spec"]["template"],
        ("batch", "cronjobs") => &obj["spec"]["jobTemplate"]["spec"]["template"],
        _ => return None,
    };
    Some(t.is_object().then_some(t))
}

/// Whether a pod update changes anything PodSecurity judges (images, seccomp annotations,
/// ephemeral containers), upstream's `isSignificantPodUpdate`.
pub fn significant_pod_update(new: &Value, old: &Value) -> bool {
    let ann = |p: &Value, k: &str| p["metadata"]["annotations"][k].clone();
    let seccomp_pod = "seccomp.security.alpha.kubernetes.io/pod";
    if ann(new, seccomp_pod) != ann(old, seccomp_pod) {
        return true;
    }
    let significant = |c: &Value, o: &Value| {
        let key = format!(
            "container.seccomp.security.alpha.kubernetes.io/{}",
            c["name"].as_str().unwrap_or_default()
        );
        c["image"] != o["image"] || ann(new, &key) != ann(old, &key)
    };
    for list in ["containers", "initContainers"] {
        let (n, o) = (new["spec"][list].as_array(), old["spec"][list].as_array());
        let (n, o) = (n.map(Vec::as_slice).unwrap_or_default(), o.map(Vec::as_slice).unwrap_or_default());
        if n.len() != o.len() || n.iter().zip(o).any(|(c, oc)| significant(c, oc)) {
            return true;
        }
    }
    let old_ephemeral = old["spec"]["ephemeralContainers"].as_array().cloned().unwrap_or_default();
    for c in new["spec"]["ephemeralContainers"].as_array().into_iter().flatten() {
        match old_ephemeral.iter().find(|o| o["name"] == c["name"]) {
            None => return true,
            Some(o) if significant(c, o) => return true,
            Some(_) => {}
        }
    }
    false
}

#[async_trait::async_trait]
impl Plugin for PodSecurity {
    fn name(&self) -> &'static str {
        "PodSecurity"
    }

    async fn validate(&self, attrs: &Attributes<'_>) -> ApiResult<()> {
        if !matches!(attrs.operation, Operation::Create | Operation::Update) {
            return Ok(());
        }
        let (group, plural) = (attrs.resource.group, attrs.resource.plural);
        if (group, plural) == ("", "namespaces") {
            return self.validate_namespace(attrs).await;
        }
        let Some(obj) = &attrs.object else { return Ok(()) };
        let is_pod = (group, plural) == ("", "pods");
        let template = if is_pod { None } else { pod_template(group, plural, obj) };
        if !is_pod && template.is_none() {
            return Ok(());
        }
        match attrs.subresource {
            Some(sub) if !is_pod || IGNORED_POD_SUBRESOURCES.contains(&sub) => return Ok(()),
            _ => {}
        }
        let Some(ns) = attrs.namespace.filter(|n| !n.is_empty()) else { return Ok(()) };
        if self.config.exempt_namespaces.iter().any(|e| e == ns)
            || self.config.exempt_usernames.iter().any(|u| !u.is_empty() && *u == attrs.user.name)
        {
            return Ok(());
        }
        let policy = self.namespace_policy(ns).await?;
        if is_pod {
            if policy.all_privileged() {
                return Ok(());
            }
            if attrs.operation == Operation::Update
                && let Some(old) = attrs.old_object
                && !significant_pod_update(obj, old)
            {
                return Ok(());
            }
            return self.evaluate_pod(attrs, &policy, &obj["metadata"], &obj["spec"], true);
        }
        if policy.warn.level == Level::Privileged && policy.audit.level == Level::Privileged {
            return Ok(());
        }
        match template.flatten() {
            Some(t) => self.evaluate_pod(attrs, &policy, &t["metadata"], &t["spec"], false),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn labels_choose_the_policy() {
        let labels = json!({
            "pod-security.kubernetes.io/enforce": "baseline",
            "pod-security.kubernetes.io/enforce-version": "v1.29",
            "pod-security.kubernetes.io/warn": "restricted",
        });
        let (p, errs) = policy_from_labels(&labels, &Policy::default());
        assert!(errs.is_empty());
        assert_eq!(p.enforce.to_string(), "baseline:v1.29");
        assert_eq!(p.warn.to_string(), "restricted:latest");
        assert_eq!(p.audit.to_string(), "privileged:latest");
        let (bad, errs) = policy_from_labels(
            &json!({ "pod-security.kubernetes.io/enforce": "strict", "pod-security.kubernetes.io/warn": "nope" }),
            &Policy::default(),
        );
        assert_eq!(bad.enforce.level, Level::Restricted);
        assert_eq!(bad.warn.level, Level::Privileged);
        let e = ApiError::invalid("Namespace", "", "ns", &errs[..1]);
        assert_eq!(
            e.message,
            "Namespace \"ns\" is invalid: metadata.labels[pod-security.kubernetes.io/enforce]: Invalid value: \"strict\": must be one of privileged, baseline, restricted"
        );
    }

    #[test]
    fn configuration_defaults_and_exemptions() {
        let c = Configuration::parse(&json!({
            "apiVersion": "pod-security.admission.config.k8s.io/v1",
            "kind": "PodSecurityConfiguration",
            "defaults": { "enforce": "baseline", "warn": "restricted", "warn-version": "v1.30" },
            "exemptions": { "usernames": ["admin"], "namespaces": ["kube-system"], "runtimeClasses": [] },
        }))
        .unwrap();
        assert_eq!(c.defaults.enforce.to_string(), "baseline:latest");
        assert_eq!(c.defaults.warn.to_string(), "restricted:v1.30");
        assert_eq!(c.defaults.audit.to_string(), "privileged:latest");
        assert_eq!(c.exempt_usernames, vec!["admin"]);
        assert_eq!(c.exempt_namespaces, vec!["kube-system"]);
        let bad = Configuration::parse(&json!({
            "apiVersion": "pod-security.admission.config.k8s.io/v1",
            "kind": "PodSecurityConfiguration",
            "defaults": { "enforce": "strict" },
        }));
        assert!(bad.unwrap_err().contains("defaults.enforce"));
        assert!(Configuration::parse(&json!({ "kind": "Other" })).is_err());
    }

    #[test]
    fn workload_templates_and_significant_updates() {
        let d = json!({ "spec": { "template": { "spec": { "containers": [] } } } });
        assert!(pod_template("apps", "deployments", &d).unwrap().is_some());
        let cj = json!({ "spec": { "jobTemplate": { "spec": { "template": { "spec": {} } } } } });
        assert!(pod_template("batch", "cronjobs", &cj).unwrap().is_some());
        assert!(pod_template("", "configmaps", &d).is_none());
        let old = json!({ "metadata": {}, "spec": { "containers": [{ "name": "c", "image": "a" }] } });
        let mut labels = old.clone();
        labels["metadata"]["labels"] = json!({ "x": "y" });
        assert!(!significant_pod_update(&labels, &old));
        let mut image = old.clone();
        image["spec"]["containers"][0]["image"] = json!("b");
        assert!(significant_pod_update(&image, &old));
    }

    #[test]
    fn existing_pod_warnings_are_grouped() {
        let pod = |name: &str, privileged: bool| json!({ "metadata": { "name": name }, "spec": { "containers": [{ "name": "c", "securityContext": { "privileged": privileged } }] } });
        let pods = vec![pod("b", true), pod("a", true), pod("c", false), pod("d", true)];
        let lv = LevelVersion { level: Level::Baseline, version: Version::Latest };
        assert_eq!(
            existing_pod_warnings(&Configuration::default(), "ns", lv, &pods),
            vec![
                "existing pods in namespace \"ns\" violate the new PodSecurity enforce level \"baseline:latest\"".to_string(),
                "a (and 2 other pods): privileged".to_string(),
            ]
        );
    }
}
