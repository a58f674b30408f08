//! The CRI client: `runtime.v1` RuntimeService and ImageService over the runtime's unix
//! socket, each call bounded by `runtimeRequestTimeout`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use hyper_util::rt::TokioIo;
use proto::cri::v1 as cri;
use proto::cri::v1::image_service_client::ImageServiceClient;
use proto::cri::v1::runtime_service_client::RuntimeServiceClient;
use tonic::transport::{Channel, Endpoint};

pub use proto::cri::v1::*;

/// Label keys the kubelet puts on sandboxes and containers (upstream's names), by which it
/// finds them again after a restart.
pub const POD_NAME_LABEL: &str = "io.kubernetes.pod.name";
pub const POD_NAMESPACE_LABEL: &str = "io.kubernetes.pod.namespace";
pub const POD_UID_LABEL: &str = "io.kubernetes.pod.uid";
pub const CONTAINER_NAME_LABEL: &str = "io.kubernetes.container.name";
/// Annotations on containers: the spec hash (a changed spec restarts the container), the
/// restart count and the grace period to use when the kubelet restarts.
pub const CONTAINER_HASH_ANNOTATION: &str = "io.kubernetes.container.hash";
pub const CONTAINER_RESTART_COUNT_ANNOTATION: &str = "io.kubernetes.container.restartCount";
pub const TERMINATION_GRACE_ANNOTATION: &str = "io.kubernetes.pod.terminationGracePeriod";
pub const CONTAINER_TYPE_LABEL: &str = "io.kubernetes.kubelet.type";

/// A failed CRI call.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("connecting to the container runtime at {path}: {source}")]
    Connect { path: PathBuf, source: tonic::transport::Error },
    #[error("CRI {call}: {status}")]
    Call { call: &'static str, status: tonic::Status },
}

impl Error {
    /// The gRPC code of a failed call (`NotFound` matters: the object is gone already).
    pub fn code(&self) -> tonic::Code {
        match self {
            Error::Connect { .. } => tonic::Code::Unavailable,
            Error::Call { status, .. } => status.code(),
        }
    }
}

/// Both CRI services on one connection.
#[derive(Clone)]
pub struct Runtime {
    runtime: RuntimeServiceClient<Channel>,
    images: ImageServiceClient<Channel>,
    timeout: Duration,
}

/// Messages from the runtime (image lists, container status with logs paths) can be large;
/// the kubelet's own limit upstream is 16 MiB.
const MAX_MESSAGE: usize = 16 << 20;

impl Runtime {
    /// Dials `socket` lazily: the runtime may come up after the kubelet, and every call
    /// reconnects if it went away.
    pub fn connect(socket: &Path, timeout: Duration) -> Result<Self, Error> {
        let path = socket.to_path_buf();
        // The URI is a placeholder: the connector always dials the socket.
        let channel = Endpoint::from_static("http://cri.sock")
            .connect_timeout(Duration::from_secs(5))
            .connect_with_connector_lazy(tower::service_fn(move |_: http::Uri| {
                let path = path.clone();
                async move { tokio::net::UnixStream::connect(path).await.map(TokioIo::new) }
            }));
        Ok(Self {
            runtime: RuntimeServiceClient::new(channel.clone())
                .max_decoding_message_size(MAX_MESSAGE)
                .max_encoding_message_size(MAX_MESSAGE),
            images: ImageServiceClient::new(channel).max_decoding_message_size(MAX_MESSAGE),
            timeout,
        })
    }

    fn req<T>(&self, msg: T) -> tonic::Request<T> {
        let mut r = tonic::Request::new(msg);
        r.set_timeout(self.timeout);
        r
    }

    pub async fn version(&self) -> Result<VersionResponse, Error> {
        let r = self.runtime.clone().version(self.req(VersionRequest { version: "v1".into() })).await;
        r.map(|r| r.into_inner()).map_err(|status| Error::Call { call: "Version", status })
    }

    pub async fn status(&self) -> Result<StatusResponse, Error> {
        let r = self.runtime.clone().status(self.req(StatusRequest { verbose: false })).await;
        r.map(|r| r.into_inner()).map_err(|status| Error::Call { call: "Status", status })
    }

