//! `accelready provision`: flags -> [`ProvisionRequest`], provision, print.

use std::time::Duration;

use crate::arch::Arch;
use crate::bundle::{self, Limits, ProvisionRequest, Source, Timeouts};
use crate::cli::ProvisionArgs;
use crate::host::HostRoot;
use crate::report::{self, Exit, Failure, OutputFormat};

/// The library request these flags describe.
pub fn request_from_args(args: &ProvisionArgs) -> ProvisionRequest {
    ProvisionRequest {
        source: Source::Url {
            url: args.url.clone(),
            allow_insecure_http: args.allow_insecure_http,
            ca_bundle: args.ca_bundle.clone(),
        },
        sha256: args.sha256.clone(),
        arch: args
            .arch
            .or_else(Arch::of_this_binary)
            .unwrap_or(Arch::X86_64),
        install_dir: args.install_dir.clone(),
        expose_at: (!args.no_expose).then(|| args.expose_at.clone()),
        with_hostengine: args.with_hostengine,
        limits: Limits {
            max_download_bytes: args.max_bytes,
            max_entries: args.max_entries,
            max_unpacked_bytes: args.max_unpacked_bytes,
        },
        timeouts: Timeouts {
            connect: Duration::from_millis(args.connect_timeout_ms),
            read: Duration::from_millis(args.read_timeout_ms),
            overall: Duration::from_millis(args.deadline_ms),
            backoff_base: Duration::from_millis(args.retry_base_ms),
            backoff_cap: Duration::from_millis(args.retry_cap_ms),
            max_attempts: args.max_attempts.max(1),
        },
    }
}

/// `accelready provision`: usage errors exit 2, the world's errors exit 1.
pub fn run(args: &ProvisionArgs, host: &HostRoot) -> Result<Exit, Failure> {
    let request = request_from_args(args);
    match bundle::provision(host, &request) {
        Ok(report) => {
            report::print(&report, OutputFormat::from_json_flag(args.json))?;
            Ok(Exit::Ready)
        }
        Err(e) if e.is_usage() => Err(Failure::usage(e)),
        Err(e) => Err(Failure::internal(e)),
    }
}
