//! The PersistentVolume binder (upstream `pkg/controller/volume/persistentvolume`): binds
//! claims to volumes (both ways: `spec.claimRef` on the volume, `spec.volumeName` on the
//! claim, then the phases), hands claims of a class with a provisioner to that (external)
//! provisioner, assigns the default class to class-less claims retroactively, and applies
//! a released volume's reclaim policy.
//!
//! Claims of a `WaitForFirstConsumer` class are left to the scheduler, which picks a volume
//! (pre-binding it) or a node (`volume.kubernetes.io/selected-node`) for the provisioner;
//! this controller then completes the binding. One worker per queue, as upstream; both
//! queues are refilled every `--pvclaimbinder-sync-period`.

use std::collections::HashMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{
    PersistentVolume, PersistentVolumeClaim, PersistentVolumeClaimStatus, PersistentVolumeStatus, Pod,
};
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, PostParams};
use parking_lot::Mutex;

use component_base::volume::{
    self as vol, BETA_IS_DEFAULT_CLASS, BETA_STORAGE_PROVISIONER, BIND_COMPLETED, BOUND_BY_CONTROLLER,
    IS_DEFAULT_CLASS, PROVISIONED_BY, SELECTED_NODE, STORAGE_PROVISIONER,
};

use crate::controller::{self, Context, Error};
use crate::events::Type;
use crate::informers::{Event, Informer, key_of, split_key};
use crate::workqueue::Queue;

const COMPONENT: &str = "persistentvolume-controller";
/// Upstream's hostPath deleter works only under /tmp (it deletes on the controller's host).
const HOST_PATH_DELETABLE: &str = "/tmp/";

struct Controller {
    client: kube::Client,
    ctx: Context,
    volumes: Arc<Informer<PersistentVolume>>,
    claims: Arc<Informer<PersistentVolumeClaim>>,
    classes: Arc<Informer<StorageClass>>,
    pods: Arc<Informer<Pod>>,
    claim_queue: Arc<Queue>,
    /// The last informational event per claim UID: a claim waits through many periodic
    /// syncs, and upstream's recorder folds the repeats into one event; this one does not.
    reported: Mutex<HashMap<String, String>>,
}

