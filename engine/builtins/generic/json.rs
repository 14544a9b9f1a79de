//! Built-ins: json.read, json.write, jsonl.read.
//!
//! Files are read through a buffered reader, never slurped: a JSON Lines transcript can run to
//! tens of megabytes and is read again and again from a remembered line onwards. A JSON Lines
//! file may be appended to while it is read, so an unterminated last line that does not parse is
//! taken for a write in progress: it is neither returned nor counted, and the next read picks it
//! up once it is complete.

use std::io::{self, BufRead, BufReader};
use std::path::Path;

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::builtins::args::{self, parse};
use crate::builtins::io_error;
use crate::builtins::paths;
use crate::builtins::schema::{object_schema, value_schema, write_output, write_output_schema};
use crate::builtins::{too_large, Builtin, BuiltinCtx, BuiltinError, BuiltinResult, Checked};

pub(crate) fn builtins() -> Vec<Builtin> {
    vec![
        Builtin {
            name: "json.read",
            description: "Read and parse a JSON file.",
            writes: false,
            with_schema: args::schema::<ReadArgs>,
            with_parse: args::parses::<ReadArgs>,
            output_schema: read_output_schema,
            run: read,
        },
        Builtin {
            name: "json.write",
            description:
                "Write a value as pretty JSON, atomically; identical content is not rewritten.",
            writes: true,
            with_schema: args::schema::<WriteArgs>,
            with_parse: args::parses::<WriteArgs>,
            output_schema: write_output_schema,
            run: write,
        },
        Builtin {
            name: "jsonl.read",
            description: "Read the values of a JSON Lines file after a given line.",
            writes: false,
            with_schema: args::schema::<LinesArgs>,
            with_parse: args::parses::<LinesArgs>,
            output_schema: lines_output_schema,
            run: read_lines,
        },
    ]
}

// ---------------------------------------------------------------------------------------------
// json.read

/// Read and parse a JSON file.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct ReadArgs {
    /// The JSON file; relative paths resolve against the run's working directory.
    #[schemars(length(min = 1))]
    path: String,
    /// When true, a missing file gives null instead of an error.
    #[serde(default)]
    optional: bool,
}

fn read_output_schema() -> Value {
    value_schema(json!({
        "description": "The parsed value, or null when the file is missing and `optional` is true.",
        "examples": [{}],
    }))
}

fn read(with: &Value, ctx: &BuiltinCtx) -> BuiltinResult {
    let args: ReadArgs = parse("json.read", with)?;
    let path = ctx.resolve(&args.path);
    let file = match Checked::open(&path, ctx.cancel) {
        Ok(file) => file,
        Err(err) if err.kind() == io::ErrorKind::NotFound && args.optional => {
            return Ok(Value::Null)
        }
        Err(err) => return Err(io_error("cannot read", &path, &err)),
    };
    if file
        .inner
        .metadata()
        .is_ok_and(|meta| meta.len() > ctx.max_output)
    {
        return Err(too_large(&path, ctx.max_output));
    }
    serde_json::from_reader(BufReader::new(file)).map_err(|err| {
        if err.is_io() {
            BuiltinError::new(format!("cannot read `{}`: {err}", path.display()))
        } else {
            BuiltinError::new(format!(
                "invalid JSON in `{}` at line {}, column {}: {}",
                path.display(),
                err.line(),
                err.column(),
                bare_message(&err)
            ))
        }
    })
}

/// serde_json's message without its " at line L column C" tail, which callers word themselves.
fn bare_message(err: &serde_json::Error) -> String {
    let text = err.to_string();
    let tail = format!(" at line {} column {}", err.line(), err.column());
    text.strip_suffix(&tail).unwrap_or(&text).to_string()
}

// ---------------------------------------------------------------------------------------------
// json.write

