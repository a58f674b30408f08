//! The built-in admission plugins: upstream's ordered list (`AllOrderedPlugins` of
//! `pkg/kubeapiserver/options/plugins.go`, v1.32), the default-on set, and the factory that
//! makes each plugin this server implements. The chain runs the enabled plugins in this
//! order whatever order the flags name them in.
//!
//! Plugins upstream has that this server does not implement are refused when named in
//! `--enable-admission-plugins`, and left out (with one log line) when default-on.

pub mod default_ingress_class;
pub mod default_storage_class;
pub mod default_toleration_seconds;
pub mod limit_ranger;
pub mod namespace_lifecycle;
pub mod node_restriction;
pub mod pod_security;
pub mod priority;
pub mod pvc_resize;
pub mod resource_quota;
pub mod runtime_class;
pub mod service_account;
pub mod simple;
pub mod taint_nodes_by_condition;

use std::sync::Arc;

use super::Plugin;
use super::config::AdmissionConfig;
use super::options::Options;
use crate::registry::Registry;

/// Every plugin upstream knows, in the order the chain runs them.
pub const ORDERED: &[&str] = &[
    "AlwaysAdmit",
    "NamespaceAutoProvision",
    "NamespaceLifecycle",
    "NamespaceExists",
    "LimitPodHardAntiAffinityTopology",
    "LimitRanger",
    "ServiceAccount",
    "NodeRestriction",
    "TaintNodesByCondition",
    "AlwaysPullImages",
    "ImagePolicyWebhook",
    "PodSecurity",
    "PodNodeSelector",
    "Priority",
    "DefaultTolerationSeconds",
    "PodTolerationRestriction",
    "EventRateLimit",
    "ExtendedResourceToleration",
    "DefaultStorageClass",
    "StorageObjectInUseProtection",
    "OwnerReferencesPermissionEnforcement",
    "PersistentVolumeClaimResize",
    "RuntimeClass",
    "CertificateApproval",
    "CertificateSigning",
    "ClusterTrustBundleAttest",
    "CertificateSubjectRestriction",
    "DefaultIngressClass",
    "DenyServiceExternalIPs",
    // Webhooks, policies and quota go last, as upstream.
    "MutatingAdmissionPolicy",
    "MutatingAdmissionWebhook",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionWebhook",
    "ResourceQuota",
    "AlwaysDeny",
];

/// The plugins enabled without any flag (upstream's complement of `DefaultOffAdmissionPlugins`).
pub const DEFAULT_ON: &[&str] = &[
    "NamespaceLifecycle",
    "LimitRanger",
    "ServiceAccount",
    "TaintNodesByCondition",
    "PodSecurity",
    "Priority",
    "DefaultTolerationSeconds",
    "DefaultStorageClass",
    "StorageObjectInUseProtection",
    "PersistentVolumeClaimResize",
    "RuntimeClass",
    "CertificateApproval",
    "CertificateSigning",
    "ClusterTrustBundleAttest",
    "CertificateSubjectRestriction",
    "DefaultIngressClass",
    "MutatingAdmissionWebhook",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionWebhook",
    "ResourceQuota",
];

/// Plugins upstream configures through `--admission-control-config-file`; configuration
/// for one of them that no plugin here takes is refused.
const CONFIGURABLE: &[&str] = &[
    "EventRateLimit",
    "ImagePolicyWebhook",
    "PodNodeSelector",
    "PodTolerationRestriction",
    "PodSecurity",
    "ResourceQuota",
    "MutatingAdmissionWebhook",
    "ValidatingAdmissionWebhook",
];

/// What a plugin may use when it is made.
pub struct Context<'a> {
    pub registry: &'a Arc<Registry>,
    pub opts: &'a Options,
    /// The plugin's configuration from the file: `config.take("<PluginName>")`.
    pub config: &'a AdmissionConfig,
}

