//! What an attacker or a crash must not get: a value run as shell code, a panic, a stolen
//! lock, a re-run of finished work, a kept secret. Each test fails without the fix it guards.

use crate::support::{running, Test};

/// A payload that runs `touch PWNED` if it is ever read as shell code, whichever quotes
/// surround it.
const PAYLOAD: &str = r#"$(touch PWNED)`touch PWNED`'; touch PWNED; '"; touch PWNED; ""#;

fn injection_workflow(script: &str) -> String {
    format!(
        "[workflow]\ndescription = \"d\"\n\n[inputs.v]\ntype = \"string\"\n\n\
         [stages.s]\nshell = '''\n{script}'''\n"
    )
}

/// Every quoting form an author may write around a value in a `shell` script: the value
/// reaches the process as data, and never runs.
#[test]
fn no_value_becomes_shell_code_whatever_the_quotes() {
    // `tojson` output is compared as the JSON it is (minijinja writes `'` as `\u0027`).
    let json = "JSON".to_string();
    let cases: Vec<(&str, &str, String)> = vec![
        ("bare", "printf '%s' {{ inputs.v }}", PAYLOAD.to_string()),
        (
            "double",
            "printf '%s' \"{{ inputs.v }}\"",
            PAYLOAD.to_string(),
        ),
        (
            "single",
            "printf '%s' '{{ inputs.v }}'",
            PAYLOAD.to_string(),
        ),
        (
            "heredoc",
            "cat <<EOF\n{{ inputs.v }}\nEOF\n",
            format!("{PAYLOAD}\n"),
        ),
        (
            "heredoc-dash",
            "cat <<-EOF\n\t{{ inputs.v }}\n\tEOF\n",
            format!("{PAYLOAD}\n"),
        ),
        (
            "tojson",
            "printf '%s' {{ inputs.v | tojson }}",
            json.clone(),
        ),
        (
            "tojson-double",
            "printf '%s' \"{{ inputs.v | tojson }}\"",
            json.clone(),
        ),
        (
            "tojson-single",
            "printf '%s' '{{ inputs.v | tojson }}'",
            json,
        ),
        (
            "safe",
            "printf '%s' {{ inputs.v | safe }}",
            PAYLOAD.to_string(),
        ),
        (
            "filtered",
            "printf '%s' {{ inputs.v | upper | lower }}",
            PAYLOAD.to_lowercase(),
        ),
        (
            "substitution",
            "printf '%s' \"$(printf '%s' {{ inputs.v }})\"",
            PAYLOAD.to_string(),
        ),
        (
            "block",
            "{% set x %}<{{ inputs.v }}>{% endset %}printf '%s' {{ x }}",
            format!("<{PAYLOAD}>"),
        ),
    ];
    for (form, script, expected) in cases {
        let t = Test::new();
        t.write("w.toml", &injection_workflow(script));
        t.run(["run", "w.toml", "--input", &format!("v={PAYLOAD}")])
            .code(0);
        assert!(!t.exists("PWNED"), "{form}: the value ran as shell code");
        let output = t.stage_output("s");
        if expected == "JSON" {
            let parsed: String = serde_json::from_str(&output).unwrap_or_default();
            assert_eq!(
                parsed, PAYLOAD,
                "{form}: the value arrived changed: {output}"
            );
        } else {
            assert_eq!(output, expected, "{form}: the value arrived changed");
        }
    }
}

/// A shell started by a `command` with `-c` gets the same treatment, and code for another
/// interpreter refuses a printed value.
#[test]
fn a_command_running_a_shell_or_an_interpreter_gets_no_code() {
    let t = Test::new();
    t.write(
        "w.toml",
        "[workflow]\ndescription = \"d\"\n\n[inputs.v]\ntype = \"string\"\n\n\
         [stages.s]\ncommand = [\"bash\", \"-eu\", \"-o\", \"pipefail\", \"-c\", \"printf '%s' '{{ inputs.v }}'\"]\n",
    );
    t.run(["run", "w.toml", "--input", &format!("v={PAYLOAD}")])
        .code(0);
    assert!(!t.exists("PWNED"), "the value ran as shell code");
    assert_eq!(t.stage_output("s"), PAYLOAD);

    let t = Test::new();
    t.write(
        "w.toml",
        "[workflow]\ndescription = \"d\"\n\n[inputs.v]\ntype = \"string\"\n\n\
         [stages.s]\ncommand = [\"python3\", \"-c\", \"print('{{ inputs.v }}')\"]\n",
    );
    t.run([
        "run",
        "w.toml",
        "--input",
        "v=x'); open('PWNED', 'w'); print('",
    ])
    .code(2)
    .stderr_has("is printed into the code `python3` runs");
    assert!(!t.exists("PWNED"));
}

/// A value cannot be passed into a heredoc whose quoted delimiter turns expansion off: the
/// stage fails with the reason instead of running the script.
#[test]
fn a_value_in_a_quoted_heredoc_is_refused() {
    let t = Test::new();
    t.write(
        "w.toml",
        &injection_workflow("cat <<'EOF'\n{{ inputs.v }}\nEOF\n"),
    );
    t.run(["run", "w.toml", "--input", "v=x"])
        .code(1)
        .stderr_has("quoted delimiter");
}

