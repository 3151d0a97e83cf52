//! Install: move a verified staging directory into `<install-dir>/<sha256>/`
//! by rename, switch `<install-dir>/current` by renaming a new symlink over the
//! old one, fsync along the way, keep the previous version, prune older ones.
//!
//! A manifest (`.accelready.json`) in each version directory lists every file
//! with its sha256 and every link with its target, so that a later run can
//! verify what is installed without the bundle. A `flock`ed `.lock` file keeps
//! two runs from interleaving; leftovers of a killed run (`.staging-*`,
//! `.download-*`, `.current.tmp`) are removed under that lock.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::time::Duration;

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use tracing::{debug, info, warn};

use super::files::{InstalledFile, InstalledLink, Unpacked};
use super::options::test_pause;
use crate::arch::Arch;
use crate::fsutil::sync_dir;

/// Name of the symlink to the version in use.
pub const CURRENT: &str = "current";
/// Name of the manifest inside each version directory.
pub const MANIFEST: &str = ".accelready.json";
const LOCK: &str = ".lock";
const CURRENT_TMP: &str = ".current.tmp";
const STAGING_PREFIX: &str = ".staging-";
const DOWNLOAD_PREFIX: &str = ".download-";
const TRASH_PREFIX: &str = ".trash-";
const MANIFEST_VERSION: u32 = 1;

/// What a version directory holds, written last when staging.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    pub version: u32,
    pub url: String,
    pub bundle_sha256: String,
    pub bundle_bytes: u64,
    pub arch: Arch,
    /// Whether `nv-hostengine` and `dcgmi` were asked for when unpacking
    /// (absent in manifests written before accelready ran the engine: false).
    /// A version unpacked without them is unpacked again when they are
    /// wanted; one unpacked with them whose bundle has none is not.
    #[serde(default)]
    pub with_hostengine: bool,
    pub files: Vec<InstalledFile>,
    pub links: Vec<InstalledLink>,
}

