//! The applier: turns committed raft entries into state changes, with etcd's semantics
//! (`server/etcdserver/apply.go`). All entries of one Ready share one backend write batch,
//! which also records the applied index, so a crash never applies an entry twice or half.
//!
//! Checks run in a fixed order, as etcd chains its appliers: the NOSPACE alarm first
//! (`applierV3Capped`), then the request's own preconditions (lease exists, key exists for
//! `ignore_*`, revisions readable), and only then any write, so a failed request changes
//! nothing.

use std::cmp::Ordering;
use std::collections::HashSet;
use std::sync::Arc;

use prost::Message;
use proto::etcdserverpb::{
    AlarmResponse, AlarmType, CompactionRequest, CompactionResponse, Compare, DeleteRangeRequest,
    DeleteRangeResponse, InternalRaftRequest, LeaseGrantResponse, LeaseRevokeResponse, PutRequest,
    PutResponse, RangeRequest, RangeResponse, RequestOp, ResponseHeader, ResponseOp, TxnRequest, TxnResponse,
    compare, range_request, request_op, response_op,
};
use proto::mvccpb::KeyValue;
use rocksdb::WriteBatch;
use tokio::sync::oneshot;

use crate::alarm::Alarms;
use crate::auth::{Access, AuthResult, AuthStore, AuthWriter, Origin};
use crate::backend::Backend;
use crate::error::EtcdError;
use crate::lease::Lessor;
use crate::mvcc::kvstore::{StoreWriter, TxnWriter, WriterOutput};
use crate::mvcc::{KeyRange, KvStore, RangeOptions, Revision, WatchableStore};

/// The result of applying one request, handed to the client that proposed it.
pub type ApplyResult = Result<ApplyResponse, EtcdError>;

#[derive(Debug)]
pub enum ApplyResponse {
    Put(PutResponse),
    DeleteRange(DeleteRangeResponse),
    Txn(TxnResponse),
    /// `physical` resolves once the compacted revisions have left the backend.
    Compaction {
        resp: CompactionResponse,
        physical: oneshot::Receiver<Result<(), String>>,
    },
    LeaseGrant(LeaseGrantResponse),
    LeaseRevoke(LeaseRevokeResponse),
    Alarm(AlarmResponse),
    /// A member's attributes were recorded.
    Published,
    Auth(AuthResult),
}

/// A compaction whose index part is applied; the backend part runs off the apply path.
pub struct CompactionJob {
    pub at: i64,
    pub keep: HashSet<Revision>,
    /// Told whether the revisions left the backend (the error otherwise).
    pub done: Option<oneshot::Sender<Result<(), String>>>,
}

pub struct Applier {
    pub backend: Arc<Backend>,
    pub store: Arc<KvStore>,
    pub lessor: Arc<Lessor>,
    pub alarms: Arc<Alarms>,
    pub auth: Arc<AuthStore>,
    pub watchable: Arc<WatchableStore>,
    pub members: Arc<crate::membership::Membership>,
    /// Physical compactions, run by a background thread.
    pub compactions: std::sync::mpsc::Sender<CompactionJob>,
}

/// One apply batch in progress.
pub struct ApplyBatch<'a> {
    applier: &'a Applier,
    writer: StoreWriter<'a>,
    physical_done: Vec<oneshot::Sender<Result<(), String>>>,
}

/// What `ApplyBatch::finish` leaves to do once the batch is stored.
pub struct PendingPublish {
    out: WriterOutput,
    physical_done: Vec<oneshot::Sender<Result<(), String>>>,
}

impl Applier {
    pub fn begin<'a>(&'a self, batch: &'a mut WriteBatch) -> ApplyBatch<'a> {
        ApplyBatch { applier: self, writer: self.store.writer(batch), physical_done: Vec::new() }
    }

    /// Makes a stored batch visible: readers, then watchers, then background compaction.
    pub fn publish(&self, p: PendingPublish) {
        self.store.publish(p.out.rev);
        self.watchable.notify(&p.out.events, p.out.rev);
        let mut done = p.physical_done.into_iter();
        for (at, keep) in p.out.compactions {
            let job = CompactionJob { at, keep, done: done.next() };
            // The compaction thread lives as long as the server; if it is gone the
            // server is stopping and the revisions are compacted again on restart.
            let _ = self.compactions.send(job);
        }
    }
}

