//! Is DCGM loadable on the host? Finds every `libdcgm.so.4`, `libdcgm.so.3`
//! and `libdcgm.so` in the library directories, follows each symlink inside
//! the host root, inspects the ELF file it lands on, and gives one precise
//! [`DcgmStatus`] with the paths involved.
//!
//! A file counts as DCGM only if it *is* DCGM ([`identify`]): its SONAME is
//! `libdcgm.so.<N>` and it exports [`ENTRY_POINTS`]. A copy of an unrelated
//! library saved as `libdcgm.so.4` is `not-dcgm`, not `present`.

use std::fs;
use std::path::{Path, PathBuf};

use serde::Serialize;
use tracing::{debug, info};

use super::driver::display_dirs;
use super::elf::{self, ElfClass, ElfError, ElfInfo, ElfType, InspectFileError};
use crate::arch::Arch;
use crate::host::{HostRoot, ResolveError};

/// The names we look for, best first. `libdcgm.so` is what DCGM-3-era clients
/// (go-dcgm <= 3.3.9, the EKS node monitoring agent before v1.6.0) `dlopen`;
/// go-dcgm for DCGM 4 loads `libdcgm.so.4` (FACTS §1.3).
pub const DCGM_NAMES: [&str; 3] = ["libdcgm.so.4", "libdcgm.so.3", UNVERSIONED];
pub const UNVERSIONED: &str = "libdcgm.so";

/// The entry points that make a library DCGM: the "Init and Shutdown" group
/// of DCGM's public API (NVIDIA/DCGM `dcgmlib/dcgm_agent.h`,
/// `DCGMAPI_Admin_InitShut`, the same in DCGM 3 and 4), which is exactly what
/// every DCGM client resolves first. go-dcgm's `pkg/dcgm/admin.go` (v3.3.9,
/// which `dlopen`s `libdcgm.so`, and the DCGM 4 bindings, which load
/// `libdcgm.so.4`) calls `dcgmInit`, then `dcgmConnect_v2` (standalone, the
/// EKS node monitoring agent's mode) or `dcgmStartEmbedded` (embedded), and on
/// shutdown `dcgmDisconnect` / `dcgmStopEmbedded` and `dcgmShutdown`. A file
/// without them fails in the client at its first call, whatever its name.
/// All six are `global:` in the linker version script that shapes
/// `libdcgm.so`'s dynamic symbol table (NVIDIA/DCGM `dcgmlib/dcgmlib.linux_def`,
/// commit 1477d87; an anonymous version node, so `.dynsym` holds the plain
/// names).
pub const ENTRY_POINTS: [&str; 6] = [
    "dcgmInit",
    "dcgmShutdown",
    "dcgmConnect_v2",
    "dcgmDisconnect",
    "dcgmStartEmbedded",
    "dcgmStopEmbedded",
];

/// `libdcgm.so.<digits>`: the SONAME of every DCGM build (`libdcgm.so.4`,
/// `libdcgm.so.3`).
pub fn is_dcgm_soname(soname: &str) -> bool {
    soname
        .strip_prefix("libdcgm.so.")
        .is_some_and(|major| !major.is_empty() && major.bytes().all(|b| b.is_ascii_digit()))
}

/// What [`NotDcgm::expected_soname`] says when any major will do.
pub const ANY_DCGM_SONAME: &str = "libdcgm.so.<N>";

/// Why an ELF shared object is not DCGM: the SONAME it has and the one
/// expected, and the [`ENTRY_POINTS`] it does not export.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotDcgm {
    pub soname: Option<String>,
    /// `libdcgm.so.4`, or `libdcgm.so.<N>` when any major will do.
    pub expected_soname: String,
    /// The entry points it does not export (empty when only the SONAME is wrong).
    pub missing_symbols: Vec<String>,
}

