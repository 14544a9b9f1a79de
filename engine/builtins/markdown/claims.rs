//! Built-in: markdown.claims.
//!
//! The mechanical claims check of a Markdown document against the repository it lives in: what a
//! reader would follow must lead somewhere. It reads the body (the text after a frontmatter, when
//! there is one) and classifies what it cites, each claim with its line in the whole document and
//! a verdict from the evidence at hand:
//!
//! - `grounded`: it resolves (a path of the tree, a commit reachable from HEAD), or a path that is
//!   missing at the root names a file or folder deeper in the tree (`references/x.md` for
//!   `skills/a/references/x.md`);
//! - `broken`: it cannot hold: a given reference (`source_refs`) or a relative link that does not
//!   resolve, a commit that exists but is not reachable from HEAD (rebased away, or only on another
//!   branch), a path the document also cites as a source that is missing, drafting scaffold in
//!   prose (`{{...}}` placeholders, `Learning 3` numbering, a section that is only `...` or `TODO`,
//!   the template's `[category]`-style placeholders);
//! - `illustrative`: a missing path on a line that gives an example (`e.g.`, `for example`, `such
//!   as`, ...) or in an `Examples` section;
//! - `historical`: a missing path on a line that says it is gone (`removed`, `renamed`,
//!   `previously`, `no longer`, ...);
//! - `unsettled`: the evidence does not decide (a missing path with no marker, a SHA that names no
//!   commit here and may be another repository's or a squash-merged branch's): the caller asks
//!   someone who can read the prose.
//!
//! Only broken claims are `problems`. Code is not prose: fenced blocks are not read, and inline
//! code is never scaffold (`${{ secrets.X }}` is syntax being documented). Links are found by a
//! CommonMark parser, so none is read in code (indented or inline included) and a reference link
//! (`[text][ref]` with its `[ref]: path` definition) counts on the line it is used. A hex token is
//! taken for a commit only where its line cites one (`commit`, `SHA`, `fixed in`, `cherry-pick`, a
//! `git` command, ...): a request id or a checksum prefix is not a claim. Absolute paths are
//! checked on the disk as they are written.
//!
//! `refs` are further references to check (a frontmatter's `source_refs`): a URL is counted as
//! external and not checked; anything else must be a path inside the repository that exists.
//! `creates` names paths the caller is about to create (the document itself, its folder): they
//! count as existing, so a link into a category folder the same run creates resolves.
//!
//! Paths are resolved lexically against the root (`..` never climbs out of it) and never follow
//! the document's own folder on disk, which may not exist yet. The check reads; it never writes.

