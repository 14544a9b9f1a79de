//! `runs diff A B`: what changed between two runs. Their inputs, the workflow files they ran
//! (by hash), and per stage the status, the fingerprint with the part that changed (as the
//! cache explains a miss: the definition, the rendered action, the schema, the model, or the
//! output of a stage it depends on), the output (a unified diff for text, path by path for
//! JSON), the duration, tokens and cost. Stages in one run only are named as such.
//!
//! The diff reads two records and nothing else; in text form a stage whose fingerprint,
//! status and output are the same in both runs is counted, not listed.

use std::collections::HashMap;

use serde::Serialize;
use serde_json::{Map, Value};

use super::record::{OutputLine, RunRecord, StageRecord};

/// Output diffs longer than this many lines are cut (with a note).
const DIFF_LINES: usize = 200;

/// What differs between two runs.
#[derive(Debug, Serialize)]
pub struct RunDiff {
    version: u32,
    a: RunSide,
    b: RunSide,
    inputs: InputsDiff,
    /// Workflow files whose content differs, or that one run read and the other did not.
    files: Vec<FileChange>,
    /// Stages that differ in anything but their duration, in the order of run B.
    stages: Vec<StageDiff>,
    /// Stages whose status, fingerprint and output are the same in both runs.
    unchanged: usize,
}

#[derive(Debug, Serialize)]
struct RunSide {
    run_id: String,
    workflow: String,
    status: &'static str,
    duration_ms: u64,
    input_tokens: u64,
    output_tokens: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    cost_usd: Option<f64>,
}

#[derive(Debug, Default, Serialize)]
struct InputsDiff {
    added: Map<String, Value>,
    removed: Map<String, Value>,
    /// Name -> `[a, b]`.
    changed: Map<String, Value>,
}

#[derive(Debug, Serialize)]
struct FileChange {
    path: String,
    /// `changed`, `added` (only B read it) or `removed` (only A did).
    change: &'static str,
}

#[derive(Debug, Serialize)]
struct StageDiff {
    id: String,
    /// `[a, b]`; `null` for a run that has no such stage.
    status: [Option<&'static str>; 2],
    duration_ms: [Option<u64>; 2],
    #[serde(skip_serializing_if = "Option::is_none")]
    tokens: Option<[u64; 2]>,
    fingerprint_changed: bool,
    /// Why the fingerprint changed: the parts that differ, then `output of <stage>` for each
    /// stage it depends on whose output changed.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    causes: Vec<String>,
    output_changed: bool,
    /// A unified diff when both outputs are text.
    #[serde(skip_serializing_if = "Option::is_none")]
    output_diff: Option<String>,
    /// When both outputs are JSON values: each path that differs, with its two values (`null`
    /// for a side that lacks it).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    output_paths: Vec<PathChange>,
}

#[derive(Debug, Serialize)]
struct PathChange {
    path: String,
    a: Option<Value>,
    b: Option<Value>,
}

/// One run as the diff reads it: its record, outputs and the dependencies of its stages.
pub(crate) struct DiffSide<'a> {
    pub record: &'a RunRecord,
    pub outputs: &'a HashMap<String, OutputLine>,
    /// Stage -> the stages it runs after (from `plan.json`; empty for older records).
    pub after: &'a HashMap<String, Vec<String>>,
}

/// The dependencies of each stage from a run's `plan.json`.
pub(crate) fn after_of(plan: Option<&Value>) -> HashMap<String, Vec<String>> {
    let stages = plan.and_then(|p| p.get("stages")).and_then(Value::as_array);
    stages
        .into_iter()
        .flatten()
        .filter_map(|stage| {
            let id = stage.get("id")?.as_str()?.to_string();
            let after = stage
                .get("after")?
                .as_array()?
                .iter()
                .filter_map(|d| Some(d.as_str()?.to_string()))
                .collect();
            Some((id, after))
        })
        .collect()
}

fn side(record: &RunRecord) -> RunSide {
    RunSide {
        run_id: record.run_id.clone(),
        workflow: record.workflow.clone(),
        status: record.status.as_str(),
        duration_ms: record.duration_ms,
        input_tokens: record.usage.input_tokens,
        output_tokens: record.usage.output_tokens,
        cost_usd: record.usage.cost_usd.or(record.usage.estimated_cost_usd),
    }
}