pub fn start(ctx: &Context) -> Result<(), Error> {
    let volumes = ctx.informers.get::<PersistentVolume>();
    let claims = ctx.informers.get::<PersistentVolumeClaim>();
    let classes = ctx.informers.get::<StorageClass>();
    let pods = ctx.informers.get::<Pod>();
    let volume_queue = ctx.queue("volumes");
    let claim_queue = ctx.queue("claims");
    {
        let (vq, cq) = (volume_queue.clone(), claim_queue.clone());
        volumes.add_handler(move |ev| match ev {
            Event::Add(v) | Event::Update(_, v) => vq.add(key_of(&***v)),
            // The claim of a deleted volume is lost.
            Event::Delete(v) => {
                if let Some(r) = v.spec.as_ref().and_then(|s| s.claim_ref.as_ref()) {
                    cq.add(format!(
                        "{}/{}",
                        r.namespace.as_deref().unwrap_or_default(),
                        r.name.as_deref().unwrap_or_default()
                    ));
                }
            }
        });
    }
    {
        let (vq, cq) = (volume_queue.clone(), claim_queue.clone());
        claims.add_handler(move |ev| match ev {
            Event::Add(c) | Event::Update(_, c) => cq.add(key_of(&***c)),
            // The volume of a deleted claim is released.
            Event::Delete(c) => {
                if let Some(v) =
                    c.spec.as_ref().and_then(|s| s.volume_name.as_ref()).filter(|v| !v.is_empty())
                {
                    vq.add(v.clone());
                }
            }
        });
    }
    {
        // A new or changed class (a default appearing, say) may let pending claims move
        // now rather than at the next periodic sync.
        let (cq, claims) = (claim_queue.clone(), claims.clone());
        classes.add_handler(move |ev| {
            if let Event::Add(_) | Event::Update(..) = ev {
                for c in claims.list().iter().filter(|c| !has_annotation(&c.metadata, BIND_COMPLETED)) {
                    cq.add(key_of(&**c));
                }
            }
        });
    }
    let ctrl = Arc::new(Controller {
        client: ctx.client.clone(),
        ctx: ctx.clone(),
        volumes,
        claims,
        classes,
        pods,
        claim_queue: claim_queue.clone(),
        reported: Mutex::default(),
    });
    {
        let (ctrl, vq, cq, shutdown) =
            (ctrl.clone(), volume_queue.clone(), claim_queue.clone(), ctx.shutdown.clone());
        let period = ctx.options.pvclaimbinder_sync_period;
        tokio::spawn(async move {
            ctrl.ctx.informers.wait_synced().await;
            loop {
                tokio::select! {
                    () = shutdown.wait() => return,
                    () = tokio::time::sleep(period) => {}
                }
                for v in ctrl.volumes.list() {
                    vq.add(key_of(&*v));
                }
                let live: std::collections::HashSet<String> =
                    ctrl.claims.list().iter().filter_map(|c| c.metadata.uid.clone()).collect();
                ctrl.reported.lock().retain(|uid, _| live.contains(uid));
                for c in ctrl.claims.list() {
                    cq.add(key_of(&*c));
                }
            }
        });
    }
    {
        let ctrl = ctrl.clone();
        controller::run_workers(ctx, volume_queue, 1, move |key| {
            let ctrl = ctrl.clone();
            async move { ctrl.sync_volume(&key).await }
        });
    }
    controller::run_workers(ctx, claim_queue, 1, move |key| {
        let ctrl = ctrl.clone();
        async move { ctrl.sync_claim(&key).await }
    });
    Ok(())
}

fn name_of(meta: &kube::api::ObjectMeta) -> String {
    meta.name.clone().unwrap_or_default()
}

fn has_annotation(meta: &kube::api::ObjectMeta, key: &str) -> bool {
    meta.annotations.as_ref().is_some_and(|a| a.contains_key(key))
}

fn phase_of_volume(pv: &PersistentVolume) -> &str {
    pv.status.as_ref().and_then(|s| s.phase.as_deref()).unwrap_or_default()
}

fn reclaim_policy(pv: &PersistentVolume) -> &str {
    pv.spec.as_ref().and_then(|s| s.persistent_volume_reclaim_policy.as_deref()).unwrap_or("Retain")
}

fn claim_ref_key(pv: &PersistentVolume) -> Option<String> {
    let r = pv.spec.as_ref()?.claim_ref.as_ref()?;
    Some(format!("{}/{}", r.namespace.as_deref().unwrap_or_default(), r.name.as_deref().unwrap_or_default()))
}

fn claim_ref_uid(pv: &PersistentVolume) -> &str {
    pv.spec.as_ref().and_then(|s| s.claim_ref.as_ref()).and_then(|r| r.uid.as_deref()).unwrap_or_default()
}

/// The default class (upstream `GetDefaultClass`): the newest annotated one, by name on a tie.
pub fn default_class(classes: &[Arc<StorageClass>]) -> Option<Arc<StorageClass>> {
    let is_default = |c: &StorageClass| {
        let a = c.metadata.annotations.as_ref();
        [IS_DEFAULT_CLASS, BETA_IS_DEFAULT_CLASS]
            .iter()
            .any(|k| a.and_then(|a| a.get(*k)).map(String::as_str) == Some("true"))
    };
    let created = |c: &StorageClass| c.metadata.creation_timestamp.as_ref().map(|t| t.0);
    let mut defaults: Vec<&Arc<StorageClass>> = classes.iter().filter(|c| is_default(c)).collect();
    defaults.sort_by(|a, b| created(b).cmp(&created(a)).then_with(|| a.metadata.name.cmp(&b.metadata.name)));
    defaults.first().map(|c| (*c).clone())
}

