//! Leases (upstream's `ValidateLease`).

use serde_json::Value;

use crate::errors::FieldError;
use crate::registry::resource::Hooks;

pub struct LeaseHooks;

impl Hooks for LeaseHooks {
    fn validate(&self, obj: &Value) -> Vec<FieldError> {
        let mut errs = Vec::new();
        let spec = &obj["spec"];
        if let Some(d) = spec["leaseDurationSeconds"].as_i64()
            && d <= 0
        {
            errs.push(FieldError::invalid("spec.leaseDurationSeconds", d, "must be greater than 0"));
        }
        if let Some(t) = spec["leaseTransitions"].as_i64()
            && t < 0
        {
            errs.push(FieldError::invalid("spec.leaseTransitions", t, "must be greater than or equal to 0"));
        }
        errs
    }

    fn has_status(&self) -> bool {
        false
    }

    /// PUT may create (upstream's `AllowCreateOnUpdate`).
    fn create_on_update(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn durations() {
        let l = json!({ "spec": { "leaseDurationSeconds": 0, "leaseTransitions": -1 } });
        let texts: Vec<String> = LeaseHooks.validate(&l).iter().map(FieldError::to_text).collect();
        assert_eq!(
            texts,
            vec![
                "spec.leaseDurationSeconds: Invalid value: 0: must be greater than 0",
                "spec.leaseTransitions: Invalid value: -1: must be greater than or equal to 0",
            ]
        );
    }
}
