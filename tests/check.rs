//! `stagegraph check`: the fixture workflows under `tests/fixtures/check/workflows/` (a library
//! with its own `schemas/` and `templates/`), each snapshotted as `check --format json`; failing
//! cases are prefixed `err_`. Also the GitHub format, exit codes and the generated format schema.

use serde_json::Value;

use crate::support::{fixtures, repo_root, Test};

/// `check --format json` of one fixture, with the fixture folder's path replaced by `[LIB]`.
fn check_json(name: &str) -> (Option<i32>, Value) {
    let lib = fixtures("check");
    let out = Test::new().run([
        "--library".as_ref(),
        lib.as_os_str(),
        "check".as_ref(),
        "--format".as_ref(),
        "json".as_ref(),
        name.as_ref(),
    ]);
    let text = out.stdout.replace(&lib.display().to_string(), "[LIB]");
    let json = serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("check --format json printed no JSON ({e}):\n{out:?}"));
    (out.code, json)
}

#[test]
fn fixtures_snapshot() {
    insta::glob!("fixtures/check/workflows/*.toml", |path| {
        let name = path
            .file_stem()
            .and_then(|s| s.to_str())
            .expect("a fixture name");
        let (code, json) = check_json(name);
        let errors = json["workflows"][0]["errors"].as_u64().unwrap_or(0);
        if name.starts_with("err_") {
            assert_eq!(code, Some(2), "{name} must fail check: {json:#}");
            assert!(errors > 0, "{name} must report errors: {json:#}");
            for diagnostic in json["diagnostics"].as_array().into_iter().flatten() {
                assert!(
                    diagnostic["line"].as_u64().is_some_and(|l| l > 0),
                    "{name}: every diagnostic points at a line: {diagnostic:#}"
                );
            }
        } else {
            assert_eq!(code, Some(0), "{name} must pass check: {json:#}");
            assert_eq!(errors, 0);
        }
        insta::assert_json_snapshot!(json);
    });
}

/// The diagnostic (line, message, help) whose message contains `needle`; none is a failure.
fn said<'a>(
    found: &'a [(u64, String, Option<String>)],
    needle: &str,
) -> &'a (u64, String, Option<String>) {
    found
        .iter()
        .find(|(_, message, _)| message.contains(needle))
        .unwrap_or_else(|| panic!("nothing says {needle:?}: {found:#?}"))
}

fn messages(json: &Value) -> Vec<(u64, String, Option<String>)> {
    json["diagnostics"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|d| {
            (
                d["line"].as_u64().unwrap_or(0),
                d["message"].as_str().unwrap_or_default().to_string(),
                d["help"].as_str().map(str::to_string),
            )
        })
        .collect()
}

#[test]
fn several_errors_are_reported_in_one_pass_with_their_lines() {
    let (code, json) = check_json("err_several");
    assert_eq!(code, Some(2));
    let mut found = messages(&json);
    found.sort();
    let expected = [
        (8, "unknown input `nmae`", "did you mean `name`?"),
        (11, "unknown stage `greeet`", "did you mean `greet`?"),
        (
            12,
            "environment variable `USER` is not in `[workflow] env`",
            "",
        ),
        (15, "unknown stage `reprot`", "did you mean `report`?"),
    ];
    assert_eq!(found.len(), expected.len(), "{json:#}");
    for ((line, message, help), (want_line, want_message, want_help)) in found.iter().zip(expected)
    {
        assert_eq!(*line, want_line, "{message}");
        assert_eq!(message, want_message);
        assert!(
            help.as_deref().unwrap_or_default().contains(want_help),
            "{message}: help {help:?} lacks {want_help:?}"
        );
    }
}

#[test]
fn cycle_names_every_stage() {
    let (_, json) = check_json("err_cycle");
    let found = messages(&json);
    let cycle = found
        .iter()
        .find(|(_, m, _)| m.contains("cycle"))
        .unwrap_or_else(|| panic!("no cycle reported: {json:#}"));
    for stage in ["first", "second", "third"] {
        assert!(cycle.1.contains(stage), "{} lacks `{stage}`", cycle.1);
    }
}