impl Controller {
    fn pv_api(&self) -> Api<PersistentVolume> {
        Api::all(self.client.clone())
    }

    fn pvc_api(&self, ns: &str) -> Api<PersistentVolumeClaim> {
        Api::namespaced(self.client.clone(), ns)
    }

    /// Emits an informational event about a claim once per distinct message.
    fn report_once(&self, claim: &PersistentVolumeClaim, kind: Type, reason: &str, message: String) {
        let uid = claim.metadata.uid.clone().unwrap_or_default();
        let line = format!("{reason}: {message}");
        if self.reported.lock().insert(uid, line.clone()).as_deref() == Some(line.as_str()) {
            return;
        }
        self.ctx.recorder.event(COMPONENT, claim, kind, reason, message);
    }

    fn class(&self, claim: &PersistentVolumeClaim) -> Option<Arc<StorageClass>> {
        let name = vol::claim_class(claim);
        (!name.is_empty()).then(|| self.classes.get(name)).flatten()
    }

    fn delays_binding(&self, claim: &PersistentVolumeClaim) -> bool {
        self.class(claim).is_some_and(|c| c.volume_binding_mode.as_deref() == Some("WaitForFirstConsumer"))
    }

    async fn sync_claim(&self, key: &str) -> Result<(), Error> {
        let Some(claim) = self.claims.get(key) else { return Ok(()) };
        if has_annotation(&claim.metadata, BIND_COMPLETED) {
            self.sync_bound_claim(&claim).await
        } else {
            self.sync_unbound_claim(&claim).await
        }
    }

    async fn sync_unbound_claim(&self, claim: &PersistentVolumeClaim) -> Result<(), Error> {
        let requested = claim.spec.as_ref().and_then(|s| s.volume_name.clone()).filter(|v| !v.is_empty());
        let Some(volume_name) = requested else {
            let delay = self.delays_binding(claim);
            let volumes = self.volumes.list();
            if let Some(pv) = vol::find_best_match(claim, &volumes, delay) {
                return self.bind(&pv, claim).await;
            }
            if self.assign_default_class(claim).await? {
                return Ok(());
            }
            if delay && !has_annotation(&claim.metadata, SELECTED_NODE) {
                self.report_wait_for_consumer(claim);
            } else if !vol::claim_class(claim).is_empty() {
                return self.provision(claim).await;
            } else {
                self.report_once(
                    claim,
                    Type::Normal,
                    "FailedBinding",
                    "no persistent volumes available for this claim and no storage class is set".into(),
                );
            }
            self.update_claim_status(claim, "Pending", None).await?;
            return Ok(());
        };
        let Some(pv) = self.volumes.get(&volume_name) else {
            // Asked for a volume that does not exist (yet): wait for it.
            self.update_claim_status(claim, "Pending", None).await?;
            return Ok(());
        };
        let claimed = pv.spec.as_ref().and_then(|s| s.claim_ref.as_ref()).is_some();
        if !claimed {
            if let Some(why) = vol::volume_unsatisfying(&pv, claim) {
                self.report_once(
                    claim,
                    Type::Warning,
                    "VolumeMismatch",
                    format!("Cannot bind to requested volume {volume_name:?}: {why}"),
                );
                self.update_claim_status(claim, "Pending", None).await?;
                return Ok(());
            }
            return self.bind(&pv, claim).await;
        }
        if vol::is_bound_to(&pv, claim) {
            return self.bind(&pv, claim).await;
        }
        let msg = format!("volume {volume_name:?} already bound to a different claim.");
        self.report_once(claim, Type::Warning, "FailedBinding", msg);
        if has_annotation(&claim.metadata, BOUND_BY_CONTROLLER) {
            return Err(Error::Other(format!(
                "invalid binding of claim {} to volume {volume_name:?}: volume already claimed by {:?}",
                key_of(claim),
                claim_ref_key(&pv)
            )));
        }
        self.update_claim_status(claim, "Pending", None).await?;
        Ok(())
    }

