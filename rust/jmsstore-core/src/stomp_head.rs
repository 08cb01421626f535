//! The common cases of reading and writing a STOMP frame's head,
//! natively, for the STOMP server's Python frame parser and encoder.
//!
//! Reading: the parser hands over its buffer when a frame may have
//! arrived whole, and gets back the command and headers, or `None` for
//! anything but the plain case (an incomplete head, a carriage return, an
//! escape, a NUL, text that is not UTF-8, a line or header count over the
//! limits, a header line without a name), which it then reads itself, as
//! before, with its own checks and error messages.
//!
//! Writing: a frame of a command whose headers are escaped, with no empty
//! header name, no NUL in a header and a `content-length` header (if it
//! has one) giving the body's length, is written whole here, its
//! `content-length` added where it has none; the encoder writes any
//! other, and reports every error, itself.

/// A frame head read whole.
#[derive(Debug, PartialEq, Eq)]
pub struct Head {
    /// End-of-lines before the command (heart-beats).
    pub heartbeats: usize,
    /// Where the command line starts.
    pub frame_start: usize,
    /// The command, as sent (the caller checks it).
    pub command: String,
    /// The headers in order, as sent (no escapes in them).
    pub headers: Vec<(String, String)>,
    /// Where the body starts: after the blank line ending the head.
    pub body_start: usize,
}

/// The limits the plain case keeps within (the caller's).
#[derive(Debug, Clone, Copy)]
pub struct HeadLimits {
    /// The most bytes from the command line to the frame's NUL.
    pub max_frame_bytes: usize,
    /// The most bytes in one line, the command line too.
    pub max_line_bytes: usize,
    /// The most header lines.
    pub max_headers: usize,
}

/// Reads the head of the frame at `start` in `buf` if it is there whole
/// and plain (see the module documentation); `None` otherwise.
pub fn scan(buf: &[u8], start: usize, limits: HeadLimits) -> Option<Head> {
    let mut at = start;
    let mut heartbeats = 0;
    loop {
        match buf.get(at..)? {
            [b'\n', ..] => at += 1,
            [b'\r', b'\n', ..] => at += 2,
            _ => break,
        }
        heartbeats += 1;
    }
    let frame_start = at;
    let window = &buf[frame_start..buf.len().min(frame_start.saturating_add(limits.max_frame_bytes))];
    let head_len = window.windows(2).position(|w| w == b"\n\n")?;
    let head = &window[..head_len];
    if head.iter().any(|&b| matches!(b, b'\r' | b'\\' | 0)) {
        return None;
    }
    let text = std::str::from_utf8(head).ok()?;
    let mut lines = text.split('\n');
    let command = lines.next()?;
    if command.is_empty() || command.len() > limits.max_line_bytes {
        return None;
    }
    let mut headers = Vec::new();
    for line in lines {
        if headers.len() == limits.max_headers || line.len() > limits.max_line_bytes {
            return None;
        }
        let (name, value) = line.split_once(':')?;
        if name.is_empty() {
            return None;
        }
        headers.push((name.to_owned(), value.to_owned()));
    }
    Some(Head { heartbeats, frame_start, command: command.to_owned(), headers, body_start: frame_start + head_len + 2 })
}

/// What a frame read whole by [`scan_frames`] may hold: the head's limits
/// and the body's.
#[derive(Debug, Clone, Copy)]
pub struct FrameLimits {
    /// The head's limits (`max_frame_bytes` bounds the whole frame).
    pub head: HeadLimits,
    /// The most bytes in a body.
    pub max_body_bytes: usize,
}

/// A frame read whole: its command (an index into the caller's commands),
/// its headers and where its body lies in the buffer.
#[derive(Debug, PartialEq, Eq)]
pub struct WholeFrame {
    /// Which of the accepted commands.
    pub command: usize,
    /// The headers in order, as sent.
    pub headers: Vec<(String, String)>,
    /// The body's bytes in the buffer (the NUL after it excluded).
    pub body: std::ops::Range<usize>,
}

/// The frames [`scan_frames`] read, and where reading stopped.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Frames {
    /// The frames, in order.
    pub frames: Vec<WholeFrame>,
    /// End-of-lines before them (heart-beats).
    pub heartbeats: usize,
    /// Where the first byte not read is: after the last frame's NUL.
    pub end: usize,
}

