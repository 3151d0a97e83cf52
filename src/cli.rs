//! Command-line definitions (clap derive). One subcommand per library entry
//! point; the help texts are the first documentation an operator reads.

use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::arch::Arch;
use crate::host::HostRoot;
use crate::input::ByteSize;
use crate::repair::kube;

/// Keep NVIDIA GPU nodes on Bottlerocket honest about DCGM, before Karpenter
/// node repair replaces them.
#[derive(Debug, Parser)]
#[command(name = "accelready", version, about, long_about = LONG_ABOUT)]
pub struct Cli {
    #[command(flatten)]
    pub global: GlobalArgs,
    /// Absent: the role is picked from the container's directories
    /// ([`parse_with_role`]).
    #[command(subcommand)]
    pub command: Option<Command>,
}

/// Which subcommand an image started without arguments runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Boot,
    Hostengine,
}

impl Role {
    pub fn subcommand(self) -> &'static str {
        match self {
            Role::Boot => "boot",
            Role::Hostengine => "hostengine",
        }
    }
}

/// No subcommand, and no container directory that names a role.
#[derive(Debug, thiserror::Error)]
#[error("no subcommand given, and this is neither a Bottlerocket bootstrap container ({boot} does not exist: it would run `boot`) nor a host container ({host} does not exist: it would run `hostengine`); name a subcommand (accelready --help)", boot = crate::boot::CONTAINER_DIR, host = crate::hostengine::CONTAINER_DIR)]
pub struct NoRole;

/// The role of an image started with no subcommand: one image serves as
/// both containers, and older Bottlerocket releases cannot set a host
/// container's `command`, so the entrypoint names no subcommand and the
/// directory Bottlerocket mounts into each kind of container decides.
pub fn pick_role(exists: impl Fn(&Path) -> bool) -> Option<Role> {
    if exists(Path::new(crate::boot::CONTAINER_DIR)) {
        Some(Role::Boot)
    } else if exists(Path::new(crate::hostengine::CONTAINER_DIR)) {
        Some(Role::Hostengine)
    } else {
        None
    }
}

/// Parses `args` (program name first) like [`Parser::parse_from`] (help,
/// version and errors exit as clap does); with no subcommand, appends the
/// one [`pick_role`] finds, keeping the global flags given. When none is
/// found the command stays `None`, which [`crate::run`] turns into [`NoRole`].
pub fn parse_with_role(args: Vec<OsString>, exists: impl Fn(&Path) -> bool) -> Cli {
    let cli = Cli::parse_from(&args);
    if cli.command.is_some() {
        return cli;
    }
    match pick_role(exists) {
        Some(role) => {
            let mut args = args;
            args.push(role.subcommand().into());
            Cli::parse_from(args)
        }
        None => cli,
    }
}

const LONG_ABOUT: &str = "\
Keep NVIDIA GPU nodes on Bottlerocket honest about DCGM, before Karpenter node
repair replaces them.

Bottlerocket's NVIDIA variants ship no DCGM. The EKS node monitoring agent then
sets AcceleratedHardwareReady=False ('libdcgm.so not Found'), and Karpenter node
repair replaces the node 10 minutes later, forever. accelready finds that before
it happens (check), heals it at boot (provision, boot), runs the DCGM host
engine the agent needs where nothing else does (hostengine), keeps node
settings in line with the repair policy (render), and explains a live node
(diagnose).

As a container image it needs no arguments: in a Bottlerocket bootstrap
container it runs `boot`, in a host container `hostengine`.

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
    /// Render Bottlerocket user-data (or a Karpenter EC2NodeClass) from a policy.
    Render(RenderArgs),
    /// Fetch, verify and install a DCGM bundle atomically, and expose it to the host.
    Provision(ProvisionArgs),
    /// The bootstrap container's entrypoint: check, provision, record the verdict.
    Boot(BootArgs),
    /// Forecast what Karpenter node repair will do to nodes, when, and why.
    Diagnose(DiagnoseArgs),
    /// The host container's entrypoint: run and guard the DCGM host engine.
    Hostengine(HostengineArgs),
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

    /// Also ask the DCGM host engine at ADDR: does it accept connections,
    /// and how many GPUs does it see (with the dcgmi installed under
    /// --install-dir)? Adds an "engine" object; verdict and exit code stay
    /// as they are.
    #[arg(
        long,
        value_name = "ADDR",
        num_args = 0..=1,
        default_missing_value = crate::hostengine::DEFAULT_ENGINE_ADDRESS
    )]
    pub engine: Option<SocketAddr>,
}

