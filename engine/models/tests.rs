//! Providers, record/replay and secrets, end to end through [`Models`], against stub servers on
//! 127.0.0.1 and `sh` scripts.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::*;

const KEY: &str = "sk-test-SECRET-4242";

/// One scripted HTTP answer.
struct Answer {
    status: u16,
    headers: Vec<(&'static str, String)>,
    body: String,
    delay: Duration,
}

fn answer(status: u16, body: Value) -> Answer {
    Answer {
        status,
        headers: Vec::new(),
        body: body.to_string(),
        delay: Duration::ZERO,
    }
}

/// What the stub saw of one request.
#[derive(Debug)]
struct Seen {
    request_line: String,
    headers: Vec<(String, String)>,
    body: Value,
}

impl Seen {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.as_str())
    }
}

/// A server that plays the answers in order, one connection each, and reports each request.
fn stub(answers: Vec<Answer>) -> (String, mpsc::Receiver<Seen>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        for answer in answers {
            let Ok((stream, _)) = listener.accept() else {
                return;
            };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut request_line = String::new();
            reader.read_line(&mut request_line).unwrap();
            let mut headers = Vec::new();
            loop {
                let mut line = String::new();
                reader.read_line(&mut line).unwrap();
                let line = line.trim_end();
                if line.is_empty() {
                    break;
                }
                if let Some((name, value)) = line.split_once(':') {
                    headers.push((name.trim().to_ascii_lowercase(), value.trim().to_string()));
                }
            }
            let length: usize = headers
                .iter()
                .find(|(name, _)| name == "content-length")
                .map_or(0, |(_, value)| value.parse().unwrap());
            let mut body = vec![0; length];
            reader.read_exact(&mut body).unwrap();
            let _ = tx.send(Seen {
                request_line: request_line.trim_end().to_string(),
                headers,
                body: serde_json::from_slice(&body).unwrap_or(Value::Null),
            });
            thread::sleep(answer.delay);
            let mut stream = stream;
            let mut head = format!(
                "HTTP/1.1 {} Stub\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n",
                answer.status,
                answer.body.len()
            );
            for (name, value) in &answer.headers {
                head.push_str(&format!("{name}: {value}\r\n"));
            }
            head.push_str("\r\n");
            let _ = stream.write_all(head.as_bytes());
            let _ = stream.write_all(answer.body.as_bytes());
        }
    });
    (url, rx)
}

fn models(toml: &str) -> Models {
    Models::from_layers(vec![(PathBuf::from("test.toml"), toml.to_string())])
        .unwrap()
        .with_environment(&[("TEST_KEY", KEY)])
        .with_backoff(Duration::from_millis(10))
}

fn anthropic_models(url: &str, extra: &str) -> Models {
    models(&format!(
        "[models.claude]\nprovider = \"anthropic\"\nmodel = \"claude-test\"\n\
         api_key_env = \"TEST_KEY\"\nbase_url = \"{url}\"\n{extra}"
    ))
}

fn openai_models(url: &str, extra: &str) -> Models {
    models(&format!(
        "[models.local]\nprovider = \"openai\"\nmodel = \"tiny\"\nbase_url = \"{url}/v1\"\n{extra}"
    ))
}

fn request(alias: &str, prompt: &str) -> ModelRequest {
    ModelRequest {
        alias: alias.to_string(),
        prompt: prompt.to_string(),
        ..ModelRequest::default()
    }
}

fn anthropic_ok(text: &str) -> Value {
    json!({
        "type": "message",
        "content": [{"type": "text", "text": text}],
        "usage": {"input_tokens": 12, "output_tokens": 3}
    })
}

fn openai_ok(text: &str) -> Value {
    json!({
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}}],
        "usage": {"prompt_tokens": 7, "completion_tokens": 2, "total_tokens": 9}
    })
}

// ---- Anthropic ----

#[test]
fn anthropic_success_maps_fields_and_usage() {
    let (url, seen) = stub(vec![answer(200, anthropic_ok("hello"))]);
    let models = anthropic_models(&url, "");
    let reply = models
        .complete(&ModelRequest {
            system: Some("be terse".into()),
            temperature: Some(0.5),
            max_tokens: Some(99),
            ..request("claude", "say hello")
        })
        .unwrap();
    assert_eq!(reply.text, "hello");
    assert_eq!(
        reply.usage,
        Some(Usage {
            input_tokens: 12,
            output_tokens: 3,
            ..Usage::default()
        })
    );
    let seen = seen.recv().unwrap();
    assert_eq!(seen.request_line, "POST /v1/messages HTTP/1.1");
    assert_eq!(seen.header("x-api-key"), Some(KEY));
    assert_eq!(seen.header("anthropic-version"), Some("2023-06-01"));
    assert_eq!(
        seen.body,
        json!({
            "model": "claude-test",
            "max_tokens": 99,
            "messages": [{"role": "user", "content": "say hello"}],
            "system": [{"type": "text", "text": "be terse", "cache_control": {"type": "ephemeral"}}],
            "temperature": 0.5
        })
    );
}

#[test]
fn anthropic_default_max_tokens_and_no_optional_fields() {
    let (url, seen) = stub(vec![answer(200, anthropic_ok("ok"))]);
    anthropic_models(&url, "")
        .complete(&request("claude", "p"))
        .unwrap();
    let body = seen.recv().unwrap().body;
    assert_eq!(body["max_tokens"], 4096);
    assert!(body.get("system").is_none() && body.get("temperature").is_none());
}

#[test]
fn anthropic_401_surfaces_the_error_body_and_is_not_retried() {
    let (url, seen) = stub(vec![answer(
        401,
        json!({"type": "error", "error": {"type": "authentication_error", "message": "invalid x-api-key"}}),
    )]);
    let error = anthropic_models(&url, "")
        .complete(&request("claude", "p"))
        .unwrap_err();
    let message = error.to_string();
    assert!(
        matches!(error, ModelError::Status { status: 401, .. }),
        "{message}"
    );
    assert!(
        message.contains("HTTP 401") && message.contains("authentication_error: invalid x-api-key"),
        "{message}"
    );
    assert!(!error.is_retryable());
    assert_eq!(seen.try_iter().count(), 1);
}

