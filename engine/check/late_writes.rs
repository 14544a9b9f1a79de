//! Write roots that read a stage's output (`writes = ["{{ stages.locate.output.dir }}"]`): a
//! root like that is known only once the stages it reads have finished, so `check` proves that
//! every stage that writes runs after them. A write can then never race the root it needs, and
//! which writes a run admits does not depend on how its stages were scheduled.

use crate::check::Deps;
use std::collections::BTreeSet;

use super::gather::{Pending, PendingAction};
use super::key::TemplateKey;
use super::stage_pointer;
use super::Checker;
use crate::diag::DiagnosticKind;
use crate::template::Tmpl;

impl Checker<'_> {
    /// Each stage that writes (a writing built-in, an `output.path`) and does not run after
    /// every stage a `writes` entry reads is an error at that stage.
    pub(super) fn late_writes(
        &mut self,
        ids: &[String],
        pendings: &[Pending],
        templates: &[Option<Tmpl>],
        actions: &[Option<PendingAction>],
        deps: &[Deps],
    ) {
        // Every stage a `writes` entry reads, with the first entry that reads it.
        let mut read: Vec<(usize, usize)> = Vec::new();
        for (pending, template) in pendings.iter().zip(templates) {
            let (TemplateKey::Write(entry), Some(template)) = (&pending.key, template) else {
                continue;
            };
            for path in template.references() {
                let mut parts = path.split('.');
                if parts.next() != Some("stages") {
                    continue;
                }
                let Some(at) = parts.next().and_then(|id| ids.iter().position(|i| i == id)) else {
                    continue;
                };
                if !read.iter().any(|(stage, _)| *stage == at) {
                    read.push((at, *entry));
                }
            }
        }
        if read.is_empty() {
            return;
        }
        read.sort_unstable();
        for (i, (id, def)) in self.file.stages.iter().enumerate() {
            let writes = matches!(actions.get(i), Some(Some(PendingAction::Uses { builtin })) if builtin.writes)
                || def.output.as_ref().is_some_and(|o| o.path.is_some());
            if !writes {
                continue;
            }
            let before = ancestors(deps, i);
            for &(stage, entry) in &read {
                if stage == i || before.contains(&stage) {
                    continue;
                }
                let target = &ids[stage];
                let kind = DiagnosticKind::WritesBeforeRoot {
                    stage: id.clone(),
                    target: target.clone(),
                    entry,
                };
                self.error(kind, &stage_pointer(id)).help = Some(format!(
                    "a write root that reads a stage is known once that stage has finished: add `after = [\"{target}\"]` to `{id}`"
                ));
            }
        }
    }
}

/// Every stage `stage` waits for, directly or not.
fn ancestors(deps: &[Deps], stage: usize) -> BTreeSet<usize> {
    let mut seen = BTreeSet::new();
    let mut todo: Vec<usize> = deps.get(stage).into_iter().flatten().copied().collect();
    while let Some(next) = todo.pop() {
        if seen.insert(next) {
            todo.extend(deps.get(next).into_iter().flatten().copied());
        }
    }
    seen
}
