//! The bbolt file format (go.etcd.io/bbolt, etcd's backend), written and read here so that
//! `Maintenance.Snapshot` streams what every etcd tool expects of a snapshot:
//! `etcdctl snapshot status` and `etcdctl snapshot restore` open it with bbolt.
//!
//! Only what a snapshot needs: a database with top-level buckets of sorted key/value pairs
//! written once (no free pages, no nested buckets), and a reader for such files and for
//! real etcd's (nested and inline buckets included, so a snapshot from upstream etcd can be
//! restored into ours).
//!
//! Layout, all integers little-endian: pages of [`PAGE_SIZE`] bytes, each starting with a
//! 16-byte header (`id u64, flags u16, count u16, overflow u32`; a node larger than a page
//! runs on over `overflow` more pages). Pages 0 and 1 are the two meta pages (bbolt uses the
//! valid one with the higher transaction id), page 2 the (empty) freelist, then the
//! B+tree nodes: leaves hold `count` 16-byte elements (`flags u32, pos u32, ksize u32,
//! vsize u32`, `pos` counted from the element itself) and then the keys and values; branches
//! hold elements `pos u32, ksize u32, pgid u64` and then the keys. A bucket is a leaf value
//! with flag 1 holding `root pgid u64, sequence u64`, and an inline page after them when
//! the root is 0.

use std::collections::BTreeMap;

pub const PAGE_SIZE: usize = 4096;
const MAGIC: u32 = 0xED0C_DAED;
const VERSION: u32 = 2;
const HEADER: usize = 16;
const ELEMENT: usize = 16;
const BRANCH_PAGE: u16 = 0x01;
const LEAF_PAGE: u16 = 0x02;
const META_PAGE: u16 = 0x04;
const FREELIST_PAGE: u16 = 0x10;
const BUCKET_LEAF: u32 = 0x01;
/// Bytes of the meta fields the checksum covers (everything before it).
const META_SUMMED: usize = 56;
/// How deep nested buckets and branch levels may go in a file being read.
const MAX_DEPTH: usize = 64;

/// Buckets by name, each a sorted map of its pairs.
pub type Buckets = BTreeMap<Vec<u8>, BTreeMap<Vec<u8>, Vec<u8>>>;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("bbolt: {0}")]
pub struct FormatError(String);

fn bad(m: impl Into<String>) -> FormatError {
    FormatError(m.into())
}

fn fnv64a(data: &[u8]) -> u64 {
    data.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ *b as u64).wrapping_mul(0x0000_0100_0000_01b3))
}

/// Writes a database holding `buckets`, one B+tree per bucket under the root bucket.
pub fn write(buckets: &Buckets) -> Vec<u8> {
    let mut w = Writer { pages: vec![0u8; 3 * PAGE_SIZE] };
    let mut root_entries = Vec::with_capacity(buckets.len());
    for (name, pairs) in buckets {
        let root = w.tree(pairs.iter().map(|(k, v)| (k.as_slice(), v.as_slice(), 0)).collect());
        let mut header = Vec::with_capacity(16);
        header.extend_from_slice(&root.to_le_bytes());
        header.extend_from_slice(&0u64.to_le_bytes());
        root_entries.push((name.clone(), header));
    }
    let root = w.tree(root_entries.iter().map(|(k, v)| (k.as_slice(), v.as_slice(), BUCKET_LEAF)).collect());
    let high_water = (w.pages.len() / PAGE_SIZE) as u64;
    // The freelist: nothing is free in a file written once.
    page_header(&mut w.pages[2 * PAGE_SIZE..], 2, FREELIST_PAGE, 0, 0);
    for (id, txid) in [(0u64, 1u64), (1, 2)] {
        let p = &mut w.pages[id as usize * PAGE_SIZE..(id as usize + 1) * PAGE_SIZE];
        page_header(p, id, META_PAGE, 0, 0);
        let m = &mut p[HEADER..];
        m[0..4].copy_from_slice(&MAGIC.to_le_bytes());
        m[4..8].copy_from_slice(&VERSION.to_le_bytes());
        m[8..12].copy_from_slice(&(PAGE_SIZE as u32).to_le_bytes());
        m[12..16].copy_from_slice(&0u32.to_le_bytes());
        m[16..24].copy_from_slice(&root.to_le_bytes());
        m[24..32].copy_from_slice(&0u64.to_le_bytes());
        m[32..40].copy_from_slice(&2u64.to_le_bytes());
        m[40..48].copy_from_slice(&high_water.to_le_bytes());
        m[48..56].copy_from_slice(&txid.to_le_bytes());
        let sum = fnv64a(&m[..META_SUMMED]);
        m[56..64].copy_from_slice(&sum.to_le_bytes());
    }
    w.pages
}

