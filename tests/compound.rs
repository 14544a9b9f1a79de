//! The shipped `compound` workflow, run by the real binary on a real git repository. The `sonnet`
//! alias is answered by one script that reads the `Role: ...` line of the prompt and replies with
//! `replies/<role>.json`, so one alias serves every model stage; it also logs each call and saves
//! the prompt, and runs `hooks/<role>.sh` first when a test wants something to happen mid-run (a
//! concurrent edit). `gh` is a stub that fails, and the clock is pinned (`STAGEGRAPH_NOW`).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{json, Value};
use yaml_rust2::{Yaml, YamlLoader};

use crate::support::{copy_tree, fixtures, repo_root, stage, Output, Test};

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

    /// `stagegraph run compound` on `repo/` with the session transcript and a hint.
    fn run(&self, extra: &[&str]) -> Output {
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
        args.extend(extra.iter().map(|a| a.to_string()));
        self.test
            .command(args)
            .env("PATH", &self.search_path())
            .env("STAGEGRAPH_NOW", NOW)
            .output()
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

fn make_executable(path: &Path) {
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(path, fs::Permissions::from_mode(0o755)).expect("chmod");
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
    assert_eq!(out.stdout, "Nothing was written.\n");
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
        "# Concepts\n\n- **Upload client**: already defined by hand.\n",
    );
    project.commit("concepts");
    let mut reply = Project::fixture_reply("vocabulary-capture");
    reply["terms"]
        .as_array_mut()
        .expect("terms")
        .push(json!({"term": "Buffered body", "definition": "The request body copied once so every attempt sends it whole.", "source_ref": "src/upload.rs:5"}));
    project.reply("vocabulary-capture", &reply);
    project.run(&[]).code(0);
    assert_eq!(
        project.test.read("repo/CONCEPTS.md"),
        "# Concepts\n\n- **Upload client**: already defined by hand.\n- **Buffered body**: The request body copied once so every attempt sends it whole. (source: `src/upload.rs:5`)\n"
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
                "root_cause: the first attempt consumes the request body stream",
                "root_cause: the stream is consumed by attempt #1 and retry #2 sends nothing",
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
- src/old_upload.rs
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
    // The layout is kept: the comment, the quoting, the key order; source_refs replaced by the
    // fresh references; invalidation_condition added; last_updated set once, to today.
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
        Some("src/upload.rs:4")
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
