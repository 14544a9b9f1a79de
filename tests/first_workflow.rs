//! The README's "Your first workflow", as a newcomer follows it: the files it shows, written
//! as shown, and the commands it shows, with the output it promises. Also the README's install
//! line and the demo's build progress.

use crate::support::{repo_root, Test};

/// The fenced blocks of a README section that name their file on their first line.
fn files_of(section: &str) -> Vec<(String, String)> {
    let mut files = Vec::new();
    let mut lines = section.lines();
    while let Some(line) = lines.next() {
        if !line.starts_with("```") || line.len() == 3 {
            continue;
        }
        let block: Vec<&str> = lines
            .by_ref()
            .take_while(|l| !l.starts_with("```"))
            .collect();
        if let Some(name) = block.first().and_then(|l| l.strip_prefix("# file: ")) {
            files.push((name.to_string(), block[1..].join("\n") + "\n"));
        }
    }
    files
}

fn readme() -> String {
    std::fs::read_to_string(repo_root().join("README.md")).expect("the README")
}

#[test]
fn the_first_workflow_of_the_readme_runs_as_written() {
    let readme = readme();
    let start = readme.find("## Your first workflow").expect("the section");
    let end = readme[start + 3..]
        .find("\n## ")
        .map_or(readme.len(), |e| start + 3 + e);
    let section = &readme[start..end];
    let files = files_of(section);
    let names: Vec<&str> = files.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["models/shout.sh", "stagegraph.toml", "hello.toml"]);
    let t = Test::new();
    for (name, text) in &files {
        t.write(name, text);
    }
    let out = t.run(["check", "hello.toml"]);
    out.code(0);
    out.stderr_has("hello.toml: ok (0 error(s), 0 warning(s))");
    let out = t.run(["run", "hello.toml", "--input", "name=ada"]);
    out.code(0);
    assert!(
        section.contains(&format!("# {}", out.stdout.trim())),
        "the README promises what the run prints: {}",
        out.stdout
    );
    assert_eq!(out.stdout.trim(), "HELLO ADA; ADA WRITES TOML");
    t.run(["runs", "show", "last"]).code(0);

    // The same from a subfolder of the project, with the state folder a user gets: the
    // workflow is found by name, the model script by the configuration's folder, and the state
    // is kept at the root only.
    let sub = t.path("notes/drafts");
    std::fs::create_dir_all(&sub).expect("a subfolder");
    for args in [
        ["run", "hello", "--input", "name=ada"],
        ["run", "../../hello.toml", "--input", "name=ada"],
    ] {
        let out = t.command(args).cwd(&sub).without_state_dir().output();
        out.code(0);
        assert_eq!(out.stdout.trim(), "HELLO ADA; ADA WRITES TOML");
    }
    t.command(["runs", "show", "last"])
        .cwd(&sub)
        .without_state_dir()
        .output()
        .code(0);
    assert!(t.path(".stagegraph/runs").is_dir());
    assert!(!sub.join(".stagegraph").exists() && !t.path("notes/.stagegraph").exists());
    let out = t.run(["runs", "show", "last", "--stage", "greet"]);
    out.code(0);
    assert_eq!(out.stdout.trim(), "HELLO ADA; ADA WRITES TOML");
}

#[test]
fn the_readme_says_how_to_install_and_the_demo_shows_its_build() {
    let readme = readme();
    let install = readme
        .find("cargo install --path . --locked")
        .expect("the install line");
    let first = readme
        .find("## Your first workflow")
        .expect("the first workflow");
    assert!(
        install < first,
        "installed before the first workflow uses `stagegraph`"
    );
    let demo = std::fs::read_to_string(repo_root().join("examples/demo/run.sh")).expect("demo");
    let build = demo
        .lines()
        .find(|l| l.trim_start().starts_with("cargo build"))
        .expect("the demo builds");
    assert!(
        !build.contains("--quiet"),
        "the build shows progress: {build}"
    );
}
