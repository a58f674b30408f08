//! Upstream's behavior cases from `horizontal_test.go` (`TestScalingWithRules`,
//! `TestNormalizeDesiredReplicasWithBehavior`, `TestCalculateScale{Up,Down}Limit...`,
//! `TestStoreScaleEvents`), on a fixed clock.

use k8s_openapi::api::autoscaling::v2::HPAScalingPolicy;

use super::*;

fn now() -> Timestamp {
    "2024-06-01T12:00:00Z".parse().unwrap()
}

fn ago(secs: i64) -> Timestamp {
    now() - SignedDuration::from_secs(secs)
}

fn pods(value: i32, period_seconds: i32) -> Policy {
    Policy { kind: PolicyKind::Pods, value, period_seconds }
}

fn percent(value: i32, period_seconds: i32) -> Policy {
    Policy { kind: PolicyKind::Percent, value, period_seconds }
}

fn rules(window: i32, select: Select, policies: Vec<Policy>) -> Rules {
    Rules { stabilization_window_seconds: window, select, policies }
}

/// The defaults: scale up by 4 pods or 100 % per 15 s, down by 100 % per 15 s.
fn default_behavior() -> Behavior {
    Behavior::from_spec(&HorizontalPodAutoscalerBehavior::default(), Duration::from_secs(300))
}

fn behavior(up: Vec<Policy>, up_select: Select, down: Vec<Policy>, down_select: Select) -> Behavior {
    Behavior { scale_up: rules(0, up_select, up), scale_down: rules(300, down_select, down) }
}

fn events(changes: &[(i32, i64)]) -> Vec<ScaleEvent> {
    changes.iter().map(|&(change, secs)| ScaleEvent { change, at: ago(secs), outdated: false }).collect()
}

/// `limit_with_behavior` with the given event histories.
fn limit(
    b: &Behavior,
    up: &[(i32, i64)],
    down: &[(i32, i64)],
    current: i32,
    desired: i32,
    min: i32,
    max: i32,
) -> Limited {
    let h = History { recommendations: vec![], scale_up: events(up), scale_down: events(down) };
    h.limit_with_behavior(b, current, desired, min, max, now())
}

#[test]
fn defaults_follow_upstream() {
    let b = default_behavior();
    assert_eq!(b.scale_up, rules(0, Select::Max, vec![pods(4, 15), percent(100, 15)]));
    assert_eq!(b.scale_down, rules(300, Select::Max, vec![percent(100, 15)]));
    // Fields given win one by one; an unset scale-down window is the flag's.
    let given = HorizontalPodAutoscalerBehavior {
        scale_up: Some(HPAScalingRules { select_policy: Some("Min".into()), ..Default::default() }),
        scale_down: Some(HPAScalingRules {
            policies: Some(vec![HPAScalingPolicy { type_: "Pods".into(), value: 1, period_seconds: 60 }]),
            ..Default::default()
        }),
    };
    let b = Behavior::from_spec(&given, Duration::from_secs(120));
    assert_eq!(b.scale_up, rules(0, Select::Min, vec![pods(4, 15), percent(100, 15)]));
    assert_eq!(b.scale_down, rules(120, Select::Max, vec![pods(1, 60)]));
}

#[test]
fn scale_up_with_default_behavior() {
    let l = limit(&default_behavior(), &[], &[], 5, 15, 1, 100);
    assert_eq!((l.replicas, l.reason), (10, "ScaleUpLimit"));
    let l = limit(&default_behavior(), &[], &[], 1, 15, 1, 100);
    assert_eq!((l.replicas, l.reason), (5, "ScaleUpLimit"));
}

#[test]
fn scale_up_pods_policy_larger_than_percent() {
    let b = behavior(vec![pods(100, 60), percent(100, 60)], Select::Max, vec![], Select::Max);
    assert_eq!(limit(&b, &[], &[], 3, 500, 1, 1000).replicas, 103);
}

#[test]
fn scale_up_percent_policy_larger_than_pods() {
    let b = behavior(vec![pods(2, 60), percent(100, 60)], Select::Max, vec![], Select::Max);
    assert_eq!(limit(&b, &[], &[], 3, 500, 1, 1000).replicas, 6);
}

#[test]
fn scale_up_max_replicas_limits_large_policies() {
    let b = behavior(vec![pods(100, 60), percent(10000, 60)], Select::Max, vec![], Select::Max);
    let l = limit(&b, &[], &[], 3, 500, 1, 10);
    assert_eq!((l.replicas, l.reason), (10, "TooManyReplicas"));
    let l = limit(&b, &[], &[], 10, 500, 1, 14);
    assert_eq!((l.replicas, l.reason), (14, "TooManyReplicas"));
}

