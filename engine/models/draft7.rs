//! A stage's schema in the dialect the Claude Code CLI accepts for `--json-schema`.
//!
//! The CLI compiles the schema with a draft-07 validator in strict mode: a `$schema` naming
//! draft 2020-12 is refused ("no schema with key or ref"), and so is every keyword draft 07 does
//! not know (`unevaluatedProperties`, `prefixItems`, `dependentRequired`, `$anchor`, an
//! annotation of the project's own). The schema sent is a translation: what draft 07 can say is
//! said in its words (`prefixItems` as `items` and `additionalItems`, `dependentRequired` and
//! `dependentSchemas` as `dependencies`), what it cannot is left out. Nothing is lost: the CLI's
//! schema only steers the model, and the engine validates the reply against the stage's full
//! schema, repairing it as for any provider.

use serde_json::{Map, Value};

/// Keywords a draft-07 validator in strict mode knows, besides those translated below.
const KNOWN: &[&str] = &[
    "type",
    "enum",
    "const",
    "multipleOf",
    "maximum",
    "exclusiveMaximum",
    "minimum",
    "exclusiveMinimum",
    "maxLength",
    "minLength",
    "pattern",
    "format",
    "items",
    "additionalItems",
    "maxItems",
    "minItems",
    "uniqueItems",
    "contains",
    "maxProperties",
    "minProperties",
    "required",
    "properties",
    "patternProperties",
    "additionalProperties",
    "dependencies",
    "propertyNames",
    "if",
    "then",
    "else",
    "allOf",
    "anyOf",
    "oneOf",
    "not",
    "$ref",
    "$defs",
    "definitions",
    "$id",
    "$comment",
    "title",
    "description",
    "default",
    "examples",
    "readOnly",
    "writeOnly",
    "deprecated",
    "contentMediaType",
    "contentEncoding",
];

/// Keywords whose value is one schema.
const ONE: &[&str] = &[
    "additionalItems",
    "additionalProperties",
    "contains",
    "propertyNames",
    "if",
    "then",
    "else",
    "not",
];

/// Keywords whose value is a list of schemas.
const LIST: &[&str] = &["allOf", "anyOf", "oneOf"];

/// Keywords whose value maps names to schemas.
const MAP: &[&str] = &["properties", "patternProperties", "$defs", "definitions"];

/// The schema as the CLI's validator takes it.
pub(crate) fn translate(schema: &Value) -> Value {
    let mut translated = node(schema);
    if let Value::Object(map) = &mut translated {
        // The root's `$id` would make the CLI's validator key the schema by a name that may
        // collide with one it holds; every reference the engine's schemas use is local.
        map.remove("$id");
    }
    translated
}

fn node(schema: &Value) -> Value {
    let Value::Object(map) = schema else {
        return schema.clone();
    };
    let mut out = Map::new();
    for (key, value) in map {
        let key = key.as_str();
        if !KNOWN.contains(&key) {
            continue;
        }
        let value = if ONE.contains(&key) {
            node(value)
        } else if LIST.contains(&key) {
            list(value)
        } else if MAP.contains(&key) {
            named(value)
        } else if key == "items" && !map.contains_key("prefixItems") {
            match value {
                Value::Array(_) => list(value),
                _ => node(value),
            }
        } else if key == "items" {
            // Beside `prefixItems`, `items` is the schema of the items after them.
            out.insert("additionalItems".to_string(), node(value));
            continue;
        } else if key == "dependencies" {
            dependencies(value)
        } else {
            value.clone()
        };
        out.insert(key.to_string(), value);
    }
    if let Some(prefix) = map.get("prefixItems") {
        out.insert("items".to_string(), list(prefix));
    }
    let mut dependencies = Map::new();
    for key in ["dependentRequired", "dependentSchemas"] {
        if let Some(Value::Object(entries)) = map.get(key) {
            for (name, value) in entries {
                let value = if key == "dependentSchemas" {
                    node(value)
                } else {
                    value.clone()
                };
                dependencies.insert(name.clone(), value);
            }
        }
    }
    if !dependencies.is_empty() {
        match out.get_mut("dependencies") {
            Some(Value::Object(existing)) => existing.extend(dependencies),
            _ => {
                out.insert("dependencies".to_string(), Value::Object(dependencies));
            }
        }
    }
    Value::Object(out)
}

fn list(value: &Value) -> Value {
    match value {
        Value::Array(items) => Value::Array(items.iter().map(node).collect()),
        other => other.clone(),
    }
}

fn named(value: &Value) -> Value {
    match value {
        Value::Object(entries) => Value::Object(
            entries
                .iter()
                .map(|(name, schema)| (name.clone(), node(schema)))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// `dependencies`: each entry a list of names (kept) or a schema (translated).
fn dependencies(value: &Value) -> Value {
    match value {
        Value::Object(entries) => Value::Object(
            entries
                .iter()
                .map(|(name, entry)| {
                    let entry = match entry {
                        Value::Array(_) => entry.clone(),
                        schema => node(schema),
                    };
                    (name.clone(), entry)
                })
                .collect(),
        ),
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::translate;

    #[test]
    fn the_2020_12_dialect_and_unknown_keywords_are_left_out_everywhere() {
        let schema = json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "$id": "context-update/gate.schema.json",
            "type": "object",
            "unevaluatedProperties": false,
            "x-note": "ours",
            "properties": {
                "a": {"type": "string", "$anchor": "a", "minLength": 1},
                "b": {"anyOf": [{"type": "null"}, {"$ref": "#/$defs/c", "unevaluatedItems": false}]}
            },
            "$defs": {"c": {"type": "array", "items": {"type": "string", "$dynamicRef": "#x"}}}
        });
        assert_eq!(
            translate(&schema),
            json!({
                "type": "object",
                "properties": {
                    "a": {"type": "string", "minLength": 1},
                    "b": {"anyOf": [{"type": "null"}, {"$ref": "#/$defs/c"}]}
                },
                "$defs": {"c": {"type": "array", "items": {"type": "string"}}}
            })
        );
    }

    #[test]
    fn what_draft_07_can_say_is_said_in_its_words() {
        let schema = json!({
            "type": "object",
            "properties": {
                "pair": {"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}], "items": false}
            },
            "dependentRequired": {"a": ["b"]},
            "dependentSchemas": {"c": {"required": ["d"], "$comment": "kept"}},
            "dependencies": {"e": ["f"]}
        });
        assert_eq!(
            translate(&schema),
            json!({
                "type": "object",
                "properties": {
                    "pair": {"type": "array", "additionalItems": false,
                             "items": [{"type": "string"}, {"type": "integer"}]}
                },
                "dependencies": {"e": ["f"], "a": ["b"], "c": {"required": ["d"], "$comment": "kept"}}
            })
        );
    }

    #[test]
    fn values_are_not_schemas_and_stay_as_they_are() {
        let schema = json!({
            "type": "object",
            "properties": {"k": {"const": {"$schema": "x", "prefixItems": 1}, "default": {"x-y": 1}}},
            "enum": [{"unevaluatedProperties": true}]
        });
        assert_eq!(translate(&schema), schema);
    }
}
