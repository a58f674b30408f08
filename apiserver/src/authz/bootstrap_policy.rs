//! The default RBAC policy (upstream's `plugin/pkg/auth/authorizer/rbac/bootstrappolicy`:
//! `policy.go`, `controller_policy.go`, `namespace_policy.go`, as of v1.32 with its default
//! feature gates) and its reconciliation at startup (upstream's `rbac/bootstrap-roles`
//! post-start hook and `pkg/registry/rbac/reconciliation`).
//!
//! Every object carries the label `kubernetes.io/bootstrapping: rbac-defaults` and the
//! annotation `rbac.authorization.kubernetes.io/autoupdate: "true"`. At startup missing
//! objects are created; existing ones with autoupdate not `"false"` get the rules,
//! subjects, labels and annotations they lack added (never removed: what users added
//! stays). Then every ClusterRole with an aggregationRule gets the rules of the roles it
//! selects added, so `admin`, `edit` and `view` work before (or without) the
//! clusterrole-aggregation controller.

use serde_json::{Map, Value, json};

use super::escalation::covers;
use super::rbac::{GROUP, RoleRef, Rule, Subject};
use crate::errors::{ApiError, ApiResult};
use crate::registry::Registry;
use crate::registry::store::{ListOptions, Store};

pub const BOOTSTRAP_LABEL: (&str, &str) = ("kubernetes.io/bootstrapping", "rbac-defaults");
pub const AUTOUPDATE: &str = "rbac.authorization.kubernetes.io/autoupdate";
const AGGREGATE_TO_ADMIN: &str = "rbac.authorization.k8s.io/aggregate-to-admin";
const AGGREGATE_TO_EDIT: &str = "rbac.authorization.k8s.io/aggregate-to-edit";
const AGGREGATE_TO_VIEW: &str = "rbac.authorization.k8s.io/aggregate-to-view";
const CONTROLLER_PREFIX: &str = "system:controller:";

const READ: &[&str] = &["get", "list", "watch"];
const READ_WRITE: &[&str] =
    &["get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"];
const WRITE: &[&str] = &["create", "update", "patch", "delete", "deletecollection"];

const CORE: &str = "";
const APPS: &str = "apps";
const AUTHENTICATION: &str = "authentication.k8s.io";
const AUTHORIZATION: &str = "authorization.k8s.io";
const AUTOSCALING: &str = "autoscaling";
const BATCH: &str = "batch";
const CERTIFICATES: &str = "certificates.k8s.io";
const COORDINATION: &str = "coordination.k8s.io";
const DISCOVERY: &str = "discovery.k8s.io";
const EVENTS: &str = "events.k8s.io";
const EXTENSIONS: &str = "extensions";
const NETWORKING: &str = "networking.k8s.io";
const NODE: &str = "node.k8s.io";
const POLICY: &str = "policy";
const STORAGE: &str = "storage.k8s.io";
const ADMISSION_REGISTRATION: &str = "admissionregistration.k8s.io";

/// A rule as upstream's `NewRule(...).RuleOrDie()` builds it: every list sorted.
fn rule(verbs: &[&str], groups: &[&str], resources: &[&str]) -> Rule {
    sorted(Rule::new(verbs, groups, resources))
}

fn urls(verbs: &[&str], urls: &[&str]) -> Rule {
    sorted(Rule::urls(verbs, urls))
}

fn named(r: Rule, names: &[&str]) -> Rule {
    sorted(r.names(names))
}

fn sorted(mut r: Rule) -> Rule {
    for v in
        [&mut r.verbs, &mut r.api_groups, &mut r.resources, &mut r.resource_names, &mut r.non_resource_urls]
    {
        v.sort();
        v.dedup();
    }
    r
}

/// Upstream's `eventsRule()`.
fn events_rule() -> Rule {
    rule(&["create", "update", "patch"], &[CORE, EVENTS], &["events"])
}

/// A cluster role of the default policy.
struct ClusterRoleDef {
    name: String,
    /// Extra labels (the aggregate-to-* ones).
    labels: Vec<(&'static str, &'static str)>,
    /// The label an aggregationRule selects on.
    aggregates: Option<&'static str>,
    rules: Vec<Rule>,
}

fn role(name: &str, rules: Vec<Rule>) -> ClusterRoleDef {
    ClusterRoleDef { name: name.into(), labels: Vec::new(), aggregates: None, rules }
}

fn labelled(mut r: ClusterRoleDef, key: &'static str) -> ClusterRoleDef {
    r.labels.push((key, "true"));
    r
}

fn aggregated(name: &str, selects: &'static str) -> ClusterRoleDef {
    ClusterRoleDef { name: name.into(), labels: Vec::new(), aggregates: Some(selects), rules: Vec::new() }
}

/// The rules of `system:node`, which the Node authorizer grants nodes directly (upstream's
/// `NodeRules()`; the `system:node` binding has no subjects).
pub fn node_rules() -> Vec<Rule> {
    vec![
        // Needed to check API access. These creates are non-mutating.
        rule(&["create"], &[AUTHENTICATION], &["tokenreviews"]),
        rule(&["create"], &[AUTHORIZATION], &["subjectaccessreviews", "localsubjectaccessreviews"]),
        // Needed to build serviceLister, to populate env vars for services.
        rule(READ, &[CORE], &["services"]),
        // Nodes can register Node API objects and report status; NodeRestriction limits
        // them to their own.
        rule(&["create", "get", "list", "watch"], &[CORE], &["nodes"]),
        rule(&["update", "patch"], &[CORE], &["nodes/status"]),
        rule(&["update", "patch"], &[CORE], &["nodes"]),
        rule(&["create", "update", "patch"], &[CORE], &["events"]),
        rule(READ, &[CORE], &["pods"]),
        // Mirror pods.
        rule(&["create", "delete"], &[CORE], &["pods"]),
        rule(&["update", "patch"], &[CORE], &["pods/status"]),
        rule(&["create"], &[CORE], &["pods/eviction"]),
        // Secrets, configmaps, claims and volumes of pods on the node (the Node authorizer
        // narrows these to what its pods use).
        rule(READ, &[CORE], &["secrets", "configmaps"]),
        rule(&["get"], &[CORE], &["persistentvolumeclaims", "persistentvolumes"]),
        rule(&["get"], &[CORE], &["endpoints"]),
        rule(&["create", "get", "list", "watch"], &[CERTIFICATES], &["certificatesigningrequests"]),
        rule(&["get", "create", "update", "patch", "delete"], &[COORDINATION], &["leases"]),
        rule(&["get"], &[STORAGE], &["volumeattachments"]),
        rule(&["create"], &[CORE], &["serviceaccounts/token"]),
        rule(&["get", "update", "patch"], &[CORE], &["persistentvolumeclaims/status"]),
        rule(READ, &[STORAGE], &["csidrivers"]),
        rule(&["get", "create", "update", "patch", "delete"], &[STORAGE], &["csinodes"]),
        rule(READ, &[NODE], &["runtimeclasses"]),
    ]
}

