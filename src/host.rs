//! [`HostRoot`]: every host path is resolved through one root.
//!
//! Inside a Bottlerocket bootstrap container the host's `/` is at
//! `/.bottlerocket/rootfs`; on a workstation it is `/`; tests point it at a
//! temporary tree shaped like a Bottlerocket NVIDIA host. No code reads an
//! absolute host path directly: it asks the `HostRoot` for it.

use std::collections::VecDeque;
use std::ffi::OsString;
use std::fs;
use std::io;
use std::path::{Component, Path, PathBuf};

/// Where the host's `/` is seen from inside a Bottlerocket bootstrap container.
pub const BOTTLEROCKET_ROOTFS: &str = "/.bottlerocket/rootfs";

/// Linux gives up after 40 symlinks in one lookup (`MAXSYMLINKS`); so do we.
pub const MAX_SYMLINK_HOPS: usize = 40;

/// The host's root directory as this process sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostRoot {
    root: PathBuf,
}

/// A host path with its symlinks followed inside the [`HostRoot`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    /// The final path as the host sees it (absolute, no symlinks).
    pub host_path: PathBuf,
    /// Where that is on this machine (`root` + `host_path`).
    pub real_path: PathBuf,
    /// Each symlink followed on the way, as (link, target as written), host paths.
    pub links: Vec<(PathBuf, PathBuf)>,
}

/// Why a host path could not be resolved. Paths are host paths.
#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    #[error("'{path}' does not exist")]
    NotFound { path: PathBuf },
    #[error("'{link}' is a dangling symlink: its target '{target}' does not exist")]
    Dangling { link: PathBuf, target: PathBuf },
    #[error(
        "'{path}': too many levels of symlinks (more than {MAX_SYMLINK_HOPS}); is there a loop?"
    )]
    Loop { path: PathBuf },
    #[error("cannot inspect '{path}'")]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

impl HostRoot {
    pub fn new(root: impl Into<PathBuf>) -> Self {
        HostRoot { root: root.into() }
    }

    /// `/.bottlerocket/rootfs` when it exists (we run as a bootstrap
    /// container), else `/`.
    pub fn default_path() -> PathBuf {
        let rootfs = Path::new(BOTTLEROCKET_ROOTFS);
        if rootfs.is_dir() {
            rootfs.to_path_buf()
        } else {
            PathBuf::from("/")
        }
    }

    /// The directory that is the host's `/`.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Where host path `host_path` is on this machine, without following
    /// symlinks. `..` is resolved lexically and never climbs above the root.
    pub fn join(&self, host_path: impl AsRef<Path>) -> PathBuf {
        self.root.join(
            normalize(host_path.as_ref())
                .strip_prefix("/")
                .unwrap_or(Path::new("")),
        )
    }

    /// Follows every symlink in `host_path` the way the host kernel would, but
    /// inside the root: an absolute link target is relative to the host's `/`,
    /// and `..` never leaves the root.
    pub fn resolve(&self, host_path: impl AsRef<Path>) -> Result<Resolved, ResolveError> {
        let mut done: Vec<OsString> = Vec::new();
        let mut todo: VecDeque<OsString> = components(host_path.as_ref()).collect();
        let mut links = Vec::new();
        // The last link followed, and how many components came after its target.
        let mut last_link: Option<(PathBuf, PathBuf, usize)> = None;

        while let Some(part) = todo.pop_front() {
            if part == ".." {
                done.pop();
                continue;
            }
            done.push(part);
            let current = to_host_path(&done);
            let real = self.join(&current);
            let meta = match fs::symlink_metadata(&real) {
                Ok(meta) => meta,
                Err(e) if is_missing(&e) => {
                    return Err(match last_link {
                        // The missing piece came from the last link's target.
                        Some((link, target, rest)) if todo.len() >= rest => {
                            ResolveError::Dangling { link, target }
                        }
                        _ => ResolveError::NotFound { path: current },
                    });
                }
                Err(source) => {
                    return Err(ResolveError::Io {
                        path: current,
                        source,
                    })
                }
            };
            if !meta.file_type().is_symlink() {
                continue;
            }
            if links.len() >= MAX_SYMLINK_HOPS {
                return Err(ResolveError::Loop {
                    path: host_path.as_ref().to_path_buf(),
                });
            }
            let target = fs::read_link(&real).map_err(|source| ResolveError::Io {
                path: current.clone(),
                source,
            })?;
            links.push((current.clone(), target.clone()));
            last_link = Some((current, target.clone(), todo.len()));
            done.pop();
            if target.is_absolute() {
                done.clear();
            }
            for part in components(&target).rev() {
                todo.push_front(part);
            }
        }
        let host_path = to_host_path(&done);
        Ok(Resolved {
            real_path: self.join(&host_path),
            host_path,
            links,
        })
    }
}

/// `host_path` with `.` dropped and `..` applied lexically, always absolute.
pub fn normalize(host_path: &Path) -> PathBuf {
    let mut parts: Vec<OsString> = Vec::new();
    for part in components(host_path) {
        if part == ".." {
            parts.pop();
        } else {
            parts.push(part);
        }
    }
    to_host_path(&parts)
}

