//! Diagnostics and CI output: one TOML syntax error is one diagnostic (at the opening bracket
//! when one is never closed), GitHub annotations escaped and relative, Mermaid and DOT output
//! that their real parsers accept for every valid stage id, summaries that agree with the exit
//! code, and `show`'s did-you-mean.

use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;

use crate::support::Test;

fn check_json(t: &Test, name: &str) -> (Option<i32>, Value) {
    let out = t.run(["check", name, "--format", "json"]);
    (out.code, serde_json::from_str(&out.stdout).expect("JSON"))
}

#[test]
fn one_toml_syntax_error_is_one_diagnostic_at_the_open_bracket() {
    let t = Test::new();
    t.write(
        "flow.toml",
        "[stages.a]\ncommand = [\"echo\", \"hi\"\n\n[stages.b]\ncommand = [\"true\"]\n",
    );
    let (code, json) = check_json(&t, "flow.toml");
    assert_eq!(code, Some(2));
    let diagnostics = json["diagnostics"].as_array().expect("diagnostics");
    assert_eq!(diagnostics.len(), 1, "{json:#}");
    let d = &diagnostics[0];
    assert_eq!(
        (d["line"].as_u64(), d["column"].as_u64()),
        (Some(2), Some(11)),
        "{d:#}"
    );
    assert!(
        d["message"]
            .as_str()
            .unwrap_or_default()
            .contains("never closed"),
        "{d:#}"
    );
    assert!(
        d["label"].as_str().unwrap_or_default().contains("add `]`"),
        "{d:#}"
    );

    // A mistake inside an array that is closed is reported where it is.
    t.write(
        "inside.toml",
        "[stages.a]\ncommand = [\n  \"a\"\n  \"b\",\n]\n",
    );
    let (_, json) = check_json(&t, "inside.toml");
    let diagnostics = json["diagnostics"].as_array().expect("diagnostics");
    assert_eq!(diagnostics.len(), 1, "{json:#}");
    assert_eq!(diagnostics[0]["line"], 4, "{json:#}");
}

#[test]
fn github_annotations_are_escaped_and_relative() {
    let t = Test::new();
    t.write(
        "odd,name:1.toml",
        "[stages.\"a%b\"]\ncommand = [\"true\"]\n",
    );
    let out = t.run(["check", "odd,name:1.toml", "--format", "github"]);
    out.code(2);
    let line = out
        .stdout
        .lines()
        .find(|l| l.starts_with("::error "))
        .unwrap_or_else(|| panic!("an annotation:\n{}", out.stdout));
    assert!(
        line.starts_with("::error file=odd%2Cname%3A1.toml,line=1,"),
        "file= is relative and its `,` and `:` escaped: {line}"
    );
    let data = line.splitn(3, "::").nth(2).unwrap_or_default();
    assert!(data.contains("a%25b"), "`%` escaped in the message: {line}");
    assert!(!data.contains('\n'));
}

/// Stage ids that are Mermaid keywords, and DOT's.
const KEYWORDS: &str = r#"
[stages.end]
command = ["true"]

[stages.graph]
after = ["end"]
command = ["true"]

[stages.subgraph]
after = ["graph"]
command = ["true"]

[stages.style]
after = ["subgraph"]
command = ["true"]

[stages.class]
after = ["style"]
command = ["true"]

[stages.click]
after = ["class"]
command = ["true"]

[stages.flowchart]
after = ["click"]
exit_if = "false"
command = ["true"]

[stages.node]
after = ["flowchart"]
command = ["true"]

[stages.digraph]
after = ["node"]
command = ["true"]

[stages.strict]
finally = true
command = ["true"]
"#;

pub(crate) fn node_modules() -> Option<PathBuf> {
    let Some(modules) = std::env::var_os("STAGEGRAPH_TEST_NODE_MODULES").map(PathBuf::from) else {
        crate::support::skip("STAGEGRAPH_TEST_NODE_MODULES is not set (npm i mermaid)");
        return None;
    };
    if !modules.join("mermaid").is_dir() {
        crate::support::skip(&format!("no mermaid under {}", modules.display()));
        return None;
    }
    Some(modules)
}

