//! The calling thread's heap handed back to the system, where the program allocates with
//! mimalloc (main.rs); nothing under the system allocator of the profiling build.

/// Collect the calling thread's heap: its empty pages freed, and those whose return to the
/// system is due given back; with `now`, every freed page given back at once, whatever delay
/// main.rs set for it.
pub(crate) fn collect_own(now: bool) {
    #[cfg(not(feature = "system-allocator"))]
    // SAFETY: collects the calling thread's own mimalloc heap, which any thread may do at any
    // time; nothing it frees is in use.
    unsafe {
        libmimalloc_sys::mi_collect(now);
    }
    #[cfg(feature = "system-allocator")]
    let _ = now;
}

#[cfg(all(test, not(feature = "system-allocator")))]
mod tests {
    use super::*;
    use libmimalloc_sys::{mi_free, mi_malloc};

    /// How many of the pages holding `blocks` (of `size` bytes) are resident.
    fn resident(blocks: &[usize], size: usize) -> usize {
        let page = 4096;
        let mut pages: Vec<usize> = blocks
            .iter()
            .flat_map(|&at| (at / page)..=((at + size - 1) / page))
            .collect();
        pages.sort_unstable();
        pages.dedup();
        pages
            .into_iter()
            .filter(|&number| {
                let mut state = 0u8;
                // SAFETY: asks about one page of this process's address space into a byte of
                // this frame; the page was mapped for a block and mimalloc keeps it mapped.
                let asked =
                    unsafe { libc::mincore((number * page) as *mut _, page, &raw mut state) };
                asked == 0 && state & 1 == 1
            })
            .count()
    }

    #[test]
    fn collecting_now_gives_back_the_pages_the_thread_freed() {
        const SIZE: usize = 1000;
        // SAFETY: each block is allocated, written within its bytes, then freed once; nothing
        // allocates through mimalloc on this thread between the free and the count.
        let blocks: Vec<usize> = (0..4096)
            .map(|_| unsafe {
                let block = mi_malloc(SIZE).cast::<u8>();
                block.write_bytes(1, SIZE);
                block as usize
            })
            .collect();
        let written = resident(&blocks, SIZE);
        for &block in &blocks {
            unsafe { mi_free(block as *mut _) };
        }
        let freed = resident(&blocks, SIZE);
        collect_own(true);
        let collected = resident(&blocks, SIZE);
        assert!(written >= 900, "{written} pages written");
        assert!(
            freed > written / 2,
            "freed pages kept a while: {freed} of {written}"
        );
        assert!(
            collected < written / 10,
            "{collected} of {written} still resident"
        );
    }
}
