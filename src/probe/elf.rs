//! ELF inspection: what a shared object is (class, machine, type, SONAME,
//! DT_NEEDED) and which symbols it exports, read with the `object` crate.
//!
//! [`inspect`] and [`missing_exports`] are pure over anything that implements
//! [`object::ReadRef`]; [`inspect_file`] and [`missing_exports_in_file`] read
//! lazily through [`object::ReadCache`], so only the headers, the section
//! table, the dynamic section and (for exports) the dynamic symbol table with
//! its string table are read — never the whole (possibly huge, possibly
//! hostile) file.

use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};

use object::elf;
use object::read::elf::{Dyn, FileHeader, ProgramHeader, SectionHeader, Sym};
use object::{Endianness, ReadCache, ReadRef, SectionIndex};
use serde::Serialize;

use crate::arch::Arch;

/// The largest dynamic symbol table (or its string table) [`missing_exports`]
/// reads. NVIDIA's `libdcgm.so.4` needs well under a megabyte of both; a
/// section header that claims more is not a library we want to page in.
pub const MAX_SYMBOL_TABLE_BYTES: u64 = 64 << 20;

/// Offsets into `e_ident` (System V ABI).
const EI_CLASS: usize = 4;
#[cfg(test)]
const EI_DATA: usize = 5;

/// ELF class: 32- or 64-bit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ElfClass {
    Elf32,
    Elf64,
}

/// ELF object type (`e_type`), with PIE executables told apart from libraries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ElfType {
    SharedObject,
    /// `ET_DYN` with `DF_1_PIE` or a program interpreter: an executable.
    PieExecutable,
    Executable,
    Relocatable,
    Core,
    Other(u16),
}

impl ElfType {
    pub fn is_shared_object(self) -> bool {
        self == ElfType::SharedObject
    }

    pub fn is_executable(self) -> bool {
        matches!(self, ElfType::Executable | ElfType::PieExecutable)
    }
}

/// What an ELF file says about itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ElfInfo {
    pub class: ElfClass,
    /// Raw `e_machine` (183 AArch64, 62 x86-64, ...).
    pub machine: u16,
    /// `machine` as an architecture we support, if it is one.
    pub arch: Option<Arch>,
    #[serde(rename = "type")]
    pub elf_type: ElfType,
    pub soname: Option<String>,
    pub needed: Vec<String>,
}

/// Why bytes are not an ELF file we can read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ElfError {
    #[error("not an ELF file (no \\x7fELF magic)")]
    NotElf,
    #[error("malformed ELF file: {0}")]
    Malformed(String),
}

/// Errors of [`inspect_file`], naming the file.
#[derive(Debug, thiserror::Error)]
pub enum InspectFileError {
    #[error("cannot open '{path}'")]
    Open {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("'{path}': {source}")]
    Elf {
        path: PathBuf,
        #[source]
        source: ElfError,
    },
}

fn malformed(e: object::read::Error) -> ElfError {
    ElfError::Malformed(e.to_string())
}

/// Inspects an ELF file given as bytes (or any lazy reader).
pub fn inspect<'data, R: ReadRef<'data>>(data: R) -> Result<ElfInfo, ElfError> {
    let ident = data.read_bytes_at(0, 16).map_err(|()| ElfError::NotElf)?;
    if ident[..4] != elf::ELFMAG {
        return Err(ElfError::NotElf);
    }
    match ident[EI_CLASS] {
        elf::ELFCLASS64 => inspect_class::<elf::FileHeader64<Endianness>, R>(data, ElfClass::Elf64),
        elf::ELFCLASS32 => inspect_class::<elf::FileHeader32<Endianness>, R>(data, ElfClass::Elf32),
        other => Err(ElfError::Malformed(format!("unknown ELF class {other}"))),
    }
}

/// Inspects the ELF file at `path`, reading only the parts it needs.
pub fn inspect_file(path: &Path) -> Result<ElfInfo, InspectFileError> {
    let file = File::open(path).map_err(|source| InspectFileError::Open {
        path: path.to_path_buf(),
        source,
    })?;
    let cache = ReadCache::new(file);
    inspect(&cache).map_err(|source| InspectFileError::Elf {
        path: path.to_path_buf(),
        source,
    })
}

