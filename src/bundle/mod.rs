//! `accelready provision`: fetch a pinned DCGM bundle, verify it, unpack only
//! the DCGM libraries, install them atomically and expose them to the host.
//!
//! The phases live in their own modules — [`fetch`] (HTTPS, streaming sha256,
//! retries), [`unpack`] (deb/tar, sanitised, ELF-checked), [`install`]
//! (atomic, idempotent, locked) and [`expose`] (read-only bind mount) — and
//! [`provision_async`] wires them. `boot` calls [`provision_async`] from its own
//! runtime under its own deadline; the CLI calls the sync [`provision`].
//!
//! On-disk layout (host paths, resolved through [`HostRoot::join`]):
//!
//! ```text
//! <install-dir>/<sha256>/lib/libdcgm.so.4.6.1
//! <install-dir>/<sha256>/lib/libdcgm.so.4 -> libdcgm.so.4.6.1
//! <install-dir>/<sha256>/lib/libdcgm.so   -> libdcgm.so.4
//! <install-dir>/<sha256>/bin/nv-hostengine          (--with-hostengine)
//! <install-dir>/<sha256>/bin/dcgmi                  (--with-hostengine, when the bundle has it)
//! <install-dir>/<sha256>/.accelready.json           (manifest: what was verified)
//! <install-dir>/current -> <sha256>
//! ```

pub mod expose;
pub mod fetch;
pub mod files;
pub mod install;
pub mod options;
pub mod unpack;

use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::Serialize;
use tracing::{info, warn};

use crate::arch::Arch;
use crate::host::{normalize, HostRoot};
use crate::report::Report;

pub use expose::ExposeOutcome;
pub use files::{InstalledFile, InstalledLink};
use options::test_pause;
pub use options::{Limits, Timeouts, TEST_PAUSE_ENV};

/// Default host directory that holds installed bundles.
pub const DEFAULT_INSTALL_DIR: &str = "/var/lib/accelready/dcgm";
/// Default host directory where the current bundle is bind-mounted read-only.
pub const DEFAULT_EXPOSE_AT: &str = "/mnt/accelready/dcgm";
/// Mounts made under this host directory are the only ones that propagate from
/// a bootstrap container to the host (FACTS §3).
pub const EXPOSE_PARENT: &str = "/mnt";

/// Everything `provision` needs. Paths are host paths.
#[derive(Debug, Clone)]
pub struct ProvisionRequest {
    pub url: String,
    /// Expected sha256 of the bundle file, hex (either case).
    pub sha256: String,
    /// Architecture every kept ELF file must be built for.
    pub arch: Arch,
    pub install_dir: PathBuf,
    /// Where to bind-mount `<install-dir>/current` read-only; `None`: don't.
    pub expose_at: Option<PathBuf>,
    pub with_hostengine: bool,
    pub allow_insecure_http: bool,
    /// Extra trusted CA certificates (PEM), a path on this machine.
    pub ca_bundle: Option<PathBuf>,
    pub limits: Limits,
    pub timeouts: Timeouts,
}