use std::cell::OnceCell;
use std::collections::{HashMap, HashSet};
use std::path::{Component, Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::LazyLock;

use regex::Regex;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::builtins::args::{self, parse};
use crate::builtins::schema::object_schema;
use crate::builtins::{paths, Builtin, BuiltinCtx, BuiltinResult};

pub(crate) fn builtins() -> Vec<Builtin> {
    vec![Builtin {
        name: "markdown.claims",
        description: "Classify what a Markdown document cites against its repository (paths, commit SHAs, relative links, drafting scaffold): grounded, broken, illustrative, historical or unsettled.",
        writes: false,
        with_schema: args::schema::<ClaimsArgs>,
        with_parse: args::parses::<ClaimsArgs>,
        output_schema,
        run,
    }]
}

const KINDS: [&str; 5] = ["ref", "path", "sha", "link", "scaffold"];
const VERDICTS: [&str; 5] = [
    "grounded",
    "broken",
    "illustrative",
    "historical",
    "unsettled",
];

fn output_schema() -> Value {
    object_schema(
        "What the document cites, each flagged claim with its verdict, and what was checked.",
        json!({
            "problems": {
                "type": "array",
                "description": "The broken claims, top to bottom: what blocks promotion; empty when nothing is broken.",
                "items": {
                    "type": "object",
                    "properties": {
                        "kind": { "enum": KINDS, "description": "What was cited: a given reference, a path, a commit, a link, or scaffold." },
                        "text": { "type": "string", "description": "The citation as written." },
                        "line": { "type": ["integer", "null"], "description": "Its 1-based line in the document; null for a given reference." },
                        "message": { "type": "string", "description": "What is wrong, as a lowercase fragment." },
                    },
                    "required": ["kind", "text", "line", "message"],
                    "additionalProperties": false,
                },
            },
            "claims": {
                "type": "array",
                "description": "Every claim that does not plainly resolve, with its verdict: the broken ones again, and those the evidence classified otherwise or left unsettled.",
                "items": {
                    "type": "object",
                    "properties": {
                        "kind": { "enum": KINDS, "description": "What was cited." },
                        "text": { "type": "string", "description": "The citation as written." },
                        "line": { "type": ["integer", "null"], "description": "Its 1-based line; null for a given reference." },
                        "verdict": { "enum": VERDICTS, "description": "What the evidence says of it." },
                        "evidence": { "type": "string", "description": "Why, as a lowercase fragment." },
                        "message": { "type": "string", "description": "What would be wrong were it broken, as a lowercase fragment." },
                        "context": { "type": "string", "description": "The line it is on, trimmed (at most 400 characters)." },
                    },
                    "required": ["kind", "text", "line", "verdict", "evidence", "message", "context"],
                    "additionalProperties": false,
                },
            },
            "checked": {
                "type": "object",
                "description": "How many citations of each kind were checked.",
                "properties": {
                    "refs": { "type": "integer", "description": "Given references that are paths (URLs not counted)." },
                    "paths": { "type": "integer", "description": "Cited paths of the body, absolute ones included." },
                    "shas": { "type": "integer", "description": "Hex tokens cited as commits." },
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
        &["problems", "claims", "checked", "external_refs", "notes"],
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

#[derive(Clone, Copy, PartialEq)]
enum Verdict {
    Grounded,
    Broken,
    Illustrative,
    Historical,
    Unsettled,
}

impl Verdict {
    fn name(self) -> &'static str {
        match self {
            Verdict::Grounded => "grounded",
            Verdict::Broken => "broken",
            Verdict::Illustrative => "illustrative",
            Verdict::Historical => "historical",
            Verdict::Unsettled => "unsettled",
        }
    }
}

struct Claim {
    kind: &'static str,
    text: String,
    line: Option<usize>,
    verdict: Verdict,
    evidence: String,
    message: String,
    context: String,
}

impl Claim {
    fn broken(kind: &'static str, text: &str, line: Option<usize>, message: String) -> Claim {
        Claim {
            kind,
            text: text.to_string(),
            line,
            verdict: Verdict::Broken,
            evidence: "it does not resolve".to_string(),
            message,
            context: String::new(),
        }
    }
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
        tracked: OnceCell::new(),
    };
    let doc_dir = Path::new(&args.doc)
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default();
    let mut claims: Vec<Claim> = Vec::new();
    let mut notes = Vec::new();
    let mut external = Vec::new();
    let mut checked = [0usize; 4];
    let mut sources: HashSet<String> = HashSet::new();

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
        sources.insert(path.to_string());
        if path.is_empty() || path.starts_with('/') || climbs_out(path) {
            claims.push(Claim::broken(
                "ref",
                reference,
                None,
                format!("source_refs: `{reference}` is not a path inside the repository"),
            ));
        } else if !repo.holds(&repo.root.join(path)) {
            claims.push(Claim::broken(
                "ref",
                reference,
                None,
                format!("source_refs: `{reference}` does not exist in the repository"),
            ));
        }
    }

    let body = Body::of(&args.text);
    let mut seen_paths = HashSet::new();
    let mut seen_links = HashSet::new();
    let mut shas: Vec<(String, usize, String)> = Vec::new();
    // Links are read by the parser over the whole body and checked on the line they start on,
    // among that line's other claims. A line the fence tracking below skips is not read for
    // links either, so every kind of claim agrees on what is code.
    let links = body.links();
    for (number, line, section) in body.prose_lines() {
        let context: String = line.trim().chars().take(400).collect();
        // The markers are read in the prose, not in the code it cites.
        let prose = mask_inline_code(line);
        let example = in_examples(section) || marked(&prose, &EXAMPLE_MARKERS);
        let history = marked(&prose, &HISTORY_MARKERS);
        for found in BACKTICKED.captures_iter(line) {
            let raw = &found[1];
            let token = normalize_path(raw);
            let absolute = is_absolute_candidate(token);
            if !absolute && !is_path_candidate(token) {
                continue;
            }
            let target = if absolute {
                PathBuf::from(token)
            } else if token.starts_with("../") || token.contains("/../") {
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
            if !absolute && !is_path_shaped(token, &repo.root) {
                continue;
            }
            checked[1] += 1;
            let message = if absolute {
                format!("line {number}: the absolute path `{token}` does not exist on this machine; cite a path of the repository, or name it without backticks")
            } else {
                format!("line {number}: the path `{token}` does not exist in the repository; cite a file of the tree, or say it was removed by this fix without backticks")
            };
            let (verdict, evidence) = if sources.contains(token) {
                (
                    Verdict::Broken,
                    "missing, and the document cites it as a source".to_string(),
                )
            } else if let Some(found) = (!absolute).then(|| repo.deeper(token)).flatten() {
                (
                    Verdict::Grounded,
                    format!("found deeper in the tree, at `{found}`"),
                )
            } else if example {
                (
                    Verdict::Illustrative,
                    "missing, on a line that gives an example".to_string(),
                )
            } else if history {
                (
                    Verdict::Historical,
                    "missing, on a line that says it is gone or was so before".to_string(),
                )
            } else {
                (
                    Verdict::Unsettled,
                    "missing, and nothing on its line says it is an example or history".to_string(),
                )
            };
            claims.push(Claim {
                kind: "path",
                text: raw.to_string(),
                line: Some(number),
                verdict,
                evidence,
                message,
                context: context.clone(),
            });
        }
        if cites_commit(line) {
            for found in SHA.find_iter(line) {
                let sha = found.as_str();
                let before = line[..found.start()].chars().next_back();
                let after = line[found.end()..].chars().next();
                // Part of a hyphenated id (a UUID), of a longer word or of a URL: not a commit here.
                if matches!(before, Some('-' | '_' | '.' | '/' | '#' | '='))
                    || matches!(after, Some('-' | '_' | '/'))
                {
                    continue;
                }
                let has_digit = sha.bytes().any(|b| b.is_ascii_digit());
                let has_letter = sha.bytes().any(|b| (b'a'..=b'f').contains(&b));
                if has_digit && has_letter && !shas.iter().any(|(s, _, _)| s == sha) {
                    shas.push((sha.to_string(), number, context.clone()));
                }
            }
        }
        for target in links.get(&number).into_iter().flatten() {
            let target = target.as_str();
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
                let mut claim = Claim::broken(
                    "link",
                    target,
                    Some(number),
                    format!(
                        "line {number}: link `{target}` does not resolve to a file in the repository"
                    ),
                );
                claim.context = context.clone();
                claims.push(claim);
            }
        }
        for pattern in SCAFFOLD.iter() {
            if let Some(found) = pattern.find(&prose) {
                // `[category](../x)` is a link, `[category][ref]` a reference: not placeholders.
                if found.as_str().ends_with(']') && prose[found.end()..].starts_with(['(', '[']) {
                    continue;
                }
                let mut claim = Claim::broken(
                    "scaffold",
                    found.as_str(),
                    Some(number),
                    format!(
                        "line {number}: drafting scaffold left in the text (`{}`); write the final words",
                        found.as_str().trim()
                    ),
                );
                claim.evidence = "drafting scaffold in prose".to_string();
                claim.context = context.clone();
                claims.push(claim);
            }
        }
    }

    if !shas.is_empty() {
        match git_available(&repo.root) {
            Err(why) => notes.push(format!("{} commit SHA(s) not checked: {why}", shas.len())),
            Ok(()) => {
                for (sha, number, context) in shas {
                    checked[2] += 1;
                    let exists = commit_exists(&repo.root, &sha);
                    if exists && reachable(&repo.root, &sha) {
                        continue;
                    }
                    let (verdict, evidence, message) = if exists {
                        (
                            Verdict::Broken,
                            "the commit exists but HEAD does not contain it".to_string(),
                            format!("line {number}: the commit `{sha}` exists but is not reachable from HEAD (`git merge-base --is-ancestor` says no: rebased away, or only on another branch); cite the pull request instead, or drop it"),
                        )
                    } else {
                        (
                            Verdict::Unsettled,
                            "no commit of this repository has it: another repository's, a squash-merged branch's, or made up".to_string(),
                            format!("line {number}: the commit `{sha}` does not exist in the repository (`git cat-file -e` finds none); cite the pull request instead, or drop it"),
                        )
                    };
                    claims.push(Claim {
                        kind: "sha",
                        text: sha,
                        line: Some(number),
                        verdict,
                        evidence,
                        message,
                        context,
                    });
                }
            }
        }
    }

    claims.sort_by_key(|claim| claim.line.unwrap_or(0));
    let problems: Vec<Value> = claims
        .iter()
        .filter(|c| c.verdict == Verdict::Broken)
        .map(|c| json!({ "kind": c.kind, "text": c.text, "line": c.line, "message": c.message }))
        .collect();
    let claims: Vec<Value> = claims
        .iter()
        .map(|c| {
            json!({
                "kind": c.kind, "text": c.text, "line": c.line, "verdict": c.verdict.name(),
                "evidence": c.evidence, "message": c.message, "context": c.context,
            })
        })
        .collect();
    Ok(json!({
        "problems": problems,
        "claims": claims,
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

/// Words that make a line cite a commit, so that a hex token on it is taken for one.
static COMMIT_CONTEXT: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"(?i)\b(?:commits?|committed|sha1?s?|fixed (?:in|by)|fix (?:landed|shipped) in|landed (?:in|as)|merged (?:in|as)|squash(?:ed)?|cherry-?pick(?:ed)?|revert(?:ed|s)?|rebased?|bisect(?:ed)?|introduced (?:in|by)|git (?:show|log|checkout|switch|reset|revert|cherry-pick|diff|blame|rebase))\b",
    )
    .expect("valid")
});

/// Words that make a line an example: a missing path on it illustrates.
static EXAMPLE_MARKERS: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)(?:\be\.g\.|\bfor (?:example|instance)\b|\bsuch as\b|\bexamples?\b|\billustrat\w*|\bhypothetical\w*|\bplaceholders?\b|\bsample\b|\bfixtures?\b|\bimagine\b)")
        .expect("valid")
});

/// Words that make a line history: a missing path on it is gone, or was so before the fix.
static HISTORY_MARKERS: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)\b(?:removed|deleted|renamed|moved|gone|previously|formerly|earlier|originally|used to|no longer|legacy|obsolete|deprecated|replaced|pre-fix|before the fix|at the time|historical(?:ly)?|old)\b")
        .expect("valid")
});

