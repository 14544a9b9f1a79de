//! The run's files, written by a thread of their own.
//!
//! In a rerun whose stages are all reused, writing the record (two event lines and an output
//! line a stage, `run.json` at megabytes) took a quarter of the time. The scheduling thread now
//! hands each stage's record to a recorder thread and goes on to the next stage, so the record
//! is written on another core. The recorder keeps [`RunFiles`]' rules: the logs reach their
//! files before every rewrite of `run.json`, rewrites are spaced, and what it was handed is
//! written in the order it was handed.

use std::cell::RefCell;
use std::path::PathBuf;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender, TryRecvError};
use std::sync::Arc;
use std::thread::JoinHandle;

use serde_json::Value;

use super::progress::Reporter;
use super::record::{Event, OutputLineRef, Rewrite, RunFiles, RunRecord, StageRecord, Stamped};

/// Notes are handed over this many at a time: waking the recorder for each would cost the
/// scheduling thread a system call a stage. At 64, the wakes (a `futex` call each, about 300
/// for 10,000 stages) were 7% of the scheduling thread's samples in a dry-run of a chain of
/// 10,000 stages; at 512 they are about 40. A stage that waits hands over what is held at once
/// ([`Recorder::hand_over`]), so a larger batch delays nothing a slow stage would show.
const BATCH: usize = 512;

/// At most this many batches wait for the recorder; past that, the scheduling thread waits for
/// room. A no-op of 10,000 reused stages hands over its notes faster than the recorder writes
/// them whenever the pool and the scheduling thread hold both cores: with no bound, the notes
/// waiting reached 8,000-17,000 (two a stage, each holding the stage's record), and the highest
/// peak of 21-31 runs was up to 2.0 MB above their median (plain release build, wide and
/// chain). With eight, at most about 5,000 wait and the highest peak is within 0.3-0.8 MB of
/// the median, the wall time within the noise. The run waits for every note to be written
/// before it ends, so the bound moves work rather than adding any; but a scheduling thread
/// that waits starts no batch, so a smaller bound idles a core (one batch cost 2-7 ms, two
/// 0-3 ms; book/src/benchmarks.md).
const BACKLOG: usize = 8;

/// The channel to the recorder, bounded by [`BACKLOG`].
fn backlog() -> (SyncSender<Vec<Note>>, Receiver<Vec<Note>>) {
    mpsc::sync_channel(BACKLOG)
}

/// The handle the scheduling thread keeps.
pub(crate) struct Recorder {
    tx: Option<SyncSender<Vec<Note>>>,
    /// Notes not handed over yet; see [`Recorder::hand_over`].
    pending: RefCell<Vec<Note>>,
    thread: Option<JoinHandle<(RunRecord, std::io::Result<()>)>>,
}

/// A stage that finished, as the record keeps it.
pub(crate) struct Finished {
    pub index: usize,
    pub entry: StageRecord,
    pub exit: Option<String>,
    pub notes: Vec<String>,
    /// Its output for `outputs.jsonl`, beside the entry's fingerprint and output hash.
    pub output: Option<Value>,
    pub at: String,
}

enum Note {
    /// A run-level event, as its line.
    Line(Vec<u8>),
    Started {
        index: usize,
        at: String,
    },
    Finished(Box<Finished>),
    /// The run-level fields changed (the `stages` of this one are not read).
    Header(Box<RunRecord>),
}

