//! The shipped `compound` workflow, run by the real binary on a real git repository. The `sonnet`
//! alias is answered by one script that reads the `Role: ...` line of the prompt and replies with
//! `replies/<role>.json`, so one alias serves every model stage; it also logs each call and saves
//! the prompt, and runs `hooks/<role>.sh` first when a test wants something to happen mid-run (a
//! concurrent edit). `gh` is a stub that fails, and the clock is pinned (`STAGEGRAPH_NOW`).

use std::fs;
use std::path::PathBuf;
use std::process::Command;

use serde_json::{json, Value};
use yaml_rust2::{Yaml, YamlLoader};

use crate::support::{copy_tree, fixtures, make_executable, repo_root, stage, Output, Test};

const TODAY: &str = "2026-11-30";
const NOW: &str = "2026-11-30T12:00:00Z";
const DOC: &str = "repo/docs/solutions/runtime-errors/upload-retry-empty-body.md";
const BUG_HEADINGS: [&str; 6] = [
    "## Problem",
    "## Symptoms",
    "## What Didn't Work",
    "## Solution",
    "## Why This Works",
    "## Prevention",
];

/// Answers by role; logs the role; saves the prompt; runs a hook first when there is one.
const MODEL_SCRIPT: &str = r#"dir=$(dirname "$0")
prompt=$(cat)
role=$(printf '%s\n' "$prompt" | sed -n 's/^Role: //p' | head -n 1 | tr 'A-Z ' 'a-z-')
printf '%s\n' "$role" >> "$dir/calls.log"
printf '%s' "$prompt" > "$dir/prompts/$role.txt"
if [ -f "$dir/hooks/$role.sh" ]; then sh "$dir/hooks/$role.sh"; fi
if [ -f "$dir/replies/$role.json" ]; then cat "$dir/replies/$role.json"; else echo "no reply for role '$role'" >&2; exit 1; fi
"#;

/// The Claims Adjudicator, answering from its prompt: one verdict per flag it is given, the one
/// `model/verdicts.txt` names for the claim's text (`text<TAB>verdict` lines), else `broken`.
const ADJUDICATOR_HOOK: &str = r#"dir=$(dirname "$0")/..
out="$dir/replies/claims-adjudicator.json"
printf '{"verdicts": [' > "$out"
sep=''
sed -n 's/^- [a-z]* `\(.*\)` on line \([0-9]*\): .*/\1\t\2/p' "$dir/prompts/claims-adjudicator.txt" | while IFS="$(printf '\t')" read -r text line; do
  verdict=$(awk -F'\t' -v t="$text" '$1 == t { print $2; exit }' "$dir/verdicts.txt" 2>/dev/null)
  [ -n "$verdict" ] || verdict=broken
  printf '%s{"text": "%s", "line": %s, "verdict": "%s", "reason": "judged %s from its line"}' "$sep" "$text" "$line" "$verdict" "$verdict" >> "$out"
  sep=', '
done
printf ']}\n' >> "$out"
"#;

/// The Promotion Judge, answering from its prompt: every source_ref it is given grounds the
/// learning unless `model/irrelevant.txt` lists it; the invalidation condition is specific unless
/// `model/vague.txt` lists it.
const JUDGE_HOOK: &str = r#"dir=$(dirname "$0")/..
prompt="$dir/prompts/promotion-judge.txt"
out="$dir/replies/promotion-judge.json"
printf '{"refs": [' > "$out"
sep=''
sed -n 's/^- source_ref: `\(.*\)`$/\1/p' "$prompt" | while read -r ref; do
  grounds=true
  if grep -qxF "$ref" "$dir/irrelevant.txt" 2>/dev/null; then grounds=false; fi
  printf '%s{"ref": "%s", "grounds": %s, "reason": "judged from the prompt"}' "$sep" "$ref" "$grounds" >> "$out"
  sep=', '
done
condition=$(sed -n 's/^- invalidation_condition: `\(.*\)`$/\1/p' "$prompt")
specific=true
if grep -qxF "$condition" "$dir/vague.txt" 2>/dev/null; then specific=false; fi
printf '], "invalidation_condition": {"specific": %s, "reason": "judged from the prompt"}}\n' "$specific" >> "$out"
"#;

/// A temporary folder holding the target repository (`repo/`, a git repository with one commit),
/// the model script and its replies, and the `stagegraph.toml` that points `sonnet` at it.
struct Project {
    test: Test,
}

impl Project {
    fn new() -> Project {
        let test = Test::new();
        let project = Project { test };
        copy_tree(&fixtures("compound/repo"), &project.path("repo"));
        project.git(&["init", "-q", "-b", "fix/upload-retry"]);
        project.commit("the upload client buffers its body");
        copy_tree(
            &fixtures("compound/replies"),
            &project.path("model/replies"),
        );
        fs::create_dir_all(project.path("model/prompts")).expect("a prompts folder");
        project.test.write("model/model.sh", MODEL_SCRIPT);
        project.hook("claims-adjudicator", ADJUDICATOR_HOOK);
        project.hook("promotion-judge", JUDGE_HOOK);
        project.test.write(
            "bin/gh",
            "#!/bin/sh\necho 'gh: unavailable in tests' >&2\nexit 1\n",
        );
        make_executable(&project.path("bin/gh"));
        project.test.write(
            "stagegraph.toml",
            &format!(
                "[models.sonnet]\nprovider = \"command\"\ncommand = [\"sh\", \"{}\"]\n",
                project.path("model/model.sh").display()
            ),
        );
        project
    }

    fn path(&self, relative: &str) -> PathBuf {
        self.test.path(relative)
    }

    fn git(&self, args: &[&str]) {
        let status = Command::new("git")
            .args(args)
            .current_dir(self.path("repo"))
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_AUTHOR_NAME", "Test")
            .env("GIT_AUTHOR_EMAIL", "test@example.com")
            .env("GIT_COMMITTER_NAME", "Test")
            .env("GIT_COMMITTER_EMAIL", "test@example.com")
            .status()
            .expect("run git");
        assert!(status.success(), "git {args:?} failed");
    }

    fn commit(&self, message: &str) {
        self.git(&["add", "-A"]);
        self.git(&["commit", "-q", "-m", message]);
    }

    /// Replace the reply of one role.
    fn reply(&self, role: &str, value: &Value) {
        self.test.write(
            &format!("model/replies/{role}.json"),
            &serde_json::to_string_pretty(value).expect("JSON"),
        );
    }

    /// The fixture reply of one role, to change a field of it.
    fn fixture_reply(role: &str) -> Value {
        let text = fs::read_to_string(fixtures("compound/replies").join(format!("{role}.json")))
            .expect("a fixture reply");
        serde_json::from_str(&text).expect("the fixture reply is JSON")
    }

    /// The Context Analyzer's fixture reply with another frontmatter skeleton.
    fn analyzer_frontmatter(&self, frontmatter: &str) {
        let mut reply = Project::fixture_reply("context-analyzer");
        reply["frontmatter"] = json!(frontmatter);
        self.reply("context-analyzer", &reply);
    }

    /// A shell script run by the model script before it answers `role`.
    fn hook(&self, role: &str, script: &str) {
        self.test.write(&format!("model/hooks/{role}.sh"), script);
    }

    /// `stagegraph run compound` on `repo/` with the session transcript and a hint, dispatch
    /// authorized: the three research roles answer separately.
    fn run(&self, extra: &[&str]) -> Output {
        let mut all = vec!["--input", "authorize_dispatch=true"];
        all.extend_from_slice(extra);
        self.run_plain(&all)
    }

    /// The same without authorizing dispatch: the roles run inline, in one model call, whose
    /// reply is made of the roles' replies.
    fn run_plain(&self, extra: &[&str]) -> Output {
        self.compose_inline_replies();
        let mut args: Vec<String> = vec![
            "run".into(),
            "compound".into(),
            "--input".into(),
            "repo=repo".into(),
            "--input".into(),
            format!(
                "transcript_path={}",
                fixtures("compound/session.jsonl").display()
            ),
            "--input".into(),
            "context=the upload retry fix".into(),
        ];
        args.extend(extra.iter().map(std::string::ToString::to_string));
        self.test
            .command(args)
            .env("PATH", &self.search_path())
            .env("STAGEGRAPH_NOW", NOW)
            .output()
    }

    /// The inline research reply and the Lightweight pass's, made of the roles' current replies
    /// (unless a test wrote its own).
    fn compose_inline_replies(&self) {
        let read = |role: &str| -> Value {
            serde_json::from_str(&self.test.read(&format!("model/replies/{role}.json")))
                .expect("a reply is JSON")
        };
        let (context, solution) = (read("context-analyzer"), read("solution-extractor"));
        if !self.path("model/custom/inline-research").exists() {
            let related = read("related-docs-finder");
            self.test.write(
                "model/replies/inline-research.json",
                &json!({"context": context, "solution": solution, "related": related}).to_string(),
            );
        }
        if !self.path("model/custom/lightweight-pass").exists() {
            self.test.write(
                "model/replies/lightweight-pass.json",
                &json!({"context": context, "solution": solution}).to_string(),
            );
        }
    }

    /// `stagegraph resume last`, with the same environment as `run`.
    fn resume(&self) -> Output {
        self.test
            .command(["resume", "last"])
            .env("PATH", &self.search_path())
            .env("STAGEGRAPH_NOW", NOW)
            .output()
    }

    /// `bin/` (the `gh` stub) first.
    fn search_path(&self) -> String {
        format!(
            "{}:{}",
            self.path("bin").display(),
            std::env::var("PATH").unwrap_or_default()
        )
    }

    /// The roles the model was asked for, in order.
    fn calls(&self) -> Vec<String> {
        self.test
            .read_opt("model/calls.log")
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect()
    }

    fn prompt(&self, role: &str) -> String {
        self.test.read(&format!("model/prompts/{role}.txt"))
    }

    fn record(&self) -> Value {
        self.test.last_run()
    }

    /// Every file under `repo/docs/solutions/`, repo-relative, sorted.
    fn solutions(&self) -> Vec<String> {
        let root = self.path("repo");
        let mut found: Vec<String> = walkdir::WalkDir::new(root.join("docs/solutions"))
            .into_iter()
            .flatten()
            .filter(|entry| entry.file_type().is_file())
            .map(|entry| {
                entry
                    .path()
                    .strip_prefix(&root)
                    .expect("inside the repo")
                    .display()
                    .to_string()
            })
            .collect();
        found.sort();
        found
    }
}

