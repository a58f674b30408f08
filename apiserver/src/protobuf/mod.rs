//! Kubernetes protobuf encoding (`application/vnd.kubernetes.protobuf`), translated to and
//! from the objects' JSON form, which is what the rest of the apiserver works with.
//!
//! # Wire format
//!
//! A body is the 4-byte magic `k8s\0` followed by a `runtime.Unknown` message:
//!
//! ```text
//! Unknown { TypeMeta typeMeta = 1 { string apiVersion = 1; string kind = 2 }
//!           bytes raw = 2; string contentEncoding = 3; string contentType = 4 }
//! ```
//!
//! `raw` is the object's own message, e.g. `k8s.io.api.apps.v1.Deployment`, found by the
//! TypeMeta's apiVersion and kind in [`schema::KINDS`]. Lists (`DeploymentList`) are kinds
//! too; `Status` and the other "unversioned" meta kinds are accepted at any apiVersion.
//!
//! # Layout
//!
//! - [`schema`]: the generated message table (`hack/gen-protobuf-schema.py`): every message's
//!   fields with tag, JSON name, [`Kind`] and [`Card`]inality, plus the kind map.
//! - `message`: the table-driven translation of one message, both ways, including the
//!   [`Special`] messages whose JSON is not an object of their fields (Time is a string,
//!   IntOrString a number or a string, RawExtension the embedded JSON...).
//! - `wire`: varints, keys, lengths; `wkt`: RFC 3339 and Go duration text.
//!
//! Decoding never panics on malformed input: every problem (truncation, lengths past the
//! end, wrong wire types, nesting deeper than [`MAX_DEPTH`]) is a 400 with a message.
//!
//! A worked example: `kubectl create namespace demo` sends
//! `k8s\0` + Unknown{typeMeta{"v1", "Namespace"}, raw = Namespace{metadata{name "demo",
//! generateName "", creationTimestamp{}, ...}, spec{}, status{phase ""}}}, which decodes to
//! `{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"demo"},"spec":{},"status":{}}`:
//! empty strings are Go's "unset", an empty Time is Go's zero time (`null`), a zero number
//! or `false` goes where the Go field is a non-pointer `omitempty` one (`generation`) and
//! stays elsewhere, because a pointer's zero is meaningful ([`omitempty`]).

mod message;
mod omitempty;
pub mod schema;
pub(crate) mod wire;
pub(crate) mod wkt;

#[cfg(test)]
mod tests;

use serde_json::Value;

use crate::errors::{ApiError, ApiResult};
use wire::{Reader, WireError, WireType, put_bytes};

/// The prefix of every Kubernetes protobuf body.
pub const MAGIC: &[u8; 4] = b"k8s\0";

/// How deeply messages may nest (JSONSchemaProps is recursive; real objects stay under 20).
pub const MAX_DEPTH: usize = 100;

/// Kinds registered in every API group version as `meta.k8s.io/v1` messages.
const UNVERSIONED: &[&str] = &[
    "Status",
    "WatchEvent",
    "DeleteOptions",
    "CreateOptions",
    "UpdateOptions",
    "PatchOptions",
    "GetOptions",
    "ListOptions",
    "APIVersions",
    "APIGroupList",
    "APIGroup",
    "APIResourceList",
];

/// One protobuf message of the table.
#[derive(Debug)]
pub struct Message {
    /// Fully qualified, as in the upstream `.proto`: `k8s.io.api.apps.v1.Deployment`.
    pub name: &'static str,
    pub special: Special,
    /// Sorted by tag.
    pub fields: &'static [Field],
}

impl Message {
    pub fn field(&self, tag: u32) -> Option<&'static Field> {
        self.fields.binary_search_by_key(&tag, |f| f.tag).ok().map(|i| &self.fields[i])
    }
}

#[derive(Debug)]
pub struct Field {
    pub tag: u32,
    /// The JSON key (empty for [`Card::Inline`]).
    pub json: &'static str,
    /// The value's kind; for maps, the map value's kind.
    pub kind: Kind,
    pub card: Card,
}

/// A field's (or map value's) type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Str,
    Bool,
    I32,
    I64,
    U32,
    U64,
    S32,
    S64,
    F64,
    F32,
    /// Base64 in JSON, as Go's `[]byte`.
    Bytes,
    /// A message, by fully qualified name.
    Msg(&'static str),
}

impl Kind {
    fn wire_type(self) -> WireType {
        match self {
            Self::Str | Self::Bytes | Self::Msg(_) => WireType::Len,
            Self::F64 => WireType::Fixed64,
            Self::F32 => WireType::Fixed32,
            _ => WireType::Varint,
        }
    }

    /// Whether repeated values of this kind may come packed into one length-delimited value.
    fn packable(self) -> bool {
        self.wire_type() != WireType::Len
    }

