//! `accelready boot`: flags + the policy file -> [`BootOptions`], boot, print.

use std::time::Duration;

use tracing::error;

use crate::arch::Arch;
use crate::boot::{self, BootError, BootOptions};
use crate::bottlerocket::api::ApiTimings;
use crate::cli::BootArgs;
use crate::host::HostRoot;
use crate::policy::Policy;
use crate::report::{self, Exit, Failure, OutputFormat};

/// `accelready boot`: a missing or invalid policy exits 2 without touching
/// the node; otherwise the boot's own exit status.
pub fn run(args: &BootArgs, host: &HostRoot) -> Result<Exit, Failure> {
    let policy = Policy::load(&args.user_data).map_err(|e| {
        error!(user_data = %args.user_data.display(), error = %e, "no usable policy; not touching the node");
        Failure::usage(e)
    })?;
    let arch = args
        .arch
        .or_else(Arch::of_this_binary)
        .ok_or_else(|| Failure::usage(BootError::UnknownArch))?;
    let options = BootOptions {
        arch,
        api_socket: args.api_socket.clone(),
        api_timings: ApiTimings::default(),
        report: args.report.clone(),
        deadline: args
            .deadline_seconds
            .map(Duration::from_secs_f64)
            .unwrap_or(policy.boot.deadline),
        image_root: args.image.image_root.clone(),
    };
    let report = boot::boot_blocking(host, &policy, &options).map_err(Failure::internal)?;
    report::print(&report, OutputFormat::from_json_flag(args.json))?;
    Ok(report.exit())
}
