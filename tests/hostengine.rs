//! `accelready hostengine` end to end, the way Bottlerocket runs a
//! superpowered host container: the built binary started with **no
//! subcommand** in a private mount namespace, chrooted into a container root
//! (`common::sandbox::container_script`) where `/.bottlerocket/rootfs` is the fixture host tree (read-only on top,
//! its `var` writable, its `mnt` shared), the policy at
//! `/.bottlerocket/host-containers/current/user-data`, and a real `/proc`.
//! The engine and dcgmi are the static fakes of `common::fake_dcgm`
//! (what they can and cannot show is written there), installed as a real
//! bundle by `accelready provision` from the loopback HTTPS server. Every
//! engine listens on a free loopback port, never 5555.
//!
//! The container tests need root (CI runs as root) and are skipped with the
//! reason printed otherwise; the flag-driven tests at the end run anywhere.
//!
//! `cargo test --test hostengine -- --ignored --nocapture measure` prints
//! the supervisor's CPU and memory while idle and running, and the restart
//! latency after a kill (median of 20); with `ACCELREADY_TEST_BIN` set to
//! the image's static release binary it measures that instead of the test
//! build.

mod common;

use std::fs;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::{Duration, Instant};

use accelready::Arch;
use common::bundle::{self, Compression, Kind, Member};
use common::elf;
use common::fake_dcgm::{self, Start};
use common::host::HostTree;
use common::https::Server;
use common::sandbox::{container_script, skip_without_unshare};
use nix::sys::signal::Signal;
use nix::unistd::Pid;
use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_accelready");
/// The fakes run natively, so the node is this machine's architecture.
const ARCH: Arch = Arch::X86_64;
const STATUS: &str = "/var/lib/accelready/hostengine.json";
const INSTALL_DIR: &str = "/var/lib/accelready/dcgm";
const CA_HOST_PATH: &str = "/etc/accelready/mirror-ca.pem";

/// A loopback port nobody listens on (bound and released).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn accepts(port: u16) -> bool {
    TcpStream::connect_timeout(
        &SocketAddr::from(([127, 0, 0, 1], port)),
        Duration::from_millis(500),
    )
    .is_ok()
}

fn process_exists(pid: u32) -> bool {
    // A zombie still has /proc/<pid>; its state says it is gone.
    fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|stat| {
            let state = stat.rsplit(')').next().unwrap_or("").trim_start();
            !state.starts_with('Z')
        })
        .unwrap_or(false)
}

/// The fakes, or `None` after saying why the test cannot run here.
fn fakes(test: &str) -> Option<(Vec<u8>, Vec<u8>)> {
    match (fake_dcgm::engine(), fake_dcgm::dcgmi()) {
        (Ok(engine), Ok(dcgmi)) => Some((engine, dcgmi)),
        (Err(why), _) | (_, Err(why)) => {
            eprintln!("skipping {test}: cannot build the fake nv-hostengine/dcgmi: {why}");
            None
        }
    }
}

/// A DCGM 4 bundle in NVIDIA's .deb layout whose nv-hostengine (and dcgmi,
/// when given) are the fakes.
fn bundle_deb(engine: &[u8], dcgmi: Option<&[u8]>) -> Vec<u8> {
    let lib = format!("usr/lib/{}", ARCH.gnu_triplet());
    let exe = |path: &str, data: &[u8]| Member {
        path: path.into(),
        kind: Kind::File {
            data: data.to_vec(),
            mode: 0o755,
        },
    };
    let mut members = vec![
        bundle::file(
            &format!("{lib}/libdcgm.so.4.6.1"),
            elf::shared_object(ARCH, "libdcgm.so.4", &["libnvidia-ml.so.1"]),
        ),
        bundle::link(&format!("{lib}/libdcgm.so.4"), "libdcgm.so.4.6.1"),
        exe("usr/bin/nv-hostengine", engine),
    ];
    if let Some(dcgmi) = dcgmi {
        members.push(exe("usr/bin/dcgmi", dcgmi));
    }
    bundle::deb(ARCH, &members, Compression::Gzip)
}

/// A policy that wants an engine on this (x86_64) node, on `port`.
fn policy(port: u16, dcgm: &str) -> String {
    format!(
        r#"[bootstrap]
image = "123456789012.dkr.ecr.us-west-2.amazonaws.com/accelready:0.1.0"

{dcgm}

[hostengine]
run = "auto"
architectures = ["x86_64"]
port = {port}
"#
    )
}

/// A pinned bundle the host container may provision itself.
fn provisioning(server: &Server, sha: &str) -> String {
    format!(
        "[dcgm]\nprovision = \"if-missing\"\nca-bundle = \"{CA_HOST_PATH}\"\n\n[dcgm.bundle.x86_64]\nurl = \"{}\"\nsha256 = \"{sha}\"",
        server.url("/dcgm.deb")
    )
}

/// The engines the tests of this binary start are all `nv-hostengine`
/// processes in one PID namespace. A test that gives the supervisor this
/// machine's `/proc` would see the other tests' engines as foreign ones: it
/// runs alone (a write lock), the others together (read locks).
static ENGINES: RwLock<()> = RwLock::new(());

