//! A run's inputs: values typed by their declarations, defaults applied, required ones
//! present. The command line's `--input` text and a sub-workflow stage's inputs both go
//! through [`resolve_inputs`].

use serde_json::{Map, Value};

use crate::check::Workflow;
use crate::diag::did_you_mean;
use crate::format::InputType;

/// An input problem: exit code 2.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct InputError {
    /// What is wrong with the inputs, naming the input.
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
pub(crate) fn parse_input_value(
    kind: InputType,
    name: &str,
    text: &str,
) -> Result<Value, InputError> {
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
pub(crate) fn resolve_inputs(
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
