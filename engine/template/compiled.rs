//! Compiled templates and expressions, and the scope they are evaluated in.
//!
//! A workflow's environment is built once by `check` and then leaked, so compiled templates and
//! expressions can live in the `Workflow` for the rest of the process without re-parsing.

use std::collections::{BTreeSet, HashSet};
use std::sync::{Arc, RwLock};

use minijinja::value::{Enumerator, Object, Value};
use minijinja::{Environment, Error, Expression, Template};

/// A template string, compiled.
pub enum Tmpl {
    /// No template syntax at all: the text as is.
    Literal(String),
    /// A template rendered to text.
    Text(Template<'static, 'static>),
    /// A template that is a single `{{ expression }}`: evaluates to the expression's value, so a
    /// list stays a list and a number a number.
    Native(Expression<'static, 'static>),
}

impl std::fmt::Debug for Tmpl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Tmpl::Literal(text) => write!(f, "Literal({text:?})"),
            Tmpl::Text(t) => write!(f, "Text({})", t.name()),
            Tmpl::Native(_) => write!(f, "Native"),
        }
    }
}

/// Whether a string uses template syntax.
pub fn has_syntax(source: &str) -> bool {
    source.contains("{{") || source.contains("{%") || source.contains("{#")
}

/// The expression of a template that is exactly one `{{ ... }}` block.
pub fn single_expression(source: &str) -> Option<&str> {
    let inner = source.trim().strip_prefix("{{")?.strip_suffix("}}")?;
    if inner.contains("{{") || inner.contains("}}") || inner.contains("{%") {
        return None;
    }
    let inner = inner.strip_prefix('-').unwrap_or(inner);
    let inner = inner.strip_suffix('-').unwrap_or(inner);
    Some(inner.trim())
}

impl Tmpl {
    /// A template whose source was added to `env` under `name` before it was leaked (or a
    /// literal / native expression, which need no registration).
    pub fn text(env: &'static Environment<'static>, name: &str) -> Result<Tmpl, Error> {
        Ok(Tmpl::Text(env.get_template(name)?))
    }

    pub fn expression(env: &'static Environment<'static>, source: &str) -> Result<Tmpl, Error> {
        Ok(Tmpl::Native(
            env.compile_expression_owned(source.to_string())?,
        ))
    }

    /// Evaluate: a string for text templates, the value for native ones.
    pub fn eval(&self, scope: &Value) -> Result<Value, Error> {
        match self {
            Tmpl::Literal(text) => Ok(Value::from(text.as_str())),
            Tmpl::Text(template) => template.render(scope).map(Value::from),
            Tmpl::Native(expression) => expression.eval(scope),
        }
    }

    /// Evaluate to text (a native value is formatted as minijinja prints it).
    pub fn render(&self, scope: &Value) -> Result<String, Error> {
        match self {
            Tmpl::Literal(text) => Ok(text.clone()),
            Tmpl::Text(template) => template.render(scope),
            Tmpl::Native(expression) => {
                let value = expression.eval(scope)?;
                if value.is_undefined() {
                    return Err(Error::new(
                        minijinja::ErrorKind::UndefinedError,
                        "the expression is undefined",
                    ));
                }
                Ok(value_to_text(&value))
            }
        }
    }

    /// The variables it reads, as dotted paths (`stages.gate.output.update`).
    pub fn references(&self) -> HashSet<String> {
        match self {
            Tmpl::Literal(_) => HashSet::new(),
            Tmpl::Text(template) => template.undeclared_variables(true),
            Tmpl::Native(expression) => expression.undeclared_variables(true),
        }
    }
}

/// How a value becomes text in a command argument, a prompt or a file: strings as they are,
/// `none` as the empty string, booleans as `true`/`false`, lists and maps as JSON, numbers as
/// numbers (not Python's `None`/`True`/`['a']`, which minijinja prints by default).
pub fn value_to_text(value: &Value) -> String {
    if let Some(text) = value.as_str() {
        return text.to_string();
    }
    if value.is_none() || value.is_undefined() {
        return String::new();
    }
    match value.kind() {
        minijinja::value::ValueKind::Bool => value.is_true().to_string(),
        minijinja::value::ValueKind::Map | minijinja::value::ValueKind::Seq => {
            serde_json::to_string(value).unwrap_or_else(|_| value.to_string())
        }
        _ => value.to_string(),
    }
}

/// The results of the run so far, shared with every render.
#[derive(Debug, Default)]
pub struct StageTable {
    pub ids: Vec<String>,
    pub index: std::collections::HashMap<String, usize>,
    pub slots: RwLock<Vec<Option<StageSlot>>>,
}

