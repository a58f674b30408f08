//! The ephemeral volume controller (upstream `pkg/controller/volume/ephemeral`): for each
//! generic ephemeral volume of a pod, the PersistentVolumeClaim `<pod>-<volume>` from the
//! volume's claim template, owned (and so garbage-collected) by the pod.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod, Volume};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::{Api, PostParams};

use crate::controller::{self, Context, Error};
use crate::events::Type;
use crate::informers::{Event, Informer, key_of, split_key};
use crate::owners;

const COMPONENT: &str = "ephemeral_volume";

struct Controller {
    client: kube::Client,
    ctx: Context,
    pods: Arc<Informer<Pod>>,
    claims: Arc<Informer<PersistentVolumeClaim>>,
}

fn has_ephemeral(pod: &Pod) -> bool {
    pod.spec.as_ref().and_then(|s| s.volumes.as_ref()).into_iter().flatten().any(|v| v.ephemeral.is_some())
}

pub fn start(ctx: &Context) -> Result<(), Error> {
    let pods = ctx.informers.get::<Pod>();
    let claims = ctx.informers.get::<PersistentVolumeClaim>();
    let queue = ctx.queue("ephemeral_volume");
    {
        let queue = queue.clone();
        pods.add_handler(move |ev| match ev {
            Event::Add(p) | Event::Update(_, p) => {
                if p.metadata.deletion_timestamp.is_none() && has_ephemeral(p) {
                    queue.add(key_of(&***p));
                }
            }
            Event::Delete(_) => {}
        });
    }
    {
        // A deleted claim of a live pod is made again.
        let (queue, pods) = (queue.clone(), pods.clone());
        claims.add_handler(move |ev| {
            if let Event::Delete(c) = ev {
                let ns = c.metadata.namespace.as_deref().unwrap_or_default();
                if let Some(r) = owners::controller_of(&c.metadata).filter(|r| r.kind == "Pod")
                    && pods.get_namespaced(ns, &r.name).is_some()
                {
                    queue.add(format!("{ns}/{}", r.name));
                }
            }
        });
    }
    let ctrl = Arc::new(Controller { client: ctx.client.clone(), ctx: ctx.clone(), pods, claims });
    controller::run_workers(ctx, queue, ctx.options.concurrent_ephemeralvolume_syncs, move |key| {
        let ctrl = ctrl.clone();
        async move { ctrl.sync(&key).await }
    });
    Ok(())
}

/// The claim name of a pod's ephemeral volume.
pub fn claim_name(pod: &Pod, volume: &Volume) -> String {
    format!("{}-{}", pod.metadata.name.as_deref().unwrap_or_default(), volume.name)
}

/// The claim upstream's controller makes: the template's labels, annotations and spec,
/// controlled by the pod.
pub fn claim_for(pod: &Pod, volume: &Volume) -> Option<PersistentVolumeClaim> {
    let template = volume.ephemeral.as_ref()?.volume_claim_template.as_ref()?;
    let meta = template.metadata.clone().unwrap_or_default();
    Some(PersistentVolumeClaim {
        metadata: ObjectMeta {
            name: Some(claim_name(pod, volume)),
            namespace: pod.metadata.namespace.clone(),
            labels: meta.labels,
            annotations: meta.annotations,
            owner_references: Some(vec![OwnerReference {
                api_version: "v1".into(),
                kind: "Pod".into(),
                name: pod.metadata.name.clone().unwrap_or_default(),
                uid: pod.metadata.uid.clone().unwrap_or_default(),
                controller: Some(true),
                block_owner_deletion: Some(true),
            }]),
            ..Default::default()
        },
        spec: Some(template.spec.clone()),
        status: None,
    })
}

impl Controller {
    async fn sync(&self, key: &str) -> Result<(), Error> {
        let (ns, _) = split_key(key);
        let Some(pod) = self.pods.get(key) else { return Ok(()) };
        if pod.metadata.deletion_timestamp.is_some() {
            return Ok(());
        }
        let api: Api<PersistentVolumeClaim> = Api::namespaced(self.client.clone(), ns);
        for v in pod.spec.as_ref().and_then(|s| s.volumes.as_ref()).into_iter().flatten() {
            if let Err(e) = self.handle_volume(&api, &pod, v).await {
                self.ctx.recorder.event(
                    COMPONENT,
                    &*pod,
                    Type::Warning,
                    "FailedBinding",
                    format!("ephemeral volume {}: {e}", v.name),
                );
                return Err(Error::Other(format!("pod {key}, ephemeral volume {}: {e}", v.name)));
            }
        }
        Ok(())
    }

    async fn handle_volume(
        &self,
        api: &Api<PersistentVolumeClaim>,
        pod: &Pod,
        v: &Volume,
    ) -> Result<(), Error> {
        let Some(claim) = claim_for(pod, v) else { return Ok(()) };
        let name = claim_name(pod, v);
        let ns = pod.metadata.namespace.as_deref().unwrap_or_default();
        if let Some(existing) = self.claims.get_namespaced(ns, &name) {
            let uid = pod.metadata.uid.as_deref().unwrap_or_default();
            if !owners::is_controlled_by(&existing.metadata, uid) {
                return Err(Error::Other(format!(
                    "PVC {ns}/{name} was not created for pod {ns}/{} (pod is not owner)",
                    pod.metadata.name.as_deref().unwrap_or_default()
                )));
            }
            return Ok(());
        }
        match api.create(&PostParams::default(), &claim).await {
            Ok(_) => Ok(()),
            // Made by an earlier sync the informer has not shown yet.
            Err(err) if controller::api_code(&err) == Some(409) => Ok(()),
            Err(err) => Err(Error::Other(format!("create PVC {name}: {err}"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn claim_from_template_owned_by_pod() {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "ns", "uid": "u"},
            "spec": {"containers": [], "volumes": [{"name": "scratch", "ephemeral": {"volumeClaimTemplate": {
                "metadata": {"labels": {"a": "b"}},
                "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}}}]},
        }))
        .unwrap();
        assert!(has_ephemeral(&pod));
        let v = &pod.spec.as_ref().unwrap().volumes.as_ref().unwrap()[0];
        let c = claim_for(&pod, v).unwrap();
        assert_eq!(c.metadata.name.as_deref(), Some("p-scratch"));
        assert_eq!(c.metadata.labels.as_ref().unwrap()["a"], "b");
        let r = &c.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!((r.kind.as_str(), r.uid.as_str(), r.controller), ("Pod", "u", Some(true)));
        assert_eq!(c.spec.unwrap().access_modes.unwrap(), vec!["ReadWriteOnce"]);
    }
}
