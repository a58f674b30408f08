use std::sync::OnceLock;

use serde_json::{Value, json};

use super::*;
use crate::openapi::OpenApi;
use crate::registry::resources;

fn api() -> &'static OpenApi {
    static API: OnceLock<OpenApi> = OnceLock::new();
    API.get_or_init(|| OpenApi::with_resources(resources::all().iter().map(|r| r.info.clone()).collect()))
}

fn deployment_meta() -> PatchMeta<'static> {
    api().patch_meta("apps", "v1", "Deployment").unwrap()
}

fn smp(original: &Value, patch: Value) -> Value {
    strategic_merge(original, &patch, Some(deployment_meta())).unwrap()
}

fn smp_err(original: &Value, patch: Value) -> Error {
    strategic_merge(original, &patch, Some(deployment_meta())).unwrap_err()
}

/// A Deployment whose pod template has `containers`.
fn deployment(containers: Value) -> Value {
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "labels": {"app": "web", "tier": "front"}},
        "spec": {
            "replicas": 1,
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}},
            "template": {"spec": {"containers": containers}},
        },
    })
}

fn containers(d: &Value) -> &Value {
    &d["spec"]["template"]["spec"]["containers"]
}

fn pod_spec_patch(spec: Value) -> Value {
    json!({"spec": {"template": {"spec": spec}}})
}

#[test]
fn containers_merge_by_name() {
    let d = deployment(json!([
        {"name": "app", "image": "app:1", "args": ["-v"]},
        {"name": "sidecar", "image": "side:1"},
    ]));
    let out = smp(&d, pod_spec_patch(json!({"containers": [{"name": "app", "image": "app:2"}]})));
    assert_eq!(
        containers(&out),
        &json!([{"name": "app", "image": "app:2", "args": ["-v"]}, {"name": "sidecar", "image": "side:1"}])
    );
    assert_eq!(out["spec"]["replicas"], 1, "the rest is untouched");
}

#[test]
fn env_merges_by_name_in_set_element_order() {
    let d = deployment(json!([{"name": "app", "env": [
        {"name": "A", "value": "1"}, {"name": "B", "value": "1"}, {"name": "C", "value": "1"},
    ]}]));
    let out = smp(
        &d,
        pod_spec_patch(json!({
            "$setElementOrder/containers": [{"name": "app"}],
            "containers": [{
                "name": "app",
                "$setElementOrder/env": [{"name": "C"}, {"name": "A"}, {"name": "D"}, {"name": "B"}],
                "env": [{"name": "A", "value": "2"}, {"name": "D", "value": "new"}],
            }],
        })),
    );
    assert_eq!(
        containers(&out)[0]["env"],
        json!([
            {"name": "C", "value": "1"}, {"name": "A", "value": "2"},
            {"name": "D", "value": "new"}, {"name": "B", "value": "1"},
        ])
    );
}

#[test]
fn set_element_order_interleaves_server_only_items_by_the_live_order() {
    // `E` is in the live list only (added by someone else). Upstream's merge of the two sorted
    // lists puts it before `B`, since it came before `B` in the live list: [E, B, A].
    let d = deployment(json!([{"name": "app", "env": [{"name": "A"}, {"name": "E"}, {"name": "B"}]}]));
    let out = smp(
        &d,
        pod_spec_patch(json!({"containers": [{
            "name": "app",
            "$setElementOrder/env": [{"name": "B"}, {"name": "A"}],
        }]})),
    );
    assert_eq!(containers(&out)[0]["env"], json!([{"name": "E"}, {"name": "B"}, {"name": "A"}]));
    // After the last live item it stays last.
    let d = deployment(json!([{"name": "app", "env": [{"name": "A"}, {"name": "B"}, {"name": "E"}]}]));
    let out = smp(
        &d,
        pod_spec_patch(json!({"containers": [{
            "name": "app",
            "$setElementOrder/env": [{"name": "B"}, {"name": "A"}],
        }]})),
    );
    assert_eq!(containers(&out)[0]["env"], json!([{"name": "B"}, {"name": "A"}, {"name": "E"}]));
}