impl<'a> ApplyBatch<'a> {
    /// The batch, for raft state that must be stored with these writes.
    pub fn batch(&mut self) -> &mut WriteBatch {
        self.writer.batch()
    }

    /// Applies one normal entry's payload. Returns the proposer's request id (0 if the
    /// entry carries none) and the result.
    pub fn apply_entry(&mut self, data: &[u8]) -> (u64, ApplyResult) {
        let req = match InternalRaftRequest::decode(data) {
            Ok(r) => r,
            Err(e) => return (0, Err(EtcdError::Internal(format!("undecodable raft entry: {e}")))),
        };
        let id = req.header.as_ref().map_or(req.id, |h| h.id);
        (id, self.apply_request(req))
    }

    fn apply_request(&mut self, req: InternalRaftRequest) -> ApplyResult {
        let origin = Origin::from_header(req.header.as_ref());
        if is_auth_request(&req) {
            return self.apply_auth(req, &origin).map(ApplyResponse::Auth);
        }
        let no_space = self.applier.alarms.is_active(AlarmType::Nospace);
        let auth = &*self.applier.auth;
        if let Some(r) = req.put {
            check_put(auth, &self.applier.lessor, &origin, &r)?;
            if no_space {
                return Err(EtcdError::NoSpace);
            }
            return self.put(&r).map(ApplyResponse::Put);
        }
        if let Some(r) = req.delete_range {
            check_delete(auth, &origin, &r)?;
            return Ok(ApplyResponse::DeleteRange(self.delete_range(&r)?));
        }
        if let Some(r) = req.txn {
            check_txn_auth(auth, &self.applier.lessor, &origin, &r)?;
            if no_space && txn_has_put(&r) {
                return Err(EtcdError::NoSpace);
            }
            return self.txn(&r).map(ApplyResponse::Txn);
        }
        if let Some(r) = req.compaction {
            return self.compaction(&r);
        }
        if let Some(r) = req.lease_grant {
            if no_space {
                return Err(EtcdError::NoSpace);
            }
            let ttl = self.applier.lessor.grant(&self.applier.backend, self.writer.batch(), r.id, r.ttl)?;
            return Ok(ApplyResponse::LeaseGrant(LeaseGrantResponse {
                header: header(self.writer.rev()),
                id: r.id,
                ttl,
                error: String::new(),
            }));
        }
        if let Some(r) = req.lease_revoke {
            // Revoking deletes the lease's keys: the client must be allowed to write each.
            check_lease_keys(auth, &self.applier.lessor, &origin, r.id)?;
            let keys = self.applier.lessor.revoke(&self.applier.backend, self.writer.batch(), r.id)?;
            let mut txn = self.writer.txn();
            for k in &keys {
                txn.delete_range(&KeyRange::single(k));
            }
            let rev = txn.end();
            return Ok(ApplyResponse::LeaseRevoke(LeaseRevokeResponse { header: header(rev) }));
        }
        if let Some(r) = req.cluster_member_attr_set {
            // A member publishing its name and client URLs (etcd's publish on start).
            let members = &self.applier.members;
            if let Some(mut m) = members.get(r.member_id) {
                let attrs = r.member_attributes.unwrap_or_default();
                m.name = attrs.name;
                m.client_ur_ls = attrs.client_urls;
                members.save(&self.applier.backend, self.writer.batch(), m);
            }
            return Ok(ApplyResponse::Published);
        }
        if let Some(r) = req.alarm {
            let mut resp = self.applier.alarms.apply(&self.applier.backend, self.writer.batch(), &r);
            resp.header = header(self.writer.rev());
            return Ok(ApplyResponse::Alarm(resp));
        }
        if req.range.is_some() {
            // Reads never go through raft here; a range in the log would come from a newer
            // peer and has no effect on state.
            return Err(EtcdError::Unimplemented("range through raft"));
        }
        Err(EtcdError::Unimplemented("this raft request type"))
    }

