//! The Auth service (etcd's `v3rpc/auth.go` and `v3_server.go`): every request goes
//! through raft, so members agree on users, roles and tokens; who may do what is checked
//! when the entry is applied ([`crate::apply`]). Passwords are bcrypt-hashed here, by the
//! receiving member, before anything is proposed.

use std::sync::Arc;

use proto::etcdserverpb::auth_server::Auth;
use proto::etcdserverpb::*;
use tonic::{Request, Response, Status};

use super::{EtcdServer, expect_response};
use crate::auth::AuthResult;
use crate::auth::token::simple_token_prefix;
use crate::error::EtcdError;

/// How often Authenticate checks again when users or roles keep changing under it.
const MAX_AUTHENTICATE_ATTEMPTS: usize = 5;

pub struct AuthService {
    pub server: Arc<EtcdServer>,
}

impl AuthService {
    /// Proposes an auth request as the caller and returns what the applier answered,
    /// with the response header.
    async fn call<T>(
        &self,
        request: &Request<T>,
        req: InternalRaftRequest,
    ) -> Result<(Option<ResponseHeader>, AuthResult), Status> {
        let caller = self.server.caller(request)?;
        let result = self.server.propose_as(req, &caller).await;
        let r = expect_response!(result, Auth)?;
        let mut header = None;
        self.server.fill_header(&mut header);
        Ok((header, r))
    }

    /// bcrypt is slow on purpose: hash off the async threads.
    async fn hash(&self, password: String) -> Result<String, Status> {
        let server = self.server.clone();
        tokio::task::spawn_blocking(move || server.auth.hash_password(&password))
            .await
            .map_err(|e| Status::internal(e.to_string()))?
            .map_err(Status::from)
    }
}

fn names(r: AuthResult) -> Vec<String> {
    match r {
        AuthResult::Names(n) => n,
        _ => Vec::new(),
    }
}

#[tonic::async_trait]
impl Auth for AuthService {
    async fn auth_enable(
        &self,
        request: Request<AuthEnableRequest>,
    ) -> Result<Response<AuthEnableResponse>, Status> {
        let req = InternalRaftRequest { auth_enable: Some(AuthEnableRequest {}), ..Default::default() };
        let (header, _) = self.call(&request, req).await?;
        Ok(Response::new(AuthEnableResponse { header }))
    }

    async fn auth_disable(
        &self,
        request: Request<AuthDisableRequest>,
    ) -> Result<Response<AuthDisableResponse>, Status> {
        let req = InternalRaftRequest { auth_disable: Some(AuthDisableRequest {}), ..Default::default() };
        let (header, _) = self.call(&request, req).await?;
        Ok(Response::new(AuthDisableResponse { header }))
    }

    async fn auth_status(
        &self,
        request: Request<AuthStatusRequest>,
    ) -> Result<Response<AuthStatusResponse>, Status> {
        let req = InternalRaftRequest { auth_status: Some(AuthStatusRequest {}), ..Default::default() };
        let (header, r) = self.call(&request, req).await?;
        let (enabled, auth_revision) = match r {
            AuthResult::Status { enabled, revision } => (enabled, revision),
            _ => (false, 0),
        };
        Ok(Response::new(AuthStatusResponse { header, enabled, auth_revision }))
    }

