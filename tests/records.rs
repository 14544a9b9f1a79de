//! `[workflow] records`: run records (with state and cache) kept out of the project tree under
//! the user's state folder, owner-only, with a bound on how many are kept; `runs`, `runs show`
//! and `resume` still find them.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use crate::support::Test;

/// Every folder and file under `dir`, with its permission bits.
fn modes(dir: &Path) -> Vec<(PathBuf, u32)> {
    walkdir::WalkDir::new(dir)
        .into_iter()
        .flatten()
        .map(|entry| {
            let mode = entry.metadata().expect("metadata").permissions().mode() & 0o777;
            (entry.path().to_path_buf(), mode)
        })
        .collect()
}

/// The one project folder under the test's user state folder.
fn user_dir(t: &Test) -> PathBuf {
    let root = t.path("state-home/stagegraph");
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(&root)
        .unwrap_or_else(|e| panic!("no {}: {e}", root.display()))
        .flatten()
        .map(|entry| entry.path())
        .collect();
    assert_eq!(dirs.len(), 1, "one project folder: {dirs:?}");
    dirs.remove(0)
}

#[test]
fn user_records_leave_nothing_in_the_project_and_are_owner_only() {
    let t = Test::with_library("records");
    std::fs::create_dir_all(t.path("project/sub")).expect("a project");
    let project = t.path("project");
    let run = |word: &str| {
        t.command(["run", "private", "--input", &format!("word={word}")])
            .without_state_dir()
            .cwd(&project.join("sub"))
            .env("PROJECT_ROOT", project.to_str().expect("utf-8"))
            .output()
    };
    run("one").code(0);
    let listing: Vec<_> = walkdir::WalkDir::new(&project)
        .min_depth(1)
        .into_iter()
        .flatten()
        .map(|e| e.path().to_path_buf())
        .collect();
    assert_eq!(
        listing,
        [project.join("sub")],
        "nothing written in the project"
    );
    assert!(!t.exists(".stagegraph"));

    let dir = user_dir(&t);
    let name = dir
        .file_name()
        .expect("a name")
        .to_string_lossy()
        .to_string();
    assert!(name.starts_with("project-"), "{name}");
    let state = std::fs::read_to_string(dir.join("state/private.json")).expect("state");
    assert!(state.contains("\"said\""), "{state}");
    for (path, mode) in modes(&dir) {
        let want = if path.is_dir() { 0o700 } else { 0o600 };
        assert_eq!(mode, want, "{}", path.display());
    }

    // Found from the project folder and from below it, by `runs`, `runs show` and `resume`.
    for cwd in [project.clone(), project.join("sub")] {
        let out = t.command(["runs"]).without_state_dir().cwd(&cwd).output();
        out.code(0);
        assert!(out.stdout.contains("private"), "{}", out.stdout);
        let show = t
            .command(["runs", "show", "last", "--stage", "say"])
            .without_state_dir()
            .cwd(&cwd)
            .output();
        show.code(0);
        assert_eq!(show.stdout, "one\n");
    }
    let resumed = t
        .command(["resume", "last"])
        .without_state_dir()
        .cwd(&project)
        .env("PROJECT_ROOT", project.to_str().expect("utf-8"))
        .output();
    resumed.code(0);
    assert_eq!(resumed.stdout.trim(), "one");

    // At most `keep` runs are kept.
    for word in ["two", "three", "four", "five"] {
        run(word).code(0);
    }
    let runs = std::fs::read_dir(dir.join("runs")).expect("runs").count();
    assert_eq!(runs, 3);
    assert!(!project.join(".stagegraph").exists());
    assert!(!project.join("sub/.stagegraph").exists());

    // --state-dir still wins.
    t.run(["run", "private"]).code(0);
    assert_eq!(t.run_ids().len(), 1);
}

#[test]
fn private_records_in_the_state_folder() {
    let t = Test::with_library("records");
    t.run(["run", "shared"]).code(0);
    for (path, mode) in modes(&t.state_dir()) {
        let want = if path.is_dir() { 0o700 } else { 0o600 };
        assert_eq!(mode, want, "{}", path.display());
    }
}

/// A run killed with SIGKILL never writes how long it ran: `runs` shows how long it was seen
/// running (at least until its last stage ended), not 0 ms.
#[test]
fn runs_shows_how_long_a_killed_run_ran() {
    use std::time::Duration;
    let t = Test::new();
    t.write(
        "flow.toml",
        r#"
[stages.first]
command = ["sleep", "0.3"]

[stages.second]
after = ["first"]
command = ["sh", "-c", "echo $$ > second.pid; exec sleep 30"]
"#,
    );
    let mut child = t.command(["run", "flow.toml"]).spawn();
    let first_done = || {
        crate::support::recorded_runs(&t.state_dir())
            .last()
            .is_some_and(|id| {
                crate::support::read_record(&t.state_dir(), id)["stages"]["first"]["status"]
                    == "succeeded"
            })
    };
    crate::support::wait_for("`first` to finish", Duration::from_secs(60), first_done);
    crate::support::wait_for("`second` to start", Duration::from_secs(60), || {
        t.exists("second.pid") && t.read("second.pid").trim().parse::<i32>().is_ok()
    });
    child.kill().expect("kill stagegraph");
    let _ = child.wait();
    let pid: i32 = t.read("second.pid").trim().parse().expect("a pid");
    // SAFETY: a signal to the process the stage started.
    unsafe {
        libc::kill(pid, libc::SIGKILL);
    }
    let out = t.run(["runs", "--format", "json"]);
    out.code(0);
    let listed: serde_json::Value = serde_json::from_str(&out.stdout).expect("JSON");
    let run = &listed["runs"][0];
    assert_eq!(run["status"], "interrupted", "{run}");
    let record = t.last_run();
    let first = &record["stages"]["first"];
    assert!(first["duration_ms"].as_u64().unwrap() >= 300, "{record:#}");
    let shown = run["duration_ms"].as_u64().unwrap();
    assert!(
        shown >= first["duration_ms"].as_u64().unwrap(),
        "ran {shown}ms: {record:#}"
    );
    // The text listing says the same, and keeps saying it.
    let line = t.run(["runs"]).stdout;
    assert!(line.contains(&format!(" {shown}ms ")), "{line}");
    assert_eq!(t.last_run()["duration_ms"], shown);
}
