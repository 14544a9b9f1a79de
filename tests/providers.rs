//! Model providers as a production run meets them, through the binary: the Claude Code CLI
//! (a scripted stand-in that records how it was started, and the real CLI against a loopback
//! Messages API), structured outputs and repair conversations on both HTTP APIs, prompt caching,
//! usage and cost, budgets, shared concurrency and rate limits, and portable recordings. Every
//! stub records the requests it receives and the tests check their bodies field by field.

use serde_json::{json, Value};
use std::path::{Path, PathBuf};

use crate::loopback::{anthropic_stream, Reply, Server};
use crate::support::{stage, Test};

const SCHEMA: &str = r#"{
  "type": "object",
  "additionalProperties": false,
  "required": ["concept", "why"],
  "properties": { "concept": { "type": "string" }, "why": { "type": "string" } }
}"#;

/// A workflow of one prompt stage asking `model`, with a system prompt and the answer schema.
fn ask_workflow(model: &str) -> String {
    format!(
        r#"
[stages.ask]
prompt = {{ inline = "Name one concept about retries." }}
system = {{ inline = "You are terse." }}
model = "{model}"
output = {{ format = "json", schema = "answer.schema.json" }}

[outputs]
concept = "{{{{ stages.ask.output.concept }}}}"
"#
    )
}

fn project(workflow: &str, config: Option<&str>) -> Test {
    let test = Test::new();
    test.write("lib/workflows/ask.toml", workflow);
    test.write("lib/schemas/answer.schema.json", SCHEMA);
    if let Some(config) = config {
        test.write("stagegraph.toml", config);
    }
    test
}

fn make_executable(path: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let mut permissions = std::fs::metadata(path).expect("metadata").permissions();
    permissions.set_mode(0o755);
    std::fs::set_permissions(path, permissions).expect("chmod");
}

fn path_with(dir: &Path) -> String {
    format!(
        "{}:{}",
        dir.display(),
        std::env::var("PATH").unwrap_or_default()
    )
}

/// A `claude` stand-in in `bin/` that keeps, per call, its argv (NUL-separated), working
/// directory, `CLAUDE_CODE_*` variables and stdin under `calls/`, and prints `bin/reply.json`.
fn fake_claude(test: &Test, reply: &Value, exit_code: i32) {
    test.write(
        "bin/claude",
        &format!(
            "#!/bin/sh\nd=\"{calls}\"\nmkdir -p \"$d\"\nn=$(ls \"$d\" | grep -c argv)\n\
             printf '%s\\0' \"$@\" > \"$d/$n.argv\"\npwd > \"$d/$n.cwd\"\n\
             env | grep -E '^(CLAUDE_CODE_|MAX_THINKING_TOKENS)' | sort > \"$d/$n.env\"\n\
             cat > \"$d/$n.stdin\"\ncat \"{reply}\"\nexit {exit_code}\n",
            calls = test.path("calls").display(),
            reply = test.path("bin/reply.json").display(),
        ),
    );
    test.write("bin/reply.json", &reply.to_string());
    make_executable(&test.path("bin/claude"));
}

fn call_argv(test: &Test, n: usize) -> Vec<String> {
    let bytes = std::fs::read(test.path(&format!("calls/{n}.argv"))).expect("argv recorded");
    let text = String::from_utf8(bytes).expect("utf-8");
    text.split('\0')
        .filter(|word| !word.is_empty())
        .map(str::to_string)
        .collect()
}

fn result_envelope() -> Value {
    json!({
        "type": "result", "subtype": "success", "is_error": false,
        "result": "{\"concept\": \"jitter\", \"why\": \"spread\"}",
        "structured_output": {"concept": "jitter", "why": "spread"},
        "session_id": "s1", "num_turns": 2,
        "usage": {"input_tokens": 10, "output_tokens": 4,
                  "cache_read_input_tokens": 100, "cache_creation_input_tokens": 50},
        "total_cost_usd": 0.0123
    })
}

