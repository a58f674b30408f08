//! Putting kube-proxy together (upstream's `cmd/kube-proxy/app/server.go`): the API
//! client, this node's IPs, cleanup of the other mode's rules, conntrack settings, one
//! proxier per IP family behind a meta-proxier, the health and metrics servers, and the
//! watches that feed the proxiers until shutdown. Also `--cleanup`.

use std::convert::Infallible;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use component_base::http::Endpoints;
use component_base::metrics::Registry;
use component_base::shutdown::Shutdown;
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use k8s_openapi::api::core::v1::{Node, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::Api;
use kube::runtime::watcher;

use crate::config::{self, Event, PROXY_LABEL_SELECTOR};
use crate::conntrack::{Conntrack, apply_settings};
use crate::healthcheck::{ProxierHealth, ServiceHealthServer};
use crate::iptables::Runner;
use crate::localdetector::LocalDetector;
use crate::metrics::Metrics;
use crate::nftables::Family;
use crate::nftables::netlink::Netlink;
use crate::nodeport_addresses::{NodePortAddresses, interface_addrs, interface_addrs_blocking};
use crate::options::{DetectLocalMode, ProxyConfig, ProxyMode};
use crate::proxier::{self, LoopConfig, MetaProxier, Provider, Proxier};

/// Why kube-proxy could not start or run.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Client(#[from] component_base::client::Error),
    #[error("failed to start the {what} server on {addr}: {source}")]
    Listen {
        what: &'static str,
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Conntrack(#[from] crate::conntrack::sysctl::Error),
    #[error("setting up the {mode} proxier: {message}")]
    Proxier { mode: &'static str, message: String },
    #[error("cleanup failed: {}", .0.join("; "))]
    Cleanup(Vec<String>),
}

/// How long to wait for this node's Node object before going on without its IPs.
const NODE_WAIT: Duration = Duration::from_secs(30);

/// Removes everything either mode ever wrote, in both families (`--cleanup`).
pub fn cleanup() -> Result<(), Error> {
    let mut errors = proxier::nftables::cleanup_leftovers();
    for family in [Family::Ip, Family::Ip6] {
        let mut ipt = Runner::new(family);
        if proxier::iptables::has_leftovers(&mut ipt) {
            errors.extend(proxier::iptables::cleanup_leftovers(&mut ipt));
        }
    }
    if errors.is_empty() { Ok(()) } else { Err(Error::Cleanup(errors)) }
}

/// A switch of mode removes the other mode's rules first, as upstream does.
fn platform_cleanup(mode: ProxyMode) {
    match mode {
        ProxyMode::Nftables => {
            for family in [Family::Ip, Family::Ip6] {
                let mut ipt = Runner::new(family);
                if proxier::iptables::has_leftovers(&mut ipt) {
                    tracing::info!(family = family.name(), "removing the iptables mode's leftover rules");
                    for e in proxier::iptables::cleanup_leftovers(&mut ipt) {
                        tracing::error!(error = %e, "cleaning up iptables rules");
                    }
                }
            }
        }
        ProxyMode::Iptables => {
            for e in proxier::nftables::cleanup_leftovers() {
                tracing::error!(error = %e, "cleaning up nftables rules");
            }
        }
    }
}

/// The Node's first InternalIP (else ExternalIP) of each family, primary first.
fn node_ips(node: &Node) -> Vec<IpAddr> {
    let addrs = node.status.as_ref().and_then(|s| s.addresses.as_ref()).cloned().unwrap_or_default();
    let mut out: Vec<IpAddr> = Vec::new();
    for kind in ["InternalIP", "ExternalIP"] {
        for a in addrs.iter().filter(|a| a.type_ == kind) {
            if let Ok(ip) = a.address.parse::<IpAddr>()
                && !out.iter().any(|o| o.is_ipv4() == ip.is_ipv4())
            {
                out.push(ip);
            }
        }
    }
    out
}

async fn wait_for_node(api: &Api<Node>, name: &str, shutdown: &Shutdown) -> Option<Node> {
    let deadline = tokio::time::Instant::now() + NODE_WAIT;
    let mut last = None;
    loop {
        match api.get_opt(name).await {
            // The kubelet registers its Node before its first status update gives it
            // addresses: wait for those too, as upstream polls for the node's IPs.
            Ok(Some(node)) if !node_ips(&node).is_empty() => return Some(node),
            Ok(Some(node)) => {
                tracing::info!(node = name, "waiting for the Node's addresses");
                last = Some(node);
            }
            Ok(None) => tracing::info!(node = name, "waiting for the Node object"),
            Err(err) => tracing::warn!(node = name, %err, "getting the Node object"),
        }
        if tokio::time::Instant::now() >= deadline || shutdown.is_triggered() {
            return last;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

fn write_file(path: &str, value: &str) -> std::io::Result<()> {
    std::fs::write(path, value)
}

fn read_sysctl(path: &str) -> Option<i64> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// Binds a listener, failing or warning according to `--bind-address-hard-fail`.
async fn listen(
    what: &'static str,
    addr: SocketAddr,
    hard_fail: bool,
) -> Result<Option<tokio::net::TcpListener>, Error> {
    match tokio::net::TcpListener::bind(addr).await {
        Ok(l) => Ok(Some(l)),
        Err(source) if hard_fail => Err(Error::Listen { what, addr, source }),
        Err(source) => {
            tracing::error!(%addr, err = %source, "failed to start the {what} server; continuing without it");
            Ok(None)
        }
    }
}

/// Runs kube-proxy until `shutdown`.
pub async fn run(cfg: ProxyConfig, shutdown: Shutdown) -> Result<(), Error> {
    tracing::info!(mode = cfg.mode.name(), hostname = %cfg.hostname, "starting kube-proxy");
    // Best effort, as upstream: a container may not be allowed to lower its OOM score.
    if let Err(err) = write_file("/proc/self/oom_score_adj", &cfg.oom_score_adj.to_string()) {
        tracing::debug!(%err, "failed to apply oom_score_adj");
    }
    let registry = Registry::with_process_metrics();
    let metrics = Metrics::new();
    metrics.register(&registry);

    let client = component_base::client::from_flags_rate_limited(
        cfg.kubeconfig.as_deref(),
        cfg.master.as_deref(),
        cfg.qps,
        cfg.burst,
    )
    .await?;
    let nodes: Api<Node> = Api::all(client.clone());
    let node = wait_for_node(&nodes, &cfg.hostname, &shutdown).await;
    let mut ips = node.as_ref().map(node_ips).unwrap_or_default();
    if ips.is_empty() {
        let fallback = if cfg.bind_address.is_unspecified() {
            if cfg.bind_address.is_ipv4() {
                IpAddr::V4(Ipv4Addr::LOCALHOST)
            } else {
                IpAddr::V6(Ipv6Addr::LOCALHOST)
            }
        } else {
            cfg.bind_address
        };
        tracing::warn!(node = %cfg.hostname, ip = %fallback, "could not find the Node's IP addresses; assuming this one");
        ips.push(fallback);
    }
    let primary = Family::of(&ips[0]);
    let mut families = vec![primary];
    let other = if primary == Family::Ip { Family::Ip6 } else { Family::Ip };
    // Like upstream, both families when the kernel has both, whatever the cluster uses.
    if other == Family::Ip || Path::new("/proc/sys/net/ipv6").exists() {
        families.push(other);
    }
    tracing::info!(node_ips = ?ips, families = ?families, "detected node IPs");

    platform_cleanup(cfg.mode);
    apply_settings(&cfg.conntrack)?;

    let localhost_nodeports = cfg.mode == ProxyMode::Iptables
        && cfg.localhost_nodeports
        && NodePortAddresses::new(Family::Ip, &cfg.node_port_addresses, None).contains_ipv4_loopback();
    if localhost_nodeports {
        tracing::info!(
            "setting route_localnet=1 to allow NodePorts on localhost; to change this, pass --iptables-localhost-nodeports=false or set nodePortAddresses to leave out loopback addresses"
        );
        if let Err(err) = write_file("/proc/sys/net/ipv4/conf/all/route_localnet", "1") {
            return Err(Error::Proxier {
                mode: "iptables",
                message: format!("setting route_localnet: {err}"),
            });
        }
    }
    let conntrack_tcp_liberal =
        read_sysctl("/proc/sys/net/netfilter/nf_conntrack_tcp_be_liberal").unwrap_or(0) != 0;

    let health = ProxierHealth::new(cfg.sync_period * 2, metrics.clone());
    let rt = tokio::runtime::Handle::current();
    let addrs_now = interface_addrs().await.unwrap_or_else(|err| {
        tracing::error!(%err, "listing interface addresses");
        Vec::new()
    });
    let pod_cidrs: Vec<String> = node
        .as_ref()
        .and_then(|n| n.spec.as_ref())
        .map(|s| s.pod_cidrs.clone().unwrap_or_else(|| s.pod_cidr.clone().into_iter().collect()))
        .unwrap_or_default();

    let mut proxiers: Vec<Arc<dyn Provider>> = Vec::new();
    for family in families {
        let node_ip = ips.iter().copied().find(|ip| Family::of(ip) == family);
        let npa = NodePortAddresses::new(family, &cfg.node_port_addresses, node_ip);
        let detector = match &cfg.detect_local {
            DetectLocalMode::ClusterCidr => cfg
                .cluster_cidrs
                .iter()
                .find(|c| Family::of(&c.addr) == family)
                .map(|c| LocalDetector::Cidr(*c))
                .unwrap_or_default(),
            DetectLocalMode::NodeCidr => pod_cidrs
                .iter()
                .filter_map(|c| c.parse::<crate::cidr::Cidr>().ok())
                .find(|c| Family::of(&c.addr) == family)
                .map(LocalDetector::Cidr)
                .unwrap_or_default(),
            DetectLocalMode::BridgeInterface(b) => LocalDetector::Bridge(b.clone()),
            DetectLocalMode::InterfaceNamePrefix(p) => LocalDetector::InterfacePrefix(p.clone()),
        };
        if !detector.is_implemented() {
            tracing::info!(
                family = family.name(),
                "no local traffic detector for this family (no cluster CIDR): off-cluster traffic to cluster IPs is not masqueraded"
            );
        }
        let hs_addrs = if npa.match_all() { Vec::new() } else { npa.node_ips(&addrs_now) };
        let service_health = ServiceHealthServer::new(family, hs_addrs, rt.clone(), health.clone());
        let conntrack = match Conntrack::new() {
            Ok(c) => Some(c),
            Err(err) => {
                tracing::error!(%err, "opening ctnetlink: stale UDP conntrack entries will not be cleared");
                None
            }
        };
        let rt2 = rt.clone();
        let addresses: proxier::nftables::AddressSource = Box::new(move || interface_addrs_blocking(&rt2));
        let loop_config = LoopConfig { min_sync_period: cfg.min_sync_period, sync_period: cfg.sync_period };
        let p: Arc<dyn Provider> = match cfg.mode {
            ProxyMode::Nftables => {
                let nft = Netlink::new(family, proxier::nftables::KUBE_PROXY_TABLE)
                    .map_err(|e| Error::Proxier { mode: "nftables", message: e.to_string() })?;
                let backend = proxier::nftables::NftablesBackend::new(
                    Box::new(nft),
                    proxier::nftables::Config {
                        masquerade_all: cfg.masquerade_all,
                        masquerade_bit: cfg.masquerade_bit,
                        local_detector: detector,
                        node_ip,
                        node_port_addresses: npa,
                        service_cidrs: Vec::new(),
                    },
                    addresses,
                    metrics.clone(),
                );
                Proxier::new(
                    family,
                    &cfg.hostname,
                    backend,
                    loop_config,
                    health.clone(),
                    metrics.clone(),
                    Some(service_health),
                    conntrack,
                )
            }
            ProxyMode::Iptables => {
                let backend = proxier::iptables::IptablesBackend::new(
                    Box::new(Runner::new(family)),
                    proxier::iptables::Config {
                        masquerade_all: cfg.masquerade_all,
                        masquerade_bit: cfg.masquerade_bit,
                        local_detector: detector,
                        node_ip,
                        node_port_addresses: npa,
                        localhost_nodeports: localhost_nodeports && family == Family::Ip,
                        conntrack_tcp_liberal,
                        sync_period: cfg.sync_period,
                    },
                    addresses,
                    metrics.clone(),
                );
                Proxier::new(
                    family,
                    &cfg.hostname,
                    backend,
                    loop_config,
                    health.clone(),
                    metrics.clone(),
                    Some(service_health),
                    conntrack,
                )
            }
        };
        proxiers.push(p);
    }
    let provider: Arc<MetaProxier> = Arc::new(MetaProxier { proxiers });

    if let Some(addr) = cfg.healthz_bind_address
        && let Some(l) = listen("healthz", addr, cfg.bind_address_hard_fail).await?
    {
        tokio::spawn(health.clone().serve(l, shutdown.clone()));
    }
    if let Some(addr) = cfg.metrics_bind_address
        && let Some(l) = listen("metrics", addr, cfg.bind_address_hard_fail).await?
    {
        let endpoints = Endpoints::new()
            .metrics("/metrics", registry.clone())
            .health("/healthz", component_base::http::HealthFormat::Kubernetes, "ping", |_| async { Ok(()) })
            .into_service();
        let mode = cfg.mode.name();
        let configz = serde_json::json!({ "kubeproxy.config.k8s.io": cfg.raw }).to_string();
        let svc = hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
            let endpoints = endpoints.clone();
            let configz = configz.clone();
            async move {
                let text = |ct: &'static str, body: String| {
                    Response::builder()
                        .status(StatusCode::OK)
                        .header("Content-Type", ct)
                        .body(Full::new(Bytes::from(body)))
                };
                Ok::<_, Infallible>(match req.uri().path() {
                    "/proxyMode" => {
                        text("text/plain; charset=utf-8", mode.to_owned()).expect("valid response")
                    }
                    "/configz" => text("application/json", configz).expect("valid response"),
                    _ => endpoints.respond(req.method(), req.uri()).await,
                })
            }
        });
        tokio::spawn(component_base::http::serve(l, None, svc, shutdown.clone(), Default::default()));
    }

    provider.clone().start().map_err(|e| Error::Proxier { mode: cfg.mode.name(), message: e.to_string() })?;

    let selector = watcher::Config::default().labels(PROXY_LABEL_SELECTOR);
    let p = provider.clone();
    tokio::spawn(config::run(
        "Service",
        Api::<Service>::all(client.clone()),
        selector.clone(),
        shutdown.clone(),
        move |ev| match ev {
            Event::Add(s) => p.on_service(None, Some(s)),
            Event::Update(o, n) => p.on_service(Some(o), Some(n)),
            Event::Delete(s) => p.on_service(Some(s), None),
            Event::Synced => p.on_services_synced(),
        },
    ));
    let p = provider.clone();
    tokio::spawn(config::run(
        "EndpointSlice",
        Api::<EndpointSlice>::all(client.clone()),
        selector,
        shutdown.clone(),
        move |ev| match ev {
            Event::Add(s) | Event::Update(_, s) => p.on_endpoint_slice(s, false),
            Event::Delete(s) => p.on_endpoint_slice(s, true),
            Event::Synced => p.on_endpoint_slices_synced(),
        },
    ));
    let p = provider.clone();
    let h = health.clone();
    let node_cfg = watcher::Config::default().fields(&format!("metadata.name={}", cfg.hostname));
    tokio::spawn(config::run("Node", nodes, node_cfg, shutdown.clone(), move |ev| match ev {
        Event::Add(n) | Event::Update(_, n) => {
            h.sync_node(n);
            p.on_node(Some(n));
        }
        Event::Delete(_) => p.on_node(None),
        Event::Synced => {}
    }));

    shutdown.wait().await;
    tracing::info!("stopping kube-proxy");
    // Joining the sync threads blocks; keep the runtime's workers free meanwhile.
    let stopping = provider.clone();
    let _ = tokio::task::spawn_blocking(move || stopping.stop()).await;
    Ok(())
}
