//! LZF bodies in the "ZV" chunk framing of ning/compress and the `lzf` tool.
//!
//! A body is a sequence of chunks, each holding at most 65535 uncompressed
//! bytes. Every chunk starts with `'Z' 'V'` and a type byte:
//!
//! * type 0 (stored): a 2-byte big-endian length `N`, then `N` raw bytes;
//! * type 1 (compressed): a 2-byte big-endian compressed length `C`, a
//!   2-byte big-endian uncompressed length `U`, then `C` bytes in the liblzf
//!   block format.
//!
//! An empty input is zero chunks (an empty body).
//!
//! The liblzf block format is a sequence of items, each starting with a
//! control byte `c`:
//!
//! * `c < 32`: a literal run of `c + 1` bytes, which follow;
//! * otherwise a back reference: the length field is `c >> 5` (when it is 7,
//!   the next byte is added to it); the next byte `o` gives the distance
//!   `((c & 0x1f) << 8) + o + 1`; `length field + 2` bytes are copied from
//!   that far back in the output, byte by byte (so they may overlap).
//!
//! Back references never reach outside their own chunk.

use crate::error::{Error, Result};

/// Most uncompressed bytes one chunk holds (what ning/compress uses).
pub const MAX_CHUNK_LEN: usize = 0xFFFF;

const MAGIC: [u8; 2] = *b"ZV";
const TYPE_STORED: u8 = 0;
const TYPE_COMPRESSED: u8 = 1;
const STORED_HEADER_LEN: usize = 5;
const COMPRESSED_HEADER_LEN: usize = 7;

/// Longest literal run one control byte can announce.
const MAX_LITERAL: usize = 32;
/// Farthest a back reference can reach.
const MAX_DISTANCE: usize = 1 << 13;
/// Longest back reference: a length field of 7 + 255, plus 2.
const MAX_MATCH: usize = 264;
/// Shortest back reference.
const MIN_MATCH: usize = 3;
/// Chunks shorter than this are not worth trying to compress.
const MIN_COMPRESS_LEN: usize = 16;

/// After `2^SKIP_SHIFT` bytes without a match, the search advances two
/// bytes at a time, then three, and so on.
const SKIP_SHIFT: u32 = 6;

/// The hash table covers at most `2^MAX_HASH_BITS` three-byte sequences.
const MAX_HASH_BITS: u32 = 14;
const MIN_HASH_BITS: u32 = 8;

/// The match finder's table: for each hash of three bytes, the position
/// (plus one; zero means empty) of the latest chunk offset that had it.
/// Positions fit in `u16` because a chunk holds at most 65535 bytes.
type HashTable = [u16; 1 << MAX_HASH_BITS];

/// Compresses `raw` into a ZV-framed LZF body.
///
/// Each chunk is written compressed only when that saves bytes; otherwise it
/// is stored. The empty input gives the empty body.
pub fn compress(raw: &[u8]) -> Vec<u8> {
    let chunks = raw.len().div_ceil(MAX_CHUNK_LEN);
    // Enough for the worst case (every chunk stored), so `out` never grows:
    // the block compressor gives up once it would not save anything, and it
    // overshoots its limit by at most one item before noticing.
    let mut out = Vec::with_capacity(raw.len() + chunks * COMPRESSED_HEADER_LEN + MAX_MATCH);
    let mut table: HashTable = [0; 1 << MAX_HASH_BITS];
    for chunk in raw.chunks(MAX_CHUNK_LEN) {
        let len = chunk.len();
        let header_at = out.len();
        if len >= MIN_COMPRESS_LEN {
            out.extend_from_slice(&[MAGIC[0], MAGIC[1], TYPE_COMPRESSED, 0, 0, 0, 0]);
            // A compressed chunk's header is two bytes longer than a stored
            // one's, so it must save at least three bytes of payload.
            if compress_block(chunk, &mut out, len - 3, &mut table) {
                let compressed_len = out.len() - header_at - COMPRESSED_HEADER_LEN;
                // Both fit: compressed_len < len <= 0xFFFF.
                out[header_at + 3..header_at + 5].copy_from_slice(&(compressed_len as u16).to_be_bytes());
                out[header_at + 5..header_at + 7].copy_from_slice(&(len as u16).to_be_bytes());
                continue;
            }
            out.truncate(header_at);
        }
        out.extend_from_slice(&[MAGIC[0], MAGIC[1], TYPE_STORED]);
        out.extend_from_slice(&(len as u16).to_be_bytes());
        out.extend_from_slice(chunk);
    }
    out
}

