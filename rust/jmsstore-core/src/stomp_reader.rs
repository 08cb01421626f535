//! A STOMP connection's reading while its lanes take what comes: the
//! frames read whole, handed to the [`SendLane`] (SENDs) and the
//! [`AckLane`] (plain ACKs) in frame order, and, in [`FrameScanner::pump`],
//! the socket read too, without Python.
//!
//! The connection's Python reader hands the socket over when it holds no
//! frame read in part and a lane may take what comes. A client that only
//! sends (with receipts or without) and acknowledges then costs the server
//! no Python and no GIL per read: the reader thread sleeps in `poll` and
//! wakes in native code. The pump gives the socket back when the Python
//! reader is needed:
//! - a frame the lanes do not take (or any frame they cannot read whole:
//!   every check and error message stays the Python parser's), with the
//!   bytes from it on;
//! - a lane's failure (the reader ends the connection);
//! - the outbox's wake-up (receipts or a failure the completer could not
//!   write);
//! - `receipt_limit` receipts pending (the reader stops reading);
//! - the client closing;
//! - a read that filled its buffer: a client streaming frames faster than
//!   they are read gains nothing here (many frames share each read), and
//!   its server thread scheduled apart from the consumers' lost more than
//!   it gained in our runs (see `docs/performance-log.md`);
//! - time: `wait` with nothing to read, or `busy` while reading, so that
//!   the reader sends heart-beats, checks the client's, and looks again at
//!   its destinations (a production pause or flow control armed since
//!   sends them the Python path).
//!
//! An incomplete frame (no NUL yet) stays here between reads while it is
//! at most `hold` bytes; a longer one goes to the Python reader, which
//! charges it to the server's budget for incomplete frames.

use std::io;
use std::os::fd::RawFd;
use std::time::{Duration, Instant};

use crate::stomp_ack::AckLane;
use crate::stomp_head::{content_length, scan, scan_frames, whole_frame, FrameLimits, Frames, WholeFrame};
use crate::stomp_outbox::Outbox;
use crate::stomp_send::{Prepared, SendLane, Take};

/// A reader's accepted commands and limits (its Python parser's).
#[derive(Debug, Clone)]
pub struct FrameScanner {
    commands: Vec<String>,
    body_commands: Vec<String>,
    limits: FrameLimits,
    /// Which of `commands` is SEND (what a send lane takes).
    send_command: Option<usize>,
    /// Which is ACK (what an ACK lane settles).
    ack_command: Option<usize>,
}

/// The lanes a reader hands frames to (none: it takes nothing).
#[derive(Clone, Copy, Default)]
pub struct Lanes<'a> {
    /// SENDs go here.
    pub send: Option<&'a SendLane>,
    /// Plain ACKs go here.
    pub acks: Option<&'a AckLane>,
}

impl Lanes<'_> {
    /// Whether either lane keeps a failure (no frame is read after it).
    pub fn failing(&self) -> bool {
        self.send.is_some_and(SendLane::failure_kept) || self.acks.is_some_and(AckLane::failure_kept)
    }
}

/// What [`FrameScanner::take_leading`] and [`FrameScanner::pump`] handed on.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Handed {
    /// SEND frames the send lane took (a failed one counts).
    pub sent: usize,
    /// ACK frames the ACK lane settled (a failed one counts).
    pub acked: usize,
    /// One of them failed: nothing after it was read.
    pub failed: bool,
}

/// The bounds of one [`FrameScanner::pump`].
#[derive(Debug, Clone, Copy)]
pub struct PumpLimits {
    /// The longest wait for input (the reader's tick).
    pub wait: Duration,
    /// How long it reads before the reader gets its turn anyway.
    pub busy: Duration,
    /// It stops while this many receipts are pending.
    pub receipt_limit: usize,
    /// The most bytes read at once.
    pub read_size: usize,
    /// The most bytes of an incomplete frame held between reads.
    pub hold: usize,
}

