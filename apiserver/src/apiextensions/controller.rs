//! The controllers of upstream's apiextensions server, run inside the API server as
//! upstream's are: for every CustomResourceDefinition, the naming controller (accepted
//! names, `NamesAccepted`), the establishing controller (`Established`), the finalizer
//! controller (`customresourcecleanup.apiextensions.k8s.io`: deleting a CRD deletes its
//! custom resources first, with `Terminating` while it does), and the serving side: a store
//! and watch cache per served version (no watch cache with a conversion webhook), registered in the [`Registry`] once the names are
//! accepted and removed when the CRD goes.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::task::JoinHandle;

use super::{CLEANUP_FINALIZER, GROUP, conversion, crd, custom_resource};
use crate::admission::webhook::{Cluster, RegistryCluster};
use crate::cacher::{EventType, Filter};
use crate::errors::ApiResult;
use crate::openapi::{CustomKind, OpenApi};
use crate::registry::Registry;
use crate::registry::store::{DeleteOptions, ListOptions, Store};
use crate::storage::etcd3::Etcd;

/// How soon a CRD whose custom resources are still being deleted is looked at again.
const CLEANUP_RETRY: Duration = Duration::from_secs(1);

/// What is served for one CRD.
struct Served {
    /// The CRD as last served (its spec and accepted names decide the stores).
    fingerprint: Value,
    group: String,
    plural: String,
    caches: Vec<JoinHandle<()>>,
    /// Its kinds as the OpenAPI documents publish them.
    kinds: Vec<CustomKind>,
}

impl Drop for Served {
    fn drop(&mut self) {
        for c in &self.caches {
            c.abort();
        }
    }
}

pub struct Controller {
    registry: Arc<Registry>,
    openapi: Arc<OpenApi>,
    etcd: Etcd,
    prefix: String,
    watch_cache: bool,
    served: HashMap<String, Served>,
    /// Services and endpoints, for conversion webhooks named by a Service.
    cluster: Option<Arc<dyn Cluster>>,
}

impl Controller {
    pub fn new(
        registry: Arc<Registry>,
        openapi: Arc<OpenApi>,
        etcd: Etcd,
        prefix: String,
        watch_cache: bool,
    ) -> Self {
        let cluster = match RegistryCluster::new(&registry) {
            Ok(c) => Some(Arc::new(c) as Arc<dyn Cluster>),
            Err(e) => {
                tracing::error!("conversion webhooks cannot reach Services: {e}");
                None
            }
        };
        Self { registry, openapi, etcd, prefix, watch_cache, served: HashMap::new(), cluster }
    }

    /// Publishes the kinds of every CRD served in the OpenAPI documents.
    fn publish(&self) {
        let mut kinds: Vec<CustomKind> = self.served.values().flat_map(|s| s.kinds.iter().cloned()).collect();
        kinds.sort_by(|a, b| {
            (a.info.group, a.info.version, a.info.kind).cmp(&(b.info.group, b.info.version, b.info.kind))
        });
        self.openapi.set_custom(kinds);
    }

    fn crds(&self) -> Arc<Store> {
        self.registry.find(GROUP, "v1", "customresourcedefinitions").expect("CRDs are a built-in resource")
    }

    /// Serves every CRD already stored, then follows changes for ever.
    pub async fn run(mut self) {
        let crds = self.crds();
        loop {
            let (mut events, id) = match crds.cacher.watch(Filter::default(), None, false, false) {
                Ok(w) => w,
                Err(e) => {
                    tracing::warn!("watching CustomResourceDefinitions: {}", e.message);
                    tokio::time::sleep(CLEANUP_RETRY).await;
                    continue;
                }
            };
            // Names of CRDs to look at again soon (custom resources still being deleted,
            // a status write that conflicted).
            let mut retry: Vec<String> = Vec::new();
            loop {
                let event = if retry.is_empty() {
                    events.recv().await
                } else {
                    match tokio::time::timeout(CLEANUP_RETRY, events.recv()).await {
                        Ok(e) => e,
                        Err(_) => {
                            for name in std::mem::take(&mut retry) {
                                if !self.reconcile(&name).await {
                                    retry.push(name);
                                }
                            }
                            continue;
                        }
                    }
                };
                let Some(event) = event else { break };
                match event.kind {
                    EventType::Added | EventType::Modified | EventType::Deleted => {
                        let name = event.obj.name().to_string();
                        if !self.reconcile(&name).await && !retry.contains(&name) {
                            retry.push(name);
                        }
                    }
                    _ => {}
                }
            }
            crds.cacher.stop_watch(id);
        }
    }