/// `accelready boot`
#[derive(Debug, Args)]
#[command(after_help = "\
What it does, in order, within the policy's [boot] deadline-seconds:
  1. reads the policy (the bootstrap container's user-data, as `render` embeds it);
  2. checks the host (like `accelready check`); if DCGM is not usable and
     dcgm.provision = \"if-missing\" pins a bundle for this architecture,
     provisions it (like `accelready provision`; with source = \"image\" from
     the bundle this image carries under /dcgm, nothing downloaded) and
     checks again;
  3. sets node labels accelready.io/driver (ready|missing) and
     accelready.io/dcgm (ready|provisioned|missing|unusable) through the
     Bottlerocket API, plus repair.taint when on-unready = \"taint\" and the
     node is not ready (removed again once it is);
  4. writes the report to /var/lib/accelready/report.json on the host (the
     previous one is kept as report.prev.json) and prints it.

Exit codes: 0, also when the node is not ready; with on-unready = \"fail-boot\"
a node that is not ready exits 10/11/20 like `check` (with essential = true
kubelet then never starts); 2 when the policy is missing or invalid.

Examples:
  accelready boot                      # as Bottlerocket runs it (the image's entrypoint)
  accelready boot --host-root /tmp/node --user-data policy.toml --api-socket /tmp/api.sock")]
pub struct BootArgs {
    /// The policy document (TOML). Bottlerocket writes the container's decoded
    /// user-data there.
    #[arg(
        long,
        env = "ACCELREADY_USER_DATA",
        value_name = "FILE",
        default_value = crate::boot::DEFAULT_USER_DATA
    )]
    pub user_data: PathBuf,

    /// The Bottlerocket API socket.
    #[arg(
        long,
        env = "ACCELREADY_API_SOCKET",
        value_name = "SOCKET",
        default_value = crate::bottlerocket::api::DEFAULT_SOCKET
    )]
    pub api_socket: PathBuf,

    /// Where to write the report on the host (host path).
    #[arg(long, value_name = "PATH", default_value = crate::boot::DEFAULT_REPORT)]
    pub report: PathBuf,

    /// Architecture of the host. Default: this binary's architecture.
    #[arg(long, value_name = "ARCH")]
    pub arch: Option<Arch>,

    /// Override the policy's boot.deadline-seconds (fractions allowed).
    #[arg(long, value_name = "SECONDS", value_parser = parse_deadline_seconds)]
    pub deadline_seconds: Option<f64>,

    /// Print the report as JSON (the same document as the report file).
    #[arg(long)]
    pub json: bool,

    #[command(flatten)]
    pub image: ImageArgs,
}

/// Where the image accelready runs from is, for `source = "image"` bundles.
#[derive(Debug, Args)]
pub struct ImageArgs {
    /// Root of the accelready image (its own filesystem), where a
    /// `source = "image"` bundle is found under /dcgm. Inside the bootstrap
    /// or host container that is /; tests point it at a tree of their own.
    #[arg(
        long,
        env = "ACCELREADY_IMAGE_ROOT",
        value_name = "DIR",
        default_value = crate::plan::DEFAULT_IMAGE_ROOT
    )]
    pub image_root: PathBuf,
}

/// A deadline in seconds: finite, above 0, at most a day.
fn parse_deadline_seconds(text: &str) -> Result<f64, String> {
    parse_seconds_of("a deadline", text)
}

/// A duration in seconds (fractions allowed): above 0, at most a day.
fn parse_seconds(text: &str) -> Result<f64, String> {
    parse_seconds_of("a duration", text)
}

fn parse_seconds_of(what: &str, text: &str) -> Result<f64, String> {
    let seconds: f64 = text
        .parse()
        .map_err(|_| format!("'{text}' is not a number of seconds"))?;
    if seconds.is_finite() && seconds > 0.0 && seconds <= 86_400.0 {
        Ok(seconds)
    } else {
        Err(format!(
            "'{text}': {what} must be above 0 and at most 86400 seconds"
        ))
    }
}

