//! The pod spec every pod-carrying resource shares (pods, pod templates, and the templates
//! of replication controllers, deployments, replica sets, stateful sets, daemon sets,
//! jobs and cron jobs): upstream's `SetDefaults_PodSpec` and friends, and
//! `ValidatePodSpec`/`ValidatePodTemplateSpec` with their wording.
//!
//! Objects are JSON as the k8s-openapi types write them; field paths are built from the
//! caller's path (`spec`, `spec.template.spec`, ...).

use serde_json::{Map, Value, json};

use crate::errors::FieldError;
use crate::registry::resources::{at_mut, items_mut};
use crate::validation::{
    self as v, Quantity, child, dns1123_label, dns1123_subdomain, index, key, label_selector, labels,
    nonnegative, qualified_name, show,
};

// ---------------------------------------------------------------------------------------
// Defaults
// ---------------------------------------------------------------------------------------

fn obj(v: &mut Value) -> &mut Map<String, Value> {
    if !v.is_object() {
        *v = json!({});
    }
    v.as_object_mut().expect("just made an object")
}

/// Sets `field` when it is absent (or null).
pub fn set_default(o: &mut Value, field: &str, value: Value) {
    if o.get(field).is_none_or(Value::is_null) {
        obj(o).insert(field.to_string(), value);
    }
}

fn set_default_str(o: &mut Value, field: &str, value: &str) {
    if o.get(field).and_then(Value::as_str).is_none_or(str::is_empty) {
        obj(o).insert(field.to_string(), json!(value));
    }
}

fn each_mut(parent: &mut Value, key: &str, f: impl FnMut(&mut Value)) {
    items_mut(parent, key).for_each(f);
}

/// The tag `ParseImageName` finds in an image reference: `latest` when there is neither
/// a tag nor a digest.
fn image_tag(image: &str) -> Option<String> {
    let (name, digest) = match image.split_once('@') {
        Some((n, d)) => (n, Some(d)),
        None => (image, None),
    };
    let last = name.rsplit('/').next().unwrap_or(name);
    let tag = last.split_once(':').map(|(_, t)| t.to_string());
    match (tag, digest) {
        (Some(t), _) => Some(t),
        (None, Some(_)) => None,
        (None, None) => Some("latest".into()),
    }
}

fn default_http_get(h: &mut Value) {
    if h.is_object() {
        set_default_str(h, "path", "/");
        set_default_str(h, "scheme", "HTTP");
    }
}

fn default_handler(h: &mut Value) {
    if let Some(get) = h.get_mut("httpGet") {
        default_http_get(get);
    }
    if let Some(grpc) = h.get_mut("grpc")
        && grpc.is_object()
    {
        set_default(grpc, "service", json!(""));
    }
}

fn default_probe(p: &mut Value) {
    if !p.is_object() {
        return;
    }
    for (f, d) in
        [("timeoutSeconds", 1), ("periodSeconds", 10), ("successThreshold", 1), ("failureThreshold", 3)]
    {
        if p[f].as_i64().unwrap_or(0) == 0 {
            p[f] = json!(d);
        }
    }
    default_handler(p);
}

fn default_field_ref(r: &mut Value) {
    if r.is_object() {
        set_default_str(r, "apiVersion", "v1");
    }
}

fn default_container(c: &mut Value) {
    if c.get("imagePullPolicy").and_then(Value::as_str).is_none_or(str::is_empty) {
        let image = c["image"].as_str().unwrap_or_default();
        let policy = if image_tag(image).as_deref() == Some("latest") { "Always" } else { "IfNotPresent" };
        c["imagePullPolicy"] = json!(policy);
    }
    set_default_str(c, "terminationMessagePath", "/dev/termination-log");
    set_default_str(c, "terminationMessagePolicy", "File");
    each_mut(c, "ports", |p| set_default_str(p, "protocol", "TCP"));
    set_default(c, "resources", json!({}));
    for list in ["limits", "requests"] {
        if let Some(l) = c["resources"].get_mut(list) {
            v::canonicalize_resource_list(l);
        }
    }
    for probe in ["livenessProbe", "readinessProbe", "startupProbe"] {
        if let Some(p) = c.get_mut(probe) {
            default_probe(p);
        }
    }
    for h in ["postStart", "preStop"] {
        if let Some(handler) = c.get_mut("lifecycle").and_then(|l| l.get_mut(h)) {
            default_handler(handler);
        }
    }
    each_mut(c, "env", |e| {
        if let Some(r) = at_mut(e, &["valueFrom", "fieldRef"]) {
            default_field_ref(r);
        }
    });
}

fn default_downward_items(source: &mut Value) {
    each_mut(source, "items", |i| {
        if let Some(r) = i.get_mut("fieldRef") {
            default_field_ref(r);
        }
    });
}

/// Upstream's `SetDefaults_PersistentVolumeClaimSpec`.
pub fn default_claim_spec(spec: &mut Value) {
    if spec.is_object() {
        set_default_str(spec, "volumeMode", "Filesystem");
        for list in ["requests", "limits"] {
            if let Some(l) = spec.get_mut("resources").and_then(|r| r.get_mut(list)) {
                v::canonicalize_resource_list(l);
            }
        }
    }
}

fn default_volume(vol: &mut Value) {
    let Some(o) = vol.as_object_mut() else { return };
    if o.keys().all(|k| k == "name") {
        o.insert("emptyDir".into(), json!({}));
    }
    for src in ["secret", "configMap", "downwardAPI", "projected"] {
        if let Some(s) = vol.get_mut(src)
            && s.is_object()
        {
            set_default(s, "defaultMode", json!(420));
        }
    }
    if let Some(d) = vol.get_mut("downwardAPI") {
        default_downward_items(d);
    }
    if let Some(h) = vol.get_mut("hostPath")
        && h.is_object()
    {
        set_default(h, "type", json!(""));
    }
    if let Some(e) = vol.get_mut("emptyDir")
        && let Some(limit) = e.get("sizeLimit").and_then(Value::as_str)
    {
        e["sizeLimit"] = json!(v::canonical_quantity(limit));
    }
    if let Some(spec) = at_mut(vol, &["ephemeral", "volumeClaimTemplate", "spec"]) {
        default_claim_spec(spec);
    }
    if let Some(sources) = vol.get_mut("projected").and_then(|p| p.get_mut("sources")) {
        sources.as_array_mut().into_iter().flatten().for_each(|s| {
            if let Some(t) = s.get_mut("serviceAccountToken")
                && t.is_object()
            {
                set_default(t, "expirationSeconds", json!(3600));
            }
            if let Some(d) = s.get_mut("downwardAPI") {
                default_downward_items(d);
            }
        });
    }
}

/// `SetDefaults_PodSpec` and the defaults of everything a pod spec holds (containers,
/// probes, volumes), plus the v1 conversion of `serviceAccount`/`serviceAccountName`.
pub fn default_pod_spec(spec: &mut Value) {
    if !spec.is_object() {
        return;
    }
    set_default_str(spec, "dnsPolicy", "ClusterFirst");
    set_default_str(spec, "restartPolicy", "Always");
    set_default(spec, "securityContext", json!({}));
    set_default(spec, "terminationGracePeriodSeconds", json!(30));
    set_default_str(spec, "schedulerName", "default-scheduler");
    // `serviceAccount` is the deprecated alias of `serviceAccountName`: either sets it,
    // and the v1 shape always shows both.
    let sa = spec["serviceAccountName"].as_str().filter(|s| !s.is_empty()).map(str::to_string);
    let deprecated = spec["serviceAccount"].as_str().filter(|s| !s.is_empty()).map(str::to_string);
    match sa.or(deprecated) {
        Some(name) => {
            spec["serviceAccountName"] = json!(name);
            spec["serviceAccount"] = json!(name);
        }
        None => {
            obj(spec).remove("serviceAccount");
        }
    }
    for list in ["containers", "initContainers", "ephemeralContainers"] {
        each_mut(spec, list, default_container);
    }
    each_mut(spec, "volumes", default_volume);
    if let Some(o) = spec.get_mut("overhead") {
        v::canonicalize_resource_list(o);
    }
}

/// Defaults of a `PodTemplateSpec` (its spec; templates get no pod-only defaults).
pub fn default_template(template: &mut Value) {
    if template.is_object() {
        default_pod_spec(&mut template["spec"]);
    }
}

/// `SetDefaults_Pod`: what only pods (not templates) get — requests from limits, service
/// links, host ports under host networking.
pub fn default_pod_only(spec: &mut Value) {
    if !spec.is_object() {
        return;
    }
    for list in ["containers", "initContainers"] {
        each_mut(spec, list, |c| {
            let Some(limits) = c["resources"]["limits"].as_object().cloned() else { return };
            let res = &mut c["resources"];
            if !res["requests"].is_object() {
                res["requests"] = json!({});
            }
            let requests = res["requests"].as_object_mut().expect("just made an object");
            for (k, q) in limits {
                requests.entry(k).or_insert(q);
            }
        });
    }
    set_default(spec, "enableServiceLinks", json!(true));
    if spec["hostNetwork"].as_bool() == Some(true) {
        for list in ["containers", "initContainers"] {
            each_mut(spec, list, |c| {
                each_mut(c, "ports", |p| {
                    if p["hostPort"].as_i64().unwrap_or(0) == 0 {
                        p["hostPort"] = p["containerPort"].clone();
                    }
                })
            });
        }
    }
}

/// The QoS class of a pod (`qos.ComputePodQOS`): Guaranteed when every container limits
/// cpu and memory and requests equal limits, BestEffort when nothing is requested or
/// limited, Burstable otherwise.
pub fn qos_class(spec: &Value) -> &'static str {
    use std::collections::BTreeMap;
    let mut requests: BTreeMap<String, i128> = BTreeMap::new();
    let mut limits: BTreeMap<String, i128> = BTreeMap::new();
    let mut guaranteed = true;
    let containers = spec["containers"].as_array().into_iter().flatten();
    let inits = spec["initContainers"].as_array().into_iter().flatten();
    for c in containers.chain(inits) {
        let positive = |list: &str| -> Vec<(String, i128)> {
            c["resources"][list]
                .as_object()
                .into_iter()
                .flatten()
                .filter(|(k, _)| *k == "cpu" || *k == "memory")
                .filter_map(|(k, q)| {
                    let n = Quantity::parse(q.as_str()?)?.nanos?;
                    (n > 0).then(|| (k.clone(), n))
                })
                .collect()
        };
        for (k, n) in positive("requests") {
            *requests.entry(k).or_default() += n;
        }
        let lim = positive("limits");
        if !(lim.iter().any(|(k, _)| k == "cpu") && lim.iter().any(|(k, _)| k == "memory")) {
            guaranteed = false;
        }
        for (k, n) in lim {
            *limits.entry(k).or_default() += n;
        }
    }
    if requests.is_empty() && limits.is_empty() {
        return "BestEffort";
    }
    if guaranteed && requests.iter().all(|(k, n)| limits.get(k) == Some(n)) && requests.len() == limits.len()
    {
        return "Guaranteed";
    }
    "Burstable"
}