/// Write a value as JSON (2-space indent, trailing newline), atomically, inside the workflow's
/// writes.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct WriteArgs {
    /// The file to write; missing parent folders are created.
    #[schemars(length(min = 1))]
    path: String,
    /// Any JSON value.
    value: Value,
    /// A JSON document whose style to keep (say, the file this one replaces): every part whose
    /// value is unchanged keeps its bytes, and what changed is written in its indentation.
    /// Missing or not JSON: the usual style.
    #[schemars(length(min = 1), transform = args::not_null)]
    style_of: Option<String>,
}

fn write(with: &Value, ctx: &BuiltinCtx) -> BuiltinResult {
    let args: WriteArgs = parse("json.write", with)?;
    let path = ctx.writes.check(&ctx.resolve(&args.path))?;
    let styled = args
        .style_of
        .as_deref()
        .and_then(|like| std::fs::read_to_string(ctx.resolve(like)).ok())
        .and_then(|original| super::json_style::restyle(&original, &args.value));
    let text = match styled {
        Some(text) => text,
        None => pretty(&args.value)?,
    };
    let outcome = paths::write_atomic(&path, text.as_bytes())
        .map_err(|err| io_error("cannot write", &path, &err))?;
    Ok(write_output(&path, outcome))
}

/// The value as written to disk: 2-space indent and a trailing newline.
fn pretty(value: &Value) -> Result<String, BuiltinError> {
    let mut text = serde_json::to_string_pretty(value)
        .map_err(|err| BuiltinError::new(format!("cannot encode JSON: {err}")))?;
    text.push('\n');
    Ok(text)
}

// ---------------------------------------------------------------------------------------------
// jsonl.read

/// Read the values of a JSON Lines file after a given line.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct LinesArgs {
    /// The JSON Lines file.
    #[schemars(length(min = 1))]
    path: String,
    /// Skip this many lines first, unparsed: pass a previous read's `total_lines` to read only
    /// what was appended since.
    #[serde(default)]
    after_line: u64,
    /// Return at most this many values; the lines after them are counted, not parsed. No limit
    /// when absent.
    #[schemars(transform = args::not_null)]
    max_lines: Option<u64>,
}

fn lines_output_schema() -> Value {
    let mut schema = object_schema(
        "The values read, and how many lines the file holds.",
        json!({
            "lines": {
                "type": "array",
                "description": "The parsed value of each non-blank line after `after_line`, in file order.",
            },
            "total_lines": {
                "type": "integer",
                "minimum": 0,
                "description": "The lines in the whole file, blank ones included, not counting an unterminated last line that does not parse (a write in progress).",
            },
        }),
        &["lines", "total_lines"],
    );
    schema["examples"] = json!([{ "lines": [{ "type": "user" }], "total_lines": 1 }]);
    schema
}

fn read_lines(with: &Value, ctx: &BuiltinCtx) -> BuiltinResult {
    let args: LinesArgs = parse("jsonl.read", with)?;
    let path = ctx.resolve(&args.path);
    let file =
        Checked::open(&path, ctx.cancel).map_err(|err| io_error("cannot read", &path, &err))?;
    let (lines, total_lines) = scan_lines(
        BufReader::with_capacity(256 * 1024, file),
        &path,
        args.after_line,
        args.max_lines.unwrap_or(u64::MAX),
    )?;
    Ok(json!({ "lines": lines, "total_lines": total_lines }))
}

