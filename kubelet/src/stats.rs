//! `/stats/summary`: the Summary API (`stats/v1alpha1`) upstream's kubelet serves for
//! `kubectl get --raw /api/v1/nodes/<n>/proxy/stats/summary` and monitoring agents.
//!
//! Where upstream asks cAdvisor, this reads the same sources directly: the root and pod
//! cgroups (cgroup v1 `cpuacct`/`memory`/`pids`, or the v2 unified files), `/proc` for
//! network and process counts, `statvfs` for filesystems, CRI `ListContainerStats` for
//! containers and `ImageFsInfo` for the image filesystem. `usageNanoCores` is the rate
//! since the previous summary (cAdvisor's is since its last housekeeping), so the first
//! request after a start leaves it out. Not reported: the `kubelet`/`runtime` system
//! containers, accelerators, swap, per-volume PVC references, CPU/memory pressure stall
//! information.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use parking_lot::Mutex;
use serde_json::{Map, Value, json};

use crate::{Kubelet, cri, kuberuntime, pod_manager, volumes};

/// Cumulative CPU readings by cgroup or container, to turn the next one into a rate.
#[derive(Default)]
pub struct CpuRates {
    last: Mutex<HashMap<String, (Instant, u64)>>,
}

impl CpuRates {
    /// `{"time", "usageCoreNanoSeconds"[, "usageNanoCores"]}` for a cumulative reading.
    fn cpu(&self, key: &str, usage_ns: u64, now: &str) -> Value {
        let t = Instant::now();
        let previous = self.last.lock().insert(key.to_string(), (t, usage_ns));
        let mut v = json!({ "time": now, "usageCoreNanoSeconds": usage_ns });
        if let Some((t0, u0)) = previous {
            let dt = t.duration_since(t0).as_nanos() as f64;
            if dt > 0.0 && usage_ns >= u0 {
                v["usageNanoCores"] = json!(((usage_ns - u0) as f64 / dt * 1e9) as u64);
            }
        }
        v
    }

    /// Drops readings of cgroups and containers not seen in this summary.
    fn retain(&self, seen: &std::collections::HashSet<String>) {
        self.last.lock().retain(|k, _| seen.contains(k));
    }
}

/// Capacity and usage of the filesystem holding `path`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FsInfo {
    pub capacity: u64,
    pub available: u64,
    pub used: u64,
    pub inodes: u64,
    pub inodes_free: u64,
}

pub fn statvfs(path: &Path) -> Option<FsInfo> {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).ok()?;
    // SAFETY: statvfs fills the zeroed struct for a NUL-terminated path; checked for 0.
    let st = unsafe {
        let mut st: libc::statvfs = std::mem::zeroed();
        (libc::statvfs(c.as_ptr(), &mut st) == 0).then_some(st)?
    };
    let frsize = st.f_frsize as u64;
    Some(FsInfo {
        capacity: st.f_blocks as u64 * frsize,
        available: st.f_bavail as u64 * frsize,
        used: (st.f_blocks as u64).saturating_sub(st.f_bfree as u64) * frsize,
        inodes: st.f_files as u64,
        inodes_free: st.f_ffree as u64,
    })
}

/// `FsStats` of the filesystem itself, with `used` bytes/inodes of what is being measured
/// (the whole filesystem for the node, a directory tree for a volume).
fn fs_stats(now: &str, fs: Option<FsInfo>, used: Option<(u64, u64)>) -> Value {
    let mut v = json!({ "time": now });
    if let Some(fs) = fs {
        v["availableBytes"] = json!(fs.available);
        v["capacityBytes"] = json!(fs.capacity);
        v["inodesFree"] = json!(fs.inodes_free);
        v["inodes"] = json!(fs.inodes);
    }
    match used {
        Some((bytes, inodes)) => {
            v["usedBytes"] = json!(bytes);
            v["inodesUsed"] = json!(inodes);
        }
        None => {
            if let Some(fs) = fs {
                v["usedBytes"] = json!(fs.used);
                v["inodesUsed"] = json!(fs.inodes.saturating_sub(fs.inodes_free));
            }
        }
    }
    v
}

