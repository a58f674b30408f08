//! A fast subset of upstream's conformance suite (`../shared/conformance/e2e.test`, v1.28.4)
//! on a two-node cluster of ours in network namespaces ([`NodeCluster`]): API machinery,
//! apps and node basics. The whole suite is `hack/conformance.sh`; this is the part CI runs.
//!
//! `CONFORMANCE_FOCUS=<regex>` runs those conformance specs instead of the subset (a tool
//! for fixing one spec in an isolated cluster: `CONFORMANCE_FOCUS='should mount projected
//! service account token' cargo nextest run --release --workspace -E 'binary(conformance)'`).
//!
//! `CONFORMANCE_HOLD=1` keeps the cluster after the run (at most an hour) for poking at it:
//! the test prints the hub namespace and kubeconfig, and goes on once the file it names is
//! removed.
//!
//! Needs root, containerd and the conformance directory (`CONFORMANCE_DIR`, default
//! `../shared/conformance` beside the repository, else `/work/shared/conformance`).

use std::path::PathBuf;
use std::process::Command;

use e2e::nodes::{ClusterOptions, NodeCluster};

/// The subset: specs that need neither cluster DNS nor features of open issues, chosen to
/// cover each area; each passes against our cluster (a regression here is a bug of ours).
const SUBSET: &[&str] = &[
    // api-machinery
    "[sig-api-machinery] Namespaces [Serial] should ensure that all pods are removed when a namespace is deleted [Conformance]",
    "[sig-api-machinery] Watchers should be able to restart watching from the last resource version observed by the previous watch [Conformance]",
    "[sig-api-machinery] ResourceQuota should create a ResourceQuota and capture the life of a configMap. [Conformance]",
    "[sig-api-machinery] Garbage collector should delete RS created by deployment when not orphaning [Conformance]",
    "[sig-api-machinery] server version should find the server version [Conformance]",
    "[sig-api-machinery] Discovery should validate PreferredVersion for each APIGroup [Conformance]",
    "[sig-api-machinery] FieldValidation should detect unknown and duplicate fields of a typed object [Conformance]",
    "[sig-api-machinery] ResourceQuota should create a ResourceQuota and capture the life of a replica set. [Conformance]",
    "[sig-api-machinery] Servers with support for Table transformation should return a 406 for a backend which does not implement metadata [Conformance]",
    // api-machinery: CustomResourceDefinitions
    "[sig-api-machinery] CustomResourceDefinition resources [Privileged:ClusterAdmin] Simple CustomResourceDefinition listing custom resource definition objects works  [Conformance]",
    "[sig-api-machinery] CustomResourcePublishOpenAPI [Privileged:ClusterAdmin] works for CRD with validation schema [Conformance]",
    "[sig-api-machinery] FieldValidation should create/apply an invalid CR with extra properties for CRD with validation schema [Conformance]",
    "[sig-api-machinery] CustomResourceConversionWebhook [Privileged:ClusterAdmin] should be able to convert a non homogeneous list of CRs [Conformance]",
    "[sig-api-machinery] CustomResourceConversionWebhook [Privileged:ClusterAdmin] should be able to convert from CR v1 to CR v2 [Conformance]",
    // api-machinery: APIServices (apiregistration.k8s.io) in discovery, the aggregator's proxy
    "[sig-api-machinery] Discovery should locate the groupVersion and a resource within each APIGroup [Conformance]",
    "[sig-api-machinery] Aggregator Should be able to support the 1.17 Sample API Server using the current Aggregator [Conformance]",
    // auth (the OIDC discovery spec needs cluster DNS: the full run covers it)
    "[sig-auth] SubjectReview should support SubjectReview API operations [Conformance]",
    "[sig-auth] ServiceAccounts should mount projected service account token [Conformance]",
    // apps
    "[sig-apps] Deployment RollingUpdateDeployment should delete old pods and create new ones [Conformance]",
    "[sig-apps] Daemon set [Serial] should update pod when spec was updated and update strategy is RollingUpdate [Conformance]",
    "[sig-apps] ReplicaSet should serve a basic image on each replica with a public image  [Conformance]",
    "[sig-apps] Job should run a job to completion when tasks sometimes fail and are locally restarted [Conformance]",
    "[sig-apps] StatefulSet Basic StatefulSet functionality [StatefulSetBasic] should list, patch and delete a collection of StatefulSets [Conformance]",
    "[sig-apps] StatefulSet Basic StatefulSet functionality [StatefulSetBasic] Should recreate evicted statefulset [Conformance]",
    // node
    "[sig-node] Pods should be submitted and removed [NodeConformance] [Conformance]",
    "[sig-node] Variable Expansion should allow substituting values in a volume subpath [Conformance]",
    "[sig-node] Container Runtime blackbox test on terminated container should report termination message from file when pod succeeds and TerminationMessagePolicy FallbackToLogsOnError is set [NodeConformance] [Conformance]",
    "[sig-node] Probing container should be restarted with a exec \"cat /tmp/health\" liveness probe [NodeConformance] [Conformance]",
    "[sig-node] Container Lifecycle Hook when create a pod with lifecycle hook should execute poststart http hook properly [NodeConformance] [Conformance]",
    "[sig-node] Container Runtime blackbox test on terminated container should report termination message from log output if TerminationMessagePolicy FallbackToLogsOnError is set [NodeConformance] [Conformance]",
    "[sig-node] Container Runtime blackbox test on terminated container should report termination message if TerminationMessagePath is set as non-root user and at a non-default path [NodeConformance] [Conformance]",
    "[sig-node] InitContainer [NodeConformance] should not start app containers and fail the pod if init containers fail on a RestartNever pod [Conformance]",
    "[sig-node] Pods should support retrieving logs from the container over websockets [NodeConformance] [Conformance]",
    "[sig-node] Pods should allow activeDeadlineSeconds to be updated [NodeConformance] [Conformance]",
    "[sig-node] Ephemeral Containers [NodeConformance] will start an ephemeral container in an existing pod [Conformance]",
    "[sig-node] Ephemeral Containers [NodeConformance] should update the ephemeral containers in an existing pod [Conformance]",
    // storage
    "[sig-storage] ConfigMap should be consumable from pods in volume [NodeConformance] [Conformance]",
    "[sig-storage] Secrets should be consumable from pods in volume [NodeConformance] [Conformance]",
    "[sig-storage] Downward API volume should provide node allocatable (cpu) as default cpu limit if the limit is not set [NodeConformance] [Conformance]",
    "[sig-storage] Secrets should be consumable from pods in volume as non-root with defaultMode and fsGroup set [LinuxOnly] [NodeConformance] [Conformance]",
    // sig-scheduling: LimitRange defaults, and a grace period on a kind without graceful deletion
    "[sig-scheduling] LimitRange should create a LimitRange with defaults and ensure pod has those defaults applied. [Conformance]",
    "[sig-cli] Kubectl logs logs should be able to retrieve and filter logs  [Conformance]",
    // network without DNS: pod-to-pod across the two nodes
    "[sig-network] Networking Granular Checks: Pods should function for intra-pod communication: http [NodeConformance] [Conformance]",
];

