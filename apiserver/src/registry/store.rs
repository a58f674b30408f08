//! The generic store (upstream's `registry/generic/registry.Store`): create, get, list,
//! update, patch, delete and watch for every resource, with the object-metadata rules all
//! resources share, driven by each resource's [`Hooks`]. Reads come from the watch cache;
//! writes go to etcd, guarded by the object's `resourceVersion` (its etcd mod revision).

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use super::resource::Resource;
use crate::admission::Operation;
use crate::cacher::{CachedObject, Cacher, Event, Filter, object_key, with_rv};
use crate::errors::{ApiError, ApiResult, FieldError};
use crate::storage::etcd3::{Etcd, PAGE, StorageError, prefix_end};
use crate::validation;

/// Attempts of a read-modify-write before giving up on conflicts.
const UPDATE_RETRIES: usize = 10;
/// Characters `generateName` suffixes are made of (no vowels: no words by accident).
const NAME_CHARS: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

#[derive(Clone, Debug, Default)]
pub struct ListOptions {
    pub filter: Filter,
    /// `resourceVersion` of the request: None = the latest (consistent), Some(0) = any.
    pub rv: Option<i64>,
    pub limit: usize,
    pub continue_token: Option<String>,
    /// `resourceVersionMatch=Exact`: the list at exactly `rv` (read from etcd's history).
    pub exact: bool,
}

#[derive(Clone, Debug, Default)]
pub struct DeleteOptions {
    pub grace_period: Option<i64>,
    pub propagation: Option<String>,
    /// The deprecated `orphanDependents`, as given (it only changes the status code now).
    pub orphan_dependents: Option<bool>,
    pub precondition_uid: Option<String>,
    pub precondition_rv: Option<String>,
    pub dry_run: bool,
}

/// What a delete did: gone at once, or marked for deletion and kept (finalizers or a
/// grace period).
pub enum Deleted {
    Now(Value),
    Pending(Value),
}

/// Sees a written object before it is stored, with the stored one (None for a create):
/// how a request records its field manager ([`crate::fieldmanager::record_update`]).
pub type Recorder<'a> = dyn Fn(Option<&Value>, &mut Value) + Send + Sync + 'a;

/// A list's items: decoded, or as the watch cache holds them.
pub enum Items {
    Decoded(Vec<Value>),
    Cached(Vec<Arc<CachedObject>>),
}

/// One list response (`<Kind>List`), before encoding.
pub struct ListPage {
    pub kind: String,
    pub api_version: String,
    pub items: Items,
    pub rv: i64,
    pub cont: Option<String>,
}

impl ListPage {
    fn metadata(&self) -> Value {
        let mut meta = json!({ "resourceVersion": self.rv.to_string() });
        if let Some(c) = &self.cont {
            meta["continue"] = json!(c);
        }
        meta
    }

    /// The list object, decoded (for YAML, protobuf and tables).
    pub fn into_value(self) -> Value {
        let metadata = self.metadata();
        let items = match self.items {
            Items::Decoded(items) => items,
            Items::Cached(items) => items.iter().map(|o| o.value()).collect(),
        };
        json!({ "kind": self.kind, "apiVersion": self.api_version, "metadata": metadata, "items": items })
    }

    /// The list object as JSON; cached items are copied in as they are, not re-encoded.
    pub fn to_json(&self) -> Vec<u8> {
        let head = json!({ "kind": self.kind, "apiVersion": self.api_version, "metadata": self.metadata() });
        let mut out = crate::serializer::object_bytes(&head);
        out.pop(); // the closing brace: the items follow
        out.extend_from_slice(br#","items":["#);
        match &self.items {
            Items::Decoded(items) => {
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(b',');
                    }
                    crate::serializer::write_object(&mut out, item);
                }
            }
            Items::Cached(items) => {
                let size: usize = items.iter().map(|o| o.json.len() + 1).sum();
                out.reserve(size + 2);
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(b',');
                    }
                    out.extend_from_slice(&item.json);
                }
            }
        }
        out.extend_from_slice(b"]}\n");
        out
    }
}

pub struct Store {
    pub res: Arc<Resource>,
    pub etcd: Etcd,
    pub cacher: Arc<Cacher>,
    /// `/registry/<etcd_resource>/`
    pub prefix: String,
    /// `--watch-cache`: when off, gets and lists read etcd and each watch has its own etcd
    /// watch ([`super::etcd_watch`]).
    pub watch_cache: bool,
}

