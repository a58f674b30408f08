//! Codec tests: round trips through our encoder, bytes built with the k8s-pb (prost) structs
//! and captured from kubectl, and malformed input (which must be a 400, never a panic).

use std::collections::{BTreeMap, BTreeSet};

use k8s_pb::api::apps::v1 as apps;
use k8s_pb::api::core::v1 as core;
use k8s_pb::apimachinery::pkg::apis::meta::v1 as meta;
use k8s_pb::apimachinery::pkg::runtime;
use k8s_pb::apimachinery::pkg::util::intstr::IntOrString;
use prost::Message as _;
use serde_json::{Value, json};

use super::wire::{WireType, put_bytes, put_key, put_varint};
use super::*;

/// `k8s\0` + Unknown, built with the k8s-pb (prost) structs.
fn envelope(api_version: &str, kind: &str, raw: Vec<u8>) -> Vec<u8> {
    let unknown = runtime::Unknown {
        type_meta: Some(runtime::TypeMeta { api_version: Some(api_version.into()), kind: Some(kind.into()) }),
        raw: Some(raw),
        content_encoding: Some(String::new()),
        content_type: Some(String::new()),
    };
    let mut out = MAGIC.to_vec();
    out.extend(unknown.encode_to_vec());
    out
}

/// The `raw` of one of our encodings.
fn raw_of(body: &[u8]) -> Vec<u8> {
    assert_eq!(&body[..4], MAGIC);
    let unknown = runtime::Unknown::decode(&body[4..]).expect("our envelope decodes with prost");
    unknown.raw.unwrap_or_default()
}

fn round_trip(v: &Value) -> Value {
    let body = encode(v).unwrap_or_else(|| panic!("no protobuf form for {v}"));
    decode(&body).unwrap_or_else(|e| panic!("decoding our own encoding: {e:?}"))
}

fn deployment() -> Value {
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": "web",
            "namespace": "demo",
            "uid": "6f1c2c1e-3b0a-4a43-9d7e-0c5e2d7d9a10",
            "resourceVersion": "42",
            "generation": 2,
            "creationTimestamp": "2024-05-06T07:08:09Z",
            "labels": {"app": "web", "tier": ""},
            "annotations": {"deployment.kubernetes.io/revision": "1"},
            "ownerReferences": [{"apiVersion": "v1", "kind": "Foo", "name": "f", "uid": "u1", "controller": true}],
            "managedFields": [{
                "manager": "kubectl-create",
                "operation": "Update",
                "apiVersion": "apps/v1",
                "time": "2024-05-06T07:08:09Z",
                "fieldsType": "FieldsV1",
                "fieldsV1": {"f:spec": {"f:replicas": {}}}
            }]
        },
        "spec": {
            "replicas": 3,
            "selector": {"matchLabels": {"app": "web"}},
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": 1}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {
                    "containers": [{
                        "name": "nginx",
                        "image": "nginx:1.27",
                        "args": ["-g", "daemon off;"],
                        "ports": [{"name": "http", "containerPort": 8080, "protocol": "TCP"}],
                        "env": [
                            {"name": "A", "value": "b"},
                            {"name": "S", "valueFrom": {"secretKeyRef": {"name": "s1", "key": "p", "optional": true}}},
                            {"name": "L", "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu", "divisor": "1m"}}}
                        ],
                        "envFrom": [{"configMapRef": {"name": "cm1"}}],
                        "resources": {
                            "limits": {"cpu": "500m", "memory": "128Mi"},
                            "requests": {"cpu": "250m", "memory": "64Mi", "nvidia.com/gpu": "1"}
                        },
                        "livenessProbe": {"httpGet": {"path": "/healthz", "port": "http"}, "periodSeconds": 10},
                        "readinessProbe": {"tcpSocket": {"port": 8080}, "initialDelaySeconds": 5},
                        "volumeMounts": [{"name": "cfg", "mountPath": "/etc/cfg", "readOnly": true}],
                        "securityContext": {"runAsUser": 1000, "runAsNonRoot": true, "capabilities": {"drop": ["ALL"]}}
                    }],
                    "volumes": [
                        {"name": "cfg", "configMap": {"name": "cm1", "defaultMode": 420, "items": [{"key": "a", "path": "a.txt"}]}},
                        {"name": "scratch", "emptyDir": {"sizeLimit": "1Gi"}}
                    ],
                    "terminationGracePeriodSeconds": 30,
                    "nodeSelector": {"kubernetes.io/os": "linux"},
                    "tolerations": [{"key": "k", "operator": "Exists", "effect": "NoSchedule", "tolerationSeconds": 60}],
                    "shareProcessNamespace": false
                }
            }
        },
        "status": {
            "observedGeneration": 2,
            "replicas": 3,
            "availableReplicas": 3,
            "conditions": [{
                "type": "Available",
                "status": "True",
                "lastUpdateTime": "2024-05-06T07:08:10Z",
                "lastTransitionTime": "2024-05-06T07:08:10Z",
                "reason": "MinimumReplicasAvailable",
                "message": "Deployment has minimum availability."
            }]
        }
    })
}