/// Whether an inspected shared object is DCGM: its SONAME is `expected`
/// (`Some("libdcgm.so.4")`) or, with `None`, any `libdcgm.so.<N>`; and
/// `missing` (what [`elf::missing_exports`] found absent of
/// [`ENTRY_POINTS`]) is empty.
pub fn identify(
    soname: Option<&str>,
    expected: Option<&str>,
    missing: Vec<String>,
) -> Result<(), NotDcgm> {
    let soname_ok = soname.is_some_and(|soname| match expected {
        Some(expected) => soname == expected,
        None => is_dcgm_soname(soname),
    });
    if soname_ok && missing.is_empty() {
        return Ok(());
    }
    Err(NotDcgm {
        soname: soname.map(str::to_owned),
        expected_soname: expected.unwrap_or(ANY_DCGM_SONAME).to_owned(),
        missing_symbols: missing,
    })
}

impl NotDcgm {
    /// "SONAME 'libz.so.1' (expected libdcgm.so.4); does not export dcgmInit, ..."
    pub fn describe(&self) -> String {
        let matches = |soname: &str| {
            soname == self.expected_soname
                || (self.expected_soname == ANY_DCGM_SONAME && is_dcgm_soname(soname))
        };
        let soname = match &self.soname {
            Some(soname) if matches(soname) => format!("SONAME '{soname}'"),
            Some(soname) => format!("SONAME '{soname}' (expected {})", self.expected_soname),
            None => format!("no SONAME (expected {})", self.expected_soname),
        };
        if self.missing_symbols.is_empty() {
            format!("{soname}; exports the DCGM entry points")
        } else {
            format!(
                "{soname}; does not export the DCGM entry point(s) {}",
                self.missing_symbols.join(", ")
            )
        }
    }
}

/// Why DCGM is or is not usable. Serialized as `"status": "<kebab-case>"` plus
/// a `"detail"` object with the variant's fields.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "status", content = "detail", rename_all = "kebab-case")]
pub enum DcgmStatus {
    /// A usable DCGM library.
    Present,
    /// No `libdcgm.so*` in any library directory.
    Missing,
    /// The library is built for another architecture (or ELF class).
    WrongArch {
        path: PathBuf,
        found: String,
        expected: Arch,
    },
    /// A symlink on the way points at nothing.
    Dangling { link: PathBuf, target: PathBuf },
    /// The file is not an ELF file (or is truncated / malformed, or not a file).
    NotElf { path: PathBuf, reason: String },
    /// An ELF file, but not a shared object (e.g. an executable).
    NotSharedObject { path: PathBuf, found: ElfType },
    /// DT_NEEDED libraries that no library directory holds.
    MissingDependency { path: PathBuf, needed: Vec<String> },
    /// A shared object of the right architecture that is not DCGM: another
    /// SONAME, or the DCGM entry points are not exported ([`identify`]).
    NotDcgm {
        path: PathBuf,
        /// The SONAME the file has.
        soname: Option<String>,
        expected_soname: String,
        missing_symbols: Vec<String>,
    },
    /// Cannot be read: permissions, a symlink loop, an I/O error.
    Unreadable { path: PathBuf, reason: String },
}

impl DcgmStatus {
    pub fn is_present(&self) -> bool {
        *self == DcgmStatus::Present
    }

