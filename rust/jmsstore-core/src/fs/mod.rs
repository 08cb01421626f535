//! The file layer the store writes through.
//!
//! Everything the store does to disk goes through [`FileSystem`] and
//! [`StorageFile`], so the same store code runs on the real file system
//! ([`StdFs`]) and on [`sim::SimFs`], an in-memory file system that can
//! simulate a power loss at any instant (dropping what was not synced and
//! tearing the last write) and inject failing syncs or a full disk.

pub mod pool;
pub mod sim;
mod std_fs;

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub use pool::PooledFs;
pub use std_fs::StdFs;

/// How to open a file.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OpenMode {
    /// Open for writing as well as reading.
    pub write: bool,
    /// Create the file if it does not exist (owner-only permissions).
    pub create: bool,
    /// Fail if the file already exists (with `create`).
    pub create_new: bool,
    /// Every write is durable when it returns (`O_DSYNC`).
    pub dsync: bool,
}

impl OpenMode {
    /// Read-only.
    pub const READ: OpenMode = OpenMode { write: false, create: false, create_new: false, dsync: false };
    /// Read-write, existing file.
    pub const WRITE: OpenMode = OpenMode { write: true, create: false, create_new: false, dsync: false };
    /// Read-write, a new file that must not exist yet.
    pub const CREATE_NEW: OpenMode = OpenMode { write: true, create: true, create_new: true, dsync: false };
}

/// A file opened through a [`FileSystem`].
pub trait StorageFile: Send + Sync {
    /// Reads up to `buf.len()` bytes at `offset`; returns how many were read (0 at end of file).
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize>;
    /// Writes all of `buf` at `offset`.
    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()>;
    /// Makes the file's data durable (`fdatasync`).
    fn sync_data(&self) -> io::Result<()>;
    /// The file's current length.
    fn len(&self) -> io::Result<u64>;
    /// Truncates or extends the file.
    fn set_len(&self, len: u64) -> io::Result<()>;

    /// Asks that the file keep its descriptor while `keep` (a file layer that
    /// closes idle files, [`PooledFs`], otherwise may): for the file written
    /// all the time.
    fn keep_open(&self, _keep: bool) {}

    /// True if the file is empty.
    fn is_empty(&self) -> io::Result<bool> {
        Ok(self.len()? == 0)
    }

    /// Replaces `buf`'s content with the whole file.
    fn read_all_into(&self, buf: &mut Vec<u8>) -> io::Result<()> {
        let len = self.len()? as usize;
        buf.clear();
        buf.resize(len, 0);
        self.read_exact_at(buf, 0)
    }

    /// Reads exactly `buf.len()` bytes at `offset`.
    fn read_exact_at(&self, mut buf: &mut [u8], mut offset: u64) -> io::Result<()> {
        while !buf.is_empty() {
            match self.read_at(buf, offset)? {
                0 => return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "file ended early")),
                n => {
                    buf = &mut buf[n..];
                    offset += n as u64;
                }
            }
        }
        Ok(())
    }
}

/// A held advisory lock; released when dropped.
pub trait LockGuard: Send + Sync {}

/// A directory tree the store lives in.
pub trait FileSystem: Send + Sync {
    /// Opens (or creates) a file.
    fn open(&self, path: &Path, mode: OpenMode) -> io::Result<Arc<dyn StorageFile>>;
    /// Creates a directory and its parents (owner-only permissions).
    fn create_dir_all(&self, path: &Path) -> io::Result<()>;
    /// The entries of a directory (full paths), in no particular order.
    fn list(&self, dir: &Path) -> io::Result<Vec<PathBuf>>;
    /// Atomically renames a file.
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
    /// Removes a file.
    fn remove_file(&self, path: &Path) -> io::Result<()>;
    /// Removes an empty directory (fails if it holds anything).
    fn remove_dir(&self, path: &Path) -> io::Result<()>;
    /// Makes the directory's entries (creations, renames, removals) durable.
    fn sync_dir(&self, dir: &Path) -> io::Result<()>;
    /// True if the path exists.
    fn exists(&self, path: &Path) -> bool;
    /// True if the path is a directory.
    fn is_dir(&self, path: &Path) -> bool;
    /// Takes an exclusive lock on `path` (created if missing) without waiting.
    /// Returns `Ok(None)` if someone else holds it.
    fn try_lock(&self, path: &Path) -> io::Result<Option<Box<dyn LockGuard>>>;
}
