//! `--use-service-account-credentials`: each controller talks to the API server as its own
//! service account in `kube-system` (upstream's `SAControllerClientBuilder`), so RBAC gives
//! each no more than its `system:controller:<name>` role. The manager's own identity only
//! creates those accounts and asks for their tokens through the TokenRequest API; shared
//! informers keep using it, as upstream's do. Tokens live in files that kube-rs re-reads
//! every minute, and are renewed well before they expire.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use component_base::shutdown::Shutdown;
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::api::{Api, PostParams};

const NAMESPACE: &str = "kube-system";
/// Lifetime asked for each token; renewal starts at 80% of it, as client-go's
/// token source refreshes ahead of expiry.
const TOKEN_SECONDS: i64 = 3600;
const RENEW_AFTER: Duration = Duration::from_secs(TOKEN_SECONDS as u64 * 8 / 10);
const RETRY: Duration = Duration::from_secs(10);

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("service account {NAMESPACE}/{name}: {source}")]
    Api {
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error("writing the token of {name}: {source}")]
    Write {
        name: String,
        #[source]
        source: std::io::Error,
    },
    #[error("the token request for {0} returned no token")]
    NoToken(String),
}

pub struct ServiceAccountClients {
    root: kube::Client,
    config: kube::Config,
    qps: f32,
    burst: u32,
    dir: tempfile::TempDir,
    shutdown: Shutdown,
    built: tokio::sync::Mutex<HashMap<String, kube::Client>>,
}

impl ServiceAccountClients {
    /// `root` is the manager's own client; `config` the configuration it was built from,
    /// whose server and CA the per-controller clients share.
    pub fn new(
        root: kube::Client,
        config: kube::Config,
        qps: f32,
        burst: u32,
        shutdown: Shutdown,
    ) -> std::io::Result<Self> {
        let dir = tempfile::Builder::new().prefix("kube-controller-manager-tokens").tempdir()?;
        Ok(Self { root, config, qps, burst, dir, shutdown, built: Default::default() })
    }

    /// The client acting as `kube-system/<name>`; one per account, shared by the
    /// controllers that use the same account (node IPAM and node lifecycle).
    pub async fn client(&self, name: &str) -> Result<kube::Client, Error> {
        let mut built = self.built.lock().await;
        if let Some(c) = built.get(name) {
            return Ok(c.clone());
        }
        let accounts: Api<ServiceAccount> = Api::namespaced(self.root.clone(), NAMESPACE);
        ensure_account(&accounts, name).await?;
        let path = self.dir.path().join(format!("{name}.token"));
        write_token(&path, &request_token(&accounts, name).await?)
            .map_err(|source| Error::Write { name: name.into(), source })?;
        tokio::spawn(renew(accounts, name.to_string(), path.clone(), self.shutdown.clone()));
        let mut config = self.config.clone();
        // Only the token: the manager's client certificate (if any) must not be presented.
        config.auth_info =
            kube::config::AuthInfo { token_file: Some(path.display().to_string()), ..Default::default() };
        let client = kube::client::ClientBuilder::try_from(config)
            .map_err(|source| Error::Api { name: name.into(), source })?
            .with_layer(&component_base::client::ratelimit::RateLimitLayer::new(
                f64::from(self.qps),
                self.burst,
            ))
            .build();
        built.insert(name.to_string(), client.clone());
        Ok(client)
    }
}

async fn ensure_account(accounts: &Api<ServiceAccount>, name: &str) -> Result<(), Error> {
    match accounts.get_opt(name).await {
        Ok(Some(_)) => return Ok(()),
        Ok(None) => {}
        Err(source) => return Err(Error::Api { name: name.into(), source }),
    }
    let mut sa = ServiceAccount::default();
    sa.metadata.name = Some(name.to_string());
    match accounts.create(&PostParams::default(), &sa).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
        Err(source) => Err(Error::Api { name: name.into(), source }),
    }
}

async fn request_token(accounts: &Api<ServiceAccount>, name: &str) -> Result<String, Error> {
    let req = TokenRequest {
        spec: TokenRequestSpec { expiration_seconds: Some(TOKEN_SECONDS), ..Default::default() },
        ..Default::default()
    };
    let resp = accounts
        .create_token_request(name, &PostParams::default(), &req)
        .await
        .map_err(|source| Error::Api { name: name.into(), source })?;
    resp.status.map(|s| s.token).filter(|t| !t.is_empty()).ok_or_else(|| Error::NoToken(name.into()))
}

/// Replaces the token file in one step, so kube-rs never reads half a token.
fn write_token(path: &Path, token: &str) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let tmp: PathBuf = path.with_extension("tmp");
    let mut f = std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(&tmp)?;
    f.write_all(token.as_bytes())?;
    f.sync_all()?;
    std::fs::rename(&tmp, path)
}

async fn renew(accounts: Api<ServiceAccount>, name: String, path: PathBuf, shutdown: Shutdown) {
    let mut wait = RENEW_AFTER;
    loop {
        tokio::select! {
            () = shutdown.wait() => return,
            () = tokio::time::sleep(wait) => {}
        }
        wait = match request_token(&accounts, &name).await.and_then(|t| {
            write_token(&path, &t).map_err(|source| Error::Write { name: name.clone(), source })
        }) {
            Ok(()) => RENEW_AFTER,
            Err(e) => {
                tracing::warn!(account = %name, error = %e, "renewing the controller's token");
                RETRY
            }
        };
    }
}