/// Malformed expressions and templates wherever a user may write one are diagnostics at the
/// place they were written, never a panic of the binary.
#[test]
fn malformed_expressions_are_diagnostics_not_panics() {
    for (key, text) in [
        ("exit_if", "}}e"),
        ("if", "}}e"),
        ("foreach", "}}e"),
        ("assert", "}}e"),
        ("exit_if", "%}x"),
        ("shell", "echo {{ }}e }}"),
    ] {
        let t = Test::new();
        let action = if key == "shell" {
            ""
        } else {
            "shell = \"echo\"\n"
        };
        t.write(
            "w.toml",
            &format!("[workflow]\ndescription = \"d\"\n\n[stages.a]\n{action}{key} = '{text}'\n"),
        );
        for command in ["check", "run"] {
            let out = t.run([command, "w.toml"]);
            out.code(2);
            assert!(
                !out.stderr.contains("panicked"),
                "{key} = {text}: {}",
                out.stderr
            );
        }
    }
}

/// A schema's lower bounds no instance in memory can meet are a `check` error, and the
/// instance a dry-run assumes is bounded however large the schema's minimums multiply.
#[test]
fn example_instances_are_bounded() {
    let t = Test::new();
    t.write(
        "schemas/huge.json",
        r#"{"type":"string","minLength":9223372036854775807}"#,
    );
    t.write("schemas/many.json", r#"{"type":"array","minItems":1e11}"#);
    t.write(
        "schemas/nested.json",
        r#"{"type":"array","minItems":100000,"items":{"type":"array","minItems":100000,
            "items":{"type":"string","minLength":100000}}}"#,
    );
    let workflow = |schema: &str| {
        format!(
            "[workflow]\ndescription = \"d\"\n\n[stages.a]\nshell = \"echo\"\n\
             output = {{ format = \"json\", schema = \"{schema}\" }}\n"
        )
    };
    for (schema, key) in [("huge.json", "minLength"), ("many.json", "minItems")] {
        t.write("w.toml", &workflow(schema));
        t.run(["-L", ".", "check", "w.toml"])
            .code(2)
            .stderr_has(&format!("schema asks for `{key}"))
            .stderr_has("no instance that large fits in memory");
        t.run(["-L", ".", "run", "w.toml", "--dry-run"]).code(2);
    }
    t.write("w.toml", &workflow("nested.json"));
    t.run(["-L", ".", "run", "w.toml", "--dry-run"]).code(0);
    assert_eq!(t.last_run()["status"], "completed");
}

/// A run killed mid-append leaves a torn last line in the cache: the next entry still starts
/// on a line of its own (so it is found), and the fragment is reported once, then dropped.
#[test]
fn a_torn_cache_line_swallows_nothing_and_is_reported_once() {
    let t = Test::new();
    t.write(
        "w.toml",
        "[workflow]\ndescription = \"d\"\n\n[inputs.n]\ntype = \"string\"\n\n\
         [stages.a]\nshell = \"echo {{ inputs.n }} >> ran.txt; echo {{ inputs.n }}\"\ncache = true\n",
    );
    t.run(["run", "w.toml", "--input", "n=1"]).code(0);
    let path = t.state_dir().join("cache").join("w.jsonl");
    let text = std::fs::read(&path).expect("a cache file");
    // What a kill during the append leaves: the line without its end.
    std::fs::write(&path, &text[..text.len() - 7]).unwrap();

    let second = t.run(["run", "w.toml", "--input", "n=2"]);
    second.code(0).stderr_has("ignoring corrupt cache entry");
    let third = t.run(["run", "w.toml", "--input", "n=2"]);
    third.code(0);
    assert!(
        !third.stderr.contains("corrupt cache entry"),
        "the fragment is reported again:\n{}",
        third.stderr
    );
    assert_eq!(t.last_run()["stages"]["a"]["status"], "cached");
    assert_eq!(
        t.count("ran.txt"),
        2,
        "the entry after the fragment was lost"
    );
}

/// A workflow whose stage `b` says it started, then waits for the file `go`.
fn crash_workflow() -> String {
    "[workflow]\ndescription = \"d\"\n\n\
     [stages.a]\nshell = \"echo a >> a.count; echo A\"\n\n\
     [stages.b]\nafter = [\"a\"]\n\
     shell = \"echo b >> b.count; echo $$ > b.pid; while [ ! -e go ]; do sleep 0.02; done; echo B\"\n"
        .to_string()
}

/// Whether the newest `run.json` on disk has stage `b` running.
fn record_says_b_runs(t: &Test) -> bool {
    let runs = t.state_dir().join("runs");
    let Some(id) = t.run_ids().pop() else {
        return false;
    };
    std::fs::read_to_string(runs.join(id).join("run.json"))
        .ok()
        .and_then(|text| serde_json::from_str::<serde_json::Value>(&text).ok())
        .is_some_and(|r| r["stages"]["b"]["status"] == "running")
}

/// Start a run of `w.toml` and kill the engine with SIGKILL once stage `b` is running; the
/// engine's pid.
fn kill_during_b(t: &Test) -> u32 {
    let mut child = t.command(["run", "w.toml"]).spawn();
    crate::support::wait_for(
        "stage b to start",
        std::time::Duration::from_secs(60),
        || t.read_opt("b.pid").is_some_and(|p| p.ends_with('\n')) && record_says_b_runs(t),
    );
    let pid = child.id();
    child.kill().expect("kill -9 the engine");
    child.wait().expect("reap the engine");
    pid
}