fn marked(line: &str, markers: &Regex) -> bool {
    markers.is_match(line)
}

/// A line cites a commit: `SHA-256` and `sha256` name checksums, not commits.
fn cites_commit(line: &str) -> bool {
    COMMIT_CONTEXT.find_iter(line).any(|found| {
        let word = found.as_str().to_ascii_lowercase();
        !(word.starts_with("sha") && line[found.end()..].starts_with(['-', '2', '5']))
    })
}

/// The section an `Examples` heading opens (or one under it) illustrates.
fn in_examples(section: &str) -> bool {
    let lower = section.to_ascii_lowercase();
    lower == "examples" || lower == "example" || lower.starts_with("example ")
}

/// The line with every inline code span blanked: code is never scaffold.
fn mask_inline_code(line: &str) -> String {
    BACKTICKED
        .replace_all(line, |found: &regex::Captures| " ".repeat(found[0].len()))
        .into_owned()
}

/// The repository and what the caller is about to create in it.
struct Repo {
    root: PathBuf,
    creates: Vec<PathBuf>,
    /// The tree's files, root-relative, read once when a missing path is looked for deeper.
    tracked: OnceCell<Vec<String>>,
}

impl Repo {
    /// The path exists, or is (or lies above) something about to be created.
    fn holds(&self, path: &Path) -> bool {
        path.exists() || self.creates.iter().any(|created| created.starts_with(path))
    }

