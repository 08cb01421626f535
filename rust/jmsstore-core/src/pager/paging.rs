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
//! per-destination locking was meant to remove, in this process or in the
//! kernel.
//!
//! - The open files sit in a table made once per file and kept until the
//!   pager goes: a read or a write finds its file with no lock and no
//!   reference count, and reads or writes it with positional I/O on the
//!   shared handle, with no lock held.
//! - Handing out space (which file takes appends, each file's length) is
//!   under one mutex held for that bookkeeping only: never across a read, a
//!   write, or the creation or truncation of a file. A writer reserves its
//!   extent there (its bytes count as live at once) and then writes it, so
//!   a file cannot be emptied under a write in flight. Appends are spread
//!   over [`SHARDS`] files at a time, by the caller's shard (its
//!   destination): writers to one file would otherwise queue on the file's
//!   lock in the kernel. The price is scratch space: up to [`SHARDS`] files
//!   partly live at once where one file took every append before.
//! - Each file's live bytes are an atomic, so that freeing a body takes no
//!   lock. Bodies are read, and freed, only by the holder of their
//!   destination's lock, so a read never races with the free of its own
//!   extent.
//! - Truncating a file whose live bytes reached zero is I/O, so
//!   [`PagingFiles::free`] only names the file and the caller calls
//!   [`PagingFiles::empty`] once it holds no lock. While a file is being
//!   truncated it is marked so that no writer picks it. The name is a hint:
//!   if a writer reserved space in the file in between, `empty` leaves it
//!   alone (it is emptied when its live bytes next reach zero).
//! - A new file is created outside the mutex too, its index reserved first.

use std::borrow::Cow;
use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed, Ordering::SeqCst};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};

use crate::codec::{self, Codec, CodecId};
use crate::error::{Error, Result};

/// Paging files roll over at this size.
const FILE_BYTES: u64 = 64 << 20;
/// A paged body's file index is kept in 16 bits (see the pager's `PagedAt`).
pub const MAX_FILES: usize = 1 << 16;
/// Files taking appends at once; a writer's shard picks one.
pub const SHARDS: usize = 4;
/// The file table is made this many files at a time.
const FILES_PER_CHUNK: usize = 256;
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
struct PagingFile {
    file: File,
    path: PathBuf,
    /// Bytes of bodies not yet freed (or being written).
    live: AtomicU64,
}

/// Who takes appends where, under the mutex.
struct Space {
    /// By file index: bytes reserved so far (the next append goes there).
    len: Vec<u64>,
    /// By file index: being truncated, or being created: no writer picks it.
    busy: Vec<bool>,
    /// By shard: the file appends go to, if it still takes them.
    current: [Option<usize>; SHARDS],
    /// Number in the name of the next file made.
    next_number: u64,
    /// After [`PagingFiles::remove_all`]: nothing more is written.
    closed: bool,
}

