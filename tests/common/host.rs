//! Fixture host trees: a temporary directory shaped like a Bottlerocket NVIDIA
//! node, to point `--host-root` (or a [`HostRoot`]) at.
//!
//! Start from [`HostTree::bottlerocket_nvidia`] (driver loaded, NVML present,
//! no DCGM: the incident) or [`HostTree::empty`], then chain the `with_*`
//! methods. Libraries are real ELF shared objects built by [`super::elf`].
//! Every path argument is a host path (`/usr/lib64/...`).
//!
//! ```ignore
//! let tree = HostTree::bottlerocket_nvidia(Arch::Aarch64).with_dcgm4();
//! accelready check --host-root tree.root() --arch aarch64
//! ```

use std::fs;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};

use accelready::{Arch, HostRoot};

use super::elf;

/// Where Bottlerocket keeps NVIDIA's userspace libraries.
pub const TESLA_LIB_DIR: &str = "/usr/lib/nvidia/tesla";
/// Where `accelready provision` installs DCGM libraries.
pub const INSTALL_LIB_DIR: &str = "/var/lib/accelready/dcgm/current/lib";
/// glibc's libraries on a Bottlerocket host (`/lib`, `/lib64` link here).
pub const GLIBC_DIR: &str = "/usr/lib";
/// What a real `libdcgm.so.4` needs (besides the loader).
pub const DCGM_NEEDED: [&str; 5] = [
    "libdl.so.2",
    "libpthread.so.0",
    "librt.so.1",
    "libm.so.6",
    "libc.so.6",
];
/// The driver version the fixture's `/proc/driver/nvidia/version` reports.
pub const DRIVER_VERSION: &str = "580.159.03";

/// A host tree in a temporary directory, removed on drop.
pub struct HostTree {
    dir: tempfile::TempDir,
    pub arch: Arch,
}

impl HostTree {
    /// An empty root (no driver, no libraries, nothing).
    pub fn empty(arch: Arch) -> Self {
        HostTree {
            dir: tempfile::tempdir().expect("create temp host root"),
            arch,
        }
    }

    /// A Bottlerocket `aws-k8s-*-nvidia` host of `arch` after the driver is
    /// loaded, without DCGM: `proc/modules` with `nvidia`, the version file,
    /// `dev/nvidiactl` + `dev/nvidia0`, one NVIDIA GPU (a 3D controller,
    /// class 0x030200) and an NVMe controller on the PCI bus, in both
    /// `/proc/bus/pci/devices` and `/sys/bus/pci/devices`,
    /// `usr/lib/nvidia/tesla/libnvidia-ml.so.1`, glibc in `/usr/lib` with
    /// `/lib` and `/lib64` linking to it.
    pub fn bottlerocket_nvidia(arch: Arch) -> Self {
        let kernel_module = match arch {
            Arch::Aarch64 => "NVIDIA UNIX aarch64 Kernel Module",
            Arch::X86_64 => "NVIDIA UNIX x86_64 Kernel Module",
        };
        let mut tree = HostTree::empty(arch)
            .file(
                "/proc/modules",
                "nvidia_uvm 1961984 0 - Live 0x0000000000000000 (POE)\n\
                 nvidia_modeset 1736704 0 - Live 0x0000000000000000 (POE)\n\
                 nvidia 104751104 2 nvidia_uvm,nvidia_modeset, Live 0x0000000000000000 (POE)\n\
                 ena 159744 0 - Live 0x0000000000000000\n",
            )
            .file(
                "/proc/driver/nvidia/version",
                format!(
                    "NVRM version: {kernel_module}  {DRIVER_VERSION}  Sun Jan  4 10:00:00 UTC 2026\n\
                     GCC version:  gcc version 11.4.0 (Buildroot 2022.11.1)\n"
                ),
            )
            .pci_function("0000:00:04.0", 0x1d0f, 0x8061, 0x010802, "nvme")
            .pci_function("0000:00:1e.0", 0x10de, 0x1eb8, 0x030200, "nvidia")
            .file("/dev/nvidiactl", "")
            .file("/dev/nvidia0", "")
            .file("/dev/nvidia-uvm", "")
            .library(TESLA_LIB_DIR, "libnvidia-ml.so.1", "libnvidia-ml.so.1", &["libc.so.6"])
            .symlink("/lib", GLIBC_DIR)
            .symlink("/lib64", GLIBC_DIR);
        for soname in DCGM_NEEDED {
            tree = tree.library(GLIBC_DIR, soname, soname, &[]);
        }
        tree
    }

