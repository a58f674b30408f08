//! The in-tree plugins, one module each, and the registry that builds them by name with
//! their `pluginConfig` args (unknown args fields are errors, as upstream's strict
//! decoding).

pub mod balanced_allocation;
pub mod default_binder;
pub mod default_preemption;
pub mod image_locality;
pub mod inter_pod_affinity;
pub mod node_affinity;
pub mod node_name;
pub mod node_ports;
pub mod node_resources_fit;
pub mod node_unschedulable;
pub mod pod_topology_spread;
pub mod priority_sort;
pub mod scheduling_gates;
pub mod taint_toleration;
pub mod volume_binding;
pub mod volume_restrictions;

#[cfg(test)]
pub mod testing;

use std::sync::Arc;

use serde::de::DeserializeOwned;

use crate::framework::Plugin;

/// upstream v1.32's default plugins, in multi-point order, with their score weights
/// (`None`: the plugin does not score).
pub const DEFAULT_PLUGINS: &[(&str, Option<i64>)] = &[
    (scheduling_gates::NAME, None),
    (priority_sort::NAME, None),
    (node_unschedulable::NAME, None),
    (node_name::NAME, None),
    (taint_toleration::NAME, Some(3)),
    (node_affinity::NAME, Some(2)),
    (node_ports::NAME, None),
    (node_resources_fit::NAME, Some(1)),
    (volume_restrictions::NAME, None),
    (volume_binding::NAME, None),
    (pod_topology_spread::NAME, Some(2)),
    (inter_pod_affinity::NAME, Some(2)),
    (default_preemption::NAME, None),
    (balanced_allocation::NAME, Some(1)),
    (image_locality::NAME, Some(1)),
    (default_binder::NAME, None),
];

/// Every plugin name this scheduler knows.
pub fn names() -> impl Iterator<Item = &'static str> {
    DEFAULT_PLUGINS.iter().map(|(n, _)| *n)
}

fn args<T: DeserializeOwned + Default>(name: &str, raw: Option<&serde_json::Value>) -> Result<T, String> {
    match raw {
        None => Ok(T::default()),
        Some(v) => {
            let mut v = v.clone();
            // Typed args may repeat their kind/apiVersion, as upstream files often do.
            if let Some(o) = v.as_object_mut() {
                o.remove("kind");
                o.remove("apiVersion");
            }
            serde_json::from_value(v).map_err(|e| format!("pluginConfig args of {name}: {e}"))
        }
    }
}

fn no_args(name: &str, raw: Option<&serde_json::Value>) -> Result<(), String> {
    match raw {
        Some(v) if v.as_object().is_some_and(|o| o.keys().any(|k| k != "kind" && k != "apiVersion")) => {
            Err(format!("pluginConfig args of {name}: this plugin takes no args"))
        }
        _ => Ok(()),
    }
}

/// Builds the plugin `name` with its args; `client` is for plugins that write to the API.
pub fn build(
    name: &str,
    raw: Option<&serde_json::Value>,
    client: &kube::Client,
) -> Result<Arc<dyn Plugin>, String> {
    Ok(match name {
        node_resources_fit::NAME => Arc::new(node_resources_fit::NodeResourcesFit::new(args(name, raw)?)?),
        inter_pod_affinity::NAME => Arc::new(inter_pod_affinity::InterPodAffinity::new(args(name, raw)?)?),
        default_preemption::NAME => Arc::new(default_preemption::DefaultPreemption::new(args(name, raw)?)?),
        pod_topology_spread::NAME => Arc::new(pod_topology_spread::PodTopologySpread::new(args(name, raw)?)?),
        other => {
            no_args(other, raw)?;
            match other {
                scheduling_gates::NAME => Arc::new(scheduling_gates::SchedulingGates),
                priority_sort::NAME => Arc::new(priority_sort::PrioritySort),
                node_unschedulable::NAME => Arc::new(node_unschedulable::NodeUnschedulable),
                node_name::NAME => Arc::new(node_name::NodeName),
                taint_toleration::NAME => Arc::new(taint_toleration::TaintToleration),
                node_affinity::NAME => Arc::new(node_affinity::NodeAffinity),
                node_ports::NAME => Arc::new(node_ports::NodePorts),
                volume_restrictions::NAME => Arc::new(volume_restrictions::VolumeRestrictions),
                volume_binding::NAME => Arc::new(volume_binding::VolumeBinding::new(client.clone())),
                balanced_allocation::NAME => Arc::new(balanced_allocation::BalancedAllocation),
                image_locality::NAME => Arc::new(image_locality::ImageLocality),
                default_binder::NAME => Arc::new(default_binder::DefaultBinder::new(client.clone())),
                unknown => return Err(format!("plugin \"{unknown}\" does not exist")),
            }
        }
    })
}
