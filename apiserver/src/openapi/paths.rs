//! The `paths` of the documents: every operation of every served resource, with upstream's
//! URLs, operation ids, query parameters and extensions, built once in a neutral form
//! ([`PathItem`]) and rendered as Swagger 2.0 ([`render_v2`]) or OpenAPI 3.0
//! ([`render_v3`]).
//!
//! kubectl reads two things here: the `fieldValidation` parameter of a kind's `patch`
//! operation (found through the operation's `x-kubernetes-group-version-kind`) tells it the
//! server validates fields itself, and the `application/strategic-merge-patch+json` body of
//! that operation tells `kubectl apply` it may send a strategic merge patch.

use serde_json::{Map, Value, json};

use super::kinds;
use super::schemas::{
    API_RESOURCE_LIST, DELETE_OPTIONS, Definitions, PATCH, STATUS, V2_REF, V3_REF, WATCH_EVENT,
};
use crate::registry::resource::ResourceInfo;

#[derive(Clone, Copy, PartialEq)]
enum In {
    Path,
    Query,
}

/// A path or query parameter.
pub struct Param {
    name: &'static str,
    location: In,
    ty: &'static str,
    description: &'static str,
}

const fn query(name: &'static str, ty: &'static str, description: &'static str) -> Param {
    Param { name, location: In::Query, ty, description }
}

