//! Fuzz tests of what the API server parses from clients: protobuf, JSON and YAML bodies
//! through every resource's create and update checks with field validation, JSON, merge and
//! strategic merge patches, server-side apply and managed fields, label and field
//! selectors, query strings, SPDY frames, quantities, the configuration files it reads, and
//! the JSON re-indenter of pretty responses. Mutated valid inputs must give an error (or a
//! result), never a panic. Bounded and deterministic here; `hack/fuzz.sh` runs them for
//! longer from random seeds.

use std::sync::{Arc, OnceLock};

use apiserver::field_validation::{FieldValidation, duplicate_fields};
use apiserver::fieldmanager::{self, Manager, fieldset};
use apiserver::handlers::{codec, query};
use apiserver::openapi::{OpenApi, PatchMeta};
use apiserver::patch::{json_patch, merge_patch, strategic};
use apiserver::registry::resource::Resource;
use apiserver::registry::resources;
use apiserver::selectors::{FieldSelector, LabelSelector};
use apiserver::{protobuf, serializer, spdy, validation};
use component_base::fuzz;
use serde_json::{Value, json};

const ITERATIONS: usize = 5000;

fn text(input: &[u8]) -> String {
    String::from_utf8_lossy(input).into_owned()
}

#[test]
fn protobuf_bodies() {
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "p", "namespace": "d", "labels": {"a": "b"}, "annotations": {"x": "y"}},
        "spec": {"containers": [{"name": "c", "image": "busybox", "args": ["sleep", "1"],
                 "resources": {"limits": {"cpu": "100m"}}, "ports": [{"containerPort": 80}]}]},
    });
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"k": "v"},
                    "binaryData": {"b": "AAEC"}});
    let seeds: Vec<Vec<u8>> = [pod, cm].iter().map(|v| protobuf::encode(v).expect("encodable")).collect();
    assert!(seeds.iter().all(|s| protobuf::decode(s).is_ok()), "seeds decode");
    fuzz::run("protobuf::decode", &seeds, ITERATIONS, |input| {
        let _ = protobuf::decode(input);
    });
}

#[test]
fn label_and_field_selectors() {
    let seeds: Vec<Vec<u8>> = [
        "app=web,tier!=db,env in (prod, staging),!legacy,version notin (1,2),has",
        "a.b/c-d_e==x,f",
        "metadata.name=a,spec.nodeName!=n1,status.phase=Running",
    ]
    .iter()
    .map(|s| s.as_bytes().to_vec())
    .collect();
    fuzz::run("selectors", &seeds, ITERATIONS, |input| {
        let s = text(input);
        let _ = LabelSelector::parse(&s);
        let _ = FieldSelector::parse(&s, &["spec.nodeName", "status.phase"]);
    });
}

#[test]
fn query_strings() {
    let seeds = vec![
        b"labelSelector=a%3Db&limit=500&continue=eyJ2Ijo&watch=1&timeoutSeconds=30&pretty=true".to_vec(),
        b"fieldSelector=metadata.name%3Dx&resourceVersion=0&resourceVersionMatch=NotOlderThan".to_vec(),
    ];
    fuzz::run("query::parse", &seeds, ITERATIONS, |input| {
        let q = query::parse(Some(&text(input)));
        let _ = q.get("limit");
    });
}

#[test]
fn pretty_indent_of_any_body() {
    let seeds = vec![
        br#"{"kind":"Status","metadata":{},"details":{"causes":[{"field":"a\"b","message":"x,y:{["}]},"code":422}"#
            .to_vec(),
        br#"[1,[],{},"\\",null,true,{"a":[{"b":{}}]}]"#.to_vec(),
    ];
    fuzz::run("serializer::indent", &seeds, ITERATIONS, |input| {
        let out = serializer::indent(input);
        // Valid JSON stays the same JSON.
        if let Ok(v) = serde_json::from_slice::<serde_json::Value>(input) {
            assert_eq!(serde_json::from_slice::<serde_json::Value>(&out).ok(), Some(v));
        }
    });
}

