//! Bundle unpacking on arbitrary bytes. The first byte picks how the rest is
//! presented (as is, or as the tar inside a .tar.gz/.tar.xz/.tar.zst or a .deb
//! with data.tar, data.tar.gz, data.tar.xz or data.tar.zst), the target
//! architecture and whether nv-hostengine is kept; small limits make them
//! reachable. Whatever `unpack` answers, nothing may be written outside the
//! staging directory, no symlink in it may point out of it, and the entry and
//! byte limits hold.
#![no_main]

use std::fs;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Component, Path, PathBuf};

use accelready::bundle::unpack::{unpack, UnpackOptions};
use accelready::bundle::Limits;
use accelready::Arch;
use libfuzzer_sys::fuzz_target;

const LIMITS: Limits = Limits {
    max_download_bytes: 1 << 20,
    max_entries: 64,
    max_unpacked_bytes: 256 << 10,
};

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    encoder.write_all(data).expect("gzip to memory");
    encoder.finish().expect("gzip to memory")
}

fn xz(data: &[u8]) -> Vec<u8> {
    let mut encoder = xz2::write::XzEncoder::new(Vec::new(), 0);
    encoder.write_all(data).expect("xz to memory");
    encoder.finish().expect("xz to memory")
}

fn zstd(data: &[u8]) -> Vec<u8> {
    zstd::encode_all(data, 1).expect("zstd to memory")
}

fn deb(member: &str, data: &[u8]) -> Vec<u8> {
    let mut builder = ar::Builder::new(Vec::new());
    for (name, body) in [
        ("debian-binary", &b"2.0\n"[..]),
        ("control.tar.gz", &gzip(b"")[..]),
        (member, data),
    ] {
        let header = ar::Header::new(name.as_bytes().to_vec(), body.len() as u64);
        builder.append(&header, body).expect("ar to memory");
    }
    builder.into_inner().expect("ar to memory")
}

/// Every path under `dir` (not following symlinks).
fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        out.push(path.clone());
        if fs::symlink_metadata(&path).is_ok_and(|m| m.is_dir()) {
            walk(&path, out);
        }
    }
}

/// Where a symlink at `link` (inside `root`) points, resolved lexically;
/// `None` when it climbs above `root` or is absolute.
fn lexical_target(root: &Path, link: &Path, target: &Path) -> Option<PathBuf> {
    let mut at: Vec<Component> = link
        .parent()?
        .strip_prefix(root)
        .ok()?
        .components()
        .collect();
    for part in target.components() {
        match part {
            Component::Normal(_) => at.push(part),
            Component::CurDir => {}
            Component::ParentDir => {
                at.pop()?;
            }
            Component::RootDir | Component::Prefix(_) => return None,
        }
    }
    Some(root.join(at.iter().collect::<PathBuf>()))
}

fuzz_target!(|data: &[u8]| {
    let Some((&selector, payload)) = data.split_first() else {
        return;
    };
    let bundle = match selector % 8 {
        0 => payload.to_vec(),
        1 => gzip(payload),
        2 => xz(payload),
        3 => zstd(payload),
        4 => deb("data.tar", payload),
        5 => deb("data.tar.gz", &gzip(payload)),
        6 => deb("data.tar.xz", &xz(payload)),
        _ => deb("data.tar.zst", &zstd(payload)),
    };
    let options = UnpackOptions {
        arch: if selector & 8 == 0 {
            Arch::X86_64
        } else {
            Arch::Aarch64
        },
        with_hostengine: selector & 16 != 0,
        limits: LIMITS,
    };
    let root = tempfile::tempdir().expect("tempdir");
    let archive = root.path().join("bundle");
    fs::write(&archive, &bundle).expect("write the bundle");
    let staging = root.path().join("staging");

    let result = unpack(&archive, &staging, &options);

    // Nothing but the bundle and the staging directory at the top.
    let mut top: Vec<_> = fs::read_dir(root.path())
        .expect("read the temp root")
        .flatten()
        .map(|e| e.file_name())
        .collect();
    top.sort();
    assert!(top.len() <= 2, "written outside staging: {top:?}");
    let mut paths = Vec::new();
    walk(&staging, &mut paths);
    let mut files = 0u64;
    let mut bytes = 0u64;
    for path in &paths {
        let meta = fs::symlink_metadata(path).expect("stat");
        if meta.file_type().is_symlink() {
            let target = fs::read_link(path).expect("readlink");
            let resolved = lexical_target(&staging, path, &target);
            assert!(
                resolved.is_some_and(|r| r.starts_with(&staging)),
                "{} -> {} leaves staging",
                path.display(),
                target.display()
            );
        } else if meta.is_file() {
            files += 1;
            bytes += meta.len();
            assert_eq!(meta.permissions().mode() & 0o6000, 0, "setuid/setgid kept");
        }
    }
    assert!(
        files <= LIMITS.max_entries,
        "{files} files, limit {}",
        LIMITS.max_entries
    );
    assert!(
        bytes <= LIMITS.max_unpacked_bytes,
        "{bytes} bytes, limit {}",
        LIMITS.max_unpacked_bytes
    );
    if let Ok(unpacked) = result {
        assert!(unpacked.files.iter().any(|f| f
            .soname
            .as_deref()
            .is_some_and(|s| s.starts_with("libdcgm.so."))));
        for link in &unpacked.links {
            let name = link.path.strip_prefix("lib/").expect("links live in lib/");
            assert!(
                !name.contains('/') && !link.target.contains('/'),
                "{link:?}"
            );
        }
    }
});
