//! Completion indexes of Indexed Jobs: the `batch.kubernetes.io/job-completion-index`
//! annotation of each pod, and the compressed interval strings of `status.completedIndexes`
//! and `status.failedIndexes` (`"0-3,5,7,8"`), as upstream's `indexed_job_utils.go`.

use std::collections::BTreeSet;
use std::fmt;

use k8s_openapi::api::core::v1::{Container, EnvVar, EnvVarSource, ObjectFieldSelector, Pod};

pub const COMPLETION_INDEX: &str = "batch.kubernetes.io/job-completion-index";
pub const INDEX_FAILURE_COUNT: &str = "batch.kubernetes.io/job-index-failure-count";
pub const INDEX_IGNORED_FAILURE_COUNT: &str = "batch.kubernetes.io/job-index-ignored-failure-count";
const COMPLETION_INDEX_ENV: &str = "JOB_COMPLETION_INDEX";
/// Upstream's `names.MaxGeneratedNameLength`: 63 minus the 5 random characters.
const MAX_GENERATED_NAME_LENGTH: usize = 58;

/// A closed range of indexes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Interval {
    pub first: usize,
    pub last: usize,
}

/// Sorted, non-overlapping, non-adjacent intervals.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Intervals(pub Vec<Interval>);

impl Intervals {
    /// Parses a status string, dropping indexes `>= completions` and malformed parts (a
    /// user may write the field; the controller must not fail on it).
    pub fn parse(s: &str, completions: usize) -> Intervals {
        let mut out: Vec<Interval> = Vec::new();
        if s.is_empty() {
            return Intervals(out);
        }
        for part in s.split(',') {
            let mut bounds = part.split('-');
            let Some(Ok(first)) = bounds.next().map(str::parse::<usize>) else { continue };
            if first >= completions {
                break;
            }
            let last = match bounds.next() {
                None => first,
                Some(l) => match l.parse::<usize>() {
                    Ok(l) => l.min(completions - 1),
                    Err(_) => continue,
                },
            };
            match out.last_mut() {
                Some(prev) if prev.last + 1 == first => prev.last = last,
                _ => out.push(Interval { first, last }),
            }
        }
        Intervals(out)
    }

    /// These intervals plus `indexes` (in increasing order).
    pub fn with_indexes(&self, indexes: impl IntoIterator<Item = usize>) -> Intervals {
        let other = Intervals(indexes.into_iter().map(|i| Interval { first: i, last: i }).collect());
        self.merge(&other)
    }

    pub fn merge(&self, other: &Intervals) -> Intervals {
        let mut all: Vec<Interval> = self.0.iter().chain(other.0.iter()).copied().collect();
        all.sort_by_key(|i| i.first);
        let mut out: Vec<Interval> = Vec::with_capacity(all.len());
        for i in all {
            match out.last_mut() {
                Some(prev) if i.first <= prev.last + 1 => prev.last = prev.last.max(i.last),
                _ => out.push(i),
            }
        }
        Intervals(out)
    }

    pub fn total(&self) -> usize {
        self.0.iter().map(|i| i.last - i.first + 1).sum()
    }

    pub fn has(&self, ix: usize) -> bool {
        let p = self.0.partition_point(|i| i.last < ix);
        self.0.get(p).is_some_and(|i| i.first <= ix)
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Display for Intervals {
    /// Upstream's format: two adjacent indexes are written `a,b`, longer runs `a-b`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (n, i) in self.0.iter().enumerate() {
            if n > 0 {
                f.write_str(",")?;
            }
            write!(f, "{}", i.first)?;
            if i.last == i.first + 1 {
                write!(f, ",{}", i.last)?;
            } else if i.last > i.first {
                write!(f, "-{}", i.last)?;
            }
        }
        Ok(())
    }
}

/// The pod's completion index, if it has a valid one.
pub fn completion_index(pod: &Pod) -> Option<usize> {
    pod.metadata.annotations.as_ref()?.get(COMPLETION_INDEX)?.parse::<usize>().ok()
}

/// A non-negative int32 annotation, 0 when absent or invalid.
fn count_annotation(pod: &Pod, key: &str) -> i32 {
    pod.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(key))
        .and_then(|v| v.parse::<i64>().ok())
        .filter(|v| (0..=i32::MAX as i64).contains(v))
        .map(|v| v as i32)
        .unwrap_or(0)
}

