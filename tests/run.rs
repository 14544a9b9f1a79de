//! `stagegraph run`: the fixture workflows under `tests/fixtures/run/workflows/`, each run in a
//! temporary folder and snapshotted (`fixtures_snapshot`): its exit code, its run record
//! (`runs show ID --json`, with what varies from run to run redacted), each stage's output and
//! the files it left. What a single run cannot show (a second run, a held lock, a signal, a
//! process group) is checked by the tests after it.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use serde_json::{json, Value};

use crate::support::{self, stage, statuses, wait_for, Test};

fn test() -> Test {
    Test::with_library("run")
}

/// What a fixture's run needs besides its workflow, from `<name>.setup.json` beside it.
#[derive(Default, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
struct Setup {
    /// Arguments after `run <name>`.
    args: Vec<String>,
    /// Environment variables the run is given.
    env: BTreeMap<String, String>,
    /// Files written in the working folder before the run.
    files: BTreeMap<String, String>,
    /// Texts the run must print on stderr.
    stderr: Vec<String>,
    /// Files the run leaves whose text the snapshot shows (the others by name only).
    show: Vec<String>,
}

impl Setup {
    fn beside(workflow: &Path) -> Setup {
        let path = workflow.with_extension("setup.json");
        match std::fs::read_to_string(&path) {
            Ok(text) => {
                serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
            }
            Err(_) => Setup::default(),
        }
    }
}

/// Fixtures no single run of which says anything, and the test that drives each instead.
const NOT_SNAPSHOTTED: &[(&str, &str)] = &[(
    "interrupt",
    "its long stage runs until a signal ends the run: \
     ctrl_c_interrupts_the_run_and_kills_its_children",
)];

/// Every fixture workflow, run once as its setup says: the exit code, the run record, each
/// finished stage's output, and the files the run left in its working folder. Redacted: the run
/// id, times and durations, the holder's pid and host, the temporary folder, and the
/// fingerprints (they hash the folder the stage runs in).
#[test]
fn fixtures_snapshot() {
    insta::glob!("fixtures/run/workflows/*.toml", |path| {
        let name = path
            .file_stem()
            .and_then(|s| s.to_str())
            .expect("a fixture name");
        if let Some((_, why)) = NOT_SNAPSHOTTED.iter().find(|(n, _)| *n == name) {
            eprintln!("{name} is not snapshotted: {why}");
            return;
        }
        let setup = Setup::beside(path);
        let t = test();
        for (file, text) in &setup.files {
            t.write(file, text);
        }
        let args = ["run".to_string(), name.to_string()]
            .into_iter()
            .chain(setup.args.iter().cloned());
        let mut invocation = t.command(args);
        for (key, value) in &setup.env {
            invocation = invocation.env(key, value);
        }
        let out = invocation.output();
        for text in &setup.stderr {
            out.stderr_has(text);
        }
        let run_id = t.newest_run();
        let record = t.last_run();
        let mut outputs = serde_json::Map::new();
        for (id, status) in statuses(&record) {
            // A dry-run's assumed stage has no output of its own.
            let assumed = stage(&record, &id)["assumed"] == true;
            if matches!(status.as_str(), "succeeded" | "cached") && !assumed {
                let shown = t.run(["runs", "show", &run_id, "--stage", &id]);
                shown.code(0);
                outputs.insert(id, Value::String(shown.stdout));
            }
        }
        let files = left_files(&t);
        let contents: BTreeMap<&String, String> =
            setup.show.iter().map(|file| (file, t.read(file))).collect();
        let snapshot = json!({
            "exit_code": out.code,
            "run": record,
            "stage_outputs": outputs,
            "files": files,
            "file_contents": contents,
        });
        let root = t.root().display().to_string();
        let snapshot: Value = serde_json::from_str(&snapshot.to_string().replace(&root, "[ROOT]"))
            .expect("still JSON");
        insta::assert_json_snapshot!(snapshot, {
            ".run.run_id" => "[run id]",
            ".run.started_at" => "[time]",
            ".run.finished_at" => "[time]",
            ".run.duration_ms" => "[ms]",
            ".run.holder" => "[holder]",
            ".run.stages.*.started_at" => "[time]",
            ".run.stages.*.duration_ms" => "[ms]",
            ".run.stages.*.item_runs[].start_ms" => "[ms]",
            ".run.stages.*.item_runs[].duration_ms" => "[ms]",
            ".run.stages.*.fingerprint" => "[fingerprint]",
            ".run.stages.*.fingerprint_parts.action" => "[hash]",
        });
    });
}

