//! API discovery for the controllers that act on every resource (the garbage collector and
//! the namespace controller): what the server serves, with scope and verbs, one entry per
//! resource at its preferred version. A group version that fails to list is reported and
//! skipped, not fatal, as client-go's `ServerPreferredResources`.

use std::collections::HashSet;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::APIResourceList;
use kube::discovery::ApiResource;

/// One served resource (never a subresource).
#[derive(Clone, Debug, PartialEq)]
pub struct Resource {
    pub api: ApiResource,
    pub namespaced: bool,
    pub verbs: Vec<String>,
}

impl Resource {
    /// Whether the server allows every one of `verbs` on it.
    pub fn supports(&self, verbs: &[&str]) -> bool {
        verbs.iter().all(|v| self.verbs.iter().any(|s| s == v))
    }

    /// `apps/v1/replicasets`, `v1/pods`: unique per resource and version.
    pub fn id(&self) -> String {
        format!("{}/{}", self.api.api_version, self.api.plural)
    }
}

/// What one discovery pass found.
#[derive(Debug, Default)]
pub struct Discovered {
    /// Every resource at every served version (to map an owner reference's apiVersion and
    /// kind to a resource, as a REST mapper does).
    pub all: Vec<Resource>,
    /// One entry per group and resource: at the group's preferred version when it serves
    /// it there, else at the first version that does.
    pub preferred: Vec<Resource>,
    /// Group versions whose resource lists could not be read, with why.
    pub failed: Vec<(String, String)>,
    /// Group version strings that do not parse.
    pub unparsable: Vec<String>,
}

impl Discovered {
    /// client-go's `ErrGroupDiscoveryFailed` text, when some group version failed.
    pub fn failure_message(&self) -> Option<String> {
        if self.failed.is_empty() {
            return None;
        }
        let mut parts: Vec<String> = self.failed.iter().map(|(gv, err)| format!("{gv}: {err}")).collect();
        parts.sort();
        Some(format!("unable to retrieve the complete list of server APIs: {}", parts.join(", ")))
    }
}

/// Splits `apps/v1` (or the core group's `v1`) into group and version, as
/// `schema.ParseGroupVersion`.
pub fn parse_group_version(gv: &str) -> Result<(&str, &str), String> {
    if gv.is_empty() || gv == "/" {
        return Ok(("", ""));
    }
    match gv.split_once('/') {
        None => Ok(("", gv)),
        Some((g, v)) if !v.contains('/') => Ok((g, v)),
        Some(_) => Err(format!("unexpected GroupVersion string: {gv}")),
    }
}

/// Asks the server for every group version's resources. Fails only when the group lists
/// themselves (`/api`, `/apis`) cannot be read.
pub async fn run(client: &kube::Client) -> Result<Discovered, kube::Error> {
    // (group version, its resources), each group's preferred version first
    let mut lists: Vec<(String, Result<APIResourceList, kube::Error>)> = Vec::new();
    let core = client.list_core_api_versions().await?;
    for v in &core.versions {
        lists.push((v.clone(), client.list_core_api_resources(v).await));
    }
    let groups = client.list_api_groups().await?;
    for g in groups.groups {
        let preferred = g.preferred_version.as_ref().map(|p| p.group_version.clone());
        // The preferred version first, so that its resources win.
        let mut versions: Vec<String> = preferred.iter().cloned().collect();
        versions.extend(
            g.versions.iter().map(|v| v.group_version.clone()).filter(|gv| Some(gv) != preferred.as_ref()),
        );
        for gv in versions {
            let list = client.list_api_group_resources(&gv).await;
            lists.push((gv, list));
        }
    }
    let mut found = Discovered::default();
    let mut ok = Vec::new();
    for (gv, list) in lists {
        match list {
            Ok(l) => ok.push(l),
            Err(e) => found.failed.push((gv, e.to_string())),
        }
    }
    let (all, preferred, unparsable) = assemble(&ok);
    found.all = all;
    found.preferred = preferred;
    found.unparsable = unparsable;
    Ok(found)
}

/// Builds the resource lists from group version lists given in preference order (per
/// group, the preferred version first).
pub fn assemble(lists: &[APIResourceList]) -> (Vec<Resource>, Vec<Resource>, Vec<String>) {
    let mut all = Vec::new();
    let mut preferred = Vec::new();
    let mut unparsable = Vec::new();
    let mut seen: HashSet<(String, String)> = HashSet::new();
    for list in lists {
        let (group, version) = match parse_group_version(&list.group_version) {
            Ok(gv) => gv,
            Err(e) => {
                unparsable.push(e);
                continue;
            }
        };
        for r in &list.resources {
            if r.name.contains('/') {
                continue;
            }
            // A resource may be served in another group's shape (e.g. `scale`); discovery
            // says so with `group`/`version` on the entry.
            let g = r.group.clone().unwrap_or_else(|| group.to_owned());
            let v = r.version.clone().unwrap_or_else(|| version.to_owned());
            let api_version = if g.is_empty() { v.clone() } else { format!("{g}/{v}") };
            let res = Resource {
                api: ApiResource {
                    group: g.clone(),
                    version: v,
                    api_version,
                    kind: r.kind.clone(),
                    plural: r.name.clone(),
                },
                namespaced: r.namespaced,
                verbs: r.verbs.clone(),
            };
            if seen.insert((g, r.name.clone())) {
                preferred.push(res.clone());
            }
            all.push(res);
        }
    }
    (all, preferred, unparsable)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::APIResource;

    fn list(gv: &str, resources: &[(&str, &str, bool)]) -> APIResourceList {
        APIResourceList {
            group_version: gv.into(),
            resources: resources
                .iter()
                .map(|(name, kind, ns)| APIResource {
                    name: (*name).into(),
                    kind: (*kind).into(),
                    namespaced: *ns,
                    verbs: vec!["list".into(), "watch".into(), "delete".into()],
                    ..Default::default()
                })
                .collect(),
        }
    }

    #[test]
    fn preferred_versions_win_and_subresources_are_skipped() {
        let lists = vec![
            list("v1", &[("pods", "Pod", true), ("pods/status", "Pod", true), ("nodes", "Node", false)]),
            list("autoscaling/v2", &[("horizontalpodautoscalers", "HorizontalPodAutoscaler", true)]),
            list("autoscaling/v1", &[("horizontalpodautoscalers", "HorizontalPodAutoscaler", true)]),
            list("a/b/c", &[("things", "Thing", true)]),
        ];
        let (all, preferred, bad) = assemble(&lists);
        assert_eq!(all.len(), 4);
        let ids: Vec<String> = preferred.iter().map(Resource::id).collect();
        assert_eq!(ids, vec!["v1/pods", "v1/nodes", "autoscaling/v2/horizontalpodautoscalers"]);
        assert!(preferred[0].namespaced && !preferred[1].namespaced);
        assert!(preferred[0].supports(&["list", "delete"]) && !preferred[0].supports(&["deletecollection"]));
        assert_eq!(bad, vec!["unexpected GroupVersion string: a/b/c"]);
    }

    #[test]
    fn failure_message_is_sorted() {
        let d = Discovered {
            failed: vec![("b/v1".into(), "boom".into()), ("a/v1".into(), "bang".into())],
            ..Default::default()
        };
        assert_eq!(
            d.failure_message().unwrap(),
            "unable to retrieve the complete list of server APIs: a/v1: bang, b/v1: boom"
        );
        assert_eq!(Discovered::default().failure_message(), None);
    }
}
