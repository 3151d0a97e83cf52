//! `check`'s ELF reader on arbitrary bytes: an `ElfInfo` or an error, never a
//! panic, and an accepted file names a consistent architecture.
#![no_main]

use accelready::probe::elf;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(info) = elf::inspect(data) {
        if let Some(arch) = info.arch {
            assert_eq!(arch.elf_machine(), info.machine, "{info:?}");
        }
    }
});
