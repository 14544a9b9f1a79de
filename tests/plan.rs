//! `stagegraph plan`: a diamond workflow as JSON (snapshot), DOT (parsed by a small DOT parser
//! below, and rendered by graphviz when it is installed) and Mermaid.

use std::collections::{BTreeMap, BTreeSet};

use crate::support::Test;

/// `top` feeds `left` (an edge inferred from a reference) and `right` (an explicit `after`);
/// both feed `bottom`. The summaries hold quotes, a backslash and a literal `\n`, which DOT must
/// escape rather than draw as a line break.
const DIAMOND: &str = r#"
[workflow]
description = "a diamond: top, two branches, bottom"

[stages.top]
description = "where it starts"
command = ["printf", '{"go": true}\n']
output = { format = "json" }

[stages.left]
description = "an edge inferred from a reference"
template = { inline = "left of {{ stages.top.output.go }}" }

[stages.right]
after = ["top"]
shell = 'echo "right" \'

[stages.bottom]
after = ["left", "right"]
command = ["echo", "bottom"]
exit_if = "output == 'stop'"
"#;

const EDGES: [(&str, &str); 4] = [
    ("left", "bottom"),
    ("right", "bottom"),
    ("top", "left"),
    ("top", "right"),
];

fn plan(format: &str) -> String {
    let t = Test::new();
    t.write("diamond.toml", DIAMOND);
    let out = t.run(["plan", "diamond.toml", "--format", format]);
    out.code(0);
    out.stdout
}

#[test]
fn json_lists_waves_in_execution_order() {
    let json: serde_json::Value = serde_json::from_str(&plan("json")).expect("plan JSON");
    assert_eq!(
        json["waves"],
        serde_json::json!([["top"], ["left", "right"], ["bottom"]])
    );
    insta::assert_json_snapshot!(json);
}

#[test]
fn text_lists_waves() {
    let text = plan("text");
    let waves: Vec<&str> = text.lines().filter(|l| l.starts_with("wave ")).collect();
    assert_eq!(waves, ["wave 1:", "wave 2:", "wave 3:"], "{text}");
    assert!(text.contains("after: left, right"), "{text}");
}

#[test]
fn dot_is_a_valid_graph_with_every_edge() {
    let text = plan("dot");
    let graph = dot::parse(&text).unwrap_or_else(|e| panic!("invalid DOT ({e}):\n{text}"));
    assert!(graph.directed);
    let nodes: BTreeSet<&str> = graph.nodes.keys().map(String::as_str).collect();
    assert_eq!(nodes, BTreeSet::from(["bottom", "left", "right", "top"]));
    let edges: BTreeSet<(&str, &str)> = graph
        .edges
        .iter()
        .map(|(a, b)| (a.as_str(), b.as_str()))
        .collect();
    assert_eq!(edges, BTreeSet::from(EDGES));
    assert_eq!(graph.edges.len(), EDGES.len(), "an edge is repeated");

    let label = |id: &str| dot::label(&graph.nodes[id]["label"]);
    assert_eq!(label("right"), "right\nshell echo \"right\" \\");
    assert_eq!(label("top"), "top\ncommand printf {\"go\": true}\\n");
    assert_eq!(
        graph.nodes["bottom"].get("shape").map(String::as_str),
        Some("diamond")
    );

    // Graphviz itself, where it is installed.
    if let Ok(mut child) = std::process::Command::new("dot")
        .arg("-Tsvg")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
    {
        use std::io::Write;
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(text.as_bytes())
            .expect("feed dot");
        let out = child.wait_with_output().expect("run dot");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "dot rejected the graph: {stderr}");
        assert!(stderr.trim().is_empty(), "dot warned: {stderr}");
        assert!(String::from_utf8_lossy(&out.stdout).contains("<svg"));
    }
}

