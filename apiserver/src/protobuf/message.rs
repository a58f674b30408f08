//! The schema-driven translation between a message's bytes and its JSON form.
//!
//! Decoding follows Go's gogo-protobuf output: non-pointer fields are written even when zero,
//! so an empty string means "unset" and is dropped; a numeric zero or `false` is dropped where
//! the Go field is a non-pointer tagged `omitempty` ([`super::omitempty`]: upstream's JSON
//! never shows it), and kept elsewhere (a pointer's zero is meaningful).
//! Unknown fields are skipped. Repeated scalars are accepted packed or not, and written
//! unpacked (Kubernetes' `.proto` files are proto2).

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use serde_json::{Map, Number, Value};

use super::wire::{Reader, WireType, put_bytes, put_key, put_varint};
use super::wkt;
use super::{Card, Error, Field, Kind, MAX_DEPTH, Message, Reason, Special, message};

type Object = Map<String, Value>;

/// Decodes `buf` as `msg`; None when the value is absent in JSON (a zero Time, an empty
/// RawExtension).
pub fn decode(msg: &'static Message, buf: &[u8], depth: usize) -> Result<Option<Value>, Error> {
    if depth > MAX_DEPTH {
        return Err(Reason::TooDeep.into());
    }
    if msg.special != Special::None {
        return decode_special(msg, buf, depth);
    }
    decode_object(msg, buf, depth).map(|o| Some(Value::Object(o)))
}

/// `false` or a numeric zero.
fn is_zero(v: &Value) -> bool {
    match v {
        Value::Bool(b) => !b,
        Value::Number(n) => n.as_f64() == Some(0.0),
        _ => false,
    }
}

/// Whether upstream's JSON leaves out field `tag` of `message` when it is zero.
fn omits_zero(message: &str, tag: u32) -> bool {
    let table = super::omitempty::OMIT_ZERO;
    table.binary_search_by_key(&message, |(name, _)| name).is_ok_and(|i| table[i].1.contains(&tag))
}

fn decode_object(msg: &'static Message, buf: &[u8], depth: usize) -> Result<Object, Error> {
    let mut out = Object::new();
    let mut r = Reader::new(buf);
    while !r.is_empty() {
        let (tag, wt) = r.key()?;
        let Some(field) = msg.field(tag) else {
            r.skip(wt)?;
            continue;
        };
        decode_field(msg, field, wt, &mut r, &mut out, depth).map_err(|e| e.at(field.json))?;
    }
    Ok(out)
}

fn decode_field(
    msg: &Message,
    f: &Field,
    wt: WireType,
    r: &mut Reader<'_>,
    out: &mut Object,
    depth: usize,
) -> Result<(), Error> {
    match (f.card, f.kind) {
        (Card::Inline, Kind::Msg(name)) => {
            let inner = decode_object(message(name)?, expect_len(r, wt)?, depth + 1)?;
            out.extend(inner);
        }
        (Card::Inline, _) => return Err(Reason::Invalid("an embedded field must be a message".into()).into()),
        (Card::One, Kind::Msg(name)) => match decode(message(name)?, expect_len(r, wt)?, depth + 1)? {
            Some(v) => {
                out.insert(f.json.into(), v);
            }
            None => {
                out.remove(f.json);
            }
        },
        (Card::One, kind) => {
            let v = scalar(kind, wt, r)?;
            // An empty string or byte string is Go's zero value: unset. So is the zero of a
            // non-pointer `omitempty` number or bool.
            if v.as_str() == Some("") || (is_zero(&v) && omits_zero(msg.name, f.tag)) {
                out.remove(f.json);
            } else {
                out.insert(f.json.into(), v);
            }
        }
        (Card::Many, kind) => {
            let slot = out.entry(f.json).or_insert_with(|| Value::Array(Vec::new()));
            if !slot.is_array() {
                *slot = Value::Array(Vec::new());
            }
            let Value::Array(list) = slot else { return Err(Reason::Invalid("not a list".into()).into()) };
            match kind {
                Kind::Msg(name) => {
                    let v = decode(message(name)?, expect_len(r, wt)?, depth + 1)?;
                    list.push(v.unwrap_or(Value::Null));
                }
                kind if wt == WireType::Len && kind.packable() => {
                    let mut packed = Reader::new(r.bytes()?);
                    while !packed.is_empty() {
                        list.push(scalar(kind, kind.wire_type(), &mut packed)?);
                    }
                }
                kind => list.push(scalar(kind, wt, r)?),
            }
        }
        (Card::Map(key_kind), kind) => {
            let mut entry = Reader::new(expect_len(r, wt)?);
            let (mut key, mut value) = (None, None);
            while !entry.is_empty() {
                match entry.key()? {
                    (1, wt) => key = Some(scalar(key_kind, wt, &mut entry)?),
                    (2, wt) => {
                        value = Some(match kind {
                            Kind::Msg(name) => {
                                decode(message(name)?, expect_len(&mut entry, wt)?, depth + 1)?
                                    .unwrap_or(Value::Null)
                            }
                            kind => scalar(kind, wt, &mut entry)?,
                        })
                    }
                    (_, wt) => entry.skip(wt)?,
                }
            }
            let key = match key {
                Some(Value::String(s)) => s,
                Some(other) => other.to_string(),
                None => String::new(),
            };
            let value = match (value, kind) {
                (Some(v), _) => v,
                (None, Kind::Msg(name)) => decode(message(name)?, &[], depth + 1)?.unwrap_or(Value::Null),
                (None, kind) => kind.zero(),
            };
            let slot = out.entry(f.json).or_insert_with(|| Value::Object(Object::new()));
            if !slot.is_object() {
                *slot = Value::Object(Object::new());
            }
            let Value::Object(map) = slot else { return Err(Reason::Invalid("not a map".into()).into()) };
            map.insert(key, value);
        }
    }
    Ok(())
}

