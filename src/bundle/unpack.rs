//! Unpack: read a verified bundle (a `.deb`, or a tarball compressed with
//! gzip, xz or zstd — told apart by magic bytes, not by name), keep only the
//! DCGM libraries (and `nv-hostengine` + `dcgmi` when asked), flatten them into `lib/`
//! and `bin/` of a staging directory, and check every kept ELF file.
//!
//! Archive members are never written where the archive says: kept files are
//! created by name (`create_new`) inside the staging directory, so a hostile
//! member can not write through a symlink. Hostile archives are still
//! rejected outright — absolute paths, `..`, symlinks or hardlinks leaving the
//! bundle, device and fifo entries, too many entries or bytes — so that a
//! broken mirror is noticed, not silently half-used. setuid/setgid bits are
//! stripped (kept files are written 0644, `nv-hostengine` and `dcgmi` 0755).
//!
//! A library that claims to be DCGM (named `libdcgm.so*`, or with SONAME
//! `libdcgm.so.<N>`) must *be* DCGM by the same rule `check` applies
//! ([`crate::probe::dcgm::identify`]: SONAME `libdcgm.so.<N>` and the DCGM
//! entry points exported), or the bundle is refused before anything is
//! installed.
//!
//! Soname links are recreated from each library's ELF `SONAME`, plus the
//! unversioned `libdcgm.so` that DCGM-3-era clients `dlopen` (FACTS §1.3).

use std::cell::Cell;
use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::{self, BufRead, BufReader, Read};
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::atomic::AtomicBool;

use tracing::{debug, info, warn};

use super::files::{
    write_new, InstalledFile, InstalledLink, Interruptible, Unpacked, BIN_MODE, LIB_MODE,
};
use super::options::{test_pause, Limits};
use crate::arch::Arch;
use crate::probe::dcgm::{self, ENTRY_POINTS};
use crate::probe::elf::{self, ElfType};

/// Reads from the bundle file (and a `.deb`'s data member) in pieces this
/// big: fewer system calls and decoder calls than the default 8 KiB.
const READ_BUFFER: usize = 256 << 10;

/// Compression or container of a bundle, from its first bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// `ar` archive carrying `data.tar.{gz,xz,zst}` (Debian package).
    Deb,
    Gzip,
    Xz,
    Zstd,
    /// An uncompressed POSIX/GNU tar.
    Tar,
}

/// Detects the format from the first bytes (at least 262 for a bare tar).
pub fn detect(magic: &[u8]) -> Option<Format> {
    if magic.starts_with(b"!<arch>\n") {
        Some(Format::Deb)
    } else if magic.starts_with(&[0x1f, 0x8b]) {
        Some(Format::Gzip)
    } else if magic.starts_with(&[0xfd, b'7', b'z', b'X', b'Z', 0x00]) {
        Some(Format::Xz)
    } else if magic.starts_with(&[0x28, 0xb5, 0x2f, 0xfd]) {
        Some(Format::Zstd)
    } else if magic.len() >= 262 && &magic[257..262] == b"ustar" {
        Some(Format::Tar)
    } else {
        None
    }
}

#[derive(Debug, Clone, Copy)]
pub struct UnpackOptions {
    pub arch: Arch,
    pub with_hostengine: bool,
    pub limits: Limits,
}