/// Bytes and inodes under `dir` (upstream's `du`), not crossing into other filesystems'
/// roots it does not own: symlinks are counted as themselves.
fn disk_usage(dir: &Path) -> (u64, u64) {
    let (mut bytes, mut inodes) = (0, 0);
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(md) = std::fs::symlink_metadata(&d) else { continue };
        inodes += 1;
        bytes += std::os::unix::fs::MetadataExt::blocks(&md) * 512;
        if md.is_dir() {
            stack.extend(std::fs::read_dir(&d).into_iter().flatten().flatten().map(|e| e.path()));
        }
    }
    (bytes, inodes)
}

/// A cgroup's directory in one controller's hierarchy (v1) or the unified tree (v2).
fn cgroup_dir(controller: &str, cgroup: &str) -> PathBuf {
    let rel = cgroup.trim_start_matches('/');
    let v1 = Path::new("/sys/fs/cgroup").join(controller);
    if v1.is_dir() { v1.join(rel) } else { Path::new("/sys/fs/cgroup").join(rel) }
}

fn read_u64(path: &Path) -> Option<u64> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// `key value` lines (`memory.stat`, `cpu.stat`).
fn read_kv(path: &Path) -> HashMap<String, u64> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines()
        .filter_map(|l| {
            let (k, v) = l.split_once(' ')?;
            Some((k.to_string(), v.trim().parse().ok()?))
        })
        .collect()
}

/// Cumulative CPU nanoseconds of a cgroup.
fn cgroup_cpu_ns(cgroup: &str) -> Option<u64> {
    let dir = cgroup_dir("cpuacct", cgroup);
    read_u64(&dir.join("cpuacct.usage"))
        .or_else(|| read_kv(&dir.join("cpu.stat")).get("usage_usec").map(|us| us * 1000))
}

/// `MemoryStats` of a cgroup; `available` against `limit` when it has one.
fn cgroup_memory(cgroup: &str, limit: Option<u64>, now: &str) -> Option<Value> {
    let dir = cgroup_dir("memory", cgroup);
    let v1 = dir.join("memory.usage_in_bytes").exists();
    let (usage, stat) = if v1 {
        (read_u64(&dir.join("memory.usage_in_bytes"))?, read_kv(&dir.join("memory.stat")))
    } else {
        (read_u64(&dir.join("memory.current"))?, read_kv(&dir.join("memory.stat")))
    };
    let get = |v1_key: &str, v2_key: &str| stat.get(if v1 { v1_key } else { v2_key }).copied().unwrap_or(0);
    // Working set as cAdvisor: usage less inactive file pages.
    let working_set = usage.saturating_sub(get("total_inactive_file", "inactive_file"));
    let mut m = json!({
        "time": now,
        "usageBytes": usage,
        "workingSetBytes": working_set,
        "rssBytes": get("total_rss", "anon"),
        "pageFaults": get("total_pgfault", "pgfault"),
        "majorPageFaults": get("total_pgmajfault", "pgmajfault"),
    });
    if let Some(limit) = limit {
        m["availableBytes"] = json!(limit.saturating_sub(working_set));
    }
    Some(m)
}

/// Processes in a cgroup and its descendants.
fn cgroup_pids(cgroup: &str) -> Option<u64> {
    let dir = cgroup_dir("pids", cgroup);
    read_u64(&dir.join("pids.current"))
}

/// One pid in a cgroup or its descendants (to read the pod's network namespace through).
fn some_pid(dir: &Path) -> Option<u32> {
    let own = std::fs::read_to_string(dir.join("cgroup.procs")).ok()?;
    if let Some(pid) = own.lines().find_map(|l| l.trim().parse().ok()) {
        return Some(pid);
    }
    std::fs::read_dir(dir).ok()?.flatten().filter(|e| e.path().is_dir()).find_map(|e| some_pid(&e.path()))
}

/// `NetworkStats` from a `/proc/<pid>/net/dev` table: every interface but `lo`, the one
/// named `default` (the default route's, or `eth0` in a pod) also at the top level.
fn network(table: &str, default: Option<&str>, now: &str) -> Option<Value> {
    let interfaces: Vec<Value> = table
        .lines()
        .skip(2)
        .filter_map(|l| {
            let (name, rest) = l.split_once(':')?;
            let f: Vec<u64> = rest.split_whitespace().filter_map(|x| x.parse().ok()).collect();
            (f.len() >= 12 && name.trim() != "lo").then(|| {
                json!({ "name": name.trim(), "rxBytes": f[0], "rxErrors": f[2], "txBytes": f[8], "txErrors": f[10] })
            })
        })
        .collect();
    let top = interfaces
        .iter()
        .find(|i| Some(i["name"].as_str().unwrap_or_default()) == default)
        .or_else(|| interfaces.first())?
        .clone();
    let mut v = top;
    v["time"] = json!(now);
    v["interfaces"] = json!(interfaces);
    Some(v)
}