    /// The status's JSON name (`wrong-arch`, ...).
    pub fn name(&self) -> &'static str {
        match self {
            DcgmStatus::Present => "present",
            DcgmStatus::Missing => "missing",
            DcgmStatus::WrongArch { .. } => "wrong-arch",
            DcgmStatus::Dangling { .. } => "dangling",
            DcgmStatus::NotElf { .. } => "not-elf",
            DcgmStatus::NotSharedObject { .. } => "not-shared-object",
            DcgmStatus::MissingDependency { .. } => "missing-dependency",
            DcgmStatus::NotDcgm { .. } => "not-dcgm",
            DcgmStatus::Unreadable { .. } => "unreadable",
        }
    }

    /// One line for an operator.
    pub fn describe(&self) -> String {
        match self {
            DcgmStatus::Present => "usable".into(),
            DcgmStatus::Missing => "no libdcgm.so.4, libdcgm.so.3 or libdcgm.so found".into(),
            DcgmStatus::WrongArch {
                path,
                found,
                expected,
            } => format!(
                "'{}' is built for {found}, this host needs {expected}",
                path.display()
            ),
            DcgmStatus::Dangling { link, target } => format!(
                "'{}' is a dangling symlink: '{}' does not exist",
                link.display(),
                target.display()
            ),
            DcgmStatus::NotElf { path, reason } => {
                format!("'{}' is not an ELF shared object: {reason}", path.display())
            }
            DcgmStatus::NotSharedObject { path, found } => format!(
                "'{}' is an ELF {}, not a shared object",
                path.display(),
                elf_type_name(*found)
            ),
            DcgmStatus::MissingDependency { path, needed } => format!(
                "'{}' needs {}, which no library directory holds as a 64-bit library of its \
                 architecture",
                path.display(),
                needed.join(", ")
            ),
            DcgmStatus::NotDcgm {
                path,
                soname,
                expected_soname,
                missing_symbols,
            } => {
                let why = NotDcgm {
                    soname: soname.clone(),
                    expected_soname: expected_soname.clone(),
                    missing_symbols: missing_symbols.clone(),
                };
                format!(
                    "'{}' is not DCGM: {} (a copy of another library under a DCGM name?)",
                    path.display(),
                    why.describe()
                )
            }
            DcgmStatus::Unreadable { path, reason } => {
                format!("cannot read '{}': {reason}", path.display())
            }
        }
    }
}

/// One `libdcgm.so*` found in a library directory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Candidate {
    /// Host path where it was found (`<lib dir>/<name>`).
    pub path: PathBuf,
    /// Which of [`DCGM_NAMES`] it is.
    pub name: &'static str,
    /// Host path of the file after following symlinks, when they resolve.
    pub resolved: Option<PathBuf>,
    pub soname: Option<String>,
    /// Full version from the file names on the way (`4.6.1` for `libdcgm.so.4.6.1`).
    pub version: Option<String>,
    #[serde(flatten)]
    pub status: DcgmStatus,
}

/// What the probe found out about DCGM.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DcgmReport {
    #[serde(flatten)]
    pub status: DcgmStatus,
    /// Host path of the chosen library (the usable one, or the best broken one).
    pub path: Option<PathBuf>,
    pub soname: Option<String>,
    pub version: Option<String>,
    /// Every reason something is wrong, the verdict's first.
    pub problems: Vec<String>,
    /// What is fine for current clients but not for every client: a usable
    /// `libdcgm.so.N` without a usable unversioned `libdcgm.so` (DCGM-3-era
    /// clients). Never changes the verdict.
    pub warnings: Vec<String>,
    /// Every hit, best first.
    pub candidates: Vec<Candidate>,
    /// The directories searched (host paths).
    pub searched: Vec<PathBuf>,
}

/// Where to look and what to expect.
#[derive(Debug, Clone)]
pub struct Search<'a> {
    pub arch: Arch,
    /// Where `libdcgm.so*` may be (host paths).
    pub dirs: &'a [PathBuf],
    /// Where DT_NEEDED dependencies may be, besides the library's own directory.
    pub dependency_dirs: &'a [PathBuf],
}