    fn report_wait_for_consumer(&self, claim: &PersistentVolumeClaim) {
        let ns = claim.metadata.namespace.as_deref().unwrap_or_default();
        let claim_name = name_of(&claim.metadata);
        let waiting: Vec<String> = self
            .pods
            .list_namespace(ns)
            .iter()
            .filter(|p| crate::podutil::node_name(p).is_empty() && !crate::podutil::is_terminal(p))
            .filter(|p| {
                let pod_name = name_of(&p.metadata);
                p.spec.as_ref().and_then(|s| s.volumes.as_ref()).into_iter().flatten().any(|v| {
                    v.persistent_volume_claim.as_ref().is_some_and(|c| c.claim_name == claim_name)
                        || (v.ephemeral.is_some() && format!("{pod_name}-{}", v.name) == claim_name)
                })
            })
            .map(|p| name_of(&p.metadata))
            .collect();
        let (reason, message) = match waiting.len() {
            0 => (
                "WaitForFirstConsumer",
                "waiting for first consumer to be created before binding".to_string(),
            ),
            1 => ("WaitForPodScheduled", format!("waiting for pod {} to be scheduled", waiting[0])),
            _ => ("WaitForPodScheduled", format!("waiting for pods {} to be scheduled", waiting.join(","))),
        };
        self.report_once(claim, Type::Normal, reason, message);
    }

    /// A claim that names no class gets the default one once it exists (upstream's
    /// retroactive default StorageClass assignment). Whether the claim was updated.
    async fn assign_default_class(&self, claim: &PersistentVolumeClaim) -> Result<bool, Error> {
        if vol::claim_has_class(claim) {
            return Ok(false);
        }
        let Some(class) = default_class(&self.classes.list()) else { return Ok(false) };
        let mut updated = claim.clone();
        updated.spec.get_or_insert_with(Default::default).storage_class_name = class.metadata.name.clone();
        let ns = claim.metadata.namespace.as_deref().unwrap_or_default();
        self.pvc_api(ns).replace(&name_of(&claim.metadata), &PostParams::default(), &updated).await?;
        Ok(true)
    }

    /// Hands the claim to its class's provisioner (upstream `provisionClaimOperationExternal`:
    /// no in-tree provisioner runs here, so every provisioner is external).
    async fn provision(&self, claim: &PersistentVolumeClaim) -> Result<(), Error> {
        let class_name = vol::claim_class(claim);
        let Some(class) = self.classes.get(class_name) else {
            self.report_once(
                claim,
                Type::Warning,
                "ProvisioningFailed",
                format!("storageclass.storage.k8s.io {class_name:?} not found"),
            );
            self.update_claim_status(claim, "Pending", None).await?;
            return Ok(());
        };
        let provisioner = class.provisioner.clone();
        if provisioner.starts_with("kubernetes.io/") {
            // An in-tree plugin name: none of them provisions in this controller-manager.
            self.report_once(
                claim,
                Type::Warning,
                "ProvisioningFailed",
                format!("no volume plugin matched name: {provisioner}"),
            );
            self.update_claim_status(claim, "Pending", None).await?;
            return Ok(());
        }
        let a = claim.metadata.annotations.as_ref();
        let annotated = [STORAGE_PROVISIONER, BETA_STORAGE_PROVISIONER]
            .iter()
            .all(|k| a.and_then(|a| a.get(*k)) == Some(&provisioner));
        if !annotated {
            let mut updated = claim.clone();
            let annotations = updated.metadata.annotations.get_or_insert_with(Default::default);
            annotations.insert(STORAGE_PROVISIONER.into(), provisioner.clone());
            annotations.insert(BETA_STORAGE_PROVISIONER.into(), provisioner.clone());
            let ns = claim.metadata.namespace.as_deref().unwrap_or_default();
            self.pvc_api(ns).replace(&name_of(&claim.metadata), &PostParams::default(), &updated).await?;
        }
        self.report_once(
            claim,
            Type::Normal,
            "ExternalProvisioning",
            format!(
                "Waiting for a volume to be created either by the external provisioner '{provisioner}' or manually by the system administrator. If volume creation is delayed, please verify that the provisioner is running and correctly registered."
            ),
        );
        Ok(())
    }

