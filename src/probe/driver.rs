//! The NVIDIA driver as the host shows it: kernel module, version, device
//! nodes, GPUs on the PCI bus, and NVML (`libnvidia-ml.so.1`).
//!
//! GPUs are NVIDIA *display controllers* (PCI base class 0x03) in
//! `/sys/bus/pci/devices/*/{vendor,class}`: a GPU's other functions (an HDMI
//! audio function, class 0x0403, or a USB-C controller) are not GPUs. Where
//! sysfs is not there, every NVIDIA function in `/proc/bus/pci/devices` is
//! counted, with a warning saying so (that file has no class column).
//!
//! Parsers are pure (`parse_*`) and table-tested; the readers around them are
//! thin and never fail: a file that cannot be read is a finding, not an error.

use std::fs;
use std::io::{self, Read};
use std::path::{Path, PathBuf};

use serde::Serialize;
use tracing::{debug, info};

use crate::arch::Arch;
use crate::host::HostRoot;
use crate::probe::elf::{self, ElfClass};

/// NVIDIA's PCI vendor id.
pub const NVIDIA_PCI_VENDOR: u32 = 0x10de;

/// The PCI base class of display controllers (VGA 0x0300, XGA 0x0301, 3D
/// 0x0302, other 0x0380): what a GPU function is (PCI Code and ID Assignment
/// Specification, base class 03h).
pub const PCI_CLASS_DISPLAY: u32 = 0x03;

/// Where Linux lists PCI functions, one directory (a link) per address.
pub const SYSFS_PCI_DEVICES: &str = "/sys/bus/pci/devices";

/// The NVML soname every DCGM build `dlopen`s.
pub const NVML_SONAME: &str = "libnvidia-ml.so.1";

/// `/proc` files are small; anything larger than this is not what we expect
/// and is read only up to here.
const MAX_PROC_FILE: u64 = 1 << 20;

/// What the probe found out about the driver.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DriverReport {
    /// The `nvidia` kernel module is listed in `/proc/modules`.
    pub loaded: bool,
    /// Driver version from `/proc/driver/nvidia/version`, e.g. `580.159.03`.
    pub version: Option<String>,
    /// Number of `/dev/nvidia[0-9]+` device nodes.
    pub devices: usize,
    /// `/dev/nvidiactl` exists.
    pub control_device: bool,
    /// NVIDIA display controllers (vendor `10de`, PCI class `0x03xxxx`) in
    /// `/sys/bus/pci/devices`; without sysfs, every NVIDIA function in
    /// `/proc/bus/pci/devices` (with a warning).
    pub gpus: usize,
    /// Host path of `libnvidia-ml.so.1`, if found in the library directories.
    pub nvml: Option<PathBuf>,
    /// Why the driver is not usable (non-empty means verdict `driver-missing`).
    pub problems: Vec<String>,
    /// Oddities that do not make the driver unusable on their own.
    pub warnings: Vec<String>,
}

impl DriverReport {
    /// The driver is usable: module loaded and NVML present.
    pub fn is_usable(&self) -> bool {
        self.problems.is_empty()
    }
}