// ---------------------------------------------------------------------------------------
// Validation
// ---------------------------------------------------------------------------------------

/// What differs between a pod's spec and a template's (upstream's `PodValidationOptions`).
#[derive(Clone, Copy, Debug, Default)]
pub struct Opts {
    /// The spec is a pod's (`ResourceIsPod`): host ports must equal container ports under
    /// host networking, images may not be padded.
    pub is_pod: bool,
}

fn s<'a>(v: &'a Value, f: &str) -> &'a str {
    v[f].as_str().unwrap_or_default()
}

fn items(v: &Value) -> impl Iterator<Item = (usize, &Value)> {
    v.as_array().into_iter().flatten().enumerate()
}

/// `ValidatePodTemplateSpec`: labels and annotations (at `<path>.labels`, as upstream
/// reports them), the pod spec, and no ephemeral containers.
pub fn validate_template(t: &Value, path: &str, opts: Opts) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let meta = &t["metadata"];
    errs.extend(labels(&child(path, "labels"), meta.get("labels")));
    errs.extend(v::annotations(&child(path, "annotations"), meta.get("annotations")));
    errs.extend(pod_annotations(&child(path, "annotations"), meta, &t["spec"]));
    errs.extend(validate_pod_spec(&t["spec"], &child(path, "spec"), None, opts));
    if t["spec"]["ephemeralContainers"].as_array().is_some_and(|a| !a.is_empty()) {
        errs.push(FieldError::forbidden(
            child(&child(path, "spec"), "ephemeralContainers"),
            "ephemeral containers not allowed in pod template",
        ));
    }
    errs
}

/// `ValidatePodSpecificAnnotations`.
pub fn pod_annotations(path: &str, meta: &Value, spec: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let ann = &meta["annotations"];
    if let Some(m) = ann.get("kubernetes.io/config.mirror").and_then(Value::as_str)
        && s(spec, "nodeName").is_empty()
    {
        errs.push(FieldError::invalid(
            key(path, "kubernetes.io/config.mirror"),
            m,
            "must set spec.nodeName if mirror pod annotation is set",
        ));
    }
    if let Some(c) = ann.get("controller.kubernetes.io/pod-deletion-cost").and_then(Value::as_str)
        && c.parse::<i32>().is_err()
    {
        errs.push(FieldError::invalid(
            key(path, "controller.kubernetes.io/pod-deletion-cost"),
            c,
            "must be a 32bit integer",
        ));
    }
    errs
}

/// `ValidatePodSpec`. `pod_name` is the pod's name for pods (generic ephemeral volumes
/// name their claims after it).
pub fn validate_pod_spec(spec: &Value, path: &str, pod_name: Option<&str>, opts: Opts) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let p = |f: &str| child(path, f);
    let grace = spec["terminationGracePeriodSeconds"].as_i64();
    if spec["terminationGracePeriodSeconds"].is_null() {
        errs.push(FieldError::required(p("terminationGracePeriodSeconds"), ""));
    }
    let (volumes, verrs) = validate_volumes(&spec["volumes"], &p("volumes"), pod_name);
    errs.extend(verrs);
    let restart = s(spec, "restartPolicy");
    errs.extend(validate_containers(spec, &volumes, grace, &p("containers"), opts));
    errs.extend(validate_init_containers(spec, &volumes, grace, &p("initContainers"), opts));
    errs.extend(validate_ephemeral_containers(spec, &volumes, &p("ephemeralContainers"), opts));
    // Host networking: host ports must be (or default to) the container ports.
    if spec["hostNetwork"].as_bool() == Some(true) {
        for (i, c) in items(&spec["containers"]) {
            for (j, port) in items(&c["ports"]) {
                let (hp, cp) =
                    (port["hostPort"].as_i64().unwrap_or(0), port["containerPort"].as_i64().unwrap_or(0));
                if (opts.is_pod || hp != 0) && hp != cp {
                    errs.push(FieldError::invalid(
                        child(&index(&child(&index(&p("containers"), i), "ports"), j), "hostPort"),
                        hp,
                        "must match `containerPort` when `hostNetwork` is true",
                    ));
                }
            }
        }
    }
    match restart {
        "Always" | "OnFailure" | "Never" => {}
        "" => errs.push(FieldError::required(p("restartPolicy"), "")),
        other => {
            errs.push(FieldError::not_supported(p("restartPolicy"), other, &["Always", "OnFailure", "Never"]))
        }
    }
    let dns = s(spec, "dnsPolicy");
    match dns {
        "ClusterFirstWithHostNet" | "ClusterFirst" | "Default" | "None" => {}
        "" => errs.push(FieldError::required(p("dnsPolicy"), "")),
        other => errs.push(FieldError::not_supported(
            p("dnsPolicy"),
            other,
            &["ClusterFirstWithHostNet", "ClusterFirst", "Default", "None"],
        )),
    }
    errs.extend(labels(&p("nodeSelector"), spec.get("nodeSelector")));
    errs.extend(validate_pod_security_context(&spec["securityContext"], &p("securityContext")));
    errs.extend(validate_affinity(&spec["affinity"], &p("affinity")));
    errs.extend(validate_dns_config(&spec["dnsConfig"], dns, &p("dnsConfig")));
    for (i, g) in items(&spec["readinessGates"]) {
        errs.extend(qualified_name(
            &child(&index(&p("readinessGates"), i), "conditionType"),
            s(g, "conditionType"),
        ));
    }
    let mut gates = Vec::new();
    for (i, g) in items(&spec["schedulingGates"]) {
        let name = s(g, "name");
        errs.extend(qualified_name(&index(&p("schedulingGates"), i), name));
        if gates.contains(&name) {
            errs.push(FieldError::duplicate(index(&p("schedulingGates"), i), name));
        }
        gates.push(name);
    }
    errs.extend(validate_topology_spread(
        &spec["topologySpreadConstraints"],
        &p("topologySpreadConstraints"),
    ));
    for f in ["serviceAccountName", "nodeName", "priorityClassName"] {
        if !s(spec, f).is_empty() {
            errs.extend(dns1123_subdomain(&p(f), s(spec, f)));
        }
    }
    if let Some(d) = spec["activeDeadlineSeconds"].as_i64()
        && !(1..=i64::from(i32::MAX)).contains(&d)
    {
        errs.push(FieldError::invalid(
            p("activeDeadlineSeconds"),
            d,
            v::inclusive_range(1, i64::from(i32::MAX)),
        ));
    }
    for f in ["hostname", "subdomain"] {
        if !s(spec, f).is_empty() {
            errs.extend(dns1123_label(&p(f), s(spec, f)));
        }
    }
    errs.extend(validate_tolerations(&spec["tolerations"], &p("tolerations")));
    for (i, a) in items(&spec["hostAliases"]) {
        let ap = index(&p("hostAliases"), i);
        errs.extend(v::ip(&child(&ap, "ip"), s(a, "ip")));
        for (j, h) in items(&a["hostnames"]) {
            errs.extend(dns1123_subdomain(
                &index(&child(&ap, "hostnames"), j),
                h.as_str().unwrap_or_default(),
            ));
        }
    }
    if let Some(rc) = spec["runtimeClassName"].as_str() {
        errs.extend(dns1123_subdomain(&p("runtimeClassName"), rc));
    }
    if let Some(pp) = spec["preemptionPolicy"].as_str() {
        errs.extend(preemption_policy(&p("preemptionPolicy"), pp));
    }
    if spec["overhead"].is_object() {
        errs.extend(validate_resource_requirements(&json!({ "limits": spec["overhead"] }), &p("overhead")));
    }
    if spec["os"].is_object() {
        match s(&spec["os"], "name") {
            "" => errs.push(FieldError::required(child(&p("os"), "name"), "cannot be empty")),
            "linux" | "windows" => {}
            other => errs.push(FieldError::not_supported(p("os"), other, &["linux", "windows"])),
        }
    }
    errs
}

/// `ValidatePreemptionPolicy`.
pub fn preemption_policy(field: &str, policy: &str) -> Vec<FieldError> {
    match policy {
        "PreemptLowerPriority" | "Never" => Vec::new(),
        "" => vec![FieldError::required(field, "")],
        other => vec![FieldError::not_supported(field, other, &["PreemptLowerPriority", "Never"])],
    }
}

const VOLUME_SOURCES: &[&str] = &[
    "emptyDir",
    "hostPath",
    "gitRepo",
    "gcePersistentDisk",
    "awsElasticBlockStore",
    "secret",
    "nfs",
    "iscsi",
    "glusterfs",
    "flocker",
    "persistentVolumeClaim",
    "rbd",
    "cinder",
    "cephfs",
    "quobyte",
    "downwardAPI",
    "fc",
    "flexVolume",
    "configMap",
    "azureFile",
    "vsphereVolume",
    "photonPersistentDisk",
    "portworxVolume",
    "azureDisk",
    "storageos",
    "projected",
    "scaleIO",
    "csi",
    "ephemeral",
    "image",
];

/// `ValidateVolumes`: the valid volumes by name (what mounts may refer to) and the errors.
fn validate_volumes(
    vols: &Value,
    path: &str,
    pod_name: Option<&str>,
) -> (Vec<(String, String)>, Vec<FieldError>) {
    let mut errs = Vec::new();
    let mut valid: Vec<(String, String)> = Vec::new();
    for (i, vol) in items(vols) {
        let vp = index(path, i);
        let name = s(vol, "name");
        let (kind, mut el) = validate_volume_source(vol, &vp, pod_name);
        if name.is_empty() {
            el.push(FieldError::required(child(&vp, "name"), ""));
        } else {
            el.extend(dns1123_label(&child(&vp, "name"), name));
        }
        if valid.iter().any(|(n, _)| n == name) {
            el.push(FieldError::duplicate(child(&vp, "name"), name));
        }
        if el.is_empty() {
            valid.push((name.to_string(), kind));
        } else {
            errs.extend(el);
        }
    }
    (valid, errs)
}

