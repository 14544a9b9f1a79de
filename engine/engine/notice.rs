//! Telling a hook's host that a run failed.
//!
//! A hook must exit 0 and its runs are watched by nobody, so a failure would sit in a run record
//! nobody opens. A workflow with `[workflow] hook = "claude-code"` that runs as a Claude Code
//! hook (its inputs carry the payload's `hook_event_name`) tells the session instead: the hook's
//! JSON output, `{"systemMessage": ...}` on stdout, which Claude Code shows as one line, naming
//! what failed and the run to look at. The newest failed run is told once, and the same failure
//! (the same workflow and error, whatever run it was) at most once an hour, so a broken setup
//! does not nag. A run started with `--detach` ends after its host stopped listening: its failure
//! is told at the next fire of the hook.
//!
//! What was told is kept in `notices.json` in the workflow's state folder.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::{Engine, StateDir};
use crate::check::Workflow;
use crate::format::HookHost;
use crate::run::{self, record, RunStatus};

/// How long the same failure stays untold after it was told.
const QUIET_FOR_SECONDS: i64 = 3600;

/// The most failures remembered; the oldest are forgotten first.
const REMEMBERED: usize = 32;

#[derive(Default, Serialize, Deserialize)]
struct Notices {
    /// The newest run that was told.
    #[serde(default)]
    last_run: Option<String>,
    /// Each failure told, by its key, with when (seconds since the epoch).
    #[serde(default)]
    told: BTreeMap<String, i64>,
}

impl Engine {
    /// The line to show the hook's host, if a run of `workflow` failed and was not told yet:
    /// the hook's JSON output, ready for stdout. `None` outside a hook or when there is nothing
    /// to tell. Marks what it returns as told.
    pub fn failure_notice(
        &self,
        workflow: &Workflow,
        inputs: &Map<String, Value>,
        state: &StateDir,
    ) -> Option<String> {
        if !workflow.runs_as_hook(inputs) {
            return None;
        }
        let dir =
            run::state_dir_for(workflow, inputs, &self.cwd, &state.dir, state.explicit).ok()?;
        // The clock templates read (`STAGEGRAPH_NOW` pins it), so the hour is the runs' own.
        let now = crate::template::functions::now()
            .unwrap_or_else(|_| chrono::Utc::now())
            .timestamp();
        notice_in(&dir, workflow.name(), now)
    }
}

impl Workflow {
    /// Whether a run with these inputs is one of a hook whose host reads its stdout: the
    /// workflow is a Claude Code hook and the inputs are a hook payload's.
    pub fn runs_as_hook(&self, inputs: &Map<String, Value>) -> bool {
        self.hook() == Some(HookHost::ClaudeCode)
            && inputs
                .get("hook_event_name")
                .and_then(Value::as_str)
                .is_some_and(|event| !event.is_empty())
    }
}

fn notice_in(dir: &Path, workflow: &str, now: i64) -> Option<String> {
    let latest = record::latest_real_run(dir, workflow)?;
    if latest.status != RunStatus::Failed {
        return None;
    }
    let path = dir.join("notices.json");
    let mut notices: Notices = std::fs::read(&path)
        .ok()
        .and_then(|bytes| serde_json::from_slice(&bytes).ok())
        .unwrap_or_default();
    if notices.last_run.as_deref() == Some(latest.run_id.as_str()) {
        return None;
    }
    let error = latest.error.as_deref().unwrap_or("the run failed");
    let key = failure_key(workflow, error);
    notices.last_run = Some(latest.run_id.clone());
    let quiet = notices
        .told
        .get(&key)
        .is_some_and(|told| now - told < QUIET_FOR_SECONDS);
    if !quiet {
        notices.told.insert(key, now);
    }
    while notices.told.len() > REMEMBERED {
        let oldest = notices
            .told
            .iter()
            .min_by_key(|(_, at)| **at)
            .map(|(key, _)| key.clone());
        match oldest {
            Some(key) => notices.told.remove(&key),
            None => break,
        };
    }
    // A notice that cannot be remembered is not told: better silent than told every turn.
    let bytes = serde_json::to_vec_pretty(&notices).ok()?;
    crate::floor::atomic::write_atomic(&path, &bytes).ok()?;
    if quiet {
        return None;
    }
    let message = format!(
        "stagegraph {workflow} failed: {} (stagegraph runs show {})",
        crate::floor::secrets::excerpt(first_line(error), 240),
        latest.run_id
    );
    Some(serde_json::json!({ "systemMessage": message }).to_string())
}

/// The same failure, whatever run had it: the workflow and the error's first line with its
/// numbers left out (ports, line numbers, durations and run ids vary from run to run).
fn failure_key(workflow: &str, error: &str) -> String {
    let shape: String = first_line(error)
        .chars()
        .filter(|c| !c.is_ascii_digit())
        .collect();
    format!("{workflow}: {shape}")
}

fn first_line(text: &str) -> &str {
    text.lines().next().unwrap_or_default().trim()
}

#[cfg(test)]
mod tests {
    use super::failure_key;

    #[test]
    fn a_failure_is_the_same_whatever_numbers_it_carries() {
        assert_eq!(
            failure_key("w", "model `haiku`: HTTP 401 after 1203ms\nmore"),
            failure_key("w", "model `haiku`: HTTP 402 after 88ms")
        );
        assert_ne!(
            failure_key("w", "model `haiku` failed"),
            failure_key("w", "model `sonnet` failed")
        );
    }
}
