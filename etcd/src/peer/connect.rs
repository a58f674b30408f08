//! Channels to peers: HTTP/2 over TCP, or over TLS with this member's peer certificate, and
//! every call stamped with the cluster and member id so the receiver can refuse strangers.

use std::sync::Arc;
use std::time::Duration;

use proto::etcdpeer::peer_client;
use tonic::metadata::MetadataValue;
use tonic::service::Interceptor;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Channel, Endpoint, Uri};
use tonic::{Request, Status};

/// Metadata keys carrying the caller's identity.
pub const CLUSTER_ID_KEY: &str = "x-etcd-cluster-id";
pub const MEMBER_ID_KEY: &str = "x-etcd-member-id";

/// Messages between peers may carry raft batches and snapshot chunks well past gRPC's
/// 4 MiB default.
pub const MAX_PEER_MESSAGE: usize = 64 << 20;

/// Who is calling.
#[derive(Clone, Copy, Debug)]
pub struct Identity {
    pub cluster_id: u64,
    pub member_id: u64,
}

impl Interceptor for Identity {
    fn call(&mut self, mut req: Request<()>) -> Result<Request<()>, Status> {
        let md = req.metadata_mut();
        let hex = |v: u64| MetadataValue::try_from(format!("{v:x}")).expect("hex is valid metadata");
        md.insert(CLUSTER_ID_KEY, hex(self.cluster_id));
        md.insert(MEMBER_ID_KEY, hex(self.member_id));
        Ok(req)
    }
}

pub type PeerClient = peer_client::PeerClient<InterceptedService<Channel, Identity>>;

#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error("member has no peer URL")]
    NoUrl,
    #[error("peer URL {0}: {1}")]
    BadUrl(String, String),
}

/// A lazily connecting client for a peer reachable at `urls` (the first one is used).
/// Must be called with a runtime available (`runtime` is entered for it).
pub fn client(
    urls: &[String],
    tls: Option<Arc<rustls::ClientConfig>>,
    identity: Identity,
    runtime: &tokio::runtime::Handle,
) -> Result<PeerClient, ConnectError> {
    let url = urls.first().ok_or(ConnectError::NoUrl)?;
    let parsed = url::Url::parse(url).map_err(|e| ConnectError::BadUrl(url.clone(), e.to_string()))?;
    let host =
        parsed.host_str().ok_or_else(|| ConnectError::BadUrl(url.clone(), "no host".into()))?.to_string();
    let port =
        parsed.port_or_known_default().ok_or_else(|| ConnectError::BadUrl(url.clone(), "no port".into()))?;
    // The scheme tonic sees is always http: TLS, when configured, is done by the connector.
    let endpoint = Endpoint::from_shared(format!("http://{host}:{port}"))
        .map_err(|e| ConnectError::BadUrl(url.clone(), e.to_string()))?
        .connect_timeout(Duration::from_secs(2))
        .tcp_nodelay(true)
        .http2_keep_alive_interval(Duration::from_secs(5))
        .keep_alive_timeout(Duration::from_secs(5));
    let _guard = runtime.enter();
    let channel = match (parsed.scheme(), tls) {
        ("https", Some(cfg)) => {
            let connector =
                tower::service_fn(move |uri: Uri| component_base::tls::connect(cfg.clone(), uri, 443));
            endpoint.connect_with_connector_lazy(connector)
        }
        ("https", None) => {
            return Err(ConnectError::BadUrl(
                url.clone(),
                "https peer URL but no --peer-trusted-ca-file / certificate".into(),
            ));
        }
        _ => endpoint.connect_lazy(),
    };
    Ok(peer_client::PeerClient::with_interceptor(channel, identity)
        .max_decoding_message_size(MAX_PEER_MESSAGE)
        .max_encoding_message_size(MAX_PEER_MESSAGE))
}