    async fn sync_bound_claim(&self, claim: &PersistentVolumeClaim) -> Result<(), Error> {
        let volume_name = claim.spec.as_ref().and_then(|s| s.volume_name.clone()).unwrap_or_default();
        let lost = |reason: &'static str, msg: &'static str| async move {
            self.update_claim_status(claim, "Lost", None).await?;
            self.report_once(claim, Type::Warning, reason, msg.into());
            Ok::<(), Error>(())
        };
        if volume_name.is_empty() {
            return lost(
                "ClaimLost",
                "Bound claim has lost reference to PersistentVolume. Data on the volume is lost!",
            )
            .await;
        }
        let Some(pv) = self.volumes.get(&volume_name) else {
            return lost(
                "ClaimLost",
                "Bound claim has lost its PersistentVolume. Data on the volume is lost!",
            )
            .await;
        };
        let bound_uid = claim_ref_uid(&pv);
        let has_ref = pv.spec.as_ref().and_then(|s| s.claim_ref.as_ref()).is_some();
        if !has_ref || bound_uid == claim.metadata.uid.as_deref().unwrap_or_default() {
            return self.bind(&pv, claim).await;
        }
        lost("ClaimMisbound", "Two claims are bound to the same volume, this one is bound incorrectly").await
    }

    /// Binds both ways and sets both phases (upstream `bind`); each step is skipped when
    /// already done, so a sync interrupted half-way completes on the next.
    async fn bind(&self, pv: &PersistentVolume, claim: &PersistentVolumeClaim) -> Result<(), Error> {
        let pv = self.bind_volume_to_claim(pv, claim).await?;
        let pv = self.update_volume_phase(&pv, "Bound", None).await?;
        let claim = self.bind_claim_to_volume(claim, &pv).await?;
        self.update_claim_status(&claim, "Bound", Some(&pv)).await?;
        Ok(())
    }

    async fn bind_volume_to_claim(
        &self,
        pv: &PersistentVolume,
        claim: &PersistentVolumeClaim,
    ) -> Result<PersistentVolume, Error> {
        let r = pv.spec.as_ref().and_then(|s| s.claim_ref.as_ref());
        let current = r.is_some_and(|r| {
            r.name == claim.metadata.name
                && r.namespace == claim.metadata.namespace
                && r.uid == claim.metadata.uid
        });
        if current {
            return Ok(pv.clone());
        }
        let prebound = vol::is_bound_to(pv, claim);
        let mut updated = pv.clone();
        updated.spec.get_or_insert_with(Default::default).claim_ref = Some(vol::claim_ref(claim));
        if !prebound {
            updated
                .metadata
                .annotations
                .get_or_insert_with(Default::default)
                .insert(BOUND_BY_CONTROLLER.into(), "yes".into());
        }
        Ok(self.pv_api().replace(&name_of(&pv.metadata), &PostParams::default(), &updated).await?)
    }