    /// Checks the password against the state after a ReadIndex, then has every member
    /// record the token; if users or roles changed meanwhile, checks again (etcd's loop
    /// until the checked revision is still current).
    async fn authenticate(
        &self,
        request: Request<AuthenticateRequest>,
    ) -> Result<Response<AuthenticateResponse>, Status> {
        let AuthenticateRequest { name, password } = request.into_inner();
        for _ in 0..MAX_AUTHENTICATE_ATTEMPTS {
            self.server.linearizable_read().await?;
            if !self.server.auth.is_enabled() {
                return Err(EtcdError::AuthNotEnabled.into());
            }
            let server = self.server.clone();
            let (checked_name, checked_password) = (name.clone(), password.clone());
            let checked = tokio::task::spawn_blocking(move || {
                server.auth.check_password(&checked_name, &checked_password)
            })
            .await
            .map_err(|e| Status::internal(e.to_string()))??;
            let simple_token =
                if self.server.auth.tokens.is_simple() { simple_token_prefix() } else { String::new() };
            // The password stays on this member: the entry names the user only.
            let authenticate =
                InternalAuthenticateRequest { name: name.clone(), password: String::new(), simple_token };
            let req = InternalRaftRequest { authenticate: Some(authenticate), ..Default::default() };
            let result = self.server.propose(req).await;
            let token = match expect_response!(result, Auth)? {
                AuthResult::Token(t) => t,
                other => return Err(Status::internal(format!("unexpected authenticate result {other:?}"))),
            };
            if self.server.auth.revision() != checked {
                // The password or the user may have changed after the check: a simple
                // token of that moment must not outlive it.
                self.server.auth.tokens.forget(&token);
                continue;
            }
            let mut header = None;
            self.server.fill_header(&mut header);
            return Ok(Response::new(AuthenticateResponse { header, token }));
        }
        Err(EtcdError::AuthOldRevision.into())
    }

    async fn user_add(
        &self,
        request: Request<AuthUserAddRequest>,
    ) -> Result<Response<AuthUserAddResponse>, Status> {
        let mut r = request.get_ref().clone();
        if r.name.is_empty() {
            return Err(EtcdError::UserEmpty.into());
        }
        // bcrypt costs the server CPU: only for callers who may add users (the applier
        // checks again).
        self.server.check_admin(&request)?;
        if !r.options.as_ref().is_some_and(|o| o.no_password) && r.hashed_password.is_empty() {
            r.hashed_password = self.hash(std::mem::take(&mut r.password)).await?;
        }
        r.password.clear();
        let req = InternalRaftRequest { auth_user_add: Some(r), ..Default::default() };
        let (header, _) = self.call(&request, req).await?;
        Ok(Response::new(AuthUserAddResponse { header }))
    }

    async fn user_get(
        &self,
        request: Request<AuthUserGetRequest>,
    ) -> Result<Response<AuthUserGetResponse>, Status> {
        let req =
            InternalRaftRequest { auth_user_get: Some(request.get_ref().clone()), ..Default::default() };
        let (header, r) = self.call(&request, req).await?;
        Ok(Response::new(AuthUserGetResponse { header, roles: names(r) }))
    }

    async fn user_list(
        &self,
        request: Request<AuthUserListRequest>,
    ) -> Result<Response<AuthUserListResponse>, Status> {
        let req = InternalRaftRequest { auth_user_list: Some(AuthUserListRequest {}), ..Default::default() };
        let (header, r) = self.call(&request, req).await?;
        Ok(Response::new(AuthUserListResponse { header, users: names(r) }))
    }

    async fn user_delete(
        &self,
        request: Request<AuthUserDeleteRequest>,
    ) -> Result<Response<AuthUserDeleteResponse>, Status> {
        let req =
            InternalRaftRequest { auth_user_delete: Some(request.get_ref().clone()), ..Default::default() };
        let (header, _) = self.call(&request, req).await?;
        Ok(Response::new(AuthUserDeleteResponse { header }))
    }

    async fn user_change_password(
        &self,
        request: Request<AuthUserChangePasswordRequest>,
    ) -> Result<Response<AuthUserChangePasswordResponse>, Status> {
        let mut r = request.get_ref().clone();
        self.server.check_admin(&request)?;
        // An empty password is stored as an empty hash, which nothing matches (etcd).
        if r.hashed_password.is_empty() && !r.password.is_empty() {
            r.hashed_password = self.hash(std::mem::take(&mut r.password)).await?;
        }
        r.password.clear();
        let req = InternalRaftRequest { auth_user_change_password: Some(r), ..Default::default() };
        let (header, _) = self.call(&request, req).await?;
        Ok(Response::new(AuthUserChangePasswordResponse { header }))
    }

