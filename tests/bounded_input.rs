//! Every input from outside is bounded (README "Hardening"): policies are
//! regular files of at most 1 MiB, kubectl JSON is capped by
//! `--max-input-bytes` and parsed as it streams, so `/dev/zero`, a FIFO, a
//! directory or a stream that never ends is refused promptly with an error
//! that names the input and the limit.
//!
//! Each run of the built binary gets a 128 MiB address-space limit (`ulimit
//! -v`): reading such an input whole would abort instead of exiting 2. A
//! run that does not exit within a minute is killed and fails the test — a
//! guard against hangs, not a timing assertion.

#[path = "common/mod.rs"]
mod common;

use std::io::{ErrorKind, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use accelready::repair::kube;
use common::nodes::{self, Spec};

const NOW: &str = "2025-06-10T03:05:00Z";
/// Address space for each run, in KiB: a few times what a run needs.
const MEMORY_KIB: u64 = 128 * 1024;
/// A run that takes longer than this is stuck.
const HANG: Duration = Duration::from_secs(60);

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/diagnose")
        .join(name)
}

/// The binary under `ulimit -v`, with `args`.
fn accelready(args: &[&str]) -> Command {
    let mut command = Command::new("sh");
    command
        .arg("-c")
        .arg(format!("ulimit -v {MEMORY_KIB} && exec \"$0\" \"$@\""))
        .arg(env!("CARGO_BIN_EXE_accelready"))
        .args(args)
        .env("RUST_LOG", "warn");
    command
}

/// Waits for `child` while collecting its stdout and stderr, killing it
/// after [`HANG`].
fn finish(mut child: Child, what: &str) -> Output {
    fn drain(mut pipe: impl Read + Send + 'static) -> thread::JoinHandle<Vec<u8>> {
        thread::spawn(move || {
            let mut bytes = Vec::new();
            pipe.read_to_end(&mut bytes)
                .expect("read accelready's output");
            bytes
        })
    }
    let stdout = drain(child.stdout.take().expect("stdout is piped"));
    let stderr = drain(child.stderr.take().expect("stderr is piped"));
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for accelready") {
            break status;
        }
        if started.elapsed() > HANG {
            let _ = child.kill();
            panic!("{what}: still running after {HANG:?}");
        }
        thread::sleep(Duration::from_millis(20));
    };
    Output {
        status,
        stdout: stdout.join().expect("stdout reader"),
        stderr: stderr.join().expect("stderr reader"),
    }
}

