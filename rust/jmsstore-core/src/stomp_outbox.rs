//! A STOMP connection's outgoing side, shared by the server's Python
//! threads and its native ones.
//!
//! Four threads write to one client: its reader (CONNECTED, RECEIPT,
//! ERROR, heart-beats), its subscriptions' dispatchers (MESSAGE, from
//! Python or natively: [`Outbox::write_messages`]), the broker's completer
//! (the RECEIPT of a SEND the connection's send lane took, once durable)
//! and the Python callback thread (the RECEIPT of a SEND the Python path
//! sent). The [`Outbox`] holds what they share:
//!
//! - **the write lock**, held by whoever writes a frame, so that frames
//!   never interleave. Python threads and native dispatchers wait for it
//!   (without the GIL); the broker's threads only ever try it (they must
//!   never wait on a client).
//! - **the tail**: bytes a write that could not wait left unsent. Whoever
//!   writes next sends them first, under the lock.
//! - **the receipts** in the order of the frames that asked for them. A
//!   receipt goes out once it is *ready* (its frame handled) and *done*
//!   (its effect durable), after every receipt before it; a failed SEND's
//!   receipt becomes the reader's ERROR frame instead.
//! - **the reader's wake-up**: a non-blocking pipe the reader polls with
//!   its socket. Whoever completes a receipt it cannot write at once (the
//!   lock busy, the socket full, TLS, a failure at the head) writes a byte
//!   to it, and the reader sends what is there.
//!
//! The outbox writes to a duplicate of the socket's descriptor, closed by
//! the first holder of the write lock to give it back after
//! [`Outbox::close`]: a receipt completing after the connection closed can
//! never write to a descriptor number the process has given to another
//! file since.

use std::collections::VecDeque;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::nowait::write_nowait;
use crate::stomp_head::escape_into;

/// One frame's receipt, in the queue.
#[derive(Debug)]
struct Receipt {
    ticket: u64,
    receipt_id: String,
    /// A SEND's: the id the server gave its message (a jmsstore extension).
    message_id: Option<String>,
    /// Its frame has been handled (until then a SEND's message id may still come).
    ready: bool,
    /// Its effect is durable, or it failed.
    done: bool,
    /// A SEND that failed: why (the ERROR frame's message).
    error: Option<String>,
}

impl Receipt {
    fn sendable(&self) -> bool {
        self.ready && self.done
    }
}

#[derive(Debug, Default)]
struct State {
    receipts: VecDeque<Receipt>,
    next_ticket: u64,
    tail: Vec<u8>,
    /// A duplicate of a plain socket's descriptor (non-blocking), written
    /// under the write lock only; None over TLS, where only the reader
    /// writes (through the TLS state), and once closed.
    socket: Option<OwnedFd>,
}

/// What [`Outbox::take_done`] took from the head of the queue.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Taken {
    /// The RECEIPT frames of the receipts sendable at the head, encoded, in order.
    pub frames: Vec<u8>,
    /// How many frames that is.
    pub count: usize,
    /// The failed SEND's receipt that ended the run: `(receipt id, why)`.
    pub failed: Option<(String, String)>,
}

/// A lock held across calls (a Python `with` block), waited for with a timeout.
#[derive(Debug, Default)]
struct WriteLock {
    held: Mutex<bool>,
    freed: Condvar,
}

impl WriteLock {
    fn try_lock(&self) -> bool {
        let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        !std::mem::replace(&mut *held, true)
    }

    fn lock(&self, timeout: Option<Duration>) -> bool {
        // A timeout past what an Instant holds waits for as long as it takes.
        let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
        let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        while *held {
            held = match deadline {
                None => self.freed.wait(held).unwrap_or_else(|p| p.into_inner()),
                Some(deadline) => {
                    let now = Instant::now();
                    if now >= deadline {
                        return false;
                    }
                    self.freed.wait_timeout(held, deadline - now).unwrap_or_else(|p| p.into_inner()).0
                }
            };
        }
        *held = true;
        true
    }