/// Upstream's `ClusterRoles()`.
fn cluster_role_defs() -> Vec<ClusterRoleDef> {
    vec![
        // A "root" role which can do absolutely anything.
        role("cluster-admin", vec![rule(&["*"], &["*"], &["*"]), urls(&["*"], &["*"])]),
        // Enough to discover API versions for negotiation, and health.
        role(
            "system:discovery",
            vec![urls(
                &["get"],
                &[
                    "/livez",
                    "/readyz",
                    "/healthz",
                    "/version",
                    "/version/",
                    "/openapi",
                    "/openapi/*",
                    "/api",
                    "/api/*",
                    "/apis",
                    "/apis/*",
                ],
            )],
        ),
        role(
            "system:monitoring",
            vec![urls(
                &["get"],
                &[
                    "/metrics",
                    "/metrics/slis",
                    "/livez",
                    "/readyz",
                    "/healthz",
                    "/livez/*",
                    "/readyz/*",
                    "/healthz/*",
                ],
            )],
        ),
        // Lets a "normal" user learn about themselves.
        role(
            "system:basic-user",
            vec![
                rule(&["create"], &[AUTHORIZATION], &["selfsubjectaccessreviews", "selfsubjectrulesreviews"]),
                rule(&["create"], &[AUTHENTICATION], &["selfsubjectreviews"]),
            ],
        ),
        role(
            "system:public-info-viewer",
            vec![urls(&["get"], &["/livez", "/readyz", "/healthz", "/version", "/version/"])],
        ),
        // Namespace-level admin: edit plus managing roles and bindings.
        aggregated("admin", AGGREGATE_TO_ADMIN),
        // Namespace-level editor: all user actions, no roles, no quota or limits.
        labelled(aggregated("edit", AGGREGATE_TO_EDIT), AGGREGATE_TO_ADMIN),
        // Namespace-level read-only access to non-escalating resources.
        labelled(aggregated("view", AGGREGATE_TO_VIEW), AGGREGATE_TO_EDIT),
        labelled(
            role(
                "system:aggregate-to-admin",
                vec![
                    rule(&["create"], &[AUTHORIZATION], &["localsubjectaccessreviews"]),
                    rule(READ_WRITE, &[GROUP], &["roles", "rolebindings"]),
                ],
            ),
            AGGREGATE_TO_ADMIN,
        ),
        labelled(
            role(
                "system:aggregate-to-edit",
                vec![
                    // Reading secrets and the pod/service proxies is an escalation, so it
                    // is here rather than in view.
                    rule(
                        READ,
                        &[CORE],
                        &[
                            "pods/attach",
                            "pods/proxy",
                            "pods/exec",
                            "pods/portforward",
                            "secrets",
                            "services/proxy",
                        ],
                    ),
                    rule(&["impersonate"], &[CORE], &["serviceaccounts"]),
                    rule(
                        WRITE,
                        &[CORE],
                        &["pods", "pods/attach", "pods/proxy", "pods/exec", "pods/portforward"],
                    ),
                    rule(&["create"], &[CORE], &["pods/eviction"]),
                    rule(
                        WRITE,
                        &[CORE],
                        &[
                            "replicationcontrollers",
                            "replicationcontrollers/scale",
                            "serviceaccounts",
                            "services",
                            "services/proxy",
                            "persistentvolumeclaims",
                            "configmaps",
                            "secrets",
                            "events",
                        ],
                    ),
                    rule(&["create"], &[CORE], &["serviceaccounts/token"]),
                    rule(
                        WRITE,
                        &[APPS],
                        &[
                            "statefulsets",
                            "statefulsets/scale",
                            "daemonsets",
                            "deployments",
                            "deployments/scale",
                            "deployments/rollback",
                            "replicasets",
                            "replicasets/scale",
                        ],
                    ),
                    rule(WRITE, &[AUTOSCALING], &["horizontalpodautoscalers"]),
                    rule(WRITE, &[BATCH], &["jobs", "cronjobs"]),
                    rule(
                        WRITE,
                        &[EXTENSIONS],
                        &[
                            "daemonsets",
                            "deployments",
                            "deployments/scale",
                            "deployments/rollback",
                            "ingresses",
                            "replicasets",
                            "replicasets/scale",
                            "replicationcontrollers/scale",
                            "networkpolicies",
                        ],
                    ),
                    rule(WRITE, &[POLICY], &["poddisruptionbudgets"]),
                    rule(WRITE, &[NETWORKING], &["networkpolicies", "ingresses"]),
                    rule(READ_WRITE, &[COORDINATION], &["leases"]),
                ],
            ),
            AGGREGATE_TO_EDIT,
        ),
        labelled(
            role(
                "system:aggregate-to-view",
                vec![
                    rule(
                        READ,
                        &[CORE],
                        &[
                            "pods",
                            "replicationcontrollers",
                            "replicationcontrollers/scale",
                            "serviceaccounts",
                            "services",
                            "services/status",
                            "endpoints",
                            "persistentvolumeclaims",
                            "persistentvolumeclaims/status",
                            "configmaps",
                        ],
                    ),
                    rule(
                        READ,
                        &[CORE],
                        &[
                            "limitranges",
                            "resourcequotas",
                            "bindings",
                            "events",
                            "pods/status",
                            "resourcequotas/status",
                            "namespaces/status",
                            "replicationcontrollers/status",
                            "pods/log",
                        ],
                    ),
                    // Read access to namespaces at the namespace scope means this one.
                    rule(READ, &[CORE], &["namespaces"]),
                    rule(READ, &[DISCOVERY], &["endpointslices"]),
                    rule(
                        READ,
                        &[APPS],
                        &[
                            "controllerrevisions",
                            "statefulsets",
                            "statefulsets/status",
                            "statefulsets/scale",
                            "daemonsets",
                            "daemonsets/status",
                            "deployments",
                            "deployments/status",
                            "deployments/scale",
                            "replicasets",
                            "replicasets/status",
                            "replicasets/scale",
                        ],
                    ),
                    rule(
                        READ,
                        &[AUTOSCALING],
                        &["horizontalpodautoscalers", "horizontalpodautoscalers/status"],
                    ),
                    rule(READ, &[BATCH], &["jobs", "cronjobs", "cronjobs/status", "jobs/status"]),
                    rule(
                        READ,
                        &[EXTENSIONS],
                        &[
                            "daemonsets",
                            "daemonsets/status",
                            "deployments",
                            "deployments/scale",
                            "deployments/status",
                            "ingresses",
                            "ingresses/status",
                            "replicasets",
                            "replicasets/scale",
                            "replicasets/status",
                            "replicationcontrollers/scale",
                            "networkpolicies",
                        ],
                    ),
                    rule(READ, &[POLICY], &["poddisruptionbudgets", "poddisruptionbudgets/status"]),
                    rule(READ, &[NETWORKING], &["networkpolicies", "ingresses", "ingresses/status"]),
                ],
            ),
            AGGREGATE_TO_VIEW,
        ),
        role(
            "system:heapster",
            vec![
                rule(READ, &[CORE], &["events", "pods", "nodes", "namespaces"]),
                rule(READ, &[EXTENSIONS], &["deployments"]),
            ],
        ),
        role("system:node", node_rules()),
        role(
            "system:node-problem-detector",
            vec![
                rule(&["get"], &[CORE], &["nodes"]),
                rule(&["patch"], &[CORE], &["nodes/status"]),
                events_rule(),
            ],
        ),
        role(
            "system:kubelet-api-admin",
            vec![
                // Allow read-only access to the Node API objects.
                rule(READ, &[CORE], &["nodes"]),
                // Allow all API calls to the nodes.
                rule(&["proxy"], &[CORE], &["nodes"]),
                rule(&["*"], &[CORE], &["nodes/proxy", "nodes/metrics", "nodes/stats", "nodes/log"]),
            ],
        ),
        role(
            "system:node-bootstrapper",
            vec![rule(&["create", "get", "list", "watch"], &[CERTIFICATES], &["certificatesigningrequests"])],
        ),
        role(
            "system:auth-delegator",
            vec![
                rule(&["create"], &[AUTHENTICATION], &["tokenreviews"]),
                rule(&["create"], &[AUTHORIZATION], &["subjectaccessreviews"]),
            ],
        ),
        role("system:kube-aggregator", vec![rule(READ, &[CORE], &["services", "endpoints"])]),
        role(
            "system:kube-controller-manager",
            vec![
                events_rule(),
                // Leader election.
                rule(&["create"], &[COORDINATION], &["leases"]),
                named(rule(&["get", "update"], &[COORDINATION], &["leases"]), &["kube-controller-manager"]),
                // Shared informers and per-controller identities.
                rule(&["create"], &[CORE], &["secrets", "serviceaccounts"]),
                rule(&["delete"], &[CORE], &["secrets"]),
                rule(&["get"], &[CORE], &["namespaces", "secrets", "serviceaccounts", "configmaps"]),
                rule(&["update"], &[CORE], &["secrets", "serviceaccounts"]),
                rule(&["create"], &[AUTHENTICATION], &["tokenreviews"]),
                rule(&["create"], &[AUTHORIZATION], &["subjectaccessreviews"]),
                rule(&["list", "watch"], &["*"], &["*"]),
                rule(&["create"], &[CORE], &["serviceaccounts/token"]),
            ],
        ),
        role("system:kube-dns", vec![rule(&["list", "watch"], &[CORE], &["endpoints", "services"])]),
        role(
            "system:persistent-volume-provisioner",
            vec![
                rule(&["get", "list", "watch", "create", "delete"], &[CORE], &["persistentvolumes"]),
                rule(&["get", "list", "watch", "update"], &[CORE], &["persistentvolumeclaims"]),
                rule(READ, &[STORAGE], &["storageclasses"]),
                rule(&["watch"], &[CORE], &["events"]),
                events_rule(),
            ],
        ),
        role(
            "system:certificates.k8s.io:certificatesigningrequests:nodeclient",
            vec![rule(&["create"], &[CERTIFICATES], &["certificatesigningrequests/nodeclient"])],
        ),
        role(
            "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient",
            vec![rule(&["create"], &[CERTIFICATES], &["certificatesigningrequests/selfnodeclient"])],
        ),
        role(
            "system:volume-scheduler",
            vec![
                rule(&["get", "list", "watch", "update", "patch"], &[CORE], &["persistentvolumes"]),
                rule(READ, &[STORAGE], &["storageclasses"]),
                rule(&["get", "list", "watch", "update", "patch"], &[CORE], &["persistentvolumeclaims"]),
            ],
        ),
        role(
            "system:certificates.k8s.io:legacy-unknown-approver",
            vec![named(rule(&["approve"], &[CERTIFICATES], &["signers"]), &["kubernetes.io/legacy-unknown"])],
        ),
        role(
            "system:certificates.k8s.io:kubelet-serving-approver",
            vec![named(
                rule(&["approve"], &[CERTIFICATES], &["signers"]),
                &["kubernetes.io/kubelet-serving"],
            )],
        ),
        role(
            "system:certificates.k8s.io:kube-apiserver-client-approver",
            vec![named(
                rule(&["approve"], &[CERTIFICATES], &["signers"]),
                &["kubernetes.io/kube-apiserver-client"],
            )],
        ),
        role(
            "system:certificates.k8s.io:kube-apiserver-client-kubelet-approver",
            vec![named(
                rule(&["approve"], &[CERTIFICATES], &["signers"]),
                &["kubernetes.io/kube-apiserver-client-kubelet"],
            )],
        ),
        role(
            "system:service-account-issuer-discovery",
            vec![urls(&["get"], &["/.well-known/openid-configuration", "/openid/v1/jwks"])],
        ),
        role(
            "system:node-proxier",
            vec![
                // Used to build serviceLister.
                rule(&["list", "watch"], &[CORE], &["services", "endpoints"]),
                rule(READ, &[CORE], &["nodes"]),
                events_rule(),
                rule(&["list", "watch"], &[DISCOVERY], &["endpointslices"]),
            ],
        ),
        role(
            "system:kube-scheduler",
            vec![
                events_rule(),
                // Leader election.
                rule(&["create"], &[COORDINATION], &["leases"]),
                named(rule(&["get", "update"], &[COORDINATION], &["leases"]), &["kube-scheduler"]),
                // Fundamental resources.
                rule(READ, &[CORE], &["nodes"]),
                rule(&["get", "list", "watch", "delete"], &[CORE], &["pods"]),
                rule(&["create"], &[CORE], &["pods/binding", "bindings"]),
                rule(&["patch", "update"], &[CORE], &["pods/status"]),
                // Things that select pods.
                rule(READ, &[CORE], &["services", "replicationcontrollers"]),
                rule(READ, &[APPS, EXTENSIONS], &["replicasets"]),
                rule(READ, &[APPS], &["statefulsets"]),
                // Things that pods use or apply to them.
                rule(READ, &[POLICY], &["poddisruptionbudgets"]),
                rule(READ, &[CORE], &["persistentvolumeclaims", "persistentvolumes"]),
                // Needed to check API access.
                rule(&["create"], &[AUTHENTICATION], &["tokenreviews"]),
                rule(&["create"], &[AUTHORIZATION], &["subjectaccessreviews"]),
                // Volume limits, namespace selectors of affinity, CSI.
                rule(READ, &[STORAGE], &["csinodes"]),
                rule(READ, &[CORE], &["namespaces"]),
                rule(READ, &[STORAGE], &["csidrivers"]),
                rule(READ, &[STORAGE], &["csistoragecapacities"]),
            ],
        ),
    ]
}

