//! Paging files: scratch space for the bodies of non-persistent messages
//! that do not fit in the message buffer.
//!
//! Bodies are appended to numbered files in the paging directory; each file
//! counts its live bytes and is emptied (truncated and reused) once nothing
//! in it is live, so space comes back as messages go. Nothing here is ever
//! recovered: the directory's paging files are removed when a pager starts.
//!
//! # Sharing between destinations
//!
//! One [`PagingFiles`] serves every destination of a pager, from many
//! threads at once, and must not become the lock that the pager's
//! per-destination locking was meant to remove. Its bookkeeping (which file
//! takes appends, each file's length and live bytes) sits under one mutex
//! held only to hand space out or take it back: never across a read, a
//! write, or the creation or truncation of a file.
//!
//! - A writer reserves its extent under the mutex (the file's length moves
//!   past it and its bytes count as live at once), then writes it with a
//!   positional write on the shared file handle with no lock held. Writers
//!   to one file never wait for each other, and since a reserved extent is
//!   live, the file cannot be emptied under a write in flight.
//! - A reader looks the file handle up under the mutex (an `Arc` clone) and
//!   reads with a positional read. Bodies are read, and freed, only by the
//!   holder of their destination's lock, so a read never races with the
//!   free of its own extent.
//! - Freeing is bookkeeping; truncating a file whose live bytes reached zero
//!   is I/O, so [`PagingFiles::free`] only names the file and the caller
//!   calls [`PagingFiles::empty`] once it holds no lock. While a file is
//!   being truncated it is marked so that no writer picks it. The name is a
//!   hint: if a writer reserved space in the file in between, `empty` leaves
//!   it alone (it is emptied when its live bytes next reach zero).
//! - A new file is created outside the mutex too; two writers may each
//!   create one at the same moment, and both files are used.

use std::borrow::Cow;
use std::fs::{self, File, OpenOptions};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use crate::codec::{self, Codec, CodecId};
use crate::error::{Error, Result};

/// Paging files roll over at this size.
const FILE_BYTES: u64 = 64 << 20;
/// A paged body's file index is kept in 16 bits (see the pager's `PagedAt`).
pub const MAX_FILES: usize = 1 << 16;
const PREFIX: &str = "jmsstore-paging-";
const SUFFIX: &str = ".page";
/// Marks a directory as a jmsstore paging directory, which may be emptied.
const MARKER: &str = ".jmsstore-paging";

/// Where a paged-out body is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PagedRef {
    /// Paging file index.
    pub file: u32,
    /// Length as stored (after the paging codec).
    pub stored_len: u32,
    /// Offset in the file.
    pub offset: u64,
    /// Codec of the stored bytes.
    pub codec: CodecId,
}

/// An open paging file, shared by the threads writing and reading it.
struct Handle {
    file: File,
    path: PathBuf,
}

/// A paging file's space, as the mutex keeps it.
struct FileSpace {
    handle: Arc<Handle>,
    /// Bytes reserved so far (the next append goes here).
    len: u64,
    /// Of those, bytes of bodies not yet freed (or being written).
    live: u64,
    /// Being truncated by [`PagingFiles::empty`]: no writer picks it.
    emptying: bool,
}

struct Space {
    files: Vec<FileSpace>,
    /// The file appends go to, if it still takes them.
    current: Option<usize>,
    /// Number in the name of the next file made.
    next_number: u64,
    /// After [`PagingFiles::remove_all`]: nothing more is written.
    closed: bool,
}

impl Space {
    /// A file that takes `n` more bytes: the current one while it has room
    /// (or is empty), else an emptied one, else None (make a new one).
    fn pick(&mut self, n: u64) -> Option<usize> {
        if let Some(c) = self.current {
            let f = &self.files[c];
            if !f.emptying && (f.len == 0 || f.len + n <= FILE_BYTES) {
                return Some(c);
            }
        }
        let i = self.files.iter().position(|f| f.len == 0 && !f.emptying)?;
        self.current = Some(i);
        Some(i)
    }
}

