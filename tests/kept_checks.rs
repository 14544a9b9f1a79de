//! Kept checks: a run of a workflow whose files are unchanged reads back the workflow its last
//! check built (`cache/checks/`); any file the check read that changed, appeared or went is
//! checked again.

use serde_json::Value;

use crate::support::{stage, Test};

const KEPT: &str = "its check kept";

/// A workflow of most of what a stage can say: inputs, guards, assertions, a loop, a cache
/// key, a schema file, a template file with a partial, a built-in with a table of arguments,
/// outputs and a lock.
const WIDE: &str = r#"
[workflow]
description = "many kinds of stage"
writes = ["out"]
lock = { path = "out/w.lock" }

[inputs.topic]
type = "string"
default = "retries"

[inputs.n]
type = "integer"
default = 2

[stages.say]
command = ["printf", "about {{ inputs.topic }}"]
cache = { key = "{{ inputs.topic }}", ttl = "1h" }

[stages.facts]
shell = "printf '{\"topic\": \"%s\", \"n\": %s}' {{ inputs.topic }} {{ inputs.n }}"
output = { format = "json", schema = "facts.json" }
assert = [{ that = "output.n > 0", message = "n is positive" }]

[stages.each]
foreach = "range(inputs.n)"
command = ["echo", "item {{ item }} of {{ stages.facts.output.topic }}"]
output = { format = "lines" }

[stages.skipped]
if = "inputs.n > 5"
command = ["echo", "never"]

[stages.page]
template = "page.j2"

[stages.kept]
uses = "json.write"
with = { path = "out/facts.json", value = { facts = "{{ stages.facts.output }}", n = 3, tags = ["a", "{{ inputs.topic }}"] } }

[stages.gate]
after = ["page"]
command = ["true"]
exit_if = "inputs.n < 0"
exit_message = "negative"

[outputs]
page = "{{ stages.page.output }}"
"#;

fn project() -> Test {
    let t = Test::new();
    t.write("stagegraph.toml", "");
    t.write("workflows/wide.toml", WIDE);
    t.write(
        "schemas/facts.json",
        r#"{"type": "object", "required": ["topic", "n"], "properties": {"topic": {"type": "string"}, "n": {"type": "integer"}}}"#,
    );
    t.write(
        "templates/page.j2",
        "{% include \"part.j2\" %}: {{ stages.say.output }} x{{ stages.each.output | length }}\n",
    );
    t.write("templates/part.j2", "page");
    t
}

