//! Every input from outside is read through here, and read bounded: a policy
//! file, kubectl JSON, a CA bundle, a file to compare with, a local bundle.
//! Nothing outside decides how much memory accelready takes or how long it
//! reads.
//!
//! - [`read_regular_to_string`]: small documents (policies, rendered files,
//!   CA bundles) — regular files only, so `/dev/zero`, a FIFO or a directory
//!   is refused before a byte is read (a FIFO without a writer cannot block
//!   the open either), and at most [`Limit::bytes`] are read.
//! - [`open`] / [`stdin`]: streams (kubectl JSON) — any readable file, a pipe
//!   (`<(kubectl ...)`) or stdin, wrapped in [`Bounded`], which fails the read
//!   that would pass the limit. Parse from it as you read, so that the first
//!   invalid byte ends the run, not the last.
//!
//! A leaf: it imports nothing from the crate.

use std::fmt;
use std::fs::{File, OpenOptions};
use std::io::{self, Read};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;
use std::str::FromStr;

/// How much of one input may be read, and what to tell the person who hits
/// it (e.g. "for a policy file", "set by --max-input-bytes").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limit {
    pub bytes: u64,
    pub note: &'static str,
}

impl Limit {
    pub const fn new(bytes: u64, note: &'static str) -> Limit {
        Limit { bytes, note }
    }
}

/// Why an input could not be read. The caller names the input; this says
/// what was wrong with it.
#[derive(Debug, thiserror::Error)]
pub enum InputError {
    #[error(transparent)]
    Io(io::Error),
    #[error("{kind}, not a regular file")]
    NotRegular { kind: &'static str },
    #[error(transparent)]
    TooLarge(#[from] TooLarge),
}

impl From<io::Error> for InputError {
    /// The limit, when a [`Bounded`] read hit it; else the I/O error.
    fn from(error: io::Error) -> InputError {
        match too_large(&error) {
            Some(limit) => InputError::TooLarge(limit),
            None => InputError::Io(error),
        }
    }
}

impl From<InputError> for io::Error {
    /// For callers whose errors carry an `io::Error`.
    fn from(error: InputError) -> io::Error {
        match error {
            InputError::Io(error) => error,
            // As a Bounded read says it, so that too_large() finds it.
            InputError::TooLarge(limit) => io::Error::other(limit),
            other => io::Error::other(other),
        }
    }
}

/// The input has more bytes than its [`Limit`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("larger than {}, the limit {}", describe(self.0.bytes), self.0.note)]
pub struct TooLarge(pub Limit);

/// `512MiB (536870912 bytes)`, or `1000 bytes`.
fn describe(bytes: u64) -> String {
    let size = ByteSize(bytes).to_string();
    if size == bytes.to_string() {
        format!("{bytes} bytes")
    } else {
        format!("{size} ({bytes} bytes)")
    }
}

/// The limit a [`Bounded`] read hit, if that is what `error` is.
pub fn too_large(error: &io::Error) -> Option<TooLarge> {
    error
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<TooLarge>())
        .copied()
}

/// A reader that yields at most `limit` bytes of `inner` and fails the read
/// after that if `inner` has more (an `io::Error` carrying [`TooLarge`]).
/// Input of exactly `limit` bytes is read whole.
#[derive(Debug)]
pub struct Bounded<R> {
    inner: R,
    limit: Limit,
    read: u64,
}

impl<R: Read> Bounded<R> {
    pub fn new(inner: R, limit: Limit) -> Bounded<R> {
        Bounded {
            inner,
            limit,
            read: 0,
        }
    }

    /// Bytes handed out so far.
    pub fn bytes_read(&self) -> u64 {
        self.read
    }
}

impl<R: Read> Read for Bounded<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        let room = self.limit.bytes - self.read;
        if room == 0 {
            // At the limit: one more byte means the input is too large.
            let mut probe = [0u8; 1];
            return match self.inner.read(&mut probe)? {
                0 => Ok(0),
                _ => Err(io::Error::other(TooLarge(self.limit))),
            };
        }
        let take = buf.len().min(usize::try_from(room).unwrap_or(usize::MAX));
        let count = self.inner.read(&mut buf[..take])?;
        self.read += count as u64;
        Ok(count)
    }
}