#[test]
fn schema_is_consistent() {
    let names: Vec<&str> = schema::MESSAGES.iter().map(|m| m.name).collect();
    assert!(names.windows(2).all(|w| w[0] < w[1]), "MESSAGES sorted and unique");
    assert!(names.len() > 1000, "{} messages", names.len());
    for m in schema::MESSAGES {
        assert!(m.fields.windows(2).all(|w| w[0].tag < w[1].tag), "{} fields sorted by tag", m.name);
        for f in m.fields {
            if let Kind::Msg(n) = f.kind {
                assert!(message(n).is_ok(), "{}.{} refers to unknown {n}", m.name, f.json);
            }
            assert_eq!(f.json.is_empty(), f.card == Card::Inline, "{}.{}", m.name, f.tag);
        }
        let jsons: Vec<&str> = m.fields.iter().map(|f| f.json).filter(|j| !j.is_empty()).collect();
        assert_eq!(jsons.len(), jsons.iter().collect::<BTreeSet<_>>().len(), "{} JSON names unique", m.name);
    }
    let kinds: Vec<(&str, &str)> = schema::KINDS.iter().map(|(v, k, _)| (*v, *k)).collect();
    assert!(kinds.windows(2).all(|w| w[0] < w[1]), "KINDS sorted and unique");
    for (v, k, m) in schema::KINDS {
        assert!(message(m).is_ok(), "{v} {k} -> {m}");
    }
    let expect = [
        ("v1", "Namespace", "k8s.io.api.core.v1.Namespace"),
        ("v1", "ConfigMapList", "k8s.io.api.core.v1.ConfigMapList"),
        ("apps/v1", "Deployment", "k8s.io.api.apps.v1.Deployment"),
        ("batch/v1", "Job", "k8s.io.api.batch.v1.Job"),
        ("networking.k8s.io/v1", "Ingress", "k8s.io.api.networking.v1.Ingress"),
        ("rbac.authorization.k8s.io/v1", "ClusterRole", "k8s.io.api.rbac.v1.ClusterRole"),
        ("storage.k8s.io/v1", "CSIDriver", "k8s.io.api.storage.v1.CSIDriver"),
        (
            "apiextensions.k8s.io/v1",
            "CustomResourceDefinition",
            "k8s.io.apiextensions_apiserver.pkg.apis.apiextensions.v1.CustomResourceDefinition",
        ),
        (
            "apiregistration.k8s.io/v1",
            "APIService",
            "k8s.io.kube_aggregator.pkg.apis.apiregistration.v1.APIService",
        ),
        ("autoscaling/v1", "Scale", "k8s.io.api.autoscaling.v1.Scale"),
        ("v1", "Status", "k8s.io.apimachinery.pkg.apis.meta.v1.Status"),
        ("apps/v1", "Status", "k8s.io.apimachinery.pkg.apis.meta.v1.Status"),
        ("apps/v1", "DeleteOptions", "k8s.io.apimachinery.pkg.apis.meta.v1.DeleteOptions"),
    ];
    for (v, k, m) in expect {
        assert_eq!(message_for_kind(v, k).map(|m| m.name), Some(m), "{v} {k}");
    }
    assert!(message_for_kind("meta.k8s.io/v1", "Table").is_none());
    assert!(message_for_kind("example.com/v1", "Widget").is_none());
    // Acronyms survive prost's renaming.
    let pod_status = message("k8s.io.api.core.v1.PodStatus").unwrap();
    let jsons: Vec<&str> = pod_status.fields.iter().map(|f| f.json).collect();
    for j in ["hostIP", "hostIPs", "podIP", "podIPs", "qosClass"] {
        assert!(jsons.contains(&j), "PodStatus.{j}: {jsons:?}");
    }
    let props = message("k8s.io.apiextensions_apiserver.pkg.apis.apiextensions.v1.JSONSchemaProps").unwrap();
    assert!(props.fields.iter().any(|f| f.json == "$ref"));
    assert!(props.fields.iter().any(|f| f.json == "x-kubernetes-preserve-unknown-fields"));
}

