//! `pods/<name>/proxy` and `services/<name>/proxy`: the API server proxies to a pod's IP,
//! and to an endpoint of a service, itself (kubectl's `get --raw .../proxy/`, the
//! dashboard-style URLs). The "pod" is an HTTP server (busybox httpd) in a network
//! namespace of its own; etcd, the API server and the clients run in the namespace that
//! reaches it (loopback addresses are never proxied to, as upstream). Needs root.

use std::process::{Command, Stdio};
use std::time::Duration;

use e2e::apiserver::KubeApiserver;
use e2e::netns::Network;
use e2e::{Etcd, EtcdOptions, json, wait_for};
use serde_json::{Value, json};

fn get(api: &KubeApiserver, path: &str) -> (u16, String) {
    api.request("GET", path, &[], None)
}

fn create(api: &KubeApiserver, obj: Value) {
    let out = api.kubectl_stdin(&["create", "-f", "-"], &obj.to_string());
    assert!(out.status.success(), "create: {}", String::from_utf8_lossy(&out.stderr));
}

/// Kills the httpd (started by PID) when the test ends, however it ends.
struct Httpd(std::process::Child);

impl Drop for Httpd {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn pod_and_service_proxy() {
    let net = Network::create(1);
    let pod_ip = net.ip(0).to_string();
    let www = tempfile::tempdir().unwrap();
    std::fs::write(www.path().join("index.html"), "hello from the pod\n").unwrap();
    let _httpd = Httpd(
        Command::new("ip")
            .args([
                "netns",
                "exec",
                net.ns(0),
                "busybox",
                "httpd",
                "-f",
                "-p",
                &format!("{pod_ip}:8080"),
                "-h",
            ])
            .arg(www.path())
            .stdin(Stdio::null())
            .spawn()
            .expect("busybox httpd"),
    );

    std::thread::scope(|s| {
        s.spawn(|| {
            net.enter_hub();
            let etcd = Etcd::start(EtcdOptions::default());
            let api = KubeApiserver::start(&etcd.endpoint(), &[]);

            create(&api, json!({ "apiVersion": "v1", "kind": "Pod", "metadata": { "name": "web", "namespace": "default" },
                "spec": { "containers": [{ "name": "c", "image": "busybox", "ports": [{ "containerPort": 8080 }] }] } }));
            let mut pod = json(&api.kubectl_ok(&["get", "pod", "web", "-o", "json"]));
            pod["status"]["phase"] = json!("Running");
            pod["status"]["podIP"] = json!(pod_ip);
            pod["status"]["podIPs"] = json!([{ "ip": pod_ip }]);
            let out = api.kubectl_stdin(&["replace", "--subresource=status", "-f", "-"], &pod.to_string());
            assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));

            // The pod, by port number; the path and query go along.
            let body = wait_for("the pod's server through pods/proxy", Duration::from_secs(20), Duration::from_millis(200), || {
                let (code, body) = get(&api, "/api/v1/namespaces/default/pods/web:8080/proxy/index.html?x=1");
                (code == 200).then_some(body)
            });
            assert_eq!(body, "hello from the pod\n");
            let raw = api.kubectl_ok(&["get", "--raw", "/api/v1/namespaces/default/pods/http:web:8080/proxy/"]);
            assert_eq!(raw, "hello from the pod\n");
            // No port: the first port a container declares (upstream; the conformance
            // ReplicaSet and ReplicationController specs dial pods this way).
            let raw = api.kubectl_ok(&["get", "--raw", "/api/v1/namespaces/default/pods/web/proxy/"]);
            assert_eq!(raw, "hello from the pod\n");

            // The service, by port name and by port number, to the pod behind its endpoints.
            create(&api, json!({ "apiVersion": "v1", "kind": "Service", "metadata": { "name": "web", "namespace": "default" },
                "spec": { "ports": [{ "name": "http", "port": 80, "targetPort": 8080 }] } }));
            let (code, body) = get(&api, "/api/v1/namespaces/default/services/web:http/proxy/");
            assert_eq!(code, 404, "no endpoints yet: {body}");
            assert!(body.contains("endpoints \\\"web\\\" not found"), "{body}");
            create(&api, json!({ "apiVersion": "v1", "kind": "Endpoints", "metadata": { "name": "web", "namespace": "default" },
                "subsets": [{ "addresses": [{ "ip": pod_ip, "targetRef": { "kind": "Pod", "namespace": "default", "name": "web" } }],
                              "ports": [{ "name": "http", "port": 8080 }] }] }));
            for path in ["/api/v1/namespaces/default/services/web:http/proxy/", "/api/v1/namespaces/default/services/web:80/proxy/index.html"] {
                let (code, body) = get(&api, path);
                assert_eq!((code, body.as_str()), (200, "hello from the pod\n"), "{path}");
            }
            let (code, body) = get(&api, "/api/v1/namespaces/default/services/web:81/proxy/");
            assert_eq!(code, 503, "{body}");
            assert!(body.contains("no service port 81 found for service \\\"web\\\""), "{body}");

            // Never to loopback (a pod claiming 127.0.0.1 reaches nothing of the server's).
            pod = json(&api.kubectl_ok(&["get", "pod", "web", "-o", "json"]));
            pod["status"]["podIP"] = json!("127.0.0.1");
            pod["status"]["podIPs"] = json!([{ "ip": "127.0.0.1" }]);
            let out = api.kubectl_stdin(&["replace", "--subresource=status", "-f", "-"], &pod.to_string());
            assert!(out.status.success());
            let (code, body) = get(&api, "/api/v1/namespaces/default/pods/web:8080/proxy/");
            assert_eq!(code, 400, "{body}");
            assert!(body.contains("address not allowed"), "{body}");
        })
        .join()
        .expect("the test thread");
    });
}
