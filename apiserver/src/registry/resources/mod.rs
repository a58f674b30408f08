//! Every built-in resource, one module per API group. A resource is its [`ResourceInfo`]
//! (names, scope, storage key) plus its hooks: defaulting, validation and the fields it
//! can be selected by.
//!
//! [`ResourceInfo`]: super::resource::ResourceInfo

pub mod admissionregistration;
pub mod apiregistration;
pub mod apps;
pub mod autoscaling;
pub mod batch;
pub mod certificates;
pub mod core;
pub mod flowcontrol;
pub mod others;
pub mod storage;

use std::sync::Arc;

use serde_json::Value;

use super::resource::Resource;

/// The items of the array at `v[key]`, when there is one. (Indexing a `Value` mutably
/// inserts a missing key as null, and turns a null into an object: defaulting must not
/// leave such traces in stored objects.)
pub fn items_mut<'a>(v: &'a mut Value, key: &str) -> impl Iterator<Item = &'a mut Value> {
    v.get_mut(key).and_then(Value::as_array_mut).into_iter().flatten()
}

/// `v[k0][k1]...` when present (see [`items_mut`]).
pub fn at_mut<'a>(v: &'a mut Value, path: &[&str]) -> Option<&'a mut Value> {
    path.iter().try_fold(v, |v, k| v.get_mut(*k))
}

/// All resources, in discovery order.
pub fn all() -> Vec<Arc<Resource>> {
    let mut out = core::resources();
    // First of the named groups in discovery, as upstream lists it.
    out.extend(apiregistration::resources());
    out.extend(apps::resources());
    out.extend(batch::resources());
    out.extend(autoscaling::resources());
    out.extend(others::resources());
    out.extend(storage::resources());
    out.extend(certificates::resources());
    out.extend(flowcontrol::resources());
    out.extend(admissionregistration::resources());
    out.push(crate::apiextensions::crd::resource());
    out
}
