//! How a run record reads: the one-line summary a run ends with, the explain verdicts, the
//! text of `runs show` and its line in `runs`, and the JSON document of `run --format json`.

use std::collections::HashMap;

use serde_json::{Map, Value};

use super::record::{OutputLine, RunRecord, UsageTotals};
use super::RunStatus;
use crate::JSON_VERSION;

impl UsageTotals {
    /// One line of model usage: calls, tokens, latency, retries and cost (`runs show`).
    pub(crate) fn summary_line(&self) -> String {
        let mut line = format!(
            "model calls: {}  tokens in: {}  out: {}",
            self.model_calls, self.input_tokens, self.output_tokens
        );
        if self.cache_read_tokens > 0 || self.cache_write_tokens > 0 {
            line.push_str(&format!(
                "  cache read: {}  cache write: {}",
                self.cache_read_tokens, self.cache_write_tokens
            ));
        }
        line.push_str(&format!("  latency: {}ms", self.latency_ms));
        if self.retries > 0 {
            line.push_str(&format!("  retries: {}", self.retries));
            if self.throttled > 0 {
                line.push_str(&format!(" ({} rate-limited)", self.throttled));
            }
            line.push_str(&format!("  waited: {}ms", self.waited_ms));
        }
        if let Some(cost) = self.cost_usd {
            line.push_str(&format!("  cost: ${cost:.4}"));
        }
        if let Some(cost) = self.estimated_cost_usd {
            line.push_str(&format!("  recorded cost: ${cost:.4}"));
        }
        line
    }
}

impl RunStatus {
    /// How the run ended, as a finally stage reads `run.status`.
    pub fn finally_word(self) -> &'static str {
        match self {
            RunStatus::Completed | RunStatus::Running => "succeeded",
            RunStatus::Exited => "exited",
            RunStatus::Failed | RunStatus::Interrupted => "failed",
        }
    }
}

/// How many of the slowest stages the end of a run names.
const SLOWEST: usize = 3;

impl RunRecord {
    /// How the run ended, after `run <id> `: "completed in 0.12s", "exited early at `x`: ...",
    /// "failed: ...".
    pub fn summary(&self) -> String {
        let seconds = self.duration_ms as f64 / 1000.0;
        match self.status {
            RunStatus::Completed => format!("completed in {seconds:.2}s"),
            RunStatus::Exited => format!(
                "exited early{}: {}",
                self.exit
                    .as_ref()
                    .and_then(|e| e.stage.as_ref())
                    .map(|s| format!(" at `{s}`"))
                    .unwrap_or_default(),
                self.exit.as_ref().map_or("", |e| e.message.as_str())
            ),
            RunStatus::Failed => format!("failed: {}", self.error.as_deref().unwrap_or("")),
            RunStatus::Interrupted => "interrupted".to_string(),
            RunStatus::Running => "running".to_string(),
        }
    }