/// A run whose engine was killed reads as `interrupted` wherever it is shown, and a resume
/// builds on it.
#[test]
fn a_killed_run_is_shown_listed_and_resumed_as_interrupted() {
    let t = Test::new();
    t.write("w.toml", &crash_workflow());
    kill_during_b(&t);
    let record = t.last_run();
    assert_eq!(record["status"], "interrupted", "{record:#}");
    assert_eq!(record["stages"]["a"]["status"], "succeeded");
    assert_ne!(record["stages"]["b"]["status"], "running");
    let listed = t.run(["runs"]);
    assert!(listed.stdout.contains("interrupted"), "{}", listed.stdout);
    let on_disk = std::fs::read_to_string(
        t.state_dir()
            .join("runs")
            .join(record["run_id"].as_str().unwrap())
            .join("run.json"),
    )
    .unwrap();
    assert!(
        on_disk.contains("\"interrupted\""),
        "the record is rewritten as read"
    );

    t.write("go", "");
    t.run(["resume", "last"]).code(0);
    assert_eq!(t.last_run()["stages"]["a"]["status"], "cached");
    assert_eq!(t.count("a.count"), 1, "a finished stage ran again");
}

/// The `[workflow] lock` folder is a write like any other: outside `writes` the run fails
/// before creating it.
#[test]
fn the_workflow_lock_stays_inside_writes() {
    for (writes, lock) in [
        ("[\"out\"]", "../escaped.lock.d"),
        ("[\"out\"]", "elsewhere.lock.d"),
        ("[]", "x.lock.d"),
    ] {
        let t = Test::new();
        std::fs::create_dir_all(t.path("work/out")).unwrap();
        t.write(
            "work/w.toml",
            &format!(
                "[workflow]\ndescription = \"d\"\nwrites = {writes}\nlock = {{ path = \"{lock}\" }}\n\n\
                 [stages.a]\ncommand = [\"true\"]\n"
            ),
        );
        // `check` knows it, so the run is refused before it starts (an invalid workflow).
        let out = t.command(["run", "work/w.toml"]).output();
        out.code(2);
        assert!(
            out.stderr.contains(&format!("`{lock}`"))
                && out.stderr.contains("the workflow's writes")
                && out.stderr.contains("w.toml:4:"),
            "{lock}: {}",
            out.stderr
        );
        t.command(["check", "work/w.toml"]).output().code(2);
        assert!(
            !t.exists("escaped.lock.d") && !t.exists("elsewhere.lock.d") && !t.exists("x.lock.d")
        );
    }
    let t = Test::new();
    t.write(
        "w.toml",
        "[workflow]\ndescription = \"d\"\nwrites = [\"locks\"]\nlock = { path = \"locks/w.lock.d\" }\n\n\
         [stages.a]\ncommand = [\"true\"]\n",
    );
    t.run(["run", "w.toml"]).code(0);
    // A templated lock path is known only when the run renders it: checked then.
    let t = Test::new();
    std::fs::create_dir_all(t.path("out")).unwrap();
    t.write(
        "w.toml",
        "[workflow]\ndescription = \"d\"\nwrites = [\"out\"]\nlock = { path = \"{{ inputs.dir }}/w.lock.d\" }\n\n\
         [inputs.dir]\ntype = \"string\"\n\n[stages.a]\ncommand = [\"true\"]\n",
    );
    t.run(["check", "w.toml"]).code(0);
    let out = t
        .command(["run", "w.toml", "--input", "dir=elsewhere"])
        .output();
    out.code(1);
    assert!(
        out.stderr.contains("outside the workflow's writes"),
        "{}",
        out.stderr
    );
    assert!(!t.exists("elsewhere"));
}

/// Sets a folder's modification time ten minutes and more into the past.
fn age(path: &std::path::Path) {
    let old = std::time::SystemTime::now() - std::time::Duration::from_secs(700);
    std::fs::File::open(path)
        .and_then(|dir| dir.set_modified(old))
        .expect("age the lock folder");
}

