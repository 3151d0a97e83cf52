//! The files a bundle becomes: what `unpack` leaves in staging and what
//! `install` records in the manifest. A leaf module that both import, so that
//! neither imports the other.

use serde::{Deserialize, Serialize};

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
