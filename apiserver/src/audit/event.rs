//! The `audit.k8s.io/v1` Event, serialized as upstream does (field order of the Go
//! struct, empty fields left out), and the one-line `legacy` text format.

use std::collections::BTreeMap;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::authn::User;

/// How much of a request is recorded, least to most.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Level {
    None,
    Metadata,
    Request,
    RequestResponse,
}

/// Where in its life a request is when an event is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Stage {
    RequestReceived,
    /// Headers sent, body still streaming: long-running requests (watches) only.
    ResponseStarted,
    ResponseComplete,
    Panic,
}

impl Stage {
    pub const ALL: [Stage; 4] =
        [Stage::RequestReceived, Stage::ResponseStarted, Stage::ResponseComplete, Stage::Panic];

    pub fn parse(s: &str) -> Option<Stage> {
        Self::ALL.into_iter().find(|st| st.as_str() == s)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Stage::RequestReceived => "RequestReceived",
            Stage::ResponseStarted => "ResponseStarted",
            Stage::ResponseComplete => "ResponseComplete",
            Stage::Panic => "Panic",
        }
    }

    fn bit(self) -> u8 {
        1 << (self as u8)
    }
}

/// A set of stages (`omitStages`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stages(u8);

impl Stages {
    pub fn insert(&mut self, s: Stage) {
        self.0 |= s.bit();
    }

    pub fn contains(self, s: Stage) -> bool {
        self.0 & s.bit() != 0
    }

    pub fn union(self, other: Stages) -> Stages {
        Stages(self.0 | other.0)
    }
}

fn is_empty_str(s: &str) -> bool {
    s.is_empty()
}

/// `authentication.k8s.io/v1` UserInfo.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct UserInfo {
    #[serde(skip_serializing_if = "is_empty_str")]
    pub username: String,
    #[serde(skip_serializing_if = "is_empty_str")]
    pub uid: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<String>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub extra: BTreeMap<String, Vec<String>>,
}

impl From<&User> for UserInfo {
    fn from(u: &User) -> Self {
        Self {
            username: u.name.clone(),
            uid: u.uid.clone(),
            groups: u.groups.clone(),
            extra: u.extra.clone(),
        }
    }
}

/// The object a resource request is about.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectReference {
    #[serde(skip_serializing_if = "is_empty_str")]
    pub resource: String,
    #[serde(skip_serializing_if = "is_empty_str")]
    pub namespace: String,
    #[serde(skip_serializing_if = "is_empty_str")]
    pub name: String,
    #[serde(skip_serializing_if = "is_empty_str")]
    pub uid: String,
    #[serde(skip_serializing_if = "is_empty_str")]
    pub api_group: String,
    #[serde(skip_serializing_if = "is_empty_str")]
    pub api_version: String,
    #[serde(skip_serializing_if = "is_empty_str")]
    pub resource_version: String,
    #[serde(skip_serializing_if = "is_empty_str")]
    pub subresource: String,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct EmptyMeta {}

/// The bounded fields of the response's `metav1.Status` upstream copies into events:
/// just the code for a success, the Status fields for a failure.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct ResponseStatus {
    pub metadata: EmptyMeta,
    #[serde(skip_serializing_if = "is_empty_str")]
    pub status: String,
    #[serde(skip_serializing_if = "is_empty_str")]
    pub message: String,
    #[serde(skip_serializing_if = "is_empty_str")]
    pub reason: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub details: Option<Value>,
    pub code: u16,
}

impl ResponseStatus {
    pub fn code(code: u16) -> Self {
        Self { code, ..Default::default() }
    }

    /// From a `metav1.Status` object (an error response body).
    pub fn from_status(code: u16, status: &Value) -> Self {
        let s = |k: &str| status[k].as_str().unwrap_or_default().to_string();
        Self {
            metadata: EmptyMeta {},
            status: s("status"),
            message: s("message"),
            reason: s("reason"),
            details: status.get("details").filter(|d| !d.is_null()).cloned(),
            code: status["code"].as_u64().and_then(|c| u16::try_from(c).ok()).unwrap_or(code),
        }
    }
}

