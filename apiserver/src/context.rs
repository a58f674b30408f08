//! What travels with one request from the handlers down into the store (upstream keeps
//! the same facts in the request's `context.Context`): the user it acts as and the
//! admission chain its writes pass through. Handlers run a request inside [`scope`];
//! the store reads it with [`current`] where it writes.

use std::future::Future;
use std::sync::Arc;

use crate::admission::Chain;
use crate::authn::User;

pub struct RequestScope {
    pub user: User,
    pub admission: Option<Arc<Chain>>,
    /// For checks made below the handlers (RBAC's escalation check asks whether the user
    /// may `bind` or `escalate`).
    pub authorizer: Option<Arc<crate::authz::Chain>>,
    /// Warnings for the client (admission's `warn` modes, webhooks), sent as `Warning`
    /// headers with the response.
    pub warnings: parking_lot::Mutex<Vec<String>>,
}

impl RequestScope {
    pub fn warn(&self, message: impl Into<String>) {
        self.warnings.lock().push(message.into());
    }
}

tokio::task_local! {
    static SCOPE: Arc<RequestScope>;
}

/// Runs `f` as part of the request described by `scope`.
pub async fn scope<F: Future>(scope: Arc<RequestScope>, f: F) -> F::Output {
    SCOPE.scope(scope, f).await
}

/// The scope of the request this task serves; None for the server's own work.
pub fn current() -> Option<Arc<RequestScope>> {
    SCOPE.try_with(Arc::clone).ok()
}
