//! What a file holds that has not reached the backing directory yet.
//!
//! A write lands here; `fsync` moves it to the backing file. Until then a read sees it laid
//! over the backing file's bytes, as the page cache shows unsynced data to every reader, and
//! a crash of the process forgets it, as a power cut forgets the page cache.

use std::collections::BTreeMap;
use std::io;
use std::os::unix::fs::FileExt;

/// The unsynced state of one file: written extents, its size as readers see it, and how far
/// a truncation reached into the backing file's bytes.
#[derive(Debug, Default)]
pub struct Dirty {
    /// Non-overlapping extents by start offset.
    extents: BTreeMap<u64, Vec<u8>>,
    /// The file's size as readers see it.
    size: u64,
    /// The lowest size the file was truncated to since the last sync: backing bytes from
    /// here on are gone for readers and are cut off at the next sync.
    cut: Option<u64>,
}

impl Dirty {
    /// The state of a file whose backing file is `size` bytes long and that has no unsynced
    /// data yet.
    pub fn new(size: u64) -> Self {
        Self { extents: BTreeMap::new(), size, cut: None }
    }

    pub fn size(&self) -> u64 {
        self.size
    }

    /// Bytes held in memory, for the daemon's own accounting.
    pub fn held(&self) -> u64 {
        self.extents.values().map(|v| v.len() as u64).sum()
    }

    pub fn write(&mut self, offset: u64, data: &[u8]) {
        if data.is_empty() {
            return;
        }
        let end = offset + data.len() as u64;
        self.size = self.size.max(end);
        // The common case, an append right after the last extent written: grow it in place
        // so that a file written sequentially costs one copy of its bytes, not one per write.
        let appendable = self.extents.range(offset..end).next().is_none();
        if appendable
            && let Some((&start, last)) = self.extents.range_mut(..=offset).next_back()
            && start + last.len() as u64 == offset
        {
            last.extend_from_slice(data);
            return;
        }
        // Otherwise merge every extent that overlaps or touches [offset, end) into one.
        let touching: Vec<u64> = self
            .extents
            .range(..=end)
            .filter(|(s, v)| **s + v.len() as u64 >= offset)
            .map(|(s, _)| *s)
            .collect();
        let start = touching.first().map_or(offset, |s| (*s).min(offset));
        let mut merged_end = end;
        for s in &touching {
            merged_end = merged_end.max(s + self.extents[s].len() as u64);
        }
        let mut merged = vec![0u8; (merged_end - start) as usize];
        for s in touching {
            let old = self.extents.remove(&s).unwrap_or_default();
            let at = (s - start) as usize;
            merged[at..at + old.len()].copy_from_slice(&old);
        }
        let at = (offset - start) as usize;
        merged[at..at + data.len()].copy_from_slice(data);
        self.extents.insert(start, merged);
    }

    /// Sets the size readers see; shrinking drops what lies beyond it.
    pub fn truncate(&mut self, size: u64) {
        if size < self.size {
            self.cut = Some(self.cut.map_or(size, |c| c.min(size)));
            let beyond: Vec<u64> = self.extents.range(size..).map(|(s, _)| *s).collect();
            for s in beyond {
                self.extents.remove(&s);
            }
            if let Some((&s, v)) = self.extents.range_mut(..size).next_back()
                && s + v.len() as u64 > size
            {
                v.truncate((size - s) as usize);
            }
        }
        self.size = size;
    }

    /// Reads `len` bytes at `offset` as a reader of the file sees them: backing bytes that
    /// survive any truncation, zeros where nothing was written, unsynced extents on top.
    pub fn read(
        &self,
        backing: &impl FileExt,
        backing_len: u64,
        offset: u64,
        len: u64,
    ) -> io::Result<Vec<u8>> {
        let end = self.size.min(offset.saturating_add(len));
        if offset >= end {
            return Ok(Vec::new());
        }
        let mut out = vec![0u8; (end - offset) as usize];
        let visible = backing_len.min(self.cut.unwrap_or(u64::MAX)).min(end);
        if visible > offset {
            read_full(backing, &mut out[..(visible - offset) as usize], offset)?;
        }
        let first = self.extents.range(..=offset).next_back().map_or(offset, |(s, _)| *s);
        for (&s, v) in self.extents.range(first..end) {
            let (from, to) = (s.max(offset), (s + v.len() as u64).min(end));
            if from < to {
                out[(from - offset) as usize..(to - offset) as usize]
                    .copy_from_slice(&v[(from - s) as usize..(to - s) as usize]);
            }
        }
        Ok(out)
    }

