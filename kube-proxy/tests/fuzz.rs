//! Fuzz test of kube-proxy's `--config` file (KubeProxyConfiguration): mutated valid files
//! must be refused with an error or read, never crash. Bounded and deterministic here;
//! `hack/fuzz.sh` runs it for longer from a random seed.

use component_base::fuzz;
use kube_proxy::apis::KubeProxyConfiguration;

#[test]
fn config_file() {
    let seed = b"apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: nftables
clusterCIDR: 10.244.0.0/16,fd00:10:244::/56
bindAddress: 0.0.0.0
metricsBindAddress: 127.0.0.1:10249
healthzBindAddress: 0.0.0.0:10256
nodePortAddresses: [primary, 192.168.0.0/16]
clientConnection: {kubeconfig: /var/lib/kube-proxy/kubeconfig.conf, qps: 5, burst: 10}
iptables: {masqueradeAll: false, syncPeriod: 30s, minSyncPeriod: 1s}
nftables: {syncPeriod: 30s, minSyncPeriod: 0s, masqueradeBit: 14}
conntrack: {maxPerCore: 32768, min: 131072, tcpEstablishedTimeout: 24h0m0s, tcpCloseWaitTimeout: 1h0m0s}
"
    .to_vec();
    fuzz::run("KubeProxyConfiguration", &[seed], 5000, |input| {
        let _ = KubeProxyConfiguration::decode(&String::from_utf8_lossy(input));
    });
}
