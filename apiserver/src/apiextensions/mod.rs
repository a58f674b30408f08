//! `apiextensions.k8s.io`: CustomResourceDefinitions and the custom resources they define
//! (upstream's apiextensions-apiserver, which upstream runs as the delegate behind the
//! built-in API server in the same process, as here).
//!
//! - [`crd`]: the CustomResourceDefinition resource (defaults, validation).
//! - [`controller`]: naming, establishing, finalizing, and registering a store per served
//!   version in the [`crate::registry::Registry`].
//! - [`custom_resource`]: one served version as a resource of the generic store.
//! - [`schema`]: structural schemas: pruning, defaulting, validation.
//!
//! - [`cel`]: `x-kubernetes-validations` rules.
//! - [`conversion`]: the `Webhook` conversion strategy.
//!
//! Not yet here (see the issue notes): CEL cost limits and Kubernetes' CEL libraries, encryption at rest of custom resources.

pub mod cel;
pub mod controller;
pub mod conversion;
pub mod crd;
pub mod custom_resource;
pub mod schema;

pub const GROUP: &str = "apiextensions.k8s.io";

/// The finalizer that holds a CRD until its custom resources are gone.
pub const CLEANUP_FINALIZER: &str = "customresourcecleanup.apiextensions.k8s.io";
