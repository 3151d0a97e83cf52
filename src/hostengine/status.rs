//! The supervisor's status: one JSON document on the host
//! (`/var/lib/accelready/hostengine.json`), rewritten atomically at every
//! transition, so that an operator (or `cat` from the admin container) always
//! reads a whole, current answer.

use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::time::Duration;

use serde::Serialize;
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;
use tracing::warn;

use super::dcgmi::GpuCheck;
use super::detect::Process;
use crate::arch::Arch;
use crate::host::HostRoot;

/// What the supervisor is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum State {
    /// The policy wants no engine on this node (`[hostengine]`).
    IdleNotNeeded,
    /// Another engine serves the node; ours is not running.
    IdleOtherEngine,
    /// No installed bundle with `nv-hostengine` yet.
    WaitingForBundle,
    /// Ours is started and not yet accepting connections (or not yet checked).
    Starting,
    Running,
    /// Ours keeps exiting; restarts continue with backoff.
    CrashLoop,
    /// The supervisor was asked to stop (SIGTERM/SIGINT) and has stopped ours.
    Stopped,
}

impl State {
    pub fn as_str(self) -> &'static str {
        match self {
            State::IdleNotNeeded => "idle-not-needed",
            State::IdleOtherEngine => "idle-other-engine",
            State::WaitingForBundle => "waiting-for-bundle",
            State::Starting => "starting",
            State::Running => "running",
            State::CrashLoop => "crash-loop",
            State::Stopped => "stopped",
        }
    }
}

/// The current time, RFC 3339, UTC.
pub fn now() -> String {
    OffsetDateTime::now_utc()
        .format(&Rfc3339)
        .unwrap_or_else(|_| "unknown".to_owned())
}

/// The time `after` from now, RFC 3339.
pub fn after(after: Duration) -> String {
    (OffsetDateTime::now_utc() + after)
        .format(&Rfc3339)
        .unwrap_or_else(|_| "unknown".to_owned())
}

/// The engine we run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EngineInfo {
    pub pid: u32,
    pub started: String,
    /// The bundle it runs from (its sha256).
    pub bundle_sha256: String,
    pub argv: Vec<String>,
    pub ld_library_path: String,
    /// The host root it runs in (chroot), or `/`.
    pub root: PathBuf,
    /// How long it took to accept connections, once it did.
    pub ready_ms: Option<u64>,
}

/// How the engine last ended, or failed to start.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LastExit {
    pub at: String,
    /// In words: `exit status: 1`, `signal: 9 (SIGKILL)`, `cannot start: ...`,
    /// `not accepting connections after 30 s`.
    pub reason: String,
    pub code: Option<i32>,
    pub signal: Option<i32>,
    /// How long it ran.
    pub uptime_ms: u64,
}

impl LastExit {
    pub fn from_status(status: ExitStatus, uptime: Duration) -> Self {
        use std::os::unix::process::ExitStatusExt;
        LastExit {
            at: now(),
            reason: status.to_string(),
            code: status.code(),
            signal: status.signal(),
            uptime_ms: millis(uptime),
        }
    }

    pub fn other(reason: impl Into<String>, uptime: Duration) -> Self {
        LastExit {
            at: now(),
            reason: reason.into(),
            code: None,
            signal: None,
            uptime_ms: millis(uptime),
        }
    }
}

/// Another engine, and how we know.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct OtherEngine {
    /// Something accepts connections on our address.
    pub port_listening: bool,
    /// `nv-hostengine` processes on the host that are not ours.
    pub processes: Vec<Process>,
}

impl OtherEngine {
    pub fn describe(&self, address: &str) -> String {
        let mut signs = Vec::new();
        if self.port_listening {
            signs.push(format!(
                "something already accepts connections on {address}"
            ));
        }
        if !self.processes.is_empty() {
            let pids: Vec<String> = self.processes.iter().map(|p| p.pid.to_string()).collect();
            signs.push(format!(
                "an nv-hostengine that is not ours runs on the host (pid {})",
                pids.join(", ")
            ));
        }
        signs.join("; ")
    }
}

