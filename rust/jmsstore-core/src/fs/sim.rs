//! An in-memory file system that simulates power loss and injects faults.
//!
//! Each file keeps its durable content (as of its last `sync_data`) and the
//! writes made since. Each directory change (create, rename, remove) is
//! durable only after a `sync_dir`. [`SimFs::crash_image`] returns the disk as
//! a power loss at this instant could leave it: the durable state plus a
//! random prefix of the unsynced writes, the last of them torn at a random
//! byte ([`CrashMode::Prefix`]), or a random subset of 512-byte sectors of
//! the unsynced writes ([`CrashMode::Reorder`], as out-of-order page
//! write-back can leave it). Writes on `O_DSYNC` handles are durable when
//! they return.
//!
//! Faults: [`SimFs::arm_crash`] freezes the image after a given number of
//! operations and fails every operation after it (the power is off);
//! [`SimFs::fail_syncs`] makes `sync_data` fail with `EIO`, and
//! [`SimFs::fail_dir_syncs_after`] does the same to directory syncs from a
//! given one on (the pending directory changes stay pending);
//! [`SimFs::set_capacity`] makes writes beyond a total size fail with `ENOSPC`.

use std::collections::{BTreeMap, HashSet};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::{FileSystem, LockGuard, OpenMode, StorageFile};

/// How a crash image treats the writes that were not synced.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CrashMode {
    /// A random prefix of the unsynced writes survives, the last one torn at a random byte.
    Prefix,
    /// A random subset of the unsynced writes' 512-byte sectors survives.
    Reorder,
}

#[derive(Clone)]
enum Pending {
    Write { offset: u64, data: Vec<u8> },
    SetLen(u64),
}

#[derive(Default)]
struct FileState {
    durable: Vec<u8>,
    current: Vec<u8>,
    pending: Vec<Pending>,
}

type Inode = Arc<Mutex<FileState>>;

#[derive(Clone)]
enum NsOp {
    Link(PathBuf, Inode),
    Rename(PathBuf, PathBuf),
    Remove(PathBuf),
}

struct Armed {
    remaining_ops: u64,
    mode: CrashMode,
    rng: StdRng,
}

#[derive(Default)]
struct State {
    names: BTreeMap<PathBuf, Inode>,
    durable_names: BTreeMap<PathBuf, Inode>,
    pending_ns: Vec<NsOp>,
    dirs: HashSet<PathBuf>,
    locks: HashSet<PathBuf>,
    armed: Option<Armed>,
    frozen: Option<SimFs>,
    fail_syncs: bool,
    dir_syncs_before_failing: Option<u64>,
    capacity: Option<u64>,
    ops: u64,
    syncs: u64,
}

/// The simulated file system. Cloning gives another handle on the same disk.
#[derive(Clone, Default)]
pub struct SimFs {
    state: Arc<Mutex<State>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn apply(content: &mut Vec<u8>, op: &Pending) {
    match op {
        Pending::Write { offset, data } => {
            let end = *offset as usize + data.len();
            if content.len() < end {
                content.resize(end, 0);
            }
            content[*offset as usize..end].copy_from_slice(data);
        }
        Pending::SetLen(len) => content.resize(*len as usize, 0),
    }
}

fn power_off() -> io::Error {
    io::Error::other("simulated power loss: the disk is gone")
}

impl SimFs {
    /// An empty disk.
    pub fn new() -> Self {
        Self::default()
    }

    /// After `ops` more operations, freeze a crash image (taken with `mode`
    /// and `seed`) and fail every later operation.
    pub fn arm_crash(&self, ops: u64, mode: CrashMode, seed: u64) {
        let mut state = lock(&self.state);
        state.armed = Some(Armed { remaining_ops: ops, mode, rng: StdRng::seed_from_u64(seed) });
    }

    /// The image frozen by [`SimFs::arm_crash`], if the crash has happened.
    pub fn frozen_image(&self) -> Option<SimFs> {
        lock(&self.state).frozen.clone()
    }

    /// Makes every `sync_data` fail with `EIO` (or succeed again).
    pub fn fail_syncs(&self, fail: bool) {
        lock(&self.state).fail_syncs = fail;
    }

