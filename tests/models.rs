//! Prompt stages end to end through the binary: repair of bad replies, the Anthropic and
//! OpenAI-compatible APIs played by loopback stub servers, record then replay, replay misses,
//! undefined aliases, and keys that never leak.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use crate::support::{stage, Test};

const SECRET: &str = "sk-test-SECRET-4242";

const WORKFLOW: &str = r#"
[inputs.topic]
type = "string"
default = "retries"

[stages.ask]
prompt = { inline = "Name one concept about {{ inputs.topic }}. Answer as JSON." }
model = "m"
output = { format = "json", schema = "answer.schema.json" }

[outputs]
concept = "{{ stages.ask.output.concept }}"
"#;

const SCHEMA: &str = r#"{
  "type": "object",
  "additionalProperties": false,
  "required": ["concept", "why"],
  "properties": { "concept": { "type": "string" }, "why": { "type": "string" } }
}"#;

fn project(config: &str) -> Test {
    let test = Test::new();
    test.write("lib/workflows/ask.toml", WORKFLOW);
    test.write("lib/schemas/answer.schema.json", SCHEMA);
    test.write("stagegraph.toml", config);
    test
}

/// A stub HTTP server answering each request with the next canned (status, body); it counts
/// requests and keeps the last request's text.
struct Stub {
    url: String,
    hits: Arc<AtomicUsize>,
    last_request: Arc<std::sync::Mutex<String>>,
}

fn stub(replies: Vec<(u16, String)>) -> Stub {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind loopback");
    let url = format!("http://{}", listener.local_addr().expect("address"));
    let hits = Arc::new(AtomicUsize::new(0));
    let last_request = Arc::new(std::sync::Mutex::new(String::new()));
    let (h, l) = (Arc::clone(&hits), Arc::clone(&last_request));
    std::thread::spawn(move || {
        for (stream, (status, body)) in listener.incoming().zip(replies) {
            let Ok(mut stream) = stream else { break };
            let mut reader = BufReader::new(stream.try_clone().expect("clone stream"));
            let mut head = String::new();
            let mut length = 0usize;
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                    break;
                }
                if let Some(value) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                    length = value.trim().parse().unwrap_or(0);
                }
                head.push_str(&line);
            }
            let mut body_in = vec![0u8; length];
            let _ = reader.read_exact(&mut body_in);
            *l.lock().unwrap() = format!("{head}\n{}", String::from_utf8_lossy(&body_in));
            h.fetch_add(1, Ordering::SeqCst);
            let response = format!(
                "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = stream.write_all(response.as_bytes());
        }
    });
    Stub {
        url,
        hits,
        last_request,
    }
}

fn anthropic_reply(text: &str) -> String {
    serde_json::json!({
        "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-test",
        "content": [{ "type": "text", "text": text }],
        "stop_reason": "end_turn",
        "usage": { "input_tokens": 12, "output_tokens": 7 }
    })
    .to_string()
}

fn openai_reply(text: &str) -> String {
    serde_json::json!({
        "id": "c1", "object": "chat.completion",
        "choices": [{ "index": 0, "message": { "role": "assistant", "content": text }, "finish_reason": "stop" }],
        "usage": { "prompt_tokens": 20, "completion_tokens": 5 }
    })
    .to_string()
}

/// Every file under a folder, read as text, for leak checks.
fn all_text(dir: &std::path::Path) -> String {
    let mut out = String::new();
    for entry in walkdir::WalkDir::new(dir).into_iter().flatten() {
        if entry.file_type().is_file() {
            out.push_str(&String::from_utf8_lossy(
                &std::fs::read(entry.path()).unwrap_or_default(),
            ));
        }
    }
    out
}

