//! Run records: `runs/<run-id>/run.json` (rewritten atomically), `events.jsonl` and
//! `artifacts/outputs.jsonl` (appended, and flushed before every rewrite of `run.json`), so a
//! crash or a Ctrl-C leaves a consistent record that `resume` can build on.
//!
//! `run.json` is rewritten after a stage ends, but at most every 100 ms while stages end faster
//! than that (a 10,000-stage run would otherwise rewrite it 10,000 times), and no more often
//! than 20 times what the last rewrite took (a rewrite grows with the record, so a fixed
//! interval would make a long run of many stages quadratic). The append-only `events.jsonl` and
//! `outputs.jsonl` are buffered between rewrites (two writes a stage cost more than a cached
//! stage itself) and flushed first, so they always hold at least what `run.json` claims;
//! `resume` reads outputs from there.

use std::borrow::Cow;

use crate::floor::hash::Sha256Hex;
use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::floor::json::{self, Object};
use crate::floor::time::Clock;
use crate::floor::Sparse;

use indexmap::IndexMap;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::models::{Role, Usage};

/// How a run ended, or that it is still running (`status` in `run.json`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    /// Still running (a record whose process is gone reads as interrupted).
    Running,
    /// Every stage that could run did.
    Completed,
    /// Ended early, successfully, by a stage's `exit_if`.
    Exited,
    /// A stage failed, or the run could not start.
    Failed,
    /// Stopped by Ctrl-C or a signal, or its process was killed.
    Interrupted,
}

impl RunStatus {
    /// The status as `run.json` spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Running => "running",
            RunStatus::Completed => "completed",
            RunStatus::Exited => "exited",
            RunStatus::Failed => "failed",
            RunStatus::Interrupted => "interrupted",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum StageStatus {
    Running,
    Succeeded,
    Cached,
    Skipped,
    Failed,
    NotRun,
}

impl StageStatus {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            StageStatus::Running => "running",
            StageStatus::Succeeded => "succeeded",
            StageStatus::Cached => "cached",
            StageStatus::Skipped => "skipped",
            StageStatus::Failed => "failed",
            StageStatus::NotRun => "not_run",
        }
    }

    /// Whether the stage produced an output others can read.
    pub(crate) fn has_output(self) -> bool {
        matches!(self, StageStatus::Succeeded | StageStatus::Cached)
    }
}

/// Why the run ended early.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub(crate) struct ExitInfo {
    pub stage: Option<String>,
    pub message: String,
}

/// One model call, for usage accounting.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub(crate) struct ModelCall {
    pub model: String,
    pub attempt: u32,
    pub latency_ms: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    /// USD, when the provider reported it or the alias has a price table.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
    /// Requests sent again after a rate limit or a transient failure (the call made
    /// `retries + 1` requests).
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub retries: u32,
    /// Of those, the ones after a rate limit or an overload (429, 529, 503 with `retry-after`).
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub throttled: u32,
    /// The waits before the requests sent again, summed, in ms.
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub waited_ms: u64,
    /// Answered from a recording (`--replay`): its cost is what a real call would have paid.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub replayed: bool,
    /// Why the reply was rejected (parse or schema errors), for repaired attempts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rejected: Option<String>,
    /// What was sent and answered, kept only when a traced run is asked to capture message
    /// content (`OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<CallContent>,
}

/// A model call's messages: the system prompt, the conversation sent (the prompt, then for a
/// repair each rejected reply and the problems told), and the reply.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub(crate) struct CallContent {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system: Option<String>,
    pub messages: Vec<(Role, String)>,
    pub reply: String,
}

/// One `foreach` item as it ran. Its model calls are the next `model_calls` of its stage's
/// (a stage's calls are kept in item order).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct ItemRun {
    pub index: usize,
    /// When it started, in ms after the run did.
    pub start_ms: u64,
    pub duration_ms: u64,
    /// `succeeded`, `failed`, or `cached` (its output taken from the resumed run).
    pub status: StageStatus,
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub attempts: u32,
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub model_calls: u32,
}

/// How a sub-workflow's run ended, as the stage that ran it keeps it: each stage's status, a
/// sub-workflow's stages in it as `stage/inner`, and the stage whose `exit_if` ended it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct SubRun {
    pub status: RunStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_stage: Option<String>,
    pub stages: IndexMap<String, StageStatus>,
}

impl SubRun {
    /// What a sub-workflow's `record` says of its stages, and of theirs.
    pub(crate) fn of(record: &RunRecord) -> SubRun {
        let mut stages = IndexMap::new();
        let mut exit_stage = record.exit.as_ref().and_then(|e| e.stage.clone());
        for (id, stage) in &record.stages {
            stages.insert(id.to_string(), stage.status);
            if let Some(inner) = &stage.details().sub_run {
                for (inner_id, status) in &inner.stages {
                    stages.insert(format!("{id}/{inner_id}"), *status);
                }
                if exit_stage.is_none() {
                    exit_stage = inner.exit_stage.as_ref().map(|e| format!("{id}/{e}"));
                }
            }
        }
        SubRun {
            status: record.status,
            exit_stage,
            stages,
        }
    }
}

/// How a stage ran, as the run's record keeps it.
///
/// The members nearly every stage sets are here; the rest (an error, a reason, `foreach`
/// items, model calls, ...) are in [`StageDetails`], allocated only for a stage that has any:
/// a record of 10,000 stages held 344 bytes a stage, more than half of them for members nearly
/// every stage left empty. `run.json` holds them all flat ([`StageRecordJson`]).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(from = "StageRecordJson", into = "StageRecordJson")]
pub(crate) struct StageRecord {
    pub status: StageStatus,
    pub started_at: Option<String>,
    pub duration_ms: u64,
    pub fingerprint: Option<Sha256Hex>,
    /// What the fingerprint covers, hashed part by part (so a miss can say what changed).
    pub fingerprint_parts: Option<Box<FingerprintParts>>,
    pub output_sha256: Option<Sha256Hex>,
    pub attempts: u32,
    /// For `cached`: the run or cache entry the output came from.
    pub reused_from: Option<Cow<'static, str>>,
    /// Its output was not kept whole: the run's record budget was spent (a resume runs the stage
    /// again).
    pub output_cut: bool,
    /// In a dry-run: the output was assumed, not produced.
    pub assumed: bool,
    /// `None` when every member of it is empty ([`StageRecord::details`]).
    details: Option<Box<StageDetails>>,
}

/// The members of a [`StageRecord`] that most stages leave empty.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct StageDetails {
    pub error: Option<String>,
    /// Why it was skipped, or the early exit it caused.
    pub reason: Option<String>,
    pub items: Option<usize>,
    /// `foreach` items that failed under `on_item_error = "continue"` (their outputs are null).
    pub failed_items: usize,
    /// `foreach` items whose output a resume took from the run it resumed instead of running
    /// them again.
    pub reused_items: usize,
    /// Each `foreach` item that ran or was reused, by index: when, how long, how it ended
    /// (absent from records older than it).
    pub item_runs: Vec<ItemRun>,
    /// A sub-workflow stage's (not a `foreach` one's): how its stages ended.
    pub sub_run: Option<Box<SubRun>>,
    pub model_calls: Vec<ModelCall>,
    /// The model calls' tokens, latency and cost, summed.
    pub usage: Option<Box<UsageTotals>>,
    /// With `--explain`: whether the stage would be reused, and why not.
    pub explain: Option<String>,
    /// The end of what a successful stage's process wrote on stderr (at most 8 KB; a failed
    /// one's is in `error`).
    pub stderr: Option<String>,
}

impl StageDetails {
    const NONE: StageDetails = StageDetails {
        error: None,
        reason: None,
        items: None,
        failed_items: 0,
        reused_items: 0,
        item_runs: Vec::new(),
        sub_run: None,
        model_calls: Vec::new(),
        usage: None,
        explain: None,
        stderr: None,
    };
}

impl Sparse for StageDetails {
    fn is_unset(&self) -> bool {
        *self == Self::NONE
    }
}

static NO_DETAILS: StageDetails = StageDetails::NONE;

impl From<StageRecordJson> for StageRecord {
    fn from(json: StageRecordJson) -> Self {
        let details = StageDetails {
            error: json.error,
            reason: json.reason,
            items: json.items,
            failed_items: json.failed_items,
            reused_items: json.reused_items,
            item_runs: json.item_runs,
            sub_run: json.sub_run,
            model_calls: json.model_calls,
            usage: json.usage,
            explain: json.explain,
            stderr: json.stderr,
        };
        StageRecord {
            status: json.status,
            started_at: json.started_at,
            duration_ms: json.duration_ms,
            fingerprint: json.fingerprint,
            fingerprint_parts: json.fingerprint_parts,
            output_sha256: json.output_sha256,
            attempts: json.attempts,
            reused_from: json.reused_from,
            output_cut: json.output_cut,
            assumed: json.assumed,
            details: details.boxed(),
        }
    }
}

impl From<StageRecord> for StageRecordJson {
    fn from(record: StageRecord) -> Self {
        let details = record.details.map(|d| *d).unwrap_or_default();
        StageRecordJson {
            status: record.status,
            started_at: record.started_at,
            duration_ms: record.duration_ms,
            fingerprint: record.fingerprint,
            fingerprint_parts: record.fingerprint_parts,
            output_sha256: record.output_sha256,
            error: details.error,
            reason: details.reason,
            attempts: record.attempts,
            items: details.items,
            failed_items: details.failed_items,
            reused_items: details.reused_items,
            item_runs: details.item_runs,
            sub_run: details.sub_run,
            reused_from: record.reused_from,
            model_calls: details.model_calls,
            usage: details.usage,
            output_cut: record.output_cut,
            explain: details.explain,
            assumed: record.assumed,
            stderr: details.stderr,
        }
    }
}

