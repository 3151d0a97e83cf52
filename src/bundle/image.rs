//! Install from the image: the bundle that `bootstrap/build --bundle` laid out
//! inside the accelready image at [`IMAGE_BUNDLE_DIR`], exactly as `provision`
//! installs it (`<sha256>/lib/`, `bin/`, soname links, `.accelready.json`,
//! and `current`), because the build ran `provision` itself to make it.
//!
//! At boot nothing is downloaded. The version directory of the pinned digest
//! must be there; its manifest must be for that digest and architecture and
//! match the directory's shape exactly ([`install::check_layout`]: no file
//! missing or extra, no link leading out of the tree); then each file is
//! copied into the staging directory while it is hashed, and a digest that
//! differs from the manifest fails the whole install. What is verified is
//! what was written, so the staging directory holds nothing unverified; the
//! caller then commits it like a download (rename, `current` switch, expose).

use std::fs::{self, File};
use std::io;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;

use tracing::info;

use super::files::{write_new, Interruptible, BIN_MODE, LIB_MODE};
use super::install::{self, Manifest, VerifyError};
use crate::arch::Arch;
use crate::fsutil::sync_dir;

/// Where the image carries its bundle: an install directory of its own, in
/// the image's filesystem (`/` inside the bootstrap and host containers).
pub const IMAGE_BUNDLE_DIR: &str = "/dcgm";

#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    #[error("the image carries no DCGM bundle at '{dir}' (found: none), but the policy pins bundle sha256 {pinned}: use the image variant built with bootstrap/build --bundle {arch}=FILE")]
    NoBundle {
        dir: PathBuf,
        pinned: String,
        arch: Arch,
    },
    #[error("the image carries DCGM bundle sha256 {found} at '{dir}', but the policy pins bundle sha256 {pinned}: pin the bundle this image carries, or use the image variant built from the pinned bundle")]
    OtherBundle {
        dir: PathBuf,
        pinned: String,
        found: String,
    },
    #[error("the image's DCGM bundle at '{dir}' does not verify")]
    Verify {
        dir: PathBuf,
        #[source]
        source: VerifyError,
    },
    #[error("cannot copy '{from}' from the image to '{to}'")]
    Copy {
        from: PathBuf,
        to: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cannot create '{path}' in the staging directory")]
    Staging {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

/// Copies the image's bundle `sha256` (under `dir`, a path on this machine)
/// into `staging` (created; must not exist), verifying it on the way; without
/// `with_hostengine`, `bin/` stays empty, as a download would leave it.
/// Returns the manifest written into `staging`.
pub fn stage(
    dir: &Path,
    sha256: &str,
    arch: Arch,
    with_hostengine: bool,
    staging: &Path,
    cancel: &AtomicBool,
) -> Result<Manifest, ImageError> {
    let version = dir.join(sha256);
    if !version.is_dir() {
        let found = bundles_in(dir);
        return Err(if found.is_empty() {
            ImageError::NoBundle {
                dir: dir.to_path_buf(),
                pinned: sha256.to_owned(),
                arch,
            }
        } else {
            ImageError::OtherBundle {
                dir: dir.to_path_buf(),
                pinned: sha256.to_owned(),
                found: found.join(", "),
            }
        });
    }
    let verify_error = |source| ImageError::Verify {
        dir: version.clone(),
        source,
    };
    let mut manifest = install::read_manifest(&version, sha256, arch).map_err(verify_error)?;
    install::check_layout(&version, &manifest).map_err(verify_error)?;
    let wanted = |path: &str| with_hostengine || !path.starts_with("bin/");
    manifest.files.retain(|file| wanted(&file.path));
    manifest.links.retain(|link| wanted(&link.path));
    // What this install was asked for, as for a download: a later run that
    // wants the engine copies again instead of trusting an install without it.
    manifest.with_hostengine = with_hostengine;

    for sub in ["", "lib", "bin"] {
        let path = staging.join(sub);
        fs::create_dir(&path).map_err(|source| ImageError::Staging { path, source })?;
    }
    for file in &manifest.files {
        let from = version.join(&file.path);
        let to = staging.join(&file.path);
        let copy_error = |source| ImageError::Copy {
            from: from.clone(),
            to: to.clone(),
            source,
        };
        let mode = if file.path.starts_with("bin/") {
            BIN_MODE
        } else {
            LIB_MODE
        };
        let mut source = Interruptible {
            inner: File::open(&from).map_err(copy_error)?,
            cancel,
        };
        let (actual, size) = write_new(&to, mode, &mut source).map_err(copy_error)?;
        if actual != file.sha256 || size != file.size {
            return Err(verify_error(VerifyError::File {
                path: from,
                reason: format!(
                    "sha256 is {actual} ({size} bytes), expected {} ({} bytes)",
                    file.sha256, file.size
                ),
            }));
        }
    }
    for link in &manifest.links {
        let path = staging.join(&link.path);
        symlink(&link.target, &path).map_err(|source| ImageError::Staging { path, source })?;
    }
    for sub in ["lib", "bin", ""] {
        let path = staging.join(sub);
        sync_dir(&path).map_err(|source| ImageError::Staging { path, source })?;
    }
    install::write_manifest(staging, &manifest).map_err(|e| ImageError::Staging {
        path: staging.join(install::MANIFEST),
        source: io::Error::other(e),
    })?;
    info!(from = %version.display(), files = manifest.files.len(), links = manifest.links.len(), "bundle copied from the image and verified");
    Ok(manifest)
}

/// The bundle digests laid out under `dir` (version directories), sorted.
pub fn bundles_in(dir: &Path) -> Vec<String> {
    let mut found: Vec<String> = fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .filter(|entry| entry.file_type().is_ok_and(|t| t.is_dir()))
                .map(|entry| entry.file_name().to_string_lossy().into_owned())
                .filter(|name| install::is_version_name(name))
                .collect()
        })
        .unwrap_or_default();
    found.sort();
    found
}