/// `accelready hostengine`
#[derive(Debug, Args)]
#[command(after_help = "\
Runs until SIGTERM/SIGINT, as Bottlerocket runs a host container (a service,
restarted 45 s after it exits): it never exits on its own, also when idle.

  1. reads the policy (the host container's user-data, the same document as
     the bootstrap container's);
  2. [hostengine] wants no engine on this architecture -> idle-not-needed;
  3. another engine serves the node (something accepts connections on
     127.0.0.1:<port>, or an nv-hostengine that is not ours runs on the host)
     -> idle-other-engine, looking again every minute;
  4. no verified <install-dir>/current/bin/nv-hostengine -> provisions the
     pinned bundle when the policy allows (as boot does), else waits with a
     bounded backoff -> waiting-for-bundle;
  5. starts `nv-hostengine -n -f - -b 127.0.0.1 -p <port>` chrooted into the
     host root, LD_LIBRARY_PATH = the bundle's lib/ + NVML's directory;
     ready = it accepts connections and dcgmi sees as many GPUs as there are
     /dev/nvidia[0-9]+ nodes -> starting, running;
  6. restarts it within 2 s after an unexpected exit, backing off up to 30 s
     -> crash-loop after 3 exits in a row; stops it when another engine
     appears; on SIGTERM stops it (SIGKILL after the grace) and exits 0.

The status is written to /var/lib/accelready/hostengine.json on the host at
every transition. Exit codes: 0 after SIGTERM/SIGINT, 2 when the policy is
missing or invalid, 1 internal error.

Examples:
  accelready hostengine          # as Bottlerocket runs it (the image's entrypoint, no subcommand)
  accelready hostengine --host-root /tmp/node --user-data policy.toml --arch x86_64 --recheck-seconds 1")]
pub struct HostengineArgs {
    /// The policy document (TOML). Bottlerocket writes the container's decoded
    /// user-data there.
    #[arg(
        long,
        env = "ACCELREADY_USER_DATA",
        value_name = "FILE",
        default_value = crate::hostengine::DEFAULT_USER_DATA
    )]
    pub user_data: PathBuf,

    /// Architecture of the host. Default: this binary's architecture.
    #[arg(long, env = "ACCELREADY_HOSTENGINE_ARCH", value_name = "ARCH")]
    pub arch: Option<Arch>,

    /// Where to write the status on the host (host path).
    #[arg(
        long,
        env = "ACCELREADY_HOSTENGINE_STATUS",
        value_name = "PATH",
        default_value = crate::hostengine::DEFAULT_STATUS
    )]
    pub status: PathBuf,

    /// The host's processes, searched for other nv-hostengine processes (a
    /// path on this machine). [default: <host-root>/proc]
    #[arg(long, env = "ACCELREADY_HOST_PROC", value_name = "DIR")]
    pub proc: Option<PathBuf>,

    /// How often to look again while idle, and to check a running engine. [default: 60]
    #[arg(long, env = "ACCELREADY_HOSTENGINE_RECHECK_SECONDS", value_name = "SECONDS", value_parser = parse_seconds, help_heading = "Timings")]
    pub recheck_seconds: Option<f64>,

    /// Delay before the first restart; doubles per exit in a row. [default: 0.5]
    #[arg(long, env = "ACCELREADY_HOSTENGINE_RESTART_DELAY_SECONDS", value_name = "SECONDS", value_parser = parse_seconds, help_heading = "Timings")]
    pub restart_delay_seconds: Option<f64>,

    /// Longest delay between restarts. [default: 30]
    #[arg(long, env = "ACCELREADY_HOSTENGINE_BACKOFF_CAP_SECONDS", value_name = "SECONDS", value_parser = parse_seconds, help_heading = "Timings")]
    pub backoff_cap_seconds: Option<f64>,

    /// How long a started engine may take to accept connections. [default: 30]
    #[arg(long, env = "ACCELREADY_HOSTENGINE_READY_TIMEOUT_SECONDS", value_name = "SECONDS", value_parser = parse_seconds, help_heading = "Timings")]
    pub ready_timeout_seconds: Option<f64>,

    /// Between SIGTERM and SIGKILL when stopping the engine; below 15 (host-ctr kills at 20). [default: 10]
    #[arg(long, env = "ACCELREADY_HOSTENGINE_STOP_GRACE_SECONDS", value_name = "SECONDS", value_parser = parse_seconds, help_heading = "Timings")]
    pub stop_grace_seconds: Option<f64>,

    /// An engine up this long has recovered: the failure count starts again. [default: 60]
    #[arg(long, env = "ACCELREADY_HOSTENGINE_STABLE_AFTER_SECONDS", value_name = "SECONDS", value_parser = parse_seconds, help_heading = "Timings")]
    pub stable_after_seconds: Option<f64>,

    /// How long one `dcgmi discovery -l` may take; an engine that answered
    /// before and then fails 3 looks in a row is restarted. [default: 20]
    #[arg(long, env = "ACCELREADY_HOSTENGINE_DCGMI_TIMEOUT_SECONDS", value_name = "SECONDS", value_parser = parse_seconds, help_heading = "Timings")]
    pub dcgmi_timeout_seconds: Option<f64>,

    /// Longest pause between looks for the bundle. [default: 30]
    #[arg(long, env = "ACCELREADY_HOSTENGINE_BUNDLE_WAIT_CAP_SECONDS", value_name = "SECONDS", value_parser = parse_seconds, help_heading = "Timings")]
    pub bundle_wait_cap_seconds: Option<f64>,

    #[command(flatten)]
    pub image: ImageArgs,
}