/// What a test hook is told about (see `PagingFiles::set_io_hook`).
#[cfg(test)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Io {
    Write,
    Read,
}

/// A test's hook: may block, or fail the I/O with the error it returns.
#[cfg(test)]
pub(crate) type IoHook = Arc<dyn Fn(Io) -> std::io::Result<()> + Send + Sync>;

/// The paging files of one pager, shared by all its destinations.
pub struct PagingFiles {
    dir: PathBuf,
    codec: Codec,
    space: Mutex<Space>,
    /// Bytes in the files (reserved, not yet reclaimed), readable without the mutex.
    file_bytes: AtomicU64,
    /// Called with no lock of this module held before each write and read,
    /// so that tests can make one slow or block it.
    #[cfg(test)]
    hook: Mutex<Option<IoHook>>,
}

fn lock(m: &Mutex<Space>) -> MutexGuard<'_, Space> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl PagingFiles {
    /// Prepares `dir`: creates it if needed, checks that it is a writable
    /// directory and empties it (it is scratch). A directory that holds
    /// files but no jmsstore marker is refused rather than emptied: it is
    /// somebody else's.
    pub fn open(dir: &Path, codec: Codec) -> Result<PagingFiles> {
        if dir.exists() && !dir.is_dir() {
            return Err(Error::invalid(format!("paging directory {} is not a directory", dir.display())));
        }
        fs::create_dir_all(dir)
            .map_err(|e| Error::invalid(format!("paging directory {} cannot be created: {e}", dir.display())))?;
        let list = || -> Result<Vec<PathBuf>> {
            fs::read_dir(dir)
                .map_err(|e| Error::io("listing paging directory", dir, e))?
                .map(|entry| entry.map(|e| e.path()).map_err(|e| Error::io("listing paging directory", dir, e)))
                .collect()
        };
        let entries = list()?;
        let marker = dir.join(MARKER);
        if !entries.is_empty() && !marker.exists() {
            return Err(Error::invalid(format!(
                "paging directory {} is not empty and was not made by jmsstore; refusing to empty it",
                dir.display()
            )));
        }
        for path in entries {
            if path != marker && path.is_file() {
                fs::remove_file(&path).map_err(|e| Error::io("emptying paging directory", &path, e))?;
            }
        }
        if !marker.exists() {
            fs::write(&marker, b"jmsstore paging directory: scratch, emptied when a pager starts\n").map_err(|e| {
                if e.kind() == std::io::ErrorKind::PermissionDenied {
                    Error::invalid(format!("paging directory {} is not writable", dir.display()))
                } else {
                    Error::io("marking paging directory", dir, e)
                }
            })?;
        }
        // The first file is made now, so that an unwritable directory is
        // reported when the pager is made, not at its first page-out.
        let first = create_file(dir, 0).map_err(|e| match e {
            Error::Io { source, .. } if source.kind() == std::io::ErrorKind::PermissionDenied => {
                Error::invalid(format!("paging directory {} is not writable", dir.display()))
            }
            other => other,
        })?;
        Ok(PagingFiles {
            dir: dir.to_path_buf(),
            codec,
            space: Mutex::new(Space {
                files: vec![FileSpace { handle: Arc::new(first), len: 0, live: 0, emptying: false }],
                current: Some(0),
                next_number: 1,
                closed: false,
            }),
            file_bytes: AtomicU64::new(0),
            #[cfg(test)]
            hook: Mutex::new(None),
        })
    }

    /// Bytes in the paging files (written or being written, not yet reclaimed).
    pub fn file_bytes(&self) -> u64 {
        self.file_bytes.load(Relaxed)
    }

    /// Reserves `n` bytes at the end of a file that has room; returns the
    /// file's index, its handle and the offset. Makes a new file (outside
    /// the mutex) when none has room.
    fn reserve(&self, n: u64) -> Result<(usize, Arc<Handle>, u64)> {
        loop {
            let number = {
                let mut space = lock(&self.space);
                if space.closed {
                    return Err(Error::Closed);
                }
                if let Some(i) = space.pick(n) {
                    let f = &mut space.files[i];
                    let offset = f.len;
                    f.len += n;
                    f.live += n;
                    self.file_bytes.fetch_add(n, Relaxed);
                    return Ok((i, f.handle.clone(), offset));
                }
                if space.files.len() >= MAX_FILES {
                    return Err(Error::Full(format!(
                        "the paging directory {} holds {MAX_FILES} paging files, the most a pager uses",
                        self.dir.display()
                    )));
                }
                space.next_number += 1;
                space.next_number - 1
            };
            let handle = create_file(&self.dir, number)?;
            let mut space = lock(&self.space);
            if space.closed {
                let _ = fs::remove_file(&handle.path);
                return Err(Error::Closed);
            }
            space.files.push(FileSpace { handle: Arc::new(handle), len: 0, live: 0, emptying: false });
            space.current = Some(space.files.len() - 1);
        }
    }

    /// Writes the bodies of `items` (`body` gives each) one after the
    /// other into one extent of one file, in one write, then tells
    /// `written` where each went (by its place in `items`). Encoding and
    /// the write run with no lock held. One body, the usual page-out, is
    /// written as it is, with nothing allocated.
    pub fn write_many<'a, T>(
        &self,
        items: &'a [T],
        body: impl Fn(&'a T) -> &'a [u8],
        mut written: impl FnMut(usize, PagedRef),
    ) -> Result<()> {
        if let [one] = items {
            let (codec, stored) = codec::encode_body(self.codec, 0, body(one));
            let offset_and_file = self.write_run(&stored)?;
            written(
                0,
                PagedRef { file: offset_and_file.1, stored_len: stored.len() as u32, offset: offset_and_file.0, codec },
            );
            return Ok(());
        }
        let encoded: Vec<(CodecId, Cow<'a, [u8]>)> =
            items.iter().map(|item| codec::encode_body(self.codec, 0, body(item))).collect();
        let total: usize = encoded.iter().map(|(_, stored)| stored.len()).sum();
        let mut run = Vec::with_capacity(total);
        for (_, stored) in &encoded {
            run.extend_from_slice(stored);
        }
        let (mut at, file) = self.write_run(&run)?;
        for (i, (codec, stored)) in encoded.iter().enumerate() {
            written(i, PagedRef { file, stored_len: stored.len() as u32, offset: at, codec: *codec });
            at += stored.len() as u64;
        }
        Ok(())
    }

    /// Reserves room for `run` and writes it there; returns the offset and
    /// the file.
    fn write_run(&self, run: &[u8]) -> Result<(u64, u32)> {
        let n = run.len() as u64;
        let (index, handle, offset) = self.reserve(n)?;
        let write = || handle.file.write_all_at(run, offset);
        #[cfg(test)]
        let write = || self.call_hook(Io::Write).and_then(|()| write());
        if let Err(e) = write() {
            // Give the extent back; the file may be empty again.
            if self.free_extent(index, n) {
                self.empty(index as u32);
            }
            return Err(Error::io("writing paging file", &handle.path, e));
        }
        Ok((offset, index as u32))
    }

    /// Appends one body; returns where it went.
    pub fn write(&self, body: &[u8]) -> Result<PagedRef> {
        let mut at = None;
        self.write_many(&[body], |b| b, |_, r| at = Some(r))?;
        at.ok_or_else(|| Error::invalid("no paging reference for a written body"))
    }

    /// A file's handle, looked up under the mutex.
    fn handle(&self, file: u32) -> Result<Arc<Handle>> {
        let space = lock(&self.space);
        if space.closed {
            return Err(Error::Closed);
        }
        space
            .files
            .get(file as usize)
            .map(|f| f.handle.clone())
            .ok_or_else(|| Error::invalid(format!("no paging file {file}")))
    }

    /// Reads a run of bodies: one read when they are contiguous in one file
    /// (as bodies paged out together are), else one read each.
    pub fn read_many(&self, refs: &[(PagedRef, usize)]) -> Result<Vec<Arc<[u8]>>> {
        let contiguous = refs
            .windows(2)
            .all(|w| w[0].0.file == w[1].0.file && w[0].0.offset + u64::from(w[0].0.stored_len) == w[1].0.offset);
        if contiguous && refs.len() > 1 {
            let first = refs[0].0;
            let last = refs[refs.len() - 1].0;
            let handle = self.handle(first.file)?;
            #[cfg(test)]
            self.call_hook(Io::Read).map_err(|e| Error::io("reading paging file", &handle.path, e))?;
            let mut buf = vec![0u8; (last.offset + u64::from(last.stored_len) - first.offset) as usize];
            handle
                .file
                .read_exact_at(&mut buf, first.offset)
                .map_err(|e| Error::io("reading paging file", &handle.path, e))?;
            return refs
                .iter()
                .map(|(r, raw_len)| {
                    let start = (r.offset - first.offset) as usize;
                    codec::decode_shared(r.codec, &buf[start..start + r.stored_len as usize], *raw_len)
                })
                .collect();
        }
        refs.iter().map(|(r, raw_len)| codec::decode_shared(r.codec, &self.read_stored(*r)?, *raw_len)).collect()
    }

    /// Reads one body back.
    pub fn read(&self, r: PagedRef, raw_len: usize) -> Result<Vec<u8>> {
        codec::decode(r.codec, &self.read_stored(r)?, raw_len)
    }

    /// A body's bytes as stored (compressed or not).
    fn read_stored(&self, r: PagedRef) -> Result<Vec<u8>> {
        let handle = self.handle(r.file)?;
        #[cfg(test)]
        self.call_hook(Io::Read).map_err(|e| Error::io("reading paging file", &handle.path, e))?;
        let mut buf = vec![0u8; r.stored_len as usize];
        handle.file.read_exact_at(&mut buf, r.offset).map_err(|e| Error::io("reading paging file", &handle.path, e))?;
        Ok(buf)
    }

    /// Frees a body's space. Returns the file's index when nothing in it is
    /// live any more: the caller then calls [`PagingFiles::empty`] with it,
    /// once it holds no lock.
    #[must_use = "a file with nothing live is truncated by `empty`, called once no lock is held"]
    pub fn free(&self, r: PagedRef) -> Option<u32> {
        self.free_extent(r.file as usize, u64::from(r.stored_len)).then_some(r.file)
    }

    /// Takes `n` live bytes off file `index`; true if it has nothing live left.
    fn free_extent(&self, index: usize, n: u64) -> bool {
        let mut space = lock(&self.space);
        let Some(f) = space.files.get_mut(index) else { return false };
        f.live -= n;
        f.live == 0 && f.len > 0 && !f.emptying
    }

    /// Truncates file `index` if nothing in it is live (space comes back at
    /// once); the truncation runs outside the mutex, the file marked so
    /// that no writer picks it meanwhile.
    pub fn empty(&self, index: u32) {
        let index = index as usize;
        let (handle, len) = {
            let mut space = lock(&self.space);
            if space.closed {
                return;
            }
            let Some(f) = space.files.get_mut(index) else { return };
            if f.live != 0 || f.len == 0 || f.emptying {
                return;
            }
            f.emptying = true;
            let taken = (f.handle.clone(), f.len);
            if space.current == Some(index) {
                space.current = None;
            }
            taken
        };
        let truncated = handle.file.set_len(0).is_ok();
        let mut space = lock(&self.space);
        if let Some(f) = space.files.get_mut(index) {
            f.emptying = false;
            // Nobody reserved space in it meanwhile (it was marked), so
            // `len` is unchanged; a failed truncation keeps it as it is.
            if truncated {
                f.len = 0;
                self.file_bytes.fetch_sub(len, Relaxed);
            }
        }
    }

    /// [`PagingFiles::empty`] for each file named.
    pub fn empty_all(&self, files: Vec<u32>) {
        for index in files {
            self.empty(index);
        }
    }

    /// Removes the paging files; nothing more is written (a write fails
    /// with [`Error::Closed`]).
    pub fn remove_all(&self) {
        let files = {
            let mut space = lock(&self.space);
            space.closed = true;
            space.current = None;
            std::mem::take(&mut space.files)
        };
        for f in files {
            let _ = fs::remove_file(&f.handle.path);
        }
        self.file_bytes.store(0, Relaxed);
    }

    /// Makes `hook` run (with no lock of this module held) before each
    /// write and read, or no hook with None.
    #[cfg(test)]
    pub(crate) fn set_io_hook(&self, hook: Option<IoHook>) {
        *self.hook.lock().unwrap_or_else(PoisonError::into_inner) = hook;
    }

    #[cfg(test)]
    fn call_hook(&self, io: Io) -> std::io::Result<()> {
        let hook = self.hook.lock().unwrap_or_else(PoisonError::into_inner).clone();
        hook.map_or(Ok(()), |hook| hook(io))
    }
}

