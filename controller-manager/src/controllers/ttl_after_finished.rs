//! The TTL-after-finished controller (upstream `pkg/controller/ttlafterfinished`): deletes
//! a finished Job (with its pods, in the foreground) `spec.ttlSecondsAfterFinished` after
//! its `Complete`/`Failed` condition turned true. Before deleting it re-reads the Job, so a
//! TTL raised meanwhile is honoured, and deletes with that read's resourceVersion as a
//! precondition.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, Preconditions, PropagationPolicy};

use crate::controller::{self, Context, Error};
use crate::controllers::job::{COMPLETE, FAILED};
use crate::informers::{Event, Informer, key_of, split_key};
use crate::workqueue::Queue;

struct Controller {
    client: kube::Client,
    jobs: Arc<Informer<Job>>,
    queue: Arc<Queue>,
}

pub fn start(ctx: &Context) -> Result<(), Error> {
    let jobs = ctx.informers.get::<Job>();
    let queue = ctx.queue("ttl_jobs_to_delete");
    {
        let queue = queue.clone();
        jobs.add_handler(move |ev| match ev {
            Event::Add(j) | Event::Update(_, j) => {
                if j.metadata.deletion_timestamp.is_none() && needs_cleanup(j) {
                    queue.add(key_of(&***j));
                }
            }
            Event::Delete(_) => {}
        });
    }
    let ctrl = Arc::new(Controller { client: ctx.client.clone(), jobs, queue: queue.clone() });
    controller::run_workers(ctx, queue, ctx.options.concurrent_ttl_after_finished_syncs, move |key| {
        let c = ctrl.clone();
        async move { c.sync(&key).await }
    });
    Ok(())
}

fn needs_cleanup(job: &Job) -> bool {
    job.spec.as_ref().and_then(|s| s.ttl_seconds_after_finished).is_some() && finish_time(job).is_some()
}

/// When the Job finished: its terminal condition's transition time.
fn finish_time(job: &Job) -> Option<Timestamp> {
    let conds = job.status.as_ref()?.conditions.as_ref()?;
    let c = conds.iter().find(|c| (c.type_ == COMPLETE || c.type_ == FAILED) && c.status == "True")?;
    Some(c.last_transition_time.as_ref().map(|t| t.0).unwrap_or(Timestamp::UNIX_EPOCH))
}

/// Time left before the Job expires (zero once expired); `None` if it is not to be
/// cleaned up (no TTL, not finished, already being deleted).
fn time_left(job: &Job, now: Timestamp) -> Option<Duration> {
    if job.metadata.deletion_timestamp.is_some() || !needs_cleanup(job) {
        return None;
    }
    let finished = finish_time(job)?;
    let ttl = job.spec.as_ref()?.ttl_seconds_after_finished?.max(0) as f64;
    if finished > now {
        tracing::warn!(job = %key_of(job), "found a Job finished in the future; clock skew?");
    }
    let elapsed = now.duration_since(finished).as_secs_f64();
    Some(Duration::from_secs_f64((ttl - elapsed).max(0.0)))
}

impl Controller {
    async fn sync(&self, key: &str) -> Result<(), Error> {
        let Some(job) = self.jobs.get(key) else { return Ok(()) };
        match time_left(&job, Timestamp::now()) {
            None => return Ok(()),
            Some(left) if !left.is_zero() => {
                self.queue.add_after(key.to_owned(), left);
                return Ok(());
            }
            Some(_) => {}
        }
        // The cached Job may be stale (its TTL changed): decide on a fresh read.
        let (ns, name) = split_key(key);
        let api: Api<Job> = Api::namespaced(self.client.clone(), ns);
        let Some(fresh) = api.get_opt(name).await? else { return Ok(()) };
        match time_left(&fresh, Timestamp::now()) {
            None => return Ok(()),
            Some(left) if !left.is_zero() => {
                self.queue.add_after(key.to_owned(), left);
                return Ok(());
            }
            Some(_) => {}
        }
        tracing::info!(job = %key, "cleaning up Job whose TTL after finishing expired");
        let dp = DeleteParams {
            propagation_policy: Some(PropagationPolicy::Foreground),
            preconditions: Some(Preconditions {
                uid: None,
                resource_version: fresh.metadata.resource_version.clone(),
            }),
            ..DeleteParams::default()
        };
        match api.delete(name, &dp).await {
            Err(e) if controller::api_code(&e) != Some(404) => Err(Error::Api(e)),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::batch::v1::{JobCondition, JobSpec, JobStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn job(ttl: Option<i32>, finished_at: Option<i64>) -> Job {
        Job {
            spec: Some(JobSpec { ttl_seconds_after_finished: ttl, ..Default::default() }),
            status: Some(JobStatus {
                conditions: finished_at.map(|t| {
                    vec![JobCondition {
                        type_: COMPLETE.into(),
                        status: "True".into(),
                        last_transition_time: Some(Time(Timestamp::from_second(t).unwrap())),
                        ..Default::default()
                    }]
                }),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn expires_ttl_seconds_after_finishing() {
        let now = Timestamp::from_second(1_000).unwrap();
        assert_eq!(time_left(&job(Some(100), Some(950)), now), Some(Duration::from_secs(50)));
        assert_eq!(time_left(&job(Some(0), Some(950)), now), Some(Duration::ZERO));
        assert_eq!(time_left(&job(Some(10), Some(950)), now), Some(Duration::ZERO));
        assert_eq!(time_left(&job(None, Some(950)), now), None);
        assert_eq!(time_left(&job(Some(10), None), now), None);
    }
}