#[test]
fn deployment_round_trips_with_every_special_type() {
    let mut d = deployment();
    let back = round_trip(&d);
    // An empty map value ("tier": "") survives; only empty singular strings mean "unset".
    assert_eq!(back, d);
    // Sub-second precision is not part of Time's JSON form; MicroTime keeps microseconds.
    d["metadata"]["creationTimestamp"] = json!("2024-05-06T07:08:09.5+02:00");
    assert_eq!(round_trip(&d)["metadata"]["creationTimestamp"], json!("2024-05-06T05:08:09Z"));
}

#[test]
fn our_deployment_reads_back_with_prost() {
    let raw = raw_of(&encode(&deployment()).unwrap());
    let d = apps::Deployment::decode(raw.as_slice()).expect("prost reads our encoding");
    let spec = d.spec.unwrap();
    assert_eq!(spec.replicas, Some(3));
    let ru = spec.strategy.unwrap().rolling_update.unwrap();
    assert_eq!(
        ru.max_surge.unwrap(),
        IntOrString { r#type: Some(1), int_val: Some(0), str_val: Some("25%".into()) }
    );
    assert_eq!(ru.max_unavailable.unwrap().int_val, Some(1));
    let pod = spec.template.unwrap();
    assert_eq!(pod.metadata.unwrap().labels.get("app").map(String::as_str), Some("web"));
    let c = &pod.spec.as_ref().unwrap().containers[0];
    assert_eq!(c.image.as_deref(), Some("nginx:1.27"));
    let limits = &c.resources.as_ref().unwrap().limits;
    assert_eq!(limits["cpu"].string.as_deref(), Some("500m"));
    // Embedded structs: SecretKeySelector{LocalObjectReference}, Probe{ProbeHandler},
    // Volume{VolumeSource{ConfigMapVolumeSource{LocalObjectReference}}}.
    let sel = c.env[1].value_from.as_ref().unwrap().secret_key_ref.as_ref().unwrap();
    assert_eq!(sel.local_object_reference.as_ref().unwrap().name.as_deref(), Some("s1"));
    let probe = c.liveness_probe.as_ref().unwrap().handler.as_ref().unwrap();
    assert_eq!(probe.http_get.as_ref().unwrap().port.as_ref().unwrap().str_val.as_deref(), Some("http"));
    let vol = &pod.spec.as_ref().unwrap().volumes[0];
    let cm = vol.volume_source.as_ref().unwrap().config_map.as_ref().unwrap();
    assert_eq!(cm.local_object_reference.as_ref().unwrap().name.as_deref(), Some("cm1"));
    assert_eq!(cm.default_mode, Some(420));
    let meta = d.metadata.unwrap();
    assert_eq!(meta.creation_timestamp.unwrap().seconds, Some(1_714_979_289));
    let fields = meta.managed_fields[0].fields_v1.as_ref().unwrap().raw.as_ref().unwrap();
    assert_eq!(serde_json::from_slice::<Value>(fields).unwrap(), json!({"f:spec": {"f:replicas": {}}}));
}

#[test]
fn secret_data_is_base64_bytes() {
    let s = json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "s1", "namespace": "demo"},
        "type": "Opaque",
        "immutable": false,
        "data": {"p": "cQ==", "bin": "AAH/"},
    });
    assert_eq!(round_trip(&s), s);
    let raw = raw_of(&encode(&s).unwrap());
    let secret = core::Secret::decode(raw.as_slice()).unwrap();
    assert_eq!(secret.data["p"], b"q");
    assert_eq!(secret.data["bin"], [0u8, 1, 255]);
    let bad = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "x"}, "data": {"p": "not base64!"}});
    assert!(encode(&bad).is_none(), "an object that does not fit falls back to JSON");
}