fn all_resources() -> &'static [Arc<Resource>] {
    static ALL: OnceLock<Vec<Arc<Resource>>> = OnceLock::new();
    ALL.get_or_init(resources::all)
}

fn openapi() -> &'static OpenApi {
    static API: OnceLock<OpenApi> = OnceLock::new();
    API.get_or_init(|| OpenApi::with_resources(all_resources().iter().map(|r| r.info.clone()).collect()))
}

fn patch_meta(r: &Resource) -> Option<PatchMeta<'static>> {
    openapi().patch_meta(r.info.group, r.info.version, r.info.kind)
}

/// The resource a body names by apiVersion and kind.
fn resource_of(obj: &Value) -> Option<&'static Resource> {
    let (api_version, kind) = (obj["apiVersion"].as_str()?, obj["kind"].as_str()?);
    all_resources()
        .iter()
        .map(Arc::as_ref)
        .find(|r| r.info.kind == kind && r.info.api_version() == api_version)
}

/// Valid objects of the kinds with the most validation, as clients send them.
fn object_seeds() -> Vec<Value> {
    let template = json!({
        "metadata": {"labels": {"app": "web"}},
        "spec": {
            "initContainers": [{"name": "init", "image": "busybox", "command": ["true"]}],
            "containers": [{
                "name": "web", "image": "nginx:1.25", "args": ["-g", "daemon off;"],
                "ports": [{"containerPort": 80, "name": "http", "protocol": "TCP"}],
                "env": [{"name": "A", "value": "1"}, {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
                "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"cpu": "1", "memory": "128Mi"}},
                "volumeMounts": [{"name": "data", "mountPath": "/data", "subPath": "x"}],
                "readinessProbe": {"httpGet": {"path": "/", "port": 80}, "periodSeconds": 5},
                "securityContext": {"runAsUser": 1000, "capabilities": {"drop": ["ALL"]}}
            }],
            "volumes": [{"name": "data", "emptyDir": {"sizeLimit": "1Gi"}}],
            "tolerations": [{"key": "k", "operator": "Exists", "effect": "NoSchedule"}],
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a", "b"]}]}]}}},
            "nodeSelector": {"disk": "ssd"}, "restartPolicy": "Always", "dnsPolicy": "ClusterFirst"
        }
    });
    let mut pod = template.clone();
    pod["apiVersion"] = json!("v1");
    pod["kind"] = json!("Pod");
    pod["metadata"]["name"] = json!("web-0");
    pod["metadata"]["namespace"] = json!("default");
    let mut job_template = template.clone();
    job_template["spec"]["restartPolicy"] = json!("Never");
    vec![
        pod,
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": "default"},
               "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web"}}, "template": template,
                        "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": 1}}}}),
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web", "namespace": "default"},
               "spec": {"selector": {"app": "web"}, "type": "NodePort", "ports": [{"name": "http", "port": 80, "targetPort": "http", "protocol": "TCP"}]}}),
        json!({"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "nightly", "namespace": "default"},
               "spec": {"schedule": "0 3 * * *", "timeZone": "Etc/UTC", "concurrencyPolicy": "Forbid",
                        "jobTemplate": {"spec": {"backoffLimit": 2, "completions": 3, "parallelism": 2, "template": job_template}}}}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": "r", "namespace": "default"},
               "rules": [{"apiGroups": [""], "resources": ["pods", "pods/log"], "verbs": ["get", "list"]}]}),
        json!({"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "metadata": {"name": "np", "namespace": "default"},
               "spec": {"podSelector": {"matchExpressions": [{"key": "app", "operator": "In", "values": ["web"]}]},
                        "ingress": [{"from": [{"ipBlock": {"cidr": "10.0.0.0/8", "except": ["10.1.0.0/16"]}}], "ports": [{"port": 80}]}]}}),
        json!({"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "q", "namespace": "default"},
               "spec": {"hard": {"pods": "10", "requests.cpu": "4", "limits.memory": "8Gi", "count/configmaps": "5"}}}),
    ]
}

