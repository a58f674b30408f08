//! The CronJob controller (upstream's `cronjob_controllerv2.go`): creates one Job per
//! scheduled time, named `<cronjob>-<scheduled time in minutes since the epoch>` so a
//! restarted controller can never create the same run twice; applies `concurrencyPolicy`,
//! `startingDeadlineSeconds`, `suspend` and the history limits, and keeps
//! `status.active`, `lastScheduleTime` and `lastSuccessfulTime`. Each CronJob is requeued
//! for its next scheduled time (plus 100 ms for clock skew) instead of polled.

pub mod schedule;

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::batch::v1::{CronJob, CronJobStatus, Job, JobSpec};
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use k8s_openapi::jiff::tz::TimeZone;
use kube::api::{Api, DeleteParams, PostParams, PropagationPolicy};

use crate::controller::{self, Context, Error};
use crate::controllers::job::{COMPLETE, FAILED, finished_type};
use crate::events::Type;
use crate::informers::{Event, Informer, key_of, split_key};
use crate::owners;
use crate::workqueue::Queue;

use schedule::{Schedule, load_location};

const COMPONENT: &str = "cronjob-controller";
pub const SCHEDULED_TIMESTAMP: &str = "batch.kubernetes.io/cronjob-scheduled-timestamp";
/// Requeues land this much after the scheduled time, so a clock a little behind the API
/// server's still finds the time passed.
const NEXT_SCHEDULE_DELTA: Duration = Duration::from_millis(100);
/// More missed times than this since the last run: warn (upstream's arbitrary 100).
const MANY_MISSED: i64 = 100;

struct Controller {
    client: kube::Client,
    ctx: Context,
    cronjobs: Arc<Informer<CronJob>>,
    jobs: Arc<Informer<Job>>,
    queue: Arc<Queue>,
}

pub fn start(ctx: &Context) -> Result<(), Error> {
    let cronjobs = ctx.informers.get::<CronJob>();
    let jobs = ctx.informers.get::<Job>();
    let queue = ctx.queue("cronjob");
    let ctrl = Arc::new(Controller {
        client: ctx.client.clone(),
        ctx: ctx.clone(),
        cronjobs: cronjobs.clone(),
        jobs: jobs.clone(),
        queue: queue.clone(),
    });
    {
        let c = ctrl.clone();
        cronjobs.add_handler(move |ev| match ev {
            Event::Add(cj) | Event::Delete(cj) => c.queue.add(key_of(&***cj)),
            Event::Update(old, new) => c.cronjob_updated(old, new),
        });
    }
    {
        let c = ctrl.clone();
        jobs.add_handler(move |ev| match ev {
            Event::Add(j) | Event::Delete(j) => c.enqueue_owner(j),
            Event::Update(old, new) => {
                if old.metadata.resource_version == new.metadata.resource_version {
                    return;
                }
                if owners::controller_of(&old.metadata) != owners::controller_of(&new.metadata) {
                    c.enqueue_owner(old);
                }
                c.enqueue_owner(new);
            }
        });
    }
    controller::run_workers(ctx, queue, ctx.options.concurrent_cron_job_syncs, move |key| {
        let c = ctrl.clone();
        async move { c.sync(&key).await }
    });
    Ok(())
}

/// Upstream's `MissedSchedulesType`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Missed {
    None,
    Few,
    Many,
}

