//! The ground floor: what every phase may use and what uses none of them. Hashing, child
//! processes and who holds them, `mkdir` locks, atomic file writes and durations live here
//! once; nothing in this folder imports
//! a phase (`load`, `check`, `plan`, `run`) or the built-ins.

pub mod atomic;
pub mod duration;
pub mod hash;
pub mod holder;
pub mod locks;
pub mod process;
pub mod retry;
pub mod secrets;
pub mod size;
pub mod time;
