//! The Claude Code CLI as a plain model: `claude -p --output-format json`, the prompt on stdin,
//! the reply read from the JSON result it prints.
//!
//! A model call made from inside a hook must not behave like a Claude Code session: it saves no
//! transcript (`--no-session-persistence`), asks for no session title (`--name`), fires no hooks (`--settings` with `disableAllHooks`),
//! loads no MCP servers (`--strict-mcp-config` with none given) and no skills, uses no tools
//! unless the alias lists some (`--tools`), and sees none of the project: it runs in a working
//! directory of its own, with `CLAUDE.md` files and auto-memory turned off, and with the stage's
//! system prompt (or an empty one) in place of Claude Code's own. Authentication is left to the
//! CLI, so an API key and a subscription login both work.

use std::path::PathBuf;
use std::time::Duration;

use serde_json::Value;

use super::error::ModelError;
use super::{Answer, ModelRequest, Retried, Usage};
use crate::floor::process::{run, ProcessSpec};

/// Settings layered over the user's: no hook of any settings file runs.
const SETTINGS: &str = r#"{"disableAllHooks":true}"#;

pub(crate) struct Claude<'a> {
    pub(crate) program: &'a [String],
    pub(crate) model: &'a str,
    pub(crate) tools: &'a [String],
    /// The CLI's `--effort`, when the alias sets one.
    pub(crate) effort: Option<&'a str>,
}

impl Claude<'_> {
    /// The command line: everything but the prompt, which goes to stdin.
    pub(crate) fn argv(&self, request: &ModelRequest) -> Vec<String> {
        let mut argv: Vec<String> = self.program.to_vec();
        let fixed = [
            "-p",
            "--output-format",
            "json",
            "--no-session-persistence",
            // A named session gets no generated title: no second, paid request.
            "--name",
            "stagegraph",
            "--model",
            self.model,
            "--settings",
            SETTINGS,
            "--strict-mcp-config",
            "--disable-slash-commands",
        ];
        argv.extend(fixed.iter().map(std::string::ToString::to_string));
        // `--tools` takes several values: `=` keeps it to exactly one.
        argv.push(format!("--tools={}", self.tools.join(",")));
        if let Some(effort) = self.effort {
            argv.push(format!("--effort={effort}"));
        }
        argv.push(format!(
            "--system-prompt={}",
            request.system.as_deref().unwrap_or_default()
        ));
        if let Some(schema) = constrainable(request) {
            argv.push(format!("--json-schema={schema}"));
        }
        argv
    }

    /// The variables set for the CLI, before the workflow's own `child_env` (which wins).
    fn env(&self, request: &ModelRequest) -> Vec<(String, String)> {
        let mut env = vec![
            (
                "CLAUDE_CODE_DISABLE_CLAUDE_MDS".to_string(),
                "1".to_string(),
            ),
            (
                "CLAUDE_CODE_DISABLE_AUTO_MEMORY".to_string(),
                "1".to_string(),
            ),
            ("MAX_THINKING_TOKENS".to_string(), "0".to_string()),
            // No deferred-tool placeholder in the request: the call offers no tools to search.
            ("ENABLE_TOOL_SEARCH".to_string(), "false".to_string()),
        ];
        if let Some(max_tokens) = request.max_tokens {
            env.push((
                "CLAUDE_CODE_MAX_OUTPUT_TOKENS".to_string(),
                max_tokens.to_string(),
            ));
        }
        env.extend(request.env.iter().cloned());
        env
    }

    pub(crate) fn complete(
        &self,
        timeout: Duration,
        request: &ModelRequest,
    ) -> Result<Answer, ModelError> {
        let alias = &request.alias;
        let cwd = working_directory().map_err(|error| ModelError::Command {
            alias: alias.clone(),
            message: format!("cannot prepare a working directory for claude: {error}"),
            retryable: false,
        })?;
        let spec = ProcessSpec {
            argv: self.argv(request),
            stdin: Some(request.flattened().into_bytes()),
            cwd: Some(cwd),
            env: self.env(request),
            timeout: Some(timeout),
            max_stdout: None,
        };
        let output = run(&spec).map_err(|error| ModelError::from_process(alias, error))?;
        let stdout = String::from_utf8_lossy(&output.stdout);
        match envelope(&stdout) {
            Some(result) => read_result(alias, &result),
            None if output.code != 0 => Err(ModelError::CommandFailed {
                alias: alias.clone(),
                code: output.code,
                stderr_tail: output.stderr_tail(),
            }),
            None => Err(ModelError::Command {
                alias: alias.clone(),
                message: format!(
                    "claude printed no JSON result: {}",
                    crate::floor::secrets::excerpt(stdout.trim(), 200)
                ),
                retryable: false,
            }),
        }
    }
}