    fn unlock(&self) {
        *self.held.lock().unwrap_or_else(|p| p.into_inner()) = false;
        self.freed.notify_one();
    }
}

/// Statistics of one outbox.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct OutboxStatistics {
    /// RECEIPT frames encoded for the client (by whichever thread wrote them).
    pub receipts: u64,
    /// Of those, written by the thread that completed them, without the reader.
    pub receipts_direct: u64,
    /// Times the reader was woken to write what others could not.
    pub wakeups: u64,
    /// MESSAGE frames written by [`Outbox::write_messages`] (native dispatchers).
    pub messages: u64,
    /// Calls of [`Outbox::write_messages`] that wrote (one per batch).
    pub message_writes: u64,
}

/// One connection's outgoing side. See the module documentation.
#[derive(Debug)]
pub struct Outbox {
    wake_read: OwnedFd,
    wake_write: OwnedFd,
    lock: WriteLock,
    state: Mutex<State>,
    /// Rung when a receipt is done or leaves the queue.
    changed: Condvar,
    closed: AtomicBool,
    /// The reader stopped reading until fewer receipts than this wait (0: it reads).
    wake_below: AtomicUsize,
    receipts: AtomicU64,
    receipts_direct: AtomicU64,
    wakeups: AtomicU64,
    messages: AtomicU64,
    message_writes: AtomicU64,
    /// See [`Outbox::last_write_ns`].
    last_write: AtomicU64,
}

fn cvt(result: libc::c_int) -> std::io::Result<libc::c_int> {
    if result < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(result)
    }
}

impl Outbox {
    /// An outbox for the plain socket `socket` (which must be non-blocking,
    /// as a Python socket with a timeout is; its descriptor is duplicated,
    /// not taken), or for a TLS connection (None).
    pub fn new(socket: Option<RawFd>) -> std::io::Result<Outbox> {
        let socket = match socket {
            // SAFETY: F_DUPFD_CLOEXEC makes a new descriptor, which we own.
            Some(fd) => Some(unsafe { OwnedFd::from_raw_fd(cvt(libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 0))?) }),
            None => None,
        };
        let mut ends = [0 as libc::c_int; 2];
        // SAFETY: `ends` has room for the two descriptors pipe2 writes.
        cvt(unsafe { libc::pipe2(ends.as_mut_ptr(), libc::O_NONBLOCK | libc::O_CLOEXEC) })?;
        // SAFETY: pipe2 made both descriptors, which we own.
        let (wake_read, wake_write) = unsafe { (OwnedFd::from_raw_fd(ends[0]), OwnedFd::from_raw_fd(ends[1])) };
        Ok(Outbox {
            wake_read,
            wake_write,
            lock: WriteLock::default(),
            state: Mutex::new(State { socket, ..State::default() }),
            changed: Condvar::new(),
            closed: AtomicBool::new(false),
            wake_below: AtomicUsize::new(0),
            receipts: AtomicU64::new(0),
            receipts_direct: AtomicU64::new(0),
            wakeups: AtomicU64::new(0),
            messages: AtomicU64::new(0),
            message_writes: AtomicU64::new(0),
            last_write: AtomicU64::new(0),
        })
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The descriptor the reader polls: readable after [`Outbox::wake`]
    /// (read it empty, non-blocking, before looking again).
    pub fn wake_fd(&self) -> RawFd {
        self.wake_read.as_raw_fd()
    }

    /// Wakes the reader (a wake-up already pending is enough).
    pub fn wake(&self) {
        self.wakeups.fetch_add(1, Ordering::Relaxed);
        // A full pipe means a wake-up is pending anyway; a closed one cannot be.
        let _ = write_nowait(self.wake_write.as_raw_fd(), b"\0");
    }

    /// The reader stops reading until fewer than `limit` receipts wait (0:
    /// it reads again): whoever writes receipts below that wakes it.
    pub fn wake_below(&self, limit: usize) {
        self.wake_below.store(limit, Ordering::Release);
    }