static PRETTY: Param = query(
    "pretty",
    "string",
    "If 'true', then the output is pretty printed. Defaults to 'false' unless the user-agent indicates a browser or command-line HTTP tool (curl and wget).",
);
static NAMESPACE: Param = Param {
    name: "namespace",
    location: In::Path,
    ty: "string",
    description: "object name and auth scope, such as for teams and projects",
};
static DRY_RUN: Param = query(
    "dryRun",
    "string",
    "When present, indicates that modifications should not be persisted. An invalid or unrecognized dryRun directive will result in an error response and no further processing of the request. Valid values are: - All: all dry run stages will be processed",
);
static FIELD_MANAGER: Param = query(
    "fieldManager",
    "string",
    "fieldManager is a name associated with the actor or entity that is making these changes. The value must be less than or 128 characters long, and only contain printable characters, as defined by https://golang.org/pkg/unicode/#IsPrint.",
);
static FIELD_VALIDATION: Param = query(
    "fieldValidation",
    "string",
    "fieldValidation instructs the server on how to handle objects in the request (POST/PUT/PATCH) containing unknown or duplicate fields. Valid values are: - Ignore: This will ignore any unknown fields that are silently dropped from the object, and will ignore all but the last duplicate field that the decoder encounters. This is the default behavior prior to v1.23. - Warn: This will send a warning via the standard warning response header for each unknown field that is dropped from the object, and for each duplicate field that is encountered. The request will still succeed if there are no other errors, and will only persist the last of any duplicate fields. This is the default in v1.23+ - Strict: This will fail the request with a BadRequest error if any unknown fields would be dropped from the object, or if any duplicate fields are present. The error returned from the server will contain all unknown and duplicate fields encountered.",
);
static FORCE: Param = query(
    "force",
    "boolean",
    "Force is going to \"force\" Apply requests. It means user will re-acquire conflicting fields owned by other people. Force flag must be unset for non-apply patch requests.",
);
static GRACE_PERIOD: Param = query(
    "gracePeriodSeconds",
    "integer",
    "The duration in seconds before the object should be deleted. Value must be non-negative integer. The value zero indicates delete immediately. If this value is nil, the default grace period for the specified type will be used. Defaults to a per object value if not specified. zero means delete immediately.",
);
static IGNORE_STORE_READ_ERROR: Param = query(
    "ignoreStoreReadErrorWithClusterBreakingPotential",
    "boolean",
    "if set to true, it will trigger an unsafe deletion of the resource in case the normal deletion flow fails with a corrupt object error. A resource is considered corrupt if it can not be retrieved from the underlying storage successfully because of a) its data can not be transformed e.g. decryption failure, or b) it fails to decode into an object. NOTE: unsafe deletion ignores finalizer constraints, skips precondition checks, and removes the object from the storage. WARNING: This may potentially break the cluster if the workload associated with the resource being unsafe-deleted relies on normal deletion flow. Use only if you REALLY know what you are doing. The default value is false, and the user must opt in to enable it",
);
static ORPHAN_DEPENDENTS: Param = query(
    "orphanDependents",
    "boolean",
    "Deprecated: please use the PropagationPolicy, this field will be deprecated in 1.7. Should the dependent objects be orphaned. If true/false, the \"orphan\" finalizer will be added to/removed from the object's finalizers list. Either this field or PropagationPolicy may be set, but not both.",
);
static PROPAGATION_POLICY: Param = query(
    "propagationPolicy",
    "string",
    "Whether and how garbage collection will be performed. Either this field or OrphanDependents may be set, but not both. The default policy is decided by the existing finalizer set in the metadata.finalizers and the resource-specific default policy. Acceptable values are: 'Orphan' - orphan the dependents; 'Background' - allow the garbage collector to delete the dependents in the background; 'Foreground' - a cascading policy that deletes all dependents in the foreground.",
);
static ALLOW_WATCH_BOOKMARKS: Param = query(
    "allowWatchBookmarks",
    "boolean",
    "allowWatchBookmarks requests watch events with type \"BOOKMARK\". Servers that do not implement bookmarks may ignore this flag and bookmarks are sent at the server's discretion. Clients should not assume bookmarks are returned at any specific interval, nor may they assume the server will send any BOOKMARK event during a session. If this is not a watch, this field is ignored.",
);
static CONTINUE: Param = query(
    "continue",
    "string",
    "The continue option should be set when retrieving more results from the server. Since this value is server defined, clients may only use the continue value from a previous query result with identical query parameters (except for the value of continue) and the server may reject a continue value it does not recognize. If the specified continue value is no longer valid whether due to expiration (generally five to fifteen minutes) or a configuration change on the server, the server will respond with a 410 ResourceExpired error together with a continue token.",
);
static FIELD_SELECTOR: Param = query(
    "fieldSelector",
    "string",
    "A selector to restrict the list of returned objects by their fields. Defaults to everything.",
);
static LABEL_SELECTOR: Param = query(
    "labelSelector",
    "string",
    "A selector to restrict the list of returned objects by their labels. Defaults to everything.",
);
static LIMIT: Param = query(
    "limit",
    "integer",
    "limit is a maximum number of responses to return for a list call. If more items exist, the server will set the `continue` field on the list metadata to a value that can be used with the same initial query to retrieve the next set of results. Setting a limit may return fewer than the requested amount of items (up to zero items) in the event all requested objects are filtered out and clients should only use the presence of the continue field to determine whether more results are available.",
);
static RESOURCE_VERSION: Param = query(
    "resourceVersion",
    "string",
    "resourceVersion sets a constraint on what resource versions a request may be served from. See https://kubernetes.io/docs/reference/using-api/api-concepts/#resource-versions for details.\n\nDefaults to unset",
);
static RESOURCE_VERSION_MATCH: Param = query(
    "resourceVersionMatch",
    "string",
    "resourceVersionMatch determines how resourceVersion is applied to list calls. It is highly recommended that resourceVersionMatch be set for list calls where resourceVersion is set See https://kubernetes.io/docs/reference/using-api/api-concepts/#resource-versions for details.\n\nDefaults to unset",
);
static SEND_INITIAL_EVENTS: Param = query(
    "sendInitialEvents",
    "boolean",
    "`sendInitialEvents=true` may be set together with `watch=true`. In that case, the watch stream will begin with synthetic events to produce the current state of objects in the collection. Once all such events have been sent, a synthetic \"Bookmark\" event will be sent. The bookmark will report the ResourceVersion (RV) corresponding to the set of objects, and be marked with `\"k8s.io/initial-events-end\": \"true\"` annotation. Afterwards, the watch stream will proceed as usual, sending watch events corresponding to changes (subsequent to the RV) to objects watched.",
);
static TIMEOUT_SECONDS: Param = query(
    "timeoutSeconds",
    "integer",
    "Timeout for the list/watch call. This limits the duration of the call, regardless of any activity or inactivity.",
);
static WATCH: Param = query(
    "watch",
    "boolean",
    "Watch for changes to the described resources and return them as a stream of add, update, and remove notifications. Specify resourceVersion.",
);