/// RFC 3339 in UTC with whole seconds, as metav1.Time is written.
pub fn now_rfc3339() -> String {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    rfc3339(now.as_secs() as i64)
}

pub fn rfc3339(secs: i64) -> String {
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = if m <= 2 { y + 1 } else { y };
    format!("{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z", rem / 3600, rem % 3600 / 60, rem % 60)
}

/// A random version 4 UUID, as object uids are.
pub fn new_uid() -> String {
    let mut b: [u8; 16] = rand::random();
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!("{}-{}-{}-{}-{}", &h[0..8], &h[8..12], &h[12..16], &h[16..20], &h[20..32])
}

fn generate_name(base: &str) -> String {
    let base = if base.len() > 58 { &base[..58] } else { base };
    let suffix: String =
        (0..5).map(|_| NAME_CHARS[rand::random_range(0..NAME_CHARS.len())] as char).collect();
    format!("{base}{suffix}")
}

fn meta(obj: &Value) -> &Value {
    &obj["metadata"]
}

fn meta_mut(obj: &mut Value) -> &mut serde_json::Map<String, Value> {
    if !obj["metadata"].is_object() {
        obj["metadata"] = json!({});
    }
    obj["metadata"].as_object_mut().expect("just made an object")
}

pub fn name_of(obj: &Value) -> &str {
    meta(obj)["name"].as_str().unwrap_or_default()
}

fn finalizers(obj: &Value) -> Vec<String> {
    meta(obj)["finalizers"]
        .as_array()
        .map(|a| a.iter().filter_map(|f| f.as_str().map(str::to_string)).collect())
        .unwrap_or_default()
}

/// Objects as read from etcd in `res`'s shape: through its
/// [`Converter`](super::resource::Converter) when it has one,
/// then [`Hooks::stored_to_served`](super::resource::Hooks::stored_to_served).
pub(super) async fn to_served(res: &Resource, objs: Vec<Value>) -> ApiResult<Vec<Value>> {
    let objs = match res.hooks.converter() {
        Some(c) => c.convert(objs, &res.info.api_version()).await?,
        None => objs,
    };
    Ok(objs.into_iter().map(|o| res.hooks.stored_to_served(o)).collect())
}

/// One object read from etcd in `res`'s shape (see [`to_served`]).
async fn one_served(res: &Resource, obj: Value) -> ApiResult<Value> {
    to_served(res, vec![obj])
        .await?
        .pop()
        .ok_or_else(|| ApiError::internal("a conversion returned no object"))
}

/// What is stored: the object without its resourceVersion (etcd's revision is the truth),
/// in the storage shape (`Hooks::served_to_stored`, for resources stored in another version's
/// shape); and the object as it reads back from there, which is what a write answers with
/// (a v1 HPA written without a CPU target reads back with the implicit one).
async fn storable(res: &Resource, obj: Value) -> ApiResult<(Vec<u8>, Value)> {
    let obj = match (res.hooks.converter(), res.info.storage_version) {
        (Some(c), Some((group, version))) => {
            let to = if group.is_empty() { version.to_string() } else { format!("{group}/{version}") };
            c.convert(vec![obj], &to)
                .await?
                .pop()
                .ok_or_else(|| ApiError::internal("a conversion returned no object"))?
        }
        _ => obj,
    };
    let mut o = res.hooks.served_to_stored(obj);
    if let Some(m) = o.get_mut("metadata").and_then(Value::as_object_mut) {
        m.remove("resourceVersion");
    }
    let bytes = serde_json::to_vec(&o).map_err(|e| ApiError::internal(e.to_string()))?;
    Ok((bytes, one_served(res, o).await?))
}

impl Store {
    fn info(&self) -> &super::resource::ResourceInfo {
        &self.res.info
    }

    fn key(&self, ns: Option<&str>, name: &str) -> String {
        format!("{}{}", self.prefix, object_key(ns, name))
    }

    fn not_found(&self, name: &str) -> ApiError {
        ApiError::not_found(self.info().plural, self.info().group, name)
    }

    fn storage_error(&self, name: &str, e: StorageError) -> ApiError {
        match e {
            StorageError::AlreadyExists(_) => {
                ApiError::already_exists(self.info().plural, self.info().group, name)
            }
            StorageError::NotFound(_) => self.not_found(name),
            StorageError::Conflict { .. } => ApiError::stale(self.info().plural, self.info().group, name),
            StorageError::TooLarge(n) => {
                ApiError::too_large(format!("object is too large for storage: {n} bytes"))
            }
            StorageError::Compacted(_) => ApiError::gone("the resource version has been compacted"),
            StorageError::Etcd(m) => ApiError::internal(m),
        }
    }

