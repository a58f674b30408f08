//! Jobs, CronJobs, TTL-after-finished, PodDisruptionBudgets with `pods/eviction` and
//! `kubectl drain`, and ReplicationControllers: our kube-controller-manager against our
//! etcd, kube-apiserver and kube-scheduler, driven with real kubectl. Kubelets are played
//! by [`FakeKubelet`]; job pods run to completion as their `fake-kubelet.k8s-rs.io/*`
//! annotations say (exit code, run time). One Job also runs on a real kubelet in
//! containerd (`indexed_job_on_a_real_kubelet`).

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use e2e::apiserver::{ADMIN_TOKEN, KubeApiserver};
use e2e::component::{KubeControllerManager, KubeScheduler};
use e2e::fake_cluster::FakeCluster;
use e2e::fake_kubelet::{EXIT_CODE, EXIT_CODES_BY_INDEX, RUN_SECONDS};
use e2e::{Etcd, EtcdOptions, wait_for};

const WAIT: Duration = Duration::from_secs(60);
const POLL: Duration = Duration::from_millis(200);

/// The controller-manager's flags in these tests: no leader election (a restarted one
/// takes over at once) and upstream's other defaults.
const KCM_ARGS: &[&str] = &["--leader-elect=false"];

struct Cluster(FakeCluster);

impl std::ops::Deref for Cluster {
    type Target = FakeCluster;
    fn deref(&self) -> &FakeCluster {
        &self.0
    }
}

impl std::ops::DerefMut for Cluster {
    fn deref_mut(&mut self) -> &mut FakeCluster {
        &mut self.0
    }
}

impl Cluster {
    fn start(nodes: &[&str]) -> Cluster {
        Cluster(FakeCluster::start(nodes, KCM_ARGS))
    }

    fn job_pods(&self, job: &str) -> Vec<Value> {
        self.items(&["pods", "-l", &format!("batch.kubernetes.io/job-name={job}")])
    }

    /// Waits until the Job has condition `type_` True; returns the Job.
    fn wait_job_condition(&self, job: &str, type_: &str, timeout: Duration) -> Value {
        wait_for(&format!("job {job} {type_}"), timeout, POLL, || {
            let j = self.get(&["job", job]);
            condition(&j, type_).is_some_and(|c| c["status"] == "True").then_some(j)
        })
    }

    /// POSTs an Eviction for `pod`: (HTTP code, body).
    fn evict(&self, pod: &str, body: &Value) -> (u16, Value) {
        let out = std::process::Command::new("curl")
            .args([
                "-sk",
                "-o",
                "-",
                "-w",
                "\n%{http_code}",
                "-X",
                "POST",
                "-H",
                &format!("Authorization: Bearer {ADMIN_TOKEN}"),
                "-H",
                "Content-Type: application/json",
                "--data-binary",
                &body.to_string(),
                &format!("{}/api/v1/namespaces/default/pods/{pod}/eviction", self.api.url()),
            ])
            .output()
            .expect("curl");
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        let (body, code) = text.rsplit_once('\n').unwrap_or(("", "0"));
        (code.trim().parse().unwrap_or(0), serde_json::from_str(body).unwrap_or(Value::Null))
    }
}

fn condition<'a>(obj: &'a Value, type_: &str) -> Option<&'a Value> {
    obj["status"]["conditions"].as_array()?.iter().find(|c| c["type"] == type_)
}

fn phase(pod: &Value) -> &str {
    pod["status"]["phase"].as_str().unwrap_or("")
}

fn name(obj: &Value) -> &str {
    obj["metadata"]["name"].as_str().unwrap_or("")
}

fn is_ready(pod: &Value) -> bool {
    condition(pod, "Ready").is_some_and(|c| c["status"] == "True")
}

fn has_tracking_finalizer(pod: &Value) -> bool {
    pod["metadata"]["finalizers"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|f| f == "batch.kubernetes.io/job-tracking")
}