fn run(args: &[&str]) -> Output {
    let child = accelready(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run accelready");
    finish(child, &args.join(" "))
}

/// Runs with stdin fed `prefix` and then `filler` bytes for as long as the
/// binary reads; returns its output and how many bytes it was fed.
fn run_on_endless_stdin(args: &[&str], prefix: &[u8], filler: u8) -> (Output, u64) {
    let mut child = accelready(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run accelready");
    let mut stdin = child.stdin.take().expect("stdin is piped");
    let prefix = prefix.to_vec();
    let writer = thread::spawn(move || {
        let chunk = vec![filler; 64 * 1024];
        let mut fed = 0u64;
        let mut feed = |bytes: &[u8]| -> bool {
            match stdin.write_all(bytes) {
                Ok(()) => {
                    fed += bytes.len() as u64;
                    true
                }
                Err(e) if e.kind() == ErrorKind::BrokenPipe => false,
                Err(e) => panic!("feeding accelready: {e}"),
            }
        };
        if feed(&prefix) {
            while feed(&chunk) {}
        }
        fed
    });
    let output = finish(child, &args.join(" "));
    let fed = writer.join().expect("the writer thread");
    (output, fed)
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn assert_refused(output: &Output, message: &str) {
    let stderr = stderr(output);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(message),
        "expected '{message}' in: {stderr}"
    );
    assert!(output.stdout.is_empty(), "results only on success");
}

/// `render`, `boot` and `hostengine` alike.
#[test]
fn a_policy_must_be_a_regular_file() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("policy.toml");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
    let fifo = fifo.to_str().unwrap();
    let directory = dir.path().to_str().unwrap();
    for (path, kind) in [
        ("/dev/zero", "a character device"),
        (fifo, "a FIFO"),
        (directory, "a directory"),
    ] {
        let expected = format!("cannot read policy file '{path}': {kind}, not a regular file");
        assert_refused(&run(&["render", path]), &expected);
        // Both roles the image runs read their policy the same way.
        let host = dir.path().join("host");
        for role in ["boot", "hostengine"] {
            let args = [
                "--host-root",
                host.to_str().unwrap(),
                role,
                "--user-data",
                path,
            ];
            assert_refused(&run(&args), &expected);
        }
    }
}

#[test]
fn a_policy_over_one_mebibyte_is_refused_and_one_at_the_limit_is_read() {
    let dir = tempfile::tempdir().unwrap();
    let builtin = accelready::policy::DEFAULT_POLICY;
    // The built-in policy padded with comment lines to exactly `size` bytes.
    let padded = |size: usize| {
        let mut text = builtin.to_owned();
        while text.len() < size {
            let line = "#".repeat((size - text.len()).min(80) - 1) + "\n";
            text.push_str(&line);
        }
        assert_eq!(text.len(), size);
        text
    };
    let at_limit = dir.path().join("at-limit.toml");
    std::fs::write(&at_limit, padded(1 << 20)).unwrap();
    let output = run(&["render", at_limit.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));

    let over = dir.path().join("over.toml");
    std::fs::write(&over, padded((1 << 20) + 1)).unwrap();
    assert_refused(
        &run(&["render", over.to_str().unwrap()]),
        &format!(
            "cannot read policy file '{}': larger than 1MiB (1048576 bytes), the limit for a policy file",
            over.display()
        ),
    );
}

#[test]
fn render_check_reads_only_a_small_regular_file() {
    assert_refused(
        &run(&["render", "--check", "/dev/zero"]),
        "cannot read '/dev/zero': a character device, not a regular file",
    );
}

#[test]
fn a_ca_bundle_must_be_a_regular_file() {
    let dir = tempfile::tempdir().unwrap();
    let output = run(&[
        "--host-root",
        dir.path().to_str().unwrap(),
        "provision",
        "--no-expose",
        "--arch",
        "x86_64",
        "--url",
        "https://127.0.0.1:9/dcgm.tar.gz",
        "--sha256",
        &"0".repeat(64),
        "--ca-bundle",
        "/dev/zero",
    ]);
    assert_refused(
        &output,
        "cannot read the CA bundle '/dev/zero': a character device, not a regular file",
    );
}

#[test]
fn a_local_bundle_must_be_a_regular_file_and_a_fifo_does_not_block() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("dcgm.tar.gz");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
    let url = format!("file://{}", fifo.display());
    let host = dir.path().join("host");
    let output = run(&[
        "--host-root",
        host.to_str().unwrap(),
        "provision",
        "--no-expose",
        "--arch",
        "x86_64",
        "--url",
        &url,
        "--sha256",
        &"0".repeat(64),
    ]);
    let stderr = stderr(&output);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "cannot read the local bundle '{}': a FIFO, not a regular file",
            fifo.display()
        )),
        "{stderr}"
    );
}

#[test]
fn diagnose_fails_at_the_first_invalid_byte_of_an_endless_stream() {
    let (output, fed) = run_on_endless_stdin(&["diagnose", "-"], b"", 0);
    assert_refused(
        &output,
        "stdin is not valid JSON: expected value at line 1 column 1",
    );
    // What it read is one buffer; the rest is what the pipe held.
    assert!(fed < 4 << 20, "fed {fed} bytes before it stopped");

    let output = run(&["diagnose", "/dev/zero"]);
    assert_refused(
        &output,
        "/dev/zero is not valid JSON: expected value at line 1 column 1",
    );
}

