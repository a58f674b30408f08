//! The namespace controller (upstream's `pkg/controller/namespace`): empties a namespace
//! being deleted — every namespaced resource discovery finds — reports progress in its
//! status conditions, and removes the `kubernetes` finalizer once nothing is left.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Namespace, NamespaceCondition, NamespaceSpec, NamespaceStatus, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, PostParams};

use crate::controller::{self, Context, Error, api_code};
use crate::controllers::garbagecollector::discovery;
use crate::informers::{Event, Informer};
use crate::workqueue::Queue;

/// The finalizer this controller owns on `spec.finalizers`.
const FINALIZER: &str = "kubernetes";
/// Events are handled this long after they arrive, so that other API servers observe
/// the deletion and last-minute creations land before the namespace is emptied.
const DELETION_GRACE: Duration = Duration::from_secs(5);
/// The wait granted to objects that carry finalizers (upstream's `finalizerEstimateSeconds`).
const FINALIZER_ESTIMATE_SECONDS: i64 = 15;

pub fn start(ctx: &Context) -> Result<(), Error> {
    let informer = ctx.informers.get::<Namespace>();
    // Upstream's namespace queue backs off to one minute at most.
    let queue = Queue::with_backoff(
        "namespace",
        Some(ctx.queue_metrics.clone()),
        Duration::from_millis(5),
        Duration::from_secs(60),
    );
    {
        let queue = queue.clone();
        informer.add_handler(move |ev| match ev {
            Event::Add(ns) | Event::Update(_, ns) => enqueue(&queue, ns),
            Event::Delete(_) => {}
        });
    }
    // The periodic resync: a namespace whose deletion stalled is tried again.
    {
        let (queue, informer, shutdown) = (queue.clone(), informer.clone(), ctx.shutdown.clone());
        let period = ctx.options.namespace_sync_period;
        let informers = ctx.informers.clone();
        tokio::spawn(async move {
            // A zero period turns the resync off, as a zero informer resync does upstream.
            if period.is_zero() {
                return;
            }
            informers.wait_synced().await;
            loop {
                tokio::select! {
                    () = shutdown.wait() => return,
                    () = tokio::time::sleep(period) => {}
                }
                for ns in informer.list() {
                    enqueue(&queue, &ns);
                }
            }
        });
    }
    let deleter = Arc::new(Deleter { client: ctx.client.clone(), informer });
    let requeue = queue.clone();
    controller::run_workers(ctx, queue, ctx.options.concurrent_namespace_syncs, move |key| {
        let (deleter, queue) = (deleter.clone(), requeue.clone());
        async move {
            match deleter.sync(&key).await {
                Ok(()) => Ok(()),
                Err(SyncError::ContentRemaining(estimate)) => {
                    let wait = Duration::from_secs((estimate / 2 + 1).max(1) as u64);
                    tracing::debug!(namespace = %key, ?wait, "content remaining after deletion, waiting");
                    queue.add_after(key, wait);
                    Ok(())
                }
                Err(SyncError::Failed(err)) => Err(err),
            }
        }
    });
    Ok(())
}

fn enqueue(queue: &Arc<Queue>, ns: &Namespace) {
    if ns.metadata.deletion_timestamp.is_none() {
        return;
    }
    if let Some(name) = ns.metadata.name.as_deref() {
        queue.add_after(name.to_owned(), DELETION_GRACE);
    }
}

enum SyncError {
    /// Content is still going away; look again after about half the estimate (seconds).
    ContentRemaining(i64),
    Failed(Error),
}

impl From<Error> for SyncError {
    fn from(e: Error) -> Self {
        SyncError::Failed(e)
    }
}

impl From<kube::Error> for SyncError {
    fn from(e: kube::Error) -> Self {
        SyncError::Failed(e.into())
    }
}

/// Upstream's `namespacedResourcesDeleter`.
struct Deleter {
    client: kube::Client,
    informer: Arc<Informer<Namespace>>,
}

/// What deleting one resource's objects left behind.
#[derive(Debug, Default)]
struct GvrDeletion {
    finalizer_estimate_seconds: i64,
    num_remaining: usize,
    finalizers_to_num_remaining: BTreeMap<String, usize>,
}

impl Deleter {
    fn namespaces(&self) -> Api<Namespace> {
        Api::all(self.client.clone())
    }

