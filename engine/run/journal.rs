//! Work in progress, as it happens: `artifacts/items.jsonl` holds each `foreach` item's output
//! as soon as the item finishes, `artifacts/processes.jsonl` each stage process as it starts.
//!
//! `outputs.jsonl` learns of a `foreach` stage only once all its items are done, so a run killed
//! halfway through 400 items would leave a resume nothing to reuse. The item journal fills that
//! gap: a resume reuses every item the killed run finished and runs only the others. The process
//! journal names (pid, start time, host) every process a stage started, and every such process
//! carries [`MARKER`] in its environment (inherited by whatever it starts in turn), so a resume
//! can find what a killed run left running and stop it before the stage runs again.
//!
//! Both files are written the way the other logs of a record are: appended, one line a
//! `write` call with nothing held back in this process, so a kill at any moment leaves every
//! line that was reported written, and at worst a torn last line, which readers skip. (Like
//! `run.json`, they are left to the system to write back: they outlive the engine, not the
//! machine.) An item output larger than [`LARGE_OUTPUT`] is written once to a file of its own
//! under `artifacts/outputs/`, before the line that names it, as `outputs.jsonl` does. Secrets
//! are redacted from each line as from the other logs. A line that cannot be written stops that journal for the rest of the run with one
//! warning; the run goes on, and a resume reuses less.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::holder::Holder;
use super::record::{OutputLine, LARGE_OUTPUT};

/// The environment variable every stage process gets: `<run id> <item index or -> <stage id>`.
pub(crate) const MARKER: &str = "STAGEGRAPH_PROCESS";

const ITEMS: &str = "items.jsonl";
const PROCESSES: &str = "processes.jsonl";

/// One finished `foreach` item, as `items.jsonl` keeps it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct ItemLine {
    pub stage: String,
    pub index: usize,
    /// What the item executed (see `StageRunner::item_fingerprint`): a resume reuses the output
    /// for an item whose fingerprint is the same, whatever its place in the list.
    pub fingerprint: String,
    /// The output itself; read from `file` when the line names one.
    #[serde(default)]
    pub output: Value,
    /// An output larger than [`LARGE_OUTPUT`] is kept in a file of its own, this path below
    /// `artifacts/` (`outputs/<stage>-<index>-<sha256 prefix>.json`), instead of in the line.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
    /// The line is a sub-workflow stage's whole output (`stage` is its path, see
    /// [`Journal::within`]), not an item's.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub whole: bool,
}

#[derive(Serialize)]
struct ItemLineRef<'a> {
    stage: &'a str,
    index: usize,
    fingerprint: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    output: Option<&'a serde_json::value::RawValue>,
    #[serde(skip_serializing_if = "Option::is_none")]
    file: Option<&'a str>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    whole: bool,
}

/// One stage process, as `processes.jsonl` keeps it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct ProcessLine {
    pub stage: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub item: Option<usize>,
    #[serde(flatten)]
    pub process: Holder,
}

/// The items a run finished, by stage and fingerprint, and the stages its sub-workflows
/// finished, by path.
#[derive(Debug, Clone, Default)]
pub(crate) struct FinishedItems {
    by_fingerprint: HashMap<(String, String), ItemLine>,
    /// A sub-workflow stage's output, by its path (`sub/inner`, `sub[3]/inner`).
    whole: HashMap<String, ItemLine>,
}

impl FinishedItems {
    /// The items recorded in a run's folder (`runs/<id>`); none when it has no item journal.
    pub(crate) fn read(run_dir: &Path) -> FinishedItems {
        let mut items = FinishedItems::default();
        items.read_more(run_dir);
        items
    }

