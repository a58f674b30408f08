//! lazyfs: a FUSE filesystem that forgets, on a crash, exactly what a power cut forgets.
//!
//! Tests that kill a process keep the kernel's page cache, so a program that never calls
//! fsync passes them. Mounted over a backing directory, lazyfs holds every write in its own
//! memory until the file is fsynced; `kill -9` of lazyfs (then `umount -l`) leaves the
//! backing directory as a disk would be after losing power. The idea is LazyFS's (Ramos et
//! al.), rebuilt small for our tests.

pub mod dirty;
pub mod fs;

pub use fs::LazyFs;
