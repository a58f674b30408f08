//! Authentication and authorization (etcd's `auth` package): users with bcrypt
//! passwords, roles granting key-range permissions, the auth-enabled flag and the auth
//! revision. Like the rest of the state machine it changes only when a raft entry is
//! applied, so every member agrees; it lives in the "meta" column family and travels in
//! snapshots (as etcd's "auth", "authUsers" and "authRoles" buckets in bbolt ones).
//!
//! While auth is enabled, reads are checked when served and writes when applied (against
//! the user and auth revision the receiving member recorded in the entry's header), as
//! etcd does, so a permission revoked between the two cannot let a write through.

pub mod perm;
pub mod token;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use parking_lot::RwLock;
use prost::Message;
use proto::authpb::{Permission, Role, User};
use proto::etcdserverpb::{
    AuthRoleGrantPermissionRequest, AuthRoleRevokePermissionRequest, AuthUserAddRequest,
    AuthUserChangePasswordRequest, AuthUserGrantRoleRequest, AuthUserRevokeRoleRequest, RequestHeader,
};
use rocksdb::WriteBatch;

use perm::UserPerms;
pub use perm::{Access, Interval};
use token::TokenProvider;

use crate::backend::{Backend, BackendError, CF_META};
use crate::error::EtcdError;

/// The user and role that may do everything, and that must exist before auth is enabled.
pub const ROOT: &str = "root";

/// Meta keys of the auth state; snapshot.rs maps them to etcd's buckets.
pub const META_AUTH_ENABLED: &[u8] = b"auth/enabled";
pub const META_AUTH_REVISION: &[u8] = b"auth/revision";
pub const META_USER_PREFIX: &[u8] = b"authUsers/";
pub const META_ROLE_PREFIX: &[u8] = b"authRoles/";

/// Whether a meta key holds auth state (which a snapshot restore keeps, as etcd does).
pub fn is_meta_key(k: &[u8]) -> bool {
    k == META_AUTH_ENABLED
        || k == META_AUTH_REVISION
        || k.starts_with(META_USER_PREFIX)
        || k.starts_with(META_ROLE_PREFIX)
}

/// A raft header's `auth_revision` on entries this server proposes for itself (lease
/// expiry, member attributes, alarms it raises): they carry no user and pass every
/// check. Only members write headers, so a client cannot claim it.
pub const INTERNAL_AUTH_REVISION: u64 = u64::MAX;

/// Who sent a request: the user its token or client certificate names, and the auth
/// revision that identity was established at. An empty name is a client that presented
/// neither.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AuthInfo {
    pub username: String,
    pub revision: u64,
}

/// On whose behalf an applied entry acts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Origin {
    Internal,
    Client(AuthInfo),
}

impl Origin {
    pub fn from_header(h: Option<&RequestHeader>) -> Self {
        match h {
            Some(h) if h.auth_revision == INTERNAL_AUTH_REVISION => Origin::Internal,
            Some(h) => Origin::Client(AuthInfo { username: h.username.clone(), revision: h.auth_revision }),
            None => Origin::Client(AuthInfo::default()),
        }
    }
}

/// What an applied auth request answers.
#[derive(Debug)]
pub enum AuthResult {
    Done,
    Token(String),
    Names(Vec<String>),
    Perms(Vec<Permission>),
    Status { enabled: bool, revision: u64 },
}

#[derive(Default)]
struct State {
    users: BTreeMap<String, User>,
    roles: BTreeMap<String, Role>,
    /// Merged permissions per user, built on first use and dropped on any change.
    perms: HashMap<String, Arc<UserPerms>>,
}

pub struct AuthStore {
    enabled: AtomicBool,
    revision: AtomicU64,
    state: RwLock<State>,
    pub tokens: TokenProvider,
    bcrypt_cost: u32,
}

impl AuthStore {
    pub fn load(backend: &Backend, tokens: TokenProvider, bcrypt_cost: u32) -> Result<Self, BackendError> {
        let store = Self {
            enabled: AtomicBool::new(false),
            revision: AtomicU64::new(0),
            state: RwLock::new(State::default()),
            tokens,
            bcrypt_cost,
        };
        store.reload(backend)?;
        Ok(store)
    }

