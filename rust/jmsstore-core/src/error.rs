//! The one error type of the engine.

use std::fmt;
use std::io;
use std::path::PathBuf;

/// Everything that can go wrong in the store, the codecs and the pager.
///
/// The Python binding maps each variant to one exception class; keep the
/// two in step (see `rust/jmsstore-py/src/errors.rs`).
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// An operating-system I/O error, with the file it happened on.
    Io {
        /// What the store was doing ("writing segment", "opening lock file", ...).
        context: String,
        /// The file or directory involved.
        path: PathBuf,
        /// The underlying error.
        source: io::Error,
    },
    /// A record or segment failed verification: checksum, framing or header.
    Corruption {
        /// The segment file.
        path: PathBuf,
        /// Byte offset of the bad record or header inside the segment.
        offset: u64,
        /// What is wrong.
        reason: String,
    },
    /// The store is open in another process (or another handle in this one).
    Locked(PathBuf),
    /// The store has been closed.
    Closed,
    /// A write or sync failed earlier; the page cache can no longer be
    /// trusted, so every further write is refused until the store is reopened.
    Poisoned(String),
    /// The disk is full (or a quota was hit) while allocating space.
    Full(String),
    /// An argument is out of range, malformed or refers to nothing.
    InvalidArgument(String),
    /// A handle does not name a live record.
    UnknownHandle(u64),
    /// The directory holds a store written by a newer format version.
    UnsupportedFormat {
        /// The segment file.
        path: PathBuf,
        /// The version found.
        found: u16,
        /// The newest version this build reads.
        supported: u16,
    },
    /// A compressed body could not be decoded.
    Codec(String),
    /// An encoded broker message or delivery record is malformed: truncated,
    /// of an unknown version or tag, a count past its end, a string that is
    /// not UTF-8.
    Malformed {
        /// What was being read: "message" or "delivery record".
        what: &'static str,
        /// Byte offset inside the record where reading stopped.
        offset: usize,
        /// What is wrong.
        reason: String,
    },
}

/// The engine's result type.
pub type Result<T> = std::result::Result<T, Error>;

/// The kind of an [`Error`], one per variant: an exhaustive enum that
/// bindings match without a wildcard arm, so that a new kind of error
/// cannot reach a user as some other kind unnoticed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// [`Error::Io`].
    Io,
    /// [`Error::Corruption`].
    Corruption,
    /// [`Error::Locked`].
    Locked,
    /// [`Error::Closed`].
    Closed,
    /// [`Error::Poisoned`].
    Poisoned,
    /// [`Error::Full`].
    Full,
    /// [`Error::InvalidArgument`].
    InvalidArgument,
    /// [`Error::UnknownHandle`].
    UnknownHandle,
    /// [`Error::UnsupportedFormat`].
    UnsupportedFormat,
    /// [`Error::Codec`].
    Codec,
    /// [`Error::Malformed`].
    Malformed,
}

impl Error {
    /// Wraps an I/O error with what was being done and on which path.
    pub fn io(context: impl Into<String>, path: impl Into<PathBuf>, source: io::Error) -> Self {
        if source.raw_os_error() == Some(libc::ENOSPC) || source.raw_os_error() == Some(libc::EDQUOT) {
            let path = path.into();
            return Error::Full(format!("{}: {}: {}", context.into(), path.display(), source));
        }
        Error::Io { context: context.into(), path: path.into(), source }
    }

    /// A corruption error at `offset` of `path`.
    pub fn corruption(path: impl Into<PathBuf>, offset: u64, reason: impl Into<String>) -> Self {
        Error::Corruption { path: path.into(), offset, reason: reason.into() }
    }

    /// An invalid-argument error.
    pub fn invalid(reason: impl Into<String>) -> Self {
        Error::InvalidArgument(reason.into())
    }

    /// Its kind.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::Io { .. } => ErrorKind::Io,
            Error::Corruption { .. } => ErrorKind::Corruption,
            Error::Locked(_) => ErrorKind::Locked,
            Error::Closed => ErrorKind::Closed,
            Error::Poisoned(_) => ErrorKind::Poisoned,
            Error::Full(_) => ErrorKind::Full,
            Error::InvalidArgument(_) => ErrorKind::InvalidArgument,
            Error::UnknownHandle(_) => ErrorKind::UnknownHandle,
            Error::UnsupportedFormat { .. } => ErrorKind::UnsupportedFormat,
            Error::Codec(_) => ErrorKind::Codec,
            Error::Malformed { .. } => ErrorKind::Malformed,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Io { context, path, source } => {
                write!(f, "{context}: {}: {source}", path.display())
            }
            Error::Corruption { path, offset, reason } => {
                write!(f, "corruption in {} at offset {offset}: {reason}", path.display())
            }
            Error::Locked(path) => {
                write!(f, "store {} is locked: another process (or another open handle) is using it", path.display())
            }
            Error::Closed => write!(f, "the store is closed"),
            Error::Poisoned(why) => {
                write!(f, "the store is poisoned after a failed write or sync ({why}); reopen it to recover")
            }
            Error::Full(why) => write!(f, "no space left: {why}"),
            Error::InvalidArgument(why) => write!(f, "invalid argument: {why}"),
            Error::UnknownHandle(handle) => write!(f, "unknown handle {handle}"),
            Error::UnsupportedFormat { path, found, supported } => write!(
                f,
                "{} was written by format version {found}; this build reads up to version {supported}",
                path.display()
            ),
            Error::Codec(why) => write!(f, "codec error: {why}"),
            Error::Malformed { what, offset, reason } => write!(f, "malformed {what} at byte {offset}: {reason}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}