    /// What the end of a run says beside its summary: the stages by status
    /// (`stages: 4 succeeded, 1 exited, 3 not run`) and, when any took time, the slowest
    /// three (`slowest: scan 12.3s, draft 4.1s, review 310ms`); status words coloured when
    /// `color`.
    pub fn tally_lines(&self, color: bool) -> Vec<String> {
        use super::progress::{paint, Tone};
        use super::record::StageStatus;
        let exit_stage = self.exit.as_ref().and_then(|e| e.stage.as_deref());
        let tone = |id: &str, status: StageStatus| {
            Tone::of(
                status,
                status == StageStatus::Succeeded && exit_stage == Some(id),
            )
        };
        let order = [
            Tone::Succeeded,
            Tone::Exited,
            Tone::Cached,
            Tone::Skipped,
            Tone::Failed,
            Tone::Quiet,
        ];
        let mut counts = [0usize; 6];
        let mut running = 0usize;
        for (id, stage) in &self.stages {
            if stage.status == StageStatus::Running {
                running += 1;
                continue;
            }
            let t = tone(id, stage.status);
            if let Some(slot) = order.iter().position(|o| *o == t) {
                counts[slot] += 1;
            }
        }
        let words = [
            "succeeded",
            "exited",
            "cached",
            "skipped",
            "failed",
            "not run",
        ];
        let mut parts: Vec<String> = order
            .iter()
            .zip(words)
            .zip(counts)
            .filter(|(_, n)| *n > 0)
            .map(|((t, word), n)| paint(color, *t, &format!("{n} {word}")))
            .collect();
        if running > 0 {
            parts.push(format!("{running} running"));
        }
        let mut lines = Vec::new();
        if !parts.is_empty() {
            lines.push(format!("stages: {}", parts.join(", ")));
        }
        let mut timed: Vec<(&str, u64)> = self
            .stages
            .iter()
            .filter(|(_, s)| s.duration_ms > 0 && !s.assumed)
            .map(|(id, s)| (&**id, s.duration_ms))
            .collect();
        timed.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(b.0)));
        if !timed.is_empty() {
            let slowest: Vec<String> = timed
                .iter()
                .take(SLOWEST)
                .map(|(id, ms)| format!("{id} {}", super::human_duration(*ms)))
                .collect();
            lines.push(format!("slowest: {}", slowest.join(", ")));
        }
        lines
    }

    /// Each stage's explain verdict (`--explain`), `not reached (<status>)` for a stage that
    /// has none.
    pub fn verdicts(&self) -> Vec<(&str, String)> {
        self.stages
            .iter()
            .map(|(id, stage)| {
                let verdict = stage
                    .details()
                    .explain
                    .clone()
                    .unwrap_or_else(|| format!("not reached ({})", stage.status.as_str()));
                (&**id, verdict)
            })
            .collect()
    }

    /// The document of `run --format json`: version, run id, workflow, status, dry-run, exit,
    /// error, outputs, and with `explain` the verdicts.
    pub fn result_json(&self, explain: bool) -> Value {
        let mut doc = serde_json::json!({
            "version": JSON_VERSION,
            "run_id": self.run_id,
            "workflow": self.workflow,
            "status": self.status.as_str(),
            "dry_run": self.dry_run,
            "exit": self.exit,
            "error": self.error,
            "outputs": self.outputs,
        });
        if explain {
            doc["explain"] = self
                .verdicts()
                .into_iter()
                .map(|(id, verdict)| (id.to_string(), Value::String(verdict)))
                .collect::<Map<String, Value>>()
                .into();
        }
        doc
    }

    /// run.json as it is, with the version of the document in front (`runs show --format
    /// json`).
    pub fn versioned_json(&self) -> Value {
        let mut doc = Map::new();
        doc.insert("version".into(), JSON_VERSION.into());
        if let Ok(Value::Object(fields)) = serde_json::to_value(self) {
            doc.extend(fields);
        }
        Value::Object(doc)
    }

    /// A run's line in `runs --format json`.
    pub fn listing_json(&self) -> Value {
        serde_json::json!({
            "run_id": self.run_id,
            "workflow": self.workflow,
            "status": self.status.as_str(),
            "dry_run": self.dry_run,
            "started_at": self.started_at,
            "duration_ms": self.duration_ms,
            "exit": self.exit,
            "error": self.error,
        })
    }

    /// A run's line in `runs`: id, workflow, status, duration and the first line of how it
    /// ended.
    pub fn listing_line(&self, id: &str) -> String {
        // How it ended: the exit's message, the error, or the run's single text output (a
        // summary line such as context-update's), as read as written.
        let single_text = || match &self.outputs {
            Some(Value::Object(outputs)) if outputs.len() == 1 => outputs
                .values()
                .next()
                .and_then(Value::as_str)
                .map(str::to_string),
            _ => None,
        };
        let detail = match (&self.exit, &self.error) {
            (Some(exit), _) => exit.message.clone(),
            (_, Some(error)) => error.clone(),
            _ => single_text().unwrap_or_default(),
        };
        let status = match self.dry_run {
            true => format!("{} (dry-run)", self.status.as_str()),
            false => self.status.as_str().to_string(),
        };
        // A run still going has run for as long as it has been going.
        let duration_ms = match self.status {
            RunStatus::Running => chrono::DateTime::parse_from_rfc3339(&self.started_at)
                .ok()
                .and_then(|start| {
                    u64::try_from((chrono::Utc::now() - start.to_utc()).num_milliseconds()).ok()
                })
                .unwrap_or(self.duration_ms),
            _ => self.duration_ms,
        };
        format!(
            "{id}  {:<16} {:<11} {:>8}ms  {}",
            self.workflow,
            status,
            duration_ms,
            first_line(&detail)
        )
    }

    /// What stdout gets at the end of a run in text or events form: in text form a single
    /// string output as its text (nothing when it is blank: a run that ended early saying why
    /// on stderr), any other outputs as JSON; with events the `outputs` event.
    pub fn outputs_text(&self, events: bool) -> Option<String> {
        let Some(Value::Object(outputs)) = &self.outputs else {
            return None;
        };
        let pretty = |value| serde_json::to_string_pretty(value).unwrap_or_default();
        if events {
            return Some(serde_json::json!({ "event": "outputs", "outputs": outputs }).to_string());
        }
        match outputs.values().next() {
            Some(Value::String(text)) if outputs.len() == 1 => {
                Some(text.trim_end().to_string()).filter(|_| !text.trim().is_empty())
            }
            Some(_) => Some(pretty(outputs)),
            None => None,
        }
    }

    /// `runs show` as text: the run, how it ended, a line per stage with what it said on
    /// stderr and the start of its output (from `outputs`, at most [`SHOWN_OUTPUT_LINES`]
    /// lines of [`SHOWN_OUTPUT_BYTES`]), then model usage. Each line ends with a newline.
    pub(crate) fn to_text(&self, outputs: &HashMap<String, OutputLine>) -> String {
        let mut out = format!(
            "run {} ({}) {}{}\n",
            self.run_id,
            self.workflow,
            self.status.as_str(),
            if self.dry_run { " (dry-run)" } else { "" }
        );
        out.push_str(&format!(
            "started {}  duration {}ms\n",
            self.started_at, self.duration_ms
        ));
        if let Some(exit) = &self.exit {
            out.push_str(&format!(
                "exit: {}{}\n",
                exit.stage
                    .as_ref()
                    .map(|s| format!("{s}: "))
                    .unwrap_or_default(),
                exit.message
            ));
        }
        if let Some(error) = &self.error {
            out.push_str(&format!("error: {error}\n"));
        }
        for (id, s) in &self.stages {
            let extra = s
                .details()
                .error
                .clone()
                .or(s.details().reason.clone())
                .unwrap_or_default();
            out.push_str(&format!(
                "  {:<24} {:<9} {:>7}ms  {}\n",
                id,
                s.status.as_str(),
                s.duration_ms,
                first_line(&extra)
            ));
            // What a stage that succeeded said on stderr (warnings, progress).
            for line in s.details().stderr.as_deref().unwrap_or("").lines() {
                out.push_str(&format!("      stderr: {line}\n"));
            }
            if let Some(line) = outputs.get(&**id).filter(|_| s.status.has_output()) {
                out.push_str(&self.output_lines(id, &line.output));
            }
        }
        if self.usage.model_calls > 0 {
            out.push_str(&self.usage.summary_line());
            out.push('\n');
        }
        out
    }
}