#[test]
fn rate_limit_honours_retry_after_then_succeeds() {
    let mut limited = answer(
        429,
        json!({"error": {"type": "rate_limit_error", "message": "slow down"}}),
    );
    limited.headers.push(("retry-after", "1".into()));
    let (url, seen) = stub(vec![limited, answer(200, anthropic_ok("after the wait"))]);
    let started = Instant::now();
    let reply = anthropic_models(&url, "")
        .complete(&request("claude", "p"))
        .unwrap();
    assert_eq!(reply.text, "after the wait");
    // The wait asked for, with at most a fifth more of jitter.
    assert_eq!(reply.retried.retries, 1);
    assert_eq!(reply.retried.throttled, 1);
    assert!(
        (1000..=1200).contains(&reply.retried.waited_ms),
        "{:?}",
        reply.retried
    );
    // The backoff is 10 ms here: a wait of a second can only come from `retry-after`.
    assert!(
        started.elapsed() >= Duration::from_secs(1),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(seen.try_iter().count(), 2);
}

#[test]
fn missing_key_names_the_variable() {
    let models = models(
        "[models.claude]\nprovider = \"anthropic\"\nmodel = \"m\"\napi_key_env = \"NOT_SET_KEY\"\n",
    );
    let error = models.complete(&request("claude", "p")).unwrap_err();
    assert!(matches!(error, ModelError::MissingKey { .. }));
    assert!(error.to_string().contains("`NOT_SET_KEY`"), "{error}");
}

// ---- OpenAI-compatible ----

#[test]
fn openai_success_with_usage_and_bearer_auth() {
    let (url, seen) = stub(vec![answer(200, openai_ok("hi there"))]);
    let models = openai_models(&url, "api_key_env = \"TEST_KEY\"");
    let reply = models
        .complete(&ModelRequest {
            system: Some("sys".into()),
            temperature: Some(0.0),
            max_tokens: Some(50),
            ..request("local", "hello")
        })
        .unwrap();
    assert_eq!(reply.text, "hi there");
    assert_eq!(
        reply.usage,
        Some(Usage {
            input_tokens: 7,
            output_tokens: 2,
            ..Usage::default()
        })
    );
    let seen = seen.recv().unwrap();
    assert_eq!(seen.request_line, "POST /v1/chat/completions HTTP/1.1");
    assert_eq!(
        seen.header("authorization"),
        Some(format!("Bearer {KEY}").as_str())
    );
    assert_eq!(
        seen.body,
        json!({
            "messages": [
                {"role": "system", "content": "sys"},
                {"role": "user", "content": "hello"}
            ],
            "model": "tiny",
            "temperature": 0.0,
            "max_tokens": 50
        })
    );
}

#[test]
fn openai_without_key_sends_no_authorization() {
    let (url, seen) = stub(vec![answer(200, openai_ok("x"))]);
    openai_models(&url, "")
        .complete(&request("local", "p"))
        .unwrap();
    assert_eq!(seen.recv().unwrap().header("authorization"), None);
}

#[test]
fn server_error_is_retried_then_succeeds() {
    let (url, seen) = stub(vec![
        answer(500, json!({"error": {"message": "boom"}})),
        answer(200, openai_ok("second time lucky")),
    ]);
    let reply = openai_models(&url, "")
        .complete(&request("local", "p"))
        .unwrap();
    assert_eq!(reply.text, "second time lucky");
    assert_eq!(seen.try_iter().count(), 2);
}

#[test]
fn retries_run_out_and_the_last_status_is_reported() {
    let (url, seen) = stub(vec![
        answer(503, json!({"error": {"message": "overloaded"}})),
        answer(503, json!({"error": {"message": "overloaded"}})),
    ]);
    let error = openai_models(&url, "retries = 1")
        .complete(&request("local", "p"))
        .unwrap_err();
    assert!(
        matches!(
            error,
            ModelError::Status {
                status: 503,
                attempts: 2,
                ..
            }
        ),
        "{error}"
    );
    assert!(error.to_string().contains("after 2 attempts"), "{error}");
    assert!(error.is_retryable());
    assert_eq!(seen.try_iter().count(), 2);
}

#[test]
fn slow_reply_past_the_timeout_is_a_timeout() {
    let mut slow = answer(200, openai_ok("too late"));
    slow.delay = Duration::from_secs(60);
    let (url, _seen) = stub(vec![slow]);
    let started = Instant::now();
    let error = openai_models(&url, "timeout = \"300ms\"")
        .complete(&request("local", "p"))
        .unwrap_err();
    assert!(matches!(error, ModelError::Timeout { .. }), "{error}");
    assert!(error.is_retryable());
    // The reply would come after 60 s: the bound catches a wait for it, far above any load,
    // and is no claim about how soon a timeout fires.
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "{:?}",
        started.elapsed()
    );
}

#[test]
fn the_request_timeout_overrides_the_alias_timeout() {
    let mut slow = answer(200, openai_ok("too late"));
    slow.delay = Duration::from_secs(5);
    let (url, _seen) = stub(vec![slow]);
    let error = openai_models(&url, "")
        .complete(&ModelRequest {
            timeout: Some(Duration::from_millis(200)),
            ..request("local", "p")
        })
        .unwrap_err();
    assert!(
        matches!(error, ModelError::Timeout { after, .. } if after == Duration::from_millis(200)),
        "{error}"
    );
}

#[test]
fn malformed_json_body_is_a_response_error() {
    let (url, _seen) = stub(vec![Answer {
        status: 200,
        headers: Vec::new(),
        body: "<html>gateway</html>".into(),
        delay: Duration::ZERO,
    }]);
    let error = openai_models(&url, "")
        .complete(&request("local", "p"))
        .unwrap_err();
    assert!(matches!(error, ModelError::Response { .. }), "{error}");
    assert!(error.to_string().contains("not JSON"), "{error}");
    assert!(error.to_string().contains("<html>gateway"), "{error}");
}

