//! Built-ins: fs.read, fs.exists, fs.glob, fs.hash, fs.write, fs.copy, fs.move, fs.remove.
//!
//! None of them follows a symbolic link found inside a folder: a copy copies the link, a remove
//! removes the link, a glob or a folder hash does not descend through it. Every writing action
//! checks its target against the workflow's write roots before it touches the disk, then operates
//! on the path the check returned.
//!
//! This module also holds the helpers the other file built-ins share: i/o error wording and
//! output schema building.

use std::fs::{self, File};
use std::io::{self, Read};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use globset::GlobBuilder;
use schemars::JsonSchema;
use serde::{Deserialize, Deserializer};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use walkdir::WalkDir;

use crate::builtins::args::{self, parse};
use crate::builtins::paths;
use crate::builtins::schema::{object_schema, value_schema, write_output, write_output_schema};
use crate::builtins::{
    io_error, too_large, Builtin, BuiltinCtx, BuiltinError, BuiltinResult, Cancel, Checked,
};

pub(crate) fn builtins() -> Vec<Builtin> {
    vec![
        Builtin {
            name: "fs.read",
            description: "Read a UTF-8 text file.",
            writes: false,
            with_schema: args::schema::<ReadArgs>,
            with_parse: args::parses::<ReadArgs>,
            output_schema: read_output_schema,
            run: read,
        },
        Builtin {
            name: "fs.exists",
            description: "Whether a file or folder exists.",
            writes: false,
            with_schema: args::schema::<ExistsArgs>,
            with_parse: args::parses::<ExistsArgs>,
            output_schema: exists_output_schema,
            run: exists,
        },
        Builtin {
            name: "fs.writable",
            description: "Whether each path could be written now (inside the workflow's writes once links are resolved, no folder in the way), without writing: the preconditions of a publication that must write all or nothing.",
            writes: false,
            with_schema: args::schema::<WritableArgs>,
            with_parse: args::parses::<WritableArgs>,
            output_schema: writable_output_schema,
            run: writable,
        },
        Builtin {
            name: "fs.glob",
            description: "The files under a folder that match a glob pattern, sorted.",
            writes: false,
            with_schema: args::schema::<GlobArgs>,
            with_parse: args::parses::<GlobArgs>,
            output_schema: glob_output_schema,
            run: glob,
        },
        Builtin {
            name: "fs.hash",
            description: "SHA-256 of a file, or of a whole folder.",
            writes: false,
            with_schema: args::schema::<HashArgs>,
            with_parse: args::parses::<HashArgs>,
            output_schema: hash_output_schema,
            run: hash,
        },
        Builtin {
            name: "fs.write",
            description: "Write a text file atomically; identical content is not rewritten.",
            writes: true,
            with_schema: args::schema::<WriteArgs>,
            with_parse: args::parses::<WriteArgs>,
            output_schema: write_output_schema,
            run: write,
        },
        Builtin {
            name: "fs.copy",
            description: "Copy a file, a symbolic link or a whole folder, never following links.",
            writes: true,
            with_schema: args::schema::<CopyArgs>,
            with_parse: args::parses::<CopyArgs>,
            output_schema: path_output_schema,
            run: copy,
        },
        Builtin {
            name: "fs.move",
            description: "Move a file, a symbolic link or a whole folder.",
            writes: true,
            with_schema: args::schema::<MoveArgs>,
            with_parse: args::parses::<MoveArgs>,
            output_schema: path_output_schema,
            run: move_,
        },
        Builtin {
            name: "fs.remove",
            description: "Remove a file, a symbolic link (not its target) or a whole folder.",
            writes: true,
            with_schema: args::schema::<RemoveArgs>,
            with_parse: args::parses::<RemoveArgs>,
            output_schema: path_output_schema,
            run: remove,
        },
    ]
}

fn path_output(path: &Path) -> Value {
    json!({ "path": path.display().to_string() })
}

fn path_output_schema() -> Value {
    let mut schema = object_schema(
        "The path acted upon.",
        json!({ "path": { "type": "string", "description": "The absolute path acted upon." } }),
        &["path"],
    );
    schema["examples"] = json!([{ "path": "/project/out/notes.md" }]);
    schema
}

// ---------------------------------------------------------------------------------------------
// fs.read

/// Read a UTF-8 text file.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct ReadArgs {
    /// The file to read; relative paths resolve against the run's working directory.
    #[schemars(length(min = 1))]
    path: String,
    /// When true, a missing file gives null instead of an error.
    #[serde(default)]
    optional: bool,
}

fn read_output_schema() -> Value {
    value_schema(json!({
        "description": "The file's text, or null when it is missing and `optional` is true.",
        "type": ["string", "null"],
        "examples": ["# Notes\n"],
    }))
}

fn read(with: &Value, ctx: &BuiltinCtx) -> BuiltinResult {
    let args: ReadArgs = parse("fs.read", with)?;
    let path = ctx.resolve(&args.path);
    match read_bounded(&path, ctx) {
        Ok(bytes) => String::from_utf8(bytes)
            .map(Value::String)
            .map_err(|e| BuiltinError::new(crate::floor::text::not_utf8(&path, e.utf8_error()))),
        Err(Some(err)) if err.kind() == io::ErrorKind::NotFound && args.optional => Ok(Value::Null),
        Err(Some(err)) => Err(io_error("cannot read", &path, &err)),
        Err(None) => Err(too_large(&path, ctx.max_output)),
    }
}

/// A file's bytes, read no further than one byte past the stage's output limit (`Err(None)`
/// past it) and stopping on an interrupt or at the stage's deadline: a 1 GiB file, or
/// `/dev/zero`, costs no more memory than the limit.
pub(super) fn read_bounded(path: &Path, ctx: &BuiltinCtx) -> Result<Vec<u8>, Option<io::Error>> {
    let mut reader = Checked::open(path, ctx.cancel).map_err(Some)?;
    let known = reader.inner.metadata().map_or(0, |meta| meta.len());
    if known > ctx.max_output {
        return Err(None);
    }
    let mut bytes = Vec::with_capacity(known.min(ctx.max_output) as usize);
    match crate::floor::process::read_capped(&mut reader, ctx.max_output, &mut bytes) {
        Ok(false) => Ok(bytes),
        Ok(true) => Err(None),
        Err(error) => Err(Some(error)),
    }
}

