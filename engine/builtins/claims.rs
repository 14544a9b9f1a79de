//! Built-in: markdown.claims.
//!
//! The mechanical claims check of a Markdown document against the repository it lives in: what a
//! reader would follow must lead somewhere. It reads the body (the text after a frontmatter, when
//! there is one) and reports, each with its line in the whole document:
//!
//! - a cited repository path (a backticked token with a `/` in it, a `:12` or `#L12` suffix
//!   dropped) that does not exist; a token that is missing everywhere and does not look like a
//!   path (no extension, no trailing `/`, a first segment that is no folder) is a branch name or a
//!   model id, not a citation, and is left alone;
//! - a cited commit SHA (7 to 40 hex digits with at least one digit and one letter a-f) that does
//!   not name a commit of the repository (`git cat-file -e <sha>^{commit}`);
//! - a relative Markdown link whose target does not resolve from the document's folder;
//! - drafting scaffold left in the text: `{{...}}` placeholders, `Learning 3` numbering (with a
//!   capital: "machine learning 2" is prose), a section that is only `...` or `TODO`, and the
//!   template's bracketed placeholders (`[category]`, `[filename]`).
//!
//! `refs` are further references to check (a frontmatter's `source_refs`): a URL is counted as
//! external and not checked; anything else must be a path inside the repository that exists.
//! `creates` names paths the caller is about to create (the document itself, its folder): they
//! count as existing, so a link into a category folder the same run creates resolves.
//!
//! Paths are resolved lexically against the root (`..` never climbs out of it) and never follow
//! the document's own folder on disk, which may not exist yet. Fenced code blocks are not read:
//! what an example prints is not a claim about this repository. The check reads; it never writes.

use std::collections::HashSet;
use std::path::{Component, Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::LazyLock;

use regex::Regex;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{json, Value};

use super::args::{self, parse};
use super::fs::object_schema;
use super::{Builtin, BuiltinCtx, BuiltinResult};

pub(crate) fn builtins() -> Vec<Builtin> {
    vec![Builtin {
        name: "markdown.claims",
        description: "Check what a Markdown document cites against its repository: paths, commit SHAs, relative links, and drafting scaffold left in the text.",
        writes: false,
        with_schema: args::schema::<ClaimsArgs>,
        with_parse: args::parses::<ClaimsArgs>,
        output_schema,
        run,
    }]
}

fn output_schema() -> Value {
    object_schema(
        "What the document cites that does not hold, and what was checked.",
        json!({
            "problems": {
                "type": "array",
                "description": "Every citation that does not resolve and every piece of scaffold, top to bottom; empty when the document is clean.",
                "items": {
                    "type": "object",
                    "properties": {
                        "kind": { "enum": ["ref", "path", "sha", "link", "scaffold"], "description": "What was cited: a given reference, a path, a commit, a link, or scaffold." },
                        "text": { "type": "string", "description": "The citation as written." },
                        "line": { "type": ["integer", "null"], "description": "Its 1-based line in the document; null for a given reference." },
                        "message": { "type": "string", "description": "What is wrong, as a lowercase fragment." },
                    },
                    "required": ["kind", "text", "line", "message"],
                    "additionalProperties": false,
                },
            },
            "checked": {
                "type": "object",
                "description": "How many citations of each kind were checked.",
                "properties": {
                    "refs": { "type": "integer", "description": "Given references that are paths (URLs not counted)." },
                    "paths": { "type": "integer", "description": "Cited paths of the body." },
                    "shas": { "type": "integer", "description": "Cited commit SHAs." },
                    "links": { "type": "integer", "description": "Relative links." },
                },
                "required": ["refs", "paths", "shas", "links"],
                "additionalProperties": false,
            },
            "external_refs": {
                "type": "array",
                "items": { "type": "string" },
                "description": "Given references that are URLs: kept, not checked.",
            },
            "notes": {
                "type": "array",
                "items": { "type": "string" },
                "description": "What could not be checked and why (no git, say).",
            },
        }),
        &["problems", "checked", "external_refs", "notes"],
    )
}

/// A Markdown document and the repository its citations must resolve in.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct ClaimsArgs {
    /// The whole document; a frontmatter at its start is skipped.
    text: String,
    /// The repository root that cited paths are relative to.
    #[schemars(length(min = 1))]
    root: String,
    /// The document's own path, relative to the root; relative links resolve from its folder.
    #[schemars(length(min = 1))]
    doc: String,
    /// Further references to check, such as a frontmatter's source_refs: URLs are counted as
    /// external, anything else must be an existing path inside the root; items that are not strings
    /// are skipped.
    #[serde(default)]
    refs: Vec<Value>,
    /// Root-relative paths about to be created (the document, its folder); they count as existing.
    #[serde(default)]
    creates: Vec<String>,
}

