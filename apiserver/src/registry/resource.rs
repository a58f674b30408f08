//! What the server knows about each resource: its names for discovery and URLs, where it
//! is stored, how its objects are decoded, and the strategy hooks the generic store calls
//! (upstream's `rest.RESTCreateStrategy` and friends). A resource adds only its hooks.

use std::sync::Arc;

use serde_json::Value;

use crate::errors::{ApiError, ApiResult, FieldError};
use crate::validation::NameRule;

/// Names and placement of one resource (one group/version/kind).
#[derive(Clone, Debug)]
pub struct ResourceInfo {
    pub group: &'static str,
    pub version: &'static str,
    pub kind: &'static str,
    pub plural: &'static str,
    pub singular: &'static str,
    pub short_names: &'static [&'static str],
    pub categories: &'static [&'static str],
    pub namespaced: bool,
    /// Subresources served (`status`, `scale`, `binding`, `finalize`, ...).
    pub subresources: &'static [&'static str],
    /// The etcd key segment under the prefix (`pods`, `minions`, `services/specs`).
    pub etcd_resource: &'static str,
    /// The verbs served on the main resource (discovery lists them; others are answered
    /// 405 MethodNotAllowed, as upstream's storages that lack an interface).
    pub verbs: &'static [&'static str],
    /// The group and version objects are stored as when not this one's (autoscaling/v1
    /// HPAs are stored as autoscaling/v2, events.k8s.io/v1 Events as core/v1): what
    /// discovery's `storageVersionHash` names.
    pub storage_version: Option<(&'static str, &'static str)>,
}

impl ResourceInfo {
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.to_string()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    pub fn list_kind(&self) -> String {
        format!("{}List", self.kind)
    }

    pub fn has_subresource(&self, name: &str) -> bool {
        self.subresources.contains(&name)
    }

    /// Every verb of a stored resource.
    pub const ALL_VERBS: &'static [&'static str] =
        &["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"];

    /// The verbs discovery lists for the main resource.
    pub fn verbs(&self) -> &'static [&'static str] {
        self.verbs
    }

    pub fn serves(&self, verb: &str) -> bool {
        self.verbs.contains(&verb)
    }

    /// Serves only `verbs` (namespaces have no `deletecollection`).
    pub fn with_verbs(mut self, verbs: &'static [&'static str]) -> Self {
        self.verbs = verbs;
        self
    }

    /// Stored in another group/version's shape (see [`ResourceInfo::storage_version`]).
    pub fn stored_as(mut self, group: &'static str, version: &'static str) -> Self {
        self.storage_version = Some((group, version));
        self
    }

    /// Upstream's `storageVersionHash`: the first 8 bytes of the SHA-256 of the stored
    /// `<group>/<version>/<kind>`, base64. Clients (the storage version migrator) compare it
    /// to notice a change of storage version.
    pub fn storage_version_hash(&self) -> String {
        use base64::Engine;
        use sha2::{Digest, Sha256};
        let (g, v) = self.storage_version.unwrap_or((self.group, self.version));
        let digest = Sha256::digest(format!("{g}/{v}/{}", self.kind).as_bytes());
        base64::engine::general_purpose::STANDARD.encode(&digest[..8])
    }
}

/// Builds a [`ResourceInfo`] from a k8s-openapi type's constants plus the names the type
/// does not carry.
pub fn info_of<K: k8s_openapi::Resource>(
    singular: &'static str,
    short_names: &'static [&'static str],
    categories: &'static [&'static str],
    namespaced: bool,
    subresources: &'static [&'static str],
    etcd_resource: &'static str,
) -> ResourceInfo {
    ResourceInfo {
        group: K::GROUP,
        version: K::VERSION,
        kind: K::KIND,
        plural: K::URL_PATH_SEGMENT,
        singular,
        short_names,
        categories,
        namespaced,
        subresources,
        etcd_resource,
        verbs: ResourceInfo::ALL_VERBS,
        storage_version: None,
    }
}