    /// Lets `ok` more directory syncs succeed, then makes every later one
    /// fail with `EIO`; `None` makes them succeed again.
    pub fn fail_dir_syncs_after(&self, ok: Option<u64>) {
        lock(&self.state).dir_syncs_before_failing = ok;
    }

    /// Limits the total size of all files; writes past it fail with `ENOSPC`.
    pub fn set_capacity(&self, bytes: Option<u64>) {
        lock(&self.state).capacity = bytes;
    }

    /// Number of `sync_data` calls so far.
    pub fn syncs(&self) -> u64 {
        lock(&self.state).syncs
    }

    /// The current (not necessarily durable) content of a file.
    pub fn read_file(&self, path: &Path) -> Option<Vec<u8>> {
        let state = lock(&self.state);
        state.names.get(path).map(|inode| lock(inode).current.clone())
    }

    /// Overwrites bytes of a file as they are now and durably (for corrupting tests).
    pub fn poke(&self, path: &Path, offset: u64, bytes: &[u8]) -> io::Result<()> {
        let state = lock(&self.state);
        let inode = state.names.get(path).ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))?;
        let mut file = lock(inode);
        let op = Pending::Write { offset, data: bytes.to_vec() };
        apply(&mut file.current, &op);
        apply(&mut file.durable, &op);
        Ok(())
    }

    /// The disk as a power loss at this instant could leave it.
    pub fn crash_image(&self, mode: CrashMode, seed: u64) -> SimFs {
        let state = lock(&self.state);
        let mut rng = StdRng::seed_from_u64(seed);
        Self::image_of(&state, mode, &mut rng)
    }

    fn image_of(state: &State, mode: CrashMode, rng: &mut StdRng) -> SimFs {
        // Directory entries: the durable ones plus a random prefix of the changes since.
        let mut names: BTreeMap<PathBuf, Inode> = state.durable_names.clone();
        let keep_ns = rng.random_range(0..=state.pending_ns.len());
        for op in &state.pending_ns[..keep_ns] {
            match op {
                NsOp::Link(path, inode) => {
                    names.insert(path.clone(), inode.clone());
                }
                NsOp::Rename(from, to) => {
                    if let Some(inode) = names.remove(from) {
                        names.insert(to.clone(), inode);
                    }
                }
                NsOp::Remove(path) => {
                    names.remove(path);
                }
            }
        }
        // File contents: copied once per inode, so hard links stay shared.
        let mut copies: Vec<(Inode, Inode)> = Vec::new();
        let mut new_names = BTreeMap::new();
        for (path, inode) in names {
            let copy = match copies.iter().find(|(old, _)| Arc::ptr_eq(old, &inode)) {
                Some((_, copy)) => copy.clone(),
                None => {
                    let file = lock(&inode);
                    let content = Self::crashed_content(&file, mode, rng);
                    let copy = Arc::new(Mutex::new(FileState {
                        durable: content.clone(),
                        current: content,
                        pending: Vec::new(),
                    }));
                    copies.push((inode.clone(), copy.clone()));
                    copy
                }
            };
            new_names.insert(path, copy);
        }
        let image =
            State { durable_names: new_names.clone(), names: new_names, dirs: state.dirs.clone(), ..State::default() };
        SimFs { state: Arc::new(Mutex::new(image)) }
    }

    fn crashed_content(file: &FileState, mode: CrashMode, rng: &mut StdRng) -> Vec<u8> {
        let mut content = file.durable.clone();
        match mode {
            CrashMode::Prefix => {
                let keep = rng.random_range(0..=file.pending.len());
                for op in &file.pending[..keep] {
                    apply(&mut content, op);
                }
                if let Some(torn) = file.pending.get(keep) {
                    match torn {
                        Pending::Write { offset, data } => {
                            let cut = rng.random_range(0..=data.len());
                            apply(&mut content, &Pending::Write { offset: *offset, data: data[..cut].to_vec() });
                        }
                        Pending::SetLen(_) => {
                            if rng.random_bool(0.5) {
                                apply(&mut content, torn);
                            }
                        }
                    }
                }
            }
            CrashMode::Reorder => {
                for op in &file.pending {
                    match op {
                        Pending::Write { offset, data } => {
                            for (i, sector) in data.chunks(512).enumerate() {
                                if rng.random_bool(0.5) {
                                    let op =
                                        Pending::Write { offset: offset + (i * 512) as u64, data: sector.to_vec() };
                                    apply(&mut content, &op);
                                }
                            }
                        }
                        Pending::SetLen(_) => {
                            if rng.random_bool(0.5) {
                                apply(&mut content, op);
                            }
                        }
                    }
                }
            }
        }
        content
    }

    /// Counts one operation; when an armed crash is due, freezes the image.
    /// Returns an error once the power is off. Otherwise returns the state
    /// lock, which the caller holds while it carries the operation out: an
    /// operation that the crash did not stop must be in the frozen image,
    /// or it could report success for an effect the image does not have
    /// (another thread could freeze the image in between).
    fn tick(&self) -> io::Result<MutexGuard<'_, State>> {
        self.tick_during(None)
    }

    /// Like `tick`, for a write that is under way: if the power goes off
    /// now, part of it may land, so it joins the unsynced writes before the
    /// image is taken.
    fn tick_during(&self, in_flight: Option<(&Inode, Pending)>) -> io::Result<MutexGuard<'_, State>> {
        let mut state = lock(&self.state);
        state.ops += 1;
        if state.frozen.is_some() {
            return Err(power_off());
        }
        let due = match state.armed.as_mut() {
            Some(armed) if armed.remaining_ops == 0 => true,
            Some(armed) => {
                armed.remaining_ops -= 1;
                false
            }
            None => false,
        };
        if due {
            if let Some((inode, op)) = in_flight {
                let mut file = lock(inode);
                apply(&mut file.current, &op);
                file.pending.push(op);
            }
            let mut armed = state.armed.take().expect("armed crash present");
            let image = Self::image_of(&state, armed.mode, &mut armed.rng);
            state.frozen = Some(image);
            return Err(power_off());
        }
        Ok(state)
    }

    fn total_size(state: &State) -> u64 {
        state.names.values().map(|inode| lock(inode).current.len() as u64).sum()
    }

    fn parent_exists(state: &State, path: &Path) -> bool {
        path.parent().is_none_or(|p| p.as_os_str().is_empty() || state.dirs.contains(p))
    }
}