static LIST_PARAMS: &[&Param] = &[
    &ALLOW_WATCH_BOOKMARKS,
    &CONTINUE,
    &FIELD_SELECTOR,
    &LABEL_SELECTOR,
    &LIMIT,
    &RESOURCE_VERSION,
    &RESOURCE_VERSION_MATCH,
    &SEND_INITIAL_EVENTS,
    &TIMEOUT_SECONDS,
    &WATCH,
];
static WRITE_PARAMS: &[&Param] = &[&DRY_RUN, &FIELD_MANAGER, &FIELD_VALIDATION];
static PATCH_PARAMS: &[&Param] = &[&DRY_RUN, &FIELD_MANAGER, &FIELD_VALIDATION, &FORCE];
static DELETE_PARAMS: &[&Param] =
    &[&DRY_RUN, &GRACE_PERIOD, &IGNORE_STORE_READ_ERROR, &ORPHAN_DEPENDENTS, &PROPAGATION_POLICY];
static DELETE_COLLECTION_PARAMS: &[&Param] = &[
    &CONTINUE,
    &DRY_RUN,
    &FIELD_SELECTOR,
    &GRACE_PERIOD,
    &IGNORE_STORE_READ_ERROR,
    &LABEL_SELECTOR,
    &LIMIT,
    &ORPHAN_DEPENDENTS,
    &PROPAGATION_POLICY,
    &RESOURCE_VERSION,
    &RESOURCE_VERSION_MATCH,
    &SEND_INITIAL_EVENTS,
    &TIMEOUT_SECONDS,
];

const PATCH_TYPES: &[&str] = &[
    "application/json-patch+json",
    "application/merge-patch+json",
    "application/strategic-merge-patch+json",
    "application/apply-patch+yaml",
];
const OBJECT_TYPES: &[&str] =
    &["application/json", "application/yaml", "application/vnd.kubernetes.protobuf"];
const STREAM_TYPES: &[&str] = &[
    "application/json",
    "application/yaml",
    "application/vnd.kubernetes.protobuf",
    "application/json;stream=watch",
    "application/vnd.kubernetes.protobuf;stream=watch",
];

/// A request body: the definition it is, whether it must be sent, and its media types.
struct Body {
    definition: String,
    required: bool,
    types: &'static [&'static str],
}

/// One operation.
pub struct Op {
    method: &'static str,
    id: String,
    description: String,
    action: &'static str,
    tag: String,
    gvk: Option<(String, String, String)>,
    params: &'static [&'static Param],
    body: Option<Body>,
    /// Status codes with the definition each returns.
    responses: Vec<(u16, String)>,
    produces: &'static [&'static str],
}

/// One URL with its operations and the parameters all of them take.
pub struct PathItem {
    pub path: String,
    name: Option<String>,
    namespaced: bool,
    pub ops: Vec<Op>,
}

impl PathItem {
    /// The definitions the operations name directly (bodies and responses).
    pub fn definitions(&self) -> impl Iterator<Item = &str> {
        self.ops.iter().flat_map(|op| {
            op.body.iter().map(|b| b.definition.as_str()).chain(op.responses.iter().map(|(_, d)| d.as_str()))
        })
    }
}

/// `apps` → `Apps`, `rbac.authorization.k8s.io` → `RbacAuthorization`, core → `Core`.
fn group_camel(group: &str) -> String {
    if group.is_empty() {
        return "Core".into();
    }
    group.trim_end_matches(".k8s.io").split('.').map(capitalize).collect()
}

fn capitalize(s: &str) -> String {
    let mut c = s.chars();
    match c.next() {
        Some(f) => f.to_uppercase().chain(c).collect(),
        None => String::new(),
    }
}

