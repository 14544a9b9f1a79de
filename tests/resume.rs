//! Resume after a real kill -9 of the engine: finished `foreach` items are not run again, and
//! nothing the killed run left running runs beside the stage run again.

use std::time::Duration;

use serde_json::Value;

use crate::support::{running, wait_for, Release, Test};

const PATIENCE: Duration = Duration::from_secs(30);

/// A `foreach` of eight items, one at a time; each appends its number to `ran.txt` when it
/// starts, and an item `N` for which `stopN` exists waits for `goN` before it ends.
fn items_workflow(concurrency: u32) -> String {
    format!(
        "[workflow]\ndescription = \"d\"\n\n\
         [stages.items]\nforeach = \"[0, 1, 2, 3, 4, 5, 6, 7]\"\nconcurrency = {concurrency}\n\
         shell = \"echo {{{{ item }}}} >> ran.txt; if [ -e stop{{{{ item }}}} ]; then \
         while [ ! -e go{{{{ item }}}} ]; do sleep 0.02; done; fi; printf item{{{{ item }}}}\"\n"
    )
}

/// How many times each item ran, from `ran.txt`.
fn runs_per_item(t: &Test) -> Vec<usize> {
    let text = t.read_opt("ran.txt").unwrap_or_default();
    (0..8)
        .map(|n| text.lines().filter(|l| *l == n.to_string()).count())
        .collect()
}

/// The items the newest run journaled as finished.
fn journaled(t: &Test) -> Vec<u64> {
    let id = t.newest_run();
    let path = t
        .state_dir()
        .join("runs")
        .join(id)
        .join("artifacts")
        .join("items.jsonl");
    let mut items: Vec<u64> = std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter_map(|v| v["index"].as_u64())
        .collect();
    items.sort_unstable();
    items
}

/// Start `args`, wait until item `n` has started, and kill the engine with SIGKILL.
fn kill_at_item(t: &Test, args: &[&str], n: usize) {
    let mut child = t.command(args).spawn();
    wait_for(&format!("item {n} to start"), PATIENCE, || {
        runs_per_item(t)[n] > 0 && t.exists("state/runs")
    });
    child.kill().expect("kill -9 the engine");
    child.wait().expect("reap the engine");
}

/// One item at a time: a kill while item 3 runs leaves items 0-2 finished, a resume runs 3
/// onwards, a kill of that resume while item 6 runs leaves 0-5, and a resume of the resume runs
/// only 6 and 7. Every item that finished before a kill ran exactly once.
#[test]
fn a_resume_runs_only_the_foreach_items_a_killed_run_did_not_finish() {
    let t = Test::new();
    t.write("w.toml", &items_workflow(1));
    t.write("stop3", "").write("stop6", "");

    kill_at_item(&t, &["run", "w.toml"], 3);
    assert_eq!(runs_per_item(&t), [1, 1, 1, 1, 0, 0, 0, 0]);
    assert_eq!(journaled(&t), [0, 1, 2], "finished items are journaled");

    t.write("go3", "");
    kill_at_item(&t, &["resume", "last"], 6);
    assert_eq!(runs_per_item(&t), [1, 1, 1, 2, 1, 1, 1, 0]);
    assert_eq!(
        journaled(&t),
        [0, 1, 2, 3, 4, 5],
        "the resume journals the items it reused as well as those it ran"
    );

    t.write("go6", "");
    let out = t.run(["resume", "last"]);
    out.code(0)
        .stderr_has("6 of 8 items reused from the resumed run");
    assert_eq!(runs_per_item(&t), [1, 1, 1, 2, 1, 1, 2, 1]);
    let record = t.last_run();
    assert_eq!(record["status"], "completed", "{record:#}");
    assert_eq!(record["stages"]["items"]["reused_items"], 6);
    let output: Vec<String> =
        serde_json::from_str(&t.stage_output("items")).expect("a list of outputs");
    let expected: Vec<String> = (0..8).map(|n| format!("item{n}")).collect();
    assert_eq!(output, expected, "the output is whole and in order");
}

