//! A bound on open file descriptors.
//!
//! A store keeps a handle on every segment file for the segment's life. One
//! descriptor each would make a store of many segments fail to open under a
//! low `RLIMIT_NOFILE` (64 is not unheard of; 1024 is common). [`PooledFs`]
//! wraps a file system so that at most `capacity` of the files opened
//! through it hold a descriptor at once: the least recently used is closed
//! and its handle reopens the file by path when next used. Renames and
//! removals made through the pool are followed, so a handle always reopens
//! its own file, never another one that took its name.
//!
//! A file is never closed while
//! - it is pinned ([`StorageFile::keep_open`]: the writer's active segment);
//! - it has writes not yet made durable by `sync_data`: the kernel reports
//!   a writeback error to the descriptors open when it happened, so a
//!   descriptor closed and reopened in between could let `sync_data`
//!   succeed over lost data (writes through `O_DSYNC` are durable at once);
//! - its name is gone (removed, or replaced by a rename): it cannot be
//!   reopened, and its last readers may still need it. It closes when its
//!   handle is dropped, as before.
//!
//! Those can take the count past `capacity` for a while, and so can reads
//! in progress on a file just closed (each holds the descriptor until it
//! returns).

use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use super::{FileSystem, LockGuard, OpenMode, StorageFile};

/// How many files a store keeps open by default: a quarter of the process's
/// descriptor limit (`RLIMIT_NOFILE` now), between 16 and 1024. A fixed small
/// number would make random reads over more segments than that reopen a file
/// for most reads (several times slower); a quarter leaves the rest of the
/// limit to the application, the paging files and other stores.
pub fn default_max_open_files() -> usize {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit only writes the struct it is given.
    let soft = if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } == 0 { limit.rlim_cur } else { 1024 };
    usize::try_from(soft / 4).unwrap_or(usize::MAX).clamp(16, 1024)
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A file system whose files hold at most `capacity` descriptors between them
/// (see the module documentation).
pub struct PooledFs {
    pool: Arc<Pool>,
}

struct Pool {
    inner: Arc<dyn FileSystem>,
    capacity: usize,
    /// Ticks of use, for least-recently-used order.
    clock: AtomicU64,
    state: Mutex<PoolState>,
}

#[derive(Default)]
struct PoolState {
    /// Files that held a descriptor when last looked at.
    open: Vec<Weak<Entry>>,
    /// Every file by its current name, to follow renames and removals.
    by_path: HashMap<PathBuf, Vec<Weak<Entry>>>,
    /// Handles in `by_path`, dropped ones included; pruned when past `prune_at`.
    tracked: usize,
    prune_at: usize,
}

struct Entry {
    pool: Arc<Pool>,
    /// How to open it again: as first opened, never creating.
    reopen: OpenMode,
    last_used: AtomicU64,
    pinned: AtomicBool,
    slot: Mutex<Slot>,
}

struct Slot {
    file: Option<Arc<dyn StorageFile>>,
    path: PathBuf,
    /// The name was removed or taken over: the file cannot be reopened.
    gone: bool,
    /// Writes started, and the count the last successful sync covered.
    writes: u64,
    synced: u64,
}

impl Slot {
    fn closable(&self) -> bool {
        self.file.is_some() && !self.gone && self.writes == self.synced
    }
}

impl PooledFs {
    /// Wraps `inner`, keeping at most `capacity` (at least 1) files open.
    pub fn new(inner: Arc<dyn FileSystem>, capacity: usize) -> PooledFs {
        PooledFs {
            pool: Arc::new(Pool {
                inner,
                capacity: capacity.max(1),
                clock: AtomicU64::new(0),
                state: Mutex::new(PoolState { prune_at: 64, ..PoolState::default() }),
            }),
        }
    }

    /// Closes what it may beyond the capacity (as the next open would) and
    /// returns how many files hold a descriptor.
    pub fn open_files(&self) -> usize {
        let mut state = lock(&self.pool.state);
        self.pool.trim(&mut state);
        state.open.retain(|w| w.upgrade().is_some_and(|e| lock(&e.slot).file.is_some()));
        state.open.len()
    }
}

impl Pool {
    /// Closes the least recently used closable files until at most `capacity` are open.
    fn trim(&self, state: &mut PoolState) {
        if state.open.len() <= self.capacity {
            return;
        }
        state.open.retain(|w| w.upgrade().is_some_and(|e| lock(&e.slot).file.is_some()));
        while state.open.len() > self.capacity {
            let victim = state
                .open
                .iter()
                .enumerate()
                .filter_map(|(i, w)| {
                    let entry = w.upgrade()?;
                    let closable = !entry.pinned.load(Ordering::Acquire) && lock(&entry.slot).closable();
                    closable.then(|| (entry.last_used.load(Ordering::Relaxed), i))
                })
                .min();
            let Some((_, i)) = victim else {
                return;
            };
            if let Some(entry) = state.open.swap_remove(i).upgrade() {
                let mut slot = lock(&entry.slot);
                if slot.closable() {
                    slot.file = None;
                }
            }
        }
    }

