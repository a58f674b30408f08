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
//! - [`options`]: `--enable-admission-plugins`, `--disable-admission-plugins`.

pub mod options;

use std::sync::Arc;

use serde_json::Value;

use crate::authn::User;
use crate::errors::ApiResult;
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
    pub fn new(opts: &options::Options, _registry: &Arc<Registry>) -> Result<Self, String> {
        if let Some(p) = opts.enable_admission_plugins.iter().find(|p| !p.is_empty()) {
            return Err(format!("--enable-admission-plugins: unknown admission plugin {p:?}"));
        }
        Ok(Self::default())
    }

    /// Runs every mutating pass, then every validating one.
    pub async fn run(&self, attrs: &mut Attributes<'_>) -> ApiResult<()> {
        for p in &self.plugins {
            p.admit(attrs).await?;
        }
        for p in &self.plugins {
            p.validate(attrs).await?;
        }
        Ok(())
    }
}

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
    let Some(scope) = crate::context::current() else { return Ok(object) };
    let Some(chain) = scope.admission.clone() else { return Ok(object) };
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
    chain.run(&mut attrs).await?;
    Ok(attrs.object)
}
