//! `accelready boot` end to end, the way Bottlerocket runs a bootstrap
//! container: the built binary in a private mount namespace, chrooted into a
//! container root (`common::sandbox::container_script`) where
//! `/.bottlerocket/rootfs` is a read-only view of a fixture host tree (with
//! `var` writable and `mnt` shared back to the host),
//! the policy at `/.bottlerocket/bootstrap-containers/current/user-data`, a
//! fake Bottlerocket API on `/run/api.sock`, and the DCGM bundle on the
//! loopback HTTPS server — or, for `source = "image"`, laid out at the
//! container root's `/dcgm` (the image's own filesystem) with `boot` in a
//! network namespace of its own where nothing but a down loopback exists.
//!
//! These need root (CI runs as root) and are skipped with a printed reason
//! otherwise. A few flag-driven tests below run anywhere.

mod common;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use accelready::Arch;
use common::api::{FakeApi, Fault as ApiFault};
use common::bundle::{self, Compression};
use common::host::HostTree;
use common::https::{Fault, Server};
use common::sandbox::{container_script, in_private_mount_namespace, skip_without_unshare};
use serde_json::{json, Value};

const BIN: &str = env!("CARGO_BIN_EXE_accelready");
const ARCH: Arch = Arch::Aarch64;
const CA_HOST_PATH: &str = "/etc/accelready/mirror-ca.pem";

/// A policy for the incident's node with a pinned aarch64 bundle.
fn policy(url: &str, sha256: &str, on_unready: &str, deadline_seconds: u32) -> String {
    let essential = on_unready == "fail-boot";
    format!(
        r#"[bootstrap]
name = "accelready"
image = "123456789012.dkr.ecr.us-west-2.amazonaws.com/accelready:0.1.0"
essential = {essential}

[dcgm]
provision = "if-missing"
ca-bundle = "{CA_HOST_PATH}"

[dcgm.bundle.aarch64]
url = "{url}"
sha256 = "{sha256}"

[repair]
karpenter = "1.4.0"
on-unready = "{on_unready}"

[boot]
deadline-seconds = {deadline_seconds}
"#
    )
}

/// One node and its surroundings.
struct Node {
    tree: HostTree,
    scratch: tempfile::TempDir,
}

/// What one boot did.
struct Booted {
    output: Output,
    elapsed: Duration,
    /// The report printed on stdout.
    report: Value,
    /// Lines from the namespace script's checks, `key=value`.
    facts: Vec<String>,
    /// The network interfaces `boot` could see (`/proc/net/dev`).
    interfaces: Vec<String>,
}

impl Booted {
    fn code(&self) -> Option<i32> {
        self.output.status.code()
    }

    fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.output.stderr).into_owned()
    }

    fn fact(&self, key: &str) -> Option<&str> {
        self.facts
            .iter()
            .find_map(|line| line.strip_prefix(&format!("{key}=")))
    }
}

impl Node {
    fn incident(server: Option<&Server>) -> Node {
        let tree = HostTree::bottlerocket_nvidia(ARCH);
        fs::create_dir_all(tree.root().join("mnt")).unwrap();
        fs::create_dir_all(tree.root().join("var/lib")).unwrap();
        if let Some(server) = server {
            let ca = tree.root().join(CA_HOST_PATH.trim_start_matches('/'));
            fs::create_dir_all(ca.parent().unwrap()).unwrap();
            fs::copy(server.ca_file(), ca).unwrap();
        }
        let node = Node {
            tree,
            scratch: tempfile::tempdir().unwrap(),
        };
        fs::create_dir_all(node.container_root().join("run")).unwrap();
        node
    }

    fn container_root(&self) -> PathBuf {
        self.scratch.path().join("container")
    }

    /// Where the fake API listens, as seen from outside the chroot.
    fn api_socket(&self) -> PathBuf {
        self.container_root().join("run/api.sock")
    }

    fn host_path(&self, path: &str) -> PathBuf {
        self.tree.root().join(path.trim_start_matches('/'))
    }

    /// Boots like Bottlerocket would (see the module docs).
    fn boot(&self, policy: &str) -> Booted {
        self.boot_in(policy, Network::Host)
    }

