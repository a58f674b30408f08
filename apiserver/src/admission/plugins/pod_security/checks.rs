//! The Pod Security Standards checks (upstream's `pod-security-admission/policy`), each
//! with upstream's reason and detail wording, evaluated in upstream's order: the baseline
//! checks, then the restricted ones (a restricted evaluation replaces the three baseline
//! checks that restricted tightens: capabilities, hostPath volumes, seccomp).
//!
//! Checks change with the policy version: a namespace pinned to `v1.22` is judged by the
//! checks as they were in 1.22 (no `runAsUser` check, seccomp by annotations before 1.19,
//! fewer safe sysctls).

use std::collections::BTreeSet;
use std::fmt;

use serde_json::Value;

/// The newest policy version this server knows; later versions are judged as this one.
pub const MAX_MINOR: u32 = 32;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Level {
    Privileged,
    Baseline,
    Restricted,
}

impl Level {
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "privileged" => Some(Self::Privileged),
            "baseline" => Some(Self::Baseline),
            "restricted" => Some(Self::Restricted),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Privileged => "privileged",
            Self::Baseline => "baseline",
            Self::Restricted => "restricted",
        }
    }
}

/// A policy version: `latest` or `v1.<minor>`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Version {
    Latest,
    Minor(u32),
}

impl Version {
    /// `latest` or `v1.<n>` (no leading zeros).
    pub fn parse(s: &str) -> Option<Self> {
        if s == "latest" {
            return Some(Self::Latest);
        }
        let minor = s.strip_prefix("v1.")?;
        if minor.is_empty()
            || !minor.bytes().all(|b| b.is_ascii_digit())
            || (minor.len() > 1 && minor.starts_with('0'))
        {
            return None;
        }
        minor.parse().ok().map(Self::Minor)
    }

    /// The minor version the checks use.
    fn effective(self) -> u32 {
        match self {
            Self::Latest => MAX_MINOR,
            Self::Minor(m) => m.min(MAX_MINOR),
        }
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Latest => f.write_str("latest"),
            Self::Minor(m) => write!(f, "v1.{m}"),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct LevelVersion {
    pub level: Level,
    pub version: Version,
}

impl fmt::Display for LevelVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.level.as_str(), self.version)
    }
}

/// A failed check: its short reason and the specifics.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    pub reason: String,
    pub detail: String,
}

/// `reason (detail), reason (detail)` (upstream's `ForbiddenDetail`).
pub fn forbidden_detail(violations: &[Violation]) -> String {
    violations
        .iter()
        .map(|v| if v.detail.is_empty() { v.reason.clone() } else { format!("{} ({})", v.reason, v.detail) })
        .collect::<Vec<_>>()
        .join(", ")
}

/// `reason, reason` (upstream's `ForbiddenReason`).
pub fn forbidden_reason(violations: &[Violation]) -> String {
    violations.iter().map(|v| v.reason.clone()).collect::<Vec<_>>().join(", ")
}

fn join_quote<S: AsRef<str>>(items: &[S]) -> String {
    if items.is_empty() {
        return String::new();
    }
    format!("\"{}\"", items.iter().map(AsRef::as_ref).collect::<Vec<_>>().join("\", \""))
}

fn pluralize<'a>(singular: &'a str, plural: &'a str, n: usize) -> &'a str {
    if n == 1 { singular } else { plural }
}

/// Go's `%q` of a plain string.
fn go_quote(s: &str) -> String {
    format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""))
}

fn containers_phrase(names: &[String]) -> String {
    format!("{} {}", pluralize("container", "containers", names.len()), join_quote(names))
}

/// Every container, init container and ephemeral container, in upstream's order.
fn containers(spec: &Value) -> impl Iterator<Item = &Value> {
    ["initContainers", "containers", "ephemeralContainers"]
        .into_iter()
        .flat_map(move |l| spec[l].as_array().into_iter().flatten())
}

fn name(c: &Value) -> String {
    c["name"].as_str().unwrap_or_default().to_string()
}

fn str_of<'a>(v: &'a Value, f: &str) -> &'a str {
    v[f].as_str().unwrap_or_default()
}

fn is_windows(spec: &Value) -> bool {
    spec["os"]["name"] == "windows"
}

fn fail(reason: impl Into<String>, detail: impl Into<String>) -> Option<Violation> {
    Some(Violation { reason: reason.into(), detail: detail.into() })
}

