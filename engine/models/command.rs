//! The command provider: a program that reads the prompt on stdin and writes the reply on
//! stdout. The prompt never goes on the command line, where it would be visible to every user of
//! the machine and limited in length.

use std::path::Path;

use super::error::ModelError;
use super::{Answer, ModelRequest};
use crate::floor::process::{run, ProcessSpec};

/// Ask the program `argv`, run in `dir` (the folder of the configuration file that defines
/// it) when there is one: a relative program path (`models/shout.sh`) and the relative paths
/// among its arguments are the file's, wherever the engine runs.
pub(crate) fn complete(
    argv: &[String],
    dir: Option<&Path>,
    timeout: std::time::Duration,
    request: &ModelRequest,
) -> Result<Answer, ModelError> {
    let alias = &request.alias;
    let mut argv = argv.to_vec();
    if let (Some(dir), Some(program)) = (dir, argv.first_mut()) {
        // A program named by a relative path with a folder in it is the file's; a bare name
        // is looked up on PATH as ever.
        if program.contains('/') && Path::new(program.as_str()).is_relative() {
            *program = dir.join(program.as_str()).display().to_string();
        }
    }
    let spec = ProcessSpec {
        argv,
        stdin: Some(stdin_text(request).into_bytes()),
        cwd: dir.map(Path::to_path_buf),
        env: request.env.clone(),
        timeout: Some(timeout),
        max_stdout: None,
    };
    let output = run(&spec).map_err(|error| ModelError::from_process(alias, error))?;
    if output.code != 0 {
        return Err(ModelError::CommandFailed {
            alias: alias.clone(),
            code: output.code,
            stderr_tail: output.stderr_tail(),
        });
    }
    Ok(Answer {
        text: String::from_utf8_lossy(&output.stdout).into_owned(),
        ..Answer::default()
    })
}

/// The system prompt, when there is one, goes in front of the prompt in a `<system>` block; a
/// command has no other channel for it, nor for earlier replies, which are quoted after the
/// prompt. Temperature has no channel at all and is ignored.
fn stdin_text(request: &ModelRequest) -> String {
    match &request.system {
        Some(system) => format!("<system>\n{system}\n</system>\n\n{}", request.flattened()),
        None => request.flattened(),
    }
}