/// Where a resource's scale subresource (a custom resource's, from its CRD) finds its numbers (`.spec.replicas`, ...).
#[derive(Clone, Debug)]
pub struct ScalePaths {
    pub spec_replicas: String,
    pub status_replicas: String,
    pub label_selector: Option<String>,
}

/// One `additionalPrinterColumns` entry.
#[derive(Clone, Debug)]
pub struct PrinterColumn {
    pub name: String,
    pub kind: String,
    pub format: String,
    pub description: String,
    pub priority: i64,
    pub json_path: String,
}

/// Interns a name known only at run time (a custom resource's), so that it can live in a
/// [`ResourceInfo`] beside the built-in names: each distinct string is allocated once for
/// the life of the process, which bounds what repeated CRD updates cost.
pub fn intern(s: &str) -> &'static str {
    static NAMES: std::sync::LazyLock<parking_lot::Mutex<std::collections::HashSet<&'static str>>> =
        std::sync::LazyLock::new(Default::default);
    let mut names = NAMES.lock();
    if let Some(n) = names.get(s) {
        return n;
    }
    let n: &'static str = Box::leak(s.to_string().into_boxed_str());
    names.insert(n);
    n
}

/// [`intern`] for a list of names.
pub fn intern_list(items: &[String]) -> &'static [&'static str] {
    static LISTS: std::sync::LazyLock<
        parking_lot::Mutex<std::collections::HashSet<&'static [&'static str]>>,
    > = std::sync::LazyLock::new(Default::default);
    let interned: Vec<&'static str> = items.iter().map(|s| intern(s)).collect();
    let mut lists = LISTS.lock();
    if let Some(l) = lists.get(interned.as_slice()) {
        return l;
    }
    let l: &'static [&'static str] = Box::leak(interned.into_boxed_slice());
    lists.insert(l);
    l
}

/// A conversion between versions that calls out of the server (a CustomResourceDefinition's
/// conversion webhook): asynchronous, and it can fail. A resource with one is served
/// without a watch cache, so that every read converts (and a failure reaches the client).
#[async_trait::async_trait]
pub trait Converter: Send + Sync {
    /// `objs` in `api_version` (`group/version`), in order; those already in it are not
    /// sent anywhere.
    async fn convert(&self, objs: Vec<Value>, api_version: &str) -> ApiResult<Vec<Value>>;
}