#[test]
fn mermaid_is_a_flowchart_with_every_edge() {
    let text = plan("mermaid");
    assert!(text.starts_with("flowchart"), "{text}");
    let edges: Vec<(&str, &str)> = text
        .lines()
        .filter_map(|line| line.trim().split_once(" --> "))
        .collect();
    let set: BTreeSet<(&str, &str)> = edges.iter().copied().collect();
    assert_eq!(set, BTreeSet::from(EDGES), "{text}");
    assert_eq!(edges.len(), EDGES.len(), "{text}");
    for id in ["top", "left", "right", "bottom"] {
        assert!(
            text.lines().any(|l| l.trim().starts_with(&format!("{id}["))
                || l.trim().starts_with(&format!("{id}{{"))),
            "node {id} is not declared:\n{text}"
        );
    }
}

/// A parser for the DOT language as graphviz defines it, minus ports and HTML strings, which
/// the engine does not emit.
mod dot {
    use super::*;

    #[derive(Debug, Clone, PartialEq)]
    enum Token {
        /// An identifier, a numeral or a quoted string (unquoted, `\"` decoded).
        Id(String),
        Open,
        Close,
        OpenBracket,
        CloseBracket,
        Semi,
        Comma,
        Equals,
        Arrow,
        Line,
    }

    pub(super) struct Graph {
        pub directed: bool,
        /// Node id -> attributes (merged over every statement naming it).
        pub nodes: BTreeMap<String, BTreeMap<String, String>>,
        pub edges: Vec<(String, String)>,
        /// Edge attributes, in the order of `edges`.
        pub edge_attrs: Vec<BTreeMap<String, String>>,
        /// Subgraph id -> its attributes (`label=...;` statements) and the nodes declared in
        /// it, its subgraphs' too.
        pub subgraphs: BTreeMap<String, (BTreeMap<String, String>, BTreeSet<String>)>,
    }

    fn lex(text: &str) -> Result<Vec<Token>, String> {
        let chars: Vec<char> = text.chars().collect();
        let mut tokens = Vec::new();
        let mut i = 0;
        while i < chars.len() {
            let c = chars[i];
            match c {
                _ if c.is_whitespace() => i += 1,
                '/' if chars.get(i + 1) == Some(&'/') => {
                    while i < chars.len() && chars[i] != '\n' {
                        i += 1;
                    }
                }
                '#' if i == 0 || chars[i - 1] == '\n' => {
                    while i < chars.len() && chars[i] != '\n' {
                        i += 1;
                    }
                }
                '/' if chars.get(i + 1) == Some(&'*') => {
                    i += 2;
                    while i + 1 < chars.len() && !(chars[i] == '*' && chars[i + 1] == '/') {
                        i += 1;
                    }
                    i += 2;
                }
                '{' | '}' | '[' | ']' | ';' | ',' | '=' => {
                    tokens.push(match c {
                        '{' => Token::Open,
                        '}' => Token::Close,
                        '[' => Token::OpenBracket,
                        ']' => Token::CloseBracket,
                        ';' => Token::Semi,
                        ',' => Token::Comma,
                        _ => Token::Equals,
                    });
                    i += 1;
                }
                '-' if chars.get(i + 1) == Some(&'>') => {
                    tokens.push(Token::Arrow);
                    i += 2;
                }
                '-' if chars.get(i + 1) == Some(&'-') => {
                    tokens.push(Token::Line);
                    i += 2;
                }
                '"' => {
                    i += 1;
                    let mut value = String::new();
                    loop {
                        match chars.get(i) {
                            None => return Err("unterminated string".into()),
                            Some('"') => break,
                            Some('\\') => match chars.get(i + 1) {
                                Some('"') => {
                                    value.push('"');
                                    i += 2;
                                }
                                Some('\\') => {
                                    value.push_str("\\\\");
                                    i += 2;
                                }
                                Some('\n') => i += 2,
                                _ => {
                                    value.push('\\');
                                    i += 1;
                                }
                            },
                            Some(&other) => {
                                value.push(other);
                                i += 1;
                            }
                        }
                    }
                    i += 1;
                    tokens.push(Token::Id(value));
                }
                _ if c.is_alphanumeric() || c == '_' || c == '.' || c == '-' => {
                    let start = i;
                    while i < chars.len()
                        && (chars[i].is_alphanumeric() || chars[i] == '_' || chars[i] == '.')
                    {
                        i += 1;
                    }
                    if i == start {
                        return Err(format!("unexpected `{c}`"));
                    }
                    let word: String = chars[start..i].iter().collect();
                    let numeral = word.chars().all(|c| c.is_ascii_digit() || c == '.');
                    let identifier =
                        !word.starts_with(|c: char| c.is_ascii_digit()) && !word.contains('.');
                    if !numeral && !identifier {
                        return Err(format!("`{word}` is neither an identifier nor a numeral"));
                    }
                    tokens.push(Token::Id(word));
                }
                other => return Err(format!("unexpected `{other}`")),
            }
        }
        Ok(tokens)
    }

