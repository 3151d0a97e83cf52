//! A fleet boots at once: N concurrent `accelready provision` runs — each its
//! own process and install directory, the shipped `release` binary — against
//! one loopback HTTPS mirror that serves at most C responses at once and
//! turns the rest away (`503` + `Retry-After: <seconds>`, `429` +
//! `Retry-After: <HTTP-date>`), then the largest N again with a share of
//! responses cut mid-body.
//!
//!     cargo bench --bench fleet
//!     FLEET_N=50,200 FLEET_MIB=16 FLEET_C=8 FLEET_MIRROR_MIBPS=100 FLEET_CUT_PERCENT=5 cargo bench --bench fleet   # the defaults
//!     BENCH_BIN=/path/to/accelready cargo bench --bench fleet   # another build
//!
//! First, in the same run, the mirror's throughput: C `curl` clients
//! downloading to /dev/null back to back (`FLEET_CALIBRATE` rounds each), so
//! that `ideal = N × size / throughput` is what the mirror could do with every
//! slot busy. Per fleet run it reports completed / failed, p50 / p99 / max
//! completion time (from spawn to exit), p99 / ideal, body bytes served
//! against N × size, and the peak numbers of open connections and of
//! responses in flight. Every install is checked afterwards: a run that
//! succeeded left a verified `current` (its manifest and every file's
//! digest), one that failed left no `current` and no temporary file.
//! Percentiles are over every run, failed ones included (a failure is a
//! completion too: the node gets its verdict). The install directories live
//! in `FLEET_DIR` (default /dev/shm): 200 nodes' disks are not one disk.
//! Other knobs: `FLEET_RETRY_AFTER_S` (1), `FLEET_DEADLINE_S` (120, the
//! per-run `--deadline-ms`), `FLEET_CALIBRATE` (4).
//!
//! The mirror's uplink is capped (`FLEET_MIRROR_MIBPS`, 100 MiB/s, shared by
//! its 8 responses; 0 lifts the cap): uncapped, a loopback mirror moves a
//! 16 MiB bundle in a tenth of a second, far below `Retry-After`'s
//! one-second grain, so the run would measure that grain and the other
//! engineers' load on this machine rather than the fleet. Capped, one
//! download takes over a second, as over a real network, and the figures
//! hold still from run to run.

#[path = "../../tests/common/mod.rs"]
mod common;
mod mirror;
#[path = "../support/shipped.rs"]
mod shipped;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::Ordering::SeqCst;
use std::time::{Duration, Instant};

use accelready::bundle::install::{verify_installed, Layout};
use accelready::Arch;
use common::bundle::{self, Compression};
use mirror::{Behaviour, Mirror, Stats};
use shipped::{env_or, noise, release_binary};

const INSTALL_DIR: &str = "var/lib/accelready/dcgm";

/// One provision run's outcome.
struct Run {
    elapsed: Duration,
    ok: bool,
    /// Why it failed (its last stderr line), or what is wrong on disk.
    problem: Option<String>,
}