/// Why [`FrameScanner::pump`] gave the socket back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// Time: `wait` passed with nothing to read, or `busy` while reading.
    Time,
    /// The outbox's wake-up pipe is readable (it is left so).
    Woken,
    /// Bytes the Python parser must read: a frame the lanes did not take, or
    /// an incomplete frame over `hold`.
    Rest,
    /// A lane failed (its failure is kept); nothing after it was read.
    Failed,
    /// `receipt_limit` receipts are pending.
    Receipts,
    /// The client closed the connection (end of stream).
    Closed,
    /// A read filled `read_size`: the client streams faster than one read
    /// takes, so a read's overhead is shared by many frames anyway.
    Full,
}

/// What [`FrameScanner::pump`] did.
#[derive(Debug)]
pub struct Pumped {
    /// Why it stopped.
    pub stop: Stop,
    /// Bytes read and not handed on (an incomplete frame, or from the
    /// first frame the lanes did not take): the Python parser's (nothing
    /// after a failure).
    pub rest: Vec<u8>,
    /// End-of-lines between the frames handed on (heart-beats).
    pub heartbeats: usize,
    /// The frames handed on.
    pub handed: Handed,
    /// Reads of the socket that returned bytes.
    pub reads: usize,
}

/// Whether `bytes` are end-of-lines only (heart-beats), and how many.
fn heart_beats_only(bytes: &[u8]) -> Option<usize> {
    let mut count = 0;
    let mut at = 0;
    while at < bytes.len() {
        match &bytes[at..] {
            [b'\n', ..] => at += 1,
            [b'\r', b'\n', ..] => at += 2,
            _ => return None,
        }
        count += 1;
    }
    Some(count)
}

enum Ready {
    Socket,
    Woken,
    Nothing,
}

/// Waits up to `timeout` for `fd` or `wake_fd` to be readable (or `fd` closed).
fn poll_two(fd: RawFd, wake_fd: RawFd, timeout: Duration) -> io::Result<Ready> {
    let mut fds = [
        libc::pollfd { fd: wake_fd, events: libc::POLLIN, revents: 0 },
        libc::pollfd { fd, events: libc::POLLIN, revents: 0 },
    ];
    // Rounded up: a wait shorter than a millisecond must not become a busy loop.
    let millis = timeout.as_micros().div_ceil(1000).min(i32::MAX as u128) as libc::c_int;
    // SAFETY: `fds` is an array of two initialised pollfd structures.
    let n = unsafe { libc::poll(fds.as_mut_ptr(), 2, millis) };
    if n < 0 {
        let error = io::Error::last_os_error();
        return if error.kind() == io::ErrorKind::Interrupted { Ok(Ready::Nothing) } else { Err(error) };
    }
    if fds[0].revents != 0 {
        Ok(Ready::Woken)
    } else if fds[1].revents != 0 {
        Ok(Ready::Socket) // readable, closed or failed: the read says which
    } else {
        Ok(Ready::Nothing)
    }
}

/// Whether `bytes` hold a blank line ending a head, after an LF (as the
/// Python parser finds one).
fn has_blank_line(bytes: &[u8]) -> bool {
    bytes.windows(2).any(|w| w == b"\n\n") || bytes.windows(3).any(|w| w == b"\n\r\n")
}

