//! STOMP 1.2 frames as a load generator needs them: written whole, read
//! from a byte stream (heart-beat EOLs between frames skipped, the body
//! by `content-length` when given, else up to the NUL).

/// One frame read from a server.
#[derive(Debug, PartialEq, Eq)]
pub struct Frame {
    /// `CONNECTED`, `MESSAGE`, `RECEIPT`, `ERROR`.
    pub command: String,
    /// As received, escapes included: a value sent back (an `ack` id) goes
    /// back exactly as it came.
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: Vec<u8>,
}

impl Frame {
    /// The first value of header `name` (STOMP 1.2: the first occurrence wins).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }
}

/// Why bytes are not a frame.
#[derive(Debug, PartialEq, Eq)]
pub struct Malformed(pub String);

/// A frame's bytes: `command`, the headers in order, then the body with
/// its `content-length` (binary bodies may hold NUL bytes).
pub fn encode(command: &str, headers: &[(&str, &str)], body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(command.len() + 64 + body.len());
    out.extend_from_slice(command.as_bytes());
    out.push(b'\n');
    for (k, v) in headers {
        out.extend_from_slice(k.as_bytes());
        out.push(b':');
        out.extend_from_slice(v.as_bytes());
        out.push(b'\n');
    }
    if !body.is_empty() {
        out.extend_from_slice(format!("content-length:{}\n", body.len()).as_bytes());
    }
    out.push(b'\n');
    out.extend_from_slice(body);
    out.push(0);
    out
}

/// Takes the first whole frame off the front of `buf`: `Ok(None)` while
/// the bytes so far are only part of one.
pub fn take(buf: &mut Vec<u8>) -> Result<Option<Frame>, Malformed> {
    let start = buf.iter().position(|&b| b != b'\n' && b != b'\r').unwrap_or(buf.len());
    let mut lines: Vec<&[u8]> = Vec::new();
    let mut pos = start;
    let body_start = loop {
        let Some(nl) = buf[pos..].iter().position(|&b| b == b'\n') else {
            return Ok(None);
        };
        let line = &buf[pos..pos + nl];
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        pos += nl + 1;
        if line.is_empty() {
            break pos;
        }
        lines.push(line);
    };
    let text = |b: &[u8]| String::from_utf8(b.to_vec()).map_err(|_| Malformed("a header is not UTF-8".into()));
    let command = text(lines[0])?;
    let mut headers = Vec::with_capacity(lines.len() - 1);
    for line in &lines[1..] {
        let colon = line
            .iter()
            .position(|&b| b == b':')
            .ok_or_else(|| Malformed(format!("a header line without a colon in {command}")))?;
        headers.push((text(&line[..colon])?, text(&line[colon + 1..])?));
    }
    let length = headers
        .iter()
        .find(|(k, _)| k == "content-length")
        .map(|(_, v)| v.parse::<usize>().map_err(|_| Malformed(format!("content-length {v:?}"))))
        .transpose()?;
    let body_end = match length {
        Some(n) => {
            if buf.len() < body_start + n + 1 {
                return Ok(None);
            }
            if buf[body_start + n] != 0 {
                return Err(Malformed(format!("no NUL after the {n} bytes of content-length in {command}")));
            }
            body_start + n
        }
        None => match buf[body_start..].iter().position(|&b| b == 0) {
            Some(n) => body_start + n,
            None => return Ok(None),
        },
    };
    let frame = Frame { command, headers, body: buf[body_start..body_end].to_vec() };
    buf.drain(..body_end + 1);
    Ok(Some(frame))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_encoded_frame_reads_back_whole_with_a_binary_body() {
        let body = [1u8, 0, 2, 0, 3];
        let mut buf = encode("MESSAGE", &[("ack", "ID\\c1"), ("destination", "/queue/q")], &body);
        let frame = take(&mut buf).unwrap().unwrap();
        assert_eq!(frame.command, "MESSAGE");
        assert_eq!(frame.header("ack"), Some("ID\\c1"));
        assert_eq!(frame.header("content-length"), Some("5"));
        assert_eq!(frame.body, body);
        assert!(buf.is_empty());
    }

    #[test]
    fn heart_beats_and_crlf_lines_are_skipped_and_the_first_header_wins() {
        let mut buf = b"\n\r\nRECEIPT\r\nreceipt-id:r1\r\nreceipt-id:r2\r\n\r\n\0\nCONN".to_vec();
        let frame = take(&mut buf).unwrap().unwrap();
        assert_eq!(frame.command, "RECEIPT");
        assert_eq!(frame.header("receipt-id"), Some("r1"));
        assert!(frame.body.is_empty());
        assert_eq!(buf, b"\nCONN");
        assert_eq!(take(&mut buf).unwrap(), None);
    }

    #[test]
    fn a_frame_in_pieces_is_taken_only_once_whole() {
        let whole = encode("MESSAGE", &[("ack", "7")], b"hello");
        for cut in 0..whole.len() {
            let mut buf = whole[..cut].to_vec();
            assert_eq!(take(&mut buf).unwrap(), None, "cut at {cut}");
            assert_eq!(buf.len(), cut, "nothing consumed from a partial frame");
        }
        let mut buf = whole.clone();
        assert_eq!(take(&mut buf).unwrap().unwrap().body, b"hello");
    }

    #[test]
    fn a_body_without_content_length_ends_at_the_nul() {
        let mut buf = b"ERROR\nmessage:no\n\nwhy not\0".to_vec();
        let frame = take(&mut buf).unwrap().unwrap();
        assert_eq!(frame.header("message"), Some("no"));
        assert_eq!(frame.body, b"why not");
    }

    #[test]
    fn malformed_frames_are_errors() {
        let mut no_colon = b"MESSAGE\nack\n\n\0".to_vec();
        assert!(take(&mut no_colon).is_err());
        let mut bad_length = b"MESSAGE\ncontent-length:x\n\n\0".to_vec();
        assert!(take(&mut bad_length).is_err());
        let mut no_nul = b"MESSAGE\ncontent-length:2\n\nabc".to_vec();
        assert!(take(&mut no_nul).is_err());
    }
}
