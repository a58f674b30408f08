//! Subresources: `status` (only status changes), a CSR's `approval`, `scale` (the replica count of workload
//! resources, as an autoscaling/v1 Scale), `pods/binding` (the scheduler's placement),
//! `pods/eviction` ([`crate::eviction`]), `namespaces/finalize` (the namespace controller's
//! last step) and `serviceaccounts/token`
//! (the TokenRequest API, [`crate::authn::serviceaccount::token_request`]).

use http::{Request, StatusCode};
use hyper::body::Incoming;
use serde_json::{Value, json};

use super::codec::{self, Output};
use super::request::RequestInfo;
use super::{Api, BoxBody, Query, body_of, respond_with, rv_of};
use crate::apiextensions::custom_resource;
use crate::authn::serviceaccount::token_request;
use crate::errors::{ApiError, ApiResult};
use crate::registry::store::Store;

pub async fn handle(
    api: &Api,
    store: &Store,
    info: &RequestInfo,
    sub: &str,
    q: Query,
    req: Request<Incoming>,
    output: Output,
) -> ApiResult<http::Response<BoxBody>> {
    if !store.res.info.has_subresource(sub) {
        return Err(ApiError::no_route(req.uri().path()));
    }
    let ns = info.namespace.as_deref();
    let name = info.name.clone().unwrap_or_default();
    match (sub, info.verb) {
        // `status`, a CSR's `approval`, a pod's `ephemeralcontainers`: the object, of which
        // the write changes only what the subresource may (see the resource's hooks).
        ("status" | "approval" | "ephemeralcontainers", "get") => {
            let obj = store.get(ns, &name, rv_of(&q)?).await?;
            Ok(respond_with(StatusCode::OK, &obj, output, store, &q))
        }
        ("status" | "approval" | "ephemeralcontainers", "update") => {
            let (headers, body) = body_of(req).await?;
            let obj = codec::decode(&headers, &body)?;
            let warnings = super::check_fields(&api.openapi, store, &q, &obj, &body).await?;
            let dry = super::dry_run(&q);
            let fields = super::FieldsOf::new(&api.openapi, store, &q, &headers, Some(sub)).await?;
            let record = |old: Option<&Value>, obj: &mut Value| fields.record(old, obj);
            let (obj, _) = store.update(ns, &name, obj, Some(sub), dry, Some(&record)).await?;
            Ok(super::with_warnings(respond_with(StatusCode::OK, &obj, output, store, &q), &warnings))
        }
        ("status" | "approval" | "ephemeralcontainers", "patch") => {
            let (headers, body) = body_of(req).await?;
            let patch = crate::patch::Patch::decode(&headers, &body)?;
            let manager = super::manager_of(&q, &headers)?;
            let (obj, warnings) = crate::patch::apply_patch(
                store,
                &api.openapi,
                crate::patch::Target { ns, name: &name, subresource: Some(sub) },
                patch,
                &q,
                &manager,
            )
            .await?;
            Ok(super::with_warnings(respond_with(StatusCode::OK, &obj, output, store, &q), &warnings))
        }
        ("scale", "get") => {
            let obj = store.get(ns, &name, rv_of(&q)?).await?;
            Ok(super::json_response(StatusCode::OK, &scale_of(store, &obj)))
        }
        ("scale", "update" | "patch") => {
            let is_patch = info.verb == "patch";
            let (headers, body) = body_of(req).await?;
            let dry = super::dry_run(&q);
            let body_value: Value = if is_patch {
                serde_json::from_slice(&body)
                    .map_err(|e| ApiError::bad_request(format!("error decoding patch: {e}")))?
            } else {
                codec::decode(&headers, &body)?
            };
            let updated = store
                .guaranteed_update(ns, &name, None, dry, |old| {
                    let mut scale = scale_of(store, old);
                    if is_patch {
                        crate::patch::merge_patch(&mut scale, &body_value);
                    } else {
                        if let Some(rv) =
                            body_value["metadata"]["resourceVersion"].as_str().filter(|r| !r.is_empty())
                            && old["metadata"]["resourceVersion"].as_str() != Some(rv)
                        {
                            return Err(ApiError::stale(store.res.info.plural, store.res.info.group, &name));
                        }
                        scale = body_value.clone();
                    }
                    let replicas = scale["spec"]["replicas"].as_i64().unwrap_or(0);
                    if replicas < 0 {
                        return Err(ApiError::invalid(
                            "Scale",
                            "autoscaling",
                            &name,
                            &[crate::errors::FieldError::invalid(
                                "spec.replicas",
                                replicas,
                                "must be greater than or equal to 0",
                            )],
                        ));
                    }
                    let mut new = old.clone();
                    match store.res.hooks.scale_paths() {
                        Some(paths) => {
                            custom_resource::set_at(&mut new, &paths.spec_replicas, json!(replicas))
                        }
                        None => new["spec"]["replicas"] = json!(replicas),
                    }
                    Ok(new)
                })
                .await?;
            Ok(super::json_response(StatusCode::OK, &scale_of(store, &updated)))
        }
        ("binding", "create") => {
            let (headers, body) = body_of(req).await?;
            let binding = codec::decode(&headers, &body)?;
            crate::pods::bind(store, ns.unwrap_or_default(), &name, &binding, super::dry_run(&q)).await?;
            Ok(super::json_response(
                StatusCode::CREATED,
                &json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}),
            ))
        }
        ("eviction", "create") => {
            let (headers, body) = body_of(req).await?;
            let eviction = codec::decode(&headers, &body)?;
            let ns = ns.unwrap_or_default();
            let status =
                crate::eviction::evict(&api.registry, store, ns, &name, &eviction, super::dry_run(&q))
                    .await?;
            Ok(super::json_response(StatusCode::CREATED, &status))
        }
        // The TokenRequest API exists only with a signing key and issuer, as upstream.
        // (The body is read first: answering before it makes HTTP/2 clients drop the reply.)
        ("token", _) if api.authn.issuer().is_none() => {
            let path = req.uri().path().to_string();
            body_of(req).await?;
            Err(ApiError::no_route(&path))
        }
        ("token", "create") => {
            let issuer = api.authn.issuer().cloned().ok_or_else(|| ApiError::no_route(req.uri().path()))?;
            let (headers, body) = body_of(req).await?;
            let request = codec::decode(&headers, &body)?;
            let ns = ns.unwrap_or_default();
            let dry = super::dry_run(&q);
            let out = token_request::create(&issuer, &api.registry, ns, &name, &request, dry).await?;
            let output = if output == Output::Table { Output::Json } else { output };
            let (ct, bytes) = codec::encode(&out, output);
            Ok(super::full(StatusCode::CREATED, ct, bytes))
        }
        ("finalize", "update") => {
            let (headers, body) = body_of(req).await?;
            let obj = codec::decode(&headers, &body)?;
            let out = crate::namespaces::finalize(store, &name, obj, super::dry_run(&q)).await?;
            Ok(respond_with(StatusCode::OK, &out, output, store, &q))
        }
        _ => Err(ApiError::method_not_allowed(format!(
            "{} is not supported on {}/{sub}",
            info.verb, store.res.info.plural
        ))),
    }
}