const FILE_MODE_MSG: &str = "must be a number between 0 and 0777 (octal), both inclusive";

fn file_mode(field: &str, m: &Value) -> Vec<FieldError> {
    match m.as_i64() {
        Some(n) if !(0..=0o777).contains(&n) => vec![FieldError::invalid(field, n, FILE_MODE_MSG)],
        _ => Vec::new(),
    }
}

/// `ValidateLocalNonReservedPath`: relative, no `..` element, not starting with `..`.
fn local_non_reserved_path(field: &str, path: &str) -> Vec<FieldError> {
    let mut errs = local_descending_path(field, path);
    if path.starts_with("..") && !path.starts_with("../") {
        errs.push(FieldError::invalid(field, path, "must not start with '..'"));
    }
    errs
}

fn local_descending_path(field: &str, path: &str) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if path.starts_with('/') {
        errs.push(FieldError::invalid(field, path, "must be a relative path"));
    }
    errs.extend(no_backsteps(field, path));
    errs
}

fn no_backsteps(field: &str, path: &str) -> Vec<FieldError> {
    if path.split('/').any(|p| p == "..") {
        vec![FieldError::invalid(field, path, "must not contain '..'")]
    } else {
        Vec::new()
    }
}

fn key_to_paths(items_v: &Value, path: &str) -> Vec<FieldError> {
    let mut errs = Vec::new();
    for (i, kp) in items(items_v) {
        let ip = index(path, i);
        if s(kp, "key").is_empty() {
            errs.push(FieldError::required(child(&ip, "key"), ""));
        }
        if s(kp, "path").is_empty() {
            errs.push(FieldError::required(child(&ip, "path"), ""));
        }
        errs.extend(local_non_reserved_path(&child(&ip, "path"), s(kp, "path")));
        errs.extend(file_mode(&child(&ip, "mode"), &kp["mode"]));
    }
    errs
}

const VOLUME_FIELD_PATHS: &[&str] =
    &["metadata.annotations", "metadata.labels", "metadata.name", "metadata.namespace", "metadata.uid"];

fn downward_api_files(items_v: &Value, path: &str) -> Vec<FieldError> {
    let mut errs = Vec::new();
    for (_, f) in items(items_v) {
        if s(f, "path").is_empty() {
            errs.push(FieldError::required(child(path, "path"), ""));
        }
        errs.extend(local_non_reserved_path(&child(path, "path"), s(f, "path")));
        if f["fieldRef"].is_object() {
            errs.extend(object_field_selector(&f["fieldRef"], VOLUME_FIELD_PATHS, &child(path, "fieldRef")));
            if f["resourceFieldRef"].is_object() {
                errs.push(FieldError::invalid(
                    path,
                    "resource",
                    "fieldRef and resourceFieldRef can not be specified simultaneously",
                ));
            }
        } else if f["resourceFieldRef"].is_object() {
            let r = &f["resourceFieldRef"];
            if s(r, "containerName").is_empty() {
                errs.push(FieldError::required(child(&child(path, "resourceFieldRef"), "containerName"), ""));
            } else {
                errs.extend(container_resource_selector(r, &child(path, "resourceFieldRef")));
            }
        } else {
            errs.push(FieldError::required(path, "one of fieldRef and resourceFieldRef is required"));
        }
        errs.extend(file_mode(&child(path, "mode"), &f["mode"]));
    }
    errs
}

/// One volume's source: exactly one type, and that type's required fields. Returns the
/// source type (mounts of claims and devices care).
fn validate_volume_source(vol: &Value, path: &str, pod_name: Option<&str>) -> (String, Vec<FieldError>) {
    let mut errs = Vec::new();
    let mut kind = String::new();
    for src in VOLUME_SOURCES {
        let Some(body) = vol.get(*src).filter(|b| !b.is_null()) else { continue };
        let sp = child(path, src);
        if !kind.is_empty() {
            errs.push(FieldError::forbidden(sp, "may not specify more than 1 volume type"));
            continue;
        }
        kind = src.to_string();
        match *src {
            "emptyDir" => {
                if let Some(l) = body.get("sizeLimit")
                    && matches!(v::quantity(&child(&sp, "sizeLimit"), l), Ok(Some(n)) if n < 0)
                {
                    errs.push(FieldError::forbidden(
                        child(&sp, "sizeLimit"),
                        "SizeLimit field must be a valid resource quantity",
                    ));
                }
            }
            "hostPath" => {
                let hp = s(body, "path");
                if hp.is_empty() {
                    errs.push(FieldError::required(child(&sp, "path"), ""));
                } else {
                    errs.extend(no_backsteps(&child(&sp, "path"), hp));
                    const TYPES: &[&str] = &[
                        "",
                        "BlockDevice",
                        "CharDevice",
                        "Directory",
                        "DirectoryOrCreate",
                        "File",
                        "FileOrCreate",
                        "Socket",
                    ];
                    if let Some(t) = body["type"].as_str()
                        && !TYPES.contains(&t)
                    {
                        errs.push(FieldError::not_supported(child(&sp, "type"), t, TYPES));
                    }
                }
            }
            "secret" => {
                if s(body, "secretName").is_empty() {
                    errs.push(FieldError::required(child(&sp, "secretName"), ""));
                }
                errs.extend(file_mode(&child(&sp, "defaultMode"), &body["defaultMode"]));
                errs.extend(key_to_paths(&body["items"], &child(&sp, "items")));
            }
            "configMap" => {
                if s(body, "name").is_empty() {
                    errs.push(FieldError::required(child(&sp, "name"), ""));
                }
                errs.extend(file_mode(&child(&sp, "defaultMode"), &body["defaultMode"]));
                errs.extend(key_to_paths(&body["items"], &child(&sp, "items")));
            }
            "persistentVolumeClaim" if s(body, "claimName").is_empty() => {
                errs.push(FieldError::required(child(&sp, "claimName"), ""));
            }
            "nfs" => {
                if s(body, "server").is_empty() {
                    errs.push(FieldError::required(child(&sp, "server"), ""));
                }
                if s(body, "path").is_empty() {
                    errs.push(FieldError::required(child(&sp, "path"), ""));
                }
                if !s(body, "path").starts_with('/') {
                    errs.push(FieldError::invalid(
                        child(&sp, "path"),
                        s(body, "path"),
                        "must be an absolute path",
                    ));
                }
            }
            "downwardAPI" => {
                errs.extend(file_mode(&child(&sp, "defaultMode"), &body["defaultMode"]));
                errs.extend(downward_api_files(&body["items"], &sp));
            }
            "projected" => {
                errs.extend(file_mode(&child(&sp, "defaultMode"), &body["defaultMode"]));
                for (i, source) in items(&body["sources"]) {
                    let srcp = index(&child(&sp, "sources"), i);
                    let present: Vec<&str> =
                        ["secret", "configMap", "downwardAPI", "serviceAccountToken", "clusterTrustBundle"]
                            .into_iter()
                            .filter(|k| source[*k].is_object())
                            .collect();
                    if present.len() > 1 {
                        errs.push(FieldError::forbidden(
                            srcp.clone(),
                            "may not specify more than 1 volume type per source",
                        ));
                    }
                    for k in ["secret", "configMap"] {
                        if source[k].is_object() {
                            if s(&source[k], "name").is_empty() {
                                errs.push(FieldError::required(child(&child(&srcp, k), "name"), ""));
                            }
                            errs.extend(key_to_paths(&source[k]["items"], &child(&child(&srcp, k), "items")));
                        }
                    }
                    if source["downwardAPI"].is_object() {
                        errs.extend(downward_api_files(
                            &source["downwardAPI"]["items"],
                            &child(&srcp, "downwardAPI"),
                        ));
                    }
                    let t = &source["serviceAccountToken"];
                    if t.is_object() {
                        let tp = child(&srcp, "serviceAccountToken");
                        let secs = t["expirationSeconds"].as_i64().unwrap_or(3600);
                        if secs < 600 {
                            errs.push(FieldError::invalid(
                                child(&tp, "expirationSeconds"),
                                secs,
                                "may not specify a duration less than 10 minutes",
                            ));
                        }
                        if secs > 1 << 32 {
                            errs.push(FieldError::invalid(
                                child(&tp, "expirationSeconds"),
                                secs,
                                "may not specify a duration larger than 2^32 seconds",
                            ));
                        }
                        if s(t, "path").is_empty() {
                            errs.push(FieldError::required(child(&sp, "path"), ""));
                        } else {
                            errs.extend(local_non_reserved_path(&child(&sp, "path"), s(t, "path")));
                        }
                    }
                }
            }
            "csi" => {
                let d = s(body, "driver");
                if d.is_empty() {
                    errs.push(FieldError::required(child(&sp, "driver"), ""));
                }
                if d.len() > 63 {
                    errs.push(FieldError::too_long(child(&sp, "driver"), 63));
                }
                errs.extend(dns1123_subdomain(&child(&sp, "driver"), &d.to_lowercase()));
            }
            "ephemeral" => {
                let t = &body["volumeClaimTemplate"];
                if !t.is_object() {
                    errs.push(FieldError::required(child(&sp, "volumeClaimTemplate"), ""));
                } else {
                    let tp = child(&sp, "volumeClaimTemplate");
                    errs.extend(labels(
                        &child(&child(&tp, "metadata"), "labels"),
                        t["metadata"].get("labels"),
                    ));
                    errs.extend(super::persistent_volume_claim::validate_claim_spec(
                        &t["spec"],
                        &child(&tp, "spec"),
                    ));
                    if let (Some(pod), Some(name)) = (pod_name, vol["name"].as_str()) {
                        let claim = format!("{pod}-{name}");
                        for e in dns1123_subdomain("", &claim) {
                            errs.push(FieldError::invalid(
                                child(path, "name"),
                                name,
                                format!("PVC name \"{claim}\": {}", e.detail),
                            ));
                        }
                    }
                }
            }
            "image" => match body["pullPolicy"].as_str().unwrap_or_default() {
                "Always" | "IfNotPresent" | "Never" | "" => {}
                other => errs.push(FieldError::not_supported(
                    child(&sp, "pullPolicy"),
                    other,
                    &["Always", "IfNotPresent", "Never"],
                )),
            },
            _ => {}
        }
    }
    if kind.is_empty() {
        errs.push(FieldError::required(path, "must specify a volume type"));
    }
    (kind, errs)
}

