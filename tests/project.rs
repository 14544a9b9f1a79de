//! One project root: the nearest folder upward holding `stagegraph.toml` or `.stagegraph/`
//! (else the git repository root) anchors the configuration, the search path and the state
//! folder, so a command run in a subfolder behaves as at the root.

use std::process::Command;

use crate::support::{make_executable, Test};

const SHOUT: &str = "#!/bin/sh\ntr a-z A-Z\n";

const HELLO: &str = r#"[workflow]
description = "Greet someone through a model"

[inputs.name]
type = "string"
default = "world"

[stages.facts]
command = ["echo", "{{ inputs.name }} writes TOML"]

[stages.greet]
prompt = { inline = "hello {{ inputs.name }}; {{ stages.facts.output | trim }}" }
model = "shout"

[outputs]
greeting = "{{ stages.greet.output | trim }}"
"#;

/// The README's first project: a model script, its alias, a workflow at the root.
fn first_project(command: &str) -> Test {
    let t = Test::new();
    t.write("models/shout.sh", SHOUT);
    make_executable(&t.path("models/shout.sh"));
    t.write(
        "stagegraph.toml",
        &format!("[models.shout]\nprovider = \"command\"\ncommand = {command}\n"),
    );
    t.write("hello.toml", HELLO);
    std::fs::create_dir_all(t.path("docs/notes")).unwrap();
    t
}