/// Mermaid's own flowchart grammar, under node: the flowchart parser of the `mermaid` package,
/// with a database that accepts every call (so only the grammar decides, and no browser is
/// needed).
pub(crate) const PARSE: &str = r"
const { readFileSync, readdirSync } = await import('node:fs');
const dir = process.argv[2] + '/mermaid/dist/chunks/mermaid.core';
const file = readdirSync(dir).find((f) => /^flowDiagram-.*\.mjs$/.test(f));
const { diagram } = await import(dir + '/' + file);
let db = diagram.db;
if (typeof db === 'function') db = db();
const yy = {};
for (let o = db; o && o !== Object.prototype; o = Object.getPrototypeOf(o)) {
  for (const key of Object.getOwnPropertyNames(o)) {
    if (!(key in yy)) yy[key] = () => ({ type: 'arrow_point', stroke: 'normal', length: 1, text: '' });
  }
}
yy.lex = { firstGraph: () => true };
diagram.parser.yy = yy;
if (diagram.parser.parser) diagram.parser.parser.yy = yy;
try {
  diagram.parser.parse(readFileSync(process.argv[3], 'utf8'));
  console.log('parsed flowchart');
} catch (error) {
  console.log('error ' + error.message);
  process.exit(1);
}
";

#[test]
fn mermaid_output_parses_for_keyword_ids() {
    let t = Test::new();
    t.write("flow.toml", KEYWORDS);
    let out = t.run(["plan", "flow.toml", "--format", "mermaid"]);
    out.code(0);
    assert!(out.stdout.contains("S_end[\"end<br/>"), "{}", out.stdout);
    let Some(modules) = node_modules() else {
        return;
    };
    t.write("plan.mmd", &out.stdout);
    t.write("parse.mjs", PARSE);
    // The parser tells a bad graph from a good one: the unprefixed ids fail.
    let raw = out.stdout.replace("S_", "");
    t.write("raw.mmd", &raw);
    let parse = |file: &str| {
        Command::new("node")
            .arg(t.path("parse.mjs"))
            .arg(&modules)
            .arg(t.path(file))
            .output()
    };
    let Ok(good) = parse("plan.mmd") else {
        crate::support::skip("node is not installed");
        return;
    };
    let said = String::from_utf8_lossy(&good.stdout);
    assert!(good.status.success(), "{said}\n{}", out.stdout);
    assert!(said.starts_with("parsed flowchart"), "{said}");
    let bad = parse("raw.mmd").expect("node");
    assert!(
        !bad.status.success(),
        "{}",
        String::from_utf8_lossy(&bad.stdout)
    );
}

#[test]
fn dot_output_is_read_by_graphviz_for_keyword_ids() {
    let t = Test::new();
    t.write("flow.toml", KEYWORDS);
    let out = t.run(["plan", "flow.toml", "--format", "dot"]);
    out.code(0);
    t.write("plan.dot", &out.stdout);
    let Ok(dot) = Command::new("dot")
        .args(["-Tplain", "plan.dot"])
        .current_dir(t.root())
        .output()
    else {
        crate::support::skip("graphviz `dot` is not installed");
        return;
    };
    assert!(
        dot.status.success(),
        "{}",
        String::from_utf8_lossy(&dot.stderr)
    );
    let plain = String::from_utf8_lossy(&dot.stdout);
    for id in ["end", "graph", "subgraph", "node", "digraph", "strict"] {
        assert!(
            plain.lines().any(|l| l.starts_with(&format!("node {id} "))
                || l.starts_with(&format!("node \"{id}\" "))),
            "{id} missing:\n{plain}"
        );
    }
}

#[test]
fn the_summary_agrees_with_the_exit_code() {
    let t = Test::new();
    t.write(
        "warned.toml",
        "[stages.a]\ncommand = [\"true\"]\nexit_message = \"x\"\n",
    );
    let out = t.run(["check", "warned.toml"]);
    out.code(0);
    out.stderr_has("warned.toml: ok (0 error(s), 1 warning(s))");
    let out = t.run(["check", "warned.toml", "--deny-warnings"]);
    out.code(2);
    assert!(!out.stderr.contains(": ok ("), "{}", out.stderr);
    out.stderr_has("warned.toml: failed (warnings denied)");

    t.write("clean.toml", "[stages.a]\ncommand = [\"true\"]\n");
    t.write("stagegraph.toml", "[models.m]\nprovider = \"bogus\"\n");
    let out = t.run(["check", "clean.toml"]);
    out.code(2);
    out.stderr_has("check failed: 1 error(s) outside the workflows");
    // Said once: the configuration's problem is not prefixed twice with its alias.
    let line = out
        .stderr
        .lines()
        .find(|l| l.contains("model configuration"))
        .expect("the configuration error");
    assert_eq!(line.matches("model `m`").count(), 1, "{line}");
}

#[test]
fn show_suggests_the_nearest_workflow() {
    let t = Test::new();
    let out = t.run(["show", "refrsh"]);
    out.code(2);
    out.stderr_has("did you mean `refresh`?");
    let out = t.run(["eject", "compund"]);
    out.code(2);
    out.stderr_has("did you mean `compound`?");
}
