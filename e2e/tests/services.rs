//! Service networking with real pods, in each kube-proxy mode: a two-node cluster
//! ([`NodeCluster`]: containerd, kubelet, hostgw and kube-proxy per node) with cluster DNS
//! (kube-dns behind the `kube-system/kube-dns` Service, the kubelets' `clusterDNS`), a
//! Deployment of busybox `httpd` pods behind a Service, and a client pod on node-0 that
//! reaches them the way an application does, by name:
//!
//! - by the Service's full name and its short name (the pod's search path), every ready
//!   backend answers, those on the other node too; pod to pod across nodes by IP;
//! - `sessionAffinity: ClientIP` sends every request of the client to one backend;
//! - a backend whose readiness probe fails leaves the EndpointSlice's ready endpoints and
//!   gets no more requests;
//! - with no endpoints left, a connection is refused at once (REJECT), not left to time out.
//!
//! Requests time out with busybox's `timeout`, not `wget -T`, which crashes in Debian's
//! busybox 1.35.
//!
//! Needs root, containerd, nftables and iptables (hack/install-deps.sh); a missing
//! prerequisite fails.

use std::collections::BTreeSet;
use std::process::Output;
use std::time::{Duration, Instant};

use e2e::containerd::BUSYBOX;
use e2e::json;
use e2e::nodes::{CLUSTER_DNS_IP, ClusterOptions, NodeCluster};

/// Pods start slowly on two busy cores.
const POD_WAIT: Duration = Duration::from_secs(180);
/// Rules and endpoints follow the API within seconds; generous for a loaded machine.
const WAIT: Duration = Duration::from_secs(90);
const POLL: Duration = Duration::from_millis(500);

/// The backends: busybox httpd answering its pod name on port 80, ready while
/// /tmp/ready exists, spread over both nodes.
fn deployment() -> String {
    let script =
        "mkdir -p /www && hostname > /www/index.html && touch /tmp/ready && exec httpd -f -p 80 -h /www";
    format!(
        r#"{{"apiVersion":"apps/v1","kind":"Deployment","metadata":{{"name":"web"}},
"spec":{{"replicas":3,"selector":{{"matchLabels":{{"app":"web"}}}},
"template":{{"metadata":{{"labels":{{"app":"web"}}}},
"spec":{{"terminationGracePeriodSeconds":1,
"topologySpreadConstraints":[{{"maxSkew":1,"topologyKey":"kubernetes.io/hostname","whenUnsatisfiable":"DoNotSchedule","labelSelector":{{"matchLabels":{{"app":"web"}}}}}}],
"containers":[{{"name":"httpd","image":"{BUSYBOX}","command":["sh","-c",{script}],
"ports":[{{"containerPort":80,"name":"http"}}],
"readinessProbe":{{"exec":{{"command":["cat","/tmp/ready"]}},"periodSeconds":1,"failureThreshold":1}}}}]}}}}}}}}"#,
        script = serde_json::to_string(script).unwrap()
    )
}

const SERVICE: &str = r#"{"apiVersion":"v1","kind":"Service","metadata":{"name":"web"},
"spec":{"selector":{"app":"web"},"ports":[{"name":"http","port":80,"targetPort":"http"}]}}"#;

/// The client: a long-running pod on node-0 (dnsPolicy ClusterFirst, the default).
fn client() -> String {
    format!(
        r#"{{"apiVersion":"v1","kind":"Pod","metadata":{{"name":"client"}},
"spec":{{"nodeName":"node-0","terminationGracePeriodSeconds":1,
"containers":[{{"name":"c","image":"{BUSYBOX}","command":["sleep","3600"]}}]}}}}"#
    )
}

/// A backend pod: name, IP, node.
#[derive(Clone, Debug)]
struct Backend {
    name: String,
    ip: String,
    node: String,
}

struct Test {
    cluster: NodeCluster,
}

impl Test {
    fn apply(&self, manifest: &str) {
        let out = self.cluster.api.kubectl_stdin(&["apply", "-f", "-"], manifest);
        assert!(out.status.success(), "apply: {}\n{manifest}", String::from_utf8_lossy(&out.stderr));
    }

    /// Panics with `what`, the last error and the state of the Service path.
    fn fail(&self, what: &str, last: &str) -> ! {
        panic!("{what}\nlast: {last}\n{}", self.cluster.service_diagnostics())
    }

