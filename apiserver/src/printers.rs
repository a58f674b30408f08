//! The columns each kind adds to the Name column in `kubectl get` (upstream's
//! `pkg/printers/internalversion`). Kinds not listed here show Name and Age.

use serde_json::Value;

use crate::table::Column;

/// Columns of `kind` after Name.
pub fn columns(_kind: &str) -> Vec<Column> {
    Vec::new()
}

/// Cells of `obj` for [`columns`].
pub fn cells(_kind: &str, _obj: &Value, _now: i64) -> Vec<Value> {
    Vec::new()
}
