//! Point-in-time snapshots of the state machine, in two layouts.
//!
//! What `Maintenance.Snapshot` streams (`etcdctl snapshot save`) is etcd's own: a bbolt
//! database with etcd's buckets ([`write_bbolt`]) followed by its sha256, so that
//! `etcdctl snapshot status` and `etcdctl snapshot restore` work on it, and a snapshot of
//! upstream etcd can be restored into ours ([`read`] takes both layouts).
//!
//! Between members (raft snapshots) the layout is this server's own: a magic line, then records `[column family id: u8][key len: u32][value len:
//! u32][key][value]` (big-endian lengths), an end record (id 0xff), zero padding to a
//! multiple of 512 bytes, and the sha256 of everything before it. The padding and trailer
//! follow etcd's convention, which `etcdctl snapshot restore` uses to find and check the
//! hash (`size % 512 == 32`). The contents are this server's own format, not bbolt.

use std::io::{self, Read};

use rocksdb::{IteratorMode, ReadOptions};
use sha2::{Digest, Sha256};

use crate::auth::{META_AUTH_ENABLED, META_AUTH_REVISION, META_ROLE_PREFIX, META_USER_PREFIX};
use crate::backend::{Backend, CF_KEY, CF_LEASE, CF_META};
use crate::bbolt;
use crate::mvcc::kvstore::{META_CURRENT_REV, META_FINISHED_COMPACT, META_SCHEDULED_COMPACT};
use crate::mvcc::revision::Revision;
use crate::node::META_CONSISTENT_INDEX;

pub const MAGIC: &[u8; 16] = b"k8s-rs etcd snp1";
const END: u8 = 0xff;
const PAD: usize = 512;

/// The column families a snapshot carries, with their record ids.
const FAMILIES: [(u8, &str); 3] = [(1, CF_KEY), (2, CF_LEASE), (3, CF_META)];

fn record_header(cf: u8, key: &[u8], value: &[u8]) -> [u8; 9] {
    let mut h = [0u8; 9];
    h[0] = cf;
    h[1..5].copy_from_slice(&(key.len() as u32).to_be_bytes());
    h[5..9].copy_from_slice(&(value.len() as u32).to_be_bytes());
    h
}

/// Receives (column family id, key, value) for every record.
type RecordVisitor<'a> = dyn FnMut(u8, &[u8], &[u8]) -> io::Result<()> + 'a;

/// Writes a consistent snapshot of `backend` to `sink` in chunks; returns the total size.
/// The sink is told the total size up front (`sink(total, chunk)`), so the stream can say
/// how many bytes remain; the data is read twice from one rocksdb snapshot for that.
pub fn write(
    backend: &Backend,
    sink: impl FnMut(u64, &[u8]) -> io::Result<()>,
    chunk: usize,
) -> io::Result<u64> {
    let snap = backend.db().snapshot();
    write_from(backend, &snap, sink, chunk)
}