#[test]
fn new_elements_without_order_go_first_as_upstream() {
    let d = deployment(json!([{"name": "a"}, {"name": "b"}]));
    let out = smp(&d, pod_spec_patch(json!({"containers": [{"name": "c", "image": "x"}]})));
    assert_eq!(containers(&out), &json!([{"name": "c", "image": "x"}, {"name": "a"}, {"name": "b"}]));
    let out = smp(
        &d,
        pod_spec_patch(json!({
            "$setElementOrder/containers": [{"name": "a"}, {"name": "b"}, {"name": "c"}],
            "containers": [{"name": "c", "image": "x"}],
        })),
    );
    assert_eq!(containers(&out), &json!([{"name": "a"}, {"name": "b"}, {"name": "c", "image": "x"}]));
}

#[test]
fn ports_merge_by_container_port() {
    let d = deployment(json!([{"name": "app", "ports": [
        {"containerPort": 80, "name": "http"}, {"containerPort": 443, "name": "https"},
    ]}]));
    let out = smp(
        &d,
        pod_spec_patch(json!({"containers": [{"name": "app", "ports": [
            {"containerPort": 443, "name": "tls"}, {"containerPort": 8080},
        ]}]})),
    );
    let ports = &containers(&out)[0]["ports"];
    assert_eq!(ports.as_array().unwrap().len(), 3);
    assert!(ports.as_array().unwrap().contains(&json!({"containerPort": 80, "name": "http"})));
    assert!(ports.as_array().unwrap().contains(&json!({"containerPort": 443, "name": "tls"})));
    assert!(ports.as_array().unwrap().contains(&json!({"containerPort": 8080})));
}

#[test]
fn patch_delete_removes_a_container() {
    let d = deployment(json!([{"name": "a"}, {"name": "b"}, {"name": "c"}]));
    let out = smp(
        &d,
        pod_spec_patch(json!({
            "$setElementOrder/containers": [{"name": "a"}, {"name": "c"}],
            "containers": [{"name": "b", "$patch": "delete"}],
        })),
    );
    assert_eq!(containers(&out), &json!([{"name": "a"}, {"name": "c"}]));
    // A delete element needs the merge key.
    let err = smp_err(&d, pod_spec_patch(json!({"containers": [{"$patch": "delete"}]})));
    assert!(matches!(err, Error::NoMergeKey { .. }), "{err}");
}

#[test]
fn patch_replace_replaces_a_list() {
    let d = deployment(json!([{"name": "a", "image": "1"}, {"name": "b"}]));
    let out =
        smp(&d, pod_spec_patch(json!({"containers": [{"$patch": "replace"}, {"name": "z", "image": "2"}]})));
    assert_eq!(containers(&out), &json!([{"name": "z", "image": "2"}]));
}