/// A stage's record as `run.json` holds it: every member flat. Read and written through
/// [`StageRecord`], which keeps the members few stages set in a box of their own.
#[derive(Serialize, Deserialize)]
struct StageRecordJson {
    pub status: StageStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<String>,
    #[serde(default)]
    pub duration_ms: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fingerprint: Option<Sha256Hex>,
    /// What the fingerprint covers, hashed part by part (so a miss can say what changed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fingerprint_parts: Option<Box<FingerprintParts>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_sha256: Option<Sha256Hex>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Why it was skipped, or the early exit it caused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub attempts: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub items: Option<usize>,
    /// `foreach` items that failed under `on_item_error = "continue"` (their outputs are null).
    #[serde(default, skip_serializing_if = "is_zero_usize")]
    pub failed_items: usize,
    /// `foreach` items whose output a resume took from the run it resumed instead of running
    /// them again.
    #[serde(default, skip_serializing_if = "is_zero_usize")]
    pub reused_items: usize,
    /// Each `foreach` item that ran or was reused, by index: when, how long, how it ended
    /// (absent from records older than it).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub item_runs: Vec<ItemRun>,
    /// A sub-workflow stage's (not a `foreach` one's): how its stages ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sub_run: Option<Box<SubRun>>,
    /// For `cached`: the run or cache entry the output came from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reused_from: Option<Cow<'static, str>>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub model_calls: Vec<ModelCall>,
    /// The model calls' tokens, latency and cost, summed. Boxed: 96 bytes that most stages
    /// (those that call no model) would carry as `None` in a record of thousands.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Box<UsageTotals>>,
    /// Its output was not kept whole: the run's record budget was spent (a resume runs the stage
    /// again).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub output_cut: bool,
    /// With `--explain`: whether the stage would be reused, and why not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub explain: Option<String>,
    /// In a dry-run: the output was assumed, not produced.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub assumed: bool,
    /// The end of what a successful stage's process wrote on stderr (at most 8 KB; a failed
    /// one's is in `error`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stderr: Option<String>,
}

/// A record's stages by id, in the workflow's order. A run's ids are the ones its stage table
/// holds, shared rather than copied.
pub(crate) type Stages = IndexMap<Arc<str>, StageRecord, foldhash::fast::RandomState>;

/// Every stage `not_run`, in the order given: what a run's record starts from.
pub(crate) fn not_run_stages(ids: Vec<Arc<str>>) -> Stages {
    ids.into_iter()
        .map(|id| (id, StageRecord::not_run()))
        .collect()
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

fn is_zero_usize(n: &usize) -> bool {
    *n == 0
}

impl StageRecord {
    pub(crate) fn not_run() -> Self {
        StageRecord {
            status: StageStatus::NotRun,
            started_at: None,
            duration_ms: 0,
            fingerprint: None,
            fingerprint_parts: None,
            output_sha256: None,
            attempts: 0,
            reused_from: None,
            output_cut: false,
            assumed: false,
            details: None,
        }
    }

    /// The members most stages leave empty ([`StageDetails`]).
    pub(crate) fn details(&self) -> &StageDetails {
        self.details.as_deref().unwrap_or(&NO_DETAILS)
    }

    /// The members most stages leave empty, to change.
    pub(crate) fn details_mut(&mut self) -> &mut StageDetails {
        self.details.get_or_insert_with(Box::default)
    }

    /// Set them all at once (boxed only when any is set).
    pub(crate) fn set_details(&mut self, details: StageDetails) {
        self.details = details.boxed();
    }
}

fn is_zero_u32(n: &u32) -> bool {
    *n == 0
}

fn is_zero_u64(n: &u64) -> bool {
    *n == 0
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub(crate) struct UsageTotals {
    pub model_calls: u64,
    pub input_tokens: u64,
    pub output_tokens: u64,
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub cache_read_tokens: u64,
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub cache_write_tokens: u64,
    pub latency_ms: u64,
    /// USD paid, over the calls whose cost is known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
    /// USD that the calls answered from recordings cost when they were recorded: what a real
    /// run would pay (the estimate of a dry-run with `--replay`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub estimated_cost_usd: Option<f64>,
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub retries: u64,
    /// Requests sent again after a rate limit or an overload.
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub throttled: u64,
    /// The waits before requests sent again, summed, in ms.
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub waited_ms: u64,
}

impl UsageTotals {
    /// Count one model call.
    pub(crate) fn add(&mut self, call: &ModelCall) {
        self.model_calls += 1;
        self.latency_ms += call.latency_ms;
        self.retries += u64::from(call.retries);
        self.throttled += u64::from(call.throttled);
        self.waited_ms += call.waited_ms;
        if let Some(usage) = call.usage {
            self.input_tokens += usage.input_tokens;
            self.output_tokens += usage.output_tokens;
            self.cache_read_tokens += usage.cache_read_tokens;
            self.cache_write_tokens += usage.cache_write_tokens;
        }
        if let Some(cost) = call.cost_usd {
            let total = if call.replayed {
                &mut self.estimated_cost_usd
            } else {
                &mut self.cost_usd
            };
            *total = Some(total.unwrap_or(0.0) + cost);
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct FileHash {
    pub path: String,
    pub sha256: String,
}

/// `run.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunRecord {
    pub(crate) run_id: String,
    pub(crate) workflow: String,
    pub(crate) status: RunStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) exit: Option<ExitInfo>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) error: Option<String>,
    pub(crate) inputs: serde_json::Map<String, Value>,
    pub(crate) started_at: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) finished_at: Option<String>,
    #[serde(default)]
    pub(crate) duration_ms: u64,
    #[serde(default)]
    pub(crate) dry_run: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) resumed_from: Option<String>,
    pub(crate) cwd: String,
    pub(crate) files: Vec<FileHash>,
    pub(crate) stages: Stages,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) outputs: Option<Value>,
    /// The `[outputs]` values larger than [`LARGE_OUTPUT`], each kept once in a file below
    /// `artifacts/`: `run.json` holds null in their place in `outputs`, and a record is read
    /// with them put back ([`read_record`]).
    #[serde(default, skip_serializing_if = "IndexMap::is_empty")]
    pub(crate) output_files: IndexMap<String, StoredValue>,
    #[serde(default)]
    pub(crate) usage: UsageTotals,
    /// The process writing the record while it runs: a record still `running` whose process
    /// is gone was killed or crashed, and reads as `interrupted`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) holder: Option<super::holder::Holder>,
}

/// A value kept in a file of its own: where (a path below the folder that holds the
/// references, `outputs/...`), how many bytes, and their SHA-256. The file holds the value's
/// compact JSON (secrets redacted); it is read back only when its size and hash match.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct StoredValue {
    pub path: String,
    pub size: u64,
    pub sha256: String,
}

impl StoredValue {
    /// Store `bytes` (a value's JSON, redacted) as `base/<path>`, unless that file already holds
    /// them; written whole or not at all.
    pub(crate) fn store(base: &Path, path: String, bytes: &[u8]) -> std::io::Result<StoredValue> {
        let stored = StoredValue {
            sha256: crate::floor::hash::sha256_hex(bytes),
            size: bytes.len() as u64,
            path,
        };
        let file = base.join(&stored.path);
        if stored.read_bytes(base).is_none() {
            if let Some(parent) = file.parent() {
                std::fs::create_dir_all(parent)?;
            }
            crate::floor::atomic::replace(&file, ".output.", 0o666, |out| out.write_all(bytes))?;
        }
        Ok(stored)
    }

    /// The file's bytes, when it is a plain file below `base/outputs/` of the recorded size and
    /// hash.
    fn read_bytes(&self, base: &Path) -> Option<Vec<u8>> {
        use std::io::Read;
        let name = self.path.strip_prefix("outputs/")?;
        if name.is_empty() || name.contains('/') || name.starts_with('.') {
            return None;
        }
        let file = open_plain(&base.join("outputs").join(name))?;
        if file.metadata().ok()?.len() != self.size {
            return None;
        }
        let mut bytes = Vec::with_capacity(usize::try_from(self.size).ok()?);
        file.take(self.size).read_to_end(&mut bytes).ok()?;
        (crate::floor::hash::sha256_hex(&bytes) == self.sha256).then_some(bytes)
    }

    /// The value, when its file is whole (see [`StoredValue::read_bytes`]).
    pub(crate) fn read(&self, base: &Path) -> Option<Value> {
        serde_json::from_slice(&self.read_bytes(base)?).ok()
    }
}

/// What a stage's fingerprint covers, each part hashed, as the record keeps it (so a miss can
/// say what changed). The fingerprint itself is the hash of [`FingerprintDocument`]. A record
/// holds one a stage for the whole run: the parts few stages have (a schema, a model, a
/// sub-workflow) are boxed apart, allocated only for a stage that has one, which makes the
/// parts 112 bytes rather than 152. `run.json` holds them flat ([`FingerprintPartsJson`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(from = "FingerprintPartsJson", into = "FingerprintPartsJson")]
pub(crate) struct FingerprintParts {
    /// The engine's cache version: the same text in every stage of a run, never allocated.
    pub version: Cow<'static, str>,
    pub definition: Sha256Hex,
    pub action: Sha256Hex,
    /// `None` when the stage has none of them.
    rare: Option<Box<RareParts>>,
}