struct Problem {
    kind: &'static str,
    text: String,
    line: Option<usize>,
    message: String,
}

fn run(with: &Value, ctx: &BuiltinCtx) -> BuiltinResult {
    let args: ClaimsArgs = parse("markdown.claims", with)?;
    let root = clean(&ctx.resolve(&args.root));
    let repo = Repo {
        creates: args
            .creates
            .iter()
            .filter_map(|path| inside(&root, Path::new(""), path))
            .collect(),
        root,
    };
    let doc_dir = Path::new(&args.doc)
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default();
    let mut problems = Vec::new();
    let mut notes = Vec::new();
    let mut external = Vec::new();
    let mut checked = [0usize; 4];

    for reference in args.refs.iter().filter_map(Value::as_str) {
        let trimmed = reference.trim();
        if trimmed.is_empty() {
            continue;
        }
        if URL.is_match(trimmed) {
            external.push(trimmed.to_string());
            continue;
        }
        checked[0] += 1;
        let path = strip_location(trimmed);
        let path = path.strip_prefix("./").unwrap_or(path);
        if path.is_empty() || path.starts_with('/') || climbs_out(path) {
            problems.push(Problem {
                kind: "ref",
                text: reference.to_string(),
                line: None,
                message: format!("source_refs: `{reference}` is not a path inside the repository"),
            });
        } else if !repo.holds(&repo.root.join(path)) {
            problems.push(Problem {
                kind: "ref",
                text: reference.to_string(),
                line: None,
                message: format!("source_refs: `{reference}` does not exist in the repository"),
            });
        }
    }

    let body = Body::of(&args.text);
    let mut seen_paths = HashSet::new();
    let mut seen_links = HashSet::new();
    let mut shas: Vec<(String, usize)> = Vec::new();
    for (number, line) in body.prose_lines() {
        for found in BACKTICKED.captures_iter(line) {
            let raw = &found[1];
            let token = normalize_path(raw);
            if !is_path_candidate(token) {
                continue;
            }
            let target = if token.starts_with("../") || token.contains("/../") {
                match inside(&repo.root, &doc_dir, token) {
                    Some(target) => target,
                    None => continue,
                }
            } else {
                repo.root.join(token)
            };
            if !seen_paths.insert(target.clone()) {
                continue;
            }
            if repo.holds(&target) {
                checked[1] += 1;
                continue;
            }
            if !is_path_shaped(token, &repo.root) {
                continue;
            }
            checked[1] += 1;
            problems.push(Problem {
                kind: "path",
                text: raw.to_string(),
                line: Some(number),
                message: format!(
                    "line {number}: the path `{token}` does not exist in the repository; cite a file of the tree, or say it was removed by this fix without backticks"
                ),
            });
        }
        for found in SHA.find_iter(line) {
            let sha = found.as_str();
            let before = line[..found.start()].chars().next_back();
            let after = line[found.end()..].chars().next();
            // Part of a hyphenated id (a UUID) or of a longer word: not a commit.
            if matches!(before, Some('-' | '_' | '.')) || matches!(after, Some('-' | '_')) {
                continue;
            }
            let has_digit = sha.bytes().any(|b| b.is_ascii_digit());
            let has_letter = sha.bytes().any(|b| (b'a'..=b'f').contains(&b));
            if has_digit && has_letter && !shas.iter().any(|(s, _)| s == sha) {
                shas.push((sha.to_string(), number));
            }
        }
        for found in LINK.captures_iter(line) {
            let target = &found[1];
            let target = target
                .strip_prefix('<')
                .and_then(|t| t.strip_suffix('>'))
                .unwrap_or(target);
            if SCHEME.is_match(target) || target.starts_with('#') {
                continue;
            }
            let bare = target.split('#').next().unwrap_or_default();
            if bare.is_empty() || !seen_links.insert(bare.to_string()) {
                continue;
            }
            checked[3] += 1;
            let resolved = if let Some(from_root) = bare.strip_prefix('/') {
                inside(&repo.root, Path::new(""), from_root)
            } else {
                inside(&repo.root, &doc_dir, bare)
            };
            if !resolved.is_some_and(|path| repo.holds(&path)) {
                problems.push(Problem {
                    kind: "link",
                    text: target.to_string(),
                    line: Some(number),
                    message: format!(
                        "line {number}: link `{target}` does not resolve to a file in the repository"
                    ),
                });
            }
        }
        for pattern in SCAFFOLD.iter() {
            if let Some(found) = pattern.find(line) {
                // `[category](../x)` is a link, `[category][ref]` a reference: not placeholders.
                if found.as_str().ends_with(']') && line[found.end()..].starts_with(['(', '[']) {
                    continue;
                }
                problems.push(Problem {
                    kind: "scaffold",
                    text: found.as_str().to_string(),
                    line: Some(number),
                    message: format!(
                        "line {number}: drafting scaffold left in the text (`{}`); write the final words",
                        found.as_str().trim()
                    ),
                });
            }
        }
    }

    if !shas.is_empty() {
        match git_available(&repo.root) {
            Err(why) => notes.push(format!("{} commit SHA(s) not checked: {why}", shas.len())),
            Ok(()) => {
                for (sha, number) in &shas {
                    checked[2] += 1;
                    if !commit_exists(&repo.root, sha) {
                        problems.push(Problem {
                            kind: "sha",
                            text: sha.clone(),
                            line: Some(*number),
                            message: format!(
                                "line {number}: the commit `{sha}` does not exist in the repository (`git cat-file -e` finds none); cite the pull request instead, or drop it"
                            ),
                        });
                    }
                }
            }
        }
    }

    problems.sort_by_key(|problem| problem.line.unwrap_or(0));
    let problems: Vec<Value> = problems
        .into_iter()
        .map(|p| json!({ "kind": p.kind, "text": p.text, "line": p.line, "message": p.message }))
        .collect();
    Ok(json!({
        "problems": problems,
        "checked": { "refs": checked[0], "paths": checked[1], "shas": checked[2], "links": checked[3] },
        "external_refs": external,
        "notes": notes,
    }))
}