/// `runs show` prints at most this many lines of a stage's output ...
pub(crate) const SHOWN_OUTPUT_LINES: usize = 20;
/// ... and at most this many bytes.
pub(crate) const SHOWN_OUTPUT_BYTES: usize = 2048;

impl RunRecord {
    /// A stage's output under its line of `runs show`: text as it is, other values as JSON,
    /// cut with a note that says how to print it whole.
    fn output_lines(&self, id: &str, output: &Value) -> String {
        let text = match output {
            Value::String(text) => text.clone(),
            Value::Null => return String::new(),
            other => serde_json::to_string_pretty(other).unwrap_or_default(),
        };
        let mut out = String::new();
        let mut shown = 0;
        let mut lines = text.lines();
        for line in lines.by_ref().take(SHOWN_OUTPUT_LINES) {
            let room = SHOWN_OUTPUT_BYTES.saturating_sub(shown);
            if room == 0 {
                break;
            }
            let mut end = line.len().min(room);
            while !line.is_char_boundary(end) {
                end -= 1;
            }
            out.push_str(&format!("      output: {}\n", &line[..end]));
            shown += end + 1;
        }
        let left = text.len().saturating_sub(shown);
        if left > 0 && shown < text.len() {
            out.push_str(&format!(
                "      output: ... {left} more bytes (`stagegraph runs show {} --stage {id}` prints it whole)\n",
                self.run_id
            ));
        }
        out
    }
}

fn first_line(text: &str) -> &str {
    text.lines().next().unwrap_or("")
}

#[cfg(test)]
mod tests {
    use crate::check::{RUN_STATUSES, STAGE_STATUSES};
    use crate::run::record::{RunStatus, StageStatus};

    /// The statuses check compares quoted strings with are the ones a run gives.
    #[test]
    fn the_statuses_check_knows_are_the_ones_the_run_gives() {
        for status in STAGE_STATUSES {
            let parsed: StageStatus =
                serde_json::from_value(serde_json::json!(status)).expect("a stage status");
            assert_eq!(parsed.as_str(), *status);
        }
        for status in [
            RunStatus::Running,
            RunStatus::Completed,
            RunStatus::Exited,
            RunStatus::Failed,
            RunStatus::Interrupted,
        ] {
            // Ordinary stages read `running`; finally stages and `[outputs]` how it ended.
            assert!(RUN_STATUSES.contains(&status.finally_word()));
        }
        assert_eq!(RUN_STATUSES[0], RunStatus::Running.as_str());
    }
}
