//! Runs a command under GNU `/usr/bin/time` for the benches: wall time,
//! CPU time and peak RSS of the command itself (`time` forks from a small
//! process, so the figure is the command's own, not the bench's).

use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// One run of a command.
#[derive(Debug, Clone, Copy)]
pub struct Sample {
    pub wall: Duration,
    /// User plus system CPU time: less sensitive than `wall` to other
    /// processes on a busy machine.
    pub cpu: Duration,
    pub peak_rss_kib: u64,
    pub status: ExitStatus,
}

/// Whether GNU time is there to measure with (Debian package `time`).
pub fn available() -> bool {
    std::path::Path::new("/usr/bin/time").is_file()
}

/// Runs `command` (its program, arguments and environment) under
/// `/usr/bin/time`, stdout and stderr discarded.
pub fn run(command: &Command) -> Sample {
    let report = tempfile::NamedTempFile::new().expect("a temporary file");
    let mut timed = Command::new("/usr/bin/time");
    timed
        .args(["-f", "%U %S %M", "-o"])
        .arg(report.path())
        .arg(command.get_program())
        .args(command.get_args())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    for (key, value) in command.get_envs() {
        if let Some(value) = value {
            timed.env(key, value);
        }
    }
    let started = Instant::now();
    let status = timed.status().expect("run /usr/bin/time");
    let wall = started.elapsed();
    let text = std::fs::read_to_string(report.path()).expect("time's report");
    // "Command exited with non-zero status N" may come first.
    let last = text.trim().lines().last().unwrap_or_default();
    let fields: Vec<f64> = last
        .split_whitespace()
        .filter_map(|field| field.parse().ok())
        .collect();
    let [user, system, rss] = fields[..] else {
        panic!("unexpected report from /usr/bin/time: {text}");
    };
    Sample {
        wall,
        cpu: Duration::from_secs_f64(user + system),
        peak_rss_kib: rss as u64,
        status,
    }
}

/// The median of each measure over `samples` (each sorted on its own).
pub fn median(samples: &[Sample]) -> Sample {
    let middle = |mut values: Vec<Duration>| {
        values.sort();
        values[values.len() / 2]
    };
    let mut rss: Vec<u64> = samples.iter().map(|s| s.peak_rss_kib).collect();
    rss.sort();
    Sample {
        wall: middle(samples.iter().map(|s| s.wall).collect()),
        cpu: middle(samples.iter().map(|s| s.cpu).collect()),
        peak_rss_kib: rss[rss.len() / 2],
        status: samples[0].status,
    }
}