// ---------------------------------------------------------------------------------------------
// fs.exists

/// Whether a file or folder exists.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct ExistsArgs {
    /// The path to test; a symbolic link counts when its target exists.
    #[schemars(length(min = 1))]
    path: String,
}

fn exists_output_schema() -> Value {
    value_schema(json!({
        "description": "True when something exists at the path.",
        "type": "boolean",
        "examples": [true],
    }))
}

fn exists(with: &Value, ctx: &BuiltinCtx) -> BuiltinResult {
    let args: ExistsArgs = parse("fs.exists", with)?;
    let path = ctx.resolve(&args.path);
    path.try_exists()
        .map(Value::Bool)
        .map_err(|err| io_error("cannot test", &path, &err))
}

// ---------------------------------------------------------------------------------------------
// fs.writable

/// The paths a later stage will write.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct WritableArgs {
    /// Files to be written; each is checked as fs.write would check it, nothing is written.
    paths: Vec<String>,
}

fn writable_output_schema() -> Value {
    let mut schema = object_schema(
        "Whether every path could be written now, and why not.",
        json!({
            "ok": { "type": "boolean", "description": "True when every path could be written." },
            "problems": {
                "type": "array",
                "items": { "type": "string" },
                "description": "One lowercase fragment per path that could not be written, in the order given.",
            },
        }),
        &["ok", "problems"],
    );
    schema["examples"] = json!([{ "ok": false, "problems": ["path `docs/solutions/a/x.md` resolves to `/elsewhere/x.md`, outside the workflow's writes (`/repo/docs/solutions`)"] }]);
    schema
}

fn writable(with: &Value, ctx: &BuiltinCtx) -> BuiltinResult {
    let args: WritableArgs = parse("fs.writable", with)?;
    let mut problems = Vec::new();
    for given in &args.paths {
        let path = ctx.resolve(given);
        let target = match ctx.writes.check(&path) {
            Ok(target) => target,
            Err(err) => {
                problems.push(err.0);
                continue;
            }
        };
        if target.is_dir() {
            problems.push(format!("`{given}` is a folder, not a file"));
            continue;
        }
        // The nearest folder that exists must be a folder: a file in the way cannot hold one.
        let mut above = target.parent();
        while let Some(folder) = above {
            if folder.exists() {
                if !folder.is_dir() {
                    problems.push(format!(
                        "`{given}` cannot be created: `{}` is a file, not a folder",
                        folder.display()
                    ));
                }
                break;
            }
            above = folder.parent();
        }
    }
    Ok(json!({ "ok": problems.is_empty(), "problems": problems }))
}

// ---------------------------------------------------------------------------------------------
// fs.glob

/// The files under a folder that match a glob pattern.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct GlobArgs {
    /// The folder to search; a missing folder matches nothing.
    #[schemars(length(min = 1))]
    root: String,
    /// A glob matched against paths relative to `root`, with `/` separators: `*` stays within
    /// one folder, `**` crosses folders, e.g. `**/*.md`.
    #[schemars(length(min = 1))]
    pattern: String,
    /// List symbolic links that match (true, the default), or leave them out, so that what is
    /// listed can be read without following a link (false).
    #[serde(default = "yes")]
    links: bool,
}

fn yes() -> bool {
    true
}

fn glob_output_schema() -> Value {
    value_schema(json!({
        "description": "The matching files and symbolic links (not folders), each as `root` joined with its relative path, in byte order. Symbolic links to folders are not descended into.",
        "type": "array",
        "items": { "type": "string" },
        "examples": [["docs/a.md", "docs/guide/b.md"]],
    }))
}

fn glob(with: &Value, ctx: &BuiltinCtx) -> BuiltinResult {
    let args: GlobArgs = parse("fs.glob", with)?;
    let root = ctx.resolve(&args.root);
    let matcher = GlobBuilder::new(&args.pattern)
        .literal_separator(true)
        .build()
        .map_err(|err| {
            BuiltinError::new(format!("invalid glob `{}`: {}", args.pattern, err.kind()))
        })?
        .compile_matcher();
    match fs::symlink_metadata(&root) {
        Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(json!([])),
        Err(err) => return Err(io_error("cannot search", &root, &err)),
        Ok(_) => {}
    }
    let mut found = Vec::new();
    for entry in WalkDir::new(&root).min_depth(1).follow_links(false) {
        ctx.cancel.check()?;
        let entry = entry.map_err(|err| walk_error("cannot search", &root, err))?;
        if entry.file_type().is_dir() || (!args.links && entry.path_is_symlink()) {
            continue;
        }
        let relative = relative_to(entry.path(), &root)?;
        if matcher.is_match(relative) {
            let joined = Path::new(&args.root).join(relative);
            let text = joined.to_str().ok_or_else(|| {
                BuiltinError::new(format!("path `{}` is not UTF-8", joined.display()))
            })?;
            found.push(text.to_string());
        }
    }
    found.sort();
    Ok(json!(found))
}

fn relative_to<'a>(path: &'a Path, root: &Path) -> Result<&'a Path, BuiltinError> {
    path.strip_prefix(root).map_err(|_| {
        BuiltinError::new(format!(
            "`{}` is not under `{}`",
            path.display(),
            root.display()
        ))
    })
}

fn walk_error(doing: &str, root: &Path, err: walkdir::Error) -> BuiltinError {
    let path = err.path().unwrap_or(root).to_path_buf();
    match err.into_io_error() {
        Some(io) => io_error(doing, &path, &io),
        None => BuiltinError::new(format!("{doing} `{}`: a folder loop", path.display())),
    }
}

// ---------------------------------------------------------------------------------------------
// fs.hash

/// SHA-256 of a file, or of a whole folder.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct HashArgs {
    /// The file or folder to hash; a symbolic link named here is followed.
    #[schemars(length(min = 1))]
    path: String,
}

fn hash_output_schema() -> Value {
    value_schema(json!({
        "description": "SHA-256, lowercase hex: of a file's bytes, or of a folder's encoding (relative paths, kinds and contents of everything below it, in byte order of the relative paths).",
        "type": "string",
        "pattern": "^[0-9a-f]{64}$",
        "examples": ["e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"],
    }))
}