const ENV_FIELD_PATHS: &[&str] = &[
    "metadata.name",
    "metadata.namespace",
    "metadata.uid",
    "spec.nodeName",
    "spec.serviceAccountName",
    "status.hostIP",
    "status.hostIPs",
    "status.podIP",
    "status.podIPs",
];

const RESOURCE_FIELD_PATHS: &[&str] = &[
    "limits.cpu",
    "limits.ephemeral-storage",
    "limits.memory",
    "requests.cpu",
    "requests.ephemeral-storage",
    "requests.memory",
];

/// `validateObjectFieldSelector`: a supported field path (or a label/annotation
/// subscript) of apiVersion v1.
fn object_field_selector(r: &Value, supported: &[&str], path: &str) -> Vec<FieldError> {
    if s(r, "apiVersion").is_empty() {
        return vec![FieldError::required(child(path, "apiVersion"), "")];
    }
    let fp = s(r, "fieldPath");
    if fp.is_empty() {
        return vec![FieldError::required(child(path, "fieldPath"), "")];
    }
    if let Some((base, rest)) = fp.split_once('[') {
        let sub = rest.strip_suffix(']').unwrap_or(rest).trim_matches('\'');
        return match base {
            "metadata.annotations" => qualified_name(path, &sub.to_lowercase()),
            "metadata.labels" => qualified_name(path, sub),
            other => vec![FieldError::invalid(path, other, "does not support subscript")],
        };
    }
    if supported.contains(&fp) {
        Vec::new()
    } else {
        let mut sorted = supported.to_vec();
        sorted.sort_unstable();
        vec![FieldError::not_supported(child(path, "fieldPath"), fp, &sorted)]
    }
}

fn container_resource_selector(r: &Value, path: &str) -> Vec<FieldError> {
    let res = s(r, "resource");
    if res.is_empty() {
        vec![FieldError::required(child(path, "resource"), "")]
    } else if RESOURCE_FIELD_PATHS.contains(&res)
        || res.starts_with("requests.hugepages-")
        || res.starts_with("limits.hugepages-")
    {
        Vec::new()
    } else {
        vec![FieldError::not_supported(child(path, "resource"), res, RESOURCE_FIELD_PATHS)]
    }
}

fn key_selector(r: &Value, path: &str) -> Vec<FieldError> {
    let mut errs = dns1123_subdomain(&child(path, "name"), s(r, "name"));
    if s(r, "key").is_empty() {
        errs.push(FieldError::required(child(path, "key"), ""));
    } else {
        errs.extend(v::config_map_key(&child(path, "key"), s(r, "key")));
    }
    errs
}

fn validate_env(env: &Value, path: &str) -> Vec<FieldError> {
    let mut errs = Vec::new();
    for (i, e) in items(env) {
        let ep = index(path, i);
        let name = s(e, "name");
        if name.is_empty() {
            errs.push(FieldError::required(child(&ep, "name"), ""));
        } else {
            errs.extend(v::env_var_name(&child(&ep, "name"), name));
        }
        let from = &e["valueFrom"];
        if !from.is_object() {
            continue;
        }
        let fp = child(&ep, "valueFrom");
        let mut n = 0;
        if from["fieldRef"].is_object() {
            n += 1;
            errs.extend(object_field_selector(&from["fieldRef"], ENV_FIELD_PATHS, &child(&fp, "fieldRef")));
        }
        if from["resourceFieldRef"].is_object() {
            n += 1;
            errs.extend(container_resource_selector(
                &from["resourceFieldRef"],
                &child(&fp, "resourceFieldRef"),
            ));
        }
        for k in ["configMapKeyRef", "secretKeyRef"] {
            if from[k].is_object() {
                n += 1;
                errs.extend(key_selector(&from[k], &child(&fp, k)));
            }
        }
        if n == 0 {
            errs.push(FieldError::invalid(
                fp,
                "",
                "must specify one of: `fieldRef`, `resourceFieldRef`, `configMapKeyRef` or `secretKeyRef`",
            ));
        } else if !s(e, "value").is_empty() {
            errs.push(FieldError::invalid(fp, "", "may not be specified when `value` is not empty"));
        } else if n > 1 {
            errs.push(FieldError::invalid(fp, "", "may not have more than one field specified at a time"));
        }
    }
    errs
}

fn validate_env_from(env_from: &Value, path: &str) -> Vec<FieldError> {
    let mut errs = Vec::new();
    for (i, e) in items(env_from) {
        let ep = index(path, i);
        if !s(e, "prefix").is_empty() {
            errs.extend(v::env_var_name(&child(&ep, "prefix"), s(e, "prefix")));
        }
        let mut n = 0;
        for k in ["configMapRef", "secretRef"] {
            if e[k].is_object() {
                n += 1;
                let name = s(&e[k], "name");
                if name.is_empty() {
                    errs.push(FieldError::required(child(&child(&ep, k), "name"), ""));
                } else {
                    errs.extend(dns1123_subdomain(&child(&child(&ep, k), "name"), name));
                }
            }
        }
        if n == 0 {
            errs.push(FieldError::invalid(path, "", "must specify one of: `configMapRef` or `secretRef`"));
        } else if n > 1 {
            errs.push(FieldError::invalid(path, "", "may not have more than one field specified at a time"));
        }
    }
    errs
}

fn validate_ports(ports: &Value, path: &str) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let mut names: Vec<&str> = Vec::new();
    for (i, port) in items(ports) {
        let pp = index(path, i);
        let name = s(port, "name");
        if !name.is_empty() {
            let e = v::port_name(&child(&pp, "name"), name);
            if !e.is_empty() {
                errs.extend(e);
            } else if names.contains(&name) {
                errs.push(FieldError::duplicate(child(&pp, "name"), name));
            } else {
                names.push(name);
            }
        }
        match port["containerPort"].as_i64().unwrap_or(0) {
            0 => errs.push(FieldError::required(child(&pp, "containerPort"), "")),
            cp => errs.extend(v::port_num(&child(&pp, "containerPort"), cp)),
        }
        if let Some(hp) = port["hostPort"].as_i64().filter(|h| *h != 0) {
            errs.extend(v::port_num(&child(&pp, "hostPort"), hp));
        }
        errs.extend(v::protocol(&child(&pp, "protocol"), &port["protocol"]));
    }
    errs
}

/// `ValidateVolumeMounts` and `ValidateVolumeDevices` of the container at `cpath`.
fn validate_mounts(c: &Value, volumes: &[(String, String)], cpath: &str) -> Vec<FieldError> {
    let path = &child(cpath, "volumeMounts");
    let mut errs = Vec::new();
    let mut points: Vec<&str> = Vec::new();
    let devices: Vec<(&str, &str)> =
        items(&c["volumeDevices"]).map(|(_, d)| (s(d, "name"), s(d, "devicePath"))).collect();
    for (i, m) in items(&c["volumeMounts"]) {
        let mp = index(path, i);
        let name = s(m, "name");
        if name.is_empty() {
            errs.push(FieldError::required(child(&mp, "name"), ""));
        }
        let vol = volumes.iter().find(|(n, _)| n == name);
        if vol.is_none() {
            errs.push(FieldError::not_found(child(&mp, "name"), name));
        }
        let at = s(m, "mountPath");
        if at.is_empty() {
            errs.push(FieldError::required(child(&mp, "mountPath"), ""));
        }
        if points.contains(&at) {
            errs.push(FieldError::invalid(child(&mp, "mountPath"), at, "must be unique"));
        }
        points.push(at);
        if devices.iter().any(|(n, _)| *n == name) {
            errs.push(FieldError::invalid(
                child(&mp, "name"),
                name,
                "must not already exist in volumeDevices",
            ));
        }
        if devices.iter().any(|(_, p)| *p == at) {
            errs.push(FieldError::invalid(
                child(&mp, "mountPath"),
                at,
                "must not already exist as a path in volumeDevices",
            ));
        }
        let sub = s(m, "subPath");
        let sub_expr = s(m, "subPathExpr");
        if vol.is_some_and(|(_, k)| k == "image") {
            if !sub.is_empty() {
                errs.push(FieldError::invalid(
                    child(&mp, "subPath"),
                    sub,
                    "not allowed in image volume sources",
                ));
            }
            if !sub_expr.is_empty() {
                errs.push(FieldError::invalid(
                    child(&mp, "subPathExpr"),
                    sub_expr,
                    "not allowed in image volume sources",
                ));
            }
        }
        // Upstream reports these at the list's path (no index).
        if !sub.is_empty() {
            errs.extend(local_descending_path(&child(path, "subPath"), sub));
        }
        if !sub_expr.is_empty() {
            if !sub.is_empty() {
                errs.push(FieldError::invalid(
                    child(&mp, "subPathExpr"),
                    sub_expr,
                    "subPathExpr and subPath are mutually exclusive",
                ));
            }
            errs.extend(local_descending_path(&child(path, "subPathExpr"), sub_expr));
        }
        if let Some(prop) = m["mountPropagation"].as_str() {
            let pp = child(path, "mountPropagation");
            const SUPPORTED: &[&str] = &["Bidirectional", "HostToContainer", "None"];
            if !SUPPORTED.contains(&prop) {
                errs.push(FieldError::not_supported(pp.clone(), prop, SUPPORTED));
            }
            if prop == "Bidirectional" && c["securityContext"]["privileged"].as_bool() != Some(true) {
                errs.push(FieldError::forbidden(
                    pp,
                    "Bidirectional mount propagation is available only to privileged containers",
                ));
            }
        }
    }
    for (i, d) in items(&c["volumeDevices"]) {
        let dp = index(&child(cpath, "volumeDevices"), i);
        let name = s(d, "name");
        if name.is_empty() {
            errs.push(FieldError::required(child(&dp, "name"), ""));
        }
        match volumes.iter().find(|(n, _)| n == name) {
            None => errs.push(FieldError::not_found(child(&dp, "name"), name)),
            Some((_, k)) if k != "persistentVolumeClaim" && k != "ephemeral" => {
                errs.push(FieldError::invalid(
                    child(&dp, "name"),
                    name,
                    "can only use volume source type of PersistentVolumeClaim or Ephemeral for block mode",
                ))
            }
            _ => {}
        }
        if s(d, "devicePath").is_empty() {
            errs.push(FieldError::required(child(&dp, "devicePath"), ""));
        }
    }
    errs
}

