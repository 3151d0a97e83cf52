//! Real ELF files for fixtures, built with a C compiler (`gcc` for x86_64,
//! `aarch64-linux-gnu-gcc` for aarch64; `.ci/setup` installs both).
//!
//! Where no compiler for an architecture is installed (or when
//! `ACCELREADY_TEST_ELF_WRITER=builtin` is set), a minimal ELF writer
//! ([`minimal_shared_object`], [`minimal_executable`]) stands in and says so on
//! stderr: a valid ELF64 file with program headers, a dynamic section
//! (SONAME, DT_NEEDED), a dynamic symbol table and a section table, but no code.
//!
//! A shared object whose SONAME is a DCGM one (`libdcgm.so.<N>`) exports
//! DCGM's entry points ([`accelready::probe::dcgm::ENTRY_POINTS`]), as the real
//! library does, so that every fixture built through here counts as DCGM;
//! [`shared_object_exporting`] chooses the exports explicitly (for libraries
//! that are *not* DCGM).
//!
//! Outputs are cached under `CARGO_TARGET_TMPDIR/elf-cache`, keyed by what was
//! asked for, so that the many fixture trees of a test run cost one compile each.

#![allow(dead_code)]

use std::collections::hash_map::DefaultHasher;
use std::fs;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Once;

use accelready::probe::dcgm::{is_dcgm_soname, ENTRY_POINTS};
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
    // Unique per process and call: parallel tests may build the same output.
    static CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
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

/// The compiler to use for `arch`, or `None` (after a note on stderr, once
/// per architecture) when the built-in minimal ELF writer must stand in.
fn compiler_or_note(arch: Arch) -> Option<&'static str> {
    static NOTE_AARCH64: Once = Once::new();
    static NOTE_X86_64: Once = Once::new();
    let forced = std::env::var("ACCELREADY_TEST_ELF_WRITER").is_ok_and(|v| v == "builtin");
    let cc = if forced { None } else { compiler(arch) };
    if cc.is_none() {
        let note = match arch {
            Arch::Aarch64 => &NOTE_AARCH64,
            Arch::X86_64 => &NOTE_X86_64,
        };
        note.call_once(|| {
            let why = if forced {
                "ACCELREADY_TEST_ELF_WRITER=builtin".to_owned()
            } else {
                format!("no C compiler for {arch} found (run .ci/setup)")
            };
            eprintln!("note: {why}; using the built-in minimal ELF writer for {arch}");
        });
    }
    cc
}

/// The symbols a fixture library with SONAME `soname` exports by default:
/// DCGM's entry points for a DCGM SONAME, none otherwise.
pub fn default_exports(soname: &str) -> &'static [&'static str] {
    if is_dcgm_soname(soname) {
        &ENTRY_POINTS
    } else {
        &[]
    }
}

/// A real shared object for `arch` with SONAME `soname` and a DT_NEEDED entry
/// for each of `needed` (each a soname, e.g. `libnvidia-ml.so.1`), exporting
/// [`default_exports`] (DCGM's entry points when `soname` is `libdcgm.so.<N>`).
///
/// Compiled when a compiler for `arch` is installed, else written by
/// [`minimal_shared_object`].
pub fn shared_object(arch: Arch, soname: &str, needed: &[&str]) -> Vec<u8> {
    shared_object_exporting(arch, soname, needed, default_exports(soname))
}

/// [`shared_object`] exporting exactly the functions `exports` (plus one
/// private probe symbol), whatever the SONAME.
pub fn shared_object_exporting(
    arch: Arch,
    soname: &str,
    needed: &[&str],
    exports: &[&str],
) -> Vec<u8> {
    let Some(cc) = compiler_or_note(arch) else {
        return minimal_shared_object_exporting(arch, soname, needed, exports);
    };
    let mut key_parts = vec!["so", arch.as_str(), soname];
    key_parts.extend_from_slice(needed);
    key_parts.push("exports:");
    key_parts.extend_from_slice(exports);
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
        let symbol: String = soname
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
            .collect();
        let mut source = format!("int {symbol}_probe(void) {{ return 42; }}\n");
        for export in exports {
            source.push_str(&format!("int {export}(void) {{ return 0; }}\n"));
        }
        compile(cc, &source, &args, &out);
    }
    fs::read(&out).unwrap()
}

