//! From a Pod to CRI requests: the sandbox config (metadata, DNS, ports, cgroup parent,
//! namespaces) and each container's config (command, env, mounts, resources, security
//! context), with upstream's labels and annotations so that the runtime's state alone tells
//! which pod and container every sandbox and container belongs to.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::{Container, Pod};

use crate::cri;
use crate::qos::{QosClass, qos_class};

/// What the sandbox config needs besides the pod.
#[derive(Debug, Clone)]
pub struct SandboxContext {
    pub pod_logs_dir: PathBuf,
    pub cgroup_root: String,
    /// clusterDNS, clusterDomain and resolvConf: the pod's /etc/resolv.conf.
    pub dns: crate::dns::Configurer,
    pub node_name: String,
}

fn pod_labels(pod: &Pod) -> HashMap<String, String> {
    let m = &pod.metadata;
    let mut labels: HashMap<String, String> = m.labels.clone().unwrap_or_default().into_iter().collect();
    labels.insert(cri::POD_NAME_LABEL.into(), m.name.clone().unwrap_or_default());
    labels.insert(cri::POD_NAMESPACE_LABEL.into(), m.namespace.clone().unwrap_or_default());
    labels.insert(cri::POD_UID_LABEL.into(), m.uid.clone().unwrap_or_default());
    labels
}

/// `<podLogsDir>/<namespace>_<name>_<uid>`, upstream's layout.
pub fn pod_log_dir(pod_logs_dir: &Path, pod: &Pod) -> PathBuf {
    let m = &pod.metadata;
    pod_logs_dir.join(format!(
        "{}_{}_{}",
        m.namespace.as_deref().unwrap_or_default(),
        m.name.as_deref().unwrap_or_default(),
        m.uid.as_deref().unwrap_or_default()
    ))
}

/// The pod's cgroup under the cgroupfs driver: `<root>/kubepods[/burstable|/besteffort]/pod<uid>`.
pub fn pod_cgroup(cgroup_root: &str, pod: &Pod) -> String {
    let uid = pod.metadata.uid.as_deref().unwrap_or_default();
    let root = cgroup_root.trim_end_matches('/');
    match qos_class(pod) {
        QosClass::Guaranteed => format!("{root}/kubepods/pod{uid}"),
        QosClass::Burstable => format!("{root}/kubepods/burstable/pod{uid}"),
        QosClass::BestEffort => format!("{root}/kubepods/besteffort/pod{uid}"),
    }
}

fn host_network(pod: &Pod) -> bool {
    pod.spec.as_ref().and_then(|s| s.host_network).unwrap_or(false)
}

