//! `stagegraph run`: the fixture workflows under `tests/fixtures/run/workflows/`, each run in a
//! temporary folder and checked through its run record (`runs show last --json`), the files it
//! left and its exit code.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::support::{stage, statuses, wait_for, Test};

fn test() -> Test {
    Test::with_library("run")
}

fn status(record: &Value) -> &str {
    record["status"].as_str().unwrap_or_default()
}

fn stage_status<'v>(record: &'v Value, id: &str) -> &'v str {
    stage(record, id)["status"].as_str().unwrap_or_default()
}

fn stage_error(record: &Value, id: &str) -> String {
    stage(record, id)["error"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// Whether any live (not zombie) process is in the process group.
fn group_alive(pgid: i32) -> bool {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return false;
    };
    entries.flatten().any(|entry| {
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            return false;
        };
        // pid (comm) state ppid pgrp ...; comm may hold spaces and parentheses.
        let Some(after) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
            return false;
        };
        let fields: Vec<&str> = after.split_whitespace().collect();
        let state = fields.first().copied().unwrap_or("Z");
        let pgrp = fields.get(2).and_then(|f| f.parse::<i32>().ok());
        pgrp == Some(pgid) && state != "Z" && state != "X"
    })
}

fn read_pgid(t: &Test, file: &str) -> i32 {
    t.read(file).trim().parse().expect("a process group id")
}

#[test]
fn command_arguments_never_reach_a_shell() {
    let t = test();
    let value = "$(touch pwned); x";
    t.run(["run", "argv", "--input", &format!("value={value}")])
        .code(0);
    assert_eq!(
        t.stage_output("args"),
        format!("[one; rm -rf {value}]\n[{value}]\n"),
        "each argv element is one argument, passed verbatim"
    );
    assert!(!t.exists("pwned"));
    assert_eq!(stage_status(&t.last_run(), "args"), "succeeded");
}

#[test]
fn shell_values_are_quoted_automatically() {
    let t = test();
    let value = r#"it's "$(touch pwned)" `touch pwned` $HOME; touch pwned"#;
    t.run(["run", "shell_quoting", "--input", &format!("value={value}")])
        .code(0);
    assert_eq!(t.stage_output("echo"), value);
    assert_eq!(t.read("quoted.txt"), value);
    assert!(!t.exists("pwned"), "a value became shell syntax");
}

#[test]
fn false_if_skips_and_dependents_still_run() {
    let t = test();
    t.run(["run", "skip"]).code(0);
    let record = t.last_run();
    assert_eq!(status(&record), "completed");
    assert_eq!(stage_status(&record, "optional"), "skipped");
    assert_eq!(stage_status(&record, "dependent"), "succeeded");
    assert_eq!(t.stage_output("dependent"), "optional was skipped\n");
    assert!(!t.exists("optional-ran"));

    t.run(["run", "skip", "--input", "enabled=true"]).code(0);
    assert_eq!(stage_status(&t.last_run(), "optional"), "succeeded");
    assert!(t.exists("optional-ran"));
}

#[test]
fn exit_if_ends_the_run_early_and_successfully() {
    let t = test();
    t.run(["run", "exit_early"])
        .code(0)
        .stderr_has("gate: nothing new");
    let record = t.last_run();
    assert_eq!(status(&record), "exited");
    assert_eq!(
        record["exit"],
        json!({ "stage": "gate", "message": "gate: nothing new" })
    );
    assert_eq!(
        statuses(&record),
        [
            ("gate".to_string(), "succeeded".to_string()),
            ("write".to_string(), "not_run".to_string()),
            ("summary".to_string(), "not_run".to_string()),
        ]
    );
    assert!(!t.exists("write-ran"));
}

#[test]
fn failing_assert_fails_the_stage_and_the_run() {
    let t = test();
    t.run(["run", "assert"])
        .code(1)
        .stderr_has("too few items: 3");
    let record = t.last_run();
    assert_eq!(status(&record), "failed");
    assert_eq!(stage_status(&record, "count"), "failed");
    assert_eq!(stage_error(&record, "count"), "too few items: 3");
    assert_eq!(stage_status(&record, "after"), "not_run");
    assert!(!t.exists("after-ran"));
}

