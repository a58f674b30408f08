//! Priority (upstream's `plugin/pkg/admission/priority`): a new pod's `spec.priority` and
//! `spec.preemptionPolicy` come from its PriorityClass (the global default class, or
//! priority 0, when it names none); a pod may not claim a priority its class does not
//! give. Only one PriorityClass may be the global default.
//!
//! The system classes (`system-node-critical`, `system-cluster-critical`) are created at
//! startup by [`crate::bootstrap::run`], as upstream's post-start hook does; they resolve
//! here even before that write is visible.

use std::sync::Arc;

use serde_json::{Value, json};

use super::Context;
use crate::admission::{Attributes, Operation, Plugin, forbidden, lookup};
use crate::errors::{ApiError, ApiResult};
use crate::registry::store::Store;

/// The built-in classes: name, value.
pub const SYSTEM_CLASSES: &[(&str, i64)] =
    &[("system-node-critical", 2_000_001_000), ("system-cluster-critical", 2_000_000_000)];
const DEFAULT_PREEMPTION: &str = "PreemptLowerPriority";

pub struct Priority {
    classes: Arc<Store>,
}

impl Priority {
    pub fn new(ctx: &Context<'_>) -> Result<Self, String> {
        Ok(Self { classes: lookup::store(ctx.registry, "scheduling.k8s.io", "v1", "priorityclasses")? })
    }

    async fn class(&self, name: &str) -> ApiResult<Option<Value>> {
        if let Some(pc) = lookup::get(&self.classes, None, name).await? {
            return Ok(Some(pc));
        }
        Ok(SYSTEM_CLASSES.iter().find(|(n, _)| *n == name).map(
            |(n, v)| json!({ "metadata": { "name": n }, "value": v, "preemptionPolicy": DEFAULT_PREEMPTION }),
        ))
    }

    /// The global default class; with several (a race), the lowest value.
    async fn default_class(&self) -> ApiResult<Option<Value>> {
        let all = lookup::list(&self.classes, None).await?;
        Ok(default_of(all))
    }
}

pub fn default_of(classes: Vec<Value>) -> Option<Value> {
    classes
        .into_iter()
        .filter(|pc| pc["globalDefault"].as_bool() == Some(true))
        .min_by_key(|pc| pc["value"].as_i64().unwrap_or(0))
}

/// Sets the resolved priority and preemption policy, refusing a pod that claims others.
pub fn resolve(
    attrs: &Attributes<'_>,
    spec: &mut Value,
    priority: i64,
    policy: Option<&str>,
) -> ApiResult<()> {
    if let Some(p) = spec["priority"].as_i64()
        && p != priority
    {
        return Err(forbidden(
            attrs,
            format!(
                "the integer value of priority ({p}) must not be provided in pod spec; priority admission controller computed {priority} from the given PriorityClass name"
            ),
        ));
    }
    spec["priority"] = json!(priority);
    if let Some(policy) = policy {
        if let Some(p) = spec["preemptionPolicy"].as_str()
            && p != policy
        {
            return Err(forbidden(
                attrs,
                format!(
                    "the string value of PreemptionPolicy ({p}) must not be provided in pod spec; priority admission controller computed {policy} from the given PriorityClass name"
                ),
            ));
        }
        spec["preemptionPolicy"] = json!(policy);
    }
    Ok(())
}

