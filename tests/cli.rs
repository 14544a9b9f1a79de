//! The command line a newcomer and a CI job meet: examples in every `--help`, completions and a
//! manual page, a line when a stage starts off a terminal, `--format json` (with `version`)
//! wherever a tool reads the output, and no `.stagegraph/` left by a rejected command line.

use std::process::{Command, Stdio};

use serde_json::Value;

use crate::support::{Test, BIN};

/// Every subcommand, nested ones as `runs show`, from the help texts themselves.
fn subcommands(t: &Test, parent: &[&str]) -> Vec<Vec<String>> {
    let mut args: Vec<&str> = parent.to_vec();
    args.push("--help");
    let out = t.run(args);
    out.code(0);
    let mut found = Vec::new();
    let mut in_commands = false;
    for line in out.stdout.lines() {
        if line.starts_with("Commands:") {
            in_commands = true;
            continue;
        }
        if in_commands {
            if !line.starts_with("  ") {
                break;
            }
            let name = line.split_whitespace().next().unwrap_or("");
            if name.is_empty() || name == "help" || line.starts_with("   ") {
                continue;
            }
            let mut path: Vec<String> = parent
                .iter()
                .map(std::string::ToString::to_string)
                .collect();
            path.push(name.to_string());
            found.push(path);
        }
    }
    found
}

#[test]
fn the_help_of_every_subcommand_ends_with_examples() {
    let t = Test::new();
    let mut all = subcommands(&t, &[]);
    assert!(all.len() >= 10, "{all:?}");
    {
        let nested = "runs";
        all.extend(subcommands(&t, &[nested]));
    }
    assert!(all.iter().any(|p| p == &["runs", "show"]), "{all:?}");
    for path in &all {
        let mut args: Vec<&str> = path.iter().map(String::as_str).collect();
        args.push("--help");
        let out = t.run(args.clone());
        out.code(0);
        let lines: Vec<&str> = out.stdout.trim_end().lines().collect();
        let at = lines
            .iter()
            .rposition(|l| *l == "Examples:")
            .unwrap_or_else(|| panic!("`{}` has no Examples:\n{}", args.join(" "), out.stdout));
        let examples = &lines[at + 1..];
        assert!(
            !examples.is_empty() && examples.iter().all(|l| l.starts_with("  ")),
            "`{}`: the examples end the help:\n{}",
            args.join(" "),
            out.stdout
        );
        assert!(
            examples
                .iter()
                .any(|l| l.trim_start().starts_with("stagegraph ")
                    && l.contains(path.last().map_or("", String::as_str))),
            "`{}`: examples of itself:\n{}",
            args.join(" "),
            out.stdout
        );
    }
}

#[test]
fn completions_load_in_bash_and_every_shell_gets_a_script() {
    let t = Test::new();
    for shell in ["bash", "zsh", "fish", "powershell", "elvish"] {
        let out = t.run(["completions", shell]);
        out.code(0);
        assert!(out.stdout.contains("stagegraph"), "{shell}: {}", out.stdout);
    }
    let out = t.run(["completions", "nushell"]);
    out.code(2);

    let script = t.run(["completions", "bash"]).stdout;
    t.write("completion.bash", &script);
    let bash = Command::new("bash")
        .args([
            "-c",
            "source ./completion.bash && complete -p stagegraph && \
             COMP_WORDS=(stagegraph ru); COMP_CWORD=1; _stagegraph stagegraph ru stagegraph; \
             printf '%s\\n' \"${COMPREPLY[@]}\"",
        ])
        .current_dir(t.root())
        .output();
    let Ok(bash) = bash else {
        crate::support::skip("bash is not installed");
        return;
    };
    let stdout = String::from_utf8_lossy(&bash.stdout);
    assert!(
        bash.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&bash.stderr)
    );
    assert!(stdout.contains("-F _stagegraph stagegraph"), "{stdout}");
    let words: Vec<&str> = stdout.lines().collect();
    assert!(
        words.contains(&"run") && words.contains(&"runs"),
        "{stdout}"
    );
}

