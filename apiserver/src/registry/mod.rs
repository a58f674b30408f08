//! The resources the server serves: one generic [`store::Store`] per resource, configured
//! by the resource's [`resource::Hooks`] (defined under [`resources`]).

pub mod etcd_watch;
pub mod resource;
pub mod resources;
pub mod store;

use std::collections::HashMap;
use std::sync::Arc;

use crate::cacher::Cacher;
use crate::storage::etcd3::Etcd;
use resource::Resource;
use store::Store;

pub struct Registry {
    /// In registration order (discovery lists them so).
    pub stores: Vec<Arc<Store>>,
    by_path: HashMap<(String, String, String), Arc<Store>>,
}

impl Registry {
    /// A store (and watch cache) for every resource, under the etcd `prefix`.
    pub fn new(etcd: &Etcd, prefix: &str, resources: Vec<Arc<Resource>>, watch_cache: bool) -> Self {
        let prefix = prefix.trim_end_matches('/');
        let mut stores = Vec::new();
        let mut by_path = HashMap::new();
        for res in resources {
            let key_prefix = format!("{prefix}/{}/", res.info.etcd_resource);
            let cacher = Cacher::new(res.clone(), etcd.clone(), key_prefix.clone());
            let store = Arc::new(Store {
                res: res.clone(),
                etcd: etcd.clone(),
                cacher,
                prefix: key_prefix,
                watch_cache,
            });
            by_path.insert(
                (res.info.group.to_string(), res.info.version.to_string(), res.info.plural.to_string()),
                store.clone(),
            );
            stores.push(store);
        }
        Self { stores, by_path }
    }

    pub fn find(&self, group: &str, version: &str, plural: &str) -> Option<Arc<Store>> {
        self.by_path.get(&(group.to_string(), version.to_string(), plural.to_string())).cloned()
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
        for s in &self.stores {
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
    pub fn in_group_version<'a>(
        &'a self,
        group: &'a str,
        version: &'a str,
    ) -> impl Iterator<Item = &'a Arc<Store>> {
        self.stores.iter().filter(move |s| s.res.info.group == group && s.res.info.version == version)
    }
}
