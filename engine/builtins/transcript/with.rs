//! The `with` arguments of `transcript.delta`: which transcript, from which line, and the caps.

use schemars::JsonSchema;
use serde::Deserialize;

use crate::builtins::args;

/// Where the transcript is and which part of it to read.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct DeltaArgs {
    /// The transcript file (JSONL, one JSON object per line); relative paths resolve against the
    /// run's working directory.
    #[schemars(length(min = 1))]
    pub(super) path: String,
    /// The cursor: how many lines were already read. The delta is every complete line after it;
    /// pass the previous run's total_lines.
    #[serde(default)]
    pub(super) after_line: u64,
    /// When after_line is past the end of the file (rotated or truncated), the delta is this many
    /// last lines instead.
    #[serde(default = "default_fallback_lines")]
    pub(super) fallback_lines: u64,
    /// Cap in bytes on the prose of one message; a longer one is cut on a character boundary and
    /// ends with "…".
    #[serde(default = "default_max_part_bytes")]
    #[schemars(range(min = 1))]
    pub(super) max_part_bytes: usize,
    /// Cap in bytes on the whole text; when over, the oldest messages are left out first.
    #[serde(default = "default_max_bytes")]
    #[schemars(range(min = 1))]
    pub(super) max_bytes: usize,
    /// Before reading, wait until the file has not changed for this long (e.g. "500ms"; at most 20
    /// times it): for a transcript its writer may still be flushing.
    #[schemars(transform = args::not_null)]
    pub(super) settle: Option<String>,
    /// When true, a missing file gives an empty delta with `missing` true instead of an error.
    #[serde(default)]
    pub(super) optional: bool,
}

fn default_fallback_lines() -> u64 {
    500
}

fn default_max_part_bytes() -> usize {
    2048
}

fn default_max_bytes() -> usize {
    16384
}