fn validate_http_get(h: &Value, path: &str) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if s(h, "path").is_empty() {
        errs.push(FieldError::required(child(path, "path"), ""));
    }
    errs.extend(v::port_num_or_name(&child(path, "port"), &h["port"]));
    match s(h, "scheme") {
        "HTTP" | "HTTPS" => {}
        other => errs.push(FieldError::not_supported(child(path, "scheme"), other, &["HTTP", "HTTPS"])),
    }
    for (_, header) in items(&h["httpHeaders"]) {
        let name = s(header, "name");
        if name.is_empty()
            || !name.chars().all(|c| c.is_ascii_alphanumeric() || "-!#$%&'*+.^_`|~".contains(c))
        {
            errs.push(FieldError::invalid(
                child(path, "httpHeaders"),
                name,
                "a valid HTTP header must consist of alphanumeric characters or '-' (e.g. 'X-Header-Name', regex used for validation is '[-A-Za-z0-9]+')",
            ));
        }
    }
    errs
}

/// `validateHandler`: exactly one of exec, httpGet, tcpSocket, grpc (probes) or sleep
/// (lifecycle hooks).
fn validate_handler(h: &Value, grace: Option<i64>, path: &str) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let mut n = 0;
    for kind in ["exec", "httpGet", "tcpSocket", "grpc", "sleep"] {
        let body = &h[kind];
        if !body.is_object() {
            continue;
        }
        let kp = child(path, kind);
        if n > 0 {
            errs.push(FieldError::forbidden(kp, "may not specify more than 1 handler type"));
            continue;
        }
        n += 1;
        match kind {
            "exec" => {
                if body["command"].as_array().is_none_or(Vec::is_empty) {
                    errs.push(FieldError::required(child(&kp, "command"), ""));
                }
            }
            "httpGet" => errs.extend(validate_http_get(body, &kp)),
            "tcpSocket" => errs.extend(v::port_num_or_name(&child(&kp, "port"), &body["port"])),
            "grpc" => errs.extend(v::port_num(&child(&kp, "port"), body["port"].as_i64().unwrap_or(0))),
            _ => {
                let secs = body["seconds"].as_i64().unwrap_or(0);
                if let Some(g) = grace
                    && (secs <= 0 || secs > g)
                {
                    errs.push(FieldError::invalid(
                        kp,
                        secs,
                        format!(
                            "must be greater than 0 and less than terminationGracePeriodSeconds ({g}). Enable AllowPodLifecycleSleepActionZeroValue feature gate for zero sleep."
                        ),
                    ));
                }
            }
        }
    }
    if n == 0 {
        errs.push(FieldError::required(path, "must specify a handler type"));
    }
    errs
}

fn validate_probe(p: &Value, grace: Option<i64>, path: &str, kind: &str) -> Vec<FieldError> {
    if !p.is_object() {
        return Vec::new();
    }
    let mut probe_handler = p.clone();
    if let Some(o) = probe_handler.as_object_mut() {
        o.remove("sleep");
    }
    let mut errs = validate_handler(&probe_handler, grace, path);
    for f in
        ["initialDelaySeconds", "timeoutSeconds", "periodSeconds", "successThreshold", "failureThreshold"]
    {
        errs.extend(nonnegative(&child(path, f), &p[f]));
    }
    if let Some(t) = p["terminationGracePeriodSeconds"].as_i64()
        && t <= 0
    {
        errs.push(FieldError::invalid(
            child(path, "terminationGracePeriodSeconds"),
            t,
            "must be greater than 0",
        ));
    }
    match kind {
        "readinessProbe" => {
            if let Some(t) = p["terminationGracePeriodSeconds"].as_i64() {
                errs.push(FieldError::invalid(
                    child(path, "terminationGracePeriodSeconds"),
                    t,
                    "must not be set for readinessProbes",
                ));
            }
        }
        _ => {
            let st = p["successThreshold"].as_i64().unwrap_or(1);
            if st != 1 {
                errs.push(FieldError::invalid(child(path, "successThreshold"), st, "must be 1"));
            }
        }
    }
    errs
}

fn validate_lifecycle(l: &Value, grace: Option<i64>, path: &str) -> Vec<FieldError> {
    let mut errs = Vec::new();
    for h in ["postStart", "preStop"] {
        if l[h].is_object() {
            let mut handler = l[h].clone();
            if let Some(o) = handler.as_object_mut() {
                o.remove("grpc");
            }
            errs.extend(validate_handler(&handler, grace, &child(path, h)));
        }
    }
    errs
}

fn is_native_resource(name: &str) -> bool {
    !name.contains('/') || name.contains("kubernetes.io/")
}

fn overcommit_allowed(name: &str) -> bool {
    is_native_resource(name) && !name.starts_with("hugepages-")
}

/// Standard resource names (`IsStandardResourceName`).
fn is_standard_resource(name: &str) -> bool {
    const STANDARD: &[&str] = &[
        "cpu",
        "memory",
        "ephemeral-storage",
        "requests.cpu",
        "requests.memory",
        "requests.ephemeral-storage",
        "limits.cpu",
        "limits.memory",
        "limits.ephemeral-storage",
        "pods",
        "resourcequotas",
        "services",
        "replicationcontrollers",
        "secrets",
        "persistentvolumeclaims",
        "configmaps",
        "services.nodeports",
        "services.loadbalancers",
        "requests.storage",
        "storage",
    ];
    STANDARD.contains(&name) || name.starts_with("hugepages-") || name.starts_with("requests.hugepages-")
}

/// `validateContainerResourceName`.
fn container_resource_name(name: &str, field: &str) -> Vec<FieldError> {
    let mut errs = qualified_name(field, name);
    if !errs.is_empty() {
        return errs;
    }
    if !name.contains('/') {
        if !is_standard_resource(name) {
            errs.push(FieldError::invalid(
                field,
                name,
                "must be a standard resource type or fully qualified",
            ));
        }
        if !v::is_standard_container_resource(name) {
            errs.push(FieldError::invalid(field, name, "must be a standard resource for containers"));
        }
    } else if !is_native_resource(name) && name.starts_with("requests.") {
        errs.push(FieldError::invalid(field, name, "doesn't follow extended resource name standard"));
    }
    errs
}

/// `ValidateContainerResourceRequirements`: names, non-negative quantities, requests no
/// more than limits (equal for resources that cannot be overcommitted).
pub fn validate_resource_requirements(r: &Value, path: &str) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let lim_path = child(path, "limits");
    let req_path = child(path, "requests");
    let limits = r["limits"].as_object();
    let (mut lim_cpu_mem, mut req_cpu_mem, mut hugepages) = (false, false, false);
    for (name, q) in limits.into_iter().flatten() {
        let fp = key(&lim_path, name);
        errs.extend(container_resource_name(name, &fp));
        errs.extend(v::resource_quantity(name, &fp, q));
        hugepages |= name.starts_with("hugepages-");
        lim_cpu_mem |= name == "cpu" || name == "memory";
    }
    for (name, q) in r["requests"].as_object().into_iter().flatten() {
        let fp = key(&req_path, name);
        errs.extend(container_resource_name(name, &fp));
        errs.extend(v::resource_quantity(name, &fp, q));
        let request = v::quantity(&fp, q).ok().flatten();
        match limits.and_then(|l| l.get(name)) {
            Some(lq) => {
                let limit = v::quantity(&fp, lq).ok().flatten();
                let canonical_limit = v::canonical_quantity(lq.as_str().unwrap_or_default());
                let canonical_request = v::canonical_quantity(q.as_str().unwrap_or_default());
                if let (Some(rq), Some(l)) = (request, limit) {
                    if rq != l && !overcommit_allowed(name) {
                        errs.push(FieldError::invalid(
                            req_path.clone(),
                            canonical_request,
                            format!("must be equal to {name} limit of {canonical_limit}"),
                        ));
                    } else if rq > l {
                        errs.push(FieldError::invalid(
                            req_path.clone(),
                            canonical_request,
                            format!("must be less than or equal to {name} limit of {canonical_limit}"),
                        ));
                    }
                }
            }
            None if !overcommit_allowed(name) => {
                errs.push(FieldError::required(
                    lim_path.clone(),
                    "Limit must be set for non overcommitable resources",
                ));
            }
            None => {}
        }
        hugepages |= name.starts_with("hugepages-");
        req_cpu_mem |= name == "cpu" || name == "memory";
    }
    if hugepages && !lim_cpu_mem && !req_cpu_mem {
        errs.push(FieldError::forbidden(path, "HugePages require cpu or memory"));
    }
    errs
}

fn id_range(field: &str, v: &Value) -> Vec<FieldError> {
    match v.as_i64() {
        Some(n) if !(0..=i64::from(i32::MAX)).contains(&n) => {
            vec![FieldError::invalid(field, n, v::inclusive_range(0, i64::from(i32::MAX)))]
        }
        _ => Vec::new(),
    }
}

fn seccomp_profile(sp: &Value, path: &str) -> Vec<FieldError> {
    if !sp.is_object() {
        return Vec::new();
    }
    let mut errs = Vec::new();
    let t = s(sp, "type");
    match t {
        "Localhost" | "RuntimeDefault" | "Unconfined" => {}
        "" => errs
            .push(FieldError::required(child(path, "type"), "type is required when seccompProfile is set")),
        other => errs.push(FieldError::not_supported(
            child(path, "type"),
            other,
            &["Localhost", "RuntimeDefault", "Unconfined"],
        )),
    }
    match (t, sp["localhostProfile"].as_str()) {
        ("Localhost", None) => errs.push(FieldError::required(
            child(path, "localhostProfile"),
            "must be set when seccomp type is Localhost",
        )),
        ("Localhost", Some(p)) => errs.extend(local_descending_path(&child(path, "localhostProfile"), p)),
        (_, Some(_)) => errs.push(FieldError::invalid(
            child(path, "localhostProfile"),
            show(sp),
            "can only be set when seccomp type is Localhost",
        )),
        _ => {}
    }
    errs
}

