//! Measures the round trip to every peer (etcd_network_peer_round_trip_time_seconds), with
//! a no-op call every few seconds, as etcd's prober does.

use std::sync::Arc;
use std::time::{Duration, Instant};

use proto::etcdpeer::ProbeRequest;

use crate::server::EtcdServer;

const PROBE_INTERVAL: Duration = Duration::from_secs(4);
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

pub async fn run(server: Arc<EtcdServer>, mut shutdown: tokio::sync::watch::Receiver<bool>) {
    let mut ticker = tokio::time::interval(PROBE_INTERVAL);
    loop {
        tokio::select! {
            _ = ticker.tick() => {}
            _ = shutdown.changed() => return,
        }
        for id in server.peers.ids() {
            let Some(mut client) = server.peers.get(id) else { continue };
            let start = Instant::now();
            if let Ok(Ok(_)) = tokio::time::timeout(PROBE_TIMEOUT, client.probe(ProbeRequest {})).await {
                server.metrics.peer_rtt(&format!("{id:x}")).observe(start.elapsed().as_secs_f64());
            }
        }
    }
}
