//! Tests of the codec front end: every codec, `encode_body`, and `decode` on
//! malformed input. LZF's own format tests live in `lzf.rs`.
#![allow(clippy::unwrap_used)]

use super::*;
use proptest::prelude::*;
use std::io::{Read, Write};

/// Deterministic pseudo-random bytes (xorshift64*), so failures reproduce.
fn random_bytes(len: usize, seed: u64) -> Vec<u8> {
    let mut state = seed | 1;
    (0..len)
        .map(|_| {
            state ^= state >> 12;
            state ^= state << 25;
            state ^= state >> 27;
            (state.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 56) as u8
        })
        .collect()
}

/// Message-like JSON: the same keys over and over, varying values.
pub(super) fn json_like(len: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(len + 200);
    let mut i = 0u64;
    while out.len() < len {
        let record = format!(
            "{{\"orderId\":{},\"customer\":\"cust-{:05}\",\"status\":\"{}\",\"amount\":{}.{:02},\
             \"items\":[{{\"sku\":\"SKU-{:04}\",\"qty\":{}}}],\"currency\":\"EUR\"}},\n",
            100_000 + i,
            i * 7 % 10_000,
            ["NEW", "PAID", "SHIPPED"][(i % 3) as usize],
            i * 13 % 1000,
            i % 100,
            i * 31 % 5000,
            i % 9 + 1
        );
        out.extend_from_slice(record.as_bytes());
        i += 1;
    }
    out.truncate(len);
    out
}

fn samples() -> Vec<(String, Vec<u8>)> {
    let mut samples = vec![
        ("empty".to_string(), Vec::new()),
        ("one byte".to_string(), vec![0x42]),
        ("random 4 KiB".to_string(), random_bytes(4096, 1)),
        ("random 100 KiB".to_string(), random_bytes(100 * 1024, 2)),
        ("zeros 100 KiB".to_string(), vec![0; 100 * 1024]),
        ("abab".to_string(), b"ab".repeat(50_000)),
        ("json 1 KiB".to_string(), json_like(1024)),
        ("json 300 KiB".to_string(), json_like(300 * 1024)),
    ];
    for len in [65_534, 65_535, 65_536, 65_537, 131_070, 200_000] {
        samples.push((format!("random {len}"), random_bytes(len, len as u64)));
        samples.push((format!("json {len}"), json_like(len)));
        samples.push((format!("zeros {len}"), vec![0; len]));
    }
    samples
}

fn round_trip(codec: Codec, raw: &[u8]) {
    let compressed = compress(codec, raw);
    let decoded = decode(codec.id(), &compressed, raw.len())
        .unwrap_or_else(|e| panic!("{} failed to decode its own output: {e}", codec.name()));
    assert!(decoded == raw, "{} round trip changed {} bytes", codec.name(), raw.len());

    let (id, body) = encode_body(codec, 0, raw);
    let decoded = decode(id, &body, raw.len()).unwrap();
    assert!(decoded == raw, "{} encode_body round trip changed the body", codec.name());
}

#[test]
fn every_codec_round_trips_the_samples() {
    for (what, raw) in samples() {
        for codec in Codec::ALL {
            eprintln!("{} / {what}", codec.name());
            round_trip(codec, &raw);
        }
    }
}

#[test]
fn ratios_on_repetitive_json() {
    let raw = json_like(64 * 1024);
    for codec in Codec::ALL {
        let ratio = compress(codec, &raw).len() as f64 / raw.len() as f64;
        eprintln!("{:<10} {:.3}", codec.name(), ratio);
        if codec != Codec::None {
            assert!(ratio < 0.5, "{} only got to {ratio:.3}", codec.name());
        }
    }
}

#[test]
fn ids_and_names() {
    for b in 0..=255u8 {
        match CodecId::from_byte(b) {
            Some(id) => assert_eq!(id as u8, b),
            None => assert!(b > 3),
        }
    }
    let names: Vec<_> =
        [CodecId::None, CodecId::Gzip, CodecId::Lzf, CodecId::Zstd].iter().map(|id| id.name()).collect();
    assert_eq!(names, ["none", "gzip", "lzf", "zstd"]);

    for codec in Codec::ALL {
        assert_eq!(Codec::parse(codec.name()).unwrap(), codec);
    }
    let ids: Vec<_> = Codec::ALL.iter().map(|c| c.id()).collect();
    assert_eq!(ids, [CodecId::None, CodecId::Gzip, CodecId::Gzip, CodecId::Gzip, CodecId::Lzf, CodecId::Zstd]);
    assert_eq!(Codec::parse("GZIP_DEFAULT_COMPRESSION").unwrap(), Codec::Gzip);
    assert_eq!(Codec::parse("GZIP_BEST_COMPRESSION").unwrap(), Codec::GzipBest);
    assert_eq!(Codec::parse("GZIP_BEST_SPEED").unwrap(), Codec::GzipSpeed);
    assert_eq!(Codec::parse("LZF").unwrap(), Codec::Lzf);
}

