//! What an attacker or a crash must not get: a value run as shell code, a panic, a stolen
//! lock, a re-run of finished work, a kept secret. Each test fails without the fix it guards.

use crate::support::Test;

/// A payload that runs `touch PWNED` if it is ever read as shell code, whichever quotes
/// surround it.
const PAYLOAD: &str = r#"$(touch PWNED)`touch PWNED`'; touch PWNED; '"; touch PWNED; ""#;

fn injection_workflow(script: &str) -> String {
    format!(
        "[workflow]\ndescription = \"d\"\n\n[inputs.v]\ntype = \"string\"\n\n\
         [stages.s]\nshell = '''\n{script}'''\n"
    )
}

/// Every quoting form an author may write around a value in a `shell` script: the value
/// reaches the process as data, and never runs.
#[test]
fn no_value_becomes_shell_code_whatever_the_quotes() {
    // `tojson` output is compared as the JSON it is (minijinja writes `'` as `\u0027`).
    let json = "JSON".to_string();
    let cases: Vec<(&str, &str, String)> = vec![
        ("bare", "printf '%s' {{ inputs.v }}", PAYLOAD.to_string()),
        (
            "double",
            "printf '%s' \"{{ inputs.v }}\"",
            PAYLOAD.to_string(),
        ),
        (
            "single",
            "printf '%s' '{{ inputs.v }}'",
            PAYLOAD.to_string(),
        ),
        (
            "heredoc",
            "cat <<EOF\n{{ inputs.v }}\nEOF\n",
            format!("{PAYLOAD}\n"),
        ),
        (
            "heredoc-dash",
            "cat <<-EOF\n\t{{ inputs.v }}\n\tEOF\n",
            format!("{PAYLOAD}\n"),
        ),
        (
            "tojson",
            "printf '%s' {{ inputs.v | tojson }}",
            json.clone(),
        ),
        (
            "tojson-double",
            "printf '%s' \"{{ inputs.v | tojson }}\"",
            json.clone(),
        ),
        (
            "tojson-single",
            "printf '%s' '{{ inputs.v | tojson }}'",
            json,
        ),
        (
            "safe",
            "printf '%s' {{ inputs.v | safe }}",
            PAYLOAD.to_string(),
        ),
        (
            "filtered",
            "printf '%s' {{ inputs.v | upper | lower }}",
            PAYLOAD.to_lowercase(),
        ),
        (
            "substitution",
            "printf '%s' \"$(printf '%s' {{ inputs.v }})\"",
            PAYLOAD.to_string(),
        ),
        (
            "block",
            "{% set x %}<{{ inputs.v }}>{% endset %}printf '%s' {{ x }}",
            format!("<{PAYLOAD}>"),
        ),
    ];
    for (form, script, expected) in cases {
        let t = Test::new();
        t.write("w.toml", &injection_workflow(script));
        t.run(["run", "w.toml", "--input", &format!("v={PAYLOAD}")])
            .code(0);
        assert!(!t.exists("PWNED"), "{form}: the value ran as shell code");
        let output = t.stage_output("s");
        if expected == "JSON" {
            let parsed: String = serde_json::from_str(&output).unwrap_or_default();
            assert_eq!(
                parsed, PAYLOAD,
                "{form}: the value arrived changed: {output}"
            );
        } else {
            assert_eq!(output, expected, "{form}: the value arrived changed");
        }
    }
}

/// A shell started by a `command` with `-c` gets the same treatment, and code for another
/// interpreter refuses a printed value.
#[test]
fn a_command_running_a_shell_or_an_interpreter_gets_no_code() {
    let t = Test::new();
    t.write(
        "w.toml",
        "[workflow]\ndescription = \"d\"\n\n[inputs.v]\ntype = \"string\"\n\n\
         [stages.s]\ncommand = [\"bash\", \"-eu\", \"-o\", \"pipefail\", \"-c\", \"printf '%s' '{{ inputs.v }}'\"]\n",
    );
    t.run(["run", "w.toml", "--input", &format!("v={PAYLOAD}")])
        .code(0);
    assert!(!t.exists("PWNED"), "the value ran as shell code");
    assert_eq!(t.stage_output("s"), PAYLOAD);

    let t = Test::new();
    t.write(
        "w.toml",
        "[workflow]\ndescription = \"d\"\n\n[inputs.v]\ntype = \"string\"\n\n\
         [stages.s]\ncommand = [\"python3\", \"-c\", \"print('{{ inputs.v }}')\"]\n",
    );
    t.run([
        "run",
        "w.toml",
        "--input",
        "v=x'); open('PWNED', 'w'); print('",
    ])
    .code(1)
    .stderr_has("is printed into the code `python3` runs");
    assert!(!t.exists("PWNED"));
}

/// A value cannot be passed into a heredoc whose quoted delimiter turns expansion off: the
/// stage fails with the reason instead of running the script.
#[test]
fn a_value_in_a_quoted_heredoc_is_refused() {
    let t = Test::new();
    t.write(
        "w.toml",
        &injection_workflow("cat <<'EOF'\n{{ inputs.v }}\nEOF\n"),
    );
    t.run(["run", "w.toml", "--input", "v=x"])
        .code(1)
        .stderr_has("quoted delimiter");
}

/// Malformed expressions and templates wherever a user may write one are diagnostics at the
/// place they were written, never a panic of the binary.
#[test]
fn malformed_expressions_are_diagnostics_not_panics() {
    for (key, text) in [
        ("exit_if", "}}e"),
        ("if", "}}e"),
        ("foreach", "}}e"),
        ("assert", "}}e"),
        ("exit_if", "%}x"),
        ("shell", "echo {{ }}e }}"),
    ] {
        let t = Test::new();
        let action = if key == "shell" {
            ""
        } else {
            "shell = \"echo\"\n"
        };
        t.write(
            "w.toml",
            &format!("[workflow]\ndescription = \"d\"\n\n[stages.a]\n{action}{key} = '{text}'\n"),
        );
        for command in ["check", "run"] {
            let out = t.run([command, "w.toml"]);
            out.code(2);
            assert!(
                !out.stderr.contains("panicked"),
                "{key} = {text}: {}",
                out.stderr
            );
        }
    }
}
