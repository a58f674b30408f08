//! `spec.conversion.strategy: Webhook`: custom resources converted between versions by a
//! webhook the CRD names (upstream's `webhookConverter`), through a `ConversionReview`
//! (`apiextensions.k8s.io/v1`, or `v1beta1` when that is the only one the webhook
//! accepts).
//!
//! As upstream: objects already in the desired version are not sent; what comes back
//! must be as many objects, each of the desired apiVersion and the same kind, name,
//! namespace and UID; of its metadata only labels and annotations are taken, the rest is
//! the original's. Every failure is the request's failure (500), never a half-converted
//! answer.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use crate::admission::webhook::Cluster;
use crate::admission::webhook::client::{self, Dial, Target};
use crate::admission::webhook::config::{Endpoint, ca_bundle, endpoint};
use crate::errors::{ApiError, ApiResult};
use crate::registry::resource::Converter;

/// How long one call may take (upstream's conversion webhook timeout).
const TIMEOUT: Duration = Duration::from_secs(30);

/// The ConversionReview versions this server speaks, most preferred first.
const REVIEW_VERSIONS: [&str; 2] = ["v1", "v1beta1"];

/// The conversion webhook of one CRD.
pub struct WebhookConverter {
    /// `group/version, Kind=kind` of the storage version, as errors name the conversion.
    shown: String,
    review_version: Option<&'static str>,
    endpoint: Result<Endpoint, String>,
    tls: Result<Arc<rustls::ClientConfig>, String>,
    cluster: Arc<dyn Cluster>,
}

/// The converter `crd` asks for; None for the `None` strategy.
pub fn for_crd(crd: &Value, cluster: &Arc<dyn Cluster>) -> Option<Arc<WebhookConverter>> {
    let conversion = &crd["spec"]["conversion"];
    if conversion["strategy"].as_str() != Some("Webhook") {
        return None;
    }
    let webhook = &conversion["webhook"];
    let cc = &webhook["clientConfig"];
    let accepted: Vec<&str> = webhook["conversionReviewVersions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    let group = crd["spec"]["group"].as_str().unwrap_or_default();
    let kind = crd["spec"]["names"]["kind"].as_str().unwrap_or_default();
    let storage = super::crd::storage_version(crd).unwrap_or_default();
    Some(Arc::new(WebhookConverter {
        shown: format!("{group}/{storage}, Kind={kind}"),
        review_version: accepted.iter().find_map(|v| REVIEW_VERSIONS.iter().find(|r| *r == v).copied()),
        endpoint: endpoint(cc),
        tls: ca_bundle(cc).and_then(|ca| client::tls_config(&ca)),
        cluster: cluster.clone(),
    }))
}

#[async_trait::async_trait]
impl Converter for WebhookConverter {
    async fn convert(&self, objs: Vec<Value>, api_version: &str) -> ApiResult<Vec<Value>> {
        let pending: Vec<usize> = (0..objs.len()).filter(|i| objs[*i]["apiVersion"] != api_version).collect();
        if pending.is_empty() {
            return Ok(objs);
        }
        let sent: Vec<Value> = pending.iter().map(|i| objs[*i].clone()).collect();
        let converted = self
            .call(&sent, api_version)
            .await
            .map_err(|e| ApiError::internal(format!("conversion webhook for {} failed: {e}", self.shown)))?;
        let mut out = objs;
        for ((i, original), mut new) in pending.into_iter().zip(&sent).zip(converted) {
            check_converted(original, &new, api_version).map_err(|e| {
                ApiError::internal(format!(
                    "conversion webhook for {} returned invalid object at index {i}: {e}",
                    self.shown
                ))
            })?;
            restore_metadata(original, &mut new);
            out[i] = new;
        }
        Ok(out)
    }
}

impl WebhookConverter {
    /// One ConversionReview: the converted objects, as many as were sent.
    async fn call(&self, objs: &[Value], api_version: &str) -> Result<Vec<Value>, String> {
        let version = self.review_version.ok_or_else(|| {
            format!(
                "no supported conversion review versions (this server speaks {})",
                REVIEW_VERSIONS.join(", ")
            )
        })?;
        let endpoint = self.endpoint.as_ref().map_err(|e| format!("could not get REST client: {e}"))?;
        let tls = self.tls.clone().map_err(|e| format!("could not get REST client: {e}"))?;
        let target = Target::new(endpoint, TIMEOUT).map_err(|e| format!("could not get REST client: {e}"))?;
        let uid = crate::registry::store::new_uid();
        let review = json!({
            "apiVersion": format!("{}/{version}", super::GROUP),
            "kind": "ConversionReview",
            "request": {"uid": uid, "desiredAPIVersion": api_version, "objects": objs},
        });
        let body = serde_json::to_vec(&review).map_err(|e| e.to_string())?;
        let exchange = async {
            let addr = match &target.dial {
                Dial::Host(host, port) => (host.clone(), *port),
                Dial::Service { namespace, name, port } => {
                    self.cluster.resolve(namespace, name, *port).await?
                }
            };
            client::post(tls, &target, &addr, body).await.map_err(|e| e.to_string())
        };
        let answer = match tokio::time::timeout(TIMEOUT, exchange).await {
            Ok(r) => r,
            Err(_) => Err("context deadline exceeded".to_string()),
        }
        .map_err(|e| format!("Post \"{}\": {e}", target.url))?;
        read_response(version, &uid, objs.len(), &answer)
    }
}

/// The converted objects of a ConversionReview answer.
fn read_response(version: &str, uid: &str, sent: usize, body: &[u8]) -> Result<Vec<Value>, String> {
    let review: Value = serde_json::from_slice(body)
        .map_err(|e| format!("unable to decode the ConversionReview response: {e}"))?;
    let response = review.get("response").filter(|r| r.is_object()).ok_or("no response provided")?;
    // v1 insists on the request's uid coming back; v1beta1 let webhooks leave it out.
    let got_uid = response["uid"].as_str().unwrap_or_default();
    if got_uid != uid && (version == "v1" || !got_uid.is_empty()) {
        return Err(format!("expected response uid {uid:?}, got {got_uid:?}"));
    }
    let result = &response["result"];
    if result["status"].as_str() != Some("Success") {
        let message = result["message"].as_str().filter(|m| !m.is_empty()).unwrap_or("unknown error");
        return Err(message.to_string());
    }
    let converted = response["convertedObjects"].as_array().cloned().unwrap_or_default();
    if converted.len() != sent {
        return Err(format!("returned {} objects, expected {sent}", converted.len()));
    }
    Ok(converted)
}

/// What a converted object must keep (upstream's `validateConvertedObject`, with the
/// version check before it).
fn check_converted(original: &Value, new: &Value, api_version: &str) -> Result<(), String> {
    let got = new["apiVersion"].as_str().unwrap_or_default();
    if got != api_version {
        return Err(format!("invalid apiVersion (expected {api_version}, received {got})"));
    }
    for (field, what) in [
        ("/kind", "kind"),
        ("/metadata/name", "name"),
        ("/metadata/namespace", "namespace"),
        ("/metadata/uid", "UID"),
    ] {
        let (e, a) = (text(original, field), text(new, field));
        if e != a {
            return Err(format!("must have the same {what}: {e} != {a}"));
        }
    }
    if !new["metadata"].is_object() && !new["metadata"].is_null() {
        return Err("metadata: must be an object".into());
    }
    Ok(())
}

fn text<'a>(v: &'a Value, pointer: &str) -> &'a str {
    v.pointer(pointer).and_then(Value::as_str).unwrap_or_default()
}

