//! Pod sources: the API server (a watch of the pods with `spec.nodeName=<node>`) and the
//! static pod directory (`staticPodPath`, checked every `fileCheckFrequency`).

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use kube::runtime::watcher;
use sha2::Digest;

use crate::Kubelet;
use crate::pod_manager::{CONFIG_HASH_ANNOTATION, CONFIG_SEEN_ANNOTATION, CONFIG_SOURCE_ANNOTATION};

/// Watches this node's pods until shutdown; every change wakes the pods' workers.
pub async fn watch_api(kubelet: Arc<Kubelet>, client: kube::Client) {
    let api: Api<Pod> = Api::all(client);
    let cfg = watcher::Config::default().fields(&format!("spec.nodeName={}", kubelet.opts.node_name));
    let mut stream = watcher::watcher(api, cfg).boxed();
    let mut initial: Vec<Pod> = Vec::new();
    let stop = kubelet.shutdown.wait();
    tokio::pin!(stop);
    loop {
        let ev = tokio::select! {
            () = &mut stop => return,
            ev = stream.next() => ev,
        };
        let touched = match ev {
            None => return,
            Some(Err(err)) => {
                tracing::warn!(%err, "watching this node's pods");
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
            Some(Ok(watcher::Event::Init)) => {
                initial.clear();
                continue;
            }
            Some(Ok(watcher::Event::InitApply(p))) => {
                initial.push(p);
                continue;
            }
            Some(Ok(watcher::Event::InitDone)) => kubelet.pods.replace_api(std::mem::take(&mut initial)),
            Some(Ok(watcher::Event::Apply(p))) => kubelet.pods.upsert_api(p),
            Some(Ok(watcher::Event::Delete(p))) => {
                // Deleted without the kubelet having seen it terminate (a force delete):
                // its containers still get the (short) grace it was deleted with.
                if let (Some(uid), Some(g)) = (&p.metadata.uid, p.metadata.deletion_grace_period_seconds) {
                    kubelet.worker_state.removed_grace.lock().insert(uid.clone(), g);
                }
                kubelet.pods.remove_api(&p)
            }
        };
        for uid in touched {
            kubelet.wake(&uid);
        }
    }
}

/// Reads the manifest directory every `period` until shutdown.
pub async fn watch_static(kubelet: Arc<Kubelet>, dir: std::path::PathBuf, period: Duration) {
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = kubelet.shutdown.wait() => return,
            _ = tick.tick() => {}
        }
        let pods = read_manifests(&dir, &kubelet.opts.node_name);
        for uid in kubelet.pods.replace_static(pods) {
            kubelet.wake(&uid);
        }
    }
}

/// Every pod manifest (YAML or JSON, one Pod per file; dot files skipped as upstream) in
/// `dir`, made a static pod of `node`. A file that does not parse is logged and skipped.
pub fn read_manifests(dir: &Path, node: &str) -> Vec<Pod> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut files: Vec<_> = entries.flatten().map(|e| e.path()).collect();
    files.sort();
    let mut pods = Vec::new();
    for path in files {
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        if name.starts_with('.') || !path.is_file() {
            continue;
        }
        match std::fs::read(&path).map_err(|e| e.to_string()).and_then(|b| static_pod(&b, &path, node)) {
            Ok(p) => pods.push(p),
            Err(err) => tracing::warn!(path = %path.display(), %err, "skipping static pod manifest"),
        }
    }
    pods
}

