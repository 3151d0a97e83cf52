//! `accelready check`: flags -> [`ProbeConfig`], probe (and, with
//! `--engine`, ask the host engine), print, exit by verdict.

use std::path::{Path, PathBuf};

use crate::arch::Arch;
use crate::cli::CheckArgs;
use serde::Serialize;

use crate::host::HostRoot;
use crate::hostengine::{self, EngineProbe};
use crate::probe::{self, CheckReport, ProbeConfig};
use crate::report::{self, Exit, Failure, OutputFormat, Report};

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
    let exit = report.verdict.exit();
    let engine = args.engine.map(|address| {
        hostengine::probe_engine(
            host,
            &config.install_dir,
            report.driver.nvml.as_deref(),
            address,
            hostengine::Timings::default().dcgmi_timeout,
        )
    });
    let output = CheckOutput { report, engine };
    report::print(&output, OutputFormat::from_json_flag(args.json))?;
    Ok(exit)
}

/// The check report, plus the `engine` object with `--engine`: the same
/// JSON contract with one more key, and the same verdict and exit code.
#[derive(Debug, Serialize)]
pub struct CheckOutput {
    #[serde(flatten)]
    pub report: CheckReport,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub engine: Option<EngineProbe>,
}

impl Report for CheckOutput {
    fn write_text(&self, out: &mut dyn std::io::Write) -> std::io::Result<()> {
        self.report.write_text(out)?;
        if let Some(engine) = &self.engine {
            let gpus = match (&engine.gpus, &engine.gpus_error, &engine.dcgmi) {
                (Some(count), _, _) => format!("; it sees {count} GPU(s) (dcgmi)"),
                (None, Some(error), _) => format!("; GPU count unknown: {error}"),
                (None, None, None) => "; GPU count unknown: no dcgmi installed".to_owned(),
                (None, None, Some(_)) => String::new(),
            };
            let listening = if engine.listening {
                "accepts connections"
            } else {
                "NOT listening"
            };
            writeln!(out, "engine    {}: {listening}{gpus}", engine.address)?;
        }
        Ok(())
    }
}
