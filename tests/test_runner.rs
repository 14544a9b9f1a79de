//! `stagegraph test`: cases over recordings, paying only for requests that changed.

use crate::support::{copy_tree, Test};

/// A scripted model that counts its calls (a line each in `models/calls`) and answers the
/// prompt upper-cased.
const COUNTING_MODEL: &str = "echo call >> \"$(dirname \"$0\")/calls\"\ntr a-z A-Z\n";

/// A chain of prompts `a -> b -> c` and a prompt `d` that reads none of them.
const CHAIN: &str = r#"
[inputs.topic]
type = "string"

[stages.a]
prompt = { inline = "first about {{ inputs.topic }}" }
model = "counted"

[stages.b]
prompt = { inline = "second after {{ stages.a.output | trim }}" }
model = "counted"

[stages.c]
prompt = { inline = "third after {{ stages.b.output | trim }}" }
model = "counted"

[stages.d]
prompt = { inline = "aside on {{ inputs.topic }}" }
model = "counted"

[outputs]
last = "{{ stages.c.output | trim }}"
aside = "{{ stages.d.output | trim }}"
"#;

const CHAIN_TESTS: &str = r#"
workflow = "chain.toml"

[[case]]
name = "tea"
inputs = { topic = "tea" }
[case.expect]
outputs = { aside = "ASIDE ON TEA" }
assert = ["outputs.last | length > 10", "stages.a.output | trim == 'FIRST ABOUT TEA'"]

[[case]]
name = "toml"
inputs = { topic = "toml" }
[case.expect]
assert = ["'THIRD' in outputs.last"]
"#;

fn chain_project(test: &Test) {
    test.write("models/count.sh", COUNTING_MODEL);
    let script = test.path("models/count.sh");
    test.write(
        "stagegraph.toml",
        &format!(
            "[models.counted]\nprovider = \"command\"\ncommand = [\"sh\", \"{}\"]\n",
            script.display()
        ),
    );
    test.write("chain.toml", CHAIN);
    test.write("chain.test.toml", CHAIN_TESTS);
}

#[test]
fn record_asks_the_model_only_for_the_edited_stage_and_those_downstream() {
    let test = Test::new();
    chain_project(&test);

    // Offline with no recordings: each case fails, naming the stage and the remedy.
    let offline = test.run(["test"]);
    offline.code(1);
    assert!(offline.stdout.contains("FAIL"), "{}", offline.stdout);
    assert!(
        offline.stdout.contains("was never recorded") && offline.stdout.contains("--record"),
        "{}",
        offline.stdout
    );
    assert_eq!(test.count("models/calls"), 0, "offline asked the model");

    // The first --record pays for every request: 4 stages x 2 cases.
    let first = test.run(["test", "--record"]);
    first.code(0);
    assert_eq!(test.count("models/calls"), 8);
    assert!(
        first.stdout.contains("2 passed, 0 failed"),
        "{}",
        first.stdout
    );
    assert!(
        first.stdout.contains("model calls made: 8"),
        "{}",
        first.stdout
    );
    let recorded = std::fs::read_dir(test.path("recordings/chain"))
        .unwrap()
        .count();
    assert_eq!(recorded, 8);

    // Replayed: every case passes and the model is not asked.
    let replayed = test.run(["test"]);
    replayed.code(0);
    assert!(
        replayed.stdout.contains("model calls made: 0"),
        "{}",
        replayed.stdout
    );
    assert_eq!(test.count("models/calls"), 8);

    // An edit of `b`'s prompt: offline, the case fails at `b` and says what changed.
    test.write("chain.toml", &CHAIN.replace("second after", "then after"));
    let edited = test.run(["test"]);
    edited.code(1);
    assert!(
        edited.stdout.contains("stage `b` failed") && edited.stdout.contains("differs in prompt"),
        "{}",
        edited.stdout
    );
    assert!(edited.stdout.contains("+ then after"), "{}", edited.stdout);
    // --record pays for `b` and `c` only, in each case; `a` and `d` replay.
    let rerecorded = test.run(["test", "--record"]);
    rerecorded.code(0);
    assert_eq!(test.count("models/calls"), 8 + 4);
    assert!(
        rerecorded.stdout.contains("model calls made: 4"),
        "{}",
        rerecorded.stdout
    );
    // --rerecord renews them all.
    test.run(["test", "--rerecord"]).code(0);
    assert_eq!(test.count("models/calls"), 12 + 8);
}

