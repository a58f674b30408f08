//! A log file that rotates itself, as upstream's audit log does through lumberjack:
//!
//! - a write that would take the file past `max_size` first moves the file aside to
//!   `<name>-<UTC time>.<ext>` (`audit-2026-12-01T20-00-00.000.log`) and starts a new one;
//!   a single write larger than `max_size` is refused;
//! - after each rotation (and when the file is first opened) old backups are pruned:
//!   all but the newest `max_backups` (0: keep all), and those whose name says they are
//!   older than `max_age` (None: keep all); with `compress` the rest are gzipped to
//!   `<backup>.gz`.
//!
//! Writes are buffered; [`Rotator::flush`] pushes them to the file.

use std::fs::{self, File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// lumberjack's default when `--audit-log-maxsize` is 0.
pub const DEFAULT_MAX_MB: u64 = 100;
const MEGABYTE: u64 = 1024 * 1024;
const COMPRESS_SUFFIX: &str = ".gz";

/// The clock backups are named by (a fake in tests).
pub type Clock = Box<dyn Fn() -> SystemTime + Send>;

pub struct Rotator {
    path: PathBuf,
    max_size: u64,
    max_backups: usize,
    max_age: Option<Duration>,
    compress: bool,
    file: Option<BufWriter<File>>,
    /// Bytes in the current file, buffered ones included.
    size: u64,
    now: Clock,
}

impl std::fmt::Debug for Rotator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rotator")
            .field("path", &self.path)
            .field("max_size", &self.max_size)
            .finish_non_exhaustive()
    }
}

impl Rotator {
    /// The `--audit-log-*` settings: size in megabytes (0: 100), age in days (0: no limit).
    pub fn new(
        path: PathBuf,
        max_size_mb: u64,
        max_backups: usize,
        max_age_days: u64,
        compress: bool,
    ) -> Self {
        let mb = if max_size_mb == 0 { DEFAULT_MAX_MB } else { max_size_mb };
        let max_age = (max_age_days > 0).then(|| Duration::from_secs(max_age_days * 24 * 3600));
        Self::with_limits(
            path,
            mb.saturating_mul(MEGABYTE),
            max_backups,
            max_age,
            compress,
            Box::new(SystemTime::now),
        )
    }

    /// Exact limits and clock (tests use small sizes and a fake clock).
    pub fn with_limits(
        path: PathBuf,
        max_size: u64,
        max_backups: usize,
        max_age: Option<Duration>,
        compress: bool,
        now: Clock,
    ) -> Self {
        Self { path, max_size, max_backups, max_age, compress, file: None, size: 0, now }
    }

    /// Appends one record, rotating first if it would not fit.
    pub fn write(&mut self, p: &[u8]) -> io::Result<()> {
        let len = p.len() as u64;
        if len > self.max_size {
            return Err(io::Error::other(format!(
                "write length {len} exceeds maximum file size {}",
                self.max_size
            )));
        }
        if self.file.is_none() {
            self.open_existing_or_new(len)?;
        }
        if self.size + len > self.max_size {
            self.rotate()?;
        }
        let f = self.file.as_mut().ok_or_else(|| io::Error::other("audit log file is not open"))?;
        f.write_all(p)?;
        self.size += len;
        Ok(())
    }

    pub fn flush(&mut self) -> io::Result<()> {
        match self.file.as_mut() {
            Some(f) => f.flush(),
            None => Ok(()),
        }
    }