    /// Add the items recorded in another run's folder; they take the place of those already
    /// read (a resume reads the run it resumes after the runs that one resumed).
    pub(crate) fn read_more(&mut self, run_dir: &Path) {
        let artifacts = run_dir.join("artifacts");
        for mut line in read_lines::<ItemLine>(&artifacts.join(ITEMS)) {
            // An output kept in a file that is missing or damaged: the item did not finish,
            // as a line that did not parse, and a resume runs it again.
            if let Some(file) = &line.file {
                match super::record::read_output_file(&artifacts, file) {
                    Some(output) => line.output = output,
                    None => continue,
                }
            }
            if line.whole {
                self.whole.insert(line.stage.clone(), line);
            } else {
                self.by_fingerprint
                    .insert((line.stage.clone(), line.fingerprint.clone()), line);
            }
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.by_fingerprint.is_empty()
    }

    /// What the sub-workflow that stage `stage` (item `item`) runs finished: its stages'
    /// outputs, as a resume of a top-level run reuses them, and its stages' items (and deeper
    /// sub-workflows'), under their paths within it.
    pub(crate) fn within(
        &self,
        stage: &str,
        item: Option<usize>,
    ) -> (HashMap<String, OutputLine>, FinishedItems) {
        let prefix = path_prefix(stage, item);
        let mut outputs = HashMap::new();
        let mut inner = FinishedItems::default();
        for (path, line) in &self.whole {
            let Some(rest) = path.strip_prefix(&prefix) else {
                continue;
            };
            if rest.contains('/') {
                inner.whole.insert(rest.to_string(), line.clone());
            } else {
                outputs.insert(
                    rest.to_string(),
                    OutputLine {
                        stage: rest.to_string(),
                        fingerprint: line.fingerprint.clone(),
                        sha256: String::new(),
                        output: line.output.clone(),
                        file: None,
                        // The item journal keeps whole values: nothing to unpack.
                        packed: false,
                    },
                );
            }
        }
        for ((path, fingerprint), line) in &self.by_fingerprint {
            if let Some(rest) = path.strip_prefix(&prefix) {
                let line = ItemLine {
                    stage: rest.to_string(),
                    ..line.clone()
                };
                inner
                    .by_fingerprint
                    .insert((rest.to_string(), fingerprint.clone()), line);
            }
        }
        (outputs, inner)
    }

    /// The output of an item of `stage` whose fingerprint is `fingerprint`.
    pub(crate) fn get(&self, stage: &str, fingerprint: &str) -> Option<&Value> {
        self.by_fingerprint
            .get(&(stage.to_string(), fingerprint.to_string()))
            .map(|line| &line.output)
    }

    /// Whether item `index` of `stage` finished.
    pub(crate) fn has_index(&self, stage: &str, index: usize) -> bool {
        self.by_fingerprint
            .values()
            .any(|line| line.stage == stage && line.index == index)
    }
}

/// The stage processes a run recorded, in the order they started.
pub(crate) fn read_processes(run_dir: &Path) -> Vec<ProcessLine> {
    read_lines(&run_dir.join("artifacts").join(PROCESSES))
}

fn read_lines<T: for<'de> Deserialize<'de>>(path: &Path) -> Vec<T> {
    let Ok(file) = File::open(path) else {
        return Vec::new();
    };
    BufReader::new(file)
        .lines()
        .map_while(Result::ok)
        .filter_map(|line| serde_json::from_str(&line).ok())
        .collect()
}

/// The path of a sub-workflow's stages in the journal: `sub/` for those of the sub-workflow
/// stage `sub` runs, `sub[3]/` for its item 3's (stage ids have neither `/` nor `[`).
fn path_prefix(stage: &str, item: Option<usize>) -> String {
    match item {
        Some(index) => format!("{stage}[{index}]/"),
        None => format!("{stage}/"),
    }
}

/// The journal a run writes; inactive (writes nothing) for a run without a record of its own:
/// a dry-run, `plan --explain`. A sub-workflow's stages write to the journal of the run whose
/// stage started the sub-workflow ([`Journal::within`]): its processes as that stage's, its
/// stages' outputs and items under their paths.
#[derive(Clone)]
pub(crate) struct Journal {
    shared: Arc<Shared>,
    /// For a sub-workflow: the stage (and item) of the top-level run it runs in.
    within: Option<(String, Option<usize>)>,
    /// For a sub-workflow: the path its stages are journaled under (`sub/`, `sub[3]/inner/`);
    /// empty at the top level.
    prefix: String,
}

struct Shared {
    run_id: String,
    artifacts: Option<PathBuf>,
    items: Mutex<Sink>,
    processes: Mutex<Sink>,
}

/// A journal file, opened at its first line.
#[derive(Default)]
enum Sink {
    #[default]
    Closed,
    Open(File),
    /// A line could not be written: nothing more is.
    Broken,
}

impl Journal {
    pub(crate) fn new(run_id: &str, run_dir: Option<&Path>) -> Journal {
        Journal {
            shared: Arc::new(Shared {
                run_id: run_id.to_string(),
                artifacts: run_dir.map(|dir| dir.join("artifacts")),
                items: Mutex::default(),
                processes: Mutex::default(),
            }),
            within: None,
            prefix: String::new(),
        }
    }

