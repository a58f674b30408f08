//! CRD validation rules (`x-kubernetes-validations`): CEL expressions evaluated with `self`
//! bound to the value at their schema node (and `oldSelf` to the stored one, for
//! transition rules), as upstream's `apiextensions-apiserver/pkg/apiserver/schema/cel`.
//! Rules compile once, when the CRD is served; a rule that fails gives its `message` (or
//! its `messageExpression`'s result, or `failed rule: <rule>`) at its node's path, or at
//! `fieldPath` below it.
//!
//! Evaluation uses the `cel-interpreter` crate with its standard functions (`size`, `has`,
//! `matches`, `startsWith`, `all`, `exists`, `map`, `filter`, ...). Not here, unlike
//! upstream: Kubernetes' extension libraries (`isSorted`, `quantity`, `url`, `ip`, ...),
//! and the estimated and runtime cost limits.

use std::collections::BTreeMap;
use std::sync::Arc;

use cel_interpreter::{Context, Program};
use serde_json::Value;

use crate::errors::{FieldError, FieldErrorKind};

/// One compiled rule.
struct Rule {
    source: String,
    program: Program,
    message: Option<String>,
    message_expression: Option<Program>,
    reason: Option<String>,
    field_path: Option<String>,
    /// Whether the rule reads `oldSelf` (a transition rule: only checked on update, when
    /// there is an old value).
    transition: bool,
}

/// The rules of a schema, along the paths of the schema that hold any.
#[derive(Default)]
pub struct Rules {
    here: Vec<Rule>,
    properties: BTreeMap<String, Rules>,
    items: Option<Box<Rules>>,
    additional: Option<Box<Rules>>,
}

impl Rules {
    /// Compiles the rules of `schema`; the errors name each rule that does not compile, at
    /// `path` (`spec.versions[0].schema.openAPIV3Schema`).
    pub fn compile(schema: &Value, path: &str) -> (Arc<Rules>, Vec<FieldError>) {
        let mut errs = Vec::new();
        let rules = Self::compile_at(schema, path, &mut errs);
        (Arc::new(rules), errs)
    }

    fn compile_at(schema: &Value, path: &str, errs: &mut Vec<FieldError>) -> Rules {
        let mut out = Rules::default();
        for (i, r) in schema["x-kubernetes-validations"].as_array().into_iter().flatten().enumerate() {
            let rule_path = format!("{path}.x-kubernetes-validations[{i}]");
            let source = r["rule"].as_str().unwrap_or_default().to_string();
            if source.is_empty() {
                errs.push(FieldError::required(format!("{rule_path}.rule"), ""));
                continue;
            }
            let program = match compile(&source) {
                Ok(p) => p,
                Err(e) => {
                    errs.push(FieldError::invalid(
                        format!("{rule_path}.rule"),
                        &source,
                        format!("compilation failed: {e}"),
                    ));
                    continue;
                }
            };
            let message_expression = match r["messageExpression"].as_str().filter(|m| !m.is_empty()) {
                None => None,
                Some(m) => match compile(m) {
                    Ok(p) => Some(p),
                    Err(e) => {
                        errs.push(FieldError::invalid(
                            format!("{rule_path}.messageExpression"),
                            m,
                            format!("messageExpression compilation failed: {e}"),
                        ));
                        None
                    }
                },
            };
            if let Some(reason) = r["reason"].as_str()
                && !matches!(
                    reason,
                    "FieldValueInvalid"
                        | "FieldValueForbidden"
                        | "FieldValueRequired"
                        | "FieldValueDuplicate"
                )
            {
                errs.push(FieldError::not_supported(
                    format!("{rule_path}.reason"),
                    reason,
                    &[
                        "FieldValueDuplicate",
                        "FieldValueForbidden",
                        "FieldValueInvalid",
                        "FieldValueRequired",
                    ],
                ));
            }
            let transition = program.references().has_variable("oldSelf");
            out.here.push(Rule {
                source,
                program,
                message: r["message"].as_str().filter(|m| !m.is_empty()).map(str::to_string),
                message_expression,
                reason: r["reason"].as_str().map(str::to_string),
                field_path: r["fieldPath"].as_str().filter(|p| !p.is_empty()).map(str::to_string),
                transition,
            });
        }
        for (k, s) in schema["properties"].as_object().into_iter().flatten() {
            let child = Self::compile_at(s, &format!("{path}.properties[{k}]"), errs);
            if !child.is_empty() {
                out.properties.insert(k.clone(), child);
            }
        }
        if let Some(items) = schema.get("items").filter(|i| i.is_object()) {
            let child = Self::compile_at(items, &format!("{path}.items"), errs);
            if !child.is_empty() {
                out.items = Some(Box::new(child));
            }
        }
        if let Some(a) = schema.get("additionalProperties").filter(|a| a.is_object()) {
            let child = Self::compile_at(a, &format!("{path}.additionalProperties"), errs);
            if !child.is_empty() {
                out.additional = Some(Box::new(child));
            }
        }
        out
    }