#[derive(Debug, thiserror::Error)]
pub enum UnpackError {
    #[error("cannot read the bundle '{path}'")]
    Read {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("'{path}' is not a bundle we know: expected a .deb or a tar.gz/.tgz/.tar.xz/.tar.zst (by magic bytes)")]
    UnknownFormat { path: PathBuf },
    #[error("'{path}' is a .deb without a data.tar.{{gz,xz,zst}} member")]
    NoDataTar { path: PathBuf },
    #[error("'{member}' in '{path}' uses an unknown compression")]
    UnknownCompression { path: PathBuf, member: String },
    #[error("bundle member '{member}': absolute paths are not allowed")]
    AbsolutePath { member: String },
    #[error("bundle member '{member}': '..' is not allowed in paths")]
    DotDot { member: String },
    #[error("bundle member '{member}': symlink to '{target}' points outside the bundle")]
    SymlinkOutside { member: String, target: String },
    #[error("bundle member '{member}': hardlink to '{target}' points outside the bundle")]
    HardlinkOutside { member: String, target: String },
    #[error("bundle member '{member}': {kind} entries are not allowed")]
    Special { member: String, kind: &'static str },
    #[error("bundle has more than {limit} entries (at '{member}'): refusing a possible decompression bomb")]
    TooManyEntries { member: String, limit: u64 },
    #[error("bundle unpacks to more than {limit} bytes (at '{member}'): refusing a possible decompression bomb")]
    TooManyBytes { member: String, limit: u64 },
    #[error("bundle member '{member}': another member already provided '{name}'")]
    Duplicate { member: String, name: String },
    #[error("bundle member '{member}': cannot extract to '{path}'")]
    Extract {
        member: String,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cannot create '{path}' in the staging directory")]
    Staging {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("bundle file '{name}' is not a usable ELF file")]
    Elf {
        name: String,
        #[source]
        source: elf::InspectFileError,
    },
    #[error("bundle file '{name}' is built for {found}, but the target is {expected}")]
    WrongArch {
        name: String,
        expected: Arch,
        found: String,
    },
    #[error("bundle file '{name}' is a {found:?}, expected a {expected}")]
    WrongType {
        name: String,
        expected: &'static str,
        found: ElfType,
    },
    #[error(
        "bundle '{path}' contains no libdcgm.so.N (a shared object with SONAME libdcgm.so.<major>)"
    )]
    NoLibdcgm { path: PathBuf },
    #[error("bundle file '{name}' is named like DCGM but is not DCGM: {why}")]
    NotDcgm { name: String, why: String },
    #[error("bundle file '{name}' has SONAME '{soname}', which is not a plain file name")]
    BadSoname { name: String, soname: String },
    #[error("bundle files '{first}' and '{second}' both have SONAME '{soname}'")]
    SonameClash {
        soname: String,
        first: String,
        second: String,
    },
}

/// Where a kept member goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Dest {
    Lib,
    Bin,
}

impl Dest {
    fn dir(self) -> &'static str {
        match self {
            Dest::Lib => "lib",
            Dest::Bin => "bin",
        }
    }

    fn mode(self) -> u32 {
        match self {
            Dest::Lib => LIB_MODE,
            Dest::Bin => BIN_MODE,
        }
    }
}

/// Which members we keep, by base name: `libdcgm.so*`, `libdcgmmodule*.so*`,
/// and, when asked for, `nv-hostengine` with `dcgmi` next to it (the
/// client `accelready hostengine` and `check --engine` use to count the GPUs
/// the engine sees).
fn keep(name: &str, with_hostengine: bool) -> Option<Dest> {
    let is_libdcgm = name == "libdcgm.so" || name.starts_with("libdcgm.so.");
    let is_module = name.starts_with("libdcgmmodule") && name.contains(".so");
    if is_libdcgm || is_module {
        Some(Dest::Lib)
    } else if with_hostengine && (name == "nv-hostengine" || name == "dcgmi") {
        Some(Dest::Bin)
    } else {
        None
    }
}

/// Unpacks `archive` into `staging` (created; must not exist) and checks it.
pub fn unpack(
    archive: &Path,
    staging: &Path,
    options: &UnpackOptions,
) -> Result<Unpacked, UnpackError> {
    unpack_cancellable(archive, staging, options, &AtomicBool::new(false))
}

