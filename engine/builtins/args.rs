//! A built-in's `with` arguments are one struct (`#[derive(Deserialize, JsonSchema)]`): the run
//! deserializes the rendered `with` table into it ([`parse`]), and `check` validates the table
//! as written against the JSON Schema derived from it ([`schema`]). Schema and reader cannot
//! drift apart, since there is only the one description of the arguments.
//!
//! The derived schemas are draft 2020-12, closed where the struct denies unknown fields, with
//! every subschema inline: `check` validates each argument on its own against its property's
//! schema, so a property must not lean on a `$defs` entry of the whole.

use std::any::TypeId;
use std::collections::HashMap;
use std::sync::{LazyLock, Mutex};

use schemars::transform::{RecursiveTransform, Transform};
use schemars::{JsonSchema, Schema};
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use super::BuiltinError;

/// The JSON Schema of `with` for the arguments struct `T`, derived once per type.
pub(crate) fn schema<T: JsonSchema + 'static>() -> Value {
    static CACHE: LazyLock<Mutex<HashMap<TypeId, Value>>> = LazyLock::new(Default::default);
    let id = TypeId::of::<T>();
    if let Some(schema) = CACHE
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .get(&id)
    {
        return schema.clone();
    }
    // Derived outside the lock: a schema may consult the registry (`try` lists what it wraps).
    let schema = derive::<T>();
    CACHE
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .entry(id)
        .or_insert(schema)
        .clone()
}

/// `with` deserialized into an action's argument struct; `check` has validated it against the
/// schema already, so this only fails when the action is called directly with bad arguments.
pub(crate) fn parse<T: DeserializeOwned>(name: &str, with: &Value) -> Result<T, BuiltinError> {
    T::deserialize(with)
        .map_err(|err| BuiltinError::new(format!("invalid `with` for `{name}`: {err}")))
}

/// Whether `with` deserializes into `T`, the struct the built-in's run reads it through: what
/// [`Builtin::with_parse`](super::Builtin::with_parse) holds, so that tests can hold every
/// schema to its reader.
pub(crate) fn parses<T: DeserializeOwned>(with: &Value) -> Result<(), BuiltinError> {
    T::deserialize(with)
        .map(drop)
        .map_err(|err| BuiltinError::new(err.to_string()))
}

fn derive<T: JsonSchema>() -> Value {
    let generator = schemars::generate::SchemaSettings::draft2020_12()
        .with(|settings| settings.inline_subschemas = true)
        .with_transform(RecursiveTransform(Tidy))
        .into_generator();
    let Value::Object(mut derived) = generator.into_root_schema_for::<T>().to_value() else {
        return Value::Bool(true);
    };
    // The root's title would be the Rust type's name, which says nothing to a workflow's author.
    derived.remove("title");
    let mut root = Map::new();
    if let Some(draft) = derived.remove("$schema") {
        root.insert("$schema".into(), draft);
    }
    root.extend(derived);
    Value::Object(root)
}

/// Every subschema as a workflow's author reads it.
#[derive(Clone)]
struct Tidy;

impl Transform for Tidy {
    fn transform(&mut self, schema: &mut Schema) {
        let Some(object) = schema.as_object_mut() else {
            return;
        };
        // A doc comment is wrapped at the source's width; its description is one line per
        // paragraph.
        if let Some(Value::String(text)) = object.get_mut("description") {
            *text = text
                .split("\n\n")
                .map(|paragraph| {
                    paragraph
                        .lines()
                        .map(str::trim)
                        .collect::<Vec<_>>()
                        .join(" ")
                })
                .collect::<Vec<_>>()
                .join("\n\n");
        }
        // schemars names a Rust integer's width (`uint64`, `int32`) as a `format`, which is no
        // format JSON Schema defines and which validators ignore; the range says what is checked.
        if object.get("type").and_then(Value::as_str) == Some("integer")
            && object
                .get("format")
                .and_then(Value::as_str)
                .is_some_and(|format| format.starts_with("int") || format.starts_with("uint"))
        {
            object.remove("format");
        }
        // `true` is what an absent `items` or `additionalProperties` means already.
        for key in ["items", "additionalProperties"] {
            if object.get(key) == Some(&Value::Bool(true)) {
                object.remove(key);
            }
        }
    }
}

/// For an argument that may be left out (an `Option` field): its schema is the type written,
/// without the `null` schemars adds. A `with` table is TOML, which has no null, and `check`
/// words a wrong value against this schema ("is not of type "string""); a null that a template
/// renders at run time still reads as left out.
pub(crate) fn not_null(schema: &mut Schema) {
    let Some(Value::Array(types)) = schema.get_mut("type") else {
        return;
    };
    types.retain(|kind| kind != "null");
    if let [only] = types.as_slice() {
        let only = only.clone();
        schema.insert("type".into(), only);
    }
}

/// For an enum of names: its schema is the `enum` alone, without the `"type": "string"`
/// schemars adds, so that a wrong value is worded as one not among the names ("is not one of
/// ...") whatever its type.
pub(crate) fn enum_only(schema: &mut Schema) {
    if schema.get("enum").is_some() {
        schema.remove("type");
    }
}