#[test]
fn scale_up_min_select_takes_the_smaller_change() {
    let b = behavior(vec![pods(30, 60), percent(200, 60)], Select::Min, vec![], Select::Max);
    assert_eq!(limit(&b, &[], &[], 10, 500, 1, 1000).replicas, 30);
    let b = behavior(vec![pods(10, 60), percent(500, 60)], Select::Min, vec![], Select::Max);
    assert_eq!(limit(&b, &[], &[], 10, 500, 1, 1000).replicas, 20);
    // Upstream's TestCalculateScaleUpLimitWithScalingRules: from 1, +2 pods or +50 % → 2.
    let r = rules(300, Select::Min, vec![pods(2, 60), percent(50, 60)]);
    assert_eq!(scale_up_limit(1, &[], &[], &r, now()), 2);
}

#[test]
fn scale_up_counts_events_in_each_policy_period() {
    // 5 replicas were added 30 s ago: the 60 s policy measures from 10 - 5 = 5 → 5 + 8 = 13,
    // the 15 s policy from 10 → 20; Min picks 13.
    let b = behavior(vec![pods(8, 60), percent(100, 15)], Select::Min, vec![], Select::Max);
    let l = limit(&b, &[(5, 30)], &[], 10, 100, 1, 100);
    assert_eq!((l.replicas, l.reason), (13, "ScaleUpLimit"));
    // Events older than a policy's period no longer count.
    assert_eq!(limit(&b, &[(5, 90)], &[], 10, 100, 1, 100).replicas, 18);
    // Having added more than allowed already: hold (never below current).
    assert_eq!(limit(&b, &[(20, 10)], &[], 10, 100, 1, 100).replicas, 10);
    // Removals in the period raise the starting point.
    assert_eq!(limit(&b, &[], &[(3, 10)], 10, 100, 1, 100).replicas, 21);
}

#[test]
fn scale_down_percent_or_pods() {
    let b = behavior(vec![], Select::Max, vec![pods(2, 60), percent(100, 60)], Select::Max);
    assert_eq!(limit(&b, &[], &[], 100, 2, 1, 1000).replicas, 2);
    let b = behavior(vec![], Select::Max, vec![pods(100, 60), percent(2, 60)], Select::Max);
    assert_eq!(limit(&b, &[], &[], 100, 2, 1, 1000).replicas, 2);
    // Nothing limits a large policy but minReplicas.
    let b = behavior(vec![], Select::Max, vec![pods(1000, 60)], Select::Max);
    let l = limit(&b, &[], &[], 100, 0, 1, 1000);
    assert_eq!((l.replicas, l.reason), (1, "TooFewReplicas"));
}

#[test]
fn scale_down_policy_limits() {
    let b = behavior(vec![], Select::Max, vec![pods(5, 60), percent(50, 60)], Select::Max);
    let l = limit(&b, &[], &[], 100, 2, 1, 1000);
    assert_eq!((l.replicas, l.reason), (50, "ScaleDownLimit"));
    let b = behavior(vec![], Select::Min, vec![pods(5, 60), percent(50, 60)], Select::Min);
    let l = limit(&b, &[], &[], 100, 2, 1, 1000);
    assert_eq!((l.replicas, l.reason), (95, "ScaleDownLimit"));
    // Upstream's TestCalculateScaleDownLimitWithBehaviors: from 5, Min of -2 pods / -50 % → 3.
    let r = rules(300, Select::Min, vec![pods(2, 60), percent(50, 60)]);
    assert_eq!(scale_down_limit(5, &[], &[], &r, now()), 3);
    // Percent rounds towards zero: 5 × 0.5 = 2.5 → 2.
    let r = rules(300, Select::Max, vec![percent(50, 60)]);
    assert_eq!(scale_down_limit(5, &[], &[], &r, now()), 2);
}

#[test]
fn scale_down_counts_events() {
    // At most 20 % per minute: 10 of the 60 the minute started with went 20 s ago, so 2
    // more may go now (to 48), not 20 % of the current 50.
    let b = behavior(vec![], Select::Max, vec![percent(20, 60)], Select::Max);
    let l = limit(&b, &[], &[(10, 20)], 50, 10, 1, 100);
    assert_eq!((l.replicas, l.reason), (48, "ScaleDownLimit"));
    // Having removed more than allowed already: hold (never above current).
    assert_eq!(limit(&b, &[], &[(15, 20)], 50, 10, 1, 100).replicas, 50);
    // Once the event leaves the period, 20 % of 50 may go.
    assert_eq!(limit(&b, &[], &[(10, 70)], 50, 10, 1, 100).replicas, 40);
}

#[test]
fn disabled_select_policy_holds() {
    let b = behavior(vec![pods(4, 15)], Select::Disabled, vec![percent(100, 15)], Select::Disabled);
    let l = limit(&b, &[], &[], 10, 20, 1, 100);
    assert_eq!((l.replicas, l.reason), (10, "ScaleUpLimit"));
    let l = limit(&b, &[], &[], 10, 2, 1, 100);
    assert_eq!((l.replicas, l.reason), (10, "ScaleDownLimit"));
    // Scaling up disabled does not stop scaling down.
    let b = behavior(vec![pods(4, 15)], Select::Disabled, vec![percent(100, 15)], Select::Max);
    assert_eq!(limit(&b, &[], &[], 10, 2, 1, 100).replicas, 2);
}