impl FrameScanner {
    /// Whether `rest` (what follows the frames handed on) is the start of a
    /// frame that is not complete yet and may still be read: its head
    /// incomplete (no blank line, no NUL) with every line and its command
    /// within bounds, or a plain head of a command of ours whose body has
    /// not all come (by its `content-length`, within the limits, or no NUL
    /// after it). Anything else (a whole frame, input to refuse) is the
    /// Python parser's at once, with its errors. (A body may hold NULs: a
    /// frame is not taken as complete for holding one.)
    fn incomplete(&self, rest: &[u8]) -> bool {
        let limits = self.limits;
        let known = |command: &[u8]| self.commands.iter().any(|c| c.as_bytes() == command);
        match scan(rest, 0, limits.head) {
            Some(head) => {
                if !known(head.command.as_bytes()) {
                    return false;
                }
                let head_bytes = head.body_start - head.frame_start;
                match content_length(&head.headers) {
                    Some(Some(length)) => {
                        length <= limits.max_body_bytes
                            && head_bytes.saturating_add(length) < limits.head.max_frame_bytes
                            && rest.len() <= head.body_start + length
                    }
                    Some(None) => false,
                    None => {
                        rest.len() - head.frame_start <= limits.head.max_frame_bytes
                            && !rest[head.body_start..].contains(&0)
                    }
                }
            }
            None => {
                let eols = rest.iter().take_while(|&&b| b == b'\n' || b == b'\r').count();
                let frame = &rest[eols..];
                if frame.contains(&0) || has_blank_line(frame) || frame.len() > limits.head.max_frame_bytes {
                    return false;
                }
                let mut lines: usize = 0;
                for line in frame.split(|&b| b == b'\n') {
                    // One byte over: a CR the next read's LF may follow.
                    if line.len() > limits.head.max_line_bytes + 1 {
                        return false;
                    }
                    lines += 1;
                }
                // The command line, if it is all there, names one of ours; the headers so far are within the count.
                let command_known = match frame.iter().position(|&b| b == b'\n') {
                    Some(end) => known(frame[..end].strip_suffix(b"\r").unwrap_or(&frame[..end])),
                    None => true,
                };
                command_known && lines.saturating_sub(2) <= limits.head.max_headers
            }
        }
    }

    /// A scanner of `commands` (frames of `body_commands` may have a body)
    /// within `limits`.
    pub fn new(commands: Vec<String>, body_commands: Vec<String>, limits: FrameLimits) -> FrameScanner {
        let send_command = commands.iter().position(|c| c == "SEND");
        let ack_command = commands.iter().position(|c| c == "ACK");
        FrameScanner { commands, body_commands, limits, send_command, ack_command }
    }

    fn names(&self) -> (Vec<&str>, Vec<&str>) {
        (self.commands.iter().map(String::as_str).collect(), self.body_commands.iter().map(String::as_str).collect())
    }

    /// Every frame from `start` in `buf` that is there whole and plain (see
    /// [`scan_frames`]).
    pub fn scan(&self, buf: &[u8], start: usize) -> Frames {
        let (commands, body_commands) = self.names();
        scan_frames(buf, start, self.limits, &commands, &body_commands)
    }

    /// Hands `frame` (its body in `buf`) to its lane; a SEND ready to go is
    /// given to `submit` (see [`SendLane::send_frame`]).
    pub fn take(
        &self,
        frame: &WholeFrame,
        buf: &[u8],
        lanes: Lanes<'_>,
        submit: impl FnOnce(&SendLane, Prepared) -> bool,
    ) -> Take {
        let command = Some(frame.command);
        if command == self.send_command {
            match lanes.send {
                Some(lane) => lane.send_frame(&frame.headers, &buf[frame.body.clone()], submit),
                None => Take::Declined,
            }
        } else if command == self.ack_command {
            match lanes.acks {
                Some(acks) if acks.settle(&frame.headers) => {
                    if acks.failed() {
                        Take::Failed
                    } else {
                        Take::Taken
                    }
                }
                _ => Take::Declined,
            }
        } else {
            Take::Declined
        }
    }

    /// [`FrameScanner::take`], counted in `handed` unless declined.
    fn hand_on(
        &self,
        frame: &WholeFrame,
        buf: &[u8],
        lanes: Lanes<'_>,
        submit: impl FnOnce(&SendLane, Prepared) -> bool,
        handed: &mut Handed,
    ) -> Take {
        let take = self.take(frame, buf, lanes, submit);
        if take != Take::Declined {
            if Some(frame.command) == self.send_command {
                handed.sent += 1;
            } else {
                handed.acked += 1;
            }
            handed.failed = take == Take::Failed;
        }
        take
    }