fn validate_pod_security_context(sc: &Value, path: &str) -> Vec<FieldError> {
    if !sc.is_object() {
        return Vec::new();
    }
    let mut errs = Vec::new();
    for f in ["fsGroup", "runAsUser", "runAsGroup"] {
        errs.extend(id_range(&child(path, f), &sc[f]));
    }
    for (i, g) in items(&sc["supplementalGroups"]) {
        errs.extend(id_range(&index(&child(path, "supplementalGroups"), i), g));
    }
    let mut names = Vec::new();
    for (i, sysctl) in items(&sc["sysctls"]) {
        let np = child(&index(&child(path, "sysctls"), i), "name");
        let name = s(sysctl, "name");
        let segment_ok = |seg: &str| {
            !seg.is_empty()
                && seg.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_')
                && seg.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
                && seg.ends_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
        };
        if name.is_empty() {
            errs.push(FieldError::required(np, ""));
        } else if name.len() > 253 || !name.split(['.', '/']).all(segment_ok) {
            errs.push(FieldError::invalid(
                np,
                name,
                "must have at most 253 characters and match regex ^([a-z0-9]([-_a-z0-9]*[a-z0-9])?[\\./])*[a-z0-9]([-_a-z0-9]*[a-z0-9])?$",
            ));
        } else if names.contains(&name) {
            errs.push(FieldError::duplicate(np, name));
        }
        names.push(name);
    }
    if let Some(p) = sc["fsGroupChangePolicy"].as_str()
        && !["Always", "OnRootMismatch"].contains(&p)
    {
        errs.push(FieldError::not_supported(
            child(path, "fsGroupChangePolicy"),
            p,
            &["Always", "OnRootMismatch"],
        ));
    }
    errs.extend(seccomp_profile(&sc["seccompProfile"], &child(path, "seccompProfile")));
    errs
}

fn validate_container_security_context(sc: &Value, path: &str) -> Vec<FieldError> {
    if !sc.is_object() {
        return Vec::new();
    }
    let mut errs = Vec::new();
    for f in ["runAsUser", "runAsGroup"] {
        errs.extend(id_range(&child(path, f), &sc[f]));
    }
    if let Some(pm) = sc["procMount"].as_str()
        && !["Default", "Unmasked"].contains(&pm)
    {
        errs.push(FieldError::not_supported(child(path, "procMount"), pm, &["Default", "Unmasked"]));
    }
    errs.extend(seccomp_profile(&sc["seccompProfile"], &child(path, "seccompProfile")));
    if sc["allowPrivilegeEscalation"].as_bool() == Some(false) {
        if sc["privileged"].as_bool() == Some(true) {
            errs.push(FieldError::invalid(
                path,
                show(sc),
                "cannot set `allowPrivilegeEscalation` to false and `privileged` to true",
            ));
        }
        if sc["capabilities"]["add"].as_array().into_iter().flatten().any(|c| c == "CAP_SYS_ADMIN") {
            errs.push(FieldError::invalid(
                path,
                show(sc),
                "cannot set `allowPrivilegeEscalation` to false and `capabilities.Add` CAP_SYS_ADMIN",
            ));
        }
    }
    errs
}

/// `validateContainerCommon`.
fn validate_container_common(
    c: &Value,
    volumes: &[(String, String)],
    path: &str,
    opts: Opts,
) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let p = |f: &str| child(path, f);
    let name = s(c, "name");
    if name.is_empty() {
        errs.push(FieldError::required(p("name"), ""));
    } else {
        errs.extend(dns1123_label(&p("name"), name));
    }
    let image = s(c, "image");
    if image.is_empty() {
        errs.push(FieldError::required(p("image"), ""));
    } else if opts.is_pod && image.trim() != image {
        errs.push(FieldError::invalid(p("image"), image, "must not have leading or trailing whitespace"));
    }
    match s(c, "terminationMessagePolicy") {
        "File" | "FallbackToLogsOnError" => {}
        "" => errs.push(FieldError::required(p("terminationMessagePolicy"), "")),
        other => errs.push(FieldError::not_supported(
            p("terminationMessagePolicy"),
            other,
            &["File", "FallbackToLogsOnError"],
        )),
    }
    errs.extend(validate_ports(&c["ports"], &p("ports")));
    errs.extend(validate_env(&c["env"], &p("env")));
    errs.extend(validate_env_from(&c["envFrom"], &p("envFrom")));
    errs.extend(validate_mounts(c, volumes, path));
    match s(c, "imagePullPolicy") {
        "Always" | "IfNotPresent" | "Never" => {}
        "" => errs.push(FieldError::required(p("imagePullPolicy"), "")),
        other => errs.push(FieldError::not_supported(
            p("imagePullPolicy"),
            other,
            &["Always", "IfNotPresent", "Never"],
        )),
    }
    errs.extend(validate_resource_requirements(&c["resources"], &p("resources")));
    errs.extend(validate_container_security_context(&c["securityContext"], &p("securityContext")));
    errs
}

/// Host ports of the given containers that collide (same protocol, host IP and port).
fn host_port_conflicts(containers: &[(usize, &Value)], path: &str) -> Vec<FieldError> {
    let mut seen: Vec<String> = Vec::new();
    let mut errs = Vec::new();
    for (i, c) in containers {
        for (j, port) in items(&c["ports"]) {
            let hp = port["hostPort"].as_i64().unwrap_or(0);
            if hp == 0 {
                continue;
            }
            let k = format!("{}/{}/{hp}", s(port, "protocol"), s(port, "hostIP"));
            if seen.contains(&k) {
                errs.push(FieldError::duplicate(
                    child(&index(&child(&index(path, *i), "ports"), j), "hostPort"),
                    &k,
                ));
            } else {
                seen.push(k);
            }
        }
    }
    errs
}

fn validate_containers(
    spec: &Value,
    volumes: &[(String, String)],
    grace: Option<i64>,
    path: &str,
    opts: Opts,
) -> Vec<FieldError> {
    let list = &spec["containers"];
    if list.as_array().is_none_or(Vec::is_empty) {
        return vec![FieldError::required(path, "")];
    }
    let mut errs = Vec::new();
    let mut names: Vec<&str> = Vec::new();
    for (i, c) in items(list) {
        let cp = index(path, i);
        errs.extend(validate_container_common(c, volumes, &cp, opts));
        let name = s(c, "name");
        if names.contains(&name) {
            errs.push(FieldError::duplicate(child(&cp, "name"), name));
        } else {
            names.push(name);
        }
        if c["lifecycle"].is_object() {
            errs.extend(validate_lifecycle(&c["lifecycle"], grace, &child(&cp, "lifecycle")));
        }
        for probe in ["livenessProbe", "readinessProbe", "startupProbe"] {
            errs.extend(validate_probe(&c[probe], grace, &child(&cp, probe), probe));
        }
        if !c["restartPolicy"].is_null() {
            errs.push(FieldError::forbidden(
                child(&cp, "restartPolicy"),
                "may not be set for non-init containers",
            ));
        }
    }
    let all: Vec<(usize, &Value)> = items(list).collect();
    errs.extend(host_port_conflicts(&all, path));
    errs
}

fn validate_init_containers(
    spec: &Value,
    volumes: &[(String, String)],
    grace: Option<i64>,
    path: &str,
    opts: Opts,
) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let mut names: Vec<&str> = items(&spec["containers"]).map(|(_, c)| s(c, "name")).collect();
    for (i, c) in items(&spec["initContainers"]) {
        let cp = index(path, i);
        errs.extend(validate_container_common(c, volumes, &cp, opts));
        let restart_always = match c["restartPolicy"].as_str() {
            None => false,
            Some("Always") => true,
            Some(other) => {
                errs.push(FieldError::not_supported(child(&cp, "restartPolicy"), other, &["Always"]));
                false
            }
        };
        let name = s(c, "name");
        if names.contains(&name) {
            errs.push(FieldError::duplicate(child(&cp, "name"), name));
        } else if !name.is_empty() {
            names.push(name);
        }
        errs.extend(host_port_conflicts(&[(i, c)], path));
        if restart_always {
            if c["lifecycle"].is_object() {
                errs.extend(validate_lifecycle(&c["lifecycle"], grace, &child(&cp, "lifecycle")));
            }
            for probe in ["livenessProbe", "readinessProbe", "startupProbe"] {
                errs.extend(validate_probe(&c[probe], grace, &child(&cp, probe), probe));
            }
        } else {
            for f in ["lifecycle", "livenessProbe", "readinessProbe", "startupProbe"] {
                if !c[f].is_null() {
                    errs.push(FieldError::forbidden(
                        child(&cp, f),
                        "may not be set for init containers without restartPolicy=Always",
                    ));
                }
            }
        }
    }
    errs
}

fn validate_ephemeral_containers(
    spec: &Value,
    volumes: &[(String, String)],
    path: &str,
    opts: Opts,
) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let others: Vec<&str> =
        items(&spec["containers"]).chain(items(&spec["initContainers"])).map(|(_, c)| s(c, "name")).collect();
    let mut all = others.clone();
    for (i, c) in items(&spec["ephemeralContainers"]) {
        let cp = index(path, i);
        errs.extend(validate_container_common(c, volumes, &cp, opts));
        let name = s(c, "name");
        if all.contains(&name) {
            errs.push(FieldError::duplicate(child(&cp, "name"), name));
        } else {
            all.push(name);
        }
        let target = s(c, "targetContainerName");
        if !target.is_empty() && !others.contains(&target) {
            errs.push(FieldError::not_found(child(&cp, "targetContainerName"), target));
        }
        for f in ["ports", "resources", "livenessProbe", "readinessProbe", "startupProbe", "lifecycle"] {
            let set = match &c[f] {
                Value::Null => false,
                Value::Object(o) => !o.is_empty(),
                Value::Array(a) => !a.is_empty(),
                _ => true,
            };
            if set {
                errs.push(FieldError::forbidden(child(&cp, f), "cannot be set for an Ephemeral Container"));
            }
        }
    }
    errs
}