/// Probes DCGM on `host`.
pub fn probe(host: &HostRoot, search: &Search<'_>) -> DcgmReport {
    let candidates = find_candidates(host, search);
    let (status, chosen) = decide(&candidates);
    let mut problems = Vec::new();
    match &status {
        DcgmStatus::Present => {}
        DcgmStatus::Missing => problems.push(format!(
            "no libdcgm.so.4, libdcgm.so.3 or libdcgm.so in {}",
            display_dirs(search.dirs)
        )),
        other => problems.push(other.describe()),
    }
    for candidate in &candidates {
        let line = candidate.status.describe();
        if !candidate.status.is_present() && !problems.contains(&line) {
            problems.push(line);
        }
    }
    let warnings = warnings(&candidates, chosen);
    let chosen = chosen.map(|i| &candidates[i]);
    info!(
        status = status.name(),
        path = %chosen.map_or(Path::new("-"), |c| &c.path).display(),
        candidates = candidates.len(),
        "probed DCGM"
    );
    DcgmReport {
        path: chosen.map(|c| c.path.clone()),
        soname: chosen.and_then(|c| c.soname.clone()),
        version: chosen.and_then(|c| c.version.clone()),
        status,
        problems,
        warnings,
        candidates,
        searched: search.dirs.to_vec(),
    }
}

/// DCGM-3-era clients — go-dcgm <= v3.3.9, as in the EKS node monitoring
/// agent before v1.6.0 — `dlopen("libdcgm.so")` (FACTS §1.3). NVIDIA's
/// `datacenter-gpu-manager-4-core` has no such link, and no current client
/// needs it: agents v1.6.0+ load the `libdcgm.so.4` in their own image
/// (FACTS §7.4), and a DCGM-3-era agent fails against DCGM 4 anyway (§7.3).
/// So its absence next to a usable `libdcgm.so.N` is a warning, not a verdict.
fn warnings(candidates: &[Candidate], chosen: Option<usize>) -> Vec<String> {
    let Some(chosen) = chosen.map(|i| &candidates[i]) else {
        return Vec::new();
    };
    if !chosen.status.is_present() || chosen.name == UNVERSIONED {
        return Vec::new();
    }
    if candidates
        .iter()
        .any(|c| c.name == UNVERSIONED && c.status.is_present())
    {
        return Vec::new();
    }
    let clients = "DCGM-3-era clients (go-dcgm <= v3.3.9, such as the EKS node monitoring agent \
                   before v1.6.0) dlopen(\"libdcgm.so\") and fail with 'libdcgm.so not Found'; \
                   current clients (agent v1.6.0+, go-dcgm for DCGM 4) load libdcgm.so.4 and \
                   are not affected";
    let name = chosen
        .path
        .file_name()
        .unwrap_or_default()
        .to_string_lossy();
    let warning = match candidates.iter().find(|c| c.name == UNVERSIONED) {
        Some(broken) => format!(
            "'{}' is {}, so only '{name}' is usable: {clients}",
            broken.path.display(),
            broken.status.name()
        ),
        None => format!(
            "no unversioned libdcgm.so next to '{}': {clients}. `accelready provision` adds \
             the link (libdcgm.so -> {name}); a DCGM-3-era agent still fails against DCGM 4 and \
             must be upgraded",
            chosen.path.display()
        ),
    };
    vec![warning]
}

/// Picks the verdict from the candidates (best first), and which one it is about.
///
/// A usable `libdcgm.so.4` wins, else `libdcgm.so.3`, else a usable
/// unversioned `libdcgm.so`: any of them is `present`. Whether the
/// unversioned name is there too is a warning (`warnings`), not a verdict:
/// no current client loads it. Otherwise the best candidate's own problem is
/// the verdict.
pub fn decide(candidates: &[Candidate]) -> (DcgmStatus, Option<usize>) {
    let usable = |name: &str| {
        candidates
            .iter()
            .position(|c| c.name == name && c.status.is_present())
    };
    if let Some(i) = DCGM_NAMES.into_iter().find_map(usable) {
        return (DcgmStatus::Present, Some(i));
    }
    match candidates.first() {
        Some(best) => (best.status.clone(), Some(0)),
        None => (DcgmStatus::Missing, None),
    }
}

