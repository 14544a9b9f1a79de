//! The program's relocation table given back once the loader has applied it.
//!
//! A position-independent executable carries the list of addresses the dynamic loader fixes up
//! at start (`.rela.dyn`): 1.2 MB in the release binary, read once before `main` and never
//! again, yet resident for the whole run, a tenth of what a no-op rerun of 10,000 stages holds
//! besides its heap. It lies in a read-only segment mapped from the file, so its pages can be
//! dropped from the process: read again, they would come back from the file as they were. The
//! packed form (`-z pack-relative-relocs`, a few kilobytes) needs a C library newer than the
//! ones the release binaries run on.

/// Drop the pages of the relocation table (those wholly inside it) from this process. Says how
/// many bytes were let go; `None` where there is no such table, it is not in a read-only
/// segment, or the kernel refused.
#[cfg(all(target_os = "linux", target_pointer_width = "64"))]
pub(crate) fn release() -> Option<usize> {
    let (start, end) = table()?;
    let length = end.checked_sub(start)?;
    let address = std::ptr::NonNull::new(start as *mut std::ffi::c_void)?;
    // SAFETY: the range is whole pages of a read-only private mapping of the executable: no
    // byte of it was written, so dropping its pages changes nothing a thread can read (a read
    // brings the page back from the file), and nothing after the loader reads it anyway.
    unsafe { nix::sys::mman::madvise(address, length, nix::sys::mman::MmapAdvise::MADV_DONTNEED) }
        .ok()?;
    Some(length)
}

/// Elsewhere the table, if any, stays.
#[cfg(not(all(target_os = "linux", target_pointer_width = "64")))]
pub(crate) fn release() -> Option<usize> {
    None
}

/// The whole pages of `.rela.dyn` as this process maps them, if they lie in a loaded segment
/// that is not writable.
#[cfg(all(target_os = "linux", target_pointer_width = "64"))]
fn table() -> Option<(usize, usize)> {
    use nix::unistd::{sysconf, SysconfVar};
    const PF_W: u32 = 2;
    const DT_NULL: i64 = 0;
    const DT_RELA: i64 = 7;
    const DT_RELASZ: i64 = 8;
    // 4 KB on x86_64; 4, 16 or 64 KB on aarch64, as the kernel was built.
    let page = usize::try_from(sysconf(SysconfVar::PAGE_SIZE).ok()??).ok()?;

    extern "C" {
        /// The program's ELF header, where its first segment is mapped (the linker defines it).
        static __ehdr_start: libc::Elf64_Ehdr;
    }
    // SAFETY: `__ehdr_start` is the mapped header of this very program; its program headers
    // are mapped with it (they are in its first segment), and `e_phoff`/`e_phnum` say where.
    let header = unsafe { &__ehdr_start };
    let base = std::ptr::from_ref(header) as usize;
    let segments: &[libc::Elf64_Phdr] = unsafe {
        std::slice::from_raw_parts(
            (base + header.e_phoff as usize) as *const libc::Elf64_Phdr,
            usize::from(header.e_phnum),
        )
    };
    // The first loaded segment's address: the program's load bias is the header's address
    // less it (zero for a position-independent one).
    let first = segments.iter().find(|s| s.p_type == libc::PT_LOAD)?;
    let bias = base.checked_sub(first.p_vaddr as usize)?;
    let dynamic = segments.iter().find(|s| s.p_type == libc::PT_DYNAMIC)?;
    let mut entry = (bias + dynamic.p_vaddr as usize) as *const [u64; 2];
    let (mut rela, mut size) = (None, None);
    loop {
        // SAFETY: the dynamic section is mapped, and ends with a `DT_NULL` entry.
        let [tag, value] = unsafe { entry.read() };
        match tag as i64 {
            DT_NULL => break,
            DT_RELA => rela = Some(value as usize),
            DT_RELASZ => size = Some(value as usize),
            _ => {}
        }
        entry = entry.wrapping_add(1);
    }
    // glibc rewrites the entry as an address when it loads the program; read as written, it
    // is an offset from the load bias.
    let rela = rela?;
    let start = if rela >= base { rela } else { bias + rela };
    let end = start.checked_add(size?)?;
    let segment = segments.iter().find(|s| {
        let from = bias + s.p_vaddr as usize;
        s.p_type == libc::PT_LOAD && from <= start && end <= from + s.p_filesz as usize
    })?;
    if segment.p_flags & PF_W != 0 {
        return None;
    }
    let (start, end) = (start.next_multiple_of(page), end / page * page);
    (start < end).then_some((start, end))
}

#[cfg(all(test, target_os = "linux", target_pointer_width = "64"))]
mod tests {
    use super::*;

    /// Whether this process maps the page at `address` now (`/proc/self/pagemap`).
    fn mapped(address: usize, page: usize) -> bool {
        use std::io::{Read, Seek, SeekFrom};
        let mut pagemap = std::fs::File::open("/proc/self/pagemap").unwrap();
        pagemap
            .seek(SeekFrom::Start((address / page * 8) as u64))
            .unwrap();
        let mut entry = [0u8; 8];
        pagemap.read_exact(&mut entry).unwrap();
        u64::from_le_bytes(entry) >> 63 == 1
    }

    #[test]
    fn the_relocation_table_is_found_read_only_and_let_go() {
        // Test binaries are position-independent too, with a table of their own.
        let (start, end) = table().expect("a relocation table in a read-only segment");
        let page = nix::unistd::sysconf(nix::unistd::SysconfVar::PAGE_SIZE)
            .unwrap()
            .unwrap() as usize;
        assert!(start < end && start % page == 0 && end % page == 0);
        // Its first entry is a relocation the loader applied: an offset, a type, an addend.
        // SAFETY: the range is mapped and readable (read-only, not dropped yet).
        let first = unsafe { (start as *const u64).read_volatile() };
        assert!(mapped(start, page), "the table was read by the loader");
        let _ = first;
        assert_eq!(release(), Some(end - start));
        assert!(!mapped(start, page), "its pages were dropped");
        // Read again, the page comes back from the file as it was.
        let again = unsafe { (start as *const u64).read_volatile() };
        assert_eq!(again, first);
    }
}