fn hash(with: &Value, ctx: &BuiltinCtx) -> BuiltinResult {
    let args: HashArgs = parse("fs.hash", with)?;
    let path = ctx.resolve(&args.path);
    let meta = fs::metadata(&path).map_err(|err| io_error("cannot hash", &path, &err))?;
    let digest = if meta.is_dir() {
        hash_folder(&path, ctx.cancel)?
    } else {
        let mut hasher = Sha256::new();
        let mut file =
            Checked::open(&path, ctx.cancel).map_err(|err| io_error("cannot hash", &path, &err))?;
        io::copy(&mut file, &mut hasher).map_err(|err| io_error("cannot hash", &path, &err))?;
        paths::hex(&hasher.finalize())
    };
    Ok(Value::String(digest))
}

/// The SHA-256 of a folder, lowercase hex, over this encoding: for every file and symbolic link
/// below the folder, in byte order of its relative path (components joined by `/`), one record
///
/// ```text
/// kind  relative-path  NUL  length  NUL  bytes
/// ```
///
/// where `kind` is the byte `f` for a regular file (`bytes` are its contents) or `l` for a
/// symbolic link (`bytes` are its target as stored, never followed), and `length` is the decimal
/// ASCII length of `bytes`. Folders appear only through the paths of what they hold, so an empty
/// folder adds nothing. A path cannot hold NUL and the length bounds the bytes, so two different
/// trees never share an encoding. Another file type (a socket, a device) is an error.
fn hash_folder(root: &Path, cancel: Cancel) -> Result<String, BuiltinError> {
    enum Kind {
        File(u64),
        Link(Vec<u8>),
    }
    let mut entries = Vec::new();
    for entry in WalkDir::new(root).min_depth(1).follow_links(false) {
        cancel.check()?;
        let entry = entry.map_err(|err| walk_error("cannot hash", root, err))?;
        let kind = entry.file_type();
        if kind.is_dir() {
            continue;
        }
        let relative = relative_to(entry.path(), root)?
            .as_os_str()
            .as_bytes()
            .to_vec();
        let kind = if kind.is_symlink() {
            let target = fs::read_link(entry.path())
                .map_err(|err| io_error("cannot hash", entry.path(), &err))?;
            Kind::Link(target.as_os_str().as_bytes().to_vec())
        } else if kind.is_file() {
            let meta = entry
                .metadata()
                .map_err(|err| walk_error("cannot hash", root, err))?;
            Kind::File(meta.len())
        } else {
            return Err(BuiltinError::new(format!(
                "cannot hash `{}`: neither a file, a folder nor a symbolic link",
                entry.path().display()
            )));
        };
        entries.push((relative, kind));
    }
    entries.sort_by(|a, b| a.0.cmp(&b.0));
    let mut hasher = Sha256::new();
    for (relative, kind) in entries {
        let path = root.join(std::ffi::OsStr::from_bytes(&relative));
        match kind {
            Kind::Link(target) => {
                hasher.update(b"l");
                hasher.update(&relative);
                hasher.update(format!("\0{}\0", target.len()));
                hasher.update(&target);
            }
            Kind::File(len) => {
                hasher.update(b"f");
                hasher.update(&relative);
                hasher.update(format!("\0{len}\0"));
                let file = Checked::open(&path, cancel)
                    .map_err(|err| io_error("cannot hash", &path, &err))?;
                // Read one byte past the announced length so a file that grew is noticed too.
                let copied = io::copy(&mut file.take(len + 1), &mut hasher)
                    .map_err(|err| io_error("cannot hash", &path, &err))?;
                if copied != len {
                    return Err(BuiltinError::new(format!(
                        "cannot hash `{}`: it changed while being read",
                        path.display()
                    )));
                }
            }
        }
    }
    Ok(paths::hex(&hasher.finalize()))
}

// ---------------------------------------------------------------------------------------------
// fs.write

/// Write a text file atomically, inside the workflow's writes.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct WriteArgs {
    /// The file to write; missing parent folders are created.
    #[schemars(length(min = 1))]
    path: String,
    /// The whole new content of the file.
    content: String,
    /// A precondition against concurrent edits: the SHA-256 the file must still have (as read
    /// earlier, e.g. by fs.hash), or null when it must not exist yet. The write fails, touching
    /// nothing, when the file changed.
    #[serde(default)]
    expect_sha256: Expected,
}

/// What `fs.write` is told the file holds before it writes: left out, anything; `null`, nothing
/// (the file must not exist); a hash, exactly those bytes. Its schema is a string or null, as
/// written; `Option<Option<String>>` would say the same to serde but nothing of the difference.
#[derive(Default)]
enum Expected {
    #[default]
    Anything,
    Missing,
    Sha256(String),
}

impl<'de> Deserialize<'de> for Expected {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Ok(match Option::<String>::deserialize(deserializer)? {
            Some(hash) => Expected::Sha256(hash),
            None => Expected::Missing,
        })
    }
}

impl JsonSchema for Expected {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Expected".into()
    }

    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        Option::<String>::json_schema(generator)
    }
}

fn write(with: &Value, ctx: &BuiltinCtx) -> BuiltinResult {
    let args: WriteArgs = parse("fs.write", with)?;
    let path = ctx.writes.check(&ctx.resolve(&args.path))?;
    let expected = match &args.expect_sha256 {
        Expected::Anything => None,
        Expected::Missing => Some(None),
        Expected::Sha256(hash) => Some(Some(hash.as_str())),
    };
    if let Some(expected) = expected {
        let current = match std::fs::read(&path) {
            Ok(bytes) => Some(paths::sha256_hex(&bytes)),
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => None,
            Err(err) => return Err(io_error("cannot read", &path, &err)),
        };
        if current.as_deref() != expected {
            let said = match expected {
                Some(hash) => format!("to have SHA-256 {hash}"),
                None => "not to exist".to_string(),
            };
            let found = match &current {
                Some(hash) => format!("it has {hash}"),
                None => "it does not exist".to_string(),
            };
            return Err(BuiltinError::new(format!(
                "refusing to write `{}`: it was expected {said}, but {found} (changed since it was read)",
                path.display()
            )));
        }
    }
    let outcome = paths::write_atomic(&path, args.content.as_bytes())
        .map_err(|err| io_error("cannot write", &path, &err))?;
    Ok(write_output(&path, outcome))
}