#[test]
fn github_format_is_one_annotation_per_problem() {
    let lib = fixtures("check");
    let t = Test::new();
    let out = t.run([
        "--library".as_ref(),
        lib.as_os_str(),
        "check".as_ref(),
        "--format".as_ref(),
        "github".as_ref(),
        "err_several".as_ref(),
        "err_toml_syntax".as_ref(),
    ]);
    out.code(2);
    let annotation =
        regex::Regex::new(r"^::error file=([^,]+),line=(\d+),col=(\d+)::(.+)$").expect("a regex");
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(lines.len(), 5, "{}", out.stdout);
    let mut seen = Vec::new();
    for line in &lines {
        let caps = annotation
            .captures(line)
            .unwrap_or_else(|| panic!("not a GitHub annotation: {line}"));
        let file = std::path::Path::new(&caps[1]);
        assert!(file.is_file(), "the annotation names a real file: {line}");
        seen.push((
            file.file_name()
                .and_then(|n| n.to_str())
                .unwrap_or_default()
                .to_string(),
            caps[2].parse::<u32>().expect("a line"),
            caps[3].parse::<u32>().expect("a column"),
        ));
    }
    seen.sort();
    assert_eq!(
        seen,
        [
            ("err_several.toml".to_string(), 8, 24),
            ("err_several.toml".to_string(), 11, 10),
            ("err_several.toml".to_string(), 12, 24),
            ("err_several.toml".to_string(), 15, 27),
            ("err_toml_syntax.toml".to_string(), 2, 40),
        ]
    );
    assert!(
        out.stdout.contains("(help: did you mean `greet`?)"),
        "{}",
        out.stdout
    );
}

#[test]
fn valid_workflow_exits_zero_in_every_format() {
    let lib = fixtures("check");
    let t = Test::new();
    for format in ["text", "json", "github"] {
        let out = t.run([
            "--library".as_ref(),
            lib.as_os_str(),
            "check".as_ref(),
            "--format".as_ref(),
            format.as_ref(),
            "ok_valid".as_ref(),
        ]);
        out.code(0);
        if format == "github" {
            assert_eq!(out.stdout, "", "no annotation for a valid workflow");
        }
    }
}

#[test]
fn text_format_shows_a_snippet_and_a_suggestion() {
    let lib = fixtures("check");
    let out = Test::new().run([
        "--library".as_ref(),
        lib.as_os_str(),
        "check".as_ref(),
        "err_unknown_after".as_ref(),
    ]);
    out.code(2)
        .stderr_has("err_unknown_after.toml:5:10: unknown stage `gaet`")
        .stderr_has(r#"after = ["gaet"]"#)
        .stderr_has("did you mean `gate`?")
        .stderr_has("err_unknown_after: invalid (1 error(s)");
}

#[test]
fn a_file_path_is_checked_directly() {
    let t = Test::new();
    t.write(
        "flow.toml",
        "[stages.a]\ncommand = [\"true\"]\n[stages.b]\nafter = [\"c\"]\ncommand = [\"true\"]\n",
    );
    t.run(["check", "flow.toml"])
        .code(2)
        .stderr_has("flow.toml:4:10: unknown stage `c`");
    t.write("flow.toml", "[stages.a]\ncommand = [\"true\"]\n");
    t.run(["check", "flow.toml"]).code(0);
}

/// The JSON Schema of the format, as the binary prints it.
fn printed_schema() -> String {
    let out = Test::new().run(["schema", "workflow"]);
    out.code(0);
    out.stdout
}

#[test]
fn checked_in_workflow_schema_is_current() {
    let path = repo_root().join("schemas").join("workflow.schema.json");
    let checked_in = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        checked_in == printed_schema(),
        "schemas/workflow.schema.json is stale; regenerate it with \
         `stagegraph schema workflow > schemas/workflow.schema.json`"
    );
}

