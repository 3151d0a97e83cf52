//! `check`'s ELF reader on arbitrary bytes: an `ElfInfo` or an error, never a
//! panic, and an accepted file names a consistent architecture; the dynamic
//! symbol reader that decides whether a file is DCGM, likewise.
#![no_main]

use accelready::probe::dcgm::ENTRY_POINTS;
use accelready::probe::elf;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(info) = elf::inspect(data) {
        if let Some(arch) = info.arch {
            assert_eq!(arch.elf_machine(), info.machine, "{info:?}");
        }
    }
    if let Ok(missing) = elf::missing_exports(data, &ENTRY_POINTS) {
        assert!(missing.len() <= ENTRY_POINTS.len(), "{missing:?}");
        assert!(missing.iter().all(|m| ENTRY_POINTS.contains(&m.as_str())));
    }
});
