//! Compiled templates and expressions, and the scope they are evaluated in.
//!
//! A workflow's environment is built once by `check` and shared by reference count: each
//! compiled template or expression holds the environment it was compiled in beside the compiled
//! code that borrows it, so it lives as long as the `Workflow` that keeps it, and no longer.

use std::collections::{BTreeSet, HashSet};
use std::sync::{Arc, RwLock};

use minijinja::value::{Enumerator, Object, Value};
use minijinja::{Environment, Error, Expression, Template};

use super::text::value_to_text;

/// A template string, compiled.
pub(crate) enum Tmpl {
    /// No template syntax at all: the text as is.
    Literal(String),
    /// Text and `{{ a.b.c }}` lookups only, evaluated without minijinja's compiler or VM.
    Interpolated(Box<Interpolation>),
    /// A template rendered to text.
    Text(Box<TextTemplate>),
    /// A template that is a single `{{ expression }}`: evaluates to the expression's value, so a
    /// list stays a list and a number a number.
    Native(Box<Native>),
}

/// A compiled expression beside its source (a kept check compiles it again from that).
pub(crate) struct Native {
    source: Box<str>,
    expression: NativeExpression,
}

/// What a [`Tmpl`] is made from: what a kept check writes down to make it again.
pub(crate) enum TmplSource<'a> {
    Literal(&'a str),
    /// `native` as [`Interpolation::parse`] was given it.
    Interpolated {
        name: &'a str,
        source: &'a str,
        native: bool,
    },
    /// The name and the source as the environment holds them.
    Text {
        name: String,
        source: String,
    },
    /// The expression as [`Tmpl::expression`] was given it.
    Native(&'a str),
}

/// The environment a compiled template or expression was made in.
pub(crate) type SharedEnvironment = Arc<Environment<'static>>;

type TemplateIn<'env> = Template<'env, 'env>;
type ExpressionIn<'env> = Expression<'env, 'static>;

self_cell::self_cell!(
    /// A minijinja template beside the environment it borrows.
    pub struct TextTemplate {
        owner: SharedEnvironment,
        #[not_covariant]
        dependent: TemplateIn,
    }
);

self_cell::self_cell!(
    /// A minijinja expression beside the environment it borrows.
    pub struct NativeExpression {
        owner: SharedEnvironment,
        #[not_covariant]
        dependent: ExpressionIn,
    }
);

impl std::fmt::Debug for Tmpl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Tmpl::Literal(text) => write!(f, "Literal({text:?})"),
            Tmpl::Interpolated(i) => write!(f, "Interpolated({:?})", i.source),
            Tmpl::Text(t) => t.with_dependent(|_, t| write!(f, "Text({})", t.name())),
            Tmpl::Native(native) => write!(f, "Native({:?})", native.source),
        }
    }
}

/// Whether a string uses template syntax.
pub(crate) fn has_syntax(source: &str) -> bool {
    source.contains("{{") || source.contains("{%") || source.contains("{#")
}

/// The expression of a template that is exactly one `{{ ... }}` block.
pub(crate) fn single_expression(source: &str) -> Option<&str> {
    let inner = source.trim().strip_prefix("{{")?.strip_suffix("}}")?;
    if inner.contains("{{") || inner.contains("}}") || inner.contains("{%") {
        return None;
    }
    let inner = inner.strip_prefix('-').unwrap_or(inner);
    let inner = inner.strip_suffix('-').unwrap_or(inner);
    Some(inner.trim())
}

impl Tmpl {
    /// A template whose source was added to `env` under `name`.
    pub(crate) fn text(env: &SharedEnvironment, name: &str) -> Result<Tmpl, Error> {
        let template = TextTemplate::try_new(env.clone(), |env| env.get_template(name))?;
        Ok(Tmpl::Text(Box::new(template)))
    }

    /// A bare expression, compiled in `env`.
    pub(crate) fn expression(env: &SharedEnvironment, source: &str) -> Result<Tmpl, Error> {
        let expression = super::guarded(|| {
            NativeExpression::try_new(env.clone(), |env| {
                env.compile_expression_owned(
                    super::reads::bounded_concat(source, true)
                        .unwrap_or_else(|| source.to_string()),
                )
            })
        })?;
        Ok(Tmpl::Native(Box::new(Native {
            source: source.into(),
            expression,
        })))
    }

