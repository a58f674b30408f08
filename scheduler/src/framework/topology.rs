//! Counts per topology domain — (label key, label value) → n — as the affinity and
//! spreading plugins keep them. Nested by key so lookups for a node borrow its labels
//! instead of building owned pairs: these run for thousands of nodes per pod.

use std::collections::HashMap;

use super::labels::Labels;

#[derive(Debug, Clone, Default)]
pub struct TopologyCounts(HashMap<String, HashMap<String, i64>>);

impl TopologyCounts {
    /// Adds `delta` to the domain (creating it at `delta`, which may be 0: a domain that
    /// exists but holds no matching pod still counts for the minimum).
    pub fn add(&mut self, key: &str, value: &str, delta: i64) {
        let values = match self.0.get_mut(key) {
            Some(v) => v,
            None => self.0.entry(key.to_owned()).or_default(),
        };
        match values.get_mut(value) {
            Some(n) => *n += delta,
            None => {
                values.insert(value.to_owned(), delta);
            }
        }
    }

    /// Adds to the domain only if it exists already.
    pub fn add_existing(&mut self, key: &str, value: &str, delta: i64) -> bool {
        match self.0.get_mut(key).and_then(|v| v.get_mut(value)) {
            Some(n) => {
                *n += delta;
                true
            }
            None => false,
        }
    }

    pub fn get(&self, key: &str, value: &str) -> i64 {
        self.0.get(key).and_then(|v| v.get(value)).copied().unwrap_or(0)
    }

    /// The count of the domain `labels` place a node in for `key` (`None` if unlabeled).
    pub fn for_node(&self, key: &str, labels: &Labels) -> Option<i64> {
        labels.get(key).map(|v| self.get(key, v))
    }

    /// Whether any domain holds a positive count.
    pub fn any_positive(&self) -> bool {
        self.0.values().any(|v| v.values().any(|n| *n > 0))
    }

    /// Whether a node with `labels` lies in a domain with a positive count.
    pub fn node_in_positive(&self, labels: &Labels) -> bool {
        self.0.iter().any(|(k, values)| labels.get(k).is_some_and(|v| values.get(v).is_some_and(|n| *n > 0)))
    }

    /// The domains of `key` with their counts.
    pub fn domains(&self, key: &str) -> impl Iterator<Item = (&String, &i64)> {
        self.0.get(key).into_iter().flat_map(|v| v.iter())
    }

    /// Sum over the node's domains (a node scores what its domains scored).
    pub fn node_sum(&self, labels: &Labels) -> i64 {
        self.0.iter().filter_map(|(k, values)| labels.get(k).and_then(|v| values.get(v))).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}