/// A document's frontmatter, parsed by a YAML parser, and its body.
fn split(document: &str) -> (Yaml, String) {
    let rest = document
        .strip_prefix("---\n")
        .unwrap_or_else(|| panic!("no opening delimiter:\n{document}"));
    let end = rest
        .find("\n---\n")
        .unwrap_or_else(|| panic!("no closing delimiter:\n{document}"));
    let mut docs = YamlLoader::load_from_str(&rest[..end])
        .unwrap_or_else(|e| panic!("the frontmatter does not parse ({e}):\n{document}"));
    (docs.remove(0), rest[end + 5..].to_string())
}

/// Assert the run ended early at `stage`, with exit code 0, its message containing `needle`.
fn assert_exited(out: &Output, record: &Value, stage_id: &str, needle: &str) {
    out.code(0);
    // The reason, then the terminal line: no completion signal.
    assert!(
        out.stdout
            .ends_with("\nNothing was written.\n\nDocumentation skipped\n"),
        "{}",
        out.stdout
    );
    assert!(out.stdout.contains(needle), "{}", out.stdout);
    assert_eq!(record["status"], "exited", "{record:#}");
    assert_eq!(record["exit"]["stage"], stage_id, "{record:#}");
    let message = record["exit"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains(needle),
        "exit message lacks {needle:?}: {message}"
    );
}

fn status<'r>(record: &'r Value, id: &str) -> &'r str {
    stage(record, id)["status"].as_str().unwrap_or_default()
}

#[test]
fn a_solved_verified_fix_becomes_a_validated_grounded_doc() {
    let project = Project::new();
    let out = project.run(&[]);
    out.code(0);
    let record = project.record();
    assert_eq!(record["status"], "completed", "{record:#}");

    // The completion output: the mode first, then the written path.
    let mut lines = out.stdout.lines();
    assert_eq!(lines.next(), Some("Ran Full mode."), "{}", out.stdout);
    assert_eq!(
        lines.next(),
        Some("Wrote docs/solutions/runtime-errors/upload-retry-empty-body.md (bug track, runtime_error)."),
        "{}",
        out.stdout
    );
    assert!(out
        .stdout
        .contains("Session history: skipped (restricted_read_authorization_missing)."));
    assert!(out.stdout.contains("GitHub issue search: skipped"));

    // Nothing else in docs/solutions/, and the doc's frontmatter parses with what the gate requires.
    assert_eq!(
        project.solutions(),
        ["docs/solutions/runtime-errors/upload-retry-empty-body.md"]
    );
    let doc = project.test.read(DOC);
    let (frontmatter, body) = split(&doc);
    assert_eq!(
        frontmatter["title"].as_str(),
        Some("Upload retries send an empty body")
    );
    assert_eq!(frontmatter["category"].as_str(), Some("runtime-errors"));
    assert_eq!(
        frontmatter["invalidation_condition"].as_str(),
        Some("upload() stops buffering the body before its retry loop")
    );
    let refs = frontmatter["source_refs"]
        .as_vec()
        .expect("source_refs is a list");
    assert_eq!(refs.len(), 2);
    for source_ref in refs {
        let path = source_ref.as_str().expect("a string").split(':').next();
        let path = project.path("repo").join(path.expect("a path"));
        assert!(path.is_file(), "{} does not exist", path.display());
    }

    // The title, then the bug track's sections in the template's order.
    assert!(
        body.starts_with("\n# Upload retries send an empty body\n"),
        "{body}"
    );
    let mut from = 0;
    for heading in BUG_HEADINGS {
        let at = body[from..]
            .find(&format!("\n{heading}\n"))
            .unwrap_or_else(|| panic!("{heading} missing or out of order:\n{body}"));
        from += at + heading.len();
    }
    assert!(body.contains("let buffered = body.to_vec();"));
    assert!(doc.ends_with("checks the body of the second.\n"), "{doc:?}");

    // Three research roles, each once, after triage; the vocabulary role last or alongside.
    let calls = project.calls();
    assert_eq!(calls[0], "triage");
    for role in [
        "context-analyzer",
        "solution-extractor",
        "related-docs-finder",
        "vocabulary-capture",
    ] {
        assert_eq!(
            calls.iter().filter(|c| *c == role).count(),
            1,
            "{role}: {calls:?}"
        );
    }
    assert!(!calls.contains(&"update-merger".to_string()));

    // Pre-resolved context and the transcript reached the roles.
    let triage = project.prompt("triage");
    assert!(
        triage.contains("- Git branch: fix/upload-retry"),
        "{triage}"
    );
    assert!(triage.contains("Context hint from the user: the upload retry fix"));
    assert!(triage.contains("reuses the request body stream"));
    assert!(triage.contains("src/upload.rs"), "tracked files listed");
    assert!(
        !triage.contains("test upload::retry_resends_the_body"),
        "tool results are not prose"
    );

    // CONCEPTS.md: the grounded term added, the ungrounded one dropped.
    let concepts = project.test.read("repo/CONCEPTS.md");
    assert!(
        concepts.contains("- **Upload client**: The module that sends files"),
        "{concepts}"
    );
    assert!(!concepts.contains("Ghost term"), "{concepts}");
    assert!(
        out.stdout.contains("CONCEPTS.md: added Upload client."),
        "{}",
        out.stdout
    );
}

#[test]
fn a_skeleton_wrapped_in_its_own_delimiters_is_unwrapped() {
    let project = Project::new();
    let skeleton = Project::fixture_reply("context-analyzer")["frontmatter"]
        .as_str()
        .expect("a skeleton")
        .to_string();
    project.analyzer_frontmatter(&format!("---\n{skeleton}---\n"));
    project.run(&[]).code(0);
    let doc = project.test.read(DOC);
    assert!(
        doc.starts_with("---\ntitle: Upload retries send an empty body\n"),
        "{doc}"
    );
    assert_eq!(doc.matches("\n---\n").count(), 1, "{doc}");
}

#[test]
fn concepts_md_is_append_merged_and_existing_terms_are_not_repeated() {
    let project = Project::new();
    project.test.write(
        "repo/CONCEPTS.md",
        "# Concepts\n\n- **Upload client**: already defined by hand.\n\n## Retry budget\n\nA heading form.\n\n| Term | Meaning |\n|---|---|\n| Send attempt | a table form |\n\n**Target writers** write targets.\n",
    );
    project.commit("concepts");
    let mut reply = Project::fixture_reply("vocabulary-capture");
    let terms = reply["terms"].as_array_mut().expect("terms");
    terms.clear();
    // The same terms in other forms: a heading, a table cell (another case and punctuation), a
    // singular of a bolded plural; then one new term, twice.
    for term in ["retry budget", "Send-ATTEMPT", "Target writer"] {
        terms.push(
            json!({"term": term, "definition": "Already there.", "source_ref": "src/upload.rs"}),
        );
    }
    for _ in 0..2 {
        terms.push(json!({"term": "Buffered body", "definition": "The request body copied once so every attempt sends it whole.", "source_ref": "src/upload.rs:5"}));
    }
    project.reply("vocabulary-capture", &reply);
    project.run(&[]).code(0);
    assert_eq!(
        project.test.read("repo/CONCEPTS.md"),
        "# Concepts\n\n- **Upload client**: already defined by hand.\n\n## Retry budget\n\nA heading form.\n\n| Term | Meaning |\n|---|---|\n| Send attempt | a table form |\n\n**Target writers** write targets.\n\n- **Buffered body**: The request body copied once so every attempt sends it whole. (source: `src/upload.rs:5`)\n"
    );
}

/// The hard exits: each one ends the run at its stage, exit code 0, with its reason, before any
/// research role is asked and with nothing written.
#[test]
fn hard_exits_end_the_run_before_research_and_write_nothing() {
    let cases: [(&str, Value, &str, &str); 5] = [
        (
            "not solved",
            json!({"solved": {"value": false, "reason": "The retry still fails in staging."}}),
            "not_solved",
            "not solved yet. The retry still fails in staging.",
        ),
        (
            "no verification evidence",
            json!({"verification": {"sufficient": false, "evidence": [], "reason": "No test or log shows the fix working."}}),
            "unverified",
            "insufficient verification evidence. No test or log shows the fix working.",
        ),
        (
            "several learnings",
            json!({"learnings": {"count": 2, "titles": ["Upload retries resend a consumed body", "The CI cache key ignores the lockfile"], "reason": "Two unrelated fixes."}}),
            "several_learnings",
            "2 independent learnings; run compound once per learning",
        ),
        (
            "unclear repository",
            json!({"target_repo": {"clear": false, "reason": "The fix was made in the vendored SDK, not in this repository."}}),
            "unclear_repo",
            "target repository is unclear. The fix was made in the vendored SDK",
        ),
        (
            "CONCEPTS.md bootstrap",
            json!({"intent": "concepts_bootstrap"}),
            "bootstrap_redirect",
            "run spec-compound-refresh",
        ),
    ];
    for (name, patch, stage_id, needle) in cases {
        let project = Project::new();
        let mut triage = Project::fixture_reply("triage");
        for (key, value) in patch.as_object().expect("an object") {
            triage[key] = value.clone();
        }
        project.reply("triage", &triage);
        let out = project.run(&[]);
        let record = project.record();
        assert_exited(&out, &record, stage_id, needle);
        assert_eq!(project.calls(), ["triage"], "{name}");
        for later in ["solutions_index", "context_analyzer", "publish"] {
            assert_eq!(status(&record, later), "not_run", "{name}: {later}");
        }
        assert!(!project.path("repo/docs").exists(), "{name}: docs written");
        assert!(
            !project.path("repo/CONCEPTS.md").exists(),
            "{name}: CONCEPTS.md written"
        );
    }
}

#[test]
fn a_repo_folder_that_does_not_exist_is_an_unclear_target() {
    let project = Project::new();
    let out = project.run(&["--input", "repo=elsewhere"]);
    let record = project.record();
    assert_exited(&out, &record, "repo_missing", "`elsewhere` is not a folder");
    assert!(
        project.calls().is_empty(),
        "no model call: {:?}",
        project.calls()
    );
    assert_eq!(status(&record, "git_branch"), "not_run");
    assert!(!project.path("elsewhere").exists());
}

