//! `run.json` written by hand, byte for byte as serde_json writes a [`RunRecord`].
//!
//! A record of 10,000 stages is about 5 MB of JSON, rewritten while the run goes on and once at
//! its end, which the run waits for. Written through serde, it cost either that time at every
//! rewrite or, as the recorder did before, each finished stage's JSON kept in memory to be
//! copied (5 MB held to the end, the largest item of a no-op's heap at its peak). Written here,
//! a stage's members are strings copied whole ([`crate::floor::json`]) and nothing is kept: the
//! few members that are neither strings nor numbers (usage, model calls, items, a
//! sub-workflow's statuses, the inputs and outputs) still go through serde_json. The tests
//! compare both writers on records that set every member.
//!
//! The stages of a large record are written on two threads, a run of stages each, and
//! appended in order: the run waits for its last rewrite, which at 10,000 stages took 11.6 ms
//! of a no-op's tail on one thread (a plain release build) and takes 6.0 ms on two.

use std::io::Write;

use super::record::{FingerprintParts, RunRecord, StageRecord};
use crate::floor::json::{self, Object};

impl RunRecord {
    /// Write the record as `run.json` holds it (compact, as serde_json writes it), every
    /// registered secret redacted (see [`crate::floor::secrets`]).
    pub(crate) fn write_json(&self, out: &mut dyn Write) -> std::io::Result<()> {
        json::write_document(out, |buffer, drain| self.write_chunked(buffer, drain))
    }

    /// The record into `buffer`, `drain` called after each stage (it may empty the buffer).
    fn write_chunked(
        &self,
        buffer: &mut Vec<u8>,
        drain: &mut json::Drain<'_>,
    ) -> std::io::Result<()> {
        let failed = |()| std::io::Error::other("a value of the record cannot be written as JSON");
        let mut record = Object::new(buffer);
        record.string("run_id", &self.run_id);
        record.string("workflow", &self.workflow);
        record.string("status", self.status.as_str());
        if let Some(exit) = &self.exit {
            json::serde(record.key("exit"), exit).map_err(failed)?;
        }
        if let Some(error) = &self.error {
            record.string("error", error);
        }
        json::serde(record.key("inputs"), &self.inputs).map_err(failed)?;
        record.string("started_at", &self.started_at);
        if let Some(finished_at) = &self.finished_at {
            record.string("finished_at", finished_at);
        }
        record.u64("duration_ms", self.duration_ms);
        record.bool("dry_run", self.dry_run);
        if let Some(resumed_from) = &self.resumed_from {
            record.string("resumed_from", resumed_from);
        }
        record.string("cwd", &self.cwd);
        json::serde(record.key("files"), &self.files).map_err(failed)?;
        record.key("stages").push(b'{');
        let stages = self.stages.as_slice();
        if stages.len() >= IN_PARALLEL_FROM && rayon::current_num_threads() > 1 {
            // Two runs of stages at a time, one a thread, appended in order: the final
            // rewrite of a large record is what the run waits for last.
            let run = |start: usize| {
                let end = (start + RUN_OF_STAGES).min(stages.len());
                (start, stages.get_range(start..end).unwrap_or_default())
            };
            let mut pair = (Vec::new(), Vec::new());
            for start in (0..stages.len()).step_by(2 * RUN_OF_STAGES) {
                let (first, second) = (run(start), run(start + RUN_OF_STAGES));
                let (left, right) = (&mut pair.0, &mut pair.1);
                let (a, b) = rayon::join(
                    || write_stages(left, first.1, first.0),
                    || write_stages(right, second.1, second.0),
                );
                a.and(b).map_err(failed)?;
                for written in [&mut pair.0, &mut pair.1] {
                    record.raw().extend_from_slice(written);
                    written.clear();
                    drain(record.raw())?;
                }
            }
        } else {
            write_stages(record.raw(), stages, 0).map_err(failed)?;
        }
        record.raw().push(b'}');
        if let Some(outputs) = &self.outputs {
            json::serde(record.key("outputs"), outputs).map_err(failed)?;
        }
        if !self.output_files.is_empty() {
            json::serde(record.key("output_files"), &self.output_files).map_err(failed)?;
        }
        json::serde(record.key("usage"), &self.usage).map_err(failed)?;
        if let Some(holder) = &self.holder {
            json::serde(record.key("holder"), holder).map_err(failed)?;
        }
        record.end();
        Ok(())
    }
}

