//! Built-ins that remove or move something strictly inside a named folder: fs.remove_within and
//! fs.move_within, for clean-ups of caches and stores that must never reach anything else.
//!
//! On top of the workflow's write roots, every path given must lie strictly below `root` (never
//! `root` itself), lexically and once the root's own links are resolved, and no component below
//! the root may be a symbolic link: neither the path acted on nor any folder on the way to it.
//! A path that breaks a rule fails the stage before anything is touched.

use std::fs;
use std::io;
use std::path::{Component, PathBuf};

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::builtins::args::{self, parse};
use crate::builtins::io_error;
use crate::builtins::paths::lexical_absolute;
use crate::builtins::schema::value_schema;
use crate::builtins::{Builtin, BuiltinCtx, BuiltinError, BuiltinResult};

pub(crate) fn builtins() -> Vec<Builtin> {
    vec![
        Builtin {
            name: "fs.remove_within",
            description: "Remove a file or folder strictly inside a root, through no symbolic link.",
            writes: true,
            with_schema: args::schema::<RemoveArgs>,
            with_parse: args::parses::<RemoveArgs>,
            output_schema,
            run: remove,
        },
        Builtin {
            name: "fs.move_within",
            description: "Move a file or folder to another place strictly inside the same root, through no symbolic link.",
            writes: true,
            with_schema: args::schema::<MoveArgs>,
            with_parse: args::parses::<MoveArgs>,
            output_schema,
            run: move_,
        },
    ]
}

/// Remove something strictly inside a root.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct RemoveArgs {
    /// The folder that bounds the removal; it is never removed itself.
    #[schemars(length(min = 1))]
    root: String,
    /// What to remove (relative paths resolve against the run's working directory); missing:
    /// nothing to do.
    #[schemars(length(min = 1))]
    path: String,
}

/// Move something to another place strictly inside the same root.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct MoveArgs {
    /// The folder that bounds the move.
    #[schemars(length(min = 1))]
    root: String,
    /// What to move.
    #[schemars(length(min = 1))]
    from: String,
    /// Where it goes; it must not exist yet. Missing parent folders are created.
    #[schemars(length(min = 1))]
    to: String,
}

fn output_schema() -> Value {
    value_schema(json!({
        "description": "The path acted upon, and whether anything was there.",
        "type": "object",
        "properties": {
            "path": { "type": "string", "description": "The absolute path removed, or moved to." },
            "done": { "type": "boolean", "description": "False when there was nothing at the path." },
        },
        "required": ["path", "done"],
        "additionalProperties": false,
        "examples": [{ "path": "/cache/old", "done": true }],
    }))
}

/// `path` checked against the rules: the real path to act on.
fn inside(ctx: &BuiltinCtx, root: &str, path: &str, action: &str) -> Result<PathBuf, BuiltinError> {
    let fail = |why: String| BuiltinError::new(format!("{action} `{path}`: {why}"));
    let root_given = lexical_absolute(&ctx.resolve(root));
    let root_real = fs::canonicalize(&root_given)
        .map_err(|err| io_error("cannot resolve", &root_given, &err))?;
    let target = lexical_absolute(&ctx.resolve(path));
    let below = target
        .strip_prefix(&root_given)
        .or_else(|_| target.strip_prefix(&root_real))
        .map_err(|_| fail(format!("not inside `{}`", root_given.display())))?;
    if below.as_os_str().is_empty() {
        return Err(fail(format!("that is `{}` itself", root_given.display())));
    }
    let mut at = root_real.clone();
    for component in below.components() {
        let Component::Normal(name) = component else {
            return Err(fail("not a plain path below the root".into()));
        };
        at.push(name);
        match fs::symlink_metadata(&at) {
            Ok(meta) if meta.file_type().is_symlink() => {
                return Err(fail(format!("`{}` is a symbolic link", at.display())))
            }
            _ => {}
        }
    }
    ctx.writes.check(&at)
}

