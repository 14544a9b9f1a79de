//! Finally stages (`finally = true`): they run once the run has ended, however it ended, see how
//! in `run.status`, `run.exit` and `run.error`, and their failure never changes how it ended.

use serde_json::Value;

use crate::support::{stage, Test};

fn status_of<'v>(record: &'v Value, id: &str) -> &'v str {
    stage(record, id)["status"].as_str().unwrap_or_default()
}

/// A workflow whose `work` stage succeeds, exits early or fails by the input `how`, with a stage
/// after it, and two finally stages that write what they saw.
const ENDINGS: &str = r#"
[workflow]
writes = ["out"]

[inputs.how]
type = "string"
default = "succeed"

[stages.work]
shell = "echo work >> out/order.txt; test {{ inputs.how }} != fail && echo did-{{ inputs.how }}"
exit_if = "inputs.how == 'exit'"
exit_message = "nothing to do"

[stages.later]
after = ["work"]
shell = "echo later >> out/order.txt; echo later"

[stages.report]
finally = true
shell = "echo report >> out/order.txt; printf '%s|%s|%s|%s|%s' {{ run.status }} {{ run.exit.stage if run.exit else 'none' }} {{ run.exit.message if run.exit else 'none' }} {{ 'error' if run.error else 'none' }} {{ stages.later.output | trim if stages.later.output else 'none' }} > out/report.txt"

[stages.after_report]
finally = true
after = ["report"]
shell = "echo after_report >> out/order.txt"
"#;

fn ending(how: &str) -> (Test, Value, i32) {
    let t = Test::new();
    t.write("flow.toml", ENDINGS);
    std::fs::create_dir_all(t.path("out")).expect("out/");
    let out = t.run(["run", "flow.toml", "--input", &format!("how={how}")]);
    let code = out.code.expect("an exit code");
    let record = t.last_run();
    (t, record, code)
}

#[test]
fn a_finally_stage_runs_last_and_sees_a_run_that_succeeded() {
    let (t, record, code) = ending("succeed");
    assert_eq!(code, 0);
    assert_eq!(record["status"], "completed");
    assert_eq!(
        t.read("out/order.txt"),
        "work\nlater\nreport\nafter_report\n",
        "finally stages run after every ordinary stage, in their own order"
    );
    assert_eq!(t.read("out/report.txt"), "succeeded|none|none|none|later");
    assert_eq!(status_of(&record, "report"), "succeeded");
    assert_eq!(status_of(&record, "after_report"), "succeeded");
}

#[test]
fn a_finally_stage_runs_after_an_early_exit_and_sees_it() {
    let (t, record, code) = ending("exit");
    assert_eq!(code, 0);
    assert_eq!(record["status"], "exited");
    assert_eq!(status_of(&record, "later"), "not_run");
    assert_eq!(t.read("out/order.txt"), "work\nreport\nafter_report\n");
    assert_eq!(
        t.read("out/report.txt"),
        "exited|work|nothing to do|none|none",
        "run.exit names the stage and message; a stage that did not run reads as none"
    );
}

#[test]
fn a_finally_stage_runs_after_a_failure_and_sees_the_error() {
    let (t, record, code) = ending("fail");
    assert_eq!(code, 1, "the run failed, and still fails");
    assert_eq!(record["status"], "failed");
    assert!(
        record["error"]
            .as_str()
            .unwrap_or_default()
            .contains("stage `work` failed"),
        "{record:#}"
    );
    assert_eq!(t.read("out/order.txt"), "work\nreport\nafter_report\n");
    assert_eq!(t.read("out/report.txt"), "failed|none|none|error|none");
}

#[test]
fn a_failing_finally_stage_is_recorded_but_does_not_change_how_the_run_ended() {
    let t = Test::new();
    t.write(
        "flow.toml",
        r#"
[stages.work]
command = ["echo", "done"]

[stages.broken]
finally = true
shell = "echo broken >&2; exit 3"

[stages.after_broken]
finally = true
after = ["broken"]
command = ["touch", "after_broken"]

[stages.independent]
finally = true
command = ["touch", "independent"]

[outputs]
result = "{{ stages.work.output | trim }}"
"#,
    );
    let out = t.run(["run", "flow.toml"]);
    out.code(0);
    assert_eq!(out.stdout.trim(), "done", "outputs are printed as usual");
    let record = t.last_run();
    assert_eq!(record["status"], "completed");
    assert!(record["error"].is_null(), "{record:#}");
    assert_eq!(status_of(&record, "broken"), "failed");
    assert!(
        stage(&record, "broken")["error"]
            .as_str()
            .unwrap_or_default()
            .contains("exited with code 3"),
        "{record:#}"
    );
    assert_eq!(status_of(&record, "after_broken"), "not_run");
    assert!(!t.exists("after_broken"));
    assert_eq!(status_of(&record, "independent"), "succeeded");
    assert!(t.exists("independent"));
}