    /// What the template is made from (see [`TmplSource`]).
    pub(crate) fn source(&self) -> TmplSource<'_> {
        match self {
            Tmpl::Literal(text) => TmplSource::Literal(text),
            Tmpl::Interpolated(i) => TmplSource::Interpolated {
                name: &i.name,
                source: &i.source,
                // A `value:` template of one `{{ ... }}` is native without having been asked.
                native: i.native && !has_syntax(&i.source),
            },
            Tmpl::Text(template) => template.with_dependent(|_, t| TmplSource::Text {
                name: t.name().to_string(),
                source: t.source().to_string(),
            }),
            Tmpl::Native(native) => TmplSource::Native(&native.source),
        }
    }

    /// A template made again from what [`Tmpl::source`] gave, in `env` (which holds every
    /// text template's source); `None` if it no longer compiles so.
    pub(crate) fn from_source(env: &SharedEnvironment, source: TmplSource<'_>) -> Option<Tmpl> {
        match source {
            TmplSource::Literal(text) => Some(Tmpl::Literal(text.to_string())),
            TmplSource::Interpolated {
                name,
                source,
                native,
            } => {
                Interpolation::parse(name, source, native).map(|i| Tmpl::Interpolated(Box::new(i)))
            }
            TmplSource::Text { name, .. } => Tmpl::text(env, &name).ok(),
            TmplSource::Native(source) => Tmpl::expression(env, source).ok(),
        }
    }

    /// Evaluate: a string for text templates, the value for native ones.
    pub(crate) fn eval(&self, scope: &Value) -> Result<Value, Error> {
        super::stop::guard(|| self.eval_unexplained(scope)).map_err(explained)
    }

    fn eval_unexplained(&self, scope: &Value) -> Result<Value, Error> {
        match self {
            Tmpl::Literal(text) => Ok(Value::from(text.as_str())),
            Tmpl::Interpolated(interpolation) => interpolation.eval(scope),
            Tmpl::Text(template) => {
                template.with_dependent(|_, t| render_bounded(t, scope).map(Value::from))
            }
            Tmpl::Native(native) => native
                .expression
                .with_dependent(|_, e| e.eval(scope).and_then(|v| bounded(&v))),
        }
    }

    /// Evaluate to text (a native value is formatted as minijinja prints it).
    pub(crate) fn render(&self, scope: &Value) -> Result<String, Error> {
        super::stop::guard(|| self.render_unexplained(scope)).map_err(explained)
    }

    fn render_unexplained(&self, scope: &Value) -> Result<String, Error> {
        match self {
            Tmpl::Literal(text) => Ok(text.clone()),
            Tmpl::Interpolated(interpolation) => interpolation.render(scope),
            Tmpl::Text(template) => template.with_dependent(|_, t| render_bounded(t, scope)),
            Tmpl::Native(native) => {
                text_of_expression(&native.expression.with_dependent(|_, e| e.eval(scope))?)
            }
        }
    }

    /// The variables it reads, as dotted paths (`stages.gate.output.update`).
    pub(crate) fn references(&self) -> HashSet<String> {
        match self {
            Tmpl::Literal(_) => HashSet::new(),
            Tmpl::Interpolated(interpolation) => interpolation.references(),
            Tmpl::Text(template) => template.with_dependent(|_, t| t.undeclared_variables(true)),
            Tmpl::Native(native) => native
                .expression
                .with_dependent(|_, e| e.undeclared_variables(true)),
        }
    }
}

/// A template made only of text and `{{ a.b.c }}` lookups of the scope, the common case in a
/// workflow (`{{ inputs.repo }}`, `{{ stages.gate.output.path }}`). A compiled minijinja
/// template costs about 8 KB and tens of microseconds to build; this costs the parts' text.
/// Whenever a lookup does not give a printable value (undefined, a safe string), the template
/// is handed to minijinja whole, so errors and edge cases read exactly as they would there.
pub(crate) struct Interpolation {
    parts: Vec<Part>,
    /// Evaluates to the value of its one lookup rather than to text (an expression).
    native: bool,
    /// Printed values are shell-quoted (a `.sh` template).
    shell: bool,
    name: Box<str>,
    source: Box<str>,
}