/// Makes the plugin called `name`; None when this server does not implement it.
pub fn build(name: &str, ctx: &Context<'_>) -> Result<Option<Arc<dyn Plugin>>, String> {
    let plugin: Arc<dyn Plugin> = match name {
        "AlwaysAdmit" => Arc::new(simple::AlwaysAdmit),
        "AlwaysDeny" => Arc::new(simple::AlwaysDeny),
        "AlwaysPullImages" => Arc::new(simple::AlwaysPullImages),
        "DenyServiceExternalIPs" => Arc::new(simple::DenyServiceExternalIPs),
        "LimitPodHardAntiAffinityTopology" => Arc::new(simple::LimitPodHardAntiAffinityTopology),
        "NamespaceLifecycle" => Arc::new(namespace_lifecycle::NamespaceLifecycle::new(ctx)?),
        "LimitRanger" => Arc::new(limit_ranger::LimitRanger::new(ctx)?),
        "ServiceAccount" => Arc::new(service_account::ServiceAccount::new(ctx)?),
        "NodeRestriction" => Arc::new(node_restriction::NodeRestriction::new(ctx)?),
        "TaintNodesByCondition" => Arc::new(taint_nodes_by_condition::TaintNodesByCondition),
        "PodSecurity" => Arc::new(pod_security::PodSecurity::new(ctx)?),
        "Priority" => Arc::new(priority::Priority::new(ctx)?),
        "DefaultTolerationSeconds" => {
            Arc::new(default_toleration_seconds::DefaultTolerationSeconds::new(ctx))
        }
        "DefaultStorageClass" => Arc::new(default_storage_class::DefaultStorageClass::new(ctx)?),
        "PersistentVolumeClaimResize" => Arc::new(pvc_resize::PersistentVolumeClaimResize::new(ctx)?),
        "RuntimeClass" => Arc::new(runtime_class::RuntimeClass::new(ctx)?),
        "DefaultIngressClass" => Arc::new(default_ingress_class::DefaultIngressClass::new(ctx)?),
        "ResourceQuota" => Arc::new(resource_quota::ResourceQuota::new(ctx)?),
        // ---- Webhooks (crate::admission::webhook) -------------------------------------
        // A `WebhookAdmissionConfiguration` (client credentials by kubeconfig) is not
        // taken: `chain` refuses such configuration as unsupported.
        "MutatingAdmissionWebhook" => Arc::new(super::webhook::MutatingAdmissionWebhook::new(ctx.registry)?),
        "ValidatingAdmissionWebhook" => {
            Arc::new(super::webhook::ValidatingAdmissionWebhook::new(ctx.registry)?)
        }
        // ---------------------------------------------------------------------------------
        _ => return Ok(None),
    };
    Ok(Some(plugin))
}

/// The enabled plugins' names in upstream's order (upstream's `AdmissionOptions.Validate`
/// and `enabledPluginNames`).
pub fn enabled(opts: &Options) -> Result<Vec<&'static str>, String> {
    let named = |list: &[String]| -> Vec<String> {
        list.iter().map(|s| s.trim().to_string()).filter(|s| !s.is_empty()).collect()
    };
    let (enable, disable) = (named(&opts.enable_admission_plugins), named(&opts.disable_admission_plugins));
    let mut errs = Vec::new();
    for (flag, list) in [("enable-admission-plugins", &enable), ("disable-admission-plugins", &disable)] {
        for name in list {
            if !ORDERED.contains(&name.as_str()) {
                errs.push(format!("{flag} plugin {name:?} is unknown"));
            }
        }
    }
    let mut both: Vec<&String> = enable.iter().filter(|p| disable.contains(p)).collect();
    both.sort();
    both.dedup();
    if !both.is_empty() {
        let names: Vec<&str> = both.iter().map(|s| s.as_str()).collect();
        errs.push(format!(
            "[{}] in enable-admission-plugins and disable-admission-plugins overlapped",
            names.join(" ")
        ));
    }
    if !errs.is_empty() {
        return Err(aggregate(&errs));
    }
    Ok(ORDERED
        .iter()
        .copied()
        .filter(|p| {
            enable.iter().any(|e| e == p) || (DEFAULT_ON.contains(p) && !disable.iter().any(|d| d == p))
        })
        .collect())
}

/// Upstream's error aggregate: one message alone, several in brackets.
fn aggregate(errs: &[String]) -> String {
    match errs {
        [one] => one.clone(),
        many => format!("[{}]", many.join(", ")),
    }
}