#[test]
fn the_built_in_haiku_runs_claude_code_without_project_context_and_keeps_usage_and_cost() {
    let test = project(&ask_workflow("haiku"), None);
    fake_claude(&test, &result_envelope(), 0);
    // The project has its own CLAUDE.md and hooks: none of it may reach the call.
    test.write("CLAUDE.md", "PROJECT CONTEXT MARKER\n");
    let out = test
        .command(["-L", "lib", "run", "ask", "--json"])
        .env("PATH", &path_with(&test.path("bin")))
        .output();
    out.code(0);

    let argv = call_argv(&test, 0);
    let schema: Value = serde_json::from_str(SCHEMA).unwrap();
    let fixed: Vec<&str> = argv[..12].iter().map(String::as_str).collect();
    assert_eq!(
        fixed,
        [
            "-p",
            "--output-format",
            "json",
            "--no-session-persistence",
            "--name",
            "stagegraph",
            "--model",
            "haiku",
            "--settings",
            "{\"disableAllHooks\":true}",
            "--strict-mcp-config",
            "--disable-slash-commands",
        ]
    );
    assert_eq!(argv[12], "--tools=");
    assert_eq!(argv[13], "--system-prompt=You are terse.");
    let given: Value = serde_json::from_str(
        argv[14]
            .strip_prefix("--json-schema=")
            .expect("the schema is given"),
    )
    .unwrap();
    assert_eq!(given, schema);
    assert_eq!(argv.len(), 15, "{argv:?}");
    assert!(
        !argv.iter().any(|word| word.contains("Name one concept")),
        "the prompt goes to stdin"
    );
    assert_eq!(
        test.read("calls/0.stdin"),
        "Name one concept about retries."
    );
    let cwd = PathBuf::from(test.read("calls/0.cwd").trim());
    assert!(
        cwd.ends_with(".cache/stagegraph/claude"),
        "runs outside the project: {}",
        cwd.display()
    );
    assert!(!cwd.join("CLAUDE.md").exists());
    let env = test.read("calls/0.env");
    for line in [
        "CLAUDE_CODE_DISABLE_AUTO_MEMORY=1",
        "CLAUDE_CODE_DISABLE_CLAUDE_MDS=1",
        "MAX_THINKING_TOKENS=0",
    ] {
        assert!(env.lines().any(|l| l == line), "{line} missing from {env}");
    }

    let record = test.last_run();
    assert_eq!(record["outputs"]["concept"], "jitter");
    let ask = stage(&record, "ask");
    let call = &ask["model_calls"][0];
    assert_eq!(
        call["usage"],
        json!({"input_tokens": 10, "output_tokens": 4, "cache_read_tokens": 100, "cache_write_tokens": 50})
    );
    assert_eq!(call["cost_usd"], 0.0123);
    assert_eq!(ask["usage"]["cost_usd"], 0.0123);
    assert_eq!(ask["usage"]["cache_read_tokens"], 100);
    assert_eq!(record["usage"]["cost_usd"], 0.0123);
    assert_eq!(record["usage"]["cache_write_tokens"], 50);

    // The JSON events carry the usage of the stage and of the run.
    let events: Vec<Value> = out
        .stdout
        .lines()
        .filter_map(|line| serde_json::from_str(line).ok())
        .collect();
    let finished = events
        .iter()
        .find(|e| e["event"] == "stage_finished" && e["stage"] == "ask")
        .expect("a stage_finished event");
    assert_eq!(finished["usage"]["cost_usd"], 0.0123);
    let run = events
        .iter()
        .find(|e| e["event"] == "run_finished")
        .expect("a run_finished event");
    assert_eq!(run["usage"]["input_tokens"], 10);

    let shown = test.run(["runs", "show", "last"]);
    shown.code(0);
    assert!(
        shown.stdout.contains("cache read: 100  cache write: 50")
            && shown.stdout.contains("cost: $0.0123"),
        "{}",
        shown.stdout
    );
}

#[test]
fn an_error_from_claude_code_carries_its_message_and_names_the_model_once() {
    let test = project(&ask_workflow("haiku"), None);
    let envelope = json!({
        "type": "result", "subtype": "success", "is_error": true, "api_error_status": 401,
        "result": "Invalid API key · Please run /login", "usage": {"input_tokens": 0, "output_tokens": 0},
        "total_cost_usd": 0
    });
    fake_claude(&test, &envelope, 1);
    let out = test
        .command(["-L", "lib", "run", "ask"])
        .env("PATH", &path_with(&test.path("bin")))
        .output();
    out.code(1);
    out.stderr_has(
        "model `haiku`: claude reported an error (HTTP 401): Invalid API key · Please run /login",
    );
    assert!(
        !out.stderr.contains("model `haiku`: model `haiku`"),
        "{}",
        out.stderr
    );
    let record = test.last_run();
    let error = stage(&record, "ask")["error"].as_str().unwrap_or_default();
    assert_eq!(error.matches("model `haiku`").count(), 1, "{error}");
}

/// The real Claude Code CLI, if this machine has one: `$STAGEGRAPH_TEST_CLAUDE`, else `claude`
/// on PATH.
fn real_claude() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("STAGEGRAPH_TEST_CLAUDE").filter(|p| !p.is_empty()) {
        let path = PathBuf::from(path);
        return path.is_file().then_some(path);
    }
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join("claude"))
            .find(|candidate| candidate.is_file())
    })
}

