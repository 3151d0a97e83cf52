//! The engine's files and command lines: which installed bundle to run, the
//! exact `nv-hostengine` / `dcgmi` invocations, and how they are started
//! against the host.
//!
//! **Against the host, by chroot.** The engine needs the host's glibc (our
//! image is `FROM scratch`), the host's `/dev/nvidia*` and the driver's NVML.
//! In a superpowered host container the host's `/` is at
//! `/.bottlerocket/rootfs` (rbind: `/dev`, `/proc`, `/sys`, `/var`, `/run` are
//! the host's own submounts, FACTS §7.1), so `chroot` into the [`HostRoot`]
//! gives the engine exactly the host's view, with paths that are host paths.
//! Joining PID 1's mount namespace (`setns`) would do the same on a node but
//! could never be tested against a fixture tree; with chroot, `--host-root`
//! points the engine at a test tree the same way it points every probe. When
//! the host root is `/` (accelready run directly on a host) there is nothing
//! to enter and no chroot is done.
//!
//! Every child is started with `PR_SET_PDEATHSIG = SIGKILL`: if the
//! supervisor dies without stopping it (host-ctr's SIGKILL after 20 s, a
//! crash), the engine dies too instead of lingering as an unsupervised engine
//! that the next supervisor would have to treat as someone else's. Each runs
//! in its own process group, so a signal meant for the supervisor's group
//! (Ctrl-C in a terminal) reaches the engine only through the supervisor.

use std::collections::BTreeSet;
use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, MutexGuard};

use serde::Serialize;

use crate::arch::Arch;
use crate::bundle::install::{self, Layout};
use crate::host::HostRoot;

/// Where the engine binds: loopback only. The DCGM API is unauthenticated and
/// host containers share the host's network namespace, so `-b ALL` would open
/// the GPUs to the whole VPC (FACTS §7.2).
pub const BIND_ADDRESS: &str = "127.0.0.1";
/// The engine's path inside a version directory.
pub const ENGINE: &str = "bin/nv-hostengine";
/// The DCGM command-line client's path inside a version directory.
pub const DCGMI: &str = "bin/dcgmi";
/// `PATH` for our children (host paths).
const CHILD_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// An installed, verified bundle that carries the engine. Paths are host paths.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Bundle {
    /// The bundle's sha256: the name of its version directory.
    pub sha256: String,
    /// `<install-dir>/<sha256>`.
    pub dir: PathBuf,
    pub engine: PathBuf,
    /// `bin/dcgmi`, when the bundle carried it.
    pub dcgmi: Option<PathBuf>,
    pub lib: PathBuf,
}

/// The version `<install-dir>/current` names (its link target), if any.
pub fn current_version(host: &HostRoot, install_dir: &Path) -> Option<String> {
    let link = host.join(install_dir.join(install::CURRENT));
    std::fs::read_link(link)
        .ok()
        .map(|target| target.to_string_lossy().into_owned())
}

/// The installed bundle `<install-dir>/current` points at, verified file by
/// file against its manifest, with `bin/nv-hostengine` in it. The error says,
/// for an operator, why there is none yet.
pub fn find_bundle(host: &HostRoot, install_dir: &Path, arch: Arch) -> Result<Bundle, String> {
    let current = install_dir.join(install::CURRENT);
    let Some(version) = current_version(host, install_dir) else {
        return Err(format!(
            "no DCGM bundle installed: '{}' does not exist (boot installs it with dcgm.provision = \"if-missing\")",
            current.display()
        ));
    };
    let is_digest = version.len() == 64 && version.bytes().all(|b| b.is_ascii_hexdigit());
    if !is_digest {
        return Err(format!(
            "'{}' points to '{version}', not to a version directory",
            current.display()
        ));
    }
    let layout = Layout::new(host.join(install_dir));
    let manifest = install::verify_installed(&layout, &version, arch)
        .map_err(|e| format!("the installed bundle does not verify: {e}"))?;
    let has = |path: &str| manifest.files.iter().any(|file| file.path == path);
    let dir = install_dir.join(&version);
    if !has(ENGINE) {
        return Err(if manifest.with_hostengine {
            format!(
                "the installed bundle {version} has no nv-hostengine: the bundle file does not contain one; pin a datacenter-gpu-manager-4-core package"
            )
        } else {
            format!(
                "the installed bundle {version} was installed without nv-hostengine (dcgm.with-hostengine was off when it was provisioned)"
            )
        });
    }
    Ok(Bundle {
        engine: dir.join(ENGINE),
        dcgmi: has(DCGMI).then(|| dir.join(DCGMI)),
        lib: dir.join("lib"),
        dir,
        sha256: version,
    })
}