#[test]
fn connection_refused_is_a_retryable_transport_error() {
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let error = openai_models(&format!("http://127.0.0.1:{port}"), "retries = 0")
        .complete(&request("local", "p"))
        .unwrap_err();
    assert!(matches!(error, ModelError::Transport { .. }), "{error}");
    assert!(error.is_retryable());
}

// ---- Command provider ----

fn command_models(script: &str) -> Models {
    models(&format!(
        "[models.cmd]\nprovider = \"command\"\ncommand = [\"sh\", \"-c\", {}, \"argzero\", \"first\"]\n",
        toml_string(script)
    ))
}

fn toml_string(text: &str) -> String {
    Value::String(text.to_string()).to_string()
}

#[test]
fn command_gets_the_prompt_on_stdin_never_in_argv() {
    let models =
        command_models(r#"printf 'ARGV:%s|' "$0" "$@"; printf 'ENV:%s|' "$STAGE_VAR"; cat"#);
    let reply = models
        .complete(&ModelRequest {
            system: Some("be brief".into()),
            temperature: Some(0.9),
            env: vec![("STAGE_VAR".into(), "from-child-env".into())],
            ..request("cmd", "PROMPT-TEXT-123")
        })
        .unwrap();
    assert_eq!(
        reply.text,
        "ARGV:argzero|ARGV:first|ENV:from-child-env|<system>\nbe brief\n</system>\n\nPROMPT-TEXT-123"
    );
    assert_eq!(reply.usage, None);
}

#[test]
fn command_failure_reports_code_and_stderr_tail() {
    let error = command_models("cat >/dev/null; echo 'rate limited, try later' >&2; exit 7")
        .complete(&request("cmd", "p"))
        .unwrap_err();
    assert!(
        matches!(error, ModelError::CommandFailed { code: 7, .. }),
        "{error}"
    );
    assert!(
        error.to_string().contains("rate limited, try later"),
        "{error}"
    );
}

#[test]
fn command_timeout_is_a_timeout() {
    let error = command_models("sleep 5")
        .complete(&ModelRequest {
            timeout: Some(Duration::from_millis(200)),
            ..request("cmd", "p")
        })
        .unwrap_err();
    assert!(matches!(error, ModelError::Timeout { .. }), "{error}");
}

#[test]
fn missing_command_is_not_retryable() {
    let models =
        models("[models.cmd]\nprovider = \"command\"\ncommand = [\"stagegraph-no-such-llm\"]\n");
    let error = models.complete(&request("cmd", "p")).unwrap_err();
    assert!(
        error.to_string().contains("stagegraph-no-such-llm"),
        "{error}"
    );
    assert!(!error.is_retryable());
}

#[test]
fn undefined_alias_suggests_the_near_miss() {
    let error = models("[models.haiku]\nprovider = \"command\"\ncommand = [\"cat\"]\n")
        .complete(&request("haiku2", "p"))
        .unwrap_err();
    assert!(matches!(error, ModelError::UndefinedAlias { .. }));
    assert!(
        error.to_string().contains("did you mean `haiku`?"),
        "{error}"
    );
}

// ---- Layered configuration ----

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, text).unwrap();
    path
}

fn command_alias(alias: &str, program: &str) -> String {
    format!("[models.{alias}]\nprovider = \"command\"\ncommand = [\"{program}\"]\n")
}

#[test]
fn built_in_aliases_use_claude_code() {
    let models = Models::load_from(&ConfigPaths::default()).unwrap();
    assert_eq!(models.identity("haiku").as_deref(), Some("claude:haiku"));
    assert_eq!(models.identity("sonnet").as_deref(), Some("claude:sonnet"));
    assert_eq!(
        models.aliases["haiku"].provider,
        Provider::Claude {
            program: vec!["claude".into()],
            model: "haiku".into(),
            tools: Vec::new(),
            effort: Some("low".into()),
        }
    );
    assert!(models
        .aliases()
        .iter()
        .all(|(_, origin)| origin == "built-in"));
}

#[test]
fn project_overrides_user_overrides_built_in_and_explicit_wins() {
    let dir = tempfile::tempdir().unwrap();
    let user = write(
        dir.path(),
        "home/config.toml",
        &(command_alias("haiku", "user-haiku")
            + &command_alias("sonnet", "user-sonnet")
            + &command_alias("mine", "user-mine")),
    );
    let project = write(
        dir.path(),
        "repo/stagegraph.toml",
        &(command_alias("haiku", "project-haiku") + &command_alias("sonnet", "project-sonnet")),
    );
    let explicit = write(
        dir.path(),
        "ci.toml",
        &command_alias("sonnet", "explicit-sonnet"),
    );
    let paths = ConfigPaths {
        user: Some(user.clone()),
        project: Some(project.clone()),
        explicit: Some(explicit.clone()),
    };
    let models = Models::load_from(&paths).unwrap();
    let origin = |alias: &str| {
        models
            .aliases()
            .into_iter()
            .find(|(name, _)| name == alias)
            .map(|(_, origin)| origin)
            .unwrap()
    };
    assert_eq!(models.identity("haiku").unwrap(), "command:project-haiku");
    assert_eq!(origin("haiku"), project.display().to_string());
    assert_eq!(
        models.identity("sonnet").unwrap(),
        "command:explicit-sonnet"
    );
    assert_eq!(origin("sonnet"), explicit.display().to_string());
    assert_eq!(models.identity("mine").unwrap(), "command:user-mine");
    assert_eq!(origin("mine"), user.display().to_string());

    // Without the project file, the user's haiku shows through.
    let models = Models::load_from(&ConfigPaths {
        project: None,
        ..paths
    })
    .unwrap();
    assert_eq!(models.identity("haiku").unwrap(), "command:user-haiku");
}