/// Every `libdcgm.so*` in the search directories, best name first, then in
/// directory order. A directory reached twice (e.g. `/lib64 -> /usr/lib`) is
/// searched once.
fn find_candidates(host: &HostRoot, search: &Search<'_>) -> Vec<Candidate> {
    let mut seen_dirs = Vec::new();
    let mut dirs = Vec::new();
    for dir in search.dirs {
        let Ok(resolved) = host.resolve(dir) else {
            debug!(dir = %dir.display(), "library directory does not exist");
            continue;
        };
        if !seen_dirs.contains(&resolved.host_path) {
            seen_dirs.push(resolved.host_path.clone());
            dirs.push((dir, resolved.real_path));
        }
    }
    let mut candidates = Vec::new();
    for name in DCGM_NAMES {
        for (dir, real_dir) in &dirs {
            // symlink_metadata: a dangling link is a hit too.
            if fs::symlink_metadata(real_dir.join(name)).is_ok() {
                candidates.push(inspect_candidate(host, search, dir.join(name), name));
            }
        }
    }
    candidates
}

fn inspect_candidate(
    host: &HostRoot,
    search: &Search<'_>,
    path: PathBuf,
    name: &'static str,
) -> Candidate {
    let mut candidate = Candidate {
        path: path.clone(),
        name,
        resolved: None,
        soname: None,
        version: file_version(name),
        status: DcgmStatus::Present,
    };
    let resolved = match host.resolve(&path) {
        Ok(resolved) => resolved,
        Err(ResolveError::Dangling { link, target }) => {
            candidate.status = DcgmStatus::Dangling { link, target };
            return candidate;
        }
        Err(ResolveError::NotFound { path: missing }) => {
            candidate.status = DcgmStatus::Dangling {
                link: path,
                target: missing,
            };
            return candidate;
        }
        Err(e) => {
            candidate.status = DcgmStatus::Unreadable {
                path,
                reason: e.to_string(),
            };
            return candidate;
        }
    };
    let names = resolved
        .links
        .iter()
        .flat_map(|(link, target)| [link.as_path(), target.as_path()])
        .chain([resolved.host_path.as_path()]);
    for file in names.filter_map(|p| p.file_name()) {
        if let Some(v) = file_version(&file.to_string_lossy()) {
            if candidate
                .version
                .as_ref()
                .is_none_or(|best| v.len() > best.len())
            {
                candidate.version = Some(v);
            }
        }
    }
    candidate.resolved = Some(resolved.host_path.clone());
    let file = resolved.host_path;
    let info = match inspect_regular_file(&resolved.real_path, &file) {
        Ok(info) => info,
        Err(status) => {
            candidate.status = status;
            return candidate;
        }
    };
    candidate.soname = info.soname.clone();
    candidate.status = judge(host, search, name, (&resolved.real_path, &file), &info);
    debug!(path = %candidate.path.display(), status = candidate.status.name(), "inspected DCGM candidate");
    candidate
}

/// Reads the ELF headers of a regular file; anything else gets its reason.
fn inspect_regular_file(real: &Path, host_path: &Path) -> Result<ElfInfo, DcgmStatus> {
    let not_elf = |reason: &str| DcgmStatus::NotElf {
        path: host_path.to_path_buf(),
        reason: reason.to_owned(),
    };
    let meta = fs::metadata(real).map_err(|e| DcgmStatus::Unreadable {
        path: host_path.to_path_buf(),
        reason: e.to_string(),
    })?;
    if meta.is_dir() {
        return Err(not_elf("it is a directory"));
    }
    if !meta.is_file() {
        // A FIFO would block on open; a device is never a library.
        return Err(not_elf("it is not a regular file"));
    }
    elf::inspect_file(real).map_err(|e| match e {
        InspectFileError::Open { source, .. } => DcgmStatus::Unreadable {
            path: host_path.to_path_buf(),
            reason: source.to_string(),
        },
        InspectFileError::Elf {
            source: ElfError::NotElf,
            ..
        } => not_elf("no ELF magic"),
        InspectFileError::Elf {
            source: ElfError::Malformed(why),
            ..
        } => not_elf(&format!("truncated or malformed ELF: {why}")),
    })
}