/// Probes the driver on `host`, looking for NVML in `lib_dirs` (host paths).
pub fn probe(host: &HostRoot, lib_dirs: &[PathBuf], arch: Arch) -> DriverReport {
    let mut problems = Vec::new();
    let mut warnings = Vec::new();

    let loaded = match read_host_file(host, "/proc/modules") {
        Ok(text) => module_loaded(&text, "nvidia"),
        Err(reason) => {
            warnings.push(format!("cannot read /proc/modules: {reason}"));
            false
        }
    };
    if !loaded {
        problems.push("the nvidia kernel module is not loaded (not in /proc/modules)".to_owned());
    }

    let version = match read_host_file(host, "/proc/driver/nvidia/version") {
        Ok(text) => {
            let version = parse_driver_version(&text);
            if version.is_none() {
                warnings.push(
                    "/proc/driver/nvidia/version has no 'NVRM version' line we understand".into(),
                );
            }
            version
        }
        Err(reason) => {
            if loaded {
                warnings.push(format!("cannot read /proc/driver/nvidia/version: {reason}"));
            }
            None
        }
    };

    let (devices, control_device) = device_nodes(host);
    if loaded && !control_device {
        warnings.push("/dev/nvidiactl does not exist".into());
    }
    if loaded && devices == 0 {
        warnings.push("no /dev/nvidia[0-9]+ device nodes".into());
    }

    let gpus = match sysfs_gpus(host) {
        Some(gpus) => gpus,
        None => {
            let (gpus, warning) = match read_host_file(host, "/proc/bus/pci/devices") {
                Ok(text) => (
                    count_pci_vendor(&text, NVIDIA_PCI_VENDOR),
                    format!(
                        "no PCI functions under {SYSFS_PCI_DEVICES}: counted every NVIDIA \
                         function in /proc/bus/pci/devices as a GPU (a GPU's audio or USB \
                         function counts too)"
                    ),
                ),
                Err(reason) => (
                    0,
                    format!(
                        "no PCI functions under {SYSFS_PCI_DEVICES}, and cannot read \
                         /proc/bus/pci/devices: {reason}"
                    ),
                ),
            };
            warnings.push(warning);
            gpus
        }
    };
    if gpus == 0 {
        warnings
            .push("no NVIDIA display controller (vendor 10de, class 0x03) on the PCI bus".into());
    }

    let nvml = find_library(host, lib_dirs, NVML_SONAME, arch);
    if nvml.is_none() {
        problems.push(match find_any(host, lib_dirs, NVML_SONAME) {
            Some(other) => format!(
                "{NVML_SONAME} at '{}' is not a 64-bit {arch} library",
                other.display()
            ),
            None => format!("{NVML_SONAME} not found in {}", display_dirs(lib_dirs)),
        });
    }

    info!(
        loaded,
        version = version.as_deref().unwrap_or("-"),
        devices,
        gpus,
        nvml = %nvml.as_deref().unwrap_or(Path::new("-")).display(),
        "probed NVIDIA driver"
    );
    DriverReport {
        loaded,
        version,
        devices,
        control_device,
        gpus,
        nvml,
        problems,
        warnings,
    }
}

/// `true` when `/proc/modules` text lists `module` (first field of a line).
pub fn module_loaded(proc_modules: &str, module: &str) -> bool {
    proc_modules
        .lines()
        .any(|line| line.split_whitespace().next() == Some(module))
}

/// The driver version from `/proc/driver/nvidia/version`, in both the
/// proprietary (`NVIDIA UNIX aarch64 Kernel Module  580.159.03  Sun ...`) and
/// the open-module (`NVIDIA UNIX Open Kernel Module for x86_64  570.133.20
/// Release Build ...`) formats: the first dotted all-digit word of the
/// `NVRM version:` line.
pub fn parse_driver_version(text: &str) -> Option<String> {
    let line = text
        .lines()
        .find_map(|line| line.trim_start().strip_prefix("NVRM version:"))?;
    line.split_whitespace()
        .find(|word| {
            word.contains('.')
                && word
                    .split('.')
                    .all(|part| !part.is_empty() && part.chars().all(|c| c.is_ascii_digit()))
        })
        .map(str::to_owned)
}

/// Counts the lines of `/proc/bus/pci/devices` whose second column
/// (`vendor << 16 | device`, hex) has vendor `vendor`. Lines that do not
/// parse are skipped.
pub fn count_pci_vendor(text: &str, vendor: u32) -> usize {
    text.lines()
        .filter_map(|line| line.split_whitespace().nth(1))
        .filter_map(|id| u32::from_str_radix(id, 16).ok())
        .filter(|id| id >> 16 == vendor)
        .count()
}