#[test]
fn missing_user_and_project_files_are_skipped_but_a_named_file_must_exist() {
    let dir = tempfile::tempdir().unwrap();
    let paths = ConfigPaths {
        user: Some(dir.path().join("nope/config.toml")),
        project: Some(dir.path().join("stagegraph.toml")),
        explicit: None,
    };
    assert!(Models::load_from(&paths).unwrap().defines("haiku"));
    let error = Models::load_from(&ConfigPaths {
        explicit: Some(dir.path().join("missing.toml")),
        ..paths
    })
    .unwrap_err();
    assert!(matches!(error, ModelError::ConfigRead { .. }), "{error}");
    assert!(error.to_string().contains("missing.toml"), "{error}");
}

#[test]
fn models_can_be_shared_across_threads() {
    fn shared<T: Send + Sync + Clone>() {}
    shared::<Models>();
}

#[test]
fn config_paths_from_the_environment_find_the_project_file() {
    let dir = tempfile::tempdir().unwrap();
    let project = write(dir.path(), "stagegraph.toml", &command_alias("x", "y"));
    let deep = dir.path().join("sub");
    std::fs::create_dir_all(&deep).unwrap();
    let paths = ConfigPaths::from_env(&deep);
    assert_eq!(paths.project, Some(project));
    if let Some(user) = paths.user {
        assert!(
            user.ends_with("stagegraph/config.toml"),
            "{}",
            user.display()
        );
    }
}

#[test]
fn anthropic_base_url_may_include_the_version_path() {
    let (url, seen) = stub(vec![answer(200, anthropic_ok("ok"))]);
    anthropic_models(&format!("{url}/v1/"), "")
        .complete(&request("claude", "p"))
        .unwrap();
    assert_eq!(
        seen.recv().unwrap().request_line,
        "POST /v1/messages HTTP/1.1"
    );
}

#[test]
fn a_redirect_is_reported_not_followed() {
    let mut moved = answer(301, json!({"error": {"message": "moved"}}));
    moved
        .headers
        .push(("location", "http://127.0.0.1:1/elsewhere".into()));
    let (url, seen) = stub(vec![moved]);
    let error = anthropic_models(&url, "")
        .complete(&request("claude", "p"))
        .unwrap_err();
    assert!(
        matches!(error, ModelError::Status { status: 301, .. }),
        "{error}"
    );
    assert_eq!(seen.try_iter().count(), 1);
}

#[test]
fn project_config_is_found_in_an_ancestor() {
    let dir = tempfile::tempdir().unwrap();
    let project = write(dir.path(), "stagegraph.toml", &command_alias("x", "y"));
    let deep = dir.path().join("a/b/c");
    std::fs::create_dir_all(&deep).unwrap();
    assert_eq!(find_project_config(&deep), Some(project));
}

#[test]
fn config_errors_name_file_line_column_and_alias() {
    let layers = vec![
        (
            PathBuf::from("/home/u/.config/stagegraph/config.toml"),
            "[models.haiku]\nprovider = \"command\"\ncommand = [\"claude\"]\nmodle = \"x\"\n"
                .to_string(),
        ),
        (
            PathBuf::from("/repo/stagegraph.toml"),
            "[models.big]\nprovider = \"antropic\"\n".to_string(),
        ),
    ];
    let error = Models::from_layers(layers).unwrap_err();
    let ModelError::Config { problems } = &error else {
        panic!("{error}");
    };
    assert_eq!(problems.len(), 2, "{error}");
    assert_eq!(
        (
            problems[0].line,
            problems[0].column,
            problems[0].alias.as_deref()
        ),
        (4, 1, Some("haiku"))
    );
    let message = error.to_string();
    assert!(
        message.contains(
            "/home/u/.config/stagegraph/config.toml:4:1: model `haiku`: unknown field `modle`"
        ),
        "{message}"
    );
    assert!(
        message.contains("/repo/stagegraph.toml:2:12: model `big`: unknown variant `antropic`"),
        "{message}"
    );
}

#[test]
fn syntax_errors_and_unknown_sections_are_located() {
    let error = Models::from_layers(vec![(
        PathBuf::from("a.toml"),
        "[models.x\nprovider = 1\n".into(),
    )])
    .unwrap_err();
    assert!(error.to_string().starts_with("a.toml:1:"), "{error}");

    let error = Models::from_layers(vec![(
        PathBuf::from("b.toml"),
        "\n[model.haiku]\nprovider = \"command\"\n".into(),
    )])
    .unwrap_err();
    assert!(
        error
            .to_string()
            .contains("b.toml:2:2: unknown key `model`; expected `models`"),
        "{error}"
    );
}

#[test]
fn keys_must_fit_the_provider() {
    let check = |toml: &str| {
        Models::from_layers(vec![(PathBuf::from("c.toml"), toml.to_string())])
            .unwrap_err()
            .to_string()
    };
    let message = check("[models.a]\nprovider = \"anthropic\"\nmodel = \"m\"\ncommand = [\"x\"]\n");
    assert!(
        message.contains("c.toml:4:1: model `a`: `command` does not apply to provider `anthropic`"),
        "{message}"
    );
    let message = check("[models]\na = 1\n");
    assert!(
        message.contains("c.toml:2:5: model `a`: must be a table, not an integer"),
        "{message}"
    );
    let message = check("[models.a]\nprovider = \"anthropic\"\n");
    assert!(
        message.contains("c.toml:1:9: model `a`: provider `anthropic` needs `model`"),
        "{message}"
    );
    let message = check("[models.a]\nprovider = \"openai\"\nmodel = \"m\"\n");
    assert!(message.contains("needs `base_url`"), "{message}");
    let message = check("[models.a]\nprovider = \"command\"\ncommand = []\n");
    assert!(message.contains("c.toml:3:11:"), "{message}");
    let message =
        check("[models.a]\nprovider = \"command\"\ncommand = [\"x\"]\ntimeout = \"soon\"\n");
    assert!(
        message.contains("c.toml:4:11:") && message.contains("invalid timeout"),
        "{message}"
    );
    let message = check("[models.a]\nprovider = \"command\"\ncommand = [\"x\"]\nretries = 2\n");
    assert!(message.contains("`retries` does not apply"), "{message}");
}