    /// Hands the frames at the head of `frames` to their lanes while they
    /// take them, in order; `submit` as in [`FrameScanner::take`].
    pub fn take_leading(
        &self,
        frames: &[WholeFrame],
        buf: &[u8],
        lanes: Lanes<'_>,
        mut submit: impl FnMut(&SendLane, Prepared) -> bool,
    ) -> Handed {
        let mut handed = Handed::default();
        for frame in frames {
            if self.hand_on(frame, buf, lanes, &mut submit, &mut handed) != Take::Taken {
                break;
            }
        }
        handed
    }

    /// Reads the socket `fd` (non-blocking) and hands what comes to the
    /// lanes, after `carry` (an incomplete frame the caller held), until
    /// the caller is needed (see the module documentation). The caller
    /// must keep `fd` open throughout (its own duplicate). An error reading
    /// the socket is returned as it is (what was handed on stays so).
    pub fn pump(
        &self,
        fd: RawFd,
        carry: Vec<u8>,
        outbox: &Outbox,
        lanes: Lanes<'_>,
        limits: PumpLimits,
    ) -> io::Result<Pumped> {
        let (commands, body_commands) = self.names();
        let started = Instant::now();
        let mut out = Pumped { stop: Stop::Time, rest: carry, heartbeats: 0, handed: Handed::default(), reads: 0 };
        loop {
            if lanes.failing() {
                out.stop = Stop::Failed;
                out.rest.clear();
                return Ok(out);
            }
            if outbox.pending() >= limits.receipt_limit {
                out.stop = Stop::Receipts;
                return Ok(out);
            }
            let elapsed = started.elapsed();
            if elapsed >= limits.wait {
                out.stop = Stop::Time;
                return Ok(out);
            }
            match poll_two(fd, outbox.wake_fd(), limits.wait - elapsed)? {
                Ready::Woken => {
                    out.stop = Stop::Woken;
                    return Ok(out);
                }
                Ready::Nothing => continue,
                Ready::Socket => {}
            }
            let held = out.rest.len();
            out.rest.reserve(limits.read_size);
            let spare = out.rest.spare_capacity_mut();
            // SAFETY: `spare` is writable memory of `spare.len()` bytes owned by `out.rest`.
            let n = unsafe { libc::read(fd, spare.as_mut_ptr().cast(), spare.len().min(limits.read_size)) };
            if n < 0 {
                let error = io::Error::last_os_error();
                match error.kind() {
                    io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => continue,
                    _ => return Err(error),
                }
            }
            if n == 0 {
                out.stop = Stop::Closed;
                return Ok(out);
            }
            let n = n as usize;
            // SAFETY: read wrote `n` bytes right after the `held` ones.
            unsafe { out.rest.set_len(held + n) };
            out.reads += 1;
            let mut at = 0;
            while let Some((frame, heartbeats, end)) =
                whole_frame(&out.rest, at, self.limits, &commands, &body_commands)
            {
                let submit = |lane: &SendLane, prepared: Prepared| lane.submit(prepared);
                match self.hand_on(&frame, &out.rest, lanes, submit, &mut out.handed) {
                    Take::Declined => break,
                    Take::Taken => {
                        out.heartbeats += heartbeats;
                        at = end;
                    }
                    Take::Failed => {
                        out.heartbeats += heartbeats;
                        out.stop = Stop::Failed;
                        out.rest.clear();
                        return Ok(out);
                    }
                }
            }
            out.rest.drain(..at);
            if let Some(heartbeats) = heart_beats_only(&out.rest) {
                out.heartbeats += heartbeats;
                out.rest.clear();
            } else if out.rest.len() > limits.hold || !self.incomplete(&out.rest) {
                // Too much held, or a frame the lanes did not take, or one to refuse.
                out.stop = Stop::Rest;
                return Ok(out);
            }
            if n >= limits.read_size {
                out.stop = Stop::Full;
                return Ok(out);
            }
            if started.elapsed() >= limits.busy {
                out.stop = Stop::Time;
                return Ok(out);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::broker::testing::Fixture;
    use crate::stomp_head::HeadLimits;
    use crate::stomp_send::LaneOptions;
    use std::io::Write;
    use std::os::fd::AsRawFd;
    use std::os::unix::net::UnixStream;

    fn scanner() -> FrameScanner {
        let head = HeadLimits { max_frame_bytes: 1 << 20, max_line_bytes: 1024, max_headers: 100 };
        let commands = ["ACK", "DISCONNECT", "SEND", "SUBSCRIBE"].map(String::from).to_vec();
        FrameScanner::new(commands, vec!["SEND".to_owned()], FrameLimits { head, max_body_bytes: 1 << 20 })
    }

    fn limits(wait_ms: u64) -> PumpLimits {
        PumpLimits {
            wait: Duration::from_millis(wait_ms),
            busy: Duration::from_secs(60),
            receipt_limit: 100,
            read_size: 65536,
            hold: 1024,
        }
    }

    /// A connected pair: the server's end non-blocking, as a Python socket with a timeout is.
    fn pair() -> (UnixStream, UnixStream) {
        let (client, server) = UnixStream::pair().unwrap();
        server.set_nonblocking(true).unwrap();
        (client, server)
    }

    struct Lane {
        fixture: Fixture,
        lane: SendLane,
        queue: crate::broker::testing::Queue,
    }

    impl Lane {
        fn stored(&self) -> usize {
            assert!(self.lane.wait_idle(Duration::from_secs(30)));
            self.fixture.ids(&self.queue.target).len()
        }
    }

    fn lane() -> Lane {
        let fixture = Fixture::new();
        let queue = fixture.queue("q");
        let options = LaneOptions {
            connection: 1,
            client_id: None,
            id_prefix: "ID:r-1-".into(),
            id_base: 1 << 40,
            max_message_size: 1 << 20,
        };
        let lane = SendLane::new(fixture.broker.clone(), options);
        lane.allow("/queue/q", queue.destination.clone());
        Lane { fixture, lane, queue }
    }

    fn send(body: &str) -> String {
        format!("SEND\ndestination:/queue/q\ncontent-type:text/plain\n\n{body}\0")
    }

    #[test]
    fn sends_are_taken_until_a_frame_the_lanes_do_not_take() {
        let lane = lane();
        let outbox = Outbox::new(None).unwrap();
        let (mut client, server) = pair();
        let wire = format!(
            "{}\n{}\r\n{}SUBSCRIBE\nid:1\ndestination:/queue/q\n\n\0{}",
            send("a"),
            send("b"),
            send("c"),
            send("d")
        );
        client.write_all(wire.as_bytes()).unwrap();
        let lanes = Lanes { send: Some(&lane.lane), acks: None };
        let out = scanner().pump(server.as_raw_fd(), Vec::new(), &outbox, lanes, limits(5000)).unwrap();
        assert_eq!(out.stop, Stop::Rest);
        assert_eq!(out.handed, Handed { sent: 3, acked: 0, failed: false });
        assert_eq!(out.heartbeats, 2);
        assert!(out.rest.starts_with(b"SUBSCRIBE\n"), "{:?}", String::from_utf8_lossy(&out.rest));
        assert!(out.rest.ends_with(send("d").as_bytes()));
        assert_eq!(lane.stored(), 3);
    }

    #[test]
    fn a_frame_cut_by_a_read_is_held_and_completed_by_the_next() {
        let lane = lane();
        let outbox = Outbox::new(None).unwrap();
        let (mut client, server) = pair();
        let frame = send("hello");
        let (first, second) = frame.as_bytes().split_at(20);
        let second = second.to_vec();
        // The carry is what the caller held; the rest comes in two reads.
        let carry = first[..7].to_vec();
        client.write_all(&first[7..]).unwrap();
        let writer = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            client.write_all(&second).unwrap();
            client.write_all(b"\n").unwrap();
            std::thread::sleep(Duration::from_millis(50));
            drop(client);
        });
        let lanes = Lanes { send: Some(&lane.lane), acks: None };
        let out = scanner().pump(server.as_raw_fd(), carry, &outbox, lanes, limits(5000)).unwrap();
        writer.join().unwrap();
        assert_eq!(out.stop, Stop::Closed);
        assert_eq!(out.handed.sent, 1);
        assert_eq!(out.heartbeats, 1);
        assert!(out.rest.is_empty());
        assert!((2..=3).contains(&out.reads), "{} reads", out.reads); // the second write's newline may come apart
        assert_eq!(lane.stored(), 1);
    }

    #[test]
    fn a_cut_frame_whose_body_holds_nuls_is_held_until_its_content_length_has_come() {
        let lane = lane();
        let outbox = Outbox::new(None).unwrap();
        let (mut client, server) = pair();
        let mut frame = b"SEND\ndestination:/queue/q\ncontent-length:6\n\n".to_vec();
        frame.extend_from_slice(b"a\0b\0c\0\0");
        client.write_all(&frame[..frame.len() - 3]).unwrap(); // "a\0b\0" of the body come first
        let tail = frame[frame.len() - 3..].to_vec();
        let writer = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            client.write_all(&tail).unwrap();
            std::thread::sleep(Duration::from_millis(50));
            drop(client);
        });
        let lanes = Lanes { send: Some(&lane.lane), acks: None };
        let held = scanner().pump(server.as_raw_fd(), Vec::new(), &outbox, lanes, limits(5000)).unwrap();
        writer.join().unwrap();
        assert_eq!(held.stop, Stop::Closed, "{:?}", String::from_utf8_lossy(&held.rest));
        assert_eq!(held.handed.sent, 1);
        assert!(held.rest.is_empty());
        assert_eq!(lane.stored(), 1);
    }

    #[test]
    fn what_follows_the_frames_handed_on_is_held_only_while_it_may_still_complete() {
        let scanner = scanner();
        assert!(scanner.incomplete(b""));
        assert!(scanner.incomplete(b"\nSEND\ndestination:/queue/q\n"));
        assert!(scanner.incomplete(b"SEND\ncontent-length:4\n\nab\0"));
        assert!(scanner.incomplete(b"SEND\n\nno NUL yet"));
        assert!(!scanner.incomplete(b"SEND\ncontent-length:4\n\nab\0d\0")); // whole
        assert!(!scanner.incomplete(b"SEND\n\nwhole\0"));
        assert!(!scanner.incomplete(b"SEND\ncontent-length:x\n\nab")); // to refuse
        assert!(!scanner.incomplete(b"SEND\nde\\tination:q\n\nab")); // not plain: the parser's
        assert!(!scanner.incomplete(b"SEND\0\n")); // a NUL in the head
        assert!(!scanner.incomplete(b"FOO\ndestination:q\n")); // not a command of ours
        assert!(!scanner.incomplete(b"FOO\n\nab")); // nor here
        assert!(scanner.incomplete(b"SEN")); // the command line not all there
        let long_line = format!("SEND\nx:{}", "a".repeat(1100));
        assert!(!scanner.incomplete(long_line.as_bytes())); // over the line limit already
        assert!(!scanner.incomplete(b"SEND\ncontent-length:2000000\n\nab")); // over the body limit
        let many = format!("SEND\n{}", "h:1\n".repeat(101));
        assert!(!scanner.incomplete(many.as_bytes())); // over the header count
        let enough = format!("SEND\n{}", "h:1\n".repeat(100));
        assert!(scanner.incomplete(enough.as_bytes()));
    }

    #[test]
    fn an_incomplete_frame_over_the_hold_goes_to_the_caller() {
        let lane = lane();
        let outbox = Outbox::new(None).unwrap();
        let (mut client, server) = pair();
        let big = send(&"x".repeat(2000));
        client.write_all(&big.as_bytes()[..1500]).unwrap();
        let lanes = Lanes { send: Some(&lane.lane), acks: None };
        let out = scanner().pump(server.as_raw_fd(), Vec::new(), &outbox, lanes, limits(5000)).unwrap();
        assert_eq!(out.stop, Stop::Rest);
        assert_eq!(out.rest, &big.as_bytes()[..1500]);
        assert_eq!(out.handed, Handed::default());
    }

    #[test]
    fn it_waits_no_longer_than_told_and_wakes_for_the_outbox() {
        let lane = lane();
        let outbox = Outbox::new(None).unwrap();
        let (mut client, server) = pair();
        client.write_all(b"SEND\ndestination:/queue/q\n").unwrap(); // incomplete, small: held
        let lanes = Lanes { send: Some(&lane.lane), acks: None };
        let out = scanner().pump(server.as_raw_fd(), Vec::new(), &outbox, lanes, limits(30)).unwrap();
        assert_eq!(out.stop, Stop::Time);
        assert_eq!(out.rest, b"SEND\ndestination:/queue/q\n");
        outbox.wake();
        let out = scanner().pump(server.as_raw_fd(), out.rest, &outbox, lanes, limits(5000)).unwrap();
        assert_eq!(out.stop, Stop::Woken);
        assert_eq!(out.rest, b"SEND\ndestination:/queue/q\n"); // given back as it was
    }

    #[test]
    fn it_stops_at_the_receipt_limit_and_after_a_failure() {
        let lane = lane();
        let outbox = Outbox::new(None).unwrap();
        let (mut client, server) = pair();
        outbox.push("r1".to_owned(), None, false, false);
        let mut bounded = limits(5000);
        bounded.receipt_limit = 1;
        let lanes = Lanes { send: Some(&lane.lane), acks: None };
        let out = scanner().pump(server.as_raw_fd(), Vec::new(), &outbox, lanes, bounded).unwrap();
        assert_eq!(out.stop, Stop::Receipts);
        // A destination deleted under the lane: the frame is declined, not failed.
        lane.queue.destination.mark_deleted();
        client.write_all(send("a").as_bytes()).unwrap();
        let out = scanner().pump(server.as_raw_fd(), Vec::new(), &outbox, lanes, limits(5000)).unwrap();
        assert_eq!(out.stop, Stop::Rest);
        assert_eq!(out.handed.sent, 0);
        assert_eq!(out.rest, send("a").as_bytes());
    }

    #[test]
    fn a_read_that_fills_its_buffer_gives_the_socket_back() {
        let lane = lane();
        let outbox = Outbox::new(None).unwrap();
        let (mut client, server) = pair();
        let wire = send("a").repeat(8);
        client.write_all(wire.as_bytes()).unwrap();
        let mut small = limits(5000);
        small.read_size = send("a").len() * 3; // three whole frames a read
        let lanes = Lanes { send: Some(&lane.lane), acks: None };
        let out = scanner().pump(server.as_raw_fd(), Vec::new(), &outbox, lanes, small).unwrap();
        assert_eq!(out.stop, Stop::Full);
        assert_eq!((out.reads, out.handed.sent), (1, 3));
        assert!(out.rest.is_empty());
    }

    #[test]
    fn take_leading_stops_at_the_first_frame_declined() {
        let lane = lane();
        let wire = format!("{}{}SUBSCRIBE\nid:1\ndestination:/queue/q\n\n\0{}", send("a"), send("b"), send("c"));
        let scanner = scanner();
        let frames = scanner.scan(wire.as_bytes(), 0);
        assert_eq!(frames.frames.len(), 4);
        let lanes = Lanes { send: Some(&lane.lane), acks: None };
        let mut submitted = 0;
        let handed = scanner.take_leading(&frames.frames, wire.as_bytes(), lanes, |lane, prepared| {
            submitted += 1;
            lane.submit(prepared)
        });
        assert_eq!(handed, Handed { sent: 2, acked: 0, failed: false });
        assert_eq!(submitted, 2);
        let none = scanner.take_leading(&frames.frames, wire.as_bytes(), Lanes::default(), |_, _| true);
        assert_eq!(none, Handed::default());
    }

    #[test]
    fn only_end_of_lines_are_heart_beats() {
        assert_eq!(heart_beats_only(b""), Some(0));
        assert_eq!(heart_beats_only(b"\n\r\n\n"), Some(3));
        assert_eq!(heart_beats_only(b"\n\r"), None);
        assert_eq!(heart_beats_only(b"\nS"), None);
    }
}
