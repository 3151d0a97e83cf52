//! Host probes: is the NVIDIA driver there, and is DCGM loadable?
//!
//! [`probe`] is the library entry point (also used by `boot`): it reads the
//! host tree under a [`HostRoot`] and returns a typed [`CheckReport`]; it
//! prints nothing. `accelready check` (the command layer) prints it.

pub mod dcgm;
pub mod driver;
pub mod elf;

use std::io::{self, Write};
use std::path::PathBuf;

use serde::Serialize;
use tracing::info;

use crate::arch::Arch;
use crate::host::HostRoot;
use crate::report::{Exit, Report};

pub use dcgm::{DcgmReport, DcgmStatus};
pub use driver::DriverReport;

/// Where `accelready provision` installs DCGM (libraries in `current/lib`).
pub const DEFAULT_INSTALL_DIR: &str = "/var/lib/accelready/dcgm";

/// Where to look on the host, and for which architecture.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeConfig {
    pub arch: Arch,
    /// NVIDIA library directories (host paths), searched for NVML and DCGM.
    pub lib_dirs: Vec<PathBuf>,
    /// accelready's DCGM install directory (host path); its `current/lib` is
    /// searched for DCGM too.
    pub install_dir: PathBuf,
}

impl ProbeConfig {
    /// The default library directories for `arch` and the default install dir.
    pub fn new(arch: Arch) -> Self {
        ProbeConfig {
            arch,
            lib_dirs: Self::default_lib_dirs(arch),
            install_dir: PathBuf::from(DEFAULT_INSTALL_DIR),
        }
    }

    /// Bottlerocket's `/usr/lib/nvidia/tesla` first, then where other
    /// distributions put NVIDIA's libraries.
    pub fn default_lib_dirs(arch: Arch) -> Vec<PathBuf> {
        [
            "/usr/lib/nvidia/tesla".to_owned(),
            "/usr/lib64".to_owned(),
            "/usr/lib".to_owned(),
            format!("/usr/lib/{}", arch.gnu_triplet()),
            "/usr/local/nvidia/lib64".to_owned(),
        ]
        .into_iter()
        .map(PathBuf::from)
        .collect()
    }

    /// `<install-dir>/current/lib`, where provisioned `libdcgm.so*` live.
    pub fn install_lib_dir(&self) -> PathBuf {
        self.install_dir.join("current/lib")
    }

    /// Where DCGM is searched: the library directories, then the install dir.
    pub fn dcgm_dirs(&self) -> Vec<PathBuf> {
        let mut dirs = self.lib_dirs.clone();
        push_unique(&mut dirs, self.install_lib_dir());
        dirs
    }

    /// Where DT_NEEDED dependencies are searched (besides `$ORIGIN`): the DCGM
    /// directories, then the usual system directories.
    pub fn dependency_dirs(&self) -> Vec<PathBuf> {
        let triplet = self.arch.gnu_triplet();
        let mut dirs = self.dcgm_dirs();
        for dir in [
            "/lib".to_owned(),
            "/lib64".to_owned(),
            "/usr/lib".to_owned(),
            "/usr/lib64".to_owned(),
            format!("/usr/lib/{triplet}"),
            format!("/lib/{triplet}"),
        ] {
            push_unique(&mut dirs, PathBuf::from(dir));
        }
        dirs
    }
}

fn push_unique(dirs: &mut Vec<PathBuf>, dir: PathBuf) {
    if !dirs.contains(&dir) {
        dirs.push(dir);
    }
}

/// The overall answer, worst first: a missing driver hides DCGM's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Verdict {
    Ready,
    DcgmMissing,
    DcgmUnusable,
    DriverMissing,
}

impl Verdict {
    pub fn exit(self) -> Exit {
        match self {
            Verdict::Ready => Exit::Ready,
            Verdict::DcgmMissing => Exit::DcgmMissing,
            Verdict::DcgmUnusable => Exit::DcgmUnusable,
            Verdict::DriverMissing => Exit::DriverMissing,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Ready => "ready",
            Verdict::DcgmMissing => "dcgm-missing",
            Verdict::DcgmUnusable => "dcgm-unusable",
            Verdict::DriverMissing => "driver-missing",
        }
    }

    fn of(driver: &DriverReport, dcgm: &DcgmReport) -> Verdict {
        if !driver.is_usable() {
            Verdict::DriverMissing
        } else if dcgm.status == DcgmStatus::Missing {
            Verdict::DcgmMissing
        } else if dcgm.status.is_present() {
            Verdict::Ready
        } else {
            Verdict::DcgmUnusable
        }
    }
}

/// The result of `accelready check` (its JSON form is a documented contract).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CheckReport {
    pub verdict: Verdict,
    pub arch: Arch,
    pub host_root: PathBuf,
    pub driver: DriverReport,
    pub dcgm: DcgmReport,
}

/// Probes the driver and DCGM on `host`. Reads only headers and small
/// `/proc` files; never fails: what cannot be read is part of the report.
pub fn probe(host: &HostRoot, config: &ProbeConfig) -> CheckReport {
    let driver = driver::probe(host, &config.lib_dirs, config.arch);
    let dcgm_dirs = config.dcgm_dirs();
    let dependency_dirs = config.dependency_dirs();
    let dcgm = dcgm::probe(
        host,
        &dcgm::Search {
            arch: config.arch,
            dirs: &dcgm_dirs,
            dependency_dirs: &dependency_dirs,
        },
    );
    let verdict = Verdict::of(&driver, &dcgm);
    info!(verdict = verdict.as_str(), host_root = %host.root().display(), "check done");
    CheckReport {
        verdict,
        arch: config.arch,
        host_root: host.root().to_path_buf(),
        driver,
        dcgm,
    }
}

