//! `plan --explain` / `run --explain`: which stages a run would reuse, and why not.

use crate::support::Test;

const WORKFLOW: &str = r#"
[inputs.n]
type = "integer"
default = 1

[stages.a]
command = ["sh", "-c", "echo a{{ inputs.n }} >> calls.txt; echo a{{ inputs.n }}"]
cache = true

[stages.b]
command = ["sh", "-c", "echo b >> calls.txt; echo b {{ stages.a.output | trim }}"]
cache = true

[stages.c]
command = ["echo", "c"]
"#;

fn explained(test: &Test, extra: &[&str]) -> Vec<(String, String)> {
    let mut args = vec!["plan", "flow.toml", "--explain"];
    args.extend_from_slice(extra);
    let out = test.run(args);
    out.code(0);
    out.stdout
        .lines()
        .filter_map(|line| line.split_once("  "))
        .map(|(id, why)| (id.trim().to_string(), why.trim().to_string()))
        .collect()
}

#[test]
fn explain_says_what_is_reused_and_what_changed() {
    let test = Test::new();
    test.write("flow.toml", WORKFLOW);

    let before = explained(&test, &[]);
    assert!(
        before.iter().all(|(_, why)| why.starts_with("runs")),
        "{before:?}"
    );
    assert_eq!(test.count("calls.txt"), 0, "explain must not run commands");

    test.run(["run", "flow.toml"]).code(0);
    assert_eq!(test.count("calls.txt"), 2);

    let same = explained(&test, &[]);
    assert!(same[0].1.starts_with("reused"), "{same:?}");
    assert!(same[1].1.starts_with("reused"), "{same:?}");
    assert!(same[2].1.contains("no `cache`"), "{same:?}");

    let changed = explained(&test, &["--input", "n=2"]);
    assert!(
        changed[0].1.contains("rendered action changed"),
        "{changed:?}"
    );
    assert!(changed[1].1.contains("upstream `a`"), "{changed:?}");
    assert_eq!(test.count("calls.txt"), 2, "explain must not run commands");

    test.write("flow.toml", &WORKFLOW.replace("echo b >>", "echo B >>"));
    let edited = explained(&test, &[]);
    assert!(edited[0].1.starts_with("reused"), "{edited:?}");
    assert!(edited[1].1.contains("its definition changed"), "{edited:?}");
}