/// Per-resource behaviour the generic store calls. Every hook has a do-nothing default.
pub trait Hooks: Send + Sync + 'static {
    /// What upstream's conversion from the served version into its internal type does
    /// beyond copying fields (a pod's singular `podIP` and plural `podIPs` kept in step):
    /// applied to every object a client writes, right after it is decoded.
    fn convert_in(&self, _obj: &mut Value) {}

    /// Fills in defaults (upstream's defaulting functions).
    fn default(&self, _obj: &mut Value) {}

    /// Resets what a client may not set on create (status, usually).
    fn prepare_for_create(&self, obj: &mut Value) {
        if self.has_status()
            && let Some(o) = obj.as_object_mut()
        {
            o.remove("status");
        }
    }

    /// Keeps what a client may not change through the main resource (status, usually).
    fn prepare_for_update(&self, new: &mut Value, old: &Value) {
        if self.has_status() {
            copy_field(new, old, "status");
        }
    }

    /// For the status subresource: keeps the stored spec whatever the request carries
    /// (upstream's status strategies; most, as here, let the request's metadata through).
    fn prepare_for_status_update(&self, new: &mut Value, old: &Value) {
        keep_spec(new, old);
    }

    /// For another writable subresource (a CSR's `approval`): what the write may change.
    fn prepare_for_subresource_update(&self, _subresource: &str, new: &mut Value, old: &Value) {
        keep_spec(new, old);
    }

    /// Errors in a new object.
    fn validate(&self, _obj: &Value) -> Vec<FieldError> {
        Vec::new()
    }

    /// Errors only a new object can have (what may be set later but not at creation),
    /// beside `validate`'s.
    fn validate_create(&self, _obj: &Value) -> Vec<FieldError> {
        Vec::new()
    }

    /// Errors in an update (immutable fields and the like), beside `validate`'s.
    fn validate_update(&self, _new: &Value, _old: &Value) -> Vec<FieldError> {
        Vec::new()
    }

    /// Errors in a write through a subresource (`status`, `approval`), beside
    /// `validate`'s and `validate_update`'s: what that subresource may not change.
    fn validate_subresource_update(&self, _subresource: &str, _new: &Value, _old: &Value) -> Vec<FieldError> {
        Vec::new()
    }

    /// Whether a write through `subresource` is judged by
    /// [`Hooks::validate_subresource_update`] in place of [`Hooks::validate_update`]
    /// (upstream's subresources with an update validation of their own, such as
    /// `pods/ephemeralcontainers`, which changes what a pod update may not).
    fn replaces_update_validation(&self, _subresource: &str) -> bool {
        false
    }

    /// Whether the resource has a status the main resource must not change.
    fn has_status(&self) -> bool {
        true
    }

    /// Whether `metadata.generation` counts spec changes.
    fn tracks_generation(&self) -> bool {
        false
    }

    /// Fields selectable with `fieldSelector`, beyond `metadata.name`/`metadata.namespace`.
    fn fields(&self, _obj: &Value) -> Vec<(&'static str, String)> {
        Vec::new()
    }

    /// The names of those fields, to refuse selectors on others.
    fn field_names(&self) -> &'static [&'static str] {
        &[]
    }

    /// Whether finalizer names follow the built-in kinds' rule (a name without a `/` must
    /// be a standard one); the apiextensions kinds only ask for qualified names.
    fn kube_finalizers(&self) -> bool {
        true
    }

    /// How object names are checked.
    fn name_rule(&self) -> NameRule {
        NameRule::Subdomain
    }

    /// Warnings about a written object that is valid but probably not meant (returned as
    /// `Warning` headers, as upstream's strategies' WarningsOnCreate/Update).
    fn warnings(&self, _obj: &Value) -> Vec<String> {
        Vec::new()
    }

    /// Whether PUT may create a missing object (upstream's AllowCreateOnUpdate).
    fn create_on_update(&self) -> bool {
        false
    }

    /// The grace period a delete without one gets; None deletes at once.
    fn default_grace_period(&self, _obj: &Value) -> Option<i64> {
        None
    }

    /// Whether a delete goes at once whatever grace period it asked for (upstream's
    /// `CheckGracefulDelete` setting the period to 0: a pod no kubelet runs).
    fn delete_at_once(&self, _obj: &Value) -> bool {
        false
    }

    /// Whether an object marked for deletion must stay although its `metadata.finalizers`
    /// are empty (a pod in its grace period, a namespace with `spec.finalizers`).
    fn keep_while_deleting(&self, obj: &Value) -> bool {
        self.default_grace_period(obj).is_some()
    }

    /// Converts an object as stored into this resource's shape. Resources that share
    /// their storage with another version's shape (events.k8s.io/v1 Events are stored as
    /// core/v1 Events, under the same etcd key) convert here; the store and the watch
    /// cache apply it to everything they read from etcd.
    fn stored_to_served(&self, obj: Value) -> Value {
        obj
    }

    /// The inverse of [`Hooks::stored_to_served`]: the shape written to etcd.
    fn served_to_stored(&self, obj: Value) -> Value {
        obj
    }

    /// A conversion that calls out, applied before [`Hooks::stored_to_served`] on what is
    /// read and before [`Hooks::served_to_stored`] on what is written.
    fn converter(&self) -> Option<&dyn Converter> {
        None
    }

    /// The fields of a written object its schema does not declare, for field validation;
    /// None leaves it to the OpenAPI definitions of the built-in kinds.
    fn unknown_fields(&self, _obj: &Value) -> Option<Vec<String>> {
        None
    }

    /// The schema of the kind's fields for field ownership, field validation of patches
    /// and server-side apply, when the kind's own (a custom resource's); None for the
    /// built-in kinds, whose schemas are the OpenAPI documents'.
    fn patch_meta(&self) -> Option<crate::openapi::PatchMeta<'_>> {
        None
    }

    /// Whether `application/strategic-merge-patch+json` is served (not for custom
    /// resources, as upstream: 415).
    fn strategic_merge(&self) -> bool {
        true
    }

    /// Where the `scale` subresource reads and writes replicas; None for the built-in
    /// workload kinds (`spec.replicas`, `status.replicas`, `spec.selector`).
    fn scale_paths(&self) -> Option<&ScalePaths> {
        None
    }

    /// The Table columns after Name; None for the built-in kinds' printers.
    fn printer_columns(&self) -> Option<&[PrinterColumn]> {
        None
    }

    /// Whether an update moves `metadata.generation` on (for kinds that track it).
    fn generation_changed(&self, new: &Value, old: &Value) -> bool {
        new.get("spec") != old.get("spec")
    }
}

