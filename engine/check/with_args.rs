//! Built-in arguments: a `uses` stage's `with` against the built-in's schema (unknown and
//! missing keys, and the values that are literals).

use serde_json::Value;

use super::{stage_pointer, Checker};
use crate::builtins::Builtin;
use crate::diag::{did_you_mean, DiagnosticKind};
use crate::format::StageDef;
use crate::load::pointer_segment;
use crate::template::compiled;

impl Checker<'_> {
    pub(super) fn check_with(&mut self, id: &str, builtin: &Builtin, def: &StageDef) {
        let schema = (builtin.with_schema)();
        let sp = stage_pointer(id);
        let with = def.with.clone().unwrap_or_default();
        let properties = schema
            .get("properties")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        for key in with.keys() {
            if !properties.contains_key(key) {
                let help = did_you_mean(key, properties.keys().map(String::as_str)).or_else(|| {
                    Some(format!(
                        "`{}` takes: {}",
                        builtin.name,
                        properties.keys().cloned().collect::<Vec<_>>().join(", ")
                    ))
                });
                self.error_key(
                    DiagnosticKind::UnknownArgument {
                        builtin: builtin.name,
                        key: key.clone(),
                    },
                    &format!("{sp}/with/{}", pointer_segment(key)),
                )
                .help = help;
            }
        }
        for required in schema
            .get("required")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let Some(required) = required.as_str() else {
                continue;
            };
            if !with.contains_key(required) {
                let pointer = if def.with.is_some() {
                    format!("{sp}/with")
                } else {
                    format!("{sp}/uses")
                };
                self.error(
                    DiagnosticKind::MissingArgument {
                        builtin: builtin.name,
                        key: required.to_string(),
                    },
                    &pointer,
                );
            }
        }
        for (key, value) in with.iter() {
            let Some(property) = properties.get(key) else {
                continue;
            };
            if value.as_str().is_some_and(compiled::has_syntax) {
                continue;
            }
            if let Ok(validator) = jsonschema::validator_for(property) {
                if let Some(error) = validator.iter_errors(value).next() {
                    self.error(
                        DiagnosticKind::BadArgument {
                            key: key.clone(),
                            builtin: builtin.name,
                            error: error.to_string(),
                        },
                        &format!("{sp}/with/{}", pointer_segment(key)),
                    );
                }
            }
        }
    }
}
