//! A local-path dynamic provisioner (the kind of provisioner kind and k3s ship as their
//! default StorageClass), run once per node as `local-path-provisioner --node-name=<node>`.
//!
//! Why one per node, outside kube-controller-manager: a local volume is a directory on one
//! node's disk. The instance on that node makes the directory when a claim's pod is
//! scheduled there (the scheduler writes `volume.kubernetes.io/selected-node` on claims of
//! a `WaitForFirstConsumer` class, and the PV controller names this provisioner in
//! `volume.kubernetes.io/storage-provisioner`), creates a PersistentVolume pre-bound to the
//! claim with node affinity to the node, and removes the directory when a released volume
//! with the `Delete` policy goes. Nothing needs a helper pod or an image, and the
//! controller-manager never touches node disks. Claims of an `Immediate` class have no node
//! and are not provisioned (as upstream's local volume provisioners).
//!
//! The volume is a `hostPath` (type `DirectoryOrCreate`) by default, or a `local` volume
//! when the class has the parameter `volumeType: local`; both carry the node affinity.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{
    HostPathVolumeSource, LocalVolumeSource, Node, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm,
    PersistentVolume, PersistentVolumeClaim, PersistentVolumeSpec, VolumeNodeAffinity,
};
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DeleteParams, PostParams};

use component_base::events::{Recorder, Type};
use component_base::shutdown::Shutdown;
use component_base::volume::{
    self as vol, BETA_STORAGE_PROVISIONER, PROVISIONED_BY, SELECTED_NODE, STORAGE_PROVISIONER,
};

use crate::informers::{Event, Factory, Informer, key_of};
use crate::workqueue::Queue;

