//! Built-ins: json.read, json.write, jsonl.read.
//!
//! Files are read through a buffered reader, never slurped: a JSON Lines transcript can run to
//! tens of megabytes and is read again and again from a remembered line onwards. A JSON Lines
//! file may be appended to while it is read, so an unterminated last line that does not parse is
//! taken for a write in progress: it is neither returned nor counted, and the next read picks it
//! up once it is complete.

use std::fs::File;
use std::io::{self, BufRead, BufReader};
use std::path::Path;

use serde::Deserialize;
use serde_json::{json, Value};

use super::fs::{
    io_error, object_schema, optional_property, parse_with, path_property, value_schema,
    write_output, write_output_schema,
};
use super::paths;
use super::{Builtin, BuiltinCtx, BuiltinError, BuiltinResult};

pub(crate) fn builtins() -> Vec<Builtin> {
    vec![
        Builtin {
            name: "json.read",
            description: "Read and parse a JSON file.",
            writes: false,
            with_schema: read_with_schema,
            output_schema: read_output_schema,
            run: read,
        },
        Builtin {
            name: "json.write",
            description:
                "Write a value as pretty JSON, atomically; identical content is not rewritten.",
            writes: true,
            with_schema: write_with_schema,
            output_schema: write_output_schema,
            run: write,
        },
        Builtin {
            name: "jsonl.read",
            description: "Read the values of a JSON Lines file after a given line.",
            writes: false,
            with_schema: lines_with_schema,
            output_schema: lines_output_schema,
            run: read_lines,
        },
    ]
}

// ---------------------------------------------------------------------------------------------
// json.read

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ReadArgs {
    path: String,
    #[serde(default)]
    optional: bool,
}

fn read_with_schema() -> Value {
    object_schema(
        "Read and parse a JSON file.",
        json!({
            "path": path_property("The JSON file; relative paths resolve against the run's working directory."),
            "optional": optional_property(),
        }),
        &["path"],
    )
}

fn read_output_schema() -> Value {
    value_schema(json!({
        "description": "The parsed value, or null when the file is missing and `optional` is true.",
        "examples": [{}],
    }))
}

fn read(with: &Value, ctx: &BuiltinCtx) -> BuiltinResult {
    let args: ReadArgs = parse_with("json.read", with)?;
    let path = ctx.resolve(&args.path);
    let file = match File::open(&path) {
        Ok(file) => file,
        Err(err) if err.kind() == io::ErrorKind::NotFound && args.optional => {
            return Ok(Value::Null)
        }
        Err(err) => return Err(io_error("cannot read", &path, &err)),
    };
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

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WriteArgs {
    path: String,
    value: Value,
}

fn write_with_schema() -> Value {
    object_schema(
        "Write a value as JSON (2-space indent, trailing newline), atomically, inside the workflow's writes.",
        json!({
            "path": path_property("The file to write; missing parent folders are created."),
            "value": { "description": "Any JSON value." },
        }),
        &["path", "value"],
    )
}

fn write(with: &Value, ctx: &BuiltinCtx) -> BuiltinResult {
    let args: WriteArgs = parse_with("json.write", with)?;
    let path = ctx.writes.check(&ctx.resolve(&args.path))?;
    let text = pretty(&args.value)?;
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

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LinesArgs {
    path: String,
    #[serde(default)]
    after_line: u64,
    #[serde(default)]
    max_lines: Option<u64>,
}

fn lines_with_schema() -> Value {
    object_schema(
        "Read the values of a JSON Lines file after a given line.",
        json!({
            "path": path_property("The JSON Lines file."),
            "after_line": {
                "type": "integer",
                "minimum": 0,
                "default": 0,
                "description": "Skip this many lines first, unparsed: pass a previous read's `total_lines` to read only what was appended since.",
            },
            "max_lines": {
                "type": "integer",
                "minimum": 0,
                "description": "Return at most this many values; the lines after them are counted, not parsed. No limit when absent.",
            },
        }),
        &["path"],
    )
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
    let args: LinesArgs = parse_with("jsonl.read", with)?;
    let path = ctx.resolve(&args.path);
    let file = File::open(&path).map_err(|err| io_error("cannot read", &path, &err))?;
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
