//! `accelready provision` end to end: the built binary against the in-process
//! HTTPS server, with real `.deb`s, tarballs and hostile archives.

mod common;

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use accelready::bundle::install::{self, Layout};
use accelready::{Arch, HostRoot};
use common::bundle::{self, Compression, Kind, Member};
use common::host::HostTree;
use common::https::{Fault, Server};
use common::sandbox::{in_private_mount_namespace, shell_line, skip_without_unshare};

const BIN: &str = env!("CARGO_BIN_EXE_accelready");
const INSTALL_DIR: &str = "/var/lib/accelready/dcgm";
const ARCH: Arch = Arch::Aarch64;

/// A temporary host tree.
struct Node {
    tree: HostTree,
}

impl Node {
    /// An empty root: provision needs nothing else.
    fn new() -> Node {
        Node {
            tree: HostTree::empty(ARCH),
        }
    }

    /// The incident's host: Bottlerocket NVIDIA aarch64, driver, no DCGM.
    fn incident() -> Node {
        Node {
            tree: HostTree::bottlerocket_nvidia(ARCH),
        }
    }

    fn host(&self) -> HostRoot {
        HostRoot::new(self.tree.root())
    }

    fn install_dir(&self) -> PathBuf {
        self.host().join(INSTALL_DIR)
    }

    fn layout(&self) -> Layout {
        Layout::new(self.install_dir())
    }

    /// `accelready provision` with fast test timings, trusting `server`.
    fn command(&self, server: &Server, sha256: &str, extra: &[&str]) -> Command {
        let mut command = Command::new(BIN);
        command
            .env_remove("HTTPS_PROXY")
            .env_remove("https_proxy")
            .env_remove("ALL_PROXY")
            .env_remove(accelready::bundle::TEST_PAUSE_ENV)
            .arg("--host-root")
            .arg(self.tree.root())
            .args(["provision", "--json", "--arch", ARCH.as_str()])
            .args(["--url", &server.url("/dcgm.deb"), "--sha256", sha256])
            .arg("--ca-bundle")
            .arg(server.ca_file())
            .args(["--retry-base-ms", "20", "--retry-cap-ms", "100"])
            .args(["--connect-timeout-ms", "2000"])
            .args(extra);
        if !extra.iter().any(|a| a.starts_with("--expose-at")) {
            command.arg("--no-expose");
        }
        command
    }

    fn provision(&self, server: &Server, sha256: &str, extra: &[&str]) -> Output {
        self.command(server, sha256, extra).output().unwrap()
    }

