//! The FUSE filesystem: a passthrough to a backing directory that holds file data back
//! until it is fsynced.
//!
//! What is lazy and what is not, on purpose:
//! - File contents and sizes (write, truncate, `O_TRUNC`) stay in this process until an
//!   `fsync`/`fdatasync` of the file; closing a file does not persist it.
//! - Namespace operations (create, mkdir, rename, link, unlink, rmdir, chmod) reach the
//!   backing directory at once, as on a filesystem with an ordered metadata journal. A crash
//!   therefore keeps a renamed or created file, with whatever contents were synced. This
//!   is kinder than ext4 without a directory fsync, so the tests prove data durability,
//!   not directory-entry durability.
//!
//! The process is single-threaded (fuser's session loop), so no locking is needed.

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::ffi::{CString, OsStr, OsString};
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, FileExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fuser::{
    FUSE_ROOT_ID, FileAttr, FileType, Filesystem, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory,
    ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, Request, TimeOrNow,
};

use crate::dirty::Dirty;

/// How long the kernel may cache names and attributes. Every change goes through this
/// mount, so the cache cannot go stale behind the kernel's back.
const TTL: Duration = Duration::from_secs(1);

/// One inode the kernel knows, with the backing paths that name it (several for hard
/// links, none once unlinked while still open).
struct Node {
    backing_ino: u64,
    paths: Vec<PathBuf>,
    open: usize,
}

struct Handle {
    ino: u64,
    file: File,
}

pub struct LazyFs {
    root: PathBuf,
    nodes: HashMap<u64, Node>,
    by_backing: HashMap<u64, u64>,
    next_ino: u64,
    handles: HashMap<u64, Handle>,
    dirs: HashMap<u64, Vec<(u64, FileType, OsString)>>,
    next_fh: u64,
    dirty: HashMap<u64, Dirty>,
}

fn errno(e: &io::Error) -> i32 {
    e.raw_os_error().unwrap_or(libc::EIO)
}

fn kind_of(mode: u32) -> FileType {
    match mode & libc::S_IFMT {
        libc::S_IFDIR => FileType::Directory,
        libc::S_IFLNK => FileType::Symlink,
        libc::S_IFIFO => FileType::NamedPipe,
        libc::S_IFSOCK => FileType::Socket,
        libc::S_IFCHR => FileType::CharDevice,
        libc::S_IFBLK => FileType::BlockDevice,
        _ => FileType::RegularFile,
    }
}

fn time(secs: i64, nsecs: i64) -> SystemTime {
    if secs >= 0 { UNIX_EPOCH + Duration::new(secs as u64, nsecs as u32) } else { UNIX_EPOCH }
}

fn cstr(p: &Path) -> io::Result<CString> {
    CString::new(p.as_os_str().as_bytes()).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
}

/// The unsynced state of `ino`, started from the backing file's length on first use.
fn dirty_entry<'a>(dirty: &'a mut HashMap<u64, Dirty>, ino: u64, file: &File) -> io::Result<&'a mut Dirty> {
    Ok(match dirty.entry(ino) {
        Entry::Occupied(e) => e.into_mut(),
        Entry::Vacant(v) => v.insert(Dirty::new(file.metadata()?.len())),
    })
}

fn reply_entry(reply: ReplyEntry, result: io::Result<(u64, FileAttr)>) {
    match result {
        Ok((_, attr)) => reply.entry(&TTL, &attr, 0),
        Err(e) => reply.error(errno(&e)),
    }
}

fn reply_empty(reply: ReplyEmpty, result: io::Result<()>) {
    match result {
        Ok(()) => reply.ok(),
        Err(e) => reply.error(errno(&e)),
    }
}

fn check(rc: libc::c_int) -> io::Result<()> {
    if rc < 0 { Err(io::Error::last_os_error()) } else { Ok(()) }
}

