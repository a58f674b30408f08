//! Point-in-time snapshots of the state machine, as `Maintenance.Snapshot` streams them.
//!
//! Layout: a magic line, then records `[column family id: u8][key len: u32][value len:
//! u32][key][value]` (big-endian lengths), an end record (id 0xff), zero padding to a
//! multiple of 512 bytes, and the sha256 of everything before it. The padding and trailer
//! follow etcd's convention, which `etcdctl snapshot restore` uses to find and check the
//! hash (`size % 512 == 32`). The contents are this server's own format, not bbolt.

use std::io::{self, Read};

use rocksdb::{IteratorMode, ReadOptions};
use sha2::{Digest, Sha256};

use crate::backend::{Backend, CF_KEY, CF_LEASE, CF_META};

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
        return Err(bad("not a snapshot of this server"));
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
