//! Plan: a checked [`Workflow`] -> [`Plan`], the graph in execution order (waves: every stage
//! of a wave can run once the waves before it finished), rendered as text, JSON, DOT or
//! Mermaid.

use std::fmt::Write as _;

use serde_json::Value;

use crate::check::{Action, Workflow};

/// The order a checked workflow's stages run in: waves of stages that may run at once, each
/// wave after the one before, then the finally stages.
pub struct Plan<'w> {
    pub(crate) workflow: &'w Workflow,
    /// Stage indexes by wave (finally stages are not in them).
    pub(crate) waves: Vec<Vec<usize>>,
    /// Finally stages by wave: they run once the run has ended, ordered among themselves.
    pub(crate) finally: Vec<Vec<usize>>,
    /// Draw every dependency, not only those no other path implies.
    all_edges: bool,
    /// A run's status of each stage (`plan --run`): the drawing colors the stages by it.
    statuses: std::collections::HashMap<String, String>,
    /// A stage selection (`--only`, `--from`, `--until`): what each stage would do.
    selected: Option<crate::selection::Selected>,
}

impl<'w> Plan<'w> {
    /// The plan of a checked workflow.
    pub fn new(workflow: &'w Workflow) -> Self {
        let waves_of = |finally: bool| {
            let mut level = vec![0usize; workflow.stages.len()];
            let members: Vec<usize> = workflow
                .order
                .iter()
                .copied()
                .filter(|&i| workflow.stages[i].finally == finally)
                .collect();
            for &i in &members {
                level[i] = workflow.stages[i]
                    .deps
                    .iter()
                    .filter(|&&d| workflow.stages[d].finally == finally)
                    .map(|&d| level[d] + 1)
                    .max()
                    .unwrap_or(0);
            }
            let depth = members.iter().map(|&i| level[i] + 1).max().unwrap_or(0);
            let mut waves = vec![Vec::new(); depth];
            for &i in &members {
                waves[level[i]].push(i);
            }
            for wave in &mut waves {
                wave.sort_unstable();
            }
            waves
        };
        Plan {
            workflow,
            waves: waves_of(false),
            finally: waves_of(true),
            all_edges: false,
            statuses: Default::default(),
            selected: None,
        }
    }

    /// Say of each stage what a run with this selection does with it: runs, given (the last
    /// run's output) or left out. Errors name a stage the workflow does not have.
    pub fn with_selection(
        mut self,
        selection: &crate::selection::StageSelection,
    ) -> Result<Self, String> {
        if !selection.is_empty() {
            self.selected = Some(selection.resolve(self.workflow)?);
        }
        Ok(self)
    }