/// The interface of the default route in `/proc/net/route`.
fn default_interface() -> Option<String> {
    let routes = std::fs::read_to_string("/proc/net/route").ok()?;
    routes.lines().skip(1).find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        (f.len() > 2 && f[1] == "00000000").then(|| f[0].to_string())
    })
}

/// Seconds precision, as upstream's `metav1.Time`.
pub fn rfc3339(t: Timestamp) -> String {
    t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// `?only_cpu_and_memory=true` leaves out filesystems, network, volumes and rlimits.
pub async fn summary(k: &Kubelet, only_cpu_and_memory: bool) -> Result<Value, String> {
    let now = rfc3339(Timestamp::now());
    let cfg = k.config();
    let root_fs = statvfs(&k.opts.root_dir);
    let mut seen = std::collections::HashSet::new();

    // The node: the root cgroup and the machine.
    let mut node = json!({
        "nodeName": k.opts.node_name,
        "startTime": k.start_time,
    });
    if let Some(ns) = cgroup_cpu_ns("/") {
        seen.insert("/".to_string());
        node["cpu"] = k.cpu_rates.cpu("/", ns, &now);
    }
    if let Some(mut m) = cgroup_memory("/", None, &now) {
        let ws = m["workingSetBytes"].as_u64().unwrap_or(0);
        m["availableBytes"] = json!((k.memory_capacity.max(0) as u64).saturating_sub(ws));
        node["memory"] = m;
    }
    let kubepods = format!("{}/kubepods", cfg.cgroup_root.trim_end_matches('/'));
    let mut pods_container = json!({ "name": "pods", "startTime": k.start_time });
    if let Some(ns) = cgroup_cpu_ns(&kubepods) {
        seen.insert(kubepods.clone());
        pods_container["cpu"] = k.cpu_rates.cpu(&kubepods, ns, &now);
    }
    if let Some(m) =
        cgroup_memory(&kubepods, Some(k.node_facts.read().allocatable_memory.max(0) as u64), &now)
    {
        pods_container["memory"] = m;
    }
    node["systemContainers"] = json!([pods_container]);

    let image_fs = if only_cpu_and_memory { None } else { k.runtime.image_fs_info().await.ok() };
    if !only_cpu_and_memory {
        let table = std::fs::read_to_string("/proc/net/dev").unwrap_or_default();
        if let Some(n) = network(&table, default_interface().as_deref(), &now) {
            node["network"] = n;
        }
        node["fs"] = fs_stats(&now, root_fs, None);
        if let Some(fs) = image_fs.as_ref().and_then(|i| i.image_filesystems.first()) {
            let mount = fs.fs_id.as_ref().map(|f| PathBuf::from(&f.mountpoint)).unwrap_or_default();
            let used = (
                fs.used_bytes.as_ref().map_or(0, |v| v.value),
                fs.inodes_used.as_ref().map_or(0, |v| v.value),
            );
            node["runtime"] = json!({ "imageFs": fs_stats(&now, statvfs(&mount), Some(used)) });
        }
        let curproc = std::fs::read_dir("/proc")
            .map(|d| d.flatten().filter(|e| e.file_name().to_string_lossy().parse::<u32>().is_ok()).count())
            .unwrap_or(0);
        node["rlimit"] = json!({
            "time": now,
            "maxpid": read_u64(Path::new("/proc/sys/kernel/pid_max")),
            "curproc": curproc,
        });
    }

    // The pods, with their containers as the runtime counts them.
    let container_stats = k.runtime.list_container_stats().await.map_err(|e| e.to_string())?;
    let by_id: HashMap<&str, &cri::ContainerStats> =
        container_stats.iter().filter_map(|s| Some((s.attributes.as_ref()?.id.as_str(), s))).collect();
    let statuses = k.statuses.lock().clone();
    let mut pods = Vec::new();
    for (pod, _) in k.pods.pods() {
        let uid = pod_manager::uid(&pod);
        let Some(status) = statuses.get(&uid) else { continue };
        if !matches!(status.phase.as_deref(), Some("Running" | "Pending")) {
            continue;
        }
        let mut containers = Vec::new();
        let mut rootfs_logs = 0u64;
        for cs in status.container_statuses.iter().flatten() {
            let Some(running) = cs.state.as_ref().and_then(|s| s.running.as_ref()) else { continue };
            let id = cs.container_id.as_deref().unwrap_or_default();
            let id = id.split_once("://").map_or(id, |(_, id)| id);
            let mut c =
                json!({ "name": cs.name, "startTime": running.started_at.as_ref().map(|t| rfc3339(t.0)) });
            if let Some(s) = by_id.get(id) {
                if let Some(ns) = s.cpu.as_ref().and_then(|c| c.usage_core_nano_seconds.as_ref()) {
                    seen.insert(id.to_string());
                    c["cpu"] = k.cpu_rates.cpu(id, ns.value, &now);
                }
                if let Some(m) = &s.memory {
                    let val = |v: &Option<cri::UInt64Value>| v.as_ref().map_or(0, |v| v.value);
                    c["memory"] = json!({
                        "time": now,
                        "workingSetBytes": val(&m.working_set_bytes),
                        "usageBytes": val(&m.usage_bytes),
                        "rssBytes": val(&m.rss_bytes),
                        "pageFaults": val(&m.page_faults),
                        "majorPageFaults": val(&m.major_page_faults),
                    });
                    // The runtime says 0 for a container without a memory limit.
                    if val(&m.available_bytes) > 0 {
                        c["memory"]["availableBytes"] = json!(val(&m.available_bytes));
                    }
                }
                if !only_cpu_and_memory {
                    if let Some(w) = &s.writable_layer {
                        let used = (
                            w.used_bytes.as_ref().map_or(0, |v| v.value),
                            w.inodes_used.as_ref().map_or(0, |v| v.value),
                        );
                        rootfs_logs += used.0;
                        let mount = image_fs
                            .as_ref()
                            .and_then(|i| i.image_filesystems.first())
                            .and_then(|f| f.fs_id.as_ref())
                            .map(|f| PathBuf::from(&f.mountpoint));
                        c["rootfs"] = fs_stats(&now, mount.as_deref().and_then(statvfs), Some(used));
                    }
                }
            }
            if !only_cpu_and_memory {
                let logs = kuberuntime::pod_log_dir(&cfg.pod_logs_dir, &pod).join(&cs.name);
                let used = disk_usage(&logs);
                rootfs_logs += used.0;
                c["logs"] = fs_stats(&now, statvfs(&cfg.pod_logs_dir), Some(used));
            }
            containers.push(c);
        }
        pods.push(pod_stats(
            k,
            &pod,
            status,
            containers,
            rootfs_logs,
            root_fs,
            only_cpu_and_memory,
            &now,
            &mut seen,
        ));
    }
    k.cpu_rates.retain(&seen);
    Ok(json!({ "node": node, "pods": pods }))
}

#[allow(clippy::too_many_arguments)]
fn pod_stats(
    k: &Kubelet,
    pod: &Pod,
    status: &k8s_openapi::api::core::v1::PodStatus,
    containers: Vec<Value>,
    rootfs_logs: u64,
    root_fs: Option<FsInfo>,
    only_cpu_and_memory: bool,
    now: &str,
    seen: &mut std::collections::HashSet<String>,
) -> Value {
    let m = &pod.metadata;
    let uid = pod_manager::uid(pod);
    let mut p = Map::new();
    p.insert("podRef".into(), json!({ "name": m.name, "namespace": m.namespace, "uid": uid }));
    p.insert("startTime".into(), json!(status.start_time.as_ref().map(|t| rfc3339(t.0))));
    p.insert("containers".into(), json!(containers));
    let cgroup = kuberuntime::pod_cgroup(&k.config().cgroup_root, pod);
    if let Some(ns) = cgroup_cpu_ns(&cgroup) {
        seen.insert(cgroup.clone());
        p.insert("cpu".into(), k.cpu_rates.cpu(&cgroup, ns, now));
    }
    if let Some(mem) = cgroup_memory(&cgroup, None, now) {
        p.insert("memory".into(), mem);
    }
    if let Some(n) = cgroup_pids(&cgroup) {
        p.insert("process_stats".into(), json!({ "process_count": n }));
    }
    if only_cpu_and_memory {
        return Value::Object(p);
    }
    let host_network = pod.spec.as_ref().and_then(|s| s.host_network).unwrap_or(false);
    let table = if host_network {
        std::fs::read_to_string("/proc/net/dev").ok()
    } else {
        some_pid(&cgroup_dir("pids", &cgroup))
            .and_then(|pid| std::fs::read_to_string(format!("/proc/{pid}/net/dev")).ok())
    };
    let default = if host_network { default_interface() } else { Some("eth0".into()) };
    if let Some(n) = table.and_then(|t| network(&t, default.as_deref(), now)) {
        p.insert("network".into(), n);
    }
    let mut volumes = Vec::new();
    let mut ephemeral = rootfs_logs;
    let vol_root = volumes::pod_dir(&k.opts.root_dir, &uid).join("volumes");
    for plugin in std::fs::read_dir(&vol_root).into_iter().flatten().flatten() {
        for v in std::fs::read_dir(plugin.path()).into_iter().flatten().flatten() {
            let used = disk_usage(&v.path());
            ephemeral += used.0;
            let mut vs = fs_stats(now, statvfs(&v.path()), Some(used));
            vs["name"] = json!(v.file_name().to_string_lossy());
            volumes.push(vs);
        }
    }
    volumes.sort_by(|a, b| a["name"].as_str().cmp(&b["name"].as_str()));
    p.insert("volume".into(), json!(volumes));
    let mut eph = fs_stats(now, root_fs, Some((ephemeral, 0)));
    if let Some(o) = eph.as_object_mut() {
        o.remove("inodesUsed");
    }
    p.insert("ephemeral-storage".into(), eph);
    Value::Object(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    const NET_DEV: &str = "Inter-|   Receive                                                |  Transmit
 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed
    lo:     100       1    0    0    0     0          0         0      100       1    0    0    0     0       0          0
  eth0:    5000      10    2    0    0     0          0         0     7000      12    3    0    0     0       0          0
  eth1:      50       1    0    0    0     0          0         0       60       1    0    0    0     0       0          0
";

    #[test]
    fn network_table() {
        let n = network(NET_DEV, Some("eth0"), "t").unwrap();
        assert_eq!(n["name"], "eth0");
        assert_eq!((n["rxBytes"].as_u64(), n["rxErrors"].as_u64()), (Some(5000), Some(2)));
        assert_eq!((n["txBytes"].as_u64(), n["txErrors"].as_u64()), (Some(7000), Some(3)));
        assert_eq!(n["interfaces"].as_array().unwrap().len(), 2, "lo is left out");
        assert_eq!(network(NET_DEV, Some("eth1"), "t").unwrap()["rxBytes"], 50);
        assert!(network("a\nb\n    lo: 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16\n", None, "t").is_none());
    }

    #[test]
    fn cpu_rate_from_two_readings() {
        let r = CpuRates::default();
        let first = r.cpu("x", 1_000_000, "t");
        assert_eq!(first["usageCoreNanoSeconds"], 1_000_000);
        assert!(first.get("usageNanoCores").is_none(), "no rate without an earlier reading");
        std::thread::sleep(std::time::Duration::from_millis(20));
        let second = r.cpu("x", 1_000_000 + 10_000_000, "t");
        // 10 ms of CPU in at least 20 ms of wall time: at most half a core.
        let rate = second["usageNanoCores"].as_u64().unwrap();
        assert!(rate > 0 && rate <= 500_000_000, "{rate}");
        r.retain(&Default::default());
        assert!(r.cpu("x", 5, "t").get("usageNanoCores").is_none());
    }

    #[test]
    fn disk_usage_and_statvfs() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("a"), vec![1u8; 10_000]).unwrap();
        std::fs::create_dir(d.path().join("sub")).unwrap();
        std::fs::write(d.path().join("sub/b"), b"x").unwrap();
        let (bytes, inodes) = disk_usage(d.path());
        assert_eq!(inodes, 4);
        assert!(bytes >= 10_000, "{bytes}");
        let fs = statvfs(d.path()).unwrap();
        assert!(fs.capacity >= fs.available && fs.capacity > 0 && fs.inodes >= fs.inodes_free);
        let v = fs_stats("t", Some(fs), Some((bytes, inodes)));
        assert_eq!(v["usedBytes"], bytes);
        assert_eq!(v["capacityBytes"], fs.capacity);
    }
}
