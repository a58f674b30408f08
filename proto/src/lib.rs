//! Protocol buffer definitions shared by the components: the etcd v3 API and the CRI.
//!
//! The `.proto` files under `proto/` mirror upstream etcd v3.5 (`go.etcd.io/etcd/api/v3`)
//! with the same package, service, message names and field numbers, so real etcd clients
//! (etcdctl, clientv3) interoperate with our etcd. `build.rs` generates prost messages and
//! tonic clients/servers; each proto package becomes a module at the crate root, which is the
//! layout the generated code expects (`super::mvccpb`, `super::authpb`, `super::membershippb`).

/// `mvccpb`: `KeyValue` and `Event`, the MVCC store's data model.
#[allow(clippy::all, clippy::pedantic, missing_docs, rustdoc::all)]
pub mod mvccpb {
    tonic::include_proto!("mvccpb");
}

/// `authpb`: users, roles and permissions as stored by the auth store.
#[allow(clippy::all, clippy::pedantic, missing_docs, rustdoc::all)]
pub mod authpb {
    tonic::include_proto!("authpb");
}

/// `membershippb`: cluster membership records carried in raft entries.
#[allow(clippy::all, clippy::pedantic, missing_docs, rustdoc::all)]
pub mod membershippb {
    tonic::include_proto!("membershippb");
}

/// `etcdserverpb`: the v3 gRPC services (KV, Watch, Lease, Cluster, Maintenance, Auth), their
/// messages, and `InternalRaftRequest`, the raft entry payload.
#[allow(clippy::all, clippy::pedantic, missing_docs, rustdoc::all)]
pub mod etcdserverpb {
    tonic::include_proto!("etcdserverpb");
}

/// `etcdpeer`: this project's protocol between etcd members (raft messages, snapshots,
/// leader-only lease calls).
#[allow(clippy::all, clippy::pedantic, missing_docs, rustdoc::all)]
pub mod etcdpeer {
    tonic::include_proto!("etcdpeer");
}

/// `runtime.v1`: the Container Runtime Interface (RuntimeService, ImageService) the kubelet
/// speaks to containerd over a unix socket.
pub mod cri {
    #[allow(clippy::all, clippy::pedantic, missing_docs, rustdoc::all)]
    pub mod v1 {
        tonic::include_proto!("runtime.v1");
    }
}

/// `grpc.health.v1`: the gRPC health checking protocol, which the kubelet's gRPC probes call.
pub mod grpc {
    pub mod health {
        #[allow(clippy::all, clippy::pedantic, missing_docs, rustdoc::all)]
        pub mod v1 {
            tonic::include_proto!("grpc.health.v1");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::etcdserverpb::*;
    use prost::Message;

    #[test]
    fn range_request_wire_format() {
        let req = RangeRequest { key: b"a".to_vec(), ..Default::default() };
        let bytes = req.encode_to_vec();
        assert_eq!(bytes, [0x0a, 0x01, b'a']);
        assert_eq!(RangeRequest::decode(bytes.as_slice()).unwrap(), req);

        // range_end = 2 (0x12), limit = 3 (0x18), sort_order = 5 (0x28), sort_target = 6 (0x30).
        let req = RangeRequest {
            key: b"a".to_vec(),
            range_end: b"b".to_vec(),
            limit: 1,
            sort_order: range_request::SortOrder::Descend as i32,
            sort_target: range_request::SortTarget::Mod as i32,
            ..Default::default()
        };
        let bytes = req.encode_to_vec();
        assert_eq!(bytes, [0x0a, 0x01, b'a', 0x12, 0x01, b'b', 0x18, 0x01, 0x28, 0x02, 0x30, 0x03]);
        assert_eq!(RangeRequest::decode(bytes.as_slice()).unwrap(), req);
    }

    #[test]
    fn put_request_lease_tag() {
        let req = PutRequest { lease: 5, ..Default::default() };
        assert_eq!(req.encode_to_vec(), [0x18, 0x05]);
    }

    #[test]
    fn compare_range_end_is_field_64() {
        let cmp = Compare { range_end: b"z".to_vec(), ..Default::default() };
        // Field 64, wire type 2 -> varint (64 << 3 | 2) = 514 = [0x82, 0x04].
        assert_eq!(cmp.encode_to_vec(), [0x82, 0x04, 0x01, b'z']);
    }

    #[test]
    fn watch_create_request_wire_format() {
        let req = WatchRequest {
            request_union: Some(watch_request::RequestUnion::CreateRequest(WatchCreateRequest {
                key: b"k".to_vec(),
                prev_kv: true,
                ..Default::default()
            })),
        };
        let bytes = req.encode_to_vec();
        // create_request = 1 (0x0a), length 5: key = 1 (0x0a 0x01 'k'), prev_kv = 6 (0x30 0x01).
        assert_eq!(bytes, [0x0a, 0x05, 0x0a, 0x01, b'k', 0x30, 0x01]);
        let decoded = WatchRequest::decode(bytes.as_slice()).unwrap();
        assert_eq!(decoded, req);
        match decoded.request_union {
            Some(watch_request::RequestUnion::CreateRequest(c)) => {
                assert_eq!(c.key, b"k");
                assert!(c.prev_kv);
            }
            other => panic!("unexpected request_union: {other:?}"),
        }
    }

    #[test]
    fn internal_raft_request_header_is_field_100() {
        let req = InternalRaftRequest {
            header: Some(RequestHeader { id: 7, ..Default::default() }),
            ..Default::default()
        };
        // Field 100, wire type 2 -> varint (100 << 3 | 2) = 802 = [0xa2, 0x06].
        assert_eq!(req.encode_to_vec(), [0xa2, 0x06, 0x02, 0x08, 0x07]);
    }
}
