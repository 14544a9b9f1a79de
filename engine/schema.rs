//! JSON Schemas of artifacts: compiled once, used to validate outputs, to type-check
//! `stages.X.output.a.b` references, and to synthesize the output a dry-run assumes.

use serde_json::{Map, Value};

use crate::diag::{did_you_mean, Diagnostic, DiagnosticKind, SourceFile};

/// How many characters and elements an instance built from a schema may hold in all.
pub(crate) const EXAMPLE_BUDGET: u64 = 1 << 20;

/// The largest `minLength`, `minItems` or `minProperties` a schema may ask for: an instance
/// that large could not be held in memory.
pub(crate) const LARGEST_BOUND: f64 = (1u64 << 32) as f64;

/// A count a schema states (`minItems: 3`, or `3.0`, or `1e11`), saturating.
fn as_count(value: &Value) -> Option<u64> {
    value
        .as_u64()
        .or_else(|| value.as_f64().filter(|f| *f >= 0.0).map(|f| f as u64))
}

/// The first lower bound in a schema that no instance in memory can meet: the pointer of the
/// object holding it, the key and the bound.
fn impossible_bound(node: &Value, at: &mut String) -> Option<(String, &'static str, String)> {
    match node {
        Value::Object(map) => {
            for key in ["minLength", "minItems", "minProperties", "minContains"] {
                if let Some(bound) = map.get(key).and_then(Value::as_f64) {
                    if bound > LARGEST_BOUND {
                        return Some((at.clone(), key, map[key].to_string()));
                    }
                }
            }
            for (key, child) in map {
                let len = at.len();
                at.push('/');
                at.push_str(&key.replace('~', "~0").replace('/', "~1"));
                let found = impossible_bound(child, at);
                at.truncate(len);
                if found.is_some() {
                    return found;
                }
            }
            None
        }
        Value::Array(items) => {
            for (i, child) in items.iter().enumerate() {
                let len = at.len();
                at.push_str(&format!("/{i}"));
                let found = impossible_bound(child, at);
                at.truncate(len);
                if found.is_some() {
                    return found;
                }
            }
            None
        }
        _ => None,
    }
}

/// A compiled JSON Schema.
pub(crate) struct Schema {
    pub name: String,
    pub value: Value,
    pub sha256: String,
    validator: jsonschema::Validator,
}

impl std::fmt::Debug for Schema {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Schema({})", self.name)
    }
}

/// How many validation errors are kept (in messages, records and repair prompts).
pub(crate) const MAX_ERRORS: usize = 20;
/// How long one kept validation error may be, in characters.
pub(crate) const MAX_ERROR_CHARS: usize = 300;

/// `text` cut to `limit` characters, saying how much was left out.
pub(crate) fn cut(text: &str, limit: usize) -> String {
    match text.char_indices().nth(limit) {
        None => text.to_string(),
        Some((end, _)) => format!("{}... ({} more bytes)", &text[..end], text.len() - end),
    }
}

impl Schema {
    /// Parse and compile a schema file.
    pub(crate) fn compile(file: &SourceFile) -> Result<Schema, Box<Diagnostic>> {
        let value: Value = serde_json::from_str(&file.text).map_err(|error| {
            let offset = offset_of(&file.text, error.line(), error.column());
            Box::new(
                Diagnostic::error(DiagnosticKind::InvalidSchemaJson(error.to_string()))
                    .at(file, offset..offset + 1),
            )
        })?;
        let name = file.path.display().to_string();
        if let Some((at, key, bound)) = impossible_bound(&value, &mut String::new()) {
            let span = locate_json_pointer(&file.text, &format!("{at}/{key}"));
            return Err(Box::new(
                Diagnostic::error(DiagnosticKind::ImpossibleSchemaBound {
                    at,
                    key: key.to_string(),
                    bound,
                })
                .at(file, span),
            ));
        }
        match jsonschema::validator_for(&value) {
            Ok(validator) => Ok(Schema::with_validator(value, &name, validator)),
            Err(error) => {
                // The schema is the instance the meta-schema rejected: point at the offending key.
                let span = locate_json_pointer(&file.text, &error.instance_path().to_string());
                Err(Box::new(
                    Diagnostic::error(DiagnosticKind::SchemaDoesNotCompile {
                        at: error.instance_path().to_string(),
                        error: error.to_string(),
                    })
                    .at(file, span),
                ))
            }
        }
    }