/// Reads, from `start`, every frame that is there whole, has a plain head
/// (see [`scan`]), one of `commands` (a body only if its command is one of
/// `body_commands`) and keeps within `limits`, up to the first that is not
/// so. The caller reads that one, and every error, itself: what this
/// accepts, it accepts as the caller's parser would, and what it declines
/// it leaves untouched (heart-beats before it included).
pub fn scan_frames(buf: &[u8], start: usize, limits: FrameLimits, commands: &[&str], body_commands: &[&str]) -> Frames {
    let mut read = Frames { end: start, ..Frames::default() };
    while let Some((frame, heartbeats, end)) = whole_frame(buf, read.end, limits, commands, body_commands) {
        read.frames.push(frame);
        read.heartbeats += heartbeats;
        read.end = end;
    }
    read
}

/// The first `content-length` header's value: None without one, `Some(None)`
/// if it is not the plain case (a number of ASCII digits, leading zeros
/// allowed, that fits).
pub fn content_length(headers: &[(String, String)]) -> Option<Option<usize>> {
    let (_, text) = headers.iter().find(|(name, _)| name == "content-length")?;
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Some(None);
    }
    let digits = text.trim_start_matches('0');
    Some(if digits.len() > 19 { None } else { Some(digits.parse().unwrap_or(0)) })
}

/// The frame at `start`, the heart-beats before it and where it ends, if
/// [`scan_frames`] takes it (one frame at a time, for a reader that stops
/// at the first frame it cannot hand on).
pub fn whole_frame(
    buf: &[u8],
    start: usize,
    limits: FrameLimits,
    commands: &[&str],
    body_commands: &[&str],
) -> Option<(WholeFrame, usize, usize)> {
    let head = scan(buf, start, limits.head)?;
    let command = commands.iter().position(|c| *c == head.command)?;
    let may_have_body = body_commands.contains(&head.command.as_str());
    let too_big = |end: usize| end - head.frame_start > limits.head.max_frame_bytes;
    let body_end = match content_length(&head.headers) {
        Some(length) => {
            let length = length?;
            if (length > 0 && !may_have_body) || length > limits.max_body_bytes {
                return None;
            }
            let end = head.body_start.checked_add(length)?;
            if too_big(end + 1) || buf.len() <= end || buf[end] != 0 {
                return None;
            }
            end
        }
        None => {
            let end = head.body_start + buf.get(head.body_start..)?.iter().position(|&b| b == 0)?;
            let length = end - head.body_start;
            if (length > 0 && !may_have_body) || length > limits.max_body_bytes || too_big(end + 1) {
                return None;
            }
            end
        }
    };
    let frame = WholeFrame { command, headers: head.headers, body: head.body_start..body_end };
    Some((frame, head.heartbeats, body_end + 1))
}

/// STOMP 1.2's escaping of a header name or value.
pub(crate) fn escape_into(text: &str, out: &mut Vec<u8>) {
    for &b in text.as_bytes() {
        match b {
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'\r' => out.extend_from_slice(b"\\r"),
            b'\n' => out.extend_from_slice(b"\\n"),
            b':' => out.extend_from_slice(b"\\c"),
            _ => out.push(b),
        }
    }
}

