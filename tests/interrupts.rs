//! Built-ins honour interrupts and timeouts as processes do: `fs.hash` of `/dev/zero` never
//! ends by itself, yet a stage `timeout` fails it, and a SIGINT or SIGTERM to the engine ends
//! the run promptly, recorded as interrupted.

use std::time::Duration;

use crate::support::{stage, wait_exit, wait_for, Test};

const FOREVER: &str = r#"
[workflow]
description = "hash a file that never ends"

[stages.h]
uses = "fs.hash"
with = { path = "/dev/zero" }
"#;

/// Generous, so a loaded machine cannot fail the test; a built-in that ignored the signal
/// would run for ever.
const PATIENCE: Duration = Duration::from_secs(60);

#[test]
fn a_builtin_past_its_timeout_fails_with_a_timeout() {
    let test = Test::new();
    test.write(
        "lib/workflows/forever.toml",
        &format!("{FOREVER}timeout = \"1s\"\n"),
    );
    let out = test.run(["-L", "lib", "run", "forever"]);
    out.code(1);
    out.stderr_has("timed out after 1s");
    let record = test.last_run();
    assert_eq!(record["status"], "failed", "{record:#}");
    assert_eq!(stage(&record, "h")["status"], "failed", "{record:#}");
}

fn interrupted_by(signal: i32) {
    let test = Test::new();
    test.write("lib/workflows/forever.toml", FOREVER);
    let mut child = test.command(["-L", "lib", "run", "forever"]).spawn();
    wait_stage_started(&test);
    let (code, _) = signalled(&mut child, signal, "the signalled run");
    assert_interrupted(&test, code, "h");
    let events = test.read(&format!("state/runs/{}/events.jsonl", test.newest_run()));
    assert!(events.contains("\"run_finished\""), "{events}");
}

/// Wait until the newest run's first stage has started, as its event says.
fn wait_stage_started(test: &Test) {
    wait_for("the stage to start", PATIENCE, || {
        let Some(id) = test.run_ids().pop() else {
            return false;
        };
        test.read_opt(&format!("state/runs/{id}/events.jsonl"))
            .is_some_and(|events| events.contains("\"stage_started\""))
    });
}

#[test]
fn sigint_ends_a_builtin_that_never_ends_by_itself() {
    interrupted_by(libc::SIGINT);
}

#[test]
fn sigterm_ends_a_builtin_that_never_ends_by_itself() {
    interrupted_by(libc::SIGTERM);
}

/// `fs.read` of a FIFO nobody writes to: opening it would wait for a writer, in the system,
/// for ever.
const FIFO: &str = r#"
[workflow]
description = "read a pipe nobody writes to"

[stages.r]
uses = "fs.read"
with = { path = "pipe" }
"#;

fn make_fifo(test: &Test, name: &str) {
    let path = std::ffi::CString::new(test.path(name).into_os_string().into_encoded_bytes())
        .expect("a path without NUL");
    // SAFETY: a NUL-terminated path this test owns.
    let made = unsafe { libc::mkfifo(path.as_ptr(), 0o600) };
    assert_eq!(made, 0, "mkfifo: {}", std::io::Error::last_os_error());
}

#[test]
fn reading_a_fifo_nobody_writes_to_fails_at_the_stage_timeout() {
    let test = Test::new();
    make_fifo(&test, "pipe");
    test.write(
        "lib/workflows/fifo.toml",
        &format!("{FIFO}timeout = \"1s\"\n"),
    );
    let started = std::time::Instant::now();
    let mut child = test.command(["-L", "lib", "run", "fifo"]).spawn();
    let code = wait_exit(
        &mut child,
        "the run past its stage's timeout of 1s",
        PATIENCE,
    );
    eprintln!(
        "fs.read of a FIFO with timeout 1s ended after {:?}",
        started.elapsed()
    );
    assert_eq!(code, Some(1));
    let stderr = test.read("spawned.stderr");
    assert!(stderr.contains("timed out after 1s"), "{stderr}");
    let record = test.last_run();
    assert_eq!(record["status"], "failed", "{record:#}");
    assert_eq!(stage(&record, "r")["status"], "failed", "{record:#}");
}

