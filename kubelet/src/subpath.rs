//! `subPath` and `subPathExpr` volume mounts, made safe the way upstream's kubelet makes
//! them (the CVE-2017-1002101 fix): a container must never get a mount of something outside
//! its volume, even when the volume's contents are written by an earlier container of the
//! same pod and contain symlinks that point out of it.
//!
//! So the path is not handed to the runtime as a string the runtime would resolve later.
//! Symlinks inside the volume are resolved once, the result must lie within the volume, and
//! then every component is opened with `O_NOFOLLOW` from the volume's root (a symlink swapped
//! in meanwhile makes the open fail), and the opened file descriptor itself is bind-mounted
//! (`/proc/self/fd/<n>`) on a per-container target under the pod directory,
//! `volume-subpaths/<volume>/<container>/<mount index>`. That target is what the runtime
//! mounts into the container. A missing subPath directory is created the same way, with
//! `mkdirat` on descriptors opened without following symlinks.

use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Component, Path, PathBuf};

/// Expands `$(VAR)` references of a `subPathExpr` with the container's environment, as
/// upstream: `$$` is a literal `$`, and a reference to a variable that is unset or empty is
/// an error naming every such variable (the pod then waits with CreateContainerConfigError
/// until, say, the annotation a downward-API variable reads appears).
pub fn expand_expr(expr: &str, vars: &[(String, String)]) -> Result<String, String> {
    let mut out = String::with_capacity(expr.len());
    let mut missing: Vec<&str> = Vec::new();
    let mut rest = expr;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        if let Some(tail) = after.strip_prefix('$') {
            out.push('$');
            rest = tail;
        } else if let Some(inner) = after.strip_prefix('(')
            && let Some(end) = inner.find(')')
        {
            let name = &inner[..end];
            match vars.iter().rev().find(|(k, _)| k == name) {
                Some((_, v)) if !v.is_empty() => out.push_str(v),
                _ => {
                    if !missing.contains(&name) {
                        missing.push(name);
                    }
                }
            }
            rest = &inner[end + 1..];
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    if !missing.is_empty() {
        missing.sort_unstable();
        return Err(format!("missing value for {}", missing.join(", ")));
    }
    Ok(out)
}

/// The checks upstream's kubelet makes on a subPath before touching the disk, with its
/// messages.
pub fn validate(sub: &str) -> Result<(), String> {
    if Path::new(sub).is_absolute() {
        return Err(format!("error SubPath `{sub}` must not be an absolute path"));
    }
    if Path::new(sub).components().any(|c| c == Component::ParentDir) {
        return Err(format!("unable to provision SubPath `{sub}`: must not contain '..'"));
    }
    Ok(())
}

/// Why a subPath could not be prepared.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("subpath {path:?} not within volume path {volume:?}")]
    Outside { path: PathBuf, volume: PathBuf },
    #[error("{path:?} is a symlink")]
    Symlink { path: PathBuf },
    #[error("{op} {path:?}: {source}")]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

fn io<'a>(op: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> Error + use<'a> {
    move |source| Error::Io { op, path: path.to_owned(), source }
}

/// Creates `sub` below `volume` if it does not exist yet (every new directory with the
/// volume root's permission bits, as upstream), refusing to follow a symlink out of the
/// volume.
pub fn make_dir(volume: &Path, sub: &Path) -> Result<(), Error> {
    let root = std::fs::canonicalize(volume).map_err(io("resolving", volume))?;
    let mode = std::fs::metadata(&root).map_err(io("reading", &root))?.permissions().mode() & 0o7777;
    // The longest prefix that exists, resolved (symlinks inside the volume are fine).
    let comps: Vec<&std::ffi::OsStr> = sub
        .components()
        .filter_map(|c| match c {
            Component::Normal(s) => Some(s),
            _ => None,
        })
        .collect();
    let mut existing = 0;
    while existing < comps.len() {
        let p: PathBuf = comps[..=existing].iter().fold(volume.to_path_buf(), |p, c| p.join(c));
        if std::fs::symlink_metadata(&p).is_err() {
            break;
        }
        existing += 1;
    }
    let prefix: PathBuf = comps[..existing].iter().fold(volume.to_path_buf(), |p, c| p.join(c));
    let base = std::fs::canonicalize(&prefix).map_err(io("resolving", &prefix))?;
    if !base.starts_with(&root) {
        return Err(Error::Outside { path: base, volume: root });
    }
    let mut dir = open_beneath(&root, base.strip_prefix(&root).expect("checked above"), true)?;
    let mut path = base;
    for c in &comps[existing..] {
        path.push(c);
        let name = CString::new(c.as_bytes()).map_err(|_| Error::Io {
            op: "creating",
            path: path.clone(),
            source: std::io::ErrorKind::InvalidInput.into(),
        })?;
        // SAFETY: a valid directory descriptor and a NUL-terminated name.
        if unsafe { libc::mkdirat(dir.as_raw_fd(), name.as_ptr(), mode) } != 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() != std::io::ErrorKind::AlreadyExists {
                return Err(Error::Io { op: "creating", path, source: e });
            }
        }
        dir = open_at(&dir, &name, libc::O_DIRECTORY | libc::O_RDONLY).map_err(io("opening", &path))?;
        // mkdirat honours the umask; the mode must be the volume's, as upstream sets it.
        // SAFETY: a valid descriptor.
        if unsafe { libc::fchmod(dir.as_raw_fd(), mode) } != 0 {
            return Err(Error::Io { op: "chmod", path, source: std::io::Error::last_os_error() });
        }
    }
    Ok(())
}