#[async_trait::async_trait]
impl Plugin for Priority {
    fn name(&self) -> &'static str {
        "Priority"
    }

    async fn admit(&self, attrs: &mut Attributes<'_>) -> ApiResult<()> {
        if !attrs.is("", "pods") || attrs.object.is_none() {
            return Ok(());
        }
        match attrs.operation {
            Operation::Update => {
                // Keep what this plugin set at creation (validation refuses other changes).
                let (Some(pod), Some(old)) = (attrs.object.as_mut(), attrs.old_object) else { return Ok(()) };
                for f in ["priority", "preemptionPolicy"] {
                    if pod["spec"].get(f).is_none_or(Value::is_null) && !old["spec"][f].is_null() {
                        pod["spec"][f] = old["spec"][f].clone();
                    }
                }
                Ok(())
            }
            Operation::Create => {
                let name = attrs
                    .object
                    .as_ref()
                    .and_then(|p| p["spec"]["priorityClassName"].as_str())
                    .unwrap_or_default()
                    .to_string();
                let (class_name, priority, policy) = if name.is_empty() {
                    match self.default_class().await {
                        Ok(Some(pc)) => (
                            lookup::name(&pc).to_string(),
                            pc["value"].as_i64().unwrap_or(0),
                            pc["preemptionPolicy"].as_str().map(str::to_string),
                        ),
                        Ok(None) => (String::new(), 0, Some(DEFAULT_PREEMPTION.to_string())),
                        Err(e) => {
                            return Err(ApiError::internal(format!(
                                "failed to get default priority class: {}",
                                e.message
                            )));
                        }
                    }
                } else {
                    match self.class(&name).await? {
                        Some(pc) => (
                            name.clone(),
                            pc["value"].as_i64().unwrap_or(0),
                            pc["preemptionPolicy"].as_str().map(str::to_string),
                        ),
                        None => {
                            return Err(forbidden(
                                attrs,
                                format!("no PriorityClass with name {name} was found"),
                            ));
                        }
                    }
                };
                let mut spec = attrs.object.as_ref().map(|p| p["spec"].clone()).unwrap_or(Value::Null);
                resolve(attrs, &mut spec, priority, policy.as_deref())?;
                if !class_name.is_empty() {
                    spec["priorityClassName"] = json!(class_name);
                }
                if let Some(pod) = attrs.object.as_mut() {
                    pod["spec"] = spec;
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }

    async fn validate(&self, attrs: &Attributes<'_>) -> ApiResult<()> {
        if !attrs.is("scheduling.k8s.io", "priorityclasses")
            || !matches!(attrs.operation, Operation::Create | Operation::Update)
        {
            return Ok(());
        }
        let Some(pc) = &attrs.object else { return Ok(()) };
        if pc["globalDefault"].as_bool() != Some(true) {
            return Ok(());
        }
        let current = self.default_class().await.map_err(|e| {
            ApiError::internal(format!("failed to get default priority class: {}", e.message))
        })?;
        if let Some(dpc) = current {
            let other = lookup::name(&dpc);
            if attrs.operation == Operation::Create || other != lookup::name(pc) {
                return Err(forbidden(
                    attrs,
                    format!("PriorityClass {other} is already marked as default. Only one default can exist"),
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admission::plugins::tests::{attrs, pods_info};

    #[test]
    fn resolution_and_conflicts() {
        let info = pods_info();
        let user = Default::default();
        let a = attrs(&info, Operation::Create, "p", None, None, &user);
        let mut spec = json!({ "containers": [] });
        resolve(&a, &mut spec, 1000, Some("Never")).unwrap();
        assert_eq!(spec["priority"], 1000);
        assert_eq!(spec["preemptionPolicy"], "Never");
        let mut claims = json!({ "priority": 5 });
        assert_eq!(
            resolve(&a, &mut claims, 1000, None).unwrap_err().message,
            "pods \"p\" is forbidden: the integer value of priority (5) must not be provided in pod spec; priority admission controller computed 1000 from the given PriorityClass name"
        );
        let mut same = json!({ "priority": 1000, "preemptionPolicy": "Never" });
        assert!(resolve(&a, &mut same, 1000, Some("PreemptLowerPriority")).is_err());
    }

    #[test]
    fn lowest_global_default_wins() {
        let classes = vec![
            json!({ "metadata": { "name": "a" }, "value": 10, "globalDefault": true }),
            json!({ "metadata": { "name": "b" }, "value": 5, "globalDefault": true }),
            json!({ "metadata": { "name": "c" }, "value": 1 }),
        ];
        assert_eq!(lookup::name(&default_of(classes).unwrap()), "b");
        assert!(default_of(vec![json!({ "value": 1 })]).is_none());
    }
}