#[test]
fn sigint_ends_a_read_of_a_fifo_nobody_writes_to() {
    let test = Test::new();
    make_fifo(&test, "pipe");
    test.write("lib/workflows/fifo.toml", FIFO);
    let mut child = test.command(["-L", "lib", "run", "fifo"]).spawn();
    wait_stage_started(&test);
    let (code, _) = signalled(
        &mut child,
        libc::SIGINT,
        "the run interrupted while reading the FIFO",
    );
    assert_interrupted(&test, code, "r");
}

/// A FIFO with a writer is read as before: all the writer wrote, up to its end.
#[test]
fn a_fifo_with_a_writer_is_read_to_its_end() {
    let test = Test::new();
    make_fifo(&test, "pipe");
    test.write("lib/workflows/fifo.toml", FIFO);
    let mut child = test.command(["-L", "lib", "run", "fifo"]).spawn();
    // The writer opens the pipe (waiting for the engine's reader) and writes in two pieces; on
    // a thread, so an engine that never opens it fails the test instead of hanging it.
    let pipe = test.path("pipe");
    std::thread::spawn(move || {
        let mut writer = std::fs::OpenOptions::new()
            .write(true)
            .open(pipe)
            .expect("open the pipe for writing");
        std::io::Write::write_all(&mut writer, b"first ").expect("write");
        std::io::Write::write_all(&mut writer, b"second").expect("write");
    });
    let code = wait_exit(&mut child, "the run reading the FIFO", PATIENCE);
    assert_eq!(code, Some(0));
    assert_eq!(test.stage_output("r"), "first second");
}

/// A server on 127.0.0.1 that hands each connection to `answer`, says so on the returned
/// channel once `answer` is done, and keeps the connection open (unfinished) until the test
/// process ends.
fn holding_server(
    answer: impl Fn(std::net::TcpStream) -> std::net::TcpStream + Send + 'static,
) -> (u16, std::sync::mpsc::Receiver<()>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind loopback");
    let port = listener.local_addr().expect("an address").port();
    let (seen, heard) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut open = Vec::new();
        for stream in listener.incoming() {
            let Ok(stream) = stream else { continue };
            let stream = answer(stream);
            let _ = seen.send(());
            open.push(stream);
        }
    });
    (port, heard)
}

/// A server that reads each request's head and never answers.
fn silent_server() -> (u16, std::sync::mpsc::Receiver<()>) {
    use std::io::Read;
    holding_server(|mut stream| {
        let mut request = Vec::new();
        let mut buf = [0u8; 1024];
        while !request.windows(4).any(|w| w == b"\r\n\r\n") {
            match stream.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => request.extend_from_slice(&buf[..n]),
            }
        }
        stream
    })
}

/// An `http.get` waiting on a server that never answers, its own timeout far away: a SIGINT
/// ends the run at once, not at the request's timeout.
#[test]
fn sigint_ends_an_http_request_in_flight() {
    let (port, heard) = silent_server();
    let test = Test::new();
    test.write(
        "lib/workflows/hang.toml",
        &format!(
            r#"
[workflow]
description = "a request nobody answers"

[stages.get]
uses = "http.get"
with = {{ url = "http://127.0.0.1:{port}/never", timeout = "300s" }}
"#
        ),
    );
    let mut child = test.command(["-L", "lib", "run", "hang"]).spawn();
    heard
        .recv_timeout(PATIENCE)
        .expect("the request to reach the server");
    let (code, _) = signalled(
        &mut child,
        libc::SIGINT,
        "the run interrupted during a request",
    );
    assert_interrupted(&test, code, "get");
}

/// A workflow of one prompt stage asking the model `m`; `extra` goes on the stage.
fn ask_model(extra: &str) -> String {
    format!(
        r#"
[workflow]
description = "ask a model that does not answer"

[stages.ask]
prompt = {{ inline = "Name one concept about retries." }}
model = "m"
{extra}
"#
    )
}