/// The autoscaling/v1 Scale of a workload object (or of a custom resource, at the
/// paths its CRD names).
fn scale_of(store: &Store, obj: &Value) -> Value {
    if let Some(paths) = store.res.hooks.scale_paths() {
        let int_at = |p: &str| custom_resource::lookup(obj, p).and_then(Value::as_i64).unwrap_or(0);
        let selector = paths
            .label_selector
            .as_deref()
            .and_then(|p| custom_resource::lookup(obj, p))
            .and_then(Value::as_str)
            .unwrap_or_default();
        let mut status = json!({ "replicas": int_at(&paths.status_replicas) });
        if !selector.is_empty() {
            status["selector"] = json!(selector);
        }
        return scale(obj, int_at(&paths.spec_replicas), status);
    }
    let selector = match obj["spec"]["selector"].get("matchLabels") {
        Some(Value::Object(m)) => m
            .iter()
            .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default()))
            .collect::<Vec<_>>()
            .join(","),
        _ => match &obj["spec"]["selector"] {
            // ReplicationControllers select with a plain map.
            Value::Object(m) if store.res.info.kind == "ReplicationController" => m
                .iter()
                .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default()))
                .collect::<Vec<_>>()
                .join(","),
            _ => String::new(),
        },
    };
    let status = json!({ "replicas": obj["status"]["replicas"].as_i64().unwrap_or(0), "selector": selector });
    scale(obj, obj["spec"]["replicas"].as_i64().unwrap_or(0), status)
}

/// An autoscaling/v1 Scale for `obj` with these replicas and status.
fn scale(obj: &Value, replicas: i64, status: Value) -> Value {
    json!({
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": {
            "name": obj["metadata"]["name"],
            "namespace": obj["metadata"]["namespace"],
            "uid": obj["metadata"]["uid"],
            "resourceVersion": obj["metadata"]["resourceVersion"],
            "creationTimestamp": obj["metadata"]["creationTimestamp"],
        },
        "spec": { "replicas": replicas },
        "status": status,
    })
}