impl RunDiff {
    pub(crate) fn new(a: &DiffSide, b: &DiffSide) -> RunDiff {
        let mut inputs = InputsDiff::default();
        for (name, value) in &a.record.inputs {
            match b.record.inputs.get(name) {
                None => {
                    inputs.removed.insert(name.clone(), value.clone());
                }
                Some(other) if other != value => {
                    inputs.changed.insert(
                        name.clone(),
                        Value::Array(vec![value.clone(), other.clone()]),
                    );
                }
                Some(_) => {}
            }
        }
        for (name, value) in &b.record.inputs {
            if !a.record.inputs.contains_key(name) {
                inputs.added.insert(name.clone(), value.clone());
            }
        }
        let hashes = |r: &RunRecord| -> HashMap<String, String> {
            r.files
                .iter()
                .map(|f| (f.path.clone(), f.sha256.clone()))
                .collect()
        };
        let (files_a, files_b) = (hashes(a.record), hashes(b.record));
        let mut files = Vec::new();
        for f in &a.record.files {
            match files_b.get(&f.path) {
                None => files.push(FileChange {
                    path: f.path.clone(),
                    change: "removed",
                }),
                Some(hash) if *hash != f.sha256 => files.push(FileChange {
                    path: f.path.clone(),
                    change: "changed",
                }),
                Some(_) => {}
            }
        }
        for f in &b.record.files {
            if !files_a.contains_key(&f.path) {
                files.push(FileChange {
                    path: f.path.clone(),
                    change: "added",
                });
            }
        }

        let mut ids: Vec<&str> = b.record.stages.keys().map(|id| &**id).collect();
        ids.extend(
            a.record
                .stages
                .keys()
                .map(|id| &**id)
                .filter(|id| !b.record.stages.contains_key(*id)),
        );
        let mut stages = Vec::new();
        let mut unchanged = 0;
        for id in ids {
            let (sa, sb) = (a.record.stages.get(id), b.record.stages.get(id));
            let diff = stage_diff(id, sa, sb, a, b);
            let same = sa.map(|s| s.status) == sb.map(|s| s.status)
                && !diff.fingerprint_changed
                && !diff.output_changed;
            if same {
                unchanged += 1;
            } else {
                stages.push(diff);
            }
        }
        RunDiff {
            version: crate::JSON_VERSION,
            a: side(a.record),
            b: side(b.record),
            inputs,
            files,
            stages,
            unchanged,
        }
    }

    /// The diff as JSON (`runs diff --format json`).
    pub fn to_json(&self) -> Value {
        serde_json::to_value(self).unwrap_or_default()
    }

