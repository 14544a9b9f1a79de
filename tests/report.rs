//! Seeing what a run did: `runs show` with what each stage said, `runs diff`, and
//! `stagegraph runs report`: one self-contained HTML page per run. The page's structure is
//! read from its text (one node per stage with its status, the transitive reduction of the
//! edges, nothing that loads from outside, the same bytes twice), then the page is opened in
//! headless Chromium when it is installed: it runs its script without an error, opens a
//! stage's details, and its screenshot is not blank.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::support::Test;

/// Every status a report colors: `hello` cached on the second run, `skipped` skipped, `gate`
/// ends the run (exited), `later` never runs; `json` says `</script>` in its output.
const FLOW: &str = r#"
[workflow]
description = "a run with every status"

[inputs.name]
type = "string"
default = "world"

[stages.hello]
command = ["echo", "hello {{ inputs.name }}"]
cache = true

[stages.json]
after = ["hello"]
command = ["printf", '{"go": true, "html": "</script><img src=x>"}']
output = { format = "json" }

[stages.skipped]
after = ["hello"]
if = "false"
command = ["echo", "never"]

[stages.gate]
after = ["json", "hello"]
command = ["echo", "stop"]
exit_if = "output == 'stop\n'"

[stages.later]
after = ["gate"]
command = ["echo", "later"]
"#;

const STATUSES: [(&str, &str); 5] = [
    ("hello", "cached"),
    ("json", "succeeded"),
    ("skipped", "skipped"),
    ("gate", "exited"),
    ("later", "not_run"),
];

/// Run FLOW twice and write the second run's report beside its record; returns the test,
/// the report's path and its text.
fn reported() -> (Test, PathBuf, String) {
    let t = Test::new();
    t.write("flow.toml", FLOW);
    t.run(["run", "flow.toml", "-q"]).code(0);
    t.run(["run", "flow.toml", "-q"]).code(0);
    let out = t.run(["runs", "report"]);
    out.code(0);
    let path = PathBuf::from(out.stdout.trim());
    assert!(
        path.ends_with(Path::new(&t.newest_run()).join("report.html")),
        "the report is not beside the record: {}",
        path.display()
    );
    let html = std::fs::read_to_string(&path).expect("the report");
    (t, path, html)
}

/// The values of attribute `name` in the elements of `html` whose tag text starts with
/// `start`.
fn attributes<'h>(html: &'h str, start: &str, name: &str) -> Vec<&'h str> {
    html.match_indices(start)
        .filter_map(|(at, _)| {
            let tag = &html[at..at + html[at..].find('>')?];
            let key = format!(" {name}=\"");
            let from = tag.find(&key)? + key.len();
            Some(&tag[from..from + tag[from..].find('"')?])
        })
        .collect()
}

#[test]
fn report_draws_each_stage_by_status_with_the_reduced_edges() {
    let (t, _, html) = reported();
    let nodes: Vec<(&str, &str)> = attributes(&html, "<g class=\"node", "data-stage")
        .into_iter()
        .zip(attributes(&html, "<g class=\"node", "data-status"))
        .collect();
    assert_eq!(nodes, STATUSES, "one node per stage, with its status");
    let edges: BTreeSet<(&str, &str)> = attributes(&html, "<path d=", "data-from")
        .into_iter()
        .zip(attributes(&html, "<path d=", "data-to"))
        .collect();
    // `gate` waits for `hello` through `json`: that edge is implied, not drawn.
    let expected = BTreeSet::from([
        ("hello", "json"),
        ("hello", "skipped"),
        ("json", "gate"),
        ("gate", "later"),
    ]);
    assert_eq!(edges, expected);
    // The header says how the run ended; a timeline bar for each stage that started.
    assert!(html.contains("exited at</dt><dd>gate: "), "{html}");
    let bars = attributes(&html, "<rect class=\"bar", "data-stage");
    assert_eq!(bars.len(), 4, "{bars:?}");
    assert!(!bars.contains(&"later"));

    // Nothing loads from outside the file, and what a stage said cannot become markup.
    assert!(html.contains("Content-Security-Policy\" content=\"default-src 'none'"));
    let loads = regex::Regex::new(r"<[a-zA-Z][^>]*\s(src|href|srcset|xlink:href|action)=").unwrap();
    assert!(
        !loads.is_match(&html),
        "an element loads: {:?}",
        loads.find(&html)
    );
    for needle in [
        "url(",
        "@import",
        "fetch(",
        "XMLHttpRequest",
        "<link",
        "<iframe",
    ] {
        assert!(!html.contains(needle), "the page has `{needle}`");
    }
    assert!(
        !html.contains("</script><img"),
        "an output broke out of its element"
    );
    assert!(html.contains("\\u003c/script\\u003e\\u003cimg src=x\\u003e"));

    // The same record, the same bytes.
    let again = t.run(["runs", "report", "last", "-o", "again.html"]);
    again.code(0);
    assert_eq!(t.read("again.html"), html, "a second report differs");
}