/// A Job whose pods exit with `exit_code` after `run_seconds`.
fn job(name: &str, spec: Value, exit_code: i32, run_seconds: f64) -> Value {
    let mut spec = spec;
    spec["template"] = json!({
        "metadata": {"annotations": {EXIT_CODE: exit_code.to_string(), RUN_SECONDS: run_seconds.to_string()}},
        "spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "localhost/busybox:1"}]},
    });
    json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "namespace": "default"}, "spec": spec})
}

#[test]
fn indexed_job_completes_each_index_once() {
    let c = Cluster::start(&["node-a", "node-b"]);
    c.apply(&job("idx", json!({"completions": 5, "parallelism": 2, "completionMode": "Indexed"}), 0, 1.0));
    // Never more than `parallelism` pods at once.
    let mut max_active = 0;
    let done = wait_for("indexed job complete", WAIT, POLL, || {
        let active =
            c.job_pods("idx").iter().filter(|p| matches!(phase(p), "Pending" | "Running" | "")).count();
        max_active = max_active.max(active);
        let j = c.get(&["job", "idx"]);
        condition(&j, "Complete").is_some_and(|c| c["status"] == "True").then_some(j)
    });
    assert!(max_active <= 2, "{max_active} pods ran at once with parallelism 2");
    assert_eq!(done["status"]["succeeded"], 5);
    assert_eq!(done["status"]["completedIndexes"], "0-4");
    assert!(done["status"]["completionTime"].is_string());
    let scm = condition(&done, "SuccessCriteriaMet").expect("SuccessCriteriaMet before Complete");
    assert_eq!(scm["reason"], "CompletionsReached");
    assert_eq!(condition(&done, "Complete").unwrap()["message"], "Reached expected number of succeeded pods");

    let pods = c.job_pods("idx");
    assert_eq!(pods.len(), 5, "one pod per index: {:?}", pods.iter().map(name).collect::<Vec<_>>());
    let mut indexes = BTreeSet::new();
    for p in &pods {
        assert_eq!(phase(p), "Succeeded");
        let ix = p["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"]
            .as_str()
            .unwrap()
            .to_string();
        assert_eq!(p["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"], ix.as_str());
        assert_eq!(p["spec"]["hostname"], format!("idx-{ix}"));
        assert!(name(p).starts_with(&format!("idx-{ix}-")), "{}", name(p));
        let env = &p["spec"]["containers"][0]["env"][0];
        assert_eq!(env["name"], "JOB_COMPLETION_INDEX");
        assert_eq!(
            env["valueFrom"]["fieldRef"]["fieldPath"],
            "metadata.labels['batch.kubernetes.io/job-completion-index']"
        );
        assert!(!has_tracking_finalizer(p), "finalizer left on {}", name(p));
        indexes.insert(ix.parse::<u32>().unwrap());
    }
    assert_eq!(indexes, (0..5).collect());
    let events = c.kubectl(&["get", "events", "--field-selector=involvedObject.name=idx", "-o", "json"]);
    assert!(events.contains("Job completed") && events.contains("Created pod: idx-"), "{events}");
}