#[test]
fn outputs_may_read_a_finally_stage() {
    let t = Test::new();
    t.write(
        "flow.toml",
        r#"
[stages.work]
command = ["echo", "done"]

[stages.handoff]
finally = true
template = { inline = "handoff: {{ run.status }}" }

[outputs]
line = "{{ stages.handoff.output }}"
"#,
    );
    let out = t.run(["run", "flow.toml"]);
    out.code(0);
    assert_eq!(out.stdout.trim(), "handoff: succeeded");
}

#[test]
fn check_refuses_an_ordinary_stage_that_waits_for_a_finally_one() {
    let t = Test::new();
    t.write(
        "flow.toml",
        r#"
[stages.cleanup]
finally = true
command = ["echo", "bye"]

[stages.work]
after = ["cleanup"]
command = ["echo", "hi"]

[stages.reads]
template = { inline = "{{ stages.cleanup.output }}" }

[stages.ends]
finally = true
command = ["true"]
exit_if = "true"
"#,
    );
    let out = t.run(["check", "flow.toml"]);
    out.code(2);
    out.stderr_has("stage `work` depends on finally stage `cleanup`")
        .stderr_has("stage `reads` depends on finally stage `cleanup`")
        .stderr_has("finally stage `ends` has `exit_if`");
    assert!(out.stderr.contains("flow.toml:7"), "{}", out.stderr);
}

#[test]
fn plan_shows_finally_stages_apart_from_the_waves() {
    let t = Test::new();
    t.write("flow.toml", ENDINGS);
    let out = t.run(["plan", "flow.toml"]);
    out.code(0);
    let text = &out.stdout;
    assert!(text.contains("(4 stages, 2 waves)"), "{text}");
    let finally_at = text
        .find("finally wave 1 (once the run has ended):")
        .expect("a finally section");
    assert!(text[finally_at..].contains("report"), "{text}");
    assert!(!text[..finally_at].contains("report"), "{text}");

    let out = t.run(["plan", "flow.toml", "--format", "json"]);
    out.code(0);
    let plan: Value = serde_json::from_str(&out.stdout).expect("JSON");
    assert_eq!(plan["waves"], serde_json::json!([["work"], ["later"]]));
    assert_eq!(
        plan["finally"],
        serde_json::json!(["report", "after_report"])
    );
    let report = plan["stages"]
        .as_array()
        .and_then(|s| s.iter().find(|s| s["id"] == "report"))
        .expect("report in stages");
    assert_eq!(report["finally"], true);
    assert!(report["wave"].is_null());
}

#[test]
fn a_dry_run_runs_finally_stages_too() {
    let t = Test::new();
    t.write("flow.toml", ENDINGS);
    std::fs::create_dir_all(t.path("out")).expect("out/");
    let out = t.run(["run", "flow.toml", "--dry-run"]);
    out.code(0);
    out.stderr_has("report");
    let record = t.last_run();
    assert_eq!(status_of(&record, "report"), "succeeded");
    assert_eq!(stage(&record, "report")["assumed"], true);
    assert!(!t.exists("out/order.txt"), "a dry-run runs no command");
}

/// A failed run prints what its finally stages say: the outputs that read a finally stage are
/// evaluated however the run ended (with `run.status` and `run.error`), the others are not.
#[test]
fn a_failed_run_prints_the_outputs_that_read_a_finally_stage() {
    let t = Test::new();
    t.write(
        "flow.toml",
        r#"
[stages.work]
shell = "exit 4"

[stages.later]
after = ["work"]
command = ["echo", "later"]

[stages.handoff]
finally = true
template = { inline = "handoff after {{ run.status }}" }

[outputs]
summary = "{{ (stages.later.output or 'no result') ~ '; ' ~ stages.handoff.output ~ ('; failed' if run.error else '') }}"
result = "{{ stages.later.output }}"
"#,
    );
    let out = t.run(["run", "flow.toml"]);
    out.code(1);
    assert_eq!(out.stdout.trim(), "no result; handoff after failed; failed");
    let record = t.last_run();
    assert_eq!(record["status"], "failed");
    assert_eq!(
        record["outputs"],
        serde_json::json!({ "summary": "no result; handoff after failed; failed" }),
        "only the outputs that read a finally stage: {record:#}"
    );
    // Without such an output, a failed run prints nothing on stdout, as before.
    t.write(
        "plain.toml",
        "[stages.work]\nshell = \"exit 4\"\n\n[outputs]\nresult = \"{{ stages.work.output }}\"\n",
    );
    let out = t.run(["run", "plain.toml"]);
    out.code(1);
    assert_eq!(out.stdout, "");
    assert!(t.last_run()["outputs"].is_null());
}
