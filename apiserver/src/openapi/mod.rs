//! OpenAPI documents: `/openapi/v2` and `/openapi/v3` (per group-version), generated from
//! the Rust types of the served resources.
//!
//! # What is served
//!
//! - `GET /openapi/v3`: the discovery document, `{"paths": {"api/v1": {"serverRelativeURL":
//!   "/openapi/v3/api/v1?hash=<ETAG>"}, "apis/apps/v1": {...}}}`.
//! - `GET /openapi/v3/api/v1`, `/openapi/v3/apis/<group>/<version>`: an OpenAPI 3.0 document
//!   with that group-version's paths and every schema they reach.
//! - `GET /openapi/v2`: one Swagger 2.0 document with every path and definition.
//!
//! All are JSON by default. `/openapi/v2` is also served as protobuf (gnostic's
//! `openapi.v2.Document`, see [`protobuf_v2`]) to `Accept: application/com.github.proto-
//! openapi.spec.v2@v1.0+protobuf` (or the older `...spec.v2.v1.0+protobuf`), the only form
//! kubectl asks for when it falls back to v2. The v3 protobuf form is answered 406 Not
//! Acceptable: kubectl v1.32 reads v3 JSON for `explain`, `apply`, `create`, `diff` and field
//! validation.
//!
//! # Caching
//!
//! Every document is generated and serialized once and served as bytes: [`OpenApi::new`]
//! starts a thread that renders them (80-150 ms of CPU for the built-in resources), so
//! startup does not wait; a request that comes first waits for that thread. Each carries
//! an `ETag` (upstream's: the upper-case hex SHA-512 of the JSON, quoted; the v2 protobuf
//! form reuses its JSON's, as upstream's does); `If-None-Match` with it gets 304. A v3
//! request with `?hash=<ETAG>` is immutable (`Cache-Control: public, immutable`, `Expires`
//! a year ahead); one with another hash is redirected (301) to the current one, as
//! upstream's handler does.
//!
//! [`OpenApi::respond`] sees only the path and `Accept`; [`OpenApi::respond_to`] sees the
//! whole request (query and `If-None-Match`) and is what the handler should call.
//!
//! # Also
//!
//! [`OpenApi::patch_meta`] answers, for a kind's fields, the patch strategy and merge key a
//! server-side strategic merge patch needs, from the same table kubectl reads.

mod custom;
mod extensions;
mod kinds;
mod patch_meta;
mod paths;
mod protobuf_v2;
mod schemas;

pub use custom::{CustomKind, patch_definitions};
pub use patch_meta::{FieldMeta, PatchMeta};

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode, header};
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha512};

use crate::errors::{ApiError, ApiResult};
use crate::handlers::{BoxBody, full};
use crate::registry::Registry;
use crate::registry::resource::ResourceInfo;

const JSON: &str = "application/json";
/// The media type of the v2 document as protobuf, as upstream's kube-openapi answers it.
/// Clients (kubectl) ask with the deprecated `@` spelling, [`V2_PROTOBUF_AT`], which is no
/// valid media type to parse: answering with it breaks Go's `mime.ParseMediaType`.
const V2_PROTOBUF: &str = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf";
const V2_PROTOBUF_AT: &str = "application/com.github.proto-openapi.spec.v2@v1.0+protobuf";

/// The representation a request gets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Format {
    Json,
    Protobuf,
}

/// One serialized document and its entity tag (unquoted).
struct Doc {
    bytes: Bytes,
    etag: String,
}

impl Doc {
    fn new(v: &Value) -> Self {
        let bytes = Bytes::from(serde_json::to_vec(v).unwrap_or_default());
        let etag = hex_upper(&Sha512::digest(&bytes));
        Self { bytes, etag }
    }
}

fn hex_upper(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02X}")).collect()
}

