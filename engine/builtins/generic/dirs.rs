//! Built-ins: fs.dirs, fs.prune.
//!
//! `fs.dirs` finds folders by name directly under a list of roots, in the order the roots are
//! given: the lookup behind "the one `*-context.proposed/` under any install root". A symbolic
//! link to a folder counts and says so (`link`), so a caller can refuse it or follow it.
//!
//! `fs.prune` removes a folder that holds nothing but (empty) folders, bottom-up, and refuses,
//! naming every leftover, when anything else remains: the tidy end of a tree whose files were all
//! moved out, which must never silently delete a file that was not expected to be there. Links
//! count as leftovers and are never followed.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use globset::GlobBuilder;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{json, Value};
use walkdir::WalkDir;

use crate::builtins::args::{self, parse};
use crate::builtins::io_error;
use crate::builtins::schema::object_schema;
use crate::builtins::{paths, Builtin, BuiltinCtx, BuiltinError, BuiltinResult};

pub(crate) fn builtins() -> Vec<Builtin> {
    vec![
        Builtin {
            name: "fs.dirs",
            description: "The folders directly under each of several roots whose name matches a glob.",
            writes: false,
            with_schema: args::schema::<DirsArgs>,
            with_parse: args::parses::<DirsArgs>,
            output_schema: dirs_output_schema,
            run: dirs,
        },
        Builtin {
            name: "fs.prune",
            description: "Remove a folder that holds only empty folders; refuse, listing them, when files remain.",
            writes: true,
            with_schema: args::schema::<PruneArgs>,
            with_parse: args::parses::<PruneArgs>,
            output_schema: prune_output_schema,
            run: prune,
        },
    ]
}

// ---------------------------------------------------------------------------------------------
// fs.dirs

/// Find folders by name directly under several roots.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct DirsArgs {
    /// The folders to look in, in order; a missing one holds nothing.
    roots: Vec<String>,
    /// A glob matched against each entry's name, e.g. `*-context.proposed` or
    /// `{vite-context,vite-context.proposed}`.
    #[schemars(length(min = 1))]
    pattern: String,
}

fn dirs_output_schema() -> Value {
    let mut schema = json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "description": "Each matching folder: by root in the order given, then by name in byte order.",
        "type": "array",
        "items": {
            "type": "object",
            "description": "One folder.",
            "properties": {
                "root": { "type": "string", "description": "The root it is under, as given." },
                "path": { "type": "string", "description": "The root joined with its name." },
                "name": { "type": "string", "description": "Its name." },
                "link": { "type": "boolean", "description": "True when the entry is a symbolic link to a folder." },
            },
            "required": ["root", "path", "name", "link"],
            "additionalProperties": false,
        },
    });
    schema["examples"] = json!([[{
        "root": "/home/me/.claude/skills",
        "path": "/home/me/.claude/skills/vite-context.proposed",
        "name": "vite-context.proposed",
        "link": false,
    }]]);
    schema
}

fn dirs(with: &Value, ctx: &BuiltinCtx) -> BuiltinResult {
    let args: DirsArgs = parse("fs.dirs", with)?;
    let matcher = GlobBuilder::new(&args.pattern)
        .literal_separator(true)
        .build()
        .map_err(|err| {
            BuiltinError::new(format!("invalid glob `{}`: {}", args.pattern, err.kind()))
        })?
        .compile_matcher();
    let mut found = Vec::new();
    for root in &args.roots {
        if root.is_empty() {
            continue;
        }
        let resolved = ctx.resolve(root);
        let listing = match fs::read_dir(&resolved) {
            Ok(listing) => listing,
            Err(err)
                if matches!(
                    err.kind(),
                    io::ErrorKind::NotFound | io::ErrorKind::NotADirectory
                ) =>
            {
                continue
            }
            Err(err) => return Err(io_error("cannot list", &resolved, &err)),
        };
        let mut here = Vec::new();
        for entry in listing {
            let entry = entry.map_err(|err| io_error("cannot list", &resolved, &err))?;
            let Some(name) = entry.file_name().to_str().map(str::to_string) else {
                continue;
            };
            if !matcher.is_match(&name) {
                continue;
            }
            let link = entry
                .file_type()
                .map_err(|err| io_error("cannot inspect", &entry.path(), &err))?
                .is_symlink();
            // A link counts when it leads to a folder; a dangling one does not.
            if !entry.path().is_dir() {
                continue;
            }
            here.push((name, link));
        }
        here.sort();
        for (name, link) in here {
            let path = Path::new(root).join(&name);
            found.push(json!({
                "root": root,
                "path": path.to_string_lossy(),
                "name": name,
                "link": link,
            }));
        }
    }
    Ok(Value::Array(found))
}

// ---------------------------------------------------------------------------------------------
// fs.prune

/// Remove a folder holding only empty folders, inside the workflow's writes.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct PruneArgs {
    /// The folder to remove; a missing one is already pruned.
    #[schemars(length(min = 1))]
    path: String,
}