/// Every workflow the project ships, and every valid workflow its tests use, validates against
/// the checked-in schema.
#[test]
fn workflows_validate_against_the_schema() {
    let schema: Value = serde_json::from_str(&printed_schema()).expect("the schema is JSON");
    let validator = jsonschema::validator_for(&schema).expect("the schema compiles");
    let mut files: Vec<std::path::PathBuf> = Vec::new();
    for folder in [
        repo_root().join("workflows"),
        fixtures("run").join("workflows"),
    ] {
        for entry in walkdir::WalkDir::new(folder).into_iter().flatten() {
            let test_file = entry
                .path()
                .to_string_lossy()
                .ends_with(stagegraph::TEST_SUFFIX);
            if entry.path().extension().is_some_and(|e| e == "toml") && !test_file {
                files.push(entry.path().to_path_buf());
            }
        }
    }
    files.push(fixtures("check").join("workflows").join("ok_valid.toml"));
    assert!(files.len() > 5, "found too few workflows: {files:?}");
    for file in &files {
        let text = std::fs::read_to_string(file).expect("read a workflow");
        let doc: Value =
            toml::from_str(&text).unwrap_or_else(|e| panic!("{} is not TOML: {e}", file.display()));
        let problems: Vec<String> = validator
            .iter_errors(&doc)
            .map(|e| format!("{}: {e}", e.instance_path()))
            .collect();
        assert!(
            problems.is_empty(),
            "{} does not validate:\n{}",
            file.display(),
            problems.join("\n")
        );
    }
    // And the schema has teeth: a typo'd stage key is rejected.
    let bad: Value =
        toml::from_str("[stages.a]\ncommand = [\"true\"]\nexit_iff = \"x\"\n").expect("valid TOML");
    assert!(!validator.is_valid(&bad));
}