#[test]
fn alias_settings_are_read() {
    let models = models(
        "[models.a]\nprovider = \"anthropic\"\nmodel = \"m\"\ntimeout = \"2m\"\nretries = 0\n\
         max_tokens = 100\n\n[models.r]\nprovider = \"replay\"\ndir = \"recorded\"\n",
    );
    let alias = &models.aliases["a"];
    assert_eq!(alias.timeout, Duration::from_secs(120));
    assert_eq!(alias.retries, 0);
    assert_eq!(
        alias.provider,
        Provider::Anthropic {
            model: "m".into(),
            api_key_env: "ANTHROPIC_API_KEY".into(),
            base_url: "https://api.anthropic.com".into(),
            max_tokens: 100,
            prompt_cache: true,
        }
    );
    assert_eq!(
        models.identity("a").as_deref(),
        Some("anthropic:m@https://api.anthropic.com")
    );
    // A replay folder is relative to the file that names it; `test.toml` sits in no folder.
    assert_eq!(models.identity("r").as_deref(), Some("replay:recorded"));
    let nested = Models::from_layers(vec![(
        PathBuf::from("/repo/stagegraph.toml"),
        "[models.r]\nprovider = \"replay\"\ndir = \"recorded\"\n".into(),
    )])
    .unwrap();
    assert_eq!(
        nested.identity("r").as_deref(),
        Some("replay:/repo/recorded")
    );
}

#[test]
fn config_schema_describes_the_format() {
    let schema = Models::config_schema();
    let text = schema.to_string();
    assert_eq!(schema["additionalProperties"], json!(false), "{text}");
    assert!(schema["properties"]["models"].is_object(), "{text}");
    assert!(!text.contains("\"null\""), "TOML has no null: {text}");
    for word in [
        "\"openai\"",
        "\"anthropic\"",
        "\"command\"",
        "\"replay\"",
        "api_key_env",
    ] {
        assert!(text.contains(word), "{word} missing from {text}");
    }
    // The schema is itself a valid JSON Schema, and accepts the documented example.
    let validator = jsonschema::validator_for(&schema).unwrap();
    let example: toml::Table = toml::from_str(
        "[models.sonnet]\nprovider = \"anthropic\"\nmodel = \"claude-sonnet-4-5\"\n\
         [models.local]\nprovider = \"openai\"\nbase_url = \"http://127.0.0.1:8080/v1\"\n",
    )
    .unwrap();
    assert!(validator.is_valid(&serde_json::to_value(example).unwrap()));
    let missing_model = json!({"models": {"x": {"provider": "anthropic"}}});
    assert!(!validator.is_valid(&missing_model));
}

// ---- Record and replay ----

/// A command model that counts its runs in `counter` and answers with its stdin.
fn counting_models(counter: &Path) -> Models {
    command_models(&format!(
        "echo run >> {}; printf 'reply to: '; cat",
        counter.display()
    ))
}

fn runs(counter: &Path) -> usize {
    std::fs::read_to_string(counter).map_or(0, |text| text.lines().count())
}

#[test]
fn record_then_replay_gives_the_identical_reply() {
    let dir = tempfile::tempdir().unwrap();
    let counter = dir.path().join("runs");
    let recordings = dir.path().join("recordings");
    let asked = ModelRequest {
        system: Some("sys".into()),
        temperature: Some(0.2),
        max_tokens: Some(10),
        timeout: Some(Duration::from_secs(30)),
        env: vec![("CHILD_ONLY".into(), "env-value-xyz".into())],
        ..request("cmd", "the prompt")
    };

    let mut recorder = counting_models(&counter);
    recorder.set_record(recordings.clone());
    let recorded = recorder.complete(&asked).unwrap();
    assert_eq!(runs(&counter), 1);

    let files: Vec<PathBuf> = std::fs::read_dir(&recordings)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
    let canonical = CanonicalRequest::new(&asked, recorder.identity("cmd").unwrap());
    assert_eq!(
        files[0],
        recordings.join(format!("{}.json", canonical.hash()))
    );
    let text = std::fs::read_to_string(&files[0]).unwrap();
    let stored: Value = serde_json::from_str(&text).unwrap();
    let keys: Vec<&String> = stored["request"].as_object().unwrap().keys().collect();
    assert_eq!(
        keys,
        ["model", "system", "messages", "temperature", "max_tokens"]
    );
    assert_eq!(stored["format"], 2);
    assert_eq!(stored["alias"], "cmd");
    assert!(stored["request"]["model"]
        .as_str()
        .is_some_and(|model| model.starts_with("command:sh -c ")));
    assert_eq!(
        stored["request"]["messages"],
        json!([{"role": "user", "content": "the prompt"}])
    );
    assert_eq!(stored["reply"]["text"], json!(recorded.text));
    assert!(text.contains("\n  \"request\": {"), "not pretty: {text}");
    assert!(
        !text.contains("env-value-xyz") && !text.contains("timeout"),
        "{text}"
    );

    let mut player = counting_models(&counter);
    player.set_replay(recordings);
    let replayed = player.complete(&asked).unwrap();
    assert_eq!(runs(&counter), 1, "replay must not run the command");
    assert_eq!(replayed.text, recorded.text);
    assert_eq!(replayed.usage, recorded.usage);
}

