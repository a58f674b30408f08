//! Events about pods (`Scheduled`, `FailedScheduling`, `Preempted`), written as
//! `events.k8s.io/v1` Events by a few background writers. Like client-go's broadcaster,
//! the buffer is bounded and a full buffer drops events: they inform, and must never slow
//! scheduling down or grow memory without bound.

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Api, PostParams};
use tokio::sync::mpsc;

use crate::framework::PodInfo;

const BUFFER: usize = 1000;
const WRITERS: usize = 4;

/// Reports events for the controller `default-scheduler`.
#[derive(Clone)]
pub struct Recorder {
    tx: mpsc::Sender<Event>,
    instance: String,
}

impl Recorder {
    /// Starts the writers on the current runtime.
    pub fn start(client: kube::Client, instance: String) -> Self {
        let (tx, rx) = mpsc::channel::<Event>(BUFFER);
        let rx = std::sync::Arc::new(tokio::sync::Mutex::new(rx));
        for _ in 0..WRITERS {
            let rx = rx.clone();
            let client = client.clone();
            tokio::spawn(async move {
                loop {
                    let Some(event) = rx.lock().await.recv().await else { return };
                    let ns = event.metadata.namespace.clone().unwrap_or_default();
                    let api: Api<Event> = Api::namespaced(client.clone(), &ns);
                    if let Err(err) = api.create(&PostParams::default(), &event).await {
                        tracing::debug!(%err, "writing event");
                    }
                }
            });
        }
        Self { tx, instance }
    }

    /// Queues an event about `pod`; `kind` is `Normal` or `Warning`.
    pub fn pod_event(&self, pod: &PodInfo, kind: &str, reason: &str, action: &str, note: String) {
        let now = k8s_openapi::jiff::Timestamp::now();
        let event = Event {
            metadata: ObjectMeta {
                name: Some(format!("{}.{:x}", pod.name, now.as_nanosecond())),
                namespace: Some(pod.namespace.clone()),
                ..ObjectMeta::default()
            },
            event_time: Some(MicroTime(now)),
            action: Some(action.to_owned()),
            reason: Some(reason.to_owned()),
            // The API caps notes at 1 kB.
            note: Some(truncate(note, 1024)),
            type_: Some(kind.to_owned()),
            reporting_controller: Some("default-scheduler".into()),
            reporting_instance: Some(self.instance.clone()),
            regarding: Some(ObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Pod".into()),
                namespace: Some(pod.namespace.clone()),
                name: Some(pod.name.clone()),
                uid: Some(pod.uid.clone()),
                resource_version: pod.pod.metadata.resource_version.clone(),
                ..ObjectReference::default()
            }),
            ..Event::default()
        };
        if self.tx.try_send(event).is_err() {
            tracing::debug!(pod = %pod.key, reason, "event buffer full, dropping event");
        }
    }
}

fn truncate(mut s: String, max: usize) -> String {
    if s.len() > max {
        let mut cut = max - 3;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
        s.push_str("...");
    }
    s
}
