//! Discovery: `/api`, `/apis`, `/apis/<group>`, the per-version resource lists, and the
//! aggregated form (`apidiscovery.k8s.io/v2`) kubectl v1.32 asks for first; plus `/version`.

use std::sync::Arc;

use bytes::Bytes;
use http::StatusCode;
use serde_json::{Value, json};

use crate::aggregator::proxy::Backend;
use crate::handlers::{BoxBody, full, json_response};
use crate::registry::Registry;
use crate::registry::resource::ResourceInfo;

pub const GIT_VERSION: &str = "v1.32.0";

pub fn version() -> Value {
    json!({
        "major": "1",
        "minor": "32",
        "gitVersion": GIT_VERSION,
        "gitCommit": "k8s-rs",
        "gitTreeState": "clean",
        "buildDate": "2026-11-29T00:00:00Z",
        "goVersion": "rust",
        "compiler": "rustc",
        "platform": "linux/amd64",
    })
}

/// A resource answered without storage (see [`crate::handlers::virtual_resources`]): the
/// reviews (create only), `bindings` (create only) and `componentstatuses` (get, list).
struct Virtual {
    group: &'static str,
    version: &'static str,
    plural: &'static str,
    singular: &'static str,
    kind: &'static str,
    namespaced: bool,
    verbs: &'static [&'static str],
    short_names: &'static [&'static str],
}

const fn virt(
    group: &'static str,
    plural: &'static str,
    singular: &'static str,
    kind: &'static str,
    namespaced: bool,
) -> Virtual {
    Virtual { group, version: "v1", plural, singular, kind, namespaced, verbs: &["create"], short_names: &[] }
}

/// The virtual resources, in the order upstream lists them within their group.
const VIRTUAL: &[Virtual] = &[
    virt("", "bindings", "binding", "Binding", true),
    Virtual {
        verbs: &["get", "list"],
        short_names: &["cs"],
        ..virt("", "componentstatuses", "componentstatus", "ComponentStatus", false)
    },
    virt("authentication.k8s.io", "selfsubjectreviews", "selfsubjectreview", "SelfSubjectReview", false),
    virt("authentication.k8s.io", "tokenreviews", "tokenreview", "TokenReview", false),
    virt(
        "authorization.k8s.io",
        "localsubjectaccessreviews",
        "localsubjectaccessreview",
        "LocalSubjectAccessReview",
        true,
    ),
    virt(
        "authorization.k8s.io",
        "selfsubjectaccessreviews",
        "selfsubjectaccessreview",
        "SelfSubjectAccessReview",
        false,
    ),
    virt(
        "authorization.k8s.io",
        "selfsubjectrulesreviews",
        "selfsubjectrulesreview",
        "SelfSubjectRulesReview",
        false,
    ),
    virt("authorization.k8s.io", "subjectaccessreviews", "subjectaccessreview", "SubjectAccessReview", false),
];

fn virtual_in<'a>(group: &'a str, version: &'a str) -> impl Iterator<Item = &'static Virtual> + 'a {
    VIRTUAL.iter().filter(move |v| v.group == group && v.version == version)
}

/// The group versions this server serves itself (not those of CustomResourceDefinitions),
/// the virtual resources' included: what gets a local APIService.
pub fn built_in_group_versions(registry: &Registry) -> Vec<(&'static str, &'static str)> {
    let mut out: Vec<(&'static str, &'static str)> = Vec::new();
    let stores = registry.stores.iter().map(|s| (s.res.info.group, s.res.info.version));
    for gv in stores.chain(VIRTUAL.iter().map(|v| (v.group, v.version))) {
        if !out.contains(&gv) {
            out.push(gv);
        }
    }
    out
}

/// The served groups: the registry's, then those only virtual resources make up.
fn all_groups(registry: &Registry) -> Vec<(&'static str, Vec<&'static str>)> {
    let mut groups = registry.groups();
    for v in VIRTUAL {
        match groups.iter_mut().find(|(g, _)| *g == v.group) {
            Some((_, vs)) => {
                if !vs.contains(&v.version) {
                    vs.push(v.version);
                }
            }
            None => groups.push((v.group, vec![v.version])),
        }
    }
    groups
}

