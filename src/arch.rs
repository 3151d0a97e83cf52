//! CPU architectures we support, and how each part of the outside world spells them.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// A CPU architecture. Our files say `aarch64` / `x86_64`; OCI, Kubernetes and
/// SSM say `arm64` / `amd64` ([`Arch::oci_name`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Arch {
    #[serde(rename = "aarch64")]
    Aarch64,
    #[serde(rename = "x86_64")]
    X86_64,
}

/// ELF `e_machine` values (from the System V ABI supplements).
pub const EM_X86_64: u16 = 62;
pub const EM_AARCH64: u16 = 183;

impl Arch {
    pub const ALL: [Arch; 2] = [Arch::Aarch64, Arch::X86_64];

    /// The architecture this binary was compiled for, or `None` on any other.
    pub fn of_this_binary() -> Option<Arch> {
        if cfg!(target_arch = "aarch64") {
            Some(Arch::Aarch64)
        } else if cfg!(target_arch = "x86_64") {
            Some(Arch::X86_64)
        } else {
            None
        }
    }

    /// Our own spelling: `aarch64` or `x86_64`.
    pub fn as_str(self) -> &'static str {
        match self {
            Arch::Aarch64 => "aarch64",
            Arch::X86_64 => "x86_64",
        }
    }

    /// OCI / Kubernetes / Debian spelling: `arm64` or `amd64`.
    pub fn oci_name(self) -> &'static str {
        match self {
            Arch::Aarch64 => "arm64",
            Arch::X86_64 => "amd64",
        }
    }

    /// GNU triplet used in Debian library directories (`usr/lib/<triplet>`).
    pub fn gnu_triplet(self) -> &'static str {
        match self {
            Arch::Aarch64 => "aarch64-linux-gnu",
            Arch::X86_64 => "x86_64-linux-gnu",
        }
    }

    /// ELF `e_machine` for this architecture.
    pub fn elf_machine(self) -> u16 {
        match self {
            Arch::Aarch64 => EM_AARCH64,
            Arch::X86_64 => EM_X86_64,
        }
    }

    /// The architecture of an ELF `e_machine`, if it is one we know.
    pub fn from_elf_machine(machine: u16) -> Option<Arch> {
        match machine {
            EM_AARCH64 => Some(Arch::Aarch64),
            EM_X86_64 => Some(Arch::X86_64),
            _ => None,
        }
    }
}

impl fmt::Display for Arch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Error for an architecture name we do not know.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown architecture '{0}': expected aarch64 (arm64) or x86_64 (amd64)")]
pub struct UnknownArch(pub String);

impl FromStr for Arch {
    type Err = UnknownArch;

    /// Accepts both spellings, so that `--arch arm64` does what people mean.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "aarch64" | "arm64" => Ok(Arch::Aarch64),
            "x86_64" | "amd64" => Ok(Arch::X86_64),
            other => Err(UnknownArch(other.to_owned())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_both_spellings() {
        for (input, arch) in [
            ("aarch64", Arch::Aarch64),
            ("arm64", Arch::Aarch64),
            ("x86_64", Arch::X86_64),
            ("amd64", Arch::X86_64),
        ] {
            assert_eq!(input.parse::<Arch>().unwrap(), arch, "{input}");
        }
        assert!("armv7".parse::<Arch>().is_err());
    }

    #[test]
    fn elf_machine_round_trips() {
        for arch in Arch::ALL {
            assert_eq!(Arch::from_elf_machine(arch.elf_machine()), Some(arch));
        }
        assert_eq!(Arch::from_elf_machine(3), None);
    }
}
