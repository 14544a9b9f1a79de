//! A run's inputs and answers from the command line: `--inputs-json`, `--input K=V` typed by
//! their declarations, and `--answer STAGE=VALUE` checked against the workflow's `ask` stages.

use std::io::IsTerminal;

use serde_json::{Map, Value};

use crate::builtins::ask;
use crate::check::{Action, Workflow};
use crate::diag::did_you_mean;
use crate::format::InputType;

/// An input problem: exit code 2.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct InputError {
    pub message: String,
}

fn input_error(message: impl Into<String>) -> InputError {
    InputError {
        message: message.into(),
    }
}

/// "an integer", "a string": how a type reads in a message.
fn with_article(kind: InputType) -> String {
    match kind {
        InputType::Integer | InputType::Array | InputType::Object => format!("an {}", kind.name()),
        _ => format!("a {}", kind.name()),
    }
}

/// Parse `--input K=V` text by the declared type.
pub fn parse_input_value(kind: InputType, name: &str, text: &str) -> Result<Value, InputError> {
    let bad = || {
        input_error(format!(
            "input `{name}` must be {}, not `{text}`",
            with_article(kind)
        ))
    };
    Ok(match kind {
        InputType::String => Value::String(text.to_string()),
        InputType::Integer => Value::from(text.trim().parse::<i64>().map_err(|_| bad())?),
        InputType::Number => {
            serde_json::Number::from_f64(text.trim().parse::<f64>().map_err(|_| bad())?)
                .map(Value::Number)
                .ok_or_else(bad)?
        }
        InputType::Boolean => match text.trim().to_ascii_lowercase().as_str() {
            "true" | "1" | "yes" | "on" => Value::Bool(true),
            "false" | "0" | "no" | "off" => Value::Bool(false),
            _ => return Err(bad()),
        },
        InputType::Array | InputType::Object => {
            let value: Value = serde_json::from_str(text).map_err(|_| bad())?;
            if !kind.admits(&value) {
                return Err(bad());
            }
            value
        }
    })
}

/// Combine `--inputs-json` (unknown keys ignored: payloads grow new fields) and `--input K=V`
/// (unknown keys are errors), apply defaults, check types and required inputs.
pub fn resolve_inputs(
    workflow: &Workflow,
    json: Map<String, Value>,
    pairs: &Map<String, Value>,
) -> Result<Map<String, Value>, InputError> {
    let declared = &workflow.inputs;
    let mut out = Map::new();
    for (name, value) in json {
        if let Some(decl) = declared.get(&name) {
            if !decl.kind.admits(&value) {
                return Err(input_error(format!(
                    "input `{name}` must be {}, not {}",
                    with_article(decl.kind),
                    value
                )));
            }
            out.insert(name, value);
        }
    }
    for (name, value) in pairs {
        let Some(decl) = declared.get(name) else {
            let help = did_you_mean(name, declared.keys().map(String::as_str))
                .map(|h| format!("; {h}"))
                .unwrap_or_default();
            return Err(input_error(format!(
                "workflow `{}` has no input `{name}`{help}",
                workflow.name
            )));
        };
        let value = match value {
            Value::String(text) => parse_input_value(decl.kind, name, text)?,
            other => other.clone(),
        };
        out.insert(name.clone(), value);
    }
    for (name, decl) in declared {
        if out.contains_key(name) {
            continue;
        }
        match &decl.default {
            Some(default) => {
                out.insert(name.clone(), default.clone());
            }
            None => {
                return Err(input_error(format!(
                    "workflow `{}` needs input `{name}` ({}){}; give it with --input {name}=...",
                    workflow.name,
                    decl.kind.name(),
                    decl.description
                        .as_deref()
                        .map(|d| format!(": {d}"))
                        .unwrap_or_default()
                )))
            }
        }
    }
    Ok(out)
}

