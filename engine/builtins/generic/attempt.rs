//! Built-in: try.
//!
//! Runs one read-only built-in and turns its failure into data: the output is
//! `{ ok, output, error }` whether the inner action succeeded or not. A `foreach` stage fails as a
//! whole when one item fails, and `on_error` then discards every item's output; wrapping the
//! per-item action in `try` keeps each item's own result, so one unreachable URL among twenty does
//! not hide the other nineteen answers.
//!
//! Only built-ins that write nothing can be wrapped: `try` itself writes nothing, so a dry-run
//! executes it, and it must not carry a write past the dry-run that way.

use schemars::JsonSchema;
use serde_json::{json, Value};

use crate::builtins::args::{self, parse};
use crate::builtins::schema::object_schema;
use crate::builtins::{Builtin, BuiltinCtx, BuiltinError, BuiltinResult};

const NAME: &str = "try";

pub(crate) fn builtins() -> Vec<Builtin> {
    vec![Builtin {
        name: NAME,
        description: "Run a read-only built-in; its failure becomes data ({ ok, output, error }).",
        writes: false,
        with_schema: args::schema::<TryArgs>,
        with_parse: args::parses::<TryArgs>,
        output_schema,
        run,
    }]
}

/// Run a read-only built-in and report its failure as data.
#[derive(serde::Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct TryArgs {
    /// The built-in to run; only built-ins that write nothing.
    uses: Wrappable,
    /// Its arguments, as that built-in takes them.
    #[schemars(transform = args::not_null)]
    with: Option<serde_json::Map<String, Value>>,
}

/// The name of a built-in `try` may run. Its schema is an enum of the names, read from the
/// registry when the schema is derived, which no derive can spell.
#[derive(serde::Deserialize)]
struct Wrappable(String);

impl JsonSchema for Wrappable {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Wrappable".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({ "type": "string", "enum": wrappable() })
    }
}

/// The built-ins `try` may run: every one that writes nothing, except itself.
fn wrappable() -> Vec<&'static str> {
    crate::builtins::all()
        .iter()
        .filter(|builtin| {
            !builtin.writes && builtin.name != NAME && builtin.name != super::ask::NAME
        })
        .map(|builtin| builtin.name)
        .collect()
}

fn output_schema() -> Value {
    let mut schema = object_schema(
        "What the inner built-in gave, or why it failed.",
        json!({
            "ok": { "type": "boolean", "description": "True when the inner built-in succeeded." },
            "output": { "description": "Its output when it succeeded; null when it failed." },
            "error": {
                "type": ["string", "null"],
                "description": "Its error message when it failed; null when it succeeded.",
            },
        }),
        &["ok", "output", "error"],
    );
    schema["examples"] = json!([{ "ok": true, "output": null, "error": null }]);
    schema
}

fn run(with: &Value, ctx: &BuiltinCtx) -> BuiltinResult {
    let args: TryArgs = parse(NAME, with)?;
    let Wrappable(uses) = args.uses;
    // Misuse is an error of the stage, not data: only the inner action's failure is caught.
    let inner = crate::builtins::lookup(&uses)
        .ok_or_else(|| BuiltinError::new(format!("`try`: unknown built-in `{uses}`")))?;
    if inner.writes || inner.name == NAME {
        return Err(BuiltinError::new(format!(
            "`try` runs only built-ins that write nothing, not `{}`",
            inner.name
        )));
    }
    let with = Value::Object(args.with.unwrap_or_default());
    Ok(match (inner.run)(&with, ctx) {
        Ok(output) => json!({ "ok": true, "output": output, "error": null }),
        Err(error) => json!({ "ok": false, "output": null, "error": error.to_string() }),
    })
}

#[cfg(test)]
mod tests {
    use serde_json::{json, Value};

    use crate::builtins::{lookup, BuiltinCtx, WriteRoots};

    fn call(with: Value) -> Result<Value, String> {
        let dir = tempfile::tempdir().expect("a temporary folder");
        std::fs::write(dir.path().join("present.txt"), "hello").expect("write");
        let writes = WriteRoots::new(dir.path(), &[".".to_string()]);
        let ctx = BuiltinCtx::for_test(dir.path(), &writes);
        let builtin = lookup("try").expect("`try` is registered");
        (builtin.run)(&with, &ctx).map_err(|e| e.to_string())
    }

    #[test]
    fn a_success_is_wrapped() {
        let out = call(json!({ "uses": "fs.read", "with": { "path": "present.txt" } }));
        assert_eq!(
            out,
            Ok(json!({ "ok": true, "output": "hello", "error": null }))
        );
    }

    #[test]
    fn a_failure_becomes_data() {
        let out = call(json!({ "uses": "fs.read", "with": { "path": "missing.txt" } }))
            .expect("the failure is data");
        assert_eq!(out["ok"], false);
        assert_eq!(out["output"], Value::Null);
        let error = out["error"].as_str().expect("an error message");
        assert!(error.contains("missing.txt"), "{error}");
        assert!(error.contains("no such file or folder"), "{error}");
    }

    #[test]
    fn a_connection_failure_becomes_data() {
        // A port nothing listens on: bind one, then close it.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|listener| listener.local_addr())
            .expect("a free port")
            .port();
        let out = call(json!({
            "uses": "http.head",
            "with": { "url": format!("http://127.0.0.1:{port}/"), "timeout": "5s" },
        }))
        .expect("the failure is data");
        assert_eq!(out["ok"], false);
        assert!(
            out["error"]
                .as_str()
                .unwrap_or_default()
                .contains("http.head"),
            "{out}"
        );
    }

    #[test]
    fn writing_builtins_and_itself_are_refused() {
        let err =
            call(json!({ "uses": "fs.write", "with": { "path": "out.txt", "content": "x" } }))
                .expect_err("a writing built-in is refused");
        assert!(err.contains("only built-ins that write nothing"), "{err}");
        let err = call(json!({ "uses": "try", "with": { "uses": "fs.read" } }))
            .expect_err("`try` does not wrap itself");
        assert!(err.contains("not `try`"), "{err}");
        let err = call(json!({ "uses": "fs.nope" })).expect_err("unknown");
        assert!(err.contains("unknown built-in `fs.nope`"), "{err}");
    }

    #[test]
    fn the_schema_lists_only_read_only_builtins() {
        let builtin = lookup("try").expect("registered");
        let schema = (builtin.with_schema)();
        let names: Vec<&str> = schema["properties"]["uses"]["enum"]
            .as_array()
            .expect("an enum")
            .iter()
            .filter_map(Value::as_str)
            .collect();
        assert!(
            names.contains(&"http.head") && names.contains(&"fs.read"),
            "{names:?}"
        );
        assert!(
            !names.contains(&"fs.write") && !names.contains(&"try"),
            "{names:?}"
        );
    }
}
