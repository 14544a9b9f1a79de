//! The tests of `transcript.delta`, through the built-in and on its pieces.

use std::io::{self, Write};
use std::time::Duration;

use serde_json::{json, Value};

use super::line::replace_lone_surrogates;
use super::text::{cap_text, CUT_MARKER};
use super::with::DeltaArgs;
use super::{builtins, delta, output_schema, run};
use crate::builtins::{args, BuiltinCtx, WriteRoots};
use crate::floor::time::Clock;

fn user_text(text: &str) -> String {
    json!({
        "parentUuid": null, "isSidechain": false, "userType": "external", "cwd": "/repo",
        "sessionId": "5b1e7c2a-0000-4000-8000-000000000001", "version": "2.0.31",
        "gitBranch": "main", "type": "user",
        "message": { "role": "user", "content": text },
        "uuid": "e21ba32d-d221-4dee-87f2-86149cfb213e", "timestamp": "2026-11-30T00:00:00.000Z"
    })
    .to_string()
}

fn user_blocks(blocks: Value) -> String {
    json!({
        "parentUuid": null, "isSidechain": false, "userType": "external", "cwd": "/repo",
        "sessionId": "5b1e7c2a-0000-4000-8000-000000000001", "version": "2.0.31",
        "type": "user", "message": { "role": "user", "content": blocks },
        "uuid": "91545372-b279-4d0c-b229-66d3f42e9cc2", "timestamp": "2026-11-30T00:00:00.000Z"
    })
    .to_string()
}

fn tool_result(output: &str) -> String {
    user_blocks(json!([{ "type": "tool_result", "tool_use_id": "toolu_01", "content": output }]))
}

fn assistant(blocks: Value) -> String {
    json!({
        "parentUuid": null, "isSidechain": false, "userType": "external", "cwd": "/repo",
        "sessionId": "5b1e7c2a-0000-4000-8000-000000000001", "version": "2.0.31",
        "type": "assistant",
        "message": {
            "id": "msg_01", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
            "content": blocks, "stop_reason": "end_turn",
            "usage": { "input_tokens": 10, "output_tokens": 20 }
        },
        "uuid": "fbe2739b-8f72-4e6b-9a0c-5beaefd2beef", "timestamp": "2026-11-30T00:00:00.000Z"
    })
    .to_string()
}

fn thinking() -> Value {
    json!({ "type": "thinking", "thinking": "private reasoning ".repeat(20), "signature": "EqQBCkYIBxgCKkB".repeat(8) })
}

fn assistant_text(text: &str) -> String {
    assistant(json!([thinking(), { "type": "text", "text": text }]))
}

fn tool_use() -> String {
    assistant(
        json!([{ "type": "tool_use", "id": "toolu_01", "name": "Read", "input": { "file_path": "src/upload.rs" } }]),
    )
}

fn summary() -> String {
    json!({ "type": "summary", "summary": "Designing the engine", "leafUuid": "50ea388f-0d78-47ee-a80c-b97e9cb63980" }).to_string()
}

/// The example session: summary, user ask, assistant reply, tool call, tool result, assistant
/// reply, user reply (7 lines).
fn example() -> Vec<String> {
    vec![
        summary(),
        user_text("Can you add a retry to the upload step? It fails when the network blips."),
        assistant_text("I'll look at the upload code first."),
        tool_use(),
        tool_result("fn upload() { ... }"),
        assistant_text("Added exponential backoff with three attempts; the retry policy is now a named concept: Backoff policy."),
        user_text("Good. From now on we call that the backoff policy everywhere."),
    ]
}

struct Fixture {
    dir: tempfile::TempDir,
}

impl Fixture {
    pub(super) fn new(content: &str) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::write(dir.path().join("t.jsonl"), content).expect("write transcript");
        Fixture { dir }
    }

    fn lines(lines: &[String]) -> Self {
        Fixture::new(&(lines.join("\n") + "\n"))
    }

    fn delta(&self, with: Value) -> Value {
        let mut with = with;
        with["path"] = json!("t.jsonl");
        let roots = WriteRoots::default();
        let ctx = BuiltinCtx::for_test(self.dir.path(), &roots);
        run(&with, &ctx).expect("transcript.delta")
    }
}

