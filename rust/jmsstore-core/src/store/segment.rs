//! Reading records out of a segment's bytes: verification, end detection
//! and re-synchronisation after damage.

use std::borrow::Cow;
use std::io;

use super::format::{end_word, record_crc, RecordHeader, END_WORD_LEN, RECORD_HEADER_LEN, RECORD_MAGIC};
use crate::codec::{self, CodecId};
use crate::fs::StorageFile;

/// Bytes a long read (recovery, compaction) reads between two progress
/// reports, so that a progress bar moves within a segment.
pub const PROGRESS_STEP: usize = 4 << 20;

/// Fills `buf` from the start of `file`, [`PROGRESS_STEP`] bytes at a time,
/// telling `read` the size of every step but the last (which the caller
/// reports once it has done with the bytes).
pub fn read_in_steps(file: &dyn StorageFile, buf: &mut [u8], read: &mut dyn FnMut(u64)) -> io::Result<()> {
    let len = buf.len();
    let mut at = 0;
    while at < len {
        let end = (at + PROGRESS_STEP).min(len);
        file.read_exact_at(&mut buf[at..end], at as u64)?;
        if end < len {
            read((end - at) as u64);
        }
        at = end;
    }
    Ok(())
}

/// Largest uncompressed body the format accepts (a sanity bound so that a
/// damaged length field cannot make a decoder allocate gigabytes).
pub const MAX_RAW_BODY: usize = 1 << 30;

/// A record found in a segment buffer, verified.
#[derive(Debug)]
pub struct RecordView<'a> {
    /// Offset of the record in the segment.
    pub offset: usize,
    /// Its header.
    pub header: RecordHeader,
    /// Its collection name.
    pub collection: &'a str,
    /// Its body as stored.
    pub stored: &'a [u8],
    /// Its body uncompressed (as verification decoded it).
    pub body: Cow<'a, [u8]>,
}

/// Result of reading at one offset.
#[derive(Debug)]
pub enum Step<'a> {
    /// A valid record.
    Record(RecordView<'a>),
    /// Zeros (or nothing) from here to the end: the end of the written part.
    End,
    /// Something that is not a valid record.
    Damage(String),
}

/// The parts of a record that verified.
pub struct Verified<'a> {
    /// Its collection name.
    pub collection: &'a str,
    /// Its body as stored.
    pub stored: &'a [u8],
    /// Its body uncompressed.
    pub body: Cow<'a, [u8]>,
}

/// Verifies the record whose header is `header` at `buf[at..]` and returns
/// its parts, or why it is bad.
pub fn verify<'a>(buf: &'a [u8], at: usize, header: &RecordHeader) -> Result<Verified<'a>, String> {
    let name_start = at + RECORD_HEADER_LEN;
    let body_start = name_start + header.name_len;
    let end = body_start + header.stored_len;
    if end > buf.len() {
        return Err("record runs past the end of the segment".into());
    }
    let name =
        std::str::from_utf8(&buf[name_start..body_start]).map_err(|_| "collection name is not UTF-8".to_string())?;
    let stored = &buf[body_start..end];
    let raw: Cow<'a, [u8]> = if header.codec == CodecId::None {
        Cow::Borrowed(stored)
    } else {
        Cow::Owned(
            codec::decode(header.codec, stored, header.raw_len).map_err(|e| format!("body does not decode: {e}"))?,
        )
    };
    let crc = record_crc(crc32c::crc32c(&raw), &buf[at + 8..at + RECORD_HEADER_LEN], name.as_bytes());
    if crc != header.crc {
        return Err(format!("checksum mismatch (stored {:#010x}, computed {crc:#010x})", header.crc));
    }
    Ok(Verified { collection: name, stored, body: raw })
}

/// Reads the record at `buf[at..]`, verifying it.
pub fn step(buf: &[u8], at: usize) -> Step<'_> {
    if at >= buf.len() || is_zero(&buf[at..]) {
        return Step::End;
    }
    let Some(header) = decode_header(buf, at) else {
        return Step::Damage(if buf.len() - at < RECORD_HEADER_LEN || buf[at..at + 4] == RECORD_MAGIC {
            "malformed or truncated record header".into()
        } else {
            "no record header here (bad magic)".into()
        });
    };
    match verify(buf, at, &header) {
        Ok(v) => {
            Step::Record(RecordView { offset: at, header, collection: v.collection, stored: v.stored, body: v.body })
        }
        Err(reason) => Step::Damage(reason),
    }
}

/// Reads the record at `buf[at..]` of a segment whose header gave
/// `stale_below` ([`super::format::SegmentHeader::stale_below`]); `next` is
/// the sequence number a record here would have (the previous record's
/// plus one, or the header's next sequence number). A recycled segment's
/// written part ends only at the end marker naming `next`; anything else
/// that is not a record of its own life is damage.
pub fn step_in(buf: &[u8], at: usize, stale_below: Option<u64>, next: u64) -> Step<'_> {
    let Some(floor) = stale_below else {
        return step(buf, at);
    };
    if at >= buf.len() {
        return Step::End;
    }
    if buf.len() - at >= END_WORD_LEN && buf[at..at + END_WORD_LEN] == end_word(true, next) {
        return Step::End;
    }
    match step(buf, at) {
        Step::Record(rec) if rec.header.sequence < floor => {
            Step::Damage(format!("a record of the file's earlier life (sequence number {})", rec.header.sequence))
        }
        Step::End => Step::Damage("zeros where the end marker should be".into()),
        other => other,
    }
}

/// As [`resync`], skipping the stale records of a recycled segment.
pub fn resync_live(buf: &[u8], from: usize, stale_below: Option<u64>) -> Option<usize> {
    let floor = stale_below.unwrap_or(0);
    let mut from = from;
    loop {
        let at = resync(buf, from)?;
        let header = decode_header(buf, at).expect("resync returns valid records");
        if header.sequence >= floor {
            return Some(at);
        }
        from = at + header.total_len();
    }
}

/// Parses the header at `at` with plausibility checks (no CRC).
pub fn decode_header(buf: &[u8], at: usize) -> Option<RecordHeader> {
    let header = RecordHeader::decode(&buf[at..], buf.len() - at)?;
    if header.raw_len > MAX_RAW_BODY {
        return None;
    }
    Some(header)
}

/// The next offset after `from` where a valid record starts, if any.
pub fn resync(buf: &[u8], from: usize) -> Option<usize> {
    let mut at = from;
    while at + RECORD_HEADER_LEN <= buf.len() {
        let found = buf[at..].windows(4).position(|w| w == RECORD_MAGIC)?;
        at += found;
        if let Step::Record(_) = step(buf, at) {
            return Some(at);
        }
        at += 1;
    }
    None
}

/// True if every byte is zero.
pub fn is_zero(bytes: &[u8]) -> bool {
    let chunks = bytes.chunks_exact(8);
    let tail = chunks.remainder();
    chunks.into_iter().all(|c| u64::from_ne_bytes(c.try_into().expect("8 bytes")) == 0) && tail.iter().all(|&b| b == 0)
}
