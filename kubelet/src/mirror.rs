//! Mirror pods: the API's read-only copy of each static pod (annotation
//! `kubernetes.io/config.mirror` = the static pod's hash, owned by the Node), so the cluster
//! sees what the kubelet runs from files. A missing, outdated or deleted mirror pod is
//! (re)created; deleting it never stops the static pod.

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::{Api, DeleteParams, PostParams, Preconditions};

use crate::Kubelet;
use crate::pod_manager::{CONFIG_HASH_ANNOTATION, CONFIG_MIRROR_ANNOTATION, full_name};

/// Makes the API's mirror of `pod` (a static pod) current.
pub async fn sync(k: &Kubelet, pod: &Pod) {
    let Some(client) = &k.client else { return };
    if !k.pods.api_synced() {
        return;
    }
    let hash = pod
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(CONFIG_HASH_ANNOTATION))
        .cloned()
        .unwrap_or_default();
    let ns = pod.metadata.namespace.clone().unwrap_or_default();
    let name = pod.metadata.name.clone().unwrap_or_default();
    let api: Api<Pod> = Api::namespaced(client.clone(), &ns);
    if let Some(mirror) = k.pods.mirror_of(&full_name(pod)) {
        let current =
            mirror.metadata.annotations.as_ref().and_then(|a| a.get(CONFIG_MIRROR_ANNOTATION)) == Some(&hash);
        if current && mirror.metadata.deletion_timestamp.is_none() {
            return;
        }
        // Outdated or being deleted: remove it at once (it runs nothing), then recreate.
        let dp = DeleteParams {
            grace_period_seconds: Some(0),
            preconditions: Some(Preconditions { uid: mirror.metadata.uid.clone(), resource_version: None }),
            ..Default::default()
        };
        match api.delete(&name, &dp).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => {}
            Err(err) => {
                tracing::warn!(pod = %full_name(pod), %err, "deleting an outdated mirror pod");
                return;
            }
        }
    }
    let node_uid = match Api::<Node>::all(client.clone()).get_opt(&k.opts.node_name).await {
        Ok(Some(n)) => n.metadata.uid,
        _ => None,
    };
    let mut mirror = pod.clone();
    mirror.metadata = ObjectMeta {
        name: Some(name.clone()),
        namespace: Some(ns),
        labels: pod.metadata.labels.clone(),
        annotations: {
            let mut a = pod.metadata.annotations.clone().unwrap_or_default();
            a.insert(CONFIG_MIRROR_ANNOTATION.into(), hash);
            Some(a)
        },
        owner_references: node_uid.map(|uid| {
            vec![OwnerReference {
                api_version: "v1".into(),
                kind: "Node".into(),
                name: k.opts.node_name.clone(),
                uid,
                controller: Some(true),
                block_owner_deletion: None,
            }]
        }),
        ..Default::default()
    };
    mirror.status = None;
    match api.create(&PostParams::default(), &mirror).await {
        Ok(_) => tracing::info!(pod = %full_name(pod), "created mirror pod"),
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        Err(err) => tracing::warn!(pod = %full_name(pod), %err, "creating mirror pod"),
    }
}

/// Deletes mirror pods whose static pod no longer exists, as upstream's pod cleanup does.
pub async fn cleanup_orphans(k: &Kubelet) {
    let Some(client) = &k.client else { return };
    if !k.pods.api_synced() {
        return;
    }
    for mirror in k.pods.orphan_mirrors() {
        if mirror.metadata.deletion_timestamp.is_some()
            && mirror.metadata.deletion_grace_period_seconds == Some(0)
        {
            continue;
        }
        let api: Api<Pod> =
            Api::namespaced(client.clone(), mirror.metadata.namespace.as_deref().unwrap_or(""));
        let dp = DeleteParams {
            grace_period_seconds: Some(0),
            preconditions: Some(Preconditions { uid: mirror.metadata.uid.clone(), resource_version: None }),
            ..Default::default()
        };
        match api.delete(mirror.metadata.name.as_deref().unwrap_or(""), &dp).await {
            Ok(_) => tracing::info!(pod = %full_name(&mirror), "deleted orphaned mirror pod"),
            Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => {}
            Err(err) => tracing::warn!(pod = %full_name(&mirror), %err, "deleting orphaned mirror pod"),
        }
    }
}
