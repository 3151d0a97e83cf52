//! `accelready provision`: fetch a pinned DCGM bundle, verify it, unpack only
//! the DCGM libraries, install them atomically and expose them to the host.
//!
//! The phases live in their own modules — [`fetch`] (HTTPS, streaming sha256,
//! retries; or a local `file://` bundle, hashed while copied), [`unpack`]
//! (deb/tar, sanitised, ELF-checked), [`install`] (atomic, idempotent,
//! locked) and [`expose`] (read-only bind mount) — and [`provision_async`]
//! wires them. [`image`] replaces fetch + unpack when the bundle travels
//! inside the accelready image ([`Source::Image`]): the same staging, commit,
//! `current` switch and exposure follow. `boot` calls [`provision_async`]
//! from its own runtime under its own deadline; the CLI calls the sync
//! [`provision`].
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
pub mod image;
pub mod install;
pub mod options;
pub mod progress;
pub mod unpack;

use std::fmt;
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
pub use options::{Limits, Progress, Timeouts, TEST_PAUSE_ENV};

/// Default host directory that holds installed bundles.
pub const DEFAULT_INSTALL_DIR: &str = "/var/lib/accelready/dcgm";
/// Default host directory where the current bundle is bind-mounted read-only.
pub const DEFAULT_EXPOSE_AT: &str = "/mnt/accelready/dcgm";
/// Mounts made under this host directory are the only ones that propagate from
/// a bootstrap container to the host (FACTS §3).
pub const EXPOSE_PARENT: &str = "/mnt";

/// Everything `provision` needs. Paths are host paths, except where a field
/// says otherwise.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProvisionRequest {
    /// Where the bundle comes from.
    pub source: Source,
    /// Expected sha256 of the bundle file, hex (either case).
    pub sha256: String,
    /// Architecture every kept ELF file must be built for.
    pub arch: Arch,
    pub install_dir: PathBuf,
    /// Where to bind-mount `<install-dir>/current` read-only; `None`: don't.
    pub expose_at: Option<PathBuf>,
    pub with_hostengine: bool,
    pub limits: Limits,
    pub timeouts: Timeouts,
    /// How the download shows its progress.
    pub progress: Progress,
}

/// Where a bundle comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// A bundle file: `https://` (or `http://` when allowed) is downloaded,
    /// `file:///ABS/PATH` is copied from this machine; either is hashed on
    /// the way and unpacked only once its digest matches.
    Url {
        url: String,
        allow_insecure_http: bool,
        /// Extra trusted CA certificates (PEM), a path on this machine.
        ca_bundle: Option<PathBuf>,
    },
    /// The bundle already laid out in the image accelready runs from:
    /// `<dir>/<sha256>/` (a path on this machine, normally
    /// [`image::IMAGE_BUNDLE_DIR`] below the image's root).
    Image { dir: PathBuf },
}

impl Source {
    /// A download of `url` with no extra CA and https only.
    pub fn url(url: &str) -> Source {
        Source::Url {
            url: url.to_owned(),
            allow_insecure_http: false,
            ca_bundle: None,
        }
    }
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Url { url, .. } => f.write_str(url),
            Source::Image { dir } => write!(f, "the image's {}", dir.display()),
        }
    }
}