#[test]
fn failing_job_backs_off_and_stops_at_its_limit_and_fail_job_rule_fails_at_once() {
    let c = Cluster::start(&["node-a"]);
    c.apply(&job("fails", json!({"backoffLimit": 1}), 1, 0.0));
    c.apply(&job(
        "rule",
        json!({"backoffLimit": 6, "parallelism": 1, "podFailurePolicy": {"rules": [
            {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]},
            {"action": "FailJob", "onExitCodes": {"containerName": "main", "operator": "In", "values": [42]}},
        ]}}),
        42,
        0.0,
    ));

    // Exit code 42 matches the FailJob rule: the first failure ends the Job.
    let failed = c.wait_job_condition("rule", "Failed", WAIT);
    let cond = condition(&failed, "Failed").unwrap();
    assert_eq!(cond["reason"], "PodFailurePolicy");
    let pods = c.job_pods("rule");
    assert_eq!(pods.len(), 1, "no retry after a FailJob match");
    assert_eq!(
        cond["message"],
        format!(
            "Container main for pod default/{} failed with exit code 42 matching FailJob rule at index 1",
            name(&pods[0])
        )
    );
    assert_eq!(condition(&failed, "FailureTarget").unwrap()["reason"], "PodFailurePolicy");
    assert_eq!(failed["status"]["failed"], 1);

    // backoffLimit 1: a replacement after the first failure (10 s later, the exponential
    // backoff's first step), none after the second.
    let failed = c.wait_job_condition("fails", "Failed", WAIT);
    assert_eq!(condition(&failed, "Failed").unwrap()["reason"], "BackoffLimitExceeded");
    assert_eq!(
        condition(&failed, "Failed").unwrap()["message"],
        "Job has reached the specified backoff limit"
    );
    assert_eq!(failed["status"]["failed"], 2);
    let mut created: Vec<String> = c
        .job_pods("fails")
        .iter()
        .map(|p| p["metadata"]["creationTimestamp"].as_str().unwrap().to_string())
        .collect();
    created.sort();
    assert_eq!(created.len(), 2, "{created:?}");
    let t = |s: &str| s.parse::<k8s_openapi::jiff::Timestamp>().unwrap();
    let gap = t(&created[1]).duration_since(t(&created[0])).as_secs_f64();
    assert!(gap >= 9.0, "replacement came {gap}s after the first pod, before the 10s backoff");
    assert!(c.job_pods("fails").iter().all(|p| !has_tracking_finalizer(p)));
}

/// `backoffLimitPerIndex`: index 1 always fails; it is retried once (after the per-index
/// backoff, with its failure count carried on the replacement), then marked failed while
/// the other indexes succeed.
#[test]
fn backoff_limit_per_index_fails_only_that_index() {
    let c = Cluster::start(&["node-a"]);
    let mut j = job(
        "perindex",
        json!({"completions": 4, "parallelism": 4, "completionMode": "Indexed", "backoffLimitPerIndex": 1,
            "maxFailedIndexes": 2}),
        0,
        0.0,
    );
    j["spec"]["template"]["metadata"]["annotations"][EXIT_CODES_BY_INDEX] = json!("1=3");
    c.apply(&j);
    let failed = c.wait_job_condition("perindex", "Failed", WAIT);
    let cond = condition(&failed, "Failed").unwrap();
    assert_eq!(
        (cond["reason"].as_str(), cond["message"].as_str()),
        (Some("FailedIndexes"), Some("Job has failed indexes"))
    );
    assert_eq!(failed["status"]["failedIndexes"], "1");
    assert_eq!(failed["status"]["completedIndexes"], "0,2,3");
    assert_eq!(failed["status"]["succeeded"], 3);
    assert_eq!(failed["status"]["failed"], 2);
    let index1: Vec<Value> = c
        .job_pods("perindex")
        .into_iter()
        .filter(|p| p["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"] == "1")
        .collect();
    let mut counts: Vec<&str> = index1
        .iter()
        .map(|p| {
            p["metadata"]["annotations"]["batch.kubernetes.io/job-index-failure-count"].as_str().unwrap_or("")
        })
        .collect();
    counts.sort();
    assert_eq!(counts, vec!["0", "1"], "one retry of index 1, carrying its failure count");
}