/// The whole status document (its JSON form is documented in the README).
#[derive(Debug, Clone, Serialize)]
pub struct Status {
    pub accelready_version: &'static str,
    pub state: State,
    /// Why, in plain words.
    pub reason: String,
    /// When this state was entered.
    pub since: String,
    /// When this document was written.
    pub updated: String,
    pub supervisor_pid: u32,
    pub supervisor_started: String,
    pub arch: Arch,
    /// `127.0.0.1:<port>`.
    pub address: String,
    pub port: u16,
    /// The engine's pid while ours runs.
    pub pid: Option<u32>,
    pub engine: Option<EngineInfo>,
    /// Restarts after an unexpected exit, since the supervisor started.
    pub restarts: u32,
    /// Unexpected exits in a row (reset once an engine stays up).
    pub consecutive_failures: u32,
    pub last_exit: Option<LastExit>,
    /// When the next start is due, while waiting to restart.
    pub next_restart: Option<String>,
    /// The GPUs the engine sees, checked with dcgmi.
    pub gpus: Option<GpuCheck>,
    pub other_engine: Option<OtherEngine>,
    /// The bundle in use or awaited (host path of its version directory).
    pub bundle: Option<PathBuf>,
}

impl Status {
    pub fn new(arch: Arch, port: u16) -> Self {
        let started = now();
        Status {
            accelready_version: env!("CARGO_PKG_VERSION"),
            state: State::Starting,
            reason: "starting up".to_owned(),
            since: started.clone(),
            updated: started.clone(),
            supervisor_pid: std::process::id(),
            supervisor_started: started,
            arch,
            address: format!("{}:{port}", super::engine::BIND_ADDRESS),
            port,
            pid: None,
            engine: None,
            restarts: 0,
            consecutive_failures: 0,
            last_exit: None,
            next_restart: None,
            gpus: None,
            other_engine: None,
            bundle: None,
        }
    }
}

/// Writes the status on the host, atomically; trouble is logged once per
/// distinct error and never stops the supervisor.
#[derive(Debug)]
pub struct StatusFile {
    host_path: PathBuf,
    path: PathBuf,
    last_error: Option<String>,
}

impl StatusFile {
    pub fn new(host: &HostRoot, host_path: &Path) -> Self {
        StatusFile {
            host_path: host_path.to_path_buf(),
            path: host.join(host_path),
            last_error: None,
        }
    }

    pub fn write(&mut self, status: &mut Status) {
        status.updated = now();
        let result = serde_json::to_vec_pretty(status)
            .map_err(std::io::Error::other)
            .and_then(|mut json| {
                json.push(b'\n');
                std::fs::create_dir_all(crate::fsutil::parent_dir(&self.path))?;
                crate::fsutil::write_atomic(&self.path, &json)
            });
        match result {
            Ok(()) => self.last_error = None,
            Err(e) => {
                let text = e.to_string();
                if self.last_error.as_deref() != Some(&text) {
                    warn!(path = %self.host_path.display(), error = %text, "cannot write the hostengine status on the host");
                    self.last_error = Some(text);
                }
            }
        }
    }
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_are_spelled_as_documented() {
        for (state, name) in [
            (State::IdleNotNeeded, "idle-not-needed"),
            (State::IdleOtherEngine, "idle-other-engine"),
            (State::WaitingForBundle, "waiting-for-bundle"),
            (State::Starting, "starting"),
            (State::Running, "running"),
            (State::CrashLoop, "crash-loop"),
            (State::Stopped, "stopped"),
        ] {
            assert_eq!(state.as_str(), name);
            assert_eq!(serde_json::to_value(state).unwrap(), name);
        }
    }

    #[test]
    fn the_status_file_is_written_whole() {
        let dir = tempfile::tempdir().unwrap();
        let host = HostRoot::new(dir.path());
        let mut file = StatusFile::new(&host, Path::new("/var/lib/accelready/hostengine.json"));
        let mut status = Status::new(Arch::Aarch64, 5555);
        status.state = State::IdleNotNeeded;
        file.write(&mut status);
        let written: serde_json::Value = serde_json::from_slice(
            &std::fs::read(dir.path().join("var/lib/accelready/hostengine.json")).unwrap(),
        )
        .unwrap();
        assert_eq!(written["state"], "idle-not-needed");
        assert_eq!(written["address"], "127.0.0.1:5555");
        assert_eq!(written["pid"], serde_json::Value::Null);
    }

    #[test]
    fn other_engines_are_described_by_their_signs() {
        let other = OtherEngine {
            port_listening: true,
            processes: vec![Process {
                pid: 42,
                name: "nv-hostengine".into(),
            }],
        };
        let text = other.describe("127.0.0.1:5555");
        assert!(
            text.contains("127.0.0.1:5555") && text.contains("pid 42"),
            "{text}"
        );
    }
}