/// The normal and `..` components of a path; `/` and `.` are dropped.
fn components(path: &Path) -> impl DoubleEndedIterator<Item = OsString> + '_ {
    path.components().filter_map(|c| match c {
        Component::Normal(name) => Some(name.to_os_string()),
        Component::ParentDir => Some(OsString::from("..")),
        Component::RootDir | Component::CurDir | Component::Prefix(_) => None,
    })
}

fn to_host_path(parts: &[OsString]) -> PathBuf {
    let mut path = PathBuf::from("/");
    path.extend(parts);
    path
}

fn is_missing(e: &io::Error) -> bool {
    // ENOTDIR: a path component is a regular file, which is "missing" too.
    e.kind() == io::ErrorKind::NotFound || e.raw_os_error() == Some(nix::libc::ENOTDIR)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn tree() -> (tempfile::TempDir, HostRoot) {
        let dir = tempfile::tempdir().unwrap();
        let host = HostRoot::new(dir.path());
        fs::create_dir_all(host.join("/usr/lib64")).unwrap();
        fs::write(host.join("/usr/lib64/libdcgm.so.4.6.1"), b"x").unwrap();
        (dir, host)
    }

    #[test]
    fn join_never_climbs_above_the_root() {
        let host = HostRoot::new("/r");
        assert_eq!(host.join("/usr/lib"), PathBuf::from("/r/usr/lib"));
        assert_eq!(host.join("usr/../../../etc"), PathBuf::from("/r/etc"));
        assert_eq!(host.join("/"), PathBuf::from("/r"));
    }

    #[test]
    fn absolute_link_targets_are_inside_the_root() {
        let (_dir, host) = tree();
        symlink(
            "/usr/lib64/libdcgm.so.4.6.1",
            host.join("/usr/lib64/libdcgm.so.4"),
        )
        .unwrap();
        let resolved = host.resolve("/usr/lib64/libdcgm.so.4").unwrap();
        assert_eq!(
            resolved.host_path,
            PathBuf::from("/usr/lib64/libdcgm.so.4.6.1")
        );
        assert_eq!(resolved.real_path, host.join("/usr/lib64/libdcgm.so.4.6.1"));
        assert_eq!(resolved.links.len(), 1);
    }

    #[test]
    fn relative_links_and_dotdot_stay_inside() {
        let (_dir, host) = tree();
        symlink("libdcgm.so.4.6.1", host.join("/usr/lib64/libdcgm.so.4")).unwrap();
        symlink("libdcgm.so.4", host.join("/usr/lib64/libdcgm.so")).unwrap();
        // A link that tries to climb out lands on the host's own /usr.
        fs::create_dir_all(host.join("/usr/lib")).unwrap();
        symlink("../../../../../usr/lib64", host.join("/usr/lib/escape")).unwrap();
        let resolved = host.resolve("/usr/lib/escape/libdcgm.so").unwrap();
        assert_eq!(
            resolved.host_path,
            PathBuf::from("/usr/lib64/libdcgm.so.4.6.1")
        );
        assert_eq!(resolved.links.len(), 3);
    }

    #[test]
    fn dangling_link_names_link_and_target() {
        let (_dir, host) = tree();
        symlink(
            "/opt/dcgm/libdcgm.so.4",
            host.join("/usr/lib64/libdcgm.so.4"),
        )
        .unwrap();
        match host.resolve("/usr/lib64/libdcgm.so.4") {
            Err(ResolveError::Dangling { link, target }) => {
                assert_eq!(link, PathBuf::from("/usr/lib64/libdcgm.so.4"));
                assert_eq!(target, PathBuf::from("/opt/dcgm/libdcgm.so.4"));
            }
            other => panic!("expected dangling, got {other:?}"),
        }
    }

    #[test]
    fn missing_file_behind_a_good_directory_link_is_not_found() {
        let (_dir, host) = tree();
        symlink("/usr/lib64", host.join("/usr/lib")).unwrap();
        match host.resolve("/usr/lib/libdcgm.so.3") {
            Err(ResolveError::NotFound { path }) => {
                assert_eq!(path, PathBuf::from("/usr/lib64/libdcgm.so.3"))
            }
            other => panic!("expected not found, got {other:?}"),
        }
    }

    #[test]
    fn missing_plain_path_is_not_found() {
        let (_dir, host) = tree();
        assert!(matches!(
            host.resolve("/usr/lib64/libdcgm.so.3"),
            Err(ResolveError::NotFound { .. })
        ));
    }

    #[test]
    fn symlink_loops_are_reported() {
        let (_dir, host) = tree();
        symlink("b", host.join("/usr/lib64/a")).unwrap();
        symlink("a", host.join("/usr/lib64/b")).unwrap();
        assert!(matches!(
            host.resolve("/usr/lib64/a"),
            Err(ResolveError::Loop { .. })
        ));
    }

    #[test]
    fn normalize_is_lexical_and_absolute() {
        assert_eq!(
            normalize(Path::new("var/./lib/../lib/x")),
            PathBuf::from("/var/lib/x")
        );
        assert_eq!(normalize(Path::new("/../..")), PathBuf::from("/"));
    }
}
