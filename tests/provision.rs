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
use common::https::{Fault, Server};

const BIN: &str = env!("CARGO_BIN_EXE_accelready");
const INSTALL_DIR: &str = "/var/lib/accelready/dcgm";
const ARCH: Arch = Arch::Aarch64;

/// A temporary host tree.
struct Node {
    dir: tempfile::TempDir,
}

impl Node {
    fn new() -> Node {
        Node {
            dir: tempfile::tempdir().unwrap(),
        }
    }

    fn host(&self) -> HostRoot {
        HostRoot::new(self.dir.path())
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
            .arg(self.dir.path())
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
    assert!(
        !lib.join("dcgmi").exists() && !node.install_dir().join(sha).join("bin/dcgmi").exists()
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
        let engine = node.install_dir().join(&sha).join("bin/nv-hostengine");
        assert_eq!(
            fs::metadata(engine).unwrap().permissions().mode() & 0o7777,
            0o755
        );
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
        .arg(node.dir.path())
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
    assert_eq!(
        fs::metadata(file).unwrap().permissions().mode() & 0o7777,
        0o644
    );
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