    async fn bind_claim_to_volume(
        &self,
        claim: &PersistentVolumeClaim,
        pv: &PersistentVolume,
    ) -> Result<PersistentVolumeClaim, Error> {
        let mut updated = claim.clone();
        let mut dirty = false;
        let volume_name = pv.metadata.name.clone();
        if claim.spec.as_ref().and_then(|s| s.volume_name.clone()) != volume_name {
            updated.spec.get_or_insert_with(Default::default).volume_name = volume_name;
            let a = updated.metadata.annotations.get_or_insert_with(Default::default);
            a.entry(BOUND_BY_CONTROLLER.into()).or_insert_with(|| "yes".into());
            dirty = true;
        }
        if !has_annotation(&updated.metadata, BIND_COMPLETED) {
            updated
                .metadata
                .annotations
                .get_or_insert_with(Default::default)
                .insert(BIND_COMPLETED.into(), "yes".into());
            dirty = true;
        }
        if !dirty {
            return Ok(claim.clone());
        }
        let ns = claim.metadata.namespace.as_deref().unwrap_or_default();
        let out =
            self.pvc_api(ns).replace(&name_of(&claim.metadata), &PostParams::default(), &updated).await?;
        self.ctx.recorder.event(
            COMPONENT,
            &out,
            Type::Normal,
            "Bound",
            format!("Successfully bound to volume {}", name_of(&pv.metadata)),
        );
        Ok(out)
    }

    /// Sets the claim's phase, and its access modes and capacity from the volume (the
    /// capacity only on becoming Bound: a resize may make them differ on purpose).
    async fn update_claim_status(
        &self,
        claim: &PersistentVolumeClaim,
        phase: &str,
        pv: Option<&PersistentVolume>,
    ) -> Result<PersistentVolumeClaim, Error> {
        let old = claim.status.clone().unwrap_or_default();
        let mut status = old.clone();
        status.phase = Some(phase.into());
        match pv {
            None => {
                status.access_modes = None;
                status.capacity = None;
            }
            Some(pv) => {
                status.access_modes = pv.spec.as_ref().and_then(|s| s.access_modes.clone());
                if old.phase.as_deref() != Some(phase) {
                    let cap = pv
                        .spec
                        .as_ref()
                        .and_then(|s| s.capacity.as_ref())
                        .and_then(|c| c.get("storage"))
                        .cloned();
                    let have = old.capacity.as_ref().and_then(|c| c.get("storage")).cloned();
                    if cap.is_some()
                        && cap.as_ref().and_then(|q| component_base::quantity::parse_value(&q.0))
                            != have.as_ref().and_then(|q| component_base::quantity::parse_value(&q.0))
                    {
                        status.capacity = pv.spec.as_ref().and_then(|s| s.capacity.clone());
                    }
                }
            }
        }
        if status == old {
            return Ok(claim.clone());
        }
        let mut updated = claim.clone();
        updated.status = Some(PersistentVolumeClaimStatus { ..status });
        let ns = claim.metadata.namespace.as_deref().unwrap_or_default();
        Ok(self
            .pvc_api(ns)
            .replace_status(&name_of(&claim.metadata), &PostParams::default(), &updated)
            .await?)
    }

    async fn update_volume_phase(
        &self,
        pv: &PersistentVolume,
        phase: &str,
        message: Option<String>,
    ) -> Result<PersistentVolume, Error> {
        let old = pv.status.clone().unwrap_or_default();
        if old.phase.as_deref() == Some(phase) && old.message == message {
            return Ok(pv.clone());
        }
        let mut updated = pv.clone();
        let transition = if old.phase.as_deref() == Some(phase) {
            old.last_phase_transition_time.clone()
        } else {
            Some(Time(
                Timestamp::from_second(Timestamp::now().as_second()).unwrap_or_else(|_| Timestamp::now()),
            ))
        };
        updated.status = Some(PersistentVolumeStatus {
            phase: Some(phase.into()),
            message,
            reason: old.reason.clone(),
            last_phase_transition_time: transition,
        });
        Ok(self.pv_api().replace_status(&name_of(&pv.metadata), &PostParams::default(), &updated).await?)
    }

