//! Stage selection (`run --only A,B`, `--from A`, `--until B`): which stages of a checked
//! workflow a run executes, which it takes from the last run instead, and which it leaves out.
//!
//! The selected stages are `--only`'s, or the range `--from` and `--until` bound: `--from A`
//! is A and every stage downstream of it, `--until B` is B and every stage upstream of it,
//! both together their intersection. Every stage upstream of a selected stage that is not
//! selected itself is *given*: its output is the one the last real run recorded, and its
//! action does not run. Every other stage is left out (recorded `skipped`). The set of
//! executed and given stages is closed upstream, so no executed stage reads a left-out one.

use std::collections::BTreeSet;

use crate::check::Workflow;
use crate::diag::did_you_mean;

/// The stages a run is asked to execute, as written on the command line.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StageSelection {
    /// `--only`: exactly these.
    pub only: Vec<String>,
    /// `--from`: these and everything downstream.
    pub from: Vec<String>,
    /// `--until`: these and everything upstream.
    pub until: Vec<String>,
}

/// A selection resolved against a workflow: stage indexes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Selected {
    /// Stages that run.
    pub(crate) run: BTreeSet<usize>,
    /// Stages upstream of `run` that do not run: their output comes from the last run.
    pub(crate) given: BTreeSet<usize>,
}

impl StageSelection {
    /// No selection: the whole workflow runs.
    pub fn is_empty(&self) -> bool {
        self.only.is_empty() && self.from.is_empty() && self.until.is_empty()
    }

    /// The stages to run and those to give, or the message naming a stage the workflow does
    /// not have (with the nearest one) or an empty range.
    pub(crate) fn resolve(&self, workflow: &Workflow) -> Result<Selected, String> {
        let index = |flag: &str, id: &str| -> Result<usize, String> {
            workflow
                .stages
                .iter()
                .position(|stage| stage.id == id)
                .ok_or_else(|| {
                    let ids = workflow.stages.iter().map(|stage| stage.id.as_str());
                    match did_you_mean(id, ids) {
                        Some(help) => format!(
                            "{flag}: workflow `{}` has no stage `{id}`; {help}",
                            workflow.name
                        ),
                        None => format!("{flag}: workflow `{}` has no stage `{id}`", workflow.name),
                    }
                })
        };
        let all: BTreeSet<usize> = (0..workflow.stages.len()).collect();
        let run: BTreeSet<usize> = if self.only.is_empty() {
            let mut run = all.clone();
            if !self.from.is_empty() {
                let mut down = BTreeSet::new();
                for id in &self.from {
                    down.extend(downstream(workflow, index("--from", id)?));
                }
                run = run.intersection(&down).copied().collect();
            }
            if !self.until.is_empty() {
                let mut up = BTreeSet::new();
                for id in &self.until {
                    up.extend(upstream(workflow, index("--until", id)?));
                }
                run = run.intersection(&up).copied().collect();
            }
            run
        } else {
            self.only
                .iter()
                .map(|id| index("--only", id))
                .collect::<Result<_, _>>()?
        };
        if run.is_empty() {
            return Err(format!(
                "--from {} --until {}: no stage is both downstream of the first and upstream of the second",
                self.from.join(","),
                self.until.join(",")
            ));
        }
        let mut given = BTreeSet::new();
        for &stage in &run {
            given.extend(upstream(workflow, stage));
        }
        let given = given.difference(&run).copied().collect();
        Ok(Selected { run, given })
    }
}

/// `stage` and every stage it depends on, directly or not.
fn upstream(workflow: &Workflow, stage: usize) -> BTreeSet<usize> {
    let mut seen = BTreeSet::from([stage]);
    let mut todo = vec![stage];
    while let Some(next) = todo.pop() {
        for &dep in &workflow.stages[next].deps {
            if seen.insert(dep) {
                todo.push(dep);
            }
        }
    }
    seen
}

/// `stage` and every stage that depends on it, directly or not.
fn downstream(workflow: &Workflow, stage: usize) -> BTreeSet<usize> {
    let mut seen = BTreeSet::from([stage]);
    // The file's order need not follow the dependencies: grow the set until it stops growing.
    loop {
        let before = seen.len();
        for (index, candidate) in workflow.stages.iter().enumerate() {
            if !seen.contains(&index) && candidate.deps.iter().any(|dep| seen.contains(dep)) {
                seen.insert(index);
            }
        }
        if seen.len() == before {
            return seen;
        }
    }
}