    fn track(&self, state: &mut PoolState, path: &Path, entry: &Arc<Entry>) {
        state.by_path.entry(path.to_path_buf()).or_default().push(Arc::downgrade(entry));
        state.tracked += 1;
        if state.tracked > state.prune_at {
            // Handles dropped without their file being renamed or removed linger
            // here; sweep them out now and then (amortized constant per open).
            state.by_path.retain(|_, list| {
                list.retain(|w| w.strong_count() > 0);
                !list.is_empty()
            });
            state.tracked = state.by_path.values().map(Vec::len).sum();
            state.prune_at = (state.tracked * 2).max(64);
        }
    }

    /// Marks every handle on `path` as unable to reopen it.
    fn forget(state: &mut PoolState, path: &Path) {
        if let Some(list) = state.by_path.remove(path) {
            state.tracked -= list.len();
            for entry in list.iter().filter_map(Weak::upgrade) {
                lock(&entry.slot).gone = true;
            }
        }
    }
}

impl Entry {
    fn touch(&self) {
        self.last_used.store(self.pool.clock.fetch_add(1, Ordering::Relaxed), Ordering::Relaxed);
    }
}

/// A handle that may have lent its descriptor back to the pool.
struct PooledFile(Arc<Entry>);

impl PooledFile {
    /// The open file, reopened if it was closed; `write` counts a write
    /// started (before the caller makes it, so the file is not closed under it).
    fn file(&self, write: bool) -> io::Result<Arc<dyn StorageFile>> {
        let entry = &self.0;
        entry.touch();
        {
            let mut slot = lock(&entry.slot);
            if let Some(file) = slot.file.clone() {
                if write {
                    slot.writes += 1;
                }
                return Ok(file);
            }
        }
        let pool = &entry.pool;
        let mut state = lock(&pool.state);
        let file = {
            let mut slot = lock(&entry.slot);
            let file = match slot.file.clone() {
                Some(file) => file,
                None if slot.gone => {
                    return Err(io::Error::new(
                        io::ErrorKind::NotFound,
                        format!("{} was removed while its descriptor was closed", slot.path.display()),
                    ))
                }
                None => {
                    let file = pool.inner.open(&slot.path, entry.reopen)?;
                    slot.file = Some(file.clone());
                    state.open.push(Arc::downgrade(entry));
                    file
                }
            };
            if write {
                slot.writes += 1;
            }
            file
        };
        pool.trim(&mut state);
        Ok(file)
    }
}

impl StorageFile for PooledFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        self.file(false)?.read_at(buf, offset)
    }

    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.file(!self.0.reopen.dsync)?.write_all_at(buf, offset)
    }

    fn sync_data(&self) -> io::Result<()> {
        let file = self.file(false)?;
        let covered = lock(&self.0.slot).writes;
        file.sync_data()?;
        let mut slot = lock(&self.0.slot);
        slot.synced = slot.synced.max(covered);
        Ok(())
    }

    fn len(&self) -> io::Result<u64> {
        self.file(false)?.len()
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        self.file(true)?.set_len(len)
    }

    fn read_all_into(&self, buf: &mut Vec<u8>) -> io::Result<()> {
        self.file(false)?.read_all_into(buf)
    }

    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.file(false)?.read_exact_at(buf, offset)
    }

    fn keep_open(&self, keep: bool) {
        self.0.pinned.store(keep, Ordering::Release);
    }
}

impl FileSystem for PooledFs {
    fn open(&self, path: &Path, mode: OpenMode) -> io::Result<Arc<dyn StorageFile>> {
        let pool = &self.pool;
        let mut state = lock(&pool.state);
        let file = pool.inner.open(path, mode)?;
        let entry = Arc::new(Entry {
            pool: pool.clone(),
            reopen: OpenMode { create: false, create_new: false, ..mode },
            last_used: AtomicU64::new(pool.clock.fetch_add(1, Ordering::Relaxed)),
            pinned: AtomicBool::new(false),
            slot: Mutex::new(Slot { file: Some(file), path: path.to_path_buf(), gone: false, writes: 0, synced: 0 }),
        });
        state.open.push(Arc::downgrade(&entry));
        pool.track(&mut state, path, &entry);
        pool.trim(&mut state);
        Ok(Arc::new(PooledFile(entry)))
    }

    fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        self.pool.inner.create_dir_all(path)
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<PathBuf>> {
        self.pool.inner.list(dir)
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        // Under the pool's lock, so no handle reopens either name meanwhile.
        let mut state = lock(&self.pool.state);
        self.pool.inner.rename(from, to)?;
        if from != to {
            Pool::forget(&mut state, to);
            if let Some(list) = state.by_path.remove(from) {
                for entry in list.iter().filter_map(Weak::upgrade) {
                    lock(&entry.slot).path = to.to_path_buf();
                }
                state.by_path.insert(to.to_path_buf(), list);
            }
        }
        Ok(())
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        let mut state = lock(&self.pool.state);
        self.pool.inner.remove_file(path)?;
        Pool::forget(&mut state, path);
        Ok(())
    }

