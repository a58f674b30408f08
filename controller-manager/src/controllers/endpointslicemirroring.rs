//! The EndpointSliceMirroring controller (upstream's endpointslice-mirroring-controller):
//! Endpoints that users maintain for a Service without a selector are mirrored into
//! EndpointSlices, so that slice consumers (kube-proxy, cluster DNS) see those endpoints
//! too. Endpoints of selector Services are the endpoints controller's and are left alone,
//! as are Endpoints labelled `endpointslice.kubernetes.io/skip-mirror: "true"`.
//!
//! Each subset becomes slices of its port set and address family (at most
//! [`MAX_ENDPOINTS_PER_SUBSET`] addresses of a subset are mirrored, as upstream); slices
//! are matched to existing ones by (address type, ports) and written only when they differ.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{EndpointAddress, Endpoints, Service};
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions, EndpointPort, EndpointSlice};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DeleteParams, PostParams};

use crate::controller::{self, Context, Error};
use crate::controllers::endpointslice::{
    LABEL_MANAGED_BY, LABEL_SERVICE_NAME, event_object, service_selector,
};
use crate::informers::{self, Informer};
use crate::owners;

pub const CONTROLLER_NAME: &str = "endpointslicemirroring-controller.k8s.io";
pub const LABEL_SKIP_MIRROR: &str = "endpointslice.kubernetes.io/skip-mirror";
/// Upstream's `maxEndpointsPerSubset` default (`--mirroring-max-endpoints-per-subset`).
pub const MAX_ENDPOINTS_PER_SUBSET: usize = 1000;
/// Annotations of the Endpoints that are not carried to the slices (upstream drops these).
const NOT_MIRRORED_ANNOTATIONS: &[&str] =
    &["endpoints.kubernetes.io/last-change-trigger-time", "kubectl.kubernetes.io/last-applied-configuration"];

pub fn start(ctx: &Context) -> Result<(), Error> {
    let queue = ctx.queue("endpoint_slice_mirroring");
    let c = Arc::new(Controller {
        client: ctx.client.clone(),
        services: ctx.informers.get::<Service>(),
        endpoints: ctx.informers.get::<Endpoints>(),
        slices: ctx.informers.get::<EndpointSlice>(),
    });
    {
        let q = queue.clone();
        c.services.add_handler(move |e| q.add(informers::key_of(event_object(e))));
    }
    {
        let q = queue.clone();
        c.endpoints.add_handler(move |e| q.add(informers::key_of(event_object(e))));
    }
    {
        // Someone else's change to a mirrored slice is undone.
        let q = queue.clone();
        c.slices.add_handler(move |e| {
            let slice = event_object(e);
            let labels = slice.metadata.labels.as_ref();
            if labels.and_then(|l| l.get(LABEL_MANAGED_BY)).is_some_and(|m| m == CONTROLLER_NAME)
                && let Some(svc) = labels.and_then(|l| l.get(LABEL_SERVICE_NAME))
            {
                let ns = slice.metadata.namespace.as_deref().unwrap_or_default();
                q.add(format!("{ns}/{svc}"));
            }
        });
    }
    let c2 = c.clone();
    controller::run_workers(ctx, queue, ctx.options.concurrent_service_endpoint_syncs, move |key| {
        let c = c2.clone();
        async move { c.sync(&key).await }
    });
    Ok(())
}

struct Controller {
    client: kube::Client,
    services: Arc<Informer<Service>>,
    endpoints: Arc<Informer<Endpoints>>,
    slices: Arc<Informer<EndpointSlice>>,
}