/// The environment that evaluates an interpolation minijinja's way, when a lookup fails.
static FALLBACK: std::sync::LazyLock<Environment<'static>> =
    std::sync::LazyLock::new(super::environment);

enum Part {
    Text(Box<str>),
    Lookup(Box<[Box<str>]>),
}

/// Words minijinja reads as operators or constants, never as a plain name.
pub(super) const KEYWORDS: &[&str] = &[
    "and", "or", "not", "in", "is", "if", "else", "true", "false", "none", "True", "False", "None",
    "loop", "self", "super", "varargs", "kwargs",
];

/// `a.b.c` as its segments, when that is all the text is.
fn lookup_path(text: &str) -> Option<Box<[Box<str>]>> {
    let segments: Vec<Box<str>> = text.split('.').map(Box::from).collect();
    let is_ident = |s: &str| {
        let mut chars = s.chars();
        chars
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
            && !KEYWORDS.contains(&s)
    };
    (ROOTS.contains(&segments[0].as_ref()) && segments.iter().all(|s| is_ident(s)))
        .then(|| segments.into_boxed_slice())
}

impl Interpolation {
    /// The parts of a text template, if it is only text and lookups.
    fn parse_text(source: &str) -> Option<Vec<Part>> {
        let mut parts = Vec::new();
        let mut rest = source;
        while let Some(at) = next_block(rest) {
            if !rest[at..].starts_with("{{") {
                return None;
            }
            if at > 0 {
                parts.push(Part::Text(rest[..at].into()));
            }
            let inside = &rest[at + 2..];
            let end = inside.find("}}")?;
            parts.push(Part::Lookup(lookup_path(inside[..end].trim())?));
            rest = &inside[end + 2..];
        }
        if !rest.is_empty() {
            parts.push(Part::Text(rest.into()));
        }
        Some(parts)
    }

    /// The template as text and lookups, unless it needs minijinja. `native` is an
    /// expression; a `value:` template that is one `{{ ... }}` keeps its value native too.
    pub(crate) fn parse(name: &str, source: &str, native: bool) -> Option<Self> {
        let single = |expression: &str| Some(vec![Part::Lookup(lookup_path(expression.trim())?)]);
        let (parts, native) = if native {
            (single(source)?, true)
        } else if !has_syntax(source) {
            return None;
        } else if let Some(expression) =
            single_expression(source).filter(|_| name.starts_with("value:"))
        {
            (single(expression)?, true)
        } else {
            (Self::parse_text(source)?, false)
        };
        Some(Interpolation {
            parts,
            native,
            shell: name.ends_with(".sh"),
            name: name.into(),
            source: source.into(),
        })
    }

    /// The value at a path, when it is defined all the way down.
    fn lookup(path: &[Box<str>], scope: &Value) -> Option<Value> {
        let mut value = scope.get_attr(&path[0]).ok()?;
        for segment in &path[1..] {
            if value.is_undefined() || value.is_none() {
                return None;
            }
            value = value.get_attr(segment).ok()?;
        }
        (!value.is_undefined()).then_some(value)
    }

    fn eval(&self, scope: &Value) -> Result<Value, Error> {
        if self.native {
            let Some(Part::Lookup(path)) = self.parts.first() else {
                unreachable!("a native interpolation is one lookup")
            };
            return match Self::lookup(path, scope) {
                Some(value) => Ok(value),
                None => self.by_minijinja(scope),
            };
        }
        self.render(scope).map(Value::from)
    }