/// The parts of a fingerprint few stages have.
#[derive(Debug, Clone, Default, PartialEq)]
struct RareParts {
    schema: Option<Box<str>>,
    model: Option<Box<str>>,
    sub_workflow: Option<Box<str>>,
}

impl Sparse for RareParts {
    fn is_unset(&self) -> bool {
        *self == RareParts::default()
    }
}

impl FingerprintParts {
    pub(crate) fn new(
        definition: Sha256Hex,
        action: Sha256Hex,
        schema: Option<Box<str>>,
        model: Option<Box<str>>,
        sub_workflow: Option<Box<str>>,
    ) -> Self {
        let rare = RareParts {
            schema,
            model,
            sub_workflow,
        };
        FingerprintParts {
            version: Cow::Borrowed(super::stage::CACHE_VERSION),
            definition,
            action,
            rare: rare.boxed(),
        }
    }

    /// The hash of its output schema, if it has one.
    pub(crate) fn schema(&self) -> Option<&str> {
        self.rare.as_ref()?.schema.as_deref()
    }

    /// What its model alias stands for, if it is a prompt.
    pub(crate) fn model(&self) -> Option<&str> {
        self.rare.as_ref()?.model.as_deref()
    }

    /// The hash of its sub-workflow's files, if it runs one.
    pub(crate) fn sub_workflow(&self) -> Option<&str> {
        self.rare.as_ref()?.sub_workflow.as_deref()
    }
}

/// [`FingerprintParts`] as `run.json` holds them: every part flat.
#[derive(Serialize, Deserialize)]
struct FingerprintPartsJson {
    version: Cow<'static, str>,
    definition: Sha256Hex,
    action: Sha256Hex,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    schema: Option<Box<str>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    model: Option<Box<str>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    sub_workflow: Option<Box<str>>,
}

impl From<FingerprintPartsJson> for FingerprintParts {
    fn from(json: FingerprintPartsJson) -> Self {
        FingerprintParts {
            version: json.version,
            ..FingerprintParts::new(
                json.definition,
                json.action,
                json.schema,
                json.model,
                json.sub_workflow,
            )
        }
    }
}

impl From<FingerprintParts> for FingerprintPartsJson {
    fn from(parts: FingerprintParts) -> Self {
        let rare = parts.rare.map(|rare| *rare).unwrap_or_default();
        FingerprintPartsJson {
            version: parts.version,
            definition: parts.definition,
            action: parts.action,
            schema: rare.schema,
            model: rare.model,
            sub_workflow: rare.sub_workflow,
        }
    }
}

/// What a fingerprint is the SHA-256 of: the parts and each upstream stage's output hash (or
/// its status, when it has no output), as compact JSON, fields in this order, every one
/// written (absent parts as `null`). Changing these bytes changes every fingerprint.
#[derive(Serialize)]
pub(crate) struct FingerprintDocument<'a> {
    pub version: &'a str,
    pub definition: &'a str,
    pub action: &'a str,
    #[serde(serialize_with = "as_map")]
    pub deps: &'a dyn Upstream,
    pub schema: Option<&'a str>,
    pub model: Option<&'a str>,
    pub sub_workflow: Option<&'a str>,
}

/// The upstream stages a fingerprint covers, in order: each one's id and output hash (`None`
/// when it has none). Visited rather than listed: the last stage of a graph 10,000 wide has
/// 10,000 of them, whose hashes as text would be a megabyte held for one digest.
pub(crate) trait Upstream {
    fn each(&self, visit: &mut dyn FnMut(&str, Option<&str>));
}

/// Upstream stages listed, as tests give them.
#[cfg(test)]
pub(crate) fn listed<'a>(
    pairs: &'a [(&'a str, Option<&'a str>)],
) -> impl Fn(&mut dyn FnMut(&str, Option<&str>)) + 'a {
    move |visit| {
        for (id, sha256) in pairs {
            visit(id, *sha256);
        }
    }
}

impl<F: Fn(&mut dyn FnMut(&str, Option<&str>))> Upstream for F {
    fn each(&self, visit: &mut dyn FnMut(&str, Option<&str>)) {
        self(visit);
    }
}

fn as_map<S: serde::Serializer>(deps: &&dyn Upstream, serializer: S) -> Result<S::Ok, S::Error> {
    let mut pairs: Vec<(String, Option<String>)> = Vec::new();
    deps.each(&mut |id, sha256| pairs.push((id.to_owned(), sha256.map(str::to_owned))));
    serializer.collect_map(pairs)
}

impl FingerprintDocument<'_> {
    /// The document's compact JSON, as its `Serialize` writes it ([`crate::floor::json`]).
    #[cfg(test)]
    pub(crate) fn write(&self, out: &mut Vec<u8>) {
        self.write_in_pieces(out, &mut |_| {});
    }

    /// The SHA-256 of the document, hashed as it is written, a few kilobytes at a time.
    pub(crate) fn digest(&self) -> [u8; 32] {
        use sha2::{Digest, Sha256};
        const PIECE: usize = 4096;
        let mut hasher = Sha256::new();
        let mut buffer = Vec::with_capacity(PIECE + 512);
        self.write_in_pieces(&mut buffer, &mut |buffer| {
            if buffer.len() >= PIECE {
                hasher.update(&buffer[..]);
                buffer.clear();
            }
        });
        hasher.update(&buffer);
        hasher.finalize().into()
    }

    /// [`Self::write`], calling `drain` after each upstream stage (it may empty the buffer).
    fn write_in_pieces(&self, out: &mut Vec<u8>, drain: &mut dyn FnMut(&mut Vec<u8>)) {
        let mut document = Object::new(out);
        document.string("version", self.version);
        document.string("definition", self.definition);
        document.string("action", self.action);
        let mut deps = Object::new(document.key("deps"));
        self.deps.each(&mut |id, sha256| {
            crate::floor::json::opt_string(deps.key_of(id), sha256);
            drain(deps.raw());
        });
        deps.end();
        document.opt_string("schema", self.schema);
        document.opt_string("model", self.model);
        document.opt_string("sub_workflow", self.sub_workflow);
        document.end();
    }
}

impl<'a> FingerprintDocument<'a> {
    /// `hex` holds the hex of the definition's and the action's hashes.
    pub(crate) fn of(
        parts: &'a FingerprintParts,
        deps: &'a dyn Upstream,
        hex: &'a mut [[u8; 64]; 2],
    ) -> Self {
        let [definition, action] = hex;
        FingerprintDocument {
            version: &parts.version,
            definition: parts.definition.as_str(definition),
            action: parts.action.as_str(action),
            deps,
            schema: parts.schema(),
            model: parts.model(),
            sub_workflow: parts.sub_workflow(),
        }
    }
}

/// One line of `events.jsonl` (and of `run --json`), written from borrowed fields: a run of many
/// stages writes two of these per stage.
#[derive(Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub(crate) enum Event<'a> {
    RunStarted {
        workflow: &'a str,
        inputs: &'a serde_json::Map<String, Value>,
        dry_run: bool,
    },
    StageStarted {
        stage: &'a str,
    },
    StageFinished {
        stage: &'a str,
        status: &'static str,
        duration_ms: u64,
        error: Option<&'a str>,
        exit: Option<&'a str>,
        notes: &'a [String],
        #[serde(skip_serializing_if = "Option::is_none")]
        usage: Option<&'a UsageTotals>,
    },
    RunFinished {
        status: &'static str,
        exit: Option<&'a ExitInfo>,
        error: Option<&'a str>,
        duration_ms: u64,
        #[serde(skip_serializing_if = "Option::is_none")]
        usage: Option<&'a UsageTotals>,
    },
}

/// An [`Event`] with when it happened and the run it belongs to.
#[derive(Serialize)]
pub(crate) struct Stamped<'a> {
    #[serde(flatten)]
    pub event: Event<'a>,
    pub at: String,
    pub run_id: &'a str,
}

impl Stamped<'_> {
    /// The event's line as its `Serialize` writes it: the two events every stage has are
    /// written by hand ([`crate::floor::json`]), the others by serde_json.
    fn write(&self, out: &mut Vec<u8>) -> Result<(), ()> {
        let mut line = match &self.event {
            Event::StageStarted { stage } => {
                let mut line = Object::new(out);
                line.string("event", "stage_started");
                line.string("stage", stage);
                line
            }
            Event::StageFinished {
                stage,
                status,
                duration_ms,
                error,
                exit,
                notes,
                usage,
            } => {
                let mut line = Object::new(out);
                line.string("event", "stage_finished");
                line.string("stage", stage);
                line.string("status", status);
                line.u64("duration_ms", *duration_ms);
                line.opt_string("error", *error);
                line.opt_string("exit", *exit);
                json::strings(line.key("notes"), notes.iter().map(String::as_str));
                if let Some(usage) = usage {
                    json::serde(line.key("usage"), usage)?;
                }
                line
            }
            _ => return json::serde(out, self),
        };
        line.string("at", &self.at);
        line.string("run_id", self.run_id);
        line.end();
        Ok(())
    }
}

/// A stage output as kept in `artifacts/outputs.jsonl`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct OutputLine {
    pub stage: String,
    pub fingerprint: String,
    pub sha256: String,
    /// The output itself; read from `file` when the line names one.
    #[serde(default)]
    pub output: Value,
    /// An output larger than [`LARGE_OUTPUT`] is kept in a file of its own, this path below
    /// `artifacts/` (`outputs/<stage>-<sha256 prefix>.json`), instead of in the line.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
    /// The output is packed: its large parts are in the run's blobs ([`super::blobs`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub packed: bool,
}

