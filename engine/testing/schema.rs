//! The JSON Schema of a test file, for editors and `stagegraph schema test`. The reader
//! ([`super::file`]) is the authority; a test checks every shipped test file against this.

use serde_json::{json, Value};

/// The schema of a `*.test.toml` file.
pub(crate) fn schema() -> Value {
    let file_expect = json!({
        "oneOf": [
            { "type": "string", "description": "The file's exact text." },
            {
                "type": "object",
                "additionalProperties": false,
                "properties": {
                    "contains": { "type": "string", "description": "Text the file holds." },
                    "absent": { "const": true, "description": "Nothing is at this path." }
                },
                "minProperties": 1,
                "maxProperties": 1
            }
        ]
    });
    json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "stagegraph test file",
        "description": "Golden cases of a workflow, run by `stagegraph test` over recorded model replies.",
        "type": "object",
        "additionalProperties": false,
        "required": ["workflow"],
        "properties": {
            "workflow": { "type": "string", "description": "A workflow name on the search path, or a .toml path relative to this file." },
            "recordings": { "type": "string", "description": "The recordings of every case that names none, relative to this file (default recordings/<file name without .test.toml>)." },
            "case": {
                "type": "array",
                "items": {
                    "type": "object",
                    "additionalProperties": false,
                    "required": ["name"],
                    "properties": {
                        "name": { "type": "string", "minLength": 1 },
                        "inputs": { "type": "object", "description": "The run's inputs, typed by the workflow's declarations." },
                        "recordings": { "type": "string", "description": "Model replies replayed from this folder (relative to this file)." },
                        "files": { "type": "object", "additionalProperties": { "type": "string" }, "description": "Files written into the case's temporary project (relative paths)." },
                        "env": { "type": "object", "additionalProperties": { "type": "string" }, "description": "Variables added to the environment of the commands the run starts." },
                        "answers": { "type": "object", "additionalProperties": { "type": "string" }, "description": "`ask` stages' answers; the others take their `yes` choice." },
                        "skip": { "type": "string", "description": "Do not run the case, for this reason." },
                        "stages": {
                            "type": "object",
                            "description": "Stages that do not run: their output is given.",
                            "additionalProperties": {
                                "type": "object",
                                "additionalProperties": false,
                                "required": ["output"],
                                "properties": { "output": {} }
                            }
                        },
                        "expect": {
                            "type": "object",
                            "additionalProperties": false,
                            "properties": {
                                "status": { "enum": ["completed", "exited", "failed"], "default": "completed" },
                                "exit_stage": { "type": "string", "description": "With status \"exited\": the stage whose exit_if ended the run." },
                                "error": { "type": "string", "description": "Text the run's error or a stage's error holds." },
                                "outputs": { "type": "object", "description": "Values of the workflow's [outputs], compared exactly." },
                                "files": { "type": "object", "additionalProperties": file_expect },
                                "assert": { "type": "array", "items": { "type": "string" }, "description": "Expressions over run, stages, outputs and inputs that must be true." }
                            }
                        }
                    }
                }
            }
        }
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_shipped_test_file_fits_the_schema() {
        let validator = jsonschema::validator_for(&super::schema()).expect("the schema compiles");
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("workflows");
        let mut checked = 0;
        for entry in std::fs::read_dir(dir).expect("workflows/") {
            let path = entry.expect("an entry").path();
            if !path.to_string_lossy().ends_with(super::super::TEST_SUFFIX) {
                continue;
            }
            let text = std::fs::read_to_string(&path).expect("a test file");
            let value: toml::Value = toml::from_str(&text).expect("TOML");
            let json = serde_json::to_value(value).expect("JSON");
            let errors: Vec<String> = validator
                .iter_errors(&json)
                .map(|e| e.to_string())
                .collect();
            assert!(errors.is_empty(), "{}: {errors:?}", path.display());
            checked += 1;
        }
        assert!(checked >= 2, "only {checked} shipped test files");
    }
}
