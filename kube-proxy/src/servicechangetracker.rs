//! Service changes accumulated between syncs (upstream's `ServiceChangeTracker`): for each
//! changed Service, its ports as last applied and as they are now. A change undone before
//! the sync (and a change to a field the proxier ignores) leaves nothing to do.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::marker::PhantomData;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Service;

use crate::nftables::Family;
use crate::serviceport::{
    BaseServicePortInfo, NamespacedName, ServicePort, ServicePortMap, ServicePortName, service_ports,
};

type Ports = BTreeMap<ServicePortName, BaseServicePortInfo>;

/// Service changes of one IP family since the last sync.
pub struct ServiceChangeTracker<S> {
    family: Family,
    /// Per changed Service: (ports before the first unsynced change, ports now).
    items: HashMap<NamespacedName, (Ports, Ports)>,
    _service: PhantomData<fn() -> S>,
}

/// What a sync learns from [`update_service_map`].
#[derive(Debug, Default)]
pub struct UpdateServiceMapResult {
    /// Services whose ports changed (added, removed or modified).
    pub updated_services: HashSet<NamespacedName>,
}

impl<S: ServicePort> ServiceChangeTracker<S> {
    pub fn new(family: Family) -> Self {
        Self { family, items: HashMap::new(), _service: PhantomData }
    }

    /// Records an add (`old` None), update or delete (`new` None). Returns whether any
    /// change is pending.
    pub fn update(&mut self, old: Option<&Service>, new: Option<&Service>) -> bool {
        let Some(svc) = new.or(old) else { return false };
        let (Some(namespace), Some(name)) = (svc.metadata.namespace.as_deref(), svc.metadata.name.as_deref())
        else {
            return !self.items.is_empty();
        };
        let key = NamespacedName::new(namespace, name);
        let current = new.map(|s| service_ports(s, self.family)).unwrap_or_default();
        match self.items.get_mut(&key) {
            Some(item) => item.1 = current,
            None => {
                let previous = old.map(|s| service_ports(s, self.family)).unwrap_or_default();
                self.items.insert(key.clone(), (previous, current));
            }
        }
        if let Some((previous, current)) = self.items.get(&key)
            && previous == current
        {
            self.items.remove(&key);
        }
        !self.items.is_empty()
    }

    /// Number of Services with changes not yet applied.
    pub fn pending(&self) -> usize {
        self.items.len()
    }
}

/// Applies the tracker's pending changes to `map`.
pub fn update_service_map<S: ServicePort>(
    map: &mut ServicePortMap<S>,
    tracker: &mut ServiceChangeTracker<S>,
) -> UpdateServiceMapResult {
    let mut result = UpdateServiceMapResult::default();
    for (service, (previous, current)) in tracker.items.drain() {
        for name in previous.keys() {
            map.remove(name);
        }
        for (name, base) in current {
            let info = Arc::new(S::new(&name, base));
            map.insert(name, info);
        }
        result.updated_services.insert(service);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{ServicePort as ApiPort, ServiceSpec};
    use kube::api::ObjectMeta;

    struct Svc(BaseServicePortInfo);
    impl ServicePort for Svc {
        fn new(_: &ServicePortName, base: BaseServicePortInfo) -> Self {
            Svc(base)
        }
        fn base(&self) -> &BaseServicePortInfo {
            &self.0
        }
    }

    fn svc(port: i32, labels: &[(&str, &str)]) -> Service {
        Service {
            metadata: ObjectMeta {
                namespace: Some("ns".into()),
                name: Some("s".into()),
                labels: Some(labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()),
                ..Default::default()
            },
            spec: Some(ServiceSpec {
                cluster_ip: Some("10.0.0.1".into()),
                ports: Some(vec![ApiPort { port, ..Default::default() }]),
                ..Default::default()
            }),
            status: None,
        }
    }

    #[test]
    fn irrelevant_and_undone_changes_are_dropped() {
        let mut t = ServiceChangeTracker::<Svc>::new(Family::Ip);
        let mut map = ServicePortMap::new();
        assert!(t.update(None, Some(&svc(80, &[]))));
        assert_eq!(update_service_map(&mut map, &mut t).updated_services.len(), 1);
        assert_eq!(map.len(), 1);
        // A label change is nothing to the proxier.
        assert!(!t.update(Some(&svc(80, &[])), Some(&svc(80, &[("a", "b")]))));
        // A change and its undoing before a sync cancel out.
        assert!(t.update(Some(&svc(80, &[])), Some(&svc(81, &[]))));
        assert!(!t.update(Some(&svc(81, &[])), Some(&svc(80, &[]))));
        assert!(update_service_map(&mut map, &mut t).updated_services.is_empty());
        // Deletion.
        assert!(t.update(Some(&svc(80, &[])), None));
        update_service_map(&mut map, &mut t);
        assert!(map.is_empty());
    }
}
