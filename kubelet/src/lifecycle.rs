//! Container lifecycle hooks (upstream's `kuberuntime` handler runner): a container's
//! `postStart` handler runs right after the runtime starts it, its `preStop` handler before
//! the runtime is asked to stop it. A handler is one of `exec` (a command in the container,
//! through CRI), `httpGet` (one request to the pod, whose answer is not judged, as
//! upstream), or `sleep` (a pause of the kubelet's own; 1.30's `PodLifecycleSleepAction`).
//! `tcpSocket` is accepted by the API for compatibility but never run, as upstream.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, LifecycleHandler};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use crate::{cri, probe};

/// The `User-Agent` of hook requests (upstream: `kube-lifecycle/<major>.<minor>`).
const USER_AGENT: &str = "kube-lifecycle/1.32";

/// Runs `handler` for `container` (running as `id` in a pod at `pod_ip`), for at most
/// `budget`. `Err` carries the message of upstream's `FailedPostStartHook` /
/// `FailedPreStopHook` events.
pub async fn run(
    runtime: &cri::Runtime,
    id: &str,
    container: &Container,
    handler: &LifecycleHandler,
    pod_ip: &str,
    budget: Duration,
) -> Result<(), String> {
    tokio::time::timeout(budget, run_handler(runtime, id, container, handler, pod_ip, budget))
        .await
        .unwrap_or_else(|_| Err(format!("hook did not finish within {}s", budget.as_secs())))
}

/// `run` without its bound.
async fn run_handler(
    runtime: &cri::Runtime,
    id: &str,
    container: &Container,
    handler: &LifecycleHandler,
    pod_ip: &str,
    budget: Duration,
) -> Result<(), String> {
    if let Some(exec) = &handler.exec {
        let cmd = exec.command.clone().unwrap_or_default();
        return match runtime.exec_sync(id, cmd.clone(), budget).await {
            Ok(r) if r.exit_code == 0 => Ok(()),
            Ok(r) => Err(format!(
                "Exec lifecycle hook ({cmd:?}) for Container {:?} failed - error: command '{}' exited with {}: {}",
                container.name,
                cmd.join(" "),
                r.exit_code,
                String::from_utf8_lossy(&r.stderr).trim()
            )),
            Err(e) => Err(format!(
                "Exec lifecycle hook ({cmd:?}) for Container {:?} failed - error: {e}",
                container.name
            )),
        };
    }
    if let Some(h) = &handler.http_get {
        let host = h.host.clone().filter(|h| !h.is_empty()).unwrap_or_else(|| pod_ip.to_string());
        if host.is_empty() {
            return Err("HTTP lifecycle hook has no host and the pod has no IP".into());
        }
        let port = port_of(container, &h.port)?;
        let path = h.path.clone().unwrap_or_default();
        let path = if path.starts_with('/') { path } else { format!("/{path}") };
        let https = h.scheme.as_deref().is_some_and(|s| s.eq_ignore_ascii_case("HTTPS"));
        let headers = h.http_headers.as_deref().unwrap_or_default();
        return probe::http_status(https, &host, port, &path, headers, USER_AGENT).await.map(|_| ()).map_err(
            |e| {
                format!("HTTP lifecycle hook ({path}) for Container {:?} failed - error: {e}", container.name)
            },
        );
    }
    if let Some(s) = &handler.sleep {
        tokio::time::sleep(Duration::from_secs(s.seconds.max(0) as u64)).await;
        return Ok(());
    }
    if handler.tcp_socket.is_some() {
        // Upstream logs and skips it: a TCP handler was never implemented.
        return Ok(());
    }
    Err("lifecycle handler has no action".into())
}

/// A handler's port: a number, or the name of one of the container's ports.
fn port_of(container: &Container, port: &IntOrString) -> Result<u16, String> {
    match port {
        IntOrString::Int(p) => {
            u16::try_from(*p).ok().filter(|p| *p > 0).ok_or_else(|| format!("invalid port {p}"))
        }
        IntOrString::String(name) => match name.parse::<u16>() {
            Ok(p) if p > 0 => Ok(p),
            _ => container
                .ports
                .iter()
                .flatten()
                .find(|p| p.name.as_deref() == Some(name.as_str()))
                .and_then(|p| u16::try_from(p.container_port).ok())
                .ok_or_else(|| format!("port {name:?} not found in the container's ports")),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn ports_by_number_and_name() {
        let c: Container =
            serde_json::from_value(json!({"name": "c", "ports": [{"name": "web", "containerPort": 8080}]}))
                .unwrap();
        assert_eq!(port_of(&c, &IntOrString::Int(80)).unwrap(), 80);
        assert_eq!(port_of(&c, &IntOrString::String("web".into())).unwrap(), 8080);
        assert_eq!(port_of(&c, &IntOrString::String("81".into())).unwrap(), 81);
        assert!(port_of(&c, &IntOrString::String("nope".into())).is_err());
        assert!(port_of(&c, &IntOrString::Int(0)).is_err());
    }
}