    /// What the selection does with stage `index`, when there is a selection.
    fn selection_of(&self, index: usize) -> Option<&'static str> {
        let selected = self.selected.as_ref()?;
        Some(if selected.run.contains(&index) {
            "runs"
        } else if selected.given.contains(&index) {
            "given"
        } else {
            "left_out"
        })
    }

    /// Color the stages of `to_dot` and `to_mermaid` by a run's statuses (stage id ->
    /// `succeeded`, `cached`, `skipped`, `exited`, `failed`, `not_run`, `running`).
    pub fn with_statuses(mut self, statuses: std::collections::HashMap<String, String>) -> Self {
        self.statuses = statuses;
        self
    }

    /// Draw every dependency in `to_dot` and `to_mermaid` (`plan --all-edges`), instead of
    /// the transitive reduction.
    pub fn with_all_edges(mut self, all_edges: bool) -> Self {
        self.all_edges = all_edges;
        self
    }

    /// The edges drawn, `(from, to)` by stage index in execution order: each stage's
    /// dependencies, less those another of them already waits for (unless `all_edges`).
    pub(crate) fn edges(&self) -> Vec<(usize, usize)> {
        let deps: Vec<Vec<usize>> = self
            .workflow
            .stages
            .iter()
            .map(|s| s.deps.clone())
            .collect();
        let deps = if self.all_edges {
            deps
        } else {
            crate::floor::reduction::transitive_reduction(&self.workflow.order, &deps)
        };
        self.workflow
            .order
            .iter()
            .flat_map(|&i| deps[i].iter().map(move |&d| (d, i)))
            .collect()
    }

    /// How many dependencies the workflow declares, and how many edges a drawing keeps.
    pub fn edge_counts(&self) -> (usize, usize) {
        let all = self.workflow.stages.iter().map(|s| s.deps.len()).sum();
        (all, self.edges().len())
    }

    fn action_summary(&self, index: usize) -> String {
        action_summary(&self.workflow.stages[index])
    }

    /// `plan` as text: the workflow, then each wave with its stages and what each does.
    pub fn to_text(&self) -> String {
        // About 64 bytes a stage for its line and its `after` line: grown from empty, the text
        // of 10,000 stages was copied as it doubled, twice its size held at once.
        let mut out = String::with_capacity(self.workflow.stages.len() * 64);
        let _ = writeln!(
            out,
            "workflow {} ({} stages, {} waves)",
            self.workflow.name,
            self.workflow.stages.len(),
            self.waves.len()
        );
        let finally_waves = self.finally.iter().enumerate().map(|(w, wave)| {
            (
                format!("finally wave {} (once the run has ended):", w + 1),
                wave,
            )
        });
        let waves = self
            .waves
            .iter()
            .enumerate()
            .map(|(w, wave)| (format!("wave {}:", w + 1), wave))
            .chain(finally_waves);
        for (title, wave) in waves {
            let _ = writeln!(out, "{title}");
            for &i in wave {
                let stage = &self.workflow.stages[i];
                let def = &stage.text;
                let _ = writeln!(out, "  {}  {}", stage.id, self.action_summary(i));
                match self.selection_of(i) {
                    Some("given") => {
                        let _ = writeln!(out, "      selection: given (the last run's output)");
                    }
                    Some("left_out") => {
                        let _ = writeln!(out, "      selection: left out");
                    }
                    Some(what) => {
                        let _ = writeln!(out, "      selection: {what}");
                    }
                    None => {}
                }
                if let Some(description) = &def.description {
                    let _ = writeln!(out, "      {description}");
                }
                if !stage.deps.is_empty() {
                    let deps: Vec<&str> = stage
                        .deps
                        .iter()
                        .map(|&d| self.workflow.stages[d].id.as_str())
                        .collect();
                    let _ = writeln!(out, "      after: {}", deps.join(", "));
                }
                if let Some(c) = def.if_() {
                    let _ = writeln!(out, "      if: {c}");
                }
                if let Some(f) = def.foreach() {
                    let _ = writeln!(out, "      foreach: {f}");
                }
                if let Some(e) = def.exit_if() {
                    let _ = writeln!(out, "      exit_if: {e}");
                }
                for that in def.asserts() {
                    let _ = writeln!(out, "      assert: {that}");
                }
            }
        }
        out
    }

    /// `plan --format json`: the stages with their waves and dependencies.
    pub fn to_json(&self) -> Value {
        serde_json::to_value(self.document()).unwrap_or(Value::Null)
    }

    /// The plan's JSON document (as [`Plan::to_json`] gives it), serialized into `out` as it is
    /// made: a run keeps the plan of 10,000 stages beside its record without building it as a
    /// value first (megabytes of maps).
    ///
    /// Written by hand ([`crate::floor::json`]), byte for byte as serde_json writes the
    /// document (a test compares them): through serde it was a run's largest piece of work
    /// beside the stages, on a thread the stages' own work waited for on two cores.
    pub(crate) fn write_json(&self, out: &mut dyn std::io::Write) -> std::io::Result<()> {
        use crate::floor::json::{self, Object};
        let failed = |()| std::io::Error::other("a stage of the plan cannot be written as JSON");
        let stages = &self.workflow.stages;
        let ids = |out: &mut Vec<u8>, indices: &[usize]| {
            json::strings(out, indices.iter().map(|&i| stages[i].id.as_str()));
        };
        json::write_document(out, |buffer, drain| {
            let mut document = Object::new(buffer);
            document.u64("version", 1);
            document.string("workflow", &self.workflow.name);
            let waves = document.key("waves");
            waves.push(b'[');
            for (w, wave) in self.waves.iter().enumerate() {
                if w > 0 {
                    waves.push(b',');
                }
                ids(waves, wave);
                drain(waves)?;
            }
            waves.push(b']');
            let finally: Vec<usize> = self.finally.iter().flatten().copied().collect();
            ids(document.key("finally"), &finally);
            let all = self
                .waves
                .iter()
                .enumerate()
                .flat_map(|(w, wave)| wave.iter().map(move |&i| (Some(w + 1), i)))
                .chain(finally.iter().map(|&i| (None, i)));
            let list = document.key("stages");
            list.push(b'[');
            for (n, (wave, i)) in all.enumerate() {
                if n > 0 {
                    list.push(b',');
                }
                let stage = &stages[i];
                let text = &stage.text;
                let mut member = Object::new(list);
                member.string("id", &stage.id);
                match wave {
                    Some(wave) => member.u64("wave", wave as u64),
                    None => member.key("wave").extend_from_slice(b"null"),
                }
                member.bool("finally", stage.finally);
                member.string("action", stage.action.kind());
                member.string("summary", &self.action_summary(i));
                member.opt_string("description", text.description.as_deref());
                ids(member.key("after"), &stage.deps);
                member.opt_string("if", text.if_());
                member.opt_string("exit_if", text.exit_if());
                member.opt_string("foreach", text.foreach());
                json::strings(
                    member.key("assert"),
                    text.asserts().iter().map(String::as_str),
                );
                member.opt_string("selection", self.selection_of(i));
                if let Some(sub) = sub_workflow(stage) {
                    json::serde(member.key("sub_workflow"), &SubPlan(sub)).map_err(failed)?;
                }
                member.end();
                drain(list)?;
            }
            list.push(b']');
            document.end();
            Ok(())
        })
    }

    fn document(&self) -> PlanDocument<'_, impl Iterator<Item = PlanStage<'_>>> {
        let stages = &self.workflow.stages;
        PlanDocument {
            version: 1,
            workflow: &self.workflow.name,
            waves: self.waves.iter().map(|w| Ids(stages, w)).collect(),
            finally: self
                .finally
                .iter()
                .flatten()
                .map(|&i| stages[i].id.as_str())
                .collect(),
            stages: Seq(std::cell::Cell::new(Some(
                self.waves
                    .iter()
                    .enumerate()
                    .flat_map(|(w, wave)| wave.iter().map(move |&i| (Some(w + 1), i)))
                    .chain(self.finally.iter().flatten().map(|&i| (None, i)))
                    .map(move |(wave, i)| {
                        let stage = &stages[i];
                        PlanStage {
                            id: &stage.id,
                            wave,
                            finally: stage.finally,
                            action: stage.action.kind(),
                            summary: self.action_summary(i),
                            description: stage.text.description.as_deref(),
                            after: Ids(stages, &stage.deps),
                            if_: stage.text.if_(),
                            exit_if: stage.text.exit_if(),
                            foreach: stage.text.foreach(),
                            assert: stage.text.asserts(),
                            selection: self.selection_of(i),
                            sub_workflow: sub_workflow(stage).map(SubPlan),
                        }
                    }),
            ))),
        }
    }

    /// What a drawing left out, when it left out edges.
    fn edges_note(&self) -> Option<String> {
        let (all, drawn) = self.edge_counts();
        (drawn < all).then(|| {
            format!("{drawn} of {all} dependencies drawn: the others are implied by a path (--all-edges draws them)")
        })
    }

    /// `plan --format dot`: the stage graph for graphviz; a sub-workflow is a cluster of its
    /// stages (ids `stage/inner`), edges to and from it drawn to its first and from its last
    /// stage and clipped at the cluster.
    pub fn to_dot(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "digraph {} {{", dot_id(&self.workflow.name));
        if let Some(note) = self.edges_note() {
            let _ = writeln!(out, "  // {note}");
        }
        let _ = writeln!(out, "  rankdir=LR;");
        if has_sub_workflow(self.workflow) {
            let _ = writeln!(out, "  compound=true;");
        }
        let _ = writeln!(out, "  node [shape=box, fontname=\"monospace\"];");
        self.dot_body(&mut out, self.workflow, "", "  ");
        out.push_str("}\n");
        out
    }

    /// The stages of `workflow` (a sub-workflow's ids prefixed by `prefix`) and their edges.
    fn dot_body(&self, out: &mut String, workflow: &Workflow, prefix: &str, indent: &str) {
        for &i in &workflow.order {
            let stage = &workflow.stages[i];
            let path = format!("{prefix}{}", stage.id);
            let summary = action_summary(stage);
            let status = self.statuses.get(&path).map(String::as_str);
            if let Some(inner) = sub_workflow(stage) {
                let mut lines = vec![stage.id.as_str(), summary.as_str()];
                lines.extend(status);
                let _ = writeln!(
                    out,
                    "{indent}subgraph {} {{",
                    dot_id(&format!("cluster_{path}"))
                );
                let _ = writeln!(out, "{indent}  label={};", dot_label(&lines));
                // Its stages are filled by their own statuses: the cluster's is its border.
                let _ = writeln!(out, "{indent}  style=rounded;");
                if let Some(stroke) = status.and_then(status_stroke) {
                    let width = if status == Some("exited") { 3 } else { 2 };
                    let _ = writeln!(out, "{indent}  color=\"{stroke}\"; penwidth={width};");
                }
                self.dot_body(out, inner, &format!("{path}/"), &format!("{indent}  "));
                let _ = writeln!(out, "{indent}}}");
                continue;
            }
            let mut lines = vec![stage.id.as_str(), summary.as_str()];
            if stage.extras().exit_if.is_some() {
                lines.push("(exit_if)");
            }
            if stage.finally {
                lines.push("(finally)");
            }
            let mut attrs = String::new();
            if stage.extras().exit_if.is_some() {
                attrs.push_str(", shape=diamond");
            }
            if let Some(status) = status {
                lines.push(status);
            }
            match (status.and_then(status_fill), stage.finally) {
                (Some(fill), true) => {
                    attrs.push_str(&format!(", style=\"filled,dashed\", fillcolor=\"{fill}\""));
                }
                (Some(fill), false) => {
                    attrs.push_str(&format!(", style=filled, fillcolor=\"{fill}\""));
                }
                (None, true) if stage.extras().exit_if.is_none() => {
                    attrs.push_str(", style=dashed");
                }
                (None, _) => {}
            }
            if status == Some("exited") {
                attrs.push_str(", penwidth=3, color=\"#ef6c00\"");
            }
            let _ = writeln!(
                out,
                "{indent}{} [label={}{attrs}];",
                dot_id(&path),
                dot_label(&lines)
            );
        }
        for (d, i) in self.edges_of(workflow) {
            let (from, tail) = end_node(workflow, d, prefix, End::Last);
            let (to, head) = end_node(workflow, i, prefix, End::First);
            let mut attrs = Vec::new();
            if let Some(cluster) = tail {
                attrs.push(format!("ltail={}", dot_id(&format!("cluster_{cluster}"))));
            }
            if let Some(cluster) = head {
                attrs.push(format!("lhead={}", dot_id(&format!("cluster_{cluster}"))));
            }
            let attrs = match attrs.is_empty() {
                true => String::new(),
                false => format!(" [{}]", attrs.join(", ")),
            };
            let _ = writeln!(out, "{indent}{} -> {}{attrs};", dot_id(&from), dot_id(&to));
        }
    }

    /// The edges drawn among `workflow`'s stages: this plan's, or a sub-workflow's reduced the
    /// same way.
    fn edges_of(&self, workflow: &Workflow) -> Vec<(usize, usize)> {
        if std::ptr::eq(workflow, self.workflow) {
            return self.edges();
        }
        Plan::new(workflow).with_all_edges(self.all_edges).edges()
    }

    /// `plan --format mermaid`: the stage graph as a mermaid flowchart; a sub-workflow is a
    /// subgraph of its stages, edges to and from it drawn to the subgraph.
    pub fn to_mermaid(&self) -> String {
        let mut out = String::from("flowchart LR\n");
        if let Some(note) = self.edges_note() {
            let _ = writeln!(out, "  %% {note}");
        }
        let mut drawn = Mermaid::default();
        self.mermaid_body(&mut out, &mut drawn, self.workflow, "", None, "  ");
        for (status, ids) in &drawn.by_status {
            if let Some(fill) = status_fill(status) {
                let extra = if *status == "exited" {
                    ",stroke:#ef6c00,stroke-width:3px"
                } else {
                    ""
                };
                let _ = writeln!(out, "  classDef s_{status} fill:{fill}{extra}");
                let _ = writeln!(out, "  class {} s_{status}", ids.join(","));
            }
        }
        if !drawn.finally.is_empty() {
            let _ = writeln!(out, "  classDef finally stroke-dasharray: 5 5");
            let _ = writeln!(out, "  class {} finally", drawn.finally.join(","));
        }
        for line in &drawn.edges {
            let _ = writeln!(out, "  {line}");
        }
        out
    }

    /// The nodes of `workflow` (a sub-workflow's under the mermaid id `parent`, its stages'
    /// statuses under `prefix`), noting their classes and edges in `drawn`.
    fn mermaid_body(
        &self,
        out: &mut String,
        drawn: &mut Mermaid,
        workflow: &Workflow,
        prefix: &str,
        parent: Option<&str>,
        indent: &str,
    ) {
        let id_of = |stage: &crate::check::Stage| match parent {
            None => mermaid_id(&stage.id),
            // `S` is in no stage id: no inner id is another stage's.
            Some(parent) => format!("{parent}_S_{}", stage.id),
        };
        for &i in &workflow.order {
            let stage = &workflow.stages[i];
            let path = format!("{prefix}{}", stage.id);
            let label =
                format!("{}<br/>{}", stage.id, action_summary(stage)).replace('"', "#quot;");
            let id = id_of(stage);
            if let Some(inner) = sub_workflow(stage) {
                let _ = writeln!(out, "{indent}subgraph {id}[\"{label}\"]");
                let _ = writeln!(out, "{indent}  direction LR");
                self.mermaid_body(
                    out,
                    drawn,
                    inner,
                    &format!("{path}/"),
                    Some(&id),
                    &format!("{indent}  "),
                );
                let _ = writeln!(out, "{indent}end");
            } else if stage.extras().exit_if.is_some() {
                let _ = writeln!(out, "{indent}{id}{{\"{label}\"}}");
            } else {
                let _ = writeln!(out, "{indent}{id}[\"{label}\"]");
            }
            if let Some(status) = self.statuses.get(&path) {
                match drawn.by_status.iter_mut().find(|(s, _)| s == status) {
                    Some((_, ids)) => ids.push(id.clone()),
                    None => drawn.by_status.push((status.clone(), vec![id.clone()])),
                }
            }
            if stage.finally {
                drawn.finally.push(id);
            }
        }
        for (d, i) in self.edges_of(workflow) {
            let line = format!(
                "{} --> {}",
                id_of(&workflow.stages[d]),
                id_of(&workflow.stages[i])
            );
            drawn.edges.push(line);
        }
    }
}