/// Upstream's `mostRecentScheduleTime`: (the last schedule time or creation time, the most
/// recent time a Job should have started if any, how many were missed).
fn most_recent_schedule_time(
    cj: &CronJob,
    now: Timestamp,
    sched: &Schedule,
    include_starting_deadline: bool,
) -> Result<(Timestamp, Option<Timestamp>, Missed), String> {
    let mut earliest = cj.metadata.creation_timestamp.as_ref().map(|t| t.0).unwrap_or(now);
    if let Some(t) = cj.status.as_ref().and_then(|s| s.last_schedule_time.as_ref()) {
        earliest = t.0;
    }
    if include_starting_deadline && let Some(sds) = cj.spec.as_ref().and_then(|s| s.starting_deadline_seconds)
    {
        let deadline = now.checked_sub(Duration::from_secs(sds.max(0) as u64)).unwrap_or(now);
        if deadline > earliest {
            earliest = deadline;
        }
    }
    let invalid = || "time difference between two schedules is less than 1 second".to_string();
    let Some(t1) = sched.next(earliest) else { return Err(invalid()) };
    if now < t1 {
        return Ok((earliest, None, Missed::None));
    }
    let Some(t2) = sched.next(t1) else { return Err(invalid()) };
    if now < t2 {
        return Ok((earliest, Some(t1), Missed::None));
    }
    let between = t2.duration_since(t1).as_secs_f64().round() as i64;
    if between < 1 {
        return Err(invalid());
    }
    // Rough count of the misses, then the exact most recent one from just before it.
    let elapsed = now.duration_since(t1).as_secs();
    let missed = elapsed / between + 1;
    let potential = t1
        .checked_add(k8s_openapi::jiff::SignedDuration::from_secs((missed - 2) * between))
        .map_err(|e| e.to_string())?;
    let mut most_recent = None;
    let mut t = sched.next(potential);
    while let Some(x) = t.filter(|x| *x <= now) {
        most_recent = Some(x);
        t = sched.next(x);
    }
    let kind = if missed > MANY_MISSED { Missed::Many } else { Missed::Few };
    Ok((earliest, most_recent, kind))
}

/// How long until the next scheduled time after the last one (upstream's
/// `nextScheduleTimeDuration`).
fn next_schedule_delay(cj: &CronJob, now: Timestamp, sched: &Schedule) -> Option<Duration> {
    let base = match most_recent_schedule_time(cj, now, sched, false) {
        Err(_) => now,
        Ok((_, Some(t), _)) => t,
        Ok((earliest, None, Missed::None)) => earliest,
        Ok((_, None, _)) => now,
    };
    let next = sched.next(base)?;
    let d = next.duration_since(now).as_secs_f64().max(0.0);
    Some(Duration::from_secs_f64(d) + NEXT_SCHEDULE_DELTA)
}

fn time_zone_of(cj: &CronJob) -> Option<&str> {
    cj.spec.as_ref().and_then(|s| s.time_zone.as_deref())
}

fn schedule_of(cj: &CronJob) -> &str {
    cj.spec.as_ref().map(|s| s.schedule.as_str()).unwrap_or_default()
}

/// Parses the CronJob's schedule in its `timeZone` (else the controller's local zone).
fn parse_schedule(cj: &CronJob) -> Result<Schedule, schedule::ParseError> {
    let spec = schedule_of(cj);
    let tz = match time_zone_of(cj) {
        Some(name) if !spec.contains("TZ") => load_location(name).unwrap_or(TimeZone::UTC),
        _ => load_location("Local").unwrap_or(TimeZone::UTC),
    };
    Schedule::parse(spec, tz)
}

fn job_name(cj: &CronJob, scheduled: Timestamp) -> String {
    format!("{}-{}", cj.metadata.name.as_deref().unwrap_or_default(), scheduled.as_second().div_euclid(60))
}

/// Upstream's `getJobFromTemplate2`: the template's labels, annotations and spec, the
/// scheduled time as an RFC 3339 annotation in the CronJob's zone.
fn job_from_template(cj: &CronJob, scheduled: Timestamp) -> Result<Job, String> {
    let template = cj.spec.as_ref().map(|s| s.job_template.clone()).unwrap_or_default();
    let meta = template.metadata.unwrap_or_default();
    let mut annotations = meta.annotations.unwrap_or_default();
    let tz = load_location(time_zone_of(cj).unwrap_or("")).map_err(|e| e.to_string())?;
    let stamp = scheduled.to_zoned(tz).strftime("%Y-%m-%dT%H:%M:%S%:z").to_string();
    // RFC 3339 writes UTC as `Z`, as Go's time.RFC3339.
    let stamp = stamp.strip_suffix("+00:00").map(|s| format!("{s}Z")).unwrap_or(stamp);
    annotations.insert(SCHEDULED_TIMESTAMP.into(), stamp);
    Ok(Job {
        metadata: ObjectMeta {
            name: Some(job_name(cj, scheduled)),
            namespace: cj.metadata.namespace.clone(),
            labels: meta.labels,
            annotations: Some(annotations),
            owner_references: Some(vec![owners::controller_ref(cj)]),
            ..ObjectMeta::default()
        },
        spec: Some(template.spec.unwrap_or_else(JobSpec::default)),
        status: None,
    })
}