/// The run's graph as `plan --format json` gives it, written once when the run starts (below
/// the run's folder), so a report draws the graph that ran.
pub(crate) const PLAN_FILE: &str = "plan.json";

/// An output larger than this (as JSON) is stored once in a file of its own and the line of
/// `outputs.jsonl` refers to it, so the log stays small and is never a copy of a huge value.
pub(crate) const LARGE_OUTPUT: u64 = 1 << 20;

/// A line of `outputs.jsonl` that refers to the file holding its output.
#[derive(Serialize)]
struct OutputFileRef<'a> {
    stage: &'a str,
    fingerprint: &'a str,
    sha256: &'a str,
    file: &'a str,
}

/// An [`OutputLine`] to write, borrowed from the outcome it records.
#[derive(Serialize)]
pub(crate) struct OutputLineRef<'a> {
    pub stage: &'a str,
    pub fingerprint: &'a str,
    pub sha256: &'a str,
    pub output: &'a Value,
}

impl OutputLineRef<'_> {
    /// The line as serde writes it (less its newline).
    fn write(&self, out: &mut Vec<u8>) -> Result<(), ()> {
        let mut line = crate::floor::json::Object::new(out);
        line.string("stage", self.stage);
        line.string("fingerprint", self.fingerprint);
        line.string("sha256", self.sha256);
        crate::floor::json::serde(line.key("output"), self.output)?;
        line.end();
        Ok(())
    }
}

/// A line of `outputs.jsonl` whose output is packed ([`super::blobs`]).
#[derive(Serialize)]
struct PackedLineRef<'a> {
    stage: &'a str,
    fingerprint: &'a str,
    sha256: &'a str,
    output: &'a Value,
    packed: bool,
}

/// When [`RunFiles::save`] rewrites `run.json`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Rewrite {
    /// Unless the last rewrite was too recent (it is then due later).
    IfDue,
    /// Now: the first record of a run, and the record as the run leaves it.
    Now,
}

/// The files of one run, open for appending.
pub(crate) struct RunFiles {
    pub dir: PathBuf,
    events: BufWriter<File>,
    outputs: BufWriter<File>,
    last_write: Option<Instant>,
    /// The clock rewrites are spaced by.
    clock: Clock,
    /// How long the last rewrite took: rewrites are spaced by at least 20 times that, so a
    /// large record costs at most about 5% of a run however long the run is.
    last_cost: Duration,
    dirty: bool,
    /// The large values kept in files below `artifacts/` so far, by the SHA-256 of their bytes.
    large: HashMap<String, StoredValue>,
    /// The large parts of outputs, each stored once.
    blobs: super::blobs::BlobStore,
    /// The event being written ([`RunFiles::event`]).
    line: Vec<u8>,
}

/// Why a run's folder cannot be made, with its path; a file standing where a folder of the
/// path must be (a `.stagegraph` file, say) is named, with what to do.
fn folder_error(dir: &Path, error: std::io::Error) -> std::io::Error {
    let file = dir
        .ancestors()
        .find(|folder| std::fs::metadata(folder).is_ok_and(|meta| !meta.is_dir()));
    let message = match file {
        Some(file) => format!(
            "{} is a file where a folder must be; move it away, or keep the records elsewhere \
             with --state-dir",
            file.display()
        ),
        None => format!("cannot make {}: {error}", dir.display()),
    };
    std::io::Error::new(error.kind(), message)
}

impl RunFiles {
    pub(crate) fn create(dir: PathBuf) -> std::io::Result<Self> {
        std::fs::create_dir_all(dir.join("artifacts"))
            .map_err(|error| folder_error(&dir, error))?;
        let open = |path: PathBuf| OpenOptions::new().create(true).append(true).open(path);
        Ok(RunFiles {
            events: BufWriter::new(open(dir.join("events.jsonl"))?),
            outputs: BufWriter::new(open(dir.join("artifacts").join("outputs.jsonl"))?),
            blobs: super::blobs::BlobStore::new(&dir.join("artifacts")),
            dir,
            last_write: None,
            clock: Clock::system(),
            last_cost: Duration::ZERO,
            dirty: false,
            large: HashMap::new(),
            line: Vec::new(),
        })
    }

    /// Store at most `bytes` bytes of stage outputs' large parts (see [`super::blobs`]).
    pub(crate) fn with_budget(mut self, bytes: Option<u64>) -> Self {
        let blobs = std::mem::replace(
            &mut self.blobs,
            super::blobs::BlobStore::new(&self.dir.join("artifacts")),
        );
        self.blobs = blobs.with_budget(bytes);
        self
    }

    /// Append an event; it reaches the file at the latest with the next `run.json` rewrite.
    pub(crate) fn event(&mut self, event: &Stamped) -> std::io::Result<()> {
        append_line(
            &mut self.events,
            &mut self.line,
            "an event that is not JSON",
            |out| event.write(out),
        )?;
        self.events.write_all(b"\n")
    }

    /// Append an event already written as its line.
    pub(crate) fn event_line(&mut self, line: &[u8]) -> std::io::Result<()> {
        self.events
            .write_all(&crate::floor::secrets::redact_bytes(line))
    }

    /// Append a stage's output; it reaches the file before `run.json` says the stage finished.
    /// Says whether a part of it was cut, past the run's budget.
    pub(crate) fn output(&mut self, line: &OutputLineRef) -> std::io::Result<bool> {
        if crate::floor::hash::json_size(line.output) > LARGE_OUTPUT {
            let prefix = line.sha256.get(..16).unwrap_or(line.sha256);
            let file = format!("outputs/{}-{prefix}.json", line.stage);
            let bytes = serde_json::to_vec(line.output).map_err(std::io::Error::other)?;
            let bytes = crate::floor::secrets::redact_bytes(&bytes);
            let artifacts = self.dir.join("artifacts");
            let stored = StoredValue::store(&artifacts, file, &bytes)?;
            write_json(
                &mut self.outputs,
                &OutputFileRef {
                    stage: line.stage,
                    fingerprint: line.fingerprint,
                    sha256: line.sha256,
                    file: &stored.path,
                },
            )?;
            // A workflow output that is this value refers to this file instead of a copy.
            self.large.insert(stored.sha256.clone(), stored);
        } else if let Some(packed) = self.blobs.pack(line.output)? {
            write_json(
                &mut self.outputs,
                &PackedLineRef {
                    stage: line.stage,
                    fingerprint: line.fingerprint,
                    sha256: line.sha256,
                    output: &packed,
                    packed: true,
                },
            )?;
        } else {
            // Written by hand, as the event lines are: serde's writer took 2,200 instructions a
            // line, a line a stage.
            append_line(
                &mut self.outputs,
                &mut self.line,
                "an output that is not JSON",
                |out| line.write(out),
            )?;
        }
        self.outputs.write_all(b"\n")?;
        Ok(self.blobs.take_cut())
    }

    /// Keep each `[outputs]` value larger than [`LARGE_OUTPUT`] in a file below `artifacts/`
    /// (the one a stage's output of the same bytes is kept in, else
    /// `outputs/output-<sha256 prefix>.json`) and name it in `record.output_files`.
    fn store_outputs(&mut self, record: &mut RunRecord) -> std::io::Result<()> {
        record.output_files.clear();
        let Some(Value::Object(outputs)) = &record.outputs else {
            return Ok(());
        };
        for (name, value) in outputs {
            if crate::floor::hash::json_size(value) <= LARGE_OUTPUT {
                continue;
            }
            let bytes = serde_json::to_vec(value).map_err(std::io::Error::other)?;
            let bytes = crate::floor::secrets::redact_bytes(&bytes);
            let sha256 = crate::floor::hash::sha256_hex(&bytes);
            let stored = match self.large.get(&sha256) {
                Some(stored) => stored.clone(),
                None => {
                    let file = format!("outputs/output-{}.json", &sha256[..16]);
                    let stored = StoredValue::store(&self.dir.join("artifacts"), file, &bytes)?;
                    self.large.insert(sha256, stored.clone());
                    stored
                }
            };
            record.output_files.insert(name.clone(), stored);
        }
        Ok(())
    }

    /// Rewrite `run.json` as `when` says.
    pub(crate) fn save(&mut self, record: &mut RunRecord, when: Rewrite) -> std::io::Result<()> {
        let spacing = self.spacing();
        let recent = self
            .last_write
            .is_some_and(|at| self.clock.since(at) < spacing);
        if recent && when == Rewrite::IfDue {
            self.dirty = true;
            return Ok(());
        }
        let started = self.clock.now();
        // The logs first: the record never claims an output `resume` cannot find.
        let written = self
            .flush_logs()
            .and_then(|()| self.store_outputs(record))
            .and_then(|()| replace_file(&self.dir.join("run.json"), record));
        // A failed rewrite is spaced like a written one, so a full disk is not retried in a loop;
        // the record stays due.
        self.last_cost = self.clock.since(started);
        self.last_write = Some(self.clock.now());
        self.dirty = written.is_err();
        written
    }

    /// Push the buffered logs to their files, the blobs first: a line never refers to a blob
    /// that is not written.
    pub(crate) fn flush_logs(&mut self) -> std::io::Result<()> {
        self.blobs.flush()?;
        self.outputs.flush()?;
        self.events.flush()
    }

    /// How long until a held-back `run.json` rewrite may happen; `None` when none is pending.
    pub(crate) fn rewrite_due_in(&self) -> Option<Duration> {
        if !self.dirty {
            return None;
        }
        let spacing = self.spacing();
        let since = self.last_write.map_or(spacing, |at| self.clock.since(at));
        Some(spacing.saturating_sub(since))
    }