impl Recorder {
    /// Start the recorder on `record`, whose stages (`ids`, each `not_run` until it starts) it
    /// keeps from now on. Its thread makes the stages' map and writes `run.json` first thing, so
    /// the scheduling thread goes on to the first stage meanwhile (at 10,000 stages the map and
    /// the first `run.json` were a tenth of a dry-run's time before its first stage). With
    /// `prune` (the state folder, and how many runs of a workflow to keep in how many bytes),
    /// older records are removed while the run goes on.
    pub(crate) fn start(
        mut files: RunFiles,
        mut record: RunRecord,
        ids: Vec<Arc<str>>,
        reporter: Reporter,
        prune: Option<(PathBuf, usize, Option<u64>)>,
    ) -> std::io::Result<Self> {
        let (tx, rx) = backlog();
        let thread = std::thread::Builder::new()
            .name("recorder".into())
            .spawn(move || {
                record.stages = super::record::not_run_stages(ids);
                if let Err(error) = files.save(&mut record, Rewrite::Now) {
                    reporter.line(&format!("warning: cannot write run.json: {error}"));
                }
                if let Some((state_dir, keep, keep_bytes)) = prune {
                    super::record::prune(&state_dir, keep, keep_bytes);
                }
                serve(files, record, rx, reporter)
            })?;
        Ok(Recorder {
            tx: Some(tx),
            pending: RefCell::new(Vec::with_capacity(BATCH)),
            thread: Some(thread),
        })
    }

    fn send(&self, note: Note) {
        let full = {
            let mut pending = self.pending.borrow_mut();
            pending.push(note);
            pending.len() >= BATCH
        };
        if full {
            self.hand_over();
        }
    }

    /// Hand the notes held here to the recorder: when a batch is full, and whenever the
    /// scheduling thread is about to wait, so nothing stays here while stages run.
    pub(crate) fn hand_over(&self) {
        let mut pending = self.pending.borrow_mut();
        if pending.is_empty() {
            return;
        }
        let batch = std::mem::replace(&mut *pending, Vec::with_capacity(BATCH));
        if let Some(tx) = &self.tx {
            // The recorder outlives every send: it stops when the sender is dropped. A full
            // backlog waits for the recorder to take a batch.
            let _ = tx.send(batch);
        }
    }

    /// A run-level event.
    pub(crate) fn line(&self, event: &Stamped) {
        if let Ok(mut line) = serde_json::to_vec(event) {
            line.push(b'\n');
            self.send(Note::Line(line));
        }
    }

    pub(crate) fn started(&self, index: usize, at: String) {
        self.send(Note::Started { index, at });
    }

    pub(crate) fn finished(&self, finished: Finished) {
        self.send(Note::Finished(Box::new(finished)));
    }

    /// The run-level fields as they are now (the stages of `record`, which the recorder keeps,
    /// are not read).
    pub(crate) fn header(&self, record: &RunRecord) {
        let header = RunRecord {
            stages: Default::default(),
            ..record.clone()
        };
        self.send(Note::Header(Box::new(header)));
    }

    /// Write the final record, wait for it, and hand it back with its stages.
    pub(crate) fn finish(mut self, record: &RunRecord) -> (RunRecord, std::io::Result<()>) {
        self.header(record);
        match self.stop() {
            Some(Ok(done)) => done,
            _ => (
                record.clone(),
                Err(std::io::Error::other("the recorder thread stopped")),
            ),
        }
    }

    /// Hand over what is held, let go, and wait for the last rewrite (once).
    fn stop(&mut self) -> Option<std::thread::Result<(RunRecord, std::io::Result<()>)>> {
        self.hand_over();
        drop(self.tx.take());
        self.thread.take().map(JoinHandle::join)
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        let _ = self.stop();
    }
}

/// The recorder's loop: write what arrives, in order; while nothing does, push the buffered
/// logs out and land a held-back rewrite when it is due. When the scheduling thread lets go,
/// the last rewrite.
fn serve(
    mut files: RunFiles,
    mut record: RunRecord,
    rx: Receiver<Vec<Note>>,
    reporter: Reporter,
) -> (RunRecord, std::io::Result<()>) {
    let warn = |what: &str, error: std::io::Error| {
        reporter.line(&format!("warning: cannot write {what}: {error}"));
    };
    loop {
        let batch = match rx.try_recv() {
            Ok(batch) => batch,
            Err(TryRecvError::Disconnected) => break,
            Err(TryRecvError::Empty) => match idle(&mut files, &mut record, &rx, &warn) {
                Some(batch) => batch,
                None => break,
            },
        };
        for note in batch {
            if let Err(error) = apply(&mut files, &mut record, note) {
                warn("the run's logs", error);
            }
        }
        if let Err(error) = files.save(&mut record, Rewrite::IfDue) {
            warn("run.json", error);
        }
    }
    let result = files.save(&mut record, Rewrite::Now);
    (record, result)
}