/// What a mermaid drawing gathers as it draws: stages by status, finally stages, edges.
#[derive(Default)]
struct Mermaid {
    by_status: Vec<(String, Vec<String>)>,
    finally: Vec<String>,
    edges: Vec<String>,
}

/// The sub-workflow a stage runs, when it has stages to draw.
fn sub_workflow(stage: &crate::check::Stage) -> Option<&Workflow> {
    match &stage.action {
        Action::Workflow { workflow, .. } if !workflow.stages.is_empty() => Some(workflow),
        _ => None,
    }
}

fn has_sub_workflow(workflow: &Workflow) -> bool {
    workflow.stages.iter().any(|s| sub_workflow(s).is_some())
}

/// Which stage of a cluster an edge is drawn to.
#[derive(Clone, Copy)]
enum End {
    /// The first stage that waits for none.
    First,
    /// The last stage none waits for.
    Last,
}

/// The node an edge to or from stage `index` of `workflow` is drawn at (`prefix` before its
/// id), and the cluster it is clipped at when the stage is a sub-workflow.
fn end_node(workflow: &Workflow, index: usize, prefix: &str, end: End) -> (String, Option<String>) {
    let stage = &workflow.stages[index];
    let path = format!("{prefix}{}", stage.id);
    let Some(inner) = sub_workflow(stage) else {
        return (path, None);
    };
    let mut ends = inner.order.iter().copied().filter(|&j| match end {
        End::First => inner.stages[j].deps.is_empty(),
        End::Last => inner.dependents[j].is_empty(),
    });
    let picked = match end {
        End::First => ends.next(),
        End::Last => ends.last(),
    };
    let Some(j) = picked else {
        return (path, None);
    };
    let (node, _) = end_node(inner, j, &format!("{path}/"), end);
    (node, Some(path))
}

