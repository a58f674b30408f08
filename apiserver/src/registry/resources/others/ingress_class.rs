//! IngressClasses (upstream's `SetDefaults_IngressClass` and `ValidateIngressClass`):
//! the controller never changes.

use serde_json::{Value, json};

use crate::errors::FieldError;
use crate::registry::resource::Hooks;
use crate::registry::resources::at_mut;
use crate::validation::{self as v, NameRule};

pub struct IngressClassHooks;

impl Hooks for IngressClassHooks {
    fn default(&self, obj: &mut Value) {
        if let Some(params) = at_mut(obj, &["spec", "parameters"])
            && params.is_object()
            && params["scope"].is_null()
        {
            params["scope"] = json!("Cluster");
        }
    }

    fn validate(&self, obj: &Value) -> Vec<FieldError> {
        let mut errs = Vec::new();
        let controller = obj["spec"]["controller"].as_str().unwrap_or_default();
        if controller.is_empty() {
            errs.push(FieldError::required("spec.controller", ""));
        } else {
            if controller.len() > 250 {
                errs.push(FieldError::too_long("spec.controller", 250));
            }
            if !controller.split_once('/').is_some_and(|(d, _)| v::is_dns1123_subdomain(d)) {
                errs.push(FieldError::invalid(
                    "spec.controller",
                    controller,
                    "must be a domain-prefixed path (such as \"acme.io/foo\")",
                ));
            }
        }
        let p = &obj["spec"]["parameters"];
        if p.is_object() {
            if let Some(g) = p["apiGroup"].as_str() {
                errs.extend(v::dns1123_subdomain("spec.parameters.apiGroup", g));
            }
            for f in ["kind", "name"] {
                let val = p[f].as_str().unwrap_or_default();
                let fp = format!("spec.parameters.{f}");
                if val.is_empty() {
                    errs.push(FieldError::required(fp, ""));
                } else {
                    errs.extend(NameRule::PathSegment.check(&fp, val));
                }
            }
            match p["scope"].as_str() {
                None => errs.push(FieldError::required("spec.parameters.scope", "")),
                Some("Namespace") => match p["namespace"].as_str() {
                    None => errs.push(FieldError::required(
                        "spec.parameters.namespace",
                        "`parameters.scope` is set to 'Namespace'",
                    )),
                    Some(ns) => errs.extend(v::dns1123_label("spec.parameters.namespace", ns)),
                },
                Some("Cluster") => {
                    if !p["namespace"].is_null() {
                        errs.push(FieldError::forbidden(
                            "spec.parameters.namespace",
                            "`parameters.scope` is set to 'Cluster'",
                        ));
                    }
                }
                Some(other) => errs.push(FieldError::not_supported(
                    "spec.parameters.scope",
                    other,
                    &["Cluster", "Namespace"],
                )),
            }
        }
        errs
    }

    fn validate_update(&self, new: &Value, old: &Value) -> Vec<FieldError> {
        v::immutable("spec.controller", &new["spec"]["controller"], &old["spec"]["controller"])
    }

    fn has_status(&self) -> bool {
        false
    }

    fn tracks_generation(&self) -> bool {
        true
    }
}
