//! The three metrics APIs the autoscaler reads, over plain REST (upstream's
//! `rest_metrics_client.go`): `metrics.k8s.io/v1beta1` PodMetrics for Resource and
//! ContainerResource metrics, `custom.metrics.k8s.io/v1beta2` for Pods and Object
//! metrics, `external.metrics.k8s.io/v1beta1` for External metrics. They are aggregated
//! APIs served by add-ons; when one is absent the request fails and the HPA says so in
//! its conditions.

use std::time::Duration;

use http::Request;
use k8s_openapi::api::autoscaling::v2::CrossVersionObjectReference;
use k8s_openapi::jiff::Timestamp;
use serde_json::Value;

use super::replica_calculator::{PodMetric, PodMetricsInfo};

/// Custom metrics without a `windowSeconds` are taken as one minute's, as upstream.
const DEFAULT_WINDOW: Duration = Duration::from_secs(60);

/// Why metrics could not be read; the messages are upstream's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MetricsError {
    #[error("unable to fetch metrics from {api} API: {reason}")]
    Fetch { api: &'static str, reason: String },
    #[error("no metrics returned from {api} API")]
    Empty { api: &'static str },
    #[error(
        "failed to get container metrics: container {container} not present in metrics for pod {namespace}/{pod}"
    )]
    ContainerMissing { container: String, namespace: String, pod: String },
}

const RESOURCE_API: &str = "resource metrics";
const CUSTOM_API: &str = "custom metrics";
const EXTERNAL_API: &str = "external metrics";

/// Percent-encodes a query value (RFC 3986 unreserved characters stay).
fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn query(params: &[(&str, &str)]) -> String {
    let q: Vec<String> =
        params.iter().filter(|(_, v)| !v.is_empty()).map(|(k, v)| format!("{k}={}", encode(v))).collect();
    if q.is_empty() { String::new() } else { format!("?{}", q.join("&")) }
}

/// An API error as client-go prints it: the status message, and for a 404 of an API
/// nobody serves, the "could not find the requested resource" form with what was asked.
fn describe(err: &kube::Error, what: &str) -> String {
    match err {
        kube::Error::Api(s) if s.code == 404 && (s.message.is_empty() || s.message.contains("404")) => {
            format!("the server could not find the requested resource (get {what})")
        }
        kube::Error::Api(s)
            if s.code == 404 && s.message == "the server could not find the requested resource" =>
        {
            format!("{} (get {what})", s.message)
        }
        kube::Error::Api(s) if !s.message.is_empty() => s.message.clone(),
        other => other.to_string(),
    }
}

fn timestamp(v: &Value) -> Timestamp {
    v.as_str().and_then(|s| s.parse().ok()).unwrap_or_default()
}

fn milli(v: &Value) -> Option<i64> {
    match v {
        Value::String(s) => component_base::quantity::parse_milli(s),
        Value::Number(n) => n.as_f64().map(|f| (f * 1000.0).ceil() as i64),
        _ => None,
    }
}

/// Reads the metrics APIs with the controller's client.
#[derive(Clone)]
pub struct MetricsClient {
    client: kube::Client,
}

impl MetricsClient {
    pub fn new(client: kube::Client) -> Self {
        Self { client }
    }

    async fn get(&self, path: String, api: &'static str, what: &str) -> Result<Value, MetricsError> {
        let req = Request::get(&path)
            .body(Vec::new())
            .map_err(|e| MetricsError::Fetch { api, reason: e.to_string() })?;
        self.client
            .request::<Value>(req)
            .await
            .map_err(|e| MetricsError::Fetch { api, reason: describe(&e, what) })
    }

    /// Upstream's `GetResourceMetric`: each pod's usage of `resource` (summed over its
    /// containers, or only `container`'s) with the sample's timestamp and window, and the
    /// first sample's timestamp.
    pub async fn resource_metric(
        &self,
        resource: &str,
        namespace: &str,
        selector: &str,
        container: &str,
    ) -> Result<(PodMetricsInfo, Timestamp), MetricsError> {
        let path = format!(
            "/apis/metrics.k8s.io/v1beta1/namespaces/{namespace}/pods{}",
            query(&[("labelSelector", selector)])
        );
        let list = self.get(path, RESOURCE_API, "pods.metrics.k8s.io").await?;
        pod_metrics_from_list(&list, resource, container)
    }

