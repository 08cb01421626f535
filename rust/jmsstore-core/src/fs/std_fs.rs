//! The real file system.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom};
use std::os::unix::fs::{DirBuilderExt, FileExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::{FileSystem, LockGuard, OpenMode, StorageFile};

/// The operating system's file system. Files are created owner-only (0600),
/// directories 0700.
#[derive(Clone, Copy, Debug, Default)]
pub struct StdFs;

struct StdFile(File);

impl StorageFile for StdFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        self.0.read_at(buf, offset)
    }

    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.0.write_all_at(buf, offset)
    }

    fn sync_data(&self) -> io::Result<()> {
        self.0.sync_data()
    }

    fn len(&self) -> io::Result<u64> {
        Ok(self.0.metadata()?.len())
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        self.0.set_len(len)
    }

    fn read_all_into(&self, buf: &mut Vec<u8>) -> io::Result<()> {
        // `read_to_end` fills the spare capacity without zeroing it first,
        // which matters when recovery reads gigabytes. All other I/O here is
        // positional, so moving the descriptor's cursor disturbs nobody.
        let len = self.len()?;
        buf.clear();
        buf.reserve(len as usize);
        let mut file = &self.0;
        file.seek(SeekFrom::Start(0))?;
        file.take(len).read_to_end(buf)?;
        if buf.len() as u64 != len {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "file shrank while being read"));
        }
        Ok(())
    }
}

struct FlockGuard(#[allow(dead_code)] File);

impl LockGuard for FlockGuard {}

impl FileSystem for StdFs {
    fn open(&self, path: &Path, mode: OpenMode) -> io::Result<Arc<dyn StorageFile>> {
        let mut options = OpenOptions::new();
        options.read(true).write(mode.write).mode(0o600);
        if mode.create_new {
            options.create_new(true);
        } else if mode.create {
            options.create(true);
        }
        if mode.dsync {
            options.custom_flags(libc::O_DSYNC);
        }
        Ok(Arc::new(StdFile(options.open(path)?)))
    }

    fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        fs::DirBuilder::new().recursive(true).mode(0o700).create(path)
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<PathBuf>> {
        fs::read_dir(dir)?.map(|entry| entry.map(|e| e.path())).collect()
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        fs::rename(from, to)
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        fs::remove_file(path)
    }

    fn remove_dir(&self, path: &Path) -> io::Result<()> {
        fs::remove_dir(path)
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        File::open(dir)?.sync_all()
    }

    fn exists(&self, path: &Path) -> bool {
        path.exists()
    }

    fn is_dir(&self, path: &Path) -> bool {
        path.is_dir()
    }

    fn try_lock(&self, path: &Path) -> io::Result<Option<Box<dyn LockGuard>>> {
        let file = OpenOptions::new().read(true).write(true).create(true).truncate(false).mode(0o600).open(path)?;
        // flock locks belong to the open file description, so a second open in
        // this same process is refused too, which is what we want.
        // SAFETY: flock on a valid, owned descriptor.
        let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        if rc == 0 {
            return Ok(Some(Box::new(FlockGuard(file))));
        }
        let err = io::Error::last_os_error();
        if err.raw_os_error() == Some(libc::EWOULDBLOCK) {
            Ok(None)
        } else {
            Err(err)
        }
    }
}
