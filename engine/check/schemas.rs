//! Schemas: output schemas found and compiled once per workflow, and what is statically known of
//! each stage's output (for `stages.X.output.a.b` paths).

use std::sync::Arc;

use super::gather::PendingAction;
use super::Checker;
use crate::diag::{did_you_mean, DiagnosticKind};
use crate::format::{OutputFormat, StageDef};
use crate::library::Shelf;
use crate::schema::Schema;

impl Checker<'_> {
    pub(super) fn load_schema(&mut self, name: &str, pointer: &str) -> Option<Arc<Schema>> {
        if let Some(cached) = self.schemas.get(name) {
            return cached.clone();
        }
        let result = match self
            .search
            .find_file(&self.raw.library, Shelf::Schemas, name)
        {
            None => {
                self.error(DiagnosticKind::SchemaNotFound(name.to_string()), pointer)
                    .help = Some(format!(
                    "schemas are looked up under `schemas/` in {} and along the search path",
                    self.raw.library.display()
                ));
                None
            }
            Some(file) => match Schema::compile(&file) {
                Ok(schema) => Some(Arc::new(schema)),
                Err(diagnostic) => {
                    self.diags.push(*diagnostic);
                    self.error(
                        DiagnosticKind::StageSchemaDoesNotCompile(name.to_string()),
                        pointer,
                    );
                    None
                }
            },
        };
        self.schemas.insert(name.to_string(), result.clone());
        result
    }

    pub(super) fn schema_of(&mut self, action: Option<&PendingAction>, def: &StageDef) -> SchemaOf {
        if def.foreach.is_some() {
            return SchemaOf::List;
        }
        if let Some(name) = def.output.as_ref().and_then(|o| o.schema.as_ref()) {
            return match self.schemas.get(name).cloned().flatten() {
                Some(schema) => SchemaOf::Known(schema),
                None => SchemaOf::Unknown,
            };
        }
        let format = def.output.as_ref().map(|o| o.format);
        match (action, format) {
            (Some(PendingAction::Uses { builtin }), _) => {
                let schema = match builtin.name {
                    crate::builtins::ask::NAME => {
                        crate::builtins::ask::output_schema_for(def.with.as_deref())
                    }
                    _ => (builtin.output_schema)(),
                };
                match Schema::from_value(schema, builtin.name) {
                    Ok(schema) => SchemaOf::Known(Arc::new(schema)),
                    Err(_) => SchemaOf::Unknown,
                }
            }
            (Some(PendingAction::Workflow { workflow }), _) => {
                SchemaOf::Keys(workflow.outputs.iter().map(|(k, _)| k.clone()).collect())
            }
            (_, Some(OutputFormat::Json)) => SchemaOf::Unknown,
            (_, Some(OutputFormat::Lines)) => SchemaOf::List,
            (Some(PendingAction::None), _) => SchemaOf::Nothing,
            (Some(PendingAction::Failed), _) => SchemaOf::Unknown,
            _ => SchemaOf::Text,
        }
    }
}

/// What is statically known of a stage's output.
pub(crate) enum SchemaOf {
    Known(Arc<Schema>),
    Keys(Vec<String>),
    Text,
    List,
    Nothing,
    Unknown,
}

/// What is wrong with a path, and a help line.
type PathError = (DiagnosticKind, Option<String>);

impl SchemaOf {
    pub(crate) fn check_path(&self, path: &[&str], stage: &str) -> Result<(), PathError> {
        let Some(first) = path.first() else {
            return Ok(());
        };
        match self {
            SchemaOf::Known(schema) => schema.check_path(path),
            SchemaOf::Keys(keys) => {
                if keys.iter().any(|k| k == first) {
                    Ok(())
                } else {
                    Err((
                        DiagnosticKind::NoSubWorkflowOutput {
                            stage: stage.to_string(),
                            output: (*first).to_string(),
                        },
                        did_you_mean(first, keys.iter().map(String::as_str)),
                    ))
                }
            }
            SchemaOf::Text => Err((
                DiagnosticKind::TextHasNoField {
                    stage: stage.to_string(),
                    field: (*first).to_string(),
                },
                Some(
                    "give the stage `output = { format = \"json\", schema = ... }` to read fields"
                        .into(),
                ),
            )),
            SchemaOf::List => Err((
                DiagnosticKind::ListHasNoField {
                    stage: stage.to_string(),
                    field: (*first).to_string(),
                },
                Some("index it (`[0]`) or loop over it".into()),
            )),
            SchemaOf::Nothing => Err((
                DiagnosticKind::NoOutputField {
                    stage: stage.to_string(),
                    field: (*first).to_string(),
                },
                None,
            )),
            SchemaOf::Unknown => Ok(()),
        }
    }
}
