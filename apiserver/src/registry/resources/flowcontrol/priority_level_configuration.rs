//! PriorityLevelConfigurations (upstream's v1 `SetDefaults_PriorityLevelConfiguration` and
//! `ValidatePriorityLevelConfiguration`): the concurrency shares and queueing of a level.
//! Status writes change status only.

use serde_json::{Value, json};

use crate::errors::FieldError;
use crate::registry::resource::{Hooks, keep_all_but_status};
use crate::registry::resources::core::pod_spec::set_default;
use crate::validation::inclusive_range;

pub struct PriorityLevelConfigurationHooks;

/// Upstream's v1 defaults.
const DEFAULT_NOMINAL_CONCURRENCY_SHARES: i64 = 30;
const DEFAULT_QUEUES: i64 = 64;
const DEFAULT_HAND_SIZE: i64 = 8;
const DEFAULT_QUEUE_LENGTH_LIMIT: i64 = 50;
/// Upstream's `shufflesharding.MaxHashBits`.
const MAX_HASH_BITS: f64 = 60.0;
const EXEMPT: &str = "exempt";
const NON_NEGATIVE: &str = "must be a non-negative integer";

fn zero_to(v: &mut Value, field: &str, default: i64) {
    if v[field].as_i64().unwrap_or(0) == 0 {
        v[field] = json!(default);
    }
}

fn percent(field: &str, v: &Value) -> Vec<FieldError> {
    match v.as_i64() {
        Some(p) if !(0..=100).contains(&p) => vec![FieldError::invalid(field, p, inclusive_range(0, 100))],
        _ => Vec::new(),
    }
}

fn queuing(field: &str, q: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let limit = q["queueLengthLimit"].as_i64().unwrap_or(0);
    if limit <= 0 {
        errs.push(FieldError::invalid(format!("{field}.queueLengthLimit"), limit, "must be positive"));
    }
    let queues = q["queues"].as_i64().unwrap_or(0);
    let hand = q["handSize"].as_i64().unwrap_or(0);
    if queues <= 0 {
        errs.push(FieldError::invalid(format!("{field}.queues"), queues, "must be positive"));
    } else if hand <= 0 {
        errs.push(FieldError::invalid(format!("{field}.handSize"), hand, "must be positive"));
    } else if hand > queues {
        errs.push(FieldError::invalid(
            format!("{field}.handSize"),
            hand,
            format!("should not be greater than queues ({queues})"),
        ));
    } else if ((queues as f64).log2() * hand as f64).ceil() > MAX_HASH_BITS {
        errs.push(FieldError::invalid(
            format!("{field}.handSize"),
            hand,
            format!("required entropy bits of deckSize {queues} and handSize {hand} should not be greater than {MAX_HASH_BITS}"),
        ));
    }
    errs
}

impl Hooks for PriorityLevelConfigurationHooks {
    fn default(&self, obj: &mut Value) {
        let spec = &mut obj["spec"];
        if spec["limited"].is_object() {
            let l = &mut spec["limited"];
            set_default(l, "nominalConcurrencyShares", json!(DEFAULT_NOMINAL_CONCURRENCY_SHARES));
            set_default(l, "lendablePercent", json!(0));
            if l["limitResponse"]["queuing"].is_object() {
                let q = &mut l["limitResponse"]["queuing"];
                zero_to(q, "handSize", DEFAULT_HAND_SIZE);
                zero_to(q, "queues", DEFAULT_QUEUES);
                zero_to(q, "queueLengthLimit", DEFAULT_QUEUE_LENGTH_LIMIT);
            }
        }
        if spec["exempt"].is_object() {
            set_default(&mut spec["exempt"], "nominalConcurrencyShares", json!(0));
            set_default(&mut spec["exempt"], "lendablePercent", json!(0));
        }
    }

    fn prepare_for_status_update(&self, new: &mut Value, old: &Value) {
        keep_all_but_status(new, old);
    }