/// Four items at a time, killed while item 3 waits: whatever else finished by then (the
/// journal says which) is not run again, and the rest runs.
#[test]
fn concurrent_items_finished_before_a_kill_run_exactly_once() {
    let t = Test::new();
    t.write("w.toml", &items_workflow(4));
    t.write("stop3", "");
    let mut child = t.command(["run", "w.toml"]).spawn();
    // Items 0-2 end at once; wait until they are journaled, so the kill finds some finished.
    wait_for("items 0-2 to be journaled", PATIENCE, || {
        runs_per_item(&t)[3] > 0 && t.exists("state/runs") && journaled(&t).len() >= 3
    });
    child.kill().expect("kill -9 the engine");
    child.wait().expect("reap the engine");
    let finished = journaled(&t);
    assert!(!finished.contains(&3), "item 3 never finished");

    t.write("go3", "");
    t.run(["resume", "last"]).code(0);
    let runs = runs_per_item(&t);
    for n in 0..8u64 {
        let times = runs[n as usize];
        if finished.contains(&n) {
            assert_eq!(times, 1, "item {n} finished before the kill and ran again");
        } else {
            assert!(times >= 1, "item {n} never ran");
        }
    }
    assert_eq!(
        t.last_run()["stages"]["items"]["reused_items"],
        finished.len()
    );
}

/// A stage whose work outlives the engine's kill: the stage's shell starts the work in the
/// background (`detach` is `setsid` for a process that leaves the engine's process group and
/// session, empty for one that stays in the group) and waits for it. The work appends
/// `start PID` to `b.log`, notes `overlap` there if the previous start's process is still
/// running, and waits for the file `go`.
fn leftover_workflow(detach: &str) -> String {
    let work = "old=$(sed -n \"s/^start //p\" b.log 2>/dev/null | tail -n 1); \
                if [ -n \"$old\" ] && grep -qv \") [ZX] \" /proc/$old/stat 2>/dev/null; \
                then echo \"overlap $old\" >> b.log; fi; \
                echo \"start $$\" >> b.log; \
                while [ ! -e go ]; do sleep 0.02; done; echo \"end $$\" >> b.log";
    format!(
        "[workflow]\ndescription = \"d\"\n\n\
         [stages.b]\ncommand = [\"sh\", \"-c\", '''{detach} sh -c '{work}' < /dev/null > /dev/null 2>&1 & wait''']\n"
    )
}

/// A kill -9 of the engine leaves the stage's background work running when it left the stage's
/// process group (`setsid`; what stays in the group dies with the engine, see
/// `reliability::what_a_stage_started_in_its_group_dies_with_a_killed_engine`). The resume finds
/// it by the run's marker and stops it before running the stage again: the two never run at once.
#[test]
fn a_resume_stops_what_the_killed_run_left_running_before_the_stage_runs_again() {
    if !std::path::Path::new("/proc/self/environ").exists() {
        crate::support::skip("no /proc");
        return;
    }
    {
        let detach = "setsid";
        let t = Test::new();
        // However the test ends, the work it started ends too.
        let _release = Release(t.path("go"));
        t.write("w.toml", &leftover_workflow(detach));
        let mut child = t.command(["run", "w.toml"]).spawn();
        wait_for("the work to start", PATIENCE, || {
            t.read_opt("b.log").is_some_and(|log| log.ends_with('\n'))
                && t.exists("state/runs")
                && std::fs::read_to_string(
                    t.state_dir()
                        .join("runs")
                        .join(t.newest_run())
                        .join("artifacts")
                        .join("processes.jsonl"),
                )
                .is_ok_and(|text| text.ends_with('\n'))
        });
        child.kill().expect("kill -9 the engine");
        child.wait().expect("reap the engine");
        let log = t.read("b.log");
        let old = log
            .trim()
            .strip_prefix("start ")
            .expect("a start")
            .to_string();
        // The engine's own child dies with it; the work does not.
        assert!(running(&old), "{detach:?}: the work died with the engine");

        let mut resume = t.command(["resume", "last"]).spawn();
        wait_for("the stage to start again", PATIENCE, || {
            t.read("b.log").matches("start ").count() == 2
        });
        t.write("go", "");
        let status = resume.wait().expect("the resume ends");
        let log = t.read("b.log");
        assert!(status.success(), "{detach:?}: the resume failed\n{log}");
        assert!(
            !log.contains("overlap"),
            "{detach:?}: the stage ran twice at once:\n{log}"
        );
        assert!(!running(&old), "{detach:?}: the leftover still runs");
        assert!(
            !log.contains(&format!("end {old}")),
            "{detach:?}: the leftover was not stopped:\n{log}"
        );
        let said = t.read("spawned.stderr");
        assert!(
            said.contains("left stage `b` running (process ")
                && said.contains(&old)
                && said.contains("before the stage runs again")
                && said.contains("stopped "),
            "{detach:?}: the resume did not say what it stopped:\n{said}"
        );
    }
}

