//! Hand-written pieces of output schemas that several built-ins share.

use std::path::Path;

use serde_json::{json, Value};

use crate::builtins::paths::WriteOutcome;

const DRAFT: &str = "https://json-schema.org/draft/2020-12/schema";

/// A closed object schema.
pub(crate) fn object_schema(description: &str, properties: Value, required: &[&str]) -> Value {
    json!({
        "$schema": DRAFT,
        "description": description,
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": false,
    })
}

/// A schema for a single value, with the draft declared.
pub(crate) fn value_schema(mut schema: Value) -> Value {
    if let Value::Object(map) = &mut schema {
        map.insert("$schema".to_string(), json!(DRAFT));
    }
    schema
}

/// The output of every action that writes one file: `{ path, sha256, changed }`.
pub(crate) fn write_output_schema() -> Value {
    json!({
        "$schema": DRAFT,
        "description": "What was written.",
        "type": "object",
        "properties": {
            "path": { "type": "string", "description": "The absolute path written." },
            "sha256": {
                "type": "string",
                "pattern": "^[0-9a-f]{64}$",
                "description": "SHA-256 hex of the bytes now in the file.",
            },
            "changed": {
                "type": "boolean",
                "description": "False when the file already held these bytes and was left alone.",
            },
        },
        "required": ["path", "sha256", "changed"],
        "additionalProperties": false,
        "examples": [{
            "path": "/project/out/notes.md",
            "sha256": "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
            "changed": true,
        }],
    })
}

pub(crate) fn write_output(path: &Path, outcome: WriteOutcome) -> Value {
    json!({ "path": path.display().to_string(), "sha256": outcome.sha256, "changed": outcome.changed })
}