/// A Messages API for the real CLI: a call of the structured-output tool when the request
/// offers one (until a tool result comes back), else a text.
fn messages_api_for_the_cli() -> Server {
    Server::start(|seen, _| {
        if seen.method != "POST" {
            return Reply::json(404, &json!({}));
        }
        let model = seen.body["model"].as_str().unwrap_or("claude-haiku-4-5");
        let offered = seen.body["tools"]
            .as_array()
            .into_iter()
            .flatten()
            .find_map(|tool| tool["name"].as_str().map(str::to_string));
        let answered = seen.body["messages"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|m| {
                m["content"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|block| block["type"] == "tool_result")
            });
        match offered {
            Some(tool) if !answered => anthropic_stream(
                model,
                None,
                Some((&tool, &json!({"concept": "backoff", "why": "load"}))),
            ),
            _ => anthropic_stream(model, Some("done"), None),
        }
    })
}

#[test]
fn the_real_claude_cli_answers_a_prompt_stage_with_no_transcript_no_hook_and_its_cost() {
    let Some(claude) = real_claude() else {
        eprintln!("skipped: no Claude Code CLI (set STAGEGRAPH_TEST_CLAUDE or put claude on PATH)");
        return;
    };
    let api = messages_api_for_the_cli();
    let test = project(&ask_workflow("haiku"), None);
    // `claude` on PATH, as the built-in alias expects.
    std::fs::create_dir_all(test.path("bin")).unwrap();
    std::os::unix::fs::symlink(&claude, test.path("bin/claude")).unwrap();
    // Hooks and memory everywhere the CLI looks: the user's and the project's.
    let fired = test.path("fired");
    let hook = |event: &str| {
        json!([{"hooks": [{"type": "command",
            "command": format!("echo {event} >> {}", fired.display())}]}])
    };
    let settings = json!({"hooks": {
        "Stop": hook("Stop"), "SessionStart": hook("SessionStart"),
        "UserPromptSubmit": hook("UserPromptSubmit"), "SessionEnd": hook("SessionEnd")
    }});
    test.write(".claude/settings.json", &settings.to_string());
    test.write(".claude/CLAUDE.md", "USER MEMORY MARKER\n");
    test.write("CLAUDE.md", "PROJECT MEMORY MARKER\n");

    let out = test
        .command(["-L", "lib", "run", "ask"])
        .env("PATH", &path_with(&test.path("bin")))
        .env("ANTHROPIC_BASE_URL", &api.url)
        .env("ANTHROPIC_API_KEY", "sk-test-loopback")
        .env("DISABLE_AUTOUPDATER", "1")
        .output();
    out.code(0);
    assert_eq!(out.stdout.trim(), "backoff");

    // One request: no session title, no other side request.
    let posts = api.posts();
    assert_eq!(posts.len(), 1, "{posts:#?}");
    for post in &posts {
        assert!(post.path.starts_with("/v1/messages"), "{}", post.path);
        assert_eq!(post.header("x-api-key"), Some("sk-test-loopback"));
        let body = post.body.to_string();
        assert!(
            !body.contains("PROJECT MEMORY MARKER") && !body.contains("USER MEMORY MARKER"),
            "CLAUDE.md reached the model: {body}"
        );
        let system = post.body["system"].to_string();
        assert!(system.contains("You are terse."), "{system}");
        let tools: Vec<&str> = post.body["tools"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|tool| tool["name"].as_str())
            .collect();
        assert_eq!(tools, ["StructuredOutput"], "no tool but the schema's");
        let offered = &post.body["tools"][0]["input_schema"];
        assert_eq!(offered["required"], json!(["concept", "why"]));
    }
    assert!(!fired.exists(), "a hook fired: {}", test.read("fired"));
    let projects = test.path(".claude/projects");
    let transcripts: Vec<PathBuf> = walkdir::WalkDir::new(&projects)
        .into_iter()
        .flatten()
        .filter(|entry| entry.file_type().is_file())
        .map(|entry| entry.path().to_path_buf())
        .collect();
    assert!(transcripts.is_empty(), "transcripts left: {transcripts:?}");

    let record = test.last_run();
    let call = &stage(&record, "ask")["model_calls"][0];
    assert!(
        call["usage"]["input_tokens"].as_u64().unwrap_or(0) > 0
            && call["usage"]["output_tokens"].as_u64().unwrap_or(0) > 0,
        "{call}"
    );
    assert!(
        call["usage"]["cache_read_tokens"].as_u64().unwrap_or(0) > 0,
        "{call}"
    );
    let cost = call["cost_usd"].as_f64().expect("the CLI reports a cost");
    assert!(cost > 0.0, "{call}");
    assert_eq!(record["usage"]["cost_usd"].as_f64(), Some(cost));
}
