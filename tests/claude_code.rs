//! Meeting users inside Claude Code: the plugin, `install-hook`/`uninstall-hook`, and the MCP
//! server driven by the official MCP Python SDK.

use std::path::PathBuf;
use std::process::Command;

use serde_json::{json, Value};

use crate::support::{copy_tree, fixtures, repo_root, Test, BIN};

/// The real Claude Code CLI: `$STAGEGRAPH_TEST_CLAUDE`, else `claude` on PATH. Where
/// `$STAGEGRAPH_TEST_REQUIRE_CLAUDE` is set (CI, once it installed the CLI), a missing one fails
/// the test instead of skipping it.
pub(crate) fn claude_cli() -> Option<PathBuf> {
    let found = match std::env::var_os("STAGEGRAPH_TEST_CLAUDE").filter(|p| !p.is_empty()) {
        Some(path) => Some(PathBuf::from(path)).filter(|path| path.is_file()),
        None => which::which("claude").ok(),
    };
    assert!(
        found.is_some() || std::env::var_os("STAGEGRAPH_TEST_REQUIRE_CLAUDE").is_none(),
        "STAGEGRAPH_TEST_REQUIRE_CLAUDE is set but no Claude Code CLI was found"
    );
    if let Some(path) = &found {
        let version = Command::new(path)
            .arg("--version")
            .output()
            .map(|out| String::from_utf8_lossy(&out.stdout).trim().to_string())
            .unwrap_or_default();
        eprintln!("the real Claude Code CLI: {} ({version})", path.display());
    }
    found
}

fn python_with_mcp() -> bool {
    Command::new("python3")
        .args(["-c", "import mcp.client.stdio"])
        .output()
        .is_ok_and(|out| out.status.success())
}

#[test]
fn plugin_and_marketplace_pass_strict_validation() {
    let Some(claude) = claude_cli() else {
        crate::support::skip(
            "the Claude Code CLI is not installed (npm i @anthropic-ai/claude-code)",
        );
        return;
    };
    let home = tempfile::tempdir().expect("a temporary home");
    for dir in [repo_root().join("plugin"), repo_root()] {
        let out = Command::new(&claude)
            .args(["plugin", "validate", "--strict"])
            .arg(&dir)
            .env("HOME", home.path())
            .output()
            .expect("run claude plugin validate");
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.status.success(), "{}: {text}", dir.display());
        assert!(text.contains("Validation passed"), "{text}");
    }
}

#[test]
fn plugin_hook_runs_context_update_and_never_fails_without_the_binary() {
    let hooks: Value = serde_json::from_str(
        &std::fs::read_to_string(repo_root().join("plugin/hooks/hooks.json")).expect("hooks.json"),
    )
    .expect("hooks.json is JSON");
    let hook = &hooks["hooks"]["Stop"][0]["hooks"][0];
    let command = hook["command"].as_str().expect("a command");
    assert!(
        command.ends_with("run context-update --inputs-json - --quiet --detach"),
        "{command}"
    );

    // The resolver with no stagegraph anywhere: exit 0; the first time, the hook's JSON output
    // (shown to the user) names exactly how to get the binary; each time it goes to stderr and
    // to the log.
    let test = Test::new();
    let script = repo_root().join("plugin/scripts/stagegraph");
    let hook = |home: &std::path::Path| {
        Command::new(&script)
            .args([
                "--hook",
                "run",
                "context-update",
                "--inputs-json",
                "-",
                "--quiet",
            ])
            .env("PATH", "/usr/bin:/bin")
            .env("HOME", home)
            .env("XDG_STATE_HOME", test.path("state"))
            .env_remove("STAGEGRAPH_BIN")
            .output()
            .expect("run the resolver")
    };
    let ways = [
        "curl -fsSL https://github.com/stagegraph/stagegraph/releases/latest/download/install.sh | sh",
        "cargo binstall stagegraph",
    ];
    let out = hook(test.root());
    assert_eq!(out.status.code(), Some(0));
    let told: Value = serde_json::from_slice(&out.stdout).expect("the hook's JSON output");
    let message = told["systemMessage"].as_str().expect("a systemMessage");
    assert!(message.contains("stagegraph is not installed"), "{message}");
    for way in ways {
        assert!(message.contains(way), "{message}");
        assert!(String::from_utf8_lossy(&out.stderr).contains(way));
    }
    // Once: the next fire says nothing to the session, and still exits 0 and logs.
    let out = hook(test.root());
    assert_eq!(out.status.code(), Some(0));
    assert!(
        out.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains(ways[1]));
    let log =
        std::fs::read_to_string(test.path("state/stagegraph/hook-errors.log")).expect("a log");
    assert_eq!(
        log.matches("stagegraph is not installed").count(),
        2,
        "{log}"
    );
    // Where install.sh puts it (~/.local/bin), it is found; gone again, it is told again.
    let local = test.path(".local/bin/stagegraph");
    std::fs::create_dir_all(local.parent().expect("a folder")).expect("a folder");
    std::fs::write(&local, "#!/bin/sh\necho found \"$@\"\n").expect("write");
    crate::support::make_executable(&local);
    let out = hook(test.root());
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "found run context-update --inputs-json - --quiet\n"
    );
    std::fs::remove_file(&local).expect("remove");
    let out = hook(test.root());
    assert!(String::from_utf8_lossy(&out.stdout).contains("systemMessage"));
    // Outside a hook (the MCP server, a command) a missing binary is an error: 127.
    let out = Command::new(&script)
        .arg("--version")
        .env("PATH", "/usr/bin:/bin")
        .env("HOME", test.root())
        .env("XDG_STATE_HOME", test.path("state"))
        .env_remove("STAGEGRAPH_BIN")
        .output()
        .expect("run the resolver");
    assert_eq!(out.status.code(), Some(127));
    assert!(out.stdout.is_empty());
    assert!(String::from_utf8_lossy(&out.stderr).contains(ways[0]));

    // With the binary named, the hook runs it: the payload on stdin reaches the workflow.
    let out = Command::new(&script)
        .args(["--hook", "--version"])
        .env("STAGEGRAPH_BIN", BIN)
        .output()
        .expect("run the resolver");
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("stagegraph "));
}

