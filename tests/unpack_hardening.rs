//! Regression tests for holes in `bundle::unpack` found while writing its
//! fuzz target (`fuzz/fuzz_targets/unpack.rs`): what a hostile but
//! digest-valid bundle could do besides what `tests/provision.rs` covers.

mod common;

use std::fs;
use std::path::Path;

use accelready::bundle::unpack::{unpack, UnpackError, UnpackOptions};
use accelready::bundle::Limits;
use accelready::Arch;
use common::bundle::{self, Kind, Member};
use common::elf;

fn options(limits: Limits) -> UnpackOptions {
    UnpackOptions {
        arch: Arch::X86_64,
        with_hostengine: false,
        limits,
    }
}

/// Every path under `dir`, relative, sorted.
fn tree(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(at) = stack.pop() {
        for entry in fs::read_dir(&at).unwrap() {
            let path = entry.unwrap().path();
            out.push(path.strip_prefix(dir).unwrap().display().to_string());
            if fs::symlink_metadata(&path).unwrap().is_dir() {
                stack.push(path);
            }
        }
    }
    out.sort();
    out
}

/// `elf` with the string `from` in its string tables replaced by `to`
/// (NUL-padded; `to` must not be longer): a SONAME no linker would write.
fn with_soname(mut elf: Vec<u8>, from: &str, to: &str) -> Vec<u8> {
    assert!(to.len() <= from.len());
    let mut replacement = to.as_bytes().to_vec();
    replacement.resize(from.len(), 0);
    let mut replaced = 0;
    let mut at = 0;
    while let Some(i) = elf[at..]
        .windows(from.len())
        .position(|w| w == from.as_bytes())
    {
        elf[at + i..at + i + from.len()].copy_from_slice(&replacement);
        at += i + from.len();
        replaced += 1;
    }
    assert!(replaced > 0, "'{from}' not found in the ELF file");
    elf
}

/// A library whose ELF SONAME is a path became a symlink created at
/// `lib/<soname>`: `../../escaped` landed outside the staging directory.
#[test]
fn fuzz_unpack_soname_outside_staging() {
    let dir = tempfile::tempdir().unwrap();
    let archive = dir.path().join("bundle.tar");
    let members = [
        bundle::file(
            "usr/lib/x86_64-linux-gnu/libdcgm.so.4",
            elf::shared_object(Arch::X86_64, "libdcgm.so.4", &[]),
        ),
        bundle::file(
            "usr/lib/x86_64-linux-gnu/libdcgmmodulehealth.so.4",
            with_soname(
                elf::shared_object(Arch::X86_64, "libdcgmmodulepwn.so.4", &[]),
                "libdcgmmodulepwn.so.4",
                "../../escaped",
            ),
        ),
    ];
    fs::write(&archive, bundle::tar(&members)).unwrap();
    let staging = dir.path().join("staging");

    let result = unpack(&archive, &staging, &options(Limits::default()));

    match result {
        Err(UnpackError::BadSoname { soname, .. }) => assert_eq!(soname, "../../escaped"),
        other => panic!("expected BadSoname, got {other:?}"),
    }
    assert_eq!(
        tree(dir.path())
            .iter()
            .filter(|p| p.contains("escaped"))
            .count(),
        0
    );
    assert!(fs::symlink_metadata(dir.path().join("escaped")).is_err());
}

/// Hardlink entries declare size 0 but are written as full copies: many of
/// them to one library wrote far more than `max_unpacked_bytes`.
#[test]
fn fuzz_unpack_hardlink_copies_exceed_byte_limit() {
    let dir = tempfile::tempdir().unwrap();
    let archive = dir.path().join("bundle.tar");
    let lib = "usr/lib/x86_64-linux-gnu";
    let so = elf::shared_object(Arch::X86_64, "libdcgm.so.4", &[]);
    let size = so.len() as u64;
    let mut members = vec![bundle::file(&format!("{lib}/libdcgm.so.4"), so)];
    for i in 0..20 {
        members.push(Member {
            path: format!("{lib}/libdcgmmodule{i}.so.4"),
            kind: Kind::Hardlink(format!("{lib}/libdcgm.so.4")),
        });
    }
    fs::write(&archive, bundle::tar(&members)).unwrap();
    let staging = dir.path().join("staging");
    let limit = size * 4;
    let limits = Limits {
        max_unpacked_bytes: limit,
        ..Limits::default()
    };

    let result = unpack(&archive, &staging, &options(limits));

    assert!(
        matches!(result, Err(UnpackError::TooManyBytes { limit: l, .. }) if l == limit),
        "{result:?}"
    );
    let written: u64 = tree(&staging)
        .iter()
        .map(|p| fs::symlink_metadata(staging.join(p)).unwrap())
        .filter(|m| m.is_file())
        .map(|m| m.len())
        .sum();
    assert!(written <= limit, "{written} bytes written, limit {limit}");
}