/// Copies `field` of `from` into `to` (or removes it from `to` when `from` has none).
pub fn copy_field(to: &mut Value, from: &Value, field: &str) {
    let Some(o) = to.as_object_mut() else { return };
    match from.get(field) {
        Some(v) => {
            o.insert(field.to_string(), v.clone());
        }
        None => {
            o.remove(field);
        }
    }
}

/// A resource the server serves.
pub struct Resource {
    pub info: ResourceInfo,
    /// Decodes JSON into the resource's Rust type and back: unknown fields are dropped and
    /// wrongly typed ones refused (400), as upstream's decoder does.
    pub normalize: Box<dyn Fn(Value) -> ApiResult<Value> + Send + Sync>,
    pub hooks: Box<dyn Hooks>,
}

impl Resource {
    pub fn new<K>(info: ResourceInfo, hooks: impl Hooks) -> Arc<Self>
    where
        K: serde::de::DeserializeOwned + serde::Serialize + k8s_openapi::Resource + 'static,
    {
        Arc::new(Self { info, normalize: Box::new(normalize::<K>), hooks: Box::new(hooks) })
    }
}

/// The typed round trip behind [`Resource::normalize`].
pub fn normalize<K>(mut v: Value) -> ApiResult<Value>
where
    K: serde::de::DeserializeOwned + serde::Serialize + k8s_openapi::Resource,
{
    let typed: K = match <K as serde::Deserialize>::deserialize(&v) {
        Ok(t) => t,
        Err(e) => {
            // Only where the kind requires the time (the decode failed) is it filled in.
            if !fill_zero_condition_times(&mut v) {
                return Err(ApiError::bad_request(decode_message::<K>(&e)));
            }
            serde_json::from_value(v).map_err(|e| ApiError::bad_request(decode_message::<K>(&e)))?
        }
    };
    let mut out = serde_json::to_value(&typed).map_err(|e| ApiError::internal(e.to_string()))?;
    if let Some(o) = out.as_object_mut() {
        o.insert("apiVersion".into(), Value::String(K::API_VERSION.into()));
        o.insert("kind".into(), Value::String(K::KIND.into()));
    }
    Ok(out)
}

/// Go's zero `metav1.Time`, which k8s-openapi's required `Time` fields stand in for.
const GO_ZERO_TIME: &str = "0001-01-01T00:00:00Z";

/// A `metav1.Condition` in `status.conditions` without `lastTransitionTime` (absent or
/// null) decodes in Go to the zero time; k8s-openapi makes the field required. Clients do
/// send such conditions (conformance's Service status lifecycle), so the zero time is
/// written in. Upstream would store and serve `null` there; the zero time's RFC 3339 form is
/// kept instead, which Go clients read as the same zero time and Rust clients (our own
/// components decode Services with k8s-openapi) can read at all. Called only once the typed
/// decode failed, so kinds whose condition time is optional keep what the client sent.
/// Returns whether it filled any.
fn fill_zero_condition_times(v: &mut Value) -> bool {
    let Some(conditions) = v.pointer_mut("/status/conditions").and_then(Value::as_array_mut) else {
        return false;
    };
    let mut filled = false;
    for c in conditions.iter_mut().filter_map(Value::as_object_mut) {
        if c.get("lastTransitionTime").is_none_or(Value::is_null) {
            c.insert("lastTransitionTime".into(), Value::String(GO_ZERO_TIME.into()));
            filled = true;
        }
    }
    filled
}