/// Wait for the next notes, the logs flushed, as long as it takes but for a held-back rewrite of
/// `run.json`, done when due. A file that cannot be written is warned about and waited on like
/// any other (failed rewrites are spaced as written ones). `None` once the sender is gone.
fn idle(
    files: &mut RunFiles,
    record: &mut RunRecord,
    rx: &Receiver<Vec<Note>>,
    warn: &dyn Fn(&str, std::io::Error),
) -> Option<Vec<Note>> {
    if let Err(error) = files.flush_logs() {
        warn("the run's logs", error);
    }
    loop {
        let Some(due) = files.rewrite_due_in() else {
            return rx.recv().ok();
        };
        match rx.recv_timeout(due) {
            Ok(note) => return Some(note),
            Err(RecvTimeoutError::Timeout) => {
                if let Err(error) = files.save(record, Rewrite::IfDue) {
                    warn("run.json", error);
                }
            }
            Err(RecvTimeoutError::Disconnected) => return None,
        }
    }
}

/// Write one note to the logs and the record.
fn apply(files: &mut RunFiles, record: &mut RunRecord, note: Note) -> std::io::Result<()> {
    match note {
        Note::Line(line) => files.event_line(&line),
        Note::Header(header) => {
            let stages = std::mem::take(&mut record.stages);
            *record = RunRecord { stages, ..*header };
            Ok(())
        }
        Note::Started { index, at } => {
            let Some((id, entry)) = record.stages.get_index_mut(index) else {
                return Ok(());
            };
            entry.status = super::StageStatus::Running;
            let result = files.event(&Stamped {
                event: Event::StageStarted { stage: id },
                at: at.clone(),
                run_id: &record.run_id,
            });
            entry.started_at = Some(at);
            result
        }
        Note::Finished(finished) => {
            let Finished {
                index,
                mut entry,
                exit,
                notes,
                output,
                at,
            } = *finished;
            let Some((id, slot)) = record.stages.get_index_mut(index) else {
                return Ok(());
            };
            // The output first: the record never claims one `resume` cannot find.
            if let (Some(output), Some(fingerprint), Some(sha256)) =
                (&output, &entry.fingerprint, &entry.output_sha256)
            {
                let mut digits = [[0u8; 64]; 2];
                let [fingerprint_digits, sha256_digits] = &mut digits;
                entry.output_cut = files.output(&OutputLineRef {
                    stage: id,
                    fingerprint: fingerprint.as_str(fingerprint_digits),
                    sha256: sha256.as_str(sha256_digits),
                    output,
                })?;
            }
            files.event(&Stamped {
                event: Event::StageFinished {
                    stage: id,
                    status: entry.status.as_str(),
                    duration_ms: entry.duration_ms,
                    error: entry.details().error.as_deref(),
                    exit: exit.as_deref(),
                    notes: &notes,
                    usage: entry.details().usage.as_deref(),
                },
                at,
                run_id: &record.run_id,
            })?;
            entry.started_at = slot.started_at.take();
            *slot = entry;
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run::record::{self, StageStatus};
    use crate::run::RunOptions;

    fn a_record(run_id: &str) -> RunRecord {
        RunRecord {
            run_id: run_id.into(),
            workflow: "w".into(),
            status: crate::run::RunStatus::Running,
            exit: None,
            error: None,
            inputs: Default::default(),
            started_at: record::now_rfc3339(),
            finished_at: None,
            duration_ms: 0,
            dry_run: false,
            resumed_from: None,
            cwd: ".".into(),
            files: Vec::new(),
            stages: Default::default(),
            outputs: None,
            output_files: Default::default(),
            usage: Default::default(),
            holder: None,
        }
    }

    fn cached(n: u64) -> Finished {
        let mut entry = StageRecord::not_run();
        entry.status = StageStatus::Cached;
        entry.output_sha256 = Some(format!("sha{n}").as_str().into());
        entry.fingerprint = Some(format!("fp{n}").as_str().into());
        Finished {
            index: n as usize,
            entry,
            exit: None,
            notes: Vec::new(),
            output: Some(Value::from(n)),
            at: record::now_rfc3339(),
        }
    }

    #[test]
    fn what_the_scheduler_hands_over_is_written_in_order_and_handed_back() {
        let state = tempfile::tempdir().unwrap();
        let ids: Vec<String> = (0..150).map(|i| format!("s{i}")).collect();
        let id_refs: Vec<&str> = ids.iter().map(String::as_str).collect();
        let dir = record::runs_dir(state.path()).join("r1");
        let files = RunFiles::create(dir.clone()).unwrap();
        let reporter = Reporter::new(&RunOptions::default(), 0);
        let ids = id_refs.iter().map(|&id| id.into()).collect();
        let recorder = Recorder::start(files, a_record("r1"), ids, reporter, None).unwrap();
        // More than a batch, so some notes cross before the end and some with it.
        for n in 0..150 {
            recorder.started(n as usize, record::now_rfc3339());
            recorder.finished(cached(n));
        }
        let mut header = a_record("r1");
        header.status = crate::run::RunStatus::Completed;
        let (back, written) = recorder.finish(&header);
        written.unwrap();

        assert_eq!(back.status, crate::run::RunStatus::Completed);
        assert_eq!(back.stages.len(), 150);
        let on_disk = record::read_record(state.path(), "r1").unwrap();
        assert_eq!(on_disk.status, crate::run::RunStatus::Completed);
        for (n, (id, stage)) in on_disk.stages.iter().enumerate() {
            assert_eq!(&**id, format!("s{n}"));
            assert_eq!(stage.status, StageStatus::Cached);
            assert!(stage.started_at.is_some(), "{id} keeps when it started");
        }
        let outputs = record::read_outputs(state.path(), "r1");
        assert_eq!(outputs.len(), 150);
        assert_eq!(outputs["s149"].output, Value::from(149));
        let events = std::fs::read_to_string(dir.join("events.jsonl")).unwrap();
        let kinds: Vec<String> = events
            .lines()
            .map(|l| {
                let v: Value = serde_json::from_str(l).unwrap();
                format!(
                    "{} {}",
                    v["event"].as_str().unwrap(),
                    v["stage"].as_str().unwrap()
                )
            })
            .collect();
        assert_eq!(kinds.len(), 300);
        assert_eq!(kinds[0], "stage_started s0");
        assert_eq!(kinds[1], "stage_finished s0");
        assert_eq!(kinds[299], "stage_finished s149");
    }

    #[test]
    fn the_notes_waiting_for_the_recorder_are_bounded() {
        let (tx, _rx) = backlog();
        for _ in 0..BACKLOG {
            tx.try_send(Vec::new()).unwrap();
        }
        assert!(
            matches!(tx.try_send(Vec::new()), Err(mpsc::TrySendError::Full(_))),
            "a batch past the backlog waits for room"
        );
    }

    #[test]
    fn a_recorder_let_go_without_finishing_still_writes_what_it_was_handed() {
        let state = tempfile::tempdir().unwrap();
        let dir = record::runs_dir(state.path()).join("r2");
        let files = RunFiles::create(dir).unwrap();
        let reporter = Reporter::new(&RunOptions::default(), 0);
        let ids = vec!["a".into(), "b".into()];
        let recorder = Recorder::start(files, a_record("r2"), ids, reporter, None).unwrap();
        recorder.started(0, record::now_rfc3339());
        recorder.finished(cached(0));
        drop(recorder);
        let on_disk = record::read_record(state.path(), "r2").unwrap();
        assert_eq!(on_disk.stages["a"].status, StageStatus::Cached);
        assert_eq!(on_disk.stages["b"].status, StageStatus::NotRun);
        assert_eq!(record::read_outputs(state.path(), "r2").len(), 1);
    }
}
