//! Built-ins: tree.verify, tree.promote.
//!
//! A promotion manifest describes how a staged tree (`from`) changes a live tree (`to`): one entry
//! per file, its path relative to both roots, its status (`added`, `modified`, `removed`,
//! `unchanged`) and hex prefixes of the SHA-256 of the live file when the proposal was staged
//! (`sha_before`) and of the staged file (`sha_after`), null where there is no such file.
//!
//! `tree.verify` reads both trees and says, per entry, whether its promotion is still to do
//! (`pending`), already done (`done`), nothing to do (`unchanged`) or unsafe because the live
//! file changed after staging (`stale`). `tree.promote` verifies the same way, refuses when any
//! entry is stale, and then promotes entry by entry: a staged file is renamed over its live path
//! (atomic on one filesystem), a removed file is deleted. Both are resume-safe by construction: an
//! entry whose staged file is gone and whose live file already holds `sha_after` is done, so a
//! promotion cut short anywhere is finished by running it again.
//!
//! A manifest cannot reach outside the two roots: every path must be relative, made only of plain
//! components (no `..`, no `.`, no empty ones), listed once, and no existing component below
//! either root may be a symbolic link (the roots themselves may be). Any such entry fails the
//! action before it touches the disk. So does a staged file that no longer matches `sha_after`.
//!
//! With `journal`, `tree.promote` appends one JSON line per entry it is about to act on, opened,
//! written and closed before the entry is touched (a write-ahead record), so a promotion that was
//! killed says which entry it was working on.

use std::fs::{self, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use crate::builtins::args::{self, parse};
use crate::builtins::paths::{self, hex};
use crate::builtins::schema::object_schema;
use crate::builtins::{io_error, Builtin, BuiltinCtx, BuiltinError, BuiltinResult, Cancel};

pub(crate) fn builtins() -> Vec<Builtin> {
    vec![
        Builtin {
            name: "tree.verify",
            description: "Check a promotion manifest against a staged and a live tree: what is still to do, done, or stale.",
            writes: false,
            with_schema: args::schema::<VerifyArgs>,
            with_parse: args::parses::<VerifyArgs>,
            output_schema: verify_output_schema,
            run: verify,
        },
        Builtin {
            name: "tree.promote",
            description: "Promote a staged tree into a live one by its manifest: atomic renames, resume-safe.",
            writes: true,
            with_schema: args::schema::<PromoteArgs>,
            with_parse: args::parses::<PromoteArgs>,
            output_schema: promote_output_schema,
            run: promote,
        },
    ]
}

/// How the staged tree changes this file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
#[schemars(transform = args::enum_only)]
enum Status {
    Added,
    Modified,
    Removed,
    Unchanged,
}

impl Status {
    fn as_str(self) -> &'static str {
        match self {
            Status::Added => "added",
            Status::Modified => "modified",
            Status::Removed => "removed",
            Status::Unchanged => "unchanged",
        }
    }
}

/// One manifest entry; other keys an entry may carry are ignored (the schema leaves it open).
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[schemars(description = "One file of the tree.")]
struct Entry {
    /// Relative to both roots, `/`-separated; no `..`, `.` or empty component.
    path: String,
    /// How the staged tree changes this file.
    status: Status,
    /// Hex prefix of the SHA-256 of the live file when staged; null when there was none (added).
    #[schemars(regex(pattern = r"^[0-9a-f]{7,64}$"))]
    sha_before: Option<String>,
    /// Hex prefix of the SHA-256 of the staged file; null when there is none (removed).
    #[schemars(regex(pattern = r"^[0-9a-f]{7,64}$"))]
    sha_after: Option<String>,
}

/// Check a promotion manifest against a staged and a live tree.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct VerifyArgs {
    /// The staged tree's root.
    #[schemars(length(min = 1))]
    from: String,
    /// The live tree's root; it may not exist yet.
    #[schemars(length(min = 1))]
    to: String,
    /// The manifest's entries, in the order they are promoted.
    entries: Vec<Entry>,
}