/// The response kind and verbs of a subresource.
fn subresource(info: &ResourceInfo, name: &str) -> Option<(Value, Vec<&'static str>)> {
    let same = json!({ "group": info.group, "version": info.version, "kind": info.kind });
    match name {
        "status" | "approval" | "ephemeralcontainers" => Some((same, vec!["get", "patch", "update"])),
        "scale" => Some((
            json!({ "group": "autoscaling", "version": "v1", "kind": "Scale" }),
            vec!["get", "patch", "update"],
        )),
        "binding" => Some((json!({ "group": "", "version": "v1", "kind": "Binding" }), vec!["create"])),
        "eviction" => {
            Some((json!({ "group": "policy", "version": "v1", "kind": "Eviction" }), vec!["create"]))
        }
        "finalize" => Some((same, vec!["update"])),
        // The connect subresources ([`crate::connect`]): their options are the kind.
        "log" => Some((same, vec!["get"])),
        "exec" | "attach" | "portforward" => {
            let kind = match name {
                "exec" => "PodExecOptions",
                "attach" => "PodAttachOptions",
                _ => "PodPortForwardOptions",
            };
            Some((json!({ "group": "", "version": "v1", "kind": kind }), vec!["create", "get"]))
        }
        "proxy" => Some((
            json!({ "group": "", "version": "v1", "kind": format!("{}ProxyOptions", info.kind) }),
            vec!["create", "delete", "get", "patch", "update"],
        )),
        "token" => Some((
            json!({ "group": "authentication.k8s.io", "version": "v1", "kind": "TokenRequest" }),
            vec!["create"],
        )),
        _ => None,
    }
}