/// [`write`], from a rocksdb snapshot the caller took (so it can be tied to a raft index).
pub fn write_from(
    backend: &Backend,
    snap: &rocksdb::SnapshotWithThreadMode<'_, rocksdb::DB>,
    mut sink: impl FnMut(u64, &[u8]) -> io::Result<()>,
    chunk: usize,
) -> io::Result<u64> {
    let db = backend.db();
    let iterate = |f: &mut RecordVisitor<'_>| -> io::Result<()> {
        for (id, cf) in FAMILIES {
            let mut ro = ReadOptions::default();
            ro.set_snapshot(snap);
            ro.fill_cache(false);
            for item in db.iterator_cf_opt(backend.cf(cf), ro, IteratorMode::Start) {
                let (k, v) = item.map_err(io::Error::other)?;
                f(id, &k, &v)?;
            }
        }
        Ok(())
    };

    let mut body = MAGIC.len() as u64 + 1;
    iterate(&mut |_, k, v| {
        body += 9 + k.len() as u64 + v.len() as u64;
        Ok(())
    })?;
    let padded = body.div_ceil(PAD as u64) * PAD as u64;
    let total = padded + 32;

    let mut hasher = Sha256::new();
    let mut buf: Vec<u8> = Vec::with_capacity(chunk * 2);
    let mut emit = |bytes: &[u8], buf: &mut Vec<u8>, hasher: &mut Sha256| -> io::Result<()> {
        hasher.update(bytes);
        buf.extend_from_slice(bytes);
        while buf.len() >= chunk {
            sink(total, &buf[..chunk])?;
            buf.drain(..chunk);
        }
        Ok(())
    };
    emit(MAGIC, &mut buf, &mut hasher)?;
    let mut written = MAGIC.len() as u64;
    iterate(&mut |id, k, v| {
        emit(&record_header(id, k, v), &mut buf, &mut hasher)?;
        emit(k, &mut buf, &mut hasher)?;
        emit(v, &mut buf, &mut hasher)?;
        written += 9 + k.len() as u64 + v.len() as u64;
        Ok(())
    })?;
    if written + 1 != body {
        // The snapshot pins the data; a different size means a bug, not a race.
        return Err(io::Error::other("snapshot size changed between passes"));
    }
    emit(&[END], &mut buf, &mut hasher)?;
    let zeros = vec![0u8; (padded - body) as usize];
    emit(&zeros, &mut buf, &mut hasher)?;
    let digest = hasher.finalize();
    buf.extend_from_slice(&digest);
    for piece in buf.chunks(chunk) {
        sink(total, piece)?;
    }
    Ok(total)
}

/// etcd's buckets: every snapshot has them all (`etcdctl snapshot restore` empties
/// "members" and "members_removed" and fails when they are missing).
const ETCD_BUCKETS: [&[u8]; 10] = [
    b"alarm",
    b"auth",
    b"authRoles",
    b"authUsers",
    b"cluster",
    b"key",
    b"lease",
    b"members",
    b"members_removed",
    b"meta",
];

/// Meta keys whose value etcd stores as a 17-byte revision and we as a u64.
const REVISION_META: [&[u8]; 2] = [META_SCHEDULED_COMPACT, META_FINISHED_COMPACT];

/// `leasepb.Lease{ID: 1, TTL: 2}`.
fn encode_lease(id: i64, ttl: i64) -> Vec<u8> {
    let mut out = Vec::with_capacity(22);
    for (tag, v) in [(0x08u8, id), (0x10, ttl)] {
        out.push(tag);
        let mut v = v as u64;
        while v >= 0x80 {
            out.push((v as u8) | 0x80);
            v >>= 7;
        }
        out.push(v as u8);
    }
    out
}

/// The ID and TTL of a `leasepb.Lease` (other fields skipped).
fn decode_lease(mut b: &[u8]) -> Option<(i64, i64)> {
    let varint = |b: &mut &[u8]| -> Option<u64> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let (&byte, rest) = b.split_first()?;
            *b = rest;
            v |= ((byte & 0x7f) as u64) << shift;
            if byte < 0x80 {
                return Some(v);
            }
        }
        None
    };
    let (mut id, mut ttl) = (0i64, 0i64);
    while !b.is_empty() {
        let tag = varint(&mut b)?;
        match (tag >> 3, tag & 7) {
            (1, 0) => id = varint(&mut b)? as i64,
            (2, 0) => ttl = varint(&mut b)? as i64,
            (_, 0) => {
                varint(&mut b)?;
            }
            (_, 2) => {
                let n = varint(&mut b)? as usize;
                b = b.get(n..)?;
            }
            (_, 1) => b = b.get(8..)?,
            (_, 5) => b = b.get(4..)?,
            _ => return None,
        }
    }
    Some((id, ttl))
}

fn u64_value(v: &[u8]) -> Option<u64> {
    Some(u64::from_be_bytes(v.try_into().ok()?))
}

