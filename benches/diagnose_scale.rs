//! `diagnose` on a whole cluster's `kubectl get nodes -o json`, next to a
//! one-line `jq` filter (and the same in Python) that only finds the
//! unhealthy nodes, in one run, on generated lists of 5,000 and 15,000 nodes.
//!
//!     cargo bench --bench diagnose_scale
//!     BENCH_NODES=5000 BENCH_RUNS=9 cargo bench --bench diagnose_scale
//!     BENCH_KEEP=/tmp/lists cargo bench --bench diagnose_scale   # keep the generated lists
//!
//! Measures the shipped binary: it builds `target/release/accelready` with
//! the `release` profile (what the image ships) and runs that, not the
//! bench-profile build (`ACCELREADY_BIN=path` measures another binary). It
//! runs `diagnose` as an operator does (default logging, output to
//! /dev/null): on the file, on a pipe (`cat FILE | accelready diagnose -`)
//! and with `--json`. Each command runs `BENCH_RUNS` times (default 5),
//! interleaved; the table shows medians of wall time, CPU time (user +
//! system: steadier than wall time on a busy machine) and peak RSS
//! (`/usr/bin/time`), RSS as a share of the input size, and wall and CPU
//! time as shares of jq's; then the issue's targets for `accelready
//! diagnose FILE` (peak RSS <= 1x the input, wall time <= 0.5x jq). Before
//! timing, it checks that each tool finds exactly the unhealthy nodes the
//! generator put in. Without `jq` or `python3` it says so and leaves their
//! rows out (`.ci/setup` installs both); without `/usr/bin/time` (package
//! `time`) nothing can be measured and it says so.

#[path = "../tests/common/mod.rs"]
mod common;

use std::collections::BTreeSet;
use std::fs::File;
use std::io::BufWriter;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::nodes::{self, Spec};
use common::timed::{self, Sample};

const NOW: &str = "2025-06-10T03:05:00Z";

/// The nodes a repair policy (Karpenter v1.2.0+) matches: Ready False or
/// Unknown, or one of the monitoring agent's conditions False.
const JQ_FILTER: &str = r#".items[] | select(any(.status.conditions[]?; (.type == "Ready" and (.status == "False" or .status == "Unknown")) or (.status == "False" and (.type == "AcceleratedHardwareReady" or .type == "StorageReady" or .type == "NetworkingReady" or .type == "KernelReady" or .type == "ContainerRuntimeReady")))) | .metadata.name"#;

const PYTHON: &str = r#"import json, sys
agent = {"AcceleratedHardwareReady", "StorageReady", "NetworkingReady", "KernelReady", "ContainerRuntimeReady"}
with open(sys.argv[1]) as f:
    nodes = json.load(f)["items"]
for node in nodes:
    if any((c["type"] == "Ready" and c["status"] in ("False", "Unknown")) or (c["type"] in agent and c["status"] == "False")
           for c in node.get("status", {}).get("conditions", [])):
        print(node["metadata"]["name"])
"#;

