//! The controllers, one module each, and the `--controllers` selection: upstream's
//! canonical names (`replicaset-controller`) with their older aliases (`replicaset`).

pub mod certificates;
pub mod clusterrole_aggregation;
pub mod cronjob;
pub mod daemonset;
pub mod deployment;
pub mod disruption;
pub mod endpoints;
pub mod endpointslice;
pub mod endpointslicemirroring;
pub mod ephemeral_volume;
pub mod garbagecollector;
pub mod job;
pub mod namespace;
pub mod nodeipam;
pub mod nodelifecycle;
pub mod persistentvolume;
pub mod podautoscaler;
pub mod podgc;
pub mod replicaset;
pub mod replicationcontroller;
pub mod resourcequota;
pub mod root_ca_publisher;
pub mod serviceaccount;
pub mod statefulset;
pub mod taint_eviction;
pub mod ttl_after_finished;

use crate::controller::{Context, Error};

pub const GARBAGE_COLLECTOR: &str = "garbage-collector-controller";

/// Canonical name, alias, the `kube-system` service account it acts as under
/// `--use-service-account-credentials` (upstream's client names, which the bootstrap RBAC
/// policy binds to `system:controller:<name>`), and how to start it.
type Starter = fn(&Context) -> Result<(), Error>;

const ALL: &[(&str, &str, &str, Starter)] = &[
    (
        "certificatesigningrequest-approving-controller",
        "csrapproving",
        "certificate-controller",
        certificates::start_approving,
    ),
    (
        "certificatesigningrequest-cleaner-controller",
        "csrcleaner",
        "certificate-controller",
        certificates::start_cleaner,
    ),
    (
        "certificatesigningrequest-signing-controller",
        "csrsigning",
        "certificate-controller",
        certificates::start_signing,
    ),
    (
        "clusterrole-aggregation-controller",
        "clusterrole-aggregation",
        "clusterrole-aggregation-controller",
        clusterrole_aggregation::start,
    ),
    ("cronjob-controller", "cronjob", "cronjob-controller", cronjob::start),
    ("daemonset-controller", "daemonset", "daemon-set-controller", daemonset::start),
    ("deployment-controller", "deployment", "deployment-controller", deployment::start),
    ("disruption-controller", "disruption", "disruption-controller", disruption::start),
    ("endpoints-controller", "endpoint", "endpoint-controller", endpoints::start),
    ("endpointslice-controller", "endpointslice", "endpointslice-controller", endpointslice::start),
    (
        "endpointslice-mirroring-controller",
        "endpointslicemirroring",
        "endpointslicemirroring-controller",
        endpointslicemirroring::start,
    ),
    (
        "ephemeral-volume-controller",
        "ephemeral-volume",
        "ephemeral-volume-controller",
        ephemeral_volume::start,
    ),
    (GARBAGE_COLLECTOR, "garbagecollector", "generic-garbage-collector", garbagecollector::start),
    (
        "horizontal-pod-autoscaler-controller",
        "horizontalpodautoscaling",
        "horizontal-pod-autoscaler",
        podautoscaler::start,
    ),
    ("job-controller", "job", "job-controller", job::start),
    ("namespace-controller", "namespace", "namespace-controller", namespace::start),
    ("node-ipam-controller", "nodeipam", "node-controller", nodeipam::start),
    ("node-lifecycle-controller", "nodelifecycle", "node-controller", nodelifecycle::start),
    (
        "persistentvolume-binder-controller",
        "persistentvolume-binder",
        "persistent-volume-binder",
        persistentvolume::start,
    ),
    ("pod-garbage-collector-controller", "podgc", "pod-garbage-collector", podgc::start),
    ("replicaset-controller", "replicaset", "replicaset-controller", replicaset::start),
    (
        "replicationcontroller-controller",
        "replicationcontroller",
        "replication-controller",
        replicationcontroller::start,
    ),
    ("resourcequota-controller", "resourcequota", "resourcequota-controller", resourcequota::start),
    (
        "root-ca-certificate-publisher-controller",
        "root-ca-cert-publisher",
        "root-ca-cert-publisher",
        root_ca_publisher::start,
    ),
    ("serviceaccount-controller", "serviceaccount", "service-account-controller", serviceaccount::start),
    ("statefulset-controller", "statefulset", "statefulset-controller", statefulset::start),
    // No role of its own upstream either: it acts with node-controller's.
    ("taint-eviction-controller", "taint-eviction-controller", "node-controller", taint_eviction::start),
    (
        "ttl-after-finished-controller",
        "ttl-after-finished",
        "ttl-after-finished-controller",
        ttl_after_finished::start,
    ),
];

/// The service account a controller acts as under `--use-service-account-credentials`.
pub fn service_account(name: &str) -> Option<&'static str> {
    ALL.iter().find(|(c, ..)| *c == name).map(|(_, _, sa, _)| *sa)
}

fn canonical(name: &str) -> Option<&'static str> {
    ALL.iter().find(|(c, a, ..)| *c == name || *a == name).map(|(c, ..)| *c)
}

/// The controllers `--controllers` enables, as canonical names in a stable order.
pub fn select(flags: &[String]) -> Result<Vec<&'static str>, String> {
    let mut star = false;
    let mut on = Vec::new();
    let mut off = Vec::new();
    for f in flags.iter().map(|f| f.trim()).filter(|f| !f.is_empty()) {
        if f == "*" {
            star = true;
            continue;
        }
        let (list, name) = match f.strip_prefix('-') {
            Some(n) => (&mut off, n),
            None => (&mut on, f),
        };
        let c = canonical(name)
            .ok_or_else(|| format!("--controllers: {name:?} is not in the list of known controllers"))?;
        list.push(c);
    }
    Ok(ALL.iter().map(|(c, ..)| *c).filter(|c| (star || on.contains(c)) && !off.contains(c)).collect())
}

/// Starts one controller by canonical name.
pub fn start(ctx: &Context, name: &str) -> Result<(), Error> {
    let (.., start) = ALL
        .iter()
        .find(|(c, ..)| *c == name)
        .ok_or_else(|| Error::Other(format!("unknown controller {name}")))?;
    start(ctx)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sel(flags: &[&str]) -> Result<Vec<&'static str>, String> {
        select(&flags.iter().map(|s| s.to_string()).collect::<Vec<_>>())
    }

    #[test]
    fn controllers_flag() {
        assert_eq!(sel(&["*"]).unwrap().len(), ALL.len());
        let some = sel(&["*", "-garbagecollector", "-deployment-controller"]).unwrap();
        assert!(!some.contains(&GARBAGE_COLLECTOR) && !some.contains(&"deployment-controller"));
        assert_eq!(some.len(), ALL.len() - 2);
        assert_eq!(
            sel(&["replicaset", "podgc"]).unwrap(),
            vec!["pod-garbage-collector-controller", "replicaset-controller"]
        );
        assert!(sel(&["nosuch"]).is_err());
    }
}
