//! Seeded input mutation for the parsers' fuzz tests (etcd's snapshot readers, the API
//! server's decoders and selectors). Stable Rust has no libFuzzer here, so each crate's
//! `tests/fuzz.rs` mutates valid seed inputs with [`Mutator`] and checks, through [`run`],
//! that the parser returns — an error is fine — instead of panicking or hanging.
//!
//! By default a run is a fixed number of iterations from a fixed seed, so the test suite
//! stays deterministic; `FUZZ_SECONDS=<n>` (what `hack/fuzz.sh` sets) makes it a timed
//! run from a random seed (or `FUZZ_SEED`), printed so a failure can be replayed.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Byte values that tend to reach edge cases (lengths, signs, UTF-8 boundaries).
const INTERESTING: [u8; 8] = [0x00, 0x01, 0x7f, 0x80, 0xfe, 0xff, b'"', b'\\'];

pub struct Mutator {
    rng: StdRng,
}

impl Mutator {
    pub fn new(seed: u64) -> Self {
        Self { rng: StdRng::seed_from_u64(seed) }
    }

    /// `input` with one to four random edits: bit flips, byte overwrites, insertions,
    /// deletions, duplicated runs, truncation.
    pub fn mutate(&mut self, input: &[u8]) -> Vec<u8> {
        let mut out = input.to_vec();
        for _ in 0..self.rng.random_range(1..=4) {
            let len = out.len();
            match self.rng.random_range(0..6) {
                0 if len > 0 => {
                    let i = self.rng.random_range(0..len);
                    out[i] ^= 1 << self.rng.random_range(0..8);
                }
                1 if len > 0 => {
                    let i = self.rng.random_range(0..len);
                    out[i] = if self.rng.random_bool(0.5) {
                        INTERESTING[self.rng.random_range(0..INTERESTING.len())]
                    } else {
                        self.rng.random()
                    };
                }
                2 => {
                    let i = self.rng.random_range(0..=len);
                    let n = self.rng.random_range(1..=8);
                    let bytes: Vec<u8> = (0..n).map(|_| self.rng.random()).collect();
                    out.splice(i..i, bytes);
                }
                3 if len > 0 => {
                    let i = self.rng.random_range(0..len);
                    let n = self.rng.random_range(1..=(len - i).min(32));
                    out.drain(i..i + n);
                }
                4 if len > 0 => {
                    let i = self.rng.random_range(0..len);
                    let n = self.rng.random_range(1..=(len - i).min(32));
                    let run = out[i..i + n].to_vec();
                    let at = self.rng.random_range(0..=out.len());
                    out.splice(at..at, run);
                }
                5 if len > 0 => out.truncate(self.rng.random_range(0..len)),
                _ => out.push(self.rng.random()),
            }
        }
        out
    }
}

