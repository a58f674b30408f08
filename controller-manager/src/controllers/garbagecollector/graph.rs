//! The ownership graph (upstream's `GraphBuilder`): one node per object UID with its owner
//! references and dependents, built from informer events by a single task. Owners that
//! are referenced but not yet observed are "virtual" nodes the workers verify against the
//! API server. Only metadata is kept; processing an event says which UIDs to (re)examine.

use std::collections::{BTreeSet, HashMap, HashSet};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

pub const FOREGROUND: &str = "foregroundDeletion";
pub const ORPHAN: &str = "orphan";

/// Where an object is: its owner-reference coordinates plus its namespace (upstream's
/// `objectReference`). Empty namespace for cluster-scoped objects.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Identity {
    pub api_version: String,
    pub kind: String,
    pub name: String,
    pub uid: String,
    pub namespace: String,
}

impl Identity {
    /// The owner `r` as a dependent in `namespace` refers to it.
    pub fn of_ref(r: &OwnerReference, namespace: &str) -> Self {
        Self {
            api_version: r.api_version.clone(),
            kind: r.kind.clone(),
            name: r.name.clone(),
            uid: r.uid.clone(),
            namespace: namespace.to_owned(),
        }
    }

    /// Upstream's `referenceLessThan`: kind and apiVersion weigh more than namespace, so
    /// the order is coherent across cluster-scoped and namespaced kinds.
    fn sort_key(&self) -> (&str, &str, &str, &str, &str) {
        (&self.kind, &self.api_version, &self.namespace, &self.name, &self.uid)
    }
}

impl std::fmt::Display for Identity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "[{}/{}, namespace: {}, name: {}, uid: {}]",
            self.api_version, self.kind, self.namespace, self.name, self.uid
        )
    }
}

/// Whether `r` names exactly `id` (namespace aside).
pub fn ref_matches(r: &OwnerReference, id: &Identity) -> bool {
    r.uid == id.uid && r.name == id.name && r.kind == id.kind && r.api_version == id.api_version
}

pub fn blocks(r: &OwnerReference) -> bool {
    r.block_owner_deletion == Some(true)
}

/// The metadata of an object as an informer saw it.
#[derive(Clone, Debug, Default)]
pub struct Observed {
    pub identity: Identity,
    pub owners: Vec<OwnerReference>,
    pub being_deleted: bool,
    pub finalizers: Vec<String>,
}

impl Observed {
    fn has(&self, finalizer: &str) -> bool {
        self.finalizers.iter().any(|f| f == finalizer)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventType {
    Add,
    Update,
    Delete,
}

/// One change to apply to the graph.
#[derive(Clone, Debug)]
pub struct Event {
    pub kind: EventType,
    /// Made by a worker that found the object gone, not seen by an informer.
    pub virtual_: bool,
    pub obj: Observed,
    /// The previous state, for updates.
    pub old: Option<Observed>,
}

/// What the graph asks the workers to do after an event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    AttemptToDelete(String),
    AttemptToDeleteRateLimited(String),
    AttemptToOrphan(String),
    /// This identity is known not to exist (the absent-owner cache).
    Absent(Identity),
}

#[derive(Clone, Debug)]
pub struct Node {
    pub identity: Identity,
    pub owners: Vec<OwnerReference>,
    /// UIDs of the nodes that list this one as an owner.
    pub dependents: BTreeSet<String>,
    pub being_deleted: bool,
    /// Being deleted with the `foregroundDeletion` finalizer: waits for its dependents.
    pub deleting_dependents: bool,
    /// Referenced as an owner but not (yet) observed by an informer.
    pub virtual_: bool,
}

#[derive(Debug, Default)]
pub struct Graph {
    nodes: HashMap<String, Node>,
}

impl Graph {
    pub fn get(&self, uid: &str) -> Option<&Node> {
        self.nodes.get(uid)
    }

    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// The dependents of `uid` whose reference to it has `blockOwnerDeletion`.
    pub fn blocking_dependents(&self, uid: &str) -> Vec<&Node> {
        let Some(n) = self.nodes.get(uid) else { return Vec::new() };
        n.dependents
            .iter()
            .filter_map(|d| self.nodes.get(d))
            .filter(|d| d.owners.iter().any(|o| o.uid == uid && blocks(o)))
            .collect()
    }