/// The same through a sub-workflow: stage `sub` runs workflow `inner` (once, then as the one
/// item of a `foreach`), whose stage `b` starts the work detached (`setsid`). The work carries
/// `sub`'s marker and is journaled as `sub`'s (and its item's); after a kill -9 of the engine,
/// the resume stops it before `sub` (and so `b`) runs again.
#[test]
fn a_resume_stops_what_a_sub_workflow_of_the_killed_run_left_running() {
    if !std::path::Path::new("/proc/self/environ").exists() {
        crate::support::skip("no /proc");
        return;
    }
    for (foreach, item) in [("", "-"), ("foreach = \"[0]\"\n", "0")] {
        let t = Test::new();
        let _release = Release(t.path("go"));
        t.write("lib/workflows/inner.toml", &leftover_workflow("setsid"));
        t.write(
            "lib/workflows/outer.toml",
            &format!(
                "[workflow]\ndescription = \"d\"\n\n[stages.sub]\nworkflow = \"inner\"\n{foreach}"
            ),
        );
        let processes = |t: &Test| {
            std::fs::read_to_string(
                t.state_dir()
                    .join("runs")
                    .join(t.newest_run())
                    .join("artifacts")
                    .join("processes.jsonl"),
            )
            .unwrap_or_default()
        };
        let mut child = t.command(["-L", "lib", "run", "outer"]).spawn();
        wait_for("the work to start", PATIENCE, || {
            t.read_opt("b.log").is_some_and(|log| log.ends_with('\n'))
                && t.exists("state/runs")
                && processes(&t).ends_with('\n')
        });
        let journaled: Value =
            serde_json::from_str(processes(&t).lines().next().expect("a line")).expect("JSON");
        assert_eq!(journaled["stage"], "sub", "{journaled}");
        assert_eq!(
            journaled["item"]
                .as_u64()
                .map_or("-".to_string(), |i| i.to_string()),
            item,
            "{journaled}"
        );
        child.kill().expect("kill -9 the engine");
        child.wait().expect("reap the engine");
        let old = t
            .read("b.log")
            .trim()
            .strip_prefix("start ")
            .expect("a start")
            .to_string();
        assert!(running(&old), "{item}: the work died with the engine");
        let environ = std::fs::read(format!("/proc/{old}/environ")).unwrap_or_default();
        let marker = format!("STAGEGRAPH_PROCESS={} {item} sub", t.newest_run());
        assert!(
            environ
                .split(|&b| b == 0)
                .any(|entry| entry == marker.as_bytes()),
            "the work does not carry `{marker}`"
        );

        let mut resume = t.command(["-L", "lib", "resume", "last"]).spawn();
        wait_for("the stage to start again", PATIENCE, || {
            t.read("b.log").matches("start ").count() == 2
        });
        t.write("go", "");
        let status = resume.wait().expect("the resume ends");
        let log = t.read("b.log");
        assert!(status.success(), "{item}: the resume failed\n{log}");
        assert!(
            !log.contains("overlap"),
            "{item}: the stage ran twice at once:\n{log}"
        );
        assert!(!running(&old), "{item}: the leftover still runs");
        assert!(
            !log.contains(&format!("end {old}")),
            "{item}: the leftover was not stopped:\n{log}"
        );
        let said = t.read("spawned.stderr");
        assert!(
            said.contains("left stage `sub` ")
                && said.contains(" running (process ")
                && said.contains(&old),
            "{item}: the resume did not say what it stopped:\n{said}"
        );
    }
}

/// A run whose engine is still running is not resumed: its stages would run twice at once.
#[test]
fn a_run_still_running_is_not_resumed() {
    let t = Test::new();
    let _release = Release(t.path("go"));
    t.write(
        "w.toml",
        "[workflow]\ndescription = \"d\"\n\n\
         [stages.b]\nshell = \"echo x >> started; while [ ! -e go ]; do sleep 0.02; done\"\n",
    );
    let mut child = t.command(["run", "w.toml"]).spawn();
    wait_for("the stage to start", PATIENCE, || {
        t.exists("started") && t.exists("state/runs")
    });
    let out = t.run(["resume", "last"]);
    out.code(2).stderr_has("is still running (process ");
    assert_eq!(t.count("started"), 1, "the stage started a second time");
    t.write("go", "");
    assert!(child.wait().expect("the run ends").success());
}