/// A finished stage as templates see it.
#[derive(Debug, Clone)]
pub struct StageSlot {
    pub output: Value,
    pub status: &'static str,
    /// SHA-256 of the status and output, for the fingerprints of the stages after it.
    pub sha256: String,
    /// A dry-run assumed this output instead of producing it.
    pub assumed: bool,
    /// Why it failed (`on_error = "continue"`), for the stages after it.
    pub error: Option<String>,
}

impl StageTable {
    pub fn new(ids: Vec<String>) -> Self {
        let index = ids
            .iter()
            .enumerate()
            .map(|(i, id)| (id.clone(), i))
            .collect();
        let slots = RwLock::new(vec![None; ids.len()]);
        StageTable { ids, index, slots }
    }

    pub fn set(&self, index: usize, slot: StageSlot) {
        let mut slots = self.slots.write().unwrap_or_else(|p| p.into_inner());
        slots[index] = Some(slot);
    }

    pub fn get(&self, index: usize) -> Option<StageSlot> {
        let slots = self.slots.read().unwrap_or_else(|p| p.into_inner());
        slots.get(index).cloned().flatten()
    }
}

#[derive(Debug)]
struct StagesView(Arc<StageTable>);

impl Object for StagesView {
    fn get_value(self: &Arc<Self>, key: &Value) -> Option<Value> {
        let index = *self.0.index.get(key.as_str()?)?;
        // A stage that has not run (the run ended early, or it was never reached) reads as
        // `{ output: none, status: "not_run" }`, so `[outputs]` can test it plainly.
        let (output, status, error) = match self.0.get(index) {
            Some(slot) => (slot.output, slot.status, slot.error),
            None => (Value::from(()), "not_run", None),
        };
        Some(Value::from_iter([
            ("output", output),
            ("status", Value::from(status)),
            ("error", Value::from(error)),
        ]))
    }

    fn enumerate(self: &Arc<Self>) -> Enumerator {
        let done: Vec<Value> = self
            .0
            .ids
            .iter()
            .enumerate()
            .filter(|(i, _)| self.0.get(*i).is_some())
            .map(|(_, id)| Value::from(id.as_str()))
            .collect();
        Enumerator::Values(done)
    }
}

/// Everything a template or expression can see.
#[derive(Debug, Clone, Default)]
pub struct Scope {
    pub inputs: Value,
    pub env: Value,
    pub stages: Value,
    pub state: Value,
    pub run: Value,
    pub item: Option<Value>,
    pub index: Option<Value>,
    pub output: Option<Value>,
}

impl Scope {
    pub fn stages_view(table: Arc<StageTable>) -> Value {
        Value::from_object(StagesView(table))
    }

    /// The scope as a template context.
    pub fn to_value(&self) -> Value {
        Value::from_object(self.clone())
    }

    pub fn with_item(&self, item: Value, index: usize) -> Scope {
        Scope {
            item: Some(item),
            index: Some(Value::from(index)),
            ..self.clone()
        }
    }

    pub fn with_output(&self, output: Value) -> Scope {
        Scope {
            output: Some(output),
            ..self.clone()
        }
    }
}

impl Object for Scope {
    fn get_value(self: &Arc<Self>, key: &Value) -> Option<Value> {
        match key.as_str()? {
            "inputs" => Some(self.inputs.clone()),
            "env" => Some(self.env.clone()),
            "stages" => Some(self.stages.clone()),
            "state" => Some(self.state.clone()),
            "run" => Some(self.run.clone()),
            "item" => self.item.clone(),
            "index" => self.index.clone(),
            "output" => self.output.clone(),
            _ => None,
        }
    }

    fn enumerate(self: &Arc<Self>) -> Enumerator {
        let mut keys = vec!["inputs", "env", "stages", "state", "run"];
        if self.item.is_some() {
            keys.extend(["item", "index"]);
        }
        if self.output.is_some() {
            keys.push("output");
        }
        Enumerator::Values(keys.into_iter().map(Value::from).collect())
    }
}

/// The names every template may read at the top level.
pub fn known_roots() -> BTreeSet<&'static str> {
    [
        "inputs", "env", "stages", "state", "run", "item", "index", "output",
    ]
    .into_iter()
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expression_references_are_nested_paths() {
        let env: &'static Environment<'static> =
            Box::leak(Box::new(crate::template::environment()));
        let tmpl = Tmpl::expression(env, "stages.items.output").unwrap();
        let refs = tmpl.references();
        assert!(refs.contains("stages.items.output"), "{refs:?}");
    }
}