    /// Applies one event (upstream's `processGraphChanges`).
    pub fn process(&mut self, ev: Event) -> Vec<Action> {
        let mut out = Vec::new();
        let uid = ev.obj.identity.uid.clone();
        let observed = ev.obj.identity.clone();
        if !ev.virtual_ {
            let was_virtual = self.nodes.get(&uid).is_some_and(|n| n.virtual_);
            if was_virtual {
                // Seen by an informer at last: trust its coordinates, and have the
                // dependents that named it otherwise re-checked.
                let differs = self.nodes.get(&uid).is_some_and(|n| n.identity != observed);
                if differs {
                    let (_, invalid) = self.partition_dependents(&uid, &observed);
                    for dep in invalid {
                        if !observed.namespace.is_empty()
                            && self
                                .nodes
                                .get(&dep)
                                .is_some_and(|d| d.identity.namespace != observed.namespace)
                        {
                            tracing::info!(dependent = %dep, owner = %observed, "dependent references an owner in another namespace");
                        }
                        out.push(Action::AttemptToDelete(dep));
                    }
                }
                if let Some(n) = self.nodes.get_mut(&uid) {
                    n.identity = observed.clone();
                    n.virtual_ = false;
                }
            }
        }
        let found = self.nodes.contains_key(&uid);
        match ev.kind {
            EventType::Add | EventType::Update if !found => {
                let being_deleted = ev.obj.being_deleted;
                let node = Node {
                    identity: observed,
                    owners: ev.obj.owners.clone(),
                    dependents: BTreeSet::new(),
                    being_deleted,
                    deleting_dependents: being_deleted && ev.obj.has(FOREGROUND),
                    virtual_: false,
                };
                self.nodes.insert(uid.clone(), node);
                let owners = ev.obj.owners.clone();
                self.add_dependent_to_owners(&uid, &owners, &mut out);
                self.process_transitions(ev.old.as_ref(), &ev.obj, &uid, &mut out);
            }
            EventType::Add | EventType::Update => {
                let old_owners = self.nodes.get(&uid).map(|n| n.owners.clone()).unwrap_or_default();
                let (added, removed, changed) = references_diffs(&old_owners, &ev.obj.owners);
                if !added.is_empty() || !removed.is_empty() || !changed.is_empty() {
                    self.add_unblocked_owners(&removed, &changed, &mut out);
                    if let Some(n) = self.nodes.get_mut(&uid) {
                        n.owners = ev.obj.owners.clone();
                    }
                    self.add_dependent_to_owners(&uid, &added, &mut out);
                    self.remove_dependent_from_owners(&uid, &removed);
                }
                if ev.obj.being_deleted
                    && let Some(n) = self.nodes.get_mut(&uid)
                {
                    n.being_deleted = true;
                }
                self.process_transitions(ev.old.as_ref(), &ev.obj, &uid, &mut out);
            }
            EventType::Delete => {
                let Some(existing) = self.nodes.get(&uid).cloned() else { return out };
                let mut remove = true;
                if ev.virtual_ {
                    let deleted = &observed;
                    if existing.virtual_ {
                        // Unsure of the owner's coordinates: only what the dependents that
                        // named it exactly so said is known absent.
                        let (matching, nonmatching) = self.partition_dependents(&uid, deleted);
                        if !nonmatching.is_empty() {
                            remove = false;
                            if !matching.is_empty() {
                                out.push(Action::Absent(deleted.clone()));
                                out.extend(matching.into_iter().map(Action::AttemptToDelete));
                            }
                            if existing.identity == *deleted
                                && let Some(alt) = self.alternate_owner_identity(&nonmatching, deleted)
                            {
                                if let Some(n) = self.nodes.get_mut(&uid) {
                                    n.identity = alt;
                                }
                                out.push(Action::AttemptToDeleteRateLimited(uid.clone()));
                            }
                        }
                    } else if existing.identity != *deleted {
                        // An observed object is never removed on a virtual event that
                        // disagrees with what was observed.
                        remove = false;
                        let (matching, _) = self.partition_dependents(&uid, deleted);
                        if !matching.is_empty() {
                            out.push(Action::Absent(deleted.clone()));
                            out.extend(matching.into_iter().map(Action::AttemptToDelete));
                        }
                    }
                }
                if remove {
                    self.nodes.remove(&uid);
                    self.remove_dependent_from_owners(&uid, &existing.owners);
                    if !existing.dependents.is_empty() {
                        out.push(Action::Absent(observed));
                    }
                    out.extend(existing.dependents.iter().cloned().map(Action::AttemptToDelete));
                    // An owner waiting for its dependents may now be free to go.
                    for o in &existing.owners {
                        if self.nodes.get(&o.uid).is_some_and(|n| n.deleting_dependents) {
                            out.push(Action::AttemptToDelete(o.uid.clone()));
                        }
                    }
                }
            }
        }
        out
    }

