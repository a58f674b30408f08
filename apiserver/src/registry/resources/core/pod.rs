//! Pods (upstream's `pkg/registry/core/pod/strategy.go` with `ValidatePodCreate` and
//! `ValidatePodUpdate`): born Pending with their QoS class, selectable by node and phase
//! (the kubelet watches its node's pods), deleted gracefully once bound to a node, and
//! immutable but for images, the active deadline, added tolerations and removed
//! scheduling gates.

use serde_json::{Value, json};

use super::pod_spec::{self, Opts};
use crate::errors::FieldError;
use crate::registry::resource::Hooks;
use crate::registry::resources::items_mut;
use crate::registry::store::now_rfc3339;
use crate::validation::{self as v, child, index};

pub struct PodHooks;

const POD_FIELDS: &[&str] = &[
    "spec.nodeName",
    "spec.restartPolicy",
    "spec.schedulerName",
    "spec.serviceAccountName",
    "spec.hostNetwork",
    "status.phase",
    "status.podIP",
    "status.nominatedNodeName",
];

/// What the pod update message lists as changeable (upstream's `updatablePodSpecFields`).
const UPDATABLE: &str = "`spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)";

const MIRROR_ANNOTATION: &str = "kubernetes.io/config.mirror";

fn defaulted(pod: &Value) -> Value {
    let mut p = pod.clone();
    pod_spec::default_pod_spec(&mut p["spec"]);
    pod_spec::default_pod_only(&mut p["spec"]);
    p
}

/// Sets `to[field]` to `from[field]`, or removes it when `from` has none.
fn copy(to: &mut Value, from: &Value, field: &str) {
    match from.get(field) {
        Some(v) => to[field] = v.clone(),
        None => {
            if let Some(o) = to.as_object_mut() {
                o.remove(field);
            }
        }
    }
}

/// A short account of what differs between two specs (upstream prints a `cmp.Diff` of
/// the Go structs).
fn spec_diff(old: &Value, new: &Value) -> String {
    let mut out = String::from("  core.PodSpec{\n");
    let empty = serde_json::Map::new();
    let (o, n) = (old.as_object().unwrap_or(&empty), new.as_object().unwrap_or(&empty));
    let mut keys: Vec<&String> = o.keys().chain(n.keys()).collect();
    keys.sort();
    keys.dedup();
    for k in keys {
        if o.get(k) == n.get(k) {
            continue;
        }
        let field = format!("{}{}", k[..1].to_uppercase(), &k[1..]);
        let show = |v: Option<&Value>| v.map_or("nil".to_string(), ToString::to_string);
        out.push_str(&format!("- \t{field}: {},\n+ \t{field}: {},\n", show(o.get(k)), show(n.get(k))));
    }
    out.push_str("  }\n");
    out
}

fn toleration_key(t: &Value) -> Value {
    let mut t = t.clone();
    if let Some(o) = t.as_object_mut() {
        o.remove("tolerationSeconds");
    }
    t
}