/// The sandbox config and the DNS warnings to record as events; `attempt` counts the
/// pod's sandboxes so far. An error (an unreadable resolv.conf, an invalid hostname) means
/// no sandbox can be made, as upstream's `generatePodSandboxConfig`.
pub fn sandbox_config(
    ctx: &SandboxContext,
    pod: &Pod,
    attempt: u32,
) -> Result<(cri::PodSandboxConfig, Vec<crate::dns::Warning>), String> {
    let m = &pod.metadata;
    let spec = pod.spec.clone().unwrap_or_default();
    let (dns_config, warnings) = ctx.dns.pod_dns(pod)?;
    // A hostNetwork pod keeps the node's name (the runtime leaves the UTS namespace alone).
    let hostname = if host_network(pod) {
        String::new()
    } else {
        let (hostname, domain) = crate::dns::hostname_and_domain(pod, &ctx.dns.cluster_domain)?;
        crate::dns::kernel_hostname(pod, &hostname, &domain)?
    };
    let mut port_mappings = Vec::new();
    for c in spec.containers.iter() {
        for p in c.ports.iter().flatten() {
            let Some(host_port) = p.host_port.filter(|p| *p > 0) else { continue };
            port_mappings.push(cri::PortMapping {
                protocol: match p.protocol.as_deref() {
                    Some("UDP") => cri::Protocol::Udp as i32,
                    Some("SCTP") => cri::Protocol::Sctp as i32,
                    _ => cri::Protocol::Tcp as i32,
                },
                container_port: p.container_port,
                host_port,
                host_ip: p.host_ip.clone().unwrap_or_default(),
            });
        }
    }
    let psc = spec.security_context.clone().unwrap_or_default();
    let privileged =
        all_containers(pod).any(|c| c.security_context.as_ref().and_then(|s| s.privileged).unwrap_or(false));
    let sysctls = psc.sysctls.iter().flatten().map(|s| (s.name.clone(), s.value.clone())).collect();
    let config = cri::PodSandboxConfig {
        metadata: Some(cri::PodSandboxMetadata {
            name: m.name.clone().unwrap_or_default(),
            uid: m.uid.clone().unwrap_or_default(),
            namespace: m.namespace.clone().unwrap_or_default(),
            attempt,
        }),
        hostname,
        log_directory: pod_log_dir(&ctx.pod_logs_dir, pod).display().to_string(),
        dns_config: Some(dns_config),
        port_mappings,
        labels: pod_labels(pod),
        annotations: m.annotations.clone().unwrap_or_default().into_iter().collect(),
        linux: Some(cri::LinuxPodSandboxConfig {
            cgroup_parent: pod_cgroup(&ctx.cgroup_root, pod),
            security_context: Some(cri::LinuxSandboxSecurityContext {
                namespace_options: Some(namespace_options(&spec)),
                run_as_user: psc.run_as_user.map(|value| cri::Int64Value { value }),
                run_as_group: psc.run_as_group.map(|value| cri::Int64Value { value }),
                supplemental_groups: supplemental_groups(&psc),
                privileged,
                ..Default::default()
            }),
            sysctls,
            ..Default::default()
        }),
        windows: None,
    };
    Ok((config, warnings))
}

/// The pod's namespaces: the host's when hostNetwork/hostPID/hostIPC, else the pod's; one
/// PID namespace per container unless `shareProcessNamespace`.
/// The pod's supplemental groups, with its fsGroup added (upstream's
/// `determineEffectiveSecurityContext`): a container user must be in the group that owns
/// the pod's volumes.
fn supplemental_groups(psc: &k8s_openapi::api::core::v1::PodSecurityContext) -> Vec<i64> {
    let mut groups = psc.supplemental_groups.clone().unwrap_or_default();
    if let Some(g) = psc.fs_group
        && !groups.contains(&g)
    {
        groups.push(g);
    }
    groups
}

fn namespace_options(spec: &k8s_openapi::api::core::v1::PodSpec) -> cri::NamespaceOption {
    let mode = |host: Option<bool>, otherwise: cri::NamespaceMode| {
        if host.unwrap_or(false) { cri::NamespaceMode::Node as i32 } else { otherwise as i32 }
    };
    let pid = if spec.share_process_namespace == Some(true) {
        cri::NamespaceMode::Pod
    } else {
        cri::NamespaceMode::Container
    };
    cri::NamespaceOption {
        network: mode(spec.host_network, cri::NamespaceMode::Pod),
        pid: mode(spec.host_pid, pid),
        ipc: mode(spec.host_ipc, cri::NamespaceMode::Pod),
        ..Default::default()
    }
}

/// Init containers, then regular containers.
pub fn all_containers(pod: &Pod) -> impl Iterator<Item = &Container> {
    let spec = pod.spec.as_ref();
    spec.and_then(|s| s.init_containers.as_ref())
        .into_iter()
        .flatten()
        .chain(spec.map(|s| s.containers.iter()).into_iter().flatten())
}

/// The pod's ephemeral containers as containers (the fields they share; an ephemeral
/// container has no ports, probes, lifecycle or resources), each with the name of the
/// container whose process namespace it targets.
pub fn ephemeral_containers(pod: &Pod) -> Vec<(Container, Option<String>)> {
    let spec = pod.spec.as_ref();
    spec.and_then(|s| s.ephemeral_containers.as_ref())
        .into_iter()
        .flatten()
        .filter_map(|e| {
            let c: Container = serde_json::to_value(e).and_then(serde_json::from_value).ok()?;
            Some((c, e.target_container_name.clone().filter(|t| !t.is_empty())))
        })
        .collect()
}