/// The provisioner name of the default class this project ships.
pub const DEFAULT_NAME: &str = "k8s-rs.io/local-path";
/// The node whose disk holds a volume (so only that node's instance deletes it).
pub const NODE_ANNOTATION: &str = "local-path.k8s-rs.io/node";
const HOSTNAME_LABEL: &str = "kubernetes.io/hostname";

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Api(#[from] kube::Error),
    #[error(transparent)]
    Client(#[from] component_base::client::Error),
    #[error("{path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{0}")]
    Refused(String),
}

/// What the provisioner is started with.
#[derive(Debug, Clone)]
pub struct Config {
    pub kubeconfig: Option<PathBuf>,
    pub master: Option<String>,
    /// The node this instance serves; its volumes live under `base_dir` on it.
    pub node_name: String,
    /// The name StorageClasses give as `provisioner`.
    pub provisioner_name: String,
    pub base_dir: PathBuf,
    pub kube_api_qps: f32,
    pub kube_api_burst: u32,
}

struct Provisioner {
    client: kube::Client,
    cfg: Config,
    recorder: Recorder,
    component: String,
    claims: Arc<Informer<PersistentVolumeClaim>>,
    volumes: Arc<Informer<PersistentVolume>>,
    classes: Arc<Informer<StorageClass>>,
}

/// Runs the provisioner until `shutdown` fires.
pub async fn run(cfg: Config, shutdown: Shutdown) -> Result<(), Error> {
    if cfg.node_name.is_empty() {
        return Err(Error::Refused("--node-name is required".into()));
    }
    std::fs::create_dir_all(&cfg.base_dir)
        .map_err(|source| Error::Io { path: cfg.base_dir.display().to_string(), source })?;
    let client = component_base::client::from_flags_rate_limited(
        cfg.kubeconfig.as_deref(),
        cfg.master.as_deref(),
        cfg.kube_api_qps,
        cfg.kube_api_burst,
    )
    .await?;
    let informers = Factory::new(client.clone(), shutdown.clone());
    let claims = informers.get::<PersistentVolumeClaim>();
    let volumes = informers.get::<PersistentVolume>();
    let classes = informers.get::<StorageClass>();
    let queue = Queue::new("local_path_provisioner", None);
    {
        let queue = queue.clone();
        claims.add_handler(move |ev| {
            if let Event::Add(c) | Event::Update(_, c) = ev {
                queue.add(format!("claim:{}", key_of(&***c)));
            }
        });
    }
    {
        let queue = queue.clone();
        volumes.add_handler(move |ev| {
            if let Event::Add(v) | Event::Update(_, v) = ev {
                queue.add(format!("volume:{}", key_of(&***v)));
            }
        });
    }
    let component = format!("{}_{}", cfg.provisioner_name, cfg.node_name);
    let p = Arc::new(Provisioner {
        recorder: Recorder::start(client.clone()),
        client,
        cfg,
        component,
        claims,
        volumes,
        classes,
    });
    informers.start();
    informers.wait_synced().await;
    tracing::info!(node = %p.cfg.node_name, provisioner = %p.cfg.provisioner_name, dir = %p.cfg.base_dir.display(), "provisioning");
    {
        let (queue, shutdown) = (queue.clone(), shutdown.clone());
        tokio::spawn(async move {
            shutdown.wait().await;
            queue.shut_down();
        });
    }
    // One worker: provisioning is a few API calls and a mkdir, and one at a time keeps the
    // directory and the volume of a claim from racing each other.
    while let Some(key) = queue.get().await {
        let result = match key.split_once(':') {
            Some(("claim", k)) => p.sync_claim(k).await,
            Some(("volume", k)) => p.sync_volume(k).await,
            _ => Ok(()),
        };
        match result {
            Ok(()) => queue.forget(&key),
            Err(err) => {
                tracing::warn!(%key, %err, "retrying");
                queue.add_rate_limited(key.clone());
            }
        }
        queue.done(&key);
    }
    Ok(())
}

/// The volume name for a claim, as upstream's external provisioners name theirs.
pub fn volume_name(claim: &PersistentVolumeClaim) -> String {
    format!("pvc-{}", claim.metadata.uid.as_deref().unwrap_or_default())
}

/// The directory of a claim's volume under `base`: `<volume>_<namespace>_<claim>`.
pub fn volume_dir(base: &Path, claim: &PersistentVolumeClaim) -> PathBuf {
    base.join(format!(
        "{}_{}_{}",
        volume_name(claim),
        claim.metadata.namespace.as_deref().unwrap_or_default(),
        claim.metadata.name.as_deref().unwrap_or_default()
    ))
}

/// The PersistentVolume for `claim` at `dir` on the node labelled `hostname`, pre-bound to
/// the claim (the PV controller completes the binding).
pub fn volume_for(
    claim: &PersistentVolumeClaim,
    class: &StorageClass,
    provisioner: &str,
    node: &str,
    hostname: &str,
    dir: &Path,
) -> PersistentVolume {
    let spec = claim.spec.clone().unwrap_or_default();
    let capacity: BTreeMap<_, _> = spec
        .resources
        .as_ref()
        .and_then(|r| r.requests.as_ref())
        .and_then(|r| r.get("storage"))
        .map(|q| [("storage".to_string(), q.clone())].into())
        .unwrap_or_default();
    let path = dir.display().to_string();
    let local = class
        .parameters
        .as_ref()
        .and_then(|p| p.get("volumeType"))
        .is_some_and(|t| t.eq_ignore_ascii_case("local"));
    let mut pv_spec = PersistentVolumeSpec {
        access_modes: spec.access_modes.clone(),
        capacity: Some(capacity),
        claim_ref: Some(vol::claim_ref(claim)),
        persistent_volume_reclaim_policy: Some(
            class.reclaim_policy.clone().unwrap_or_else(|| "Delete".into()),
        ),
        storage_class_name: class.metadata.name.clone(),
        mount_options: class.mount_options.clone(),
        volume_mode: Some("Filesystem".into()),
        node_affinity: Some(VolumeNodeAffinity {
            required: Some(NodeSelector {
                node_selector_terms: vec![NodeSelectorTerm {
                    match_expressions: Some(vec![NodeSelectorRequirement {
                        key: HOSTNAME_LABEL.into(),
                        operator: "In".into(),
                        values: Some(vec![hostname.into()]),
                    }]),
                    ..Default::default()
                }],
            }),
        }),
        ..Default::default()
    };
    if local {
        pv_spec.local = Some(LocalVolumeSource { path, fs_type: None });
    } else {
        pv_spec.host_path = Some(HostPathVolumeSource { path, type_: Some("DirectoryOrCreate".into()) });
    }
    PersistentVolume {
        metadata: ObjectMeta {
            name: Some(volume_name(claim)),
            annotations: Some(
                [
                    (PROVISIONED_BY.to_string(), provisioner.to_string()),
                    (NODE_ANNOTATION.to_string(), node.to_string()),
                ]
                .into(),
            ),
            ..Default::default()
        },
        spec: Some(pv_spec),
        status: None,
    }
}

fn annotation<'a>(meta: &'a ObjectMeta, key: &str) -> Option<&'a str> {
    meta.annotations.as_ref()?.get(key).map(String::as_str)
}