    fn invalid(&self, name: &str, errs: &[FieldError]) -> ApiError {
        ApiError::invalid(self.info().kind, self.info().group, name, errs)
    }

    /// The stored object (from etcd, so a subsequent write can be guarded by its revision).
    pub async fn get_fresh(&self, ns: Option<&str>, name: &str) -> ApiResult<(Value, i64)> {
        let kv = self
            .etcd
            .get(&self.key(ns, name))
            .await
            .map_err(|e| self.storage_error(name, e))?
            .ok_or_else(|| self.not_found(name))?;
        let v: Value = serde_json::from_slice(&kv.value)
            .map_err(|e| ApiError::internal(format!("stored object: {e}")))?;
        let v = one_served(&self.res, v).await?;
        Ok((with_rv(v, kv.mod_revision), kv.mod_revision))
    }

    /// Reads an object: from the cache when it is current (or when any version will do).
    pub async fn get(&self, ns: Option<&str>, name: &str, rv: Option<i64>) -> ApiResult<Value> {
        if !self.watch_cache {
            return Ok(self.get_fresh(ns, name).await?.0);
        }
        let key = object_key(ns, name);
        let current = match rv {
            Some(0) => true,
            Some(r) => self.cacher.wait_for(r, Duration::from_secs(3)).await,
            None => self.cacher.sync().await?,
        };
        if current {
            return self.cacher.get(&key).map(|o| o.value()).ok_or_else(|| self.not_found(name));
        }
        Ok(self.get_fresh(ns, name).await?.0)
    }

    /// A list object (`<Kind>List`) of the matching objects.
    pub async fn list(&self, opts: &ListOptions) -> ApiResult<Value> {
        Ok(self.list_page(opts).await?.into_value())
    }

    /// The matching objects, as [`Store::list`], kept encoded when they come from the cache
    /// (see [`ListPage::to_json`]).
    pub async fn list_page(&self, opts: &ListOptions) -> ApiResult<ListPage> {
        if let Some(token) = &opts.continue_token {
            return self.list_continue(opts, token).await;
        }
        if let (true, Some(rv)) = (opts.exact, opts.rv) {
            return self.list_from_etcd(opts, rv, "").await.map_err(|mut e| {
                if e.code == 410 {
                    e.message = "The resourceVersion for the provided list is too old.".into();
                }
                e
            });
        }
        if !self.watch_cache {
            let rev = self.etcd.current_revision().await.map_err(|e| self.storage_error("", e))?;
            return self.list_from_etcd(opts, rev, "").await;
        }
        let current = match opts.rv {
            Some(0) => true,
            Some(r) => self.cacher.wait_for(r, Duration::from_secs(3)).await,
            None => self.cacher.sync().await?,
        };
        if !current {
            return Err(ApiError::timeout(
                "Too large resource version: the cache could not catch up with etcd",
            ));
        }
        let (items, more, rv) = self.cacher.list(&opts.filter, None, opts.limit);
        let cont = if more {
            items.last().map(|last| encode_continue(rv, &object_key(last.namespace(), last.name())))
        } else {
            None
        };
        Ok(self.page(Items::Cached(items), rv, cont))
    }

    /// Later pages of a paginated list, read from etcd at the first page's revision so all
    /// pages show one consistent state.
    async fn list_continue(&self, opts: &ListOptions, token: &str) -> ApiResult<ListPage> {
        let (rv, after) = decode_continue(token)?;
        self.list_from_etcd(opts, rv, &after).await.map_err(|mut e| {
            if e.code == 410 {
                // Revision 0 reads etcd's current state: the rest of the list, inconsistent.
                e.continue_token = Some(encode_continue(0, &after));
                e.message = "The provided continue parameter is too old to display a consistent list result. \
                             You can start a new list without the continue parameter, or use the continue token \
                             in this response to retrieve the remainder of the results. Continuing with the \
                             provided token results in an inconsistent list - objects that were created, \
                             modified, or deleted between the time the first chunk was returned and now may \
                             show up in the list."
                    .into();
            }
            e
        })
    }

