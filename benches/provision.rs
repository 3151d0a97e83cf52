//! `accelready provision` as shipped — the `release` profile the image is
//! built with, not the bench profile — against `curl` + `sha256sum` +
//! decompressor + `tar`, on the same bundle from the same loopback HTTPS
//! server, interleaved, for a `.tar.zst`, a `.tar.gz` and a `.tar.xz`.
//!
//!     cargo bench --bench provision
//!     BENCH_MIB=64 BENCH_RUNS=3 BENCH_FORMATS=zst cargo bench --bench provision
//!     BENCH_BIN=z=/tmp/a,o3=/tmp/b cargo bench --bench provision    # other builds, side by side
//!
//! The binary measured is built here with `cargo build --release --locked`
//! (the profile in Cargo.toml that `bootstrap/build` ships); only this
//! harness, which runs the loopback server, is built with the bench profile.
//! Each bundle is a DCGM tarball padded with `BENCH_MIB` MiB (default 256) of
//! incompressible bytes. Per run, the contestants go in rotating order;
//! the table shows medians of `BENCH_RUNS` (default 5) runs, the ratio of the
//! medians, each run's ratio, the phases accelready reports, and the largest
//! peak RSS (`/usr/bin/time -f %M`). With `BENCH_BIN` (comma-separated
//! `label=path`) several builds take turns in the same runs instead.
//! The pipeline extracts the same members accelready keeps (`--wildcards`),
//! so both write the same files.

#[path = "../tests/common/mod.rs"]
mod common;
#[path = "support/shipped.rs"]
mod shipped;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use accelready::Arch;
use common::bundle::{self, Compression};
use common::https::Server;
use shipped::{env_or, noise, release_binary};

/// One measured run: wall time, peak RSS in KiB, and what the binary said.
struct Sample {
    wall: Duration,
    rss_kib: u64,
    stdout: String,
}