/// Decodes a ZV-framed LZF body that must expand to exactly `raw_len` bytes.
///
/// Every header, length and back reference is checked; malformed input gives
/// [`Error::Codec`] naming the chunk and what is wrong with it. At most
/// `raw_len` bytes are allocated, and only once the chunk headers agree that
/// they add up to `raw_len`.
pub fn decompress(stored: &[u8], raw_len: usize) -> Result<Vec<u8>> {
    // First pass: walk the headers only, so a body whose chunks do not add up
    // to `raw_len` is refused before anything is allocated or decoded.
    let mut total: usize = 0;
    for chunk in Chunks::new(stored) {
        total = total.saturating_add(chunk?.raw_len());
    }
    if total != raw_len {
        return Err(Error::Codec(format!(
            "lzf: the chunks hold {total} uncompressed bytes but the record says {raw_len}"
        )));
    }

    let mut out = Vec::with_capacity(raw_len);
    for chunk in Chunks::new(stored) {
        match chunk? {
            Chunk::Stored { data, .. } => out.extend_from_slice(data),
            Chunk::Compressed { index, offset, data, raw_len } => {
                decompress_block(data, &mut out, raw_len).map_err(|why| {
                    Error::Codec(format!("lzf: compressed chunk {index} (at byte {offset} of the body): {why}"))
                })?;
            }
        }
    }
    debug_assert_eq!(out.len(), raw_len);
    Ok(out)
}

/// One chunk of a ZV body, borrowed from it.
#[derive(Debug)]
enum Chunk<'a> {
    Stored { data: &'a [u8] },
    Compressed { index: usize, offset: usize, data: &'a [u8], raw_len: usize },
}

impl Chunk<'_> {
    fn raw_len(&self) -> usize {
        match self {
            Chunk::Stored { data } => data.len(),
            Chunk::Compressed { raw_len, .. } => *raw_len,
        }
    }
}

/// Walks the chunk headers of a ZV body, checking the framing.
struct Chunks<'a> {
    body: &'a [u8],
    pos: usize,
    index: usize,
    failed: bool,
}

impl<'a> Chunks<'a> {
    fn new(body: &'a [u8]) -> Self {
        Chunks { body, pos: 0, index: 0, failed: false }
    }

    fn error(&mut self, why: impl std::fmt::Display) -> Error {
        self.failed = true;
        Error::Codec(format!("lzf: chunk {} (at byte {} of the body): {why}", self.index, self.pos))
    }

    fn next_chunk(&mut self) -> Result<Chunk<'a>> {
        let rest = &self.body[self.pos..];
        if rest.len() < STORED_HEADER_LEN {
            return Err(self.error(format_args!(
                "truncated chunk header: {} bytes left, a header takes at least {STORED_HEADER_LEN}",
                rest.len()
            )));
        }
        if rest[..2] != MAGIC {
            return Err(self.error(format_args!("bad magic {:02x} {:02x}, expected 5a 56 (\"ZV\")", rest[0], rest[1])));
        }
        let be16 = |at: usize| usize::from(u16::from_be_bytes([rest[at], rest[at + 1]]));
        let (header_len, data_len, chunk) = match rest[2] {
            TYPE_STORED => {
                let len = be16(3);
                (STORED_HEADER_LEN, len, None)
            }
            TYPE_COMPRESSED => {
                if rest.len() < COMPRESSED_HEADER_LEN {
                    return Err(self.error(format_args!(
                        "truncated compressed-chunk header: {} bytes left, it takes \
                         {COMPRESSED_HEADER_LEN}",
                        rest.len()
                    )));
                }
                (COMPRESSED_HEADER_LEN, be16(3), Some(be16(5)))
            }
            other => {
                return Err(self.error(format_args!("unknown chunk type {other} (0 = stored, 1 = compressed)")));
            }
        };
        let available = rest.len() - header_len;
        if data_len > available {
            return Err(self.error(format_args!(
                "truncated chunk: the header announces {data_len} bytes of data, only \
                 {available} are left"
            )));
        }
        let data = &rest[header_len..header_len + data_len];
        let chunk = match chunk {
            None => Chunk::Stored { data },
            Some(raw_len) => Chunk::Compressed { index: self.index, offset: self.pos, data, raw_len },
        };
        self.pos += header_len + data_len;
        self.index += 1;
        Ok(chunk)
    }
}