#[test]
fn on_error_continue_goes_on_and_exit_ends_early() {
    let t = test();
    t.run(["run", "on_error"]).code(0);
    let record = t.last_run();
    assert_eq!(status(&record), "exited");
    assert_eq!(stage_status(&record, "tolerated"), "failed");
    assert!(stage_error(&record, "tolerated").contains("broken"));
    assert_eq!(stage_status(&record, "next"), "succeeded");
    assert_eq!(t.stage_output("next"), "tolerated was failed\n");
    assert_eq!(stage_status(&record, "fatal"), "failed");
    assert_eq!(record["exit"]["stage"], "fatal");
    let message = record["exit"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("giving up"), "{message}");
    assert_eq!(stage_status(&record, "never"), "not_run");
    assert!(!t.exists("never-ran"));
}

#[test]
fn retries_until_the_action_succeeds() {
    let t = test();
    t.run(["run", "retries"]).code(0);
    let record = t.last_run();
    assert_eq!(status(&record), "completed");
    assert_eq!(stage(&record, "flaky")["attempts"], 3);
    assert_eq!(t.count("attempts.count"), 3);
    assert_eq!(t.stage_output("flaky"), "succeeded on attempt 3\n");
}

#[test]
fn timeout_kills_the_process_group() {
    let t = test();
    let started = Instant::now();
    t.run(["run", "timeout"]).code(1);
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "the run outlived its timeout: {:?}",
        started.elapsed()
    );
    let record = t.last_run();
    assert_eq!(stage_status(&record, "slow"), "failed");
    assert!(
        stage_error(&record, "slow").contains("timed out"),
        "{record:#}"
    );
    let pgid = read_pgid(&t, "slow.pgid");
    wait_for(
        "the timed-out group to die",
        Duration::from_secs(10),
        || !group_alive(pgid),
    );
}

#[test]
fn foreach_keeps_input_order_under_a_concurrency_cap() {
    let t = test();
    t.run(["run", "foreach", "--jobs", "4"]).code(0);
    let output: Value = serde_json::from_str(&t.stage_output("each")).expect("a JSON list");
    assert_eq!(
        output,
        json!(["0:4\n", "1:1\n", "2:3\n", "3:0\n", "4:2\n", "5:5\n"])
    );
    assert_eq!(stage(&t.last_run(), "each")["items"], 6);
    // Each item logs `start` after it began and `end` before it finished, so the overlap seen in
    // the log can only understate the real one.
    let mut running = 0i32;
    let mut most = 0;
    for line in t.read("overlap.log").lines() {
        running += if line == "start" { 1 } else { -1 };
        most = most.max(running);
    }
    assert!(most <= 2, "{most} items ran at once with concurrency = 2");
    assert_eq!(running, 0);
}

#[test]
fn schema_validation_failure_names_the_schema() {
    let t = test();
    t.run(["run", "schema_failure"])
        .code(1)
        .stderr_has("count.schema.json");
    let record = t.last_run();
    assert_eq!(stage_status(&record, "emit"), "failed");
    let error = stage_error(&record, "emit");
    assert!(
        error.contains("count.schema.json") && error.contains("count"),
        "{error}"
    );
}

#[test]
fn output_path_writes_only_inside_writes() {
    let t = test();
    t.run(["run", "output_path", "--input", "target=out/report.txt"])
        .code(0);
    assert_eq!(t.read("out/report.txt"), "report body\n");

    for outside in ["elsewhere/report.txt", "out/../escaped.txt"] {
        t.run([
            "run",
            "output_path",
            "--input",
            &format!("target={outside}"),
        ])
        .code(1);
        let record = t.last_run();
        assert_eq!(stage_status(&record, "report"), "failed");
        assert!(
            stage_error(&record, "report").contains("outside"),
            "{record:#}"
        );
        assert!(!t.exists(outside), "{outside} was written");
    }
    assert!(
        !t.exists("elsewhere"),
        "a folder was created outside writes"
    );
}

