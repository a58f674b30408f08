//! kube-rs (the client every other component uses) against our kube-apiserver: list, watch
//! and reflect pods while another task creates, updates and deletes them.

use std::collections::HashMap;
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, reflector, watcher};

use e2e::apiserver::KubeApiserver;
use e2e::{Etcd, EtcdOptions};

const PODS: usize = 40;

async fn client(api: &KubeApiserver) -> kube::Client {
    let kubeconfig = kube::config::Kubeconfig::read_from(&api.kubeconfig).expect("kubeconfig");
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await.expect("config");
    kube::Client::try_from(config).expect("client")
}

fn pod(name: &str) -> Pod {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "kube-rs"}},
        "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}
    }))
    .expect("pod")
}

#[derive(Debug, Clone, PartialEq)]
enum Change {
    Added(String),
    Modified(String, String),
    Deleted(String),
}

#[test]
fn kube_rs_lists_watches_and_reflects_pods_in_order() {
    let etcd = Etcd::start(EtcdOptions::default());
    let api = KubeApiserver::start(&etcd.endpoint(), &[]);
    let rt = e2e::runtime();
    rt.block_on(async {
        let client = client(&api).await;
        let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
        let ns = serde_json::from_value(serde_json::json!({"metadata": {"name": "kube-rs"}})).unwrap();
        namespaces.create(&PostParams::default(), &ns).await.expect("create namespace");
        let pods: Api<Pod> = Api::namespaced(client.clone(), "kube-rs");
        assert!(pods.list(&ListParams::default()).await.expect("list").items.is_empty());

        // A raw watch that records every event, and a reflector keeping a store.
        let (reader, writer) = reflector::store::<Pod>();
        let reflect = tokio::spawn(
            reflector(writer, watcher(pods.clone(), watcher::Config::default()))
                .applied_objects()
                .try_for_each(|_| async { Ok(()) }),
        );
        let mut events = kube::runtime::watcher(pods.clone(), watcher::Config::default()).boxed();
        // The initial (empty) list is done before the writer starts.
        loop {
            match events.try_next().await.expect("watch").expect("stream open") {
                watcher::Event::InitDone => break,
                watcher::Event::Init | watcher::Event::InitApply(_) => {}
                other => panic!("unexpected event before InitDone: {other:?}"),
            }
        }
        reader.wait_until_ready().await.expect("reflector ready");

        // The writer: create, relabel, delete each pod.
        let writer_api = pods.clone();
        let writer = tokio::spawn(async move {
            let mut expected = Vec::new();
            for i in 0..PODS {
                let name = format!("p{i:03}");
                writer_api.create(&PostParams::default(), &pod(&name)).await.expect("create");
                expected.push(Change::Added(name.clone()));
                let patch = serde_json::json!({"metadata": {"labels": {"step": "updated"}}});
                writer_api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch)).await.expect("patch");
                expected.push(Change::Modified(name.clone(), "updated".into()));
                if i % 2 == 0 {
                    // Unbound pods go at once, even with a grace period.
                    writer_api.delete(&name, &DeleteParams::default()).await.expect("delete");
                    expected.push(Change::Deleted(name));
                }
            }
            expected
        });

        let expected = writer.await.expect("writer");
        let mut seen = Vec::new();
        let mut last_rv = 0u64;
        while seen.len() < expected.len() {
            let ev = tokio::time::timeout(Duration::from_secs(20), events.try_next())
                .await
                .unwrap_or_else(|_| {
                    panic!("watch stalled after {} of {} changes", seen.len(), expected.len())
                })
                .expect("watch error")
                .expect("watch ended");
            let (change, pod) = match ev {
                watcher::Event::Apply(p) => {
                    let name = p.metadata.name.clone().unwrap();
                    let step = p.metadata.labels.as_ref().and_then(|l| l.get("step")).cloned();
                    match step {
                        Some(s) => (Change::Modified(name, s), p),
                        None => (Change::Added(name), p),
                    }
                }
                watcher::Event::Delete(p) => (Change::Deleted(p.metadata.name.clone().unwrap()), p),
                other => panic!("unexpected event {other:?}"),
            };
            let rv: u64 = pod.metadata.resource_version.as_deref().unwrap().parse().unwrap();
            assert!(rv > last_rv, "resourceVersions go up: {rv} after {last_rv}");
            last_rv = rv;
            seen.push(change);
        }
        assert_eq!(seen, expected, "every change, in order");

        // The reflector converges to the surviving pods (odd indexes), each updated.
        let want: HashMap<String, ()> =
            (0..PODS).filter(|i| i % 2 == 1).map(|i| (format!("p{i:03}"), ())).collect();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        loop {
            let state = reader.state();
            let names: HashMap<String, ()> =
                state.iter().map(|p| (p.metadata.name.clone().unwrap(), ())).collect();
            if names == want
                && state.iter().all(|p| p.metadata.labels.as_ref().and_then(|l| l.get("step")).is_some())
            {
                break;
            }
            assert!(tokio::time::Instant::now() < deadline, "reflector has {:?}", names.keys());
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let listed = pods.list(&ListParams::default().labels("step=updated")).await.expect("list");
        assert_eq!(listed.items.len(), PODS / 2);
        reflect.abort();
    });
}