/// Runs `command` under `/usr/bin/time` (which forks from a small process, so
/// the peak RSS is the command's own — for `sh -c`, the largest child's).
fn measure(command: &Command) -> Sample {
    let dir = tempfile::tempdir().unwrap();
    let (rss_file, out_file) = (dir.path().join("rss"), dir.path().join("out"));
    let mut timed = Command::new("/usr/bin/time");
    timed
        .args(["-f", "%M", "-o"])
        .arg(&rss_file)
        .arg(command.get_program())
        .args(command.get_args())
        .stdout(std::fs::File::create(&out_file).unwrap())
        .stderr(Stdio::piped());
    for (key, value) in command.get_envs() {
        if let Some(value) = value {
            timed.env(key, value);
        }
    }
    let started = Instant::now();
    let output = timed.output().expect("run /usr/bin/time");
    let wall = started.elapsed();
    assert!(
        output.status.success(),
        "{command:?} failed: {}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    let rss_kib = std::fs::read_to_string(&rss_file)
        .unwrap()
        .trim()
        .lines()
        .last()
        .and_then(|l| l.parse().ok())
        .expect("peak RSS from time");
    Sample {
        wall,
        rss_kib,
        stdout: std::fs::read_to_string(&out_file).unwrap_or_default(),
    }
}

fn format_names(compression: Compression) -> (&'static str, &'static str) {
    match compression {
        Compression::Zstd => ("zst", "zstd -dcq"),
        Compression::Gzip => ("gz", "gzip -dc"),
        Compression::Xz => ("xz", "xz -dc"),
    }
}

/// The binaries to measure: `BENCH_BIN` (comma-separated `label=path` or
/// paths, for comparing builds in one run), else the shipped release build.
fn contestants() -> (Vec<(String, PathBuf)>, bool) {
    match std::env::var("BENCH_BIN") {
        Ok(list) => {
            let bins = list
                .split(',')
                .map(|item| match item.split_once('=') {
                    Some((label, path)) => (label.to_owned(), PathBuf::from(path)),
                    None => {
                        let path = PathBuf::from(item);
                        let label = path.file_name().unwrap().to_string_lossy().into_owned();
                        (label, path)
                    }
                })
                .collect();
            (bins, false)
        }
        Err(_) => (vec![("accelready".to_owned(), release_binary())], true),
    }
}

fn main() {
    let mib: usize = env_or("BENCH_MIB", 256);
    let runs: usize = env_or("BENCH_RUNS", 5).max(1);
    let formats: Vec<Compression> = std::env::var("BENCH_FORMATS")
        .unwrap_or_else(|_| "zst,gz,xz".into())
        .split(',')
        .map(|name| match name.trim() {
            "zst" => Compression::Zstd,
            "gz" => Compression::Gzip,
            "xz" => Compression::Xz,
            other => panic!("BENCH_FORMATS: unknown format {other:?} (zst, gz, xz)"),
        })
        .collect();
    let arch = Arch::of_this_binary().unwrap_or(Arch::X86_64);
    let (bins, shipped) = contestants();
    // `BENCH_PAYLOAD=libs`: the padding is this machine's shared libraries
    // (compressible like a real DCGM bundle) instead of random bytes.
    let payload = std::env::var("BENCH_PAYLOAD").unwrap_or_else(|_| "random".into());
    let padding = match payload.as_str() {
        "random" => noise(mib),
        "libs" => shared_libraries(mib),
        other => panic!("BENCH_PAYLOAD: {other:?} is not random or libs"),
    };
    for (label, bin) in &bins {
        let size = std::fs::metadata(bin).map(|m| m.len()).unwrap_or(0);
        println!(
            "provision bench: {label} = {} ({size} bytes){}",
            bin.display(),
            if shipped {
                ", built with the shipped `release` profile (cargo build --release)"
            } else {
                " (BENCH_BIN)"
            }
        );
    }
    println!(
        "pipeline: curl -o + sha256sum -c + <decompressor> -dc | tar -x (the members accelready keeps); \
         bundle: DCGM tarball + {mib} MiB of {payload} padding; {runs} runs per format, contestants in rotating order; \
         medians; peak RSS is the largest of the runs"
    );
    let mut tar_members = bundle::dcgm_members(arch);
    tar_members.push(bundle::file("usr/share/doc/padding.bin", padding));
    let tarball = bundle::tar(&tar_members);
    drop(tar_members);
    let work = tempfile::tempdir().unwrap();

    println!(
        "{:<6} {:<12} {:>9} {:>10} {:>10}   {:<}",
        "format", "tool", "median s", "MiB/s", "peak RSS", "per run (s)"
    );
    let mut summary = Vec::new();
    for compression in formats {
        let (name, decompressor) = format_names(compression);
        let bytes = bundle::compress(&tarball, compression);
        let size = bytes.len() as f64;
        let sha = bundle::sha256_hex(&bytes);
        let server = Server::start(bytes);
        let url = server.url(&format!("/dcgm.tar.{name}"));
        let ours = |bin: &Path, run: usize| {
            let root = work.path().join(format!("node-{name}-{run}"));
            let mut command = Command::new(bin);
            command
                .arg("--host-root")
                .arg(&root)
                .args(["provision", "--no-expose", "--json", "--url", &url])
                .args(["--sha256", &sha, "--arch", arch.as_str(), "--ca-bundle"])
                .arg(server.ca_file())
                .env("RUST_LOG", "warn");
            let sample = measure(&command);
            let lib = root.join("var/lib/accelready/dcgm/current/lib/libdcgm.so.4");
            assert!(lib.exists(), "accelready installed no {}", lib.display());
            std::fs::remove_dir_all(&root).unwrap();
            sample
        };
        let theirs = |run: usize| {
            let out = work.path().join(format!("pipeline-{name}-{run}"));
            std::fs::create_dir_all(&out).unwrap();
            let file = out.join(format!("bundle.tar.{name}"));
            let script = format!(
                "set -e; curl -sSf --cacert {ca} -o {file} {url}; echo '{sha}  {file}' | sha256sum -c --quiet -; \
                 {decompressor} {file} | tar -x -C {out} --wildcards '*/libdcgm.so*' '*/libdcgmmodule*'",
                ca = server.ca_file().display(),
                file = file.display(),
                out = out.display(),
            );
            let sample = measure(Command::new("sh").args(["-c", &script]));
            assert!(
                has_file(&out, "libdcgm.so.4.6.1"),
                "the pipeline extracted no libdcgm"
            );
            std::fs::remove_dir_all(&out).unwrap();
            sample
        };
        // samples[i]: binary i; the last one is the pipeline.
        let mut samples: Vec<Vec<Sample>> = (0..=bins.len()).map(|_| Vec::new()).collect();
        for run in 0..runs {
            for k in 0..=bins.len() {
                let i = (run + k) % (bins.len() + 1);
                let sample = match bins.get(i) {
                    Some((_, bin)) => ours(bin, run),
                    None => theirs(run),
                };
                samples[i].push(sample);
            }
        }
        let pipeline = samples.pop().unwrap();
        let median_pipeline = print_row(name, "pipeline", &pipeline, size);
        for ((label, _), ours) in bins.iter().zip(&samples) {
            let median = print_row(name, label, ours, size);
            let phases: Vec<String> = ours.iter().map(|s| phases_of(&s.stdout)).collect();
            let ratios: Vec<String> = ours
                .iter()
                .zip(&pipeline)
                .map(|(a, b)| format!("{:.2}", b.wall.as_secs_f64() / a.wall.as_secs_f64()))
                .collect();
            let ratio = median_pipeline / median;
            println!(
                "{name:<6} {label:<12} {ratio:>9.2}x faster than the pipeline (ratio of medians; per run: {}; fetch+unpack ms: {})",
                ratios.join(" "),
                phases.join(" ")
            );
            summary.push(format!("{name} {label} {ratio:.2}x"));
        }
    }
    println!(
        "summary (same run, ratio of median wall times, pipeline / accelready): {}",
        summary.join(", ")
    );
}

/// `mib` MiB of the shared libraries under /usr/lib (compressible the way
/// DCGM's own libraries are).
fn shared_libraries(mib: usize) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(mib << 20);
    let mut dirs = vec![PathBuf::from("/usr/lib")];
    while let Some(dir) = dirs.pop() {
        let mut entries: Vec<PathBuf> = std::fs::read_dir(&dir)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
            .collect();
        entries.sort();
        for path in entries {
            let Ok(meta) = std::fs::symlink_metadata(&path) else {
                continue;
            };
            if meta.is_dir() {
                dirs.push(path);
            } else if meta.is_file() && path.to_string_lossy().contains(".so") {
                bytes.extend(std::fs::read(&path).unwrap_or_default());
                if bytes.len() >= mib << 20 {
                    bytes.truncate(mib << 20);
                    return bytes;
                }
            }
        }
    }
    bytes
}