/// Upstream's `buildControllerRoles()`: one role per controller, bound to its service
/// account in kube-system. Roles behind feature gates off by default in v1.32
/// (resource-claim, service-cidrs, volumeattributesclass-protection, selinux-warning,
/// storage-version-*, clustertrustbundle publisher) are left out.
fn controller_role_defs() -> Vec<ClusterRoleDef> {
    let c = |name: &str, rules: Vec<Rule>| role(&format!("{CONTROLLER_PREFIX}{name}"), rules);
    vec![
        c(
            "attachdetach-controller",
            vec![
                rule(&["list", "watch"], &[CORE], &["persistentvolumes", "persistentvolumeclaims"]),
                rule(READ, &[CORE], &["nodes"]),
                rule(&["patch", "update"], &[CORE], &["nodes/status"]),
                rule(&["list", "watch"], &[CORE], &["pods"]),
                events_rule(),
                rule(&["get", "create", "delete", "list", "watch"], &[STORAGE], &["volumeattachments"]),
                rule(READ, &[STORAGE], &["csidrivers"]),
                rule(READ, &[STORAGE], &["csinodes"]),
            ],
        ),
        c(
            "clusterrole-aggregation-controller",
            vec![rule(&["escalate", "get", "list", "watch", "update", "patch"], &[GROUP], &["clusterroles"])],
        ),
        c(
            "cronjob-controller",
            vec![
                rule(&["get", "list", "watch", "update"], &[BATCH], &["cronjobs"]),
                rule(&["get", "list", "watch", "create", "update", "delete", "patch"], &[BATCH], &["jobs"]),
                rule(&["update"], &[BATCH], &["cronjobs/status"]),
                rule(&["update"], &[BATCH], &["cronjobs/finalizers"]),
                rule(&["list", "watch", "delete"], &[CORE], &["pods"]),
                events_rule(),
            ],
        ),
        c(
            "daemon-set-controller",
            vec![
                rule(READ, &[EXTENSIONS, APPS], &["daemonsets"]),
                rule(&["update"], &[EXTENSIONS, APPS], &["daemonsets/status"]),
                rule(&["update"], &[EXTENSIONS, APPS], &["daemonsets/finalizers"]),
                rule(&["list", "watch"], &[CORE], &["nodes"]),
                rule(&["list", "watch", "create", "delete", "patch"], &[CORE], &["pods"]),
                rule(&["create"], &[CORE], &["pods/binding"]),
                rule(
                    &["get", "list", "watch", "create", "delete", "update", "patch"],
                    &[APPS],
                    &["controllerrevisions"],
                ),
                events_rule(),
            ],
        ),
        c(
            "deployment-controller",
            vec![
                rule(&["get", "list", "watch", "update"], &[EXTENSIONS, APPS], &["deployments"]),
                rule(&["update"], &[EXTENSIONS, APPS], &["deployments/status"]),
                rule(&["update"], &[EXTENSIONS, APPS], &["deployments/finalizers"]),
                rule(
                    &["get", "list", "watch", "create", "update", "patch", "delete"],
                    &[APPS, EXTENSIONS],
                    &["replicasets"],
                ),
                rule(&["get", "list", "watch", "update"], &[CORE], &["pods"]),
                events_rule(),
            ],
        ),
        c(
            "disruption-controller",
            vec![
                rule(READ, &[EXTENSIONS, APPS], &["deployments"]),
                rule(READ, &[APPS, EXTENSIONS], &["replicasets"]),
                rule(READ, &[CORE], &["replicationcontrollers"]),
                rule(READ, &[POLICY], &["poddisruptionbudgets"]),
                rule(READ, &[APPS], &["statefulsets"]),
                rule(&["update"], &[POLICY], &["poddisruptionbudgets/status"]),
                rule(&["patch", "update"], &[CORE], &["pods/status"]),
                rule(&["get"], &["*"], &["*/scale"]),
                events_rule(),
            ],
        ),
        c(
            "endpoint-controller",
            vec![
                rule(READ, &[CORE], &["services", "pods"]),
                rule(&["get", "list", "watch", "create", "update", "delete"], &[CORE], &["endpoints"]),
                rule(&["create"], &[CORE], &["endpoints/restricted"]),
                events_rule(),
            ],
        ),
        c(
            "endpointslice-controller",
            vec![
                rule(READ, &[CORE], &["services", "pods", "nodes"]),
                rule(&["update"], &[CORE], &["services/finalizers"]),
                rule(
                    &["get", "list", "watch", "create", "update", "delete"],
                    &[DISCOVERY],
                    &["endpointslices"],
                ),
                events_rule(),
            ],
        ),
        c(
            "endpointslicemirroring-controller",
            vec![
                rule(READ, &[CORE], &["services", "endpoints"]),
                rule(&["update"], &[CORE], &["services/finalizers"]),
                rule(&["update"], &[CORE], &["endpoints/finalizers"]),
                rule(
                    &["get", "list", "watch", "create", "update", "delete"],
                    &[DISCOVERY],
                    &["endpointslices"],
                ),
                events_rule(),
            ],
        ),
        c(
            "expand-controller",
            vec![
                rule(&["get", "list", "watch", "update", "patch"], &[CORE], &["persistentvolumes"]),
                rule(&["update", "patch"], &[CORE], &["persistentvolumeclaims/status"]),
                rule(READ, &[CORE], &["persistentvolumeclaims"]),
                events_rule(),
                rule(&["get"], &[CORE], &["services"]),
            ],
        ),
        c(
            "ephemeral-volume-controller",
            vec![
                rule(READ, &[CORE], &["pods"]),
                rule(&["update"], &[CORE], &["pods/finalizers"]),
                rule(&["get", "list", "watch", "create"], &[CORE], &["persistentvolumeclaims"]),
                events_rule(),
            ],
        ),
        c(
            "generic-garbage-collector",
            vec![rule(&["get", "list", "watch", "patch", "update", "delete"], &["*"], &["*"]), events_rule()],
        ),
        c(
            "horizontal-pod-autoscaler",
            vec![
                rule(READ, &[AUTOSCALING], &["horizontalpodautoscalers"]),
                rule(&["update"], &[AUTOSCALING], &["horizontalpodautoscalers/status"]),
                rule(&["get", "update"], &["*"], &["*/scale"]),
                rule(&["list", "watch"], &[CORE], &["pods"]),
                rule(&["list", "watch"], &["metrics.k8s.io"], &["pods"]),
                rule(READ, &["custom.metrics.k8s.io"], &["*"]),
                rule(READ, &["external.metrics.k8s.io"], &["*"]),
                events_rule(),
            ],
        ),
        c(
            "job-controller",
            vec![
                rule(&["get", "list", "watch", "update", "patch"], &[BATCH], &["jobs"]),
                rule(&["update"], &[BATCH], &["jobs/status"]),
                rule(&["update"], &[BATCH], &["jobs/finalizers"]),
                rule(&["list", "watch", "create", "delete", "patch"], &[CORE], &["pods"]),
                events_rule(),
            ],
        ),
        c(
            "namespace-controller",
            vec![
                rule(&["get", "list", "watch", "delete"], &[CORE], &["namespaces"]),
                rule(&["update"], &[CORE], &["namespaces/finalize", "namespaces/status"]),
                rule(&["get", "list", "watch", "delete", "deletecollection"], &["*"], &["*"]),
            ],
        ),
        c(
            "node-controller",
            vec![
                rule(&["get", "list", "watch", "update", "delete", "patch"], &[CORE], &["nodes"]),
                rule(&["patch", "update"], &[CORE], &["nodes/status"]),
                rule(&["patch", "update"], &[CORE], &["pods/status"]),
                rule(&["list", "watch", "get", "delete"], &[CORE], &["pods"]),
                events_rule(),
            ],
        ),
        c(
            "persistent-volume-binder",
            vec![
                rule(
                    &["get", "list", "watch", "update", "create", "delete"],
                    &[CORE],
                    &["persistentvolumes"],
                ),
                rule(&["update"], &[CORE], &["persistentvolumes/status"]),
                rule(&["get", "list", "watch", "update"], &[CORE], &["persistentvolumeclaims"]),
                rule(&["update"], &[CORE], &["persistentvolumeclaims/status"]),
                rule(&["list", "watch", "get", "create", "delete"], &[CORE], &["pods"]),
                rule(READ, &[STORAGE], &["storageclasses"]),
                rule(&["list", "watch"], &[CORE], &["nodes"]),
                events_rule(),
                rule(&["watch"], &[CORE], &["events"]),
                rule(&["get"], &[CORE], &["services"]),
            ],
        ),
        c(
            "pod-garbage-collector",
            vec![
                rule(&["list", "watch", "delete"], &[CORE], &["pods"]),
                rule(READ, &[CORE], &["nodes"]),
                rule(&["patch"], &[CORE], &["pods/status"]),
            ],
        ),
        c(
            "replicaset-controller",
            vec![
                rule(&["get", "list", "watch", "update"], &[APPS, EXTENSIONS], &["replicasets"]),
                rule(&["update"], &[APPS, EXTENSIONS], &["replicasets/status"]),
                rule(&["update"], &[APPS, EXTENSIONS], &["replicasets/finalizers"]),
                rule(&["list", "watch", "patch", "create", "delete"], &[CORE], &["pods"]),
                events_rule(),
            ],
        ),
        c(
            "replication-controller",
            vec![
                rule(&["get", "list", "watch", "update"], &[CORE], &["replicationcontrollers"]),
                rule(&["update"], &[CORE], &["replicationcontrollers/status"]),
                rule(&["update"], &[CORE], &["replicationcontrollers/finalizers"]),
                rule(&["list", "watch", "patch", "create", "delete"], &[CORE], &["pods"]),
                events_rule(),
            ],
        ),
        c(
            "resourcequota-controller",
            vec![
                rule(&["list", "watch"], &["*"], &["*"]),
                rule(&["update"], &[CORE], &["resourcequotas/status"]),
                events_rule(),
            ],
        ),
        c(
            "route-controller",
            vec![
                rule(&["list", "watch"], &[CORE], &["nodes"]),
                rule(&["patch"], &[CORE], &["nodes/status"]),
                events_rule(),
            ],
        ),
        c(
            "service-account-controller",
            vec![rule(&["create"], &[CORE], &["serviceaccounts"]), events_rule()],
        ),
        c(
            "service-controller",
            vec![
                rule(READ, &[CORE], &["services"]),
                rule(&["patch", "update"], &[CORE], &["services/status"]),
                rule(&["list", "watch"], &[CORE], &["nodes"]),
                events_rule(),
            ],
        ),
        c(
            "statefulset-controller",
            vec![
                rule(&["list", "watch"], &[CORE], &["pods"]),
                rule(READ, &[APPS], &["statefulsets"]),
                rule(&["update"], &[APPS], &["statefulsets/status"]),
                rule(&["update"], &[APPS], &["statefulsets/finalizers"]),
                rule(&["get", "create", "delete", "update", "patch"], &[CORE], &["pods"]),
                rule(
                    &["get", "create", "delete", "update", "patch", "list", "watch"],
                    &[APPS],
                    &["controllerrevisions"],
                ),
                rule(&["get", "create", "list", "watch"], &[CORE], &["persistentvolumeclaims"]),
                rule(&["update", "delete"], &[CORE], &["persistentvolumeclaims"]),
                rule(&["update"], &[CORE], &["pods/finalizers"]),
                events_rule(),
            ],
        ),
        c(
            "ttl-controller",
            vec![rule(&["update", "patch", "list", "watch"], &[CORE], &["nodes"]), events_rule()],
        ),
        c(
            "certificate-controller",
            vec![
                rule(&["get", "list", "watch", "delete"], &[CERTIFICATES], &["certificatesigningrequests"]),
                rule(
                    &["update"],
                    &[CERTIFICATES],
                    &["certificatesigningrequests/status", "certificatesigningrequests/approval"],
                ),
                named(
                    rule(&["approve"], &[CERTIFICATES], &["signers"]),
                    &["kubernetes.io/kube-apiserver-client-kubelet"],
                ),
                named(
                    rule(&["sign"], &[CERTIFICATES], &["signers"]),
                    &[
                        "kubernetes.io/legacy-unknown",
                        "kubernetes.io/kube-apiserver-client",
                        "kubernetes.io/kube-apiserver-client-kubelet",
                        "kubernetes.io/kubelet-serving",
                    ],
                ),
                rule(&["create"], &[AUTHORIZATION], &["subjectaccessreviews"]),
                events_rule(),
            ],
        ),
        c(
            "pvc-protection-controller",
            vec![
                rule(&["get", "list", "watch", "update"], &[CORE], &["persistentvolumeclaims"]),
                rule(&["list", "watch", "get"], &[CORE], &["pods"]),
                events_rule(),
            ],
        ),
        c(
            "pv-protection-controller",
            vec![rule(&["get", "list", "watch", "update"], &[CORE], &["persistentvolumes"]), events_rule()],
        ),
        c(
            "ttl-after-finished-controller",
            vec![rule(&["get", "list", "watch", "delete"], &[BATCH], &["jobs"]), events_rule()],
        ),
        c(
            "root-ca-cert-publisher",
            vec![rule(&["create", "update"], &[CORE], &["configmaps"]), events_rule()],
        ),
        c(
            "validatingadmissionpolicy-status-controller",
            vec![
                rule(READ, &[ADMISSION_REGISTRATION], &["validatingadmissionpolicies"]),
                rule(
                    &["get", "patch", "update"],
                    &[ADMISSION_REGISTRATION],
                    &["validatingadmissionpolicies/status"],
                ),
                events_rule(),
            ],
        ),
        c(
            "legacy-service-account-token-cleaner",
            vec![
                named(
                    rule(&["get"], &[CORE], &["configmaps"]),
                    &["kube-apiserver-legacy-service-account-token-tracking"],
                ),
                rule(&["patch", "delete"], &[CORE], &["secrets"]),
            ],
        ),
    ]
}

