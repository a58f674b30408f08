//! Leader election on a `coordination.k8s.io/v1` Lease, with client-go's semantics: a
//! candidate takes the Lease when it is free or its holder has not renewed it for a whole
//! lease duration *as observed on the candidate's own clock* (so clock skew between
//! replicas cannot hand the Lease to two of them); the leader renews every retry period
//! and gives up (the process should exit) when it has not renewed within the renew
//! deadline. Writes carry the Lease's resourceVersion, so two candidates racing for a free
//! Lease cannot both win.

use std::future::Future;
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Api, PostParams};
use tokio::sync::watch;

use crate::shutdown::Shutdown;

/// Why leading stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The leader could not renew its Lease within the renew deadline; another replica
    /// may lead now, so this one must stop acting.
    #[error("leaderelection lost: lease {namespace}/{name} not renewed within {deadline:?}")]
    Lost {
        /// The Lease's namespace.
        namespace: String,
        /// The Lease's name.
        name: String,
        /// The renew deadline.
        deadline: Duration,
    },
    /// The durations cannot work together (client-go's checks).
    #[error("invalid leader election config: {0}")]
    Config(&'static str),
}

/// Where and how to elect (upstream's `--leader-elect-*` flags).
#[derive(Debug, Clone)]
pub struct Config {
    /// `--leader-elect-resource-namespace` (`kube-system`).
    pub namespace: String,
    /// `--leader-elect-resource-name` (the component's name).
    pub name: String,
    /// This replica's identity, written as `holderIdentity`: hostname plus a unique suffix.
    pub identity: String,
    /// `--leader-elect-lease-duration` (15 s): how long a silent holder keeps the Lease.
    pub lease_duration: Duration,
    /// `--leader-elect-renew-deadline` (10 s): how long the leader keeps retrying a renew.
    pub renew_deadline: Duration,
    /// `--leader-elect-retry-period` (2 s): the interval between attempts.
    pub retry_period: Duration,
}

impl Config {
    /// A config with upstream's default durations and a fresh identity.
    pub fn new(namespace: &str, name: &str) -> Self {
        Self {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            identity: default_identity(),
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }

    fn validate(&self) -> Result<(), Error> {
        if self.lease_duration <= self.renew_deadline {
            return Err(Error::Config("lease duration must be greater than the renew deadline"));
        }
        // client-go's JitterFactor (1.2) times the retry period must fit in the deadline.
        if self.renew_deadline.as_secs_f64() <= 1.2 * self.retry_period.as_secs_f64() {
            return Err(Error::Config("renew deadline must be greater than 1.2 × retry period"));
        }
        if self.retry_period.is_zero() {
            return Err(Error::Config("retry period must be greater than zero"));
        }
        Ok(())
    }
}

/// `<hostname>_<random>`, as client-go components build their identity, so two replicas
/// on one host (or one restarted replica) never share it.
pub fn default_identity() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_else(|_| "localhost".into());
    format!("{host}_{:016x}", rand::random::<u64>())
}

/// Campaigns for the Lease until it is held, then runs `lead` while renewing it.
///
/// `lead` must itself stop when `shutdown` fires. Returns `Ok(Some(output))` when `lead`
/// finishes (the Lease is then released, so a successor need not wait out the lease
/// duration), `Ok(None)` when `shutdown` fired before this replica led, and
/// [`Error::Lost`] when no renew succeeded within the renew deadline; `lead` is dropped
/// then, and the caller must exit, as upstream's `OnStoppedLeading` does. Every attempt
/// is bounded by what is left of the renew deadline, so a hung API call cannot keep a
/// replica leading after its Lease may have passed to another. `leading` reports
/// whether this replica leads.
pub async fn run<F, R>(
    client: kube::Client,
    config: Config,
    shutdown: Shutdown,
    leading: watch::Sender<bool>,
    lead: F,
) -> Result<Option<R>, Error>
where
    F: Future<Output = R> + Send,
{
    config.validate()?;
    let mut elector = Elector { api: Api::namespaced(client, &config.namespace), config, observed: None };
    let stopped = shutdown.wait();
    tokio::pin!(stopped);
    loop {
        if elector.try_acquire_or_renew(elector.config.renew_deadline).await {
            break;
        }
        tokio::select! {
            () = &mut stopped => return Ok(None),
            () = tokio::time::sleep(jittered(elector.config.retry_period)) => {}
        }
    }
    tracing::info!(lease = %elector.lease_key(), identity = %elector.config.identity, "successfully acquired lease");
    leading.send_replace(true);
    tokio::pin!(lead);
    let mut last_renew = Instant::now();
    let result = loop {
        tokio::select! {
            output = &mut lead => break Ok(Some(output)),
            () = tokio::time::sleep(elector.config.retry_period) => {
                let left = elector.config.renew_deadline.saturating_sub(last_renew.elapsed());
                if elector.try_acquire_or_renew(left).await {
                    last_renew = Instant::now();
                } else if last_renew.elapsed() >= elector.config.renew_deadline {
                    break Err(Error::Lost {
                        namespace: elector.config.namespace.clone(),
                        name: elector.config.name.clone(),
                        deadline: elector.config.renew_deadline,
                    });
                }
            }
        }
    };
    leading.send_replace(false);
    if result.is_ok() {
        elector.release().await;
    }
    result
}

