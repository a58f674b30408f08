//! The clusterrole-aggregation controller: a ClusterRole with an `aggregationRule` gets, as
//! its rules, the union of the rules of every ClusterRole its selectors match — how
//! `admin`, `edit` and `view` pick up the permissions of roles labelled to join them.

use std::sync::Arc;

use component_base::labels::Selector;
use k8s_openapi::api::rbac::v1::{ClusterRole, PolicyRule};
use kube::api::{Api, Patch, PatchParams};

use crate::controller::{self, Context, Error};
use crate::informers::{Event, Informer};

pub fn start(ctx: &Context) -> Result<(), Error> {
    let roles = ctx.informers.get::<ClusterRole>();
    let queue = ctx.queue("ClusterRoleAggregator");
    {
        // Any role's change may change what an aggregated role selects: re-check them all.
        let (queue, store) = (queue.clone(), Arc::downgrade(&roles));
        roles.add_handler(move |e| {
            let Some(store) = store.upgrade() else { return };
            for r in store.list().iter().filter(|r| r.aggregation_rule.is_some()) {
                queue.add(r.metadata.name.clone().unwrap_or_default());
            }
            if let Event::Add(r) | Event::Update(_, r) = e
                && r.aggregation_rule.is_some()
            {
                queue.add(r.metadata.name.clone().unwrap_or_default());
            }
        });
    }
    let client = ctx.client.clone();
    controller::run_workers(ctx, queue, 5, move |name| sync(client.clone(), roles.clone(), name));
    Ok(())
}

/// The rules `role` should hold: those of the roles its selectors match, in name order,
/// each rule once.
fn aggregate(role: &ClusterRole, all: &[Arc<ClusterRole>]) -> Option<Vec<PolicyRule>> {
    let rule = role.aggregation_rule.as_ref()?;
    let selectors: Vec<Selector> = rule
        .cluster_role_selectors
        .iter()
        .flatten()
        .map(|s| Selector::from_label_selector(Some(s)))
        .collect();
    let mut sources: Vec<&Arc<ClusterRole>> = all
        .iter()
        .filter(|r| r.metadata.name != role.metadata.name)
        .filter(|r| {
            let labels = r.metadata.labels.clone().unwrap_or_default();
            selectors.iter().any(|s| s.matches(&labels))
        })
        .collect();
    sources.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    let mut rules: Vec<PolicyRule> = Vec::new();
    for r in sources {
        for rule in r.rules.iter().flatten() {
            if !rules.contains(rule) {
                rules.push(rule.clone());
            }
        }
    }
    Some(rules)
}

async fn sync(client: kube::Client, roles: Arc<Informer<ClusterRole>>, name: String) -> Result<(), Error> {
    let Some(role) = roles.get(&name) else { return Ok(()) };
    let Some(rules) = aggregate(&role, &roles.list()) else { return Ok(()) };
    if role.rules.as_deref().unwrap_or_default() == rules.as_slice() {
        return Ok(());
    }
    // A merge patch replaces the whole list; the resourceVersion makes it conditional on
    // the role we aggregated for.
    let patch = serde_json::json!({
        "metadata": {"resourceVersion": role.metadata.resource_version},
        "rules": rules,
    });
    match Api::<ClusterRole>::all(client).patch(&name, &PatchParams::default(), &Patch::Merge(patch)).await {
        Ok(_) => Ok(()),
        Err(e) if controller::api_code(&e) == Some(404) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::rbac::v1::AggregationRule;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
    use kube::api::ObjectMeta;

    fn role(name: &str, label: Option<&str>, verbs: &[&str]) -> Arc<ClusterRole> {
        Arc::new(ClusterRole {
            metadata: ObjectMeta {
                name: Some(name.into()),
                labels: label.map(|l| [(l.to_string(), "true".to_string())].into()),
                ..ObjectMeta::default()
            },
            rules: Some(vec![PolicyRule {
                verbs: verbs.iter().map(|v| v.to_string()).collect(),
                resources: Some(vec!["pods".into()]),
                api_groups: Some(vec![String::new()]),
                ..PolicyRule::default()
            }]),
            ..ClusterRole::default()
        })
    }

    #[test]
    fn union_of_selected_roles_in_name_order() {
        let mut agg = (*role("agg", None, &[])).clone();
        agg.rules = None;
        agg.aggregation_rule = Some(AggregationRule {
            cluster_role_selectors: Some(vec![LabelSelector {
                match_labels: Some([("join".to_string(), "true".to_string())].into()),
                ..LabelSelector::default()
            }]),
        });
        let all = vec![
            role("b", Some("join"), &["list"]),
            role("a", Some("join"), &["get"]),
            role("c", Some("other"), &["delete"]),
            role("d", Some("join"), &["get"]),
        ];
        let rules = aggregate(&agg, &all).unwrap();
        assert_eq!(rules.len(), 2);
        assert_eq!(rules[0].verbs, vec!["get"]);
        assert_eq!(rules[1].verbs, vec!["list"]);
        assert!(aggregate(&all[0], &all).is_none());
    }
}