impl Manifest {
    pub fn new(
        url: &str,
        sha256: &str,
        arch: Arch,
        bytes: u64,
        with_hostengine: bool,
        unpacked: Unpacked,
    ) -> Self {
        Manifest {
            version: MANIFEST_VERSION,
            url: url.to_owned(),
            bundle_sha256: sha256.to_owned(),
            bundle_bytes: bytes,
            arch,
            with_hostengine,
            files: unpacked.files,
            links: unpacked.links,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum InstallError {
    #[error("cannot create the install directory '{path}'")]
    CreateDir {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cannot lock '{path}'")]
    Lock {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cannot write the manifest '{path}'")]
    Manifest {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cannot move '{from}' to '{to}'")]
    Rename {
        from: PathBuf,
        to: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cannot update '{path}'")]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

/// Why an installed version does not verify (then it is reinstalled).
#[derive(Debug, thiserror::Error)]
pub enum VerifyError {
    #[error("'{0}' is not installed")]
    Missing(PathBuf),
    #[error("cannot read the manifest '{path}': {reason}")]
    Manifest { path: PathBuf, reason: String },
    #[error("manifest '{path}' is for {found}, not {expected}")]
    Mismatch {
        path: PathBuf,
        expected: String,
        found: String,
    },
    #[error("installed file '{path}' does not match its manifest: {reason}")]
    File { path: PathBuf, reason: String },
    #[error("'{0}' was installed without nv-hostengine and dcgmi, which are wanted now")]
    WithoutHostengine(PathBuf),
}

/// Paths inside one install directory (paths on this machine).
#[derive(Debug, Clone)]
pub struct Layout {
    dir: PathBuf,
}

impl Layout {
    pub fn new(dir: PathBuf) -> Self {
        Layout { dir }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn create(&self) -> Result<(), InstallError> {
        fs::create_dir_all(&self.dir).map_err(|source| InstallError::CreateDir {
            path: self.dir.clone(),
            source,
        })
    }

    pub fn version_dir(&self, sha256: &str) -> PathBuf {
        self.dir.join(sha256)
    }

    pub fn current(&self) -> PathBuf {
        self.dir.join(CURRENT)
    }

    pub fn staging_dir(&self, sha256: &str) -> PathBuf {
        self.dir.join(format!("{STAGING_PREFIX}{sha256}"))
    }

    pub fn download_path(&self, sha256: &str) -> PathBuf {
        self.dir.join(format!("{DOWNLOAD_PREFIX}{sha256}"))
    }
}

fn io_error(path: &Path) -> impl FnOnce(io::Error) -> InstallError + '_ {
    move |source| InstallError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Takes the install directory's exclusive lock, waiting for another run to
/// finish (the caller's deadline bounds the wait).
pub async fn lock(layout: &Layout) -> Result<Flock<File>, InstallError> {
    let path = layout.dir.join(LOCK);
    let lock_error = |source| InstallError::Lock {
        path: path.clone(),
        source,
    };
    let mut file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(lock_error)?;
    let mut waiting = false;
    loop {
        match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
            Ok(lock) => return Ok(lock),
            Err((returned, Errno::EWOULDBLOCK)) => {
                if !waiting {
                    info!(lock = %path.display(), "another provision run holds the lock; waiting");
                    waiting = true;
                }
                file = returned;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err((_, errno)) => return Err(lock_error(io::Error::from(errno))),
        }
    }
}

/// Removes what a killed run left behind. Call with the lock held.
pub fn clean_leftovers(layout: &Layout) -> Result<(), InstallError> {
    let entries = fs::read_dir(&layout.dir).map_err(io_error(&layout.dir))?;
    for entry in entries {
        let entry = entry.map_err(io_error(&layout.dir))?;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        let leftover = [STAGING_PREFIX, DOWNLOAD_PREFIX, TRASH_PREFIX]
            .iter()
            .any(|prefix| name.starts_with(prefix))
            || name == CURRENT_TMP;
        if leftover {
            let path = entry.path();
            info!(path = %path.display(), "removing leftover of an interrupted run");
            remove_any(&path).map_err(io_error(&path))?;
        }
    }
    Ok(())
}

fn remove_any(path: &Path) -> io::Result<()> {
    if fs::symlink_metadata(path)?.is_dir() {
        fs::remove_dir_all(path)
    } else {
        fs::remove_file(path)
    }
}

/// Writes the manifest into the staging directory and fsyncs it.
pub fn write_manifest(staging: &Path, manifest: &Manifest) -> Result<(), InstallError> {
    let path = staging.join(MANIFEST);
    let manifest_error = |source| InstallError::Manifest {
        path: path.clone(),
        source,
    };
    let json = serde_json::to_vec_pretty(manifest).map_err(|e| manifest_error(e.into()))?;
    let mut file = File::create(&path).map_err(manifest_error)?;
    file.write_all(&json)
        .and_then(|()| file.sync_all())
        .map_err(manifest_error)?;
    sync_dir(staging).map_err(manifest_error)
}

/// Verifies `<install-dir>/<sha256>/` against its manifest: every file's
/// digest, every link's target.
pub fn verify_installed(
    layout: &Layout,
    sha256: &str,
    arch: Arch,
) -> Result<Manifest, VerifyError> {
    let dir = layout.version_dir(sha256);
    let path = dir.join(MANIFEST);
    if !dir.is_dir() {
        return Err(VerifyError::Missing(dir));
    }
    let text = fs::read(&path).map_err(|e| VerifyError::Manifest {
        path: path.clone(),
        reason: e.to_string(),
    })?;
    let manifest: Manifest = serde_json::from_slice(&text).map_err(|e| VerifyError::Manifest {
        path: path.clone(),
        reason: e.to_string(),
    })?;
    if manifest.bundle_sha256 != sha256 || manifest.arch != arch {
        return Err(VerifyError::Mismatch {
            path,
            expected: format!("{sha256} ({arch})"),
            found: format!("{} ({})", manifest.bundle_sha256, manifest.arch),
        });
    }
    for file in &manifest.files {
        let file_path = dir.join(&file.path);
        let actual = sha256_file(&file_path).map_err(|e| VerifyError::File {
            path: file_path.clone(),
            reason: e.to_string(),
        })?;
        if actual != file.sha256 {
            return Err(VerifyError::File {
                path: file_path,
                reason: format!("sha256 is {actual}, expected {}", file.sha256),
            });
        }
    }
    for link in &manifest.links {
        let link_path = dir.join(&link.path);
        match fs::read_link(&link_path) {
            Ok(target) if target == Path::new(&link.target) => {}
            Ok(target) => {
                return Err(VerifyError::File {
                    path: link_path,
                    reason: format!(
                        "points to '{}', expected '{}'",
                        target.display(),
                        link.target
                    ),
                })
            }
            Err(e) => {
                return Err(VerifyError::File {
                    path: link_path,
                    reason: e.to_string(),
                })
            }
        }
    }
    Ok(manifest)
}

fn sha256_file(path: &Path) -> io::Result<String> {
    let mut file = File::open(path)?;
    let mut hasher = Sha256::new();
    io::copy(&mut file, &mut hasher)?;
    Ok(hex::encode(hasher.finalize()))
}

/// Renames the staging directory to `<install-dir>/<sha256>/`, replacing a
/// version directory of the same digest that failed verification.
pub fn commit(layout: &Layout, sha256: &str) -> Result<(), InstallError> {
    let staging = layout.staging_dir(sha256);
    let target = layout.version_dir(sha256);
    if fs::symlink_metadata(&target).is_ok() {
        let trash = layout
            .dir
            .join(format!("{TRASH_PREFIX}{sha256}-{}", std::process::id()));
        warn!(dir = %target.display(), "replacing an installed version that failed verification");
        rename(&target, &trash)?;
        remove_any(&trash).map_err(io_error(&trash))?;
    }
    rename(&staging, &target)?;
    sync_dir(&layout.dir).map_err(io_error(&layout.dir))?;
    test_pause("committed");
    Ok(())
}

fn rename(from: &Path, to: &Path) -> Result<(), InstallError> {
    fs::rename(from, to).map_err(|source| InstallError::Rename {
        from: from.to_path_buf(),
        to: to.to_path_buf(),
        source,
    })
}

/// What [`switch_current`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Switch {
    /// `current` already pointed to this version.
    Unchanged,
    /// `current` now points to this version; it pointed to `previous` before.
    Switched { previous: Option<String> },
}

/// Points `current` at `sha256` (atomically: a new link renamed over the old
/// one).
pub fn switch_current(layout: &Layout, sha256: &str) -> Result<Switch, InstallError> {
    let current = layout.current();
    let previous = fs::read_link(&current)
        .ok()
        .map(|target| target.to_string_lossy().into_owned());
    if previous.as_deref() == Some(sha256) {
        debug!(current = %current.display(), "current already points to this version");
        return Ok(Switch::Unchanged);
    }
    let tmp = layout.dir.join(CURRENT_TMP);
    let _ = fs::remove_file(&tmp);
    symlink(sha256, &tmp).map_err(io_error(&tmp))?;
    test_pause("link-created");
    rename(&tmp, &current)?;
    sync_dir(&layout.dir).map_err(io_error(&layout.dir))?;
    info!(current = %current.display(), to = sha256, previous = previous.as_deref().unwrap_or("-"), "switched current version");
    test_pause("switched");
    Ok(Switch::Switched { previous })
}

/// Removes every version directory except `keep`, `previous` and whatever
/// `current` points to. Called after a switch: the version that was in use
/// stays until the next switch, older ones go.
pub fn prune(layout: &Layout, keep: &str, previous: Option<&str>) -> Result<(), InstallError> {
    let current_target = fs::read_link(layout.current())
        .ok()
        .map(|t| t.to_string_lossy().into_owned());
    let entries = fs::read_dir(&layout.dir).map_err(io_error(&layout.dir))?;
    for entry in entries {
        let entry = entry.map_err(io_error(&layout.dir))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let is_version = name.len() == 64 && name.bytes().all(|b| b.is_ascii_hexdigit());
        let kept = name == keep
            || Some(name.as_str()) == previous
            || Some(&name) == current_target.as_ref();
        if is_version && !kept {
            let path = entry.path();
            info!(dir = %path.display(), "pruning an older version");
            remove_any(&path).map_err(io_error(&path))?;
        }
    }
    Ok(())
}
