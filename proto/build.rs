//! Generates the etcd v3 API types (prost) and gRPC services (tonic) from `proto/`, and
//! the peer protocol between this project's etcd members, the CRI (`runtime.v1`) and the
//! gRPC health protocol (`grpc.health.v1`).

use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protoc = protoc_bin_vendored::protoc_bin_path()?;
    // SAFETY: build scripts are single-threaded at this point; prost-build reads PROTOC.
    unsafe { std::env::set_var("PROTOC", protoc) };

    // Read at run time, not with env!(): cargo may reuse this compiled build script for a
    // clone at another path (CI builds a fresh clone into the shared target directory).
    let root = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?).join("proto");
    println!("cargo:rerun-if-changed={}", root.display());

    let protos = [
        "etcd/api/mvccpb/kv.proto",
        "etcd/api/authpb/auth.proto",
        "etcd/api/membershippb/membership.proto",
        "etcd/api/etcdserverpb/etcdserver.proto",
        "etcd/api/etcdserverpb/rpc.proto",
        "etcd/api/etcdserverpb/raft_internal.proto",
        "k8srs/etcdpeer.proto",
    ]
    .map(|p| root.join(p));

    tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        .compile_protos(&protos, &[root.clone()])?;

    // The CRI: the kubelet is its client; the server side is generated too so tests can
    // stand in a runtime where containerd cannot run.
    // The gRPC health protocol the kubelet's gRPC probes call (the server side is for tests).
    let node_protos = [root.join("cri/runtime/v1/api.proto"), root.join("grpc/health/v1/health.proto")];
    tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        .compile_protos(&node_protos, &[root])?;
    Ok(())
}