    /// Takes the binding off a volume (upstream `unbindVolume`): a controller-made binding
    /// entirely; a user's pre-binding keeps its name, loses the UID.
    async fn unbind_volume(&self, pv: &PersistentVolume) -> Result<(), Error> {
        let mut updated = pv.clone();
        if has_annotation(&pv.metadata, BOUND_BY_CONTROLLER) {
            updated.spec.get_or_insert_with(Default::default).claim_ref = None;
            if let Some(a) = updated.metadata.annotations.as_mut() {
                a.remove(BOUND_BY_CONTROLLER);
                if a.is_empty() {
                    updated.metadata.annotations = None;
                }
            }
        } else if let Some(r) = updated.spec.as_mut().and_then(|s| s.claim_ref.as_mut()) {
            r.uid = None;
        }
        let saved = self.pv_api().replace(&name_of(&pv.metadata), &PostParams::default(), &updated).await?;
        self.update_volume_phase(&saved, "Available", None).await?;
        Ok(())
    }

    /// The claim a volume's claimRef names, from the informer, or from the API server when
    /// the informer may lag (a volume just made by a provisioner): a volume must never be
    /// reclaimed because of a stale cache.
    async fn claim_of_volume(&self, pv: &PersistentVolume) -> Result<Option<PersistentVolumeClaim>, Error> {
        let Some(key) = claim_ref_key(pv) else { return Ok(None) };
        let (ns, name) = split_key(&key);
        let mut claim = self.claims.get(&key).map(|c| (*c).clone());
        let phase = phase_of_volume(pv);
        if claim.is_none() && phase != "Released" && phase != "Failed" {
            claim = self.pvc_api(ns).get_opt(name).await?;
        }
        let uid = claim_ref_uid(pv);
        if let Some(c) = &claim
            && c.metadata.uid.as_deref() != Some(uid)
        {
            // Maybe a newer claim of the same name, maybe a stale cache: ask.
            claim = self.pvc_api(ns).get_opt(name).await?.filter(|c| c.metadata.uid.as_deref() == Some(uid));
        }
        Ok(claim)
    }

    async fn sync_volume(&self, name: &str) -> Result<(), Error> {
        let Some(pv) = self.volumes.get(name) else { return Ok(()) };
        let pv = (*pv).clone();
        if pv.spec.as_ref().and_then(|s| s.claim_ref.as_ref()).is_none() || claim_ref_uid(&pv).is_empty() {
            // Unused, or reserved for a claim whose sync will finish the binding.
            self.update_volume_phase(&pv, "Available", None).await?;
            return Ok(());
        }
        let Some(claim) = self.claim_of_volume(&pv).await? else {
            let pv = if phase_of_volume(&pv) != "Released" && phase_of_volume(&pv) != "Failed" {
                self.update_volume_phase(&pv, "Released", None).await?
            } else {
                pv
            };
            return self.reclaim(&pv).await;
        };
        let claim_volume = claim.spec.as_ref().and_then(|s| s.volume_name.clone()).unwrap_or_default();
        if claim_volume.is_empty() {
            if vol::volume_mode_mismatch(&claim, &pv) {
                self.ctx.recorder.event(
                    COMPONENT,
                    &pv,
                    Type::Warning,
                    "VolumeMismatch",
                    format!(
                        "Cannot bind PersistentVolume to requested PersistentVolumeClaim {:?} due to incompatible volumeMode.",
                        name_of(&claim.metadata)
                    ),
                );
                return Ok(());
            }
            // Bound on this side only (a provisioner's new volume, or a binding in
            // progress): the claim's sync completes it.
            self.claim_queue.add(key_of(&claim));
            return Ok(());
        }
        if claim_volume == name {
            self.update_volume_phase(&pv, "Bound", None).await?;
            return Ok(());
        }
        // The claim is bound to another volume.
        if has_annotation(&pv.metadata, PROVISIONED_BY) && reclaim_policy(&pv) == "Delete" {
            let pv = if phase_of_volume(&pv) != "Released" && phase_of_volume(&pv) != "Failed" {
                self.update_volume_phase(&pv, "Released", None).await?
            } else {
                pv
            };
            return self.reclaim(&pv).await;
        }
        self.unbind_volume(&pv).await
    }