static URL: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^[a-zA-Z][a-zA-Z0-9+.-]*://").expect("valid"));
static SCHEME: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^[a-zA-Z][a-zA-Z0-9+.-]*:").expect("valid"));
static BACKTICKED: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"`([^`\n]+)`").expect("valid"));
static SHA: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"\b[0-9a-f]{7,40}\b").expect("valid"));
static LINK: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"\[[^\]]*\]\((<[^>\n]+>|[^)\s]+)\)").expect("valid"));
static SCAFFOLD: LazyLock<Vec<Regex>> = LazyLock::new(|| {
    [
        r"\{\{[^}\n]*\}\}",
        r"\bLearnings?\s+#?[0-9]+\b",
        r"^\s*(?:\.\.\.|…|TODO|TBD)\s*$",
        r"\[(?:category|filename|sanitized-problem-slug|problem-slug|slug)\]",
    ]
    .iter()
    .map(|pattern| Regex::new(pattern).expect("valid"))
    .collect()
});

/// The repository and what the caller is about to create in it.
struct Repo {
    root: PathBuf,
    creates: Vec<PathBuf>,
}

impl Repo {
    /// The path exists, or is (or lies above) something about to be created.
    fn holds(&self, path: &Path) -> bool {
        path.exists() || self.creates.iter().any(|created| created.starts_with(path))
    }
}

/// The body of a document, and the line its first line has in the whole document.
struct Body<'a> {
    text: &'a str,
    first_line: usize,
}

