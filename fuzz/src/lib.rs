//! stagegraph's fuzz targets, for libFuzzer (`cargo fuzz run <target>` on nightly) and for the
//! mutation driver that runs them on stable (`cargo run --release --no-default-features --features driver --bin
//! drive -- <target>`). See `targets` for what each one drives.

pub mod targets;

pub use targets::TARGETS;
