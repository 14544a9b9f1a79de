//! Model providers as a production run meets them, through the binary: the Claude Code CLI
//! (a scripted stand-in that records how it was started, and the real CLI against a loopback
//! Messages API), structured outputs and repair conversations on both HTTP APIs, prompt caching,
//! usage and cost, budgets, shared concurrency and rate limits, and portable recordings. Every
//! stub records the requests it receives and the tests check their bodies field by field.

use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::loopback::{anthropic_stream, Batches, Reply, Server};
use crate::support::{make_executable, stage, Test};

const SCHEMA: &str = r#"{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
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
    // The schema in the dialect every supported CLI accepts: no `$schema` of draft 2020-12.
    let mut schema: Value = serde_json::from_str(SCHEMA).unwrap();
    schema.as_object_mut().unwrap().remove("$schema");
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
    assert_eq!(argv[13], "--effort=low", "the built-in haiku thinks little");
    assert_eq!(argv[14], "--system-prompt=You are terse.");
    let given: Value = serde_json::from_str(
        argv[15]
            .strip_prefix("--json-schema=")
            .expect("the schema is given"),
    )
    .unwrap();
    assert_eq!(given, schema);
    assert_eq!(argv.len(), 16, "{argv:?}");
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

#[test]
fn a_repair_through_claude_code_quotes_the_rejected_reply_in_its_one_prompt() {
    let test = project(&ask_workflow("haiku"), None);
    fake_claude(&test, &result_envelope(), 0);
    // The first call answers without `why`; the second answers in full.
    let mut first = result_envelope();
    first["structured_output"] = json!({"concept": "jitter"});
    first["result"] = json!("{\"concept\": \"jitter\"}");
    test.write("bin/reply-0.json", &first.to_string());
    let script = test.read("bin/claude").replace(
        &format!("cat \"{}\"", test.path("bin/reply.json").display()),
        &format!(
            "if [ -f \"{bin}/reply-$n.json\" ]; then cat \"{bin}/reply-$n.json\"; \
             else cat \"{bin}/reply.json\"; fi",
            bin = test.path("bin").display()
        ),
    );
    test.write("bin/claude", &script);
    make_executable(&test.path("bin/claude"));
    let out = test
        .command(["-L", "lib", "run", "ask"])
        .env("PATH", &path_with(&test.path("bin")))
        .output();
    out.code(0);
    assert_eq!(out.stdout.trim(), "jitter");

    assert_eq!(
        test.read("calls/0.stdin"),
        "Name one concept about retries."
    );
    // The CLI takes one prompt: the conversation is flattened into it, the rejected reply
    // quoted as it was given, then what was wrong with it; the command line is the first's.
    let repair = test.read("calls/1.stdin");
    let (prompt, rest) = repair
        .split_once("\n\n<previous_reply>\n")
        .expect("the previous reply is quoted");
    assert_eq!(prompt, "Name one concept about retries.");
    let (quoted, problems) = rest
        .split_once("\n</previous_reply>\n\n")
        .expect("the quote is closed");
    assert_eq!(
        serde_json::from_str::<Value>(quoted).unwrap(),
        json!({"concept": "jitter"})
    );
    assert!(
        problems.starts_with("Your previous reply could not be used:") && problems.contains("why"),
        "{problems}"
    );
    assert_eq!(call_argv(&test, 1), call_argv(&test, 0));
    let record = test.last_run();
    assert_eq!(
        stage(&record, "ask")["model_calls"]
            .as_array()
            .unwrap()
            .len(),
        2
    );
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
    let Some(claude) = crate::claude_code::claude_cli() else {
        crate::support::skip(
            "no Claude Code CLI (set STAGEGRAPH_TEST_CLAUDE or put claude on PATH)",
        );
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
        // The built-in haiku thinks as little as the CLI allows: no thinking where the CLI can
        // turn it off, the lowest effort where it thinks adaptively.
        match post.body["thinking"]["type"].as_str() {
            Some("adaptive") => assert_eq!(post.body["output_config"]["effort"], "low"),
            other => assert!(matches!(other, None | Some("disabled")), "{}", post.body),
        }
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

// ---- The HTTP APIs ----

fn openai_reply(text: &str) -> Value {
    json!({
        "id": "c1", "object": "chat.completion",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 120, "completion_tokens": 30,
                  "prompt_tokens_details": {"cached_tokens": 20}}
    })
}

fn openai_config(url: &str, extra: &str) -> String {
    format!(
        "[models.m]\nprovider = \"openai\"\nbase_url = \"{url}/v1\"\nmodel = \"tiny\"\nretries = 2\n{extra}"
    )
}

#[test]
fn openai_gets_a_strict_json_schema_and_a_rejected_reply_is_repaired_in_conversation() {
    let api = Server::start(|_, index| {
        let text = if index == 0 {
            "{\"concept\": \"queue\"}"
        } else {
            "{\"concept\": \"queue\", \"why\": \"order\"}"
        };
        Reply::json(200, &openai_reply(text))
    });
    let test = project(
        &ask_workflow("m"),
        Some(&openai_config(
            &api.url,
            "price = { input = 2.0, output = 8.0, cache_read = 0.5 }\n",
        )),
    );
    let out = test.run(["-L", "lib", "run", "ask"]);
    out.code(0);
    assert_eq!(out.stdout.trim(), "queue");

    let posts = api.posts();
    assert_eq!(posts.len(), 2);
    let schema: Value = serde_json::from_str(SCHEMA).unwrap();
    let format = json!({"type": "json_schema",
        "json_schema": {"name": "reply", "strict": true, "schema": schema}});
    let first = &posts[0].body;
    assert_eq!(posts[0].path, "/v1/chat/completions");
    assert_eq!(first["model"], "tiny");
    assert_eq!(first["response_format"], format);
    assert_eq!(
        first["messages"],
        json!([
            {"role": "system", "content": "You are terse."},
            {"role": "user", "content": "Name one concept about retries."}
        ])
    );
    let second = &posts[1].body;
    assert_eq!(second["response_format"], format);
    let messages = second["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 4, "{second:#}");
    assert_eq!(messages[..2], first["messages"].as_array().unwrap()[..]);
    assert_eq!(
        messages[2],
        json!({"role": "assistant", "content": "{\"concept\": \"queue\"}"})
    );
    assert_eq!(messages[3]["role"], "user");
    let problems = messages[3]["content"].as_str().unwrap();
    assert!(
        problems.contains("could not be used") && problems.contains("why"),
        "{problems}"
    );
    assert!(
        !problems.contains("Name one concept"),
        "the prompt is not repeated: {problems}"
    );

    // Usage and cost from the price table: 100 input, 20 cached, 30 output tokens per call.
    let record = test.last_run();
    let calls = stage(&record, "ask")["model_calls"]
        .as_array()
        .unwrap()
        .clone();
    assert_eq!(calls.len(), 2);
    assert_eq!(
        calls[0]["usage"],
        json!({"input_tokens": 100, "output_tokens": 30, "cache_read_tokens": 20})
    );
    let per_call = (100.0 * 2.0 + 30.0 * 8.0 + 20.0 * 0.5) / 1e6;
    let close = |value: &Value, expected: f64| {
        let got = value.as_f64().unwrap_or(f64::NAN);
        assert!((got - expected).abs() < 1e-12, "{got} != {expected}");
    };
    close(&calls[0]["cost_usd"], per_call);
    close(&stage(&record, "ask")["usage"]["cost_usd"], 2.0 * per_call);
    close(&record["usage"]["cost_usd"], 2.0 * per_call);
    assert_eq!(record["usage"]["model_calls"], 2);
}

#[test]
fn a_schema_strict_outputs_cannot_take_is_sent_as_json_mode() {
    let api = Server::start(|_, _| {
        Reply::json(
            200,
            &openai_reply("{\"concept\": \"queue\", \"why\": \"order\"}"),
        )
    });
    let test = project(&ask_workflow("m"), Some(&openai_config(&api.url, "")));
    // `why` is optional and other keys are allowed: strict mode would refuse this schema.
    test.write(
        "lib/schemas/answer.schema.json",
        r#"{"type": "object", "required": ["concept"],
            "properties": {"concept": {"type": "string"}, "why": {"type": "string"}}}"#,
    );
    test.run(["-L", "lib", "run", "ask"]).code(0);
    let posts = api.posts();
    assert_eq!(
        posts[0].body["response_format"],
        json!({"type": "json_object"})
    );
}

#[test]
fn json_mode_always_says_json_and_carries_the_schema_it_cannot_send() {
    let api = Server::start(|_, _| {
        Reply::json(
            200,
            &openai_reply("{\"concept\": \"queue\", \"why\": \"order\"}"),
        )
    });
    let loose = r#"{"type": "object", "required": ["concept"],
        "properties": {"concept": {"type": "string"}, "why": {"type": "string"}}}"#;
    let test = project(&ask_workflow("m"), Some(&openai_config(&api.url, "")));
    test.write("lib/schemas/answer.schema.json", loose);
    test.run(["-L", "lib", "run", "ask"]).code(0);
    // Neither the system prompt nor the prompt says "JSON", which JSON mode requires: the
    // system message gets an instruction naming it, with the schema.
    let body = &api.posts()[0].body;
    assert_eq!(body["response_format"], json!({"type": "json_object"}));
    let messages = body["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 2, "{body:#}");
    assert_eq!(messages[0]["role"], "system");
    let system = messages[0]["content"].as_str().unwrap();
    let (kept, instruction) = system.split_once("\n\n").expect("the instruction follows");
    assert_eq!(kept, "You are terse.");
    let schema_text = instruction
        .strip_prefix("Reply with one JSON object that matches this JSON Schema:\n")
        .expect("the instruction says JSON");
    let schema: Value = serde_json::from_str(loose).unwrap();
    assert_eq!(serde_json::from_str::<Value>(schema_text).unwrap(), schema);
    assert_eq!(
        messages[1],
        json!({"role": "user", "content": "Name one concept about retries."})
    );

    // A prompt that says JSON itself is sent as written, and with no system prompt none is
    // added.
    let api = Server::start(|_, _| {
        Reply::json(
            200,
            &openai_reply("{\"concept\": \"queue\", \"why\": \"order\"}"),
        )
    });
    let workflow = ask_workflow("m")
        .replace("system = { inline = \"You are terse.\" }\n", "")
        .replace("about retries.", "about retries, as json.");
    let test = project(&workflow, Some(&openai_config(&api.url, "")));
    test.write("lib/schemas/answer.schema.json", loose);
    test.run(["-L", "lib", "run", "ask"]).code(0);
    let body = &api.posts()[0].body;
    assert_eq!(body["response_format"], json!({"type": "json_object"}));
    assert_eq!(
        body["messages"],
        json!([{"role": "user", "content": "Name one concept about retries, as json."}])
    );

    // Without a system prompt and without the word, the instruction is the system message.
    let api = Server::start(|_, _| {
        Reply::json(
            200,
            &openai_reply("{\"concept\": \"queue\", \"why\": \"order\"}"),
        )
    });
    let workflow = ask_workflow("m").replace("system = { inline = \"You are terse.\" }\n", "");
    let test = project(&workflow, Some(&openai_config(&api.url, "")));
    test.write("lib/schemas/answer.schema.json", loose);
    test.run(["-L", "lib", "run", "ask"]).code(0);
    let messages = api.posts()[0].body["messages"].as_array().unwrap().clone();
    assert_eq!(messages.len(), 2);
    assert_eq!(messages[0]["role"], "system");
    assert!(messages[0]["content"]
        .as_str()
        .unwrap()
        .starts_with("Reply with one JSON object that matches this JSON Schema:\n"));
}

fn anthropic_config(url: &str, extra: &str) -> String {
    format!(
        "[models.m]\nprovider = \"anthropic\"\nmodel = \"claude-test\"\nbase_url = \"{url}\"\n\
         api_key_env = \"TEST_ANTHROPIC_KEY\"\nretries = 2\n{extra}"
    )
}

#[test]
fn anthropic_gets_the_schema_as_a_forced_tool_and_caches_the_system_prompt_and_prefix() {
    let api = Server::start(|_, _| {
        Reply::json(
            200,
            &json!({
                "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-test",
                "content": [{"type": "tool_use", "id": "toolu_1", "name": "reply",
                             "input": {"concept": "jitter", "why": "spread"}}],
                "stop_reason": "tool_use",
                "usage": {"input_tokens": 100, "output_tokens": 20,
                          "cache_read_input_tokens": 1000, "cache_creation_input_tokens": 200}
            }),
        )
    });
    let workflow = ask_workflow("m").replace(
        "system = { inline = \"You are terse.\" }",
        "system = { inline = \"You are terse.\" }\nprompt_prefix = { inline = \"Glossary: retries, backoff.\\n\\n\" }",
    );
    let test = project(
        &workflow,
        Some(&anthropic_config(
            &api.url,
            "price = { input = 3.0, output = 15.0, cache_read = 0.3, cache_write = 3.75 }\n",
        )),
    );
    let out = test
        .command(["-L", "lib", "run", "ask"])
        .env("TEST_ANTHROPIC_KEY", "sk-test-anthropic")
        .output();
    out.code(0);
    assert_eq!(out.stdout.trim(), "jitter");

    let posts = api.posts();
    assert_eq!(posts.len(), 1);
    let body = &posts[0].body;
    assert_eq!(posts[0].path, "/v1/messages");
    assert_eq!(posts[0].header("x-api-key"), Some("sk-test-anthropic"));
    let schema: Value = serde_json::from_str(SCHEMA).unwrap();
    let cached = json!({"type": "ephemeral"});
    assert_eq!(body["model"], "claude-test");
    assert_eq!(body["max_tokens"], 4096);
    assert_eq!(
        body["system"],
        json!([{"type": "text", "text": "You are terse.", "cache_control": cached}])
    );
    assert_eq!(
        body["messages"],
        json!([{"role": "user", "content": [
            {"type": "text", "text": "Glossary: retries, backoff.\n\n", "cache_control": cached},
            {"type": "text", "text": "Name one concept about retries."}
        ]}])
    );
    assert_eq!(body["tools"][0]["name"], "reply");
    assert_eq!(body["tools"][0]["input_schema"], schema);
    assert_eq!(
        body["tool_choice"],
        json!({"type": "tool", "name": "reply"})
    );

    let record = test.last_run();
    let call = &stage(&record, "ask")["model_calls"][0];
    assert_eq!(
        call["usage"],
        json!({"input_tokens": 100, "output_tokens": 20,
               "cache_read_tokens": 1000, "cache_write_tokens": 200})
    );
    let cost = (100.0 * 3.0 + 20.0 * 15.0 + 1000.0 * 0.3 + 200.0 * 3.75) / 1e6;
    let got = call["cost_usd"].as_f64().unwrap();
    assert!((got - cost).abs() < 1e-12, "{got} != {cost}");
    assert_eq!(record["usage"]["cache_read_tokens"], 1000);
    assert_eq!(record["usage"]["cache_write_tokens"], 200);
}

// ---- Budgets ----

/// A foreach of prompt stages, one call per item.
fn foreach_workflow(model: &str, items: usize, extra: &str) -> String {
    format!(
        r#"
[workflow]
{extra}

[inputs.n]
type = "integer"
default = {items}

[stages.each]
foreach = "range(inputs.n)"
prompt = {{ inline = "item {{{{ item }}}}" }}
model = "{model}"
"#
    )
}

#[test]
fn a_budget_stops_model_calls_before_they_exceed_it() {
    // Each call costs 1000 input + 1000 output tokens at $1/$1 per million: $0.002.
    let api = Server::start(|_, _| {
        Reply::json(
            200,
            &json!({
                "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}}],
                "usage": {"prompt_tokens": 1000, "completion_tokens": 1000}
            }),
        )
    });
    let config = openai_config(
        &api.url,
        "price = { input = 1.0, output = 1.0 }\nmax_concurrency = 1\n",
    );
    let test = project(
        &foreach_workflow("m", 10, "budget_usd = 0.005"),
        Some(&config),
    );
    let out = test.run(["-L", "lib", "run", "ask", "--jobs", "1"]);
    out.code(1);
    // Two calls ($0.004) fit; a third, expected to cost what the others did, would take the
    // run past $0.005 and is not started.
    assert_eq!(api.posts().len(), 2, "calls made");
    out.stderr_has(
        "not started: the budget of $0.005 (budget_usd in [workflow]) would be exceeded; \
         $0.0040 spent so far, and this call is expected to cost $0.0020",
    );
    let record = test.last_run();
    assert_eq!(record["status"], "failed");

    // --max-cost sets a lower limit for one run.
    let before = api.posts().len();
    let out = test.run([
        "-L",
        "lib",
        "run",
        "ask",
        "--jobs",
        "1",
        "--max-cost",
        "0.001",
    ]);
    out.code(1);
    out.stderr_has("budget of $0.001 (--max-cost) would be exceeded");
    assert_eq!(
        api.posts().len() - before,
        1,
        "one call, then the limit is reached"
    );
}

#[test]
fn a_budget_holds_with_sixteen_calls_in_flight() {
    // Each call costs $0.002, answered after a while so that calls overlap.
    let api = Server::start(|_, _| {
        let mut reply = Reply::json(
            200,
            &json!({
                "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}}],
                "usage": {"prompt_tokens": 1000, "completion_tokens": 1000}
            }),
        );
        reply.delay = Duration::from_millis(100);
        reply
    });
    let config = openai_config(
        &api.url,
        "price = { input = 1.0, output = 1.0 }\nmax_concurrency = 16\n",
    );
    let test = project(&foreach_workflow("m", 40, ""), Some(&config));
    let out = test.run(["-L", "lib", "run", "ask", "--max-cost", "0.009"]);
    out.code(1);
    out.stderr_has("not started: the budget of $0.009 (--max-cost) would be exceeded");
    // The first call runs alone; then each call in flight holds what the first cost, so three
    // more fit beside what was spent ($0.002 + 3 x $0.002 = $0.008), never sixteen.
    assert_eq!(api.posts().len(), 4, "calls made");
    let record = test.last_run();
    let spent = record["usage"]["cost_usd"].as_f64().unwrap();
    assert!(spent <= 0.009, "spent {spent}");
}

// ---- Concurrency and rate limits ----

#[test]
fn max_concurrency_is_shared_by_every_stage_and_item_of_the_run() {
    // Each call is answered once three are in flight: more would show as four at once.
    let batches = Batches::new(3, 16);
    let api = Server::start(move |_, _| {
        batches.hold();
        Reply::json(200, &openai_reply("ok"))
    });
    let workflow = r#"
[inputs.n]
type = "integer"
default = 8

[stages.a]
foreach = "range(inputs.n)"
prompt = { inline = "a {{ item }}" }
model = "m"

[stages.b]
foreach = "range(inputs.n)"
prompt = { inline = "b {{ item }}" }
model = "m"
"#;
    let test = project(
        workflow,
        Some(&openai_config(&api.url, "max_concurrency = 3\n")),
    );
    test.run(["-L", "lib", "run", "ask", "--jobs", "2"]).code(0);
    assert_eq!(api.posts().len(), 16);
    assert_eq!(api.most_at_once(), 3, "two stages, one queue of three");

    // One stage runs as many items at once as its model allows, whatever --jobs says.
    let batches = Batches::new(4, 12);
    let api = Server::start(move |_, _| {
        batches.hold();
        Reply::json(200, &openai_reply("ok"))
    });
    let test = project(
        &foreach_workflow("m", 12, ""),
        Some(&openai_config(&api.url, "max_concurrency = 4\n")),
    );
    test.run(["-L", "lib", "run", "ask", "--jobs", "1"]).code(0);
    assert_eq!(api.posts().len(), 12);
    assert_eq!(api.most_at_once(), 4);
}

#[test]
fn two_aliases_of_one_provider_model_share_its_queue() {
    let batches = Batches::new(3, 16);
    let api = Server::start(move |_, _| {
        batches.hold();
        Reply::json(200, &openai_reply("ok"))
    });
    let workflow = r#"
[inputs.n]
type = "integer"
default = 8

[stages.a]
foreach = "range(inputs.n)"
prompt = { inline = "a {{ item }}" }
model = "m"

[stages.b]
foreach = "range(inputs.n)"
prompt = { inline = "b {{ item }}" }
model = "cheap"
"#;
    // `cheap` names the same model at the same server with no limit of its own: the limit of
    // `m` is the model's, so it holds for both.
    let config = format!(
        "{}[models.cheap]\nprovider = \"openai\"\nbase_url = \"{}/v1\"\nmodel = \"tiny\"\n",
        openai_config(&api.url, "max_concurrency = 3\n"),
        api.url
    );
    let test = project(workflow, Some(&config));
    test.run(["-L", "lib", "run", "ask", "--jobs", "2"]).code(0);
    let posts = api.posts();
    assert_eq!(posts.len(), 16);
    assert!(posts.iter().all(|seen| seen.body["model"] == "tiny"));
    assert_eq!(api.most_at_once(), 3, "two aliases, one queue of three");
}

/// What the server saw of a refused call: its body, whether it has come again, and the
/// requests of other calls that arrived between the refusal and the retry.
#[derive(Default)]
struct Refusal {
    body: Option<Value>,
    retried: bool,
    meanwhile: usize,
}

#[test]
fn a_rate_limit_retries_only_the_refused_call_while_the_others_go_on() {
    // Twelve calls, four at a time; the third is refused with `retry-after: 1`. The others are
    // answered at once: while the refused call waits out its second, they keep going.
    let refusal: Arc<Mutex<Refusal>> = Arc::default();
    let seen = Arc::clone(&refusal);
    let api = Server::start(move |request, index| {
        let mut refusal = seen.lock().unwrap();
        if index == 2 {
            refusal.body = Some(request.body.clone());
            return Reply::json(
                429,
                &json!({"error": {"type": "rate_limit_error", "message": "slow down"}}),
            )
            .header("retry-after", "1");
        }
        if refusal.body.as_ref() == Some(&request.body) {
            refusal.retried = true;
        } else if refusal.body.is_some() && !refusal.retried {
            refusal.meanwhile += 1;
        }
        Reply::json(200, &openai_reply("ok"))
    });
    let test = project(
        &foreach_workflow("m", 12, ""),
        Some(&openai_config(&api.url, "max_concurrency = 4\n")),
    );
    test.run(["-L", "lib", "run", "ask"]).code(0);
    let posts = api.posts();
    assert_eq!(posts.len(), 13, "twelve items and one retry");
    let refusal = refusal.lock().unwrap();
    assert!(refusal.retried, "the refused call came again");
    // A queue paused for everyone would have let at most the calls already on their way
    // through (the three others in flight at the refusal); the nine items left all can go.
    assert!(
        refusal.meanwhile > 3,
        "{} requests between the refusal and its retry",
        refusal.meanwhile
    );

    let record = test.last_run();
    assert_eq!(record["status"], "completed");
    let calls = stage(&record, "each")["model_calls"]
        .as_array()
        .unwrap()
        .clone();
    assert_eq!(calls.len(), 12);
    let retried: Vec<&Value> = calls.iter().filter(|call| call["retries"] == 1).collect();
    assert_eq!(retried.len(), 1, "{calls:#?}");
    // The record says the retry followed a rate limit, and how long it waited: the second
    // asked for, with at most a fifth more of jitter.
    assert_eq!(retried[0]["throttled"], 1, "{calls:#?}");
    let waited = retried[0]["waited_ms"].as_u64().unwrap();
    assert!((1000..=1200).contains(&waited), "waited {waited} ms");
    assert_eq!(record["usage"]["retries"], 1);
    assert_eq!(record["usage"]["throttled"], 1);
    assert_eq!(record["usage"]["waited_ms"], waited);
    let shown = test.run(["runs", "show", "last"]);
    shown.code(0);
    let line = format!("retries: 1 (1 rate-limited)  waited: {waited}ms");
    assert!(shown.stdout.contains(&line), "{}", shown.stdout);
}

// ---- Recordings ----

/// A port nothing listens on.
fn closed_url() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    drop(listener);
    url
}

#[test]
fn a_recording_replays_through_another_transport_naming_the_same_model_and_estimates_the_cost() {
    let api = Server::start(|_, _| {
        Reply::json(
            200,
            &openai_reply("{\"concept\": \"jitter\", \"why\": \"spread\"}"),
        )
    });
    let price = "price = { input = 2.0, output = 8.0, cache_read = 0.5 }\n";
    let test = project(&ask_workflow("m"), Some(&openai_config(&api.url, price)));
    test.run(["-L", "lib", "run", "ask", "--record", "rec"])
        .code(0);
    let files: Vec<PathBuf> = std::fs::read_dir(test.path("rec"))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .collect();
    assert_eq!(files.len(), 1);
    let text = std::fs::read_to_string(&files[0]).unwrap();
    let port = api.url.rsplit(':').next().unwrap().to_string();
    assert!(
        !text.contains("127.0.0.1") && !text.contains(&port),
        "the transport leaked into the recording: {text}"
    );
    let stored: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(stored["format"], 2);
    assert_eq!(stored["alias"], "m");
    assert_eq!(stored["request"]["model"], "tiny");
    assert_eq!(stored["request"]["system"], "You are terse.");
    assert_eq!(
        stored["request"]["messages"],
        json!([{"role": "user", "content": "Name one concept about retries."}])
    );
    assert_eq!(
        stored["request"]["schema"],
        serde_json::from_str::<Value>(SCHEMA).unwrap()
    );
    let recorded_cost = stored["reply"]["cost_usd"]
        .as_f64()
        .expect("the cost is recorded");

    // Another machine: the same model behind the Anthropic API at an address nothing serves.
    test.write(
        "stagegraph.toml",
        &format!(
            "[models.m]\nprovider = \"anthropic\"\nmodel = \"tiny\"\nbase_url = \"{}\"\n",
            closed_url()
        ),
    );
    let out = test.run(["-L", "lib", "run", "ask", "--replay", "rec"]);
    out.code(0);
    assert_eq!(out.stdout.trim(), "jitter");
    assert_eq!(api.posts().len(), 1, "nothing asked again");

    // A dry-run over the recordings says what a real run would cost.
    let out = test.run(["-L", "lib", "run", "ask", "--dry-run", "--replay", "rec"]);
    out.code(0);
    out.stderr_has(&format!(
        "a real run would cost about ${recorded_cost:.4} (as recorded, over 1 model call(s))"
    ));
    let record = test.last_run();
    assert_eq!(record["dry_run"], true);
    assert_eq!(
        record["usage"]["estimated_cost_usd"].as_f64(),
        Some(recorded_cost)
    );
    assert!(
        record["usage"].get("cost_usd").is_none(),
        "nothing was paid"
    );
    assert_eq!(stage(&record, "ask")["model_calls"][0]["replayed"], true);
}

#[test]
fn a_recording_of_the_first_format_is_still_read_with_a_note() {
    let test = project(&ask_workflow("m"), Some(&openai_config(&closed_url(), "")));
    test.write(
        "old/5f0c.json",
        &json!({
            "request": {"alias": "m", "provider": "openai:tiny@http://127.0.0.1:1/v1",
                        "system": "You are terse.", "prompt": "Name one concept about retries.",
                        "temperature": null, "max_tokens": null},
            "reply": {"text": "{\"concept\": \"old\", \"why\": \"kept\"}",
                      "usage": {"input_tokens": 1, "output_tokens": 2}}
        })
        .to_string(),
    );
    let out = test.run(["-L", "lib", "run", "ask", "--replay", "old"]);
    out.code(0);
    assert_eq!(out.stdout.trim(), "old");
    out.stderr_has("holds recordings of the first format");
    out.stderr_has("--record");
}

#[test]
fn recordings_of_the_first_format_migrate_to_the_portable_format() {
    let test = project(&ask_workflow("m"), Some(&openai_config(&closed_url(), "")));
    let old = |provider: &str, alias: &str| {
        json!({
            "request": {"alias": alias, "provider": provider,
                        "system": "You are terse.", "prompt": "Name one concept about retries.",
                        "temperature": null, "max_tokens": null},
            "reply": {"text": "{\"concept\": \"old\", \"why\": \"kept\"}",
                      "usage": {"input_tokens": 1, "output_tokens": 2}}
        })
        .to_string()
    };
    test.write("old/a.json", &old("openai:tiny@http://127.0.0.1:1/v1", "m"));
    test.write(
        "old/b.json",
        &old("command:claude -p --model haiku", "haiku"),
    );
    test.write(
        "old/c.json",
        &old("command:/home/me/bin/shout.sh --loud", "shout"),
    );
    test.write("old/d.json", &old("replay:/somewhere", "r"));
    test.write("old/notes.json", "not json");
    let out = test.run(["recordings", "migrate", "old"]);
    out.code(0);
    out.stderr_has("3 migrated, 0 already portable, 2 skipped");
    out.stderr_has("skipped d.json: no model can be read from `replay:/somewhere`");
    out.stderr_has("skipped notes.json: not a recording");
    let mut models = Vec::new();
    for entry in std::fs::read_dir(test.path("old")).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if ["d.json", "notes.json"].contains(&name.as_str()) {
            continue;
        }
        let recording: Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        assert_eq!(name.len(), 64 + 5, "named by its hash: {name}");
        assert_eq!(recording["format"], 2);
        assert_eq!(
            recording["request"]["messages"],
            json!([{"role": "user", "content": "Name one concept about retries."}])
        );
        assert_eq!(
            recording["reply"]["text"],
            "{\"concept\": \"old\", \"why\": \"kept\"}"
        );
        models.push(recording["request"]["model"].as_str().unwrap().to_string());
    }
    models.sort();
    assert_eq!(models, ["command:shout.sh --loud", "haiku", "tiny"]);

    // Now portable: it replays with no note, and a second migration changes nothing.
    let out = test.run(["-L", "lib", "run", "ask", "--replay", "old"]);
    out.code(0);
    assert_eq!(out.stdout.trim(), "old");
    assert!(!out.stderr.contains("first format"), "{}", out.stderr);
    let again = test.run(["recordings", "migrate", "old"]);
    again.code(0);
    again.stderr_has("0 migrated, 3 already portable, 2 skipped");
}
