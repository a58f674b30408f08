//! Fuzz tests of the files the kubelet reads from its host: the `--config` file
//! (KubeletConfiguration), static pod manifests from `--pod-manifest-path`, and the
//! resolv.conf it builds pod DNS from. Mutated valid files must be refused with an error or
//! read, never crash the kubelet. Bounded and deterministic here; `hack/fuzz.sh` runs them
//! for longer from random seeds.

use std::path::Path;

use component_base::fuzz;
use kubelet::config::KubeletConfiguration;

const ITERATIONS: usize = 5000;

#[test]
fn config_manifest_and_resolv_conf_files() {
    let seeds: Vec<Vec<u8>> = [
        "apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: 0.0.0.0
port: 10250
staticPodPath: /etc/kubernetes/manifests
clusterDNS: [10.96.0.10]
clusterDomain: cluster.local
authentication: {anonymous: {enabled: false}, webhook: {enabled: true, cacheTTL: 2m0s}, x509: {clientCAFile: /etc/kubernetes/pki/ca.crt}}
authorization: {mode: Webhook}
evictionHard: {memory.available: 100Mi, nodefs.available: 10%}
imageGCHighThresholdPercent: 85
containerLogMaxSize: 10Mi
cgroupDriver: systemd
rotateCertificates: true
",
        "apiVersion: v1
kind: Pod
metadata: {name: etcd, namespace: kube-system, labels: {component: etcd, tier: control-plane}}
spec:
  hostNetwork: true
  priorityClassName: system-node-critical
  containers:
  - name: etcd
    image: registry.k8s.io/etcd:3.5.16-0
    command: [etcd, --data-dir=/var/lib/etcd, --listen-client-urls=https://127.0.0.1:2379]
    volumeMounts: [{mountPath: /var/lib/etcd, name: etcd-data}]
    livenessProbe: {httpGet: {host: 127.0.0.1, path: /livez, port: 2381, scheme: HTTP}, failureThreshold: 8}
    resources: {requests: {cpu: 100m, memory: 100Mi}}
  volumes: [{hostPath: {path: /var/lib/etcd, type: DirectoryOrCreate}, name: etcd-data}]
",
        "nameserver 10.0.0.2\nnameserver fd00::1\nsearch corp.example example.com\noptions ndots:2 timeout:1 rotate\n# comment\ndomain x\n",
    ]
    .iter()
    .map(|s| s.as_bytes().to_vec())
    .collect();
    fuzz::run("kubelet files", &seeds, ITERATIONS, |input| {
        let text = String::from_utf8_lossy(input);
        let _ = KubeletConfiguration::parse(&text, "/var/lib/kubelet/config.yaml");
        let _ =
            kubelet::sources::static_pod(input, Path::new("/etc/kubernetes/manifests/etcd.yaml"), "node-1");
        let _ = kubelet::dns::parse_resolv_conf(&text);
    });
}
