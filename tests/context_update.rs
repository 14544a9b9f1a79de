//! The shipped `context-update` workflow, run by the real binary as a Claude Code Stop hook would
//! run it (the payload on stdin, `$CLAUDE_PROJECT_DIR` set, started in a subfolder) and in
//! manual mode: in a temporary project, with the `haiku` and `sonnet` aliases answered by scripts
//! that record the prompt they were given, and a pinned clock (`STAGEGRAPH_NOW`). The
//! transcripts are fixtures in the real shapes of Claude Code's files
//! (`tests/fixtures/context-update/`), or lines built in those shapes.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use serde_json::{json, Value};

use crate::support::{self, Invocation, Test};

const HEADER: &str =
    "<!-- Auto-maintained by rocket:context-update. Edits are preserved when consistent. -->";
/// The pinned clock of a first run; later runs add seconds to it.
const T0: &str = "2026-11-30T12:00:00Z";
const ENABLED: &str = "# Repo\n\nConventions: short names.\n\n- Background context: enabled\n";
const GATE_YES: &str = r#"{"update": true, "candidates": ["Backoff policy", "Sync worker"]}"#;
const GATE_NO: &str = r#"{"update": false, "candidates": []}"#;
/// Prose around a fenced block, as models answer.
const WRITER_ENTRIES: &str = r#"Here are the entries:
```json
{"entries": [
  {"area": "Conventions", "concept": "Backoff policy", "definition": "The only retry mechanism for network calls: exponential, three attempts.", "aliases": ["retry policy"], "relations": ["Sync worker"], "source": "conversation 2026-11-30"},
  {"area": "Architecture", "concept": "Sync worker", "definition": "The nightly job that mirrors uploads to cold storage.", "aliases": [], "relations": ["Backoff policy"], "source": "conversation 2026-11-30"}
]}
```"#;
/// Lines in `tests/fixtures/context-update/session.jsonl`.
const SESSION_LINES: u64 = 10;

fn fixture(name: &str) -> PathBuf {
    support::fixtures("context-update").join(name)
}

/// `T0` plus `seconds`, as RFC 3339.
fn at(seconds: i64) -> String {
    let t0 = chrono::DateTime::parse_from_rfc3339(T0).expect("T0 is RFC 3339");
    (t0 + chrono::Duration::seconds(seconds))
        .to_utc()
        .to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// A temporary project (the test folder): CLAUDE.md, a transcript, model scripts; the run
/// records land under the test's own `$XDG_STATE_HOME`.
struct Project {
    t: Test,
}

/// One run of the binary and what it left behind.
struct Outcome {
    code: i32,
    stdout: String,
    stderr: String,
    /// The newest run.json, if the run got that far.
    record: Option<Value>,
}

impl Outcome {
    fn record(&self) -> &Value {
        self.record
            .as_ref()
            .unwrap_or_else(|| panic!("no run record; stderr:\n{}", self.stderr))
    }

    fn status(&self) -> &str {
        self.record()["status"].as_str().unwrap_or("")
    }

    fn exit_stage(&self) -> Option<&str> {
        self.record()["exit"]["stage"].as_str()
    }

    fn exit_message(&self) -> &str {
        self.record()["exit"]["message"].as_str().unwrap_or("")
    }

    fn stage(&self, id: &str) -> &str {
        support::stage(self.record(), id)["status"]
            .as_str()
            .unwrap_or("")
    }

    fn summary(&self) -> &str {
        self.record()["outputs"]["summary"].as_str().unwrap_or("")
    }

    /// Exited early at `stage`, with exit code 0, and nothing after it ran.
    fn assert_exited_at(&self, stage: &str) {
        assert_eq!(self.code, 0, "stderr:\n{}", self.stderr);
        assert_eq!(self.status(), "exited", "stderr:\n{}", self.stderr);
        assert_eq!(self.exit_stage(), Some(stage), "stderr:\n{}", self.stderr);
        // The stages that act, in the order they run: none after the exit ran.
        let order = [
            "recursion_guard",
            "toggle",
            "debounce",
            "lock",
            "heuristic_no",
            "nothing_said",
            "gate",
            "gate_no",
            "writer",
            "merge",
            "write",
        ];
        let from = order
            .iter()
            .position(|s| *s == stage)
            .map_or(0, |at| at + 1);
        for later in &order[from..] {
            if ["lock", "gate", "writer", "merge", "write"].contains(later) {
                assert_eq!(self.stage(later), "not_run", "stage {later} after an exit");
            }
        }
    }

    fn assert_completed(&self) {
        assert_eq!(self.code, 0, "stderr:\n{}", self.stderr);
        assert_eq!(
            self.status(),
            "completed",
            "stderr:\n{}\nrecord: {:#}",
            self.stderr,
            self.record()
        );
    }
}

impl Project {
    /// A project with the toggle on, the session fixture as transcript and both aliases defined
    /// in the project's `stagegraph.toml`.
    fn new() -> Project {
        let project = Project::bare();
        project.write("CLAUDE.md", ENABLED);
        project.copy_session();
        project.write("stagegraph.toml", &project.models_config());
        project
    }

    /// Model scripts, a `claude` that must never run, no config and no CLAUDE.md.
    fn bare() -> Project {
        let project = Project { t: Test::new() };
        for model in ["gate", "writer"] {
            // Saves the prompt and the guard variable it was started with, counts its calls,
            // and answers with the reply file.
            project.write(
                &format!("models/{model}.sh"),
                &format!(
                    "dir=$(dirname \"$0\")\n\
                     cat > \"$dir/{model}.prompt\"\n\
                     printf '%s' \"${{ROCKET_CONTEXT_UPDATE_INVOKED-unset}}\" > \"$dir/{model}.env\"\n\
                     echo call >> \"$dir/{model}.calls\"\n\
                     cat \"$dir/{model}.reply\"\n"
                ),
            );
        }
        project.gate_replies(GATE_YES);
        project.writer_replies(WRITER_ENTRIES);
        project.write(
            "bin/claude",
            "#!/bin/sh\necho 'the real claude CLI must not run in tests' >&2\nexit 3\n",
        );
        support::make_executable(&project.path("bin/claude"));
        project
    }

    fn models_config(&self) -> String {
        let models = self.path("models");
        format!(
            "[models.haiku]\nprovider = \"command\"\ncommand = [\"sh\", \"{0}/gate.sh\"]\n\n\
             [models.sonnet]\nprovider = \"command\"\ncommand = [\"sh\", \"{0}/writer.sh\"]\n",
            models.display()
        )
    }

    fn root(&self) -> &Path {
        self.t.root()
    }

    fn path(&self, relative: &str) -> PathBuf {
        self.t.path(relative)
    }

    fn write(&self, relative: &str, text: &str) {
        self.t.write(relative, text);
    }

    fn read(&self, relative: &str) -> Option<String> {
        self.t.read_opt(relative)
    }

    fn copy_session(&self) {
        self.use_transcript("session.jsonl");
    }

    /// A fixture as the transcript.
    fn use_transcript(&self, name: &str) {
        let text = fs::read_to_string(fixture(name)).expect("a transcript fixture");
        self.write("transcript.jsonl", &text);
    }

    fn append_transcript(&self, lines: &[Value]) {
        let mut text = self.read("transcript.jsonl").unwrap_or_default();
        for line in lines {
            text.push_str(&line.to_string());
            text.push('\n');
        }
        self.write("transcript.jsonl", &text);
    }

    fn gate_replies(&self, reply: &str) {
        self.write("models/gate.reply", reply);
    }

    fn writer_replies(&self, reply: &str) {
        self.write("models/writer.reply", reply);
    }

    fn calls(&self, model: &str) -> usize {
        self.read(&format!("models/{model}.calls"))
            .map_or(0, |text| text.lines().count())
    }

    fn prompt(&self, model: &str) -> String {
        self.read(&format!("models/{model}.prompt"))
            .unwrap_or_else(|| panic!("the {model} model was not called"))
    }

    fn lexicon(&self) -> Option<String> {
        self.read(".roc/rocket/lexicon.md")
    }

    fn cursor(&self) -> Option<Value> {
        self.read(".roc/rocket/context-gate-state.json")
            .map(|text| serde_json::from_str(&text).expect("the cursor is JSON"))
    }

    fn cursor_line(&self) -> Option<u64> {
        self.cursor()
            .map(|cursor| cursor["last_processed_line"].as_u64().expect("a line"))
    }

    /// Where this project's records, state and cache live: out of the project tree.
    fn state_dir(&self) -> PathBuf {
        let key = stagegraph::StateDir::project_key(self.root());
        self.path("state-home/stagegraph").join(key)
    }

    /// The workflow's saved state (`set_state`), if any.
    fn state(&self) -> Option<Value> {
        fs::read_to_string(self.state_dir().join("state/context-update.json"))
            .ok()
            .map(|text| serde_json::from_str(&text).expect("state JSON"))
    }

    fn set_state(&self, state: &Value) {
        let path = self.state_dir().join("state/context-update.json");
        fs::create_dir_all(path.parent().expect("a parent")).expect("the state folder");
        fs::write(path, state.to_string()).expect("write the state");
    }

    fn payload(&self) -> Value {
        // A Stop hook payload as Claude Code writes it, with fields this workflow does not know.
        // Its `cwd` is where the session happens to be: a subfolder.
        json!({
            "session_id": "5b1e7c2a-0000-4000-8000-000000000001",
            "transcript_path": self.path("transcript.jsonl"),
            "cwd": self.path("sub"),
            "permission_mode": "default",
            "hook_event_name": "Stop",
            "stop_hook_active": false,
            "last_assistant_message": "Noted."
        })
    }

    /// `stagegraph <args>` as the hook or the user starts it: from the subfolder `sub/`, with
    /// `$CLAUDE_PROJECT_DIR` naming the project, no `--state-dir`, the test's `bin/` first on
    /// PATH and the clock pinned at `now`.
    fn command<'p>(&'p self, now: &str, args: &[&str]) -> Invocation<'p> {
        fs::create_dir_all(self.path("sub")).expect("a subfolder");
        let path = format!(
            "{}:{}",
            self.path("bin").display(),
            std::env::var("PATH").unwrap_or_default()
        );
        self.t
            .command(args.iter().copied())
            .without_state_dir()
            .cwd(&self.path("sub"))
            .env("PATH", &path)
            .env("STAGEGRAPH_NOW", now)
            .env(
                "CLAUDE_PROJECT_DIR",
                self.root().to_str().expect("a UTF-8 path"),
            )
            .env_remove("ROCKET_CONTEXT_UPDATE_INVOKED")
    }

    /// The SessionEnd hook: the payload Claude Code sends as the session ends.
    fn session_end(&self, now: &str) -> Outcome {
        let mut payload = self.payload();
        payload["hook_event_name"] = json!("SessionEnd");
        payload["reason"] = json!("prompt_input_exit");
        self.run(now, &[], Some(&payload.to_string()), |invocation| {
            invocation
        })
    }

    /// The SessionEnd hook, started and not waited for.
    fn session_end_spawned(&self, now: &str) -> std::process::Child {
        let mut payload = self.payload();
        payload["hook_event_name"] = json!("SessionEnd");
        self.command(now, &["run", "context-update", "--inputs-json", "-"])
            .stdin(&payload.to_string())
            .spawn()
    }

    /// The hook: the payload on stdin.
    fn hook(&self, now: &str) -> Outcome {
        self.hook_with(now, &[], |invocation| invocation)
    }

    fn hook_with(
        &self,
        now: &str,
        extra: &[&str],
        adjust: impl FnOnce(Invocation) -> Invocation,
    ) -> Outcome {
        let payload = self.payload().to_string();
        self.run(now, extra, Some(&payload), adjust)
    }

    /// A manual run: `--input` pairs, no stdin.
    fn manual(&self, now: &str) -> Outcome {
        let transcript = format!(
            "transcript_path={}",
            self.path("transcript.jsonl").display()
        );
        self.run(
            now,
            &["--input", &transcript, "--input", "manual=true"],
            None,
            |invocation| invocation,
        )
    }

    fn run(
        &self,
        now: &str,
        extra: &[&str],
        stdin: Option<&str>,
        adjust: impl FnOnce(Invocation) -> Invocation,
    ) -> Outcome {
        let before = self.run_ids();
        let mut args = vec!["run", "context-update"];
        if stdin.is_some() {
            args.extend(["--inputs-json", "-"]);
        }
        args.extend(extra);
        let mut invocation = self.command(now, &args);
        if let Some(text) = stdin {
            invocation = invocation.stdin(text);
        }
        let output = adjust(invocation).output();
        Outcome {
            code: output.code.unwrap_or(-1),
            record: self.newest_record(&before),
            stdout: output.stdout,
            stderr: output.stderr,
        }
    }

    /// The newest run record not in `before`.
    fn newest_record(&self, before: &[String]) -> Option<Value> {
        self.run_ids()
            .into_iter()
            .filter(|id| !before.contains(id))
            .max()
            .map(|id| self.record(&id))
    }

    fn record(&self, id: &str) -> Value {
        support::read_record(&self.state_dir(), id)
    }

    fn run_ids(&self) -> Vec<String> {
        support::recorded_runs(&self.state_dir())
    }
}