    /// Makes the backing file what readers see, i.e. what an fsync promises.
    pub fn sync_to(&self, backing: &std::fs::File) -> io::Result<()> {
        let len = backing.metadata()?.len();
        if let Some(cut) = self.cut
            && cut < len
        {
            backing.set_len(cut)?;
        }
        for (&s, v) in &self.extents {
            backing.write_all_at(v, s)?;
        }
        if backing.metadata()?.len() != self.size {
            backing.set_len(self.size)?;
        }
        Ok(())
    }
}

/// `read_exact_at`, except that a backing file shorter than expected reads as zeros: another
/// writer may have cut it, and a reader must still get an answer.
fn read_full(f: &impl FileExt, buf: &mut [u8], offset: u64) -> io::Result<()> {
    let mut done = 0;
    while done < buf.len() {
        match f.read_at(&mut buf[done..], offset + done as u64) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn backing(bytes: &[u8]) -> std::fs::File {
        let mut f = tempfile::tempfile().unwrap();
        f.write_all(bytes).unwrap();
        f
    }

    fn view(d: &Dirty, f: &std::fs::File) -> Vec<u8> {
        d.read(f, f.metadata().unwrap().len(), 0, u64::MAX).unwrap()
    }

    #[test]
    fn writes_overlay_the_backing_file_until_synced() {
        let f = backing(b"0123456789");
        let mut d = Dirty::new(10);
        d.write(2, b"ab");
        d.write(8, b"xyz");
        assert_eq!(view(&d, &f), b"01ab4567xyz");
        assert_eq!(d.read(&f, 10, 3, 6).unwrap(), b"b4567x");
        // Nothing reached the backing file.
        assert_eq!(
            std::fs::read(format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&f))).unwrap(),
            b"0123456789"
        );
        d.sync_to(&f).unwrap();
        let synced = Dirty::new(f.metadata().unwrap().len());
        assert_eq!(view(&synced, &f), b"01ab4567xyz");
    }

    #[test]
    fn appends_grow_one_extent_and_overlaps_merge() {
        let f = backing(b"");
        let mut d = Dirty::new(0);
        for chunk in [b"aa", b"bb", b"cc"] {
            let at = d.size();
            d.write(at, chunk);
        }
        assert_eq!(d.extents.len(), 1);
        d.write(10, b"zz");
        assert_eq!(d.extents.len(), 2);
        d.write(5, b"QQQQQQ");
        assert_eq!(d.extents.len(), 1);
        assert_eq!(view(&d, &f), b"aabbcQQQQQQz");
        assert_eq!(d.held(), 12);
    }

    #[test]
    fn truncation_hides_backing_bytes_and_is_applied_at_sync() {
        let f = backing(b"0123456789");
        let mut d = Dirty::new(10);
        d.write(6, b"ab");
        d.truncate(4);
        d.write(7, b"x");
        // Bytes 4..7 were cut off and never rewritten: zeros, not the backing file's 456.
        assert_eq!(view(&d, &f), b"0123\0\0\0x");
        d.sync_to(&f).unwrap();
        assert_eq!(view(&Dirty::new(8), &f), b"0123\0\0\0x");
    }

    #[test]
    fn a_dropped_state_leaves_the_backing_file_as_last_synced() {
        let f = backing(b"old");
        let mut d = Dirty::new(3);
        d.truncate(0);
        d.write(0, b"new contents");
        drop(d);
        assert_eq!(view(&Dirty::new(3), &f), b"old");
    }
}