/// Which of `wanted` the ELF file does not export: a name counts when
/// `.dynsym` holds it as a defined (not `SHN_UNDEF`), global or weak symbol,
/// which is what `dlsym` and the dynamic linker resolve. A file without a
/// `.dynsym` section exports nothing. The result keeps `wanted`'s order.
pub fn missing_exports<'data, R: ReadRef<'data>>(
    data: R,
    wanted: &[&str],
) -> Result<Vec<String>, ElfError> {
    let ident = data.read_bytes_at(0, 16).map_err(|()| ElfError::NotElf)?;
    if ident[..4] != elf::ELFMAG {
        return Err(ElfError::NotElf);
    }
    match ident[EI_CLASS] {
        elf::ELFCLASS64 => missing_exports_class::<elf::FileHeader64<Endianness>, R>(data, wanted),
        elf::ELFCLASS32 => missing_exports_class::<elf::FileHeader32<Endianness>, R>(data, wanted),
        other => Err(ElfError::Malformed(format!("unknown ELF class {other}"))),
    }
}

/// [`missing_exports`] of the file at `path`, reading only the section table,
/// `.dynsym` and its string table.
pub fn missing_exports_in_file(
    path: &Path,
    wanted: &[&str],
) -> Result<Vec<String>, InspectFileError> {
    let file = File::open(path).map_err(|source| InspectFileError::Open {
        path: path.to_path_buf(),
        source,
    })?;
    let cache = ReadCache::new(file);
    missing_exports(&cache, wanted).map_err(|source| InspectFileError::Elf {
        path: path.to_path_buf(),
        source,
    })
}

fn missing_exports_class<'data, H, R>(data: R, wanted: &[&str]) -> Result<Vec<String>, ElfError>
where
    H: FileHeader<Endian = Endianness>,
    R: ReadRef<'data>,
{
    let header = H::parse(data).map_err(malformed)?;
    let endian = header.endian().map_err(malformed)?;
    let sections = header.sections(endian, data).map_err(malformed)?;
    let mut found = vec![false; wanted.len()];
    let dynsym = sections
        .iter()
        .find(|section| section.sh_type(endian) == elf::SHT_DYNSYM);
    if let Some(dynsym) = dynsym {
        let strtab = sections
            .section(SectionIndex(dynsym.sh_link(endian) as usize))
            .map_err(malformed)?;
        for (what, section) in [
            ("dynamic symbol table", dynsym),
            ("its string table", strtab),
        ] {
            let size: u64 = section.sh_size(endian).into();
            if size > MAX_SYMBOL_TABLE_BYTES {
                return Err(ElfError::Malformed(format!(
                    "{what} claims {size} bytes, more than the {MAX_SYMBOL_TABLE_BYTES} read"
                )));
            }
        }
        let symbols: &[H::Sym] = dynsym.data_as_array(endian, data).map_err(malformed)?;
        let strings = strtab.data(endian, data).map_err(malformed)?;
        for symbol in symbols {
            let bind = symbol.st_bind();
            if symbol.st_shndx(endian) == elf::SHN_UNDEF
                || (bind != elf::STB_GLOBAL && bind != elf::STB_WEAK)
            {
                continue;
            }
            let Some(rest) = strings.get(symbol.st_name(endian) as usize..) else {
                return Err(ElfError::Malformed(
                    "a dynamic symbol's name lies outside its string table".into(),
                ));
            };
            let name = rest.split(|&byte| byte == 0).next().unwrap_or_default();
            for (index, want) in wanted.iter().enumerate() {
                found[index] |= name == want.as_bytes();
            }
        }
    }
    Ok(wanted
        .iter()
        .zip(found)
        .filter(|(_, found)| !found)
        .map(|(name, _)| (*name).to_owned())
        .collect())
}