/// Transcript lines in Claude Code's shape.
fn user_says(text: &str) -> Value {
    json!({
        "parentUuid": null, "isSidechain": false, "userType": "external", "cwd": "/home/user/repo",
        "sessionId": "5b1e7c2a-0000-4000-8000-000000000001", "version": "2.0.31",
        "gitBranch": "main", "type": "user",
        "message": { "role": "user", "content": text },
        "uuid": "e21ba32d-d221-4dee-87f2-86149cfb2100", "timestamp": "2026-11-30T00:20:00.000Z"
    })
}

fn assistant_says(text: &str) -> Value {
    json!({
        "parentUuid": null, "isSidechain": false, "userType": "external", "cwd": "/home/user/repo",
        "sessionId": "5b1e7c2a-0000-4000-8000-000000000001", "version": "2.0.31",
        "gitBranch": "main", "type": "assistant",
        "message": {
            "id": "msg_20", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
            "content": [
                { "type": "thinking", "thinking": "private reasoning", "signature": "EqQBCkYIBxgCKkB" },
                { "type": "text", "text": text }
            ],
            "stop_reason": "end_turn", "usage": { "input_tokens": 10, "output_tokens": 20 }
        },
        "uuid": "fbe2739b-8f72-4e6b-9a0c-5beaefd2be20", "timestamp": "2026-11-30T00:20:00.000Z"
    })
}

fn tool_call(id: &str) -> Value {
    json!({
        "parentUuid": null, "isSidechain": false, "userType": "external", "cwd": "/home/user/repo",
        "sessionId": "5b1e7c2a-0000-4000-8000-000000000001", "version": "2.0.31",
        "gitBranch": "main", "type": "assistant",
        "message": {
            "id": "msg_21", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
            "content": [{ "type": "tool_use", "id": id, "name": "Bash", "input": { "command": "cargo test" } }],
            "stop_reason": "tool_use", "usage": { "input_tokens": 10, "output_tokens": 5 }
        },
        "uuid": "74b247e7-0913-4c11-958c-ee3b25c71220", "timestamp": "2026-11-30T00:20:00.000Z"
    })
}

fn tool_result(id: &str) -> Value {
    json!({
        "parentUuid": null, "isSidechain": false, "userType": "external", "cwd": "/home/user/repo",
        "sessionId": "5b1e7c2a-0000-4000-8000-000000000001", "version": "2.0.31",
        "gitBranch": "main", "type": "user",
        "message": { "role": "user", "content": [{ "type": "tool_result", "tool_use_id": id, "content": "test result: ok. 12 passed" }] },
        "uuid": "91545372-b279-4d0c-b229-66d3f42e9c20", "timestamp": "2026-11-30T00:20:00.000Z"
    })
}

/// A turn with enough prose for the heuristic.
fn chatty_turn() -> Vec<Value> {
    vec![
        user_says("The sync worker should also log every retry."),
        assistant_says("I'll add a log line to the backoff policy hook."),
        user_says("Call those lines retry notes."),
        assistant_says("Done: each retry writes a retry note."),
        user_says("Good. Keep the notes short, one line per retry, with the attempt number."),
        assistant_says("Anything else?"),
    ]
}

/// An entry of a parsed lexicon: its concept name and its bullet lines.
type Entry = (String, Vec<String>);

/// The lexicon format's rules: the header first; areas and concepts sorted and unique; exactly
/// the four bullets in order; every relation names a concept of the file; within the budget.
fn assert_lexicon_invariants(text: &str) {
    assert!(text.len() <= 12 * 1024, "over 12 KB");
    assert!(text.lines().count() <= 300, "over 300 lines");
    assert!(
        text.ends_with('\n') && !text.ends_with("\n\n"),
        "one trailing newline"
    );
    let mut lines = text.lines();
    assert_eq!(lines.next(), Some(HEADER), "the header is the first line");
    let mut areas: Vec<(String, Vec<Entry>)> = Vec::new();
    for line in lines {
        if let Some(area) = line.strip_prefix("## ") {
            areas.push((area.to_string(), Vec::new()));
        } else if let Some(concept) = line.strip_prefix("### ") {
            let area = areas.last_mut().expect("a concept inside an area");
            area.1.push((concept.to_string(), Vec::new()));
        } else if line.starts_with("- ") {
            let area = areas.last_mut().expect("a bullet inside an area");
            let entry = area.1.last_mut().expect("a bullet inside an entry");
            entry.1.push(line.to_string());
        } else {
            assert!(line.is_empty(), "no prose in the lexicon: {line:?}");
        }
    }
    let lower = |names: Vec<&String>| names.iter().map(|n| n.to_lowercase()).collect::<Vec<_>>();
    let area_names = lower(areas.iter().map(|a| &a.0).collect());
    let mut sorted = area_names.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(area_names, sorted, "areas sorted and unique");
    let mut concepts = Vec::new();
    for (_, entries) in &areas {
        let names = lower(entries.iter().map(|e| &e.0).collect());
        let mut sorted = names.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(names, sorted, "concepts sorted and unique within an area");
        concepts.extend(names);
    }
    for (_, entries) in &areas {
        for (concept, bullets) in entries {
            let labels: Vec<&str> = bullets
                .iter()
                .map(|b| b.split("**").nth(1).unwrap_or(""))
                .collect();
            assert_eq!(
                labels,
                ["Definition", "Aliases", "Relations", "Source"],
                "the bullets of {concept}"
            );
            let relations = bullets[2].trim_start_matches("- **Relations**: ");
            if relations != "none" {
                for relation in relations.split(", ") {
                    assert!(
                        concepts.contains(&relation.to_lowercase()),
                        "relation {relation} of {concept} names no concept"
                    );
                }
            }
        }
    }
}

#[test]
fn check_finds_no_problem() {
    let project = Project::new();
    let output = project.command(T0, &["check", "context-update"]).output();
    let text = format!("{}{}", output.stdout, output.stderr);
    assert_eq!(output.code, Some(0), "{text}");
    assert!(text.contains("0 error(s), 0 warning(s)"), "{text}");
}

