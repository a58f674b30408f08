//! The horizontal pod autoscaler end to end: our etcd, kube-apiserver and
//! kube-controller-manager (only the HPA controller, acting as its own service account
//! under RBAC, as a kubeadm cluster runs it), driven with kubectl. No metrics API is
//! served, so a metric-driven HPA must say so in its conditions and leave the target
//! alone; the min/max bounds and a zero-replica target need no metrics.

use std::time::Duration;

use serde_json::Value;

use e2e::apiserver::KubeApiserver;
use e2e::certs::rsa_key;
use e2e::component::{Component, KubeControllerManager};
use e2e::{Etcd, EtcdOptions, wait_for};

const WAIT: Duration = Duration::from_secs(60);
const POLL: Duration = Duration::from_millis(250);

struct Cluster {
    _kcm: Component,
    api: KubeApiserver,
    _etcd: Etcd,
    _keys: tempfile::TempDir,
}

impl Cluster {
    fn start() -> Cluster {
        let etcd = Etcd::start(EtcdOptions::default());
        let keys = tempfile::tempdir().expect("tempdir");
        let (key, public) = rsa_key(keys.path(), "sa");
        let api_args = [
            "--disable-admission-plugins=ServiceAccount,TaintNodesByCondition,ResourceQuota".to_string(),
            "--authorization-mode=Node,RBAC".to_string(),
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local".to_string(),
            format!("--service-account-signing-key-file={}", key.display()),
            format!("--service-account-key-file={}", public.display()),
        ];
        let api_args: Vec<&str> = api_args.iter().map(String::as_str).collect();
        let api = KubeApiserver::start(&etcd.endpoint(), &api_args);
        let kcm = KubeControllerManager::start(
            &api,
            &[
                "--leader-elect=false",
                "--use-service-account-credentials",
                "--controllers=horizontalpodautoscaling",
                "--horizontal-pod-autoscaler-sync-period=1s",
            ],
        );
        Cluster { _kcm: kcm, api, _etcd: etcd, _keys: keys }
    }

    fn apply(&self, yaml: &str) {
        let out = self.api.kubectl_stdin(&["apply", "-f", "-"], yaml);
        assert!(out.status.success(), "kubectl apply: {}", String::from_utf8_lossy(&out.stderr));
    }

    fn get(&self, args: &[&str]) -> Value {
        let mut a = vec!["get"];
        a.extend_from_slice(args);
        a.extend_from_slice(&["-o", "json"]);
        e2e::json(&self.api.kubectl_ok(&a))
    }

    /// Creates a Deployment (no controller runs it: only its Scale matters) and an
    /// autoscaling/v2 HPA on it with a CPU utilization target.
    fn deployment_with_hpa(&self, name: &str, replicas: i32, min: i32, max: i32) {
        self.apply(&format!(
            r#"
apiVersion: apps/v1
kind: Deployment
metadata: {{name: {name}, namespace: default}}
spec:
  replicas: {replicas}
  selector: {{matchLabels: {{app: {name}}}}}
  template:
    metadata: {{labels: {{app: {name}}}}}
    spec:
      containers:
      - name: c
        image: registry.k8s.io/pause:3.10
        resources: {{requests: {{cpu: 100m}}}}
---
apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata: {{name: {name}, namespace: default}}
spec:
  scaleTargetRef: {{apiVersion: apps/v1, kind: Deployment, name: {name}}}
  minReplicas: {min}
  maxReplicas: {max}
  metrics:
  - type: Resource
    resource: {{name: cpu, target: {{type: Utilization, averageUtilization: 50}}}}
"#
        ));
    }

    /// Waits until the HPA's condition `type_` has this status and reason; returns the HPA.
    fn wait_condition(&self, hpa: &str, type_: &str, status: &str, reason: &str) -> Value {
        wait_for(&format!("{hpa} {type_}={status} ({reason})"), WAIT, POLL, || {
            let h = self.get(&["hpa", hpa]);
            let found = condition(&h, type_).is_some_and(|c| c["status"] == status && c["reason"] == reason);
            found.then_some(h)
        })
    }

