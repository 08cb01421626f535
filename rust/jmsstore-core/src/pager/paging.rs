//! Paging files: scratch space for the bodies of non-persistent messages
//! that do not fit in the message buffer.
//!
//! Bodies are appended to numbered files in the paging directory; each file
//! counts its live bytes and is emptied (truncated and reused) once nothing
//! in it is live, so space comes back as messages go. Nothing here is ever
//! recovered: the directory's paging files are removed when a pager starts.

use std::fs::{self, File, OpenOptions};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::codec::{self, Codec, CodecId};
use crate::error::{Error, Result};

/// Paging files roll over at this size.
const FILE_BYTES: u64 = 64 << 20;
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

struct PagingFile {
    file: File,
    path: PathBuf,
    len: u64,
    live: u64,
}

/// The paging files of one pager.
pub struct PagingFiles {
    dir: PathBuf,
    codec: Codec,
    files: Vec<PagingFile>,
    current: usize,
    /// Bytes in the files (written, not yet reclaimed).
    pub file_bytes: u64,
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
        let mut files = PagingFiles { dir: dir.to_path_buf(), codec, files: Vec::new(), current: 0, file_bytes: 0 };
        files.new_file().map_err(|e| match e {
            Error::Io { source, .. } if source.kind() == std::io::ErrorKind::PermissionDenied => {
                Error::invalid(format!("paging directory {} is not writable", dir.display()))
            }
            other => other,
        })?;
        Ok(files)
    }

    fn new_file(&mut self) -> Result<()> {
        let path = self.dir.join(format!("{PREFIX}{:06}{SUFFIX}", self.files.len()));
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&path)
            .map_err(|e| Error::io("creating paging file", &path, e))?;
        self.files.push(PagingFile { file, path, len: 0, live: 0 });
        self.current = self.files.len() - 1;
        Ok(())
    }

    /// Appends a body; returns where it went.
    pub fn write(&mut self, body: &[u8]) -> Result<PagedRef> {
        let (codec, stored) = codec::encode_body(self.codec, 0, body);
        if self.files[self.current].len + stored.len() as u64 > FILE_BYTES && self.files[self.current].len > 0 {
            // Reuse an emptied file before making a new one.
            match self.files.iter().position(|f| f.len == 0) {
                Some(i) => self.current = i,
                None => self.new_file()?,
            }
        }
        let index = self.current;
        let f = &mut self.files[index];
        f.file.write_all_at(&stored, f.len).map_err(|e| Error::io("writing paging file", &f.path, e))?;
        let r = PagedRef { file: index as u32, stored_len: stored.len() as u32, offset: f.len, codec };
        f.len += stored.len() as u64;
        f.live += stored.len() as u64;
        self.file_bytes += stored.len() as u64;
        Ok(r)
    }

    /// Reads a run of bodies; `refs` must be contiguous in one file when
    /// `contiguous` says so (then it is one read), else one read each.
    pub fn read_many(&self, refs: &[(PagedRef, usize)]) -> Result<Vec<Arc<[u8]>>> {
        let contiguous = refs
            .windows(2)
            .all(|w| w[0].0.file == w[1].0.file && w[0].0.offset + u64::from(w[0].0.stored_len) == w[1].0.offset);
        if contiguous && refs.len() > 1 {
            let first = refs[0].0;
            let last = refs[refs.len() - 1].0;
            let f = &self.files[first.file as usize];
            let mut buf = vec![0u8; (last.offset + u64::from(last.stored_len) - first.offset) as usize];
            f.file.read_exact_at(&mut buf, first.offset).map_err(|e| Error::io("reading paging file", &f.path, e))?;
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
        let f = &self.files[r.file as usize];
        let mut buf = vec![0u8; r.stored_len as usize];
        f.file.read_exact_at(&mut buf, r.offset).map_err(|e| Error::io("reading paging file", &f.path, e))?;
        Ok(buf)
    }

    /// Frees a body's space; a file with nothing live left is emptied.
    pub fn free(&mut self, r: PagedRef) {
        let index = r.file as usize;
        let f = &mut self.files[index];
        f.live -= u64::from(r.stored_len);
        if f.live == 0 {
            // Emptied files are truncated so the space goes back at once.
            if f.file.set_len(0).is_ok() {
                self.file_bytes -= f.len;
                f.len = 0;
            }
        }
    }

    /// Removes the paging files.
    pub fn remove_all(&mut self) {
        for f in self.files.drain(..) {
            let _ = fs::remove_file(&f.path);
        }
        self.file_bytes = 0;
    }
}

impl Drop for PagingFiles {
    fn drop(&mut self) {
        self.remove_all();
    }
}