#[test]
fn a_hook_run_writes_the_lexicon_and_advances_the_cursor() {
    let project = Project::new();
    let run = project.hook(T0);
    run.assert_completed();
    assert_eq!(
        run.stdout.trim(),
        "Lexicon updated: 2 added, 0 merged, 0 flagged. Flagged: none."
    );
    assert_eq!(run.summary(), run.stdout.trim());
    // The run history says it too, beside the run.
    let listed = project.command(T0, &["runs"]).output();
    listed.code(0);
    assert!(
        listed.stdout.contains("completed") && listed.stdout.contains(run.summary()),
        "{}",
        listed.stdout
    );
    for exit in ["heuristic_no", "gate_no"] {
        assert_eq!(
            run.stage(exit),
            "succeeded",
            "{exit} checked, and the run went on"
        );
    }
    for stage in ["recursion_guard", "toggle", "debounce", "lock", "write"] {
        assert_eq!(run.stage(stage), "succeeded", "{stage}");
    }
    // Unknown payload fields are ignored; the known ones are the inputs.
    assert_eq!(run.record()["inputs"]["hook_event_name"], "Stop");
    assert!(run.record()["inputs"].get("permission_mode").is_none());

    let lexicon = project.lexicon().expect("the lexicon is written");
    assert_lexicon_invariants(&lexicon);
    assert!(
        lexicon.contains("## Architecture\n\n### Sync worker\n"),
        "{lexicon}"
    );
    assert!(
        lexicon.contains("### Backoff policy\n- **Definition**: The only retry mechanism for network calls: exponential, three attempts.\n- **Aliases**: retry policy\n- **Relations**: Sync worker\n"),
        "{lexicon}"
    );
    assert!(
        !lexicon.contains("```"),
        "the reply's fence is not in the file"
    );

    assert_eq!(project.cursor_line(), Some(SESSION_LINES));
    assert_eq!(
        project.cursor().expect("cursor")["transcript_path"],
        json!(project.path("transcript.jsonl"))
    );
    assert_eq!(project.state().expect("state")["last_update"], T0);
    assert!(
        !project.path(".roc/rocket/lexicon.md.lock.d").exists(),
        "the lock is released when the run ends"
    );

    // The gate saw the delta's prose, not its tool traffic or thinking.
    let gate = project.prompt("gate");
    assert!(
        gate.contains("user: Can you add a retry to the upload step?"),
        "{gate}"
    );
    assert!(gate.contains("the sync worker must use it too"), "{gate}");
    assert!(
        !gate.contains("fn upload(batch"),
        "tool results stay out: {gate}"
    );
    assert!(
        !gate.contains("private reasoning"),
        "thinking stays out: {gate}"
    );
    assert!(gate.contains("(none yet)"), "no concept known yet: {gate}");
    assert!(gate.contains("lines 1-10"), "{gate}");
    // The writer got the scoped prompt.
    let writer = project.prompt("writer");
    assert!(
        writer.contains("Candidates: Backoff policy, Sync worker\n"),
        "{writer}"
    );
    assert!(writer.contains("Existing lexicon:\n(empty"), "{writer}");
    assert!(
        writer
            .contains("Project conventions (from CLAUDE.md):\n# Repo\n\nConventions: short names."),
        "{writer}"
    );
    // Every process the run started knew it was inside a context-update run.
    assert_eq!(project.read("models/gate.env").as_deref(), Some("1"));
    assert_eq!(project.read("models/writer.env").as_deref(), Some("1"));
}

/// Claude Code can fire the first turn's Stop hook before the transcript is on disk: that run
/// waits (no cursor, no model, not a failure) and the next fire judges the whole transcript.
#[test]
fn a_transcript_not_written_yet_waits_for_the_next_fire() {
    let project = Project::bare();
    project.write("CLAUDE.md", ENABLED);
    project.write("stagegraph.toml", &project.models_config());

    let early = project.hook(T0);
    early.assert_exited_at("heuristic_no");
    assert_eq!(
        early.exit_message(),
        "heuristic: the transcript is not written yet"
    );
    assert_eq!(project.calls("gate"), 0);
    assert_eq!(project.cursor_line(), None);
    let manual = project.manual(T0);
    manual.assert_exited_at("nothing_said");
    assert_eq!(manual.exit_message(), "the transcript does not exist");

    project.copy_session();
    project.hook(&at(60)).assert_completed();
    assert_eq!(project.calls("gate"), 1);
    assert_eq!(project.cursor_line(), Some(SESSION_LINES));
}

#[test]
fn a_second_run_on_the_same_transcript_changes_nothing() {
    let project = Project::new();
    project.hook(T0).assert_completed();
    let lexicon = project.lexicon().expect("written");
    // A rewrite would show as a modification time other than this one.
    let written_at = support::backdate(&project.path(".roc/rocket/lexicon.md"));

    // Past the debounce: the heuristic finds no new line, no model is asked.
    let again = project.hook(&at(3600));
    again.assert_exited_at("heuristic_no");
    assert!(
        again.exit_message().contains("no new transcript lines"),
        "{}",
        again.exit_message()
    );
    assert_eq!(again.stdout.trim(), "No update needed.");
    assert_eq!(project.calls("gate"), 1);
    assert_eq!(project.cursor_line(), Some(SESSION_LINES));

    // Manual: the writer answers the same entries; the merge changes nothing, nothing is written.
    let manual = project.manual(&at(3700));
    manual.assert_completed();
    assert_eq!(manual.stdout.trim(), "No update needed.");
    assert_eq!(manual.stage("merge"), "succeeded");
    assert_eq!(manual.stage("write"), "skipped");
    assert_eq!(project.calls("writer"), 2);

    assert_eq!(project.lexicon().as_deref(), Some(lexicon.as_str()));
    assert_eq!(
        support::modified(&project.path(".roc/rocket/lexicon.md")),
        written_at
    );
    // The debounce clock only moves when the file is written.
    assert_eq!(project.state().expect("state")["last_update"], T0);
}

#[test]
fn the_recursion_guard_ends_the_run_before_anything_else() {
    let project = Project::new();
    let run = project.hook_with(T0, &[], |command| {
        command.env("ROCKET_CONTEXT_UPDATE_INVOKED", "1")
    });
    run.assert_exited_at("recursion_guard");
    assert!(run
        .exit_message()
        .contains("already inside a context-update run"));
    for stage in ["paths", "claude_md", "toggle", "delta", "gate"] {
        assert_eq!(run.stage(stage), "not_run", "{stage}");
    }
    assert_eq!(run.stdout.trim(), "No update needed.");
    assert_eq!(project.cursor(), None);
    assert_eq!(project.calls("gate"), 0);

    // Any other value is not the guard's.
    let run = project.hook_with(T0, &[], |command| {
        command.env("ROCKET_CONTEXT_UPDATE_INVOKED", "0")
    });
    run.assert_completed();
}

#[test]
fn the_toggle_in_claude_md_decides_whether_the_hook_runs() {
    let cases = [
        (None, "no CLAUDE.md at the project root"),
        (
            Some("# Repo\n\nBackground context is something we like.\n"),
            "has no \"- Background context: enabled\" line",
        ),
        (
            Some("# Repo\n\n- Background context: disabled\n"),
            "background context is disabled in CLAUDE.md",
        ),
        (
            Some("# Repo\n\n- Background context: enabledish\n"),
            "has no \"- Background context: enabled\" line",
        ),
    ];
    for (claude_md, message) in cases {
        let project = Project::new();
        match claude_md {
            Some(text) => project.write("CLAUDE.md", text),
            None => fs::remove_file(project.path("CLAUDE.md")).expect("remove CLAUDE.md"),
        }
        let run = project.hook(T0);
        run.assert_exited_at("toggle");
        assert!(
            run.exit_message().contains(message),
            "{:?}: {}",
            claude_md,
            run.exit_message()
        );
        assert_eq!(project.cursor(), None, "the toggle leaves the cursor alone");
        assert_eq!(project.calls("gate"), 0);
    }

    // Leading spaces and spacing around the colon are allowed, CRLF too.
    for line in [
        "  - Background context : enabled",
        "-   Background context:enabled  ",
        "- Background context: enabled\r",
    ] {
        let project = Project::new();
        project.write("CLAUDE.md", &format!("# Repo\n\n{line}\nMore.\n"));
        let run = project.hook(T0);
        run.assert_completed();
        assert_eq!(run.stage("toggle"), "succeeded", "{line:?}");
    }
}

#[test]
fn the_debounce_waits_after_a_write_and_leaves_the_cursor() {
    let project = Project::new();
    project.hook(T0).assert_completed();
    project.append_transcript(&chatty_turn());

    let early = project.hook(&at(100));
    early.assert_exited_at("debounce");
    assert!(
        early
            .exit_message()
            .contains("written 100s ago (less than 300s)"),
        "{}",
        early.exit_message()
    );
    assert_eq!(project.cursor_line(), Some(SESSION_LINES), "not judged yet");
    assert_eq!(project.calls("gate"), 1);

    // A shorter debounce, given as an input.
    project.gate_replies(GATE_NO);
    let shorter = project.hook_with(&at(100), &["--input", "debounce_seconds=60"], |i| i);
    shorter.assert_exited_at("gate_no");
    assert_eq!(shorter.stage("debounce"), "succeeded");
    assert_eq!(shorter.stage("save_cursor"), "succeeded");
    assert_eq!(project.cursor_line(), Some(SESSION_LINES + 6));

    // Once the time has passed, new lines are considered again.
    project.append_transcript(&chatty_turn());
    let later = project.hook(&at(400));
    later.assert_exited_at("gate_no");
    assert_eq!(later.stage("debounce"), "succeeded");
    assert_eq!(project.cursor_line(), Some(SESSION_LINES + 12));
}

#[test]
fn a_tool_only_delta_is_passed_and_a_thin_one_waits_for_more_words() {
    // Only tool traffic since the cursor: judged without a model, the cursor passes it.
    let project = Project::new();
    project.write(
        ".roc/rocket/context-gate-state.json",
        &json!({ "last_processed_line": SESSION_LINES }).to_string(),
    );
    project.append_transcript(&[tool_call("toolu_9"), tool_result("toolu_9")]);
    let run = project.hook(T0);
    run.assert_exited_at("heuristic_no");
    assert!(
        run.exit_message()
            .starts_with("heuristic: only tool traffic in lines 11-12"),
        "{}",
        run.exit_message()
    );
    assert_eq!(run.stage("gate"), "not_run");
    assert_eq!(project.calls("gate"), 0);
    assert_eq!(project.cursor_line(), Some(SESSION_LINES + 2));

    // A few words: not judged yet, so the cursor stays and the words wait for the next turn.
    project.append_transcript(&[
        user_says("Thanks."),
        assistant_says("You're welcome."),
        tool_call("toolu_10"),
    ]);
    let run = project.hook(T0);
    run.assert_exited_at("heuristic_no");
    assert!(
        run.exit_message()
            .contains("3 words said in lines 13-15, fewer than 40: kept for the next turn"),
        "{}",
        run.exit_message()
    );
    assert_eq!(run.stage("save_cursor"), "skipped");
    assert_eq!(project.cursor_line(), Some(SESSION_LINES + 2));

    // The next turn adds words: the gate sees both turns.
    project.append_transcript(&chatty_turn());
    project.gate_replies(GATE_NO);
    let run = project.hook(T0);
    run.assert_exited_at("gate_no");
    let gate = project.prompt("gate");
    assert!(gate.contains("user: Thanks."), "{gate}");
    assert!(
        gate.contains("user: Call those lines retry notes."),
        "{gate}"
    );
    assert!(gate.contains("lines 13-21"), "{gate}");
    assert_eq!(project.cursor_line(), Some(SESSION_LINES + 11));

    // The same few words pass a lower bar.
    project.append_transcript(&[user_says("Thanks."), assistant_says("You're welcome.")]);
    let run = project.hook_with(T0, &["--input", "min_words=3"], |i| i);
    run.assert_exited_at("gate_no");
    assert_eq!(run.stage("heuristic_no"), "succeeded");
}

