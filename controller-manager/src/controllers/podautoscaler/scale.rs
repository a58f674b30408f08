//! The scale target: which resource a `scaleTargetRef` (kind + apiVersion) names, and its
//! `scale` subresource (an autoscaling/v1 Scale) read and written through the generic
//! client. The built-in scalable kinds are known; anything else (a custom resource with
//! a scale subresource) is looked up in discovery, as upstream's REST mapper does.

use k8s_openapi::api::autoscaling::v1::Scale;
use kube::api::{Api, ApiResource, DynamicObject, PostParams};
use kube::core::GroupVersionKind;

/// Why the target's resource is unknown.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MappingError {
    #[error("unexpected GroupVersion string: {0}")]
    GroupVersion(String),
    #[error("no matches for kind \"{kind}\" in group \"{group}\"")]
    NoMatch { kind: String, group: String },
}

/// Upstream's `schema.ParseGroupVersion`: `""`, `v1` (the core group) or `group/version`.
pub fn parse_group_version(api_version: &str) -> Result<(String, String), MappingError> {
    if api_version.is_empty() || api_version == "/" {
        return Ok((String::new(), String::new()));
    }
    match api_version.split('/').collect::<Vec<_>>()[..] {
        [version] => Ok((String::new(), version.to_owned())),
        [group, version] => Ok((group.to_owned(), version.to_owned())),
        _ => Err(MappingError::GroupVersion(api_version.to_owned())),
    }
}

/// Plurals of the kinds the autoscaler commonly meets, so a sync needs no discovery
/// request: the scalable workloads, and what Object metrics usually describe.
fn known_plural(group: &str, kind: &str) -> Option<&'static str> {
    Some(match (group, kind) {
        ("apps", "Deployment") => "deployments",
        ("apps", "ReplicaSet") => "replicasets",
        ("apps", "StatefulSet") => "statefulsets",
        ("", "ReplicationController") => "replicationcontrollers",
        ("", "Pod") => "pods",
        ("", "Service") => "services",
        ("", "Namespace") => "namespaces",
        ("networking.k8s.io", "Ingress") => "ingresses",
        _ => return None,
    })
}

/// The resource of `kind` in `api_version`.
pub async fn resolve(
    client: &kube::Client,
    api_version: &str,
    kind: &str,
) -> Result<ApiResource, MappingError> {
    let (group, version) = parse_group_version(api_version)?;
    if let Some(plural) = known_plural(&group, kind) {
        let gvk = GroupVersionKind::gvk(&group, &version, kind);
        return Ok(ApiResource::from_gvk_with_plural(&gvk, plural));
    }
    let no_match = || MappingError::NoMatch { kind: kind.to_owned(), group: group.clone() };
    if version.is_empty() {
        return Err(no_match());
    }
    let gvk = GroupVersionKind::gvk(&group, &version, kind);
    kube::discovery::pinned_kind(client, &gvk).await.map(|(ar, _)| ar).map_err(|_| no_match())
}

/// The target's Scale.
pub async fn get(
    client: &kube::Client,
    ar: &ApiResource,
    namespace: &str,
    name: &str,
) -> kube::Result<Scale> {
    Api::<DynamicObject>::namespaced_with(client.clone(), namespace, ar).get_scale(name).await
}

/// Writes the target's Scale (its `spec.replicas`), guarded by its resourceVersion.
pub async fn update(
    client: &kube::Client,
    ar: &ApiResource,
    namespace: &str,
    scale: &Scale,
) -> kube::Result<Scale> {
    let name = scale.metadata.name.clone().unwrap_or_default();
    Api::<DynamicObject>::namespaced_with(client.clone(), namespace, ar)
        .replace_scale(&name, &PostParams::default(), scale)
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn group_versions() {
        assert_eq!(parse_group_version("apps/v1").unwrap(), ("apps".into(), "v1".into()));
        assert_eq!(parse_group_version("v1").unwrap(), ("".into(), "v1".into()));
        assert!(parse_group_version("a/b/c").is_err());
        assert_eq!(known_plural("apps", "StatefulSet"), Some("statefulsets"));
        assert_eq!(known_plural("", "Deployment"), None);
    }
}
