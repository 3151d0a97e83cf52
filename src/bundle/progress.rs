//! Download progress for the operator: a bar with bytes, rate and ETA when
//! stderr is a terminal, and otherwise — `boot`, journald, CI — an `info` log
//! line every few seconds with bytes and rate. The caller picks the mode
//! ([`Progress`]); a download that finishes before the first interval logs
//! nothing extra.

use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use tracing::info;

use super::options::Progress;

/// Follows one download.
pub(crate) struct Meter {
    url: String,
    started: Instant,
    /// The bundle's size, once a response has said it.
    total: Option<u64>,
    kind: Kind,
}

enum Kind {
    Bar(ProgressBar),
    Log { every: Duration, last: Instant },
    Off,
}

impl Meter {
    pub(crate) fn new(progress: Progress, url: &str) -> Meter {
        let now = Instant::now();
        let kind = match progress {
            Progress::Bar => {
                let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
                bar.set_style(style(None));
                Kind::Bar(bar)
            }
            Progress::Log { every } => Kind::Log { every, last: now },
            Progress::Off => Kind::Off,
        };
        Meter {
            url: url.to_owned(),
            started: now,
            total: None,
            kind,
        }
    }

    /// The full size, once a response says it (`Content-Length` plus what a
    /// resumed download already has).
    pub(crate) fn set_total(&mut self, total: Option<u64>) {
        if total == self.total {
            return;
        }
        self.total = total;
        if let Kind::Bar(bar) = &self.kind {
            bar.set_style(style(total));
            if let Some(total) = total {
                bar.set_length(total);
            }
        }
    }

    /// `received` bytes are on disk now.
    pub(crate) fn update(&mut self, received: u64) {
        match &mut self.kind {
            Kind::Bar(bar) => bar.set_position(received),
            Kind::Log { every, last } => {
                let now = Instant::now();
                if now.duration_since(*last) >= *every {
                    *last = now;
                    info!(
                        url = %self.url,
                        progress = %describe(received, self.total, now.duration_since(self.started)),
                        "downloading"
                    );
                }
            }
            Kind::Off => {}
        }
    }

    /// Runs `f` (which logs) with the bar out of the way.
    pub(crate) fn suspend<R>(&self, f: impl FnOnce() -> R) -> R {
        match &self.kind {
            Kind::Bar(bar) => bar.suspend(f),
            _ => f(),
        }
    }
}

impl Drop for Meter {
    fn drop(&mut self) {
        if let Kind::Bar(bar) = &self.kind {
            bar.finish_and_clear();
        }
    }
}

fn style(total: Option<u64>) -> ProgressStyle {
    let template = match total {
        // The bar takes what the terminal's width leaves.
        Some(_) => "{spinner} {bytes}/{total_bytes} {binary_bytes_per_sec} ETA {eta} [{wide_bar}]",
        None => "{spinner} downloading {bytes} {binary_bytes_per_sec}",
    };
    ProgressStyle::with_template(template)
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> ")
}

/// `12.0 MiB of 256.0 MiB (4%), 45.3 MiB/s, ETA 5 s` (the rate is the
/// average since the download started).
pub fn describe(received: u64, total: Option<u64>, elapsed: Duration) -> String {
    const MIB: f64 = 1024.0 * 1024.0;
    let seconds = elapsed.as_secs_f64();
    let rate = if seconds > 0.0 {
        received as f64 / seconds
    } else {
        0.0
    };
    let mut line = format!("{:.1} MiB", received as f64 / MIB);
    if let Some(total) = total.filter(|t| *t > 0) {
        let percent = (received.min(total) as f64 / total as f64 * 100.0).floor();
        line += &format!(" of {:.1} MiB ({percent}%)", total as f64 / MIB);
    }
    line += &format!(", {:.1} MiB/s", rate / MIB);
    if let Some(total) = total {
        if rate > 0.0 {
            let eta = total.saturating_sub(received) as f64 / rate;
            line += &format!(", ETA {} s", eta.ceil());
        }
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn describe_says_bytes_rate_and_eta() {
        let mib = 1 << 20;
        assert_eq!(
            describe(12 * mib, Some(256 * mib), Duration::from_secs(2)),
            "12.0 MiB of 256.0 MiB (4%), 6.0 MiB/s, ETA 41 s"
        );
        assert_eq!(
            describe(3 * mib, None, Duration::from_secs(1)),
            "3.0 MiB, 3.0 MiB/s"
        );
        // Nothing yet: no rate, no ETA, no division by zero.
        assert_eq!(
            describe(0, Some(mib), Duration::ZERO),
            "0.0 MiB of 1.0 MiB (0%), 0.0 MiB/s"
        );
    }

    #[test]
    fn log_mode_logs_at_most_once_per_interval() {
        let mut meter = Meter::new(
            Progress::Log {
                every: Duration::from_secs(3600),
            },
            "https://mirror.example/dcgm.deb",
        );
        let Kind::Log { last, .. } = meter.kind else {
            panic!("log mode");
        };
        meter.update(1);
        let Kind::Log { last: after, .. } = meter.kind else {
            panic!("log mode");
        };
        assert_eq!(last, after, "an update within the interval logs nothing");
    }
}
