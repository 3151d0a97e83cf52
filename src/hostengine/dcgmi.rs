//! What the engine sees: `dcgmi discovery -l` against the engine's address,
//! compared with the GPU device nodes the host has.
//!
//! The listing (NVIDIA/DCGM `dcgmi/Query.cpp`, `DisplayDiscoveredDevices`)
//! starts with `N GPU found.` / `N GPUs found.`, then a table of GPU ids
//! with name, PCI bus id and UUID, then `M NvSwitches found.` and its table.
//! The count line is what we read; a missing one (connection refused, an
//! error from the engine) is an error carrying dcgmi's own words.

use std::process::Stdio;
use std::sync::mpsc;
use std::time::Duration;

use serde::Serialize;

use super::engine::{self, Launch};

/// Why dcgmi gave no GPU count.
#[derive(Debug, thiserror::Error)]
pub enum DcgmiError {
    #[error("cannot start '{program}'")]
    Spawn {
        program: String,
        #[source]
        source: std::io::Error,
    },
    #[error("'{program}' did not answer within {seconds} s (killed)")]
    Timeout { program: String, seconds: u64 },
    #[error("'{command}' printed no GPU count ({status}): {output}")]
    NoCount {
        command: String,
        status: String,
        output: String,
    },
}

/// The number in the `N GPU(s) found.` line of `dcgmi discovery -l`.
pub fn parse_discovery(text: &str) -> Option<usize> {
    text.lines().find_map(|line| {
        let line = line.trim();
        let count = line
            .strip_suffix(" GPUs found.")
            .or_else(|| line.strip_suffix(" GPU found."))?;
        count.parse().ok()
    })
}

/// How long a SIGKILLed dcgmi may take to be reaped before it is left behind.
const KILLED_WAIT: Duration = Duration::from_secs(5);

/// Runs `launch` (a `dcgmi discovery -l`) and returns the GPU count it
/// prints; kills it after `timeout`. Blocking: the supervisor calls it from
/// a blocking task, `check --engine` directly.
pub fn discover(launch: &Launch, timeout: Duration) -> Result<usize, DcgmiError> {
    let program = launch.program.display().to_string();
    let child = engine::spawn(launch, Stdio::piped(), Stdio::piped()).map_err(|source| {
        DcgmiError::Spawn {
            program: program.clone(),
            source,
        }
    })?;
    let pid = child.id();
    let (done, finished) = mpsc::channel();
    // wait_with_output reads stdout and stderr together (no pipe can fill up
    // while the other is read) and reaps the child.
    let waiter = std::thread::spawn(move || {
        let output = child.wait_with_output();
        let _ = done.send(());
        output
    });
    let timed_out = finished.recv_timeout(timeout).is_err();
    if timed_out {
        // SIGKILL ends it and closes its pipes; the waiter then reaps it.
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid as i32),
            nix::sys::signal::Signal::SIGKILL,
        );
        // One stuck in the kernel (D state) may not die at once: it is left
        // to its waiter thread rather than waited for without end.
        if finished.recv_timeout(KILLED_WAIT).is_err() {
            return Err(DcgmiError::Timeout {
                program,
                seconds: timeout.as_secs(),
            });
        }
    }
    let output = waiter
        .join()
        .unwrap_or_else(|_| Err(std::io::Error::other("the waiting thread panicked")));
    engine::disown(pid);
    if timed_out {
        return Err(DcgmiError::Timeout {
            program,
            seconds: timeout.as_secs(),
        });
    }
    let (text, status) = match output {
        Ok(output) => {
            let mut text = output.stdout;
            text.extend_from_slice(&output.stderr);
            (
                String::from_utf8_lossy(&text).into_owned(),
                output.status.to_string(),
            )
        }
        Err(e) => (String::new(), format!("cannot wait for it: {e}")),
    };
    parse_discovery(&text).ok_or_else(|| DcgmiError::NoCount {
        command: launch.argv().join(" "),
        status,
        output: one_line(&text),
    })
}

/// dcgmi's output on one line, bounded, for a status field.
fn one_line(text: &str) -> String {
    let joined = text
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty())
        .collect::<Vec<_>>()
        .join(" / ");
    if joined.is_empty() {
        return "(no output)".to_owned();
    }
    let mut short: String = joined.chars().take(300).collect();
    if short.len() < joined.len() {
        short.push_str(" ...");
    }
    short
}