    /// Brings one CRD's status, finalizer and served stores in line; false when it must be
    /// looked at again.
    async fn reconcile(&mut self, name: &str) -> bool {
        let crds = self.crds();
        let Some(cached) = crds.cacher.get(name) else {
            self.unserve(name);
            return true;
        };
        let obj = cached.value();
        match self.sync(&crds, name, obj).await {
            Ok(done) => done,
            Err(e) => {
                if !e.is_not_found() {
                    tracing::warn!(crd = name, "reconciling CustomResourceDefinition: {}", e.message);
                }
                e.is_not_found()
            }
        }
    }

    async fn sync(&mut self, crds: &Store, name: &str, obj: Value) -> ApiResult<bool> {
        if obj["metadata"]["deletionTimestamp"].is_string() {
            return self.finalize(crds, name, obj).await;
        }
        let has_finalizer = finalizers(&obj).iter().any(|f| f == CLEANUP_FINALIZER);
        let (accepted, names_condition) = self.accepted_names(&obj).await;
        let established = names_condition["status"] == "True";
        let status = obj["status"].clone();
        let mut want = status.clone();
        want["acceptedNames"] = accepted.clone();
        set_condition(&mut want, names_condition);
        if established {
            set_condition(
                &mut want,
                condition(
                    "Established",
                    "True",
                    "InitialNamesAccepted",
                    "the initial names have been accepted",
                ),
            );
        } else if !has_condition_true(&want, "Established") {
            set_condition(
                &mut want,
                condition("Established", "False", "NotAccepted", "not all names are accepted"),
            );
        }
        if !has_finalizer || strip_times(&want) != strip_times(&status) {
            crds.guaranteed_update(None, name, None, false, |old| {
                let mut new = old.clone();
                let list = new["metadata"]["finalizers"].as_array().cloned().unwrap_or_default();
                if !list.iter().any(|f| f == CLEANUP_FINALIZER) {
                    let mut list = list;
                    list.push(json!(CLEANUP_FINALIZER));
                    new["metadata"]["finalizers"] = json!(list);
                }
                Ok(new)
            })
            .await?;
            let updated = crds
                .guaranteed_update(None, name, Some("status"), false, |old| {
                    let mut new = old.clone();
                    new["status"]["acceptedNames"] = accepted.clone();
                    for c in want["conditions"].as_array().into_iter().flatten() {
                        set_condition(&mut new["status"], c.clone());
                    }
                    Ok(new)
                })
                .await?;
            self.serve(name, &updated).await;
            return Ok(true);
        }
        self.serve(name, &obj).await;
        Ok(true)
    }

