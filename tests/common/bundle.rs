//! DCGM bundles built as real files: `.deb` packages made by `dpkg-deb` with
//! NVIDIA's layout, tarballs in each compression, and hostile tarballs.
//!
//! ```ignore
//! let deb = bundle::deb(Arch::Aarch64, &bundle::dcgm_members(Arch::Aarch64), "xz");
//! let tgz = bundle::compress(&bundle::tar(&members), Compression::Gzip);
//! ```

use std::fs;
use std::io::Write;
use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::Path;
use std::process::Command;

use accelready::Arch;
use sha2::{Digest, Sha256};

use super::elf;

/// The DCGM version the fixtures pretend to be.
pub const VERSION: &str = "4.6.1";

/// One archive member. Paths are written into the archive exactly as given.
#[derive(Debug, Clone)]
pub struct Member {
    pub path: String,
    pub kind: Kind,
}

#[derive(Debug, Clone)]
pub enum Kind {
    File { data: Vec<u8>, mode: u32 },
    Dir,
    Symlink(String),
    Hardlink(String),
    Fifo,
    CharDevice,
}

pub fn file(path: &str, data: Vec<u8>) -> Member {
    Member {
        path: path.into(),
        kind: Kind::File { data, mode: 0o644 },
    }
}

pub fn link(path: &str, target: &str) -> Member {
    Member {
        path: path.into(),
        kind: Kind::Symlink(target.into()),
    }
}

/// What NVIDIA's `datacenter-gpu-manager-4-core` puts under `usr/` (the parts
/// that matter), for `arch`: libdcgm with its soname link, modules (one with a
/// full-version file, one without), nv-hostengine, dcgmi and a doc file.
pub fn dcgm_members(arch: Arch) -> Vec<Member> {
    let lib = format!("usr/lib/{}", arch.gnu_triplet());
    let so = |soname: &str| elf::shared_object(arch, soname, &["libnvidia-ml.so.1"]);
    vec![
        Member {
            path: "usr/".into(),
            kind: Kind::Dir,
        },
        file(&format!("{lib}/libdcgm.so.{VERSION}"), so("libdcgm.so.4")),
        link(
            &format!("{lib}/libdcgm.so.4"),
            &format!("libdcgm.so.{VERSION}"),
        ),
        file(
            &format!("{lib}/libdcgmmodulehealth.so.{VERSION}"),
            so("libdcgmmodulehealth.so.4"),
        ),
        link(
            &format!("{lib}/libdcgmmodulehealth.so.4"),
            &format!("libdcgmmodulehealth.so.{VERSION}"),
        ),
        file(
            &format!("{lib}/libdcgmmoduleconfig.so.4"),
            so("libdcgmmoduleconfig.so.4"),
        ),
        Member {
            path: "usr/bin/nv-hostengine".into(),
            kind: Kind::File {
                data: elf::executable(arch),
                mode: 0o755,
            },
        },
        Member {
            path: "usr/bin/dcgmi".into(),
            kind: Kind::File {
                data: elf::executable(arch),
                mode: 0o755,
            },
        },
        file(
            "usr/share/doc/datacenter-gpu-manager-4-core/copyright",
            b"NVIDIA\n".to_vec(),
        ),
    ]
}

/// A tar archive of `members`, written with raw headers so that hostile names
/// (absolute, `..`) survive.
pub fn tar(members: &[Member]) -> Vec<u8> {
    let mut builder = ::tar::Builder::new(Vec::new());
    for member in members {
        let mut header = ::tar::Header::new_gnu();
        let name = member.path.as_bytes();
        header.as_old_mut().name[..name.len()].copy_from_slice(name);
        header.set_mtime(0);
        header.set_uid(0);
        header.set_gid(0);
        let (kind, mode, data, target): (::tar::EntryType, u32, &[u8], Option<&str>) =
            match &member.kind {
                Kind::File { data, mode } => (::tar::EntryType::Regular, *mode, data, None),
                Kind::Dir => (::tar::EntryType::Directory, 0o755, &[], None),
                Kind::Symlink(t) => (::tar::EntryType::Symlink, 0o777, &[], Some(t)),
                Kind::Hardlink(t) => (::tar::EntryType::Link, 0o644, &[], Some(t)),
                Kind::Fifo => (::tar::EntryType::Fifo, 0o644, &[], None),
                Kind::CharDevice => (::tar::EntryType::Char, 0o644, &[], None),
            };
        header.set_entry_type(kind);
        header.set_mode(mode);
        header.set_size(data.len() as u64);
        if let Some(target) = target {
            let bytes = target.as_bytes();
            header.as_old_mut().linkname[..bytes.len()].copy_from_slice(bytes);
        }
        header.set_cksum();
        builder.append(&header, data).expect("append tar member");
    }
    builder.into_inner().expect("finish tar")
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compression {
    Gzip,
    Xz,
    Zstd,
}

impl Compression {
    pub const ALL: [Compression; 3] = [Compression::Gzip, Compression::Xz, Compression::Zstd];

    /// The name `dpkg-deb -Z` uses.
    pub fn dpkg_name(self) -> &'static str {
        match self {
            Compression::Gzip => "gzip",
            Compression::Xz => "xz",
            Compression::Zstd => "zstd",
        }
    }
}