/// A lock whose holder is alive is not stale, however old its folder: neither the
/// `[workflow] lock` nor `lock.acquire` is taken from a live run, and the holder's release
/// then removes its own lock only.
#[test]
fn a_live_lock_older_than_stale_after_is_not_taken() {
    let wait = "while [ ! -e go ]; do sleep 0.02; done";
    for (name, header, stages) in [
        (
            "workflow-lock",
            "writes = [\".\"]\nlock = { path = \"w.lock.d\", stale_after = \"600s\", busy = \"exit\" }\n",
            format!("[stages.hold]\nshell = \"touch holding; {wait}\"\n"),
        ),
        (
            "lock-acquire",
            "writes = [\".\"]\n",
            format!(
                "[stages.lock]\nuses = \"lock.acquire\"\nwith = {{ path = \"w.lock.d\", stale_after = \"600s\" }}\n\n\
                 [stages.hold]\nafter = [\"lock\"]\nif = \"stages.lock.output.acquired\"\n\
                 shell = \"touch holding; {wait}\"\n"
            ),
        ),
    ] {
        let t = Test::new();
        t.write(
            "w.toml",
            &format!("[workflow]\ndescription = \"d\"\n{header}\n{stages}"),
        );
        let mut first = t.command(["run", "w.toml"]).spawn();
        crate::support::wait_for("the first run to hold the lock", std::time::Duration::from_secs(60), || {
            t.exists("holding")
        });
        age(&t.path("w.lock.d"));
        std::fs::remove_file(t.path("holding")).unwrap();
        let second = t.run(["run", "w.toml"]);
        second.code(0);
        assert!(!t.exists("holding"), "{name}: the second run took a live lock");
        if name == "lock-acquire" {
            let output: serde_json::Value = serde_json::from_str(&t.stage_output("lock")).unwrap();
            assert_eq!(output["acquired"], false, "{name}: {output}");
            assert_eq!(t.last_run()["stages"]["hold"]["status"], "skipped");
        } else {
            assert_eq!(t.last_run()["status"], "exited");
        }
        t.write("go", "");
        assert!(first.wait().unwrap().success(), "{name}: the first run failed");
        assert!(!t.exists("w.lock.d"), "{name}: the holder's lock is left behind");
    }
}

/// When the engine is killed outright, the stage process it was running dies with it, and so
/// does the reaper that killed it.
#[test]
fn a_stage_process_dies_with_a_killed_engine() {
    if !proc_or_skip() {
        return;
    }
    let t = Test::new();
    t.write("w.toml", &crash_workflow());
    let engine = kill_during_b(&t);
    let pid = t.read("b.pid").trim().to_string();
    wait_until("the stage process to die", || !running(&pid));
    wait_until("the reaper to end", || reapers_of(engine).is_empty());
}

/// What a stage started in the background, in its own process group, dies with a killed engine
/// too: the whole group is killed, not only the stage's own process.
#[test]
fn what_a_stage_started_in_its_group_dies_with_a_killed_engine() {
    if !proc_or_skip() {
        return;
    }
    let t = Test::new();
    t.write(
        "w.toml",
        "[workflow]\ndescription = \"d\"\n\n\
         [stages.b]\n\
         shell = \"sh -c 'while [ ! -e go ]; do sleep 0.02; done' & echo $! > bg.pid; echo $$ > b.pid; wait\"\n",
    );
    let _release = crate::support::Release(t.path("go"));
    kill_during_b(&t);
    for file in ["b.pid", "bg.pid"] {
        let pid = t.read(file).trim().to_string();
        wait_until(&format!("the process in {file} to die"), || !running(&pid));
    }
}

/// A run that starts a process has a reaper while it runs (the stage finds it by its parent's
/// pid), and leaves none behind: the reaper ends with the engine.
#[test]
fn a_run_has_a_reaper_that_ends_with_it() {
    if !proc_or_skip() {
        return;
    }
    let t = Test::new();
    t.write(
        "w.toml",
        r#"[workflow]
description = "d"

[stages.a]
shell = '''
for f in /proc/[0-9]*/environ; do
  if tr '\0' '\n' < "$f" 2>/dev/null | grep -qx "STAGEGRAPH_REAPER_OF=$PPID"; then echo "$f"; fi
done > reapers.txt
'''
"#,
    );
    let mut child = t.command(["run", "w.toml"]).spawn();
    let engine = child.id();
    assert!(
        child.wait().unwrap().success(),
        "{}",
        t.read_opt("spawned.stderr").unwrap_or_default()
    );
    let seen = t.read("reapers.txt");
    assert_eq!(
        seen.lines().count(),
        1,
        "one reaper while the run ran: {seen:?}"
    );
    wait_until("the reaper to end", || reapers_of(engine).is_empty());
}

/// Whether `/proc` is there to see processes by; says so when it is not, for the test to skip.
fn proc_or_skip() -> bool {
    let there = std::path::Path::new("/proc/self/environ").exists();
    if !there {
        crate::support::skip("no /proc to see processes by");
    }
    there
}

/// Wait for `what` (60 s at most: a hang guard, not a speed claim).
fn wait_until(what: &str, ready: impl FnMut() -> bool) {
    crate::support::wait_for(what, std::time::Duration::from_secs(60), ready);
}

/// The processes serving as reaper of engine `pid`, found by the variable set on them.
fn reapers_of(pid: u32) -> Vec<String> {
    let wanted = format!("STAGEGRAPH_REAPER_OF={pid}");
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let name = entry.file_name().into_string().ok()?;
            name.parse::<u32>().ok()?;
            let environ = std::fs::read(entry.path().join("environ")).ok()?;
            let holds = environ
                .split(|&b| b == 0)
                .any(|var| var == wanted.as_bytes());
            (holds && running(&name)).then_some(name)
        })
        .collect()
}

/// Loops nested past any use: each evaluation has a bound on the steps it may run.
const ENDLESS: &str =
    "{% for i in range(100000) %}{% for j in range(100000) %}x{% endfor %}{% endfor %}";