#[test]
fn controller_manager_restart_loses_no_completion() {
    let mut c = Cluster::start(&["node-a", "node-b"]);
    c.apply(&job("steady", json!({"completions": 24, "parallelism": 4}), 0, 0.5));
    // Kill the controller-manager twice mid-Job, each time starting a new one.
    for round in 1..=2 {
        wait_for("progress", WAIT, POLL, || {
            let j = c.get(&["job", "steady"]);
            (j["status"]["succeeded"].as_i64().unwrap_or(0) >= round * 8).then_some(())
        });
        c.kcm.kill9();
        c.kcm = KubeControllerManager::start(&c.api, KCM_ARGS);
    }
    let done = c.wait_job_condition("steady", "Complete", WAIT);
    assert_eq!(done["status"]["succeeded"], 24);
    assert!(done["status"]["failed"].is_null(), "{}", done["status"]);
    let pods = c.job_pods("steady");
    let succeeded = pods.iter().filter(|p| phase(p) == "Succeeded").count();
    // A lost completion would have cost an extra pod; a double count a missing one.
    assert_eq!((pods.len(), succeeded), (24, 24));
    assert!(pods.iter().all(|p| !has_tracking_finalizer(p)));
    let u = &done["status"]["uncountedTerminatedPods"];
    assert!(u["succeeded"].is_null() && u["failed"].is_null(), "{u}");
}