    /// The auth requests (etcd's `authApplierV3` checks, then its auth store).
    fn apply_auth(&mut self, req: InternalRaftRequest, origin: &Origin) -> Result<AuthResult, EtcdError> {
        let store = &*self.applier.auth;
        if let Some(r) = req.auth_user_get {
            // Anyone may read their own user.
            if !matches!(origin, Origin::Client(i) if i.username == r.name) {
                store.check_admin(origin)?;
            }
            return store.user_get(&r.name);
        }
        if let Some(r) = req.auth_role_get {
            // ... and the roles they hold.
            if !store.has_role(origin, &r.role) {
                store.check_admin(origin)?;
            }
            return store.role_get(&r.role);
        }
        if let Some(r) = req.authenticate {
            let id = req.header.as_ref().map_or(req.id, |h| h.id);
            return self.auth_writer().authenticate(&r.name, &r.simple_token, id);
        }
        store.check_admin(origin)?;
        if req.auth_status.is_some() {
            return Ok(store.status());
        }
        if req.auth_user_list.is_some() {
            return Ok(store.user_list());
        }
        if req.auth_role_list.is_some() {
            return Ok(store.role_list());
        }
        let mut w = self.auth_writer();
        if req.auth_enable.is_some() {
            return w.enable();
        }
        if req.auth_disable.is_some() {
            return w.disable();
        }
        if let Some(r) = req.auth_user_add {
            return w.user_add(&r);
        }
        if let Some(r) = req.auth_user_delete {
            return w.user_delete(&r.name);
        }
        if let Some(r) = req.auth_user_change_password {
            return w.user_change_password(&r);
        }
        if let Some(r) = req.auth_user_grant_role {
            return w.user_grant_role(&r);
        }
        if let Some(r) = req.auth_user_revoke_role {
            return w.user_revoke_role(&r);
        }
        if let Some(r) = req.auth_role_add {
            return w.role_add(&r.name);
        }
        if let Some(r) = req.auth_role_delete {
            return w.role_delete(&r.role);
        }
        if let Some(r) = req.auth_role_grant_permission {
            return w.role_grant_permission(&r);
        }
        if let Some(r) = req.auth_role_revoke_permission {
            return w.role_revoke_permission(&r);
        }
        Err(EtcdError::Unimplemented("this auth request type"))
    }

    fn auth_writer(&mut self) -> AuthWriter<'_> {
        AuthWriter { store: &self.applier.auth, backend: &self.applier.backend, batch: self.writer.batch() }
    }

    fn put(&mut self, r: &PutRequest) -> Result<PutResponse, EtcdError> {
        if r.lease != 0 && !self.applier.lessor.exists(r.lease) {
            return Err(EtcdError::LeaseNotFound);
        }
        let lessor = &self.applier.lessor;
        let mut txn = self.writer.txn();
        let resp = put_in_txn(lessor, &mut txn, r)?;
        txn.end();
        Ok(resp)
    }

    fn delete_range(&mut self, r: &DeleteRangeRequest) -> Result<DeleteRangeResponse, EtcdError> {
        let lessor = &self.applier.lessor;
        let mut txn = self.writer.txn();
        let resp = delete_in_txn(lessor, &mut txn, r)?;
        let rev = txn.end();
        Ok(DeleteRangeResponse { header: header(rev), ..resp })
    }

    fn txn(&mut self, r: &TxnRequest) -> Result<TxnResponse, EtcdError> {
        let lessor = &self.applier.lessor;
        let mut txn = self.writer.txn();
        // Which branch each (nested) transaction takes is decided up front, against the
        // state before the transaction, as etcd's compareToPath does.
        let mut path = Vec::new();
        compare_to_path(&txn, r, &mut path);
        check_txn(&txn, lessor, r, &mut path.iter())?;
        let mut resp = exec_txn(lessor, &mut txn, r, &mut path.iter())?;
        let rev = txn.end();
        resp.header = header(rev);
        Ok(resp)
    }

    fn compaction(&mut self, r: &CompactionRequest) -> ApplyResult {
        self.writer.compact(r.revision)?;
        let (tx, rx) = oneshot::channel();
        self.physical_done.push(tx);
        Ok(ApplyResponse::Compaction {
            resp: CompactionResponse { header: header(self.writer.rev()) },
            physical: rx,
        })
    }

    /// Ends the batch: the caller writes the batch, then calls [`Applier::publish`].
    pub fn finish(self) -> PendingPublish {
        PendingPublish { out: self.writer.finish(), physical_done: self.physical_done }
    }
}

/// A response header carrying only the revision; the server fills in the rest.
pub fn header(rev: i64) -> Option<ResponseHeader> {
    Some(ResponseHeader { revision: rev, ..Default::default() })
}

