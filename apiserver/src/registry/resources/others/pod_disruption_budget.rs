//! PodDisruptionBudgets (upstream's `ValidatePodDisruptionBudgetSpec`).

use serde_json::Value;

use crate::errors::FieldError;
use crate::registry::resource::Hooks;
use crate::validation::{int_or_percent, label_selector, show};

pub struct PodDisruptionBudgetHooks;

impl Hooks for PodDisruptionBudgetHooks {
    fn validate(&self, obj: &Value) -> Vec<FieldError> {
        let spec = &obj["spec"];
        let mut errs = Vec::new();
        if !spec["minAvailable"].is_null() && !spec["maxUnavailable"].is_null() {
            errs.push(FieldError::invalid(
                "spec",
                show(spec),
                "minAvailable and maxUnavailable cannot be both set",
            ));
        }
        for f in ["minAvailable", "maxUnavailable"] {
            errs.extend(int_or_percent(&format!("spec.{f}"), &spec[f], true));
        }
        errs.extend(label_selector("spec.selector", &spec["selector"]));
        if let Some(p) = spec["unhealthyPodEvictionPolicy"].as_str()
            && !["AlwaysAllow", "IfHealthyBudget"].contains(&p)
        {
            errs.push(FieldError::not_supported(
                "spec.unhealthyPodEvictionPolicy",
                p,
                &["AlwaysAllow", "IfHealthyBudget"],
            ));
        }
        errs
    }

    fn tracks_generation(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn one_of_min_or_max() {
        let p = json!({ "spec": { "minAvailable": "150%", "maxUnavailable": 1 } });
        let texts: Vec<String> =
            PodDisruptionBudgetHooks.validate(&p).iter().map(FieldError::to_text).collect();
        assert_eq!(texts.len(), 2, "{texts:?}");
        assert!(texts[0].ends_with("minAvailable and maxUnavailable cannot be both set"));
        assert_eq!(texts[1], "spec.minAvailable: Invalid value: \"150%\": must not be greater than 100%");
    }
}