/// [`unpack`], stopping with an error at the next read once `cancel` is set.
pub fn unpack_cancellable(
    archive: &Path,
    staging: &Path,
    options: &UnpackOptions,
    cancel: &AtomicBool,
) -> Result<Unpacked, UnpackError> {
    let read_error = |source| UnpackError::Read {
        path: archive.to_path_buf(),
        source,
    };
    for dir in [
        staging.to_path_buf(),
        staging.join("lib"),
        staging.join("bin"),
    ] {
        fs::create_dir(&dir).map_err(|source| UnpackError::Staging { path: dir, source })?;
    }
    let mut reader =
        BufReader::with_capacity(READ_BUFFER, File::open(archive).map_err(read_error)?);
    let format = detect(reader.fill_buf().map_err(read_error)?).ok_or_else(|| {
        UnpackError::UnknownFormat {
            path: archive.to_path_buf(),
        }
    })?;
    info!(bundle = %archive.display(), format = ?format, "unpacking bundle");
    let mut extractor = Extractor::new(staging, options);
    if format == Format::Deb {
        let mut deb = ar::Archive::new(reader);
        let mut found = false;
        while let Some(member) = deb.next_entry() {
            let member = member.map_err(read_error)?;
            let name = String::from_utf8_lossy(member.header().identifier()).into_owned();
            if !name.starts_with("data.tar") {
                continue;
            }
            let mut data = BufReader::with_capacity(READ_BUFFER, member);
            let magic = data.fill_buf().map_err(read_error)?;
            let format = detect(magic).ok_or_else(|| UnpackError::UnknownCompression {
                path: archive.to_path_buf(),
                member: name.clone(),
            })?;
            extractor.tar(Interruptible {
                inner: decompress(format, data),
                cancel,
            })?;
            found = true;
            break;
        }
        if !found {
            return Err(UnpackError::NoDataTar {
                path: archive.to_path_buf(),
            });
        }
    } else {
        extractor.tar(Interruptible {
            inner: decompress(format, reader),
            cancel,
        })?;
    }
    extractor.finish(archive)
}

fn decompress<'a, R: BufRead + 'a>(format: Format, reader: R) -> Box<dyn Read + 'a> {
    match format {
        Format::Gzip => Box::new(flate2::bufread::MultiGzDecoder::new(reader)),
        Format::Xz => Box::new(xz2::bufread::XzDecoder::new_multi_decoder(reader)),
        Format::Zstd => match zstd::stream::read::Decoder::with_buffer(reader) {
            Ok(decoder) => Box::new(decoder),
            Err(e) => Box::new(FailingReader(Some(e))),
        },
        Format::Tar | Format::Deb => Box::new(reader),
    }
}

/// A reader that reports one error: defers a decoder set-up failure to the
/// first read, where it gets the member's context.
struct FailingReader(Option<io::Error>);

impl Read for FailingReader {
    fn read(&mut self, _: &mut [u8]) -> io::Result<usize> {
        Err(self
            .0
            .take()
            .unwrap_or_else(|| io::Error::other("decoder failed")))
    }
}

/// Tar bytes allowed per entry besides its declared size: its 512-byte
/// header, padding to 512, and extension headers (a long name or link, PAX
/// records: a few KiB in real archives), with room to spare.
const ENTRY_OVERHEAD: u64 = 64 << 10;

/// The tar stream, refusing to hand out more than `allowance` bytes in all.
struct Metered<R> {
    inner: R,
    read: u64,
    allowance: Rc<Cell<u64>>,
}

/// The error a [`Metered`] stream gives past its allowance.
#[derive(Debug, thiserror::Error)]
#[error("the tar stream is larger than its entries declare (extension headers?)")]
struct OverAllowance;

impl<R: Read> Read for Metered<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let room = self.allowance.get().saturating_sub(self.read);
        if room == 0 && !buf.is_empty() {
            return Err(io::Error::other(OverAllowance));
        }
        let take = buf.len().min(usize::try_from(room).unwrap_or(usize::MAX));
        let n = self.inner.read(&mut buf[..take])?;
        self.read += n as u64;
        Ok(n)
    }
}