fn node_selector_requirement(r: &Value, path: &str, check_values: bool) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let n = r["values"].as_array().map(Vec::len).unwrap_or(0);
    match s(r, "operator") {
        "In" | "NotIn" => {
            if n == 0 {
                errs.push(FieldError::required(
                    child(path, "values"),
                    "must be specified when `operator` is 'In' or 'NotIn'",
                ));
            }
        }
        "Exists" | "DoesNotExist" => {
            if n > 0 {
                errs.push(FieldError::forbidden(
                    child(path, "values"),
                    "may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
                ));
            }
        }
        "Gt" | "Lt" => {
            if n != 1 {
                errs.push(FieldError::required(
                    child(path, "values"),
                    "must be specified single value when `operator` is 'Lt' or 'Gt'",
                ));
            }
        }
        op => errs.push(FieldError::invalid(child(path, "operator"), op, "not a valid selector operator")),
    }
    errs.extend(qualified_name(&child(path, "key"), s(r, "key")));
    if check_values {
        for (j, value) in items(&r["values"]) {
            errs.extend(v::label_value(
                &index(&child(path, "values"), j),
                value.as_str().unwrap_or_default(),
            ));
        }
    }
    errs
}

fn node_selector_term(t: &Value, path: &str, check_values: bool) -> Vec<FieldError> {
    let mut errs = Vec::new();
    for (j, r) in items(&t["matchExpressions"]) {
        errs.extend(node_selector_requirement(r, &index(&child(path, "matchExpressions"), j), check_values));
    }
    for (j, r) in items(&t["matchFields"]) {
        let rp = index(&child(path, "matchFields"), j);
        match s(r, "operator") {
            "In" | "NotIn" => {
                if r["values"].as_array().map(Vec::len) != Some(1) {
                    errs.push(FieldError::required(
                        child(&rp, "values"),
                        "must be only one value when `operator` is 'In' or 'NotIn' for node field selector",
                    ));
                }
            }
            op => errs.push(FieldError::invalid(child(&rp, "operator"), op, "not a valid selector operator")),
        }
        if s(r, "key") != "metadata.name" {
            errs.push(FieldError::invalid(child(&rp, "key"), s(r, "key"), "not a valid field selector key"));
        } else {
            for (k, value) in items(&r["values"]) {
                errs.extend(dns1123_subdomain(
                    &index(&child(&rp, "values"), k),
                    value.as_str().unwrap_or_default(),
                ));
            }
        }
    }
    errs
}

/// `ValidateNodeSelector` (a required node selector: at least one term).
pub fn node_selector(sel: &Value, path: &str) -> Vec<FieldError> {
    let terms = child(path, "nodeSelectorTerms");
    if sel["nodeSelectorTerms"].as_array().is_none_or(Vec::is_empty) {
        return vec![FieldError::required(terms, "must have at least one node selector term")];
    }
    items(&sel["nodeSelectorTerms"])
        .flat_map(|(i, t)| node_selector_term(t, &index(&terms, i), true))
        .collect()
}

fn pod_affinity_term(t: &Value, path: &str) -> Vec<FieldError> {
    let mut errs = label_selector(&child(path, "labelSelector"), &t["labelSelector"]);
    errs.extend(label_selector(&child(path, "namespaceSelector"), &t["namespaceSelector"]));
    for (_, ns) in items(&t["namespaces"]) {
        errs.extend(dns1123_label(&child(path, "namespace"), ns.as_str().unwrap_or_default()));
    }
    let tk = s(t, "topologyKey");
    if tk.is_empty() {
        errs.push(FieldError::required(child(path, "topologyKey"), "can not be empty"));
    }
    errs.extend(qualified_name(&child(path, "topologyKey"), tk));
    errs
}

fn weight(w: &Value, path: &str) -> Vec<FieldError> {
    let n = w.as_i64().unwrap_or(0);
    if (1..=100).contains(&n) {
        Vec::new()
    } else {
        vec![FieldError::invalid(path, n, "must be in the range 1-100")]
    }
}

fn validate_affinity(a: &Value, path: &str) -> Vec<FieldError> {
    if !a.is_object() {
        return Vec::new();
    }
    let mut errs = Vec::new();
    let na = &a["nodeAffinity"];
    if na.is_object() {
        let np = child(path, "nodeAffinity");
        let req = &na["requiredDuringSchedulingIgnoredDuringExecution"];
        if req.is_object() {
            errs.extend(node_selector(req, &child(&np, "requiredDuringSchedulingIgnoredDuringExecution")));
        }
        let pp = child(&np, "preferredDuringSchedulingIgnoredDuringExecution");
        for (i, t) in items(&na["preferredDuringSchedulingIgnoredDuringExecution"]) {
            errs.extend(weight(&t["weight"], &child(&index(&pp, i), "weight")));
            errs.extend(node_selector_term(&t["preference"], &child(&index(&pp, i), "preference"), false));
        }
    }
    for kind in ["podAffinity", "podAntiAffinity"] {
        let pa = &a[kind];
        if !pa.is_object() {
            continue;
        }
        let kp = child(path, kind);
        let rp = child(&kp, "requiredDuringSchedulingIgnoredDuringExecution");
        for (i, t) in items(&pa["requiredDuringSchedulingIgnoredDuringExecution"]) {
            errs.extend(pod_affinity_term(t, &index(&rp, i)));
        }
        let pp = child(&kp, "preferredDuringSchedulingIgnoredDuringExecution");
        for (i, t) in items(&pa["preferredDuringSchedulingIgnoredDuringExecution"]) {
            errs.extend(weight(&t["weight"], &child(&index(&pp, i), "weight")));
            errs.extend(pod_affinity_term(&t["podAffinityTerm"], &child(&index(&pp, i), "podAffinityTerm")));
        }
    }
    errs
}

fn validate_dns_config(c: &Value, policy: &str, path: &str) -> Vec<FieldError> {
    if policy == "None" {
        if !c.is_object() {
            return vec![FieldError::required(path, "must provide `dnsConfig` when `dnsPolicy` is None")];
        }
        if c["nameservers"].as_array().is_none_or(Vec::is_empty) {
            return vec![FieldError::required(
                child(path, "nameservers"),
                "must provide at least one DNS nameserver when `dnsPolicy` is None",
            )];
        }
    }
    if !c.is_object() {
        return Vec::new();
    }
    let mut errs = Vec::new();
    let ns = c["nameservers"].as_array().map(Vec::len).unwrap_or(0);
    if ns > 3 {
        errs.push(FieldError::invalid(
            child(path, "nameservers"),
            show(&c["nameservers"]),
            "must not have more than 3 nameservers",
        ));
    }
    for (i, n) in items(&c["nameservers"]) {
        errs.extend(v::ip(&index(&child(path, "nameservers"), i), n.as_str().unwrap_or_default()));
    }
    let searches: Vec<&str> = items(&c["searches"]).map(|(_, s)| s.as_str().unwrap_or_default()).collect();
    if searches.len() > 32 {
        errs.push(FieldError::invalid(
            child(path, "searches"),
            show(&c["searches"]),
            "must not have more than 32 search paths",
        ));
    }
    if searches.join(" ").len() > 2048 {
        errs.push(FieldError::invalid(
            child(path, "searches"),
            show(&c["searches"]),
            "must not have more than 2048 characters (including spaces) in the search list",
        ));
    }
    for (i, search) in searches.iter().enumerate() {
        // (RelaxedDNSSearchValidation, which allows `_` and `.`, is off by default in 1.32.)
        let sp = index(&child(path, "searches"), i);
        errs.extend(dns1123_subdomain(&sp, search.strip_suffix('.').unwrap_or(search)));
    }
    for (i, o) in items(&c["options"]) {
        if s(o, "name").is_empty() {
            errs.push(FieldError::required(index(&child(path, "options"), i), "must not be empty"));
        }
    }
    errs
}

fn validate_topology_spread(list: &Value, path: &str) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let all: Vec<&Value> = list.as_array().map(|a| a.iter().collect()).unwrap_or_default();
    for (i, c) in all.iter().enumerate() {
        let cp = index(path, i);
        let skew = c["maxSkew"].as_i64().unwrap_or(0);
        if skew <= 0 {
            errs.push(FieldError::invalid(child(&cp, "maxSkew"), skew, "must be greater than zero"));
        }
        if s(c, "topologyKey").is_empty() {
            errs.push(FieldError::required(child(&cp, "topologyKey"), "can not be empty"));
        }
        let action = s(c, "whenUnsatisfiable");
        if !["DoNotSchedule", "ScheduleAnyway"].contains(&action) {
            errs.push(FieldError::not_supported(
                child(&cp, "whenUnsatisfiable"),
                action,
                &["DoNotSchedule", "ScheduleAnyway"],
            ));
        }
        if all[i + 1..]
            .iter()
            .any(|o| s(o, "topologyKey") == s(c, "topologyKey") && s(o, "whenUnsatisfiable") == action)
        {
            errs.push(FieldError::duplicate(
                child(&cp, "{topologyKey, whenUnsatisfiable}"),
                format!("{{{}, {action}}}", s(c, "topologyKey")),
            ));
        }
        if let Some(md) = c["minDomains"].as_i64() {
            if md <= 0 {
                errs.push(FieldError::invalid(child(&cp, "minDomains"), md, "must be greater than zero"));
            }
            if action != "DoNotSchedule" {
                errs.push(FieldError::invalid(
                    child(&cp, "minDomains"),
                    md,
                    format!("can only use minDomains if whenUnsatisfiable=DoNotSchedule, not {action}"),
                ));
            }
        }
        for f in ["nodeAffinityPolicy", "nodeTaintsPolicy"] {
            if let Some(p) = c[f].as_str()
                && !["Honor", "Ignore"].contains(&p)
            {
                errs.push(FieldError::not_supported(child(&cp, f), p, &["Honor", "Ignore"]));
            }
        }
        errs.extend(label_selector(&child(&cp, "labelSelector"), &c["labelSelector"]));
    }
    errs
}