fn expect_len<'a>(r: &mut Reader<'a>, wt: WireType) -> Result<&'a [u8], Error> {
    if wt != WireType::Len {
        return Err(Reason::WireType { got: wt, want: WireType::Len }.into());
    }
    Ok(r.bytes()?)
}

fn scalar(kind: Kind, wt: WireType, r: &mut Reader<'_>) -> Result<Value, Error> {
    let want = kind.wire_type();
    if wt != want {
        return Err(Reason::WireType { got: wt, want }.into());
    }
    Ok(match kind {
        Kind::Str => Value::String(String::from_utf8_lossy(r.bytes()?).into_owned()),
        Kind::Bytes => Value::String(BASE64.encode(r.bytes()?)),
        Kind::Bool => Value::Bool(r.varint()? != 0),
        Kind::I32 => Value::from(r.varint()? as i32),
        Kind::I64 => Value::from(r.varint()? as i64),
        Kind::U32 => Value::from(r.varint()? as u32),
        Kind::U64 => Value::from(r.varint()?),
        Kind::S32 => {
            let v = r.varint()? as u32;
            Value::from((v >> 1) as i32 ^ -((v & 1) as i32))
        }
        Kind::S64 => {
            let v = r.varint()?;
            Value::from((v >> 1) as i64 ^ -((v & 1) as i64))
        }
        Kind::F64 => float(f64::from_bits(r.fixed64()?))?,
        Kind::F32 => float(f64::from(f32::from_bits(r.fixed32()?)))?,
        Kind::Msg(_) => unreachable!("messages are not scalars"),
    })
}

fn float(f: f64) -> Result<Value, Error> {
    Number::from_f64(f)
        .map(Value::Number)
        .ok_or_else(|| Reason::Invalid(format!("{f} has no JSON form")).into())
}

/// One field of a special message, read without the schema.
struct RawField<'a> {
    tag: u32,
    wt: WireType,
    varint: u64,
    bytes: &'a [u8],
}

/// A special message's fields (small, fixed layouts: read once, then looked up by tag).
struct RawFields<'a>(Vec<RawField<'a>>);

impl<'a> RawFields<'a> {
    fn parse(buf: &'a [u8]) -> Result<Self, Error> {
        let mut r = Reader::new(buf);
        let mut out = Vec::new();
        while !r.is_empty() {
            let (tag, wt) = r.key()?;
            match wt {
                WireType::Varint => out.push(RawField { tag, wt, varint: r.varint()?, bytes: &[] }),
                WireType::Len => out.push(RawField { tag, wt, varint: 0, bytes: r.bytes()? }),
                other => r.skip(other)?,
            }
        }
        Ok(Self(out))
    }