    /// Names in the install directory, sorted.
    fn entries(&self) -> Vec<String> {
        let mut names: Vec<String> = fs::read_dir(self.install_dir())
            .map(|d| {
                d.map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        names.sort();
        names
    }

    fn current(&self) -> Option<String> {
        fs::read_link(self.install_dir().join("current"))
            .ok()
            .map(|t| t.to_string_lossy().into_owned())
    }
}

fn mode_of(path: &Path) -> u32 {
    fs::metadata(path).unwrap().permissions().mode() & 0o7777
}

fn ok_json(output: &Output) -> serde_json::Value {
    assert!(
        output.status.success(),
        "provision failed ({:?}): {}",
        output.status.code(),
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("JSON report on stdout")
}

fn failed(output: &Output, code: i32) -> String {
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert_eq!(output.status.code(), Some(code), "stderr: {stderr}");
    assert!(output.stdout.is_empty(), "no result on stdout when failing");
    stderr
}

fn deb(compression: Compression) -> Vec<u8> {
    bundle::deb(ARCH, &bundle::dcgm_members(ARCH), compression)
}

fn serve(bytes: Vec<u8>) -> (Server, String) {
    let sha = bundle::sha256_hex(&bytes);
    (Server::start(bytes), sha)
}

/// What every successful install must look like on disk.
fn assert_installed(node: &Node, sha: &str) {
    let lib = node.install_dir().join(sha).join("lib");
    let link = |name: &str| fs::read_link(lib.join(name)).unwrap();
    assert_eq!(link("libdcgm.so"), Path::new("libdcgm.so.4"));
    assert_eq!(link("libdcgm.so.4"), Path::new("libdcgm.so.4.6.1"));
    assert_eq!(
        link("libdcgmmodulehealth.so.4"),
        Path::new("libdcgmmodulehealth.so.4.6.1")
    );
    assert!(lib.join("libdcgmmoduleconfig.so.4").is_file());
    // dcgmi goes to bin/ with nv-hostengine, never into lib/.
    let bin = node.install_dir().join(sha).join("bin");
    assert!(!lib.join("dcgmi").exists() && !lib.join("nv-hostengine").exists());
    assert_eq!(
        bin.join("dcgmi").exists(),
        bin.join("nv-hostengine").exists()
    );
    assert_eq!(node.current().as_deref(), Some(sha));
    // What `check` looks for: <install-dir>/current/lib/libdcgm.so, resolved on the host.
    let resolved = node
        .host()
        .resolve(format!("{INSTALL_DIR}/current/lib/libdcgm.so"))
        .unwrap();
    assert_eq!(
        resolved.host_path,
        PathBuf::from(format!("{INSTALL_DIR}/{sha}/lib/libdcgm.so.4.6.1"))
    );
    let info = accelready::probe::elf::inspect_file(&resolved.real_path).unwrap();
    assert_eq!(info.arch, Some(ARCH));
    assert_eq!(info.soname.as_deref(), Some("libdcgm.so.4"));
    install::verify_installed(&node.layout(), sha, ARCH).expect("manifest verifies");
    let leftovers: Vec<String> = node
        .entries()
        .into_iter()
        .filter(|n| {
            n.starts_with(".staging") || n.starts_with(".download") || n.starts_with(".current")
        })
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

#[test]
fn debs_in_each_compression_install_with_soname_links() {
    for compression in Compression::ALL {
        let (server, sha) = serve(deb(compression));
        let node = Node::new();
        let report = ok_json(&node.provision(&server, &sha, &["--with-hostengine"]));
        assert_eq!(report["cache_hit"], false, "{compression:?}");
        assert_eq!(report["sha256"], sha.as_str());
        assert_eq!(report["install_path"], format!("{INSTALL_DIR}/{sha}"));
        let mut files: Vec<&str> = report["files"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f["path"].as_str().unwrap())
            .collect();
        files.sort();
        assert_eq!(
            files,
            [
                "bin/dcgmi",
                "bin/nv-hostengine",
                "lib/libdcgm.so.4.6.1",
                "lib/libdcgmmoduleconfig.so.4",
                "lib/libdcgmmodulehealth.so.4.6.1",
            ],
            "{compression:?}"
        );
        let libdcgm = report["files"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["path"] == "lib/libdcgm.so.4.6.1")
            .unwrap();
        assert_eq!(libdcgm["soname"], "libdcgm.so.4");
        assert_eq!(libdcgm["arch"], "aarch64");
        assert_installed(&node, &sha);
        let bin = node.install_dir().join(&sha).join("bin");
        assert_eq!(mode_of(&bin.join("nv-hostengine")), 0o755);
        assert_eq!(mode_of(&bin.join("dcgmi")), 0o755);
    }
}

#[test]
fn tarballs_in_each_compression_are_detected_by_magic_bytes() {
    let tar = bundle::tar(&bundle::dcgm_members(ARCH));
    for compression in Compression::ALL {
        let (server, sha) = serve(bundle::compress(&tar, compression));
        let node = Node::new();
        // The URL ends in .deb; the bytes are a tarball.
        let report = ok_json(&node.provision(&server, &sha, &[]));
        assert_eq!(
            report["files"].as_array().unwrap().len(),
            3,
            "{compression:?}"
        );
        assert_installed(&node, &sha);
        assert!(!node
            .install_dir()
            .join(&sha)
            .join("bin/nv-hostengine")
            .exists());
    }
}

#[test]
fn an_install_without_the_engine_is_redone_once_the_engine_is_wanted() {
    let (server, sha) = serve(deb(Compression::Xz));
    let node = Node::new();
    ok_json(&node.provision(&server, &sha, &[]));
    let bin = node.install_dir().join(&sha).join("bin");
    assert!(!bin.join("nv-hostengine").exists());
    // Now the engine is wanted: the same digest is unpacked again, with it.
    let report = ok_json(&node.provision(&server, &sha, &["--with-hostengine"]));
    assert_eq!(report["cache_hit"], false);
    assert!(bin.join("nv-hostengine").is_file() && bin.join("dcgmi").is_file());
    assert_installed(&node, &sha);
    // With it, either way is a cache hit: nothing is taken away.
    for flags in [&["--with-hostengine"][..], &[]] {
        let report = ok_json(&node.provision(&server, &sha, flags));
        assert_eq!(report["cache_hit"], true, "{flags:?}");
    }
    assert_eq!(server.requests().len(), 2);
    assert!(bin.join("nv-hostengine").is_file());
}

#[test]
fn second_run_verifies_and_downloads_nothing() {
    let (server, sha) = serve(deb(Compression::Xz));
    let node = Node::new();
    ok_json(&node.provision(&server, &sha, &[]));
    let report = ok_json(&node.provision(&server, &sha, &[]));
    assert_eq!(report["cache_hit"], true);
    assert_eq!(
        server.requests().len(),
        1,
        "the second run must not download"
    );
    assert_installed(&node, &sha);

    // A tampered install no longer verifies: the next run reinstalls it.
    let file = node
        .install_dir()
        .join(&sha)
        .join("lib/libdcgmmoduleconfig.so.4");
    fs::write(&file, b"tampered").unwrap();
    let report = ok_json(&node.provision(&server, &sha, &[]));
    assert_eq!(report["cache_hit"], false);
    assert_eq!(server.requests().len(), 2);
    assert_installed(&node, &sha);
}

#[test]
fn after_provision_check_reports_the_incident_host_ready() {
    let (server, sha) = serve(deb(Compression::Xz));
    let node = Node::incident();
    let check = |node: &Node| {
        Command::new(BIN)
            .arg("--host-root")
            .arg(node.tree.root())
            .args(["check", "--json", "--arch", ARCH.as_str()])
            .output()
            .unwrap()
    };
    let before = check(&node);
    assert_eq!(before.status.code(), Some(10), "dcgm-missing before");

    ok_json(&node.provision(&server, &sha, &[]));
    let after = check(&node);
    let json: serde_json::Value = serde_json::from_slice(&after.stdout).unwrap();
    assert_eq!(after.status.code(), Some(0), "{json:#}");
    assert_eq!(json["verdict"], "ready");
    assert_eq!(
        json["dcgm"]["path"],
        format!("{INSTALL_DIR}/current/lib/libdcgm.so.4")
    );
    assert_eq!(json["dcgm"]["soname"], "libdcgm.so.4");
}

#[test]
fn new_versions_switch_current_keep_the_previous_and_prune_older() {
    let node = Node::new();
    let mut shas = Vec::new();
    for compression in Compression::ALL {
        let (server, sha) = serve(deb(compression));
        ok_json(&node.provision(&server, &sha, &[]));
        assert_eq!(node.current().as_deref(), Some(sha.as_str()));
        shas.push(sha);
    }
    let entries = node.entries();
    assert!(!entries.contains(&shas[0]), "oldest pruned: {entries:?}");
    assert!(entries.contains(&shas[1]), "previous kept: {entries:?}");
    assert!(entries.contains(&shas[2]));
}

#[test]
fn retries_503_and_honours_retry_after() {
    let (server, sha) = serve(deb(Compression::Gzip));
    server.script([Fault::Status(503), Fault::RetryAfter(1), Fault::Ok]);
    let node = Node::new();
    ok_json(&node.provision(&server, &sha, &[]));
    let requests = server.requests();
    assert_eq!(requests.len(), 3);
    let waited = requests[2].at - requests[1].at;
    assert!(
        waited >= Duration::from_millis(950),
        "Retry-After: 1 honoured, waited {waited:?}"
    );
    assert_installed(&node, &sha);
}

/// The `delay_ms` of each "retrying" log line.
fn retry_delays_ms(stderr: &str) -> Vec<u64> {
    stderr
        .lines()
        .filter(|l| l.contains("retrying"))
        .filter_map(|l| l.split("delay_ms=").nth(1)?.split(' ').next()?.parse().ok())
        .collect()
}

#[test]
fn retry_after_as_an_http_date_is_measured_from_the_servers_date() {
    // The server's clock is an hour behind ours: measured against our clock
    // the date is long past (no wait); against its Date it is 2 s ahead.
    let (server, sha) = serve(deb(Compression::Gzip));
    server.script([Fault::RetryAfterDate(2), Fault::Ok]);
    let node = Node::new();
    let output = node.provision(&server, &sha, &[]);
    ok_json(&output);
    let delays = retry_delays_ms(&String::from_utf8_lossy(&output.stderr));
    assert_eq!(delays.len(), 1, "{delays:?}");
    // 2 s, plus jitter of at most 1 s (half of it).
    assert!((2000..=3000).contains(&delays[0]), "{delays:?}");
    assert_installed(&node, &sha);
}

#[test]
fn retry_after_longer_than_the_cap_is_cut_to_it() {
    let (server, sha) = serve(deb(Compression::Gzip));
    server.script([Fault::RetryAfter(86_400), Fault::Ok]);
    let node = Node::new();
    let output = node.provision(&server, &sha, &["--retry-after-max-ms", "200"]);
    ok_json(&output);
    let delays = retry_delays_ms(&String::from_utf8_lossy(&output.stderr));
    // 200 ms, plus jitter of at most max(100 ms, the 20 ms backoff base).
    assert!(
        delays.len() == 1 && (200..=300).contains(&delays[0]),
        "{delays:?}"
    );
}

#[test]
fn turn_aways_and_progress_do_not_use_up_the_attempts() {
    // Twelve 429s with Retry-After and four cuts mid-body, with only two
    // attempts allowed: the server paced us and every cut made progress.
    let (server, sha) = serve(deb(Compression::Gzip));
    server.script(std::iter::repeat_n(Fault::RetryAfter(0), 12));
    server.script((1..=4).map(|_| Fault::Truncate(300)));
    let node = Node::new();
    ok_json(&node.provision(&server, &sha, &["--max-attempts", "2"]));
    let requests = server.requests();
    assert_eq!(requests.len(), 17);
    assert_eq!(requests[16].range.as_deref(), Some("bytes=1200-"));
    assert_installed(&node, &sha);
    // Two failures in a row without progress still give up.
    server.script([Fault::Status(500), Fault::Status(500)]);
    let other = Node::new();
    let stderr = failed(&other.provision(&server, &sha, &["--max-attempts", "2"]), 1);
    assert!(stderr.contains("after 2 attempts"), "{stderr}");
}

#[test]
fn broken_connection_resumes_with_range() {
    let (server, sha) = serve(deb(Compression::Gzip));
    // A reset may drop what the client had not read yet, so after it the
    // range start is at least what was confirmed before.
    server.script([Fault::Truncate(1000), Fault::ResetAfter(500), Fault::Ok]);
    let node = Node::new();
    ok_json(&node.provision(&server, &sha, &[]));
    let ranges: Vec<Option<String>> = server.requests().into_iter().map(|r| r.range).collect();
    assert_eq!(ranges.len(), 3, "{ranges:?}");
    assert_eq!(ranges[0], None);
    assert_eq!(ranges[1].as_deref(), Some("bytes=1000-"), "{ranges:?}");
    let resumed_at: u64 = ranges[2]
        .as_deref()
        .and_then(|r| r.strip_prefix("bytes=")?.strip_suffix('-')?.parse().ok())
        .unwrap_or_else(|| panic!("third request resumes: {ranges:?}"));
    assert!((1000..=1500).contains(&resumed_at), "{ranges:?}");
    assert_installed(&node, &sha);
}

#[test]
fn without_range_support_a_truncated_download_restarts() {
    let (server, sha) = serve(deb(Compression::Gzip));
    server.set_ranges(false);
    server.script([Fault::Truncate(1500), Fault::Ok]);
    let node = Node::new();
    ok_json(&node.provision(&server, &sha, &[]));
    assert_eq!(server.requests().len(), 2);
    assert_installed(&node, &sha);
}

#[test]
fn a_stall_past_the_read_timeout_is_retried() {
    let (server, sha) = serve(deb(Compression::Gzip));
    server.script([Fault::Stall(Duration::from_secs(20)), Fault::Ok]);
    let node = Node::new();
    let output = node.provision(&server, &sha, &["--read-timeout-ms", "300"]);
    ok_json(&output);
    assert_eq!(server.requests().len(), 2);
}

#[test]
fn without_a_terminal_progress_is_logged_with_bytes_and_rate() {
    // stderr is a pipe here: log lines, not a bar (every chunk, for the test).
    let (server, sha) = serve(deb(Compression::Gzip));
    let node = Node::new();
    let output = node.provision(&server, &sha, &["--progress-every-ms", "0"]);
    ok_json(&output);
    let stderr = String::from_utf8_lossy(&output.stderr);
    let line = stderr
        .lines()
        .find(|l| l.contains("downloading"))
        .unwrap_or_else(|| panic!("no progress line: {stderr}"));
    assert!(
        line.contains("MiB of ") && line.contains("MiB/s") && line.contains("/dcgm.deb"),
        "{line}"
    );
    assert!(!stderr.contains('\r'), "no bar drawn without a terminal");
}

#[test]
fn a_download_cut_by_the_deadline_leaves_no_temporary_file() {
    // The stall outlasts the whole run: the deadline drops the download
    // mid-body, which used to leave `.download-<sha256>` behind.
    let (server, sha) = serve(deb(Compression::Gzip));
    server.script([Fault::Stall(Duration::from_secs(30))]);
    let node = Node::new();
    let stderr = failed(&node.provision(&server, &sha, &["--deadline-ms", "700"]), 1);
    assert!(stderr.contains("overall deadline"), "{stderr}");
    assert_eq!(node.entries(), [".lock"], "{stderr}");
    assert_eq!(node.current(), None);
}

#[test]
fn wrong_bytes_fail_the_digest_and_leave_nothing() {
    let (server, sha) = serve(deb(Compression::Gzip));
    server.script([Fault::WrongBytes]);
    let node = Node::new();
    let stderr = failed(&node.provision(&server, &sha, &[]), 1);
    assert!(
        stderr.contains("sha256 mismatch for 'https://localhost:"),
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!("expected {sha}, got ")),
        "{stderr}"
    );
    assert_eq!(
        server.requests().len(),
        1,
        "a digest mismatch is not retried"
    );
    assert_eq!(node.entries(), [".lock"]);
    assert_eq!(node.current(), None);
}

#[test]
fn not_found_is_not_retried_and_5xx_gives_up() {
    let (server, sha) = serve(deb(Compression::Gzip));
    server.script([Fault::Status(404)]);
    let node = Node::new();
    let stderr = failed(&node.provision(&server, &sha, &[]), 1);
    assert!(stderr.contains("404"), "{stderr}");
    assert_eq!(server.requests().len(), 1);

    server.script(std::iter::repeat_n(Fault::Status(500), 3));
    let stderr = failed(&node.provision(&server, &sha, &["--max-attempts", "3"]), 1);
    assert!(
        stderr.contains("giving up") && stderr.contains("after 3 attempts"),
        "{stderr}"
    );
    assert_eq!(server.requests().len(), 4);
    assert_eq!(node.entries(), [".lock"]);
}

#[test]
fn redirects_to_http_and_http_urls_are_refused() {
    let (server, sha) = serve(deb(Compression::Gzip));
    server.script([Fault::RedirectTo("http://localhost:9/dcgm.deb".into())]);
    let node = Node::new();
    let stderr = failed(&node.provision(&server, &sha, &[]), 2);
    assert!(
        stderr.contains("refusing redirect to 'http://localhost:9/dcgm.deb'"),
        "{stderr}"
    );
    assert_eq!(server.requests().len(), 1);

    let output = Command::new(BIN)
        .arg("--host-root")
        .arg(node.tree.root())
        .args([
            "provision",
            "--no-expose",
            "--url",
            "http://localhost:9/x.deb",
            "--sha256",
            &sha,
        ])
        .output()
        .unwrap();
    let stderr = failed(&output, 2);
    assert!(stderr.contains("--allow-insecure-http"), "{stderr}");
}

#[test]
fn without_the_ca_bundle_the_server_is_not_trusted() {
    let (server, sha) = serve(deb(Compression::Gzip));
    let node = Node::new();
    let mut command = node.command(&server, &sha, &["--max-attempts", "1"]);
    let args: Vec<_> = command.get_args().map(|a| a.to_owned()).collect();
    let position = args.iter().position(|a| a == "--ca-bundle").unwrap();
    let mut bare = Command::new(BIN);
    bare.args(args[..position].iter().chain(&args[position + 2..]));
    let _ = &mut command;
    let stderr = failed(&bare.output().unwrap(), 1);
    assert!(stderr.contains("https://localhost:"), "{stderr}");
}

impl Node {
    /// `accelready provision --url URL` with no server, no CA and no expose.
    fn provision_url(&self, url: &str, sha256: &str) -> Output {
        Command::new(BIN)
            .env_remove("HTTPS_PROXY")
            .env_remove("https_proxy")
            .arg("--host-root")
            .arg(self.tree.root())
            .args([
                "provision",
                "--json",
                "--no-expose",
                "--arch",
                ARCH.as_str(),
            ])
            .args(["--url", url, "--sha256", sha256])
            .output()
            .unwrap()
    }
}

/// A bundle written to a temporary file, and its `file://` URL.
fn local_bundle(bytes: &[u8]) -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir
        .path()
        .join("datacenter-gpu-manager-4-core_4.6.1_arm64.deb");
    fs::write(&path, bytes).unwrap();
    let url = format!("file://{}", path.display());
    (dir, url)
}

#[test]
fn a_local_file_bundle_installs_the_same_way_without_network() {
    let bytes = deb(Compression::Xz);
    let sha = bundle::sha256_hex(&bytes);
    let (_dir, url) = local_bundle(&bytes);
    let node = Node::new();
    let report = ok_json(&node.provision_url(&url, &sha));
    assert_eq!(report["source"], "file");
    assert_eq!(report["url"], url.as_str());
    assert_eq!(report["cache_hit"], false);
    assert_eq!(report["bytes"], bytes.len() as u64);
    assert_installed(&node, &sha);
    let manifest: serde_json::Value = serde_json::from_slice(
        &fs::read(node.install_dir().join(&sha).join(".accelready.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(manifest["url"], url.as_str());
    let again = ok_json(&node.provision_url(&url, &sha));
    assert_eq!(again["cache_hit"], true);
}

#[test]
fn a_local_file_with_another_digest_leaves_nothing() {
    let bytes = deb(Compression::Gzip);
    let (_dir, url) = local_bundle(&bytes);
    let node = Node::new();
    let wrong = "0".repeat(64);
    let stderr = failed(&node.provision_url(&url, &wrong), 1);
    assert!(
        stderr.contains(&format!(
            "sha256 mismatch for '{url}': expected {wrong}, got {}",
            bundle::sha256_hex(&bytes)
        )),
        "{stderr}"
    );
    assert_eq!(node.entries(), [".lock"]);

    // A file:// URL that names nothing is the operator's mistake: exit 2.
    let stderr = failed(&node.provision_url(&format!("{url}.absent"), &wrong), 2);
    assert!(stderr.contains("cannot read the local bundle"), "{stderr}");
    assert_eq!(node.entries(), [".lock"]);
}

#[test]
fn relative_paths_and_other_schemes_are_refused_clearly() {
    let node = Node::new();
    let sha = "0".repeat(64);
    for url in [
        "file://dcgm.deb",
        "file:dcgm.deb",
        "file://mirror/srv/dcgm.deb",
    ] {
        let stderr = failed(&node.provision_url(url, &sha), 2);
        assert!(
            stderr.contains(&format!(
                "bundle URL '{url}': a local bundle must be file:///ABS/PATH"
            )),
            "{url}: {stderr}"
        );
    }
    let stderr = failed(&node.provision_url("dcgm.deb", &sha), 2);
    assert!(
        stderr.contains("invalid bundle URL 'dcgm.deb'") && stderr.contains("file:///ABS/PATH"),
        "{stderr}"
    );
    let stderr = failed(&node.provision_url("ftp://mirror/dcgm.deb", &sha), 2);
    assert!(stderr.contains("scheme 'ftp' is not allowed"), "{stderr}");
    assert_eq!(node.current(), None);
}

fn hostile(extra: Member) -> Vec<u8> {
    let mut members = bundle::dcgm_members(ARCH);
    members.insert(1, extra);
    bundle::compress(&bundle::tar(&members), Compression::Gzip)
}

#[test]
fn hostile_archives_are_rejected_naming_the_member() {
    let cases: Vec<(Member, &str)> = vec![
        (
            bundle::file("/etc/cron.d/evil", b"x".to_vec()),
            "'/etc/cron.d/evil': absolute paths",
        ),
        (
            bundle::file("usr/../../evil", b"x".to_vec()),
            "'usr/../../evil': '..'",
        ),
        (
            bundle::link("usr/lib/libdcgm.so.9", "../../../etc/shadow"),
            "'usr/lib/libdcgm.so.9': symlink to '../../../etc/shadow' points outside",
        ),
        (
            bundle::link("usr/lib/x", "/etc/shadow"),
            "symlink to '/etc/shadow' points outside",
        ),
        (
            Member {
                path: "usr/lib/h".into(),
                kind: Kind::Hardlink("../etc/shadow".into()),
            },
            "'usr/lib/h': hardlink to '../etc/shadow' points outside",
        ),
        (
            Member {
                path: "dev/nvidia0".into(),
                kind: Kind::CharDevice,
            },
            "'dev/nvidia0': device entries",
        ),
        (
            Member {
                path: "tmp/fifo".into(),
                kind: Kind::Fifo,
            },
            "'tmp/fifo': fifo entries",
        ),
    ];
    for (member, message) in cases {
        let bytes = hostile(member);
        let (server, sha) = serve(bytes);
        let node = Node::new();
        let stderr = failed(&node.provision(&server, &sha, &[]), 1);
        assert!(
            stderr.contains(message),
            "expected {message:?} in: {stderr}"
        );
        assert_eq!(node.entries(), [".lock"], "{message}");
    }
}

#[test]
fn decompression_bombs_are_refused() {
    let mut members = bundle::dcgm_members(ARCH);
    members.push(bundle::file("usr/share/zeros", vec![0; 8 << 20]));
    let (server, sha) = serve(bundle::compress(&bundle::tar(&members), Compression::Zstd));
    let node = Node::new();
    let stderr = failed(
        &node.provision(&server, &sha, &["--max-unpacked-bytes", "4194304"]),
        1,
    );
    assert!(
        stderr.contains("more than 4194304 bytes (at 'usr/share/zeros')"),
        "{stderr}"
    );
    let stderr = failed(&node.provision(&server, &sha, &["--max-entries", "3"]), 1);
    assert!(stderr.contains("more than 3 entries"), "{stderr}");
    let stderr = failed(&node.provision(&server, &sha, &["--max-bytes", "1000"]), 1);
    assert!(
        stderr.contains("larger than the limit of 1000 bytes"),
        "{stderr}"
    );
    assert_eq!(node.entries(), [".lock"]);
}

#[test]
fn setuid_bits_are_stripped() {
    let mut members = bundle::dcgm_members(ARCH);
    if let Kind::File { mode, .. } = &mut members[1].kind {
        *mode = 0o4755;
    }
    let (server, sha) = serve(bundle::compress(&bundle::tar(&members), Compression::Xz));
    let node = Node::new();
    ok_json(&node.provision(&server, &sha, &[]));
    let file = node.install_dir().join(&sha).join("lib/libdcgm.so.4.6.1");
    assert_eq!(mode_of(&file), 0o644);
}

#[test]
fn wrong_architecture_and_missing_libdcgm_are_refused() {
    let wrong = bundle::deb(
        Arch::X86_64,
        &bundle::dcgm_members(Arch::X86_64),
        Compression::Xz,
    );
    let (server, sha) = serve(wrong);
    let node = Node::new();
    let stderr = failed(&node.provision(&server, &sha, &[]), 1);
    assert!(
        stderr.contains("'lib/libdcgm.so.4.6.1' is built for x86_64, but the target is aarch64"),
        "{stderr}"
    );

    let members: Vec<Member> = bundle::dcgm_members(ARCH)
        .into_iter()
        .filter(|m| !m.path.contains("libdcgm.so"))
        .collect();
    let (server, sha) = serve(bundle::compress(&bundle::tar(&members), Compression::Gzip));
    let stderr = failed(&node.provision(&server, &sha, &[]), 1);
    assert!(stderr.contains("contains no libdcgm.so.N"), "{stderr}");
    assert_eq!(node.entries(), [".lock"]);
}

#[test]
fn a_bundle_whose_libdcgm_is_not_dcgm_is_refused_before_installing() {
    // Each bundle's libdcgm.so.4.6.1 replaced by a library that is not DCGM.
    let impostor = |soname: &str, exports: &[&str]| {
        let members: Vec<Member> = bundle::dcgm_members(ARCH)
            .into_iter()
            .map(|mut member| {
                if member.path.ends_with("/libdcgm.so.4.6.1") {
                    member.kind = Kind::File {
                        data: common::elf::shared_object_exporting(ARCH, soname, &[], exports),
                        mode: 0o644,
                    };
                }
                member
            })
            .collect();
        bundle::compress(&bundle::tar(&members), Compression::Gzip)
    };
    let cases: [(&str, &[&str], &str); 3] = [
        (
            "libz.so.1",
            &[],
            "SONAME 'libz.so.1' (expected libdcgm.so.<N>); does not export the DCGM entry point(s) dcgmInit, dcgmShutdown, dcgmConnect_v2, dcgmDisconnect, dcgmStartEmbedded, dcgmStopEmbedded",
        ),
        (
            "libdcgm.so.4",
            &["dcgmInit", "dcgmShutdown"],
            "SONAME 'libdcgm.so.4'; does not export the DCGM entry point(s) dcgmConnect_v2, dcgmDisconnect, dcgmStartEmbedded, dcgmStopEmbedded",
        ),
        (
            "libz.so.1",
            &accelready::probe::dcgm::ENTRY_POINTS,
            "SONAME 'libz.so.1' (expected libdcgm.so.<N>); exports the DCGM entry points",
        ),
    ];
    for (soname, exports, why) in cases {
        let node = Node::new();
        let (server, sha) = serve(impostor(soname, exports));
        let stderr = failed(&node.provision(&server, &sha, &[]), 1);
        assert!(
            stderr
                .contains("bundle file 'lib/libdcgm.so.4.6.1' is named like DCGM but is not DCGM"),
            "{soname}: {stderr}"
        );
        assert!(stderr.contains(why), "{soname}: {stderr}");
        assert_eq!(node.entries(), [".lock"], "{soname}: nothing installed");
    }
}

// ---- crash safety, locking, mounts and a full disk ----

use std::io::{BufRead, BufReader};
use std::process::{Child, ExitStatus, Stdio};

/// Starts `provision` paused at `step` and returns once it got there.
fn spawn_paused(node: &Node, server: &Server, sha: &str, step: &str) -> Child {
    try_spawn_paused(node, server, sha, step).unwrap_or_else(|(status, seen)| {
        panic!("provision exited ({status}) before pausing at {step}: {seen}")
    })
}

/// Starts `provision` paused at `step`: the paused child, or how the run
/// ended when it never got there (a cache hit skips the download steps).
fn try_spawn_paused(
    node: &Node,
    server: &Server,
    sha: &str,
    step: &str,
) -> Result<Child, (ExitStatus, String)> {
    let mut child = node
        .command(server, sha, &[])
        .env(accelready::bundle::TEST_PAUSE_ENV, step)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let wanted = format!("accelready-test-pause: {step}");
    let mut seen = String::new();
    loop {
        let mut line = String::new();
        if stderr.read_line(&mut line).unwrap() == 0 {
            return Err((child.wait().unwrap(), seen));
        }
        if line.trim_end() == wanted {
            break;
        }
        seen.push_str(&line);
    }
    // Keep draining stderr so the child never blocks on a full pipe.
    std::thread::spawn(move || std::io::copy(&mut stderr, &mut std::io::sink()));
    Ok(child)
}

#[test]
fn sigkill_at_any_step_leaves_old_or_new_and_a_rerun_succeeds() {
    let (old_server, old_sha) = serve(deb(Compression::Xz));
    let (new_server, new_sha) = serve(deb(Compression::Zstd));
    let steps = [
        "fetch-partial",
        "fetched",
        "unpack-partial",
        "staged",
        "committed",
        "link-created",
        "switched",
    ];
    for step in steps {
        let node = Node::new();
        ok_json(&node.provision(&old_server, &old_sha, &[]));
        let mut child = spawn_paused(&node, &new_server, &new_sha, step);
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();

        let current = node.current().expect("current survives");
        assert!(
            current == old_sha || current == new_sha,
            "{step}: {current}"
        );
        install::verify_installed(&node.layout(), &current, ARCH)
            .unwrap_or_else(|e| panic!("{step}: current is not complete: {e}"));

        let report = ok_json(&node.provision(&new_server, &new_sha, &[]));
        assert_installed(&node, &new_sha);
        let expect_cache_hit = matches!(step, "committed" | "link-created" | "switched");
        assert_eq!(report["cache_hit"], expect_cache_hit, "{step}");
        assert!(node.entries().contains(&old_sha), "{step}: previous kept");
    }
}

#[test]
fn a_second_run_waits_for_the_lock() {
    let (server, sha) = serve(deb(Compression::Gzip));
    let node = Node::new();
    let mut first = spawn_paused(&node, &server, &sha, "fetched");
    let mut second = node
        .command(&server, &sha, &[])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(800));
    assert!(second.try_wait().unwrap().is_none(), "second run must wait");
    assert_eq!(server.requests().len(), 1);
    first.kill().unwrap();
    first.wait().unwrap();
    let output = second.wait_with_output().unwrap();
    assert!(output.status.success());
    assert_installed(&node, &sha);
}

#[test]
fn expose_bind_mounts_read_only_and_is_idempotent() {
    if skip_without_unshare("expose_bind_mounts_read_only_and_is_idempotent") {
        return;
    }
    let (server, sha) = serve(deb(Compression::Xz));
    let node = Node::new();
    let provision =
        shell_line(&node.command(&server, &sha, &["--expose-at", "/mnt/accelready/dcgm"]));
    let target = node.host().join("/mnt/accelready/dcgm");
    let target = target.display();
    let script = format!(
        "set -e\n{provision}\necho ===\n{provision}\necho ===\n\
         findmnt -n -o OPTIONS --mountpoint {target}\n\
         ls {target}/lib\n\
         touch {target}/lib/written 2>&1 || true\n"
    );
    let output = in_private_mount_namespace(&script);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let parts: Vec<&str> = stdout.split("===\n").collect();
    let first: serde_json::Value = serde_json::from_str(parts[0]).unwrap();
    let second: serde_json::Value = serde_json::from_str(parts[1]).unwrap();
    assert_eq!(first["expose"], "mounted");
    assert_eq!(first["exposed_at"], "/mnt/accelready/dcgm");
    assert_eq!(second["expose"], "already-mounted");
    assert_eq!(second["cache_hit"], true);
    let rest = parts[2];
    assert!(
        rest.lines().next().unwrap().split(',').any(|o| o == "ro"),
        "{rest}"
    );
    assert!(rest.contains("libdcgm.so.4.6.1"), "{rest}");
    assert!(rest.contains("Read-only file system"), "{rest}");
    // The namespace is gone: nothing is mounted here any more.
    assert!(fs::read_dir(node.host().join("/mnt/accelready/dcgm"))
        .unwrap()
        .next()
        .is_none());
}

#[test]
fn expose_without_cap_sys_admin_says_so() {
    if skip_without_unshare("expose_without_cap_sys_admin_says_so") {
        return;
    }
    let (server, sha) = serve(deb(Compression::Xz));
    let node = Node::new();
    let provision =
        shell_line(&node.command(&server, &sha, &["--expose-at", "/mnt/accelready/dcgm"]));
    let output = in_private_mount_namespace(&format!(
        "exec setpriv --bounding-set -sys_admin {provision}"
    ));
    let stderr = failed(&output, 1);
    let target = node.host().join("/mnt/accelready/dcgm");
    assert!(
        stderr.contains(&format!("not permitted to mount at '{}'", target.display()))
            && stderr.contains("CAP_SYS_ADMIN"),
        "{stderr}"
    );
}

#[test]
fn a_full_disk_fails_clearly_and_leaves_nothing() {
    if skip_without_unshare("a_full_disk_fails_clearly_and_leaves_nothing") {
        return;
    }
    // Full while downloading: 3 MiB of incompressible padding.
    let mut big_download = bundle::dcgm_members(ARCH);
    let noise: Vec<u8> = std::iter::repeat_with(|| fastrand::u8(..))
        .take(3 << 20)
        .collect();
    big_download.push(bundle::file("usr/share/noise", noise));
    // Full while unpacking: a small download that unpacks a 3 MiB kept file.
    let mut big_unpack = bundle::dcgm_members(ARCH);
    big_unpack.push(bundle::file(
        "usr/lib/aarch64-linux-gnu/libdcgmmodulebig.so.4",
        vec![0; 3 << 20],
    ));
    for (what, members, message) in [
        ("download", big_download, "cannot write the download of"),
        (
            "unpack",
            big_unpack,
            "libdcgmmodulebig.so.4': cannot extract",
        ),
    ] {
        let (server, sha) = serve(bundle::compress(&bundle::tar(&members), Compression::Gzip));
        let node = Node::new();
        let install_dir = node.install_dir();
        fs::create_dir_all(&install_dir).unwrap();
        let script = format!(
            "mount -t tmpfs -o size=1m tmpfs {dir} || exit 99\n{provision}\necho \"rc=$?\" >&2\nls -A {dir} >&2\n",
            dir = install_dir.display(),
            provision = shell_line(&node.command(&server, &sha, &[])),
        );
        let output = in_private_mount_namespace(&script);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains("rc=1"), "{what}: {stderr}");
        assert!(
            stderr.contains(message) && stderr.contains("No space left on device"),
            "{what}: {stderr}"
        );
        let listing: Vec<&str> = stderr
            .lines()
            .skip_while(|l| !l.starts_with("rc="))
            .skip(1)
            .collect();
        assert_eq!(listing, [".lock"], "{what}: nothing left behind: {stderr}");
    }
}

// ---- the install invariant, as a property ----

use proptest::prelude::*;
use proptest::test_runner::{Config as ProptestConfig, TestRunner};

/// The steps `provision` can be SIGKILLed at (its test pause points).
const KILL_STEPS: [&str; 7] = [
    "fetch-partial",
    "fetched",
    "unpack-partial",
    "staged",
    "committed",
    "link-created",
    "switched",
];

/// One `provision` run in a random sequence.
#[derive(Debug, Clone)]
enum Run {
    /// Good bundle `i`: must succeed.
    Good(usize),
    /// The server answers 404.
    FetchError,
    /// The bytes do not have the digest asked for.
    DigestMismatch(usize),
    /// A hostile archive with its true digest: unpack refuses it.
    UnpackRejected,
    /// Good bundle `i`, SIGKILLed at a step.
    Kill(usize, &'static str),
}

fn run_strategy() -> impl Strategy<Value = Run> {
    // Kills weigh most: they are what atomicity is about.
    prop_oneof![
        2 => (0..3usize).prop_map(Run::Good),
        1 => Just(Run::FetchError),
        1 => (0..3usize).prop_map(Run::DigestMismatch),
        1 => Just(Run::UnpackRejected),
        4 => (0..3usize, prop::sample::select(KILL_STEPS.to_vec())).prop_map(|(i, s)| Run::Kill(i, s)),
    ]
}

fn temp_entries(node: &Node) -> Vec<String> {
    node.entries()
        .into_iter()
        .filter(|n| {
            n.starts_with(".staging") || n.starts_with(".download") || n.starts_with(".current")
        })
        .collect()
}

/// For random sequences of runs with injected failures and kills, `current`
/// always points at a complete, verified version (once there is one), and a
/// successful run leaves no temporary files.
#[test]
fn install_invariant_holds_across_random_runs_failures_and_kills() {
    let good: Vec<(Server, String)> = [
        deb(Compression::Xz),
        deb(Compression::Zstd),
        bundle::compress(&bundle::tar(&bundle::dcgm_members(ARCH)), Compression::Gzip),
    ]
    .into_iter()
    .map(serve)
    .collect();
    let (not_found, _) = serve(deb(Compression::Gzip));
    let (hostile, hostile_sha) = serve(hostile(bundle::file("/etc/cron.d/evil", b"x".to_vec())));
    let never_sha = bundle::sha256_hex(b"no bundle has this digest");

    // Each case spawns the binary 2-9 times (TLS handshakes, real unpacks),
    // so not proptest's default 256: 32 cases take a few seconds and catch a
    // non-atomic `current` switch (a mutation test) nearly every time.
    let mut runner = TestRunner::new(ProptestConfig::with_cases(32));
    // Start from an installed version, so that there is one to protect.
    let runs =
        ((0..3usize), prop::collection::vec(run_strategy(), 1..8)).prop_map(|(first, rest)| {
            std::iter::once(Run::Good(first))
                .chain(rest)
                .collect::<Vec<_>>()
        });
    let result = runner.run(&runs, |runs| {
        let node = Node::new();
        let mut installed: Option<String> = None;
        for run in &runs {
            match run {
                Run::Good(i) => {
                    let (server, sha) = &good[*i];
                    ok_json(&node.provision(server, sha, &[]));
                    prop_assert_eq!(node.current(), Some(sha.clone()), "{:?}", run);
                    prop_assert!(
                        temp_entries(&node).is_empty(),
                        "{:?}: {:?}",
                        run,
                        temp_entries(&node)
                    );
                }
                Run::FetchError => {
                    not_found.script([Fault::Status(404)]);
                    failed(&node.provision(&not_found, &never_sha, &[]), 1);
                }
                Run::DigestMismatch(i) => {
                    failed(&node.provision(&good[*i].0, &never_sha, &[]), 1);
                }
                Run::UnpackRejected => {
                    failed(&node.provision(&hostile, &hostile_sha, &[]), 1);
                }
                Run::Kill(i, step) => {
                    let (server, sha) = &good[*i];
                    match try_spawn_paused(&node, server, sha, step) {
                        Ok(mut child) => {
                            child.kill().unwrap(); // SIGKILL
                            child.wait().unwrap();
                        }
                        // Already installed: the run never reaches the step.
                        Err((status, seen)) => {
                            prop_assert!(status.success(), "{:?}: {}", run, seen)
                        }
                    }
                }
            }
            let current = node.current();
            if installed.is_some() {
                prop_assert!(current.is_some(), "{:?}: current disappeared", run);
            }
            if let Some(current) = &current {
                prop_assert!(
                    good.iter().any(|(_, sha)| sha == current),
                    "{:?}: current -> {}",
                    run,
                    current
                );
                let verified = install::verify_installed(&node.layout(), current, ARCH);
                prop_assert!(verified.is_ok(), "{:?}: {:?}", run, verified);
            }
            if !matches!(run, Run::Good(_) | Run::Kill(..)) {
                prop_assert_eq!(
                    &current,
                    &installed,
                    "{:?}: a failed run changed current",
                    run
                );
            }
            installed = current;
        }
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
}