/// A template, a command's argument or an `[outputs]` entry that would loop for hours fails
/// its run with an error naming the bound, in a real run and in a dry-run, and the record says
/// `failed` rather than `running`.
#[test]
fn an_endless_template_fails_its_run_naming_the_bound_wherever_it_is() {
    let cases = [
        (
            "template",
            format!("[stages.t]\ntemplate = {{ inline = \"{ENDLESS}\" }}\n"),
        ),
        (
            "argv",
            format!("[stages.c]\ncommand = [\"echo\", \"{ENDLESS}\"]\n"),
        ),
        (
            "outputs",
            format!("[stages.c]\ncommand = [\"true\"]\n\n[outputs]\no = \"{ENDLESS}\"\n"),
        ),
    ];
    for (name, body) in cases {
        for dry in [false, true] {
            let test = Test::new();
            test.write(
                "lib/workflows/w.toml",
                &format!("[workflow]\ndescription = \"d\"\n\n{body}"),
            );
            let mut args = vec!["-L", "lib", "run", "w"];
            if dry {
                args.push("--dry-run");
            }
            let mut child = test.command(args).spawn();
            let code = crate::support::wait_exit(
                &mut child,
                "a run of an endless template",
                std::time::Duration::from_secs(120),
            );
            let stderr = test.read("spawned.stderr");
            assert_eq!(code, Some(1), "{name} (dry-run {dry}): {stderr}");
            assert!(
                stderr.contains("steps, the most one evaluation may run"),
                "{name} (dry-run {dry}): {stderr}"
            );
            if !dry {
                assert_eq!(test.last_run()["status"], "failed", "{name}");
            }
        }
    }
}

/// A template that prints without end stops at the most text one template may render.
#[test]
fn a_template_rendering_too_much_text_fails_naming_the_bound() {
    let test = Test::new();
    test.write(
        "lib/workflows/w.toml",
        "[workflow]\ndescription = \"d\"\n\n[stages.t]\n\
         template = { inline = \"{% for i in range(1000) %}{{ 'y' * 1000000 }}{% endfor %}\" }\n",
    );
    let out = test.run(["-L", "lib", "run", "w"]);
    out.code(1).stderr_has("renders more than 64 MiB of text");
    assert_eq!(test.last_run()["status"], "failed");
}

/// `--keep-runs` never removes the record of a run still in progress: the run goes on, writes
/// its record and finishes, while newer runs of its workflow prune the older finished ones.
#[test]
fn pruning_keeps_the_record_of_a_run_in_progress() {
    let test = Test::new();
    test.write(
        "lib/workflows/w.toml",
        "[workflow]\ndescription = \"d\"\n\n[stages.s]\nshell = '''\n\
         if [ -e hold ]; then rm hold; touch started; while [ ! -e go ]; do sleep 0.05; done; fi\n\
         '''\n",
    );
    test.run(["-L", "lib", "run", "w"]).code(0);
    let finished = test.newest_run();
    test.write("hold", "");
    let mut child = test
        .command(["-L", "lib", "run", "w", "--keep-runs", "1"])
        .spawn();
    crate::support::wait_for(
        "the held run to start its stage",
        std::time::Duration::from_secs(60),
        || test.exists("started"),
    );
    let held = test.newest_run();
    assert_ne!(held, finished);
    test.run(["-L", "lib", "run", "w", "--keep-runs", "1"])
        .code(0);
    test.run(["-L", "lib", "run", "w", "--keep-runs", "1"])
        .code(0);
    let runs = test.state_dir().join("runs");
    assert!(
        runs.join(&held).join("run.json").exists(),
        "the run in progress was pruned"
    );
    assert!(!runs.join(&finished).exists(), "the finished run was kept");
    test.write("go", "");
    let code = crate::support::wait_exit(
        &mut child,
        "the held run",
        std::time::Duration::from_secs(60),
    );
    assert_eq!(code, Some(0), "{}", test.read("spawned.stderr"));
    let record = crate::support::read_record(&test.state_dir(), &held);
    assert_eq!(record["status"], "completed", "{record:#}");
}

/// One engine at a time resumes a run: a second resume of a run being resumed fails at once,
/// naming the reason, and runs none of its stages; the first goes on and finishes.
#[test]
fn a_second_resume_of_a_run_being_resumed_is_refused() {
    let test = Test::new();
    test.write(
        "lib/workflows/w.toml",
        "[workflow]\ndescription = \"d\"\n\n[stages.s]\nshell = '''\n\
         echo x >> attempts\n\
         if [ -e hold ]; then rm hold; touch started; while [ ! -e go ]; do sleep 0.05; done; fi\n\
         test -e ok\n'''\n",
    );
    test.run(["-L", "lib", "run", "w"]).code(1);
    let failed = test.newest_run();
    test.write("hold", "").write("ok", "");
    let mut first = test
        .command(["-L", "lib", "resume", failed.as_str()])
        .spawn();
    crate::support::wait_for(
        "the first resume to start its stage",
        std::time::Duration::from_secs(60),
        || test.exists("started"),
    );
    let second = test.run(["-L", "lib", "resume", failed.as_str()]);
    assert_ne!(second.code, Some(0), "{second:?}");
    second.stderr_has("is being resumed by another engine");
    assert_eq!(
        test.read("attempts").lines().count(),
        2,
        "the second resume ran the stage"
    );
    test.write("go", "");
    let code = crate::support::wait_exit(
        &mut first,
        "the first resume",
        std::time::Duration::from_secs(60),
    );
    assert_eq!(code, Some(0), "{}", test.read("spawned.stderr"));
    assert_eq!(test.last_run()["status"], "completed");
}

