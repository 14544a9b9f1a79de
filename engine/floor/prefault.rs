//! Memory faulted in ahead of the thread that will touch it.
//!
//! On the two-core machines the benchmark runs on, a first touch of a page costs a few
//! microseconds (the fault, the cgroup's accounting, the zeroing), and `check` of 10,000 stages
//! touches ten thousand pages while the second core has little to do. The allocator hands out
//! fresh memory upward from where it is allocating now, so a thread that populates the pages
//! above that point takes most of those faults off the thread doing the work. Tried and
//! measured in book/src/benchmarks.md: a block allocated, populated and freed again was kept
//! apart by the allocator and only raised the peak; the pages above the allocation point are
//! the ones the work then uses.

#[cfg(target_os = "linux")]
use std::{ffi::c_void, ptr::NonNull};

/// Fault in about `bytes` of the heap above where it is allocating now, on a thread of its
/// own, a megabyte at a time (so the work finds the first ones ready soon). It stops at the
/// first range that is not mapped writable.
#[cfg(target_os = "linux")]
pub(crate) fn ahead(bytes: usize) {
    const PAGE: usize = 4096;
    let probe = Box::new(0u64);
    let start = (std::ptr::from_ref::<u64>(&probe) as usize) & !(PAGE - 1);
    drop(probe);
    let _ = std::thread::Builder::new()
        .name("prefault".into())
        .spawn(move || populate(start, bytes));
}

/// Elsewhere pages are faulted in as they are touched.
#[cfg(not(target_os = "linux"))]
pub(crate) fn ahead(_bytes: usize) {}

/// Make the pages of `start..start + bytes` present (`start` page-aligned), a megabyte at a
/// time; stops at the first range that is not mapped writable (or a kernel older than 5.14,
/// which has no such advice). Says how many bytes it did.
#[cfg(target_os = "linux")]
fn populate(start: usize, bytes: usize) -> usize {
    const STEP: usize = 1 << 20;
    let mut done = 0;
    while done < bytes {
        let Some(address) = NonNull::new((start + done) as *mut c_void) else {
            break;
        };
        let step = STEP.min(bytes - done);
        // SAFETY: populating pages changes no byte a thread can see: a page already there is
        // left as it is, a missing one is made present and zero, as its first touch would make
        // it. A range that is not mapped only fails.
        let populated = unsafe {
            nix::sys::mman::madvise(
                address,
                step,
                nix::sys::mman::MmapAdvise::MADV_POPULATE_WRITE,
            )
        };
        if populated.is_err() {
            break;
        }
        done += step;
    }
    done
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    #[test]
    fn populating_memory_changes_nothing_in_it() {
        const PAGE: usize = 4096;
        let mut memory = vec![0u8; 64 * PAGE];
        for (i, byte) in memory.iter_mut().enumerate().step_by(PAGE / 2) {
            *byte = (i / PAGE) as u8 + 1;
        }
        let before = memory.clone();
        let start = memory.as_ptr() as usize;
        let aligned = (start + PAGE - 1) & !(PAGE - 1);
        let length = (start + memory.len() - aligned) & !(PAGE - 1);
        assert_eq!(
            populate(aligned, length),
            length,
            "the whole range populated"
        );
        assert_eq!(memory, before);
        assert_eq!(populate(PAGE, PAGE), 0, "page one is never mapped");
    }
}