#[test]
fn a_bad_reply_is_repaired_and_every_attempt_recorded() {
    // First reply: prose around JSON that lacks a field; second: a good answer in a fence.
    let test = project(
        r#"
[models.m]
provider = "command"
command = ["sh", "-c", "cat > prompt-$(ls | grep -c prompt-).txt; if [ -f second ]; then printf 'Sure!\n```json\n{\"concept\": \"backoff\", \"why\": \"retries\"}\n```\n'; else touch second; echo 'Here you go: {\"concept\": \"backoff\"} hope it helps'; fi"]
"#,
    );
    let out = test.run(["-L", "lib", "run", "ask"]);
    out.code(0);
    assert_eq!(out.stdout.trim(), "backoff");
    let record = test.last_run();
    let calls = stage(&record, "ask")["model_calls"]
        .as_array()
        .expect("model calls")
        .clone();
    assert_eq!(calls.len(), 2, "{record:#}");
    let rejected = calls[0]["rejected"]
        .as_str()
        .expect("the first reply was rejected");
    assert!(rejected.contains("why"), "{rejected}");
    assert!(calls[1].get("rejected").is_none());
    // The repair prompt told the model what was wrong.
    let second_prompt = test.read("prompt-1.txt");
    assert!(
        second_prompt.contains("could not be used") && second_prompt.contains("why"),
        "{second_prompt}"
    );
}

#[test]
fn a_reply_that_never_validates_fails_after_the_repairs() {
    let test = project(
        r#"
[models.m]
provider = "command"
command = ["sh", "-c", "cat >/dev/null; echo 'no json here'"]
"#,
    );
    let out = test.run(["-L", "lib", "run", "ask"]);
    out.code(1);
    let record = test.last_run();
    assert_eq!(record["status"], "failed");
    assert_eq!(
        stage(&record, "ask")["model_calls"]
            .as_array()
            .map(Vec::len),
        Some(2)
    );
}

#[test]
fn anthropic_stub_then_record_and_replay_are_identical_and_keep_the_key_secret() {
    let server = stub(vec![(
        200,
        anthropic_reply("{\"concept\": \"jitter\", \"why\": \"spread\"}"),
    )]);
    let test = project(&format!(
        "[models.m]\nprovider = \"anthropic\"\nmodel = \"claude-test\"\nbase_url = \"{}\"\napi_key_env = \"TEST_ANTHROPIC_KEY\"\n",
        server.url
    ));
    let out = test
        .command(["-L", "lib", "run", "ask", "--record", "rec"])
        .env("TEST_ANTHROPIC_KEY", SECRET)
        .output();
    out.code(0);
    assert_eq!(out.stdout.trim(), "jitter");
    assert_eq!(server.hits.load(Ordering::SeqCst), 1);
    let request = server.last_request.lock().unwrap().clone();
    assert!(
        request.contains(SECRET),
        "the key goes in the request header"
    );
    assert!(
        request.to_ascii_lowercase().contains("anthropic-version"),
        "{request}"
    );
    let first = test.last_run();
    assert_eq!(first["usage"]["input_tokens"], 12);
    assert_eq!(first["usage"]["output_tokens"], 7);

    // Replay: the server is not asked again, and the artifact is byte-identical.
    let out = test.run(["-L", "lib", "run", "ask", "--replay", "rec"]);
    out.code(0);
    assert_eq!(server.hits.load(Ordering::SeqCst), 1);
    let second = test.last_run();
    assert_eq!(
        stage(&first, "ask")["output_sha256"],
        stage(&second, "ask")["output_sha256"]
    );

    // No key anywhere: records, events, recordings, output.
    for dir in ["state", "rec"] {
        assert!(
            !all_text(&test.path(dir)).contains(SECRET),
            "the key leaked into {dir}/"
        );
    }
    assert!(!out.stderr.contains(SECRET) && !out.stdout.contains(SECRET));

    // A replay miss names the request and the nearest recording.
    let out = test.run([
        "-L",
        "lib",
        "run",
        "ask",
        "--replay",
        "rec",
        "--input",
        "topic=caching",
    ]);
    out.code(1);
    out.stderr_has("nearest");
    assert!(
        out.stderr.contains("caching") || out.stderr.contains("retries"),
        "{}",
        out.stderr
    );
}

#[test]
fn openai_compatible_stub_with_an_error_then_success() {
    let server = stub(vec![
        (
            500,
            "{\"error\": {\"message\": \"upstream overloaded\"}}".to_string(),
        ),
        (
            200,
            openai_reply("{\"concept\": \"queue\", \"why\": \"order\"}"),
        ),
    ]);
    let test = project(&format!(
        "[models.m]\nprovider = \"openai\"\nbase_url = \"{}/v1\"\nmodel = \"tiny\"\nretries = 2\n",
        server.url
    ));
    let out = test.run(["-L", "lib", "run", "ask"]);
    out.code(0);
    assert_eq!(out.stdout.trim(), "queue");
    assert_eq!(server.hits.load(Ordering::SeqCst), 2);
    let record = test.last_run();
    assert_eq!(record["usage"]["input_tokens"], 20);
}

