//! Event sources for the proxier (upstream's `pkg/proxy/config`): one watch each on
//! Services, EndpointSlices and this node's Node, through the API server, delivered as
//! add/update/delete with the previous object (which the change trackers need), and a
//! single "synced" once the first complete list has been delivered. A re-list after an
//! expired watch is diffed against what was delivered, so nothing is missed or repeated.

use std::collections::HashMap;
use std::fmt::Debug;
use std::sync::Arc;

use futures::StreamExt;
use kube::Resource;
use kube::api::Api;
use kube::runtime::{WatchStreamExt, watcher};
use serde::de::DeserializeOwned;

use component_base::shutdown::Shutdown;

/// What a watch delivers.
pub enum Event<'a, K> {
    Add(&'a K),
    Update(&'a K, &'a K),
    Delete(&'a K),
    /// The first complete list has been delivered.
    Synced,
}

/// Services and EndpointSlices that another proxy implementation claims, and headless
/// Services, are not ours (upstream's informer label selector).
pub const PROXY_LABEL_SELECTOR: &str =
    "!service.kubernetes.io/service-proxy-name,!service.kubernetes.io/headless";

fn key<K: Resource>(o: &K) -> String {
    let m = o.meta();
    format!("{}/{}", m.namespace.as_deref().unwrap_or_default(), m.name.as_deref().unwrap_or_default())
}

/// Watches `api` until `shutdown`, calling `handler` for every change. Watch errors are
/// logged and retried with backoff.
pub async fn run<K>(
    what: &'static str,
    api: Api<K>,
    config: watcher::Config,
    shutdown: Shutdown,
    handler: impl Fn(Event<'_, K>) + Send,
) where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    let stream = watcher(api, config).default_backoff();
    futures::pin_mut!(stream);
    let mut store: HashMap<String, Arc<K>> = HashMap::new();
    let mut relist: HashMap<String, Arc<K>> = HashMap::new();
    let mut synced = false;
    let stop = shutdown.wait();
    tokio::pin!(stop);
    loop {
        let ev = tokio::select! {
            () = &mut stop => return,
            ev = stream.next() => ev,
        };
        match ev {
            None => return,
            Some(Err(err)) => tracing::warn!(%err, what, "watch failed; retrying"),
            Some(Ok(watcher::Event::Init)) => relist.clear(),
            Some(Ok(watcher::Event::InitApply(o))) => {
                relist.insert(key(&o), Arc::new(o));
            }
            Some(Ok(watcher::Event::InitDone)) => {
                let fresh = std::mem::take(&mut relist);
                for (k, new) in &fresh {
                    match store.get(k) {
                        None => handler(Event::Add(new)),
                        Some(old) if old.meta().resource_version != new.meta().resource_version => {
                            handler(Event::Update(old, new))
                        }
                        Some(_) => {}
                    }
                }
                for (k, old) in &store {
                    if !fresh.contains_key(k) {
                        handler(Event::Delete(old));
                    }
                }
                store = fresh;
                if !synced {
                    synced = true;
                    tracing::info!(what, objects = store.len(), "caches populated");
                    handler(Event::Synced);
                }
            }
            Some(Ok(watcher::Event::Apply(o))) => {
                let k = key(&o);
                let new = Arc::new(o);
                match store.insert(k, new.clone()) {
                    Some(old) => handler(Event::Update(&old, &new)),
                    None => handler(Event::Add(&new)),
                }
            }
            Some(Ok(watcher::Event::Delete(o))) => {
                let gone = store.remove(&key(&o)).unwrap_or_else(|| Arc::new(o));
                handler(Event::Delete(&gone));
            }
        }
    }
}
