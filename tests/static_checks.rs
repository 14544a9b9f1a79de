//! What `check` can know without running, it reports: each test writes a workflow with a mistake
//! a user makes, and `check` (the real binary) names it at its line with a suggestion, before
//! anything runs.

use crate::support::Test;

#[test]
fn literal_write_paths_outside_the_roots_are_check_errors() {
    let t = Test::new();
    t.write(
        "w.toml",
        r#"[workflow]
writes = ["out"]

[stages.report]
command = ["echo", "done"]
output = { path = "out/../report.txt" }

[stages.save]
uses = "fs.write"
with = { path = "/tmp/stagegraph-check-escape.txt", content = "x" }

[stages.copy]
uses = "fs.copy"
with = { from = "anywhere.txt", to = "outer/a.txt" }

[stages.templated]
uses = "fs.write"
with = { path = "{{ stages.report.output }}", content = "x" }
"#,
    );
    let out = t.run(["check", "w.toml"]);
    out.code(2)
        .stderr_has("w.toml:6:19: path `out/../report.txt` climbs out of the workflow's writes with `..` (`out`)")
        .stderr_has("stage `report` writes its output here")
        .stderr_has("w.toml:10:17: absolute path `/tmp/stagegraph-check-escape.txt` is outside the workflow's writes (`out`)")
        .stderr_has("`fs.write` writes `path`")
        .stderr_has("w.toml:14:38: path `outer/a.txt` is outside the workflow's writes (`out`)")
        .stderr_has("write inside one of them, or add this folder there")
        .stderr_has("w.toml: invalid (3 error(s)");
    // The source of a copy is read, not written; a templated path waits for the run.
    assert!(
        !out.stderr.contains("path `anywhere.txt`"),
        "{}",
        out.stderr
    );
    t.run(["run", "w.toml"]).code(2);
    assert!(!t.exists("report.txt") && !t.exists("outer"));

    // Inside the roots, and through a root that is a link to another folder, all is well.
    std::fs::create_dir(t.path("real")).expect("a folder");
    std::os::unix::fs::symlink(t.path("real"), t.path("out")).expect("a link");
    t.write(
        "ok.toml",
        r#"[workflow]
writes = ["out"]

[stages.report]
command = ["echo", "done"]
output = { path = "out/deep/../report.txt" }

[stages.save]
uses = "fs.write"
with = { path = "real/x.txt", content = "x" }
"#,
    );
    t.run(["check", "ok.toml"]).code(0);
}

