//! Admission: the last word on a write, after authentication and authorization and
//! before storage (upstream's `pkg/admission`). Every enabled plugin may mutate the object
//! first (all mutating passes, in order), then every plugin may reject it (all validating
//! passes, in order), as upstream runs `MutationInterface` then `ValidationInterface`.
//!
//! The store calls [`run`] inside its read-modify-write, with the object as it will be
//! stored and the stored one it replaces, so that what is admitted is what is written.
//! Writes the server makes on its own behalf (bootstrap, internal bookkeeping) carry no
//! request scope and are not admitted, as upstream's internal loopback writes are
//! admitted only through the loopback client.
//!
//! - [`options`]: `--enable-admission-plugins`, `--disable-admission-plugins`,
//!   `--admission-control-config-file` and the plugins' own flags.
//! - [`config`]: the `AdmissionConfiguration` file (per-plugin configuration).
//! - [`plugins`]: upstream's ordered plugin list, the default-on set and the factory; one
//!   module per built-in plugin under `plugins/`.
//! - [`lookup`]: how plugins read other objects (the watch cache, then etcd).

pub mod config;
pub mod lookup;
pub mod options;
pub mod plugins;
pub mod webhook;

use std::sync::Arc;

use serde_json::Value;

use crate::authn::User;
use crate::errors::{ApiError, ApiResult};
use crate::registry::Registry;
use crate::registry::resource::ResourceInfo;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Operation {
    Create,
    Update,
    Delete,
    Connect,
}

impl Operation {
    /// As AdmissionReview and webhook rules spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            Operation::Create => "CREATE",
            Operation::Update => "UPDATE",
            Operation::Delete => "DELETE",
            Operation::Connect => "CONNECT",
        }
    }
}

/// One write under admission (upstream's `admission.Attributes`).
pub struct Attributes<'a> {
    pub operation: Operation,
    pub resource: &'a ResourceInfo,
    pub subresource: Option<&'a str>,
    pub namespace: Option<&'a str>,
    pub name: &'a str,
    /// The object to be stored (None for a delete). Mutating plugins edit it in place.
    pub object: Option<Value>,
    /// The stored object an update or delete replaces.
    pub old_object: Option<&'a Value>,
    pub user: &'a User,
    pub dry_run: bool,
}

impl Attributes<'_> {
    /// Whether the write is to `group`/`plural` itself (not a subresource).
    pub fn is(&self, group: &str, plural: &str) -> bool {
        self.subresource.is_none() && self.is_resource(group, plural)
    }

    /// Whether the write is to `group`/`plural` or one of its subresources.
    pub fn is_resource(&self, group: &str, plural: &str) -> bool {
        self.resource.group == group && self.resource.plural == plural
    }

    /// The name errors show (upstream's `extractResourceName`): the request's, else the
    /// object's name or `generateName`.
    pub fn display_name(&self) -> String {
        if !self.name.is_empty() {
            return self.name.to_string();
        }
        let Some(obj) = &self.object else { return "Unknown".into() };
        let meta = &obj["metadata"];
        [&meta["name"], &meta["generateName"]]
            .iter()
            .filter_map(|v| v.as_str())
            .find(|s| !s.is_empty())
            .unwrap_or("Unknown")
            .to_string()
    }
}

/// Upstream's `admission.NewForbidden`: `<resource>[.<group>] "<name>" is forbidden:
/// <reason>` (403), with the name, group and resource in the details.
pub fn forbidden(attrs: &Attributes<'_>, reason: impl std::fmt::Display) -> ApiError {
    let name = attrs.display_name();
    let resource = crate::errors::qualified(attrs.resource.plural, attrs.resource.group);
    let mut err = ApiError::forbidden(format!("{resource} \"{name}\" is forbidden: {reason}"));
    let mut details = serde_json::json!({ "name": name, "kind": attrs.resource.plural });
    if !attrs.resource.group.is_empty() {
        details["group"] = serde_json::json!(attrs.resource.group);
    }
    err.details = Some(details);
    err
}

/// One admission plugin. A plugin implements the passes it takes part in.
#[async_trait::async_trait]
pub trait Plugin: Send + Sync {
    /// Upstream's plugin name (`LimitRanger`, `ResourceQuota`, ...).
    fn name(&self) -> &'static str;

    /// The mutating pass.
    async fn admit(&self, _attrs: &mut Attributes<'_>) -> ApiResult<()> {
        Ok(())
    }

    /// The validating pass.
    async fn validate(&self, _attrs: &Attributes<'_>) -> ApiResult<()> {
        Ok(())
    }
}

/// The enabled plugins, in upstream's order.
#[derive(Default)]
pub struct Chain {
    pub plugins: Vec<Arc<dyn Plugin>>,
}

impl Chain {
    /// Upstream's default-on plugins plus `--enable-admission-plugins`, less
    /// `--disable-admission-plugins`, in upstream's order.
    pub fn new(opts: &options::Options, registry: &Arc<Registry>) -> Result<Self, String> {
        Ok(Self { plugins: plugins::chain(opts, registry)? })
    }

    /// The enabled plugins' names, in order.
    pub fn names(&self) -> Vec<&'static str> {
        self.plugins.iter().map(|p| p.name()).collect()
    }

    /// Runs every mutating pass, then `between` on the mutated object (the registry's
    /// defaulting and validation, which upstream runs between the two passes), then every
    /// validating pass.
    pub async fn run(&self, attrs: &mut Attributes<'_>, between: Between<'_>) -> ApiResult<()> {
        for p in &self.plugins {
            p.admit(attrs).await?;
        }
        if let Some(obj) = attrs.object.as_mut() {
            between(obj)?;
        }
        for p in &self.plugins {
            p.validate(attrs).await?;
        }
        Ok(())
    }
}

/// What runs between the mutating and the validating passes (see [`Chain::run`]).
pub type Between<'a> = &'a (dyn Fn(&mut Value) -> ApiResult<()> + Send + Sync);

/// Admits a write of the current request (see [`crate::context`]); the object as the
/// plugins left it. Without a request scope or a chain, the object passes unchanged.
#[allow(clippy::too_many_arguments)]
pub async fn run(
    resource: &ResourceInfo,
    operation: Operation,
    subresource: Option<&str>,
    namespace: Option<&str>,
    name: &str,
    object: Option<Value>,
    old_object: Option<&Value>,
    dry_run: bool,
) -> ApiResult<Option<Value>> {
    run_checked(resource, operation, subresource, namespace, name, object, old_object, dry_run, &|_| Ok(()))
        .await
}

/// [`run`], with `between` run on the object after the mutating pass. Without a request
/// scope or a chain, `between` still runs: the object passes only if it holds.
#[allow(clippy::too_many_arguments)]
pub async fn run_checked(
    resource: &ResourceInfo,
    operation: Operation,
    subresource: Option<&str>,
    namespace: Option<&str>,
    name: &str,
    mut object: Option<Value>,
    old_object: Option<&Value>,
    dry_run: bool,
    between: Between<'_>,
) -> ApiResult<Option<Value>> {
    let chain = crate::context::current().and_then(|scope| scope.admission.clone().map(|c| (scope, c)));
    let Some((scope, chain)) = chain else {
        if let Some(obj) = object.as_mut() {
            between(obj)?;
        }
        return Ok(object);
    };
    let mut attrs = Attributes {
        operation,
        resource,
        subresource,
        namespace,
        name,
        object,
        old_object,
        user: &scope.user,
        dry_run,
    };
    chain.run(&mut attrs, between).await?;
    Ok(attrs.object)
}