/// The original's metadata with the webhook's labels and annotations (upstream's
/// `restoreObjectMeta`: a webhook may change those, nothing else of metadata).
fn restore_metadata(original: &Value, new: &mut Value) {
    let mut meta = original["metadata"].clone();
    for field in ["labels", "annotations"] {
        let value = new["metadata"][field].clone();
        if let Some(m) = meta.as_object_mut() {
            if value.is_null() {
                m.remove(field);
            } else {
                m.insert(field.into(), value);
            }
        }
    }
    new["metadata"] = meta;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obj(api_version: &str) -> Value {
        json!({"apiVersion": api_version, "kind": "C", "metadata": {"name": "a", "namespace": "n", "uid": "u", "labels": {"x": "1"}}})
    }

    #[test]
    fn reads_a_successful_review() {
        let body = json!({"response": {"uid": "1", "result": {"status": "Success"}, "convertedObjects": [obj("g/v2")]}});
        let got = read_response("v1", "1", 1, body.to_string().as_bytes()).unwrap();
        assert_eq!(got, vec![obj("g/v2")]);
    }

    #[test]
    fn refuses_a_wrong_uid_count_or_failure() {
        let wrong_uid =
            json!({"response": {"uid": "2", "result": {"status": "Success"}, "convertedObjects": []}});
        assert!(read_response("v1", "1", 0, wrong_uid.to_string().as_bytes()).unwrap_err().contains("uid"));
        let short =
            json!({"response": {"uid": "1", "result": {"status": "Success"}, "convertedObjects": []}});
        assert_eq!(
            read_response("v1", "1", 1, short.to_string().as_bytes()).unwrap_err(),
            "returned 0 objects, expected 1"
        );
        let failed = json!({"response": {"uid": "1", "result": {"status": "Failure", "message": "no"}}});
        assert_eq!(read_response("v1", "1", 1, failed.to_string().as_bytes()).unwrap_err(), "no");
        // v1beta1 webhooks may leave the uid out.
        let no_uid = json!({"response": {"result": {"status": "Success"}, "convertedObjects": []}});
        assert!(read_response("v1beta1", "1", 0, no_uid.to_string().as_bytes()).is_ok());
    }

    #[test]
    fn converted_objects_keep_their_identity_and_metadata() {
        assert!(check_converted(&obj("g/v1"), &obj("g/v2"), "g/v2").is_ok());
        assert_eq!(
            check_converted(&obj("g/v1"), &obj("g/v1"), "g/v2").unwrap_err(),
            "invalid apiVersion (expected g/v2, received g/v1)"
        );
        let mut renamed = obj("g/v2");
        renamed["metadata"]["name"] = json!("b");
        assert_eq!(
            check_converted(&obj("g/v1"), &renamed, "g/v2").unwrap_err(),
            "must have the same name: a != b"
        );

        let mut new = obj("g/v2");
        new["metadata"] = json!({"name": "a", "labels": {"y": "2"}, "generation": 9});
        restore_metadata(&obj("g/v1"), &mut new);
        assert_eq!(new["metadata"], json!({"name": "a", "namespace": "n", "uid": "u", "labels": {"y": "2"}}));
    }
}