#[test]
fn replay_miss_names_the_hash_and_the_nearest_request() {
    let dir = tempfile::tempdir().unwrap();
    let recordings = dir.path().join("rec");
    let mut recorder = models(
        "[models.a]\nprovider = \"command\"\ncommand = [\"cat\"]\n\
         [models.b]\nprovider = \"command\"\ncommand = [\"cat\", \"-\"]\n",
    );
    recorder.set_record(recordings.clone());
    recorder
        .complete(&request("a", "intro\nkeep this\nold middle\nend"))
        .unwrap();
    // Closer in text but under another alias: the same alias is preferred.
    recorder
        .complete(&request("b", "intro\nkeep this\nnew middle\nend"))
        .unwrap();
    recorder
        .complete(&request("a", "something else entirely"))
        .unwrap();

    let mut player = recorder.clone();
    player.set_replay(recordings.clone());
    let missed = request("a", "intro\nkeep this\nnew middle\nend");
    let error = player.complete(&missed).unwrap_err();
    let hash = CanonicalRequest::new(&missed, player.identity("a").unwrap()).hash();
    let nearest = CanonicalRequest::new(
        &request("a", "intro\nkeep this\nold middle\nend"),
        player.identity("a").unwrap(),
    )
    .hash();
    let message = error.to_string();
    assert!(matches!(error, ModelError::ReplayMiss { .. }), "{message}");
    assert!(!error.is_retryable());
    assert!(
        message.contains(&format!("request {hash} was never recorded")),
        "{message}"
    );
    assert!(
        message.contains(&format!(
            "nearest recording: {nearest}.json (alias `a`), which differs in prompt"
        )),
        "{message}"
    );
    assert!(
        message.contains("- old middle\n    + new middle"),
        "{message}"
    );
}

#[test]
fn replay_from_an_empty_folder_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let mut player = command_models("cat");
    player.set_replay(dir.path().to_path_buf());
    let error = player.complete(&request("cmd", "p")).unwrap_err();
    assert!(error.to_string().contains("holds no recordings"), "{error}");
}

#[test]
fn replay_alias_answers_from_recordings_made_by_another_provider() {
    let dir = tempfile::tempdir().unwrap();
    let recordings = dir.path().join("rec");
    let mut recorder = models("[models.haiku]\nprovider = \"command\"\ncommand = [\"cat\"]\n");
    recorder.set_record(recordings.clone());
    recorder.complete(&request("haiku", "echo me")).unwrap();

    let config = dir.path().join("stagegraph.toml");
    let player = Models::from_layers(vec![(
        config,
        "[models.haiku]\nprovider = \"replay\"\ndir = \"rec\"\n".into(),
    )])
    .unwrap();
    assert_eq!(
        player.complete(&request("haiku", "echo me")).unwrap().text,
        "echo me"
    );
    let error = player.complete(&request("haiku", "echo you")).unwrap_err();
    let message = error.to_string();
    assert!(
        message.contains("no recording in") && message.contains("matches this request"),
        "{message}"
    );
    assert!(message.contains("- echo me\n    + echo you"), "{message}");
}

// ---- Secrets ----

#[test]
fn the_key_appears_nowhere() {
    let dir = tempfile::tempdir().unwrap();
    let recordings = dir.path().join("rec");
    let (url, seen) = stub(vec![
        answer(200, anthropic_ok("fine")),
        // A server that quotes the key back must not get it into an error.
        answer(
            401,
            json!({"error": {"type": "authentication_error", "message": format!("bad key {KEY}")}}),
        ),
    ]);
    let mut models = anthropic_models(&url, "retries = 0");
    models.set_record(recordings.clone());

    models.complete(&request("claude", "first")).unwrap();
    assert_eq!(seen.recv().unwrap().header("x-api-key"), Some(KEY));
    let error = models.complete(&request("claude", "second")).unwrap_err();

    let mut places = vec![
        error.to_string(),
        format!("{error:?}"),
        format!("{models:?}"),
        models.identity("claude").unwrap(),
        format!("{:?}", models.aliases()),
    ];
    for entry in std::fs::read_dir(&recordings).unwrap() {
        places.push(std::fs::read_to_string(entry.unwrap().path()).unwrap());
    }
    assert!(places.len() >= 6, "the recording is missing");
    for place in &places {
        assert!(!place.contains(KEY), "the key leaked into: {place}");
        assert!(
            !place.contains("SECRET-4242"),
            "part of the key leaked into: {place}"
        );
    }
    assert!(error.to_string().contains("bad key [redacted]"), "{error}");
}

// ---- Claude Code CLI, structured outputs, budgets ----

#[test]
fn a_claude_result_gives_text_structured_output_usage_and_cost() {
    let text_only = json!({"type": "result", "subtype": "success", "is_error": false,
        "result": "plain", "usage": {"input_tokens": 3, "output_tokens": 1}, "total_cost_usd": 0.5});
    let answer = claude::read_result("h", &text_only).unwrap();
    assert_eq!(answer.text, "plain");
    assert_eq!(answer.cost_usd, Some(0.5));
    assert_eq!(
        answer.usage,
        Some(Usage {
            input_tokens: 3,
            output_tokens: 1,
            ..Usage::default()
        })
    );
    let structured = json!({"type": "result", "subtype": "success", "is_error": false,
        "result": "ignored", "structured_output": {"a": 1}});
    assert_eq!(
        claude::read_result("h", &structured).unwrap().text,
        "{\"a\":1}"
    );
    let turns = json!({"type": "result", "subtype": "error_max_turns", "is_error": false});
    let error = claude::read_result("h", &turns).unwrap_err();
    assert_eq!(
        error.to_string(),
        "model `h`: claude reported an error: error_max_turns"
    );
    assert!(!error.is_retryable());
    let overloaded = json!({"type": "result", "subtype": "success", "is_error": true,
        "api_error_status": 529, "result": "API Error: 529 Overloaded"});
    let error = claude::read_result("h", &overloaded).unwrap_err();
    assert!(error.is_retryable(), "{error}");
}