#[test]
fn unsafe_or_incomplete_frontmatter_is_refused_by_the_promotion_gate() {
    let base = Project::fixture_reply("context-analyzer")["frontmatter"]
        .as_str()
        .expect("a skeleton")
        .to_string();
    let cases = [
        (
            "unquoted ` #`",
            base.replace(
                "root_cause: logic_error",
                "root_cause: logic_error #1: retry #2 sends nothing",
            ),
            "`root_cause` has an unquoted ` #`",
        ),
        (
            "unquoted `: `",
            base.replace(
                "title: Upload retries send an empty body",
                "title: Upload retries: the body is empty",
            ),
            "`title` has an unquoted `: `",
        ),
        (
            "an unquoted `key: value` list item",
            base.replace(
                "tags: [upload, retry]",
                "tags:\n  - upload\n  - scope: cross-model",
            ),
            "an item of `tags` (`scope: cross-model`) has an unquoted `: `",
        ),
        (
            "an unquoted ` #` in a list item",
            base.replace(
                "  - \"HTTP 400 on the second attempt\"",
                "  - HTTP 400 on attempt #2 only",
            ),
            "an item of `symptoms` has an unquoted ` #`",
        ),
        (
            "missing invalidation_condition",
            base.replace(
                "invalidation_condition: upload() stops buffering the body before its retry loop\n",
                "",
            ),
            "`invalidation_condition` is required but missing",
        ),
        (
            "empty source_refs",
            base.replace(
                "source_refs:\n  - src/upload.rs:4\n  - tests/upload_retry.rs\n",
                "source_refs: []\n",
            ),
            "`source_refs` is an empty list",
        ),
        (
            "a source_ref YAML reads as a number",
            base.replace("  - tests/upload_retry.rs\n", "  - 2026\n"),
            "item 2 of `source_refs` ",
        ),
    ];
    for (name, frontmatter, needle) in cases {
        let project = Project::new();
        project.analyzer_frontmatter(&frontmatter);
        let out = project.run(&[]);
        let record = project.record();
        assert_exited(&out, &record, "promotion_gate", needle);
        assert!(
            record["exit"]["message"]
                .as_str()
                .unwrap_or_default()
                .starts_with("Documentation not written: the promotion gate found"),
            "{name}: {record:#}"
        );
        assert_eq!(status(&record, "publish"), "not_run", "{name}");
        assert!(project.solutions().is_empty(), "{name}: a doc was written");
        assert!(
            !project.path("repo/CONCEPTS.md").exists(),
            "{name}: CONCEPTS.md written"
        );
    }
}

#[test]
fn a_source_ref_to_a_missing_file_is_refused() {
    let project = Project::new();
    let frontmatter = Project::fixture_reply("context-analyzer")["frontmatter"]
        .as_str()
        .expect("a skeleton")
        .replace(
            "  - tests/upload_retry.rs\n",
            "  - src/retry_policy.rs:12\n  - ../outside.rs\n",
        );
    project.analyzer_frontmatter(&frontmatter);
    let out = project.run(&[]);
    let record = project.record();
    assert_exited(
        &out,
        &record,
        "promotion_gate",
        "source_refs: `src/retry_policy.rs:12` does not exist in the repository",
    );
    let message = record["exit"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("`../outside.rs` is not a path inside the repository"),
        "{message}"
    );
    assert!(project.solutions().is_empty());
}

/// An existing learning the finder judges the same problem: updated in place, its path, title and
/// frontmatter layout kept, last_updated and the missing promotion fields added.
const EXISTING: &str = "docs/solutions/runtime-errors/upload-retries-2026-01-05.md";
const EXISTING_DOC: &str = "---
# written by hand
title: \"Upload retry sends nothing\"
date: 2026-01-05
category: runtime-errors
problem_type: runtime_error
component: upload client
tags: [upload]
symptoms:
  - HTTP 400 on retry
root_cause: consumed stream
resolution_type: code_fix
source_refs:
- src/upload.rs
last_updated: 2026-02-01
---

# Upload retry sends nothing

## Problem

Retries sent nothing.
";

fn with_existing_doc() -> Project {
    let project = Project::new();
    project
        .test
        .write(&format!("repo/{EXISTING}"), EXISTING_DOC);
    project.commit("an earlier learning");
    project
}

fn high_overlap(project: &Project) {
    project.reply(
        "related-docs-finder",
        &json!({"links": [{"path": EXISTING, "relationship": "the same defect"}], "refresh_candidates": [],
                "overlap": {"score": "high", "matched_dimensions": ["problem_statement", "root_cause", "solution_approach", "referenced_files"], "existing_path": EXISTING, "reason": "The same problem, solved again."},
                "github_issues": []}),
    );
}

/// A learning in the shape a long-lived corpus holds: at the top of docs/solutions/ (no category
/// folder), a category and a severity the schema's taxonomy does not list, `created` beside
/// `date`, `last_updated` in the middle of the frontmatter, hard-wrapped prose, sections of its
/// own, no promotion fields.
const LEGACY: &str = "docs/solutions/release-notes-ownership.md";
const LEGACY_DOC: &str = "---
title: Release Notes Belong to the Release Job
category: workflow
tags: [release, changelog]
created: 2025-11-24
date: 2026-03-17
last_updated: 2026-06-23
severity: process
component: release-tooling
---

# Release Notes Belong to the Release Job

## Problem

Contributors edited the changelog by hand in feature branches, so two branches
merged the same week wrote conflicting version headings.

## Solution

Leave the changelog to the release job; feature branches only describe their
change in the pull request.

## Checklist for Contributors

- [ ] no version bump in the branch
- [ ] the pull request title says what changed
";

#[test]
fn a_legacy_doc_is_updated_in_place_without_reshaping_its_frontmatter() {
    let project = Project::new();
    project.test.write(&format!("repo/{LEGACY}"), LEGACY_DOC);
    project.commit("a long-lived learning");
    project.reply(
        "related-docs-finder",
        &json!({"links": [], "refresh_candidates": [],
                "overlap": {"score": "high", "matched_dimensions": ["problem_statement", "root_cause", "solution_approach", "referenced_files"], "existing_path": LEGACY, "reason": "The same problem."},
                "github_issues": []}),
    );
    project.reply(
        "update-merger",
        &json!({"track": "kept", "sections": {"Solution": "Leave the changelog to the release job (`src/upload.rs:4` shows the same rule for uploads)."}}),
    );
    let out = project.run(&[]);
    out.code(0);
    assert_eq!(project.record()["status"], "completed", "{}", out.stdout);
    assert!(
        out.stdout.contains(&format!("Updated {LEGACY} in place")),
        "{}",
        out.stdout
    );
    let doc = project.test.read(&format!("repo/{LEGACY}"));
    // Every line of the frontmatter stays where it was, last_updated with today's date; the
    // promotion fields the doc lacked come after them.
    let expected_head = format!(
        "---
title: Release Notes Belong to the Release Job
category: workflow
tags: [release, changelog]
created: 2025-11-24
date: 2026-03-17
last_updated: {TODAY}
severity: process
component: release-tooling
source_refs:
"
    );
    assert!(doc.starts_with(&expected_head), "{doc}");
    assert_eq!(doc.matches("last_updated:").count(), 1, "{doc}");
    let (frontmatter, body) = split(&doc);
    assert_eq!(frontmatter["severity"].as_str(), Some("process"));
    assert!(frontmatter["invalidation_condition"].as_str().is_some());
    // The sections not rewritten keep their bytes, hard wraps and all.
    let old_body = LEGACY_DOC.split_once("\n---\n").expect("a body").1;
    let problem = old_body
        .split_once("## Problem")
        .and_then(|(_, rest)| rest.split_once("## Solution"))
        .expect("a Problem section")
        .0;
    assert!(body.contains(problem), "{body}");
    let checklist = old_body.split_once("## Checklist").expect("a checklist").1;
    assert!(body.ends_with(checklist), "{body}");
    assert!(
        body.contains("(`src/upload.rs:4` shows the same rule"),
        "{body}"
    );
}

#[test]
fn high_overlap_updates_the_existing_doc_in_place() {
    let project = with_existing_doc();
    high_overlap(&project);
    let out = project.run(&[]);
    out.code(0);
    assert_eq!(project.record()["status"], "completed");
    assert_eq!(project.solutions(), [EXISTING], "no second doc");
    assert!(
        out.stdout.contains(&format!("Updated {EXISTING} in place")),
        "{}",
        out.stdout
    );

    let doc = project.test.read(&format!("repo/{EXISTING}"));
    let (frontmatter, body) = split(&doc);
    // The layout is kept: the comment, the quoting, the key order, and source_refs as the doc had
    // them (its provenance) with this run's fresh ones appended; invalidation_condition added;
    // last_updated set once, to today.
    let expected_head = "---
# written by hand
title: \"Upload retry sends nothing\"
date: 2026-01-05
category: runtime-errors
problem_type: runtime_error
component: upload client
tags: [upload]
symptoms:
  - HTTP 400 on retry
root_cause: consumed stream
resolution_type: code_fix
source_refs:
- src/upload.rs
- \"src/upload.rs:4\"
- \"tests/upload_retry.rs\"
invalidation_condition: \"upload() stops buffering the body before its retry loop\"
last_updated: 2026-11-30
---
";
    assert!(doc.starts_with(expected_head), "{doc}");
    assert_eq!(frontmatter["last_updated"].as_str(), Some(TODAY));
    assert_eq!(
        frontmatter["source_refs"][0].as_str(),
        Some("src/upload.rs")
    );
    assert_eq!(doc.matches("last_updated:").count(), 1);
    assert!(
        body.starts_with("\n# Upload retry sends nothing\n"),
        "title kept: {body}"
    );
    assert!(
        body.contains("(seen again in this session)"),
        "merged sections: {body}"
    );
    assert!(!body.contains("## Related"), "no link to itself: {body}");
    assert!(project.calls().contains(&"update-merger".to_string()));
    let merger = project.prompt("update-merger");
    assert!(
        merger.contains("Retries sent nothing."),
        "the existing doc is given: {merger}"
    );
}

/// An existing doc that follows neither template: a knowledge type written with bug-track
/// headings, a custom `## Notes` section with a subsection and a fence that shows a heading. The
/// update rewrites one section; every other byte of the body stays, in its order.
const CUSTOM: &str = "docs/solutions/best-practices/retry-notes.md";
const CUSTOM_DOC: &str = "---
title: Retries resend what they read
date: 2026-02-10
category: best-practices
module: upload
problem_type: best_practice
component: upload client
severity: low
tags: [retry]
---

# Retries resend what they read

An intro paragraph before any section.

## Problem

A retry resent a stream it had consumed.

## Solution

Wrap the stream.

## Notes

Team notes, kept by hand.

### A detail

```md
## not a heading: inside a fence
```

## Prevention

Review retry loops.
";

