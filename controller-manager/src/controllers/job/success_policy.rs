//! `spec.successPolicy` of Indexed Jobs: the Job succeeds once the succeeded indexes meet
//! one rule (all of its `succeededIndexes`, or `succeededCount` of them, or `succeededCount`
//! indexes at all).

use k8s_openapi::api::batch::v1::SuccessPolicy;

use super::indexes::Intervals;

/// The `SuccessCriteriaMet` message of the first rule met, if any.
pub fn matched(policy: Option<&SuccessPolicy>, completions: usize, succeeded: &Intervals) -> Option<String> {
    let policy = policy?;
    if succeeded.is_empty() {
        return None;
    }
    for (index, rule) in policy.rules.iter().enumerate() {
        let met = match &rule.succeeded_indexes {
            Some(required) => {
                let required = Intervals::parse(required, completions);
                if required.is_empty() {
                    continue;
                }
                let overlap = overlap(&required, succeeded);
                overlap == required.total()
                    || rule.succeeded_count.is_some_and(|c| overlap >= c.max(0) as usize)
            }
            None => rule.succeeded_count.is_some_and(|c| succeeded.total() >= c.max(0) as usize),
        };
        if met {
            return Some(format!("Matched rules at index {index}"));
        }
    }
    None
}

/// How many indexes two interval lists share.
fn overlap(a: &Intervals, b: &Intervals) -> usize {
    let (mut i, mut j, mut n) = (0, 0, 0);
    while i < a.0.len() && j < b.0.len() {
        let (x, y) = (a.0[i], b.0[j]);
        let lo = x.first.max(y.first);
        let hi = x.last.min(y.last);
        if hi >= lo {
            n += hi - lo + 1;
        }
        if y.last < x.last {
            j += 1;
        } else if y.last > x.last {
            i += 1;
        } else {
            i += 1;
            j += 1;
        }
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::batch::v1::SuccessPolicyRule;

    fn rule(indexes: Option<&str>, count: Option<i32>) -> SuccessPolicyRule {
        SuccessPolicyRule { succeeded_indexes: indexes.map(String::from), succeeded_count: count }
    }

    #[test]
    fn rules_by_indexes_and_count() {
        let p = SuccessPolicy { rules: vec![rule(Some("0,2-4"), None), rule(None, Some(4))] };
        let done = Intervals::parse("0,2,3", 10);
        assert_eq!(matched(Some(&p), 10, &done), None);
        let done = Intervals::parse("0,2-4", 10);
        assert_eq!(matched(Some(&p), 10, &done).as_deref(), Some("Matched rules at index 0"));
        let done = Intervals::parse("5-8", 10);
        assert_eq!(matched(Some(&p), 10, &done).as_deref(), Some("Matched rules at index 1"));
        let p = SuccessPolicy { rules: vec![rule(Some("0-9"), Some(2))] };
        assert_eq!(
            matched(Some(&p), 10, &Intervals::parse("3,7", 10)).as_deref(),
            Some("Matched rules at index 0")
        );
        assert_eq!(matched(None, 10, &done), None);
    }
}