    /// A page of the objects at etcd revision `rv`, after key `after` (relative to the
    /// prefix; "" from the start). Reads etcd a page at a time from the right key, so a
    /// paged list costs one range read per page, not a read of everything per page.
    async fn list_from_etcd(&self, opts: &ListOptions, rv: i64, after: &str) -> ApiResult<ListPage> {
        let scope = match &opts.filter.namespace {
            Some(ns) if self.res.info.namespaced => format!("{}{ns}/", self.prefix),
            _ => self.prefix.clone(),
        };
        let end = prefix_end(scope.as_bytes());
        let mut from = if after.is_empty() {
            scope.clone().into_bytes()
        } else {
            // The key after `after`: etcd ranges are inclusive of their start.
            [format!("{}{after}", self.prefix).as_bytes(), &[0]].concat()
        };
        if from < scope.clone().into_bytes() {
            from = scope.into_bytes();
        }
        // Fetch a little over the page so the filter rarely needs a second read.
        let page_size = if opts.limit > 0 { (opts.limit as i64 + 1).min(PAGE) } else { PAGE };
        let mut items = Vec::new();
        let mut more = false;
        let mut at = rv;
        'pages: loop {
            let page = self.etcd.range_page(from, end.clone(), at, page_size).await.map_err(|e| match e {
                StorageError::Compacted(_) => ApiError::gone(
                    "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter.",
                ),
                other => self.storage_error("", other),
            })?;
            at = page.revision;
            let count = page.kvs.len();
            // Undecodable values are left out; the rest convert in one go (one webhook
            // call per page for a custom resource with a conversion webhook).
            let (places, values): (Vec<(usize, i64)>, Vec<Value>) = page
                .kvs
                .into_iter()
                .enumerate()
                .filter_map(|(i, kv)| Some(((i, kv.mod_revision), serde_json::from_slice(&kv.value).ok()?)))
                .unzip();
            let values = to_served(&self.res, values).await?;
            for ((i, rev), v) in places.into_iter().zip(values) {
                let obj = with_rv(v, rev);
                if !opts.filter.matches(&self.res, &obj) {
                    continue;
                }
                items.push(obj);
                if opts.limit > 0 && items.len() == opts.limit {
                    // As upstream: a continue token whenever etcd holds more keys in range.
                    more = i + 1 < count || page.next.is_some();
                    break 'pages;
                }
            }
            match page.next {
                Some(next) => from = next,
                None => break,
            }
        }
        let cont = if more {
            items.last().map(|last| {
                encode_continue(at, &object_key(last["metadata"]["namespace"].as_str(), name_of(last)))
            })
        } else {
            None
        };
        Ok(self.page(Items::Decoded(items), at, cont))
    }

    fn page(&self, items: Items, rv: i64, cont: Option<String>) -> ListPage {
        ListPage { kind: self.info().list_kind(), api_version: self.info().api_version(), items, rv, cont }
    }

    /// Starts a watch; see [`Cacher::watch`].
    pub async fn watch(
        &self,
        filter: Filter,
        rv: Option<i64>,
        bookmarks: bool,
        send_initial: bool,
    ) -> ApiResult<(tokio::sync::mpsc::Receiver<Event>, Option<u64>)> {
        if !self.watch_cache {
            if send_initial {
                return Err(ApiError::bad_request(
                    "sendInitialEvents is served from the watch cache, which this resource does not have (--watch-cache=false, or a custom resource converted by a webhook)",
                ));
            }
            return Ok((super::etcd_watch::watch(self, filter, rv).await?, None));
        }
        if let Some(r) = rv
            && r > 0
            && !self.cacher.wait_for(r, Duration::from_secs(3)).await
        {
            return Err(ApiError::timeout(format!(
                "Too large resource version: {r}, current: {}",
                self.cacher.rv()
            )));
        }
        if rv.is_none() {
            self.cacher.sync().await?;
        }
        // A streaming list starts from the cache's state, which is then at least `rv`.
        let (from, initial_end) = if send_initial { (None, true) } else { (rv, false) };
        let (events, id) = self.cacher.watch(filter, from, bookmarks, initial_end)?;
        Ok((events, Some(id)))
    }

    /// Fills in and defaults what a create sets, without storing. Validation comes in
    /// [`Store::admit`], after the mutating admission plugins (as upstream: the
    /// ServiceAccount plugin sets the `serviceAccountName` a projected token needs).
    pub fn prepare_create(&self, ns: Option<&str>, obj: Value) -> ApiResult<Value> {
        let mut obj = (self.res.normalize)(obj)?;
        self.res.hooks.convert_in(&mut obj);
        let m = meta_mut(&mut obj);
        match (ns, m.get("namespace").and_then(Value::as_str)) {
            (Some(url), Some(body)) if !body.is_empty() && body != url => {
                return Err(ApiError::bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request",
                ));
            }
            (Some(url), _) if self.info().namespaced => {
                m.insert("namespace".into(), json!(url));
            }
            _ => {}
        }
        if m.get("name").and_then(Value::as_str).is_none_or(str::is_empty)
            && let Some(base) = m.get("generateName").and_then(Value::as_str).filter(|g| !g.is_empty())
        {
            let name = generate_name(base);
            m.insert("name".into(), json!(name));
        }
        m.insert("uid".into(), json!(new_uid()));
        m.insert("creationTimestamp".into(), json!(now_rfc3339()));
        for f in ["resourceVersion", "deletionTimestamp", "deletionGracePeriodSeconds", "selfLink"] {
            m.remove(f);
        }
        if self.res.hooks.tracks_generation() {
            m.insert("generation".into(), json!(1));
        } else {
            m.remove("generation");
        }
        self.res.hooks.prepare_for_create(&mut obj);
        self.res.hooks.default(&mut obj);
        Ok(obj)
    }

    /// Stores a prepared object; returns it with its resourceVersion.
    pub async fn insert(&self, obj: Value) -> ApiResult<Value> {
        let name = name_of(&obj).to_string();
        let ns = meta(&obj)["namespace"].as_str().map(str::to_string);
        let (bytes, obj) = storable(&self.res, obj).await?;
        let rev = self
            .etcd
            .create(&self.key(ns.as_deref(), &name), bytes)
            .await
            .map_err(|e| self.storage_error(&name, e))?;
        Ok(with_rv(obj, rev))
    }

    pub async fn create(&self, ns: Option<&str>, obj: Value, dry_run: bool) -> ApiResult<Value> {
        let obj = self.prepare_create(ns, obj)?;
        let obj = self.admit(Operation::Create, None, obj, None, dry_run).await?;
        if dry_run {
            return Ok(obj);
        }
        self.insert(obj).await
    }

    /// Applies the update rules to `new` against the stored `old`: metadata the client may
    /// not change, status kept apart, generation, validation.
    pub fn prepare_update(&self, mut new: Value, old: &Value, subresource: Option<&str>) -> ApiResult<Value> {
        let name = name_of(old).to_string();
        new = (self.res.normalize)(new)?;
        self.res.hooks.convert_in(&mut new);
        let new_uid = meta(&new)["uid"].as_str().map(str::to_string);
        if let Some(uid) = new_uid
            && !uid.is_empty()
            && Some(uid.as_str()) != meta(old)["uid"].as_str()
        {
            return Err(ApiError::conflict(
                self.info().plural,
                self.info().group,
                &name,
                &format!(
                    "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                    meta(old)["uid"].as_str().unwrap_or_default()
                ),
            ));
        }
        {
            let om = meta(old).clone();
            let m = meta_mut(&mut new);
            for f in [
                "uid",
                "creationTimestamp",
                "namespace",
                "name",
                "generation",
                "deletionTimestamp",
                "deletionGracePeriodSeconds",
            ] {
                match om.get(f) {
                    Some(v) => {
                        m.insert(f.into(), v.clone());
                    }
                    None => {
                        m.remove(f);
                    }
                }
            }
        }
        match subresource {
            Some("status") => self.res.hooks.prepare_for_status_update(&mut new, old),
            Some(sub) => self.res.hooks.prepare_for_subresource_update(sub, &mut new, old),
            None => self.res.hooks.prepare_for_update(&mut new, old),
        }
        self.res.hooks.default(&mut new);
        if self.res.hooks.tracks_generation() && self.res.hooks.generation_changed(&new, old) {
            let g = meta(old)["generation"].as_i64().unwrap_or(1) + 1;
            meta_mut(&mut new).insert("generation".into(), json!(g));
        }
        let mut errs = validation::object_meta(
            &new,
            self.info().namespaced,
            self.res.hooks.name_rule(),
            self.res.hooks.kube_finalizers(),
        );
        errs.extend(validation::object_meta_update(&new, old));
        errs.extend(self.res.hooks.validate(&new));
        if !subresource.is_some_and(|sub| self.res.hooks.replaces_update_validation(sub)) {
            errs.extend(self.res.hooks.validate_update(&new, old));
        }
        if let Some(sub) = subresource {
            errs.extend(self.res.hooks.validate_subresource_update(sub, &new, old));
        }
        if !errs.is_empty() {
            return Err(self.invalid(&name, &errs));
        }
        Ok(new)
    }

    /// Replaces an object (PUT). The body's resourceVersion, if set, must be current.
    pub async fn update(
        &self,
        ns: Option<&str>,
        name: &str,
        obj: Value,
        subresource: Option<&str>,
        dry_run: bool,
        record: Option<&Recorder<'_>>,
    ) -> ApiResult<(Value, bool)> {
        let body_name = meta(&obj)["name"].as_str().unwrap_or_default();
        if !body_name.is_empty() && body_name != name {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({body_name}) does not match the name on the URL ({name})"
            )));
        }
        if let (Some(url), Some(body)) = (ns, meta(&obj)["namespace"].as_str())
            && !body.is_empty()
            && body != url
        {
            return Err(ApiError::bad_request(
                "the namespace of the provided object does not match the namespace sent on the request",
            ));
        }
        let wanted_rv = meta(&obj)["resourceVersion"].as_str().filter(|s| !s.is_empty()).map(str::to_string);
        // Without a resourceVersion the update is unconditional: a write that lands between
        // the read and ours (a controller's status update) is no conflict for the client,
        // so it is tried again on the fresh object, as upstream's GuaranteedUpdate does.
        let mut attempts = if wanted_rv.is_some() { 1 } else { UPDATE_RETRIES };
        loop {
            attempts -= 1;
            let (old, rev) = match self.get_fresh(ns, name).await {
                Ok(found) => found,
                Err(e) if e.is_not_found() && self.res.hooks.create_on_update() && subresource.is_none() => {
                    let mut obj = obj.clone();
                    meta_mut(&mut obj).insert("name".into(), json!(name));
                    if let Some(record) = record {
                        record(None, &mut obj);
                    }
                    return Ok((self.create(ns, obj, dry_run).await?, true));
                }
                Err(e) => return Err(e),
            };
            if let Some(w) = &wanted_rv
                && w.parse::<i64>().ok() != Some(rev)
            {
                return Err(ApiError::stale(self.info().plural, self.info().group, name));
            }
            let mut candidate = obj.clone();
            if let Some(record) = record {
                record(Some(&old), &mut candidate);
            }
            let new = self.prepare_update(candidate, &old, subresource)?;
            let new = self.admit(Operation::Update, subresource, new, Some(&old), dry_run).await?;
            if dry_run {
                return Ok((with_rv(new, rev), false));
            }
            match self.write_update(ns, name, new, rev).await {
                Err(e) if e.is_conflict() && attempts > 0 => continue,
                written => return Ok((written?, false)),
            }
        }
    }

    /// Passes a create or update of the current request through admission (see
    /// [`crate::admission`]). An object a mutating plugin changed is defaulted and
    /// validated again, so nothing invalid is stored whoever changed it.
    pub(crate) async fn admit(
        &self,
        op: Operation,
        subresource: Option<&str>,
        obj: Value,
        old: Option<&Value>,
        dry_run: bool,
    ) -> ApiResult<Value> {
        if subresource.is_none() {
            crate::authz::escalation::check(&self.res.info, op, &obj, old).await?;
        }
        let ns = meta(&obj)["namespace"].as_str().map(str::to_string);
        let name = name_of(&obj).to_string();
        let before = obj.clone();
        // Between the mutating and the validating plugins: a create is validated (its
        // first validation), an update only when a plugin changed it (prepare_update
        // validated what the client sent).
        let check = |obj: &mut Value| -> ApiResult<()> {
            let changed = *obj != before;
            if !changed && op != Operation::Create {
                return Ok(());
            }
            if changed {
                self.res.hooks.default(obj);
            }
            let mut errs = validation::object_meta(
                obj,
                self.info().namespaced,
                self.res.hooks.name_rule(),
                self.res.hooks.kube_finalizers(),
            );
            errs.extend(self.res.hooks.validate(obj));
            if op == Operation::Create {
                errs.extend(self.res.hooks.validate_create(obj));
            }
            if let Some(old) = old {
                errs.extend(validation::object_meta_update(obj, old));
                if !subresource.is_some_and(|sub| self.res.hooks.replaces_update_validation(sub)) {
                    errs.extend(self.res.hooks.validate_update(obj, old));
                }
                if let Some(sub) = subresource {
                    errs.extend(self.res.hooks.validate_subresource_update(sub, obj, old));
                }
            }
            if errs.is_empty() { Ok(()) } else { Err(self.invalid(&name, &errs)) }
        };
        let admitted = crate::admission::run_checked(
            &self.res.info,
            op,
            subresource,
            ns.as_deref(),
            &name,
            Some(obj),
            old,
            dry_run,
            &check,
        )
        .await?;
        Ok(admitted.unwrap_or(before))
    }

    /// Stores an updated object guarded by the revision it was based on. An object being
    /// deleted whose last finalizer went is deleted now.
    pub async fn write_update(&self, ns: Option<&str>, name: &str, new: Value, rev: i64) -> ApiResult<Value> {
        if !meta(&new)["deletionTimestamp"].is_null()
            && finalizers(&new).is_empty()
            && !self.res.hooks.keep_while_deleting(&new)
        {
            let drev =
                self.etcd.delete(&self.key(ns, name), rev).await.map_err(|e| self.storage_error(name, e))?;
            return Ok(with_rv(new, drev));
        }
        let (bytes, new) = storable(&self.res, new).await?;
        let r = self
            .etcd
            .update(&self.key(ns, name), bytes, rev)
            .await
            .map_err(|e| self.storage_error(name, e))?;
        Ok(with_rv(new, r))
    }

    /// Read-modify-write that retries on conflicts (server-side changes: patches without
    /// a resourceVersion, status bookkeeping, finalizers).
    pub async fn guaranteed_update<F>(
        &self,
        ns: Option<&str>,
        name: &str,
        subresource: Option<&str>,
        dry_run: bool,
        mut f: F,
    ) -> ApiResult<Value>
    where
        F: FnMut(&Value) -> ApiResult<Value>,
    {
        for _ in 0..UPDATE_RETRIES {
            let (old, rev) = self.get_fresh(ns, name).await?;
            let candidate = f(&old)?;
            let new = self.prepare_update(candidate, &old, subresource)?;
            let new = self.admit(Operation::Update, subresource, new, Some(&old), dry_run).await?;
            if dry_run {
                return Ok(with_rv(new, rev));
            }
            match self.write_update(ns, name, new, rev).await {
                Err(e) if e.is_conflict() => continue,
                other => return other,
            }
        }
        Err(ApiError::stale(self.info().plural, self.info().group, name))
    }

    /// Deletes an object, honouring preconditions, finalizers, grace periods and the
    /// propagation policy (recorded as the garbage collector's finalizers, as upstream).
    pub async fn delete(&self, ns: Option<&str>, name: &str, opts: &DeleteOptions) -> ApiResult<Deleted> {
        let mut admitted = false;
        for _ in 0..UPDATE_RETRIES {
            let (mut obj, rev) = self.get_fresh(ns, name).await?;
            if !admitted {
                crate::admission::run(
                    &self.res.info,
                    Operation::Delete,
                    None,
                    ns,
                    name,
                    None,
                    Some(&obj),
                    opts.dry_run,
                )
                .await?;
                admitted = true;
            }
            if let Some(uid) = &opts.precondition_uid
                && meta(&obj)["uid"].as_str() != Some(uid.as_str())
            {
                return Err(ApiError::conflict(
                    self.info().plural,
                    self.info().group,
                    name,
                    &format!(
                        "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                        meta(&obj)["uid"].as_str().unwrap_or_default()
                    ),
                ));
            }
            if let Some(want) = &opts.precondition_rv
                && want.parse::<i64>().ok() != Some(rev)
            {
                return Err(ApiError::conflict(
                    self.info().plural,
                    self.info().group,
                    name,
                    &format!(
                        "Precondition failed: ResourceVersion in precondition: {want}, ResourceVersion in object meta: {rev}"
                    ),
                ));
            }
            let mut fins = finalizers(&obj);
            match opts.propagation.as_deref() {
                Some("Orphan") if !fins.iter().any(|f| f == "orphan") => fins.push("orphan".into()),
                Some("Foreground") if !fins.iter().any(|f| f == "foregroundDeletion") => {
                    fins.push("foregroundDeletion".into())
                }
                _ => {}
            }
            let grace = match opts.grace_period {
                _ if self.res.hooks.delete_at_once(&obj) => None,
                // Only kinds with graceful deletion (pods) keep an object for a grace
                // period; any other goes at once whatever period the delete asked for,
                // as upstream's BeforeDelete for strategies that are not graceful.
                _ if self.res.hooks.default_grace_period(&obj).is_none() => None,
                Some(g) => (g > 0).then_some(g),
                None => self.res.hooks.default_grace_period(&obj),
            };
            let already = !meta(&obj)["deletionTimestamp"].is_null();
            if fins.is_empty() && grace.is_none() {
                if opts.dry_run {
                    return Ok(Deleted::Now(obj));
                }
                match self.etcd.delete(&self.key(ns, name), rev).await {
                    Ok(drev) => return Ok(Deleted::Now(with_rv(obj, drev))),
                    Err(StorageError::Conflict { .. }) => continue,
                    Err(e) => return Err(self.storage_error(name, e)),
                }
            }
            // Keep the object, marked: finalizers (or the kubelet, for a pod's grace
            // period) finish the deletion.
            let secs = grace.unwrap_or(0);
            let m = meta_mut(&mut obj);
            if !already {
                let at = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap_or_default()
                    .as_secs() as i64
                    + secs;
                m.insert("deletionTimestamp".into(), json!(rfc3339(at)));
                m.insert("deletionGracePeriodSeconds".into(), json!(secs));
                if self.res.hooks.tracks_generation() {
                    let g = m.get("generation").and_then(Value::as_i64).unwrap_or(1) + 1;
                    m.insert("generation".into(), json!(g));
                }
            } else if let Some(g) = grace {
                // A shorter grace period may replace a longer one, never the other way.
                let old = m.get("deletionGracePeriodSeconds").and_then(Value::as_i64).unwrap_or(i64::MAX);
                if g < old {
                    m.insert("deletionGracePeriodSeconds".into(), json!(g));
                }
            }
            if !fins.is_empty() {
                m.insert("finalizers".into(), json!(fins));
            }
            if opts.dry_run {
                return Ok(Deleted::Pending(obj));
            }
            let (bytes, obj) = storable(&self.res, obj).await?;
            match self.etcd.update(&self.key(ns, name), bytes, rev).await {
                Ok(r) => return Ok(Deleted::Pending(with_rv(obj, r))),
                Err(StorageError::Conflict { .. }) => continue,
                Err(e) => return Err(self.storage_error(name, e)),
            }
        }
        Err(ApiError::stale(self.info().plural, self.info().group, name))
    }

    /// Deletes every object a list would return; answers with the list of what was deleted.
    pub async fn delete_collection(&self, opts: &ListOptions, del: &DeleteOptions) -> ApiResult<Value> {
        let list = self.list(&ListOptions { limit: 0, continue_token: None, ..opts.clone() }).await?;
        let mut deleted = Vec::new();
        for item in list["items"].as_array().cloned().unwrap_or_default() {
            let ns = item["metadata"]["namespace"].as_str().map(str::to_string);
            match self.delete(ns.as_deref(), name_of(&item), del).await {
                Ok(Deleted::Now(o) | Deleted::Pending(o)) => deleted.push(o),
                Err(e) if e.is_not_found() => {}
                Err(e) => return Err(e),
            }
        }
        Ok(self.page(Items::Decoded(deleted), self.cacher.rv(), None).into_value())
    }
}