    pub fn is_empty(&self) -> bool {
        self.here.is_empty()
            && self.properties.is_empty()
            && self.items.is_none()
            && self.additional.is_none()
    }

    /// Checks `new` (the object without apiVersion, kind and metadata). Without `old`, the
    /// rules that do not read `oldSelf`; with `old` (an update), the transition rules, where
    /// an old value exists. (The store calls both on an update.)
    pub fn validate(&self, new: &Value, old: Option<&Value>) -> Vec<FieldError> {
        let mut errs = Vec::new();
        self.validate_at(new, old, "", &mut errs);
        errs
    }

    fn validate_at(&self, new: &Value, old: Option<&Value>, path: &str, errs: &mut Vec<FieldError>) {
        for rule in &self.here {
            if rule.transition != old.is_some() {
                continue;
            }
            if let Some(e) = rule.check(new, old, path) {
                errs.push(e);
            }
        }
        match new {
            Value::Object(map) => {
                for (k, v) in map {
                    let child = self.properties.get(k).or(self.additional.as_deref());
                    if let Some(rules) = child {
                        let p = if path.is_empty() { k.clone() } else { format!("{path}.{k}") };
                        match old {
                            // An old object without this field: no transition to check.
                            Some(o) => match o.get(k) {
                                Some(ov) => rules.validate_at(v, Some(ov), &p, errs),
                                None => {}
                            },
                            None => rules.validate_at(v, None, &p, errs),
                        }
                    }
                }
            }
            Value::Array(items) => {
                if let Some(rules) = &self.items {
                    for (i, v) in items.iter().enumerate() {
                        // Upstream correlates list items with old ones only for map lists;
                        // here by position, which is the same for unchanged lists.
                        let p = format!("{path}[{i}]");
                        match old {
                            Some(o) => {
                                if let Some(ov) = o.get(i) {
                                    rules.validate_at(v, Some(ov), &p, errs);
                                }
                            }
                            None => rules.validate_at(v, None, &p, errs),
                        }
                    }
                }
            }
            _ => {}
        }
    }
}

impl Rule {
    fn check(&self, new: &Value, old: Option<&Value>, path: &str) -> Option<FieldError> {
        let mut ctx = Context::default();
        if let Err(e) = ctx.add_variable("self", new) {
            return Some(self.error(path, new, &format!("binding self: {e}")));
        }
        if let Some(old) = old
            && let Err(e) = ctx.add_variable("oldSelf", old)
        {
            return Some(self.error(path, new, &format!("binding oldSelf: {e}")));
        }
        match execute(&self.program, &ctx) {
            Ok(cel_interpreter::Value::Bool(true)) => None,
            Ok(cel_interpreter::Value::Bool(false)) => {
                let message = self
                    .message_expression
                    .as_ref()
                    .and_then(|m| match execute(m, &ctx) {
                        Ok(cel_interpreter::Value::String(s)) if !s.trim().is_empty() => Some(s.to_string()),
                        _ => None,
                    })
                    .or_else(|| self.message.clone())
                    .unwrap_or_else(|| format!("failed rule: {}", self.source));
                Some(self.error(path, new, &message))
            }
            Ok(other) => Some(self.error(
                path,
                new,
                &format!("{}: rule did not evaluate to a bool: {other:?}", self.describe()),
            )),
            Err(e) => Some(self.error(path, new, &format!("{}: {e}", self.describe()))),
        }
    }

