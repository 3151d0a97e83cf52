//! Command-line definitions (clap derive). One subcommand per library entry
//! point; the help texts are the first documentation an operator reads.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::arch::Arch;
use crate::host::HostRoot;

/// Keep NVIDIA GPU nodes on Bottlerocket honest about DCGM, before Karpenter
/// node repair replaces them.
#[derive(Debug, Parser)]
#[command(name = "accelready", version, about, long_about = LONG_ABOUT)]
pub struct Cli {
    #[command(flatten)]
    pub global: GlobalArgs,
    #[command(subcommand)]
    pub command: Command,
}

const LONG_ABOUT: &str = "\
Keep NVIDIA GPU nodes on Bottlerocket honest about DCGM, before Karpenter node
repair replaces them.

Bottlerocket's NVIDIA variants ship no DCGM. The EKS node monitoring agent then
sets AcceleratedHardwareReady=False ('libdcgm.so not Found'), and Karpenter node
repair replaces the node 10 minutes later, forever. accelready finds that before
it happens (check), heals it at boot (provision, boot), keeps node settings in
line with the repair policy (render), and explains a live node (diagnose).

Results go to stdout, logs to stderr. Exit codes: 0 ready, 1 internal error,
2 usage/configuration error, 3 a node will be replaced (diagnose),
10 DCGM missing, 11 DCGM unusable, 20 NVIDIA driver missing.";

/// Options every subcommand takes.
#[derive(Debug, Args)]
pub struct GlobalArgs {
    /// Directory that is the host's '/'. Default: /.bottlerocket/rootfs when it
    /// exists (inside a bootstrap container), else /.
    #[arg(long, env = "ACCELREADY_HOST_ROOT", global = true, value_name = "DIR")]
    pub host_root: Option<PathBuf>,

    /// Log format on stderr.
    #[arg(long, value_enum, default_value_t = LogFormat::Text, global = true)]
    pub log_format: LogFormat,

    /// More logging: -v for debug, -vv for trace (RUST_LOG overrides).
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    pub verbose: u8,
}

impl GlobalArgs {
    pub fn host_root(&self) -> PathBuf {
        self.host_root
            .clone()
            .unwrap_or_else(HostRoot::default_path)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Verify the NVIDIA driver and the DCGM library on a host.
    Check(CheckArgs),
    /// Forecast what Karpenter node repair will do to nodes, when, and why.
    Diagnose(DiagnoseArgs),
    /// Render Bottlerocket user-data (or a Karpenter EC2NodeClass) from a policy.
    Render(RenderArgs),
}

/// `accelready check`
#[derive(Debug, Args)]
#[command(after_help = "\
Examples:
  accelready check                          # this host (or the bootstrap container's host)
  accelready check --json --host-root /tmp/node --arch aarch64
  accelready check --lib-dir /usr/lib64 --lib-dir /opt/nvidia/lib   # replace the default list

Exit codes: 0 ready, 10 DCGM missing, 11 DCGM unusable, 20 NVIDIA driver missing,
2 usage error, 1 internal error.")]
pub struct CheckArgs {
    /// Print the report as JSON (stable schema, see README).
    #[arg(long)]
    pub json: bool,

    /// Architecture the host's libraries must be built for. Default: this
    /// binary's architecture.
    #[arg(long, value_name = "ARCH")]
    pub arch: Option<Arch>,

    /// NVIDIA library directory (host path) searched for libnvidia-ml.so.1 and
    /// libdcgm.so*. Repeatable; replaces the default list (/usr/lib/nvidia/tesla,
    /// /usr/lib64, /usr/lib, /usr/lib/<triplet>, /usr/local/nvidia/lib64).
    #[arg(long, value_name = "DIR")]
    pub lib_dir: Vec<PathBuf>,

    /// accelready's DCGM install directory (host path); <DIR>/current/lib is
    /// searched for libdcgm.so* too. [default: /var/lib/accelready/dcgm]
    #[arg(long, value_name = "DIR")]
    pub install_dir: Option<PathBuf>,
}

/// `accelready diagnose`
#[derive(Debug, Args)]
#[command(after_help = "\
Examples:
  kubectl get node ip-10-0-1-23.ec2.internal -o json | accelready diagnose --karpenter v1.4.0
  kubectl get nodes -o json > nodes.json; kubectl get events -A -o json > events.json
  accelready diagnose nodes.json --events events.json --json
  accelready diagnose node.json --now 2025-06-10T03:05:00Z --node-repair off

Exit codes: 0 no node will be replaced, 3 at least one will, 2 bad input.")]
pub struct DiagnoseArgs {
    /// `kubectl get node NAME -o json` (one node: its pool is assumed
    /// otherwise healthy) or `kubectl get nodes -o json` (a List/NodeList,
    /// taken as the whole cluster). `-` or nothing: stdin.
    #[arg(value_name = "FILE")]
    pub input: Option<PathBuf>,