    fn spacing(&self) -> Duration {
        Duration::from_millis(100).max(self.last_cost * 20)
    }
}

/// Serialize `value` into `out`, with every registered secret redacted (see
/// [`crate::floor::secrets`]): straight into the writer when there is none, else through a
/// buffer, since a secret may straddle the pieces the serializer writes.
pub(crate) fn write_json<T: Serialize + ?Sized, W: Write + ?Sized>(
    out: &mut W,
    value: &T,
) -> std::io::Result<()> {
    if crate::floor::secrets::active() {
        let text = serde_json::to_vec(value).map_err(std::io::Error::other)?;
        out.write_all(&crate::floor::secrets::redact_bytes(&text))
    } else {
        serde_json::to_writer(out, value).map_err(std::io::Error::other)
    }
}

/// Append to a log what `write` writes into `buffer` (one buffer for every line: a run writes
/// three lines a stage), redacted; the newline is the caller's.
fn append_line(
    log: &mut impl Write,
    buffer: &mut Vec<u8>,
    not_json: &str,
    write: impl FnOnce(&mut Vec<u8>) -> Result<(), ()>,
) -> std::io::Result<()> {
    buffer.clear();
    write(buffer).map_err(|()| std::io::Error::other(not_json))?;
    log.write_all(&crate::floor::secrets::redact_bytes(buffer))
}

/// Replace `run.json` by renaming a complete new one over it, so a reader, a Ctrl-C or a crash of
/// the process sees the old record or the new one, never a mix. No rewrite waits for the disk
/// (`fsync`, 4 ms for the 5 MB record of 10,000 stages): like the cache and the logs beside it,
/// the newest record is the system's to write back. The outputs named in `output_files` are
/// written as null: their files hold them.
fn replace_file(path: &Path, record: &mut RunRecord) -> std::io::Result<()> {
    // The usual 0o666 less the umask, like any file the run writes; serialized straight into
    // the file: a record of thousands of stages is megabytes.
    let write = |record: &RunRecord| {
        crate::floor::atomic::replace(path, ".run.json.", 0o666, |out| {
            record.write_json(&mut *out)?;
            out.write_all(b"\n")
        })
    };
    if record.output_files.is_empty() {
        return write(record);
    }
    let values = record.outputs.take();
    record.outputs = values.as_ref().map(|values| match values {
        Value::Object(outputs) => Value::Object(
            outputs
                .iter()
                .map(
                    |(name, value)| match record.output_files.contains_key(name) {
                        true => (name.clone(), Value::Null),
                        false => (name.clone(), value.clone()),
                    },
                )
                .collect(),
        ),
        other => other.clone(),
    });
    let written = write(record);
    record.outputs = values;
    written
}

/// The runs folder of a state folder.
pub(crate) fn runs_dir(state_dir: &Path) -> PathBuf {
    state_dir.join("runs")
}

/// Every run id, oldest first.
pub(crate) fn list_runs(state_dir: &Path) -> Vec<String> {
    let mut ids: Vec<String> = std::fs::read_dir(runs_dir(state_dir))
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.path().join("run.json").is_file())
        .map(|e| e.file_name().to_string_lossy().to_string())
        .collect();
    ids.sort();
    ids
}

/// The newest run of a workflow that was not a dry-run.
pub(crate) fn latest_real_run(state_dir: &Path, workflow: &str) -> Option<RunRecord> {
    let id = latest_real_run_id(state_dir, workflow)?;
    read_record_as_written(state_dir, &id).ok()
}

/// The id of the newest run of a workflow that was not a dry-run, found by reading the head of
/// each record only: every dry-run is recorded, and a dry-run that looks for the last real run
/// had parsed each newer dry-run's record whole (megabytes each at 10,000 stages).
pub(crate) fn latest_real_run_id(state_dir: &Path, workflow: &str) -> Option<String> {
    list_runs(state_dir).into_iter().rev().find(|id| {
        read_head(state_dir, id).is_some_and(|head| head.workflow == workflow && !head.dry_run)
    })
}

/// Whether a recorded run was a dry-run: `last` means the last real run. An unreadable record
/// counts as real, so that `runs show last` shows what is wrong with it.
pub(crate) fn is_dry_run(state_dir: &Path, id: &str) -> bool {
    read_head(state_dir, id).is_some_and(|head| head.dry_run)
}

/// A record's workflow, whether it was a dry-run, and its status as written.
#[derive(Debug, PartialEq)]
pub(crate) struct Head {
    pub workflow: String,
    pub dry_run: bool,
    /// `None` when the head does not say it before the stages.
    pub status: Option<RunStatus>,
}

/// The [`Head`] of a run record, read key by key from the start of its `run.json` and no
/// further than its keys (the stages, by far the most of a record, come after them). Keys in
/// any order are read; a record without `dry_run` is a real run. `None` for a file that is
/// missing or does not start as a record with a `workflow`.
pub(crate) fn read_head(state_dir: &Path, id: &str) -> Option<Head> {
    use serde::de::{Deserializer as _, Error as _, IgnoredAny, MapAccess, Visitor};
    use std::cell::Cell;

    struct HeadVisitor<'a>(&'a Cell<Option<Head>>);
    impl<'de> Visitor<'de> for HeadVisitor<'_> {
        type Value = ();
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a run record")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
            let (mut workflow, mut dry_run) = (None::<String>, None::<bool>);
            let mut status = None::<RunStatus>;
            while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
                match key.as_ref() {
                    "workflow" => workflow = Some(map.next_value()?),
                    "dry_run" => dry_run = Some(map.next_value()?),
                    // Written before `dry_run`: read by the time the loop stops.
                    "status" => status = Some(map.next_value()?),
                    _ => {
                        map.next_value::<IgnoredAny>()?;
                    }
                }
                if let (Some(_), Some(_)) = (&workflow, dry_run) {
                    break;
                }
            }
            if let Some(workflow) = workflow {
                self.0.set(Some(Head {
                    workflow,
                    dry_run: dry_run.unwrap_or(false),
                    status,
                }));
            }
            // Stopping before the end of the object is an error to serde_json, and the point:
            // the rest of the file is never read.
            Err(A::Error::custom("head read"))
        }
    }

    let file = File::open(runs_dir(state_dir).join(id).join("run.json")).ok()?;
    let found = Cell::new(None);
    let mut reader = serde_json::Deserializer::from_reader(BufReader::with_capacity(8192, file));
    let _ = reader.deserialize_map(HeadVisitor(&found));
    found.take()
}

/// Why a run record could not be read.
#[derive(Debug, thiserror::Error)]
pub(crate) enum RecordError {
    /// Its `run.json` is missing or unreadable.
    #[error("cannot read {}: {source}", path.display())]
    Unreadable {
        path: PathBuf,
        source: std::io::Error,
    },
    /// Its `run.json` does not parse as a run record.
    #[error("{} is not a run record: {source}", path.display())]
    NotARecord {
        path: PathBuf,
        source: serde_json::Error,
    },
}

/// A run record as `run.json` holds it (its large outputs null, named in `output_files`). One
/// still `running` whose process is gone (killed, crashed, the machine restarted) is the record
/// of an interrupted run: it is read, and rewritten, as such.
pub(crate) fn read_record_as_written(state_dir: &Path, id: &str) -> Result<RunRecord, RecordError> {
    let path = runs_dir(state_dir).join(id).join("run.json");
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(source) => return Err(RecordError::Unreadable { path, source }),
    };
    let mut record: RunRecord = match serde_json::from_str(&text) {
        Ok(record) => record,
        Err(source) => return Err(RecordError::NotARecord { path, source }),
    };
    let gone = record
        .holder
        .as_ref()
        .is_some_and(|h| h.liveness() == super::holder::Liveness::Gone);
    if record.status == RunStatus::Running && gone {
        record.status = RunStatus::Interrupted;
        if record.error.is_none() {
            record.error = Some(
                "the run's process ended without finishing its record (killed or crashed)".into(),
            );
        }
        // It ran at least until the last thing it wrote (its record's files, its stages' ends).
        if record.finished_at.is_none() {
            record.duration_ms = record.duration_ms.max(last_sign_of_life(&path, &record));
        }
        for stage in record.stages.values_mut() {
            if stage.status == StageStatus::Running {
                stage.status = StageStatus::Failed;
                stage
                    .details_mut()
                    .error
                    .get_or_insert_with(|| "interrupted".into());
            }
        }
        // Best effort: a reader without write access still sees the record as it is.
        let _ = replace_file(&path, &mut record);
    }
    Ok(record)
}

/// How long after its start a run whose process is gone was last seen: the newest of its
/// stages' ends and the times its files (`run.json` at `path` and those beside it) were last
/// written, in ms.
fn last_sign_of_life(path: &Path, record: &RunRecord) -> u64 {
    let Ok(start) = chrono::DateTime::parse_from_rfc3339(&record.started_at) else {
        return 0;
    };
    let after_start = |at: chrono::DateTime<chrono::Utc>| {
        u64::try_from((at - start.with_timezone(&chrono::Utc)).num_milliseconds()).unwrap_or(0)
    };
    let stages = record.stages.values().filter_map(|stage| {
        let at = chrono::DateTime::parse_from_rfc3339(stage.started_at.as_deref()?).ok()?;
        Some(after_start(at.with_timezone(&chrono::Utc)) + stage.duration_ms)
    });
    let dir = path.parent().unwrap_or(path);
    let files = [dir.to_path_buf(), dir.join("artifacts")]
        .into_iter()
        .flat_map(|dir| std::fs::read_dir(dir).into_iter().flatten().flatten())
        .filter_map(|entry| entry.metadata().ok()?.modified().ok())
        .map(|at| after_start(at.into()));
    stages.chain(files).max().unwrap_or(0)
}