/// Upstream's tag of a group-version: `core_v1`, `apps_v1`, `rbacAuthorization_v1`.
fn tag(group: &str, version: &str) -> String {
    let g = group_camel(group);
    let mut c = g.chars();
    let lower: String = match c.next() {
        Some(f) => f.to_lowercase().chain(c).collect(),
        None => String::new(),
    };
    format!("{lower}_{version}")
}

/// `/api/v1` or `/apis/<group>/<version>`.
pub fn prefix(group: &str, version: &str) -> String {
    if group.is_empty() { format!("/api/{version}") } else { format!("/apis/{group}/{version}") }
}

/// The operations of one resource.
pub fn resource_paths(info: &ResourceInfo, defs: &Definitions) -> Vec<PathItem> {
    let (g, v, kind) = (info.group, info.version, info.kind);
    let Some(def) = defs.name_of(g, v, kind).map(str::to_string) else {
        tracing::warn!(
            group = g,
            version = v,
            kind,
            "openapi: no schema for this kind; its paths are left out"
        );
        return Vec::new();
    };
    let list_def = defs.name_of(g, v, &info.list_kind()).map(str::to_string).unwrap_or_else(|| def.clone());
    let base = prefix(g, v);
    let gv = format!("{}{}", group_camel(g), capitalize(v));
    let tag = tag(g, v);
    let own_gvk = Some((g.to_string(), v.to_string(), kind.to_string()));
    let scope = if info.namespaced { "Namespaced" } else { "" };
    let collection = if info.namespaced {
        format!("{base}/namespaces/{{namespace}}/{}", info.plural)
    } else {
        format!("{base}/{}", info.plural)
    };
    let watch_collection = if info.namespaced {
        format!("{base}/watch/namespaces/{{namespace}}/{}", info.plural)
    } else {
        format!("{base}/watch/{}", info.plural)
    };
    let op = |method,
              id: String,
              description: String,
              action,
              params,
              body,
              responses: Vec<(u16, &str)>,
              produces| Op {
        method,
        id,
        description,
        action,
        tag: tag.clone(),
        gvk: own_gvk.clone(),
        params,
        body,
        responses: responses.into_iter().map(|(c, d)| (c, d.to_string())).collect(),
        produces,
    };
    let body = |d: &str, types| Some(Body { definition: d.to_string(), required: true, types });
    let delete_body =
        || Some(Body { definition: DELETE_OPTIONS.to_string(), required: false, types: &["*/*"] });
    let mut out = Vec::new();

    out.push(PathItem {
        path: collection.clone(),
        name: None,
        namespaced: info.namespaced,
        ops: vec![
            op(
                "get",
                format!("list{gv}{scope}{kind}"),
                format!("list or watch objects of kind {kind}"),
                "list",
                LIST_PARAMS,
                None,
                vec![(200, &list_def)],
                STREAM_TYPES,
            ),
            op(
                "post",
                format!("create{gv}{scope}{kind}"),
                format!("create a {kind}"),
                "post",
                WRITE_PARAMS,
                body(&def, &["*/*"]),
                vec![(200, &def), (201, &def), (202, &def)],
                OBJECT_TYPES,
            ),
            op(
                "delete",
                format!("delete{gv}Collection{scope}{kind}"),
                format!("delete collection of {kind}"),
                "deletecollection",
                DELETE_COLLECTION_PARAMS,
                delete_body(),
                vec![(200, STATUS)],
                OBJECT_TYPES,
            ),
        ],
    });
    out.push(PathItem {
        path: format!("{collection}/{{name}}"),
        name: Some(format!("name of the {kind}")),
        namespaced: info.namespaced,
        ops: vec![
            op(
                "get",
                format!("read{gv}{scope}{kind}"),
                format!("read the specified {kind}"),
                "get",
                &[],
                None,
                vec![(200, &def)],
                OBJECT_TYPES,
            ),
            op(
                "put",
                format!("replace{gv}{scope}{kind}"),
                format!("replace the specified {kind}"),
                "put",
                WRITE_PARAMS,
                body(&def, &["*/*"]),
                vec![(200, &def), (201, &def)],
                OBJECT_TYPES,
            ),
            op(
                "delete",
                format!("delete{gv}{scope}{kind}"),
                format!("delete a {kind}"),
                "delete",
                DELETE_PARAMS,
                delete_body(),
                vec![(200, STATUS), (202, STATUS)],
                OBJECT_TYPES,
            ),
            op(
                "patch",
                format!("patch{gv}{scope}{kind}"),
                format!("partially update the specified {kind}"),
                "patch",
                PATCH_PARAMS,
                body(PATCH, PATCH_TYPES),
                vec![(200, &def), (201, &def)],
                OBJECT_TYPES,
            ),
        ],
    });
    for sub in info.subresources {
        let (sub_def, sub_gvk) = match kinds::subresource_kind(sub) {
            Some((sg, sv, sk)) => match defs.name_of(sg, sv, sk) {
                Some(d) => (d.to_string(), Some((sg.to_string(), sv.to_string(), sk.to_string()))),
                None => continue,
            },
            None => (def.clone(), own_gvk.clone()),
        };
        let suffix = capitalize(sub);
        let what = format!("{sub} of the specified {kind}");
        let with_gvk = |mut o: Op| {
            o.gvk = sub_gvk.clone();
            o
        };
        let ops = match *sub {
            "status" | "scale" | "ephemeralcontainers" | "resize" | "approval" => vec![
                op(
                    "get",
                    format!("read{gv}{scope}{kind}{suffix}"),
                    format!("read {what}"),
                    "get",
                    &[],
                    None,
                    vec![(200, &sub_def)],
                    OBJECT_TYPES,
                ),
                op(
                    "put",
                    format!("replace{gv}{scope}{kind}{suffix}"),
                    format!("replace {what}"),
                    "put",
                    WRITE_PARAMS,
                    body(&sub_def, &["*/*"]),
                    vec![(200, &sub_def), (201, &sub_def)],
                    OBJECT_TYPES,
                ),
                op(
                    "patch",
                    format!("patch{gv}{scope}{kind}{suffix}"),
                    format!("partially update {what}"),
                    "patch",
                    PATCH_PARAMS,
                    body(PATCH, PATCH_TYPES),
                    vec![(200, &sub_def), (201, &sub_def)],
                    OBJECT_TYPES,
                ),
            ],
            "binding" | "eviction" | "token" => vec![op(
                "post",
                format!("create{gv}{scope}{kind}{suffix}"),
                format!("create {sub} of a {kind}"),
                "post",
                WRITE_PARAMS,
                body(&sub_def, &["*/*"]),
                vec![(200, &sub_def), (201, &sub_def), (202, &sub_def)],
                OBJECT_TYPES,
            )],
            "finalize" => vec![op(
                "put",
                format!("replace{gv}{scope}{kind}{suffix}"),
                format!("replace {what}"),
                "put",
                WRITE_PARAMS,
                body(&sub_def, &["*/*"]),
                vec![(200, &sub_def), (201, &sub_def)],
                OBJECT_TYPES,
            )],
            // Streams and proxies (log, exec, attach, portforward, proxy) have no schema.
            _ => continue,
        };
        out.push(PathItem {
            path: format!("{collection}/{{name}}/{sub}"),
            name: Some(format!("name of the {}", sub_def.rsplit('.').next().unwrap_or(kind))),
            namespaced: info.namespaced,
            ops: ops.into_iter().map(with_gvk).collect(),
        });
    }
    if info.namespaced {
        out.push(PathItem {
            path: format!("{base}/{}", info.plural),
            name: None,
            namespaced: false,
            ops: vec![op(
                "get",
                format!("list{gv}{kind}ForAllNamespaces"),
                format!("list or watch objects of kind {kind}"),
                "list",
                LIST_PARAMS,
                None,
                vec![(200, &list_def)],
                STREAM_TYPES,
            )],
        });
        out.push(PathItem {
            path: format!("{base}/watch/{}", info.plural),
            name: None,
            namespaced: false,
            ops: vec![op(
                "get",
                format!("watch{gv}{kind}ListForAllNamespaces"),
                format!("watch individual changes to a list of {kind}. deprecated: use the 'watch' parameter with a list operation instead."),
                "watchlist",
                LIST_PARAMS,
                None,
                vec![(200, WATCH_EVENT)],
                STREAM_TYPES,
            )],
        });
    }
    out.push(PathItem {
        path: watch_collection.clone(),
        name: None,
        namespaced: info.namespaced,
        ops: vec![op(
            "get",
            format!("watch{gv}{scope}{kind}List"),
            format!("watch individual changes to a list of {kind}. deprecated: use the 'watch' parameter with a list operation instead."),
            "watchlist",
            LIST_PARAMS,
            None,
            vec![(200, WATCH_EVENT)],
            STREAM_TYPES,
        )],
    });
    out.push(PathItem {
        path: format!("{watch_collection}/{{name}}"),
        name: Some(format!("name of the {kind}")),
        namespaced: info.namespaced,
        ops: vec![op(
            "get",
            format!("watch{gv}{scope}{kind}"),
            format!("watch changes to an object of kind {kind}. deprecated: use the 'watch' parameter with a list operation instead, filtered to a single item with the 'fieldSelector' parameter."),
            "watch",
            LIST_PARAMS,
            None,
            vec![(200, WATCH_EVENT)],
            STREAM_TYPES,
        )],
    });
    out
}