fn is_auth_request(r: &InternalRaftRequest) -> bool {
    r.auth_enable.is_some()
        || r.auth_disable.is_some()
        || r.auth_status.is_some()
        || r.authenticate.is_some()
        || r.auth_user_add.is_some()
        || r.auth_user_delete.is_some()
        || r.auth_user_get.is_some()
        || r.auth_user_change_password.is_some()
        || r.auth_user_grant_role.is_some()
        || r.auth_user_revoke_role.is_some()
        || r.auth_user_list.is_some()
        || r.auth_role_list.is_some()
        || r.auth_role_add.is_some()
        || r.auth_role_delete.is_some()
        || r.auth_role_get.is_some()
        || r.auth_role_grant_permission.is_some()
        || r.auth_role_revoke_permission.is_some()
}

/// A put needs write access to its key, read access too when it returns the previous
/// value, and write access to every key of the lease it attaches (etcd's
/// `checkLeasePuts`: revoking that lease will delete them).
fn check_put(auth: &AuthStore, lessor: &Lessor, origin: &Origin, r: &PutRequest) -> Result<(), EtcdError> {
    if !auth.is_enabled() {
        return Ok(());
    }
    auth.check_range(origin, &r.key, &[], Access::Write)?;
    if r.prev_kv {
        auth.check_range(origin, &r.key, &[], Access::Read)?;
    }
    if r.lease != 0 {
        check_lease_keys(auth, lessor, origin, r.lease)?;
    }
    Ok(())
}

fn check_delete(auth: &AuthStore, origin: &Origin, r: &DeleteRangeRequest) -> Result<(), EtcdError> {
    auth.check_range(origin, &r.key, &r.range_end, Access::Write)?;
    if r.prev_kv {
        auth.check_range(origin, &r.key, &r.range_end, Access::Read)?;
    }
    Ok(())
}

fn check_lease_keys(auth: &AuthStore, lessor: &Lessor, origin: &Origin, lease: i64) -> Result<(), EtcdError> {
    if !auth.is_enabled() {
        return Ok(());
    }
    let keys = lessor.status(lease).map(|s| s.keys).unwrap_or_default();
    auth.check_keys(origin, &keys, Access::Write)
}

/// A transaction needs read access to what it compares and the access of every
/// operation in both branches, whichever runs (etcd's `checkTxnReqsPermission`).
fn check_txn_auth(
    auth: &AuthStore,
    lessor: &Lessor,
    origin: &Origin,
    r: &TxnRequest,
) -> Result<(), EtcdError> {
    if !auth.is_enabled() {
        return Ok(());
    }
    for c in &r.compare {
        auth.check_range(origin, &c.key, &c.range_end, Access::Read)?;
    }
    for op in r.success.iter().chain(&r.failure) {
        match &op.request {
            Some(request_op::Request::RequestRange(q)) => {
                auth.check_range(origin, &q.key, &q.range_end, Access::Read)?
            }
            Some(request_op::Request::RequestPut(p)) => check_put(auth, lessor, origin, p)?,
            Some(request_op::Request::RequestDeleteRange(d)) => check_delete(auth, origin, d)?,
            Some(request_op::Request::RequestTxn(t)) => check_txn_auth(auth, lessor, origin, t)?,
            None => {}
        }
    }
    Ok(())
}

fn txn_has_put(r: &TxnRequest) -> bool {
    r.success.iter().chain(&r.failure).any(|op| match &op.request {
        Some(request_op::Request::RequestPut(_)) => true,
        Some(request_op::Request::RequestTxn(t)) => txn_has_put(t),
        _ => false,
    })
}

fn put_in_txn(
    lessor: &Lessor,
    txn: &mut TxnWriter<'_, '_>,
    r: &PutRequest,
) -> Result<PutResponse, EtcdError> {
    let mut value = r.value.clone();
    let mut lease = r.lease;
    let mut prev_kv = None;
    if r.ignore_value || r.ignore_lease || r.prev_kv {
        let prev = txn.get(&r.key)?;
        if (r.ignore_value || r.ignore_lease) && prev.is_none() {
            return Err(EtcdError::KeyNotFound);
        }
        if let Some(p) = &prev {
            if r.ignore_value {
                value = p.value.clone();
            }
            if r.ignore_lease {
                lease = p.lease;
            }
        }
        if r.prev_kv {
            prev_kv = prev;
        }
    }
    txn.put(&r.key, value, lease);
    if lease != 0 {
        lessor.attach(lease, &r.key);
    } else {
        lessor.detach(&r.key);
    }
    Ok(PutResponse { header: header(txn.main_rev()), prev_kv })
}