    /// Takes the write lock if it is free.
    pub fn try_lock(&self) -> bool {
        self.lock.try_lock()
    }

    /// Takes the write lock, waiting at most `timeout` (None: for as long
    /// as it takes); whether it was taken.
    pub fn lock(&self, timeout: Option<Duration>) -> bool {
        self.lock.lock(timeout)
    }

    /// Gives the write lock back (its holder only). After
    /// [`Outbox::close`], the socket's duplicate is closed first: nobody is
    /// writing to it now, and nobody will.
    pub fn unlock(&self) {
        if self.is_closed() {
            drop(self.state().socket.take());
        }
        self.lock.unlock();
    }

    /// What an earlier write left unsent, to be sent before anything else
    /// (by the write lock's holder).
    pub fn take_tail(&self) -> Vec<u8> {
        std::mem::take(&mut self.state().tail)
    }

    /// The connection is closing (called under the write lock, or after
    /// waiting for it in vain): nothing is written from here on but by the
    /// reader's own calls.
    pub fn close(&self) {
        self.closed.store(true, Ordering::Release);
    }

    /// Whether [`Outbox::close`] was called.
    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Queues the receipt `receipt_id` of a frame being handled; `ready`:
    /// handled already, `done`: its effect durable already. The ticket
    /// names it in the calls below.
    pub fn push(&self, receipt_id: String, message_id: Option<String>, ready: bool, done: bool) -> u64 {
        let mut state = self.state();
        let ticket = state.next_ticket;
        state.next_ticket += 1;
        state.receipts.push_back(Receipt { ticket, receipt_id, message_id, ready, done, error: None });
        ticket
    }

    fn find(state: &mut State, ticket: u64) -> Option<&mut Receipt> {
        // Tickets rise along the queue: the search is a binary one.
        let index = state.receipts.binary_search_by_key(&ticket, |r| r.ticket).ok()?;
        state.receipts.get_mut(index)
    }

    /// Gives a queued SEND's receipt the message id the server gave the message.
    pub fn set_message_id(&self, ticket: u64, message_id: String) {
        if let Some(receipt) = Self::find(&mut self.state(), ticket) {
            receipt.message_id = Some(message_id);
        }
    }

    /// The frame of `ticket` has been handled; `done`: its effect is
    /// durable too. The caller (the reader) sends what is sendable next.
    pub fn ready(&self, ticket: u64, done: bool) {
        let mut state = self.state();
        if let Some(receipt) = Self::find(&mut state, ticket) {
            receipt.ready = true;
            receipt.done |= done;
        }
        drop(state);
        self.changed.notify_all();
    }

    /// Takes `ticket`'s receipt out of the queue (its frame failed, and
    /// its ERROR frame carries the receipt id instead).
    pub fn discard(&self, ticket: u64) {
        let mut state = self.state();
        if let Ok(index) = state.receipts.binary_search_by_key(&ticket, |r| r.ticket) {
            state.receipts.remove(index);
        }
        drop(state);
        self.changed.notify_all();
    }

    /// `ticket`'s effect is durable (`error` None) or failed: its receipt,
    /// and those after it that are sendable, go out now from the calling
    /// thread if that needs no wait (the write lock free, the socket taking
    /// the bytes at once); otherwise the reader is woken to send them.
    pub fn complete(&self, ticket: u64, error: Option<String>) {
        let mut state = self.state();
        if let Some(receipt) = Self::find(&mut state, ticket) {
            receipt.done = true;
            receipt.error = error;
        }
        let head_sendable = state.receipts.front().is_some_and(Receipt::sendable);
        drop(state);
        self.changed.notify_all();
        if head_sendable && !self.write_directly() {
            self.wake();
        }
    }