fn main() {
    let sizes: Vec<usize> = std::env::var("BENCH_NODES")
        .unwrap_or_else(|_| "5000,15000".to_owned())
        .split(',')
        .map(|n| {
            n.trim()
                .parse()
                .expect("BENCH_NODES: comma-separated node counts")
        })
        .collect();
    let runs: usize = std::env::var("BENCH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5)
        .max(1);
    if !timed::available() {
        println!("skipped: /usr/bin/time is missing (Debian package `time`); peak RSS cannot be measured");
        return;
    }
    let binary = release_binary();
    let jq = found("jq");
    let python = found("python3");
    println!(
        "diagnose_scale: {} (profile `release`, as the image ships it), {runs} runs per command, interleaved",
        binary.display()
    );
    println!("machine: {} CPUs, load average {}", cpus(), load_average());
    if !jq {
        println!("jq: absent (install it: .ci/setup or apt-get install jq); no jq row, no ratio against it");
    }
    if !python {
        println!("python3: absent; no Python row");
    }

    let keep = std::env::var_os("BENCH_KEEP").map(PathBuf::from);
    let temp = tempfile::tempdir().expect("a temporary directory");
    let dir = keep.clone().unwrap_or_else(|| temp.path().to_owned());
    std::fs::create_dir_all(&dir).expect("BENCH_KEEP is a directory");

    let mut all_met = true;
    for nodes in sizes {
        let spec = Spec::fleet(nodes);
        let path = dir.join(format!("nodes-{nodes}.json"));
        let started = Instant::now();
        let mut out = BufWriter::new(File::create(&path).expect("create the node list"));
        let summary = nodes::write_list(&mut out, &spec).expect("write the node list");
        drop(out);
        let mib = summary.bytes as f64 / 1048576.0;
        println!(
            "\n{nodes} nodes: {} ({:.1} MB, {mib:.1} MiB; {} images per node, {} unhealthy, {} unmanaged), generated in {:.1} s",
            path.display(),
            summary.bytes as f64 / 1e6,
            spec.images,
            summary.unhealthy.len(),
            summary.unmanaged,
            started.elapsed().as_secs_f64()
        );

        let expected: BTreeSet<String> = summary.unhealthy.iter().cloned().collect();
        check_ours(&binary, &path, &expected);
        let mut pipe = Command::new("sh");
        pipe.arg("-c")
            .arg(format!("cat \"$0\" | \"$1\" diagnose - --now {NOW}"))
            .arg(&path)
            .arg(&binary);
        let mut commands: Vec<(&str, Command)> = vec![
            ("accelready diagnose FILE", ours(&binary, &path, false)),
            ("cat FILE | accelready diag.", pipe),
            ("accelready diagnose --json", ours(&binary, &path, true)),
        ];
        if jq {
            let mut command = Command::new("jq");
            command.args(["-r", JQ_FILTER]).arg(&path);
            check_names("jq", &mut command, &expected);
            commands.push(("jq (one-line filter)", command));
        }
        if python {
            let mut command = Command::new("python3");
            command.args(["-c", PYTHON]).arg(&path);
            check_names("python3", &mut command, &expected);
            commands.push(("python3 (json.load)", command));
        }

        let mut samples: Vec<Vec<Sample>> = vec![Vec::new(); commands.len()];
        for _ in 0..runs {
            for (index, (name, command)) in commands.iter().enumerate() {
                let sample = timed::run(command);
                // diagnose exits 3 when a node will be replaced.
                assert!(
                    matches!(sample.status.code(), Some(0 | 3)),
                    "{name} failed: {}",
                    sample.status
                );
                samples[index].push(sample);
            }
        }
        let medians: Vec<Sample> = samples.iter().map(|s| timed::median(s)).collect();
        let jq = commands
            .iter()
            .position(|(name, _)| name.starts_with("jq"))
            .map(|i| medians[i]);
        println!(
            "  {:<28} {:>8} {:>15} {:>8} {:>11} {:>9} {:>8} {:>8}",
            "command",
            "wall (s)",
            "wall min..max",
            "CPU (s)",
            "peak RSS",
            "RSS/input",
            "wall/jq",
            "CPU/jq"
        );
        for (index, (name, _)) in commands.iter().enumerate() {
            let median = medians[index];
            let walls: Vec<Duration> = samples[index].iter().map(|s| s.wall).collect();
            let (min, max) = (walls.iter().min().unwrap(), walls.iter().max().unwrap());
            let share = |ours: Duration, theirs: Option<Duration>| {
                theirs.map_or("-".to_owned(), |theirs| {
                    format!("{:.2}x", ours.as_secs_f64() / theirs.as_secs_f64())
                })
            };
            println!(
                "  {name:<28} {:>8.3} {:>7.3}..{:<7.3} {:>8.3} {:>7.1} MiB {:>8.2}x {:>8} {:>8}",
                median.wall.as_secs_f64(),
                min.as_secs_f64(),
                max.as_secs_f64(),
                median.cpu.as_secs_f64(),
                median.peak_rss_kib as f64 / 1024.0,
                median.peak_rss_kib as f64 * 1024.0 / summary.bytes as f64,
                share(median.wall, jq.map(|j| j.wall)),
                share(median.cpu, jq.map(|j| j.cpu)),
            );
        }
        let ours = medians[0];
        let rss_share = ours.peak_rss_kib as f64 * 1024.0 / summary.bytes as f64;
        let rss_met = rss_share <= 1.0;
        println!(
            "  target peak RSS <= 1x input:   {} ({rss_share:.2}x)",
            verdict(rss_met)
        );
        all_met &= rss_met;
        match jq {
            Some(jq) => {
                let share = ours.wall.as_secs_f64() / jq.wall.as_secs_f64();
                println!(
                    "  target wall <= 0.5x jq:        {} ({share:.2}x; CPU time {:.2}x)",
                    verdict(share <= 0.5),
                    ours.cpu.as_secs_f64() / jq.cpu.as_secs_f64()
                );
                all_met &= share <= 0.5;
            }
            None => println!("  target wall <= 0.5x jq:        not measured (jq absent)"),
        }
    }
    println!(
        "\n{}",
        if all_met {
            "all targets met"
        } else {
            "some targets missed (see above; on a busy machine, rerun with more BENCH_RUNS)"
        }
    );
    drop(temp);
    if keep.is_some() {
        println!("lists kept in {}", dir.display());
    }
}

fn verdict(met: bool) -> &'static str {
    if met {
        "met"
    } else {
        "MISSED"
    }
}