fn validate(schema: &Value, value: &Value) {
    let validator = jsonschema::validator_for(schema).expect("schema compiles");
    let errors: Vec<String> = validator
        .iter_errors(value)
        .map(|e| e.to_string())
        .collect();
    assert!(errors.is_empty(), "{errors:?} in {value}");
}

#[test]
fn reads_the_whole_example_session() {
    let out = Fixture::lines(&example()).delta(json!({}));
    validate(&output_schema(), &out);
    assert_eq!(out["total_lines"], 7);
    assert_eq!(out["from_line"], 0);
    assert_eq!(out["rotated"], false);
    assert_eq!(
        out["text"],
        "user: Can you add a retry to the upload step? It fails when the network blips.\n\n\
         assistant: I'll look at the upload code first.\n\n\
         assistant: Added exponential backoff with three attempts; the retry policy is now a named concept: Backoff policy.\n\n\
         user: Good. From now on we call that the backoff policy everywhere."
    );
    assert_eq!(out["content_lines"], 4);
    assert_eq!(out["user_prose"], 2);
    assert_eq!(out["assistant_prose"], 2);
    assert_eq!(out["tool_lines"], 2);
    assert_eq!(out["skipped_lines"], 0);
    assert_eq!(out["only_tools"], false);
    assert_eq!(
        out["dropped_blocks"],
        json!({ "thinking": 2, "image": 0, "tool": 2, "other": 0 })
    );
}

#[test]
fn thinking_signatures_and_tool_payloads_never_reach_the_text() {
    let out = Fixture::lines(&example()).delta(json!({}));
    let text = out["text"].as_str().expect("text");
    assert!(!text.contains("private reasoning"));
    assert!(!text.contains("EqQBCkYIBxgCKkB"));
    assert!(!text.contains("fn upload()"));
    assert!(!text.contains("src/upload.rs"));
}

#[test]
fn a_cursor_in_the_middle_reads_only_what_follows() {
    let out = Fixture::lines(&example()).delta(json!({ "after_line": 4 }));
    assert_eq!(out["total_lines"], 7);
    assert_eq!(out["from_line"], 4);
    assert_eq!(out["rotated"], false);
    assert_eq!(
        out["text"],
        "assistant: Added exponential backoff with three attempts; the retry policy is now a named concept: Backoff policy.\n\n\
         user: Good. From now on we call that the backoff policy everywhere."
    );
    assert_eq!(out["tool_lines"], 1);
    assert_eq!(out["user_prose"], 1);
    assert_eq!(out["assistant_prose"], 1);
}

#[test]
fn lines_before_the_cursor_are_not_parsed() {
    let mut lines = example();
    lines[1] = "{not json".into();
    let out = Fixture::lines(&lines).delta(json!({ "after_line": 2 }));
    assert_eq!(out["skipped_lines"], 0);
    assert_eq!(out["total_lines"], 7);
}

#[test]
fn a_cursor_at_the_end_gives_an_empty_delta() {
    let out = Fixture::lines(&example()).delta(json!({ "after_line": 7 }));
    assert_eq!(out["text"], "");
    assert_eq!(out["content_lines"], 0);
    assert_eq!(out["only_tools"], false);
    assert_eq!(out["rotated"], false);
    assert_eq!(out["from_line"], 7);
}

#[test]
fn a_cursor_past_the_end_falls_back_to_the_last_lines() {
    let out = Fixture::lines(&example()).delta(json!({ "after_line": 90, "fallback_lines": 2 }));
    assert_eq!(out["rotated"], true);
    assert_eq!(out["total_lines"], 7);
    assert_eq!(out["from_line"], 5);
    assert_eq!(
        out["text"],
        "assistant: Added exponential backoff with three attempts; the retry policy is now a named concept: Backoff policy.\n\n\
         user: Good. From now on we call that the backoff policy everywhere."
    );
    let all = Fixture::lines(&example()).delta(json!({ "after_line": 90 }));
    assert_eq!(all["from_line"], 0);
    assert_eq!(all["content_lines"], 4);
    let none = Fixture::lines(&example()).delta(json!({ "after_line": 90, "fallback_lines": 0 }));
    assert_eq!(none["from_line"], 7);
    assert_eq!(none["text"], "");
}