#[test]
fn zeros_go_where_upstream_omits_them_and_stay_where_a_pointer_holds_them() {
    // What a Go client writes for a container and a pod spec: every non-pointer scalar.
    let pod = core::Pod {
        metadata: Some(meta::ObjectMeta { name: Some("p".into()), ..Default::default() }),
        spec: Some(core::PodSpec {
            containers: vec![core::Container {
                name: Some("c".into()),
                stdin: Some(false),
                tty: Some(false),
                ports: vec![core::ContainerPort {
                    container_port: Some(80),
                    host_port: Some(0),
                    ..Default::default()
                }],
                security_context: Some(core::SecurityContext {
                    run_as_non_root: Some(false),
                    ..Default::default()
                }),
                ..Default::default()
            }],
            host_network: Some(false),
            termination_grace_period_seconds: Some(0),
            ..Default::default()
        }),
        status: None,
    };
    let body = envelope("v1", "Pod", pod.encode_to_vec());
    assert_eq!(
        decode(&body).unwrap()["spec"],
        json!({
            "containers": [{
                "name": "c",
                "ports": [{"containerPort": 80}],
                "securityContext": {"runAsNonRoot": false},
            }],
            "terminationGracePeriodSeconds": 0,
        })
    );
}

#[test]
fn raw_extension_round_trips_in_a_controller_revision() {
    let cr = json!({
        "apiVersion": "apps/v1", "kind": "ControllerRevision",
        "metadata": {"name": "web-5d8f", "namespace": "demo"},
        "data": {"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "nginx"}]}}}},
        "revision": 2,
    });
    assert_eq!(round_trip(&cr), cr);
    let raw = raw_of(&encode(&cr).unwrap());
    let decoded = apps::ControllerRevision::decode(raw.as_slice()).unwrap();
    let embedded: Value = serde_json::from_slice(decoded.data.unwrap().raw.as_deref().unwrap()).unwrap();
    assert_eq!(embedded, cr["data"]);
}

#[test]
fn duration_and_micro_time_round_trip() {
    let m = json!({
        "apiVersion": "metrics.k8s.io/v1beta1", "kind": "NodeMetrics",
        "metadata": {"name": "n1"},
        "timestamp": "2024-05-06T07:08:09Z",
        "window": "1m30.5s",
        "usage": {"cpu": "100m", "memory": "1Gi"},
    });
    assert_eq!(round_trip(&m), m);
    let ev = json!({
        "apiVersion": "events.k8s.io/v1", "kind": "Event",
        "metadata": {"name": "e1", "namespace": "demo"},
        "eventTime": "2024-05-06T07:08:09.123456Z",
        "reportingController": "kubelet", "reportingInstance": "n1", "action": "Pull", "reason": "Pulled",
        "regarding": {"kind": "Pod", "name": "p", "namespace": "demo"},
        "series": {"count": 2, "lastObservedTime": "2024-05-06T07:09:00.000001Z"},
        "type": "Normal",
    });
    assert_eq!(round_trip(&ev), ev);
    let lease = json!({
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": "l", "namespace": "kube-system"},
        "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15, "renewTime": "2024-05-06T07:08:09.000000Z"},
    });
    assert_eq!(round_trip(&lease), lease);
}

#[test]
fn crd_schemas_round_trip() {
    let crd = json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {
            "group": "example.com",
            "names": {"plural": "widgets", "kind": "Widget", "shortNames": ["wd"]},
            "scope": "Namespaced",
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "properties": {
                        "spec": {
                            "type": "object",
                            "x-kubernetes-preserve-unknown-fields": true,
                            "required": ["size"],
                            "properties": {
                                "size": {"type": "integer", "minimum": 1.0, "default": 3},
                                "mode": {"type": "string", "enum": ["a", "b"]},
                                "tags": {"type": "array", "items": {"type": "string"}},
                                "tuple": {"type": "array", "items": [{"type": "string"}, {"type": "integer"}]},
                                "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                                "free": {"type": "object", "additionalProperties": false},
                                "port": {"x-kubernetes-int-or-string": true, "anyOf": [{"type": "integer"}, {"type": "string"}]}
                            },
                            "dependencies": {"a": ["b"], "c": {"required": ["d"]}}
                        }
                    }
                }},
                "subresources": {"status": {}, "scale": {"specReplicasPath": ".spec.size", "statusReplicasPath": ".status.size"}},
                "additionalPrinterColumns": [{"name": "Size", "type": "integer", "jsonPath": ".spec.size"}]
            }]
        }
    });
    assert_eq!(round_trip(&crd), crd);
}