    /// The journal of a sub-workflow that stage `stage` (item `item`) runs: its processes are
    /// journaled and marked as the top-level stage's; its stages' outputs and items are kept
    /// under the path `stage/` (`stage[item]/`), so a resume reuses the sub-workflow's finished
    /// stages when the stage itself did not finish.
    pub(crate) fn within(&self, stage: &str, item: Option<usize>) -> Journal {
        Journal {
            shared: Arc::clone(&self.shared),
            within: Some(
                self.within
                    .clone()
                    .unwrap_or_else(|| (stage.to_string(), item)),
            ),
            prefix: format!("{}{}", self.prefix, path_prefix(stage, item)),
        }
    }

    /// Whether finished items are kept.
    pub(crate) fn is_active(&self) -> bool {
        self.shared.artifacts.is_some()
    }

    /// Whether this is a sub-workflow's journal, which keeps its stages' outputs.
    pub(crate) fn is_nested(&self) -> bool {
        self.within.is_some()
    }

    /// The stage and item a process of `stage` (item `item`) is journaled as.
    fn owner<'a>(&'a self, stage: &'a str, item: Option<usize>) -> (&'a str, Option<usize>) {
        match &self.within {
            Some((stage, item)) => (stage, *item),
            None => (stage, item),
        }
    }

    /// The value of [`MARKER`] for a process of `stage` (item `item`).
    pub(crate) fn marker(&self, stage: &str, item: Option<usize>) -> String {
        let (stage, item) = self.owner(stage, item);
        let item = item.map_or_else(|| "-".to_string(), |i| i.to_string());
        format!("{} {item} {stage}", self.shared.run_id)
    }

    /// The `TRACEPARENT` of a child of `stage` (item `item`): the span of the top-level stage
    /// (or item) it runs under, as the run's trace will hold it.
    pub(crate) fn traceparent(&self, stage: &str, item: Option<usize>) -> String {
        let (stage, item) = self.owner(stage, item);
        super::otlp::traceparent(&self.shared.run_id, stage, item)
    }

    /// Item `index` of `stage` finished with `output`. Returns a warning the first time a line
    /// cannot be written.
    pub(crate) fn item_finished(
        &self,
        stage: &str,
        index: usize,
        fingerprint: &str,
        output: &Value,
    ) -> Option<String> {
        self.keep(stage, index, fingerprint, output, false)
    }

    /// Stage `stage` of this sub-workflow finished with `output` (the top-level run keeps its
    /// stages' outputs in `outputs.jsonl`). Returns a warning the first time a line cannot be
    /// written.
    pub(crate) fn stage_finished(
        &self,
        stage: &str,
        fingerprint: &str,
        output: &Value,
    ) -> Option<String> {
        if !self.is_nested() {
            return None;
        }
        self.keep(stage, 0, fingerprint, output, true)
    }

    fn keep(
        &self,
        stage: &str,
        index: usize,
        fingerprint: &str,
        output: &Value,
        whole: bool,
    ) -> Option<String> {
        if !self.is_active() {
            return None;
        }
        // Serialized once: its size, its hash and the bytes written all come from this.
        let Ok(bytes) = serde_json::to_vec(output) else {
            return None;
        };
        let path = format!("{}{stage}", self.prefix);
        let stage = path.as_str();
        let mut line = ItemLineRef {
            stage,
            index,
            fingerprint,
            output: None,
            file: None,
            whole,
        };
        let file;
        let raw;
        if bytes.len() as u64 > LARGE_OUTPUT {
            if self.items_broken() {
                return None;
            }
            match self.output_file(stage, index, &bytes) {
                Ok(name) => file = name,
                Err(error) => return self.break_items(&format!("cannot write {ITEMS}: {error}")),
            }
            line.file = Some(&file);
        } else {
            // Compact JSON is UTF-8.
            let Ok(text) = String::from_utf8(bytes) else {
                return None;
            };
            let Ok(value) = serde_json::value::RawValue::from_string(text) else {
                return None;
            };
            raw = value;
            line.output = Some(&raw);
        }
        self.append(&self.shared.items, ITEMS, &line)
    }

