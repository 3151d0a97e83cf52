//! Provisioning a 256 MiB bundle from the loopback HTTPS test server, next to
//! `curl -o` + `sha256sum` + `tar -x` on the same file, in one run.
//!
//!     cargo bench --bench provision            # BENCH_MIB=64 for a smaller bundle
//!
//! Prints wall time, throughput and peak RSS (`/usr/bin/time -f %M`) for each,
//! median of `BENCH_RUNS` (default 3) runs.

#[path = "../tests/common/mod.rs"]
mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use accelready::Arch;
use common::bundle::{self, Compression};
use common::https::Server;

const BIN: &str = env!("CARGO_BIN_EXE_accelready");

/// Runs `command` under `/usr/bin/time` and returns (wall time, peak RSS in
/// KiB). `time` forks from a small process, so the figure is the command's own
/// (for `sh -c`, the largest of its children), not this 256 MiB-heavy process's.
fn measure(command: &mut Command) -> (Duration, u64) {
    let rss_file = tempfile::NamedTempFile::new().unwrap();
    let mut timed = Command::new("/usr/bin/time");
    timed
        .args(["-f", "%M", "-o"])
        .arg(rss_file.path())
        .arg(command.get_program())
        .args(command.get_args())
        .stdout(std::process::Stdio::null());
    for (key, value) in command.get_envs() {
        if let Some(value) = value {
            timed.env(key, value);
        }
    }
    let started = Instant::now();
    let status = timed.status().expect("run /usr/bin/time");
    let elapsed = started.elapsed();
    assert!(status.success(), "{command:?} failed: {status}");
    let text = std::fs::read_to_string(rss_file.path()).unwrap();
    let rss = text
        .trim()
        .lines()
        .last()
        .and_then(|l| l.parse().ok())
        .expect("peak RSS from time");
    (elapsed, rss)
}

fn median(mut values: Vec<(Duration, u64)>) -> (Duration, u64) {
    values.sort();
    let rss = values.iter().map(|v| v.1).max().unwrap_or(0);
    (values[values.len() / 2].0, rss)
}

fn main() {
    let mib: usize = std::env::var("BENCH_MIB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(256);
    let runs: usize = std::env::var("BENCH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3);
    let arch = Arch::of_this_binary().unwrap_or(Arch::X86_64);

    // A real DCGM tarball (gzip) padded with incompressible bytes to `mib`.
    let mut members = bundle::dcgm_members(arch);
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let noise: Vec<u8> = (0..mib << 20)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state as u8
        })
        .collect();
    members.push(bundle::file("usr/share/doc/padding.bin", noise));
    let bytes = bundle::compress(&bundle::tar(&members), Compression::Gzip);
    drop(members);
    let size = bytes.len() as f64;
    let sha = bundle::sha256_hex(&bytes);
    let server = Server::start(bytes);
    let url = server.url("/dcgm.tar.gz");
    let dir = tempfile::tempdir().unwrap();
    println!(
        "bundle: {:.1} MiB gzip tarball, {runs} runs each, median wall time, max peak RSS",
        size / 1048576.0
    );

    let mut ours = Vec::new();
    let mut theirs = Vec::new();
    for run in 0..runs {
        let root = dir.path().join(format!("node{run}"));
        ours.push(measure(
            Command::new(BIN)
                .arg("--host-root")
                .arg(&root)
                .args(["provision", "--no-expose", "--url", &url, "--sha256", &sha])
                .args(["--arch", arch.as_str(), "--ca-bundle"])
                .arg(server.ca_file())
                .env("RUST_LOG", "warn"),
        ));
        let out = dir.path().join(format!("curl{run}"));
        std::fs::create_dir_all(&out).unwrap();
        let file = out.join("bundle.tar.gz");
        let script = format!(
            "curl -sSf --cacert {ca} -o {file} {url} && echo '{sha}  {file}' | sha256sum -c --quiet - && tar -xzf {file} -C {out}",
            ca = server.ca_file().display(),
            file = file.display(),
            out = out.display(),
        );
        theirs.push(measure(Command::new("sh").args(["-c", &script])));
        std::fs::remove_dir_all(&out).unwrap();
        std::fs::remove_dir_all(&root).unwrap();
    }
    report("accelready provision", median(ours), size);
    report("curl -o + sha256sum + tar -x", median(theirs), size);
}

fn report(what: &str, (wall, rss_kib): (Duration, u64), size: f64) {
    println!(
        "{what:<32} {:>8.2} s  {:>8.1} MiB/s  peak RSS {:>7.1} MiB",
        wall.as_secs_f64(),
        size / 1048576.0 / wall.as_secs_f64(),
        rss_kib as f64 / 1024.0
    );
}