/// NVIDIA display controllers in `/sys/bus/pci/devices`, or `None` when
/// that directory is absent or empty (no sysfs in this root). A function
/// whose `vendor` or `class` cannot be read or parsed is not counted.
fn sysfs_gpus(host: &HostRoot) -> Option<usize> {
    let dir = host.resolve(SYSFS_PCI_DEVICES).ok()?;
    let entries: Vec<String> = fs::read_dir(&dir.real_path)
        .ok()?
        .flatten()
        .map(|entry| entry.file_name().to_string_lossy().into_owned())
        .collect();
    if entries.is_empty() {
        return None;
    }
    let attribute = |function: &str, name: &str| {
        read_host_file(host, &format!("{SYSFS_PCI_DEVICES}/{function}/{name}"))
            .ok()
            .and_then(|text| parse_sysfs_hex(&text))
    };
    let gpus = entries
        .iter()
        .filter(|function| {
            let gpu = attribute(function, "vendor")
                .zip(attribute(function, "class"))
                .is_some_and(|(vendor, class)| is_gpu_function(vendor, class));
            debug!(function = function.as_str(), gpu, "PCI function");
            gpu
        })
        .count();
    Some(gpus)
}

/// A sysfs hex attribute (`0x10de\n`, `0x030200\n`).
pub fn parse_sysfs_hex(text: &str) -> Option<u32> {
    let digits = text.trim().strip_prefix("0x")?;
    u32::from_str_radix(digits, 16).ok()
}

/// An NVIDIA function whose 24-bit PCI class (base, sub-class, interface)
/// is a display controller.
pub fn is_gpu_function(vendor: u32, class: u32) -> bool {
    vendor == NVIDIA_PCI_VENDOR && class >> 16 == PCI_CLASS_DISPLAY
}

/// `true` for `nvidia0`, `nvidia17`; not for `nvidiactl`, `nvidia-uvm`.
pub fn is_gpu_device_name(name: &str) -> bool {
    name.strip_prefix("nvidia")
        .is_some_and(|n| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()))
}

/// (`/dev/nvidia[0-9]+` count, `/dev/nvidiactl` exists). Test trees use plain
/// files for device nodes, so anything but a directory counts.
pub fn device_nodes(host: &HostRoot) -> (usize, bool) {
    let Ok(dev) = host.resolve("/dev") else {
        return (0, false);
    };
    let Ok(entries) = fs::read_dir(&dev.real_path) else {
        return (0, false);
    };
    let mut devices = 0;
    let mut control = false;
    for entry in entries.flatten() {
        let not_dir = entry.file_type().is_ok_and(|t| !t.is_dir());
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if not_dir && is_gpu_device_name(&name) {
            devices += 1;
        } else if not_dir && name == "nvidiactl" {
            control = true;
        }
    }
    (devices, control)
}

/// The first `dir/name` (host path) in `dirs` that resolves, inside the
/// root, to a regular file.
pub fn find_library(host: &HostRoot, dirs: &[PathBuf], name: &str, arch: Arch) -> Option<PathBuf> {
    // Like the dynamic loader: a file of another architecture is skipped and
    // the search goes on in the next directory.
    dirs.iter().map(|dir| dir.join(name)).find(|path| {
        let found = regular_file(host, path).is_some_and(|real| {
            elf::inspect_file(&real)
                .is_ok_and(|info| info.arch == Some(arch) && info.class == ElfClass::Elf64)
        });
        debug!(path = %path.display(), found, "looked for library");
        found
    })
}

/// The first `name` in `dirs` that is a regular file, whatever it holds.
pub fn find_any(host: &HostRoot, dirs: &[PathBuf], name: &str) -> Option<PathBuf> {
    dirs.iter()
        .map(|dir| dir.join(name))
        .find(|path| regular_file(host, path).is_some())
}

/// Where host path `path` really is, if it resolves to a regular file.
fn regular_file(host: &HostRoot, path: &Path) -> Option<PathBuf> {
    let resolved = host.resolve(path).ok()?;
    fs::metadata(&resolved.real_path)
        .is_ok_and(|m| m.is_file())
        .then_some(resolved.real_path)
}

/// Reads a small host text file (at most [`MAX_PROC_FILE`] bytes), following
/// symlinks inside the root. Only regular files are opened, so a FIFO cannot
/// block us. The error is a short reason for the report.
pub fn read_host_file(host: &HostRoot, host_path: &str) -> Result<String, String> {
    let resolved = host.resolve(host_path).map_err(|e| e.to_string())?;
    let meta = fs::metadata(&resolved.real_path).map_err(|e| e.to_string())?;
    if !meta.is_file() {
        return Err("not a regular file".into());
    }
    let mut text = Vec::new();
    fs::File::open(&resolved.real_path)
        .and_then(|f| f.take(MAX_PROC_FILE).read_to_end(&mut text))
        .map_err(|e: io::Error| e.to_string())?;
    Ok(String::from_utf8_lossy(&text).into_owned())
}

