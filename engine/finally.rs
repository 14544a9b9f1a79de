//! Finally stages (`finally = true`): what `check` proves of them and how a run reads its end.
//!
//! A finally stage runs once the run has ended (succeeded, exited early, failed), after every
//! ordinary stage that could run. Ordinary stages are scheduled as if finally stages did not
//! exist; finally stages then run among themselves, ordered by their own edges. So an ordinary
//! stage may never wait for a finally one, and a finally stage cannot end the run early: the run
//! has already ended.

use crate::check::Deps;

use crate::diag::DiagnosticKind;
use crate::format::{OnError, WorkflowFile};
use crate::load::pointer_segment;

/// One problem: its kind, the JSON pointer it is about, whether the pointer names a key (the
/// stage's table) rather than a value, and a help line.
pub(crate) struct Problem {
    pub message: DiagnosticKind,
    pub pointer: String,
    pub key: bool,
    pub help: String,
}

/// The problems of a workflow's finally stages, given each stage's dependencies (indexes into
/// `file.stages`, in its order).
pub(crate) fn problems(file: &WorkflowFile, deps: &[Deps]) -> Vec<Problem> {
    let defs: Vec<(&String, &crate::format::StageDef)> =
        file.stages.iter().map(|(id, def)| (id, &**def)).collect();
    let mut out = Vec::new();
    for (i, (id, def)) in defs.iter().enumerate() {
        // Only a problem needs the pointer: not built for every stage.
        let stage = || format!("/stages/{}", pointer_segment(id));
        if def.finally {
            if def.exit_if.is_some() {
                out.push(Problem {
                    message: DiagnosticKind::FinallyExitIf((*id).clone()),
                    pointer: format!("{}/exit_if", stage()),
                    key: true,
                    help: "read how the run ended from `run.status`, `run.exit` and `run.error`"
                        .into(),
                });
            }
            if def.on_error == Some(OnError::Exit) {
                out.push(Problem {
                    message: DiagnosticKind::FinallyOnErrorExit((*id).clone()),
                    pointer: format!("{}/on_error", stage()),
                    key: false,
                    help: "a finally stage's failure is recorded and never changes how the run ended; use \"fail\" or \"continue\"".into(),
                });
            }
            continue;
        }
        for &d in deps.get(i).into_iter().flatten() {
            let Some((target, target_def)) = defs.get(d) else {
                continue;
            };
            if !target_def.finally {
                continue;
            }
            let position = def.after.iter().position(|a| a == *target);
            out.push(Problem {
                message: DiagnosticKind::DependsOnFinally {
                    stage: (*id).clone(),
                    target: (*target).clone(),
                },
                pointer: match position {
                    Some(p) => format!("{}/after/{p}", stage()),
                    None => stage(),
                },
                key: position.is_none(),
                help: format!(
                    "make `{id}` a finally stage too (`finally = true`), or read `{target}` only from other finally stages"
                ),
            });
        }
    }
    out
}
