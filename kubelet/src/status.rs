//! A pod's API status from what the runtime reports: container statuses (state, last state,
//! restart count, ready, started), phase (upstream's `getPhase`), conditions, IPs, QoS.

use std::collections::HashMap;

use k8s_openapi::api::core::v1::{
    Container, ContainerState, ContainerStateRunning, ContainerStateTerminated, ContainerStateWaiting,
    ContainerStatus, HostIP, Pod, PodCondition, PodIP, PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

use crate::cri;
use crate::qos::qos_class;

/// The newest two runtime records of one container name in the current sandbox.
#[derive(Debug, Clone, Default)]
pub struct ContainerRecord {
    pub latest: Option<cri::ContainerStatus>,
    pub previous: Option<cri::ContainerStatus>,
}

impl ContainerRecord {
    pub fn restart_count(&self) -> i32 {
        self.latest
            .as_ref()
            .and_then(|s| s.annotations.get(cri::CONTAINER_RESTART_COUNT_ANNOTATION))
            .and_then(|c| c.parse().ok())
            .unwrap_or(0)
    }
}

/// What the pod worker knows about one container beyond the runtime's record: why it is
/// waiting, and what the probes say.
#[derive(Debug, Clone, Default)]
pub struct ContainerView {
    pub waiting: Option<(String, String)>,
    pub ready: bool,
    pub started: bool,
}

/// Everything `compute` needs.
pub struct Inputs<'a> {
    pub pod: &'a Pod,
    pub records: &'a HashMap<String, ContainerRecord>,
    pub views: &'a HashMap<String, ContainerView>,
    pub sandbox_ready: bool,
    pub pod_ips: &'a [String],
    pub host_ip: &'a str,
    /// The status last written or read from the API, to keep transition times and startTime.
    pub previous: Option<&'a PodStatus>,
    pub now: Timestamp,
}

fn nanos_to_time(n: i64) -> Option<Time> {
    (n > 0).then(|| Time(Timestamp::from_nanosecond(n as i128).unwrap_or(Timestamp::UNIX_EPOCH)))
}

/// Upstream's bounds on a termination message: 4096 bytes from the file; from the log, its
/// last 80 lines and at most 2048 bytes.
const MAX_MESSAGE_BYTES: u64 = 4096;
const FALLBACK_LOG_LINES: usize = 80;
const FALLBACK_LOG_BYTES: usize = 2048;

/// The message of an exited container, as upstream's `getTerminationMessage`: the file the
/// kubelet mounted at `terminationMessagePath` (found in the runtime's mount list); when
/// that is empty, the container failed and the policy is `FallbackToLogsOnError`, the tail
/// of its log; else the runtime's own message (an OOM kill, say).
fn termination_message(c: &Container, s: &cri::ContainerStatus) -> Option<String> {
    use std::io::Read;
    let path = c.termination_message_path.as_deref().unwrap_or("/dev/termination-log");
    let from_file = s
        .mounts
        .iter()
        .find(|m| m.container_path == path)
        .and_then(|m| std::fs::File::open(&m.host_path).ok())
        .and_then(|f| {
            let mut buf = Vec::new();
            f.take(MAX_MESSAGE_BYTES).read_to_end(&mut buf).ok()?;
            Some(String::from_utf8_lossy(&buf).into_owned())
        })
        .filter(|m| !m.is_empty());
    if from_file.is_some() {
        return from_file;
    }
    let fallback = c.termination_message_policy.as_deref() == Some("FallbackToLogsOnError");
    if fallback && s.exit_code != 0 && !s.log_path.is_empty() {
        if let Some(tail) = log_tail(&s.log_path).filter(|t| !t.is_empty()) {
            return Some(tail);
        }
    }
    (!s.message.is_empty()).then(|| s.message.clone())
}

