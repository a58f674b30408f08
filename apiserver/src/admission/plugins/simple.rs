//! Small plugins that decide from the object alone: AlwaysAdmit, AlwaysDeny (both
//! deprecated upstream, kept for tests), AlwaysPullImages, DenyServiceExternalIPs and
//! LimitPodHardAntiAffinityTopology.

use serde_json::{Value, json};

use crate::admission::{Attributes, Operation, Plugin, forbidden};
use crate::errors::{ApiError, ApiResult};

/// Admits everything.
pub struct AlwaysAdmit;

#[async_trait::async_trait]
impl Plugin for AlwaysAdmit {
    fn name(&self) -> &'static str {
        "AlwaysAdmit"
    }
}

/// Refuses every write.
pub struct AlwaysDeny;

#[async_trait::async_trait]
impl Plugin for AlwaysDeny {
    fn name(&self) -> &'static str {
        "AlwaysDeny"
    }

    async fn admit(&self, attrs: &mut Attributes<'_>) -> ApiResult<()> {
        Err(forbidden(attrs, "admission control is denying all modifications"))
    }
}

/// Every container of a pod in the order upstream's `VisitContainersWithPath` visits them,
/// with its field path.
pub fn containers_with_paths(spec: &Value) -> Vec<(String, &Value)> {
    let mut out = Vec::new();
    for list in ["initContainers", "containers", "ephemeralContainers"] {
        for (i, c) in spec[list].as_array().into_iter().flatten().enumerate() {
            out.push((format!("spec.{list}[{i}]"), c));
        }
    }
    out
}

/// Makes every container pull its image on every start, so that a pod can only use an
/// image its creator may pull. Updates that bring no new image are left alone.
pub struct AlwaysPullImages;

fn images(spec: &Value) -> Vec<&str> {
    containers_with_paths(spec).into_iter().filter_map(|(_, c)| c["image"].as_str()).collect()
}

fn pull_images_ignores(attrs: &Attributes<'_>) -> bool {
    if !attrs.is("", "pods") || !matches!(attrs.operation, Operation::Create | Operation::Update) {
        return true;
    }
    let (Some(pod), Some(old)) = (&attrs.object, attrs.old_object) else { return false };
    let before = images(&old["spec"]);
    images(&pod["spec"]).iter().all(|i| before.contains(i))
}

#[async_trait::async_trait]
impl Plugin for AlwaysPullImages {
    fn name(&self) -> &'static str {
        "AlwaysPullImages"
    }

    async fn admit(&self, attrs: &mut Attributes<'_>) -> ApiResult<()> {
        if pull_images_ignores(attrs) {
            return Ok(());
        }
        let Some(spec) = attrs.object.as_mut().and_then(|p| p.get_mut("spec")) else { return Ok(()) };
        for list in ["initContainers", "containers", "ephemeralContainers"] {
            for c in spec.get_mut(list).and_then(Value::as_array_mut).into_iter().flatten() {
                c["imagePullPolicy"] = json!("Always");
            }
        }
        Ok(())
    }

    async fn validate(&self, attrs: &Attributes<'_>) -> ApiResult<()> {
        if pull_images_ignores(attrs) {
            return Ok(());
        }
        let Some(pod) = &attrs.object else { return Ok(()) };
        for (path, c) in containers_with_paths(&pod["spec"]) {
            let policy = c["imagePullPolicy"].as_str().unwrap_or_default();
            if policy != "Always" {
                return Err(forbidden(
                    attrs,
                    format!(
                        "{path}.imagePullPolicy: Unsupported value: \"{policy}\": supported values: \"Always\""
                    ),
                ));
            }
        }
        Ok(())
    }
}

/// Refuses services that add external IPs (an update may keep the ones it had).
pub struct DenyServiceExternalIPs;

fn external_ips(svc: &Value) -> Vec<&str> {
    svc["spec"]["externalIPs"].as_array().into_iter().flatten().filter_map(Value::as_str).collect()
}

