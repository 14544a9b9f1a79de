//! A run's inputs and answers from the command line: `--inputs-json`, `--input K=V` typed by
//! their declarations, and `--answer STAGE=VALUE` checked against the workflow's `ask` stages.

use std::io::IsTerminal;

use serde_json::{Map, Value};

use crate::builtins::ask;
use crate::check::{Action, Workflow};
use crate::diag::did_you_mean;
pub(crate) use crate::run::inputs::resolve_inputs;
pub use crate::run::inputs::InputError;

fn input_error(message: impl Into<String>) -> InputError {
    InputError {
        message: message.into(),
    }
}

/// How `ask` stages are answered: `--answer STAGE=VALUE` pairs (each STAGE an `ask` stage of the
/// workflow or of a sub-workflow, a written-out choice checked now), `--yes`, and whether a
/// person can be asked (stdin and stderr are terminals).
pub(crate) fn resolve_answers(
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
/// `cwd`, or `-` for stdin; keys the workflow does not declare are ignored) and the `--input K=V`
/// pairs (an undeclared key is an error), typed by the declarations, defaults applied and
/// required inputs checked.
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
                crate::floor::text::read_utf8(&cwd.join(source))
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

/// The inputs a recorded run is resumed with: what it recorded, resolved again against the
/// workflow as it is now (defaults applied, types and required inputs checked), so a run that
/// failed before its inputs were resolved, or a workflow that has gained a required input since,
/// is refused with the input it lacks instead of failing inside a template.
pub fn resume_inputs(
    workflow: &Workflow,
    recorded: &Map<String, Value>,
) -> Result<Map<String, Value>, InputError> {
    resolve_inputs(workflow, recorded.clone(), &Map::new())
}