impl LazyFs {
    pub fn new(root: PathBuf) -> io::Result<Self> {
        let meta = fs::metadata(&root)?;
        let mut me = Self {
            root,
            nodes: HashMap::new(),
            by_backing: HashMap::new(),
            next_ino: FUSE_ROOT_ID + 1,
            handles: HashMap::new(),
            dirs: HashMap::new(),
            next_fh: 1,
            dirty: HashMap::new(),
        };
        me.nodes.insert(FUSE_ROOT_ID, Node { backing_ino: meta.ino(), paths: vec![PathBuf::new()], open: 0 });
        me.by_backing.insert(meta.ino(), FUSE_ROOT_ID);
        Ok(me)
    }

    /// Bytes written but not yet synced, over every file.
    pub fn unsynced_bytes(&self) -> u64 {
        self.dirty.values().map(Dirty::held).sum()
    }

    fn rel(&self, ino: u64) -> io::Result<&Path> {
        self.nodes
            .get(&ino)
            .and_then(|n| n.paths.first())
            .map(PathBuf::as_path)
            .ok_or_else(|| io::Error::from_raw_os_error(libc::ENOENT))
    }

    fn full(&self, ino: u64) -> io::Result<PathBuf> {
        Ok(self.root.join(self.rel(ino)?))
    }

    fn child(&self, parent: u64, name: &OsStr) -> io::Result<(PathBuf, PathBuf)> {
        let rel = self.rel(parent)?.join(name);
        Ok((self.root.join(&rel), rel))
    }

    /// The node for a backing path just looked up or created, new or known.
    fn remember(&mut self, rel: PathBuf, meta: &fs::Metadata) -> u64 {
        if let Some(&ino) = self.by_backing.get(&meta.ino()) {
            let node = self.nodes.get_mut(&ino).expect("by_backing names a node");
            if !node.paths.contains(&rel) {
                node.paths.push(rel);
            }
            return ino;
        }
        let ino = self.next_ino;
        self.next_ino += 1;
        self.nodes.insert(ino, Node { backing_ino: meta.ino(), paths: vec![rel], open: 0 });
        self.by_backing.insert(meta.ino(), ino);
        ino
    }

    /// Forgets a node that no name and no open file reaches any more: its unsynced data is
    /// gone for good, and the backing inode number may be reused by a new file.
    fn maybe_drop(&mut self, ino: u64) {
        if ino == FUSE_ROOT_ID {
            return;
        }
        if let Some(node) = self.nodes.get(&ino)
            && node.paths.is_empty()
            && node.open == 0
        {
            self.by_backing.remove(&node.backing_ino);
            self.nodes.remove(&ino);
            self.dirty.remove(&ino);
        }
    }

    fn unlink_path(&mut self, rel: &Path) {
        let found = self.nodes.iter_mut().find_map(|(ino, n)| {
            let before = n.paths.len();
            n.paths.retain(|p| p != rel);
            (n.paths.len() != before).then_some(*ino)
        });
        if let Some(ino) = found {
            self.maybe_drop(ino);
        }
    }

    fn attr(&self, ino: u64, meta: &fs::Metadata) -> FileAttr {
        let size = self.dirty.get(&ino).map_or(meta.size(), Dirty::size);
        FileAttr {
            ino,
            size,
            blocks: size.div_ceil(512),
            atime: time(meta.atime(), meta.atime_nsec()),
            mtime: time(meta.mtime(), meta.mtime_nsec()),
            ctime: time(meta.ctime(), meta.ctime_nsec()),
            crtime: UNIX_EPOCH,
            kind: kind_of(meta.mode()),
            perm: (meta.mode() & 0o7777) as u16,
            nlink: meta.nlink() as u32,
            uid: meta.uid(),
            gid: meta.gid(),
            rdev: meta.rdev() as u32,
            blksize: 4096,
            flags: 0,
        }
    }

    /// Attributes of a node: from its path, or from an open file once it has none.
    fn stat(&self, ino: u64) -> io::Result<FileAttr> {
        let meta = match self.full(ino) {
            Ok(p) => fs::symlink_metadata(p)?,
            Err(e) => match self.handles.values().find(|h| h.ino == ino) {
                Some(h) => h.file.metadata()?,
                None => return Err(e),
            },
        };
        Ok(self.attr(ino, &meta))
    }