fn job_ref(job: &Job) -> ObjectReference {
    ObjectReference {
        api_version: Some("batch/v1".into()),
        kind: Some("Job".into()),
        name: job.metadata.name.clone(),
        namespace: job.metadata.namespace.clone(),
        uid: job.metadata.uid.clone(),
        resource_version: job.metadata.resource_version.clone(),
        ..ObjectReference::default()
    }
}

fn active(cj: &CronJob) -> &[ObjectReference] {
    cj.status.as_ref().and_then(|s| s.active.as_deref()).unwrap_or_default()
}

fn in_active_list(cj: &CronJob, uid: &str) -> bool {
    active(cj).iter().any(|r| r.uid.as_deref() == Some(uid))
}

fn delete_from_active_list(cj: &mut CronJob, uid: &str) {
    let status = cj.status.get_or_insert_with(CronJobStatus::default);
    if let Some(a) = status.active.as_mut() {
        a.retain(|r| r.uid.as_deref() != Some(uid));
        if a.is_empty() {
            status.active = None;
        }
    }
}

/// Jobs oldest first by start time (unstarted last), then name.
fn by_start_time(jobs: &mut [Arc<Job>]) {
    jobs.sort_by(|a, b| {
        let sa = a.status.as_ref().and_then(|s| s.start_time.as_ref()).map(|t| t.0);
        let sb = b.status.as_ref().and_then(|s| s.start_time.as_ref()).map(|t| t.0);
        match (sa, sb) {
            (Some(x), Some(y)) if x != y => x.cmp(&y),
            (Some(_), None) => std::cmp::Ordering::Less,
            (None, Some(_)) => std::cmp::Ordering::Greater,
            _ => a.metadata.name.cmp(&b.metadata.name),
        }
    });
}

/// Go's `time.RFC1123Z` in UTC, for the MissSchedule event.
fn rfc1123z(t: Timestamp) -> String {
    t.to_zoned(TimeZone::UTC).strftime("%a, %d %b %Y %H:%M:%S %z").to_string()
}

impl Controller {
    fn event(&self, cj: &CronJob, kind: Type, reason: &str, message: String) {
        self.ctx.recorder.event(COMPONENT, cj, kind, reason, message);
    }

    fn resolve(&self, ns: &str, meta: &ObjectMeta) -> Option<Arc<CronJob>> {
        let r = owners::controller_of(meta).filter(|r| r.kind == "CronJob")?;
        let cj = self.cronjobs.get_namespaced(ns, &r.name)?;
        (cj.metadata.uid.as_deref() == Some(r.uid.as_str())).then_some(cj)
    }

    fn enqueue_owner(&self, job: &Job) {
        let ns = job.metadata.namespace.as_deref().unwrap_or_default();
        if let Some(cj) = self.resolve(ns, &job.metadata) {
            self.queue.add(key_of(&*cj));
        }
    }

    /// A new schedule (or zone) takes effect at its own next time; other changes now.
    fn cronjob_updated(&self, old: &CronJob, new: &CronJob) {
        let key = key_of(new);
        if schedule_of(old) == schedule_of(new) && time_zone_of(old) == time_zone_of(new) {
            return self.queue.add(key);
        }
        match parse_schedule(new) {
            Err(_) => self.event(
                new,
                Type::Warning,
                "UnParseableCronJobSchedule",
                format!("unparseable schedule for cronjob: {}", schedule_of(new)),
            ),
            Ok(s) => {
                if let Some(d) = next_schedule_delay(new, Timestamp::now(), &s) {
                    self.queue.add_after(key, d);
                }
            }
        }
    }

    async fn sync(&self, key: &str) -> Result<(), Error> {
        let Some(cj) = self.cronjobs.get(key) else { return Ok(()) };
        let (ns, _) = split_key(key);
        let name = cj.metadata.name.clone().unwrap_or_default();
        // Upstream matches its Jobs by the controller reference's name.
        let jobs: Vec<Arc<Job>> = self
            .jobs
            .list_namespace(ns)
            .into_iter()
            .filter(|j| {
                owners::controller_of(&j.metadata).is_some_and(|r| r.name == name && r.kind == "CronJob")
            })
            .collect();
        let mut copy = (*cj).clone();
        let cleaned = self.cleanup_finished_jobs(&mut copy, &jobs).await;
        let (requeue, synced, sync_err) = self.sync_cronjob(&mut copy, &jobs).await;
        if cleaned || synced {
            let api: Api<CronJob> = Api::namespaced(self.client.clone(), ns);
            api.replace_status(&name, &PostParams::default(), &copy).await?;
        }
        if let Some(d) = requeue {
            self.queue.add_after(key.to_owned(), d);
            return Ok(());
        }
        sync_err.map_or(Ok(()), Err)
    }