#[test]
fn parse_rejects_other_spellings() {
    for bad in ["", "GZIP", "Gzip", "zstd ", "lz4", "gzip_best", "ZSTD", "NONE"] {
        match Codec::parse(bad) {
            Err(Error::InvalidArgument(msg)) => {
                assert!(msg.contains(&format!("{bad:?}")), "{msg}");
                assert!(msg.contains("gzip-best") && msg.contains("zstd"), "{msg}");
            }
            other => panic!("{bad:?} parsed as {other:?}"),
        }
    }
}

#[test]
fn encode_body_respects_threshold() {
    let raw = json_like(1000);
    for codec in Codec::ALL {
        for threshold in [1000, 5000] {
            let (id, body) = encode_body(codec, threshold, &raw);
            assert_eq!(id, CodecId::None);
            assert!(matches!(body, Cow::Borrowed(b) if b.as_ptr() == raw.as_ptr()));
        }
        let (id, body) = encode_body(codec, 999, &raw);
        assert_eq!(id, codec.id());
        if codec == Codec::None {
            assert!(matches!(body, Cow::Borrowed(_)));
        } else {
            assert!(matches!(body, Cow::Owned(_)));
            assert!(body.len() < raw.len());
        }
        assert_eq!(decode(id, &body, raw.len()).unwrap(), raw);
    }
}

#[test]
fn encode_body_stores_raw_when_not_shrinking() {
    let random = random_bytes(10_000, 7);
    for raw in [&random[..], &[], &[1], &[1, 2, 3], b"hello world"] {
        for codec in Codec::ALL {
            let (id, body) = encode_body(codec, 0, raw);
            assert_eq!(id, CodecId::None, "{} on {} bytes", codec.name(), raw.len());
            assert!(matches!(body, Cow::Borrowed(b) if b.as_ptr() == raw.as_ptr()));
        }
    }
}

#[test]
fn gzip_is_rfc1952_and_reads_other_encoders() {
    let raw = json_like(50_000);
    for codec in [Codec::Gzip, Codec::GzipBest, Codec::GzipSpeed] {
        let stored = compress(codec, &raw);
        assert_eq!(&stored[..3], &[0x1f, 0x8b, 0x08], "{}", codec.name());
        let mut decoded = Vec::new();
        flate2::read::GzDecoder::new(&stored[..]).read_to_end(&mut decoded).unwrap();
        assert_eq!(decoded, raw);
    }
    // The levels really differ: speed gives up ratio.
    let best = compress(Codec::GzipBest, &raw).len();
    let default = compress(Codec::Gzip, &raw).len();
    let speed = compress(Codec::GzipSpeed, &raw).len();
    assert!(best < speed && default < speed, "{best} {default} {speed}");

    // flate2 at level 9, written independently of our encoder.
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::new(9));
    encoder.write_all(&raw).unwrap();
    let foreign = encoder.finish().unwrap();
    assert_eq!(decode(CodecId::Gzip, &foreign, raw.len()).unwrap(), raw);

    // A gzip header with a file name and comment (as the gzip tool writes).
    let mut encoder = flate2::GzBuilder::new()
        .filename("body.json")
        .comment("from elsewhere")
        .mtime(1_700_000_000)
        .write(Vec::new(), flate2::Compression::new(9));
    encoder.write_all(&raw).unwrap();
    let named = encoder.finish().unwrap();
    assert_eq!(decode(CodecId::Gzip, &named, raw.len()).unwrap(), raw);

    // Concatenated members decode as one body, as Python's gzip does.
    let half = raw.len() / 2;
    let mut two = compress(Codec::Gzip, &raw[..half]);
    two.extend_from_slice(&compress(Codec::Gzip, &raw[half..]));
    assert_eq!(decode(CodecId::Gzip, &two, raw.len()).unwrap(), raw);
}