#[test]
fn an_update_keeps_the_existing_docs_structure() {
    let project = with_existing_doc();
    project.test.write(&format!("repo/{CUSTOM}"), CUSTOM_DOC);
    project.commit("a learning with its own sections");
    same_learning(&project, CUSTOM);
    project.reply(
        "update-merger",
        &json!({"track": "kept", "sections": {"Solution": "Buffer the body once before the retry loop (`src/upload.rs:5`)."}}),
    );
    let out = project.run(&[]);
    out.code(0);
    assert_eq!(project.record()["status"], "completed", "{}", out.stdout);
    let merger = project.prompt("update-merger");
    assert!(
        merger.contains("- Problem\n- Solution\n- Notes\n- Prevention\n"),
        "the merger is given the doc's own sections: {merger}"
    );
    let doc = project.test.read(&format!("repo/{CUSTOM}"));
    let solution_at = CUSTOM_DOC.find("## Solution\n").expect("a solution");
    let notes_at = CUSTOM_DOC.find("## Notes\n").expect("notes");
    let head = &CUSTOM_DOC[..=CUSTOM_DOC.find("\n---\n").expect("frontmatter")];
    assert!(doc.starts_with(head), "the frontmatter is kept:\n{doc}");
    let body_from = doc.find("\n---\n").expect("frontmatter") + 5;
    let expected_body = format!(
        "{}## Solution\n\nBuffer the body once before the retry loop (`src/upload.rs:5`).\n\n{}",
        &CUSTOM_DOC[CUSTOM_DOC.find("\n---\n").expect("fm") + 5..solution_at],
        &CUSTOM_DOC[notes_at..]
    );
    assert_eq!(&doc[body_from..], expected_body, "{doc}");
    assert!(
        !doc.contains("## Guidance") && !doc.contains("## Context"),
        "{doc}"
    );
}

/// An update that rewrites a section without its subsections drops part of the doc's structure:
/// the gate refuses it, naming the section, and nothing is written.
#[test]
fn an_update_that_drops_a_subsection_is_refused() {
    let project = with_existing_doc();
    project.test.write(&format!("repo/{CUSTOM}"), CUSTOM_DOC);
    project.commit("a learning with its own sections");
    same_learning(&project, CUSTOM);
    project.reply(
        "update-merger",
        &json!({"track": "kept", "sections": {"Notes": "Team notes, rewritten without their detail."}}),
    );
    let out = project.run(&[]);
    let record = project.record();
    assert_exited(
        &out,
        &record,
        "promotion_gate",
        "the update dropped the section `### A detail` of the existing doc",
    );
    assert_eq!(project.test.read(&format!("repo/{CUSTOM}")), CUSTOM_DOC);
}

/// The promotion decision is semantic too: a reference that exists but does not ground the
/// learning and a vague invalidation condition are refused with the judge's reasons, repaired
/// like any refusal, and the judgement that promoted the doc is in the record and the summary.
#[test]
fn the_promotion_judgement_refuses_vague_conditions_and_irrelevant_refs() {
    let project = with_solutions();
    project.analyzer_frontmatter("title: Upload retries send an empty body\ndate: 2026-11-30\ncategory: runtime-errors\nmodule: upload\nproblem_type: runtime_error\ncomponent: upload client\nseverity: medium\nsymptoms:\n  - \"HTTP 400 on the second attempt\"\nroot_cause: logic_error\nresolution_type: code_fix\nsource_refs:\n  - README.md\ninvalidation_condition: if the code changes\n");
    project.test.write("model/irrelevant.txt", "README.md\n");
    project
        .test
        .write("model/vague.txt", "if the code changes\n");
    let mut fixed = Project::fixture_reply("solution-extractor");
    fixed["frontmatter"] = Project::fixture_reply("context-analyzer")["frontmatter"].clone();
    project.reply("reviser", &fixed);
    let out = project.run(&[]);
    out.code(0);
    let gate_0 = output_of(&project, "gate_0");
    let problems: Vec<&str> = gate_0["problems"]
        .as_array()
        .expect("problems")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(
        problems,
        [
            "source_refs: `README.md` does not ground this learning (judged: judged from the prompt); cite the files of the fix, its test or the behaviour it describes",
            "invalidation_condition: `if the code changes` is not specific (judged: judged from the prompt); name what would have to change for this learning to stop holding",
        ]
    );
    let judge = project.prompt("promotion-judge");
    assert!(
        judge.contains("- source_ref: `src/upload.rs:4`"),
        "the revision is judged: {judge}"
    );
    let verdict = output_of(&project, "promotion_gate");
    assert_eq!(
        verdict["judgement"]["invalidation_condition"]["specific"],
        true
    );
    assert_eq!(
        verdict["judgement"]["refs"].as_array().map(Vec::len),
        Some(2)
    );
    assert!(
        out.stdout.contains("Promotion judgement: 2 of 2 source_ref(s) ground the learning; the invalidation condition is specific"),
        "{}",
        out.stdout
    );
    let doc = project.test.read(DOC);
    assert!(
        !doc.contains("if the code changes") && !doc.contains("- README.md"),
        "{doc}"
    );

    // Refused to the end: nothing is written, and the reasons are in the report.
    let project = with_solutions();
    project.analyzer_frontmatter("title: Upload retries send an empty body\ndate: 2026-11-30\ncategory: runtime-errors\nmodule: upload\nproblem_type: runtime_error\ncomponent: upload client\nseverity: medium\nsymptoms:\n  - \"HTTP 400 on the second attempt\"\nroot_cause: logic_error\nresolution_type: code_fix\nsource_refs:\n  - src/upload.rs\ninvalidation_condition: if the code changes\n");
    project
        .test
        .write("model/vague.txt", "if the code changes\n");
    let mut same = Project::fixture_reply("solution-extractor");
    same["frontmatter"] = json!("title: Upload retries send an empty body\ndate: 2026-11-30\ncategory: runtime-errors\nmodule: upload\nproblem_type: runtime_error\ncomponent: upload client\nseverity: medium\nsymptoms:\n  - \"HTTP 400 on the second attempt\"\nroot_cause: logic_error\nresolution_type: code_fix\nsource_refs:\n  - src/upload.rs\ninvalidation_condition: if the code changes\n");
    project.reply("reviser", &same);
    let out = project.run(&[]);
    let record = project.record();
    assert_exited(
        &out,
        &record,
        "promotion_gate",
        "invalidation_condition: `if the code changes` is not specific (judged: judged from the prompt)",
    );
    assert!(!project.path(DOC).exists());
}

/// The kept doc's own source_refs are grounded too: a reference to a file that no longer exists
/// is refused with the reason, before anything is written.
#[test]
fn a_dead_kept_source_ref_is_refused_before_any_write() {
    let project = with_existing_doc();
    let dead = EXISTING_DOC.replace("- src/upload.rs\n", "- src/old_upload.rs\n");
    project.test.write(&format!("repo/{EXISTING}"), &dead);
    project.commit("an earlier learning citing a file since removed");
    high_overlap(&project);
    let out = project.run(&[]);
    let record = project.record();
    assert_exited(
        &out,
        &record,
        "promotion_gate",
        "source_refs: `src/old_upload.rs` does not exist in the repository",
    );
    assert_eq!(project.test.read(&format!("repo/{EXISTING}")), dead);
    assert!(!project.path("repo/CONCEPTS.md").exists());
}

#[test]
fn an_update_refuses_to_overwrite_a_doc_edited_while_the_run_worked() {
    let project = with_existing_doc();
    high_overlap(&project);
    // Someone edits the doc after it was read, while the merger works.
    let edited = format!("{EXISTING_DOC}\nA note added by a teammate.\n");
    project.hook(
        "update-merger",
        &format!(
            "printf '%s' '{}' > '{}'\n",
            edited,
            project.path(&format!("repo/{EXISTING}")).display()
        ),
    );
    let out = project.run(&[]);
    let record = project.record();
    assert_exited(
        &out,
        &record,
        "drift_check",
        &format!("{EXISTING} changed since it was read"),
    );
    assert_eq!(status(&record, "publish"), "not_run");
    assert_eq!(project.test.read(&format!("repo/{EXISTING}")), edited);
}

/// The related-docs role writes the new doc's target itself, as another writer would mid-run.
fn write_target_while_the_run_works(project: &Project) {
    let target = project.path(DOC);
    project.hook(
        "related-docs-finder",
        &format!(
            "mkdir -p '{}' && printf 'mine\\n' > '{}'\n",
            target.parent().expect("a folder").display(),
            target.display()
        ),
    );
}

#[test]
fn a_new_doc_refuses_a_target_that_appeared_while_the_run_worked() {
    let project = Project::new();
    write_target_while_the_run_works(&project);
    let out = project.run(&[]);
    let record = project.record();
    assert_exited(
        &out,
        &record,
        "drift_check",
        "appeared while this run worked",
    );
    assert_eq!(project.test.read(DOC), "mine\n");
}

/// A resumed run observes the disk again (the target is gone now: the doc is written) but does not
/// ask the research roles again, since their inputs came out the same.
#[test]
fn a_resumed_run_observes_the_disk_afresh_and_reuses_the_model_calls() {
    let project = Project::new();
    write_target_while_the_run_works(&project);
    let out = project.run(&[]);
    assert_exited(
        &out,
        &project.record(),
        "drift_check",
        "appeared while this run worked",
    );
    fs::remove_file(project.path(DOC)).expect("remove the intruder");
    fs::remove_file(project.path("model/hooks/related-docs-finder.sh")).expect("remove the hook");
    let asked = project.calls();

    let out = project.resume();
    out.code(0);
    let record = project.record();
    assert_eq!(record["status"], "completed", "{record:#}");
    assert!(project
        .test
        .read(DOC)
        .starts_with("---\ntitle: Upload retries send an empty body\n"));
    let again: Vec<String> = project.calls()[asked.len()..].to_vec();
    for role in [
        "triage",
        "context-analyzer",
        "solution-extractor",
        "related-docs-finder",
    ] {
        assert!(
            !again.iter().any(|r| r == role),
            "{role} asked again: {again:?}"
        );
        assert_eq!(status(&record, &role.replace('-', "_")), "cached", "{role}");
    }
    for observer in ["solutions_index", "target_exists_now", "git_branch"] {
        assert_eq!(
            status(&record, observer),
            "succeeded",
            "{observer} replayed"
        );
    }
}

#[test]
fn moderate_overlap_writes_a_new_doc_that_links_the_related_one() {
    let project = with_existing_doc();
    project.reply(
        "related-docs-finder",
        &json!({"links": [{"path": EXISTING, "relationship": "an earlier angle on retries"}, {"path": "docs/solutions/nowhere.md", "relationship": "invented"}],
                "refresh_candidates": [{"path": EXISTING, "reason": "its source_refs name a file that is gone"}],
                "overlap": {"score": "moderate", "matched_dimensions": ["problem_statement", "referenced_files"], "existing_path": EXISTING, "reason": "Same area, another root cause."},
                "github_issues": []}),
    );
    let out = project.run(&[]);
    out.code(0);
    assert_eq!(project.solutions().len(), 2);
    let doc = project.test.read(DOC);
    assert!(
        doc.contains("## Related\n\n- [Upload retry sends nothing](../runtime-errors/upload-retries-2026-01-05.md): an earlier angle on retries\n"),
        "{doc}"
    );
    assert!(!doc.contains("nowhere.md"), "an unknown path is not linked");
    assert!(
        out.stdout.contains("Consider a consolidation review."),
        "{}",
        out.stdout
    );
    assert!(out
        .stdout
        .contains(&format!("May now be stale: {EXISTING}")));
    // The existing doc was ranked by keyword hits and shown to the finder with its frontmatter.
    let finder = project.prompt("related-docs-finder");
    assert!(
        finder.contains(&format!("### {EXISTING} (2 keyword hit(s))")),
        "{finder}"
    );
    assert!(
        finder.contains("\"root_cause\":\"consumed stream\""),
        "{finder}"
    );
}