    fn jobs_api(&self, ns: &str) -> Api<Job> {
        Api::namespaced(self.client.clone(), ns)
    }

    /// Deletes the Job in the background (its pods follow) and drops it from `active`.
    async fn delete_job(&self, cj: &mut CronJob, job: &Job) -> bool {
        let ns = job.metadata.namespace.as_deref().unwrap_or_default();
        let name = job.metadata.name.clone().unwrap_or_default();
        let dp = DeleteParams {
            propagation_policy: Some(PropagationPolicy::Background),
            ..DeleteParams::default()
        };
        if let Err(err) = self.jobs_api(ns).delete(&name, &dp).await {
            self.event(cj, Type::Warning, "FailedDelete", format!("Deleted job: {err}"));
            return false;
        }
        delete_from_active_list(cj, job.metadata.uid.as_deref().unwrap_or_default());
        self.event(cj, Type::Normal, "SuccessfulDelete", format!("Deleted job {name}"));
        true
    }

    /// Keeps at most the history limits of finished Jobs; returns whether the status changed.
    async fn cleanup_finished_jobs(&self, cj: &mut CronJob, jobs: &[Arc<Job>]) -> bool {
        let spec = cj.spec.clone().unwrap_or_default();
        if spec.successful_jobs_history_limit.is_none() && spec.failed_jobs_history_limit.is_none() {
            return false;
        }
        let mut succeeded: Vec<Arc<Job>> =
            jobs.iter().filter(|j| finished_type(j) == Some(COMPLETE)).cloned().collect();
        let mut failed: Vec<Arc<Job>> =
            jobs.iter().filter(|j| finished_type(j) == Some(FAILED)).cloned().collect();
        let mut changed = false;
        for (list, limit) in [
            (&mut succeeded, spec.successful_jobs_history_limit),
            (&mut failed, spec.failed_jobs_history_limit),
        ] {
            let Some(limit) = limit else { continue };
            let excess = list.len().saturating_sub(limit.max(0) as usize);
            if excess == 0 {
                continue;
            }
            by_start_time(list);
            for job in list.iter().take(excess) {
                if self.delete_job(cj, job).await {
                    changed = true;
                }
            }
        }
        changed
    }