fn main() {
    let sizes: Vec<usize> = std::env::var("FLEET_N")
        .unwrap_or_else(|_| "50,200".into())
        .split(',')
        .map(|n| n.trim().parse().expect("FLEET_N: numbers"))
        .collect();
    let mib: usize = env_or("FLEET_MIB", 16);
    let mirror_mibps: u64 = env_or("FLEET_MIRROR_MIBPS", 100);
    let max_active: u64 = env_or("FLEET_C", 8);
    let cut_percent: u64 = env_or("FLEET_CUT_PERCENT", 5);
    let retry_after = Duration::from_secs(env_or("FLEET_RETRY_AFTER_S", 1));
    let deadline = Duration::from_secs(env_or("FLEET_DEADLINE_S", 120));
    let rounds: usize = env_or("FLEET_CALIBRATE", 4);
    // N nodes' disks on one machine: tmpfs, so that one disk's writeback
    // does not stand in for N.
    let scratch: PathBuf = env_or("FLEET_DIR", PathBuf::from("/dev/shm"));
    let arch = Arch::of_this_binary().unwrap_or(Arch::X86_64);
    let bin = release_binary();

    let mut members = bundle::dcgm_members(arch);
    members.push(bundle::file("usr/share/doc/padding.bin", noise(mib)));
    let bytes = bundle::compress(&bundle::tar(&members), Compression::Zstd);
    let size = bytes.len() as u64;
    let sha = bundle::sha256_hex(&bytes);
    let behaviour = Behaviour {
        max_active,
        retry_after,
        cut_percent: 0,
        bytes_per_second: mirror_mibps << 20,
    };
    let mirror = Mirror::start(bytes, behaviour, 2);
    let url = mirror.url("/dcgm.tar.zst");
    println!(
        "fleet bench: the shipped `release` profile ({}); bundle {:.2} MiB .tar.zst (DCGM + {mib} MiB incompressible); \
         mirror: at most {max_active} responses at once, the rest 503/429 with Retry-After {}s, uplink {}; per-run deadline {}s; {} cores; install dirs in {}",
        bin.display(),
        size as f64 / 1048576.0,
        retry_after.as_secs(),
        if mirror_mibps == 0 {
            "uncapped".to_owned()
        } else {
            format!("capped at {mirror_mibps} MiB/s")
        },
        deadline.as_secs(),
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        scratch.display(),
    );

    let throughput = calibrate(&mirror, &url, max_active, rounds, size);
    println!(
        "mirror throughput: {:.1} MiB/s ({max_active} curl clients x {rounds} downloads each, to /dev/null)",
        throughput / 1048576.0
    );
    println!(
        "{:<14} {:>5} {:>9} {:>6} {:>7} {:>7} {:>7} {:>7} {:>7} {:>8} {:>6} {:>6} {:>7} {:>5}",
        "run",
        "N",
        "completed",
        "failed",
        "p50 s",
        "p99 s",
        "max s",
        "ideal s",
        "p99/id",
        "served",
        "peakC",
        "peakO",
        "turned",
        "cuts"
    );
    let mut all_good = true;
    let mut plan: Vec<(String, usize, u64)> = sizes
        .iter()
        .map(|n| (format!("fleet-{n}"), *n, 0))
        .collect();
    if let Some(largest) = sizes.iter().max() {
        if cut_percent > 0 {
            plan.push((
                format!("fleet-{largest}-cut{cut_percent}%"),
                *largest,
                cut_percent,
            ));
        }
    }
    for (name, n, cut) in plan {
        mirror.reset(Behaviour {
            cut_percent: cut,
            ..behaviour
        });
        let work = tempfile::tempdir_in(&scratch).unwrap();
        let runs = fleet(&bin, &mirror, &url, &sha, arch, n, deadline, work.path());
        let stats = mirror.stats();
        let completed = runs.iter().filter(|r| r.ok).count();
        let failed = runs.len() - completed;
        let mut times: Vec<f64> = runs.iter().map(|r| r.elapsed.as_secs_f64()).collect();
        times.sort_by(f64::total_cmp);
        let pct =
            |p: f64| times[((times.len() as f64 * p).ceil() as usize).clamp(1, times.len()) - 1];
        let ideal = n as f64 * size as f64 / throughput;
        let served = Stats::get(&stats.body_bytes) as f64 / (n as f64 * size as f64);
        println!(
            "{name:<14} {n:>5} {completed:>9} {failed:>6} {:>7.2} {:>7.2} {:>7.2} {ideal:>7.2} {:>7.2} {:>7.3}x {:>6} {:>6} {:>7} {:>5}",
            pct(0.50),
            pct(0.99),
            pct(1.0),
            pct(0.99) / ideal,
            served,
            Stats::get(&stats.peak_active),
            Stats::get(&stats.peak_open),
            Stats::get(&stats.turned_away_503) + Stats::get(&stats.turned_away_429),
            Stats::get(&stats.cut),
        );
        let problems: Vec<&String> = runs.iter().filter_map(|r| r.problem.as_ref()).collect();
        for problem in problems.iter().take(5) {
            println!("  {name}: {problem}");
        }
        let partial = runs
            .iter()
            .filter(|r| {
                !r.ok
                    && r.problem
                        .as_deref()
                        .is_some_and(|p| p.starts_with("PARTIAL"))
            })
            .count();
        let in_time = runs
            .iter()
            .all(|r| r.elapsed <= deadline + Duration::from_secs(2));
        let good = partial == 0 && in_time && failed == 0 && pct(0.99) <= 2.0 * ideal;
        all_good &= good;
        println!(
            "  {name}: responses served {} ({} ranged), turned away 503 {} / 429 {}, connections {}; every run {} its deadline; partial installs {partial}; p99 <= 2x ideal: {}",
            Stats::get(&stats.served),
            Stats::get(&stats.ranged),
            Stats::get(&stats.turned_away_503),
            Stats::get(&stats.turned_away_429),
            Stats::get(&stats.connections),
            if in_time { "within" } else { "NOT within" },
            if pct(0.99) <= 2.0 * ideal { "yes" } else { "NO" },
        );
    }
    println!(
        "acceptance (all complete, none partial, within deadline, p99 <= 2x ideal): {}",
        if all_good { "met" } else { "NOT met" }
    );
}

