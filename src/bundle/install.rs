//! Install: move a verified staging directory into `<install-dir>/<sha256>/`
//! by rename, switch `<install-dir>/current` by renaming a new symlink over the
//! old one, fsync along the way, keep the previous version, prune older ones.
//!
//! A manifest (`.accelready.json`) in each version directory lists every file
//! with its sha256 and every link with its target, so that a later run can
//! verify what is installed without the bundle. A `flock`ed `.lock` file keeps
//! two runs from interleaving; leftovers of a killed run (`.staging-*`,
//! `.download-*`, `.current.tmp`) are removed under that lock.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
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
use crate::input::{self, Limit};

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

/// Why a version directory does not verify: an installed one is then
/// reinstalled; the image's one is refused.
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
    #[error("file '{path}' does not match its manifest: {reason}")]
    File { path: PathBuf, reason: String },
    #[error("'{0}' was installed without nv-hostengine and dcgmi, which are wanted now")]
    WithoutHostengine(PathBuf),
    #[error("'{path}' is not in the manifest: a version directory holds exactly what its manifest lists")]
    Extra { path: PathBuf },
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

/// The install directory's exclusive lock, and the temporary paths this run
/// may create under it. However the run ends — success, an error, or its
/// future dropped by a deadline — dropping this removes those paths first
/// and releases the lock after, so no other run can own them by then. (A
/// killed run's leftovers are removed by [`clean_leftovers`].)
#[derive(Debug)]
pub struct Lock {
    temporaries: Vec<PathBuf>,
    work: Work,
    _flock: Flock<File>,
}

impl Lock {
    /// Removes `path` (a file or a directory tree) when the lock is released.
    pub fn remove_on_release(&mut self, path: PathBuf) {
        self.temporaries.push(path);
    }

    /// The blocking work done under this lock: cancelled, and waited for,
    /// when the lock is released.
    pub fn work(&self) -> Work {
        self.work.clone()
    }
}

impl Drop for Lock {
    fn drop(&mut self) {
        // A deadline drops the future, not a thread still unpacking into the
        // staging directory: stop it and let it finish before removing what
        // it wrote and letting another run in.
        if !self.work.cancel_and_wait(WORK_STOP_WAIT) {
            warn!(
                wait_ms = WORK_STOP_WAIT.as_millis() as u64,
                "blocking work under the install lock did not stop in time; removing its files anyway"
            );
        }
        for path in &self.temporaries {
            match remove_any(path) {
                Ok(()) => debug!(path = %path.display(), "removed a temporary file"),
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => {
                    warn!(path = %path.display(), error = %e, "cannot remove a temporary file")
                }
            }
        }
    }
}

/// How long releasing the lock waits for cancelled blocking work (it checks
/// for cancellation at every read of at most 1 MiB: milliseconds).
const WORK_STOP_WAIT: Duration = Duration::from_secs(5);

/// Blocking work (unpacking, copying from the image) running under a
/// [`Lock`], on a thread that dropping the future does not stop.
#[derive(Debug, Clone, Default)]
pub struct Work(Arc<WorkState>);

#[derive(Debug, Default)]
struct WorkState {
    cancel: AtomicBool,
    running: Mutex<u32>,
    idle: Condvar,
}

impl Work {
    /// Set once the lock is released: the work should stop.
    pub fn cancel_flag(&self) -> &AtomicBool {
        &self.0.cancel
    }

    /// Counts one piece of work as running until the token is dropped (move
    /// the token into the blocking closure).
    pub fn start(&self) -> WorkToken {
        *self.0.running.lock().unwrap_or_else(|e| e.into_inner()) += 1;
        WorkToken(self.clone())
    }

    /// Cancels the work and waits up to `bound` for it to end; false if some
    /// is still running.
    fn cancel_and_wait(&self, bound: Duration) -> bool {
        self.0.cancel.store(true, Ordering::SeqCst);
        let running = self.0.running.lock().unwrap_or_else(|e| e.into_inner());
        let (running, _) = self
            .0
            .idle
            .wait_timeout_while(running, bound, |running| *running > 0)
            .unwrap_or_else(|e| e.into_inner());
        *running == 0
    }
}