#[test]
fn the_gate_judges_the_delta_and_moves_the_cursor() {
    let project = Project::new();
    project.gate_replies(GATE_NO);
    let run = project.hook(T0);
    run.assert_exited_at("gate_no");
    assert_eq!(
        run.exit_message(),
        "gate: nothing lexicon-worthy in the delta"
    );
    assert_eq!(run.stdout.trim(), "No update needed.");
    assert_eq!(project.calls("writer"), 0);
    assert_eq!(project.lexicon(), None);
    assert_eq!(project.cursor_line(), Some(SESSION_LINES));

    let project = Project::new();
    project.gate_replies(r#"{"update": true, "candidates": []}"#);
    let run = project.hook(T0);
    run.assert_exited_at("gate_no");
    assert_eq!(run.exit_message(), "gate: no candidate concepts");
    assert_eq!(project.cursor_line(), Some(SESSION_LINES));

    // The gate is shown the concepts the lexicon already has.
    let project = Project::new();
    project.write(
        ".roc/rocket/lexicon.md",
        &format!("{HEADER}\n\n## Domain\n\n### Outbound webhook\n- **Definition**: A POST to a customer URL.\n- **Aliases**: callback\n- **Relations**: none\n- **Source**: user 2026-11-01\n"),
    );
    project.gate_replies(GATE_NO);
    project.hook(T0).assert_exited_at("gate_no");
    assert!(project
        .prompt("gate")
        .contains("Concepts already in the lexicon:\nOutbound webhook\n"));
}

#[test]
fn a_gate_reply_outside_its_schema_fails_the_run_with_exit_code_zero() {
    let project = Project::new();
    project
        .gate_replies(r#"{"update": true, "candidates": ["Backoff policy"], "why": "it is new"}"#);
    let run = project.hook(T0);
    assert_eq!(run.code, 0, "an async hook always exits 0");
    assert_eq!(run.status(), "failed");
    assert_eq!(run.stage("gate"), "failed");
    assert!(
        run.record()["stages"]["gate"]["error"]
            .as_str()
            .unwrap_or("")
            .contains("gate-response"),
        "{:#}",
        run.record()["stages"]["gate"]
    );
    assert_eq!(
        project.calls("gate"),
        2,
        "asked once more with the problems"
    );
    assert_eq!(project.cursor(), None, "a failure judges nothing");
    assert_eq!(project.lexicon(), None);
}

#[test]
fn a_held_lock_ends_the_run_and_a_stale_one_is_taken_over() {
    let project = Project::new();
    let lock = project.path(".roc/rocket/lexicon.md.lock.d");
    fs::create_dir_all(&lock).expect("hold the lock");
    let run = project.hook(T0);
    run.assert_exited_at("lock");
    assert_eq!(run.exit_message(), "lexicon update already in progress");
    assert_eq!(run.stdout.trim(), "Lexicon update already in progress.");
    assert_eq!(
        project.calls("gate"),
        0,
        "no model is paid for under another run's lock"
    );
    assert_eq!(project.calls("writer"), 0);
    assert_eq!(project.cursor(), None, "the delta was not judged");
    assert!(lock.is_dir(), "another run's lock is left alone");

    // Ten minutes without a sign of life: the lock is stale.
    let old = SystemTime::now() - Duration::from_secs(700);
    fs::File::open(&lock)
        .and_then(|dir| dir.set_modified(old))
        .expect("age the lock");
    let run = project.hook(T0);
    run.assert_completed();
    assert_eq!(run.record()["stages"]["lock"]["status"], "succeeded");
    assert!(project.lexicon().is_some());
    assert!(!lock.exists(), "released at the end of the run");
}

#[test]
fn manual_mode_bypasses_the_toggle_the_debounce_the_heuristic_and_the_gate() {
    let project = Project::new();
    project.write("CLAUDE.md", "# Repo\n\n- Background context: disabled\n");
    // A recent write, a cursor at the end of the transcript, and a thin transcript.
    project.set_state(&json!({ "last_update": at(-10) }));
    project.write(
        "transcript.jsonl",
        &format!(
            "{}\n{}\n",
            user_says("We call the nightly mirror job the sync worker."),
            assistant_says("Noted.")
        ),
    );
    project.write(
        ".roc/rocket/context-gate-state.json",
        &json!({ "last_processed_line": 2 }).to_string(),
    );
    let run = project.manual(T0);
    run.assert_completed();
    for stage in [
        "toggle",
        "debounce",
        "heuristic",
        "heuristic_no",
        "gate",
        "gate_no",
    ] {
        assert_eq!(run.stage(stage), "skipped", "{stage}");
    }
    assert_eq!(project.calls("gate"), 0);
    let writer = project.prompt("writer");
    assert!(
        writer.contains("Candidates: none given. Extract them"),
        "{writer}"
    );
    assert!(
        writer.contains("user: We call the nightly mirror job the sync worker."),
        "the whole transcript, not the delta after the cursor: {writer}"
    );
    assert_lexicon_invariants(&project.lexicon().expect("written"));
    assert_eq!(project.cursor_line(), Some(2));
}

#[test]
fn models_can_come_from_stagegraph_config() {
    let project = Project::bare();
    project.write("CLAUDE.md", ENABLED);
    project.copy_session();
    let config = project.path("elsewhere/models.toml");
    project.write("elsewhere/models.toml", &project.models_config());
    let run = project.hook_with(T0, &[], |command| {
        command.env("STAGEGRAPH_CONFIG", config.to_str().expect("a UTF-8 path"))
    });
    run.assert_completed();
    assert_eq!(project.calls("gate"), 1);
    assert_eq!(project.calls("writer"), 1);
}

#[test]
fn failures_exit_zero_and_leave_the_cursor() {
    // The transcript cannot be read (a missing one is waited for; see above).
    let project = Project::new();
    fs::remove_file(project.path("transcript.jsonl")).expect("remove the transcript");
    fs::create_dir(project.path("transcript.jsonl")).expect("a folder in its place");
    let run = project.hook(T0);
    assert_eq!(run.code, 0);
    assert_eq!(run.status(), "failed");
    assert_eq!(run.stage("delta"), "failed");
    assert_eq!(project.cursor(), None);

    // A payload without a transcript path fails before any stage, still exits 0, and leaves a
    // failed record that says why (`runs show last` after the hook call).
    let project = Project::new();
    let run = project.run(T0, &[], Some(r#"{"session_id": "x", "cwd": "."}"#), |i| i);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(run.stderr.contains("transcript_path"), "{}", run.stderr);
    assert_eq!(run.status(), "failed");
    assert!(
        run.record()["error"]
            .as_str()
            .unwrap_or_default()
            .contains("transcript_path"),
        "{:#}",
        run.record()
    );
    assert_eq!(run.stage("delta"), "not_run");

    // The writer fails: nothing written, the delta stays to be judged again.
    let project = Project::new();
    project.writer_replies("I could not decide.");
    let run = project.hook(T0);
    assert_eq!(run.code, 0);
    assert_eq!(run.status(), "failed");
    assert_eq!(run.stage("writer"), "failed");
    assert_eq!(project.cursor(), None);
    assert_eq!(project.lexicon(), None);
    assert!(!project.path(".roc/rocket/lexicon.md.lock.d").exists());
}

/// The hook's JSON output, when stdout holds one: what Claude Code shows the session.
fn system_message(run: &Outcome) -> Option<String> {
    let text = run.stdout.trim();
    if !text.starts_with('{') {
        return None;
    }
    let output: Value = serde_json::from_str(text)
        .unwrap_or_else(|_| panic!("a hook's stdout is its JSON output alone: {text}"));
    Some(
        output["systemMessage"]
            .as_str()
            .expect("a systemMessage")
            .to_string(),
    )
}

#[test]
fn a_failed_hook_run_is_told_to_the_session_once_an_hour() {
    let project = Project::new();
    // A broken gate alias: its program fails.
    project.write("models/gate.sh", "echo 'no credentials' >&2\nexit 7\n");
    let first = project.hook(T0);
    assert_eq!(first.code, 0);
    assert_eq!(first.status(), "failed");
    let message = system_message(&first).expect("the failure is told");
    let id = first.record()["run_id"].as_str().unwrap().to_string();
    assert!(
        message.starts_with("stagegraph context-update failed: "),
        "{message}"
    );
    assert!(message.contains("haiku"), "names what failed: {message}");
    assert!(
        message.ends_with(&format!("(stagegraph runs show {id})")),
        "{message}"
    );

    // The same failure again within the hour: recorded, not told.
    let again = project.hook(&at(600));
    assert_eq!(again.status(), "failed");
    assert_eq!(system_message(&again), None);
    // An early exit is no failure: nothing to tell.
    project.write("CLAUDE.md", "# Repo\n");
    let off = project.hook(&at(700));
    assert_eq!(off.status(), "exited");
    assert_eq!(system_message(&off), None);
    // After the hour, the same failure is told again.
    project.write("CLAUDE.md", ENABLED);
    let later = project.hook(&at(4000));
    assert_eq!(later.status(), "failed");
    assert!(system_message(&later).is_some());

    // A detached run's failure is told at the next fire, once.
    let detached = Project::new();
    detached.write("models/gate.sh", "exit 7\n");
    let args = ["--quiet", "--detach"];
    let fire = detached.hook_with(T0, &args, |i| i);
    assert_eq!(system_message(&fire), None, "nothing failed yet");
    let record = wait_for_runs(&detached, 1);
    assert_eq!(record["status"], "failed", "{record:#}");
    let next = detached.hook_with(&at(60), &args, |i| i);
    let told = system_message(&next).expect("the detached run's failure is told");
    assert!(told.contains(record["run_id"].as_str().unwrap()), "{told}");
    wait_for_runs(&detached, 2);
    let third = detached.hook_with(&at(120), &args, |i| i);
    assert_eq!(system_message(&third), None, "told once an hour");
}

#[test]
fn the_cursor_belongs_to_its_transcript() {
    // Written for another session: this transcript is read from its first line.
    let project = Project::new();
    project.write(
        ".roc/rocket/context-gate-state.json",
        &json!({ "last_processed_line": 4, "transcript_path": "/elsewhere/other.jsonl" })
            .to_string(),
    );
    project.gate_replies(GATE_NO);
    project.hook(T0).assert_exited_at("gate_no");
    assert!(project.prompt("gate").contains("lines 1-10"));
    assert_eq!(project.cursor_line(), Some(SESSION_LINES));

    // A cursor without a transcript (the older format) is taken as is.
    project.write(
        ".roc/rocket/context-gate-state.json",
        &json!({ "last_processed_line": 4 }).to_string(),
    );
    project.hook(T0).assert_exited_at("gate_no");
    assert!(project.prompt("gate").contains("lines 5-10"));

    // Past the end of the file (rotated): the tail is read.
    project.write(
        ".roc/rocket/context-gate-state.json",
        &json!({ "last_processed_line": 500 }).to_string(),
    );
    project.hook(T0).assert_exited_at("gate_no");
    assert!(project.prompt("gate").contains("lines 1-10"));
    assert_eq!(project.cursor_line(), Some(SESSION_LINES));

    // A damaged cursor file counts as none and is rewritten.
    project.write(".roc/rocket/context-gate-state.json", "{ not json");
    let run = project.hook(T0);
    run.assert_exited_at("gate_no");
    assert_eq!(run.stage("cursor"), "failed");
    assert_eq!(project.cursor_line(), Some(SESSION_LINES));
}

#[test]
fn claude_md_reaches_the_writer_capped() {
    let project = Project::new();
    let long = format!("{ENABLED}\n{}\nTAIL-MARKER\n", "x".repeat(5000));
    project.write("CLAUDE.md", &long);
    project.hook(T0).assert_completed();
    let writer = project.prompt("writer");
    assert!(writer.contains("Conventions: short names."));
    assert!(!writer.contains("TAIL-MARKER"), "cut at 4 KB");
    assert!(writer.contains("cut at 4096 characters"));
}

#[test]
fn the_project_root_is_claude_project_dir_then_the_payload_cwd() {
    // The hook as Claude Code starts it: the payload's `cwd` is a subfolder where the session
    // happens to be, which holds no CLAUDE.md; $CLAUDE_PROJECT_DIR names the root.
    let project = Project::new();
    let run = project.hook(T0);
    run.assert_completed();
    assert!(project.lexicon().is_some());
    assert!(!project.path("sub/.roc").exists());
    assert_eq!(run.record()["inputs"]["cwd"], json!(project.path("sub")));

    // $CLAUDE_PROJECT_DIR wins over the payload's `cwd` (the session is in another project).
    let project = Project::new();
    let decoy = Project::new();
    let payload =
        json!({ "transcript_path": project.path("transcript.jsonl"), "cwd": decoy.root() })
            .to_string();
    project
        .run(T0, &[], Some(&payload), |i| i)
        .assert_completed();
    assert!(project.lexicon().is_some());
    assert!(!decoy.path(".roc").exists(), "nothing written in the decoy");

    // Without $CLAUDE_PROJECT_DIR the payload's `cwd` is the root, else the working directory.
    let project = Project::new();
    let run = project.run(T0, &[], Some(&payload), |i| {
        i.env_remove("CLAUDE_PROJECT_DIR")
    });
    assert_eq!(run.code, 0);
    assert!(decoy.lexicon().is_some(), "the payload's cwd was the root");
    assert!(project.lexicon().is_none());
    let project = Project::new();
    let bare = json!({ "transcript_path": project.path("transcript.jsonl") }).to_string();
    project
        .run(T0, &[], Some(&bare), |i| {
            i.env_remove("CLAUDE_PROJECT_DIR").cwd(project.root())
        })
        .assert_completed();
    assert!(project.lexicon().is_some());
}

#[test]
fn a_contradiction_is_flagged_in_the_file_and_the_summary() {
    let project = Project::new();
    let before = format!(
        "{HEADER}\n\n## Conventions\n\n### Backoff policy\n- **Definition**: Linear retry with five attempts.\n- **Aliases**: none\n- **Relations**: none\n- **Source**: user 2026-11-01\n"
    );
    project.write(".roc/rocket/lexicon.md", &before);
    let run = project.hook(T0);
    run.assert_completed();
    let summary = run.stdout.trim();
    assert!(
        summary.starts_with("Lexicon updated: 1 added, 1 merged, 1 flagged."),
        "{summary}"
    );
    assert!(summary.ends_with("Flagged: Backoff policy."), "{summary}");
    let lexicon = project.lexicon().expect("written");
    assert_lexicon_invariants(&lexicon);
    assert!(
        lexicon.contains(
            "- **Definition**: Linear retry with five attempts. <!-- TODO: contradiction with:"
        ),
        "the old definition stays, marked: {lexicon}"
    );
    let writer = project.prompt("writer");
    assert!(
        writer.contains(before.trim()),
        "the writer sees the lexicon: {writer}"
    );
}

/// Prefix a model script with a wait: it says it started (`<model>.started`) and goes on once
/// the test creates `<model>.go` (bounded, so a failed test leaves no process behind for long).
fn hold_model(project: &Project, model: &str) {
    let path = project.path(&format!("models/{model}.sh"));
    let script = fs::read_to_string(&path).expect("a model script");
    project.write(
        &format!("models/{model}.sh"),
        &format!(
            "dir=$(dirname \"$0\")\n\
             touch \"$dir/{model}.started\"\n\
             i=0; while [ ! -e \"$dir/{model}.go\" ] && [ $i -lt 3000 ]; do sleep 0.02; i=$((i+1)); done\n\
             {script}"
        ),
    );
}

#[test]
fn the_sessions_tail_is_judged_at_session_end_and_nothing_twice() {
    let project = Project::new();
    project.hook(T0).assert_completed();
    assert_eq!(project.calls("gate"), 1);
    // The last turn comes within the debounce, and is short: the Stop fire holds it back.
    project.append_transcript(&[
        user_says("One more thing: call it the Retry budget."),
        assistant_says("Noted, the Retry budget."),
    ]);
    project.hook(&at(30)).assert_exited_at("debounce");
    // The session ends: what was held back is judged now, and only that.
    let end = project.session_end(&at(40));
    end.assert_completed();
    assert_eq!(project.calls("gate"), 2);
    let prompt = project.prompt("gate");
    assert!(prompt.contains("Retry budget"), "{prompt}");
    assert!(
        !prompt.contains("add a retry to the upload step"),
        "judged twice: {prompt}"
    );
    assert_eq!(project.cursor_line(), Some(SESSION_LINES + 2));
    // Nothing left: a second SessionEnd judges nothing.
    project
        .session_end(&at(50))
        .assert_exited_at("heuristic_no");
    assert_eq!(project.calls("gate"), 2);
}

#[test]
fn at_session_end_the_run_in_flight_is_waited_for_and_its_tail_judged() {
    let project = Project::new();
    hold_model(&project, "writer");
    let payload = project.payload().to_string();
    let mut first = project
        .command(T0, &["run", "context-update", "--inputs-json", "-"])
        .stdin(&payload)
        .spawn();
    support::wait_for("the first run's writer", Duration::from_secs(60), || {
        project.path("models/writer.started").exists()
    });
    // The session's last turn lands while the first run holds the lock; the session ends.
    project.append_transcript(&[
        user_says("Last: the Retry budget caps retries per hour."),
        assistant_says("Understood."),
    ]);
    let mut end = project.session_end_spawned(&at(5));
    project.write("models/writer.go", "");
    assert_eq!(first.wait().expect("the first run ends").code(), Some(0));
    assert_eq!(end.wait().expect("the SessionEnd run ends").code(), Some(0));
    let statuses: Vec<String> = project
        .run_ids()
        .iter()
        .map(|id| {
            project.record(id)["status"]
                .as_str()
                .unwrap_or("")
                .to_string()
        })
        .collect();
    assert_eq!(
        statuses,
        ["completed", "completed"],
        "the tail's run waited for the lock"
    );
    assert_eq!(project.calls("gate"), 2);
    let prompt = project.prompt("gate");
    assert!(
        prompt.contains("Retry budget") && !prompt.contains("upload step?"),
        "{prompt}"
    );
    assert_eq!(project.cursor_line(), Some(SESSION_LINES + 2));
}

#[test]
fn an_empty_writer_reply_on_a_new_project_writes_nothing() {
    let project = Project::new();
    project.writer_replies(r#"{"entries": []}"#);
    let run = project.hook(T0);
    run.assert_completed();
    assert_eq!(run.stdout.trim(), "No update needed.");
    assert_eq!(project.lexicon(), None, "no header-only lexicon");
    assert_eq!(
        project.cursor_line(),
        Some(SESSION_LINES),
        "the delta was judged"
    );
}

#[test]
fn a_second_run_while_the_first_holds_the_lock_ends_on_the_lock() {
    let project = Project::new();
    // The first run holds the lock while its writer is held; the second meets it there.
    hold_model(&project, "writer");
    let payload = project.payload().to_string();
    let mut first = project
        .command(T0, &["run", "context-update", "--inputs-json", "-"])
        .stdin(&payload)
        .spawn();
    support::wait_for("the first run's writer", Duration::from_secs(60), || {
        project.path("models/writer.started").exists()
    });
    let second = project
        .command(T0, &["run", "context-update", "--inputs-json", "-"])
        .stdin(&payload)
        .output();
    second.code(0);
    project.write("models/writer.go", "");
    let status = first.wait().expect("the first run ends");
    assert_eq!(status.code(), Some(0));
    let outcomes: Vec<(String, Option<String>)> = project
        .run_ids()
        .iter()
        .map(|id| {
            let record = project.record(id);
            (
                record["status"].as_str().unwrap_or("").to_string(),
                record["exit"]["stage"].as_str().map(str::to_string),
            )
        })
        .collect();
    assert_eq!(
        outcomes,
        [
            ("completed".to_string(), None),
            ("exited".to_string(), Some("lock".to_string()))
        ],
        "the first run writes, the second ends on its lock"
    );
    assert_eq!(
        project.calls("writer"),
        1,
        "only the lock holder asks the writer"
    );
    assert_lexicon_invariants(&project.lexicon().expect("the lexicon was written"));
    assert!(
        !project.path(".roc/rocket/lexicon.md.lock.d").exists(),
        "the lock is released"
    );
}

/// Waits until the project has `count` finished runs, and returns the newest.
fn wait_for_runs(project: &Project, count: usize) -> Value {
    let finished = || {
        project
            .run_ids()
            .iter()
            .map(|id| project.record(id))
            .filter(|record| record["status"] != "running")
            .count()
    };
    support::wait_for("the runs to finish", Duration::from_secs(60), || {
        finished() >= count
    });
    let ids = project.run_ids();
    project.record(ids.last().expect("a run"))
}

#[test]
fn sigterm_ends_the_hook_with_exit_zero_and_an_interrupted_record() {
    let project = Project::new();
    // A writer that takes its time: the run is inside a model call when the host gives up.
    let script = fs::read_to_string(project.path("models/writer.sh")).expect("writer script");
    project.write(
        "models/writer.sh",
        &format!("touch \"$(dirname \"$0\")/writer.started\"\nsleep 30\n{script}"),
    );
    let payload = project.payload().to_string();
    let mut child = project
        .command(
            T0,
            &["run", "context-update", "--inputs-json", "-", "--quiet"],
        )
        .stdin(&payload)
        .spawn();
    support::wait_for("the writer to start", Duration::from_secs(30), || {
        project.path("models/writer.started").exists()
    });
    // SAFETY: kill has no memory-safety preconditions.
    let sent = unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    assert_eq!(sent, 0, "send SIGTERM");
    let status = child.wait().expect("the hook ends");
    assert_eq!(
        status.code(),
        Some(0),
        "an always-exit-zero hook exits 0 on SIGTERM"
    );
    let record = project.record(project.run_ids().last().expect("a run"));
    assert_eq!(record["status"], "interrupted", "{record:#}");
    assert_eq!(project.cursor(), None, "an interruption judges nothing");
    assert_eq!(project.lexicon(), None);
    assert!(!project.path(".roc/rocket/lexicon.md.lock.d").exists());
}

#[test]
fn detach_returns_at_once_and_the_run_goes_on_in_its_own_session() {
    let project = Project::new();
    // The writer is held until the command has returned: returning cannot wait for the run.
    hold_model(&project, "writer");
    let payload = project.payload().to_string();
    let out = project
        .command(
            T0,
            &[
                "run",
                "context-update",
                "--inputs-json",
                "-",
                "--quiet",
                "--detach",
            ],
        )
        .stdin(&payload)
        .output();
    out.code(0);
    assert!(out.stdout.is_empty(), "{}", out.stdout);
    assert_eq!(project.lexicon(), None, "the run is still going");
    project.write("models/writer.go", "");
    let record = wait_for_runs(&project, 1);
    assert_eq!(record["status"], "completed", "{record:#}");
    assert_eq!(record["inputs"]["hook_event_name"], "Stop");
    assert_eq!(project.calls("writer"), 1);
    assert!(project.lexicon().is_some());
    assert_eq!(project.cursor_line(), Some(SESSION_LINES));
}

#[test]
fn nothing_but_the_lexicon_and_its_cursor_is_written_in_the_project() {
    let project = Project::new();
    fs::create_dir_all(project.path("sub")).expect("a subfolder");
    let before: Vec<PathBuf> = tree(project.root());
    project.hook(T0).assert_completed();
    let after: Vec<PathBuf> = tree(project.root())
        .into_iter()
        .filter(|path| !before.contains(path))
        .filter(|path| !path.starts_with(project.path("models")))
        .filter(|path| !path.starts_with(project.path("state-home")))
        .collect();
    assert_eq!(
        after,
        [
            project.path(".roc"),
            project.path(".roc/rocket"),
            project.path(".roc/rocket/context-gate-state.json"),
            project.path(".roc/rocket/lexicon.md"),
        ]
    );
    // The records hold conversation text: owner-only, out of the project tree.
    use std::os::unix::fs::PermissionsExt;
    for path in tree(&project.state_dir()) {
        let mode = fs::metadata(&path).expect("metadata").permissions().mode() & 0o777;
        let want = if path.is_dir() { 0o700 } else { 0o600 };
        assert_eq!(mode, want, "{}", path.display());
    }
    let show = project
        .command(T0, &["runs", "show", "last", "--json"])
        .output();
    show.code(0);
    assert!(show.stdout.contains("\"workflow\": \"context-update\""));
}

/// Every path under `root`, sorted.
fn tree(root: &Path) -> Vec<PathBuf> {
    let mut paths: Vec<PathBuf> = walkdir::WalkDir::new(root)
        .min_depth(1)
        .into_iter()
        .flatten()
        .map(|entry| entry.path().to_path_buf())
        .collect();
    paths.sort();
    paths
}

/// The transcript cut before line `end` (0-based), as it stands when a Stop hook fires.
fn cut_transcript(project: &Project, name: &str, end: usize) {
    let text = fs::read_to_string(fixture(name)).expect("a transcript fixture");
    let lines: Vec<&str> = text.lines().take(end).collect();
    project.write("transcript.jsonl", &(lines.join("\n") + "\n"));
}

/// Where each turn of a fixture ends: the lines before each `stop_hook_summary` (the hook fires
/// after the assistant's line, before Claude Code records that it ran).
fn turn_ends(name: &str) -> Vec<usize> {
    let text = fs::read_to_string(fixture(name)).expect("a transcript fixture");
    text.lines()
        .enumerate()
        .filter(|(_, line)| line.contains("\"subtype\": \"stop_hook_summary\""))
        .map(|(index, _)| index)
        .collect()
}

#[test]
fn in_a_real_session_the_words_of_short_turns_accumulate_until_the_gate_fires() {
    // Four turns of `claude -p` / `claude -p -c` (2.1.x): each is a queue-operation pair, one
    // user line, attachments, bookkeeping and one assistant line; a Stop hook after each.
    let project = Project::new();
    project.write(
        "CLAUDE.md",
        "# Greenhouse\n\n- Background context: enabled\n",
    );
    project.gate_replies(GATE_NO);
    let ends = turn_ends("cli-2.1-turns.jsonl");
    assert_eq!(ends.len(), 4);
    cut_transcript(&project, "cli-2.1-turns.jsonl", ends[0]);
    let first = project.hook(T0);
    first.assert_exited_at("heuristic_no");
    assert!(
        first
            .exit_message()
            .contains("36 words said in lines 1-10, fewer than 40"),
        "{}",
        first.exit_message()
    );
    assert_eq!(project.calls("gate"), 0);
    assert_eq!(
        project.cursor(),
        None,
        "a thin delta is not judged: the cursor stays"
    );

    cut_transcript(&project, "cli-2.1-turns.jsonl", ends[1]);
    let second = project.hook(&at(30));
    second.assert_exited_at("gate_no");
    let gate = project.prompt("gate");
    for said in [
        "user: We call the seed tray rack the Propagation Bench; the Grower owns it.",
        "assistant: Understood: the Propagation Bench is the seed tray rack",
        "user: The Misting Cycle runs every ten minutes on the Propagation Bench.",
    ] {
        assert!(gate.contains(said), "{said:?} in {gate}");
    }
    assert_eq!(
        gate.matches("user: ").count(),
        2,
        "each message once: {gate}"
    );
    assert!(!gate.contains("system-reminder"), "{gate}");
    assert!(!gate.contains("stagegraph run context-update"), "{gate}");
    let judged = ends[1] as u64;
    assert_eq!(project.cursor_line(), Some(judged));

    // The third turn alone is thin again; with the fourth, the gate sees both.
    cut_transcript(&project, "cli-2.1-turns.jsonl", ends[2]);
    project.hook(&at(60)).assert_exited_at("heuristic_no");
    assert_eq!(project.cursor_line(), Some(judged));
    project.gate_replies(r#"{"update": true, "candidates": ["Misting Cycle", "Grower"]}"#);
    project.writer_replies(r#"{"entries": [
      {"area": "Domain", "concept": "Misting Cycle", "definition": "The ten-minute watering of the Propagation Bench; only the Grower changes it.", "aliases": [], "relations": ["Grower"], "source": "conversation 2026-11-30"},
      {"area": "Roles", "concept": "Grower", "definition": "The role that owns the Propagation Bench and its Misting Cycle.", "aliases": [], "relations": [], "source": "conversation 2026-11-30"}
    ]}"#);
    cut_transcript(&project, "cli-2.1-turns.jsonl", ends[3]);
    project.hook(&at(90)).assert_completed();
    let gate = project.prompt("gate");
    assert!(
        gate.contains("user: Only the Grower may change the Misting Cycle."),
        "{gate}"
    );
    assert!(
        gate.contains("user: From now on, log every Misting Cycle"),
        "{gate}"
    );
    assert!(
        !gate.contains("Propagation Bench; the Grower owns it."),
        "judged before: {gate}"
    );
    let lexicon = project.lexicon().expect("written");
    assert_lexicon_invariants(&lexicon);
    assert!(lexicon.contains("### Misting Cycle"), "{lexicon}");
    assert_eq!(project.cursor_line(), Some(ends[3] as u64));
}

#[test]
fn queued_messages_and_answers_reach_the_gate_as_the_users_words() {
    let project = Project::new();
    project.use_transcript("mid-turn.jsonl");
    project.gate_replies(GATE_NO);
    project.hook(T0).assert_exited_at("gate_no");
    let gate = project.prompt("gate");
    for said in [
        "user: Add the humidity probe to the Propagation Bench.",
        "user: And the Dew Sensor reports to the Grower.",
        "user: (answering \"Where should the Dew Sensor readings be stored?\") Bench journal",
        "user: Call the probe the Dew Sensor, please.",
        "user: Next, rename the old probe module to dew_sensor.",
    ] {
        assert!(gate.contains(said), "{said:?} in {gate}");
    }
    assert_eq!(
        gate.matches("Dew Sensor reports to the Grower").count(),
        1,
        "{gate}"
    );
    assert!(
        !gate.contains("pub struct Bench"),
        "tool output stays out: {gate}"
    );

    // In manual mode the writer sees them too.
    project.manual(T0).assert_completed();
    assert!(project
        .prompt("writer")
        .contains("(answering \"Where should the Dew Sensor"));
}

#[test]
fn claude_codes_own_lines_are_not_the_users_words_and_no_control_character_reaches_a_model() {
    let project = Project::new();
    project.use_transcript("noise.jsonl");
    project
        .hook_with(T0, &["--input", "min_words=5"], |i| i)
        .assert_completed();
    let gate = project.prompt("gate");
    for noise in [
        "/cost",
        "Total cost",
        "Request interrupted",
        "opened src/bench.rs",
        "Caveat:",
        "Find every file",
    ] {
        assert!(!gate.contains(noise), "{noise:?} in {gate}");
    }
    assert!(gate.contains("user: the Dew Sensor wiring"), "{gate}");
    // The line with a lone surrogate is kept, the character replaced.
    assert!(
        gate.contains("user: The Dew Sensor \u{fffd} alarm fires below 40% humidity."),
        "{gate}"
    );
    // The compaction summary is context, labelled, never the user's words.
    assert!(gate.contains("for context only"), "{gate}");
    assert!(
        gate.contains("<summary>\nThis session is being continued"),
        "{gate}"
    );
    assert!(
        !gate.contains("user: This session is being continued"),
        "{gate}"
    );
    // Escapes and control characters are stripped, from the lexicon and CLAUDE.md too.
    project.write(
        "CLAUDE.md",
        &format!("{ENABLED}\u{1b}[31mred\u{1b}[0m and a bell\u{7}\n"),
    );
    project.write(
        ".roc/rocket/lexicon.md",
        &format!("{HEADER}\n\n## Domain\n\n### Dew\u{1b}[1m Sensor\n- **Definition**: The humidity probe.\u{7}\n- **Aliases**: none\n- **Relations**: none\n- **Source**: user 2026-11-01\n"),
    );
    project.manual(T0).assert_completed();
    for prompt in [project.prompt("gate"), project.prompt("writer")] {
        let bad: Vec<char> = prompt
            .chars()
            .filter(|c| c.is_control() && *c != '\n' && *c != '\t')
            .collect();
        assert!(bad.is_empty(), "{bad:?} in {prompt}");
    }
    assert!(project.prompt("writer").contains("red and a bell"));
}

#[test]
fn every_write_applies_every_rule_and_an_unchanged_lexicon_is_not_rewritten() {
    let project = Project::new();
    // A hand-edited lexicon: a prose line outside any entry, an entry missing a key, a dangling
    // relation, and far over the 300-line budget with old unreferenced entries.
    let mut text = format!("{HEADER}\n\nNotes from the kickoff: keep names short.\n\n## Domain\n\n### Broken\n- **Definition**: No aliases line.\n- **Relations**: none\n- **Source**: user 2026-11-01\n\n### Dangling\n- **Definition**: Points nowhere.\n- **Aliases**: none\n- **Relations**: Nowhere\n- **Source**: user 2026-11-01\n");
    for i in 0..70 {
        text.push_str(&format!("\n### Old {i:02}\n- **Definition**: An old concept.\n- **Aliases**: none\n- **Relations**: none\n- **Source**: user 2020-01-01\n"));
    }
    project.write(".roc/rocket/lexicon.md", &text);
    project.writer_replies(r#"{"entries": []}"#);
    let run = project.hook(T0);
    run.assert_completed();
    let lexicon = project.lexicon().expect("rewritten");
    assert!(lexicon.lines().count() <= 300, "pruned to the budget");
    assert!(lexicon.contains("<!-- TODO: invariant lines outside any entry -->\nNotes from the kickoff: keep names short."), "{lexicon}");
    assert!(
        lexicon.contains("### Broken <!-- TODO: invariant missing Aliases -->")
            || lexicon.contains(
                "- **Definition**: No aliases line. <!-- TODO: invariant missing Aliases -->"
            ),
        "{lexicon}"
    );
    assert!(
        lexicon.contains("<!-- TODO: invariant dangling relation Nowhere -->"),
        "{lexicon}"
    );
    assert!(
        run.stdout
            .starts_with("Lexicon updated: 0 added, 0 merged, 3 flagged."),
        "{}",
        run.stdout
    );
    // A rewrite would show as a modification time other than this one.
    let written_at = support::backdate(&project.path(".roc/rocket/lexicon.md"));

    // The file now keeps every rule: the same empty answer writes nothing.
    let again = project.manual(&at(3600));
    again.assert_completed();
    assert_eq!(again.stdout.trim(), "No update needed.");
    assert_eq!(again.stage("write"), "skipped");
    assert_eq!(project.lexicon().as_deref(), Some(lexicon.as_str()));
    assert_eq!(
        support::modified(&project.path(".roc/rocket/lexicon.md")),
        written_at
    );
}

#[test]
fn restating_a_known_concept_on_a_later_day_changes_nothing() {
    let project = Project::new();
    project.hook(T0).assert_completed();
    let lexicon = project.lexicon().expect("written");
    // A week later the conversation says the same; the writer dates its entries today.
    project.writer_replies(
        &WRITER_ENTRIES.replace("conversation 2026-11-30", "conversation 2026-12-07"),
    );
    let later = project.manual(&at(7 * 24 * 3600));
    later.assert_completed();
    assert_eq!(later.stdout.trim(), "No update needed.");
    assert_eq!(project.lexicon().as_deref(), Some(lexicon.as_str()));
}

#[test]
fn manual_mode_on_an_empty_or_wordless_transcript_calls_no_model() {
    for transcript in [
        String::new(),
        format!("{}\n{}\n", tool_call("toolu_1"), tool_result("toolu_1")),
    ] {
        let project = Project::new();
        project.write("transcript.jsonl", &transcript);
        let run = project.manual(T0);
        run.assert_exited_at("nothing_said");
        assert_eq!(run.stdout.trim(), "No update needed.");
        assert_eq!(project.calls("gate"), 0);
        assert_eq!(project.calls("writer"), 0);
        assert_eq!(project.lexicon(), None);
    }
}

#[test]
fn two_sessions_of_a_project_keep_their_own_cursors() {
    let project = Project::new();
    project.gate_replies(GATE_NO);
    let other = project.path("other.jsonl");
    fs::copy(fixture("cli-2.1-turns.jsonl"), &other).expect("a second session");
    let payload_for = |path: &Path| {
        let mut payload = project.payload();
        payload["transcript_path"] = json!(path);
        payload.to_string()
    };
    let main = project.path("transcript.jsonl");
    for round in 0..2 {
        for path in [&main, &other] {
            let run = project.run(&at(round), &[], Some(&payload_for(path)), |i| i);
            assert_eq!(run.code, 0);
        }
    }
    // Each session was read once from its first line, then had nothing new: one gate call each.
    assert_eq!(project.calls("gate"), 2);
    let cursor = project.cursor().expect("cursors");
    assert_eq!(
        cursor["transcripts"][main.to_str().expect("utf-8")]["last_processed_line"],
        SESSION_LINES
    );
    assert_eq!(
        cursor["transcripts"][other.to_str().expect("utf-8")]["last_processed_line"],
        41
    );
    // The top-level fields stay readable in the original format: the newest cursor.
    assert_eq!(cursor["last_processed_line"], 41);
    assert_eq!(cursor["transcript_path"], json!(other));
}

#[test]
fn a_session_started_in_a_subfolder_is_told_where_the_toggle_is() {
    // Claude Code sets $CLAUDE_PROJECT_DIR to the folder it was started in: a subfolder of the
    // repository whose root CLAUDE.md has the toggle.
    let project = Project::new();
    fs::create_dir_all(project.path(".git")).expect("a repository");
    fs::create_dir_all(project.path("services/billing")).expect("a subfolder");
    let sub = project.path("services/billing");
    let run = project.hook_with(T0, &[], |invocation| {
        invocation.env("CLAUDE_PROJECT_DIR", sub.to_str().expect("UTF-8"))
    });
    // Its records are the subfolder's (another project key): the summary line tells.
    assert_eq!(run.code, 0);
    let message = &run.stderr;
    assert!(message.contains("exited early at `toggle`"), "{message}");
    assert!(
        message.contains("the repository root")
            && message.contains(&project.root().display().to_string()),
        "{message}"
    );
    assert!(
        !project.path("services/billing/.roc").exists(),
        "no second lexicon"
    );
    // Without a toggle above, the message is the plain one.
    project.write("CLAUDE.md", "# Repo\n");
    let run = project.hook_with(T0, &[], |invocation| {
        invocation.env("CLAUDE_PROJECT_DIR", sub.to_str().expect("UTF-8"))
    });
    assert!(
        run.stderr
            .contains("background context is off: no CLAUDE.md at the project root"),
        "{}",
        run.stderr
    );
}

#[test]
fn the_toggle_is_matched_in_any_case() {
    for line in [
        "- background context: Enabled",
        "- BACKGROUND CONTEXT: ENABLED",
        "- Background Context: enabled.",
    ] {
        let project = Project::new();
        project.write("CLAUDE.md", &format!("# Repo\n\n{line}\n"));
        let run = project.hook(T0);
        run.assert_completed();
    }
    let project = Project::new();
    project.write("CLAUDE.md", "# Repo\n\n- Background context: DISABLED\n");
    let run = project.hook(T0);
    run.assert_exited_at("toggle");
    assert!(
        run.exit_message().contains("disabled in CLAUDE.md"),
        "{}",
        run.exit_message()
    );
}

#[test]
fn a_lexicon_changed_under_the_lock_is_not_overwritten() {
    // Another run took the lock over (it looked stale) and wrote the lexicon while this run's
    // writer was thinking: this run's write must not lose that update.
    let project = Project::new();
    let theirs = format!("{HEADER}\n\n## Domain\n\n### Courier\n- **Definition**: Carries uploads.\n- **Aliases**: none\n- **Relations**: none\n- **Source**: user 2026-11-29\n");
    project.write("theirs.md", &theirs);
    let script = fs::read_to_string(project.path("models/writer.sh")).expect("writer script");
    project.write(
        "models/writer.sh",
        &format!("cp \"$(dirname \"$0\")/../theirs.md\" \"$(dirname \"$0\")/../.roc/rocket/lexicon.md\"\n{script}"),
    );
    let run = project.hook(T0);
    assert_eq!(run.code, 0);
    assert_eq!(run.status(), "failed");
    assert_eq!(run.stage("write"), "failed");
    let error = support::stage(run.record(), "write")["error"]
        .as_str()
        .unwrap_or("")
        .to_string();
    assert!(error.contains("changed since it was read"), "{error}");
    assert_eq!(
        project.lexicon().as_deref(),
        Some(theirs.as_str()),
        "their update stands"
    );
    assert_eq!(
        project.cursor(),
        None,
        "the delta is judged again on the next fire"
    );
    assert!(!project.path(".roc/rocket/lexicon.md.lock.d").exists());
}

// The loopback Messages API of the Claude Code tests, compiled here too (its module there is
// private to them).
#[allow(dead_code, clippy::duplicate_mod)]
#[path = "claude_code/messages_stub.rs"]
mod messages_stub;

/// The text of every message of a Messages API request, joined.
fn request_text(request: &Value) -> String {
    request["messages"].to_string()
}

#[test]
fn the_real_claude_cli_fires_the_hook_after_each_turn_and_the_lexicon_is_written() {
    let Some(claude) = crate::claude_code::claude_cli() else {
        crate::support::skip("the Claude Code CLI is not installed (set STAGEGRAPH_TEST_CLAUDE or put claude on PATH)");
        return;
    };
    use messages_stub::{MessagesStub, Reply};
    let gate_reply =
        json!({"update": true, "candidates": ["Propagation Bench", "Misting Cycle", "Grower"]});
    let writer_reply = json!({"entries": [
        {"area": "Domain", "concept": "Propagation Bench", "definition": "The seed tray rack.", "aliases": ["seed tray rack"], "relations": ["Grower"], "source": "conversation 2026-12-01"},
        {"area": "Domain", "concept": "Misting Cycle", "definition": "Watering of the Propagation Bench every ten minutes, logged to the bench journal.", "aliases": [], "relations": ["Propagation Bench", "Grower"], "source": "conversation 2026-12-01"},
        {"area": "Roles", "concept": "Grower", "definition": "Owns the Propagation Bench; the only one who may change the Misting Cycle.", "aliases": [], "relations": [], "source": "conversation 2026-12-01"}
    ]});
    // The session's turns get a short text; the gate and the writer (the default aliases call
    // the same CLI) get their answer: as a call of the StructuredOutput tool when the CLI offers
    // the stage's schema as one (then a text once its result came back), else as the text.
    let stub = MessagesStub::start(move |request| {
        let text = request_text(request);
        let structured = request["tools"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|tool| tool["name"] == "StructuredOutput");
        let answered = text.contains("\"tool_result\"");
        let answer = if text.contains("You are the gate of a project lexicon") {
            Some(gate_reply.clone())
        } else if text.contains("Integrate these candidate concepts") {
            Some(writer_reply.clone())
        } else {
            None
        };
        match answer {
            Some(input) if structured && !answered => Reply::ToolUse {
                name: "StructuredOutput".into(),
                input,
            },
            Some(_) if structured => Reply::Text("done".into()),
            Some(json) => Reply::Text(json.to_string()),
            None => Reply::Text("Noted.".into()),
        }
    });
    let test = Test::new();
    let project = test.path("greenhouse");
    test.write(
        "greenhouse/CLAUDE.md",
        "# Greenhouse\n\n- Background context: enabled\n",
    );
    // The README's hook snippet.
    test.write(
        "greenhouse/.claude/settings.json",
        &json!({ "hooks": { "Stop": [ { "hooks": [ {
            "type": "command",
            "command": "stagegraph run context-update --inputs-json - --quiet --detach"
        } ] } ] } })
        .to_string(),
    );
    let bin_dir = Path::new(support::BIN)
        .parent()
        .expect("the binary's folder");
    let claude_dir = claude.parent().expect("the CLI's folder");
    let path = format!(
        "{}:{}:{}",
        bin_dir.display(),
        claude_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let state_dir = test
        .path("state-home/stagegraph")
        .join(stagegraph::StateDir::project_key(&project));
    let hook_runs = |session: &str| -> Vec<Value> {
        support::recorded_runs(&state_dir)
            .iter()
            .map(|id| support::read_record(&state_dir, id))
            .filter(|record| {
                record["inputs"]["session_id"] == session && record["status"] != "running"
            })
            .collect()
    };
    let turns = [
        "We call the seed tray rack the Propagation Bench; the Grower owns it.",
        "The Misting Cycle runs every ten minutes on the Propagation Bench.",
        "Only the Grower may change the Misting Cycle.",
        "From now on, log every Misting Cycle to the bench journal.",
    ];
    let mut session = String::new();
    for (turn, said) in turns.iter().enumerate() {
        let mut command = std::process::Command::new(&claude);
        if turn > 0 {
            command.arg("-c");
        }
        let out = command
            .args(["-p", said, "--output-format", "json"])
            .current_dir(&project)
            .env("HOME", test.root())
            .env("PATH", &path)
            .env("XDG_CONFIG_HOME", test.path("config"))
            .env("XDG_STATE_HOME", test.path("state-home"))
            .env("ANTHROPIC_BASE_URL", &stub.url)
            .env("ANTHROPIC_API_KEY", "sk-ant-test-key")
            .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
            .env("DISABLE_AUTOUPDATER", "1")
            .env_remove("CLAUDE_PROJECT_DIR")
            .env_remove("ROCKET_CONTEXT_UPDATE_INVOKED")
            .env_remove("STAGEGRAPH_CONFIG")
            .env_remove("STAGEGRAPH_PATH")
            .stdin(std::process::Stdio::null())
            .output()
            .expect("run claude");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "claude failed: {stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let result: Value = serde_json::from_str(stdout.trim()).expect("claude's JSON result");
        let id = result["session_id"]
            .as_str()
            .expect("a session id")
            .to_string();
        if turn == 0 {
            session = id;
        } else {
            assert_eq!(id, session, "-c continues the session");
        }
        // The hook went on in the background: wait for its run.
        support::wait_for("the Stop hook's run", Duration::from_secs(180), || {
            hook_runs(&session).len() > turn
        });
    }
    let runs = hook_runs(&session);
    let ends: Vec<(String, String)> = runs
        .iter()
        .map(|r| {
            (
                r["status"].as_str().unwrap_or("").to_string(),
                r["exit"]["stage"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect();
    assert_eq!(runs.len(), 4, "{ends:?}");
    // Short turns: their words wait until there are enough, then the gate and the writer run.
    assert_eq!(
        ends[..3],
        [
            ("exited".to_string(), "heuristic_no".to_string()),
            ("exited".to_string(), "heuristic_no".to_string()),
            ("exited".to_string(), "heuristic_no".to_string())
        ],
        "{:#}",
        Value::Array(runs[..3].to_vec())
    );
    assert_eq!(
        ends[3],
        ("completed".to_string(), String::new()),
        "{:#}",
        runs[3]
    );
    let requests = stub.requests();
    let gate = requests
        .iter()
        .map(request_text)
        .find(|text| text.contains("You are the gate of a project lexicon"))
        .expect("the gate was asked");
    for said in turns {
        assert!(gate.contains(said), "{said:?} in {gate}");
    }
    let lexicon = fs::read_to_string(project.join(".roc/rocket/lexicon.md")).expect("the lexicon");
    assert_lexicon_invariants(&lexicon);
    for concept in ["### Grower", "### Misting Cycle", "### Propagation Bench"] {
        assert!(lexicon.contains(concept), "{concept} in {lexicon}");
    }
    // The cursor names the session's real transcript, and nothing but the lexicon, its cursor
    // and Claude Code's own settings is in the project.
    let cursor: Value = serde_json::from_str(
        &fs::read_to_string(project.join(".roc/rocket/context-gate-state.json")).expect("a cursor"),
    )
    .expect("JSON");
    let transcript = cursor["transcript_path"].as_str().expect("a transcript");
    assert!(
        transcript.starts_with(test.path(".claude/projects").to_str().expect("utf-8")),
        "{transcript}"
    );
    // The run is recorded as finished just before its lock is let go.
    let lock = project.join(".roc/rocket/lexicon.md.lock.d");
    support::wait_for("the lock to be released", Duration::from_secs(30), || {
        !lock.exists()
    });
    let mut left: Vec<String> = tree(&project)
        .iter()
        .map(|p| {
            p.strip_prefix(&project)
                .expect("inside")
                .display()
                .to_string()
        })
        .collect();
    left.sort();
    assert_eq!(
        left,
        [
            ".claude",
            ".claude/settings.json",
            ".roc",
            ".roc/rocket",
            ".roc/rocket/context-gate-state.json",
            ".roc/rocket/lexicon.md",
            "CLAUDE.md"
        ]
    );
}

/// The report of a real hook run opens in headless Chromium, with a node for every stage.
#[test]
fn a_hook_runs_report_opens_in_chromium() {
    let project = Project::new();
    let run = project.hook(T0);
    run.assert_completed();
    let stages = run.record()["stages"].as_object().expect("stages").len();
    let report = project.path("context-update-report.html");
    project
        .command(
            T0,
            &[
                "runs",
                "report",
                "last",
                "-o",
                report.to_str().expect("UTF-8"),
            ],
        )
        .output()
        .code(0);
    let html = fs::read_to_string(&report).expect("the report");
    assert_eq!(
        html.matches("<g class=\"node ").count(),
        stages,
        "one node per stage"
    );
    crate::report::opens_in_chromium(&project.t, &report, stages, "context-update");
}