    /// Store a large item output (its JSON, `bytes`) once, as
    /// `outputs/<stage>-<index>-<sha256 prefix>.json` below `artifacts/`, written whole or not at
    /// all, secrets redacted; returns that path.
    fn output_file(&self, stage: &str, index: usize, bytes: &[u8]) -> std::io::Result<String> {
        let artifacts = self
            .shared
            .artifacts
            .as_ref()
            .ok_or_else(|| std::io::Error::other("the run has no folder"))?;
        let sha = crate::floor::hash::sha256_hex(bytes);
        // A sub-workflow stage's path has `/`s; the file is a plain name in `outputs/`.
        let stage = stage.replace('/', "+");
        let name = format!("outputs/{stage}-{index}-{}.json", &sha[..16]);
        let path = artifacts.join(&name);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        crate::floor::atomic::replace(&path, ".output.", 0o666, |out| {
            out.write_all(&crate::floor::secrets::redact_bytes(bytes))
        })?;
        Ok(name)
    }

    fn items_broken(&self) -> bool {
        matches!(
            *self
                .shared
                .items
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
            Sink::Broken
        )
    }

    /// The item journal stops; the warning is returned the first time only.
    fn break_items(&self, warning: &str) -> Option<String> {
        let mut sink = self
            .shared
            .items
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if matches!(*sink, Sink::Broken) {
            return None;
        }
        *sink = Sink::Broken;
        Some(warning.to_string())
    }

    /// A process of `stage` (item `item`) started as `pid`.
    pub(crate) fn process_started(
        &self,
        stage: &str,
        item: Option<usize>,
        pid: u32,
    ) -> Option<String> {
        let (stage, item) = self.owner(stage, item);
        let line = ProcessLine {
            stage: stage.to_string(),
            item,
            process: Holder {
                pid,
                started: super::holder::process_start(pid).unwrap_or(0),
                host: super::holder::hostname(),
            },
        };
        self.append(&self.shared.processes, PROCESSES, &line)
    }