#[test]
fn a_truncated_last_line_is_neither_counted_nor_read() {
    let mut content = example().join("\n") + "\n";
    let partial = user_text("half written");
    content.push_str(&partial[..partial.len() / 2]);
    let fixture = Fixture::new(&content);
    let out = fixture.delta(json!({ "after_line": 6 }));
    assert_eq!(out["total_lines"], 7);
    assert_eq!(out["skipped_lines"], 0);
    assert!(!out["text"].as_str().expect("text").contains("half"));
    // Once finished, the next delta from total_lines picks it up.
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .open(fixture.dir.path().join("t.jsonl"))
        .expect("open");
    writeln!(file, "{}", &partial[partial.len() / 2..]).expect("append");
    let next = fixture.delta(json!({ "after_line": 7 }));
    assert_eq!(next["total_lines"], 8);
    assert_eq!(next["text"], "user: half written");
}

#[test]
fn a_complete_last_line_without_newline_counts() {
    let out = Fixture::new(&example().join("\n")).delta(json!({ "after_line": 6 }));
    assert_eq!(out["total_lines"], 7);
    assert_eq!(out["user_prose"], 1);
}

#[test]
fn broken_lines_in_the_middle_are_counted_and_skipped() {
    let mut lines = example();
    lines.insert(3, "{\"type\": \"assistant\", \"mess".into());
    lines.insert(4, String::new());
    let out = Fixture::lines(&lines).delta(json!({}));
    assert_eq!(out["total_lines"], 9);
    assert_eq!(out["skipped_lines"], 1);
    assert_eq!(out["content_lines"], 4);
}

#[test]
fn a_tool_only_delta_says_so() {
    let out = Fixture::lines(&example()).delta(json!({ "after_line": 3, "fallback_lines": 0 }));
    assert_eq!(out["only_tools"], false);
    let mut lines = example();
    lines.truncate(5);
    let out = Fixture::lines(&lines).delta(json!({ "after_line": 3 }));
    assert_eq!(out["tool_lines"], 2);
    assert_eq!(out["content_lines"], 0);
    assert_eq!(out["only_tools"], true);
    assert_eq!(out["text"], "");
}

#[test]
fn meta_summary_system_and_sidechain_lines_are_not_prose() {
    let mut meta: Value =
        serde_json::from_str(&user_text("Caveat: generated by local commands")).expect("json");
    meta["isMeta"] = json!(true);
    let mut side: Value =
        serde_json::from_str(&user_text("Search the repo for uploads")).expect("json");
    side["isSidechain"] = json!(true);
    let system = json!({ "type": "system", "content": "Conversation compacted", "level": "info" });
    let odd = json!({ "type": "user", "message": "a string where an object belongs" });
    let lines = vec![
        summary(),
        meta.to_string(),
        side.to_string(),
        system.to_string(),
        odd.to_string(),
        user_text("real words"),
    ];
    let out = Fixture::lines(&lines).delta(json!({}));
    assert_eq!(out["text"], "user: real words");
    assert_eq!(out["user_prose"], 1);
    assert_eq!(out["tool_lines"], 1);
    assert_eq!(out["skipped_lines"], 0);
}

#[test]
fn text_blocks_of_a_mixed_user_line_are_prose_and_images_are_counted() {
    let line = user_blocks(json!([
        { "type": "tool_result", "tool_use_id": "toolu_02", "content": [{ "type": "text", "text": "tool output" }] },
        { "type": "image", "source": { "type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo=" } },
        { "type": "text", "text": "  see the screenshot  " },
        { "type": "document_like_future_block", "text": "ignored" }
    ]));
    let out = Fixture::lines(&[line]).delta(json!({}));
    assert_eq!(out["text"], "user: see the screenshot");
    assert_eq!(out["tool_lines"], 0);
    assert_eq!(out["content_lines"], 1);
    assert_eq!(
        out["dropped_blocks"],
        json!({ "thinking": 0, "image": 1, "tool": 1, "other": 1 })
    );
}