/// A real (static, freestanding) executable for `arch`, e.g. `nv-hostengine`.
pub fn executable(arch: Arch) -> Vec<u8> {
    let Some(cc) = compiler_or_note(arch) else {
        return minimal_executable(arch);
    };
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

/// A static program for this machine built from C `source` with `gcc
/// -static` (cached), for fakes that must run in any root (a chroot into a
/// fixture tree has no libc). `Err` says why it cannot be built here.
pub fn static_program(name: &str, source: &str) -> Result<Vec<u8>, String> {
    let arch = Arch::of_this_binary().ok_or("unknown architecture")?;
    let cc = compiler(arch).ok_or_else(|| format!("no C compiler for {arch} (run .ci/setup)"))?;
    let out = cache_dir().join(format!("{name}-{}", cache_key(&["static", name, source])));
    if !out.exists() {
        compile(cc, source, &["-static".into(), "-O2".into()], &out);
    }
    fs::read(&out).map_err(|e| format!("cannot read {}: {e}", out.display()))
}

// --- the built-in minimal ELF writer (ELF64, little-endian) ---

const EHDR_SIZE: usize = 64;
const PHDR_SIZE: usize = 56;
const SHDR_SIZE: usize = 64;
const DYN_SIZE: usize = 16;
const SYM_SIZE: usize = 24;
const ET_EXEC: u16 = 2;
const ET_DYN: u16 = 3;
const PT_LOAD: u32 = 1;
const PT_DYNAMIC: u32 = 2;
const SHT_STRTAB: u32 = 3;
const SHT_DYNAMIC: u32 = 6;
const SHT_DYNSYM: u32 = 11;
/// `st_info` of a global function: STB_GLOBAL << 4 | STT_FUNC.
const STB_GLOBAL_STT_FUNC: u8 = 0x12;
const SHF_WRITE_ALLOC: u64 = 3;
const SHF_ALLOC: u64 = 2;
const DT_NULL: u64 = 0;
const DT_NEEDED: u64 = 1;
const DT_STRTAB: u64 = 5;
const DT_STRSZ: u64 = 10;
const DT_SONAME: u64 = 14;
const DT_SYMTAB: u64 = 6;
const DT_SYMENT: u64 = 11;
/// Where [`minimal_executable`] is loaded.
const EXEC_BASE: u64 = 0x40_0000;

/// A minimal valid ELF64 shared object: one PT_LOAD over the file, a
/// PT_DYNAMIC with DT_NEEDED / DT_SONAME / DT_STRTAB / DT_STRSZ / DT_SYMTAB /
/// DT_SYMENT, and the `.dynstr`, `.dynamic`, `.shstrtab` and `.dynsym`
/// sections, exporting [`default_exports`]. `readelf -d --dyn-syms` reads it.
pub fn minimal_shared_object(arch: Arch, soname: &str, needed: &[&str]) -> Vec<u8> {
    minimal_shared_object_exporting(arch, soname, needed, default_exports(soname))
}

/// [`minimal_shared_object`] whose `.dynsym` holds `exports` as defined,
/// global functions.
pub fn minimal_shared_object_exporting(
    arch: Arch,
    soname: &str,
    needed: &[&str],
    exports: &[&str],
) -> Vec<u8> {
    let mut dynstr = vec![0u8];
    let mut add = |s: &str| {
        let offset = dynstr.len() as u64;
        dynstr.extend_from_slice(s.as_bytes());
        dynstr.push(0);
        offset
    };
    let mut dynamic: Vec<(u64, u64)> = needed.iter().map(|n| (DT_NEEDED, add(n))).collect();
    dynamic.push((DT_SONAME, add(soname)));
    let names: Vec<u64> = exports.iter().map(|name| add(name)).collect();

    let dynstr_off = EHDR_SIZE + 2 * PHDR_SIZE;
    let dynsym_off = align8(dynstr_off + dynstr.len());
    let dynsym_size = (1 + names.len()) * SYM_SIZE;
    let dynamic_off = align8(dynsym_off + dynsym_size);
    dynamic.push((DT_STRTAB, dynstr_off as u64));
    dynamic.push((DT_STRSZ, dynstr.len() as u64));
    dynamic.push((DT_SYMTAB, dynsym_off as u64));
    dynamic.push((DT_SYMENT, SYM_SIZE as u64));
    dynamic.push((DT_NULL, 0));
    let dynamic_size = dynamic.len() * DYN_SIZE;
    let shstrtab = b"\0.dynstr\0.dynamic\0.shstrtab\0.dynsym\0";
    let shstrtab_off = dynamic_off + dynamic_size;
    let shdr_off = align8(shstrtab_off + shstrtab.len());
    let file_size = shdr_off + 5 * SHDR_SIZE;

    let mut out = Vec::with_capacity(file_size);
    elf_header(&mut out, arch, ET_DYN, 0, 2, shdr_off, 5, 3);
    program_header(&mut out, PT_LOAD, 4 | 2, 0, 0, file_size, 0x1000);
    program_header(
        &mut out,
        PT_DYNAMIC,
        4 | 2,
        dynamic_off,
        dynamic_off as u64,
        dynamic_size,
        8,
    );
    out.extend_from_slice(&dynstr);
    out.resize(dynsym_off, 0);
    out.extend_from_slice(&[0; SYM_SIZE]);
    for name in &names {
        // A defined global function (in section 2, `.dynamic`: there is no code).
        put32(&mut out, *name as u32);
        out.push(STB_GLOBAL_STT_FUNC);
        out.push(0);
        put16(&mut out, 2);
        put64(&mut out, dynamic_off as u64);
        put64(&mut out, 0);
    }
    out.resize(dynamic_off, 0);
    for (tag, value) in dynamic {
        put64(&mut out, tag);
        put64(&mut out, value);
    }
    out.extend_from_slice(shstrtab);
    out.resize(shdr_off, 0);
    out.extend_from_slice(&[0; SHDR_SIZE]);
    let (dynstr_len, shstrtab_len) = (dynstr.len(), shstrtab.len());
    section_header(
        &mut out,
        SectionHeader {
            name: 1,
            sh_type: SHT_STRTAB,
            flags: SHF_ALLOC,
            offset: dynstr_off,
            size: dynstr_len,
            ..SectionHeader::default()
        },
    );
    section_header(
        &mut out,
        SectionHeader {
            name: 9,
            sh_type: SHT_DYNAMIC,
            flags: SHF_WRITE_ALLOC,
            offset: dynamic_off,
            size: dynamic_size,
            link: 1,
            align: 8,
            entsize: DYN_SIZE,
            ..SectionHeader::default()
        },
    );
    section_header(
        &mut out,
        SectionHeader {
            name: 18,
            sh_type: SHT_STRTAB,
            offset: shstrtab_off,
            size: shstrtab_len,
            ..SectionHeader::default()
        },
    );
    section_header(
        &mut out,
        SectionHeader {
            name: 28,
            sh_type: SHT_DYNSYM,
            flags: SHF_ALLOC,
            offset: dynsym_off,
            size: dynsym_size,
            link: 1,
            // One past the last local symbol: only the null symbol is local.
            info: 1,
            align: 8,
            entsize: SYM_SIZE,
        },
    );
    out
}

/// A minimal valid static ELF64 executable (ET_EXEC, one PT_LOAD, no code
/// worth running: never execute it).
pub fn minimal_executable(arch: Arch) -> Vec<u8> {
    let shstrtab = b"\0.shstrtab\0";
    let shstrtab_off = EHDR_SIZE + PHDR_SIZE;
    let shdr_off = align8(shstrtab_off + shstrtab.len());
    let file_size = shdr_off + 2 * SHDR_SIZE;
    let mut out = Vec::with_capacity(file_size);
    elf_header(&mut out, arch, ET_EXEC, EXEC_BASE, 1, shdr_off, 2, 1);
    program_header(&mut out, PT_LOAD, 4 | 1, 0, EXEC_BASE, file_size, 0x1000);
    out.extend_from_slice(shstrtab);
    out.resize(shdr_off, 0);
    out.extend_from_slice(&[0; SHDR_SIZE]);
    section_header(
        &mut out,
        SectionHeader {
            name: 1,
            sh_type: SHT_STRTAB,
            offset: shstrtab_off,
            size: shstrtab.len(),
            ..SectionHeader::default()
        },
    );
    out
}

fn align8(n: usize) -> usize {
    n.div_ceil(8) * 8
}

fn put16(out: &mut Vec<u8>, v: u16) {
    out.extend_from_slice(&v.to_le_bytes());
}

fn put32(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&v.to_le_bytes());
}