    fn process_transitions(
        &mut self,
        old: Option<&Observed>,
        new: &Observed,
        uid: &str,
        out: &mut Vec<Action>,
    ) {
        if deletion_starts_with(old, new, ORPHAN) {
            out.push(Action::AttemptToOrphan(uid.to_owned()));
            return;
        }
        if deletion_starts_with(old, new, FOREGROUND) {
            let Some(n) = self.nodes.get_mut(uid) else { return };
            n.deleting_dependents = true;
            out.extend(n.dependents.iter().cloned().map(Action::AttemptToDelete));
            out.push(Action::AttemptToDelete(uid.to_owned()));
        }
    }

    /// Links `uid` to each owner in `owners`, creating virtual owners as needed.
    fn add_dependent_to_owners(&mut self, uid: &str, owners: &[OwnerReference], out: &mut Vec<Action>) {
        let Some(ns) = self.nodes.get(uid).map(|n| n.identity.namespace.clone()) else { return };
        let mut potentially_invalid = false;
        for owner in owners {
            match self.nodes.get_mut(&owner.uid) {
                None => {
                    let mut node = Node {
                        identity: Identity::of_ref(owner, &ns),
                        owners: Vec::new(),
                        dependents: BTreeSet::new(),
                        being_deleted: false,
                        deleting_dependents: false,
                        virtual_: true,
                    };
                    node.dependents.insert(uid.to_owned());
                    self.nodes.insert(owner.uid.clone(), node);
                    // A worker verifies it with the server; a virtual delete removes it if
                    // it does not exist.
                    out.push(Action::AttemptToDelete(owner.uid.clone()));
                }
                Some(o) => {
                    o.dependents.insert(uid.to_owned());
                    if potentially_invalid {
                        continue;
                    }
                    let owner_namespaced = !o.identity.namespace.is_empty();
                    if owner_namespaced && o.identity.namespace != ns {
                        if !o.virtual_ {
                            tracing::info!(dependent = %uid, owner = %o.identity, "dependent references an owner in another namespace");
                        }
                        potentially_invalid = true;
                    } else if !ref_matches(owner, &o.identity) {
                        potentially_invalid = true;
                    } else if !owner_namespaced && o.identity.namespace != ns && o.virtual_ {
                        // A virtual cluster-scoped owner named from a namespace could be a
                        // namespaced kind a cluster-scoped dependent may not own.
                        potentially_invalid = true;
                    }
                }
            }
        }
        if potentially_invalid {
            out.push(Action::AttemptToDelete(uid.to_owned()));
        }
    }

    fn remove_dependent_from_owners(&mut self, uid: &str, owners: &[OwnerReference]) {
        for o in owners {
            if let Some(n) = self.nodes.get_mut(&o.uid) {
                n.dependents.remove(uid);
            }
        }
    }

