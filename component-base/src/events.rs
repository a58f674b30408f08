//! Events about the objects components act on (`SuccessfulCreate`, `NodeNotReady`, `Pulled`,
//! `BackOff`, ...), written as core/v1 Events as upstream's event recorder does, so
//! `kubectl describe` shows them. The buffer is bounded and drops when full: events inform
//! and must never slow a controller down.

use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::api::{Api, PostParams};
use kube::{Resource, ResourceExt};
use tokio::sync::mpsc;

const BUFFER: usize = 1000;
const WRITERS: usize = 2;

/// Whether an event reports normal progress or a problem.
#[derive(Debug, Clone, Copy)]
pub enum Type {
    Normal,
    Warning,
}

/// Writes events; cheap to clone.
#[derive(Clone)]
pub struct Recorder {
    tx: mpsc::Sender<Event>,
    /// `source.host`: the node, for a kubelet's events.
    host: Option<String>,
}

impl Recorder {
    /// Starts the writers on the current runtime.
    pub fn start(client: kube::Client) -> Self {
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
        Self { tx, host: None }
    }

    /// The same recorder, naming `host` as every event's source host (the kubelet's node).
    pub fn with_host(mut self, host: &str) -> Self {
        self.host = Some(host.to_owned());
        self
    }

    /// Queues an event about `obj` from `component` (e.g. `replicaset-controller`).
    pub fn event<K: Resource<DynamicType = ()>>(
        &self,
        component: &str,
        obj: &K,
        kind: Type,
        reason: &str,
        message: String,
    ) {
        let now = Time(k8s_openapi::jiff::Timestamp::now());
        // Cluster-scoped objects' events live in `default`, as upstream.
        let ns = obj.namespace().unwrap_or_else(|| "default".into());
        let name = obj.name_any();
        let event = Event {
            metadata: ObjectMeta {
                name: Some(format!("{name}.{:x}", now.0.as_nanosecond())),
                namespace: Some(ns),
                ..ObjectMeta::default()
            },
            involved_object: ObjectReference {
                api_version: Some(K::api_version(&()).into_owned()),
                kind: Some(K::kind(&()).into_owned()),
                namespace: obj.namespace(),
                name: Some(name),
                uid: obj.uid(),
                resource_version: obj.resource_version(),
                ..ObjectReference::default()
            },
            reason: Some(reason.to_owned()),
            message: Some(message),
            type_: Some(match kind {
                Type::Normal => "Normal".into(),
                Type::Warning => "Warning".into(),
            }),
            source: Some(EventSource { component: Some(component.to_owned()), host: self.host.clone() }),
            reporting_instance: self.host.clone(),
            reporting_component: Some(component.to_owned()),
            first_timestamp: Some(now.clone()),
            last_timestamp: Some(now),
            count: Some(1),
            ..Event::default()
        };
        if self.tx.try_send(event).is_err() {
            tracing::debug!(reason, "event buffer full, dropping event");
        }
    }
}