/// `GET /apis/<group>/<version>/`: the group-version's resource list.
pub fn group_version_root(group: &str, version: &str) -> PathItem {
    PathItem {
        path: format!("{}/", prefix(group, version)),
        name: None,
        namespaced: false,
        ops: vec![Op {
            method: "get",
            id: format!("get{}{}APIResources", group_camel(group), capitalize(version)),
            description: "get available resources".into(),
            action: "",
            tag: tag(group, version),
            gvk: None,
            params: &[],
            body: None,
            responses: vec![(200, API_RESOURCE_LIST.to_string())],
            produces: &["application/json", "application/yaml", "application/vnd.kubernetes.protobuf"],
        }],
    }
}

fn status_text(code: u16) -> &'static str {
    match code {
        200 => "OK",
        201 => "Created",
        202 => "Accepted",
        _ => "Unauthorized",
    }
}

fn path_params(item: &PathItem) -> Vec<(Param, Option<&str>)> {
    let mut out = Vec::new();
    if let Some(d) = &item.name {
        out.push((
            Param { name: "name", location: In::Path, ty: "string", description: "" },
            Some(d.as_str()),
        ));
    }
    if item.namespaced {
        out.push((
            Param {
                name: NAMESPACE.name,
                location: In::Path,
                ty: "string",
                description: NAMESPACE.description,
            },
            None,
        ));
    }
    out.push((
        Param { name: PRETTY.name, location: In::Query, ty: PRETTY.ty, description: PRETTY.description },
        None,
    ));
    out
}