#[test]
fn kube_rs_patches_strategic_json_and_apply() {
    use k8s_openapi::api::apps::v1::Deployment;
    let etcd = Etcd::start(EtcdOptions::default());
    let api = KubeApiserver::start(&etcd.endpoint(), &[]);
    let rt = e2e::runtime();
    rt.block_on(async {
        let client = client(&api).await;
        let deployments: Api<Deployment> = Api::namespaced(client, "default");
        let config = serde_json::json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "kr"},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": {"app": "kr"}},
                "template": {"metadata": {"labels": {"app": "kr"}}, "spec": {"containers": [
                    {"name": "a", "image": "a:1"}, {"name": "b", "image": "b:1"}
                ]}}
            }
        });
        // Server-side apply creates it.
        let d = deployments.patch("kr", &PatchParams::apply("kube-rs-e2e"), &Patch::Apply(&config)).await.unwrap();
        assert_eq!(d.metadata.managed_fields.as_ref().unwrap()[0].manager.as_deref(), Some("kube-rs-e2e"));
        // Strategic: one container changed by name, the other kept.
        let smp = serde_json::json!({"spec": {"template": {"spec": {"containers": [{"name": "b", "image": "b:2"}]}}}});
        let d = deployments.patch("kr", &PatchParams::default(), &Patch::Strategic(&smp)).await.unwrap();
        let images: Vec<_> =
            d.spec.as_ref().unwrap().template.spec.as_ref().unwrap().containers.iter().map(|c| c.image.clone().unwrap()).collect();
        assert_eq!(images, ["a:1", "b:2"]);
        // JSON patch.
        let ops: json_patch::Patch = serde_json::from_value(serde_json::json!([
            {"op": "replace", "path": "/spec/replicas", "value": 4}
        ]))
        .unwrap();
        let d = deployments.patch("kr", &PatchParams::default(), &Patch::Json::<()>(ops)).await.unwrap();
        assert_eq!(d.spec.as_ref().unwrap().replicas, Some(4));
        // Re-applying replicas 1 conflicts with the JSON patch's manager; forced, it wins.
        let err = deployments.patch("kr", &PatchParams::apply("kube-rs-e2e"), &Patch::Apply(&config)).await.unwrap_err();
        assert!(matches!(&err, kube::Error::Api(s) if s.code == 409), "{err:?}");
        let d = deployments.patch("kr", &PatchParams::apply("kube-rs-e2e").force(), &Patch::Apply(&config)).await.unwrap();
        assert_eq!(d.spec.as_ref().unwrap().replicas, Some(1));
        assert_eq!(d.spec.unwrap().template.spec.unwrap().containers[1].image.as_deref(), Some("b:1"));
    });
}

