//! Foreach: what a `foreach` loops over, typed by where it comes from.
//!
//! When the expression is a plain path to an upstream stage's output (`stages.X.output.a.b`) or
//! to an input, its type is known statically: from X's output schema (declared, a built-in's, a
//! sub-workflow's outputs), from X's format (text, lines), or from the input's declared type. An
//! object, a string (looped over character by character), a number or a boolean is not a list:
//! that is an error at the `foreach`, with the list to loop over instead. When the items have a
//! schema, the reference pass checks the fields of `item` against it.

use std::sync::Arc;

use regex::Regex;

use super::schemas::SchemaOf;
use super::{stage_pointer, Checker};
use crate::diag::DiagnosticKind;
use crate::format::{InputType, OutputFormat};
use crate::schema::Schema;

/// What is statically known of the items of a stage's `foreach`.
pub(crate) enum ItemOf {
    Unknown,
    /// Each item is described by the node at `path` of `schema` (the list's `items`).
    Schema {
        schema: Arc<Schema>,
        path: Vec<String>,
        /// The list, as the `foreach` wrote it.
        list: String,
    },
    /// Each item is a line of text (the upstream stage's format is `lines`).
    Line {
        list: String,
    },
}

/// A `foreach` expression that is a plain path.
enum Source {
    Output { stage: String, path: Vec<String> },
    Input(String),
}

fn parse(source: &str) -> Option<Source> {
    static PATH: std::sync::LazyLock<Regex> = std::sync::LazyLock::new(|| {
        Regex::new(
            r"^\s*(?:stages\.([a-z][a-z0-9_]*)\.output((?:\.[A-Za-z_][A-Za-z0-9_]*|\.[0-9]+|\[[0-9]+\])*)|inputs\.([A-Za-z_][A-Za-z0-9_-]*))\s*$",
        )
        .expect("a valid regex")
    });
    let caps = PATH.captures(source)?;
    if let Some(input) = caps.get(3) {
        return Some(Source::Input(input.as_str().to_string()));
    }
    let path = caps
        .get(2)
        .map(|m| m.as_str())
        .unwrap_or_default()
        .replace('[', ".")
        .replace(']', "");
    Some(Source::Output {
        stage: caps[1].to_string(),
        path: path
            .split('.')
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .collect(),
    })
}