    /// `kubectl get events -o json`: show each node's event history.
    #[arg(long, value_name = "FILE")]
    pub events: Option<PathBuf>,

    /// Karpenter version (v1.4.0 or 1.4.0). Default: the newest modelled.
    #[arg(long, value_name = "VERSION")]
    pub karpenter: Option<String>,

    /// Whether Karpenter's nodeRepair feature gate is on.
    #[arg(long, value_enum, default_value_t = NodeRepair::On)]
    pub node_repair: NodeRepair,

    /// The time to forecast from (RFC 3339). Default: now.
    #[arg(long, value_name = "RFC3339")]
    pub now: Option<String>,

    /// Print the forecast as JSON (schema in README).
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum NodeRepair {
    On,
    Off,
}

/// `accelready render`
#[derive(Debug, Args)]
#[command(after_help = "\
Examples:
  accelready render                                   # user-data from the built-in policy
  accelready render accelready.toml --explain         # what the policy does, in plain words
  accelready render accelready.toml --format ec2nodeclass --cluster prod --name gpu
  accelready render accelready.toml --check nodeclass/userdata.toml   # CI: exit 2 + diff when stale
  accelready render accelready.toml --gzip --output userdata.b64

Warnings (keys Karpenter would drop, nodes that node repair will replace,
kubelet memory) go to stderr; --strict turns them into errors (exit 2).")]
pub struct RenderArgs {
    /// Policy file (accelready.toml). Default: the built-in policy.
    #[arg(value_name = "POLICY")]
    pub policy: Option<PathBuf>,

    /// What to print.
    #[arg(long, value_enum, default_value_t = RenderFormat::Userdata)]
    pub format: RenderFormat,

    /// EKS cluster name: subnets and security groups are selected by the tag
    /// karpenter.sh/discovery=NAME (required for --format ec2nodeclass).
    #[arg(long, value_name = "NAME")]
    pub cluster: Option<String>,

    /// IAM role of the nodes. Default: KarpenterNodeRole-<cluster>.
    #[arg(long, value_name = "ROLE")]
    pub role: Option<String>,

    /// metadata.name of the EC2NodeClass.
    #[arg(long, value_name = "NAME", default_value = "accelready-gpu")]
    pub name: String,

    /// Bottlerocket AMI alias: bottlerocket@latest, bottlerocket@v1.39.1, or
    /// just latest / v1.39.1.
    #[arg(long, value_name = "ALIAS", default_value = "bottlerocket@latest")]
    pub ami_alias: String,

    /// Gzip the user-data (deterministic) and print it base64-encoded, for
    /// EC2 user-data over its 16 KiB limit (--format userdata only).
    #[arg(long)]
    pub gzip: bool,

    /// Treat warnings as errors (exit 2).
    #[arg(long)]
    pub strict: bool,

    /// Print the decisions the policy leads to, in plain words, instead of
    /// the rendered output.
    #[arg(long, conflicts_with_all = ["check", "output"])]
    pub explain: bool,

    /// Memory of the smallest instance type the nodes use (e.g. 2Gi), to
    /// warn about kubelet OOM on small instances.
    #[arg(long, value_name = "QUANTITY")]
    pub instance_memory: Option<String>,

    /// Write the result to FILE (atomically) instead of stdout.
    #[arg(long, short, value_name = "FILE", conflicts_with = "check")]
    pub output: Option<PathBuf>,

    /// Compare the result with FILE: exit 0 when equal, else print a unified
    /// diff on stdout and exit 2.
    #[arg(long, value_name = "FILE")]
    pub check: Option<PathBuf>,
}

/// Output of `accelready render`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum RenderFormat {
    /// Bottlerocket user-data TOML.
    Userdata,
    /// A karpenter.k8s.aws/v1 EC2NodeClass whose userData is that TOML.
    Ec2nodeclass,
}