    /// Replaces the state with what the backend holds (start, raft snapshot install).
    pub fn reload(&self, backend: &Backend) -> Result<(), BackendError> {
        let mut st = State::default();
        let (mut enabled, mut revision) = (false, 0);
        let corrupt = |what: &str, e: prost::DecodeError| BackendError::Corrupt(format!("{what}: {e}"));
        backend.scan(CF_META, b"auth", |k, v| {
            if !k.starts_with(b"auth") {
                return Ok(false);
            }
            if k == META_AUTH_ENABLED {
                enabled = v == [1];
            } else if k == META_AUTH_REVISION {
                revision = u64::from_be_bytes(
                    v.try_into().map_err(|_| BackendError::Corrupt("auth revision is not 8 bytes".into()))?,
                );
            } else if let Some(name) = k.strip_prefix(META_USER_PREFIX) {
                let user = User::decode(v).map_err(|e| corrupt("auth user", e))?;
                st.users.insert(String::from_utf8_lossy(name).into_owned(), user);
            } else if let Some(name) = k.strip_prefix(META_ROLE_PREFIX) {
                let role = Role::decode(v).map_err(|e| corrupt("auth role", e))?;
                st.roles.insert(String::from_utf8_lossy(name).into_owned(), role);
            }
            Ok(true)
        })?;
        *self.state.write() = st;
        self.enabled.store(enabled, Ordering::Release);
        // etcd's auth store starts at revision 1, so that 0 can mean "no user".
        self.revision.store(revision.max(1), Ordering::Release);
        if !enabled {
            // A snapshot that turned auth off must not leave tokens to revive later.
            self.tokens.clear();
        }
        Ok(())
    }

    pub fn is_enabled(&self) -> bool {
        self.enabled.load(Ordering::Acquire)
    }

    pub fn revision(&self) -> u64 {
        self.revision.load(Ordering::Acquire)
    }

    /// Checks a password against the stored bcrypt hash (slow on purpose: call it off
    /// the async threads); returns the auth revision it checked against, which the
    /// caller compares once the token is issued (a concurrent change means retry).
    pub fn check_password(&self, name: &str, password: &str) -> Result<u64, EtcdError> {
        let (hash, revision) = {
            let st = self.state.read();
            let user = st.users.get(name).ok_or(EtcdError::AuthFailed)?;
            if is_no_password(user) {
                return Err(EtcdError::NoPasswordUser);
            }
            (String::from_utf8_lossy(&user.password).into_owned(), self.revision())
        };
        match bcrypt::verify(password, &hash) {
            Ok(true) => Ok(revision),
            _ => Err(EtcdError::AuthFailed),
        }
    }

    /// The bcrypt hash of a new password as it travels in a raft entry (base64, as etcd
    /// puts it in `hashedPassword`), so the log never holds the password itself.
    pub fn hash_password(&self, password: &str) -> Result<String, EtcdError> {
        let hash = bcrypt::hash_with_result(password, self.bcrypt_cost)
            .map_err(|e| EtcdError::InvalidArgument(format!("hashing the password: {e}")))?
            .format_for_version(bcrypt::Version::TwoA);
        Ok(STANDARD.encode(hash))
    }

    /// etcd's `IsAdminPermitted`: anything goes while auth is disabled; otherwise only
    /// users holding the root role.
    pub fn check_admin(&self, origin: &Origin) -> Result<(), EtcdError> {
        let Origin::Client(info) = origin else { return Ok(()) };
        if !self.is_enabled() {
            return Ok(());
        }
        if info.username.is_empty() {
            return Err(EtcdError::UserEmpty);
        }
        let st = self.state.read();
        let user = st.users.get(&info.username).ok_or(EtcdError::UserNotFound)?;
        if has_role(user, ROOT) { Ok(()) } else { Err(EtcdError::PermissionDenied) }
    }

    /// etcd's `isOpPermitted`: whether the client may read or write all of `ivl`.
    pub fn check_op(&self, origin: &Origin, ivl: &Interval, access: Access) -> Result<(), EtcdError> {
        if !self.is_enabled() {
            return Ok(());
        }
        match self.permissions(origin)? {
            None => Ok(()),
            Some(perms) if perms.covers(access, ivl) => Ok(()),
            Some(_) => Err(EtcdError::PermissionDenied),
        }
    }