#[test]
fn install_hook_enable_turns_it_on_and_doctor_names_what_to_fix() {
    let test = Test::new();
    test.write("CLAUDE.md", "# Repo\n\n- Background context: disabled\n");
    // No `claude` on PATH: the built-in aliases cannot be answered.
    let path = "/usr/bin:/bin";
    let out = test
        .command(["install-hook", "--enable"])
        .env("PATH", path)
        .output();
    out.code(0)
        .stderr_has("added the context-update hooks (Stop, SessionEnd)")
        .stderr_has("background context turned on")
        // install-hook ends with the doctor's findings.
        .stderr_has("FIX   model haiku: claude:haiku; `claude` is not on PATH");
    assert_eq!(
        test.read("CLAUDE.md"),
        "# Repo\n\n- Background context: enabled\n"
    );
    let settings: Value = serde_json::from_str(&test.read(".claude/settings.json")).expect("JSON");
    for event in ["Stop", "SessionEnd"] {
        assert!(
            settings["hooks"][event][0]["hooks"][0]["command"]
                .as_str()
                .is_some_and(|c| c.ends_with("--detach")),
            "{event}: {settings}"
        );
    }
    test.command(["install-hook", "--enable"])
        .env("PATH", path)
        .output()
        .code(0)
        .stderr_has("nothing to change")
        .stderr_has("already enabled");

    let doctor = test.command(["doctor"]).env("PATH", path).output();
    doctor
        .code(1)
        .stderr_has("ok    toggle: background context is enabled")
        .stderr_has("ok    hook: installed in the project settings")
        .stderr_has("FIX   model sonnet")
        .stderr_has("2 thing(s) to fix");

    // Aliases of the project's own: the models are fine; a failed hook run is named.
    test.write(
        "stagegraph.toml",
        "[models.haiku]\nprovider = \"command\"\ncommand = [\"false\"]\n\n\
         [models.sonnet]\nprovider = \"command\"\ncommand = [\"cat\"]\n",
    );
    let doctor = test.command(["doctor"]).env("PATH", path).output();
    doctor
        .code(0)
        .stderr_has("ok    model haiku: command:false");
    // `--probe` asks each alias: haiku's program fails.
    let probe = test
        .command(["doctor", "--probe"])
        .env("PATH", path)
        .output();
    probe
        .code(1)
        .stderr_has("FIX   model haiku: command:false; the probe failed")
        .stderr_has("ok    model sonnet: command:cat; answered a probe in");
}

