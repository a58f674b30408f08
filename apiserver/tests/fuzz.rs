//! Fuzz tests of what the API server parses from clients before any authorization
//! decision matters: protobuf bodies, label and field selectors, query strings, and the
//! JSON re-indenter of pretty responses. Mutated valid inputs must give an error (or a
//! result), never a panic. Bounded and deterministic here; `hack/fuzz.sh` runs them for
//! longer from random seeds.

use apiserver::handlers::query;
use apiserver::selectors::{FieldSelector, LabelSelector};
use apiserver::{protobuf, serializer};
use component_base::fuzz;
use serde_json::json;

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