/// Whether `error` (or one it wraps: the tar crate wraps read errors) is
/// a [`Metered`] stream's refusal.
fn is_over_allowance(error: &io::Error) -> bool {
    let mut current: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(e) = current {
        if e.is::<OverAllowance>() {
            return true;
        }
        if let Some(io) = e.downcast_ref::<io::Error>() {
            if let Some(inner) = io.get_ref() {
                if inner.is::<OverAllowance>() {
                    return true;
                }
            }
        }
        current = e.source();
    }
    false
}

struct Extractor<'a> {
    staging: &'a Path,
    options: &'a UnpackOptions,
    entries: u64,
    /// Declared sizes of all entries so far (checked before reading one).
    bytes: u64,
    /// Bytes actually written: a hardlink copy writes more than its header
    /// declares (0).
    written: u64,
    /// Kept base name -> (destination, archive member it came from).
    kept: BTreeMap<String, (Dest, String)>,
    /// Kept files in archive order, with their digests.
    files: Vec<(Dest, String, String, u64)>,
}

impl<'a> Extractor<'a> {
    fn new(staging: &'a Path, options: &'a UnpackOptions) -> Self {
        Extractor {
            staging,
            options,
            entries: 0,
            bytes: 0,
            written: 0,
            kept: BTreeMap::new(),
            files: Vec::new(),
        }
    }

    fn tar(&mut self, reader: impl Read) -> Result<(), UnpackError> {
        // The tar crate reads GNU long-name/long-link and PAX headers whole
        // into memory and never shows them as entries, so `count` cannot
        // see them: the stream itself is metered, allowing the declared
        // sizes counted so far plus `ENTRY_OVERHEAD` per entry.
        let allowance = Rc::new(Cell::new(ENTRY_OVERHEAD));
        let mut archive = tar::Archive::new(Metered {
            inner: reader,
            read: 0,
            allowance: Rc::clone(&allowance),
        });
        let limit = self.options.limits.max_unpacked_bytes;
        let mut last = String::from("<start of the archive>");
        let read_error = |source: io::Error, last: &str| {
            if is_over_allowance(&source) {
                UnpackError::TooManyBytes {
                    member: format!("headers after '{last}'"),
                    limit,
                }
            } else {
                UnpackError::Read {
                    path: PathBuf::from("<bundle tar stream>"),
                    source,
                }
            }
        };
        let entries = archive
            .entries()
            .map_err(|source| read_error(source, &last))?;
        for entry in entries {
            let mut entry = entry.map_err(|source| read_error(source, &last))?;
            let member = String::from_utf8_lossy(&entry.path_bytes()).into_owned();
            self.count(&member, entry.header().entry_size().unwrap_or(u64::MAX))?;
            allowance.set(
                self.bytes
                    .saturating_add((self.entries + 1).saturating_mul(ENTRY_OVERHEAD)),
            );
            last.clone_from(&member);
            check_path(&member)?;
            let kind = entry.header().entry_type();
            let name = base_name(&member).to_owned();
            let dest = keep(&name, self.options.with_hostengine);
            if kind.is_symlink() {
                let target = link_target(&entry);
                check_symlink(&member, &target)?;
                debug!(
                    member,
                    target, "archive symlink (soname links are rebuilt from ELF)"
                );
            } else if kind.is_hard_link() {
                let target = link_target(&entry);
                check_hardlink(&member, &target)?;
                if let Some(dest) = dest {
                    self.copy_hardlink(&member, &name, dest, &target)?;
                }
            } else if kind.is_character_special() || kind.is_block_special() {
                return Err(UnpackError::Special {
                    member,
                    kind: "device",
                });
            } else if kind.is_fifo() {
                return Err(UnpackError::Special {
                    member,
                    kind: "fifo",
                });
            } else if kind.is_file() || kind.is_contiguous() {
                if let Some(dest) = dest {
                    let mode = entry.header().mode().unwrap_or(0);
                    if mode & 0o6000 != 0 {
                        warn!(
                            member,
                            mode = format!("{mode:o}"),
                            "stripping setuid/setgid bits"
                        );
                    }
                    self.extract(&member, &name, dest, &mut entry)?;
                }
            }
        }
        Ok(())
    }