fn jittered(d: Duration) -> Duration {
    d.mul_f64(1.0 + rand::random::<f64>() * 1.2)
}

struct Elector {
    api: Api<Lease>,
    config: Config,
    /// The holder record last seen and when this replica first saw it: expiry is measured
    /// from here, not from the record's `renewTime`, which another clock wrote.
    observed: Option<(LeaseSpec, Instant)>,
}

impl Elector {
    fn lease_key(&self) -> String {
        format!("{}/{}", self.config.namespace, self.config.name)
    }

    /// One attempt, given at most `limit`; `true` if this replica holds the Lease
    /// afterwards. Errors (API server unreachable, conflicts with a racing candidate,
    /// running out of time) count as "not held" and are logged.
    async fn try_acquire_or_renew(&mut self, limit: Duration) -> bool {
        match tokio::time::timeout(limit, self.attempt()).await {
            Ok(Ok(held)) => held,
            Ok(Err(err)) => {
                tracing::warn!(lease = %self.lease_key(), %err, "error acquiring or renewing lease");
                false
            }
            Err(_) => {
                tracing::warn!(lease = %self.lease_key(), ?limit, "acquiring or renewing lease timed out");
                false
            }
        }
    }

    async fn attempt(&mut self) -> Result<bool, kube::Error> {
        let now = MicroTime(k8s_openapi::jiff::Timestamp::now());
        let duration_secs = i32::try_from(self.config.lease_duration.as_secs()).unwrap_or(i32::MAX);
        let Some(mut lease) = self.api.get_opt(&self.config.name).await? else {
            let spec = LeaseSpec {
                holder_identity: Some(self.config.identity.clone()),
                lease_duration_seconds: Some(duration_secs),
                acquire_time: Some(now.clone()),
                renew_time: Some(now),
                lease_transitions: Some(0),
                ..LeaseSpec::default()
            };
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.config.name.clone()),
                    namespace: Some(self.config.namespace.clone()),
                    ..ObjectMeta::default()
                },
                spec: Some(spec.clone()),
            };
            self.api.create(&PostParams::default(), &lease).await?;
            self.observed = Some((spec, Instant::now()));
            return Ok(true);
        };
        let current = lease.spec.clone().unwrap_or_default();
        if self.observed.as_ref().is_none_or(|(seen, _)| *seen != current) {
            self.observed = Some((current.clone(), Instant::now()));
        }
        let holder = current.holder_identity.clone().unwrap_or_default();
        let ours = holder == self.config.identity;
        if !holder.is_empty() && !ours {
            let held_for = Duration::from_secs(current.lease_duration_seconds.unwrap_or(0).max(0) as u64);
            let seen_at = self.observed.as_ref().map(|(_, at)| *at).unwrap_or_else(Instant::now);
            if seen_at.elapsed() < held_for {
                return Ok(false);
            }
        }
        let spec = LeaseSpec {
            holder_identity: Some(self.config.identity.clone()),
            lease_duration_seconds: Some(duration_secs),
            acquire_time: if ours { current.acquire_time.clone() } else { Some(now.clone()) },
            renew_time: Some(now),
            lease_transitions: Some(
                current.lease_transitions.unwrap_or(0) + i32::from(!ours && !holder.is_empty()),
            ),
            ..current
        };
        lease.spec = Some(spec.clone());
        // The resourceVersion read above travels with the update: a racing candidate's
        // write in between makes this one fail with 409 instead of both "winning".
        self.api.replace(&self.config.name, &PostParams::default(), &lease).await?;
        self.observed = Some((spec, Instant::now()));
        Ok(true)
    }

    /// Hands the Lease back (empty holder, 1 s duration) so a successor takes over at once.
    async fn release(&mut self) {
        let limit = self.config.retry_period.max(Duration::from_secs(1));
        let Ok(Ok(Some(mut lease))) = tokio::time::timeout(limit, self.api.get_opt(&self.config.name)).await
        else {
            return;
        };
        let Some(spec) = lease.spec.as_mut() else { return };
        if spec.holder_identity.as_deref() != Some(self.config.identity.as_str()) {
            return;
        }
        spec.holder_identity = None;
        spec.lease_duration_seconds = Some(1);
        spec.renew_time = Some(MicroTime(k8s_openapi::jiff::Timestamp::now()));
        match tokio::time::timeout(limit, self.api.replace(&self.config.name, &PostParams::default(), &lease))
            .await
        {
            Ok(Ok(_)) => {}
            Ok(Err(err)) => tracing::warn!(lease = %self.lease_key(), %err, "releasing lease"),
            Err(_) => tracing::warn!(lease = %self.lease_key(), "releasing lease timed out"),
        }
    }
}