// ---- Baseline ----------------------------------------------------------------------

fn app_armor_profile(meta: &Value, spec: &Value) -> Option<Violation> {
    let allowed = |t: &str| matches!(t, "RuntimeDefault" | "Localhost");
    let mut setters = Vec::new();
    let mut values = BTreeSet::new();
    let pod_profile = &spec["securityContext"]["appArmorProfile"];
    if pod_profile.is_object() && !allowed(str_of(pod_profile, "type")) {
        setters.push("pod".to_string());
        values.insert(str_of(pod_profile, "type").to_string());
    }
    let mut bad = Vec::new();
    for c in containers(spec) {
        let profile = &c["securityContext"]["appArmorProfile"];
        if profile.is_object() && !allowed(str_of(profile, "type")) {
            bad.push(name(c));
            values.insert(str_of(profile, "type").to_string());
        }
    }
    if !bad.is_empty() {
        setters.push(containers_phrase(&bad));
    }
    let mut annotations: Vec<String> = meta["annotations"]
        .as_object()
        .into_iter()
        .flatten()
        .filter(|(k, _)| k.starts_with("container.apparmor.security.beta.kubernetes.io/"))
        .filter_map(|(k, v)| {
            let v = v.as_str().unwrap_or_default();
            let ok = v.is_empty() || v == "runtime/default" || v.starts_with("localhost/");
            (!ok).then(|| format!("{k}={}", go_quote(v)))
        })
        .collect();
    let mut list: Vec<String> = values.into_iter().collect();
    if !annotations.is_empty() {
        annotations.sort();
        setters.push(pluralize("annotation", "annotations", annotations.len()).to_string());
        list.extend(annotations);
    }
    if setters.is_empty() {
        return None;
    }
    fail(
        pluralize("forbidden AppArmor profile", "forbidden AppArmor profiles", list.len()),
        format!("{} must not set AppArmor profile type to {}", setters.join(" and "), join_quote(&list)),
    )
}

fn host_namespaces(spec: &Value) -> Option<Violation> {
    let mut set = BTreeSet::new();
    for f in ["hostNetwork", "hostPID", "hostIPC"] {
        if spec[f].as_bool() == Some(true) {
            set.insert(f);
        }
    }
    if set.is_empty() {
        return None;
    }
    fail("host namespaces", set.into_iter().collect::<Vec<_>>().join(", "))
}

fn host_ports(spec: &Value) -> Option<Violation> {
    let mut bad = Vec::new();
    let mut ports = BTreeSet::new();
    for c in containers(spec) {
        let mut valid = true;
        for p in c["ports"].as_array().into_iter().flatten() {
            let hp = p["hostPort"].as_i64().unwrap_or(0);
            if hp != 0 {
                valid = false;
                ports.insert(hp.to_string());
            }
        }
        if !valid {
            bad.push(name(c));
        }
    }
    if bad.is_empty() {
        return None;
    }
    let ports: Vec<String> = ports.into_iter().collect();
    fail(
        "hostPort",
        format!(
            "{} {} {} {}",
            containers_phrase(&bad),
            pluralize("uses", "use", bad.len()),
            pluralize("hostPort", "hostPorts", ports.len()),
            ports.join(", ")
        ),
    )
}

fn privileged(spec: &Value) -> Option<Violation> {
    let bad: Vec<String> = containers(spec)
        .filter(|c| c["securityContext"]["privileged"].as_bool() == Some(true))
        .map(name)
        .collect();
    if bad.is_empty() {
        return None;
    }
    fail("privileged", format!("{} must not set securityContext.privileged=true", containers_phrase(&bad)))
}

fn proc_mount(spec: &Value) -> Option<Violation> {
    let mut bad = Vec::new();
    let mut types = BTreeSet::new();
    for c in containers(spec) {
        if let Some(t) = c["securityContext"]["procMount"].as_str()
            && t != "Default"
        {
            bad.push(name(c));
            types.insert(t.to_string());
        }
    }
    if bad.is_empty() {
        return None;
    }
    let types: Vec<String> = types.into_iter().collect();
    fail(
        "procMount",
        format!(
            "{} must not set securityContext.procMount to {}",
            containers_phrase(&bad),
            join_quote(&types)
        ),
    )
}