    /// The merged permissions a client acts with while auth is enabled, `None` meaning
    /// unrestricted (internal requests, root): the identity checks of `isOpPermitted`.
    fn permissions(&self, origin: &Origin) -> Result<Option<Arc<UserPerms>>, EtcdError> {
        let Origin::Client(info) = origin else { return Ok(None) };
        if info.revision == 0 || info.username.is_empty() {
            return Err(EtcdError::UserEmpty);
        }
        if info.revision < self.revision() {
            return Err(EtcdError::AuthOldRevision);
        }
        {
            let st = self.state.read();
            let user = st.users.get(&info.username).ok_or(EtcdError::PermissionDenied)?;
            if has_role(user, ROOT) {
                return Ok(None);
            }
            if let Some(p) = st.perms.get(&info.username) {
                return Ok(Some(p.clone()));
            }
        }
        let mut st = self.state.write();
        let built = {
            let user = st.users.get(&info.username).ok_or(EtcdError::PermissionDenied)?;
            let roles = user.roles.iter().filter_map(|r| st.roles.get(r));
            Arc::new(UserPerms::new(roles.flat_map(|r| &r.key_permission)))
        };
        st.perms.insert(info.username.clone(), built.clone());
        Ok(Some(built))
    }

    /// Shorthand for a key and range end as a request carries them.
    pub fn check_range(
        &self,
        origin: &Origin,
        key: &[u8],
        range_end: &[u8],
        access: Access,
    ) -> Result<(), EtcdError> {
        if !self.is_enabled() {
            return Ok(());
        }
        self.check_op(origin, &Interval::from_request(key, range_end), access)
    }

    /// Checks `access` to each of `keys` (the keys of a lease), resolving the user once.
    pub fn check_keys(&self, origin: &Origin, keys: &[Vec<u8>], access: Access) -> Result<(), EtcdError> {
        if !self.is_enabled() || keys.is_empty() {
            return Ok(());
        }
        let Some(perms) = self.permissions(origin)? else { return Ok(()) };
        match keys.iter().all(|k| perms.covers(access, &Interval::from_request(k, &[]))) {
            true => Ok(()),
            false => Err(EtcdError::PermissionDenied),
        }
    }

    /// Whether a client's user holds `role` (it may read that role).
    pub fn has_role(&self, origin: &Origin, role: &str) -> bool {
        let Origin::Client(info) = origin else { return true };
        self.state.read().users.get(&info.username).is_some_and(|u| has_role(u, role))
    }
}

/// The changes an applied auth request makes, written into the apply batch.
pub struct AuthWriter<'a> {
    pub store: &'a AuthStore,
    pub backend: &'a Backend,
    pub batch: &'a mut WriteBatch,
}