    fn render(&self, scope: &Value) -> Result<String, Error> {
        if self.native {
            return text_of_expression(&self.eval(scope)?);
        }
        let captured = super::shell::captured();
        let mut out = String::new();
        for part in &self.parts {
            match part {
                Part::Text(text) => out.push_str(text),
                Part::Lookup(path) => match Self::lookup(path, scope) {
                    Some(value) if super::shell::capturing() => {
                        out.push_str(&super::shell::capture(&value)?);
                    }
                    Some(value) if !value.is_safe() => {
                        let text = value_to_text(&value);
                        if self.shell {
                            out.push_str(&super::functions::shell_quote(&text));
                        } else {
                            out.push_str(&text);
                        }
                    }
                    _ => {
                        super::shell::forget_after(captured);
                        return self.by_minijinja(scope).map(|v| value_to_text(&v));
                    }
                },
            }
        }
        Ok(out)
    }

    /// The template evaluated by minijinja itself: its exact result or error.
    fn by_minijinja(&self, scope: &Value) -> Result<Value, Error> {
        if self.native {
            super::guarded(|| FALLBACK.compile_expression_owned(self.source.to_string()))?
                .eval(scope)
        } else {
            super::guarded(|| FALLBACK.render_named_str(&self.name, &self.source, scope))
                .map(Value::from)
        }
    }

    fn references(&self) -> HashSet<String> {
        self.parts
            .iter()
            .filter_map(|part| match part {
                Part::Lookup(path) => Some(path.join(".")),
                Part::Text(_) => None,
            })
            .collect()
    }
}

/// Where the next `{{`, `{%` or `{#` starts.
fn next_block(text: &str) -> Option<usize> {
    let bytes = text.as_bytes();
    text.match_indices('{')
        .map(|(at, _)| at)
        .find(|&at| matches!(bytes.get(at + 1), Some(b'{' | b'%' | b'#')))
}

/// An expression's value as text; undefined is an error.
fn text_of_expression(value: &Value) -> Result<String, Error> {
    if value.is_undefined() {
        return Err(Error::new(
            minijinja::ErrorKind::UndefinedError,
            "the expression is undefined",
        ));
    }
    Ok(value_to_text(value))
}

/// The most items a list or map made by an expression may have.
const MAX_ITEMS: usize = 1 << 24;

/// The most text one template may render: 64 MiB. Rendering stops with an error at the first
/// byte past it, so a loop that prints without end fails instead of filling memory.
pub(crate) const MAX_RENDERED: usize = 64 << 20;

/// Instructions one evaluation of a template or expression may execute (minijinja's fuel): a
/// bound on loops nested without end, reached in about a second.
pub(crate) const FUEL: u64 = 50_000_000;

/// minijinja's "out of fuel" in words a workflow's author can act on.
fn explained(error: Error) -> Error {
    if error.kind() != minijinja::ErrorKind::OutOfFuel {
        return error;
    }
    Error::new(
        minijinja::ErrorKind::InvalidOperation,
        format!(
            "the template ran more than {FUEL} steps, the most one evaluation may run \
             (loops nested too deep, or a loop over too long a range?)"
        ),
    )
    .with_source(error)
}