fn se_linux_options(spec: &Value, minor: u32) -> Option<Violation> {
    let mut allowed = vec!["", "container_t", "container_init_t", "container_kvm_t"];
    if minor >= 31 {
        allowed.push("container_engine_t");
    }
    let mut bad_types = BTreeSet::new();
    let (mut set_user, mut set_role) = (false, false);
    let mut check = |opts: &Value| -> bool {
        let mut valid = true;
        let t = str_of(opts, "type");
        if !allowed.contains(&t) {
            valid = false;
            bad_types.insert(t.to_string());
        }
        if !str_of(opts, "user").is_empty() {
            valid = false;
            set_user = true;
        }
        if !str_of(opts, "role").is_empty() {
            valid = false;
            set_role = true;
        }
        valid
    };
    let mut setters = Vec::new();
    let pod_opts = &spec["securityContext"]["seLinuxOptions"];
    if pod_opts.is_object() && !check(pod_opts) {
        setters.push("pod".to_string());
    }
    let mut bad = Vec::new();
    for c in containers(spec) {
        let opts = &c["securityContext"]["seLinuxOptions"];
        if opts.is_object() && !check(opts) {
            bad.push(name(c));
        }
    }
    if !bad.is_empty() {
        setters.push(containers_phrase(&bad));
    }
    if setters.is_empty() {
        return None;
    }
    // As upstream, user and role are only listed beside a bad type.
    let mut data = Vec::new();
    if !bad_types.is_empty() {
        let types: Vec<String> = bad_types.into_iter().collect();
        data.push(format!("{} {}", pluralize("type", "types", types.len()), join_quote(&types)));
        if set_user {
            data.push("user may not be set".to_string());
        }
        if set_role {
            data.push("role may not be set".to_string());
        }
    }
    fail(
        "seLinuxOptions",
        format!(
            "{} set forbidden securityContext.seLinuxOptions: {}",
            setters.join(" and "),
            data.join("; ")
        ),
    )
}

fn safe_sysctls(minor: u32) -> Vec<&'static str> {
    let mut safe = vec![
        "kernel.shm_rmid_forced",
        "net.ipv4.ip_local_port_range",
        "net.ipv4.tcp_syncookies",
        "net.ipv4.ping_group_range",
        "net.ipv4.ip_unprivileged_port_start",
    ];
    if minor >= 27 {
        safe.push("net.ipv4.ip_local_reserved_ports");
    }
    if minor >= 29 {
        safe.extend([
            "net.ipv4.tcp_keepalive_time",
            "net.ipv4.tcp_fin_timeout",
            "net.ipv4.tcp_keepalive_intvl",
            "net.ipv4.tcp_keepalive_probes",
        ]);
    }
    if minor >= 32 {
        safe.extend(["net.ipv4.tcp_rmem", "net.ipv4.tcp_wmem"]);
    }
    safe
}

fn sysctls(spec: &Value, minor: u32) -> Option<Violation> {
    let safe = safe_sysctls(minor);
    let bad: Vec<&str> = spec["securityContext"]["sysctls"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|s| str_of(s, "name"))
        .filter(|n| !safe.contains(n))
        .collect();
    if bad.is_empty() {
        return None;
    }
    fail("forbidden sysctls", bad.join(", "))
}

fn windows_host_process(spec: &Value) -> Option<Violation> {
    let host = |sc: &Value| sc["windowsOptions"]["hostProcess"].as_bool() == Some(true);
    let bad: Vec<String> = containers(spec).filter(|c| host(&c["securityContext"])).map(name).collect();
    let mut setters = Vec::new();
    if host(&spec["securityContext"]) {
        setters.push("pod".to_string());
    }
    if !bad.is_empty() {
        setters.push(containers_phrase(&bad));
    }
    if setters.is_empty() {
        return None;
    }
    fail(
        "hostProcess",
        format!("{} must not set securityContext.windowsOptions.hostProcess=true", setters.join(" and ")),
    )
}

// ---- Baseline checks restricted replaces -------------------------------------------

const BASELINE_CAPABILITIES: &[&str] = &[
    "AUDIT_WRITE",
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "KILL",
    "MKNOD",
    "NET_BIND_SERVICE",
    "SETFCAP",
    "SETGID",
    "SETPCAP",
    "SETUID",
    "SYS_CHROOT",
];