impl AuthWriter<'_> {
    fn commit_revision(&mut self) {
        let rev = self.store.revision() + 1;
        self.batch.put_cf(self.backend.cf(CF_META), META_AUTH_REVISION, rev.to_be_bytes());
        self.store.revision.store(rev, Ordering::Release);
    }

    fn put_user(&mut self, st: &mut State, user: User) {
        let name = String::from_utf8_lossy(&user.name).into_owned();
        self.batch.put_cf(
            self.backend.cf(CF_META),
            [META_USER_PREFIX, name.as_bytes()].concat(),
            user.encode_to_vec(),
        );
        st.users.insert(name, user);
        st.perms.clear();
    }

    fn put_role(&mut self, st: &mut State, role: Role) {
        let name = String::from_utf8_lossy(&role.name).into_owned();
        self.batch.put_cf(
            self.backend.cf(CF_META),
            [META_ROLE_PREFIX, name.as_bytes()].concat(),
            role.encode_to_vec(),
        );
        st.roles.insert(name, role);
        st.perms.clear();
    }

    fn set_enabled(&mut self, on: bool) {
        self.batch.put_cf(self.backend.cf(CF_META), META_AUTH_ENABLED, [on as u8]);
        self.store.enabled.store(on, Ordering::Release);
    }

    pub fn enable(&mut self) -> Result<AuthResult, EtcdError> {
        if self.store.is_enabled() {
            return Ok(AuthResult::Done);
        }
        {
            let st = self.store.state.read();
            let root = st.users.get(ROOT).ok_or(EtcdError::RootUserNotExist)?;
            if !has_role(root, ROOT) {
                return Err(EtcdError::RootRoleNotExist);
            }
        }
        // etcd does not move the revision here: tokens of the revision before a disable
        // work again (simple ones were dropped by the disable).
        self.set_enabled(true);
        Ok(AuthResult::Done)
    }

    pub fn disable(&mut self) -> Result<AuthResult, EtcdError> {
        if !self.store.is_enabled() {
            return Ok(AuthResult::Done);
        }
        self.set_enabled(false);
        self.commit_revision();
        self.store.tokens.clear();
        Ok(AuthResult::Done)
    }

    pub fn user_add(&mut self, r: &AuthUserAddRequest) -> Result<AuthResult, EtcdError> {
        if r.name.is_empty() {
            return Err(EtcdError::UserEmpty);
        }
        let store = self.store;
        let mut st = store.state.write();
        if st.users.contains_key(&r.name) {
            return Err(EtcdError::UserAlreadyExist);
        }
        let no_password = r.options.as_ref().is_some_and(|o| o.no_password);
        let password = if no_password { Vec::new() } else { decode_hash(&r.hashed_password)? };
        // Stored with its options always present, as etcd stores users (its code reads
        // them without a nil check).
        let options = Some(r.options.unwrap_or_default());
        let user = User { name: r.name.clone().into_bytes(), password, roles: Vec::new(), options };
        self.put_user(&mut st, user);
        drop(st);
        self.commit_revision();
        Ok(AuthResult::Done)
    }

    pub fn user_delete(&mut self, name: &str) -> Result<AuthResult, EtcdError> {
        if self.store.is_enabled() && name == ROOT {
            return Err(EtcdError::InvalidAuthMgmt);
        }
        let store = self.store;
        let mut st = store.state.write();
        st.users.remove(name).ok_or(EtcdError::UserNotFound)?;
        st.perms.clear();
        self.batch.delete_cf(self.backend.cf(CF_META), [META_USER_PREFIX, name.as_bytes()].concat());
        drop(st);
        self.commit_revision();
        store.tokens.invalidate_user(name);
        Ok(AuthResult::Done)
    }

    pub fn user_change_password(
        &mut self,
        r: &AuthUserChangePasswordRequest,
    ) -> Result<AuthResult, EtcdError> {
        let store = self.store;
        let mut st = store.state.write();
        let mut user = st.users.get(&r.name).cloned().ok_or(EtcdError::UserNotFound)?;
        // A user made without a password stays without one (etcd); an empty new
        // password leaves an empty hash, which no password matches.
        if !is_no_password(&user) {
            user.password = decode_hash(&r.hashed_password)?;
        }
        self.put_user(&mut st, user);
        drop(st);
        self.commit_revision();
        store.tokens.invalidate_user(&r.name);
        Ok(AuthResult::Done)
    }

    pub fn user_grant_role(&mut self, r: &AuthUserGrantRoleRequest) -> Result<AuthResult, EtcdError> {
        let store = self.store;
        let mut st = store.state.write();
        let mut user = st.users.get(&r.user).cloned().ok_or(EtcdError::UserNotFound)?;
        if r.role != ROOT && !st.roles.contains_key(&r.role) {
            return Err(EtcdError::RoleNotFound);
        }
        let Err(at) = user.roles.binary_search(&r.role) else { return Ok(AuthResult::Done) };
        user.roles.insert(at, r.role.clone());
        self.put_user(&mut st, user);
        drop(st);
        self.commit_revision();
        Ok(AuthResult::Done)
    }

    pub fn user_revoke_role(&mut self, r: &AuthUserRevokeRoleRequest) -> Result<AuthResult, EtcdError> {
        if self.store.is_enabled() && r.name == ROOT && r.role == ROOT {
            return Err(EtcdError::InvalidAuthMgmt);
        }
        let store = self.store;
        let mut st = store.state.write();
        let mut user = st.users.get(&r.name).cloned().ok_or(EtcdError::UserNotFound)?;
        let before = user.roles.len();
        user.roles.retain(|x| *x != r.role);
        if user.roles.len() == before {
            return Err(EtcdError::RoleNotGranted);
        }
        self.put_user(&mut st, user);
        drop(st);
        self.commit_revision();
        Ok(AuthResult::Done)
    }

    pub fn role_add(&mut self, name: &str) -> Result<AuthResult, EtcdError> {
        if name.is_empty() {
            return Err(EtcdError::RoleEmpty);
        }
        let store = self.store;
        let mut st = store.state.write();
        if st.roles.contains_key(name) {
            return Err(EtcdError::RoleAlreadyExist);
        }
        self.put_role(&mut st, Role { name: name.as_bytes().to_vec(), key_permission: Vec::new() });
        drop(st);
        self.commit_revision();
        Ok(AuthResult::Done)
    }

    /// Deletes a role and takes it from every user that held it.
    pub fn role_delete(&mut self, name: &str) -> Result<AuthResult, EtcdError> {
        if self.store.is_enabled() && name == ROOT {
            return Err(EtcdError::InvalidAuthMgmt);
        }
        let store = self.store;
        let mut st = store.state.write();
        st.roles.remove(name).ok_or(EtcdError::RoleNotFound)?;
        st.perms.clear();
        self.batch.delete_cf(self.backend.cf(CF_META), [META_ROLE_PREFIX, name.as_bytes()].concat());
        let holders: Vec<User> = st.users.values().filter(|u| has_role(u, name)).cloned().collect();
        for mut user in holders {
            user.roles.retain(|r| r != name);
            self.put_user(&mut st, user);
        }
        drop(st);
        self.commit_revision();
        Ok(AuthResult::Done)
    }

    /// Adds a permission, or changes the type of one with the same key and range end;
    /// permissions stay sorted by key as etcd keeps them.
    pub fn role_grant_permission(
        &mut self,
        r: &AuthRoleGrantPermissionRequest,
    ) -> Result<AuthResult, EtcdError> {
        let perm = r.perm.clone().ok_or(EtcdError::PermissionNotGiven)?;
        let store = self.store;
        let mut st = store.state.write();
        let mut role = st.roles.get(&r.name).cloned().ok_or(EtcdError::RoleNotFound)?;
        match role.key_permission.iter_mut().find(|p| p.key == perm.key && p.range_end == perm.range_end) {
            Some(p) => p.perm_type = perm.perm_type,
            None => {
                let at = role.key_permission.partition_point(|p| p.key <= perm.key);
                role.key_permission.insert(at, perm);
            }
        }
        self.put_role(&mut st, role);
        drop(st);
        self.commit_revision();
        Ok(AuthResult::Done)
    }

    pub fn role_revoke_permission(
        &mut self,
        r: &AuthRoleRevokePermissionRequest,
    ) -> Result<AuthResult, EtcdError> {
        let store = self.store;
        let mut st = store.state.write();
        let mut role = st.roles.get(&r.role).cloned().ok_or(EtcdError::RoleNotFound)?;
        let before = role.key_permission.len();
        role.key_permission.retain(|p| !(p.key == r.key && p.range_end == r.range_end));
        if role.key_permission.len() == before {
            return Err(EtcdError::PermissionNotGranted);
        }
        self.put_role(&mut st, role);
        drop(st);
        self.commit_revision();
        Ok(AuthResult::Done)
    }

    /// An applied Authenticate: simple tokens are recorded on every member (the
    /// receiving member chose `prefix`; `id` makes it unique), JWTs are signed here.
    pub fn authenticate(&mut self, name: &str, prefix: &str, id: u64) -> Result<AuthResult, EtcdError> {
        if !self.store.is_enabled() {
            return Err(EtcdError::AuthNotEnabled);
        }
        match self.store.state.read().users.get(name) {
            None => return Err(EtcdError::AuthFailed),
            Some(u) if is_no_password(u) => return Err(EtcdError::AuthFailed),
            Some(_) => {}
        }
        match &self.store.tokens {
            TokenProvider::Simple(s) => {
                let token = format!("{prefix}.{id}");
                s.assign(token.clone(), name);
                Ok(AuthResult::Token(token))
            }
            TokenProvider::Jwt(j) => {
                j.assign(name, self.store.revision()).map(AuthResult::Token).ok_or_else(|| {
                    EtcdError::Internal("auth: token signing attempted with verify-only key".into())
                })
            }
        }
    }
}

