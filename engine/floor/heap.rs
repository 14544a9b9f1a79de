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