#[test]
fn install_hook_merges_is_idempotent_and_uninstall_removes_exactly_it() {
    let test = Test::new();
    let original = "{\n  \"model\": \"sonnet\",\n  \"hooks\": {\n    \"Stop\": [\n      {\n        \"hooks\": [\n          {\n            \"type\": \"command\",\n            \"command\": \"echo mine\"\n          }\n        ]\n      }\n    ],\n    \"PreToolUse\": []\n  }\n}\n";
    test.write(".claude/settings.json", original);

    let dry = test.run(["install-hook", "--dry-run"]);
    dry.code(0);
    assert!(dry.stdout.contains('+'), "a diff: {}", dry.stdout);
    assert!(
        dry.stdout
            .contains("run context-update --inputs-json - --quiet"),
        "{}",
        dry.stdout
    );
    assert_eq!(
        test.read(".claude/settings.json"),
        original,
        "a dry-run writes nothing"
    );

    test.run(["install-hook"]).code(0);
    let installed = test.read(".claude/settings.json");
    let settings: Value = serde_json::from_str(&installed).expect("JSON");
    assert_eq!(settings["model"], "sonnet");
    let stop = settings["hooks"]["Stop"].as_array().expect("Stop groups");
    assert_eq!(stop.len(), 2, "the user's hook is kept: {installed}");
    assert_eq!(stop[0]["hooks"][0]["command"], "echo mine");
    let ours = &stop[1]["hooks"][0];
    assert!(ours["command"]
        .as_str()
        .is_some_and(|c| c.ends_with("--detach")));
    assert!(ours["timeout"].as_u64().is_some());

    let again = test.run(["install-hook"]);
    again.code(0).stderr_has("nothing to change");
    assert_eq!(
        test.read(".claude/settings.json"),
        installed,
        "installing twice changes nothing"
    );

    test.run(["uninstall-hook"]).code(0);
    assert_eq!(test.read(".claude/settings.json"), original);
    test.run(["uninstall-hook"])
        .code(0)
        .stderr_has("nothing to change");

    // Not JSON: refused, untouched.
    test.write(".claude/settings.local.json", "{ \"hooks\": ");
    let bad = test.run(["install-hook", "--scope", "local"]);
    bad.code(2).stderr_has("is not valid JSON");
    assert_eq!(test.read(".claude/settings.local.json"), "{ \"hooks\": ");

    // The user scope goes to $HOME/.claude/settings.json (HOME is the test folder).
    test.run(["install-hook", "--scope", "user"]).code(0);
    let user: Value = serde_json::from_str(&test.read(".claude/settings.json")).expect("JSON");
    assert_eq!(user["hooks"]["Stop"].as_array().map(Vec::len), Some(2));
}