/// `/api/v1` and `/apis/<g>/<v>`: an APIResourceList.
fn resource_list(registry: &Registry, group: &str, version: &str) -> Option<Value> {
    let mut resources = Vec::new();
    for s in &registry.in_group_version(group, version) {
        let i = &s.res.info;
        let mut r = json!({
            "name": i.plural,
            "singularName": i.singular,
            "namespaced": i.namespaced,
            "kind": i.kind,
            "verbs": i.verbs(),
            "storageVersionHash": i.storage_version_hash(),
        });
        if !i.short_names.is_empty() {
            r["shortNames"] = json!(i.short_names);
        }
        if !i.categories.is_empty() {
            r["categories"] = json!(i.categories);
        }
        resources.push(r);
        for sub in i.subresources {
            let Some((kind, verbs)) = subresource(i, sub) else { continue };
            let mut r = json!({
                "name": format!("{}/{sub}", i.plural),
                "singularName": "",
                "namespaced": i.namespaced,
                "kind": kind["kind"],
                "verbs": verbs,
            });
            if kind["group"] != json!(i.group) || kind["version"] != json!(i.version) {
                r["group"] = kind["group"].clone();
                r["version"] = kind["version"].clone();
            }
            resources.push(r);
        }
    }
    for v in virtual_in(group, version) {
        let mut r = json!({
            "name": v.plural,
            "singularName": v.singular,
            "namespaced": v.namespaced,
            "kind": v.kind,
            "verbs": v.verbs,
        });
        if !v.short_names.is_empty() {
            r["shortNames"] = json!(v.short_names);
        }
        resources.push(r);
    }
    if resources.is_empty() {
        return None;
    }
    // Upstream lists them sorted by path: `pods`, `pods/attach`, ..., `podtemplates`.
    resources.sort_by(|a, b| a["name"].as_str().cmp(&b["name"].as_str()));
    let gv = if group.is_empty() { version.to_string() } else { format!("{group}/{version}") };
    Some(json!({ "kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources }))
}

fn group_entry(group: &str, versions: &[&str]) -> Value {
    let vs: Vec<Value> =
        versions.iter().map(|v| json!({ "groupVersion": format!("{group}/{v}"), "version": v })).collect();
    json!({ "name": group, "versions": vs, "preferredVersion": vs[0] })
}

/// One group in the aggregated form.
fn aggregated_group(registry: &Registry, group: &str, versions: &[&str]) -> Value {
    let versions: Vec<Value> = versions
        .iter()
        .map(|v| {
            let mut resources: Vec<Value> = registry
                .in_group_version(group, v)
                .iter()
                .map(|s| {
                    let i = &s.res.info;
                    let subs: Vec<Value> = i
                        .subresources
                        .iter()
                        .filter_map(|sub| {
                            let (kind, verbs) = subresource(i, sub)?;
                            let kind = relative_kind(i, kind);
                            Some(json!({ "subresource": sub, "responseKind": kind, "verbs": verbs }))
                        })
                        .collect();
                    let mut r = json!({
                        "resource": i.plural,
                        "responseKind": { "group": "", "version": "", "kind": i.kind },
                        "scope": if i.namespaced { "Namespaced" } else { "Cluster" },
                        "singularResource": i.singular,
                        "verbs": i.verbs(),
                    });
                    if !i.short_names.is_empty() {
                        r["shortNames"] = json!(i.short_names);
                    }
                    if !i.categories.is_empty() {
                        r["categories"] = json!(i.categories);
                    }
                    if !subs.is_empty() {
                        r["subresources"] = json!(subs);
                    }
                    r
                })
                .chain(virtual_in(group, v).map(|x| {
                    let mut r = json!({
                        "resource": x.plural,
                        "responseKind": { "group": "", "version": "", "kind": x.kind },
                        "scope": if x.namespaced { "Namespaced" } else { "Cluster" },
                        "singularResource": x.singular,
                        "verbs": x.verbs,
                    });
                    if !x.short_names.is_empty() {
                        r["shortNames"] = json!(x.short_names);
                    }
                    r
                }))
                .collect();
            resources.sort_by(|a, b| a["resource"].as_str().cmp(&b["resource"].as_str()));
            json!({ "version": v, "resources": resources, "freshness": "Current" })
        })
        .collect();
    let mut meta = json!({ "creationTimestamp": null });
    if !group.is_empty() {
        meta["name"] = json!(group);
    }
    json!({ "metadata": meta, "versions": versions })
}

/// A response kind as upstream's aggregated discovery writes it: group and version empty
/// when they are the resource's own (they come from the APIResource, which sets them only
/// when they differ).
fn relative_kind(info: &ResourceInfo, mut kind: Value) -> Value {
    if kind["group"] == json!(info.group) && kind["version"] == json!(info.version) {
        kind["group"] = json!("");
        kind["version"] = json!("");
    }
    kind
}

/// Which aggregated discovery version the client accepts, if any.
fn aggregated_version(accept: &str) -> Option<&'static str> {
    for part in accept.split(',') {
        if part.contains("as=APIGroupDiscoveryList") && part.contains("g=apidiscovery.k8s.io") {
            if part.contains("v=v2beta1") {
                return Some("v2beta1");
            }
            if part.contains("v=v2") {
                return Some("v2");
            }
        }
    }
    None
}

fn aggregated(items: Vec<Value>, v: &str) -> http::Response<BoxBody> {
    let body = json!({
        "kind": "APIGroupDiscoveryList",
        "apiVersion": format!("apidiscovery.k8s.io/{v}"),
        "metadata": {},
        "items": items,
    });
    full(
        StatusCode::OK,
        &format!("application/json;g=apidiscovery.k8s.io;v={v};as=APIGroupDiscoveryList"),
        Bytes::from(serde_json::to_vec(&body).unwrap_or_default()),
    )
}

/// The groups served only by extension API servers (a group this server serves itself
/// stays its own), each with its backends in descending version priority.
fn remote_groups<'a>(
    local: &[(&str, Vec<&str>)],
    remote: &'a [Arc<Backend>],
) -> Vec<(&'a str, Vec<&'a Backend>)> {
    let mut out: Vec<(&str, Vec<&Backend>)> = Vec::new();
    for b in remote {
        let group = b.group.as_str();
        if group.is_empty() || local.iter().any(|(g, _)| *g == group) {
            continue;
        }
        match out.iter_mut().find(|(g, _)| *g == group) {
            Some((_, bs)) => bs.push(b),
            None => out.push((group, vec![b])),
        }
    }
    out
}

/// An extension server's APIResourceList in the aggregated form (subresources under their
/// resource); None until its discovery document was read.
fn aggregated_remote_version(b: &Backend) -> Option<Value> {
    let list = b.resources.as_ref()?;
    let entries = list["resources"].as_array().map(Vec::as_slice).unwrap_or_default();
    let kind_of = |r: &Value| {
        json!({
            "group": r["group"].as_str().unwrap_or_default(),
            "version": r["version"].as_str().unwrap_or_default(),
            "kind": r["kind"].as_str().unwrap_or_default(),
        })
    };
    let mut resources: Vec<Value> = Vec::new();
    for r in entries.iter().filter(|r| r["name"].as_str().is_some_and(|n| !n.contains('/'))) {
        let mut out = json!({
            "resource": r["name"],
            "responseKind": kind_of(r),
            "scope": if r["namespaced"].as_bool().unwrap_or(false) { "Namespaced" } else { "Cluster" },
            "singularResource": r["singularName"].as_str().unwrap_or_default(),
            "verbs": r["verbs"].as_array().cloned().unwrap_or_default(),
        });
        for key in ["shortNames", "categories"] {
            if r[key].as_array().is_some_and(|a| !a.is_empty()) {
                out[key] = r[key].clone();
            }
        }
        resources.push(out);
    }
    for r in entries {
        let Some((parent, sub)) = r["name"].as_str().and_then(|n| n.split_once('/')) else { continue };
        let Some(p) = resources.iter_mut().find(|p| p["resource"] == parent) else { continue };
        let entry = json!({
            "subresource": sub,
            "responseKind": kind_of(r),
            "verbs": r["verbs"].as_array().cloned().unwrap_or_default(),
        });
        match p["subresources"].as_array_mut() {
            Some(subs) => subs.push(entry),
            None => p["subresources"] = json!([entry]),
        }
    }
    resources.sort_by(|a, b| a["resource"].as_str().cmp(&b["resource"].as_str()));
    Some(json!({ "version": b.version, "resources": resources, "freshness": "Current" }))
}

/// Answers a discovery path, or None if `path` is not one. `remote` are the extension
/// servers behind service-backed APIServices: their groups are listed here, their group
/// versions' own documents are theirs (the request is proxied before it gets here).
pub fn respond(
    registry: &Registry,
    remote: &[Arc<Backend>],
    path: &str,
    accept: &str,
) -> Option<http::Response<BoxBody>> {
    let groups = all_groups(registry);
    let remote = remote_groups(&groups, remote);
    let parts: Vec<&str> = path.trim_matches('/').split('/').filter(|p| !p.is_empty()).collect();
    match parts.as_slice() {
        ["api"] => {
            if let Some(v) = aggregated_version(accept) {
                return Some(aggregated(vec![aggregated_group(registry, "", &["v1"])], v));
            }
            Some(json_response(
                StatusCode::OK,
                &json!({
                    "kind": "APIVersions",
                    "versions": ["v1"],
                    "serverAddressByClientCIDRs": [{ "clientCIDR": "0.0.0.0/0", "serverAddress": "" }],
                }),
            ))
        }
        ["apis"] => {
            let named: Vec<&(&str, Vec<&str>)> = groups.iter().filter(|(g, _)| !g.is_empty()).collect();
            if let Some(v) = aggregated_version(accept) {
                let mut items: Vec<Value> =
                    named.iter().map(|(g, vs)| aggregated_group(registry, g, vs)).collect();
                for (group, backends) in &remote {
                    let versions: Vec<Value> =
                        backends.iter().filter_map(|b| aggregated_remote_version(b)).collect();
                    if !versions.is_empty() {
                        items.push(json!({
                            "metadata": { "name": group, "creationTimestamp": null },
                            "versions": versions,
                        }));
                    }
                }
                return Some(aggregated(items, v));
            }
            let mut list: Vec<Value> = named.iter().map(|(g, vs)| group_entry(g, vs)).collect();
            for (group, backends) in &remote {
                let versions: Vec<&str> = backends.iter().map(|b| b.version.as_str()).collect();
                list.push(group_entry(group, &versions));
            }
            Some(json_response(
                StatusCode::OK,
                &json!({ "kind": "APIGroupList", "apiVersion": "v1", "groups": list }),
            ))
        }
        ["api", "v1"] => resource_list(registry, "", "v1").map(|l| json_response(StatusCode::OK, &l)),
        ["apis", g] => {
            let local = groups.iter().find(|(name, _)| name == g).map(|(name, vs)| group_entry(name, vs));
            let entry = local.or_else(|| {
                remote.iter().find(|(name, _)| name == g).map(|(name, backends)| {
                    let versions: Vec<&str> = backends.iter().map(|b| b.version.as_str()).collect();
                    group_entry(name, &versions)
                })
            });
            entry.map(|mut e| {
                e["kind"] = json!("APIGroup");
                e["apiVersion"] = json!("v1");
                json_response(StatusCode::OK, &e)
            })
        }
        ["apis", g, v] => resource_list(registry, g, v).map(|l| json_response(StatusCode::OK, &l)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use http_body_util::BodyExt;

    use super::*;
    use crate::storage::etcd3::{Etcd, EtcdConfig};

    async fn body(registry: &Registry, path: &str, accept: &str) -> Value {
        let resp = respond(registry, &[], path, accept).unwrap_or_else(|| panic!("no discovery at {path}"));
        serde_json::from_slice(&resp.into_body().collect().await.unwrap().to_bytes()).unwrap()
    }

    #[tokio::test]
    async fn reviews_are_discoverable() {
        // Discovery reads no objects: an etcd that is never reached will do.
        let cfg = EtcdConfig { servers: vec!["http://127.0.0.1:1".into()], ..Default::default() };
        let etcd = Etcd::connect(&cfg).unwrap();
        let registry = Registry::new(&etcd, "/registry", crate::registry::resources::all(), true);
        let list = body(&registry, "/apis/authorization.k8s.io/v1", "").await;
        let names: Vec<&str> =
            list["resources"].as_array().unwrap().iter().filter_map(|r| r["name"].as_str()).collect();
        assert_eq!(
            names,
            [
                "localsubjectaccessreviews",
                "selfsubjectaccessreviews",
                "selfsubjectrulesreviews",
                "subjectaccessreviews"
            ]
        );
        let local = &list["resources"][0];
        assert_eq!((local["namespaced"].as_bool(), local["verbs"].clone()), (Some(true), json!(["create"])));
        let authn = body(&registry, "/apis/authentication.k8s.io/v1", "").await;
        assert_eq!(authn["resources"][1]["kind"], "TokenReview");
        let groups = body(&registry, "/apis", "").await;
        let group_names: Vec<&str> =
            groups["groups"].as_array().unwrap().iter().filter_map(|g| g["name"].as_str()).collect();
        assert!(
            group_names.contains(&"authorization.k8s.io") && group_names.contains(&"authentication.k8s.io")
        );
        let agg =
            body(&registry, "/apis", "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList")
                .await;
        let authz = agg["items"]
            .as_array()
            .unwrap()
            .iter()
            .find(|g| g["metadata"]["name"] == "authorization.k8s.io")
            .unwrap();
        let rules = authz["versions"][0]["resources"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["resource"] == "selfsubjectrulesreviews")
            .unwrap();
        assert_eq!(rules["scope"], "Cluster");
        assert_eq!(rules["responseKind"]["kind"], "SelfSubjectRulesReview");
    }
}