impl Report for CheckReport {
    fn write_text(&self, out: &mut dyn Write) -> io::Result<()> {
        let headline = match self.verdict {
            Verdict::Ready => "READY: the NVIDIA driver and DCGM are usable",
            Verdict::DcgmMissing => "DCGM MISSING: the driver is fine, no DCGM library found",
            Verdict::DcgmUnusable => "DCGM UNUSABLE: a DCGM library is there but cannot load",
            Verdict::DriverMissing => "DRIVER MISSING: the NVIDIA driver is not usable",
        };
        writeln!(out, "{headline} (exit {})", self.verdict.exit().code())?;
        writeln!(
            out,
            "host root {}  arch {}",
            self.host_root.display(),
            self.arch
        )?;

        let d = &self.driver;
        let module = match (&d.loaded, &d.version) {
            (true, Some(v)) => format!("nvidia {v} loaded"),
            (true, None) => "nvidia loaded (version unknown)".to_owned(),
            (false, _) => "nvidia module NOT loaded".to_owned(),
        };
        let nvml = d
            .nvml
            .as_ref()
            .map_or_else(|| "NOT found".to_owned(), |p| p.display().to_string());
        writeln!(
            out,
            "driver    {module}; {} GPU device node(s), {} NVIDIA GPU(s) on the PCI bus; NVML {nvml}",
            d.devices, d.gpus
        )?;
        for line in d.problems.iter().chain(&d.warnings) {
            writeln!(out, "          - {line}")?;
        }

        let c = &self.dcgm;
        let status = c.status.name();
        match &c.path {
            Some(path) => {
                let version = c.version.as_deref().unwrap_or("?");
                let soname = c.soname.as_deref().unwrap_or("?");
                writeln!(
                    out,
                    "dcgm      {status}: {} (soname {soname}, version {version})",
                    path.display()
                )?;
            }
            None => writeln!(out, "dcgm      {status}")?,
        }
        for line in &c.problems {
            writeln!(out, "          - {line}")?;
        }
        for line in &c.warnings {
            writeln!(out, "          ! {line}")?;
        }

        if matches!(self.verdict, Verdict::DcgmMissing | Verdict::DcgmUnusable) {
            writeln!(
                out,
                "impact    no DCGM host engine can run from this host's DCGM (accelready's \
                 nv-hostengine needs it). Where the EKS node monitoring agent monitors the node \
                 (amd64; arm64 from agent v1.7.2) and nothing else serves it on :5555, the agent \
                 sets AcceleratedHardwareReady=False (DCGMError) after its 1-minute grace; with \
                 Karpenter node repair on, the node is replaced 10 minutes later (see \
                 `accelready diagnose`)"
            )?;
        }
        if let Some(hint) = self.hint() {
            writeln!(out, "fix       {hint}")?;
        }
        Ok(())
    }
}

impl CheckReport {
    /// What an operator should do next, if anything.
    pub fn hint(&self) -> Option<String> {
        match (self.verdict, &self.dcgm.status) {
            (Verdict::Ready, _) => None,
            (Verdict::DriverMissing, _) if !self.driver.loaded => Some(
                "use an NVIDIA Bottlerocket variant (aws-k8s-*-nvidia) on a GPU instance; \
                 it loads the driver before bootstrap containers run"
                    .into(),
            ),
            (Verdict::DriverMissing, _) => Some(
                "the nvidia module is loaded but NVML is not in the library directories; \
                 if the driver's libraries live elsewhere, pass --lib-dir DIR"
                    .into(),
            ),
            (_, DcgmStatus::NotDcgm { path, .. }) => Some(format!(
                "'{}' carries a DCGM name but is not NVIDIA's libdcgm: remove it, and install \
                 a verified DCGM bundle with accelready provision (or boot with \
                 dcgm.provision = \"if-missing\"); it installs into {}",
                path.display(),
                DEFAULT_INSTALL_DIR
            )),
            _ => Some(format!(
                "provision a verified DCGM bundle for {}: accelready provision \
                 (or boot with dcgm.provision = \"if-missing\"); it installs into {}",
                self.arch, DEFAULT_INSTALL_DIR
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn default_directories() {
        let config = ProbeConfig::new(Arch::Aarch64);
        assert_eq!(config.lib_dirs[0], PathBuf::from("/usr/lib/nvidia/tesla"));
        assert!(config
            .lib_dirs
            .contains(&PathBuf::from("/usr/lib/aarch64-linux-gnu")));
        assert_eq!(
            config.dcgm_dirs().last(),
            Some(&PathBuf::from("/var/lib/accelready/dcgm/current/lib"))
        );
        let deps = config.dependency_dirs();
        for dir in ["/lib", "/lib64", "/usr/lib", "/lib/aarch64-linux-gnu"] {
            let count = deps.iter().filter(|d| *d == Path::new(dir)).count();
            assert_eq!(count, 1, "{dir} in {deps:?}");
        }
    }

    #[test]
    fn verdict_exit_codes() {
        for (verdict, code, name) in [
            (Verdict::Ready, 0, "ready"),
            (Verdict::DcgmMissing, 10, "dcgm-missing"),
            (Verdict::DcgmUnusable, 11, "dcgm-unusable"),
            (Verdict::DriverMissing, 20, "driver-missing"),
        ] {
            assert_eq!(verdict.exit().code(), code);
            assert_eq!(verdict.as_str(), name);
            assert_eq!(serde_json::to_value(verdict).unwrap(), name);
        }
    }
}
