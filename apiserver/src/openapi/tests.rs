use std::sync::OnceLock;

use http_body_util::BodyExt;
use serde_json::Value;

use super::*;
use crate::registry::resources;

/// The documents for every built-in resource (generated once for all tests).
fn api() -> &'static OpenApi {
    static API: OnceLock<OpenApi> = OnceLock::new();
    API.get_or_init(|| OpenApi::with_resources(resources::all().iter().map(|r| r.info.clone()).collect()))
}

fn get(api: &OpenApi, uri: &str, headers: &[(&str, &str)]) -> Response<BoxBody> {
    let mut b = http::Request::builder().uri(uri);
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    let req = b.body(()).unwrap();
    match api.respond_to(&req) {
        Ok(r) => r,
        Err(e) => crate::handlers::error_response(&e),
    }
}

fn body(r: Response<BoxBody>) -> Vec<u8> {
    futures::executor::block_on(r.into_body().collect()).unwrap().to_bytes().to_vec()
}

fn json(api: &OpenApi, uri: &str) -> Value {
    let r = get(api, uri, &[("accept", "application/json")]);
    assert_eq!(r.status(), StatusCode::OK, "{uri}");
    serde_json::from_slice(&body(r)).unwrap()
}

#[test]
fn v3_discovery_lists_group_versions() {
    let d = json(api(), "/openapi/v3");
    let paths = d["paths"].as_object().unwrap();
    for gv in ["api/v1", "apis/apps/v1", "apis/batch/v1", "apis/rbac.authorization.k8s.io/v1"] {
        let url = paths[gv]["serverRelativeURL"].as_str().unwrap();
        assert!(url.starts_with(&format!("/openapi/v3/{gv}?hash=")), "{url}");
    }
}

#[test]
fn apps_document_has_deployment_with_gvk() {
    let doc = json(api(), "/openapi/v3/apis/apps/v1");
    assert_eq!(doc["openapi"], "3.0.0");
    let schemas = &doc["components"]["schemas"];
    let d = &schemas["io.k8s.api.apps.v1.Deployment"];
    assert_eq!(
        d["x-kubernetes-group-version-kind"],
        serde_json::json!([{ "group": "apps", "kind": "Deployment", "version": "v1" }])
    );
    assert_eq!(
        schemas["io.k8s.api.apps.v1.DeploymentList"]["x-kubernetes-group-version-kind"][0]["kind"],
        "DeploymentList"
    );
    // Upstream does not require metadata (k8s-openapi's schema does).
    assert!(d.get("required").is_none(), "{}", d["required"]);
    // A `$ref` with a description beside it is wrapped in allOf (OpenAPI 3.0).
    assert_eq!(
        d["properties"]["spec"]["allOf"][0]["$ref"],
        "#/components/schemas/io.k8s.api.apps.v1.DeploymentSpec"
    );
    // The pod template's types come along.
    assert!(schemas.get("io.k8s.api.core.v1.PodSpec").is_some());
    assert!(schemas.get("io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta").is_some());
    // Only the group-version's own kinds carry its GVKs; no core kinds are listed.
    assert!(schemas.get("io.k8s.api.core.v1.Pod").is_none());
}

#[test]
fn pod_spec_lists_carry_patch_strategies() {
    let doc = json(api(), "/openapi/v3/api/v1");
    let containers = &doc["components"]["schemas"]["io.k8s.api.core.v1.PodSpec"]["properties"]["containers"];
    assert_eq!(containers["x-kubernetes-patch-strategy"], "merge");
    assert_eq!(containers["x-kubernetes-patch-merge-key"], "name");
    assert_eq!(containers["x-kubernetes-list-type"], "map");
    let ports = &doc["components"]["schemas"]["io.k8s.api.core.v1.Container"]["properties"]["ports"];
    assert_eq!(ports["x-kubernetes-patch-merge-key"], "containerPort");
    assert_eq!(ports["x-kubernetes-list-map-keys"], serde_json::json!(["containerPort", "protocol"]));
    let owners = &doc["components"]["schemas"]["io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"]["properties"]
        ["ownerReferences"];
    assert_eq!(owners["x-kubernetes-patch-merge-key"], "uid");
    let v2 = json(api(), "/openapi/v2");
    assert_eq!(
        v2["definitions"]["io.k8s.api.core.v1.PodSpec"]["properties"]["volumes"]["x-kubernetes-patch-strategy"],
        "merge,retainKeys"
    );
    assert_eq!(
        v2["definitions"]["io.k8s.api.core.v1.ServiceSpec"]["properties"]["ports"]["x-kubernetes-patch-merge-key"],
        "port"
    );
}