/// What a stage does, in a line.
fn action_summary(stage: &crate::check::Stage) -> String {
    let text = &stage.text.action;
    match &stage.action {
        Action::None => "(no action)".to_string(),
        Action::Command(_) => format!("command {text}"),
        Action::Shell(_) => format!("shell {}", shortened(text)),
        Action::Prompt(prompt) => format!("prompt {text} -> {}", prompt.model),
        Action::Template(_) => format!("template {text}"),
        Action::Uses { builtin, .. } => format!("uses {}", builtin.name),
        Action::Workflow { workflow, .. } => format!("workflow {}", workflow.name),
    }
}

/// The fill of a stage of a run's status (the colors of `runs report`).
fn status_fill(status: &str) -> Option<&'static str> {
    Some(match status {
        "succeeded" => "#c8e6c9",
        "cached" => "#bbdefb",
        "skipped" => "#eeeeee",
        "exited" => "#ffe0b2",
        "failed" => "#ffcdd2",
        "not_run" => "#ffffff",
        "running" => "#fff9c4",
        _ => return None,
    })
}

/// The border of a sub-workflow's cluster of a run's status.
fn status_stroke(status: &str) -> Option<&'static str> {
    Some(match status {
        "succeeded" => "#2e7d32",
        "cached" => "#1565c0",
        "skipped" => "#9e9e9e",
        "exited" => "#ef6c00",
        "failed" => "#c62828",
        "not_run" => "#999999",
        "running" => "#f9a825",
        _ => return None,
    })
}