#[test]
fn mcp_serves_workflows_to_the_official_python_client() {
    if !python_with_mcp() {
        crate::support::skip("python3 with the `mcp` package is not installed (pip install mcp)");
        return;
    }
    let test = Test::new();
    let lib = test.path("lib");
    copy_tree(&fixtures("mcp"), &lib);
    let out = Command::new("python3")
        .arg(lib.join("client.py"))
        .arg(BIN)
        .arg(test.root())
        .arg("--library")
        .arg(&lib)
        .arg("--state-dir")
        .arg(test.state_dir())
        .env("HOME", test.root())
        .env("XDG_CONFIG_HOME", test.path("config"))
        .env_remove("STAGEGRAPH_PATH")
        .output()
        .expect("run the MCP client");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "client failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_str(&stdout).expect("a JSON report");
    assert_eq!(report["server"]["name"], "stagegraph");

    // Tools: the generic ones, one per valid workflow; a broken workflow has none.
    let tools = report["tools"].as_array().expect("tools");
    let names: Vec<&str> = tools.iter().filter_map(|t| t["name"].as_str()).collect();
    for expected in [
        "list_workflows",
        "check_workflow",
        "plan_workflow",
        "run_workflow",
        "show_run",
        "resume_run",
        "run_hello",
        "run_refresh",
        "run_compound",
        "run_context-update",
    ] {
        assert!(
            names.contains(&expected),
            "{expected} missing from {names:?}"
        );
    }
    assert!(!names.contains(&"run_broken"), "{names:?}");
    for tool in tools {
        let schema = &tool["inputSchema"];
        assert!(
            jsonschema::meta::options().is_valid(schema)
                && jsonschema::validator_for(schema).is_ok(),
            "{} has an invalid input schema: {schema}",
            tool["name"]
        );
    }
    let hello = tools
        .iter()
        .find(|t| t["name"] == "run_hello")
        .expect("run_hello");
    assert_eq!(hello["inputSchema"]["required"], json!(["name"]));
    assert_eq!(hello["inputSchema"]["properties"]["name"]["type"], "string");
    assert_eq!(hello["inputSchema"]["properties"]["loud"]["default"], false);
    let refresh = tools
        .iter()
        .find(|t| t["name"] == "run_refresh")
        .expect("run_refresh");
    assert_eq!(
        refresh["inputSchema"]["properties"]["hint"]["type"],
        "string"
    );

    // list_workflows: names, descriptions, typed inputs; the broken one says why.
    let listed = &report["list"]["structuredContent"]["workflows"];
    let hello_listed = listed
        .as_array()
        .and_then(|l| l.iter().find(|w| w["name"] == "hello"))
        .expect("hello listed");
    assert_eq!(hello_listed["description"], "Say hello");
    assert_eq!(hello_listed["inputs"]["name"]["required"], true);
    let broken = listed
        .as_array()
        .and_then(|l| l.iter().find(|w| w["name"] == "broken"))
        .expect("broken listed");
    assert!(broken["error"]
        .as_str()
        .is_some_and(|e| e.contains("error")));

    // A run: status, outputs and run id; progress per stage; recorded like any other.
    let run = &report["run_hello"]["structuredContent"];
    assert_eq!(run["status"], "completed", "{run}");
    assert_eq!(run["outputs"]["greeting"], "hello mcp");
    let run_id = run["run_id"].as_str().expect("a run id");
    assert!(test
        .state_dir()
        .join("runs")
        .join(run_id)
        .join("run.json")
        .is_file());
    let progress = report["progress"].as_array().expect("progress");
    assert_eq!(progress.len(), 2, "{progress:?}");
    assert_eq!(progress[1]["progress"], 2.0);
    assert_eq!(progress[1]["total"], 2.0);
    assert_eq!(
        report["run_workflow"]["structuredContent"]["outputs"]["greeting"],
        "hello again"
    );

    // Errors are tool errors carrying the engine's text; the server keeps answering.
    assert_eq!(report["run_bad_input"]["isError"], true);
    assert!(report["run_bad_input"]["structuredContent"]["error"]
        .as_str()
        .is_some_and(|e| e.contains("input `name` must be a string")));
    let failing = &report["run_failing"];
    assert_eq!(failing["isError"], true);
    assert_eq!(failing["structuredContent"]["status"], "failed");
    assert!(failing["structuredContent"]["error"]
        .as_str()
        .is_some_and(|e| e.contains("exited with code 3")));
    assert_eq!(report["check_broken"]["isError"], true);
    assert!(report["check_broken"]["content"][0]["text"]
        .as_str()
        .is_some_and(|t| t.contains("unknown stage `missing`")));
    let plan: Value = serde_json::from_str(
        report["plan"]["content"][0]["text"]
            .as_str()
            .expect("plan text"),
    )
    .expect("plan as JSON");
    assert_eq!(plan["workflow"], "hello");
    assert!(report["show_last"]["content"][0]["text"]
        .as_str()
        .is_some_and(|t| t.contains("\"workflow\": \"failing\"")));
    assert!(report["after"]["structuredContent"]["workflows"].is_array());
}

mod messages_stub;

use messages_stub::{tool_names, tool_results, MessagesStub, Reply};

/// `claude -p` offline: HOME in the test folder, the Messages API on loopback.
fn claude_command(
    claude: &std::path::Path,
    test: &Test,
    stub: &MessagesStub,
    project: &std::path::Path,
) -> Command {
    let mut command = Command::new(claude);
    command
        .current_dir(project)
        .env("HOME", test.root())
        .env("XDG_CONFIG_HOME", test.path("config"))
        .env("XDG_STATE_HOME", test.path("state-home"))
        .env("ANTHROPIC_BASE_URL", &stub.url)
        .env("ANTHROPIC_API_KEY", "sk-ant-test-key")
        .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
        .env("DISABLE_AUTOUPDATER", "1")
        .env("NO_COLOR", "1")
        .env_remove("STAGEGRAPH_PATH")
        .env_remove("CLAUDE_PROJECT_DIR");
    command
}