/// The documents of a set of resources, rendered once, on first use or by the thread
/// [`OpenApi::new`] starts (so neither startup nor, usually, the first client waits).
pub struct OpenApi {
    resources: Arc<Vec<ResourceInfo>>,
    /// The built-in resources' documents (what [`OpenApi::patch_meta`] reads).
    docs: Arc<OnceLock<Docs>>,
    /// With custom resources served: the documents that include them, rendered again
    /// whenever the set of custom kinds changes (see [`OpenApi::set_custom`]).
    current: parking_lot::RwLock<Option<Arc<Rendering>>>,
}

/// The documents of the built-in resources plus a set of custom kinds.
struct Rendering {
    custom: Vec<CustomKind>,
    docs: OnceLock<Docs>,
}

/// How long a change of custom kinds waits before its documents are rendered, so that a
/// burst of CRD changes renders once.
const CUSTOM_RENDER_DELAY: Duration = Duration::from_millis(200);

/// The rendered documents.
struct Docs {
    v2: Doc,
    /// The v2 document as protobuf, with the JSON's ETag.
    v2_protobuf: Doc,
    v3_discovery: Doc,
    /// `api/v1`, `apis/apps/v1`, ... → the group-version's document.
    v3: BTreeMap<String, Doc>,
    /// When the documents were made (their `Last-Modified`).
    generated: SystemTime,
    /// The definitions (v2 form) and the name of each kind's, for [`OpenApi::patch_meta`].
    definitions: Map<String, Value>,
    names: BTreeMap<(String, String, String), String>,
}

impl Default for OpenApi {
    /// Documents with no resources (for tests of other parts).
    fn default() -> Self {
        Self::with_resources(Vec::new())
    }
}

impl OpenApi {
    /// The documents for the registry's resources, rendered at once on a thread of their
    /// own.
    pub fn new(registry: &Registry) -> Self {
        let this = Self::with_resources(registry.stores.iter().map(|s| s.res.info.clone()).collect());
        let (resources, docs) = (this.resources.clone(), this.docs.clone());
        let spawned = std::thread::Builder::new().name("openapi".into()).spawn(move || {
            docs.get_or_init(|| Docs::render(&resources, &[]));
        });
        if let Err(e) = spawned {
            tracing::warn!(error = %e, "openapi: no thread to render the documents; the first request will");
        }
        this
    }

    /// The documents for these resources (in discovery order), rendered on first use.
    pub fn with_resources(resources: Vec<ResourceInfo>) -> Self {
        Self { resources: Arc::new(resources), docs: Arc::new(OnceLock::new()), current: Default::default() }
    }

    /// Publishes these custom kinds (replacing those published before): the documents are
    /// rendered again, on a thread of their own after a short delay, or by the first
    /// request that needs them.
    pub fn set_custom(&self, custom: Vec<CustomKind>) {
        if custom.is_empty() {
            *self.current.write() = None;
            return;
        }
        let rendering = Arc::new(Rendering { custom, docs: OnceLock::new() });
        *self.current.write() = Some(rendering.clone());
        let resources = self.resources.clone();
        let weak = Arc::downgrade(&rendering);
        drop(rendering);
        let spawned = std::thread::Builder::new().name("openapi-custom".into()).spawn(move || {
            std::thread::sleep(CUSTOM_RENDER_DELAY);
            // Only if still current (a newer set replaced it otherwise).
            if let Some(r) = weak.upgrade() {
                r.docs.get_or_init(|| Docs::render(&resources, &r.custom));
            }
        });
        if let Err(e) = spawned {
            tracing::warn!(error = %e, "openapi: no thread to render the documents; the first request will");
        }
    }

    /// The documents to serve: with the custom kinds when there are any.
    fn serving(&self) -> (Option<Arc<Rendering>>, &Docs) {
        let current = self.current.read().clone();
        (current, self.docs())
    }

    /// The documents, rendered by this caller if no one has yet (a caller that comes while
    /// another renders waits for it).
    fn docs(&self) -> &Docs {
        self.docs.get_or_init(|| Docs::render(&self.resources, &[]))
    }