fn inspect_class<'data, H, R>(data: R, class: ElfClass) -> Result<ElfInfo, ElfError>
where
    H: FileHeader<Endian = Endianness>,
    R: ReadRef<'data>,
{
    let header = H::parse(data).map_err(malformed)?;
    let endian = header.endian().map_err(malformed)?;
    let machine = header.e_machine(endian);
    let e_type = header.e_type(endian);

    let mut soname = None;
    let mut needed = Vec::new();
    let mut flags_1 = 0u64;
    let sections = header.sections(endian, data).map_err(malformed)?;
    if let Some((entries, link)) = sections.dynamic(endian, data).map_err(malformed)? {
        let strings = sections
            .section(link)
            .and_then(|s| s.strings(endian, data))
            .map_err(malformed)?
            .ok_or_else(|| ElfError::Malformed("dynamic section has no string table".into()))?;
        for entry in entries {
            let tag = entry.d_tag(endian).into();
            let string = || -> Result<String, ElfError> {
                let offset = u32::try_from(entry.d_val(endian).into()).map_err(|_| {
                    ElfError::Malformed("dynamic string offset out of range".into())
                })?;
                let bytes = strings.get(offset).map_err(|()| {
                    ElfError::Malformed(format!(
                        "dynamic string offset {offset} is outside the string table"
                    ))
                })?;
                Ok(String::from_utf8_lossy(bytes).into_owned())
            };
            match tag as u32 {
                elf::DT_NULL if tag == 0 => break,
                elf::DT_SONAME => soname = Some(string()?),
                elf::DT_NEEDED => needed.push(string()?),
                elf::DT_FLAGS_1 => flags_1 = entry.d_val(endian).into(),
                _ => {}
            }
        }
    }
    let has_interpreter = header
        .program_headers(endian, data)
        .map_err(malformed)?
        .iter()
        .any(|ph| ph.p_type(endian) == elf::PT_INTERP);

    let elf_type = match e_type {
        elf::ET_DYN if flags_1 & u64::from(elf::DF_1_PIE) != 0 || has_interpreter => {
            ElfType::PieExecutable
        }
        elf::ET_DYN => ElfType::SharedObject,
        elf::ET_EXEC => ElfType::Executable,
        elf::ET_REL => ElfType::Relocatable,
        elf::ET_CORE => ElfType::Core,
        other => ElfType::Other(other),
    };
    Ok(ElfInfo {
        class,
        machine,
        arch: Arch::from_elf_machine(machine),
        elf_type,
        soname,
        needed,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_non_elf_and_short_input() {
        for input in [&b""[..], b"\x7fEL", b"#!/bin/sh\necho hi\n", &[0u8; 64]] {
            assert_eq!(inspect(input), Err(ElfError::NotElf), "{input:?}");
        }
    }

    #[test]
    fn truncated_header_is_malformed_not_a_panic() {
        let mut bytes = [0u8; 20];
        bytes[..4].copy_from_slice(&elf::ELFMAG);
        bytes[EI_CLASS] = elf::ELFCLASS64;
        bytes[EI_DATA] = elf::ELFDATA2LSB;
        assert!(matches!(inspect(&bytes[..]), Err(ElfError::Malformed(_))));
        bytes[EI_CLASS] = 9;
        assert!(matches!(inspect(&bytes[..]), Err(ElfError::Malformed(_))));
    }

    #[test]
    fn exports_of_malformed_input_are_errors_not_panics() {
        assert_eq!(
            missing_exports(&b"#!/bin/sh"[..], &["dcgmInit"]),
            Err(ElfError::NotElf)
        );
        let mut bytes = [0u8; 20];
        bytes[..4].copy_from_slice(&elf::ELFMAG);
        bytes[EI_CLASS] = elf::ELFCLASS64;
        bytes[EI_DATA] = elf::ELFDATA2LSB;
        assert!(matches!(
            missing_exports(&bytes[..], &["dcgmInit"]),
            Err(ElfError::Malformed(_))
        ));
    }

    #[test]
    fn this_test_binary_exports_no_dcgm() {
        // A real executable: it has (or lacks) a .dynsym, but never DCGM.
        let me = std::env::current_exe().unwrap();
        let missing = missing_exports_in_file(&me, &["dcgmInit", "dcgmShutdown"]).unwrap();
        assert_eq!(missing, ["dcgmInit", "dcgmShutdown"]);
    }

    #[test]
    fn reads_this_test_binary() {
        // The running test executable is a real ELF file for this machine.
        let me = std::env::current_exe().unwrap();
        let info = inspect_file(&me).unwrap();
        assert_eq!(info.class, ElfClass::Elf64);
        assert_eq!(info.arch, Arch::of_this_binary());
        assert!(info.elf_type.is_executable(), "{:?}", info.elf_type);
    }
}