    /// Applies a released volume's reclaim policy.
    async fn reclaim(&self, pv: &PersistentVolume) -> Result<(), Error> {
        match reclaim_policy(pv) {
            "Retain" => Ok(()),
            "Recycle" => {
                self.fail_volume(pv, "VolumeFailedRecycle", "No recycler plugin found for the volume!".into())
                    .await
            }
            "Delete" => self.delete_volume(pv).await,
            other => {
                self.fail_volume(
                    pv,
                    "VolumeUnknownReclaimPolicy",
                    format!("Volume has unrecognized PersistentVolumeReclaimPolicy {other:?}"),
                )
                .await
            }
        }
    }

    async fn fail_volume(&self, pv: &PersistentVolume, reason: &str, message: String) -> Result<(), Error> {
        if phase_of_volume(pv) == "Failed"
            && pv.status.as_ref().and_then(|s| s.message.as_deref()) == Some(message.as_str())
        {
            return Ok(());
        }
        self.ctx.recorder.event(COMPONENT, pv, Type::Warning, reason, message.clone());
        self.update_volume_phase(pv, "Failed", Some(message)).await?;
        Ok(())
    }

    /// Deletes a released volume (upstream `deleteVolumeOperation`): a provisioner's volume
    /// is its provisioner's to delete; a hostPath under /tmp is removed here, as upstream's
    /// in-tree hostPath deleter does; anything else has no deleter.
    async fn delete_volume(&self, pv: &PersistentVolume) -> Result<(), Error> {
        let provisioner = pv.metadata.annotations.as_ref().and_then(|a| a.get(PROVISIONED_BY));
        if provisioner.is_some_and(|p| !p.starts_with("kubernetes.io/")) {
            return Ok(());
        }
        let name = name_of(&pv.metadata);
        let Some(host_path) = pv.spec.as_ref().and_then(|s| s.host_path.as_ref()) else {
            let msg = format!(
                "error getting deleter volume plugin for volume {name:?}: no deletable volume plugin matched"
            );
            return self.fail_volume(pv, "VolumeFailedDelete", msg).await;
        };
        let path = host_path.path.clone();
        if !(path.starts_with(HOST_PATH_DELETABLE) && path.len() > HOST_PATH_DELETABLE.len()) {
            let msg = format!("host_path deleter only supports /tmp/.+ but received provided {path}");
            return self.fail_volume(pv, "VolumeFailedDelete", msg).await;
        }
        let removed = tokio::task::spawn_blocking(move || match std::fs::remove_dir_all(&path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e.to_string()),
            _ => Ok(()),
        })
        .await
        .map_err(|e| Error::Other(e.to_string()))?;
        if let Err(e) = removed {
            return self.fail_volume(pv, "VolumeFailedDelete", e).await;
        }
        match self.pv_api().delete(&name, &DeleteParams::default()).await {
            Ok(_) => Ok(()),
            Err(err) if controller::api_code(&err) == Some(404) => Ok(()),
            Err(err) => {
                self.ctx.recorder.event(COMPONENT, pv, Type::Warning, "VolumeDelete", err.to_string());
                Err(Error::Api(err))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn newest_default_class_wins() {
        let class = |name: &str, at: &str, default: &str| -> Arc<StorageClass> {
            Arc::new(
                serde_json::from_value(json!({"metadata": {"name": name, "creationTimestamp": at,
                    "annotations": {IS_DEFAULT_CLASS: default}}, "provisioner": "p"}))
                .unwrap(),
            )
        };
        let classes = vec![
            class("old", "2024-01-01T00:00:00Z", "true"),
            class("new", "2024-06-01T00:00:00Z", "true"),
            class("newest-not-default", "2025-01-01T00:00:00Z", "false"),
        ];
        assert_eq!(default_class(&classes).unwrap().metadata.name.as_deref(), Some("new"));
        assert!(default_class(&classes[2..]).is_none());
    }
}