pub fn compress(bytes: &[u8], compression: Compression) -> Vec<u8> {
    match compression {
        Compression::Gzip => {
            let mut encoder =
                flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
            encoder.write_all(bytes).unwrap();
            encoder.finish().unwrap()
        }
        Compression::Xz => {
            let mut encoder = xz2::write::XzEncoder::new(Vec::new(), 1);
            encoder.write_all(bytes).unwrap();
            encoder.finish().unwrap()
        }
        Compression::Zstd => zstd::encode_all(bytes, 1).unwrap(),
    }
}

/// A real `.deb` built by `dpkg-deb --build -Z<compression>` from `members`
/// (files, directories and symlinks only).
pub fn deb(arch: Arch, members: &[Member], compression: Compression) -> Vec<u8> {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("pkg");
    fs::create_dir_all(root.join("DEBIAN")).unwrap();
    fs::write(
        root.join("DEBIAN/control"),
        format!(
            "Package: datacenter-gpu-manager-4-core\nVersion: 1:{VERSION}\nArchitecture: {}\nMaintainer: NVIDIA <cudatools@nvidia.com>\nDescription: NVIDIA DCGM (test fixture)\n",
            arch.oci_name()
        ),
    )
    .unwrap();
    for member in members {
        let path = root.join(member.path.trim_start_matches("./"));
        if let Some(parent) = path.parent() {
            fs::create_dir_all(parent).unwrap();
        }
        match &member.kind {
            Kind::File { data, mode } => {
                fs::write(&path, data).unwrap();
                fs::set_permissions(&path, fs::Permissions::from_mode(*mode)).unwrap();
            }
            Kind::Dir => fs::create_dir_all(&path).unwrap(),
            Kind::Symlink(target) => symlink(target, &path).unwrap(),
            other => panic!("dpkg-deb fixtures hold no {other:?}"),
        }
    }
    let out = dir.path().join("out.deb");
    let output = Command::new("dpkg-deb")
        .arg(format!("-Z{}", compression.dpkg_name()))
        .args(["--root-owner-group", "--build"])
        .arg(&root)
        .arg(&out)
        .output()
        .expect("run dpkg-deb (install dpkg: .ci/setup)");
    assert!(
        output.status.success(),
        "dpkg-deb failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    fs::read(out).unwrap()
}

pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// What `bootstrap/build --bundle` does to put a bundle in the image: the
/// binary `bin` runs `provision --url file://<file>` with `<root>` as its
/// host root and `/dcgm` as the install directory, and the lock file is
/// dropped. Panics with provision's stderr when it refuses the bundle.
pub fn lay_out_in_image(bin: &str, root: &Path, file: &Path, sha256: &str, arch: Arch) {
    let output = Command::new(bin)
        .arg("--host-root")
        .arg(root)
        .args(["provision", "--json", "--no-expose", "--with-hostengine"])
        .args(["--arch", arch.as_str(), "--install-dir", "/dcgm"])
        .args(["--url", &format!("file://{}", file.display())])
        .args(["--sha256", sha256])
        .env("RUST_LOG", "warn")
        .output()
        .expect("run accelready provision");
    assert!(
        output.status.success(),
        "provision refused {}: {}",
        file.display(),
        String::from_utf8_lossy(&output.stderr)
    );
    fs::remove_file(root.join("dcgm/.lock")).expect("provision leaves its lock file");
}