fn decode_message<K: k8s_openapi::Resource>(e: &serde_json::Error) -> String {
    format!("error decoding {} {}: {e}", K::API_VERSION, K::KIND)
}

/// The resource with no special behaviour beyond keeping status apart.
pub struct Plain {
    pub status: bool,
    pub generation: bool,
}

impl Hooks for Plain {
    fn has_status(&self) -> bool {
        self.status
    }
    fn tracks_generation(&self) -> bool {
        self.generation
    }
}

/// The top-level fields that are neither metadata nor status: the spec, for kinds that
/// keep theirs at the top (PersistentVolume's `spec`, but also a CSR's or a Lease's).
fn is_spec_field(key: &str) -> bool {
    !matches!(key, "metadata" | "status" | "apiVersion" | "kind")
}

/// What a status write keeps of the stored object in upstream's usual status strategy
/// (`newObj.Spec = oldObj.Spec`): every field but metadata and status comes from `old`.
pub fn keep_spec(new: &mut Value, old: &Value) {
    let Some(o) = new.as_object_mut() else { return };
    o.retain(|k, _| !is_spec_field(k));
    for (k, v) in old.as_object().into_iter().flatten() {
        if is_spec_field(k) {
            o.insert(k.clone(), v.clone());
        }
    }
}

/// Upstream's `metav1.ResetObjectMetaForStatus`, for the status strategies of the newer
/// kinds (VolumeAttachment): labels, annotations, finalizers, owner references (and the
/// deletion timestamp and generation) stay as stored.
pub fn reset_meta_for_status(new: &mut Value, old: &Value) {
    for f in ["deletionTimestamp", "generation", "labels", "annotations", "finalizers", "ownerReferences"] {
        copy_meta_field(new, old, f);
    }
}

/// Copies `metadata.<field>` of `from` into `to` (or removes it from `to`).
pub fn copy_meta_field(to: &mut Value, from: &Value, field: &str) {
    if !to["metadata"].is_object() {
        return;
    }
    copy_field(&mut to["metadata"], &from["metadata"], field);
}

/// A status write that changes nothing but status: all metadata stays as stored but the
/// request's `managedFields` (which record the write) and resourceVersion (its
/// precondition), as the flow-control kinds' status strategies.
pub fn keep_all_but_status(new: &mut Value, old: &Value) {
    let managed = new["metadata"].get("managedFields").cloned();
    let rv = new["metadata"].get("resourceVersion").cloned();
    keep_spec(new, old);
    new["metadata"] = old["metadata"].clone();
    for (f, v) in [("managedFields", managed), ("resourceVersion", rv)] {
        match v {
            Some(v) => new["metadata"][f] = v,
            None => {
                if let Some(m) = new["metadata"].as_object_mut() {
                    m.remove(f);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::Service;
    use serde_json::json;

    use super::*;

    #[test]
    fn condition_without_transition_time_gets_go_zero_time() {
        let svc = json!({
            "apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"},
            "status": {"conditions": [
                {"type": "StatusUpdate", "status": "True", "reason": "E2E", "message": "m"},
                {"type": "Other", "status": "True", "reason": "R", "message": "m",
                 "lastTransitionTime": "2024-01-02T03:04:05Z"},
            ]},
        });
        let out = normalize::<Service>(svc).expect("decodes");
        let conditions = &out["status"]["conditions"];
        assert_eq!(conditions[0]["lastTransitionTime"], GO_ZERO_TIME);
        assert_eq!(conditions[1]["lastTransitionTime"], "2024-01-02T03:04:05Z");
    }

    #[test]
    fn other_decode_errors_are_still_refused() {
        let svc = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"},
                         "spec": {"ports": "not a list"}});
        let err = normalize::<Service>(svc).unwrap_err();
        assert!(err.to_string().contains("error decoding v1 Service"), "{err}");
    }
}