fn has_file(dir: &Path, name: &str) -> bool {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .any(|entry| {
            let path = entry.path();
            entry.file_name() == name || (path.is_dir() && has_file(&path, name))
        })
}

/// `fetch+unpack` milliseconds from the JSON report.
fn phases_of(stdout: &str) -> String {
    let report: serde_json::Value = serde_json::from_str(stdout).unwrap_or_default();
    let phases = &report["phases"];
    format!("{}+{}", phases["fetch_ms"], phases["unpack_ms"])
}

/// Prints one row and returns the median wall time in seconds.
fn print_row(format: &str, tool: &str, samples: &[Sample], size: f64) -> f64 {
    let mut walls: Vec<f64> = samples.iter().map(|s| s.wall.as_secs_f64()).collect();
    let per_run = walls
        .iter()
        .map(|w| format!("{w:.2}"))
        .collect::<Vec<_>>()
        .join(" ");
    walls.sort_by(f64::total_cmp);
    let median = walls[walls.len() / 2];
    let rss = samples.iter().map(|s| s.rss_kib).max().unwrap_or(0);
    println!(
        "{format:<6} {tool:<12} {median:>9.2} {:>10.1} {:>7.1} MiB   {per_run}",
        size / 1048576.0 / median,
        rss as f64 / 1024.0
    );
    median
}