/// A static pod from a manifest: named `<name>-<node>`, in `default` unless it says
/// otherwise, bound to `node`, with a UID derived from the content, node and file (so a
/// changed file is a new pod, as upstream).
pub fn static_pod(content: &[u8], path: &Path, node: &str) -> Result<Pod, String> {
    if content.len() > 10 << 20 {
        return Err("manifest larger than 10 MiB".into());
    }
    let mut pod: Pod = serde_yaml::from_slice(content).map_err(|e| e.to_string())?;
    let v: serde_json::Value = serde_yaml::from_slice(content).map_err(|e| e.to_string())?;
    if v.get("kind").and_then(|k| k.as_str()) != Some("Pod") {
        return Err("not a Pod manifest".into());
    }
    let name = pod.metadata.name.clone().filter(|n| !n.is_empty()).ok_or("metadata.name is required")?;
    if pod.spec.as_ref().map(|s| s.containers.is_empty()).unwrap_or(true) {
        return Err("spec.containers is required".into());
    }
    let mut h = sha2::Sha256::new();
    h.update(content);
    h.update(node.as_bytes());
    h.update(path.as_os_str().as_encoded_bytes());
    let digest = h.finalize();
    let uid: String = digest[..16].iter().map(|b| format!("{b:02x}")).collect();
    let m = &mut pod.metadata;
    m.name = Some(format!("{name}-{node}"));
    if m.namespace.as_deref().unwrap_or("").is_empty() {
        m.namespace = Some("default".into());
    }
    m.uid = Some(uid.clone());
    let ann = m.annotations.get_or_insert_default();
    ann.insert(CONFIG_SOURCE_ANNOTATION.into(), "file".into());
    ann.insert(CONFIG_HASH_ANNOTATION.into(), uid);
    ann.insert(CONFIG_SEEN_ANNOTATION.into(), k8s_openapi::jiff::Timestamp::now().to_string());
    let spec = pod.spec.get_or_insert_default();
    spec.node_name = Some(node.into());
    // Defaults the API server would apply (the static pod never passes through it).
    spec.restart_policy.get_or_insert_with(|| "Always".into());
    spec.dns_policy.get_or_insert_with(|| "ClusterFirst".into());
    spec.termination_grace_period_seconds.get_or_insert(30);
    spec.enable_service_links.get_or_insert(true);
    for c in spec.containers.iter_mut().chain(spec.init_containers.iter_mut().flatten()) {
        if c.image_pull_policy.is_none() {
            let latest = c
                .image
                .as_deref()
                .map(|i| !i.rsplit('/').next().unwrap_or(i).contains(':') || i.ends_with(":latest"));
            c.image_pull_policy = Some(if latest.unwrap_or(true) { "Always" } else { "IfNotPresent" }.into());
        }
        c.termination_message_path.get_or_insert_with(|| "/dev/termination-log".into());
    }
    Ok(pod)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn static_pods_are_named_bound_and_hashed() {
        let y = b"apiVersion: v1\nkind: Pod\nmetadata:\n  name: web\nspec:\n  containers:\n  - name: c\n    image: localhost/busybox:latest\n";
        let p = static_pod(y, Path::new("/m/web.yaml"), "n1").unwrap();
        assert_eq!(p.metadata.name.as_deref(), Some("web-n1"));
        assert_eq!(p.metadata.namespace.as_deref(), Some("default"));
        assert_eq!(p.spec.as_ref().unwrap().node_name.as_deref(), Some("n1"));
        let ann = p.metadata.annotations.as_ref().unwrap();
        assert_eq!(ann[CONFIG_SOURCE_ANNOTATION], "file");
        assert_eq!(ann[CONFIG_HASH_ANNOTATION], p.metadata.uid.clone().unwrap());
        let changed = static_pod(
            &[y.as_slice(), b"    command: [sleep, '1']\n"].concat(),
            Path::new("/m/web.yaml"),
            "n1",
        )
        .unwrap();
        assert_ne!(changed.metadata.uid, p.metadata.uid, "a changed manifest is a new pod");
        assert!(static_pod(b"kind: Service\nmetadata: {name: x}\n", Path::new("/m/x"), "n1").is_err());
        assert!(
            static_pod(b"kind: Pod\nmetadata: {name: x}\nspec: {containers: []}\n", Path::new("/m/x"), "n1")
                .is_err()
        );
    }
}