#[test]
fn zstd_reads_other_encoders() {
    let raw = json_like(50_000);
    let stored = compress(Codec::Zstd, &raw);
    assert_eq!(&stored[..4], &[0x28, 0xb5, 0x2f, 0xfd]);
    assert_eq!(zstd::zstd_safe::get_frame_content_size(&stored).ok(), Some(Some(raw.len() as u64)));
    // A streaming frame that does not record its size, at another level.
    let foreign = zstd::stream::encode_all(&raw[..], 19).unwrap();
    assert_eq!(decode(CodecId::Zstd, &foreign, raw.len()).unwrap(), raw);
}

fn assert_codec_error(result: Result<Vec<u8>>, needle: &str) {
    match result {
        Err(Error::Codec(msg)) => assert!(msg.contains(needle), "{msg:?} lacks {needle:?}"),
        other => panic!("expected a codec error mentioning {needle:?}, got {other:?}"),
    }
}

#[test]
fn decode_checks_the_length() {
    let raw = json_like(20_000);
    assert_codec_error(decode(CodecId::None, &raw, raw.len() + 1), "record says");
    assert_codec_error(decode(CodecId::None, &raw, raw.len() - 1), "record says");
    for codec in [Codec::Gzip, Codec::Lzf, Codec::Zstd] {
        let stored = compress(codec, &raw);
        for wrong in [0, 1, raw.len() - 1, raw.len() + 1, raw.len() * 2] {
            let result = decode(codec.id(), &stored, wrong);
            assert!(matches!(result, Err(Error::Codec(_))), "{} with {wrong}", codec.name());
        }
        // Truncated bodies.
        for cut in [0, 1, stored.len() / 2, stored.len() - 1] {
            let result = decode(codec.id(), &stored[..cut], raw.len());
            assert!(matches!(result, Err(Error::Codec(_))), "{} cut at {cut}", codec.name());
        }
        // Trailing garbage.
        let mut longer = stored.clone();
        longer.extend_from_slice(b"garbage!");
        let result = decode(codec.id(), &longer, raw.len());
        assert!(matches!(result, Err(Error::Codec(_))), "{} with garbage", codec.name());
    }
}

#[test]
fn gzip_refuses_impossible_lengths_before_allocating() {
    let stored = compress(Codec::Gzip, b"hello hello hello hello");
    assert_codec_error(decode(CodecId::Gzip, &stored, usize::MAX), "cannot expand");
    assert_codec_error(decode(CodecId::Gzip, &stored, 1 << 40), "cannot expand");
    assert_codec_error(decode(CodecId::Gzip, &[], 0), "too short");
    assert_codec_error(decode(CodecId::Zstd, &[], 0), "empty");
    assert_codec_error(decode(CodecId::Lzf, &[], 1), "record says");
    assert_eq!(decode(CodecId::Lzf, &[], 0).unwrap(), Vec::<u8>::new());
    assert_eq!(decode(CodecId::None, &[], 0).unwrap(), Vec::<u8>::new());
}

#[test]
fn gzip_detects_a_corrupt_checksum() {
    let raw = json_like(5_000);
    let mut stored = compress(Codec::Gzip, &raw);
    let crc_at = stored.len() - 8;
    stored[crc_at] ^= 0x01;
    assert!(matches!(decode(CodecId::Gzip, &stored, raw.len()), Err(Error::Codec(_))));
}