#[test]
fn a_thinking_only_line_is_neither_prose_nor_tools() {
    let out = Fixture::lines(&[assistant(json!([thinking()]))]).delta(json!({}));
    assert_eq!(out["content_lines"], 0);
    assert_eq!(out["tool_lines"], 0);
    assert_eq!(out["dropped_blocks"]["thinking"], 1);
    assert_eq!(out["only_tools"], true);
}

#[test]
fn parts_are_capped_on_char_boundaries() {
    // "é" is two bytes, "€" three: no cap may fall inside either.
    let text = "é€".repeat(100);
    for cap in 4..40 {
        let capped = cap_text(&text, cap);
        assert!(capped.len() <= cap, "{cap}: {}", capped.len());
        assert!(capped.ends_with(CUT_MARKER));
        assert!(text.starts_with(capped.trim_end_matches(CUT_MARKER)));
    }
    assert_eq!(cap_text("short", 5), "short");
    let out = Fixture::lines(&[user_text(&text)]).delta(json!({ "max_part_bytes": 20 }));
    let shown = out["text"].as_str().expect("text");
    assert_eq!(shown, format!("user: {}é{CUT_MARKER}", "é€".repeat(3)));
}

#[test]
fn the_whole_text_keeps_the_newest_parts() {
    let lines: Vec<String> = (0..10)
        .map(|i| user_text(&format!("message {i} ü")))
        .collect();
    // Each part renders as "user: message N ü" (18 bytes), joined by blank lines.
    let out = Fixture::lines(&lines).delta(json!({ "max_bytes": 58 }));
    assert_eq!(
        out["text"],
        "user: message 7 ü\n\nuser: message 8 ü\n\nuser: message 9 ü"
    );
    assert_eq!(out["dropped_parts"], 7);
    assert_eq!(out["user_prose"], 10);
    let single = Fixture::lines(&[user_text(&"ü".repeat(50))]).delta(json!({ "max_bytes": 16 }));
    let text = single["text"].as_str().expect("text");
    assert!(text.len() <= 16);
    assert_eq!(text, format!("user: üüü{CUT_MARKER}"));
}

#[test]
fn a_large_transcript_streams_correctly() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("t.jsonl");
    let mut file = io::BufWriter::new(std::fs::File::create(&path).expect("create"));
    let payload = "x".repeat(4000);
    let mut lines = 0u64;
    let mut written = 0usize;
    while written < 20 * 1024 * 1024 {
        let batch = [
            user_text(&format!("question {lines}")),
            tool_use(),
            tool_result(&payload),
            assistant_text(&format!("answer {lines}")),
        ];
        for line in batch {
            written += line.len() + 1;
            writeln!(file, "{line}").expect("write");
            lines += 1;
        }
    }
    file.flush().expect("flush");
    drop(file);
    let roots = WriteRoots::default();
    let ctx = BuiltinCtx::for_test(dir.path(), &roots);
    let after = lines - 8;
    let out = run(&json!({ "path": "t.jsonl", "after_line": after }), &ctx).expect("delta");
    assert_eq!(out["total_lines"], lines);
    assert_eq!(out["user_prose"], 2);
    assert_eq!(out["assistant_prose"], 2);
    assert_eq!(out["tool_lines"], 4);
    assert_eq!(
        out["text"],
        format!(
            "user: question {}\n\nassistant: answer {}\n\nuser: question {}\n\nassistant: answer {}",
            lines - 8,
            lines - 8,
            lines - 4,
            lines - 4
        )
    );
    let rotated = run(&json!({ "path": "t.jsonl", "after_line": lines + 1 }), &ctx).expect("delta");
    assert_eq!(rotated["rotated"], true);
    assert_eq!(rotated["from_line"], lines - 500);
    assert_eq!(rotated["content_lines"], 250);
    assert_eq!(rotated["tool_lines"], 250);
    let text = rotated["text"].as_str().expect("text");
    assert!(text.len() <= 16384);
    assert!(text.ends_with(&format!("assistant: answer {}", lines - 4)));
    let full = run(&json!({ "path": "t.jsonl" }), &ctx).expect("delta");
    assert_eq!(full["content_lines"], lines / 2);
    assert!(full["dropped_parts"].as_u64().expect("count") > 0);
}