impl<'a> Iterator for Chunks<'a> {
    type Item = Result<Chunk<'a>>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.pos >= self.body.len() {
            return None;
        }
        Some(self.next_chunk())
    }
}

/// Compresses one chunk (at most [`MAX_CHUNK_LEN`] bytes) in the liblzf block
/// format, appending to `out`.
///
/// Returns `false` as soon as it is clear that the result would be longer
/// than `limit` bytes; `out` then holds a partial block, which the caller
/// truncates. The overshoot before noticing is at most one back reference.
fn compress_block(input: &[u8], out: &mut Vec<u8>, limit: usize, table: &mut HashTable) -> bool {
    debug_assert!(input.len() <= MAX_CHUNK_LEN);
    let n = input.len();
    let start = out.len();

    // Size the part of the table in use to the input: clearing 32 KiB for a
    // 200-byte body would cost more than compressing it.
    let bits = (usize::BITS - n.leading_zeros()).clamp(MIN_HASH_BITS, MAX_HASH_BITS);
    let table = &mut table[..1 << bits];
    table.fill(0);

    let mut literal_start = 0; // first byte not yet emitted
    let mut ip = 0;
    while ip + MIN_MATCH <= n {
        let h = hash3(input, ip, bits);
        let candidate = usize::from(table[h]);
        // ip < n <= 0xFFFF, so ip + 1 fits.
        table[h] = (ip + 1) as u16;
        if candidate != 0 {
            let r = candidate - 1; // r < ip: the table only holds earlier positions
            let distance = ip - r;
            if distance <= MAX_DISTANCE && input[r..r + MIN_MATCH] == input[ip..ip + MIN_MATCH] {
                let len = MIN_MATCH + match_len(input, r + MIN_MATCH, ip + MIN_MATCH, MAX_MATCH);
                emit_literals(&input[literal_start..ip], out);
                emit_match(distance, len, out);
                if out.len() - start > limit {
                    return false;
                }
                let end = ip + len;
                // Index the positions inside the match, so later repeats of
                // them are found too; this is what makes repetitive text
                // (JSON keys, say) compress well.
                let last = end.min(n - (MIN_MATCH - 1));
                for p in ip + 1..last {
                    table[hash3(input, p, bits)] = (p + 1) as u16;
                }
                ip = end;
                literal_start = ip;
                continue;
            }
        }
        // No match. The longer it has been since the last one, the bigger
        // the steps: incompressible stretches are crossed quickly, while
        // compressible data (where matches keep coming) is searched at
        // every position.
        ip += 1 + ((ip - literal_start) >> SKIP_SHIFT);
        // Give up early on incompressible input: the literals still pending
        // cost one control byte per 32.
        let pending = ip.min(n) - literal_start;
        if out.len() - start + pending + pending.div_ceil(MAX_LITERAL) > limit {
            return false;
        }
    }
    emit_literals(&input[literal_start..], out);
    out.len() - start <= limit
}

/// Hash of the three bytes at `at`, in `bits` bits.
#[inline(always)]
fn hash3(input: &[u8], at: usize, bits: u32) -> usize {
    let v = u32::from(input[at]) << 16 | u32::from(input[at + 1]) << 8 | u32::from(input[at + 2]);
    (v.wrapping_mul(0x9E37_79B1) >> (32 - bits)) as usize
}

/// How many bytes match between `input[a..]` and `input[b..]` (with `a < b`),
/// up to `max - MIN_MATCH` (the caller has already matched `MIN_MATCH`).
#[inline(always)]
fn match_len(input: &[u8], a: usize, b: usize, max: usize) -> usize {
    let limit = (max - MIN_MATCH).min(input.len() - b);
    let mut len = 0;
    while len + 8 <= limit {
        let x = u64::from_le_bytes(word(input, a + len));
        let y = u64::from_le_bytes(word(input, b + len));
        let diff = x ^ y;
        if diff != 0 {
            return len + (diff.trailing_zeros() / 8) as usize;
        }
        len += 8;
    }
    while len < limit && input[a + len] == input[b + len] {
        len += 1;
    }
    len
}

#[inline(always)]
fn word(input: &[u8], at: usize) -> [u8; 8] {
    let mut w = [0; 8];
    w.copy_from_slice(&input[at..at + 8]);
    w
}