/// A run record, read as [`read_record_as_written`] does, with its large outputs read from their
/// files: an output whose file is missing or damaged stays null (and named in `output_files`).
pub(crate) fn read_record(state_dir: &Path, id: &str) -> Result<RunRecord, RecordError> {
    let mut record = read_record_as_written(state_dir, id)?;
    let artifacts = runs_dir(state_dir).join(id).join("artifacts");
    if let Some(Value::Object(outputs)) = &mut record.outputs {
        for (name, stored) in &record.output_files {
            if let Some(value) = stored.read(&artifacts) {
                outputs.insert(name.clone(), value);
            }
        }
    }
    Ok(record)
}

/// The runs whose work a resume of `record` reuses, oldest first, `record`'s own last: the
/// run it resumed, the run that one resumed, and so on, as far as their records remain. A
/// resume killed before it had recorded again what it reused leaves that work in the runs
/// before it, and a resume of it takes it from there.
pub(crate) fn resume_chain(state_dir: &Path, record: &RunRecord) -> Vec<String> {
    let mut chain = vec![record.run_id.clone()];
    let mut next = record.resumed_from.clone();
    while let Some(id) = next.take() {
        // A record naming itself or a run already in the chain ends it.
        if chain.contains(&id) || chain.len() >= 10_000 {
            break;
        }
        let Ok(previous) = read_record_as_written(state_dir, &id) else {
            break;
        };
        next = previous.resumed_from.clone();
        chain.push(id);
    }
    chain.reverse();
    chain
}

/// The outputs a run produced, by stage (the last line of a stage wins).
pub(crate) fn read_outputs(state_dir: &Path, id: &str) -> HashMap<String, OutputLine> {
    let artifacts = runs_dir(state_dir).join(id).join("artifacts");
    let mut out = HashMap::new();
    if let Ok(file) = File::open(artifacts.join("outputs.jsonl")) {
        for line in BufReader::new(file).lines().map_while(Result::ok) {
            if let Ok(entry) = serde_json::from_str::<OutputLine>(&line) {
                out.insert(entry.stage.clone(), entry);
            }
        }
    }
    // Outputs kept in files of their own, or packed: a file that is missing or damaged, or a
    // part cut, leaves the stage without a recorded output, as a line that did not parse would.
    let blobs = out
        .values()
        .any(|entry| entry.packed)
        .then(|| super::blobs::Blobs::read(&artifacts));
    out.retain(|_, entry| match &entry.file {
        None if entry.packed => match blobs.as_ref().and_then(|b| b.unpack(&entry.output)) {
            Some(value) => {
                entry.output = value;
                entry.packed = false;
                true
            }
            None => false,
        },
        None => true,
        Some(file) => match read_output_file(&artifacts, file) {
            Some(value) => {
                entry.output = value;
                true
            }
            None => false,
        },
    });
    out
}

/// An output kept in `artifacts/outputs/`; only a plain file name there is read.
pub(super) fn read_output_file(artifacts: &Path, file: &str) -> Option<Value> {
    let name = file.strip_prefix("outputs/")?;
    if name.is_empty() || name.contains('/') || name.starts_with('.') {
        return None;
    }
    let file = open_plain(&artifacts.join("outputs").join(name))?;
    serde_json::from_reader(BufReader::new(file)).ok()
}

/// `path` opened for reading when it is a regular file; opened without waiting, so a FIFO put
/// in its place is refused rather than waited on.
fn open_plain(path: &Path) -> Option<File> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .ok()?;
    file.metadata().ok()?.is_file().then_some(file)
}

/// The workflow a run record belongs to, read from the head of its `run.json` (the record's
/// second key) rather than by parsing a record that can hold thousands of stages.
fn read_workflow_name(state_dir: &Path, id: &str) -> Option<String> {
    use std::io::Read;
    let path = runs_dir(state_dir).join(id).join("run.json");
    let from_head = || {
        let mut head = Vec::with_capacity(1024);
        File::open(&path)
            .ok()?
            .take(1024)
            .read_to_end(&mut head)
            .ok()?;
        let head = String::from_utf8_lossy(&head);
        let key = head.find("\"workflow\"")?;
        let value = head[key + "\"workflow\"".len()..]
            .trim_start()
            .strip_prefix(':')?;
        serde_json::Deserializer::from_str(value)
            .into_iter::<String>()
            .next()?
            .ok()
    };
    // A head that does not read (a record written some other way): the whole record.
    from_head().or_else(|| {
        read_record_as_written(state_dir, id)
            .ok()
            .map(|r| r.workflow)
    })
}

/// Whether a run may still be going on: its record says `running` and its process is alive (or
/// on another host), or its folder has no readable record yet and was made in the last minute
/// (a run between making its folder and writing its first record).
fn in_progress(state_dir: &Path, id: &str) -> bool {
    // A record whose head says it ended is not in progress: the stages after the head (5 MB
    // at 10,000 stages) are not read. Only one that says `running` is read whole, for its
    // holder, to tell a live run from a killed one.
    if let Some(status) = read_head(state_dir, id).and_then(|head| head.status) {
        if status != RunStatus::Running {
            return false;
        }
    }
    match read_record_as_written(state_dir, id) {
        Ok(record) => record.status == RunStatus::Running,
        Err(_) => std::fs::metadata(runs_dir(state_dir).join(id))
            .and_then(|meta| meta.modified())
            .ok()
            .and_then(|made| made.elapsed().ok())
            .is_none_or(|age| age < std::time::Duration::from_secs(60)),
    }
}

/// Keep the newest `keep` runs of each workflow, and of those only as many, newest first, as
/// fit in `keep_bytes` on disk together (the newest always); returns the ids removed. A run still in progress is
/// never removed (it could then neither write its record nor be resumed), though its bytes
/// count.
pub(crate) fn prune(state_dir: &Path, keep: usize, keep_bytes: Option<u64>) -> Vec<String> {
    let ids = list_runs(state_dir);
    if keep_bytes.is_none() && (keep == 0 || ids.len() <= keep) {
        return Vec::new();
    }
    let mut by_workflow: HashMap<String, Vec<String>> = HashMap::new();
    for id in ids {
        let workflow = read_workflow_name(state_dir, &id).unwrap_or_default();
        by_workflow.entry(workflow).or_default().push(id);
    }
    let mut removed = Vec::new();
    for ids in by_workflow.values() {
        let mut total = 0u64;
        // Newest first: the count, then the bytes, decide which go.
        for (newer, id) in ids.iter().rev().enumerate() {
            let dir = runs_dir(state_dir).join(id);
            let past_count = keep > 0 && newer >= keep;
            // The newest run stays, whatever its size: `last` names it.
            let past_size = keep_bytes.is_some_and(|limit| {
                total += tree_size(&dir);
                newer > 0 && total > limit
            });
            if !(past_count || past_size) || in_progress(state_dir, id) {
                continue;
            }
            if std::fs::remove_dir_all(&dir).is_ok() {
                removed.push(id.clone());
            }
        }
    }
    removed.sort();
    removed
}

/// The bytes of the files below `dir`.
fn tree_size(dir: &Path) -> u64 {
    walkdir::WalkDir::new(dir)
        .follow_links(false)
        .into_iter()
        .flatten()
        .filter_map(|entry| entry.metadata().ok())
        .filter(std::fs::Metadata::is_file)
        .map(|meta| meta.len())
        .sum()
}

// --- where records live ------------------------------------------------------------------

/// The user's stagegraph state folder: `$XDG_STATE_HOME/stagegraph`, else
/// `~/.local/state/stagegraph`; `None` when neither variable names an absolute folder.
pub(crate) fn user_state_root() -> Option<PathBuf> {
    let absolute = |name: &str| {
        std::env::var_os(name)
            .map(PathBuf::from)
            .filter(|path| path.is_absolute())
    };
    absolute("XDG_STATE_HOME")
        .or_else(|| absolute("HOME").map(|home| home.join(".local").join("state")))
        .map(|root| root.join("stagegraph"))
}

/// The name of a project's folder under [`user_state_root`]: the project folder's name (for a
/// person browsing the folder) and 16 hex digits of the SHA-256 of its canonical path (so two
/// projects of the same name never share records).
pub(crate) fn project_key(project: &Path) -> String {
    use sha2::{Digest, Sha256};
    let canonical = std::fs::canonicalize(project).unwrap_or_else(|_| project.to_path_buf());
    let name: String = canonical
        .file_name()
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_default()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.' {
                c
            } else {
                '_'
            }
        })
        .take(40)
        .collect();
    let digest = crate::floor::hash::hex(&Sha256::digest(canonical.as_os_str().as_encoded_bytes()));
    let name = name.trim_start_matches('.');
    if name.is_empty() {
        digest[..16].to_string()
    } else {
        format!("{name}-{}", &digest[..16])
    }
}

/// The user state folder of a project, when there is a user state root.
pub(crate) fn user_state_dir(project: &Path) -> Option<PathBuf> {
    user_state_root().map(|root| root.join(project_key(project)))
}

/// The user state folders of `cwd` and each of its ancestors that exist: where `runs` and
/// `resume` look, besides the state folder, for records kept out of the project tree (a
/// project's records are found from the project folder or any folder below it).
pub(crate) fn user_state_dirs_above(cwd: &Path) -> Vec<PathBuf> {
    let Some(root) = user_state_root() else {
        return Vec::new();
    };
    if !root.is_dir() {
        return Vec::new();
    }
    let start = std::fs::canonicalize(cwd).unwrap_or_else(|_| cwd.to_path_buf());
    start
        .ancestors()
        .map(|folder| root.join(project_key(folder)))
        .filter(|dir| dir.is_dir())
        .collect()
}

