//! Built-ins over whole folders: fs.digest (one content digest of the files a glob selects) and
//! fs.compare (a file-by-file comparison of a folder with a sparse overlay of it).
//!
//! Neither follows a symbolic link found inside a folder, and neither writes. Content hashes are
//! SHA-256 of a file's bytes, lowercase hex.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io;
use std::path::Path;

use globset::{GlobBuilder, GlobMatcher};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use walkdir::WalkDir;

use crate::builtins::args::{self, parse};
use crate::builtins::io_error;
use crate::builtins::paths::hex;
use crate::builtins::schema::value_schema;
use crate::builtins::{Builtin, BuiltinCtx, BuiltinError, BuiltinResult, Cancel, Checked};

pub(crate) fn builtins() -> Vec<Builtin> {
    vec![
        Builtin {
            name: "fs.digest",
            description: "One SHA-256 over the relative paths and content hashes of the files a glob selects under a folder.",
            writes: false,
            with_schema: args::schema::<DigestArgs>,
            with_parse: args::parses::<DigestArgs>,
            output_schema: digest_output_schema,
            run: digest,
        },
        Builtin {
            name: "fs.compare",
            description: "Compare a folder with a sparse overlay of it, file by file: added, modified, removed, unchanged.",
            writes: false,
            with_schema: args::schema::<CompareArgs>,
            with_parse: args::parses::<CompareArgs>,
            output_schema: compare_output_schema,
            run: compare,
        },
    ]
}

fn matcher(pattern: &str) -> Result<GlobMatcher, BuiltinError> {
    GlobBuilder::new(pattern)
        .literal_separator(true)
        .build()
        .map(|glob| glob.compile_matcher())
        .map_err(|err| BuiltinError::new(format!("invalid glob `{pattern}`: {}", err.kind())))
}

/// The regular files under `root` (symbolic links are neither followed nor listed), keyed by
/// their relative path with `/` separators. A missing root holds nothing.
fn files(
    root: &Path,
    doing: &str,
    cancel: Cancel,
) -> Result<BTreeMap<String, std::path::PathBuf>, BuiltinError> {
    let mut found = BTreeMap::new();
    match fs::symlink_metadata(root) {
        Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(found),
        Err(err) => return Err(io_error(doing, root, &err)),
        Ok(_) => {}
    }
    for entry in WalkDir::new(root).min_depth(1).follow_links(false) {
        cancel.check()?;
        let entry = entry.map_err(|err| {
            let path = err.path().unwrap_or(root).to_path_buf();
            match err.into_io_error() {
                Some(io) => io_error(doing, &path, &io),
                None => BuiltinError::new(format!("{doing} `{}`: a folder loop", path.display())),
            }
        })?;
        if !entry.file_type().is_file() {
            continue;
        }
        let relative = entry
            .path()
            .strip_prefix(root)
            .ok()
            .and_then(Path::to_str)
            .ok_or_else(|| {
                BuiltinError::new(format!("path `{}` is not UTF-8", entry.path().display()))
            })?
            .to_string();
        found.insert(relative, entry.path().to_path_buf());
    }
    Ok(found)
}

fn file_sha256(path: &Path, doing: &str, cancel: Cancel) -> Result<String, BuiltinError> {
    let mut hasher = Sha256::new();
    let mut file = Checked::open(path, cancel).map_err(|err| io_error(doing, path, &err))?;
    io::copy(&mut file, &mut hasher).map_err(|err| io_error(doing, path, &err))?;
    Ok(hex(&hasher.finalize()))
}

// ---------------------------------------------------------------------------------------------
// fs.digest

/// A content digest of the files under a folder.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct DigestArgs {
    /// The folder; a symbolic link named here is followed, none below it is.
    #[schemars(length(min = 1))]
    root: String,
    /// A glob over paths relative to `root` (`/` separators; `*` stays within a folder, `**`
    /// crosses folders).
    #[serde(default = "default_digest_pattern")]
    #[schemars(length(min = 1))]
    pattern: String,
    /// When true, a missing folder gives null instead of an error.
    #[serde(default)]
    optional: bool,
}

fn default_digest_pattern() -> String {
    "**/*.md".to_string()
}

fn digest_output_schema() -> Value {
    value_schema(json!({
        "description": "The digest, or null for a missing folder when `optional` is true.",
        "type": ["object", "null"],
        "properties": {
            "sha256": {
                "type": "string",
                "pattern": "^[0-9a-f]{64}$",
                "description": "SHA-256 of the lines `<relative-path>:<sha256 of the file>\\n`, one per selected file, sorted by their bytes (as `LC_ALL=C sort` does).",
            },
            "files": {
                "type": "array",
                "description": "The selected files in that order.",
                "items": {
                    "type": "object",
                    "properties": {
                        "path": { "type": "string", "description": "Relative to `root`, `/` separators." },
                        "sha256": { "type": "string", "description": "SHA-256 of the file's bytes." },
                    },
                    "required": ["path", "sha256"],
                    "additionalProperties": false,
                },
            },
        },
        "required": ["sha256", "files"],
        "additionalProperties": false,
        "examples": [{ "sha256": "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855", "files": [] }],
    }))
}