/// Promote a staged tree into a live one by its manifest, inside the workflow's writes.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct PromoteArgs {
    /// The staged tree's root; promoted files leave it.
    #[schemars(length(min = 1))]
    from: String,
    /// The live tree's root; created when missing.
    #[schemars(length(min = 1))]
    to: String,
    /// The manifest's entries, in the order they are promoted.
    entries: Vec<Entry>,
    /// A file to append one JSON line to before each entry is acted on ({ path, status, action });
    /// inside the writes.
    #[schemars(length(min = 1))]
    journal: Option<String>,
}

/// Where one entry stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Pending,
    Done,
    Unchanged,
    Stale,
}

impl State {
    fn as_str(self) -> &'static str {
        match self {
            State::Pending => "pending",
            State::Done => "done",
            State::Unchanged => "unchanged",
            State::Stale => "stale",
        }
    }
}

/// An entry checked against both trees.
#[derive(Debug)]
struct Checked {
    entry: Entry,
    state: State,
    /// The live file's full SHA-256, None when it is absent.
    live: Option<String>,
    staged: PathBuf,
    target: PathBuf,
}

// ---------------------------------------------------------------------------------------------
// Schemas.

fn counts_property() -> Value {
    json!({
        "type": "object",
        "description": "How many entries the manifest has of each status.",
        "properties": {
            "added": { "type": "integer", "description": "Entries `added`." },
            "modified": { "type": "integer", "description": "Entries `modified`." },
            "removed": { "type": "integer", "description": "Entries `removed`." },
            "unchanged": { "type": "integer", "description": "Entries `unchanged`." },
        },
        "required": ["added", "modified", "removed", "unchanged"],
        "additionalProperties": false,
    })
}

fn verify_output_schema() -> Value {
    let mut schema = object_schema(
        "Where each entry stands.",
        json!({
            "counts": counts_property(),
            "entries": {
                "type": "array",
                "description": "Each entry, in manifest order.",
                "items": {
                    "type": "object",
                    "description": "One entry.",
                    "properties": {
                        "path": { "type": "string", "description": "The entry's path." },
                        "status": { "type": "string", "description": "Its manifest status." },
                        "state": { "enum": ["pending", "done", "unchanged", "stale"], "description": "pending: still to promote; done: already promoted; unchanged: nothing to do; stale: the live file changed after staging." },
                        "live": { "type": ["string", "null"], "description": "The live file's SHA-256, 7-character prefix; null when absent." },
                        "expected": { "type": "string", "description": "What the live file was allowed to be, in words." },
                    },
                    "required": ["path", "status", "state", "live", "expected"],
                    "additionalProperties": false,
                },
            },
            "stale": {
                "type": "array",
                "description": "The entries whose live file changed after staging, as in `entries`.",
                "items": { "type": "object", "description": "One stale entry." },
            },
            "pending": { "type": "integer", "description": "How many entries are still to promote." },
        }),
        &["counts", "entries", "stale", "pending"],
    );
    schema["examples"] = json!([{
        "counts": { "added": 1, "modified": 1, "removed": 0, "unchanged": 0 },
        "entries": [{ "path": "references/a.md", "status": "added", "state": "pending", "live": null, "expected": "absent, or sha_after 1a2b3c4" }],
        "stale": [],
        "pending": 1,
    }]);
    schema
}

fn promote_output_schema() -> Value {
    let mut schema = object_schema(
        "What the promotion did.",
        json!({
            "counts": counts_property(),
            "moved": { "type": "array", "items": { "type": "string" }, "description": "Paths renamed from the staged tree over the live one." },
            "deleted": { "type": "array", "items": { "type": "string" }, "description": "Live paths deleted (removed entries)." },
            "skipped": { "type": "array", "items": { "type": "string" }, "description": "Paths already promoted by an earlier pass." },
        }),
        &["counts", "moved", "deleted", "skipped"],
    );
    schema["examples"] = json!([{
        "counts": { "added": 1, "modified": 1, "removed": 0, "unchanged": 0 },
        "moved": ["references/a.md", "SKILL.md"],
        "deleted": [],
        "skipped": [],
    }]);
    schema
}

// ---------------------------------------------------------------------------------------------
// Checking.