// ---------------------------------------------------------------------------------------------
// fs.copy, fs.move

/// Copy a file, a symbolic link (as a link) or a whole folder (links inside copied as links).
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct CopyArgs {
    /// What to copy; a symbolic link here is copied as a link, not followed.
    #[schemars(length(min = 1))]
    from: String,
    /// The path of the copy, inside the workflow's writes. An existing file or link there is
    /// replaced atomically; an existing folder is replaced by a copied folder. A folder and a
    /// file never replace each other.
    #[schemars(length(min = 1))]
    to: String,
}

/// Move a file, a symbolic link or a whole folder; both ends must lie inside the workflow's
/// writes.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct MoveArgs {
    /// What to move; a symbolic link here is moved as a link, not followed.
    #[schemars(length(min = 1))]
    from: String,
    /// The new path. An existing file or link there is replaced; an existing folder is replaced
    /// by a moved folder. A folder and a file never replace each other.
    #[schemars(length(min = 1))]
    to: String,
}

fn copy(with: &Value, ctx: &BuiltinCtx) -> BuiltinResult {
    let args: CopyArgs = parse("fs.copy", with)?;
    let from = ctx.resolve(&args.from);
    let to = ctx.writes.check(&ctx.resolve(&args.to))?;
    let meta = fs::symlink_metadata(&from).map_err(|err| io_error("cannot copy", &from, &err))?;
    if meta.is_dir() {
        refuse_into_itself("copy", &from, &to)?;
    }
    prepare_destination(&meta, &from, &to)?;
    copy_entry(&from, &meta, &to, ctx.cancel)?;
    Ok(path_output(&to))
}

fn move_(with: &Value, ctx: &BuiltinCtx) -> BuiltinResult {
    let args: MoveArgs = parse("fs.move", with)?;
    let from = ctx.writes.check(&ctx.resolve(&args.from))?;
    let to = ctx.writes.check(&ctx.resolve(&args.to))?;
    let meta = fs::symlink_metadata(&from).map_err(|err| io_error("cannot move", &from, &err))?;
    if from == to {
        return Ok(path_output(&to));
    }
    if meta.is_dir() {
        refuse_into_itself("move", &from, &to)?;
    }
    let destination = prepare_destination(&meta, &from, &to)?;
    let moved = if destination.is_some_and(|dest| dest.is_dir()) {
        replace_folder(&from, &to)
    } else {
        fs::rename(&from, &to)
    };
    match moved {
        Ok(()) => {}
        Err(err) if err.raw_os_error() == Some(libc::EXDEV) => {
            // Another filesystem: copy, then remove the original.
            copy_entry(&from, &meta, &to, ctx.cancel)?;
            remove_entry(&from, &meta)?;
        }
        Err(err) => return Err(io_error("cannot move", &from, &err)),
    }
    if let Some(parent) = to.parent() {
        paths::sync_dir(parent);
    }
    Ok(path_output(&to))
}

/// A folder copied or moved into itself would never end.
fn refuse_into_itself(doing: &str, from: &Path, to: &Path) -> Result<(), BuiltinError> {
    let real =
        fs::canonicalize(from).map_err(|err| io_error(&format!("cannot {doing}"), from, &err))?;
    if to.starts_with(&real) {
        return Err(BuiltinError::new(format!(
            "cannot {doing} folder `{}` into itself (`{}`)",
            from.display(),
            to.display()
        )));
    }
    Ok(())
}

/// Refuse to replace a folder with a non-folder or the reverse, and create the destination's
/// parent folders. Returns what the destination holds now, if anything.
fn prepare_destination(
    source: &fs::Metadata,
    from: &Path,
    to: &Path,
) -> Result<Option<fs::Metadata>, BuiltinError> {
    let existing = fs::symlink_metadata(to).ok();
    if let Some(dest) = &existing {
        if dest.is_dir() != source.is_dir() {
            let (what, with) = if dest.is_dir() {
                ("folder", "a non-folder")
            } else {
                ("non-folder", "a folder")
            };
            return Err(BuiltinError::new(format!(
                "cannot replace {what} `{}` with {with} (`{}`)",
                to.display(),
                from.display()
            )));
        }
    }
    let (parent, _) = paths::split_parent(to).map_err(|err| io_error("cannot write", to, &err))?;
    fs::create_dir_all(parent).map_err(|err| io_error("cannot create", parent, &err))?;
    Ok(existing)
}

/// Copy one entry (file, link or folder) to `to`, whose parent exists; `to` is replaced atomically
/// for a file or link, and swapped in after the whole copy for a folder.
fn copy_entry(
    from: &Path,
    meta: &fs::Metadata,
    to: &Path,
    cancel: Cancel,
) -> Result<(), BuiltinError> {
    let (parent, name) =
        paths::split_parent(to).map_err(|err| io_error("cannot write", to, &err))?;
    let prefix = paths::temp_prefix(name);
    let fail = |err: io::Error| io_error("cannot copy", from, &err);
    let kind = meta.file_type();
    if kind.is_symlink() {
        let target = fs::read_link(from).map_err(fail)?;
        let link = tempfile::Builder::new()
            .prefix(&prefix)
            .suffix(".tmp")
            .make_in(parent, |temp| std::os::unix::fs::symlink(&target, temp))
            .map_err(fail)?;
        link.persist(to).map_err(|err| fail(err.error))?;
    } else if kind.is_file() {
        let mut temp = tempfile::Builder::new()
            .prefix(&prefix)
            .suffix(".tmp")
            .tempfile_in(parent)
            .map_err(fail)?;
        let mut source = Checked::open(from, cancel).map_err(fail)?;
        io::copy(&mut source, temp.as_file_mut()).map_err(fail)?;
        temp.as_file()
            .set_permissions(meta.permissions())
            .map_err(fail)?;
        temp.as_file().sync_all().map_err(fail)?;
        temp.persist(to).map_err(|err| fail(err.error))?;
    } else if kind.is_dir() {
        let staging = tempfile::Builder::new()
            .prefix(&prefix)
            .suffix(".tmp")
            .tempdir_in(parent)
            .map_err(fail)?;
        copy_tree(from, staging.path(), cancel)?;
        fs::set_permissions(staging.path(), meta.permissions()).map_err(fail)?;
        // From here on the staging folder is `to`, or is cleaned up by `replace_folder`.
        let staged = staging.keep();
        if let Err(err) = replace_folder(&staged, to) {
            let _ = fs::remove_dir_all(&staged);
            return Err(io_error("cannot copy to", to, &err));
        }
    } else {
        return Err(unsupported(from));
    }
    paths::sync_dir(parent);
    Ok(())
}

