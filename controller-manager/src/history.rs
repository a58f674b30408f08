//! Controller history (upstream `pkg/controller/history`): the ControllerRevisions in which
//! DaemonSets and StatefulSets record each pod template they have run, so a rollout knows
//! which pods are current and `kubectl rollout history/undo` can go back.
//!
//! A revision's `data` is a strategic merge patch that puts a template back:
//! `{"spec":{"template":{..., "$patch":"replace"}}}` — the shape kubectl applies on undo.
//! Revisions are compared by that data, normalized so a template written as protobuf (zero
//! values spelled out) equals the same template written as JSON.

use std::cmp::Ordering;
use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::runtime::RawExtension;
use kube::api::{Api, PostParams};
use serde_json::{Value, json};

use crate::controller::{self, Error};
use crate::controllers::deployment::util::{SAFE_ALPHABET, normalized};

/// The label naming a revision's hash, on the revision and on the pods made from it.
pub const HASH_LABEL: &str = "controller-revision-hash";
/// Upstream truncates the parent's name so `<parent>-<hash>` stays a valid name.
const MAX_PREFIX: usize = 223;

/// FNV-1, 32 bit (upstream hashes revisions with `fnv.New32`, not the `a` variant).
fn fnv1_32(bytes: &[u8]) -> u32 {
    bytes.iter().fold(0x811c_9dc5_u32, |h, b| h.wrapping_mul(0x0100_0193) ^ u32::from(*b))
}

/// Upstream's `SafeEncodeString` over the decimal form of `n`: no vowels, no look-alikes.
pub fn safe_encode(n: u32) -> String {
    n.to_string().bytes().map(|b| char::from(SAFE_ALPHABET[usize::from(b) % SAFE_ALPHABET.len()])).collect()
}

/// The patch that restores `template` (upstream's `getPatch`).
pub fn template_patch(template: &PodTemplateSpec) -> Value {
    let mut t = serde_json::to_value(template).unwrap_or_else(|_| json!({}));
    as_go_writes(&mut t);
    if let Some(o) = t.as_object_mut() {
        o.insert("$patch".into(), json!("replace"));
    }
    json!({"spec": {"template": t}})
}

/// Spells out what Go's `json.Marshal` of the typed template writes and k8s-openapi leaves
/// out: `metadata.creationTimestamp: null` (a struct, never omitted) and `resources: {}` in
/// every container (likewise). Upstream compares revisions by these bytes (`daemon.Match`,
/// used by its controller and by the e2e suite), so ours must be the same bytes for the
/// same template: otherwise upstream's controller, taking over, sees no current revision
/// and writes a duplicate.
fn as_go_writes(template: &mut Value) {
    let Some(t) = template.as_object_mut() else { return };
    let meta = t.entry("metadata").or_insert_with(|| json!({}));
    if let Some(m) = meta.as_object_mut() {
        m.entry("creationTimestamp").or_insert(Value::Null);
    }
    let Some(spec) = t.get_mut("spec").and_then(Value::as_object_mut) else { return };
    for list in ["initContainers", "containers", "ephemeralContainers"] {
        for c in spec.get_mut(list).and_then(Value::as_array_mut).into_iter().flatten() {
            if let Some(c) = c.as_object_mut() {
                c.entry("resources").or_insert_with(|| json!({}));
            }
        }
    }
}

/// The template a revision's data restores, if it holds one.
pub fn template_of(rev: &ControllerRevision) -> Option<PodTemplateSpec> {
    let mut t = rev.data.as_ref()?.0.pointer("/spec/template")?.clone();
    if let Some(o) = t.as_object_mut() {
        o.remove("$patch");
    }
    serde_json::from_value(t).ok()
}

/// A revision's data in comparable form: its template, normalized.
fn comparable(data: &Value) -> Option<Value> {
    let mut t = data.pointer("/spec/template")?.clone();
    if let Some(o) = t.as_object_mut() {
        o.remove("$patch");
    }
    let template: PodTemplateSpec = serde_json::from_value(t).ok()?;
    let mut n = normalized(&template);
    without_empty_resources(&mut n);
    Some(n)
}

/// Drops `resources: {}` (what [`as_go_writes`] adds), so revisions written before and
/// after it compare equal and hash alike.
fn without_empty_resources(template: &mut Value) {
    let Some(spec) = template.get_mut("spec").and_then(Value::as_object_mut) else { return };
    for list in ["initContainers", "containers", "ephemeralContainers"] {
        for c in spec.get_mut(list).and_then(Value::as_array_mut).into_iter().flatten() {
            if let Some(c) = c.as_object_mut()
                && c.get("resources").is_some_and(|r| r.as_object().is_some_and(|o| o.is_empty()))
            {
                c.remove("resources");
            }
        }
    }
}