    pub async fn run_pod_sandbox(&self, config: PodSandboxConfig) -> Result<String, Error> {
        // Sandbox creation runs CNI; it gets the whole timeout (upstream: 4 min default).
        let req = RunPodSandboxRequest { config: Some(config), runtime_handler: String::new() };
        let r = self.runtime.clone().run_pod_sandbox(self.req(req)).await;
        r.map(|r| r.into_inner().pod_sandbox_id)
            .map_err(|status| Error::Call { call: "RunPodSandbox", status })
    }

    pub async fn stop_pod_sandbox(&self, id: &str) -> Result<(), Error> {
        let req = StopPodSandboxRequest { pod_sandbox_id: id.into() };
        let r = self.runtime.clone().stop_pod_sandbox(self.req(req)).await;
        r.map(|_| ()).map_err(|status| Error::Call { call: "StopPodSandbox", status })
    }

    pub async fn remove_pod_sandbox(&self, id: &str) -> Result<(), Error> {
        let req = RemovePodSandboxRequest { pod_sandbox_id: id.into() };
        let r = self.runtime.clone().remove_pod_sandbox(self.req(req)).await;
        r.map(|_| ()).map_err(|status| Error::Call { call: "RemovePodSandbox", status })
    }

    pub async fn pod_sandbox_status(&self, id: &str) -> Result<PodSandboxStatus, Error> {
        let req = PodSandboxStatusRequest { pod_sandbox_id: id.into(), verbose: false };
        let r = self.runtime.clone().pod_sandbox_status(self.req(req)).await;
        r.map(|r| r.into_inner().status.unwrap_or_default())
            .map_err(|status| Error::Call { call: "PodSandboxStatus", status })
    }

    pub async fn list_pod_sandboxes(&self) -> Result<Vec<PodSandbox>, Error> {
        let r = self.runtime.clone().list_pod_sandbox(self.req(ListPodSandboxRequest { filter: None })).await;
        r.map(|r| r.into_inner().items).map_err(|status| Error::Call { call: "ListPodSandbox", status })
    }

    pub async fn create_container(
        &self,
        sandbox_id: &str,
        config: ContainerConfig,
        sandbox_config: PodSandboxConfig,
    ) -> Result<String, Error> {
        let req = CreateContainerRequest {
            pod_sandbox_id: sandbox_id.into(),
            config: Some(config),
            sandbox_config: Some(sandbox_config),
        };
        let r = self.runtime.clone().create_container(self.req(req)).await;
        r.map(|r| r.into_inner().container_id)
            .map_err(|status| Error::Call { call: "CreateContainer", status })
    }

    pub async fn start_container(&self, id: &str) -> Result<(), Error> {
        let req = StartContainerRequest { container_id: id.into() };
        let r = self.runtime.clone().start_container(self.req(req)).await;
        r.map(|_| ()).map_err(|status| Error::Call { call: "StartContainer", status })
    }

    /// Stops with SIGTERM, then SIGKILL after `grace` seconds (done by the runtime).
    pub async fn stop_container(&self, id: &str, grace: i64) -> Result<(), Error> {
        let mut req = tonic::Request::new(StopContainerRequest { container_id: id.into(), timeout: grace });
        // The call itself lasts up to the grace period.
        req.set_timeout(self.timeout + Duration::from_secs(grace.max(0) as u64));
        let r = self.runtime.clone().stop_container(req).await;
        r.map(|_| ()).map_err(|status| Error::Call { call: "StopContainer", status })
    }

    pub async fn remove_container(&self, id: &str) -> Result<(), Error> {
        let req = RemoveContainerRequest { container_id: id.into() };
        let r = self.runtime.clone().remove_container(self.req(req)).await;
        r.map(|_| ()).map_err(|status| Error::Call { call: "RemoveContainer", status })
    }

    pub async fn list_containers(&self) -> Result<Vec<Container>, Error> {
        let r = self.runtime.clone().list_containers(self.req(ListContainersRequest { filter: None })).await;
        r.map(|r| r.into_inner().containers).map_err(|status| Error::Call { call: "ListContainers", status })
    }

