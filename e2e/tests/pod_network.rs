//! The pod network across nodes (`hostgw`): two kubelets, each with its own containerd in a
//! network namespace of its own; a pod on one node reaches a pod on the other by its IP
//! with its own source address (no masquerade inside the cluster), the control-plane host
//! reaches pods, and routes follow the Node objects.
//!
//! Needs root and containerd (hack/install-deps.sh); a missing prerequisite fails.

use std::time::Duration;

use e2e::containerd::BUSYBOX;
use e2e::nodes::{ClusterOptions, NodeCluster};
use e2e::wait_for;

/// A busybox pod pinned to `node` running `script`.
fn pod(name: &str, node: &str, script: &str) -> String {
    format!(
        r#"{{"apiVersion":"v1","kind":"Pod","metadata":{{"name":"{name}","labels":{{"app":"{name}"}}}},
"spec":{{"nodeName":"{node}","terminationGracePeriodSeconds":1,"containers":[{{"name":"c","image":"{BUSYBOX}",
"command":["sh","-c",{script}]}}]}}}}"#,
        script = serde_json::to_string(script).unwrap()
    )
}

/// busybox httpd on 8080 answering its pod name, logging each client's address (-vv).
const SERVER: &str =
    "mkdir -p /www && echo hello-from-$(hostname) > /www/index.html && exec httpd -f -vv -p 8080 -h /www";

/// Waits up to 30 s for `f` to succeed, panicking with `why(last error)` (the state of the
/// network) if it never does.
fn wait_for_or<T>(what: &str, mut f: impl FnMut() -> Result<T, String>, why: impl Fn(&str) -> String) -> T {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let last = match f() {
            Ok(v) => return v,
            Err(e) => e,
        };
        assert!(std::time::Instant::now() < deadline, "timed out waiting for {what}:\n{}", why(&last));
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// Routes, addresses and CNI files of every node, for a failure message.
fn diagnose(cluster: &NodeCluster, last: &str) -> String {
    let mut s = format!("last error: {last}\n");
    for n in &cluster.nodes {
        for cmd in [&["ip", "route"][..], &["ip", "-br", "addr"], &["nft", "list", "ruleset"]] {
            let out = n.exec(cmd);
            s.push_str(&format!(
                "--- {} {cmd:?}\n{}{}",
                n.name,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        let kc = std::fs::read_to_string(n.kubelet.dir.path().join("config.yaml")).unwrap_or_default();
        s.push_str(&format!("--- {} kubelet config\n{kc}\n", n.name));
        let conf = std::fs::read_to_string(n.containerd.dir.path().join("cni/10-k8srs.conflist"))
            .unwrap_or_default();
        s.push_str(&format!("--- {} conflist\n{conf}\n", n.name));
    }
    s.push_str(&cluster.api.kubectl_ok(&["get", "pods", "-o", "wide"]));
    s
}

#[test]
fn pods_on_different_nodes_reach_each_other_by_pod_ip() {
    let mut cluster = NodeCluster::start(ClusterOptions { nodes: 2, ..Default::default() });
    let out = cluster.api.kubectl_stdin(&["apply", "-f", "-"], &pod("server", "node-1", SERVER));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let out = cluster.api.kubectl_stdin(&["apply", "-f", "-"], &pod("client", "node-0", "exec sleep 3600"));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let server_ip = cluster.wait_pod_ready("default", "server");
    let client_ip = cluster.wait_pod_ready("default", "client");
    let api = &cluster.api;

    // Each node holds a route to the other's pod CIDR via the other's address, and nothing
    // for its own (the bridge serves that).
    let cidr = |node: &str| api.kubectl_ok(&["get", "node", node, "-o", "jsonpath={.spec.podCIDR}"]);
    let (cidr0, cidr1) = (cidr("node-0"), cidr("node-1"));
    assert_ne!(cidr0, cidr1);
    let routes =
        String::from_utf8_lossy(&cluster.node("node-0").exec(&["ip", "route", "show", "proto", "77"]).stdout)
            .to_string();
    assert!(
        routes.contains(&format!("{cidr1} via {}", cluster.node("node-1").ip)),
        "node-0's routes: {routes}"
    );
    assert!(!routes.contains(&cidr0), "node-0 routes its own pod CIDR away: {routes}");

    // Pod to pod across nodes, by IP.
    let url = format!("http://{server_ip}:8080/");
    let body = wait_for_or(
        "client pod reaches server pod",
        || {
            let out = api.kubectl(&["exec", "client", "--", "wget", "-qO-", &url]);
            if out.status.success() {
                Ok(String::from_utf8_lossy(&out.stdout).to_string())
            } else {
                Err(String::from_utf8_lossy(&out.stderr).to_string())
            }
        },
        |last| diagnose(&cluster, last),
    );
    assert_eq!(body.trim(), "hello-from-server");
    // The server saw the client pod's own address: no masquerade between pods (httpd logs
    // it as an IPv4-mapped address, `[::ffff:a.b.c.d]:port`).
    let logs = api.kubectl_ok(&["logs", "server"]);
    assert!(logs.contains(&format!("{client_ip}]:")), "server log has no request from {client_ip}:\n{logs}");

    // The control-plane host (the hub, where this test runs) reaches pods through its
    // router-only hostgw.
    let out =
        std::process::Command::new("curl").args(["-sf", "--max-time", "5", &url]).output().expect("curl");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "hello-from-server");

    // Routes follow the Nodes: a node deleted (its kubelet stopped first, so it does not
    // register again) loses its route everywhere.
    cluster.nodes[1].kubelet.kill();
    let api = &cluster.api;
    api.kubectl_ok(&["delete", "node", "node-1", "--wait=false"]);
    wait_for(
        "node-0 drops the route to node-1's pods",
        Duration::from_secs(30),
        Duration::from_millis(250),
        || {
            let out = cluster.node("node-0").exec(&["ip", "route", "show", "proto", "77"]);
            (!String::from_utf8_lossy(&out.stdout).contains(&cidr1)).then_some(())
        },
    );
}

#[test]
fn hostgw_cleanup_removes_its_routes_and_masquerade() {
    let mut cluster = NodeCluster::start(ClusterOptions { nodes: 2, ..Default::default() });
    let node = &mut cluster.nodes[0];
    let ours = |node: &e2e::nodes::Node| {
        String::from_utf8_lossy(&node.exec(&["ip", "route", "show", "proto", "77"]).stdout).trim().to_owned()
    };
    assert!(!ours(node).is_empty(), "no route installed");
    let tables = String::from_utf8_lossy(&node.exec(&["nft", "list", "tables"]).stdout).to_string();
    assert!(tables.contains("table ip hostgw"), "no masquerade table: {tables}");
    node.hostgw.kill();
    let out = node.exec(&[e2e::bin("hostgw").to_str().unwrap(), "--cleanup"]);
    assert!(out.status.success(), "hostgw --cleanup: {}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(ours(node), "", "routes left behind");
    let tables = String::from_utf8_lossy(&node.exec(&["nft", "list", "tables"]).stdout).to_string();
    assert!(!tables.contains("hostgw"), "tables left behind: {tables}");
}