fn gvk_value((g, v, k): &(String, String, String)) -> Value {
    json!({ "group": g, "kind": k, "version": v })
}

fn v2_param(p: &Param, description: Option<&str>) -> Value {
    let mut o = json!({
        "name": p.name,
        "in": if p.location == In::Path { "path" } else { "query" },
        "description": description.unwrap_or(p.description),
        "type": p.ty,
        "uniqueItems": true,
    });
    if p.location == In::Path {
        o["required"] = json!(true);
    }
    o
}

fn v3_param(p: &Param, description: Option<&str>) -> Value {
    let mut o = json!({
        "name": p.name,
        "in": if p.location == In::Path { "path" } else { "query" },
        "description": description.unwrap_or(p.description),
        "schema": { "type": p.ty, "uniqueItems": true },
    });
    if p.location == In::Path {
        o["required"] = json!(true);
    }
    o
}

/// Swagger 2.0 `paths`.
pub fn render_v2(items: &[PathItem]) -> Map<String, Value> {
    let mut out = Map::new();
    for item in items {
        let mut p = Map::new();
        for op in &item.ops {
            let mut params: Vec<Value> = Vec::new();
            if let Some(b) = &op.body {
                params.push(json!({
                    "name": "body",
                    "in": "body",
                    "required": b.required,
                    "schema": { "$ref": format!("{V2_REF}{}", b.definition) },
                }));
            }
            params.extend(op.params.iter().map(|p| v2_param(p, None)));
            let mut responses = Map::new();
            for (code, def) in &op.responses {
                responses.insert(
                    code.to_string(),
                    json!({ "description": status_text(*code), "schema": { "$ref": format!("{V2_REF}{def}") } }),
                );
            }
            responses.insert("401".into(), json!({ "description": "Unauthorized" }));
            let mut o = json!({
                "description": op.description,
                "consumes": op.body.as_ref().map(|b| b.types).unwrap_or(&["*/*"]),
                "produces": op.produces,
                "schemes": ["https"],
                "tags": [op.tag],
                "operationId": op.id,
                "responses": responses,
            });
            if !params.is_empty() {
                o["parameters"] = Value::Array(params);
            }
            if !op.action.is_empty() {
                o["x-kubernetes-action"] = json!(op.action);
            }
            if let Some(gvk) = &op.gvk {
                o["x-kubernetes-group-version-kind"] = gvk_value(gvk);
            }
            p.insert(op.method.into(), o);
        }
        let params: Vec<Value> = path_params(item).iter().map(|(p, d)| v2_param(p, *d)).collect();
        p.insert("parameters".into(), Value::Array(params));
        out.insert(item.path.clone(), Value::Object(p));
    }
    out
}

