//! The pods this node should run, merged from the sources (the API server's field-selected
//! watch and the static pod directory), plus the mirror pods seen in the API.

use std::collections::HashMap;

use k8s_openapi::api::core::v1::Pod;
use parking_lot::Mutex;

/// Annotations upstream's kubelet uses for static and mirror pods.
pub const CONFIG_SOURCE_ANNOTATION: &str = "kubernetes.io/config.source";
pub const CONFIG_HASH_ANNOTATION: &str = "kubernetes.io/config.hash";
pub const CONFIG_SEEN_ANNOTATION: &str = "kubernetes.io/config.seen";
pub const CONFIG_MIRROR_ANNOTATION: &str = "kubernetes.io/config.mirror";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    Api,
    File,
}

pub fn is_mirror(pod: &Pod) -> bool {
    pod.metadata.annotations.as_ref().is_some_and(|a| a.contains_key(CONFIG_MIRROR_ANNOTATION))
}

pub fn uid(pod: &Pod) -> String {
    pod.metadata.uid.clone().unwrap_or_default()
}

/// `namespace/name`.
pub fn full_name(pod: &Pod) -> String {
    format!(
        "{}/{}",
        pod.metadata.namespace.as_deref().unwrap_or_default(),
        pod.metadata.name.as_deref().unwrap_or_default()
    )
}

#[derive(Default)]
struct State {
    /// Pods to run, by UID (static pods by their config hash).
    pods: HashMap<String, (Pod, Source)>,
    /// Mirror pods in the API, by the full name of their static pod.
    mirrors: HashMap<String, Pod>,
    /// Whether the API source has delivered its first complete list.
    api_synced: bool,
}

/// Shared desired state; every change returns the UIDs whose workers must look again.
#[derive(Default)]
pub struct PodManager {
    state: Mutex<State>,
}

impl PodManager {
    pub fn get(&self, uid: &str) -> Option<(Pod, Source)> {
        self.state.lock().pods.get(uid).cloned()
    }

    pub fn pods(&self) -> Vec<(Pod, Source)> {
        self.state.lock().pods.values().cloned().collect()
    }

    pub fn mirror_of(&self, full_name: &str) -> Option<Pod> {
        self.state.lock().mirrors.get(full_name).cloned()
    }

    pub fn api_synced(&self) -> bool {
        self.state.lock().api_synced
    }

    /// The static pod with `full_name`, if any (to find a mirror pod's static pod).
    fn static_uid(state: &State, full_name: &str) -> Option<String> {
        state
            .pods
            .iter()
            .find(|(_, (p, s))| *s == Source::File && self::full_name(p) == full_name)
            .map(|(u, _)| u.clone())
    }

    /// Mirror pods in the API whose static pod is gone (or never was on this kubelet).
    pub fn orphan_mirrors(&self) -> Vec<Pod> {
        let st = self.state.lock();
        st.mirrors
            .iter()
            .filter(|(name, _)| Self::static_uid(&st, name).is_none())
            .map(|(_, p)| p.clone())
            .collect()
    }

    /// An API pod added or changed.
    pub fn upsert_api(&self, pod: Pod) -> Vec<String> {
        let mut st = self.state.lock();
        if is_mirror(&pod) {
            let name = full_name(&pod);
            st.mirrors.insert(name.clone(), pod);
            return Self::static_uid(&st, &name).into_iter().collect();
        }
        let uid = uid(&pod);
        st.pods.insert(uid.clone(), (pod, Source::Api));
        vec![uid]
    }

    /// An API pod deleted.
    pub fn remove_api(&self, pod: &Pod) -> Vec<String> {
        let mut st = self.state.lock();
        if is_mirror(pod) {
            let name = full_name(pod);
            if st.mirrors.get(&name).map(uid) == Some(uid(pod)) {
                st.mirrors.remove(&name);
            }
            return Self::static_uid(&st, &name).into_iter().collect();
        }
        let u = uid(pod);
        st.pods.remove(&u);
        vec![u]
    }

    /// A complete list from the API (after a (re)list): replaces every API pod.
    pub fn replace_api(&self, list: Vec<Pod>) -> Vec<String> {
        let mut st = self.state.lock();
        let mut touched: Vec<String> =
            st.pods.iter().filter(|(_, (_, s))| *s == Source::Api).map(|(u, _)| u.clone()).collect();
        st.pods.retain(|_, (_, s)| *s != Source::Api);
        st.mirrors.clear();
        for pod in list {
            if is_mirror(&pod) {
                st.mirrors.insert(full_name(&pod), pod);
            } else {
                touched.push(uid(&pod));
                st.pods.insert(uid(&pod), (pod, Source::Api));
            }
        }
        st.api_synced = true;
        touched.extend(st.pods.iter().filter(|(_, (_, s))| *s == Source::File).map(|(u, _)| u.clone()));
        touched.sort();
        touched.dedup();
        touched
    }

    /// The complete set of static pods read from the manifest directory.
    pub fn replace_static(&self, list: Vec<Pod>) -> Vec<String> {
        let mut st = self.state.lock();
        let mut touched = Vec::new();
        let new: HashMap<String, Pod> = list.into_iter().map(|p| (uid(&p), p)).collect();
        st.pods.retain(|u, (_, s)| {
            let keep = *s != Source::File || new.contains_key(u);
            if !keep {
                touched.push(u.clone());
            }
            keep
        });
        for (u, pod) in new {
            if !st.pods.contains_key(&u) {
                touched.push(u.clone());
                st.pods.insert(u, (pod, Source::File));
            }
        }
        touched
    }
}