#[test]
fn the_manual_page_renders() {
    let t = Test::new();
    let out = t.run(["man"]);
    out.code(0);
    assert!(
        out.stdout.starts_with(".ie") || out.stdout.contains(".TH stagegraph"),
        "{}",
        &out.stdout[..200.min(out.stdout.len())]
    );
    t.write("stagegraph.1", &out.stdout);
    let groff = Command::new("groff")
        .args(["-man", "-Tutf8", "-P-cbou", "stagegraph.1"])
        .current_dir(t.root())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output();
    let Ok(groff) = groff else {
        crate::support::skip("groff is not installed");
        return;
    };
    let text = String::from_utf8_lossy(&groff.stdout);
    assert!(
        groff.status.success(),
        "{}",
        String::from_utf8_lossy(&groff.stderr)
    );
    assert!(text.contains("NAME") && text.contains("COMMANDS"), "{text}");
    // Every command is on this one page; none is a pointer to a page nothing installs.
    assert!(
        text.contains("stagegraph run [OPTIONS] <NAME>") && text.contains("stagegraph runs show"),
        "{text}"
    );
    assert!(!text.contains("stagegraph-run"), "{text}");
}

#[test]
fn off_a_terminal_a_line_says_when_a_stage_starts() {
    let t = Test::new();
    t.write(
        "flow.toml",
        "[stages.slow]\ncommand = [\"echo\", \"hi\"]\n\n[stages.quick]\ntemplate = { inline = \"x\" }\n",
    );
    let out = t.run(["run", "flow.toml"]);
    out.code(0);
    let started = out
        .stderr
        .find("▸ slow started")
        .unwrap_or_else(|| panic!("no start line:\n{}", out.stderr));
    let finished = out.stderr.find("✓ slow").expect("an end line");
    assert!(started < finished, "{}", out.stderr);
    assert!(
        !out.stderr.contains("quick started"),
        "a template stage is over at once: {}",
        out.stderr
    );
    let quiet = t.run(["run", "flow.toml", "--quiet"]);
    assert!(!quiet.stderr.contains("started"), "{}", quiet.stderr);
}

fn json(out: &crate::support::Output) -> Value {
    out.code(0);
    serde_json::from_str(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "`{}` is not JSON ({e}):\n{}",
            out.args.join(" "),
            out.stdout
        )
    })
}

#[test]
fn format_json_is_one_spelling_with_a_version_everywhere() {
    let t = Test::new();
    t.write(
        "flow.toml",
        "[workflow]\ndescription = \"say hi\"\n\n[stages.hi]\ncommand = [\"echo\", \"hi\"]\n\n[outputs]\ngreeting = \"{{ stages.hi.output | trim }}\"\n",
    );
    std::fs::create_dir_all(t.path(".stagegraph/workflows")).expect("a library");
    t.write(
        ".stagegraph/workflows/local.toml",
        "[stages.a]\ncommand = [\"true\"]\n",
    );

    // run: text is the single string output; --format json one document.
    let out = t.run(["run", "flow.toml"]);
    out.code(0);
    assert_eq!(out.stdout, "hi\n");
    let run = json(&t.run(["run", "flow.toml", "--format", "json"]));
    assert_eq!(run["version"], 1);
    assert_eq!(run["status"], "completed");
    assert_eq!(run["outputs"]["greeting"], "hi");
    assert!(run["run_id"].as_str().is_some());

    let documents = [
        vec!["check", "flow.toml", "--format", "json"],
        vec!["plan", "flow.toml", "--format", "json"],
        vec!["list", "--format", "json"],
        vec!["runs", "--format", "json"],
        vec!["runs", "show", "last", "--format", "json"],
        vec!["show", "flow.toml", "--effective", "--format", "json"],
    ];
    for args in documents {
        let doc = json(&t.run(args.clone()));
        assert_eq!(doc["version"], 1, "`{}`: {doc:#}", args.join(" "));
    }
    let list = json(&t.run(["list", "--format", "json"]));
    assert!(
        list["workflows"]
            .as_array()
            .is_some_and(|w| w.iter().any(|w| w["name"] == "local")),
        "{list:#}"
    );
    let runs = json(&t.run(["runs", "--format", "json"]));
    assert_eq!(runs["runs"].as_array().map(Vec::len), Some(2), "{runs:#}");
    let shown = json(&t.run(["runs", "show", "last", "--format", "json"]));
    assert_eq!(shown["run_id"], runs["runs"][1]["run_id"]);
}

