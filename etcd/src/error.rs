//! Errors a client can see, with the gRPC code and message etcd uses for each
//! (`api/v3rpc/rpctypes/error.go`). clientv3 matches on these exact messages to turn them
//! back into typed errors, so they are part of the wire protocol.

use tonic::{Code, Status};

use crate::mvcc::MvccError;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EtcdError {
    #[error("etcdserver: key is not provided")]
    EmptyKey,
    #[error("etcdserver: key not found")]
    KeyNotFound,
    #[error("etcdserver: value is provided")]
    ValueProvided,
    #[error("etcdserver: lease is provided")]
    LeaseProvided,
    #[error("etcdserver: too many operations in txn request")]
    TooManyOps,
    #[error("etcdserver: duplicate key given in txn request")]
    DuplicateKey,
    #[error("etcdserver: mvcc: required revision has been compacted")]
    Compacted,
    #[error("etcdserver: mvcc: required revision is a future revision")]
    FutureRev,
    #[error("etcdserver: mvcc: database space exceeded")]
    NoSpace,
    #[error("etcdserver: lease already exists")]
    LeaseExist,
    #[error("etcdserver: requested lease not found")]
    LeaseNotFound,
    #[error("etcdserver: too large lease TTL")]
    LeaseTtlTooLarge,
    #[error("etcdserver: request is too large")]
    RequestTooLarge,
    #[error("etcdserver: no leader")]
    NoLeader,
    #[error("etcdserver: not leader")]
    NotLeader,
    #[error("etcdserver: request timed out")]
    Timeout,
    #[error("etcdserver: server stopped")]
    Stopped,
    #[error("etcdserver: member not found")]
    MemberNotFound,
    #[error("etcdserver: member ID already exist")]
    MemberExists,
    #[error("etcdserver: Peer URLs already exists")]
    PeerUrlExists,
    #[error("etcdserver: ID removed")]
    IdRemoved,
    #[error("etcdserver: can only promote a learner member")]
    MemberNotLearner,
    #[error("etcdserver: can only promote a learner member which is in sync with leader")]
    LearnerNotReady,
    #[error("etcdserver: re-configuration failed due to not enough started members")]
    NotEnoughStarted,
    #[error("etcdserver: given member URLs are invalid")]
    MemberBadUrls,
    #[error("etcdserver: bad leader transferee")]
    BadLeaderTransferee,
    #[error("etcdserver: request timed out, leader transfer took too long")]
    LeaderTransferTimeout,
    #[error("etcdserver: unhealthy cluster")]
    Unhealthy,
    #[error("etcdserver: corrupt cluster")]
    Corrupt,
    #[error("etcdserver: root user does not exist")]
    RootUserNotExist,
    #[error("etcdserver: root user does not have root role")]
    RootRoleNotExist,
    #[error("etcdserver: user name already exists")]
    UserAlreadyExist,
    #[error("etcdserver: user name is empty")]
    UserEmpty,
    #[error("etcdserver: user name not found")]
    UserNotFound,
    #[error("etcdserver: role name already exists")]
    RoleAlreadyExist,
    #[error("etcdserver: role name not found")]
    RoleNotFound,
    #[error("etcdserver: role name is empty")]
    RoleEmpty,
    #[error("etcdserver: authentication failed, invalid user ID or password")]
    AuthFailed,
    #[error("etcdserver: permission not given")]
    PermissionNotGiven,
    #[error("etcdserver: permission denied")]
    PermissionDenied,
    #[error("etcdserver: role is not granted to the user")]
    RoleNotGranted,
    #[error("etcdserver: permission is not granted to the role")]
    PermissionNotGranted,
    #[error("etcdserver: authentication is not enabled")]
    AuthNotEnabled,
    #[error("etcdserver: invalid auth token")]
    InvalidAuthToken,
    #[error("etcdserver: invalid auth management")]
    InvalidAuthMgmt,
    #[error("etcdserver: revision of auth store is old")]
    AuthOldRevision,
    /// etcd 3.4 returns this one untranslated from its auth store (code Unknown).
    #[error("auth: authentication failed, password was given for no password user")]
    NoPasswordUser,
    #[error("etcdserver: {0}")]
    InvalidArgument(String),
    #[error("etcdserver: {0} is not supported by this server")]
    Unimplemented(&'static str),
    #[error("etcdserver: {0}")]
    Internal(String),
}

impl EtcdError {
    pub fn code(&self) -> Code {
        use EtcdError::*;
        match self {
            EmptyKey | KeyNotFound | ValueProvided | LeaseProvided | TooManyOps | DuplicateKey
            | RequestTooLarge | MemberBadUrls | InvalidArgument(_) => Code::InvalidArgument,
            UserEmpty | RoleEmpty | AuthFailed | PermissionNotGiven | InvalidAuthMgmt | AuthOldRevision => {
                Code::InvalidArgument
            }
            RootUserNotExist | RootRoleNotExist | UserAlreadyExist | UserNotFound | RoleAlreadyExist
            | RoleNotFound | RoleNotGranted | PermissionNotGranted | AuthNotEnabled => {
                Code::FailedPrecondition
            }
            PermissionDenied => Code::PermissionDenied,
            InvalidAuthToken => Code::Unauthenticated,
            MemberExists | PeerUrlExists | IdRemoved | MemberNotLearner | LearnerNotReady
            | NotEnoughStarted | BadLeaderTransferee => Code::FailedPrecondition,
            LeaderTransferTimeout => Code::DeadlineExceeded,
            Compacted | FutureRev | LeaseTtlTooLarge => Code::OutOfRange,
            NoSpace => Code::ResourceExhausted,
            LeaseExist => Code::FailedPrecondition,
            LeaseNotFound | MemberNotFound => Code::NotFound,
            NoLeader | NotLeader | Timeout | Stopped | Unhealthy => Code::Unavailable,
            Corrupt => Code::DataLoss,
            Unimplemented(_) => Code::Unimplemented,
            NoPasswordUser => Code::Unknown,
            Internal(_) => Code::Internal,
        }
    }
}

impl From<EtcdError> for Status {
    fn from(e: EtcdError) -> Self {
        Status::new(e.code(), e.to_string())
    }
}

impl From<MvccError> for EtcdError {
    fn from(e: MvccError) -> Self {
        match e {
            MvccError::Compacted => EtcdError::Compacted,
            MvccError::FutureRev => EtcdError::FutureRev,
            other => EtcdError::Internal(other.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_match_etcd() {
        let s: Status = EtcdError::RequestTooLarge.into();
        assert_eq!((s.code(), s.message()), (Code::InvalidArgument, "etcdserver: request is too large"));
        let s: Status = EtcdError::NoSpace.into();
        assert_eq!(
            (s.code(), s.message()),
            (Code::ResourceExhausted, "etcdserver: mvcc: database space exceeded")
        );
        let s: Status = EtcdError::from(MvccError::Compacted).into();
        assert_eq!(s.code(), Code::OutOfRange);
    }
}