    /// The directory that is the host's `/`.
    pub fn root(&self) -> &Path {
        self.dir.path()
    }

    pub fn host_root(&self) -> HostRoot {
        HostRoot::new(self.root())
    }

    /// Where host path `host_path` is on this machine.
    pub fn join(&self, host_path: &str) -> PathBuf {
        self.host_root().join(host_path)
    }

    /// Writes a file (creating parent directories), replacing what was there.
    pub fn file(self, host_path: &str, contents: impl AsRef<[u8]>) -> Self {
        let path = self.join(host_path);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        let _ = fs::remove_file(&path);
        fs::write(&path, contents).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
        self
    }

    /// Creates a directory (and its parents).
    pub fn dir(self, host_path: &str) -> Self {
        fs::create_dir_all(self.join(host_path)).unwrap();
        self
    }

    /// Creates symlink `host_path` -> `target` (written as given: absolute
    /// targets are host paths), replacing a file or link that was there.
    pub fn symlink(self, host_path: &str, target: &str) -> Self {
        let path = self.join(host_path);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        let _ = fs::remove_file(&path);
        symlink(target, &path).unwrap_or_else(|e| panic!("symlink {}: {e}", path.display()));
        self
    }

    /// One PCI function as the host shows it twice: a line in
    /// `/proc/bus/pci/devices` (bus/devfn, vendor << 16 | device, driver) and
    /// `/sys/bus/pci/devices/<address>` linking to
    /// `/sys/devices/pci0000:00/<address>` with its `vendor`, `device` and
    /// `class` files (`0x10de`, `0x030200`, ...), as Linux writes them.
    pub fn pci_function(
        self,
        address: &str,
        vendor: u16,
        device: u16,
        class: u32,
        driver: &str,
    ) -> Self {
        let proc = self.join("/proc/bus/pci/devices");
        let mut lines = fs::read_to_string(&proc).unwrap_or_default();
        // "0000:00:1e.0" -> bus 00, device 1e, function 0 -> "00f0".
        let bdf: Vec<&str> = address.rsplit(':').take(2).collect();
        let (dev_fn, bus) = (bdf[0], bdf[1]);
        let (dev, func) = dev_fn.split_once('.').unwrap();
        let devfn = (u32::from_str_radix(dev, 16).unwrap() << 3) | func.parse::<u32>().unwrap();
        lines.push_str(&format!(
            "{bus}{devfn:02x}\t{vendor:04x}{device:04x}\t0\t80000000\t0\t0\t0\t0\t0\t0\t4000\t0\t0\t0\t0\t0\t0\t{driver}\n"
        ));
        let real = format!("/sys/devices/pci0000:00/{address}");
        self.file("/proc/bus/pci/devices", lines)
            .file(&format!("{real}/vendor"), format!("0x{vendor:04x}\n"))
            .file(&format!("{real}/device"), format!("0x{device:04x}\n"))
            .file(&format!("{real}/class"), format!("0x{class:06x}\n"))
            .symlink(
                &format!("/sys/bus/pci/devices/{address}"),
                &format!("../../../devices/pci0000:00/{address}"),
            )
    }

    /// No `/sys` at all (a container without sysfs, an old test tree).
    pub fn without_sysfs(self) -> Self {
        let _ = fs::remove_dir_all(self.join("/sys"));
        self
    }

    /// Removes a file or symlink (not an error if it is absent).
    pub fn remove(self, host_path: &str) -> Self {
        let _ = fs::remove_file(self.join(host_path));
        self
    }

    /// A real shared object of this tree's arch at `dir/file_name`.
    pub fn library(self, dir: &str, file_name: &str, soname: &str, needed: &[&str]) -> Self {
        let arch = self.arch;
        self.library_for(arch, dir, file_name, soname, needed)
    }

    /// A real shared object of this tree's arch at `dir/file_name` exporting
    /// exactly `exports` (e.g. a library that is not DCGM under a DCGM name).
    pub fn library_exporting(
        self,
        dir: &str,
        file_name: &str,
        soname: &str,
        exports: &[&str],
    ) -> Self {
        let bytes = elf::shared_object_exporting(self.arch, soname, &DCGM_NEEDED, exports);
        self.file(&format!("{dir}/{file_name}"), bytes)
    }

    /// A real shared object of `arch` (maybe not the tree's) at `dir/file_name`.
    pub fn library_for(
        self,
        arch: Arch,
        dir: &str,
        file_name: &str,
        soname: &str,
        needed: &[&str],
    ) -> Self {
        let bytes = elf::shared_object(arch, soname, needed);
        self.file(&format!("{dir}/{file_name}"), bytes)
    }