    struct Parser {
        tokens: Vec<Token>,
        at: usize,
        graph: Graph,
        /// The subgraphs the statement being read is in, outermost first.
        within: Vec<String>,
    }

    impl Parser {
        fn peek(&self) -> Option<&Token> {
            self.tokens.get(self.at)
        }

        fn next(&mut self) -> Result<Token, String> {
            let token = self.tokens.get(self.at).cloned().ok_or("unexpected end")?;
            self.at += 1;
            Ok(token)
        }

        fn expect(&mut self, want: Token) -> Result<(), String> {
            let got = self.next()?;
            if got == want {
                Ok(())
            } else {
                Err(format!("expected {want:?}, got {got:?}"))
            }
        }

        fn id(&mut self) -> Result<String, String> {
            match self.next()? {
                Token::Id(id) => Ok(id),
                other => Err(format!("expected an id, got {other:?}")),
            }
        }

        /// `[a=b, c=d][e=f]`
        fn attr_lists(&mut self) -> Result<BTreeMap<String, String>, String> {
            let mut attrs = BTreeMap::new();
            while self.peek() == Some(&Token::OpenBracket) {
                self.next()?;
                while self.peek() != Some(&Token::CloseBracket) {
                    let key = self.id()?;
                    self.expect(Token::Equals)?;
                    let value = self.id()?;
                    attrs.insert(key, value);
                    if matches!(self.peek(), Some(Token::Comma | Token::Semi)) {
                        self.next()?;
                    }
                }
                self.expect(Token::CloseBracket)?;
            }
            Ok(attrs)
        }

        /// Statements up to the `}` that closes the body.
        fn body(&mut self) -> Result<(), String> {
            loop {
                match self.peek() {
                    Some(Token::Close) => {
                        self.next()?;
                        return Ok(());
                    }
                    Some(Token::Semi) => {
                        self.next()?;
                    }
                    Some(_) => self.statement()?,
                    None => return Err("missing `}`".into()),
                }
            }
        }

        fn statement(&mut self) -> Result<(), String> {
            let first = self.id()?;
            let keyword = first.to_ascii_lowercase();
            if keyword == "subgraph" {
                let name = match self.peek() {
                    Some(Token::Id(_)) => self.id()?,
                    _ => String::new(),
                };
                self.graph.subgraphs.entry(name.clone()).or_default();
                self.expect(Token::Open)?;
                self.within.push(name);
                self.body()?;
                self.within.pop();
                return Ok(());
            }
            if matches!(keyword.as_str(), "graph" | "node" | "edge") {
                self.attr_lists()?;
                return Ok(());
            }
            if self.peek() == Some(&Token::Equals) {
                self.next()?;
                let value = self.id()?;
                if let Some(name) = self.within.last() {
                    let (attrs, _) = self.graph.subgraphs.get_mut(name).expect("entered");
                    attrs.insert(first, value);
                }
                return Ok(());
            }
            let mut chain = vec![first];
            while matches!(self.peek(), Some(Token::Arrow | Token::Line)) {
                let op = self.next()?;
                let wanted = if self.graph.directed {
                    Token::Arrow
                } else {
                    Token::Line
                };
                if op != wanted {
                    return Err(format!("{op:?} in a graph that wants {wanted:?}"));
                }
                chain.push(self.id()?);
            }
            let attrs = self.attr_lists()?;
            if chain.len() == 1 {
                let node = chain.remove(0);
                for name in &self.within {
                    let (_, nodes) = self.graph.subgraphs.get_mut(name).expect("entered");
                    nodes.insert(node.clone());
                }
                self.graph.nodes.entry(node).or_default().extend(attrs);
            } else {
                for pair in chain.windows(2) {
                    self.graph.edges.push((pair[0].clone(), pair[1].clone()));
                    self.graph.edge_attrs.push(attrs.clone());
                }
            }
            Ok(())
        }
    }

