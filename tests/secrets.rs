//! A secret canary: the value of a configured `api_key_env`, echoed by a command provider (stdout
//! and stderr), by command stages, by an OpenAI-compatible server's 200 reply, and placed by its
//! error body across the point where error bodies are cut. It must appear in no file of the state
//! folder or the recordings, and on neither stdout nor stderr, whatever the command.

use serde_json::{json, Value};

use crate::loopback::{Reply, Server};
use crate::support::{stage, Test};

/// Its first characters are unlike anything else a run prints, so a leaked prefix is found too.
const CANARY: &str = "zqv8-canary-51c0ffee-d00d-4a11-9e3b";
const PREFIX: &str = "zqv8-";
/// Where error bodies are cut.
const CUT: usize = 600;

const WORKFLOW: &str = r#"
[workflow]
description = "every source of a leak"

[stages.reply]
prompt = { inline = "say something" }
model = "echo"

[stages.api_ok]
prompt = { inline = "echo the key" }
model = "api"
cache = true

[stages.api_err]
prompt = { inline = "fail with a long body" }
model = "api"
on_error = "continue"

[stages.cmd]
command = ["sh", "-c", "printf 'out %s\n' \"$SG_CANARY_KEY\"; printf 'err %s\n' \"$SG_CANARY_KEY\" >&2"]
set_state = { seen = "{{ output }}" }
cache = true

[stages.cmd_fail]
command = ["sh", "-c", "printf 'boom %s\n' \"$SG_CANARY_KEY\" >&2; exit 3"]
on_error = "continue"

[outputs]
reply = "{{ stages.reply.output }}"
api = "{{ stages.api_ok.output }}"
cmd = "{{ stages.cmd.output }}"
"#;

fn openai_reply(text: &str) -> Value {
    json!({
        "id": "c1", "object": "chat.completion",
        "choices": [{ "index": 0, "message": { "role": "assistant", "content": text }, "finish_reason": "stop" }],
        "usage": { "prompt_tokens": 20, "completion_tokens": 5 }
    })
}

/// The error message the server sends: the canary starts a few characters before the cut.
fn straddling_message() -> String {
    let mut message = "x".repeat(CUT - 5);
    message.push_str(CANARY);
    message.push_str(&" and more".repeat(40));
    message
}

fn server() -> Server {
    Server::start(|seen, _| {
        let prompt = seen.body["messages"].to_string();
        if prompt.contains("fail with a long body") {
            Reply::json(
                400,
                &json!({ "error": { "message": straddling_message() } }),
            )
        } else {
            Reply::json(
                200,
                &openai_reply(&format!("your key is {CANARY}, keep it safe")),
            )
        }
    })
}

fn project(server: &Server) -> Test {
    let test = Test::new();
    test.write("lib/workflows/leaky.toml", WORKFLOW);
    test.write(
        "stagegraph.toml",
        &format!(
            r#"
[models.api]
provider = "openai"
base_url = "{}/v1"
model = "tiny"
api_key_env = "SG_CANARY_KEY"
retries = 0

[models.echo]
provider = "command"
command = ["sh", "-c", "cat >/dev/null; printf 'reply %s\n' \"$SG_CANARY_KEY\"; printf 'stderr %s\n' \"$SG_CANARY_KEY\" >&2"]
"#,
            server.url
        ),
    );
    test
}

/// Every file under a folder, read as text.
fn all_text(dir: &std::path::Path) -> String {
    let mut out = String::new();
    for entry in walkdir::WalkDir::new(dir).into_iter().flatten() {
        if entry.file_type().is_file() {
            out.push_str(&String::from_utf8_lossy(
                &std::fs::read(entry.path()).unwrap_or_default(),
            ));
            out.push('\n');
        }
    }
    out
}

fn assert_clean(what: &str, text: &str) {
    assert!(
        !text.contains(PREFIX),
        "the canary (or its beginning) leaked into {what}:\n{text}"
    );
}

#[test]
fn a_configured_key_reaches_no_record_recording_or_terminal_from_any_source() {
    let server = server();
    let test = project(&server);
    let mut printed = Vec::new();
    for extra in [&[][..], &["--json"][..]] {
        let mut args = vec!["-L", "lib", "run", "leaky", "--record", "rec"];
        args.extend_from_slice(extra);
        let out = test.command(args).env("SG_CANARY_KEY", CANARY).output();
        printed.push((
            format!("run {extra:?}"),
            out.stdout.clone(),
            out.stderr.clone(),
        ));
        out.code(0);
    }

    // The stages did see the key, so the checks below can fail.
    let record = test.last_run();
    assert_eq!(stage(&record, "reply")["status"], "succeeded", "{record:#}");
    assert_eq!(stage(&record, "api_err")["status"], "failed", "{record:#}");
    assert_eq!(stage(&record, "cmd_fail")["status"], "failed", "{record:#}");
    let api_error = stage(&record, "api_err")["error"]
        .as_str()
        .unwrap_or_default();
    assert!(api_error.contains("400"), "{api_error}");
    assert!(
        api_error.contains(&format!("{}[reda", "x".repeat(20))),
        "the body is redacted where the key was, then cut (the mark with it): {api_error}"
    );
    let cmd_error = stage(&record, "cmd_fail")["error"]
        .as_str()
        .unwrap_or_default();
    assert!(cmd_error.contains("boom [redacted]"), "{cmd_error}");
    // The second run took `cmd` from the cache; the first ran it.
    let first_run = test.run(["runs", "show", &test.run_ids()[0], "--json"]);
    let first_run: Value = serde_json::from_str(&first_run.stdout).expect("a record");
    assert!(
        stage(&first_run, "cmd")["stderr"]
            .as_str()
            .is_some_and(|s| s.contains("err [redacted]")),
        "{first_run:#}"
    );
    assert_eq!(stage(&record, "cmd")["reused_from"], "cache", "{record:#}");
    let first = &printed[0].1;
    assert!(first.contains("[redacted]"), "{first}");

    // What the records and the recordings are shown as.
    for args in [
        vec!["runs", "show", "last"],
        vec!["runs", "show", "last", "--json"],
        vec!["runs", "show", "last", "--stage", "cmd"],
        vec!["runs", "show", "last", "--stage", "api_ok"],
        vec!["runs"],
    ] {
        let out = test
            .command(args.clone())
            .env("SG_CANARY_KEY", CANARY)
            .output();
        out.code(0);
        printed.push((args.join(" "), out.stdout, out.stderr));
    }

    for (what, stdout, stderr) in &printed {
        assert_clean(&format!("the stdout of `{what}`"), stdout);
        assert_clean(&format!("the stderr of `{what}`"), stderr);
    }
    let state = all_text(&test.state_dir());
    assert!(state.contains("[redacted]"), "nothing was redacted");
    assert_clean("the state folder", &state);
    let recordings = all_text(&test.path("rec"));
    assert!(!recordings.is_empty(), "no recording was made");
    assert_clean("the recordings", &recordings);
}

/// A key shorter than the minimum is not a secret to redact: a variable set to a short word
/// would otherwise turn every text into redaction marks.
#[test]
fn a_value_shorter_than_the_minimum_is_left_alone() {
    let server = server();
    let test = project(&server);
    let out = test
        .command(["-L", "lib", "run", "leaky"])
        .env("SG_CANARY_KEY", "out")
        .output();
    out.code(0);
    assert!(out.stdout.contains("out out"), "{}", out.stdout);
    assert!(!out.stdout.contains("[redacted]"), "{}", out.stdout);
}