/// The files a run left in its working folder (not the library, not the state folder).
fn left_files(t: &Test) -> Vec<String> {
    let mut files: Vec<String> = walkdir::WalkDir::new(t.root())
        .into_iter()
        .flatten()
        .filter(|entry| entry.file_type().is_file())
        .filter_map(|entry| {
            let relative = entry.path().strip_prefix(t.root()).ok()?;
            let top = relative.components().next()?.as_os_str().to_str()?;
            (!matches!(top, "lib" | "state")).then(|| relative.display().to_string())
        })
        .collect();
    files.sort();
    files
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

/// The newest run's events so far.
fn events(t: &Test) -> Vec<Value> {
    t.run_ids()
        .last()
        .map(|id| t.events(id))
        .unwrap_or_default()
}

fn read_pgid(t: &Test, file: &str) -> i32 {
    t.read(file).trim().parse().expect("a process group id")
}

/// With its `if` false (the fixture's snapshot) `optional` is skipped; with it true it runs.
#[test]
fn a_true_if_runs_the_stage() {
    let t = test();
    t.run(["run", "skip", "--input", "enabled=true"]).code(0);
    assert_eq!(stage_status(&t.last_run(), "optional"), "succeeded");
    assert!(t.exists("optional-ran"));
}

#[test]
fn timeout_kills_the_process_group() {
    let t = test();
    // The stage's shell and the sleep it put in the background would each live 300 s, and the
    // sleep holds the output pipe open: only killing the group lets the run end. 120 s is a
    // bound against hanging, not a claim about how fast the run ends.
    let mut child = t.command(["run", "timeout"]).spawn();
    let code = support::wait_exit(&mut child, "the timed-out run", Duration::from_secs(120));
    assert_eq!(code, Some(1), "stderr:\n{}", t.read("spawned.stderr"));
    let record = t.last_run();
    assert_eq!(stage_status(&record, "slow"), "failed");
    assert!(
        stage_error(&record, "slow").contains("timed out"),
        "{record:#}"
    );
    let pgid = read_pgid(&t, "slow.pgid");
    wait_for(
        "the timed-out group to die",
        Duration::from_secs(30),
        || !group_alive(pgid),
    );
}

/// The fixture's snapshot shows the items' outputs in input order under `--jobs 4`; this
/// checks that no more than `concurrency` of them ran at once.
#[test]
fn foreach_runs_no_more_items_at_once_than_its_concurrency() {
    let t = test();
    t.run(["run", "foreach", "--jobs", "4"]).code(0);
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
fn output_path_writes_only_inside_writes() {
    // Inside `writes`: the fixture's snapshot.
    let t = test();
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
    support::hold_lock(&t.path("busy.lock.d"));
    t.run(["run", "lock"]).code(0);
    let record = t.last_run();
    assert_eq!(status(&record), "exited");
    assert_eq!(stage_status(&record, "work"), "not_run");
    assert!(!t.exists("work-ran"));
    assert!(
        t.exists("busy.lock.d"),
        "a lock it did not take was removed"
    );

    support::release_lock(&t.path("busy.lock.d"));
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

/// Wait for a background run to end; its exit code. The limit is a bound against hanging.
fn finish(child: &mut std::process::Child) -> Option<i32> {
    support::wait_exit(child, "the run", Duration::from_secs(60))
}

fn interrupt(child: &std::process::Child) {
    // SAFETY: kill has no memory-safety preconditions.
    let rc = unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    assert_eq!(rc, 0, "send SIGINT");
}

#[test]
fn held_lock_with_busy_wait_waits_for_its_release() {
    let t = test();
    support::hold_lock(&t.path("wait.lock.d"));
    let mut child = spawn_until(&t, "lock_wait", "waiting for lock");
    // It said it waits; it has started no stage, and goes on only once the lock is let go.
    assert!(!t.exists("work-ran"), "the run did not wait");
    assert!(
        !events(&t).iter().any(|e| e["event"] == "stage_started"),
        "a stage started while the lock was held"
    );
    support::release_lock(&t.path("wait.lock.d"));
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
    support::hold_lock(&t.path("wait.lock.d"));
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
fn ctrl_c_interrupts_the_run_and_kills_its_children() {
    let t = test();
    let mut child = t.command(["run", "interrupt"]).spawn();
    let started_stage = || {
        events(&t)
            .iter()
            .any(|e| e["event"] == "stage_started" && e["stage"] == "long")
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
        Duration::from_secs(60),
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
fn allowed_env_and_child_env_make_a_recursion_guard() {
    // Outside a guarded run, `child` sees the guard set: the fixture's snapshot.
    let t = test();
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
    wait_for("the second stage to start", Duration::from_secs(60), || {
        t.exists("second.pid") && t.read("second.pid").trim().parse::<i32>().is_ok()
    });
    // The record is written by a thread of its own: `first` is kept once run.json says so
    // (its output and events reach their files before every rewrite of run.json).
    wait_for(
        "run.json to show `first` finished",
        Duration::from_secs(60),
        || {
            support::recorded_runs(&t.state_dir())
                .last()
                .is_some_and(|id| {
                    support::read_record(&t.state_dir(), id)["stages"]["first"]["status"]
                        == "succeeded"
                })
        },
    );
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
command = ["sh", "-c", "touch long.started; i=0; while [ ! -e go ] && [ $i -lt 15000 ]; do sleep 0.02; i=$((i+1)); done"]
"#,
    );
    let mut child = t.command(["run", "flow.toml"]).spawn();
    wait_for("the long stage to start", Duration::from_secs(60), || {
        t.exists("long.started")
    });
    // `long` goes on until the test says so: a record showing `b` finished meanwhile was
    // written while it ran, not when it ended.
    let shows_b_done = || {
        t.run_ids().last().is_some_and(|id| {
            let path = t.state_dir().join("runs").join(id).join("run.json");
            std::fs::read_to_string(path)
                .ok()
                .and_then(|text| serde_json::from_str::<Value>(&text).ok())
                .is_some_and(|r| r["stages"]["b"]["status"] == "succeeded")
        })
    };
    let shown = support::poll_until(Duration::from_secs(60), shows_b_done);
    if !shown {
        let _ = child.kill();
        let _ = child.wait();
    }
    assert!(
        shown,
        "run.json does not show `b` finished while `long` runs"
    );
    t.write("go", "");
    assert_eq!(finish(&mut child), Some(0));
    assert_eq!(stage_status(&t.last_run(), "long"), "succeeded");
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
        json!({ "status": "succeeded", "reason": "finished", "by": "" })
    );
}

/// The fixture's snapshot shows the failed item as null and the stage whose every item failed
/// as failed; an output with a failed item is not cached, so the next run tries the items again.
#[test]
fn an_output_with_a_failed_item_is_not_cached() {
    let t = test();
    t.run(["run", "foreach_continue"]).code(0);
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

/// What `check` warns of is said when the workflow runs, in one line with where and how to see
/// the rest; `--quiet` leaves it out.
#[test]
fn a_run_says_once_what_check_warns_of() {
    let t = Test::new();
    t.write(
        "warned.toml",
        "[stages.greet]\nshell = \"echo ${{ 'ada' }}\"\n\n[stages.shout]\ncommand = [\"echo\", \"${{ 'bo' }}\"]\n",
    );
    let out = t.run(["run", "warned.toml"]);
    assert_eq!(out.code, Some(0), "{out:?}");
    let lines: Vec<&str> = out
        .stderr
        .lines()
        .filter(|line| line.starts_with("warning:"))
        .collect();
    assert_eq!(lines.len(), 1, "{}", out.stderr);
    assert!(
        lines[0].contains("warned.toml:2:15: `${{ }}` is GitHub Actions' spelling")
            && lines[0].ends_with("(and 1 more); `stagegraph check warned.toml` shows them"),
        "{}",
        lines[0]
    );
    let quiet = t.run(["run", "warned.toml", "--quiet"]);
    assert!(!quiet.stderr.contains("warning:"), "{}", quiet.stderr);
}

/// A file where the state folder must be is named, with what to do, and the run does not start.
#[test]
fn a_file_in_place_of_the_state_folder_is_named() {
    let t = Test::new();
    t.write("w.toml", "[stages.a]\nshell = \"echo hi > ran\"\n");
    t.write(".stagegraph", "");
    let out = t.command(["run", "w.toml"]).without_state_dir().output();
    out.code(1);
    out.stderr_has("cannot write the run record: ");
    out.stderr_has(".stagegraph is a file where a folder must be; move it away, or keep the records elsewhere with --state-dir");
    assert!(!t.exists("ran"), "the stage ran without a record");
}