/// Every run id of several state folders, oldest first, each with its folder.
pub(crate) fn list_runs_in(dirs: &[PathBuf]) -> Vec<(String, PathBuf)> {
    let mut all: Vec<(String, PathBuf)> = Vec::new();
    for dir in dirs {
        for id in list_runs(dir) {
            if !all.iter().any(|(known, _)| *known == id) {
                all.push((id, dir.clone()));
            }
        }
    }
    all.sort();
    all
}

/// Why `last` or a prefix names no one run.
#[derive(Debug, thiserror::Error)]
pub(crate) enum LocateError {
    /// `last`, and no real run is recorded in the folders searched.
    #[error("no runs recorded in {} (dry-runs aside)", places(.searched))]
    NoRuns { searched: Vec<PathBuf> },
    /// No run id starts with the prefix.
    #[error("no run `{id}` in {}", places(.searched))]
    NoSuchRun { id: String, searched: Vec<PathBuf> },
    /// Several run ids start with the prefix.
    #[error("`{id}` matches {count} runs; give more of the id")]
    Ambiguous { id: String, count: usize },
}

/// The runs folders of state folders, as an error names them.
fn places(dirs: &[PathBuf]) -> String {
    dirs.iter()
        .map(|dir| runs_dir(dir).display().to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// Resolve `last` or a unique prefix to a run id across several state folders, with the folder
/// that holds it.
pub(crate) fn locate_run(dirs: &[PathBuf], id: &str) -> Result<(String, PathBuf), LocateError> {
    let all = list_runs_in(dirs);
    // `last` is the newest run that was not a dry-run; `last~N` the Nth such run before it.
    let back = match id.strip_prefix("last") {
        Some("") => Some(0),
        Some(rest) => rest.strip_prefix('~').and_then(|n| n.parse::<usize>().ok()),
        None => None,
    };
    if let Some(back) = back {
        let mut real = all.iter().rev().filter(|(id, dir)| !is_dry_run(dir, id));
        return match real.nth(back) {
            Some(found) => Ok(found.clone()),
            None if back == 0 => Err(LocateError::NoRuns {
                searched: dirs.to_vec(),
            }),
            None => Err(LocateError::NoSuchRun {
                id: id.to_string(),
                searched: dirs.to_vec(),
            }),
        };
    }
    let matches: Vec<&(String, PathBuf)> = all.iter().filter(|(r, _)| r.starts_with(id)).collect();
    match matches.as_slice() {
        [one] => Ok((*one).clone()),
        [] => Err(LocateError::NoSuchRun {
            id: id.to_string(),
            searched: dirs.to_vec(),
        }),
        many => Err(LocateError::Ambiguous {
            id: id.to_string(),
            count: many.len(),
        }),
    }
}

/// Creates `dir` (and its parents) and makes it owner-only (0700), whatever it was.
pub(crate) fn make_private(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
}

/// Makes everything under `dir` owner-only: folders 0700, files 0600. Symbolic links are not
/// followed. Entries already owner-only are left alone, so a folder of kept runs costs a stat
/// each.
pub(crate) fn restrict_tree(dir: &Path) {
    use std::os::unix::fs::PermissionsExt;
    for entry in walkdir::WalkDir::new(dir)
        .follow_links(false)
        .into_iter()
        .flatten()
    {
        let Ok(meta) = entry.metadata() else { continue };
        let wanted = if meta.is_dir() {
            0o700
        } else if meta.is_file() {
            0o600
        } else {
            continue;
        };
        if meta.permissions().mode() & 0o777 != wanted {
            let _ = std::fs::set_permissions(entry.path(), std::fs::Permissions::from_mode(wanted));
        }
    }
}

/// A new run id: sorts in start order.
pub(crate) fn new_run_id() -> String {
    let now = chrono::Utc::now();
    format!(
        "{}-{:04x}",
        now.format("%Y%m%dT%H%M%S%.3fZ"),
        rand::random::<u16>()
    )
}

pub(crate) use crate::floor::time::now_rfc3339;

#[cfg(test)]
mod tests {
    use super::*;

    /// A run's record holds one a stage: what few stages set stays out of line.
    #[test]
    fn a_stage_record_stays_small() {
        assert!(std::mem::size_of::<StageRecord>() <= 160);
        let mut record = StageRecord::not_run();
        assert!(record.details.is_none());
        record.details_mut().error = Some("failed".into());
        let json = serde_json::to_value(&record).unwrap();
        assert_eq!(json["error"], "failed");
        let back: StageRecord = serde_json::from_value(json).unwrap();
        assert_eq!(back.details().error.as_deref(), Some("failed"));
        record.set_details(StageDetails::default());
        assert!(record.details.is_none(), "empty details are not boxed");
    }

    /// Every stage's record holds its fingerprint's parts; the parts few stages have are boxed
    /// apart, and read and written flat.
    #[test]
    fn fingerprint_parts_stay_small() {
        assert!(std::mem::size_of::<FingerprintParts>() <= 112);
        let plain = FingerprintParts::new("d".into(), "a".into(), None, None, None);
        assert!(plain.rare.is_none());
        let json = serde_json::to_value(&plain).unwrap();
        assert_eq!(json.as_object().unwrap().len(), 3, "{json}");
        let modelled = FingerprintParts::new("d".into(), "a".into(), None, Some("m".into()), None);
        let json = serde_json::to_value(&modelled).unwrap();
        assert_eq!(json["model"], "m");
        let back: FingerprintParts = serde_json::from_value(json).unwrap();
        assert_eq!(back, modelled);
        assert_eq!((back.model(), back.schema()), (Some("m"), None));
        // A version other than this engine's, read from an older record, is kept as read.
        let older: FingerprintParts = serde_json::from_value(serde_json::json!({
            "version": "stagegraph-cache-0", "definition": "d", "action": "a"
        }))
        .unwrap();
        assert_eq!(older.version, "stagegraph-cache-0");
        assert!(older.rare.is_none());
    }

    /// A run folder whose `run.json` is `text`.
    fn write_record(state_dir: &Path, id: &str, text: &str) {
        let dir = runs_dir(state_dir).join(id);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("run.json"), text).unwrap();
    }

    /// The head is read from the start of the file: what follows it is never parsed, so a
    /// record whose stages are cut short (or megabytes long) reads as fast as a small one.
    #[test]
    fn a_records_head_is_read_without_its_stages() {
        let state = tempfile::tempdir().unwrap();
        let write = |id: &str, text: &str| write_record(state.path(), id, text);
        write(
            "r1",
            r#"{"run_id": "r1", "workflow": "w", "status": "completed", "inputs": {"a": [1, {"b": 2}]},
               "dry_run": false, "stages": {"s1": {"status": "#,
        );
        write(
            "r2",
            r#"{"dry_run": true, "run_id": "r2", "workflow": "w", "stages": {"s1": "#,
        );
        write("r3", r#"{"run_id": "r3", "workflow": "v", "stages": {}}"#);
        write("r4", r#"["not", "a", "record"]"#);
        let head = |id| read_head(state.path(), id);
        let expect = |workflow: &str, dry_run| {
            Some(Head {
                workflow: workflow.into(),
                dry_run,
                status: None,
            })
        };
        let completed = Some(Head {
            status: Some(RunStatus::Completed),
            ..expect("w", false).unwrap()
        });
        assert_eq!(head("r1"), completed);
        assert_eq!(head("r2"), expect("w", true));
        assert_eq!(head("r3"), expect("v", false));
        assert_eq!(head("r4"), None);
        assert_eq!(head("missing"), None);
        assert!(is_dry_run(state.path(), "r2"));
        assert!(!is_dry_run(state.path(), "r1"));
        // The newest real run of `w` is r1 (r2 is a dry-run; r3 is another workflow's).
        assert_eq!(latest_real_run_id(state.path(), "w").as_deref(), Some("r1"));
        assert_eq!(latest_real_run_id(state.path(), "v").as_deref(), Some("r3"));
    }

    /// Pruning asks each run it would remove whether it is still in progress. A record whose
    /// head says it ended is removed on its head alone: its stages are never parsed (here they
    /// are cut short, so a whole read would fail and, the folder being new, keep the run).
    /// One that says `running` and whose process is alive stays.
    #[test]
    fn pruning_reads_an_ended_runs_head_only() {
        let state = tempfile::tempdir().unwrap();
        let write = |id: &str, text: &str| write_record(state.path(), id, text);
        let holder = serde_json::to_string(&super::super::holder::Holder::current()).unwrap();
        write(
            "20260101T000000.000Z-0001",
            r#"{"run_id": "a", "workflow": "w", "status": "completed", "dry_run": false, "stages": {"s1": {"st"#,
        );
        write(
            "20260101T000001.000Z-0002",
            &format!(
                r#"{{"run_id": "b", "workflow": "w", "status": "running", "inputs": {{}},
                    "started_at": "2026-01-01T00:00:01.000Z", "duration_ms": 0, "dry_run": false,
                    "cwd": "/", "stages": {{}}, "holder": {holder}}}"#
            ),
        );
        write(
            "20260101T000002.000Z-0003",
            r#"{"run_id": "c", "workflow": "w", "status": "completed", "inputs": {},
                "started_at": "2026-01-01T00:00:02.000Z", "duration_ms": 0, "dry_run": false,
                "cwd": "/", "stages": {}}"#,
        );
        let removed = prune(state.path(), 1, None);
        assert_eq!(removed, vec!["20260101T000000.000Z-0001".to_string()]);
        assert!(runs_dir(state.path())
            .join("20260101T000001.000Z-0002")
            .exists());
    }

    #[test]
    fn a_failed_rewrite_is_spaced_like_a_written_one() {
        let state = tempfile::tempdir().unwrap();
        let dir = runs_dir(state.path()).join("r1");
        let mut files = RunFiles::create(dir.clone()).unwrap();
        // Time passes only as the test says: the spacing is measured, not raced.
        let clock = Clock::fake();
        files.clock = clock.clone();
        let mut record: RunRecord = serde_json::from_value(serde_json::json!({
            "run_id": "r1", "workflow": "w", "status": "running", "inputs": {},
            "started_at": "2026-11-30T00:00:00.000Z", "cwd": ".", "files": [], "stages": {}
        }))
        .unwrap();
        // The folder is gone: run.json cannot be written.
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(files.save(&mut record, Rewrite::Now).is_err());
        // Not tried again at once, but still due.
        assert!(files.save(&mut record, Rewrite::IfDue).is_ok());
        let due = files.rewrite_due_in().expect("the record is still due");
        assert!(due > Duration::from_millis(50), "retried after {due:?}");
        // Held back until the spacing has passed, then tried again (and failing again).
        clock.advance(due.saturating_sub(Duration::from_millis(1)));
        assert!(files.save(&mut record, Rewrite::IfDue).is_ok());
        clock.advance(Duration::from_millis(1));
        assert_eq!(files.rewrite_due_in(), Some(Duration::ZERO));
        assert!(files.save(&mut record, Rewrite::IfDue).is_err());
    }

    /// A stage written once is written as it would be at every rewrite, and reads back the same.
    /// A large `[outputs]` value is kept in a file, null in `run.json`, and read back; a
    /// missing or damaged file leaves it null and still named.
    #[test]
    fn a_large_run_output_is_kept_in_a_file_and_read_back() {
        let state = tempfile::tempdir().unwrap();
        let dir = runs_dir(state.path()).join("r1");
        let mut files = RunFiles::create(dir.clone()).unwrap();
        let big = Value::from("x".repeat(usize::try_from(LARGE_OUTPUT).unwrap()));
        let mut record: RunRecord = serde_json::from_value(serde_json::json!({
            "run_id": "r1", "workflow": "w", "status": "completed", "inputs": {},
            "started_at": "2026-11-30T00:00:00.000Z", "cwd": ".", "files": [], "stages": {},
            "outputs": { "big": big, "small": 1 }
        }))
        .unwrap();
        files.save(&mut record, Rewrite::Now).unwrap();
        // The record in memory keeps the value; the file on disk does not.
        assert_eq!(record.outputs.as_ref().unwrap()["big"], big);
        let text = std::fs::read_to_string(dir.join("run.json")).unwrap();
        assert!(text.len() < 2_000, "{} bytes", text.len());
        let raw: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(
            raw["outputs"],
            serde_json::json!({ "big": null, "small": 1 })
        );
        let stored: StoredValue =
            serde_json::from_value(raw["output_files"]["big"].clone()).unwrap();
        assert_eq!(stored.size, LARGE_OUTPUT + 2);
        assert!(
            stored.path.starts_with("outputs/output-"),
            "{}",
            stored.path
        );
        // Saved again: the same file, written once.
        files.save(&mut record, Rewrite::Now).unwrap();
        assert_eq!(
            std::fs::read_dir(dir.join("artifacts/outputs"))
                .unwrap()
                .count(),
            1
        );

        let read = read_record(state.path(), "r1").unwrap();
        assert_eq!(read.outputs.as_ref().unwrap()["big"], big);
        assert_eq!(read.outputs.as_ref().unwrap()["small"], 1);
        let as_written = read_record_as_written(state.path(), "r1").unwrap();
        assert_eq!(as_written.outputs.as_ref().unwrap()["big"], Value::Null);

        // Damaged (same size, other bytes), then missing: null, still named.
        let file = dir.join("artifacts").join(&stored.path);
        let mut bytes = std::fs::read(&file).unwrap();
        bytes[1] = b'y';
        std::fs::write(&file, bytes).unwrap();
        let read = read_record(state.path(), "r1").unwrap();
        assert_eq!(read.outputs.as_ref().unwrap()["big"], Value::Null);
        assert!(read.output_files.contains_key("big"));
        std::fs::remove_file(&file).unwrap();
        let read = read_record(state.path(), "r1").unwrap();
        assert_eq!(read.outputs.as_ref().unwrap()["big"], Value::Null);
    }

    /// Reading a record and finding a run fail with typed errors, rendered as they always were.
    #[test]
    fn unreadable_records_and_unfound_runs_are_typed_errors() {
        let state = tempfile::tempdir().unwrap();
        let runs = runs_dir(state.path());
        let path = runs.join("r1").join("run.json");
        match read_record(state.path(), "r1") {
            Err(error @ RecordError::Unreadable { .. }) => assert_eq!(
                error.to_string(),
                format!(
                    "cannot read {}: No such file or directory (os error 2)",
                    path.display()
                )
            ),
            other => panic!("{other:?}"),
        }
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, "{").unwrap();
        match read_record_as_written(state.path(), "r1") {
            Err(error @ RecordError::NotARecord { .. }) => {
                let text = error.to_string();
                let prefix = format!("{} is not a run record: ", path.display());
                assert!(text.starts_with(&prefix), "{text}");
            }
            other => panic!("{other:?}"),
        }

        let dirs = [state.path().to_path_buf()];
        let empty = tempfile::tempdir().unwrap();
        match locate_run(&[empty.path().to_path_buf()], "last") {
            Err(error @ LocateError::NoRuns { .. }) => assert_eq!(
                error.to_string(),
                format!(
                    "no runs recorded in {} (dry-runs aside)",
                    runs_dir(empty.path()).display()
                )
            ),
            other => panic!("{other:?}"),
        }
        match locate_run(&dirs, "x") {
            Err(error @ LocateError::NoSuchRun { .. }) => assert_eq!(
                error.to_string(),
                format!("no run `x` in {}", runs.display())
            ),
            other => panic!("{other:?}"),
        }
        std::fs::create_dir_all(runs.join("r2")).unwrap();
        std::fs::write(runs.join("r2").join("run.json"), "{}").unwrap();
        match locate_run(&dirs, "r") {
            Err(error @ LocateError::Ambiguous { count: 2, .. }) => {
                assert_eq!(error.to_string(), "`r` matches 2 runs; give more of the id");
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(locate_run(&dirs, "r2").unwrap().0, "r2");
    }

    #[test]
    fn output_lines_are_written_as_serde_writes_them() {
        let outputs = [
            serde_json::json!(""),
            serde_json::json!({"stdout": "a \"quoted\" line\n\u{1}\u{7f}é", "exit_code": 0, "ratio": 0.1}),
            serde_json::json!([1, null, true, {"k\\": [2.5e-9]}]),
        ];
        for output in &outputs {
            let line = OutputLineRef {
                stage: "s \"1\"",
                fingerprint: "ab12",
                sha256: "cd34",
                output,
            };
            let mut written = Vec::new();
            line.write(&mut written).unwrap();
            assert_eq!(
                String::from_utf8(written).unwrap(),
                serde_json::to_string(&line).unwrap()
            );
        }
    }

    #[test]
    fn events_are_written_as_documented() {
        let notes = vec!["(dry-run) would run sh -c true".to_string()];
        // Each line as serde_json writes it, and as the run writes it (two events by hand).
        let line = |event| {
            let stamped = Stamped {
                event,
                at: "2026-11-30T00:00:00.000Z".into(),
                run_id: "r1",
            };
            let serialized = serde_json::to_string(&stamped).unwrap();
            let mut written = Vec::new();
            stamped.write(&mut written).unwrap();
            assert_eq!(String::from_utf8(written).unwrap(), serialized);
            serialized
        };
        assert_eq!(
            line(Event::StageStarted { stage: "a \"b\"" }),
            r#"{"event":"stage_started","stage":"a \"b\"","at":"2026-11-30T00:00:00.000Z","run_id":"r1"}"#
        );
        let usage = UsageTotals::default();
        let finished = line(Event::StageFinished {
            stage: "s",
            status: "succeeded",
            duration_ms: 0,
            error: None,
            exit: Some("done\n"),
            notes: &[],
            usage: Some(&usage),
        });
        assert!(finished.contains(r#""exit":"done\n","notes":[],"usage":{"#));
        assert_eq!(
            line(Event::StageFinished {
                stage: "gate",
                status: "failed",
                duration_ms: 12,
                error: Some("boom"),
                exit: None,
                notes: &notes,
                usage: None,
            }),
            r#"{"event":"stage_finished","stage":"gate","status":"failed","duration_ms":12,"error":"boom","exit":null,"notes":["(dry-run) would run sh -c true"],"at":"2026-11-30T00:00:00.000Z","run_id":"r1"}"#
        );
        let exit = ExitInfo {
            stage: Some("gate".into()),
            message: "nothing to do".into(),
        };
        assert_eq!(
            line(Event::RunFinished {
                status: "exited",
                exit: Some(&exit),
                error: None,
                duration_ms: 3,
                usage: None,
            }),
            r#"{"event":"run_finished","status":"exited","exit":{"stage":"gate","message":"nothing to do"},"error":null,"duration_ms":3,"at":"2026-11-30T00:00:00.000Z","run_id":"r1"}"#
        );
    }
}