#[test]
fn kube_rs_streaming_list_gets_every_object_then_init_done() {
    use k8s_openapi::api::core::v1::ConfigMap;
    const N: usize = 1_500;
    let etcd = Etcd::start(EtcdOptions::default());
    let api = KubeApiserver::start(&etcd.endpoint(), &[]);
    let rt = e2e::runtime();
    rt.block_on(async {
        let client = client(&api).await;
        let cms: Api<ConfigMap> = Api::namespaced(client, "default");
        // More objects than a watcher's live-event buffer: the initial state is not capped.
        futures::stream::iter(0..N)
            .map(|i| {
                let cms = cms.clone();
                async move {
                    let cm: ConfigMap =
                        serde_json::from_value(serde_json::json!({"metadata": {"name": format!("s{i:04}")}}))
                            .unwrap();
                    cms.create(&PostParams::default(), &cm).await.map(|_| ())
                }
            })
            .buffer_unordered(16)
            .try_collect::<Vec<_>>()
            .await
            .expect("creates");
        let mut stream = watcher(cms.clone(), watcher::Config::default().streaming_lists()).boxed();
        let mut seen = std::collections::BTreeSet::new();
        let mut done = false;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        while !done {
            let ev = tokio::time::timeout_at(deadline, stream.try_next())
                .await
                .expect("timed out")
                .expect("watch")
                .expect("ended");
            match ev {
                watcher::Event::Init => {}
                watcher::Event::InitApply(cm) => {
                    assert!(seen.insert(cm.metadata.name.unwrap()), "an object twice");
                }
                watcher::Event::InitDone => done = true,
                other => panic!("unexpected before InitDone: {other:?}"),
            }
        }
        // kube-rs asks with resourceVersion=0, which upstream defines as "any state, the
        // newest preferred": the cache may still be a few writes behind the creates just
        // acknowledged. Those objects must then follow as ordinary ADDED events, once each.
        while seen.iter().filter(|n| n.starts_with('s')).count() < N {
            let ev = tokio::time::timeout_at(deadline, stream.try_next())
                .await
                .expect("timed out waiting for the objects the initial state lacked")
                .expect("watch")
                .expect("ended");
            match ev {
                watcher::Event::Apply(cm) => {
                    assert!(seen.insert(cm.metadata.name.unwrap()), "an object twice");
                }
                other => panic!("unexpected after InitDone: {other:?}"),
            }
        }
    });
    // The protocol checks, as upstream's.
    let out = api.kubectl(&["get", "--raw", "/api/v1/configmaps?watch=1&sendInitialEvents=true"]);
    assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("BadRequest"), "{out:?}");
}

/// An update without a resourceVersion is unconditional (upstream's GuaranteedUpdate): a
/// controller's status writes landing between the server's read and its write must not
/// turn it into a 409 (conformance: "ResourceQuota should be able to update and delete").
#[test]
fn unconditional_updates_survive_concurrent_status_writes() {
    use k8s_openapi::api::core::v1::ResourceQuota;

    let etcd = Etcd::start(EtcdOptions::default());
    let api = KubeApiserver::start(&etcd.endpoint(), &[]);
    let rt = e2e::runtime();
    rt.block_on(async {
        let client = client(&api).await;
        let quotas: Api<ResourceQuota> = Api::namespaced(client, "default");
        let quota = |cpu: usize| -> ResourceQuota {
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": "q"},
                "spec": {"hard": {"cpu": cpu.to_string()}},
            }))
            .expect("quota")
        };
        quotas.create(&PostParams::default(), &quota(1)).await.expect("create");
        // A controller's stand-in: status writes as fast as they go.
        let status_writer = {
            let quotas = quotas.clone();
            tokio::spawn(async move {
                for i in 0..300 {
                    let status = serde_json::json!({"status": {"used": {"cpu": format!("{i}m")}}});
                    quotas
                        .patch_status("q", &PatchParams::default(), &Patch::Merge(&status))
                        .await
                        .expect("status write");
                }
            })
        };
        let mut replaced = 0;
        while !status_writer.is_finished() {
            replaced += 1;
            let got = quotas.replace("q", &PostParams::default(), &quota(replaced)).await;
            let got = got.unwrap_or_else(|e| panic!("unconditional update {replaced}: {e}"));
            assert_eq!(got.spec.unwrap().hard.unwrap()["cpu"].0, replaced.to_string());
        }
        status_writer.await.expect("status writer");
        assert!(replaced > 1, "no update overlapped the status writes");
    });
}