#[test]
fn report_of_an_unknown_run_is_an_error() {
    let t = Test::new();
    let out = t.run(["runs", "report", "nope"]);
    assert_ne!(out.code, Some(0));
    assert!(out.stderr.contains("nope"), "{}", out.stderr);
}

/// Chromium from the system's packages (or `STAGEGRAPH_TEST_CHROMIUM`), if there is one.
fn chromium() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("STAGEGRAPH_TEST_CHROMIUM") {
        return Some(PathBuf::from(path));
    }
    ["chromium", "chromium-browser", "google-chrome"]
        .into_iter()
        .find_map(which_on_path)
}

fn which_on_path(name: &str) -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|dir| dir.join(name))
        .find(|path| path.is_file())
}

/// Headless Chromium on `url` with `args`: its stdout and stderr.
/// The screenshot `shot` of `name` holds far more than one of a blank page does.
fn assert_not_blank(t: &Test, browser: &Path, profile: &Path, shot: &Path, name: &str) {
    t.write("blank.html", "<html><body></body></html>");
    let blank = t.path("blank.png");
    headless(
        browser,
        profile,
        &[&format!("--screenshot={}", blank.display())],
        &format!("file://{}", t.path("blank.html").display()),
    );
    let size = |p: &Path| std::fs::metadata(p).map_or(0, |m| m.len());
    assert!(
        size(shot) > 4 * size(&blank).max(1),
        "the screenshot of {name} looks blank: {} bytes against {}",
        size(shot),
        size(&blank)
    );
}