#[test]
fn a_link_to_a_missing_doc_in_the_body_is_refused() {
    let project = Project::new();
    let mut reply = Project::fixture_reply("solution-extractor");
    reply["sections"]["prevention"] =
        json!("See [the retry guide](../best-practices/retry-guide.md).");
    project.reply("solution-extractor", &reply);
    let out = project.run(&[]);
    let record = project.record();
    assert_exited(
        &out,
        &record,
        "promotion_gate",
        "link `../best-practices/retry-guide.md` does not resolve",
    );
}

#[test]
fn the_headless_token_is_a_flag_not_part_of_the_hint() {
    let project = Project::new();
    let out = project.run(&["--input", "context=mode:headless the upload retry fix"]);
    out.code(0);
    let triage = project.prompt("triage");
    assert!(
        triage.contains("Context hint from the user: the upload retry fix\n"),
        "{triage}"
    );
    assert!(!out.stdout.contains("Discoverability"), "{}", out.stdout);
    assert!(out.stdout.starts_with("Ran Full mode.\n"));
    // Without the token, the run recommends what a person may want to do.
    let project = Project::new();
    let out = project.run(&[]);
    assert!(out.stdout.contains("Discoverability:"), "{}", out.stdout);
}

#[test]
fn check_is_clean() {
    let project = Project::new();
    let out = project.test.run(["check", "compound", "--deny-warnings"]);
    out.code(0);
    assert!(
        out.stderr.contains("0 error(s), 0 warning(s)")
            || out.stdout.contains("0 error(s), 0 warning(s)"),
        "stdout:\n{}\nstderr:\n{}",
        out.stdout,
        out.stderr
    );
}

#[test]
fn a_dry_run_writes_nothing_and_asks_no_model() {
    let project = Project::new();
    let out = project.run(&["--dry-run"]);
    out.code(0);
    // The path the run would take, to the end: the schemas' examples pass every gate here.
    assert!(
        out.stdout.starts_with(
            "Ran Full mode.\nWould write docs/solutions/runtime-errors/upload-retry-empty-body.md"
        ),
        "{}",
        out.stdout
    );
    assert!(
        out.stderr.contains("(dry-run) would run with"),
        "{}",
        out.stderr
    );
    assert!(project.calls().is_empty(), "{:?}", project.calls());
    assert!(!project.path("repo/docs").exists());
    assert!(!project.path("repo/CONCEPTS.md").exists());
}