    /// Serves `path` (under `/openapi/`) for a request that carries only `Accept`.
    pub fn respond(&self, path: &str, accept: &str) -> ApiResult<Response<BoxBody>> {
        self.serve(path, None, accept, None)
    }

    /// Serves a request under `/openapi/`, honouring `?hash=` and `If-None-Match`.
    pub fn respond_to<B>(&self, req: &http::Request<B>) -> ApiResult<Response<BoxBody>> {
        let header = |name| req.headers().get(name).and_then(|v: &HeaderValue| v.to_str().ok());
        self.serve(
            req.uri().path(),
            req.uri().query(),
            header(header::ACCEPT).unwrap_or(""),
            header(header::IF_NONE_MATCH),
        )
    }

    fn serve(
        &self,
        path: &str,
        query: Option<&str>,
        accept: &str,
        if_none_match: Option<&str>,
    ) -> ApiResult<Response<BoxBody>> {
        let (current, builtin) = self.serving();
        let docs = match &current {
            Some(r) => r.docs.get_or_init(|| Docs::render(&self.resources, &r.custom)),
            None => builtin,
        };
        let path = path.trim_end_matches('/');
        let (doc, gv, content_type) = match path {
            "/openapi/v2" => match negotiate(accept, "v2", true)? {
                Format::Json => (&docs.v2, None, JSON),
                Format::Protobuf => (&docs.v2_protobuf, None, V2_PROTOBUF),
            },
            "/openapi/v3" => (&docs.v3_discovery, None, JSON),
            _ => {
                let gv = path.strip_prefix("/openapi/v3/").ok_or_else(|| ApiError::no_route(path))?;
                let doc = docs.v3.get(gv).ok_or_else(|| ApiError::no_route(path))?;
                negotiate(accept, "v3", false)?;
                (doc, Some(gv), JSON)
            }
        };
        let hash = query.and_then(|q| {
            url::form_urlencoded::parse(q.as_bytes()).find(|(k, _)| k == "hash").map(|(_, v)| v.into_owned())
        });
        let mut immutable = false;
        if let (Some(gv), Some(hash)) = (gv, hash.filter(|h| !h.is_empty())) {
            if hash != doc.etag {
                let mut r = full(StatusCode::MOVED_PERMANENTLY, "text/html; charset=utf-8", Bytes::new());
                insert(&mut r, header::LOCATION, &relative_url(gv, &doc.etag));
                return Ok(r);
            }
            immutable = true;
        }
        let quoted = format!("\"{}\"", doc.etag);
        let not_modified = if_none_match.is_some_and(|v| {
            v.split(',').map(|t| t.trim().trim_start_matches("W/")).any(|t| t == quoted || t == "*")
        });
        let mut r = if not_modified {
            let mut r = full(StatusCode::NOT_MODIFIED, JSON, Bytes::new());
            r.headers_mut().remove(header::CONTENT_TYPE);
            r
        } else {
            full(StatusCode::OK, content_type, doc.bytes.clone())
        };
        insert(&mut r, header::ETAG, &quoted);
        insert(&mut r, header::VARY, "Accept");
        insert(&mut r, header::LAST_MODIFIED, &http_date(docs.generated));
        if immutable {
            insert(&mut r, header::CACHE_CONTROL, "public, immutable");
            insert(
                &mut r,
                header::EXPIRES,
                &http_date(SystemTime::now() + Duration::from_secs(365 * 24 * 3600)),
            );
        }
        Ok(r)
    }

    /// Waits until the documents are rendered, rendering them on a blocking thread if no one
    /// has started: an async caller awaits this before [`OpenApi::patch_meta`] so that it
    /// never blocks a runtime worker (rendering never calls back into the runtime).
    pub async fn rendered(&self) {
        if self.docs.get().is_some() {
            return;
        }
        let (resources, docs) = (self.resources.clone(), self.docs.clone());
        let _ = tokio::task::spawn_blocking(move || {
            docs.get_or_init(|| Docs::render(&resources, &[]));
        })
        .await;
    }