/// Workflow `inner`: stages a, b, c, d in a chain, each appending `<item>:<name>` to `ran.txt`
/// as it starts (so a stage killed while it runs counts too), then waiting for `go_<name>`
/// while `stop_<name>` exists (having made `at_<name>`); workflow `outer` runs it from stage
/// `sub`, after a stage `first`, with `sub_keys` added to `sub` (a `foreach`, say).
fn nested_workflows(t: &Test, sub_keys: &str) {
    let mut inner =
        String::from("[workflow]\ndescription = \"d\"\n\n[inputs.tag]\ntype = \"string\"\n\n");
    let mut previous: Option<&str> = None;
    for name in ["a", "b", "c", "d"] {
        let after = previous.map_or(String::new(), |p| format!("after = [\"{p}\"]\n"));
        let reads = previous.map_or(String::new(), |p| format!("-{{{{ stages.{p}.output }}}}"));
        inner.push_str(&format!(
            "[stages.{name}]\n{after}shell = '''\necho {{{{ inputs.tag }}}}:{name} >> ran.txt\n\
             if [ -e stop_{name} ]; then touch at_{name}; \
             while [ ! -e go_{name} ]; do sleep 0.02; done; fi\n\
             printf '{name}{reads}'\n'''\n\n"
        ));
        previous = Some(name);
    }
    inner.push_str("[outputs]\nd = \"{{ stages.d.output }}\"\n");
    t.write("lib/workflows/inner.toml", &inner);
    t.write(
        "lib/workflows/outer.toml",
        &format!(
            "[workflow]\ndescription = \"d\"\n\n\
             [stages.first]\nshell = \"echo first >> ran.txt; printf one\"\n\n\
             [stages.sub]\nafter = [\"first\"]\nworkflow = \"inner\"\n{sub_keys}\n\
             [stages.last]\nafter = [\"sub\"]\nshell = \"echo last >> ran.txt; printf done\"\n"
        ),
    );
}

/// How many times `ran.txt` says `line` ran.
fn times(t: &Test, line: &str) -> usize {
    t.read_opt("ran.txt")
        .unwrap_or_default()
        .lines()
        .filter(|l| *l == line)
        .count()
}

/// Start `args`, wait until stage `name` of the sub-workflow waits (`at_<name>`), kill -9.
fn kill_at_inner(t: &Test, args: &[&str], name: &str) {
    let _ = std::fs::remove_file(t.path(&format!("at_{name}")));
    t.write(&format!("stop_{name}"), "");
    let mut child = t.command(args).spawn();
    wait_for(&format!("inner stage {name} to start"), PATIENCE, || {
        t.exists(&format!("at_{name}"))
    });
    child.kill().expect("kill -9 the engine");
    child.wait().expect("reap the engine");
    t.write(&format!("go_{name}"), "");
}

/// A kill -9 in the middle of a sub-workflow, then in the middle of the resume, then a resume
/// of the resume: every stage of the sub-workflow that finished before a kill ran exactly once
/// (the sub-workflow's stages are journaled in the top-level run as they finish), and the
/// outputs are whole. The same for a sub-workflow run as the items of a `foreach`, where item 0
/// finishes before the first kill.
#[test]
fn a_resumed_sub_workflow_runs_none_of_its_finished_stages_again() {
    for (keys, tag, earlier) in [
        ("with = { tag = \"x\" }\n", "x", None),
        (
            "foreach = \"['p', 'q']\"\nconcurrency = 1\nwith = { tag = \"{{ item }}\" }\n",
            "q",
            Some("p"),
        ),
    ] {
        let t = Test::new();
        nested_workflows(&t, keys);
        if let Some(earlier) = earlier {
            // Only item q waits: item p runs through first.
            t.write(
                "lib/workflows/inner.toml",
                &t.read("lib/workflows/inner.toml").replace(
                    "if [ -e stop_",
                    &format!("if [ {{{{ inputs.tag }}}} != {earlier} ] && [ -e stop_"),
                ),
            );
        }
        kill_at_inner(&t, &["-L", "lib", "run", "outer"], "c");
        kill_at_inner(&t, &["-L", "lib", "resume", "last"], "d");
        let out = t.run(["-L", "lib", "resume", "last"]);
        out.code(0);
        let ran = t.read("ran.txt");
        assert_eq!(times(&t, "first"), 1, "{ran}");
        for (name, expected) in [("a", 1), ("b", 1), ("c", 2), ("d", 2)] {
            assert_eq!(
                times(&t, &format!("{tag}:{name}")),
                expected,
                "{tag}:{name} (killed stages count twice):\n{ran}"
            );
            if let Some(earlier) = earlier {
                assert_eq!(times(&t, &format!("{earlier}:{name}")), 1, "{ran}");
            }
        }
        assert_eq!(times(&t, "last"), 1, "{ran}");
        let record = t.last_run();
        assert_eq!(record["status"], "completed", "{record:#}");
        let output = t.stage_output("sub");
        assert!(output.contains("d-c-b-a"), "{output}");
    }
}