/// A stable hash of the container's spec: when it changes, the container is restarted.
pub fn container_hash(c: &Container) -> String {
    use sha2::Digest;
    // Fields the kubelet may not restart for (resources can be resized in place upstream,
    // but not here) are part of the hash; status-only or defaulted fields are not in the spec.
    let json = serde_json::to_vec(c).unwrap_or_default();
    let digest = sha2::Sha256::digest(&json);
    digest[..4].iter().map(|b| format!("{b:02x}")).collect()
}

/// One volume mount made concrete: where the kubelet prepared it on the host.
#[derive(Debug, Clone)]
pub struct HostMount {
    pub container_path: String,
    pub host_path: PathBuf,
    pub readonly: bool,
}

/// Upstream's default masked and read-only paths for unprivileged containers
/// (`securityContext.procMount: Default`).
const MASKED_PATHS: &[&str] = &[
    "/proc/asound",
    "/proc/acpi",
    "/proc/kcore",
    "/proc/keys",
    "/proc/latency_stats",
    "/proc/timer_list",
    "/proc/timer_stats",
    "/proc/sched_debug",
    "/proc/scsi",
    "/sys/firmware",
    "/sys/devices/virtual/powercap",
];
const READONLY_PATHS: &[&str] = &["/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"];

/// The container config for attempt `attempt` (its restart count).
#[allow(clippy::too_many_arguments)]
pub fn container_config(
    pod: &Pod,
    c: &Container,
    attempt: u32,
    envs: Vec<cri::KeyValue>,
    mounts: Vec<HostMount>,
    termination_log: Option<&Path>,
    memory_capacity: i64,
) -> cri::ContainerConfig {
    let spec = pod.spec.clone().unwrap_or_default();
    let mut labels = HashMap::new();
    labels.insert(cri::POD_NAME_LABEL.into(), pod.metadata.name.clone().unwrap_or_default());
    labels.insert(cri::POD_NAMESPACE_LABEL.into(), pod.metadata.namespace.clone().unwrap_or_default());
    labels.insert(cri::POD_UID_LABEL.into(), pod.metadata.uid.clone().unwrap_or_default());
    labels.insert(cri::CONTAINER_NAME_LABEL.into(), c.name.clone());
    let mut annotations = HashMap::new();
    annotations.insert(cri::CONTAINER_HASH_ANNOTATION.into(), container_hash(c));
    annotations.insert(cri::CONTAINER_RESTART_COUNT_ANNOTATION.into(), attempt.to_string());
    annotations.insert(
        cri::TERMINATION_GRACE_ANNOTATION.into(),
        spec.termination_grace_period_seconds.unwrap_or(30).to_string(),
    );
    let mut cri_mounts: Vec<cri::Mount> = mounts
        .into_iter()
        .map(|m| cri::Mount {
            container_path: m.container_path,
            host_path: m.host_path.display().to_string(),
            readonly: m.readonly,
            ..Default::default()
        })
        .collect();
    if let Some(log) = termination_log {
        let path = c.termination_message_path.clone().unwrap_or_else(|| "/dev/termination-log".into());
        cri_mounts.push(cri::Mount {
            container_path: path,
            host_path: log.display().to_string(),
            ..Default::default()
        });
    }
    let sc = c.security_context.clone().unwrap_or_default();
    let psc = spec.security_context.clone().unwrap_or_default();
    let privileged = sc.privileged.unwrap_or(false);
    let caps = sc.capabilities.clone().unwrap_or_default();
    let cap_names = |v: Option<Vec<String>>| -> Vec<String> {
        v.unwrap_or_default().into_iter().map(|c| c.trim_start_matches("CAP_").to_uppercase()).collect()
    };
    let unmasked = sc.proc_mount.as_deref() == Some("Unmasked") || privileged;
    cri::ContainerConfig {
        metadata: Some(cri::ContainerMetadata { name: c.name.clone(), attempt }),
        image: Some(cri::ImageSpec {
            image: c.image.clone().unwrap_or_default(),
            user_specified_image: c.image.clone().unwrap_or_default(),
            ..Default::default()
        }),
        command: c.command.clone().unwrap_or_default(),
        args: c.args.clone().unwrap_or_default(),
        working_dir: c.working_dir.clone().unwrap_or_default(),
        envs,
        mounts: cri_mounts,
        labels,
        annotations,
        log_path: format!("{}/{attempt}.log", c.name),
        stdin: c.stdin.unwrap_or(false),
        stdin_once: c.stdin_once.unwrap_or(false),
        tty: c.tty.unwrap_or(false),
        linux: Some(cri::LinuxContainerConfig {
            resources: Some(linux_resources(pod, c, memory_capacity)),
            security_context: Some(cri::LinuxContainerSecurityContext {
                capabilities: Some(cri::Capability {
                    add_capabilities: cap_names(caps.add),
                    drop_capabilities: cap_names(caps.drop),
                    ..Default::default()
                }),
                privileged,
                namespace_options: Some(namespace_options(&spec)),
                run_as_user: sc.run_as_user.or(psc.run_as_user).map(|value| cri::Int64Value { value }),
                run_as_group: sc.run_as_group.or(psc.run_as_group).map(|value| cri::Int64Value { value }),
                readonly_rootfs: sc.read_only_root_filesystem.unwrap_or(false),
                supplemental_groups: supplemental_groups(&psc),
                no_new_privs: sc.allow_privilege_escalation == Some(false),
                masked_paths: if unmasked {
                    Vec::new()
                } else {
                    MASKED_PATHS.iter().map(|s| s.to_string()).collect()
                },
                readonly_paths: if unmasked {
                    Vec::new()
                } else {
                    READONLY_PATHS.iter().map(|s| s.to_string()).collect()
                },
                ..Default::default()
            }),
        }),
        ..Default::default()
    }
}