/// `accelready diagnose`
#[derive(Debug, Args)]
#[command(after_help = "\
Examples:
  kubectl get node ip-10-0-1-23.ec2.internal -o json | accelready diagnose --karpenter v1.4.0
  kubectl get nodes -o json > nodes.json; kubectl get events -A -o json > events.json
  accelready diagnose nodes.json --events events.json --json
  accelready diagnose node.json --now 2025-06-10T03:05:00Z --node-repair off
  kubectl get ds -n kube-system eks-node-monitoring-agent -o json > agent.json
  kubectl get ds -n kube-system dcgm-server -o json > dcgm-server.json
  accelready diagnose nodes.json --agent agent.json --dcgm-server dcgm-server.json
  accelready diagnose node.json --agent-version v1.7.2

The advice depends on the EKS node monitoring agent's release: pass it, or its
DaemonSet; without either, the newest modelled release is assumed and the
report says so.

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

    /// The EKS node monitoring agent's release (v1.7.2, 1.7.2, or an image
    /// tag such as v1.7.2-eksbuild.1). Default: from --agent, else the newest
    /// modelled release is assumed (and the report says so).
    #[arg(long, value_name = "VERSION", conflicts_with = "agent")]
    pub agent_version: Option<String>,

    /// `kubectl get ds -n kube-system eks-node-monitoring-agent -o json`: the
    /// agent's release from its image tag, and its DCGM_ADDRESS.
    #[arg(long, value_name = "FILE")]
    pub agent: Option<PathBuf>,

    /// `kubectl get ds -n kube-system dcgm-server -o json`: the agent chart's
    /// engine DaemonSet, to say on which nodes it runs (affinity, taints).
    #[arg(long, value_name = "FILE")]
    pub dcgm_server: Option<PathBuf>,

    /// The time to forecast from (RFC 3339). Default: now.
    #[arg(long, value_name = "RFC3339")]
    pub now: Option<String>,

    /// Print the forecast as JSON (schema in README).
    #[arg(long)]
    pub json: bool,

    /// The most bytes read from FILE, --events, --agent and --dcgm-server,
    /// each (a number, or with KiB, MiB or GiB). The default fits a
    /// 15,000-node cluster's
    /// `kubectl get nodes -o json`. Input is parsed as it streams: memory
    /// follows what is kept per node, not the input's size.
    #[arg(long, value_name = "BYTES", default_value_t = ByteSize(kube::DEFAULT_MAX_INPUT_BYTES))]
    pub max_input_bytes: ByteSize,
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
  accelready render accelready.toml --format agent-values > agent-values.yaml   # helm -f

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
    /// Helm values for the EKS node monitoring agent's chart that fit the
    /// policy (agent.version, hostengine.*): never two DCGM engines on a node.
    AgentValues,
}

/// `accelready provision`
#[derive(Debug, Args)]
#[command(after_help = "\
Examples:
  accelready provision --url https://mirror.example/datacenter-gpu-manager-4-core_4.6.1_arm64.deb \\
      --sha256 3f0c...e9 --arch aarch64
  accelready provision --host-root /tmp/node --no-expose --json --url ... --sha256 ...
  accelready provision --ca-bundle /etc/pki/mirror-ca.pem --url https://mirror.internal/dcgm.tar.zst --sha256 ...
  accelready provision --url file:///root/datacenter-gpu-manager-4-core_4.6.1_arm64.deb --sha256 ...   # air-gapped

Bundle formats (detected by magic bytes): .deb (data.tar.gz/xz/zst), .tar.gz/.tgz,
.tar.xz, .tar.zst. Only libdcgm.so* and libdcgmmodule*.so* are kept (and
nv-hostengine and dcgmi with --with-hostengine).")]
pub struct ProvisionArgs {
    /// Bundle URL: https://; file:///ABS/PATH for a bundle file on this
    /// machine (same verification, no network); http:// only with
    /// --allow-insecure-http.
    #[arg(long, value_name = "URL")]
    pub url: String,

    /// Expected sha256 of the bundle file (64 hex digits, optional 'sha256:' prefix).
    #[arg(long, value_name = "HEX")]
    pub sha256: String,