impl Checker<'_> {
    /// Each stage's items, in the order of the stages; errors for a `foreach` over what is not
    /// a list.
    pub(super) fn check_foreach(&mut self, schemas: &[SchemaOf]) -> Vec<ItemOf> {
        let file = self.file;
        let mut items = Vec::with_capacity(file.stages.len());
        for (id, def) in &file.stages {
            let item = match def.foreach.as_deref().and_then(parse) {
                None => ItemOf::Unknown,
                Some(source) => {
                    let pointer = format!("{}/foreach", stage_pointer(id));
                    let list = def
                        .foreach
                        .as_deref()
                        .unwrap_or_default()
                        .trim()
                        .to_string();
                    self.foreach_source(id, &source, &list, &pointer, schemas)
                }
            };
            items.push(item);
        }
        items
    }

    fn foreach_source(
        &mut self,
        id: &str,
        source: &Source,
        list: &str,
        pointer: &str,
        schemas: &[SchemaOf],
    ) -> ItemOf {
        let (stage, path) = match source {
            Source::Input(name) => {
                let Some(decl) = self.file.inputs.get(name) else {
                    // An unknown input: the reference pass reports it.
                    return ItemOf::Unknown;
                };
                let help = match decl.kind {
                    InputType::Array => return ItemOf::Unknown,
                    InputType::String => format!(
                        "declare it `type = \"array\"`, or split it: `foreach = \"{list} | split(',')\"`"
                    ),
                    InputType::Object => format!(
                        "loop over its [key, value] pairs with `foreach = \"{list} | items\"`, or declare it `type = \"array\"`"
                    ),
                    InputType::Integer => format!(
                        "`foreach = \"range({list})\"` loops over 0 to {list} - 1; or declare it `type = \"array\"`"
                    ),
                    InputType::Number | InputType::Boolean => {
                        "declare it `type = \"array\"`".to_string()
                    }
                };
                self.error(
                    DiagnosticKind::ForeachOverInput {
                        input: name.clone(),
                        kind: decl.kind.name(),
                    },
                    pointer,
                )
                .help = Some(help);
                return ItemOf::Unknown;
            }
            Source::Output { stage, path } => (stage, path),
        };
        let Some(target) = self.file.stages.get_index_of(stage.as_str()) else {
            return ItemOf::Unknown;
        };
        if stage == id {
            return ItemOf::Unknown;
        }
        let upstream = &self.file.stages[target];
        match &schemas[target] {
            SchemaOf::Known(schema) => {
                let segments: Vec<&str> = path.iter().map(String::as_str).collect();
                let Some(node) = schema.node_at(&segments) else {
                    // A path the schema does not have: the reference pass reports it.
                    return ItemOf::Unknown;
                };
                let kinds = Schema::types_of(node);
                if kinds.iter().any(|k| k == "array") {
                    if node.get("items").is_some_and(serde_json::Value::is_object) {
                        let mut items = path.clone();
                        items.push("0".into());
                        return ItemOf::Schema {
                            schema: Arc::clone(schema),
                            path: items,
                            list: list.to_string(),
                        };
                    }
                    return ItemOf::Unknown;
                }
                let Some(kind) = kinds.iter().find(|k| *k != "null") else {
                    return ItemOf::Unknown;
                };
                let help = match kind.as_str() {
                    "object" => {
                        let arrays = schema.array_properties(node);
                        match arrays.as_slice() {
                            [] => format!(
                                "loop over its [key, value] pairs with `foreach = \"{list} | items\"`"
                            ),
                            [one] => format!("loop over its list: `foreach = \"{list}.{one}\"`"),
                            many => format!(
                                "loop over one of its lists: {}",
                                many.iter()
                                    .map(|f| format!("`{list}.{f}`"))
                                    .collect::<Vec<_>>()
                                    .join(", ")
                            ),
                        }
                    }
                    "string" => format!(
                        "a string would be looped over character by character; split it (`foreach = \"{list} | split(',')\"`), or make it an array in the schema"
                    ),
                    "integer" => format!(
                        "`foreach = \"range({list})\"` loops over 0 to {list} - 1"
                    ),
                    _ => "loop over a list".to_string(),
                };
                self.error(
                    DiagnosticKind::ForeachOverNonList {
                        list: list.to_string(),
                        kind: kind.clone(),
                        schema: schema.short_name(),
                    },
                    pointer,
                )
                .help = Some(help);
                ItemOf::Unknown
            }
            SchemaOf::Text if path.is_empty() => {
                self.error(
                    DiagnosticKind::ForeachOverText(stage.clone()),
                    pointer,
                )
                .help = Some(format!(
                    "give `{stage}` `output = {{ format = \"lines\" }}` to loop over its lines, or `format = \"json\"` for a JSON list"
                ));
                ItemOf::Unknown
            }
            SchemaOf::List if path.is_empty() => {
                let lines = upstream.foreach.is_none()
                    && upstream
                        .output
                        .as_ref()
                        .is_some_and(|o| o.format == OutputFormat::Lines);
                if lines {
                    ItemOf::Line {
                        list: list.to_string(),
                    }
                } else {
                    ItemOf::Unknown
                }
            }
            SchemaOf::Keys(keys) if path.is_empty() => {
                self.error(DiagnosticKind::ForeachOverOutputs(stage.clone()), pointer)
                    .help = Some(if keys.is_empty() {
                    "the sub-workflow has no `[outputs]`".to_string()
                } else {
                    format!(
                        "loop over one of its outputs: {}",
                        keys.iter()
                            .map(|k| format!("`{list}.{k}`"))
                            .collect::<Vec<_>>()
                            .join(", ")
                    )
                });
                ItemOf::Unknown
            }
            SchemaOf::Nothing if path.is_empty() => {
                self.error(DiagnosticKind::ForeachOverNothing(stage.clone()), pointer)
                    .help = Some(format!(
                    "give `{stage}` an action, or loop over another stage's output"
                ));
                ItemOf::Unknown
            }
            _ => ItemOf::Unknown,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{parse, Source};

    fn output(source: &str) -> Option<(String, Vec<String>)> {
        match parse(source) {
            Some(Source::Output { stage, path }) => Some((stage, path)),
            _ => None,
        }
    }

    #[test]
    fn plain_paths_are_typed_and_expressions_are_not() {
        assert_eq!(output("stages.a.output"), Some(("a".into(), vec![])));
        assert_eq!(
            output(" stages.gate.output.items[0].names "),
            Some((
                "gate".into(),
                vec!["items".into(), "0".into(), "names".into()]
            ))
        );
        assert!(matches!(parse("inputs.xs"), Some(Source::Input(name)) if name == "xs"));
        for expression in [
            "stages.a.output | items",
            "stages.a.output.xs + stages.b.output.ys",
            "range(3)",
            "stages.a.output['key']",
            "stages.a.status",
        ] {
            assert!(parse(expression).is_none(), "{expression}");
        }
    }
}