/// `ValidatePodUpdate` beyond what `validate` checks.
fn validate_pod_update(new: &Value, old: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let (ns, os) = (&new["spec"], &old["spec"]);
    let ann_path = "metadata.annotations";
    let (new_ann, old_ann) = (&new["metadata"]["annotations"], &old["metadata"]["annotations"]);
    match (old_ann.get(MIRROR_ANNOTATION), new_ann.get(MIRROR_ANNOTATION)) {
        (Some(o), n) if Some(o) != n => errs.push(FieldError::forbidden(
            v::key(ann_path, MIRROR_ANNOTATION),
            "may not remove or update mirror pod annotation",
        )),
        (None, Some(_)) => errs.push(FieldError::forbidden(
            v::key(ann_path, MIRROR_ANNOTATION),
            "may not add mirror pod annotation",
        )),
        _ => {}
    }
    for list in ["containers", "initContainers"] {
        let (n, o) = (ns[list].as_array().map(Vec::len), os[list].as_array().map(Vec::len));
        if n.unwrap_or(0) != o.unwrap_or(0) {
            errs.push(FieldError::forbidden(
                child("spec", list),
                "pod updates may not add or remove containers",
            ));
            return errs;
        }
    }
    let deadline = child("spec", "activeDeadlineSeconds");
    match (ns["activeDeadlineSeconds"].as_i64(), os["activeDeadlineSeconds"].as_i64()) {
        (Some(n), _) if !(0..=i64::from(i32::MAX)).contains(&n) => {
            errs.push(FieldError::invalid(deadline, n, v::inclusive_range(0, i64::from(i32::MAX))));
            return errs;
        }
        (Some(n), Some(o)) if o < n => {
            errs.push(FieldError::invalid(deadline, n, "must be less than or equal to previous value"));
            return errs;
        }
        (None, Some(_)) => errs.push(FieldError::invalid(
            deadline,
            "null",
            "must not update from a positive integer to nil value",
        )),
        _ => {}
    }
    let new_tolerations: Vec<Value> =
        ns["tolerations"].as_array().into_iter().flatten().map(toleration_key).collect();
    if os["tolerations"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|t| !new_tolerations.contains(&toleration_key(t)))
    {
        errs.push(FieldError::forbidden(
            child("spec", "tolerations"),
            "existing toleration can not be modified except its tolerationSeconds",
        ));
    } else {
        errs.extend(pod_spec::validate_tolerations(&ns["tolerations"], &child("spec", "tolerations")));
    }
    let old_gates: Vec<&Value> =
        os["schedulingGates"].as_array().into_iter().flatten().map(|g| &g["name"]).collect();
    for (i, g) in ns["schedulingGates"].as_array().into_iter().flatten().enumerate() {
        if !old_gates.contains(&&g["name"]) {
            errs.push(FieldError::forbidden(
                child(&index(&child("spec", "schedulingGates"), i), "name"),
                format!(
                    "only deletion is allowed, but found new scheduling gate '{}'",
                    g["name"].as_str().unwrap_or_default()
                ),
            ));
        }
    }
    if ns == os {
        return errs;
    }
    // Put back what may change, then nothing else may differ.
    let mut munged = ns.clone();
    for list in ["containers", "initContainers"] {
        for (i, c) in items_mut(&mut munged, list).enumerate() {
            c["image"] = os[list][i]["image"].clone();
        }
    }
    for f in ["activeDeadlineSeconds", "schedulingGates", "tolerations"] {
        copy(&mut munged, os, f);
    }
    if os["terminationGracePeriodSeconds"].as_i64().is_some_and(|g| g < 0)
        && munged["terminationGracePeriodSeconds"].as_i64() == Some(1)
    {
        copy(&mut munged, os, "terminationGracePeriodSeconds");
    }
    if os["schedulingGates"].as_array().is_some_and(|g| !g.is_empty())
        && munged["nodeSelector"] != os["nodeSelector"]
    {
        // A gated pod may gain node selector terms, not lose or change them.
        let kept = os["nodeSelector"]
            .as_object()
            .into_iter()
            .flatten()
            .all(|(k, val)| munged["nodeSelector"].get(k) == Some(val));
        if !kept {
            errs.push(FieldError::invalid(
                child("spec", "nodeSelector"),
                v::show(&munged["nodeSelector"]),
                "only additions to spec.nodeSelector are allowed (no mutations or deletions)",
            ));
        }
        copy(&mut munged, os, "nodeSelector");
    }
    if &munged != os {
        errs.push(FieldError::forbidden(
            "spec",
            format!("pod updates may not change fields other than {UPDATABLE}\n{}", spec_diff(os, &munged)),
        ));
    }
    errs
}

/// What `ValidatePodStatusUpdate` checks of a changed status (status is kept from the
/// stored pod on other updates, so these only bite status writers).
fn validate_status_update(new: &Value, old: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let (ns, os) = (&new["status"], &old["status"]);
    if let Some(n) = ns["nominatedNodeName"].as_str().filter(|n| !n.is_empty())
        && ns["nominatedNodeName"] != os["nominatedNodeName"]
    {
        errs.extend(v::dns1123_subdomain("status.nominatedNodeName", n));
    }
    // The QoS class never changes (a writer that leaves it out keeps it).
    if let (Some(n), Some(o)) = (ns["qosClass"].as_str(), os["qosClass"].as_str())
        && !n.is_empty()
        && n != o
    {
        errs.push(FieldError::invalid("status.qosClass", n, v::IMMUTABLE_MSG));
    }
    for list in ["podIPs", "hostIPs"] {
        for (i, ip) in ns[list].as_array().into_iter().flatten().enumerate() {
            errs.extend(v::ip(&format!("status.{list}[{i}].ip"), ip["ip"].as_str().unwrap_or_default()));
        }
    }
    errs
}