impl<'a> Body<'a> {
    fn of(text: &'a str) -> Body<'a> {
        let text = text.strip_prefix('\u{feff}').unwrap_or(text);
        let mut lines = text.split_inclusive('\n');
        if lines.next().is_some_and(|first| first.trim_end() == "---") {
            let mut offset = text.split_inclusive('\n').next().map_or(0, str::len);
            for (index, line) in lines.enumerate() {
                offset += line.len();
                if line.trim_end() == "---" {
                    return Body {
                        text: &text[offset..],
                        first_line: index + 3,
                    };
                }
            }
        }
        Body {
            text,
            first_line: 1,
        }
    }

    /// Each line outside fenced code blocks, with its number in the whole document.
    fn prose_lines(&self) -> Vec<(usize, &'a str)> {
        let mut out = Vec::new();
        let mut fence: Option<&str> = None;
        for (index, line) in self.text.lines().enumerate() {
            let trimmed = line.trim_start();
            let marker = ["```", "~~~"]
                .into_iter()
                .find(|marker| trimmed.starts_with(marker));
            match (fence, marker) {
                (None, Some(marker)) => fence = Some(marker),
                (Some(open), Some(marker)) if open == marker => fence = None,
                (None, None) => out.push((self.first_line + index, line)),
                _ => {}
            }
        }
        out
    }
}

/// `src/a.rs:12`, `src/a.rs:12-20`, `src/a.rs#L12` and `src/a.rs#L12-L20` as `src/a.rs`.
fn strip_location(text: &str) -> &str {
    static LOCATION: LazyLock<Regex> = LazyLock::new(|| {
        Regex::new(r"(?:#L[0-9]+(?:-L?[0-9]+)?|:[0-9]+(?:-[0-9]+)?)$").expect("valid")
    });
    match LOCATION.find(text) {
        Some(found) => &text[..found.start()],
        None => text,
    }
}

fn normalize_path(raw: &str) -> &str {
    let token = raw.trim().trim_end_matches(['.', ',', ';']);
    let token = strip_location(token);
    token.strip_prefix("./").unwrap_or(token)
}

/// A backticked token that may cite a path of the repository.
fn is_path_candidate(token: &str) -> bool {
    !token.is_empty()
        && token.contains('/')
        && !token.chars().any(char::is_whitespace)
        && !token.contains("://")
        && !token.starts_with(['/', '~', '#', '-'])
        && !token.starts_with("http")
        && !["origin/", "upstream/", "refs/"]
            .iter()
            .any(|prefix| token.starts_with(prefix))
        && !token.contains(['<', '>', '{', '}', '*', '$', '(', ')', '=', '"', '\''])
        && !["path/to", "...", "…"]
            .iter()
            .any(|sub| token.contains(sub))
}

/// A token missing from the tree that still reads as a path: a file name with an extension, a
/// trailing `/`, or a first segment that is a folder of the repository.
fn is_path_shaped(token: &str, root: &Path) -> bool {
    static EXTENSION: LazyLock<Regex> =
        LazyLock::new(|| Regex::new(r"\.[A-Za-z0-9]{1,8}$").expect("valid"));
    let first = token.split('/').next().unwrap_or_default();
    EXTENSION.is_match(token) || token.ends_with('/') || root.join(first).is_dir()
}

fn climbs_out(path: &str) -> bool {
    path.split('/').any(|segment| segment == "..")
}

/// `relative`, taken from the folder `from` (root-relative), as an absolute path inside the root;
/// none when it climbs out of it. Lexical: the folders on the way need not exist.
fn inside(root: &Path, from: &Path, relative: &str) -> Option<PathBuf> {
    let joined = from.join(relative);
    let mut parts: Vec<&std::ffi::OsStr> = Vec::new();
    for component in joined.components() {
        match component {
            Component::Normal(part) => parts.push(part),
            Component::ParentDir => {
                parts.pop()?;
            }
            Component::CurDir => {}
            Component::RootDir | Component::Prefix(_) => return None,
        }
    }
    let mut out = root.to_path_buf();
    out.extend(parts);
    Some(out)
}

/// An absolute path with `.` and `..` resolved lexically.
fn clean(path: &Path) -> PathBuf {
    super::paths::lexical_absolute(path)
}

fn git(root: &Path, args: &[&str]) -> std::io::Result<bool> {
    Command::new("git")
        .arg("-C")
        .arg(root)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map(|status| status.success())
}

fn git_available(root: &Path) -> Result<(), String> {
    match git(root, &["rev-parse", "--git-dir"]) {
        Ok(true) => Ok(()),
        Ok(false) => Err(format!("`{}` is not a git repository", root.display())),
        Err(_) => Err("git is unavailable".to_string()),
    }
}

fn commit_exists(root: &Path, sha: &str) -> bool {
    git(root, &["cat-file", "-e", &format!("{sha}^{{commit}}")]).unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::process::Command;

    use serde_json::{json, Value};

    use crate::builtins::{lookup, BuiltinCtx, WriteRoots};

    fn claims(root: &Path, with: Value) -> Value {
        let builtin = lookup("markdown.claims").expect("registered");
        assert!(!builtin.writes);
        let writes = WriteRoots::default();
        let ctx = BuiltinCtx::for_test(root, &writes);
        let with_schema = jsonschema::validator_for(&(builtin.with_schema)()).expect("compiles");
        assert!(with_schema.is_valid(&with), "{with}");
        let output = (builtin.run)(&with, &ctx).expect("runs");
        let schema = jsonschema::validator_for(&(builtin.output_schema)()).expect("compiles");
        assert!(schema.is_valid(&output), "{output}");
        output
    }

    fn messages(output: &Value) -> Vec<String> {
        output["problems"]
            .as_array()
            .expect("a list")
            .iter()
            .map(|p| p["message"].as_str().unwrap_or_default().to_string())
            .collect()
    }

    fn repo() -> tempfile::TempDir {
        let dir = tempfile::tempdir().expect("a temp dir");
        let root = dir.path();
        std::fs::create_dir_all(root.join("src")).expect("src");
        std::fs::create_dir_all(root.join("docs/solutions/runtime-errors")).expect("docs");
        std::fs::write(root.join("src/lib.rs"), "pub fn f() {}\n").expect("a file");
        std::fs::write(root.join("docs/solutions/runtime-errors/old.md"), "# Old\n").expect("doc");
        dir
    }

    fn git(root: &Path, args: &[&str]) -> Option<String> {
        let out = Command::new("git")
            .args(args)
            .current_dir(root)
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_AUTHOR_NAME", "T")
            .env("GIT_AUTHOR_EMAIL", "t@example.com")
            .env("GIT_COMMITTER_NAME", "T")
            .env("GIT_COMMITTER_EMAIL", "t@example.com")
            .output()
            .ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
    }

    #[test]
    fn paths_links_and_refs_resolve_or_are_named() {
        let dir = repo();
        let text = "---\ntitle: x\n---\n# T\n\nSee `src/lib.rs:3` and `src/gone.rs`, not `fix/upload-retry` or `claude/sonnet`.\n\n[old](../runtime-errors/old.md) [new](../design-patterns/) [gone](../runtime-errors/none.md) [web](https://example.com/a) [here](#t)\n";
        let out = claims(
            dir.path(),
            json!({
                "text": text, "root": ".", "doc": "docs/solutions/design-patterns/new.md",
                "refs": ["src/lib.rs:1", "src/missing.rs#L2", "../outside.rs", "https://example.com/pr/1"],
                "creates": ["docs/solutions/design-patterns/new.md"],
            }),
        );
        assert_eq!(
            messages(&out),
            [
                "source_refs: `src/missing.rs#L2` does not exist in the repository",
                "source_refs: `../outside.rs` is not a path inside the repository",
                "line 6: the path `src/gone.rs` does not exist in the repository; cite a file of the tree, or say it was removed by this fix without backticks",
                "line 8: link `../runtime-errors/none.md` does not resolve to a file in the repository",
            ]
        );
        assert_eq!(
            out["checked"],
            json!({"refs": 3, "paths": 2, "shas": 0, "links": 3})
        );
        assert_eq!(out["external_refs"], json!(["https://example.com/pr/1"]));
    }

    #[test]
    fn scaffold_is_refused_and_prose_is_not() {
        let dir = repo();
        let text = "# T\n\nAs in Learning 2, use {{ slug }}.\n\nMachine learning 2 is prose.\n\n...\n\nFile it under [category] please.\n\n```\n{{ inside a fence }} Learning 4\n```\n";
        let out = claims(
            dir.path(),
            json!({ "text": text, "root": ".", "doc": "d.md" }),
        );
        assert_eq!(
            messages(&out),
            [
                "line 3: drafting scaffold left in the text (`{{ slug }}`); write the final words",
                "line 3: drafting scaffold left in the text (`Learning 2`); write the final words",
                "line 7: drafting scaffold left in the text (`...`); write the final words",
                "line 9: drafting scaffold left in the text (`[category]`); write the final words",
            ]
        );
    }

    #[test]
    fn commit_shas_must_name_commits_of_the_repository() {
        let dir = repo();
        if git(dir.path(), &["--version"]).is_none() {
            eprintln!("skipped: git is not installed");
            return;
        }
        git(dir.path(), &["init", "-q"]).expect("init");
        git(dir.path(), &["add", "-A"]).expect("add");
        git(dir.path(), &["commit", "-q", "-m", "one"]).expect("commit");
        let head = git(dir.path(), &["rev-parse", "HEAD"]).expect("head");
        // The whole SHA: a 9-digit prefix of a random hash is all digits about once in 70 runs.
        let text = format!(
            "# T\n\nFixed in {head}; not in deadbeef12; uuid 7c0de000-0000-4000 is no sha; 20261130 has no letter.\n"
        );
        let out = claims(
            dir.path(),
            json!({ "text": text, "root": ".", "doc": "d.md" }),
        );
        assert_eq!(
            messages(&out),
            ["line 3: the commit `deadbeef12` does not exist in the repository (`git cat-file -e` finds none); cite the pull request instead, or drop it"]
        );
        assert_eq!(out["checked"]["shas"], 2);
    }

    #[test]
    fn shas_outside_a_repository_are_noted_not_refused() {
        let dir = repo();
        let out = claims(
            dir.path(),
            json!({ "text": "Fixed in abc1234.\n", "root": ".", "doc": "d.md" }),
        );
        assert!(messages(&out).is_empty(), "{out}");
        assert_eq!(out["notes"].as_array().map(Vec::len), Some(1), "{out}");
    }
}