/// The last lines of a CRI log file (`<time> <stream> <P|F> <text>` records) as the
/// container wrote them, bounded as upstream bounds a fallback termination message. A last
/// line the container left without a newline (`echo -n DONE`: a final `P` record) is kept
/// as written, without one.
fn log_tail(path: &str) -> Option<String> {
    let text = std::fs::read(path).ok()?;
    let text = String::from_utf8_lossy(&text);
    let mut written = String::new();
    for record in text.lines() {
        let mut parts = record.splitn(4, ' ');
        let (Some(_time), Some(_stream), Some(tag)) = (parts.next(), parts.next(), parts.next()) else {
            continue;
        };
        written.push_str(parts.next().unwrap_or(""));
        if tag != "P" {
            written.push('\n');
        }
    }
    let lines: Vec<&str> = written.split_inclusive('\n').collect();
    let mut out = lines[lines.len().saturating_sub(FALLBACK_LOG_LINES)..].concat();
    if out.len() > FALLBACK_LOG_BYTES {
        let mut cut = out.len() - FALLBACK_LOG_BYTES;
        while !out.is_char_boundary(cut) {
            cut += 1;
        }
        out.drain(..cut);
    }
    Some(out)
}

fn terminated(c: &Container, s: &cri::ContainerStatus) -> ContainerStateTerminated {
    ContainerStateTerminated {
        exit_code: s.exit_code,
        reason: Some(if s.reason.is_empty() {
            if s.exit_code == 0 { "Completed".into() } else { "Error".into() }
        } else {
            s.reason.clone()
        }),
        message: termination_message(c, s),
        started_at: nanos_to_time(s.started_at),
        finished_at: nanos_to_time(s.finished_at),
        container_id: Some(format!("containerd://{}", s.id)),
        signal: None,
    }
}

/// One container's status. `default_waiting` is the reason of a container the runtime has
/// nothing for yet: upstream's `ContainerCreating`, or `PodInitializing` in a pod with init
/// containers (for its init and regular containers alike).
fn container_status(
    c: &Container,
    rec: Option<&ContainerRecord>,
    view: Option<&ContainerView>,
    default_waiting: &str,
) -> ContainerStatus {
    let rec = rec.cloned().unwrap_or_default();
    let view = view.cloned().unwrap_or_default();
    let latest = rec.latest.as_ref();
    let running = latest.map(|s| s.state == cri::ContainerState::ContainerRunning as i32).unwrap_or(false);
    let state = match (latest, &view.waiting) {
        (Some(s), _) if s.state == cri::ContainerState::ContainerRunning as i32 => ContainerState {
            running: Some(ContainerStateRunning { started_at: nanos_to_time(s.started_at) }),
            ..Default::default()
        },
        (_, Some((reason, message))) => ContainerState {
            waiting: Some(ContainerStateWaiting {
                reason: Some(reason.clone()),
                message: (!message.is_empty()).then(|| message.clone()),
            }),
            ..Default::default()
        },
        (Some(s), None) if s.state == cri::ContainerState::ContainerExited as i32 => {
            ContainerState { terminated: Some(terminated(c, s)), ..Default::default() }
        }
        _ => ContainerState {
            waiting: Some(ContainerStateWaiting { reason: Some(default_waiting.into()), message: None }),
            ..Default::default()
        },
    };
    // The last termination: the latest record when the container is waiting to restart,
    // else the one before it.
    let last = if state.waiting.is_some()
        && latest.map(|s| s.state == cri::ContainerState::ContainerExited as i32).unwrap_or(false)
    {
        latest
    } else {
        rec.previous.as_ref()
    };
    ContainerStatus {
        name: c.name.clone(),
        image: c.image.clone().unwrap_or_default(),
        image_id: latest.map(|s| s.image_ref.clone()).unwrap_or_default(),
        container_id: latest.map(|s| format!("containerd://{}", s.id)),
        ready: running && view.ready,
        started: Some(running && view.started),
        restart_count: rec.restart_count(),
        state: Some(state),
        last_state: Some(match last {
            Some(s) if s.state == cri::ContainerState::ContainerExited as i32 => {
                ContainerState { terminated: Some(terminated(c, s)), ..Default::default() }
            }
            _ => ContainerState::default(),
        }),
        ..Default::default()
    }
}