struct SimFile {
    fs: SimFs,
    inode: Inode,
    writable: bool,
    dsync: bool,
}

impl SimFile {
    fn check_space(&self, state: &State, new_len: u64) -> io::Result<()> {
        if let Some(capacity) = state.capacity {
            let current = lock(&self.inode).current.len() as u64;
            if new_len > current && SimFs::total_size(state) + (new_len - current) > capacity {
                return Err(io::Error::from_raw_os_error(libc::ENOSPC));
            }
        }
        Ok(())
    }

    fn record(&self, op: Pending) {
        let mut file = lock(&self.inode);
        apply(&mut file.current, &op);
        if self.dsync {
            apply(&mut file.durable, &op);
        } else {
            file.pending.push(op);
        }
    }
}

impl StorageFile for SimFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        let _state = self.fs.tick()?;
        let file = lock(&self.inode);
        let start = (offset as usize).min(file.current.len());
        let n = buf.len().min(file.current.len() - start);
        buf[..n].copy_from_slice(&file.current[start..start + n]);
        Ok(n)
    }

    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        if !self.writable {
            return Err(io::Error::from_raw_os_error(libc::EBADF));
        }
        let state = self.fs.tick_during(Some((&self.inode, Pending::Write { offset, data: buf.to_vec() })))?;
        self.check_space(&state, offset + buf.len() as u64)?;
        self.record(Pending::Write { offset, data: buf.to_vec() });
        Ok(())
    }

    fn sync_data(&self) -> io::Result<()> {
        let mut state = self.fs.tick()?;
        state.syncs += 1;
        if state.fail_syncs {
            // As on Linux: the error is reported once and the dirty pages are
            // dropped, so what was written is lost and not retried.
            let mut file = lock(&self.inode);
            file.pending.clear();
            file.current = file.durable.clone();
            return Err(io::Error::from_raw_os_error(libc::EIO));
        }
        let mut file = lock(&self.inode);
        let pending = std::mem::take(&mut file.pending);
        for op in &pending {
            apply(&mut file.durable, op);
        }
        Ok(())
    }

    fn len(&self) -> io::Result<u64> {
        Ok(lock(&self.inode).current.len() as u64)
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        if !self.writable {
            return Err(io::Error::from_raw_os_error(libc::EBADF));
        }
        let state = self.fs.tick()?;
        self.check_space(&state, len)?;
        self.record(Pending::SetLen(len));
        Ok(())
    }
}