#[test]
fn contexts_are_per_thread() {
    let handles: Vec<_> = (0..4)
        .map(|t| {
            std::thread::spawn(move || {
                for i in 0..50 {
                    let raw = json_like(1000 + 97 * i + t);
                    let stored = compress(Codec::Zstd, &raw);
                    assert_eq!(decode(CodecId::Zstd, &stored, raw.len()).unwrap(), raw);
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
}

// ---------------------------------------------------------------- proptest

/// Compressible input: random snippets, each repeated a few times, in a
/// random order.
fn compressible() -> impl Strategy<Value = Vec<u8>> {
    (
        prop::collection::vec(prop::collection::vec(any::<u8>(), 1..64), 1..8),
        prop::collection::vec((any::<prop::sample::Index>(), 1usize..40), 0..400),
    )
        .prop_map(|(snippets, picks)| {
            let mut out = Vec::new();
            for (which, times) in picks {
                let snippet = which.get(&snippets);
                for _ in 0..times {
                    out.extend_from_slice(snippet);
                }
            }
            out
        })
}

fn arbitrary_body() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        3 => prop::collection::vec(any::<u8>(), 0..2048),
        1 => prop::collection::vec(any::<u8>(), 0..200 * 1024),
    ]
}

fn any_codec() -> impl Strategy<Value = Codec> {
    prop::sample::select(Codec::ALL.to_vec())
}

fn any_id() -> impl Strategy<Value = CodecId> {
    prop::sample::select(vec![CodecId::None, CodecId::Gzip, CodecId::Lzf, CodecId::Zstd])
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn prop_round_trip_arbitrary(raw in arbitrary_body()) {
        for codec in Codec::ALL {
            round_trip(codec, &raw);
        }
    }

    #[test]
    fn prop_round_trip_compressible(raw in compressible()) {
        for codec in Codec::ALL {
            round_trip(codec, &raw);
        }
    }

    #[test]
    fn prop_encode_body(raw in prop_oneof![arbitrary_body(), compressible()],
                        codec in any_codec(), threshold in 0usize..4096) {
        let (id, body) = encode_body(codec, threshold, &raw);
        if id == CodecId::None {
            prop_assert!(matches!(body, Cow::Borrowed(_)));
            prop_assert_eq!(&body[..], &raw[..]);
        } else {
            prop_assert_eq!(id, codec.id());
            prop_assert!(raw.len() > threshold);
            prop_assert!(body.len() < raw.len());
        }
        prop_assert_eq!(decode(id, &body, raw.len()).unwrap(), raw);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn prop_decode_random_bytes_never_panics(
        id in any_id(),
        stored in prop::collection::vec(any::<u8>(), 0..4096),
        raw_len in prop_oneof![0usize..4096, 0usize..=1 << 20],
    ) {
        if let Ok(out) = decode(id, &stored, raw_len) {
            prop_assert_eq!(out.len(), raw_len);
        }
    }

    #[test]
    fn prop_decode_headed_random_bytes_never_panics(
        id in any_id(),
        tail in prop::collection::vec(any::<u8>(), 0..4096),
        raw_len in prop_oneof![0usize..4096, 0usize..=1 << 20],
    ) {
        // Give the random bytes a plausible header so the decoders get past it.
        let mut stored = match id {
            CodecId::None => vec![],
            CodecId::Gzip => vec![0x1f, 0x8b, 0x08, 0, 0, 0, 0, 0, 0, 0xff],
            CodecId::Lzf => vec![b'Z', b'V', 1, 0x0f, 0xff, 0xff, 0xff],
            CodecId::Zstd => vec![0x28, 0xb5, 0x2f, 0xfd],
        };
        stored.extend_from_slice(&tail);
        if let Ok(out) = decode(id, &stored, raw_len) {
            prop_assert_eq!(out.len(), raw_len);
        }
    }
}

/// A valid encoding with random damage: bytes changed, inserted, removed,
/// or the end cut off.
fn mutated_encoding() -> impl Strategy<Value = (Codec, Vec<u8>, Vec<u8>)> {
    (
        any_codec().prop_filter("a compressing codec", |c| *c != Codec::None),
        prop_oneof![compressible(), prop::collection::vec(any::<u8>(), 0..3000)],
        prop::collection::vec((0u8..4, any::<prop::sample::Index>(), any::<u8>()), 1..6),
    )
        .prop_map(|(codec, raw, edits)| {
            let mut stored = compress(codec, &raw);
            for (kind, at, byte) in edits {
                if stored.is_empty() {
                    stored.push(byte);
                    continue;
                }
                let i = at.index(stored.len());
                match kind {
                    0 => stored[i] ^= byte | 1,
                    1 => stored.insert(i, byte),
                    2 => {
                        stored.remove(i);
                    }
                    _ => stored.truncate(i),
                }
            }
            (codec, raw, stored)
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    #[test]
    fn prop_decode_mutated_never_panics(
        (codec, raw, stored) in mutated_encoding(),
        other_len in 0usize..=1 << 20,
    ) {
        for raw_len in [raw.len(), other_len] {
            for id in [codec.id(), CodecId::Lzf, CodecId::Gzip, CodecId::Zstd] {
                if let Ok(out) = decode(id, &stored, raw_len) {
                    prop_assert_eq!(out.len(), raw_len);
                }
            }
        }
    }
}

#[test]
fn decode_shared_gives_what_decode_gives_and_refuses_what_it_refuses() {
    let raw = json_like(5_000);
    for codec in [Codec::None, Codec::Gzip, Codec::Lzf, Codec::Zstd] {
        let stored = compress(codec, &raw);
        let shared = decode_shared(codec.id(), &stored, raw.len()).unwrap();
        assert_eq!(&shared[..], &raw[..], "{}", codec.name());
        for wrong in [raw.len() - 1, raw.len() + 1] {
            let result = decode_shared(codec.id(), &stored, wrong);
            assert!(matches!(result, Err(Error::Codec(_))), "{} with {wrong}", codec.name());
        }
    }
}
