//! ControllerRevisions: data is required and never changes.

use serde_json::Value;

use crate::errors::FieldError;
use crate::registry::resource::Hooks;
use crate::validation::{self as v, nonnegative};

pub struct ControllerRevisionHooks;

impl Hooks for ControllerRevisionHooks {
    fn validate(&self, obj: &Value) -> Vec<FieldError> {
        let mut errs = Vec::new();
        if obj["data"].is_null() {
            errs.push(FieldError::required("data", "data is mandatory"));
        }
        errs.extend(nonnegative("revision", &obj["revision"]));
        errs
    }

    fn validate_update(&self, new: &Value, old: &Value) -> Vec<FieldError> {
        v::immutable("data", &new["data"], &old["data"])
    }

    fn has_status(&self) -> bool {
        false
    }
}