/// A Messages API on 127.0.0.1 that reads each request, says so on the returned channel, and
/// never answers it.
fn unanswering_messages_api() -> (crate::loopback::Server, std::sync::mpsc::Receiver<()>) {
    let (seen, heard) = std::sync::mpsc::channel();
    let seen = std::sync::Mutex::new(seen);
    let server = crate::loopback::Server::start(move |_, _| {
        let _ = seen.lock().expect("the channel").send(());
        // Held, unanswered, until the test process ends.
        loop {
            std::thread::park();
        }
    });
    (server, heard)
}

/// Signal the engine and wait for it to end; its exit code, and how long that took.
fn signalled(child: &mut std::process::Child, signal: i32, what: &str) -> (Option<i32>, Duration) {
    let pid = i32::try_from(child.id()).expect("a pid");
    let sent = std::time::Instant::now();
    // SAFETY: a signal to the child this test started.
    unsafe {
        libc::kill(pid, signal);
    }
    let code = wait_exit(child, what, PATIENCE);
    let took = sent.elapsed();
    eprintln!("the run ended {took:?} after the signal ({what})");
    (code, took)
}

/// A run interrupted while stage `id` waited: exit 130, the run recorded as interrupted, the
/// stage as failed by the interrupt.
fn assert_interrupted(test: &Test, code: Option<i32>, id: &str) {
    assert_eq!(code, Some(130));
    let record = test.last_run();
    assert_eq!(record["status"], "interrupted", "{record:#}");
    let waiting = stage(&record, id);
    assert_eq!(waiting["status"], "failed", "{record:#}");
    assert!(
        waiting["error"]
            .as_str()
            .is_some_and(|e| e.contains("interrupted")),
        "{record:#}"
    );
}

/// A call to a Messages API that never answers, its own timeout 300 s away: a SIGINT ends the
/// run at once, not when the request times out.
#[test]
fn sigint_ends_a_messages_api_call_in_flight() {
    let (api, heard) = unanswering_messages_api();
    let test = Test::new();
    test.write("lib/workflows/ask.toml", &ask_model(""));
    test.write(
        "stagegraph.toml",
        &format!(
            "[models.m]\nprovider = \"anthropic\"\nmodel = \"claude-test\"\nbase_url = \"{}\"\n\
             api_key_env = \"TEST_ANTHROPIC_KEY\"\ntimeout = \"300s\"\n",
            api.url
        ),
    );
    let mut child = test
        .command(["-L", "lib", "run", "ask"])
        .env("TEST_ANTHROPIC_KEY", "sk-test-anthropic")
        .spawn();
    heard
        .recv_timeout(PATIENCE)
        .expect("the request to reach the server");
    let (code, took) = signalled(&mut child, libc::SIGINT, "SIGINT during a model call");
    assert_interrupted(&test, code, "ask");
    assert!(took < Duration::from_secs(30), "{took:?}");
    assert_eq!(
        api.posts().len(),
        1,
        "no second attempt after the interrupt"
    );
}

/// An OpenAI-compatible server that reads each request, sends the head of a success and the
/// start of its body, and never sends the rest.
fn reply_cut_short() -> (u16, std::sync::mpsc::Receiver<()>) {
    use std::io::{BufRead, Read, Write};
    holding_server(|stream| {
        let mut reader = std::io::BufReader::new(stream);
        let mut length = 0;
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line).unwrap_or(0) == 0 || line.trim().is_empty() {
                break;
            }
            if let Some((name, value)) = line.split_once(':') {
                if name.eq_ignore_ascii_case("content-length") {
                    length = value.trim().parse().unwrap_or(0);
                }
            }
        }
        let mut body = vec![0; length];
        let _ = reader.read_exact(&mut body);
        let mut stream = reader.into_inner();
        let _ = stream.write_all(
            b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 4096\r\n\r\n\
              {\"choices\": [{\"message\": {\"role\": \"assistant\", \"content\": \"jit",
        );
        let _ = stream.flush();
        stream
    })
}