/// `/a, /b and /c` for messages.
pub fn display_dirs(dirs: &[PathBuf]) -> String {
    let names: Vec<String> = dirs.iter().map(|d| d.display().to_string()).collect();
    match names.split_last() {
        None => "no directories".into(),
        Some((last, [])) => last.clone(),
        Some((last, rest)) => format!("{} and {last}", rest.join(", ")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn driver_version_formats() {
        let table = [
            (
                "NVRM version: NVIDIA UNIX aarch64 Kernel Module  580.159.03  Sun Jan  4 10:00:00 UTC 2026\nGCC version:  gcc version 11.4.0\n",
                Some("580.159.03"),
            ),
            (
                "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  570.133.20  Release Build  (dvs-builder@U16-I3-B03-4-3)  Wed Mar 12 00:00:00 UTC 2025\n",
                Some("570.133.20"),
            ),
            (
                "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.230.02  Fri Dec 13 2024\n",
                Some("535.230.02"),
            ),
            ("GCC version: gcc 11.4.0\n", None),
            ("NVRM version: garbage\n", None),
            ("", None),
        ];
        for (text, want) in table {
            assert_eq!(parse_driver_version(text).as_deref(), want, "{text:?}");
        }
    }

    #[test]
    fn modules_match_whole_names() {
        let text = "nvidia_uvm 1 0 - Live 0x0\nnvidia_modeset 2 0 - Live 0x0\n";
        assert!(!module_loaded(text, "nvidia"));
        let text = format!("{text}nvidia 5 2 nvidia_uvm,nvidia_modeset, Live 0x0 (POE)\n");
        assert!(module_loaded(&text, "nvidia"));
        assert!(!module_loaded("", "nvidia"));
    }

    #[test]
    fn pci_vendor_count() {
        let table = [
            ("0000\t10de1eb8\t8b\tf0000000\n", 1),
            (
                "0000\t10de1eb8\t8b\n0100\t10de2236\t10\n0200\t8086100e\t0b\n",
                2,
            ),
            ("0000\t8086100e\t0b\n", 0),
            ("garbage\n\n0000 zz\n", 0),
            ("", 0),
        ];
        for (text, want) in table {
            assert_eq!(count_pci_vendor(text, NVIDIA_PCI_VENDOR), want, "{text:?}");
        }
    }

    #[test]
    fn gpu_functions_are_nvidia_display_controllers() {
        let table = [
            ("0x10de\n", "0x030200\n", true),  // 3D controller (T4G, A10G)
            ("0x10de\n", "0x030000\n", true),  // VGA controller
            ("0x10de\n", "0x040300\n", false), // the GPU's HDMI audio function
            ("0x10de\n", "0x0c0330\n", false), // its USB 3 controller
            ("0x10de\n", "0x068000\n", false), // an NVSwitch bridge
            ("0x8086\n", "0x030000\n", false), // another vendor's VGA
        ];
        for (vendor, class, want) in table {
            let (vendor, class) = (
                parse_sysfs_hex(vendor).unwrap(),
                parse_sysfs_hex(class).unwrap(),
            );
            assert_eq!(is_gpu_function(vendor, class), want, "{vendor:x} {class:x}");
        }
        for bad in ["", "10de", "0x", "0xzz", "garbage"] {
            assert_eq!(parse_sysfs_hex(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn gpu_device_names() {
        for (name, want) in [
            ("nvidia0", true),
            ("nvidia15", true),
            ("nvidiactl", false),
            ("nvidia-uvm", false),
            ("nvidia", false),
            ("nvidia0a", false),
        ] {
            assert_eq!(is_gpu_device_name(name), want, "{name}");
        }
    }

    #[test]
    fn dirs_read_as_a_list() {
        assert_eq!(display_dirs(&[]), "no directories");
        assert_eq!(display_dirs(&["/a".into()]), "/a");
        assert_eq!(
            display_dirs(&["/a".into(), "/b".into(), "/c".into()]),
            "/a, /b and /c"
        );
    }
}