/// A fresh folder, and `stagegraph` run in it without `--state-dir`.
fn bare(dir: &std::path::Path, args: &[&str]) -> Option<i32> {
    Command::new(BIN)
        .args(args)
        .current_dir(dir)
        .env("HOME", dir)
        .env("XDG_CONFIG_HOME", dir.join("config"))
        .env("XDG_STATE_HOME", dir.join("xdg-state"))
        .env_remove("STAGEGRAPH_PATH")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("start stagegraph")
        .code()
}

#[test]
fn a_rejected_command_line_creates_no_state_folder() {
    let dir = tempfile::tempdir().expect("a folder");
    std::fs::write(
        dir.path().join("flow.toml"),
        "[stages.confirm]\nuses = \"ask\"\nwith = { question = \"q\", choices = [\"y\", \"n\"], default = \"n\" }\n",
    )
    .expect("write");
    for args in [
        vec!["--bogus"],
        vec!["run"],
        vec!["run", "flow.toml", "--bogus"],
        vec!["run", "nosuch"],
        vec!["run", "flow.toml", "--answer", "nosuch=y"],
        vec!["run", "flow.toml", "--answer", "confirm=maybe"],
        vec!["run", "flow.toml", "--jobs", "many"],
        vec!["run", "flow.toml", "--jobs", "0"],
        vec!["test", "--jobs", "0"],
        vec!["resume", "nosuch"],
        vec!["runs", "show", "nosuch"],
        vec!["plan", "nosuch"],
        vec!["completions", "tcsh"],
        vec!["-L", "nosuch", "run", "flow.toml"],
        vec!["run", "flow.toml", "--library", "flow.toml"],
    ] {
        let code = bare(dir.path(), &args);
        assert_eq!(code, Some(2), "`stagegraph {}`", args.join(" "));
        assert!(
            !dir.path().join(".stagegraph").exists(),
            "`stagegraph {}` created .stagegraph/",
            args.join(" ")
        );
    }
}

/// A `--library` that is no folder is refused, named, before it leaves every workflow of it
/// "not found".
#[test]
fn a_library_that_is_no_folder_is_refused() {
    let t = crate::support::Test::new();
    t.write("flow.toml", "[stages.a]\nshell = \"echo a\"\n");
    let out = t.run(["-L", "libs/missing", "run", "flow.toml"]);
    assert_eq!(out.code, Some(2), "{out:?}");
    assert!(
        out.stderr.contains("--library libs/missing: ")
            && out.stderr.contains("libs/missing does not exist"),
        "{}",
        out.stderr
    );
    let out = t.run(["list", "--library", "flow.toml"]);
    assert_eq!(out.code, Some(2), "{out:?}");
    assert!(
        out.stderr.contains("flow.toml is not a folder"),
        "{}",
        out.stderr
    );
}

/// `--jobs 0` would run nothing: it is refused with the reason, not read as 1.
#[test]
fn no_jobs_at_once_is_refused() {
    let t = crate::support::Test::new();
    let out = t.run(["run", "nosuch", "--jobs", "0"]);
    assert_eq!(out.code, Some(2), "{out:?}");
    assert!(
        out.stderr.contains("must be at least 1"),
        "no reason given: {}",
        out.stderr
    );
}