    /// Writes the sendable receipts at the head without waiting; true if
    /// nothing is left for the reader.
    fn write_directly(&self) -> bool {
        if self.is_closed() || !self.lock.try_lock() {
            return false;
        }
        let left_for_reader = (|| {
            if self.is_closed() {
                return true;
            }
            let mut state = self.state();
            let Some(socket) = state.socket.as_ref().map(AsRawFd::as_raw_fd) else { return true };
            if !state.tail.is_empty() {
                return true; // the reader sends it first
            }
            let taken = Self::take_sendable(&mut state, false);
            let failure_next = state.receipts.front().is_some_and(|r| r.sendable() && r.error.is_some());
            // The reader stopped reading for want of room: there is some now.
            let below = self.wake_below.load(Ordering::Acquire);
            let room_made = below > 0 && state.receipts.len() < below;
            drop(state);
            if taken.count == 0 {
                return failure_next;
            }
            self.receipts.fetch_add(taken.count as u64, Ordering::Relaxed);
            // Under the write lock: the descriptor stays open through the write.
            match write_nowait(socket, &taken.frames) {
                Ok(written) => {
                    self.receipts_direct.fetch_add(taken.count as u64, Ordering::Relaxed);
                    self.last_write.store(monotonic_ns(), Ordering::Relaxed);
                    if written < taken.frames.len() {
                        self.state().tail = taken.frames[written..].to_vec();
                        return true;
                    }
                    failure_next || room_made
                }
                // Broken: the reader finds the socket broken and closes the connection.
                Err(_) => true,
            }
        })();
        self.unlock();
        !left_for_reader
    }

    /// Writes `count` MESSAGE frames, encoded in `data`, after what an earlier
    /// write left (the tail), waiting for the write lock as long as it takes
    /// (its holder's own write is bounded) and then up to `timeout` (None:
    /// for as long as it takes) for the client to take the bytes: a native
    /// dispatcher's write, as the Python threads' blocking writes are. A
    /// write that fails or times out leaves the connection broken: the
    /// socket is shut down, so that its reader closes it, and the error is
    /// returned. Once the connection is closing it writes nothing
    /// (`BrokenPipe`).
    pub fn write_messages(&self, data: &[u8], count: u64, timeout: Option<Duration>) -> std::io::Result<()> {
        self.lock.lock(None);
        let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
        let result = (|| {
            let (socket, tail) = {
                let mut state = self.state();
                let socket = state.socket.as_ref().map(AsRawFd::as_raw_fd);
                (socket, std::mem::take(&mut state.tail))
            };
            let socket = match socket {
                Some(socket) if !self.is_closed() => socket,
                _ => return Err(std::io::Error::from(std::io::ErrorKind::BrokenPipe)),
            };
            // Counted first: the client may read the frames, and ask for the
            // statistics, before the write returns (a failed write takes
            // them back).
            self.messages.fetch_add(count, Ordering::Relaxed);
            self.message_writes.fetch_add(1, Ordering::Relaxed);
            // Under the write lock: the descriptor stays open through the writes.
            let written = write_waiting(socket, &tail, deadline).and_then(|()| write_waiting(socket, data, deadline));
            match written {
                Ok(()) => self.last_write.store(monotonic_ns(), Ordering::Relaxed),
                Err(_) => {
                    self.messages.fetch_sub(count, Ordering::Relaxed);
                    self.message_writes.fetch_sub(1, Ordering::Relaxed);
                    // SAFETY: shutdown on a descriptor we hold open (under the lock) touches no memory.
                    unsafe { libc::shutdown(socket, libc::SHUT_RDWR) };
                }
            }
            written
        })();
        self.unlock();
        result
    }

    /// When the native threads last wrote to the client (`CLOCK_MONOTONIC`
    /// nanoseconds, as Python's `time.monotonic_ns`; 0: never): a sign of
    /// life, so that no heart-beat need go out meanwhile.
    pub fn last_write_ns(&self) -> u64 {
        self.last_write.load(Ordering::Relaxed)
    }