    /// [`Node::boot`], in a network namespace of its own.
    fn boot_in(&self, policy: &str, network: Network) -> Booted {
        let tree = self.tree.root();
        let out = self.scratch.path().join("out");
        let script = container_script(
            &self.container_root(),
            tree,
            &out,
            "/.bottlerocket/bootstrap-containers/current",
            policy,
        ) + &format!(
            r#"set +e
start=$(date +%s%N)
{netns} sh -c 'cat /proc/net/dev > "$1/netdev"; exec chroot "$2" /accelready boot --json --arch {arch}' - "$O" "$R" > "$O/stdout" 2> "$O/stderr"
echo "rc=$?" > "$O/facts"
echo "elapsed_ns=$(( $(date +%s%N) - start ))" >> "$O/facts"
# What the host sees after the container exited.
if [ -e "$T/mnt/accelready/dcgm/lib/libdcgm.so.4" ]; then echo "host_sees_dcgm=yes"; else echo "host_sees_dcgm=no"; fi >> "$O/facts"
if grep -q " $T/mnt/accelready/dcgm " /proc/self/mountinfo; then
  grep " $T/mnt/accelready/dcgm " /proc/self/mountinfo | head -n1 | awk '{{print "mount_options=" $6}}' >> "$O/facts"
  if touch "$T/mnt/accelready/dcgm/probe" 2>/dev/null; then echo "exposed_writable=yes"; else echo "exposed_writable=no"; fi >> "$O/facts"
fi
exit 0
"#,
            arch = ARCH.as_str(),
            netns = match network {
                Network::Host => "",
                Network::None => "unshare --net",
            },
        );
        let started = Instant::now();
        let output = in_private_mount_namespace(&script);
        let wall = started.elapsed();
        assert!(
            output.status.success(),
            "namespace script failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        let facts: Vec<String> = fs::read_to_string(out.join("facts"))
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect();
        let interfaces = fs::read_to_string(out.join("netdev"))
            .unwrap_or_default()
            .lines()
            .skip(2)
            .filter_map(|line| line.split(':').next())
            .map(|name| name.trim().to_owned())
            .collect();
        let stdout = fs::read(out.join("stdout")).unwrap_or_default();
        let stderr = fs::read(out.join("stderr")).unwrap_or_default();
        let rc: i32 = facts
            .iter()
            .find_map(|l| l.strip_prefix("rc="))
            .and_then(|v| v.parse().ok())
            .expect("the script records the exit code");
        let elapsed = facts
            .iter()
            .find_map(|l| l.strip_prefix("elapsed_ns="))
            .and_then(|v| v.parse::<u64>().ok())
            .map(Duration::from_nanos)
            .unwrap_or(wall);
        let report = serde_json::from_slice(&stdout).unwrap_or_else(|e| {
            panic!(
                "boot printed no JSON report ({e}); exit {rc}; stderr:\n{}",
                String::from_utf8_lossy(&stderr)
            )
        });
        Booted {
            output: Output {
                status: exit_status(rc),
                stdout,
                stderr,
            },
            elapsed,
            report,
            facts,
            interfaces,
        }
    }

    /// What `bootstrap/build --bundle` puts in the image: the bundle laid out
    /// at /dcgm of the container root by `provision` itself (from a local
    /// file, no network). Returns the bundle's sha256.
    fn lay_out_in_image(&self, bytes: &[u8]) -> String {
        let sha = bundle::sha256_hex(bytes);
        let dir = tempfile::tempdir().unwrap();
        let file = dir
            .path()
            .join("datacenter-gpu-manager-4-core_4.6.1_arm64.deb");
        fs::write(&file, bytes).unwrap();
        bundle::lay_out_in_image(BIN, &self.container_root(), &file, &sha, ARCH);
        sha
    }
}

/// Where a boot's network comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Network {
    /// The test machine's (the bundle server on loopback is reachable).
    Host,
    /// A new network namespace: only a loopback interface, and that down.
    None,
}

fn exit_status(code: i32) -> std::process::ExitStatus {
    use std::os::unix::process::ExitStatusExt;
    std::process::ExitStatus::from_raw(code << 8)
}

fn deb() -> Vec<u8> {
    bundle::deb(ARCH, &bundle::dcgm_members(ARCH), Compression::Xz)
}

/// The labels and taints the fake API holds after boot.
fn node_settings(api: &FakeApi) -> (Value, Value) {
    let settings = api.settings();
    (
        settings["kubernetes"]["node-labels"].clone(),
        settings["kubernetes"]["node-taints"].clone(),
    )
}

/// A URL on a loopback port where nothing listens.
fn dead_url() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    drop(listener);
    format!("https://localhost:{port}/dcgm.deb")
}