/// The path's components, when it is a plain relative path.
fn plain_components(path: &str) -> Option<Vec<&str>> {
    if path.is_empty() || path.starts_with('/') || path.contains('\0') {
        return None;
    }
    let parts: Vec<&str> = path.split('/').collect();
    if parts
        .iter()
        .any(|part| part.is_empty() || *part == "." || *part == "..")
    {
        return None;
    }
    Some(parts)
}

/// Refuse a symbolic link at any existing component of `root/parts...` below `root`, and a
/// non-folder in the middle. Returns whether the full path exists (as a non-link).
fn no_links_below(root: &Path, parts: &[&str], entry: &str) -> Result<bool, BuiltinError> {
    let mut at = root.to_path_buf();
    for (index, part) in parts.iter().enumerate() {
        at.push(part);
        match fs::symlink_metadata(&at) {
            Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(false),
            Err(err) => return Err(io_error("cannot inspect", &at, &err)),
            Ok(meta) if meta.file_type().is_symlink() => {
                return Err(BuiltinError::new(format!(
                    "manifest entry `{entry}` goes through a symbolic link, `{}`; a promotion never follows links",
                    at.display()
                )))
            }
            Ok(meta) => {
                let last = index + 1 == parts.len();
                if !last && !meta.is_dir() {
                    return Err(BuiltinError::new(format!(
                        "manifest entry `{entry}`: `{}` is not a folder",
                        at.display()
                    )));
                }
                if last && !meta.is_file() {
                    return Err(BuiltinError::new(format!(
                        "manifest entry `{entry}`: `{}` is not a regular file",
                        at.display()
                    )));
                }
            }
        }
    }
    Ok(true)
}

fn file_sha256(path: &Path, cancel: Cancel) -> Result<String, BuiltinError> {
    let mut file = crate::builtins::Checked::open(path, cancel)
        .map_err(|err| io_error("cannot hash", path, &err))?;
    let mut hasher = Sha256::new();
    io::copy(&mut file, &mut hasher).map_err(|err| io_error("cannot hash", path, &err))?;
    Ok(hex(&hasher.finalize()))
}

fn matches(full: &Option<String>, prefix: &Option<String>) -> bool {
    match (full, prefix) {
        (Some(full), Some(prefix)) => full.starts_with(prefix.as_str()),
        _ => false,
    }
}

fn short(hash: &Option<String>) -> String {
    match hash {
        Some(hash) => hash.chars().take(7).collect(),
        None => "absent".to_string(),
    }
}

fn require_hash(entry: &Entry, which: &str, value: &Option<String>) -> Result<(), BuiltinError> {
    match value {
        Some(hash) if hash.len() >= 7 && hash.bytes().all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()) => Ok(()),
        Some(hash) => Err(BuiltinError::new(format!(
            "manifest entry `{}`: `{which}` `{hash}` is not a hex SHA-256 prefix of at least 7 characters",
            entry.path
        ))),
        None => Err(BuiltinError::new(format!(
            "manifest entry `{}` is {} but has no `{which}`",
            entry.path,
            entry.status.as_str()
        ))),
    }
}

/// The root of a tree, which must be a folder (a link to one is fine) or, for the live tree,
/// may be missing.
fn tree_root(ctx: &BuiltinCtx, path: &str, may_be_missing: bool) -> Result<PathBuf, BuiltinError> {
    let root = ctx.resolve(path);
    match fs::metadata(&root) {
        Ok(meta) if meta.is_dir() => Ok(root),
        Ok(_) => Err(BuiltinError::new(format!(
            "`{}` is not a folder",
            root.display()
        ))),
        Err(err) if err.kind() == io::ErrorKind::NotFound && may_be_missing => Ok(root),
        Err(err) => Err(io_error("cannot open", &root, &err)),
    }
}