/// Opens `path` for a bounded stream read: a file, a pipe or a device.
pub fn open(path: &Path, limit: Limit) -> Result<Bounded<File>, InputError> {
    let file = File::open(path).map_err(InputError::Io)?;
    if let Ok(metadata) = file.metadata() {
        if metadata.is_file() && metadata.len() > limit.bytes {
            return Err(TooLarge(limit).into());
        }
    }
    Ok(Bounded::new(file, limit))
}

/// Standard input, bounded.
pub fn stdin(limit: Limit) -> Bounded<io::Stdin> {
    Bounded::new(io::stdin(), limit)
}

/// Opens `path` only if it is a regular file no larger than `limit` (see
/// [`open_regular_file`]).
pub fn open_regular(path: &Path, limit: Limit) -> Result<Bounded<File>, InputError> {
    let file = open_regular_file(path)?;
    if file.metadata().map_err(InputError::Io)?.len() > limit.bytes {
        return Err(TooLarge(limit).into());
    }
    Ok(Bounded::new(file, limit))
}

/// Opens `path` only if it is a regular file. The open does not block (a
/// FIFO without a writer is refused, not waited on), and the type is
/// checked on the opened file, not on the name.
pub fn open_regular_file(path: &Path) -> Result<File, InputError> {
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NONBLOCK)
        .open(path)
        .map_err(InputError::Io)?;
    let kind = file.metadata().map_err(InputError::Io)?.file_type();
    if kind.is_file() {
        // O_NONBLOCK means nothing to a regular file's reads.
        return Ok(file);
    }
    let kind = if kind.is_dir() {
        "a directory"
    } else if kind.is_fifo() {
        "a FIFO"
    } else if kind.is_char_device() {
        "a character device"
    } else if kind.is_block_device() {
        "a block device"
    } else if kind.is_socket() {
        "a socket"
    } else {
        "something else"
    };
    Err(InputError::NotRegular { kind })
}

/// A small regular file as text (see [`open_regular`]).
pub fn read_regular_to_string(path: &Path, limit: Limit) -> Result<String, InputError> {
    let mut reader = open_regular(path, limit)?;
    let mut text = String::new();
    reader.read_to_string(&mut text)?;
    Ok(text)
}