/// Copy what is below folder `from` into the existing folder `into`, links as links.
fn copy_tree(from: &Path, into: &Path, cancel: Cancel) -> Result<(), BuiltinError> {
    for entry in WalkDir::new(from).min_depth(1).follow_links(false) {
        cancel.check()?;
        let entry = entry.map_err(|err| walk_error("cannot copy", from, err))?;
        let source = entry.path();
        let target = into.join(relative_to(source, from)?);
        let fail = |err: io::Error| io_error("cannot copy", source, &err);
        let kind = entry.file_type();
        if kind.is_dir() {
            fs::create_dir(&target).map_err(fail)?;
        } else if kind.is_symlink() {
            let link = fs::read_link(source).map_err(fail)?;
            std::os::unix::fs::symlink(link, &target).map_err(fail)?;
        } else if kind.is_file() {
            // `fs::copy` would follow a link, but this entry was seen as a regular file.
            fs::copy(source, &target).map_err(fail)?;
            File::open(&target)
                .and_then(|file| file.sync_all())
                .map_err(fail)?;
        } else {
            return Err(unsupported(source));
        }
    }
    Ok(())
}

/// Put folder `from` at `to`, moving an existing folder at `to` aside first and removing it after.
fn replace_folder(from: &Path, to: &Path) -> io::Result<()> {
    if fs::symlink_metadata(to).is_err() {
        return fs::rename(from, to);
    }
    let (parent, name) = paths::split_parent(to)?;
    // The old folder waits inside a temporary folder, which removes it when dropped.
    let aside = tempfile::Builder::new()
        .prefix(&paths::temp_prefix(name))
        .suffix(".old")
        .tempdir_in(parent)?;
    let old = aside.path().join(name);
    fs::rename(to, &old)?;
    if let Err(err) = fs::rename(from, to) {
        // Put the old folder back; the error that matters is the first one.
        let _ = fs::rename(&old, to);
        return Err(err);
    }
    drop(aside);
    Ok(())
}

fn unsupported(path: &Path) -> BuiltinError {
    BuiltinError::new(format!(
        "`{}` is neither a file, a folder nor a symbolic link",
        path.display()
    ))
}

// ---------------------------------------------------------------------------------------------
// fs.remove

/// Remove a file, a symbolic link (never its target) or a whole folder; nothing there is not an
/// error.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct RemoveArgs {
    /// What to remove, inside the workflow's writes.
    #[schemars(length(min = 1))]
    path: String,
}

fn remove(with: &Value, ctx: &BuiltinCtx) -> BuiltinResult {
    let args: RemoveArgs = parse("fs.remove", with)?;
    let path = ctx.writes.check(&ctx.resolve(&args.path))?;
    match fs::symlink_metadata(&path) {
        Err(err) if err.kind() == io::ErrorKind::NotFound => {}
        Err(err) => return Err(io_error("cannot remove", &path, &err)),
        Ok(meta) => remove_entry(&path, &meta)?,
    }
    Ok(path_output(&path))
}

fn remove_entry(path: &Path, meta: &fs::Metadata) -> Result<(), BuiltinError> {
    // `remove_dir_all` does not follow links inside the folder; a link is removed as a file.
    let removed = if meta.is_dir() {
        fs::remove_dir_all(path)
    } else {
        fs::remove_file(path)
    };
    removed.map_err(|err| io_error("cannot remove", path, &err))
}

#[cfg(test)]
mod tests {
    use std::fs;
    use std::os::unix::fs::{symlink, MetadataExt};

    use serde_json::{json, Value};

    use crate::builtins::paths::sha256_hex;
    use crate::builtins::testing::{assert_valid, find, listing, write, Sandbox};

    fn text(value: &Value, key: &str) -> String {
        value[key].as_str().expect("string field").to_string()
    }

    #[test]
    fn writable_checks_every_path_and_writes_nothing() {
        let sandbox = Sandbox::new();
        let outside = tempfile::tempdir().expect("a folder outside");
        write(&sandbox.path("out/blocker"), "a file\n");
        fs::create_dir_all(sandbox.path("out/docs")).expect("docs");
        symlink(outside.path(), sandbox.path("out/docs/linked")).expect("a link");
        let out = sandbox
            .call(
                "fs.writable",
                json!({ "paths": ["out/new/a.md", "out/docs/linked/b.md", "out/blocker/c.md", "out/docs", "elsewhere.md"] }),
            )
            .expect("runs");
        assert_eq!(out["ok"], false);
        let problems: Vec<String> = out["problems"]
            .as_array()
            .expect("problems")
            .iter()
            .map(|p| p.as_str().unwrap_or_default().to_string())
            .collect();
        assert_eq!(problems.len(), 4, "{problems:#?}");
        assert!(
            problems[0].contains("resolves to")
                && problems[0].contains("outside the workflow's writes"),
            "{problems:?}"
        );
        assert!(
            problems[1].contains("is a file, not a folder"),
            "{problems:?}"
        );
        assert_eq!(problems[2], "`out/docs` is a folder, not a file");
        assert!(
            problems[3].contains("outside the workflow's writes"),
            "{problems:?}"
        );
        assert!(!sandbox.path("out/new").exists(), "nothing was created");
        let fine = sandbox
            .call("fs.writable", json!({ "paths": ["out/new/a.md"] }))
            .expect("runs");
        assert_eq!(fine, json!({ "ok": true, "problems": [] }));
    }

    #[test]
    fn schemas_are_valid_closed_and_their_examples_validate() {
        for builtin in super::builtins()
            .into_iter()
            .chain(super::super::json::builtins())
        {
            let with = (builtin.with_schema)();
            jsonschema::meta::validate(&with).expect("with schema");
            assert_eq!(
                with["additionalProperties"],
                json!(false),
                "{}",
                builtin.name
            );
            assert!(with["required"].is_array(), "{}", builtin.name);
            for property in with["properties"].as_object().expect("properties").values() {
                assert!(property["description"].is_string(), "{}", builtin.name);
            }
            let output = (builtin.output_schema)();
            for example in output["examples"].as_array().expect("examples") {
                assert_valid(&output, example, builtin.name);
            }
        }
    }