#[test]
fn suspend_deadline_and_ttl_after_finished() {
    let c = Cluster::start(&["node-a"]);
    c.apply(&job("later", json!({"suspend": true, "parallelism": 2, "completions": 2}), 0, 0.0));
    let j = c.wait_job_condition("later", "Suspended", WAIT);
    assert_eq!(condition(&j, "Suspended").unwrap()["reason"], "JobSuspended");
    assert!(c.job_pods("later").is_empty(), "a suspended Job runs no pods");
    c.kubectl(&["patch", "job", "later", "--type=merge", "-p", r#"{"spec":{"suspend":false}}"#]);
    let j = c.wait_job_condition("later", "Complete", WAIT);
    assert_eq!(condition(&j, "Suspended").unwrap()["status"], "False");
    assert_eq!(condition(&j, "Suspended").unwrap()["reason"], "JobResumed");

    // Pods that never finish: the deadline fails the Job and deletes them.
    c.apply(&job("slow", json!({"activeDeadlineSeconds": 2, "parallelism": 2, "completions": 2}), 0, 3600.0));
    let j = c.wait_job_condition("slow", "Failed", WAIT);
    assert_eq!(condition(&j, "Failed").unwrap()["reason"], "DeadlineExceeded");
    assert_eq!(condition(&j, "Failed").unwrap()["message"], "Job was active longer than specified deadline");
    wait_for("deadline pods gone", WAIT, POLL, || {
        c.job_pods("slow")
            .iter()
            .all(|p| !p["metadata"]["deletionTimestamp"].is_null() || phase(p) == "Failed")
            .then_some(())
    });

    c.apply(&job("short-lived", json!({"ttlSecondsAfterFinished": 1}), 0, 0.0));
    // With a one-second TTL the Job can be gone before a poll sees it complete; the TTL
    // controller deletes only finished Jobs, so its absence means it completed.
    wait_for("job short-lived Complete (or deleted after it)", WAIT, POLL, || {
        match c.try_get(&["job", "short-lived"]) {
            None => Some(()),
            Some(j) => condition(&j, "Complete").is_some_and(|c| c["status"] == "True").then_some(()),
        }
    });
    wait_for("finished job deleted after its TTL", WAIT, POLL, || {
        (c.try_get(&["job", "short-lived"]).is_none() && c.job_pods("short-lived").is_empty()).then_some(())
    });
}

/// One Job per minute: `Allow` runs one each minute; `Forbid` skips while one runs.
/// Takes up to two minutes (two minute boundaries).
#[test]
fn cronjob_runs_each_minute_and_forbid_skips_while_one_runs() {
    let c = Cluster::start(&["node-a"]);
    let cron = |name: &str, policy: &str, run_seconds: f64| {
        json!({"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": name, "namespace": "default"},
            "spec": {"schedule": "*/1 * * * *", "concurrencyPolicy": policy, "timeZone": "Etc/UTC",
                "successfulJobsHistoryLimit": 5,
                "jobTemplate": {"metadata": {"labels": {"cron": name}}, "spec": job("x", json!({}), 0, run_seconds)["spec"].clone()}}})
    };
    c.apply(&cron("every", "Allow", 0.0));
    c.apply(&cron("forbid", "Forbid", 3600.0));
    let jobs_of = |cj: &str| c.items(&["jobs", "-l", &format!("cron={cj}")]);
    let two =
        wait_for("two runs of the Allow cronjob", Duration::from_secs(150), Duration::from_secs(1), || {
            let jobs = jobs_of("every");
            (jobs.len() >= 2 && jobs.iter().all(|j| condition(j, "Complete").is_some())).then_some(jobs)
        });
    let mut minutes: Vec<i64> =
        two.iter().map(|j| name(j).rsplit('-').next().unwrap().parse().unwrap()).collect();
    minutes.sort();
    assert_eq!(minutes[1] - minutes[0], 1, "one Job per minute, named by the scheduled minute");
    for j in &two {
        let scheduled =
            j["metadata"]["annotations"]["batch.kubernetes.io/cronjob-scheduled-timestamp"].as_str().unwrap();
        let t: k8s_openapi::jiff::Timestamp = scheduled.parse().unwrap();
        assert_eq!(t.as_second() / 60, name(j).rsplit('-').next().unwrap().parse::<i64>().unwrap());
        assert_eq!(j["metadata"]["ownerReferences"][0]["kind"], "CronJob");
    }
    let cj = c.get(&["cronjob", "every"]);
    assert!(cj["status"]["lastSuccessfulTime"].is_string() && cj["status"]["lastScheduleTime"].is_string());
    // The Forbid cronjob's first Job still runs at the second boundary: no second Job.
    wait_for("Forbid skipped a run", WAIT, POLL, || {
        let events =
            c.kubectl(&["get", "events", "--field-selector=involvedObject.name=forbid", "-o", "json"]);
        events.contains("JobAlreadyActive").then_some(())
    });
    assert_eq!(jobs_of("forbid").len(), 1);
    let cj = c.get(&["cronjob", "forbid"]);
    assert_eq!(cj["status"]["active"].as_array().map(Vec::len), Some(1));
    // Deleting the CronJobs deletes their Jobs (garbage collector).
    c.kubectl(&["delete", "cronjob", "forbid", "every"]);
    wait_for("cronjobs' jobs collected", WAIT, POLL, || {
        (jobs_of("every").is_empty() && jobs_of("forbid").is_empty()).then_some(())
    });
}

#[test]
fn eviction_api_and_kubectl_drain_honour_a_pod_disruption_budget() {
    let c = Cluster::start(&["node-a", "node-b"]);
    // All three replicas on node-a.
    c.kubectl(&["cordon", "node-b"]);
    c.kubectl(&["create", "deployment", "web", "--image=localhost/busybox:1", "--replicas=3"]);
    wait_for("web ready on node-a", WAIT, POLL, || {
        let pods = c.items(&["pods", "-l", "app=web"]);
        (pods.len() == 3 && pods.iter().all(|p| is_ready(p) && p["spec"]["nodeName"] == "node-a"))
            .then_some(())
    });
    c.kubectl(&["uncordon", "node-b"]);
    c.apply(&json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "web"}}}}));
    let pdb = wait_for("PDB status", WAIT, POLL, || {
        let p = c.get(&["pdb", "web"]);
        (p["status"]["observedGeneration"] == p["metadata"]["generation"]
            && p["status"]["currentHealthy"] == 3)
            .then_some(p)
    });
    assert_eq!(
        (pdb["status"]["desiredHealthy"].as_i64(), pdb["status"]["expectedPods"].as_i64()),
        (Some(2), Some(3))
    );
    assert_eq!(pdb["status"]["disruptionsAllowed"], 1);
    let cond = condition(&pdb, "DisruptionAllowed").unwrap();
    assert_eq!((cond["status"].as_str(), cond["reason"].as_str()), (Some("True"), Some("SufficientPods")));

    // A dry run spends nothing.
    let pods = c.items(&["pods", "-l", "app=web"]);
    let evict = |p: &str| json!({"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": p, "namespace": "default"}});
    let mut dry = evict(name(&pods[0]));
    dry["deleteOptions"] = json!({"dryRun": ["All"]});
    assert_eq!(c.evict(name(&pods[0]), &dry).0, 201);
    assert_eq!(c.get(&["pdb", "web"])["status"]["disruptionsAllowed"], 1);
    // A name that is not the URL's is refused.
    assert_eq!(c.evict(name(&pods[0]), &evict("other")).0, 400);

    // Replacements on node-b stay unready: the budget cannot recover during the drain.
    c.kubelet.set_node_pods_ready("node-b", false);
    let drain = c.api.kubectl_spawn(&["drain", "node-a", "--timeout=90s"]);
    // Evictions run concurrently: one spends the budget, the other two get 429s.
    let evicted = wait_for("one pod evicted", WAIT, POLL, || {
        let gone: Vec<&Value> = pods.iter().filter(|p| c.try_get(&["pod", name(p)]).is_none()).collect();
        (!gone.is_empty()).then(|| name(gone[0]).to_string())
    });
    // The eviction spent the budget at once; the controller sees the pod gone a moment later.
    wait_for("the budget's status after the eviction", WAIT, POLL, || {
        let p = c.get(&["pdb", "web"]);
        (p["status"]["currentHealthy"] == 2).then_some(())
    });
    assert_eq!(c.get(&["pdb", "web"])["status"]["disruptionsAllowed"], 0);
    let survivor = pods.iter().map(name).find(|n| *n != evicted).unwrap();
    let (code, status) = c.evict(survivor, &evict(survivor));
    assert_eq!(code, 429, "{status}");
    assert_eq!(status["reason"], "TooManyRequests");
    assert_eq!(status["message"], "Cannot evict pod as it would violate the pod's disruption budget.");
    assert_eq!(status["details"]["causes"][0]["reason"], "DisruptionBudget");
    assert_eq!(
        status["details"]["causes"][0]["message"],
        "The disruption budget web needs 2 healthy pods and has 2 currently"
    );
    assert_eq!(pods.iter().filter(|p| c.try_get(&["pod", name(p)]).is_some()).count(), 2, "only one evicted");

    // Replacements become ready: the budget allows the rest, the drain finishes.
    c.kubelet.set_node_pods_ready("node-b", true);
    let (code, stderr) = drain.wait(Duration::from_secs(100));
    assert_eq!(code, Some(0), "drain failed: {stderr}");
    assert!(stderr.contains("Cannot evict pod as it would violate the pod's disruption budget."), "{stderr}");
    let node = c.get(&["node", "node-a"]);
    assert_eq!(node["spec"]["unschedulable"], true);
    wait_for("web back to 3 ready on node-b", WAIT, POLL, || {
        let pods: Vec<Value> = c
            .items(&["pods", "-l", "app=web"])
            .into_iter()
            .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
            .collect();
        (pods.len() == 3 && pods.iter().all(|p| is_ready(p) && p["spec"]["nodeName"] == "node-b"))
            .then_some(())
    });
    c.kubectl(&["uncordon", "node-a"]);
    assert!(c.get(&["node", "node-a"])["spec"]["unschedulable"].is_null());

    // unhealthyPodEvictionPolicy AlwaysAllow: an unready pod goes even with no budget left.
    c.kubectl(&[
        "patch",
        "pdb",
        "web",
        "--type=merge",
        "-p",
        r#"{"spec":{"minAvailable":3,"unhealthyPodEvictionPolicy":"AlwaysAllow"}}"#,
    ]);
    let victim = c.items(&["pods", "-l", "app=web"])[0].clone();
    c.kubelet.set_ready(&format!("default/{}", name(&victim)), false);
    wait_for("budget spent with one unready pod", WAIT, POLL, || {
        let p = c.get(&["pdb", "web"]);
        (p["status"]["observedGeneration"] == p["metadata"]["generation"]
            && p["status"]["currentHealthy"] == 2
            && p["status"]["disruptionsAllowed"] == 0)
            .then_some(())
    });
    let (code, status) = c.evict(name(&victim), &evict(name(&victim)));
    assert_eq!(code, 201, "{status}");
    // A policy/v1beta1 body is accepted too; the budget refuses a ready pod.
    let ready = c
        .items(&["pods", "-l", "app=web"])
        .into_iter()
        .find(|p| is_ready(p) && name(p) != name(&victim))
        .unwrap();
    let mut beta = evict(name(&ready));
    beta["apiVersion"] = json!("policy/v1beta1");
    assert_eq!(c.evict(name(&ready), &beta).0, 429);
}

