//! `accelready boot` on the incident host, DCGM from the image versus the
//! same bundle downloaded over HTTPS from the loopback server.
//!
//!     cargo bench --bench boot_image             # BENCH_MIB=100, BENCH_RUNS=5
//!     BENCH_BIN=target/image-x86_64/x86_64-unknown-linux-gnu/release/accelready \
//!         cargo bench --bench boot_image         # the image's own static binary
//!
//! The bundle is a gzip tarball of NVIDIA's layout whose kept part (a DCGM
//! module padded with incompressible bytes) is `BENCH_MIB` MiB, so both ways
//! install the same bytes: the download fetches, hashes and unpacks it; the
//! image way copies the files that `provision` laid out at the image root's
//! `/dcgm` (as `bootstrap/build --bundle` does), hashing them on the way.
//! Each run boots a fresh host tree, as root in a private mount namespace
//! (the bundle is bind-mounted read-only under the host's `/mnt`), with a fake
//! Bottlerocket API. Prints the median wall time of the whole `boot` process
//! and of its provisioning phases. Needs root and `unshare`; says so and
//! exits otherwise.

#[path = "../tests/common/mod.rs"]
mod common;

use std::fs;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use accelready::Arch;
use common::api::{FakeApi, Fault as ApiFault};
use common::bundle::{self, Compression};
use common::host::HostTree;
use common::https::Server;

/// The binary under test: `BENCH_BIN`, or this build's.
fn bin() -> String {
    std::env::var("BENCH_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_accelready").to_owned())
}
const CA_HOST_PATH: &str = "/etc/accelready/mirror-ca.pem";

fn env_number(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// One boot: wall time and the report's provisioning phases.
struct Boot {
    wall: Duration,
    fetch_ms: u64,
    unpack_ms: u64,
    install_ms: u64,
    expose_ms: u64,
}

fn boot(arch: Arch, policy: &str, image_root: &Path, server: &Server) -> Boot {
    let tree = HostTree::bottlerocket_nvidia(arch);
    fs::create_dir_all(tree.root().join("mnt")).unwrap();
    fs::create_dir_all(tree.root().join("var/lib")).unwrap();
    let ca = tree.root().join(CA_HOST_PATH.trim_start_matches('/'));
    fs::create_dir_all(ca.parent().unwrap()).unwrap();
    fs::copy(server.ca_file(), ca).unwrap();
    let scratch = tempfile::tempdir().unwrap();
    let user_data = scratch.path().join("user-data");
    fs::write(&user_data, policy).unwrap();
    let socket = scratch.path().join("api.sock");
    let _api = FakeApi::start(&socket, serde_json::json!({}), ApiFault::None);

    let started = Instant::now();
    let output = Command::new("unshare")
        .args(["--mount", "--propagation", "private", &bin()])
        .arg("--host-root")
        .arg(tree.root())
        .args(["boot", "--json", "--arch", arch.as_str()])
        .arg("--user-data")
        .arg(&user_data)
        .arg("--api-socket")
        .arg(&socket)
        .arg("--image-root")
        .arg(image_root)
        .env("RUST_LOG", "warn")
        .env_remove("HTTPS_PROXY")
        .output()
        .unwrap();
    let wall = started.elapsed();
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "no report ({e}): {}",
            String::from_utf8_lossy(&output.stderr)
        )
    });
    assert_eq!(
        report["labels"]["accelready.io/dcgm"], "provisioned",
        "{report:#}"
    );
    assert_eq!(report["provision"]["report"]["cache_hit"], false);
    let phase = |name: &str| {
        report["provision"]["report"]["phases"][name]
            .as_u64()
            .unwrap_or(0)
    };
    Boot {
        wall,
        fetch_ms: phase("fetch_ms"),
        unpack_ms: phase("unpack_ms"),
        install_ms: phase("install_ms"),
        expose_ms: phase("expose_ms"),
    }
}

fn median(mut values: Vec<u64>) -> u64 {
    values.sort_unstable();
    values[values.len() / 2]
}

fn summary(what: &str, boots: &[Boot]) {
    let wall = median(boots.iter().map(|b| b.wall.as_millis() as u64).collect());
    let walls: Vec<String> = boots
        .iter()
        .map(|b| format!("{}", b.wall.as_millis()))
        .collect();
    println!(
        "{what:<40} boot {wall:>6} ms (runs: {} ms); fetch {} ms, unpack/copy {} ms, install {} ms, expose {} ms",
        walls.join(", "),
        median(boots.iter().map(|b| b.fetch_ms).collect()),
        median(boots.iter().map(|b| b.unpack_ms).collect()),
        median(boots.iter().map(|b| b.install_ms).collect()),
        median(boots.iter().map(|b| b.expose_ms).collect()),
    );
}

fn main() {
    if let Some(reason) = common::sandbox::cannot_unshare() {
        println!("skipped: {reason} (boot exposes DCGM with a bind mount: needs root and unshare)");
        return;
    }
    let mib = env_number("BENCH_MIB", 100);
    let runs = env_number("BENCH_RUNS", 5);
    let arch = Arch::of_this_binary().unwrap_or(Arch::X86_64);

    let mut members = bundle::dcgm_members(arch);
    let mut module = common::elf::shared_object(arch, "libdcgmmodulepadded.so.4", &[]);
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    module.extend((0..mib << 20).map(|_| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state as u8
    }));
    members.push(bundle::file(
        &format!("usr/lib/{}/libdcgmmodulepadded.so.4", arch.gnu_triplet()),
        module,
    ));
    let bytes = bundle::compress(&bundle::tar(&members), Compression::Gzip);
    drop(members);
    let sha = bundle::sha256_hex(&bytes);
    let images = tempfile::tempdir().unwrap();
    let bundle_file = images.path().join("dcgm.tar.gz");
    fs::write(&bundle_file, &bytes).unwrap();
    let size_mib = bytes.len() as f64 / 1048576.0;
    let server = Server::start(bytes);

    // The image: the bundle laid out at /dcgm by provision, as bootstrap/build does.
    let image_root = images.path().join("image");
    bundle::lay_out_in_image(&bin(), &image_root, &bundle_file, &sha, arch);

    let common_policy = format!(
        "[dcgm]\nprovision = \"if-missing\"\nwith-hostengine = true\nca-bundle = \"{CA_HOST_PATH}\"\n[boot]\ndeadline-seconds = 600\n[dcgm.bundle.{arch}]\nsha256 = \"{sha}\"\n"
    );
    let download = format!("{common_policy}url = \"{}\"\n", server.url("/dcgm.tar.gz"));
    let from_image = format!("{common_policy}source = \"image\"\n");
    println!(
        "bundle: {size_mib:.1} MiB gzip tarball ({mib} MiB kept), {arch}, {runs} runs each, medians; binary {}",
        bin()
    );
    let mut downloads = Vec::new();
    let mut image = Vec::new();
    for _ in 0..runs {
        downloads.push(boot(arch, &download, &image_root, &server));
        image.push(boot(arch, &from_image, &image_root, &server));
    }
    summary("boot, HTTPS download from loopback", &downloads);
    summary("boot, DCGM from the image", &image);
}
