//! Fuzz test of the kubeconfig files every component reads with `--kubeconfig` (kube-rs's
//! parser and client configuration, as `component_base::client` uses them): mutated valid
//! files must be refused with an error, never crash the component. Bounded and
//! deterministic here; `hack/fuzz.sh` runs it for longer from a random seed.

use component_base::fuzz;

#[test]
fn kubeconfig_files() {
    let seed = b"apiVersion: v1
kind: Config
clusters:
- name: local
  cluster:
    server: https://127.0.0.1:6443
    certificate-authority-data: LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCk1JSUJkVENDQVJ1Z0F3SUJBZ0lVSwotLS0tLUVORCBDRVJUSUZJQ0FURS0tLS0tCg==
    tls-server-name: kubernetes
users:
- name: admin
  user:
    token: abc.def
    client-certificate-data: bm90IGEgY2VydA==
    client-key-data: bm90IGEga2V5
contexts:
- name: local
  context: {cluster: local, user: admin, namespace: kube-system}
current-context: local
preferences: {}
"
    .to_vec();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    fuzz::run("kubeconfig", &[seed], 3000, |input| {
        let Ok(kc) = kube::config::Kubeconfig::from_yaml(&String::from_utf8_lossy(input)) else { return };
        // Building the client configuration decodes the certificates and keys; a file
        // that asks to run a credential plugin is not followed here (it would run it).
        let runs_something = kc
            .auth_infos
            .iter()
            .any(|a| a.auth_info.as_ref().is_some_and(|i| i.exec.is_some() || i.auth_provider.is_some()));
        if !runs_something {
            let options = kube::config::KubeConfigOptions::default();
            let _ = rt.block_on(kube::Config::from_custom_kubeconfig(kc, &options));
        }
    });
}