/// A program to start against the host: what to exec (a host path), with
/// which arguments and environment, inside which root.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Launch {
    /// The directory to chroot into (on this machine); `None` when the host
    /// root is `/`.
    #[serde(skip)]
    pub root: Option<PathBuf>,
    /// argv[0], a host path.
    pub program: PathBuf,
    pub args: Vec<String>,
    pub ld_library_path: String,
}

impl Launch {
    /// The whole command line, program first.
    pub fn argv(&self) -> Vec<String> {
        std::iter::once(self.program.display().to_string())
            .chain(self.args.iter().cloned())
            .collect()
    }
}

/// `nv-hostengine -n -f - -b 127.0.0.1 -p <port>` (NVIDIA/DCGM
/// `hostengine/src/HostEngineCommandLine.cpp`): foreground (`-n`, no pid file),
/// log to stdout (`-f -`, which DCGM's logging treats as stdout), bound to
/// loopback on the policy's port.
pub fn engine_args(port: u16) -> Vec<String> {
    ["-n", "-f", "-", "-b", BIND_ADDRESS, "-p"]
        .into_iter()
        .map(str::to_owned)
        .chain(std::iter::once(port.to_string()))
        .collect()
}

/// `LD_LIBRARY_PATH` for the engine and dcgmi: the bundle's `lib/`
/// (`libdcgm.so.4`, and the modules it dlopens next to it), then the
/// directory where `check` found NVML. DCGM dlopens `libnvidia-ml.so.1` by
/// name and, failing that, only `/usr/lib64`, `/usr/lib64/nvidia`, `/usr/lib`,
/// `/usr/lib32` and `/usr/lib/nvidia`, never Bottlerocket's
/// `/usr/lib/nvidia/tesla` (FACTS §7.2).
pub fn library_path(lib: &Path, nvml_dir: Option<&Path>) -> String {
    let mut dirs = vec![lib.display().to_string()];
    if let Some(dir) = nvml_dir.filter(|dir| *dir != lib) {
        dirs.push(dir.display().to_string());
    }
    dirs.join(":")
}

/// The directory to chroot into: none when the host root is this machine's `/`.
pub fn chroot_dir(host: &HostRoot) -> Option<PathBuf> {
    let root = host.root();
    let is_slash = std::fs::canonicalize(root).is_ok_and(|real| real == Path::new("/"));
    (!is_slash).then(|| root.to_path_buf())
}

/// How to start the engine from `bundle` on `port`.
pub fn engine_launch(
    host: &HostRoot,
    bundle: &Bundle,
    nvml_dir: Option<&Path>,
    port: u16,
) -> Launch {
    Launch {
        root: chroot_dir(host),
        program: bundle.engine.clone(),
        args: engine_args(port),
        ld_library_path: library_path(&bundle.lib, nvml_dir),
    }
}

/// How to run `dcgmi discovery -l` against the engine at `address`
/// (`--host IP:PORT`: dcgmConnect takes an optional `:port`).
pub fn dcgmi_launch(
    host: &HostRoot,
    dcgmi: &Path,
    lib: &Path,
    nvml_dir: Option<&Path>,
    address: &str,
) -> Launch {
    Launch {
        root: chroot_dir(host),
        program: dcgmi.to_path_buf(),
        args: ["discovery", "-l", "--host", address]
            .into_iter()
            .map(str::to_owned)
            .collect(),
        ld_library_path: library_path(lib, nvml_dir),
    }
}