fn page_header(p: &mut [u8], id: u64, flags: u16, count: u16, overflow: u32) {
    p[0..8].copy_from_slice(&id.to_le_bytes());
    p[8..10].copy_from_slice(&flags.to_le_bytes());
    p[10..12].copy_from_slice(&count.to_le_bytes());
    p[12..16].copy_from_slice(&overflow.to_le_bytes());
}

struct Writer {
    pages: Vec<u8>,
}

impl Writer {
    /// Writes one node (a leaf of `(key, value, flags)` or a branch of `(key, child)`) on
    /// as many pages as it needs; returns its page id.
    fn node(&mut self, leaf: Option<&[(&[u8], &[u8], u32)]>, branch: Option<&[(Vec<u8>, u64)]>) -> u64 {
        let (count, data_len) = match (leaf, branch) {
            (Some(l), _) => (l.len(), l.iter().map(|(k, v, _)| k.len() + v.len()).sum::<usize>()),
            (_, Some(b)) => (b.len(), b.iter().map(|(k, _)| k.len()).sum::<usize>()),
            _ => unreachable!("a node is a leaf or a branch"),
        };
        let size = HEADER + count * ELEMENT + data_len;
        let npages = size.div_ceil(PAGE_SIZE).max(1);
        let id = (self.pages.len() / PAGE_SIZE) as u64;
        let start = self.pages.len();
        self.pages.resize(start + npages * PAGE_SIZE, 0);
        let p = &mut self.pages[start..];
        let flags = if leaf.is_some() { LEAF_PAGE } else { BRANCH_PAGE };
        page_header(p, id, flags, count as u16, (npages - 1) as u32);
        let mut data = HEADER + count * ELEMENT;
        for i in 0..count {
            let e = HEADER + i * ELEMENT;
            let pos = (data - e) as u32;
            match (leaf, branch) {
                (Some(l), _) => {
                    let (k, v, f) = l[i];
                    p[e..e + 4].copy_from_slice(&f.to_le_bytes());
                    p[e + 4..e + 8].copy_from_slice(&pos.to_le_bytes());
                    p[e + 8..e + 12].copy_from_slice(&(k.len() as u32).to_le_bytes());
                    p[e + 12..e + 16].copy_from_slice(&(v.len() as u32).to_le_bytes());
                    p[data..data + k.len()].copy_from_slice(k);
                    p[data + k.len()..data + k.len() + v.len()].copy_from_slice(v);
                    data += k.len() + v.len();
                }
                (_, Some(b)) => {
                    let (k, child) = &b[i];
                    p[e..e + 4].copy_from_slice(&pos.to_le_bytes());
                    p[e + 4..e + 8].copy_from_slice(&(k.len() as u32).to_le_bytes());
                    p[e + 8..e + 16].copy_from_slice(&child.to_le_bytes());
                    p[data..data + k.len()].copy_from_slice(k);
                    data += k.len();
                }
                _ => unreachable!(),
            }
        }
        id
    }

    /// A B+tree of sorted pairs, leaves filled to about a page; returns the root's page.
    fn tree(&mut self, pairs: Vec<(&[u8], &[u8], u32)>) -> u64 {
        // Element counts are u16 in the page header.
        const MAX_ELEMENTS: usize = 0xFFFF;
        let mut level: Vec<(Vec<u8>, u64)> = Vec::new();
        let mut start = 0;
        while start < pairs.len() || (pairs.is_empty() && level.is_empty()) {
            let mut end = start;
            let mut size = HEADER;
            while end < pairs.len() && end - start < MAX_ELEMENTS {
                let add = ELEMENT + pairs[end].0.len() + pairs[end].1.len();
                if end > start && size + add > PAGE_SIZE {
                    break;
                }
                size += add;
                end += 1;
            }
            let id = self.node(Some(&pairs[start..end]), None);
            level.push((pairs.get(start).map(|p| p.0.to_vec()).unwrap_or_default(), id));
            start = end;
            if pairs.is_empty() {
                break;
            }
        }
        while level.len() > 1 {
            let mut next = Vec::new();
            let mut start = 0;
            while start < level.len() {
                let mut end = start;
                let mut size = HEADER;
                while end < level.len() && end - start < MAX_ELEMENTS {
                    let add = ELEMENT + level[end].0.len();
                    if end > start && size + add > PAGE_SIZE {
                        break;
                    }
                    size += add;
                    end += 1;
                }
                let id = self.node(None, Some(&level[start..end]));
                next.push((level[start].0.clone(), id));
                start = end;
            }
            level = next;
        }
        level[0].1
    }
}

