//! Bounded outputs: a command writing far more than `max_output` is stopped and its stage fails
//! naming the limit; `fs.read` reads no further than the limit; an output above the size kept
//! inline is stored once as a file of the run, which downstream stages, `runs show` and
//! `resume` still read.

use std::time::Duration;

use crate::support::{stage, wait_for, Test};

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

/// Four items, one at a time, each writing 1.5 MB; an item `N` for which `stopN` exists waits
/// for `goN` before it writes. Each item notes its start in `ran.txt`.
const LARGE_ITEMS: &str = r#"
[workflow]
description = "large foreach item outputs"

[stages.items]
foreach = "[0, 1, 2, 3]"
concurrency = 1
shell = "echo {{ item }} >> ran.txt; if [ -e stop{{ item }} ]; then while [ ! -e go{{ item }} ]; do sleep 0.02; done; fi; printf {{ item }}; head -c 1500000 /dev/zero | tr '\\0' a"

[stages.total]
shell = "tee all.txt | tr -cd a | wc -c; tr -cd 0-9 < all.txt"
stdin = "{{ stages.items.output }}"
"#;

/// A kill -9 while item 2 waits: items 0 and 1 are journaled with their outputs in files of
/// their own (the journal stays small), and the resume reuses them from those files.
#[test]
fn large_foreach_item_outputs_are_journaled_as_files_and_reused_by_a_resume() {
    let t = Test::new();
    t.write("w.toml", LARGE_ITEMS);
    t.write("stop2", "");
    let ran = |t: &Test| -> Vec<usize> {
        let text = t.read_opt("ran.txt").unwrap_or_default();
        (0..4)
            .map(|n| text.lines().filter(|l| *l == n.to_string()).count())
            .collect()
    };
    let journal = |t: &Test| {
        std::fs::read_to_string(
            t.state_dir()
                .join("runs")
                .join(t.newest_run())
                .join("artifacts/items.jsonl"),
        )
        .unwrap_or_default()
    };
    let mut child = t.command(["run", "w.toml"]).spawn();
    wait_for(
        "items 0 and 1 to be journaled",
        Duration::from_secs(60),
        || {
            ran(&t)[2] > 0
                && t.exists("state/runs")
                && journal(&t).lines().filter(|l| l.ends_with('}')).count() >= 2
        },
    );
    child.kill().expect("kill -9 the engine");
    child.wait().expect("reap the engine");
    assert_eq!(ran(&t), [1, 1, 1, 0]);

    let run_dir = t.state_dir().join("runs").join(t.newest_run());
    let text = journal(&t);
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).expect("a whole line"))
        .collect();
    assert_eq!(lines.len(), 2, "{text}");
    for line in &lines {
        assert!(line.to_string().len() < 1_000, "a copied output: {line}");
        assert!(line.get("output").is_none(), "{line}");
        let file = line["file"].as_str().expect("a file named by the line");
        let index = line["index"].as_u64().expect("an index");
        assert!(
            file.starts_with(&format!("outputs/items-{index}-")),
            "{file}"
        );
        let stored = std::fs::read_to_string(run_dir.join("artifacts").join(file))
            .expect("the output's file");
        assert_eq!(stored.len(), 1_500_003, "the JSON string of the output");
        assert!(
            stored.starts_with(&format!("\"{index}aaa")),
            "{}",
            &stored[..10]
        );
    }

    t.write("go2", "");
    let out = t.run(["resume", "last"]);
    out.code(0)
        .stderr_has("2 of 4 items reused from the resumed run");
    assert_eq!(ran(&t), [1, 1, 2, 1], "a finished item ran again");
    assert_eq!(t.last_run()["stages"]["items"]["reused_items"], 2);
    // Downstream saw every output whole, in order, the reused ones read from their files.
    assert_eq!(t.stage_output("total").trim(), "6000000\n0123");
}