#[test]
fn replication_controller_keeps_replicas_and_scales() {
    let c = Cluster::start(&["node-a"]);
    c.apply(&json!({"apiVersion": "v1", "kind": "ReplicationController", "metadata": {"name": "rc", "namespace": "default"},
        "spec": {"replicas": 2, "selector": {"app": "rc"}, "template": {"metadata": {"labels": {"app": "rc"}},
            "spec": {"containers": [{"name": "c", "image": "localhost/busybox:1"}]}}}}));
    let ready = |n: i64| {
        wait_for(&format!("rc with {n} ready"), WAIT, POLL, || {
            let rc = c.get(&["rc", "rc"]);
            let pods: Vec<Value> = c
                .items(&["pods", "-l", "app=rc"])
                .into_iter()
                .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
                .collect();
            (rc["status"]["readyReplicas"] == n && rc["status"]["replicas"] == n && pods.len() as i64 == n)
                .then_some(pods)
        })
    };
    let pods = ready(2);
    assert_eq!(pods[0]["metadata"]["ownerReferences"][0]["kind"], "ReplicationController");
    c.kubectl(&["scale", "rc", "rc", "--replicas=4"]);
    ready(4);
    c.kubectl(&["delete", "pod", name(&pods[0]), "--wait=false"]);
    ready(4);
    c.kubectl(&["scale", "rc", "rc", "--replicas=1"]);
    ready(1);
    let rc = c.get(&["rc", "rc"]);
    assert_eq!(rc["status"]["observedGeneration"], rc["metadata"]["generation"]);
}

