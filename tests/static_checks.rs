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