/// A reply whose body stops coming half-way: a SIGTERM ends the run at once, not when the
/// request times out.
#[test]
fn sigterm_ends_a_model_reply_cut_short() {
    let (port, heard) = reply_cut_short();
    let test = Test::new();
    test.write("lib/workflows/ask.toml", &ask_model(""));
    test.write(
        "stagegraph.toml",
        &format!(
            "[models.m]\nprovider = \"openai\"\nbase_url = \"http://127.0.0.1:{port}/v1\"\n\
             model = \"tiny\"\ntimeout = \"300s\"\n"
        ),
    );
    let mut child = test.command(["-L", "lib", "run", "ask"]).spawn();
    heard
        .recv_timeout(PATIENCE)
        .expect("the reply to have begun");
    let (code, took) = signalled(&mut child, libc::SIGTERM, "SIGTERM during a reply");
    assert_interrupted(&test, code, "ask");
    assert!(took < Duration::from_secs(30), "{took:?}");
}

/// A server that asks for a minute's wait before each retry: the stage's `timeout` of 2 s ends
/// the call during that wait, and the stage fails with the timeout.
#[test]
fn a_stage_timeout_ends_a_model_call_waiting_to_retry() {
    let api = crate::loopback::Server::start(|_, _| {
        crate::loopback::Reply::json(
            503,
            &serde_json::json!({"error": {"type": "overloaded", "message": "busy"}}),
        )
        .header("retry-after", "60")
    });
    let test = Test::new();
    test.write("lib/workflows/ask.toml", &ask_model("timeout = \"2s\""));
    test.write(
        "stagegraph.toml",
        &format!(
            "[models.m]\nprovider = \"openai\"\nbase_url = \"{}/v1\"\nmodel = \"tiny\"\n\
             timeout = \"300s\"\nretries = 3\n",
            api.url
        ),
    );
    let started = std::time::Instant::now();
    let out = test.run(["-L", "lib", "run", "ask"]);
    let took = started.elapsed();
    eprintln!("the run ended after {took:?}");
    out.code(1);
    out.stderr_has("no reply within 2s");
    assert!(took < Duration::from_secs(30), "{took:?}");
    let record = test.last_run();
    assert_eq!(record["status"], "failed", "{record:#}");
    assert_eq!(stage(&record, "ask")["status"], "failed", "{record:#}");
    assert_eq!(api.posts().len(), 1, "no attempt after the deadline");
}

/// A model that is a local command, with a child of its own in the background: a SIGINT
/// kills its whole process group, and the run ends interrupted.
#[test]
fn sigint_kills_a_command_model_with_its_process_group() {
    let test = Test::new();
    test.write("lib/workflows/ask.toml", &ask_model(""));
    let pids = test.path("pids");
    test.write(
        "stagegraph.toml",
        &format!(
            "[models.m]\nprovider = \"command\"\ntimeout = \"300s\"\ncommand = [\"sh\", \"-c\", \
             \"sleep 300 & echo $$ $! > {}.tmp && mv {0}.tmp {0}; wait\"]\n",
            pids.display()
        ),
    );
    let mut child = test.command(["-L", "lib", "run", "ask"]).spawn();
    wait_for("the model command to start", PATIENCE, || pids.exists());
    let text = std::fs::read_to_string(&pids).expect("the pids");
    let started: Vec<String> = text.split_whitespace().map(str::to_string).collect();
    assert_eq!(started.len(), 2, "{text:?}");
    let (code, took) = signalled(&mut child, libc::SIGINT, "SIGINT during a command model");
    assert_interrupted(&test, code, "ask");
    assert!(took < Duration::from_secs(30), "{took:?}");
    for pid in &started {
        wait_for("the model's processes to be gone", PATIENCE, || {
            !crate::support::running(pid)
        });
    }
}