/// What a create and an update of the object would check: the store's hook order, then
/// field validation against the schema, with duplicate fields from the raw body.
fn create_and_update_checks(body: &[u8], obj: Value, old: Option<&Value>) {
    let Some(r) = resource_of(&obj) else { return };
    let meta = patch_meta(r);
    let _ = FieldValidation::Strict.check_body(meta, r.info.kind, r.info.version, &obj, body);
    let _ = duplicate_fields(body);
    let Ok(mut obj) = (r.normalize)(obj) else { return };
    r.hooks.convert_in(&mut obj);
    if !obj.get("metadata").is_some_and(Value::is_object) {
        // The store's own checks refuse these before any hook runs.
        return;
    }
    let mut created = obj.clone();
    r.hooks.prepare_for_create(&mut created);
    r.hooks.default(&mut created);
    let _ =
        validation::object_meta(&created, r.info.namespaced, r.hooks.name_rule(), r.hooks.kube_finalizers());
    let _ = r.hooks.validate(&created);
    let _ = r.hooks.validate_create(&created);
    if let Some(old) = old {
        let mut updated = obj;
        r.hooks.prepare_for_update(&mut updated, old);
        r.hooks.default(&mut updated);
        let _ = validation::object_meta_update(&updated, old);
        let _ = r.hooks.validate(&updated);
        let _ = r.hooks.validate_update(&updated, old);
    }
}

#[test]
fn bodies_through_create_and_update_checks() {
    let objects = object_seeds();
    // Every seed passes the checks it is fuzzed through, so mutations start from the
    // deep end of the validation code, not from its first refusal.
    for o in &objects {
        let r = resource_of(o).expect("seed kind is served");
        let mut obj = (r.normalize)(o.clone()).expect("seed normalizes");
        r.hooks.convert_in(&mut obj);
        r.hooks.prepare_for_create(&mut obj);
        r.hooks.default(&mut obj);
        let errs = r.hooks.validate(&obj);
        assert!(errs.is_empty(), "seed {} is invalid: {errs:?}", r.info.kind);
    }
    let mut seeds: Vec<Vec<u8>> = objects.iter().map(|o| serde_json::to_vec(o).unwrap()).collect();
    seeds.extend(objects.iter().map(|o| serde_yaml::to_string(o).unwrap().into_bytes()));
    fuzz::run("create/update checks", &seeds, ITERATIONS, |input| {
        let old_of = |obj: &Value| objects.iter().find(|o| o["kind"] == obj["kind"]);
        // The input as a body, as a client sends it.
        if let Ok(obj) = codec::decode_json(input).or_else(|_| codec::decode_yaml(input)) {
            create_and_update_checks(input, obj.clone(), old_of(&obj));
        }
        // The input as edits of a valid object, which reach past the decoder every time.
        let obj = fuzz::json_from_choices(&objects, input);
        let body = serde_json::to_vec(&obj).expect("serializable");
        create_and_update_checks(&body, obj.clone(), old_of(&obj));
    });
}