    /// The last value at `tag` (proto's "last one wins"), checking its wire type.
    fn last(&self, tag: u32, want: WireType) -> Result<Option<&RawField<'a>>, Error> {
        match self.0.iter().rev().find(|f| f.tag == tag) {
            Some(f) if f.wt != want => Err(Reason::WireType { got: f.wt, want }.into()),
            found => Ok(found),
        }
    }

    fn varint(&self, tag: u32) -> Result<u64, Error> {
        Ok(self.last(tag, WireType::Varint)?.map_or(0, |f| f.varint))
    }

    fn bytes(&self, tag: u32) -> Result<Option<&'a [u8]>, Error> {
        Ok(self.last(tag, WireType::Len)?.map(|f| f.bytes))
    }

    /// Every value at `tag` (a repeated field), which must all be length-delimited.
    fn all_bytes(&self, tag: u32) -> Result<Vec<&'a [u8]>, Error> {
        self.0
            .iter()
            .filter(|f| f.tag == tag)
            .map(|f| match f.wt {
                WireType::Len => Ok(f.bytes),
                got => Err(Reason::WireType { got, want: WireType::Len }.into()),
            })
            .collect()
    }

    fn strings(&self, tag: u32) -> Result<Vec<Value>, Error> {
        Ok(self
            .all_bytes(tag)?
            .into_iter()
            .map(|b| Value::String(String::from_utf8_lossy(b).into_owned()))
            .collect())
    }
}

/// Embedded JSON (RawExtension, JSON, FieldsV1); a RawExtension may also hold a nested
/// protobuf object (watch events do).
fn embedded(raw: Option<&[u8]>, depth: usize) -> Result<Option<Value>, Error> {
    match raw {
        None | Some([]) => Ok(None),
        Some(raw) if raw.starts_with(super::MAGIC) => super::decode_envelope(raw, depth + 1).map(Some),
        Some(raw) => serde_json::from_slice(raw)
            .map(Some)
            .map_err(|e| Reason::Invalid(format!("embedded JSON: {e}")).into()),
    }
}

/// The message of the special message's field `tag` (the schema inside JSONSchemaPropsOr*).
fn field_message(msg: &Message, tag: u32) -> Result<&'static Message, Error> {
    match msg.field(tag).map(|f| f.kind) {
        Some(Kind::Msg(name)) => message(name),
        _ => Err(Reason::Invalid(format!("{} has no message field {tag}", msg.name)).into()),
    }
}

fn decode_special(msg: &'static Message, buf: &[u8], depth: usize) -> Result<Option<Value>, Error> {
    let fs = RawFields::parse(buf)?;
    Ok(match msg.special {
        Special::None => unreachable!("checked by the caller"),
        Special::Time | Special::MicroTime => {
            let secs = fs.varint(1)? as i64;
            let nanos = fs.varint(2)? as i32;
            // Go writes a zero Time as an empty message (its Marshal skips IsZero times; an
            // epoch time has explicit zero fields); a zero Timestamp also means unset.
            if buf.is_empty() || (secs == wkt::GO_ZERO_TIME && nanos == 0) {
                return Ok(None);
            }
            let s = wkt::format_time(secs, nanos, msg.special == Special::MicroTime)
                .ok_or_else(|| Reason::Invalid(format!("time {secs}s is outside years 0-9999")))?;
            Some(Value::String(s))
        }
        Special::Duration => Some(Value::String(wkt::format_duration(fs.varint(1)? as i64))),
        Special::Quantity => {
            let s = fs.bytes(1)?.map(String::from_utf8_lossy).unwrap_or_default();
            Some(Value::String(if s.is_empty() { "0".into() } else { s.into_owned() }))
        }
        Special::IntOrString => {
            if fs.varint(1)? == 1 {
                let s = fs.bytes(3)?.map(String::from_utf8_lossy).unwrap_or_default();
                Some(Value::String(s.into_owned()))
            } else {
                Some(Value::from(fs.varint(2)? as i32))
            }
        }
        Special::RawExtension | Special::Json | Special::FieldsV1 => embedded(fs.bytes(1)?, depth)?,
        Special::StringArray => Some(Value::Array(fs.strings(1)?)),
        Special::SchemaOrArray => {
            let props = field_message(msg, 1)?;
            let many = fs.all_bytes(2)?;
            if !many.is_empty() {
                let mut list = Vec::with_capacity(many.len());
                for b in many {
                    list.push(decode(props, b, depth + 1)?.unwrap_or(Value::Null));
                }
                Some(Value::Array(list))
            } else {
                match fs.bytes(1)? {
                    Some(b) => decode(props, b, depth + 1)?,
                    None => None,
                }
            }
        }
        Special::SchemaOrBool => match fs.bytes(2)? {
            Some(b) => decode(field_message(msg, 2)?, b, depth + 1)?,
            None => Some(Value::Bool(fs.varint(1)? != 0)),
        },
        Special::SchemaOrStringArray => {
            let property = fs.strings(2)?;
            if !property.is_empty() {
                Some(Value::Array(property))
            } else {
                match fs.bytes(1)? {
                    Some(b) => decode(field_message(msg, 1)?, b, depth + 1)?,
                    None => None,
                }
            }
        }
    })
}