#[cfg(test)]
mod tests {
    use std::fs;

    use super::*;
    use crate::bundle::install::test_tree::{build, BUNDLE};

    fn staged(
        dir: &Path,
        with_hostengine: bool,
    ) -> (tempfile::TempDir, Result<Manifest, ImageError>) {
        let out = tempfile::tempdir().unwrap();
        let staging = out.path().join(".staging");
        let result = stage(
            dir,
            BUNDLE,
            Arch::Aarch64,
            with_hostengine,
            &staging,
            &AtomicBool::new(false),
        );
        (out, result)
    }

    #[test]
    fn the_bundle_is_copied_verified_and_its_manifest_written() {
        let image = tempfile::tempdir().unwrap();
        build(image.path());
        let (out, result) = staged(image.path(), true);
        let manifest = result.unwrap();
        let staging = out.path().join(".staging");
        assert_eq!(
            install::verify_tree(&staging, BUNDLE, Arch::Aarch64).unwrap(),
            manifest
        );
        assert_eq!(
            fs::read_link(staging.join("lib/libdcgm.so")).unwrap(),
            Path::new("libdcgm.so.4")
        );
        use std::os::unix::fs::PermissionsExt;
        let mode = |p: &str| fs::metadata(staging.join(p)).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode("bin/nv-hostengine"), BIN_MODE);
        assert_eq!(mode("lib/libdcgm.so.4.6.1"), LIB_MODE);
    }

    #[test]
    fn without_hostengine_bin_stays_empty_and_the_manifest_says_so() {
        let image = tempfile::tempdir().unwrap();
        build(image.path());
        let (out, result) = staged(image.path(), false);
        let manifest = result.unwrap();
        assert!(manifest.files.iter().all(|f| !f.path.starts_with("bin/")));
        // So that a later run that wants the engine copies again.
        assert!(!manifest.with_hostengine);
        assert!(staged(image.path(), true).1.unwrap().with_hostengine);
        let staging = out.path().join(".staging");
        assert_eq!(fs::read_dir(staging.join("bin")).unwrap().count(), 0);
        install::verify_tree(&staging, BUNDLE, Arch::Aarch64).unwrap();
    }

    #[test]
    fn no_bundle_or_another_one_names_both_digests() {
        let image = tempfile::tempdir().unwrap();
        let (_, result) = staged(image.path(), true);
        let message = result.unwrap_err().to_string();
        assert!(
            message.contains("carries no DCGM bundle") && message.contains(BUNDLE),
            "{message}"
        );
        assert!(
            message.contains("found: none") && message.contains("--bundle aarch64="),
            "{message}"
        );

        let other = "0".repeat(64);
        fs::rename(build(image.path()), image.path().join(&other)).unwrap();
        let (_, result) = staged(image.path(), true);
        let message = result.unwrap_err().to_string();
        assert!(
            message.contains(&format!("carries DCGM bundle sha256 {other}"))
                && message.contains(&format!("pins bundle sha256 {BUNDLE}")),
            "{message}"
        );
    }

    #[test]
    fn a_tampered_image_file_fails_while_copying() {
        let image = tempfile::tempdir().unwrap();
        let version = build(image.path());
        fs::write(version.join("bin/nv-hostengine"), b"enginX").unwrap();
        let (_, result) = staged(image.path(), true);
        let error = result.unwrap_err();
        let chain = format!("{error}: {}", std::error::Error::source(&error).unwrap());
        assert!(
            chain.contains("does not verify") && chain.contains("sha256 is"),
            "{chain}"
        );
        // Without nv-hostengine the tampered file is never read.
        let (_, result) = staged(image.path(), false);
        assert!(result.is_ok());
    }

    #[test]
    fn an_extra_file_in_the_image_is_refused() {
        let image = tempfile::tempdir().unwrap();
        let version = build(image.path());
        fs::write(version.join("lib/libevil.so"), b"x").unwrap();
        let (_, result) = staged(image.path(), true);
        assert!(matches!(
            result,
            Err(ImageError::Verify {
                source: VerifyError::Extra { .. },
                ..
            })
        ));
    }
}
