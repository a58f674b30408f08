//! The taint eviction controller (upstream's taint-eviction-controller): deletes pods
//! bound to nodes with NoExecute taints they do not tolerate — at once, or when the
//! shortest `tolerationSeconds` of the tolerations in use runs out.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod, PodCondition, Taint, Toleration};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, PostParams, Preconditions};
use parking_lot::Mutex;

use component_base::labels;

use crate::controller::{self, Context, Error};
use crate::events::{Recorder, Type};
use crate::informers::{self, Event, Informer};
use crate::podutil;
use crate::workqueue::Queue;

const COMPONENT: &str = "taint-eviction-controller";
const WORKERS: usize = 8;

pub fn start(ctx: &Context) -> Result<(), Error> {
    let c = Arc::new(Controller {
        client: ctx.client.clone(),
        nodes: ctx.informers.get::<Node>(),
        pods: ctx.informers.get::<Pod>(),
        recorder: ctx.recorder.clone(),
        scheduled: Mutex::default(),
    });
    let queue = ctx.queue("taint_eviction");
    {
        let q = queue.clone();
        c.pods.add_handler(move |e| match e {
            Event::Add(p) => q.add(informers::key_of(p.as_ref())),
            Event::Update(o, n) => {
                let tolerations = |p: &Pod| p.spec.as_ref().and_then(|s| s.tolerations.clone());
                if podutil::node_name(o) != podutil::node_name(n) || tolerations(o) != tolerations(n) {
                    q.add(informers::key_of(n.as_ref()));
                }
            }
            Event::Delete(_) => {}
        });
    }
    {
        let (q, c2) = (queue.clone(), c.clone());
        c.nodes.add_handler(move |e| {
            let (old, new) = match e {
                Event::Add(n) => (None, n),
                Event::Update(o, n) => (Some(o), n),
                // The pods follow: each is synced when it goes.
                Event::Delete(_) => return,
            };
            let taints = no_execute_taints(new);
            if old.is_some_and(|o| no_execute_taints(o) == taints) {
                return;
            }
            if taints.is_empty() && old.is_none() {
                return;
            }
            c2.enqueue_pods_on(&q, new.metadata.name.as_deref().unwrap_or_default());
        });
    }
    let c2 = c.clone();
    let q2 = queue.clone();
    controller::run_workers(ctx, queue, WORKERS, move |key| {
        let (c, q) = (c2.clone(), q2.clone());
        async move { c.sync(&q, &key).await }
    });
    Ok(())
}

struct Controller {
    client: kube::Client,
    nodes: Arc<Informer<Node>>,
    pods: Arc<Informer<Pod>>,
    recorder: Recorder,
    /// Pods with a deletion pending: when it was first scheduled (the start of their
    /// toleration period), and so that a cancellation can be reported.
    scheduled: Mutex<Schedules>,
}

/// When each pod's eviction was first scheduled, by pod key and for the pod with that
/// UID (upstream keeps a scheduled eviction's `CreatedAt` when it processes the pod
/// again, so the toleration period runs from then, not from the taint's `timeAdded`).
#[derive(Default)]
struct Schedules(HashMap<String, (Option<String>, Timestamp)>);

impl Schedules {
    /// The start of the pod's toleration period: when its eviction was first scheduled,
    /// `now` (recorded) if it was not.
    fn start(&mut self, key: &str, uid: Option<&str>, now: Timestamp) -> Timestamp {
        match self.0.get(key) {
            Some((u, at)) if u.as_deref() == uid => *at,
            _ => {
                self.0.insert(key.to_owned(), (uid.map(str::to_owned), now));
                now
            }
        }
    }

    /// Forgets the pod's schedule; whether there was one.
    fn clear(&mut self, key: &str) -> bool {
        self.0.remove(key).is_some()
    }
}

/// The node's NoExecute taints.
pub fn no_execute_taints(node: &Node) -> Vec<Taint> {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .into_iter()
        .flatten()
        .filter(|t| t.effect == "NoExecute")
        .cloned()
        .collect()
}

/// What the pod must do about the node's NoExecute taints.
#[derive(Debug, PartialEq)]
pub enum Verdict {
    /// Nothing: no NoExecute taint, or every one tolerated forever.
    Stay,
    /// Some taint is not tolerated.
    EvictNow,
    /// Every taint is tolerated, the shortest for this long from when the eviction was
    /// first scheduled.
    EvictAfter(Duration),
}