#[test]
fn incident_host_is_provisioned_exposed_and_labelled_and_a_reboot_downloads_nothing() {
    if skip_without_unshare(
        "incident_host_is_provisioned_exposed_and_labelled_and_a_reboot_downloads_nothing",
    ) {
        return;
    }
    let bytes = deb();
    let sha = bundle::sha256_hex(&bytes);
    let server = Server::start(bytes);
    let node = Node::incident(Some(&server));
    let api = FakeApi::start(
        &node.api_socket(),
        json!({"kubernetes": {"node-labels": {"karpenter.sh/nodepool": "gpu"},
                               "node-taints": {"karpenter.sh/unregistered": [":NoExecute"]}}}),
        ApiFault::None,
    );
    let policy = policy(&server.url("/dcgm.deb"), &sha, "taint", 60);

    let booted = node.boot(&policy);
    assert_eq!(booted.code(), Some(0), "{}", booted.stderr());
    let report = &booted.report;
    assert_eq!(report["ready"], true, "{report:#}");
    assert_eq!(report["verdict"], "ready");
    assert_eq!(report["provision"]["outcome"], "succeeded");
    assert_eq!(report["initial_check"]["verdict"], "dcgm-missing");
    assert_eq!(report["labels"]["accelready.io/dcgm"], "provisioned");
    assert_eq!(report["labels"]["accelready.io/driver"], "ready");
    assert_eq!(report["taint"], Value::Null);
    // Installed on the host's /var, exposed read-only under the host's /mnt.
    assert!(node
        .host_path("/var/lib/accelready/dcgm/current/lib/libdcgm.so.4")
        .exists());
    assert_eq!(
        booted.fact("host_sees_dcgm"),
        Some("yes"),
        "{:?}",
        booted.facts
    );
    let options = booted.fact("mount_options").unwrap_or_default();
    assert!(
        options.split(',').any(|o| o == "ro"),
        "mount options {options:?}"
    );
    assert_eq!(booted.fact("exposed_writable"), Some("no"));
    // The API got our labels in one transaction; other keys untouched.
    let (labels, taints) = node_settings(&api);
    assert_eq!(labels["accelready.io/dcgm"], "provisioned");
    assert_eq!(labels["accelready.io/driver"], "ready");
    assert_eq!(labels["karpenter.sh/nodepool"], "gpu");
    assert_eq!(taints, json!({"karpenter.sh/unregistered": [":NoExecute"]}));
    let methods: Vec<String> = api
        .requests()
        .iter()
        .map(|r| format!("{} {}", r.method, r.uri))
        .collect();
    assert_eq!(
        methods,
        [
            "GET /settings",
            "PATCH /settings?tx=accelready",
            "POST /tx/commit_and_apply?tx=accelready"
        ]
    );
    // The report is on the host too.
    let written: Value = serde_json::from_slice(
        &fs::read(node.host_path("/var/lib/accelready/report.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(written["labels"], report["labels"]);

    // Reboot: the mount is gone with the namespace; the install is verified
    // and exposed again, and nothing is downloaded.
    let again = node.boot(&policy);
    assert_eq!(again.code(), Some(0), "{}", again.stderr());
    assert_eq!(again.report["labels"]["accelready.io/dcgm"], "provisioned");
    assert_eq!(again.report["provision"]["report"]["cache_hit"], true);
    assert_eq!(again.fact("host_sees_dcgm"), Some("yes"));
    assert_eq!(server.requests().len(), 1, "a reboot must not download");
    let previous: Value = serde_json::from_slice(
        &fs::read(node.host_path("/var/lib/accelready/report.prev.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(previous["provision"]["report"]["cache_hit"], false);
}

#[test]
fn bundle_server_down_labels_missing_and_taints_and_fail_boot_exits_non_zero() {
    if skip_without_unshare(
        "bundle_server_down_labels_missing_and_taints_and_fail_boot_exits_non_zero",
    ) {
        return;
    }
    let url = dead_url();
    let sha = "a".repeat(64);
    let node = Node::incident(None);
    let api = FakeApi::start(
        &node.api_socket(),
        json!({"kubernetes": {"node-taints": {"dedicated": ["gpu:NoSchedule"]}}}),
        ApiFault::None,
    );

    let booted = node.boot(&policy(&url, &sha, "taint", 4));
    assert_eq!(booted.code(), Some(0), "taint policy never fails the boot");
    assert_eq!(booted.report["ready"], false);
    assert_eq!(booted.report["provision"]["outcome"], "failed");
    assert_eq!(
        booted.report["taint"],
        "accelready.io/dcgm-unready:NoSchedule"
    );
    let (labels, taints) = node_settings(&api);
    assert_eq!(labels["accelready.io/dcgm"], "missing");
    assert_eq!(labels["accelready.io/driver"], "ready");
    assert_eq!(
        taints,
        json!({"dedicated": ["gpu:NoSchedule"], "accelready.io/dcgm-unready": [":NoSchedule"]})
    );
    assert!(!node.host_path("/var/lib/accelready/dcgm/current").exists());

    let failing = node.boot(&policy(&url, &sha, "fail-boot", 4));
    assert_eq!(
        failing.code(),
        Some(10),
        "fail-boot exits like check: dcgm-missing"
    );
    assert_eq!(failing.report["exit_code"], 10);
}

#[test]
fn a_wrong_digest_installs_nothing_and_says_so() {
    if skip_without_unshare("a_wrong_digest_installs_nothing_and_says_so") {
        return;
    }
    let server = Server::start(deb());
    let node = Node::incident(Some(&server));
    let api = FakeApi::start(&node.api_socket(), json!({}), ApiFault::None);
    let wrong = "0".repeat(64);

    let booted = node.boot(&policy(&server.url("/dcgm.deb"), &wrong, "label", 30));
    assert_eq!(booted.code(), Some(0));
    assert_eq!(booted.report["labels"]["accelready.io/dcgm"], "missing");
    let error = booted.report["provision"]["error"]
        .as_str()
        .unwrap_or_default();
    assert!(error.contains("sha256 mismatch"), "{error}");
    assert!(
        booted.stderr().contains("sha256 mismatch"),
        "{}",
        booted.stderr()
    );
    assert!(!node.host_path("/var/lib/accelready/dcgm/current").exists());
    assert_eq!(booted.fact("host_sees_dcgm"), Some("no"));
    assert_eq!(node_settings(&api).0["accelready.io/dcgm"], "missing");
}

#[test]
fn without_the_api_socket_the_report_is_still_written() {
    if skip_without_unshare("without_the_api_socket_the_report_is_still_written") {
        return;
    }
    let bytes = deb();
    let sha = bundle::sha256_hex(&bytes);
    let server = Server::start(bytes);
    let node = Node::incident(Some(&server));

    let booted = node.boot(&policy(&server.url("/dcgm.deb"), &sha, "taint", 30));
    assert_eq!(booted.code(), Some(0));
    assert_eq!(booted.report["api"]["outcome"], "failed");
    let written: Value = serde_json::from_slice(
        &fs::read(node.host_path("/var/lib/accelready/report.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(written["labels"]["accelready.io/dcgm"], "provisioned");
    assert!(written["api"]["error"]
        .as_str()
        .unwrap()
        .contains("api.sock"));
}

#[test]
fn a_stalled_download_is_cut_by_the_deadline() {
    if skip_without_unshare("a_stalled_download_is_cut_by_the_deadline") {
        return;
    }
    let bytes = deb();
    let sha = bundle::sha256_hex(&bytes);
    let server = Server::start(bytes);
    server.script([Fault::Stall(Duration::from_secs(120))]);
    let node = Node::incident(Some(&server));
    let api = FakeApi::start(&node.api_socket(), json!({}), ApiFault::None);

    // The per-read timeout (30 s) is longer than the whole deadline.
    let booted = node.boot(&policy(&server.url("/dcgm.deb"), &sha, "taint", 3));
    assert!(
        booted.elapsed < Duration::from_secs(5),
        "boot took {:?} with a 3 s deadline",
        booted.elapsed
    );
    assert_eq!(booted.code(), Some(0));
    assert_eq!(booted.report["deadline_hit"], true);
    assert_eq!(booted.report["labels"]["accelready.io/dcgm"], "missing");
    // The verdict was still recorded before the deadline.
    assert_eq!(
        node_settings(&api).1["accelready.io/dcgm-unready"],
        json!([":NoSchedule"])
    );
}

/// A policy for the incident's node that takes DCGM from the image.
fn image_policy(sha256: &str) -> String {
    format!(
        r#"[bootstrap]
image = "123456789012.dkr.ecr.us-west-2.amazonaws.com/accelready@sha256:{}"

[dcgm]
provision = "if-missing"
with-hostengine = true

[dcgm.bundle.aarch64]
source = "image"
sha256 = "{sha256}"

[repair]
on-unready = "taint"

[boot]
deadline-seconds = 30
"#,
        "e".repeat(64)
    )
}

/// (inode, mtime) of a host file: unchanged means not copied again.
fn identity(path: &Path) -> (u64, i64) {
    use std::os::unix::fs::MetadataExt;
    let meta = fs::metadata(path).unwrap();
    (meta.ino(), meta.mtime_nsec())
}

#[test]
fn the_image_bundle_installs_with_no_network_at_all_and_a_reboot_copies_nothing() {
    if skip_without_unshare(
        "the_image_bundle_installs_with_no_network_at_all_and_a_reboot_copies_nothing",
    ) {
        return;
    }
    let node = Node::incident(None);
    let sha = node.lay_out_in_image(&deb());
    let api = FakeApi::start(
        &node.api_socket(),
        json!({"kubernetes": {"node-labels": {"karpenter.sh/nodepool": "gpu"}}}),
        ApiFault::None,
    );

    let booted = node.boot_in(&image_policy(&sha), Network::None);
    assert_eq!(booted.interfaces, ["lo"], "boot saw a network");
    assert_eq!(booted.code(), Some(0), "{}", booted.stderr());
    let report = &booted.report;
    assert_eq!(report["ready"], true, "{report:#}");
    assert_eq!(report["initial_check"]["verdict"], "dcgm-missing");
    assert_eq!(report["provision"]["outcome"], "succeeded");
    let provisioned = &report["provision"]["report"];
    assert_eq!(provisioned["source"], "image");
    assert_eq!(provisioned["image_dir"], "/dcgm");
    assert_eq!(provisioned["cache_hit"], false);
    assert_eq!(report["labels"]["accelready.io/dcgm"], "provisioned");
    assert_eq!(report["taint"], Value::Null);
    assert_eq!(node_settings(&api).0["accelready.io/dcgm"], "provisioned");
    // Installed on the host exactly as the image carries it, and exposed
    // read-only to the host.
    let installed = node.host_path(&format!("/var/lib/accelready/dcgm/{sha}"));
    let image = node.container_root().join("dcgm").join(&sha);
    for file in [
        "lib/libdcgm.so.4.6.1",
        "bin/nv-hostengine",
        ".accelready.json",
    ] {
        assert_eq!(
            fs::read(installed.join(file)).unwrap(),
            fs::read(image.join(file)).unwrap(),
            "{file}"
        );
    }
    assert_eq!(
        fs::read_link(node.host_path("/var/lib/accelready/dcgm/current")).unwrap(),
        Path::new(&sha)
    );
    assert_eq!(
        booted.fact("host_sees_dcgm"),
        Some("yes"),
        "{:?}",
        booted.facts
    );
    let options = booted.fact("mount_options").unwrap_or_default();
    assert!(options.split(',').any(|o| o == "ro"), "{options:?}");
    assert_eq!(booted.fact("exposed_writable"), Some("no"));

    // Reboot: verified where it is, exposed again, nothing copied.
    let before = identity(&installed.join("lib/libdcgm.so.4.6.1"));
    let again = node.boot_in(&image_policy(&sha), Network::None);
    assert_eq!(again.code(), Some(0), "{}", again.stderr());
    assert_eq!(again.report["provision"]["report"]["cache_hit"], true);
    assert_eq!(again.report["labels"]["accelready.io/dcgm"], "provisioned");
    assert_eq!(again.fact("host_sees_dcgm"), Some("yes"));
    assert_eq!(identity(&installed.join("lib/libdcgm.so.4.6.1")), before);
}

#[test]
fn an_image_with_another_bundle_or_none_installs_nothing_and_names_both_digests() {
    if skip_without_unshare(
        "an_image_with_another_bundle_or_none_installs_nothing_and_names_both_digests",
    ) {
        return;
    }
    let node = Node::incident(None);
    let api = FakeApi::start(&node.api_socket(), json!({}), ApiFault::None);
    let pinned = "1".repeat(64);

    let booted = node.boot_in(&image_policy(&pinned), Network::None);
    assert_eq!(booted.code(), Some(0), "{}", booted.stderr());
    let error = booted.report["provision"]["error"]
        .as_str()
        .unwrap_or_default();
    assert!(
        error.contains("the image carries no DCGM bundle at '/dcgm' (found: none)")
            && error.contains(&pinned),
        "{error}"
    );

    let carried = node.lay_out_in_image(&deb());
    let booted = node.boot_in(&image_policy(&pinned), Network::None);
    assert_eq!(booted.code(), Some(0), "{}", booted.stderr());
    assert_eq!(booted.report["ready"], false);
    assert_eq!(booted.report["provision"]["outcome"], "failed");
    let error = booted.report["provision"]["error"]
        .as_str()
        .unwrap_or_default();
    assert!(
        error.contains(&format!("the image carries DCGM bundle sha256 {carried}"))
            && error.contains(&format!("the policy pins bundle sha256 {pinned}")),
        "{error}"
    );
    assert!(booted.stderr().contains(&carried), "{}", booted.stderr());
    assert_eq!(booted.report["labels"]["accelready.io/dcgm"], "missing");
    assert_eq!(
        booted.report["taint"],
        "accelready.io/dcgm-unready:NoSchedule"
    );
    assert_eq!(node_settings(&api).0["accelready.io/dcgm"], "missing");
    assert_eq!(booted.fact("host_sees_dcgm"), Some("no"));
    let install_dir = node.host_path("/var/lib/accelready/dcgm");
    let left: Vec<String> = fs::read_dir(&install_dir)
        .map(|d| {
            d.map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    assert!(
        left.iter().all(|name| name == ".lock"),
        "installed: {left:?}"
    );
}

// ---- Flag-driven tests: no root needed ----

fn boot_with_flags(tree: &Path, user_data: &Path, socket: &Path) -> Output {
    Command::new(BIN)
        .arg("--host-root")
        .arg(tree)
        .args(["boot", "--json", "--arch", ARCH.as_str()])
        .arg("--user-data")
        .arg(user_data)
        .arg("--api-socket")
        .arg(socket)
        .env_remove("HTTPS_PROXY")
        .output()
        .unwrap()
}

#[test]
fn a_missing_or_invalid_policy_is_a_configuration_error() {
    let tree = HostTree::bottlerocket_nvidia(ARCH);
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("api.sock");
    let api = FakeApi::start(&socket, json!({}), ApiFault::None);

    let missing = boot_with_flags(tree.root(), &dir.path().join("absent"), &socket);
    assert_eq!(missing.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("absent"));

    let invalid = dir.path().join("user-data");
    fs::write(&invalid, "[dcgm]\nprovison = \"never\"\n").unwrap();
    let output = boot_with_flags(tree.root(), &invalid, &socket);
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("provison"), "{stderr}");
    assert!(
        api.requests().is_empty(),
        "an invalid policy must not touch the node"
    );
}

#[test]
fn label_only_policy_records_the_incident_verdict_without_provisioning() {
    let tree = HostTree::bottlerocket_nvidia(ARCH);
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("api.sock");
    let api = FakeApi::start(&socket, json!({}), ApiFault::None);
    let user_data = dir.path().join("user-data");
    // The built-in policy: provision = "never", on-unready = "label".
    let builtin = fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/userdata/default.toml"
    ))
    .unwrap();
    fs::write(&user_data, builtin).unwrap();

    let output = boot_with_flags(tree.root(), &user_data, &socket);
    assert_eq!(output.status.code(), Some(0));
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(report["ready"], false);
    assert_eq!(report["provision"]["outcome"], "not-needed");
    assert_eq!(report["taint"], Value::Null);
    assert_eq!(
        api.settings()["kubernetes"]["node-labels"]["accelready.io/dcgm"],
        "missing"
    );
    assert!(api.settings()["kubernetes"].get("node-taints").is_none());
    assert!(tree.root().join("var/lib/accelready/report.json").exists());
}

#[test]
fn a_hung_api_does_not_hang_the_boot() {
    let tree = HostTree::bottlerocket_nvidia(ARCH).with_dcgm4();
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("api.sock");
    let _api = FakeApi::start(&socket, json!({}), ApiFault::Hang);
    let user_data = dir.path().join("user-data");
    fs::write(&user_data, "[boot]\ndeadline-seconds = 2\n").unwrap();

    let started = Instant::now();
    let output = boot_with_flags(tree.root(), &user_data, &socket);
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "took {:?}",
        started.elapsed()
    );
    assert_eq!(output.status.code(), Some(0));
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(report["ready"], true, "{report:#}");
    assert_eq!(report["api"]["outcome"], "failed");
    assert_eq!(report["deadline_hit"], true);
}