/// Continue tokens: base64 of `{"rv":N,"start":"<key after which to resume>"}`, as
/// upstream's (which carry the same two facts).
fn encode_continue(rv: i64, after: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .encode(json!({ "v": "meta.k8s.io/v1", "rv": rv, "start": after }).to_string())
}

fn decode_continue(token: &str) -> ApiResult<(i64, String)> {
    use base64::Engine;
    let bad = || ApiError::bad_request("continue key is not valid: incorrect encoded start resourceVersion");
    let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(token.trim_end_matches('='))
        .map_err(|_| bad())?;
    let v: Value = serde_json::from_slice(&raw).map_err(|_| bad())?;
    let rv = v["rv"].as_i64().ok_or_else(bad)?;
    let start = v["start"].as_str().ok_or_else(bad)?.to_string();
    Ok((rv, start))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_and_uids() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(1_700_000_000), "2023-11-14T22:13:20Z");
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
        let u = new_uid();
        assert_eq!(u.len(), 36);
        assert_eq!(&u[14..15], "4");
        let n = generate_name("web-");
        assert!(n.starts_with("web-") && n.len() == 9);
    }

    #[test]
    fn continue_tokens_round_trip() {
        let t = encode_continue(42, "ns/pod-9");
        assert_eq!(decode_continue(&t).unwrap(), (42, "ns/pod-9".to_string()));
        assert!(decode_continue("%%%").is_err());
    }
}