fn headless(browser: &Path, profile: &Path, args: &[&str], url: &str) -> (String, String) {
    let out = Command::new(browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--no-first-run",
            "--enable-logging=stderr",
            "--v=0",
            "--window-size=1400,1000",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(args)
        .arg(url)
        .output()
        .expect("run chromium");
    assert!(
        out.status.success(),
        "chromium failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Open the report at `path` in headless Chromium, if it is installed (false if not): its
/// script ran over `stages` stages with no error, no console message and no request outside
/// the file, and its screenshot holds far more than a blank page's. With
/// `STAGEGRAPH_TEST_SCREENSHOTS` set, the screenshot is kept there as `<name>.png`.
pub(crate) fn opens_in_chromium(t: &Test, path: &Path, stages: usize, name: &str) -> bool {
    let Some(browser) = chromium() else {
        crate::support::skip("chromium is not installed (apt-get install chromium)");
        return false;
    };
    let profile = t.path("chromium-profile");
    let url = format!("file://{}", path.display());
    let (dom, log) = headless(&browser, &profile, &["--dump-dom"], &url);
    assert!(
        dom.contains(&format!("data-ready=\"{stages}\"")),
        "the script did not run over {stages} stages:\n{}",
        &dom[..dom.len().min(2000)]
    );
    assert!(!dom.contains("data-error="), "a script error in {name}");
    assert!(!dom.contains("data-blocked="), "{name} made a request");
    let console: Vec<&str> = log.lines().filter(|l| l.contains(":CONSOLE")).collect();
    assert!(
        console.is_empty(),
        "console messages in {name}: {console:?}"
    );
    let kept = std::env::var_os("STAGEGRAPH_TEST_SCREENSHOTS").map(PathBuf::from);
    let shot = match &kept {
        Some(dir) => {
            std::fs::create_dir_all(dir).expect("the screenshot folder");
            dir.join(format!("{name}.png"))
        }
        None => t.path(&format!("{name}.png")),
    };
    headless(
        &browser,
        &profile,
        &[
            &format!("--screenshot={}", shot.display()),
            "--window-size=1400,1800",
        ],
        &url,
    );
    assert_not_blank(t, &browser, &profile, &shot, name);
    true
}

#[test]
fn report_opens_in_headless_chromium() {
    let Some(browser) = chromium() else {
        crate::support::skip("chromium is not installed (apt-get install chromium)");
        return;
    };
    let (t, path, _) = reported();
    let profile = t.path("profile");
    let url = format!("file://{}#stage=json", path.display());
    let (dom, log) = headless(&browser, &profile, &["--dump-dom"], &url);
    // The script ran to its end over the five stages, with no error and nothing blocked.
    assert!(
        dom.contains("data-ready=\"5\""),
        "the script did not run:\n{dom}"
    );
    assert!(!dom.contains("data-error="), "a script error:\n{dom}");
    assert!(!dom.contains("data-blocked="), "a request was made:\n{dom}");
    let console: Vec<&str> = log.lines().filter(|l| l.contains(":CONSOLE")).collect();
    assert!(console.is_empty(), "console messages: {console:?}");
    // `#stage=json` opened its details, with its output as text.
    let detail = &dom[dom.find("<section id=\"detail\"").expect("the detail")..];
    let detail = &detail[..detail.find("</section>").expect("its end")];
    assert!(
        detail.starts_with("<section id=\"detail\" data-stage=\"json\">"),
        "{detail}"
    );
    assert!(detail.contains("fingerprint"), "{detail}");
    assert!(
        detail.contains("&lt;/script&gt;&lt;img src=x&gt;"),
        "{detail}"
    );

    // A screenshot of the page holds far more than a blank one does.
    let shot = t.path("report.png");
    headless(
        &browser,
        &profile,
        &[&format!("--screenshot={}", shot.display())],
        &url,
    );
    assert_not_blank(&t, &browser, &profile, &shot, "the report");
}

#[test]
fn runs_show_prints_what_each_stage_said_cut_with_a_note() {
    let t = Test::new();
    t.write(
        "said.toml",
        r#"
[stages.short]
command = ["echo", "hello there"]

[stages.long]
command = ["seq", "1", "100"]

[stages.data]
command = ["printf", '{"n": 1}']
output = { format = "json" }
"#,
    );
    t.run(["run", "said.toml", "-q"]).code(0);
    let out = t.run(["runs", "show", "last"]);
    out.code(0);
    let text = out.stdout;
    assert!(text.contains("      output: hello there\n"), "{text}");
    assert!(text.contains("      output:   \"n\": 1\n"), "{text}");
    // 20 lines of the 100, then how to print the rest.
    assert!(text.contains("      output: 20\n"), "{text}");
    assert!(!text.contains("      output: 21\n"), "{text}");
    let id = t.newest_run();
    assert!(
        text.contains(&format!(
            "      output: ... 241 more bytes (`stagegraph runs show {id} --stage long` prints it whole)"
        )),
        "{text}"
    );
}

/// `say` renders the input; `facts` (JSON) runs after it; `shout` reads its output; `fixed`
/// depends on nothing that changes.
const DIFFED: &str = r#"
[inputs.topic]
type = "string"

[stages.fixed]
command = ["echo", "always the same"]

[stages.say]
command = ["printf", 'line one\nabout {{ inputs.topic }}\nline three\n']

[stages.facts]
after = ["say"]
command = ["printf", '{"topic": "{{ inputs.topic }}", "n": 1}']
output = { format = "json" }

[stages.shout]
template = { inline = "{{ stages.say.output | upper }}" }
"#;

#[test]
fn runs_diff_names_the_input_the_changed_stages_their_causes_and_output_diffs() {
    let t = Test::new();
    t.write("d.toml", DIFFED);
    t.run(["run", "d.toml", "-q", "-i", "topic=retries"])
        .code(0);
    let first = t.newest_run();
    t.run(["run", "d.toml", "-q", "-i", "topic=backoff"])
        .code(0);
    let out = t.run(["runs", "diff", &first, "last"]);
    out.code(0);
    let text = out.stdout;
    assert!(
        text.contains("  changed topic: \"retries\" -> \"backoff\"\n"),
        "{text}"
    );
    assert!(text.contains("workflow files: the same\n"), "{text}");
    assert!(text.contains("stage say: succeeded"), "{text}");
    assert!(
        !text.contains("stage fixed"),
        "an unchanged stage is listed:\n{text}"
    );
    assert!(
        text.contains("    -about retries\n    +about backoff\n"),
        "{text}"
    );
    assert!(
        text.contains("stage facts: succeeded")
            && text.contains("  fingerprint changed: rendered action, output of `say`\n")
            && text.contains("  output /topic: \"retries\" -> \"backoff\"\n"),
        "{text}"
    );
    assert!(text.ends_with("3 stage(s) differ, 1 the same\n"), "{text}");

    let json = t.run(["runs", "diff", &first, "last", "--format", "json"]);
    json.code(0);
    let doc: serde_json::Value = serde_json::from_str(&json.stdout).expect("diff JSON");
    assert_eq!(
        doc["inputs"]["changed"]["topic"],
        serde_json::json!(["retries", "backoff"])
    );
    let ids: Vec<&str> = doc["stages"]
        .as_array()
        .expect("stages")
        .iter()
        .map(|s| s["id"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(ids, ["say", "facts", "shout"]);
    assert_eq!(doc["stages"][1]["output_paths"][0]["path"], "/topic");
    assert_eq!(doc["unchanged"], 1);

    // An edited stage: the file and the stage's definition are what changed.
    t.write(
        "d.toml",
        &DIFFED.replace("always the same", "now different"),
    );
    t.run(["run", "d.toml", "-q", "-i", "topic=backoff"])
        .code(0);
    let out = t.run(["runs", "diff", &first, "last"]);
    out.code(0);
    let text = out.stdout;
    let file = text
        .lines()
        .filter_map(|line| line.strip_prefix("  changed "))
        .find(|path| path.ends_with("/d.toml"));
    assert!(file.is_some(), "the edited file is not named:\n{text}");
    assert!(text.contains("stage fixed: succeeded"), "{text}");
    assert!(
        text.contains("  fingerprint changed: definition, rendered action\n"),
        "{text}"
    );
}

/// `runs diff RUN` compares the run with its workflow's run before it, over the runs of other
/// workflows between them (a hook's runs come between a user's).
#[test]
fn runs_diff_of_one_run_compares_it_with_its_workflows_run_before() {
    let t = Test::new();
    t.write("d.toml", DIFFED);
    t.write("other.toml", "[stages.a]\ncommand = [\"true\"]\n");
    let out = t.run(["runs", "diff", "last"]);
    out.code(2);
    t.run(["run", "d.toml", "-q", "-i", "topic=retries"])
        .code(0);
    let out = t.run(["runs", "diff", "last"]);
    out.code(2);
    out.stderr_has("is the first recorded run of `d`: there is none before it");
    out.stderr_has("help: name both runs");
    t.run(["run", "d.toml", "-q", "-i", "topic=backoff"])
        .code(0);
    t.run(["run", "other.toml", "-q"]).code(0);
    let d = t
        .run_ids()
        .into_iter()
        .rev()
        .nth(1)
        .expect("the second run of d");
    let out = t.run(["runs", "diff", &d]);
    out.code(0);
    assert!(
        out.stdout
            .contains("  changed topic: \"retries\" -> \"backoff\"\n"),
        "{}",
        out.stdout
    );
}

#[test]
fn off_a_terminal_a_stage_still_running_says_so_every_slow_after() {
    let t = Test::new();
    t.write(
        "slow.toml",
        "[stages.wait]\ncommand = [\"sleep\", \"1\"]\n\n[stages.quick]\ntemplate = { inline = \"hi\" }\n",
    );
    let out = t.run(["run", "slow.toml", "--slow-after", "200ms"]);
    out.code(0);
    let slow: Vec<&str> = out
        .stderr
        .lines()
        .filter(|l| l.contains("still running after"))
        .collect();
    assert!(!slow.is_empty(), "{}", out.stderr);
    assert!(
        slow.iter()
            .all(|l| l.starts_with("  … wait still running after ")),
        "{slow:?}"
    );
    // After the stage ended, nothing more is said of it.
    let ended = out.stderr.find("✓ wait").expect("the stage's line");
    assert!(
        !out.stderr[ended..].contains("still running"),
        "{}",
        out.stderr
    );
    // At the default of 30 s, and with -q, a one-second stage says nothing of the kind.
    let out = t.run(["run", "slow.toml"]);
    assert!(!out.stderr.contains("still running"), "{}", out.stderr);
    let out = t.run(["run", "slow.toml", "-q", "--slow-after", "100ms"]);
    assert!(out.stderr.is_empty(), "{}", out.stderr);
    let bad = t.run(["run", "slow.toml", "--slow-after", "soon"]);
    assert_eq!(bad.code, Some(2), "{}", bad.stderr);
    assert!(bad.stderr.contains("is not a duration"), "{}", bad.stderr);
}

/// `each` runs four items two at a time; `judge` asks the model once, and its first reply is
/// rejected and repaired; `ask` asks once per item.
const FANNED: &str = r#"
[stages.each]
foreach = '["a", "b", "c", "d"]'
concurrency = 2
command = ["echo", "{{ item }}"]

[stages.judge]
after = ["each"]
prompt = { inline = "Name one concept about retries." }
model = "m"
repair = 1
output = { format = "json", schema = "answer.schema.json" }

[stages.ask]
after = ["judge"]
foreach = '["x", "y"]'
concurrency = 1
prompt = { inline = "Name one concept about {{ item }}." }
model = "m"
output = { format = "json" }
"#;

/// Each element of `html` whose tag starts with `start`: its `data-stage` and its
/// `data-item`, if it has one.
fn bars_of(html: &str, start: &str) -> Vec<(String, Option<String>)> {
    html.match_indices(start)
        .filter_map(|(at, _)| {
            let tag = &html[at..at + html[at..].find('>')?];
            let attr = |name: &str| {
                let key = format!(" {name}=\"");
                let from = tag.find(&key)? + key.len();
                Some(tag[from..from + tag[from..].find('"')?].to_string())
            };
            Some((attr("data-stage")?, attr("data-item")))
        })
        .collect()
}

#[test]
fn report_draws_a_bar_per_foreach_item_and_its_model_calls() {
    let api = crate::otel::model();
    let t = Test::new();
    t.write("lib/workflows/fanned.toml", FANNED);
    t.write(
        "lib/schemas/answer.schema.json",
        r#"{"type": "object", "required": ["concept"], "properties": {"concept": {"type": "string"}}}"#,
    );
    t.write(
        "stagegraph.toml",
        &format!(
            "[models.m]\nprovider = \"anthropic\"\nmodel = \"claude-test\"\nbase_url = \"{}\"\napi_key_env = \"TEST_ANTHROPIC_KEY\"\n",
            api.url
        ),
    );
    t.command(["-L", "lib", "run", "fanned", "-q"])
        .env("TEST_ANTHROPIC_KEY", "sk-test")
        .output()
        .code(0);
    // The record times each item on the run's clock, with its model calls.
    let record = t.last_run();
    let items = |id: &str| {
        record["stages"][id]["item_runs"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    };
    assert_eq!(items("each").len(), 4, "{record:#}");
    assert_eq!(items("ask").len(), 2, "{record:#}");
    assert!(items("judge").is_empty(), "not a foreach stage");
    for item in items("ask") {
        assert_eq!(item["status"], "succeeded");
        assert_eq!(item["model_calls"], 1);
        assert!(item["start_ms"].is_u64() && item["duration_ms"].is_u64());
    }

    t.run(["-L", "lib", "runs", "report", "last", "-o", "fanned.html"])
        .code(0);
    let html = t.read("fanned.html");
    let of = |start: &str, stage: &str| -> Vec<Option<String>> {
        let mut items: Vec<Option<String>> = bars_of(&html, start)
            .into_iter()
            .filter(|(s, _)| s == stage)
            .map(|(_, item)| item)
            .collect();
        items.sort();
        items
    };
    let some = |items: &[&str]| -> Vec<Option<String>> {
        items.iter().map(|i| Some(i.to_string())).collect()
    };
    assert_eq!(
        of("<rect class=\"item-bar", "each"),
        some(&["0", "1", "2", "3"]),
        "one bar per item"
    );
    assert_eq!(of("<rect class=\"item-bar", "ask"), some(&["0", "1"]));
    assert_eq!(
        of("<rect class=\"bar", "each").len(),
        1,
        "and one for the stage"
    );
    // Each model call a bar inside its item's (or its stage's), the repaired one marked.
    assert_eq!(of("<rect class=\"call-bar", "ask"), some(&["0", "1"]));
    assert_eq!(of("<rect class=\"call-bar", "judge"), [None, None]);
    assert_eq!(of("<rect class=\"call-bar repair", "judge"), [None]);
    // Items overlap their stage: the timeline has more than one lane.
    assert!(!html.contains(">1 lane(s)"), "{html}");
    // The same record, the same bytes.
    t.run(["-L", "lib", "runs", "report", "last", "-o", "again.html"])
        .code(0);
    assert_eq!(t.read("again.html"), html);

    // A record from before items were timed still reports: a bar per stage, its calls in it.
    let path = t
        .state_dir()
        .join("runs")
        .join(t.newest_run())
        .join("run.json");
    let mut old: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    for stage in old["stages"].as_object_mut().unwrap().values_mut() {
        stage.as_object_mut().unwrap().remove("item_runs");
    }
    std::fs::write(&path, old.to_string()).unwrap();
    t.run(["-L", "lib", "runs", "report", "last", "-o", "old.html"])
        .code(0);
    let old = t.read("old.html");
    assert!(!old.contains("<rect class=\"item-bar"), "{old}");
    assert_eq!(bars_of(&old, "<rect class=\"call-bar").len(), 4);
}

#[test]
fn report_draws_a_sub_workflow_as_a_cluster_of_its_stages() {
    let t = Test::new();
    t.write("child.toml", crate::plan::CHILD);
    t.write("w.toml", crate::plan::PARENT);
    t.run(["run", "w.toml", "-q"]).code(0);
    t.run(["runs", "report", "last", "-o", "sub.html"]).code(0);
    let html = t.read("sub.html");
    let nodes = attributes(&html, "<g class=\"node", "data-stage");
    assert_eq!(nodes, ["prep", "review", "ship"], "one node per stage");
    let clusters = attributes(&html, "<g class=\"node", "class");
    assert!(clusters[1].contains(" cluster"), "{clusters:?}");
    let inner: Vec<(&str, &str)> = attributes(&html, "<g class=\"inner", "data-inner")
        .into_iter()
        .zip(attributes(&html, "<g class=\"inner", "data-status"))
        .collect();
    assert_eq!(
        inner,
        [
            ("lint", "succeeded"),
            ("fix", "succeeded"),
            ("gate", "exited")
        ],
        "the sub-workflow's stages, by how its run left them"
    );
    crate::report::opens_in_chromium(&t, &t.path("sub.html"), 3, "sub-workflow report");
}