/// A workflow output of 3 MB, from a cached stage, after a stage that fails until fixed.
const LARGE_RESULT: &str = r#"
[workflow]
description = "a large workflow output"

[stages.big]
shell = "head -c 3000000 /dev/zero | tr '\\0' a; printf b; echo >> big.count"
cache = true

[stages.gate]
shell = "test ! -e fail.flag"
after = ["big"]

[outputs]
text = "{{ stages.big.output }}"
length = "{{ stages.big.output | length }}"
"#;

/// The size of a file of the test folder.
fn size(path: &std::path::Path) -> u64 {
    std::fs::metadata(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .len()
}

/// A workflow output above 1 MiB is kept once as a file of the run, not copied into run.json
/// nor events.jsonl, and reads back whole wherever the record is read; the cache keeps a large
/// output once by content, a damaged file is a miss, and an entry written inline still hits.
#[test]
fn a_large_workflow_output_is_stored_once_and_read_back_whole_and_the_cache_refers_to_it() {
    let test = Test::new();
    test.write("lib/workflows/result.toml", LARGE_RESULT);
    let expected = format!("{}b", "a".repeat(3_000_000));
    let check_outputs = |outputs: &serde_json::Value, what: &str| {
        assert_eq!(outputs["length"], 3_000_001, "{what}");
        assert!(
            outputs["text"] == expected.as_str(),
            "{what}: not the value"
        );
    };
    test.write("fail.flag", "");
    test.run(["-L", "lib", "run", "result"]).code(1);
    std::fs::remove_file(test.path("fail.flag")).expect("fix the cause");

    // The resume completes and prints the outputs whole.
    let out = test.run(["-L", "lib", "resume", "last"]);
    out.code(0);
    let printed: serde_json::Value = serde_json::from_str(&out.stdout).expect("JSON outputs");
    check_outputs(&printed, "printed by resume");
    assert_eq!(test.count("big.count"), 1, "big ran again");

    // run.json and the final events refer to the value; it is kept once, in the stage's file.
    let run_dir = test.state_dir().join("runs").join(test.newest_run());
    let run_json = size(&run_dir.join("run.json"));
    assert!(run_json < 20_000, "run.json holds {run_json} bytes");
    let events = size(&run_dir.join("events.jsonl"));
    assert!(events < 20_000, "events.jsonl holds {events} bytes");
    let raw: serde_json::Value = serde_json::from_str(
        &test
            .read_opt(&format!("state/runs/{}/run.json", test.newest_run()))
            .unwrap(),
    )
    .expect("run.json");
    assert_eq!(raw["outputs"]["text"], serde_json::Value::Null, "{raw}");
    assert_eq!(raw["outputs"]["length"], 3_000_001);
    let stored = &raw["output_files"]["text"];
    assert_eq!(stored["size"], 3_000_003, "{stored}");
    let path = stored["path"].as_str().expect("a path");
    assert!(path.starts_with("outputs/big-"), "{path}");
    let kept: Vec<_> = std::fs::read_dir(run_dir.join("artifacts/outputs"))
        .expect("the outputs folder")
        .flatten()
        .collect();
    assert_eq!(kept.len(), 1, "{kept:?}");

    // `runs show --json` reads it back.
    check_outputs(&test.last_run()["outputs"], "runs show --json");

    // A later run takes `big` from the cache, whose file holds a reference, not the value.
    let out = test.run(["-L", "lib", "run", "result", "--format", "json"]);
    out.code(0);
    let doc: serde_json::Value = serde_json::from_str(&out.stdout).expect("a JSON document");
    check_outputs(&doc["outputs"], "run --format json");
    assert_eq!(test.count("big.count"), 1, "the cache missed");
    let cache = test.state_dir().join("cache/result.jsonl");
    let cache_size = size(&cache);
    assert!(
        cache_size < 10_000,
        "the cache file holds {cache_size} bytes"
    );
    let entry: serde_json::Value = serde_json::from_str(
        test.read("state/cache/result.jsonl")
            .lines()
            .next()
            .unwrap(),
    )
    .expect("a cache entry");
    let file = entry["file"]["path"].as_str().expect("a reference");
    let sha = entry["sha256"].as_str().expect("a hash");
    assert_eq!(file, format!("outputs/{sha}.json"));
    let cached = test.state_dir().join("cache").join(file);
    assert_eq!(size(&cached), 3_000_003);

    // A damaged file is a miss: the stage runs again, and its output is right.
    std::fs::write(&cached, format!("\"{}c\"", "a".repeat(3_000_000))).expect("damage");
    let out = test.run(["-L", "lib", "run", "result", "--format", "json"]);
    out.code(0).stderr_has("missing or damaged");
    check_outputs(
        &serde_json::from_str::<serde_json::Value>(&out.stdout).unwrap()["outputs"],
        "after a damaged cache file",
    );
    assert_eq!(test.count("big.count"), 2, "a damaged file was a hit");
    // A missing file: the same.
    std::fs::remove_file(&cached).expect("remove the cached file");
    test.run(["-L", "lib", "run", "result"]).code(0);
    assert_eq!(test.count("big.count"), 3, "a missing file was a hit");

    // An entry as a cache written with the output inline holds it still hits.
    let inline = serde_json::json!({
        "id": entry["id"], "created_at": entry["created_at"], "sha256": sha,
        "output": expected,
    });
    std::fs::write(&cache, format!("{inline}\n")).expect("an inline cache");
    std::fs::remove_file(&cached).expect("remove the cached file");
    let out = test.run(["-L", "lib", "run", "result", "--format", "json"]);
    out.code(0);
    check_outputs(
        &serde_json::from_str::<serde_json::Value>(&out.stdout).unwrap()["outputs"],
        "from an inline entry",
    );
    assert_eq!(test.count("big.count"), 3, "an inline entry missed");
}

/// A 2 MB output kept by the cache for an hour, its last byte read from `version.txt`.
const EXPIRING: &str = r#"
[workflow]
description = "a large cached output whose entry expires"

[stages.big]
shell = "head -c 2000000 /dev/zero | tr '\\0' a; cat version.txt; echo >> big.count"
cache = { ttl = "1h" }
"#;

/// The names of the files of `state/cache/outputs/`.
fn cached_outputs(test: &Test) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(test.state_dir().join("cache/outputs"))
        .expect("the cache's outputs folder")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// The only line of the workflow's cache file, and the name of the output file it names.
fn only_entry(test: &Test) -> (serde_json::Value, String) {
    let text = test.read("state/cache/expiring.jsonl");
    let lines: Vec<_> = text.lines().collect();
    assert_eq!(lines.len(), 1, "{text:.2000}");
    let entry: serde_json::Value = serde_json::from_str(lines[0]).expect("a cache entry");
    let path = entry["file"]["path"].as_str().expect("a file").to_string();
    let name = path
        .strip_prefix("outputs/")
        .expect("below outputs/")
        .to_string();
    (entry, name)
}

/// Sets a file's modification time two hours back, as if an earlier run had written it.
fn backdate(path: &std::path::Path) {
    let file = std::fs::File::options()
        .write(true)
        .open(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    file.set_modified(std::time::SystemTime::now() - Duration::from_secs(2 * 3600))
        .expect("backdate");
}

/// An entry stored again under its id (its ttl expired, and the command's output changed)
/// supersedes the first: the run that stores it compacts the cache file to one line and removes
/// the output file no entry names any more, once it is older than the grace period (an hour),
/// and the kept entry still hits. A younger unnamed file is kept: a run sharing the folder may
/// have written it for a line it has yet to append.
#[test]
fn a_superseded_cache_entry_loses_its_output_file_once_it_is_old() {
    let test = Test::new();
    test.write("lib/workflows/expiring.toml", EXPIRING);
    for backdated in [true, false] {
        std::fs::remove_dir_all(test.state_dir().join("cache")).ok();
        std::fs::remove_file(test.path("big.count")).ok();
        test.write("version.txt", "1");
        test.run(["-L", "lib", "run", "expiring"]).code(0);
        let (mut entry, first) = only_entry(&test);
        assert_eq!(cached_outputs(&test), std::slice::from_ref(&first));

        // Two hours on: the entry has expired; the command now writes another last byte.
        entry["created_at"] = (entry["created_at"].as_i64().unwrap() - 2 * 3600).into();
        test.write("state/cache/expiring.jsonl", &format!("{entry}\n"));
        if backdated {
            backdate(&test.state_dir().join("cache/outputs").join(&first));
        }
        test.write("version.txt", "2");
        test.run(["-L", "lib", "run", "expiring"]).code(0);
        assert_eq!(test.count("big.count"), 2, "an expired entry hit");
        let (_, second) = only_entry(&test);
        assert_ne!(first, second);
        let mut expected = vec![second.clone()];
        if !backdated {
            expected.push(first.clone());
        }
        expected.sort();
        assert_eq!(cached_outputs(&test), expected, "backdated: {backdated}");

        // The kept entry hits, its output whole.
        let out = test.run(["-L", "lib", "run", "expiring", "--format", "json"]);
        out.code(0);
        assert_eq!(test.count("big.count"), 2, "the kept entry missed");
        assert!(!out.stderr.contains("warning"), "{}", out.stderr);
    }
}

/// A document of `size` bytes that compresses no better than hex does, so that what a record
/// saves by storing it once cannot be mistaken for what compression saves.
fn incompressible_document(size: usize, seed: u64) -> String {
    let mut state = seed | 1;
    let mut text = String::with_capacity(size + 80);
    while text.len() < size {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1);
        text.push_str(&format!("{state:016x}"));
        text.push(if text.len() % 80 < 17 { '\n' } else { ' ' });
    }
    text
}

const REPEATED: &str = r#"
[workflow]
description = "one document in the outputs of three stages"

[stages.doc]
shell = "cat doc.md"

[stages.copy]
command = ["cat"]
stdin = "{{ stages.doc.output }}"

[stages.quoted]
template = { inline = "{{ stages.doc.output }}" }

[stages.other]
shell = "cat other.md"
after = ["copy", "quoted"]

[stages.gate]
shell = "test ! -e fail.flag && wc -c"
stdin = "{{ stages.copy.output }}{{ stages.quoted.output }}"
"#;

fn record_bytes(test: &Test, id: &str) -> u64 {
    let dir = test.state_dir().join("runs").join(id).join("artifacts");
    ["outputs.jsonl", "blobs.jsonl.gz"]
        .iter()
        .map(|name| std::fs::metadata(dir.join(name)).map_or(0, |meta| meta.len()))
        .sum()
}

#[test]
fn a_document_in_several_outputs_is_stored_once_and_read_back_by_show_resume_and_diff() {
    let test = Test::new();
    let doc = incompressible_document(100_000, 7);
    test.write("doc.md", &doc);
    test.write("other.md", "short");
    test.write("w.toml", REPEATED);
    test.write("fail.flag", "");
    test.run(["run", "w.toml"]).code(1);
    let first = test.newest_run();
    // Three copies would be 300 KB before compression and about 150 KB after; once is half.
    let bytes = record_bytes(&test, &first);
    assert!(bytes < 90_000, "the record keeps {bytes} bytes of outputs");
    for id in ["doc", "copy", "quoted"] {
        assert_eq!(test.stage_output(id).trim_end(), doc.trim_end(), "{id}");
    }
    // A resume reads the packed outputs back: the commands are reused, not run again (a
    // template renders again, as it always does).
    std::fs::remove_file(test.path("fail.flag")).expect("fix the cause");
    let out = test.run(["resume", "last"]);
    out.code(0);
    let record = test.last_run();
    for id in ["doc", "copy"] {
        assert_eq!(stage(&record, id)["status"], "cached", "{record:#}");
    }
    let length = doc.len() * 2;
    assert_eq!(test.stage_output("gate").trim(), length.to_string());
    // `runs diff` reads both records' outputs through their blobs: only the gate's differs
    // (a blob missing would show as an output gone).
    let second = test.newest_run();
    let diff = test.run(["runs", "diff", &first, &second]);
    diff.code(0);
    assert_eq!(
        diff.stdout.matches("output /").count(),
        1,
        "{}",
        diff.stdout
    );
    assert!(
        diff.stdout.contains("stage copy: succeeded -> cached, "),
        "{}",
        diff.stdout
    );
}

#[test]
fn past_the_record_budget_an_output_is_cut_named_and_run_again_by_a_resume() {
    let test = Test::new();
    test.write("doc.md", &incompressible_document(100_000, 7));
    test.write("other.md", &incompressible_document(100_000, 11));
    test.write(
        "w.toml",
        &REPEATED.replace(
            "description = \"one document in the outputs of three stages\"",
            "description = \"a budget of one document\"\nrecords = { max_size = \"150KB\" }",
        ),
    );
    test.write("fail.flag", "");
    test.run(["run", "w.toml"]).code(1);
    let record = test.last_run();
    // The first document fits, and its copies cost nothing more; the second does not.
    for id in ["doc", "copy", "quoted"] {
        assert_eq!(stage(&record, id).get("output_cut"), None, "{record:#}");
    }
    assert_eq!(stage(&record, "other")["output_cut"], true, "{record:#}");
    let bytes = record_bytes(&test, &test.newest_run());
    assert!(bytes < 90_000, "the record keeps {bytes} bytes of outputs");
    std::fs::remove_file(test.path("fail.flag")).expect("fix the cause");
    test.run(["resume", "last"]).code(0);
    let record = test.last_run();
    assert_eq!(stage(&record, "doc")["status"], "cached", "{record:#}");
    assert_eq!(stage(&record, "other")["status"], "succeeded", "{record:#}");
}

fn tree_bytes(dir: &std::path::Path) -> u64 {
    walkdir::WalkDir::new(dir)
        .into_iter()
        .flatten()
        .filter_map(|entry| entry.metadata().ok())
        .filter(std::fs::Metadata::is_file)
        .map(|meta| meta.len())
        .sum()
}

#[test]
fn kept_runs_are_bounded_in_bytes_newest_first() {
    let test = Test::new();
    test.write("doc.md", &incompressible_document(50_000, 3));
    test.write(
        "w.toml",
        "[workflow]\ndescription = \"d\"\n\n[stages.doc]\nshell = \"cat doc.md\"\n",
    );
    test.run(["run", "w.toml", "--keep-runs", "0"]).code(0);
    let runs = test.state_dir().join("runs");
    let first = test.newest_run();
    let one = tree_bytes(&runs.join(&first));
    // Room for a run and a half. Runs are pruned as a run starts, its own record still small:
    // the second run keeps the first, the third removes it, the count aside.
    let room = (one * 3 / 2).to_string();
    test.run([
        "run",
        "w.toml",
        "--keep-runs",
        "0",
        "--keep-runs-size",
        &room,
    ])
    .code(0);
    assert!(
        runs.join(&first).exists(),
        "the first run was removed by the second"
    );
    test.run([
        "run",
        "w.toml",
        "--keep-runs",
        "0",
        "--keep-runs-size",
        &room,
    ])
    .code(0);
    assert!(!runs.join(&first).exists(), "the oldest run was kept");
    assert_eq!(test.run_ids().len(), 2);
    // `runs prune` bounds them the same way.
    let out = test.run([
        "runs",
        "prune",
        "--keep",
        "0",
        "--keep-size",
        &one.to_string(),
    ]);
    out.code(0).stderr_has("removed 1 run(s)");
    assert_eq!(test.run_ids(), [test.newest_run()]);
}