/// Encodes the JSON value `v` as the body of `msg` (no key or length prefix).
pub fn encode(msg: &'static Message, v: &Value, out: &mut Vec<u8>, depth: usize) -> Result<(), Error> {
    if depth > MAX_DEPTH {
        return Err(Reason::TooDeep.into());
    }
    if msg.special != Special::None {
        return encode_special(msg, v, out, depth);
    }
    let Value::Object(obj) = v else {
        return Err(Reason::Invalid(format!("expected an object, got {}", type_name(v))).into());
    };
    for f in msg.fields {
        if f.card == Card::Inline {
            // The embedded struct's fields sit in this very object.
            let Kind::Msg(name) = f.kind else { continue };
            let mut inner = Vec::new();
            encode(message(name)?, v, &mut inner, depth + 1)?;
            put_bytes(out, f.tag, &inner);
            continue;
        }
        let Some(fv) = obj.get(f.json).filter(|fv| !fv.is_null()) else { continue };
        encode_field(f, fv, out, depth).map_err(|e| e.at(f.json))?;
    }
    Ok(())
}

fn encode_field(f: &Field, v: &Value, out: &mut Vec<u8>, depth: usize) -> Result<(), Error> {
    match f.card {
        Card::Inline => unreachable!("handled by the caller"),
        Card::One => encode_one(f.tag, f.kind, v, out, depth),
        Card::Many => {
            let Value::Array(items) = v else {
                return Err(Reason::Invalid(format!("expected an array, got {}", type_name(v))).into());
            };
            for item in items.iter().filter(|i| !i.is_null() || matches!(f.kind, Kind::Msg(_))) {
                encode_one(f.tag, f.kind, item, out, depth)?;
            }
            Ok(())
        }
        Card::Map(key_kind) => {
            let Value::Object(entries) = v else {
                return Err(Reason::Invalid(format!("expected an object, got {}", type_name(v))).into());
            };
            for (k, val) in entries {
                let mut entry = Vec::new();
                let key = match key_kind {
                    Kind::Str => Value::String(k.clone()),
                    _ => serde_json::from_str(k)
                        .map_err(|_| Reason::Invalid(format!("map key {k:?} is not a {key_kind:?}")))?,
                };
                encode_one(1, key_kind, &key, &mut entry, depth)?;
                if !val.is_null() {
                    encode_one(2, f.kind, val, &mut entry, depth).map_err(|e| e.at_key(k))?;
                }
                put_bytes(out, f.tag, &entry);
            }
            Ok(())
        }
    }
}

/// Writes one value (key included) of `kind` at `tag`.
fn encode_one(tag: u32, kind: Kind, v: &Value, out: &mut Vec<u8>, depth: usize) -> Result<(), Error> {
    let mismatch = || -> Error { Reason::Invalid(format!("expected {kind:?}, got {}", type_name(v))).into() };
    match kind {
        Kind::Msg(name) => {
            let mut inner = Vec::new();
            if !v.is_null() {
                encode(message(name)?, v, &mut inner, depth + 1)?;
            }
            put_bytes(out, tag, &inner);
        }
        Kind::Str => put_bytes(out, tag, v.as_str().ok_or_else(mismatch)?.as_bytes()),
        Kind::Bytes => {
            let s = v.as_str().ok_or_else(mismatch)?;
            let b = BASE64.decode(s).map_err(|e| Reason::Invalid(format!("invalid base64: {e}")))?;
            put_bytes(out, tag, &b);
        }
        Kind::Bool => {
            put_key(out, tag, WireType::Varint);
            put_varint(out, u64::from(v.as_bool().ok_or_else(mismatch)?));
        }
        Kind::I32 | Kind::I64 | Kind::S32 | Kind::S64 => {
            let i = integer(v).ok_or_else(mismatch)?;
            let bits = match kind {
                Kind::I32 => i64::from(i32::try_from(i).map_err(|_| mismatch())?) as u64,
                Kind::S32 => {
                    let i = i32::try_from(i).map_err(|_| mismatch())?;
                    u64::from(((i << 1) ^ (i >> 31)) as u32)
                }
                Kind::S64 => ((i << 1) ^ (i >> 63)) as u64,
                _ => i as u64,
            };
            put_key(out, tag, WireType::Varint);
            put_varint(out, bits);
        }
        Kind::U32 | Kind::U64 => {
            let u = v.as_u64().ok_or_else(mismatch)?;
            if kind == Kind::U32 && u > u64::from(u32::MAX) {
                return Err(mismatch());
            }
            put_key(out, tag, WireType::Varint);
            put_varint(out, u);
        }
        Kind::F64 => {
            put_key(out, tag, WireType::Fixed64);
            out.extend_from_slice(&v.as_f64().ok_or_else(mismatch)?.to_le_bytes());
        }
        Kind::F32 => {
            put_key(out, tag, WireType::Fixed32);
            out.extend_from_slice(&(v.as_f64().ok_or_else(mismatch)? as f32).to_le_bytes());
        }
    }
    Ok(())
}

