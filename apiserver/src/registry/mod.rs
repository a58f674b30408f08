//! The resources the server serves: one generic [`store::Store`] per resource, configured
//! by the resource's [`resource::Hooks`] (defined under [`resources`]).

pub mod etcd_watch;
pub mod resource;
pub mod resources;
pub mod store;

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::RwLock;

use crate::cacher::Cacher;
use crate::storage::etcd3::Etcd;
use resource::Resource;
use store::Store;

pub struct Registry {
    /// The built-in resources, in registration order (discovery lists them so).
    pub stores: Vec<Arc<Store>>,
    by_path: HashMap<(String, String, String), Arc<Store>>,
    /// Resources known only at run time (custom resources, one store per served version
    /// of each CustomResourceDefinition), consulted after the built-in ones as upstream's
    /// apiextensions server is the delegate of the built-in one.
    custom: RwLock<Vec<Arc<Store>>>,
}

impl Registry {
    /// A store (and watch cache) for every resource, under the etcd `prefix`.
    pub fn new(etcd: &Etcd, prefix: &str, resources: Vec<Arc<Resource>>, watch_cache: bool) -> Self {
        let prefix = prefix.trim_end_matches('/');
        let mut stores = Vec::new();
        let mut by_path = HashMap::new();
        for res in resources {
            let store = Self::new_store(etcd, prefix, res.clone(), watch_cache);
            by_path.insert(
                (res.info.group.to_string(), res.info.version.to_string(), res.info.plural.to_string()),
                store.clone(),
            );
            stores.push(store);
        }
        Self { stores, by_path, custom: RwLock::new(Vec::new()) }
    }

    pub fn find(&self, group: &str, version: &str, plural: &str) -> Option<Arc<Store>> {
        if let Some(s) = self.by_path.get(&(group.to_string(), version.to_string(), plural.to_string())) {
            return Some(s.clone());
        }
        let custom = self.custom.read();
        custom
            .iter()
            .find(|s| {
                s.res.info.group == group && s.res.info.version == version && s.res.info.plural == plural
            })
            .cloned()
    }

    /// A store for `res` over `etcd` (not yet in the registry; see [`Registry::set_custom`]).
    /// A resource that converts through a webhook has no watch cache (see
    /// [`resource::Converter`]).
    pub fn new_store(etcd: &Etcd, prefix: &str, res: Arc<Resource>, watch_cache: bool) -> Arc<Store> {
        let watch_cache = watch_cache && res.hooks.converter().is_none();
        let key_prefix = format!("{}/{}/", prefix.trim_end_matches('/'), res.info.etcd_resource);
        let cacher = Cacher::new(res.clone(), etcd.clone(), key_prefix.clone());
        Arc::new(Store { res, etcd: etcd.clone(), cacher, prefix: key_prefix, watch_cache })
    }

    /// Replaces the run-time stores of one resource (`group`, `plural`: every version) by
    /// `stores`; returns the replaced ones.
    pub fn set_custom(&self, group: &str, plural: &str, stores: Vec<Arc<Store>>) -> Vec<Arc<Store>> {
        let mut custom = self.custom.write();
        let (old, keep): (Vec<_>, Vec<_>) =
            custom.drain(..).partition(|s| s.res.info.group == group && s.res.info.plural == plural);
        *custom = keep;
        custom.extend(stores);
        old
    }

    /// Every store: the built-in ones, then the run-time ones.
    pub fn all_stores(&self) -> Vec<Arc<Store>> {
        let mut out = self.stores.clone();
        out.extend(self.custom.read().iter().cloned());
        out
    }

    /// The run-time stores (custom resources).
    pub fn custom_stores(&self) -> Vec<Arc<Store>> {
        self.custom.read().clone()
    }

    /// The store of a core/v1 resource.
    pub fn core(&self, plural: &str) -> Arc<Store> {
        self.find("", "v1", plural).unwrap_or_else(|| panic!("core/v1 {plural} is always registered"))
    }

    /// Starts every watch cache.
    pub fn start_caches(&self) {
        for s in &self.stores {
            tokio::spawn(s.cacher.clone().run());
        }
    }

    /// The API groups served, each with its versions, in registration order.
    pub fn groups(&self) -> Vec<(&'static str, Vec<&'static str>)> {
        let mut out: Vec<(&'static str, Vec<&'static str>)> = Vec::new();
        for s in &self.all_stores() {
            let (g, v) = (s.res.info.group, s.res.info.version);
            match out.iter_mut().find(|(og, _)| *og == g) {
                Some((_, vs)) => {
                    if !vs.contains(&v) {
                        vs.push(v);
                    }
                }
                None => out.push((g, vec![v])),
            }
        }
        out
    }

    /// The stores of one group/version.
    pub fn in_group_version(&self, group: &str, version: &str) -> Vec<Arc<Store>> {
        self.all_stores()
            .into_iter()
            .filter(|s| s.res.info.group == group && s.res.info.version == version)
            .collect()
    }
}