    /// Upstream's naming controller: the requested names are accepted unless another CRD
    /// of the group already holds one of them (or a built-in resource does).
    async fn accepted_names(&self, obj: &Value) -> (Value, Value) {
        let names = &obj["spec"]["names"];
        let group = obj["spec"]["group"].as_str().unwrap_or_default();
        let me = obj["metadata"]["name"].as_str().unwrap_or_default();
        // Each name against the names another CRD of the group was given, with upstream's
        // reason for each kind of clash.
        let field = |n: &Value, f: &str| n[f].as_str().filter(|s| !s.is_empty()).map(str::to_string);
        let short = |n: &Value| strings(&n["shortNames"]);
        let others = self.crds().list(&ListOptions::default()).await.unwrap_or_default();
        for other in others["items"].as_array().into_iter().flatten() {
            if other["metadata"]["name"].as_str() == Some(me)
                || other["spec"]["group"].as_str() != Some(group)
            {
                continue;
            }
            let theirs = &other["status"]["acceptedNames"];
            let their_resources: Vec<String> = [field(theirs, "plural"), field(theirs, "singular")]
                .into_iter()
                .flatten()
                .chain(short(theirs))
                .collect();
            let their_kinds: Vec<String> =
                [field(theirs, "kind"), field(theirs, "listKind")].into_iter().flatten().collect();
            let clash = [
                ("PluralConflict", field(names, "plural").into_iter().collect::<Vec<_>>(), &their_resources),
                ("SingularConflict", field(names, "singular").into_iter().collect(), &their_resources),
                ("ShortNamesConflict", short(names), &their_resources),
                ("KindConflict", field(names, "kind").into_iter().collect(), &their_kinds),
                ("ListKindConflict", field(names, "listKind").into_iter().collect(), &their_kinds),
            ]
            .into_iter()
            .find_map(|(reason, mine, theirs)| {
                mine.into_iter().find(|n| theirs.contains(n)).map(|n| (reason, n))
            });
            if let Some((reason, n)) = clash {
                let accepted = obj["status"]["acceptedNames"].clone();
                let msg = format!("\"{n}\" is already in use");
                return (accepted, condition("NamesAccepted", "False", reason, &msg));
            }
        }
        let plural = names["plural"].as_str().unwrap_or_default();
        if self.registry.stores.iter().any(|s| s.res.info.group == group && s.res.info.plural == plural) {
            let msg = format!("\"{plural}\" is already in use");
            return (
                obj["status"]["acceptedNames"].clone(),
                condition("NamesAccepted", "False", "PluralConflict", &msg),
            );
        }
        let mut accepted = names.clone();
        if let Some(a) = accepted.as_object_mut() {
            a.retain(|_, v| !v.is_null());
        }
        (accepted, condition("NamesAccepted", "True", "NoConflicts", "no conflicts found"))
    }

    /// Registers a store for every served version (again when the CRD changed).
    async fn serve(&mut self, name: &str, crd: &Value) {
        let established = has_condition_true(&crd["status"], "Established")
            || has_condition_true(&crd["status"], "NamesAccepted");
        if !established {
            self.unserve(name);
            return;
        }
        let fingerprint = json!({"spec": crd["spec"], "names": crd["status"]["acceptedNames"]});
        if self.served.get(name).is_some_and(|s| s.fingerprint == fingerprint) {
            return;
        }
        let group = crd["spec"]["group"].as_str().unwrap_or_default().to_string();
        let plural = crd["status"]["acceptedNames"]["plural"].as_str().unwrap_or_default().to_string();
        let mut stores = Vec::new();
        let mut caches = Vec::new();
        let mut kinds = Vec::new();
        let converter = self.cluster.as_ref().and_then(|c| conversion::for_crd(crd, c));
        for v in crd::versions(crd).filter(|v| v["served"].as_bool() == Some(true)) {
            let version = v["name"].as_str().unwrap_or_default();
            let Some(res) = custom_resource::resource(crd, version, converter.clone()) else { continue };
            kinds.push(CustomKind {
                info: res.info.clone(),
                schema: custom_resource::schema_of(crd, version),
            });
            let store = Registry::new_store(&self.etcd, &self.prefix, res, self.watch_cache);
            if store.watch_cache {
                caches.push(tokio::spawn(store.cacher.clone().run()));
                if !store.cacher.wait_ready(Duration::from_secs(30)).await {
                    tracing::warn!(crd = name, "the watch cache of a custom resource did not list in 30s");
                }
            }
            stores.push(store);
        }
        // A rename leaves the old plural's stores behind: drop them first.
        if let Some(old) = self.served.remove(name)
            && (old.group != group || old.plural != plural)
        {
            self.registry.set_custom(&old.group, &old.plural, Vec::new());
        }
        self.registry.set_custom(&group, &plural, stores);
        tracing::info!(crd = name, "serving custom resources");
        self.served.insert(name.to_string(), Served { fingerprint, group, plural, caches, kinds });
        self.publish();
    }

    fn unserve(&mut self, name: &str) {
        if let Some(s) = self.served.remove(name) {
            self.registry.set_custom(&s.group, &s.plural, Vec::new());
            tracing::info!(crd = name, "stopped serving custom resources");
            self.publish();
        }
    }