/// Reads every top-level bucket of a bbolt database (nested buckets are skipped: etcd has
/// none). `data` may carry more after the pages (a snapshot's sha256).
pub fn read(data: &[u8]) -> Result<Buckets, FormatError> {
    let meta = [0usize, 1]
        .iter()
        .filter_map(|i| read_meta(data, *i).ok())
        .max_by_key(|m| m.txid)
        .ok_or_else(|| read_meta(data, 0).err().unwrap_or_else(|| bad("no valid meta page")))?;
    // Each page of a sound file is visited once; a damaged one may loop.
    let budget = std::cell::Cell::new(data.len() / meta.page_size + 1);
    let r = Reader { data, page_size: meta.page_size, budget };
    let mut out = Buckets::new();
    let mut top = Vec::new();
    r.walk(meta.root, 0, &mut |k, v, flags| {
        if flags & BUCKET_LEAF != 0 {
            top.push((k.to_vec(), v.to_vec()));
        }
        Ok(())
    })?;
    for (name, header) in top {
        let mut pairs = BTreeMap::new();
        r.bucket(&header, 1, &mut |k, v, flags| {
            if flags & BUCKET_LEAF == 0 {
                pairs.insert(k.to_vec(), v.to_vec());
            }
            Ok(())
        })?;
        out.insert(name, pairs);
    }
    Ok(out)
}

struct Meta {
    page_size: usize,
    root: u64,
    txid: u64,
}

fn read_meta(data: &[u8], index: usize) -> Result<Meta, FormatError> {
    // The page size is not known yet: meta 0 is at 0, meta 1 one page (its own size) on.
    let first = data.get(HEADER..HEADER + 64).ok_or_else(|| bad("file too small"))?;
    let page_size = u32::from_le_bytes(first[8..12].try_into().expect("4")) as usize;
    if !(512..=1 << 20).contains(&page_size) || !page_size.is_power_of_two() {
        return Err(bad(format!("invalid page size {page_size}")));
    }
    let at = index * page_size + HEADER;
    let m = data.get(at..at + 64).ok_or_else(|| bad("file too small"))?;
    let u32_at = |o: usize| u32::from_le_bytes(m[o..o + 4].try_into().expect("4"));
    let u64_at = |o: usize| u64::from_le_bytes(m[o..o + 8].try_into().expect("8"));
    if u32_at(0) != MAGIC {
        return Err(bad("invalid database (magic)"));
    }
    if u32_at(4) != VERSION {
        return Err(bad(format!("version {} is not 2", u32_at(4))));
    }
    let sum = u64_at(56);
    if sum != 0 && sum != fnv64a(&m[..META_SUMMED]) {
        return Err(bad("meta page checksum mismatch"));
    }
    // Both metas describe the same file: a second one claiming another page size is
    // damaged (and a zero there must not reach the page arithmetic).
    if u32_at(8) as usize != page_size {
        return Err(bad(format!("meta {index} page size {} differs from {page_size}", u32_at(8))));
    }
    Ok(Meta { page_size, root: u64_at(16), txid: u64_at(48) })
}

/// Receives (key, value, element flags) for each leaf element, in key order.
type Visit<'v> = dyn FnMut(&[u8], &[u8], u32) -> Result<(), FormatError> + 'v;

struct Reader<'a> {
    data: &'a [u8],
    page_size: usize,
    /// Page visits left.
    budget: std::cell::Cell<usize>,
}