    fn count(&mut self, member: &str, size: u64) -> Result<(), UnpackError> {
        let limits = &self.options.limits;
        self.entries += 1;
        if self.entries > limits.max_entries {
            return Err(UnpackError::TooManyEntries {
                member: member.to_owned(),
                limit: limits.max_entries,
            });
        }
        self.bytes = self.bytes.saturating_add(size);
        if self.bytes > limits.max_unpacked_bytes {
            return Err(UnpackError::TooManyBytes {
                member: member.to_owned(),
                limit: limits.max_unpacked_bytes,
            });
        }
        Ok(())
    }

    fn claim(&mut self, member: &str, name: &str, dest: Dest) -> Result<PathBuf, UnpackError> {
        if self.kept.contains_key(name) {
            return Err(UnpackError::Duplicate {
                member: member.to_owned(),
                name: name.to_owned(),
            });
        }
        self.kept.insert(name.to_owned(), (dest, member.to_owned()));
        Ok(self.staging.join(dest.dir()).join(name))
    }

    fn extract(
        &mut self,
        member: &str,
        name: &str,
        dest: Dest,
        content: &mut impl Read,
    ) -> Result<(), UnpackError> {
        let path = self.claim(member, name, dest)?;
        let limit = self.options.limits.max_unpacked_bytes;
        let budget = limit.saturating_sub(self.written);
        let (sha256, size) = write_new(
            &path,
            dest.mode(),
            &mut content.take(budget.saturating_add(1)),
        )
        .map_err(|source| UnpackError::Extract {
            member: member.to_owned(),
            path: path.clone(),
            source,
        })?;
        if size > budget {
            let _ = fs::remove_file(&path);
            return Err(UnpackError::TooManyBytes {
                member: member.to_owned(),
                limit,
            });
        }
        self.written += size;
        debug!(member, to = %path.display(), size, "kept");
        self.files.push((dest, name.to_owned(), sha256, size));
        test_pause("unpack-partial");
        Ok(())
    }

    /// A hardlink to a kept file becomes a copy of it (flattening loses the
    /// link, and two names for one inode buy nothing here).
    fn copy_hardlink(
        &mut self,
        member: &str,
        name: &str,
        dest: Dest,
        target: &str,
    ) -> Result<(), UnpackError> {
        let target_name = base_name(target);
        let Some(target_dest) = self.kept.get(target_name).map(|(dest, _)| *dest) else {
            warn!(
                member,
                target, "hardlink to a file that was not kept; skipping"
            );
            return Ok(());
        };
        let source = self.staging.join(target_dest.dir()).join(target_name);
        let mut content = File::open(&source).map_err(|source_error| UnpackError::Extract {
            member: member.to_owned(),
            path: source.clone(),
            source: source_error,
        })?;
        self.extract(member, name, dest, &mut content)
    }