    #[test]
    fn only_the_writing_actions_say_they_write() {
        for name in [
            "fs.read",
            "fs.exists",
            "fs.glob",
            "fs.hash",
            "json.read",
            "jsonl.read",
        ] {
            assert!(!find(name).writes, "{name}");
        }
        for name in ["fs.write", "fs.copy", "fs.move", "fs.remove", "json.write"] {
            assert!(find(name).writes, "{name}");
        }
    }

    #[test]
    fn read_returns_text_null_when_optional_or_an_error_naming_the_path() {
        let sandbox = Sandbox::new();
        write(&sandbox.path("notes.md"), "# hi\n");
        let out = sandbox.call("fs.read", json!({ "path": "notes.md" }));
        assert_eq!(out, Ok(json!("# hi\n")));
        let out = sandbox.call("fs.read", json!({ "path": "gone.md", "optional": true }));
        assert_eq!(out, Ok(Value::Null));
        let err = sandbox
            .call("fs.read", json!({ "path": "gone.md" }))
            .expect_err("missing");
        assert!(err.0.contains("gone.md"), "{err}");
        assert!(err.0.starts_with("cannot read"), "{err}");
    }

    #[test]
    fn exists_tells_files_and_folders_from_nothing() {
        let sandbox = Sandbox::new();
        write(&sandbox.path("a/b.txt"), "x");
        assert_eq!(
            sandbox.call("fs.exists", json!({ "path": "a/b.txt" })),
            Ok(json!(true))
        );
        assert_eq!(
            sandbox.call("fs.exists", json!({ "path": "a" })),
            Ok(json!(true))
        );
        assert_eq!(
            sandbox.call("fs.exists", json!({ "path": "a/c" })),
            Ok(json!(false))
        );
    }

    #[test]
    fn glob_lists_sorted_root_joined_files_without_following_linked_folders() {
        let sandbox = Sandbox::new();
        write(&sandbox.path("docs/b.md"), "b");
        write(&sandbox.path("docs/a.md"), "a");
        write(&sandbox.path("docs/guide/c.md"), "c");
        write(&sandbox.path("docs/guide/d.txt"), "d");
        write(&sandbox.outside.join("e.md"), "e");
        symlink(&sandbox.outside, sandbox.path("docs/linked")).expect("symlink");
        let deep = sandbox.call("fs.glob", json!({ "root": "docs", "pattern": "**/*.md" }));
        assert_eq!(
            deep,
            Ok(json!(["docs/a.md", "docs/b.md", "docs/guide/c.md"]))
        );
        let flat = sandbox.call("fs.glob", json!({ "root": "docs", "pattern": "*.md" }));
        assert_eq!(flat, Ok(json!(["docs/a.md", "docs/b.md"])));
        let link = sandbox.call("fs.glob", json!({ "root": "docs", "pattern": "link*" }));
        assert_eq!(link, Ok(json!(["docs/linked"])));
        let none = sandbox.call("fs.glob", json!({ "root": "nowhere", "pattern": "*" }));
        assert_eq!(none, Ok(json!([])));
        let bad = sandbox.call("fs.glob", json!({ "root": "docs", "pattern": "a[" }));
        assert!(bad.expect_err("bad glob").0.contains("invalid glob"));
    }

    #[test]
    fn glob_leaves_links_out_when_asked() {
        let sandbox = Sandbox::new();
        write(&sandbox.path("snap/a.md"), "a");
        write(&sandbox.outside.join("secret.md"), "s");
        symlink(sandbox.outside.join("secret.md"), sandbox.path("snap/b.md")).expect("symlink");
        let all = sandbox.call("fs.glob", json!({ "root": "snap", "pattern": "*.md" }));
        assert_eq!(all, Ok(json!(["snap/a.md", "snap/b.md"])));
        let plain = sandbox.call(
            "fs.glob",
            json!({ "root": "snap", "pattern": "*.md", "links": false }),
        );
        assert_eq!(plain, Ok(json!(["snap/a.md"])));
    }

    #[test]
    fn hash_of_a_file_is_the_sha256_of_its_bytes() {
        let sandbox = Sandbox::new();
        write(&sandbox.path("f.txt"), "abc");
        let out = sandbox.call("fs.hash", json!({ "path": "f.txt" }));
        assert_eq!(
            out,
            Ok(json!(
                "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
            ))
        );
        let missing = sandbox.call("fs.hash", json!({ "path": "nope" }));
        assert!(missing.expect_err("missing").0.contains("nope"));
    }

    #[test]
    fn hash_of_a_folder_follows_the_documented_encoding() {
        let sandbox = Sandbox::new();
        write(&sandbox.path("tree/b/c.txt"), "cc");
        write(&sandbox.path("tree/a-c"), "x");
        symlink("b/c.txt", sandbox.path("tree/link")).expect("symlink");
        fs::create_dir_all(sandbox.path("tree/empty")).expect("empty dir");
        // `a-c` sorts before `b/c.txt`, and `-` before `/`: byte order of the whole path.
        let expected = sha256_hex(b"fa-c\x001\x00xfb/c.txt\x002\x00ccllink\x007\x00b/c.txt");
        let out = sandbox.call("fs.hash", json!({ "path": "tree" }));
        assert_eq!(out, Ok(json!(expected)));
    }

    #[test]
    fn hash_of_a_folder_is_stable_and_changes_with_content_names_and_links() {
        let sandbox = Sandbox::new();
        let hash = |path: &str| {
            sandbox
                .call("fs.hash", json!({ "path": path }))
                .expect("hash")
        };
        write(&sandbox.path("tree/x.txt"), "one");
        write(&sandbox.path("tree/sub/y.txt"), "two");
        write(&sandbox.outside.join("target.txt"), "t");
        symlink(sandbox.outside.join("target.txt"), sandbox.path("tree/l")).expect("symlink");
        let first = hash("tree");
        assert_eq!(hash("tree"), first);

        // The same content elsewhere hashes the same: only relative paths count.
        super::copy_tree(
            &sandbox.path("tree"),
            &{
                fs::create_dir(sandbox.path("twin")).expect("twin");
                sandbox.path("twin")
            },
            crate::builtins::Cancel::default(),
        )
        .expect("copy");
        assert_eq!(hash("twin"), first);

        // A link's target is not followed.
        write(&sandbox.outside.join("target.txt"), "changed");
        assert_eq!(hash("tree"), first);

        write(&sandbox.path("tree/sub/y.txt"), "TWO");
        let changed = hash("tree");
        assert_ne!(changed, first);
        fs::rename(
            sandbox.path("tree/sub/y.txt"),
            sandbox.path("tree/sub/z.txt"),
        )
        .expect("mv");
        assert_ne!(hash("tree"), changed);
    }

