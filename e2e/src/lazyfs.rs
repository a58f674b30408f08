//! A disk that can lose power: a `lazyfs` mount (see the lazyfs crate) over a backing
//! directory. Data written but not fsynced lives only in the lazyfs process; a power cut
//! kills that process and detaches the mount, leaving the backing directory as a disk would
//! be after the machine lost power. Mounting again serves what survived.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

pub struct LazyDisk {
    /// Holds the backing directory and the mountpoint.
    dir: tempfile::TempDir,
    child: Option<Child>,
    /// How many times the disk lost power.
    pub power_cuts: usize,
}

/// Panics with what is missing unless this process can mount FUSE filesystems.
pub fn require_fuse() {
    // SAFETY: geteuid has no preconditions.
    assert_eq!(unsafe { libc::geteuid() }, 0, "power-loss tests mount FUSE filesystems: they need root");
    assert!(
        Path::new("/dev/fuse").exists(),
        "/dev/fuse is missing: the power-loss tests need the kernel's FUSE module"
    );
}

impl LazyDisk {
    /// A new empty disk, mounted.
    pub fn new() -> LazyDisk {
        require_fuse();
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir(dir.path().join("backing")).expect("backing dir");
        std::fs::create_dir(dir.path().join("mnt")).expect("mountpoint");
        let mut disk = LazyDisk { dir, child: None, power_cuts: 0 };
        disk.mount();
        disk
    }

    /// Where the disk is mounted: put data dirs under it.
    pub fn path(&self) -> PathBuf {
        self.dir.path().join("mnt")
    }

    /// What has reached the disk (synced data).
    pub fn backing(&self) -> PathBuf {
        self.dir.path().join("backing")
    }

    fn mount(&mut self) {
        assert!(self.child.is_none(), "already mounted");
        let mut child = Command::new(crate::bin("lazyfs"))
            .arg("--backing")
            .arg(self.backing())
            .arg(self.path())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("starting lazyfs");
        let mut line = String::new();
        let stdout = child.stdout.take().expect("piped stdout");
        // lazyfs prints `mounted` once the mount exists, or exits with the reason.
        let read = BufReader::new(stdout).read_line(&mut line);
        if !matches!(read, Ok(_) if line.trim() == "mounted") {
            let _ = child.kill();
            let status = child.wait();
            panic!("lazyfs did not mount {} ({status:?}): see its stderr above", self.path().display());
        }
        self.child = Some(child);
    }

    /// The power goes out and comes back: everything not fsynced is lost. The processes
    /// using the disk must already be dead (as they would be without power).
    pub fn power_cut(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        crate::unmount_under(&self.path());
        self.power_cuts += 1;
        self.mount();
    }
}

impl Default for LazyDisk {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for LazyDisk {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        crate::unmount_under(&self.path());
    }
}