/// The state machine in a rocksdb snapshot, as etcd's buckets: revisions and leases as
/// etcd encodes them, the applied index and compaction progress in "meta" (and our
/// `currentRev`, which etcd ignores). Membership, alarms and ids stay behind: they belong
/// to the cluster, and a restore replaces them.
fn etcd_buckets(
    backend: &Backend,
    snap: &rocksdb::SnapshotWithThreadMode<'_, rocksdb::DB>,
) -> io::Result<bbolt::Buckets> {
    let mut out: bbolt::Buckets = ETCD_BUCKETS.iter().map(|b| (b.to_vec(), Default::default())).collect();
    let db = backend.db();
    for cf in [CF_KEY, CF_LEASE, CF_META] {
        let mut ro = ReadOptions::default();
        ro.set_snapshot(snap);
        ro.fill_cache(false);
        for item in db.iterator_cf_opt(backend.cf(cf), ro, IteratorMode::Start) {
            let (k, v) = item.map_err(io::Error::other)?;
            let bad =
                || io::Error::new(io::ErrorKind::InvalidData, format!("{cf} record {k:?} is malformed"));
            let (bucket, key, value): (&[u8], Vec<u8>, Vec<u8>) = match cf {
                CF_KEY => (b"key", k.to_vec(), v.to_vec()),
                CF_LEASE => {
                    let (id, ttl) = (u64_value(&k).ok_or_else(bad)?, u64_value(&v).ok_or_else(bad)?);
                    (b"lease", k.to_vec(), encode_lease(id as i64, ttl as i64))
                }
                _ if REVISION_META.contains(&&*k) => {
                    let rev = u64_value(&v).ok_or_else(bad)? as i64;
                    (b"meta", k.to_vec(), Revision::new(rev, 0).to_bytes().to_vec())
                }
                _ if [META_CONSISTENT_INDEX, META_CURRENT_REV].contains(&&*k) => {
                    (b"meta", k.to_vec(), v.to_vec())
                }
                _ => match auth_bucket_key(&k) {
                    Some((bucket, key)) => (bucket, key, v.to_vec()),
                    None => continue,
                },
            };
            out.entry(bucket.to_vec()).or_default().insert(key, value);
        }
    }
    Ok(out)
}

/// etcd's auth buckets hold what our meta keys do, byte for byte: "auth" the enabled
/// flag (`[1]`/`[0]`) and the revision (8 bytes big-endian), "authUsers" and
/// "authRoles" the `authpb.User`/`authpb.Role` messages by name.
const AUTH_KEYS: [(&[u8], &[u8], &[u8]); 2] =
    [(META_AUTH_ENABLED, b"auth", b"authEnabled"), (META_AUTH_REVISION, b"auth", b"authRevision")];
const AUTH_PREFIXES: [(&[u8], &[u8]); 2] =
    [(META_USER_PREFIX, b"authUsers"), (META_ROLE_PREFIX, b"authRoles")];

fn auth_bucket_key(meta_key: &[u8]) -> Option<(&'static [u8], Vec<u8>)> {
    if let Some((_, bucket, key)) = AUTH_KEYS.iter().find(|(m, _, _)| *m == meta_key) {
        return Some((bucket, key.to_vec()));
    }
    AUTH_PREFIXES
        .iter()
        .find_map(|(prefix, bucket)| Some((*bucket, meta_key.strip_prefix(*prefix)?.to_vec())))
}

fn auth_records(buckets: &bbolt::Buckets, out: &mut Vec<Record>) {
    let empty = Default::default();
    for (meta_key, bucket, key) in AUTH_KEYS {
        if let Some(v) = buckets.get(bucket).and_then(|b| b.get(key)) {
            out.push(Record { cf: CF_META, key: meta_key.to_vec(), value: v.clone() });
        }
    }
    for (prefix, bucket) in AUTH_PREFIXES {
        for (k, v) in buckets.get(bucket).unwrap_or(&empty) {
            out.push(Record { cf: CF_META, key: [prefix, k.as_slice()].concat(), value: v.clone() });
        }
    }
}