/// Upstream's v1 → internal pod status conversion keeps the singular address field and
/// the plural list in step, so that a writer that sets one (an older kubelet, a client
/// patching `podIP`) and a reader of the other (the EndpointSlice controller reads
/// `podIPs`) agree: the singular wins when both are set and differ (older clients only know
/// it), fills the list when it is empty, and is filled from the list's first entry.
fn sync_ip_fields(status: &mut Value, single: &str, plural: &str) {
    let one = status[single].as_str().filter(|s| !s.is_empty()).map(str::to_string);
    let first = status[plural][0]["ip"].as_str().filter(|s| !s.is_empty()).map(str::to_string);
    match (one, first) {
        (Some(ip), first) if first.as_deref() != Some(ip.as_str()) => {
            status[plural] = json!([{ "ip": ip }]);
        }
        (None, Some(ip)) => status[single] = json!(ip),
        _ => {}
    }
}

impl Hooks for PodHooks {
    fn convert_in(&self, obj: &mut Value) {
        if let Some(status) = obj.get_mut("status").filter(|s| s.is_object()) {
            sync_ip_fields(status, "podIP", "podIPs");
            sync_ip_fields(status, "hostIP", "hostIPs");
        }
    }

    fn warnings(&self, obj: &Value) -> Vec<String> {
        crate::registry::resources::core::pod_warnings::warnings(
            &obj["metadata"],
            &obj["spec"],
            "metadata",
            "spec",
        )
    }

    fn default(&self, obj: &mut Value) {
        pod_spec::default_pod_spec(&mut obj["spec"]);
        pod_spec::default_pod_only(&mut obj["spec"]);
    }

    /// A new pod is Pending, with the QoS class its resources give it, and marked
    /// unschedulable while it has scheduling gates.
    fn prepare_for_create(&self, obj: &mut Value) {
        self.default(obj);
        let mut status = json!({ "phase": "Pending", "qosClass": pod_spec::qos_class(&obj["spec"]) });
        if obj["spec"]["schedulingGates"].as_array().is_some_and(|g| !g.is_empty()) {
            status["conditions"] = json!([{
                "type": "PodScheduled",
                "status": "False",
                "reason": "SchedulingGated",
                "message": "Scheduling is blocked due to non-empty scheduling gates",
                "lastProbeTime": null,
                "lastTransitionTime": now_rfc3339(),
            }]);
        }
        obj["status"] = status;
    }

    fn validate(&self, obj: &Value) -> Vec<FieldError> {
        let spec = &obj["spec"];
        let name = obj["metadata"]["name"].as_str().filter(|n| !n.is_empty());
        let mut errs = pod_spec::pod_annotations("metadata.annotations", &obj["metadata"], spec);
        errs.extend(pod_spec::validate_pod_spec(spec, "spec", name, Opts { is_pod: true }));
        if spec["serviceAccountName"].as_str().is_none_or(str::is_empty) {
            for (i, vol) in spec["volumes"].as_array().into_iter().flatten().enumerate() {
                for (j, src) in vol["projected"]["sources"].as_array().into_iter().flatten().enumerate() {
                    if src["serviceAccountToken"].is_object() {
                        let path = format!("spec.volumes[{i}].projected.sources[{j}].serviceAccountToken");
                        errs.push(FieldError::forbidden(
                            path,
                            "must not be specified when serviceAccountName is not set",
                        ));
                    }
                }
            }
        }
        if spec["nodeName"].as_str().is_some_and(|n| !n.is_empty())
            && spec["schedulingGates"].as_array().is_some_and(|g| !g.is_empty())
        {
            errs.push(FieldError::forbidden(
                "spec.nodeName",
                "cannot be set until all schedulingGates have been cleared",
            ));
        }
        errs
    }