#[test]
fn extension_table_matches_the_types() {
    let req = schemas::Request {
        resources: kinds::KINDS.iter().collect(),
        subresources: Vec::new(),
        group_versions: Vec::new(),
    };
    let mut settings = k8s_openapi::schemars::generate::SchemaSettings::draft07();
    settings.definitions_path = "/definitions".into();
    let mut generator = settings.into_generator();
    for k in &req.resources {
        (k.add)(&mut generator);
    }
    kinds::add_common(&mut generator);
    let mut defs = generator.take_definitions(false);
    for (def, ..) in extensions::LISTS {
        assert!(defs.contains_key(*def), "{def} is no definition");
    }
    for (def, ..) in extensions::FIELDS {
        assert!(defs.contains_key(*def), "{def} is no definition");
    }
    for def in extensions::ATOMIC_STRUCTS {
        assert!(defs.contains_key(*def), "{def} is no definition");
    }
    assert_eq!(extensions::apply(&mut defs), Vec::<String>::new());
}

#[test]
fn patch_operations_declare_field_validation_and_strategic_merge() {
    let doc = json(api(), "/openapi/v3/apis/apps/v1");
    let item = &doc["paths"]["/apis/apps/v1/namespaces/{namespace}/deployments/{name}"];
    let patch = &item["patch"];
    assert_eq!(patch["operationId"], "patchAppsV1NamespacedDeployment");
    assert_eq!(patch["x-kubernetes-group-version-kind"]["kind"], "Deployment");
    let names: Vec<&str> =
        patch["parameters"].as_array().unwrap().iter().filter_map(|p| p["name"].as_str()).collect();
    for p in ["dryRun", "fieldManager", "fieldValidation", "force"] {
        assert!(names.contains(&p), "{p} missing from {names:?}");
    }
    assert!(patch["requestBody"]["content"].get("application/strategic-merge-patch+json").is_some());
    // Every patch operation of the kind says the same, subresources included.
    for (path, item) in doc["paths"].as_object().unwrap() {
        if let Some(p) = item.get("patch") {
            let has = p["parameters"].as_array().unwrap().iter().any(|p| p["name"] == "fieldValidation");
            assert!(has, "{path}");
        }
    }
    let scale = &doc["paths"]["/apis/apps/v1/namespaces/{namespace}/deployments/{name}/scale"]["get"];
    assert_eq!(scale["x-kubernetes-group-version-kind"]["kind"], "Scale");
    let cluster = json(api(), "/openapi/v3/api/v1");
    assert!(cluster["paths"].get("/api/v1/nodes/{name}").is_some());
    assert!(cluster["paths"].get("/api/v1/namespaces/{namespace}/pods/{name}/status").is_some());
    assert_eq!(cluster["paths"]["/api/v1/pods"]["get"]["operationId"], "listCoreV1PodForAllNamespaces");
}

#[test]
fn documents_are_self_contained() {
    let api = api();
    for gv in api.v3_group_versions().map(str::to_string).collect::<Vec<_>>() {
        let doc = json(api, &format!("/openapi/v3/{gv}"));
        let schemas = doc["components"]["schemas"].as_object().unwrap();
        let mut refs = Vec::new();
        walk(&doc, &mut refs);
        for r in refs {
            let name = r.strip_prefix("#/components/schemas/").unwrap_or_else(|| panic!("{gv}: ref {r}"));
            assert!(schemas.contains_key(name), "{gv}: {name} is referred to but missing");
        }
    }
    let v2 = json(api, "/openapi/v2");
    let mut refs = Vec::new();
    walk(&v2, &mut refs);
    for r in refs {
        let name = r.strip_prefix("#/definitions/").unwrap();
        assert!(v2["definitions"].get(name).is_some(), "v2: {name}");
    }

    fn walk(v: &Value, out: &mut Vec<String>) {
        match v {
            Value::Object(o) => {
                for (k, v) in o {
                    match v.as_str() {
                        Some(r) if k == "$ref" => out.push(r.to_string()),
                        _ => walk(v, out),
                    }
                }
            }
            Value::Array(a) => a.iter().for_each(|v| walk(v, out)),
            _ => {}
        }
    }
}