#[test]
fn patch_replace_and_delete_on_maps() {
    let d = deployment(json!([{"name": "a", "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}}]));
    let out = smp(
        &d,
        pod_spec_patch(json!({"containers": [{"name": "a", "resources": {
            "$patch": "replace", "requests": {"cpu": "2"},
        }}]})),
    );
    assert_eq!(containers(&out)[0]["resources"], json!({"requests": {"cpu": "2"}}));
    // `$patch: delete` leaves an empty map, as upstream does.
    let out =
        smp(&d, pod_spec_patch(json!({"containers": [{"name": "a", "resources": {"$patch": "delete"}}]})));
    assert_eq!(containers(&out)[0]["resources"], json!({}));
    // Where there is nothing, a deleted map is not created and a replacing one is set.
    let out = smp(
        &d,
        pod_spec_patch(json!({
            "securityContext": {"$patch": "delete"},
            "dnsConfig": {"$patch": "replace", "nameservers": ["1.1.1.1"]},
        })),
    );
    let spec = &out["spec"]["template"]["spec"];
    assert!(spec.get("securityContext").is_none());
    assert_eq!(spec["dnsConfig"], json!({"nameservers": ["1.1.1.1"]}));
}

#[test]
fn retain_keys_switches_rolling_update_to_recreate() {
    let d = deployment(json!([{"name": "a"}]));
    // What kubectl apply sends when the manifest changes the strategy to Recreate.
    let out = smp(&d, json!({"spec": {"strategy": {"$retainKeys": ["type"], "type": "Recreate"}}}));
    assert_eq!(out["spec"]["strategy"], json!({"type": "Recreate"}));
    // Without the directive, the keys merge (and rollingUpdate would stay).
    let out = smp(&d, json!({"spec": {"strategy": {"type": "Recreate"}}}));
    assert!(out["spec"]["strategy"].get("rollingUpdate").is_some());
    // Every key the patch sets must be retained.
    let err = smp_err(&d, json!({"spec": {"strategy": {"$retainKeys": ["type"], "rollingUpdate": {}}}}));
    assert_eq!(err, Error::BadRetainKeysFormat);
    assert_eq!(err.to_string(), "invalid patch format of retainKeys");
}

#[test]
fn finalizers_are_a_set() {
    let d = json!({"metadata": {"name": "web", "finalizers": ["a", "b", "c"]}});
    let out = smp(
        &d,
        json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["b"], "$setElementOrder/finalizers": ["a", "c"]}}),
    );
    assert_eq!(out["metadata"]["finalizers"], json!(["a", "c"]));
    let out = smp(&d, json!({"metadata": {"finalizers": ["d", "a"]}}));
    assert_eq!(out["metadata"]["finalizers"], json!(["d", "a", "b", "c"]), "union, new first");
    let err = smp_err(&d, json!({"metadata": {"$deleteFromPrimitiveListfinalizers": ["b"]}}));
    assert_eq!(err, Error::BadPrimitiveListFormat);
}

#[test]
fn null_removes_labels_and_maps_merge() {
    let d = deployment(json!([{"name": "a"}]));
    let out = smp(&d, json!({"metadata": {"labels": {"tier": null, "new": "x", "absent": null}}}));
    assert_eq!(out["metadata"]["labels"], json!({"app": "web", "new": "x"}));
}

#[test]
fn lists_without_merge_strategy_are_replaced() {
    let d = deployment(json!([{"name": "a", "args": ["1", "2"], "command": ["sh"]}]));
    let out = smp(&d, pod_spec_patch(json!({"containers": [{"name": "a", "args": ["3"]}]})));
    assert_eq!(containers(&out)[0]["args"], json!(["3"]));
    assert_eq!(containers(&out)[0]["command"], json!(["sh"]));
    // Without a schema every list is replaced.
    let out = strategic_merge(&d, &pod_spec_patch(json!({"containers": [{"name": "b"}]})), None).unwrap();
    assert_eq!(containers(&out), &json!([{"name": "b"}]));
}

#[test]
fn kubectl_132_apply_of_a_changed_image_and_env() {
    let last = r#"{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"annotations":{},"name":"web"}}"#;
    let d = json!({
        "metadata": {"name": "web", "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "old"}},
        "spec": {"replicas": 2, "template": {
            "metadata": {"labels": {"app": "web"}},
            "spec": {"containers": [{
                "name": "nginx", "image": "nginx:1.27", "imagePullPolicy": "IfNotPresent",
                "env": [{"name": "A", "value": "1"}],
                "terminationMessagePath": "/dev/termination-log",
            }]},
        }},
    });
    let patch: Value = serde_json::from_str(&format!(
        r#"{{"metadata":{{"annotations":{{"kubectl.kubernetes.io/last-applied-configuration":{}}}}},"spec":{{"template":{{"spec":{{"$setElementOrder/containers":[{{"name":"nginx"}}],"containers":[{{"$setElementOrder/env":[{{"name":"A"}}],"env":[{{"name":"A","value":"2"}}],"image":"nginx:1.28","name":"nginx"}}]}}}}}}}}"#,
        serde_json::to_string(last).unwrap()
    ))
    .unwrap();
    let out = smp(&d, patch);
    assert_eq!(out["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"], last);
    assert_eq!(
        containers(&out),
        &json!([{
            "name": "nginx", "image": "nginx:1.28", "imagePullPolicy": "IfNotPresent",
            "env": [{"name": "A", "value": "2"}],
            "terminationMessagePath": "/dev/termination-log",
        }])
    );
    assert_eq!(out["spec"]["replicas"], 2);
}

#[test]
fn kubectl_apply_adds_and_removes_containers() {
    let d = deployment(json!([{"name": "a", "image": "1"}, {"name": "b", "image": "1"}]));
    let out = smp(
        &d,
        pod_spec_patch(json!({
            "$setElementOrder/containers": [{"name": "a"}, {"name": "c"}],
            "containers": [
                {"name": "c", "image": "1", "env": [{"name": "X", "value": "y"}]},
                {"$patch": "delete", "name": "b"},
            ],
        })),
    );
    assert_eq!(
        containers(&out),
        &json!([{"name": "a", "image": "1"}, {"name": "c", "image": "1", "env": [{"name": "X", "value": "y"}]}])
    );
}

#[test]
fn new_values_lose_their_directives() {
    let d = deployment(json!([{"name": "a"}]));
    let out = smp(
        &d,
        pod_spec_patch(json!({"initContainers": [{
            "name": "init", "image": "i",
            "$setElementOrder/env": [{"name": "A"}], "env": [{"name": "A", "value": null}],
        }, {"name": "gone", "$patch": "delete"}]})),
    );
    assert_eq!(
        out["spec"]["template"]["spec"]["initContainers"],
        json!([{"name": "init", "image": "i", "env": [{"name": "A"}]}])
    );
}

#[test]
fn bad_directives_are_refused() {
    let d = deployment(json!([{"name": "a"}]));
    let err = smp_err(&d, json!({"spec": {"$foo": 1}}));
    assert_eq!(err, Error::UnknownDirective("$foo".into()));
    assert_eq!(err.code(), 400);
    let err = smp_err(&d, json!({"spec": {"strategy": {"$patch": "explode"}}}));
    assert!(err.to_string().starts_with("unknown patch type: explode in map:"), "{err}");
    let err = smp_err(&d, pod_spec_patch(json!({"containers": [{"name": "a", "$patch": "nope"}]})));
    assert!(matches!(err, Error::BadPatchType { .. }), "{err}");
    let err = smp_err(&d, pod_spec_patch(json!({"containers": [{"$patch": "merge"}]})));
    assert_eq!(err, Error::MergeDirectiveInList);
    let err = smp_err(&d, pod_spec_patch(json!({"$setElementOrder": []})));
    assert_eq!(err, Error::BadSetElementOrderFormat);
    // The patch's elements must come in the order list's order.
    let err = smp_err(
        &d,
        pod_spec_patch(json!({
            "$setElementOrder/containers": [{"name": "a"}, {"name": "b"}],
            "containers": [{"name": "b"}, {"name": "a"}],
        })),
    );
    assert!(matches!(err, Error::OrderMismatch { .. }), "{err}");
    let err = smp_err(&d, pod_spec_patch(json!({"containers": [{"name": "a"}, ["x"]]})));
    assert!(matches!(err, Error::MixedElementTypes(_)), "{err}");
    assert!(matches!(strategic_merge(&d, &json!([1]), None), Err(Error::NotAnObject("list"))));
}

#[test]
fn schema_fields_starting_with_dollar_are_data() {
    // Free-form values (no declared fields) take any key.
    let cr = api().patch_meta("apps", "v1", "ControllerRevision").unwrap();
    let d = json!({"metadata": {"name": "r"}, "data": {"a": 1}});
    let out = strategic_merge(&d, &json!({"data": {"$x": 2}}), Some(cr)).unwrap();
    assert_eq!(out["data"], json!({"a": 1, "$x": 2}));
}