/// Whether two revision payloads restore the same template (upstream `EqualRevision`
/// compares the raw bytes; bytes differ between JSON and protobuf writers, meaning not).
pub fn data_equal(a: &Value, b: &Value) -> bool {
    match (comparable(a), comparable(b)) {
        (Some(x), Some(y)) => x == y,
        _ => a == b,
    }
}

/// The hash naming a revision with this data (upstream `HashControllerRevision`): over
/// the normalized data, plus the collision count so a collision yields a new name.
pub fn hash(data: &Value, collision_count: Option<i32>) -> String {
    let mut bytes = serde_json::to_vec(&comparable(data).unwrap_or_else(|| data.clone())).unwrap_or_default();
    if let Some(c) = collision_count {
        bytes.extend_from_slice(c.to_string().as_bytes());
    }
    safe_encode(fnv1_32(&bytes))
}

/// `<parent>-<hash>` (upstream `ControllerRevisionName`).
pub fn revision_name(parent: &str, hash: &str) -> String {
    let prefix: String = parent.chars().take(MAX_PREFIX).collect();
    format!("{prefix}-{hash}")
}

/// Oldest revision first: by number, then creation time, then name (upstream
/// `SortControllerRevisions`).
pub fn by_revision(a: &ControllerRevision, b: &ControllerRevision) -> Ordering {
    let created = |r: &ControllerRevision| r.metadata.creation_timestamp.as_ref().map(|t| t.0);
    a.revision
        .cmp(&b.revision)
        .then_with(|| created(a).cmp(&created(b)))
        .then_with(|| a.metadata.name.cmp(&b.metadata.name))
}

/// One more than the highest revision number (1 for none).
pub fn next_revision(revisions: &[ControllerRevision]) -> i64 {
    revisions.iter().map(|r| r.revision).max().unwrap_or(0) + 1
}

/// A revision of `template` owned by the parent: labels are the template's plus the
/// hash, annotations the parent's (so `kubernetes.io/change-cause` shows in
/// `rollout history`). Named later, by [`create`].
pub fn new_revision(
    template: &PodTemplateSpec,
    annotations: Option<&BTreeMap<String, String>>,
    owner: k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference,
    namespace: &str,
    revision: i64,
) -> ControllerRevision {
    let labels = template.metadata.as_ref().and_then(|m| m.labels.clone()).unwrap_or_default();
    ControllerRevision {
        metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
            namespace: Some(namespace.to_owned()),
            labels: Some(labels),
            annotations: annotations.filter(|a| !a.is_empty()).cloned(),
            owner_references: Some(vec![owner]),
            ..Default::default()
        },
        data: Some(RawExtension(template_patch(template))),
        revision,
    }
}

/// Creates `rev` under `<parent>-<hash>` (upstream `CreateControllerRevision`): if that name
/// is taken by a revision with the same data, that one is the answer; by different data,
/// the collision count goes up and the next name is tried.
pub async fn create(
    api: &Api<ControllerRevision>,
    parent: &str,
    rev: &ControllerRevision,
    collision_count: &mut i32,
) -> Result<ControllerRevision, Error> {
    let data = rev.data.as_ref().map(|d| d.0.clone()).unwrap_or(Value::Null);
    // Bounded: each round either returns or raises the count, and a name space of 2^32
    // hashes is not exhausted by a handful of revisions.
    for _ in 0..100 {
        let h = hash(&data, Some(*collision_count).filter(|c| *c != 0));
        let mut attempt = rev.clone();
        attempt.metadata.name = Some(revision_name(parent, &h));
        attempt.metadata.labels.get_or_insert_with(Default::default).insert(HASH_LABEL.into(), h);
        match api.create(&PostParams::default(), &attempt).await {
            Ok(created) => return Ok(created),
            Err(err) if controller::api_code(&err) == Some(409) => {
                let name = attempt.metadata.name.clone().unwrap_or_default();
                let existing = api.get(&name).await?;
                let same = existing.data.as_ref().is_some_and(|d| data_equal(&d.0, &data));
                if same {
                    return Ok(existing);
                }
                *collision_count += 1;
            }
            Err(err) => return Err(Error::Api(err)),
        }
    }
    Err(Error::Other(format!("no free ControllerRevision name for {parent} after 100 collisions")))
}