/// Check every entry against both trees; an unsafe or broken manifest is an error.
fn check_all(
    from: &Path,
    to: &Path,
    entries: &[Entry],
    cancel: Cancel,
) -> Result<Vec<Checked>, BuiltinError> {
    let mut seen = std::collections::HashSet::new();
    // Every path first, so a hostile manifest is refused before any file is read.
    for entry in entries {
        if plain_components(&entry.path).is_none() {
            return Err(BuiltinError::new(format!(
                "manifest entry `{}` is not a plain relative path inside the tree (absolute paths, `..`, `.` and empty components are refused)",
                entry.path
            )));
        }
        if !seen.insert(entry.path.as_str()) {
            return Err(BuiltinError::new(format!(
                "manifest entry `{}` is listed twice",
                entry.path
            )));
        }
        match entry.status {
            Status::Added => require_hash(entry, "sha_after", &entry.sha_after)?,
            Status::Modified => {
                require_hash(entry, "sha_before", &entry.sha_before)?;
                require_hash(entry, "sha_after", &entry.sha_after)?;
            }
            Status::Removed => require_hash(entry, "sha_before", &entry.sha_before)?,
            Status::Unchanged => {}
        }
    }
    let mut links_checked = Vec::with_capacity(entries.len());
    for entry in entries {
        let parts = plain_components(&entry.path).unwrap_or_default();
        let staged_exists = no_links_below(from, &parts, &entry.path)?;
        let live_exists = no_links_below(to, &parts, &entry.path)?;
        links_checked.push((staged_exists, live_exists));
    }
    let mut checked = Vec::with_capacity(entries.len());
    for (entry, (staged_exists, live_exists)) in entries.iter().zip(links_checked) {
        let staged = from.join(&entry.path);
        let target = to.join(&entry.path);
        let live = if live_exists && entry.status != Status::Unchanged {
            Some(file_sha256(&target, cancel)?)
        } else {
            None
        };
        let state = match entry.status {
            Status::Unchanged => State::Unchanged,
            Status::Removed => {
                if live.is_none() {
                    State::Done
                } else if matches(&live, &entry.sha_before) {
                    State::Pending
                } else {
                    State::Stale
                }
            }
            Status::Added | Status::Modified => {
                let live_ok = if entry.status == Status::Added {
                    live.is_none() || matches(&live, &entry.sha_after)
                } else {
                    matches(&live, &entry.sha_before) || matches(&live, &entry.sha_after)
                };
                if staged_exists {
                    let sha = Some(file_sha256(&staged, cancel)?);
                    if !matches(&sha, &entry.sha_after) {
                        return Err(BuiltinError::new(format!(
                            "staged file `{}` no longer matches the manifest (sha_after {}, found {}); restage the proposal",
                            entry.path,
                            short(&entry.sha_after),
                            short(&sha)
                        )));
                    }
                    if live_ok {
                        State::Pending
                    } else {
                        State::Stale
                    }
                } else if matches(&live, &entry.sha_after) {
                    State::Done
                } else {
                    return Err(BuiltinError::new(format!(
                        "staged file `{}` is missing from `{}` and the live file does not hold it; the proposal is incomplete",
                        entry.path,
                        from.display()
                    )));
                }
            }
        };
        checked.push(Checked {
            entry: entry.clone(),
            state,
            live,
            staged,
            target,
        });
    }
    Ok(checked)
}

fn expected(entry: &Entry) -> String {
    let before = short(&entry.sha_before);
    let after = short(&entry.sha_after);
    match entry.status {
        Status::Added => format!("absent, or sha_after {after}"),
        Status::Modified => format!("sha_before {before} or sha_after {after}"),
        Status::Removed => format!("absent, or sha_before {before}"),
        Status::Unchanged => "anything".to_string(),
    }
}

fn counts(entries: &[Entry]) -> Value {
    let count = |status: Status| entries.iter().filter(|e| e.status == status).count();
    json!({
        "added": count(Status::Added),
        "modified": count(Status::Modified),
        "removed": count(Status::Removed),
        "unchanged": count(Status::Unchanged),
    })
}

fn describe(checked: &Checked) -> Value {
    json!({
        "path": checked.entry.path,
        "status": checked.entry.status.as_str(),
        "state": checked.state.as_str(),
        "live": checked.live.as_ref().map(|hash| hash[..7].to_string()),
        "expected": expected(&checked.entry),
    })
}