#[test]
fn lists_and_status_encode() {
    let list = json!({
        "apiVersion": "v1", "kind": "ConfigMapList",
        "metadata": {"resourceVersion": "7"},
        "items": [
            {"metadata": {"name": "a", "namespace": "d"}, "data": {"k": "v"}},
            {"metadata": {"name": "b", "namespace": "d"}, "binaryData": {"b": "AQI="}},
        ],
    });
    assert_eq!(round_trip(&list), list);
    let raw = raw_of(&encode(&list).unwrap());
    assert_eq!(core::ConfigMapList::decode(raw.as_slice()).unwrap().items.len(), 2);
    let status = crate::errors::ApiError::not_found("configmaps", "", "x").to_status();
    let back = round_trip(&status);
    assert_eq!(back["code"], json!(404));
    assert_eq!(back["reason"], json!("NotFound"));
    assert_eq!(back["details"]["name"], json!("x"));
    let table = json!({"apiVersion": "meta.k8s.io/v1", "kind": "Table", "columnDefinitions": [], "rows": []});
    assert!(encode(&table).is_none());
    assert!(encode(&json!({"apiVersion": "example.com/v1", "kind": "Widget"})).is_none());
    assert!(encode(&json!({"kind": "Pod"})).is_none());
}

#[test]
fn decodes_bytes_built_with_prost() {
    let cm = core::ConfigMap {
        metadata: Some(meta::ObjectMeta {
            name: Some("cm1".into()),
            namespace: Some("demo".into()),
            generate_name: Some(String::new()),
            resource_version: Some(String::new()),
            generation: Some(0),
            creation_timestamp: Some(meta::Time { seconds: Some(wkt::GO_ZERO_TIME), nanos: Some(0) }),
            labels: BTreeMap::from([("a".into(), String::new())]),
            ..Default::default()
        }),
        data: BTreeMap::from([("a".into(), "b".into())]),
        binary_data: BTreeMap::from([("bin".into(), vec![0xde, 0xad])]),
        immutable: None,
    };
    let body = envelope("v1", "ConfigMap", cm.encode_to_vec());
    assert_eq!(
        decode(&body).unwrap(),
        json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            // Empty strings are Go's unset, so is the zero of a non-pointer `omitempty`
            // number (generation); Go's zero time is null.
            "metadata": {"name": "cm1", "namespace": "demo", "labels": {"a": ""}},
            "data": {"a": "b"},
            "binaryData": {"bin": "3q0="},
        })
    );

    let svc = core::Service {
        metadata: Some(meta::ObjectMeta { name: Some("svc1".into()), ..Default::default() }),
        spec: Some(core::ServiceSpec {
            ports: vec![core::ServicePort {
                name: Some("80-8080".into()),
                protocol: Some("TCP".into()),
                port: Some(80),
                target_port: Some(IntOrString {
                    r#type: Some(0),
                    int_val: Some(8080),
                    str_val: Some(String::new()),
                }),
                node_port: Some(0),
                ..Default::default()
            }],
            selector: BTreeMap::from([("app".into(), "svc1".into())]),
            r#type: Some("ClusterIP".into()),
            cluster_ip: Some(String::new()),
            ..Default::default()
        }),
        status: Some(core::ServiceStatus::default()),
    };
    let body = envelope("v1", "Service", svc.encode_to_vec());
    assert_eq!(
        decode(&body).unwrap(),
        json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "svc1"},
            "spec": {
                // nodePort 0: a non-pointer `omitempty` int32, gone as upstream's JSON has it.
                "ports": [{"name": "80-8080", "protocol": "TCP", "port": 80, "targetPort": 8080}],
                "selector": {"app": "svc1"},
                "type": "ClusterIP",
            },
            "status": {},
        })
    );

    let pod = core::Pod {
        metadata: Some(meta::ObjectMeta {
            name: Some("p".into()),
            // How Go writes a zero Time: an empty message.
            creation_timestamp: Some(meta::Time::default()),
            deletion_timestamp: Some(meta::Time { seconds: Some(0), nanos: Some(0) }),
            ..Default::default()
        }),
        spec: Some(core::PodSpec {
            containers: vec![core::Container {
                name: Some("c".into()),
                image: Some("busybox".into()),
                env: vec![core::EnvVar {
                    name: Some("X".into()),
                    value_from: Some(core::EnvVarSource {
                        config_map_key_ref: Some(core::ConfigMapKeySelector {
                            local_object_reference: Some(core::LocalObjectReference {
                                name: Some("cm1".into()),
                            }),
                            key: Some("a".into()),
                            optional: None,
                        }),
                        ..Default::default()
                    }),
                    ..Default::default()
                }],
                readiness_probe: Some(core::Probe {
                    handler: Some(core::ProbeHandler {
                        exec: Some(core::ExecAction { command: vec!["true".into()] }),
                        ..Default::default()
                    }),
                    period_seconds: Some(5),
                    ..Default::default()
                }),
                ..Default::default()
            }],
            ..Default::default()
        }),
        status: Some(core::PodStatus {
            pod_ips: vec![core::PodIp { ip: Some("10.0.0.5".into()) }],
            start_time: Some(meta::Time { seconds: Some(1_136_214_245), nanos: Some(0) }),
            ..Default::default()
        }),
    };
    let body = envelope("v1", "Pod", pod.encode_to_vec());
    assert_eq!(
        decode(&body).unwrap(),
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "deletionTimestamp": "1970-01-01T00:00:00Z"},
            "spec": {"containers": [{
                "name": "c", "image": "busybox",
                "env": [{"name": "X", "valueFrom": {"configMapKeyRef": {"name": "cm1", "key": "a"}}}],
                "readinessProbe": {"exec": {"command": ["true"]}, "periodSeconds": 5},
            }]},
            "status": {"podIPs": [{"ip": "10.0.0.5"}], "startTime": "2006-01-02T15:04:05Z"},
        })
    );
}