#[test]
fn hashes_are_stable_and_honoured() {
    let again = OpenApi::with_resources(resources::all().iter().map(|r| r.info.clone()).collect());
    let api = api();
    assert_eq!(api.docs().v2.etag, again.docs().v2.etag);
    assert_eq!(api.docs().v3_discovery.bytes, again.docs().v3_discovery.bytes);

    let d = json(api, "/openapi/v3");
    let url = d["paths"]["apis/apps/v1"]["serverRelativeURL"].as_str().unwrap().to_string();
    let hash = url.split("hash=").nth(1).unwrap();
    assert_eq!(hash.len(), 128);

    let r = get(api, &url, &[("accept", "application/json")]);
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(r.headers()[header::ETAG], format!("\"{hash}\""));
    assert_eq!(r.headers()[header::CACHE_CONTROL], "public, immutable");
    assert!(r.headers().contains_key(header::EXPIRES));

    let r = get(api, "/openapi/v3/apis/apps/v1?hash=0123", &[]);
    assert_eq!(r.status(), StatusCode::MOVED_PERMANENTLY);
    assert_eq!(r.headers()[header::LOCATION], url.as_str());

    let r = get(api, "/openapi/v3/apis/apps/v1", &[("if-none-match", &format!("\"{hash}\""))]);
    assert_eq!(r.status(), StatusCode::NOT_MODIFIED);
    assert!(body(r).is_empty());
    let r = get(api, "/openapi/v3/apis/apps/v1", &[]);
    assert!(!r.headers().contains_key(header::CACHE_CONTROL));
}

#[test]
fn v3_protobuf_is_not_acceptable() {
    let api = api();
    let v3pb = "application/com.github.proto-openapi.spec.v3@v1.0+protobuf";
    assert_eq!(get(api, "/openapi/v3/api/v1", &[("accept", v3pb)]).status(), StatusCode::NOT_ACCEPTABLE);
    assert_eq!(get(api, "/openapi/v2", &[("accept", "text/html")]).status(), StatusCode::NOT_ACCEPTABLE);
    assert_eq!(get(api, "/openapi/v2", &[("accept", "*/*")]).status(), StatusCode::OK);
    assert_eq!(get(api, "/openapi/v3/apis/nope/v1", &[]).status(), StatusCode::NOT_FOUND);
    // The handler's path-only entry point serves too.
    assert_eq!(api.respond("/openapi/v3/api/v1", "application/json").unwrap().status(), StatusCode::OK);
}

/// What kubectl asks for; the answer carries the dotted spelling, as upstream's.
const V2PB: &str = "application/com.github.proto-openapi.spec.v2@v1.0+protobuf";
const V2PB_SERVED: &str = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf";

#[test]
fn v2_protobuf_is_served_when_asked_for() {
    let api = api();
    for accept in [V2PB, "application/com.github.proto-openapi.spec.v2.v1.0+protobuf"] {
        let r = get(api, "/openapi/v2", &[("accept", accept)]);
        assert_eq!(r.status(), StatusCode::OK, "{accept}");
        assert_eq!(r.headers()[header::CONTENT_TYPE], V2PB_SERVED);
        assert_eq!(r.headers()[header::VARY], "Accept");
        assert!(r.headers().contains_key(header::LAST_MODIFIED));
        let etag = r.headers()[header::ETAG].to_str().unwrap().to_string();
        assert_eq!(etag, format!("\"{}\"", api.docs().v2.etag));
        let b = body(r);
        assert_eq!(b, api.docs().v2_protobuf.bytes);
        let r = get(api, "/openapi/v2", &[("accept", accept), ("if-none-match", &etag)]);
        assert_eq!(r.status(), StatusCode::NOT_MODIFIED);
    }
    // JSON stays the default, and wins when preferred.
    for accept in
        [None, Some("*/*"), Some("application/json"), Some(&*format!("{V2PB};q=0.5, application/json"))]
    {
        let headers: Vec<(&str, &str)> = accept.map(|a| ("accept", a)).into_iter().collect();
        let r = get(api, "/openapi/v2", &headers);
        assert_eq!(r.status(), StatusCode::OK, "{accept:?}");
        assert_eq!(r.headers()[header::CONTENT_TYPE], JSON, "{accept:?}");
    }
    let r = get(api, "/openapi/v2", &[("accept", &format!("{V2PB}, application/json;q=0.9"))]);
    assert_eq!(r.headers()[header::CONTENT_TYPE], V2PB_SERVED);
}