    pub(crate) fn from_value(value: Value, name: &str) -> Result<Schema, String> {
        let validator = jsonschema::validator_for(&value).map_err(|e| e.to_string())?;
        Ok(Schema::with_validator(value, name, validator))
    }

    fn with_validator(value: Value, name: &str, validator: jsonschema::Validator) -> Schema {
        let sha256 = crate::floor::hash::sha256_json(&value);
        Schema {
            name: name.to_string(),
            value,
            sha256,
            validator,
        }
    }

    /// The validation errors, as `at /path: message` lines: the first [`MAX_ERRORS`], each cut
    /// to [`MAX_ERROR_CHARS`] characters, then a line counting the others.
    pub(crate) fn validate(&self, instance: &Value) -> Result<(), Vec<String>> {
        let mut errors: Vec<String> = Vec::new();
        let mut more = 0usize;
        for error in self.validator.iter_errors(instance) {
            if errors.len() == MAX_ERRORS {
                more += 1;
                continue;
            }
            let path = error.instance_path().to_string();
            let at = if path.is_empty() {
                "/".to_string()
            } else {
                path
            };
            errors.push(cut(&format!("at {at}: {error}"), MAX_ERROR_CHARS));
        }
        if more > 0 {
            errors.push(format!("and {more} more errors"));
        }
        if errors.is_empty() {
            Ok(())
        } else {
            Err(errors)
        }
    }

    /// Whether a property path can be produced by this schema.
    pub(crate) fn check_path(&self, path: &[&str]) -> Result<(), (DiagnosticKind, Option<String>)> {
        self.check_path_in(&self.value, path, &self.short_name(), true)
            .map_err(|(message, help, _)| (message, help))
    }

    /// Whether a property path can be produced from `start`, a node of this schema; `subject`
    /// names what the path is read from in messages. With `listed_closes`, an object that lists
    /// its properties and says nothing of others is taken to mean the ones listed; without it,
    /// such an object is open, and a name outside it is reported only when it is a near miss of
    /// a listed one (the third value is then false: likely a typo, not certainly wrong).
    ///
    /// The branches of `anyOf`, `oneOf` and `allOf` are walked as alternatives: a property is
    /// wrong only when no branch can have it, and the names suggested are every branch's.
    pub(crate) fn check_path_in(
        &self,
        start: &Value,
        path: &[&str],
        subject: &str,
        listed_closes: bool,
    ) -> Result<(), (DiagnosticKind, Option<String>, bool)> {
        let mut nodes = self.alternatives(start);
        let mut walked: Vec<&str> = Vec::new();
        for segment in path {
            let index = segment.parse::<usize>().is_ok();
            let mut next: Vec<&Value> = Vec::new();
            let mut open = false;
            let mut listed = false;
            let mut names: Vec<&str> = Vec::new();
            let mut scalars: Vec<&'static str> = Vec::new();
            for alternative in &nodes {
                let node = alternative.node;
                if index {
                    match node.get("items") {
                        Some(items) => next.push(items),
                        // A list without an item schema, or a node that is no list at all:
                        // what follows is not known.
                        None if scalar_type(node).is_none() => open = true,
                        None => {}
                    }
                    continue;
                }
                let properties = node.get("properties").and_then(Value::as_object);
                if let Some(found) = properties.and_then(|p| p.get(*segment)) {
                    next.push(found);
                    continue;
                }
                names.extend(
                    properties
                        .into_iter()
                        .flat_map(|p| p.keys().map(String::as_str)),
                );
                match node.get("additionalProperties") {
                    Some(Value::Bool(false)) => {}
                    Some(additional @ Value::Object(_)) => next.push(additional),
                    Some(_) => open = true,
                    None if node.get("patternProperties").is_some() => open = true,
                    None if alternative.closed => {}
                    None if properties.is_some() => listed = true,
                    // A schema that lists its properties and leaves the rest open most likely
                    // means the ones listed: a name outside them is a typo.
                    None => match scalar_type(node) {
                        Some(scalar) => scalars.push(scalar),
                        None => open = true,
                    },
                }
            }
            if !next.is_empty() {
                nodes = next
                    .into_iter()
                    .flat_map(|n| self.alternatives(n))
                    .collect();
                walked.push(segment);
                continue;
            }
            if open || index {
                return Ok(());
            }
            names.sort_unstable();
            names.dedup();
            if listed && !listed_closes {
                let Some(near) = did_you_mean(segment, names.iter().copied()) else {
                    return Ok(());
                };
                return Err((
                    DiagnosticKind::NoDeclaredProperty {
                        subject: subject.to_string(),
                        property: (*segment).to_string(),
                        under: joined(&walked),
                    },
                    Some(near),
                    false,
                ));
            }
            scalars.dedup();
            let message = match scalars.as_slice() {
                [scalar] if names.is_empty() => DiagnosticKind::ScalarHasNoField {
                    subject: subject.to_string(),
                    scalar,
                    under: joined(&walked),
                    field: (*segment).to_string(),
                },
                _ => DiagnosticKind::NoProperty {
                    subject: subject.to_string(),
                    property: (*segment).to_string(),
                    under: joined(&walked),
                },
            };
            let help = did_you_mean(segment, names.iter().copied()).or_else(|| {
                (!names.is_empty()).then(|| format!("properties: {}", names.join(", ")))
            });
            return Err((message, help, true));
        }
        Ok(())
    }