    #[test]
    fn write_creates_parents_and_reports_the_hash() {
        let sandbox = Sandbox::new();
        let out = sandbox
            .call(
                "fs.write",
                json!({ "path": "out/a/b.md", "content": "hello" }),
            )
            .expect("write");
        let path = sandbox.path("out/a/b.md");
        assert_eq!(fs::read_to_string(&path).expect("read"), "hello");
        assert_eq!(text(&out, "path"), path.display().to_string());
        assert_eq!(text(&out, "sha256"), sha256_hex(b"hello"));
        assert_eq!(out["changed"], json!(true));
    }

    #[test]
    fn write_with_a_precondition_refuses_a_changed_file() {
        let sandbox = Sandbox::new();
        let create = json!({ "path": "out/doc.md", "content": "v1", "expect_sha256": null });
        sandbox
            .call("fs.write", create.clone())
            .expect("absent, as expected");
        let err = sandbox.call("fs.write", create).expect_err("it exists now");
        assert!(err.to_string().contains("not to exist"), "{err}");

        let update =
            json!({ "path": "out/doc.md", "content": "v2", "expect_sha256": sha256_hex(b"v1") });
        sandbox
            .call("fs.write", update.clone())
            .expect("unchanged since read");
        let err = sandbox
            .call("fs.write", update)
            .expect_err("it changed since");
        assert!(
            err.to_string().contains("changed since it was read"),
            "{err}"
        );
        assert_eq!(
            fs::read_to_string(sandbox.path("out/doc.md")).expect("read"),
            "v2"
        );
    }

    #[test]
    fn identical_content_is_not_rewritten_and_no_temp_file_is_left() {
        let sandbox = Sandbox::new();
        let with = json!({ "path": "out/f.txt", "content": "same" });
        sandbox.call("fs.write", with.clone()).expect("first");
        let path = sandbox.path("out/f.txt");
        // Dated long past: a rewrite would show as a new modification time, however coarse.
        fs::File::options()
            .write(true)
            .open(&path)
            .and_then(|file| {
                file.set_modified(
                    std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_000_000_000),
                )
            })
            .expect("date the file");
        let before = fs::metadata(&path).expect("meta");
        let again = sandbox.call("fs.write", with).expect("second");
        assert_eq!(again["changed"], json!(false));
        let after = fs::metadata(&path).expect("meta");
        assert_eq!(after.ino(), before.ino());
        assert_eq!(after.modified().ok(), before.modified().ok());

