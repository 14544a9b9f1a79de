//! One case: a temporary project with the case's files, a run of the workflow in it with the
//! case's inputs, given outputs and recordings, then every expectation compared with what the
//! run did. A case's failures are all reported, not only the first.

use std::fmt::Write as _;
use std::path::Path;
use std::time::Instant;

use serde_json::{json, Map, Value};

use super::file::{Case, FileExpect, Suite};
use super::report::{CaseOutcome, CaseReport};
use super::{Recording, TestOptions};
use crate::engine::{Engine, RunRequest, StateDir};
use crate::models::Models;
use crate::run::record::{self, RunRecord};
use crate::run::RunStatus;

/// How much of a value a failure shows.
const SHOWN_CHARS: usize = 400;

/// Run a case as often as `--repeat` says and report it.
pub(crate) fn run(
    engine: &Engine,
    suite: &Suite,
    case: &Case,
    models: &Models,
    options: &TestOptions,
) -> CaseReport {
    let started = Instant::now();
    let mut report = CaseReport {
        file: suite.source.path.clone(),
        line: case.line,
        column: case.column,
        name: case.name.clone(),
        duration: started.elapsed(),
        outcome: CaseOutcome::Passed,
        failures: Vec::new(),
        calls: 0,
        cost_usd: 0.0,
        runs: 0,
        passes: 0,
    };
    if let Some(reason) = &case.skip {
        report.outcome = CaseOutcome::Skipped(reason.clone());
        return report;
    }
    let repeat = options.repeat.max(1);
    let needed = options.min_pass.unwrap_or(repeat).min(repeat);
    for _ in 0..repeat {
        let attempt = once(engine, suite, case, models, options.recording);
        report.runs += 1;
        report.calls += attempt.calls;
        report.cost_usd += attempt.cost_usd;
        if attempt.failures.is_empty() {
            report.passes += 1;
        } else if report.failures.is_empty() {
            report.failures = attempt.failures;
        }
    }
    if report.passes < needed {
        report.outcome = CaseOutcome::Failed;
        if repeat > 1 {
            report.failures.insert(
                0,
                format!(
                    "passed {} of {repeat} runs; --min-pass asks for {needed}",
                    report.passes
                ),
            );
        }
    } else {
        report.failures.clear();
    }
    report.duration = started.elapsed();
    report
}

struct Attempt {
    failures: Vec<String>,
    calls: usize,
    cost_usd: f64,
}

fn once(
    engine: &Engine,
    suite: &Suite,
    case: &Case,
    models: &Models,
    recording: Recording,
) -> Attempt {
    let fail = |message: String| Attempt {
        failures: vec![message],
        calls: 0,
        cost_usd: 0.0,
    };
    let project = match tempfile::Builder::new()
        .prefix("stagegraph-test-")
        .tempdir()
    {
        Ok(project) => project,
        Err(error) => return fail(format!("cannot make the case's project: {error}")),
    };
    let root = project
        .path()
        .canonicalize()
        .unwrap_or_else(|_| project.path().to_path_buf());
    for (path, text) in &case.files {
        let target = root.join(path);
        let written = target
            .parent()
            .map_or(Ok(()), std::fs::create_dir_all)
            .and_then(|()| std::fs::write(&target, text));
        if let Err(error) = written {
            return fail(format!("cannot write {}: {error}", path.display()));
        }
    }
    let mut models = models.clone();
    match recording {
        Recording::Offline => models.set_replay(case.recordings.clone()),
        Recording::Missing => models.set_fill(case.recordings.clone()),
        Recording::All => models.set_record(case.recordings.clone()),
    }
    let in_project = Engine {
        search: engine.search.clone(),
        cwd: root.clone(),
        documents: None,
        kept: None,
        libraries: Vec::new(),
        project: crate::project::Project::find(&root),
    };
    let state = StateDir {
        dir: root.join(".stagegraph"),
        explicit: true,
    };
    let request = RunRequest {
        quiet: true,
        keep_runs: 0,
        keep_runs_size: None,
        answers: case.answers.clone(),
        yes: true,
        given: case.given.clone(),
        env: case.env.clone(),
        // Offline, no alias needs a configuration: the recordings answer for every model.
        replay: (recording == Recording::Offline).then(|| case.recordings.clone()),
        ..RunRequest::default()
    };
    let record = match in_project.run_with_models(
        &suite.workflow,
        case.inputs.clone(),
        &request,
        &state,
        None,
        Some(models),
    ) {
        Ok(record) => record,
        Err(failure) => {
            let mut message = format!("the run did not start: {}", failure.message);
            for diagnostic in &failure.diagnostics {
                let _ = write!(message, "\n  {}", diagnostic.message());
            }
            return fail(message);
        }
    };
    let (calls, cost_usd) = paid(&record);
    let outputs = record::read_outputs(&state.dir, &record.run_id);
    let stage_outputs: Map<String, Value> = outputs
        .into_iter()
        .map(|(stage, line)| (stage, line.output))
        .collect();
    let failures = compare(case, &record, &stage_outputs, &root);
    Attempt {
        failures,
        calls,
        cost_usd,
    }
}