    /// The diff as text: the two runs, the inputs and files that changed, then each stage that
    /// differs with the cause and its output's diff.
    pub fn to_text(&self) -> String {
        let mut out = String::new();
        let run = |s: &RunSide| {
            let mut line = format!(
                "{} ({}) {} in {}ms, tokens {} in / {} out",
                s.run_id, s.workflow, s.status, s.duration_ms, s.input_tokens, s.output_tokens
            );
            if let Some(cost) = s.cost_usd {
                line.push_str(&format!(", ${cost:.4}"));
            }
            line
        };
        out.push_str(&format!("a: {}\nb: {}\n", run(&self.a), run(&self.b)));
        let inputs = &self.inputs;
        if inputs.added.is_empty() && inputs.removed.is_empty() && inputs.changed.is_empty() {
            out.push_str("inputs: the same\n");
        } else {
            out.push_str("inputs:\n");
            for (name, pair) in &inputs.changed {
                out.push_str(&format!(
                    "  changed {name}: {} -> {}\n",
                    short_json(&pair[0]),
                    short_json(&pair[1])
                ));
            }
            for (name, value) in &inputs.added {
                out.push_str(&format!("  added {name}: {}\n", short_json(value)));
            }
            for (name, value) in &inputs.removed {
                out.push_str(&format!("  removed {name}: {}\n", short_json(value)));
            }
        }
        if self.files.is_empty() {
            out.push_str("workflow files: the same\n");
        } else {
            out.push_str("workflow files:\n");
            for f in &self.files {
                out.push_str(&format!("  {} {}\n", f.change, f.path));
            }
        }
        for stage in &self.stages {
            let word = |s: Option<&str>| s.unwrap_or("(absent)").to_string();
            let mut line = format!("stage {}: ", stage.id);
            if stage.status[0] == stage.status[1] {
                line.push_str(&word(stage.status[0]));
            } else {
                line.push_str(&format!(
                    "{} -> {}",
                    word(stage.status[0]),
                    word(stage.status[1])
                ));
            }
            if let [Some(da), Some(db)] = stage.duration_ms {
                line.push_str(&format!(", {da}ms -> {db}ms"));
            }
            if let Some([ta, tb]) = stage.tokens {
                line.push_str(&format!(", tokens {ta} -> {tb}"));
            }
            out.push_str(&line);
            out.push('\n');
            if stage.fingerprint_changed {
                let causes = if stage.causes.is_empty() {
                    "(no part recorded differs)".to_string()
                } else {
                    stage.causes.join(", ")
                };
                out.push_str(&format!("  fingerprint changed: {causes}\n"));
            }
            if let Some(diff) = &stage.output_diff {
                out.push_str("  output:\n");
                for line in diff.lines() {
                    out.push_str(&format!("    {line}\n"));
                }
            }
            for change in &stage.output_paths {
                let show =
                    |v: &Option<Value>| v.as_ref().map_or("(absent)".to_string(), short_json);
                out.push_str(&format!(
                    "  output {}: {} -> {}\n",
                    if change.path.is_empty() {
                        "/"
                    } else {
                        &change.path
                    },
                    show(&change.a),
                    show(&change.b)
                ));
            }
        }
        out.push_str(&format!(
            "{} stage(s) differ, {} the same\n",
            self.stages.len(),
            self.unchanged
        ));
        out
    }
}

fn stage_diff(
    id: &str,
    sa: Option<&StageRecord>,
    sb: Option<&StageRecord>,
    a: &DiffSide,
    b: &DiffSide,
) -> StageDiff {
    let fingerprint_changed = match (sa, sb) {
        (Some(x), Some(y)) => x.fingerprint != y.fingerprint,
        _ => true,
    };
    let mut causes = Vec::new();
    if let (Some(x), Some(y)) = (sa, sb) {
        if fingerprint_changed {
            if let (Some(pa), Some(pb)) = (&x.fingerprint_parts, &y.fingerprint_parts) {
                let parts = [
                    ("engine's cache version", pa.version == pb.version),
                    ("definition", pa.definition == pb.definition),
                    ("rendered action", pa.action == pb.action),
                    ("output schema", pa.schema() == pb.schema()),
                    ("model", pa.model() == pb.model()),
                    ("sub-workflow", pa.sub_workflow() == pb.sub_workflow()),
                ];
                causes.extend(
                    parts
                        .iter()
                        .filter(|(_, same)| !same)
                        .map(|(name, _)| (*name).to_string()),
                );
            }
            let after = b.after.get(id).or_else(|| a.after.get(id));
            for dep in after.into_iter().flatten() {
                let hash = |side: &DiffSide| {
                    side.record
                        .stages
                        .get(dep.as_str())
                        .map(|s| (s.output_sha256.clone(), s.status))
                };
                if hash(a) != hash(b) {
                    causes.push(format!("output of `{dep}`"));
                }
            }
            if x.fingerprint.is_none() || y.fingerprint.is_none() {
                causes.push("not fingerprinted in one run (it did not run)".into());
            }
        }
    }
    let (oa, ob) = (
        a.outputs.get(id).map(|line| &line.output),
        b.outputs.get(id).map(|line| &line.output),
    );
    let output_changed = oa != ob;
    let mut output_diff = None;
    let mut output_paths = Vec::new();
    if output_changed {
        match (oa, ob) {
            (Some(Value::String(ta)), Some(Value::String(tb))) => {
                output_diff = Some(text_diff(ta, tb, &a.record.run_id, &b.record.run_id));
            }
            (Some(va), Some(vb)) => json_paths("", Some(va), Some(vb), &mut output_paths),
            (va, vb) => output_paths.push(PathChange {
                path: String::new(),
                a: va.cloned(),
                b: vb.cloned(),
            }),
        }
    }
    let tokens = |s: Option<&StageRecord>| {
        s.and_then(|s| s.details().usage.as_ref())
            .map_or(0, |u| u.input_tokens + u.output_tokens)
    };
    let (ta, tb) = (tokens(sa), tokens(sb));
    StageDiff {
        id: id.to_string(),
        status: [sa.map(|s| s.status.as_str()), sb.map(|s| s.status.as_str())],
        duration_ms: [sa.map(|s| s.duration_ms), sb.map(|s| s.duration_ms)],
        tokens: (ta > 0 || tb > 0).then_some([ta, tb]),
        fingerprint_changed,
        causes,
        output_changed,
        output_diff,
        output_paths,
    }
}