/// Why `provision` failed. [`Error::is_usage`] tells operator mistakes apart.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("invalid bundle URL '{url}'")]
    BadUrl {
        url: String,
        #[source]
        source: url::ParseError,
    },
    #[error("bundle URL '{url}': scheme '{scheme}' is not allowed (use https://, or http:// with --allow-insecure-http)")]
    Scheme { url: String, scheme: String },
    #[error("invalid --sha256 '{0}': expected 64 hexadecimal digits")]
    BadDigest(String),
    #[error("--expose-at '{0}' must be a directory under /mnt: only mounts there propagate to the host from a bootstrap container")]
    ExposeOutsideMnt(PathBuf),
    #[error(transparent)]
    Fetch(#[from] fetch::FetchError),
    #[error(transparent)]
    Unpack(#[from] unpack::UnpackError),
    #[error(transparent)]
    Install(#[from] install::InstallError),
    #[error(transparent)]
    Expose(#[from] expose::ExposeError),
    #[error("provisioning '{url}' did not finish within the overall deadline of {deadline:?}")]
    Deadline { url: String, deadline: Duration },
    #[error("cannot start the async runtime")]
    Runtime(#[source] io::Error),
    #[error("a provisioning task failed to complete")]
    Task(#[source] tokio::task::JoinError),
}

impl Error {
    /// True when the operator's input is at fault (exit 2), not the world.
    pub fn is_usage(&self) -> bool {
        match self {
            Error::BadUrl { .. }
            | Error::Scheme { .. }
            | Error::BadDigest(_)
            | Error::ExposeOutsideMnt(_) => true,
            Error::Fetch(e) => e.is_usage(),
            _ => false,
        }
    }
}

/// How long each phase took, in milliseconds.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Phases {
    pub verify_installed_ms: u64,
    pub fetch_ms: u64,
    pub unpack_ms: u64,
    pub install_ms: u64,
    pub expose_ms: u64,
}

/// What `provision` did.
#[derive(Debug, Clone, Serialize)]
pub struct ProvisionReport {
    pub url: String,
    pub sha256: String,
    pub arch: Arch,
    /// Size of the bundle file in bytes.
    pub bytes: u64,
    /// True when the bundle was already installed and verified: nothing fetched.
    pub cache_hit: bool,
    /// Host path of the installed version directory.
    pub install_path: PathBuf,
    /// Host path of the `current` symlink.
    pub current: PathBuf,
    /// Host path where the bundle is bind-mounted read-only, if exposed.
    pub exposed_at: Option<PathBuf>,
    pub expose: Option<ExposeOutcome>,
    pub files: Vec<InstalledFile>,
    pub links: Vec<InstalledLink>,
    pub phases: Phases,
}

impl Report for ProvisionReport {
    fn write_text(&self, out: &mut dyn Write) -> io::Result<()> {
        let how = if self.cache_hit {
            "already installed and verified (cache hit, nothing downloaded)"
        } else {
            "downloaded, verified and installed"
        };
        writeln!(out, "DCGM bundle {how}")?;
        writeln!(out, "  url        {}", self.url)?;
        writeln!(out, "  sha256     {}", self.sha256)?;
        writeln!(out, "  bytes      {}", self.bytes)?;
        writeln!(out, "  arch       {}", self.arch)?;
        writeln!(out, "  installed  {}", self.install_path.display())?;
        writeln!(
            out,
            "  current    {} -> {}",
            self.current.display(),
            self.sha256
        )?;
        match (&self.exposed_at, self.expose) {
            (Some(path), Some(outcome)) => writeln!(
                out,
                "  exposed    {} (read-only bind mount, {})",
                path.display(),
                outcome.as_str()
            )?,
            _ => writeln!(out, "  exposed    no (--no-expose)")?,
        }
        writeln!(out, "  files")?;
        for file in &self.files {
            writeln!(
                out,
                "    {:<40} soname {:<28} {} {} bytes",
                file.path,
                file.soname.as_deref().unwrap_or("-"),
                file.arch,
                file.size
            )?;
        }
        writeln!(out, "  links")?;
        for link in &self.links {
            writeln!(out, "    {} -> {}", link.path, link.target)?;
        }
        let p = &self.phases;
        writeln!(
            out,
            "  phases     verify-installed {} ms, fetch {} ms, unpack {} ms, install {} ms, expose {} ms",
            p.verify_installed_ms, p.fetch_ms, p.unpack_ms, p.install_ms, p.expose_ms
        )
    }
}

/// Sync entry point: runs [`provision_async`] on a private current-thread runtime.
pub fn provision(host: &HostRoot, request: &ProvisionRequest) -> Result<ProvisionReport, Error> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(Error::Runtime)?;
    runtime.block_on(provision_async(host, request))
}

/// Async entry point, for callers that own a tokio runtime (`boot`). Bounded by
/// `request.timeouts.overall`; callers may wrap it in a shorter deadline of
/// their own (dropping the future stops the download; a crash or cancellation
/// at any point leaves the previous installation intact).
pub async fn provision_async(
    host: &HostRoot,
    request: &ProvisionRequest,
) -> Result<ProvisionReport, Error> {
    let checked = validate(request)?;
    let deadline = request.timeouts.overall;
    match tokio::time::timeout(deadline, provision_checked(host, request, checked)).await {
        Ok(result) => result,
        Err(_) => Err(Error::Deadline {
            url: request.url.clone(),
            deadline,
        }),
    }
}

/// A request whose operator input has been checked.
struct Checked {
    url: url::Url,
    sha256: String,
}

fn validate(request: &ProvisionRequest) -> Result<Checked, Error> {
    let url = url::Url::parse(&request.url).map_err(|source| Error::BadUrl {
        url: request.url.clone(),
        source,
    })?;
    match url.scheme() {
        "https" => {}
        "http" if request.allow_insecure_http => {
            warn!(url = %url, "fetching over plain http (--allow-insecure-http); the sha256 still guards the content");
        }
        scheme => {
            return Err(Error::Scheme {
                url: request.url.clone(),
                scheme: scheme.to_owned(),
            })
        }
    }
    let sha256 = parse_sha256(&request.sha256)?;
    if let Some(expose_at) = &request.expose_at {
        if !is_under_mnt(expose_at) {
            return Err(Error::ExposeOutsideMnt(expose_at.clone()));
        }
    }
    Ok(Checked { url, sha256 })
}

/// A sha256 given by the operator, normalised to lowercase hex.
pub fn parse_sha256(text: &str) -> Result<String, Error> {
    let text = text.trim();
    let text = text.strip_prefix("sha256:").unwrap_or(text);
    if text.len() == 64 && text.bytes().all(|b| b.is_ascii_hexdigit()) {
        Ok(text.to_ascii_lowercase())
    } else {
        Err(Error::BadDigest(text.to_owned()))
    }
}

/// True for host paths strictly below `/mnt` (after `..` is applied).
pub fn is_under_mnt(host_path: &Path) -> bool {
    let path = normalize(host_path);
    path != Path::new(EXPOSE_PARENT) && path.starts_with(EXPOSE_PARENT)
}

async fn provision_checked(
    host: &HostRoot,
    request: &ProvisionRequest,
    checked: Checked,
) -> Result<ProvisionReport, Error> {
    let Checked { url, sha256 } = checked;
    let mut phases = Phases::default();
    let layout = install::Layout::new(host.join(&request.install_dir));
    layout.create()?;
    let _lock = install::lock(&layout).await?;
    install::clean_leftovers(&layout)?;

    let started = Instant::now();
    let installed = install::verify_installed(&layout, &sha256, request.arch);
    phases.verify_installed_ms = millis(started);
    let installed = installed.and_then(|manifest| {
        if request.with_hostengine && !manifest.with_hostengine {
            Err(install::VerifyError::WithoutHostengine(
                layout.version_dir(&sha256),
            ))
        } else {
            Ok(manifest)
        }
    });
    let (manifest, cache_hit) = match installed {
        Ok(manifest) => {
            info!(sha256 = %sha256, dir = %layout.version_dir(&sha256).display(), "bundle already installed and verified; not downloading");
            (manifest, true)
        }
        Err(reason) => {
            info!(sha256 = %sha256, reason = %reason, url = %url, "installing bundle");
            let manifest = fetch_and_stage(request, &url, &sha256, &layout, &mut phases).await?;
            (manifest, false)
        }
    };

    let started = Instant::now();
    let version_dir = layout.version_dir(&sha256);
    if !cache_hit {
        install::commit(&layout, &sha256)?;
    }
    if let install::Switch::Switched { previous } = install::switch_current(&layout, &sha256)? {
        install::prune(&layout, &sha256, previous.as_deref())?;
    }
    phases.install_ms = millis(started);

    let mut expose = None;
    if let Some(expose_at) = &request.expose_at {
        let started = Instant::now();
        let outcome = expose::expose(&version_dir, &host.join(expose_at))?;
        info!(at = %expose_at.display(), outcome = outcome.as_str(), "bundle exposed read-only");
        expose = Some(outcome);
        phases.expose_ms = millis(started);
    }

    let install_dir = normalize(&request.install_dir);
    Ok(ProvisionReport {
        url: request.url.clone(),
        bytes: manifest.bundle_bytes,
        arch: request.arch,
        cache_hit,
        install_path: install_dir.join(&sha256),
        current: install_dir.join(install::CURRENT),
        exposed_at: request.expose_at.as_deref().map(normalize),
        expose,
        files: manifest.files,
        links: manifest.links,
        phases,
        sha256,
    })
}

/// Downloads, verifies and unpacks into the staging directory; on failure
/// removes what it wrote.
async fn fetch_and_stage(
    request: &ProvisionRequest,
    url: &url::Url,
    sha256: &str,
    layout: &install::Layout,
    phases: &mut Phases,
) -> Result<install::Manifest, Error> {
    let download = layout.download_path(sha256);
    let staging = layout.staging_dir(sha256);
    let result = async {
        let started = Instant::now();
        let options = fetch::FetchOptions {
            url: url.clone(),
            sha256: sha256.to_owned(),
            max_bytes: request.limits.max_download_bytes,
            timeouts: request.timeouts,
            allow_insecure_http: request.allow_insecure_http,
            ca_bundle: request.ca_bundle.clone(),
        };
        let fetched = fetch::fetch(&options, &download).await?;
        phases.fetch_ms = millis(started);
        info!(url = %url, bytes = fetched.bytes, attempts = fetched.attempts, "bundle downloaded and sha256 verified");
        test_pause("fetched");

        let started = Instant::now();
        let unpack_options = unpack::UnpackOptions {
            arch: request.arch,
            with_hostengine: request.with_hostengine,
            limits: request.limits,
        };
        let (archive, dir) = (download.clone(), staging.clone());
        let unpacked = tokio::task::spawn_blocking(move || unpack::unpack(&archive, &dir, &unpack_options))
            .await
            .map_err(Error::Task)??;
        let manifest = install::Manifest::new(
            url.as_str(),
            sha256,
            request.arch,
            fetched.bytes,
            request.with_hostengine,
            unpacked,
        );
        install::write_manifest(&staging, &manifest)?;
        phases.unpack_ms = millis(started);
        test_pause("staged");
        Ok(manifest)
    }
    .await;
    remove_quietly(&download);
    if result.is_err() {
        remove_quietly(&staging);
    }
    result
}

fn remove_quietly(path: &Path) {
    let outcome = match fs::symlink_metadata(path) {
        Ok(meta) if meta.is_dir() => fs::remove_dir_all(path),
        Ok(_) => fs::remove_file(path),
        Err(_) => return,
    };
    if let Err(e) = outcome {
        warn!(path = %path.display(), error = %e, "cannot remove temporary file");
    }
}

fn millis(since: Instant) -> u64 {
    u64::try_from(since.elapsed().as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sha256_is_checked_and_normalised() {
        let hex = "AB".repeat(32);
        assert_eq!(parse_sha256(&hex).unwrap(), "ab".repeat(32));
        assert_eq!(
            parse_sha256(&format!("sha256:{}", "0".repeat(64))).unwrap(),
            "0".repeat(64)
        );
        for bad in ["", "abc", &"g".repeat(64), &"0".repeat(63)] {
            assert!(parse_sha256(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn expose_at_must_be_strictly_under_mnt() {
        for (path, ok) in [
            ("/mnt/accelready/dcgm", true),
            ("/mnt/x", true),
            ("/mnt", false),
            ("/mnt/../etc", false),
            ("/var/lib/x", false),
            ("/mntx/y", false),
        ] {
            assert_eq!(is_under_mnt(Path::new(path)), ok, "{path}");
        }
    }

    #[test]
    fn insecure_http_and_bad_input_are_usage_errors() {
        let mut request = ProvisionRequest {
            url: "http://example.invalid/dcgm.deb".into(),
            sha256: "0".repeat(64),
            arch: Arch::Aarch64,
            install_dir: DEFAULT_INSTALL_DIR.into(),
            expose_at: Some(DEFAULT_EXPOSE_AT.into()),
            with_hostengine: false,
            allow_insecure_http: false,
            ca_bundle: None,
            limits: Limits::default(),
            timeouts: Timeouts::default(),
        };
        let e = validate(&request).err().unwrap();
        assert!(
            e.is_usage() && e.to_string().contains("--allow-insecure-http"),
            "{e}"
        );
        request.allow_insecure_http = true;
        assert!(validate(&request).is_ok());
        request.url = "ftp://x/y".into();
        assert!(validate(&request).err().unwrap().is_usage());
        request.url = "https://x/y".into();
        request.expose_at = Some("/var/x".into());
        assert!(validate(&request).err().unwrap().is_usage());
    }
}
