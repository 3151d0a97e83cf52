//! Host probes: is the NVIDIA driver there, and is DCGM loadable?

pub mod elf;

use crate::cli::CheckArgs;
use crate::host::HostRoot;
use crate::report::{Exit, Failure};

/// `accelready check`: probe the host and print the verdict.
pub fn run(_args: &CheckArgs, _host: &HostRoot) -> Result<Exit, Failure> {
    Err(Failure::internal("check is being written (issue 2)"))
}