    /// Checks every kept ELF file, rebuilds the soname links, fsyncs.
    fn finish(self, archive: &Path) -> Result<Unpacked, UnpackError> {
        let arch = self.options.arch;
        let mut unpacked = Unpacked::default();
        let mut sonames: BTreeMap<String, String> = BTreeMap::new();
        for (dest, name, sha256, size) in &self.files {
            let relative = format!("{}/{name}", dest.dir());
            let path = self.staging.join(&relative);
            let info = elf::inspect_file(&path).map_err(|source| UnpackError::Elf {
                name: relative.clone(),
                source,
            })?;
            if info.arch != Some(arch) {
                return Err(UnpackError::WrongArch {
                    name: relative,
                    expected: arch,
                    found: info.arch.map_or_else(
                        || format!("ELF machine {}", info.machine),
                        |a| a.to_string(),
                    ),
                });
            }
            let (ok, expected) = match dest {
                Dest::Lib => (info.elf_type.is_shared_object(), "shared object"),
                Dest::Bin => (info.elf_type.is_executable(), "executable"),
            };
            if !ok {
                return Err(UnpackError::WrongType {
                    name: relative,
                    expected,
                    found: info.elf_type,
                });
            }
            let claims_dcgm = name == dcgm::UNVERSIONED
                || name.starts_with("libdcgm.so.")
                || info.soname.as_deref().is_some_and(dcgm::is_dcgm_soname);
            if *dest == Dest::Lib && claims_dcgm {
                let missing =
                    elf::missing_exports_in_file(&path, &ENTRY_POINTS).map_err(|source| {
                        UnpackError::Elf {
                            name: relative.clone(),
                            source,
                        }
                    })?;
                if let Err(not_dcgm) = dcgm::identify(info.soname.as_deref(), None, missing) {
                    return Err(UnpackError::NotDcgm {
                        name: relative,
                        why: not_dcgm.describe(),
                    });
                }
            }
            if let (Dest::Lib, Some(soname)) = (dest, &info.soname) {
                // The soname becomes a link name in lib/: never a path.
                if !is_plain_file_name(soname) {
                    return Err(UnpackError::BadSoname {
                        name: relative,
                        soname: soname.clone(),
                    });
                }
                if let Some(first) = sonames.insert(soname.clone(), name.clone()) {
                    return Err(UnpackError::SonameClash {
                        soname: soname.clone(),
                        first,
                        second: name.clone(),
                    });
                }
            }
            unpacked.files.push(InstalledFile {
                path: relative,
                soname: info.soname.clone(),
                arch,
                size: *size,
                sha256: sha256.clone(),
            });
        }
        let lib = self.staging.join("lib");
        for (soname, file) in &sonames {
            if soname != file {
                add_link(&lib, soname, file, &mut unpacked)?;
            }
        }
        let libdcgm = sonames
            .keys()
            .find(|soname| dcgm::is_dcgm_soname(soname))
            .ok_or_else(|| UnpackError::NoLibdcgm {
                path: archive.to_path_buf(),
            })?;
        add_link(&lib, "libdcgm.so", libdcgm, &mut unpacked)?;
        for dir in [lib, self.staging.join("bin"), self.staging.to_path_buf()] {
            crate::fsutil::sync_dir(&dir)
                .map_err(|source| UnpackError::Staging { path: dir, source })?;
        }
        Ok(unpacked)
    }
}

/// A name that stays in the directory it is joined to: not empty, not `.` or
/// `..`, no `/` and no NUL.
fn is_plain_file_name(name: &str) -> bool {
    !name.is_empty() && name != "." && name != ".." && !name.contains(['/', '\0'])
}

/// Creates `lib/<name> -> <target>` unless `name` already exists (a real file
/// of that name wins).
fn add_link(
    lib: &Path,
    name: &str,
    target: &str,
    unpacked: &mut Unpacked,
) -> Result<(), UnpackError> {
    let path = lib.join(name);
    if fs::symlink_metadata(&path).is_ok() {
        return Ok(());
    }
    symlink(target, &path).map_err(|source| UnpackError::Staging { path, source })?;
    unpacked.links.push(InstalledLink {
        path: format!("lib/{name}"),
        target: target.to_owned(),
    });
    Ok(())
}

fn link_target<R: Read>(entry: &tar::Entry<'_, R>) -> String {
    entry
        .link_name_bytes()
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_default()
}

fn base_name(member: &str) -> &str {
    member
        .trim_end_matches('/')
        .rsplit('/')
        .next()
        .unwrap_or(member)
}

/// Rejects absolute member paths and any `..` component.
pub fn check_path(member: &str) -> Result<(), UnpackError> {
    if member.starts_with('/') {
        return Err(UnpackError::AbsolutePath {
            member: member.to_owned(),
        });
    }
    if member.split('/').any(|part| part == "..") {
        return Err(UnpackError::DotDot {
            member: member.to_owned(),
        });
    }
    Ok(())
}

