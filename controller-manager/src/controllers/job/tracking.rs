//! Pod tracking with the `batch.kubernetes.io/job-tracking` finalizer: a finished pod is
//! first recorded in `status.uncountedTerminatedPods` (or, for Indexed Jobs, in
//! `status.completedIndexes`), then its finalizer is removed, then it moves into the
//! `succeeded`/`failed` counters. Each step is written before the next starts, so a
//! controller killed at any point neither loses nor double-counts a pod: a pod still
//! holding the finalizer is not yet counted, a UID in the uncounted lists is counted once
//! its finalizer is gone.

use std::collections::{HashMap, HashSet};

use k8s_openapi::api::batch::v1::{JobStatus, UncountedTerminatedPods};
use k8s_openapi::api::core::v1::Pod;
use parking_lot::Mutex;

pub const FINALIZER: &str = "batch.kubernetes.io/job-tracking";

pub fn has_finalizer(pod: &Pod) -> bool {
    pod.metadata.finalizers.as_ref().is_some_and(|f| f.iter().any(|f| f == FINALIZER))
}

/// The UIDs of pods whose finalizer removal was sent and not yet seen in the informer,
/// per Job key (upstream's `uidTrackingExpectations`): until seen, a pod that still shows
/// the finalizer must not be counted again.
#[derive(Default)]
pub struct FinalizerExpectations {
    map: Mutex<HashMap<String, HashSet<String>>>,
}

impl FinalizerExpectations {
    pub fn expect_removed(&self, key: &str, uids: impl IntoIterator<Item = String>) {
        self.map.lock().entry(key.to_owned()).or_default().extend(uids);
    }

    pub fn observed(&self, key: &str, uid: &str) {
        if let Some(set) = self.map.lock().get_mut(key) {
            set.remove(uid);
        }
    }

    pub fn expected(&self, key: &str) -> HashSet<String> {
        self.map.lock().get(key).cloned().unwrap_or_default()
    }

    pub fn delete(&self, key: &str) {
        self.map.lock().remove(key);
    }
}

/// The uncounted UIDs as sets, for lookups.
#[derive(Debug, Default, Clone)]
pub struct Uncounted {
    pub succeeded: HashSet<String>,
    pub failed: HashSet<String>,
}

impl Uncounted {
    pub fn of(status: &JobStatus) -> Uncounted {
        let u = status.uncounted_terminated_pods.as_ref();
        let set = |l: Option<&Vec<String>>| l.into_iter().flatten().cloned().collect();
        Uncounted {
            succeeded: set(u.and_then(|u| u.succeeded.as_ref())),
            failed: set(u.and_then(|u| u.failed.as_ref())),
        }
    }
}

/// Moves the uncounted UIDs whose pods no longer hold the finalizer into the counters.
/// Returns whether the status changed.
pub fn clean_uncounted(status: &mut JobStatus, with_finalizer: &HashSet<String>) -> bool {
    let u = status.uncounted_terminated_pods.get_or_insert_with(UncountedTerminatedPods::default);
    let mut changed = false;
    for (list, counter) in [(&mut u.succeeded, &mut status.succeeded), (&mut u.failed, &mut status.failed)] {
        let Some(uids) = list.as_mut() else { continue };
        let before = uids.len();
        uids.retain(|uid| with_finalizer.contains(uid));
        let moved = before - uids.len();
        if moved > 0 {
            changed = true;
            *counter = Some(counter.unwrap_or(0) + moved as i32);
        }
        if uids.is_empty() {
            *list = None;
        }
    }
    changed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counted_once_the_finalizer_is_gone() {
        let mut status = JobStatus {
            succeeded: Some(2),
            uncounted_terminated_pods: Some(UncountedTerminatedPods {
                succeeded: Some(vec!["a".into(), "b".into()]),
                failed: Some(vec!["c".into()]),
            }),
            ..Default::default()
        };
        let still: HashSet<String> = ["b".to_string()].into();
        assert!(clean_uncounted(&mut status, &still));
        assert_eq!((status.succeeded, status.failed), (Some(3), Some(1)));
        let u = status.uncounted_terminated_pods.as_ref().unwrap();
        assert_eq!(u.succeeded.as_deref(), Some(&["b".to_string()][..]));
        assert_eq!(u.failed, None);
        assert!(!clean_uncounted(&mut status, &still));
    }
}