#[test]
fn an_error_body_is_surfaced_without_the_key() {
    let server = stub(vec![(
        401,
        format!("{{\"error\": {{\"message\": \"invalid x-api-key {SECRET}\"}}}}"),
    )]);
    let test = project(&format!(
        "[models.m]\nprovider = \"anthropic\"\nmodel = \"claude-test\"\nbase_url = \"{}\"\napi_key_env = \"TEST_ANTHROPIC_KEY\"\n",
        server.url
    ));
    let out = test
        .command(["-L", "lib", "run", "ask"])
        .env("TEST_ANTHROPIC_KEY", SECRET)
        .output();
    out.code(1);
    out.stderr_has("401");
    assert!(!out.stderr.contains(SECRET), "{}", out.stderr);
    assert!(!all_text(&test.path("state")).contains(SECRET));
}

#[test]
fn an_undefined_alias_is_a_check_warning_and_stops_a_run_before_any_stage() {
    let test = project("[models.other]\nprovider = \"command\"\ncommand = [\"cat\"]\n");
    let out = test.run(["-L", "lib", "check", "ask"]);
    out.code(0);
    out.stderr_has("model `m`");
    let out = test.run(["-L", "lib", "run", "ask"]);
    out.code(2);
    out.stderr_has("no configuration defines");
    // No stage starts; the record says why the run failed.
    let ids = test.run_ids();
    assert_eq!(ids.len(), 1, "{ids:?}");
    let record = test.last_run();
    assert_eq!(record["status"], "failed");
    assert!(
        record["error"]
            .as_str()
            .unwrap_or_default()
            .contains("no configuration defines"),
        "{record:#}"
    );
    assert!(record["stages"]
        .as_object()
        .into_iter()
        .flatten()
        .all(|(_, s)| s["status"] == "not_run"));
}

/// A huge reply (200,000 unexpected keys) is rejected with a bounded list of problems: the
/// repair request quotes a bounded part of it, and the run record stays small.
#[test]
fn a_huge_rejected_reply_gives_a_bounded_repair_prompt_and_record() {
    let mut huge = serde_json::Map::new();
    for k in 0..200_000 {
        huge.insert(format!("key{k}"), serde_json::json!(k));
    }
    let huge = serde_json::Value::Object(huge).to_string();
    assert!(huge.len() > 2_000_000);
    let server = stub(vec![
        (200, anthropic_reply(&huge)),
        (
            200,
            anthropic_reply("{\"concept\": \"jitter\", \"why\": \"spread\"}"),
        ),
    ]);
    let test = project(&format!(
        "[models.m]\nprovider = \"anthropic\"\nmodel = \"claude-test\"\nbase_url = \"{}\"\napi_key_env = \"TEST_ANTHROPIC_KEY\"\n",
        server.url
    ));
    let out = test
        .command(["-L", "lib", "run", "ask"])
        .env("TEST_ANTHROPIC_KEY", SECRET)
        .output();
    out.code(0);
    assert_eq!(server.hits.load(Ordering::SeqCst), 2);
    let repair = server.last_request.lock().unwrap().clone();
    assert!(
        repair.contains("could not be used"),
        "{}",
        &repair[..2000.min(repair.len())]
    );
    assert!(repair.contains("more errors") || repair.contains("more bytes"));
    assert!(
        repair.len() < 100_000,
        "the repair request has {} bytes",
        repair.len()
    );
    let record = test.last_run();
    let size = serde_json::to_string(&record).unwrap().len();
    assert!(size < 64_000, "the run record has {size} bytes");
    let rejected = stage(&record, "ask")["model_calls"][0]["rejected"]
        .as_str()
        .expect("the first reply was rejected")
        .to_string();
    assert!(rejected.len() < 10_000, "{} bytes", rejected.len());
}