fn emit_literals(literals: &[u8], out: &mut Vec<u8>) {
    for run in literals.chunks(MAX_LITERAL) {
        out.push((run.len() - 1) as u8);
        out.extend_from_slice(run);
    }
}

/// Emits a back reference `distance` (1..=8192) bytes back, `len` (3..=264) long.
fn emit_match(distance: usize, len: usize, out: &mut Vec<u8>) {
    debug_assert!((1..=MAX_DISTANCE).contains(&distance));
    debug_assert!((MIN_MATCH..=MAX_MATCH).contains(&len));
    let off = distance - 1;
    let field = len - 2;
    let high = (off >> 8) as u8;
    if field < 7 {
        out.push((field as u8) << 5 | high);
    } else {
        out.push(7 << 5 | high);
        out.push((field - 7) as u8);
    }
    out.push(off as u8);
}

/// Decodes one liblzf block, appending exactly `expected` bytes to `out`.
///
/// Back references may not reach before the block's own output. Errors are
/// plain descriptions; the caller adds which chunk it was.
fn decompress_block(input: &[u8], out: &mut Vec<u8>, expected: usize) -> std::result::Result<(), String> {
    let base = out.len();
    let end = base + expected;
    let mut ip = 0;
    while ip < input.len() {
        let at = ip;
        let c = usize::from(input[ip]);
        ip += 1;
        if c < 32 {
            let run = c + 1;
            let Some(literals) = input.get(ip..ip + run) else {
                return Err(format!(
                    "literal run of {run} bytes at byte {at} of the block runs past its end \
                     ({} bytes)",
                    input.len()
                ));
            };
            if out.len() + run > end {
                return Err(overrun(expected, at));
            }
            out.extend_from_slice(literals);
            ip += run;
        } else {
            let mut field = c >> 5;
            if field == 7 {
                let Some(&extra) = input.get(ip) else {
                    return Err(truncated_match(at));
                };
                field += usize::from(extra);
                ip += 1;
            }
            let Some(&low) = input.get(ip) else {
                return Err(truncated_match(at));
            };
            ip += 1;
            let distance = ((c & 0x1f) << 8) + usize::from(low) + 1;
            let len = field + 2;
            let produced = out.len() - base;
            if distance > produced {
                return Err(format!(
                    "back reference at byte {at} of the block reaches {distance} bytes back \
                     from output offset {produced}, before the start of the chunk"
                ));
            }
            if out.len() + len > end {
                return Err(overrun(expected, at));
            }
            // Byte-by-byte semantics: when the source overlaps what is being
            // written, the pattern repeats. Copying in pieces no longer than
            // what is already there gives the same result.
            let mut from = out.len() - distance;
            let mut left = len;
            while left > 0 {
                let piece = left.min(out.len() - from);
                out.extend_from_within(from..from + piece);
                from += piece;
                left -= piece;
            }
        }
    }
    let produced = out.len() - base;
    if produced != expected {
        return Err(format!("the block decodes to {produced} bytes but the chunk header says {expected}"));
    }
    Ok(())
}

fn overrun(expected: usize, at: usize) -> String {
    format!("the item at byte {at} of the block writes past the {expected} bytes the header declares")
}