/// C concurrent `curl` clients, `rounds` downloads each: bytes per second.
fn calibrate(mirror: &Mirror, url: &str, clients: u64, rounds: usize, size: u64) -> f64 {
    let script = format!(
        "for i in $(seq {rounds}); do curl -sSf --cacert {} -o /dev/null {url} || exit 1; done",
        mirror.ca_file().display()
    );
    let started = Instant::now();
    let children: Vec<_> = (0..clients)
        .map(|_| {
            Command::new("sh")
                .args(["-c", &script])
                .spawn()
                .expect("spawn curl")
        })
        .collect();
    for mut child in children {
        assert!(
            child.wait().unwrap().success(),
            "calibration download failed"
        );
    }
    let elapsed = started.elapsed().as_secs_f64();
    assert_eq!(
        Stats::get(&mirror.stats().turned_away_503) + Stats::get(&mirror.stats().turned_away_429),
        0,
        "the calibration must not be turned away"
    );
    (clients as f64 * rounds as f64 * size as f64) / elapsed
}

/// Starts `n` provision runs at once and waits for all of them.
#[allow(clippy::too_many_arguments)]
fn fleet(
    bin: &Path,
    mirror: &Mirror,
    url: &str,
    sha: &str,
    arch: Arch,
    n: usize,
    deadline: Duration,
    work: &Path,
) -> Vec<Run> {
    let roots: Vec<PathBuf> = (0..n).map(|i| work.join(format!("node{i:03}"))).collect();
    for root in &roots {
        std::fs::create_dir_all(root).unwrap();
    }
    let started = Instant::now();
    let waiters: Vec<_> = roots
        .iter()
        .map(|root| {
            let child = Command::new(bin)
                .arg("--host-root")
                .arg(root)
                .args([
                    "provision",
                    "--no-expose",
                    "--json",
                    "--url",
                    url,
                    "--sha256",
                    sha,
                ])
                .args(["--arch", arch.as_str()])
                .arg("--deadline-ms")
                .arg(deadline.as_millis().to_string())
                .arg("--ca-bundle")
                .arg(mirror.ca_file())
                .env("RUST_LOG", "warn")
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(root.join("stderr")).unwrap())
                .spawn()
                .expect("spawn accelready");
            std::thread::spawn(move || {
                let mut child = child;
                let status = child.wait().expect("wait");
                (status, started.elapsed())
            })
        })
        .collect();
    let mut runs = Vec::new();
    for (waiter, root) in waiters.into_iter().zip(&roots) {
        let (status, elapsed) = waiter.join().unwrap();
        let layout = Layout::new(root.join(INSTALL_DIR));
        let leftovers: Vec<String> = std::fs::read_dir(layout.dir())
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|name| name.starts_with(".download-") || name.starts_with(".staging-"))
            .collect();
        let has_current = layout.current().exists();
        let problem = if status.success() {
            match verify_installed(&layout, sha, arch) {
                Ok(_) if has_current && leftovers.is_empty() => None,
                Ok(_) => Some(format!(
                    "PARTIAL: {}: current {has_current}, leftovers {leftovers:?}",
                    root.display()
                )),
                Err(e) => Some(format!(
                    "PARTIAL: {}: succeeded but does not verify: {e}",
                    root.display()
                )),
            }
        } else if has_current || !leftovers.is_empty() {
            Some(format!(
                "PARTIAL: {}: failed leaving current {has_current}, leftovers {leftovers:?}",
                root.display()
            ))
        } else {
            let stderr = std::fs::read_to_string(root.join("stderr")).unwrap_or_default();
            Some(format!(
                "failed ({status}) after {:.1}s: {}",
                elapsed.as_secs_f64(),
                stderr.lines().last().unwrap_or("(no message)")
            ))
        };
        runs.push(Run {
            elapsed,
            ok: status.success() && problem.is_none(),
            problem,
        });
    }
    // The mirror's counters stay consistent only once no response is in flight.
    while mirror.stats().active.load(SeqCst) > 0 {
        std::thread::sleep(Duration::from_millis(10));
    }
    runs
}
