//! What a run says on stderr as it goes and at its end, off a terminal (a CI log): `item N/M`
//! lines of a `foreach` stage, the stages by status and the slowest of them, and colour only
//! where it is asked for and NO_COLOR does not forbid it.

use crate::support::Test;

/// Twenty items two at a time, a stage skipped, one ending the run and one it never reaches.
const FLOW: &str = r#"
[inputs.n]
type = "integer"
default = 20

[stages.list]
command = ["seq", "-s", ",", "{{ inputs.n }}"]

[stages.parse]
template = { inline = "[{{ stages.list.output | trim }}]" }
output = { format = "json" }

[stages.each]
foreach = "stages.parse.output"
concurrency = 2
command = ["sleep", "0.05"]

[stages.never]
if = "inputs.n > 100"
command = ["echo", "never"]

[stages.gate]
after = ["each", "never"]
command = ["echo", "stop"]
exit_if = "true"
exit_message = "enough"

[stages.later]
after = ["gate"]
command = ["echo", "later"]
"#;

#[test]
fn off_a_terminal_foreach_says_its_items_and_the_end_tallies_the_stages() {
    let t = Test::new();
    t.write("flow.toml", FLOW);
    let out = t.run(["run", "flow.toml"]);
    out.code(0);
    let items: Vec<&str> = out
        .stderr
        .lines()
        .filter(|l| l.contains(" item "))
        .collect();
    // A line at each tenth of the items, never the last (the stage's own line says that),
    // all before the stage's line.
    let expected: Vec<String> = (1..10)
        .map(|tenth| format!("  … each item {}/20", tenth * 2))
        .collect();
    assert_eq!(items, expected, "{}", out.stderr);
    let last_item = out.stderr.find("item 18/20").unwrap();
    let stage_line = out.stderr.find("✓ each (").expect("the stage's line");
    assert!(last_item < stage_line, "{}", out.stderr);
    // The end: counts by status, then the slowest stages with their durations.
    assert!(
        out.stderr
            .contains("\nstages: 3 succeeded, 1 exited, 1 skipped, 1 not run\n"),
        "{}",
        out.stderr
    );
    let slowest = out
        .stderr
        .lines()
        .find(|l| l.starts_with("slowest: "))
        .expect("a slowest line");
    let named: Vec<&str> = slowest["slowest: ".len()..]
        .split(", ")
        .map(|part| part.split(' ').next().unwrap())
        .collect();
    assert_eq!(named.len(), 3, "{slowest}");
    // Ten rounds of 50 ms: the foreach is the slowest.
    assert_eq!(named[0], "each", "{slowest}");
    assert!(slowest
        .split(", ")
        .all(|p| p.ends_with("ms") || p.ends_with('s')));
    // -q says none of it.
    let quiet = t.run(["run", "flow.toml", "-q"]);
    assert!(quiet.stderr.is_empty(), "{}", quiet.stderr);
}

#[test]
fn a_run_colours_when_forced_and_never_under_no_color() {
    let t = Test::new();
    t.write("flow.toml", FLOW);
    let forced = t
        .command(["run", "flow.toml", "--input", "n=3"])
        .env_remove("NO_COLOR")
        .env("CLICOLOR_FORCE", "1")
        .output();
    forced.code(0);
    // The succeeded mark in green, the tally's counts in their colours.
    assert!(
        forced.stderr.contains("\x1b[32m✓\x1b[0m list"),
        "{:?}",
        forced.stderr
    );
    assert!(
        forced.stderr.contains("\x1b[35m1 exited\x1b[0m"),
        "{:?}",
        forced.stderr
    );
    // NO_COLOR wins over CLICOLOR_FORCE, and --color never over both.
    let plain = t
        .command(["run", "flow.toml", "--input", "n=3"])
        .env("NO_COLOR", "1")
        .env("CLICOLOR_FORCE", "1")
        .output();
    plain.code(0);
    assert!(!plain.stderr.contains('\x1b'), "{:?}", plain.stderr);
    assert!(plain.stderr.contains("✓ list"), "{}", plain.stderr);
    let never = t
        .command(["--color", "never", "run", "flow.toml", "--input", "n=3"])
        .env_remove("NO_COLOR")
        .env("CLICOLOR_FORCE", "1")
        .output();
    never.code(0);
    assert!(!never.stderr.contains('\x1b'), "{:?}", never.stderr);
    // Off a terminal, with nothing forcing it, no colour either.
    let auto = t
        .command(["run", "flow.toml", "--input", "n=3"])
        .env_remove("NO_COLOR")
        .env_remove("CLICOLOR_FORCE")
        .output();
    assert!(!auto.stderr.contains('\x1b'), "{:?}", auto.stderr);
}
