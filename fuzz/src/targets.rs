//! The fuzz targets: each takes any bytes and drives one of the engine's readers the way the
//! engine drives it. Whatever the bytes, none may panic, abort or hang: a malformed input is an
//! error value (a diagnostic, a `BuiltinError`, `None`), never a crash.
//!
//! The targets themselves live in the library (`stagegraph::fuzzing`, hidden from its API), so
//! that they reach the engine's readers without those being public. The same functions run
//! under libFuzzer (`cargo fuzz run <target>`, the files in `fuzz_targets/`), under the mutation
//! driver on stable Rust (`src/bin/drive.rs`), and as the regression test of the main crate,
//! which replays every input under `fuzz/regressions/` (`tests/fuzz_regressions.rs` includes
//! this file).

pub use stagegraph::fuzzing::{
    cache, config, duration, expression, markdown, records, registry, reply, schema, shell,
    template, transcript, workflow, Target, TARGETS,
};