#[test]
fn recordings_replay_from_another_checkout() {
    let made = Test::new();
    chain_project(&made);
    made.run(["test", "--record"]).code(0);
    // The same project elsewhere, its model script at another absolute path.
    let elsewhere = Test::new();
    copy_tree(made.root(), &elsewhere.path("checkout"));
    let root = elsewhere.path("checkout");
    let script = root.join("models/count.sh");
    std::fs::write(
        root.join("stagegraph.toml"),
        format!(
            "[models.counted]\nprovider = \"command\"\ncommand = [\"sh\", \"{}\"]\n",
            script.display()
        ),
    )
    .unwrap();
    std::fs::remove_file(root.join("models/calls")).unwrap();
    let replayed = elsewhere.command(["test"]).cwd(&root).output();
    replayed.code(0);
    assert!(replayed.stdout.contains("2 passed"), "{}", replayed.stdout);
    assert!(!root.join("models/calls").exists(), "the model was asked");
}

const GATED: &str = r#"
[workflow]
writes = ["out"]

[inputs.name]
type = "string"

[stages.facts]
command = ["echo", "{{ inputs.name }} writes TOML"]

[stages.gate]
command = ["echo", "{\"go\": true}"]
output = { format = "json" }
exit_if = "not output.go"
exit_message = "nothing to do"

[stages.write]
after = ["gate"]
command = ["sh", "-c", "mkdir -p out && printf '%s\n' \"$1\" \"second line\" > out/hello.txt", "sh", "HELLO {{ stages.facts.output | trim }}"]

[outputs]
text = "{{ stages.facts.output | trim }}\nend"
"#;

#[test]
fn given_outputs_exits_files_and_a_wrong_expectation_with_its_diff() {
    let test = Test::new();
    test.write("gated.toml", GATED);
    test.write(
        "gated.test.toml",
        r##"workflow = "gated.toml"

[[case]]
name = "writes the file"
inputs = { name = "ada" }
files = { "notes/a.md" = "# A\n" }
[case.expect]
outputs = { text = "ada writes TOML\nend" }
files = { "out/hello.txt" = { contains = "HELLO ada" }, "notes/a.md" = "# A\n" }

[[case]]
name = "the gate closes"
inputs = { name = "bob" }
[case.stages.gate]
output = { go = false }
[case.expect]
status = "exited"
exit_stage = "gate"
files = { "out/hello.txt" = { absent = true } }

[[case]]
name = "given facts"
inputs = { name = "cy" }
[case.stages.facts]
output = "cy reads YAML"
[case.expect]
outputs = { text = "cy writes TOML\nend" }
assert = ["stages.facts.output == 'cy writes'"]
"##,
    );
    let junit = test.path("report.xml");
    let out = test.run([
        "test".as_ref(),
        "--junit".as_ref(),
        junit.as_os_str(),
        "--format".as_ref(),
        "github".as_ref(),
    ]);
    out.code(1);
    assert!(out.stdout.contains("PASS [") && out.stdout.contains("writes the file"));
    assert!(out.stdout.contains("the gate closes"), "{}", out.stdout);
    assert!(out.stdout.contains("2 passed, 1 failed"), "{}", out.stdout);
    // The diff of a text output, and the failed assertion with the values it read.
    assert!(
        out.stdout
            .contains("--- FAIL: gated.test.toml: given facts (gated.test.toml:22:8)"),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout.contains("- cy writes TOML") && out.stdout.contains("+ cy reads YAML"),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout
            .contains("assert `stages.facts.output == 'cy writes'` is false\n    stages.facts.output = \"cy reads YAML\""),
        "{}",
        out.stdout
    );
    // An annotation at the failed case's line.
    assert!(
        out.stdout.contains(
            "::error file=gated.test.toml,line=22,col=8,title=test case `given facts` failed::"
        ),
        "{}",
        out.stdout
    );
    // JUnit: valid XML, a testcase per case, the failed one with its failure.
    let xml = std::fs::read_to_string(&junit).unwrap();
    let doc = roxmltree::Document::parse(&xml).expect("valid XML");
    let cases: Vec<_> = doc
        .descendants()
        .filter(|node| node.has_tag_name("testcase"))
        .collect();
    assert_eq!(cases.len(), 3);
    let failed: Vec<&str> = cases
        .iter()
        .filter(|case| case.children().any(|c| c.has_tag_name("failure")))
        .filter_map(|case| case.attribute("name"))
        .collect();
    assert_eq!(failed, ["given facts"]);
}