/// A symlink's target, relative to the link's directory, must stay inside
/// the bundle.
pub fn check_symlink(member: &str, target: &str) -> Result<(), UnpackError> {
    let parent: Vec<&str> = parts(member);
    let base = &parent[..parent.len().saturating_sub(1)];
    if target.starts_with('/') || climbs_out(base, target) {
        return Err(UnpackError::SymlinkOutside {
            member: member.to_owned(),
            target: target.to_owned(),
        });
    }
    Ok(())
}

/// A hardlink's target is relative to the archive root and must stay in it.
pub fn check_hardlink(member: &str, target: &str) -> Result<(), UnpackError> {
    if target.starts_with('/') || climbs_out(&[], target) {
        return Err(UnpackError::HardlinkOutside {
            member: member.to_owned(),
            target: target.to_owned(),
        });
    }
    Ok(())
}

fn parts(path: &str) -> Vec<&str> {
    path.split('/')
        .filter(|p| !p.is_empty() && *p != ".")
        .collect()
}

/// Whether resolving `target` from directory `base` (archive-relative) goes
/// above the archive root.
fn climbs_out(base: &[&str], target: &str) -> bool {
    let mut depth = base.len();
    for part in parts(target) {
        if part == ".." {
            if depth == 0 {
                return true;
            }
            depth -= 1;
        } else {
            depth += 1;
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_by_magic() {
        let mut tar = vec![0u8; 512];
        tar[257..262].copy_from_slice(b"ustar");
        for (magic, format) in [
            (&b"!<arch>\ndebian-binary"[..], Some(Format::Deb)),
            (&[0x1f, 0x8b, 8, 0][..], Some(Format::Gzip)),
            (&[0xfd, b'7', b'z', b'X', b'Z', 0, 0][..], Some(Format::Xz)),
            (&[0x28, 0xb5, 0x2f, 0xfd, 0][..], Some(Format::Zstd)),
            (&tar[..], Some(Format::Tar)),
            (&b"PK\x03\x04"[..], None),
            (&b""[..], None),
        ] {
            assert_eq!(detect(magic), format, "{magic:?}");
        }
    }

    #[test]
    fn kept_names() {
        for (name, dest) in [
            ("libdcgm.so.4.6.1", Some(Dest::Lib)),
            ("libdcgm.so.4", Some(Dest::Lib)),
            ("libdcgm.so", Some(Dest::Lib)),
            ("libdcgmmodulehealth.so.4", Some(Dest::Lib)),
            ("libdcgm_cublas_proxy12.so.4", None),
            ("dcgmi", None),
            ("nv-hostengine", None),
        ] {
            assert_eq!(keep(name, false), dest, "{name}");
        }
        assert_eq!(keep("nv-hostengine", true), Some(Dest::Bin));
        assert_eq!(keep("dcgmi", true), Some(Dest::Bin));
        assert_eq!(keep("nvvs", true), None);
    }

    #[test]
    fn path_rules() {
        assert!(check_path("./usr/lib/libdcgm.so.4").is_ok());
        assert!(matches!(
            check_path("/etc/passwd"),
            Err(UnpackError::AbsolutePath { .. })
        ));
        assert!(matches!(
            check_path("usr/../../x"),
            Err(UnpackError::DotDot { .. })
        ));
        assert!(check_symlink("./usr/lib/a/libdcgm.so.4", "libdcgm.so.4.6.1").is_ok());
        assert!(check_symlink("usr/lib/a/x", "../../../usr/bin/y").is_ok());
        assert!(check_symlink("usr/lib/x", "../../../etc/shadow").is_err());
        assert!(check_symlink("usr/lib/x", "/etc/shadow").is_err());
        assert!(check_hardlink("usr/lib/x", "./usr/lib/y").is_ok());
        assert!(check_hardlink("usr/lib/x", "../y").is_err());
        assert!(check_hardlink("usr/lib/x", "/y").is_err());
    }
}
