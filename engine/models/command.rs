//! The command provider: a program that reads the prompt on stdin and writes the reply on
//! stdout. The prompt never goes on the command line, where it would be visible to every user of
//! the machine and limited in length.

use super::error::ModelError;
use super::{Answer, ModelRequest};
use crate::floor::process::{run, ProcessSpec};

pub(crate) fn complete(
    argv: &[String],
    timeout: std::time::Duration,
    request: &ModelRequest,
) -> Result<Answer, ModelError> {
    let alias = &request.alias;
    let spec = ProcessSpec {
        argv: argv.to_vec(),
        stdin: Some(stdin_text(request).into_bytes()),
        cwd: None,
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