fn prune_output_schema() -> Value {
    let mut schema = object_schema(
        "What was removed.",
        json!({
            "path": { "type": "string", "description": "The folder." },
            "removed": { "type": "boolean", "description": "False when it did not exist." },
            "folders": { "type": "integer", "description": "How many folders were removed, itself included." },
        }),
        &["path", "removed", "folders"],
    );
    schema["examples"] = json!([{ "path": "/project/out/staged", "removed": true, "folders": 3 }]);
    schema
}

fn prune(with: &Value, ctx: &BuiltinCtx) -> BuiltinResult {
    let args: PruneArgs = parse("fs.prune", with)?;
    let path = ctx.writes.check(&ctx.resolve(&args.path))?;
    match fs::symlink_metadata(&path) {
        Err(err) if err.kind() == io::ErrorKind::NotFound => {
            return Ok(
                json!({ "path": path.display().to_string(), "removed": false, "folders": 0 }),
            )
        }
        Err(err) => return Err(io_error("cannot prune", &path, &err)),
        Ok(meta) if !meta.is_dir() => {
            return Err(BuiltinError::new(format!(
                "cannot prune `{}`: it is not a folder",
                path.display()
            )))
        }
        Ok(_) => {}
    }
    // Look first, remove after: a leftover anywhere means nothing is removed.
    let mut folders: Vec<PathBuf> = Vec::new();
    let mut leftovers = Vec::new();
    for entry in WalkDir::new(&path).follow_links(false).contents_first(true) {
        let entry = entry.map_err(|err| {
            let at = err.path().unwrap_or(&path).to_path_buf();
            match err.into_io_error() {
                Some(io) => io_error("cannot prune", &at, &io),
                None => BuiltinError::new(format!("cannot prune `{}`", at.display())),
            }
        })?;
        if entry.file_type().is_dir() {
            folders.push(entry.path().to_path_buf());
        } else {
            let relative = entry.path().strip_prefix(&path).unwrap_or(entry.path());
            leftovers.push(relative.display().to_string());
        }
    }
    if !leftovers.is_empty() {
        leftovers.sort();
        return Err(BuiltinError::new(format!(
            "`{}` still holds {} file(s), so it was left in place: {}",
            path.display(),
            leftovers.len(),
            leftovers.join(", ")
        )));
    }
    // `contents_first`: every folder comes after what it holds.
    for folder in &folders {
        fs::remove_dir(folder).map_err(|err| io_error("cannot remove", folder, &err))?;
    }
    if let Some(parent) = path.parent() {
        paths::sync_dir(parent);
    }
    Ok(json!({ "path": path.display().to_string(), "removed": true, "folders": folders.len() }))
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::symlink;

    use super::*;
    use crate::builtins::testing::{write, Sandbox};

    #[test]
    fn dirs_lists_matching_folders_by_root_then_name() {
        let sandbox = Sandbox::new();
        fs::create_dir_all(sandbox.path("a/b-context.proposed")).unwrap();
        fs::create_dir_all(sandbox.path("a/a-context.proposed")).unwrap();
        fs::create_dir_all(sandbox.path("a/a-context")).unwrap();
        write(&sandbox.path("a/file-context.proposed"), "not a folder");
        fs::create_dir_all(sandbox.path("c/z-context.proposed")).unwrap();
        symlink(
            sandbox.path("c/z-context.proposed"),
            sandbox.path("c/y-context.proposed"),
        )
        .unwrap();
        let out = sandbox
            .call(
                "fs.dirs",
                json!({ "roots": ["c", "missing", "a"], "pattern": "*-context.proposed" }),
            )
            .expect("dirs");
        let names: Vec<&str> = out
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["name"].as_str().unwrap())
            .collect();
        assert_eq!(
            names,
            [
                "y-context.proposed",
                "z-context.proposed",
                "a-context.proposed",
                "b-context.proposed"
            ]
        );
        assert_eq!(out[0]["link"], true);
        assert_eq!(out[2]["path"], "a/a-context.proposed");
    }

    #[test]
    fn prune_removes_empty_folders_and_refuses_leftovers() {
        let sandbox = Sandbox::new();
        fs::create_dir_all(sandbox.path("out/t/a/b")).unwrap();
        fs::create_dir_all(sandbox.path("out/t/c")).unwrap();
        let out = sandbox
            .call("fs.prune", json!({ "path": "out/t" }))
            .expect("prune");
        assert_eq!(out["folders"], 4);
        assert!(!sandbox.path("out/t").exists());
        let again = sandbox
            .call("fs.prune", json!({ "path": "out/t" }))
            .expect("again");
        assert_eq!(again["removed"], false);

        fs::create_dir_all(sandbox.path("out/u/empty")).unwrap();
        write(&sandbox.path("out/u/x/left.md"), "left");
        symlink(sandbox.outside.clone(), sandbox.path("out/u/link")).unwrap();
        let err = sandbox
            .call("fs.prune", json!({ "path": "out/u" }))
            .expect_err("leftovers");
        assert!(
            err.0.contains("2 file(s)") && err.0.contains("link, x/left.md"),
            "{err}"
        );
        assert!(sandbox.path("out/u/empty").is_dir(), "nothing removed");
        assert!(sandbox.outside.exists());
        let err = sandbox
            .call("fs.prune", json!({ "path": "elsewhere" }))
            .expect_err("outside");
        assert!(err.0.contains("outside the workflow's writes"), "{err}");
    }
}
