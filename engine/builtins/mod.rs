//! Built-in actions (`uses = "fs.read"`): each declares a JSON Schema for its `with` arguments
//! (derived from the struct its run reads them through, see [`args`]) and for its output, so
//! `check` can validate both statically, and a flag saying whether it writes, so a dry-run knows
//! which ones it may execute.
//!
//! The rooms: this file says what a built-in is and keeps the registry; beside it the machinery
//! every built-in shares ([`args`], [`ctx`], [`error`], [`paths`], [`schema`]). [`generic`] holds
//! the actions any workflow may use (files, JSON, HTTP, URLs, locks, questions, `try`); each
//! family of workflows has a folder of its own, named after the namespace of its built-ins, with
//! its formats and its tests: [`markdown`] (frontmatter, sections, claims), [`catalog`] (the
//! markdown catalog), [`transcript`] (the Claude Code transcript), [`web`] (crawling) and
//! [`tree`] (promotion of a staged tree).

use serde_json::Value;

mod args;
mod catalog;
mod ctx;
mod error;
mod generic;
mod markdown;
pub(crate) mod paths;
mod schema;
#[cfg(test)]
mod testing;
mod transcript;
mod tree;
mod web;

pub(crate) use ctx::{BuiltinCtx, Cancel, Checked};
pub(crate) use error::{io_error, too_large, BuiltinError, BuiltinResult};
pub(crate) use generic::ask;
pub(crate) use paths::{LateRoot, LateRoots, LateState, WriteRoots};

/// One built-in action.
pub(crate) struct Builtin {
    pub name: &'static str,
    /// What it does, in one line: the built-ins reference of the book is made from it
    /// (`stagegraph schema builtins`).
    pub description: &'static str,
    /// True when the action changes anything outside the run (a dry-run skips it).
    pub writes: bool,
    /// JSON Schema of `with`, after templates are rendered: [`args::schema`] of the struct
    /// `run` deserializes `with` into.
    pub with_schema: fn() -> Value,
    /// Whether `with` deserializes into that struct ([`args::parses`]); `run` does the same
    /// before it acts.
    #[cfg_attr(not(test), allow(dead_code))]
    pub with_parse: fn(&Value) -> Result<(), BuiltinError>,
    /// JSON Schema of the output.
    pub output_schema: fn() -> Value,
    pub run: fn(&Value, &BuiltinCtx) -> BuiltinResult,
}

/// Every built-in, sorted by name.
pub(crate) fn all() -> &'static [Builtin] {
    &REGISTRY
}

/// The built-in of that name.
pub(crate) fn lookup(name: &str) -> Option<&'static Builtin> {
    REGISTRY.iter().find(|builtin| builtin.name == name)
}

/// The `with` arguments of a writing built-in that name what it writes, moves or removes: each
/// is checked against the write roots when it runs, and by `check` when it is written without a
/// template.
pub(crate) fn written_arguments(name: &str) -> &'static [&'static str] {
    match name {
        "fs.write" | "fs.remove" | "fs.prune" | "json.write" | "lock.acquire"
        | "fs.remove_within" => &["path"],
        "fs.copy" | "web.crawl" => &["to"],
        "fs.move" | "fs.move_within" => &["from", "to"],
        "tree.promote" => &["from", "to", "journal"],
        _ => &[],
    }
}