impl Reader<'_> {
    /// The pairs of the bucket whose header (a bucket leaf value) is `header`.
    fn bucket(&self, header: &[u8], depth: usize, f: &mut Visit<'_>) -> Result<(), FormatError> {
        let root = u64::from_le_bytes(
            header.get(..8).ok_or_else(|| bad("short bucket header"))?.try_into().expect("8"),
        );
        if root != 0 {
            return self.walk(root, depth, f);
        }
        // Inline: a page right after the 16-byte header.
        let page = header.get(16..).ok_or_else(|| bad("short inline bucket"))?;
        self.node(page, depth, f)
    }

    fn walk(&self, id: u64, depth: usize, f: &mut Visit<'_>) -> Result<(), FormatError> {
        let left = self.budget.get().checked_sub(1).ok_or_else(|| bad("pages visited more than once"))?;
        self.budget.set(left);
        let at = (id as usize).checked_mul(self.page_size).ok_or_else(|| bad("page id out of range"))?;
        let head = self.data.get(at..at + HEADER).ok_or_else(|| bad(format!("page {id} beyond the file")))?;
        let overflow = u32::from_le_bytes(head[12..16].try_into().expect("4")) as usize;
        let end = at + (overflow + 1) * self.page_size;
        let page = self.data.get(at..end).ok_or_else(|| bad(format!("page {id} runs beyond the file")))?;
        self.node(page, depth, f)
    }

    fn node(&self, page: &[u8], depth: usize, f: &mut Visit<'_>) -> Result<(), FormatError> {
        if depth > MAX_DEPTH {
            return Err(bad("tree too deep"));
        }
        let head = page.get(..HEADER).ok_or_else(|| bad("short page"))?;
        let flags = u16::from_le_bytes(head[8..10].try_into().expect("2"));
        let count = u16::from_le_bytes(head[10..12].try_into().expect("2")) as usize;
        let u32_at = |o: usize| -> Result<usize, FormatError> {
            Ok(u32::from_le_bytes(
                page.get(o..o + 4).ok_or_else(|| bad("short element"))?.try_into().expect("4"),
            ) as usize)
        };
        let slice = |from: usize, len: usize| {
            page.get(from..from + len).ok_or_else(|| bad("element beyond its page"))
        };
        for i in 0..count {
            let e = HEADER + i * ELEMENT;
            if flags & LEAF_PAGE != 0 {
                let (eflags, pos, ksize, vsize) =
                    (u32_at(e)? as u32, u32_at(e + 4)?, u32_at(e + 8)?, u32_at(e + 12)?);
                let k = slice(e + pos, ksize)?;
                let v = slice(e + pos + ksize, vsize)?;
                f(k, v, eflags)?;
            } else if flags & BRANCH_PAGE != 0 {
                let child = u64::from_le_bytes(slice(e + 8, 8)?.try_into().expect("8"));
                self.walk(child, depth + 1, f)?;
            } else {
                return Err(bad(format!("page flags {flags:#x} are not a tree node")));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(keys: usize, value: usize) -> Buckets {
        let mut b = Buckets::new();
        let mut key = BTreeMap::new();
        for i in 0..keys {
            key.insert(format!("k{i:08}").into_bytes(), vec![(i % 251) as u8; value]);
        }
        b.insert(b"key".to_vec(), key);
        b.insert(b"members".to_vec(), BTreeMap::new());
        b.insert(
            b"meta".to_vec(),
            BTreeMap::from([(b"consistent_index".to_vec(), 7u64.to_be_bytes().to_vec())]),
        );
        b
    }

    #[test]
    fn round_trips_small_large_and_empty() {
        for (keys, value) in [(0, 0), (3, 10), (5000, 100), (4, 20_000)] {
            let b = sample(keys, value);
            let file = write(&b);
            assert_eq!(file.len() % PAGE_SIZE, 0);
            assert_eq!(read(&file).unwrap(), b, "{keys} keys of {value} bytes");
        }
    }

    #[test]
    fn meta_pages_are_checked() {
        let mut file = write(&sample(10, 10));
        // One damaged meta page: the other one is used.
        file[HEADER + 20] ^= 0xff;
        assert_eq!(read(&file).unwrap(), sample(10, 10));
        file[PAGE_SIZE + HEADER + 20] ^= 0xff;
        assert!(read(&file).is_err());
        assert!(read(b"short").is_err());

        // A second meta page with an unchecked (zero) sum and another page size: refused
        // rather than used for page arithmetic (found by etcd/tests/fuzz.rs).
        let mut file = write(&sample(10, 10));
        let second = PAGE_SIZE + HEADER;
        file[second + 8..second + 12].copy_from_slice(&0u32.to_le_bytes());
        file[second + 48..second + 56].copy_from_slice(&u64::MAX.to_le_bytes());
        file[second + 56..second + 64].copy_from_slice(&0u64.to_le_bytes());
        assert_eq!(read(&file).unwrap(), sample(10, 10), "the first meta page is used");
    }

    #[test]
    fn damaged_trees_are_errors_not_panics() {
        let file = write(&sample(2000, 50));
        for at in (3 * PAGE_SIZE..file.len()).step_by(997) {
            let mut f = file.clone();
            f[at] ^= 0x5a;
            let _ = read(&f);
        }
    }
}