    /// Owners that a removed or no longer blocking reference may unblock.
    fn add_unblocked_owners(
        &self,
        removed: &[OwnerReference],
        changed: &[(OwnerReference, OwnerReference)],
        out: &mut Vec<Action>,
    ) {
        for r in removed {
            if blocks(r) && self.nodes.contains_key(&r.uid) {
                out.push(Action::AttemptToDelete(r.uid.clone()));
            }
        }
        for (old, new) in changed {
            if blocks(old) && !blocks(new) && self.nodes.contains_key(&new.uid) {
                out.push(Action::AttemptToDelete(new.uid.clone()));
            }
        }
    }

    /// Splits the dependents of `uid` into those whose references name `owner` exactly
    /// (and live in its namespace, if it is namespaced) and the others.
    fn partition_dependents(&self, uid: &str, owner: &Identity) -> (Vec<String>, Vec<String>) {
        let (mut matching, mut nonmatching) = (Vec::new(), Vec::new());
        let Some(n) = self.nodes.get(uid) else { return (matching, nonmatching) };
        for dep_uid in &n.dependents {
            let Some(dep) = self.nodes.get(dep_uid) else { continue };
            let mut found_match = false;
            let mut found_mismatch = !owner.namespace.is_empty() && owner.namespace != dep.identity.namespace;
            for r in dep.owners.iter().filter(|r| r.uid == owner.uid) {
                if ref_matches(r, owner) {
                    found_match = true;
                } else {
                    found_mismatch = true;
                }
            }
            if found_match && !found_mismatch {
                matching.push(dep_uid.clone());
            } else {
                nonmatching.push(dep_uid.clone());
            }
        }
        (matching, nonmatching)
    }