    /// Upstream's finalizer controller: `Terminating`, every custom resource deleted (in
    /// every namespace), then the finalizer removed so that the CRD goes.
    async fn finalize(&mut self, crds: &Store, name: &str, obj: Value) -> ApiResult<bool> {
        if !finalizers(&obj).iter().any(|f| f == CLEANUP_FINALIZER) {
            self.unserve(name);
            return Ok(true);
        }
        if !has_condition_true(&obj["status"], "Terminating") {
            crds.guaranteed_update(None, name, Some("status"), false, |old| {
                let mut new = old.clone();
                set_condition(
                    &mut new["status"],
                    condition(
                        "Terminating",
                        "True",
                        "InstanceDeletionInProgress",
                        "CustomResource deletion is in progress",
                    ),
                );
                Ok(new)
            })
            .await?;
        }
        let group = obj["spec"]["group"].as_str().unwrap_or_default();
        let plural = obj["status"]["acceptedNames"]["plural"].as_str().unwrap_or_default();
        let store = crd::storage_version(&obj).and_then(|v| self.registry.find(group, v, plural));
        if let Some(store) = store {
            let left = store.list(&ListOptions::default()).await?;
            let items = left["items"].as_array().cloned().unwrap_or_default();
            if !items.is_empty() {
                let not_deleting = items.iter().any(|i| !i["metadata"]["deletionTimestamp"].is_string());
                if not_deleting {
                    store.delete_collection(&ListOptions::default(), &DeleteOptions::default()).await?;
                }
                // Those with finalizers of their own go when their controllers let them.
                let left = store.list(&ListOptions::default()).await?;
                if left["items"].as_array().is_some_and(|i| !i.is_empty()) {
                    return Ok(false);
                }
            }
        }
        self.unserve(name);
        crds.guaranteed_update(None, name, Some("status"), false, |old| {
            let mut new = old.clone();
            set_condition(
                &mut new["status"],
                condition("Terminating", "False", "InstanceDeletionCompleted", "removed all instances"),
            );
            Ok(new)
        })
        .await?;
        crds.guaranteed_update(None, name, None, false, |old| {
            let mut new = old.clone();
            if let Some(list) = new["metadata"]["finalizers"].as_array_mut() {
                list.retain(|f| f != CLEANUP_FINALIZER);
            }
            Ok(new)
        })
        .await?;
        Ok(true)
    }
}

fn finalizers(obj: &Value) -> Vec<String> {
    strings(&obj["metadata"]["finalizers"])
}

/// The strings of a JSON list (none when it is no list).
fn strings(list: &Value) -> Vec<String> {
    list.as_array().into_iter().flatten().filter_map(Value::as_str).map(str::to_string).collect()
}

fn condition(kind: &str, status: &str, reason: &str, message: &str) -> Value {
    json!({
        "type": kind,
        "status": status,
        "lastTransitionTime": crate::registry::store::now_rfc3339(),
        "reason": reason,
        "message": message,
    })
}

fn has_condition_true(status: &Value, kind: &str) -> bool {
    status["conditions"].as_array().into_iter().flatten().any(|c| c["type"] == kind && c["status"] == "True")
}

/// Sets a condition, keeping its transition time when its status does not change.
fn set_condition(status: &mut Value, mut c: Value) {
    if !status.is_object() {
        *status = json!({});
    }
    if !status["conditions"].is_array() {
        status["conditions"] = json!([]);
    }
    let list = status["conditions"].as_array_mut().expect("just made an array");
    match list.iter_mut().find(|o| o["type"] == c["type"]) {
        Some(old) => {
            if old["status"] == c["status"] {
                c["lastTransitionTime"] = old["lastTransitionTime"].clone();
            }
            *old = c;
        }
        None => list.push(c),
    }
}

/// A status without the condition times, to compare what changed.
fn strip_times(status: &Value) -> Value {
    let mut s = status.clone();
    for c in s["conditions"].as_array_mut().into_iter().flatten() {
        if let Some(o) = c.as_object_mut() {
            o.remove("lastTransitionTime");
        }
    }
    s
}