/// How `ask` stages are answered: `--answer STAGE=VALUE` pairs (each STAGE an `ask` stage of the
/// workflow or of a sub-workflow, a written-out choice checked now), `--yes`, and whether a
/// person can be asked (stdin and stderr are terminals).
pub fn resolve_answers(
    workflow: &Workflow,
    pairs: &[String],
    yes: bool,
) -> Result<ask::Answers, InputError> {
    type AskStage = (String, Option<Vec<Value>>);
    fn ask_stages(workflow: &Workflow, out: &mut Vec<AskStage>) {
        for stage in &workflow.stages {
            match &stage.action {
                Action::Uses { builtin, with } if builtin.name == ask::NAME => {
                    let with = with.literal_entries();
                    let schema = ask::output_schema_for(Some(&with));
                    let choices = schema.get("enum").and_then(Value::as_array).cloned();
                    out.push((stage.id.clone(), choices));
                }
                Action::Workflow { workflow: sub, .. } => ask_stages(sub, out),
                _ => {}
            }
        }
    }
    let mut stages = Vec::new();
    ask_stages(workflow, &mut stages);
    let known: Vec<String> = stages.iter().map(|(id, _)| id.clone()).collect();
    let mut given = std::collections::BTreeMap::new();
    for pair in pairs {
        let Some((stage, value)) = pair.split_once('=') else {
            return Err(input_error(format!(
                "--answer expects STAGE=VALUE, got `{pair}`"
            )));
        };
        let stage = stage.trim();
        if !known.iter().any(|k| k == stage) {
            let help = did_you_mean(stage, known.iter().map(String::as_str)).map_or_else(
                || match known.is_empty() {
                    true => format!("; workflow `{}` asks nothing", workflow.name),
                    false => format!("; its `ask` stages: {}", known.join(", ")),
                },
                |h| format!("; {h}"),
            );
            return Err(input_error(format!(
                "--answer {stage}=...: `{stage}` is not an `ask` stage of workflow `{}`{help}",
                workflow.name
            )));
        }
        // Choices written out are known now: a wrong answer is a wrong command line.
        let choices = stages
            .iter()
            .find(|(id, _)| id == stage)
            .and_then(|(_, choices)| choices.as_ref());
        if let Some(choices) = choices {
            let names: Vec<&str> = choices.iter().filter_map(Value::as_str).collect();
            if !names.iter().any(|c| c.eq_ignore_ascii_case(value)) {
                return Err(input_error(format!(
                    "--answer {stage}={value}: `{value}` is not one of the choices of `{stage}` ({})",
                    names.join(", ")
                )));
            }
        }
        given.insert(stage.to_string(), value.to_string());
    }
    Ok(ask::Answers {
        given,
        yes,
        terminal: std::io::stdin().is_terminal() && std::io::stderr().is_terminal(),
    })
}

/// A run's inputs from the command line: the object of `--inputs-json` (a file relative to
/// `cwd`, or `-` for stdin) and the `--input K=V` pairs, resolved by [`resolve_inputs`].
pub fn read_inputs(
    workflow: &Workflow,
    inputs_json: Option<&str>,
    pairs: &[String],
    cwd: &std::path::Path,
) -> Result<Map<String, Value>, InputError> {
    let json = match inputs_json {
        None => Map::new(),
        Some(source) => {
            let text = if source == "-" {
                let mut text = String::new();
                std::io::Read::read_to_string(&mut std::io::stdin(), &mut text)
                    .map_err(|e| input_error(format!("cannot read inputs from stdin: {e}")))?;
                text
            } else {
                std::fs::read_to_string(cwd.join(source))
                    .map_err(|e| input_error(format!("cannot read {source}: {e}")))?
            };
            match serde_json::from_str::<Value>(&text) {
                Ok(Value::Object(map)) => map,
                Ok(other) => {
                    return Err(input_error(format!(
                        "--inputs-json must be a JSON object, not {other}"
                    )))
                }
                Err(e) => return Err(input_error(format!("--inputs-json is not valid JSON: {e}"))),
            }
        }
    };
    let mut given = Map::new();
    for pair in pairs {
        let Some((key, value)) = pair.split_once('=') else {
            return Err(input_error(format!("--input expects K=V, got `{pair}`")));
        };
        given.insert(key.trim().to_string(), Value::String(value.to_string()));
    }
    resolve_inputs(workflow, json, &given)
}