    /// The nodes a value described by `node` may be described by: the node itself (`$ref`s
    /// followed) and the branches of its `anyOf`, `oneOf` and `allOf`, recursively. A node that
    /// only combines branches is not an alternative of its own; one that says
    /// `unevaluatedProperties: false` closes branches that list properties.
    fn alternatives<'a>(&'a self, node: &'a Value) -> Vec<Alternative<'a>> {
        let mut out = Vec::new();
        self.collect_alternatives(node, false, 0, &mut out);
        out
    }

    fn collect_alternatives<'a>(
        &'a self,
        node: &'a Value,
        closed: bool,
        depth: usize,
        out: &mut Vec<Alternative<'a>>,
    ) {
        let node = self.resolve(node);
        let branches: Vec<&Value> = ["anyOf", "oneOf", "allOf"]
            .iter()
            .filter_map(|key| node.get(*key).and_then(Value::as_array))
            .flatten()
            .collect();
        if branches.is_empty() || depth >= 8 {
            out.push(Alternative { node, closed });
            return;
        }
        let closed = closed || node.get("unevaluatedProperties") == Some(&Value::Bool(false));
        let own = [
            "properties",
            "additionalProperties",
            "patternProperties",
            "items",
        ];
        if own.iter().any(|key| node.get(*key).is_some()) {
            out.push(Alternative { node, closed });
        }
        if matches!(
            node.get("unevaluatedProperties"),
            Some(Value::Object(_) | Value::Bool(true))
        ) {
            // Any other property may be there.
            out.push(Alternative {
                node: &OPEN,
                closed: false,
            });
        }
        for branch in branches {
            self.collect_alternatives(branch, closed, depth + 1, out);
        }
    }

    /// The node a property path leads to (`$ref`s followed), when the schema says what it is.
    pub(crate) fn node_at(&self, path: &[&str]) -> Option<&Value> {
        let mut node = self.resolve(&self.value);
        for segment in path {
            let next = if segment.parse::<usize>().is_ok() {
                node.get("items")
            } else {
                node.get("properties")
                    .and_then(|p| p.get(*segment))
                    .or_else(|| node.get("additionalProperties").filter(|a| a.is_object()))
            };
            node = self.resolve(next?);
        }
        Some(node)
    }

    /// The JSON types a node of this schema declares (`type`, or the type of a `const` or of
    /// every `enum` value); empty when it declares none.
    pub(crate) fn types_of(node: &Value) -> Vec<String> {
        match node.get("type") {
            Some(Value::String(kind)) => vec![kind.clone()],
            Some(Value::Array(kinds)) => kinds
                .iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect(),
            _ => {
                let values: Vec<&Value> = match (node.get("const"), node.get("enum")) {
                    (Some(value), _) => vec![value],
                    (None, Some(Value::Array(values))) => values.iter().collect(),
                    _ => Vec::new(),
                };
                let mut kinds: Vec<String> = Vec::new();
                for value in values {
                    let kind = match value {
                        Value::Null => "null",
                        Value::Bool(_) => "boolean",
                        Value::Number(_) => "number",
                        Value::String(_) => "string",
                        Value::Array(_) => "array",
                        Value::Object(_) => "object",
                    };
                    if !kinds.iter().any(|k| k == kind) {
                        kinds.push(kind.to_string());
                    }
                }
                kinds
            }
        }
    }

    /// The properties of an object node whose declared type is an array.
    pub(crate) fn array_properties(&self, node: &Value) -> Vec<String> {
        node.get("properties")
            .and_then(Value::as_object)
            .map(|properties| {
                properties
                    .iter()
                    .filter(|(_, p)| {
                        Schema::types_of(self.resolve(p))
                            .iter()
                            .any(|t| t == "array")
                    })
                    .map(|(name, _)| name.clone())
                    .collect()
            })
            .unwrap_or_default()
    }

    pub(crate) fn short_name(&self) -> String {
        let name = self.name.strip_prefix("<built-in>/").unwrap_or(&self.name);
        if name.contains('/') || name.ends_with(".json") {
            // `.../lib/schemas/gate/response.schema.json` -> `schemas/gate/response.schema.json`
            match name.rfind("schemas/") {
                Some(at) => name[at..].to_string(),
                None => name.to_string(),
            }
        } else {
            format!("the output of `{name}`")
        }
    }

    fn resolve<'a>(&'a self, node: &'a Value) -> &'a Value {
        let mut node = node;
        for _ in 0..8 {
            let Some(reference) = node.get("$ref").and_then(Value::as_str) else {
                break;
            };
            let Some(pointer) = reference.strip_prefix('#') else {
                break;
            };
            match self.value.pointer(pointer) {
                Some(target) => node = target,
                None => break,
            }
        }
        node
    }

    /// An instance a dry-run can assume: the schema's `examples`, `default`, or a minimal
    /// valid instance.
    ///
    /// The instance is bounded: past [`EXAMPLE_BUDGET`] characters and elements in all, strings
    /// and arrays stop growing (such an instance may fall short of its schema's minimums, which
    /// a dry-run then reports rather than running out of memory).
    pub(crate) fn synthesize(&self) -> Value {
        let mut budget = EXAMPLE_BUDGET;
        self.synthesize_node(&self.value, 0, &mut budget)
    }

    fn synthesize_node(&self, node: &Value, depth: usize, budget: &mut u64) -> Value {
        *budget = budget.saturating_sub(1);
        let node = self.resolve(node);
        if let Some(example) = node
            .get("examples")
            .and_then(Value::as_array)
            .and_then(|e| e.first())
        {
            return example.clone();
        }
        if let Some(default) = node.get("default") {
            return default.clone();
        }
        if let Some(value) = node.get("const") {
            return value.clone();
        }
        if let Some(first) = node
            .get("enum")
            .and_then(Value::as_array)
            .and_then(|e| e.first())
        {
            return first.clone();
        }
        if depth > 16 {
            return Value::Null;
        }
        for key in ["anyOf", "oneOf"] {
            if let Some(first) = node
                .get(key)
                .and_then(Value::as_array)
                .and_then(|a| a.first())
            {
                return self.synthesize_node(first, depth + 1, budget);
            }
        }
        let kind = match node.get("type") {
            Some(Value::String(kind)) => kind.clone(),
            Some(Value::Array(kinds)) => kinds
                .iter()
                .filter_map(Value::as_str)
                .find(|k| *k != "null")
                .unwrap_or("null")
                .to_string(),
            _ if node.get("properties").is_some() => "object".into(),
            _ => "null".into(),
        };
        match kind.as_str() {
            "object" => {
                let mut out = Map::new();
                let required: Vec<&str> = node
                    .get("required")
                    .and_then(Value::as_array)
                    .map(|r| r.iter().filter_map(Value::as_str).collect())
                    .unwrap_or_default();
                if let Some(properties) = node.get("properties").and_then(Value::as_object) {
                    for (key, property) in properties {
                        if required.contains(&key.as_str()) {
                            out.insert(
                                key.clone(),
                                self.synthesize_node(property, depth + 1, budget),
                            );
                        }
                    }
                }
                Value::Object(out)
            }
            "array" => {
                let min = node.get("minItems").and_then(as_count).unwrap_or(0);
                let item = node.get("items").cloned().unwrap_or(Value::Null);
                let mut out = Vec::new();
                while (out.len() as u64) < min && *budget > 0 {
                    out.push(self.synthesize_node(&item, depth + 1, budget));
                }
                Value::Array(out)
            }
            "string" => {
                let min = node.get("minLength").and_then(as_count).unwrap_or(0);
                let length = min.min(*budget);
                *budget -= length;
                Value::String("x".repeat(length as usize))
            }
            "integer" | "number" => {
                let min = node.get("minimum").and_then(Value::as_i64).unwrap_or(0);
                Value::from(min.max(0))
            }
            "boolean" => Value::Bool(false),
            _ => Value::Null,
        }
    }
}