fn ours(binary: &Path, list: &Path, json: bool) -> Command {
    let mut command = Command::new(binary);
    command.arg("diagnose").arg(list).args(["--now", NOW]);
    if json {
        command.arg("--json");
    }
    command
}

/// `diagnose --json` must find exactly the generator's unhealthy nodes.
fn check_ours(binary: &Path, list: &Path, expected: &BTreeSet<String>) {
    let output = ours(binary, list, true).output().expect("run accelready");
    assert_eq!(
        output.status.code(),
        Some(3),
        "some node will be replaced: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let forecast: serde_json::Value =
        serde_json::from_slice(&output.stdout).expect("diagnose --json prints JSON");
    let found: BTreeSet<String> = forecast["nodes"]
        .as_array()
        .expect("nodes")
        .iter()
        .filter(|n| n["unhealthy"].as_array().is_some_and(|u| !u.is_empty()))
        .map(|n| n["name"].as_str().expect("name").to_owned())
        .collect();
    assert_eq!(
        &found, expected,
        "accelready finds the generated unhealthy nodes"
    );
}

fn check_names(what: &str, command: &mut Command, expected: &BTreeSet<String>) {
    let output = command
        .output()
        .unwrap_or_else(|e| panic!("run {what}: {e}"));
    assert!(
        output.status.success(),
        "{what} failed: {:?}",
        output.status
    );
    let found: BTreeSet<String> = String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(str::to_owned)
        .collect();
    assert_eq!(
        &found, expected,
        "{what} finds the generated unhealthy nodes"
    );
}

/// `target/release/accelready`, built now with the shipped profile
/// (`ACCELREADY_BIN` overrides it, e.g. for an image's binary).
fn release_binary() -> PathBuf {
    if let Some(binary) = std::env::var_os("ACCELREADY_BIN") {
        return PathBuf::from(binary);
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let status = Command::new(cargo)
        .args(["build", "--release", "--bin", "accelready"])
        .current_dir(root)
        .status()
        .expect("run cargo build --release");
    assert!(status.success(), "cargo build --release failed");
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"));
    target.join("release/accelready")
}

fn found(tool: &str) -> bool {
    Command::new(tool)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn cpus() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|text| {
            text.split_whitespace()
                .take(3)
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_else(|_| "unknown".to_owned())
}
