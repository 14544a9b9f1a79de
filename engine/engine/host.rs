//! What a program that hosts the engine needs from it besides workflows: secrets kept out of
//! what it prints, Ctrl-C, starting itself again in the background, the JSON Schemas of the
//! files it reads, and the migration of old recordings.

use std::ffi::OsString;
use std::path::Path;

use serde_json::Value;

use crate::floor::{process, reaper, secrets};
use crate::models::{self, Migration, Models};

/// Learn the secrets the model configuration of `cwd` names (API keys in the environment), so
/// that the engine and [`redact`] keep them out of everything written or printed from now on.
/// Call it before printing anything.
pub fn register_secrets(cwd: &Path) {
    models::register_secrets(cwd);
}

/// `text` with every secret [`register_secrets`] learned replaced by a mark (handed back as it
/// is when it holds none).
pub fn redact(text: String) -> String {
    secrets::redact_string(text)
}

/// Interrupt the runs of this process, as Ctrl-C does: every stage process is stopped
/// (SIGTERM, then SIGKILL after a grace period) and the run ends as interrupted.
pub fn interrupt() {
    process::Interrupt::global().trigger();
}

/// Call first in `main` of a program that hosts runs. When this process was started as a run's
/// reaper (the process that kills a run's stage process groups if the engine dies without
/// cleaning up, as on a kill -9), it serves as one until the engine is gone and this returns the
/// exit code for `main` to end with. Otherwise it lets the runs of this process start this
/// program's executable as their reaper, and returns `None`. A host that does not call it has
/// each stage process ask for the parent-death signal instead, which costs a fork per stage.
pub fn reaper() -> Option<u8> {
    if let Some(code) = reaper::serve_if_asked() {
        return Some(code);
    }
    if let Ok(program) = std::env::current_exe() {
        reaper::enable(program);
    }
    None
}

/// Give back the memory of this program's relocation table, which the loader has applied and
/// nothing reads again (see `floor::relocations`): a program that may hold a large workflow
/// calls it early in `main`. Says how many bytes it let go.
pub fn release_relocations() -> Option<usize> {
    crate::floor::relocations::release()
}

/// Start `program` with `args` in a session of its own, `stdin` on its standard input and its
/// output discarded, and return without waiting for it (`run --detach`).
pub fn spawn_detached(program: &Path, args: &[OsString], stdin: &[u8]) -> std::io::Result<()> {
    process::spawn_detached(program, args, stdin)
}

/// The JSON Schema of a workflow file.
pub fn workflow_schema() -> Value {
    crate::format::workflow_schema()
}

/// Every built-in action (`uses = "..."`), sorted by name: `{ "builtins": [{ name, description,
/// writes, with, output }] }`, `with` and `output` the JSON Schemas `check` holds a stage's
/// arguments and its readers to (`with` derived from the struct the built-in reads at run time).
pub fn builtins_schema() -> Value {
    let builtins: Vec<Value> = crate::builtins::all()
        .iter()
        .map(|builtin| {
            serde_json::json!({
                "name": builtin.name,
                "description": builtin.description,
                "writes": builtin.writes,
                "with": (builtin.with_schema)(),
                "output": (builtin.output_schema)(),
            })
        })
        .collect();
    serde_json::json!({ "builtins": builtins })
}

/// The JSON Schema of the model configuration (`stagegraph.toml`).
pub fn config_schema() -> Value {
    Models::config_schema()
}

/// Rewrite the first-format model recordings in `dir` in the current format.
pub fn migrate_recordings(dir: &Path) -> Result<Migration, String> {
    models::migrate_recordings(dir)
}