#[test]
fn claude_aliases_are_checked_and_name_their_model() {
    let models = models(
        "[models.c]\nprovider = \"claude\"\nmodel = \"sonnet\"\ncommand = [\"/opt/bin/claude\"]\n\
         tools = [\"Read\"]\nmax_concurrency = 2\n",
    );
    assert_eq!(
        models.identity("c").as_deref(),
        Some("claude:sonnet tools=Read")
    );
    assert_eq!(models.max_concurrency("c"), Some(2));
    let Provider::Claude { program, .. } = &models.aliases["c"].provider else {
        panic!("not a claude alias");
    };
    assert_eq!(program, &["/opt/bin/claude".to_string()]);
    let error = Models::from_layers(vec![(
        PathBuf::from("t.toml"),
        "[models.c]\nprovider = \"claude\"\nmodel = \"x\"\nbase_url = \"http://x\"\n".into(),
    )])
    .unwrap_err();
    assert!(
        error
            .to_string()
            .contains("`base_url` does not apply to provider `claude`"),
        "{error}"
    );
    let error = Models::from_layers(vec![(
        PathBuf::from("t.toml"),
        "[models.o]\nprovider = \"openai\"\nbase_url = \"http://x\"\nprice = { input = -1.0, output = 1.0 }\n".into(),
    )])
    .unwrap_err();
    assert!(error.to_string().contains("prices must be"), "{error}");
}

#[test]
fn strict_mode_takes_only_closed_objects_with_every_property_required() {
    let closed = json!({"type": "object", "additionalProperties": false, "required": ["a"],
        "properties": {"a": {"type": "array", "items": {"type": "object",
            "additionalProperties": false, "required": ["b"], "properties": {"b": {"type": "string"}}}}}});
    assert!(openai::strict_compatible(&closed));
    let open =
        json!({"type": "object", "required": ["a"], "properties": {"a": {"type": "string"}}});
    assert!(!openai::strict_compatible(&open));
    let optional = json!({"type": "object", "additionalProperties": false, "required": [],
        "properties": {"a": {"type": "string"}}});
    assert!(!openai::strict_compatible(&optional));
    let nested_open = json!({"type": "object", "additionalProperties": false, "required": ["a"],
        "properties": {"a": {"type": "object", "properties": {}}}});
    assert!(!openai::strict_compatible(&nested_open));
    let unsupported = json!({"type": "object", "additionalProperties": false, "required": [],
        "properties": {}, "patternProperties": {"x": {}}});
    assert!(!openai::strict_compatible(&unsupported));
}

#[test]
fn a_budget_expects_the_average_cost_and_refuses_past_the_limit() {
    let budget = limits::Budget::default();
    budget.admit("m", 1.0).unwrap();
    budget.limit(1.0, "--max-cost");
    budget.limit(2.0, "budget_usd");
    budget.admit("m", 0.5).unwrap();
    budget.spend("m", 0.4);
    budget.admit("m", 0.0).unwrap();
    budget.spend("m", 0.4);
    // Spent 0.8; the average call costs 0.4.
    let error = budget.admit("m", 0.0).unwrap_err();
    assert_eq!(
        error.to_string(),
        "model `m`: not started: the budget of $1 (--max-cost) would be exceeded; $0.8000 \
         spent so far, and this call is expected to cost $0.4000"
    );
    // Another alias has no history: only its lower bound counts.
    budget.admit("n", 0.1).unwrap();
    assert!(budget.admit("n", 0.3).is_err());
    assert!((budget.spent() - 0.8).abs() < 1e-12);
}

#[test]
fn a_throttled_queue_halves_its_limit_once_per_wait_then_recovers_with_answers() {
    let limiter = limits::Limiter::new(Some(8));
    assert_eq!(limiter.limit(), Some(8));
    let mut held: Vec<_> = (0..8)
        .map(|_| limiter.acquire("m", &Cancel::default()).unwrap())
        .collect();
    // One of the eight is refused: it gives its place back, then the limit halves.
    held.pop();
    limiter.throttled(Duration::from_secs(60));
    drop(held);
    assert_eq!(limiter.limit(), Some(4));
    // Refusals within the wait asked for are the same throttling: the limit stays.
    limiter.throttled(Duration::from_secs(60));
    assert_eq!(limiter.limit(), Some(4));
    // Four at once now, no fifth.
    let held: Vec<_> = (0..4)
        .map(|_| limiter.acquire("m", &Cancel::default()).unwrap())
        .collect();
    let fifth = limiter.acquire("m", &Cancel::after(Some(Duration::from_millis(100))));
    assert!(
        matches!(fifth, Err(ModelError::Timeout { .. })),
        "a fifth place was given"
    );
    drop(held);
    // One more place after as many answers as the limit, up to the maximum and no further.
    for limit in 4..8 {
        for _ in 0..limit - 1 {
            limiter.answered();
        }
        assert_eq!(limiter.limit(), Some(limit));
        limiter.answered();
        assert_eq!(limiter.limit(), Some(limit + 1));
    }
    for _ in 0..100 {
        limiter.answered();
    }
    assert_eq!(limiter.limit(), Some(8));
}

#[test]
fn a_throttling_after_the_wait_lowers_the_limit_again_and_never_below_one() {
    let limiter = limits::Limiter::new(Some(4));
    let _held: Vec<_> = (0..3)
        .map(|_| limiter.acquire("m", &Cancel::default()).unwrap())
        .collect();
    // No wait asked: each refusal is a new throttling.
    for expected in [2, 1, 1] {
        limiter.throttled(Duration::ZERO);
        assert_eq!(limiter.limit(), Some(expected));
    }
    // Without a maximum, a refusal limits the alias to half the calls in flight.
    let open = limits::Limiter::new(None);
    assert_eq!(open.limit(), None);
    let held: Vec<_> = (0..5)
        .map(|_| open.acquire("m", &Cancel::default()).unwrap())
        .collect();
    open.throttled(Duration::from_secs(60));
    assert_eq!(
        open.limit(),
        Some(3),
        "six in flight, the refused one with them"
    );
    drop(held);
    for _ in 0..3 {
        open.answered();
    }
    assert_eq!(
        open.limit(),
        Some(4),
        "and it grows again without a ceiling"
    );
}