#[test]
fn json_merge_and_strategic_patches() {
    let objects = object_seeds();
    let seeds: Vec<Vec<u8>> = [
        json!([{"op": "replace", "path": "/spec/replicas", "value": 5},
               {"op": "add", "path": "/metadata/labels/x~1y", "value": "z"},
               {"op": "move", "from": "/spec/template/spec/containers/0/args", "path": "/spec/template/spec/containers/0/command"},
               {"op": "test", "path": "/kind", "value": "Deployment"},
               {"op": "remove", "path": "/spec/template/spec/tolerations/0"},
               {"op": "copy", "from": "/metadata/labels", "path": "/spec/template/metadata/annotations"}]),
        json!({"metadata": {"labels": {"app": null, "b": "c"}},
               "spec": {"template": {"spec": {
                   "containers": [{"name": "web", "image": "nginx:1.26"}, {"name": "side", "image": "busybox"}],
                   "$setElementOrder/containers": [{"name": "side"}, {"name": "web"}],
                   "volumes": [{"name": "data", "$patch": "delete"}],
                   "$retainKeys": ["containers"]}}}}),
        json!({"spec": {"ports": [{"port": 443, "name": "https", "$patch": "replace"}], "$patch": "merge"},
               "$deleteFromPrimitiveList/finalizers": ["a"]}),
    ]
    .iter()
    .map(|v| serde_json::to_vec(v).unwrap())
    .collect();
    let patch_seeds: Vec<Value> = seeds.iter().map(|s| serde_json::from_slice(s).unwrap()).collect();
    fuzz::run("patches", &seeds, ITERATIONS, |input| {
        // The input as a patch body if it parses, else as edits of a valid patch.
        let patch = serde_json::from_slice::<Value>(input)
            .unwrap_or_else(|_| fuzz::json_from_choices(&patch_seeds, input));
        for original in &objects {
            let mut doc = original.clone();
            let _ = json_patch(&mut doc, &patch);
            let mut doc = original.clone();
            merge_patch(&mut doc, &patch);
            let r = resource_of(original).expect("seed kind is served");
            if let Ok(patched) = strategic::strategic_merge(original, &patch, patch_meta(r)) {
                create_and_update_checks(input, patched, Some(original));
            }
        }
    });
}

#[test]
fn server_side_apply_and_managed_fields() {
    let objects = object_seeds();
    let seeds: Vec<Vec<u8>> = objects.iter().map(|o| serde_json::to_vec(o).unwrap()).collect();
    fuzz::run("server-side apply", &seeds, ITERATIONS, |input| {
        let config = codec::decode_json(input).unwrap_or_else(|_| fuzz::json_from_choices(&objects, input));
        let Some(r) = resource_of(&config) else { return };
        let meta = patch_meta(r);
        let live = objects.iter().find(|o| o["kind"] == config["kind"]).expect("a seed of each kind");
        let api_version = r.info.api_version();
        let owner = Manager { name: "owner", api_version: &api_version, subresource: None };
        let mut owned = live.clone();
        fieldmanager::record_update(meta, None, &mut owned, &owner);
        let other = Manager { name: "other", api_version: &api_version, subresource: None };
        for force in [false, true] {
            if let Ok(applied) =
                fieldmanager::apply(meta, Some(&owned), owned.clone(), config.clone(), &other, force)
            {
                // What was recorded must read back as the same set.
                if let Some(entries) = applied["metadata"]["managedFields"].as_array() {
                    for e in entries {
                        let set = fieldset::from_fields_v1(&e["fieldsV1"]);
                        assert_eq!(fieldset::from_fields_v1(&fieldset::to_fields_v1(&set)), set);
                    }
                }
            }
        }
        let _ = fieldmanager::apply(meta, None, json!({}), config.clone(), &other, false);
        let status = Manager { name: "kubelet", api_version: &api_version, subresource: Some("status") };
        let mut updated = config;
        fieldmanager::record_update(meta, Some(live), &mut updated, &status);
        let _ = fieldset::set_of(meta, &updated, true);
    });
}

#[test]
fn quantities() {
    let seeds: Vec<Vec<u8>> = [
        "100m",
        "1.5Gi",
        "12e3",
        "0.000000001",
        "-7Ki",
        "9223372036854775807",
        "1E",
        "+.5",
        "123456789012345678901234567890n",
    ]
    .iter()
    .map(|s| s.as_bytes().to_vec())
    .collect();
    fuzz::run("quantities", &seeds, ITERATIONS, |input| {
        let s = text(input);
        let _ = validation::Quantity::parse(&s);
        if let Some(milli) = component_base::quantity::parse_milli(&s) {
            // A formatted quantity parses back to the same value.
            let shown =
                component_base::quantity::format_milli(milli, component_base::quantity::is_binary(&s));
            assert_eq!(component_base::quantity::parse_milli(&shown), Some(milli), "{s} shown as {shown}");
        }
        let _ = component_base::quantity::parse_value(&s);
    });
}