/// A consistent snapshot of `backend` in etcd's layout to `sink` in chunks, as etcd
/// streams it: the bbolt database, each chunk with the bytes of the database left after it
/// (`sink(remaining, chunk)`), then its sha256 alone with 0 left. Returns the total size.
/// The database is built in memory.
pub fn write_bbolt(
    backend: &Backend,
    mut sink: impl FnMut(u64, &[u8]) -> io::Result<()>,
    chunk: usize,
) -> io::Result<u64> {
    let snap = backend.db().snapshot();
    let file = bbolt::write(&etcd_buckets(backend, &snap)?);
    drop(snap);
    let mut left = file.len() as u64;
    for piece in file.chunks(chunk) {
        left -= piece.len() as u64;
        sink(left, piece)?;
    }
    sink(0, &Sha256::digest(&file))?;
    Ok(file.len() as u64 + 32)
}

/// The records an etcd-layout snapshot (ours or upstream's) stands for.
fn records_from_etcd(buckets: &bbolt::Buckets) -> io::Result<Vec<Record>> {
    let bad = |m: String| io::Error::new(io::ErrorKind::InvalidData, format!("snapshot: {m}"));
    let mut out = Vec::new();
    let empty = Default::default();
    let keys = buckets.get(&b"key"[..]).unwrap_or(&empty);
    let mut current = 0i64;
    for (k, v) in keys {
        let (rev, _) = Revision::from_key(k).ok_or_else(|| bad(format!("revision key {k:?}")))?;
        current = current.max(rev.main);
        out.push(Record { cf: CF_KEY, key: k.clone(), value: v.clone() });
    }
    for (k, v) in buckets.get(&b"lease"[..]).unwrap_or(&empty) {
        let (id, ttl) = decode_lease(v).ok_or_else(|| bad(format!("lease {k:?}")))?;
        out.push(Record { cf: CF_LEASE, key: id.to_be_bytes().to_vec(), value: ttl.to_be_bytes().to_vec() });
    }
    let meta = buckets.get(&b"meta"[..]).unwrap_or(&empty);
    for key in REVISION_META {
        if let Some(v) = meta.get(key) {
            let (rev, _) =
                Revision::from_key(v.get(..17).unwrap_or(v)).ok_or_else(|| bad(format!("meta {v:?}")))?;
            current = current.max(rev.main);
            out.push(Record {
                cf: CF_META,
                key: key.to_vec(),
                value: (rev.main as u64).to_be_bytes().to_vec(),
            });
        }
    }
    auth_records(buckets, &mut out);
    // Upstream etcd derives the current revision from the history; ours records it (a
    // snapshot of ours carries it, one of upstream's does not).
    if let Some(ours) = meta.get(META_CURRENT_REV).and_then(|v| u64_value(v)) {
        current = current.max(ours as i64);
    }
    out.push(Record {
        cf: CF_META,
        key: META_CURRENT_REV.to_vec(),
        value: (current as u64).to_be_bytes().to_vec(),
    });
    Ok(out)
}

/// One record of a snapshot.
#[derive(Debug, PartialEq, Eq)]
pub struct Record {
    pub cf: &'static str,
    pub key: Vec<u8>,
    pub value: Vec<u8>,
}

