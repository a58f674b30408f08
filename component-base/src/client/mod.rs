//! The API client every component uses to reach kube-apiserver: kube-rs, configured from
//! `--kubeconfig` (and `--master`) or, without one, from the in-cluster service account,
//! as client-go's `BuildConfigFromFlags`.

use std::path::Path;

pub mod ratelimit;

/// Why no client could be built.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The kubeconfig file could not be read or parsed.
    #[error("reading kubeconfig {path}: {source}")]
    Kubeconfig {
        /// The file named by `--kubeconfig`.
        path: String,
        /// What kube-rs reported.
        #[source]
        source: kube::config::KubeconfigError,
    },
    /// Neither a kubeconfig nor the in-cluster environment was usable.
    #[error("no --kubeconfig given and not running in a cluster: {0}")]
    InCluster(#[source] kube::config::InClusterError),
    /// `--master` is not a URL.
    #[error("--master {master}: {source}")]
    Master {
        /// The flag's value.
        master: String,
        /// Why it does not parse.
        #[source]
        source: http::uri::InvalidUri,
    },
    /// The HTTP client could not be built from the configuration.
    #[error("building the API client: {0}")]
    Client(#[source] kube::Error),
}

/// A client for the API server named by `kubeconfig` (its current context), with `master`
/// overriding the server URL when given; without a kubeconfig, the in-cluster config.
pub async fn from_flags(kubeconfig: Option<&Path>, master: Option<&str>) -> Result<kube::Client, Error> {
    kube::Client::try_from(config_from_flags(kubeconfig, master).await?).map_err(Error::Client)
}

/// As [`from_flags`], with client-go's client-side rate limit (`--kube-api-qps`,
/// `--kube-api-burst`) on every request this client starts.
pub async fn from_flags_rate_limited(
    kubeconfig: Option<&Path>,
    master: Option<&str>,
    qps: f32,
    burst: u32,
) -> Result<kube::Client, Error> {
    let config = config_from_flags(kubeconfig, master).await?;
    let builder = kube::client::ClientBuilder::try_from(config).map_err(Error::Client)?;
    Ok(builder.with_layer(&ratelimit::RateLimitLayer::new(f64::from(qps), burst)).build())
}

/// The client configuration [`from_flags`] builds its client from.
pub async fn config_from_flags(
    kubeconfig: Option<&Path>,
    master: Option<&str>,
) -> Result<kube::Config, Error> {
    let mut config = match kubeconfig {
        Some(path) => {
            let kc = kube::config::Kubeconfig::read_from(path)
                .map_err(|source| Error::Kubeconfig { path: path.display().to_string(), source })?;
            kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
                .await
                .map_err(|source| Error::Kubeconfig { path: path.display().to_string(), source })?
        }
        None => kube::Config::incluster().map_err(Error::InCluster)?,
    };
    if let Some(master) = master {
        config.cluster_url =
            master.parse().map_err(|source| Error::Master { master: master.to_owned(), source })?;
    }
    // Watches here are long-lived and lists of a large cluster are slow: no read timeout.
    config.read_timeout = None;
    Ok(config)
}