#[test]
fn spdy_frames() {
    let mut headers = spdy::HeaderEncoder::default();
    let block = headers.encode(&[("streamtype", "stdout"), ("port", "8080")]).expect("encodable");
    let mut stream = spdy::syn_stream(1, &block);
    stream.extend(spdy::data(1, false, b"hello"));
    stream.extend(spdy::control(6, 0, &7u32.to_be_bytes()));
    stream.extend(spdy::data(1, true, b""));
    let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
    fuzz::run("spdy::read_frame", &[stream], ITERATIONS, |input| {
        rt.block_on(async {
            let mut r = input;
            // Every frame consumes its 8-byte head, so this ends.
            while let Ok(Some(_)) = spdy::read_frame(&mut r).await {}
        });
    });
}

#[test]
fn configuration_files() {
    let seeds = vec![
        b"apiVersion: apiserver.config.k8s.io/v1
kind: EncryptionConfiguration
resources:
- resources: [secrets, configmaps.]
  providers:
  - aescbc: {keys: [{name: k1, secret: c2VjcmV0IGlzIHNlY3VyZSwgb3IgaXMgaXQ/ISEhISEhISE=}]}
  - secretbox: {keys: [{name: k2, secret: MTIzNDU2Nzg5MDEyMzQ1Njc4OTAxMjM0NTY3ODkwMTI=}]}
  - identity: {}
"
        .to_vec(),
        b"apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: None
  users: [system:kube-proxy]
  verbs: [watch]
  resources: [{group: '', resources: [endpoints, services]}]
- level: RequestResponse
  namespaces: [kube-system]
  nonResourceURLs: [/healthz*]
- level: Metadata
"
        .to_vec(),
    ];
    fuzz::run("configuration files", &seeds, ITERATIONS, |input| {
        let _ = apiserver::encryption::config::EncryptionConfig::parse(input);
        let _ = apiserver::audit::policy::Policy::parse(input);
    });
}

#[test]
fn websocket_channel_frames() {
    use futures::StreamExt;
    use tokio::io::AsyncWriteExt;
    use tokio_tungstenite::WebSocketStream;
    use tokio_tungstenite::tungstenite::protocol::{Role, WebSocketConfig};
    // What a client sends on an exec stream: masked binary frames, first byte the channel
    // (stdin, then a resize), then v5's close of stdin, then a close frame.
    let frame = |opcode: u8, payload: &[u8]| {
        let mask = [1u8, 2, 3, 4];
        let mut f = vec![0x80 | opcode, 0x80 | payload.len() as u8];
        f.extend(mask);
        f.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
        f
    };
    let mut seed = frame(2, b"\x00ls -l\n");
    seed.extend(frame(2, br#"\x04{"Width":80,"Height":24}"#));
    seed.extend(frame(2, &[255, 0]));
    seed.extend(frame(8, &[0x03, 0xe8]));
    let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
    fuzz::run("websocket frames", &[seed], ITERATIONS, |input| {
        rt.block_on(async {
            let (mut client, server) = tokio::io::duplex(64 << 10);
            // The limits `stream_translator` serves clients with (its MAX_MESSAGE).
            let config =
                WebSocketConfig::default().max_message_size(Some(4 << 20)).max_frame_size(Some(4 << 20));
            let mut ws = WebSocketStream::from_raw_socket(server, Role::Server, Some(config)).await;
            let _ = client.write_all(input).await;
            drop(client);
            // The translator's part: the channel byte, and for resize a JSON size.
            while let Some(Ok(msg)) = ws.next().await {
                if let Some((&channel, payload)) = msg.into_data().split_first()
                    && channel == 4
                {
                    let _ = serde_json::from_slice::<Value>(payload);
                }
            }
        });
    });
}
