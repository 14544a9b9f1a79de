//! Bounded outputs: a command writing far more than `max_output` is stopped and its stage fails
//! naming the limit; `fs.read` reads no further than the limit; an output above the size kept
//! inline is stored once as a file of the run, which downstream stages, `runs show` and
//! `resume` still read.

use crate::support::{stage, Test};

const FLOOD: &str = r#"
[workflow]
description = "a command that writes 200 MB"
max_output = "1MiB"

[stages.flood]
shell = "head -c 200000000 /dev/zero; touch finished"
"#;

#[test]
fn a_command_writing_past_the_limit_is_stopped_and_its_stage_fails_naming_the_limit() {
    let test = Test::new();
    test.write("lib/workflows/flood.toml", FLOOD);
    let out = test.run(["-L", "lib", "run", "flood"]);
    out.code(1);
    out.stderr_has("stage `flood`")
        .stderr_has("1 MiB")
        .stderr_has("max_output");
    // Killed once past the limit: the rest of its script never ran, the run's record is whole.
    assert!(!test.exists("finished"), "the command ran to its end");
    let record = test.last_run();
    assert_eq!(record["status"], "failed", "{record:#}");
    let error = stage(&record, "flood")["error"]
        .as_str()
        .unwrap_or_default();
    assert!(
        error.contains("the command was stopped") && error.contains("max_output = \""),
        "{error}"
    );
    // Nothing of the flood was kept.
    let outputs = std::fs::metadata(
        test.state_dir()
            .join("runs")
            .join(test.newest_run())
            .join("artifacts/outputs.jsonl"),
    )
    .map_or(0, |meta| meta.len());
    assert!(outputs < 1 << 20, "outputs.jsonl holds {outputs} bytes");
}

#[test]
fn a_stage_limit_replaces_the_workflow_limit_and_fs_read_stops_at_it() {
    let test = Test::new();
    test.write("big.txt", &"a".repeat(300_000));
    test.write(
        "lib/workflows/read.toml",
        r#"
[workflow]
description = "reads"
max_output = "1MiB"

[stages.small]
uses = "fs.read"
with = { path = "big.txt" }
max_output = "100KB"
on_error = "continue"

[stages.fits]
uses = "fs.read"
with = { path = "big.txt" }
"#,
    );
    let out = test.run(["-L", "lib", "run", "read"]);
    out.code(0);
    let record = test.last_run();
    let error = stage(&record, "small")["error"]
        .as_str()
        .unwrap_or_default();
    assert!(
        error.contains("big.txt") && error.contains("97.7 KiB") && error.contains("max_output"),
        "{error}"
    );
    assert_eq!(stage(&record, "fits")["status"], "succeeded", "{record:#}");

    // A size that does not parse is a check error at its key.
    test.write(
        "lib/workflows/bad.toml",
        "[workflow]\ndescription = \"d\"\nmax_output = \"lots\"\n\n[stages.s]\ntemplate = { inline = \"x\" }\nmax_output = \"1.5MB\"\n",
    );
    let out = test.run(["-L", "lib", "check", "bad"]);
    out.code(2);
    out.stderr_has("`lots` is not a size")
        .stderr_has("`1.5MB` is not a size");
}

const LARGE: &str = r#"
[workflow]
description = "a large output, then a stage that fails until fixed"

[stages.big]
shell = "head -c 3000000 /dev/zero | tr '\\0' a; echo >> big.count"

[stages.count]
command = ["wc", "-c"]
stdin = "{{ stages.big.output }}"

[stages.gate]
shell = "test ! -e fail.flag && cat"
stdin = "{{ stages.count.output }}"

[outputs]
count = "{{ stages.gate.output | trim }}"
"#;

#[test]
fn a_large_output_is_stored_once_as_a_file_and_still_read_downstream_and_by_resume() {
    let test = Test::new();
    test.write("lib/workflows/large.toml", LARGE);
    test.write("fail.flag", "");
    test.run(["-L", "lib", "run", "large"]).code(1);
    let run_dir = test.state_dir().join("runs").join(test.newest_run());
    let log = std::fs::read_to_string(run_dir.join("artifacts/outputs.jsonl")).expect("the log");
    assert!(
        log.len() < 10_000,
        "the output was copied into the log: {} bytes",
        log.len()
    );
    let line: serde_json::Value = serde_json::from_str(
        log.lines()
            .find(|line| line.contains("\"stage\":\"big\""))
            .expect("a line for big"),
    )
    .expect("JSON");
    let file = line["file"].as_str().expect("a file named by the line");
    assert!(line.get("output").is_none(), "{line}");
    let stored = std::fs::metadata(run_dir.join("artifacts").join(file)).expect("the file");
    assert!(stored.len() > 3_000_000, "{}", stored.len());
    // Downstream saw all of it.
    assert_eq!(test.stage_output("count").trim(), "3000000");
    // `runs show --stage` reads it from the file.
    let shown = test.stage_output("big");
    assert_eq!(shown.trim_end().len(), 3_000_000);

    // `resume` reuses it from the file: `big` does not run again, downstream still sees it.
    std::fs::remove_file(test.path("fail.flag")).expect("fix the cause");
    let out = test.run(["-L", "lib", "resume", "last"]);
    out.code(0);
    assert_eq!(out.stdout.trim(), "3000000");
    let record = test.last_run();
    assert_eq!(stage(&record, "big")["status"], "cached", "{record:#}");
    assert_eq!(test.read("big.count").lines().count(), 1, "big ran again");
}