/// Upstream's `GetMatchingTolerations` + `getMinTolerationTime`: each taint uses the first
/// toleration that tolerates it; the shortest `tolerationSeconds` among those used
/// bounds the stay (zero or negative: none at all).
pub fn verdict(taints: &[Taint], tolerations: &[Toleration]) -> Verdict {
    if taints.is_empty() {
        return Verdict::Stay;
    }
    let mut min: Option<i64> = None;
    for taint in taints {
        let Some(used) = tolerations.iter().find(|t| labels::tolerates(t, taint)) else {
            return Verdict::EvictNow;
        };
        if let Some(secs) = used.toleration_seconds {
            min = Some(min.map_or(secs, |m| m.min(secs)));
        }
    }
    match min {
        None => Verdict::Stay,
        Some(s) if s <= 0 => Verdict::EvictAfter(Duration::ZERO),
        Some(s) => Verdict::EvictAfter(Duration::from_secs(s as u64)),
    }
}

/// When a pod tolerating the taints for `stay` must go: `stay` after its eviction was
/// first scheduled (upstream's `processPodOnNode`), whenever the taints were added.
pub fn eviction_time(start: Timestamp, stay: Duration) -> Timestamp {
    let stay =
        k8s_openapi::jiff::SignedDuration::try_from(stay).unwrap_or(k8s_openapi::jiff::SignedDuration::MAX);
    start.checked_add(stay).unwrap_or(Timestamp::MAX)
}

impl Controller {
    fn enqueue_pods_on(&self, queue: &Queue, node: &str) {
        for pod in self.pods.list() {
            if podutil::node_name(&pod) == node {
                queue.add(informers::key_of(pod.as_ref()));
            }
        }
    }

    fn cancel(&self, key: &str, pod: &Pod) {
        if self.scheduled.lock().clear(key) {
            self.recorder.event(
                COMPONENT,
                pod,
                Type::Normal,
                "TaintManagerEviction",
                format!("Cancelling deletion of Pod {key}"),
            );
        }
    }

    async fn sync(&self, queue: &Arc<Queue>, key: &str) -> Result<(), Error> {
        let Some(pod) = self.pods.get(key) else {
            self.scheduled.lock().clear(key);
            return Ok(());
        };
        if podutil::is_terminating(&pod) {
            self.scheduled.lock().clear(key);
            return Ok(());
        }
        let node_name = podutil::node_name(&pod);
        let Some(node) = (!node_name.is_empty()).then(|| self.nodes.get(node_name)).flatten() else {
            self.cancel(key, &pod);
            return Ok(());
        };
        let taints = no_execute_taints(&node);
        let tolerations = pod.spec.as_ref().and_then(|s| s.tolerations.clone()).unwrap_or_default();
        match verdict(&taints, &tolerations) {
            Verdict::Stay => {
                self.cancel(key, &pod);
                Ok(())
            }
            Verdict::EvictNow => self.evict(key, &pod).await,
            Verdict::EvictAfter(stay) => {
                let now = Timestamp::now();
                let start = self.scheduled.lock().start(key, pod.metadata.uid.as_deref(), now);
                let at = eviction_time(start, stay);
                if at <= now {
                    return self.evict(key, &pod).await;
                }
                let wait = Duration::try_from(at.duration_since(now)).unwrap_or(Duration::ZERO);
                // Re-checked then: if the taint is gone or the pod tolerates it by then,
                // nothing happens.
                queue.add_after(key.to_owned(), wait + Duration::from_millis(10));
                Ok(())
            }
        }
    }