/// The model calls that were not answered from recordings, and what they cost.
fn paid(record: &RunRecord) -> (usize, f64) {
    let mut calls = 0;
    let mut cost = 0.0;
    for stage in record.stages.values() {
        for call in stage
            .details()
            .model_calls
            .iter()
            .filter(|call| !call.replayed)
        {
            calls += 1;
            cost += call.cost_usd.unwrap_or(0.0);
        }
    }
    (calls, cost)
}

/// Every way the run differs from what the case expects.
fn compare(
    case: &Case,
    record: &RunRecord,
    stage_outputs: &Map<String, Value>,
    root: &Path,
) -> Vec<String> {
    let expect = &case.expect;
    let mut failures = Vec::new();
    if record.status != expect.status {
        let mut message = format!(
            "status: expected {}, got {}",
            expect.status.as_str(),
            record.status.as_str()
        );
        let stage_failed = record
            .stages
            .values()
            .any(|stage| stage.details().error.is_some());
        if let Some(error) = record.error.as_ref().filter(|_| !stage_failed) {
            let _ = write!(message, "\n  error: {}", indent(error));
        }
        for (id, stage) in &record.stages {
            if let Some(error) = &stage.details().error {
                let _ = write!(message, "\n  stage `{id}` failed: {}", indent(error));
            }
        }
        if let Some(exit) = &record.exit {
            let _ = write!(
                message,
                "\n  exit{}: {}",
                exit.stage
                    .as_deref()
                    .map(|stage| format!(" at `{stage}`"))
                    .unwrap_or_default(),
                exit.message
            );
        }
        if record
            .stages
            .values()
            .any(|stage| stage.details().error.as_deref().is_some_and(is_miss))
        {
            message.push_str(
                "\n  help: `stagegraph test --record` asks the model the requests that have no recording",
            );
        }
        failures.push(message);
        // A run that failed unexpectedly has no outputs to compare: its error says it all.
        if record.status == RunStatus::Failed {
            return failures;
        }
    }
    if let Some(stage) = &expect.exit_stage {
        let actual = record.exit.as_ref().and_then(|exit| exit.stage.as_deref());
        if actual != Some(stage.as_str()) {
            failures.push(format!(
                "exit_stage: expected `{stage}`, got {}",
                actual.map_or("no exit".to_string(), |s| format!("`{s}`"))
            ));
        }
    }
    if let Some(wanted) = &expect.error {
        let actual = record.error.clone().unwrap_or_default();
        let stage_errors: Vec<&str> = record
            .stages
            .values()
            .filter_map(|stage| stage.details().error.as_deref())
            .collect();
        if !actual.contains(wanted.as_str())
            && !stage_errors.iter().any(|e| e.contains(wanted.as_str()))
        {
            failures.push(format!(
                "error: expected one containing {}, got {}",
                shorten(&json!(wanted)),
                shorten(&json!(actual))
            ));
        }
    }
    let outputs = record.outputs.clone().unwrap_or(Value::Null);
    for (name, wanted) in &expect.outputs {
        let actual = outputs.get(name).cloned().unwrap_or(Value::Null);
        if !same(wanted, &actual) {
            failures.push(format!("outputs.{name}: {}", differ(wanted, &actual)));
        }
    }
    for (path, wanted) in &expect.files {
        let target = root.join(path);
        if let FileExpect::Absent = wanted {
            if target.exists() {
                failures.push(format!("files.{path}: expected nothing there, found it"));
            }
            continue;
        }
        let text = std::fs::read_to_string(&target).ok();
        match (wanted, text) {
            (_, None) => failures.push(format!("files.{path}: expected a file, found none")),
            (FileExpect::Exact(want), Some(text)) if *want != text => {
                failures.push(format!(
                    "files.{path}: {}",
                    differ(&json!(want), &json!(text))
                ));
            }
            (FileExpect::Contains(want), Some(text)) if !text.contains(want.as_str()) => {
                failures.push(format!(
                    "files.{path}: expected it to contain {}, it holds {}",
                    shorten(&json!(want)),
                    shorten(&json!(text))
                ));
            }
            _ => {}
        }
    }
    if !expect.asserts.is_empty() {
        let scope = minijinja::Value::from_serialize(scope(record, stage_outputs, &outputs));
        for (text, compiled) in &expect.asserts {
            match compiled.eval(&scope) {
                Ok(value) if value.is_true() => {}
                Ok(value) => {
                    let shown = serde_json::to_value(&value).unwrap_or(Value::Null);
                    let mut message = format!("assert `{text}` is {}", shorten(&shown));
                    let mut references: Vec<String> = compiled.references().into_iter().collect();
                    references.sort();
                    for reference in references {
                        let shown = lookup(&scope, &reference);
                        let _ = write!(message, "\n  {reference} = {shown}");
                    }
                    failures.push(message);
                }
                Err(error) => failures.push(format!("assert `{text}` fails: {error}")),
            }
        }
    }
    failures
}