/// Milli-units of `name` in `resources` (`requests` or `limits`).
pub fn quantity_milli(
    map: Option<&BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>>,
    name: &str,
) -> Option<i64> {
    map.and_then(|m| m.get(name)).and_then(|q| component_base::quantity::parse_milli(&q.0))
}

/// cgroup settings from requests and limits, as upstream's cgroupfs translation:
/// shares = requests.cpu × 1024 (minimum 2), quota = limits.cpu × period, memory limit;
/// oom_score_adj by QoS class (never negative: the runtime may not lower it here).
fn linux_resources(pod: &Pod, c: &Container, memory_capacity: i64) -> cri::LinuxContainerResources {
    let res = c.resources.clone().unwrap_or_default();
    let cpu_limit = quantity_milli(res.limits.as_ref(), "cpu");
    let cpu_request = quantity_milli(res.requests.as_ref(), "cpu").or(cpu_limit);
    let memory_limit = quantity_milli(res.limits.as_ref(), "memory").map(|m| m / 1000);
    let memory_request = quantity_milli(res.requests.as_ref(), "memory").map(|m| m / 1000).or(memory_limit);
    let shares = cpu_request.map(|m| (m * 1024 / 1000).max(2)).unwrap_or(2);
    const PERIOD: i64 = 100_000;
    let quota = cpu_limit.map(|m| (m * PERIOD / 1000).max(1000)).unwrap_or(0);
    let oom = match qos_class(pod) {
        QosClass::Guaranteed => 0,
        QosClass::BestEffort => 1000,
        QosClass::Burstable => {
            let req = memory_request.unwrap_or(0);
            let adj = if memory_capacity > 0 { 1000 - (1000 * req) / memory_capacity } else { 999 };
            adj.clamp(2, 999)
        }
    };
    cri::LinuxContainerResources {
        cpu_period: if quota > 0 { PERIOD } else { 0 },
        cpu_quota: quota,
        cpu_shares: shares,
        memory_limit_in_bytes: memory_limit.unwrap_or(0),
        oom_score_adj: oom,
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(v: serde_json::Value) -> Pod {
        serde_json::from_value(v).unwrap()
    }

    fn ctx() -> SandboxContext {
        SandboxContext {
            pod_logs_dir: "/var/log/pods".into(),
            cgroup_root: "/".into(),
            dns: crate::dns::Configurer {
                cluster_dns: vec!["10.0.0.10".parse().unwrap()],
                cluster_domain: "cluster.local".into(),
                resolv_conf: None,
                node_ips: Vec::new(),
            },
            node_name: "n1".into(),
        }
    }

    #[test]
    fn sandbox_metadata_dns_ports_and_cgroup() {
        let p = pod(json!({
            "metadata": {"name": "web", "namespace": "app", "uid": "u1", "labels": {"a": "b"}},
            "spec": {"containers": [{"name": "c", "image": "i", "ports": [{"containerPort": 80, "hostPort": 8080}],
                      "resources": {"requests": {"cpu": "100m"}}}]}
        }));
        let (s, warnings) = sandbox_config(&ctx(), &p, 2).unwrap();
        assert!(warnings.is_empty());
        assert_eq!(s.hostname, "web");
        let m = s.metadata.clone().unwrap();
        assert_eq!(
            (m.name.as_str(), m.namespace.as_str(), m.uid.as_str(), m.attempt),
            ("web", "app", "u1", 2)
        );
        assert_eq!(s.log_directory, "/var/log/pods/app_web_u1");
        let dns = s.dns_config.unwrap();
        assert_eq!(dns.servers, ["10.0.0.10"]);
        assert_eq!(dns.searches, ["app.svc.cluster.local", "svc.cluster.local", "cluster.local"]);
        assert_eq!(dns.options, ["ndots:5"]);
        assert_eq!(s.port_mappings[0].host_port, 8080);
        assert_eq!(s.labels[cri::POD_UID_LABEL], "u1");
        assert_eq!(s.labels["a"], "b");
        assert_eq!(s.linux.unwrap().cgroup_parent, "/kubepods/burstable/podu1");
    }

    #[test]
    fn container_resources_and_security() {
        let p = pod(json!({
            "metadata": {"name": "web", "namespace": "app", "uid": "u1"},
            "spec": {"containers": [{"name": "c", "image": "i", "command": ["sh"], "args": ["-c", "x"],
                      "resources": {"limits": {"cpu": "500m", "memory": "64Mi"}},
                      "securityContext": {"runAsUser": 1000, "readOnlyRootFilesystem": true,
                                          "capabilities": {"add": ["NET_ADMIN"], "drop": ["ALL"]}}}]}
        }));
        let c = &p.spec.as_ref().unwrap().containers[0];
        let cfg = container_config(&p, c, 3, vec![], vec![], None, 1 << 30);
        assert_eq!(cfg.log_path, "c/3.log");
        assert_eq!(cfg.command, ["sh"]);
        let linux = cfg.linux.unwrap();
        let r = linux.resources.unwrap();
        assert_eq!((r.cpu_shares, r.cpu_quota, r.cpu_period), (512, 50_000, 100_000));
        assert_eq!(r.memory_limit_in_bytes, 64 << 20);
        assert_eq!(r.oom_score_adj, 0, "Guaranteed: upstream's -997, clamped at 0 here");
        let sc = linux.security_context.unwrap();
        assert_eq!(sc.run_as_user.unwrap().value, 1000);
        assert!(sc.readonly_rootfs);
        assert_eq!(sc.capabilities.unwrap().add_capabilities, ["NET_ADMIN"]);
        assert!(sc.masked_paths.contains(&"/proc/kcore".to_string()));
        assert_eq!(pod_cgroup("/", &p), "/kubepods/podu1");
    }

    #[test]
    fn hash_changes_with_the_spec() {
        let a: Container = serde_json::from_value(json!({"name": "c", "image": "a"})).unwrap();
        let b: Container = serde_json::from_value(json!({"name": "c", "image": "b"})).unwrap();
        assert_ne!(container_hash(&a), container_hash(&b));
        assert_eq!(container_hash(&a), container_hash(&a.clone()));
    }
}