    /// Takes the sendable receipts at the head of the queue, in order, as
    /// RECEIPT frames, up to the first that is not sendable, or a failed
    /// SEND's, which ends the run and is taken too (the caller writes its
    /// ERROR frame and closes the connection). The caller holds the write
    /// lock, and writes the frames (after the tail) before giving it back.
    pub fn take_done(&self) -> Taken {
        let taken = Self::take_sendable(&mut self.state(), true);
        self.receipts.fetch_add(taken.count as u64, Ordering::Relaxed);
        if taken.failed.is_some() {
            self.changed.notify_all();
        }
        taken
    }

    fn take_sendable(state: &mut State, take_failure: bool) -> Taken {
        let mut taken = Taken::default();
        while state.receipts.front().is_some_and(Receipt::sendable) {
            let failed = state.receipts.front().is_some_and(|r| r.error.is_some());
            if failed && !take_failure {
                break;
            }
            let receipt = state.receipts.pop_front().expect("a receipt at the head");
            if let Some(error) = receipt.error {
                taken.failed = Some((receipt.receipt_id, error));
                break;
            }
            write_receipt(&receipt.receipt_id, receipt.message_id.as_deref(), &mut taken.frames);
            taken.count += 1;
        }
        taken
    }

    /// Whether the reader has something to write: a sendable receipt at
    /// the head, or a tail.
    pub fn has_work(&self) -> bool {
        let state = self.state();
        !state.tail.is_empty() || state.receipts.front().is_some_and(Receipt::sendable)
    }

    /// Receipts queued and not yet taken.
    pub fn pending(&self) -> usize {
        self.state().receipts.len()
    }

    /// Waits until fewer than `limit` receipts are queued or the one at the
    /// head is sendable, at most `timeout`; whether it is so.
    pub fn wait_for_room(&self, limit: usize, timeout: Duration) -> bool {
        self.wait(timeout, |state| {
            state.receipts.len() < limit || state.receipts.front().is_some_and(Receipt::sendable)
        })
    }

    /// Waits until every queued receipt is done, at most `timeout`; whether they are.
    pub fn wait_all_done(&self, timeout: Duration) -> bool {
        self.wait(timeout, |state| state.receipts.iter().all(|r| r.done))
    }

    fn wait(&self, timeout: Duration, until: impl Fn(&State) -> bool) -> bool {
        let deadline = Instant::now().checked_add(timeout);
        let mut state = self.state();
        loop {
            if until(&state) {
                return true;
            }
            let wait = match deadline {
                Some(deadline) => match deadline.checked_duration_since(Instant::now()) {
                    Some(left) if !left.is_zero() => left,
                    _ => return false,
                },
                None => Duration::from_secs(3600),
            };
            state = self.changed.wait_timeout(state, wait).unwrap_or_else(|p| p.into_inner()).0;
        }
    }

    /// Its statistics.
    pub fn statistics(&self) -> OutboxStatistics {
        OutboxStatistics {
            receipts: self.receipts.load(Ordering::Relaxed),
            receipts_direct: self.receipts_direct.load(Ordering::Relaxed),
            wakeups: self.wakeups.load(Ordering::Relaxed),
            messages: self.messages.load(Ordering::Relaxed),
            message_writes: self.message_writes.load(Ordering::Relaxed),
        }
    }
}

/// `CLOCK_MONOTONIC` now, in nanoseconds.
fn monotonic_ns() -> u64 {
    let mut now = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes one timespec, which we own.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) };
    (now.tv_sec as u64).saturating_mul(1_000_000_000).saturating_add(now.tv_nsec as u64)
}