/// Words Mermaid's flowchart grammar reads as keywords wherever a node id may stand (`end`
/// closes a subgraph, `class` styles nodes, ...): such an id gets a prefix no stage id can have
/// (stage ids are lowercase), and its label still shows the stage's own id.
const MERMAID_KEYWORDS: &[&str] = &[
    "end",
    "graph",
    "subgraph",
    "flowchart",
    "style",
    "class",
    "classdef",
    "linkstyle",
    "click",
    "call",
    "callback",
    "href",
    "interpolate",
    "direction",
    "default",
    "acctitle",
    "accdescr",
];

fn mermaid_id(id: &str) -> String {
    if MERMAID_KEYWORDS.contains(&id) {
        format!("S_{id}")
    } else {
        id.to_string()
    }
}

fn shortened(line: &str) -> String {
    if line.chars().count() > 60 {
        format!("{}…", line.chars().take(60).collect::<String>())
    } else {
        line.to_string()
    }
}

fn dot_id(id: &str) -> String {
    dot_string(id)
}

fn dot_string(text: &str) -> String {
    format!("\"{}\"", dot_escape(text))
}

/// A label of several lines. Each line is escaped on its own, so a `\n` written in a command
/// stays two characters and only the breaks between lines become DOT's `\n`.
fn dot_label(lines: &[&str]) -> String {
    let escaped: Vec<String> = lines.iter().map(|line| dot_escape(line)).collect();
    format!("\"{}\"", escaped.join("\\n"))
}