#[test]
fn a_foreach_over_what_is_not_a_list_is_a_check_error_and_its_suggestion_runs() {
    let t = Test::new();
    t.write(
        "schemas/scan.schema.json",
        r#"{"type": "object", "additionalProperties": false,
            "properties": {"sources": {"type": "array", "items": {"type": "object",
              "additionalProperties": false, "properties": {"name": {"type": "string"}}}},
              "counts": {"type": "object"}}}"#,
    );
    let flow = |whole: &str, names: &str, lines: &str, field: &str| {
        format!(
            r#"[inputs.names]
type = "string"
default = "a,b,c"

[stages.scan]
command = ["echo", '{{"sources": [{{"name": "x"}}, {{"name": "y"}}], "counts": {{"a": 1, "b": 2}}}}']
output = {{ format = "json", schema = "scan.schema.json" }}

[stages.listing]
command = ["printf", "one\ntwo\n"]{lines}

[stages.by_source]
foreach = "{whole}"
command = ["echo", "{{{{ item }}}}"]

[stages.by_name]
foreach = "{names}"
command = ["echo", "{{{{ item }}}}"]

[stages.by_line]
foreach = "stages.listing.output"
command = ["echo", "{{{{ item }}}}"]

[stages.named]
foreach = "stages.scan.output.sources"
command = ["echo", "{{{{ item.{field} }}}}"]
"#
        )
    };
    t.write(
        "w.toml",
        &flow("stages.scan.output", "inputs.names", "", "nmae"),
    );
    t.run(["check", "w.toml"])
        .code(2)
        .stderr_has("w.toml:13:11: `foreach` needs a list, but `stages.scan.output` is an object (schemas/scan.schema.json)")
        .stderr_has(r#"help: loop over its list: `foreach = "stages.scan.output.sources"`"#)
        .stderr_has("w.toml:17:11: `foreach` needs a list, but input `names` is a string")
        .stderr_has(r#"`foreach = "inputs.names | split(',')"`"#)
        .stderr_has("w.toml:21:11: `foreach` needs a list, but the output of stage `listing` is text, which would be looped over character by character")
        .stderr_has(r#"give `listing` `output = { format = "lines" }`"#)
        .stderr_has("w.toml:26:29: `item` (an item of `stages.scan.output.sources`, per schemas/scan.schema.json) has no property `nmae`")
        .stderr_has("did you mean `name`?");
    assert!(t.run_ids().is_empty(), "check failed, so nothing ran");

    // The suggestions, taken, check and run: 2 sources, 3 names, 2 lines.
    t.write(
        "w.toml",
        &flow(
            "stages.scan.output.sources",
            "inputs.names | split(',')",
            "\noutput = { format = \"lines\" }",
            "name",
        ),
    );
    t.run(["check", "w.toml"]).code(0);
    t.run(["run", "w.toml"]).code(0);
    let record = t.last_run();
    for (stage, items) in [
        ("by_source", 2),
        ("by_name", 3),
        ("by_line", 2),
        ("named", 2),
    ] {
        assert_eq!(
            record["stages"][stage]["items"], items,
            "{stage}: {record:#}"
        );
    }

    // An object's [key, value] pairs are a list.
    t.write(
        "pairs.toml",
        r#"[stages.scan]
command = ["echo", '{"sources": [], "counts": {"a": 1, "b": 2}}']
output = { format = "json", schema = "scan.schema.json" }

[stages.counts]
foreach = "stages.scan.output.counts"
command = ["echo", "{{ item }}"]
"#,
    );
    t.run(["check", "pairs.toml"]).code(2).stderr_has(
        r#"loop over its [key, value] pairs with `foreach = "stages.scan.output.counts | items"`"#,
    );
    let fixed = t.read("pairs.toml").replace(
        r#"foreach = "stages.scan.output.counts""#,
        r#"foreach = "stages.scan.output.counts | items""#,
    );
    t.write("pairs.toml", &fixed);
    t.run(["run", "pairs.toml"]).code(0);
    assert_eq!(t.last_run()["stages"]["counts"]["items"], 2);
}

#[test]
fn item_fields_of_an_open_schema_are_only_suspected_when_near_a_listed_one() {
    let t = Test::new();
    t.write(
        "schemas/open.schema.json",
        r#"{"type": "array", "items": {"type": "object", "properties": {"source_id": {"type": "string"}}}}"#,
    );
    t.write(
        "w.toml",
        r#"[stages.scan]
command = ["echo", '[{"source_id": "a", "url": "u"}]']
output = { format = "json", schema = "open.schema.json" }

[stages.each]
foreach = "stages.scan.output"
command = ["echo", "{{ item.url }} {{ item.source_di }}"]
"#,
    );
    let out = t.run(["check", "w.toml"]);
    out.code(0)
        .stderr_has("w.toml:7:44: `item` (an item of `stages.scan.output`, per schemas/open.schema.json) has no declared property `source_di` (the schema leaves others open)")
        .stderr_has("did you mean `source_id`?")
        .stderr_has("0 error(s), 1 warning(s)");
    assert!(!out.stderr.contains("`url`"), "{}", out.stderr);
}

#[test]
fn comparisons_that_can_never_hold_and_names_nothing_sets_are_check_errors() {
    let t = Test::new();
    t.write("templates/part.j2", "part");
    t.write(
        "w.toml",
        r#"[stages.confirm]
uses = "ask"
with = { question = "Go?", choices = ["y", "n"], default = "n" }

[stages.go]
if = "stages.confirm.output == 'yes'"
command = ["echo", "{% include 'part.j2' %}{% include 'prat.j2' %}{% include 'extra.j2' ignore missing %}"]
set_state = { last_seen = "{{ now() }}" }

[stages.report]
finally = true
if = "run.status != 'succeded'"
command = ["echo", "{{ run.exit.stag }} {{ run.statuss }} {{ state.last_sene }} status == 'prose'"]

[stages.fine]
if = "stages.go.status == 'skipped' and stages.confirm.output | upper == 'YES' and state.last_seen is defined"
command = ["echo", "{{ run.exit.stage if run.exit else run.status }}"]
"#,
    );
    let out = t.run(["check", "w.toml"]);
    out.code(2)
        .stderr_has("w.toml:6:32: `stages.confirm.output` is never `yes`, so this comparison is always false")
        .stderr_has("it is one of `y`, `n`")
        .stderr_has("w.toml:7:56: template `prat.j2` not found")
        .stderr_has("w.toml:12:21: `run.status` is never `succeded`, so this comparison is always true")
        .stderr_has("did you mean `succeeded`?")
        .stderr_has("w.toml:13:33: `run.exit` has `stage` and `message`, not `stag`")
        .stderr_has("w.toml:13:48: `run` has no field `statuss`")
        .stderr_has("did you mean `status`?")
        .stderr_has("w.toml:13:62: no stage sets `state.last_sene`")
        .stderr_has("did you mean `last_seen`?")
        .stderr_has("w.toml: invalid (6 error(s)");
    assert!(
        !out.stderr.contains("never `prose`") && !out.stderr.contains("extra.j2` not found"),
        "{}",
        out.stderr
    );
}

#[test]
fn sub_workflow_inputs_of_the_wrong_type_and_items_sharing_a_path_are_check_errors() {
    let t = Test::new();
    t.write(
        ".stagegraph/workflows/child.toml",
        r#"[inputs.count]
type = "integer"

[inputs.flag]
type = "boolean"
default = false

[stages.a]
command = ["echo", "{{ inputs.count }}"]
"#,
    );
    t.write(
        "w.toml",
        r#"[workflow]
writes = ["out"]

[stages.sub]
workflow = "child"
with = { count = "3", flag = "{{ 1 == 1 }}" }

[stages.each]
foreach = "[1, 2]"
command = ["echo", "{{ item }}"]
output = { path = "out/all.txt" }
"#,
    );
    let out = t.run(["check", "w.toml"]);
    out.code(2)
        .stderr_has("w.toml:6:18: input `count` of workflow `child` is of type integer, but this is a string")
        .stderr_has("write an integer here: the sub-workflow gets the value as written")
        .stderr_has("w.toml:11:19: every item of `foreach` stage `each` writes the same `output.path`")
        .stderr_has("put `{{ index }}` or a field of `item` in it")
        .stderr_has("w.toml: invalid (2 error(s)");
    // What check refused is what the run would have failed on.
    let fixed = t
        .read("w.toml")
        .replace("count = \"3\"", "count = 3")
        .replace("out/all.txt", "out/{{ index }}.txt");
    t.write("w.toml", &fixed);
    t.run(["run", "w.toml"]).code(0);
    assert_eq!(t.read("out/0.txt").trim(), "1");
    assert_eq!(t.read("out/1.txt").trim(), "2");
}

#[test]
fn a_quoted_string_compared_with_a_boolean_or_a_number_is_a_check_error() {
    let t = Test::new();
    t.write(
        "schemas/gate.schema.json",
        r#"{"type": "object", "additionalProperties": false,
            "properties": {"update": {"type": "boolean"}, "count": {"type": "integer"}, "note": {"type": ["string", "null"]}}}"#,
    );
    t.write(
        "w.toml",
        r#"[stages.gate]
command = ["echo", '{"update": true, "count": 2, "note": "1"}']
output = { format = "json", schema = "gate.schema.json" }
exit_if = "output.update == 'false'"

[stages.next]
if = "stages.gate.output.count != '2' or stages.gate.output.note == '1'"
command = ["echo", "ok"]
"#,
    );
    t.run(["check", "w.toml"])
        .code(2)
        .stderr_has("w.toml:4:29: `output.update` is boolean, never the string `false`, so this comparison is always false")
        .stderr_has("compare with `false` without quotes, or test it plainly")
        .stderr_has("w.toml:7:35: `stages.gate.output.count` is integer, never the string `2`, so this comparison is always true")
        .stderr_has("compare with the number `2`, without quotes")
        .stderr_has("w.toml: invalid (2 error(s)");
}