/// A resume killed before it has recorded anything of its own (it waits for the workflow's
/// lock, which the test holds) leaves the first run's work where it was: a resume of that
/// resume follows `resumed_from` and reuses it, running only the stage that never finished.
#[test]
fn a_resume_of_a_resume_killed_before_its_first_stage_reuses_the_first_run() {
    let t = Test::new();
    t.write(
        "w.toml",
        "[workflow]\ndescription = \"d\"\nwrites = [\".\"]\n\
         lock = { path = \"w.lock.d\", busy = \"wait\" }\n\n\
         [stages.s1]\nshell = \"echo s1 >> ran.txt; printf one\"\n\n\
         [stages.s2]\nafter = [\"s1\"]\nshell = '''\necho s2 >> ran.txt\n\
         if [ -e stop ]; then touch at_s2; while [ ! -e go ]; do sleep 0.02; done; fi\n\
         printf \"two-{{ stages.s1.output }}\"\n'''\n",
    );
    t.write("stop", "");
    let mut child = t.command(["run", "w.toml"]).spawn();
    wait_for("s2 to start", PATIENCE, || t.exists("at_s2"));
    child.kill().expect("kill -9 the engine");
    child.wait().expect("reap the engine");
    let first = t.newest_run();
    std::fs::remove_file(t.path("stop")).unwrap();

    // The killed run's lock is replaced by one a live process (this test) holds.
    std::fs::remove_dir_all(t.path("w.lock.d")).unwrap();
    crate::support::hold_lock(&t.path("w.lock.d"));
    let mut resume = t.command(["resume", "last"]).spawn();
    wait_for("the resume to wait for the lock", PATIENCE, || {
        t.read_opt("spawned.stderr")
            .is_some_and(|text| text.contains("waiting for lock"))
    });
    resume.kill().expect("kill -9 the resume");
    resume.wait().expect("reap the resume");
    let second = t.newest_run();
    assert_ne!(second, first);
    assert_eq!(
        crate::support::read_record(&t.state_dir(), &second)["resumed_from"],
        first.as_str()
    );
    crate::support::release_lock(&t.path("w.lock.d"));

    t.run(["resume", "last"]).code(0);
    let ran = t.read("ran.txt");
    assert_eq!(ran.lines().filter(|l| *l == "s1").count(), 1, "{ran}");
    assert_eq!(ran.lines().filter(|l| *l == "s2").count(), 2, "{ran}");
    let record = t.last_run();
    assert_eq!(record["stages"]["s1"]["status"], "cached", "{record:#}");
    assert_eq!(t.stage_output("s2"), "two-one");
}

/// A run that failed before its first stage recorded no inputs: its resume is refused, naming
/// the input the workflow needs and how to start it again, instead of failing inside a template.
#[test]
fn a_run_that_failed_before_its_inputs_were_read_is_not_resumed() {
    let t = Test::new();
    t.write(
        "w.toml",
        "[workflow]\ndescription = \"d\"\nwrites = [\"{{ inputs.dir }}\"]\n\n\
         [inputs.dir]\ntype = \"string\"\n\n\
         [stages.b]\ncommand = [\"echo\", \"{{ inputs.dir }}\"]\n",
    );
    t.write("bad.json", "[1]");
    t.run(["run", "w.toml", "--inputs-json", "bad.json"])
        .code(2)
        .stderr_has("--inputs-json must be a JSON object");
    let out = t.run(["resume", "last"]);
    out.code(2)
        .stderr_has("cannot resume run ")
        .stderr_has("needs input `dir`")
        .stderr_has("`stagegraph run ");
    assert!(!out.stderr.contains("path_join"), "{}", out.stderr);
    assert_eq!(t.run_ids().len(), 1, "the refused resume recorded a run");
}

/// `last~N` is the Nth real run before `last`; past the oldest it names no run.
#[test]
fn last_tilde_n_counts_back_from_the_newest_real_run() {
    let t = Test::new();
    t.write(
        "w.toml",
        "[workflow]\ndescription = \"d\"\n\n[inputs.n]\ntype = \"string\"\n\n\
         [stages.b]\ncommand = [\"echo\", \"{{ inputs.n }}\"]\n",
    );
    for n in ["one", "two"] {
        t.run(["run", "w.toml", "--input", &format!("n={n}")])
            .code(0);
    }
    t.run(["run", "w.toml", "--input", "n=three", "--dry-run"])
        .code(0);
    let out = t.run(["runs", "show", "last~1", "--stage", "b"]);
    out.code(0);
    assert_eq!(out.stdout.trim(), "one");
    let out = t.run(["runs", "show", "last~0", "--stage", "b"]);
    assert_eq!(out.stdout.trim(), "two");
    t.run(["runs", "show", "last~2"])
        .code(2)
        .stderr_has("last~2");
}
