//! CustomResourceDefinitions on our kube-apiserver, driven by kubectl and kube-rs: the
//! CronTab CRD of upstream's documentation (two versions, a CEL rule, a default, printer
//! columns, status and scale), then its objects through every path a user takes, and the
//! CRD's deletion taking its objects with it.

use std::time::Duration;

use e2e::apiserver::KubeApiserver;
use e2e::{Etcd, EtcdOptions, wait_for};

const CRD: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: crontabs.stable.example.com
spec:
  group: stable.example.com
  scope: Namespaced
  names: {plural: crontabs, singular: crontab, kind: CronTab, shortNames: [ct]}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            description: The schedule and the image to run.
            x-kubernetes-validations:
            - rule: "self.replicas <= self.maxReplicas"
              message: "replicas must be at most maxReplicas"
            properties:
              cronSpec: {type: string, description: "When to run, in cron syntax."}
              image: {type: string}
              replicas: {type: integer, minimum: 0, default: 1}
              maxReplicas: {type: integer, default: 5}
          status:
            type: object
            properties:
              replicas: {type: integer}
              labelSelector: {type: string}
    subresources:
      status: {}
      scale: {specReplicasPath: .spec.replicas, statusReplicasPath: .status.replicas, labelSelectorPath: .status.labelSelector}
    additionalPrinterColumns:
    - {name: Spec, type: string, jsonPath: .spec.cronSpec}
    - {name: Replicas, type: integer, jsonPath: .spec.replicas}
    - {name: Age, type: date, jsonPath: .metadata.creationTimestamp}
  - name: v2
    served: true
    storage: false
    schema:
      openAPIV3Schema:
        type: object
        x-kubernetes-preserve-unknown-fields: true
"#;

fn crontab(name: &str, spec: &str) -> String {
    format!("apiVersion: stable.example.com/v1\nkind: CronTab\nmetadata: {{name: {name}}}\nspec: {spec}\n")
}

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn establish(api: &KubeApiserver) {
    let out = api.kubectl_stdin(&["apply", "-f", "-"], CRD);
    assert!(out.status.success(), "{}", stderr(&out));
    api.kubectl_ok(&[
        "wait",
        "--for=condition=Established",
        "crd/crontabs.stable.example.com",
        "--timeout=30s",
    ]);
    // Served (discovery and the resource) once established.
    wait_for("crontabs served", Duration::from_secs(30), Duration::from_millis(200), || {
        api.kubectl(&["get", "crontabs"]).status.success().then_some(())
    });
}