/// `ValidateTolerations`.
pub fn validate_tolerations(list: &Value, path: &str) -> Vec<FieldError> {
    let mut errs = Vec::new();
    for (i, t) in items(list) {
        let tp = index(path, i);
        let k = s(t, "key");
        let op = s(t, "operator");
        let effect = s(t, "effect");
        if !k.is_empty() {
            errs.extend(qualified_name(&child(&tp, "key"), k));
        }
        if k.is_empty() && op != "Exists" {
            errs.push(FieldError::invalid(
                child(&tp, "operator"),
                op,
                "operator must be Exists when `key` is empty, which means \"match all values and all keys\"",
            ));
        }
        if !t["tolerationSeconds"].is_null() && effect != "NoExecute" {
            errs.push(FieldError::invalid(
                child(&tp, "effect"),
                effect,
                "effect must be 'NoExecute' when `tolerationSeconds` is set",
            ));
        }
        match op {
            "Equal" | "" => {
                let value_errs = v::label_value("", s(t, "value"));
                if !value_errs.is_empty() {
                    let msgs: Vec<String> = value_errs.into_iter().map(|e| e.detail).collect();
                    errs.push(FieldError::invalid(child(&tp, "operator"), s(t, "value"), msgs.join(";")));
                }
            }
            "Exists" => {
                if !s(t, "value").is_empty() {
                    errs.push(FieldError::invalid(
                        child(&tp, "operator"),
                        s(t, "value"),
                        "value must be empty when `operator` is 'Exists'",
                    ));
                }
            }
            other => {
                errs.push(FieldError::not_supported(child(&tp, "operator"), other, &["Equal", "Exists"]))
            }
        }
        if !effect.is_empty() {
            errs.extend(taint_effect(&child(&tp, "effect"), effect));
        }
    }
    errs
}

/// `validateTaintEffect` for a non-empty effect.
pub fn taint_effect(field: &str, effect: &str) -> Vec<FieldError> {
    const EFFECTS: &[&str] = &["NoSchedule", "PreferNoSchedule", "NoExecute"];
    if EFFECTS.contains(&effect) {
        Vec::new()
    } else {
        vec![FieldError::not_supported(field, effect, EFFECTS)]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod_spec(containers: Value) -> Value {
        let mut spec = json!({ "containers": containers });
        default_pod_spec(&mut spec);
        spec
    }

    #[test]
    fn image_pull_policy_follows_the_tag() {
        for (image, want) in [
            ("nginx", "Always"),
            ("nginx:latest", "Always"),
            ("nginx:1.27", "IfNotPresent"),
            ("localhost:5000/app", "Always"),
            ("localhost:5000/app:v1", "IfNotPresent"),
            ("nginx@sha256:0123", "IfNotPresent"),
        ] {
            let spec = pod_spec(json!([{ "name": "c", "image": image }]));
            assert_eq!(spec["containers"][0]["imagePullPolicy"], want, "{image}");
        }
    }

    #[test]
    fn spec_and_container_defaults() {
        let spec = pod_spec(json!([{
            "name": "c", "image": "busybox:1",
            "ports": [{ "containerPort": 80 }],
            "livenessProbe": { "httpGet": { "port": 80 } },
            "resources": { "limits": { "cpu": "0.5", "memory": "1024Mi" } },
        }]));
        assert_eq!(spec["restartPolicy"], "Always");
        assert_eq!(spec["dnsPolicy"], "ClusterFirst");
        assert_eq!(spec["schedulerName"], "default-scheduler");
        assert_eq!(spec["terminationGracePeriodSeconds"], 30);
        assert_eq!(spec["securityContext"], json!({}));
        let c = &spec["containers"][0];
        assert_eq!(c["terminationMessagePath"], "/dev/termination-log");
        assert_eq!(c["terminationMessagePolicy"], "File");
        assert_eq!(c["ports"][0]["protocol"], "TCP");
        assert_eq!(
            c["livenessProbe"],
            json!({ "httpGet": { "port": 80, "path": "/", "scheme": "HTTP" }, "timeoutSeconds": 1, "periodSeconds": 10, "successThreshold": 1, "failureThreshold": 3 })
        );
        assert_eq!(c["resources"]["limits"], json!({ "cpu": "500m", "memory": "1Gi" }));
    }

    #[test]
    fn volume_defaults() {
        let mut spec = json!({ "containers": [], "volumes": [
            { "name": "a" },
            { "name": "b", "secret": { "secretName": "s" } },
            { "name": "c", "configMap": { "name": "m" } },
            { "name": "d", "hostPath": { "path": "/x" } },
        ]});
        default_pod_spec(&mut spec);
        assert_eq!(spec["volumes"][0]["emptyDir"], json!({}));
        assert_eq!(spec["volumes"][1]["secret"]["defaultMode"], 420);
        assert_eq!(spec["volumes"][2]["configMap"]["defaultMode"], 420);
        assert_eq!(spec["volumes"][3]["hostPath"]["type"], "");
    }

    #[test]
    fn service_account_alias() {
        let mut spec = json!({ "containers": [], "serviceAccount": "robot" });
        default_pod_spec(&mut spec);
        assert_eq!(spec["serviceAccountName"], "robot");
        assert_eq!(spec["serviceAccount"], "robot");
    }

    #[test]
    fn pod_only_defaults_and_qos() {
        let mut spec = pod_spec(
            json!([{ "name": "c", "image": "x", "resources": { "limits": { "cpu": "1", "memory": "1Gi" } } }]),
        );
        default_pod_only(&mut spec);
        assert_eq!(spec["enableServiceLinks"], true);
        assert_eq!(spec["containers"][0]["resources"]["requests"], json!({ "cpu": "1", "memory": "1Gi" }));
        assert_eq!(qos_class(&spec), "Guaranteed");
        let none = pod_spec(json!([{ "name": "c", "image": "x" }]));
        assert_eq!(qos_class(&none), "BestEffort");
        let some =
            pod_spec(json!([{ "name": "c", "image": "x", "resources": { "requests": { "cpu": "100m" } } }]));
        assert_eq!(qos_class(&some), "Burstable");
    }

    fn errors(spec: &Value) -> Vec<String> {
        validate_pod_spec(spec, "spec", None, Opts { is_pod: true }).iter().map(FieldError::to_text).collect()
    }

    #[test]
    fn containers_are_required_and_checked() {
        assert_eq!(errors(&pod_spec(json!([]))), vec!["spec.containers: Required value"]);
        let spec = pod_spec(json!([
            { "name": "Bad_Name", "image": "" },
            { "name": "ok", "image": "x", "ports": [{ "containerPort": 70000, "protocol": "FOO", "name": "web" }, { "containerPort": 81, "name": "web" }] },
            { "name": "ok", "image": "x", "env": [{ "name": "A=B" }], "volumeMounts": [{ "name": "missing", "mountPath": "/m" }] },
        ]));
        let errs = errors(&spec);
        let has = |s: &str| errs.iter().any(|e| e.starts_with(s));
        assert!(
            has("spec.containers[0].name: Invalid value: \"Bad_Name\": a lowercase RFC 1123 label"),
            "{errs:?}"
        );
        assert!(has("spec.containers[0].image: Required value"), "{errs:?}");
        assert!(has(
            "spec.containers[1].ports[0].containerPort: Invalid value: 70000: must be between 1 and 65535, inclusive"
        ));
        assert!(has(
            "spec.containers[1].ports[0].protocol: Unsupported value: \"FOO\": supported values: \"SCTP\", \"TCP\", \"UDP\""
        ));
        assert!(has("spec.containers[1].ports[1].name: Duplicate value: \"web\""));
        assert!(has("spec.containers[2].name: Duplicate value: \"ok\""));
        assert!(has("spec.containers[2].env[0].name: Invalid value: \"A=B\""));
        assert!(has("spec.containers[2].volumeMounts[0].name: Not found: \"missing\""));
    }

    #[test]
    fn requests_may_not_exceed_limits() {
        let spec = pod_spec(
            json!([{ "name": "c", "image": "x", "resources": { "limits": { "cpu": "1" }, "requests": { "cpu": "1500m" } } }]),
        );
        assert_eq!(
            errors(&spec),
            vec![
                "spec.containers[0].resources.requests: Invalid value: \"1500m\": must be less than or equal to cpu limit of 1"
            ]
        );
        let bad =
            pod_spec(json!([{ "name": "c", "image": "x", "resources": { "limits": { "cpu": "lots" } } }]));
        assert!(errors(&bad)[0].starts_with(
            "spec.containers[0].resources.limits[cpu]: Invalid value: \"lots\": quantities must match"
        ));
    }

    #[test]
    fn spec_level_rules() {
        let mut spec = pod_spec(json!([{ "name": "c", "image": "x" }]));
        spec["restartPolicy"] = json!("Sometimes");
        spec["volumes"] = json!([{ "name": "v", "emptyDir": {}, "hostPath": { "path": "/" } }, { "name": "w", "emptyDir": {} }, { "name": "w" }]);
        spec["tolerations"] = json!([{ "operator": "Equal", "value": "x" }]);
        spec["activeDeadlineSeconds"] = json!(0);
        let errs = errors(&spec);
        let has = |s: &str| errs.iter().any(|e| e.starts_with(s));
        assert!(has("spec.restartPolicy: Unsupported value: \"Sometimes\""), "{errs:?}");
        assert!(has("spec.volumes[0].hostPath: Forbidden: may not specify more than 1 volume type"));
        assert!(has("spec.volumes[2]: Required value: must specify a volume type"));
        assert!(has("spec.volumes[2].name: Duplicate value: \"w\""));
        assert!(has(
            "spec.tolerations[0].operator: Invalid value: \"Equal\": operator must be Exists when `key` is empty"
        ));
        assert!(has(
            "spec.activeDeadlineSeconds: Invalid value: 0: must be between 1 and 2147483647, inclusive"
        ));
    }

    #[test]
    fn probes_need_one_handler() {
        let spec = pod_spec(json!([{ "name": "c", "image": "x",
            "livenessProbe": { "successThreshold": 2, "exec": { "command": ["true"] }, "tcpSocket": { "port": 1 } },
            "readinessProbe": { "periodSeconds": 3 } }]));
        let errs = errors(&spec);
        assert!(errs.contains(&"spec.containers[0].livenessProbe.tcpSocket: Forbidden: may not specify more than 1 handler type".to_string()), "{errs:?}");
        assert!(errs.contains(
            &"spec.containers[0].livenessProbe.successThreshold: Invalid value: 2: must be 1".to_string()
        ));
        assert!(errs.contains(
            &"spec.containers[0].readinessProbe: Required value: must specify a handler type".to_string()
        ));
    }
}
