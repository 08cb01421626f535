//! Socket writes that never wait, for callers that must not block.
//!
//! A STOMP connection's receipts are written by the thread that learns a
//! SEND is durable (the broker's completer, or the Python callback thread
//! holding the GIL through its batch) when the socket takes them at once;
//! what it does not take is left to the connection's reader (see
//! [`crate::stomp_outbox`]). On a non-blocking descriptor this write never
//! waits, so it needs no GIL release and never stalls on a slow client.

use std::io::{ErrorKind, Write};
use std::mem::ManuallyDrop;
use std::os::fd::{FromRawFd, RawFd};

/// Writes what the non-blocking descriptor `fd` takes of `data` now: the
/// count, 0 if it takes nothing without waiting. The descriptor stays
/// open (the caller's socket owns it); an invalid or closed one is an
/// error (`EBADF`), as is a broken connection.
pub fn write_nowait(fd: RawFd, data: &[u8]) -> std::io::Result<usize> {
    if fd < 0 {
        return Err(std::io::Error::from_raw_os_error(libc::EBADF));
    }
    // SAFETY: `fd` is only borrowed for the write: ManuallyDrop never
    // closes it, and a descriptor that is not open fails the write with
    // EBADF rather than touching memory.
    let mut file = ManuallyDrop::new(unsafe { std::fs::File::from_raw_fd(fd) });
    loop {
        match file.write(data) {
            Ok(n) => return Ok(n),
            Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(0),
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::os::fd::AsRawFd;
    use std::os::unix::net::UnixStream;

    #[test]
    fn a_write_the_socket_takes_whole_arrives_whole() {
        let (ours, mut theirs) = UnixStream::pair().unwrap();
        ours.set_nonblocking(true).unwrap();
        assert_eq!(write_nowait(ours.as_raw_fd(), b"RECEIPT\n\n\0").unwrap(), 10);
        let mut got = [0u8; 10];
        theirs.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"RECEIPT\n\n\0");
    }

    #[test]
    fn a_full_socket_takes_part_then_nothing_without_waiting() {
        let (ours, mut theirs) = UnixStream::pair().unwrap();
        ours.set_nonblocking(true).unwrap();
        let chunk = vec![7u8; 64 * 1024];
        let mut written = 0;
        loop {
            let n = write_nowait(ours.as_raw_fd(), &chunk).unwrap();
            if n == 0 {
                break;
            }
            written += n;
            assert!(written < 64 << 20, "a socket buffer never fills");
        }
        // The socket stays open and usable: the peer reads everything taken.
        theirs.set_nonblocking(true).unwrap();
        let mut read = 0;
        let mut buf = vec![0u8; 64 * 1024];
        while let Ok(n) = theirs.read(&mut buf) {
            if n == 0 {
                break;
            }
            read += n;
        }
        assert_eq!(read, written);
        assert_eq!(write_nowait(ours.as_raw_fd(), b"x").unwrap(), 1);
    }

    #[test]
    fn a_closed_peer_and_a_bad_descriptor_are_errors() {
        let (ours, theirs) = UnixStream::pair().unwrap();
        ours.set_nonblocking(true).unwrap();
        drop(theirs);
        assert!(write_nowait(ours.as_raw_fd(), b"x").is_err());
        assert_eq!(write_nowait(-1, b"x").unwrap_err().raw_os_error(), Some(libc::EBADF));
    }
}