impl Provisioner {
    fn event<K: kube::Resource<DynamicType = ()>>(&self, obj: &K, kind: Type, reason: &str, msg: String) {
        self.recorder.event(&self.component, obj, kind, reason, msg);
    }

    /// Whether a claim is this instance's to provision now.
    fn wants(&self, claim: &PersistentVolumeClaim) -> Option<Arc<StorageClass>> {
        let meta = &claim.metadata;
        let asked = [STORAGE_PROVISIONER, BETA_STORAGE_PROVISIONER]
            .iter()
            .any(|k| annotation(meta, k) == Some(self.cfg.provisioner_name.as_str()));
        let unbound = claim.spec.as_ref().and_then(|s| s.volume_name.as_deref()).is_none_or(str::is_empty);
        if !asked || !unbound || meta.deletion_timestamp.is_some() {
            return None;
        }
        if annotation(meta, SELECTED_NODE) != Some(self.cfg.node_name.as_str()) {
            return None;
        }
        self.classes.get(vol::claim_class(claim)).filter(|c| c.provisioner == self.cfg.provisioner_name)
    }

    async fn sync_claim(&self, key: &str) -> Result<(), Error> {
        let Some(claim) = self.claims.get(key) else { return Ok(()) };
        let Some(class) = self.wants(&claim) else { return Ok(()) };
        let name = volume_name(&claim);
        if self.volumes.get(&name).is_some() {
            return Ok(());
        }
        if claim.spec.as_ref().and_then(|s| s.volume_mode.as_deref()) == Some("Block") {
            self.event(
                &*claim,
                Type::Warning,
                "ProvisioningFailed",
                "failed to provision volume: local-path volumes are Filesystem volumes; Block is not supported".into(),
            );
            return Ok(());
        }
        self.event(
            &*claim,
            Type::Normal,
            "Provisioning",
            format!("External provisioner is provisioning volume for claim {key:?}"),
        );
        let dir = volume_dir(&self.cfg.base_dir, &claim);
        let mkdir = dir.clone();
        tokio::task::spawn_blocking(move || {
            std::fs::create_dir_all(&mkdir)?;
            // Any container user may write, as upstream's local-path provisioners allow.
            std::fs::set_permissions(&mkdir, std::fs::Permissions::from_mode(0o777))
        })
        .await
        .map_err(|e| Error::Refused(e.to_string()))?
        .map_err(|source| Error::Io { path: dir.display().to_string(), source })?;
        let node: Option<Node> = Api::<Node>::all(self.client.clone()).get_opt(&self.cfg.node_name).await?;
        let hostname = node
            .as_ref()
            .and_then(|n| n.metadata.labels.as_ref())
            .and_then(|l| l.get(HOSTNAME_LABEL))
            .cloned()
            .unwrap_or_else(|| self.cfg.node_name.clone());
        let pv = volume_for(&claim, &class, &self.cfg.provisioner_name, &self.cfg.node_name, &hostname, &dir);
        match Api::<PersistentVolume>::all(self.client.clone()).create(&PostParams::default(), &pv).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 409 => return Ok(()),
            Err(err) => {
                self.event(
                    &*claim,
                    Type::Warning,
                    "ProvisioningFailed",
                    format!("failed to provision volume: {err}"),
                );
                return Err(Error::Api(err));
            }
        }
        self.event(
            &*claim,
            Type::Normal,
            "ProvisioningSucceeded",
            format!("Successfully provisioned volume {name}"),
        );
        Ok(())
    }

    /// Deletes a released `Delete` volume this node made: its directory, then the object.
    async fn sync_volume(&self, name: &str) -> Result<(), Error> {
        let Some(pv) = self.volumes.get(name) else { return Ok(()) };
        let ours = annotation(&pv.metadata, PROVISIONED_BY) == Some(self.cfg.provisioner_name.as_str())
            && annotation(&pv.metadata, NODE_ANNOTATION) == Some(self.cfg.node_name.as_str());
        let released = pv.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Released");
        let delete =
            pv.spec.as_ref().and_then(|s| s.persistent_volume_reclaim_policy.as_deref()) == Some("Delete");
        if !ours || !released || !delete || pv.metadata.deletion_timestamp.is_some() {
            return Ok(());
        }
        let spec = pv.spec.as_ref();
        let path = spec
            .and_then(|s| {
                s.host_path
                    .as_ref()
                    .map(|h| h.path.clone())
                    .or_else(|| s.local.as_ref().map(|l| l.path.clone()))
            })
            .unwrap_or_default();
        let dir = PathBuf::from(&path);
        // Only a directory this provisioner made: a direct child of the base directory.
        if dir.parent() != Some(self.cfg.base_dir.as_path()) || dir.file_name().is_none() {
            self.event(
                &*pv,
                Type::Warning,
                "VolumeFailedDelete",
                format!(
                    "{path} is not a directory of this provisioner (under {})",
                    self.cfg.base_dir.display()
                ),
            );
            return Ok(());
        }
        let rm = dir.clone();
        tokio::task::spawn_blocking(move || match std::fs::remove_dir_all(&rm) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        })
        .await
        .map_err(|e| Error::Refused(e.to_string()))?
        .map_err(|source| Error::Io { path: path.clone(), source })?;
        match Api::<PersistentVolume>::all(self.client.clone()).delete(name, &DeleteParams::default()).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
            Err(err) => Err(Error::Api(err)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn volume_is_prebound_with_node_affinity() {
        let claim: PersistentVolumeClaim = serde_json::from_value(json!({
            "metadata": {"name": "www-web-0", "namespace": "ns", "uid": "u1"},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}},
                "storageClassName": "standard"},
        }))
        .unwrap();
        let mut class: StorageClass = serde_json::from_value(json!({
            "metadata": {"name": "standard"}, "provisioner": DEFAULT_NAME, "reclaimPolicy": "Retain",
            "volumeBindingMode": "WaitForFirstConsumer",
        }))
        .unwrap();
        let dir = volume_dir(Path::new("/data"), &claim);
        assert_eq!(dir, Path::new("/data/pvc-u1_ns_www-web-0"));
        let pv = volume_for(&claim, &class, DEFAULT_NAME, "n1", "host-1", &dir);
        let v = serde_json::to_value(&pv).unwrap();
        assert_eq!(v["metadata"]["name"], "pvc-u1");
        assert_eq!(v["metadata"]["annotations"][PROVISIONED_BY], DEFAULT_NAME);
        assert_eq!(v["spec"]["claimRef"]["uid"], "u1");
        assert_eq!(v["spec"]["capacity"]["storage"], "1Gi");
        assert_eq!(v["spec"]["persistentVolumeReclaimPolicy"], "Retain");
        assert_eq!(v["spec"]["hostPath"]["path"], "/data/pvc-u1_ns_www-web-0");
        assert_eq!(
            v["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"][0]["matchExpressions"][0]["values"][0],
            "host-1"
        );
        class.parameters = Some([("volumeType".to_string(), "local".to_string())].into());
        class.reclaim_policy = None;
        let v = serde_json::to_value(volume_for(&claim, &class, DEFAULT_NAME, "n1", "host-1", &dir)).unwrap();
        assert_eq!(v["spec"]["local"]["path"], "/data/pvc-u1_ns_www-web-0");
        assert!(v["spec"]["hostPath"].is_null());
        assert_eq!(v["spec"]["persistentVolumeReclaimPolicy"], "Delete");
    }
}