    /// The patch metadata of a kind's fields, for a server-side strategic merge patch: the
    /// same `x-kubernetes-patch-*` extensions kubectl reads (see [`PatchMeta`]). Blocks
    /// while the documents are being rendered (see [`OpenApi::rendered`]).
    pub fn patch_meta(&self, group: &str, version: &str, kind: &str) -> Option<PatchMeta<'_>> {
        let docs = self.docs();
        let name = docs.names.get(&(group.to_string(), version.to_string(), kind.to_string()))?;
        PatchMeta::new(&docs.definitions, name)
    }

    /// The group-versions with a v3 document (`api/v1`, `apis/apps/v1`, ...).
    pub fn v3_group_versions(&self) -> impl Iterator<Item = &str> {
        self.docs().v3.keys().map(String::as_str)
    }
}

impl Docs {
    /// Renders every document for `infos` and the `custom` kinds (about 80 ms for the
    /// built-in resources).
    fn render(builtin: &[ResourceInfo], custom: &[CustomKind]) -> Self {
        let infos: Vec<ResourceInfo> =
            builtin.iter().cloned().chain(custom.iter().map(|c| c.info.clone())).collect();
        let infos = infos.as_slice();
        let started = std::time::Instant::now();
        let mut req = schemas::Request::default();
        for info in infos {
            if !req.group_versions.contains(&(info.group, info.version)) {
                req.group_versions.push((info.group, info.version));
            }
            if custom.iter().any(|c| {
                c.info.group == info.group && c.info.version == info.version && c.info.kind == info.kind
            }) {
                // Its definition comes from its CRD (below).
            } else {
                match kinds::find(info.group, info.version, info.kind) {
                    Some(k) => {
                        if !req.resources.iter().any(|r| std::ptr::eq(*r, k)) {
                            req.resources.push(k);
                        }
                    }
                    None => tracing::warn!(
                        group = info.group,
                        version = info.version,
                        kind = info.kind,
                        "openapi: no Rust type for this kind"
                    ),
                }
            }
            for sub in info.subresources {
                if let Some(k) = kinds::subresource_kind(sub).and_then(|(g, v, k)| kinds::find(g, v, k))
                    && !req.subresources.iter().any(|r| std::ptr::eq(*r, k))
                {
                    req.subresources.push(k);
                }
            }
        }
        let mut defs = schemas::generate(&req);
        custom::add_definitions(&mut defs, custom);

        let mut all_paths = Vec::new();
        let mut v3 = BTreeMap::new();
        for &(group, version) in &req.group_versions {
            let mut items = vec![paths::group_version_root(group, version)];
            for info in infos.iter().filter(|i| i.group == group && i.version == version) {
                items.extend(paths::resource_paths(info, &defs));
            }
            let roots: BTreeSet<&str> = items.iter().flat_map(paths::PathItem::definitions).collect();
            let schemas: Map<String, Value> = defs
                .closure(roots)
                .into_iter()
                .filter_map(|name| {
                    let schema = schemas::definition_v3(&name, defs.schemas.get(&name)?);
                    Some((name, schema))
                })
                .collect();
            let doc = json!({
                "openapi": "3.0.0",
                "info": { "title": "Kubernetes", "version": crate::discovery::GIT_VERSION },
                "paths": paths::render_v3(&items),
                "components": {
                    "schemas": schemas,
                    "securitySchemes": {
                        "BearerToken": {
                            "type": "apiKey",
                            "description": "Bearer Token authentication",
                            "name": "authorization",
                            "in": "header",
                        },
                    },
                },
                "security": [{ "BearerToken": [] }],
            });
            v3.insert(paths::prefix(group, version).trim_start_matches('/').to_string(), Doc::new(&doc));
            all_paths.extend(items);
        }
        let v3_paths: Map<String, Value> = v3
            .iter()
            .map(|(gv, d)| (gv.clone(), json!({ "serverRelativeURL": relative_url(gv, &d.etag) })))
            .collect();
        let v3_discovery = Doc::new(&json!({ "paths": v3_paths }));
        let v2_value = json!({
            "swagger": "2.0",
            "info": { "title": "Kubernetes", "version": crate::discovery::GIT_VERSION },
            "paths": paths::render_v2(&all_paths),
            "definitions": &defs.schemas,
            "securityDefinitions": {
                "BearerToken": {
                    "description": "Bearer Token authentication",
                    "type": "apiKey",
                    "name": "authorization",
                    "in": "header",
                },
            },
            "security": [{ "BearerToken": [] }],
        });
        let v2 = Doc::new(&v2_value);
        // Encoded from the JSON form so the two cannot disagree; upstream's protobuf
        // response carries the JSON's ETag too.
        let v2_protobuf = Doc { bytes: Bytes::from(protobuf_v2::encode(&v2_value)), etag: v2.etag.clone() };
        let v3_bytes: usize = v3.values().map(|d| d.bytes.len()).sum();
        tracing::info!(
            took_ms = started.elapsed().as_millis() as u64,
            definitions = defs.schemas.len(),
            v2_bytes = v2.bytes.len(),
            v2_protobuf_bytes = v2_protobuf.bytes.len(),
            v3_documents = v3.len(),
            v3_bytes,
            "openapi documents generated"
        );
        let schemas::Definitions { schemas: definitions, names } = defs;
        Self { v2, v2_protobuf, v3_discovery, v3, generated: SystemTime::now(), definitions, names }
    }
}