/// A render into a buffer that refuses to grow past [`MAX_RENDERED`].
fn render_bounded(template: &Template<'_, '_>, scope: &Value) -> Result<String, Error> {
    struct Bounded(Vec<u8>);
    impl std::io::Write for Bounded {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            if self.0.len() + buf.len() > MAX_RENDERED {
                return Err(std::io::Error::other("too large"));
            }
            self.0.extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut out = Bounded(Vec::new());
    match template.render_captured_to(scope, &mut out) {
        Ok(_) => String::from_utf8(out.0).map_err(|_| {
            Error::new(
                minijinja::ErrorKind::InvalidOperation,
                "the template rendered text that is not UTF-8",
            )
        }),
        Err(error) if error.kind() == minijinja::ErrorKind::WriteFailure => Err(Error::new(
            minijinja::ErrorKind::InvalidOperation,
            format!(
                "the template renders more than {} MiB of text (the most one template may render)",
                MAX_RENDERED >> 20
            ),
        )),
        Err(error) => Err(error),
    }
}

/// A value an expression made, made safe to walk: a list made by repetition (`[1] * n`) that
/// no memory could hold is an error, and one that is empty is an empty list. minijinja 2.24
/// makes `seq * n` a lazy list of `len * n` items that walks all `n` repetitions even when
/// `len` is 0, so printing or converting `() * 10000000000` would spin for minutes, and
/// `[1] * 100000000000` would exhaust memory. Values the engine itself handed in (lists and
/// maps of data) are only measured, never copied.
pub(crate) fn bounded(value: &Value) -> Result<Value, Error> {
    Ok(replaced(value)?.unwrap_or_else(|| value.clone()))
}

/// [`bounded`]'s walk: the value to use instead, when it is not the value itself.
fn replaced(value: &Value) -> Result<Option<Value>, Error> {
    use minijinja::value::{ObjectRepr, ValueKind};
    if !matches!(value.kind(), ValueKind::Seq | ValueKind::Iterable) {
        if value.kind() == ValueKind::Map {
            if let Some(len) = value.len().filter(|&len| len > MAX_ITEMS) {
                return Err(too_large(len));
            }
        }
        return Ok(None);
    }
    let len = value.len();
    if let Some(len) = len.filter(|&len| len > MAX_ITEMS) {
        return Err(too_large(len));
    }
    let lazy = value
        .as_object()
        .is_some_and(|object| matches!(object.repr(), ObjectRepr::Iterable));
    if lazy && len == Some(0) {
        return Ok(Some(Value::from(Vec::<Value>::new())));
    }
    // Items are measured too, so that `[() * n]` cannot hide a repetition.
    let Ok(items) = value.try_iter() else {
        return Ok(None);
    };
    let mut changed = lazy;
    let mut kept = Vec::with_capacity(len.unwrap_or(0));
    for item in items {
        match replaced(&item)? {
            Some(safe) => {
                changed = true;
                kept.push(safe);
            }
            None => kept.push(item),
        }
        if kept.len() > MAX_ITEMS {
            return Err(too_large(kept.len()));
        }
    }
    Ok(changed.then(|| Value::from(kept)))
}

fn too_large(len: usize) -> Error {
    Error::new(
        minijinja::ErrorKind::InvalidOperation,
        format!("a list of {len} items is too large (at most {MAX_ITEMS})"),
    )
}

/// The results of the run so far, shared with every render.
#[derive(Debug, Default)]
pub(crate) struct StageTable {
    /// The stages' ids, in the order of `slots`, each found by its id: one set for both, each
    /// id allocated once for the run and shared with its record (a list beside a map of copies,
    /// and the record's own copies, held every id three times to the run's end).
    ids: indexmap::IndexSet<Arc<str>, foldhash::fast::RandomState>,
    pub slots: RwLock<Vec<Option<StageSlot>>>,
}

/// A finished stage as templates see it.
#[derive(Debug, Clone)]
pub(crate) struct StageSlot {
    pub output: Value,
    pub status: &'static str,
    /// SHA-256 of the output, or the status of a stage without one, for the fingerprints of
    /// the stages after it (held as 32 bytes, not 64 hex digits).
    pub sha256: crate::floor::hash::Sha256Hex,
    /// A dry-run assumed this output instead of producing it.
    pub assumed: bool,
    /// Why it failed (`on_error = "continue"`), for the stages after it.
    pub error: Option<String>,
}

impl StageTable {
    pub(crate) fn new(ids: Vec<Arc<str>>) -> Self {
        let slots = RwLock::new(vec![None; ids.len()]);
        let ids = ids.into_iter().collect();
        StageTable { ids, slots }
    }

    /// The stages' ids, in order.
    pub(crate) fn ids(&self) -> impl Iterator<Item = &Arc<str>> {
        self.ids.iter()
    }

    pub(crate) fn set(&self, index: usize, slot: StageSlot) {
        let mut slots = self
            .slots
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        slots[index] = Some(slot);
    }

    pub(crate) fn get(&self, index: usize) -> Option<StageSlot> {
        self.read().get(index).cloned().flatten()
    }

    /// Every slot, read in place (a fingerprint reads several stages' hashes without copying
    /// them).
    pub(crate) fn read(&self) -> std::sync::RwLockReadGuard<'_, Vec<Option<StageSlot>>> {
        self.slots
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[derive(Debug)]
struct StagesView(Arc<StageTable>);

impl Object for StagesView {
    fn get_value(self: &Arc<Self>, key: &Value) -> Option<Value> {
        let index = self.0.ids.get_index_of(key.as_str()?)?;
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
            .map(|(_, id)| Value::from(&**id))
            .collect();
        Enumerator::Values(done)
    }
}

/// Everything a template or expression can see.
#[derive(Debug, Clone, Default)]
pub(crate) struct Scope {
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
    pub(crate) fn stages_view(table: Arc<StageTable>) -> Value {
        Value::from_object(StagesView(table))
    }

    /// The scope as a template context.
    pub(crate) fn to_value(&self) -> Value {
        Value::from_object(self.clone())
    }

    pub(crate) fn with_item(&self, item: Value, index: usize) -> Scope {
        Scope {
            item: Some(item),
            index: Some(Value::from(index)),
            ..self.clone()
        }
    }

    pub(crate) fn with_output(&self, output: Value) -> Scope {
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
const ROOTS: [&str; 8] = [
    "inputs", "env", "stages", "state", "run", "item", "index", "output",
];

/// The names every template may read at the top level.
pub(crate) fn known_roots() -> BTreeSet<&'static str> {
    ROOTS.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scope() -> Value {
        let inputs = Value::from_serialize(serde_json::json!({
            "word": "stage", "list": ["a", 1], "map": {"k": true}, "nothing": null,
            "flag": false, "number": 2.5, "unsafe": "a b; rm -rf /", "nested": {"deep": {"x": 7}},
        }));
        Scope {
            inputs,
            ..Scope::default()
        }
        .to_value()
    }

    /// A repeated list no memory could hold is refused, and a repeated empty list is empty
    /// at once (minijinja would walk every repetition), printed or evaluated, however nested.
    #[test]
    fn repeated_lists_are_bounded() {
        let env = crate::template::environment();
        let render = |source: &str| env.render_str(source, Value::UNDEFINED);
        let started = std::time::Instant::now();
        assert_eq!(render("{{ () * 10000000000 }}").unwrap(), "[]");
        assert_eq!(render("{{ [() * 10000000000, 1] }}").unwrap(), "[[],1]");
        assert_eq!(render("{{ [1, 2] * 2 }}").unwrap(), "[1,2,1,2]");
        let error = render("{{ [1] * 100000000000 }}").unwrap_err();
        assert!(
            error
                .to_string()
                .contains("a list of 100000000000 items is too large"),
            "{error}"
        );
        let env = Arc::new(env);
        let nested = Tmpl::expression(&env, "[[0] * 20000000]").unwrap();
        let error = nested.eval(&Value::UNDEFINED).unwrap_err();
        assert!(
            error.to_string().contains("a list of 20000000 items"),
            "{error}"
        );
        let empty = Tmpl::expression(&env, "{'k': () * 10000000000}['k']").unwrap();
        assert_eq!(empty.eval(&Value::UNDEFINED).unwrap().len(), Some(0));
        // Minutes without the bound; generous, so that only a hang fails it.
        assert!(started.elapsed() < std::time::Duration::from_secs(60));
    }

    /// Every interpolation renders, evaluates, fails and reports references exactly as the
    /// same template compiled by minijinja.
    #[test]
    fn interpolations_agree_with_minijinja() {
        let mut env = crate::template::environment();
        let cases: &[(&str, &str, bool)] = &[
            ("t", "{{ inputs.word }} 17", false),
            ("t", "{{inputs.word}}-{{ inputs.number }}", false),
            ("t", "a {{ inputs.list }} b {{ inputs.map }}", false),
            ("t", "[{{ inputs.nothing }}] {{ inputs.flag }}\n", false),
            ("t", "json {\"k\": \"{{ inputs.word }}\"} }} {", false),
            ("t", "{{ inputs.nested.deep.x }}", false),
            ("t", "{{ inputs.missing }}", false),
            ("t", "{{ inputs.nothing.x }}", false),
            ("t", "{{ inputs.word.x }}", false),
            ("t", "{{ item }}", false),
            ("x.sh", "echo {{ inputs.unsafe }} {{ inputs.word }}", false),
            ("value:v", "{{ inputs.list }}", false),
            ("value:v", " {{ inputs.map }} ", false),
            ("e", "inputs.nested.deep", true),
            ("e", "inputs.missing", true),
        ];
        for (k, &(name, source, native)) in cases.iter().enumerate() {
            let interpolation = Interpolation::parse(name, source, native)
                .unwrap_or_else(|| panic!("not an interpolation: {source}"));
            let fast = Tmpl::Interpolated(Box::new(interpolation));
            let name = format!("{k}-{name}");
            env.add_template_owned(name.clone(), source.to_string())
                .unwrap();
            let env = Arc::new(env.clone());
            let slow = if native {
                Tmpl::expression(&env, source).unwrap()
            } else if let Some(e) = single_expression(source).filter(|_| name.contains("value:")) {
                Tmpl::expression(&env, e).unwrap()
            } else {
                Tmpl::text(&env, &name).unwrap()
            };
            let show = |r: Result<Value, Error>| r.map(|v| format!("{v:?}")).map_err(|e| e.kind());
            assert_eq!(
                show(fast.eval(&scope())),
                show(slow.eval(&scope())),
                "eval {source}"
            );
            assert_eq!(
                fast.render(&scope()).map_err(|e| e.kind()),
                slow.render(&scope()).map_err(|e| e.kind()),
                "render {source}"
            );
            assert_eq!(fast.references(), slow.references(), "references {source}");
        }
    }

    #[test]
    fn templates_beyond_lookups_are_left_to_minijinja() {
        for source in [
            "{% if inputs.flag %}x{% endif %}",
            "{{ inputs.word | upper }}",
            "{{- inputs.word }}",
            "{{ inputs.word -}}",
            "{{ inputs.list.0 }}",
            "{{ inputs['word'] }}",
            "{{ other.word }}",
            "{{ inputs.not }}",
            "{# note #}{{ inputs.word }}",
            "{{{ inputs.word }}}",
            "{{ inputs.word }",
            "no syntax at all",
        ] {
            assert!(
                Interpolation::parse("t", source, false).is_none(),
                "{source}"
            );
        }
        assert!(Interpolation::parse("e", "inputs.a == 1", true).is_none());
    }

    #[test]
    fn expression_references_are_nested_paths() {
        let env = Arc::new(crate::template::environment());
        let tmpl = Tmpl::expression(&env, "stages.items.output").unwrap();
        let refs = tmpl.references();
        assert!(refs.contains("stages.items.output"), "{refs:?}");
    }

    /// Templates find a stage by its id in the table: a finished one's output and status, one
    /// not finished as `not_run`, an id the table does not hold as nothing; listing the stages
    /// gives the finished ones in the table's order.
    #[test]
    fn templates_find_stages_by_id_in_the_table() {
        let table = Arc::new(StageTable::new(
            ["fetch", "gate", "write"].map(Arc::from).to_vec(),
        ));
        let slot = |output: Value, status| StageSlot {
            output,
            status,
            sha256: crate::floor::hash::Sha256Hex::Bytes([0; 32]),
            assumed: false,
            error: None,
        };
        table.set(2, slot(Value::from("written"), "succeeded"));
        table.set(0, slot(Value::from(3), "cached"));
        let scope = Scope {
            stages: Scope::stages_view(Arc::clone(&table)),
            ..Scope::default()
        }
        .to_value();
        let env = crate::template::environment();
        let render = |source: &str| env.render_str(source, &scope).unwrap();
        assert_eq!(
            render("{{ stages.fetch.output }} {{ stages.fetch.status }}"),
            "3 cached"
        );
        assert_eq!(render("{{ stages.write.output }}"), "written");
        assert_eq!(render("{{ stages.gate.status }}"), "not_run");
        assert_eq!(render("{{ stages.other is undefined }}"), "true");
        assert_eq!(
            render("{% for id in stages %}{{ id }} {% endfor %}"),
            "fetch write "
        );
    }
}
