//! Repeated keys in a YAML document (an applied configuration): upstream's YAML decoding
//! reports them as `line 11: key "foo" already set in map`, which strict field validation
//! refuses and the default one returns as a warning. The decoded value keeps the last.

use std::collections::HashSet;
use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};

/// The first repeated key of `body` with its line, in upstream's words; empty when none
/// (or when the document does not parse, which the caller reports).
pub fn find(body: &[u8]) -> Vec<String> {
    let Ok(text) = std::str::from_utf8(body) else { return Vec::new() };
    let Some(doc) = serde_yaml::Deserializer::from_str(text).next() else { return Vec::new() };
    match Check.deserialize(doc) {
        Ok(()) => Vec::new(),
        Err(e) => {
            let message = e.to_string();
            let Some(start) = message.find(DUPLICATE_MARK) else { return Vec::new() };
            let key = message[start + DUPLICATE_MARK.len()..].split(DUPLICATE_END).next().unwrap_or_default();
            // The error is placed at the start of the map that repeats the key.
            let map_line = e.location().map_or(0, |l| l.line());
            let line = repeated_line(text, map_line, key).unwrap_or(map_line);
            vec![format!("line {line}: key \"{key}\" already set in map")]
        }
    }
}

/// The line (1-based) of the second `key:` of the block map starting at `map_line`: the
/// lines at the map's indentation, until one is indented less.
fn repeated_line(text: &str, map_line: usize, key: &str) -> Option<usize> {
    let lines: Vec<&str> = text.lines().collect();
    let start = map_line.checked_sub(1)?;
    let first = lines.get(start)?;
    // A map that is a list item starts after its `- `.
    let indent = first.len() - first.trim_start_matches([' ', '-']).len();
    let mut seen = 0;
    for (i, line) in lines.iter().enumerate().skip(start) {
        let body = line.trim_start_matches([' ', '-']);
        let ind = line.len() - body.len();
        if body.is_empty() || body.starts_with('#') {
            continue;
        }
        if i > start && ind < indent {
            break;
        }
        let starts = body.strip_prefix(key).or_else(|| body.strip_prefix(&format!("\"{key}\"")));
        if ind == indent && starts.is_some_and(|rest| rest.trim_start().starts_with(':')) {
            seen += 1;
            if seen == 2 {
                return Some(i + 1);
            }
        }
    }
    None
}

const DUPLICATE_MARK: &str = "duplicate key <";
const DUPLICATE_END: &str = ">";

/// Walks a document, failing at the first map that repeats a key (the error then carries
/// the position of that key).
struct Check;

impl<'de> DeserializeSeed<'de> for Check {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(CheckVisitor)
    }
}

struct CheckVisitor;

impl<'de> Visitor<'de> for CheckVisitor {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any YAML value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }
    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }
    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }
    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }
    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        Ok(())
    }
    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }
    fn visit_none<E>(self) -> Result<(), E> {
        Ok(())
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(CheckVisitor)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while seq.next_element_seed(Check)?.is_some() {}
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let mut seen = HashSet::new();
        while let Some(key) = map.next_key::<serde_yaml::Value>()? {
            let name = match &key {
                serde_yaml::Value::String(s) => s.clone(),
                other => serde_yaml::to_string(other).unwrap_or_default().trim().to_string(),
            };
            if !seen.insert(name.clone()) {
                return Err(de::Error::custom(format!("{DUPLICATE_MARK}{name}{DUPLICATE_END}")));
            }
            map.next_value_seed(Check)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn reports_the_line_of_a_repeated_key() {
        let doc = "\napiVersion: v1\nkind: X\nmetadata:\n  name: a\nspec:\n  foo: foo1\n  foo: foo2\n";
        assert_eq!(super::find(doc.as_bytes()), vec!["line 8: key \"foo\" already set in map".to_string()]);
        assert!(super::find(b"a: 1\nb: {c: 2}\n").is_empty());
    }
}