/// The fields of one message: (field number, value bytes) for length-delimited ones.
fn fields(b: &[u8]) -> Vec<(u32, &[u8])> {
    let mut r = crate::protobuf::wire::Reader::new(b);
    let mut out = Vec::new();
    while !r.is_empty() {
        let (tag, wt) = r.key().unwrap();
        if wt == crate::protobuf::wire::WireType::Len {
            out.push((tag, r.bytes().unwrap()));
        } else {
            r.skip(wt).unwrap();
        }
    }
    out
}

fn field(b: &[u8], tag: u32) -> Option<&[u8]> {
    fields(b).into_iter().find(|(t, _)| *t == tag).map(|(_, v)| v)
}

/// The `Named*` pair called `name` among the field-`tag` entries of `b`: its value bytes.
fn named<'a>(b: &'a [u8], tag: u32, name: &str) -> Option<&'a [u8]> {
    fields(b)
        .into_iter()
        .filter(|(t, _)| *t == tag)
        .find(|(_, pair)| field(pair, 1) == Some(name.as_bytes()))
        .and_then(|(_, pair)| field(pair, 2))
}

#[test]
fn v2_protobuf_is_a_gnostic_document() {
    let doc = &api().docs().v2_protobuf.bytes;
    assert_eq!(field(doc, 1), Some(&b"2.0"[..]), "Document.swagger");
    let info = field(doc, 2).unwrap();
    assert_eq!(field(info, 1), Some(&b"Kubernetes"[..]), "Info.title");

    // Definitions (9) → NamedSchema io.k8s.api.core.v1.Pod → Schema.
    let definitions = field(doc, 9).unwrap();
    let pod = named(definitions, 1, "io.k8s.api.core.v1.Pod").expect("Pod definition");
    // Schema.vendor_extension (31): the GVK, as YAML in Any.yaml (2).
    let gvk = named(pod, 31, "x-kubernetes-group-version-kind").unwrap();
    let yaml: Value = serde_yaml::from_slice(field(gvk, 2).unwrap()).unwrap();
    assert_eq!(yaml, serde_json::json!([{ "group": "", "kind": "Pod", "version": "v1" }]));
    // Schema.properties (25) → spec → $ref (1).
    let spec = named(field(pod, 25).unwrap(), 1, "spec").unwrap();
    assert_eq!(field(spec, 1), Some(&b"#/definitions/io.k8s.api.core.v1.PodSpec"[..]));
    // Schema.type (22) is a TypeItem.
    let pod_spec = named(definitions, 1, "io.k8s.api.core.v1.PodSpec").unwrap();
    assert_eq!(field(field(pod_spec, 22).unwrap(), 1), Some(&b"object"[..]));
    let containers = named(field(pod_spec, 25).unwrap(), 1, "containers").unwrap();
    // items (23) → ItemsItem.schema (1) → $ref.
    let items = field(field(containers, 23).unwrap(), 1).unwrap();
    assert_eq!(field(items, 1), Some(&b"#/definitions/io.k8s.api.core.v1.Container"[..]));
    let merge_key = named(containers, 31, "x-kubernetes-patch-merge-key").unwrap();
    assert_eq!(field(merge_key, 2), Some(&b"name\n"[..]));

    // Paths (8) → NamedPathItem (2) → PathItem.get (2) → Operation.operation_id (5).
    let paths = field(doc, 8).unwrap();
    let item = named(paths, 2, "/api/v1/namespaces/{namespace}/pods/{name}").expect("pod path");
    let get = field(item, 2).unwrap();
    assert_eq!(field(get, 5), Some(&b"readCoreV1NamespacedPod"[..]));
    let action = named(get, 13, "x-kubernetes-action").unwrap();
    assert_eq!(field(action, 2), Some(&b"get\n"[..]));
    // Responses (9) → "200" → ResponseValue.response (1) → schema (2) → SchemaItem.schema (1).
    let ok = named(field(get, 9).unwrap(), 1, "200").unwrap();
    let schema = field(field(field(ok, 1).unwrap(), 2).unwrap(), 1).unwrap();
    assert_eq!(field(schema, 1), Some(&b"#/definitions/io.k8s.api.core.v1.Pod"[..]));
    // PathItem.parameters (9): the path's `name` is a NonBodyParameter (2) with a
    // PathParameterSubSchema (4), required (1) and named (4).
    let names: Vec<&[u8]> = fields(item)
        .into_iter()
        .filter(|(t, _)| *t == 9)
        .filter_map(|(_, p)| field(field(field(p, 1)?, 2)?, 4))
        .filter_map(|sub| field(sub, 4))
        .collect();
    assert!(names.contains(&&b"name"[..]), "{names:?}");
    // A body parameter: PUT's `body`, a BodyParameter (1) with a schema (5).
    let put = field(item, 3).unwrap();
    let body = fields(put)
        .into_iter()
        .filter(|(t, _)| *t == 8)
        .find_map(|(_, p)| field(field(p, 1)?, 1))
        .expect("body parameter");
    assert_eq!(field(body, 2), Some(&b"body"[..]));
    assert!(field(field(body, 5).unwrap(), 1).is_some());

    // Security (12): a SecurityRequirement naming BearerToken with no scopes.
    let scopes = named(field(doc, 12).unwrap(), 1, "BearerToken").unwrap();
    assert!(scopes.is_empty(), "{scopes:?}");
    // Security definitions (13) → BearerToken → ApiKeySecurity (2).
    let bearer = named(field(doc, 13).unwrap(), 1, "BearerToken").unwrap();
    assert_eq!(field(field(bearer, 2).unwrap(), 2), Some(&b"authorization"[..]));
}