    fn entry(&mut self, rel: PathBuf) -> io::Result<(u64, FileAttr)> {
        let meta = fs::symlink_metadata(self.root.join(&rel))?;
        let ino = self.remember(rel, &meta);
        Ok((ino, self.attr(ino, &meta)))
    }

    /// Opens the backing file. `O_TRUNC` is left out and applied lazily, `O_APPEND` too
    /// (the kernel sends each write's offset, and Linux's pwrite ignores it under
    /// `O_APPEND`), and `O_DIRECT` because alignment is this process's business.
    fn open_backing(
        &mut self,
        ino: u64,
        path: &Path,
        flags: i32,
        create_mode: Option<u32>,
    ) -> io::Result<u64> {
        let access = flags & libc::O_ACCMODE;
        let mut opts = OpenOptions::new();
        opts.read(true).write(access != libc::O_RDONLY);
        let keep =
            flags & !(libc::O_ACCMODE | libc::O_TRUNC | libc::O_APPEND | libc::O_DIRECT | libc::O_CREAT);
        opts.custom_flags(keep);
        if let Some(mode) = create_mode {
            opts.create(true).mode(mode);
        }
        let file = opts.open(path)?;
        if flags & libc::O_TRUNC != 0 && access != libc::O_RDONLY {
            dirty_entry(&mut self.dirty, ino, &file)?.truncate(0);
        }
        let fh = self.next_fh;
        self.next_fh += 1;
        self.handles.insert(fh, Handle { ino, file });
        if let Some(n) = self.nodes.get_mut(&ino) {
            n.open += 1;
        }
        Ok(fh)
    }

    /// Writes a node's unsynced data to its backing file.
    fn sync(&mut self, ino: u64) -> io::Result<()> {
        let Some(dirty) = self.dirty.get(&ino) else { return Ok(()) };
        let file = match self.full(ino) {
            Ok(p) => OpenOptions::new().write(true).open(p)?,
            // Unlinked: nothing anyone can reach will ever read it again.
            Err(_) => {
                self.dirty.remove(&ino);
                return Ok(());
            }
        };
        dirty.sync_to(&file)?;
        self.dirty.remove(&ino);
        Ok(())
    }

    fn rename_paths(&mut self, from: &Path, to: &Path) {
        // Whatever `to` named is replaced; whatever lived under `from` moves with it.
        if from != to {
            self.unlink_path(to);
            self.rename_paths_keep(from, to);
        }
    }

    /// Removes a name (file or empty directory) from the backing directory and the table.
    fn remove(&mut self, parent: u64, name: &OsStr, remove: fn(PathBuf) -> io::Result<()>) -> io::Result<()> {
        let (full, rel) = self.child(parent, name)?;
        remove(full)?;
        self.unlink_path(&rel);
        Ok(())
    }

    /// Moves every path at or under `from` to `to`, leaving what `to` named alone.
    fn rename_paths_keep(&mut self, from: &Path, to: &Path) {
        for node in self.nodes.values_mut() {
            for p in node.paths.iter_mut() {
                if let Ok(rest) = p.strip_prefix(from) {
                    *p = if rest.as_os_str().is_empty() { to.to_path_buf() } else { to.join(rest) };
                }
            }
        }
    }
}