/// The values of the non-blank lines numbered above `after_line` (at most `max`), and the number
/// of lines in the whole stream. Lines are numbered from 1; a line is terminated by `\n`, and an
/// unterminated last line counts only when it parses.
fn scan_lines(
    mut reader: impl BufRead,
    path: &Path,
    after_line: u64,
    max: u64,
) -> Result<(Vec<Value>, u64), BuiltinError> {
    let mut values = Vec::new();
    let mut total = 0u64;
    let mut line = Vec::new();
    loop {
        line.clear();
        let read = reader
            .read_until(b'\n', &mut line)
            .map_err(|err| io_error("cannot read", path, &err))?;
        if read == 0 {
            break;
        }
        let number = total + 1;
        let terminated = line.last() == Some(&b'\n');
        if !terminated {
            // The last line, possibly half-written: it counts only if it is whole JSON.
            if is_blank(&line) {
                break;
            }
            if let Ok(value) = serde_json::from_slice::<Value>(&line) {
                total = number;
                if number > after_line && (values.len() as u64) < max {
                    values.push(value);
                }
            }
            break;
        }
        total = number;
        if number <= after_line || (values.len() as u64) >= max || is_blank(&line) {
            continue;
        }
        let value = serde_json::from_slice::<Value>(&line).map_err(|err| {
            BuiltinError::new(format!(
                "line {number} of `{}` is not valid JSON: {} at column {}",
                path.display(),
                bare_message(&err),
                err.column()
            ))
        })?;
        values.push(value);
    }
    Ok((values, total))
}

fn is_blank(line: &[u8]) -> bool {
    line.iter().all(u8::is_ascii_whitespace)
}

#[cfg(test)]
mod tests {
    use std::fmt::Write as _;
    use std::fs;
    use std::os::unix::fs::MetadataExt;

    use serde_json::{json, Value};

    use crate::builtins::paths::sha256_hex;
    use crate::builtins::testing::{listing, write, Sandbox};

    #[test]
    fn json_read_parses_returns_null_when_optional_and_names_the_position_of_bad_json() {
        let sandbox = Sandbox::new();
        write(&sandbox.path("a.json"), "{\n  \"k\": [1, 2]\n}\n");
        let out = sandbox.call("json.read", json!({ "path": "a.json" }));
        assert_eq!(out, Ok(json!({ "k": [1, 2] })));
        let out = sandbox.call(
            "json.read",
            json!({ "path": "none.json", "optional": true }),
        );
        assert_eq!(out, Ok(Value::Null));
        let err = sandbox
            .call("json.read", json!({ "path": "none.json" }))
            .expect_err("missing");
        assert!(err.0.contains("none.json"), "{err}");

        write(&sandbox.path("bad.json"), "{\n  \"k\": [1, 2,]\n}\n");
        let err = sandbox
            .call("json.read", json!({ "path": "bad.json" }))
            .expect_err("bad");
        assert!(err.0.contains("bad.json"), "{err}");
        assert!(err.0.contains("line 2, column 14"), "{err}");
    }

    #[test]
    fn json_write_is_pretty_with_a_trailing_newline_and_skips_identical() {
        let sandbox = Sandbox::new();
        let with = json!({ "path": "out/v.json", "value": { "b": 1, "a": [true] } });
        let out = sandbox.call("json.write", with.clone()).expect("write");
        let path = sandbox.path("out/v.json");
        let expected = "{\n  \"b\": 1,\n  \"a\": [\n    true\n  ]\n}\n";
        assert_eq!(fs::read_to_string(&path).expect("read"), expected);
        assert_eq!(out["sha256"], json!(sha256_hex(expected.as_bytes())));
        assert_eq!(out["changed"], json!(true));
        assert_eq!(out["path"], json!(path.display().to_string()));

        let inode = fs::metadata(&path).expect("meta").ino();
        let again = sandbox.call("json.write", with).expect("again");
        assert_eq!(again["changed"], json!(false));
        assert_eq!(fs::metadata(&path).expect("meta").ino(), inode);
        assert_eq!(listing(&sandbox.path("out")), ["v.json"]);
    }

    #[test]
    fn json_write_outside_the_roots_is_refused() {
        let sandbox = Sandbox::new();
        let err = sandbox
            .call("json.write", json!({ "path": "state.json", "value": 1 }))
            .expect_err("outside");
        assert!(err.0.contains("outside the workflow's writes"), "{err}");
        assert!(!sandbox.path("state.json").exists());
    }