/// Creates (or truncates) paging file number `number` in `dir`, owner-only.
fn create_file(dir: &Path, number: u64) -> Result<Handle> {
    let path = dir.join(format!("{PREFIX}{number:06}{SUFFIX}"));
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&path)
        .map_err(|e| Error::io("creating paging file", &path, e))?;
    Ok(Handle { file, path })
}

impl Drop for PagingFiles {
    fn drop(&mut self) {
        self.remove_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_emptied_while_written_elsewhere_comes_back_and_is_reused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = PagingFiles::open(dir.path(), Codec::None).expect("open");
        let mut refs = Vec::new();
        p.write_many(&[&[1u8; 100][..], &[2u8; 50][..]], |b| b, |_, r| refs.push(r)).expect("write");
        assert_eq!((refs[0].offset, refs[1].offset, refs[1].file), (0, 100, 0));
        assert_eq!(p.read_many(&[(refs[0], 100), (refs[1], 50)]).expect("read")[1][..], [2u8; 50]);
        assert_eq!(p.file_bytes(), 150);
        assert_eq!(p.free(refs[0]), None, "still live");
        let emptied = p.free(refs[1]);
        assert_eq!(emptied, Some(0));
        // A write in between (the name is a hint): the file is not truncated under it.
        let again = p.write(&[3u8; 10]).expect("write");
        p.empty(0);
        assert_eq!(p.file_bytes(), 160);
        assert_eq!(p.read(again, 10).expect("read"), vec![3u8; 10]);
        let emptied = p.free(again).expect("empty now");
        p.empty(emptied);
        assert_eq!(p.file_bytes(), 0);
        assert_eq!(p.write(&[4u8; 10]).expect("write").offset, 0, "the emptied file is reused from its start");
    }

    #[test]
    fn nothing_is_written_after_remove_all() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = PagingFiles::open(dir.path(), Codec::None).expect("open");
        let r = p.write(b"x").expect("write");
        p.remove_all();
        assert!(matches!(p.write(b"y"), Err(Error::Closed)));
        assert!(matches!(p.read(r, 1), Err(Error::Closed)));
        assert_eq!(p.free(r), None);
        let left: Vec<_> = fs::read_dir(dir.path()).expect("list").flatten().map(|e| e.file_name()).collect();
        assert_eq!(left, vec![std::ffi::OsString::from(MARKER)]);
    }
}