/// A writer still flushing: `settle` reads once the file has been quiet, so the lines
/// written after the call began are in the delta. The wait runs on a fake clock and the
/// writer appends from inside it (at its 15th sleep, 1.5 s into a 2 s window), so the append
/// is known to fall after the call began and before the window ended, whatever the load.
#[test]
fn settle_waits_for_a_file_still_being_written() {
    let roots = WriteRoots::default();
    let dir = tempfile::tempdir().expect("temp dir");
    let ctx = BuiltinCtx::for_test(dir.path(), &roots);
    let path = dir.path().join("t.jsonl");
    let line = |text: &str| {
        json!({"type": "user", "message": {"role": "user", "content": text}}).to_string() + "\n"
    };
    std::fs::write(&path, line("first words")).expect("write");
    let clock = Clock::fake();
    {
        let path = path.clone();
        let late = line("late words");
        clock.on_sleep(move |sleep| {
            if sleep == 15 {
                let mut file = std::fs::OpenOptions::new()
                    .append(true)
                    .open(&path)
                    .expect("open");
                file.write_all(late.as_bytes()).expect("append");
            }
        });
    }
    let out = delta(&json!({ "path": "t.jsonl", "settle": "2s" }), &ctx, &clock).expect("read");
    assert_eq!(out["total_lines"], 2, "{out:#}");
    assert!(
        out["text"]
            .as_str()
            .is_some_and(|t| t.contains("late words")),
        "{out:#}"
    );
    // The quiet window began again at the append: 1.5 s, then 2 s of quiet.
    assert_eq!(clock.elapsed(), Duration::from_millis(3500));
    let bad = run(&json!({ "path": "t.jsonl", "settle": "soon" }), &ctx).expect_err("bad");
    assert!(bad.0.contains("`settle`"), "{bad}");
}

/// A file that never stops changing is read after 20 times the window all the same.
#[test]
fn settle_gives_up_on_a_file_that_keeps_changing() {
    let roots = WriteRoots::default();
    let dir = tempfile::tempdir().expect("temp dir");
    let ctx = BuiltinCtx::for_test(dir.path(), &roots);
    let path = dir.path().join("t.jsonl");
    std::fs::write(&path, "").expect("write");
    let clock = Clock::fake();
    {
        let path = path.clone();
        clock.on_sleep(move |sleep| {
            let mut file = std::fs::OpenOptions::new()
                .append(true)
                .open(&path)
                .expect("open");
            let line = json!({"type": "user", "message": {"role": "user", "content": format!("line {sleep}")}});
            writeln!(file, "{line}").expect("append");
        });
    }
    let out = delta(
        &json!({ "path": "t.jsonl", "settle": "500ms" }),
        &ctx,
        &clock,
    )
    .expect("read");
    assert_eq!(clock.elapsed(), Duration::from_secs(10));
    // A step of 50 ms, a line each step.
    assert_eq!(clock.sleeps(), 200);
    assert_eq!(out["total_lines"], 200, "{out:#}");
}