#[test]
fn claude_code_loads_the_plugin_and_its_stop_hook_runs_context_update_on_the_transcript() {
    let Some(claude) = claude_cli() else {
        crate::support::skip(
            "the Claude Code CLI is not installed (npm i @anthropic-ai/claude-code)",
        );
        return;
    };
    let test = Test::new();
    let project = test.path("project");
    std::fs::create_dir_all(&project).expect("a project folder");
    let stub =
        MessagesStub::start(|_| Reply::Text("Noted: the backlog is the retry queue.".into()));
    // A one-shot `claude -p`: the session ends with the turn, and Claude Code kills what its
    // hooks started; the hook's `--detach` run goes on in a session of its own.
    let out = claude_command(&claude, &test, &stub, &project)
        .env("STAGEGRAPH_BIN", BIN)
        .args(["-p", "From now on we call the retry queue the backlog."])
        .arg("--plugin-dir")
        .arg(repo_root().join("plugin"))
        .output()
        .expect("run claude");
    assert!(
        out.status.success(),
        "claude -p failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        !stub.requests().is_empty(),
        "claude called the loopback API"
    );

    // The detached runs finish after claude has exited: the turn's end and the session's (the
    // plugin has both hooks). Wait for both records, finished.
    let records = || -> Vec<Value> {
        let mut records: Vec<Value> = walkdir::WalkDir::new(test.path("state-home"))
            .into_iter()
            .flatten()
            .filter(|entry| entry.file_name() == "run.json")
            .filter_map(|entry| std::fs::read(entry.path()).ok())
            .filter_map(|bytes| serde_json::from_slice::<Value>(&bytes).ok())
            .collect();
        records.sort_by_key(|run| run["inputs"]["hook_event_name"].to_string());
        records
    };
    crate::support::wait_for(
        "the Stop and SessionEnd hooks' runs",
        std::time::Duration::from_secs(120),
        || {
            let records = records();
            let events: Vec<&str> = records
                .iter()
                .filter_map(|run| run["inputs"]["hook_event_name"].as_str())
                .collect();
            events == ["SessionEnd", "Stop"] && records.iter().all(|run| run["status"] != "running")
        },
    );
    let record = records().pop().expect("the Stop run");
    assert_eq!(record["workflow"], "context-update", "{record}");
    assert_eq!(record["inputs"]["hook_event_name"], "Stop");
    let transcript = PathBuf::from(
        record["inputs"]["transcript_path"]
            .as_str()
            .expect("a transcript"),
    );
    assert!(
        transcript.starts_with(test.root().join(".claude").join("projects")),
        "{}",
        transcript.display()
    );
    let text = std::fs::read_to_string(&transcript).expect("the session's transcript");
    assert!(
        text.contains("we call the retry queue the backlog"),
        "{text}"
    );
}

#[test]
fn claude_code_calls_a_workflow_through_the_mcp_server_and_reads_its_result() {
    let Some(claude) = claude_cli() else {
        crate::support::skip(
            "the Claude Code CLI is not installed (npm i @anthropic-ai/claude-code)",
        );
        return;
    };
    let test = Test::new();
    let lib = test.path("lib");
    copy_tree(&fixtures("mcp"), &lib);
    let project = test.path("project");
    std::fs::create_dir_all(&project).expect("a project folder");
    let tool = "mcp__stagegraph__run_hello";
    let stub = MessagesStub::start(move |request| {
        if let Some(result) = tool_results(request).into_iter().next() {
            Reply::Text(format!("The workflow said: {result}"))
        } else if tool_names(request).iter().any(|name| name == tool) {
            Reply::ToolUse {
                name: tool.to_string(),
                input: json!({ "name": "claude" }),
            }
        } else {
            Reply::Text("ok".into())
        }
    });
    let config = json!({
        "mcpServers": {
            "stagegraph": {
                "command": BIN,
                "args": ["--library", lib, "--state-dir", test.state_dir(), "mcp"]
            }
        }
    });
    let config_path = test.path("mcp.json");
    std::fs::write(&config_path, config.to_string()).expect("write the MCP config");
    let out = claude_command(&claude, &test, &stub, &project)
        .args(["-p", "Greet claude with the hello workflow."])
        // Every tool in the first request, not found later through a tool search.
        .env("ENABLE_TOOL_SEARCH", "false")
        .arg("--mcp-config")
        .arg(&config_path)
        .arg("--strict-mcp-config")
        .args(["--allowedTools", tool])
        .output()
        .expect("run claude");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "claude -p failed: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let requests = stub.requests();
    let offered = requests
        .iter()
        .any(|r| tool_names(r).iter().any(|n| n == tool));
    assert!(offered, "the stagegraph tools reached the model");
    let results: Vec<String> = requests.iter().flat_map(tool_results).collect();
    assert!(
        results
            .iter()
            .any(|r| r.contains("hello claude") && r.contains("\"status\":\"completed\"")),
        "the tool's result went back to the model: {results:?}"
    );
    assert!(stdout.contains("hello claude"), "{stdout}");
    // The run is recorded like any other.
    let ids = test.run_ids();
    assert_eq!(ids.len(), 1, "{ids:?}");
}
