//! `accelready check` end to end: the built binary on fixture host trees,
//! asserting the JSON report and the exit code.

mod common;

use std::fs;
use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use accelready::Arch;
use common::host::{HostTree, DRIVER_VERSION, GLIBC_DIR, INSTALL_LIB_DIR, TESLA_LIB_DIR};
use serde_json::Value;

/// A run must finish well within this, whatever the tree holds.
const DEADLINE: Duration = Duration::from_secs(30);

struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

impl Run {
    fn json(&self) -> Value {
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| {
            panic!(
                "stdout is not JSON ({e}):\n{}\nstderr:\n{}",
                self.stdout, self.stderr
            )
        })
    }
}

/// Runs the binary with `args`, killing it (and failing) past [`DEADLINE`].
fn accelready(args: &[&str]) -> Run {
    accelready_as(args, None)
}

/// [`accelready`], as user and group `uid` when given (needs root).
fn accelready_as(args: &[&str], uid: Option<u32>) -> Run {
    let mut command = Command::new(env!("CARGO_BIN_EXE_accelready"));
    if let Some(uid) = uid {
        use std::os::unix::process::CommandExt;
        command.uid(uid).gid(uid);
    }
    let mut child = command
        .args(args)
        .env_remove("ACCELREADY_HOST_ROOT")
        .env_remove("RUST_LOG")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run accelready");
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if start.elapsed() > DEADLINE {
            let _ = child.kill();
            panic!("accelready {args:?} did not finish within {DEADLINE:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let mut stdout = String::new();
    let mut stderr = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut stdout)
        .unwrap();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    Run {
        code: status.code().expect("exited by signal"),
        stdout,
        stderr,
    }
}

fn check_json(tree: &HostTree) -> Run {
    let root = tree.root().to_str().unwrap();
    accelready(&[
        "check",
        "--json",
        "--host-root",
        root,
        "--arch",
        tree.arch.as_str(),
    ])
}

/// Asserts verdict, exit code and DCGM status; returns the report.
fn assert_verdict(tree: &HostTree, verdict: &str, code: i32, dcgm_status: &str) -> Value {
    let run = check_json(tree);
    let json = run.json();
    assert_eq!(
        json["verdict"], verdict,
        "{json:#}\nstderr:\n{}",
        run.stderr
    );
    assert_eq!(run.code, code, "exit code; {json:#}");
    assert_eq!(json["dcgm"]["status"], dcgm_status, "{json:#}");
    assert_eq!(json["arch"], tree.arch.as_str());
    json
}

fn problems(json: &Value, part: &str) -> String {
    json[part]["problems"]
        .as_array()
        .unwrap_or_else(|| panic!("{part}.problems is not a list: {json:#}"))
        .iter()
        .map(|p| p.as_str().unwrap().to_owned())
        .collect::<Vec<_>>()
        .join("\n")
}

fn install_path(name: &str) -> String {
    format!("{INSTALL_LIB_DIR}/{name}")
}

#[test]
fn incident_host_without_dcgm_is_dcgm_missing() {
    let tree = HostTree::bottlerocket_nvidia(Arch::Aarch64);
    let json = assert_verdict(&tree, "dcgm-missing", 10, "missing");
    let driver = &json["driver"];
    assert_eq!(driver["loaded"], true);
    assert_eq!(driver["version"], DRIVER_VERSION);
    assert_eq!(driver["devices"], 1);
    assert_eq!(driver["gpus"], 1);
    assert_eq!(
        driver["nvml"],
        format!("{TESLA_LIB_DIR}/libnvidia-ml.so.1").as_str()
    );
    assert_eq!(driver["problems"], Value::Array(vec![]));
    let dcgm = &json["dcgm"];
    for key in ["path", "soname", "version"] {
        assert_eq!(dcgm[key], Value::Null, "{key}");
    }
    assert!(problems(&json, "dcgm").contains("/usr/lib/nvidia/tesla"));
    assert_eq!(json["host_root"], tree.root().to_str().unwrap());
}

#[test]
fn incident_text_report_says_what_to_do() {
    let tree = HostTree::bottlerocket_nvidia(Arch::Aarch64);
    let root = tree.root().to_str().unwrap();
    let run = accelready(&["check", "--host-root", root, "--arch", "arm64"]);
    assert_eq!(run.code, 10, "{}", run.stdout);
    assert!(run.stdout.starts_with("DCGM MISSING"), "{}", run.stdout);
    assert!(run.stdout.contains(DRIVER_VERSION), "{}", run.stdout);
    assert!(
        run.stdout.contains("fix") && run.stdout.contains("accelready provision"),
        "{}",
        run.stdout
    );
    assert!(
        run.stdout.contains("replaced 10 minutes later"),
        "{}",
        run.stdout
    );
    // Logs are on stderr, never mixed into the result.
    assert!(run.stderr.contains("check done"), "{}", run.stderr);
    assert!(!run.stdout.contains("check done"));
}

#[test]
fn provisioned_dcgm4_is_ready() {
    let tree = HostTree::bottlerocket_nvidia(Arch::Aarch64).with_dcgm4();
    let json = assert_verdict(&tree, "ready", 0, "present");
    let dcgm = &json["dcgm"];
    assert_eq!(dcgm["path"], install_path("libdcgm.so.4").as_str());
    assert_eq!(dcgm["soname"], "libdcgm.so.4");
    assert_eq!(dcgm["version"], "4.6.1");
    assert_eq!(dcgm["problems"], Value::Array(vec![]));
    assert!(dcgm.get("detail").is_none(), "{dcgm:#}");
    assert_eq!(
        dcgm["candidates"][0]["resolved"],
        install_path("libdcgm.so.4.6.1").as_str()
    );
}

#[test]
fn dcgm4_on_an_x86_64_host_is_ready() {
    let tree = HostTree::bottlerocket_nvidia(Arch::X86_64).with_dcgm4_in("/usr/lib64");
    let json = assert_verdict(&tree, "ready", 0, "present");
    assert_eq!(json["dcgm"]["path"], "/usr/lib64/libdcgm.so.4");
}

#[test]
fn dcgm3_with_unversioned_link_is_ready() {
    let tree = HostTree::bottlerocket_nvidia(Arch::Aarch64).with_dcgm3_unversioned();
    let json = assert_verdict(&tree, "ready", 0, "present");
    let dcgm = &json["dcgm"];
    assert_eq!(dcgm["path"], "/usr/lib64/libdcgm.so.3");
    assert_eq!(dcgm["soname"], "libdcgm.so.3");
    assert_eq!(dcgm["version"], "3.3.9");
    let names: Vec<&str> = dcgm["candidates"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["libdcgm.so.3", "libdcgm.so"]);
}

fn warnings(json: &Value, part: &str) -> String {
    json[part]["warnings"]
        .as_array()
        .unwrap_or_else(|| panic!("{part}.warnings is not a list: {json:#}"))
        .iter()
        .map(|w| w.as_str().unwrap().to_owned())
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn dcgm3_without_unversioned_link_is_ready_with_a_warning() {
    let tree = HostTree::bottlerocket_nvidia(Arch::Aarch64).with_dcgm3_without_unversioned();
    let json = assert_verdict(&tree, "ready", 0, "present");
    assert_eq!(json["dcgm"]["path"], "/usr/lib64/libdcgm.so.3");
    assert_eq!(json["dcgm"]["problems"], Value::Array(vec![]));
    let warnings = warnings(&json, "dcgm");
    assert!(
        warnings.contains("no unversioned libdcgm.so next to '/usr/lib64/libdcgm.so.3'"),
        "{warnings}"
    );
    assert!(warnings.contains("libdcgm.so not Found"), "{warnings}");
}

#[test]
fn dcgm4_without_unversioned_link_is_ready_and_warns_for_dcgm3_era_clients() {
    // What the datacenter-gpu-manager-4-core package alone gives. No current
    // client loads libdcgm.so (agents v1.6.0+ load their own libdcgm.so.4),
    // so the host is ready; the warning names the clients that would fail.
    let tree =
        HostTree::bottlerocket_nvidia(Arch::X86_64).with_dcgm4_without_unversioned_in("/usr/lib64");
    let json = assert_verdict(&tree, "ready", 0, "present");
    let dcgm = &json["dcgm"];
    assert_eq!(dcgm["path"], "/usr/lib64/libdcgm.so.4");
    assert!(dcgm.get("detail").is_none(), "{dcgm:#}");
    let warnings = warnings(&json, "dcgm");
    for expected in [
        "DCGM-3-era clients",
        "go-dcgm <= v3.3.9",
        "EKS node monitoring agent before v1.6.0",
        "dlopen(\"libdcgm.so\")",
        "must be upgraded",
    ] {
        assert!(warnings.contains(expected), "{expected}: {warnings}");
    }
    // The text report shows the warning too, and still says READY.
    let root = tree.root().to_str().unwrap();
    let run = accelready(&["check", "--host-root", root, "--arch", "x86_64"]);
    assert_eq!(run.code, 0, "{}", run.stdout);
    assert!(run.stdout.starts_with("READY"), "{}", run.stdout);
    assert!(
        run.stdout.contains("! no unversioned libdcgm.so"),
        "{}",
        run.stdout
    );
    // With the link (as provision installs it) there is nothing to warn about.
    let linked = HostTree::bottlerocket_nvidia(Arch::X86_64).with_dcgm4_in("/usr/lib64");
    let json = assert_verdict(&linked, "ready", 0, "present");
    assert_eq!(json["dcgm"]["warnings"], Value::Array(vec![]));
}

#[test]
fn a_broken_unversioned_link_next_to_usable_dcgm4_is_a_warning() {
    let tree = HostTree::bottlerocket_nvidia(Arch::Aarch64)
        .with_dcgm4_without_unversioned_in(INSTALL_LIB_DIR)
        .symlink(&install_path("libdcgm.so"), "libdcgm.so.9");
    let json = assert_verdict(&tree, "ready", 0, "present");
    assert_eq!(json["dcgm"]["path"], install_path("libdcgm.so.4").as_str());
    assert!(problems(&json, "dcgm").contains("dangling"), "{json:#}");
    assert!(
        warnings(&json, "dcgm").contains(&format!("'{}' is dangling", install_path("libdcgm.so"))),
        "{json:#}"
    );
}

// --- a file counts as DCGM only if it is DCGM ---

/// Asserts `not-dcgm` with the SONAME found and the entry points missing.
fn assert_not_dcgm(tree: &HostTree, soname: &str, expected: &str, missing: &[&str]) -> Value {
    let json = assert_verdict(tree, "dcgm-unusable", 11, "not-dcgm");
    let detail = &json["dcgm"]["detail"];
    assert_eq!(detail["soname"], soname, "{json:#}");
    assert_eq!(detail["expected_soname"], expected, "{json:#}");
    assert_eq!(
        detail["missing_symbols"],
        serde_json::json!(missing),
        "{json:#}"
    );
    assert!(problems(&json, "dcgm").contains("is not DCGM"), "{json:#}");
    json
}

#[test]
fn a_copy_of_the_real_libz_saved_as_libdcgm_so_4_is_not_dcgm() {
    // What a new user tries: cp /usr/lib/x86_64-linux-gnu/libz.so.1 libdcgm.so.4.
    // This machine's own zlib is a real glibc library (DT_NEEDED libc.so.6,
    // which the tree has), so only its identity can give it away.
    let Some(libz) = [
        "/usr/lib/x86_64-linux-gnu/libz.so.1",
        "/lib/x86_64-linux-gnu/libz.so.1",
        "/usr/lib64/libz.so.1",
    ]
    .into_iter()
    .map(Path::new)
    .find(|p| p.exists()) else {
        eprintln!("note: no x86_64 libz.so.1 on this machine; skipping the real-library case");
        return;
    };
    if Arch::of_this_binary() != Some(Arch::X86_64) {
        eprintln!("note: not an x86_64 machine; skipping the real-library case");
        return;
    }
    let tree = HostTree::bottlerocket_nvidia(Arch::X86_64)
        .file(&install_path("libdcgm.so.4"), fs::read(libz).unwrap());
    let json = assert_not_dcgm(
        &tree,
        "libz.so.1",
        "libdcgm.so.4",
        &accelready::probe::dcgm::ENTRY_POINTS,
    );
    assert_eq!(json["dcgm"]["soname"], "libz.so.1");
    let root = tree.root().to_str().unwrap();
    let run = accelready(&["check", "--host-root", root, "--arch", "x86_64"]);
    assert_eq!(run.code, 11);
    assert!(
        run.stdout.contains("not NVIDIA's libdcgm: remove it"),
        "{}",
        run.stdout
    );
}

#[test]
fn identity_table_soname_and_entry_points() {
    use accelready::probe::dcgm::ENTRY_POINTS;
    let arch = Arch::Aarch64;
    let all: Vec<&str> = ENTRY_POINTS.to_vec();
    // (file name, SONAME, exports, expected status, expected_soname, missing)
    type Case<'a> = (
        &'a str,
        &'a str,
        Vec<&'a str>,
        &'a str,
        &'a str,
        Vec<&'a str>,
    );
    let cases: Vec<Case> = vec![
        (
            "libdcgm.so.4",
            "libdcgm.so.4",
            all.clone(),
            "present",
            "",
            vec![],
        ),
        (
            "libdcgm.so.4",
            "libz.so.1",
            vec![],
            "not-dcgm",
            "libdcgm.so.4",
            all.clone(),
        ),
        (
            "libdcgm.so.4",
            "libz.so.1",
            all.clone(),
            "not-dcgm",
            "libdcgm.so.4",
            vec![],
        ),
        (
            "libdcgm.so.4",
            "libdcgm.so.4",
            vec![],
            "not-dcgm",
            "libdcgm.so.4",
            all.clone(),
        ),
        (
            "libdcgm.so.4",
            "libdcgm.so.4",
            vec![
                "dcgmInit",
                "dcgmShutdown",
                "dcgmDisconnect",
                "dcgmStopEmbedded",
            ],
            "not-dcgm",
            "libdcgm.so.4",
            vec!["dcgmConnect_v2", "dcgmStartEmbedded"],
        ),
        // DCGM 3 saved under DCGM 4's name: DCGM 4 clients would misread it.
        (
            "libdcgm.so.4",
            "libdcgm.so.3",
            all.clone(),
            "not-dcgm",
            "libdcgm.so.4",
            vec![],
        ),
        (
            "libdcgm.so.3",
            "libdcgm.so.3",
            all.clone(),
            "present",
            "",
            vec![],
        ),
        // The unversioned name may be any major.
        (
            "libdcgm.so",
            "libdcgm.so.3",
            all.clone(),
            "present",
            "",
            vec![],
        ),
        (
            "libdcgm.so",
            "libnvidia-ml.so.1",
            vec![],
            "not-dcgm",
            "libdcgm.so.<N>",
            all.clone(),
        ),
    ];
    for (name, soname, exports, status, expected, missing) in cases {
        let tree = HostTree::bottlerocket_nvidia(arch).library_exporting(
            "/usr/lib64",
            name,
            soname,
            &exports,
        );
        let run = check_json(&tree);
        let json = run.json();
        let case = format!("{name} with SONAME {soname} exporting {exports:?}");
        assert_eq!(json["dcgm"]["status"], status, "{case}: {json:#}");
        if status == "present" {
            assert_eq!(run.code, 0, "{case}");
            continue;
        }
        assert_eq!(run.code, 11, "{case}");
        let detail = &json["dcgm"]["detail"];
        assert_eq!(
            detail["path"],
            format!("/usr/lib64/{name}").as_str(),
            "{case}"
        );
        assert_eq!(detail["soname"], soname, "{case}");
        assert_eq!(detail["expected_soname"], expected, "{case}");
        assert_eq!(
            detail["missing_symbols"],
            serde_json::json!(missing),
            "{case}"
        );
    }
}

#[test]
fn a_real_dcgm_wins_over_an_impostor_but_the_impostor_is_reported() {
    let tree = HostTree::bottlerocket_nvidia(Arch::Aarch64)
        .library_exporting("/usr/lib64", "libdcgm.so.4", "libz.so.1", &[])
        .with_dcgm4();
    let json = assert_verdict(&tree, "ready", 0, "present");
    assert_eq!(json["dcgm"]["path"], install_path("libdcgm.so.4").as_str());
    assert_eq!(json["dcgm"]["candidates"][0]["status"], "not-dcgm");
    assert!(
        problems(&json, "dcgm").contains("'/usr/lib64/libdcgm.so.4' is not DCGM"),
        "{json:#}"
    );
}

// --- GPUs are display controllers ---

#[test]
fn a_gpu_and_its_audio_function_are_one_gpu() {
    let tree = HostTree::bottlerocket_nvidia(Arch::X86_64).pci_function(
        "0000:00:1e.1",
        0x10de,
        0x10f8,
        0x040300,
        "snd_hda_intel",
    );
    let json = assert_verdict(&tree, "dcgm-missing", 10, "missing");
    assert_eq!(json["driver"]["gpus"], 1, "{json:#}");
    assert_eq!(json["driver"]["warnings"], Value::Array(vec![]), "{json:#}");
    // Four GPUs with their audio functions: four.
    let mut tree = HostTree::bottlerocket_nvidia(Arch::X86_64);
    for slot in 0x1b..0x1e {
        tree = tree
            .pci_function(
                &format!("0000:00:{slot:02x}.0"),
                0x10de,
                0x2237,
                0x030000,
                "nvidia",
            )
            .pci_function(
                &format!("0000:00:{slot:02x}.1"),
                0x10de,
                0x1aef,
                0x040300,
                "snd_hda_intel",
            );
    }
    assert_eq!(check_json(&tree).json()["driver"]["gpus"], 4);
}

#[test]
fn without_sysfs_every_nvidia_function_counts_with_a_warning() {
    let tree = HostTree::bottlerocket_nvidia(Arch::X86_64)
        .pci_function("0000:00:1e.1", 0x10de, 0x10f8, 0x040300, "snd_hda_intel")
        .without_sysfs();
    let json = check_json(&tree).json();
    assert_eq!(json["driver"]["gpus"], 2, "{json:#}");
    let warnings = warnings(&json, "driver");
    assert!(
        warnings.contains("no PCI functions under /sys/bus/pci/devices"),
        "{warnings}"
    );
    assert!(warnings.contains("audio"), "{warnings}");
}

#[test]
fn x86_64_dcgm_on_aarch64_host_is_wrong_arch() {
    let tree = HostTree::bottlerocket_nvidia(Arch::Aarch64).with_foreign_dcgm4();
    let json = assert_verdict(&tree, "dcgm-unusable", 11, "wrong-arch");
    let detail = &json["dcgm"]["detail"];
    assert_eq!(detail["path"], install_path("libdcgm.so.4.6.1").as_str());
    assert_eq!(detail["found"], "x86_64");
    assert_eq!(detail["expected"], "aarch64");
    // --arch decides: for an x86_64 host the library's own architecture is
    // right, but this tree's glibc is aarch64, so its dependencies are not.
    let root = tree.root().to_str().unwrap();
    let run = accelready(&["check", "--json", "--host-root", root, "--arch", "x86_64"]);
    let json = run.json();
    assert_eq!(json["dcgm"]["status"], "missing-dependency", "{json:#}");
    assert!(json["dcgm"]["detail"]["needed"]
        .as_array()
        .unwrap()
        .contains(&Value::from("libc.so.6")));
}

#[test]
fn dangling_link_names_link_and_target() {
    let tree = HostTree::bottlerocket_nvidia(Arch::Aarch64).with_dangling_dcgm4();
    let json = assert_verdict(&tree, "dcgm-unusable", 11, "dangling");
    let detail = &json["dcgm"]["detail"];
    assert_eq!(detail["link"], install_path("libdcgm.so.4").as_str());
    assert_eq!(
        detail["target"],
        "/var/lib/accelready/dcgm/4.6.1/lib/libdcgm.so.4.6.1"
    );
}

#[test]
fn dangling_link_to_an_outside_absolute_path_stays_inside_the_root() {
    // /bin/sh exists on this machine but not in the tree: the link dangles.
    let tree = HostTree::bottlerocket_nvidia(Arch::Aarch64)
        .symlink(&install_path("libdcgm.so.4"), "/bin/sh");
    let json = assert_verdict(&tree, "dcgm-unusable", 11, "dangling");
    assert_eq!(json["dcgm"]["detail"]["target"], "/bin/sh");
}

#[test]
fn missing_dependency_is_named() {
    let tree = HostTree::bottlerocket_nvidia(Arch::Aarch64).with_dcgm4_needing(&[
        "libc.so.6",
        "libstdc++.so.6",
        "libm.so.6",
    ]);
    let json = assert_verdict(&tree, "dcgm-unusable", 11, "missing-dependency");
    let detail = &json["dcgm"]["detail"];
    assert_eq!(detail["path"], install_path("libdcgm.so.4.6.1").as_str());
    assert_eq!(detail["needed"], serde_json::json!(["libstdc++.so.6"]));
}

#[test]
fn dependency_next_to_the_library_is_found_via_origin() {
    let tree = HostTree::bottlerocket_nvidia(Arch::Aarch64)
        .with_dcgm4_needing(&["libc.so.6", "libdcgmhelper.so.4"])
        .library(
            INSTALL_LIB_DIR,
            "libdcgmhelper.so.4",
            "libdcgmhelper.so.4",
            &[],
        );
    assert_verdict(&tree, "ready", 0, "present");
}

#[test]
fn a_dependency_only_present_for_another_architecture_is_missing() {
    // The loader skips a libstdc++ built for x86_64 on an aarch64 host, so
    // DCGM cannot load: exactly what go-dcgm reports as "not Found".
    let tree = HostTree::bottlerocket_nvidia(Arch::Aarch64)
        .with_dcgm4_needing(&["libc.so.6", "libstdc++.so.6"])
        .library_for(
            Arch::X86_64,
            GLIBC_DIR,
            "libstdc++.so.6",
            "libstdc++.so.6",
            &[],
        );
    let json = assert_verdict(&tree, "dcgm-unusable", 11, "missing-dependency");
    assert_eq!(
        json["dcgm"]["detail"]["needed"],
        serde_json::json!(["libstdc++.so.6"])
    );
    // Built for the host's architecture, the same name satisfies it.
    let tree = tree.library_for(
        Arch::Aarch64,
        GLIBC_DIR,
        "libstdc++.so.6",
        "libstdc++.so.6",
        &[],
    );
    assert_verdict(&tree, "ready", 0, "present");
}

#[test]
fn nvml_of_another_architecture_is_driver_missing_and_says_so() {
    let tree = HostTree::bottlerocket_nvidia(Arch::Aarch64).library_for(
        Arch::X86_64,
        TESLA_LIB_DIR,
        "libnvidia-ml.so.1",
        "libnvidia-ml.so.1",
        &[],
    );
    let json = assert_verdict(&tree, "driver-missing", 20, "missing");
    assert_eq!(json["driver"]["nvml"], serde_json::Value::Null);
    let problems = problems(&json, "driver");
    assert!(
        problems.contains("is not a 64-bit aarch64 library"),
        "{problems}"
    );
}

#[test]
fn no_driver_is_driver_missing_whatever_dcgm_says() {
    let tree = HostTree::bottlerocket_nvidia(Arch::Aarch64)
        .with_dcgm4()
        .without_driver();
    let json = assert_verdict(&tree, "driver-missing", 20, "present");
    let driver = &json["driver"];
    assert_eq!(driver["loaded"], false);
    assert_eq!(driver["version"], Value::Null);
    assert_eq!(driver["devices"], 0);
    assert_eq!(driver["nvml"], Value::Null);
    let problems = problems(&json, "driver");
    assert!(
        problems.contains("nvidia kernel module is not loaded"),
        "{problems}"
    );
    assert!(
        problems.contains("libnvidia-ml.so.1 not found"),
        "{problems}"
    );
}

#[test]
fn empty_root_is_driver_missing() {
    let tree = HostTree::empty(Arch::X86_64);
    let json = assert_verdict(&tree, "driver-missing", 20, "missing");
    assert_eq!(json["driver"]["gpus"], 0);
}

#[test]
fn lib_dir_replaces_the_default_list() {
    let tree = HostTree::bottlerocket_nvidia(Arch::Aarch64)
        .library(
            "/opt/nvidia/lib",
            "libnvidia-ml.so.1",
            "libnvidia-ml.so.1",
            &[],
        )
        .with_dcgm4_in("/opt/nvidia/lib");
    let root = tree.root().to_str().unwrap();
    let run = accelready(&[
        "check",
        "--json",
        "--host-root",
        root,
        "--arch",
        "aarch64",
        "--lib-dir",
        "/opt/nvidia/lib",
    ]);
    let json = run.json();
    assert_eq!(run.code, 0, "{json:#}");
    assert_eq!(json["driver"]["nvml"], "/opt/nvidia/lib/libnvidia-ml.so.1");
    assert_eq!(json["dcgm"]["path"], "/opt/nvidia/lib/libdcgm.so.4");
    assert_eq!(
        json["dcgm"]["searched"],
        serde_json::json!(["/opt/nvidia/lib", INSTALL_LIB_DIR])
    );
}

#[test]
fn install_dir_is_configurable() {
    let tree = HostTree::bottlerocket_nvidia(Arch::Aarch64).with_dcgm4_in("/opt/ar/current/lib");
    let root = tree.root().to_str().unwrap();
    let args = ["check", "--json", "--host-root", root, "--arch", "aarch64"];
    assert_eq!(accelready(&args).code, 10);
    let run = accelready(&[&args[..], &["--install-dir", "/opt/ar"]].concat());
    assert_eq!(run.code, 0, "{}", run.stdout);
    assert_eq!(
        run.json()["dcgm"]["path"],
        "/opt/ar/current/lib/libdcgm.so.4"
    );
}

// --- odd hosts: a precise reason, never a panic or a hang ---

#[test]
fn directory_named_libdcgm_so_4_is_not_elf() {
    let tree = HostTree::bottlerocket_nvidia(Arch::Aarch64).dir(&install_path("libdcgm.so.4"));
    let json = assert_verdict(&tree, "dcgm-unusable", 11, "not-elf");
    assert!(problems(&json, "dcgm").contains("directory"), "{json:#}");
}

#[test]
fn symlink_loop_is_unreadable() {
    let tree = HostTree::bottlerocket_nvidia(Arch::Aarch64)
        .symlink(&install_path("libdcgm.so.4"), "libdcgm.so.4.x")
        .symlink(&install_path("libdcgm.so.4.x"), "libdcgm.so.4");
    let json = assert_verdict(&tree, "dcgm-unusable", 11, "unreadable");
    assert!(problems(&json, "dcgm").contains("symlinks"), "{json:#}");
}

#[test]
fn truncated_elf_is_not_elf() {
    let whole = common::elf::shared_object(Arch::Aarch64, "libdcgm.so.4", &[]);
    let tree = HostTree::bottlerocket_nvidia(Arch::Aarch64)
        .file(&install_path("libdcgm.so.4"), &whole[..200]);
    let json = assert_verdict(&tree, "dcgm-unusable", 11, "not-elf");
    assert!(problems(&json, "dcgm").contains("malformed"), "{json:#}");
}

#[test]
fn text_file_is_not_elf() {
    let tree = HostTree::bottlerocket_nvidia(Arch::Aarch64)
        .file(&install_path("libdcgm.so.4"), "INPUT(libdcgm.so.4.6.1)\n");
    let json = assert_verdict(&tree, "dcgm-unusable", 11, "not-elf");
    assert!(problems(&json, "dcgm").contains("no ELF magic"), "{json:#}");
}

#[test]
fn huge_sparse_files_are_judged_from_their_headers() {
    // 64 GiB apparent size: reading one whole would take minutes, not a blink.
    let grow = |tree: &HostTree, host_path: &str| {
        fs::OpenOptions::new()
            .write(true)
            .open(tree.join(host_path))
            .unwrap()
            .set_len(64 << 30)
            .unwrap();
    };
    let start = Instant::now();
    // A real library with 64 GiB of zeros after it is still a real library.
    let tree = HostTree::bottlerocket_nvidia(Arch::Aarch64).with_dcgm4();
    grow(&tree, &install_path("libdcgm.so.4.6.1"));
    assert_verdict(&tree, "ready", 0, "present");
    // 64 GiB of zeros is not.
    let tree = HostTree::bottlerocket_nvidia(Arch::Aarch64).file(&install_path("libdcgm.so.4"), "");
    grow(&tree, &install_path("libdcgm.so.4"));
    assert_verdict(&tree, "dcgm-unusable", 11, "not-elf");
    // An ELF header whose section table lies in the zeros has no SONAME.
    let mut head = common::elf::shared_object(Arch::Aarch64, "libdcgm.so.4", &[]);
    head.truncate(64);
    let tree =
        HostTree::bottlerocket_nvidia(Arch::Aarch64).file(&install_path("libdcgm.so.4"), &head);
    grow(&tree, &install_path("libdcgm.so.4"));
    let json = assert_verdict(&tree, "dcgm-unusable", 11, "not-elf");
    assert!(problems(&json, "dcgm").contains("SONAME"), "{json:#}");
    assert!(
        start.elapsed() < Duration::from_secs(20),
        "{:?}",
        start.elapsed()
    );
}

#[test]
fn fifo_named_libdcgm_so_4_does_not_block() {
    let tree = HostTree::bottlerocket_nvidia(Arch::Aarch64).dir(INSTALL_LIB_DIR);
    nix::unistd::mkfifo(
        &tree.join(&install_path("libdcgm.so.4")),
        nix::sys::stat::Mode::from_bits_truncate(0o644),
    )
    .unwrap();
    let json = assert_verdict(&tree, "dcgm-unusable", 11, "not-elf");
    assert!(
        problems(&json, "dcgm").contains("not a regular file"),
        "{json:#}"
    );
}

#[test]
fn executable_named_libdcgm_so_4_is_not_a_shared_object() {
    let tree = HostTree::bottlerocket_nvidia(Arch::Aarch64).file(
        &install_path("libdcgm.so.4"),
        common::elf::executable(Arch::Aarch64),
    );
    let json = assert_verdict(&tree, "dcgm-unusable", 11, "not-shared-object");
    assert_eq!(json["dcgm"]["detail"]["found"], "executable");
}

#[test]
fn unreadable_file_is_unreadable() {
    use std::os::unix::fs::PermissionsExt;
    let tree = HostTree::bottlerocket_nvidia(Arch::Aarch64).with_dcgm4();
    let file = tree.join(&install_path("libdcgm.so.4.6.1"));
    fs::set_permissions(&file, fs::Permissions::from_mode(0o000)).unwrap();
    // root reads a mode-000 file anyway: then probe as `nobody`, who may
    // enter the tree but not read that file.
    let uid = nix::unistd::geteuid().is_root().then_some(65534);
    if uid.is_some() {
        fs::set_permissions(tree.root(), fs::Permissions::from_mode(0o755)).unwrap();
    }
    let root = tree.root().to_str().unwrap();
    let run = accelready_as(
        &["check", "--json", "--host-root", root, "--arch", "aarch64"],
        uid,
    );
    let json = run.json();
    assert_eq!(run.code, 11, "{json:#}\n{}", run.stderr);
    assert_eq!(json["dcgm"]["status"], "unreadable", "{json:#}");
    assert!(
        problems(&json, "dcgm").contains("ermission denied"),
        "{json:#}"
    );
}

#[test]
fn a_usable_library_wins_over_a_broken_one_but_both_are_reported() {
    let tree = HostTree::bottlerocket_nvidia(Arch::Aarch64)
        .with_dcgm4()
        .symlink("/usr/lib64/libdcgm.so.4", "/nowhere/libdcgm.so.4");
    let json = assert_verdict(&tree, "ready", 0, "present");
    assert_eq!(json["dcgm"]["path"], install_path("libdcgm.so.4").as_str());
    assert_eq!(json["dcgm"]["candidates"][0]["status"], "dangling");
    assert!(problems(&json, "dcgm").contains("/nowhere/libdcgm.so.4"));
}

// --- usage errors: exit 2 ---

#[test]
fn usage_errors_exit_2() {
    let tree = HostTree::bottlerocket_nvidia(Arch::Aarch64);
    let root = tree.root().to_str().unwrap();
    let missing = tree.root().join("no-such-dir");
    let cases: [&[&str]; 4] = [
        &["check", "--host-root", root, "--lib-dir", "usr/lib"],
        &["check", "--host-root", root, "--arch", "mips"],
        &[
            "check",
            "--host-root",
            missing.to_str().unwrap(),
            "--arch",
            "aarch64",
        ],
        &["check", "--host-root", root, "--install-dir", "var/lib"],
    ];
    for args in cases {
        let run = accelready(args);
        assert_eq!(run.code, 2, "{args:?}: {}", run.stderr);
        assert!(run.stdout.is_empty(), "{args:?}: {}", run.stdout);
    }
}

#[test]
fn host_root_comes_from_the_environment() {
    let tree = HostTree::bottlerocket_nvidia(Arch::Aarch64).with_dcgm4();
    let out = Command::new(env!("CARGO_BIN_EXE_accelready"))
        .args(["check", "--json", "--arch", "aarch64"])
        .env("ACCELREADY_HOST_ROOT", tree.root())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let json: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(Path::new(json["host_root"].as_str().unwrap()), tree.root());
}