/// The taxonomy the prompts show and the gate checks is the one the Context Analyzer's schema
/// enforces (where a wrong category is repaired at the source).
#[test]
fn the_taxonomy_and_the_analyzer_schema_agree() {
    let template = fs::read_to_string(repo_root().join("templates/compound/taxonomy.json.j2"))
        .expect("the taxonomy");
    let json_start = template.find("#}").expect("a leading comment") + 2;
    let taxonomy: Value = serde_json::from_str(&template[json_start..]).expect("JSON");
    let schema: Value = serde_json::from_str(
        &fs::read_to_string(repo_root().join("schemas/compound/context.schema.json"))
            .expect("the schema"),
    )
    .expect("JSON");
    let types = taxonomy["problem_types"].as_object().expect("types");
    let listed: Vec<&str> = schema["properties"]["problem_type"]["enum"]
        .as_array()
        .expect("an enum")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(listed, types.keys().map(String::as_str).collect::<Vec<_>>());
    let rules = schema["allOf"].as_array().expect("rules");
    assert_eq!(rules.len(), types.len());
    for rule in rules {
        let name = rule["if"]["properties"]["problem_type"]["const"]
            .as_str()
            .expect("a problem type");
        let then = &rule["then"]["properties"];
        assert_eq!(then["track"]["const"], types[name]["track"], "{name}");
        assert_eq!(then["category"]["const"], types[name]["category"], "{name}");
        assert_eq!(
            then["category_path"]["const"],
            json!(format!(
                "docs/solutions/{}",
                types[name]["category"].as_str().unwrap_or_default()
            )),
            "{name}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// A repository with a few commits and real-shaped learnings: a knowledge doc without
// applies_when or promotion fields, a design_pattern doc with its own provenance, and the bug doc.

const BUDGETS: &str = "docs/solutions/best-practices/retry-budgets.md";
const PATTERN: &str = "docs/solutions/design-patterns/buffer-before-retry.md";

fn with_solutions() -> Project {
    let project = with_existing_doc();
    copy_tree(&fixtures("compound/solutions"), &project.path("repo"));
    project.commit("document two learnings");
    project
        .test
        .write("repo/README.md", "# App\n\nUploads files, retrying.\n");
    project.commit("readme: retries");
    project
}

/// A stage's recorded output in the last run, as JSON.
fn output_of(project: &Project, id: &str) -> Value {
    let text = project.test.stage_output(id);
    serde_json::from_str(text.trim()).unwrap_or_else(|e| panic!("{id}: not JSON ({e}): {text}"))
}

fn same_learning(project: &Project, path: &str) {
    project.reply(
        "related-docs-finder",
        &json!({"links": [], "refresh_candidates": [],
                "overlap": {"score": "high", "matched_dimensions": ["problem_statement", "root_cause", "solution_approach", "referenced_files"], "existing_path": path, "reason": "The same learning, seen again."},
                "github_issues": []}),
    );
}

/// An update's sections, keyed by the headings of the knowledge docs of the fixtures.
fn kept_sections(note: &str) -> Value {
    let mut reply = knowledge_sections(note);
    let sections = reply["sections"].take();
    json!({"track": "kept", "sections": {
        "Context": sections["context"], "Guidance": sections["guidance"],
        "Why This Matters": sections["why_this_matters"], "When to Apply": sections["when_to_apply"],
        "Examples": sections["examples"]}})
}

fn knowledge_sections(note: &str) -> Value {
    json!({"track": "knowledge", "sections": {
        "context": format!("Retries resent a consumed stream ({note})."),
        "guidance": "Buffer the body once before the loop (`src/upload.rs:5`).",
        "why_this_matters": "A second attempt otherwise sends nothing.",
        "when_to_apply": "Any retry of a streamed request.",
        "examples": "`tests/upload_retry.rs` fails the first attempt and checks the second body."}})
}

/// Each kind of valid existing doc is updated in place by the rules for kept docs: the knowledge
/// doc without applies_when (and without promotion fields) gets them added; the design_pattern doc
/// keeps its own source_refs and invalidation_condition; both keep path, title and frontmatter.
#[test]
fn each_kind_of_valid_existing_doc_is_updated_in_place() {
    for (path, had_refs) in [(BUDGETS, false), (PATTERN, true)] {
        let project = with_solutions();
        let before = project.test.read(&format!("repo/{path}"));
        same_learning(&project, path);
        project.reply("update-merger", &kept_sections("seen again"));
        let out = project.run(&[]);
        out.code(0);
        let record = project.record();
        assert_eq!(record["status"], "completed", "{path}: {record:#}");
        assert!(
            out.stdout.contains(&format!("Updated {path} in place")),
            "{}",
            out.stdout
        );
        assert!(
            out.stdout.ends_with("\nDocumentation complete\n"),
            "{}",
            out.stdout
        );
        assert!(
            !project.path(DOC).exists(),
            "{path}: a second doc was written"
        );

        let doc = project.test.read(&format!("repo/{path}"));
        let (frontmatter, body) = split(&doc);
        let (old, _) = split(&before);
        // Every field the doc had, as it had it.
        for (key, value) in old.as_hash().expect("a mapping") {
            if key.as_str() == Some("source_refs") {
                continue; // its own, with this run's appended: below
            }
            assert_eq!(
                &frontmatter[key.as_str().expect("a key")],
                value,
                "{path}: {key:?}"
            );
        }
        let old_head = &before[..before[4..].find("\n---\n").expect("a closing line") + 4];
        let kept_head = old_head.replace(
            "  - \"docs/solutions/best-practices/retry-budgets.md\"\n",
            "  - \"docs/solutions/best-practices/retry-budgets.md\"\n  - \"src/upload.rs:4\"\n  - \"tests/upload_retry.rs\"\n",
        );
        assert!(
            doc.starts_with(&kept_head),
            "{path}: the frontmatter text is kept, the fresh refs appended to its own:\n{doc}"
        );
        assert_eq!(frontmatter["last_updated"].as_str(), Some(TODAY), "{path}");
        let refs: Vec<&str> = frontmatter["source_refs"]
            .as_vec()
            .expect("source_refs")
            .iter()
            .filter_map(Yaml::as_str)
            .collect();
        if had_refs {
            assert_eq!(
                refs,
                [
                    "src/upload.rs",
                    "docs/solutions/best-practices/retry-budgets.md",
                    "src/upload.rs:4",
                    "tests/upload_retry.rs"
                ]
            );
            assert_eq!(
                frontmatter["invalidation_condition"].as_str(),
                Some("the upload client sends bodies it can read twice")
            );
        } else {
            assert_eq!(
                refs,
                ["src/upload.rs:4", "tests/upload_retry.rs"],
                "{path}: added"
            );
            assert_eq!(
                frontmatter["invalidation_condition"].as_str(),
                Some("upload() stops buffering the body before its retry loop")
            );
        }
        let title = old["title"].as_str().expect("a title");
        assert!(
            body.starts_with(&format!("\n# {title}\n")),
            "{path}: {body}"
        );
        assert!(
            body.contains("## Guidance\n\nBuffer the body once"),
            "{body}"
        );
        assert!(body.contains("(seen again)"), "{body}");
    }
}

/// A knowledge learning of a type the seeded tree has no folder for opens that category, with a
/// `category` given as its docs/solutions/ path; its Related link resolves from the new folder,
/// and the summary's Related line names only documents that exist.
#[test]
fn a_new_category_with_a_related_link() {
    let project = with_solutions();
    let mut triage = Project::fixture_reply("triage");
    triage["track"] = json!("knowledge");
    project.reply("triage", &triage);
    project.reply(
        "context-analyzer",
        &json!({"track": "knowledge", "problem_type": "convention", "component": "upload client",
                "category": "conventions", "category_path": "docs/solutions/conventions",
                "filename": "streamed-bodies-are-buffered.md",
                "frontmatter": "title: Streamed request bodies are buffered once\ndate: 2026-11-30\ncategory: docs/solutions/conventions\nmodule: upload\nproblem_type: convention\ncomponent: upload client\nseverity: low\ntags: [retry, buffering]\nsource_refs:\n  - src/upload.rs:5\ninvalidation_condition: upload() stops copying the body before its loop\n"}),
    );
    let mut sections = knowledge_sections("a convention now");
    sections["sections"]["examples"] =
        json!("Other rules of [this folder](./) and [the pattern](../design-patterns/buffer-before-retry.md).");
    project.reply("solution-extractor", &sections);
    project.reply(
        "related-docs-finder",
        &json!({"links": [{"path": PATTERN, "relationship": "the pattern behind the rule"},
                          {"path": "docs/solutions/conventions/invented.md", "relationship": "made up"}],
                "refresh_candidates": [],
                "overlap": {"score": "moderate", "matched_dimensions": ["solution_approach", "referenced_files"], "existing_path": PATTERN, "reason": "The same fix seen as a rule."},
                "github_issues": []}),
    );
    let out = project.run(&[]);
    out.code(0);
    let target = "repo/docs/solutions/conventions/streamed-bodies-are-buffered.md";
    let doc = project.test.read(target);
    assert!(
        doc.contains("## Related\n\n- [Buffer a request body before retrying it](../design-patterns/buffer-before-retry.md): the pattern behind the rule\n"),
        "{doc}"
    );
    assert!(!doc.contains("invented.md"), "{doc}");
    assert!(
        out.stdout
            .contains("New category folder: docs/solutions/conventions/"),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout.contains(&format!("\nRelated: {PATTERN}\n")),
        "{}",
        out.stdout
    );
    // `./` (the folder this run creates) and the pattern, linked twice, checked once.
    assert_eq!(output_of(&project, "promotion_gate")["checked"]["links"], 2);
}

/// Body grounding adjudicates, then repairs only what is broken. A commit that exists but that
/// HEAD does not contain (rebased away) and drafting scaffold in prose are broken on the evidence;
/// a missing path and a SHA that names no commit go to the adjudicator, who judges them broken
/// (and an upstream path illustrative). Template syntax in inline code, a request id, and a path
/// on a line that gives an example are not flagged at all. The reviser gets the exact problems;
/// the gate runs again and promotes, and the verdicts are in the record and the summary.
#[test]
fn body_grounding_adjudicates_then_repairs() {
    let project = with_solutions();
    let git_out = |args: &[&str]| {
        let out = Command::new("git")
            .args(args)
            .current_dir(project.path("repo"))
            .output()
            .expect("git");
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    // The full SHA: a short prefix of a random hash can be all digits, which is no commit.
    let head = git_out(&["rev-parse", "HEAD"]);
    project
        .test
        .write("repo/NOTES.md", "a commit rebased away\n");
    project.commit("soon rebased away");
    let away = git_out(&["rev-parse", "HEAD"]);
    project.git(&["reset", "-q", "--hard", "HEAD~1"]);
    project.test.write(
        "model/verdicts.txt",
        "codex-rs/src/render.rs\tillustrative\n",
    );

    let mut reply = Project::fixture_reply("solution-extractor");
    reply["sections"]["solution"] = json!(format!(
        "Buffer the body (`src/upload.rs:5`, from {head}); `src/stream_reader.rs` holds the reader, as `codex-rs/src/render.rs` does upstream. Fixed in deadbeef42, see commit {away}."
    ));
    reply["sections"]["prevention"] = json!(
        "Keep {{ test_name }} running; pass `${{ secrets.TOKEN }}` and `{{ run.id }}` as written; request id 4f3a9c2e1b; machine learning 2 is prose; name folders by skill, e.g. `ce/brainstorm/`."
    );
    project.reply("solution-extractor", &reply);
    let mut fixed = reply.clone();
    fixed["sections"]["solution"] = json!(format!(
        "Buffer the body (`src/upload.rs:5`, from {head}); the reader is now part of `src/upload.rs`, as `codex-rs/src/render.rs` does upstream. Fixed in the pull request that made this change."
    ));
    fixed["sections"]["prevention"] = json!(
        "Keep `tests/upload_retry.rs` running; pass `${{ secrets.TOKEN }}` and `{{ run.id }}` as written; request id 4f3a9c2e1b; machine learning 2 is prose; name folders by skill, e.g. `ce/brainstorm/`."
    );
    fixed["frontmatter"] = Project::fixture_reply("context-analyzer")["frontmatter"].clone();
    project.reply("reviser", &fixed);

    let out = project.run(&[]);
    out.code(0);
    let gate_0 = output_of(&project, "gate_0");
    let problems: Vec<&str> = gate_0["problems"]
        .as_array()
        .expect("problems")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(problems.len(), 4, "{problems:#?}");
    assert!(
        problems[0].contains("the path `src/stream_reader.rs` does not exist")
            && problems[0].contains("(adjudicated broken: judged broken from its line)"),
        "{problems:?}"
    );
    assert!(
        problems[1].contains("the commit `deadbeef42` does not exist")
            && problems[1].contains("adjudicated broken"),
        "{problems:?}"
    );
    assert!(
        problems[2].contains(&format!(
            "the commit `{away}` exists but is not reachable from HEAD"
        )),
        "{problems:?}"
    );
    assert!(
        problems[3].contains("drafting scaffold left in the text (`{{ test_name }}`)"),
        "{problems:?}"
    );
    let adjudicator = project.prompt("claims-adjudicator");
    assert!(
        adjudicator.contains("- path `codex-rs/src/render.rs` on line"),
        "{adjudicator}"
    );
    assert!(
        !adjudicator.contains("4f3a9c2e1b`") && !adjudicator.contains("- path `ce/brainstorm/`"),
        "only what the evidence did not settle: {adjudicator}"
    );
    let reviser = project.prompt("reviser");
    for problem in &problems {
        assert!(reviser.contains(problem), "the reviser gets {problem}");
    }
    assert_eq!(output_of(&project, "gate_1")["problems"], json!([]));
    let verdict = output_of(&project, "promotion_gate");
    assert_eq!(verdict["attempts"], 2);
    assert_eq!(verdict["history"], json!([4, 0]));
    assert_eq!(verdict["checked"]["shas"], 1, "the real SHA was checked");
    let adjudicated: Vec<(&str, &str, &str)> = verdict["adjudicated"]
        .as_array()
        .expect("adjudicated")
        .iter()
        .map(|a| {
            (
                a["text"].as_str().unwrap_or_default(),
                a["verdict"].as_str().unwrap_or_default(),
                a["by"].as_str().unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(
        adjudicated,
        [
            ("codex-rs/src/render.rs", "illustrative", "model"),
            ("ce/brainstorm/", "illustrative", "evidence")
        ]
    );
    let record = project.record();
    for id in ["revise_2", "candidate_2", "gate_2"] {
        assert_eq!(status(&record, id), "skipped", "{id}");
    }
    let doc = project.test.read(DOC);
    assert!(doc.contains("the reader is now part of"), "{doc}");
    assert!(
        doc.contains("`${{ secrets.TOKEN }}`") && doc.contains("request id 4f3a9c2e1b"),
        "{doc}"
    );
    assert!(!doc.contains("deadbeef42") && !doc.contains(&away), "{doc}");
    assert!(
        out.stdout
            .contains("Grounding: 4 problem(s) repaired in 1 round(s), then clean (")
            && out
                .stdout
                .contains("; 2 flag(s) adjudicated: 2 illustrative, 1 by the model)"),
        "{}",
        out.stdout
    );
}

/// A repair round that deletes the content to get past the gate is itself refused: the
/// revision must keep every section and most of the words.
#[test]
fn a_revision_that_deletes_content_is_refused() {
    let project = with_solutions();
    let mut reply = Project::fixture_reply("solution-extractor");
    reply["sections"]["solution"] = json!(
        "Buffer the body once before the retry loop; `src/body_cache.rs` holds the copy, and every retry reads from it, so the second attempt sends the same bytes as the first one did."
    );
    project.reply("solution-extractor", &reply);
    let mut gutted = reply.clone();
    for (_, text) in gutted["sections"].as_object_mut().expect("sections") {
        *text = json!("Fixed.");
    }
    gutted["frontmatter"] = Project::fixture_reply("context-analyzer")["frontmatter"].clone();
    project.reply("reviser", &gutted);
    let out = project.run(&[]);
    let record = project.record();
    assert_exited(&out, &record, "promotion_gate", "the revision removed ");
    let gate_1 = output_of(&project, "gate_1");
    assert!(
        gate_1["problems"]
            .as_array()
            .expect("problems")
            .iter()
            .any(|p| p
                .as_str()
                .unwrap_or_default()
                .contains("the revision removed ")),
        "{gate_1}"
    );
    assert!(!project.path(DOC).exists());
}

/// When the revisions do not fix it, the rounds are bounded: three attempts, each recorded, and
/// the refusal names the problems of the last one. Nothing is written.
#[test]
fn repair_rounds_are_bounded_and_a_refusal_writes_nothing() {
    let project = with_solutions();
    let mut reply = Project::fixture_reply("solution-extractor");
    reply["sections"]["prevention"] = json!("As in Learning 2, keep `tests/gone_test.rs`.");
    project.reply("solution-extractor", &reply);
    let mut same = reply.clone();
    same["frontmatter"] = Project::fixture_reply("context-analyzer")["frontmatter"].clone();
    project.reply("reviser", &same);
    let out = project.run(&[]);
    let record = project.record();
    assert_exited(
        &out,
        &record,
        "promotion_gate",
        "after 3 attempt(s) (2 repair round(s))",
    );
    let message = record["exit"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("the path `tests/gone_test.rs` does not exist"),
        "{message}"
    );
    assert!(message.contains("(`Learning 2`)"), "{message}");
    assert_eq!(
        project.calls().iter().filter(|c| *c == "reviser").count(),
        2
    );
    for id in ["gate_0", "gate_1", "gate_2"] {
        assert_eq!(
            output_of(&project, id)["problems"].as_array().map(Vec::len),
            Some(2),
            "{id}"
        );
    }
    assert!(!project.path(DOC).exists());
    assert!(!project.path("repo/CONCEPTS.md").exists());
}

/// The vocabulary role fails after the learning passed every check: one promotion boundary, so
/// nothing was published, neither the learning nor CONCEPTS.md.
#[test]
fn a_vocabulary_failure_leaves_nothing_published() {
    let project = with_solutions();
    project
        .test
        .write("model/replies/vocabulary-capture.json", "no JSON here");
    let out = project.run(&[]);
    out.code(1);
    let record = project.record();
    assert_eq!(record["status"], "failed", "{record:#}");
    assert_eq!(status(&record, "promotion_gate"), "succeeded");
    assert_eq!(status(&record, "vocabulary"), "failed");
    for id in ["publish_concepts", "publish"] {
        assert_eq!(status(&record, id), "not_run", "{id}");
    }
    assert!(!project.path(DOC).exists(), "the learning was published");
    assert!(!project.path("repo/CONCEPTS.md").exists());
    let report = project.test.stage_output("report");
    assert!(
        report.contains("the run failed before anything was written"),
        "{report}"
    );
    assert!(
        report
            .trim_end()
            .ends_with("Nothing was written.\n\nDocumentation skipped"),
        "{report}"
    );
}

/// A folder inside the repository given as the target: the learning goes to the root's
/// docs/solutions/, next to the existing ones, never to a new docs/solutions/ under the folder.
#[test]
fn a_subfolder_target_publishes_at_the_repository_root() {
    let project = with_solutions();
    let out = project.run(&["--input", "repo=repo/src"]);
    out.code(0);
    assert!(project.path(DOC).is_file(), "{}", out.stdout);
    assert!(!project.path("repo/src/docs").exists());
    assert!(project.path("repo/CONCEPTS.md").is_file());
    let triage = project.prompt("triage");
    assert!(
        triage.contains("is a subfolder of the git repository"),
        "{triage}"
    );
    // The tracked files are the whole repository's, relative to its root.
    assert!(triage.contains("\ntests/upload_retry.rs\n"), "{triage}");
}

/// Without an input authorizing dispatch, the roles run inline in one model call and the record
/// says so; with it, three independent calls. The output never claims more than happened.
#[test]
fn the_dispatch_record_says_how_the_roles_ran() {
    let project = with_solutions();
    let out = project.run_plain(&[]);
    out.code(0);
    let calls = project.calls();
    assert_eq!(
        calls.iter().filter(|c| *c == "inline-research").count(),
        1,
        "{calls:?}"
    );
    for role in [
        "context-analyzer",
        "solution-extractor",
        "related-docs-finder",
    ] {
        assert!(
            !calls.iter().any(|c| c == role),
            "{role} dispatched: {calls:?}"
        );
    }
    let dispatch = &output_of(&project, "mode")["dispatch"];
    assert_eq!(
        dispatch,
        &json!({"worker_dispatch_authorization": "missing", "capability_probe": "not_applicable",
                "worker_dispatch_capability": "unknown", "worker_context_isolation": "unknown",
                "worker_model_override": "unknown", "worker_bounded_parallelism": "unknown",
                "worker_dispatch_outcome": "inline", "fallback_reason": "dispatch_authorization_missing"})
    );
    assert!(
        out.stdout
            .contains("Execution: inline-serial (dispatch_authorization_missing)"),
        "{}",
        out.stdout
    );
    assert!(!out.stdout.contains("dispatched"), "{}", out.stdout);
    let inline = project.prompt("inline-research");
    for role in [
        "Context Analyzer's job",
        "Solution Extractor's job",
        "Related Docs Finder's job",
    ] {
        assert!(inline.contains(role), "{role}");
    }

    let project = with_solutions();
    let out = project.run(&[]);
    out.code(0);
    let dispatch = &output_of(&project, "mode")["dispatch"];
    assert_eq!(dispatch["worker_dispatch_authorization"], "authorized");
    assert_eq!(dispatch["worker_dispatch_outcome"], "dispatched");
    assert_eq!(dispatch["fallback_reason"], Value::Null);
    assert!(
        out.stdout.contains("Execution: dispatched"),
        "{}",
        out.stdout
    );
    assert!(!project.calls().contains(&"inline-research".to_string()));
}

/// Orientation records the worktree's dirty state.
#[test]
fn orientation_records_the_dirty_state() {
    let project = with_solutions();
    project
        .test
        .write("repo/src/scratch.rs", "// not committed\n");
    let out = project.run(&[]);
    out.code(0);
    assert_eq!(
        output_of(&project, "repo_facts")["dirty"],
        json!(["?? src/scratch.rs"])
    );
    assert!(project
        .prompt("triage")
        .contains("- Worktree: 1 uncommitted change(s)"));
    assert!(
        out.stdout
            .contains("worktree: 1 uncommitted change(s) before this run."),
        "{}",
        out.stdout
    );
}

/// The inline call answers with each role's reply under the role's own schema, and a revision
/// has the Solution Extractor's shape plus its frontmatter.
#[test]
fn the_inline_and_revision_schemas_are_the_roles_own() {
    let read = |name: &str| -> Value {
        let text =
            fs::read_to_string(repo_root().join("schemas/compound").join(name)).expect("a schema");
        serde_json::from_str(&text).expect("JSON")
    };
    let part = |name: &str| {
        let mut schema = read(name);
        let map = schema.as_object_mut().expect("an object");
        for key in ["$schema", "title", "examples"] {
            map.remove(key);
        }
        schema
    };
    let inline = read("research-inline.schema.json");
    assert_eq!(inline["properties"]["context"], part("context.schema.json"));
    assert_eq!(
        inline["properties"]["solution"],
        part("solution.schema.json")
    );
    assert_eq!(inline["properties"]["related"], part("related.schema.json"));
    let revision = read("revision.schema.json");
    let solution = read("solution.schema.json");
    // The two tracks of a new doc, and the kept track of an update in place.
    assert_eq!(
        revision["allOf"].as_array().expect("a list")[..2],
        solution["allOf"].as_array().expect("a list")[..]
    );
    assert_eq!(
        revision["allOf"][2]["then"]["properties"]["sections"],
        read("update.schema.json")["properties"]["sections"]
            .as_object()
            .map(|s| {
                let mut s = s.clone();
                s.remove("description");
                Value::Object(s)
            })
            .expect("sections")
    );
    assert_eq!(
        revision["properties"]["sections"],
        solution["properties"]["sections"]
    );
}

/// Lightweight mode: `mode:lightweight` is a flag, stripped from the hint; one pass (the roles in
/// one model call, no overlap check, no vocabulary seeding without a CONCEPTS.md), the same
/// promotion obligations, and the mode with its reason on the first line.
#[test]
fn lightweight_mode_is_one_pass_with_the_same_promotion_obligations() {
    let project = with_solutions();
    let out = project.run_plain(&["--input", "context=mode:lightweight the upload retry fix"]);
    out.code(0);
    let mut lines = out.stdout.lines();
    assert_eq!(
        lines.next(),
        Some(
            "Ran Lightweight mode — asked for, and the learning is low-risk, bounded and verified."
        ),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout.ends_with("\nDocumentation complete\n"),
        "{}",
        out.stdout
    );
    assert_eq!(
        project.calls(),
        ["triage", "lightweight-pass", "promotion-judge"]
    );
    let pass = project.prompt("lightweight-pass");
    assert!(
        pass.contains("Context hint from the user: the upload retry fix\n"),
        "{pass}"
    );
    assert!(
        !pass.contains("Related Docs Finder's job"),
        "no overlap check"
    );
    let dispatch = &output_of(&project, "mode")["dispatch"];
    assert_eq!(dispatch["worker_dispatch_outcome"], "inline");
    assert_eq!(
        dispatch["fallback_reason"],
        "dispatch_authorization_missing"
    );
    assert!(
        out.stdout.contains(
            "Execution: inline (dispatch_authorization_missing): Lightweight's single pass"
        ),
        "{}",
        out.stdout
    );
    assert!(project.path(DOC).is_file());
    assert!(
        !project.path("repo/CONCEPTS.md").exists(),
        "Lightweight does not seed CONCEPTS.md"
    );
    assert!(
        out.stdout.contains("Note: written in Lightweight mode"),
        "{}",
        out.stdout
    );

    // The same obligations: a refused candidate is repaired or refused, never written as is.
    let project = with_solutions();
    let mut reply = Project::fixture_reply("solution-extractor");
    reply["sections"]["prevention"] = json!("Keep `tests/missing_test.rs`.");
    project.reply("solution-extractor", &reply);
    let out = project.run_plain(&["--input", "lightweight=true"]);
    let record = project.record();
    assert_exited(
        &out,
        &record,
        "promotion_gate",
        "the path `tests/missing_test.rs` does not exist",
    );
    assert!(
        out.stdout.starts_with("Ran Lightweight mode"),
        "{}",
        out.stdout
    );
    assert!(!project.path(DOC).exists());
}

/// A high-risk learning asked to run Lightweight stays in Full mode, and says why.
#[test]
fn a_high_risk_learning_stays_in_full_mode() {
    let project = with_solutions();
    let mut triage = Project::fixture_reply("triage");
    triage["risk"] =
        json!({"high": true, "areas": ["security"], "reason": "The retry resends an auth token."});
    project.reply("triage", &triage);
    let out = project.run(&["--input", "context=mode:lightweight the upload retry fix"]);
    out.code(0);
    assert!(
        out.stdout.starts_with("Ran Full mode — Lightweight was asked for, but this learning is high-risk (security), and high-risk learnings run Full.\n"),
        "{}",
        out.stdout
    );
    assert!(project.calls().contains(&"related-docs-finder".to_string()));
}

/// Headless: the structured report, ending with the terminal line; a refusal ends with
/// `Documentation skipped` and its reason.
#[test]
fn headless_runs_end_with_a_structured_report() {
    let project = with_solutions();
    let out = project.run_plain(&["--input", "context=mode:headless the upload retry fix"]);
    out.code(0);
    let expected = [
        "Ran Full mode.",
        "File: docs/solutions/runtime-errors/upload-retry-empty-body.md (created)",
        "Track: bug",
        "Category: runtime-errors",
        "Overlap: low",
        "Grounding: clean (2 source_ref(s), 2 path(s), 0 commit SHA(s), 0 link(s) checked)",
        "Promotion judgement: 2 of 2 source_ref(s) ground the learning; the invalidation condition is specific (judged from the prompt)",
        "Execution: inline-serial (dispatch_authorization_missing): the three roles ran in one model call, not as independent or parallel workers",
        "Instruction-file edit: none (no AGENTS.md or CLAUDE.md at the repo root)",
        "CONCEPTS.md: created with 1 term(s) added (Upload client)",
        "Related: none",
        "Refresh recommendation: none",
        "Session history: skipped (headless)",
        "Worktree: clean before this run",
        "",
        "Documentation complete",
    ];
    assert_eq!(
        out.stdout.lines().collect::<Vec<_>>(),
        expected,
        "{}",
        out.stdout
    );

    let project = with_solutions();
    let mut triage = Project::fixture_reply("triage");
    triage["solved"] = json!({"value": false, "reason": "The retry still fails in staging."});
    project.reply("triage", &triage);
    let out = project.run_plain(&["--input", "headless=true"]);
    out.code(0);
    assert_eq!(
        out.stdout,
        "✗ Documentation skipped (headless mode)\n\nReason: Documentation skipped: the problem is not solved yet. The retry still fails in staging.\nNothing was written.\n\nDocumentation skipped\n"
    );
}

fn with_agents_md() -> Project {
    let project = with_solutions();
    project.test.write(
        "repo/AGENTS.md",
        "# Agents\n\n- Run `cargo test` before committing.\n",
    );
    project.write_claude_shim();
    project.commit("agent instructions");
    project
}

impl Project {
    /// A CLAUDE.md that only includes AGENTS.md: a shim, not the file to edit.
    fn write_claude_shim(&self) {
        self.test.write("repo/CLAUDE.md", "@AGENTS.md\n");
    }
}

/// The Discoverability check: AGENTS.md does not point at docs/solutions/. Interactive runs ask
/// (the ask built-in); "y" appends the one line to the substantive file (not the CLAUDE.md shim),
/// "n" leaves it as it was; headless reports the line and never edits.
#[test]
fn the_discoverability_consent_in_both_answers() {
    let before = "# Agents\n\n- Run `cargo test` before committing.\n";
    let project = with_agents_md();
    let out = project.run(&["--answer", "discoverability_consent=y"]);
    out.code(0);
    let agents = project.test.read("repo/AGENTS.md");
    assert!(agents.starts_with(before), "{agents}");
    assert!(
        agents.ends_with("relevant when implementing or debugging in a documented area.\n"),
        "{agents}"
    );
    assert_eq!(
        agents.lines().count(),
        before.lines().count() + 2,
        "one line (after a blank one)"
    );
    assert_eq!(project.test.read("repo/CLAUDE.md"), "@AGENTS.md\n");
    assert!(
        out.stdout
            .contains("Discoverability: added to AGENTS.md, with consent"),
        "{}",
        out.stdout
    );
    let record = project.record();
    assert_eq!(status(&record, "publish_instructions"), "succeeded");
    assert!(out.stdout.ends_with("\nDocumentation complete\n"));

    let project = with_agents_md();
    let out = project.run(&["--answer", "discoverability_consent=n"]);
    out.code(0);
    assert_eq!(project.test.read("repo/AGENTS.md"), before);
    assert!(
        out.stdout.contains("the line was proposed and declined"),
        "{}",
        out.stdout
    );
    assert_eq!(status(&project.record(), "publish_instructions"), "skipped");
    assert!(
        project.path(DOC).is_file(),
        "the learning is written all the same"
    );

    // No answer off a terminal: the declared default, "n".
    let project = with_agents_md();
    project.run(&[]).code(0);
    assert_eq!(project.test.read("repo/AGENTS.md"), before);

    let project = with_agents_md();
    let out = project.run(&[
        "--input",
        "headless=true",
        "--answer",
        "discoverability_consent=y",
    ]);
    out.code(0);
    assert_eq!(
        project.test.read("repo/AGENTS.md"),
        before,
        "headless never edits"
    );
    assert_eq!(
        status(&project.record(), "discoverability_consent"),
        "skipped"
    );
    assert!(out.stdout.contains("Instruction-file edit: gap noted, not applied (AGENTS.md does not point at docs/solutions/)"), "{}", out.stdout);
    assert!(
        out.stdout
            .contains("Discoverability recommendation: append to AGENTS.md: - `docs/solutions/`"),
        "{}",
        out.stdout
    );
}

/// The run records hold the conversation: the state folder is owner-only.
#[test]
fn the_state_folder_is_owner_only() {
    use std::os::unix::fs::PermissionsExt;
    let project = Project::new();
    project.run(&[]).code(0);
    let mode = fs::metadata(project.test.state_dir())
        .expect("the state folder")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o700, "{mode:o}");
}

/// Run the way a user does, from inside the repository and without `--state-dir`: the records
/// (they hold the session's text) land in the user's state folder, owner-only, and nothing of
/// the conversation is left in the worktree: git sees only what the run published.
#[test]
fn the_records_stay_out_of_the_repository() {
    use std::os::unix::fs::PermissionsExt;
    let project = Project::new();
    project.compose_inline_replies();
    let out = project
        .test
        .command([
            "run".to_string(),
            "compound".to_string(),
            "--input".to_string(),
            "repo=.".to_string(),
            "--input".to_string(),
            format!(
                "transcript_path={}",
                fixtures("compound/session.jsonl").display()
            ),
            "--input".to_string(),
            "context=the upload retry fix".to_string(),
        ])
        .cwd(&project.path("repo"))
        .without_state_dir()
        .env("PATH", &project.search_path())
        .env("STAGEGRAPH_NOW", NOW)
        .env(
            "STAGEGRAPH_CONFIG",
            &project.path("stagegraph.toml").display().to_string(),
        )
        .output();
    out.code(0);
    assert!(!project.path("repo/.stagegraph").exists());
    let status = Command::new("git")
        .args(["status", "--porcelain", "--untracked-files=all"])
        .current_dir(project.path("repo"))
        .output()
        .expect("git status");
    let mut changed: Vec<String> = String::from_utf8_lossy(&status.stdout)
        .lines()
        .map(|line| line[3..].to_string())
        .collect();
    changed.sort();
    assert_eq!(
        changed,
        [
            "CONCEPTS.md",
            "docs/solutions/runtime-errors/upload-retry-empty-body.md"
        ]
    );
    let users = project.path("state-home/stagegraph");
    let keyed: Vec<PathBuf> = fs::read_dir(&users)
        .expect("the user state folder")
        .flatten()
        .map(|entry| entry.path())
        .collect();
    assert_eq!(keyed.len(), 1, "{keyed:?}");
    let mode = fs::metadata(&keyed[0]).expect("meta").permissions().mode();
    assert_eq!(mode & 0o777, 0o700, "{mode:o}");
    assert!(
        keyed[0].join("runs").is_dir(),
        "the runs are there: {keyed:?}"
    );
}

/// The learning's category folder is a link out of the repository, which the write roots refuse:
/// every target is checked before the first write, so the run is refused with the reason and
/// CONCEPTS.md, which could be written, is not: nothing is published in part.
#[test]
fn an_unwritable_target_is_refused_before_any_write() {
    let project = Project::new();
    fs::create_dir_all(project.path("elsewhere")).expect("a folder outside");
    fs::create_dir_all(project.path("repo/docs/solutions")).expect("docs/solutions");
    std::os::unix::fs::symlink(
        project.path("elsewhere"),
        project.path("repo/docs/solutions/runtime-errors"),
    )
    .expect("a link");
    let out = project.run(&[]);
    let record = project.record();
    assert_exited(
        &out,
        &record,
        "targets_writable",
        "Documentation not written: a target of the publication cannot be written",
    );
    let message = record["exit"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("upload-retry-empty-body.md` resolves to")
            && message.contains("outside the workflow's writes"),
        "{message}"
    );
    for id in ["publish_concepts", "publish"] {
        assert_ne!(status(&record, id), "succeeded", "{id}");
    }
    assert!(!project.path("repo/CONCEPTS.md").exists());
    assert!(fs::read_dir(project.path("elsewhere"))
        .expect("a folder")
        .next()
        .is_none());
}

/// A real run's report opens in headless Chromium; two runs that differ in one input (the
/// hint) diff to that input, the stages it reached with why their fingerprints changed, and
/// what they said differently.
#[test]
fn a_compound_run_reports_in_chromium_and_diffs_by_its_one_changed_input() {
    let project = Project::new();
    project.run(&[]).code(0);
    let first = project.test.newest_run();
    let record = project.record();
    let stages = record["stages"].as_object().expect("stages").len();
    let report = project.path("compound-report.html");
    project
        .test
        .run(["runs", "report", &first, "-o", "compound-report.html"])
        .code(0);
    crate::report::opens_in_chromium(&project.test, &report, stages, "compound");

    // The same repository again (what the run wrote removed), with another hint.
    project.git(&["checkout", "-q", "--", "."]);
    project.git(&["clean", "-qfd"]);
    project
        .run(&["--input", "context=the upload retry bug"])
        .code(0);
    let out = project.test.run(["runs", "diff", &first, "last"]);
    out.code(0);
    let text = out.stdout;
    assert!(
        text.contains("  changed context: \"the upload retry fix\" -> \"the upload retry bug\"\n"),
        "{text}"
    );
    assert!(text.contains("workflow files: the same\n"), "{text}");
    let doc: Value = serde_json::from_str(
        &project
            .test
            .run(["runs", "diff", &first, "last", "--format", "json"])
            .stdout,
    )
    .expect("diff JSON");
    assert_eq!(
        doc["inputs"]["changed"]["context"],
        json!(["the upload retry fix", "the upload retry bug"]),
        "{doc:#}"
    );
    let changed: Vec<&Value> = doc["stages"]
        .as_array()
        .expect("stages")
        .iter()
        .filter(|s| s["fingerprint_changed"] == json!(true))
        .collect();
    assert!(!changed.is_empty(), "{doc:#}");
    // Each changed fingerprint has a cause, and some stage changed because its rendered action
    // (the prompt with the hint in it) did.
    for stage in &changed {
        assert!(
            stage["causes"].as_array().is_some_and(|c| !c.is_empty()),
            "{stage:#}"
        );
    }
    let by_id = |id: &str| -> &Value {
        doc["stages"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["id"] == id)
            .unwrap_or_else(|| panic!("{id} is not in the diff: {doc:#}"))
    };
    // The brief renders the hint: its action changed, and its text says the new hint.
    let brief = by_id("brief");
    assert!(
        brief["causes"]
            .as_array()
            .unwrap()
            .contains(&json!("rendered action")),
        "{brief:#}"
    );
    let brief_diff = brief["output_diff"].as_str().expect("a text diff");
    assert!(brief_diff.contains("the upload retry bug"), "{brief_diff}");
    // Triage changed because its prompt did, the brief in it.
    assert_eq!(
        by_id("triage")["causes"],
        json!(["rendered action", "output of `brief`"])
    );
    // A stage that reads nothing of the run's inputs is not listed.
    let listed: Vec<&str> = doc["stages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap_or_default())
        .collect();
    assert!(!listed.contains(&"taxonomy"), "{listed:?}");
    assert!(doc["unchanged"].as_u64().unwrap_or(0) > 0, "{doc:#}");
}
