//! Upstream's autoregister controller, fed as kube-apiserver feeds it: a local APIService
//! for every built-in group version, written once at start (`automanaged: onstart`: a
//! user who deletes one later keeps it deleted), and one for every group version a
//! CustomResourceDefinition serves (`automanaged: true`: created, corrected and deleted
//! as the CRDs change). APIServices without the label are the users' and left alone.

use std::collections::BTreeSet;

use serde_json::{Value, json};

use crate::errors::ApiResult;
use crate::registry::Registry;
use crate::registry::store::{DeleteOptions, Store};

pub const AUTOMANAGED: &str = "kube-aggregator.kubernetes.io/automanaged";

/// Upstream's group and version priorities for the built-in group versions
/// (`apiVersionPriorities`); a group version not listed gets no APIService, as upstream
/// (`apiregistration.k8s.io` itself has none: discovery lists it first regardless).
const PRIORITIES: &[(&str, &str, i64, i64)] = &[
    ("", "v1", 18000, 1),
    ("apps", "v1", 17800, 15),
    ("events.k8s.io", "v1", 17750, 15),
    ("authentication.k8s.io", "v1", 17700, 15),
    ("authorization.k8s.io", "v1", 17600, 15),
    ("autoscaling", "v1", 17500, 15),
    ("autoscaling", "v2", 17500, 30),
    ("batch", "v1", 17400, 15),
    ("certificates.k8s.io", "v1", 17300, 15),
    ("networking.k8s.io", "v1", 17200, 15),
    ("policy", "v1", 17100, 15),
    ("rbac.authorization.k8s.io", "v1", 17000, 15),
    ("storage.k8s.io", "v1", 16800, 15),
    ("apiextensions.k8s.io", "v1", 16700, 15),
    ("admissionregistration.k8s.io", "v1", 16700, 15),
    ("scheduling.k8s.io", "v1", 16600, 15),
    ("coordination.k8s.io", "v1", 16500, 15),
    ("node.k8s.io", "v1", 16300, 15),
    ("discovery.k8s.io", "v1", 16200, 15),
    ("flowcontrol.apiserver.k8s.io", "v1", 16100, 21),
];

/// What upstream's CRD registration controller gives every CRD group version: low in
/// discovery, versions ordered kube-like among themselves.
const CRD_GROUP_PRIORITY: i64 = 1000;
const CRD_VERSION_PRIORITY: i64 = 100;

/// The APIService of `group`/`version`, served locally.
pub fn local(group: &str, version: &str, group_priority: i64, version_priority: i64, managed: &str) -> Value {
    json!({
        "apiVersion": "apiregistration.k8s.io/v1",
        "kind": "APIService",
        "metadata": {"name": format!("{version}.{group}"), "labels": {AUTOMANAGED: managed}},
        "spec": {
            "group": group,
            "version": version,
            "groupPriorityMinimum": group_priority,
            "versionPriority": version_priority,
        },
    })
}

#[derive(Default)]
pub struct AutoRegister {
    /// The built-in APIServices were written (once per process, as upstream's "on start").
    started: bool,
}

impl AutoRegister {
    pub async fn sync(&mut self, registry: &Registry, store: &Store) -> ApiResult<()> {
        if !self.started {
            for (group, version) in crate::discovery::built_in_group_versions(registry) {
                let Some((_, _, gp, vp)) = PRIORITIES.iter().find(|p| p.0 == group && p.1 == version) else {
                    tracing::info!(group, version, "no APIService for a group version without a priority");
                    continue;
                };
                ensure(store, local(group, version, *gp, *vp, "onstart")).await?;
            }
            self.started = true;
        }
        let crd_versions: BTreeSet<(String, String)> = registry
            .custom_stores()
            .iter()
            .map(|s| (s.res.info.group.to_string(), s.res.info.version.to_string()))
            .collect();
        for (group, version) in &crd_versions {
            ensure(store, local(group, version, CRD_GROUP_PRIORITY, CRD_VERSION_PRIORITY, "true")).await?;
        }
        // CRD group versions no longer served.
        let list = store.list(&Default::default()).await?;
        for item in list["items"].as_array().into_iter().flatten() {
            let spec = &item["spec"];
            let gv = (
                spec["group"].as_str().unwrap_or_default().to_string(),
                spec["version"].as_str().unwrap_or_default().to_string(),
            );
            if item["metadata"]["labels"][AUTOMANAGED] == "true" && !crd_versions.contains(&gv) {
                let name = item["metadata"]["name"].as_str().unwrap_or_default();
                match store.delete(None, name, &DeleteOptions::default()).await {
                    Ok(_) => {}
                    Err(e) if e.is_not_found() => {}
                    Err(e) => return Err(e),
                }
            }
        }
        Ok(())
    }
}

/// Creates `desired`, or brings an automanaged APIService of its name back to it.
async fn ensure(store: &Store, desired: Value) -> ApiResult<()> {
    let name = desired["metadata"]["name"].as_str().unwrap_or_default().to_string();
    let current = match store.get(None, &name, Some(0)).await {
        Ok(c) => c,
        Err(e) if e.is_not_found() => {
            return match store.create(None, desired, false).await {
                Ok(_) => Ok(()),
                Err(e) if e.reason == "AlreadyExists" => Ok(()),
                Err(e) => Err(e),
            };
        }
        Err(e) => return Err(e),
    };
    let managed = current["metadata"]["labels"][AUTOMANAGED].as_str();
    if managed.is_none() {
        return Ok(());
    }
    if current["spec"] == desired["spec"] && managed == desired["metadata"]["labels"][AUTOMANAGED].as_str() {
        return Ok(());
    }
    store
        .guaranteed_update(None, &name, None, false, |old| {
            let mut new = old.clone();
            new["spec"] = desired["spec"].clone();
            new["metadata"]["labels"][AUTOMANAGED] = desired["metadata"]["labels"][AUTOMANAGED].clone();
            Ok(new)
        })
        .await
        .map(|_| ())
}