#[async_trait::async_trait]
impl Plugin for DenyServiceExternalIPs {
    fn name(&self) -> &'static str {
        "DenyServiceExternalIPs"
    }

    async fn validate(&self, attrs: &Attributes<'_>) -> ApiResult<()> {
        if !attrs.is("", "services") || !matches!(attrs.operation, Operation::Create | Operation::Update) {
            return Ok(());
        }
        let Some(svc) = &attrs.object else { return Ok(()) };
        let ips = external_ips(svc);
        let old = attrs.old_object.map(external_ips);
        let subset = ips.is_empty() || old.is_some_and(|old| ips.iter().all(|ip| old.contains(ip)));
        if subset {
            Ok(())
        } else {
            Err(forbidden(attrs, "Use of external IPs is denied by admission control"))
        }
    }
}

/// Requires pod anti-affinity terms to use the node (hostname) topology only.
pub struct LimitPodHardAntiAffinityTopology;

#[async_trait::async_trait]
impl Plugin for LimitPodHardAntiAffinityTopology {
    fn name(&self) -> &'static str {
        "LimitPodHardAntiAffinityTopology"
    }

    async fn validate(&self, attrs: &Attributes<'_>) -> ApiResult<()> {
        if !attrs.is("", "pods") || !matches!(attrs.operation, Operation::Create | Operation::Update) {
            return Ok(());
        }
        let Some(pod) = &attrs.object else { return Ok(()) };
        let terms =
            &pod["spec"]["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"];
        for term in terms.as_array().into_iter().flatten() {
            let key = term["topologyKey"].as_str().unwrap_or_default();
            if key != "kubernetes.io/hostname" {
                let name = pod["metadata"]["name"].as_str().unwrap_or_default();
                let mut e = ApiError::forbidden(format!(
                    "pods \"{name}\" is forbidden: affinity.PodAntiAffinity.RequiredDuringScheduling has TopologyKey {key} but only key kubernetes.io/hostname is allowed"
                ));
                e.details = Some(json!({ "name": name, "kind": "pods" }));
                return Err(e);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admission::plugins::tests::{attrs, pods_info, services_info};

    #[tokio::test]
    async fn always_pull_images_sets_and_checks_the_policy() {
        let info = pods_info();
        let pod = json!({ "metadata": { "name": "p" }, "spec": {
            "initContainers": [{ "name": "i", "image": "a", "imagePullPolicy": "IfNotPresent" }],
            "containers": [{ "name": "c", "image": "b" }],
        }});
        let user = Default::default();
        let mut a = attrs(&info, Operation::Create, "p", Some(pod.clone()), None, &user);
        AlwaysPullImages.admit(&mut a).await.unwrap();
        let obj = a.object.clone().unwrap();
        assert_eq!(obj["spec"]["initContainers"][0]["imagePullPolicy"], "Always");
        assert_eq!(obj["spec"]["containers"][0]["imagePullPolicy"], "Always");
        assert!(AlwaysPullImages.validate(&a).await.is_ok());
        let b = attrs(&info, Operation::Create, "p", Some(pod.clone()), None, &user);
        let e = AlwaysPullImages.validate(&b).await.unwrap_err();
        assert_eq!(
            e.message,
            "pods \"p\" is forbidden: spec.initContainers[0].imagePullPolicy: Unsupported value: \"IfNotPresent\": supported values: \"Always\""
        );
        // An update without new images is left alone.
        let c = attrs(&info, Operation::Update, "p", Some(pod.clone()), Some(&pod), &user);
        assert!(AlwaysPullImages.validate(&c).await.is_ok());
    }

    #[tokio::test]
    async fn external_ips_may_only_be_kept() {
        let info = services_info();
        let user = Default::default();
        let svc = json!({ "metadata": { "name": "s" }, "spec": { "externalIPs": ["1.2.3.4"] } });
        let a = attrs(&info, Operation::Create, "s", Some(svc.clone()), None, &user);
        assert_eq!(
            DenyServiceExternalIPs.validate(&a).await.unwrap_err().message,
            "services \"s\" is forbidden: Use of external IPs is denied by admission control"
        );
        let b = attrs(&info, Operation::Update, "s", Some(svc.clone()), Some(&svc), &user);
        assert!(DenyServiceExternalIPs.validate(&b).await.is_ok());
    }
}