    fn append(&self, sink: &Mutex<Sink>, name: &str, line: &impl Serialize) -> Option<String> {
        let artifacts = self.shared.artifacts.as_ref()?;
        let mut bytes = serde_json::to_vec(line).ok()?;
        bytes.push(b'\n');
        let mut sink = sink
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if matches!(*sink, Sink::Closed) {
            match OpenOptions::new()
                .create(true)
                .append(true)
                .open(artifacts.join(name))
            {
                Ok(file) => *sink = Sink::Open(file),
                Err(error) => {
                    *sink = Sink::Broken;
                    return Some(format!("cannot write {name}: {error}"));
                }
            }
        }
        let Sink::Open(file) = &mut *sink else {
            return None;
        };
        // One buffer, one `write_all`: the line reaches the file before the caller goes on.
        // Secrets are redacted here as in every other log of a record.
        if let Err(error) = file.write_all(&crate::floor::secrets::redact_bytes(&bytes)) {
            *sink = Sink::Broken;
            return Some(format!("cannot write {name}: {error}"));
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn items_and_processes_read_back_and_a_torn_line_is_skipped() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("artifacts")).unwrap();
        let journal = Journal::new("r1", Some(dir.path()));
        assert!(journal
            .item_finished("s", 0, "f0", &Value::from("zero"))
            .is_none());
        assert!(journal
            .item_finished("s", 2, "f2", &Value::from(2))
            .is_none());
        assert!(journal
            .process_started("s", Some(1), std::process::id())
            .is_none());
        // What a kill in the middle of a line leaves.
        let path = dir.path().join("artifacts").join(ITEMS);
        let mut file = OpenOptions::new().append(true).open(&path).unwrap();
        file.write_all(br#"{"stage":"s","index":1,"fingerpr"#)
            .unwrap();

        let items = FinishedItems::read(dir.path());
        assert_eq!(items.get("s", "f0"), Some(&Value::from("zero")));
        assert_eq!(items.get("s", "f2"), Some(&Value::from(2)));
        assert_eq!(items.get("t", "f0"), None);
        assert!(items.has_index("s", 2) && !items.has_index("s", 1));
        let processes = read_processes(dir.path());
        assert_eq!(processes.len(), 1);
        assert_eq!(processes[0].item, Some(1));
        assert_eq!(processes[0].process, Holder::current());
        assert_eq!(journal.marker("s", Some(3)), "r1 3 s");
        assert_eq!(journal.marker("a b", None), "r1 - a b");

        // A sub-workflow's processes are its stage's.
        let nested = journal.within("sub", Some(4));
        assert_eq!(nested.marker("inner", None), "r1 4 sub");
        assert_eq!(
            nested.within("deeper", None).marker("x", Some(1)),
            "r1 4 sub"
        );
        assert!(nested.process_started("inner", None, 1).is_none());
        let processes = read_processes(dir.path());
        assert_eq!(
            (processes[1].stage.as_str(), processes[1].item),
            ("sub", Some(4))
        );
    }

    #[test]
    fn a_sub_workflow_keeps_its_stages_and_items_under_its_path() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("artifacts")).unwrap();
        let journal = Journal::new("r1", Some(dir.path()));
        // A sub-workflow's processes are its stage's; its items and its stages' outputs are
        // kept under its path, and read back as the sub-workflow's.
        let nested = journal.within("sub", Some(4));
        assert_eq!(nested.marker("inner", None), "r1 4 sub");
        let deeper = nested.within("deeper", None);
        assert_eq!(deeper.marker("x", Some(1)), "r1 4 sub");
        assert!(nested.is_active() && nested.is_nested() && !journal.is_nested());
        assert!(nested
            .item_finished("inner", 0, "f9", &Value::Null)
            .is_none());
        assert!(nested
            .stage_finished("inner", "f8", &Value::from("in"))
            .is_none());
        assert!(deeper.stage_finished("x", "f7", &Value::from(7)).is_none());
        assert!(journal.stage_finished("top", "f6", &Value::Null).is_none());
        let items = FinishedItems::read(dir.path());
        assert!(items.get("inner", "f9").is_none());
        assert_eq!(items.get("sub[4]/inner", "f9"), Some(&Value::Null));
        let (outputs, inner) = items.within("sub", Some(4));
        assert_eq!(outputs.len(), 1, "{outputs:?}");
        assert_eq!(outputs["inner"].fingerprint, "f8");
        assert_eq!(outputs["inner"].output, Value::from("in"));
        assert_eq!(inner.get("inner", "f9"), Some(&Value::Null));
        let (outputs, _) = inner.within("deeper", None);
        assert_eq!(outputs["x"].output, Value::from(7));
        assert!(items.within("sub", Some(3)).0.is_empty());
        assert!(items.within("sub", None).0.is_empty());
        let big = Value::from("y".repeat(usize::try_from(LARGE_OUTPUT).unwrap() + 1));
        assert!(deeper.stage_finished("large", "f5", &big).is_none());
        let items = FinishedItems::read(dir.path());
        let (_, inner) = items.within("sub", Some(4));
        assert_eq!(inner.within("deeper", None).0["large"].output, big);
    }

    #[test]
    fn a_large_item_output_is_kept_in_a_file_and_a_missing_one_is_not_finished() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("artifacts")).unwrap();
        let journal = Journal::new("r1", Some(dir.path()));
        let big = Value::from("x".repeat(usize::try_from(LARGE_OUTPUT).unwrap() + 1));
        assert!(journal.item_finished("s", 0, "f0", &big).is_none());
        assert!(journal.item_finished("s", 1, "f1", &big).is_none());
        assert!(journal
            .item_finished("s", 2, "f2", &Value::from("small"))
            .is_none());
        let text = std::fs::read_to_string(dir.path().join("artifacts").join(ITEMS)).unwrap();
        assert!(text.len() < 2_000, "{} bytes", text.len());
        let lines: Vec<ItemLine> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let file = lines[0].file.clone().unwrap();
        assert!(
            file.starts_with("outputs/s-0-") && file.ends_with(".json"),
            "{file}"
        );
        assert!(lines[2].file.is_none());

        let items = FinishedItems::read(dir.path());
        assert_eq!(items.get("s", "f0"), Some(&big));
        assert_eq!(items.get("s", "f1"), Some(&big));
        assert_eq!(items.get("s", "f2"), Some(&Value::from("small")));

        // A missing file and a damaged one: those items did not finish; the others did.
        std::fs::remove_file(dir.path().join("artifacts").join(&file)).unwrap();
        let damaged = lines[1].file.clone().unwrap();
        std::fs::write(dir.path().join("artifacts").join(&damaged), "\"xx").unwrap();
        let items = FinishedItems::read(dir.path());
        assert!(items.get("s", "f0").is_none() && !items.has_index("s", 0));
        assert!(items.get("s", "f1").is_none());
        assert_eq!(items.get("s", "f2"), Some(&Value::from("small")));
    }

    #[test]
    fn an_inactive_journal_writes_nothing() {
        let journal = Journal::new("r1", None);
        assert!(!journal.is_active());
        assert!(journal.item_finished("s", 0, "f", &Value::Null).is_none());
    }
}