fn meta(name: &str, namespace: Option<&str>, extra_labels: &[(&str, &str)]) -> Value {
    let mut labels = Map::new();
    labels.insert(BOOTSTRAP_LABEL.0.into(), json!(BOOTSTRAP_LABEL.1));
    for (k, v) in extra_labels {
        labels.insert((*k).into(), json!(v));
    }
    let mut m = json!({ "name": name, "labels": labels, "annotations": { AUTOUPDATE: "true" } });
    if let Some(ns) = namespace {
        m["namespace"] = json!(ns);
    }
    m
}

fn cluster_role_object(d: &ClusterRoleDef) -> Value {
    let mut o = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": meta(&d.name, None, &d.labels),
        "rules": d.rules,
    });
    if let Some(key) = d.aggregates {
        o["aggregationRule"] = json!({ "clusterRoleSelectors": [{ "matchLabels": { key: "true" } }] });
    }
    o
}

fn binding_object(
    kind: &str,
    name: &str,
    namespace: Option<&str>,
    role_ref: RoleRef,
    subjects: Vec<Subject>,
) -> Value {
    let mut o = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": kind,
        "metadata": meta(name, namespace, &[]),
        "roleRef": role_ref,
    });
    if !subjects.is_empty() {
        o["subjects"] = json!(subjects);
    }
    o
}