    async fn user_grant_role(
        &self,
        request: Request<AuthUserGrantRoleRequest>,
    ) -> Result<Response<AuthUserGrantRoleResponse>, Status> {
        let req = InternalRaftRequest {
            auth_user_grant_role: Some(request.get_ref().clone()),
            ..Default::default()
        };
        let (header, _) = self.call(&request, req).await?;
        Ok(Response::new(AuthUserGrantRoleResponse { header }))
    }

    async fn user_revoke_role(
        &self,
        request: Request<AuthUserRevokeRoleRequest>,
    ) -> Result<Response<AuthUserRevokeRoleResponse>, Status> {
        let req = InternalRaftRequest {
            auth_user_revoke_role: Some(request.get_ref().clone()),
            ..Default::default()
        };
        let (header, _) = self.call(&request, req).await?;
        Ok(Response::new(AuthUserRevokeRoleResponse { header }))
    }

    async fn role_add(
        &self,
        request: Request<AuthRoleAddRequest>,
    ) -> Result<Response<AuthRoleAddResponse>, Status> {
        if request.get_ref().name.is_empty() {
            return Err(EtcdError::RoleEmpty.into());
        }
        let req =
            InternalRaftRequest { auth_role_add: Some(request.get_ref().clone()), ..Default::default() };
        let (header, _) = self.call(&request, req).await?;
        Ok(Response::new(AuthRoleAddResponse { header }))
    }

    async fn role_get(
        &self,
        request: Request<AuthRoleGetRequest>,
    ) -> Result<Response<AuthRoleGetResponse>, Status> {
        let req =
            InternalRaftRequest { auth_role_get: Some(request.get_ref().clone()), ..Default::default() };
        let (header, r) = self.call(&request, req).await?;
        let perm = match r {
            AuthResult::Perms(p) => p,
            _ => Vec::new(),
        };
        Ok(Response::new(AuthRoleGetResponse { header, perm }))
    }

    async fn role_list(
        &self,
        request: Request<AuthRoleListRequest>,
    ) -> Result<Response<AuthRoleListResponse>, Status> {
        let req = InternalRaftRequest { auth_role_list: Some(AuthRoleListRequest {}), ..Default::default() };
        let (header, r) = self.call(&request, req).await?;
        Ok(Response::new(AuthRoleListResponse { header, roles: names(r) }))
    }

    async fn role_delete(
        &self,
        request: Request<AuthRoleDeleteRequest>,
    ) -> Result<Response<AuthRoleDeleteResponse>, Status> {
        let req =
            InternalRaftRequest { auth_role_delete: Some(request.get_ref().clone()), ..Default::default() };
        let (header, _) = self.call(&request, req).await?;
        Ok(Response::new(AuthRoleDeleteResponse { header }))
    }

    async fn role_grant_permission(
        &self,
        request: Request<AuthRoleGrantPermissionRequest>,
    ) -> Result<Response<AuthRoleGrantPermissionResponse>, Status> {
        let req = InternalRaftRequest {
            auth_role_grant_permission: Some(request.get_ref().clone()),
            ..Default::default()
        };
        let (header, _) = self.call(&request, req).await?;
        Ok(Response::new(AuthRoleGrantPermissionResponse { header }))
    }

    async fn role_revoke_permission(
        &self,
        request: Request<AuthRoleRevokePermissionRequest>,
    ) -> Result<Response<AuthRoleRevokePermissionResponse>, Status> {
        let req = InternalRaftRequest {
            auth_role_revoke_permission: Some(request.get_ref().clone()),
            ..Default::default()
        };
        let (header, _) = self.call(&request, req).await?;
        Ok(Response::new(AuthRoleRevokePermissionResponse { header }))
    }
}
