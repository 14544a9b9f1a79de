//! Write roots that read a stage's output: known once that stage has finished, admitting
//! nothing before, and `check` proves every stage that writes runs after it.

use crate::support::Test;

const FLOW: &str = r#"
[workflow]
writes = ["{{ stages.find.output.dir }}"]

[inputs.dir]
type = "string"
default = "found"

[stages.find]
template = { inline = "{{ {'dir': inputs.dir} | tojson }}" }
output = { format = "json" }

[stages.write]
after = ["find"]
uses = "fs.write"
with = { path = "{{ stages.find.output.dir }}/note.txt", content = "hi" }

[stages.stray]
after = ["write"]
if = "inputs.dir == 'found'"
uses = "fs.write"
with = { path = "elsewhere/note.txt", content = "no" }
on_error = "continue"
"#;

#[test]
fn a_root_read_from_a_stage_admits_its_folder_once_that_stage_has_run() {
    let t = Test::new();
    t.write("flow.toml", FLOW);
    let out = t.run(["run", "flow.toml"]);
    out.code(0);
    assert_eq!(t.read("found/note.txt"), "hi");
    assert!(!t.exists("elsewhere/note.txt"));
    let record = t.last_run();
    let stray = crate::support::stage(&record, "stray");
    assert_eq!(stray["status"], "failed", "{record:#}");
    let error = stray["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("outside the workflow's writes") && error.contains("/found`"),
        "{error}"
    );
}

#[test]
fn a_root_that_renders_empty_admits_nothing() {
    let t = Test::new();
    t.write("flow.toml", FLOW);
    let out = t.run(["run", "flow.toml", "--input", "dir="]);
    out.code(1);
    let record = t.last_run();
    let error = crate::support::stage(&record, "write")["error"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        error.contains("`writes` entry 0 admits nothing: it renders empty"),
        "{error}"
    );
    assert!(!t.exists("note.txt"));
}

#[test]
fn check_refuses_a_write_that_does_not_run_after_the_stage_its_root_reads() {
    let t = Test::new();
    t.write(
        "flow.toml",
        &FLOW
            .replace("[stages.write]\nafter = [\"find\"]\n", "[stages.write]\n")
            .replace(
                "with = { path = \"{{ stages.find.output.dir }}/note.txt\", content = \"hi\" }",
                "with = { path = \"found/note.txt\", content = \"hi\" }",
            ),
    );
    let out = t.run(["check", "flow.toml"]);
    out.code(2);
    out.stderr_has(
        "stage `write` writes, but does not run after `find`, whose output `[workflow] writes` entry 0 reads",
    );
    out.stderr_has("add `after = [\"find\"]` to `write`");
}