/// Builds the enabled plugins, in order.
pub fn chain(opts: &Options, registry: &Arc<Registry>) -> Result<Vec<Arc<dyn Plugin>>, String> {
    let names = enabled(opts)?;
    let config = AdmissionConfig::load(opts.admission_control_config_file.as_deref())
        .map_err(|e| format!("failed to read plugin config: {e}"))?;
    let ctx = Context { registry, opts, config: &config };
    let mut plugins = Vec::new();
    let mut missing = Vec::new();
    for name in &names {
        match build(name, &ctx)? {
            Some(p) => plugins.push(p),
            None => missing.push(*name),
        }
    }
    let asked: Vec<&str> = missing
        .iter()
        .copied()
        .filter(|m| opts.enable_admission_plugins.iter().any(|e| e.trim() == *m))
        .collect();
    if !asked.is_empty() {
        return Err(format!(
            "enable-admission-plugins: admission plugins not implemented by this server: {}",
            asked.join(", ")
        ));
    }
    if !missing.is_empty() {
        tracing::info!(plugins = %missing.join(","), "default-on admission plugins this server does not implement are off");
    }
    let unused: Vec<&str> = config.unused(&names).into_iter().filter(|p| CONFIGURABLE.contains(p)).collect();
    if !unused.is_empty() {
        return Err(format!(
            "failed to read plugin config: configuration of admission plugins {} is not supported by this server",
            unused.join(", ")
        ));
    }
    Ok(plugins)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::admission::{Attributes, Operation};
    use crate::authn::User;
    use crate::registry::resource::{ResourceInfo, info_of};
    use k8s_openapi::api::core::v1 as core;

    pub fn pods_info() -> ResourceInfo {
        info_of::<core::Pod>("pod", &[], &[], true, &["status", "binding"], "pods")
    }

    pub fn services_info() -> ResourceInfo {
        info_of::<core::Service>("service", &[], &[], true, &["status"], "services/specs")
    }

    pub fn nodes_info() -> ResourceInfo {
        info_of::<core::Node>("node", &[], &[], false, &["status"], "minions")
    }

    pub fn namespaces_info() -> ResourceInfo {
        info_of::<core::Namespace>("namespace", &[], &[], false, &["status", "finalize"], "namespaces")
    }

    /// A write of `object` (over `old`) named `name` in namespace `default`.
    pub fn attrs<'a>(
        info: &'a ResourceInfo,
        operation: Operation,
        name: &'a str,
        object: Option<serde_json::Value>,
        old: Option<&'a serde_json::Value>,
        user: &'a User,
    ) -> Attributes<'a> {
        Attributes {
            operation,
            resource: info,
            subresource: None,
            namespace: info.namespaced.then_some("default"),
            name,
            object,
            old_object: old,
            user,
            dry_run: false,
        }
    }

    fn opts(enable: &[&str], disable: &[&str]) -> Options {
        Options {
            enable_admission_plugins: enable.iter().map(|s| s.to_string()).collect(),
            disable_admission_plugins: disable.iter().map(|s| s.to_string()).collect(),
            ..Options::default()
        }
    }

    #[test]
    fn default_set_in_upstream_order() {
        let names = enabled(&opts(&[], &[])).unwrap();
        assert_eq!(names.len(), DEFAULT_ON.len());
        assert_eq!(names[0], "NamespaceLifecycle");
        assert_eq!(names.last(), Some(&"ResourceQuota"));
        let with = enabled(&opts(&["NodeRestriction", "AlwaysPullImages"], &["LimitRanger"])).unwrap();
        let pos = |n: &str| with.iter().position(|x| *x == n);
        assert!(pos("LimitRanger").is_none());
        assert!(pos("ServiceAccount") < pos("NodeRestriction"));
        assert!(pos("NodeRestriction") < pos("TaintNodesByCondition"));
        assert!(pos("TaintNodesByCondition") < pos("AlwaysPullImages"));
        assert!(every_order_entry_known());
    }

    fn every_order_entry_known() -> bool {
        DEFAULT_ON.iter().all(|p| ORDERED.contains(p)) && CONFIGURABLE.iter().all(|p| ORDERED.contains(p))
    }

    #[test]
    fn unknown_and_overlapping_names_are_refused_as_upstream() {
        assert_eq!(
            enabled(&opts(&["Foo"], &[])).unwrap_err(),
            "enable-admission-plugins plugin \"Foo\" is unknown"
        );
        let e = enabled(&opts(&["Priority", "Bar"], &["Priority"])).unwrap_err();
        assert_eq!(
            e,
            "[enable-admission-plugins plugin \"Bar\" is unknown, [Priority] in enable-admission-plugins and disable-admission-plugins overlapped]"
        );
        assert!(enabled(&opts(&[""], &[])).is_ok());
    }
}
