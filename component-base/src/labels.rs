//! Label and field matching used by several plugins: `metav1.LabelSelector`,
//! `v1.NodeSelector` terms (nodeSelector, node affinity, PV node affinity) and taint
//! tolerations, parsed once per pod so the per-node checks are plain comparisons.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{NodeSelectorRequirement, NodeSelectorTerm, Taint, Toleration};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

pub type Labels = BTreeMap<String, String>;

#[derive(Debug, Clone, PartialEq)]
enum Op {
    In,
    NotIn,
    Exists,
    DoesNotExist,
    Gt,
    Lt,
}

#[derive(Debug, Clone)]
struct Requirement {
    key: String,
    op: Op,
    values: Vec<String>,
}

impl Requirement {
    fn matches(&self, value: Option<&String>) -> bool {
        match (&self.op, value) {
            (Op::In, Some(v)) => self.values.contains(v),
            (Op::In, None) => false,
            (Op::NotIn, Some(v)) => !self.values.contains(v),
            (Op::NotIn, None) => true,
            (Op::Exists, v) => v.is_some(),
            (Op::DoesNotExist, v) => v.is_none(),
            (Op::Gt | Op::Lt, None) => false,
            (op, Some(v)) => {
                let (Ok(have), Some(Ok(want))) =
                    (v.parse::<i64>(), self.values.first().map(|w| w.parse::<i64>()))
                else {
                    return false;
                };
                if *op == Op::Gt { have > want } else { have < want }
            }
        }
    }
}

fn op_of(s: &str) -> Option<Op> {
    Some(match s {
        "In" => Op::In,
        "NotIn" => Op::NotIn,
        "Exists" => Op::Exists,
        "DoesNotExist" => Op::DoesNotExist,
        "Gt" => Op::Gt,
        "Lt" => Op::Lt,
        _ => return None,
    })
}

/// A parsed `metav1.LabelSelector`. `Selector::nothing()` (a nil selector in an affinity
/// term) matches no object; an empty selector matches every object.
#[derive(Debug, Clone)]
pub struct Selector {
    requirements: Vec<Requirement>,
    nothing: bool,
}

impl Selector {
    pub fn nothing() -> Self {
        Self { requirements: Vec::new(), nothing: true }
    }

    pub fn everything() -> Self {
        Self { requirements: Vec::new(), nothing: false }
    }

    /// Parses `sel`; `None` gives [`Selector::nothing`], and so does an operator the API
    /// would not have admitted (the API server validates them, so this is defensive).
    pub fn from_label_selector(sel: Option<&LabelSelector>) -> Self {
        let Some(sel) = sel else { return Self::nothing() };
        let mut requirements = Vec::new();
        for (k, v) in sel.match_labels.iter().flatten() {
            requirements.push(Requirement { key: k.clone(), op: Op::In, values: vec![v.clone()] });
        }
        for e in sel.match_expressions.iter().flatten() {
            let Some(op) = op_of(&e.operator).filter(|op| !matches!(op, Op::Gt | Op::Lt)) else {
                return Self::nothing();
            };
            requirements.push(Requirement {
                key: e.key.clone(),
                op,
                values: e.values.clone().unwrap_or_default(),
            });
        }
        Self { requirements, nothing: false }
    }

    /// Adds `key in (value)` (or `key` absent when `value` is `None`): how matchLabelKeys
    /// narrow a topology spread selector to the pod's own revision.
    pub fn require(&mut self, key: &str, value: Option<&String>) {
        let requirement = match value {
            Some(v) => Requirement { key: key.to_owned(), op: Op::In, values: vec![v.clone()] },
            None => Requirement { key: key.to_owned(), op: Op::DoesNotExist, values: Vec::new() },
        };
        self.requirements.push(requirement);
    }

    /// Narrows this selector by every requirement of `other` (AND).
    pub fn and(&mut self, other: &Selector) {
        self.nothing |= other.nothing;
        self.requirements.extend(other.requirements.iter().cloned());
    }

    pub fn matches(&self, labels: &Labels) -> bool {
        !self.nothing && self.requirements.iter().all(|r| r.matches(labels.get(&r.key)))
    }

    pub fn is_empty(&self) -> bool {
        !self.nothing && self.requirements.is_empty()
    }
}

/// One parsed `NodeSelectorTerm`: its label expressions and `metadata.name` field
/// expressions, ANDed. A term with neither matches nothing, as upstream.
#[derive(Debug, Clone)]
pub struct NodeSelectorTermMatcher {
    labels: Vec<Requirement>,
    fields: Vec<Requirement>,
    valid: bool,
}

