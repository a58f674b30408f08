//! Builders of Services and EndpointSlices for the proxier tests, shaped like upstream's
//! `makeTestService` / `makeTestEndpointSlice`.

use k8s_openapi::api::core::v1::{
    ClientIPConfig, LoadBalancerIngress, LoadBalancerStatus, Service, ServicePort, ServiceSpec,
    ServiceStatus, SessionAffinityConfig,
};
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions, EndpointPort, EndpointSlice};
use kube::api::ObjectMeta;

use crate::endpointschangetracker::LABEL_SERVICE_NAME;

pub const TEST_HOSTNAME: &str = "test-hostname";

pub fn service(ns: &str, name: &str, f: impl FnOnce(&mut ServiceSpec, &mut ServiceStatus)) -> Service {
    let mut spec = ServiceSpec::default();
    let mut status = ServiceStatus::default();
    f(&mut spec, &mut status);
    Service {
        metadata: ObjectMeta { namespace: Some(ns.into()), name: Some(name.into()), ..Default::default() },
        spec: Some(spec),
        status: Some(status),
    }
}

pub fn port(name: &str, port: i32, protocol: &str, node_port: Option<i32>) -> ServicePort {
    ServicePort {
        name: Some(name.into()),
        port,
        protocol: Some(protocol.into()),
        node_port,
        ..Default::default()
    }
}

pub fn lb_ingress(status: &mut ServiceStatus, ips: &[&str]) {
    status.load_balancer = Some(LoadBalancerStatus {
        ingress: Some(
            ips.iter()
                .map(|ip| LoadBalancerIngress { ip: Some(ip.to_string()), ..Default::default() })
                .collect(),
        ),
    });
}

pub fn client_ip_affinity(spec: &mut ServiceSpec, timeout: i32) {
    spec.session_affinity = Some("ClientIP".into());
    spec.session_affinity_config =
        Some(SessionAffinityConfig { client_ip: Some(ClientIPConfig { timeout_seconds: Some(timeout) }) });
}

/// An endpoint: address, node, and (ready, serving, terminating).
pub fn endpoint(ip: &str, node: Option<&str>) -> Endpoint {
    Endpoint { addresses: vec![ip.into()], node_name: node.map(String::from), ..Default::default() }
}

pub fn endpoint_with(
    ip: &str,
    node: Option<&str>,
    ready: bool,
    serving: bool,
    terminating: bool,
) -> Endpoint {
    Endpoint {
        addresses: vec![ip.into()],
        node_name: node.map(String::from),
        conditions: Some(EndpointConditions {
            ready: Some(ready),
            serving: Some(serving),
            terminating: Some(terminating),
        }),
        ..Default::default()
    }
}

pub fn slice(
    ns: &str,
    svc: &str,
    n: u32,
    address_type: &str,
    endpoints: Vec<Endpoint>,
    ports: &[(&str, i32, &str)],
) -> EndpointSlice {
    EndpointSlice {
        metadata: ObjectMeta {
            namespace: Some(ns.into()),
            name: Some(format!("{svc}-{n}")),
            labels: Some([(LABEL_SERVICE_NAME.to_string(), svc.to_string())].into()),
            ..Default::default()
        },
        address_type: address_type.into(),
        endpoints,
        ports: Some(
            ports
                .iter()
                .map(|(name, port, proto)| EndpointPort {
                    name: Some(name.to_string()),
                    port: Some(*port),
                    protocol: Some(proto.to_string()),
                    ..Default::default()
                })
                .collect(),
        ),
    }
}

/// Compares line sets, printing what is missing and what is extra on failure.
#[track_caller]
pub fn assert_same_lines(got: &str, want: &str) {
    let norm = |s: &str| -> Vec<String> {
        let mut v: Vec<String> = s
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .map(String::from)
            .collect();
        v.sort();
        v
    };
    let (g, w) = (norm(got), norm(want));
    if g != w {
        let missing: Vec<&String> = w.iter().filter(|l| !g.contains(l)).collect();
        let extra: Vec<&String> = g.iter().filter(|l| !w.contains(l)).collect();
        panic!(
            "rulesets differ\n--- missing ---\n{}\n--- unexpected ---\n{}\n--- got ---\n{got}",
            missing.iter().map(|s| s.as_str()).collect::<Vec<_>>().join("\n"),
            extra.iter().map(|s| s.as_str()).collect::<Vec<_>>().join("\n")
        );
    }
}