/// Why `provision` failed. [`Error::is_usage`] tells operator mistakes apart.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(
        "invalid bundle URL '{url}' (expected https://..., or file:///ABS/PATH for a local file)"
    )]
    BadUrl {
        url: String,
        #[source]
        source: url::ParseError,
    },
    #[error("bundle URL '{url}': scheme '{scheme}' is not allowed (use https://, file:///ABS/PATH for a local file, or http:// with --allow-insecure-http)")]
    Scheme { url: String, scheme: String },
    #[error("bundle URL '{url}': a local bundle must be file:///ABS/PATH, an absolute path on this machine with no host")]
    FileUrl { url: String },
    #[error("invalid --sha256 '{0}': expected 64 hexadecimal digits")]
    BadDigest(String),
    #[error("--expose-at '{0}' must be a directory under /mnt: only mounts there propagate to the host from a bootstrap container")]
    ExposeOutsideMnt(PathBuf),
    #[error(transparent)]
    Fetch(#[from] fetch::FetchError),
    #[error(transparent)]
    Unpack(#[from] unpack::UnpackError),
    #[error(transparent)]
    Image(#[from] image::ImageError),
    #[error(transparent)]
    Install(#[from] install::InstallError),
    #[error(transparent)]
    Expose(#[from] expose::ExposeError),
    #[error("provisioning from {from} did not finish within the overall deadline of {deadline:?}")]
    Deadline { from: String, deadline: Duration },
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
            | Error::FileUrl { .. }
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

/// Where an installed bundle came from, in the report.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum SourceKind {
    /// Downloaded over https:// or http://.
    Download,
    /// Copied from a local file:// bundle.
    File,
    /// Copied from the bundle the image carries.
    Image,
}

/// What `provision` did.
#[derive(Debug, Clone, Serialize)]
pub struct ProvisionReport {
    pub source: SourceKind,
    /// The bundle's URL; for [`SourceKind::Image`], the one its manifest
    /// recorded when the image was built.
    pub url: String,
    /// With [`SourceKind::Image`]: where the image carries the bundle (a path
    /// on this machine).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub image_dir: Option<PathBuf>,
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
        let how = match (self.cache_hit, self.source) {
            (true, _) => "already installed and verified (cache hit, nothing copied)",
            (false, SourceKind::Download) => "downloaded, verified and installed",
            (false, SourceKind::File) => "copied from the local file, verified and installed",
            (false, SourceKind::Image) => {
                "installed from the image (nothing downloaded), every file verified against its manifest"
            }
        };
        writeln!(out, "DCGM bundle {how}")?;
        writeln!(out, "  url        {}", self.url)?;
        if let Some(dir) = &self.image_dir {
            writeln!(out, "  image      {}", dir.display())?;
        }
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
            from: request.source.to_string(),
            deadline,
        }),
    }
}

/// A request whose operator input has been checked.
struct Checked {
    origin: Origin,
    sha256: String,
}

/// Where the bytes come from, once checked.
enum Origin {
    Download(Box<fetch::FetchOptions>),
    /// A `file://` bundle: its path on this machine.
    File(PathBuf),
    Image(PathBuf),
}

/// Checks the request's source and says how to get the bytes.
fn origin(request: &ProvisionRequest, sha256: &str) -> Result<Origin, Error> {
    let origin = match &request.source {
        Source::Url {
            url: text,
            allow_insecure_http,
            ca_bundle,
        } => {
            let url = url::Url::parse(text).map_err(|source| Error::BadUrl {
                url: text.clone(),
                source,
            })?;
            match url.scheme() {
                "https" => {}
                "http" if *allow_insecure_http => {
                    warn!(url = %url, "fetching over plain http (--allow-insecure-http); the sha256 still guards the content");
                }
                "file" => return Ok(Origin::File(local_path(text, &url)?)),
                scheme => {
                    return Err(Error::Scheme {
                        url: text.clone(),
                        scheme: scheme.to_owned(),
                    })
                }
            }
            Origin::Download(Box::new(fetch::FetchOptions {
                url,
                sha256: sha256.to_owned(),
                max_bytes: request.limits.max_download_bytes,
                timeouts: request.timeouts,
                allow_insecure_http: *allow_insecure_http,
                ca_bundle: ca_bundle.clone(),
                progress: request.progress,
            }))
        }
        Source::Image { dir } => Origin::Image(dir.clone()),
    };
    Ok(origin)
}

fn validate(request: &ProvisionRequest) -> Result<Checked, Error> {
    let sha256 = parse_sha256(&request.sha256)?;
    let origin = origin(request, &sha256)?;
    if let Some(expose_at) = &request.expose_at {
        if !is_under_mnt(expose_at) {
            return Err(Error::ExposeOutsideMnt(expose_at.clone()));
        }
    }
    Ok(Checked { origin, sha256 })
}

/// The absolute path a `file:///ABS/PATH` URL names. The `url` crate would
/// read `file:relative` or `file://name/x` as something absolute; an operator
/// who typed those meant a relative path or a host, so both are refused.
fn local_path(text: &str, url: &url::Url) -> Result<PathBuf, Error> {
    let refused = || Error::FileUrl {
        url: text.to_owned(),
    };
    if !text.starts_with("file:///") || url.host().is_some() {
        return Err(refused());
    }
    let path = url.to_file_path().map_err(|()| refused())?;
    if path.is_absolute() && path != Path::new("/") {
        Ok(path)
    } else {
        Err(refused())
    }
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
    let Checked { origin, sha256 } = checked;
    let mut phases = Phases::default();
    let layout = install::Layout::new(host.join(&request.install_dir));
    layout.create()?;
    let mut lock = install::lock(&layout).await?;
    install::clean_leftovers(&layout)?;
    // Whatever ends this run — an error, or the deadline dropping this
    // future mid-download — the lock's release removes what it wrote.
    lock.remove_on_release(layout.download_path(&sha256));
    lock.remove_on_release(layout.staging_dir(&sha256));

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
            info!(sha256 = %sha256, dir = %layout.version_dir(&sha256).display(), "bundle already installed and verified; nothing to copy");
            (manifest, true)
        }
        Err(reason) => {
            info!(sha256 = %sha256, reason = %reason, from = %request.source, "installing bundle");
            let work = lock.work();
            let manifest = stage(request, &origin, &sha256, &layout, &work, &mut phases).await?;
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
    let (url, image_dir) = match &request.source {
        Source::Url { url, .. } => (url.clone(), None),
        Source::Image { dir } => (manifest.url.clone(), Some(dir.clone())),
    };
    Ok(ProvisionReport {
        source: match origin {
            Origin::Download(_) => SourceKind::Download,
            Origin::File(_) => SourceKind::File,
            Origin::Image(_) => SourceKind::Image,
        },
        url,
        image_dir,
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

/// Fills the staging directory with the verified bundle: fetched (or copied
/// from a local file) and unpacked, or copied from the image. On failure
/// removes what it wrote.
async fn stage(
    request: &ProvisionRequest,
    origin: &Origin,
    sha256: &str,
    layout: &install::Layout,
    work: &install::Work,
    phases: &mut Phases,
) -> Result<install::Manifest, Error> {
    let staging = layout.staging_dir(sha256);
    let result = match origin {
        Origin::Image(dir) => {
            let started = Instant::now();
            let (dir, sha, to) = (dir.clone(), sha256.to_owned(), staging.clone());
            let (arch, with_hostengine) = (request.arch, request.with_hostengine);
            let (token, work) = (work.start(), work.clone());
            let copied = tokio::task::spawn_blocking(move || {
                let _running = token;
                image::stage(&dir, &sha, arch, with_hostengine, &to, work.cancel_flag())
            })
            .await
            .map_err(Error::Task)
            .and_then(|copied| copied.map_err(Error::from));
            phases.unpack_ms = millis(started);
            if copied.is_ok() {
                test_pause("staged");
            }
            copied
        }
        Origin::Download(options) => {
            let file = BundleFile::Download(options);
            fetch_and_unpack(request, file, sha256, layout, work, phases).await
        }
        Origin::File(path) => {
            let file = BundleFile::Local(path);
            fetch_and_unpack(request, file, sha256, layout, work, phases).await
        }
    };
    if result.is_err() {
        remove_quietly(&staging);
    }
    result
}

/// A bundle file to fetch.
enum BundleFile<'a> {
    Download(&'a fetch::FetchOptions),
    Local(&'a Path),
}

/// Downloads (or copies) the bundle file, verifies it and unpacks it into
/// the staging directory; the bundle file is removed either way.
async fn fetch_and_unpack(
    request: &ProvisionRequest,
    bundle_file: BundleFile<'_>,
    sha256: &str,
    layout: &install::Layout,
    work: &install::Work,
    phases: &mut Phases,
) -> Result<install::Manifest, Error> {
    let download = layout.download_path(sha256);
    let staging = layout.staging_dir(sha256);
    let url = request.source.to_string();
    let result = async {
        let started = Instant::now();
        let fetched = match bundle_file {
            BundleFile::Download(options) => fetch::fetch(options, &download).await?,
            BundleFile::Local(path) => {
                let limit = request.limits.max_download_bytes;
                fetch::copy_file(path, &url, sha256, limit, &download).await?
            }
        };
        phases.fetch_ms = millis(started);
        info!(url = %url, bytes = fetched.bytes, attempts = fetched.attempts, "bundle fetched and sha256 verified");
        test_pause("fetched");

        let started = Instant::now();
        let unpack_options = unpack::UnpackOptions {
            arch: request.arch,
            with_hostengine: request.with_hostengine,
            limits: request.limits,
        };
        let (archive, dir) = (download.clone(), staging.clone());
        let (token, work) = (work.start(), work.clone());
        let unpacked = tokio::task::spawn_blocking(move || {
            let _running = token;
            unpack::unpack_cancellable(&archive, &dir, &unpack_options, work.cancel_flag())
        })
        .await
        .map_err(Error::Task)??;
        let manifest = install::Manifest::new(
            &url,
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

    fn request(url: &str) -> ProvisionRequest {
        ProvisionRequest {
            source: Source::url(url),
            sha256: "0".repeat(64),
            arch: Arch::Aarch64,
            install_dir: DEFAULT_INSTALL_DIR.into(),
            expose_at: Some(DEFAULT_EXPOSE_AT.into()),
            with_hostengine: false,
            limits: Limits::default(),
            timeouts: Timeouts::default(),
            progress: Progress::default(),
        }
    }

    #[test]
    fn insecure_http_and_bad_input_are_usage_errors() {
        let mut request = request("http://example.invalid/dcgm.deb");
        let e = validate(&request).err().unwrap();
        assert!(
            e.is_usage() && e.to_string().contains("--allow-insecure-http"),
            "{e}"
        );
        request.source = Source::Url {
            url: "http://example.invalid/dcgm.deb".into(),
            allow_insecure_http: true,
            ca_bundle: None,
        };
        assert!(validate(&request).is_ok());
        request.source = Source::url("ftp://x/y");
        let e = validate(&request).err().unwrap();
        assert!(
            e.is_usage() && e.to_string().contains("file:///ABS/PATH"),
            "{e}"
        );
        request.source = Source::url("https://x/y");
        request.expose_at = Some("/var/x".into());
        assert!(validate(&request).err().unwrap().is_usage());
    }

    #[test]
    fn file_urls_name_absolute_local_paths_only() {
        for (url, path) in [
            ("file:///srv/dcgm.deb", "/srv/dcgm.deb"),
            ("file:///srv/with%20space.deb", "/srv/with space.deb"),
        ] {
            match validate(&request(url)) {
                Ok(Checked {
                    origin: Origin::File(found),
                    ..
                }) => assert_eq!(found, Path::new(path), "{url}"),
                Ok(_) => panic!("{url}: not a local file"),
                Err(e) => panic!("{url}: {e}"),
            }
        }
        for bad in [
            "file://dcgm.deb",
            "file:dcgm.deb",
            "file://server/srv/dcgm.deb",
            "file:///",
            "file:relative/dcgm.deb",
        ] {
            let e = validate(&request(bad)).err().unwrap();
            assert!(
                e.is_usage() && e.to_string().contains("file:///ABS/PATH"),
                "{bad}: {e}"
            );
        }
        // A bare path is not a URL at all.
        let e = validate(&request("/srv/dcgm.deb")).err().unwrap();
        assert!(
            e.is_usage() && e.to_string().contains("/srv/dcgm.deb"),
            "{e}"
        );
    }
}
