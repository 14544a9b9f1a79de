//! Format errors: the document against the format's JSON Schema, explained key by key.
//!
//! The typed reading is as strict as the schema but for [`within_bounds`], so the schema (whose
//! compiled validator is large and slow to build) is consulted only to explain a document that
//! does not read. The values it rejects are dropped from a copy so checking can go on and report
//! every other problem in the same pass.

use std::sync::OnceLock;

use serde_json::Value;

use crate::diag::{did_you_mean, Diagnostic, DiagnosticKind};
use crate::format::WorkflowFile;
use crate::load::{pointer_segment, RawWorkflow};

/// The format's constraints that the typed reading does not enforce by itself.
pub(crate) fn within_bounds(file: &WorkflowFile) -> bool {
    file.stages
        .values()
        .all(|stage| stage.concurrency != Some(0))
}

/// Validate the document against the format's JSON Schema, one diagnostic per problem.
/// Returns the pointers of the values that broke the format, for `check_inner` to drop.
pub(crate) fn validate_format(raw: &RawWorkflow, diags: &mut Vec<Diagnostic>) -> Vec<String> {
    let mut rejected = Vec::new();
    static VALIDATOR: OnceLock<Option<jsonschema::Validator>> = OnceLock::new();
    let Some(validator) = VALIDATOR
        .get_or_init(|| jsonschema::validator_for(&crate::format::workflow_schema()).ok())
        .as_ref()
    else {
        diags.push(Diagnostic::error(
            DiagnosticKind::FormatSchemaDoesNotCompile,
        ));
        return rejected;
    };
    let schema_value = crate::format::workflow_schema();
    for error in validator.iter_errors(&raw.doc) {
        let pointer = error.instance_path().to_string();
        use jsonschema::error::ValidationErrorKind as K;
        match &error.kind() {
            K::AdditionalProperties { unexpected } => {
                let allowed = allowed_keys(&schema_value, &pointer);
                for key in unexpected {
                    let key_pointer = format!("{pointer}/{}", pointer_segment(key));
                    rejected.push(key_pointer.clone());
                    let help =
                        did_you_mean(key, allowed.iter().map(String::as_str)).or_else(|| {
                            (!allowed.is_empty())
                                .then(|| format!("known keys: {}", allowed.join(", ")))
                        });
                    diags.push(
                        Diagnostic::error(DiagnosticKind::UnknownKey {
                            key: key.clone(),
                            table: pointer_to_dotted(&pointer),
                        })
                        .at_opt(raw.locate_key(&key_pointer))
                        .with_help_opt(help),
                    );
                }
            }
            _ => {
                let message = describe_schema_error(&error, &pointer);
                diags.push(Diagnostic::error(message).at_opt(raw.locate(&pointer)));
                rejected.push(pointer);
            }
        }
    }
    rejected
}

/// Remove the value at a JSON pointer (a missing one is fine).
pub(crate) fn remove_pointer(doc: &mut Value, pointer: &str) {
    let Some((parent, last)) = pointer.rsplit_once('/') else {
        return;
    };
    let key = last.replace("~1", "/").replace("~0", "~");
    match doc.pointer_mut(parent) {
        Some(Value::Object(map)) => {
            map.shift_remove(&key);
        }
        Some(Value::Array(items)) => {
            if let Ok(index) = key.parse::<usize>() {
                if index < items.len() {
                    items[index] = Value::Null;
                }
            }
        }
        _ => {}
    }
}

fn pointer_to_dotted(pointer: &str) -> String {
    pointer
        .trim_start_matches('/')
        .split('/')
        .map(|s| s.replace("~1", "/").replace("~0", "~"))
        .collect::<Vec<_>>()
        .join(".")
}

fn describe_schema_error(error: &jsonschema::ValidationError<'_>, pointer: &str) -> DiagnosticKind {
    use jsonschema::error::ValidationErrorKind as K;
    let at = pointer_to_dotted(pointer);
    match &error.kind() {
        K::Type { kind } => {
            let expected = match kind {
                jsonschema::error::TypeKind::Single(t) => t.to_string(),
                // An optional key's schema also admits null, which TOML cannot write; name the
                // one type a user can mean.
                jsonschema::error::TypeKind::Multiple(types) => {
                    let named: Vec<String> = types
                        .iter()
                        .filter(|t| *t != jsonschema::JsonType::Null)
                        .map(|t| t.to_string())
                        .collect();
                    match named.as_slice() {
                        [one] => one.clone(),
                        _ => {
                            return DiagnosticKind::FormatRule {
                                at,
                                error: error.to_string(),
                            }
                        }
                    }
                }
            };
            DiagnosticKind::WrongType {
                at,
                expected: article(&expected),
                found: json_type(error.instance()),
            }
        }
        K::Enum { options } => DiagnosticKind::NotOneOf {
            at,
            options: options.to_string(),
            found: error.instance().to_string(),
        },
        K::Required { property } => DiagnosticKind::MissingKey {
            at,
            key: property.to_string(),
        },
        K::AnyOf { .. } | K::OneOfNotValid { .. } => DiagnosticKind::WrongShape {
            at,
            found: json_type(error.instance()),
        },
        _ => DiagnosticKind::FormatRule {
            at,
            error: error.to_string(),
        },
    }
}

fn article(kind: &str) -> String {
    match kind {
        "array" | "object" | "integer" => format!("an {kind}"),
        other => format!("a {other}"),
    }
}

pub(crate) fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(n) if n.is_f64() => "a float",
        Value::Number(_) => "an integer",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "a table",
    }
}

/// The keys the format allows at a pointer (for suggestions).
fn allowed_keys(schema: &Value, pointer: &str) -> Vec<String> {
    let defs = schema.get("$defs");
    let resolve = |node: &Value| -> Value {
        let mut node = node.clone();
        for _ in 0..4 {
            let Some(reference) = node.get("$ref").and_then(Value::as_str) else {
                break;
            };
            let name = reference.rsplit('/').next().unwrap_or_default();
            match defs.and_then(|d| d.get(name)) {
                Some(target) => node = target.clone(),
                None => break,
            }
        }
        node
    };
    let mut node = resolve(schema);
    let segments: Vec<&str> = pointer
        .trim_start_matches('/')
        .split('/')
        .filter(|s| !s.is_empty())
        .collect();
    for segment in segments {
        let next = node
            .get("properties")
            .and_then(|p| p.get(segment))
            .cloned()
            .or_else(|| {
                node.get("additionalProperties")
                    .filter(|a| a.is_object())
                    .cloned()
            })
            .or_else(|| {
                node.get("anyOf")
                    .and_then(Value::as_array)
                    .and_then(|alts| {
                        alts.iter()
                            .map(&resolve)
                            .find(|a| a.get("properties").is_some())
                    })
            });
        match next {
            Some(next) => node = resolve(&next),
            None => return Vec::new(),
        }
    }
    if node.get("properties").is_none() {
        if let Some(alt) = node
            .get("anyOf")
            .and_then(Value::as_array)
            .and_then(|alts| {
                alts.iter()
                    .map(&resolve)
                    .find(|a| a.get("properties").is_some())
            })
        {
            node = alt;
        }
    }
    node.get("properties")
        .and_then(Value::as_object)
        .map(|p| p.keys().cloned().collect())
        .unwrap_or_default()
}