fn conformance_dir() -> PathBuf {
    if let Ok(d) = std::env::var("CONFORMANCE_DIR") {
        return PathBuf::from(d);
    }
    let beside = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/conformance");
    if beside.join("e2e.test").exists() {
        return beside;
    }
    PathBuf::from("/work/shared/conformance")
}

/// Go's RE2 and Python's `re.escape` agree on what needs a backslash here.
fn escape(name: &str) -> String {
    let mut out = String::new();
    for ch in name.chars() {
        if "\\.+*?()|[]{}^$".contains(ch) {
            out.push('\\');
        }
        out.push(ch);
    }
    out
}

#[test]
fn conformance_subset_passes() {
    let dir = conformance_dir();
    let e2e_test = dir.join("e2e.test");
    assert!(
        e2e_test.exists(),
        "no conformance suite at {} (set CONFORMANCE_DIR to the directory with e2e.test)",
        dir.display()
    );
    let (focus, expected) = match std::env::var("CONFORMANCE_FOCUS") {
        // Only conformance specs, wherever the focus matches in the name.
        Ok(f) => (format!("(?:{f}).*\\[Conformance\\]|\\[Conformance\\].*(?:{f})"), None),
        Err(_) => (SUBSET.iter().map(|n| escape(n)).collect::<Vec<_>>().join("|"), Some(SUBSET.len())),
    };
    let cluster = NodeCluster::start(ClusterOptions {
        nodes: 2,
        service_accounts: true,
        kube_proxy: Some("nftables".into()),
        ..Default::default()
    });
    for node in &cluster.nodes {
        let out =
            Command::new(dir.join("import.sh")).arg(&node.containerd.socket).output().expect("import.sh");
        assert!(
            out.status.success(),
            "importing the suite's images into {}: {}{}",
            node.name,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let report = tempfile::tempdir().expect("tempdir");
    // The suite runs in the hub (this thread's namespace), beside the API server.
    let out = Command::new(&e2e_test)
        .arg("--provider=skeleton")
        .arg(format!("--kubeconfig={}", cluster.api.kubeconfig.display()))
        .arg(format!("--ginkgo.focus={focus}"))
        .args(["--ginkgo.no-color", "--ginkgo.timeout=30m", "--disable-log-dump"])
        .arg(format!("--report-dir={}", report.path().display()))
        .env("KUBECONFIG", &cluster.api.kubeconfig)
        .output()
        .expect("running e2e.test");
    let log = String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    if std::env::var_os("CONFORMANCE_HOLD").is_some() {
        let flag = report.path().join("hold");
        std::fs::write(&flag, b"").expect("hold file");
        eprintln!(
            "holding the cluster: ip netns exec {} kubectl --kubeconfig {} ...; rm {} to go on",
            cluster.net.hub(),
            cluster.api.kubeconfig.display(),
            flag.display()
        );
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(3600);
        while flag.exists() && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_secs(1));
        }
    }
    let tail: String =
        log.lines().rev().take(120).collect::<Vec<_>>().into_iter().rev().collect::<Vec<_>>().join("\n");
    assert!(out.status.success(), "conformance specs failed:\n{tail}");
    let ran = log
        .lines()
        .find_map(|l| {
            l.trim().strip_prefix("Ran ").and_then(|r| r.split_whitespace().next()?.parse::<usize>().ok())
        })
        .unwrap_or_else(|| panic!("no ginkgo summary in the output:\n{tail}"));
    eprintln!("conformance: ran {ran} specs, all passed");
    if let Some(n) = expected {
        assert_eq!(
            ran, n,
            "the subset names {n} specs but the suite ran {ran}: a name no longer matches\n{tail}"
        );
    }
    assert!(ran > 0, "the focus matched no spec:\n{tail}");
}