    fn open_existing_or_new(&mut self, write_len: u64) -> io::Result<()> {
        self.mill();
        let meta = match fs::metadata(&self.path) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => return self.open_new(),
            Err(e) => return Err(e),
            Ok(m) => m,
        };
        if meta.len() + write_len >= self.max_size {
            return self.rotate();
        }
        match OpenOptions::new().append(true).open(&self.path) {
            Ok(f) => {
                self.file = Some(BufWriter::new(f));
                self.size = meta.len();
                Ok(())
            }
            // Unreadable as it is: start afresh (lumberjack does the same).
            Err(_) => self.open_new(),
        }
    }

    fn rotate(&mut self) -> io::Result<()> {
        if let Some(mut f) = self.file.take() {
            f.flush()?;
        }
        self.open_new()?;
        self.mill();
        Ok(())
    }

    /// Moves the current file (if any) to its backup name and opens an empty one.
    fn open_new(&mut self) -> io::Result<()> {
        if let Some(dir) = self.path.parent().filter(|d| !d.as_os_str().is_empty()) {
            fs::create_dir_all(dir)?;
        }
        let mut opts = OpenOptions::new();
        opts.write(true).create(true).truncate(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
            let mode = fs::metadata(&self.path).map(|m| m.permissions().mode()).unwrap_or(0o600);
            opts.mode(mode);
        }
        if self.path.exists() {
            fs::rename(&self.path, self.backup_name((self.now)()))?;
        }
        self.file = Some(BufWriter::new(opts.open(&self.path)?));
        self.size = 0;
        Ok(())
    }

    /// `<dir>/<stem>-<time><ext>`.
    fn backup_name(&self, t: SystemTime) -> PathBuf {
        let (stem, ext) = self.stem_ext();
        self.dir().join(format!("{stem}-{}{ext}", format_backup_time(t)))
    }

    fn dir(&self) -> PathBuf {
        self.path.parent().map(Path::to_path_buf).unwrap_or_default()
    }

    /// The file name without and with its extension (`audit`, `.log`), as Go's `filepath.Ext`.
    fn stem_ext(&self) -> (String, String) {
        let name = self.path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        match name.rfind('.') {
            Some(i) => (name[..i].to_string(), name[i..].to_string()),
            None => (name, String::new()),
        }
    }

    /// The backups present, newest first.
    fn backups(&self) -> Vec<(SystemTime, PathBuf)> {
        let (stem, ext) = self.stem_ext();
        let prefix = format!("{stem}-");
        let gz_ext = format!("{ext}{COMPRESS_SUFFIX}");
        let dir = self.dir();
        let dir = if dir.as_os_str().is_empty() { PathBuf::from(".") } else { dir };
        let Ok(entries) = fs::read_dir(&dir) else { return Vec::new() };
        let mut out: Vec<(SystemTime, PathBuf)> = entries
            .flatten()
            .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
            .filter_map(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                let ts = name.strip_prefix(&prefix)?;
                let ts = ts.strip_suffix(gz_ext.as_str()).or_else(|| ts.strip_suffix(ext.as_str()))?;
                Some((parse_backup_time(ts)?, e.path()))
            })
            .collect();
        out.sort_by(|a, b| b.0.cmp(&a.0));
        out
    }

    /// Prunes and compresses backups (lumberjack's `millRunOnce`). Failures are logged:
    /// they must not stop the audit log.
    fn mill(&mut self) {
        if self.max_backups == 0 && self.max_age.is_none() && !self.compress {
            return;
        }
        let mut files = self.backups();
        let mut remove = Vec::new();
        if self.max_backups > 0 && self.max_backups < files.len() {
            // A backup and its compressed copy count once.
            let mut preserved = std::collections::HashSet::new();
            let mut remaining = Vec::new();
            for f in files {
                let name = f.1.to_string_lossy().trim_end_matches(COMPRESS_SUFFIX).to_string();
                preserved.insert(name);
                if preserved.len() > self.max_backups { remove.push(f) } else { remaining.push(f) }
            }
            files = remaining;
        }
        if let Some(age) = self.max_age {
            let cutoff = (self.now)().checked_sub(age).unwrap_or(UNIX_EPOCH);
            let (old, young): (Vec<_>, Vec<_>) = files.into_iter().partition(|f| f.0 < cutoff);
            remove.extend(old);
            files = young;
        }
        for (_, path) in remove {
            if let Err(e) = fs::remove_file(&path) {
                tracing::warn!(path = %path.display(), "removing old audit log: {e}");
            }
        }
        if self.compress {
            for (_, path) in files.iter().filter(|f| !f.1.to_string_lossy().ends_with(COMPRESS_SUFFIX)) {
                if let Err(e) = compress(path) {
                    tracing::warn!(path = %path.display(), "compressing audit log: {e}");
                }
            }
        }
    }
}

/// Gzips `src` to `src.gz` and removes `src`.
fn compress(src: &Path) -> io::Result<()> {
    let dst = PathBuf::from(format!("{}{COMPRESS_SUFFIX}", src.display()));
    let mut input = File::open(src)?;
    let out = File::create(&dst)?;
    let mut gz = flate2::write::GzEncoder::new(BufWriter::new(out), flate2::Compression::default());
    let copied = io::copy(&mut input, &mut gz).and_then(|_| gz.finish()).and_then(|mut w| w.flush());
    if let Err(e) = copied {
        let _ = fs::remove_file(&dst);
        return Err(e);
    }
    fs::remove_file(src)
}

/// Go layout `2006-01-02T15-04-05.000`, in UTC.
pub fn format_backup_time(t: SystemTime) -> String {
    let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = d.as_secs() as i64;
    let (y, m, day) = civil_from_days(secs.div_euclid(86_400));
    let sod = secs.rem_euclid(86_400);
    format!(
        "{y:04}-{m:02}-{day:02}T{:02}-{:02}-{:02}.{:03}",
        sod / 3600,
        sod / 60 % 60,
        sod % 60,
        d.subsec_millis()
    )
}

