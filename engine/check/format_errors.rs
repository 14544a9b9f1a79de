//! Format errors: the document against the format's JSON Schema, explained key by key.
//!
//! The typed reading is as strict as the schema but for [`within_bounds`], so the schema (whose
//! compiled validator is large and slow to build) is consulted only to explain a document that
//! does not read. The values it rejects are dropped from a copy so checking can go on and report
//! every other problem in the same pass.

use std::sync::OnceLock;

use serde_json::{Map, Value};

use crate::diag::{did_you_mean, nearest, Diagnostic, DiagnosticKind};
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
                    let named = (pointer == "/workflow" && key == "name").then(|| {
                        format!(
                            "a workflow is named by its file: this one is `{}`",
                            raw.name
                        )
                    });
                    let help = named
                        .or_else(|| did_you_mean(key, allowed.iter().map(String::as_str)))
                        .or_else(|| known_elsewhere(key, &allowed))
                        .or_else(|| belongs_in(&schema_value, &pointer, key))
                        .or_else(|| {
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
            kind => {
                let message = describe_schema_error(&error, &pointer);
                let help = matches!(
                    kind,
                    K::Type { .. } | K::AnyOf { .. } | K::OneOfNotValid { .. }
                )
                .then(|| shape_help(&schema_value, &pointer, error.instance()))
                .flatten();
                diags.push(
                    Diagnostic::error(message)
                        .at_opt(raw.locate(&pointer))
                        .with_help_opt(help),
                );
                rejected.push(pointer);
            }
        }
    }
    rejected
}

/// Keys of other pipeline tools (GitHub Actions, GitLab CI, Compose, Taskfile, ...) that a
/// stage spells another way, when that way is one of the keys allowed here: `needs` is
/// `after`, `run` is `shell`. No edit distance finds these.
fn known_elsewhere(key: &str, allowed: &[String]) -> Option<String> {
    const SYNONYMS: &[(&[&str], &str)] = &[
        (
            &[
                "needs",
                "depends_on",
                "depends-on",
                "dependsOn",
                "depends",
                "requires",
            ],
            "after",
        ),
        (&["run", "script", "sh", "bash"], "shell"),
        (&["cmd", "exec", "argv"], "command"),
        (
            &[
                "working-directory",
                "working_directory",
                "workdir",
                "dir",
                "cwd_path",
            ],
            "cwd",
        ),
        (&["environment", "variables"], "env"),
        (&["condition", "when"], "if"),
        (
            &["timeout-minutes", "timeout_minutes", "timeout_seconds"],
            "timeout",
        ),
        (
            &["continue-on-error", "continue_on_error", "allow_failure"],
            "on_error",
        ),
        (&["retry", "attempts", "max_attempts"], "retries"),
        (&["matrix", "for_each", "for-each", "loop"], "foreach"),
        (&["action"], "uses"),
        // Not `name`: a workflow's name is its file's, and `[workflow] name` may mean that.
        (&["title", "summary"], "description"),
    ];
    let (_, ours) = SYNONYMS.iter().find(|(theirs, _)| theirs.contains(&key))?;
    allowed
        .iter()
        .any(|allowed| allowed == ours)
        .then(|| format!("this format calls it `{ours}`"))
}