/// Every default ClusterRole, controller roles included.
pub fn cluster_roles() -> Vec<Value> {
    cluster_role_defs().iter().chain(controller_role_defs().iter()).map(cluster_role_object).collect()
}

/// Every default ClusterRoleBinding (upstream's `ClusterRoleBindings()` and
/// `ControllerRoleBindings()`).
pub fn cluster_role_bindings() -> Vec<Value> {
    let crb = |role: &str, subjects: Vec<Subject>| {
        binding_object("ClusterRoleBinding", role, None, RoleRef::cluster_role(role), subjects)
    };
    let mut out = vec![
        crb("cluster-admin", vec![Subject::group("system:masters")]),
        crb("system:monitoring", vec![Subject::group("system:monitoring")]),
        crb("system:discovery", vec![Subject::group("system:authenticated")]),
        crb("system:basic-user", vec![Subject::group("system:authenticated")]),
        crb(
            "system:public-info-viewer",
            vec![Subject::group("system:authenticated"), Subject::group("system:unauthenticated")],
        ),
        crb("system:node-proxier", vec![Subject::user("system:kube-proxy")]),
        crb("system:kube-controller-manager", vec![Subject::user("system:kube-controller-manager")]),
        crb("system:kube-dns", vec![Subject::service_account("kube-system", "kube-dns")]),
        crb("system:kube-scheduler", vec![Subject::user("system:kube-scheduler")]),
        crb("system:volume-scheduler", vec![Subject::user("system:kube-scheduler")]),
        crb("system:service-account-issuer-discovery", vec![Subject::group("system:serviceaccounts")]),
        // Deliberately empty: nodes are authorized by the Node authorizer, which grants the
        // system:node rules to each node for its own objects.
        crb("system:node", Vec::new()),
    ];
    for d in controller_role_defs() {
        let sa = d.name.trim_start_matches(CONTROLLER_PREFIX).to_string();
        out.push(crb(&d.name, vec![Subject::service_account("kube-system", &sa)]));
    }
    out
}

fn ns_role(namespace: &str, name: &str, rules: Vec<Rule>) -> Value {
    json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": meta(name, Some(namespace), &[]),
        "rules": rules,
    })
}

/// Upstream's `NamespaceRoles()`, flattened.
pub fn namespace_roles() -> Vec<Value> {
    vec![
        ns_role(
            "kube-system",
            "extension-apiserver-authentication-reader",
            vec![named(rule(READ, &[CORE], &["configmaps"]), &["extension-apiserver-authentication"])],
        ),
        ns_role("kube-system", "system:controller:bootstrap-signer", vec![rule(READ, &[CORE], &["secrets"])]),
        ns_role(
            "kube-system",
            "system:controller:cloud-provider",
            vec![rule(&["create", "get", "list", "watch"], &[CORE], &["configmaps"])],
        ),
        ns_role(
            "kube-system",
            "system:controller:token-cleaner",
            vec![rule(&["get", "list", "watch", "delete"], &[CORE], &["secrets"]), events_rule()],
        ),
        ns_role(
            "kube-system",
            "system::leader-locking-kube-controller-manager",
            vec![
                rule(&["watch"], &[CORE], &["configmaps"]),
                named(rule(&["get", "update"], &[CORE], &["configmaps"]), &["kube-controller-manager"]),
                rule(&["get", "watch", "list", "create", "update"], &[COORDINATION], &["leases"]),
            ],
        ),
        ns_role(
            "kube-system",
            "system::leader-locking-kube-scheduler",
            vec![
                rule(&["watch"], &[CORE], &["configmaps"]),
                named(rule(&["get", "update"], &[CORE], &["configmaps"]), &["kube-scheduler"]),
            ],
        ),
        ns_role(
            "kube-public",
            "system:controller:bootstrap-signer",
            vec![
                rule(READ, &[CORE], &["configmaps"]),
                named(rule(&["update"], &[CORE], &["configmaps"]), &["cluster-info"]),
                events_rule(),
            ],
        ),
    ]
}