fn delete_in_txn(
    lessor: &Lessor,
    txn: &mut TxnWriter<'_, '_>,
    r: &DeleteRangeRequest,
) -> Result<DeleteRangeResponse, EtcdError> {
    let range = KeyRange::from_request(&r.key, &r.range_end);
    let prev_kvs = if r.prev_kv { txn.range(&range, RangeOptions::default())?.kvs } else { Vec::new() };
    let deleted = txn.delete_range(&range);
    for k in &deleted {
        lessor.detach(k);
    }
    let rev = if deleted.is_empty() { 0 } else { txn.main_rev() };
    Ok(DeleteRangeResponse { header: header(rev), deleted: deleted.len() as i64, prev_kvs })
}

/// A range, with etcd's sorting, filtering and limit rules.
pub fn range_in_txn(txn: &TxnWriter<'_, '_>, r: &RangeRequest) -> Result<RangeResponse, EtcdError> {
    range_with(r, |range, opts| Ok(txn.range(range, opts)?))
}

/// Serves a range request from any reader; `read` performs the store read.
pub fn range_with(
    r: &RangeRequest,
    read: impl FnOnce(&KeyRange, RangeOptions) -> Result<crate::mvcc::RangeResult, EtcdError>,
) -> Result<RangeResponse, EtcdError> {
    use range_request::{SortOrder, SortTarget};
    let sort_order = r.sort_order();
    let sort_target = r.sort_target();
    let filtered = r.min_mod_revision != 0
        || r.max_mod_revision != 0
        || r.min_create_revision != 0
        || r.max_create_revision != 0;
    // With sorting or filtering every key must be read before the limit applies; otherwise
    // one extra key tells whether there is more.
    let limit =
        if sort_order != SortOrder::None || filtered || r.limit <= 0 { 0 } else { r.limit as usize + 1 };
    let range = KeyRange::from_request(&r.key, &r.range_end);
    let opts = RangeOptions { rev: r.revision, limit, count_only: r.count_only };
    let result = read(&range, opts)?;
    let mut kvs = result.kvs;
    if filtered {
        kvs.retain(|kv| {
            (r.min_mod_revision == 0 || kv.mod_revision >= r.min_mod_revision)
                && (r.max_mod_revision == 0 || kv.mod_revision <= r.max_mod_revision)
                && (r.min_create_revision == 0 || kv.create_revision >= r.min_create_revision)
                && (r.max_create_revision == 0 || kv.create_revision <= r.max_create_revision)
        });
    }
    // Results come sorted by key; another target sorts ascending unless told otherwise.
    let order = if sort_target != SortTarget::Key && sort_order == SortOrder::None {
        SortOrder::Ascend
    } else {
        sort_order
    };
    if order != SortOrder::None {
        let key_of = |kv: &KeyValue| -> (i64, Vec<u8>) {
            match sort_target {
                SortTarget::Key => (0, kv.key.clone()),
                SortTarget::Version => (kv.version, Vec::new()),
                SortTarget::Create => (kv.create_revision, Vec::new()),
                SortTarget::Mod => (kv.mod_revision, Vec::new()),
                SortTarget::Value => (0, kv.value.clone()),
            }
        };
        kvs.sort_by(|a, b| {
            let o = key_of(a).cmp(&key_of(b));
            if order == SortOrder::Descend { o.reverse() } else { o }
        });
    }
    let mut more = false;
    if r.limit > 0 && kvs.len() > r.limit as usize {
        kvs.truncate(r.limit as usize);
        more = true;
    }
    if r.keys_only {
        for kv in &mut kvs {
            kv.value.clear();
        }
    }
    Ok(RangeResponse { header: header(result.rev), kvs, more, count: result.count as i64 })
}

/// Records, in pre-order, whether each (nested) transaction's compares hold.
fn compare_to_path(txn: &TxnWriter<'_, '_>, r: &TxnRequest, path: &mut Vec<bool>) {
    let ok = r.compare.iter().all(|c| apply_compare(txn, c));
    path.push(ok);
    let ops = if ok { &r.success } else { &r.failure };
    for op in ops {
        if let Some(request_op::Request::RequestTxn(t)) = &op.request {
            compare_to_path(txn, t, path);
        }
    }
}