/// A JSON integer, also from an integral float (`3.0`), as Go's decoder accepts.
fn integer(v: &Value) -> Option<i64> {
    v.as_i64().or_else(|| v.as_f64().filter(|f| f.fract() == 0.0 && f.abs() < 9.2e18).map(|f| f as i64))
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn put_varint_field(out: &mut Vec<u8>, tag: u32, v: u64) {
    put_key(out, tag, WireType::Varint);
    put_varint(out, v);
}

fn encode_special(msg: &'static Message, v: &Value, out: &mut Vec<u8>, depth: usize) -> Result<(), Error> {
    let invalid = |what: &str| -> Error { Reason::Invalid(format!("{what}, got {}", type_name(v))).into() };
    match msg.special {
        Special::None => unreachable!("checked by the caller"),
        Special::Time | Special::MicroTime => {
            let s = v.as_str().ok_or_else(|| invalid("expected an RFC 3339 time"))?;
            let (secs, nanos) =
                wkt::parse_time(s).ok_or_else(|| Reason::Invalid(format!("invalid RFC 3339 time {s:?}")))?;
            put_varint_field(out, 1, secs as u64);
            put_varint_field(out, 2, i64::from(nanos) as u64);
        }
        Special::Duration => {
            let s = v.as_str().ok_or_else(|| invalid("expected a duration"))?;
            let n =
                wkt::parse_duration(s).ok_or_else(|| Reason::Invalid(format!("invalid duration {s:?}")))?;
            put_varint_field(out, 1, n as u64);
        }
        Special::Quantity => {
            let s = match v {
                Value::String(s) => s.clone(),
                Value::Number(n) => n.to_string(),
                _ => return Err(invalid("expected a quantity")),
            };
            put_bytes(out, 1, s.as_bytes());
        }
        Special::IntOrString => match v {
            Value::String(s) => {
                put_varint_field(out, 1, 1);
                put_varint_field(out, 2, 0);
                put_bytes(out, 3, s.as_bytes());
            }
            Value::Number(_) => {
                let i = integer(v)
                    .and_then(|i| i32::try_from(i).ok())
                    .ok_or_else(|| invalid("expected an int32"))?;
                put_varint_field(out, 1, 0);
                put_varint_field(out, 2, i64::from(i) as u64);
                put_bytes(out, 3, b"");
            }
            _ => return Err(invalid("expected an integer or a string")),
        },
        Special::RawExtension | Special::Json | Special::FieldsV1 => {
            let raw = serde_json::to_vec(v).map_err(|e| Reason::Invalid(e.to_string()))?;
            put_bytes(out, 1, &raw);
        }
        Special::StringArray => {
            let items = v.as_array().ok_or_else(|| invalid("expected an array of strings"))?;
            for item in items {
                put_bytes(
                    out,
                    1,
                    item.as_str().ok_or_else(|| invalid("expected an array of strings"))?.as_bytes(),
                );
            }
        }
        Special::SchemaOrArray => match v {
            Value::Array(items) => {
                let props = field_message(msg, 2)?;
                for item in items {
                    let mut inner = Vec::new();
                    encode(props, item, &mut inner, depth + 1)?;
                    put_bytes(out, 2, &inner);
                }
            }
            _ => {
                let mut inner = Vec::new();
                encode(field_message(msg, 1)?, v, &mut inner, depth + 1)?;
                put_bytes(out, 1, &inner);
            }
        },
        Special::SchemaOrBool => match v {
            Value::Bool(b) => put_varint_field(out, 1, u64::from(*b)),
            _ => {
                put_varint_field(out, 1, 1);
                let mut inner = Vec::new();
                encode(field_message(msg, 2)?, v, &mut inner, depth + 1)?;
                put_bytes(out, 2, &inner);
            }
        },
        Special::SchemaOrStringArray => match v {
            Value::Array(items) => {
                for item in items {
                    let s = item.as_str().ok_or_else(|| invalid("expected an array of strings"))?;
                    put_bytes(out, 2, s.as_bytes());
                }
            }
            _ => {
                let mut inner = Vec::new();
                encode(field_message(msg, 1)?, v, &mut inner, depth + 1)?;
                put_bytes(out, 1, &inner);
            }
        },
    }
    Ok(())
}