fn verify(with: &Value, ctx: &BuiltinCtx) -> BuiltinResult {
    let args: VerifyArgs = parse("tree.verify", with)?;
    let from = tree_root(ctx, &args.from, false)?;
    let to = tree_root(ctx, &args.to, true)?;
    let checked = check_all(&from, &to, &args.entries, ctx.cancel)?;
    let entries: Vec<Value> = checked.iter().map(describe).collect();
    let stale: Vec<Value> = checked
        .iter()
        .filter(|c| c.state == State::Stale)
        .map(describe)
        .collect();
    let pending = checked.iter().filter(|c| c.state == State::Pending).count();
    Ok(json!({
        "counts": counts(&args.entries),
        "entries": entries,
        "stale": stale,
        "pending": pending,
    }))
}

// ---------------------------------------------------------------------------------------------
// Promoting.

/// Append one record to the journal: opened, written and closed before the entry is touched.
/// A link at the journal's path is refused, not followed.
fn journal_record(journal: &Path, entry: &Entry, action: &str) -> Result<(), BuiltinError> {
    if let Some(parent) = journal.parent() {
        fs::create_dir_all(parent).map_err(|err| io_error("cannot create", parent, &err))?;
    }
    let mut file = OpenOptions::new()
        .append(true)
        .create(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(journal)
        .map_err(|err| io_error("cannot open the journal", journal, &err))?;
    let line = json!({ "path": entry.path, "status": entry.status.as_str(), "action": action });
    file.write_all(format!("{line}\n").as_bytes())
        .map_err(|err| io_error("cannot write the journal", journal, &err))?;
    // Not synced: the record is for a process that was killed (the kernel keeps what it was
    // written), and the promotion itself does not depend on it.
    Ok(())
}

fn promote(with: &Value, ctx: &BuiltinCtx) -> BuiltinResult {
    let args: PromoteArgs = parse("tree.promote", with)?;
    let from = tree_root(ctx, &args.from, false)?;
    let to = tree_root(ctx, &args.to, true)?;
    let checked = check_all(&from, &to, &args.entries, ctx.cancel)?;
    if let Some(stale) = checked.iter().find(|c| c.state == State::Stale) {
        return Err(BuiltinError::new(format!(
            "live file `{}` changed since the proposal was staged (live {}, expected {}); nothing was promoted",
            stale.entry.path,
            short(&stale.live),
            expected(&stale.entry)
        )));
    }
    // Every target is checked against the write roots before the first one is touched.
    let journal = match &args.journal {
        Some(path) => Some(ctx.writes.check(&ctx.resolve(path))?),
        None => None,
    };
    let to = ctx.writes.check(&to)?;
    let mut plan = Vec::new();
    for item in checked.iter().filter(|c| c.state == State::Pending) {
        let target = ctx.writes.check(&item.target)?;
        let staged = match item.entry.status {
            Status::Removed => None,
            _ => Some(ctx.writes.check(&item.staged)?),
        };
        plan.push((item, staged, target));
    }

    fs::create_dir_all(&to).map_err(|err| io_error("cannot create", &to, &err))?;
    let mut moved = Vec::new();
    let mut deleted = Vec::new();
    // Each folder a rename or a removal changed, synced once at the end rather than after every
    // entry: an entry is resume-safe whichever of its states a crash leaves, so only the whole
    // promotion needs to be durable before the steps that follow it (the audit trail) run.
    let mut touched = std::collections::BTreeSet::new();
    for (item, staged, target) in plan {
        let entry = &item.entry;
        match staged {
            Some(staged) => {
                if let Some(journal) = &journal {
                    journal_record(journal, entry, "move")?;
                }
                let (parent, _) = paths::split_parent(&target)
                    .map_err(|err| io_error("cannot promote", &target, &err))?;
                fs::create_dir_all(parent)
                    .map_err(|err| io_error("cannot create", parent, &err))?;
                fs::rename(&staged, &target).map_err(|err| {
                    if err.raw_os_error() == Some(libc::EXDEV) {
                        BuiltinError::new(format!(
                            "cannot promote `{}`: the staged and the live tree are on different filesystems, so the rename cannot be atomic",
                            entry.path
                        ))
                    } else {
                        io_error("cannot promote", &staged, &err)
                    }
                })?;
                touched.insert(parent.to_path_buf());
                if let Some(from) = staged.parent() {
                    touched.insert(from.to_path_buf());
                }
                moved.push(entry.path.clone());
            }
            None => {
                if let Some(journal) = &journal {
                    journal_record(journal, entry, "remove")?;
                }
                match fs::remove_file(&target) {
                    Ok(()) => {}
                    Err(err) if err.kind() == io::ErrorKind::NotFound => {}
                    Err(err) => return Err(io_error("cannot remove", &target, &err)),
                }
                if let Some(parent) = target.parent() {
                    touched.insert(parent.to_path_buf());
                }
                deleted.push(entry.path.clone());
            }
        }
    }
    for folder in &touched {
        paths::sync_dir(folder);
        if let Some(parent) = folder.parent() {
            paths::sync_dir(parent);
        }
    }
    let skipped: Vec<&str> = checked
        .iter()
        .filter(|c| c.state == State::Done)
        .map(|c| c.entry.path.as_str())
        .collect();
    Ok(json!({
        "counts": counts(&args.entries),
        "moved": moved,
        "deleted": deleted,
        "skipped": skipped,
    }))
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::symlink;

    use serde_json::json;

    use super::*;
    use crate::builtins::paths::sha256_hex;
    use crate::builtins::testing::{write, Sandbox};

    fn h(text: &str) -> String {
        sha256_hex(text.as_bytes())[..7].to_string()
    }

    /// out/live with a.md ("old a") and gone.md; out/staged with a.md ("new a") and b/new.md.
    fn trees(sandbox: &Sandbox) -> Value {
        write(&sandbox.path("out/live/a.md"), "old a");
        write(&sandbox.path("out/live/gone.md"), "gone");
        write(&sandbox.path("out/live/same.md"), "same");
        write(&sandbox.path("out/staged/a.md"), "new a");
        write(&sandbox.path("out/staged/b/new.md"), "new");
        json!([
            { "path": "a.md", "status": "modified", "sha_before": h("old a"), "sha_after": h("new a") },
            { "path": "b/new.md", "status": "added", "sha_before": null, "sha_after": h("new") },
            { "path": "gone.md", "status": "removed", "sha_before": h("gone"), "sha_after": null },
            { "path": "same.md", "status": "unchanged", "sha_before": h("same"), "sha_after": h("same") },
        ])
    }

    fn with(entries: &Value) -> Value {
        json!({ "from": "out/staged", "to": "out/live", "entries": entries })
    }

    #[test]
    fn verify_then_promote_then_promote_again() {
        let sandbox = Sandbox::new();
        let entries = trees(&sandbox);
        let report = sandbox.call("tree.verify", with(&entries)).expect("verify");
        assert_eq!(report["pending"], 3);
        assert_eq!(report["stale"], json!([]));
        assert_eq!(report["counts"]["unchanged"], 1);
        let done = sandbox
            .call("tree.promote", with(&entries))
            .expect("promote");
        assert_eq!(done["moved"], json!(["a.md", "b/new.md"]));
        assert_eq!(done["deleted"], json!(["gone.md"]));
        assert_eq!(
            fs::read_to_string(sandbox.path("out/live/a.md")).unwrap(),
            "new a"
        );
        assert_eq!(
            fs::read_to_string(sandbox.path("out/live/b/new.md")).unwrap(),
            "new"
        );
        assert!(!sandbox.path("out/live/gone.md").exists());
        assert!(!sandbox.path("out/staged/a.md").exists());
        // A second pass finds everything done and changes nothing.
        let again = sandbox.call("tree.promote", with(&entries)).expect("again");
        assert_eq!(again["moved"], json!([]));
        assert_eq!(again["skipped"], json!(["a.md", "b/new.md", "gone.md"]));
        let report = sandbox.call("tree.verify", with(&entries)).expect("verify");
        assert_eq!(report["pending"], 0);
    }

    #[test]
    fn a_live_file_changed_after_staging_is_stale_and_nothing_moves() {
        let sandbox = Sandbox::new();
        let entries = trees(&sandbox);
        write(&sandbox.path("out/live/gone.md"), "edited by hand");
        let report = sandbox.call("tree.verify", with(&entries)).expect("verify");
        assert_eq!(report["stale"][0]["path"], "gone.md");
        let err = sandbox
            .call("tree.promote", with(&entries))
            .expect_err("stale");
        assert!(err.0.contains("`gone.md` changed since"), "{err}");
        assert_eq!(
            fs::read_to_string(sandbox.path("out/live/a.md")).unwrap(),
            "old a"
        );
        assert!(sandbox.path("out/staged/a.md").exists());
    }

    #[test]
    fn hostile_paths_and_links_are_refused_before_anything_is_read() {
        let sandbox = Sandbox::new();
        let good = trees(&sandbox);
        for path in [
            "../escape.md",
            "/etc/passwd",
            "a/../../x",
            "./a.md",
            "a//b",
            "",
        ] {
            let mut entries = good.clone();
            entries[0]["path"] = json!(path);
            let err = sandbox
                .call("tree.promote", with(&entries))
                .expect_err(path);
            assert!(err.0.contains("not a plain relative path"), "{path}: {err}");
        }
        fs::create_dir_all(sandbox.outside.join("refs")).unwrap();
        write(&sandbox.outside.join("refs/x.md"), "x");
        symlink(
            sandbox.outside.join("refs"),
            sandbox.path("out/staged/refs"),
        )
        .unwrap();
        let mut entries = good.clone();
        entries.as_array_mut().unwrap().push(
            json!({ "path": "refs/x.md", "status": "added", "sha_before": null, "sha_after": h("x") }),
        );
        let err = sandbox
            .call("tree.promote", with(&entries))
            .expect_err("link");
        assert!(err.0.contains("symbolic link"), "{err}");
        assert_eq!(
            fs::read_to_string(sandbox.path("out/live/a.md")).unwrap(),
            "old a"
        );
        let mut twice = good.clone();
        twice.as_array_mut().unwrap().push(good[0].clone());
        let err = sandbox
            .call("tree.verify", with(&twice))
            .expect_err("twice");
        assert!(err.0.contains("listed twice"), "{err}");
    }

    #[test]
    fn writes_outside_the_roots_are_refused_before_the_first_rename() {
        let sandbox = Sandbox::with_roots(&["out/staged"]);
        let entries = trees(&sandbox);
        let err = sandbox
            .call("tree.promote", with(&entries))
            .expect_err("outside");
        assert!(err.0.contains("outside the workflow's writes"), "{err}");
        assert!(sandbox.path("out/staged/a.md").exists());
    }

    #[test]
    fn a_tampered_staged_file_or_a_missing_one_is_an_error() {
        let sandbox = Sandbox::new();
        let entries = trees(&sandbox);
        write(&sandbox.path("out/staged/a.md"), "tampered");
        let err = sandbox
            .call("tree.verify", with(&entries))
            .expect_err("tampered");
        assert!(err.0.contains("no longer matches"), "{err}");
        fs::remove_file(sandbox.path("out/staged/a.md")).unwrap();
        let err = sandbox
            .call("tree.verify", with(&entries))
            .expect_err("missing");
        assert!(err.0.contains("is missing"), "{err}");
    }

    #[test]
    fn the_journal_records_each_action_before_it_happens() {
        let sandbox = Sandbox::new();
        let entries = trees(&sandbox);
        let mut args = with(&entries);
        args["journal"] = json!("out/live/.review/journal.jsonl");
        sandbox.call("tree.promote", args).expect("promote");
        let journal = fs::read_to_string(sandbox.path("out/live/.review/journal.jsonl")).unwrap();
        let lines: Vec<Value> = journal
            .lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect();
        assert_eq!(lines.len(), 3);
        assert_eq!(
            lines[0],
            json!({ "path": "a.md", "status": "modified", "action": "move" })
        );
        assert_eq!(lines[2]["action"], "remove");
    }

    #[test]
    fn a_first_promotion_creates_the_live_root() {
        let sandbox = Sandbox::new();
        write(&sandbox.path("out/staged/SKILL.md"), "nav");
        let entries = json!([{ "path": "SKILL.md", "status": "added", "sha_before": null, "sha_after": h("nav") }]);
        sandbox
            .call("tree.promote", with(&entries))
            .expect("promote");
        assert_eq!(
            fs::read_to_string(sandbox.path("out/live/SKILL.md")).unwrap(),
            "nav"
        );
    }
}