    /// The JSON of the zero value, for a map entry without a value.
    fn zero(self) -> Value {
        match self {
            Self::Str | Self::Bytes => Value::String(String::new()),
            Self::Bool => Value::Bool(false),
            Self::Msg(_) => Value::Null,
            _ => Value::from(0),
        }
    }
}

/// Cardinality.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Card {
    /// A singular field.
    One,
    /// A repeated field: a JSON array.
    Many,
    /// A map with keys of this kind: a JSON object.
    Map(Kind),
    /// A message Go embeds (`json:",inline"`): its fields sit in the parent's JSON object.
    Inline,
}

/// Messages whose JSON form is not an object of their fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Special {
    None,
    /// meta.v1.Time {int64 seconds = 1; int32 nanos = 2}: `"2006-01-02T15:04:05Z"`; Go's zero
    /// time (an empty message, or seconds -62135596800) is absent.
    Time,
    /// meta.v1.MicroTime: `"2006-01-02T15:04:05.000000Z"`.
    MicroTime,
    /// meta.v1.Duration {int64 duration = 1} (nanoseconds): `"1h2m3s"`.
    Duration,
    /// api.resource.Quantity {string string = 1}: `"100m"`.
    Quantity,
    /// util.intstr.IntOrString {int64 type = 1; int32 intVal = 2; string strVal = 3}: a
    /// number (type 0) or a string (type 1).
    IntOrString,
    /// runtime.RawExtension {bytes raw = 1}: the embedded JSON (or a nested protobuf object).
    RawExtension,
    /// apiextensions JSON {bytes raw = 1}: the embedded JSON.
    Json,
    /// meta.v1.FieldsV1 {bytes Raw = 1}: the embedded JSON object.
    FieldsV1,
    /// A named `[]string` (meta.v1.Verbs, the ExtraValues) {repeated string items = 1}: an array.
    StringArray,
    /// JSONSchemaPropsOrArray {schema = 1; repeated jSONSchemas = 2}: a schema or an array.
    SchemaOrArray,
    /// JSONSchemaPropsOrBool {bool allows = 1; schema = 2}: a schema or a boolean.
    SchemaOrBool,
    /// JSONSchemaPropsOrStringArray {schema = 1; repeated string property = 2}.
    SchemaOrStringArray,
}

/// Why a body could not be translated.
#[derive(Debug, thiserror::Error)]
pub enum Reason {
    #[error(transparent)]
    Wire(#[from] WireError),
    #[error("wire type {got} where {want} was expected")]
    WireType { got: WireType, want: WireType },
    #[error("objects nested more than {MAX_DEPTH} levels deep")]
    TooDeep,
    #[error("{0}")]
    Invalid(String),
    #[error("the protobuf schema has no message {0}")]
    UnknownMessage(String),
    #[error("the body does not start with the Kubernetes protobuf prefix \"k8s\\x00\"")]
    NoMagic,
    #[error("Object 'Kind' is missing in the protobuf envelope")]
    MissingKind,
    #[error("no kind \"{kind}\" is registered for version \"{api_version}\"")]
    NoKind { api_version: String, kind: String },
    #[error("unsupported content encoding {0:?} in the protobuf envelope")]
    ContentEncoding(String),
}

/// A [`Reason`] and where in the object it happened.
#[derive(Debug)]
pub struct Error {
    /// Innermost segment first.
    path: Vec<String>,
    pub reason: Reason,
}

impl Error {
    fn at(mut self, field: &str) -> Self {
        if !field.is_empty() {
            self.path.push(field.to_owned());
        }
        self
    }

    fn at_key(mut self, key: &str) -> Self {
        self.path.push(format!("[{key}]"));
        self
    }

    pub fn path(&self) -> String {
        let mut s = String::new();
        for seg in self.path.iter().rev() {
            if !s.is_empty() && !seg.starts_with('[') {
                s.push('.');
            }
            s.push_str(seg);
        }
        s
    }
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.path.is_empty() {
            write!(f, "{}", self.reason)
        } else {
            write!(f, "{}: {}", self.path(), self.reason)
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.reason)
    }
}

impl From<Reason> for Error {
    fn from(reason: Reason) -> Self {
        Self { path: Vec::new(), reason }
    }
}

impl From<WireError> for Error {
    fn from(e: WireError) -> Self {
        Reason::Wire(e).into()
    }
}

/// The message named `name` (fully qualified).
pub fn message(name: &str) -> Result<&'static Message, Error> {
    schema::MESSAGES
        .binary_search_by(|m| m.name.cmp(name))
        .map(|i| &schema::MESSAGES[i])
        .map_err(|_| Reason::UnknownMessage(name.to_owned()).into())
}