impl Space {
    /// A file that takes `n` more bytes for `shard`: its current one while
    /// it has room (or is empty), else an emptied one no other shard is
    /// appending to, else None (make a new one).
    fn pick(&mut self, n: u64, shard: usize) -> Option<usize> {
        if let Some(c) = self.current[shard] {
            if !self.busy[c] && (self.len[c] == 0 || self.len[c] + n <= FILE_BYTES) {
                return Some(c);
            }
        }
        let current = self.current;
        let i = (0..self.len.len()).find(|&i| self.len[i] == 0 && !self.busy[i] && !current.contains(&Some(i)))?;
        self.current[shard] = Some(i);
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

/// [`FILES_PER_CHUNK`] files of the table, each set once created.
type FileChunk = Box<[OnceLock<PagingFile>]>;

/// The paging files of one pager, shared by all its destinations.
pub struct PagingFiles {
    dir: PathBuf,
    codec: Codec,
    /// The files by index, in chunks made as needed; an entry is set once
    /// its file is created and stays until the pager goes.
    files: Box<[OnceLock<FileChunk>]>,
    space: Mutex<Space>,
    /// Bytes in the files (reserved, not yet reclaimed), readable without the mutex.
    file_bytes: AtomicU64,
    closed: AtomicBool,
    /// Called with no lock of this module held before each write and read,
    /// so that tests can make one slow, block it or fail it.
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
        if dir.as_os_str().is_empty() {
            // Not the current directory: that is nobody's scratch.
            return Err(Error::invalid("the paging directory path is empty"));
        }
        if dir.exists() && !dir.is_dir() {
            return Err(Error::invalid(format!("paging directory {} is not a directory", dir.display())));
        }
        // Owner-only, as the store directory: paged-out bodies are message data.
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
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
            let write_marker = || -> std::io::Result<()> {
                let mut file = OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(&marker)?;
                file.write_all(b"jmsstore paging directory: scratch, emptied when a pager starts\n")
            };
            write_marker().map_err(|e| {
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
        let files = PagingFiles {
            dir: dir.to_path_buf(),
            codec,
            files: (0..MAX_FILES / FILES_PER_CHUNK).map(|_| OnceLock::new()).collect(),
            space: Mutex::new(Space {
                len: vec![0],
                busy: vec![false],
                current: [None; SHARDS],
                next_number: 1,
                closed: false,
            }),
            file_bytes: AtomicU64::new(0),
            closed: AtomicBool::new(false),
            #[cfg(test)]
            hook: Mutex::new(None),
        };
        files.set_file(0, first);
        Ok(files)
    }

    /// Bytes in the paging files (written or being written, not yet reclaimed).
    pub fn file_bytes(&self) -> u64 {
        self.file_bytes.load(Relaxed)
    }

    /// File `index`, if it was created (no lock).
    fn get(&self, index: usize) -> Option<&PagingFile> {
        self.files.get(index / FILES_PER_CHUNK)?.get()?.get(index % FILES_PER_CHUNK)?.get()
    }

    /// File `index` for a read or a write; [`Error::Closed`] once the files are removed.
    fn file(&self, index: u32) -> Result<&PagingFile> {
        if self.closed.load(SeqCst) {
            return Err(Error::Closed);
        }
        self.get(index as usize).ok_or_else(|| Error::invalid(format!("no paging file {index}")))
    }

    fn set_file(&self, index: usize, file: PagingFile) {
        let chunk =
            self.files[index / FILES_PER_CHUNK].get_or_init(|| (0..FILES_PER_CHUNK).map(|_| OnceLock::new()).collect());
        // An index is reserved for one file only, so this is its first set.
        let _ = chunk[index % FILES_PER_CHUNK].set(file);
    }

    /// Reserves `n` bytes at the end of a file that has room for `shard`;
    /// returns the file's index, the file and the offset. Makes a new file
    /// (outside the mutex) when none has room.
    fn reserve(&self, n: u64, shard: usize) -> Result<(usize, &PagingFile, u64)> {
        let shard = shard % SHARDS;
        loop {
            let (index, number) = {
                let mut space = lock(&self.space);
                if space.closed {
                    return Err(Error::Closed);
                }
                if let Some(i) = space.pick(n, shard) {
                    let file = self.get(i).ok_or_else(|| Error::invalid(format!("no paging file {i}")))?;
                    let offset = space.len[i];
                    space.len[i] += n;
                    file.live.fetch_add(n, Relaxed);
                    self.file_bytes.fetch_add(n, Relaxed);
                    return Ok((i, file, offset));
                }
                if space.len.len() >= MAX_FILES {
                    return Err(Error::Full(format!(
                        "the paging directory {} holds {MAX_FILES} paging files, the most a pager uses",
                        self.dir.display()
                    )));
                }
                // Its index is taken now, the file made outside the mutex;
                // busy meanwhile, so that no other writer picks it.
                space.len.push(0);
                space.busy.push(true);
                space.next_number += 1;
                (space.len.len() - 1, space.next_number - 1)
            };
            let made = create_file(&self.dir, number);
            let mut space = lock(&self.space);
            match made {
                Ok(file) if !space.closed => {
                    self.set_file(index, file);
                    space.busy[index] = false;
                    space.current[shard] = Some(index);
                }
                Ok(file) => {
                    let _ = fs::remove_file(&file.path);
                    return Err(Error::Closed);
                }
                // The index stays busy: never picked, nothing in it.
                Err(e) => return Err(e),
            }
        }
    }

    /// Writes the bodies of `items` (`body` gives each) one after the
    /// other into one extent of one file (picked by `shard`), in one write,
    /// then tells `written` where each went (by its place in `items`).
    /// Encoding and the write run with no lock held. One body, the usual
    /// page-out, is written as it is, with nothing allocated.
    pub fn write_many<'a, T>(
        &self,
        shard: usize,
        items: &'a [T],
        body: impl Fn(&'a T) -> &'a [u8],
        mut written: impl FnMut(usize, PagedRef),
    ) -> Result<()> {
        if let [one] = items {
            let (codec, stored) = codec::encode_body(self.codec, 0, body(one));
            let (offset, file) = self.write_run(&stored, shard)?;
            written(0, PagedRef { file, stored_len: stored.len() as u32, offset, codec });
            return Ok(());
        }
        let encoded: Vec<(CodecId, Cow<'a, [u8]>)> =
            items.iter().map(|item| codec::encode_body(self.codec, 0, body(item))).collect();
        let total: usize = encoded.iter().map(|(_, stored)| stored.len()).sum();
        let mut run = Vec::with_capacity(total);
        for (_, stored) in &encoded {
            run.extend_from_slice(stored);
        }
        let (mut at, file) = self.write_run(&run, shard)?;
        for (i, (codec, stored)) in encoded.iter().enumerate() {
            written(i, PagedRef { file, stored_len: stored.len() as u32, offset: at, codec: *codec });
            at += stored.len() as u64;
        }
        Ok(())
    }

    /// Reserves room for `run` and writes it there; returns the offset and
    /// the file.
    fn write_run(&self, run: &[u8], shard: usize) -> Result<(u64, u32)> {
        let n = run.len() as u64;
        let (index, file, offset) = self.reserve(n, shard)?;
        let write = || file.file.write_all_at(run, offset);
        #[cfg(test)]
        let write = || self.call_hook(Io::Write).and_then(|()| write());
        if let Err(e) = write() {
            // Give the extent back; the file may be empty again.
            if file.live.fetch_sub(n, Relaxed) == n {
                self.empty(index as u32);
            }
            return Err(Error::io("writing paging file", &file.path, e));
        }
        Ok((offset, index as u32))
    }

    /// Appends one body (shard 0); returns where it went.
    pub fn write(&self, body: &[u8]) -> Result<PagedRef> {
        let mut at = None;
        self.write_many(0, &[body], |b| b, |_, r| at = Some(r))?;
        at.ok_or_else(|| Error::invalid("no paging reference for a written body"))
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
            let handle = self.file(first.file)?;
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
        let handle = self.file(r.file)?;
        #[cfg(test)]
        self.call_hook(Io::Read).map_err(|e| Error::io("reading paging file", &handle.path, e))?;
        let mut buf = vec![0u8; r.stored_len as usize];
        handle.file.read_exact_at(&mut buf, r.offset).map_err(|e| Error::io("reading paging file", &handle.path, e))?;
        Ok(buf)
    }

    /// Frees a body's space (no lock). Returns the file's index when
    /// nothing in it is live any more: the caller then calls
    /// [`PagingFiles::empty`] with it, once it holds no lock.
    #[must_use = "a file with nothing live is truncated by `empty`, called once no lock is held"]
    pub fn free(&self, r: PagedRef) -> Option<u32> {
        if self.closed.load(SeqCst) {
            return None;
        }
        let file = self.get(r.file as usize)?;
        let n = u64::from(r.stored_len);
        (file.live.fetch_sub(n, Relaxed) == n).then_some(r.file)
    }

    /// Truncates file `index` if nothing in it is live (space comes back at
    /// once); the truncation runs outside the mutex, the file marked so
    /// that no writer picks it meanwhile.
    pub fn empty(&self, index: u32) {
        let index = index as usize;
        let Some(file) = self.get(index) else { return };
        let len = {
            let mut space = lock(&self.space);
            // Reservations are made under the mutex: with it held, nothing
            // live means nothing will be written here until it is released.
            if space.closed || file.live.load(Relaxed) != 0 || space.len[index] == 0 || space.busy[index] {
                return;
            }
            space.busy[index] = true;
            for current in &mut space.current {
                if *current == Some(index) {
                    *current = None;
                }
            }
            space.len[index]
        };
        let truncated = file.file.set_len(0).is_ok();
        let mut space = lock(&self.space);
        space.busy[index] = false;
        // Nobody reserved space in it meanwhile (it was busy), so its length
        // is unchanged; a failed truncation leaves it as it is.
        if truncated && !space.closed {
            space.len[index] = 0;
            self.file_bytes.fetch_sub(len, Relaxed);
        }
    }

    /// [`PagingFiles::empty`] for each file named.
    pub fn empty_all(&self, files: Vec<u32>) {
        for index in files {
            self.empty(index);
        }
    }

    /// Removes the paging files; nothing more is written or read (a call
    /// fails with [`Error::Closed`]). The files are truncated as well as
    /// unlinked: their handles stay open until the pager goes, and must
    /// not keep the disk space.
    pub fn remove_all(&self) {
        let count = {
            let mut space = lock(&self.space);
            if space.closed {
                return;
            }
            space.closed = true;
            self.closed.store(true, SeqCst);
            space.current = [None; SHARDS];
            space.len.len()
        };
        for index in 0..count {
            if let Some(file) = self.get(index) {
                let _ = file.file.set_len(0);
                let _ = fs::remove_file(&file.path);
            }
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
fn create_file(dir: &Path, number: u64) -> Result<PagingFile> {
    let path = dir.join(format!("{PREFIX}{number:06}{SUFFIX}"));
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&path)
        .map_err(|e| Error::io("creating paging file", &path, e))?;
    Ok(PagingFile { file, path, live: AtomicU64::new(0) })
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
    fn the_paging_directory_and_its_files_are_owner_only() {
        use std::os::unix::fs::PermissionsExt;
        let parent = tempfile::tempdir().expect("tempdir");
        let dir = parent.path().join("paging").join("jms1");
        let p = PagingFiles::open(&dir, Codec::None).expect("open");
        p.write(b"a paged-out body").expect("write");
        let mode = |path: &Path| fs::metadata(path).expect("metadata").permissions().mode() & 0o777;
        assert_eq!(mode(&dir), 0o700, "paging directory");
        assert_eq!(mode(&parent.path().join("paging")), 0o700, "the parent it created");
        let mut files = 0;
        for entry in fs::read_dir(&dir).expect("list") {
            let path = entry.expect("entry").path();
            assert_eq!(mode(&path), 0o600, "{}", path.display());
            files += 1;
        }
        assert!(files >= 2, "the marker and a paging file");
    }

    #[test]
    fn a_file_emptied_while_written_elsewhere_comes_back_and_is_reused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = PagingFiles::open(dir.path(), Codec::None).expect("open");
        let mut refs = Vec::new();
        p.write_many(0, &[&[1u8; 100][..], &[2u8; 50][..]], |b| b, |_, r| refs.push(r)).expect("write");
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

    #[test]
    fn shards_append_to_files_of_their_own() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = PagingFiles::open(dir.path(), Codec::None).expect("open");
        let at = |shard| {
            let mut r = None;
            p.write_many(shard, &[&[shard as u8; 10][..]], |b| b, |_, w| r = Some(w)).expect("write");
            r.expect("written")
        };
        let (a, b, a2) = (at(0), at(1), at(0));
        assert_ne!(a.file, b.file, "two shards, two files");
        assert_eq!((a2.file, a2.offset), (a.file, 10), "a shard keeps appending to its file");
        assert_eq!(at(SHARDS + 1).file, b.file, "shards wrap around");
        assert_eq!(p.read(b, 10).expect("read"), vec![1u8; 10]);
        for r in [a, a2] {
            p.empty_all(p.free(r).into_iter().collect());
        }
        assert_eq!(p.file_bytes(), 20, "shard 0's file emptied, shard 1's not");
        // The emptied file is taken again, by whichever shard needs one.
        assert_eq!(at(2).file, a.file);
    }
}
