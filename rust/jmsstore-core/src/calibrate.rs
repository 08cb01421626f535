//! The raw limit of the disk, measured the way the store writes: one
//! `pwrite` per batch into a file that was written (and synced) beforehand,
//! then one `fdatasync`. Benchmarks compare the store against it.

use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::error::{Error, Result};

/// Writes `batches` batches of `batch_bytes` bytes, each with one `pwrite`
/// and one `fdatasync`, into `path` (pre-written with zeros first; at most
/// 64 MiB, wrapping around). Returns the time the loop took.
pub fn raw_write_limit(path: &Path, batch_bytes: usize, batches: usize) -> Result<Duration> {
    if batch_bytes == 0 || batches == 0 {
        return Err(Error::invalid("batch_bytes and batches must be positive"));
    }
    let span = (batch_bytes * batches).min(64 << 20).max(batch_bytes) as u64;
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(path)
        .map_err(|e| Error::io("creating calibration file", path, e))?;
    let io = |e| Error::io("writing calibration file", path, e);
    let zeros = vec![0u8; 1 << 20];
    let mut offset = 0u64;
    while offset < span {
        let n = (span - offset).min(zeros.len() as u64) as usize;
        file.write_all_at(&zeros[..n], offset).map_err(io)?;
        offset += n as u64;
    }
    file.sync_all().map_err(io)?;
    let batch: Vec<u8> = (0..batch_bytes).map(|i| (i % 251) as u8).collect();
    let started = Instant::now();
    let mut at = 0u64;
    for _ in 0..batches {
        if at + batch_bytes as u64 > span {
            at = 0;
        }
        file.write_all_at(&batch, at).map_err(io)?;
        file.sync_data().map_err(io)?;
        at += batch_bytes as u64;
    }
    let elapsed = started.elapsed();
    let _ = std::fs::remove_file(path);
    Ok(elapsed)
}
