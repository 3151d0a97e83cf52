//! The fixture builder makes what the probes expect: real ELF files.

mod common;

use accelready::probe::dcgm::ENTRY_POINTS;
use accelready::probe::elf::{self, ElfType};
use accelready::Arch;

/// What the probes and `unpack` ask of a library: which entry points it
/// does not export.
fn missing_entry_points(bytes: &[u8]) -> Vec<String> {
    elf::missing_exports(bytes, &ENTRY_POINTS).unwrap()
}

#[test]
fn cross_compiled_shared_objects_have_soname_needed_and_machine() {
    for arch in Arch::ALL {
        let bytes =
            common::elf::shared_object(arch, "libdcgm.so.4", &["libnvidia-ml.so.1", "libdl.so.2"]);
        let info = elf::inspect(&bytes[..]).unwrap();
        assert_eq!(info.arch, Some(arch));
        assert_eq!(info.elf_type, ElfType::SharedObject);
        assert_eq!(info.soname.as_deref(), Some("libdcgm.so.4"));
        assert_eq!(info.needed, ["libnvidia-ml.so.1", "libdl.so.2"]);
        // A DCGM SONAME exports DCGM's entry points, as NVIDIA's library does.
        assert_eq!(missing_entry_points(&bytes), Vec::<String>::new(), "{arch}");
        // Any other SONAME exports none of them.
        let other = common::elf::shared_object(arch, "libdcgmmodulehealth.so.4", &[]);
        assert_eq!(missing_entry_points(&other), ENTRY_POINTS, "{arch}");
        // Or exactly what is asked for.
        let some = common::elf::shared_object_exporting(arch, "libz.so.1", &[], &["dcgmInit"]);
        assert_eq!(missing_entry_points(&some), &ENTRY_POINTS[1..], "{arch}");
    }
}

#[test]
fn executables_are_not_shared_objects() {
    for arch in Arch::ALL {
        let info = elf::inspect(&common::elf::executable(arch)[..]).unwrap();
        assert_eq!(info.arch, Some(arch));
        assert!(info.elf_type.is_executable(), "{arch}: {:?}", info.elf_type);
    }
}

#[test]
fn builtin_minimal_writer_makes_what_the_compiler_makes() {
    for arch in Arch::ALL {
        let bytes = common::elf::minimal_shared_object(
            arch,
            "libdcgm.so.4",
            &["libnvidia-ml.so.1", "libdl.so.2"],
        );
        let info = elf::inspect(&bytes[..]).unwrap();
        assert_eq!(info.arch, Some(arch));
        assert_eq!(info.elf_type, ElfType::SharedObject);
        assert_eq!(info.soname.as_deref(), Some("libdcgm.so.4"));
        assert_eq!(info.needed, ["libnvidia-ml.so.1", "libdl.so.2"]);
        assert_eq!(missing_entry_points(&bytes), Vec::<String>::new(), "{arch}");
        let bytes = common::elf::minimal_shared_object_exporting(
            arch,
            "libdcgm.so.4",
            &[],
            &["dcgmShutdown", "dcgmInit"],
        );
        assert_eq!(
            missing_entry_points(&bytes),
            [
                "dcgmConnect_v2",
                "dcgmDisconnect",
                "dcgmStartEmbedded",
                "dcgmStopEmbedded"
            ]
        );
        let bytes = common::elf::minimal_shared_object(arch, "libnvidia-ml.so.1", &[]);
        assert_eq!(missing_entry_points(&bytes), ENTRY_POINTS);

        let info = elf::inspect(&common::elf::minimal_executable(arch)[..]).unwrap();
        assert_eq!(info.arch, Some(arch));
        assert_eq!(info.elf_type, ElfType::Executable);
    }
}

#[test]
fn builtin_minimal_shared_object_is_valid_for_readelf() {
    // binutils' readelf is an independent reader; skip only where it is absent.
    let Ok(probe) = std::process::Command::new("readelf")
        .arg("--version")
        .output()
    else {
        eprintln!("note: readelf not installed; skipping the independent check");
        return;
    };
    assert!(probe.status.success());
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("libdcgm.so.4");
    let bytes = common::elf::minimal_shared_object(Arch::Aarch64, "libdcgm.so.4", &["libc.so.6"]);
    std::fs::write(&path, bytes).unwrap();
    let out = std::process::Command::new("readelf")
        .args(["-W", "-h", "-d", "--dyn-syms"])
        .arg(&path)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && out.stderr.is_empty(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("DYN (Shared object file)"), "{text}");
    assert!(text.contains("AArch64"), "{text}");
    assert!(text.contains("Library soname: [libdcgm.so.4]"), "{text}");
    assert!(text.contains("Shared library: [libc.so.6]"), "{text}");
    for symbol in ENTRY_POINTS {
        let line = text
            .lines()
            .find(|line| line.ends_with(&format!(" {symbol}")))
            .unwrap_or_else(|| panic!("{symbol} not in readelf --dyn-syms:\n{text}"));
        assert!(
            line.contains("FUNC") && line.contains("GLOBAL") && !line.contains("UND"),
            "{line}"
        );
    }
}