    /// Upstream's custom `GetRawMetric`: a per-pod custom metric for the selected pods.
    pub async fn raw_metric(
        &self,
        metric: &str,
        namespace: &str,
        selector: &str,
        metric_selector: &str,
    ) -> Result<(PodMetricsInfo, Timestamp), MetricsError> {
        let path = format!(
            "/apis/custom.metrics.k8s.io/v1beta2/namespaces/{namespace}/pods/*/{metric}{}",
            query(&[("labelSelector", selector), ("metricLabelSelector", metric_selector)])
        );
        let list = self.get(path, CUSTOM_API, &format!("pods.custom.metrics.k8s.io {metric}")).await?;
        let items = list["items"].as_array().cloned().unwrap_or_default();
        let Some(first) = items.first() else { return Err(MetricsError::Empty { api: CUSTOM_API }) };
        let mut res = PodMetricsInfo::new();
        for m in &items {
            let window = m["windowSeconds"].as_u64().map(Duration::from_secs).unwrap_or(DEFAULT_WINDOW);
            let name = m["describedObject"]["name"].as_str().unwrap_or_default().to_owned();
            res.insert(
                name,
                PodMetric {
                    timestamp: timestamp(&m["timestamp"]),
                    window,
                    value: milli(&m["value"]).unwrap_or(0),
                },
            );
        }
        Ok((res, timestamp(&first["timestamp"])))
    }

    /// Upstream's `GetObjectMetric`: one object's custom metric. `resource` is the
    /// object's plural (`deployments`); a Namespace is asked at the root scope.
    pub async fn object_metric(
        &self,
        metric: &str,
        namespace: &str,
        object: &CrossVersionObjectReference,
        resource: &str,
        metric_selector: &str,
    ) -> Result<(i64, Timestamp), MetricsError> {
        let group =
            object.api_version.as_deref().and_then(|v| v.split_once('/')).map(|(g, _)| g).unwrap_or("");
        let gr = if group.is_empty() { resource.to_owned() } else { format!("{resource}.{group}") };
        let q = query(&[("metricLabelSelector", metric_selector)]);
        let path = if object.kind == "Namespace" && group.is_empty() {
            format!("/apis/custom.metrics.k8s.io/v1beta2/namespaces/{namespace}/metrics/{metric}{q}")
        } else {
            format!(
                "/apis/custom.metrics.k8s.io/v1beta2/namespaces/{namespace}/{gr}/{}/{metric}{q}",
                object.name
            )
        };
        let list = self.get(path, CUSTOM_API, &format!("{gr}.custom.metrics.k8s.io {}", object.name)).await?;
        let items = list["items"].as_array().cloned().unwrap_or_default();
        if items.len() != 1 {
            return Err(MetricsError::Fetch {
                api: CUSTOM_API,
                reason: format!(
                    "the custom metrics API server returned {} results when we asked for exactly one",
                    items.len()
                ),
            });
        }
        Ok((milli(&items[0]["value"]).unwrap_or(0), timestamp(&items[0]["timestamp"])))
    }

    /// Upstream's `GetExternalMetric`: every series of an external metric that matches
    /// the selector.
    pub async fn external_metric(
        &self,
        metric: &str,
        namespace: &str,
        metric_selector: &str,
    ) -> Result<(Vec<i64>, Timestamp), MetricsError> {
        let path = format!(
            "/apis/external.metrics.k8s.io/v1beta1/namespaces/{namespace}/{metric}{}",
            query(&[("labelSelector", metric_selector)])
        );
        let list = self.get(path, EXTERNAL_API, &format!("{metric}.external.metrics.k8s.io")).await?;
        let items = list["items"].as_array().cloned().unwrap_or_default();
        let Some(first) = items.first() else { return Err(MetricsError::Empty { api: EXTERNAL_API }) };
        Ok((items.iter().map(|m| milli(&m["value"]).unwrap_or(0)).collect(), timestamp(&first["timestamp"])))
    }
}