#[test]
fn packed_repeated_scalars_and_unknown_fields_decode() {
    // PodFailurePolicyOnExitCodesRequirement { string operator = 2; repeated int32 values = 3 }
    let mut raw = Vec::new();
    put_bytes(&mut raw, 2, b"In");
    let mut packed = Vec::new();
    for v in [1u64, 42, (-3i64) as u64] {
        put_varint(&mut packed, v);
    }
    put_bytes(&mut raw, 3, &packed);
    put_key(&mut raw, 3, WireType::Varint);
    put_varint(&mut raw, 7);
    // An unknown field of each wire type.
    put_key(&mut raw, 99, WireType::Varint);
    put_varint(&mut raw, 1);
    put_bytes(&mut raw, 100, b"ignored");
    put_key(&mut raw, 101, WireType::Fixed64);
    raw.extend_from_slice(&[0; 8]);
    put_key(&mut raw, 102, WireType::Fixed32);
    raw.extend_from_slice(&[0; 4]);
    let msg = message("k8s.io.api.batch.v1.PodFailurePolicyOnExitCodesRequirement").unwrap();
    let v = message::decode(msg, &raw, 0).unwrap().unwrap();
    assert_eq!(v, json!({"operator": "In", "values": [1, 42, -3, 7]}));
}