    /// Another identity the dependents give the same owner UID: the first after `absent`
    /// in sort order, else the first, so that successive attempts cycle through them.
    fn alternate_owner_identity(&self, deps: &[String], absent: &Identity) -> Option<Identity> {
        let cluster_scoped = absent.namespace.is_empty();
        let mut seen: HashSet<Identity> = HashSet::from([absent.clone()]);
        let mut first: Option<Identity> = None;
        let mut first_following: Option<Identity> = None;
        for dep in deps.iter().filter_map(|d| self.nodes.get(d)) {
            for r in dep.owners.iter().filter(|r| r.uid == absent.uid) {
                if ref_matches(r, absent) && (cluster_scoped || absent.namespace == dep.identity.namespace) {
                    continue;
                }
                let mut id = Identity::of_ref(r, &dep.identity.namespace);
                if cluster_scoped && id.api_version == absent.api_version && id.kind == absent.kind {
                    id.namespace.clear();
                }
                if !seen.insert(id.clone()) {
                    continue;
                }
                if first.as_ref().is_none_or(|f| id.sort_key() < f.sort_key()) {
                    first = Some(id.clone());
                }
                if absent.sort_key() < id.sort_key()
                    && first_following.as_ref().is_none_or(|f| id.sort_key() < f.sort_key())
                {
                    first_following = Some(id);
                }
            }
        }
        first_following.or(first)
    }
}

/// Whether `new` has just started being deleted with `finalizer` (or is first seen so).
fn deletion_starts_with(old: Option<&Observed>, new: &Observed, finalizer: &str) -> bool {
    if !new.being_deleted || !new.has(finalizer) {
        return false;
    }
    match old {
        None => true,
        Some(o) => !o.being_deleted || !o.has(finalizer),
    }
}

/// Owner references added, removed, and changed (old, new), matched by UID.
pub fn references_diffs(
    old: &[OwnerReference],
    new: &[OwnerReference],
) -> (Vec<OwnerReference>, Vec<OwnerReference>, Vec<(OwnerReference, OwnerReference)>) {
    let old_by_uid: HashMap<&str, &OwnerReference> = old.iter().map(|r| (r.uid.as_str(), r)).collect();
    let new_uids: HashSet<&str> = new.iter().map(|r| r.uid.as_str()).collect();
    let mut added = Vec::new();
    let mut changed = Vec::new();
    for r in new {
        match old_by_uid.get(r.uid.as_str()) {
            None => added.push(r.clone()),
            Some(o) if *o != r => changed.push(((*o).clone(), r.clone())),
            Some(_) => {}
        }
    }
    let removed = old.iter().filter(|r| !new_uids.contains(r.uid.as_str())).cloned().collect();
    (added, removed, changed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(kind: &str, name: &str, uid: &str, ns: &str) -> Identity {
        let api_version = if kind == "ReplicaSet" || kind == "Deployment" { "apps/v1" } else { "v1" };
        Identity {
            api_version: api_version.into(),
            kind: kind.into(),
            name: name.into(),
            uid: uid.into(),
            namespace: ns.into(),
        }
    }

    fn owner(o: &Identity, block: bool) -> OwnerReference {
        OwnerReference {
            api_version: o.api_version.clone(),
            kind: o.kind.clone(),
            name: o.name.clone(),
            uid: o.uid.clone(),
            controller: Some(true),
            block_owner_deletion: Some(block),
        }
    }

    fn add(obj: &Identity, owners: Vec<OwnerReference>) -> Event {
        Event {
            kind: EventType::Add,
            virtual_: false,
            obj: Observed { identity: obj.clone(), owners, ..Default::default() },
            old: None,
        }
    }

    fn delete(obj: &Identity, virtual_: bool) -> Event {
        Event {
            kind: EventType::Delete,
            virtual_,
            obj: Observed { identity: obj.clone(), ..Default::default() },
            old: None,
        }
    }

    #[test]
    fn unseen_owner_is_virtual_and_verified() {
        let mut g = Graph::default();
        let rs = id("ReplicaSet", "web", "rs1", "ns");
        let pod = id("Pod", "web-1", "p1", "ns");
        let acts = g.process(add(&pod, vec![owner(&rs, true)]));
        assert_eq!(acts, vec![Action::AttemptToDelete("rs1".into())]);
        assert!(g.get("rs1").unwrap().virtual_);
        assert!(g.get("rs1").unwrap().dependents.contains("p1"));
        // Observed later: no longer virtual, nothing to redo.
        let acts = g.process(add(&rs, vec![]));
        assert!(acts.is_empty());
        assert!(!g.get("rs1").unwrap().virtual_);
        // Its deletion removes it and queues its dependents.
        let acts = g.process(delete(&rs, false));
        assert_eq!(acts, vec![Action::Absent(rs.clone()), Action::AttemptToDelete("p1".into())]);
        assert!(g.get("rs1").is_none());
        assert!(g.get("p1").is_some());
    }

    #[test]
    fn owner_deletion_queues_dependents_and_foreground_owners() {
        let mut g = Graph::default();
        let d = id("Deployment", "web", "d1", "ns");
        let rs = id("ReplicaSet", "web-x", "rs1", "ns");
        let pod = id("Pod", "web-x-1", "p1", "ns");
        g.process(add(&d, vec![]));
        g.process(add(&rs, vec![owner(&d, true)]));
        g.process(add(&pod, vec![owner(&rs, true)]));
        // The deployment starts foreground deletion.
        let mut d_deleting = Observed { identity: d.clone(), ..Default::default() };
        d_deleting.being_deleted = true;
        d_deleting.finalizers = vec![FOREGROUND.into()];
        let acts = g.process(Event {
            kind: EventType::Update,
            virtual_: false,
            obj: d_deleting,
            old: Some(Observed { identity: d.clone(), ..Default::default() }),
        });
        assert_eq!(acts, vec![Action::AttemptToDelete("rs1".into()), Action::AttemptToDelete("d1".into())]);
        assert!(g.get("d1").unwrap().deleting_dependents);
        assert_eq!(g.blocking_dependents("d1").len(), 1);
        // The replica set goes: its pod is re-examined, and the waiting deployment too.
        let acts = g.process(delete(&rs, false));
        assert_eq!(
            acts,
            vec![
                Action::Absent(rs.clone()),
                Action::AttemptToDelete("p1".into()),
                Action::AttemptToDelete("d1".into())
            ]
        );
        assert!(g.blocking_dependents("d1").is_empty());
    }

    #[test]
    fn orphan_finalizer_starts_orphaning_once() {
        let mut g = Graph::default();
        let rs = id("ReplicaSet", "web", "rs1", "ns");
        let mut o = Observed { identity: rs.clone(), being_deleted: true, ..Default::default() };
        o.finalizers = vec![ORPHAN.into()];
        let acts = g.process(Event { kind: EventType::Add, virtual_: false, obj: o.clone(), old: None });
        assert_eq!(acts, vec![Action::AttemptToOrphan("rs1".into())]);
        let acts =
            g.process(Event { kind: EventType::Update, virtual_: false, obj: o.clone(), old: Some(o) });
        assert!(acts.is_empty());
    }

    #[test]
    fn removed_blocking_reference_unblocks_owner() {
        let mut g = Graph::default();
        let rs = id("ReplicaSet", "web", "rs1", "ns");
        let pod = id("Pod", "web-1", "p1", "ns");
        g.process(add(&rs, vec![]));
        g.process(add(&pod, vec![owner(&rs, true)]));
        let acts = g.process(Event {
            kind: EventType::Update,
            virtual_: false,
            obj: Observed { identity: pod.clone(), owners: vec![owner(&rs, false)], ..Default::default() },
            old: None,
        });
        assert_eq!(acts, vec![Action::AttemptToDelete("rs1".into())]);
        let acts = g.process(Event {
            kind: EventType::Update,
            virtual_: false,
            obj: Observed { identity: pod.clone(), owners: vec![], ..Default::default() },
            old: None,
        });
        assert!(acts.is_empty());
        assert!(g.get("rs1").unwrap().dependents.is_empty());
    }

    #[test]
    fn virtual_delete_with_disagreeing_dependents_tries_the_other_identity() {
        let mut g = Graph::default();
        let real = id("ReplicaSet", "web", "rs1", "ns");
        let mut wrong = real.clone();
        wrong.name = "other".into();
        let p1 = id("Pod", "a", "p1", "ns");
        let p2 = id("Pod", "b", "p2", "ns");
        g.process(add(&p1, vec![owner(&real, true)]));
        g.process(add(&p2, vec![owner(&wrong, true)]));
        // The virtual node carries p1's view; the server says that one does not exist.
        assert_eq!(g.get("rs1").unwrap().identity, real);
        let acts = g.process(delete(&real, true));
        assert_eq!(
            acts,
            vec![
                Action::Absent(real.clone()),
                Action::AttemptToDelete("p1".into()),
                Action::AttemptToDeleteRateLimited("rs1".into())
            ]
        );
        assert_eq!(g.get("rs1").unwrap().identity, wrong);
        // Observed node, virtual delete with other coordinates: kept.
        let mut g = Graph::default();
        g.process(add(&real, vec![]));
        g.process(add(&p2, vec![owner(&wrong, true)]));
        let acts = g.process(delete(&wrong, true));
        assert_eq!(acts, vec![Action::Absent(wrong.clone()), Action::AttemptToDelete("p2".into())]);
        assert!(g.get("rs1").is_some());
    }

    #[test]
    fn diffs_by_uid() {
        let a = owner(&id("ReplicaSet", "a", "1", "ns"), true);
        let b = owner(&id("ReplicaSet", "b", "2", "ns"), true);
        let b2 = owner(&id("ReplicaSet", "b", "2", "ns"), false);
        let c = owner(&id("ReplicaSet", "c", "3", "ns"), true);
        let (added, removed, changed) = references_diffs(&[a.clone(), b.clone()], &[b2.clone(), c.clone()]);
        assert_eq!(added, vec![c]);
        assert_eq!(removed, vec![a]);
        assert_eq!(changed, vec![(b, b2)]);
    }
}