    pub(super) fn parse(text: &str) -> Result<Graph, String> {
        let mut parser = Parser {
            tokens: lex(text)?,
            at: 0,
            graph: Graph {
                directed: false,
                nodes: BTreeMap::new(),
                edges: Vec::new(),
                edge_attrs: Vec::new(),
                subgraphs: BTreeMap::new(),
            },
            within: Vec::new(),
        };
        let mut head = parser.id()?;
        if head.eq_ignore_ascii_case("strict") {
            head = parser.id()?;
        }
        parser.graph.directed = match head.to_ascii_lowercase().as_str() {
            "digraph" => true,
            "graph" => false,
            other => return Err(format!("`{other}` is not graph or digraph")),
        };
        if matches!(parser.peek(), Some(Token::Id(_))) {
            parser.next()?;
        }
        parser.expect(Token::Open)?;
        parser.body()?;
        if parser.at != parser.tokens.len() {
            return Err("text after the closing `}`".into());
        }
        // Every edge's ends must be nodes the graph declares (the engine declares each one).
        for (from, to) in &parser.graph.edges {
            for end in [from, to] {
                if !parser.graph.nodes.contains_key(end) {
                    return Err(format!("edge end `{end}` is not a declared node"));
                }
            }
        }
        Ok(parser.graph)
    }

    /// A label's text as graphviz draws it: `\n` breaks the line, `\\` is a backslash.
    pub(super) fn label(escaped: &str) -> String {
        let mut out = String::new();
        let mut chars = escaped.chars();
        while let Some(c) = chars.next() {
            if c != '\\' {
                out.push(c);
                continue;
            }
            match chars.next() {
                Some('n' | 'l' | 'r') => out.push('\n'),
                Some(other) => out.push(other),
                None => out.push('\\'),
            }
        }
        out
    }

    #[test]
    fn parser_rejects_broken_graphs() {
        assert!(parse("digraph g { a -> b; }").is_err(), "undeclared ends");
        assert!(
            parse("digraph g { a; b; a -> b;").is_err(),
            "no closing brace"
        );
        assert!(
            parse("digraph g { a; b; a -- b; }").is_err(),
            "undirected edge"
        );
        assert!(
            parse("digraph g { a [label=\"x]; }").is_err(),
            "open string"
        );
        let ok = parse("strict digraph \"g\" { node [shape=box]; a [label=\"x\\\"y\"]; b; a -> b [color=red] }")
            .expect("valid DOT");
        assert_eq!(ok.nodes["a"]["label"], "x\"y");
        assert_eq!(ok.edges, [("a".to_string(), "b".to_string())]);
    }
}

/// `c` waits for `a` and `b`, and `b` for `a`: the edge `a -> c` is implied by `a -> b -> c`.
const IMPLIED: &str = r#"
[stages.a]
command = ["echo", "a"]

[stages.b]
after = ["a"]
command = ["echo", "b"]

[stages.c]
after = ["a", "b"]
command = ["echo", "c"]
"#;

fn implied_edges(format: &str, extra: &[&str]) -> (Vec<(String, String)>, String) {
    let t = Test::new();
    t.write("implied.toml", IMPLIED);
    let mut args = vec!["plan", "implied.toml", "--format", format];
    args.extend_from_slice(extra);
    let out = t.run(args);
    out.code(0);
    let arrow = if format == "dot" { " -> " } else { " --> " };
    let edges = out
        .stdout
        .lines()
        .filter_map(|line| line.trim().trim_end_matches(';').split_once(arrow))
        .map(|(a, b)| {
            (
                a.trim_matches('"').to_string(),
                b.trim_matches('"').to_string(),
            )
        })
        .collect();
    (edges, out.stdout)
}