/// Records of this many stages or more have their stages written on two threads.
const IN_PARALLEL_FROM: usize = 2048;

/// The stages a thread writes at a time (about 120 kB of JSON for stages reused from the
/// cache).
const RUN_OF_STAGES: usize = 256;

/// `stages` as members of the record's `stages` object, the first at position `start` of it.
fn write_stages(
    out: &mut Vec<u8>,
    stages: &indexmap::map::Slice<std::sync::Arc<str>, StageRecord>,
    start: usize,
) -> Result<(), ()> {
    for (offset, (id, stage)) in stages.iter().enumerate() {
        if start + offset > 0 {
            out.push(b',');
        }
        json::string(out, id);
        out.push(b':');
        stage.write_json(out)?;
    }
    Ok(())
}

impl StageRecord {
    /// The stage as `run.json` holds it.
    fn write_json(&self, out: &mut Vec<u8>) -> Result<(), ()> {
        let details = self.details();
        let mut stage = Object::new(out);
        stage.string("status", self.status.as_str());
        if let Some(started_at) = &self.started_at {
            stage.string("started_at", started_at);
        }
        stage.u64("duration_ms", self.duration_ms);
        if let Some(fingerprint) = &self.fingerprint {
            fingerprint.write_json(stage.key("fingerprint"));
        }
        if let Some(parts) = &self.fingerprint_parts {
            parts.write_json(stage.key("fingerprint_parts"));
        }
        if let Some(sha256) = &self.output_sha256 {
            sha256.write_json(stage.key("output_sha256"));
        }
        if let Some(error) = &details.error {
            stage.string("error", error);
        }
        if let Some(reason) = &details.reason {
            stage.string("reason", reason);
        }
        if self.attempts != 0 {
            stage.u64("attempts", u64::from(self.attempts));
        }
        if let Some(items) = details.items {
            stage.u64("items", items as u64);
        }
        if details.failed_items != 0 {
            stage.u64("failed_items", details.failed_items as u64);
        }
        if details.reused_items != 0 {
            stage.u64("reused_items", details.reused_items as u64);
        }
        if !details.item_runs.is_empty() {
            json::serde(stage.key("item_runs"), &details.item_runs)?;
        }
        if let Some(sub_run) = &details.sub_run {
            json::serde(stage.key("sub_run"), sub_run)?;
        }
        if let Some(reused_from) = &self.reused_from {
            stage.string("reused_from", reused_from);
        }
        if !details.model_calls.is_empty() {
            json::serde(stage.key("model_calls"), &details.model_calls)?;
        }
        if let Some(usage) = &details.usage {
            json::serde(stage.key("usage"), usage)?;
        }
        if self.output_cut {
            stage.bool("output_cut", true);
        }
        if let Some(explain) = &details.explain {
            stage.string("explain", explain);
        }
        if self.assumed {
            stage.bool("assumed", true);
        }
        if let Some(stderr) = &details.stderr {
            stage.string("stderr", stderr);
        }
        stage.end();
        Ok(())
    }
}