/// The scope assertions read: the run, each stage, the outputs and the inputs.
fn scope(record: &RunRecord, stage_outputs: &Map<String, Value>, outputs: &Value) -> Value {
    let mut stages = Map::new();
    for (id, stage) in &record.stages {
        stages.insert(
            id.to_string(),
            json!({
                "status": stage.status.as_str(),
                "output": stage_outputs.get(&**id).cloned().unwrap_or(Value::Null),
                "error": stage.details().error,
                "model_calls": stage.details().model_calls.len(),
            }),
        );
    }
    json!({
        "run": {
            "status": record.status.as_str(),
            "error": record.error,
            "exit": record.exit.as_ref().map(|exit| json!({"stage": exit.stage, "message": exit.message})),
        },
        "stages": stages,
        "outputs": outputs,
        "inputs": record.inputs,
    })
}

/// A dotted path's value in the scope, for a failed assertion's message.
fn lookup(scope: &minijinja::Value, path: &str) -> String {
    let mut value = scope.clone();
    for part in path.split('.') {
        match value.get_attr(part) {
            Ok(next) if !next.is_undefined() => value = next,
            _ => return "(undefined)".to_string(),
        }
    }
    let json = serde_json::to_value(&value).unwrap_or(Value::Null);
    shorten(&json)
}

/// Equal, where a whole number written in TOML equals the same number as a float.
fn same(wanted: &Value, actual: &Value) -> bool {
    match (wanted, actual) {
        (Value::Number(a), Value::Number(b)) => a.as_f64() == b.as_f64(),
        (Value::Array(a), Value::Array(b)) => {
            a.len() == b.len() && a.iter().zip(b).all(|(x, y)| same(x, y))
        }
        (Value::Object(a), Value::Object(b)) => {
            a.len() == b.len() && a.iter().all(|(k, v)| b.get(k).is_some_and(|w| same(v, w)))
        }
        _ => wanted == actual,
    }
}

/// What differs: a line diff for text of several lines, else both values.
fn differ(wanted: &Value, actual: &Value) -> String {
    if let (Value::String(want), Value::String(got)) = (wanted, actual) {
        if want.contains('\n') || got.contains('\n') {
            let diff = similar::TextDiff::from_lines(want.as_str(), got.as_str());
            let mut out = String::from("text differs (- expected, + actual)");
            for change in diff.iter_all_changes() {
                let sign = match change.tag() {
                    similar::ChangeTag::Delete => '-',
                    similar::ChangeTag::Insert => '+',
                    similar::ChangeTag::Equal => ' ',
                };
                let line = change.value().strip_suffix('\n').unwrap_or(change.value());
                let _ = write!(out, "\n  {sign} {line}");
            }
            return out;
        }
    }
    format!(
        "expected {}\n  got      {}",
        shorten(wanted),
        shorten(actual)
    )
}

fn shorten(value: &Value) -> String {
    let text = value.to_string();
    if text.chars().count() <= SHOWN_CHARS {
        return text;
    }
    let cut: String = text.chars().take(SHOWN_CHARS).collect();
    format!("{cut}... ({} bytes in all)", text.len())
}

fn indent(text: &str) -> String {
    text.trim_end().replace('\n', "\n    ")
}

/// Whether a stage's error says a request had no recording.
fn is_miss(error: &str) -> bool {
    error.contains("was never recorded in") || error.contains("no recording in")
}
