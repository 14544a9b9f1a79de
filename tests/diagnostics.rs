//! One pass of `check` reports format errors and meaning errors together, each at its line.

use crate::support::Test;

#[test]
fn format_and_reference_errors_are_reported_in_one_pass() {
    let test = Test::new();
    test.write(
        "bad.toml",
        r#"[workflow]
descriptoin = "typo"

[inputs.n]
type = "integer"

[stages.gate]
command = ["echo", "{{ inputs.m }}"]
retries = "two"
exit_iff = "true"

[stages.next]
after = ["gaet"]
template = { inline = "{{ stages.gate.output }}" }
"#,
    );
    let out = test.run(["check", "bad.toml", "--format", "json"]);
    out.code(2);
    let report: serde_json::Value = serde_json::from_str(&out.stdout).expect("json");
    let found: Vec<(u64, String)> = report["diagnostics"]
        .as_array()
        .expect("diagnostics")
        .iter()
        .map(|d| {
            (
                d["line"].as_u64().unwrap_or(0),
                d["message"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect();
    let lines: Vec<u64> = found.iter().map(|(line, _)| *line).collect();
    assert_eq!(lines, [2, 8, 9, 10, 13], "{found:#?}");
    assert!(found[0].1.contains("descriptoin"));
    assert!(found[1].1.contains("unknown input `m`"));
    assert!(found[2].1.contains("must be an integer"));
    assert!(found[3].1.contains("exit_iff"));
    assert!(found[4].1.contains("unknown stage `gaet`"));
}