fn dot_escape(text: &str) -> String {
    text.replace('\\', "\\\\").replace('"', "\\\"")
}

/// `plan --format json`, borrowed from the plan: the stages are serialized as they are made.
#[derive(serde::Serialize)]
#[serde(bound(serialize = "Seq<S>: serde::Serialize"))]
struct PlanDocument<'a, S> {
    version: u32,
    workflow: &'a str,
    waves: Vec<Ids<'a>>,
    finally: Vec<&'a str>,
    stages: Seq<S>,
}

#[derive(serde::Serialize)]
struct PlanStage<'a> {
    id: &'a str,
    wave: Option<usize>,
    finally: bool,
    action: &'static str,
    summary: String,
    description: Option<&'a str>,
    after: Ids<'a>,
    #[serde(rename = "if")]
    if_: Option<&'a str>,
    exit_if: Option<&'a str>,
    foreach: Option<&'a str>,
    assert: &'a [String],
    /// With `--only`, `--from` or `--until`: `runs`, `given` or `left_out`; null without.
    selection: Option<&'static str>,
    /// A sub-workflow stage's: the sub-workflow's stages, in execution order.
    #[serde(skip_serializing_if = "Option::is_none")]
    sub_workflow: Option<SubPlan<'a>>,
}

/// A sub-workflow in `plan --format json`: its name and its stages in execution order (id,
/// what it does, what it waits for, its own sub-workflow's).
struct SubPlan<'a>(&'a Workflow);