impl NodeSelectorTermMatcher {
    pub fn new(term: &NodeSelectorTerm) -> Self {
        let mut valid = true;
        let mut convert = |reqs: &Option<Vec<NodeSelectorRequirement>>| -> Vec<Requirement> {
            reqs.iter()
                .flatten()
                .filter_map(|r| match op_of(&r.operator) {
                    Some(op) => Some(Requirement {
                        key: r.key.clone(),
                        op,
                        values: r.values.clone().unwrap_or_default(),
                    }),
                    None => {
                        valid = false;
                        None
                    }
                })
                .collect()
        };
        let labels = convert(&term.match_expressions);
        let fields = convert(&term.match_fields);
        let valid = valid && (!labels.is_empty() || !fields.is_empty());
        Self { labels, fields, valid }
    }

    pub fn matches(&self, node_name: &str, labels: &Labels) -> bool {
        let name = node_name.to_owned();
        self.valid
            && self.labels.iter().all(|r| r.matches(labels.get(&r.key)))
            && self.fields.iter().all(|r| r.key == "metadata.name" && r.matches(Some(&name)))
    }
}

/// ORed node selector terms (`requiredDuringSchedulingIgnoredDuringExecution`, a PV's
/// node affinity).
#[derive(Debug, Clone, Default)]
pub struct NodeSelectorMatcher {
    terms: Vec<NodeSelectorTermMatcher>,
}

impl NodeSelectorMatcher {
    pub fn new(terms: &[NodeSelectorTerm]) -> Self {
        Self { terms: terms.iter().map(NodeSelectorTermMatcher::new).collect() }
    }

    pub fn matches(&self, node_name: &str, labels: &Labels) -> bool {
        self.terms.iter().any(|t| t.matches(node_name, labels))
    }
}

/// Whether `toleration` tolerates `taint` (upstream's `Toleration.ToleratesTaint`): an
/// empty effect matches every effect, an empty key with `Exists` matches every taint.
pub fn tolerates(toleration: &Toleration, taint: &Taint) -> bool {
    if let Some(effect) = toleration.effect.as_deref().filter(|e| !e.is_empty())
        && effect != taint.effect
    {
        return false;
    }
    let key = toleration.key.as_deref().unwrap_or("");
    if !key.is_empty() && key != taint.key {
        return false;
    }
    match toleration.operator.as_deref().unwrap_or("Equal") {
        "Exists" => true,
        "" | "Equal" => toleration.value.as_deref().unwrap_or("") == taint.value.as_deref().unwrap_or(""),
        _ => false,
    }
}

/// The first taint with one of `effects` that no toleration tolerates.
pub fn first_untolerated<'a>(
    taints: &'a [Taint],
    tolerations: &[Toleration],
    effects: &[&str],
) -> Option<&'a Taint> {
    taints
        .iter()
        .filter(|t| effects.contains(&t.effect.as_str()))
        .find(|t| !tolerations.iter().any(|tol| tolerates(tol, t)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> Labels {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn label_selector_semantics() {
        let sel: LabelSelector = serde_json::from_value(serde_json::json!({
            "matchLabels": {"app": "web"},
            "matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["db"]}]
        }))
        .unwrap();
        let s = Selector::from_label_selector(Some(&sel));
        assert!(s.matches(&labels(&[("app", "web")])));
        assert!(!s.matches(&labels(&[("app", "web"), ("tier", "db")])));
        assert!(!Selector::from_label_selector(None).matches(&labels(&[])));
        assert!(Selector::from_label_selector(Some(&LabelSelector::default())).matches(&labels(&[])));
    }

    #[test]
    fn node_selector_terms() {
        let term: NodeSelectorTerm = serde_json::from_value(serde_json::json!({
            "matchExpressions": [{"key": "cpus", "operator": "Gt", "values": ["4"]}],
            "matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]
        }))
        .unwrap();
        let m = NodeSelectorMatcher::new(&[term]);
        assert!(m.matches("n1", &labels(&[("cpus", "8")])));
        assert!(!m.matches("n2", &labels(&[("cpus", "8")])));
        assert!(!m.matches("n1", &labels(&[("cpus", "2")])));
        assert!(!NodeSelectorMatcher::new(&[NodeSelectorTerm::default()]).matches("n1", &labels(&[])));
    }

    #[test]
    fn tolerations() {
        let taint = Taint {
            key: "k".into(),
            value: Some("v".into()),
            effect: "NoSchedule".into(),
            ..Default::default()
        };
        let exists = Toleration { operator: Some("Exists".into()), ..Default::default() };
        let wrong = Toleration { key: Some("k".into()), value: Some("x".into()), ..Default::default() };
        assert!(tolerates(&exists, &taint));
        assert!(!tolerates(&wrong, &taint));
        assert!(first_untolerated(std::slice::from_ref(&taint), &[wrong], &["NoSchedule"]).is_some());
    }
}