    /// Polls `f` until it returns Ok, failing with diagnostics after `timeout`.
    fn wait<T>(&self, what: &str, timeout: Duration, mut f: impl FnMut() -> Result<T, String>) -> T {
        let deadline = Instant::now() + timeout;
        loop {
            let last = match f() {
                Ok(v) => return v,
                Err(e) => e,
            };
            if Instant::now() >= deadline {
                self.fail(&format!("timed out after {timeout:?} waiting for {what}"), &last);
            }
            std::thread::sleep(POLL);
        }
    }

    /// `sh -c script` in pod `pod`.
    fn exec(&self, pod: &str, script: &str) -> Output {
        self.cluster.api.kubectl(&["exec", pod, "--", "sh", "-c", script])
    }

    /// `n` HTTP requests from the client pod to `url`, each on a new connection: the body
    /// (a backend's name) of each, or its error.
    fn requests(&self, url: &str, n: usize, timeout_s: u32) -> Result<Vec<Result<String, String>>, String> {
        let script = format!(
            "for i in $(seq {n}); do if out=$(timeout {timeout_s} wget -qO- {url} 2>&1); then echo \"OK $out\"; \
             else echo \"ERR $out\" | tr '\\n' ' '; echo; fi; done"
        );
        let out = self.exec("client", &script);
        if !out.status.success() {
            return Err(format!("kubectl exec: {}", String::from_utf8_lossy(&out.stderr)));
        }
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        let answers: Vec<Result<String, String>> = text
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| match l.strip_prefix("OK ") {
                Some(name) => Ok(name.trim().to_owned()),
                None => Err(l.to_owned()),
            })
            .collect();
        if answers.len() != n {
            return Err(format!("{} answers to {n} requests: {text}", answers.len()));
        }
        Ok(answers)
    }

    /// `n` requests that must all succeed, each answered by one of `allowed`: the
    /// backends that answered.
    fn answered_by(&self, url: &str, n: usize, allowed: &[&Backend]) -> Result<Vec<String>, String> {
        let mut names = Vec::new();
        for a in self.requests(url, n, 5)? {
            let name = a.map_err(|e| format!("a request to {url} failed: {e}"))?;
            if !allowed.iter().any(|b| b.name == name) {
                return Err(format!("{url} answered by {name:?}, not one of {:?}", names_of(allowed)));
            }
            names.push(name);
        }
        Ok(names)
    }

    /// The `web` pods once `n` of them are Ready, each with its IP and node.
    fn ready_backends(&self, n: usize) -> Vec<Backend> {
        self.wait(&format!("{n} web pods Ready"), POD_WAIT, || {
            let out = self.cluster.api.kubectl(&["get", "pods", "-l", "app=web", "-o", "json"]);
            if !out.status.success() {
                return Err(String::from_utf8_lossy(&out.stderr).to_string());
            }
            let list = json(&String::from_utf8_lossy(&out.stdout));
            let mut ready = Vec::new();
            for p in list["items"].as_array().into_iter().flatten() {
                let is_ready = p["status"]["conditions"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|c| c["type"] == "Ready" && c["status"] == "True");
                let ip = p["status"]["podIP"].as_str().unwrap_or_default();
                if is_ready && !ip.is_empty() && p["metadata"]["deletionTimestamp"].is_null() {
                    ready.push(Backend {
                        name: p["metadata"]["name"].as_str().unwrap_or_default().to_owned(),
                        ip: ip.to_owned(),
                        node: p["spec"]["nodeName"].as_str().unwrap_or_default().to_owned(),
                    });
                }
            }
            if ready.len() == n { Ok(ready) } else { Err(format!("{} ready: {ready:?}", ready.len())) }
        })
    }

    /// The endpoints of the `web` Service's EndpointSlices: (address, ready).
    fn web_endpoints(&self) -> Result<Vec<(String, bool)>, String> {
        let out = self.cluster.api.kubectl(&[
            "get",
            "endpointslices",
            "-l",
            "kubernetes.io/service-name=web",
            "-o",
            "json",
        ]);
        if !out.status.success() {
            return Err(String::from_utf8_lossy(&out.stderr).to_string());
        }
        let list = json(&String::from_utf8_lossy(&out.stdout));
        let mut eps = Vec::new();
        for slice in list["items"].as_array().into_iter().flatten() {
            for ep in slice["endpoints"].as_array().into_iter().flatten() {
                // An unset ready condition means ready (the API's rule).
                let ready = ep["conditions"]["ready"].as_bool().unwrap_or(true);
                for a in ep["addresses"].as_array().into_iter().flatten() {
                    eps.push((a.as_str().unwrap_or_default().to_owned(), ready));
                }
            }
        }
        Ok(eps)
    }
}