/// Read-only requests, answered from the applied state.
impl AuthStore {
    pub fn status(&self) -> AuthResult {
        AuthResult::Status { enabled: self.is_enabled(), revision: self.revision() }
    }

    pub fn user_get(&self, name: &str) -> Result<AuthResult, EtcdError> {
        let st = self.state.read();
        let user = st.users.get(name).ok_or(EtcdError::UserNotFound)?;
        Ok(AuthResult::Names(user.roles.clone()))
    }

    pub fn user_list(&self) -> AuthResult {
        AuthResult::Names(self.state.read().users.keys().cloned().collect())
    }

    pub fn role_get(&self, name: &str) -> Result<AuthResult, EtcdError> {
        let st = self.state.read();
        let role = st.roles.get(name).ok_or(EtcdError::RoleNotFound)?;
        Ok(AuthResult::Perms(role.key_permission.clone()))
    }

    pub fn role_list(&self) -> AuthResult {
        AuthResult::Names(self.state.read().roles.keys().cloned().collect())
    }
}

fn is_no_password(user: &User) -> bool {
    user.options.as_ref().is_some_and(|o| o.no_password)
}

fn has_role(user: &User, role: &str) -> bool {
    user.roles.iter().any(|r| r == role)
}

fn decode_hash(b64: &str) -> Result<Vec<u8>, EtcdError> {
    STANDARD.decode(b64).map_err(|e| EtcdError::Internal(format!("hashed password is not base64: {e}")))
}