/// The stage's schema when the CLI can enforce it (its structured output is a tool's input,
/// which must be an object), in the dialect the CLI's validator accepts.
fn constrainable(request: &ModelRequest) -> Option<String> {
    let schema = request.schema.as_deref()?;
    (schema.get("type").and_then(Value::as_str) == Some("object"))
        .then(|| super::draft7::translate(schema).to_string())
}

/// The result object the CLI prints: the whole of stdout, or its last line that is one.
fn envelope(stdout: &str) -> Option<Value> {
    let is_result = |value: &Value| value.get("type").and_then(Value::as_str) == Some("result");
    if let Ok(value) = serde_json::from_str::<Value>(stdout.trim()) {
        if is_result(&value) {
            return Some(value);
        }
    }
    stdout
        .lines()
        .rev()
        .filter_map(|line| serde_json::from_str::<Value>(line.trim()).ok())
        .find(is_result)
}

/// The reply, usage and cost of a result, or the CLI's own error message.
pub(crate) fn read_result(alias: &str, result: &Value) -> Result<Answer, ModelError> {
    let is_error = result.get("is_error").and_then(Value::as_bool) == Some(true);
    let subtype = result
        .get("subtype")
        .and_then(Value::as_str)
        .unwrap_or("success");
    if is_error || subtype != "success" {
        let message = result
            .get("result")
            .and_then(Value::as_str)
            .filter(|text| !text.trim().is_empty())
            .map(str::to_string)
            .or_else(|| {
                let errors = result.get("errors")?.as_array()?;
                let texts: Vec<String> = errors
                    .iter()
                    .map(|error| match error.as_str() {
                        Some(text) => text.to_string(),
                        None => error.to_string(),
                    })
                    .collect();
                (!texts.is_empty()).then(|| texts.join("; "))
            })
            .unwrap_or_else(|| subtype.to_string());
        let status = result
            .get("api_error_status")
            .and_then(Value::as_u64)
            .and_then(|status| u16::try_from(status).ok());
        return Err(ModelError::Claude {
            alias: alias.to_string(),
            message,
            status,
        });
    }
    let text = match result.get("structured_output") {
        Some(value) if !value.is_null() => value.to_string(),
        _ => result
            .get("result")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string(),
    };
    let usage = result.get("usage").filter(|u| u.is_object()).map(|usage| {
        let count = |field: &str| usage.get(field).and_then(Value::as_u64).unwrap_or(0);
        Usage {
            input_tokens: count("input_tokens"),
            output_tokens: count("output_tokens"),
            cache_read_tokens: count("cache_read_input_tokens"),
            cache_write_tokens: count("cache_creation_input_tokens"),
        }
    });
    Ok(Answer {
        text,
        usage,
        cost_usd: result.get("total_cost_usd").and_then(Value::as_f64),
        retried: Retried::default(),
    })
}

/// A directory of its own for the CLI to run in, the same for every call (the CLI keys some of
/// its state by working directory): `$XDG_CACHE_HOME/stagegraph/claude`, else
/// `~/.cache/stagegraph/claude`, else one under the temporary folder.
fn working_directory() -> std::io::Result<PathBuf> {
    let var = |name: &str| std::env::var_os(name).filter(|value| !value.is_empty());
    let base = var("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .filter(|path| path.is_absolute())
        .or_else(|| var("HOME").map(|home| PathBuf::from(home).join(".cache")))
        .unwrap_or_else(std::env::temp_dir);
    let dir = base.join("stagegraph").join("claude");
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}
