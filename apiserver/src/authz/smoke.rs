//! Scratch smoke test (removed before hand-off).
use std::process::Command;

fn kubectl(kc: &std::path::Path, args: &[&str]) -> (bool, String) {
    let out =
        Command::new("kubectl").arg(format!("--kubeconfig={}", kc.display())).args(args).output().unwrap();
    let s = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    println!("$ kubectl {}\n{}", args.join(" "), s);
    (out.status.success(), s)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore]
async fn smoke() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let mut etcd = Command::new("/usr/bin/etcd")
        .args([
            "--data-dir",
            d.join("etcd").to_str().unwrap(),
            "--listen-client-urls",
            "http://127.0.0.1:23790",
            "--advertise-client-urls",
            "http://127.0.0.1:23790",
            "--listen-peer-urls",
            "http://127.0.0.1:23800",
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    std::fs::write(d.join("tokens"), "admin-token,admin,1,\"system:masters\"\nalice-token,alice,2,\"devs\"\nbob-token,bob,3\nnode-token,system:node:n1,4,\"system:nodes\"\n").unwrap();
    let flags = <crate::config::Flags as clap::Parser>::try_parse_from([
        "kube-apiserver",
        "--etcd-servers=http://127.0.0.1:23790",
        "--secure-port=26443",
        "--bind-address=127.0.0.1",
        &format!("--cert-dir={}", d.display()),
        &format!("--token-auth-file={}", d.join("tokens").display()),
        "--authorization-mode=Node,RBAC",
    ])
    .unwrap();
    let cfg = flags.into_config().unwrap();
    let shutdown = component_base::shutdown::Shutdown::new();
    let running = crate::start(cfg, shutdown.clone()).await.unwrap();
    let port = running.addr.port();
    let kc = |user: &str| {
        let p = d.join(format!("{user}.kubeconfig"));
        std::fs::write(&p, format!("apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: https://127.0.0.1:{port}\n    insecure-skip-tls-verify: true\nusers:\n- name: u\n  user:\n    token: {user}-token\ncontexts:\n- name: x\n  context:\n    cluster: c\n    user: u\ncurrent-context: x\n")).unwrap();
        p
    };
    let (admin, alice, bob, node) = (kc("admin"), kc("alice"), kc("bob"), kc("node"));
    let b = |kc: std::path::PathBuf, args: Vec<String>| async move {
        tokio::task::spawn_blocking(move || {
            let a: Vec<&str> = args.iter().map(String::as_str).collect();
            kubectl(&kc, &a)
        })
        .await
        .unwrap()
    };
    macro_rules! k { ($kc:expr, $($a:expr),*) => { b($kc.clone(), vec![$($a.to_string()),*]).await } }
    assert!(k!(admin, "get", "clusterroles", "admin", "-o", "yaml").0);
    let (ok, out) = k!(alice, "get", "pods");
    assert!(!ok && out.contains("pods is forbidden: User \"alice\" cannot list resource \"pods\" in API group \"\" in the namespace \"default\""));
    k!(admin, "create", "namespace", "team");
    k!(admin, "create", "rolebinding", "alice-view", "--clusterrole=view", "--user=alice", "-n", "team");
    k!(admin, "create", "rolebinding", "bob-admin", "--clusterrole=admin", "--user=bob", "-n", "team");
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert!(k!(alice, "get", "pods", "-n", "team").0);
    assert_eq!(k!(alice, "auth", "can-i", "watch", "pods", "-n", "team").1.trim(), "yes");
    assert_eq!(k!(alice, "auth", "can-i", "create", "pods", "-n", "team").1.trim(), "no");
    let ssrr = d.join("ssrr.yaml");
    std::fs::write(
        &ssrr,
        "apiVersion: authorization.k8s.io/v1\nkind: SelfSubjectRulesReview\nspec:\n  namespace: team\n",
    )
    .unwrap();
    k!(
        alice,
        "create",
        "--raw",
        "/apis/authorization.k8s.io/v1/selfsubjectrulesreviews",
        "-f",
        ssrr.to_str().unwrap()
    );
    k!(alice, "get", "--raw", "/api");
    let (_, list) = k!(alice, "auth", "can-i", "--list", "-n", "team");
    assert!(list.contains("selfsubjectaccessreviews.authorization.k8s.io"));
    assert!(
        k!(bob, "create", "rolebinding", "carol-view", "--clusterrole=view", "--user=carol", "-n", "team").0
    );
    let (ok, out) = k!(
        bob,
        "create",
        "rolebinding",
        "bob-root",
        "--clusterrole=cluster-admin",
        "--user=bob",
        "-n",
        "team"
    );
    assert!(!ok && out.contains("is attempting to grant RBAC permissions not currently held"));
    assert!(k!(admin, "--as=alice", "get", "pods", "-n", "team").0);
    let (ok, out) = k!(alice, "--as=bob", "get", "pods", "-n", "team");
    assert!(!ok && out.contains("users \"bob\" is forbidden: User \"alice\" cannot impersonate resource \"users\" in API group \"\" at the cluster scope"));
    assert_eq!(k!(admin, "auth", "can-i", "get", "pods", "--as=alice", "-n", "team").1.trim(), "yes");
    k!(admin, "api-resources", "--api-group=authorization.k8s.io");
    // node
    k!(admin, "create", "secret", "generic", "s1", "-n", "team", "--from-literal=a=b");
    let (ok, _) = k!(node, "get", "secret", "s1", "-n", "team");
    assert!(!ok);
    k!(admin, "create", "serviceaccount", "default", "-n", "team");
    let pod = d.join("pod.yaml");
    std::fs::write(&pod, "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\n  namespace: team\nspec:\n  nodeName: n1\n  containers:\n  - name: c\n    image: x\n    envFrom:\n    - secretRef:\n        name: s1\n").unwrap();
    assert!(k!(admin, "create", "-f", pod.to_str().unwrap()).0);
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert!(k!(node, "get", "secret", "s1", "-n", "team").0);
    assert!(k!(node, "get", "nodes").0);
    shutdown.trigger();
    let _ = etcd.kill();
}