        let other = sandbox
            .call(
                "fs.write",
                json!({ "path": "out/f.txt", "content": "other" }),
            )
            .expect("third");
        assert_eq!(other["changed"], json!(true));
        assert_ne!(fs::metadata(&path).expect("meta").ino(), before.ino());
        assert_eq!(listing(&sandbox.path("out")), ["f.txt"]);
    }

    #[test]
    fn writes_outside_the_roots_are_refused_before_touching_the_disk() {
        let sandbox = Sandbox::new();
        let err = sandbox
            .call(
                "fs.write",
                json!({ "path": "../outside/x.txt", "content": "x" }),
            )
            .expect_err("outside");
        assert!(err.0.contains("outside the workflow's writes"), "{err}");
        assert!(err.0.contains("out`"), "lists the roots: {err}");
        assert!(!sandbox.outside.join("x.txt").exists());

        let err = sandbox
            .call(
                "fs.write",
                json!({ "path": "elsewhere/x.txt", "content": "x" }),
            )
            .expect_err("not in a root");
        assert!(err.0.contains("elsewhere"), "{err}");
        assert!(!sandbox.path("elsewhere").exists());
    }

    #[test]
    fn a_symlink_inside_a_root_cannot_lead_a_write_outside() {
        let sandbox = Sandbox::new();
        fs::create_dir_all(sandbox.path("out")).expect("out");
        symlink(&sandbox.outside, sandbox.path("out/escape")).expect("symlink");
        let err = sandbox
            .call(
                "fs.write",
                json!({ "path": "out/escape/x.txt", "content": "x" }),
            )
            .expect_err("escape");
        assert!(err.0.contains("resolves to"), "{err}");
        assert!(!sandbox.outside.join("x.txt").exists());
        let err = sandbox
            .call("fs.copy", json!({ "from": "out", "to": "out/escape/copy" }))
            .expect_err("escape");
        assert!(err.0.contains("outside"), "{err}");
        assert!(!sandbox.outside.join("copy").exists());
    }

    #[test]
    fn no_roots_means_nothing_may_be_written() {
        let sandbox = Sandbox::with_roots(&[]);
        let err = sandbox
            .call("fs.write", json!({ "path": "x.txt", "content": "x" }))
            .expect_err("no roots");
        assert!(err.0.contains("declares no writes"), "{err}");
        assert!(!sandbox.path("x.txt").exists());
    }

    #[test]
    fn copy_copies_files_and_folders_with_links_as_links() {
        let sandbox = Sandbox::new();
        write(&sandbox.path("src/a.txt"), "a");
        write(&sandbox.path("src/sub/b.txt"), "b");
        symlink("sub/b.txt", sandbox.path("src/rel")).expect("symlink");
        symlink(&sandbox.outside, sandbox.path("src/away")).expect("symlink");
        write(&sandbox.outside.join("secret.txt"), "s");

        let out = sandbox
            .call(
                "fs.copy",
                json!({ "from": "src/a.txt", "to": "out/one/a.txt" }),
            )
            .expect("file");
        assert_eq!(
            text(&out, "path"),
            sandbox.path("out/one/a.txt").display().to_string()
        );
        assert_eq!(
            fs::read_to_string(sandbox.path("out/one/a.txt")).expect("read"),
            "a"
        );

        sandbox
            .call("fs.copy", json!({ "from": "src", "to": "out/tree" }))
            .expect("folder");
        let copy = sandbox.path("out/tree");
        assert_eq!(
            fs::read_to_string(copy.join("sub/b.txt")).expect("read"),
            "b"
        );
        assert_eq!(
            fs::read_link(copy.join("rel")).expect("link"),
            std::path::Path::new("sub/b.txt")
        );
        assert_eq!(
            fs::read_link(copy.join("away")).expect("link"),
            sandbox.outside
        );
        assert!(fs::symlink_metadata(copy.join("away"))
            .expect("meta")
            .is_symlink());
        assert_eq!(listing(&sandbox.path("out")), ["one", "tree"]);

        // A link named as `from` is copied as a link.
        sandbox
            .call("fs.copy", json!({ "from": "src/away", "to": "out/link" }))
            .expect("link");
        assert!(fs::symlink_metadata(sandbox.path("out/link"))
            .expect("meta")
            .is_symlink());
    }

    #[test]
    fn copy_replaces_a_folder_but_not_a_file_with_a_folder() {
        let sandbox = Sandbox::new();
        write(&sandbox.path("src/new.txt"), "new");
        write(&sandbox.path("out/tree/old.txt"), "old");
        write(&sandbox.path("out/file"), "f");
        sandbox
            .call("fs.copy", json!({ "from": "src", "to": "out/tree" }))
            .expect("replace");
        assert_eq!(listing(&sandbox.path("out/tree")), ["new.txt"]);
        assert_eq!(listing(&sandbox.path("out")), ["file", "tree"]);
        let err = sandbox
            .call("fs.copy", json!({ "from": "src", "to": "out/file" }))
            .expect_err("kind");
        assert!(err.0.contains("cannot replace"), "{err}");
        assert_eq!(
            fs::read_to_string(sandbox.path("out/file")).expect("read"),
            "f"
        );
    }

    #[test]
    fn copy_refuses_a_folder_into_itself_and_targets_outside() {
        let sandbox = Sandbox::new();
        write(&sandbox.path("out/a.txt"), "a");
        let err = sandbox
            .call("fs.copy", json!({ "from": "out", "to": "out/again" }))
            .expect_err("into itself");
        assert!(err.0.contains("into itself"), "{err}");
        let err = sandbox
            .call(
                "fs.copy",
                json!({ "from": "out/a.txt", "to": "../outside/a.txt" }),
            )
            .expect_err("outside");
        assert!(err.0.contains("outside the workflow's writes"), "{err}");
        assert!(!sandbox.outside.join("a.txt").exists());
    }

    #[test]
    fn move_moves_files_and_folders_inside_the_roots() {
        let sandbox = Sandbox::new();
        write(&sandbox.path("out/a.txt"), "a");
        write(&sandbox.path("out/dir/b.txt"), "b");
        write(&sandbox.path("out/target/old.txt"), "old");
        sandbox
            .call(
                "fs.move",
                json!({ "from": "out/a.txt", "to": "out/new/a.txt" }),
            )
            .expect("file");
        assert!(!sandbox.path("out/a.txt").exists());
        assert_eq!(
            fs::read_to_string(sandbox.path("out/new/a.txt")).expect("read"),
            "a"
        );
        sandbox
            .call("fs.move", json!({ "from": "out/dir", "to": "out/target" }))
            .expect("folder");
        assert!(!sandbox.path("out/dir").exists());
        assert_eq!(listing(&sandbox.path("out/target")), ["b.txt"]);
        assert_eq!(listing(&sandbox.path("out")), ["new", "target"]);
    }

    #[test]
    fn move_checks_both_ends() {
        let sandbox = Sandbox::new();
        write(&sandbox.path("src.txt"), "s");
        let err = sandbox
            .call("fs.move", json!({ "from": "src.txt", "to": "out/src.txt" }))
            .expect_err("from outside");
        assert!(err.0.contains("src.txt"), "{err}");
        assert!(sandbox.path("src.txt").exists());
        assert!(!sandbox.path("out/src.txt").exists());

        write(&sandbox.path("out/in.txt"), "i");
        sandbox
            .call(
                "fs.move",
                json!({ "from": "out/in.txt", "to": "../outside/in.txt" }),
            )
            .expect_err("to outside");
        assert!(sandbox.path("out/in.txt").exists());
        assert!(!sandbox.outside.join("in.txt").exists());
    }

    #[test]
    fn remove_removes_files_folders_and_links_but_never_link_targets() {
        let sandbox = Sandbox::new();
        write(&sandbox.outside.join("keep.txt"), "k");
        write(&sandbox.path("out/f.txt"), "f");
        write(&sandbox.path("out/dir/g.txt"), "g");
        symlink(&sandbox.outside, sandbox.path("out/dir/away")).expect("symlink");
        symlink(&sandbox.outside, sandbox.path("out/link")).expect("symlink");

        let out = sandbox
            .call("fs.remove", json!({ "path": "out/f.txt" }))
            .expect("file");
        assert_eq!(
            text(&out, "path"),
            sandbox.path("out/f.txt").display().to_string()
        );
        assert!(!sandbox.path("out/f.txt").exists());

        sandbox
            .call("fs.remove", json!({ "path": "out/link" }))
            .expect("link");
        assert!(fs::symlink_metadata(sandbox.path("out/link")).is_err());
        sandbox
            .call("fs.remove", json!({ "path": "out/dir" }))
            .expect("folder");
        assert!(!sandbox.path("out/dir").exists());
        assert_eq!(listing(&sandbox.outside), ["keep.txt"]);

        sandbox
            .call("fs.remove", json!({ "path": "out/never-was" }))
            .expect("missing is fine");
    }

    #[test]
    fn remove_outside_the_roots_is_refused() {
        let sandbox = Sandbox::new();
        write(&sandbox.outside.join("keep.txt"), "k");
        let err = sandbox
            .call("fs.remove", json!({ "path": "../outside/keep.txt" }))
            .expect_err("outside");
        assert!(err.0.contains("outside the workflow's writes"), "{err}");
        assert!(sandbox.outside.join("keep.txt").exists());
    }
}