/// A GNU sparse entry declares the bytes it stores, not the ones it unpacks
/// to (512 stored bytes here would be a 1 MiB file). unpack keeps regular
/// files only, so it is never written; should sparse files ever be kept, the
/// written-bytes budget must hold for them too.
#[test]
fn sparse_entries_are_never_extracted() {
    const REAL_SIZE: u64 = 1 << 20;
    let octal = |value: u64| format!("{value:011o}\0").into_bytes();
    let mut header = tar::Header::new_gnu();
    header
        .set_path("usr/lib/x86_64-linux-gnu/libdcgm.so.4")
        .unwrap();
    header.set_entry_type(tar::EntryType::GNUSparse);
    header.set_mode(0o644);
    header.set_size(512);
    let gnu = header.as_gnu_mut().unwrap();
    gnu.sparse[0]
        .offset
        .copy_from_slice(&octal(REAL_SIZE - 512));
    gnu.sparse[0].numbytes.copy_from_slice(&octal(512));
    gnu.realsize.copy_from_slice(&octal(REAL_SIZE));
    header.set_cksum();
    let mut builder = tar::Builder::new(Vec::new());
    builder.append(&header, &[0x7fu8; 512][..]).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let archive = dir.path().join("bundle.tar");
    fs::write(&archive, builder.into_inner().unwrap()).unwrap();
    let staging = dir.path().join("staging");
    let limit = 64 << 10;
    let limits = Limits {
        max_unpacked_bytes: limit,
        ..Limits::default()
    };

    let result = unpack(&archive, &staging, &options(limits));

    assert!(
        matches!(
            result,
            Err(UnpackError::NoLibdcgm { .. } | UnpackError::TooManyBytes { .. })
        ),
        "{result:?}"
    );
    let written = fs::metadata(staging.join("lib/libdcgm.so.4")).map_or(0, |m| m.len());
    assert!(written <= limit, "{written} bytes written, limit {limit}");
}

/// The tar crate reads a GNU long-name header whole into memory and never
/// hands it out as an entry: a few MB of compressed bundle could make it
/// gigabytes. The stream is metered against the declared sizes, so an
/// extension header larger than an entry's allowance is refused.
#[test]
fn a_huge_long_name_header_is_refused_by_the_byte_limit() {
    const NAME_BYTES: usize = 8 << 20;
    let mut builder = tar::Builder::new(Vec::new());
    let mut long_name = tar::Header::new_gnu();
    long_name.set_path("././@LongLink").unwrap();
    long_name.set_entry_type(tar::EntryType::GNULongName);
    long_name.set_size(NAME_BYTES as u64);
    long_name.set_mode(0o644);
    long_name.set_cksum();
    builder
        .append(&long_name, &vec![b'a'; NAME_BYTES][..])
        .unwrap();
    let mut file = tar::Header::new_gnu();
    file.set_path("usr/lib/x").unwrap();
    file.set_size(4);
    file.set_mode(0o644);
    file.set_cksum();
    builder.append(&file, &b"data"[..]).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let archive = dir.path().join("bundle.tar");
    fs::write(&archive, builder.into_inner().unwrap()).unwrap();
    let limits = Limits {
        max_unpacked_bytes: 1 << 20,
        max_entries: 10,
        ..Limits::default()
    };

    let result = unpack(&archive, &dir.path().join("staging"), &options(limits));

    match result {
        Err(UnpackError::TooManyBytes { member, limit }) => {
            assert_eq!(limit, 1 << 20);
            assert!(member.contains("headers after"), "{member}");
        }
        other => panic!("{other:?}"),
    }
}