/// Architecture, type, identity and dependencies of an inspected file found
/// as `name`; `(real, file)` are where it is on this machine and on the host.
fn judge(
    host: &HostRoot,
    search: &Search<'_>,
    name: &str,
    (real, file): (&Path, &Path),
    info: &ElfInfo,
) -> DcgmStatus {
    if info.arch != Some(search.arch) || info.class != ElfClass::Elf64 {
        let machine = info.arch.map_or_else(
            || format!("ELF machine {}", info.machine),
            |a| a.to_string(),
        );
        let found = match info.class {
            ElfClass::Elf64 => machine,
            ElfClass::Elf32 => format!("32-bit {machine}"),
        };
        return DcgmStatus::WrongArch {
            path: file.to_path_buf(),
            found,
            expected: search.arch,
        };
    }
    if !info.elf_type.is_shared_object() {
        return DcgmStatus::NotSharedObject {
            path: file.to_path_buf(),
            found: info.elf_type,
        };
    }
    if info.soname.is_none() {
        // Every DCGM build has one; without a dynamic section nothing can load it.
        return DcgmStatus::NotElf {
            path: file.to_path_buf(),
            reason: "a shared object without a SONAME (no dynamic section): not a DCGM build"
                .into(),
        };
    }
    // `libdcgm.so.4` must be DCGM 4; the unversioned name may be any major.
    let expected = (name != UNVERSIONED).then_some(name);
    let missing = match elf::missing_exports_in_file(real, &ENTRY_POINTS) {
        Ok(missing) => missing,
        Err(InspectFileError::Open { source, .. }) => {
            return DcgmStatus::Unreadable {
                path: file.to_path_buf(),
                reason: source.to_string(),
            }
        }
        Err(InspectFileError::Elf { source, .. }) => {
            return DcgmStatus::NotElf {
                path: file.to_path_buf(),
                reason: format!("unreadable dynamic symbol table: {source}"),
            }
        }
    };
    if let Err(not_dcgm) = identify(info.soname.as_deref(), expected, missing) {
        return DcgmStatus::NotDcgm {
            path: file.to_path_buf(),
            soname: not_dcgm.soname,
            expected_soname: not_dcgm.expected_soname,
            missing_symbols: not_dcgm.missing_symbols,
        };
    }
    // $ORIGIN first, then the configured directories.
    let origin = file.parent().map(Path::to_path_buf).into_iter();
    let dirs: Vec<PathBuf> = origin
        .chain(search.dependency_dirs.iter().cloned())
        .collect();
    let missing: Vec<String> = info
        .needed
        .iter()
        .filter(|needed| super::driver::find_library(host, &dirs, needed, search.arch).is_none())
        .cloned()
        .collect();
    if missing.is_empty() {
        DcgmStatus::Present
    } else {
        DcgmStatus::MissingDependency {
            path: file.to_path_buf(),
            needed: missing,
        }
    }
}

fn elf_type_name(elf_type: ElfType) -> String {
    match elf_type {
        ElfType::SharedObject => "shared object".into(),
        ElfType::PieExecutable => "position-independent executable".into(),
        ElfType::Executable => "executable".into(),
        ElfType::Relocatable => "relocatable object".into(),
        ElfType::Core => "core dump".into(),
        ElfType::Other(t) => format!("file of type {t}"),
    }
}