    /// Ephemeral containers come later, through their subresource.
    fn validate_create(&self, obj: &Value) -> Vec<FieldError> {
        if obj["spec"]["ephemeralContainers"].as_array().is_some_and(|e| !e.is_empty()) {
            return vec![FieldError::forbidden("spec.ephemeralContainers", "cannot be set on create")];
        }
        Vec::new()
    }

    /// `ephemeralcontainers` (upstream's `dropNonEphemeralContainerUpdates`): only
    /// `spec.ephemeralContainers` changes; metadata as a status write's
    /// (`ResetObjectMetaForStatus`).
    fn prepare_for_subresource_update(&self, sub: &str, new: &mut Value, old: &Value) {
        let ephemeral = new["spec"].get("ephemeralContainers").cloned();
        crate::registry::resource::keep_spec(new, old);
        crate::registry::resource::copy_field(new, old, "status");
        if sub != "ephemeralcontainers" {
            return;
        }
        crate::registry::resource::reset_meta_for_status(new, old);
        if let Some(spec) = new.get_mut("spec").and_then(Value::as_object_mut) {
            match ephemeral {
                Some(e) => {
                    spec.insert("ephemeralContainers".into(), e);
                }
                None => {
                    spec.remove("ephemeralContainers");
                }
            }
        }
    }

    /// The ephemeral containers' strategy validates on its own: the rest of the spec is
    /// the stored one (see `prepare_for_subresource_update`).
    fn replaces_update_validation(&self, sub: &str) -> bool {
        sub == "ephemeralcontainers"
    }

    /// `ValidatePodEphemeralContainersUpdate`: not on static pods' mirrors, and those
    /// already there are neither removed nor changed.
    fn validate_subresource_update(&self, sub: &str, new: &Value, old: &Value) -> Vec<FieldError> {
        if sub != "ephemeralcontainers" {
            return Vec::new();
        }
        if old["metadata"]["annotations"].get(MIRROR_ANNOTATION).is_some() {
            return vec![FieldError::forbidden("", "static pods do not support ephemeral containers")];
        }
        let path = "spec.ephemeralContainers";
        let news: Vec<&Value> = new["spec"]["ephemeralContainers"].as_array().into_iter().flatten().collect();
        let mut errs = Vec::new();
        for o in old["spec"]["ephemeralContainers"].as_array().into_iter().flatten() {
            let name = o["name"].as_str().unwrap_or_default();
            match news.iter().find(|n| n["name"] == o["name"]) {
                None => errs.push(FieldError::forbidden(
                    path,
                    format!("existing ephemeral containers \"{name}\" may not be removed\n"),
                )),
                Some(n) if !v::semantically_equal(n, o) => errs.push(FieldError::forbidden(
                    path,
                    format!("existing ephemeral containers \"{name}\" may not be changed\n"),
                )),
                Some(_) => {}
            }
        }
        errs
    }

    /// Upstream's pod status strategy: the stored spec, and the stored owner references
    /// (old kubelets corrupted them in status writes, breaking garbage collection).
    fn prepare_for_status_update(&self, new: &mut Value, old: &Value) {
        crate::registry::resource::keep_spec(new, old);
        crate::registry::resource::copy_meta_field(new, old, "ownerReferences");
    }

    fn validate_update(&self, new: &Value, old: &Value) -> Vec<FieldError> {
        // Objects stored before defaulting existed are compared as defaulted, as
        // upstream defaults what it reads from storage.
        let mut errs = validate_pod_update(new, &defaulted(old));
        errs.extend(validate_status_update(new, old));
        errs
    }