#[test]
fn arguments_and_files_are_checked() {
    let roots = WriteRoots::default();
    let dir = tempfile::tempdir().expect("temp dir");
    let ctx = BuiltinCtx::for_test(dir.path(), &roots);
    let missing = run(&json!({ "path": "none.jsonl" }), &ctx).expect_err("missing file");
    assert!(
        missing.0.starts_with("cannot read transcript `none.jsonl`"),
        "{missing}"
    );
    let optional = run(&json!({ "path": "none.jsonl", "optional": true }), &ctx)
        .expect("a missing optional transcript is an empty delta");
    assert_eq!(
        (
            &optional["missing"],
            &optional["total_lines"],
            &optional["words"]
        ),
        (&json!(true), &json!(0), &json!(0))
    );
    validate(&output_schema(), &optional);
    std::fs::write(dir.path().join("present.jsonl"), "").expect("write");
    let present = run(&json!({ "path": "present.jsonl", "optional": true }), &ctx).expect("read");
    assert_eq!(present["missing"], json!(false));
    let unknown = run(&json!({ "path": "x", "cursor": 1 }), &ctx).expect_err("unknown key");
    assert!(unknown.0.contains("cursor"), "{unknown}");
    let schema = args::schema::<DeltaArgs>();
    validate(&schema, &json!({ "path": "t.jsonl", "after_line": 3 }));
    let validator = jsonschema::validator_for(&schema).expect("schema compiles");
    assert!(!validator.is_valid(&json!({ "after_line": 3 })));
    assert!(!validator.is_valid(&json!({ "path": "t", "after_line": -1 })));
}

fn queue(operation: &str, content: Option<&str>, reason: Option<&str>) -> String {
    let mut line = json!({
        "type": "queue-operation", "operation": operation,
        "timestamp": "2026-12-01T08:18:38.006Z", "sessionId": "f27a7567-844c-4950-9619-4d8bbe43a8ec"
    });
    if let Some(content) = content {
        line["content"] = json!(content);
    }
    if let Some(reason) = reason {
        line["reason"] = json!(reason);
    }
    line.to_string()
}

fn queued_command(prompt: Value) -> String {
    json!({
        "parentUuid": "5a9dbdf8-bb7c-4a46-a190-f6de37777a61", "isSidechain": false,
        "type": "attachment", "uuid": "c08591b4-505f-4050-a846-49143cdd2081",
        "attachment": { "type": "queued_command", "prompt": prompt, "commandMode": "prompt" },
        "timestamp": "2026-12-01T08:18:40.000Z", "cwd": "/home/dev/ledger", "version": "2.1.332"
    })
    .to_string()
}

fn environment_attachment() -> String {
    json!({
        "type": "attachment", "isSidechain": false,
        "attachment": { "type": "environment", "snapshot": { "workingDirectory": "/home/dev/ledger" } },
        "rendered": [{ "content": "<system-reminder>\n# Environment\n</system-reminder>" }]
    })
    .to_string()
}