    #[test]
    fn jsonl_reads_after_a_line_skipping_blank_lines_but_counting_them() {
        let sandbox = Sandbox::new();
        write(
            &sandbox.path("t.jsonl"),
            "{\"n\":1}\n\n{\"n\":2}\n{\"n\":3}\r\n",
        );
        let all = sandbox.call("jsonl.read", json!({ "path": "t.jsonl" }));
        assert_eq!(
            all,
            Ok(json!({ "lines": [{ "n": 1 }, { "n": 2 }, { "n": 3 }], "total_lines": 4 }))
        );
        let after = sandbox.call("jsonl.read", json!({ "path": "t.jsonl", "after_line": 2 }));
        assert_eq!(
            after,
            Ok(json!({ "lines": [{ "n": 2 }, { "n": 3 }], "total_lines": 4 }))
        );
        let capped = sandbox.call(
            "jsonl.read",
            json!({ "path": "t.jsonl", "after_line": 0, "max_lines": 1 }),
        );
        assert_eq!(
            capped,
            Ok(json!({ "lines": [{ "n": 1 }], "total_lines": 4 }))
        );
        let beyond = sandbox.call("jsonl.read", json!({ "path": "t.jsonl", "after_line": 9 }));
        assert_eq!(beyond, Ok(json!({ "lines": [], "total_lines": 4 })));
    }

    #[test]
    fn jsonl_ignores_a_half_written_last_line_until_it_is_complete() {
        let sandbox = Sandbox::new();
        let path = sandbox.path("t.jsonl");
        write(&path, "{\"n\":1}\n{\"n\":2}\n{\"n\":");
        let out = sandbox.call("jsonl.read", json!({ "path": "t.jsonl" }));
        assert_eq!(
            out,
            Ok(json!({ "lines": [{ "n": 1 }, { "n": 2 }], "total_lines": 2 }))
        );
        // The writer finishes the line; reading on from the count picks it up.
        write(&path, "{\"n\":1}\n{\"n\":2}\n{\"n\":3}");
        let out = sandbox.call("jsonl.read", json!({ "path": "t.jsonl", "after_line": 2 }));
        assert_eq!(out, Ok(json!({ "lines": [{ "n": 3 }], "total_lines": 3 })));
    }

    #[test]
    fn jsonl_names_the_line_of_bad_json_elsewhere() {
        let sandbox = Sandbox::new();
        write(&sandbox.path("t.jsonl"), "{\"n\":1}\n{oops}\n{\"n\":3}\n");
        let err = sandbox
            .call("jsonl.read", json!({ "path": "t.jsonl" }))
            .expect_err("bad line");
        assert!(err.0.starts_with("line 2 of `"), "{err}");
        assert!(err.0.contains("t.jsonl"), "{err}");
        // Skipped lines are not parsed.
        let out = sandbox.call("jsonl.read", json!({ "path": "t.jsonl", "after_line": 2 }));
        assert_eq!(out, Ok(json!({ "lines": [{ "n": 3 }], "total_lines": 3 })));
        // A complete (newline-terminated) last line that does not parse is an error too.
        write(&sandbox.path("u.jsonl"), "{\"n\":1}\n{\"n\":\n");
        let err = sandbox
            .call("jsonl.read", json!({ "path": "u.jsonl" }))
            .expect_err("bad last line");
        assert!(err.0.starts_with("line 2 of"), "{err}");
    }

    #[test]
    fn jsonl_reads_a_large_file_from_a_late_line() {
        let sandbox = Sandbox::new();
        let mut text = String::new();
        for n in 0..200_000 {
            let _ = writeln!(text, "{{\"n\":{n},\"pad\":\"{}\"}}", "x".repeat(40));
        }
        write(&sandbox.path("big.jsonl"), &text);
        let out = sandbox
            .call(
                "jsonl.read",
                json!({ "path": "big.jsonl", "after_line": 199_998 }),
            )
            .expect("read");
        assert_eq!(out["total_lines"], json!(200_000));
        assert_eq!(out["lines"][0]["n"], json!(199_998));
        assert_eq!(out["lines"].as_array().map(Vec::len), Some(2));
    }
}
