//! `accelready check`: flags -> [`ProbeConfig`], probe, print, exit by verdict.

use std::path::{Path, PathBuf};

use crate::arch::Arch;
use crate::cli::CheckArgs;
use crate::host::HostRoot;
use crate::probe::{self, ProbeConfig};
use crate::report::{self, Exit, Failure, OutputFormat};

/// Why `check` could not start.
#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    #[error("host root '{0}' is not a directory")]
    HostRoot(PathBuf),
    #[error("--{flag} '{path}' must be an absolute host path")]
    RelativePath { flag: &'static str, path: PathBuf },
    #[error("cannot tell this machine's architecture; pass --arch aarch64 or --arch x86_64")]
    UnknownArch,
}

/// The probe configuration the command line asks for.
pub fn config_from_args(args: &CheckArgs) -> Result<ProbeConfig, CheckError> {
    let arch = args
        .arch
        .or_else(Arch::of_this_binary)
        .ok_or(CheckError::UnknownArch)?;
    let mut config = ProbeConfig::new(arch);
    if !args.lib_dir.is_empty() {
        config.lib_dirs = args
            .lib_dir
            .iter()
            .map(|dir| absolute("lib-dir", dir))
            .collect::<Result<_, _>>()?;
    }
    if let Some(dir) = &args.install_dir {
        config.install_dir = absolute("install-dir", dir)?;
    }
    Ok(config)
}

fn absolute(flag: &'static str, path: &Path) -> Result<PathBuf, CheckError> {
    if path.is_absolute() {
        Ok(path.to_path_buf())
    } else {
        Err(CheckError::RelativePath {
            flag,
            path: path.to_path_buf(),
        })
    }
}

/// `accelready check`: probe the host, print the report, exit by verdict.
pub fn run(args: &CheckArgs, host: &HostRoot) -> Result<Exit, Failure> {
    let config = config_from_args(args).map_err(Failure::usage)?;
    if !host.root().is_dir() {
        return Err(Failure::usage(CheckError::HostRoot(
            host.root().to_path_buf(),
        )));
    }
    let report = probe::probe(host, &config);
    report::print(&report, OutputFormat::from_json_flag(args.json))?;
    Ok(report.verdict.exit())
}
