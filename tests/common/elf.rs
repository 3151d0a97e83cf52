//! Real ELF files for fixtures, built with a C compiler (`gcc` for x86_64,
//! `aarch64-linux-gnu-gcc` for aarch64; `.ci/setup` installs both).
//!
//! Outputs are cached under `CARGO_TARGET_TMPDIR/elf-cache`, keyed by what was
//! asked for, so that the many fixture trees of a test run cost one compile each.

#![allow(dead_code)]

use std::collections::hash_map::DefaultHasher;
use std::fs;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::process::Command;

use accelready::Arch;

/// The C compiler that targets `arch` on this machine, if one is installed.
pub fn compiler(arch: Arch) -> Option<&'static str> {
    let candidates: &[&str] = match (arch, Arch::of_this_binary()) {
        (Arch::X86_64, Some(Arch::X86_64)) => &["gcc", "x86_64-linux-gnu-gcc"],
        (Arch::Aarch64, Some(Arch::Aarch64)) => &["gcc", "aarch64-linux-gnu-gcc"],
        (Arch::X86_64, _) => &["x86_64-linux-gnu-gcc"],
        (Arch::Aarch64, _) => &["aarch64-linux-gnu-gcc"],
    };
    candidates.iter().copied().find(|cc| {
        Command::new(cc)
            .arg("--version")
            .output()
            .map(|o| o.status.success())
            .unwrap_or(false)
    })
}

fn cache_dir() -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("elf-cache");
    fs::create_dir_all(&dir).expect("create elf cache dir");
    dir
}

fn cache_key(parts: &[&str]) -> String {
    let mut hasher = DefaultHasher::new();
    parts.hash(&mut hasher);
    format!("{:016x}", hasher.finish())
}

/// Compiles `source` into `out` with `cc` and the extra `args`.
fn compile(cc: &str, source: &str, args: &[String], out: &Path) {
    let dir = tempfile::tempdir().expect("tempdir");
    let c = dir.path().join("src.c");
    fs::write(&c, source).unwrap();
    // Unique per call: tests in one process compile the same fixture concurrently.
    static CALLS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let call = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let tmp = out.with_extension(format!("tmp{}-{call}", std::process::id()));
    let output = Command::new(cc)
        .args(args)
        .arg("-o")
        .arg(&tmp)
        .arg(&c)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cc}: {e}"));
    assert!(
        output.status.success(),
        "{cc} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    fs::rename(&tmp, out).unwrap();
}

/// A real shared object for `arch` with SONAME `soname` and a DT_NEEDED entry
/// for each of `needed` (each a soname, e.g. `libnvidia-ml.so.1`).
///
/// Panics with a clear message when no compiler for `arch` is installed: run
/// `.ci/setup` first.
pub fn shared_object(arch: Arch, soname: &str, needed: &[&str]) -> Vec<u8> {
    let cc = compiler(arch).unwrap_or_else(|| {
        panic!("no C compiler for {arch}: run .ci/setup (installs gcc-aarch64-linux-gnu)")
    });
    let mut key_parts = vec!["so", arch.as_str(), soname];
    key_parts.extend_from_slice(needed);
    let out = cache_dir().join(format!("{}.so", cache_key(&key_parts)));
    if !out.exists() {
        let deps = tempfile::tempdir().unwrap();
        let mut args: Vec<String> = vec![
            "-shared".into(),
            "-fPIC".into(),
            "-nostdlib".into(),
            format!("-Wl,-soname,{soname}"),
            "-Wl,--no-as-needed".into(),
        ];
        // Each dependency is itself a tiny library carrying that soname, so
        // the linker records exactly that name in DT_NEEDED.
        for (i, dep) in needed.iter().enumerate() {
            let dep_path = deps.path().join(format!("dep{i}.so"));
            compile(
                cc,
                "int accelready_dep(void) { return 0; }\n",
                &[
                    "-shared".into(),
                    "-fPIC".into(),
                    "-nostdlib".into(),
                    format!("-Wl,-soname,{dep}"),
                ],
                &dep_path,
            );
            args.push(dep_path.display().to_string());
        }
        let symbol = soname.replace(['.', '-'], "_");
        compile(
            cc,
            &format!("int {symbol}_probe(void) {{ return 42; }}\n"),
            &args,
            &out,
        );
    }
    fs::read(&out).unwrap()
}

/// A real (static, freestanding) executable for `arch`, e.g. `nv-hostengine`.
pub fn executable(arch: Arch) -> Vec<u8> {
    let cc = compiler(arch).unwrap_or_else(|| {
        panic!("no C compiler for {arch}: run .ci/setup (installs gcc-aarch64-linux-gnu)")
    });
    let out = cache_dir().join(format!("{}.exe", cache_key(&["exe", arch.as_str()])));
    if !out.exists() {
        compile(
            cc,
            "void _start(void) { for (;;) {} }\n",
            &["-static".into(), "-nostdlib".into()],
            &out,
        );
    }
    fs::read(&out).unwrap()
}