fn relative_url(gv: &str, etag: &str) -> String {
    format!("/openapi/v3/{gv}?hash={etag}")
}

fn insert(r: &mut Response<BoxBody>, name: header::HeaderName, value: &str) {
    if let Ok(v) = HeaderValue::from_str(value) {
        r.headers_mut().insert(name, v);
    }
}

/// Picks the representation `accept` asks for: JSON for no `Accept`, `application/json`,
/// `application/*` and `*/*`; protobuf for the v2 protobuf media types when `protobuf` is
/// offered. Of the acceptable clauses the one with the highest `q` wins (the first, on a
/// tie); none acceptable is 406.
fn negotiate(accept: &str, version: &str, protobuf: bool) -> ApiResult<Format> {
    if accept.trim().is_empty() {
        return Ok(Format::Json);
    }
    let mut best: Option<(f32, Format)> = None;
    for clause in accept.split(',') {
        let mut parts = clause.split(';');
        let media = parts.next().unwrap_or("").trim().to_ascii_lowercase();
        let q = parts
            .find_map(|p| p.trim().strip_prefix("q=").map(|q| q.trim().parse::<f32>().unwrap_or(1.0)))
            .unwrap_or(1.0);
        let format = match media.as_str() {
            "application/json" | "application/*" | "*/*" => Format::Json,
            V2_PROTOBUF | V2_PROTOBUF_AT if protobuf => Format::Protobuf,
            _ => continue,
        };
        if q > 0.0 && best.is_none_or(|(b, _)| q > b) {
            best = Some((q, format));
        }
    }
    let offered = if protobuf { format!("application/json or {V2_PROTOBUF}") } else { JSON.to_string() };
    best.map(|(_, f)| f).ok_or_else(|| {
        ApiError::not_acceptable(format!(
            "only {offered} is served for the OpenAPI {version} document (asked for {accept:?})"
        ))
    })
}

/// An HTTP date (RFC 7231 IMF-fixdate): `Sun, 06 Nov 1994 08:49:37 GMT`.
fn http_date(t: SystemTime) -> String {
    let secs = t.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs();
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (h, m, s) = (rem / 3600, rem % 3600 / 60, rem % 60);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    const WEEKDAYS: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
    const MONTHS: [&str; 12] =
        ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];
    format!(
        "{}, {day:02} {} {year} {h:02}:{m:02}:{s:02} GMT",
        WEEKDAYS[(days % 7) as usize],
        MONTHS[(month - 1) as usize]
    )
}

#[cfg(test)]
mod tests;