/// A unified diff of two texts, cut at [`DIFF_LINES`] lines.
fn text_diff(a: &str, b: &str, name_a: &str, name_b: &str) -> String {
    let diff = similar::TextDiff::from_lines(a, b)
        .unified_diff()
        .header(name_a, name_b)
        .to_string();
    let lines: Vec<&str> = diff.lines().collect();
    if lines.len() <= DIFF_LINES {
        return diff;
    }
    let mut cut = lines[..DIFF_LINES].join("\n");
    cut.push_str(&format!(
        "\n... {} more line(s) of diff\n",
        lines.len() - DIFF_LINES
    ));
    cut
}

/// Each JSON pointer at which `a` and `b` differ: objects key by key, arrays index by index,
/// anything else as a whole.
fn json_paths(path: &str, a: Option<&Value>, b: Option<&Value>, out: &mut Vec<PathChange>) {
    match (a, b) {
        (Some(Value::Object(x)), Some(Value::Object(y))) => {
            for (key, value) in x {
                json_paths(&pointer(path, key), Some(value), y.get(key), out);
            }
            for (key, value) in y {
                if !x.contains_key(key) {
                    json_paths(&pointer(path, key), None, Some(value), out);
                }
            }
        }
        (Some(Value::Array(x)), Some(Value::Array(y))) => {
            for i in 0..x.len().max(y.len()) {
                json_paths(&pointer(path, &i.to_string()), x.get(i), y.get(i), out);
            }
        }
        _ if a == b => {}
        _ => out.push(PathChange {
            path: path.to_string(),
            a: a.cloned(),
            b: b.cloned(),
        }),
    }
}

fn pointer(path: &str, key: &str) -> String {
    format!("{path}/{}", key.replace('~', "~0").replace('/', "~1"))
}

/// A value as compact JSON, at most 120 characters.
fn short_json(value: &Value) -> String {
    let text = value.to_string();
    if text.chars().count() > 120 {
        format!("{}…", text.chars().take(119).collect::<String>())
    } else {
        text
    }
}

#[cfg(test)]
mod tests {
    use super::{json_paths, PathChange};
    use serde_json::json;

    #[test]
    fn json_outputs_differ_path_by_path() {
        let a = json!({"title": "x", "tags": ["a", "b"], "gone": 1, "same": {"k": true}});
        let b = json!({"title": "y", "tags": ["a"], "new/key": 2, "same": {"k": true}});
        let mut out = Vec::new();
        json_paths("", Some(&a), Some(&b), &mut out);
        let paths: Vec<(&str, String, String)> = out
            .iter()
            .map(|PathChange { path, a, b }| {
                (
                    path.as_str(),
                    a.as_ref().map_or("-".into(), ToString::to_string),
                    b.as_ref().map_or("-".into(), ToString::to_string),
                )
            })
            .collect();
        assert_eq!(
            paths,
            [
                ("/title", "\"x\"".into(), "\"y\"".into()),
                ("/tags/1", "\"b\"".into(), "-".into()),
                ("/gone", "1".into(), "-".into()),
                ("/new~1key", "-".into(), "2".into()),
            ]
        );
    }
}
