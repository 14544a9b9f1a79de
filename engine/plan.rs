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
        let stage = &self.workflow.stages[index];
        let text = &stage.text.action;
        match &stage.action {
            Action::None => "(no action)".to_string(),
            Action::Command(_) => format!("command {text}"),
            Action::Shell(_) => format!("shell {}", shortened(text)),
            Action::Prompt { model, .. } => format!("prompt {text} -> {model}"),
            Action::Template(_) => format!("template {text}"),
            Action::Uses { builtin, .. } => format!("uses {}", builtin.name),
            Action::Workflow { workflow, .. } => format!("workflow {}", workflow.name),
        }
    }

    /// `plan` as text: the workflow, then each wave with its stages and what each does.
    pub fn to_text(&self) -> String {
        let mut out = String::new();
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
                if let Some(c) = &def.if_ {
                    let _ = writeln!(out, "      if: {c}");
                }
                if let Some(f) = &def.foreach {
                    let _ = writeln!(out, "      foreach: {f}");
                }
                if let Some(e) = &def.exit_if {
                    let _ = writeln!(out, "      exit_if: {e}");
                }
                for that in &def.asserts {
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
    pub(crate) fn write_json(&self, out: &mut dyn std::io::Write) -> std::io::Result<()> {
        crate::run::record::write_json(out, &self.document())
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
                            if_: stage.text.if_.as_deref(),
                            exit_if: stage.text.exit_if.as_deref(),
                            foreach: stage.text.foreach.as_deref(),
                            assert: &stage.text.asserts,
                            selection: self.selection_of(i),
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

    /// `plan --format dot`: the stage graph for graphviz.
    pub fn to_dot(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "digraph {} {{", dot_id(&self.workflow.name));
        if let Some(note) = self.edges_note() {
            let _ = writeln!(out, "  // {note}");
        }
        let _ = writeln!(out, "  rankdir=LR;");
        let _ = writeln!(out, "  node [shape=box, fontname=\"monospace\"];");
        for &i in &self.workflow.order {
            let stage = &self.workflow.stages[i];
            let summary = self.action_summary(i);
            let mut lines = vec![stage.id.as_str(), summary.as_str()];
            if stage.exit_if.is_some() {
                lines.push("(exit_if)");
            }
            if stage.finally {
                lines.push("(finally)");
            }
            let mut attrs = String::new();
            if stage.exit_if.is_some() {
                attrs.push_str(", shape=diamond");
            }
            let status = self.statuses.get(&stage.id).map(String::as_str);
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
                (None, true) if stage.exit_if.is_none() => attrs.push_str(", style=dashed"),
                (None, _) => {}
            }
            if status == Some("exited") {
                attrs.push_str(", penwidth=3, color=\"#ef6c00\"");
            }
            let _ = writeln!(
                out,
                "  {} [label={}{attrs}];",
                dot_id(&stage.id),
                dot_label(&lines)
            );
        }
        for (d, i) in self.edges() {
            let _ = writeln!(
                out,
                "  {} -> {};",
                dot_id(&self.workflow.stages[d].id),
                dot_id(&self.workflow.stages[i].id)
            );
        }
        out.push_str("}\n");
        out
    }

    /// `plan --format mermaid`: the stage graph as a mermaid flowchart.
    pub fn to_mermaid(&self) -> String {
        let mut out = String::from("flowchart LR\n");
        if let Some(note) = self.edges_note() {
            let _ = writeln!(out, "  %% {note}");
        }
        for &i in &self.workflow.order {
            let stage = &self.workflow.stages[i];
            let label =
                format!("{}<br/>{}", stage.id, self.action_summary(i)).replace('"', "#quot;");
            let id = mermaid_id(&stage.id);
            if stage.exit_if.is_some() {
                let _ = writeln!(out, "  {id}{{\"{label}\"}}");
            } else {
                let _ = writeln!(out, "  {id}[\"{label}\"]");
            }
        }
        let mut by_status: Vec<(&str, Vec<String>)> = Vec::new();
        for &i in &self.workflow.order {
            let id = &self.workflow.stages[i].id;
            let Some(status) = self.statuses.get(id) else {
                continue;
            };
            match by_status.iter_mut().find(|(s, _)| s == status) {
                Some((_, ids)) => ids.push(mermaid_id(id)),
                None => by_status.push((status, vec![mermaid_id(id)])),
            }
        }
        for (status, ids) in &by_status {
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
        let finally: Vec<String> = self
            .finally
            .iter()
            .flatten()
            .map(|&i| mermaid_id(&self.workflow.stages[i].id))
            .collect();
        if !finally.is_empty() {
            let _ = writeln!(out, "  classDef finally stroke-dasharray: 5 5");
            let _ = writeln!(out, "  class {} finally", finally.join(","));
        }
        for (d, i) in self.edges() {
            let _ = writeln!(
                out,
                "  {} --> {}",
                mermaid_id(&self.workflow.stages[d].id),
                mermaid_id(&self.workflow.stages[i].id)
            );
        }
        out
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

/// A line of at most 60 characters.
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