/// The version in a DCGM file name: `4.6.1` for `libdcgm.so.4.6.1`, `4` for
/// `libdcgm.so.4`, `None` for `libdcgm.so` or any other name.
pub fn file_version(file_name: &str) -> Option<String> {
    let version = file_name.strip_prefix("libdcgm.so.")?;
    let valid = version
        .split('.')
        .all(|part| !part.is_empty() && part.chars().all(|c| c.is_ascii_digit()));
    valid.then(|| version.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_from_file_names() {
        for (name, want) in [
            ("libdcgm.so.4.6.1", Some("4.6.1")),
            ("libdcgm.so.4", Some("4")),
            ("libdcgm.so.3.3.9", Some("3.3.9")),
            ("libdcgm.so", None),
            ("libdcgm.so.", None),
            ("libdcgm.so.4.x", None),
            ("libdcgm.so.4..1", None),
            ("libnvidia-ml.so.1", None),
        ] {
            assert_eq!(file_version(name).as_deref(), want, "{name}");
        }
    }

    fn candidate(name: &'static str, status: DcgmStatus) -> Candidate {
        Candidate {
            path: PathBuf::from("/usr/lib64").join(name),
            name,
            resolved: None,
            soname: None,
            version: None,
            status,
        }
    }

    fn broken(path: &str) -> DcgmStatus {
        DcgmStatus::NotElf {
            path: path.into(),
            reason: "no ELF magic".into(),
        }
    }

    #[test]
    fn decide_prefers_usable_dcgm4_and_does_not_need_the_unversioned_name() {
        use DcgmStatus::*;
        let table: Vec<(Vec<Candidate>, DcgmStatus, Option<usize>)> = vec![
            (vec![], Missing, None),
            (
                vec![
                    candidate("libdcgm.so.4", Present),
                    candidate(UNVERSIONED, Present),
                ],
                Present,
                Some(0),
            ),
            (vec![candidate("libdcgm.so.4", Present)], Present, Some(0)),
            (
                vec![
                    candidate("libdcgm.so.4", broken("/a")),
                    candidate("libdcgm.so.4", Present),
                    candidate(UNVERSIONED, Present),
                ],
                Present,
                Some(1),
            ),
            (
                vec![
                    candidate("libdcgm.so.3", Present),
                    candidate(UNVERSIONED, Present),
                ],
                Present,
                Some(0),
            ),
            (vec![candidate("libdcgm.so.3", Present)], Present, Some(0)),
            (
                vec![
                    candidate("libdcgm.so.3", Present),
                    candidate(UNVERSIONED, broken("/u")),
                ],
                Present,
                Some(0),
            ),
            (
                vec![
                    candidate("libdcgm.so.4", broken("/a")),
                    candidate("libdcgm.so.3", Present),
                ],
                Present,
                Some(1),
            ),
            (
                vec![
                    candidate("libdcgm.so.4", broken("/a")),
                    candidate("libdcgm.so.3", broken("/b")),
                ],
                broken("/a"),
                Some(0),
            ),
            (vec![candidate(UNVERSIONED, Present)], Present, Some(0)),
            (
                vec![
                    candidate("libdcgm.so.4", broken("/a")),
                    candidate(UNVERSIONED, Present),
                ],
                Present,
                Some(1),
            ),
        ];
        for (candidates, status, chosen) in table {
            assert_eq!(decide(&candidates), (status, chosen), "{candidates:?}");
        }
    }

    #[test]
    fn a_missing_or_broken_unversioned_link_is_a_warning_naming_dcgm3_clients() {
        use DcgmStatus::*;
        let warn = |candidates: Vec<Candidate>| {
            let (_, chosen) = decide(&candidates);
            warnings(&candidates, chosen)
        };
        let missing = warn(vec![candidate("libdcgm.so.4", Present)]);
        assert_eq!(missing.len(), 1);
        assert!(missing[0].contains("no unversioned libdcgm.so next to '/usr/lib64/libdcgm.so.4'"));
        assert!(missing[0].contains("go-dcgm <= v3.3.9"), "{missing:?}");
        assert!(missing[0].contains("before v1.6.0"), "{missing:?}");
        assert!(missing[0].contains("libdcgm.so not Found"), "{missing:?}");
        let dangling = warn(vec![
            candidate("libdcgm.so.3", Present),
            candidate(UNVERSIONED, broken("/u")),
        ]);
        assert!(
            dangling[0].contains("'/usr/lib64/libdcgm.so' is not-elf"),
            "{dangling:?}"
        );
        // Nothing to warn about: both names usable, only the unversioned one,
        // or nothing usable at all (that is the verdict's business).
        for quiet in [
            vec![
                candidate("libdcgm.so.4", Present),
                candidate(UNVERSIONED, Present),
            ],
            vec![candidate(UNVERSIONED, Present)],
            vec![candidate("libdcgm.so.4", broken("/a"))],
            vec![],
        ] {
            assert_eq!(warn(quiet.clone()), Vec::<String>::new(), "{quiet:?}");
        }
    }

    #[test]
    fn identity_needs_the_soname_and_every_entry_point() {
        let none: Vec<String> = Vec::new();
        assert_eq!(
            identify(Some("libdcgm.so.4"), Some("libdcgm.so.4"), none.clone()),
            Ok(())
        );
        assert_eq!(identify(Some("libdcgm.so.3"), None, none.clone()), Ok(()));
        let cases = [
            (Some("libz.so.1"), Some("libdcgm.so.4"), vec!["dcgmInit"], "SONAME 'libz.so.1' (expected libdcgm.so.4); does not export the DCGM entry point(s) dcgmInit"),
            (Some("libdcgm.so.3"), Some("libdcgm.so.4"), vec![], "SONAME 'libdcgm.so.3' (expected libdcgm.so.4); exports the DCGM entry points"),
            (Some("libdcgm.so.4"), None, vec!["dcgmConnect_v2", "dcgmShutdown"], "SONAME 'libdcgm.so.4'; does not export the DCGM entry point(s) dcgmConnect_v2, dcgmShutdown"),
            (Some("libdcgm.so"), None, vec![], "SONAME 'libdcgm.so' (expected libdcgm.so.<N>)"),
            (None, None, vec![], "no SONAME (expected libdcgm.so.<N>)"),
        ];
        for (soname, expected, missing, text) in cases {
            let missing: Vec<String> = missing.into_iter().map(String::from).collect();
            let error = identify(soname, expected, missing).unwrap_err();
            assert!(
                error.describe().starts_with(text),
                "{soname:?}: {}",
                error.describe()
            );
        }
    }

    #[test]
    fn dcgm_sonames() {
        assert!(is_dcgm_soname("libdcgm.so.4"));
        assert!(is_dcgm_soname("libdcgm.so.3"));
        assert!(!is_dcgm_soname("libdcgm.so"));
        assert!(!is_dcgm_soname("libdcgm.so.4.6.1"));
        assert!(!is_dcgm_soname("libdcgmmodulehealth.so.4"));
    }

    #[test]
    fn status_serializes_kebab_case_with_detail() {
        let status = DcgmStatus::WrongArch {
            path: "/usr/lib64/libdcgm.so.4".into(),
            found: "x86_64".into(),
            expected: Arch::Aarch64,
        };
        let json = serde_json::to_value(&status).unwrap();
        assert_eq!(json["status"], "wrong-arch");
        assert_eq!(json["detail"]["expected"], "aarch64");
        let path = PathBuf::from("/x");
        let reason = String::new();
        for status in [
            DcgmStatus::Present,
            DcgmStatus::Missing,
            status.clone(),
            DcgmStatus::Dangling {
                link: path.clone(),
                target: path.clone(),
            },
            DcgmStatus::NotElf {
                path: path.clone(),
                reason: reason.clone(),
            },
            DcgmStatus::NotSharedObject {
                path: path.clone(),
                found: ElfType::Executable,
            },
            DcgmStatus::MissingDependency {
                path: path.clone(),
                needed: vec![],
            },
            DcgmStatus::NotDcgm {
                path: path.clone(),
                soname: None,
                expected_soname: String::new(),
                missing_symbols: vec![],
            },
            DcgmStatus::Unreadable {
                path: path.clone(),
                reason: reason.clone(),
            },
        ] {
            assert_eq!(
                serde_json::to_value(&status).unwrap()["status"],
                status.name()
            );
        }
    }
}