impl serde::Serialize for SubPlan<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        #[derive(serde::Serialize)]
        struct Inner<'a> {
            id: &'a str,
            action: &'static str,
            summary: String,
            after: Ids<'a>,
            finally: bool,
            exit_if: Option<&'a str>,
            #[serde(skip_serializing_if = "Option::is_none")]
            sub_workflow: Option<SubPlan<'a>>,
        }
        #[derive(serde::Serialize)]
        struct Doc<'a> {
            workflow: &'a str,
            stages: Vec<Inner<'a>>,
        }
        let workflow = self.0;
        let stages = workflow.order.iter().map(|&i| {
            let stage = &workflow.stages[i];
            Inner {
                id: &stage.id,
                action: stage.action.kind(),
                summary: action_summary(stage),
                after: Ids(&workflow.stages, &stage.deps),
                finally: stage.finally,
                exit_if: stage.text.exit_if(),
                sub_workflow: sub_workflow(stage).map(SubPlan),
            }
        });
        Doc {
            workflow: &workflow.name,
            stages: stages.collect(),
        }
        .serialize(serializer)
    }
}

/// Stage indexes, serialized as their ids.
struct Ids<'a>(&'a [crate::check::Stage], &'a [usize]);

impl serde::Serialize for Ids<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.1.iter().map(|&i| &self.0[i].id))
    }
}

/// A sequence serialized as it is iterated, once (a document is serialized once).
struct Seq<I>(std::cell::Cell<Option<I>>);

impl<I: Iterator<Item = T>, T: serde::Serialize> serde::Serialize for Seq<I> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.0.take().into_iter().flatten())
    }
}