    fn events_for(&self, name: &str) -> Vec<Value> {
        let list = self.get(&["events"]);
        list["items"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .into_iter()
            .filter(|e| {
                e["involvedObject"]["kind"] == "HorizontalPodAutoscaler"
                    && e["involvedObject"]["name"] == name
            })
            .collect()
    }
}

fn condition<'a>(hpa: &'a Value, type_: &str) -> Option<&'a Value> {
    hpa["status"]["conditions"].as_array()?.iter().find(|c| c["type"] == type_)
}

#[test]
fn hpa_reports_missing_metrics_and_enforces_bounds() {
    let c = Cluster::start();

    // Metrics needed but not served: AbleToScale, yet not ScalingActive, target untouched.
    c.deployment_with_hpa("web", 2, 1, 5);
    c.wait_condition("web", "AbleToScale", "True", "SucceededGetScale");
    let h = c.wait_condition("web", "ScalingActive", "False", "FailedGetResourceMetric");
    let message = condition(&h, "ScalingActive").unwrap()["message"].as_str().unwrap_or_default().to_owned();
    assert!(
        message.starts_with(
            "the HPA was unable to compute the replica count: failed to get cpu utilization: \
             unable to get metrics for resource cpu: unable to fetch metrics from resource metrics API:"
        ),
        "{message}"
    );
    assert_eq!(h["status"]["currentReplicas"], 2, "{h}");
    assert_eq!(h["status"]["currentMetrics"][0]["type"], "", "{h}");
    let transition = condition(&h, "ScalingActive").unwrap()["lastTransitionTime"].clone();
    let reasons = wait_for("FailedGetResourceMetric event", WAIT, POLL, || {
        let reasons: Vec<String> =
            c.events_for("web").iter().map(|e| e["reason"].as_str().unwrap_or_default().to_owned()).collect();
        reasons.iter().any(|r| r == "FailedGetResourceMetric").then_some(reasons)
    });
    assert!(reasons.iter().any(|r| r == "FailedComputeMetricsReplicas"), "{reasons:?}");
    assert_eq!(c.get(&["deployment", "web"])["spec"]["replicas"], 2);
    // Later syncs keep the condition's transition time.
    std::thread::sleep(Duration::from_secs(3));
    let h = c.get(&["hpa", "web"]);
    assert_eq!(condition(&h, "ScalingActive").unwrap()["lastTransitionTime"], transition, "{h}");

    // Above maxReplicas: scaled down to it without any metric.
    c.deployment_with_hpa("big", 8, 1, 5);
    wait_for("big scaled to 5", WAIT, POLL, || {
        (c.get(&["deployment", "big"])["spec"]["replicas"] == 5).then_some(())
    });
    let h = wait_for("big status", WAIT, POLL, || {
        let h = c.get(&["hpa", "big"]);
        (h["status"]["desiredReplicas"] == 5
            && condition(&h, "AbleToScale").is_some_and(|c| c["reason"] == "SucceededRescale"))
        .then_some(h)
    });
    assert!(h["status"]["lastScaleTime"].is_string(), "{h}");
    let rescaled = wait_for("SuccessfulRescale event", WAIT, POLL, || {
        c.events_for("big").into_iter().find(|e| e["reason"] == "SuccessfulRescale")
    });
    assert_eq!(rescaled["message"], "New size: 5; reason: Current number of replicas above Spec.MaxReplicas");
    assert_eq!(rescaled["type"], "Normal");

    // A target scaled to zero disables autoscaling.
    c.deployment_with_hpa("idle", 0, 1, 5);
    let h = c.wait_condition("idle", "ScalingActive", "False", "ScalingDisabled");
    assert_eq!(
        condition(&h, "ScalingActive").unwrap()["message"],
        "scaling is disabled since the replica count of the target is zero"
    );
    assert_eq!(c.get(&["deployment", "idle"])["spec"]["replicas"], 0);

    // A target that does not exist: AbleToScale=False, FailedGetScale.
    c.apply(
        r#"
apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata: {name: ghost, namespace: default}
spec:
  scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: ghost}
  maxReplicas: 3
"#,
    );
    let h = c.wait_condition("ghost", "AbleToScale", "False", "FailedGetScale");
    let message = condition(&h, "AbleToScale").unwrap()["message"].as_str().unwrap_or_default().to_owned();
    assert!(
        message.starts_with("the HPA controller was unable to get the target's current scale:"),
        "{message}"
    );
}