struct SimLock {
    fs: SimFs,
    path: PathBuf,
}

impl LockGuard for SimLock {}

impl Drop for SimLock {
    fn drop(&mut self) {
        lock(&self.fs.state).locks.remove(&self.path);
    }
}

impl FileSystem for SimFs {
    fn open(&self, path: &Path, mode: OpenMode) -> io::Result<Arc<dyn StorageFile>> {
        let mut state = self.tick()?;
        let inode = match state.names.get(path) {
            Some(_) if mode.create_new => return Err(io::Error::from(io::ErrorKind::AlreadyExists)),
            Some(inode) => inode.clone(),
            None if mode.create => {
                if !SimFs::parent_exists(&state, path) {
                    return Err(io::Error::from(io::ErrorKind::NotFound));
                }
                let inode: Inode = Arc::default();
                state.names.insert(path.to_path_buf(), inode.clone());
                state.pending_ns.push(NsOp::Link(path.to_path_buf(), inode.clone()));
                inode
            }
            None => return Err(io::Error::from(io::ErrorKind::NotFound)),
        };
        Ok(Arc::new(SimFile { fs: self.clone(), inode, writable: mode.write, dsync: mode.dsync }))
    }

    fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        let mut state = self.tick()?;
        for ancestor in path.ancestors() {
            if !ancestor.as_os_str().is_empty() {
                state.dirs.insert(ancestor.to_path_buf());
            }
        }
        Ok(())
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<PathBuf>> {
        let state = self.tick()?;
        if !state.dirs.contains(dir) {
            return Err(io::Error::from(io::ErrorKind::NotFound));
        }
        let mut entries: Vec<PathBuf> = state.names.keys().filter(|p| p.parent() == Some(dir)).cloned().collect();
        entries.extend(state.dirs.iter().filter(|p| p.parent() == Some(dir)).cloned());
        Ok(entries)
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let mut state = self.tick()?;
        if !SimFs::parent_exists(&state, to) {
            return Err(io::Error::from(io::ErrorKind::NotFound));
        }
        let inode = state.names.remove(from).ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))?;
        state.names.insert(to.to_path_buf(), inode);
        state.pending_ns.push(NsOp::Rename(from.to_path_buf(), to.to_path_buf()));
        Ok(())
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        let mut state = self.tick()?;
        state.names.remove(path).ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))?;
        state.pending_ns.push(NsOp::Remove(path.to_path_buf()));
        Ok(())
    }

    fn remove_dir(&self, path: &Path) -> io::Result<()> {
        let mut state = self.tick()?;
        if !state.dirs.contains(path) {
            return Err(io::Error::from(io::ErrorKind::NotFound));
        }
        let inside = |p: &PathBuf| p.parent() == Some(path);
        if state.names.keys().any(inside) || state.dirs.iter().any(inside) {
            return Err(io::Error::from(io::ErrorKind::DirectoryNotEmpty));
        }
        state.dirs.remove(path);
        Ok(())
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        let mut state = self.tick()?;
        if !state.dirs.contains(dir) {
            return Err(io::Error::from(io::ErrorKind::NotFound));
        }
        match state.dir_syncs_before_failing {
            Some(0) => return Err(io::Error::from_raw_os_error(libc::EIO)),
            Some(left) => state.dir_syncs_before_failing = Some(left - 1),
            None => {}
        }
        // Simplification: one directory sync makes every pending directory change durable.
        state.durable_names = state.names.clone();
        state.pending_ns.clear();
        Ok(())
    }

    fn exists(&self, path: &Path) -> bool {
        let state = lock(&self.state);
        state.names.contains_key(path) || state.dirs.contains(path)
    }

    fn is_dir(&self, path: &Path) -> bool {
        lock(&self.state).dirs.contains(path)
    }

    fn try_lock(&self, path: &Path) -> io::Result<Option<Box<dyn LockGuard>>> {
        let mut state = self.tick()?;
        if !SimFs::parent_exists(&state, path) {
            return Err(io::Error::from(io::ErrorKind::NotFound));
        }
        if !state.locks.insert(path.to_path_buf()) {
            return Ok(None);
        }
        Ok(Some(Box::new(SimLock { fs: self.clone(), path: path.to_path_buf() })))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unsynced_writes_can_vanish_synced_ones_cannot() {
        let fs = SimFs::new();
        let dir = Path::new("/s");
        fs.create_dir_all(dir).unwrap();
        let path = dir.join("f");
        let file = fs.open(&path, OpenMode::CREATE_NEW).unwrap();
        file.write_all_at(b"durable", 0).unwrap();
        file.sync_data().unwrap();
        fs.sync_dir(dir).unwrap();
        file.write_all_at(b"volatile", 7).unwrap();
        let mut saw_lost = false;
        let mut saw_kept = false;
        for seed in 0..64 {
            let image = fs.crash_image(CrashMode::Prefix, seed);
            let content = image.read_file(&path).unwrap();
            assert!(content.starts_with(b"durable"));
            if content.len() == 7 {
                saw_lost = true;
            }
            if content == b"durablevolatile" {
                saw_kept = true;
            }
        }
        assert!(saw_lost && saw_kept);
    }

    #[test]
    fn unsynced_creation_can_vanish() {
        let fs = SimFs::new();
        let dir = Path::new("/s");
        fs.create_dir_all(dir).unwrap();
        let file = fs.open(&dir.join("f"), OpenMode::CREATE_NEW).unwrap();
        file.sync_data().unwrap();
        let lost = (0..32).any(|seed| !fs.crash_image(CrashMode::Prefix, seed).exists(&dir.join("f")));
        assert!(lost);
        fs.sync_dir(dir).unwrap();
        assert!((0..32).all(|seed| fs.crash_image(CrashMode::Prefix, seed).exists(&dir.join("f"))));
    }

    #[test]
    fn armed_crash_freezes_and_powers_off() {
        let fs = SimFs::new();
        fs.create_dir_all(Path::new("/s")).unwrap();
        fs.arm_crash(1, CrashMode::Prefix, 7);
        let file = fs.open(Path::new("/s/f"), OpenMode::CREATE_NEW).unwrap();
        assert!(file.write_all_at(b"x", 0).is_err());
        assert!(fs.frozen_image().is_some());
        assert!(file.sync_data().is_err());
    }

    #[test]
    fn failed_sync_drops_dirty_data() {
        let fs = SimFs::new();
        fs.create_dir_all(Path::new("/s")).unwrap();
        let file = fs.open(Path::new("/s/f"), OpenMode::CREATE_NEW).unwrap();
        file.write_all_at(b"abc", 0).unwrap();
        fs.fail_syncs(true);
        assert_eq!(file.sync_data().unwrap_err().raw_os_error(), Some(libc::EIO));
        assert_eq!(file.len().unwrap(), 0);
    }

    #[test]
    fn capacity_limit_gives_enospc() {
        let fs = SimFs::new();
        fs.create_dir_all(Path::new("/s")).unwrap();
        fs.set_capacity(Some(10));
        let file = fs.open(Path::new("/s/f"), OpenMode::CREATE_NEW).unwrap();
        file.write_all_at(&[1; 10], 0).unwrap();
        assert_eq!(file.write_all_at(&[1], 10).unwrap_err().raw_os_error(), Some(libc::ENOSPC));
    }
}