fn put64(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(&v.to_le_bytes());
}

#[allow(clippy::too_many_arguments)]
fn elf_header(
    out: &mut Vec<u8>,
    arch: Arch,
    e_type: u16,
    entry: u64,
    phnum: u16,
    shoff: usize,
    shnum: u16,
    shstrndx: u16,
) {
    // magic, ELFCLASS64, ELFDATA2LSB, EV_CURRENT, System V ABI, padding.
    out.extend_from_slice(&[0x7f, b'E', b'L', b'F', 2, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
    put16(out, e_type);
    put16(out, arch.elf_machine());
    put32(out, 1);
    put64(out, entry);
    put64(out, EHDR_SIZE as u64);
    put64(out, shoff as u64);
    put32(out, 0);
    put16(out, EHDR_SIZE as u16);
    put16(out, PHDR_SIZE as u16);
    put16(out, phnum);
    put16(out, SHDR_SIZE as u16);
    put16(out, shnum);
    put16(out, shstrndx);
}

fn program_header(
    out: &mut Vec<u8>,
    p_type: u32,
    flags: u32,
    offset: usize,
    vaddr: u64,
    size: usize,
    align: u64,
) {
    put32(out, p_type);
    put32(out, flags);
    put64(out, offset as u64);
    put64(out, vaddr);
    put64(out, vaddr);
    put64(out, size as u64);
    put64(out, size as u64);
    put64(out, align);
}

/// One section header's fields (`sh_addr` follows from `SHF_ALLOC`).
#[derive(Default)]
struct SectionHeader {
    name: u32,
    sh_type: u32,
    flags: u64,
    offset: usize,
    size: usize,
    link: u32,
    info: u32,
    align: u64,
    entsize: usize,
}

fn section_header(out: &mut Vec<u8>, header: SectionHeader) {
    let addr = if header.flags & SHF_ALLOC != 0 {
        header.offset as u64
    } else {
        0
    };
    put32(out, header.name);
    put32(out, header.sh_type);
    put64(out, header.flags);
    put64(out, addr);
    put64(out, header.offset as u64);
    put64(out, header.size as u64);
    put32(out, header.link);
    put32(out, header.info);
    put64(out, header.align.max(1));
    put64(out, header.entsize as u64);
}