/// OpenAPI 3.0 `paths`.
pub fn render_v3(items: &[PathItem]) -> Map<String, Value> {
    let mut out = Map::new();
    for item in items {
        let mut p = Map::new();
        for op in &item.ops {
            let mut responses = Map::new();
            for (code, def) in &op.responses {
                let content: Map<String, Value> = op
                    .produces
                    .iter()
                    .map(|t| (t.to_string(), json!({ "schema": { "$ref": format!("{V3_REF}{def}") } })))
                    .collect();
                responses.insert(
                    code.to_string(),
                    json!({ "description": status_text(*code), "content": content }),
                );
            }
            responses.insert("401".into(), json!({ "description": "Unauthorized" }));
            let mut o = json!({
                "tags": [op.tag],
                "description": op.description,
                "operationId": op.id,
                "responses": responses,
            });
            if !op.params.is_empty() {
                o["parameters"] = Value::Array(op.params.iter().map(|p| v3_param(p, None)).collect());
            }
            if let Some(b) = &op.body {
                let content: Map<String, Value> = b
                    .types
                    .iter()
                    .map(|t| {
                        (t.to_string(), json!({ "schema": { "$ref": format!("{V3_REF}{}", b.definition) } }))
                    })
                    .collect();
                o["requestBody"] = json!({ "content": content, "required": b.required });
            }
            if !op.action.is_empty() {
                o["x-kubernetes-action"] = json!(op.action);
            }
            if let Some(gvk) = &op.gvk {
                o["x-kubernetes-group-version-kind"] = gvk_value(gvk);
            }
            p.insert(op.method.into(), o);
        }
        let params: Vec<Value> = path_params(item).iter().map(|(p, d)| v3_param(p, *d)).collect();
        p.insert("parameters".into(), Value::Array(params));
        out.insert(item.path.clone(), Value::Object(p));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_upstream() {
        assert_eq!(group_camel(""), "Core");
        assert_eq!(group_camel("apps"), "Apps");
        assert_eq!(group_camel("rbac.authorization.k8s.io"), "RbacAuthorization");
        assert_eq!(group_camel("flowcontrol.apiserver.k8s.io"), "FlowcontrolApiserver");
        assert_eq!(tag("", "v1"), "core_v1");
        assert_eq!(tag("rbac.authorization.k8s.io", "v1"), "rbacAuthorization_v1");
        assert_eq!(prefix("", "v1"), "/api/v1");
        assert_eq!(prefix("apps", "v1"), "/apis/apps/v1");
    }
}