/// One piece of [`Work`], running while this lives.
#[derive(Debug)]
pub struct WorkToken(Work);

impl Drop for WorkToken {
    fn drop(&mut self) {
        let state = &self.0 .0;
        let mut running = state.running.lock().unwrap_or_else(|e| e.into_inner());
        *running = running.saturating_sub(1);
        state.idle.notify_all();
    }
}

/// Takes the install directory's exclusive lock, waiting for another run to
/// finish (the caller's deadline bounds the wait).
pub async fn lock(layout: &Layout) -> Result<Lock, InstallError> {
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
            Ok(flock) => {
                return Ok(Lock {
                    temporaries: Vec::new(),
                    work: Work::default(),
                    _flock: flock,
                })
            }
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

/// Verifies `<install-dir>/<sha256>/` against its manifest (see
/// [`verify_tree`]).
pub fn verify_installed(
    layout: &Layout,
    sha256: &str,
    arch: Arch,
) -> Result<Manifest, VerifyError> {
    verify_tree(&layout.version_dir(sha256), sha256, arch)
}

/// Verifies a version directory — installed, or laid out in the image —
/// against its manifest: the manifest is for bundle `sha256` and `arch`; the
/// directory holds exactly the files and links it lists (see
/// [`check_layout`]); and every file has its sha256.
pub fn verify_tree(dir: &Path, sha256: &str, arch: Arch) -> Result<Manifest, VerifyError> {
    let manifest = read_manifest(dir, sha256, arch)?;
    check_layout(dir, &manifest)?;
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
    Ok(manifest)
}

/// A manifest lists a bundle's few dozen files: far below this.
const MAX_MANIFEST_BYTES: Limit = Limit::new(1 << 20, "for a bundle manifest");

/// Reads `<dir>/.accelready.json` and checks that it is for bundle `sha256`
/// built for `arch`, and that every path it names stays in `lib/` or `bin/`.
pub fn read_manifest(dir: &Path, sha256: &str, arch: Arch) -> Result<Manifest, VerifyError> {
    let path = dir.join(MANIFEST);
    if !dir.is_dir() {
        return Err(VerifyError::Missing(dir.to_path_buf()));
    }
    let manifest_error = |reason: String| VerifyError::Manifest {
        path: path.clone(),
        reason,
    };
    // Bounded, and only a regular file: a FIFO or a link to /dev/zero put
    // there must not hang or grow boot (ARCHITECTURE.md: boot never hangs).
    let text = input::read_regular_to_string(&path, MAX_MANIFEST_BYTES)
        .map_err(|e| manifest_error(e.to_string()))?;
    let manifest: Manifest =
        serde_json::from_str(&text).map_err(|e| manifest_error(e.to_string()))?;
    if manifest.bundle_sha256 != sha256 || manifest.arch != arch {
        return Err(VerifyError::Mismatch {
            path,
            expected: format!("bundle sha256 {sha256} ({arch})"),
            found: format!(
                "bundle sha256 {} ({})",
                manifest.bundle_sha256, manifest.arch
            ),
        });
    }
    let names = manifest
        .files
        .iter()
        .map(|file| &file.path)
        .chain(manifest.links.iter().map(|link| &link.path));
    for name in names {
        if split_entry(name).is_none() {
            return Err(manifest_error(format!(
                "'{name}' is not lib/<name> or bin/<name>"
            )));
        }
    }
    Ok(manifest)
}

/// `lib/<name>` or `bin/<name>` -> (`lib`, `<name>`), where `<name>` is a plain
/// file name; anything else (other directories, `..`, deeper paths) -> `None`.
fn split_entry(path: &str) -> Option<(&str, &str)> {
    let (dir, name) = path.split_once('/')?;
    let plain = !name.is_empty() && name != "." && name != ".." && !name.contains(['/', '\0']);
    (matches!(dir, "lib" | "bin") && plain).then_some((dir, name))
}

/// Checks the shape of a version directory against its manifest, without
/// reading file contents: every listed file is a regular file, every listed
/// link a symlink whose target is the listed one, a plain name in its own
/// directory that names a listed file or link (so no link leads out of the
/// tree, and none dangles); and nothing else is there besides `lib/`, `bin/`
/// and the manifest.
pub fn check_layout(dir: &Path, manifest: &Manifest) -> Result<(), VerifyError> {
    let file_error = |path: &Path, reason: String| VerifyError::File {
        path: path.to_path_buf(),
        reason,
    };
    let listed: BTreeSet<&str> = manifest
        .files
        .iter()
        .map(|file| file.path.as_str())
        .chain(manifest.links.iter().map(|link| link.path.as_str()))
        .collect();
    for file in &manifest.files {
        let path = dir.join(&file.path);
        match fs::symlink_metadata(&path) {
            // The size first: a file grown since it was installed is not
            // hashed in full before being refused.
            Ok(meta) if meta.file_type().is_file() && meta.len() != file.size => {
                return Err(file_error(
                    &path,
                    format!("is {} bytes, expected {}", meta.len(), file.size),
                ))
            }
            Ok(meta) if meta.file_type().is_file() => {}
            Ok(_) => return Err(file_error(&path, "is not a regular file".to_owned())),
            Err(e) => return Err(file_error(&path, e.to_string())),
        }
    }
    let links: BTreeMap<&str, &str> = manifest
        .links
        .iter()
        .map(|link| (link.path.as_str(), link.target.as_str()))
        .collect();
    for link in &manifest.links {
        let path = dir.join(&link.path);
        let (subdir, _) = split_entry(&link.path).unwrap_or(("lib", ""));
        let target_entry = format!("{subdir}/{}", link.target);
        if split_entry(&target_entry).is_none() || !listed.contains(target_entry.as_str()) {
            return Err(file_error(
                &path,
                format!(
                    "its manifest says it points to '{}', which is not a file or link of this version in {subdir}/ (a link must never lead out of the tree)",
                    link.target
                ),
            ));
        }
        // Followed through the manifest's links, it must end at a listed
        // file: a link to itself, or a cycle, dangles on disk.
        let mut at = target_entry.clone();
        let mut steps = 0;
        while let Some(next) = links.get(at.as_str()) {
            steps += 1;
            if steps > links.len() {
                return Err(file_error(
                    &path,
                    "its manifest makes it part of a cycle of links: it never reaches a file"
                        .to_owned(),
                ));
            }
            at = format!("{subdir}/{next}");
        }
        match fs::read_link(&path) {
            Ok(target) if target == Path::new(&link.target) => {}
            Ok(target) => {
                return Err(file_error(
                    &path,
                    format!(
                        "points to '{}', expected '{}'",
                        target.display(),
                        link.target
                    ),
                ))
            }
            Err(e) => return Err(file_error(&path, e.to_string())),
        }
    }
    let entries = fs::read_dir(dir).map_err(|e| file_error(dir, e.to_string()))?;
    for entry in entries {
        let entry = entry.map_err(|e| file_error(dir, e.to_string()))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let path = entry.path();
        let is_dir = entry
            .file_type()
            .map_err(|e| file_error(&path, e.to_string()))?
            .is_dir();
        match name.as_str() {
            MANIFEST if !is_dir => {}
            "lib" | "bin" if is_dir => {
                let children = fs::read_dir(&path).map_err(|e| file_error(&path, e.to_string()))?;
                for child in children {
                    let child = child.map_err(|e| file_error(&path, e.to_string()))?;
                    let relative = format!("{name}/{}", child.file_name().to_string_lossy());
                    if !listed.contains(relative.as_str()) {
                        return Err(VerifyError::Extra { path: child.path() });
                    }
                }
            }
            _ => return Err(VerifyError::Extra { path }),
        }
    }
    Ok(())
}

/// The sha256 of a file, hex.
pub fn sha256_file(path: &Path) -> io::Result<String> {
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

/// Whether a directory entry's name is a version directory's: a sha256.
pub fn is_version_name(name: &str) -> bool {
    name.len() == 64 && name.bytes().all(|b| b.is_ascii_hexdigit())
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
        let is_version = is_version_name(&name);
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

/// A version directory made by hand, for the verification tests here and in
/// [`super::image`].
#[cfg(test)]
pub(crate) mod test_tree {
    use std::fs;
    use std::os::unix::fs::symlink;
    use std::path::Path;

    use crate::arch::Arch;
    use crate::bundle::files::{InstalledFile, InstalledLink, Unpacked};
    use crate::bundle::install::{sha256_file, write_manifest, Manifest, MANIFEST};

    pub const BUNDLE: &str = "3f5a0f8e1c2d4b6a79808f1e2d3c4b5a69788796a5b4c3d2e1f0a9b8c7d6e5f4";

    /// `<dir>/<BUNDLE>/`: libdcgm with its soname links and nv-hostengine,
    /// with a manifest that lists them. Returns the version directory.
    pub fn build(dir: &Path) -> std::path::PathBuf {
        let version = dir.join(BUNDLE);
        fs::create_dir_all(version.join("lib")).unwrap();
        fs::create_dir_all(version.join("bin")).unwrap();
        let mut unpacked = Unpacked::default();
        for (path, soname, bytes) in [
            (
                "lib/libdcgm.so.4.6.1",
                Some("libdcgm.so.4"),
                &b"libdcgm"[..],
            ),
            ("bin/nv-hostengine", None, &b"engine"[..]),
        ] {
            fs::write(version.join(path), bytes).unwrap();
            unpacked.files.push(InstalledFile {
                path: path.to_owned(),
                soname: soname.map(str::to_owned),
                arch: Arch::Aarch64,
                size: bytes.len() as u64,
                sha256: sha256_file(&version.join(path)).unwrap(),
            });
        }
        for (path, target) in [
            ("lib/libdcgm.so.4", "libdcgm.so.4.6.1"),
            ("lib/libdcgm.so", "libdcgm.so.4"),
        ] {
            symlink(target, version.join(path)).unwrap();
            unpacked.links.push(InstalledLink {
                path: path.to_owned(),
                target: target.to_owned(),
            });
        }
        let manifest = Manifest::new(
            "file:///bundle/dcgm.deb",
            BUNDLE,
            Arch::Aarch64,
            1234,
            true,
            unpacked,
        );
        write_manifest(&version, &manifest).unwrap();
        version
    }

    /// Rewrites the manifest of `version` after `edit`.
    pub fn edit_manifest(version: &Path, edit: impl FnOnce(&mut Manifest)) {
        let path = version.join(MANIFEST);
        let mut manifest: Manifest = serde_json::from_slice(&fs::read(&path).unwrap()).unwrap();
        edit(&mut manifest);
        fs::remove_file(&path).unwrap();
        write_manifest(version, &manifest).unwrap();
    }
}

#[cfg(test)]
mod tests {
    use std::fs;
    use std::os::unix::fs::symlink;

    use super::*;
    use test_tree::{build, edit_manifest, BUNDLE};

    fn verify(version: &Path) -> Result<Manifest, VerifyError> {
        verify_tree(version, BUNDLE, Arch::Aarch64)
    }

    fn error(version: &Path) -> String {
        verify(version).unwrap_err().to_string()
    }

    #[test]
    fn a_complete_tree_verifies() {
        let dir = tempfile::tempdir().unwrap();
        let version = build(dir.path());
        let manifest = verify(&version).unwrap();
        assert_eq!(manifest.files.len(), 2);
        assert_eq!(manifest.links.len(), 2);
    }

    #[test]
    fn a_tampered_file_does_not_verify() {
        let dir = tempfile::tempdir().unwrap();
        let version = build(dir.path());
        fs::write(version.join("lib/libdcgm.so.4.6.1"), b"libdcgX").unwrap();
        let message = error(&version);
        assert!(
            message.contains("libdcgm.so.4.6.1") && message.contains("sha256 is"),
            "{message}"
        );
    }

    #[test]
    fn releasing_the_lock_stops_blocking_work_and_waits_for_it() {
        use std::io::Read;
        use std::sync::atomic::{AtomicBool, Ordering};
        use std::sync::Arc;

        use crate::bundle::files::Interruptible;

        let dir = tempfile::tempdir().unwrap();
        let layout = Layout::new(dir.path().join("dcgm"));
        layout.create().unwrap();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let mut held = runtime.block_on(lock(&layout)).unwrap();
        let staging = layout.staging_dir(BUNDLE);
        fs::create_dir(&staging).unwrap();
        held.remove_on_release(staging.clone());

        // A writer on another thread, as spawn_blocking runs one: it reads
        // an endless stream into the staging directory until cancelled.
        let work = held.work();
        let token = work.start();
        let done = Arc::new(AtomicBool::new(false));
        let (started, wait_started) = std::sync::mpsc::channel();
        let writer = {
            let (done, staging) = (Arc::clone(&done), staging.clone());
            std::thread::spawn(move || {
                let mut endless = Interruptible {
                    inner: io::repeat(7),
                    cancel: work.cancel_flag(),
                };
                let mut buffer = [0u8; 4096];
                let mut out = File::create(staging.join("partial")).unwrap();
                started.send(()).unwrap();
                let error = loop {
                    match endless.read(&mut buffer) {
                        Ok(n) => out.write_all(&buffer[..n]).unwrap(),
                        Err(e) => break e.to_string(),
                    }
                };
                done.store(true, Ordering::SeqCst);
                drop(token);
                error
            })
        };
        wait_started.recv().unwrap();

        drop(held);

        // The release waited for the writer to stop before removing its files.
        assert!(done.load(Ordering::SeqCst));
        assert!(!staging.exists());
        let error = writer.join().unwrap();
        assert!(error.contains("cancelled"), "{error}");
    }

    #[test]
    fn a_link_to_itself_or_a_cycle_does_not_verify() {
        for (links, name) in [
            (&[("lib/a", "a")][..], "lib/a"),
            (&[("lib/b", "c"), ("lib/c", "b")][..], "lib/b"),
        ] {
            let other = tempfile::tempdir().unwrap();
            let version = build(other.path());
            for (path, target) in links {
                symlink(target, version.join(path)).unwrap();
            }
            edit_manifest(&version, |manifest| {
                for (path, target) in links {
                    manifest.links.push(InstalledLink {
                        path: (*path).to_owned(),
                        target: (*target).to_owned(),
                    });
                }
            });
            let message = error(&version);
            assert!(
                message.contains("cycle of links") && message.contains(name),
                "{message}"
            );
        }
    }

    #[test]
    fn a_file_of_another_size_is_refused_before_it_is_hashed() {
        let dir = tempfile::tempdir().unwrap();
        let version = build(dir.path());
        fs::write(version.join("bin/nv-hostengine"), b"engine, grown").unwrap();
        let message = error(&version);
        assert!(
            message.contains("nv-hostengine") && message.contains("is 13 bytes, expected 6"),
            "{message}"
        );
    }

    #[test]
    fn a_manifest_that_is_not_a_small_regular_file_is_refused_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let version = build(dir.path());
        let manifest = version.join(MANIFEST);
        fs::remove_file(&manifest).unwrap();
        // A FIFO without a writer: refused, not waited on.
        nix::unistd::mkfifo(&manifest, nix::sys::stat::Mode::S_IRWXU).unwrap();
        let message = error(&version);
        assert!(message.contains("a FIFO, not a regular file"), "{message}");
        // A link to an endless device: refused by type, nothing read.
        fs::remove_file(&manifest).unwrap();
        symlink("/dev/zero", &manifest).unwrap();
        let message = error(&version);
        assert!(message.contains("a character device"), "{message}");
        // A regular file past the cap.
        fs::remove_file(&manifest).unwrap();
        fs::write(&manifest, vec![b' '; (1 << 20) + 1]).unwrap();
        let message = error(&version);
        assert!(
            message.contains("the limit for a bundle manifest"),
            "{message}"
        );
    }

    #[test]
    fn a_missing_file_or_link_does_not_verify() {
        let dir = tempfile::tempdir().unwrap();
        let version = build(dir.path());
        fs::remove_file(version.join("bin/nv-hostengine")).unwrap();
        assert!(error(&version).contains("bin/nv-hostengine"));

        let dir = tempfile::tempdir().unwrap();
        let version = build(dir.path());
        fs::remove_file(version.join("lib/libdcgm.so")).unwrap();
        assert!(error(&version).contains("lib/libdcgm.so'"));

        let dir = tempfile::tempdir().unwrap();
        let version = build(dir.path());
        fs::remove_file(version.join(MANIFEST)).unwrap();
        assert!(matches!(
            verify(&version),
            Err(VerifyError::Manifest { .. })
        ));
    }

    #[test]
    fn an_extra_file_does_not_verify() {
        for extra in ["lib/libevil.so", "bin/sh", "preload.so"] {
            let dir = tempfile::tempdir().unwrap();
            let version = build(dir.path());
            fs::write(version.join(extra), b"x").unwrap();
            match verify(&version) {
                Err(VerifyError::Extra { path }) => assert!(path.ends_with(extra), "{path:?}"),
                other => panic!("{extra}: {other:?}"),
            }
        }
        let dir = tempfile::tempdir().unwrap();
        let version = build(dir.path());
        fs::create_dir(version.join("lib/sub")).unwrap();
        assert!(matches!(verify(&version), Err(VerifyError::Extra { .. })));
    }

    #[test]
    fn a_manifest_for_another_bundle_names_both_digests() {
        let dir = tempfile::tempdir().unwrap();
        let version = build(dir.path());
        let other = "0".repeat(64);
        edit_manifest(&version, |m| m.bundle_sha256 = other.clone());
        let message = error(&version);
        assert!(
            message.contains(&other) && message.contains(BUNDLE),
            "{message}"
        );
        let dir = tempfile::tempdir().unwrap();
        let version = build(dir.path());
        let message = verify_tree(&version, BUNDLE, Arch::X86_64)
            .unwrap_err()
            .to_string();
        assert!(
            message.contains("aarch64") && message.contains("x86_64"),
            "{message}"
        );
    }

    #[test]
    fn links_never_lead_out_of_the_tree() {
        // On disk only: the manifest still says libdcgm.so.4.6.1.
        let dir = tempfile::tempdir().unwrap();
        let version = build(dir.path());
        fs::remove_file(version.join("lib/libdcgm.so.4")).unwrap();
        symlink("../../../../etc/shadow", version.join("lib/libdcgm.so.4")).unwrap();
        assert!(error(&version).contains("points to '../../../../etc/shadow'"));

        // Manifest and disk agree on a target outside the tree.
        for target in [
            "../../../../etc/shadow",
            "/etc/shadow",
            "../bin/nv-hostengine",
            "libmissing.so",
        ] {
            let dir = tempfile::tempdir().unwrap();
            let version = build(dir.path());
            fs::remove_file(version.join("lib/libdcgm.so.4")).unwrap();
            symlink(target, version.join("lib/libdcgm.so.4")).unwrap();
            edit_manifest(&version, |m| m.links[0].target = target.to_owned());
            let message = error(&version);
            assert!(
                message.contains("never lead out of the tree"),
                "{target}: {message}"
            );
        }

        // A listed file that is a link instead.
        let dir = tempfile::tempdir().unwrap();
        let version = build(dir.path());
        fs::remove_file(version.join("lib/libdcgm.so.4.6.1")).unwrap();
        symlink("/etc/shadow", version.join("lib/libdcgm.so.4.6.1")).unwrap();
        assert!(error(&version).contains("is not a regular file"));
    }

    #[test]
    fn manifest_paths_stay_in_lib_and_bin() {
        for path in [
            "../../etc/shadow",
            "lib/../../x",
            "etc/passwd",
            "lib/a/b",
            "lib/",
            "lib",
        ] {
            let dir = tempfile::tempdir().unwrap();
            let version = build(dir.path());
            edit_manifest(&version, |m| m.files[0].path = path.to_owned());
            match verify(&version) {
                Err(VerifyError::Manifest { reason, .. }) => {
                    assert!(
                        reason.contains("is not lib/<name> or bin/<name>"),
                        "{path}: {reason}"
                    )
                }
                other => panic!("{path}: {other:?}"),
            }
        }
    }
}