#[test]
fn within_range() {
    let l = limit(&default_behavior(), &[], &[], 5, 5, 1, 10);
    assert_eq!(l, Limited { replicas: 5, ..WITHIN_RANGE });
}

#[test]
fn without_behavior_rules() {
    // At most double (or 4) per sync, then max; min first.
    let l = limit_without_behavior(5, 20, 1, 100);
    assert_eq!((l.replicas, l.reason), (10, "ScaleUpLimit"));
    let l = limit_without_behavior(1, 20, 1, 100);
    assert_eq!((l.replicas, l.reason), (4, "ScaleUpLimit"));
    let l = limit_without_behavior(1, 10, 1, 3);
    assert_eq!((l.replicas, l.reason), (3, "TooManyReplicas"));
    let l = limit_without_behavior(5, 0, 2, 10);
    assert_eq!((l.replicas, l.reason), (2, "TooFewReplicas"));
    let l = limit_without_behavior(5, 7, 2, 10);
    assert_eq!((l.replicas, l.reason), (7, "DesiredWithinRange"));
}

fn recs(list: &[(i32, i64)]) -> Vec<Recommendation> {
    list.iter().map(|&(replicas, secs)| Recommendation { replicas, at: ago(secs) }).collect()
}

#[test]
fn stabilization_without_behavior_keeps_the_highest_recent() {
    let mut h = History { recommendations: recs(&[(8, 400), (6, 200), (4, 100)]), ..Default::default() };
    // The 8 is outside the 5-minute window; 6 is the highest within.
    assert_eq!(h.stabilize(Duration::from_secs(300), 3, now()), 6);
    // The stale sample's slot was reused for the new one.
    assert_eq!(h.recommendations, recs(&[(3, 0), (6, 200), (4, 100)]));
    assert_eq!(h.stabilize(Duration::from_secs(300), 9, now()), 9);
    assert_eq!(h.recommendations.len(), 4);
}

#[test]
fn first_recommendation_is_the_current_size() {
    let mut h = History::default();
    h.record_initial(5, ago(10));
    h.record_initial(7, now());
    assert_eq!(h.recommendations, recs(&[(5, 10)]));
    // So a fresh controller does not scale down at once.
    assert_eq!(h.stabilize(Duration::from_secs(300), 2, now()), 5);
}

#[test]
fn stabilization_with_behavior() {
    let b = |up: i32, down: i32| Behavior {
        scale_up: rules(up, Select::Max, vec![pods(4, 15)]),
        scale_down: rules(down, Select::Max, vec![percent(100, 15)]),
    };
    // Stable.
    let mut h = History { recommendations: recs(&[(10, 0)]), ..Default::default() };
    assert_eq!(h.stabilize_with_behavior(&b(0, 300), 10, 10, now()).0, 10);
    // Scale down: the highest recommendation of the last 3 minutes.
    let mut h = History { recommendations: recs(&[(5, 60), (4, 120)]), ..Default::default() };
    let (r, reason, _) = h.stabilize_with_behavior(&b(0, 180), 100, 3, now());
    assert_eq!((r, reason), (5, "ScaleDownStabilized"));
    // Scale up: the lowest recommendation of the last 3 minutes, never below current.
    let mut h = History { recommendations: recs(&[(0, 60), (1, 120)]), ..Default::default() };
    let (r, reason, _) = h.stabilize_with_behavior(&b(180, 300), 1, 7, now());
    assert_eq!((r, reason), (1, "ScaleUpStabilized"));
    let mut h = History { recommendations: recs(&[(4, 60), (6, 120)]), ..Default::default() };
    assert_eq!(h.stabilize_with_behavior(&b(180, 300), 2, 7, now()).0, 4);
    // Outside both windows: the slot is reused.
    let mut h = History { recommendations: recs(&[(9, 1000), (4, 10)]), ..Default::default() };
    assert_eq!(h.stabilize_with_behavior(&b(60, 300), 4, 4, now()).0, 4);
    assert_eq!(h.recommendations, recs(&[(4, 0), (4, 10)]));
}

#[test]
fn scale_events_are_kept_only_under_a_behavior_and_reuse_stale_slots() {
    let b = behavior(vec![pods(4, 60)], Select::Max, vec![percent(100, 30)], Select::Max);
    let mut h = History::default();
    h.store_scale_event(None, 1, 5, now());
    assert!(h.scale_up.is_empty() && h.scale_down.is_empty());
    h.scale_up = events(&[(1, 100), (2, 30)]);
    h.store_scale_event(Some(&b), 5, 8, now());
    assert_eq!(
        h.scale_up,
        vec![
            ScaleEvent { change: 3, at: now(), outdated: false },
            ScaleEvent { change: 2, at: ago(30), outdated: false },
        ]
    );
    h.store_scale_event(Some(&b), 8, 6, now());
    assert_eq!(h.scale_down, vec![ScaleEvent { change: 2, at: now(), outdated: false }]);
}