/// Upstream's conformance "surface a failure condition on a common issue like exceeded
/// quota": with a quota of two pods, an RC of three gets `ReplicaFailure` (FailedCreate)
/// and exactly two pods; scaled to two, the condition goes.
#[test]
fn replication_controller_reports_quota_failure() {
    let c =
        Cluster(FakeCluster::start_disabling(&["node-a"], "ServiceAccount,TaintNodesByCondition", KCM_ARGS));
    c.kubectl(&["create", "quota", "condition-test", "--hard=pods=2"]);
    wait_for("quota status", WAIT, POLL, || {
        (c.get(&["quota", "condition-test"])["status"]["hard"]["pods"] == "2").then_some(())
    });
    c.apply(&json!({"apiVersion": "v1", "kind": "ReplicationController", "metadata": {"name": "condition-test", "namespace": "default"},
        "spec": {"replicas": 3, "selector": {"name": "condition-test"}, "template": {"metadata": {"labels": {"name": "condition-test"}},
            "spec": {"containers": [{"name": "c", "image": "localhost/busybox:1"}]}}}}));
    let rc = wait_for("ReplicaFailure condition", WAIT, POLL, || {
        let rc = c.get(&["rc", "condition-test"]);
        condition(&rc, "ReplicaFailure").is_some().then_some(rc)
    });
    let cond = condition(&rc, "ReplicaFailure").unwrap();
    assert_eq!((cond["status"].as_str(), cond["reason"].as_str()), (Some("True"), Some("FailedCreate")));
    assert!(cond["message"].as_str().unwrap().contains("exceeded quota"), "{cond}");
    assert_eq!(c.items(&["pods", "-l", "name=condition-test"]).len(), 2, "the quota holds at two pods");
    c.kubectl(&["scale", "rc", "condition-test", "--replicas=2"]);
    wait_for("ReplicaFailure cleared", WAIT, POLL, || {
        let rc = c.get(&["rc", "condition-test"]);
        (condition(&rc, "ReplicaFailure").is_none() && rc["status"]["replicas"] == 2).then_some(())
    });
    assert_eq!(c.items(&["pods", "-l", "name=condition-test"]).len(), 2);
}