#[test]
fn the_stage_deadline_ends_a_wait_in_the_queue() {
    let limiter = limits::Limiter::new(Some(1));
    let _held = limiter.acquire("m", &Cancel::default()).unwrap();
    let started = Instant::now();
    let waited = limiter.acquire("m", &Cancel::after(Some(Duration::from_millis(100))));
    assert!(
        matches!(waited, Err(ModelError::Timeout { ref alias, after })
            if alias == "m" && after == Duration::from_millis(100)),
        "{:?}",
        waited.err()
    );
    assert!(started.elapsed() < Duration::from_secs(60));
}

#[test]
fn aliases_naming_the_same_provider_model_share_one_queue() {
    let url = "base_url = \"http://127.0.0.1:9/v1\"";
    let models = models(&format!(
        "[models.a]\nprovider = \"openai\"\nmodel = \"tiny\"\n{url}\nmax_concurrency = 3\n\
         [models.b]\nprovider = \"openai\"\nmodel = \"tiny\"\n{url}\nmax_concurrency = 5\n\
         [models.other]\nprovider = \"openai\"\nmodel = \"big\"\n{url}\n\
         [models.h1]\nprovider = \"claude\"\nmodel = \"haiku\"\n\
         [models.h2]\nprovider = \"claude\"\nmodel = \"haiku\"\ntools = [\"Read\"]\n\
         max_concurrency = 2\n"
    ));
    // The lowest limit of the aliases naming a model holds for all of them.
    assert_eq!(models.max_concurrency("a"), Some(3));
    assert_eq!(models.max_concurrency("b"), Some(3));
    assert_eq!(models.max_concurrency("other"), None);
    assert_eq!(models.max_concurrency("h1"), Some(2));
    let queue = |alias: &str| Arc::clone(&models.limiters[alias]);
    assert!(Arc::ptr_eq(&queue("a"), &queue("b")));
    assert!(Arc::ptr_eq(&queue("h1"), &queue("h2")));
    assert!(!Arc::ptr_eq(&queue("a"), &queue("other")));
    // A rate limit seen through one alias lowers the other's limit; another model's stays.
    queue("a").throttled(Duration::from_secs(30));
    assert_eq!(queue("b").limit(), Some(1));
    assert_eq!(queue("other").limit(), None);
}

#[test]
fn calls_in_flight_reserve_their_estimate_so_together_they_stay_within_the_budget() {
    let budget = Arc::new(limits::Budget::default());
    budget.limit(0.009, "--max-cost");
    // The first call of an alias runs alone: nothing says yet what its calls cost.
    let probe = budget.admit("m", 0.0).unwrap();
    let (tx, rx) = mpsc::channel();
    let waiting = Arc::clone(&budget);
    let second = thread::spawn(move || {
        let reservation = waiting.admit("m", 0.0).map(|_| ()).is_ok();
        tx.send(reservation).ok();
    });
    assert!(
        rx.recv_timeout(Duration::from_millis(200)).is_err(),
        "the second waits"
    );
    probe.settle(Some(0.002));
    assert_eq!(rx.recv_timeout(Duration::from_secs(5)), Ok(true));
    second.join().unwrap();
    // Spent 0.002; each call reserves 0.002: three may be in flight at once, not a fourth.
    let held: Vec<_> = (0..3).map(|_| budget.admit("m", 0.0).unwrap()).collect();
    let error = budget
        .admit("m", 0.0)
        .expect_err("a fourth call in flight is refused");
    assert_eq!(
        error.to_string(),
        "model `m`: not started: the budget of $0.009 (--max-cost) would be exceeded; $0.0020 \
         spent so far, $0.0060 held by 3 calls in flight, and this call is expected to cost \
         $0.0020"
    );
    // A call that fails gives its reserve back; one that costs more than expected counts what
    // it cost.
    let mut held = held.into_iter();
    drop(held.next());
    held.next().unwrap().settle(Some(0.003));
    assert!((budget.spent() - 0.005).abs() < 1e-12);
    // A call is now expected to cost the average, 0.0025: with 0.002 still held it does not
    // fit; once that call ends, one fits and a second beside it does not.
    assert!(budget.admit("m", 0.0).is_err());
    drop(held);
    let fits = budget.admit("m", 0.0).unwrap();
    assert!(budget.admit("m", 0.0).is_err());
    drop(fits);
    // An alias whose calls report no cost waits for no first cost after its first call.
    budget.admit("free", 0.0).unwrap().settle(None);
    let one = budget.admit("free", 0.0).unwrap();
    let two = budget.admit("free", 0.0).unwrap();
    drop((one, two));
}

#[test]
fn a_command_model_is_keyed_without_the_folders_of_its_paths() {
    let key = |toml: &str| {
        let models = models(toml);
        models.resolve("m").unwrap().provider.model_identity()
    };
    // An interpreter's script, a program and a `--flag=path`, checked out in two places.
    let here = key(r#"[models.m]
provider = "command"
command = ["python3", "/home/ada/models/fake.py", "--data=/home/ada/d.json", "-q"]"#);
    let there = key(r#"[models.m]
provider = "command"
command = ["/usr/bin/python3", "ci/models/fake.py", "--data=d.json", "-q"]"#);
    assert_eq!(here, "command:python3 fake.py --data=d.json -q");
    assert_eq!(here, there);
    // A URL is not a path: its host decides what answers.
    let url = key(r#"[models.m]
provider = "command"
command = ["fetcher", "http://127.0.0.1:9/v1"]"#);
    assert_eq!(url, "command:fetcher http://127.0.0.1:9/v1");
    // A script is text, not a path: it is kept whole.
    let script = key(r#"[models.m]
provider = "command"
command = ["sh", "-c", "cat >> /tmp/log; echo ok"]"#);
    assert_eq!(script, "command:sh -c 'cat >> /tmp/log; echo ok'");
    // `model` names what the program stands for, and keys its recordings alone.
    let named = key(r#"[models.m]
provider = "command"
command = ["python3", "/tmp/x/fake.py"]
model = "haiku""#);
    assert_eq!(named, "haiku");
}
