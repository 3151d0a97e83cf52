//! The files a bundle becomes: what `unpack` (or the copy from the image)
//! leaves in staging and what `install` records in the manifest, and how such
//! a file is written. A leaf module that they all import, so that none
//! imports another.

use std::fs::OpenOptions;
use std::io::{self, Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::arch::Arch;

/// An installed regular file, relative to the version directory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InstalledFile {
    /// `lib/libdcgm.so.4.6.1` or `bin/nv-hostengine`.
    pub path: String,
    pub soname: Option<String>,
    pub arch: Arch,
    pub size: u64,
    pub sha256: String,
}

/// An installed symlink, relative to the version directory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InstalledLink {
    /// `lib/libdcgm.so.4`
    pub path: String,
    /// As written in the link: `libdcgm.so.4.6.1`.
    pub target: String,
}

/// What landed in the staging directory.
#[derive(Debug, Clone, Default)]
pub struct Unpacked {
    pub files: Vec<InstalledFile>,
    pub links: Vec<InstalledLink>,
}

/// Mode of an installed library (`lib/`); setuid/setgid never survive.
pub const LIB_MODE: u32 = 0o644;
/// Mode of an installed executable (`bin/`).
pub const BIN_MODE: u32 = 0o755;

/// Writes a new file (never through an existing one), hashing as it goes.
pub fn write_new(path: &Path, mode: u32, content: &mut impl Read) -> io::Result<(String, u64)> {
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(path)?;
    let mut hashing = HashingWriter {
        inner: &mut file,
        hasher: Sha256::new(),
    };
    let size = io::copy(content, &mut hashing)?;
    let sha256 = hex::encode(hashing.hasher.finalize());
    file.sync_all()?;
    Ok((sha256, size))
}

/// A writer that hashes what passes through it.
pub struct HashingWriter<W> {
    pub inner: W,
    pub hasher: Sha256,
}

impl<W: Write> Write for HashingWriter<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.hasher.update(&buf[..n]);
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// A reader that fails once `cancel` is set, so that blocking work reading
/// through it stops at its next read.
pub struct Interruptible<'a, R> {
    pub inner: R,
    pub cancel: &'a AtomicBool,
}

impl<R: Read> Read for Interruptible<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.cancel.load(Ordering::Relaxed) {
            // Not ErrorKind::Interrupted: readers retry on that.
            return Err(io::Error::other("cancelled: the run's deadline passed"));
        }
        self.inner.read(buf)
    }
}