fn restart_policy(pod: &Pod) -> &str {
    pod.spec.as_ref().and_then(|s| s.restart_policy.as_deref()).unwrap_or("Always")
}

/// Whether an init container finished successfully.
fn init_succeeded(rec: Option<&ContainerRecord>) -> bool {
    rec.and_then(|r| r.latest.as_ref())
        .map(|s| s.state == cri::ContainerState::ContainerExited as i32 && s.exit_code == 0)
        .unwrap_or(false)
}

/// Upstream's `getPhase` over container statuses.
pub fn phase(pod: &Pod, init: &[ContainerStatus], regular: &[ContainerStatus]) -> &'static str {
    let policy = restart_policy(pod);
    let init_failed_for_good = init.iter().any(|s| {
        let t = s.state.as_ref().and_then(|st| st.terminated.as_ref());
        let last_failed = s
            .last_state
            .as_ref()
            .and_then(|st| st.terminated.as_ref())
            .map(|t| t.exit_code != 0)
            .unwrap_or(false);
        policy == "Never" && (t.map(|t| t.exit_code != 0).unwrap_or(false) || last_failed)
    });
    if init_failed_for_good {
        return "Failed";
    }
    let init_done = init.iter().all(|s| {
        s.state.as_ref().and_then(|st| st.terminated.as_ref()).map(|t| t.exit_code == 0).unwrap_or(false)
    });
    if !init_done {
        return "Pending";
    }
    let (mut waiting, mut running, mut stopped, mut succeeded) = (0, 0, 0, 0);
    for s in regular {
        let st = s.state.clone().unwrap_or_default();
        if st.running.is_some() {
            running += 1;
        } else if let Some(t) = st.terminated {
            stopped += 1;
            if t.exit_code == 0 {
                succeeded += 1;
            }
        } else if st.waiting.is_some() {
            match s.last_state.as_ref().and_then(|l| l.terminated.as_ref()) {
                Some(t) => {
                    stopped += 1;
                    if t.exit_code == 0 {
                        succeeded += 1;
                    }
                }
                None => waiting += 1,
            }
        }
    }
    if waiting > 0 {
        "Pending"
    } else if running > 0 {
        "Running"
    } else if stopped > 0 {
        if policy == "Always" {
            "Running"
        } else if stopped == succeeded {
            "Succeeded"
        } else if policy == "Never" {
            "Failed"
        } else {
            "Running"
        }
    } else {
        "Pending"
    }
}