/// Writes the frame `command`, `headers` (escaped), a `content-length`
/// when `body` is not empty and the headers have none, `body` and the NUL
/// to `out`; false, with nothing written, if a header has an empty name
/// or holds a NUL, or a `content-length` header does not give the body's
/// length as the encoder writes it (the caller's checks decide those).
pub fn write_plain(command: &str, headers: &[(&str, &str)], body: &[u8], out: &mut Vec<u8>) -> bool {
    let length = body.len().to_string();
    let mut declared = false;
    for (name, value) in headers {
        if name.is_empty() || name.contains('\0') || value.contains('\0') {
            return false;
        }
        if *name == "content-length" && !declared {
            if *value != length {
                return false;
            }
            declared = true;
        }
    }
    out.reserve(
        command.len() + 2 + headers.iter().map(|(n, v)| n.len() + v.len() + 2).sum::<usize>() + 32 + body.len(),
    );
    out.extend_from_slice(command.as_bytes());
    out.push(b'\n');
    for (name, value) in headers {
        escape_into(name, out);
        out.push(b':');
        escape_into(value, out);
        out.push(b'\n');
    }
    if !body.is_empty() && !declared {
        out.extend_from_slice(b"content-length:");
        out.extend_from_slice(length.as_bytes());
        out.push(b'\n');
    }
    out.push(b'\n');
    out.extend_from_slice(body);
    out.push(0);
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: HeadLimits = HeadLimits { max_frame_bytes: 1 << 20, max_line_bytes: 1024, max_headers: 10 };

    #[test]
    fn a_plain_head_after_heart_beats_is_read_whole() {
        let buf = b"xx\n\r\nSEND\ndestination:/queue/a\nreceipt:r:1\n\nbody\0";
        let head = scan(buf, 2, LIMITS).unwrap();
        assert_eq!(head.heartbeats, 2);
        assert_eq!(head.frame_start, 5);
        assert_eq!(head.command, "SEND");
        assert_eq!(
            head.headers,
            vec![("destination".to_owned(), "/queue/a".to_owned()), ("receipt".to_owned(), "r:1".to_owned())]
        );
        assert_eq!(&buf[head.body_start..], b"body\0");
    }

    #[test]
    fn a_head_without_headers_is_read() {
        let head = scan(b"DISCONNECT\n\n\0", 0, LIMITS).unwrap();
        assert_eq!((head.command.as_str(), head.headers.len(), head.body_start), ("DISCONNECT", 0, 12));
    }

    #[test]
    fn anything_but_the_plain_case_is_left_to_the_caller() {
        let cases: &[&[u8]] = &[
            b"SEND\ndestination:/queue/a\n",         // incomplete
            b"",                                     // nothing
            b"\n\n",                                 // heart-beats only
            b"SEND\r\ndestination:/queue/a\r\n\r\n", // CR LF lines
            b"SEND\nname:a\\cb\n\n",                 // an escape
            b"SEND\nna\0me:a\n\n",                   // a NUL
            b"SEND\nname:\xff\n\n",                  // not UTF-8
            b"SEND\nno colon\n\n",                   // no separator
            b"SEND\n:value\n\n",                     // no name
        ];
        for case in cases {
            assert_eq!(scan(case, 0, LIMITS), None, "{:?}", String::from_utf8_lossy(case));
        }
    }

    #[test]
    fn heads_over_the_limits_are_left_to_the_caller() {
        let long_line = format!("SEND\nname:{}\n\n", "v".repeat(2000));
        assert_eq!(scan(long_line.as_bytes(), 0, LIMITS), None);
        let many: String = (0..11).map(|i| format!("h{i}:v\n")).collect();
        assert_eq!(scan(format!("SEND\n{many}\n").as_bytes(), 0, LIMITS), None);
        let at_limit: String = (0..10).map(|i| format!("h{i}:v\n")).collect();
        assert_eq!(scan(format!("SEND\n{at_limit}\n").as_bytes(), 0, LIMITS).unwrap().headers.len(), 10);
        let small_frames = HeadLimits { max_frame_bytes: 8, ..LIMITS };
        assert_eq!(scan(b"SEND\nname:value\n\n", 0, small_frames), None);
    }

    const FRAME_LIMITS: FrameLimits = FrameLimits { head: LIMITS, max_body_bytes: 100 };
    const COMMANDS: &[&str] = &["SEND", "ACK", "DISCONNECT"];
    const BODY_COMMANDS: &[&str] = &["SEND"];

    fn frames(buf: &[u8], start: usize, limits: FrameLimits) -> Frames {
        scan_frames(buf, start, limits, COMMANDS, BODY_COMMANDS)
    }

    #[test]
    fn every_whole_frame_is_read_up_to_the_first_incomplete_one() {
        let buf = b"\nSEND\ndestination:/queue/a\ncontent-length:3\n\na\0b\0\nACK\nid:7\n\n\0\nSEND\nx:y\n\ntext\0SEND\nx:y\n\npart";
        let read = frames(buf, 0, FRAME_LIMITS);
        assert_eq!(read.heartbeats, 3);
        assert_eq!(read.frames.len(), 3);
        let [send, ack, text] = &read.frames[..] else { unreachable!() };
        assert_eq!((send.command, &buf[send.body.clone()]), (0, &b"a\0b"[..]));
        assert_eq!((ack.command, ack.headers.clone(), ack.body.len()), (1, vec![("id".to_owned(), "7".to_owned())], 0));
        assert_eq!(&buf[text.body.clone()], b"text");
        assert_eq!(&buf[read.end..], b"SEND\nx:y\n\npart");
    }

    #[test]
    fn reading_stops_before_a_frame_the_caller_must_read_or_refuse() {
        let good = b"ACK\nid:1\n\n\0".as_slice();
        let stoppers: &[&[u8]] = &[
            b"\nNACK\nid:1\n\n\0",                                 // a command not accepted
            b"ACK\nid:1\n\nbody\0",                                // a body where none may be
            b"ACK\ncontent-length:1\n\nx\0",                       // the same, with a length
            b"SEND\ncontent-length:x1\n\nx\0",                     // a length that is not a number
            b"SEND\ncontent-length:\n\n\0",                        // an empty length
            b"SEND\ncontent-length:2\n\nabc\0",                    // no NUL after the length
            b"SEND\ncontent-length:101\n\n",                       // a body over the limit
            b"SEND\ncontent-length:99999999999999999999999\n\n\0", // a length of too many digits
            b"SEND\nname:a\\cb\n\n\0",                             // an escape
        ];
        for stopper in stoppers {
            let buf = [good, stopper, good].concat();
            let read = frames(&buf, 0, FRAME_LIMITS);
            assert_eq!(
                (read.frames.len(), read.heartbeats, read.end),
                (1, 0, good.len()),
                "{:?}",
                String::from_utf8_lossy(stopper)
            );
        }
        // Incomplete: the last frame of what has arrived.
        for incomplete in [b"SEND\nname:a\n\nxx".as_slice(), b"SEND\ncontent-length:4\n\nxx", b"SEND\nname:a\n"] {
            let buf = [good, incomplete].concat();
            assert_eq!(frames(&buf, 0, FRAME_LIMITS).end, good.len());
        }
        let long_body = [b"SEND\n\n".as_slice(), &[b'x'; 101], b"\0"].concat();
        assert_eq!(frames(&long_body, 0, FRAME_LIMITS).frames.len(), 0);
        let at_limit = [b"SEND\n\n".as_slice(), &[b'x'; 100], b"\0"].concat();
        assert_eq!(frames(&at_limit, 0, FRAME_LIMITS).frames.len(), 1);
    }

    #[test]
    fn a_frame_over_the_frame_limit_is_left_to_the_caller() {
        let buf = b"SEND\ncontent-length:0010\n\n0123456789\0";
        let exact = FrameLimits { head: HeadLimits { max_frame_bytes: buf.len(), ..LIMITS }, max_body_bytes: 100 };
        let read = frames(buf, 0, exact);
        assert_eq!((read.frames.len(), read.end), (1, buf.len()));
        let one_less =
            FrameLimits { head: HeadLimits { max_frame_bytes: buf.len() - 1, ..LIMITS }, max_body_bytes: 100 };
        assert_eq!(frames(buf, 0, one_less).frames.len(), 0);
        let without_length = b"SEND\n\n0123456789\0";
        let one_less = FrameLimits {
            head: HeadLimits { max_frame_bytes: without_length.len() - 1, ..LIMITS },
            max_body_bytes: 100,
        };
        assert_eq!(frames(without_length, 0, one_less).frames.len(), 0);
    }

    #[test]
    fn the_first_content_length_counts_and_leading_zeros_are_allowed() {
        let buf = b"SEND\ncontent-length:002\ncontent-length:9\n\nab\0";
        let read = frames(buf, 0, FRAME_LIMITS);
        assert_eq!(&buf[read.frames[0].body.clone()], b"ab");
    }

    #[test]
    fn a_plain_frame_is_written_escaped_with_its_content_length() {
        let mut out = Vec::new();
        assert!(write_plain("MESSAGE", &[("ack", "1.2"), ("k:\\", "a\nb\rc")], b"x\0y", &mut out));
        assert_eq!(out, b"MESSAGE\nack:1.2\nk\\c\\\\:a\\nb\\rc\ncontent-length:3\n\nx\0y\0");
        let mut empty = Vec::new();
        assert!(write_plain("RECEIPT", &[("receipt-id", "r1")], b"", &mut empty));
        assert_eq!(empty, b"RECEIPT\nreceipt-id:r1\n\n\0");
    }

    #[test]
    fn a_frame_the_caller_must_check_is_left_to_it() {
        let mut out = Vec::new();
        assert!(!write_plain("SEND", &[("content-length", "4")], b"abc", &mut out));
        assert!(!write_plain("SEND", &[("content-length", "03")], b"abc", &mut out));
        assert!(!write_plain("SEND", &[("", "v")], b"", &mut out));
        assert!(!write_plain("SEND", &[("k", "a\0b")], b"", &mut out));
        assert!(out.is_empty());
    }

    #[test]
    fn a_content_length_header_of_the_body_s_length_is_kept_and_not_repeated() {
        let mut out = Vec::new();
        assert!(write_plain("MESSAGE", &[("content-length", "3"), ("ack", "1")], b"abc", &mut out));
        assert_eq!(out, b"MESSAGE\ncontent-length:3\nack:1\n\nabc\0");
    }

    #[test]
    fn what_is_written_reads_back_the_same() {
        let mut out = Vec::new();
        assert!(write_plain("SEND", &[("destination", "/queue/a"), ("receipt", "r7")], b"body", &mut out));
        let head = scan(&out, 0, LIMITS).unwrap();
        assert_eq!(head.command, "SEND");
        assert_eq!(head.headers[1], ("receipt".to_owned(), "r7".to_owned()));
        assert_eq!(head.headers[2], ("content-length".to_owned(), "4".to_owned()));
        assert_eq!(&out[head.body_start..], b"body\0");
    }
}