fn remove(with: &Value, ctx: &BuiltinCtx) -> BuiltinResult {
    let args: RemoveArgs = parse("fs.remove_within", with)?;
    let path = inside(ctx, &args.root, &args.path, "cannot remove")?;
    let done = match fs::symlink_metadata(&path) {
        Err(err) if err.kind() == io::ErrorKind::NotFound => false,
        Err(err) => return Err(io_error("cannot remove", &path, &err)),
        Ok(meta) => {
            let removed = if meta.is_dir() {
                fs::remove_dir_all(&path)
            } else {
                fs::remove_file(&path)
            };
            removed.map_err(|err| io_error("cannot remove", &path, &err))?;
            true
        }
    };
    Ok(json!({ "path": path.display().to_string(), "done": done }))
}

fn move_(with: &Value, ctx: &BuiltinCtx) -> BuiltinResult {
    let args: MoveArgs = parse("fs.move_within", with)?;
    let from = inside(ctx, &args.root, &args.from, "cannot move")?;
    let to = inside(ctx, &args.root, &args.to, "cannot move to")?;
    if fs::symlink_metadata(&from).is_err() {
        return Ok(json!({ "path": to.display().to_string(), "done": false }));
    }
    if fs::symlink_metadata(&to).is_ok() {
        return Err(BuiltinError::new(format!(
            "cannot move to `{}`: it already exists",
            to.display()
        )));
    }
    if let Some(parent) = to.parent() {
        fs::create_dir_all(parent).map_err(|err| io_error("cannot create", parent, &err))?;
    }
    fs::rename(&from, &to).map_err(|err| io_error("cannot move", &from, &err))?;
    Ok(json!({ "path": to.display().to_string(), "done": true }))
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::builtins::WriteRoots;

    fn call(name: &str, base: &Path, with: Value) -> BuiltinResult {
        let builtin = crate::builtins::lookup(name).expect("registered");
        let writes = WriteRoots::new(base, &["cache".to_string()]);
        (builtin.run)(&with, &BuiltinCtx::for_test(base, &writes))
    }

    #[test]
    fn only_strictly_inside_and_through_no_link() {
        let dir = tempfile::tempdir().expect("temp");
        let base = fs::canonicalize(dir.path()).expect("canonical");
        fs::create_dir_all(base.join("cache/a/old")).expect("dirs");
        fs::create_dir_all(base.join("elsewhere/keep")).expect("dirs");
        std::os::unix::fs::symlink(base.join("elsewhere"), base.join("cache/link")).expect("link");
        let err = call(
            "fs.remove_within",
            &base,
            json!({ "root": "cache", "path": "cache" }),
        )
        .unwrap_err();
        assert!(err.0.contains("itself"), "{err}");
        let err = call(
            "fs.remove_within",
            &base,
            json!({ "root": "cache", "path": "cache/../elsewhere" }),
        )
        .unwrap_err();
        assert!(err.0.contains("not inside"), "{err}");
        let err = call(
            "fs.remove_within",
            &base,
            json!({ "root": "cache", "path": "cache/link/keep" }),
        )
        .unwrap_err();
        assert!(err.0.contains("symbolic link"), "{err}");
        let err = call(
            "fs.remove_within",
            &base,
            json!({ "root": "cache", "path": "cache/link" }),
        )
        .unwrap_err();
        assert!(err.0.contains("symbolic link"), "{err}");
        assert!(base.join("elsewhere/keep").exists());
        let out = call(
            "fs.move_within",
            &base,
            json!({ "root": "cache", "from": "cache/a/old", "to": "cache/b/old" }),
        )
        .expect("move");
        assert_eq!(out["done"], true);
        let out = call(
            "fs.remove_within",
            &base,
            json!({ "root": "cache", "path": "cache/b/old" }),
        )
        .expect("remove");
        assert_eq!(out["done"], true);
        assert!(!base.join("cache/b/old").exists() && base.join("cache").exists());
    }
}