    fn validate(&self, obj: &Value) -> Vec<FieldError> {
        let spec = &obj["spec"];
        let name = obj["metadata"]["name"].as_str().unwrap_or_default();
        let kind = spec["type"].as_str().unwrap_or_default();
        let mut errs = Vec::new();
        if (name == EXEMPT) != (kind == "Exempt") {
            errs.push(FieldError::invalid(
                "spec.type",
                kind,
                "type must be 'Exempt' if and only if name is 'exempt'",
            ));
        }
        match kind {
            "Exempt" => {
                if !spec["limited"].is_null() {
                    errs.push(FieldError::forbidden(
                        "spec.limited",
                        "must be nil if the type is not Limited",
                    ));
                }
                let e = &spec["exempt"];
                if let Some(n) = e["nominalConcurrencyShares"].as_i64().filter(|n| *n < 0) {
                    errs.push(FieldError::invalid("spec.exempt.nominalConcurrencyShares", n, NON_NEGATIVE));
                }
                errs.extend(percent("spec.exempt.lendablePercent", &e["lendablePercent"]));
            }
            "Limited" => {
                if !spec["exempt"].is_null() {
                    errs.push(FieldError::forbidden("spec.exempt", "must be nil if the type is Limited"));
                }
                let l = &spec["limited"];
                if !l.is_object() {
                    errs.push(FieldError::required("spec.limited", "must not be empty when type is Limited"));
                } else {
                    if let Some(n) = l["nominalConcurrencyShares"].as_i64().filter(|n| *n < 0) {
                        errs.push(FieldError::invalid(
                            "spec.limited.nominalConcurrencyShares",
                            n,
                            NON_NEGATIVE,
                        ));
                    }
                    let lr = &l["limitResponse"];
                    match lr["type"].as_str().unwrap_or_default() {
                        "Reject" => {
                            if !lr["queuing"].is_null() {
                                errs.push(FieldError::forbidden(
                                    "spec.limited.limitResponse.queuing",
                                    "must be nil if limited.limitResponse.type is not Limited",
                                ));
                            }
                        }
                        "Queue" => {
                            if lr["queuing"].is_object() {
                                errs.extend(queuing("spec.limited.limitResponse.queuing", &lr["queuing"]));
                            } else {
                                errs.push(FieldError::required(
                                    "spec.limited.limitResponse.queuing",
                                    "must not be empty if limited.limitResponse.type is Queue",
                                ));
                            }
                        }
                        other => errs.push(FieldError::not_supported(
                            "spec.limited.limitResponse.type",
                            other,
                            &["Queue", "Reject"],
                        )),
                    }
                    errs.extend(percent("spec.limited.lendablePercent", &l["lendablePercent"]));
                    if let Some(b) = l["borrowingLimitPercent"].as_i64().filter(|b| *b < 0) {
                        errs.push(FieldError::invalid(
                            "spec.limited.borrowingLimitPercent",
                            b,
                            "if specified, must be a non-negative integer",
                        ));
                    }
                }
            }
            other => errs.push(FieldError::not_supported("spec.type", other, &["Exempt", "Limited"])),
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

    fn texts(obj: &Value) -> Vec<String> {
        PriorityLevelConfigurationHooks.validate(obj).iter().map(FieldError::to_text).collect()
    }

    #[test]
    fn defaults_and_rules() {
        let mut p = json!({ "metadata": { "name": "p1" }, "spec": { "type": "Limited", "limited": { "limitResponse": { "type": "Queue", "queuing": {} } } } });
        PriorityLevelConfigurationHooks.default(&mut p);
        assert_eq!(
            p["spec"]["limited"],
            json!({ "nominalConcurrencyShares": 30, "lendablePercent": 0, "limitResponse": { "type": "Queue", "queuing": { "queues": 64, "handSize": 8, "queueLengthLimit": 50 } } })
        );
        assert!(texts(&p).is_empty());
        let bad = json!({ "metadata": { "name": "p2" }, "spec": { "type": "Limited", "exempt": {}, "limited": { "nominalConcurrencyShares": -1, "lendablePercent": 101, "borrowingLimitPercent": -1,
            "limitResponse": { "type": "Queue", "queuing": { "queues": 2, "handSize": 3, "queueLengthLimit": -1 } } } } });
        assert_eq!(
            texts(&bad),
            [
                "spec.exempt: Forbidden: must be nil if the type is Limited",
                "spec.limited.nominalConcurrencyShares: Invalid value: -1: must be a non-negative integer",
                "spec.limited.limitResponse.queuing.queueLengthLimit: Invalid value: -1: must be positive",
                "spec.limited.limitResponse.queuing.handSize: Invalid value: 3: should not be greater than queues (2)",
                "spec.limited.lendablePercent: Invalid value: 101: must be between 0 and 100, inclusive",
                "spec.limited.borrowingLimitPercent: Invalid value: -1: if specified, must be a non-negative integer",
            ]
        );
        let exempt = json!({ "metadata": { "name": "p6" }, "spec": { "type": "Exempt" } });
        assert_eq!(
            texts(&exempt),
            ["spec.type: Invalid value: \"Exempt\": type must be 'Exempt' if and only if name is 'exempt'"]
        );
        let entropy = json!({ "metadata": { "name": "p8" }, "spec": { "type": "Limited", "limited": { "limitResponse": { "type": "Queue", "queuing": { "queues": 10000, "handSize": 20, "queueLengthLimit": 1 } } } } });
        assert_eq!(
            texts(&entropy),
            [
                "spec.limited.limitResponse.queuing.handSize: Invalid value: 20: required entropy bits of deckSize 10000 and handSize 20 should not be greater than 60"
            ]
        );
    }
}
