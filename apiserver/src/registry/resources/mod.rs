//! Every built-in resource, one module per API group. A resource is its [`ResourceInfo`]
//! (names, scope, storage key) plus its hooks: defaulting, validation and the fields it
//! can be selected by.
//!
//! [`ResourceInfo`]: super::resource::ResourceInfo

pub mod apps;
pub mod batch;
pub mod core;
pub mod others;

use std::sync::Arc;

use super::resource::Resource;

/// All resources, in discovery order.
pub fn all() -> Vec<Arc<Resource>> {
    let mut out = core::resources();
    out.extend(apps::resources());
    out.extend(batch::resources());
    out.extend(others::resources());
    out
}