/// Upstream's `NamespaceRoleBindings()`, flattened.
pub fn namespace_role_bindings() -> Vec<Value> {
    let rb = |ns: &str, name: &str, role: &str, subjects: Vec<Subject>| {
        binding_object("RoleBinding", name, Some(ns), RoleRef::role(role), subjects)
    };
    let sa = |name: &str| Subject::service_account("kube-system", name);
    vec![
        rb(
            "kube-system",
            "system::extension-apiserver-authentication-reader",
            "extension-apiserver-authentication-reader",
            vec![Subject::user("system:kube-controller-manager"), Subject::user("system:kube-scheduler")],
        ),
        rb(
            "kube-system",
            "system::leader-locking-kube-controller-manager",
            "system::leader-locking-kube-controller-manager",
            vec![
                Subject::user("system:kube-controller-manager"),
                sa("kube-controller-manager"),
                sa("leader-election-controller"),
            ],
        ),
        rb(
            "kube-system",
            "system::leader-locking-kube-scheduler",
            "system::leader-locking-kube-scheduler",
            vec![Subject::user("system:kube-scheduler"), sa("kube-scheduler")],
        ),
        rb(
            "kube-system",
            "system:controller:bootstrap-signer",
            "system:controller:bootstrap-signer",
            vec![sa("bootstrap-signer")],
        ),
        rb(
            "kube-system",
            "system:controller:cloud-provider",
            "system:controller:cloud-provider",
            vec![sa("cloud-provider")],
        ),
        rb(
            "kube-system",
            "system:controller:token-cleaner",
            "system:controller:token-cleaner",
            vec![sa("token-cleaner")],
        ),
        rb(
            "kube-public",
            "system:controller:bootstrap-signer",
            "system:controller:bootstrap-signer",
            vec![sa("bootstrap-signer")],
        ),
    ]
}

// ---------------------------------------------------------------------------------------
// Reconciliation
// ---------------------------------------------------------------------------------------

/// What reconciling one object decided.
#[derive(Debug, PartialEq)]
pub enum Outcome {
    Unchanged,
    /// autoupdate is "false": left as the user made it.
    Protected,
    Create(Value),
    Update(Value),
    /// A binding whose roleRef differs (immutable): delete and create.
    Recreate(Value),
}

fn rules_of(obj: &Value) -> Vec<Rule> {
    serde_json::from_value(obj["rules"].clone()).unwrap_or_default()
}

/// `expected`'s keys added to `existing` where missing (upstream's `merge`: existing wins).
fn merge_map(existing: &Value, expected: &Value) -> Value {
    let mut out = existing.as_object().cloned().unwrap_or_default();
    for (k, v) in expected.as_object().into_iter().flatten() {
        out.entry(k.clone()).or_insert_with(|| v.clone());
    }
    Value::Object(out)
}

fn merge_meta(obj: &mut Value, expected: &Value) -> bool {
    let mut changed = false;
    for f in ["labels", "annotations"] {
        let merged = merge_map(&obj["metadata"][f], &expected["metadata"][f]);
        let current = if obj["metadata"][f].is_null() { json!({}) } else { obj["metadata"][f].clone() };
        if merged != current {
            obj["metadata"][f] = merged;
            changed = true;
        }
    }
    changed
}

fn protected(existing: &Value) -> bool {
    existing["metadata"]["annotations"][AUTOUPDATE] == "false"
}

/// Upstream's `computeReconciledRole` in the union mode: missing rules (broken down) and
/// missing aggregation selectors are appended, labels and annotations merged.
pub fn reconcile_role(existing: Option<&Value>, expected: &Value) -> Outcome {
    let Some(existing) = existing else { return Outcome::Create(expected.clone()) };
    if protected(existing) {
        return Outcome::Protected;
    }
    let mut obj = existing.clone();
    let mut changed = merge_meta(&mut obj, expected);
    let (_, missing) = covers(&rules_of(existing), &rules_of(expected));
    if !missing.is_empty() {
        let mut rules = rules_of(existing);
        rules.extend(missing);
        obj["rules"] = json!(rules);
        changed = true;
    }
    let want = expected["aggregationRule"]["clusterRoleSelectors"].as_array().cloned().unwrap_or_default();
    let have = existing["aggregationRule"]["clusterRoleSelectors"].as_array().cloned().unwrap_or_default();
    if expected.get("aggregationRule").is_none_or(Value::is_null) {
        if existing.get("aggregationRule").is_some_and(|a| !a.is_null()) {
            if let Some(m) = obj.as_object_mut() {
                m.remove("aggregationRule");
            }
            changed = true;
        }
    } else {
        let missing: Vec<Value> = want.into_iter().filter(|s| !have.contains(s)).collect();
        if !missing.is_empty() {
            let mut all = have;
            all.extend(missing);
            obj["aggregationRule"] = json!({ "clusterRoleSelectors": all });
            changed = true;
        }
    }
    if changed { Outcome::Update(obj) } else { Outcome::Unchanged }
}

/// Upstream's `computeReconciledRoleBinding` in the union mode.
pub fn reconcile_binding(existing: Option<&Value>, expected: &Value) -> Outcome {
    let Some(existing) = existing else { return Outcome::Create(expected.clone()) };
    if protected(existing) {
        return Outcome::Protected;
    }
    let role_ref = |v: &Value| serde_json::from_value::<RoleRef>(v["roleRef"].clone()).unwrap_or_default();
    if role_ref(existing) != role_ref(expected) {
        return Outcome::Recreate(expected.clone());
    }
    let mut obj = existing.clone();
    let mut changed = merge_meta(&mut obj, expected);
    let subjects =
        |v: &Value| serde_json::from_value::<Vec<Subject>>(v["subjects"].clone()).unwrap_or_default();
    let have = subjects(existing);
    let missing: Vec<Subject> = subjects(expected).into_iter().filter(|s| !have.contains(s)).collect();
    if !missing.is_empty() {
        let mut all = have;
        all.extend(missing);
        obj["subjects"] = json!(all);
        changed = true;
    }
    if changed { Outcome::Update(obj) } else { Outcome::Unchanged }
}

/// Conflicts met while writing are retried this many times.
const ATTEMPTS: usize = 5;

async fn apply(store: &Store, expected: &Value, binding: bool) -> ApiResult<()> {
    let ns = expected["metadata"]["namespace"].as_str();
    let name = expected["metadata"]["name"].as_str().unwrap_or_default();
    for _ in 0..ATTEMPTS {
        let existing = match store.get_fresh(ns, name).await {
            Ok((obj, _)) => Some(obj),
            Err(e) if e.is_not_found() => None,
            Err(e) => return Err(e),
        };
        let outcome = if binding {
            reconcile_binding(existing.as_ref(), expected)
        } else {
            reconcile_role(existing.as_ref(), expected)
        };
        let result = match outcome {
            Outcome::Unchanged | Outcome::Protected => return Ok(()),
            Outcome::Create(obj) => store.create(ns, obj, false).await.map(|_| ()),
            Outcome::Update(obj) => store.update(ns, name, obj, None, false, None).await.map(|_| ()),
            Outcome::Recreate(obj) => {
                match store.delete(ns, name, &Default::default()).await {
                    Ok(_) => {}
                    Err(e) if e.is_not_found() => {}
                    Err(e) => return Err(e),
                }
                store.create(ns, obj, false).await.map(|_| ())
            }
        };
        match result {
            Ok(()) => return Ok(()),
            Err(e) if e.is_conflict() || e.reason == "AlreadyExists" => continue,
            Err(e) => return Err(e),
        }
    }
    Err(ApiError::internal(format!("reconciling {name}: too many conflicts")))
}

