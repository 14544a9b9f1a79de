//! The run's contract: dry-runs are recorded as such and `last` skips them, `plan --explain`
//! records nothing, a dry-run rehearses the real path (recorded outputs and cache entries of
//! unchanged stages), what a successful stage wrote on stderr is kept, a run that fails before
//! its first stage still leaves a record, and `--explain` gives each stage one verdict.

use serde_json::Value;

use crate::support::{stage, Test};

/// A command that appends to a file each time it really runs, and a stage that reads it.
const COUNTED: &str = r#"
[stages.count]
shell = "echo ran >> calls.txt; echo counted"

[stages.show]
template = { inline = "saw {{ stages.count.output | trim }}" }

[outputs]
seen = "{{ stages.show.output }}"
"#;

fn counted() -> Test {
    let t = Test::new();
    t.write("flow.toml", COUNTED);
    t
}

fn record_of(t: &Test, id: &str) -> Value {
    let out = t.run(["runs", "show", id, "--json"]);
    out.code(0);
    serde_json::from_str(&out.stdout).expect("run.json")
}

#[test]
fn last_is_the_last_real_run_and_dry_runs_are_marked() {
    let t = counted();
    t.run(["run", "flow.toml"]).code(0);
    assert_eq!(t.count("calls.txt"), 1);
    t.run(["run", "flow.toml", "--dry-run"]).code(0);
    let ids = t.run_ids();
    assert_eq!(ids.len(), 2);
    let (real, dry) = (&ids[0], &ids[1]);
    assert_eq!(record_of(&t, dry)["dry_run"], true);

    // `last` skips the dry-run: resume reuses the real run's command instead of running it.
    t.run(["resume", "last"]).code(0);
    assert_eq!(
        t.count("calls.txt"),
        1,
        "the command ran again after a dry-run"
    );
    let resumed = record_of(&t, &t.run_ids()[2]);
    assert_eq!(resumed["resumed_from"], real.as_str());

    let out = t.run(["runs", "show", "last"]);
    out.code(0);
    assert!(!out.stdout.contains("(dry-run)"), "{}", out.stdout);
    let out = t.run(["runs", "show", dry]);
    out.code(0);
    assert!(
        out.stdout
            .lines()
            .next()
            .unwrap_or("")
            .ends_with("completed (dry-run)"),
        "{}",
        out.stdout
    );
    let out = t.run(["runs"]);
    out.code(0);
    let marked: Vec<&str> = out
        .stdout
        .lines()
        .filter(|l| l.contains("(dry-run)"))
        .collect();
    assert_eq!(marked.len(), 1, "{}", out.stdout);
    assert!(marked[0].starts_with(dry.as_str()), "{}", out.stdout);
}

#[test]
fn plan_explain_records_nothing() {
    let t = counted();
    t.run(["run", "flow.toml"]).code(0);
    let before = t.run_ids();
    let out = t.run(["plan", "flow.toml", "--explain"]);
    out.code(0);
    assert_eq!(t.run_ids(), before, "plan --explain left a run record");
    assert_eq!(t.count("calls.txt"), 1);
}

#[test]
fn a_dry_run_takes_the_recorded_output_of_an_unchanged_stage() {
    let t = counted();
    t.run(["run", "flow.toml"]).code(0);
    let out = t.run(["run", "flow.toml", "--dry-run"]);
    out.code(0);
    assert_eq!(
        out.stdout.trim(),
        "saw counted",
        "the dry-run followed the real output"
    );
    assert!(
        out.stderr.contains("(dry-run) output of run"),
        "says where the output came from:\n{}",
        out.stderr
    );
    assert_eq!(t.count("calls.txt"), 1, "a dry-run runs no command");
    let dry = t.last_run();
    assert_eq!(stage(&dry, "count")["status"], "cached");
    assert!(stage(&dry, "count")["reused_from"]
        .as_str()
        .unwrap_or_default()
        .starts_with("run "));

    // A changed stage is assumed as before.
    t.write(
        "flow.toml",
        &COUNTED.replace("echo counted", "echo changed"),
    );
    let out = t.run(["run", "flow.toml", "--dry-run"]);
    out.code(0);
    assert_eq!(out.stdout.trim(), "saw", "{}", out.stderr);
    assert_eq!(stage(&t.last_run(), "count")["assumed"], true);
}

#[test]
fn a_dry_run_says_when_an_output_comes_from_the_cache() {
    let t = Test::new();
    t.write(
        "flow.toml",
        "[stages.count]\nshell = \"echo ran >> calls.txt; echo counted\"\ncache = true\n",
    );
    t.run(["run", "flow.toml"]).code(0);
    t.run(["run", "flow.toml", "--no-cache"]).code(0);
    // The last real run ran without the cache, but the cache holds the stage's fingerprint.
    let out = t.run(["run", "flow.toml", "--dry-run"]);
    out.code(0);
    assert!(
        out.stderr.contains("(dry-run) output from the cache"),
        "{}",
        out.stderr
    );
}

