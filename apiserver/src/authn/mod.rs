//! Authentication: who sent a request (upstream's `pkg/authentication`). Each enabled
//! method is asked in turn; the first that recognises the credentials decides, and a
//! request that presents bad credentials is refused with 401 whatever the others say.
//!
//! - [`token_file`]: static bearer tokens (`--token-auth-file`).
//! - [`options`]: the authentication flags.

pub mod options;
pub mod token_file;

use std::collections::BTreeMap;

pub use token_file::Authenticator;

/// The identity a request acts as (upstream's `user.Info`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct User {
    pub name: String,
    pub uid: String,
    pub groups: Vec<String>,
    /// Extra attributes (e.g. `authentication.kubernetes.io/pod-name` of a bound token).
    pub extra: BTreeMap<String, Vec<String>>,
}

/// Well-known users and groups (upstream's `user` package constants).
pub mod names {
    pub const ANONYMOUS: &str = "system:anonymous";
    pub const ALL_AUTHENTICATED: &str = "system:authenticated";
    pub const ALL_UNAUTHENTICATED: &str = "system:unauthenticated";
    pub const SYSTEM_PRIVILEGED_GROUP: &str = "system:masters";
    pub const NODES_GROUP: &str = "system:nodes";
    pub const NODE_USER_PREFIX: &str = "system:node:";
    pub const SERVICE_ACCOUNT_PREFIX: &str = "system:serviceaccount:";
    pub const SERVICE_ACCOUNTS_GROUP: &str = "system:serviceaccounts";
    pub const APISERVER_USER: &str = "system:apiserver";
}
