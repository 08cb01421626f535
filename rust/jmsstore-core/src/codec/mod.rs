//! Body codecs: how message bodies are compressed on disk.
//!
//! Every record header carries a one-byte [`CodecId`] saying how its body is
//! stored; a store (or pager) is configured with a [`Codec`], which adds the
//! level for gzip. [`encode_body`] is what the write path calls and
//! [`decode`] what reads and recovery call.
//!
//! The on-disk forms are the standard ones, so other tools can read bodies:
//! RFC 1952 gzip, zstd frames (with the content size recorded), and LZF in
//! the "ZV" chunk framing of ning/compress and the `lzf` tool (see [`lzf`]).

use crate::error::{Error, Result};
use std::borrow::Cow;
use std::cell::RefCell;
use std::io::Read;
use std::sync::Arc;

pub mod lzf;

/// On-disk codec id: one byte in every record header.
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CodecId {
    /// The body is stored as it is.
    None = 0,
    /// RFC 1952 gzip (any level).
    Gzip = 1,
    /// LZF in ZV chunk framing.
    Lzf = 2,
    /// A zstd frame.
    Zstd = 3,
}

impl CodecId {
    /// The id stored as `b`, or `None` for a byte that names no codec.
    pub fn from_byte(b: u8) -> Option<CodecId> {
        match b {
            0 => Some(CodecId::None),
            1 => Some(CodecId::Gzip),
            2 => Some(CodecId::Lzf),
            3 => Some(CodecId::Zstd),
            _ => None,
        }
    }

    /// `"none"`, `"gzip"`, `"lzf"` or `"zstd"`.
    pub fn name(self) -> &'static str {
        match self {
            CodecId::None => "none",
            CodecId::Gzip => "gzip",
            CodecId::Lzf => "lzf",
            CodecId::Zstd => "zstd",
        }
    }
}

/// A store's or pager's codec choice (with its level).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Codec {
    /// No compression.
    None,
    /// gzip at the default level (6, as `java.util.zip`'s DEFAULT_COMPRESSION).
    Gzip,
    /// gzip at level 9 (BEST_COMPRESSION).
    GzipBest,
    /// gzip at level 1 (BEST_SPEED).
    GzipSpeed,
    /// LZF in ZV chunk framing.
    Lzf,
    /// zstd at its default level (3).
    Zstd,
}

/// The accepted spellings, for error messages.
const VALID_NAMES: &str = "none, gzip, gzip-best, gzip-speed, lzf, zstd \
     (or GZIP_DEFAULT_COMPRESSION, GZIP_BEST_COMPRESSION, GZIP_BEST_SPEED, LZF)";

impl Codec {
    /// Every codec, in a fixed order.
    pub const ALL: [Codec; 6] = [Codec::None, Codec::Gzip, Codec::GzipBest, Codec::GzipSpeed, Codec::Lzf, Codec::Zstd];

    /// Parses a codec name: `"none"`, `"gzip"`, `"gzip-best"`, `"gzip-speed"`,
    /// `"lzf"`, `"zstd"` (exact, case-sensitive), or one of WebLogic's
    /// spellings `"GZIP_DEFAULT_COMPRESSION"`, `"GZIP_BEST_COMPRESSION"`,
    /// `"GZIP_BEST_SPEED"`, `"LZF"`.
    pub fn parse(name: &str) -> Result<Codec> {
        Ok(match name {
            "none" => Codec::None,
            "gzip" | "GZIP_DEFAULT_COMPRESSION" => Codec::Gzip,
            "gzip-best" | "GZIP_BEST_COMPRESSION" => Codec::GzipBest,
            "gzip-speed" | "GZIP_BEST_SPEED" => Codec::GzipSpeed,
            "lzf" | "LZF" => Codec::Lzf,
            "zstd" => Codec::Zstd,
            _ => return Err(Error::invalid(format!("unknown codec {name:?}; valid codecs are {VALID_NAMES}"))),
        })
    }

    /// The canonical (lower-case) name, as accepted by [`Codec::parse`].
    pub fn name(self) -> &'static str {
        match self {
            Codec::None => "none",
            Codec::Gzip => "gzip",
            Codec::GzipBest => "gzip-best",
            Codec::GzipSpeed => "gzip-speed",
            Codec::Lzf => "lzf",
            Codec::Zstd => "zstd",
        }
    }

    /// The id recorded for bodies this codec compresses; the three gzip
    /// levels share [`CodecId::Gzip`].
    pub fn id(self) -> CodecId {
        match self {
            Codec::None => CodecId::None,
            Codec::Gzip | Codec::GzipBest | Codec::GzipSpeed => CodecId::Gzip,
            Codec::Lzf => CodecId::Lzf,
            Codec::Zstd => CodecId::Zstd,
        }
    }
}

/// Always compresses `raw` with `codec` (`Codec::None` returns a copy).
///
/// # Panics
///
/// Only if zstd cannot allocate its compression context (out of memory).
pub fn compress(codec: Codec, raw: &[u8]) -> Vec<u8> {
    match try_compress(codec, raw) {
        Ok(out) => out,
        Err(e) => panic!("{} compression of an in-memory buffer failed: {e}", codec.name()),
    }
}