fn names_of(bs: &[&Backend]) -> Vec<String> {
    bs.iter().map(|b| b.name.clone()).collect()
}

fn scenario(mode: &str) {
    let cluster = NodeCluster::start(ClusterOptions {
        nodes: 2,
        kube_proxy: Some(mode.into()),
        cluster_dns: true,
        ..Default::default()
    });
    let t = Test { cluster };
    t.apply(&deployment());
    t.apply(SERVICE);
    t.apply(&client());
    let backends = t.ready_backends(3);
    t.wait("the client pod Ready", POD_WAIT, || {
        let out = t.cluster.api.kubectl(&[
            "get",
            "pod",
            "client",
            "-o",
            "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}",
        ]);
        (String::from_utf8_lossy(&out.stdout) == "True").then_some(()).ok_or_else(|| "not ready".to_owned())
    });
    let all: Vec<&Backend> = backends.iter().collect();
    let all_names: BTreeSet<String> = backends.iter().map(|b| b.name.clone()).collect();

    // The spread puts a backend on the other node, so what follows crosses nodes.
    let remote: Vec<&Backend> = backends.iter().filter(|b| b.node == "node-1").collect();
    assert!(!remote.is_empty(), "no backend on node-1 (the client is on node-0): {backends:?}");

    // The kubelet points the pod's resolver at the cluster DNS Service.
    let resolv = String::from_utf8_lossy(&t.exec("client", "cat /etc/resolv.conf").stdout).to_string();
    assert!(
        resolv.contains(&format!("nameserver {CLUSTER_DNS_IP}"))
            && resolv.contains("default.svc.cluster.local"),
        "client's resolv.conf: {resolv}"
    );

    // Pod to pod across nodes by IP.
    for b in &remote {
        let url = format!("http://{}/", b.ip);
        let body = t.wait(&format!("client reaches {} on node-1 by pod IP", b.name), WAIT, || {
            let out = t.exec("client", &format!("timeout 5 wget -qO- {url}"));
            let body = String::from_utf8_lossy(&out.stdout).trim().to_owned();
            if out.status.success() {
                Ok(body)
            } else {
                Err(String::from_utf8_lossy(&out.stderr).to_string())
            }
        });
        assert_eq!(body, b.name, "{url} answered by another pod");
    }

    // By name through kube-dns and the ClusterIP: the full name, then the short one through
    // the search path; every ready backend answers, the remote ones included.
    // The EndpointSlice controller and kube-proxy follow the pods' readiness a moment later.
    let all_ips: BTreeSet<(String, bool)> = backends.iter().map(|b| (b.ip.clone(), true)).collect();
    t.wait("the 3 backends ready in the EndpointSlice", WAIT, || {
        let eps = t.web_endpoints()?;
        if eps.iter().cloned().collect::<BTreeSet<_>>() == all_ips {
            Ok(())
        } else {
            Err(format!("endpoints {eps:?}"))
        }
    });
    let fqdn = "http://web.default.svc.cluster.local/";
    t.wait("the Service answers by its full name", WAIT, || t.answered_by(fqdn, 1, &all));
    for url in [fqdn, "http://web/"] {
        // Every answer comes from a backend; batches are retried (kube-proxy may still be
        // catching up with the slice) until one of 30 requests got an answer from each.
        t.wait(&format!("every backend answering 30 requests to {url}"), WAIT, || {
            let seen: BTreeSet<String> = t.answered_by(url, 30, &all)?.into_iter().collect();
            if seen == all_names { Ok(()) } else { Err(format!("answered by {seen:?} of {all_names:?}")) }
        });
    }

    // Session affinity: once kube-proxy has the change, one backend answers every request.
    t.cluster.api.kubectl_ok(&[
        "patch",
        "svc",
        "web",
        "--type=merge",
        "-p",
        r#"{"spec":{"sessionAffinity":"ClientIP"}}"#,
    ]);
    let sticky = t.wait("requests stick to one backend", WAIT, || {
        let seen: BTreeSet<String> = t.answered_by("http://web/", 10, &all)?.into_iter().collect();
        if seen.len() == 1 {
            Ok(seen.into_iter().next().unwrap())
        } else {
            Err(format!("answered by {seen:?}"))
        }
    });
    let again = t.wait("10 more requests", WAIT, || t.answered_by("http://web/", 10, &all));
    if again.iter().any(|n| *n != sticky) {
        t.fail(
            "sessionAffinity: ClientIP did not keep the client on one backend",
            &format!("{sticky} then {again:?}"),
        );
    }
    t.cluster.api.kubectl_ok(&[
        "patch",
        "svc",
        "web",
        "--type=merge",
        "-p",
        r#"{"spec":{"sessionAffinity":"None","sessionAffinityConfig":null}}"#,
    ]);
    t.wait("requests spread again without affinity", WAIT, || {
        let seen: BTreeSet<String> = t.answered_by("http://web/", 20, &all)?.into_iter().collect();
        if seen.len() > 1 { Ok(()) } else { Err(format!("answered only by {seen:?}")) }
    });

    // Readiness: a backend whose probe fails leaves the ready endpoints, and traffic.
    let victim = remote[0].clone();
    let out = t.exec(&victim.name, "rm /tmp/ready");
    assert!(
        out.status.success(),
        "rm /tmp/ready in {}: {}",
        victim.name,
        String::from_utf8_lossy(&out.stderr)
    );
    t.wait(&format!("{}'s endpoint not ready", victim.name), WAIT, || {
        let eps = t.web_endpoints()?;
        let mine: Vec<bool> = eps.iter().filter(|(a, _)| *a == victim.ip).map(|(_, r)| *r).collect();
        let others_ready = eps.iter().filter(|(a, r)| *a != victim.ip && *r).count();
        if mine == [false] && others_ready == 2 { Ok(()) } else { Err(format!("endpoints {eps:?}")) }
    });
    let rest: Vec<&Backend> = backends.iter().filter(|b| b.name != victim.name).collect();
    let rest_names: BTreeSet<String> = rest.iter().map(|b| b.name.clone()).collect();
    t.wait(&format!("no request reaches the unready {}", victim.name), WAIT, || {
        t.answered_by("http://web/", 20, &rest)
    });
    let seen: BTreeSet<String> =
        t.wait("20 more requests", WAIT, || t.answered_by("http://web/", 20, &rest)).into_iter().collect();
    if seen != rest_names {
        t.fail("the ready backends did not all answer", &format!("{seen:?} of {rest_names:?}"));
    }

    // No endpoints: a connection is refused at once (REJECT), it does not time out (DROP).
    let cluster_ip = t.cluster.api.kubectl_ok(&["get", "svc", "web", "-o", "jsonpath={.spec.clusterIP}"]);
    t.cluster.api.kubectl_ok(&["scale", "deployment", "web", "--replicas=0"]);
    t.wait("the web pods gone and no endpoints left", POD_WAIT, || {
        let pods = t.cluster.api.kubectl_ok(&["get", "pods", "-l", "app=web", "-o", "name"]);
        let eps = t.web_endpoints()?;
        if pods.trim().is_empty() && eps.is_empty() {
            Ok(())
        } else {
            Err(format!("pods {pods:?}, endpoints {eps:?}"))
        }
    });
    let url = format!("http://{cluster_ip}/");
    t.wait("a request to the emptied Service refused", WAIT, || match t.requests(&url, 1, 2)?.remove(0) {
        Err(e) if e.contains("refused") => Ok(()),
        other => Err(format!("{other:?}")),
    });
    // Timed inside the pod, so kubectl exec's own latency does not count.
    let script = format!(
        "a=$(cut -d' ' -f1 /proc/uptime); timeout 10 wget -qO- {url} 2>&1; rc=$?; b=$(cut -d' ' -f1 /proc/uptime); \
         echo; echo \"rc=$rc start=$a end=$b\""
    );
    let out = t.exec("client", &script);
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let last = text.lines().last().unwrap_or_default();
    let field = |k: &str| -> f64 {
        last.split_whitespace()
            .find_map(|w| w.strip_prefix(k))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no {k} in {text:?}"))
    };
    let elapsed = field("end=") - field("start=");
    assert_ne!(field("rc="), 0.0, "a request to a Service without endpoints succeeded: {text}");
    if !text.contains("refused") || elapsed >= 5.0 {
        t.fail(
            &format!(
                "a request to a Service without endpoints should be refused at once (took {elapsed:.2}s)"
            ),
            &text,
        );
    }
}

#[test]
fn services_route_real_pods_with_nftables() {
    scenario("nftables");
}

#[test]
fn services_route_real_pods_with_iptables() {
    scenario("iptables");
}
