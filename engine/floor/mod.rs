//! The ground floor: what every phase may use and what uses none of them. Hashing, child
//! processes and who holds them, cancellation (the interrupt and a stage's deadline), `mkdir`
//! locks, atomic file writes and durations live here once; nothing in this folder imports
//! a phase (`load`, `check`, `plan`, `run`) or the built-ins.

pub(crate) mod atomic;
pub(crate) mod cancel;
pub(crate) mod duration;
pub(crate) mod fd;
pub(crate) mod hash;
pub(crate) mod heap;
pub(crate) mod holder;
pub(crate) mod json;
pub(crate) mod locks;
pub(crate) mod prefault;
pub(crate) mod process;
pub(crate) mod reaper;
pub(crate) mod reduction;
pub(crate) mod relocations;
pub(crate) mod retry;
pub(crate) mod secrets;
pub(crate) mod size;
pub(crate) mod strays;
pub(crate) mod text;
pub(crate) mod time;

/// A group of fields most values leave unset, held out of line: one pointer, and no
/// allocation, where every field is unset (a checked stage's extras, guard texts and process
/// options, a stage record's details; 10,000 of each in a large workflow).
pub(crate) trait Sparse: Sized {
    /// Whether every field is unset.
    fn is_unset(&self) -> bool;

    /// Boxed, or `None` when every field is unset.
    fn boxed(self) -> Option<Box<Self>> {
        (!self.is_unset()).then(|| Box::new(self))
    }
}

/// Free `value` on a thread of its own. A run of thousands of stages ends holding tens of
/// thousands of small values (cache entries, outputs, scopes); freeing them one by one is time
/// on the path to the end of the run, and a process that exits right after need not wait for
/// it. A thread that cannot start frees the value with its closure, here.
pub(crate) fn drop_elsewhere<T: Send + 'static>(name: &str, value: T) {
    let _ = std::thread::Builder::new()
        .name(name.into())
        .spawn(move || drop(value));
}
