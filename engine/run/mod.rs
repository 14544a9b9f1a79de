//! The executor.

pub mod process;