#[test]
fn dot_and_mermaid_leave_out_edges_a_path_implies_unless_asked() {
    let pair = |a: &str, b: &str| (a.to_string(), b.to_string());
    let reduced = vec![pair("a", "b"), pair("b", "c")];
    let all = vec![pair("a", "b"), pair("a", "c"), pair("b", "c")];
    for format in ["dot", "mermaid"] {
        let (edges, text) = implied_edges(format, &[]);
        assert_eq!(edges, reduced, "{text}");
        assert!(text.contains("2 of 3 dependencies drawn"), "{text}");
        let (mut edges, text) = implied_edges(format, &["--all-edges"]);
        edges.sort();
        assert_eq!(edges, all, "{text}");
        assert!(!text.contains("dependencies drawn"), "{text}");
    }
    let (edges, text) = implied_edges("dot", &[]);
    let graph = dot::parse(&text).unwrap_or_else(|e| panic!("invalid DOT ({e}):\n{text}"));
    assert_eq!(graph.edges.len(), edges.len());
}

#[test]
fn plan_run_colors_the_stages_by_that_run_and_marks_the_exit() {
    let t = Test::new();
    t.write(
        "ran.toml",
        r#"
[stages.a]
command = ["echo", "stop"]

[stages.never]
if = "false"
command = ["echo", "no"]

[stages.gate]
after = ["a"]
command = ["echo", "stop"]
exit_if = "true"

[stages.later]
after = ["gate"]
command = ["echo", "later"]
"#,
    );
    t.run(["run", "ran.toml", "-q"]).code(0);
    let out = t.run(["plan", "ran.toml", "--format", "dot", "--run", "last"]);
    out.code(0);
    let graph = dot::parse(&out.stdout).unwrap_or_else(|e| panic!("invalid DOT ({e})"));
    let fill = |id: &str| {
        graph.nodes[id]
            .get("fillcolor")
            .cloned()
            .unwrap_or_default()
    };
    assert_eq!(fill("a"), "#c8e6c9", "succeeded");
    assert_eq!(fill("never"), "#eeeeee", "skipped");
    assert_eq!(fill("gate"), "#ffe0b2", "exited");
    assert_eq!(fill("later"), "#ffffff", "not run");
    assert_eq!(
        graph.nodes["gate"].get("penwidth").map(String::as_str),
        Some("3")
    );
    assert!(dot::label(&graph.nodes["later"]["label"]).ends_with("\nnot_run"));

    let out = t.run(["plan", "ran.toml", "--format", "mermaid", "--run", "last"]);
    out.code(0);
    assert!(
        out.stdout.contains("  class gate s_exited\n"),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout.contains("  class later s_not_run\n"),
        "{}",
        out.stdout
    );
    let unknown = t.run(["plan", "ran.toml", "--format", "dot", "--run", "nope"]);
    assert_eq!(unknown.code, Some(2), "{}", unknown.stderr);
}

/// `review` runs `child`, whose `gate` ends it early; `ship` waits for `review`.
pub(crate) const CHILD: &str = r#"
[stages.lint]
command = ["echo", "lint"]

[stages.fix]
after = ["lint"]
command = ["echo", "fix"]

[stages.gate]
after = ["fix"]
command = ["echo", "stop"]
exit_if = "true"
"#;

pub(crate) const PARENT: &str = r#"
[stages.prep]
command = ["echo", "prep"]

[stages.review]
after = ["prep"]
workflow = "child"

[stages.ship]
after = ["review"]
command = ["echo", "ship"]
"#;

/// Render `text` with graphviz: its SVG, or `None` after a skip when graphviz is missing.
/// Graphviz must neither fail nor warn.
fn graphviz_svg(text: &str) -> Option<String> {
    use std::io::Write;
    let Ok(mut child) = std::process::Command::new("dot")
        .arg("-Tsvg")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
    else {
        crate::support::skip("graphviz is not installed (apt-get install graphviz)");
        return None;
    };
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(text.as_bytes())
        .expect("feed dot");
    let out = child.wait_with_output().expect("run dot");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "dot rejected the graph: {stderr}");
    assert!(stderr.trim().is_empty(), "dot warned: {stderr}\n{text}");
    Some(String::from_utf8_lossy(&out.stdout).into_owned())
}