/// Pids of the children we wait for ourselves (the engine, a running
/// dcgmi): the orphan reaper leaves them alone. Held while spawning, so that
/// a child that exits at once is registered before the reaper can see it.
static OWNED: Mutex<BTreeSet<u32>> = Mutex::new(BTreeSet::new());

/// The owned-pid registry, locked.
pub fn owned() -> MutexGuard<'static, BTreeSet<u32>> {
    OWNED
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Forgets a child once it has been waited for.
pub fn disown(pid: u32) {
    owned().remove(&pid);
}

/// Starts `launch` (see the module docs: chroot, PDEATHSIG, own process
/// group, a clean environment) and registers its pid as owned.
pub fn spawn(launch: &Launch, stdout: Stdio, stderr: Stdio) -> io::Result<Child> {
    let root = launch
        .root
        .as_ref()
        .map(|root| CString::new(root.as_os_str().as_bytes()))
        .transpose()
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "host root contains NUL"))?;
    let parent = std::process::id();
    let mut command = Command::new(&launch.program);
    command
        .args(&launch.args)
        .env_clear()
        .env("PATH", CHILD_PATH)
        .env("LD_LIBRARY_PATH", &launch.ld_library_path)
        .stdin(Stdio::null())
        .stdout(stdout)
        .stderr(stderr)
        .process_group(0);
    // SAFETY: the closure runs in the forked child before exec and calls only
    // async-signal-safe functions (prctl, getppid, chroot, chdir) on data
    // prepared before the fork; it allocates nothing.
    unsafe {
        command.pre_exec(move || {
            use nix::libc;
            if libc::prctl(
                libc::PR_SET_PDEATHSIG,
                libc::SIGKILL as libc::c_ulong,
                0,
                0,
                0,
            ) != 0
            {
                return Err(io::Error::last_os_error());
            }
            // The supervisor may have died between fork and prctl.
            if libc::getppid() as u32 != parent {
                return Err(io::Error::other("the supervisor exited while starting"));
            }
            if let Some(root) = &root {
                if libc::chroot(root.as_ptr()) != 0 || libc::chdir(c"/".as_ptr()) != 0 {
                    return Err(io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
    let mut owned = owned();
    let child = command.spawn()?;
    owned.insert(child.id());
    Ok(child)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_engine_binds_loopback_in_the_foreground_and_logs_to_stdout() {
        assert_eq!(
            engine_args(5555),
            ["-n", "-f", "-", "-b", "127.0.0.1", "-p", "5555"]
        );
    }

    #[test]
    fn library_path_puts_the_bundle_before_nvml() {
        let lib = Path::new("/var/lib/accelready/dcgm/ab/lib");
        assert_eq!(
            library_path(lib, Some(Path::new("/usr/lib/nvidia/tesla"))),
            "/var/lib/accelready/dcgm/ab/lib:/usr/lib/nvidia/tesla"
        );
        assert_eq!(library_path(lib, None), "/var/lib/accelready/dcgm/ab/lib");
        assert_eq!(
            library_path(lib, Some(lib)),
            "/var/lib/accelready/dcgm/ab/lib"
        );
    }

    #[test]
    fn no_chroot_when_the_host_is_this_machine() {
        assert_eq!(chroot_dir(&HostRoot::new("/")), None);
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(
            chroot_dir(&HostRoot::new(dir.path())),
            Some(dir.path().to_path_buf())
        );
    }

    #[test]
    fn dcgmi_asks_the_engine_at_its_address() {
        let host = HostRoot::new("/");
        let launch = dcgmi_launch(
            &host,
            Path::new("/b/bin/dcgmi"),
            Path::new("/b/lib"),
            None,
            "127.0.0.1:5555",
        );
        assert_eq!(
            launch.argv(),
            [
                "/b/bin/dcgmi",
                "discovery",
                "-l",
                "--host",
                "127.0.0.1:5555"
            ]
        );
        assert_eq!(launch.ld_library_path, "/b/lib");
    }
}