static REGISTRY: std::sync::LazyLock<Vec<Builtin>> = std::sync::LazyLock::new(|| {
    let mut all: Vec<Builtin> = [
        generic::builtins(),
        markdown::builtins(),
        catalog::builtins(),
        transcript::builtins(),
        web::builtins(),
        tree::builtins(),
    ]
    .into_iter()
    .flatten()
    .collect();
    all.sort_by_key(|builtin| builtin.name);
    all
});

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};

    use super::*;

    /// Every built-in that writes says which arguments name what it writes, and each of them is
    /// a string argument of its `with`.
    #[test]
    fn every_writing_builtin_names_its_written_arguments() {
        for builtin in all() {
            let written = written_arguments(builtin.name);
            assert_eq!(
                builtin.writes,
                !written.is_empty(),
                "{}: writes and its written arguments disagree",
                builtin.name
            );
            let schema = (builtin.with_schema)();
            for argument in written {
                let kind = &schema["properties"][*argument]["type"];
                assert!(
                    kind == "string"
                        || kind
                            .as_array()
                            .is_some_and(|k| k.contains(&"string".into())),
                    "{}.{argument} is not a string argument: {schema}",
                    builtin.name
                );
            }
        }
    }

    /// Every property of every built-in's `with` and output schema says what it is, since
    /// `check` messages and the book's reference are built from them.
    #[test]
    fn every_schema_property_of_every_builtin_is_described() {
        fn check(schema: &Value, at: &str, missing: &mut Vec<String>) {
            if let Some(properties) = schema.get("properties").and_then(Value::as_object) {
                for (name, property) in properties {
                    let here = format!("{at}.{name}");
                    if property.get("description").is_none() {
                        missing.push(here.clone());
                    }
                    check(property, &here, missing);
                    if let Some(items) = property.get("items") {
                        check(items, &here, missing);
                    }
                }
            }
        }
        let mut missing = Vec::new();
        for builtin in all() {
            check(
                &(builtin.with_schema)(),
                &format!("{}.with", builtin.name),
                &mut missing,
            );
            check(
                &(builtin.output_schema)(),
                &format!("{}.output", builtin.name),
                &mut missing,
            );
            assert!(
                jsonschema::validator_for(&(builtin.with_schema)()).is_ok(),
                "{}: `with` schema does not compile",
                builtin.name
            );
        }
        assert!(missing.is_empty(), "undescribed properties: {missing:#?}");
    }

    /// A value of the type a property's schema names, standing for a template there: what the
    /// template renders to is only known at run time.
    fn rendered_stand_in(property: &Value, template: &str) -> Value {
        if let Some(default) = property.get("default") {
            return default.clone();
        }
        if let Some(first) = property.get("enum").and_then(|names| names.get(0)) {
            return first.clone();
        }
        let kind = match property.get("type") {
            Some(Value::Array(kinds)) => kinds.first().and_then(Value::as_str),
            Some(kind) => kind.as_str(),
            None => None,
        };
        match kind {
            Some("integer" | "number") => property.get("minimum").cloned().unwrap_or(0.into()),
            Some("boolean") => Value::Bool(false),
            Some("array") => Value::Array(Vec::new()),
            Some("object") => Value::Object(serde_json::Map::new()),
            Some("null") => Value::Null,
            _ => Value::String(template.to_string()),
        }
    }

    /// Holds one `with` table as written in a workflow to the built-in's schema, as `check`
    /// does (every key an argument, every required one given, every value written without a
    /// template valid), and to its struct, as the run does (templates standing for values of
    /// their property's type). The tables of the built-in `try` runs are held to that one's.
    fn hold_to_builtin(builtin: &Builtin, with: &serde_json::Map<String, Value>, at: &str) {
        let schema = (builtin.with_schema)();
        let properties = schema["properties"].as_object().expect("properties");
        for required in schema["required"].as_array().into_iter().flatten() {
            let required = required.as_str().expect("a name");
            assert!(with.contains_key(required), "{at}: `{required}` missing");
        }
        let mut literal = serde_json::Map::new();
        let mut rendered = serde_json::Map::new();
        for (key, value) in with {
            let property = properties
                .get(key)
                .unwrap_or_else(|| panic!("{at}: `{key}` is no argument of {}", builtin.name));
            match value.as_str() {
                Some(text) if crate::template::compiled::has_syntax(text) => {
                    rendered.insert(key.clone(), rendered_stand_in(property, text));
                }
                _ => {
                    literal.insert(key.clone(), value.clone());
                    rendered.insert(key.clone(), value.clone());
                }
            }
        }
        let mut loose = schema.clone();
        loose.as_object_mut().expect("an object").remove("required");
        let validator = jsonschema::validator_for(&loose).expect("the schema compiles");
        let errors: Vec<String> = validator
            .iter_errors(&Value::Object(literal))
            .map(|error| error.to_string())
            .collect();
        assert!(errors.is_empty(), "{at}: {errors:?}");
        let rendered = Value::Object(rendered);
        if let Err(error) = (builtin.with_parse)(&rendered) {
            panic!("{at}: {rendered} does not deserialize: {error}");
        }
        if builtin.name == "try" {
            let inner = with["uses"].as_str().and_then(lookup).expect("a built-in");
            let empty = serde_json::Map::new();
            let inner_with = with
                .get("with")
                .and_then(Value::as_object)
                .unwrap_or(&empty);
            hold_to_builtin(inner, inner_with, &format!("{at}.with"));
        }
    }

    /// Every built-in's struct reads a table of every argument its schema names, and one of only
    /// the required ones: the schema `check` holds a table to and the struct the run reads it
    /// into are wired to the same type, for the built-ins no shipped workflow uses too.
    #[test]
    fn every_builtin_reads_every_argument_its_schema_names() {
        for builtin in all() {
            let schema = (builtin.with_schema)();
            let properties = schema["properties"].as_object().expect("properties");
            let required: Vec<&str> = schema["required"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            let every: serde_json::Map<String, Value> = properties
                .iter()
                .map(|(key, property)| (key.clone(), rendered_stand_in(property, "x")))
                .collect();
            let fewest: serde_json::Map<String, Value> = every
                .iter()
                .filter(|(key, _)| required.contains(&key.as_str()))
                .map(|(key, value)| (key.clone(), value.clone()))
                .collect();
            for with in [every, fewest] {
                let with = Value::Object(with);
                if let Err(error) = (builtin.with_parse)(&with) {
                    panic!("{}: {with} does not deserialize: {error}", builtin.name);
                }
            }
        }
    }

    /// Every `with` table of every shipped workflow satisfies its built-in's schema and
    /// deserializes into the struct that schema is derived from, so the two cannot drift apart
    /// without a workflow noticing.
    #[test]
    fn every_shipped_with_table_fits_its_schema_and_its_struct() {
        let folder = Path::new(env!("CARGO_MANIFEST_DIR")).join("workflows");
        let mut files: Vec<PathBuf> = std::fs::read_dir(&folder)
            .expect("workflows/")
            .map(|entry| entry.expect("an entry").path())
            .filter(|path| path.extension().is_some_and(|ext| ext == "toml"))
            .filter(|path| {
                !path
                    .to_string_lossy()
                    .ends_with(crate::testing::TEST_SUFFIX)
            })
            .collect();
        files.sort();
        let mut tables = 0;
        for file in &files {
            let text = std::fs::read_to_string(file).expect("a workflow");
            let document: toml::Table = toml::from_str(&text).expect("TOML");
            let document = serde_json::to_value(document).expect("JSON");
            let stages = document["stages"].as_object().expect("stages");
            for (id, stage) in stages {
                let Some(uses) = stage.get("uses").and_then(Value::as_str) else {
                    continue;
                };
                let builtin = lookup(uses).unwrap_or_else(|| panic!("no built-in {uses}"));
                let empty = serde_json::Map::new();
                let with = stage
                    .get("with")
                    .and_then(Value::as_object)
                    .unwrap_or(&empty);
                let at = format!("{}: stages.{id}", file.display());
                hold_to_builtin(builtin, with, &at);
                tables += 1;
            }
        }
        assert!(
            tables > 50,
            "only {tables} `with` tables in {}",
            folder.display()
        );
    }
}