#[test]
fn set_state_is_visible_to_the_next_run() {
    let t = test();
    t.run(["run", "state"]).code(0);
    let first = t.last_run()["run_id"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert_eq!(t.stage_output("remember"), "previous=none\n");
    t.run(["run", "state"]).code(0);
    let second = t.last_run()["run_id"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert_ne!(first, second);
    assert_eq!(t.stage_output("remember"), format!("previous={first}\n"));
    let saved: Value =
        serde_json::from_str(&t.read("state/state/state.json")).expect("state is JSON");
    assert_eq!(saved["x"], second.as_str());
}

#[test]
fn held_lock_with_busy_exit_ends_the_run_early() {
    let t = test();
    std::fs::create_dir(t.path("busy.lock.d")).expect("hold the lock");
    t.run(["run", "lock"]).code(0);
    let record = t.last_run();
    assert_eq!(status(&record), "exited");
    assert_eq!(stage_status(&record, "work"), "not_run");
    assert!(!t.exists("work-ran"));
    assert!(
        t.exists("busy.lock.d"),
        "a lock it did not take was removed"
    );

    std::fs::remove_dir(t.path("busy.lock.d")).expect("release the lock");
    t.run(["run", "lock"]).code(0);
    assert_eq!(status(&t.last_run()), "completed");
    assert!(t.exists("work-ran"));
    assert!(!t.exists("busy.lock.d"), "the run left its lock behind");
}

/// Start `stagegraph run <workflow>` in the background and wait until its stderr shows `line`.
fn spawn_until(t: &Test, workflow: &str, line: &str) -> std::process::Child {
    let child = t.command(["run", workflow]).spawn();
    wait_for(line, Duration::from_secs(30), || {
        t.read_opt("spawned.stderr")
            .is_some_and(|stderr| stderr.contains(line))
    });
    child
}

/// Wait for a background run to end; its exit code.
fn finish(child: &mut std::process::Child) -> Option<i32> {
    let started = Instant::now();
    loop {
        if let Some(status) = child.try_wait().expect("wait for the run") {
            return status.code();
        }
        if started.elapsed() > Duration::from_secs(20) {
            let _ = child.kill();
            panic!("the run did not end within 20 s");
        }
        std::thread::sleep(Duration::from_millis(25));
    }
}

fn interrupt(child: &std::process::Child) {
    // SAFETY: kill has no memory-safety preconditions.
    let rc = unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    assert_eq!(rc, 0, "send SIGINT");
}

#[test]
fn held_lock_with_busy_wait_waits_for_its_release() {
    let t = test();
    std::fs::create_dir(t.path("wait.lock.d")).expect("hold the lock");
    let mut child = spawn_until(&t, "lock_wait", "waiting for lock");
    std::thread::sleep(Duration::from_millis(1500));
    assert!(!t.exists("work-ran"), "the run did not wait");
    std::fs::remove_dir(t.path("wait.lock.d")).expect("release the lock");
    assert_eq!(finish(&mut child), Some(0));
    assert!(t.exists("work-ran"));
    assert_eq!(status(&t.last_run()), "completed");
    let stderr = t.read("spawned.stderr");
    let said = stderr.matches("waiting for lock").count();
    assert!(
        said <= 2,
        "a wait of seconds said so {said} times:\n{stderr}"
    );
}

#[test]
fn ctrl_c_while_waiting_for_a_lock_is_an_interruption() {
    let t = test();
    std::fs::create_dir(t.path("wait.lock.d")).expect("hold the lock");
    let mut child = spawn_until(&t, "lock_wait", "waiting for lock");
    interrupt(&child);
    assert_eq!(finish(&mut child), Some(130));
    let record = t.last_run();
    assert_eq!(status(&record), "interrupted");
    assert_eq!(stage_status(&record, "work"), "not_run");
    assert!(
        t.exists("wait.lock.d"),
        "a lock it did not take was removed"
    );
}

#[test]
fn always_exit_zero_keeps_the_failure_in_the_record() {
    let t = test();
    t.run(["run", "exit_zero"]).code(0);
    let record = t.last_run();
    assert_eq!(status(&record), "failed");
    assert_eq!(stage_status(&record, "broken"), "failed");
}

#[test]
fn typed_input_parse_error_is_invalid() {
    let t = test();
    t.run(["run", "inputs", "--input", "count=three"])
        .code(2)
        .stderr_has("input `count`")
        .stderr_has("three");
    t.run(["run", "inputs"])
        .code(2)
        .stderr_has("needs input `count`");
    t.run(["run", "inputs", "--input", "count=1", "--input", "nmae=x"])
        .code(2)
        .stderr_has("did you mean `name`?");
    // Each failed before its first stage, and its record says why.
    let ids = t.run_ids();
    assert_eq!(ids.len(), 3, "{ids:?}");
    let record = t.last_run();
    assert_eq!(status(&record), "failed");
    assert!(
        record["error"]
            .as_str()
            .unwrap_or_default()
            .contains("did you mean `name`?"),
        "{record:#}"
    );
    assert!(statuses(&record).iter().all(|(_, s)| s == "not_run"));

    t.run(["run", "inputs", "--input", "count=41"]).code(0);
    assert_eq!(t.stage_output("show"), "42 anonymous\n");
}

#[test]
fn inputs_json_from_stdin_ignores_unknown_keys() {
    let t = test();
    t.command(["run", "inputs", "--inputs-json", "-"])
        .stdin(r#"{"count": 4, "name": "bob", "session_id": "abc", "extra": {"x": 1}}"#)
        .output()
        .code(0);
    let record = t.last_run();
    assert_eq!(record["inputs"], json!({ "count": 4, "name": "bob" }));
    assert_eq!(t.stage_output("show"), "5 bob\n");

    t.command(["run", "inputs", "--inputs-json", "-"])
        .stdin(r#"{"count": "four"}"#)
        .output()
        .code(2)
        .stderr_has("input `count`");
}

#[test]
fn missing_program_fails_with_not_found() {
    let t = test();
    t.run(["run", "not_found"]).code(1);
    let record = t.last_run();
    assert_eq!(stage_status(&record, "missing"), "failed");
    let error = stage_error(&record, "missing");
    assert!(
        error.contains("stagegraph-test-no-such-program") && error.contains("not found"),
        "{error}"
    );
}

#[test]
fn ctrl_c_interrupts_the_run_and_kills_its_children() {
    let t = test();
    let mut child = t.command(["run", "interrupt"]).spawn();
    let started_stage = || {
        t.run_ids().iter().any(|id| {
            std::fs::read_to_string(t.state_dir().join("runs").join(id).join("events.jsonl"))
                .unwrap_or_default()
                .lines()
                .filter_map(|line| serde_json::from_str::<Value>(line).ok())
                .any(|e| e["event"] == "stage_started" && e["stage"] == "long")
        })
    };
    wait_for("the long stage to start", Duration::from_secs(30), || {
        started_stage() && t.read_opt("long.pgid").is_some_and(|s| s.ends_with('\n'))
    });
    let pgid = read_pgid(&t, "long.pgid");
    assert!(group_alive(pgid), "the stage's processes are running");

    interrupt(&child);
    let code = finish(&mut child);
    assert_eq!(code, Some(130), "stderr:\n{}", t.read("spawned.stderr"));
    wait_for(
        "the stage's process group to die",
        Duration::from_secs(10),
        || !group_alive(pgid),
    );
    let record = t.last_run();
    assert_eq!(status(&record), "interrupted");
    assert_eq!(stage_status(&record, "after"), "not_run");
    assert!(!t.exists("after-ran"));
}

#[test]
fn cache_reuses_an_identical_execution() {
    let t = test();
    t.run(["run", "cache"]).code(0);
    assert_eq!(stage_status(&t.last_run(), "expensive"), "succeeded");
    t.run(["run", "cache"]).code(0);
    let record = t.last_run();
    assert_eq!(stage_status(&record, "expensive"), "cached");
    assert_eq!(
        t.count("expensive.count"),
        1,
        "the cached command ran again"
    );
    assert_eq!(t.stage_output("expensive"), "result\n");

    t.run(["run", "cache", "--no-cache"]).code(0);
    assert_eq!(stage_status(&t.last_run(), "expensive"), "succeeded");
    assert_eq!(t.count("expensive.count"), 2);
}

#[test]
fn resume_reuses_what_succeeded_and_runs_the_rest() {
    let t = test();
    t.write("fail.flag", "");
    t.run(["run", "resume"]).code(1);
    let failed = t.last_run();
    assert_eq!(stage_status(&failed, "a"), "succeeded");
    assert_eq!(stage_status(&failed, "b"), "failed");
    assert_eq!(stage_status(&failed, "c"), "not_run");
    let failed_id = failed["run_id"].as_str().unwrap_or_default().to_string();

    std::fs::remove_file(t.path("fail.flag")).expect("fix the cause");
    t.run(["resume", "last"]).code(0);
    let resumed = t.last_run();
    assert_eq!(status(&resumed), "completed");
    assert_eq!(resumed["resumed_from"], failed_id.as_str());
    assert_eq!(stage_status(&resumed, "a"), "cached");
    assert_eq!(stage_status(&resumed, "b"), "succeeded");
    assert_eq!(stage_status(&resumed, "c"), "succeeded");
    assert_eq!(t.count("a.count"), 1, "a ran again");
    assert_eq!(t.count("b.count"), 2);
    assert_eq!(t.count("c.count"), 1);
    assert_eq!(t.stage_output("c"), "C-B-A\n");
}

#[test]
fn resume_finds_a_workflow_run_by_its_path() {
    let t = Test::new();
    t.write(
        "flow.toml",
        "[stages.a]\nshell = \"echo run >> a.count; echo A\"\n\n\
         [stages.b]\nshell = \"test ! -e fail.flag && echo {{ stages.a.output | trim }}B\"\n",
    );
    t.write("fail.flag", "");
    t.run(["run", "flow.toml"]).code(1);
    std::fs::remove_file(t.path("fail.flag")).expect("fix the cause");
    t.run(["resume", "last"]).code(0);
    let record = t.last_run();
    assert_eq!(stage_status(&record, "a"), "cached");
    assert_eq!(stage_status(&record, "b"), "succeeded");
    assert_eq!(t.count("a.count"), 1);
}

#[test]
fn dry_run_has_no_side_effects_but_reads() {
    let t = test();
    t.write("input.txt", "read for real");
    let out = t.run(["run", "--dry-run", "dry_run"]);
    out.code(0);
    assert!(!t.exists("made-by-command"), "a command ran in a dry-run");
    assert!(!t.exists("written.txt"), "fs.write wrote in a dry-run");
    assert_eq!(t.stage_output("show"), "read: read for real");
    assert!(
        out.stderr
            .lines()
            .any(|line| line.contains("touch") && line.contains("made-by-command")),
        "the trace shows the command line:\n{}",
        out.stderr
    );
    let record = t.last_run();
    assert_eq!(record["dry_run"], true);
    assert_eq!(stage(&record, "make")["assumed"], true);
    assert_eq!(stage(&record, "write")["assumed"], true);
    assert_eq!(stage(&record, "read")["assumed"], Value::Null);
}

#[test]
fn allowed_env_and_child_env_make_a_recursion_guard() {
    let t = test();
    t.command(["run", "env_guard"])
        .env("SG_TEST_GUARD", "0")
        .output()
        .code(0);
    assert_eq!(status(&t.last_run()), "completed");
    assert_eq!(t.stage_output("child"), "1", "child_env reaches processes");

    t.command(["run", "env_guard"])
        .env("SG_TEST_GUARD", "1")
        .output()
        .code(0)
        .stderr_has("already inside a guarded run");
    let record = t.last_run();
    assert_eq!(status(&record), "exited");
    assert_eq!(record["exit"]["stage"], "guard");
    assert_eq!(stage_status(&record, "child"), "not_run");
}

#[test]
fn printed_values_are_plain_text_not_python_reprs() {
    let t = Test::new();
    t.write(
        "flow.toml",
        r#"
[stages.skipped]
if = "false"
command = ["true"]

[stages.show]
command = ["printf", "%s|%s|%s|%s", "{{ stages.skipped.output }}", "{{ true }}", "{{ [1, none, 'a'] }}", "{{ {'k': false} }}"]
"#,
    );
    t.run(["run", "flow.toml"]).code(0);
    assert_eq!(t.stage_output("show"), r#"|true|[1,null,"a"]|{"k":false}"#);
}

#[test]
fn a_failed_assertion_leaves_no_artifact() {
    let t = Test::new();
    t.write(
        "flow.toml",
        r#"
[workflow]
writes = ["out"]

[stages.make]
command = ["echo", "too short"]
output = { path = "out/artifact.txt" }
assert = [{ that = "output | length > 100", message = "the artifact is too short" }]
"#,
    );
    t.run(["run", "flow.toml"])
        .code(1)
        .stderr_has("the artifact is too short");
    assert!(
        !t.exists("out/artifact.txt"),
        "an artifact that failed its checks must not be written"
    );
}

#[test]
fn resume_reuses_work_but_observes_the_world_afresh() {
    let t = Test::new();
    t.write("note.txt", "one");
    t.write("fail", "");
    t.write(
        "flow.toml",
        r#"
[stages.read]
uses = "fs.read"
with = { path = "note.txt" }

[stages.expensive]
command = ["sh", "-c", "echo run >> calls.txt; echo work"]

[stages.use]
command = ["sh", "-c", "test ! -e fail && echo {{ stages.read.output }}-{{ stages.expensive.output | trim }}"]
"#,
    );
    t.run(["run", "flow.toml"]).code(1);
    assert_eq!(t.count("calls.txt"), 1);
    std::fs::remove_file(t.path("fail")).expect("remove the flag");
    t.write("note.txt", "two");
    t.run(["resume", "last"]).code(0);
    let record = t.last_run();
    assert_eq!(
        stage_status(&record, "read"),
        "succeeded",
        "observations run again"
    );
    assert_eq!(
        stage_status(&record, "expensive"),
        "cached",
        "work is reused"
    );
    assert_eq!(t.count("calls.txt"), 1);
    assert_eq!(t.stage_output("use").trim(), "two-work");
}

#[test]
fn a_later_stage_can_read_why_an_earlier_one_failed() {
    let t = Test::new();
    t.write(
        "flow.toml",
        r#"
[stages.probe]
command = ["sh", "-c", "echo 'upstream unreachable' >&2; exit 7"]
on_error = "continue"

[stages.report]
template = { inline = "{{ stages.probe.status }}: {{ stages.probe.error }}" }
"#,
    );
    t.run(["run", "flow.toml"]).code(0);
    let report = t.stage_output("report");
    assert!(report.starts_with("failed: "), "{report}");
    assert!(
        report.contains("exited with code 7") && report.contains("upstream unreachable"),
        "{report}"
    );
}

#[test]
fn a_run_killed_outright_can_be_resumed() {
    let t = Test::new();
    t.write(
        "flow.toml",
        r#"
[stages.first]
command = ["sh", "-c", "echo ran >> calls.txt; echo done"]

[stages.second]
after = ["first"]
command = ["sh", "-c", "if [ -e hang ]; then echo $$ > second.pid; exec sleep 30; fi; echo finished"]
"#,
    );
    t.write("hang", "");
    let mut child = t.command(["run", "flow.toml"]).spawn();
    // The file exists before the shell has written the pid into it: wait for the pid.
    wait_for("the second stage to start", Duration::from_secs(20), || {
        t.exists("second.pid") && t.read("second.pid").trim().parse::<i32>().is_ok()
    });
    // SIGKILL: no handler runs, nothing is cleaned up; the record must still be usable.
    child.kill().expect("kill stagegraph");
    let _ = child.wait();
    let pid: i32 = t.read("second.pid").trim().parse().expect("a pid");
    unsafe {
        libc::kill(pid, libc::SIGKILL);
    }
    std::fs::remove_file(t.path("hang")).expect("unhang");
    t.run(["resume", "last"]).code(0);
    let record = t.last_run();
    assert_eq!(stage_status(&record, "first"), "cached", "{record:#}");
    assert_eq!(stage_status(&record, "second"), "succeeded");
    assert_eq!(
        t.count("calls.txt"),
        1,
        "the finished stage is not run again"
    );
}

/// Quick stages end within the record's rewrite spacing, so their rewrite is held back; it
/// must still land while a long stage runs, not when the long stage ends.
#[test]
fn a_held_back_record_lands_while_a_long_stage_runs() {
    let t = Test::new();
    t.write(
        "flow.toml",
        r#"
[stages.a]
command = ["true"]

[stages.b]
after = ["a"]
command = ["true"]

[stages.long]
after = ["b"]
command = ["sh", "-c", "exec sleep 8"]
"#,
    );
    let mut child = t.command(["run", "flow.toml"]).spawn();
    let shows_b_done = || {
        t.run_ids().last().is_some_and(|id| {
            let path = t.state_dir().join("runs").join(id).join("run.json");
            std::fs::read_to_string(path)
                .ok()
                .and_then(|text| serde_json::from_str::<Value>(&text).ok())
                .is_some_and(|r| r["stages"]["b"]["status"] == "succeeded")
        })
    };
    let shown = (0..100).any(|_| {
        std::thread::sleep(Duration::from_millis(50));
        shows_b_done()
    });
    let _ = child.kill();
    let _ = child.wait();
    assert!(
        shown,
        "run.json still does not show `b` finished 5 s into `long`"
    );
}

#[test]
fn outputs_see_how_the_run_ended() {
    let t = Test::new();
    t.write(
        "flow.toml",
        r#"
[inputs.stop]
type = "boolean"
default = false

[stages.gate]
template = { inline = "checked" }
exit_if = "inputs.stop"
exit_message = "nothing to do"

[stages.work]
after = ["gate"]
template = { inline = "done" }

[outputs]
status = "{{ run.status }}"
reason = "{{ run.exit.message if run.exit else 'finished' }}"
by = "{{ run.exit.stage if run.exit else '' }}"
"#,
    );
    t.run(["run", "flow.toml", "--input", "stop=true"]).code(0);
    assert_eq!(
        t.last_run()["outputs"],
        json!({ "status": "exited", "reason": "nothing to do", "by": "gate" })
    );
    t.run(["run", "flow.toml"]).code(0);
    assert_eq!(
        t.last_run()["outputs"],
        json!({ "status": "completed", "reason": "finished", "by": "" })
    );
}

#[test]
fn a_failed_item_is_null_when_items_continue() {
    let t = test();
    t.run(["run", "foreach_continue"])
        .code(0)
        .stderr_has("item 1 failed");
    let record = t.last_run();
    let each = stage(&record, "each");
    assert_eq!(each["status"], "succeeded");
    assert_eq!(
        (each["items"].clone(), each["failed_items"].clone()),
        (json!(3), json!(1))
    );
    let output: Value = serde_json::from_str(&t.stage_output("each")).expect("a JSON list");
    assert_eq!(output, json!([1, null, 3]));
    assert_eq!(record["outputs"]["answered"], 2);
    // Every item failing is the stage failing.
    assert_eq!(stage_status(&record, "none_left"), "failed");
    assert!(stage_error(&record, "none_left").contains("all 2 items failed"));

    // An output with a failed item is not cached: the next run tries the items again.
    t.run(["run", "foreach_continue"]).code(0);
    assert_eq!(stage_status(&t.last_run(), "each"), "succeeded");
}

#[test]
fn an_edited_workflow_runs_as_edited_though_its_document_is_kept() {
    let t = Test::new();
    let workflow = |word: &str| {
        format!("[workflow]\ndescription = \"x\"\n\n[stages.say]\ntemplate = {{ inline = \"{word}\" }}\n")
    };
    t.write("w.toml", &workflow("first"));
    t.run(["run", "./w.toml"]).code(0);
    assert_eq!(t.stage_output("say"), "first");
    let kept: Vec<_> = std::fs::read_dir(t.state_dir().join("cache").join("documents"))
        .expect("run keeps the parsed document")
        .flatten()
        .collect();
    assert_eq!(kept.len(), 1);

    // Same length, so nothing but the text's hash tells the two apart.
    t.write("w.toml", &workflow("again"));
    t.run(["run", "./w.toml"]).code(0);
    assert_eq!(t.stage_output("say"), "again");
    // An edit that breaks the file is reported from the file, not hidden by the kept document.
    t.write("w.toml", "[stages.say\n");
    let out = t.run(["run", "./w.toml"]);
    out.code(2);
    assert!(out.stderr.contains("w.toml:1"), "{}", out.stderr);

    // `check` leaves the state folder alone.
    let fresh = Test::new();
    fresh.write("w.toml", &workflow("first"));
    fresh.run(["check", "./w.toml"]).code(0);
    assert!(!fresh.state_dir().join("cache").exists());
}

/// A kept document is read straight as the typed workflow; what `check` says of the workflow
/// (warnings, errors, the format's bounds) and where, is the same as when it is parsed.
#[test]
fn a_kept_document_is_checked_as_the_parsed_one() {
    let t = Test::new();
    let cases = [
        // A warning (which `run` does not show), and the run goes on.
        (
            "warn.toml",
            "[stages.a]\nshell = \"echo a\"\nexit_message = \"done\"\n",
            0,
        ),
        // An error at a key.
        (
            "stray.toml",
            "[stages.a]\ntemplate = { inline = \"x\" }\nmodel = \"m\"\n",
            2,
        ),
        // Outside the format's bounds: the document is needed to explain it.
        (
            "bounds.toml",
            "[stages.a]\nforeach = \"[1, 2]\"\nconcurrency = 0\ntemplate = { inline = \"x\" }\n",
            2,
        ),
    ];
    for (file, text, code) in cases {
        t.write(file, text);
        let parsed = t.run(["run", &format!("./{file}")]);
        parsed.code(code);
        let kept = t.run(["run", &format!("./{file}")]);
        kept.code(code);
        let diagnostics = |stderr: &str| -> Vec<String> {
            stderr
                .lines()
                .filter(|l| !l.starts_with("run ") && !l.contains(" a "))
                .map(String::from)
                .collect()
        };
        assert_eq!(
            diagnostics(&kept.stderr),
            diagnostics(&parsed.stderr),
            "{file}"
        );
        assert!(
            code == 0 || kept.stderr.contains(&format!("{file}:")),
            "{file}: located in the file:\n{}",
            kept.stderr
        );
    }
}

/// Forty independent stages: on a rerun they are ready together and checked for reuse as one
/// batch on the workers. What the batch finds is taken in order: the stage that ends the run
/// stops it where it stands in that order, and the stages the batch found to need work run.
#[test]
fn stages_ready_together_are_reused_and_stopped_in_order() {
    let t = Test::new();
    let mut flow = String::from("[inputs.stop]\ntype = \"boolean\"\ndefault = false\n\n");
    for i in 0..40 {
        let cache = if i % 10 == 3 { "" } else { "cache = true\n" };
        let exit = if i == 20 {
            "exit_if = \"inputs.stop\"\n"
        } else {
            ""
        };
        flow.push_str(&format!(
            "[stages.s{i:02}]\nshell = \"echo {i} >> ran.log; echo {i}\"\n{cache}{exit}\n"
        ));
    }
    t.write("flow.toml", &flow);
    t.run(["run", "flow.toml", "--jobs", "2"]).code(0);
    assert_eq!(t.read("ran.log").lines().count(), 40);

    t.write("ran.log", "");
    t.run(["run", "flow.toml", "--jobs", "2"]).code(0);
    let record = t.last_run();
    for (id, status) in statuses(&record) {
        let expected = if id.ends_with('3') {
            "succeeded"
        } else {
            "cached"
        };
        assert_eq!(status, expected, "{id}");
    }
    let mut ran: Vec<String> = t.read("ran.log").lines().map(String::from).collect();
    ran.sort();
    assert_eq!(ran, ["13", "23", "3", "33"]);

    // A cached stage ends the run: those after it in the batch do not start.
    t.run(["run", "flow.toml", "--jobs", "2", "--input", "stop=true"])
        .code(0);
    let record = t.last_run();
    assert_eq!(status(&record), "exited");
    assert_eq!(record["exit"]["stage"], "s20");
    for (id, status) in statuses(&record) {
        let n: usize = id[1..].parse().expect("a stage number");
        let expected = match n {
            21.. => "not_run",
            3 | 13 => "succeeded",
            _ => "cached",
        };
        assert_eq!(status, expected, "{id}");
    }
}

/// A batch computes ahead of the stages' turns: a stage that writes a file is left to its turn,
/// so a run that ends before it writes nothing for it.
#[test]
fn a_stage_after_an_early_exit_writes_no_file_though_it_was_ready() {
    let t = Test::new();
    let mut flow = String::from("[workflow]\nwrites = [\"out\"]\n\n");
    for i in 0..60 {
        let exit = if i == 40 { "exit_if = \"true\"\n" } else { "" };
        let path = if i >= 50 {
            format!("output = {{ path = \"out/s{i}.txt\" }}\n")
        } else {
            String::new()
        };
        flow.push_str(&format!(
            "[stages.s{i:02}]\ntemplate = {{ inline = \"{i}\" }}\ncache = true\n{exit}{path}\n"
        ));
    }
    t.write("flow.toml", &flow);
    for _ in 0..2 {
        t.run(["run", "flow.toml", "--jobs", "2"]).code(0);
        let record = t.last_run();
        assert_eq!(record["exit"]["stage"], "s40");
        assert_eq!(stage_status(&record, "s39"), stage_status(&record, "s00"));
        assert_eq!(stage_status(&record, "s41"), "not_run");
        assert_eq!(stage_status(&record, "s55"), "not_run");
        assert!(
            !t.exists("out"),
            "a stage that did not start wrote its output.path"
        );
    }
}

/// Template stages ready together render on the workers; each sees its own item of the scope
/// and a failing one fails the run like it would alone.
#[test]
fn template_stages_ready_together_render_as_they_would_alone() {
    let t = Test::new();
    let mut flow = String::new();
    for i in 0..64 {
        flow.push_str(&format!(
            "[stages.t{i:02}]\ntemplate = {{ inline = \"{{{{ {i} * 2 }}}}\" }}\n\n"
        ));
    }
    flow.push_str("[stages.sum]\nafter = [");
    flow.push_str(
        &(0..64)
            .map(|i| format!("\"t{i:02}\""))
            .collect::<Vec<_>>()
            .join(", "),
    );
    flow.push_str(
        "]\ntemplate = { inline = \"{{ stages.t07.output }} {{ stages.t63.output }}\" }\n",
    );
    t.write("flow.toml", &flow);
    t.run(["run", "flow.toml", "--jobs", "2"]).code(0);
    assert_eq!(t.stage_output("sum"), "14 126");
    assert_eq!(t.stage_output("t31"), "62");

    t.write(
        "flow.toml",
        // A filter that exists but fails on this value: an unknown one is a check error now.
        &flow.replace("{{ 40 * 2 }}", "{{ 'not json' | from_json }}"),
    );
    t.run(["run", "flow.toml", "--jobs", "2"]).code(1);
    let record = t.last_run();
    assert_eq!(status(&record), "failed");
    assert_eq!(stage_status(&record, "t40"), "failed");
    assert_eq!(stage_status(&record, "sum"), "not_run");
}
