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
    // Ready once the stage has started, as its event says.
    wait_for("the stage to start", PATIENCE, || {
        let Some(id) = test.run_ids().pop() else {
            return false;
        };
        test.read_opt(&format!("state/runs/{id}/events.jsonl"))
            .is_some_and(|events| events.contains("\"stage_started\""))
    });
    let pid = i32::try_from(child.id()).expect("a pid");
    // SAFETY: a signal to the child this test started.
    unsafe {
        libc::kill(pid, signal);
    }
    let code = wait_exit(&mut child, "the signalled run", PATIENCE);
    assert_eq!(code, Some(130));
    let record = test.last_run();
    assert_eq!(record["status"], "interrupted", "{record:#}");
    let h = stage(&record, "h");
    assert_eq!(h["status"], "failed", "{record:#}");
    assert!(
        h["error"]
            .as_str()
            .is_some_and(|e| e.contains("interrupted")),
        "{record:#}"
    );
    let events = test.read(&format!("state/runs/{}/events.jsonl", test.newest_run()));
    assert!(events.contains("\"run_finished\""), "{events}");
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
    wait_for("the stage to start", PATIENCE, || {
        let Some(id) = test.run_ids().pop() else {
            return false;
        };
        test.read_opt(&format!("state/runs/{id}/events.jsonl"))
            .is_some_and(|events| events.contains("\"stage_started\""))
    });
    let pid = i32::try_from(child.id()).expect("a pid");
    let sent = std::time::Instant::now();
    // SAFETY: a signal to the child this test started.
    unsafe {
        libc::kill(pid, libc::SIGINT);
    }
    let code = wait_exit(
        &mut child,
        "the run interrupted while reading the FIFO",
        PATIENCE,
    );
    eprintln!("the run ended {:?} after SIGINT", sent.elapsed());
    assert_eq!(code, Some(130));
    let record = test.last_run();
    assert_eq!(record["status"], "interrupted", "{record:#}");
    let r = stage(&record, "r");
    assert_eq!(r["status"], "failed", "{record:#}");
    assert!(
        r["error"]
            .as_str()
            .is_some_and(|e| e.contains("interrupted")),
        "{record:#}"
    );
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

/// A server on 127.0.0.1 that reads each request, says so on the returned channel, and never
/// answers: the connections stay open until the test process ends.
fn silent_server() -> (u16, std::sync::mpsc::Receiver<()>) {
    use std::io::Read;
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind loopback");
    let port = listener.local_addr().expect("an address").port();
    let (seen, heard) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut open = Vec::new();
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut request = Vec::new();
            let mut buf = [0u8; 1024];
            while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                match stream.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => request.extend_from_slice(&buf[..n]),
                }
            }
            let _ = seen.send(());
            // Held, unanswered.
            open.push(stream);
        }
    });
    (port, heard)
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
    let pid = i32::try_from(child.id()).expect("a pid");
    let sent = std::time::Instant::now();
    // SAFETY: a signal to the child this test started.
    unsafe {
        libc::kill(pid, libc::SIGINT);
    }
    let code = wait_exit(&mut child, "the run interrupted during a request", PATIENCE);
    eprintln!("the run ended {:?} after SIGINT", sent.elapsed());
    assert_eq!(code, Some(130));
    let record = test.last_run();
    assert_eq!(record["status"], "interrupted", "{record:#}");
    let get = stage(&record, "get");
    assert_eq!(get["status"], "failed", "{record:#}");
    assert!(
        get["error"]
            .as_str()
            .is_some_and(|e| e.contains("interrupted")),
        "{record:#}"
    );
}
