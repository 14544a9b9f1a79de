//! Stage selection (`run --only`, `--from`, `--until`, and `plan` with them) and the filters
//! of `runs`.

use serde_json::Value;

use crate::support::Test;

/// a -> b -> c, and `side` alone; each stage appends its id to `ran.txt` when it runs.
const CHAIN: &str = r#"[workflow]
description = "A chain and a side stage"

[stages.a]
command = ["sh", "-c", "echo a >> ran.txt; printf A"]

[stages.b]
command = ["sh", "-c", "echo b >> ran.txt; printf \"$0\"B", "{{ stages.a.output }}"]

[stages.c]
command = ["sh", "-c", "echo c >> ran.txt; printf \"$0\"C", "{{ stages.b.output }}"]

[stages.side]
command = ["sh", "-c", "echo side >> ran.txt; printf S"]

[outputs]
last = "{{ stages.c.output }}"
side = "{{ stages.side.output }}"
"#;

fn chain() -> Test {
    let t = Test::new();
    t.write("chain.toml", CHAIN);
    t
}

fn ran(t: &Test) -> Vec<String> {
    let text = t.read_opt("ran.txt").unwrap_or_default();
    text.lines().map(str::to_string).collect()
}

fn statuses(t: &Test) -> Vec<(String, String)> {
    let run = t.last_run();
    let mut out: Vec<(String, String)> = run["stages"]
        .as_object()
        .expect("stages")
        .iter()
        .map(|(id, stage)| {
            (
                id.clone(),
                stage["status"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect();
    out.sort();
    out
}

#[test]
fn until_runs_a_stage_and_what_it_needs_and_nothing_else() {
    let t = chain();
    let out = t.run(["run", "chain.toml", "--until", "b", "--format", "json"]);
    out.code(0);
    assert_eq!(ran(&t), ["a", "b"]);
    let doc: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(doc["outputs"]["last"], Value::Null, "{doc}");
    let statuses = statuses(&t);
    assert!(
        statuses.contains(&("c".into(), "skipped".into()))
            && statuses.contains(&("side".into(), "skipped".into())),
        "{statuses:?}"
    );
}

#[test]
fn only_and_from_take_the_upstream_outputs_from_the_last_run() {
    let t = chain();
    t.run(["run", "chain.toml", "--until", "b"]).code(0);
    let out = t.run(["run", "chain.toml", "--only", "c"]);
    out.code(0);
    let outputs: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(outputs, serde_json::json!({"last": "ABC", "side": null}));
    assert_eq!(ran(&t), ["a", "b", "c"], "only c ran the second time");
    let run = t.last_run();
    let first = t.run_ids()[0].clone();
    assert_eq!(
        run["stages"]["b"]["reused_from"],
        Value::String(format!("run {first}")),
        "{run}"
    );
    let out = t.run(["run", "chain.toml", "--from", "b"]);
    out.code(0);
    assert_eq!(ran(&t), ["a", "b", "c", "b", "c"]);
    // Several at once, comma-separated.
    t.run(["run", "chain.toml", "--only", "side,c"]).code(0);
    let mut last: Vec<String> = ran(&t)[5..].to_vec();
    last.sort();
    assert_eq!(last, ["c", "side"]);
}

#[test]
fn a_selection_without_an_earlier_run_or_with_an_unknown_stage_is_refused() {
    let t = chain();
    let out = t.run(["run", "chain.toml", "--from", "c"]);
    out.code(2);
    out.stderr_has("stage `a`, `b` upstream of the selection need(s) the output of an earlier run");
    out.stderr_has("select with --until");
    assert!(ran(&t).is_empty(), "nothing ran");
    let out = t.run(["run", "chain.toml", "--only", "cc"]);
    out.code(2);
    out.stderr_has("--only: workflow `chain` has no stage `cc`");
    out.stderr_has("did you mean `c`?");
    let out = t.run(["run", "chain.toml", "--only", "a", "--from", "b"]);
    out.code(2);
    out.stderr_has("cannot be used with");
}

#[test]
fn plan_and_a_dry_run_show_what_a_selection_does() {
    let t = chain();
    let out = t.run(["plan", "chain.toml", "--only", "c"]);
    out.code(0);
    let text = &out.stdout;
    let after = |id: &str| {
        let start = text.find(&format!("  {id}  ")).expect(id);
        text[start..]
            .lines()
            .nth(1)
            .unwrap_or("")
            .trim()
            .to_string()
    };
    assert_eq!(after("a"), "selection: given (the last run's output)");
    assert_eq!(after("c"), "selection: runs");
    assert_eq!(after("side"), "selection: left out");
    let json = t.run(["plan", "chain.toml", "--from", "b", "--format", "json"]);
    json.code(0);
    let doc: Value = serde_json::from_str(&json.stdout).unwrap();
    let of = |id: &str| {
        doc["stages"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["id"] == id)
            .map(|s| s["selection"].clone())
    };
    assert_eq!(of("a"), Some(Value::from("given")));
    assert_eq!(of("b"), Some(Value::from("runs")));
    assert_eq!(of("side"), Some(Value::from("left_out")));

    t.run(["run", "chain.toml"]).code(0);
    assert_eq!(ran(&t).len(), 4);
    let dry = t.run(["run", "chain.toml", "--from", "b", "--dry-run"]);
    dry.code(0);
    assert_eq!(ran(&t).len(), 4, "a dry-run runs nothing");
    dry.stderr_has("side skipped");
    dry.stderr_has("(dry-run) output of run");
}

#[test]
fn runs_filters_by_workflow_status_and_count() {
    let t = chain();
    t.write("bad.toml", "[stages.x]\ncommand = [\"false\"]\n");
    t.run(["run", "chain.toml"]).code(0);
    t.run(["run", "bad.toml"]).code(1);
    t.run(["run", "chain.toml"]).code(0);
    let lines = |args: &[&str]| {
        let out = t.run(args.iter().copied());
        out.code(0);
        out.stdout.lines().map(str::to_string).collect::<Vec<_>>()
    };
    assert_eq!(lines(&["runs"]).len(), 3);
    let chain_runs = lines(&["runs", "--workflow", "chain"]);
    assert_eq!(chain_runs.len(), 2, "{chain_runs:?}");
    assert!(chain_runs.iter().all(|l| l.contains("chain")));
    let failed = lines(&["runs", "--status", "failed"]);
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert!(failed[0].contains("bad"), "{failed:?}");
    let ids = t.run_ids();
    let newest = lines(&["runs", "--limit", "1"]);
    assert_eq!(newest.len(), 1);
    assert!(newest[0].starts_with(&ids[2]), "{newest:?}");
    assert!(lines(&["runs", "--workflow", "chain", "--status", "failed"]).is_empty());
    let json = t.run(["runs", "--workflow", "bad", "--format", "json"]);
    let doc: Value = serde_json::from_str(&json.stdout).unwrap();
    assert_eq!(doc["runs"].as_array().map(Vec::len), Some(1));
}