/// A small regular file as bytes (see [`open_regular`]).
pub fn read_regular(path: &Path, limit: Limit) -> Result<Vec<u8>, InputError> {
    let mut reader = open_regular(path, limit)?;
    let mut bytes = Vec::new();
    reader.read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// A byte count as people write it: `536870912`, `512MiB`, `64KiB`, `1GiB`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct ByteSize(pub u64);

const UNITS: [(&str, u64); 3] = [("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)];

impl fmt::Display for ByteSize {
    /// The largest unit that divides the count (`512MiB`, `1536KiB`), else
    /// the plain count (`1000`): what [`ByteSize::from_str`] reads back.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (unit, size) in UNITS {
            if self.0 >= size && self.0 % size == 0 {
                return write!(f, "{}{unit}", self.0 / size);
            }
        }
        write!(f, "{}", self.0)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("'{0}' is not a size: expected a whole number of bytes, optionally with KiB, MiB or GiB (e.g. 512MiB), at least 1")]
pub struct InvalidSize(String);

impl FromStr for ByteSize {
    type Err = InvalidSize;

    fn from_str(text: &str) -> Result<ByteSize, InvalidSize> {
        let invalid = || InvalidSize(text.to_owned());
        let trimmed = text.trim();
        let (digits, multiplier) = UNITS
            .iter()
            .find_map(|(unit, size)| trimmed.strip_suffix(unit).map(|d| (d.trim_end(), *size)))
            .unwrap_or((trimmed, 1));
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return Err(invalid());
        }
        let count: u64 = digits.parse().map_err(|_| invalid())?;
        match count.checked_mul(multiplier) {
            Some(bytes) if bytes > 0 => Ok(ByteSize(bytes)),
            _ => Err(invalid()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEN: Limit = Limit::new(10, "for the test");

    fn read_all(input: &[u8], limit: Limit) -> Result<Vec<u8>, InputError> {
        let mut out = Vec::new();
        Bounded::new(input, limit).read_to_end(&mut out)?;
        Ok(out)
    }

    #[test]
    fn input_up_to_the_limit_is_read_whole_and_one_byte_more_is_refused() {
        assert_eq!(read_all(b"", TEN).unwrap(), b"");
        assert_eq!(read_all(b"0123456789", TEN).unwrap(), b"0123456789");
        let error = read_all(b"0123456789x", TEN).unwrap_err();
        assert!(
            matches!(error, InputError::TooLarge(TooLarge(TEN))),
            "{error}"
        );
        assert_eq!(
            error.to_string(),
            "larger than 10 bytes, the limit for the test"
        );
    }

    #[test]
    fn a_never_ending_stream_stops_at_the_limit() {
        let mut reader = Bounded::new(io::repeat(b' '), Limit::new(1 << 20, "x"));
        let error = io::copy(&mut reader, &mut io::sink()).unwrap_err();
        assert_eq!(reader.bytes_read(), 1 << 20);
        assert!(too_large(&error).is_some(), "{error}");
    }

    #[test]
    fn only_regular_files_are_read_as_documents() {
        let dir = tempfile::tempdir().unwrap();
        let error = read_regular_to_string(dir.path(), TEN).unwrap_err();
        assert_eq!(error.to_string(), "a directory, not a regular file");
        let error = read_regular_to_string(Path::new("/dev/zero"), TEN).unwrap_err();
        assert_eq!(error.to_string(), "a character device, not a regular file");

        // A FIFO without a writer: refused at once, not waited on.
        let fifo = dir.path().join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
        let error = read_regular_to_string(&fifo, TEN).unwrap_err();
        assert_eq!(error.to_string(), "a FIFO, not a regular file");

        let big = dir.path().join("big");
        std::fs::write(&big, b"0123456789x").unwrap();
        let error = read_regular_to_string(&big, TEN).unwrap_err();
        assert!(matches!(error, InputError::TooLarge(_)), "{error}");
        let small = dir.path().join("small");
        std::fs::write(&small, b"0123456789").unwrap();
        assert_eq!(read_regular_to_string(&small, TEN).unwrap(), "0123456789");
        assert_eq!(read_regular(&small, TEN).unwrap(), b"0123456789");

        let missing = read_regular_to_string(&dir.path().join("absent"), TEN).unwrap_err();
        assert!(matches!(missing, InputError::Io(_)), "{missing}");
    }

    #[test]
    fn streams_may_be_devices_but_stay_bounded() {
        let mut reader = open(Path::new("/dev/zero"), TEN).unwrap();
        let error = InputError::from(reader.read_to_end(&mut Vec::new()).unwrap_err());
        assert!(matches!(error, InputError::TooLarge(_)), "{error}");
    }

    #[test]
    fn sizes_parse_and_print_in_binary_units() {
        for (text, bytes) in [
            ("1", 1),
            ("536870912", 536_870_912),
            ("512MiB", 512 << 20),
            ("64 KiB", 64 << 10),
            ("1GiB", 1 << 30),
        ] {
            assert_eq!(text.parse::<ByteSize>(), Ok(ByteSize(bytes)), "{text}");
        }
        for bad in [
            "",
            "0",
            "0MiB",
            "-1",
            "1.5GiB",
            "12MB",
            "MiB",
            "99999999999GiB",
        ] {
            assert!(bad.parse::<ByteSize>().is_err(), "{bad}");
        }
        assert_eq!(ByteSize(512 << 20).to_string(), "512MiB");
        assert_eq!(ByteSize(1536 << 10).to_string(), "1536KiB");
        assert_eq!(ByteSize(1000).to_string(), "1000");
        let limit = TooLarge(Limit::new(1 << 20, "for a policy file"));
        assert_eq!(
            limit.to_string(),
            "larger than 1MiB (1048576 bytes), the limit for a policy file"
        );
        let io = io::Error::from(InputError::TooLarge(limit));
        assert_eq!(too_large(&io), Some(limit));
    }
}
