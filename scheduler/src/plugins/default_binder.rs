//! DefaultBinder: writes the placement as a `pods/binding` subresource create, the only
//! way a pod's `spec.nodeName` is set after creation.

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::{Binding, ObjectReference, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, PostParams};

use crate::framework::{Bind, Plugin, PodInfo, Rejection, Status};

pub const NAME: &str = "DefaultBinder";

pub struct DefaultBinder {
    client: kube::Client,
}

impl DefaultBinder {
    pub fn new(client: kube::Client) -> Self {
        Self { client }
    }
}

impl Plugin for DefaultBinder {
    fn name(&self) -> &'static str {
        NAME
    }
    fn as_bind(&self) -> Option<&dyn Bind> {
        Some(self)
    }
}

impl Bind for DefaultBinder {
    fn bind<'a>(&'a self, pod: &'a PodInfo, node: &'a str) -> BoxFuture<'a, Status> {
        Box::pin(async move {
            let binding = Binding {
                metadata: ObjectMeta {
                    name: Some(pod.name.clone()),
                    namespace: Some(pod.namespace.clone()),
                    // The UID precondition: a pod deleted and re-created under the same
                    // name meanwhile is not bound by a decision made for its predecessor.
                    uid: Some(pod.uid.clone()),
                    ..ObjectMeta::default()
                },
                target: ObjectReference {
                    kind: Some("Node".into()),
                    name: Some(node.to_owned()),
                    ..ObjectReference::default()
                },
            };
            let api: Api<Pod> = Api::namespaced(self.client.clone(), &pod.namespace);
            api.create_subresource::<Binding, serde_json::Value>(
                "binding",
                &pod.name,
                &PostParams::default(),
                &binding,
            )
            .await
            .map(|_| ())
            .map_err(|e| Rejection::error(e.to_string()))
        })
    }
}