/// An Indexed Job on a real kubelet in containerd: each container checks that
/// `JOB_COMPLETION_INDEX` (from the index label) matches its hostname `<job>-<index>`
/// and exits 0, else 3 (and `backoffLimit: 0` would fail the Job). Needs root and
/// containerd (`hack/install-deps.sh`, images from `hack/build-images.sh`).
#[test]
fn indexed_job_on_a_real_kubelet() {
    use e2e::containerd::{self, BUSYBOX, Containerd};
    use e2e::kubelet::Kubelet;
    assert!(containerd::available(), "this test needs root and containerd (hack/install-deps.sh)");
    let etcd = Etcd::start(EtcdOptions::default());
    let api = Arc::new(KubeApiserver::start(
        &etcd.endpoint(),
        &["--disable-admission-plugins=ServiceAccount,TaintNodesByCondition,ResourceQuota"],
    ));
    let _sched = KubeScheduler::start(&api, &["--leader-elect=false"]);
    let _kcm = KubeControllerManager::start(&api, KCM_ARGS);
    let ctrd = Containerd::start();
    let kubelet = Kubelet::start(Some(&api), &ctrd, "real-node", None, "");
    wait_for("node Ready", Duration::from_secs(90), POLL, || {
        let out = api.kubectl(&["get", "node", "real-node", "-o", "json"]);
        let n = out.status.success().then(|| e2e::json(&String::from_utf8_lossy(&out.stdout)))?;
        condition(&n, "Ready").filter(|c| c["status"] == "True").map(|_| ())
    });
    let job = json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "real", "namespace": "default"},
        "spec": {"completions": 3, "parallelism": 2, "completionMode": "Indexed", "backoffLimit": 0,
            "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": BUSYBOX,
                "command": ["sh", "-c", "test \"real-$JOB_COMPLETION_INDEX\" = \"$(hostname)\" && exit 0; exit 3"]}]}}}});
    let out = api.kubectl_stdin(&["apply", "-f", "-"], &job.to_string());
    assert!(out.status.success(), "apply: {}", String::from_utf8_lossy(&out.stderr));
    let done = wait_for("real job finished", Duration::from_secs(120), POLL, || {
        let out = api.kubectl(&["get", "job", "real", "-o", "json"]);
        let j = e2e::json(&String::from_utf8_lossy(&out.stdout));
        (condition(&j, "Complete").is_some() || condition(&j, "Failed").is_some()).then_some(j)
    });
    assert!(
        condition(&done, "Complete").is_some_and(|c| c["status"] == "True"),
        "job did not complete: {}\nkubelet log:\n{}",
        done["status"],
        kubelet.log_tail(40)
    );
    assert_eq!(done["status"]["completedIndexes"], "0-2");
    assert_eq!(done["status"]["succeeded"], 3);
    let pods =
        e2e::json(&api.kubectl_ok(&["get", "pods", "-l", "batch.kubernetes.io/job-name=real", "-o", "json"]));
    let pods = pods["items"].as_array().cloned().unwrap_or_default();
    assert_eq!(pods.len(), 3);
    for p in &pods {
        assert_eq!(phase(p), "Succeeded");
        assert_eq!(p["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"], 0);
        assert!(!has_tracking_finalizer(p));
    }
    drop(kubelet);
    drop(ctrd);
}