enum Engines {
    Together(#[allow(dead_code)] RwLockReadGuard<'static, ()>),
    Alone(#[allow(dead_code)] RwLockWriteGuard<'static, ()>),
}

impl Engines {
    fn take(alone: bool) -> Engines {
        if alone {
            Engines::Alone(ENGINES.write().unwrap_or_else(|e| e.into_inner()))
        } else {
            Engines::Together(ENGINES.read().unwrap_or_else(|e| e.into_inner()))
        }
    }
}

/// One node: the host tree, a container root, and a port for its engine.
struct Node {
    tree: HostTree,
    scratch: tempfile::TempDir,
    port: u16,
    _engines: Engines,
}

impl Node {
    fn new(alone: bool) -> Node {
        let tree = HostTree::bottlerocket_nvidia(ARCH)
            .dir("/var/log")
            .dir("/var/lib")
            .dir("/mnt")
            .dir("/etc");
        Node {
            tree,
            scratch: tempfile::tempdir().unwrap(),
            port: free_port(),
            _engines: Engines::take(alone),
        }
    }

    fn host_path(&self, path: &str) -> PathBuf {
        self.tree.join(path)
    }

    /// Trust the server's CA at the policy's host path.
    fn trust(&self, server: &Server) {
        let ca = self.host_path(CA_HOST_PATH);
        fs::create_dir_all(ca.parent().unwrap()).unwrap();
        fs::copy(server.ca_file(), ca).unwrap();
    }

    /// Installs a bundle the way boot does (`provision --with-hostengine`).
    fn install(&self, server: &Server, sha: &str) {
        let output = Command::new(BIN)
            .arg("--host-root")
            .arg(self.tree.root())
            .args(["provision", "--json", "--no-expose", "--with-hostengine"])
            .args(["--arch", ARCH.as_str(), "--sha256", sha, "--url"])
            .arg(server.url("/dcgm.deb"))
            .arg("--ca-bundle")
            .arg(server.ca_file())
            .env_remove("HTTPS_PROXY")
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "provision failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }

    /// What the fake engine reads at start.
    fn configure_engine(&self, words: &str) {
        fs::write(self.host_path(fake_dcgm::ENGINE_CONF), words).unwrap();
    }

    fn status(&self) -> Option<Value> {
        let bytes = fs::read(self.host_path(STATUS)).ok()?;
        serde_json::from_slice(&bytes).ok()
    }

    fn starts(&self) -> Vec<Start> {
        fake_dcgm::starts(
            &fs::read_to_string(self.host_path(fake_dcgm::ENGINE_LOG)).unwrap_or_default(),
        )
    }

    fn engine_log(&self) -> String {
        fs::read_to_string(self.host_path(fake_dcgm::ENGINE_LOG)).unwrap_or_default()
    }

    /// Starts the image's entrypoint as a superpowered host container would
    /// (see the module docs), with `env` (timings, `ACCELREADY_HOST_PROC`).
    fn start(&self, policy: &str, env: &[(&str, &str)]) -> Supervisor {
        // A supervisor killed by a test leaves its last status behind.
        let _ = fs::remove_file(self.host_path(STATUS));
        let out = self.scratch.path().join("out");
        let script = container_script(
            &self.scratch.path().join("container"),
            self.tree.root(),
            &out,
            "/.bottlerocket/host-containers/current",
            policy,
        ) + "exec chroot \"$R\" /accelready\n";
        let mut command = Command::new("unshare");
        command
            .args(["--mount", "--propagation", "private", "sh", "-c", &script])
            .env_remove("HTTPS_PROXY")
            .env_remove("https_proxy")
            .env_remove("RUST_LOG")
            .env("ACCELREADY_HOSTENGINE_RECHECK_SECONDS", "1")
            .stdin(Stdio::null())
            .stdout(fs::File::create(out.join("stdout")).unwrap())
            .stderr(fs::File::create(out.join("stderr")).unwrap());
        for (key, value) in env {
            command.env(key, value);
        }
        Supervisor {
            child: command.spawn().unwrap(),
            out,
        }
    }
}

/// The running `accelready` (the namespace script `exec`s into it, so this
/// is its pid). Killed when dropped; its engine dies with it (PDEATHSIG).
struct Supervisor {
    child: Child,
    out: PathBuf,
}

impl Drop for Supervisor {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Supervisor {
    fn stderr(&self) -> String {
        fs::read_to_string(self.out.join("stderr")).unwrap_or_default()
    }

    fn running(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }

    /// Polls the status until `done` holds; panics with what is known after
    /// `timeout`.
    fn wait_for(
        &mut self,
        node: &Node,
        what: &str,
        timeout: Duration,
        done: impl Fn(&Value) -> bool,
    ) -> Value {
        let started = Instant::now();
        loop {
            if let Some(status) = node.status() {
                if done(&status) {
                    return status;
                }
            }
            assert!(
                self.running(),
                "the supervisor exited while waiting for {what}: {:?}\n{}",
                self.child.try_wait(),
                self.stderr()
            );
            assert!(
                started.elapsed() < timeout,
                "no {what} within {timeout:?}; status: {:#}\nstderr:\n{}",
                node.status().unwrap_or(Value::Null),
                self.stderr()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn wait_for_state(&mut self, node: &Node, state: &str, timeout: Duration) -> Value {
        self.wait_for(node, state, timeout, |s| s["state"] == state)
    }

    /// SIGTERM, then the exit status and how long the exit took.
    fn terminate(&mut self) -> (ExitStatus, Duration) {
        let started = Instant::now();
        send(self.child.id(), Signal::SIGTERM);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return (status, started.elapsed());
            }
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "still running 30 s after SIGTERM\n{}",
                self.stderr()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// kill(2), directly: spawning `kill` can take longer under load than the
/// restarts being timed.
fn send(pid: u32, signal: Signal) {
    nix::sys::signal::kill(Pid::from_raw(pid as i32), signal)
        .unwrap_or_else(|e| panic!("kill -{signal} {pid}: {e}"));
}

fn pid_of(status: &Value) -> u32 {
    status["pid"].as_u64().expect("an engine pid") as u32
}

/// A node and the server of the fake bundle (its sha256 too), nothing
/// installed; `None` after saying why when the test cannot run here.
fn fresh_node(test: &str, with_dcgmi: bool) -> Option<(Node, Server, String)> {
    fresh_node_with(test, with_dcgmi, false)
}

fn fresh_node_with(test: &str, with_dcgmi: bool, alone: bool) -> Option<(Node, Server, String)> {
    if skip_without_unshare(test) {
        return None;
    }
    let (engine, dcgmi) = fakes(test)?;
    let deb = bundle_deb(&engine, with_dcgmi.then_some(dcgmi.as_slice()));
    let sha = bundle::sha256_hex(&deb);
    Some((Node::new(alone), Server::start(deb), sha))
}

/// A node with the fake bundle installed, ready to start; the server is
/// returned so that it lives as long as the test.
fn installed_node(test: &str, with_dcgmi: bool) -> Option<(Node, Server)> {
    installed_node_with(test, with_dcgmi, false)
}

/// [`installed_node`], with no other test's engine running meanwhile
/// (for tests that show the supervisor this machine's `/proc`).
fn installed_node_with(test: &str, with_dcgmi: bool, alone: bool) -> Option<(Node, Server)> {
    let (node, server, sha) = fresh_node_with(test, with_dcgmi, alone)?;
    node.install(&server, &sha);
    Some((node, server))
}

#[test]
fn the_engine_runs_against_the_host_with_the_right_command_line_and_stops_on_sigterm() {
    let test = "the_engine_runs_against_the_host_with_the_right_command_line_and_stops_on_sigterm";
    let Some((node, _server)) = installed_node(test, true) else {
        return;
    };
    let mut sup = node.start(&policy(node.port, ""), &[]);
    let status = sup.wait_for_state(&node, "running", Duration::from_secs(15));

    // Started once, with the documented command line and library path. Its
    // log landed in the tree's /var/log, and it counted the tree's one
    // /dev/nvidia0: it ran chrooted into the host root.
    let starts = node.starts();
    assert_eq!(starts.len(), 1, "{starts:?}");
    let start = &starts[0];
    let sha = fs::read_link(node.host_path(&format!("{INSTALL_DIR}/current")))
        .unwrap()
        .to_string_lossy()
        .into_owned();
    let engine = format!("{INSTALL_DIR}/{sha}/bin/nv-hostengine");
    let port = node.port.to_string();
    assert_eq!(
        start.argv,
        [
            engine.as_str(),
            "-n",
            "-f",
            "-",
            "-b",
            "127.0.0.1",
            "-p",
            &port
        ]
    );
    assert_eq!(
        start.ld_library_path,
        format!("{INSTALL_DIR}/{sha}/lib:/usr/lib/nvidia/tesla")
    );
    assert_eq!(pid_of(&status), start.pid);
    assert!(accepts(node.port), "nothing listens on {}", node.port);
    // The status says what runs, and that the engine sees the node's GPU.
    assert_eq!(status["engine"]["argv"][0], engine.as_str());
    assert_eq!(status["engine"]["bundle_sha256"], sha.as_str());
    assert_eq!(status["address"], format!("127.0.0.1:{}", node.port));
    assert_eq!(
        status["gpus"],
        serde_json::json!({"status": "match", "engine": 1, "device_nodes": 1}),
        "{status:#}"
    );
    assert_eq!(status["restarts"], 0);
    // dcgmi asked our engine, with the same library path.
    let dcgmi_log = fs::read_to_string(node.host_path("/var/log/fake-dcgmi.log")).unwrap();
    assert!(
        dcgmi_log.contains(&format!(
            "argv={INSTALL_DIR}/{sha}/bin/dcgmi\x1fdiscovery\x1f-l\x1f--host\x1f127.0.0.1:{}",
            node.port
        )),
        "{dcgmi_log}"
    );

    // SIGTERM: the engine gets SIGTERM, the supervisor exits 0, well within
    // host-ctr's 20 s.
    let (exit, took) = sup.terminate();
    assert_eq!(exit.code(), Some(0), "{}", sup.stderr());
    assert!(took < Duration::from_secs(20), "took {took:?}");
    assert!(
        !process_exists(start.pid),
        "the engine outlived the supervisor"
    );
    assert!(!accepts(node.port));
    assert!(
        node.engine_log()
            .contains(&format!("term pid={}", start.pid)),
        "{}",
        node.engine_log()
    );
    let status = node.status().unwrap();
    assert_eq!(status["state"], "stopped");
    assert_eq!(status["pid"], Value::Null);
    // Every transition was logged.
    let stderr = sup.stderr();
    for state in ["starting", "running", "stopped"] {
        assert!(
            stderr.contains(&format!("state=\"{state}\"")),
            "{state}: {stderr}"
        );
    }
}

#[test]
fn a_killed_engine_is_back_within_two_seconds() {
    let test = "a_killed_engine_is_back_within_two_seconds";
    let Some((node, _server)) = installed_node(test, true) else {
        return;
    };
    let mut sup = node.start(&policy(node.port, ""), &[]);
    let first = pid_of(&sup.wait_for_state(&node, "running", Duration::from_secs(15)));

    let killed = Instant::now();
    send(first, Signal::SIGKILL);
    let status = sup.wait_for(&node, "a new engine", Duration::from_secs(10), |s| {
        s["state"] == "running" && s["pid"].as_u64().is_some_and(|p| p as u32 != first)
    });
    let back = killed.elapsed();
    assert!(accepts(node.port));
    assert!(
        back < Duration::from_secs(2),
        "the engine was back after {back:?}"
    );
    assert_eq!(status["restarts"], 1);
    assert_eq!(status["last_exit"]["signal"], 9, "{status:#}");
    assert_eq!(node.starts().len(), 2);
}

#[test]
fn a_crashing_engine_backs_off_into_crash_loop_and_recovers() {
    let test = "a_crashing_engine_backs_off_into_crash_loop_and_recovers";
    let Some((node, _server)) = installed_node(test, true) else {
        return;
    };
    node.configure_engine("crash\n");
    let mut sup = node.start(
        &policy(node.port, ""),
        &[
            ("ACCELREADY_HOSTENGINE_RESTART_DELAY_SECONDS", "0.1"),
            ("ACCELREADY_HOSTENGINE_BACKOFF_CAP_SECONDS", "0.8"),
            ("ACCELREADY_HOSTENGINE_STABLE_AFTER_SECONDS", "1"),
        ],
    );
    let status = sup.wait_for(
        &node,
        "crash-loop after 6 restarts",
        Duration::from_secs(20),
        |s| s["state"] == "crash-loop" && s["restarts"].as_u64() >= Some(6),
    );
    assert_eq!(status["last_exit"]["code"], 3, "{status:#}");
    assert!(status["next_restart"].is_string(), "{status:#}");
    assert_eq!(status["pid"], Value::Null);
    assert!(
        sup.stderr().contains("failed 3 times in a row"),
        "{}",
        sup.stderr()
    );

    // Backoff: 0.1, 0.2, 0.4, 0.8, 0.8 s between starts (plus start-up).
    let starts = node.starts();
    let gaps: Vec<u64> = starts.windows(2).map(|w| w[1].ms - w[0].ms).collect();
    assert!(gaps.len() >= 5, "{gaps:?}");
    for (gap, (low, high)) in
        gaps.iter()
            .zip([(90, 700), (180, 800), (380, 1000), (780, 1500), (780, 1500)])
    {
        assert!((low..high).contains(gap), "gaps between starts {gaps:?}");
    }

    // Fixed: the next start runs, and once it has stayed up the failure
    // count starts again.
    node.configure_engine("");
    let status = sup.wait_for(&node, "recovery", Duration::from_secs(10), |s| {
        s["state"] == "running" && s["consecutive_failures"] == 0
    });
    assert!(status["restarts"].as_u64() >= Some(6));
    assert!(accepts(node.port));
}

#[test]
fn an_engine_that_never_listens_is_stopped_and_started_again() {
    let test = "an_engine_that_never_listens_is_stopped_and_started_again";
    let Some((node, _server)) = installed_node(test, true) else {
        return;
    };
    node.configure_engine("bind-late 60\n");
    let mut sup = node.start(
        &policy(node.port, ""),
        &[("ACCELREADY_HOSTENGINE_READY_TIMEOUT_SECONDS", "1")],
    );
    let status = sup.wait_for(&node, "a restart", Duration::from_secs(10), |s| {
        s["restarts"].as_u64() >= Some(1)
    });
    let reason = status["last_exit"]["reason"].as_str().unwrap();
    assert!(reason.contains("not accepting connections"), "{status:#}");
    let first = node.starts()[0].pid;
    assert!(!process_exists(first), "the silent engine was not stopped");
    // Binding late (here: 1 s) is fine within the ready timeout.
    node.configure_engine("bind-late 1\n");
    sup.wait_for_state(&node, "running", Duration::from_secs(10));
}

#[test]
fn a_taken_port_means_no_engine_and_idle_other_engine() {
    let test = "a_taken_port_means_no_engine_and_idle_other_engine";
    let Some((node, _server)) = installed_node(test, true) else {
        return;
    };
    let squatter = TcpListener::bind(("127.0.0.1", node.port)).unwrap();
    let mut sup = node.start(&policy(node.port, ""), &[]);
    let status = sup.wait_for_state(&node, "idle-other-engine", Duration::from_secs(10));
    assert_eq!(status["other_engine"]["port_listening"], true, "{status:#}");
    assert_eq!(status["pid"], Value::Null);
    // It stays idle (alive, re-checking), starting nothing.
    std::thread::sleep(Duration::from_millis(2500));
    assert!(sup.running());
    assert!(node.starts().is_empty(), "{:?}", node.starts());
    assert_eq!(node.status().unwrap()["state"], "idle-other-engine");
    // The other engine goes away: ours starts at the next look.
    drop(squatter);
    sup.wait_for_state(&node, "running", Duration::from_secs(10));
    assert_eq!(node.starts().len(), 1);
}

/// A copy of the fake engine running as an `nv-hostengine` process that is
/// not ours (chrooted into its own directory, so that its log stays there).
/// Killed when dropped, also when a test fails.
struct Foreign(Child);

impl Foreign {
    fn start(engine: &[u8], dir: &Path, port: u16) -> Foreign {
        use std::os::unix::fs::PermissionsExt;
        fs::create_dir_all(dir.join("var/log")).unwrap();
        let path = dir.join("nv-hostengine");
        fs::write(&path, engine).unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).unwrap();
        Foreign(
            Command::new("chroot")
                .arg(dir)
                .args(["/nv-hostengine", "-n", "-b", "127.0.0.1", "-p"])
                .arg(port.to_string())
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap(),
        )
    }

    fn pid(&self) -> u32 {
        self.0.id()
    }
}

impl Drop for Foreign {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn a_foreign_nv_hostengine_process_keeps_ours_off_and_stops_ours_when_it_appears() {
    let test = "a_foreign_nv_hostengine_process_keeps_ours_off_and_stops_ours_when_it_appears";
    let Some((node, _server)) = installed_node_with(test, true, true) else {
        return;
    };
    let (engine, _) = fakes(test).unwrap();
    let env = [("ACCELREADY_HOST_PROC", "/proc")];
    let mut sup = node.start(&policy(node.port, ""), &env);
    let ours = pid_of(&sup.wait_for_state(&node, "running", Duration::from_secs(15)));

    // The chart's dcgm-server appears (on another port: its hostPort hides
    // it from a connect, its process does not).
    let foreign_dir = tempfile::tempdir().unwrap();
    let foreign = Foreign::start(&engine, foreign_dir.path(), free_port());
    let status = sup.wait_for_state(&node, "idle-other-engine", Duration::from_secs(15));
    let pids: Vec<u64> = status["other_engine"]["processes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["pid"].as_u64().unwrap())
        .collect();
    assert_eq!(pids, [u64::from(foreign.pid())], "{status:#}");
    assert_eq!(status["other_engine"]["port_listening"], false);
    assert!(
        !process_exists(ours),
        "ours still runs next to the foreign engine"
    );
    assert!(!accepts(node.port));
    assert!(
        sup.stderr().contains("another nv-hostengine appeared"),
        "{}",
        sup.stderr()
    );
    std::thread::sleep(Duration::from_millis(2500));
    assert_eq!(node.starts().len(), 1, "ours was started again next to it");

    // It goes away: ours comes back.
    drop(foreign);
    sup.wait_for_state(&node, "running", Duration::from_secs(15));
    assert_eq!(node.starts().len(), 2);

    // A foreign engine present from the start: ours never starts.
    drop(sup);
    let before = node.starts().len();
    let _foreign = Foreign::start(&engine, foreign_dir.path(), free_port());
    let mut sup = node.start(&policy(node.port, ""), &env);
    sup.wait_for_state(&node, "idle-other-engine", Duration::from_secs(10));
    std::thread::sleep(Duration::from_millis(2000));
    assert_eq!(node.starts().len(), before);
}

#[test]
fn a_bundle_that_appears_late_is_started() {
    let Some((node, server, sha)) = fresh_node("a_bundle_that_appears_late_is_started", true)
    else {
        return;
    };
    let mut sup = node.start(
        &policy(node.port, ""),
        &[("ACCELREADY_HOSTENGINE_BUNDLE_WAIT_CAP_SECONDS", "0.5")],
    );
    let status = sup.wait_for_state(&node, "waiting-for-bundle", Duration::from_secs(10));
    let reason = status["reason"].as_str().unwrap();
    assert!(reason.contains("no DCGM bundle installed"), "{reason}");
    assert!(reason.contains("dcgm.provision = \"never\""), "{reason}");
    std::thread::sleep(Duration::from_millis(1500));
    assert!(sup.running() && node.starts().is_empty());

    node.install(&server, &sha);
    let status = sup.wait_for_state(&node, "running", Duration::from_secs(10));
    assert_eq!(status["engine"]["bundle_sha256"], sha.as_str());
}

#[test]
fn the_pinned_bundle_is_provisioned_by_the_host_container_itself() {
    let Some((node, server, sha)) = fresh_node(
        "the_pinned_bundle_is_provisioned_by_the_host_container_itself",
        true,
    ) else {
        return;
    };
    node.trust(&server);
    let mut sup = node.start(&policy(node.port, &provisioning(&server, &sha)), &[]);
    let status = sup.wait_for_state(&node, "running", Duration::from_secs(20));
    assert_eq!(status["engine"]["bundle_sha256"], sha.as_str());
    assert_eq!(server.requests().len(), 1);
    assert!(
        sup.stderr()
            .contains("provisioning it myself from https://"),
        "{}",
        sup.stderr()
    );
    let manifest: Value = serde_json::from_slice(
        &fs::read(node.host_path(&format!("{INSTALL_DIR}/{sha}/.accelready.json"))).unwrap(),
    )
    .unwrap();
    assert_eq!(manifest["with_hostengine"], true);
}

/// A pinned bundle that installs but carries no nv-hostengine (a
/// libraries-only package) is waited on with backoff, not provisioned again
/// in a loop that never yields to SIGTERM.
#[test]
fn a_pinned_bundle_without_an_engine_waits_and_still_stops_on_sigterm() {
    let test = "a_pinned_bundle_without_an_engine_waits_and_still_stops_on_sigterm";
    if skip_without_unshare(test) {
        return;
    }
    let lib = format!("usr/lib/{}", ARCH.gnu_triplet());
    let deb = bundle::deb(
        ARCH,
        &[
            bundle::file(
                &format!("{lib}/libdcgm.so.4.6.1"),
                elf::shared_object(ARCH, "libdcgm.so.4", &["libnvidia-ml.so.1"]),
            ),
            bundle::link(&format!("{lib}/libdcgm.so.4"), "libdcgm.so.4.6.1"),
        ],
        Compression::Gzip,
    );
    let sha = bundle::sha256_hex(&deb);
    let (node, server) = (Node::new(false), Server::start(deb));
    node.trust(&server);
    let mut sup = node.start(
        &policy(node.port, &provisioning(&server, &sha)),
        &[("ACCELREADY_HOSTENGINE_BUNDLE_WAIT_CAP_SECONDS", "0.5")],
    );
    let status = sup.wait_for(
        &node,
        "waiting-for-bundle after provisioning",
        Duration::from_secs(20),
        |status| {
            status["state"] == "waiting-for-bundle"
                && status["reason"]
                    .as_str()
                    .is_some_and(|r| r.contains("provisioned the pinned bundle, but"))
        },
    );
    let reason = status["reason"].as_str().unwrap();
    assert!(reason.contains("has no nv-hostengine"), "{reason}");
    std::thread::sleep(Duration::from_millis(1500));
    // Waited with backoff: a handful of looks in 1.5 s, not thousands.
    let looks = sup
        .stderr()
        .matches("provisioned the pinned bundle, but")
        .count();
    assert!((1..=10).contains(&looks), "{looks} looks\n{}", sup.stderr());
    assert!(node.starts().is_empty());
    let (exit, _) = sup.terminate();
    assert!(exit.success(), "{exit:?}\n{}", sup.stderr());
    assert_eq!(node.status().unwrap()["state"], "stopped");
}

#[test]
fn a_gpu_count_mismatch_is_reported_loudly() {
    let test = "a_gpu_count_mismatch_is_reported_loudly";
    let Some((node, _server)) = installed_node(test, true) else {
        return;
    };
    node.configure_engine("gpus 0\n");
    let mut sup = node.start(&policy(node.port, ""), &[]);
    let status = sup.wait_for_state(&node, "running", Duration::from_secs(15));
    assert_eq!(
        status["gpus"],
        serde_json::json!({"status": "mismatch", "engine": 0, "device_nodes": 1}),
        "{status:#}"
    );
    assert!(status["reason"]
        .as_str()
        .unwrap()
        .contains("GPU COUNT MISMATCH"));
    let stderr = sup.stderr();
    assert!(
        stderr.contains("ERROR") && stderr.contains("NvidiaDeviceCountMismatch"),
        "{stderr}"
    );
    // Checked again at every look while it is wrong; fixed, the status says so.
    node.configure_engine("");
    send(pid_of(&status), Signal::SIGKILL);
    sup.wait_for(&node, "a matching count", Duration::from_secs(10), |s| {
        s["gpus"]["status"] == "match"
    });
}

/// Asked again at every look, with the device nodes counted again: one
/// that appears after the engine started ends the mismatch it caused.
#[test]
fn a_device_node_that_appears_late_is_counted_at_the_next_look() {
    let test = "a_device_node_that_appears_late_is_counted_at_the_next_look";
    let Some((node, _server)) = installed_node(test, true) else {
        return;
    };
    node.configure_engine("gpus 2\n");
    let mut sup = node.start(&policy(node.port, ""), &[]);
    let status = sup.wait_for_state(&node, "running", Duration::from_secs(15));
    assert_eq!(status["gpus"]["status"], "mismatch", "{status:#}");
    fs::write(node.host_path("/dev/nvidia1"), "").unwrap();
    let status = sup.wait_for(&node, "a matching count", Duration::from_secs(10), |s| {
        s["gpus"]["status"] == "match"
    });
    assert_eq!(status["gpus"]["device_nodes"], 2, "{status:#}");
    assert_eq!(node.starts().len(), 1, "no restart was needed");
}

/// An engine that answered dcgmi and then stops answering, while its port
/// still takes connections, is taken for hung after three looks and
/// restarted.
#[test]
fn an_engine_that_stops_answering_dcgmi_is_restarted() {
    let test = "an_engine_that_stops_answering_dcgmi_is_restarted";
    let Some((node, _server)) = installed_node(test, true) else {
        return;
    };
    // The first connection is the readiness probe, the second dcgmi's.
    node.configure_engine("hang-after 2\n");
    let mut sup = node.start(
        &policy(node.port, ""),
        &[("ACCELREADY_HOSTENGINE_DCGMI_TIMEOUT_SECONDS", "0.5")],
    );
    let status = sup.wait_for_state(&node, "running", Duration::from_secs(15));
    assert_eq!(status["gpus"]["status"], "match", "{status:#}");
    let status = sup.wait_for(&node, "a restart", Duration::from_secs(20), |s| {
        s["restarts"].as_u64() >= Some(1)
    });
    let reason = status["last_exit"]["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("did not answer dcgmi 3 times in a row"),
        "{status:#}"
    );
    sup.wait_for(
        &node,
        "the engine running again",
        Duration::from_secs(10),
        |s| s["state"] == "running" && s["restarts"].as_u64() >= Some(1),
    );
    assert!(node.starts().len() >= 2);
}

#[test]
fn without_dcgmi_the_gpu_count_is_unverified() {
    let test = "without_dcgmi_the_gpu_count_is_unverified";
    let Some((node, _server)) = installed_node(test, false) else {
        return;
    };
    let mut sup = node.start(&policy(node.port, ""), &[]);
    let status = sup.wait_for_state(&node, "running", Duration::from_secs(15));
    assert_eq!(status["gpus"]["status"], "unverified", "{status:#}");
    assert!(status["reason"]
        .as_str()
        .unwrap()
        .contains("GPU count unverified"));
}

#[test]
fn an_engine_that_ignores_sigterm_is_killed_after_the_grace() {
    let test = "an_engine_that_ignores_sigterm_is_killed_after_the_grace";
    let Some((node, _server)) = installed_node(test, true) else {
        return;
    };
    node.configure_engine("ignore-term\n");
    let mut sup = node.start(
        &policy(node.port, ""),
        &[("ACCELREADY_HOSTENGINE_STOP_GRACE_SECONDS", "1")],
    );
    let pid = pid_of(&sup.wait_for_state(&node, "running", Duration::from_secs(15)));
    let (exit, took) = sup.terminate();
    assert_eq!(exit.code(), Some(0), "{}", sup.stderr());
    assert!(
        (Duration::from_millis(900)..Duration::from_secs(5)).contains(&took),
        "took {took:?}"
    );
    assert!(!process_exists(pid));
    assert!(sup.stderr().contains("SIGKILL"), "{}", sup.stderr());
}

#[test]
fn check_engine_reports_the_engine_without_changing_the_verdict() {
    let test = "check_engine_reports_the_engine_without_changing_the_verdict";
    let Some((node, _server)) = installed_node(test, true) else {
        return;
    };
    let check = |args: &[&str]| {
        let output = Command::new(BIN)
            .arg("--host-root")
            .arg(node.tree.root())
            .args(["check", "--json", "--arch", ARCH.as_str()])
            .args(args)
            .output()
            .unwrap();
        let report: Value = serde_json::from_slice(&output.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&output.stderr)));
        (output.status.code(), report)
    };
    let (code, plain) = check(&[]);
    assert!(plain.get("engine").is_none(), "{plain:#}");
    let address = format!("127.0.0.1:{}", node.port);

    // Nothing listens.
    let (engine_code, report) = check(&["--engine", &address]);
    assert_eq!(engine_code, code);
    assert_eq!(report["verdict"], plain["verdict"]);
    assert_eq!(report["engine"]["address"], address.as_str());
    assert_eq!(report["engine"]["listening"], false);
    assert!(report["engine"].get("gpus").is_none(), "{report:#}");

    // Our engine runs: it is asked with the installed dcgmi.
    let mut sup = node.start(&policy(node.port, ""), &[]);
    sup.wait_for_state(&node, "running", Duration::from_secs(15));
    let (engine_code, report) = check(&["--engine", &address]);
    assert_eq!(engine_code, code);
    assert_eq!(report["engine"]["listening"], true, "{report:#}");
    assert_eq!(report["engine"]["gpus"], 1, "{report:#}");
}

// ---- Flag-driven: no root needed ----

/// `accelready --host-root TREE hostengine ...` started directly.
fn hostengine_with_flags(tree: &Path, user_data: &Path, extra: &[&str]) -> Child {
    Command::new(BIN)
        .arg("--host-root")
        .arg(tree)
        .args([
            "hostengine",
            "--arch",
            ARCH.as_str(),
            "--recheck-seconds",
            "0.2",
        ])
        .arg("--user-data")
        .arg(user_data)
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

#[test]
fn an_x86_64_node_with_an_aarch64_only_policy_stays_idle_not_needed() {
    let tree = HostTree::bottlerocket_nvidia(ARCH);
    let dir = tempfile::tempdir().unwrap();
    let user_data = dir.path().join("user-data");
    // The built-in policy: run = "auto", architectures = ["aarch64"].
    fs::copy(
        concat!(env!("CARGO_MANIFEST_DIR"), "/userdata/default.toml"),
        &user_data,
    )
    .unwrap();
    let mut child = hostengine_with_flags(tree.root(), &user_data, &[]);
    let status_path = tree.join(STATUS);
    let started = Instant::now();
    while !status_path.exists() {
        assert!(started.elapsed() < Duration::from_secs(10), "no status");
        std::thread::sleep(Duration::from_millis(20));
    }
    // Idle, not exiting (systemd would restart it every 45 s).
    std::thread::sleep(Duration::from_millis(1500));
    assert!(
        child.try_wait().unwrap().is_none(),
        "an idle supervisor exited"
    );
    let status: Value = serde_json::from_slice(&fs::read(&status_path).unwrap()).unwrap();
    assert_eq!(status["state"], "idle-not-needed", "{status:#}");
    assert!(status["reason"].as_str().unwrap().contains("x86_64"));
    send(child.id(), Signal::SIGTERM);
    let output = child.wait_with_output().unwrap();
    assert_eq!(output.status.code(), Some(0));
    let status: Value = serde_json::from_slice(&fs::read(&status_path).unwrap()).unwrap();
    assert_eq!(status["state"], "stopped");
}

#[test]
fn a_missing_or_invalid_policy_is_a_configuration_error() {
    let tree = HostTree::bottlerocket_nvidia(ARCH);
    let dir = tempfile::tempdir().unwrap();
    let missing = hostengine_with_flags(tree.root(), &dir.path().join("absent"), &[])
        .wait_with_output()
        .unwrap();
    assert_eq!(missing.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("absent"));
    let invalid = dir.path().join("user-data");
    fs::write(&invalid, "[hostengine]\nport = 0\n").unwrap();
    let output = hostengine_with_flags(tree.root(), &invalid, &[])
        .wait_with_output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("hostengine.port"));
    assert!(!tree.join(STATUS).exists(), "nothing may be written");
    // A stop grace that host-ctr would cut short is refused.
    fs::write(&invalid, "").unwrap();
    let output = hostengine_with_flags(tree.root(), &invalid, &["--stop-grace-seconds", "20"])
        .wait_with_output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("20 s"));
}

#[test]
fn without_a_subcommand_outside_a_container_it_says_what_it_looked_for() {
    let output = Command::new(BIN).output().unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("/.bottlerocket/bootstrap-containers/current")
            && stderr.contains("/.bottlerocket/host-containers/current"),
        "{stderr}"
    );
}

// ---- Measurements (not run by default) ----

/// CPU ticks (user + system) and RSS in KiB of `pid`.
fn cpu_and_rss(pid: u32) -> (u64, u64) {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let fields: Vec<&str> = stat
        .rsplit(')')
        .next()
        .unwrap()
        .split_whitespace()
        .collect();
    // After the name: state is field 3, utime 14, stime 15 (1-based).
    let ticks = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    let status = fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let rss = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    (ticks, rss)
}

fn measure_for(pid: u32, seconds: u64) -> String {
    let hz = 100.0; // USER_HZ on Linux
    let (before, _) = cpu_and_rss(pid);
    let mut peak = 0;
    for _ in 0..seconds {
        std::thread::sleep(Duration::from_secs(1));
        peak = peak.max(cpu_and_rss(pid).1);
    }
    let (after, rss) = cpu_and_rss(pid);
    let cpu = (after - before) as f64 / hz / seconds as f64 * 100.0;
    format!("CPU {cpu:.3}% of a core over {seconds} s, RSS {rss} KiB (peak {peak} KiB)")
}

#[test]
#[ignore = "a measurement (about 3 minutes): cargo test --test hostengine -- --ignored --nocapture measure"]
fn measure_supervisor_cost_and_restart_latency() {
    let test = "measure_supervisor_cost_and_restart_latency";
    let Some((node, _server)) = installed_node_with(test, true, true) else {
        return;
    };
    let seconds = 60;
    // Both scan this machine's /proc at every look, as on a node.
    let env = [
        ("ACCELREADY_HOSTENGINE_RECHECK_SECONDS", "60"),
        ("ACCELREADY_HOST_PROC", "/proc"),
    ];
    // Idle: another engine holds the port; default 60 s recheck.
    let squatter = TcpListener::bind(("127.0.0.1", node.port)).unwrap();
    let mut sup = node.start(&policy(node.port, ""), &env);
    sup.wait_for_state(&node, "idle-other-engine", Duration::from_secs(10));
    let pid = sup.child.id();
    println!("idle supervisor:    {}", measure_for(pid, seconds));
    drop(squatter);
    drop(sup);

    // Running, with the default 60 s recheck.
    let mut sup = node.start(&policy(node.port, ""), &env);
    sup.wait_for_state(&node, "running", Duration::from_secs(15));
    let pid = sup.child.id();
    println!("running supervisor: {}", measure_for(pid, seconds));
    drop(sup);

    // Restart latency after SIGKILL, default restart delay; stable after 1 s
    // so that every kill counts as the first failure.
    let mut sup = node.start(
        &policy(node.port, ""),
        &[("ACCELREADY_HOSTENGINE_STABLE_AFTER_SECONDS", "1")],
    );
    let mut latencies = Vec::new();
    let mut pid = pid_of(&sup.wait_for_state(&node, "running", Duration::from_secs(15)));
    for _ in 0..20 {
        std::thread::sleep(Duration::from_millis(1500));
        // Wait until the failure count has been reset.
        sup.wait_for(&node, "a stable engine", Duration::from_secs(10), |s| {
            s["consecutive_failures"] == 0
        });
        let killed = Instant::now();
        send(pid, Signal::SIGKILL);
        let status = sup.wait_for(&node, "a new engine", Duration::from_secs(10), |s| {
            s["state"] == "running" && s["pid"].as_u64().is_some_and(|p| p as u32 != pid)
        });
        while !accepts(node.port) {
            std::thread::sleep(Duration::from_millis(5));
        }
        let latency = killed.elapsed();
        println!(
            "  killed {pid}: {} running after {latency:?} (restarts {})",
            status["pid"], status["restarts"]
        );
        latencies.push(latency);
        pid = pid_of(&status);
    }
    latencies.sort();
    println!(
        "restart latency after SIGKILL (kill -> new engine running and accepting), 20 runs: median {:?}, min {:?}, max {:?}",
        latencies[10], latencies[0], latencies[19]
    );
}
