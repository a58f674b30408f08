//! The KV service (etcd's `v3rpc/key.go`): request checks, then reads from the store
//! (after ReadIndex unless serializable) or writes through raft.

use std::collections::HashSet;
use std::sync::Arc;

use proto::etcdserverpb::kv_server::Kv;
use proto::etcdserverpb::{
    CompactionRequest, CompactionResponse, DeleteRangeRequest, DeleteRangeResponse, InternalRaftRequest,
    PutRequest, PutResponse, RangeRequest, RangeResponse, RequestOp, TxnRequest, TxnResponse, request_op,
};
use tonic::{Request, Response, Status};

use super::{EtcdServer, expect_response};
use crate::apply::{ApplyResponse, range_with};
use crate::auth::{Access, Origin};
use crate::error::EtcdError;
use crate::mvcc::KeyRange;

pub struct KvService {
    pub server: Arc<EtcdServer>,
}

#[tonic::async_trait]
impl Kv for KvService {
    async fn range(&self, request: Request<RangeRequest>) -> Result<Response<RangeResponse>, Status> {
        check_range(request.get_ref())?;
        if !request.get_ref().serializable {
            self.server.linearizable_read().await?;
        }
        // Authorized against the state the read is served from (after ReadIndex), and
        // refused if users or roles changed while it ran, as etcd's doSerialize does.
        let auth = &self.server.auth;
        let origin = Origin::Client(self.server.caller(&request)?.unwrap_or_default());
        let revision = auth.revision();
        let r = request.into_inner();
        auth.check_range(&origin, &r.key, &r.range_end, Access::Read)?;
        let mut resp = range_with(&r, |range, opts| Ok(self.server.store.range(range, opts)?))?;
        if auth.is_enabled() && auth.revision() != revision {
            return Err(EtcdError::AuthOldRevision.into());
        }
        self.server.fill_header(&mut resp.header);
        Ok(Response::new(resp))
    }

    async fn put(&self, request: Request<PutRequest>) -> Result<Response<PutResponse>, Status> {
        let caller = self.server.caller(&request)?;
        let r = request.into_inner();
        check_put(&r)?;
        self.server.check_quota(EtcdServer::put_cost(&r.key, &r.value)).await?;
        let result =
            self.server.propose_as(InternalRaftRequest { put: Some(r), ..Default::default() }, &caller).await;
        let mut resp = expect_response!(result, Put)?;
        self.server.fill_header(&mut resp.header);
        Ok(Response::new(resp))
    }

    async fn delete_range(
        &self,
        request: Request<DeleteRangeRequest>,
    ) -> Result<Response<DeleteRangeResponse>, Status> {
        let caller = self.server.caller(&request)?;
        let r = request.into_inner();
        if r.key.is_empty() {
            return Err(EtcdError::EmptyKey.into());
        }
        let result = self
            .server
            .propose_as(InternalRaftRequest { delete_range: Some(r), ..Default::default() }, &caller)
            .await;
        let mut resp = expect_response!(result, DeleteRange)?;
        self.server.fill_header(&mut resp.header);
        Ok(Response::new(resp))
    }

    async fn txn(&self, request: Request<TxnRequest>) -> Result<Response<TxnResponse>, Status> {
        let caller = self.server.caller(&request)?;
        let r = request.into_inner();
        check_txn(&r, self.server.limits.max_txn_ops)?;
        check_intervals(&r.success)?;
        check_intervals(&r.failure)?;
        let cost = txn_cost(&r);
        if cost > 0 {
            self.server.check_quota(cost).await?;
        }
        let result =
            self.server.propose_as(InternalRaftRequest { txn: Some(r), ..Default::default() }, &caller).await;
        let mut resp = expect_response!(result, Txn)?;
        self.server.fill_header(&mut resp.header);
        Ok(Response::new(resp))
    }

    async fn compact(
        &self,
        request: Request<CompactionRequest>,
    ) -> Result<Response<CompactionResponse>, Status> {
        let caller = self.server.caller(&request)?;
        let r = request.into_inner();
        let physical = r.physical;
        let result = self
            .server
            .propose_as(InternalRaftRequest { compaction: Some(r), ..Default::default() }, &caller)
            .await?;
        let ApplyResponse::Compaction { mut resp, physical: done } = result else {
            return Err(EtcdError::Internal("unexpected apply response to a compaction".into()).into());
        };
        if physical {
            // The compaction thread answers once the revisions left the backend; a
            // failure there is the client's answer too, not a success.
            match done.await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    return Err(EtcdError::Internal(format!("physical compaction failed: {e}")).into());
                }
                Err(_) => {
                    return Err(
                        EtcdError::Internal("the compaction stopped before it finished".into()).into()
                    );
                }
            }
        }
        self.server.fill_header(&mut resp.header);
        Ok(Response::new(resp))
    }
}

fn check_range(r: &RangeRequest) -> Result<(), EtcdError> {
    if r.key.is_empty() {
        return Err(EtcdError::EmptyKey);
    }
    Ok(())
}

fn check_put(r: &PutRequest) -> Result<(), EtcdError> {
    if r.key.is_empty() {
        return Err(EtcdError::EmptyKey);
    }
    if r.ignore_value && !r.value.is_empty() {
        return Err(EtcdError::ValueProvided);
    }
    if r.ignore_lease && r.lease != 0 {
        return Err(EtcdError::LeaseProvided);
    }
    Ok(())
}