#[test]
fn queued_messages_are_the_users_words_said_once() {
    // 2.1.x: every prompt is enqueued, dequeued, then written as a `user` line.
    let dequeued = vec![
        queue(
            "enqueue",
            Some("We call the nightly job the Sync Worker.\n"),
            None,
        ),
        queue("dequeue", None, None),
        user_text("We call the nightly job the Sync Worker.\n"),
        environment_attachment(),
        assistant_text("Noted: the Sync Worker."),
    ];
    let out = Fixture::lines(&dequeued).delta(json!({}));
    assert_eq!(
        out["text"],
        "user: We call the nightly job the Sync Worker.\n\nassistant: Noted: the Sync Worker."
    );
    assert_eq!(out["queued_parts"], 0);
    assert_eq!(out["user_prose"], 1);

    // Typed while the assistant worked: enqueued and never followed by a user line, absorbed
    // mid-turn, or recorded as a queued_command attachment (beside its queue line).
    let mid_turn = vec![
        user_text("Rename the upload step."),
        tool_use(),
        queue("enqueue", Some("Also call it the Courier."), None),
        tool_result("ok"),
        queue(
            "enqueue",
            Some("And the retries are the Backoff policy."),
            None,
        ),
        queue(
            "remove",
            Some("And the retries are the Backoff policy."),
            Some("absorbed_mid_turn"),
        ),
        queued_command(json!("And the retries are the Backoff policy.")),
        queued_command(json!([{ "type": "text", "text": "The Courier owns uploads." }])),
        assistant_text("Done."),
        queue(
            "enqueue",
            Some("One more: the Ledger is append-only."),
            None,
        ),
    ];
    let out = Fixture::lines(&mid_turn).delta(json!({}));
    assert_eq!(
        out["text"],
        "user: Rename the upload step.\n\n\
         user: And the retries are the Backoff policy.\n\n\
         user: The Courier owns uploads.\n\n\
         assistant: Done.\n\n\
         user: Also call it the Courier.\n\n\
         user: One more: the Ledger is append-only."
    );
    assert_eq!(out["queued_parts"], 4);
    assert_eq!(out["only_tools"], false);

    // An older Claude Code (before 2.1.246) records an absorbed message as a `remove`
    // without a reason: its lines' version tells.
    let old = vec![
        user_text("Rename the upload step.").replace("2.0.31", "2.1.241"),
        queue("enqueue", Some("Also call it the Courier."), None),
        queue("remove", Some("Also call it the Courier."), None),
        assistant_text("Done."),
    ];
    let out = Fixture::lines(&old).delta(json!({}));
    assert_eq!(
        out["text"],
        "user: Rename the upload step.\n\nuser: Also call it the Courier.\n\nassistant: Done."
    );
    assert!(super::line::removes_absorb("2.1.197") && !super::line::removes_absorb("2.1.246"));
    assert!(!super::line::removes_absorb("2.1.332") && !super::line::removes_absorb("x"));

    // Given back to the input box (popAll) or cancelled (remove without a reason, by a
    // Claude Code that gives one when it absorbs): not said.
    let cancelled = vec![
        user_text("Rename the upload step.").replace("2.0.31", "2.1.332"),
        queue("enqueue", Some("never mind this"), None),
        queue("remove", None, None),
        queue("enqueue", Some("nor this"), None),
        queue("popAll", None, None),
    ];
    let out = Fixture::lines(&cancelled).delta(json!({}));
    assert_eq!(out["text"], "user: Rename the upload step.");
}

fn ask(id: &str) -> String {
    assistant(json!([{
        "type": "tool_use", "id": id, "name": "AskUserQuestion",
        "input": { "questions": [{
            "question": "Which store backs the Ledger?", "header": "Store", "multiSelect": false,
            "options": [{ "label": "Postgres", "description": "" }, { "label": "SQLite", "description": "" }]
        }] }
    }]))
}

#[test]
fn answers_to_ask_user_question_are_the_users_with_their_question() {
    let mut answered: Value = serde_json::from_str(&user_blocks(json!([{
        "type": "tool_result", "tool_use_id": "toolu_ask",
        "content": "User has answered your questions: \"Which store backs the Ledger?\"=\"Postgres\". You can now continue with the user's answers in mind."
    }])))
    .expect("json");
    answered["toolUseResult"] = json!({
        "questions": [{ "question": "Which store backs the Ledger?" }],
        "answers": { "Which store backs the Ledger?": "Postgres" }
    });
    let out = Fixture::lines(&[ask("toolu_ask"), answered.to_string()]).delta(json!({}));
    assert_eq!(
        out["text"],
        "user: (answering \"Which store backs the Ledger?\") Postgres"
    );
    assert_eq!(out["answer_parts"], 1);
    assert_eq!(out["user_words"], 7);

    // Without the structured result, the tool result's text stands for the answer.
    let plain = user_blocks(json!([{
        "type": "tool_result", "tool_use_id": "toolu_ask2",
        "content": [{ "type": "text", "text": "SQLite, we keep it embedded." }]
    }]));
    let out = Fixture::lines(&[ask("toolu_ask2"), plain]).delta(json!({}));
    assert_eq!(
        out["text"],
        "user: (answering \"Which store backs the Ledger?\") SQLite, we keep it embedded."
    );
    // Other tool results stay tool traffic.
    let out = Fixture::lines(&[tool_use(), tool_result("fn upload() {}")]).delta(json!({}));
    assert_eq!(out["text"], "");
    assert_eq!(out["answer_parts"], 0);
}