pub fn parse_backup_time(s: &str) -> Option<SystemTime> {
    let b = s.as_bytes();
    if b.len() != 23
        || b[4] != b'-'
        || b[7] != b'-'
        || b[10] != b'T'
        || b[13] != b'-'
        || b[16] != b'-'
        || b[19] != b'.'
    {
        return None;
    }
    let num = |r: std::ops::Range<usize>| -> Option<i64> {
        let part = s.get(r)?;
        part.bytes().all(|c| c.is_ascii_digit()).then(|| part.parse().ok())?
    };
    let (y, mo, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (h, mi, sec, ms) = (num(11..13)?, num(14..16)?, num(17..19)?, num(20..23)?);
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || sec > 59 {
        return None;
    }
    let secs = days_from_civil(y, mo, d) * 86_400 + h * 3600 + mi * 60 + sec;
    let secs = u64::try_from(secs).ok()?;
    Some(UNIX_EPOCH + Duration::from_secs(secs) + Duration::from_millis(ms as u64))
}

/// Howard Hinnant's civil-from-days: (year, month, day) of a day count since 1970-01-01.
pub(crate) fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = if m > 2 { m - 3 } else { m + 9 };
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};

    /// A clock that moves one second per call, from 2026-12-01T20:00:00Z.
    fn ticking() -> (Clock, Arc<AtomicU64>) {
        let t = Arc::new(AtomicU64::new(1_796_155_200));
        let c = t.clone();
        (Box::new(move || UNIX_EPOCH + Duration::from_secs(c.fetch_add(1, Ordering::SeqCst))), t)
    }

    fn names(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn backup_times() {
        let t = UNIX_EPOCH + Duration::from_millis(1_796_155_200_123);
        assert_eq!(format_backup_time(t), "2026-12-01T20-00-00.123");
        assert_eq!(parse_backup_time("2026-12-01T20-00-00.123"), Some(t));
        assert_eq!(parse_backup_time("2026-12-01T20:00:00.123"), None);
        assert_eq!(parse_backup_time("2026-13-01T20-00-00.123"), None);
    }

    #[test]
    fn rotates_when_full_and_keeps_max_backups() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.log");
        let (clock, _) = ticking();
        let mut r = Rotator::with_limits(path.clone(), 100, 2, None, false, clock);
        let line = [b'x'; 39].iter().copied().chain([b'\n']).collect::<Vec<u8>>();
        r.write(&line).unwrap();
        r.write(&line).unwrap();
        r.flush().unwrap();
        assert_eq!(fs::metadata(&path).unwrap().len(), 80);
        assert_eq!(names(dir.path()), ["audit.log"]);
        // 80 + 40 > 100: the third line goes to a new file.
        r.write(&line).unwrap();
        r.flush().unwrap();
        assert_eq!(fs::metadata(&path).unwrap().len(), 40);
        let n = names(dir.path());
        assert_eq!(n.len(), 2);
        assert!(n[0].starts_with("audit-2026-12-01T20-00-0") && n[0].ends_with(".log"), "{n:?}");
        // Many rotations later, only the two newest backups remain.
        for _ in 0..10 {
            r.write(&line).unwrap();
            r.write(&line).unwrap();
        }
        r.flush().unwrap();
        let n = names(dir.path());
        assert_eq!(n.len(), 3, "{n:?}");
        assert_eq!(n[2], "audit.log");
        assert!(n[0] < n[1]);
        assert!(r.write(&[b'y'; 101]).unwrap_err().to_string().contains("exceeds maximum file size 100"));
    }

    #[test]
    fn reopens_existing_file_and_rotates_if_full() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.log");
        fs::write(&path, [b'a'; 50]).unwrap();
        let (clock, _) = ticking();
        let mut r = Rotator::with_limits(path.clone(), 100, 0, None, false, clock);
        r.write(b"0123456789\n").unwrap();
        r.flush().unwrap();
        assert_eq!(fs::metadata(&path).unwrap().len(), 61, "appended");
        drop(r);
        let (clock, _) = ticking();
        let mut r = Rotator::with_limits(path.clone(), 61, 0, None, false, clock);
        r.write(b"z\n").unwrap();
        r.flush().unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"z\n", "the full file was moved aside");
        assert_eq!(names(dir.path()).len(), 2);
    }

    #[test]
    fn max_age_and_compression() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.log");
        // A backup from long before the fake clock's start, and one from just before it.
        fs::write(dir.path().join("audit-2026-01-01T00-00-00.000.log"), "old\n").unwrap();
        fs::write(dir.path().join("audit-2026-11-30T20-00-00.000.log"), "recent\n").unwrap();
        fs::write(dir.path().join("unrelated.txt"), "x").unwrap();
        let (clock, _) = ticking();
        let mut r =
            Rotator::with_limits(path.clone(), 1000, 0, Some(Duration::from_secs(7 * 86_400)), true, clock);
        r.write(b"first\n").unwrap();
        r.flush().unwrap();
        let n = names(dir.path());
        assert_eq!(n, ["audit-2026-11-30T20-00-00.000.log.gz", "audit.log", "unrelated.txt"]);
        let gz = fs::read(dir.path().join(&n[0])).unwrap();
        let mut text = String::new();
        io::Read::read_to_string(&mut flate2::read::GzDecoder::new(&gz[..]), &mut text).unwrap();
        assert_eq!(text, "recent\n");
    }

    #[test]
    fn default_size() {
        let r = Rotator::new(PathBuf::from("/tmp/x.log"), 0, 0, 0, false);
        assert_eq!(r.max_size, 100 * MEGABYTE);
        assert!(r.max_age.is_none());
    }
}
