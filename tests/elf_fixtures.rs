//! The fixture builder makes what the probes expect: real ELF files.

mod common;

use accelready::probe::elf::{self, ElfType};
use accelready::Arch;

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