fn git(t: &Test, args: &[&str]) -> String {
    let out = Command::new("git")
        .args(args)
        .current_dir(t.root())
        .env("HOME", t.root())
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .output()
        .expect("git runs");
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn the_first_workflow_runs_by_name_from_a_subfolder_and_records_at_the_root() {
    for command in [r#"["sh", "models/shout.sh"]"#, r#"["models/shout.sh"]"#] {
        let t = first_project(command);
        let sub = t.path("docs/notes");
        let out = t
            .command(["run", "hello", "--input", "name=ada"])
            .cwd(&sub)
            .without_state_dir()
            .output();
        out.code(0);
        assert_eq!(out.stdout.trim(), "HELLO ADA; ADA WRITES TOML", "{command}");
        assert!(
            !sub.join(".stagegraph").exists(),
            "no state in the subfolder"
        );
        assert!(!t.path("docs/.stagegraph").exists());
        assert!(
            t.path(".stagegraph/runs").is_dir(),
            "the runs are at the root"
        );
        // Every other command sees the same project from there.
        let shown = t
            .command(["runs", "show", "last"])
            .cwd(&sub)
            .without_state_dir()
            .output();
        shown.code(0);
        assert!(shown.stdout.contains("greet"), "{}", shown.stdout);
        let check = t
            .command(["check", "hello"])
            .cwd(&sub)
            .without_state_dir()
            .output();
        check.code(0);
        check.stderr_has("hello: ok (0 error(s), 0 warning(s))");
        let by_path = t
            .command(["run", "../../hello.toml", "--input", "name=bo"])
            .cwd(&sub)
            .without_state_dir()
            .output();
        by_path.code(0);
        assert_eq!(by_path.stdout.trim(), "HELLO BO; BO WRITES TOML");
        assert!(!sub.join(".stagegraph").exists());
    }
}

#[test]
fn a_repository_root_is_the_project_root_when_nothing_nearer_marks_one() {
    let t = Test::new();
    git(&t, &["init", "--quiet"]);
    t.write(
        "flows/hi.toml",
        "[stages.a]\ncommand = [\"echo\", \"hi\"]\n",
    );
    std::fs::create_dir_all(t.path("src/deep")).unwrap();
    let out = t
        .command(["run", "../../flows/hi.toml"])
        .cwd(&t.path("src/deep"))
        .without_state_dir()
        .output();
    out.code(0);
    assert!(t.path(".stagegraph/runs").is_dir());
    assert!(!t.path("src/deep/.stagegraph").exists());
}

#[test]
fn a_workflow_beside_the_user_off_the_search_path_is_suggested_by_its_path() {
    let t = first_project(r#"["sh", "models/shout.sh"]"#);
    t.write(
        "docs/notes/draft.toml",
        "[stages.a]\ncommand = [\"echo\", \"draft\"]\n",
    );
    let out = t
        .command(["run", "draft"])
        .cwd(&t.path("docs/notes"))
        .without_state_dir()
        .output();
    out.code(2);
    out.stderr_has("did you mean `./draft.toml`?");
}

#[test]
fn list_and_check_show_the_workflows_of_the_project_root() {
    let t = first_project(r#"["sh", "models/shout.sh"]"#);
    // Not workflows: another tool's configuration, the model configuration, a test file.
    t.write(
        "Cargo.toml",
        "[package]\nname = \"x\"\nversion = \"0.1.0\"\n",
    );
    t.write(
        "hello.test.toml",
        "workflow = \"hello\"\n[cases.a]\noutputs = {}\n",
    );
    t.write(
        "workflows/tidy.toml",
        "[workflow]\ndescription = \"Tidy up\"\n[stages.a]\ncommand = [\"true\"]\n",
    );
    let out = t
        .command(["list"])
        .cwd(&t.path("docs"))
        .without_state_dir()
        .output();
    out.code(0);
    let line = |name: &str| {
        out.stdout
            .lines()
            .find(|line| line.split_whitespace().next() == Some(name))
            .map(str::to_string)
    };
    let hello = line("hello").expect("hello is listed");
    assert!(
        hello.contains("Greet someone through a model") && hello.contains("(root)"),
        "{hello}"
    );
    assert!(
        line("tidy").is_some_and(|l| l.contains("Tidy up")),
        "{}",
        out.stdout
    );
    for absent in ["Cargo", "stagegraph", "hello.test"] {
        assert!(line(absent).is_none(), "{absent} listed:\n{}", out.stdout);
    }
    let check = t
        .command(["check"])
        .cwd(&t.path("docs"))
        .without_state_dir()
        .output();
    check.code(0);
    check.stderr_has("hello: ok (0 error(s), 0 warning(s))");
    check.stderr_has("tidy: ok (0 error(s), 0 warning(s))");
    assert!(!check.stderr.contains("Cargo:"), "{}", check.stderr);
}

/// The first run of a project makes its state folder after reading the workflow, and keeps the
/// parsed document there once it is over, so the second run does not parse it again; a dry-run
/// (in CI, the one command of a fresh clone) keeps none.
#[test]
fn the_first_run_of_a_project_keeps_its_parsed_documents_and_a_dry_run_none() {
    let kept = |t: &Test| {
        std::fs::read_dir(t.path(".stagegraph/cache/documents"))
            .map_or(0, |entries| entries.flatten().count())
    };
    let dry = first_project(r#"["sh", "models/shout.sh"]"#);
    dry.command(["run", "hello", "--dry-run"])
        .without_state_dir()
        .output()
        .code(0);
    assert!(
        dry.path(".stagegraph/runs").is_dir(),
        "the dry-run is recorded"
    );
    assert_eq!(kept(&dry), 0, "a dry-run keeps no document");

    let t = first_project(r#"["sh", "models/shout.sh"]"#);
    assert!(!t.path(".stagegraph").exists());
    t.command(["run", "hello"])
        .without_state_dir()
        .output()
        .code(0);
    assert_eq!(kept(&t), 1, "the first run keeps the workflow's document");
}

#[test]
fn the_state_folder_ignores_runs_cache_and_state_but_not_what_to_commit() {
    let t = first_project(r#"["sh", "models/shout.sh"]"#);
    git(&t, &["init", "--quiet"]);
    // Two runs: the records, and the cache with the parsed documents and the stages' outputs.
    for _ in 0..2 {
        t.command(["run", "hello"])
            .without_state_dir()
            .output()
            .code(0);
    }
    t.command(["eject", "refresh"])
        .without_state_dir()
        .output()
        .code(0);
    assert!(t.path(".stagegraph/runs").is_dir() && t.path(".stagegraph/cache").is_dir());
    let status = git(&t, &["status", "--porcelain", "--untracked-files=all"]);
    let state: Vec<&str> = status
        .lines()
        .filter(|line| line.contains(".stagegraph/"))
        .collect();
    assert!(
        state.iter().any(|l| l.ends_with(".stagegraph/.gitignore")),
        "{status}"
    );
    assert!(
        state
            .iter()
            .any(|l| l.ends_with(".stagegraph/workflows/refresh.toml")),
        "ejected workflows are to commit: {status}"
    );
    for ignored in ["/runs/", "/cache/", "/state/"] {
        assert!(
            !state.iter().any(|l| l.contains(ignored)),
            "{ignored} is not ignored: {status}"
        );
    }
}

#[test]
fn init_then_test_passes_in_an_empty_folder_and_init_refuses_to_overwrite() {
    let t = Test::new();
    let out = t.command(["init"]).without_state_dir().output();
    out.code(0);
    for file in [
        "stagegraph.toml",
        "models/shout.sh",
        "workflows/hello.toml",
        "workflows/hello.test.toml",
    ] {
        out.stderr_has(&format!("created {file}"));
        assert!(t.exists(file), "{file}");
    }
    out.stderr_has("stagegraph test");
    let test = t.command(["test"]).without_state_dir().output();
    test.code(0);
    assert!(test.stdout.contains("PASS"), "{}", test.stdout);
    assert!(test.stdout.contains("1 passed"), "{}", test.stdout);
    // The project works as its next steps say, from a subfolder too.
    std::fs::create_dir_all(t.path("src")).unwrap();
    let run = t
        .command(["run", "hello", "--input", "name=ada"])
        .cwd(&t.path("src"))
        .without_state_dir()
        .output();
    run.code(0);
    assert_eq!(run.stdout.trim(), "HELLO ADA; ADA WRITES TOML");
    // The recording is what replays: the test does not run the script.
    std::fs::write(t.path("models/shout.sh"), "#!/bin/sh\nexit 9\n").unwrap();
    t.command(["test"]).without_state_dir().output().code(0);

    t.write("workflows/hello.toml", "# mine\n");
    let again = t.command(["init"]).without_state_dir().output();
    again.code(2);
    again.stderr_has("stagegraph.toml, models/shout.sh, workflows/hello.toml, workflows/hello.test.toml already exist(s)");
    assert_eq!(t.read("workflows/hello.toml"), "# mine\n");
    t.command(["init", "--force"])
        .without_state_dir()
        .output()
        .code(0);
    assert!(t.read("workflows/hello.toml").contains("[stages.greet]"));
}

#[test]
fn logging_is_off_by_default_and_verbose_or_stagegraph_log_turns_it_on() {
    let t = first_project(r#"["sh", "models/shout.sh"]"#);
    let quiet = t.command(["run", "hello"]).output();
    quiet.code(0);
    assert!(!quiet.stderr.contains("workflow found"), "{}", quiet.stderr);
    let info = t.command(["-v", "run", "hello"]).output();
    info.code(0);
    info.stderr_has("workflow found");
    info.stderr_has("stage finished");
    assert!(!info.stderr.contains("model request"), "-v is info only");
    let debug = t.command(["run", "hello", "-vv"]).output();
    debug.code(0);
    debug.stderr_has("project root");
    debug.stderr_has("wave=2");
    debug.stderr_has("model request alias=shout provider=command:sh models/shout.sh");
    let filtered = t
        .command(["run", "hello"])
        .env("STAGEGRAPH_LOG", "stagegraph=debug")
        .output();
    filtered.code(0);
    filtered.stderr_has("model reply alias=shout");
    let bad = t
        .command(["list"])
        .env("STAGEGRAPH_LOG", "stagegraph=loud")
        .output();
    bad.code(2);
    bad.stderr_has("STAGEGRAPH_LOG=`stagegraph=loud`");
}

#[test]
fn a_secret_never_reaches_the_log() {
    let t = Test::new();
    t.write(
        "stagegraph.toml",
        "[models.api]\nprovider = \"openai\"\nbase_url = \"http://127.0.0.1:9\"\napi_key_env = \"MY_KEY\"\n",
    );
    t.write(
        "w.toml",
        "[workflow]\nenv = [\"MY_KEY\"]\n[stages.a]\ncommand = [\"sh\", \"-c\", \"echo leaked $0 >&2; exit 3\", \"{{ env.MY_KEY }}\"]\n",
    );
    let out = t
        .command(["-v", "run", "w.toml"])
        .env("MY_KEY", "sk-very-secret-value")
        .output();
    out.code(1);
    // The stage's error, with the stderr that holds the key, is in the log line.
    let logged = out
        .stderr
        .lines()
        .find(|line| line.contains("stage finished") && line.contains("leaked"))
        .unwrap_or_else(|| panic!("no log line with the error:\n{}", out.stderr));
    assert!(!logged.contains("sk-very-secret-value"), "{logged}");
    assert!(
        !out.stderr.contains("sk-very-secret-value"),
        "{}",
        out.stderr
    );
}

#[test]
fn dynamic_completions_know_the_projects_workflows_and_run_ids() {
    let t = first_project(r#"["sh", "models/shout.sh"]"#);
    t.command(["run", "hello"])
        .without_state_dir()
        .output()
        .code(0);
    let complete = |words: &[&str]| {
        let mut args = vec!["--", "stagegraph"];
        args.extend_from_slice(words);
        let out = t
            .command(args)
            .cwd(&t.path("docs"))
            .without_state_dir()
            .env("COMPLETE", "fish")
            .output();
        out.code(0);
        out.stdout
    };
    let names = complete(&["run", ""]);
    assert!(
        names
            .lines()
            .any(|l| l == "hello\tGreet someone through a model"),
        "{names}"
    );
    assert!(names.lines().any(|l| l.starts_with("refresh\t")), "{names}");
    let runs = complete(&["runs", "show", ""]);
    let id = std::fs::read_dir(t.path(".stagegraph/runs"))
        .unwrap()
        .flatten()
        .next()
        .unwrap()
        .file_name()
        .to_string_lossy()
        .into_owned();
    assert!(
        runs.lines().any(|l| l == format!("{id}\thello completed")),
        "{runs}"
    );
    assert!(runs.lines().any(|l| l.starts_with("last\t")), "{runs}");
}
