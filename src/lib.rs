//! accelready keeps NVIDIA GPU nodes on Bottlerocket honest about their health.
//!
//! One library, one binary, four roles (see `ARCHITECTURE.md` in the shared
//! design notes and the README):
//! - at node boot, as a Bottlerocket bootstrap container: [`boot`];
//! - while the node runs, as a superpowered host container: [`hostengine`]
//!   runs and guards the DCGM host engine;
//! - on a workstation or in CI: [`render`] Bottlerocket user-data from a policy
//!   (and, [`agent_values`], the monitoring agent's Helm values that fit it);
//! - during an incident: [`repair`] forecasts what Karpenter node repair will
//!   do, with advice for the monitoring agent the cluster runs
//!   ([`repair::agent`]).
//!
//! Dependencies point one way: `main -> cli -> commands -> domain -> {host,
//! arch, report, fsutil, input}`. [`cli`] holds the clap definitions; each module of
//! [`commands`] turns one subcommand's flags into the plain request its domain
//! module takes ([`bundle::ProvisionRequest`], [`probe::ProbeConfig`],
//! [`boot::BootOptions`], ...), calls it and prints the result. Domain modules
//! never import `cli` or `commands`; defaults live with the domain and `cli`
//! reads them from there. `tests/module_graph.rs` holds the code to that.
//!
//! `main.rs` only parses the command line and maps [`Failure`] to an exit code;
//! every command is reachable from [`run`].

pub mod agent_values;
pub mod arch;
pub mod boot;
pub mod bottlerocket;
pub mod bundle;
pub mod cli;
pub mod commands;
pub mod fsutil;
pub mod host;
pub mod hostengine;
pub mod input;
pub mod plan;
pub mod policy;
pub mod probe;
pub mod render;
pub mod repair;
pub mod report;

pub use arch::Arch;
pub use host::HostRoot;
pub use report::{Exit, Failure};

use cli::{Cli, Command};

/// Runs one parsed command line and returns the exit status it earned.
///
/// Results go to stdout; logs go to stderr through `tracing`, which the caller
/// has already set up.
pub fn run(cli: Cli) -> Result<Exit, Failure> {
    let host = HostRoot::new(cli.global.host_root());
    let Some(command) = cli.command else {
        return Err(Failure::usage(cli::NoRole));
    };
    match command {
        Command::Check(args) => commands::check::run(&args, &host),
        Command::Diagnose(args) => commands::diagnose::run(&args),
        Command::Render(args) => commands::render::run(&args),
        Command::Provision(args) => commands::provision::run(&args, &host),
        Command::Boot(args) => commands::boot::run(&args, &host),
        Command::Hostengine(args) => commands::hostengine::run(&args, &host),
    }
}
