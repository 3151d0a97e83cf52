//! `accelready hostengine`: the superpowered host container's entrypoint. It
//! runs and guards the DCGM host engine (`nv-hostengine` on
//! `127.0.0.1:<port>`) on the nodes that need one and have none, because the
//! EKS node monitoring agent is a DCGM *client*: it loads DCGM from its own
//! image and needs an engine listening, which on arm64 nobody provides (the
//! agent chart's `dcgm-server` is amd64-only; FACTS §7).
//!
//! What it does, in order, and forever (a host container is a service:
//! systemd restarts it 45 s after it exits, so it never exits on its own):
//! 1. decides from the policy (`[hostengine]`) whether this node wants an
//!    engine; if not, stays idle (`idle-not-needed`);
//! 2. stays idle while another engine serves the node (`idle-other-engine`,
//!    see [`detect`]), re-checking every minute;
//! 3. finds the verified bundle `boot` installed (`<install-dir>/current`
//!    with `bin/nv-hostengine`), or provisions it through the same plan as
//!    `boot` when the policy allows, waiting with a bounded backoff
//!    (`waiting-for-bundle`);
//! 4. starts the engine against the host ([`engine`]), waits until it accepts
//!    connections and checks with `dcgmi` that it sees the node's GPUs
//!    ([`dcgmi`]) (`starting`, then `running`);
//! 5. restarts it after an unexpected exit, with backoff, reporting a
//!    `crash-loop`; stops it (and goes idle, loudly) when another engine
//!    appears; on SIGTERM/SIGINT stops it and exits 0 (`stopped`).
//!
//! Every transition is logged and written to the status file
//! ([`status`], `/var/lib/accelready/hostengine.json` on the host). It never
//! talks to the Bottlerocket API: changing `kubernetes.*` settings after
//! kubelet has started restarts kubelet (FACTS §7.1).

pub mod dcgmi;
pub mod detect;
pub mod engine;
pub mod options;
pub mod status;
mod supervise;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Serialize;

use crate::host::HostRoot;
use crate::policy::Policy;

pub use options::{backoff, HostengineError, Options, Timings, HOST_CTR_STOP_TIMEOUT, KILL_WAIT};

/// The directory Bottlerocket mounts into every host container (persistent,
/// read-write): its presence tells the image it runs as a host container.
pub const CONTAINER_DIR: &str = "/.bottlerocket/host-containers/current";
/// Where Bottlerocket puts a host container's decoded user-data.
pub const DEFAULT_USER_DATA: &str = "/.bottlerocket/host-containers/current/user-data";
/// The status document on the host (a host path).
pub const DEFAULT_STATUS: &str = "/var/lib/accelready/hostengine.json";
/// What `check --engine` asks by default: where the agent looks.
pub const DEFAULT_ENGINE_ADDRESS: &str = "127.0.0.1:5555";
/// Runs the supervisor until SIGTERM/SIGINT, on a private current-thread
/// runtime. Children are started from this (the main) thread, which matters:
/// `PR_SET_PDEATHSIG` follows the thread that forked.
pub fn run_blocking(
    host: &HostRoot,
    policy: &Policy,
    options: &Options,
) -> Result<(), HostengineError> {
    if options.timings.stop_grace + KILL_WAIT >= HOST_CTR_STOP_TIMEOUT {
        return Err(HostengineError::StopGrace(options.timings.stop_grace));
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(HostengineError::Runtime)?;
    let result = runtime.block_on(supervise::supervise(host, policy, options));
    // A dcgmi still being waited for must not hold up the exit.
    runtime.shutdown_background();
    result
}

/// What `check --engine` found at an address.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EngineProbe {
    pub address: String,
    /// Something accepts TCP connections there.
    pub listening: bool,
    /// GPUs the engine sees (`dcgmi discovery -l`), when dcgmi is installed
    /// and the engine listens.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpus: Option<usize>,
    /// The dcgmi used (host path), if one is installed.
    pub dcgmi: Option<PathBuf>,
    /// Why dcgmi gave no count.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpus_error: Option<String>,
}

/// Asks the engine at `address`: does it accept connections, and (with the
/// `dcgmi` installed under `install_dir`, run against the host) how many
/// GPUs does it see? Never fails: what cannot be known is in the answer.
pub fn probe_engine(
    host: &HostRoot,
    install_dir: &Path,
    nvml: Option<&Path>,
    address: SocketAddr,
    timeout: Duration,
) -> EngineProbe {
    let listening = detect::port_accepts(address, Duration::from_secs(2));
    let version_dir = engine::current_version(host, install_dir).map(|v| install_dir.join(v));
    let dcgmi = version_dir
        .as_ref()
        .map(|dir| dir.join(engine::DCGMI))
        .filter(|path| host.join(path).is_file());
    let mut probe = EngineProbe {
        address: address.to_string(),
        listening,
        gpus: None,
        dcgmi: dcgmi.clone(),
        gpus_error: None,
    };
    if let (true, Some(dcgmi), Some(dir)) = (listening, dcgmi, version_dir) {
        let launch = engine::dcgmi_launch(
            host,
            &dcgmi,
            &dir.join("lib"),
            nvml.and_then(Path::parent),
            &probe.address,
        );
        match dcgmi::discover(&launch, timeout) {
            Ok(count) => probe.gpus = Some(count),
            Err(e) => probe.gpus_error = Some(crate::report::error_chain(&e)),
        }
    }
    probe
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_probe_of_a_closed_port_says_not_listening() {
        let dir = tempfile::tempdir().unwrap();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap();
        drop(listener);
        let probe = probe_engine(
            &HostRoot::new(dir.path()),
            Path::new("/var/lib/accelready/dcgm"),
            None,
            address,
            Duration::from_secs(1),
        );
        assert!(!probe.listening);
        assert_eq!(probe.gpus, None);
        assert_eq!(probe.dcgmi, None);
        let json = serde_json::to_value(&probe).unwrap();
        assert!(json.get("gpus").is_none(), "{json}");
    }
}