/// What the store calls for every body: compresses when
/// `raw.len() > threshold` and `codec != Codec::None`; if the compressed
/// form is not strictly smaller than `raw`, returns
/// `(CodecId::None, Cow::Borrowed(raw))`: a body that does not shrink is
/// stored raw.
pub fn encode_body(codec: Codec, threshold: usize, raw: &[u8]) -> (CodecId, Cow<'_, [u8]>) {
    if codec == Codec::None || raw.len() <= threshold {
        return (CodecId::None, Cow::Borrowed(raw));
    }
    match try_compress(codec, raw) {
        Ok(compressed) if compressed.len() < raw.len() => (codec.id(), Cow::Owned(compressed)),
        // Not smaller, or zstd could not get memory: storing raw is always
        // correct.
        _ => (CodecId::None, Cow::Borrowed(raw)),
    }
}

/// Decodes a stored body.
///
/// `raw_len` is the uncompressed length recorded in the record header: the
/// output must be exactly that long, otherwise [`Error::Codec`]. Corrupt
/// input gives [`Error::Codec`]; it never panics, loops or allocates much
/// more than `raw_len`. `CodecId::None` returns the bytes as they are (still
/// checking the length).
pub fn decode(id: CodecId, stored: &[u8], raw_len: usize) -> Result<Vec<u8>> {
    match id {
        CodecId::None => {
            check_uncompressed(stored, raw_len)?;
            Ok(stored.to_vec())
        }
        CodecId::Gzip => gzip_decode(stored, raw_len),
        CodecId::Lzf => lzf::decompress(stored, raw_len),
        CodecId::Zstd => zstd_decode(stored, raw_len),
    }
}

/// As [`decode`], into a buffer that can be shared: an uncompressed body
/// is copied once, straight from `stored`.
pub fn decode_shared(id: CodecId, stored: &[u8], raw_len: usize) -> Result<Arc<[u8]>> {
    if id == CodecId::None {
        check_uncompressed(stored, raw_len)?;
        return Ok(Arc::from(stored));
    }
    decode(id, stored, raw_len).map(Arc::from)
}

fn check_uncompressed(stored: &[u8], raw_len: usize) -> Result<()> {
    if stored.len() != raw_len {
        return Err(Error::Codec(format!("uncompressed body is {} bytes but the record says {raw_len}", stored.len())));
    }
    Ok(())
}

fn try_compress(codec: Codec, raw: &[u8]) -> std::io::Result<Vec<u8>> {
    match codec {
        Codec::None => Ok(raw.to_vec()),
        Codec::Gzip => gzip_encode(raw, flate2::Compression::default()),
        Codec::GzipBest => gzip_encode(raw, flate2::Compression::best()),
        Codec::GzipSpeed => gzip_encode(raw, flate2::Compression::fast()),
        Codec::Lzf => Ok(lzf::compress(raw)),
        Codec::Zstd => zstd_encode(raw),
    }
}

// ---------------------------------------------------------------- gzip

/// A gzip member is at least a 10-byte header and an 8-byte trailer.
const GZIP_MIN_LEN: usize = 18;
/// Deflate cannot expand by more than 1032:1 (a 258-byte match in two bits).
const DEFLATE_MAX_RATIO: usize = 1032;