    fn describe(&self) -> String {
        self.message.clone().unwrap_or_else(|| format!("failed rule: {}", self.source))
    }

    /// The error at the node (or at `fieldPath` below it) with upstream's reason.
    fn error(&self, path: &str, value: &Value, message: &str) -> FieldError {
        let field = match &self.field_path {
            Some(fp) => format!("{path}{fp}").trim_start_matches('.').to_string(),
            None => path.to_string(),
        };
        let ty = match value {
            Value::Object(_) => "object",
            Value::Array(_) => "array",
            Value::String(_) => "string",
            Value::Number(n) if n.is_f64() => "number",
            Value::Number(_) => "integer",
            Value::Bool(_) => "boolean",
            Value::Null => "null",
        };
        let mut e = match self.reason.as_deref() {
            Some("FieldValueForbidden") => FieldError::forbidden(field, message),
            Some("FieldValueRequired") => FieldError::required(field, message),
            Some("FieldValueDuplicate") => {
                let mut d = FieldError::duplicate(field, ty);
                d.detail = message.to_string();
                d
            }
            _ => FieldError::invalid(field, ty, message),
        };
        if e.kind == FieldErrorKind::Invalid && e.field.is_empty() {
            e.field = "<root>".into();
        }
        e
    }
}

fn first_line(s: &str) -> &str {
    s.lines().next().unwrap_or_default()
}

/// Compiles a rule. The parser panics on some malformed input (its generated ANTLR code
/// reaches `unreachable!`): that is a compile error too, never a failed request.
fn compile(source: &str) -> Result<Program, String> {
    match std::panic::catch_unwind(|| Program::compile(source)) {
        Ok(Ok(p)) => Ok(p),
        Ok(Err(e)) => Err(first_line(&e.to_string()).to_string()),
        Err(_) => Err("syntax error".to_string()),
    }
}

/// Runs a program; a panic in the interpreter is an evaluation error.
fn execute(program: &Program, ctx: &Context) -> Result<cel_interpreter::Value, String> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| program.execute(ctx))) {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err("internal error evaluating the rule".to_string()),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn schema() -> Value {
        json!({"type": "object", "properties": {"spec": {
            "type": "object",
            "x-kubernetes-validations": [
                {"rule": "self.replicas <= self.maxReplicas", "message": "replicas must not exceed maxReplicas"},
                {"rule": "self.image == oldSelf.image", "message": "image is immutable"},
            ],
            "properties": {
                "replicas": {"type": "integer"}, "maxReplicas": {"type": "integer"}, "image": {"type": "string"},
                "ports": {"type": "array", "items": {"type": "integer",
                    "x-kubernetes-validations": [{"rule": "self > 0"}]}},
            },
        }}})
    }

    #[test]
    fn rules_report_their_messages_at_their_paths() {
        let (rules, errs) = Rules::compile(&schema(), "schema");
        assert!(errs.is_empty(), "{errs:?}");
        let ok = json!({"spec": {"replicas": 2, "maxReplicas": 3, "image": "a", "ports": [1]}});
        assert!(rules.validate(&ok, None).is_empty());
        let bad = json!({"spec": {"replicas": 4, "maxReplicas": 3, "image": "b", "ports": [0]}});
        let texts: Vec<String> = rules.validate(&bad, None).iter().map(FieldError::to_text).collect();
        assert_eq!(
            texts,
            [
                "spec: Invalid value: \"object\": replicas must not exceed maxReplicas",
                "spec.ports[0]: Invalid value: \"integer\": failed rule: self > 0",
            ]
        );
        // Transition rules run on updates only.
        let texts: Vec<String> = rules.validate(&bad, Some(&ok)).iter().map(FieldError::to_text).collect();
        assert_eq!(texts, ["spec: Invalid value: \"object\": image is immutable"]);
    }

    #[test]
    fn a_rule_that_does_not_compile_is_refused() {
        let s = json!({"type": "object", "x-kubernetes-validations": [{"rule": "self.a <"}]});
        let (_, errs) = Rules::compile(&s, "schema");
        assert_eq!(errs.len(), 1);
        assert!(
            errs[0].to_text().starts_with("schema.x-kubernetes-validations[0].rule: Invalid value"),
            "{errs:?}"
        );
    }
}