/// Reads and verifies a whole snapshot: the trailer must be the sha256 of the rest.
pub fn read(mut r: impl Read) -> io::Result<Vec<Record>> {
    let mut data = Vec::new();
    r.read_to_end(&mut data)?;
    let bad = |m: &str| io::Error::new(io::ErrorKind::InvalidData, format!("snapshot: {m}"));
    if data.len() < MAGIC.len() + 32 || data.len() % PAD != 32 {
        return Err(bad("size is not a multiple of 512 plus a sha256 trailer"));
    }
    let (body, trailer) = data.split_at(data.len() - 32);
    if Sha256::digest(body).as_slice() != trailer {
        return Err(bad("sha256 mismatch"));
    }
    if &body[..MAGIC.len()] != MAGIC {
        let buckets = bbolt::read(body).map_err(|e| bad(&e.to_string()))?;
        return records_from_etcd(&buckets);
    }
    let mut out = Vec::new();
    let mut p = MAGIC.len();
    loop {
        let id = *body.get(p).ok_or_else(|| bad("truncated"))?;
        if id == END {
            return Ok(out);
        }
        let h = body.get(p..p + 9).ok_or_else(|| bad("truncated record"))?;
        let klen = u32::from_be_bytes(h[1..5].try_into().expect("4")) as usize;
        let vlen = u32::from_be_bytes(h[5..9].try_into().expect("4")) as usize;
        let cf = FAMILIES
            .iter()
            .find(|(i, _)| *i == id)
            .map(|(_, n)| *n)
            .ok_or_else(|| bad("unknown column family"))?;
        let k = body.get(p + 9..p + 9 + klen).ok_or_else(|| bad("truncated key"))?;
        let v = body.get(p + 9 + klen..p + 9 + klen + vlen).ok_or_else(|| bad("truncated value"))?;
        out.push(Record { cf, key: k.to_vec(), value: v.to_vec() });
        p += 9 + klen + vlen;
    }
}

/// Reads and verifies a snapshot file.
pub fn read_file(path: &std::path::Path) -> io::Result<Vec<Record>> {
    read(std::io::BufReader::new(std::fs::File::open(path)?))
}

/// Checks a snapshot file's layout and checksum without keeping it in memory.
pub fn verify_file(path: &std::path::Path) -> io::Result<()> {
    let bad = |m: &str| io::Error::new(io::ErrorKind::InvalidData, format!("snapshot: {m}"));
    let mut f = std::fs::File::open(path)?;
    let len = f.metadata()?.len();
    if len < (MAGIC.len() + 32) as u64 || len % PAD as u64 != 32 {
        return Err(bad("size is not a multiple of 512 plus a sha256 trailer"));
    }
    let mut hasher = Sha256::new();
    let mut left = len - 32;
    let mut buf = vec![0u8; 256 * 1024];
    let mut first = true;
    while left > 0 {
        let want = buf.len().min(left as usize);
        f.read_exact(&mut buf[..want])?;
        if first && &buf[..MAGIC.len()] != MAGIC {
            return Err(bad("not a snapshot of this server"));
        }
        first = false;
        hasher.update(&buf[..want]);
        left -= want as u64;
    }
    let mut trailer = [0u8; 32];
    f.read_exact(&mut trailer)?;
    if hasher.finalize().as_slice() != trailer {
        return Err(bad("sha256 mismatch"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use rocksdb::WriteBatch;

    #[test]
    fn round_trip_and_etcd_hash_convention() {
        let dir = tempfile::tempdir().unwrap();
        let backend = Backend::open(dir.path()).unwrap();
        let mut b = WriteBatch::default();
        b.put_cf(backend.cf(CF_KEY), b"k1", b"v1");
        b.put_cf(backend.cf(CF_LEASE), b"l", vec![7u8; 3000]);
        backend.write(b, false).unwrap();

        let mut out = Vec::new();
        let mut totals = Vec::new();
        let total = write(
            &backend,
            |t, c| {
                totals.push(t);
                out.extend_from_slice(c);
                Ok(())
            },
            1000,
        )
        .unwrap();
        assert_eq!(total as usize, out.len());
        assert!(totals.iter().all(|t| *t == total));
        assert_eq!(out.len() % 512, 32);
        let recs = read(out.as_slice()).unwrap();
        assert_eq!(recs[0], Record { cf: CF_KEY, key: b"k1".to_vec(), value: b"v1".to_vec() });
        assert_eq!(recs[1].value.len(), 3000);

        out[40] ^= 1;
        assert!(read(out.as_slice()).is_err(), "a flipped bit is caught");
    }
}