    pub async fn container_status(&self, id: &str) -> Result<ContainerStatus, Error> {
        let req = ContainerStatusRequest { container_id: id.into(), verbose: false };
        let r = self.runtime.clone().container_status(self.req(req)).await;
        r.map(|r| r.into_inner().status.unwrap_or_default())
            .map_err(|status| Error::Call { call: "ContainerStatus", status })
    }

    pub async fn exec_sync(
        &self,
        id: &str,
        cmd: Vec<String>,
        timeout: Duration,
    ) -> Result<ExecSyncResponse, Error> {
        let mut req = tonic::Request::new(ExecSyncRequest {
            container_id: id.into(),
            cmd,
            timeout: timeout.as_secs().max(1) as i64,
        });
        req.set_timeout(timeout + Duration::from_secs(2));
        let r = self.runtime.clone().exec_sync(req).await;
        r.map(|r| r.into_inner()).map_err(|status| Error::Call { call: "ExecSync", status })
    }

    /// The runtime's one-time streaming URL for running a command in a container (CRI Exec).
    pub async fn exec(&self, req: ExecRequest) -> Result<String, Error> {
        let r = self.runtime.clone().exec(self.req(req)).await;
        r.map(|r| r.into_inner().url).map_err(|status| Error::Call { call: "Exec", status })
    }

    /// The runtime's one-time streaming URL for attaching to a container's process (CRI Attach).
    pub async fn attach(&self, req: AttachRequest) -> Result<String, Error> {
        let r = self.runtime.clone().attach(self.req(req)).await;
        r.map(|r| r.into_inner().url).map_err(|status| Error::Call { call: "Attach", status })
    }

    /// The runtime's one-time streaming URL for forwarding ports into a sandbox (CRI PortForward).
    pub async fn port_forward(&self, req: PortForwardRequest) -> Result<String, Error> {
        let r = self.runtime.clone().port_forward(self.req(req)).await;
        r.map(|r| r.into_inner().url).map_err(|status| Error::Call { call: "PortForward", status })
    }

    /// The image's id when it is present.
    pub async fn image_status(&self, image: &str) -> Result<Option<cri::Image>, Error> {
        let req = ImageStatusRequest { image: Some(spec(image)), verbose: false };
        let r = self.images.clone().image_status(self.req(req)).await;
        r.map(|r| r.into_inner().image).map_err(|status| Error::Call { call: "ImageStatus", status })
    }

    pub async fn pull_image(&self, image: &str, sandbox: &PodSandboxConfig) -> Result<String, Error> {
        let req =
            PullImageRequest { image: Some(spec(image)), auth: None, sandbox_config: Some(sandbox.clone()) };
        let r = self.images.clone().pull_image(self.req(req)).await;
        r.map(|r| r.into_inner().image_ref).map_err(|status| Error::Call { call: "PullImage", status })
    }

    /// Resource usage of every container (CPU, memory, writable layer), for `/stats/summary`.
    pub async fn list_container_stats(&self) -> Result<Vec<ContainerStats>, Error> {
        let r = self
            .runtime
            .clone()
            .list_container_stats(self.req(ListContainerStatsRequest { filter: None }))
            .await;
        r.map(|r| r.into_inner().stats).map_err(|status| Error::Call { call: "ListContainerStats", status })
    }

    /// Usage of the filesystems images are stored on.
    pub async fn image_fs_info(&self) -> Result<ImageFsInfoResponse, Error> {
        let r = self.images.clone().image_fs_info(self.req(ImageFsInfoRequest {})).await;
        r.map(|r| r.into_inner()).map_err(|status| Error::Call { call: "ImageFsInfo", status })
    }

    pub async fn list_images(&self) -> Result<Vec<cri::Image>, Error> {
        let r = self.images.clone().list_images(self.req(ListImagesRequest { filter: None })).await;
        r.map(|r| r.into_inner().images).map_err(|status| Error::Call { call: "ListImages", status })
    }
}

fn spec(image: &str) -> ImageSpec {
    ImageSpec { image: image.into(), user_specified_image: image.into(), ..Default::default() }
}