#[test]
fn an_invalid_test_file_exits_2_at_its_line() {
    let test = Test::new();
    test.write("gated.toml", GATED);
    test.write(
        "bad.test.toml",
        r#"workflow = "gated.toml"

[[case]]
name = "typos"
inputs = { nam = "ada" }
[case.stages.gates]
output = { go = false }
[case.expect]
outputs = { txt = "x" }
"#,
    );
    let out = test.run(["test", "bad.test.toml"]);
    out.code(2);
    out.stderr_has("bad.test.toml:5:12: workflow `gated` has no input `nam`")
        .stderr_has("did you mean `name`?")
        .stderr_has("bad.test.toml:6:14: workflow `gated` has no stage `gates`")
        .stderr_has("did you mean `gate`?")
        .stderr_has("bad.test.toml:9:13: workflow `gated` declares no output `txt`");
    test.write(
        "bad.test.toml",
        "workflow = \"gated.toml\"\n[[case]]\nname = \"x\"\nbogus = 1\n",
    );
    let out = test.run(["test", "bad.test.toml"]);
    out.code(2);
    out.stderr_has("bad.test.toml:4:1: unknown field `bogus`");
}

#[test]
fn eject_copies_the_tests_and_an_edit_of_the_copy_shows_which_stage_changed() {
    let test = Test::new();
    test.run(["eject", "context-update"]).code(0);
    assert!(test.exists(".stagegraph/workflows/context-update.test.toml"));
    let recordings =
        std::fs::read_dir(test.path(".stagegraph/workflows/recordings/context-update"))
            .expect("the recordings are copied")
            .count();
    assert!(recordings >= 4, "{recordings} recordings");
    // The copy's own tests, found beside it on the search path, pass offline.
    let out = test.run(["test"]);
    out.code(0);
    assert!(out.stdout.contains("7 passed, 0 failed"), "{}", out.stdout);
    // An edit of the copy's gate prompt fails the cases that reach the gate, at the gate.
    let gate = ".stagegraph/templates/context-update/gate.md.j2";
    test.write(
        gate,
        &test
            .read(gate)
            .replace("a short catalog", "a brief catalog"),
    );
    let out = test.run(["test"]);
    out.code(1);
    assert!(
        out.stdout.contains("stage `gate` failed") && out.stdout.contains("differs in prompt"),
        "{}",
        out.stdout
    );
    assert!(out.stdout.contains("5 passed, 2 failed"), "{}", out.stdout);

    // --record through the scripted models the shipped cases were recorded with, counted: only
    // the edited gate is asked (once in each of the two cases that reach it); the writer after
    // it gets the same verdict, so its request is unchanged and replays.
    let reply = crate::support::fixtures("shipped-models/reply.py");
    test.write(
        "models/count.sh",
        &format!(
            "echo \"$1\" >> \"$(dirname \"$0\")/calls\"\nexec python3 '{}'\n",
            reply.display()
        ),
    );
    let count = test.path("models/count.sh");
    test.write(
        "models.toml",
        &format!(
            "[models.haiku]\nprovider = \"command\"\ncommand = [\"sh\", \"{0}\", \"haiku\"]\nmodel = \"haiku\"\n\n\
             [models.sonnet]\nprovider = \"command\"\ncommand = [\"sh\", \"{0}\", \"sonnet\"]\nmodel = \"sonnet\"\n",
            count.display()
        ),
    );
    let config = test.path("models.toml");
    let out = test
        .command(["test", "--record"])
        .env("STAGEGRAPH_CONFIG", &config.display().to_string())
        .output();
    out.code(0);
    assert_eq!(test.read("models/calls"), "haiku\nhaiku\n");
    assert!(out.stdout.contains("7 passed, 0 failed"), "{}", out.stdout);
    assert!(out.stdout.contains("model calls made: 2"), "{}", out.stdout);
    test.run(["test"]).code(0);
}

#[test]
fn a_base_workflows_tests_run_against_an_overlay() {
    let test = Test::new();
    // An overlay that changes what the toggle says.
    test.write(
        ".stagegraph/workflows/my-context.toml",
        "[workflow]\nextends = \"context-update\"\n\n[stages.toggle]\nexit_message = \"switched off here\"\n",
    );
    let tests = crate::support::repo_root().join("workflows/context-update.test.toml");
    let out = test.run([
        "test".as_ref(),
        "--workflow".as_ref(),
        "my-context".as_ref(),
        tests.as_os_str(),
    ]);
    out.code(1);
    // The cases the overlay does not touch still pass; the toggle's messages do not.
    assert!(out.stdout.contains("5 passed, 2 failed"), "{}", out.stdout);
    assert!(
        out.stdout.contains(
            "assert `run.exit.message == 'background context is disabled in CLAUDE.md'` is false"
        ),
        "{}",
        out.stdout
    );
}