    fn remove_dir(&self, path: &Path) -> io::Result<()> {
        self.pool.inner.remove_dir(path)
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        self.pool.inner.sync_dir(dir)
    }

    fn exists(&self, path: &Path) -> bool {
        self.pool.inner.exists(path)
    }

    fn is_dir(&self, path: &Path) -> bool {
        self.pool.inner.is_dir(path)
    }

    fn try_lock(&self, path: &Path) -> io::Result<Option<Box<dyn LockGuard>>> {
        self.pool.inner.try_lock(path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::StdFs;

    fn pooled(capacity: usize) -> (tempfile::TempDir, PooledFs) {
        (tempfile::tempdir().expect("tempdir"), PooledFs::new(Arc::new(StdFs), capacity))
    }

    fn create(fs: &PooledFs, path: &Path, content: &[u8]) -> Arc<dyn StorageFile> {
        let file = fs.open(path, OpenMode::CREATE_NEW).expect("create");
        file.write_all_at(content, 0).expect("write");
        file.sync_data().expect("sync");
        file
    }

    fn read(file: &Arc<dyn StorageFile>) -> Vec<u8> {
        let mut buf = Vec::new();
        file.read_all_into(&mut buf).expect("read");
        buf
    }

    #[test]
    fn at_most_capacity_files_stay_open_and_closed_ones_reopen() {
        let (dir, fs) = pooled(3);
        let files: Vec<_> =
            (0..10).map(|i| create(&fs, &dir.path().join(format!("{i}")), format!("file {i}").as_bytes())).collect();
        assert_eq!(fs.open_files(), 3);
        for round in 0..3 {
            for (i, file) in files.iter().enumerate() {
                assert_eq!(read(file), format!("file {i}").into_bytes(), "round {round}");
                assert!(fs.open_files() <= 3);
            }
        }
    }

    #[test]
    fn the_least_recently_used_is_closed_first() {
        let (dir, fs) = pooled(2);
        let a = create(&fs, &dir.path().join("a"), b"a");
        let b = create(&fs, &dir.path().join("b"), b"b");
        read(&a);
        let _c = create(&fs, &dir.path().join("c"), b"c");
        // b was used least recently: removing its name makes a reopen fail.
        std::fs::remove_file(dir.path().join("b")).expect("remove behind the pool's back");
        assert_eq!(read(&a), b"a", "a stayed open");
        assert!(b.len().is_err(), "b was closed and cannot come back");
    }

    #[test]
    fn pinned_unsynced_and_removed_files_are_not_closed() {
        let (dir, fs) = pooled(1);
        let pinned = create(&fs, &dir.path().join("pinned"), b"p");
        pinned.keep_open(true);
        let unsynced = fs.open(&dir.path().join("unsynced"), OpenMode::CREATE_NEW).expect("create");
        unsynced.write_all_at(b"u", 0).expect("write");
        let removed = create(&fs, &dir.path().join("removed"), b"r");
        fs.remove_file(&dir.path().join("removed")).expect("remove");
        let _others: Vec<_> = (0..4).map(|i| create(&fs, &dir.path().join(format!("{i}")), b"o")).collect();
        assert_eq!(fs.open_files(), 3, "the three that must stay open");
        assert_eq!(read(&removed), b"r", "a removed file stays readable while its handle lives");
        unsynced.sync_data().expect("sync");
        pinned.keep_open(false);
        assert_eq!(fs.open_files(), 1, "only the removed one, which cannot be reopened");
        assert_eq!(read(&pinned), b"p");
        assert_eq!(read(&unsynced), b"u");
    }

    #[test]
    fn a_closed_handle_follows_its_file_through_renames() {
        let (dir, fs) = pooled(1);
        let moved = create(&fs, &dir.path().join("first"), b"mine");
        let _other = create(&fs, &dir.path().join("other"), b"other");
        fs.rename(&dir.path().join("first"), &dir.path().join("second")).expect("rename");
        assert_eq!(read(&moved), b"mine");
        // Another file takes the name of one that is closed: the old handle must not read it.
        let replaced = create(&fs, &dir.path().join("victim"), b"old");
        let _evict = create(&fs, &dir.path().join("evict"), b"e");
        std::fs::write(dir.path().join("newcomer"), b"new").expect("write");
        fs.rename(&dir.path().join("newcomer"), &dir.path().join("victim")).expect("rename over");
        assert_eq!(replaced.len().map_err(|e| e.kind()), Err(io::ErrorKind::NotFound));
    }
}