/// A value that runs `touch PWNED` wherever bash reads it as arithmetic or as a name.
const SUBSCRIPT: &str = "a[$(touch PWNED)]";

fn bash_workflow(script: &str) -> String {
    format!(
        "[workflow]\ndescription = \"d\"\n\n[inputs.v]\ntype = \"string\"\n\n\
         [stages.s]\ncommand = [\"bash\", \"-c\", '''{script}''']\n"
    )
}

/// Where bash reads a value as arithmetic or as a variable name (`[[ -eq ]]`, `$(( ))`, `let`,
/// `(( ))`, subscripts, `declare -i`, `-v`, `read`, `printf -v`), it evaluates the value's
/// subscripts as code: a value there must be an integer (or a name), else the stage fails
/// without running anything; an integer passes.
#[test]
fn a_value_read_as_bash_arithmetic_must_be_an_integer() {
    let cases = [
        "[[ \"{{ inputs.v }}\" -eq 1 ]] && echo one",
        "echo $(( {{ inputs.v }} + 1 ))",
        "echo \"$(( {{ inputs.v }} ))\"",
        "let \"x = {{ inputs.v }}\"; echo $x",
        "(( {{ inputs.v }} > 0 )) && echo pos",
        "a=(); a[{{ inputs.v }}]=1; echo \"${a[@]}\"",
        "a=(1 2); echo \"${a[{{ inputs.v }}]}\"",
        "declare -i n=\"{{ inputs.v }}\"; echo $n",
        "for (( i = {{ inputs.v }}; i < 2; i++ )); do echo $i; done",
        "[[ -v \"{{ inputs.v }}\" ]] && echo set",
        "printf -v \"{{ inputs.v }}\" %s 1",
        "read \"{{ inputs.v }}\" <<< 1",
        "declare \"{{ inputs.v }}=1\"",
        "test -v \"{{ inputs.v }}\"",
    ];
    for script in cases {
        let t = Test::new();
        t.write("w.toml", &bash_workflow(script));
        let out = t.run(["run", "w.toml", "--input", &format!("v={SUBSCRIPT}")]);
        out.code(1);
        assert!(!t.exists("PWNED"), "{script}: the value ran as code");
        assert!(
            out.stderr.contains("must be an integer") || out.stderr.contains("must be a name"),
            "{script}: {}",
            out.stderr
        );
    }
    // An integer (and a name, where a name is read) passes as data.
    let t = Test::new();
    t.write(
        "w.toml",
        &bash_workflow(
            "[[ \"{{ inputs.v }}\" -eq 1 ]] && echo one; echo $(( {{ inputs.v }} + 1 ))",
        ),
    );
    t.run(["run", "w.toml", "--input", "v=1"]).code(0);
    assert_eq!(t.stage_output("s"), "one\n2\n");
}

/// A value printed into code that a program further in runs: behind a wrapper the engine
/// does not know (`timeout`, `env`, `nice`, `nohup`, `stdbuf`, `sudo`, `exec`, `command`,
/// `builtin`), through `xargs`, `eval`, `trap`, or the code of another interpreter (`python3
/// -c`, `perl -e`, `node -e`, `ruby -e`, an awk program, a sed script): the stage is refused
/// before anything runs, and `check` says where.
#[test]
fn a_value_printed_into_code_a_script_runs_is_refused() {
    let cases = [
        "timeout 5 sh -c \"echo {{ inputs.v }}\"",
        "timeout -s KILL 5 bash -c 'echo {{ inputs.v }}'",
        "env FOO=1 sh -c \"echo {{ inputs.v }}\"",
        "nice -n 5 sh -c \"echo {{ inputs.v }}\"",
        "nohup sh -c \"echo {{ inputs.v }}\" 2>/dev/null",
        "stdbuf -oL sh -c \"echo {{ inputs.v }}\"",
        "exec sh -c \"echo {{ inputs.v }}\"",
        "command sh -c \"echo {{ inputs.v }}\"",
        "builtin eval \"echo {{ inputs.v }}\"",
        "eval \"echo {{ inputs.v }}\"",
        "trap \"echo {{ inputs.v }}\" EXIT",
        "x=$(sh -c \"echo {{ inputs.v }}\"); echo $x",
        "python3 -c \"print('{{ inputs.v }}')\"",
        "perl -e 'print \"{{ inputs.v }}\"'",
        "perl -lne 'print \"{{ inputs.v }}\"' /dev/null",
        "ruby -e 'puts \"{{ inputs.v }}\"'",
        "node -e 'console.log(\"{{ inputs.v }}\")'",
        "awk 'BEGIN { print \"{{ inputs.v }}\" }'",
        "echo x | sed -e 's/x/{{ inputs.v }}/'",
        "echo x | sed 's/x/{{ inputs.v }}/'",
        "env -S \"sh -c {{ inputs.v }}\"",
        "su -c \"echo {{ inputs.v }}\" root",
    ];
    let payload = "'; touch PWNED; echo '\"; touch PWNED; echo \"";
    for script in cases {
        let t = Test::new();
        t.write("w.toml", &injection_workflow(&format!("{script}\n")));
        let out = t.run(["run", "w.toml", "--input", &format!("v={payload}")]);
        out.code(2);
        assert!(!t.exists("PWNED"), "{script}: the value ran as code");
        assert!(
            out.stderr.contains("would run as code"),
            "{script}: {}",
            out.stderr
        );
        let check = t.run(["check", "w.toml"]);
        check.code(2);
        assert!(
            check.stderr.contains("would run as code") && check.stderr.contains("w.toml:"),
            "{script}: check: {}",
            check.stderr
        );
    }
}

