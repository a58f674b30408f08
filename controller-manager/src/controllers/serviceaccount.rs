//! The serviceaccount controller: every active namespace has a `default` ServiceAccount,
//! recreated if someone deletes it, so pods that name none can run.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use kube::api::{Api, ObjectMeta, PostParams};

use crate::controller::{self, Context, Error};
use crate::informers::{Event, Informer};

const NAME: &str = "default";

pub fn start(ctx: &Context) -> Result<(), Error> {
    let namespaces = ctx.informers.get::<Namespace>();
    let accounts = ctx.informers.get::<ServiceAccount>();
    let queue = ctx.queue("serviceaccount");
    {
        let queue = queue.clone();
        namespaces.add_handler(move |e| match e {
            Event::Add(ns) | Event::Update(_, ns) => queue.add(ns.metadata.name.clone().unwrap_or_default()),
            Event::Delete(_) => {}
        });
    }
    {
        let queue = queue.clone();
        accounts.add_handler(move |e| {
            if let Event::Delete(sa) = e
                && sa.metadata.name.as_deref() == Some(NAME)
            {
                queue.add(sa.metadata.namespace.clone().unwrap_or_default());
            }
        });
    }
    let client = ctx.client.clone();
    controller::run_workers(ctx, queue, 1, move |ns| {
        sync(client.clone(), namespaces.clone(), accounts.clone(), ns)
    });
    Ok(())
}

async fn sync(
    client: kube::Client,
    namespaces: Arc<Informer<Namespace>>,
    accounts: Arc<Informer<ServiceAccount>>,
    ns: String,
) -> Result<(), Error> {
    let Some(namespace) = namespaces.get(&ns) else { return Ok(()) };
    let terminating = namespace.metadata.deletion_timestamp.is_some()
        || namespace.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Terminating");
    if terminating || accounts.get_namespaced(&ns, NAME).is_some() {
        return Ok(());
    }
    let sa = ServiceAccount {
        metadata: ObjectMeta { name: Some(NAME.into()), ..ObjectMeta::default() },
        ..ServiceAccount::default()
    };
    match Api::<ServiceAccount>::namespaced(client, &ns).create(&PostParams::default(), &sa).await {
        Ok(_) => Ok(()),
        // Already there (the informer lags), or the namespace began terminating.
        Err(e) if matches!(controller::api_code(&e), Some(409 | 403 | 404)) => Ok(()),
        Err(e) => Err(e.into()),
    }
}