/// A command's output feeds a prompt: a dry-run that assumed `""` for the command sent another
/// prompt than the real run and missed every recording.
#[test]
fn dry_run_with_replay_hits_what_a_real_run_recorded() {
    let t = Test::new();
    t.write(
        "flow.toml",
        r#"
[stages.facts]
command = ["echo", "the sky is blue"]

[stages.summarize]
prompt = { inline = "Summarize: {{ stages.facts.output | trim }}" }
model = "m"

[outputs]
summary = "{{ stages.summarize.output | trim }}"
"#,
    );
    t.write(
        "stagegraph.toml",
        "[models.m]\nprovider = \"command\"\ncommand = [\"sh\", \"-c\", \"echo summary of: $(cat)\"]\n",
    );
    let out = t.run(["run", "flow.toml", "--record", "rec"]);
    out.code(0);
    assert_eq!(out.stdout.trim(), "summary of: Summarize: the sky is blue");
    let out = t.run(["run", "flow.toml", "--dry-run", "--replay", "rec"]);
    out.code(0);
    assert_eq!(
        out.stdout.trim(),
        "summary of: Summarize: the sky is blue",
        "{}",
        out.stderr
    );
    let dry = t.last_run();
    assert_eq!(dry["dry_run"], true);
    assert_eq!(stage(&dry, "summarize")["status"], "succeeded", "{dry:#}");
}

#[test]
fn what_a_successful_stage_says_on_stderr_is_kept_and_shown() {
    let t = Test::new();
    t.write(
        "flow.toml",
        r#"
[stages.warn]
shell = "echo 'warning: disk almost full' >&2; echo done"

[stages.loud]
shell = "i=0; while [ $i -lt 3000 ]; do echo line $i >&2; i=$((i+1)); done; echo ok"
"#,
    );
    t.run(["run", "flow.toml"]).code(0);
    let record = t.last_run();
    assert_eq!(
        stage(&record, "warn")["stderr"],
        "warning: disk almost full"
    );
    let loud = stage(&record, "loud")["stderr"]
        .as_str()
        .unwrap_or_default();
    assert!(loud.len() <= 8 * 1024, "bounded: {} bytes", loud.len());
    assert!(loud.ends_with("line 2999"), "the end is kept");
    let out = t.run(["runs", "show", "last"]);
    out.code(0);
    assert!(
        out.stdout.contains("stderr: warning: disk almost full"),
        "{}",
        out.stdout
    );
}

#[test]
fn a_run_that_fails_before_its_first_stage_leaves_a_failed_record() {
    let t = counted();
    t.write("bad.json", "[1, 2");
    let out = t.run(["run", "flow.toml", "--inputs-json", "bad.json"]);
    out.code(2);
    let out = t.run(["runs", "show", "last"]);
    out.code(0);
    assert!(out.stdout.contains(") failed"), "{}", out.stdout);
    assert!(
        out.stdout
            .contains("error: --inputs-json is not valid JSON"),
        "{}",
        out.stdout
    );
    let record = t.last_run();
    assert_eq!(stage(&record, "count")["status"], "not_run");
    assert_eq!(t.count("calls.txt"), 0);

    // Through a hook's stdin, and for an input error.
    t.write(
        "typed.toml",
        "[inputs.n]\ntype = \"integer\"\n\n[stages.a]\ncommand = [\"echo\", \"{{ inputs.n }}\"]\n",
    );
    let out = t
        .command(["run", "typed.toml", "--inputs-json", "-"])
        .stdin("{\"n\": \"many\"}")
        .output();
    out.code(2);
    let record = t.last_run();
    assert_eq!(record["status"], "failed");
    assert!(
        record["error"].as_str().unwrap_or_default().contains("`n`"),
        "{record:#}"
    );
}

fn verdicts(out: &str) -> Vec<(String, String)> {
    out.lines()
        .filter_map(|line| line.split_once("  "))
        .map(|(id, why)| (id.trim().to_string(), why.trim().to_string()))
        .collect()
}

#[test]
fn explain_gives_each_stage_one_verdict() {
    let t = counted();
    t.run(["run", "flow.toml"]).code(0);
    // Resumed: the command is reused, and said so, never also "runs: read-only".
    let out = t.run(["resume", "last", "--explain"]);
    out.code(0);
    let resumed = verdicts(&out.stdout);
    assert_eq!(resumed.len(), 2, "{}", out.stdout);
    assert_eq!(resumed[0].0, "count");
    assert!(resumed[0].1.starts_with("reused"), "{resumed:?}");
    assert!(resumed[1].1.starts_with("runs: read-only"), "{resumed:?}");

    // A plain explain: the command has no cache, so a run would run it again; the dry-run
    // still follows its recorded output.
    let out = t.run(["plan", "flow.toml", "--explain"]);
    out.code(0);
    let planned = verdicts(&out.stdout);
    assert_eq!(planned.len(), 2, "{}", out.stdout);
    assert!(planned[0].1.contains("no `cache`"), "{planned:?}");
    let ids: std::collections::BTreeSet<&str> = planned.iter().map(|(id, _)| id.as_str()).collect();
    assert_eq!(ids.len(), planned.len(), "one line a stage: {planned:?}");
}