thread_local! {
    // One raw-deflate state per thread and level, reset between bodies:
    // setting one up allocates and clears tables bigger than a small body,
    // which made per-body encoders the cost of gzip on 1 KiB bodies.
    static DEFLATERS: std::cell::RefCell<Vec<(u32, flate2::Compress)>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// RFC 1952: a gzip member is a 10-byte header, a raw deflate stream, and the
/// CRC-32 and length (mod 2^32) of the input, little-endian.
fn gzip_encode(raw: &[u8], level: flate2::Compression) -> std::io::Result<Vec<u8>> {
    // XFL: 2 = best compression, 4 = fastest; OS 255 = unknown.
    let xfl = match level.level() {
        9 => 2,
        1 => 4,
        _ => 0,
    };
    // Room for the worst case (stored deflate blocks plus the gzip framing),
    // so the output is never reallocated; untouched capacity costs nothing.
    let mut out = Vec::with_capacity(raw.len() + raw.len() / 16 + 64 + GZIP_MIN_LEN);
    out.extend_from_slice(&[0x1f, 0x8b, 8, 0, 0, 0, 0, 0, xfl, 255]);
    DEFLATERS.with(|cell| -> std::io::Result<()> {
        let mut deflaters = cell.borrow_mut();
        let index = match deflaters.iter().position(|(l, _)| *l == level.level()) {
            Some(i) => i,
            None => {
                deflaters.push((level.level(), flate2::Compress::new(level, false)));
                deflaters.len() - 1
            }
        };
        let deflater = &mut deflaters[index].1;
        deflater.reset();
        loop {
            let consumed = deflater.total_in() as usize;
            match deflater.compress_vec(&raw[consumed..], &mut out, flate2::FlushCompress::Finish)? {
                flate2::Status::StreamEnd => return Ok(()),
                _ => out.reserve(out.capacity().max(64)),
            }
        }
    })?;
    let mut crc = flate2::Crc::new();
    crc.update(raw);
    out.extend_from_slice(&crc.sum().to_le_bytes());
    out.extend_from_slice(&(raw.len() as u32).to_le_bytes());
    Ok(out)
}

fn gzip_decode(stored: &[u8], raw_len: usize) -> Result<Vec<u8>> {
    if stored.len() < GZIP_MIN_LEN {
        return Err(Error::Codec(format!(
            "gzip: the body is {} bytes, too short for a gzip stream (at least {GZIP_MIN_LEN})",
            stored.len()
        )));
    }
    // Refuse a length the input cannot possibly expand to before allocating
    // it (a corrupt header must not make us allocate gigabytes).
    let most = stored.len().saturating_mul(DEFLATE_MAX_RATIO);
    if raw_len > most {
        return Err(Error::Codec(format!(
            "gzip: {} compressed bytes cannot expand to the {raw_len} bytes the record says",
            stored.len()
        )));
    }
    let gzip_error = |e: std::io::Error| Error::Codec(format!("gzip: {e}"));

    // `&[u8]` is a `BufRead`, so the bufread decoder reads the body in place.
    // MultiGzDecoder accepts concatenated members (as Python's gzip does) and
    // rejects trailing garbage; CRC and length trailers are checked.
    let mut decoder = flate2::bufread::MultiGzDecoder::new(stored);
    let mut out = vec![0u8; raw_len];
    let mut filled = 0;
    while filled < raw_len {
        match decoder.read(&mut out[filled..]) {
            Ok(0) => {
                return Err(Error::Codec(format!(
                    "gzip: the stream ends after {filled} bytes but the record says {raw_len}"
                )))
            }
            Ok(n) => filled += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(gzip_error(e)),
        }
    }
    // Read on to the end, which checks the CRC and length trailer and that
    // nothing more comes out.
    let mut probe = [0u8; 1];
    loop {
        match decoder.read(&mut probe) {
            Ok(0) => break,
            Ok(_) => {
                return Err(Error::Codec(format!(
                    "gzip: the stream holds more than the {raw_len} bytes the record says"
                )))
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(gzip_error(e)),
        }
    }
    Ok(out)
}

// ---------------------------------------------------------------- zstd

/// zstd's default level.
const ZSTD_LEVEL: i32 = 3;

thread_local! {
    // One compression and one decompression context per thread, reused from
    // body to body: creating them (and sizing their tables) costs more than
    // compressing a small message. No locks; each thread has its own.
    static ZSTD_COMPRESSOR: RefCell<Option<zstd::bulk::Compressor<'static>>> =
        const { RefCell::new(None) };
    static ZSTD_DECOMPRESSOR: RefCell<Option<zstd::bulk::Decompressor<'static>>> =
        const { RefCell::new(None) };
}

fn zstd_encode(raw: &[u8]) -> std::io::Result<Vec<u8>> {
    let cached = ZSTD_COMPRESSOR.try_with(|cell| {
        let Ok(mut slot) = cell.try_borrow_mut() else {
            return None;
        };
        let compressor = match slot.as_mut() {
            Some(c) => c,
            None => match zstd::bulk::Compressor::new(ZSTD_LEVEL) {
                Ok(c) => slot.insert(c),
                Err(e) => return Some(Err(e)),
            },
        };
        // The whole input in one call records the content size in the frame.
        Some(compressor.compress(raw))
    });
    match cached {
        Ok(Some(result)) => result,
        // The thread is shutting down, or (impossible today) re-entered:
        // use a fresh context.
        _ => zstd::bulk::compress(raw, ZSTD_LEVEL),
    }
}

fn zstd_decode(stored: &[u8], raw_len: usize) -> Result<Vec<u8>> {
    if stored.is_empty() {
        return Err(Error::Codec("zstd: the body is empty, not a zstd frame".into()));
    }
    // `decompress` allocates the size the frame records when there is one
    // (refusing more than raw_len), else raw_len: never more than raw_len.
    let decompress = |d: &mut zstd::bulk::Decompressor<'static>| d.decompress(stored, raw_len);
    let cached = ZSTD_DECOMPRESSOR.try_with(|cell| {
        let Ok(mut slot) = cell.try_borrow_mut() else {
            return None;
        };
        let decompressor = match slot.as_mut() {
            Some(d) => d,
            None => match zstd::bulk::Decompressor::new() {
                Ok(d) => slot.insert(d),
                Err(e) => return Some(Err(e)),
            },
        };
        Some(decompress(decompressor))
    });
    let result = match cached {
        Ok(Some(result)) => result,
        _ => zstd::bulk::Decompressor::new().and_then(|mut d| decompress(&mut d)),
    };
    let out = result.map_err(|e| Error::Codec(format!("zstd: {e} (record says {raw_len} bytes)")))?;
    if out.len() != raw_len {
        return Err(Error::Codec(format!(
            "zstd: the frame decodes to {} bytes but the record says {raw_len}",
            out.len()
        )));
    }
    Ok(out)
}

#[cfg(test)]
mod tests;
