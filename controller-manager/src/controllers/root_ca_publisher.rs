//! The root-ca-certificate-publisher: a `kube-root-ca.crt` ConfigMap in every namespace
//! holding the CA that signs the API server's certificate, so pods can verify it when
//! they call `kubernetes.default.svc`. Edits and deletions are undone.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, ObjectMeta, PostParams};

use crate::controller::{self, Context, Error};
use crate::informers::{Event, Informer};

const NAME: &str = "kube-root-ca.crt";
const DESCRIPTION: &str = "Contains a CA bundle that can be used to verify the kube-apiserver when using internal \
endpoints such as the internal service IP or kubernetes.default.svc. No other usage is guaranteed across \
distributions of Kubernetes clusters.";

pub fn start(ctx: &Context) -> Result<(), Error> {
    // With neither `--root-ca-file` nor a CA in the kubeconfig (an API server reached
    // over plain HTTP), upstream publishes its client config's CA data as it is, empty:
    // pods that mount the ConfigMap still start, and the object says what is known.
    let ca = ctx.root_ca.clone().unwrap_or_else(|| {
        tracing::warn!(
            "no root CA (--root-ca-file or the kubeconfig's): kube-root-ca.crt is published empty"
        );
        Arc::new(String::new())
    });
    let namespaces = ctx.informers.get::<Namespace>();
    let configmaps = ctx.informers.get::<ConfigMap>();
    let queue = ctx.queue("root_ca_cert_publisher");
    {
        let queue = queue.clone();
        namespaces.add_handler(move |e| match e {
            Event::Add(ns) | Event::Update(_, ns) => queue.add(ns.metadata.name.clone().unwrap_or_default()),
            Event::Delete(_) => {}
        });
    }
    {
        let queue = queue.clone();
        configmaps.add_handler(move |e| {
            let (Event::Update(_, cm) | Event::Delete(cm)) = e else { return };
            if cm.metadata.name.as_deref() == Some(NAME) {
                queue.add(cm.metadata.namespace.clone().unwrap_or_default());
            }
        });
    }
    let client = ctx.client.clone();
    controller::run_workers(ctx, queue, 1, move |ns| {
        sync(client.clone(), namespaces.clone(), configmaps.clone(), ca.clone(), ns)
    });
    Ok(())
}

fn desired_data(ca: &str) -> BTreeMap<String, String> {
    BTreeMap::from([("ca.crt".to_string(), ca.to_string())])
}

async fn sync(
    client: kube::Client,
    namespaces: Arc<Informer<Namespace>>,
    configmaps: Arc<Informer<ConfigMap>>,
    ca: Arc<String>,
    ns: String,
) -> Result<(), Error> {
    let Some(namespace) = namespaces.get(&ns) else { return Ok(()) };
    if namespace.metadata.deletion_timestamp.is_some() {
        return Ok(());
    }
    let api = Api::<ConfigMap>::namespaced(client, &ns);
    let data = desired_data(&ca);
    let annotations = BTreeMap::from([("kubernetes.io/description".to_string(), DESCRIPTION.to_string())]);
    let result = match configmaps.get_namespaced(&ns, NAME) {
        None => {
            let cm = ConfigMap {
                metadata: ObjectMeta {
                    name: Some(NAME.into()),
                    annotations: Some(annotations),
                    ..ObjectMeta::default()
                },
                data: Some(data),
                ..ConfigMap::default()
            };
            api.create(&PostParams::default(), &cm).await.map(drop)
        }
        Some(cm) => {
            let has_annotation =
                cm.metadata.annotations.as_ref().is_some_and(|a| {
                    a.get("kubernetes.io/description").map(String::as_str) == Some(DESCRIPTION)
                });
            if cm.data.as_ref() == Some(&data) && cm.binary_data.is_none() && has_annotation {
                return Ok(());
            }
            // Replaced with the informer's resourceVersion: a concurrent edit conflicts and
            // the retry sees it.
            let mut cm = (*cm).clone();
            cm.data = Some(data);
            cm.binary_data = None;
            cm.metadata.annotations.get_or_insert_default().extend(annotations);
            api.replace(NAME, &PostParams::default(), &cm).await.map(drop)
        }
    };
    match result {
        Ok(()) => Ok(()),
        Err(e) if matches!(controller::api_code(&e), Some(403 | 404)) => Ok(()),
        Err(e) => Err(e.into()),
    }
}