impl Filesystem for LazyFs {
    fn lookup(&mut self, _req: &Request<'_>, parent: u64, name: &OsStr, reply: ReplyEntry) {
        match self.child(parent, name).and_then(|(_, rel)| self.entry(rel)) {
            Ok((_, attr)) => reply.entry(&TTL, &attr, 0),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn getattr(&mut self, _req: &Request<'_>, ino: u64, _fh: Option<u64>, reply: ReplyAttr) {
        match self.stat(ino) {
            Ok(attr) => reply.attr(&TTL, &attr),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn setattr(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        fh: Option<u64>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<u32>,
        reply: ReplyAttr,
    ) {
        let result = (|| -> io::Result<FileAttr> {
            let path = self.full(ino).ok();
            if let Some(mode) = mode
                && let Some(p) = &path
            {
                fs::set_permissions(p, fs::Permissions::from_mode(mode & 0o7777))?;
            }
            if (uid.is_some() || gid.is_some())
                && let Some(p) = &path
            {
                std::os::unix::fs::lchown(p, uid, gid)?;
            }
            if let Some(size) = size {
                match fh.and_then(|fh| self.handles.get(&fh)) {
                    Some(h) => dirty_entry(&mut self.dirty, ino, &h.file)?.truncate(size),
                    None => {
                        let p = path.as_deref().ok_or_else(|| io::Error::from_raw_os_error(libc::ENOENT))?;
                        let file = File::open(p)?;
                        dirty_entry(&mut self.dirty, ino, &file)?.truncate(size);
                    }
                }
            }
            if (atime.is_some() || mtime.is_some())
                && let Some(p) = &path
            {
                let to_ts = |t: Option<TimeOrNow>| match t {
                    None => libc::timespec { tv_sec: 0, tv_nsec: libc::UTIME_OMIT },
                    Some(TimeOrNow::Now) => libc::timespec { tv_sec: 0, tv_nsec: libc::UTIME_NOW },
                    Some(TimeOrNow::SpecificTime(t)) => {
                        let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
                        libc::timespec {
                            tv_sec: d.as_secs() as libc::time_t,
                            tv_nsec: d.subsec_nanos() as libc::c_long,
                        }
                    }
                };
                let times = [to_ts(atime), to_ts(mtime)];
                let c = cstr(p)?;
                // SAFETY: `c` is a valid C string and `times` two initialised timespecs.
                check(unsafe {
                    libc::utimensat(libc::AT_FDCWD, c.as_ptr(), times.as_ptr(), libc::AT_SYMLINK_NOFOLLOW)
                })?;
            }
            self.stat(ino)
        })();
        match result {
            Ok(attr) => reply.attr(&TTL, &attr),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn readlink(&mut self, _req: &Request<'_>, ino: u64, reply: ReplyData) {
        match self.full(ino).and_then(fs::read_link) {
            Ok(target) => reply.data(target.as_os_str().as_bytes()),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn mknod(
        &mut self,
        _req: &Request<'_>,
        parent: u64,
        name: &OsStr,
        mode: u32,
        umask: u32,
        rdev: u32,
        reply: ReplyEntry,
    ) {
        let result = self.child(parent, name).and_then(|(full, rel)| {
            let c = cstr(&full)?;
            // SAFETY: `c` is a valid C string.
            check(unsafe { libc::mknod(c.as_ptr(), mode & !umask, rdev as libc::dev_t) })?;
            self.entry(rel)
        });
        reply_entry(reply, result);
    }

    fn mkdir(
        &mut self,
        _req: &Request<'_>,
        parent: u64,
        name: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        let result = self.child(parent, name).and_then(|(full, rel)| {
            fs::DirBuilder::new().mode(mode & !umask).create(&full)?;
            self.entry(rel)
        });
        reply_entry(reply, result);
    }

    fn unlink(&mut self, _req: &Request<'_>, parent: u64, name: &OsStr, reply: ReplyEmpty) {
        let result = self.remove(parent, name, fs::remove_file);
        reply_empty(reply, result);
    }

    fn rmdir(&mut self, _req: &Request<'_>, parent: u64, name: &OsStr, reply: ReplyEmpty) {
        let result = self.remove(parent, name, fs::remove_dir);
        reply_empty(reply, result);
    }

    fn symlink(
        &mut self,
        _req: &Request<'_>,
        parent: u64,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        let result = self.child(parent, link_name).and_then(|(full, rel)| {
            std::os::unix::fs::symlink(target, full)?;
            self.entry(rel)
        });
        reply_entry(reply, result);
    }

    fn rename(
        &mut self,
        _req: &Request<'_>,
        parent: u64,
        name: &OsStr,
        newparent: u64,
        newname: &OsStr,
        flags: u32,
        reply: ReplyEmpty,
    ) {
        let result = (|| -> io::Result<()> {
            let (from, from_rel) = self.child(parent, name)?;
            let (to, to_rel) = self.child(newparent, newname)?;
            if flags != 0 {
                let (a, b) = (cstr(&from)?, cstr(&to)?);
                // SAFETY: both are valid C strings; renameat2 only reads them.
                check(unsafe {
                    libc::renameat2(libc::AT_FDCWD, a.as_ptr(), libc::AT_FDCWD, b.as_ptr(), flags)
                })?;
                if flags & libc::RENAME_EXCHANGE != 0 {
                    // Swap the two names through a placeholder no real path can equal.
                    let tmp = PathBuf::from("\0lazyfs-exchange");
                    self.rename_paths_keep(&from_rel, &tmp);
                    self.rename_paths_keep(&to_rel, &from_rel);
                    self.rename_paths_keep(&tmp, &to_rel);
                    return Ok(());
                }
            } else {
                fs::rename(&from, &to)?;
            }
            self.rename_paths(&from_rel, &to_rel);
            Ok(())
        })();
        reply_empty(reply, result);
    }

    fn link(&mut self, _req: &Request<'_>, ino: u64, newparent: u64, newname: &OsStr, reply: ReplyEntry) {
        let result = (|| -> io::Result<(u64, FileAttr)> {
            let from = self.full(ino)?;
            let (to, to_rel) = self.child(newparent, newname)?;
            fs::hard_link(from, to)?;
            self.entry(to_rel)
        })();
        reply_entry(reply, result);
    }

    fn open(&mut self, _req: &Request<'_>, ino: u64, flags: i32, reply: ReplyOpen) {
        let result = self.full(ino).and_then(|p| self.open_backing(ino, &p, flags, None));
        match result {
            Ok(fh) => reply.opened(fh, 0),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn read(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        fh: u64,
        offset: i64,
        size: u32,
        _flags: i32,
        _lock_owner: Option<u64>,
        reply: ReplyData,
    ) {
        let Some(h) = self.handles.get(&fh) else { return reply.error(libc::EBADF) };
        let offset = offset.max(0) as u64;
        let result = match self.dirty.get(&ino) {
            Some(d) => h.file.metadata().and_then(|m| d.read(&h.file, m.len(), offset, size as u64)),
            None => {
                let mut buf = vec![0u8; size as usize];
                let mut n = 0;
                loop {
                    match h.file.read_at(&mut buf[n..], offset + n as u64) {
                        Ok(0) => break Ok(()),
                        Ok(k) => {
                            n += k;
                            if n == buf.len() {
                                break Ok(());
                            }
                        }
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                        Err(e) => break Err(e),
                    }
                }
                .map(|()| {
                    buf.truncate(n);
                    buf
                })
            }
        };
        match result {
            Ok(data) => reply.data(&data),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn write(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        fh: u64,
        offset: i64,
        data: &[u8],
        _write_flags: u32,
        _flags: i32,
        _lock_owner: Option<u64>,
        reply: ReplyWrite,
    ) {
        let Some(h) = self.handles.get(&fh) else { return reply.error(libc::EBADF) };
        match dirty_entry(&mut self.dirty, ino, &h.file) {
            Ok(d) => {
                d.write(offset.max(0) as u64, data);
                reply.written(data.len() as u32)
            }
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn release(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        fh: u64,
        _flags: i32,
        _lock_owner: Option<u64>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        // Closing does not persist anything: only fsync does.
        self.handles.remove(&fh);
        if let Some(n) = self.nodes.get_mut(&ino) {
            n.open = n.open.saturating_sub(1);
        }
        self.maybe_drop(ino);
        reply.ok();
    }

    fn fsync(&mut self, _req: &Request<'_>, ino: u64, _fh: u64, _datasync: bool, reply: ReplyEmpty) {
        match self.sync(ino) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn opendir(&mut self, _req: &Request<'_>, ino: u64, _flags: i32, reply: ReplyOpen) {
        let result = (|| -> io::Result<u64> {
            let dir = self.full(ino)?;
            let mut entries = vec![
                (ino, FileType::Directory, OsString::from(".")),
                (ino, FileType::Directory, OsString::from("..")),
            ];
            for e in fs::read_dir(dir)? {
                let e = e?;
                let meta = e.metadata()?;
                // Readdir inode numbers are only shown to callers: the backing one serves
                // for names the kernel has not looked up yet.
                let shown = self.by_backing.get(&meta.ino()).copied().unwrap_or(meta.ino());
                entries.push((shown, kind_of(meta.mode()), e.file_name()));
            }
            let fh = self.next_fh;
            self.next_fh += 1;
            self.dirs.insert(fh, entries);
            Ok(fh)
        })();
        match result {
            Ok(fh) => reply.opened(fh, 0),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn readdir(&mut self, _req: &Request<'_>, _ino: u64, fh: u64, offset: i64, mut reply: ReplyDirectory) {
        let Some(entries) = self.dirs.get(&fh) else { return reply.error(libc::EBADF) };
        for (i, (ino, kind, name)) in entries.iter().enumerate().skip(offset.max(0) as usize) {
            if reply.add(*ino, (i + 1) as i64, *kind, name) {
                break;
            }
        }
        reply.ok();
    }

    fn releasedir(&mut self, _req: &Request<'_>, _ino: u64, fh: u64, _flags: i32, reply: ReplyEmpty) {
        self.dirs.remove(&fh);
        reply.ok();
    }

    fn fsyncdir(&mut self, _req: &Request<'_>, _ino: u64, _fh: u64, _datasync: bool, reply: ReplyEmpty) {
        // Namespace changes are applied at once (see the module comment).
        reply.ok();
    }

    fn statfs(&mut self, _req: &Request<'_>, _ino: u64, reply: ReplyStatfs) {
        let result = cstr(&self.root).and_then(|c| {
            // SAFETY: statvfs fills the zeroed struct; `c` is a valid C string.
            let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
            check(unsafe { libc::statvfs(c.as_ptr(), &mut s) })?;
            Ok(s)
        });
        match result {
            Ok(s) => reply.statfs(
                s.f_blocks,
                s.f_bfree,
                s.f_bavail,
                s.f_files,
                s.f_ffree,
                s.f_bsize as u32,
                s.f_namemax as u32,
                s.f_frsize as u32,
            ),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn access(&mut self, _req: &Request<'_>, ino: u64, _mask: i32, reply: ReplyEmpty) {
        match self.full(ino).and_then(fs::symlink_metadata) {
            Ok(_) => reply.ok(),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn create(
        &mut self,
        _req: &Request<'_>,
        parent: u64,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let result = (|| -> io::Result<(u64, FileAttr)> {
            let (full, rel) = self.child(parent, name)?;
            if flags & libc::O_EXCL != 0 && fs::symlink_metadata(&full).is_ok() {
                return Err(io::Error::from_raw_os_error(libc::EEXIST));
            }
            // Create the name first (a namespace change, applied at once), then open it
            // through the same path as `open` so that O_TRUNC stays lazy.
            OpenOptions::new().write(true).create(true).truncate(false).mode(mode & !umask).open(&full)?;
            let (ino, _) = self.entry(rel)?;
            let fh = self.open_backing(ino, &full, flags & !libc::O_EXCL, None)?;
            Ok((fh, self.stat(ino)?))
        })();
        match result {
            Ok((fh, attr)) => reply.created(&TTL, &attr, 0, fh, 0),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn fallocate(
        &mut self,
        _req: &Request<'_>,
        _ino: u64,
        fh: u64,
        offset: i64,
        length: i64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        // Reserving space without changing the size is invisible to readers: pass it on.
        // Anything that would change contents or size is refused, as some filesystems do.
        if mode != libc::FALLOC_FL_KEEP_SIZE {
            return reply.error(libc::EOPNOTSUPP);
        }
        let Some(h) = self.handles.get(&fh) else { return reply.error(libc::EBADF) };
        // SAFETY: a plain syscall on an fd this process owns.
        match check(unsafe { libc::fallocate(h.file.as_raw_fd(), mode, offset, length) }) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(&e)),
        }
    }
}
