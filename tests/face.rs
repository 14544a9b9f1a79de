//! The library's face on its own: a program linking stagegraph loads, inspects, plans and runs a
//! workflow and reads its record back through `Engine` and the types it returns, and
//! engine/lib.rs makes nothing else public but the hidden fuzzing entry.

use serde_json::Map;
use stagegraph::{exit, Engine, Plan, RunRecord, RunRequest, RunStatus, Severity, StateDir};

use crate::support::{repo_root, Test};

const FLOW: &str = r#"[workflow]
description = "two stages"

[stages.greet]
command = ["printf", "hello"]

[stages.shout]
shell = "echo {{ stages.greet.output }} loudly"
"#;

#[test]
fn a_workflow_is_loaded_planned_run_and_read_back_through_the_face() {
    let test = Test::new();
    test.write("flow.toml", FLOW);
    let engine = Engine::new(&[], test.root());
    assert_eq!(engine.cwd(), test.root());

    let workflow = engine.load("flow.toml").expect("the workflow checks");
    assert_eq!(workflow.name(), "flow");
    assert!(!workflow.always_exit_zero());
    let stages: Vec<(&str, &str)> = workflow
        .stages()
        .iter()
        .map(|stage| (stage.id(), stage.kind()))
        .collect();
    assert_eq!(stages, [("greet", "command"), ("shout", "shell")]);
    assert_eq!(workflow.stages()[1].after(&workflow), ["greet"]);

    let plan = Plan::new(&workflow);
    assert!(plan.to_text().contains("wave 2:"), "{}", plan.to_text());

    let state = StateDir {
        dir: test.state_dir(),
        explicit: true,
    };
    let request = RunRequest {
        quiet: true,
        ..RunRequest::default()
    };
    let record = engine
        .run(&workflow, Map::new(), &request, &state, None)
        .expect("the run gives a record");
    assert_eq!(record.status(), RunStatus::Completed);

    let runs = state.runs(engine.cwd());
    assert_eq!(runs.len(), 1);
    let (id, dir) = &runs[0];
    assert_eq!(id, record.run_id());
    let read = RunRecord::read(dir, id).expect("the record reads back");
    assert_eq!(read.status(), RunStatus::Completed);
    let output = RunRecord::read_output(dir, id, "shout").expect("shout recorded an output");
    assert_eq!(output.as_str().map(str::trim_end), Some("hello loudly"));
}

#[test]
fn a_workflow_with_an_error_gives_typed_diagnostics() {
    let test = Test::new();
    test.write(
        "broken.toml",
        "[stages.a]\ncommand = [\"echo\"]\nafter = [\"missing\"]\n",
    );
    let engine = Engine::new(&[], test.root());
    let diagnostics = engine
        .load("broken.toml")
        .expect_err("the workflow is invalid");
    let error = diagnostics.iter().find(|d| d.is_error()).expect("an error");
    assert_eq!(error.severity(), Severity::Error);
    assert!(error.message().contains("missing"), "{}", error.message());
    assert_eq!(error.message(), error.kind().to_string());
    assert!(error
        .file()
        .is_some_and(|file| file.ends_with("broken.toml")));
    assert_eq!(exit::INVALID, 2);
}

#[test]
fn lib_rs_makes_only_the_face_public() {
    let lib = std::fs::read_to_string(repo_root().join("engine/lib.rs")).expect("engine/lib.rs");
    let public_modules: Vec<&str> = lib
        .lines()
        .filter_map(|line| line.trim().strip_prefix("pub mod "))
        .collect();
    assert_eq!(public_modules, ["fuzzing;", "exit {"]);
    assert!(
        lib.contains("#[doc(hidden)]\npub mod fuzzing;"),
        "the fuzzing entry is hidden from the docs"
    );
}