#[test]
fn v2_protobuf_skips_what_it_cannot_encode() {
    // Keys of the wrong type, unknown keys and odd parameters are left out, not panicked on.
    let odd = serde_json::json!({
        "swagger": 2,
        "info": "nope",
        "paths": { "/x": { "get": { "parameters": [{ "in": "cookie", "name": "c" }, 7],
                                    "responses": { "200": 1 } } }, "/y": [] },
        "definitions": { "A": { "type": ["string", "null"], "items": [{ "type": "integer" }],
                                "additionalProperties": false, "enum": [1, "a", null],
                                "maxLength": -1, "minimum": 0.5, "x-k": { "a": [1] } },
                         "B": null },
        "x-top": true,
    });
    let b = protobuf_v2::encode(&odd);
    assert_eq!(field(&b, 1), None);
    let a = named(field(&b, 9).unwrap(), 1, "A").unwrap();
    assert_eq!(fields(field(a, 22).unwrap()).len(), 2);
    assert_eq!(field(field(a, 21).unwrap(), 2), None, "boolean, not length-delimited");
    assert!(named(&b, 16, "x-top").is_some());
    assert!(protobuf_v2::encode(&Value::Null).is_empty());
    assert!(protobuf_v2::encode(&serde_json::json!([])).is_empty());
}

#[test]
fn http_dates() {
    assert_eq!(http_date(UNIX_EPOCH + Duration::from_secs(784_111_777)), "Sun, 06 Nov 1994 08:49:37 GMT");
    assert_eq!(http_date(UNIX_EPOCH), "Thu, 01 Jan 1970 00:00:00 GMT");
    assert_eq!(http_date(UNIX_EPOCH + Duration::from_secs(951_782_400)), "Tue, 29 Feb 2000 00:00:00 GMT");
}

#[test]
fn patch_meta_walks_the_schema() {
    let pod = api().patch_meta("", "v1", "Pod").unwrap();
    let spec = pod.field("spec").unwrap();
    assert!(!spec.merges());
    let containers = spec.meta.field("containers").unwrap();
    assert!(containers.merges());
    assert_eq!(containers.merge_key, Some("name"));
    let ports = containers.meta.field("ports").unwrap();
    assert_eq!(ports.merge_key, Some("containerPort"));
    assert!(containers.meta.field("image").is_some());
    assert!(containers.meta.field("imagee").is_none());
    let volumes = spec.meta.field("volumes").unwrap();
    assert!(volumes.merges() && volumes.retains_keys());
    let labels = pod.field("metadata").unwrap().meta.field("labels").unwrap();
    assert!(labels.meta.field("app").is_some(), "a map's values");
    let d = api().patch_meta("apps", "v1", "Deployment").unwrap();
    let tpl = d.field("spec").unwrap().meta.field("template").unwrap().meta.field("spec").unwrap();
    assert_eq!(tpl.meta.field("initContainers").unwrap().merge_key, Some("name"));
    let strategy = d.field("spec").unwrap().meta.field("strategy").unwrap();
    assert!(strategy.retains_keys() && !strategy.merges());
    assert!(strategy.meta.field("rollingUpdate").is_some());
    assert!(api().patch_meta("apps", "v1", "Nope").is_none());
}
