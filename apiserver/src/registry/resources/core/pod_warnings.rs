//! Warnings for pods and pod templates that are valid but probably not what the user
//! meant (upstream's `pkg/api/pod/warnings.go`): deprecated node labels and annotations,
//! negative grace periods, duplicate container ports. They reach the client as `Warning`
//! headers; the write still succeeds.

use serde_json::Value;

/// Node labels replaced by GA ones: (deprecated, since, use instead).
const DEPRECATED_NODE_LABELS: &[(&str, &str, &str)] = &[
    ("beta.kubernetes.io/arch", "v1.14", "kubernetes.io/arch"),
    ("beta.kubernetes.io/os", "v1.14", "kubernetes.io/os"),
    ("failure-domain.beta.kubernetes.io/region", "v1.17", "topology.kubernetes.io/region"),
    ("failure-domain.beta.kubernetes.io/zone", "v1.17", "topology.kubernetes.io/zone"),
    ("beta.kubernetes.io/instance-type", "v1.17", "node.kubernetes.io/instance-type"),
];

/// Annotations that stopped working: (annotation or prefix, since, what to use instead).
const DEAD_ANNOTATIONS: &[(&str, &str, &str)] = &[
    ("scheduler.alpha.kubernetes.io/critical-pod", "v1.16", "priorityClassName"),
    ("seccomp.security.alpha.kubernetes.io/pod", "v1.27", "spec.securityContext.seccompProfile"),
    (
        "container.seccomp.security.alpha.kubernetes.io/",
        "v1.27",
        "spec.containers[*].securityContext.seccompProfile",
    ),
    ("security.alpha.kubernetes.io/sysctls", "v1.11", "spec.securityContext.sysctls"),
    ("security.alpha.kubernetes.io/unsafe-sysctls", "v1.11", "spec.securityContext.sysctls"),
];

/// The warnings of a pod's (or template's) `metadata` and `spec` at `meta_path` and
/// `spec_path` (`metadata`/`spec` for a pod, `spec.template.metadata`/... for templates).
pub fn warnings(meta: &Value, spec: &Value, meta_path: &str, spec_path: &str) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(annotations) = meta["annotations"].as_object() {
        for key in annotations.keys() {
            let dead = DEAD_ANNOTATIONS
                .iter()
                .find(|(a, _, _)| if a.ends_with('/') { key.starts_with(a) } else { key == a });
            if let Some((_, since, instead)) = dead {
                out.push(format!(
                    "{meta_path}.annotations[{key}]: non-functional in {since}+; use the \"{instead}\" field instead"
                ));
            }
        }
    }
    if let Some(selector) = spec["nodeSelector"].as_object() {
        for key in selector.keys() {
            if let Some((_, since, instead)) = DEPRECATED_NODE_LABELS.iter().find(|(l, _, _)| l == key) {
                out.push(format!(
                    "{spec_path}.nodeSelector[{key}]: deprecated since {since}; use \"{instead}\" instead"
                ));
            }
        }
    }
    let terms = &spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"];
    for (i, term) in terms.as_array().into_iter().flatten().enumerate() {
        for (j, expr) in term["matchExpressions"].as_array().into_iter().flatten().enumerate() {
            let key = expr["key"].as_str().unwrap_or_default();
            if let Some((_, since, instead)) = DEPRECATED_NODE_LABELS.iter().find(|(l, _, _)| *l == key) {
                out.push(format!(
                    "{spec_path}.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[{i}].matchExpressions[{j}].key: {key} is deprecated since {since}; use \"{instead}\" instead"
                ));
            }
        }
    }
    if spec["terminationGracePeriodSeconds"].as_i64().is_some_and(|g| g < 0) {
        out.push(format!(
            "{spec_path}.terminationGracePeriodSeconds: must be >= 0; negative values are invalid and will be treated as 1"
        ));
    }
    for list in ["initContainers", "containers"] {
        for (i, c) in spec[list].as_array().into_iter().flatten().enumerate() {
            let ports = c["ports"].as_array().map(Vec::as_slice).unwrap_or_default();
            for (j, p) in ports.iter().enumerate() {
                let same = |q: &Value| {
                    q["containerPort"] == p["containerPort"]
                        && q["protocol"].as_str().unwrap_or("TCP") == p["protocol"].as_str().unwrap_or("TCP")
                        && q["hostPort"] == p["hostPort"]
                        && q["hostIP"] == p["hostIP"]
                };
                if let Some(k) = ports[..j].iter().position(same) {
                    out.push(format!(
                        "{spec_path}.{list}[{i}].ports[{j}]: duplicate port definition with {spec_path}.{list}[{i}].ports[{k}]"
                    ));
                }
            }
        }
    }
    out
}

/// The warnings of the pod template at `path` in `obj` (`["spec", "template"]`).
pub fn template_warnings(obj: &Value, path: &[&str]) -> Vec<String> {
    let template = path.iter().fold(obj, |v, p| &v[*p]);
    let at = path.join(".");
    warnings(&template["metadata"], &template["spec"], &format!("{at}.metadata"), &format!("{at}.spec"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn deprecated_labels_dead_annotations_and_duplicate_ports() {
        let meta =
            json!({ "annotations": { "scheduler.alpha.kubernetes.io/critical-pod": "", "fine": "x" } });
        let spec = json!({
            "nodeSelector": { "beta.kubernetes.io/arch": "amd64" },
            "terminationGracePeriodSeconds": -5,
            "containers": [{ "name": "c", "ports": [{ "containerPort": 80 }, { "containerPort": 80, "protocol": "TCP" }, { "containerPort": 80, "protocol": "UDP" }] }]
        });
        assert_eq!(
            warnings(&meta, &spec, "spec.template.metadata", "spec.template.spec"),
            [
                "spec.template.metadata.annotations[scheduler.alpha.kubernetes.io/critical-pod]: non-functional in v1.16+; use the \"priorityClassName\" field instead",
                "spec.template.spec.nodeSelector[beta.kubernetes.io/arch]: deprecated since v1.14; use \"kubernetes.io/arch\" instead",
                "spec.template.spec.terminationGracePeriodSeconds: must be >= 0; negative values are invalid and will be treated as 1",
                "spec.template.spec.containers[0].ports[1]: duplicate port definition with spec.template.spec.containers[0].ports[0]",
            ]
        );
        assert!(warnings(&json!({}), &json!({ "containers": [] }), "metadata", "spec").is_empty());
    }
}