/// Each stage's status, fingerprint and output in the newest run.
fn stages(t: &Test) -> Vec<(String, Value, Value, Value)> {
    let record = t.last_run();
    let id = t.newest_run();
    let mut out: Vec<_> = record["stages"]
        .as_object()
        .expect("stages")
        .iter()
        .map(|(name, s)| {
            let shown = t.run(["runs", "show", &id, "--stage", name]);
            (
                name.clone(),
                s["status"].clone(),
                s["fingerprint"].clone(),
                Value::String(shown.stdout),
            )
        })
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

#[test]
fn a_rerun_reads_the_check_back_and_runs_exactly_as_a_checked_one() {
    let t = project();
    let first = t.run(["run", "wide", "-v"]);
    first.code(0);
    assert!(!first.stderr.contains(KEPT), "{}", first.stderr);
    let checked = stages(&t);
    let second = t.run(["run", "wide", "-v"]);
    second.code(0);
    second.stderr_has(KEPT);
    assert_eq!(second.stdout, first.stdout);
    let kept = stages(&t);
    // The same fingerprints (definitions, rendered actions, schemas) and outputs; the cached
    // stage is reused the second time.
    for (a, b) in checked.iter().zip(&kept) {
        assert_eq!((&a.0, &a.2), (&b.0, &b.2), "stage {}", a.0);
        // What `json.write` says of the file: changed the first time only.
        if a.0 != "kept" {
            assert_eq!(a.3, b.3, "stage {}", a.0);
        }
        let status = if a.0 == "say" {
            "cached"
        } else {
            a.1.as_str().unwrap()
        };
        assert_eq!(b.1, status, "stage {}", a.0);
    }
    assert_eq!(stage(&t.last_run(), "skipped")["status"], "skipped");
    // Inputs, the schema and the assertion still hold: each is read back, not skipped.
    t.run(["run", "wide", "-i", "n=x"])
        .code(2)
        .stderr_has("input `n` must be an integer");
    let out = t.run(["run", "wide", "-v", "-i", "n=0"]);
    out.code(1);
    out.stderr_has(KEPT);
    out.stderr_has("n is positive");
}

#[test]
fn any_file_the_check_read_that_changed_is_checked_again() {
    let t = project();
    t.run(["run", "wide"]).code(0);
    t.run(["run", "wide", "-v"]).code(0).stderr_has(KEPT);
    // The partial a template includes.
    t.write("templates/part.j2", "PAGE");
    let out = t.run(["run", "wide", "-v"]);
    out.code(0);
    assert!(!out.stderr.contains(KEPT), "{}", out.stderr);
    assert!(
        out.stdout.starts_with("PAGE: about retries"),
        "{}",
        out.stdout
    );
    t.run(["run", "wide", "-v"]).code(0).stderr_has(KEPT);
    // The schema: the stage's output no longer fits it.
    t.write(
        "schemas/facts.json",
        r#"{"type": "object", "required": ["missing"], "properties": {"topic": {}, "n": {}, "missing": {}}}"#,
    );
    let out = t.run(["run", "wide", "-v"]);
    out.code(1);
    assert!(!out.stderr.contains(KEPT), "{}", out.stderr);
    out.stderr_has("missing");
    // The workflow's own file, with an error the check finds.
    t.write(
        "workflows/wide.toml",
        &WIDE.replace(
            "{{ stages.facts.output.topic }}",
            "{{ stages.fcts.output.topic }}",
        ),
    );
    let out = t.run(["run", "wide"]);
    out.code(2);
    out.stderr_has("fcts");
    // A file that appeared ahead of it on the search path: that one is the workflow now.
    t.write("workflows/wide.toml", WIDE);
    t.write(
        "schemas/facts.json",
        r#"{"type": "object", "properties": {"topic": {"type": "string"}, "n": {}}}"#,
    );
    t.run(["run", "wide"]).code(0);
    t.run(["run", "wide", "-v"]).code(0).stderr_has(KEPT);
    t.write(
        ".stagegraph/workflows/wide.toml",
        "[stages.only]\ncommand = [\"echo\", \"the project's own\"]\n\n[outputs]\nsaid = \"{{ stages.only.output }}\"\n",
    );
    let out = t.run(["run", "wide", "-v"]);
    out.code(0);
    assert!(!out.stderr.contains(KEPT), "{}", out.stderr);
    assert_eq!(out.stdout.trim(), "the project's own");
    // One entry for the workflow, replaced each time.
    let entries = std::fs::read_dir(t.state_dir().join("cache/checks"))
        .expect("cache/checks")
        .count();
    assert_eq!(entries, 1);
}

#[test]
fn a_workflow_with_warnings_is_checked_on_every_run() {
    let t = Test::new();
    t.write("stagegraph.toml", "");
    // `${{ }}` in a script: a warning.
    t.write(
        "workflows/warned.toml",
        "[inputs.who]\ntype = \"string\"\ndefault = \"ada\"\n\n[stages.a]\nshell = \"echo ${{ inputs.who }}\"\n",
    );
    for _ in 0..2 {
        let out = t.run(["run", "warned", "-v"]);
        out.code(0);
        assert!(!out.stderr.contains(KEPT), "{}", out.stderr);
        out.stderr_has("warning");
    }
}

#[test]
fn a_kept_check_that_does_not_read_is_checked_again_and_replaced() {
    let t = project();
    t.run(["run", "wide"]).code(0);
    let dir = t.state_dir().join("cache/checks");
    let entries: Vec<_> = std::fs::read_dir(&dir)
        .expect("cache/checks")
        .flatten()
        .map(|e| e.path())
        .collect();
    assert_eq!(entries.len(), 1, "{entries:?}");
    let bytes = std::fs::read(&entries[0]).expect("the entry");
    // Cut short, then flipped bytes past its header: each is checked again, never a panic.
    for broken in [
        bytes[..bytes.len() / 2].to_vec(),
        bytes
            .iter()
            .enumerate()
            .map(|(i, b)| if i > 200 && i % 7 == 0 { !b } else { *b })
            .collect(),
    ] {
        std::fs::write(&entries[0], &broken).expect("write");
        let out = t.run(["run", "wide", "-v"]);
        out.code(0);
        assert!(
            out.stdout.starts_with("page: about retries x2"),
            "{}",
            out.stdout
        );
        let out = t.run(["run", "wide", "-v"]);
        out.code(0);
        out.stderr_has(KEPT);
    }
}

/// The first run of a project makes its state folder to record the run; the check it made is
/// kept there too, once the folder exists, so the second run reads it back.
#[test]
fn the_first_run_of_a_project_keeps_its_check_once_it_made_the_state_folder() {
    let t = project();
    assert!(!t.exists(".stagegraph"));
    t.command(["run", "wide"])
        .without_state_dir()
        .output()
        .code(0);
    assert!(t.exists(".stagegraph/cache/checks"), "no check kept");
    let out = t
        .command(["run", "wide", "-v"])
        .without_state_dir()
        .output();
    out.code(0);
    out.stderr_has(KEPT);
}