fn apply_compare(txn: &TxnWriter<'_, '_>, c: &Compare) -> bool {
    let range = KeyRange::from_request(&c.key, &c.range_end);
    let Ok(rr) = txn.range(&range, RangeOptions::default()) else { return false };
    if rr.kvs.is_empty() {
        // A missing value cannot be compared: nil and "" look the same on the wire.
        if c.target() == compare::CompareTarget::Value {
            return false;
        }
        return compare_kv(c, &KeyValue::default());
    }
    rr.kvs.iter().all(|kv| compare_kv(c, kv))
}

fn compare_kv(c: &Compare, kv: &KeyValue) -> bool {
    use compare::{CompareResult, CompareTarget, TargetUnion};
    let int = |v: i64| -> i64 {
        match &c.target_union {
            Some(
                TargetUnion::Version(x)
                | TargetUnion::CreateRevision(x)
                | TargetUnion::ModRevision(x)
                | TargetUnion::Lease(x),
            ) => v.cmp(x) as i64,
            _ => v.cmp(&0) as i64,
        }
    };
    let ord: i64 = match c.target() {
        CompareTarget::Value => {
            let want: &[u8] = match &c.target_union {
                Some(TargetUnion::Value(v)) => v,
                _ => &[],
            };
            kv.value.as_slice().cmp(want) as i64
        }
        CompareTarget::Create => int(kv.create_revision),
        CompareTarget::Mod => int(kv.mod_revision),
        CompareTarget::Version => int(kv.version),
        CompareTarget::Lease => int(kv.lease),
    };
    let ord = ord.cmp(&0);
    match c.result() {
        CompareResult::Equal => ord == Ordering::Equal,
        CompareResult::NotEqual => ord != Ordering::Equal,
        CompareResult::Greater => ord == Ordering::Greater,
        CompareResult::Less => ord == Ordering::Less,
    }
}

/// Checks every operation on the chosen path before anything is written.
fn check_txn<'p>(
    txn: &TxnWriter<'_, '_>,
    lessor: &Lessor,
    r: &TxnRequest,
    path: &mut impl Iterator<Item = &'p bool>,
) -> Result<(), EtcdError> {
    let ok = *path.next().expect("one path entry per transaction");
    let ops = if ok { &r.success } else { &r.failure };
    for op in ops {
        match &op.request {
            Some(request_op::Request::RequestPut(p)) => {
                if (p.ignore_value || p.ignore_lease) && txn.get(&p.key)?.is_none() {
                    return Err(EtcdError::KeyNotFound);
                }
                if p.lease != 0 && !lessor.exists(p.lease) {
                    return Err(EtcdError::LeaseNotFound);
                }
            }
            Some(request_op::Request::RequestRange(q)) => {
                if q.revision > txn.read_rev() {
                    return Err(EtcdError::FutureRev);
                }
                if q.revision > 0 && q.revision < txn.compact_rev() {
                    return Err(EtcdError::Compacted);
                }
            }
            Some(request_op::Request::RequestTxn(t)) => check_txn(txn, lessor, t, path)?,
            _ => {}
        }
    }
    Ok(())
}

fn exec_txn<'p>(
    lessor: &Lessor,
    txn: &mut TxnWriter<'_, '_>,
    r: &TxnRequest,
    path: &mut impl Iterator<Item = &'p bool>,
) -> Result<TxnResponse, EtcdError> {
    let ok = *path.next().expect("one path entry per transaction");
    let ops: &[RequestOp] = if ok { &r.success } else { &r.failure };
    let mut responses = Vec::with_capacity(ops.len());
    for op in ops {
        let resp = match &op.request {
            Some(request_op::Request::RequestRange(q)) => {
                response_op::Response::ResponseRange(range_in_txn(txn, q)?)
            }
            Some(request_op::Request::RequestPut(p)) => {
                response_op::Response::ResponsePut(put_in_txn(lessor, txn, p)?)
            }
            Some(request_op::Request::RequestDeleteRange(d)) => {
                response_op::Response::ResponseDeleteRange(delete_in_txn(lessor, txn, d)?)
            }
            Some(request_op::Request::RequestTxn(t)) => {
                response_op::Response::ResponseTxn(exec_txn(lessor, txn, t, path)?)
            }
            None => continue,
        };
        responses.push(ResponseOp { response: Some(resp) });
    }
    Ok(TxnResponse { header: None, succeeded: ok, responses })
}