fn is_bad_request(r: &ApiResult<Value>) -> bool {
    matches!(r, Err(e) if e.to_status()["code"] == json!(400))
}

#[test]
fn malformed_bodies_are_bad_requests() {
    let ns = envelope("v1", "Namespace", core::Namespace::default().encode_to_vec());
    assert!(decode(&ns).is_ok());
    assert!(is_bad_request(&decode(b"")));
    assert!(is_bad_request(&decode(b"{\"kind\":\"Namespace\"}")));
    assert!(is_bad_request(&decode(&ns[..3])));

    let unknown = decode(&envelope("example.com/v1", "Widget", Vec::new()));
    assert!(is_bad_request(&unknown));
    let msg = unknown.unwrap_err().to_status()["message"].clone();
    assert_eq!(msg, json!("no kind \"Widget\" is registered for version \"example.com/v1\""));
    assert!(is_bad_request(&decode(&envelope("v1", "", Vec::new()))));

    let mut gzip = runtime::Unknown::decode(&ns[4..]).unwrap();
    gzip.content_encoding = Some("gzip".into());
    let mut body = MAGIC.to_vec();
    body.extend(gzip.encode_to_vec());
    assert!(is_bad_request(&decode(&body)));

    // metadata (tag 1) as a varint instead of a message.
    let mut raw = Vec::new();
    put_key(&mut raw, 1, WireType::Varint);
    put_varint(&mut raw, 5);
    let r = decode(&envelope("v1", "Namespace", raw));
    assert!(is_bad_request(&r));
    assert!(r.unwrap_err().to_status()["message"].as_str().unwrap().contains("metadata"));

    // A length past the end, inside the object.
    let mut raw = Vec::new();
    put_key(&mut raw, 1, WireType::Len);
    put_varint(&mut raw, 1000);
    raw.extend_from_slice(b"short");
    assert!(is_bad_request(&decode(&envelope("v1", "Namespace", raw))));

    // A truncated varint.
    assert!(is_bad_request(&decode(&envelope("v1", "Namespace", vec![0x08, 0xff]))));
}

#[test]
fn deep_nesting_is_refused() {
    // JSONSchemaProps.not nested 150 times.
    let props = message("k8s.io.apiextensions_apiserver.pkg.apis.apiextensions.v1.JSONSchemaProps").unwrap();
    let not = props.fields.iter().find(|f| f.json == "not").unwrap().tag;
    let mut raw = Vec::new();
    for _ in 0..150 {
        let mut outer = Vec::new();
        put_bytes(&mut outer, not, &raw);
        raw = outer;
    }
    let r = message::decode(props, &raw, 0);
    assert!(matches!(r, Err(Error { reason: Reason::TooDeep, .. })), "{r:?}");

    let mut v = json!({"type": "object"});
    for _ in 0..150 {
        v = json!({"not": v});
    }
    assert!(matches!(
        message::encode(props, &v, &mut Vec::new(), 0),
        Err(Error { reason: Reason::TooDeep, .. })
    ));

    // Nested protobuf objects inside RawExtensions count too.
    let mut body = envelope("apps/v1", "ControllerRevision", Vec::new());
    for _ in 0..150 {
        let cr = apps::ControllerRevision {
            data: Some(runtime::RawExtension { raw: Some(body) }),
            ..Default::default()
        };
        body = envelope("apps/v1", "ControllerRevision", cr.encode_to_vec());
    }
    assert!(is_bad_request(&decode(&body)));
}

/// xorshift64*: deterministic noise without a dependency.
struct Noise(u64);