/// Opens `rel` (a path without symlinks, relative to `root`) component by component with
/// `O_NOFOLLOW`. `dir` asks for a directory descriptor that `*at` calls can use; otherwise
/// an `O_PATH` descriptor of whatever the last component is.
fn open_beneath(root: &Path, rel: &Path, dir: bool) -> Result<OwnedFd, Error> {
    let c_root = CString::new(root.as_os_str().as_bytes()).map_err(|_| Error::Io {
        op: "opening",
        path: root.to_owned(),
        source: std::io::ErrorKind::InvalidInput.into(),
    })?;
    // SAFETY: a NUL-terminated path; the descriptor is owned below.
    let fd = unsafe { libc::open(c_root.as_ptr(), libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(Error::Io {
            op: "opening",
            path: root.to_owned(),
            source: std::io::Error::last_os_error(),
        });
    }
    // SAFETY: fd was just opened and is owned by nobody else.
    let mut cur = unsafe { OwnedFd::from_raw_fd(fd) };
    let comps: Vec<_> = rel.components().collect();
    let mut path = root.to_path_buf();
    for (i, c) in comps.iter().enumerate() {
        let Component::Normal(name) = c else { continue };
        path.push(name);
        let last = i + 1 == comps.len();
        let flags = if last && !dir { libc::O_PATH } else { libc::O_PATH | libc::O_DIRECTORY };
        let name = CString::new(name.as_bytes()).map_err(|_| Error::Io {
            op: "opening",
            path: path.clone(),
            source: std::io::ErrorKind::InvalidInput.into(),
        })?;
        cur = open_at(&cur, &name, flags).map_err(|e| {
            if e.raw_os_error() == Some(libc::ELOOP) || e.raw_os_error() == Some(libc::ENOTDIR) {
                Error::Symlink { path: path.clone() }
            } else {
                Error::Io { op: "opening", path: path.clone(), source: e }
            }
        })?;
        // O_PATH|O_NOFOLLOW opens a symlink itself rather than failing: refuse it.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: a valid descriptor and a stat buffer of the right type.
        if unsafe { libc::fstat(cur.as_raw_fd(), &mut st) } == 0 && st.st_mode & libc::S_IFMT == libc::S_IFLNK
        {
            return Err(Error::Symlink { path });
        }
    }
    Ok(cur)
}

fn open_at(dir: &OwnedFd, name: &CString, flags: libc::c_int) -> std::io::Result<OwnedFd> {
    // SAFETY: a valid directory descriptor and a NUL-terminated name; the result is owned.
    let fd =
        unsafe { libc::openat(dir.as_raw_fd(), name.as_ptr(), flags | libc::O_NOFOLLOW | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: just opened, owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Prepares `sub` of the volume at `volume` for one container mount and returns the path to
/// give the runtime: `target`, a bind mount of the safely opened subPath. A missing subPath
/// is created as a directory first.
pub fn prepare(volume: &Path, sub: &str, target: &Path) -> Result<PathBuf, Error> {
    let full = volume.join(sub);
    if std::fs::symlink_metadata(&full).is_err() {
        make_dir(volume, Path::new(sub))?;
    }
    let root = std::fs::canonicalize(volume).map_err(io("resolving", volume))?;
    let real = std::fs::canonicalize(&full).map_err(io("resolving", &full))?;
    if !real.starts_with(&root) {
        return Err(Error::Outside { path: real, volume: root });
    }
    let fd = open_beneath(&root, real.strip_prefix(&root).expect("checked above"), false)?;
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: a valid descriptor and a stat buffer of the right type.
    if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
        return Err(Error::Io { op: "stat", path: real, source: std::io::Error::last_os_error() });
    }
    let is_dir = st.st_mode & libc::S_IFMT == libc::S_IFDIR;
    // A container restart mounts again: drop what the previous attempt left.
    if is_mount_point(target) {
        unmount(target)?;
    }
    if is_dir {
        std::fs::create_dir_all(target).map_err(io("creating", target))?;
    } else {
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent).map_err(io("creating", parent))?;
        }
        if std::fs::symlink_metadata(target).is_err() {
            std::fs::write(target, b"").map_err(io("creating", target))?;
        }
    }
    let source = CString::new(format!("/proc/self/fd/{}", fd.as_raw_fd())).expect("no NUL");
    let dest = CString::new(target.as_os_str().as_bytes()).map_err(|_| Error::Io {
        op: "mounting",
        path: target.to_owned(),
        source: std::io::ErrorKind::InvalidInput.into(),
    })?;
    // SAFETY: valid NUL-terminated strings; a bind mount takes no fstype or data.
    let rc = unsafe {
        libc::mount(source.as_ptr(), dest.as_ptr(), std::ptr::null(), libc::MS_BIND, std::ptr::null())
    };
    if rc != 0 {
        return Err(Error::Io {
            op: "bind-mounting onto",
            path: target.to_owned(),
            source: std::io::Error::last_os_error(),
        });
    }
    Ok(target.to_owned())
}

fn is_mount_point(p: &Path) -> bool {
    let Ok(mounts) = std::fs::read_to_string("/proc/self/mounts") else { return false };
    let want = p.display().to_string();
    mounts.lines().any(|l| l.split_whitespace().nth(1) == Some(want.as_str()))
}

fn unmount(p: &Path) -> Result<(), Error> {
    let c = CString::new(p.as_os_str().as_bytes()).map_err(|_| Error::Io {
        op: "unmounting",
        path: p.to_owned(),
        source: std::io::ErrorKind::InvalidInput.into(),
    })?;
    // SAFETY: a valid NUL-terminated path.
    if unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) } != 0 {
        return Err(Error::Io {
            op: "unmounting",
            path: p.to_owned(),
            source: std::io::Error::last_os_error(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(v: &[(&str, &str)]) -> Vec<(String, String)> {
        v.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect()
    }

    #[test]
    fn expands_and_names_missing_variables() {
        let v = vars(&[("POD_NAME", "web-0"), ("EMPTY", "")]);
        assert_eq!(expand_expr("logs/$(POD_NAME)", &v).unwrap(), "logs/web-0");
        assert_eq!(expand_expr("$$(POD_NAME)", &v).unwrap(), "$(POD_NAME)");
        assert_eq!(expand_expr("a$b", &v).unwrap(), "a$b");
        assert_eq!(
            expand_expr("$(ANNOTATION)/$(POD_NAME)/$(EMPTY)", &v).unwrap_err(),
            "missing value for ANNOTATION, EMPTY"
        );
    }

    #[test]
    fn refuses_absolute_and_backstepping_paths() {
        assert!(validate("a/b").is_ok());
        assert_eq!(validate("/tmp").unwrap_err(), "error SubPath `/tmp` must not be an absolute path");
        assert!(validate("..").is_err());
        assert!(validate("a/../../b").is_err());
        assert!(validate("a..b").is_ok());
    }

    #[test]
    fn creates_directories_with_the_volume_mode_and_never_leaves_the_volume() {
        let tmp = tempfile::tempdir().unwrap();
        let vol = tmp.path().join("vol");
        std::fs::create_dir(&vol).unwrap();
        std::fs::set_permissions(&vol, std::fs::Permissions::from_mode(0o777)).unwrap();
        make_dir(&vol, Path::new("a/b")).unwrap();
        let mode = std::fs::metadata(vol.join("a/b")).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o777);

        // A symlink inside the volume that points inside is followed...
        std::os::unix::fs::symlink("a", vol.join("in")).unwrap();
        make_dir(&vol, Path::new("in/c")).unwrap();
        assert!(vol.join("a/c").is_dir());
        // ...one that points out is refused, and nothing is created outside.
        let outside = tmp.path().join("outside");
        std::fs::create_dir(&outside).unwrap();
        std::os::unix::fs::symlink(&outside, vol.join("out")).unwrap();
        assert!(matches!(make_dir(&vol, Path::new("out/x")), Err(Error::Outside { .. })));
        assert!(!outside.join("x").exists());
    }

    #[test]
    fn opening_refuses_a_symlink_component() {
        let tmp = tempfile::tempdir().unwrap();
        let vol = tmp.path().join("vol");
        std::fs::create_dir_all(vol.join("d")).unwrap();
        std::os::unix::fs::symlink("d", vol.join("link")).unwrap();
        assert!(open_beneath(&vol, Path::new("d"), false).is_ok());
        assert!(matches!(open_beneath(&vol, Path::new("link"), false), Err(Error::Symlink { .. })));
    }
}