#[test]
fn crontab_crd_with_kubectl() {
    let etcd = Etcd::start(EtcdOptions::default());
    let api = KubeApiserver::start(&etcd.endpoint(), &[]);
    establish(&api);

    let crd = api.kubectl_ok(&["get", "crd", "crontabs.stable.example.com", "-o", "json"]);
    let crd: serde_json::Value = serde_json::from_str(&crd).unwrap();
    let conditions: Vec<(String, String)> = crd["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (c["type"].as_str().unwrap().to_string(), c["status"].as_str().unwrap().to_string()))
        .collect();
    assert!(conditions.contains(&("NamesAccepted".into(), "True".into())), "{conditions:?}");
    assert!(conditions.contains(&("Established".into(), "True".into())), "{conditions:?}");
    assert_eq!(crd["status"]["acceptedNames"]["kind"], "CronTab");
    assert_eq!(crd["status"]["storedVersions"], serde_json::json!(["v1"]));
    assert_eq!(
        crd["metadata"]["finalizers"],
        serde_json::json!(["customresourcecleanup.apiextensions.k8s.io"])
    );

    // The CRD's status strategy: a status write keeps spec, labels and annotations.
    let mut write = crd.clone();
    write["spec"]["names"]["shortNames"] = serde_json::json!(["changed"]);
    write["metadata"]["labels"] = serde_json::json!({"l": "2"});
    write["status"]["storedVersions"] = serde_json::json!(["v1"]);
    let (code, body) = api.request(
        "PUT",
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/crontabs.stable.example.com/status",
        &["Content-Type: application/json"],
        Some(write.to_string().as_bytes()),
    );
    assert_eq!(code, 200, "{body}");
    let after: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(after["spec"]["names"]["shortNames"], serde_json::json!(["ct"]));
    assert!(after["metadata"]["labels"].is_null(), "{}", after["metadata"]);

    // Discovery: short name and both versions.
    let resources = api.kubectl_ok(&["api-resources", "--api-group=stable.example.com"]);
    assert!(resources.contains("crontabs") && resources.contains("ct"), "{resources}");
    let v2 = api.kubectl_ok(&["get", "--raw", "/apis/stable.example.com/v2"]);
    assert!(v2.contains("\"crontabs\""), "{v2}");

    // A watch started now sees everything below.
    let mut watch = api.kubectl_spawn(&["get", "crontabs", "--watch", "-o", "name"]);

    // Create: the default is applied; printer columns in `kubectl get`.
    let out = api
        .kubectl_stdin(&["apply", "-f", "-"], &crontab("daily", "{cronSpec: '0 0 * * *', image: busybox}"));
    assert!(out.status.success(), "{}", stderr(&out));
    let table = api.kubectl_ok(&["get", "crontabs"]);
    let header: Vec<&str> = table.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(header, ["NAME", "SPEC", "REPLICAS", "AGE"], "{table}");
    assert!(table.lines().nth(1).unwrap().contains("0 0 * * *"), "{table}");
    assert_eq!(api.kubectl_ok(&["get", "ct", "daily", "-o", "jsonpath={.spec.replicas}"]), "1");

    // kubectl explain reads the published schema.
    let explain = api.kubectl_ok(&["explain", "crontab.spec"]);
    assert!(explain.contains("cronSpec") && explain.contains("When to run, in cron syntax."), "{explain}");

    // The CEL rule refuses, with its message.
    let out =
        api.kubectl_stdin(&["apply", "-f", "-"], &crontab("big", "{cronSpec: '* * * * *', replicas: 9}"));
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("spec: Invalid value: \"object\": replicas must be at most maxReplicas"),
        "{}",
        stderr(&out)
    );
    // Schema validation: a wrong type.
    let out = api.kubectl_stdin(&["apply", "-f", "-"], &crontab("typed", "{cronSpec: 5}"));
    assert!(
        stderr(&out).contains("spec.cronSpec in body must be of type string: \"integer\""),
        "{}",
        stderr(&out)
    );

    // Unknown fields: refused under strict validation (kubectl's default), pruned without.
    let bogus = crontab("bogus", "{cronSpec: '* * * * *', bogus: 1}");
    let out = api.kubectl_stdin(&["apply", "--validate=strict", "-f", "-"], &bogus);
    assert!(stderr(&out).contains("unknown field \"spec.bogus\""), "{}", stderr(&out));
    let out = api.kubectl_stdin(&["apply", "--validate=false", "-f", "-"], &bogus);
    assert!(out.status.success(), "{}", stderr(&out));
    let spec = api.kubectl_ok(&["get", "ct", "bogus", "-o", "jsonpath={.spec}"]);
    assert!(!spec.contains("bogus"), "{spec}");

    // Scale through /scale; status through /status.
    api.kubectl_ok(&["scale", "crontab", "daily", "--replicas=3"]);
    assert_eq!(api.kubectl_ok(&["get", "ct", "daily", "-o", "jsonpath={.spec.replicas}"]), "3");
    api.kubectl_ok(&[
        "patch",
        "ct",
        "daily",
        "--subresource=status",
        "--type=merge",
        "-p",
        r#"{"status":{"replicas":2,"labelSelector":"app=cron"}}"#,
    ]);
    let scale = api.kubectl_ok(&[
        "get",
        "--raw",
        "/apis/stable.example.com/v1/namespaces/default/crontabs/daily/scale",
    ]);
    let scale: serde_json::Value = serde_json::from_str(&scale).unwrap();
    assert_eq!(
        (scale["spec"]["replicas"].as_i64(), scale["status"]["replicas"].as_i64()),
        (Some(3), Some(2))
    );
    assert_eq!(scale["status"]["selector"], "app=cron");
    // A status write through the main resource is ignored (status is a subresource).
    api.kubectl_ok(&["patch", "ct", "daily", "--type=merge", "-p", r#"{"status":{"replicas":7}}"#]);
    assert_eq!(api.kubectl_ok(&["get", "ct", "daily", "-o", "jsonpath={.status.replicas}"]), "2");
    // Strategic merge patch is not served for custom resources (415), as upstream.
    let out = api.kubectl(&["patch", "ct", "daily", "--type=strategic", "-p", r#"{"spec":{"image":"x"}}"#]);
    assert!(stderr(&out).contains("strategic-merge-patch+json is not supported"), "{}", stderr(&out));

    // Server-side apply by two managers conflicts on the field, not the whole spec.
    let ssa = |manager: &str, image: &str| {
        api.kubectl_stdin(
            &["apply", "--server-side", &format!("--field-manager={manager}"), "-f", "-"],
            &crontab("ssa", &format!("{{cronSpec: '1 * * * *', image: {image}}}")),
        )
    };
    assert!(ssa("first", "a").status.success());
    let out = ssa("second", "b");
    assert!(
        stderr(&out).contains("conflict with \"first\"") && stderr(&out).contains(".spec.image"),
        "{}",
        stderr(&out)
    );

    // Written at v1, read at v2 (the None conversion changes only apiVersion), and back.
    let at_v2 =
        api.kubectl_ok(&["get", "--raw", "/apis/stable.example.com/v2/namespaces/default/crontabs/daily"]);
    let at_v2: serde_json::Value = serde_json::from_str(&at_v2).unwrap();
    assert_eq!(
        (at_v2["apiVersion"].as_str(), at_v2["spec"]["replicas"].as_i64()),
        (Some("stable.example.com/v2"), Some(3))
    );
    let (code, body) = api.request(
        "POST",
        "/apis/stable.example.com/v2/namespaces/default/crontabs",
        &["Content-Type: application/json"],
        Some(br#"{"apiVersion":"stable.example.com/v2","kind":"CronTab","metadata":{"name":"from-v2"},"spec":{"cronSpec":"2 * * * *"}}"#),
    );
    assert_eq!(code, 201, "{body}");
    assert_eq!(
        api.kubectl_ok(&["get", "ct", "from-v2", "-o", "jsonpath={.apiVersion}"]),
        "stable.example.com/v1"
    );
    let stored = etcd.etcdctl_ok(&[
        "get",
        "/registry/stable.example.com/crontabs/default/from-v2",
        "--print-value-only",
    ]);
    assert!(stored.contains("\"apiVersion\":\"stable.example.com/v1\""), "{stored}");

    // The watch saw the creations and the changes (one line per event).
    let lines = watch.read_lines(6, Duration::from_secs(20)).to_vec();
    let count =
        |name: &str| lines.iter().filter(|l| *l == &format!("crontab.stable.example.com/{name}")).count();
    assert!(count("daily") >= 3 && count("bogus") == 1 && count("ssa") == 1, "{lines:?}");
    drop(watch);

    // Deleting the CRD deletes its objects, then the CRD; nothing is left in etcd.
    api.kubectl_ok(&["delete", "crd", "crontabs.stable.example.com", "--timeout=60s"]);
    let left = api.kubectl(&["get", "crd", "crontabs.stable.example.com"]);
    assert!(!left.status.success());
    let keys = etcd.etcdctl_ok(&["get", "--prefix", "--keys-only", "/registry/stable.example.com/"]);
    assert!(keys.trim().is_empty(), "{keys}");
    let out = api.kubectl(&["get", "--raw", "/apis/stable.example.com/v1"]);
    assert!(!out.status.success(), "the group is still served");
}

#[test]
fn crd_validation_and_naming() {
    let etcd = Etcd::start(EtcdOptions::default());
    let api = KubeApiserver::start(&etcd.endpoint(), &[]);
    let crd = |name: &str, group: &str, plural: &str, kind: &str, extra: &str| {
        format!(
            "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata: {{name: {name}}}\nspec:\n  group: {group}\n  scope: Cluster\n  names: {{plural: {plural}, kind: {kind}}}\n  versions:\n  - name: v1\n    served: true\n    storage: true\n    schema:\n      openAPIV3Schema:\n        type: object\n{extra}"
        )
    };
    // Name must be plural.group; group needs a dot; a rule must compile; a field needs a type.
    let cases = [
        (
            crd("wrong.a.example.com", "a.example.com", "things", "Thing", ""),
            "must be spec.names.plural+\".\"+spec.group",
        ),
        (crd("things.nodot", "nodot", "things", "Thing", ""), "should be a domain with at least one dot"),
        (
            crd(
                "things.b.example.com",
                "b.example.com",
                "things",
                "Thing",
                "        x-kubernetes-validations: [{rule: 'self.a <'}]\n",
            ),
            "compilation failed",
        ),
        (
            crd(
                "things.c.example.com",
                "c.example.com",
                "things",
                "Thing",
                "        properties:\n          spec: {description: untyped}\n",
            ),
            "must not be empty for specified object fields",
        ),
    ];
    for (doc, message) in cases {
        let out = api.kubectl_stdin(&["create", "-f", "-"], &doc);
        assert!(!out.status.success() && stderr(&out).contains(message), "{message}: {}", stderr(&out));
    }
    // Two CRDs of one group wanting one kind: the second's names are not accepted.
    let first = crd("things.d.example.com", "d.example.com", "things", "Thing", "");
    let second = crd("others.d.example.com", "d.example.com", "others", "Thing", "");
    for doc in [&first, &second] {
        let out = api.kubectl_stdin(&["create", "-f", "-"], doc);
        assert!(out.status.success(), "{}", stderr(&out));
    }
    api.kubectl_ok(&["wait", "--for=condition=Established", "crd/things.d.example.com", "--timeout=30s"]);
    let reason =
        wait_for("the conflict reported", Duration::from_secs(30), Duration::from_millis(200), || {
            let r = api.kubectl_ok(&[
                "get",
                "crd",
                "others.d.example.com",
                "-o",
                "jsonpath={.status.conditions[?(@.type==\"NamesAccepted\")].reason}",
            ]);
            (!r.is_empty()).then_some(r)
        });
    // Both want the singular "thing" (from the kind) first: upstream checks plural, singular,
    // short names, kind, then list kind.
    assert_eq!(reason, "SingularConflict");
}

/// kube-rs as its users write it: `#[derive(CustomResource)]`, the CRD it generates,
/// and `Api::<CronTab>` for create, get, list, apply, status, watch and delete.
mod kube_rs {
    use futures::{StreamExt, TryStreamExt};
    use kube::CustomResourceExt;
    use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
    use kube::runtime::watcher;
    use schemars::JsonSchema;
    use serde::{Deserialize, Serialize};

    use super::*;

    #[derive(kube::CustomResource, Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
    #[kube(group = "batch.example.com", version = "v1", kind = "CronTab", namespaced)]
    #[kube(status = "CronTabStatus", shortname = "ct")]
    pub struct CronTabSpec {
        pub cron_spec: String,
        pub image: String,
        pub replicas: i32,
    }

    #[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
    pub struct CronTabStatus {
        pub active: i32,
    }

    #[test]
    fn derived_custom_resource_round_trips() {
        let etcd = Etcd::start(EtcdOptions::default());
        let api = KubeApiserver::start(&etcd.endpoint(), &[]);
        let rt = e2e::runtime();
        rt.block_on(async {
            let kubeconfig = kube::config::Kubeconfig::read_from(&api.kubeconfig).expect("kubeconfig");
            let config =
                kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await.expect("config");
            let client = kube::Client::try_from(config).expect("client");
            let crds: Api<
                k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
            > = Api::all(client.clone());
            crds.create(&PostParams::default(), &CronTab::crd()).await.expect("create the CRD");
            let tabs: Api<CronTab> = Api::namespaced(client.clone(), "default");
            // Served once established.
            let deadline = std::time::Instant::now() + Duration::from_secs(30);
            while tabs.list(&ListParams::default()).await.is_err() {
                assert!(std::time::Instant::now() < deadline, "crontabs never served");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            let mut events = watcher(tabs.clone(), watcher::Config::default()).boxed();
            loop {
                if let watcher::Event::InitDone = events.try_next().await.expect("watch").expect("open") {
                    break;
                }
            }

            let spec = CronTabSpec { cron_spec: "* * * * *".into(), image: "busybox".into(), replicas: 1 };
            let created = tabs
                .create(&PostParams::default(), &CronTab::new("one", spec.clone()))
                .await
                .expect("create");
            assert_eq!(created.spec, spec);
            let got = tabs.get("one").await.expect("get");
            assert_eq!(got.spec.image, "busybox");
            assert_eq!(tabs.list(&ListParams::default()).await.expect("list").items.len(), 1);

            // Server-side apply and a status write.
            let applied = serde_json::json!({
                "apiVersion": "batch.example.com/v1", "kind": "CronTab",
                "metadata": {"name": "one"},
                "spec": {"cronSpec": "* * * * *", "image": "alpine", "replicas": 2},
            });
            let params = PatchParams::apply("e2e").force();
            let out = tabs.patch("one", &params, &Patch::Apply(&applied)).await.expect("apply");
            assert_eq!((out.spec.image.as_str(), out.spec.replicas), ("alpine", 2));
            let status = serde_json::json!({"status": {"active": 3}});
            let out = tabs
                .patch_status("one", &PatchParams::default(), &Patch::Merge(&status))
                .await
                .expect("status");
            assert_eq!(out.status, Some(CronTabStatus { active: 3 }));

            tabs.delete("one", &DeleteParams::default()).await.expect("delete");
            // The watch saw the object come, change and go.
            let mut seen = Vec::new();
            while !seen.iter().any(|e: &String| e.starts_with("delete")) {
                let ev = tokio::time::timeout(Duration::from_secs(20), events.try_next())
                    .await
                    .expect("watch event in time")
                    .expect("watch")
                    .expect("open");
                match ev {
                    watcher::Event::Apply(o) => seen.push(format!("apply {}", o.spec.image)),
                    watcher::Event::Delete(o) => seen.push(format!("delete {}", o.spec.image)),
                    _ => {}
                }
            }
            assert_eq!(seen.first().map(String::as_str), Some("apply busybox"), "{seen:?}");
            assert!(seen.contains(&"apply alpine".to_string()), "{seen:?}");
        });
    }
}

/// The conversion webhook of the test below: `v1` holds `hostPort: "host:port"`, `v2`
/// holds `host` and `port` (the shape of upstream's conformance spec). `/fail` refuses.
fn convert_hosts(path: &str, request: &serde_json::Value) -> serde_json::Value {
    use serde_json::json;
    if path == "/fail" {
        return json!({"result": {"status": "Failure", "message": "conversion refused by the test"}});
    }
    let to = request["desiredAPIVersion"].as_str().unwrap_or_default().to_string();
    let objects: Vec<serde_json::Value> = request["objects"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|o| {
            let mut o = o.clone();
            let from = o["apiVersion"].as_str().unwrap_or_default().to_string();
            let fields = o.as_object_mut().expect("an object");
            if from.ends_with("/v1") && to.ends_with("/v2") {
                let hp = fields
                    .remove("hostPort")
                    .and_then(|v| v.as_str().map(str::to_string))
                    .unwrap_or_default();
                let (host, port) = hp.split_once(':').unwrap_or((&hp, ""));
                fields.insert("host".into(), json!(host));
                fields.insert("port".into(), json!(port));
            } else if from.ends_with("/v2") && to.ends_with("/v1") {
                let host =
                    fields.remove("host").and_then(|v| v.as_str().map(str::to_string)).unwrap_or_default();
                let port =
                    fields.remove("port").and_then(|v| v.as_str().map(str::to_string)).unwrap_or_default();
                fields.insert("hostPort".into(), json!(format!("{host}:{port}")));
            }
            fields.insert("apiVersion".into(), json!(to));
            o
        })
        .collect();
    json!({"convertedObjects": objects, "result": {"status": "Success"}})
}

/// `spec.conversion.strategy: Webhook`: objects written in one version and read in the
/// other go through the CRD's webhook (get, list of objects stored in both versions,
/// watch, a storage version change); a failing or unreachable webhook fails the request
/// with upstream's error, while reads that need no conversion still work.
#[test]
fn crd_conversion_webhook() {
    use base64::Engine;
    use e2e::certs::TestCa;
    use e2e::webhook::WebhookServer;
    use serde_json::Value;

    let ca = TestCa::new("e2e conversion webhook CA");
    let mut hook = WebhookServer::start(&ca, convert_hosts);
    let etcd = Etcd::start(EtcdOptions::default());
    let api = KubeApiserver::start(&etcd.endpoint(), &[]);
    let bundle = base64::engine::general_purpose::STANDARD.encode(ca.pem());
    let crd = |conversion: &str, storage: &str| {
        let (v1, v2) = (storage == "v1", storage == "v2");
        format!(
            r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {{name: hosts.conv.example.com}}
spec:
  group: conv.example.com
  scope: Namespaced
  names: {{plural: hosts, singular: host, kind: Host}}
  conversion: {conversion}
  versions:
  - name: v1
    served: true
    storage: {v1}
    schema: {{openAPIV3Schema: {{type: object, properties: {{hostPort: {{type: string}}}}}}}}
  - name: v2
    served: true
    storage: {v2}
    schema: {{openAPIV3Schema: {{type: object, properties: {{host: {{type: string}}, port: {{type: string}}}}}}}}
"#
        )
    };
    // A Webhook strategy needs a client configuration and a review version.
    let out = api.kubectl_stdin(&["create", "-f", "-"], &crd("{strategy: Webhook}", "v1"));
    let err = stderr(&out);
    assert!(
        !out.status.success() && err.contains("spec.conversion.webhookClientConfig: Required value"),
        "{err}"
    );
    assert!(err.contains("spec.conversion.conversionReviewVersions: Required value"), "{err}");

    let webhook = |path: &str| {
        format!(
            "{{strategy: Webhook, webhook: {{conversionReviewVersions: [v1, v1beta1], clientConfig: {{url: '{}', caBundle: {bundle}}}}}}}",
            hook.url(path)
        )
    };
    let out = api.kubectl_stdin(&["apply", "-f", "-"], &crd(&webhook("/convert"), "v1"));
    assert!(out.status.success(), "{}", stderr(&out));
    api.kubectl_ok(&["wait", "--for=condition=Established", "crd/hosts.conv.example.com", "--timeout=30s"]);
    let raw = |version: &str, rest: &str| {
        format!("/apis/conv.example.com/{version}/namespaces/default/hosts{rest}")
    };
    let get = |version: &str, rest: &str| -> Value {
        serde_json::from_str(&api.kubectl_ok(&["get", "--raw", &raw(version, rest)])).expect("JSON")
    };
    let create = |doc: String| {
        wait_for("a custom resource created", Duration::from_secs(30), Duration::from_millis(200), || {
            api.kubectl_stdin(&["create", "-f", "-"], &doc).status.success().then_some(())
        })
    };
    create(
        "apiVersion: conv.example.com/v1\nkind: Host\nmetadata: {name: a}\nhostPort: localhost:8080\n".into(),
    );
    let a = get("v2", "/a");
    assert_eq!(a["apiVersion"], "conv.example.com/v2");
    assert_eq!(
        (a["host"].as_str(), a["port"].as_str(), a.get("hostPort")),
        (Some("localhost"), Some("8080"), None)
    );
    assert_eq!(a["metadata"]["name"], "a");
    assert!(hook.calls() > 0, "the webhook was never called");
    // Written in v2: stored as v1.
    create("apiVersion: conv.example.com/v2\nkind: Host\nmetadata: {name: b}\nhost: example.org\nport: \"443\"\n".into());
    assert_eq!(get("v1", "/b")["hostPort"], "example.org:443");
    assert_eq!(get("v2", "/b")["host"], "example.org");

    // Lists and watches in either version hold only that version's objects.
    let check_list = |version: &str, names: &[&str]| {
        let list = get(version, "");
        let items = list["items"].as_array().expect("items");
        let mut got: Vec<&str> = items.iter().filter_map(|i| i["metadata"]["name"].as_str()).collect();
        got.sort();
        assert_eq!(got, names, "{list}");
        for i in items {
            assert_eq!(i["apiVersion"], format!("conv.example.com/{version}"), "{i}");
            let field = if version == "v1" { "hostPort" } else { "host" };
            assert!(i[field].is_string(), "{version} item without {field}: {i}");
        }
    };
    check_list("v1", &["a", "b"]);
    check_list("v2", &["a", "b"]);
    let events = api.kubectl_ok(&["get", "--raw", &raw("v2", "?watch=true&timeoutSeconds=1")]);
    let added: Vec<Value> = events.lines().filter_map(|l| serde_json::from_str::<Value>(l).ok()).collect();
    assert_eq!(added.len(), 2, "{events}");
    assert!(added.iter().all(|e| e["type"] == "ADDED" && e["object"]["host"].is_string()), "{events}");

    // v2 becomes the storage version: new objects are stored as v2, old ones stay v1, and
    // both read back in either version.
    let patch = r#"[{"op":"replace","path":"/spec/versions/0/storage","value":false},{"op":"replace","path":"/spec/versions/1/storage","value":true}]"#;
    api.kubectl_ok(&["patch", "crd", "hosts.conv.example.com", "--type=json", "-p", patch]);
    create(
        "apiVersion: conv.example.com/v1\nkind: Host\nmetadata: {name: c}\nhostPort: c.example:80\n".into(),
    );
    check_list("v1", &["a", "b", "c"]);
    check_list("v2", &["a", "b", "c"]);
    let stored =
        api.kubectl_ok(&["get", "crd", "hosts.conv.example.com", "-o", "jsonpath={.status.storedVersions}"]);
    assert_eq!(stored, r#"["v1","v2"]"#);

    // A webhook that refuses: reads that need it fail with its message (500), reads that
    // do not still work.
    let out = api.kubectl_stdin(&["apply", "-f", "-"], &crd(&webhook("/fail"), "v2"));
    assert!(out.status.success(), "{}", stderr(&out));
    let err = wait_for(
        "reads of v1 objects in v2 fail",
        Duration::from_secs(30),
        Duration::from_millis(200),
        || {
            let out = api.kubectl(&["get", "--raw", &raw("v2", "/a")]);
            (!out.status.success()).then(|| stderr(&out))
        },
    );
    assert!(
        err.contains("InternalError")
            && err.contains(
                "conversion webhook for conv.example.com/v2, Kind=Host failed: conversion refused by the test"
            ),
        "{err}"
    );
    // Stored as v2 (after the storage change above): no conversion to read it in v2.
    api.kubectl_ok(&["get", "--raw", &raw("v2", "/c")]);
    let out = api.kubectl(&["get", "--raw", &raw("v2", "")]);
    assert!(
        !out.status.success() && stderr(&out).contains("conversion refused by the test"),
        "{}",
        stderr(&out)
    );

    // An unreachable webhook fails the same way, naming where it was called.
    let out = api.kubectl_stdin(&["apply", "-f", "-"], &crd(&webhook("/convert"), "v2"));
    assert!(out.status.success(), "{}", stderr(&out));
    wait_for("the webhook converts again", Duration::from_secs(30), Duration::from_millis(200), || {
        api.kubectl(&["get", "--raw", &raw("v2", "/a")]).status.success().then_some(())
    });
    hook.stop();
    let out = api.kubectl(&["get", "--raw", &raw("v1", "/c")]);
    let err = stderr(&out);
    assert!(
        !out.status.success()
            && err.contains("conversion webhook for")
            && err.contains(&hook.url("/convert")),
        "{err}"
    );
}

/// APIServices (`apiregistration.k8s.io/v1`): one per built-in group version, written at
/// start; one per group version a CRD serves, kept in step with the CRDs; a service-backed
/// one checked as upstream checks it (and reported unavailable: no proxying yet); upstream's
/// validation and table.
#[test]
fn api_services_for_built_in_and_crd_groups() {
    use serde_json::Value;

    // The front proxy: the client certificate the API server presents to extension
    // servers, which trust its CA.
    let front_proxy = e2e::certs::TestCa::new("front-proxy-ca");
    let proxy_client = front_proxy.client_cert("front-proxy-client", None);
    let etcd = Etcd::start(EtcdOptions::default());
    let api = KubeApiserver::start(
        &etcd.endpoint(),
        &[
            &format!("--proxy-client-cert-file={}", proxy_client.cert.display()),
            &format!("--proxy-client-key-file={}", proxy_client.key.display()),
        ],
    );
    let wait = Duration::from_secs(30);
    let poll = Duration::from_millis(200);
    let get = |name: &str| -> Option<Value> {
        let out = api.kubectl(&["get", "apiservice", name, "-o", "json"]);
        out.status.success().then(|| serde_json::from_slice(&out.stdout).expect("JSON"))
    };
    let apps = wait_for("v1.apps registered", wait, poll, || get("v1.apps"));
    assert_eq!(apps["metadata"]["labels"]["kube-aggregator.kubernetes.io/automanaged"], "onstart");
    assert_eq!(
        apps["spec"],
        serde_json::json!({"group": "apps", "version": "v1", "groupPriorityMinimum": 17800, "versionPriority": 15})
    );
    let cond = &apps["status"]["conditions"][0];
    assert_eq!(
        (cond["type"].as_str(), cond["status"].as_str(), cond["reason"].as_str()),
        (Some("Available"), Some("True"), Some("Local"))
    );
    let core = get("v1.").expect("the core group's APIService");
    assert_eq!(
        (core["spec"]["groupPriorityMinimum"].as_i64(), core["spec"]["versionPriority"].as_i64()),
        (Some(18000), Some(1))
    );
    let table = api.kubectl_ok(&["get", "apiservices"]);
    assert!(
        table.lines().next().unwrap_or_default().split_whitespace().eq([
            "NAME",
            "SERVICE",
            "AVAILABLE",
            "AGE"
        ]),
        "{table}"
    );
    assert!(
        table.lines().any(|l| l.split_whitespace().take(3).eq(["v2.autoscaling", "Local", "True"])),
        "{table}"
    );

    // A CRD's served versions get APIServices of their own, put back when deleted.
    establish(&api);
    for v in ["v1", "v2"] {
        let s = wait_for("a CRD version registered", wait, poll, || get(&format!("{v}.stable.example.com")));
        assert_eq!(s["metadata"]["labels"]["kube-aggregator.kubernetes.io/automanaged"], "true");
        assert_eq!(
            (s["spec"]["groupPriorityMinimum"].as_i64(), s["spec"]["versionPriority"].as_i64()),
            (Some(1000), Some(100))
        );
    }
    // Built-in ones are written at start only: a deleted one stays deleted (as upstream,
    // until the server restarts); CRD ones come back.
    api.kubectl_ok(&["delete", "apiservice", "v1.apps"]);
    api.kubectl_ok(&["delete", "apiservice", "v1.stable.example.com"]);
    wait_for("the CRD's APIService back", wait, poll, || get("v1.stable.example.com"));
    assert!(get("v1.apps").is_none(), "v1.apps was put back");

    // Service-backed: checked step by step, then served through the proxy.
    let serving_ca = e2e::certs::TestCa::new("wardle-ca");
    let bundle = {
        use base64::Engine;
        base64::engine::general_purpose::STANDARD.encode(serving_ca.pem())
    };
    let remote = format!(
        "apiVersion: apiregistration.k8s.io/v1\nkind: APIService\nmetadata: {{name: v1alpha1.wardle.example.com}}\nspec: {{group: wardle.example.com, version: v1alpha1, groupPriorityMinimum: 2000, versionPriority: 200, caBundle: {bundle}, service: {{namespace: default, name: wardle}}}}\n"
    );
    let out = api.kubectl_stdin(&["create", "-f", "-"], &remote);
    assert!(out.status.success(), "{}", stderr(&out));
    let reason_is = |reason: &str| {
        wait_for(&format!("condition {reason}"), wait, poll, || {
            let s = get("v1alpha1.wardle.example.com")?;
            let c = s["status"]["conditions"].as_array()?.iter().find(|c| c["type"] == "Available")?.clone();
            (c["reason"] == reason).then_some(c)
        })
    };
    let c = reason_is("ServiceNotFound");
    assert_eq!(
        (c["status"].as_str(), c["message"].as_str()),
        (Some("False"), Some("service/wardle in \"default\" is not present"))
    );
    let s = get("v1alpha1.wardle.example.com").unwrap();
    assert_eq!(s["spec"]["service"]["port"], 443, "the default port");
    let row = api.kubectl_ok(&["get", "apiservice", "v1alpha1.wardle.example.com", "--no-headers"]);
    assert!(
        row.split_whitespace().take(4).eq([
            "v1alpha1.wardle.example.com",
            "default/wardle",
            "False",
            "(ServiceNotFound)"
        ]),
        "{row}"
    );
    // Unavailable: its paths answer 503, as upstream.
    let err =
        api.kubectl_err(&["get", "--raw", "/apis/wardle.example.com/v1alpha1/namespaces/default/flunders"]);
    assert!(err.contains("ServiceUnavailable") && err.contains("service unavailable"), "{err}");
    let svc = "apiVersion: v1\nkind: Service\nmetadata: {name: wardle, namespace: default}\nspec: {ports: [{port: 443, targetPort: 8443}]}\n";
    let out = api.kubectl_stdin(&["create", "-f", "-"], svc);
    assert!(out.status.success(), "{}", stderr(&out));
    let c = reason_is("EndpointsNotFound");
    assert_eq!(c["message"], "cannot find endpoints for service/wardle in \"default\"");
    // The extension server's address: not loopback (Endpoints refuse it), still this machine.
    let dummy = e2e::netns::DummyAddress::create();
    let port = e2e::free_port(dummy.ip);
    let eps = format!(
        "apiVersion: v1\nkind: Endpoints\nmetadata: {{name: wardle, namespace: default}}\nsubsets: [{{addresses: [{{ip: {}}}], ports: [{{port: {port}}}]}}]\n",
        dummy.ip
    );
    let out = api.kubectl_stdin(&["create", "-f", "-"], &eps);
    assert!(out.status.success(), "{}", stderr(&out));
    let c = reason_is("FailedDiscoveryCheck");
    let url = format!("https://{}:{port}/apis/wardle.example.com/v1alpha1", dummy.ip);
    let message = c["message"].as_str().unwrap_or_default();
    assert!(
        message.starts_with(&format!("failing or missing response from {url}: "))
            && message.contains("connection refused"),
        "{message}"
    );
    let mut server = e2e::extension_server::ExtensionServer::start(
        std::net::SocketAddr::new(dummy.ip.into(), port),
        &serving_ca,
        "wardle.default.svc",
        &front_proxy.cert,
        |req| match req.path.as_str() {
            "/apis/wardle.example.com/v1alpha1" => (
                hyper::StatusCode::OK,
                serde_json::json!({
                    "kind": "APIResourceList", "apiVersion": "v1", "groupVersion": "wardle.example.com/v1alpha1",
                    "resources": [
                        {"name": "flunders", "singularName": "flunder", "namespaced": true, "kind": "Flunder",
                         "verbs": ["create", "get", "list"], "shortNames": ["fl"]},
                        {"name": "flunders/status", "singularName": "", "namespaced": true, "kind": "Flunder",
                         "verbs": ["get", "update"]},
                    ],
                }),
            ),
            "/apis/wardle.example.com/v1alpha1/namespaces/default/flunders" => (
                hyper::StatusCode::OK,
                serde_json::json!({
                    "kind": "FlunderList", "apiVersion": "wardle.example.com/v1alpha1", "metadata": {},
                    // Who the server was told asked.
                    "items": [{"metadata": {"name": req.user.clone().unwrap_or_default(), "namespace": "default"}}],
                }),
            ),
            _ => (hyper::StatusCode::NOT_FOUND, serde_json::json!({"kind": "Status", "code": 404})),
        },
    );
    let c = reason_is("Passed");
    assert_eq!((c["status"].as_str(), c["message"].as_str()), (Some("True"), Some("all checks passed")));
    let list =
        api.kubectl_ok(&["get", "--raw", "/apis/wardle.example.com/v1alpha1/namespaces/default/flunders"]);
    let list: Value = serde_json::from_str(&list).expect("JSON");
    assert_eq!(list["items"][0]["metadata"]["name"], "admin", "{list}");
    let seen = server.seen();
    let proxied = seen.iter().rfind(|r| r.path.ends_with("/flunders")).expect("the proxied request");
    assert!(proxied.groups.iter().any(|g| g == "system:masters") && !proxied.authorization, "{proxied:?}");
    let check =
        seen.iter().find(|r| r.path == "/apis/wardle.example.com/v1alpha1").expect("the discovery check");
    assert_eq!(
        (check.user.as_deref(), check.groups.clone()),
        (Some("system:kube-aggregator"), vec!["system:masters".to_string()])
    );
    // Discovery merges the group: the group list, the group, aggregated discovery (kubectl).
    let group: Value =
        serde_json::from_str(&api.kubectl_ok(&["get", "--raw", "/apis/wardle.example.com"])).expect("JSON");
    assert_eq!(group["preferredVersion"]["groupVersion"], "wardle.example.com/v1alpha1", "{group}");
    let groups = api.kubectl_ok(&["api-versions"]);
    assert!(groups.lines().any(|l| l == "wardle.example.com/v1alpha1"), "{groups}");
    let resources = api.kubectl_ok(&["api-resources", "--api-group=wardle.example.com", "--no-headers"]);
    assert!(
        resources.split_whitespace().eq(["flunders", "fl", "wardle.example.com/v1alpha1", "true", "Flunder"]),
        "{resources}"
    );
    // The extension server gone: unavailable again, and its paths answer 503.
    server.stop();
    reason_is("FailedDiscoveryCheck");
    let err =
        api.kubectl_err(&["get", "--raw", "/apis/wardle.example.com/v1alpha1/namespaces/default/flunders"]);
    assert!(err.contains("ServiceUnavailable"), "{err}");
    api.kubectl_ok(&["delete", "apiservice", "v1alpha1.wardle.example.com"]);
    let err = api.kubectl_err(&["get", "--raw", "/apis/wardle.example.com"]);
    assert!(err.contains("NotFound"), "{err}");
    drop(dummy);

    // Upstream's validation.
    let bad = "apiVersion: apiregistration.k8s.io/v1\nkind: APIService\nmetadata: {name: wrong}\nspec: {group: foo.example.com, version: v1, groupPriorityMinimum: 0, versionPriority: 1001}\n";
    let out = api.kubectl_stdin(&["create", "-f", "-"], bad);
    let err = stderr(&out);
    assert!(!out.status.success(), "{err}");
    for want in [
        "metadata.name: Invalid value: \"wrong\": must be `spec.version+\".\"+spec.group`: \"v1.foo.example.com\"",
        "spec.groupPriorityMinimum: Invalid value: 0: must be positive and less than 20000",
        "spec.versionPriority: Invalid value: 1001: must be positive and less than 1000",
    ] {
        assert!(err.contains(want), "{want}\n{err}");
    }

    // The CRD gone, so are its APIServices.
    api.kubectl_ok(&["delete", "crd", "crontabs.stable.example.com"]);
    wait_for("the CRD's APIServices removed", wait, poll, || {
        (get("v1.stable.example.com").is_none() && get("v2.stable.example.com").is_none()).then_some(())
    });
}
