//! Customizing workflows: overlays (`extends`), template overrides along the search path,
//! `show --effective`, `eject`, and the check errors overlays can cause.

use crate::support::{statuses, Test};

/// The base workflow, installed as the user's library (`$XDG_CONFIG_HOME/stagegraph`).
const BASE: &str = r#"
[workflow]
description = "probe and summarize"

[stages.probe]
command = ["echo", "probe"]
timeout = "10s"

[stages.decay_check]
command = ["echo", "decay"]

[stages.summary]
template = "flow/summary.j2"
after = ["probe", "decay_check"]

[outputs]
summary = "{{ stages.summary.output | trim }}"
"#;

fn with_base() -> Test {
    let test = Test::new();
    test.write("config/stagegraph/workflows/flow.toml", BASE);
    test.write(
        "config/stagegraph/templates/flow/summary.j2",
        "base summary: {{ stages.probe.output | trim }}\n",
    );
    test
}

const OVERLAY: &str = r#"
[workflow]
extends = "flow"

[stages.probe]
timeout = "60s"

[stages.decay_check]
disabled = true

[stages.summary]
after = ["probe"]

[stages.notify]
after = ["summary"]
command = ["echo", "notified"]
"#;

#[test]
fn an_overlay_disables_changes_and_adds_stages() {
    let test = with_base();
    test.write(".stagegraph/workflows/flow.toml", OVERLAY);
    test.run(["check", "flow"]).code(0);
    let out = test.run(["run", "flow"]);
    out.code(0);
    assert_eq!(out.stdout.trim(), "base summary: probe");
    let record = test.last_run();
    let ids: Vec<String> = statuses(&record).into_iter().map(|(id, _)| id).collect();
    assert_eq!(ids, ["probe", "summary", "notify"]);
    assert!(
        statuses(&record).iter().all(|(_, s)| s == "succeeded"),
        "{record:#}"
    );

    // The effective view says where each key came from.
    let out = test.run(["show", "flow", "--effective"]);
    out.code(0);
    let timeout = out
        .stdout
        .lines()
        .find(|l| l.starts_with("timeout"))
        .expect("timeout line");
    assert!(
        timeout.contains("60s") && timeout.contains(".stagegraph/workflows/flow.toml:6"),
        "{timeout}"
    );
    let command = out
        .stdout
        .lines()
        .find(|l| l.contains("[\"echo\", \"probe\"]"))
        .expect("probe command");
    assert!(
        command.contains("config/stagegraph/workflows/flow.toml:6"),
        "{command}"
    );
    assert!(!out.stdout.contains("decay_check"), "{}", out.stdout);

    let out = test.run(["show", "flow", "--effective", "--format", "json"]);
    out.code(0);
    let json: serde_json::Value = serde_json::from_str(&out.stdout).expect("json");
    assert_eq!(json["origins"]["/stages/probe/timeout"]["line"], 6);
}

#[test]
fn overriding_one_template_needs_only_the_template() {
    let test = with_base();
    test.write(
        ".stagegraph/templates/flow/summary.j2",
        "team summary: {{ stages.probe.output | trim }}\n",
    );
    let out = test.run(["run", "flow"]);
    out.code(0);
    assert_eq!(out.stdout.trim(), "team summary: probe");
}

#[test]
fn an_overlay_that_swaps_an_action_keeps_the_other_keys() {
    let test = with_base();
    test.write(
        ".stagegraph/workflows/flow.toml",
        "[workflow]\nextends = \"flow\"\n\n[stages.summary]\ncommand = [\"echo\", \"scripted\"]\n",
    );
    let out = test.run(["run", "flow"]);
    out.code(0);
    assert_eq!(out.stdout.trim(), "scripted");
    // `after` from the base still holds: summary ran after both.
    let record = test.last_run();
    assert_eq!(statuses(&record).len(), 3);
}

#[test]
fn overlays_stack() {
    let test = with_base();
    test.write(".stagegraph/workflows/flow.toml", OVERLAY);
    test.write(
        "top/workflows/flow.toml",
        "[workflow]\nextends = \"flow\"\ndescription = \"the top one\"\n\n[stages.notify]\ncommand = [\"echo\", \"top notified\"]\n",
    );
    let top = test.path("top");
    let out = test
        .command(["run", "flow"])
        .env("STAGEGRAPH_PATH", top.to_str().expect("utf-8 path"))
        .output();
    out.code(0);
    assert_eq!(test.stage_output("notify").trim(), "top notified");
    let record = test.last_run();
    assert_eq!(
        record["files"].as_array().map(Vec::len),
        Some(3),
        "{record:#}"
    );
    assert!(record["stages"].get("decay_check").is_none());
}