    /// DCGM 4.6.1 as `accelready provision` installs it: in
    /// [`INSTALL_LIB_DIR`], `libdcgm.so.4 -> libdcgm.so.4.6.1`.
    pub fn with_dcgm4(self) -> Self {
        self.with_dcgm4_in(INSTALL_LIB_DIR)
    }

    /// DCGM 4.6.1 in `dir` (e.g. `/usr/lib64`, the rpm layout), with the
    /// unversioned `libdcgm.so` link (as `provision` installs it, and as the
    /// `-dev` package ships it).
    pub fn with_dcgm4_in(self, dir: &str) -> Self {
        self.with_dcgm4_without_unversioned_in(dir)
            .symlink(&format!("{dir}/libdcgm.so"), "libdcgm.so.4")
    }

    /// DCGM 4.6.1 in `dir` as the `-core` package ships it: no `libdcgm.so`.
    pub fn with_dcgm4_without_unversioned_in(self, dir: &str) -> Self {
        let arch = self.arch;
        self.with_dcgm_build(arch, dir, "4.6.1", &DCGM_NEEDED)
    }

    /// DCGM 4 in [`INSTALL_LIB_DIR`] built for the other architecture.
    pub fn with_foreign_dcgm4(self) -> Self {
        let other = match self.arch {
            Arch::Aarch64 => Arch::X86_64,
            Arch::X86_64 => Arch::Aarch64,
        };
        self.with_dcgm_build(other, INSTALL_LIB_DIR, "4.6.1", &DCGM_NEEDED)
            .symlink(&format!("{INSTALL_LIB_DIR}/libdcgm.so"), "libdcgm.so.4")
    }

    /// DCGM 4 in [`INSTALL_LIB_DIR`] whose DT_NEEDED lists `needed` (add a
    /// name the tree lacks to make a missing dependency).
    pub fn with_dcgm4_needing(self, needed: &[&str]) -> Self {
        let arch = self.arch;
        self.with_dcgm_build(arch, INSTALL_LIB_DIR, "4.6.1", needed)
            .symlink(&format!("{INSTALL_LIB_DIR}/libdcgm.so"), "libdcgm.so.4")
    }

    /// `INSTALL_LIB_DIR/libdcgm.so.4` linking to a file that does not exist.
    pub fn with_dangling_dcgm4(self) -> Self {
        self.symlink(
            &format!("{INSTALL_LIB_DIR}/libdcgm.so.4"),
            "/var/lib/accelready/dcgm/4.6.1/lib/libdcgm.so.4.6.1",
        )
    }

    /// DCGM 3.3.9 the rpm way, in `/usr/lib64`, *with* the unversioned
    /// `libdcgm.so` link the DCGM 3 package ships.
    pub fn with_dcgm3_unversioned(self) -> Self {
        self.with_dcgm3_without_unversioned()
            .symlink("/usr/lib64/libdcgm.so", "libdcgm.so.3")
    }

    /// DCGM 3.3.9 in `/usr/lib64` without `libdcgm.so`.
    pub fn with_dcgm3_without_unversioned(self) -> Self {
        let arch = self.arch;
        self.with_dcgm_build(arch, "/usr/lib64", "3.3.9", &DCGM_NEEDED)
    }

    /// `libdcgm.so.<full>` (soname `libdcgm.so.<major>`, built for `arch`) and
    /// the soname link to it, in `dir`.
    pub fn with_dcgm_build(self, arch: Arch, dir: &str, full: &str, needed: &[&str]) -> Self {
        let major = full.split('.').next().unwrap();
        let soname = format!("libdcgm.so.{major}");
        let file = format!("libdcgm.so.{full}");
        self.library_for(arch, dir, &file, &soname, needed)
            .symlink(&format!("{dir}/{soname}"), &file)
    }

    /// No NVIDIA driver: the module is not loaded, no version file, no device
    /// nodes, no NVML. The GPU is still on the PCI bus.
    pub fn without_driver(self) -> Self {
        let modules = fs::read_to_string(self.join("/proc/modules")).unwrap_or_default();
        let kept: String = modules
            .lines()
            .filter(|line| !line.starts_with("nvidia"))
            .map(|line| format!("{line}\n"))
            .collect();
        let _ = fs::remove_dir_all(self.join("/proc/driver/nvidia"));
        self.file("/proc/modules", kept)
            .remove("/dev/nvidiactl")
            .remove("/dev/nvidia0")
            .remove("/dev/nvidia-uvm")
            .remove(&format!("{TESLA_LIB_DIR}/libnvidia-ml.so.1"))
    }
}