/// Feeds `target` mutations of `seeds` (and the seeds themselves) until the budget is
/// spent: `iterations` by default, `FUZZ_SECONDS` when set. Panics, naming the target,
/// the seed and the input in hex, when `target` panics.
pub fn run(name: &str, seeds: &[Vec<u8>], iterations: usize, target: impl Fn(&[u8])) {
    assert!(!seeds.is_empty(), "{name}: no seed inputs");
    let timed = std::env::var("FUZZ_SECONDS").ok().and_then(|s| s.parse::<u64>().ok());
    let seed = std::env::var("FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
        .unwrap_or_else(|| if timed.is_some() { rand::random() } else { 1 });
    let deadline = timed.map(|s| Instant::now() + Duration::from_secs(s));
    let mut m = Mutator::new(seed);
    let mut done = 0usize;
    loop {
        let input = if done < seeds.len() {
            seeds[done].clone()
        } else {
            let base = &seeds[m.rng.random_range(0..seeds.len())];
            m.mutate(base)
        };
        if catch_unwind(AssertUnwindSafe(|| target(&input))).is_err() {
            let file =
                std::env::temp_dir().join(format!("fuzz-{}-{seed}-{done}.bin", name.replace(':', "_")));
            let saved = match std::fs::write(&file, &input) {
                Ok(()) => format!("saved in {}", file.display()),
                Err(e) => format!("not saved: {e}"),
            };
            let head = &input[..input.len().min(128)];
            panic!(
                "fuzz target {name} panicked (FUZZ_SEED={seed}, iteration {done}) on a {}-byte input ({saved}) starting {}",
                input.len(),
                hex(head)
            );
        }
        done += 1;
        let spent = match deadline {
            Some(d) => Instant::now() >= d,
            None => done >= iterations,
        };
        if spent {
            break;
        }
    }
    eprintln!("fuzz target {name}: {done} inputs, FUZZ_SEED={seed}");
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mutations_are_reproducible_and_change_the_input() {
        let seed = b"{\"kind\":\"Pod\"}".to_vec();
        let (mut a, mut b) = (Mutator::new(7), Mutator::new(7));
        let xs: Vec<Vec<u8>> = (0..50).map(|_| a.mutate(&seed)).collect();
        let ys: Vec<Vec<u8>> = (0..50).map(|_| b.mutate(&seed)).collect();
        assert_eq!(xs, ys);
        assert!(xs.iter().filter(|x| **x != seed).count() > 40);
    }

    #[test]
    #[should_panic(expected = "fuzz target boom panicked")]
    fn a_panicking_target_is_reported() {
        run("boom", &[b"x".to_vec()], 10, |input| assert!(input.len() > 5));
    }
}

/// Structure-aware mutation of JSON documents for targets whose inputs must parse to get
/// anywhere (byte mutations of JSON text mostly stop at the decoder): the fuzz input is
/// read as a stream of choices that pick one of `seeds` and edit it, so every input is a
/// valid document that differs from a valid object in a few places.
pub fn json_from_choices(seeds: &[serde_json::Value], choices: &[u8]) -> serde_json::Value {
    let mut c = Choices(choices);
    let mut doc = seeds[c.below(seeds.len())].clone();
    for _ in 0..1 + c.below(4) {
        edit(&mut doc, &mut c, 0);
    }
    doc
}

/// Reads choices off the input; zeros once it is used up.
struct Choices<'a>(&'a [u8]);

impl Choices<'_> {
    fn byte(&mut self) -> u8 {
        match self.0.split_first() {
            Some((b, rest)) => {
                self.0 = rest;
                *b
            }
            None => 0,
        }
    }

    fn below(&mut self, n: usize) -> usize {
        if n == 0 { 0 } else { usize::from(self.byte()) % n }
    }
}

/// Values that reach the edges of validation: empty, huge, negative, wrong type, special
/// characters, and words the API uses.
fn interesting_value(c: &mut Choices<'_>) -> serde_json::Value {
    use serde_json::json;
    match c.below(24) {
        0 => json!(null),
        1 => json!(true),
        2 => json!(false),
        3 => json!(0),
        4 => json!(-1),
        5 => json!(i64::MAX),
        6 => json!(i64::MIN),
        7 => json!(u64::MAX),
        8 => json!(1.5e300),
        9 => json!(""),
        10 => json!("a".repeat(300)),
        11 => json!("-1"),
        12 => json!("100m"),
        13 => json!("1e3Gi"),
        14 => json!("*"),
        15 => json!("../x/./y"),
        16 => json!("\u{0}\u{ffff}ÿ"),
        17 => json!("a=b,c!=d"),
        18 => json!("1970-01-01T00:00:00Z"),
        19 => json!({}),
        20 => json!([]),
        21 => json!([{}]),
        22 => json!({"": null}),
        _ => json!(c.byte()),
    }
}

/// One edit somewhere in `v`: descend a few levels by choice, then replace, delete,
/// duplicate or add.
fn edit(v: &mut serde_json::Value, c: &mut Choices<'_>, depth: usize) {
    use serde_json::Value;
    let descend = depth < 12 && c.below(4) != 0;
    match v {
        Value::Object(map) if descend && !map.is_empty() => {
            let key = map.keys().nth(c.below(map.len())).cloned().unwrap_or_default();
            match c.below(8) {
                0 => {
                    map.remove(&key);
                }
                1 => {
                    let name =
                        ["name", "namespace", "labels", "kind", "x", "$patch", "spec", "status"][c.below(8)];
                    map.insert(name.to_string(), interesting_value(c));
                }
                _ => {
                    if let Some(child) = map.get_mut(&key) {
                        edit(child, c, depth + 1);
                    }
                }
            }
        }
        Value::Array(items) if descend && !items.is_empty() => {
            let i = c.below(items.len());
            match c.below(8) {
                0 => {
                    items.remove(i);
                }
                1 => {
                    let copy = items[i].clone();
                    items.push(copy);
                }
                _ => edit(&mut items[i], c, depth + 1),
            }
        }
        _ => *v = interesting_value(c),
    }
}
