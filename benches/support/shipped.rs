//! The binary the image ships, for the benches: `BENCH_BIN`, or
//! `cargo build --release --locked` of this checkout — the `release` profile
//! that `bootstrap/build` uses, whatever profile the bench harness itself was
//! built with.

#![allow(dead_code)] // each bench uses what it needs

use std::path::PathBuf;
use std::process::{Command, Stdio};

/// Path of the shipped-profile binary (built if needed).
pub fn release_binary() -> PathBuf {
    if let Some(bin) = std::env::var_os("BENCH_BIN") {
        return bin.into();
    }
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    eprintln!("building the shipped binary: cargo build --release --locked --bin accelready");
    let output = Command::new(cargo)
        .args(["build", "--release", "--locked", "--bin", "accelready"])
        .arg("--message-format=json-render-diagnostics")
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .stderr(Stdio::inherit())
        .output()
        .expect("run cargo build --release");
    assert!(output.status.success(), "cargo build --release failed");
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter(|m| m["reason"] == "compiler-artifact" && m["target"]["name"] == "accelready")
        .filter_map(|m| m["executable"].as_str().map(PathBuf::from))
        .next_back()
        .expect("cargo reported no accelready executable")
}

/// `name` from the environment, parsed, or `default`.
pub fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// `mib` MiB of incompressible bytes (xorshift: cheap, deterministic).
pub fn noise(mib: usize) -> Vec<u8> {
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut bytes = Vec::with_capacity(mib << 20);
    while bytes.len() < mib << 20 {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        bytes.extend_from_slice(&state.to_le_bytes());
    }
    bytes
}