fn digest(with: &Value, ctx: &BuiltinCtx) -> BuiltinResult {
    let args: DigestArgs = parse("fs.digest", with)?;
    let root = ctx.resolve(&args.root);
    let single = match fs::metadata(&root) {
        Ok(meta) if meta.is_dir() => None,
        Ok(meta) if meta.is_file() => root
            .file_name()
            .and_then(|name| name.to_str())
            .map(str::to_string),
        Ok(_) => {
            return Err(BuiltinError::new(format!(
                "cannot digest `{}`: neither a file nor a folder",
                root.display()
            )))
        }
        Err(err) if err.kind() == io::ErrorKind::NotFound && args.optional => {
            return Ok(Value::Null)
        }
        Err(err) => return Err(io_error("cannot digest", &root, &err)),
    };
    let select = matcher(&args.pattern)?;
    let mut lines = Vec::new();
    // A single file named directly is digested under its own name, whatever the pattern.
    let whole = single.is_some();
    let selected = match single {
        Some(name) => BTreeMap::from([(name, root.clone())]),
        None => files(&root, "cannot digest", ctx.cancel)?,
    };
    for (relative, path) in selected {
        if whole || select.is_match(&relative) {
            let sha = file_sha256(&path, "cannot digest", ctx.cancel)?;
            lines.push((format!("{relative}:{sha}\n"), relative, sha));
        }
    }
    lines.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
    let mut hasher = Sha256::new();
    for (line, _, _) in &lines {
        hasher.update(line.as_bytes());
    }
    let files: Vec<Value> = lines
        .into_iter()
        .map(|(_, path, sha256)| json!({ "path": path, "sha256": sha256 }))
        .collect();
    Ok(json!({ "sha256": hex(&hasher.finalize()), "files": files }))
}

// ---------------------------------------------------------------------------------------------
// fs.compare

/// Compare a folder with a sparse overlay of it.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct CompareArgs {
    /// The base folder (missing: empty); a symbolic link named here is followed.
    #[schemars(length(min = 1))]
    before: String,
    /// The overlay: the files it holds replace or add to the base's (missing: empty).
    #[schemars(length(min = 1))]
    after: String,
    /// Relative paths of base files the overlay removes.
    #[serde(default)]
    removed: Vec<String>,
    /// Globs over relative paths left out of the comparison on both sides, e.g. `.review/**`.
    #[serde(default)]
    exclude: Vec<String>,
}

fn compare_output_schema() -> Value {
    let sha = json!({ "type": ["string", "null"], "pattern": "^[0-9a-f]{64}$" });
    let mut before = sha.clone();
    before["description"] = json!("SHA-256 of the base file; null when added.");
    let mut after = sha;
    after["description"] = json!("SHA-256 of the file after the overlay; null when removed.");
    value_schema(json!({
        "description": "Every file of the base and the overlay, in byte order of its path.",
        "type": "object",
        "properties": {
            "entries": {
                "type": "array",
                "description": "One entry per file.",
                "items": {
                    "type": "object",
                    "properties": {
                        "path": { "type": "string", "description": "Relative path, `/` separators." },
                        "status": { "enum": ["added", "modified", "removed", "unchanged"], "description": "What the overlay does to the file." },
                        "sha_before": before,
                        "sha_after": after,
                    },
                    "required": ["path", "status", "sha_before", "sha_after"],
                    "additionalProperties": false,
                },
            },
            "changed": { "type": "integer", "description": "How many entries are not `unchanged`." },
        },
        "required": ["entries", "changed"],
        "additionalProperties": false,
        "examples": [{ "entries": [], "changed": 0 }],
    }))
}