/// The message of an object of this apiVersion and kind, if it has a protobuf form.
pub fn message_for_kind(api_version: &str, kind: &str) -> Option<&'static Message> {
    let name = match schema::KINDS.binary_search_by(|(v, k, _)| (*v, *k).cmp(&(api_version, kind))) {
        Ok(i) => schema::KINDS[i].2.to_owned(),
        Err(_) if UNVERSIONED.contains(&kind) => format!("k8s.io.apimachinery.pkg.apis.meta.v1.{kind}"),
        Err(_) => return None,
    };
    message(&name).ok()
}

/// Decodes a protobuf request body into the object's JSON form.
pub fn decode(body: &[u8]) -> ApiResult<Value> {
    decode_envelope(body, 0).map_err(|e| match e.reason {
        Reason::NoKind { .. } | Reason::MissingKind => ApiError::bad_request(e.to_string()),
        _ => ApiError::bad_request(format!("error decoding protobuf body: {e}")),
    })
}

/// The parts of a `runtime.Unknown`.
struct Envelope<'a> {
    api_version: String,
    kind: String,
    raw: &'a [u8],
    content_encoding: String,
}

fn parse_envelope(buf: &[u8]) -> Result<Envelope<'_>, Error> {
    fn string(r: &mut Reader<'_>, wt: WireType) -> Result<String, Error> {
        if wt != WireType::Len {
            return Err(Reason::WireType { got: wt, want: WireType::Len }.into());
        }
        Ok(String::from_utf8_lossy(r.bytes()?).into_owned())
    }
    let mut env = Envelope {
        api_version: String::new(),
        kind: String::new(),
        raw: &[],
        content_encoding: String::new(),
    };
    let mut r = Reader::new(buf);
    while !r.is_empty() {
        match r.key()? {
            (1, WireType::Len) => {
                let mut tm = Reader::new(r.bytes()?);
                while !tm.is_empty() {
                    match tm.key()? {
                        (1, wt) => env.api_version = string(&mut tm, wt).map_err(|e| e.at("apiVersion"))?,
                        (2, wt) => env.kind = string(&mut tm, wt).map_err(|e| e.at("kind"))?,
                        (_, wt) => tm.skip(wt)?,
                    }
                }
            }
            (2, WireType::Len) => env.raw = r.bytes()?,
            (3, wt) => env.content_encoding = string(&mut r, wt)?,
            (1 | 2, wt) => return Err(Reason::WireType { got: wt, want: WireType::Len }.into()),
            (_, wt) => r.skip(wt)?,
        }
    }
    Ok(env)
}

fn decode_envelope(body: &[u8], depth: usize) -> Result<Value, Error> {
    let Some(rest) = body.strip_prefix(MAGIC) else {
        return Err(Reason::NoMagic.into());
    };
    let env = parse_envelope(rest)?;
    if !env.content_encoding.is_empty() {
        return Err(Reason::ContentEncoding(env.content_encoding).into());
    }
    if env.kind.is_empty() {
        return Err(Reason::MissingKind.into());
    }
    let msg = message_for_kind(&env.api_version, &env.kind)
        .ok_or_else(|| Reason::NoKind { api_version: env.api_version.clone(), kind: env.kind.clone() })?;
    let mut obj = match message::decode(msg, env.raw, depth)? {
        Some(Value::Object(o)) => o,
        _ => return Err(Reason::Invalid(format!("{} is not an object", env.kind)).into()),
    };
    obj.insert("apiVersion".into(), Value::String(env.api_version));
    obj.insert("kind".into(), Value::String(env.kind));
    Ok(Value::Object(obj))
}

/// Encodes an object (or list) as protobuf; None when its kind has no protobuf form here (a
/// custom resource, a Table) or the object does not fit its message, so the caller answers
/// in JSON.
pub fn encode(v: &Value) -> Option<Vec<u8>> {
    let api_version = v.get("apiVersion")?.as_str()?;
    let kind = v.get("kind")?.as_str()?;
    let msg = message_for_kind(api_version, kind)?;
    let mut raw = Vec::new();
    if let Err(e) = message::encode(msg, v, &mut raw, 0) {
        tracing::debug!(%api_version, %kind, error = %e, "answering in JSON: object does not fit its protobuf message");
        return None;
    }
    let mut type_meta = Vec::new();
    put_bytes(&mut type_meta, 1, api_version.as_bytes());
    put_bytes(&mut type_meta, 2, kind.as_bytes());
    let mut out = Vec::with_capacity(raw.len() + type_meta.len() + 16);
    out.extend_from_slice(MAGIC);
    put_bytes(&mut out, 1, &type_meta);
    put_bytes(&mut out, 2, &raw);
    // Go writes the (empty) contentEncoding and contentType too.
    put_bytes(&mut out, 3, b"");
    put_bytes(&mut out, 4, b"");
    Some(out)
}