/// Rules an aggregated role gains: those of every other cluster role its selectors pick,
/// in name order, that it does not list yet. Aggregated roles that select aggregated
/// roles (admin selects edit selects view) see each other's gains: iterate to a fixpoint.
pub fn aggregate(roles: &[Value]) -> Vec<(String, Vec<Rule>)> {
    let mut sorted: Vec<&Value> = roles.iter().collect();
    sorted.sort_by_key(|r| r["metadata"]["name"].as_str().unwrap_or_default().to_string());
    let names: Vec<String> =
        sorted.iter().map(|r| r["metadata"]["name"].as_str().unwrap_or_default().to_string()).collect();
    let mut rules: Vec<Vec<Rule>> = sorted.iter().map(|r| rules_of(r)).collect();
    let selectors: Vec<Vec<Value>> = sorted
        .iter()
        .map(|r| r["aggregationRule"]["clusterRoleSelectors"].as_array().cloned().unwrap_or_default())
        .collect();
    // Each pass lets gains travel one aggregation level further.
    for _ in 0..roles.len().min(16) {
        let mut changed = false;
        for i in 0..sorted.len() {
            if selectors[i].is_empty() {
                continue;
            }
            for j in 0..sorted.len() {
                if i == j {
                    continue;
                }
                let labels = &sorted[j]["metadata"]["labels"];
                if !selectors[i].iter().any(|s| crate::validation::selector_matches(s, labels)) {
                    continue;
                }
                for r in rules[j].clone() {
                    if !rules[i].contains(&r) {
                        rules[i].push(r);
                        changed = true;
                    }
                }
            }
        }
        if !changed {
            break;
        }
    }
    (0..sorted.len())
        .filter(|&i| !selectors[i].is_empty())
        .filter_map(|i| {
            let before = rules_of(sorted[i]);
            let gained: Vec<Rule> = rules[i].iter().filter(|r| !before.contains(r)).cloned().collect();
            (!gained.is_empty()).then(|| (names[i].clone(), gained))
        })
        .collect()
}

/// Reconciles `expected` objects of one kind: the stored ones are listed once, and only
/// objects that need a write are written (a few at a time).
async fn reconcile_kind(store: &Store, expected: Vec<Value>, binding: bool) -> ApiResult<()> {
    use futures::{StreamExt, TryStreamExt};
    let list = store.list(&ListOptions::default()).await?;
    let key = |o: &Value| {
        format!(
            "{}/{}",
            o["metadata"]["namespace"].as_str().unwrap_or_default(),
            o["metadata"]["name"].as_str().unwrap_or_default()
        )
    };
    let existing: std::collections::HashMap<String, Value> =
        list["items"].as_array().into_iter().flatten().map(|o| (key(o), o.clone())).collect();
    let stale: Vec<Value> = expected
        .into_iter()
        .filter(|e| {
            let current = existing.get(&key(e));
            let outcome = if binding { reconcile_binding(current, e) } else { reconcile_role(current, e) };
            !matches!(outcome, Outcome::Unchanged | Outcome::Protected)
        })
        .collect();
    futures::stream::iter(stale)
        .map(|e| async move { apply(store, &e, binding).await })
        .buffer_unordered(16)
        .try_collect::<Vec<()>>()
        .await?;
    Ok(())
}

