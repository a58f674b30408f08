//! A control plane whose kubelets are played by [`FakeKubelet`], for controller tests:
//! our etcd, kube-apiserver (by default without the admission plugins that need
//! controllers these tests may not run: ServiceAccount, TaintNodesByCondition,
//! ResourceQuota),
//! kube-scheduler and kube-controller-manager, with kubectl helpers. Processes stop when
//! it drops, kubelet first and etcd last.

use std::sync::Arc;

use serde_json::Value;

use crate::apiserver::KubeApiserver;
use crate::component::{Component, KubeControllerManager, KubeScheduler};
use crate::fake_kubelet::FakeKubelet;
use crate::{Etcd, EtcdOptions};

pub struct FakeCluster {
    pub kubelet: FakeKubelet,
    pub kcm: Component,
    pub sched: Component,
    pub api: Arc<KubeApiserver>,
    pub etcd: Etcd,
}

impl FakeCluster {
    /// Starts it with `nodes` and the controller-manager's `kcm_args`.
    pub fn start(nodes: &[&str], kcm_args: &[&str]) -> FakeCluster {
        Self::start_disabling(nodes, "ServiceAccount,TaintNodesByCondition,ResourceQuota", kcm_args)
    }

    /// Starts it with these admission plugins disabled (a test of quotas keeps
    /// ResourceQuota).
    pub fn start_disabling(nodes: &[&str], disabled_admission: &str, kcm_args: &[&str]) -> FakeCluster {
        let etcd = Etcd::start(EtcdOptions::default());
        let api = Arc::new(KubeApiserver::start(
            &etcd.endpoint(),
            &[&format!("--disable-admission-plugins={disabled_admission}")],
        ));
        let sched = KubeScheduler::start(&api, &["--leader-elect=false"]);
        let kubelet = FakeKubelet::start(&api.kubeconfig, nodes);
        let kcm = KubeControllerManager::start(&api, kcm_args);
        FakeCluster { kubelet, kcm, sched, api, etcd }
    }

    /// kubectl that must succeed; its stdout.
    pub fn kubectl(&self, args: &[&str]) -> String {
        self.api.kubectl_ok(args)
    }

    /// `kubectl apply` of one object.
    pub fn apply(&self, obj: &Value) {
        let out = self.api.kubectl_stdin(&["apply", "-f", "-"], &obj.to_string());
        assert!(out.status.success(), "apply: {}", String::from_utf8_lossy(&out.stderr));
    }

    /// `kubectl get ... -o json`, which must succeed.
    pub fn get(&self, args: &[&str]) -> Value {
        let mut a = vec!["get"];
        a.extend_from_slice(args);
        a.extend_from_slice(&["-o", "json"]);
        crate::json(&self.kubectl(&a))
    }

    /// `kubectl get ... -o json`, or None when it fails (not found).
    pub fn try_get(&self, args: &[&str]) -> Option<Value> {
        let mut a = vec!["get"];
        a.extend_from_slice(args);
        a.extend_from_slice(&["-o", "json"]);
        let out = self.api.kubectl(&a);
        out.status.success().then(|| crate::json(&String::from_utf8_lossy(&out.stdout)))
    }

    /// The items of a list.
    pub fn items(&self, args: &[&str]) -> Vec<Value> {
        self.get(args)["items"].as_array().cloned().unwrap_or_default()
    }
}