fn compare(with: &Value, ctx: &BuiltinCtx) -> BuiltinResult {
    let args: CompareArgs = parse("fs.compare", with)?;
    let excluded = args
        .exclude
        .iter()
        .map(|pattern| matcher(pattern))
        .collect::<Result<Vec<_>, _>>()?;
    let keep = |relative: &str| !excluded.iter().any(|glob| glob.is_match(relative));
    let before = files(&ctx.resolve(&args.before), "cannot compare", ctx.cancel)?;
    let after = files(&ctx.resolve(&args.after), "cannot compare", ctx.cancel)?;
    let removed: BTreeSet<&str> = args.removed.iter().map(String::as_str).collect();
    let paths: BTreeSet<&String> = before.keys().chain(after.keys()).collect();
    let mut entries = Vec::new();
    let mut changed = 0;
    for relative in paths {
        if !keep(relative) {
            continue;
        }
        let old = match before.get(relative) {
            Some(path) => Some(file_sha256(path, "cannot compare", ctx.cancel)?),
            None => None,
        };
        let new = if removed.contains(relative.as_str()) {
            None
        } else {
            match after.get(relative) {
                Some(path) => Some(file_sha256(path, "cannot compare", ctx.cancel)?),
                None => old.clone(),
            }
        };
        let status = match (&old, &new) {
            (None, None) => continue,
            (None, Some(_)) => "added",
            (Some(_), None) => "removed",
            (Some(a), Some(b)) if a == b => "unchanged",
            _ => "modified",
        };
        if status != "unchanged" {
            changed += 1;
        }
        entries.push(
            json!({ "path": relative, "status": status, "sha_before": old, "sha_after": new }),
        );
    }
    Ok(json!({ "entries": entries, "changed": changed }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::builtins::WriteRoots;

    fn call(name: &str, cwd: &Path, with: Value) -> BuiltinResult {
        let builtin = crate::builtins::lookup(name).expect("registered");
        let writes = WriteRoots::default();
        let output = (builtin.run)(&with, &BuiltinCtx::for_test(cwd, &writes))?;
        let validator = jsonschema::validator_for(&(builtin.output_schema)()).expect("schema");
        assert!(validator.is_valid(&output), "{output}");
        Ok(output)
    }

    fn write(root: &Path, relative: &str, text: &str) {
        let path = root.join(relative);
        fs::create_dir_all(path.parent().expect("parent")).expect("dirs");
        fs::write(path, text).expect("write");
    }

    fn sha(text: &str) -> String {
        hex(&Sha256::digest(text.as_bytes()))
    }

    #[test]
    fn digest_is_the_sorted_lines_of_path_and_hash() {
        let dir = tempfile::tempdir().expect("temp");
        write(dir.path(), "docs/b.md", "b\n");
        write(dir.path(), "a.md", "a\n");
        write(dir.path(), "a.txt", "not selected\n");
        std::os::unix::fs::symlink(dir.path().join("a.md"), dir.path().join("link.md"))
            .expect("link");
        let out = call("fs.digest", dir.path(), json!({ "root": "." })).expect("digest");
        let lines = format!("a.md:{}\ndocs/b.md:{}\n", sha("a\n"), sha("b\n"));
        assert_eq!(out["sha256"], sha(&lines));
        assert_eq!(out["files"].as_array().map(Vec::len), Some(2));
        write(dir.path(), "docs/c.md", "c\n");
        let grown = call("fs.digest", dir.path(), json!({ "root": "." })).expect("digest");
        assert_ne!(grown["sha256"], out["sha256"]);
        assert_eq!(
            call(
                "fs.digest",
                dir.path(),
                json!({ "root": "gone", "optional": true })
            ),
            Ok(Value::Null)
        );
        assert!(call("fs.digest", dir.path(), json!({ "root": "gone" })).is_err());
    }

    #[test]
    fn compare_lists_every_file_with_its_status() {
        let dir = tempfile::tempdir().expect("temp");
        write(dir.path(), "live/same.md", "same");
        write(dir.path(), "live/edit.md", "old");
        write(dir.path(), "live/drop.md", "drop");
        write(dir.path(), "live/.review/x", "x");
        write(dir.path(), "next/edit.md", "new");
        write(dir.path(), "next/new.md", "new");
        write(dir.path(), "next/.review/manifest.json", "{}");
        let out = call(
            "fs.compare",
            dir.path(),
            json!({ "before": "live", "after": "next", "removed": ["drop.md"], "exclude": [".review/**"] }),
        )
        .expect("compare");
        let statuses: Vec<(String, String)> = out["entries"]
            .as_array()
            .expect("entries")
            .iter()
            .map(|e| {
                (
                    e["path"].as_str().unwrap_or("").to_string(),
                    e["status"].as_str().unwrap_or("").to_string(),
                )
            })
            .collect();
        assert_eq!(
            statuses,
            [
                ("drop.md".to_string(), "removed".to_string()),
                ("edit.md".to_string(), "modified".to_string()),
                ("new.md".to_string(), "added".to_string()),
                ("same.md".to_string(), "unchanged".to_string()),
            ]
        );
        assert_eq!(out["changed"], 3);
        assert_eq!(out["entries"][0]["sha_after"], Value::Null);
        assert_eq!(out["entries"][2]["sha_before"], Value::Null);
        assert_eq!(
            out["entries"][3]["sha_before"],
            out["entries"][3]["sha_after"]
        );
    }
}
