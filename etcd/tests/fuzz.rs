//! Fuzz tests of what etcd reads from outside: snapshot files (`etcd snapshot restore`
//! takes any file, ours or upstream's bbolt one) and the pieces of their bbolt layout.
//! Mutated valid inputs must be refused with an error, never a panic or a hang. Bounded
//! and deterministic here; `hack/fuzz.sh` runs them for longer from random seeds.

use std::collections::BTreeMap;

use component_base::fuzz;
use etcd::backend::{Backend, CF_KEY, CF_LEASE, CF_META};
use etcd::mvcc::revision::Revision;
use etcd::{bbolt, snapshot};
use prost::Message;
use proto::mvccpb::KeyValue;
use rocksdb::WriteBatch;

const ITERATIONS: usize = 3000;

/// A small state machine: a few revisions, a lease, the meta keys, a user.
fn backend() -> (tempfile::TempDir, Backend) {
    let dir = tempfile::tempdir().unwrap();
    let backend = Backend::open(dir.path()).unwrap();
    let mut batch = WriteBatch::default();
    for i in 1..=5i64 {
        let kv = KeyValue {
            key: format!("/k/{i}").into_bytes(),
            value: vec![b'v'; i as usize * 10],
            create_revision: i,
            mod_revision: i,
            version: 1,
            lease: 0,
        };
        batch.put_cf(backend.cf(CF_KEY), Revision::new(i, 0).to_bytes(), kv.encode_to_vec());
    }
    batch.put_cf(backend.cf(CF_LEASE), 7u64.to_be_bytes(), 60u64.to_be_bytes());
    batch.put_cf(backend.cf(CF_META), b"currentRev", 5u64.to_be_bytes());
    batch.put_cf(backend.cf(CF_META), b"auth/enabled", [1]);
    batch.put_cf(backend.cf(CF_META), b"authUsers/root", b"\x0a\x04root".to_vec());
    backend.write(batch, true).unwrap();
    (dir, backend)
}

fn collect(write: impl FnOnce(&mut dyn FnMut(u64, &[u8]) -> std::io::Result<()>)) -> Vec<u8> {
    let mut out = Vec::new();
    write(&mut |_, chunk| {
        out.extend_from_slice(chunk);
        Ok(())
    });
    out
}

#[test]
fn snapshot_readers_refuse_damaged_files() {
    let (_dir, b) = backend();
    let ours = collect(|sink| {
        snapshot::write(&b, sink, 4096).unwrap();
    });
    let etcds = collect(|sink| {
        snapshot::write_bbolt(&b, sink, 4096).unwrap();
    });
    assert!(snapshot::read(&ours[..]).is_ok() && snapshot::read(&etcds[..]).is_ok(), "seeds are valid");
    fuzz::run("snapshot::read", &[ours, etcds], ITERATIONS, |input| {
        let _ = snapshot::read(input);
    });
}

#[test]
fn bbolt_reader_refuses_damaged_pages() {
    let mut buckets: bbolt::Buckets = BTreeMap::new();
    for (name, n) in [(&b"key"[..], 40), (b"meta", 3), (b"authUsers", 2)] {
        let pairs = (0..n).map(|i| (format!("k{i:04}").into_bytes(), vec![b'x'; 1 + i * 7])).collect();
        buckets.insert(name.to_vec(), pairs);
    }
    let file = bbolt::write(&buckets);
    assert_eq!(bbolt::read(&file).unwrap(), buckets, "seed round-trips");
    fuzz::run("bbolt::read", &[file], ITERATIONS, |input| {
        let _ = bbolt::read(input);
    });
}