    /// Upstream's `syncCronJob`: (requeue after, whether the status changed, error).
    async fn sync_cronjob(
        &self,
        cj: &mut CronJob,
        jobs: &[Arc<Job>],
    ) -> (Option<Duration>, bool, Option<Error>) {
        let now = Timestamp::now();
        let mut changed = false;
        let ns = cj.metadata.namespace.clone().unwrap_or_default();
        let name = cj.metadata.name.clone().unwrap_or_default();
        let children: HashSet<String> = jobs.iter().filter_map(|j| j.metadata.uid.clone()).collect();
        for j in jobs {
            let uid = j.metadata.uid.as_deref().unwrap_or_default();
            let found = in_active_list(cj, uid);
            let finished = finished_type(j);
            if !found && finished.is_none() {
                // Maybe our status is just older than the Job: check the latest status.
                match Api::<CronJob>::namespaced(self.client.clone(), &ns).get(&name).await {
                    Ok(fresh) if in_active_list(&fresh, uid) => {
                        *cj = fresh;
                        continue;
                    }
                    Ok(_) => {}
                    Err(e) => return (None, changed, Some(Error::Api(e))),
                }
                self.event(
                    cj,
                    Type::Warning,
                    "UnexpectedJob",
                    format!(
                        "Saw a job that the controller did not create or forgot: {}",
                        j.metadata.name.as_deref().unwrap_or_default()
                    ),
                );
            } else if found && let Some(status) = finished {
                delete_from_active_list(cj, uid);
                self.event(
                    cj,
                    Type::Normal,
                    "SawCompletedJob",
                    format!(
                        "Saw completed job: {}, status: {status}",
                        j.metadata.name.as_deref().unwrap_or_default()
                    ),
                );
                changed = true;
            } else if finished == Some(COMPLETE) {
                // A Job need not be active to update lastSuccessfulTime.
                let done = j.status.as_ref().and_then(|s| s.completion_time.clone());
                let status = cj.status.get_or_insert_with(CronJobStatus::default);
                if let Some(done) = done
                    && status.last_successful_time.as_ref().is_none_or(|t| done.0 > t.0)
                {
                    status.last_successful_time = Some(done);
                    changed = true;
                }
            }
        }
        // An active Job that is gone (checked against the API server, not a slow cache).
        let stale: Vec<ObjectReference> = active(cj)
            .iter()
            .filter(|r| !children.contains(r.uid.as_deref().unwrap_or_default()))
            .cloned()
            .collect();
        for r in stale {
            let jname = r.name.clone().unwrap_or_default();
            let jns = r.namespace.clone().unwrap_or_else(|| ns.clone());
            match self.jobs_api(&jns).get_opt(&jname).await {
                Ok(None) => {
                    self.event(cj, Type::Normal, "MissingJob", format!("Active job went missing: {jname}"));
                    delete_from_active_list(cj, r.uid.as_deref().unwrap_or_default());
                    changed = true;
                }
                Ok(Some(_)) => {}
                Err(e) => return (None, changed, Some(Error::Api(e))),
            }
        }
        if cj.metadata.deletion_timestamp.is_some() {
            return (None, changed, None);
        }
        if let Some(tz) = time_zone_of(cj)
            && let Err(e) = load_location(tz)
        {
            self.event(cj, Type::Warning, "UnknownTimeZone", format!("invalid timeZone: {tz:?}: {e}"));
            return (None, changed, None);
        }
        if cj.spec.as_ref().and_then(|s| s.suspend) == Some(true) {
            return (None, changed, None);
        }
        let spec_str = schedule_of(cj).to_owned();
        if spec_str.contains("TZ") {
            self.event(
                cj,
                Type::Warning,
                "UnsupportedSchedule",
                format!(
                    "CRON_TZ or TZ used in schedule {spec_str:?} is not officially supported, see https://kubernetes.io/docs/concepts/workloads/controllers/cron-jobs/ for more details"
                ),
            );
        }
        let sched = match parse_schedule(cj) {
            Ok(s) => s,
            Err(e) => {
                self.event(
                    cj,
                    Type::Warning,
                    "UnparseableSchedule",
                    format!("unparseable schedule: {spec_str:?} : {e}"),
                );
                return (None, changed, None);
            }
        };
        let scheduled = match most_recent_schedule_time(cj, now, &sched, true) {
            Err(e) => {
                self.event(
                    cj,
                    Type::Warning,
                    "InvalidSchedule",
                    format!("invalid schedule: {spec_str} : {e}"),
                );
                return (None, changed, None);
            }
            Ok((_, None, _)) => return (next_schedule_delay(cj, now, &sched), changed, None),
            Ok((_, Some(t), missed)) => {
                if missed == Missed::Many {
                    self.event(
                        cj,
                        Type::Warning,
                        "TooManyMissedTimes",
                        "too many missed start times. Set or decrease .spec.startingDeadlineSeconds or check clock skew".into(),
                    );
                }
                t
            }
        };
        let requeue = next_schedule_delay(cj, now, &sched);
        let sds = cj.spec.as_ref().and_then(|s| s.starting_deadline_seconds);
        if let Some(sds) = sds
            && scheduled.checked_add(Duration::from_secs(sds.max(0) as u64)).is_ok_and(|d| d < now)
        {
            self.event(
                cj,
                Type::Warning,
                "MissSchedule",
                format!("Missed scheduled time to start a job: {}", rfc1123z(scheduled)),
            );
            return (requeue, changed, None);
        }
        let jname = job_name(cj, scheduled);
        let already = active(cj)
            .iter()
            .any(|r| r.name.as_deref() == Some(&jname) && r.namespace.as_deref() == Some(&ns))
            || cj
                .status
                .as_ref()
                .and_then(|s| s.last_schedule_time.as_ref())
                .is_some_and(|t| t.0 == scheduled);
        if already {
            return (requeue, changed, None);
        }
        let policy =
            cj.spec.as_ref().and_then(|s| s.concurrency_policy.clone()).unwrap_or_else(|| "Allow".into());
        if policy == "Forbid" && !active(cj).is_empty() {
            self.event(
                cj,
                Type::Normal,
                "JobAlreadyActive",
                "Not starting job because prior execution is running and concurrency policy is Forbid".into(),
            );
            return (requeue, changed, None);
        }
        if policy == "Replace" {
            for r in active(cj).to_vec() {
                let jns = r.namespace.clone().unwrap_or_else(|| ns.clone());
                let jn = r.name.clone().unwrap_or_default();
                let job = match self.jobs_api(&jns).get(&jn).await {
                    Ok(j) => j,
                    Err(e) => {
                        self.event(cj, Type::Warning, "FailedGet", format!("Get job: {e}"));
                        return (None, changed, Some(Error::Api(e)));
                    }
                };
                if !self.delete_job(cj, &job).await {
                    return (None, changed, Some(Error::Other(format!("could not replace job {jns}/{jn}"))));
                }
                changed = true;
            }
        }
        let request = match job_from_template(cj, scheduled) {
            Ok(j) => j,
            Err(e) => {
                return (None, changed, Some(Error::Other(format!("unable to make Job from template: {e}"))));
            }
        };
        let created = match self.jobs_api(&ns).create(&PostParams::default(), &request).await {
            Ok(j) => {
                self.event(
                    cj,
                    Type::Normal,
                    "SuccessfulCreate",
                    format!("Created job {}", j.metadata.name.as_deref().unwrap_or_default()),
                );
                j
            }
            Err(e) if controller::is_namespace_terminating(&e) => {
                return (None, changed, Some(Error::Api(e)));
            }
            Err(e) if controller::api_code(&e) == Some(409) => {
                // Created before (the status update after it was lost), or by someone else.
                let job = match self.jobs_api(&ns).get(&jname).await {
                    Ok(j) => j,
                    Err(e) => return (None, changed, Some(Error::Api(e))),
                };
                let ours =
                    owners::is_controlled_by(&job.metadata, cj.metadata.uid.as_deref().unwrap_or_default());
                if !ours || in_active_list(cj, job.metadata.uid.as_deref().unwrap_or_default()) {
                    return (None, changed, None);
                }
                tracing::info!(cronjob = %key_of(cj), job = %jname, "job already exists");
                job
            }
            Err(e) => {
                self.event(cj, Type::Warning, "FailedCreate", format!("Error creating job: {e}"));
                return (None, changed, Some(Error::Api(e)));
            }
        };
        let status = cj.status.get_or_insert_with(CronJobStatus::default);
        status.active.get_or_insert_with(Vec::new).push(job_ref(&created));
        status.last_schedule_time = Some(Time(scheduled));
        (requeue, true, None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::batch::v1::CronJobSpec;

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn cronjob(schedule: &str, created: &str, last: Option<&str>, sds: Option<i64>) -> CronJob {
        CronJob {
            metadata: ObjectMeta {
                name: Some("cj".into()),
                namespace: Some("ns".into()),
                uid: Some("cj-uid".into()),
                creation_timestamp: Some(Time(ts(created))),
                ..Default::default()
            },
            spec: Some(CronJobSpec {
                schedule: schedule.into(),
                starting_deadline_seconds: sds,
                ..Default::default()
            }),
            status: Some(CronJobStatus {
                last_schedule_time: last.map(|l| Time(ts(l))),
                ..Default::default()
            }),
        }
    }

    fn sched(cj: &CronJob) -> Schedule {
        Schedule::parse(schedule_of(cj), TimeZone::UTC).unwrap()
    }

    #[test]
    fn most_recent_unmet_time() {
        let cj = cronjob("*/1 * * * *", "2024-03-01T10:00:10Z", None, None);
        let s = sched(&cj);
        // Before the first tick: nothing due, next in 50 s (+100 ms).
        let r = most_recent_schedule_time(&cj, ts("2024-03-01T10:00:30Z"), &s, true).unwrap();
        assert_eq!(r.1, None);
        assert_eq!(
            next_schedule_delay(&cj, ts("2024-03-01T10:00:30Z"), &s),
            Some(Duration::from_secs(30) + NEXT_SCHEDULE_DELTA)
        );
        let r = most_recent_schedule_time(&cj, ts("2024-03-01T10:01:05Z"), &s, true).unwrap();
        assert_eq!((r.1, r.2), (Some(ts("2024-03-01T10:01:00Z")), Missed::None));
        // Down for a while: the most recent of the missed times.
        let r = most_recent_schedule_time(&cj, ts("2024-03-01T10:07:30Z"), &s, true).unwrap();
        assert_eq!((r.1, r.2), (Some(ts("2024-03-01T10:07:00Z")), Missed::Few));
        let r = most_recent_schedule_time(&cj, ts("2024-03-02T10:00:30Z"), &s, true).unwrap();
        assert_eq!((r.1, r.2), (Some(ts("2024-03-02T10:00:00Z")), Missed::Many));
        // A starting deadline bounds how far back to look.
        let cj = cronjob("*/1 * * * *", "2024-03-01T10:00:10Z", None, Some(30));
        let r = most_recent_schedule_time(&cj, ts("2024-03-02T10:00:20Z"), &sched(&cj), true).unwrap();
        assert_eq!((r.1, r.2), (Some(ts("2024-03-02T10:00:00Z")), Missed::None));
        // Past the deadline the missed time is not offered at all.
        let r = most_recent_schedule_time(&cj, ts("2024-03-02T10:00:45Z"), &sched(&cj), true).unwrap();
        assert_eq!(r.1, None);
        // Already ran at the last time: the next delay counts from it.
        let cj = cronjob("*/5 * * * *", "2024-03-01T09:00:00Z", Some("2024-03-01T10:00:00Z"), None);
        assert_eq!(
            next_schedule_delay(&cj, ts("2024-03-01T10:01:00Z"), &sched(&cj)),
            Some(Duration::from_secs(240) + NEXT_SCHEDULE_DELTA)
        );
    }

    #[test]
    fn impossible_schedules_are_invalid() {
        let cj = cronjob("0 0 30 2 *", "2024-03-01T10:00:10Z", None, None);
        assert!(most_recent_schedule_time(&cj, ts("2024-04-01T00:00:00Z"), &sched(&cj), true).is_err());
    }

    #[test]
    fn jobs_are_named_by_minute_and_annotated_in_the_zone() {
        let mut cj = cronjob("*/1 * * * *", "2024-03-01T10:00:10Z", None, None);
        let t = ts("2024-03-01T10:01:00Z");
        let job = job_from_template(&cj, t).unwrap();
        assert_eq!(job.metadata.name.as_deref(), Some(format!("cj-{}", t.as_second() / 60).as_str()));
        let ann = job.metadata.annotations.unwrap();
        assert_eq!(ann[SCHEDULED_TIMESTAMP], "2024-03-01T10:01:00Z");
        let r = &job.metadata.owner_references.unwrap()[0];
        assert_eq!((r.kind.as_str(), r.controller), ("CronJob", Some(true)));
        cj.spec.as_mut().unwrap().time_zone = Some("Asia/Tokyo".into());
        let ann = job_from_template(&cj, t).unwrap().metadata.annotations.unwrap();
        assert_eq!(ann[SCHEDULED_TIMESTAMP], "2024-03-01T19:01:00+09:00");
    }

    #[test]
    fn oldest_jobs_first() {
        let mk = |name: &str, start: Option<&str>| {
            let mut j = Job::default();
            j.metadata.name = Some(name.into());
            j.status = Some(k8s_openapi::api::batch::v1::JobStatus {
                start_time: start.map(|s| Time(ts(s))),
                ..Default::default()
            });
            Arc::new(j)
        };
        let mut jobs = vec![
            mk("c", None),
            mk("b", Some("2024-01-01T00:00:02Z")),
            mk("a", Some("2024-01-01T00:00:02Z")),
            mk("d", Some("2024-01-01T00:00:01Z")),
        ];
        by_start_time(&mut jobs);
        let names: Vec<_> = jobs.iter().map(|j| j.metadata.name.clone().unwrap()).collect();
        assert_eq!(names, vec!["d", "a", "b", "c"]);
        assert_eq!(rfc1123z(ts("2024-03-01T10:01:00Z")), "Fri, 01 Mar 2024 10:01:00 +0000");
    }
}