/// The API status for the pod as it stands.
pub fn compute(i: &Inputs<'_>) -> PodStatus {
    let spec = i.pod.spec.clone().unwrap_or_default();
    let default_waiting = if spec.init_containers.as_ref().is_some_and(|c| !c.is_empty()) {
        "PodInitializing"
    } else {
        "ContainerCreating"
    };
    let init: Vec<ContainerStatus> = spec
        .init_containers
        .iter()
        .flatten()
        .map(|c| {
            let mut s = container_status(c, i.records.get(&c.name), i.views.get(&c.name), default_waiting);
            // An init container is ready once it has succeeded (upstream's prober manager).
            s.ready =
                s.state.as_ref().and_then(|st| st.terminated.as_ref()).is_some_and(|t| t.exit_code == 0);
            s
        })
        .collect();
    let regular: Vec<ContainerStatus> = spec
        .containers
        .iter()
        .map(|c| container_status(c, i.records.get(&c.name), i.views.get(&c.name), default_waiting))
        .collect();
    // Ephemeral containers have statuses of their own and count for nothing else.
    let ephemeral: Vec<ContainerStatus> = crate::kuberuntime::ephemeral_containers(i.pod)
        .iter()
        .map(|(c, _)| container_status(c, i.records.get(&c.name), i.views.get(&c.name), "ContainerCreating"))
        .collect();
    let phase = phase(i.pod, &init, &regular);
    let initialized = spec.init_containers.iter().flatten().all(|c| init_succeeded(i.records.get(&c.name)));
    let containers_ready = regular.iter().all(|s| s.ready);
    let prev_conditions = i.previous.and_then(|p| p.conditions.clone()).unwrap_or_default();
    let cond = |type_: &str, ok: bool, reason: Option<&str>, message: Option<String>| {
        let status = if ok { "True" } else { "False" };
        let since = prev_conditions
            .iter()
            .find(|c| c.type_ == type_ && c.status == status)
            .and_then(|c| c.last_transition_time.clone())
            .unwrap_or(Time(i.now));
        PodCondition {
            type_: type_.into(),
            status: status.into(),
            last_transition_time: Some(since),
            reason: if ok { None } else { reason.map(String::from) },
            message: if ok { None } else { message },
            ..Default::default()
        }
    };
    let terminal = phase == "Succeeded" || phase == "Failed";
    // Upstream's condition messages name the containers holding the pod back, in spec
    // order, as Go prints a []string.
    let not_ready = |what: &str, ss: &[ContainerStatus]| {
        let names: Vec<&str> = ss.iter().filter(|s| !s.ready).map(|s| s.name.as_str()).collect();
        (!names.is_empty()).then(|| format!("containers with {what} status: [{}]", names.join(" ")))
    };
    // A succeeded pod's containers are "completed", not unready; a failed one's are unready.
    let (ready_reason, ready_message) = if phase == "Succeeded" {
        ("PodCompleted", None)
    } else {
        ("ContainersNotReady", not_ready("unready", &regular))
    };
    let mut conditions = vec![
        cond("PodReadyToStartContainers", i.sandbox_ready && !terminal, None, None),
        cond("Initialized", initialized, Some("ContainersNotInitialized"), not_ready("incomplete", &init)),
        cond("Ready", containers_ready && !terminal, Some(ready_reason), ready_message.clone()),
        cond("ContainersReady", containers_ready && !terminal, Some(ready_reason), ready_message),
    ];
    if let Some(sched) = prev_conditions.iter().find(|c| c.type_ == "PodScheduled") {
        conditions.push(sched.clone());
    } else {
        conditions.push(cond("PodScheduled", true, None, None));
    }
    let host_network = spec.host_network.unwrap_or(false);
    let ips: Vec<String> = if host_network { vec![i.host_ip.to_string()] } else { i.pod_ips.to_vec() };
    PodStatus {
        phase: Some(phase.into()),
        conditions: Some(conditions),
        host_ip: (!i.host_ip.is_empty()).then(|| i.host_ip.to_string()),
        host_ips: (!i.host_ip.is_empty()).then(|| vec![HostIP { ip: i.host_ip.to_string() }]),
        pod_ip: ips.first().cloned(),
        pod_ips: (!ips.is_empty()).then(|| ips.iter().map(|ip| PodIP { ip: ip.clone() }).collect()),
        start_time: Some(i.previous.and_then(|p| p.start_time.clone()).unwrap_or(Time(i.now))),
        qos_class: Some(qos_class(i.pod).as_str().into()),
        init_container_statuses: (!init.is_empty()).then_some(init),
        container_statuses: Some(regular),
        ephemeral_container_statuses: (!ephemeral.is_empty()).then_some(ephemeral),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn record(state: cri::ContainerState, exit: i32, attempt: u32) -> cri::ContainerStatus {
        cri::ContainerStatus {
            id: format!("id{attempt}"),
            state: state as i32,
            exit_code: exit,
            started_at: 1_700_000_000_000_000_000,
            annotations: [(cri::CONTAINER_RESTART_COUNT_ANNOTATION.to_string(), attempt.to_string())].into(),
            ..Default::default()
        }
    }

    fn pod(policy: &str) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "p", "uid": "u"},
            "spec": {"restartPolicy": policy, "containers": [{"name": "c", "image": "i"}]}
        }))
        .unwrap()
    }

    fn status(pod: &Pod, rec: ContainerRecord, view: ContainerView) -> PodStatus {
        let records = HashMap::from([("c".to_string(), rec)]);
        let views = HashMap::from([("c".to_string(), view)]);
        compute(&Inputs {
            pod,
            records: &records,
            views: &views,
            sandbox_ready: true,
            pod_ips: &["10.1.0.2".into()],
            host_ip: "192.168.1.1",
            previous: None,
            now: Timestamp::UNIX_EPOCH,
        })
    }

    #[test]
    fn termination_message_from_file_else_log_tail_on_failure() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("msg");
        let log = dir.path().join("0.log");
        std::fs::write(&file, "").unwrap();
        std::fs::write(&log, "2026-01-01T00:00:00Z stdout P par\n2026-01-01T00:00:00Z stdout F tial\n2026-01-01T00:00:01Z stderr F boom\n").unwrap();
        let mut c: Container =
            serde_json::from_value(json!({"name": "c", "terminationMessagePath": "/dev/m"})).unwrap();
        let mut s = record(cri::ContainerState::ContainerExited, 1, 0);
        s.mounts = vec![cri::Mount {
            container_path: "/dev/m".into(),
            host_path: file.display().to_string(),
            ..Default::default()
        }];
        s.log_path = log.display().to_string();
        // Policy File (the default): an empty file is no message.
        assert_eq!(termination_message(&c, &s), None);
        c.termination_message_policy = Some("FallbackToLogsOnError".into());
        assert_eq!(termination_message(&c, &s).as_deref(), Some("partial\nboom\n"));
        // Output without a final newline stays as written (the conformance spec's
        // `echo -n DONE; false` expects exactly "DONE").
        std::fs::write(&log, "2026-01-01T00:00:00Z stdout P DONE\n").unwrap();
        assert_eq!(termination_message(&c, &s).as_deref(), Some("DONE"));
        let many: String = (0..100).map(|i| format!("2026-01-01T00:00:00Z stdout F {i}\n")).collect();
        std::fs::write(&log, many + "2026-01-01T00:00:00Z stdout P end\n").unwrap();
        let tail = termination_message(&c, &s).unwrap();
        assert!(tail.starts_with("21\n") && tail.ends_with("99\nend"), "the last 80 lines: {tail}");
        // A success never falls back to the log.
        s.exit_code = 0;
        assert_eq!(termination_message(&c, &s), None);
        // The file wins, cut at 4096 bytes.
        std::fs::write(&file, "x".repeat(5000)).unwrap();
        assert_eq!(termination_message(&c, &s).map(|m| m.len()), Some(4096));
    }

    /// A container the runtime has nothing for waits as `ContainerCreating`, or as
    /// `PodInitializing` while its pod has init containers (conformance: "should not start
    /// app containers if init containers fail").
    #[test]
    fn waiting_reasons_before_the_first_start() {
        let reason =
            |s: &ContainerStatus| s.state.as_ref().unwrap().waiting.as_ref().unwrap().reason.clone().unwrap();
        let plain = status(&pod("Always"), ContainerRecord::default(), ContainerView::default());
        assert_eq!(reason(&plain.container_statuses.unwrap()[0]), "ContainerCreating");
        let mut with_init = pod("Always");
        with_init.spec.as_mut().unwrap().init_containers =
            Some(vec![serde_json::from_value(json!({"name": "c", "image": "i"})).unwrap()]);
        // The init container "c" failed (its record is shared by name in this helper); the
        // app container keeps waiting with upstream's reason.
        with_init.spec.as_mut().unwrap().containers[0].name = "app".into();
        let s = status(
            &with_init,
            ContainerRecord {
                latest: Some(record(cri::ContainerState::ContainerExited, 1, 2)),
                previous: None,
            },
            ContainerView {
                waiting: Some(("CrashLoopBackOff".into(), "back-off".into())),
                ..Default::default()
            },
        );
        assert_eq!(reason(&s.container_statuses.unwrap()[0]), "PodInitializing");
        let conditions = s.conditions.clone().unwrap();
        let message = |t: &str| conditions.iter().find(|c| c.type_ == t).and_then(|c| c.message.clone());
        assert_eq!(message("Initialized").as_deref(), Some("containers with incomplete status: [c]"));
        assert_eq!(message("Ready").as_deref(), Some("containers with unready status: [app]"));
        assert_eq!(message("ContainersReady").as_deref(), Some("containers with unready status: [app]"));
        assert_eq!(reason(&s.init_container_statuses.unwrap()[0]), "CrashLoopBackOff");
        assert_eq!(s.phase.as_deref(), Some("Pending"));
        // Once it has succeeded, the init container is ready (conformance: "should invoke
        // init containers on a RestartAlways pod").
        let s = status(
            &with_init,
            ContainerRecord {
                latest: Some(record(cri::ContainerState::ContainerExited, 0, 0)),
                previous: None,
            },
            ContainerView::default(),
        );
        assert!(s.init_container_statuses.unwrap()[0].ready);
    }

    #[test]
    fn running_ready_and_crashloop() {
        let p = pod("Always");
        let s = status(
            &p,
            ContainerRecord {
                latest: Some(record(cri::ContainerState::ContainerRunning, 0, 0)),
                previous: None,
            },
            ContainerView { waiting: None, ready: true, started: true },
        );
        assert_eq!(s.phase.as_deref(), Some("Running"));
        assert_eq!(s.pod_ip.as_deref(), Some("10.1.0.2"));
        let cs = &s.container_statuses.as_ref().unwrap()[0];
        assert!(cs.ready);
        assert_eq!(cs.container_id.as_deref(), Some("containerd://id0"));
        assert!(s.conditions.unwrap().iter().any(|c| c.type_ == "Ready" && c.status == "True"));

        let s = status(
            &p,
            ContainerRecord {
                latest: Some(record(cri::ContainerState::ContainerExited, 1, 3)),
                previous: None,
            },
            ContainerView {
                waiting: Some(("CrashLoopBackOff".into(), "back-off".into())),
                ..Default::default()
            },
        );
        assert_eq!(s.phase.as_deref(), Some("Running"), "a crash-looping container's pod stays Running");
        let cs = &s.container_statuses.as_ref().unwrap()[0];
        assert_eq!(cs.restart_count, 3);
        assert_eq!(
            cs.state.as_ref().unwrap().waiting.as_ref().unwrap().reason.as_deref(),
            Some("CrashLoopBackOff")
        );
        assert_eq!(cs.last_state.as_ref().unwrap().terminated.as_ref().unwrap().exit_code, 1);
    }

    #[test]
    fn terminal_phases() {
        let done = || ContainerRecord {
            latest: Some(record(cri::ContainerState::ContainerExited, 0, 0)),
            previous: None,
        };
        let failed = || ContainerRecord {
            latest: Some(record(cri::ContainerState::ContainerExited, 2, 0)),
            previous: None,
        };
        assert_eq!(
            status(&pod("Never"), done(), ContainerView::default()).phase.as_deref(),
            Some("Succeeded")
        );
        assert_eq!(
            status(&pod("Never"), failed(), ContainerView::default()).phase.as_deref(),
            Some("Failed")
        );
        assert_eq!(
            status(&pod("OnFailure"), done(), ContainerView::default()).phase.as_deref(),
            Some("Succeeded")
        );
        assert_eq!(
            status(&pod("Always"), ContainerRecord::default(), ContainerView::default()).phase.as_deref(),
            Some("Pending")
        );
    }
}