/// `audit.k8s.io/v1` Event.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Event {
    pub kind: &'static str,
    pub api_version: &'static str,
    pub level: Level,
    #[serde(rename = "auditID")]
    pub audit_id: String,
    pub stage: Stage,
    #[serde(rename = "requestURI")]
    pub request_uri: String,
    pub verb: String,
    pub user: UserInfo,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub impersonated_user: Option<UserInfo>,
    #[serde(rename = "sourceIPs", skip_serializing_if = "Vec::is_empty")]
    pub source_ips: Vec<String>,
    #[serde(skip_serializing_if = "is_empty_str")]
    pub user_agent: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub object_ref: Option<ObjectReference>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub response_status: Option<ResponseStatus>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request_object: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub response_object: Option<Value>,
    #[serde(serialize_with = "micro_time")]
    pub request_received_timestamp: SystemTime,
    #[serde(serialize_with = "micro_time")]
    pub stage_timestamp: SystemTime,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

impl Event {
    pub fn new(audit_id: String, received: SystemTime) -> Self {
        Self {
            kind: "Event",
            api_version: "audit.k8s.io/v1",
            level: Level::Metadata,
            audit_id,
            stage: Stage::RequestReceived,
            request_uri: String::new(),
            verb: String::new(),
            user: UserInfo::default(),
            impersonated_user: None,
            source_ips: Vec::new(),
            user_agent: String::new(),
            object_ref: None,
            response_status: None,
            request_object: None,
            response_object: None,
            request_received_timestamp: received,
            stage_timestamp: received,
            annotations: BTreeMap::new(),
        }
    }

    /// One line of the `json` format, newline included.
    pub fn to_json_line(&self) -> Vec<u8> {
        let mut v = serde_json::to_vec(self).unwrap_or_default();
        v.push(b'\n');
        v
    }

    /// One line of the `legacy` format (upstream's `audit.EventString`), newline included.
    pub fn to_legacy_line(&self) -> Vec<u8> {
        let (mut username, mut groups) = ("<none>".to_string(), "<none>".to_string());
        if !self.user.username.is_empty() {
            username = self.user.username.clone();
            if !self.user.groups.is_empty() {
                groups = quoted_join(&self.user.groups);
            }
        }
        let (mut as_user, mut as_groups) = ("<self>".to_string(), "<lookup>".to_string());
        if let Some(u) = &self.impersonated_user {
            as_user = u.username.clone();
            as_groups = quoted_join(&u.groups);
        }
        let namespace = self
            .object_ref
            .as_ref()
            .map(|o| o.namespace.as_str())
            .filter(|n| !n.is_empty())
            .unwrap_or("<none>");
        let response = self.response_status.as_ref().map_or("<deferred>".to_string(), |s| s.code.to_string());
        let ip = self.source_ips.first().map_or("<unknown>", String::as_str);
        format!(
            "{} AUDIT: id={} stage={} ip={} method={} user={} groups={} as={} asgroups={} user-agent={} namespace={} uri={} response=\"{response}\"\n",
            rfc3339_nano(self.request_received_timestamp),
            go_quote(&self.audit_id),
            go_quote(self.stage.as_str()),
            go_quote(ip),
            go_quote(&self.verb),
            go_quote(&username),
            go_quote(&groups),
            go_quote(&as_user),
            go_quote(&as_groups),
            go_quote(&self.user_agent),
            go_quote(namespace),
            go_quote(&self.request_uri),
        )
        .into_bytes()
    }
}

fn quoted_join(v: &[String]) -> String {
    v.iter().map(|s| go_quote(s)).collect::<Vec<_>>().join(",")
}

/// Go's `%q`: a double-quoted string with Go escapes.
pub fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => out.push_str(&format!("\\x{:02x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn split(t: SystemTime) -> (i64, i32) {
    let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    (i64::try_from(d.as_secs()).unwrap_or(i64::MAX), d.subsec_nanos() as i32)
}

/// metav1.MicroTime: RFC 3339 in UTC with six fractional digits.
pub fn micro(t: SystemTime) -> String {
    let (secs, nanos) = split(t);
    let (y, m, d) = super::rotate::civil_from_days(secs.div_euclid(86_400));
    let sod = secs.rem_euclid(86_400);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:06}Z",
        sod / 3600,
        sod / 60 % 60,
        sod % 60,
        nanos / 1000
    )
}

fn micro_time<S: serde::Serializer>(t: &SystemTime, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&micro(*t))
}