    /// Marks the pod with the DisruptionTarget condition, then deletes it.
    async fn evict(&self, key: &str, cached: &Pod) -> Result<(), Error> {
        let (ns, name) = informers::split_key(key);
        let api: Api<Pod> = Api::namespaced(self.client.clone(), ns);
        self.recorder.event(
            COMPONENT,
            cached,
            Type::Normal,
            "TaintManagerEviction",
            format!("Marking for deletion Pod {key}"),
        );
        let Some(mut pod) = api.get_opt(name).await? else { return Ok(()) };
        if pod.metadata.uid != cached.metadata.uid || pod.metadata.deletion_timestamp.is_some() {
            return Ok(());
        }
        let conditions =
            pod.status.get_or_insert_with(Default::default).conditions.get_or_insert_with(Vec::new);
        let wanted = ("True", "DeletionByTaintManager", "Taint manager: deleting due to NoExecute taint");
        let current = conditions.iter_mut().find(|c| c.type_ == "DisruptionTarget");
        let needs_update = match current {
            Some(c)
                if (
                    c.status.as_str(),
                    c.reason.as_deref().unwrap_or(""),
                    c.message.as_deref().unwrap_or(""),
                ) == wanted =>
            {
                false
            }
            Some(c) => {
                if c.status != wanted.0 {
                    c.last_transition_time = Some(Time(Timestamp::now()));
                }
                c.status = wanted.0.into();
                c.reason = Some(wanted.1.into());
                c.message = Some(wanted.2.into());
                true
            }
            None => {
                conditions.push(PodCondition {
                    type_: "DisruptionTarget".into(),
                    status: wanted.0.into(),
                    reason: Some(wanted.1.into()),
                    message: Some(wanted.2.into()),
                    last_transition_time: Some(Time(Timestamp::now())),
                    ..PodCondition::default()
                });
                true
            }
        };
        if needs_update {
            match api.replace_status(name, &PostParams::default(), &pod).await {
                Ok(_) => {}
                Err(e) if controller::api_code(&e) == Some(404) => return Ok(()),
                Err(e) => return Err(e.into()),
            }
        }
        let dp = DeleteParams {
            preconditions: Some(Preconditions { uid: pod.metadata.uid.clone(), resource_version: None }),
            ..DeleteParams::default()
        };
        match api.delete(name, &dp).await {
            Ok(_) => {}
            Err(e) if controller::api_code(&e) == Some(404) => {}
            Err(e) => return Err(e.into()),
        }
        self.scheduled.lock().clear(key);
        tracing::info!(pod = key, "deleted for NoExecute taint");
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn taint(key: &str, added: Option<i64>) -> Taint {
        Taint {
            key: key.into(),
            effect: "NoExecute".into(),
            time_added: added.map(|s| Time(Timestamp::from_second(s).unwrap())),
            ..Default::default()
        }
    }

    fn tol(key: &str, secs: Option<i64>) -> Toleration {
        Toleration {
            key: Some(key.into()),
            operator: Some("Exists".into()),
            effect: Some("NoExecute".into()),
            toleration_seconds: secs,
            ..Default::default()
        }
    }

    #[test]
    fn verdicts() {
        let t = [taint("a", None), taint("b", None)];
        assert_eq!(verdict(&[], &[]), Verdict::Stay);
        assert_eq!(verdict(&t, &[tol("a", None)]), Verdict::EvictNow);
        assert_eq!(verdict(&t, &[tol("a", None), tol("b", None)]), Verdict::Stay);
        assert_eq!(
            verdict(&t, &[tol("a", Some(300)), tol("b", Some(60))]),
            Verdict::EvictAfter(Duration::from_secs(60))
        );
        assert_eq!(
            verdict(&t, &[tol("a", Some(300)), tol("b", None)]),
            Verdict::EvictAfter(Duration::from_secs(300))
        );
        assert_eq!(verdict(&t, &[tol("a", Some(-1)), tol("b", None)]), Verdict::EvictAfter(Duration::ZERO));
        // The first matching toleration is the one used.
        assert_eq!(verdict(&t[..1], &[tol("a", None), tol("a", Some(5))]), Verdict::Stay);
    }

    #[test]
    fn toleration_runs_from_first_scheduling() {
        let at = |s: i64| Timestamp::from_second(s).unwrap();
        let mut sched = Schedules::default();
        // A pod landing at 1000 on a node tainted at 100 still gets its full 60 s.
        assert_eq!(
            verdict(&[taint("a", Some(100))], &[tol("a", Some(60))]),
            Verdict::EvictAfter(Duration::from_secs(60))
        );
        let start = sched.start("ns/p", Some("u1"), at(1000));
        assert_eq!(eviction_time(start, Duration::from_secs(60)).as_second(), 1060);
        // Processed again later: the first scheduling still counts.
        assert_eq!(sched.start("ns/p", Some("u1"), at(1030)), at(1000));
        // A new pod with the same name starts afresh.
        assert_eq!(sched.start("ns/p", Some("u2"), at(1040)), at(1040));
        assert!(sched.clear("ns/p"));
        assert!(!sched.clear("ns/p"));
        assert_eq!(sched.start("ns/p", Some("u2"), at(1050)), at(1050));
    }
}