fn truncated_match(at: usize) -> String {
    format!("back reference at byte {at} of the block is cut off by the end of the block")
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn codec_error(result: Result<Vec<u8>>) -> String {
        match result {
            Err(Error::Codec(msg)) => msg,
            other => panic!("expected a codec error, got {other:?}"),
        }
    }

    /// A ZV stream built by hand from the format description: one stored
    /// chunk, then one compressed chunk using literal runs, a short back
    /// reference, an overlapping long one (with the extra length byte) and a
    /// final literal.
    #[test]
    fn known_answer_hand_built_stream() {
        let mut stream = Vec::new();
        // Chunk 0, stored: "hello".
        stream.extend_from_slice(&[b'Z', b'V', 0, 0x00, 0x05]);
        stream.extend_from_slice(b"hello");
        // Chunk 1, compressed.
        let block = [
            0x02, b'a', b'b', b'c', // literal run of 3: "abc"
            0xA0, 0x02, // length field 5 (7 bytes), distance 2 + 1 = 3: "abcabca"
            0xE0, 0x0B, 0x00, // length field 7 + 11 = 18 (20 bytes), distance 1: "a" * 20
            0x00, b'!', // literal run of 1: "!"
        ];
        stream.extend_from_slice(&[b'Z', b'V', 1, 0x00, block.len() as u8, 0x00, 31]);
        stream.extend_from_slice(&block);

        let mut expected = b"hello".to_vec();
        expected.extend_from_slice(b"abcabcabca");
        expected.extend_from_slice(&[b'a'; 20]);
        expected.push(b'!');
        assert_eq!(expected.len(), 5 + 31);
        assert_eq!(decompress(&stream, expected.len()).unwrap(), expected);
        assert_eq!(crate::codec::decode(crate::codec::CodecId::Lzf, &stream, 36).unwrap(), expected);
    }

    /// A back reference with the high offset bits set: 300 bytes back.
    #[test]
    fn known_answer_far_reference() {
        let text: Vec<u8> = (0..300u32).map(|i| b'A' + (i % 26) as u8).collect();
        let mut block = Vec::new();
        for run in text.chunks(32) {
            block.push(run.len() as u8 - 1);
            block.extend_from_slice(run);
        }
        // distance 300 -> offset 299 = 0x12B; length 4 -> field 2.
        block.extend_from_slice(&[2 << 5 | 0x01, 0x2B]);
        let mut stream = vec![b'Z', b'V', 1];
        stream.extend_from_slice(&(block.len() as u16).to_be_bytes());
        stream.extend_from_slice(&304u16.to_be_bytes());
        stream.extend_from_slice(&block);
        let mut expected = text.clone();
        expected.extend_from_slice(b"ABCD");
        assert_eq!(decompress(&stream, 304).unwrap(), expected);
    }

    #[test]
    fn our_encoding_has_the_expected_shape() {
        assert!(compress(b"").is_empty());
        assert_eq!(compress(b"x"), b"ZV\x00\x00\x01x");
        // 20 identical bytes: a literal then one overlapping back reference.
        let stream = compress(&[7u8; 20]);
        assert_eq!(&stream[..3], b"ZV\x01");
        assert_eq!(&stream[3..7], &[0, 5, 0, 20]);
        assert_eq!(&stream[7..], &[0x00, 7, 0xE0, 19 - 2 - 7, 0x00]);

        // Exactly one chunk per 65535 bytes.
        for (len, chunks) in [(65_535, 1), (65_536, 2), (131_070, 2), (131_071, 3)] {
            let raw = vec![1u8; len];
            let stream = compress(&raw);
            let n = Chunks::new(&stream).collect::<Result<Vec<_>>>().unwrap().len();
            assert_eq!(n, chunks, "{len}");
            assert_eq!(decompress(&stream, len).unwrap(), raw);
        }
    }

    #[test]
    fn incompressible_chunks_are_stored() {
        let mut state = 0x1234_5678_u32;
        let raw: Vec<u8> = (0..70_000)
            .map(|_| {
                state = state.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                (state >> 24) as u8
            })
            .collect();
        let stream = compress(&raw);
        let types: Vec<_> = Chunks::new(&stream).map(|c| matches!(c.unwrap(), Chunk::Compressed { .. })).collect();
        assert_eq!(types, [false, false]);
        assert_eq!(stream.len(), raw.len() + 2 * STORED_HEADER_LEN);
    }

    #[test]
    fn compressor_finds_matches() {
        let raw = crate::codec::tests::json_like(65_535);
        let stream = compress(&raw);
        let ratio = stream.len() as f64 / raw.len() as f64;
        assert!(ratio < 0.4, "ratio {ratio}");
        // Long runs use the longest references.
        let zeros = compress(&vec![0u8; 65_535]);
        assert!(zeros.len() < 65_535 / 80, "{}", zeros.len());
    }

    #[test]
    fn errors_name_the_chunk_and_the_problem() {
        let good = compress(&crate::codec::tests::json_like(100_000));
        let len = 100_000;
        assert_eq!(decompress(&good, len).unwrap().len(), len);

        let mut bad = good.clone();
        bad[0] = b'X';
        let msg = codec_error(decompress(&bad, len));
        assert!(msg.contains("chunk 0") && msg.contains("bad magic"), "{msg}");

        let second = 7 + usize::from(u16::from_be_bytes([good[3], good[4]]));
        let mut bad = good.clone();
        bad[second + 2] = 9;
        let msg = codec_error(decompress(&bad, len));
        assert!(msg.contains("chunk 1") && msg.contains("unknown chunk type 9"), "{msg}");

        let msg = codec_error(decompress(&good[..second + 4], len));
        assert!(msg.contains("chunk 1") && msg.contains("truncated"), "{msg}");
        let msg = codec_error(decompress(&good[..second + 20], len));
        assert!(msg.contains("chunk 1") && msg.contains("truncated chunk"), "{msg}");

        let msg = codec_error(decompress(&good, len + 1));
        assert!(msg.contains("record says"), "{msg}");

        // A back reference before the start of the chunk.
        let stream = [b'Z', b'V', 1, 0, 4, 0, 4, 0x00, b'a', 0x20, 0x01];
        let msg = codec_error(decompress(&stream, 4));
        assert!(msg.contains("chunk 0") && msg.contains("before the start"), "{msg}");

        // A block that writes more than its header declares.
        let stream = [b'Z', b'V', 1, 0, 4, 0, 3, 0x00, b'a', 0x20, 0x00];
        let msg = codec_error(decompress(&stream, 3));
        assert!(msg.contains("past the 3 bytes"), "{msg}");

        // ... or less.
        let stream = [b'Z', b'V', 1, 0, 4, 0, 5, 0x00, b'a', 0x20, 0x00];
        let msg = codec_error(decompress(&stream, 5));
        assert!(msg.contains("decodes to 4 bytes"), "{msg}");

        // A literal run cut off by the end of the block.
        let stream = [b'Z', b'V', 1, 0, 3, 0, 5, 0x04, b'a', b'b'];
        let msg = codec_error(decompress(&stream, 5));
        assert!(msg.contains("literal run of 5"), "{msg}");

        // A back reference missing its offset byte.
        let stream = [b'Z', b'V', 1, 0, 3, 0, 5, 0x00, b'a', 0x20];
        let msg = codec_error(decompress(&stream, 5));
        assert!(msg.contains("cut off"), "{msg}");
        let stream = [b'Z', b'V', 1, 0, 3, 0, 12, 0x00, b'a', 0xE0];
        let msg = codec_error(decompress(&stream, 12));
        assert!(msg.contains("cut off"), "{msg}");

        // The chunks do not add up to the record's length.
        let msg = codec_error(decompress(b"ZV\x00\x00\x02ab", 3));
        assert!(msg.contains("hold 2"), "{msg}");
    }

    #[test]
    fn tolerates_what_other_writers_may_emit() {
        // An empty stored chunk (some writers emit one for empty input).
        assert_eq!(decompress(b"ZV\x00\x00\x00", 0).unwrap(), b"");
        assert_eq!(decompress(b"ZV\x00\x00\x00ZV\x00\x00\x01q", 1).unwrap(), b"q");
        // A compressed chunk even though it did not pay off.
        assert_eq!(decompress(b"ZV\x01\x00\x02\x00\x01\x00z", 1).unwrap(), b"z");
    }

    fn repeated_snippets() -> impl Strategy<Value = Vec<u8>> {
        (prop::collection::vec(any::<u8>(), 1..300), 1usize..1000, 0usize..300).prop_map(|(snippet, times, cut)| {
            let mut out = snippet.repeat(times);
            out.truncate(out.len().saturating_sub(cut));
            out
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn prop_lzf_round_trip(raw in prop_oneof![
            prop::collection::vec(any::<u8>(), 0..70_000),
            prop::collection::vec(0u8..4, 0..140_000),
            repeated_snippets(),
        ]) {
            let stream = compress(&raw);
            prop_assert_eq!(decompress(&stream, raw.len()).unwrap(), raw.clone());
            // Every compressed chunk pays for its longer header.
            for chunk in Chunks::new(&stream) {
                if let Chunk::Compressed { data, raw_len, .. } = chunk.unwrap() {
                    prop_assert!(data.len() + 2 < raw_len);
                    prop_assert!(raw_len <= MAX_CHUNK_LEN);
                }
            }
        }

        #[test]
        fn prop_lzf_blocks_never_panic(
            block in prop::collection::vec(any::<u8>(), 0..2000),
            expected in 0usize..70_000,
        ) {
            let mut out = Vec::new();
            let _ = decompress_block(&block, &mut out, expected);
            prop_assert!(out.len() <= expected);
        }
    }
}