fn capabilities_baseline(spec: &Value) -> Option<Violation> {
    let mut bad = Vec::new();
    let mut caps = BTreeSet::new();
    for c in containers(spec) {
        let mut valid = true;
        for cap in c["securityContext"]["capabilities"]["add"].as_array().into_iter().flatten() {
            let cap = cap.as_str().unwrap_or_default();
            if !BASELINE_CAPABILITIES.contains(&cap) {
                valid = false;
                caps.insert(cap.to_string());
            }
        }
        if !valid {
            bad.push(name(c));
        }
    }
    if bad.is_empty() {
        return None;
    }
    let caps: Vec<String> = caps.into_iter().collect();
    fail(
        "non-default capabilities",
        format!(
            "{} must not include {} in securityContext.capabilities.add",
            containers_phrase(&bad),
            join_quote(&caps)
        ),
    )
}

fn host_path_volumes(spec: &Value) -> Option<Violation> {
    let vols: Vec<String> = spec["volumes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|v| v["hostPath"].is_object())
        .map(name)
        .collect();
    if vols.is_empty() {
        return None;
    }
    fail("hostPath volumes", format!("{} {}", pluralize("volume", "volumes", vols.len()), join_quote(&vols)))
}

fn valid_seccomp(t: &str) -> bool {
    matches!(t, "Localhost" | "RuntimeDefault")
}

fn seccomp_baseline(meta: &Value, spec: &Value, minor: u32) -> Option<Violation> {
    if minor < 19 {
        let ok = |v: &str| v == "runtime/default" || v == "docker/default" || v.starts_with("localhost/");
        let ann = &meta["annotations"];
        let mut bad = BTreeSet::new();
        let pod_key = "seccomp.security.alpha.kubernetes.io/pod";
        if let Some(v) = ann[pod_key].as_str()
            && !ok(v)
        {
            bad.insert(format!("{pod_key}={}", go_quote(v)));
        }
        for c in containers(spec) {
            let key = format!("container.seccomp.security.alpha.kubernetes.io/{}", name(c));
            if let Some(v) = ann[key.as_str()].as_str()
                && !ok(v)
            {
                bad.insert(format!("{key}={}", go_quote(v)));
            }
        }
        if bad.is_empty() {
            return None;
        }
        let list: Vec<String> = bad.into_iter().collect();
        return fail(
            "seccompProfile",
            format!("forbidden {} {}", pluralize("annotation", "annotations", list.len()), list.join(", ")),
        );
    }
    let mut setters = Vec::new();
    let mut values = BTreeSet::new();
    let pod_profile = &spec["securityContext"]["seccompProfile"];
    if pod_profile.is_object() && !valid_seccomp(str_of(pod_profile, "type")) {
        setters.push("pod".to_string());
        values.insert(str_of(pod_profile, "type").to_string());
    }
    let mut bad = Vec::new();
    for c in containers(spec) {
        let p = &c["securityContext"]["seccompProfile"];
        if p.is_object() && !valid_seccomp(str_of(p, "type")) {
            bad.push(name(c));
            values.insert(str_of(p, "type").to_string());
        }
    }
    if !bad.is_empty() {
        setters.push(containers_phrase(&bad));
    }
    if setters.is_empty() {
        return None;
    }
    let values: Vec<String> = values.into_iter().collect();
    fail(
        "seccompProfile",
        format!(
            "{} must not set securityContext.seccompProfile.type to {}",
            setters.join(" and "),
            join_quote(&values)
        ),
    )
}

// ---- Restricted --------------------------------------------------------------------

fn allow_privilege_escalation(spec: &Value) -> Option<Violation> {
    let bad: Vec<String> = containers(spec)
        .filter(|c| c["securityContext"]["allowPrivilegeEscalation"].as_bool() != Some(false))
        .map(name)
        .collect();
    if bad.is_empty() {
        return None;
    }
    fail(
        "allowPrivilegeEscalation != false",
        format!("{} must set securityContext.allowPrivilegeEscalation=false", containers_phrase(&bad)),
    )
}

fn capabilities_restricted(spec: &Value) -> Option<Violation> {
    let (mut missing_drop, mut adding) = (Vec::new(), Vec::new());
    let mut caps = BTreeSet::new();
    for c in containers(spec) {
        let capabilities = &c["securityContext"]["capabilities"];
        if !capabilities.is_object() {
            missing_drop.push(name(c));
            continue;
        }
        if !capabilities["drop"].as_array().into_iter().flatten().any(|d| d == "ALL") {
            missing_drop.push(name(c));
        }
        let mut added_forbidden = false;
        for cap in capabilities["add"].as_array().into_iter().flatten() {
            let cap = cap.as_str().unwrap_or_default();
            if cap != "NET_BIND_SERVICE" {
                added_forbidden = true;
                caps.insert(cap.to_string());
            }
        }
        if added_forbidden {
            adding.push(name(c));
        }
    }
    let mut details = Vec::new();
    if !missing_drop.is_empty() {
        details.push(format!(
            "{} must set securityContext.capabilities.drop=[\"ALL\"]",
            containers_phrase(&missing_drop)
        ));
    }
    if !adding.is_empty() {
        let caps: Vec<String> = caps.into_iter().collect();
        details.push(format!(
            "{} must not include {} in securityContext.capabilities.add",
            containers_phrase(&adding),
            join_quote(&caps)
        ));
    }
    if details.is_empty() {
        return None;
    }
    fail("unrestricted capabilities", details.join("; "))
}

const ALLOWED_VOLUME_SOURCES: &[&str] = &[
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "persistentVolumeClaim",
    "projected",
    "secret",
];

fn restricted_volumes(spec: &Value) -> Option<Violation> {
    let names: BTreeSet<String> = spec["volumes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|v| !ALLOWED_VOLUME_SOURCES.iter().any(|s| v[*s].is_object()))
        .map(name)
        .collect();
    if names.is_empty() {
        return None;
    }
    // Go's `%q` of a string slice.
    let quoted: Vec<String> = names.iter().map(|n| go_quote(n)).collect();
    fail("restricted volume types", format!("volumes [{}] have restricted types", quoted.join(" ")))
}

fn run_as_non_root(spec: &Value) -> Option<Violation> {
    let mut setters = Vec::new();
    let mut pod_non_root = false;
    match spec["securityContext"]["runAsNonRoot"].as_bool() {
        Some(false) => setters.push("pod".to_string()),
        Some(true) => pod_non_root = true,
        None => {}
    }
    let (mut explicit, mut implicit) = (Vec::new(), Vec::new());
    for c in containers(spec) {
        match c["securityContext"]["runAsNonRoot"].as_bool() {
            Some(false) => explicit.push(name(c)),
            Some(true) => {}
            None if !pod_non_root => implicit.push(name(c)),
            None => {}
        }
    }
    if !explicit.is_empty() {
        setters.push(containers_phrase(&explicit));
    }
    if !setters.is_empty() {
        return fail(
            "runAsNonRoot != true",
            format!("{} must not set securityContext.runAsNonRoot=false", setters.join(" and ")),
        );
    }
    if !implicit.is_empty() {
        return fail(
            "runAsNonRoot != true",
            format!("pod or {} must set securityContext.runAsNonRoot=true", containers_phrase(&implicit)),
        );
    }
    None
}

fn run_as_user(spec: &Value) -> Option<Violation> {
    let mut setters = Vec::new();
    if spec["securityContext"]["runAsUser"].as_i64() == Some(0) {
        setters.push("pod".to_string());
    }
    let bad: Vec<String> = containers(spec)
        .filter(|c| c["securityContext"]["runAsUser"].as_i64() == Some(0))
        .map(name)
        .collect();
    if !bad.is_empty() {
        setters.push(containers_phrase(&bad));
    }
    if setters.is_empty() {
        return None;
    }
    fail("runAsUser=0", format!("{} must not set runAsUser=0", setters.join(" and ")))
}

fn seccomp_restricted(spec: &Value) -> Option<Violation> {
    let mut setters = Vec::new();
    let mut values = BTreeSet::new();
    let mut pod_set = false;
    let pod_profile = &spec["securityContext"]["seccompProfile"];
    if pod_profile.is_object() {
        if valid_seccomp(str_of(pod_profile, "type")) {
            pod_set = true;
        } else {
            setters.push("pod".to_string());
            values.insert(str_of(pod_profile, "type").to_string());
        }
    }
    let (mut explicit, mut implicit) = (Vec::new(), Vec::new());
    for c in containers(spec) {
        let p = &c["securityContext"]["seccompProfile"];
        if p.is_object() {
            if !valid_seccomp(str_of(p, "type")) {
                explicit.push(name(c));
                values.insert(str_of(p, "type").to_string());
            }
        } else if !pod_set {
            implicit.push(name(c));
        }
    }
    if !explicit.is_empty() {
        setters.push(containers_phrase(&explicit));
    }
    if !setters.is_empty() {
        let values: Vec<String> = values.into_iter().collect();
        return fail(
            "seccompProfile",
            format!(
                "{} must not set securityContext.seccompProfile.type to {}",
                setters.join(" and "),
                join_quote(&values)
            ),
        );
    }
    if !implicit.is_empty() {
        return fail(
            "seccompProfile",
            format!(
                "pod or {} must set securityContext.seccompProfile.type to \"RuntimeDefault\" or \"Localhost\"",
                containers_phrase(&implicit)
            ),
        );
    }
    None
}

/// The violations of a pod (its metadata and spec) under `lv`, in upstream's order.
pub fn evaluate(lv: LevelVersion, meta: &Value, spec: &Value) -> Vec<Violation> {
    if lv.level == Level::Privileged {
        return Vec::new();
    }
    let minor = lv.version.effective();
    let windows = is_windows(spec);
    let mut out: Vec<Option<Violation>> = vec![
        app_armor_profile(meta, spec),
        host_namespaces(spec),
        host_ports(spec),
        privileged(spec),
        proc_mount(spec),
        se_linux_options(spec, minor),
        sysctls(spec, minor),
        windows_host_process(spec),
    ];
    if lv.level == Level::Baseline {
        out.extend([
            capabilities_baseline(spec),
            host_path_volumes(spec),
            seccomp_baseline(meta, spec, minor),
        ]);
    } else {
        // From 1.25 Windows pods are exempt from the Linux-only restricted checks.
        let linux_only = minor >= 25 && windows;
        if minor >= 8 && !linux_only {
            out.push(allow_privilege_escalation(spec));
        }
        if minor >= 22 && !linux_only {
            out.push(capabilities_restricted(spec));
        }
        out.push(restricted_volumes(spec));
        out.push(run_as_non_root(spec));
        if minor >= 23 {
            out.push(run_as_user(spec));
        }
        // Before 1.19 restricted had no seccomp check of its own (and the baseline one it
        // replaces does not run at this level), as upstream.
        if minor >= 19 && !linux_only {
            out.push(seccomp_restricted(spec));
        }
    }
    out.into_iter().flatten().collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn lv(level: Level) -> LevelVersion {
        LevelVersion { level, version: Version::Latest }
    }

    #[test]
    fn versions_parse_and_print() {
        assert_eq!(Version::parse("latest"), Some(Version::Latest));
        assert_eq!(Version::parse("v1.25"), Some(Version::Minor(25)));
        for bad in ["v1.025", "v2.1", "1.25", "v1.", "v1.x"] {
            assert_eq!(Version::parse(bad), None, "{bad}");
        }
        assert_eq!(
            LevelVersion { level: Level::Baseline, version: Version::Minor(23) }.to_string(),
            "baseline:v1.23"
        );
    }

    #[test]
    fn privileged_pod_under_restricted() {
        let spec = json!({ "containers": [{ "name": "c", "image": "x", "securityContext": { "privileged": true } }] });
        let v = evaluate(lv(Level::Restricted), &json!({}), &spec);
        assert_eq!(
            forbidden_detail(&v),
            "privileged (container \"c\" must not set securityContext.privileged=true), \
             allowPrivilegeEscalation != false (container \"c\" must set securityContext.allowPrivilegeEscalation=false), \
             unrestricted capabilities (container \"c\" must set securityContext.capabilities.drop=[\"ALL\"]), \
             runAsNonRoot != true (pod or container \"c\" must set securityContext.runAsNonRoot=true), \
             seccompProfile (pod or container \"c\" must set securityContext.seccompProfile.type to \"RuntimeDefault\" or \"Localhost\")"
        );
        assert_eq!(
            forbidden_reason(&v),
            "privileged, allowPrivilegeEscalation != false, unrestricted capabilities, runAsNonRoot != true, seccompProfile"
        );
        let baseline = evaluate(lv(Level::Baseline), &json!({}), &spec);
        assert_eq!(
            forbidden_detail(&baseline),
            "privileged (container \"c\" must not set securityContext.privileged=true)"
        );
        assert!(evaluate(lv(Level::Privileged), &json!({}), &spec).is_empty());
    }

    #[test]
    fn restricted_compliant_pod_passes() {
        let spec = json!({
            "securityContext": { "runAsNonRoot": true, "seccompProfile": { "type": "RuntimeDefault" } },
            "containers": [{ "name": "c", "securityContext": {
                "allowPrivilegeEscalation": false,
                "capabilities": { "drop": ["ALL"], "add": ["NET_BIND_SERVICE"] } } }],
            "volumes": [{ "name": "v", "emptyDir": {} }, { "name": "t", "projected": { "sources": [] } }],
        });
        assert_eq!(evaluate(lv(Level::Restricted), &json!({}), &spec), vec![]);
    }

    #[test]
    fn baseline_checks_wording() {
        let spec = json!({
            "hostNetwork": true, "hostPID": true,
            "securityContext": { "sysctls": [{ "name": "kernel.msgmax", "value": "1" }, { "name": "net.ipv4.tcp_rmem", "value": "1" }],
                                 "seccompProfile": { "type": "Unconfined" } },
            "initContainers": [{ "name": "i", "ports": [{ "containerPort": 80, "hostPort": 8080 }] }],
            "containers": [
                { "name": "a", "securityContext": { "capabilities": { "add": ["NET_ADMIN", "CHOWN", "SYS_ADMIN"] },
                                                     "procMount": "Unmasked",
                                                     "seLinuxOptions": { "type": "spc_t" },
                                                     "appArmorProfile": { "type": "Unconfined" } } },
                { "name": "b", "ports": [{ "containerPort": 9090, "hostPort": 9090 }] },
            ],
            "volumes": [{ "name": "host", "hostPath": { "path": "/" } }],
        });
        let meta =
            json!({ "annotations": { "container.apparmor.security.beta.kubernetes.io/b": "unconfined" } });
        let v = evaluate(lv(Level::Baseline), &meta, &spec);
        let details: Vec<String> = v.iter().map(|v| format!("{}: {}", v.reason, v.detail)).collect();
        assert_eq!(
            details,
            vec![
                "forbidden AppArmor profiles: container \"a\" and annotation must not set AppArmor profile type to \"Unconfined\", \"container.apparmor.security.beta.kubernetes.io/b=\"unconfined\"\"",
                "host namespaces: hostNetwork, hostPID",
                "hostPort: containers \"i\", \"b\" use hostPorts 8080, 9090",
                "procMount: container \"a\" must not set securityContext.procMount to \"Unmasked\"",
                "seLinuxOptions: container \"a\" set forbidden securityContext.seLinuxOptions: type \"spc_t\"",
                "forbidden sysctls: kernel.msgmax",
                "non-default capabilities: container \"a\" must not include \"NET_ADMIN\", \"SYS_ADMIN\" in securityContext.capabilities.add",
                "hostPath volumes: volume \"host\"",
                "seccompProfile: pod must not set securityContext.seccompProfile.type to \"Unconfined\"",
            ]
        );
        // tcp_rmem only became safe in 1.32.
        let old = LevelVersion { level: Level::Baseline, version: Version::Minor(31) };
        let v = evaluate(old, &meta, &spec);
        assert!(v.iter().any(|v| v.detail == "kernel.msgmax, net.ipv4.tcp_rmem"));
    }

    #[test]
    fn restricted_volumes_and_users() {
        let spec = json!({
            "securityContext": { "runAsNonRoot": true, "runAsUser": 0, "seccompProfile": { "type": "Localhost" } },
            "containers": [{ "name": "c", "securityContext": { "allowPrivilegeEscalation": false, "runAsNonRoot": false,
                "capabilities": { "drop": ["ALL"] } } }],
            "volumes": [{ "name": "n", "nfs": { "server": "s", "path": "/" } }, { "name": "g", "gitRepo": { "repository": "r" } }],
        });
        let v = evaluate(lv(Level::Restricted), &json!({}), &spec);
        let details: Vec<String> = v.iter().map(|v| format!("{}: {}", v.reason, v.detail)).collect();
        assert_eq!(
            details,
            vec![
                "restricted volume types: volumes [\"g\" \"n\"] have restricted types",
                "runAsNonRoot != true: container \"c\" must not set securityContext.runAsNonRoot=false",
                "runAsUser=0: pod must not set runAsUser=0",
            ]
        );
        // Before 1.23 root was not checked.
        let v22 = evaluate(
            LevelVersion { level: Level::Restricted, version: Version::Minor(22) },
            &json!({}),
            &spec,
        );
        assert!(!v22.iter().any(|v| v.reason == "runAsUser=0"));
    }
}
