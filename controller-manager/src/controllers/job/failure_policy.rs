//! `spec.podFailurePolicy`: the first rule a failed pod matches (by a container's exit code
//! or by a pod condition such as `DisruptionTarget`) decides whether the failure fails the
//! Job at once, fails only its index, is ignored, or counts towards the backoff limit.

use k8s_openapi::api::batch::v1::{
    PodFailurePolicy, PodFailurePolicyOnExitCodesRequirement, PodFailurePolicyOnPodConditionsPattern,
};
use k8s_openapi::api::core::v1::{ContainerStatus, Pod};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    FailJob,
    FailIndex,
    Ignore,
    Count,
}

impl Action {
    pub fn as_str(self) -> &'static str {
        match self {
            Action::FailJob => "FailJob",
            Action::FailIndex => "FailIndex",
            Action::Ignore => "Ignore",
            Action::Count => "Count",
        }
    }
}

/// What a failed pod's match says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Matched {
    /// The Job's failure message, for a `FailJob` rule.
    pub fail_job: Option<String>,
    /// Whether the failure counts towards `backoffLimit` / `backoffLimitPerIndex`.
    pub counts: bool,
    pub action: Option<Action>,
}

const NO_MATCH: Matched = Matched { fail_job: None, counts: true, action: None };

/// Upstream's `matchPodFailurePolicy` for a pod that failed.
pub fn matches(policy: Option<&PodFailurePolicy>, pod: &Pod) -> Matched {
    let Some(policy) = policy else { return NO_MATCH };
    let ns = pod.metadata.namespace.as_deref().unwrap_or_default();
    let name = pod.metadata.name.as_deref().unwrap_or_default();
    for (index, rule) in policy.rules.iter().enumerate() {
        let action = match rule.action.as_str() {
            "FailJob" => Action::FailJob,
            "FailIndex" => Action::FailIndex,
            "Ignore" => Action::Ignore,
            "Count" => Action::Count,
            // An action this controller does not know is skipped, as upstream's switch.
            _ => continue,
        };
        let message = if let Some(req) = &rule.on_exit_codes {
            let Some(cs) = matching_container(pod, req) else { continue };
            let code =
                cs.state.as_ref().and_then(|s| s.terminated.as_ref()).map(|t| t.exit_code).unwrap_or(0);
            format!(
                "Container {} for pod {ns}/{name} failed with exit code {code} matching {} rule at index {index}",
                cs.name,
                action.as_str()
            )
        } else if let Some(patterns) = &rule.on_pod_conditions {
            let Some(cond) = matching_condition(pod, patterns) else { continue };
            format!("Pod {ns}/{name} has condition {cond} matching {} rule at index {index}", action.as_str())
        } else {
            continue;
        };
        return match action {
            Action::Ignore => Matched { fail_job: None, counts: false, action: Some(action) },
            Action::FailJob => Matched { fail_job: Some(message), counts: true, action: Some(action) },
            Action::FailIndex | Action::Count => {
                Matched { fail_job: None, counts: true, action: Some(action) }
            }
        };
    }
    NO_MATCH
}

/// The first terminated container (app containers, then init containers) with a non-zero
/// exit code the requirement matches.
fn matching_container<'a>(
    pod: &'a Pod,
    req: &PodFailurePolicyOnExitCodesRequirement,
) -> Option<&'a ContainerStatus> {
    let status = pod.status.as_ref()?;
    let find = |list: Option<&'a Vec<ContainerStatus>>| {
        list.into_iter().flatten().find(|cs| {
            let Some(t) = cs.state.as_ref().and_then(|s| s.terminated.as_ref()) else { return false };
            if req.container_name.as_ref().is_some_and(|n| *n != cs.name) || t.exit_code == 0 {
                return false;
            }
            let listed = req.values.contains(&t.exit_code);
            match req.operator.as_str() {
                "In" => listed,
                "NotIn" => !listed,
                _ => false,
            }
        })
    };
    find(status.container_statuses.as_ref()).or_else(|| find(status.init_container_statuses.as_ref()))
}

fn matching_condition(pod: &Pod, patterns: &[PodFailurePolicyOnPodConditionsPattern]) -> Option<String> {
    let conds = pod.status.as_ref()?.conditions.as_ref()?;
    conds
        .iter()
        .find(|c| patterns.iter().any(|p| p.type_ == c.type_ && p.status == c.status))
        .map(|c| c.type_.clone())
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::batch::v1::PodFailurePolicyRule;
    use k8s_openapi::api::core::v1::{ContainerState, ContainerStateTerminated, PodCondition, PodStatus};

    fn failed(exit: i32, conditions: &[(&str, &str)]) -> Pod {
        let mut pod = Pod::default();
        pod.metadata.namespace = Some("ns".into());
        pod.metadata.name = Some("p".into());
        pod.status = Some(PodStatus {
            phase: Some("Failed".into()),
            container_statuses: Some(vec![ContainerStatus {
                name: "main".into(),
                state: Some(ContainerState {
                    terminated: Some(ContainerStateTerminated { exit_code: exit, ..Default::default() }),
                    ..Default::default()
                }),
                ..Default::default()
            }]),
            conditions: Some(
                conditions
                    .iter()
                    .map(|(t, s)| PodCondition {
                        type_: t.to_string(),
                        status: s.to_string(),
                        ..Default::default()
                    })
                    .collect(),
            ),
            ..Default::default()
        });
        pod
    }

    fn policy() -> PodFailurePolicy {
        PodFailurePolicy {
            rules: vec![
                PodFailurePolicyRule {
                    action: "Ignore".into(),
                    on_pod_conditions: Some(vec![PodFailurePolicyOnPodConditionsPattern {
                        type_: "DisruptionTarget".into(),
                        status: "True".into(),
                    }]),
                    ..Default::default()
                },
                PodFailurePolicyRule {
                    action: "FailJob".into(),
                    on_exit_codes: Some(PodFailurePolicyOnExitCodesRequirement {
                        container_name: Some("main".into()),
                        operator: "In".into(),
                        values: vec![42],
                    }),
                    ..Default::default()
                },
                PodFailurePolicyRule {
                    action: "Count".into(),
                    on_exit_codes: Some(PodFailurePolicyOnExitCodesRequirement {
                        container_name: None,
                        operator: "NotIn".into(),
                        values: vec![1],
                    }),
                    ..Default::default()
                },
            ],
        }
    }

    #[test]
    fn first_matching_rule_decides() {
        let p = policy();
        let m = matches(Some(&p), &failed(42, &[]));
        assert_eq!(m.action, Some(Action::FailJob));
        assert_eq!(
            m.fail_job.as_deref(),
            Some("Container main for pod ns/p failed with exit code 42 matching FailJob rule at index 1")
        );
        let m = matches(Some(&p), &failed(42, &[("DisruptionTarget", "True")]));
        assert_eq!((m.action, m.counts), (Some(Action::Ignore), false));
        assert_eq!(matches(Some(&p), &failed(3, &[])).action, Some(Action::Count));
        // Exit code 1 matches no rule: counted, no action.
        assert_eq!(matches(Some(&p), &failed(1, &[])), NO_MATCH);
        assert_eq!(matches(None, &failed(42, &[])), NO_MATCH);
    }
}