/// etcd's checkTxnRequest: bounded size at every level, and every op well formed.
fn check_txn(r: &TxnRequest, max_ops: usize) -> Result<(), EtcdError> {
    if r.compare.len() > max_ops || r.success.len() > max_ops || r.failure.len() > max_ops {
        return Err(EtcdError::TooManyOps);
    }
    for c in &r.compare {
        if c.key.is_empty() {
            return Err(EtcdError::EmptyKey);
        }
    }
    for op in r.success.iter().chain(&r.failure) {
        match &op.request {
            Some(request_op::Request::RequestRange(q)) => check_range(q)?,
            Some(request_op::Request::RequestPut(p)) => check_put(p)?,
            Some(request_op::Request::RequestDeleteRange(d)) if d.key.is_empty() => {
                return Err(EtcdError::EmptyKey);
            }
            Some(request_op::Request::RequestTxn(t)) => check_txn(t, max_ops)?,
            Some(request_op::Request::RequestDeleteRange(_)) | None => {}
        }
    }
    Ok(())
}

/// etcd's checkIntervals: within the ops that could run together, no key is put twice
/// and no put falls in a deleted range. Returns this level's puts and deletes, for the
/// level above.
fn check_intervals(ops: &[RequestOp]) -> Result<(HashSet<Vec<u8>>, Vec<KeyRange>), EtcdError> {
    let mut dels: Vec<KeyRange> = ops
        .iter()
        .filter_map(|op| match &op.request {
            Some(request_op::Request::RequestDeleteRange(d)) => {
                Some(KeyRange::from_request(&d.key, &d.range_end))
            }
            _ => None,
        })
        .collect();
    let deleted = |dels: &[KeyRange], k: &[u8]| dels.iter().any(|d| d.contains(k));
    let mut puts: HashSet<Vec<u8>> = HashSet::new();
    for op in ops {
        let Some(request_op::Request::RequestTxn(t)) = &op.request else { continue };
        let (puts_then, dels_then) = check_intervals(&t.success)?;
        let (puts_else, dels_else) = check_intervals(&t.failure)?;
        for k in &puts_then {
            if puts.contains(k) || deleted(&dels, k) {
                return Err(EtcdError::DuplicateKey);
            }
        }
        for k in &puts_else {
            // The same key in both branches is fine: only one branch runs.
            if (puts.contains(k) && !puts_then.contains(k)) || deleted(&dels, k) {
                return Err(EtcdError::DuplicateKey);
            }
        }
        puts.extend(puts_then);
        puts.extend(puts_else);
        dels.extend(dels_then);
        dels.extend(dels_else);
    }
    for op in ops {
        let Some(request_op::Request::RequestPut(p)) = &op.request else { continue };
        if puts.contains(&p.key) || deleted(&dels, &p.key) {
            return Err(EtcdError::DuplicateKey);
        }
        puts.insert(p.key.clone());
    }
    Ok((puts, dels))
}

/// Quota cost of a transaction: the costlier of its two branches (only one runs).
fn txn_cost(r: &TxnRequest) -> u64 {
    let branch = |ops: &[RequestOp]| -> u64 {
        ops.iter()
            .map(|op| match &op.request {
                Some(request_op::Request::RequestPut(p)) => EtcdServer::put_cost(&p.key, &p.value),
                Some(request_op::Request::RequestTxn(t)) => txn_cost(t),
                _ => 0,
            })
            .sum()
    };
    branch(&r.success).max(branch(&r.failure))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(k: &str) -> RequestOp {
        RequestOp {
            request: Some(request_op::Request::RequestPut(PutRequest {
                key: k.into(),
                ..Default::default()
            })),
        }
    }
    fn del(k: &str, end: &str) -> RequestOp {
        RequestOp {
            request: Some(request_op::Request::RequestDeleteRange(DeleteRangeRequest {
                key: k.into(),
                range_end: end.into(),
                ..Default::default()
            })),
        }
    }
    fn txn(success: Vec<RequestOp>, failure: Vec<RequestOp>) -> RequestOp {
        RequestOp {
            request: Some(request_op::Request::RequestTxn(TxnRequest {
                success,
                failure,
                ..Default::default()
            })),
        }
    }

    #[test]
    fn duplicate_keys_are_refused_as_etcd_does() {
        assert!(check_intervals(&[put("a"), put("b")]).is_ok());
        assert_eq!(check_intervals(&[put("a"), put("a")]).unwrap_err(), EtcdError::DuplicateKey);
        assert_eq!(check_intervals(&[put("b"), del("a", "c")]).unwrap_err(), EtcdError::DuplicateKey);
        assert!(check_intervals(&[del("a", "c"), del("b", "d")]).is_ok());
        // Then and else branches may put the same key.
        assert!(check_intervals(&[txn(vec![put("a")], vec![put("a")])]).is_ok());
        assert_eq!(
            check_intervals(&[put("a"), txn(vec![put("a")], vec![])]).unwrap_err(),
            EtcdError::DuplicateKey
        );
    }

    #[test]
    fn txn_size_is_bounded_at_every_level() {
        let big = TxnRequest { success: (0..3).map(|i| put(&i.to_string())).collect(), ..Default::default() };
        assert_eq!(check_txn(&big, 2).unwrap_err(), EtcdError::TooManyOps);
        let nested = TxnRequest {
            success: vec![RequestOp { request: Some(request_op::Request::RequestTxn(big)) }],
            ..Default::default()
        };
        assert_eq!(check_txn(&nested, 2).unwrap_err(), EtcdError::TooManyOps);
    }
}
