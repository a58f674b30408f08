//! The string form of a label selector (`app=web,tier in (a,b),!canary`), as a Scale's
//! `status.selector` carries it, parsed into a `metav1.LabelSelector` so the shared
//! matcher in component-base can use it (upstream's `labels.Parse`).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};

/// Why a selector string does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unable to parse requirement: {0}")]
pub struct ParseError(pub String);

/// Splits at commas outside parentheses: `a in (x,y),b` is two requirements.
fn requirements(s: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let (mut depth, mut start) = (0i32, 0usize);
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&s[start..]);
    out
}

fn set_values(rest: &str, whole: &str) -> Result<Vec<String>, ParseError> {
    let inner = rest
        .trim()
        .strip_prefix('(')
        .and_then(|r| r.strip_suffix(')'))
        .ok_or_else(|| ParseError(format!("{whole:?}: expected a parenthesised set of values")))?;
    Ok(inner.split(',').map(|v| v.trim().to_owned()).filter(|v| !v.is_empty()).collect())
}

fn expr(key: &str, operator: &str, values: Option<Vec<String>>) -> LabelSelectorRequirement {
    LabelSelectorRequirement { key: key.to_owned(), operator: operator.to_owned(), values }
}

fn valid_key(key: &str) -> bool {
    !key.is_empty() && !key.contains(|c: char| c.is_whitespace() || "=!(),".contains(c))
}

/// Parses a selector string. The empty string selects everything, as upstream.
pub fn parse(s: &str) -> Result<LabelSelector, ParseError> {
    let mut match_labels = BTreeMap::new();
    let mut exprs = Vec::new();
    if s.trim().is_empty() {
        return Ok(LabelSelector::default());
    }
    for req in requirements(s) {
        let r = req.trim();
        let bad = || ParseError(format!("{r:?}"));
        if let Some(key) = r.strip_prefix('!') {
            let key = key.trim();
            if !valid_key(key) {
                return Err(bad());
            }
            exprs.push(expr(key, "DoesNotExist", None));
        } else if let Some((key, value)) = r.split_once("!=") {
            let key = key.trim();
            if !valid_key(key) {
                return Err(bad());
            }
            exprs.push(expr(key, "NotIn", Some(vec![value.trim().to_owned()])));
        } else if let Some((key, value)) = r.split_once("==").or_else(|| r.split_once('=')) {
            let key = key.trim();
            if !valid_key(key) {
                return Err(bad());
            }
            match_labels.insert(key.to_owned(), value.trim().to_owned());
        } else if let Some((key, rest)) = r.split_once(" notin ") {
            exprs.push(expr(key.trim(), "NotIn", Some(set_values(rest, r)?)));
        } else if let Some((key, rest)) = r.split_once(" in ") {
            exprs.push(expr(key.trim(), "In", Some(set_values(rest, r)?)));
        } else if valid_key(r) {
            exprs.push(expr(r, "Exists", None));
        } else {
            return Err(bad());
        }
    }
    Ok(LabelSelector {
        match_labels: (!match_labels.is_empty()).then_some(match_labels),
        match_expressions: (!exprs.is_empty()).then_some(exprs),
    })
}

/// A `metav1.LabelSelector` in string form, requirements sorted by key as upstream's
/// `labels.Selector.String()` (the form list queries take). `None` is the empty string.
pub fn to_string(sel: Option<&LabelSelector>) -> String {
    let Some(sel) = sel else { return String::new() };
    let mut reqs: Vec<(String, String)> = Vec::new();
    for (k, v) in sel.match_labels.iter().flatten() {
        reqs.push((k.clone(), format!("{k}={v}")));
    }
    for e in sel.match_expressions.iter().flatten() {
        let mut values = e.values.clone().unwrap_or_default();
        values.sort();
        let text = match e.operator.as_str() {
            "In" => format!("{} in ({})", e.key, values.join(",")),
            "NotIn" => format!("{} notin ({})", e.key, values.join(",")),
            "Exists" => e.key.clone(),
            "DoesNotExist" => format!("!{}", e.key),
            other => format!("{} {other} ({})", e.key, values.join(",")),
        };
        reqs.push((e.key.clone(), text));
    }
    reqs.sort();
    reqs.into_iter().map(|(_, t)| t).collect::<Vec<_>>().join(",")
}

#[cfg(test)]
mod tests {
    use super::*;
    use component_base::labels::{Labels, Selector};

    fn labels(pairs: &[(&str, &str)]) -> Labels {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn parses_every_operator() {
        let sel = Selector::from_label_selector(Some(
            &parse("app=web, tier in (a, b),env!=prod,!canary,zone,x==y").unwrap(),
        ));
        assert!(sel.matches(&labels(&[("app", "web"), ("tier", "b"), ("zone", "z"), ("x", "y")])));
        assert!(!sel.matches(&labels(&[("app", "web"), ("tier", "c"), ("zone", "z"), ("x", "y")])));
        assert!(!sel.matches(&labels(&[
            ("app", "web"),
            ("tier", "a"),
            ("zone", "z"),
            ("x", "y"),
            ("canary", "")
        ])));
        assert!(!sel.matches(&labels(&[
            ("app", "web"),
            ("tier", "a"),
            ("zone", "z"),
            ("x", "y"),
            ("env", "prod")
        ])));
        let notin = Selector::from_label_selector(Some(&parse("a notin (x)").unwrap()));
        assert!(notin.matches(&labels(&[])) && !notin.matches(&labels(&[("a", "x")])));
        assert!(Selector::from_label_selector(Some(&parse("").unwrap())).matches(&labels(&[("q", "r")])));
        assert!(parse("a in x").is_err());
        assert!(parse("(").is_err());
    }

    #[test]
    fn round_trips_through_the_string_form() {
        let s = "app=web,canary,!legacy,tier in (a,b)";
        assert_eq!(to_string(Some(&parse(s).unwrap())), s);
        assert_eq!(to_string(None), "");
    }
}
