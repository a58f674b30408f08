//! The audit policy (`audit.k8s.io/v1` Policy): which level and stages a request is
//! recorded at. Rules are tried in order and the first that matches decides; a request
//! no rule matches is not recorded (upstream's `policy.Checker`).
//!
//! ```yaml
//! apiVersion: audit.k8s.io/v1
//! kind: Policy
//! omitStages: [RequestReceived]
//! rules:
//!   - level: None
//!     nonResourceURLs: ["/healthz*", "/version"]
//!   - level: RequestResponse
//!     resources: [{group: "", resources: ["pods/log", "*/status"]}]
//!   - level: Metadata
//! ```

use serde::Deserialize;

use super::event::{Level, Stage, Stages};
use crate::authn::User;

/// Largest policy file read.
const MAX_FILE: u64 = 4 << 20;

/// What a request is, as policies see it (upstream's `authorizer.Attributes` as the
/// audit filter builds them: the authenticated user, before impersonation).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Attributes {
    /// Resource requests: get, list, watch, create, ...; other paths: the lower-case
    /// HTTP method (get, post, put, patch, delete, ...).
    pub verb: String,
    pub resource_request: bool,
    pub namespace: String,
    pub api_group: String,
    pub api_version: String,
    pub resource: String,
    pub subresource: String,
    pub name: String,
    pub path: String,
}