#[test]
fn diagnose_stops_an_endless_valid_stream_at_the_limit() {
    let prefix = br#"{"apiVersion": "v1", "kind": "List", "items": ["#;
    let args = ["diagnose", "--max-input-bytes", "2MiB", "--now", NOW];
    let (output, fed) = run_on_endless_stdin(&args, prefix, b' ');
    assert_refused(
        &output,
        "cannot read stdin: larger than 2MiB (2097152 bytes), the limit set by --max-input-bytes",
    );
    assert!(fed >= 2 << 20, "fed only {fed} bytes");
    assert!(fed < 6 << 20, "fed {fed} bytes past a 2 MiB limit");
}

#[test]
fn max_input_bytes_caps_files_and_events_and_input_at_the_limit_is_read() {
    let node = fixture("incident-node.json");
    let size = std::fs::metadata(&node).unwrap().len();
    let node = node.to_str().unwrap();
    let exact = size.to_string();
    let output = run(&["diagnose", node, "--now", NOW, "--max-input-bytes", &exact]);
    assert_eq!(output.status.code(), Some(3), "{}", stderr(&output));

    let smaller = (size - 1).to_string();
    let output = run(&[
        "diagnose",
        node,
        "--now",
        NOW,
        "--max-input-bytes",
        &smaller,
    ]);
    assert_refused(
        &output,
        &format!(
            "cannot read node JSON from '{node}': larger than {smaller} bytes, the limit set by --max-input-bytes"
        ),
    );

    let events = fixture("pool-of-2-events.json");
    let events = events.to_str().unwrap();
    let list = fixture("pool-of-2-unhealthy.json");
    let list = list.to_str().unwrap();
    let with_events = |nodes: &str, limit: &str| {
        run(&[
            "diagnose",
            nodes,
            "--events",
            events,
            "--max-input-bytes",
            limit,
        ])
    };
    let size = std::fs::metadata(list).unwrap().len().to_string();
    let output = with_events(list, &size);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert_refused(
        &with_events(list, "4KiB"),
        &format!("cannot read node JSON from '{list}': larger than 4KiB (4096 bytes)"),
    );
    assert_refused(
        &with_events(node, "8000"),
        &format!("cannot read events from '{events}': larger than 8000 bytes"),
    );
    assert_refused(
        &run(&["diagnose", node, "--max-input-bytes", "0"]),
        "'0' is not a size",
    );
}

#[test]
fn a_generated_cluster_streams_to_the_same_forecast_from_a_file_a_pipe_and_memory() {
    let spec = Spec {
        nodes: 400,
        ..Spec::fleet(400)
    };
    let (bytes, summary) = nodes::list(&spec);
    assert_eq!(summary.bytes, bytes.len() as u64);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nodes.json");
    std::fs::write(&path, &bytes).unwrap();

    // The library: the stream parser and the in-memory one agree.
    let text = std::str::from_utf8(&bytes).unwrap();
    let parsed = kube::parse_nodes(text, "nodes.json").unwrap();
    let streamed = kube::read_nodes(&bytes[..], "nodes.json").unwrap();
    assert_eq!(parsed, streamed);
    assert_eq!(streamed.nodes().len(), spec.nodes);

    // The binary: a file and a pipe give the same forecast, with exactly the
    // generated unhealthy nodes in it.
    let from_file = run(&["diagnose", path.to_str().unwrap(), "--now", NOW, "--json"]);
    assert_eq!(from_file.status.code(), Some(3), "{}", stderr(&from_file));
    let mut child = accelready(&["diagnose", "--now", NOW, "--json"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let writer = thread::spawn(move || stdin.write_all(&bytes));
    let from_pipe = finish(child, "diagnose from a pipe");
    writer.join().unwrap().unwrap();
    assert_eq!(from_pipe.stdout, from_file.stdout);

    let forecast: serde_json::Value = serde_json::from_slice(&from_file.stdout).unwrap();
    let unhealthy: Vec<&str> = forecast["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|n| !n["unhealthy"].as_array().unwrap().is_empty())
        .map(|n| n["name"].as_str().unwrap())
        .collect();
    assert_eq!(unhealthy, summary.unhealthy);
    let unmanaged = forecast["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|n| n["verdict"] == "not-managed")
        .count();
    assert_eq!(unmanaged, summary.unmanaged);
}
