use std::sync::OnceLock;

use serde_json::json;

use super::fieldset::{from_fields_v1, set_of, to_fields_v1};
use super::*;
use crate::openapi::OpenApi;
use crate::registry::resources;

fn api() -> &'static OpenApi {
    static API: OnceLock<OpenApi> = OnceLock::new();
    API.get_or_init(|| OpenApi::with_resources(resources::all().iter().map(|r| r.info.clone()).collect()))
}

fn deployment_meta() -> Option<PatchMeta<'static>> {
    api().patch_meta("apps", "v1", "Deployment")
}

fn mgr(name: &str) -> Manager<'_> {
    Manager { name, api_version: "apps/v1", subresource: None }
}

fn config(replicas: i64, image: &str, env: serde_json::Value) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": { "name": "d", "namespace": "n", "labels": { "app": "d" } },
        "spec": {
            "replicas": replicas,
            "selector": { "matchLabels": { "app": "d" } },
            "template": { "spec": { "containers": [ { "name": "web", "image": image, "env": env } ] } }
        }
    })
}

fn base() -> Value {
    json!({ "apiVersion": "apps/v1", "kind": "Deployment", "metadata": { "name": "d", "namespace": "n" } })
}

fn managers(obj: &Value) -> Vec<(String, String)> {
    obj["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e["manager"].as_str().unwrap().to_string(), e["operation"].as_str().unwrap().to_string()))
        .collect()
}

#[test]
fn field_sets_follow_list_types_and_round_trip_fields_v1() {
    let set = set_of(deployment_meta(), &config(1, "a", json!([{ "name": "X", "value": "1" }])), false);
    let v1 = to_fields_v1(&set);
    assert_eq!(
        v1,
        json!({
            "f:metadata": { "f:labels": { "f:app": {} } },
            "f:spec": {
                "f:replicas": {},
                "f:selector": {},
                "f:template": { "f:spec": { "f:containers": { "k:{\"name\":\"web\"}": {
                    ".": {}, "f:env": { "k:{\"name\":\"X\"}": { ".": {}, "f:name": {}, "f:value": {} } },
                    "f:image": {}, "f:name": {}
                } } } }
            }
        })
    );
    assert_eq!(from_fields_v1(&v1), set);
}

#[test]
fn apply_creates_conflicts_forces_and_removes_dropped_fields() {
    let meta = deployment_meta();
    let env = json!([{ "name": "KEEP", "value": "1" }, { "name": "DROP", "value": "2" }]);
    let obj = apply(meta, None, base(), config(1, "a:1", env), &mgr("alice"), false).unwrap();
    assert_eq!(managers(&obj), [("alice".to_string(), "Apply".to_string())]);

    // bob sets replicas to another value: conflict naming alice; forced, bob owns it.
    let mut bob = base();
    bob["spec"] = json!({ "replicas": 3 });
    let err = apply(meta, Some(&obj), base(), bob.clone(), &mgr("bob"), false).unwrap_err();
    assert_eq!(err.code, 409);
    assert_eq!(
        err.message,
        "Apply failed with 1 conflict: conflict with \"alice\" using apps/v1: .spec.replicas"
    );
    let obj = apply(meta, Some(&obj), base(), bob, &mgr("bob"), true).unwrap();
    assert_eq!(obj["spec"]["replicas"], 3);
    assert_eq!(managers(&obj).len(), 2);

    // alice drops an env var and replicas (now bob's): the env var goes, replicas stays.
    let mut again = config(1, "a:2", json!([{ "name": "KEEP", "value": "1" }]));
    again["spec"].as_object_mut().unwrap().remove("replicas");
    let obj = apply(meta, Some(&obj), base(), again, &mgr("alice"), false).unwrap();
    let c = &obj["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(c["image"], "a:2");
    assert_eq!(c["env"], json!([{ "name": "KEEP", "value": "1" }]));
    assert_eq!(obj["spec"]["replicas"], 3);

    // The same value is no conflict: ownership is shared.
    let mut carol = base();
    carol["spec"] = json!({ "replicas": 3 });
    let obj = apply(meta, Some(&obj), base(), carol, &mgr("carol"), false).unwrap();
    assert_eq!(managers(&obj).len(), 3);
}

#[test]
fn updates_take_the_fields_they_change() {
    let meta = deployment_meta();
    let obj = apply(meta, None, base(), config(1, "a", json!([])), &mgr("alice"), false).unwrap();
    let mut new = obj.clone();
    new["spec"]["replicas"] = json!(5);
    record_update(meta, Some(&obj), &mut new, &mgr("kubectl-scale"));
    assert_eq!(
        managers(&new),
        [("alice".to_string(), "Apply".to_string()), ("kubectl-scale".to_string(), "Update".to_string())]
    );
    let scale = new["metadata"]["managedFields"][1]["fieldsV1"].clone();
    assert_eq!(scale, json!({ "f:spec": { "f:replicas": {} } }));
    // alice re-applies her old replicas: a conflict with the updater.
    let err = apply(meta, Some(&new), base(), config(1, "a", json!([])), &mgr("alice"), false).unwrap_err();
    assert!(err.message.contains("conflict with \"kubectl-scale\""), "{}", err.message);
}

#[test]
fn manager_names() {
    assert_eq!(manager_name(Some("kubectl"), None).unwrap(), "kubectl");
    assert_eq!(
        manager_name(None, Some("kube-controller-manager/v1.32.0 (linux/amd64)")).unwrap(),
        "kube-controller-manager"
    );
    assert_eq!(manager_name(None, None).unwrap(), "unknown");
    assert_eq!(manager_name(Some(&"x".repeat(200)), None).unwrap_err().code, 400);
}