    fn fields(&self, obj: &Value) -> Vec<(&'static str, String)> {
        let s = |v: &Value| v.as_str().unwrap_or_default().to_string();
        vec![
            ("spec.nodeName", s(&obj["spec"]["nodeName"])),
            ("spec.restartPolicy", s(&obj["spec"]["restartPolicy"])),
            ("spec.schedulerName", s(&obj["spec"]["schedulerName"])),
            ("spec.serviceAccountName", s(&obj["spec"]["serviceAccountName"])),
            ("spec.hostNetwork", obj["spec"]["hostNetwork"].as_bool().unwrap_or(false).to_string()),
            ("status.phase", s(&obj["status"]["phase"])),
            ("status.podIP", s(&obj["status"]["podIP"])),
            ("status.nominatedNodeName", s(&obj["status"]["nominatedNodeName"])),
        ]
    }

    fn field_names(&self) -> &'static [&'static str] {
        POD_FIELDS
    }

    fn default_grace_period(&self, obj: &Value) -> Option<i64> {
        if self.delete_at_once(obj) {
            return None;
        }
        Some(obj["spec"]["terminationGracePeriodSeconds"].as_i64().unwrap_or(30))
    }

    /// A pod no kubelet runs (unscheduled, or finished) goes at once, even when the delete
    /// asked for a grace period.
    fn delete_at_once(&self, obj: &Value) -> bool {
        let bound = obj["spec"]["nodeName"].as_str().is_some_and(|n| !n.is_empty());
        let done = matches!(obj["status"]["phase"].as_str(), Some("Succeeded" | "Failed"));
        !bound || done
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn created(pod: Value) -> Value {
        let mut p = pod;
        PodHooks.prepare_for_create(&mut p);
        PodHooks.default(&mut p);
        p
    }

    fn pod() -> Value {
        created(json!({
            "metadata": { "name": "p", "namespace": "default" },
            "spec": { "containers": [{ "name": "c", "image": "nginx:1", "resources": { "limits": { "cpu": "1", "memory": "1Gi" } } }] },
        }))
    }

    #[test]
    fn singular_and_plural_addresses_kept_in_step() {
        let converted = |status: Value| {
            let mut p = json!({ "status": status });
            PodHooks.convert_in(&mut p);
            p["status"].take()
        };
        // Only the singular: the list is made from it.
        assert_eq!(
            converted(json!({ "podIP": "10.0.0.5", "hostIP": "192.0.2.1" })),
            json!({ "podIP": "10.0.0.5", "podIPs": [{ "ip": "10.0.0.5" }],
                    "hostIP": "192.0.2.1", "hostIPs": [{ "ip": "192.0.2.1" }] })
        );
        // Only the list: the singular is its first entry.
        assert_eq!(
            converted(json!({ "podIPs": [{ "ip": "10.0.0.5" }, { "ip": "fd00::5" }] })),
            json!({ "podIP": "10.0.0.5", "podIPs": [{ "ip": "10.0.0.5" }, { "ip": "fd00::5" }] })
        );
        // Both, differing: the singular is authoritative (older clients only know it).
        assert_eq!(
            converted(json!({ "podIP": "10.0.0.6", "podIPs": [{ "ip": "10.0.0.5" }, { "ip": "fd00::5" }] })),
            json!({ "podIP": "10.0.0.6", "podIPs": [{ "ip": "10.0.0.6" }] })
        );
        // Both, agreeing, and neither: unchanged.
        let both = json!({ "podIP": "10.0.0.5", "podIPs": [{ "ip": "10.0.0.5" }, { "ip": "fd00::5" }] });
        assert_eq!(converted(both.clone()), both);
        assert_eq!(converted(json!({ "phase": "Pending" })), json!({ "phase": "Pending" }));
    }

    #[test]
    fn grace_periods() {
        let bound = json!({ "spec": { "nodeName": "n1", "terminationGracePeriodSeconds": 5 }, "status": { "phase": "Running" } });
        assert_eq!(PodHooks.default_grace_period(&bound), Some(5));
        assert!(!PodHooks.delete_at_once(&bound));
        // Unscheduled or finished: at once, whatever the delete asked for.
        for pod in [
            json!({ "spec": { "terminationGracePeriodSeconds": 5 } }),
            json!({ "spec": { "nodeName": "n1" }, "status": { "phase": "Succeeded" } }),
            json!({ "spec": { "nodeName": "n1" }, "status": { "phase": "Failed" } }),
        ] {
            assert!(PodHooks.delete_at_once(&pod), "{pod}");
            assert_eq!(PodHooks.default_grace_period(&pod), None);
        }
    }

    #[test]
    fn born_pending_with_defaults() {
        let p = pod();
        assert_eq!(p["status"], json!({ "phase": "Pending", "qosClass": "Guaranteed" }));
        assert_eq!(p["spec"]["enableServiceLinks"], true);
        assert_eq!(p["spec"]["containers"][0]["imagePullPolicy"], "IfNotPresent");
        assert!(PodHooks.validate(&p).is_empty(), "{:?}", PodHooks.validate(&p));
        let gated = created(
            json!({ "metadata": { "name": "g" }, "spec": { "containers": [{ "name": "c", "image": "x" }], "schedulingGates": [{ "name": "example.com/gate" }] } }),
        );
        assert_eq!(gated["status"]["conditions"][0]["reason"], "SchedulingGated");
    }

    #[test]
    fn image_changes_are_allowed_others_are_not() {
        let old = pod();
        let mut new = old.clone();
        new["spec"]["containers"][0]["image"] = json!("nginx:2");
        new["spec"]["activeDeadlineSeconds"] = json!(100);
        new["spec"]["tolerations"] = json!([{ "key": "k", "operator": "Exists" }]);
        assert!(
            PodHooks.validate_update(&new, &old).is_empty(),
            "{:?}",
            PodHooks.validate_update(&new, &old)
        );

        let mut init = old.clone();
        init["spec"]["containers"][0]["image"] = json!("nginx:3");
        assert!(PodHooks.validate_update(&init, &old).is_empty());
        assert!(init["spec"].get("initContainers").is_none());

        let mut bad = old.clone();
        bad["spec"]["containers"][0]["env"] = json!([{ "name": "A", "value": "b" }]);
        let errs = PodHooks.validate_update(&bad, &old);
        assert_eq!(errs.len(), 1);
        assert_eq!(errs[0].field, "spec");
        assert!(errs[0].to_text().starts_with(&format!(
            "spec: Forbidden: pod updates may not change fields other than {UPDATABLE}\n"
        )));

        let mut more = old.clone();
        more["spec"]["containers"].as_array_mut().unwrap().push(json!({ "name": "d", "image": "x" }));
        assert_eq!(
            PodHooks.validate_update(&more, &old)[0].to_text(),
            "spec.containers: Forbidden: pod updates may not add or remove containers"
        );
    }

    #[test]
    fn tolerations_and_deadlines_only_tighten() {
        let mut old = pod();
        old["spec"]["tolerations"] =
            json!([{ "key": "k", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 5 }]);
        old["spec"]["activeDeadlineSeconds"] = json!(10);
        let mut new = old.clone();
        new["spec"]["tolerations"][0]["tolerationSeconds"] = json!(1);
        assert!(PodHooks.validate_update(&new, &old).is_empty());
        new["spec"]["tolerations"] = json!([]);
        new["spec"]["activeDeadlineSeconds"] = json!(20);
        let texts: Vec<String> =
            PodHooks.validate_update(&new, &old).iter().map(FieldError::to_text).collect();
        assert_eq!(
            texts,
            vec![
                "spec.activeDeadlineSeconds: Invalid value: 20: must be less than or equal to previous value"
            ]
        );
        new["spec"]["activeDeadlineSeconds"] = json!(5);
        let texts: Vec<String> =
            PodHooks.validate_update(&new, &old).iter().map(FieldError::to_text).collect();
        assert_eq!(
            texts,
            vec![
                "spec.tolerations: Forbidden: existing toleration can not be modified except its tolerationSeconds"
            ]
        );
    }

    #[test]
    fn create_rules() {
        let mut p = pod();
        p["spec"]["nodeName"] = json!("n1");
        p["spec"]["schedulingGates"] = json!([{ "name": "g" }]);
        let texts: Vec<String> = PodHooks.validate(&p).iter().map(FieldError::to_text).collect();
        assert!(
            texts.contains(
                &"spec.nodeName: Forbidden: cannot be set until all schedulingGates have been cleared"
                    .to_string()
            )
        );
    }
}