/// A shell or interpreter that reads its code from its standard input (`sh -s`, `bash <
/// file`, `| sh`, a heredoc, `xargs sh -c`) in a script that passes values is refused: the
/// input may carry them.
#[test]
fn a_shell_reading_its_code_from_input_in_a_script_with_values_is_refused() {
    let cases = [
        "echo \"{{ inputs.v }}\" | sh",
        "echo \"{{ inputs.v }}\" | sh -s",
        "printf '%s' \"{{ inputs.v }}\" > f.sh; bash < f.sh",
        "bash <<EOF\necho {{ inputs.v }}\nEOF\n",
        "echo \"{{ inputs.v }}\" | python3",
        "echo \"{{ inputs.v }}\" | xargs sh -c",
        "echo \"{{ inputs.v }}\" | xargs -I{} sh -c 'echo {}'",
        "sh <(echo \"{{ inputs.v }}\")",
        "bash <<< \"{{ inputs.v }}\"",
    ];
    for script in cases {
        let t = Test::new();
        t.write("w.toml", &injection_workflow(&format!("{script}\n")));
        let out = t.run(["run", "w.toml", "--input", "v=touch PWNED"]);
        assert_ne!(out.code, Some(0), "{script}: {}", out.stderr);
        assert!(
            out.stderr.contains("standard input")
                || out.stderr.contains("its input")
                || out.stderr.contains("would run as code"),
            "{script}: {}",
            out.stderr
        );
        assert!(!t.exists("PWNED"), "{script}: the value ran as code");
    }
    // A command running a shell behind a wrapper, or one reading a value from its input.
    for (argv, stdin) in [
        (r#"["timeout", "5", "sh", "-c", "{{ inputs.v }}"]"#, ""),
        (r#"["env", "sh", "-c", "{{ inputs.v }}"]"#, ""),
        (r#"["sh"]"#, "stdin = \"{{ inputs.v }}\"\n"),
        (r#"["perl", "-pe", "{{ inputs.v }}"]"#, ""),
    ] {
        let t = Test::new();
        t.write(
            "w.toml",
            &format!(
                "[workflow]\ndescription = \"d\"\n\n[inputs.v]\ntype = \"string\"\n\n\
                 [stages.s]\ncommand = {argv}\n{stdin}"
            ),
        );
        let out = t.run(["run", "w.toml", "--input", "v=touch PWNED"]);
        assert_ne!(out.code, Some(0), "{argv}: {}", out.stderr);
        assert!(!t.exists("PWNED"), "{argv}: the value ran as code");
    }
}

/// What stays data stays clean: comparisons, `echo`, `printf '%s'`, `grep -F --`, a value as
/// an argument after `sh -c`'s script, `export NAME=value`.
#[test]
fn valid_uses_of_values_stay_clean() {
    let script = "[[ \"{{ inputs.v }}\" == x ]] || echo differs\n\
                  echo \"{{ inputs.v }}\" | grep -F -- \"{{ inputs.v }}\"\n\
                  printf '%s\\n' \"{{ inputs.v }}\"\n\
                  export V=\"{{ inputs.v }}\"; sh -c 'printf \"%s\\n\" \"$1\"' _ \"{{ inputs.v }}\"\n";
    let t = Test::new();
    t.write("w.toml", &bash_workflow(script));
    t.run(["check", "w.toml"]).code(0);
    t.run(["run", "w.toml", "--input", &format!("v={PAYLOAD}")])
        .code(0);
    assert!(!t.exists("PWNED"));
    assert_eq!(
        t.stage_output("s"),
        format!("differs\n{PAYLOAD}\n{PAYLOAD}\n{PAYLOAD}\n")
    );
}

/// A NUL in a value is refused with its place wherever it would go (a script, an argument, an
/// environment variable); and data cannot spell the marker a script's value is replaced by.
#[test]
fn a_nul_in_a_value_is_an_error_everywhere() {
    let forms = [
        injection_workflow("printf '%s' \"{{ inputs.v }}\"\n"),
        "[workflow]\ndescription = \"d\"\n\n[inputs.v]\ntype = \"string\"\n\n\
         [stages.s]\ncommand = [\"printf\", \"%s\", \"{{ inputs.v }}\"]\n"
            .to_string(),
        "[workflow]\ndescription = \"d\"\n\n[inputs.v]\ntype = \"string\"\n\n\
         [stages.s]\ncommand = [\"true\"]\nenv = { X = \"{{ inputs.v }}\" }\n"
            .to_string(),
    ];
    for workflow in forms {
        let t = Test::new();
        t.write("w.toml", &workflow);
        t.write("v.json", r#"{"v": "a\u0000b"}"#);
        t.run(["run", "w.toml", "--inputs-json", "v.json"])
            .code(1)
            .stderr_has("NUL character (at byte 1)");
    }
    // NUL, a digit, NUL inside a value: once it stood for another printed value.
    let t = Test::new();
    t.write(
        "w.toml",
        &injection_workflow("printf '%s|%s' \"{{ inputs.v }}\" \"{{ inputs.v }}x\"\n"),
    );
    t.write("v.json", r#"{"v": "\u00001\u0000"}"#);
    t.run(["run", "w.toml", "--inputs-json", "v.json"])
        .code(1)
        .stderr_has("NUL character");
}

/// A string doubled by `~` in a loop fails at the bound on what one template may make, naming
/// it, long before memory runs out (minijinja's own `~` joins without a bound: the engine
/// writes it as a function that refuses a string past 64 MiB); in a template, an argv and a
/// dry-run alike.
#[test]
fn a_string_doubled_with_a_tilde_fails_at_the_bound() {
    // A `set` inside a loop is the loop's own in Jinja: a namespace carries the string over.
    let doubling = "{% set ns = namespace(s='x') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s | length }}";
    for (body, dry) in [
        (
            format!("[stages.t]\ntemplate = {{ inline = \"{doubling}\" }}\n"),
            false,
        ),
        (
            format!("[stages.c]\ncommand = [\"echo\", \"{doubling}\"]\n"),
            false,
        ),
        (
            format!("[stages.t]\ntemplate = {{ inline = \"{doubling}\" }}\n"),
            true,
        ),
    ] {
        let test = Test::new();
        test.write(
            "lib/workflows/w.toml",
            &format!("[workflow]\ndescription = \"d\"\n\n{body}"),
        );
        let mut args = vec!["-L", "lib", "run", "w"];
        if dry {
            args.push("--dry-run");
        }
        let out = test.run(args);
        out.code(1)
            .stderr_has("`~` would make a string of 128 MiB (134217728 bytes), more than the 64 MiB one template may make");
        if !dry {
            assert_eq!(test.last_run()["status"], "failed", "{body}");
        }
    }
}

/// Thirty items, each a template of some 25 million steps (under the step bound, seconds
/// each): a stage the step bound alone would let run for a minute or more.
const LONG_ITEMS: &str = "[stages.t]\nforeach = \"range(30)\"\n\
    template = { inline = \"{% for i in range(100000) %}{% for j in range(60) %}{% set x = j %}{% endfor %}{% endfor %}\" }\n";

/// A template stage stops at its `timeout` as a command does: it fails within about its
/// timeout, and the record says it timed out.
#[test]
fn a_long_template_stops_at_its_stage_timeout() {
    let test = Test::new();
    test.write(
        "lib/workflows/w.toml",
        &format!("[workflow]\ndescription = \"d\"\n\n{LONG_ITEMS}timeout = \"2s\"\n"),
    );
    let started = std::time::Instant::now();
    let out = test.run(["-L", "lib", "run", "w"]);
    let took = started.elapsed();
    out.code(1)
        .stderr_has("timed out after 2s while the template was evaluated");
    assert!(took < std::time::Duration::from_secs(20), "took {took:?}");
    let record = test.last_run();
    assert_eq!(record["status"], "failed");
    let error = record["stages"]["t"]["error"].as_str().unwrap_or_default();
    assert!(error.contains("timed out after 2s"), "{record:#}");
}

/// SIGTERM (and SIGINT) while a long template is evaluated ends the engine promptly, and the
/// record says the run was interrupted, not `running`.
#[test]
fn a_long_template_stops_at_sigterm_and_sigint() {
    for signal in [libc::SIGTERM, libc::SIGINT] {
        let test = Test::new();
        test.write(
            "lib/workflows/w.toml",
            &format!("[workflow]\ndescription = \"d\"\n\n{LONG_ITEMS}"),
        );
        let mut child = test.command(["-L", "lib", "run", "w"]).spawn();
        crate::support::wait_for(
            "the template stage to start",
            std::time::Duration::from_secs(60),
            || {
                test.exists("state/runs")
                    && std::fs::read_to_string(
                        test.state_dir()
                            .join("runs")
                            .join(test.newest_run())
                            .join("run.json"),
                    )
                    .is_ok_and(|text| {
                        serde_json::from_str::<serde_json::Value>(&text)
                            .is_ok_and(|r| r["stages"]["t"]["status"] == "running")
                    })
            },
        );
        let pid = i32::try_from(child.id()).expect("a pid");
        let sent = std::time::Instant::now();
        // SAFETY: a signal to the engine this test started.
        assert_eq!(unsafe { libc::kill(pid, signal) }, 0);
        let code = crate::support::wait_exit(
            &mut child,
            "the engine after a signal",
            std::time::Duration::from_secs(60),
        );
        let took = sent.elapsed();
        assert!(
            took < std::time::Duration::from_secs(10),
            "signal {signal}: the engine took {took:?} to end"
        );
        assert_ne!(code, Some(0));
        let record = test.last_run();
        assert_eq!(record["status"], "interrupted", "{record:#}");
        assert_ne!(record["stages"]["t"]["status"], "running", "{record:#}");
    }
}