/// Raises a revision's number (a rollback to an old template makes it the newest), retrying
/// once on a conflict with a fresh read.
pub async fn set_revision_number(
    api: &Api<ControllerRevision>,
    rev: &ControllerRevision,
    number: i64,
) -> Result<ControllerRevision, Error> {
    let name = rev.metadata.name.clone().unwrap_or_default();
    let mut current = rev.clone();
    for attempt in 0..2 {
        if current.revision == number {
            return Ok(current);
        }
        current.revision = number;
        match api.replace(&name, &PostParams::default(), &current).await {
            Ok(updated) => return Ok(updated),
            Err(err) if attempt == 0 && controller::api_code(&err) == Some(409) => {
                current = api.get(&name).await?;
            }
            Err(err) => return Err(Error::Api(err)),
        }
    }
    Ok(current)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn template(image: &str) -> PodTemplateSpec {
        serde_json::from_value(json!({
            "metadata": {"labels": {"app": "web"}},
            "spec": {"containers": [{"name": "c", "image": image}]},
        }))
        .unwrap()
    }

    #[test]
    fn fnv1_matches_reference_values() {
        // FNV-1 32: the offset basis for empty input, and the published value for "a".
        assert_eq!(fnv1_32(b""), 0x811c_9dc5);
        assert_eq!(fnv1_32(b"a"), 0x050c_5d7e);
    }

    #[test]
    fn patch_round_trips_and_compares_semantically() {
        let t = template("busybox:1");
        let patch = template_patch(&t);
        assert_eq!(patch["spec"]["template"]["$patch"], "replace");
        let rev = ControllerRevision { data: Some(RawExtension(patch.clone())), ..Default::default() };
        let back = template_of(&rev).unwrap();
        assert_eq!(
            back.spec.as_ref().unwrap().containers[0].image,
            t.spec.as_ref().unwrap().containers[0].image
        );
        // Equal to the same template as older revisions wrote it (no Go spellings), and
        // hashed alike, so an upgraded controller finds its revisions again.
        let older = json!({"spec": {"template": {"$patch": "replace", "metadata": {"labels": {"app": "web"}},
            "spec": {"containers": [{"name": "c", "image": "busybox:1"}]}}}});
        assert!(data_equal(&patch, &older));
        assert_eq!(hash(&patch, None), hash(&older, None));
        // The same template with Go zero values spelled out (a protobuf writer) is equal.
        let mut verbose = patch.clone();
        verbose["spec"]["template"]["spec"]["hostNetwork"] = json!(false);
        assert!(data_equal(&patch, &verbose));
        assert_eq!(hash(&patch, None), hash(&verbose, None));
        assert!(!data_equal(&patch, &template_patch(&template("busybox:2"))));
        assert_ne!(hash(&patch, None), hash(&patch, Some(1)));
    }

    #[test]
    fn data_is_the_bytes_upstream_writes() {
        // The template of upstream's e2e DaemonSet after our API server's defaulting, and
        // the `data` upstream's v1.28.4 controller manager wrote for it on our API server.
        let t: PodTemplateSpec = serde_json::from_value(json!({
            "metadata": {"labels": {"daemonset-name": "theirs"}},
            "spec": {
                "containers": [{
                    "name": "app", "image": "registry.k8s.io/e2e-test-images/httpd:2.4.38-4",
                    "imagePullPolicy": "IfNotPresent", "ports": [{"containerPort": 9376, "protocol": "TCP"}],
                    "securityContext": {}, "terminationMessagePath": "/dev/termination-log",
                    "terminationMessagePolicy": "File",
                }],
                "dnsPolicy": "ClusterFirst", "restartPolicy": "Always", "schedulerName": "default-scheduler",
                "securityContext": {}, "terminationGracePeriodSeconds": 30,
            },
        }))
        .unwrap();
        let upstream = r#"{"spec":{"template":{"$patch":"replace","metadata":{"creationTimestamp":null,"labels":{"daemonset-name":"theirs"}},"spec":{"containers":[{"image":"registry.k8s.io/e2e-test-images/httpd:2.4.38-4","imagePullPolicy":"IfNotPresent","name":"app","ports":[{"containerPort":9376,"protocol":"TCP"}],"resources":{},"securityContext":{},"terminationMessagePath":"/dev/termination-log","terminationMessagePolicy":"File"}],"dnsPolicy":"ClusterFirst","restartPolicy":"Always","schedulerName":"default-scheduler","securityContext":{},"terminationGracePeriodSeconds":30}}}}"#;
        assert_eq!(serde_json::to_string(&template_patch(&t)).unwrap(), upstream);
    }

    #[test]
    fn names_and_order() {
        assert_eq!(revision_name("web", "abc"), "web-abc");
        assert_eq!(revision_name(&"x".repeat(300), "h").len(), MAX_PREFIX + 2);
        let rev = |n: i64, name: &str| ControllerRevision {
            revision: n,
            metadata: kube::api::ObjectMeta { name: Some(name.into()), ..Default::default() },
            ..Default::default()
        };
        let mut revs = vec![rev(3, "c"), rev(1, "b"), rev(1, "a")];
        revs.sort_by(by_revision);
        let names: Vec<_> = revs.iter().map(|r| r.metadata.name.clone().unwrap()).collect();
        assert_eq!(names, vec!["a", "b", "c"]);
        assert_eq!(next_revision(&revs), 4);
        assert_eq!(next_revision(&[]), 1);
    }
}