#[test]
fn sub_workflows_are_clusters_colored_by_the_run() {
    let t = Test::new();
    t.write("child.toml", CHILD);
    t.write("w.toml", PARENT);
    t.run(["run", "w.toml", "-q"]).code(0);

    let out = t.run(["plan", "w.toml", "--format", "dot", "--run", "last"]);
    out.code(0);
    let text = out.stdout;
    let graph = dot::parse(&text).unwrap_or_else(|e| panic!("invalid DOT ({e}):\n{text}"));
    let (attrs, members) = &graph.subgraphs["cluster_review"];
    assert_eq!(
        members,
        &BTreeSet::from(["review/fix", "review/gate", "review/lint"].map(String::from)),
        "{text}"
    );
    assert_eq!(
        dot::label(&attrs["label"]),
        "review\nworkflow child\nsucceeded"
    );
    assert_eq!(
        attrs["color"], "#2e7d32",
        "the cluster has its stage's status"
    );
    assert!(!graph.nodes.contains_key("review"), "{text}");
    // Its stages are colored by the sub-workflow's run, its exit point marked.
    let fill = |id: &str| {
        graph.nodes[id]
            .get("fillcolor")
            .cloned()
            .unwrap_or_default()
    };
    assert_eq!(fill("prep"), "#c8e6c9");
    assert_eq!(fill("review/lint"), "#c8e6c9");
    assert_eq!(fill("review/gate"), "#ffe0b2", "exited");
    assert_eq!(graph.nodes["review/gate"]["penwidth"], "3");
    // Edges to and from the sub-workflow reach its first and last stage, clipped at it.
    let edges: Vec<(&str, &str, Option<&str>, Option<&str>)> = graph
        .edges
        .iter()
        .zip(&graph.edge_attrs)
        .map(|((a, b), attrs)| {
            (
                a.as_str(),
                b.as_str(),
                attrs.get("ltail").map(String::as_str),
                attrs.get("lhead").map(String::as_str),
            )
        })
        .collect();
    assert_eq!(
        BTreeSet::from_iter(edges),
        BTreeSet::from([
            ("prep", "review/lint", None, Some("cluster_review")),
            ("review/lint", "review/fix", None, None),
            ("review/fix", "review/gate", None, None),
            ("review/gate", "ship", Some("cluster_review"), None),
        ])
    );
    if let Some(svg) = graphviz_svg(&text) {
        assert!(svg.contains("<title>cluster_review</title>"), "{svg}");
    }

    let out = t.run(["plan", "w.toml", "--format", "mermaid", "--run", "last"]);
    out.code(0);
    let text = out.stdout;
    let lines: Vec<&str> = text.lines().map(str::trim).collect();
    let open = lines
        .iter()
        .position(|l| l.starts_with("subgraph review[\"review<br/>workflow child\"]"))
        .unwrap_or_else(|| panic!("no subgraph:\n{text}"));
    let end = open
        + lines[open..]
            .iter()
            .position(|l| *l == "end")
            .expect("its end");
    let inside: Vec<&str> = lines[open + 1..end]
        .iter()
        .filter_map(|l| l.split('[').next().filter(|_| l.contains('[')))
        .collect();
    assert_eq!(inside, ["review_S_lint", "review_S_fix"], "{text}");
    assert!(lines[open + 1..end]
        .iter()
        .any(|l| l.starts_with("review_S_gate{")));
    for edge in [
        "prep --> review",
        "review --> ship",
        "review_S_lint --> review_S_fix",
    ] {
        assert!(lines.contains(&edge), "no `{edge}`:\n{text}");
    }
    assert!(lines.contains(&"class review_S_gate s_exited"), "{text}");
    // Mermaid's own grammar reads it.
    let Some(modules) = crate::ci_output::node_modules() else {
        return;
    };
    t.write("plan.mmd", &text);
    t.write("parse.mjs", crate::ci_output::PARSE);
    let Ok(parsed) = std::process::Command::new("node")
        .arg(t.path("parse.mjs"))
        .arg(&modules)
        .arg(t.path("plan.mmd"))
        .output()
    else {
        crate::support::skip("node is not installed");
        return;
    };
    let said = String::from_utf8_lossy(&parsed.stdout);
    assert!(parsed.status.success(), "{said}\n{text}");
    assert!(said.starts_with("parsed flowchart"), "{said}");
}