/// Writes all of `data` to the non-blocking descriptor `fd`, waiting for
/// room (`poll`) until `deadline` (None: for as long as it takes).
fn write_waiting(fd: RawFd, mut data: &[u8], deadline: Option<Instant>) -> std::io::Result<()> {
    while !data.is_empty() {
        let written = write_nowait(fd, data)?;
        data = &data[written..];
        if data.is_empty() || written > 0 {
            continue;
        }
        let millis = match deadline {
            None => -1,
            Some(deadline) => match deadline.checked_duration_since(Instant::now()) {
                Some(left) if !left.is_zero() => left.as_millis().clamp(1, i32::MAX as u128) as libc::c_int,
                _ => return Err(std::io::Error::new(std::io::ErrorKind::TimedOut, "the client took no bytes in time")),
            },
        };
        let mut ready = libc::pollfd { fd, events: libc::POLLOUT, revents: 0 };
        // SAFETY: one valid pollfd, for the duration of the call.
        if unsafe { libc::poll(&mut ready, 1, millis) } < 0 {
            let error = std::io::Error::last_os_error();
            if error.kind() != std::io::ErrorKind::Interrupted {
                return Err(error);
            }
        }
    }
    Ok(())
}

/// A RECEIPT frame, as the server's Python encoder writes it.
fn write_receipt(receipt_id: &str, message_id: Option<&str>, out: &mut Vec<u8>) {
    out.extend_from_slice(b"RECEIPT\nreceipt-id:");
    escape_into(receipt_id, out);
    if let Some(message_id) = message_id {
        out.extend_from_slice(b"\nmessage-id:");
        escape_into(message_id, out);
    }
    out.extend_from_slice(b"\n\n\0");
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::os::unix::net::UnixStream;
    use std::sync::Arc;

    fn pair() -> (Outbox, UnixStream, UnixStream) {
        let (ours, theirs) = UnixStream::pair().unwrap();
        ours.set_nonblocking(true).unwrap();
        (Outbox::new(Some(ours.as_raw_fd())).unwrap(), ours, theirs)
    }

    fn read_available(stream: &mut UnixStream) -> Vec<u8> {
        stream.set_nonblocking(true).unwrap();
        let mut out = Vec::new();
        let mut buf = [0u8; 65536];
        while let Ok(n) = stream.read(&mut buf) {
            if n == 0 {
                break;
            }
            out.extend_from_slice(&buf[..n]);
        }
        out
    }

    fn woken(outbox: &Outbox) -> bool {
        let mut buf = [0u8; 64];
        // SAFETY: a read into a local buffer of its length.
        let n = unsafe { libc::read(outbox.wake_fd(), buf.as_mut_ptr().cast(), buf.len()) };
        n > 0
    }

    #[test]
    fn a_message_write_waits_out_another_writer_and_then_has_its_whole_timeout() {
        let (outbox, _ours, mut theirs) = pair();
        let outbox = Arc::new(outbox);
        assert!(outbox.lock(None));
        let writer = {
            let outbox = outbox.clone();
            std::thread::spawn(move || outbox.write_messages(b"MESSAGE\n\n\0", 1, Some(Duration::from_millis(50))))
        };
        std::thread::sleep(Duration::from_millis(200)); // longer than the write's timeout
        assert_eq!(outbox.last_write_ns(), 0, "nothing written yet");
        outbox.unlock();
        writer.join().unwrap().expect("written once the lock was free");
        assert_eq!(read_available(&mut theirs), b"MESSAGE\n\n\0");
        let stats = outbox.statistics();
        assert_eq!((stats.messages, stats.message_writes), (1, 1));
        assert!(outbox.last_write_ns() > 0);
    }

    #[test]
    fn a_message_write_the_client_does_not_take_in_time_shuts_the_socket_down() {
        let (outbox, _ours, mut theirs) = pair();
        let chunk = vec![b'x'; 1 << 20];
        let failed = outbox.write_messages(&chunk, 1, Some(Duration::from_millis(50))).expect_err("never read");
        assert_eq!(failed.kind(), std::io::ErrorKind::TimedOut);
        assert_eq!(outbox.statistics().messages, 0, "not counted");
        let got = read_available(&mut theirs);
        assert!(got.len() < chunk.len());
        theirs.set_nonblocking(false).unwrap();
        assert_eq!(theirs.read(&mut [0u8; 16]).unwrap(), 0, "shut down: the client sees the end");
        outbox.close();
        let closed = outbox.write_messages(b"MESSAGE\n\n\0", 1, None).expect_err("closing");
        assert_eq!(closed.kind(), std::io::ErrorKind::BrokenPipe);
    }

    #[test]
    fn receipts_go_out_in_frame_order_once_each_is_done() {
        let (outbox, _ours, mut theirs) = pair();
        let first = outbox.push("r1".into(), Some("ID:a-1".into()), true, false);
        let second = outbox.push("r:2".into(), None, true, false);
        outbox.complete(second, None);
        assert!(read_available(&mut theirs).is_empty(), "the first is not done yet");
        assert!(!outbox.has_work());
        assert!(!woken(&outbox), "nothing sendable at the head: nobody to wake");
        outbox.complete(first, None);
        let written = read_available(&mut theirs);
        assert_eq!(written, b"RECEIPT\nreceipt-id:r1\nmessage-id:ID\\ca-1\n\n\0RECEIPT\nreceipt-id:r\\c2\n\n\0");
        assert_eq!(outbox.pending(), 0);
        let stats = outbox.statistics();
        assert_eq!((stats.receipts, stats.receipts_direct, stats.wakeups), (2, 2, 0));
    }

    #[test]
    fn a_receipt_waits_for_its_frame_to_be_handled() {
        let (outbox, _ours, mut theirs) = pair();
        let ticket = outbox.push("r1".into(), None, false, false);
        outbox.complete(ticket, None);
        assert!(read_available(&mut theirs).is_empty(), "not ready: its message id may still come");
        outbox.set_message_id(ticket, "ID:x-9".into());
        outbox.ready(ticket, false);
        assert!(outbox.lock(None));
        let taken = outbox.take_done();
        outbox.unlock();
        assert_eq!(taken.frames, b"RECEIPT\nreceipt-id:r1\nmessage-id:ID\\cx-9\n\n\0");
        assert_eq!((taken.count, taken.failed), (1, None));
    }

    #[test]
    fn a_busy_lock_leaves_the_receipt_to_the_reader() {
        let (outbox, _ours, mut theirs) = pair();
        let ticket = outbox.push("r1".into(), None, true, false);
        assert!(outbox.try_lock());
        outbox.complete(ticket, None);
        assert!(read_available(&mut theirs).is_empty());
        assert!(woken(&outbox));
        let taken = outbox.take_done();
        outbox.unlock();
        assert_eq!(taken.count, 1);
        assert_eq!(outbox.statistics().receipts_direct, 0);
    }

    #[test]
    fn a_failed_send_stops_the_run_and_is_the_reader_s() {
        let (outbox, _ours, mut theirs) = pair();
        let ok = outbox.push("ok".into(), None, true, false);
        let bad = outbox.push("bad".into(), None, true, false);
        let after = outbox.push("after".into(), None, true, true);
        outbox.complete(bad, Some("the disk is full".into()));
        outbox.complete(ok, None);
        assert_eq!(read_available(&mut theirs), b"RECEIPT\nreceipt-id:ok\n\n\0");
        assert!(woken(&outbox), "the failure is the reader's to send");
        assert!(outbox.lock(Some(Duration::from_secs(1))));
        let taken = outbox.take_done();
        outbox.unlock();
        assert_eq!(taken.count, 0);
        assert_eq!(taken.failed, Some(("bad".into(), "the disk is full".into())));
        assert_eq!(outbox.pending(), 1, "the receipt after it stays (the connection ends)");
        let _ = after;
    }

    #[test]
    fn what_a_full_socket_does_not_take_is_the_tail() {
        let (outbox, ours, mut theirs) = pair();
        // Fill the socket's buffer.
        let chunk = vec![b'x'; 65536];
        let mut filled = 0;
        while write_nowait(ours.as_raw_fd(), &chunk).unwrap() > 0 {
            filled += 1;
            assert!(filled < 1024);
        }
        let ticket = outbox.push("r1".into(), None, true, false);
        outbox.complete(ticket, None);
        assert!(woken(&outbox));
        assert!(outbox.has_work(), "the tail is the reader's");
        assert!(outbox.lock(None));
        let mut rest = outbox.take_tail();
        rest.extend(outbox.take_done().frames);
        outbox.unlock();
        assert_eq!(rest, b"RECEIPT\nreceipt-id:r1\n\n\0", "nothing of it went out: all of it is left");
        drop(read_available(&mut theirs));
    }

    #[test]
    fn nothing_is_written_once_closed_and_the_descriptor_outlives_the_socket() {
        let (outbox, ours, mut theirs) = pair();
        drop(ours); // the caller's socket closes: ours is a duplicate
        let ticket = outbox.push("r1".into(), None, true, false);
        assert!(outbox.lock(None));
        outbox.close();
        outbox.unlock();
        outbox.complete(ticket, None);
        assert!(read_available(&mut theirs).is_empty());
        assert!(woken(&outbox));
        // The last descriptor of the socket was the outbox's: the peer sees it closed.
        theirs.set_nonblocking(false).unwrap();
        assert_eq!(theirs.read(&mut [0u8; 8]).unwrap(), 0);
    }

    #[test]
    fn waits_end_when_their_condition_holds_or_at_their_timeout() {
        let (outbox, _ours, _theirs) = pair();
        let outbox = Arc::new(outbox);
        let ticket = outbox.push("r1".into(), None, true, false);
        assert!(!outbox.wait_all_done(Duration::from_millis(20)));
        assert!(!outbox.wait_for_room(1, Duration::from_millis(20)));
        assert!(outbox.wait_for_room(2, Duration::ZERO));
        let completer = {
            let outbox = Arc::clone(&outbox);
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(30));
                assert!(outbox.try_lock()); // the reader's turn: it is not written here
                outbox.complete(ticket, None);
                outbox.unlock();
            })
        };
        assert!(outbox.wait_all_done(Duration::from_secs(30)));
        assert!(outbox.wait_for_room(1, Duration::from_secs(30)));
        completer.join().unwrap();
        outbox.discard(ticket);
        assert_eq!(outbox.pending(), 0);
    }

    #[test]
    fn the_write_lock_is_waited_for_with_a_timeout() {
        let (outbox, _ours, _theirs) = pair();
        let outbox = Arc::new(outbox);
        assert!(outbox.try_lock());
        assert!(!outbox.try_lock());
        assert!(!outbox.lock(Some(Duration::from_millis(20))));
        let holder = Arc::clone(&outbox);
        let releaser = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(30));
            holder.unlock();
        });
        assert!(outbox.lock(Some(Duration::from_secs(30))));
        releaser.join().unwrap();
        outbox.unlock();
    }

    #[test]
    fn a_reader_waiting_for_room_is_woken_when_receipts_written_make_some() {
        let (outbox, _ours, mut theirs) = pair();
        let first = outbox.push("r1".into(), None, true, false);
        let _second = outbox.push("r2".into(), None, true, false);
        outbox.wake_below(2);
        outbox.complete(first, None);
        assert_eq!(read_available(&mut theirs), b"RECEIPT\nreceipt-id:r1\n\n\0");
        assert!(woken(&outbox), "one receipt waits now, below the limit of 2");
        outbox.wake_below(0);
        let third = outbox.push("r3".into(), None, true, true);
        outbox.complete(third, None); // not at the head: nothing written, nobody woken
        assert!(!woken(&outbox));
    }

    #[test]
    fn a_timeout_too_long_for_the_clock_waits_as_long_as_it_takes() {
        let (outbox, _ours, _theirs) = pair();
        assert!(outbox.lock(Some(Duration::MAX)));
        outbox.unlock();
    }

    #[test]
    fn over_tls_every_receipt_is_the_reader_s() {
        let outbox = Outbox::new(None).unwrap();
        let ticket = outbox.push("r1".into(), None, true, false);
        outbox.complete(ticket, None);
        assert!(woken(&outbox));
        assert!(outbox.lock(None));
        assert_eq!(outbox.take_done().count, 1);
        outbox.unlock();
    }
}