/// A path as a template writes it: `sources[0].meta`.
fn joined(path: &[&str]) -> String {
    let mut out = String::new();
    for segment in path {
        if segment.parse::<usize>().is_ok() {
            out.push_str(&format!("[{segment}]"));
        } else {
            if !out.is_empty() {
                out.push('.');
            }
            out.push_str(segment);
        }
    }
    out
}

/// A node that says nothing: any property may be there.
static OPEN: Value = Value::Bool(true);

/// One way a value may be described, among the branches of a schema.
struct Alternative<'a> {
    node: &'a Value,
    /// Under `unevaluatedProperties: false`: the properties it lists are all there are.
    closed: bool,
}

/// The type of a node that declares one scalar type.
fn scalar_type(node: &Value) -> Option<&'static str> {
    match node.get("type").and_then(Value::as_str)? {
        "string" => Some("string"),
        "integer" => Some("integer"),
        "number" => Some("number"),
        "boolean" => Some("boolean"),
        "null" => Some("null"),
        _ => None,
    }
}

fn offset_of(text: &str, line: usize, column: usize) -> usize {
    let mut offset = 0;
    for (i, l) in text.split_inclusive('\n').enumerate() {
        if i + 1 == line {
            return (offset + column.saturating_sub(1)).min(text.len());
        }
        offset += l.len();
    }
    text.len()
}

/// The span of the key a JSON pointer ends at, found by following its segments through the text
/// (each segment searched as a quoted key after the previous one); the whole text's start when a
/// segment is not found.
fn locate_json_pointer(text: &str, pointer: &str) -> std::ops::Range<usize> {
    let mut offset = 0;
    let mut span = 0..0;
    for segment in pointer.split('/').skip(1) {
        let segment = segment.replace("~1", "/").replace("~0", "~");
        if segment.parse::<usize>().is_ok() {
            continue;
        }
        let needle = format!("\"{segment}\"");
        match text[offset..].find(&needle) {
            Some(found) => {
                span = offset + found..offset + found + needle.len();
                offset = span.end;
            }
            None => break,
        }
    }
    span
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_schema_that_does_not_compile_points_at_the_key() {
        let text = "{\n  \"type\": \"object\",\n  \"properties\": {\n    \"n\": { \"type\": 12 }\n  }\n}\n";
        let file = SourceFile::new("s.schema.json", text);
        let diagnostic = Schema::compile(&file).expect_err("type 12 is not a type");
        assert_eq!(
            diagnostic.line_col().map(|(line, _)| line),
            Some(4),
            "{}",
            diagnostic.message()
        );
    }
}