impl Noise {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

#[test]
fn fuzzed_bodies_never_panic() {
    let valid = encode(&deployment()).unwrap();
    // Every truncation: either a clean 400 or (cut at a field boundary) an object.
    for n in 0..valid.len() {
        let r = decode(&valid[..n]);
        assert!(r.is_ok() || is_bad_request(&r), "prefix {n}");
    }
    let raw = raw_of(&valid);
    let msg = message("k8s.io.api.apps.v1.Deployment").unwrap();
    for n in 0..raw.len() {
        let _ = message::decode(msg, &raw[..n], 0);
    }
    let mut noise = Noise(0x9e37_79b9_7f4a_7c15);
    // Flipped bytes in a valid body.
    for _ in 0..20_000 {
        let mut b = valid.clone();
        for _ in 0..=(noise.next() % 4) {
            let i = 4 + (noise.next() as usize) % (b.len() - 4);
            b[i] = noise.next() as u8;
        }
        let r = decode(&b);
        assert!(r.is_ok() || is_bad_request(&r));
    }
    // Random bytes behind the magic and a random envelope for a real kind.
    for _ in 0..20_000 {
        let len = (noise.next() % 64) as usize;
        let junk: Vec<u8> = (0..len).map(|_| noise.next() as u8).collect();
        let mut b = MAGIC.to_vec();
        b.extend_from_slice(&junk);
        let r = decode(&b);
        assert!(r.is_ok() || is_bad_request(&r));
        let r = decode(&envelope("apps/v1", "Deployment", junk));
        assert!(r.is_ok() || is_bad_request(&r));
    }
}

/// `kubectl create deployment web2 --image=nginx --replicas=3 -n demo` (v1.32.4), as sent.
const KUBECTL_DEPLOYMENT: &str = "
    6b 38 73 00 0a 15 0a 07 61 70 70 73 2f 76 31 12 0a 44 65 70 6c 6f 79 6d 65 6e 74 12 b3 01 0a 25
    0a 04 77 65 62 32 12 00 1a 04 64 65 6d 6f 22 00 2a 00 32 00 38 00 42 00 5a 0b 0a 03 61 70 70 12
    04 77 65 62 32 12 7c 08 03 12 0d 0a 0b 0a 03 61 70 70 12 04 77 65 62 32 1a 61 0a 1d 0a 00 12 00
    1a 00 22 00 2a 00 32 00 38 00 42 00 5a 0b 0a 03 61 70 70 12 04 77 65 62 32 12 40 12 22 0a 05 6e
    67 69 6e 78 12 05 6e 67 69 6e 78 2a 00 42 00 6a 00 72 00 80 01 00 88 01 00 90 01 00 a2 01 00 1a
    00 32 00 42 00 4a 00 52 00 58 00 60 00 68 00 82 01 00 8a 01 00 9a 01 00 c2 01 00 22 02 0a 00 28
    00 38 00 1a 0c 08 00 10 00 18 00 20 00 28 00 38 00 1a 00 22 00";

fn hex(s: &str) -> Vec<u8> {
    s.split_whitespace().map(|b| u8::from_str_radix(b, 16).unwrap()).collect()
}

#[test]
fn decodes_what_kubectl_sends() {
    // Go writes every non-pointer field: "" is dropped as unset, an empty Time is Go's zero
    // time (null), a zero number or false of a non-pointer `omitempty` field is dropped (it
    // is not in upstream's JSON either), others stay (a pointer's zero, like replicas: 0,
    // matters): what upstream serves for this object.
    assert_eq!(
        decode(&hex(KUBECTL_DEPLOYMENT)).unwrap(),
        json!({
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "web2", "namespace": "demo", "labels": {"app": "web2"}},
            "spec": {
                "replicas": 3,
                "selector": {"matchLabels": {"app": "web2"}},
                "template": {
                    "metadata": {"labels": {"app": "web2"}},
                    "spec": {"containers": [{"name": "nginx", "image": "nginx", "resources": {}}]},
                },
                "strategy": {},
            },
            "status": {},
        })
    );
    // Our encoding of that object reads back the same way.
    let v = decode(&hex(KUBECTL_DEPLOYMENT)).unwrap();
    assert_eq!(round_trip(&v), v);
}