    /// A file or folder of the tree whose path ends with `token` (at a `/`), when there is one.
    fn deeper(&self, token: &str) -> Option<String> {
        let tracked = self.tracked.get_or_init(|| tree_files(&self.root));
        let needle = format!("/{}", token.trim_start_matches('/'));
        if token.ends_with('/') {
            tracked.iter().find_map(|file| {
                let at = format!("/{file}").find(&needle)?;
                Some(file[..at + needle.len() - 1].to_string())
            })
        } else {
            tracked
                .iter()
                .find(|file| format!("/{file}").ends_with(&needle))
                .cloned()
        }
    }
}

/// The tree's files: what git tracks, or (no git) what a walk finds, at most 100,000.
fn tree_files(root: &Path) -> Vec<String> {
    let listed = Command::new("git")
        .arg("-C")
        .arg(root)
        .args(["-c", "core.quotePath=false", "ls-files", "-z"])
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output();
    if let Ok(out) = listed {
        if out.status.success() {
            return out
                .stdout
                .split(|b| *b == 0)
                .filter(|name| !name.is_empty())
                .map(|name| String::from_utf8_lossy(name).into_owned())
                .collect();
        }
    }
    walkdir::WalkDir::new(root)
        .into_iter()
        .filter_entry(|entry| entry.file_name() != ".git")
        .flatten()
        .filter(|entry| entry.file_type().is_file())
        .take(100_000)
        .filter_map(|entry| {
            let rel = entry.path().strip_prefix(root).ok()?;
            Some(rel.to_string_lossy().replace('\\', "/"))
        })
        .collect()
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

    /// Each line outside fenced code blocks, with its number in the whole document and the
    /// heading of the level-2 section it is in (empty before the first).
    fn prose_lines(&self) -> Vec<(usize, &'a str, &'a str)> {
        let mut out = Vec::new();
        let mut fence: Option<&str> = None;
        let mut section = "";
        for (index, line) in self.text.lines().enumerate() {
            let trimmed = line.trim_start();
            let marker = ["```", "~~~"]
                .into_iter()
                .find(|marker| trimmed.starts_with(marker));
            match (fence, marker) {
                (None, Some(marker)) => fence = Some(marker),
                (Some(open), Some(marker)) if open == marker => fence = None,
                (None, None) => {
                    if let Some(heading) = line.strip_prefix("## ") {
                        section = heading.trim();
                    }
                    out.push((self.first_line + index, line, section));
                }
                _ => {}
            }
        }
        out
    }

    /// The destination of every link and image in the body, by the line of the whole document
    /// it starts on, read by a CommonMark parser: a reference link (`[text][ref]`, `[ref][]`,
    /// `[ref]`) counts where it is used, since that is where a reader follows it, and code
    /// (fenced, indented or inline) holds none. Autolinks (`<https://...>`, `<a@b.c>`) are
    /// left out: they are never relative, and an e-mail address has no scheme to show it.
    fn links(&self) -> HashMap<usize, Vec<String>> {
        use pulldown_cmark::{Event, LinkType, Options, Parser, Tag};
        let newlines: Vec<usize> = self.text.match_indices('\n').map(|(at, _)| at).collect();
        let mut out: HashMap<usize, Vec<String>> = HashMap::new();
        let options = Options::ENABLE_TABLES | Options::ENABLE_FOOTNOTES;
        for (event, range) in Parser::new_ext(self.text, options).into_offset_iter() {
            let Event::Start(
                Tag::Link {
                    link_type,
                    dest_url,
                    ..
                }
                | Tag::Image {
                    link_type,
                    dest_url,
                    ..
                },
            ) = event
            else {
                continue;
            };
            if matches!(link_type, LinkType::Autolink | LinkType::Email) {
                continue;
            }
            let line = self.first_line + newlines.partition_point(|&at| at < range.start);
            out.entry(line).or_default().push(dest_url.into_string());
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

/// Characters that make a token syntax (a template, a glob, a call), not a path.
const NOT_PATH: [char; 12] = ['<', '>', '{', '}', '*', '$', '(', ')', '=', '"', '\'', ':'];

/// A backticked token that may cite a path of the repository.
fn is_path_candidate(token: &str) -> bool {
    !token.is_empty()
        && token.contains('/')
        && !token.chars().any(char::is_whitespace)
        && !token.contains("://")
        && !token.starts_with(['/', '~', '#', '-', '@'])
        && !token.starts_with("http")
        && !["origin/", "upstream/", "refs/"]
            .iter()
            .any(|prefix| token.starts_with(prefix))
        && !token.contains(NOT_PATH)
        && !["path/to", "...", "…"]
            .iter()
            .any(|sub| token.contains(sub))
}

/// A backticked absolute path: `/` then at least two segments, or one with an extension; a
/// slash command (`/ce:plan`) or a route (`/api`) is not one.
fn is_absolute_candidate(token: &str) -> bool {
    static EXTENSION: LazyLock<Regex> =
        LazyLock::new(|| Regex::new(r"\.[A-Za-z0-9]{1,8}$").expect("valid"));
    let Some(rest) = token.strip_prefix('/') else {
        return false;
    };
    !rest.is_empty()
        && !rest.starts_with('/')
        && !token.chars().any(char::is_whitespace)
        && !token.contains(NOT_PATH)
        && !["...", "…", "path/to"]
            .iter()
            .any(|sub| token.contains(sub))
        && (rest.trim_end_matches('/').contains('/') || EXTENSION.is_match(rest))
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
    paths::lexical_absolute(path)
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

/// HEAD contains the commit: what "fixed in" must mean for a reader of this tree.
fn reachable(root: &Path, sha: &str) -> bool {
    git(root, &["merge-base", "--is-ancestor", sha, "HEAD"]).unwrap_or(false)
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
                "line 8: link `../runtime-errors/none.md` does not resolve to a file in the repository",
            ]
        );
        assert_eq!(
            out["checked"],
            json!({"refs": 3, "paths": 2, "shas": 0, "links": 3})
        );
        assert_eq!(out["external_refs"], json!(["https://example.com/pr/1"]));
        // A missing path with nothing around it to say why is left to someone who reads prose.
        assert_eq!(
            verdicts(&out),
            [
                ("src/missing.rs#L2".to_string(), "broken"),
                ("../outside.rs".to_string(), "broken"),
                ("src/gone.rs".to_string(), "unsettled"),
                ("../runtime-errors/none.md".to_string(), "broken")
            ]
        );
    }

    #[test]
    fn reference_links_are_read_where_they_are_used() {
        let dir = repo();
        // A broken reference link is reported on the line of its use, where a reader follows it,
        // not on the line of its definition; one definition used twice is one link.
        let text = "---\ntitle: x\n---\n# T\n\nSee [the fix][fix] and [the old one][old].\n\nAgain [the fix][fix], then [gone][] and [lost].\n\n[fix]: ../../../src/lib.rs\n[old]: ../runtime-errors/old.md\n[gone]: ../runtime-errors/gone.md\n[lost]: /src/lost.rs\n";
        let out = claims(
            dir.path(),
            json!({ "text": text, "root": ".", "doc": "docs/solutions/design-patterns/new.md" }),
        );
        assert_eq!(
            messages(&out),
            [
                "line 8: link `../runtime-errors/gone.md` does not resolve to a file in the repository",
                "line 8: link `/src/lost.rs` does not resolve to a file in the repository",
            ]
        );
        assert_eq!(out["checked"]["links"], 4, "{out}");
        assert_eq!(
            out["claims"][0]["context"],
            "Again [the fix][fix], then [gone][] and [lost]."
        );
    }

    #[test]
    fn a_link_with_a_title_names_its_destination() {
        let dir = repo();
        let text = "# T\n\n[x](missing.md \"t\") and [y](<docs/with space.md> 'u') and [z](src/lib.rs (v)).\n";
        let out = claims(
            dir.path(),
            json!({ "text": text, "root": ".", "doc": "d.md" }),
        );
        assert_eq!(
            messages(&out),
            [
                "line 3: link `missing.md` does not resolve to a file in the repository",
                "line 3: link `docs/with space.md` does not resolve to a file in the repository",
            ]
        );
        assert_eq!(out["checked"]["links"], 3, "{out}");
    }

    #[test]
    fn links_in_code_are_not_read() {
        let dir = repo();
        // Fenced, indented and inline code all show Markdown as written; only the last line links.
        let text = "# T\n\n```md\n[a](fenced.md)\n```\n\n    [b](indented.md)\n\nWrite `[c](inline.md)` for a link.\n\n![d](missing.png)\n";
        let out = claims(
            dir.path(),
            json!({ "text": text, "root": ".", "doc": "d.md" }),
        );
        assert_eq!(
            messages(&out),
            ["line 11: link `missing.png` does not resolve to a file in the repository"]
        );
        assert_eq!(out["checked"]["links"], 1, "{out}");
    }

    fn verdicts(output: &Value) -> Vec<(String, &str)> {
        output["claims"]
            .as_array()
            .expect("a list")
            .iter()
            .map(|c| {
                (
                    c["text"].as_str().unwrap_or_default().to_string(),
                    c["verdict"].as_str().unwrap_or_default(),
                )
            })
            .collect()
    }

    #[test]
    fn missing_paths_are_classified_by_the_prose_around_them() {
        let dir = repo();
        std::fs::create_dir_all(dir.path().join("skills/a/references")).expect("a folder");
        std::fs::write(dir.path().join("skills/a/references/handoff.md"), "x\n").expect("a file");
        let absolute = dir.path().join("src/lib.rs");
        let text = format!(
            "# T\n\nName files by skill, e.g. `ce/brainstorm/`.\n\nThe fix removed `src/stream_reader.rs`.\n\nRouting lives in `references/handoff.md` and `skills/a/references/`.\n\nRead `{}` and `/nonexistent/place/file.txt`; `/ce:plan` is a command.\n\nBuild `src/cited.rs`.\n\n## Examples\n\n`fixtures/app/src/math.js` divides by zero.\n",
            absolute.display()
        );
        let out = claims(
            dir.path(),
            json!({ "text": text, "root": ".", "doc": "d.md", "refs": ["src/cited.rs"] }),
        );
        assert_eq!(
            verdicts(&out),
            [
                ("src/cited.rs".to_string(), "broken"),
                ("ce/brainstorm/".to_string(), "illustrative"),
                ("src/stream_reader.rs".to_string(), "historical"),
                ("references/handoff.md".to_string(), "grounded"),
                ("/nonexistent/place/file.txt".to_string(), "unsettled"),
                ("src/cited.rs".to_string(), "broken"),
                ("fixtures/app/src/math.js".to_string(), "illustrative"),
            ]
        );
        assert!(
            out["claims"][3]["evidence"]
                .as_str()
                .unwrap_or_default()
                .contains("skills/a/references/handoff.md"),
            "{out}"
        );
        assert!(
            out["claims"][4]["message"]
                .as_str()
                .unwrap_or_default()
                .contains("the absolute path `/nonexistent/place/file.txt` does not exist"),
            "{out}"
        );
        // Both cited paths that do not resolve block: the source_ref and the body's citation of it.
        assert_eq!(messages(&out).len(), 2, "{out}");
    }

    #[test]
    fn scaffold_is_refused_and_prose_is_not() {
        let dir = repo();
        let text = "# T\n\nAs in Learning 2, use {{ slug }}.\n\nMachine learning 2 is prose.\n\n...\n\nFile it under [category] please.\n\n```\n{{ inside a fence }} Learning 4\n```\n\nPass `${{ secrets.TOKEN }}` and `{{ run.id }}` as written.\n";
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
        // A commit rebased away: it exists, HEAD does not contain it.
        std::fs::write(dir.path().join("src/lib.rs"), "pub fn g() {}\n").expect("a change");
        git(dir.path(), &["commit", "-q", "-am", "two"]).expect("commit");
        let away = git(dir.path(), &["rev-parse", "HEAD"]).expect("head");
        git(dir.path(), &["reset", "-q", "--hard", "HEAD~1"]).expect("reset");
        let text = format!(
            "# T\n\nFixed in {head}; not in deadbeef12; uuid 7c0de000-0000-4000 is no sha; 20261130 has no letter.\n\nThe commit {away} landed it.\n\nRequest id 4f3a9c2e1b and the sha256 prefix `a3f9c21d` name nothing of git.\n"
        );
        let out = claims(
            dir.path(),
            json!({ "text": text, "root": ".", "doc": "d.md" }),
        );
        assert_eq!(
            messages(&out),
            [format!("line 5: the commit `{away}` exists but is not reachable from HEAD (`git merge-base --is-ancestor` says no: rebased away, or only on another branch); cite the pull request instead, or drop it")]
        );
        assert_eq!(
            verdicts(&out),
            [
                ("deadbeef12".to_string(), "unsettled"),
                (away.clone(), "broken")
            ]
        );
        assert_eq!(out["checked"]["shas"], 3);
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
