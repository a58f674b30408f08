//! The Cluster service (etcd's `v3rpc/member.go`). This build runs single-member clusters:
//! membership changes are refused with Unimplemented until multi-member raft lands.

use std::sync::Arc;

use proto::etcdserverpb::cluster_server::Cluster;
use proto::etcdserverpb::{
    MemberAddRequest, MemberAddResponse, MemberListRequest, MemberListResponse, MemberPromoteRequest,
    MemberPromoteResponse, MemberRemoveRequest, MemberRemoveResponse, MemberUpdateRequest,
    MemberUpdateResponse,
};
use tonic::{Request, Response, Status};

use super::EtcdServer;
use crate::error::EtcdError;

pub struct ClusterService {
    pub server: Arc<EtcdServer>,
}

fn membership_changes_unsupported() -> Status {
    EtcdError::Unimplemented("changing the membership of a single-member cluster").into()
}

#[tonic::async_trait]
impl Cluster for ClusterService {
    async fn member_add(&self, _r: Request<MemberAddRequest>) -> Result<Response<MemberAddResponse>, Status> {
        Err(membership_changes_unsupported())
    }

    async fn member_remove(
        &self,
        _r: Request<MemberRemoveRequest>,
    ) -> Result<Response<MemberRemoveResponse>, Status> {
        Err(membership_changes_unsupported())
    }

    async fn member_update(
        &self,
        _r: Request<MemberUpdateRequest>,
    ) -> Result<Response<MemberUpdateResponse>, Status> {
        Err(membership_changes_unsupported())
    }

    async fn member_list(
        &self,
        request: Request<MemberListRequest>,
    ) -> Result<Response<MemberListResponse>, Status> {
        if request.get_ref().linearizable {
            self.server.linearizable_read().await?;
        }
        Ok(Response::new(MemberListResponse {
            header: Some(self.server.header(self.server.store.current_rev())),
            members: self.server.members.list(),
        }))
    }

    async fn member_promote(
        &self,
        _r: Request<MemberPromoteRequest>,
    ) -> Result<Response<MemberPromoteResponse>, Status> {
        Err(membership_changes_unsupported())
    }
}
