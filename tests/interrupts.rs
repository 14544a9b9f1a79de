//! Built-ins honour interrupts and timeouts as processes do: `fs.hash` of `/dev/zero` never
//! ends by itself, yet a stage `timeout` fails it, and a SIGINT or SIGTERM to the engine ends
//! the run promptly, recorded as interrupted.

use std::time::Duration;

use crate::support::{stage, wait_for, Test};

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
    let mut status = None;
    wait_for("the engine to end", PATIENCE, || {
        status = child.try_wait().expect("wait");
        status.is_some()
    });
    let status = status.expect("ended");
    assert_eq!(status.code(), Some(130), "{status:?}");
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
