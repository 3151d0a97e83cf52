//! Expose: bind-mount the installed version read-only at a host path under
//! `/mnt` (the only place whose mounts propagate from a bootstrap container to
//! the host, FACTS §3), read-only in this namespace *and* in the copies that
//! propagate to the host (see [`mount_read_only`]).
//! Idempotent: an existing read-only bind of the same directory is left alone;
//! a bind of another (older) version is replaced.

use std::fs;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::mount::{mount, umount2, MntFlags, MsFlags};
use serde::Serialize;
use tracing::info;

/// Where this process's mount table is.
const MOUNTINFO: &str = "/proc/self/mountinfo";

/// What [`expose`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ExposeOutcome {
    Mounted,
    /// A read-only bind of this version was already there.
    AlreadyMounted,
    /// A bind of another version was replaced.
    Replaced,
}

impl ExposeOutcome {
    pub fn as_str(self) -> &'static str {
        match self {
            ExposeOutcome::Mounted => "mounted",
            ExposeOutcome::AlreadyMounted => "already mounted",
            ExposeOutcome::Replaced => "replaced an older mount",
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ExposeError {
    #[error("cannot create the mount point '{path}'")]
    MountPoint {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cannot read the mount table {MOUNTINFO}")]
    MountTable(#[source] io::Error),
    #[error("not permitted to mount at '{path}': bind mounts need CAP_SYS_ADMIN (run as root, or in a privileged/bootstrap container), or pass --no-expose")]
    NotPermitted { path: PathBuf },
    #[error("cannot {action} '{path}'")]
    Mount {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: Errno,
    },
}

/// One line of `/proc/self/mountinfo`, the fields we use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountEntry {
    /// Path of the mount point in this process's namespace.
    pub mount_point: PathBuf,
    /// Per-mount options (`ro`/`rw`, ...).
    pub options: Vec<String>,
}

impl MountEntry {
    pub fn read_only(&self) -> bool {
        self.options.iter().any(|o| o == "ro")
    }
}

/// Parses `/proc/<pid>/mountinfo` (proc(5)); malformed lines are skipped.
pub fn parse_mountinfo(text: &str) -> Vec<MountEntry> {
    text.lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split(' ').collect();
            let mount_point = fields.get(4)?;
            let options = fields.get(5)?;
            Some(MountEntry {
                mount_point: PathBuf::from(unescape(mount_point)),
                options: options.split(',').map(str::to_owned).collect(),
            })
        })
        .collect()
}

/// Undoes the kernel's octal escapes (`\040` for a space, ...).
fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes
            .get(i + 1..i + 4)
            .filter(|d| bytes[i] == b'\\' && d.iter().all(|b| (b'0'..=b'7').contains(b)));
        if let Some(digits) = octal {
            let value = digits.iter().fold(0u32, |v, d| v * 8 + u32::from(d - b'0'));
            out.push(u8::try_from(value).unwrap_or(b'?'));
            i += 4;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Bind-mounts `source` read-only at `target` (both paths on this machine).
pub fn expose(source: &Path, target: &Path) -> Result<ExposeOutcome, ExposeError> {
    fs::create_dir_all(target).map_err(|e| ExposeError::MountPoint {
        path: target.to_path_buf(),
        source: e,
    })?;
    let table = fs::read_to_string(MOUNTINFO).map_err(ExposeError::MountTable)?;
    let existing = parse_mountinfo(&table)
        .into_iter()
        .rev()
        .find(|entry| entry.mount_point == target);
    let mut outcome = ExposeOutcome::Mounted;
    if let Some(entry) = existing {
        if entry.read_only() && same_directory(source, target) {
            return Ok(ExposeOutcome::AlreadyMounted);
        }
        info!(at = %target.display(), "replacing the existing mount");
        umount2(target, MntFlags::MNT_DETACH).map_err(|e| mount_error("unmount", target, e))?;
        outcome = ExposeOutcome::Replaced;
    }
    mount_read_only(source, target)?;
    Ok(outcome)
}

/// Binds `source` at `target` so that the mount is read-only *everywhere it
/// propagates*. A read-only remount changes only the one mount it is applied
/// to; the copies that a shared `/mnt` propagates to the host are made at bind
/// time and would stay writable. So: bind `source` at a private staging
/// point next to it, make that read-only, then bind the staging mount (whose
/// copies inherit read-only) at `target`, and drop the staging mount.
fn mount_read_only(source: &Path, target: &Path) -> Result<(), ExposeError> {
    let staging = source
        .parent()
        .unwrap_or(Path::new("/"))
        .join(format!(".expose-staging-{}", std::process::id()));
    fs::create_dir_all(&staging).map_err(|e| ExposeError::MountPoint {
        path: staging.clone(),
        source: e,
    })?;
    let result = (|| {
        bind(source, &staging)?;
        let private = MsFlags::MS_PRIVATE;
        mount(None::<&str>, &staging, None::<&str>, private, None::<&str>)
            .map_err(|e| mount_error("make private", &staging, e))?;
        remount_read_only(&staging)?;
        bind(&staging, target)?;
        if let Err(e) = remount_read_only(target) {
            // Never leave a writable exposure behind.
            let _ = umount2(target, MntFlags::MNT_DETACH);
            return Err(e);
        }
        Ok(())
    })();
    let _ = umount2(&staging, MntFlags::MNT_DETACH);
    let _ = fs::remove_dir(&staging);
    // The operator asked for `target`; name it, not our staging point.
    result.map_err(|e| match e {
        ExposeError::NotPermitted { .. } => ExposeError::NotPermitted {
            path: target.to_path_buf(),
        },
        other => other,
    })
}

fn bind(source: &Path, target: &Path) -> Result<(), ExposeError> {
    mount(
        Some(source),
        target,
        None::<&str>,
        MsFlags::MS_BIND,
        None::<&str>,
    )
    .map_err(|e| mount_error("bind-mount onto", target, e))
}

fn remount_read_only(target: &Path) -> Result<(), ExposeError> {
    let read_only = MsFlags::MS_BIND | MsFlags::MS_REMOUNT | MsFlags::MS_RDONLY;
    mount(None::<&str>, target, None::<&str>, read_only, None::<&str>)
        .map_err(|e| mount_error("remount read-only", target, e))
}

fn same_directory(a: &Path, b: &Path) -> bool {
    match (fs::metadata(a), fs::metadata(b)) {
        (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
        _ => false,
    }
}

/// EPERM means no CAP_SYS_ADMIN: say so, with the path.
pub fn mount_error(action: &'static str, path: &Path, errno: Errno) -> ExposeError {
    if errno == Errno::EPERM {
        ExposeError::NotPermitted {
            path: path.to_path_buf(),
        }
    } else {
        ExposeError::Mount {
            action,
            path: path.to_path_buf(),
            source: errno,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = "\
22 1 259:1 / / rw,relatime shared:1 - ext4 /dev/root rw
98 22 259:3 /var/lib/accelready/dcgm/ab /mnt/accelready/dcgm ro,relatime shared:40 - ext4 /dev/nvme1n1p1 rw
99 22 0:50 / /mnt/with\\040space rw - tmpfs tmpfs rw
";

    #[test]
    fn mountinfo_fields_and_escapes() {
        let entries = parse_mountinfo(SAMPLE);
        assert_eq!(entries.len(), 3);
        assert_eq!(
            entries[1].mount_point,
            PathBuf::from("/mnt/accelready/dcgm")
        );
        assert!(entries[1].read_only());
        assert!(!entries[0].read_only());
        assert_eq!(entries[2].mount_point, PathBuf::from("/mnt/with space"));
        assert!(parse_mountinfo("garbage\n").is_empty());
    }

    #[test]
    fn eperm_names_the_path_and_the_capability() {
        let e = mount_error(
            "bind-mount onto",
            Path::new("/mnt/accelready/dcgm"),
            Errno::EPERM,
        );
        let text = e.to_string();
        assert!(
            text.contains("/mnt/accelready/dcgm") && text.contains("CAP_SYS_ADMIN"),
            "{text}"
        );
        let other = mount_error("bind-mount onto", Path::new("/mnt/x"), Errno::ENOENT);
        assert!(matches!(other, ExposeError::Mount { .. }));
    }
}