/// Go's `time.RFC3339Nano` of a microsecond time: trailing zeros of the fraction dropped.
fn rfc3339_nano(t: SystemTime) -> String {
    let m = micro(t);
    let Some(dot) = m.find('.') else { return m };
    let frac = m[dot + 1..m.len() - 1].trim_end_matches('0');
    if frac.is_empty() { format!("{}Z", &m[..dot]) } else { format!("{}.{frac}Z", &m[..dot]) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn at(micros: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_micros(micros)
    }

    fn sample() -> Event {
        let mut ev = Event::new("4f7d4b54-5e6c-4d55-8c43-1f1d8a1e2b3c".into(), at(1_733_050_800_123_456));
        ev.stage = Stage::ResponseComplete;
        ev.level = Level::Metadata;
        ev.request_uri = "/api/v1/namespaces/default/pods?limit=500".into();
        ev.verb = "list".into();
        ev.user = UserInfo {
            username: "admin".into(),
            groups: vec!["system:masters".into()],
            ..Default::default()
        };
        ev.source_ips = vec!["127.0.0.1".into()];
        ev.user_agent = "kubectl/v1.32.0".into();
        ev.object_ref = Some(ObjectReference {
            resource: "pods".into(),
            namespace: "default".into(),
            api_version: "v1".into(),
            ..Default::default()
        });
        ev.response_status = Some(ResponseStatus::code(200));
        ev.stage_timestamp = at(1_733_050_800_200_000);
        ev.annotations.insert("authorization.k8s.io/decision".into(), "allow".into());
        ev.annotations.insert("authorization.k8s.io/reason".into(), String::new());
        ev
    }

    #[test]
    fn json_shape_matches_upstream() {
        let line = String::from_utf8(sample().to_json_line()).unwrap();
        assert!(line.ends_with("}\n"));
        assert_eq!(line.matches('\n').count(), 1);
        assert_eq!(
            line.trim_end(),
            concat!(
                r#"{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata","auditID":"4f7d4b54-5e6c-4d55-8c43-1f1d8a1e2b3c","#,
                r#""stage":"ResponseComplete","requestURI":"/api/v1/namespaces/default/pods?limit=500","verb":"list","#,
                r#""user":{"username":"admin","groups":["system:masters"]},"sourceIPs":["127.0.0.1"],"userAgent":"kubectl/v1.32.0","#,
                r#""objectRef":{"resource":"pods","namespace":"default","apiVersion":"v1"},"responseStatus":{"metadata":{},"code":200},"#,
                r#""requestReceivedTimestamp":"2024-12-01T11:00:00.123456Z","stageTimestamp":"2024-12-01T11:00:00.200000Z","#,
                r#""annotations":{"authorization.k8s.io/decision":"allow","authorization.k8s.io/reason":""}}"#
            )
        );
    }

    #[test]
    fn failure_status_and_objects() {
        let mut ev = sample();
        let status = serde_json::json!({"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",
            "message":"pods \"x\" not found","reason":"NotFound","details":{"name":"x","kind":"pods"},"code":404});
        ev.response_status = Some(ResponseStatus::from_status(404, &status));
        ev.request_object = Some(serde_json::json!({"a": 1}));
        let v: Value = serde_json::from_slice(&ev.to_json_line()).unwrap();
        assert_eq!(
            v["responseStatus"],
            serde_json::json!({"metadata":{},"status":"Failure","message":"pods \"x\" not found","reason":"NotFound",
                "details":{"name":"x","kind":"pods"},"code":404})
        );
        assert_eq!(v["requestObject"], serde_json::json!({"a": 1}));
        assert!(v.get("responseObject").is_none());
        assert!(v.get("impersonatedUser").is_none());
    }

    #[test]
    fn legacy_line() {
        let line = String::from_utf8(sample().to_legacy_line()).unwrap();
        assert_eq!(
            line,
            "2024-12-01T11:00:00.123456Z AUDIT: id=\"4f7d4b54-5e6c-4d55-8c43-1f1d8a1e2b3c\" stage=\"ResponseComplete\" ip=\"127.0.0.1\" method=\"list\" user=\"admin\" groups=\"\\\"system:masters\\\"\" as=\"<self>\" asgroups=\"<lookup>\" user-agent=\"kubectl/v1.32.0\" namespace=\"default\" uri=\"/api/v1/namespaces/default/pods?limit=500\" response=\"200\"\n"
        );
        assert_eq!(rfc3339_nano(at(1_000_000)), "1970-01-01T00:00:01Z");
        assert_eq!(rfc3339_nano(at(1_500_000)), "1970-01-01T00:00:01.5Z");
    }

    #[test]
    fn stages() {
        let mut s = Stages::default();
        s.insert(Stage::RequestReceived);
        assert!(s.contains(Stage::RequestReceived));
        assert!(!s.contains(Stage::Panic));
        assert_eq!(Stage::parse("ResponseStarted"), Some(Stage::ResponseStarted));
        assert_eq!(Stage::parse("Nope"), None);
        assert!(Level::RequestResponse > Level::Request && Level::Metadata > Level::None);
    }
}