    /// Architecture the bundle's ELF files must be built for. Default: this
    /// binary's architecture.
    #[arg(long, value_name = "ARCH")]
    pub arch: Option<Arch>,

    /// Host directory holding installed versions and the 'current' link.
    #[arg(long, value_name = "DIR", default_value = crate::bundle::DEFAULT_INSTALL_DIR)]
    pub install_dir: PathBuf,

    /// Host directory (under /mnt) where 'current' is bind-mounted read-only.
    #[arg(long, value_name = "DIR", default_value = crate::bundle::DEFAULT_EXPOSE_AT)]
    pub expose_at: PathBuf,

    /// Install only; do not bind-mount.
    #[arg(long)]
    pub no_expose: bool,

    /// Also install nv-hostengine and dcgmi (when the bundle has it) into bin/.
    #[arg(long)]
    pub with_hostengine: bool,

    /// Allow http:// URLs and redirects (the sha256 still guards the content).
    #[arg(long)]
    pub allow_insecure_http: bool,

    /// Extra trusted CA certificates (PEM), e.g. for a private mirror.
    #[arg(long, value_name = "FILE")]
    pub ca_bundle: Option<PathBuf>,

    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,

    /// Largest bundle download accepted, in bytes.
    #[arg(long, value_name = "BYTES", default_value_t = 1 << 30)]
    pub max_bytes: u64,

    /// Most archive entries read before refusing the bundle.
    #[arg(long, value_name = "N", default_value_t = 10_000)]
    pub max_entries: u64,

    /// Most bytes the archive may unpack to before refusing it.
    #[arg(long, value_name = "BYTES", default_value_t = 4 << 30)]
    pub max_unpacked_bytes: u64,

    /// Connect timeout, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 10_000)]
    pub connect_timeout_ms: u64,

    /// Longest wait for any single read from the server, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 30_000)]
    pub read_timeout_ms: u64,

    /// Deadline for the whole run, retries included, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 600_000)]
    pub deadline_ms: u64,

    /// Most consecutive failed download attempts. Answers with Retry-After
    /// and attempts that received part of the bundle do not count (the
    /// deadline bounds them).
    #[arg(long, value_name = "N", default_value_t = 6)]
    pub max_attempts: u32,

    /// Longest wait a server's Retry-After may ask for, in milliseconds
    /// (longer asks are cut to this).
    #[arg(long, value_name = "MS", default_value_t = crate::bundle::Timeouts::DEFAULT_RETRY_AFTER_MAX_MS)]
    pub retry_after_max_ms: u64,

    /// When stderr is not a terminal: a progress log line at most this often,
    /// in milliseconds (on a terminal: a progress bar).
    #[arg(long, value_name = "MS", default_value_t = crate::bundle::Progress::DEFAULT_LOG_EVERY_MS, hide = true)]
    pub progress_every_ms: u64,

    /// First retry delay in milliseconds (doubles per attempt, with jitter).
    #[arg(long, value_name = "MS", default_value_t = 500, hide = true)]
    pub retry_base_ms: u64,

    /// Longest retry delay in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 10_000, hide = true)]
    pub retry_cap_ms: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_role_follows_the_container_directory() {
        let only = |dir: &'static str| move |path: &Path| path == Path::new(dir);
        assert_eq!(
            pick_role(only(crate::boot::CONTAINER_DIR)),
            Some(Role::Boot)
        );
        assert_eq!(
            pick_role(only(crate::hostengine::CONTAINER_DIR)),
            Some(Role::Hostengine)
        );
        assert_eq!(pick_role(|_: &Path| false), None);
        let text = NoRole.to_string();
        assert!(
            text.contains(crate::boot::CONTAINER_DIR)
                && text.contains(crate::hostengine::CONTAINER_DIR),
            "{text}"
        );
    }

    #[test]
    fn a_picked_role_keeps_the_global_flags_and_an_explicit_one_wins() {
        let args = |list: &[&str]| list.iter().map(OsString::from).collect::<Vec<_>>();
        let host = |path: &Path| path == Path::new(crate::hostengine::CONTAINER_DIR);
        let cli = parse_with_role(args(&["accelready", "--log-format", "json"]), host);
        assert!(matches!(cli.command, Some(Command::Hostengine(_))));
        assert_eq!(cli.global.log_format, LogFormat::Json);
        let cli = parse_with_role(args(&["accelready", "render"]), host);
        assert!(matches!(cli.command, Some(Command::Render(_))));
        let cli = parse_with_role(args(&["accelready"]), |_: &Path| false);
        assert!(cli.command.is_none());
    }
}
