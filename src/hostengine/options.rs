//! What the supervisor is told: its timings, its options, and why it could
//! not run. A leaf module, so that the supervisor and its parent share them
//! without importing each other.

use std::path::PathBuf;
use std::time::Duration;

use crate::arch::Arch;

/// host-ctr sends SIGKILL this long after SIGTERM (FACTS §7.1); stopping the
/// engine must finish well before.
pub const HOST_CTR_STOP_TIMEOUT: Duration = Duration::from_secs(20);
/// How long to wait for an engine to vanish after SIGKILL (a process stuck
/// in the driver may take a while): the stop grace plus this must end before
/// host-ctr's SIGKILL, so that the supervisor still writes `stopped`.
pub const KILL_WAIT: Duration = Duration::from_secs(5);

/// How fast things happen; injectable so that tests run in seconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timings {
    /// How often an idle supervisor looks again, and a running one checks
    /// for another engine and that its own still accepts connections.
    pub recheck: Duration,
    /// Delay before the first restart after an unexpected exit; it doubles
    /// with every further exit in a row, up to `backoff_cap`.
    pub restart_delay: Duration,
    pub backoff_cap: Duration,
    /// Exits in a row after which the state is `crash-loop`.
    pub crash_loop_after: u32,
    /// How long a started engine may take to accept connections.
    pub ready_timeout: Duration,
    /// Between SIGTERM and SIGKILL when stopping the engine.
    pub stop_grace: Duration,
    /// An engine up this long has recovered: the next exit counts as the first.
    pub stable_after: Duration,
    /// Longest pause between looks for the bundle (starting at 1 s, doubling).
    pub bundle_wait_cap: Duration,
    /// Longest a `dcgmi discovery -l` may take.
    pub dcgmi_timeout: Duration,
}

impl Default for Timings {
    fn default() -> Self {
        Timings {
            recheck: Duration::from_secs(60),
            restart_delay: Duration::from_millis(500),
            backoff_cap: Duration::from_secs(30),
            crash_loop_after: 3,
            ready_timeout: Duration::from_secs(30),
            stop_grace: Duration::from_secs(10),
            stable_after: Duration::from_secs(60),
            bundle_wait_cap: Duration::from_secs(30),
            dcgmi_timeout: Duration::from_secs(20),
        }
    }
}

/// `first`, doubled for each step after the first, never above `cap`:
/// the delay before attempt `step` (1-based).
pub fn backoff(first: Duration, cap: Duration, step: u32) -> Duration {
    let doublings = step.saturating_sub(1).min(31);
    first.saturating_mul(1 << doublings).min(cap)
}

/// Everything `hostengine` needs besides the host and the policy.
#[derive(Debug, Clone)]
pub struct Options {
    pub arch: Arch,
    /// The status document's host path.
    pub status: PathBuf,
    /// The root of the image this runs from, on this machine: where a
    /// `source = "image"` bundle is (`/` in the host container).
    pub image_root: PathBuf,
    /// The host's processes: a `/proc` as this process sees it (the host
    /// root's `proc` by default).
    pub proc_dir: PathBuf,
    pub timings: Timings,
}

/// Why `hostengine` could not run at all.
#[derive(Debug, thiserror::Error)]
pub enum HostengineError {
    #[error("this binary's architecture is not one accelready supports; pass --arch")]
    UnknownArch,
    #[error("a stop grace of {0:?} is not below 15 s: with the 5 s allowed after SIGKILL it must end before host-ctr's 20 s, or the supervisor is SIGKILLed before it has stopped the engine")]
    StopGrace(Duration),
    #[error("cannot start the async runtime")]
    Runtime(#[source] std::io::Error),
    #[error("cannot listen for signals")]
    Signals(#[source] std::io::Error),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_the_cap() {
        let first = Duration::from_millis(500);
        let cap = Duration::from_secs(30);
        let delays: Vec<u64> = (1..=9)
            .map(|step| backoff(first, cap, step).as_millis() as u64)
            .collect();
        assert_eq!(
            delays,
            [500, 1000, 2000, 4000, 8000, 16000, 30000, 30000, 30000]
        );
        assert_eq!(backoff(first, cap, 0), first);
        assert_eq!(backoff(first, cap, u32::MAX), cap);
    }

    #[test]
    fn defaults_restart_within_two_seconds_and_stop_before_host_ctr_kills() {
        let t = Timings::default();
        assert!(backoff(t.restart_delay, t.backoff_cap, 1) < Duration::from_secs(2));
        assert!(t.stop_grace + KILL_WAIT < HOST_CTR_STOP_TIMEOUT);
        assert_eq!(t.backoff_cap, Duration::from_secs(30));
    }
}