/// A PodMetricsList turned into per-pod values (upstream's `getPodMetrics` and
/// `getContainerMetrics`). A pod missing the resource in any container has no value: it
/// is treated as missing, not as idle.
pub fn pod_metrics_from_list(
    list: &Value,
    resource: &str,
    container: &str,
) -> Result<(PodMetricsInfo, Timestamp), MetricsError> {
    let items = list["items"].as_array().cloned().unwrap_or_default();
    let Some(first) = items.first() else { return Err(MetricsError::Empty { api: RESOURCE_API }) };
    let mut res = PodMetricsInfo::new();
    for m in &items {
        let name = m["metadata"]["name"].as_str().unwrap_or_default().to_owned();
        let ts = timestamp(&m["timestamp"]);
        let window =
            m["window"].as_str().and_then(|w| component_base::duration::parse(w).ok()).unwrap_or_default();
        let containers = m["containers"].as_array().cloned().unwrap_or_default();
        if !container.is_empty() {
            let Some(c) = containers.iter().find(|c| c["name"].as_str() == Some(container)) else {
                return Err(MetricsError::ContainerMissing {
                    container: container.to_owned(),
                    namespace: m["metadata"]["namespace"].as_str().unwrap_or_default().to_owned(),
                    pod: name,
                });
            };
            if let Some(value) = milli(&c["usage"][resource]) {
                res.insert(name, PodMetric { timestamp: ts, window, value });
            }
            continue;
        }
        let mut sum = 0i64;
        let mut missing = containers.is_empty();
        for c in &containers {
            match milli(&c["usage"][resource]) {
                Some(v) => sum += v,
                None => {
                    missing = true;
                    break;
                }
            }
        }
        if !missing {
            res.insert(name, PodMetric { timestamp: ts, window, value: sum });
        }
    }
    Ok((res, timestamp(&first["timestamp"])))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn sums_containers_and_skips_partial_pods() {
        let list = json!({"items": [
            {"metadata": {"name": "a", "namespace": "ns"}, "timestamp": "2024-01-01T00:00:00Z", "window": "30s",
             "containers": [{"name": "x", "usage": {"cpu": "100m"}}, {"name": "y", "usage": {"cpu": "250m"}}]},
            {"metadata": {"name": "b", "namespace": "ns"}, "timestamp": "2024-01-01T00:00:00Z", "window": "30s",
             "containers": [{"name": "x", "usage": {"cpu": "1"}}, {"name": "y", "usage": {"memory": "1Mi"}}]},
            {"metadata": {"name": "c", "namespace": "ns"}, "timestamp": "2024-01-01T00:00:00Z", "window": "30s",
             "containers": []},
        ]});
        let (m, ts) = pod_metrics_from_list(&list, "cpu", "").unwrap();
        assert_eq!(m.keys().collect::<Vec<_>>(), vec!["a"]);
        assert_eq!(m["a"].value, 350);
        assert_eq!(m["a"].window, Duration::from_secs(30));
        assert_eq!(ts, "2024-01-01T00:00:00Z".parse::<Timestamp>().unwrap());
        // Only container x's usage; pod c has no container x at all, which fails the list.
        let err = pod_metrics_from_list(&list, "cpu", "x").unwrap_err();
        assert!(matches!(err, MetricsError::ContainerMissing { ref pod, .. } if pod == "c"), "{err}");
        let two = json!({"items": [list["items"][0].clone(), list["items"][1].clone()]});
        let (m, _) = pod_metrics_from_list(&two, "cpu", "x").unwrap();
        assert_eq!((m["a"].value, m["b"].value), (100, 1000));
    }

    #[test]
    fn empty_lists_and_query_encoding() {
        assert_eq!(
            pod_metrics_from_list(&json!({"items": []}), "cpu", ""),
            Err(MetricsError::Empty { api: RESOURCE_API })
        );
        assert_eq!(
            query(&[("labelSelector", "app=web,tier in (a)"), ("x", "")]),
            "?labelSelector=app%3Dweb%2Ctier%20in%20%28a%29"
        );
        let err = MetricsError::Fetch {
            api: RESOURCE_API,
            reason: "the server could not find the requested resource (get pods.metrics.k8s.io)".into(),
        };
        assert_eq!(
            err.to_string(),
            "unable to fetch metrics from resource metrics API: the server could not find the requested resource (get pods.metrics.k8s.io)"
        );
    }
}