#[test]
fn claude_codes_own_echoes_are_noise_and_controls_are_stripped() {
    let mut summary: Value = serde_json::from_str(&user_text(
        "This session is being continued from a previous conversation. Summary: the Sync Worker was named.",
    ))
    .expect("json");
    summary["isCompactSummary"] = json!(true);
    let lines = vec![
        user_text("<command-name>/clear</command-name>\n<command-message>clear</command-message>\n<command-args></command-args>"),
        user_text("<command-message>review</command-message>\n<command-name>/review</command-name>\n<command-args>the Courier module</command-args>"),
        user_text("<local-command-stdout>\u{1b}[1mTotal cost:\u{1b}[22m $0.01</local-command-stdout>"),
        user_blocks(json!([{ "type": "text", "text": "[Request interrupted by user for tool use]" }])),
        user_text("[Request interrupted by user]"),
        user_text("<system-reminder>The user opened notes.md</system-reminder>"),
        summary.to_string(),
        assistant_text("Colours:\u{1b}[31m red\u{1b}[0m, a bell\u{7} and a\u{0} NUL;\ttabs\nand newlines stay."),
    ];
    let out = Fixture::lines(&lines).delta(json!({}));
    assert_eq!(
        out["text"],
        "user: the Courier module\n\nassistant: Colours: red, a bell and a NUL;\ttabs\nand newlines stay."
    );
    assert_eq!(out["noise_parts"], 5);
    assert_eq!(
        out["summary"],
        "This session is being continued from a previous conversation. Summary: the Sync Worker was named."
    );
    assert_eq!(out["user_prose"], 1);
    assert_eq!(out["words"], 3 + 11);
    // Noise alone is nothing said.
    let out = Fixture::lines(&lines[..6]).delta(json!({}));
    assert_eq!(out["only_tools"], false);
    assert_eq!(out["words"], 3);
    let out = Fixture::lines(&[lines[0].clone(), lines[2].clone()]).delta(json!({}));
    assert_eq!(out["only_tools"], true);
    assert_eq!(out["words"], 0);
}

#[test]
fn a_lone_surrogate_is_replaced_not_the_line_dropped() {
    let broken = user_text("PLACEHOLDER").replace(
        "PLACEHOLDER",
        "the Courier \\ud83d ships \\ud83d\\ude80 and \\\\ud800 stays",
    );
    let low = user_text("PLACEHOLDER").replace("PLACEHOLDER", "tail \\udc00");
    let out = Fixture::lines(&[broken, low, user_text("fine")]).delta(json!({}));
    assert_eq!(
        out["text"],
        "user: the Courier \u{fffd} ships \u{1f680} and \\ud800 stays\n\nuser: tail \u{fffd}\n\nuser: fine"
    );
    assert_eq!(out["repaired_lines"], 2);
    assert_eq!(out["skipped_lines"], 0);
    let mut out = Vec::new();
    assert!(!replace_lone_surrogates(
        br#"{"a": "\ud83d\ude80 \\ud800"}"#,
        &mut out
    ));
    assert!(out.is_empty());
}

#[test]
fn registered_as_a_read_only_builtin() {
    let builtin = &builtins()[0];
    assert_eq!(builtin.name, "transcript.delta");
    assert!(!builtin.writes);
}

#[test]
fn escape_strings_are_dropped_whole_with_their_payload() {
    // A DCS reply and a kitty graphics APC leave nothing of their payload behind; an OSC 8
    // hyperlink keeps its visible text.
    let text = concat!(
        "a\u{1b}P1$r0m\u{1b}\\b\u{1b}_Gf=100;AAAA\u{1b}\\c\t",
        "\u{1b}]8;;https://x.test\u{7}link\u{1b}]8;;\u{7}\r\n",
        "\u{1b}[38;2;255;0;0mred\u{1b}[m \u{1b}(Bcafé\u{9b}",
    );
    assert_eq!(super::text::strip_controls(text), "abc\tlink\nred café");
}
