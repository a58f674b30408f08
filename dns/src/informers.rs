//! Watches of Services, EndpointSlices and Namespaces through the API server (kube-rs
//! watchers: list, then watch, relisting after a gap), feeding the [`Cluster`] state.
//! A relist replaces a kind's objects at once, so objects deleted during a gap vanish.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::{Namespace, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};

use component_base::shutdown::Shutdown;

use crate::cluster::Cluster;

/// Readiness of the three watches: the zone is answered once each has listed once.
#[derive(Debug)]
pub struct Synced {
    listed: AtomicUsize,
    all: Arc<AtomicBool>,
}

const KINDS: usize = 3;

impl Synced {
    fn new() -> Arc<Synced> {
        Arc::new(Synced { listed: AtomicUsize::new(0), all: Arc::new(AtomicBool::new(false)) })
    }

    /// Called once per kind, after its first complete list.
    fn kind_listed(&self, kind: &str) {
        tracing::info!(kind, "initial list done");
        if self.listed.fetch_add(1, Ordering::AcqRel) + 1 == KINDS {
            self.all.store(true, Ordering::Release);
            tracing::info!("all watches synced; serving the cluster zone");
        }
    }

    /// The flag the handler and `/ready` read.
    pub fn flag(&self) -> Arc<AtomicBool> {
        self.all.clone()
    }
}

/// Starts the three watches; they run until `shutdown`.
pub fn start(client: kube::Client, cluster: Arc<Cluster>, shutdown: Shutdown) -> Arc<Synced> {
    let synced = Synced::new();
    let config = watcher::Config::default();

    let services = watcher::watcher(Api::<Service>::all(client.clone()), config.clone()).default_backoff();
    let c = cluster.clone();
    let c2 = cluster.clone();
    tokio::spawn(drive(
        "Service",
        services,
        synced.clone(),
        shutdown.clone(),
        move |objs: Vec<Service>| c.replace_services(&objs),
        move |change: Change<Service>| match change {
            Change::Apply(s) => c2.apply_service(&s),
            Change::Delete(s) => c2.delete_service(&s.namespace().unwrap_or_default(), &s.name_any()),
        },
    ));

    let slices =
        watcher::watcher(Api::<EndpointSlice>::all(client.clone()), config.clone()).default_backoff();
    let c = cluster.clone();
    let c2 = cluster.clone();
    tokio::spawn(drive(
        "EndpointSlice",
        slices,
        synced.clone(),
        shutdown.clone(),
        move |objs: Vec<EndpointSlice>| c.replace_slices(&objs),
        move |change: Change<EndpointSlice>| match change {
            Change::Apply(s) => c2.apply_slice(&s),
            Change::Delete(s) => c2.delete_slice(&s.namespace().unwrap_or_default(), &s.name_any()),
        },
    ));

    // Only the names matter, but a full watch: a metadata-only one (PartialObjectMetadata)
    // is refused with 406 by this project's kube-apiserver so far.
    let namespaces = watcher::watcher(Api::<Namespace>::all(client), config).default_backoff();
    let c = cluster.clone();
    let c2 = cluster;
    tokio::spawn(drive(
        "Namespace",
        namespaces,
        synced.clone(),
        shutdown,
        move |objs: Vec<Namespace>| c.replace_namespaces(objs.into_iter().map(|n| n.name_any())),
        move |change: Change<Namespace>| match change {
            Change::Apply(n) => c2.apply_namespace(&n.name_any()),
            Change::Delete(n) => c2.delete_namespace(&n.name_any()),
        },
    ));
    synced
}

/// One change after the initial list.
enum Change<K> {
    Apply(K),
    Delete(K),
}

/// Consumes one watch: buffers a (re)list and hands it over whole, passes changes on one
/// by one, logs errors (the backoff retries).
async fn drive<K, S>(
    kind: &'static str,
    stream: S,
    synced: Arc<Synced>,
    shutdown: Shutdown,
    replace: impl Fn(Vec<K>),
    change: impl Fn(Change<K>),
) where
    S: Stream<Item = watcher::Result<Event<K>>>,
{
    let mut stream = std::pin::pin!(stream);
    let mut buffer: Vec<K> = Vec::new();
    let mut listed = false;
    let stopped = shutdown.wait();
    tokio::pin!(stopped);
    loop {
        let event = tokio::select! {
            () = &mut stopped => return,
            event = stream.next() => event,
        };
        match event {
            None => return,
            Some(Ok(Event::Init)) => buffer.clear(),
            Some(Ok(Event::InitApply(obj))) => buffer.push(obj),
            Some(Ok(Event::InitDone)) => {
                replace(std::mem::take(&mut buffer));
                if !listed {
                    listed = true;
                    synced.kind_listed(kind);
                }
            }
            Some(Ok(Event::Apply(obj))) => change(Change::Apply(obj)),
            Some(Ok(Event::Delete(obj))) => change(Change::Delete(obj)),
            Some(Err(err)) => tracing::warn!(kind, %err, "watch failed; retrying"),
        }
    }
}