impl Controller {
    async fn sync(&self, key: &str) -> Result<(), Error> {
        let (ns, name) = informers::split_key(key);
        let existing: Vec<Arc<EndpointSlice>> = self
            .slices
            .list_namespace(ns)
            .into_iter()
            .filter(|s| {
                let l = s.metadata.labels.as_ref();
                l.and_then(|l| l.get(LABEL_MANAGED_BY)).is_some_and(|m| m == CONTROLLER_NAME)
                    && l.and_then(|l| l.get(LABEL_SERVICE_NAME)).is_some_and(|n| n == name)
                    && s.metadata.deletion_timestamp.is_none()
            })
            .collect();
        let svc = self.services.get(key);
        let eps = self.endpoints.get(key);
        let desired = match (&svc, &eps) {
            (Some(svc), Some(eps)) if should_mirror(svc, eps) => desired_slices(svc, eps),
            _ => Vec::new(),
        };
        let api: Api<EndpointSlice> = Api::namespaced(self.client.clone(), ns);
        let mut unmatched: Vec<Arc<EndpointSlice>> = existing;
        for want in desired {
            let k = slice_key(&want);
            match unmatched.iter().position(|s| slice_key(s) == k) {
                Some(i) => {
                    let have = unmatched.remove(i);
                    if !same_content(&have, &want) {
                        let mut update = want;
                        update.metadata.name = have.metadata.name.clone();
                        update.metadata.resource_version = have.metadata.resource_version.clone();
                        update.metadata.generate_name = None;
                        let n = have.metadata.name.as_deref().unwrap_or_default();
                        api.replace(n, &PostParams::default(), &update).await?;
                    }
                }
                None => {
                    if svc.as_ref().is_some_and(|s| s.metadata.deletion_timestamp.is_none()) {
                        api.create(&PostParams::default(), &want).await?;
                    }
                }
            }
        }
        for stale in unmatched {
            let n = stale.metadata.name.as_deref().unwrap_or_default();
            match api.delete(n, &DeleteParams::default()).await {
                Ok(_) => {}
                Err(e) if controller::api_code(&e) == Some(404) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }
}

/// A Service without a selector whose Endpoints do not opt out.
fn should_mirror(svc: &Service, eps: &Endpoints) -> bool {
    service_selector(svc).is_none()
        && eps.metadata.labels.as_ref().and_then(|l| l.get(LABEL_SKIP_MIRROR)).is_none_or(|v| v != "true")
}

fn address_type(ip: &str) -> Option<&'static str> {
    match ip.parse::<IpAddr>().ok()? {
        IpAddr::V4(_) => Some("IPv4"),
        IpAddr::V6(_) => Some("IPv6"),
    }
}

fn endpoint_of(a: &EndpointAddress, ready: bool) -> Endpoint {
    Endpoint {
        addresses: vec![a.ip.clone()],
        conditions: Some(EndpointConditions { ready: Some(ready), ..Default::default() }),
        hostname: a.hostname.clone(),
        node_name: a.node_name.clone(),
        target_ref: a.target_ref.clone(),
        ..Default::default()
    }
}

fn slice_meta(svc: &Service, eps: &Endpoints) -> ObjectMeta {
    let name = svc.metadata.name.clone().unwrap_or_default();
    let mut labels: BTreeMap<String, String> = eps.metadata.labels.clone().unwrap_or_default();
    labels.insert(LABEL_SERVICE_NAME.into(), name.clone());
    labels.insert(LABEL_MANAGED_BY.into(), CONTROLLER_NAME.into());
    let annotations: BTreeMap<String, String> = eps
        .metadata
        .annotations
        .iter()
        .flatten()
        .filter(|(k, _)| !NOT_MIRRORED_ANNOTATIONS.contains(&k.as_str()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    ObjectMeta {
        generate_name: Some(format!("{name}-")),
        namespace: svc.metadata.namespace.clone(),
        labels: Some(labels),
        annotations: (!annotations.is_empty()).then_some(annotations),
        owner_references: Some(vec![owners::controller_ref(svc)]),
        ..ObjectMeta::default()
    }
}

/// The slices the Endpoints make: per subset and address family, its ports and (at most
/// [`MAX_ENDPOINTS_PER_SUBSET`]) addresses, ready ones first. Subsets with the same ports
/// share slices, as upstream merges them.
pub fn desired_slices(svc: &Service, eps: &Endpoints) -> Vec<EndpointSlice> {
    // (address type, ports) -> endpoints, in first-seen order.
    let mut groups: Vec<((&'static str, Vec<EndpointPort>), Vec<Endpoint>)> = Vec::new();
    for subset in eps.subsets.iter().flatten() {
        let ports: Vec<EndpointPort> = subset
            .ports
            .iter()
            .flatten()
            .map(|p| EndpointPort {
                name: p.name.clone(),
                port: Some(p.port),
                protocol: p.protocol.clone().or_else(|| Some("TCP".into())),
                app_protocol: p.app_protocol.clone(),
            })
            .collect();
        let ready = subset.addresses.iter().flatten().map(|a| (a, true));
        let not_ready = subset.not_ready_addresses.iter().flatten().map(|a| (a, false));
        for (a, is_ready) in ready.chain(not_ready).take(MAX_ENDPOINTS_PER_SUBSET) {
            let Some(t) = address_type(&a.ip) else { continue };
            let key = (t, ports.clone());
            let ep = endpoint_of(a, is_ready);
            match groups.iter_mut().find(|(k, _)| *k == key) {
                Some((_, list)) => {
                    if !list.iter().any(|e| e.addresses == ep.addresses) {
                        list.push(ep);
                    }
                }
                None => groups.push((key, vec![ep])),
            }
        }
    }
    groups
        .into_iter()
        .map(|((t, ports), endpoints)| EndpointSlice {
            metadata: slice_meta(svc, eps),
            address_type: t.to_owned(),
            endpoints,
            ports: Some(ports),
        })
        .collect()
}

/// What identifies a mirrored slice: its address type and port set.
fn slice_key(s: &EndpointSlice) -> String {
    let mut ports: Vec<String> = s
        .ports
        .iter()
        .flatten()
        .map(|p| {
            format!(
                "{}/{}/{}/{}",
                p.name.as_deref().unwrap_or_default(),
                p.port.unwrap_or_default(),
                p.protocol.as_deref().unwrap_or("TCP"),
                p.app_protocol.as_deref().unwrap_or_default()
            )
        })
        .collect();
    ports.sort();
    format!("{}|{}", s.address_type, ports.join(","))
}

fn same_content(have: &EndpointSlice, want: &EndpointSlice) -> bool {
    have.endpoints == want.endpoints
        && have.metadata.labels == want.metadata.labels
        && have.metadata.annotations.clone().unwrap_or_default()
            == want.metadata.annotations.clone().unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{EndpointPort as CorePort, EndpointSubset, ServiceSpec};

    use super::*;

    fn svc(selector: bool) -> Service {
        Service {
            metadata: ObjectMeta {
                name: Some("ext".into()),
                namespace: Some("ns".into()),
                uid: Some("u1".into()),
                ..Default::default()
            },
            spec: Some(ServiceSpec {
                selector: selector.then(|| [("app".to_string(), "x".to_string())].into()),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn addr(ip: &str) -> EndpointAddress {
        EndpointAddress { ip: ip.into(), ..Default::default() }
    }

    fn eps(subsets: Vec<EndpointSubset>, labels: &[(&str, &str)]) -> Endpoints {
        Endpoints {
            metadata: ObjectMeta {
                name: Some("ext".into()),
                namespace: Some("ns".into()),
                labels: Some(labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()),
                annotations: Some(
                    [
                        ("endpoints.kubernetes.io/last-change-trigger-time".to_string(), "t".to_string()),
                        ("team".to_string(), "a".to_string()),
                    ]
                    .into(),
                ),
                ..Default::default()
            },
            subsets: Some(subsets),
        }
    }

    fn port(p: i32) -> Option<Vec<CorePort>> {
        Some(vec![CorePort { name: Some("http".into()), port: p, ..Default::default() }])
    }

    #[test]
    fn mirrors_by_family_and_port_set() {
        let e = eps(
            vec![
                EndpointSubset {
                    addresses: Some(vec![addr("10.1.0.1"), addr("fd00::1")]),
                    not_ready_addresses: Some(vec![addr("10.1.0.2")]),
                    ports: port(80),
                },
                EndpointSubset {
                    addresses: Some(vec![addr("10.1.0.3")]),
                    ports: port(80),
                    ..Default::default()
                },
                EndpointSubset {
                    addresses: Some(vec![addr("10.1.0.4")]),
                    ports: port(8080),
                    ..Default::default()
                },
            ],
            &[("env", "prod")],
        );
        let slices = desired_slices(&svc(false), &e);
        assert_eq!(slices.len(), 3, "{slices:#?}");
        let v4_80 = &slices[0];
        assert_eq!(v4_80.address_type, "IPv4");
        let ips: Vec<(&str, bool)> = v4_80
            .endpoints
            .iter()
            .map(|ep| (ep.addresses[0].as_str(), ep.conditions.as_ref().unwrap().ready.unwrap()))
            .collect();
        assert_eq!(ips, [("10.1.0.1", true), ("10.1.0.2", false), ("10.1.0.3", true)]);
        assert_eq!(slices[1].address_type, "IPv6");
        assert_eq!(slices[2].ports.as_ref().unwrap()[0].port, Some(8080));
        let labels = v4_80.metadata.labels.as_ref().unwrap();
        assert_eq!(labels[LABEL_SERVICE_NAME], "ext");
        assert_eq!(labels[LABEL_MANAGED_BY], CONTROLLER_NAME);
        assert_eq!(labels["env"], "prod");
        let annotations = v4_80.metadata.annotations.as_ref().unwrap();
        assert_eq!(annotations.len(), 1, "trigger time not mirrored: {annotations:?}");
        assert_eq!(v4_80.metadata.owner_references.as_ref().unwrap()[0].uid, "u1");
    }

    #[test]
    fn only_selectorless_services_without_skip_label() {
        let e = eps(vec![], &[]);
        assert!(should_mirror(&svc(false), &e));
        assert!(!should_mirror(&svc(true), &e));
        assert!(!should_mirror(&svc(false), &eps(vec![], &[(LABEL_SKIP_MIRROR, "true")])));
    }

    #[test]
    fn a_subset_is_capped() {
        let many: Vec<EndpointAddress> =
            (0..1200).map(|i| addr(&format!("10.2.{}.{}", i / 250, i % 250))).collect();
        let e =
            eps(vec![EndpointSubset { addresses: Some(many), ports: port(80), ..Default::default() }], &[]);
        let slices = desired_slices(&svc(false), &e);
        assert_eq!(slices.iter().map(|s| s.endpoints.len()).sum::<usize>(), MAX_ENDPOINTS_PER_SUBSET);
    }
}