/// Creates and updates the default policy, then fills aggregated roles. Runs at startup
/// with no request scope, so neither admission nor escalation checks apply.
pub async fn reconcile(registry: &Registry) -> ApiResult<()> {
    let find = |plural: &str| registry.find(GROUP, "v1", plural);
    let (Some(croles), Some(crbs), Some(roles), Some(rbs)) =
        (find("clusterroles"), find("clusterrolebindings"), find("roles"), find("rolebindings"))
    else {
        return Ok(());
    };
    reconcile_kind(&croles, cluster_roles(), false).await?;
    reconcile_kind(&crbs, cluster_role_bindings(), true).await?;
    reconcile_kind(&roles, namespace_roles(), false).await?;
    reconcile_kind(&rbs, namespace_role_bindings(), true).await?;
    for _ in 0..ATTEMPTS {
        let list = croles.list(&ListOptions::default()).await?;
        let items = list["items"].as_array().cloned().unwrap_or_default();
        let mut conflict = false;
        for (name, gained) in aggregate(&items) {
            let Some(current) = items.iter().find(|i| i["metadata"]["name"] == name.as_str()) else {
                continue;
            };
            let mut obj = current.clone();
            let mut all = rules_of(current);
            all.extend(gained);
            obj["rules"] = json!(all);
            match croles.update(None, &name, obj, None, false, None).await {
                Ok(_) => {}
                Err(e) if e.is_conflict() => conflict = true,
                Err(e) => return Err(e),
            }
        }
        if !conflict {
            return Ok(());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::authn::User;
    use crate::authz::rbac::Resolver;
    use crate::authz::rbac::tests::{res, user};
    use crate::authz::source::MemSource;

    fn names(objs: &[Value]) -> Vec<String> {
        objs.iter().map(|o| o["metadata"]["name"].as_str().unwrap().to_string()).collect()
    }

    /// The default cluster roles with aggregation applied, as reconcile leaves them.
    fn aggregated_defaults() -> Vec<Value> {
        let mut croles = cluster_roles();
        for (name, gained) in aggregate(&croles) {
            let r = croles.iter_mut().find(|r| r["metadata"]["name"] == name.as_str()).unwrap();
            let mut all = rules_of(r);
            all.extend(gained);
            r["rules"] = json!(all);
        }
        croles
    }

    /// The default policy, as a resolver.
    fn defaults() -> Resolver {
        Resolver::new(
            MemSource::new(namespace_roles()),
            MemSource::new(namespace_role_bindings()),
            MemSource::new(aggregated_defaults()),
            MemSource::new(cluster_role_bindings()),
        )
    }

    fn bind(bindings: &mut Vec<Value>, kind: &str, ns: &str, role: &str, who: &str) {
        bindings.push(binding_object(
            kind,
            &format!("{who}-{role}"),
            (!ns.is_empty()).then_some(ns),
            RoleRef::cluster_role(role),
            vec![Subject::user(who)],
        ));
    }

    #[test]
    fn policy_is_well_formed() {
        let croles = cluster_roles();
        let mut seen = std::collections::HashSet::new();
        for r in &croles {
            assert!(
                seen.insert(r["metadata"]["name"].as_str().unwrap().to_string()),
                "duplicate {}",
                r["metadata"]["name"]
            );
            assert_eq!(r["metadata"]["labels"][BOOTSTRAP_LABEL.0], "rbac-defaults");
            assert_eq!(r["metadata"]["annotations"][AUTOUPDATE], "true");
        }
        for want in [
            "cluster-admin",
            "admin",
            "edit",
            "view",
            "system:basic-user",
            "system:discovery",
            "system:public-info-viewer",
            "system:monitoring",
            "system:node",
            "system:node-proxier",
            "system:node-bootstrapper",
            "system:kube-scheduler",
            "system:volume-scheduler",
            "system:kube-controller-manager",
            "system:auth-delegator",
            "system:kube-dns",
            "system:certificates.k8s.io:certificatesigningrequests:nodeclient",
            "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient",
            "system:controller:clusterrole-aggregation-controller",
            "system:controller:namespace-controller",
        ] {
            assert!(seen.contains(want), "missing {want}");
        }
        // Every binding refers to a role of the policy.
        let croles_names = names(&croles);
        for b in cluster_role_bindings() {
            assert!(croles_names.contains(&b["roleRef"]["name"].as_str().unwrap().to_string()));
        }
        let roles: Vec<String> = namespace_roles()
            .iter()
            .map(|r| {
                format!(
                    "{}/{}",
                    r["metadata"]["namespace"].as_str().unwrap(),
                    r["metadata"]["name"].as_str().unwrap()
                )
            })
            .collect();
        for b in namespace_role_bindings() {
            let key = format!(
                "{}/{}",
                b["metadata"]["namespace"].as_str().unwrap(),
                b["roleRef"]["name"].as_str().unwrap()
            );
            assert!(roles.contains(&key), "{key}");
        }
        let node =
            cluster_role_bindings().into_iter().find(|b| b["metadata"]["name"] == "system:node").unwrap();
        assert!(node.get("subjects").is_none());
        let ctrl = cluster_role_bindings()
            .into_iter()
            .find(|b| b["metadata"]["name"] == "system:controller:job-controller")
            .unwrap();
        assert_eq!(
            ctrl["subjects"],
            json!([{ "kind": "ServiceAccount", "name": "job-controller", "namespace": "kube-system" }])
        );
    }

    #[test]
    fn default_policy_decisions() {
        let r = defaults();
        let root = user("root", &["system:masters", "system:authenticated"]);
        assert!(r.authorize(&res(&root, "delete", "x.io", "anything/sub", "", "n")).allowed());
        assert!(
            r.authorize(&crate::authz::Attributes {
                user: root.clone(),
                verb: "post".into(),
                path: "/x".into(),
                ..Default::default()
            })
            .allowed()
        );
        let anyone = user("u", &["system:authenticated"]);
        let get_url = |u: &User, p: &str| crate::authz::Attributes {
            user: u.clone(),
            verb: "get".into(),
            path: p.into(),
            ..Default::default()
        };
        assert!(r.authorize(&get_url(&anyone, "/apis/apps/v1")).allowed());
        assert!(
            r.authorize(&get_url(&user("system:anonymous", &["system:unauthenticated"]), "/healthz"))
                .allowed()
        );
        assert!(
            !r.authorize(&get_url(&user("system:anonymous", &["system:unauthenticated"]), "/apis")).allowed()
        );
        assert!(!r.authorize(&get_url(&anyone, "/metrics")).allowed());
        assert!(
            r.authorize(&res(&anyone, "create", "authorization.k8s.io", "selfsubjectaccessreviews", "", ""))
                .allowed()
        );
        let sched = user("system:kube-scheduler", &["system:authenticated"]);
        assert!(r.authorize(&res(&sched, "create", "", "pods/binding", "default", "p")).allowed());
        assert!(
            r.authorize(&res(
                &sched,
                "update",
                "coordination.k8s.io",
                "leases",
                "kube-system",
                "kube-scheduler"
            ))
            .allowed()
        );
        assert!(
            !r.authorize(&res(&sched, "update", "coordination.k8s.io", "leases", "kube-system", "other"))
                .allowed()
        );
        let gc = user("system:serviceaccount:kube-system:generic-garbage-collector", &[]);
        assert!(r.authorize(&res(&gc, "delete", "apps", "replicasets", "ns", "r")).allowed());
        assert!(!r.authorize(&res(&gc, "create", "apps", "replicasets", "ns", "r")).allowed());
        // Nodes get nothing from RBAC: the system:node binding is empty.
        let node = user("system:node:n1", &["system:nodes", "system:authenticated"]);
        assert!(!r.authorize(&res(&node, "get", "", "secrets", "ns", "s")).allowed());
    }

    #[test]
    fn admin_edit_view_through_aggregation() {
        let mut crbs = cluster_role_bindings();
        bind(&mut crbs, "ClusterRoleBinding", "", "view", "viewer");
        bind(&mut crbs, "ClusterRoleBinding", "", "edit", "editor");
        bind(&mut crbs, "ClusterRoleBinding", "", "admin", "admin");
        let r = Resolver::new(
            MemSource::new(Vec::new()),
            MemSource::new(Vec::new()),
            MemSource::new(aggregated_defaults()),
            MemSource::new(crbs),
        );
        let viewer = user("viewer", &[]);
        let editor = user("editor", &[]);
        let admin = user("admin", &[]);
        assert!(r.authorize(&res(&viewer, "list", "", "pods", "ns", "")).allowed());
        assert!(r.authorize(&res(&viewer, "get", "apps", "deployments", "ns", "d")).allowed());
        assert!(!r.authorize(&res(&viewer, "get", "", "secrets", "ns", "s")).allowed());
        assert!(!r.authorize(&res(&viewer, "create", "", "pods", "ns", "")).allowed());
        assert!(r.authorize(&res(&editor, "get", "", "secrets", "ns", "s")).allowed());
        assert!(r.authorize(&res(&editor, "create", "apps", "deployments", "ns", "")).allowed());
        assert!(r.authorize(&res(&editor, "list", "", "pods", "ns", "")).allowed());
        assert!(!r.authorize(&res(&editor, "create", GROUP, "rolebindings", "ns", "")).allowed());
        assert!(!r.authorize(&res(&editor, "update", "", "resourcequotas", "ns", "q")).allowed());
        assert!(r.authorize(&res(&admin, "create", GROUP, "rolebindings", "ns", "")).allowed());
        assert!(r.authorize(&res(&admin, "get", "", "secrets", "ns", "s")).allowed());
        assert!(r.authorize(&res(&admin, "list", "", "pods", "ns", "")).allowed());
        assert!(!r.authorize(&res(&admin, "create", GROUP, "clusterroles", "", "")).allowed());
    }

    #[test]
    fn reconciling_adds_and_never_removes() {
        let expected =
            cluster_roles().into_iter().find(|r| r["metadata"]["name"] == "system:kube-dns").unwrap();
        assert_eq!(reconcile_role(None, &expected), Outcome::Create(expected.clone()));
        assert_eq!(reconcile_role(Some(&expected), &expected), Outcome::Unchanged);
        // A user's extra rule and label stay; a missing default rule comes back.
        let mut edited = expected.clone();
        edited["rules"] =
            json!([Rule::new(&["get"], &[""], &["secrets"]), Rule::new(&["list"], &[""], &["services"])]);
        edited["metadata"]["labels"] = json!({ "mine": "yes" });
        let Outcome::Update(updated) = reconcile_role(Some(&edited), &expected) else {
            panic!("want update")
        };
        let rules = rules_of(&updated);
        assert!(rules.contains(&Rule::new(&["get"], &[""], &["secrets"])));
        assert!(covers(&rules, &rules_of(&expected)).0);
        assert_eq!(updated["metadata"]["labels"]["mine"], "yes");
        assert_eq!(updated["metadata"]["labels"][BOOTSTRAP_LABEL.0], "rbac-defaults");
        // autoupdate=false is left alone.
        let mut mine = edited.clone();
        mine["metadata"]["annotations"] = json!({ AUTOUPDATE: "false" });
        assert_eq!(reconcile_role(Some(&mine), &expected), Outcome::Protected);
        // Bindings: subjects are a union; another roleRef means recreate.
        let b =
            cluster_role_bindings().into_iter().find(|b| b["metadata"]["name"] == "cluster-admin").unwrap();
        let mut extra = b.clone();
        extra["subjects"] = json!([{ "kind": "User", "name": "me", "apiGroup": GROUP }]);
        let Outcome::Update(u) = reconcile_binding(Some(&extra), &b) else { panic!("want update") };
        assert_eq!(u["subjects"].as_array().unwrap().len(), 2);
        let mut other = b.clone();
        other["roleRef"]["name"] = json!("view");
        assert!(matches!(reconcile_binding(Some(&other), &b), Outcome::Recreate(_)));
    }

    #[test]
    fn aggregation_reaches_through_levels() {
        let roles = cluster_roles();
        let gained: std::collections::HashMap<String, Vec<Rule>> = aggregate(&roles).into_iter().collect();
        let admin = &gained["admin"];
        // admin ⊇ edit ⊇ view, through two levels of aggregation.
        assert!(admin.contains(&rule(READ_WRITE, &[GROUP], &["roles", "rolebindings"])));
        assert!(admin.iter().any(|r| r.resources.contains(&"secrets".to_string())));
        assert!(admin.iter().any(|r| r.resources.contains(&"endpointslices".to_string())));
        assert!(!gained["view"].iter().any(|r| r.resources.contains(&"secrets".to_string())));
        // A user's role labelled for view lands in view, edit and admin.
        let mut with_custom = roles.clone();
        let mut custom = cluster_role_object(&labelled(
            role("crd-view", vec![rule(READ, &["x.io"], &["widgets"])]),
            AGGREGATE_TO_VIEW,
        ));
        custom["metadata"]["labels"].as_object_mut().unwrap().remove(BOOTSTRAP_LABEL.0);
        with_custom.push(custom);
        let gained: std::collections::HashMap<String, Vec<Rule>> =
            aggregate(&with_custom).into_iter().collect();
        for r in ["view", "edit", "admin"] {
            assert!(gained[r].contains(&rule(READ, &["x.io"], &["widgets"])), "{r}");
        }
    }
}
