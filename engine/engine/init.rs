//! `stagegraph init`: a new project in a folder. The model configuration with an alias that
//! answers offline (a script standing in for a model), a first workflow, its test file and the
//! recording of the script's reply, so that `stagegraph test` passes at once; nothing existing
//! is overwritten unless asked.

use std::path::{Path, PathBuf};

use super::Engine;
use crate::testing::{Recording, TestOptions};

/// The files `init` writes, relative to the project folder, with their text.
const FILES: [(&str, &str); 4] = [
    ("stagegraph.toml", CONFIG),
    ("models/shout.sh", SCRIPT),
    ("workflows/hello.toml", WORKFLOW),
    ("workflows/hello.test.toml", TEST),
];

const CONFIG: &str = r#"# Model aliases: a stage's `model = "shout"` names one. Relative paths are this file's folder's.
[models.shout]
provider = "command"
command = ["sh", "models/shout.sh"]

# A real model, for instance (the key from the environment, never from this file):
# [models.claude]
# provider = "anthropic"
# model = "claude-haiku-4-5"
"#;

const SCRIPT: &str = "#!/bin/sh
# Stands in for a model: reads the prompt on stdin, writes the reply on stdout.
tr a-z A-Z
";

const WORKFLOW: &str = r#"[workflow]
description = "Greet someone through a model"

[inputs.name]
type = "string"
default = "world"

[stages.facts]
command = ["echo", "{{ inputs.name }} writes TOML"]

[stages.greet]
prompt = { inline = "hello {{ inputs.name }}; {{ stages.facts.output | trim }}" }
model = "shout"

[outputs]
greeting = "{{ stages.greet.output | trim }}"
"#;

const TEST: &str = r#"# Golden cases of hello.toml; model replies replay from recordings/hello/.
workflow = "hello.toml"

[[case]]
name = "greets ada"
inputs = { name = "ada" }
[case.expect]
outputs = { greeting = "HELLO ADA; ADA WRITES TOML" }
"#;

/// Why `init` wrote nothing, or stopped.
#[derive(Debug, thiserror::Error)]
pub enum InitError {
    /// Files it would write exist already.
    #[error("{} already exist(s); nothing written (--force overwrites)", .0.join(", "))]
    Exists(Vec<String>),
    /// A file could not be written.
    #[error("cannot write {}: {source}", path.display())]
    Write {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The first test did not record and pass: the project is written, but something in this
    /// environment keeps it from working (no `sh`, a model configuration elsewhere).
    #[error("the files are written, but the first test does not pass: {0}")]
    Test(String),
}

/// What `init` did.
#[derive(Debug)]
pub struct Initialized {
    /// The files written, relative to the project folder, in order.
    pub files: Vec<PathBuf>,
    /// The recordings made for the test file.
    pub recorded: usize,
}

/// Write a new project into `dir`, then record the model replies its test needs (the script
/// answers, offline). Refuses when any of its files exists, unless `force`.
pub fn init(dir: &Path, force: bool) -> Result<Initialized, InitError> {
    if !force {
        let existing: Vec<String> = FILES
            .iter()
            .filter(|(path, _)| dir.join(path).exists())
            .map(|(path, _)| (*path).to_string())
            .collect();
        if !existing.is_empty() {
            return Err(InitError::Exists(existing));
        }
    }
    let mut files = Vec::new();
    for (relative, text) in FILES {
        let path = dir.join(relative);
        write(&path, text).map_err(|source| InitError::Write {
            path: path.clone(),
            source,
        })?;
        files.push(PathBuf::from(relative));
    }
    make_executable(&dir.join("models/shout.sh"));
    // The replies are the script's: recording them is running it, which needs no network.
    let engine = Engine::new(&[], dir);
    let test_file = dir.join("workflows/hello.test.toml");
    let options = TestOptions {
        recording: Recording::Missing,
        ..TestOptions::default()
    };
    let report = engine
        .test(std::slice::from_ref(&test_file), &options, &|_| {})
        .map_err(|diagnostics| {
            let messages: Vec<String> = diagnostics.iter().map(|d| d.render(false)).collect();
            InitError::Test(messages.join("\n"))
        })?;
    if report.failed() > 0 {
        let detail: Vec<String> = report.cases.iter().map(|case| case.detail(dir)).collect();
        return Err(InitError::Test(detail.join("\n")));
    }
    let recordings = dir.join("workflows/recordings/hello");
    let mut recorded: Vec<PathBuf> = std::fs::read_dir(&recordings)
        .into_iter()
        .flatten()
        .flatten()
        .map(|entry| entry.path())
        .filter_map(|path| Some(path.strip_prefix(dir).ok()?.to_path_buf()))
        .collect();
    recorded.sort();
    let count = recorded.len();
    files.extend(recorded);
    Ok(Initialized {
        files,
        recorded: count,
    })
}

fn write(path: &Path, text: &str) -> std::io::Result<()> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    std::fs::write(path, text)
}

fn make_executable(path: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let _ = std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755));
}