/// The engine's GPU count against the host's `/dev/nvidia[0-9]+` nodes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case", tag = "status")]
pub enum GpuCheck {
    /// The engine sees as many GPUs as the host has device nodes.
    Match { engine: usize, device_nodes: usize },
    /// It does not: the monitoring agent raises `NvidiaDeviceCountMismatch`
    /// (Fatal: the node is replaced), as it would with no engine at all.
    Mismatch { engine: usize, device_nodes: usize },
    /// No `dcgmi` in the bundle: the engine listens, but what it sees is not
    /// known.
    Unverified { device_nodes: usize, reason: String },
    /// dcgmi ran but gave no count.
    Error { device_nodes: usize, error: String },
}

impl GpuCheck {
    /// A count from dcgmi, compared with the device nodes.
    pub fn compare(engine: usize, device_nodes: usize) -> Self {
        if engine == device_nodes {
            GpuCheck::Match {
                engine,
                device_nodes,
            }
        } else {
            GpuCheck::Mismatch {
                engine,
                device_nodes,
            }
        }
    }

    /// Whether the engine answered dcgmi with a GPU count.
    pub fn answered(&self) -> bool {
        matches!(self, GpuCheck::Match { .. } | GpuCheck::Mismatch { .. })
    }

    /// Worth checking again later (a mismatch or an error may be transient).
    pub fn is_bad(&self) -> bool {
        matches!(self, GpuCheck::Mismatch { .. } | GpuCheck::Error { .. })
    }

    pub fn describe(&self) -> String {
        match self {
            GpuCheck::Match { engine, .. } => format!("the engine sees {engine} GPU(s), as many as /dev/nvidia[0-9]+ nodes"),
            GpuCheck::Mismatch { engine, device_nodes } => format!(
                "GPU COUNT MISMATCH: the engine sees {engine} GPU(s) but the host has {device_nodes} /dev/nvidia[0-9]+ node(s); the monitoring agent will raise NvidiaDeviceCountMismatch and node repair will replace the node"
            ),
            GpuCheck::Unverified { reason, .. } => format!("GPU count unverified: {reason}"),
            GpuCheck::Error { error, .. } => format!("GPU count unknown: {error}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The listing as DCGM prints it (one GPU, then the NvSwitch table).
    const ONE_GPU: &str = "1 GPU found.
+--------+----------------------------------------------------------------------+
| GPU ID | Device Information                                                   |
+--------+----------------------------------------------------------------------+
| 0      | Name: NVIDIA T4G                                                     |
|        | PCI Bus ID: 00000000:00:1F.0                                         |
|        | Device UUID: GPU-5a4f3a1e-8a7b-2c1d-9e0f-123456789abc                |
+--------+----------------------------------------------------------------------+
0 NvSwitches found.
+-----------+
| Switch ID |
+-----------+
+-----------+
";

    #[test]
    fn the_count_line_is_read() {
        assert_eq!(parse_discovery(ONE_GPU), Some(1));
        assert_eq!(parse_discovery("8 GPUs found.\n+---+\n"), Some(8));
        assert_eq!(
            parse_discovery("0 GPUs found.\n0 NvSwitches found.\n"),
            Some(0)
        );
        // The NvSwitch line is not a GPU count.
        assert_eq!(parse_discovery("2 NvSwitches found.\n"), None);
        assert_eq!(
            parse_discovery("Error: unable to establish a connection to the specified host: 127.0.0.1:5555\nError: Unable to connect to host engine. Host engine connection invalid/disconnected.\n"),
            None
        );
        assert_eq!(parse_discovery("many GPUs found.\n"), None);
    }

    #[test]
    fn counts_compare_with_the_device_nodes() {
        assert!(matches!(GpuCheck::compare(1, 1), GpuCheck::Match { .. }));
        let mismatch = GpuCheck::compare(0, 1);
        assert!(mismatch.is_bad());
        assert!(mismatch.describe().contains("NvidiaDeviceCountMismatch"));
        assert_eq!(
            serde_json::to_value(&mismatch).unwrap(),
            serde_json::json!({"status": "mismatch", "engine": 0, "device_nodes": 1})
        );
    }

    #[test]
    fn output_is_kept_short_on_one_line() {
        assert_eq!(one_line("a\n\n  b \n"), "a / b");
        assert_eq!(one_line(""), "(no output)");
        assert!(one_line(&"x".repeat(1000)).ends_with(" ..."));
    }
}