#[test]
fn a_cases_environment_reaches_its_commands_and_its_files_stay_its_own() {
    let test = Test::new();
    test.write(
        "env.toml",
        "[stages.greeting]\ncommand = [\"sh\", \"-c\", \"printf '%s' \\\"$GREETING\\\"; cat note.txt\"]\n\n[outputs]\nsaid = \"{{ stages.greeting.output }}\"\n",
    );
    test.write(
        "env.test.toml",
        r#"workflow = "env.toml"

[[case]]
name = "hello"
env = { GREETING = "hello " }
files = { "note.txt" = "from one" }
[case.expect]
outputs = { said = "hello from one" }

[[case]]
name = "bye"
env = { GREETING = "bye " }
files = { "note.txt" = "from two" }
[case.expect]
outputs = { said = "bye from two" }
"#,
    );
    let out = test.run(["test", "--jobs", "2"]);
    out.code(0);
    assert!(out.stdout.contains("2 passed, 0 failed"), "{}", out.stdout);
    assert!(
        !test.exists("note.txt"),
        "a case wrote into the project itself"
    );
}

#[test]
fn repeat_passes_a_case_when_enough_of_its_runs_pass() {
    let test = Test::new();
    // A live model whose second reply of three is wrong.
    test.write(
        "models/flaky.sh",
        "n=$(cat \"$(dirname \"$0\")/n\" 2>/dev/null || echo 0); n=$((n + 1)); echo $n > \"$(dirname \"$0\")/n\"\nif [ $n -eq 2 ]; then echo bad; else echo good; fi\n",
    );
    test.write(
        "stagegraph.toml",
        &format!(
            "[models.flaky]\nprovider = \"command\"\ncommand = [\"sh\", \"{}\"]\n",
            test.path("models/flaky.sh").display()
        ),
    );
    test.write(
        "ask.toml",
        "[stages.ask]\nprompt = { inline = \"say good\" }\nmodel = \"flaky\"\n\n[outputs]\nsaid = \"{{ stages.ask.output | trim }}\"\n",
    );
    test.write(
        "ask.test.toml",
        "workflow = \"ask.toml\"\n\n[[case]]\nname = \"says good\"\n[case.expect]\noutputs = { said = \"good\" }\n",
    );
    let out = test.run(["test", "--rerecord", "--repeat", "3", "--min-pass", "2"]);
    out.code(0);
    assert!(
        out.stdout.contains("says good (2 of 3 runs passed)"),
        "{}",
        out.stdout
    );
    std::fs::remove_file(test.path("models/n")).unwrap();
    let out = test.run(["test", "--rerecord", "--repeat", "3"]);
    out.code(1);
    assert!(
        out.stdout
            .contains("passed 2 of 3 runs; --min-pass asks for 3"),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout.contains("+ \"bad\"") || out.stdout.contains("got      \"bad\""),
        "{}",
        out.stdout
    );
}

#[test]
fn a_given_output_its_stage_schema_refuses_fails_the_case() {
    let test = Test::new();
    test.write(
        "lib/schemas/count.schema.json",
        r#"{"type": "object", "required": ["n"], "properties": {"n": {"type": "integer"}}}"#,
    );
    test.write(
        "lib/workflows/count.toml",
        "[stages.count]\ncommand = [\"echo\", \"{\\\"n\\\": 1}\"]\noutput = { format = \"json\", schema = \"count.schema.json\" }\n\n[outputs]\nn = \"{{ stages.count.output.n }}\"\n",
    );
    test.write(
        "lib/workflows/count.test.toml",
        r#"workflow = "count.toml"

[[case]]
name = "a count the schema admits"
[case.stages.count]
output = { n = 2 }
[case.expect]
outputs = { n = 2 }

[[case]]
name = "a count it refuses"
[case.stages.count]
output = { n = "two" }
[case.expect]
outputs = { n = "two" }
"#,
    );
    let out = test.run(["test", "lib/workflows"]);
    out.code(1);
    assert!(out.stdout.contains("1 passed, 1 failed"), "{}", out.stdout);
    assert!(
        out.stdout
            .contains("--- FAIL: lib/workflows/count.test.toml: a count it refuses")
            && out.stdout.contains("stage `count` failed"),
        "{}",
        out.stdout
    );
}