impl FingerprintParts {
    fn write_json(&self, out: &mut Vec<u8>) {
        let mut parts = Object::new(out);
        parts.string("version", &self.version);
        self.definition.write_json(parts.key("definition"));
        self.action.write_json(parts.key("action"));
        for (key, value) in [
            ("schema", self.schema()),
            ("model", self.model()),
            ("sub_workflow", self.sub_workflow()),
        ] {
            if let Some(value) = value {
                parts.string(key, value);
            }
        }
        parts.end();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A record setting every member the format has, with strings to escape and not, beside
    /// the plainest one: written here as serde_json writes it.
    #[test]
    fn the_record_is_written_as_serde_json_writes_it() {
        let full: RunRecord = serde_json::from_value(json!({
            "run_id": "20261206T000000.000Z-ab12", "workflow": "w \"quoted\"",
            "status": "exited",
            "exit": { "stage": "gate", "message": "nothing to do\n" },
            "error": "it\\failed", "inputs": { "word": "stage", "n": 3, "deep": { "a": [1, null] } },
            "started_at": "2026-12-06T00:00:00.000Z", "finished_at": "2026-12-06T00:00:01.000Z",
            "duration_ms": 1000, "dry_run": true, "resumed_from": "r0", "cwd": "/tmp/ü",
            "files": [{ "path": "w.toml", "sha256": "abc" }],
            "stages": {
                "all": {
                    "status": "succeeded", "started_at": "2026-12-06T00:00:00.100Z",
                    "duration_ms": 12, "fingerprint": "f",
                    "fingerprint_parts": { "version": "v", "definition": "d", "action": "a",
                                           "schema": "s", "model": "m", "sub_workflow": "sw" },
                    "output_sha256": "o", "error": "e\t", "reason": "r", "attempts": 2,
                    "items": 3, "failed_items": 1, "reused_items": 1,
                    "item_runs": [{ "index": 0, "start_ms": 1, "duration_ms": 2,
                                    "status": "succeeded", "attempts": 1, "model_calls": 1 }],
                    "sub_run": { "status": "completed", "exit_stage": "x",
                                 "stages": { "a": "cached", "b/c": "skipped" } },
                    "reused_from": "cache",
                    "model_calls": [{ "model": "claude", "attempt": 1, "latency_ms": 5,
                                      "cost_usd": 0.25, "retries": 1 }],
                    "usage": { "model_calls": 1, "input_tokens": 10, "output_tokens": 5,
                               "latency_ms": 5, "cost_usd": 0.25 },
                    "output_cut": true, "explain": "ran: new", "assumed": true,
                    "stderr": "warn\u{1}"
                },
                "plain": { "status": "not_run", "duration_ms": 0 },
                "parts \"odd\"": {
                    "status": "cached", "duration_ms": 0,
                    "fingerprint_parts": { "version": "v", "definition": "d", "action": "a",
                                           "model": "m" }
                }
            },
            "outputs": { "answer": "42", "big": null },
            "output_files": { "big": { "path": "artifacts/x.json", "size": 9, "sha256": "h" } },
            "usage": { "model_calls": 1, "input_tokens": 10, "output_tokens": 5, "latency_ms": 5 },
            "holder": { "pid": 7, "started": 9, "host": "h" }
        }))
        .unwrap();
        let plain: RunRecord = serde_json::from_value(json!({
            "run_id": "r", "workflow": "w", "status": "running", "inputs": {},
            "started_at": "t", "cwd": ".", "files": [], "stages": {}
        }))
        .unwrap();
        for record in [full, plain] {
            let mut written = Vec::new();
            record.write_json(&mut written).unwrap();
            assert_eq!(
                String::from_utf8(written).unwrap(),
                serde_json::to_string(&record).unwrap()
            );
        }
    }

    /// A record large enough to be written on two threads, its last pair of runs of stages
    /// short of full (the second one empty): the same bytes, in the order of the stages.
    #[test]
    fn a_large_record_written_on_two_threads_is_written_as_serde_json_writes_it() {
        let count = 4 * 2 * RUN_OF_STAGES + RUN_OF_STAGES / 3;
        assert!(count >= IN_PARALLEL_FROM);
        let stages: serde_json::Map<String, serde_json::Value> = (0..count)
            .map(|i| {
                let stage = match i % 3 {
                    0 => json!({ "status": "cached", "duration_ms": 0, "fingerprint": format!("f{i}"),
                                 "output_sha256": "o", "reused_from": "cache" }),
                    1 => json!({ "status": "failed", "duration_ms": i, "error": format!("e \"{i}\"") }),
                    _ => json!({ "status": "not_run", "duration_ms": 0 }),
                };
                (format!("s{i}"), stage)
            })
            .collect();
        let record: RunRecord = serde_json::from_value(json!({
            "run_id": "r", "workflow": "w", "status": "completed", "inputs": {},
            "started_at": "t", "cwd": ".", "files": [], "stages": stages
        }))
        .unwrap();
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .unwrap();
        let mut written = Vec::new();
        pool.install(|| record.write_json(&mut written)).unwrap();
        assert_eq!(
            String::from_utf8(written).unwrap(),
            serde_json::to_string(&record).unwrap()
        );
    }
}