/// What the policy decided for one request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RequestAuditConfig {
    pub level: Level,
    pub omit_stages: Stages,
    pub omit_managed_fields: bool,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GroupResources {
    pub group: String,
    pub resources: Vec<String>,
    pub resource_names: Vec<String>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rule {
    pub level: Level,
    pub users: Vec<String>,
    pub user_groups: Vec<String>,
    pub verbs: Vec<String>,
    pub resources: Vec<GroupResources>,
    pub namespaces: Vec<String>,
    pub non_resource_urls: Vec<String>,
    /// The rule's own stages united with the policy's.
    pub omit_stages: Stages,
    pub omit_managed_fields: Option<bool>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Policy {
    pub rules: Vec<Rule>,
    pub omit_stages: Stages,
    pub omit_managed_fields: bool,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct PolicyFile {
    api_version: Option<String>,
    kind: Option<String>,
    #[serde(default)]
    rules: Vec<RuleFile>,
    #[serde(default)]
    omit_stages: Vec<String>,
    #[serde(default)]
    omit_managed_fields: bool,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RuleFile {
    #[serde(default)]
    level: String,
    #[serde(default)]
    users: Vec<String>,
    #[serde(default)]
    user_groups: Vec<String>,
    #[serde(default)]
    verbs: Vec<String>,
    #[serde(default)]
    resources: Vec<GroupResourcesFile>,
    #[serde(default)]
    namespaces: Vec<String>,
    #[serde(default, rename = "nonResourceURLs")]
    non_resource_urls: Vec<String>,
    #[serde(default)]
    omit_stages: Vec<String>,
    omit_managed_fields: Option<bool>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct GroupResourcesFile {
    #[serde(default)]
    group: String,
    #[serde(default)]
    resources: Vec<String>,
    #[serde(default)]
    resource_names: Vec<String>,
}

impl Policy {
    /// Reads `--audit-policy-file`.
    pub fn load(path: &std::path::Path) -> Result<Self, String> {
        use std::io::Read;
        let shown = path.display();
        let mut data = Vec::new();
        std::fs::File::open(path)
            .and_then(|f| f.take(MAX_FILE + 1).read_to_end(&mut data))
            .map_err(|e| format!("failed to read file path {:?}: {e}", shown.to_string()))?;
        if data.len() as u64 > MAX_FILE {
            return Err(format!("{shown}: larger than {MAX_FILE} bytes"));
        }
        Self::parse(&data).map_err(|e| format!("{e}: from file {shown}"))
    }

    /// Parses and validates a policy (YAML or JSON), as upstream's `LoadPolicyFromBytes`.
    pub fn parse(data: &[u8]) -> Result<Self, String> {
        let file: PolicyFile = serde_yaml::from_slice(data).map_err(|e| format!("failed decoding: {e}"))?;
        match (file.api_version.as_deref(), file.kind.as_deref()) {
            (Some("audit.k8s.io/v1"), Some("Policy")) => {}
            (v, k) => {
                return Err(format!(
                    "unknown group version field {}, Kind={} in policy: want audit.k8s.io/v1, Kind=Policy",
                    v.unwrap_or_default(),
                    k.unwrap_or_default()
                ));
            }
        }
        let mut errs = Vec::new();
        let omit_stages = stages(&file.omit_stages, "omitStages", &mut errs);
        let mut rules = Vec::new();
        for (i, r) in file.rules.iter().enumerate() {
            let at = format!("rules[{i}]");
            let level = match r.level.as_str() {
                "None" => Level::None,
                "Metadata" => Level::Metadata,
                "Request" => Level::Request,
                "RequestResponse" => Level::RequestResponse,
                "" => {
                    errs.push(format!("{at}.level: Required value"));
                    Level::None
                }
                other => {
                    errs.push(format!(
                        "{at}.level: Unsupported value: {other:?}: supported values: \"None\", \"Metadata\", \"Request\", \"RequestResponse\""
                    ));
                    Level::None
                }
            };
            for (j, url) in r.non_resource_urls.iter().enumerate() {
                if url == "*" {
                    continue;
                }
                if !url.starts_with('/') {
                    errs.push(format!(
                        "{at}.nonResourceURLs[{j}]: Invalid value: {url:?}: non-resource URL rules must begin with a '/' character"
                    ));
                }
                // Bytes, as upstream's check: the last character may be multi-byte.
                if !url.is_empty() && url.as_bytes()[..url.len() - 1].contains(&b'*') {
                    errs.push(format!(
                        "{at}.nonResourceURLs[{j}]: Invalid value: {url:?}: non-resource URL wildcards '*' must be the final character of the rule"
                    ));
                }
            }
            for gr in &r.resources {
                if !gr.group.is_empty() && !is_dns_subdomain(&gr.group) {
                    errs.push(format!(
                        "{at}.resources.group: Invalid value: {:?}: a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character",
                        gr.group
                    ));
                }
                if !gr.resource_names.is_empty() && gr.resources.is_empty() {
                    errs.push(format!(
                        "{at}.resources.resourceNames: Invalid value: {:?}: using resourceNames requires at least one resource",
                        gr.resource_names
                    ));
                }
            }
            let own = stages(&r.omit_stages, &format!("{at}.omitStages"), &mut errs);
            if !r.non_resource_urls.is_empty() && (!r.resources.is_empty() || !r.namespaces.is_empty()) {
                errs.push(format!(
                    "{at}.nonResourceURLs: Invalid value: {:?}: rules cannot apply to both regular resources and non-resource URLs",
                    r.non_resource_urls
                ));
            }
            rules.push(Rule {
                level,
                users: r.users.clone(),
                user_groups: r.user_groups.clone(),
                verbs: r.verbs.clone(),
                resources: r
                    .resources
                    .iter()
                    .map(|g| GroupResources {
                        group: g.group.clone(),
                        resources: g.resources.clone(),
                        resource_names: g.resource_names.clone(),
                    })
                    .collect(),
                namespaces: r.namespaces.clone(),
                non_resource_urls: r.non_resource_urls.clone(),
                omit_stages: own.union(omit_stages),
                omit_managed_fields: r.omit_managed_fields,
            });
        }
        match errs.len() {
            0 => {}
            1 => return Err(errs.remove(0)),
            _ => return Err(format!("[{}]", errs.join(", "))),
        }
        if rules.is_empty() {
            return Err("loaded illegal policy with 0 rules".into());
        }
        Ok(Self { rules, omit_stages, omit_managed_fields: file.omit_managed_fields })
    }

    /// The level of a request by `user` (None: authentication failed) with `attrs`.
    pub fn evaluate(&self, user: Option<&User>, attrs: &Attributes) -> RequestAuditConfig {
        for r in &self.rules {
            if r.matches(user, attrs) {
                return RequestAuditConfig {
                    level: r.level,
                    omit_stages: r.omit_stages,
                    omit_managed_fields: r.omit_managed_fields.unwrap_or(self.omit_managed_fields),
                };
            }
        }
        RequestAuditConfig {
            level: Level::None,
            omit_stages: self.omit_stages,
            omit_managed_fields: self.omit_managed_fields,
        }
    }
}

fn stages(names: &[String], at: &str, errs: &mut Vec<String>) -> Stages {
    let mut out = Stages::default();
    for (i, n) in names.iter().enumerate() {
        match Stage::parse(n) {
            Some(s) => out.insert(s),
            None => errs.push(format!(
                "{at}[{i}]: Invalid value: {n:?}: allowed stages are RequestReceived,ResponseStarted,ResponseComplete,Panic"
            )),
        }
    }
    out
}

fn is_dns_subdomain(s: &str) -> bool {
    s.len() <= 253
        && s.split('.').all(|l| {
            !l.is_empty()
                && l.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !l.starts_with('-')
                && !l.ends_with('-')
        })
}

impl Rule {
    fn matches(&self, user: Option<&User>, attrs: &Attributes) -> bool {
        if !self.users.is_empty() && !user.is_some_and(|u| self.users.contains(&u.name)) {
            return false;
        }
        if !self.user_groups.is_empty()
            && !user.is_some_and(|u| u.groups.iter().any(|g| self.user_groups.contains(g)))
        {
            return false;
        }
        if !self.verbs.is_empty() && !self.verbs.contains(&attrs.verb) {
            return false;
        }
        if !self.namespaces.is_empty() || !self.resources.is_empty() {
            return self.matches_resource(attrs);
        }
        if !self.non_resource_urls.is_empty() {
            return !attrs.resource_request
                && self.non_resource_urls.iter().any(|spec| path_matches(&attrs.path, spec));
        }
        true
    }

    fn matches_resource(&self, attrs: &Attributes) -> bool {
        if !attrs.resource_request {
            return false;
        }
        // Cluster-scoped resources have the empty namespace.
        if !self.namespaces.is_empty() && !self.namespaces.contains(&attrs.namespace) {
            return false;
        }
        if self.resources.is_empty() {
            return true;
        }
        let (resource, sub) = (attrs.resource.as_str(), attrs.subresource.as_str());
        let combined = if sub.is_empty() { resource.to_string() } else { format!("{resource}/{sub}") };
        self.resources.iter().filter(|gr| gr.group == attrs.api_group).any(|gr| {
            if gr.resources.is_empty() {
                return true;
            }
            if !gr.resource_names.is_empty() && !gr.resource_names.contains(&attrs.name) {
                return false;
            }
            gr.resources.iter().any(|res| {
                *res == combined
                    || res == "*"
                    || (!sub.is_empty() && res.strip_prefix("*/") == Some(sub))
                    || res.strip_suffix("/*") == Some(resource)
            })
        })
    }
}

/// `*`, an exact path, or a prefix ending in `*`.
fn path_matches(path: &str, spec: &str) -> bool {
    spec == "*"
        || spec == path
        || spec.strip_suffix('*').is_some_and(|p| path.starts_with(p.trim_end_matches('*')))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(rules: &str) -> Policy {
        Policy::parse(format!("apiVersion: audit.k8s.io/v1\nkind: Policy\n{rules}").as_bytes()).unwrap()
    }

    fn res(verb: &str, ns: &str, group: &str, resource: &str, sub: &str, name: &str) -> Attributes {
        Attributes {
            verb: verb.into(),
            resource_request: true,
            namespace: ns.into(),
            api_group: group.into(),
            api_version: "v1".into(),
            resource: resource.into(),
            subresource: sub.into(),
            name: name.into(),
            path: String::new(),
        }
    }

    fn path(verb: &str, p: &str) -> Attributes {
        Attributes { verb: verb.into(), path: p.into(), ..Default::default() }
    }

    fn user(name: &str, groups: &[&str]) -> User {
        User {
            name: name.into(),
            groups: groups.iter().map(|g| g.to_string()).collect(),
            ..Default::default()
        }
    }

    #[test]
    fn first_matching_rule_wins() {
        let p = policy(
            r#"
omitStages: [RequestReceived]
rules:
- level: None
  users: ["system:kube-proxy"]
  verbs: [watch]
- level: None
  nonResourceURLs: ["/healthz*", /version]
- level: RequestResponse
  resources: [{group: "", resources: ["pods/log", "*/status"]}]
- level: Request
  userGroups: [admins]
  namespaces: [kube-system]
- level: Metadata
  resources: [{group: apps, resources: [deployments], resourceNames: [web]}]
  omitStages: [ResponseStarted]
- level: Metadata
  resources: [{group: "", resources: ["secrets", "configmaps/*"]}]
- level: Request
  verbs: [create]
  omitManagedFields: true
"#,
        );
        let admin = user("alice", &["admins"]);
        let proxy = user("system:kube-proxy", &[]);
        let cases: Vec<(Option<&User>, Attributes, Level)> = vec![
            (Some(&proxy), res("watch", "", "", "endpoints", "", ""), Level::None),
            (Some(&proxy), res("list", "default", "", "secrets", "", ""), Level::Metadata),
            (Some(&admin), path("get", "/healthz"), Level::None),
            (Some(&admin), path("get", "/healthz/etcd"), Level::None),
            (Some(&admin), path("get", "/version"), Level::None),
            (Some(&admin), path("get", "/versions"), Level::None),
            (Some(&admin), path("get", "/metrics"), Level::None),
            (Some(&admin), res("get", "default", "", "pods", "log", "p"), Level::RequestResponse),
            (Some(&admin), res("update", "default", "", "pods", "status", "p"), Level::RequestResponse),
            (Some(&admin), res("update", "", "", "nodes", "status", "n"), Level::RequestResponse),
            (Some(&admin), res("get", "default", "", "pods", "exec", "p"), Level::None),
            (Some(&admin), res("get", "kube-system", "", "pods", "", "p"), Level::Request),
            (None, res("get", "kube-system", "", "pods", "", "p"), Level::None),
            (Some(&proxy), res("get", "x", "apps", "deployments", "", "web"), Level::Metadata),
            (Some(&proxy), res("get", "x", "apps", "deployments", "", "db"), Level::None),
            (Some(&proxy), res("list", "x", "apps", "deployments", "", ""), Level::None),
            (Some(&proxy), res("get", "x", "", "configmaps", "", "c"), Level::Metadata),
            (Some(&proxy), res("get", "x", "", "configmaps", "foo", "c"), Level::Metadata),
            (Some(&proxy), res("create", "x", "batch", "jobs", "", ""), Level::Request),
            (Some(&proxy), path("post", "/apis"), Level::None),
        ];
        for (i, (u, a, want)) in cases.iter().enumerate() {
            assert_eq!(p.evaluate(*u, a).level, *want, "case {i}: {a:?}");
        }
        let c = p.evaluate(Some(&proxy), &res("get", "x", "apps", "deployments", "", "web"));
        assert!(
            c.omit_stages.contains(Stage::ResponseStarted) && c.omit_stages.contains(Stage::RequestReceived)
        );
        assert!(p.evaluate(Some(&proxy), &res("create", "x", "batch", "jobs", "", "")).omit_managed_fields);
        assert!(!p.evaluate(Some(&proxy), &res("get", "x", "", "secrets", "", "")).omit_managed_fields);
        // No rule matched: the policy's stages still apply.
        assert!(p.evaluate(None, &path("get", "/x")).omit_stages.contains(Stage::RequestReceived));
    }

    #[test]
    fn star_matches_everything_and_groups_must_match() {
        let p = policy(
            "rules:\n- level: Metadata\n  resources: [{group: '', resources: ['*']}]\n- level: Request\n  resources: [{group: 'apps'}]\n",
        );
        assert_eq!(p.evaluate(None, &res("get", "", "", "pods", "log", "p")).level, Level::Metadata);
        assert_eq!(
            p.evaluate(None, &res("get", "", "apps", "deployments", "scale", "d")).level,
            Level::Request
        );
        assert_eq!(p.evaluate(None, &res("get", "", "batch", "jobs", "", "")).level, Level::None);
        assert_eq!(p.evaluate(None, &path("get", "/api")).level, Level::None);
    }

    #[test]
    fn rejects_bad_policies() {
        let bad = |body: &str| {
            Policy::parse(format!("apiVersion: audit.k8s.io/v1\nkind: Policy\n{body}").as_bytes())
                .unwrap_err()
        };
        assert_eq!(bad("rules: []"), "loaded illegal policy with 0 rules");
        assert!(
            bad("rules: [{level: Everything}]").contains("rules[0].level: Unsupported value: \"Everything\"")
        );
        assert!(bad("rules: [{verbs: [get]}]").contains("rules[0].level: Required value"));
        assert!(
            bad("rules: [{level: None, nonResourceURLs: ['healthz']}]").contains("must begin with a '/'")
        );
        assert!(
            bad("rules: [{level: None, nonResourceURLs: ['/a*b']}]").contains("must be the final character")
        );
        assert!(
            bad("rules: [{level: None, nonResourceURLs: ['/a'], namespaces: [x]}]")
                .contains("both regular resources and non-resource URLs")
        );
        assert!(bad("rules: [{level: None, omitStages: [Done]}]").contains("allowed stages are"));
        assert!(
            bad("rules: [{level: None, resources: [{group: 'Apps/v1'}]}]")
                .contains("rules[0].resources.group")
        );
        assert!(
            bad("rules: [{level: None, resources: [{resourceNames: [x]}]}]")
                .contains("requires at least one resource")
        );
        assert!(
            Policy::parse(b"apiVersion: audit.k8s.io/v1beta1\nkind: Policy\nrules: [{level: None}]")
                .unwrap_err()
                .contains("unknown group version")
        );
        assert!(Policy::parse(b"{{{").unwrap_err().starts_with("failed decoding"));
    }
}