pub fn index_failure_count(pod: &Pod) -> i32 {
    count_annotation(pod, INDEX_FAILURE_COUNT)
}

pub fn index_ignored_failure_count(pod: &Pod) -> i32 {
    count_annotation(pod, INDEX_IGNORED_FAILURE_COUNT)
}

/// The indexes the pods hold.
pub fn indexes_of<'a>(pods: impl IntoIterator<Item = &'a Pod>) -> BTreeSet<usize> {
    pods.into_iter().filter_map(completion_index).collect()
}

/// `count` indexes below `completions` that are not in `non_pending`, lowest first.
pub fn first_pending(non_pending: &Intervals, count: usize, completions: usize) -> Vec<usize> {
    let mut out = Vec::with_capacity(count);
    let mut candidate = 0;
    for i in &non_pending.0 {
        while candidate < completions && out.len() < count && candidate < i.first {
            out.push(candidate);
            candidate += 1;
        }
        candidate = candidate.max(i.last + 1);
    }
    while candidate < completions && out.len() < count {
        out.push(candidate);
        candidate += 1;
    }
    out
}

/// `<job>-<index>-`, shortened as upstream so the generated name stays within 63.
pub fn generate_name_with_index(job: &str, index: usize) -> String {
    let suffix = format!("-{index}-");
    let prefix = format!("{job}{suffix}");
    if prefix.len() <= MAX_GENERATED_NAME_LENGTH {
        return prefix;
    }
    let mut keep = MAX_GENERATED_NAME_LENGTH - suffix.len();
    while !job.is_char_boundary(keep) {
        keep -= 1;
    }
    format!("{}{suffix}", &job[..keep])
}

/// Adds `JOB_COMPLETION_INDEX` from the index label (upstream with `PodIndexLabel`) to
/// every container that does not set it already.
pub fn add_index_env(containers: &mut [Container]) {
    for c in containers {
        let env = c.env.get_or_insert_with(Vec::new);
        if env.iter().any(|e| e.name == COMPLETION_INDEX_ENV) {
            continue;
        }
        env.push(EnvVar {
            name: COMPLETION_INDEX_ENV.into(),
            value: None,
            value_from: Some(EnvVarSource {
                field_ref: Some(ObjectFieldSelector {
                    api_version: None,
                    field_path: format!("metadata.labels['{COMPLETION_INDEX}']"),
                }),
                ..EnvVarSource::default()
            }),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn intervals_round_trip_in_upstream_format() {
        let i = Intervals::parse("0-3,5,7,8,10-12", 100);
        assert_eq!(i.total(), 10);
        assert_eq!(i.to_string(), "0-3,5,7,8,10-12");
        // Adjacent parts merge; out-of-range and malformed parts are dropped.
        assert_eq!(Intervals::parse("1,2,3,x,5-9", 8).to_string(), "1-3,5-7");
        assert_eq!(Intervals::parse("9,10", 5).to_string(), "");
        let merged = i.with_indexes([4, 6, 9, 13]);
        assert_eq!(merged.to_string(), "0-13");
        assert!(merged.has(0) && merged.has(13) && !merged.has(14));
        assert!(!Intervals::default().has(0));
        assert_eq!(Intervals::default().with_indexes([2, 3]).to_string(), "2,3");
    }

    #[test]
    fn pending_indexes_skip_done_ones() {
        let done = Intervals::parse("0,2-4", 10);
        assert_eq!(first_pending(&done, 3, 10), vec![1, 5, 6]);
        assert_eq!(first_pending(&done, 10, 6), vec![1, 5]);
        assert_eq!(first_pending(&Intervals::default(), 2, 5), vec![0, 1]);
    }

    #[test]
    fn generated_names_fit() {
        assert_eq!(generate_name_with_index("pi", 3), "pi-3-");
        let long = "a".repeat(70);
        let g = generate_name_with_index(&long, 12345);
        assert_eq!(g.len(), MAX_GENERATED_NAME_LENGTH);
        assert!(g.ends_with("-12345-"));
    }
}
