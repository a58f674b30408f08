//! The delay before replacing failed pods (upstream's `backoff_utils.go`): 10 s after the
//! first consecutive failure, doubling with each further one up to 10 min, counted from the
//! moment the last failed pod finished. The count of failures since the last success is
//! remembered per Job in memory, as upstream: a restarted controller starts again from the
//! pods it sees.

use std::collections::HashMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use parking_lot::Mutex;

use crate::podutil;

pub const DEFAULT_BACKOFF: Duration = Duration::from_secs(10);
pub const MAX_BACKOFF: Duration = Duration::from_secs(600);

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Record {
    pub failures_after_last_success: u32,
    pub last_failure: Option<Timestamp>,
}

/// Backoff records by Job key.
#[derive(Default)]
pub struct Store {
    records: Mutex<HashMap<String, Record>>,
}

impl Store {
    /// The record after the newly finished pods of this sync (not stored until
    /// [`Store::update`], which happens only once they are in the Job's status).
    pub fn next_record(&self, key: &str, succeeded: &[&Pod], failed: &[&Pod]) -> Record {
        let old = self.records.lock().get(key).cloned().unwrap_or_default();
        next_record(old, succeeded, failed)
    }

    pub fn update(&self, key: &str, record: Record) {
        self.records.lock().insert(key.to_owned(), record);
    }

    pub fn remove(&self, key: &str) {
        self.records.lock().remove(key);
    }
}

fn next_record(mut record: Record, succeeded: &[&Pod], failed: &[&Pod]) -> Record {
    let mut failed_times: Vec<Timestamp> = failed.iter().map(|p| finished_time(p)).collect();
    failed_times.sort();
    if failed_times.is_empty() {
        if !succeeded.is_empty() {
            record = Record::default();
        }
        return record;
    }
    if succeeded.is_empty() {
        record.failures_after_last_success += failed_times.len() as u32;
        record.last_failure = failed_times.last().copied();
        return record;
    }
    // Only the failures after the last success count.
    let last_success = succeeded.iter().map(|p| finished_time(p)).max().expect("non-empty");
    let after: Vec<Timestamp> = failed_times.into_iter().filter(|t| *t > last_success).collect();
    Record { failures_after_last_success: after.len() as u32, last_failure: after.last().copied() }
}

/// When a pod finished: the last container's finish time, else when it turned not-ready,
/// else its deletion time minus its grace period, else its creation.
pub fn finished_time(pod: &Pod) -> Timestamp {
    if let Some(t) = containers_finished(pod) {
        return t;
    }
    if let Some(c) = podutil::condition(pod, "Ready").filter(|c| c.status == "False")
        && let Some(t) = &c.last_transition_time
    {
        return t.0;
    }
    if let Some(d) = &pod.metadata.deletion_timestamp {
        let grace = pod.metadata.deletion_grace_period_seconds.unwrap_or(0).max(0);
        return d.0.checked_sub(Duration::from_secs(grace as u64)).unwrap_or(d.0);
    }
    pod.metadata.creation_timestamp.as_ref().map(|t| t.0).unwrap_or(Timestamp::UNIX_EPOCH)
}

fn containers_finished(pod: &Pod) -> Option<Timestamp> {
    let statuses = pod.status.as_ref()?.container_statuses.as_ref()?;
    let mut latest: Option<Timestamp> = None;
    for cs in statuses {
        let t = cs.state.as_ref()?.terminated.as_ref()?.finished_at.as_ref()?.0;
        latest = Some(latest.map_or(t, |l| l.max(t)));
    }
    latest
}

/// How long to wait before creating pods after `failures` consecutive failures, the last
/// at `last_failure`: 0 when the backoff has passed.
pub fn remaining(failures: u32, last_failure: Option<Timestamp>, now: Timestamp) -> Duration {
    let Some(last) = last_failure.filter(|_| failures > 0) else { return Duration::ZERO };
    let mut backoff = DEFAULT_BACKOFF;
    for _ in 1..failures {
        backoff *= 2;
        if backoff >= MAX_BACKOFF {
            backoff = MAX_BACKOFF;
            break;
        }
    }
    let elapsed = now.duration_since(last);
    let elapsed = if elapsed.is_negative() { Duration::ZERO } else { elapsed.unsigned_abs() };
    backoff.saturating_sub(elapsed)
}

/// The per-index delay (`backoffLimitPerIndex`): from the failure-count annotations of the
/// index's last failed pod.
pub fn remaining_for_index(last_failed: Option<&Pod>, now: Timestamp) -> Duration {
    let Some(pod) = last_failed else { return Duration::ZERO };
    let count =
        super::indexes::index_failure_count(pod) + super::indexes::index_ignored_failure_count(pod) + 1;
    remaining(count as u32, Some(finished_time(pod)), now)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{ContainerState, ContainerStateTerminated, ContainerStatus, PodStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn ts(s: i64) -> Timestamp {
        Timestamp::from_second(s).unwrap()
    }

    fn finished_at(s: i64) -> Pod {
        let mut p = Pod::default();
        p.status = Some(PodStatus {
            container_statuses: Some(vec![ContainerStatus {
                state: Some(ContainerState {
                    terminated: Some(ContainerStateTerminated {
                        finished_at: Some(Time(ts(s))),
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            }]),
            ..Default::default()
        });
        p
    }

    #[test]
    fn delay_doubles_to_the_cap() {
        let now = ts(10_000);
        assert_eq!(remaining(0, Some(now), now), Duration::ZERO);
        assert_eq!(remaining(1, Some(now), now), Duration::from_secs(10));
        assert_eq!(remaining(3, Some(now), now), Duration::from_secs(40));
        assert_eq!(remaining(3, Some(ts(9_990)), now), Duration::from_secs(30));
        assert_eq!(remaining(20, Some(now), now), MAX_BACKOFF);
        assert_eq!(remaining(2, Some(ts(1_000)), now), Duration::ZERO);
    }

    #[test]
    fn records_count_failures_since_the_last_success() {
        let (f1, f2, s, f3) = (finished_at(10), finished_at(20), finished_at(30), finished_at(40));
        let r = next_record(Record::default(), &[], &[&f2, &f1]);
        assert_eq!(r, Record { failures_after_last_success: 2, last_failure: Some(ts(20)) });
        let r = next_record(r, &[&s], &[&f3, &f1]);
        assert_eq!(r, Record { failures_after_last_success: 1, last_failure: Some(ts(40)) });
        assert_eq!(next_record(r, &[&s], &[]), Record::default());
    }
}
