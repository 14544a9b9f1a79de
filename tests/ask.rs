//! The `ask` built-in: a question with declared choices, answered on a terminal, or by
//! `--answer STAGE=VALUE`, `--yes` or the declared default; recorded; known to `check`.

use std::path::Path;
use std::process::{Command, Stdio};

use serde_json::Value;

use crate::support::{stage, Test, BIN};

const ASK: &str = r#"
[stages.confirm]
uses = "ask"
with = { question = "Delete the cache?", choices = ["y", "n", "individual"], default = "n", yes = "y" }

[stages.act]
if = "stages.confirm.output == 'y'"
command = ["touch", "deleted"]

[outputs]
answer = "{{ stages.confirm.output }}"
"#;

fn ask_test() -> Test {
    let t = Test::new();
    t.write("ask.toml", ASK);
    t
}

fn reason(record: &Value, id: &str) -> String {
    stage(record, id)["reason"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

#[test]
fn off_a_terminal_the_default_is_taken_and_recorded() {
    let t = ask_test();
    let out = t.run(["run", "ask.toml"]);
    out.code(0);
    assert_eq!(out.stdout.trim(), "n", "the safe default");
    assert!(!t.exists("deleted"));
    let record = t.last_run();
    assert_eq!(
        reason(&record, "confirm"),
        "asked \"Delete the cache?\": `n` (the default)"
    );
    assert_eq!(t.stage_output("confirm"), "n");
    let shown = t.run(["runs", "show", "last"]);
    assert!(
        shown.stdout.contains("asked \"Delete the cache?\": `n`"),
        "{}",
        shown.stdout
    );
}

#[test]
fn yes_and_answer_choose_off_a_terminal() {
    let t = ask_test();
    let out = t.run(["run", "ask.toml", "--yes"]);
    out.code(0);
    assert_eq!(out.stdout.trim(), "y");
    assert!(t.exists("deleted"));
    assert!(reason(&t.last_run(), "confirm").ends_with("(from --yes)"));

    // --answer wins over --yes.
    let out = t.run(["run", "ask.toml", "--yes", "--answer", "confirm=individual"]);
    out.code(0);
    assert_eq!(out.stdout.trim(), "individual");
    assert!(reason(&t.last_run(), "confirm").ends_with("(from --answer)"));
}

#[test]
fn a_wrong_answer_is_a_wrong_command_line() {
    let t = ask_test();
    let out = t.run(["run", "ask.toml", "--answer", "confrm=y"]);
    out.code(2);
    out.stderr_has("`confrm` is not an `ask` stage")
        .stderr_has("did you mean `confirm`");
    let out = t.run(["run", "ask.toml", "--answer", "confirm=maybe"]);
    out.code(2);
    out.stderr_has("`maybe` is not one of the choices of `confirm` (y, n, individual)");
    let out = t.run(["run", "ask.toml", "--answer", "act=y"]);
    out.code(2);
    out.stderr_has("`act` is not an `ask` stage");
}

#[test]
fn check_knows_the_choices_and_the_output_type() {
    let t = Test::new();
    t.write(
        "bad.toml",
        r#"
[stages.confirm]
uses = "ask"
with = { question = "Go?", choices = ["y", "n"], default = "no", yes = "yes" }

[stages.reads]
template = { inline = "{{ stages.confirm.output.answer }}" }
"#,
    );
    let out = t.run(["check", "bad.toml"]);
    out.code(2);
    out.stderr_has("`default` of `ask` is `no`, which is not one of its choices (y, n)")
        .stderr_has("`yes` of `ask` is `yes`, which is not one of its choices (y, n)");
    assert!(
        out.stderr.contains("confirm.output.answer") || out.stderr.contains("`answer`"),
        "a string has no fields: {}",
        out.stderr
    );
    t.write(
        "missing.toml",
        "[stages.confirm]\nuses = \"ask\"\nwith = { question = \"Go?\", choices = [\"y\", \"n\"] }\n",
    );
    let out = t.run(["check", "missing.toml"]);
    out.code(2);
    out.stderr_has("`ask` needs the argument `default`");
    let t2 = ask_test();
    t2.run(["check", "ask.toml"]).code(0);
}

#[test]
fn inside_a_foreach_one_answer_answers_every_item() {
    let t = Test::new();
    t.write(
        "each.toml",
        r#"
[inputs.names]
type = "array"
default = ["a", "b", "c"]

[stages.recrawl]
foreach = "inputs.names"
uses = "ask"
with = { question = "Re-crawl {{ item }}?", choices = ["y", "n"], default = "n" }

[outputs]
answers = "{{ stages.recrawl.output | join(',') }}"
"#,
    );
    let out = t.run(["run", "each.toml", "--answer", "recrawl=y"]);
    out.code(0);
    assert_eq!(out.stdout.trim(), "y,y,y");
    let reason = reason(&t.last_run(), "recrawl");
    assert!(
        reason.contains("\"Re-crawl b?\": `y` (from --answer)"),
        "{reason}"
    );
}

/// `script` gives the run a terminal: stdin and stderr are a pseudo-terminal fed by our stdin.
fn on_a_terminal(t: &Test, args: &[&str], typed: &str) -> Option<String> {
    if !Path::new("/usr/bin/script").exists() && which("script").is_none() {
        crate::support::skip("`script` (util-linux) is not installed");
        return None;
    }
    let mut line = format!(
        "{BIN} --state-dir {} ",
        shell_quote(&t.state_dir().display().to_string())
    );
    for arg in args {
        line.push_str(&shell_quote(arg));
        line.push(' ');
    }
    let mut child = Command::new("script")
        .args(["-qec", &line, "/dev/null"])
        .current_dir(t.root())
        .env("HOME", t.root())
        .env("NO_COLOR", "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start script");
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().expect("stdin");
        stdin.write_all(typed.as_bytes()).expect("type");
    }
    let out = child.wait_with_output().expect("wait for script");
    Some(String::from_utf8_lossy(&out.stdout).to_string())
}

fn shell_quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', "'\\''"))
}

/// The newest run record, dry-runs included.
fn newest(t: &Test) -> Value {
    let id = t.run_ids().pop().expect("a run");
    let out = t.run(["runs", "show", &id, "--json"]);
    out.code(0);
    serde_json::from_str(&out.stdout).expect("run.json")
}

fn which(program: &str) -> Option<std::path::PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join(program))
            .find(|p| p.is_file())
    })
}

#[test]
fn on_a_terminal_the_person_is_asked_and_a_dry_run_never_blocks() {
    let t = ask_test();
    let Some(screen) = on_a_terminal(&t, &["run", "ask.toml"], "maybe\ni\n") else {
        return;
    };
    assert!(
        screen.contains("Delete the cache? [y/n/individual] (default: n):"),
        "{screen}"
    );
    assert!(screen.contains("please answer one of"), "{screen}");
    let record = t.last_run();
    assert_eq!(record["outputs"]["answer"], "individual");
    assert!(reason(&record, "confirm").ends_with("(on the terminal)"));

    // A dry-run takes the answer a run off a terminal would: it never waits for a reply.
    let Some(screen) = on_a_terminal(&t, &["run", "ask.toml", "--dry-run"], "") else {
        return;
    };
    assert!(!screen.contains("Delete the cache? ["), "{screen}");
    let record = newest(&t);
    assert_eq!(record["outputs"]["answer"], "n");
    assert!(reason(&record, "confirm").ends_with("(the default)"));
}