/// A key of another table of the format, given where it is not one: `extends` at the top is
/// `[workflow] extends`, `shell` at the top belongs to a stage.
fn belongs_in(schema: &Value, pointer: &str, key: &str) -> Option<String> {
    const TABLES: &[(&str, &str)] = &[
        ("/workflow", "`[workflow]`"),
        ("/stages/_", "a stage's table, `[stages.<id>]`"),
    ];
    TABLES
        .iter()
        .filter(|(table, _)| {
            !(pointer == *table
                || (table.starts_with("/stages/") && pointer.starts_with("/stages/")))
        })
        .find(|(table, _)| allowed_keys(schema, table).iter().any(|k| k == key))
        .map(|(_, name)| format!("`{key}` belongs in {name}"))
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

/// A node of the format's schema with its `$ref` followed (a few deep).
fn resolve(schema: &Value, node: &Value) -> Value {
    let defs = schema.get("$defs");
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
}

/// The alternatives of an `anyOf` node that describe a table, resolved.
fn table_branch(schema: &Value, node: &Value) -> Option<Value> {
    node.get("anyOf")
        .and_then(Value::as_array)
        .and_then(|alts| {
            alts.iter()
                .map(|alt| resolve(schema, alt))
                .find(|a| a.get("properties").is_some())
        })
}

/// The schema node of the value at a pointer of the document, its `$ref` followed.
fn node_at(schema: &Value, pointer: &str) -> Option<Value> {
    let mut node = resolve(schema, schema);
    for segment in pointer
        .trim_start_matches('/')
        .split('/')
        .filter(|s| !s.is_empty())
    {
        let next = node
            .get("properties")
            .and_then(|p| p.get(segment))
            .cloned()
            .or_else(|| {
                node.get("additionalProperties")
                    .filter(|a| a.is_object())
                    .cloned()
            })
            .or_else(|| table_branch(schema, &node))?;
        node = resolve(schema, &next);
    }
    Some(node)
}

/// The keys the format allows at a pointer (for suggestions).
fn allowed_keys(schema: &Value, pointer: &str) -> Vec<String> {
    let Some(mut node) = node_at(schema, pointer) else {
        return Vec::new();
    };
    if node.get("properties").is_none() {
        if let Some(alt) = table_branch(schema, &node) {
            node = alt;
        }
    }
    node.get("properties")
        .and_then(Value::as_object)
        .map(|p| p.keys().cloned().collect())
        .unwrap_or_default()
}

/// How a value of the wrong type or shape is written instead: the value itself converted
/// where that is plain (`after = "a"` is `after = ["a"]`, `retries = "3"` is `retries = 3`,
/// `timeout = 30` is `timeout = "30s"`), else the format's own example of the key (`cache = true`
/// or `{ key = "template", ttl = "7d" }`).
fn shape_help(schema: &Value, pointer: &str, found: &Value) -> Option<String> {
    let node = node_at(schema, pointer)?;
    let key = pointer.rsplit('/').next().unwrap_or_default();
    let types: Vec<&str> = match node.get("type") {
        Some(Value::String(one)) => vec![one.as_str()],
        Some(Value::Array(many)) => many.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    };
    let mut branches = vec![node.clone()];
    if let Some(alts) = node.get("anyOf").and_then(Value::as_array) {
        branches.extend(alts.iter().map(|alt| resolve(schema, alt)));
    }
    let example = branches
        .iter()
        .filter_map(|branch| branch.get("description").and_then(Value::as_str))
        .find(|text| text.contains('`'));
    let duration = example.is_some_and(|text| text.contains("\"30s\""));
    let written = match found {
        Value::String(text) if types.contains(&"array") => {
            Some(Value::Array(vec![Value::String(text.clone())]).to_string())
        }
        Value::String(text) if types.contains(&"integer") => text
            .trim()
            .parse::<i64>()
            .ok()
            .map(|number| number.to_string()),
        Value::String(text) if types.contains(&"boolean") => {
            match text.trim().to_ascii_lowercase().as_str() {
                "true" | "yes" | "on" => Some("true".to_string()),
                "false" | "no" | "off" => Some("false".to_string()),
                _ => None,
            }
        }
        Value::Number(number) if types.contains(&"string") && duration => {
            Some(format!("\"{number}s\""))
        }
        Value::Number(number) if types.contains(&"string") => Some(format!("\"{number}\"")),
        Value::String(text) => in_a_table(schema, &branches, text),
        Value::Object(table) if table.len() == 1 => {
            // The alternatives one level down too: `template` is a file's name or a table.
            let mut all = branches.clone();
            for branch in &branches {
                if let Some(alts) = branch.get("anyOf").and_then(Value::as_array) {
                    all.extend(alts.iter().map(|alt| resolve(schema, alt)));
                }
            }
            one_key_table(&all, types.contains(&"string"), table)
        }
        _ => None,
    };
    match (written, example) {
        (Some(written), _) => Some(format!("write `{key} = {written}`")),
        (None, Some(example)) => Some(format!("written as {example}")),
        (None, None) => None,
    }
}

/// A table of one key given where the key takes a string or a table of other keys: the
/// table's nearest key (`template = { inlin = "x" }` is `{ inline = "x" }`), else the string
/// alone (`template = { file = "page.j2" }` is `template = "page.j2"`).
fn one_key_table(branches: &[Value], string: bool, table: &Map<String, Value>) -> Option<String> {
    let (key, value) = table.iter().next()?;
    let keys = branches
        .iter()
        .filter_map(|branch| branch.get("properties").and_then(Value::as_object))
        .flat_map(|properties| properties.keys().map(String::as_str));
    if let Some(known) = nearest(key, keys) {
        return Some(format!("{{ {known} = {value} }}"));
    }
    let string = string
        || branches
            .iter()
            .any(|branch| branch.get("type").and_then(Value::as_str) == Some("string"));
    (string && value.is_string()).then(|| value.to_string())
}

/// A string given where a table is wanted, which is a value one key of the table takes
/// (`output = "json"` for `output = { format = "json" }`): that table, written inline.
fn in_a_table(schema: &Value, branches: &[Value], text: &str) -> Option<String> {
    let table = branches
        .iter()
        .find(|branch| branch.get("properties").is_some())?;
    let mut takers = table
        .get("properties")?
        .as_object()?
        .iter()
        .filter(|(_, property)| {
            resolve(schema, property)
                .get("enum")
                .and_then(Value::as_array)
                .is_some_and(|values| values.iter().any(|value| value == text))
        })
        .map(|(name, _)| name);
    match (takers.next(), takers.next()) {
        (Some(name), None) => Some(format!("{{ {name} = {} }}", Value::from(text))),
        _ => None,
    }
}