/// Every diagnostic of a fixture as (file name, line, column, help).
fn places(name: &str) -> Vec<(String, u64, u64, String)> {
    let (code, json) = check_json(name);
    assert_eq!(code, Some(2), "{json:#}");
    let mut out: Vec<(String, u64, u64, String)> = json["diagnostics"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|d| {
            let file = d["file"].as_str().unwrap_or_default();
            let file = file.rsplit('/').next().unwrap_or_default().to_string();
            (
                file,
                d["line"].as_u64().unwrap_or(0),
                d["column"].as_u64().unwrap_or(0),
                d["help"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    out.sort();
    out
}

fn place(file: &str, line: u64, column: u64, help: &str) -> (String, u64, u64, String) {
    (file.to_string(), line, column, help.to_string())
}

#[test]
fn a_field_no_schema_branch_has_is_an_error_at_the_field() {
    let toml = "err_schema_branches.toml";
    assert_eq!(
        places("err_schema_branches"),
        [
            place(toml, 7, 50, "did you mean `path`?"),
            place(toml, 10, 50, "did you mean `href`?"),
            place(toml, 13, 48, "did you mean `size`?"),
            place(toml, 16, 49, "did you mean `title`?"),
        ]
    );
}

#[test]
fn a_path_is_checked_past_indexes_and_quoted_keys() {
    let toml = "err_index_chains.toml";
    assert_eq!(
        places("err_index_chains"),
        [
            place(toml, 7, 59, "did you mean `size`?"),
            place(toml, 10, 51, "did you mean `name`?"),
            place(toml, 13, 52, "did you mean `href`?"),
        ]
    );
}

#[test]
fn each_occurrence_is_reported_at_its_own_line() {
    let properties = "properties: name, size";
    assert_eq!(
        places("err_template_lines"),
        [
            place("err_template_lines.toml", 14, 33, "did you mean `name`?"),
            place("lines.md.j2", 7, 40, properties),
            place("lines.md.j2", 8, 39, properties),
        ]
    );
}

#[test]
fn included_files_are_checked_at_their_own_lines() {
    let found = places("err_includes");
    assert_eq!(found.len(), 2, "{found:?}");
    assert_eq!(
        found[0].0, "middle.md.j2",
        "the missing file is named where it is included"
    );
    assert_eq!((found[0].1, found[0].2), (1, 12));
    // The partial included twice is reported once.
    assert_eq!(
        found[1],
        place("scan_typo.md.j2", 3, 28, "did you mean `size`?")
    );
}

#[test]
fn what_a_partial_reads_orders_the_stage_that_includes_it() {
    let (_, json) = check_json("err_include_edge");
    let found = messages(&json);
    assert!(
        found
            .iter()
            .any(|(_, m, _)| m.contains("cycle") && m.contains("report") && m.contains("scan")),
        "{json:#}"
    );
    let lib = fixtures("check");
    let out = Test::new().run([
        "--library".as_ref(),
        lib.as_os_str(),
        "plan".as_ref(),
        "--format".as_ref(),
        "json".as_ref(),
        "ok_includes".as_ref(),
    ]);
    out.code(0);
    let plan: Value = serde_json::from_str(&out.stdout).expect("a JSON plan");
    assert_eq!(plan["waves"][0], serde_json::json!(["scan"]), "{plan:#}");
    assert!(
        plan["waves"][1]
            .as_array()
            .is_some_and(|w| w.iter().any(|s| s == "report")),
        "{plan:#}"
    );
}

#[test]
fn a_cycle_of_sub_workflows_by_path_is_named_in_check_plan_and_dry_run() {
    let t = Test::new();
    t.write(
        "subflows/ping.toml",
        "[stages.call]\nworkflow = \"subflows/pong.toml\"\n",
    )
    .write(
        "subflows/pong.toml",
        "[stages.call]\nworkflow = \"./subflows/ping.toml\"\n",
    )
    .write(
        "flow.toml",
        "[stages.start]\nworkflow = \"subflows/ping.toml\"\n",
    );
    for command in [&["check"][..], &["plan"], &["run", "--dry-run"]] {
        let mut args: Vec<&str> = command.to_vec();
        args.push("flow.toml");
        let out = t.run(args);
        out.code(2).stderr_has(
            "pong.toml:2:12: workflow `./subflows/ping.toml` calls itself: \
             flow -> subflows/ping.toml -> subflows/pong.toml -> ./subflows/ping.toml",
        );
        assert!(
            !out.stderr.contains("overflow"),
            "{command:?}: {}",
            out.stderr
        );
    }
}

#[test]
fn a_sub_workflow_not_found_is_one_error_at_its_name() {
    let t = Test::new();
    t.write(
        "flow.toml",
        "[stages.start]\nworkflow = \"nope\"\n\n[stages.next]\ncommand = [\"echo\", \"{{ stages.start.output.x }}\"]\n",
    );
    let out = t.run(["check", "--format", "github", "flow.toml"]);
    out.code(2);
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(lines.len(), 1, "{}", out.stdout);
    assert!(
        lines[0].starts_with("::error file=flow.toml,line=2,col=12::no workflow named `nope`"),
        "{}",
        out.stdout
    );
}

#[test]
fn a_test_file_given_to_check_is_skipped_and_named() {
    let test = Test::new();
    test.write("w.toml", "[stages.a]\ncommand = [\"true\"]\n");
    test.write(
        "w.test.toml",
        "workflow = \"w.toml\"\n\n[[case]]\nname = \"runs\"\n",
    );
    let out = test.run(["check", "w.toml", "w.test.toml"]);
    out.code(0)
        .stderr_has("w.test.toml: a test file, skipped")
        .stderr_has("w.toml: ok");
}

/// `check --format github` of each overlay fixture under `tests/fixtures/annotations/`, run
/// from that folder as from a repository's root: every annotation names a file of the
/// repository, relative and normalized (never `<built-in>/...` nor `workflows/../...`), and a
/// problem an overlay causes in its base is annotated at the overlay's line.
#[test]
fn github_annotations_land_on_repository_files() {
    insta::glob!("fixtures/annotations/workflows/*.toml", |path| {
        let name = path
            .file_name()
            .and_then(|s| s.to_str())
            .expect("a fixture name");
        let t = Test::new();
        crate::support::copy_tree(&fixtures("annotations"), t.root());
        let out = t.run(["check", "--format", "github", &format!("workflows/{name}")]);
        let lines: Vec<&str> = out.stdout.lines().collect();
        if name.starts_with("err_") {
            assert_eq!(out.code, Some(2), "{name}: {out:?}");
            assert!(!lines.is_empty(), "{name}: no annotation");
        } else {
            assert_eq!(out.code, Some(0), "{name}: {out:?}");
        }
        for line in &lines {
            let file = line
                .strip_prefix("::error file=")
                .and_then(|rest| rest.split(',').next())
                .unwrap_or_else(|| panic!("{name}: an annotation without a file: {line}"));
            assert!(
                !file.contains("..") && !file.starts_with('/') && t.path(file).is_file(),
                "{name}: {file} is not a file of the repository: {line}"
            );
        }
        insta::assert_snapshot!(out.stdout);
    });
}

/// A stage whose `uses` or `workflow` names nothing still counts with what its `with` reads:
/// the cycle through it and the field read of a text output are reported beside the names.
#[test]
fn what_a_stage_with_a_wrong_name_reads_is_still_checked() {
    let (code, json) = check_json("err_cycle_through_unknown");
    assert_eq!(code, Some(2));
    let found = messages(&json);
    let has = |want: &str| found.iter().any(|(_, m, _)| m.contains(want));
    for want in [
        "unknown built-in `json.parse`",
        "no_such_workflow",
        "dependency cycle",
        "has no field `title`",
    ] {
        assert!(has(want), "no diagnostic with {want:?}: {found:#?}");
    }
}

/// `if = "{{ x }}"` (GitHub Actions' habit) is named for what it is, with the expression to
/// write instead, not left to the expression parser's "unexpected `}`".
#[test]
fn an_expression_in_braces_says_to_drop_them() {
    let (code, json) = check_json("err_expression_in_braces");
    assert_eq!(code, Some(2));
    let found = messages(&json);
    for (field, expression, braces) in [
        ("stages.greet.if", "inputs.enabled", "{{ }}"),
        ("stages.each.foreach", "[1, 2, 3]", "{{ }}"),
        (
            "stages.stop.exit_if",
            "stages.greet.output == 'hello'",
            "{{ }}",
        ),
        ("stages.last.if", "inputs.enabled", "${{ }}"),
    ] {
        let (_, message, help) = said(&found, &format!("`{field}`"));
        assert!(
            message.ends_with(&format!("without `{braces}`")),
            "{message}"
        );
        assert_eq!(
            help.as_deref(),
            Some(format!("write the expression alone: \"{expression}\"").as_str())
        );
    }
    assert!(
        !found.iter().any(|(_, m, _)| m.contains("unexpected")),
        "the parser's error shows through: {found:#?}"
    );
}

/// `${{ x }}` in a script or a command is GitHub Actions' spelling, whose `$` would stay in
/// the text: a warning at each, with the template to write; text that is no code is left alone.
#[test]
fn a_dollar_before_a_template_in_code_is_a_warning() {
    let (code, json) = check_json("warn_dollar_before_template");
    assert_eq!(code, Some(0), "{json:#}");
    let found = messages(&json);
    let warned: Vec<u64> = found
        .iter()
        .filter(|(_, m, _)| m.contains("GitHub Actions' spelling"))
        .map(|(line, _, _)| *line)
        .collect();
    assert_eq!(warned, [13, 16], "{found:#?}");
    assert!(found.iter().any(|(_, _, help)| help
        .as_deref()
        .is_some_and(|h| h.contains("`{{ inputs.name }}` is the value"))));
    assert_eq!(json["workflows"][0]["warnings"], 2, "{json:#}");
}

/// A key another pipeline tool uses (`needs`, `run`, `working-directory`) is named with this
/// format's key, and a GitHub Actions context a template reads (`needs`, `secrets`, `matrix`)
/// with what stands for it here: no edit distance would find either.
#[test]
fn a_key_of_another_tool_is_named_with_ours() {
    let (code, json) = check_json("err_keys_of_other_tools");
    assert_eq!(code, Some(2));
    let found = messages(&json);
    for (key, ours) in [
        ("needs", "after"),
        ("run", "shell"),
        ("working-directory", "cwd"),
        ("continue-on-error", "on_error"),
    ] {
        let (_, _, help) = said(&found, &format!("unknown key `{key}`"));
        assert_eq!(
            help.as_deref(),
            Some(format!("this format calls it `{ours}`").as_str())
        );
    }
    for (root, ours) in [
        ("needs", "`stages.<id>.output`"),
        ("secrets", "`env.NAME`"),
        ("matrix", "`item`"),
    ] {
        let (_, _, help) = said(&found, &format!("undefined variable `{root}`"));
        assert!(
            help.as_deref().is_some_and(|help| help.contains(ours)),
            "`{root}`: {help:?}"
        );
    }
}

/// A value of the wrong type or shape comes with the value as the format wants it: converted
/// where that is plain, else the format's own example of the key.
#[test]
fn a_value_of_the_wrong_shape_is_shown_written_right() {
    let (code, json) = check_json("err_value_shapes");
    assert_eq!(code, Some(2));
    let found = messages(&json);
    for (line, want) in [
        (5, "write `output = { format = \"json\" }`"),
        (
            6,
            "written as `cache = true` or `{ key = \"template\", ttl = \"7d\" }`",
        ),
        (7, "write `timeout = \"30s\"`"),
        (11, "write `after = [\"fetch\"]`"),
        (12, "write `retries = 3`"),
        // A table of one key: the string alone, or the table's nearest key.
        (15, "write `template = \"page.j2\"`"),
        (18, "write `template = { inline = \"a note\" }`"),
    ] {
        let (_, message, help) = found
            .iter()
            .find(|(l, _, _)| *l == line)
            .unwrap_or_else(|| panic!("nothing at line {line}: {found:#?}"));
        assert_eq!(help.as_deref(), Some(want), "line {line}: {message}");
    }
}

/// A key or a table set twice is named, with the line that set it first: the parser says only
/// "duplicate key".
#[test]
fn a_key_set_twice_names_the_first_line() {
    let (code, json) = check_json("err_duplicate_key");
    assert_eq!(code, Some(2));
    let found = messages(&json);
    assert_eq!(
        found,
        [(
            7,
            "invalid TOML: `shell` is set twice".to_string(),
            Some(
                "it is first set at line 5; a TOML document sets each key and table once: keep one"
                    .to_string()
            )
        )]
    );
    let t = crate::support::Test::new();
    t.write(
        "twice.toml",
        "[stages.a]\nshell = \"echo a\"\n\n[stages.b]\nshell = \"echo b\"\n\n[stages.a]\ncommand = [\"true\"]\n",
    );
    let out = t.run(["check", "twice.toml"]);
    assert_eq!(out.code, Some(2));
    assert!(
        out.stderr.contains("table `stages.a` is set twice")
            && out.stderr.contains("it is first set at line 1"),
        "{}",
        out.stderr
    );
}

/// A key of another table of the format is named with the table it belongs in: `extends` at
/// the top is `[workflow] extends`; `[workflow] name` is told where a workflow's name comes from.
#[test]
fn a_key_in_the_wrong_table_names_its_table() {
    let (code, json) = check_json("err_key_in_wrong_table");
    assert_eq!(code, Some(2));
    let found = messages(&json);
    let help_of = |key: &str| {
        said(&found, &format!("unknown key `{key}`"))
            .2
            .clone()
            .unwrap_or_default()
    };
    assert_eq!(help_of("extends"), "`extends` belongs in `[workflow]`");
    assert_eq!(
        help_of("always_exit_zero"),
        "`always_exit_zero` belongs in `[workflow]`"
    );
    assert_eq!(
        help_of("name"),
        "a workflow is named by its file: this one is `err_key_in_wrong_table`"
    );
}