    async fn sync(&self, name: &str) -> Result<(), SyncError> {
        if self.informer.get(name).is_none() {
            return Ok(());
        }
        // Several controllers may edit a terminating namespace: act on the latest.
        let Some(ns) = self.namespaces().get_opt(name).await? else { return Ok(()) };
        if ns.metadata.deletion_timestamp.is_none() {
            return Ok(());
        }
        let ns = match self.retry_on_conflict(ns, |ns| self.mark_terminating(ns)).await {
            Ok(ns) => ns,
            Err(e) if e.is_not_found() => return Ok(()),
            Err(e) => return Err(e.into()),
        };
        if ns.metadata.deletion_timestamp.is_none() || finalized(&ns) {
            return Ok(());
        }
        let estimate = self.delete_all_content(&ns).await?;
        if estimate > 0 {
            return Err(SyncError::ContentRemaining(estimate));
        }
        match self.retry_on_conflict(ns, |ns| self.finalize(ns)).await {
            Ok(_) => Ok(()),
            Err(e) if e.is_not_found() => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// Calls `f` until it does not conflict, on the latest namespace each time.
    async fn retry_on_conflict<F, Fut>(&self, ns: Namespace, f: F) -> Result<Namespace, Error>
    where
        F: Fn(Namespace) -> Fut,
        Fut: std::future::Future<Output = Result<Namespace, Error>>,
    {
        let name = ns.metadata.name.clone().unwrap_or_default();
        let mut latest = ns;
        loop {
            let uid = latest.metadata.uid.clone();
            match f(latest).await {
                Err(e) if e.is_conflict() => {}
                other => return other,
            }
            latest = self.namespaces().get(&name).await?;
            if latest.metadata.uid != uid {
                return Err(Error::Other("namespace uid has changed across retries".into()));
            }
        }
    }

    /// Makes sure the phase says `Terminating`.
    async fn mark_terminating(&self, ns: Namespace) -> Result<Namespace, Error> {
        let phase = ns.status.as_ref().and_then(|s| s.phase.as_deref());
        if ns.metadata.deletion_timestamp.is_none() || phase == Some("Terminating") {
            return Ok(ns);
        }
        let mut new = ns.clone();
        new.status.get_or_insert_with(Default::default).phase = Some("Terminating".into());
        let name = ns.metadata.name.clone().unwrap_or_default();
        Ok(self.namespaces().replace_status(&name, &PostParams::default(), &new).await?)
    }

    /// Removes this controller's finalizer through the `finalize` subresource; the
    /// server deletes the namespace once `spec.finalizers` is empty.
    async fn finalize(&self, ns: Namespace) -> Result<Namespace, Error> {
        let rest: BTreeSet<String> = ns
            .spec
            .as_ref()
            .and_then(|s| s.finalizers.clone())
            .unwrap_or_default()
            .into_iter()
            .filter(|f| f != FINALIZER)
            .collect();
        let body = Namespace {
            metadata: ns.metadata.clone(),
            spec: Some(NamespaceSpec { finalizers: Some(rest.into_iter().collect()) }),
            status: None,
        };
        let name = ns.metadata.name.clone().unwrap_or_default();
        match self.namespaces().replace_subresource("finalize", &name, &PostParams::default(), &body).await {
            Ok(ns) => Ok(ns),
            // Removed already: what was wanted.
            Err(e) if api_code(&e) == Some(404) => Ok(ns),
            Err(e) => Err(e.into()),
        }
    }

    /// Deletes everything in the namespace; returns an estimate of the seconds until the
    /// remaining content is gone (0 when nothing remains). Conditions are updated always.
    async fn delete_all_content(&self, ns: &Namespace) -> Result<i64, Error> {
        let name = ns.metadata.name.clone().unwrap_or_default();
        let deleted_at = ns.metadata.deletion_timestamp.as_ref().map(|t| t.0).unwrap_or_else(Timestamp::now);
        let mut conditions = ConditionUpdater::default();
        let mut errs: Vec<String> = Vec::new();
        let resources = match discovery::run(&self.client).await {
            Ok(found) => {
                // Discovery errors are not fatal: act on what was found.
                if let Some(msg) = found.failure_message() {
                    conditions.discovery_failed(format!(
                        "Discovery failed for some groups, {} failing: {msg}",
                        found.failed.len()
                    ));
                    errs.push(msg);
                }
                if !found.unparsable.is_empty() {
                    let msg = found.unparsable.join(", ");
                    conditions.group_version_failed(msg.clone());
                    errs.push(msg);
                }
                found.preferred
            }
            Err(e) => {
                conditions.discovery_failed(e.to_string());
                errs.push(e.to_string());
                Vec::new()
            }
        };
        let mut estimate = 0;
        let mut remaining_by_gvr: Vec<(String, usize)> = Vec::new();
        let mut remaining_by_finalizer: BTreeMap<String, usize> = BTreeMap::new();
        for res in resources.iter().filter(|r| r.namespaced && r.supports(&["delete"])) {
            let (d, result) = self.delete_all_content_for(res, &name, deleted_at).await;
            if let Err(e) = result {
                conditions.delete_content_failed(e.clone());
                errs.push(e);
            }
            estimate = estimate.max(d.finalizer_estimate_seconds);
            if d.num_remaining > 0 {
                remaining_by_gvr.push((format!("{}.{}", res.api.plural, res.api.group), d.num_remaining));
                for (f, n) in d.finalizers_to_num_remaining {
                    *remaining_by_finalizer.entry(f).or_default() += n;
                }
            }
        }
        conditions.content_totals(&remaining_by_gvr, &remaining_by_finalizer);
        // Always written when changed: a condition that cleared must say so.
        let mut updated = ns.clone();
        let status = updated.status.get_or_insert_with(NamespaceStatus::default);
        if conditions.update(status, Timestamp::now())
            && let Err(err) = self.namespaces().replace_status(&name, &PostParams::default(), &updated).await
        {
            tracing::info!(namespace = %name, %err, "couldn't update status condition for namespace");
        }
        if errs.is_empty() { Ok(estimate) } else { Err(Error::Other(errs.join(", "))) }
    }

    /// Deletes one resource's objects in `namespace`: what remains, and the error that
    /// stopped it (recorded, while the other resources are still tried).
    async fn delete_all_content_for(
        &self,
        res: &discovery::Resource,
        namespace: &str,
        deleted_at: Timestamp,
    ) -> (GvrDeletion, Result<(), String>) {
        let estimate = match self.estimate_graceful_termination(res, namespace, deleted_at).await {
            Ok(e) => e,
            Err(e) => return (GvrDeletion::default(), Err(e.to_string())),
        };
        let only_estimate = || GvrDeletion { finalizer_estimate_seconds: estimate, ..Default::default() };
        let api: Api<DynamicObject> = Api::namespaced_with(self.client.clone(), namespace, &res.api);
        let unsupported = |e: &kube::Error| matches!(api_code(e), Some(404 | 405));
        // The whole collection at once where the resource allows it, else one by one.
        // Background propagation: the collector must not add `orphan` finalizers here.
        let mut collection_deleted = false;
        if res.supports(&["deletecollection"]) {
            match api.delete_collection(&DeleteParams::background(), &ListParams::default()).await {
                Ok(_) => collection_deleted = true,
                Err(e) if unsupported(&e) => {}
                Err(e) => return (only_estimate(), Err(e.to_string())),
            }
        }
        if !collection_deleted && res.supports(&["list"]) {
            match api.list(&ListParams::default()).await {
                Ok(list) => {
                    for item in list.items {
                        let Some(n) = item.metadata.name.as_deref() else { continue };
                        match api.delete(n, &DeleteParams::background()).await {
                            Ok(_) => {}
                            Err(e) if unsupported(&e) => {}
                            Err(e) => return (only_estimate(), Err(e.to_string())),
                        }
                    }
                }
                Err(e) if unsupported(&e) => {}
                Err(e) => return (only_estimate(), Err(e.to_string())),
            }
        }
        // What is left, and which finalizers hold it.
        if !res.supports(&["list"]) {
            return (only_estimate(), Ok(()));
        }
        let items = match api.list(&ListParams::default()).await {
            Ok(list) => list.items,
            Err(e) if unsupported(&e) => return (only_estimate(), Ok(())),
            Err(e) => return (only_estimate(), Err(e.to_string())),
        };
        let finalizers: Vec<Vec<String>> =
            items.iter().map(|i| i.metadata.finalizers.clone().unwrap_or_default()).collect();
        let (left, unexpected) = remaining(estimate, &finalizers);
        if unexpected {
            let gvr = format!("{}/{}, Resource={}", res.api.group, res.api.version, res.api.plural);
            return (
                left,
                Err(format!("unexpected items still remain in namespace: {namespace} for gvr: {gvr}")),
            );
        }
        (left, Ok(()))
    }

    /// Seconds until graceful deletion of the resource's objects should be over: for pods,
    /// the longest grace period of those not finished, counted from the namespace's
    /// deletion.
    async fn estimate_graceful_termination(
        &self,
        res: &discovery::Resource,
        namespace: &str,
        deleted_at: Timestamp,
    ) -> Result<i64, kube::Error> {
        if !(res.api.group.is_empty() && res.api.plural == "pods") {
            return Ok(0);
        }
        let pods =
            Api::<Pod>::namespaced(self.client.clone(), namespace).list(&ListParams::default()).await?;
        let estimate = pod_estimate(&pods.items);
        let elapsed = Timestamp::now().duration_since(deleted_at).as_secs();
        Ok(if elapsed >= estimate { 0 } else { estimate })
    }
}

/// The longest termination grace period of the pods not yet finished.
fn pod_estimate(pods: &[Pod]) -> i64 {
    pods.iter()
        .filter(|p| !crate::podutil::is_terminal(p))
        .filter_map(|p| p.spec.as_ref()?.termination_grace_period_seconds)
        .max()
        .unwrap_or(0)
        .max(0)
}

/// What remains of a resource after deletion, given each remaining object's finalizers;
/// the flag says the leftovers are unexplained (no grace period, no finalizer).
fn remaining(estimate: i64, finalizers: &[Vec<String>]) -> (GvrDeletion, bool) {
    if finalizers.is_empty() {
        return (GvrDeletion::default(), false);
    }
    let mut by_finalizer: BTreeMap<String, usize> = BTreeMap::new();
    for f in finalizers.iter().flatten() {
        *by_finalizer.entry(f.clone()).or_default() += 1;
    }
    let num_remaining = finalizers.len();
    if estimate != 0 {
        return (
            GvrDeletion {
                finalizer_estimate_seconds: estimate,
                num_remaining,
                finalizers_to_num_remaining: by_finalizer,
            },
            false,
        );
    }
    if !by_finalizer.is_empty() {
        // Finalizers are normal; give their controllers (the collector, say) time.
        return (
            GvrDeletion {
                finalizer_estimate_seconds: FINALIZER_ESTIMATE_SECONDS,
                num_remaining,
                finalizers_to_num_remaining: by_finalizer,
            },
            false,
        );
    }
    (GvrDeletion { finalizer_estimate_seconds: estimate, num_remaining, ..Default::default() }, true)
}

/// Whether this controller's finalizer is gone from `spec.finalizers`.
fn finalized(ns: &Namespace) -> bool {
    !ns.spec.as_ref().and_then(|s| s.finalizers.as_ref()).is_some_and(|f| f.iter().any(|x| x == FINALIZER))
}

/// The condition types this controller maintains, in upstream's order.
const CONDITION_TYPES: [&str; 5] = [
    "NamespaceDeletionDiscoveryFailure",
    "NamespaceDeletionGroupVersionParsingFailure",
    "NamespaceDeletionContentFailure",
    "NamespaceContentRemaining",
    "NamespaceFinalizersRemaining",
];

/// The reason and message of each condition type when all is well.
fn ok_condition(type_: &str) -> (&'static str, &'static str) {
    match type_ {
        "NamespaceDeletionDiscoveryFailure" => {
            ("ResourcesDiscovered", "All resources successfully discovered")
        }
        "NamespaceDeletionGroupVersionParsingFailure" => {
            ("ParsedGroupVersions", "All legacy kube types successfully parsed")
        }
        "NamespaceDeletionContentFailure" => {
            ("ContentDeleted", "All content successfully deleted, may be waiting on finalization")
        }
        "NamespaceContentRemaining" => ("ContentRemoved", "All content successfully removed"),
        _ => ("ContentHasNoFinalizers", "All content-preserving finalizers finished"),
    }
}

/// Collects what went wrong during one deletion pass and turns it into conditions
/// (upstream's `namespaceConditionUpdater`).
#[derive(Debug, Default)]
struct ConditionUpdater {
    /// (type, reason, message) of the failing conditions.
    failing: Vec<(&'static str, &'static str, String)>,
    delete_content_errors: Vec<String>,
}

impl ConditionUpdater {
    fn discovery_failed(&mut self, msg: String) {
        self.failing.push(("NamespaceDeletionDiscoveryFailure", "DiscoveryFailed", msg));
    }

    fn group_version_failed(&mut self, msg: String) {
        self.failing.push(("NamespaceDeletionGroupVersionParsingFailure", "GroupVersionParsingFailed", msg));
    }

    fn delete_content_failed(&mut self, err: String) {
        self.delete_content_errors.push(err);
    }

    /// `by_gvr`: (`resource.group`, count); `by_finalizer`: finalizer → count.
    fn content_totals(&mut self, by_gvr: &[(String, usize)], by_finalizer: &BTreeMap<String, usize>) {
        let mut gvrs: Vec<String> = by_gvr
            .iter()
            .filter(|(_, n)| *n > 0)
            .map(|(g, n)| format!("{g} has {n} resource instances"))
            .collect();
        if !gvrs.is_empty() {
            gvrs.sort();
            self.failing.push((
                "NamespaceContentRemaining",
                "SomeResourcesRemain",
                format!("Some resources are remaining: {}", gvrs.join(", ")),
            ));
        }
        let mut fins: Vec<String> = by_finalizer
            .iter()
            .filter(|(_, n)| **n > 0)
            .map(|(f, n)| format!("{f} in {n} resource instances"))
            .collect();
        if !fins.is_empty() {
            fins.sort();
            self.failing.push((
                "NamespaceFinalizersRemaining",
                "SomeFinalizersRemain",
                format!("Some content in the namespace has finalizers remaining: {}", fins.join(", ")),
            ));
        }
    }

    /// Writes every maintained condition into `status` (the "ok" form of those not
    /// failing); returns whether anything changed.
    fn update(&mut self, status: &mut NamespaceStatus, now: Timestamp) -> bool {
        if !self.failing.iter().any(|(t, _, _)| *t == "NamespaceDeletionContentFailure")
            && !self.delete_content_errors.is_empty()
        {
            let mut msgs = self.delete_content_errors.clone();
            msgs.sort();
            self.failing.push((
                "NamespaceDeletionContentFailure",
                "ContentDeletionFailed",
                format!("Failed to delete all resource types, {} remaining: {}", msgs.len(), msgs.join(", ")),
            ));
        }
        let conditions = status.conditions.get_or_insert_with(Vec::new);
        let mut changed = false;
        for type_ in CONDITION_TYPES {
            let (state, reason, message) = match self.failing.iter().find(|(t, _, _)| *t == type_) {
                Some((_, reason, msg)) => ("True", *reason, msg.clone()),
                None => {
                    let (reason, msg) = ok_condition(type_);
                    ("False", reason, msg.to_owned())
                }
            };
            match conditions.iter_mut().find(|c| c.type_ == type_) {
                None => {
                    conditions.push(NamespaceCondition {
                        type_: type_.to_owned(),
                        status: state.to_owned(),
                        reason: Some(reason.to_owned()),
                        message: Some(message),
                        last_transition_time: Some(Time(now)),
                    });
                    changed = true;
                }
                Some(c) => {
                    if c.status != state
                        || c.reason.as_deref() != Some(reason)
                        || c.message.as_deref() != Some(message.as_str())
                    {
                        if c.status != state {
                            c.last_transition_time = Some(Time(now));
                        }
                        c.status = state.to_owned();
                        c.reason = Some(reason.to_owned());
                        c.message = Some(message);
                        changed = true;
                    }
                }
            }
        }
        changed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{PodSpec, PodStatus};

    fn condition<'a>(s: &'a NamespaceStatus, t: &str) -> &'a NamespaceCondition {
        s.conditions.as_ref().unwrap().iter().find(|c| c.type_ == t).unwrap()
    }

    #[test]
    fn remaining_content_conditions() {
        let mut u = ConditionUpdater::default();
        let fins = BTreeMap::from([("foregroundDeletion".to_string(), 2)]);
        u.content_totals(&[("pods.".into(), 3), ("replicasets.apps".into(), 2)], &fins);
        let mut status = NamespaceStatus::default();
        assert!(u.update(&mut status, Timestamp::now()));
        assert_eq!(status.conditions.as_ref().unwrap().len(), 5);
        let c = condition(&status, "NamespaceContentRemaining");
        assert_eq!(c.status, "True");
        assert_eq!(c.reason.as_deref(), Some("SomeResourcesRemain"));
        assert_eq!(
            c.message.as_deref(),
            Some(
                "Some resources are remaining: pods. has 3 resource instances, replicasets.apps has 2 resource instances"
            )
        );
        let c = condition(&status, "NamespaceFinalizersRemaining");
        assert_eq!(
            c.message.as_deref(),
            Some(
                "Some content in the namespace has finalizers remaining: foregroundDeletion in 2 resource instances"
            )
        );
        let c = condition(&status, "NamespaceDeletionDiscoveryFailure");
        assert_eq!(c.status, "False");
        assert_eq!(c.reason.as_deref(), Some("ResourcesDiscovered"));
        assert_eq!(c.message.as_deref(), Some("All resources successfully discovered"));

        // The next pass found everything gone: conditions flip to their ok form, once.
        let mut u = ConditionUpdater::default();
        assert!(u.update(&mut status, Timestamp::now()));
        let c = condition(&status, "NamespaceContentRemaining");
        assert_eq!((c.status.as_str(), c.reason.as_deref()), ("False", Some("ContentRemoved")));
        let mut u = ConditionUpdater::default();
        assert!(!u.update(&mut status, Timestamp::now()));
    }

    #[test]
    fn delete_errors_are_sorted_into_one_condition() {
        let mut u = ConditionUpdater::default();
        u.delete_content_failed("b failed".into());
        u.delete_content_failed("a failed".into());
        u.discovery_failed("Discovery failed for some groups, 1 failing: x".into());
        let mut status = NamespaceStatus::default();
        u.update(&mut status, Timestamp::now());
        let c = condition(&status, "NamespaceDeletionContentFailure");
        assert_eq!(c.reason.as_deref(), Some("ContentDeletionFailed"));
        assert_eq!(
            c.message.as_deref(),
            Some("Failed to delete all resource types, 2 remaining: a failed, b failed")
        );
        assert_eq!(
            condition(&status, "NamespaceDeletionDiscoveryFailure").reason.as_deref(),
            Some("DiscoveryFailed")
        );
    }

    #[test]
    fn what_remains_and_how_long_to_wait() {
        let none: Vec<Vec<String>> = vec![];
        let (d, unexpected) = remaining(0, &none);
        assert_eq!((d.num_remaining, d.finalizer_estimate_seconds, unexpected), (0, 0, false));
        // Pods in their grace period: the pods' estimate.
        let (d, unexpected) = remaining(30, &[vec![], vec![]]);
        assert_eq!((d.num_remaining, d.finalizer_estimate_seconds, unexpected), (2, 30, false));
        // Held by finalizers: the default wait.
        let (d, unexpected) = remaining(0, &[vec!["foregroundDeletion".into()], vec![]]);
        assert_eq!((d.num_remaining, d.finalizer_estimate_seconds, unexpected), (2, 15, false));
        assert_eq!(d.finalizers_to_num_remaining.get("foregroundDeletion"), Some(&1));
        // Nothing explains them: an error.
        let (d, unexpected) = remaining(0, &[vec![]]);
        assert_eq!((d.num_remaining, unexpected), (1, true));
    }

    #[test]
    fn pod_estimate_skips_finished_pods() {
        let pod = |grace: i64, phase: &str| Pod {
            spec: Some(PodSpec { termination_grace_period_seconds: Some(grace), ..Default::default() }),
            status: Some(PodStatus { phase: Some(phase.into()), ..Default::default() }),
            ..Default::default()
        };
        assert_eq!(pod_estimate(&[pod(30, "Running"), pod(60, "Succeeded"), pod(10, "Pending")]), 30);
        assert_eq!(pod_estimate(&[]), 0);
    }

    #[test]
    fn finalized_when_our_finalizer_is_gone() {
        let ns = |f: &[&str]| Namespace {
            spec: Some(NamespaceSpec { finalizers: Some(f.iter().map(|s| s.to_string()).collect()) }),
            ..Default::default()
        };
        assert!(!finalized(&ns(&["kubernetes"])));
        assert!(finalized(&ns(&["example.com/other"])));
        assert!(finalized(&Namespace::default()));
    }
}
