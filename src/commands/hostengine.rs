//! `accelready hostengine`: flags + the policy file -> [`Options`], then the
//! supervisor, until SIGTERM/SIGINT.

use std::time::Duration;

use tracing::error;

use crate::arch::Arch;
use crate::cli::HostengineArgs;
use crate::host::HostRoot;
use crate::hostengine::{self, HostengineError, Options, Timings};
use crate::policy::Policy;
use crate::report::{Exit, Failure};

/// The supervisor's options these flags describe.
pub fn options_from_args(
    args: &HostengineArgs,
    host: &HostRoot,
) -> Result<Options, HostengineError> {
    let arch = args
        .arch
        .or_else(Arch::of_this_binary)
        .ok_or(HostengineError::UnknownArch)?;
    let defaults = Timings::default();
    let seconds =
        |value: Option<f64>, default: Duration| value.map_or(default, Duration::from_secs_f64);
    Ok(Options {
        arch,
        status: args.status.clone(),
        image_root: args.image.image_root.clone(),
        proc_dir: args.proc.clone().unwrap_or_else(|| host.join("/proc")),
        timings: Timings {
            recheck: seconds(args.recheck_seconds, defaults.recheck),
            restart_delay: seconds(args.restart_delay_seconds, defaults.restart_delay),
            backoff_cap: seconds(args.backoff_cap_seconds, defaults.backoff_cap),
            ready_timeout: seconds(args.ready_timeout_seconds, defaults.ready_timeout),
            stop_grace: seconds(args.stop_grace_seconds, defaults.stop_grace),
            stable_after: seconds(args.stable_after_seconds, defaults.stable_after),
            bundle_wait_cap: seconds(args.bundle_wait_cap_seconds, defaults.bundle_wait_cap),
            dcgmi_timeout: seconds(args.dcgmi_timeout_seconds, defaults.dcgmi_timeout),
            ..defaults
        },
    })
}

/// `accelready hostengine`: a missing or invalid policy exits 2; otherwise
/// it runs until stopped and exits 0.
pub fn run(args: &HostengineArgs, host: &HostRoot) -> Result<Exit, Failure> {
    let policy = Policy::load(&args.user_data).map_err(|e| {
        error!(user_data = %args.user_data.display(), error = %e, "no usable policy; not starting any engine");
        Failure::usage(e)
    })?;
    let options = options_from_args(args, host).map_err(Failure::usage)?;
    hostengine::run_blocking(host, &policy, &options).map_err(|e| match e {
        HostengineError::StopGrace(_) | HostengineError::UnknownArch => Failure::usage(e),
        HostengineError::Runtime(_) | HostengineError::Signals(_) => Failure::internal(e),
    })?;
    Ok(Exit::Ready)
}
