//! Settings every provisioning phase reads: caps on what a bundle may cost,
//! network timings, and the test-only pause points. A leaf module, so that
//! `fetch`, `unpack` and `install` share them without importing each other or
//! their parent.

use std::time::Duration;

/// Test-only: `ACCELREADY_TEST_PAUSE_AT=<step>` makes the process print
/// `accelready-test-pause: <step>` on stderr and sleep forever at that step, so
/// that crash-safety tests can SIGKILL it there. Unset in production.
pub const TEST_PAUSE_ENV: &str = "ACCELREADY_TEST_PAUSE_AT";

/// Caps that keep a hostile or broken bundle from exhausting the node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Largest download accepted, in bytes.
    pub max_download_bytes: u64,
    /// Most archive entries read (all entries, kept or not).
    pub max_entries: u64,
    /// Most bytes all archive entries may unpack to (decompression bombs).
    pub max_unpacked_bytes: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_download_bytes: 1 << 30,
            max_entries: 10_000,
            max_unpacked_bytes: 4 << 30,
        }
    }
}

/// Network timings; injectable so that tests run in milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    pub connect: Duration,
    /// Longest wait for any single read (headers or a body chunk).
    pub read: Duration,
    /// The whole `provision` run, download retries included.
    pub overall: Duration,
    /// First retry delay; doubles per attempt, with jitter, up to `backoff_cap`.
    pub backoff_base: Duration,
    pub backoff_cap: Duration,
    /// Most consecutive failed attempts. Answers that carry `Retry-After`
    /// (the server pacing its load) and attempts that received part of the
    /// bundle do not count: `overall` bounds those.
    pub max_attempts: u32,
    /// Longest wait a server's `Retry-After` can ask for; longer asks are cut
    /// to this.
    pub retry_after_max: Duration,
}

impl Timeouts {
    /// Default of [`Timeouts::retry_after_max`], in milliseconds.
    pub const DEFAULT_RETRY_AFTER_MAX_MS: u64 = 30_000;
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            connect: Duration::from_secs(10),
            read: Duration::from_secs(30),
            overall: Duration::from_secs(600),
            backoff_base: Duration::from_millis(500),
            backoff_cap: Duration::from_secs(10),
            max_attempts: 6,
            retry_after_max: Duration::from_millis(Self::DEFAULT_RETRY_AFTER_MAX_MS),
        }
    }
}

/// How a download reports its progress to the operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Progress {
    /// A bar with bytes, rate and ETA, redrawn on stderr (a terminal).
    Bar,
    /// An `info` log line with bytes and rate at most this often (boot,
    /// journald, CI: anything that is not a terminal).
    Log { every: Duration },
    /// Nothing.
    Off,
}

impl Progress {
    /// How often [`Progress::Log`] logs unless told otherwise, in milliseconds.
    pub const DEFAULT_LOG_EVERY_MS: u64 = 5_000;
    pub const DEFAULT_LOG_EVERY: Duration = Duration::from_millis(Self::DEFAULT_LOG_EVERY_MS);
}

impl Default for Progress {
    fn default() -> Self {
        Progress::Log {
            every: Self::DEFAULT_LOG_EVERY,
        }
    }
}

/// Test-only pause point, see [`TEST_PAUSE_ENV`].
pub(crate) fn test_pause(step: &str) {
    if std::env::var_os(TEST_PAUSE_ENV).is_some_and(|v| v == step) {
        eprintln!("accelready-test-pause: {step}");
        loop {
            std::thread::sleep(Duration::from_secs(3600));
        }
    }
}