#[test]
fn overlay_mistakes_point_at_the_overlay_line() {
    let test = with_base();
    test.write(
        ".stagegraph/workflows/flow.toml",
        "[workflow]\nextends = \"flow\"\n\n[stages.decay_check]\ndisabled = true\n",
    );
    // `summary` still lists decay_check in `after`.
    let out = test.run(["check", "flow"]);
    out.code(2);
    // Said at the overlay's `disabled`, naming the base's line that still reads it.
    out.stderr_has(".stagegraph/workflows/flow.toml:5:1");
    out.stderr_has("stage `decay_check` is disabled here, but ");

    test.write(
        ".stagegraph/workflows/flow.toml",
        "[workflow]\nextends = \"flow\"\n\n[stages.probee]\ntimeout = \"5s\"\n",
    );
    let out = test.run(["check", "flow"]);
    out.code(2);
    out.stderr_has("stage `probee` overlays nothing");
    out.stderr_has("did you mean `probe`?");

    test.write(
        ".stagegraph/workflows/flow.toml",
        "[workflow]\nextends = \"nothing\"\n",
    );
    let out = test.run(["check", "flow"]);
    out.code(2);
    out.stderr_has("`extends` names `nothing`");

    test.write(
        ".stagegraph/workflows/flow.toml",
        "[workflow]\nextends = \"loop.toml\"\n",
    );
    test.write(
        ".stagegraph/workflows/loop.toml",
        "[workflow]\nextends = \"flow.toml\"\n",
    );
    let out = test.run(["check", "flow"]);
    out.code(2);
    out.stderr_has("`extends` loops");
}

#[test]
fn eject_copies_and_refuses_to_overwrite() {
    let test = with_base();
    let out = test.run(["eject", "flow"]);
    out.code(0);
    assert_eq!(test.read(".stagegraph/workflows/flow.toml"), BASE);
    assert!(test.exists(".stagegraph/templates/flow/summary.j2"));
    // The ejected copy is what runs now, and it can be edited.
    test.write(
        ".stagegraph/templates/flow/summary.j2",
        "owned: {{ stages.probe.output | trim }}\n",
    );
    let out = test.run(["run", "flow"]);
    out.code(0);
    assert_eq!(out.stdout.trim(), "owned: probe");
    let out = test.run(["eject", "flow"]);
    out.code(2);
    out.stderr_has("`flow` is already this project's: .stagegraph/workflows/flow.toml");
    // The workflow's copy removed and its edited template left: not overwritten.
    std::fs::remove_file(test.path(".stagegraph/workflows/flow.toml")).expect("removed");
    let out = test.run(["eject", "flow"]);
    out.code(2);
    out.stderr_has("refusing to overwrite");
    out.stderr_has("summary.j2");
}

#[test]
fn the_readme_overlay_of_the_shipped_refresh_checks() {
    let test = Test::new();
    test.write(
        ".stagegraph/workflows/refresh.toml",
        r#"[workflow]
extends = "refresh"

[stages.probe]
timeout = "60s"

[stages.decay_check]
disabled = true

[stages.notify]
after = ["summary"]
command = ["notify-send", "refresh finished"]
"#,
    );
    let out = test.run(["check", "refresh"]);
    out.code(0);
    let out = test.run(["plan", "refresh", "--format", "json"]);
    out.code(0);
    let plan: serde_json::Value = serde_json::from_str(&out.stdout).expect("json");
    let ids: Vec<&str> = plan["stages"]
        .as_array()
        .expect("stages")
        .iter()
        .filter_map(|s| s["id"].as_str())
        .collect();
    assert!(
        ids.contains(&"notify") && !ids.contains(&"decay_check"),
        "{ids:?}"
    );
}

/// A workflow of the project itself is not copied into `.stagegraph/`: the copy would come first
/// on the search path, and edits to the file the user owns would change nothing.
#[test]
fn eject_refuses_a_workflow_the_project_already_owns() {
    let test = Test::new();
    test.write("workflows/mine.toml", "[stages.a]\nshell = \"echo mine\"\n");
    let out = test.run(["eject", "mine"]);
    out.code(2);
    out.stderr_has("`mine` is already this project's: workflows/mine.toml");
    out.stderr_has("help: edit it there");
    assert!(!test.exists(".stagegraph/workflows/mine.toml"));
    // What was ejected once is the project's too: told so, not "refusing to overwrite".
    test.write(
        ".stagegraph/workflows/other.toml",
        "[stages.a]\nshell = \"echo other\"\n",
    );
    let out = test.run(["eject", "other"]);
    out.code(2);
    out.stderr_has("`other` is already this project's: .stagegraph/workflows/other.toml");
}
