//! `check` knows every filter, test and function: a misspelt one is an error at the template,
//! with the nearest real name, before anything runs.

use crate::support::Test;

#[test]
fn misspelt_filters_tests_and_functions_are_check_errors_with_suggestions() {
    let test = Test::new();
    test.write(
        "names.toml",
        r#"[inputs.v]
type = "string"
default = "x"

[stages.a]
command = ["echo", "{{ inputs.v | tojsn }}"]

[stages.b]
command = ["echo", "{{ nwo() }}"]
exit_if = "inputs.v is definedd"

[stages.c]
shell = "echo {% filter uppr %}{{ inputs.v }}{% endfilter %}"
"#,
    );
    let out = test.run(["check", "names.toml"]);
    out.code(2)
        .stderr_has("names.toml:6:21: unknown filter `tojsn`")
        .stderr_has("did you mean `tojson`?")
        .stderr_has("names.toml:10:12: unknown test `definedd`")
        .stderr_has("did you mean `defined`?")
        .stderr_has("unknown function `nwo`")
        .stderr_has("the functions are debug, dict, duration")
        .stderr_has("unknown filter `uppr`")
        .stderr_has("did you mean `upper`?");
    assert!(
        !out.stderr.contains("undefined variable `nwo`"),
        "one diagnostic a mistake:\n{}",
        out.stderr
    );
    // Nothing ran: check alone found them.
    let run = test.run(["run", "names.toml"]);
    run.code(2);
    assert!(
        test.run_ids().is_empty() || run.stderr.contains("unknown filter"),
        "{}",
        run.stderr
    );
}

#[test]
fn real_names_strings_and_template_macros_pass() {
    let test = Test::new();
    test.write(
        "fine.toml",
        r#"[inputs.v]
type = "string"
default = "a | b(c) is d"

[stages.a]
command = ["echo", "{% macro m(x) %}{{ x | upper }}{% endmacro %}{{ m(inputs.v) }} {{ range(3) | list | length }} {{ 'x | nofilter' }} {{ now() | timestamp }}"]
exit_if = "inputs.v is not defined or inputs.v is startingwith('z')"

[stages.b]
command = ["echo", "{# {{ x | nofilter }} #}{% raw %}{{ y | nofilter }}{% endraw %}{{ stages.a.output | trim | sha256 }}"]
"#,
    );
    test.run(["check", "fine.toml"]).code(0);
}
