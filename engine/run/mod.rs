//! Run: a checked [`Workflow`] -> a [`RunRecord`].
//!
//! The scheduler runs on the calling thread and hands ready stages to a rayon pool of `--jobs`
//! threads; a stage starts as soon as everything it depends on has finished. Stage execution
//! (predicates, rendering, fingerprints, cache, the action, validation) lives in `stage`; the
//! scheduler only orders, records and stops. Nothing here knows what a workflow is for.

use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Map, Value};

use crate::builtins::{LateRoot, LateRoots, LateState, WriteRoots};
use crate::check::{Action, Stage, Workflow};
use crate::floor::hash::Sha256Hex;
use crate::floor::time::Clock;
use crate::format::Busy;
use crate::models::Models;
use crate::template::{Scope, StageSlot, StageTable};

mod blobs;
pub(crate) mod cache;

/// The most a run's record stores of its stages' large outputs unless `[workflow] records`
/// says (`max_size`).
pub(crate) const DEFAULT_RECORD_BUDGET: u64 = 256 << 20;
pub(crate) mod diff;
pub(crate) mod inputs;
pub(crate) mod journal;
mod orphans;
pub(crate) mod otlp;
/// Child processes, their holders and `mkdir` locks live on the ground floor; the old paths
/// stay for the code that names them.
pub(crate) use crate::floor::{holder, locks, process};
mod progress;
pub(crate) mod record;
mod record_json;
mod record_text;
mod recorder;
pub(crate) mod report;
mod stage;
pub(crate) mod stage_error;

pub(crate) use record::{ExitInfo, StageDetails, StageRecord, StageStatus};
pub use record::{RunRecord, RunStatus};

use progress::Reporter;
pub(crate) use progress::SLOW_AFTER;
use record::{Event, FileHash, OutputLine, RunFiles, Stamped, UsageTotals};
use recorder::{Finished, Recorder};
use stage::{StageOutcome, StageRunner};

/// How to run.
#[derive(Debug, Clone)]
pub(crate) struct RunOptions {
    pub jobs: usize,
    pub dry_run: bool,
    pub no_cache: bool,
    pub show_prompts: bool,
    /// Say for each stage whether it would hit the cache and, on a miss, what changed.
    pub explain: bool,
    /// Prompt stages answer from recordings (so a dry-run may send them).
    pub replay: bool,
    /// Print nothing on stderr but errors.
    pub quiet: bool,
    /// Print events as JSON lines on stdout.
    pub json_events: bool,
    pub keep_runs: usize,
    /// Keep the workflow's runs within this many bytes on disk.
    pub keep_size: Option<u64>,
    /// The most a run's record stores of its stages' large outputs.
    pub record_budget: u64,
    /// How `ask` stages are answered (`--answer`, `--yes`, a terminal).
    pub answers: crate::builtins::ask::Answers,
    /// Write a run record (`plan --explain` writes none).
    pub record: bool,
    /// Off a terminal, a stage still running says so after this long, and again each time
    /// as long again has passed.
    pub slow_after: Duration,
    /// Stages whose output is given instead of produced by their action.
    pub given: HashMap<String, Value>,
    /// The run the given outputs come from (a stage selection's), when they are not a test
    /// case's.
    pub given_from: Option<String>,
    /// Stages a stage selection leaves out: recorded `skipped`, their action not run, and an
    /// output that reads one is null.
    pub left_out: std::collections::HashSet<String>,
    /// Variables added to the environment of every command the run starts.
    pub env: Vec<(String, String)>,
    /// Colour the progress lines.
    pub color: bool,
}

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions {
            jobs: std::thread::available_parallelism().map_or(2, std::num::NonZero::get),
            dry_run: false,
            no_cache: false,
            show_prompts: false,
            replay: false,
            explain: false,
            quiet: false,
            json_events: false,
            keep_runs: 50,
            keep_size: None,
            record_budget: DEFAULT_RECORD_BUDGET,
            answers: Default::default(),
            record: true,
            slow_after: progress::SLOW_AFTER,
            given: HashMap::new(),
            given_from: None,
            left_out: std::collections::HashSet::new(),
            env: Vec::new(),
            color: false,
        }
    }
}

/// What the run may use of the world.
pub(crate) struct Runtime<'a> {
    pub models: &'a Models,
    pub cwd: PathBuf,
    pub state_dir: PathBuf,
    /// With `explain`: the run to compare fingerprints with.
    pub previous: Option<RunRecord>,
}

/// The outputs a run may take instead of doing a stage's work, by stage: a resumed run's, read
/// before the run starts, or (a dry-run rehearsing the real path) the last real run's, read
/// when a stage first needs them. A rehearsal whose stages all come from the cache never reads
/// them: at 10,000 stages, reading them before the run was 4.5 MB of the dry-run's peak and 12
/// of its 91 ms.
#[derive(Default)]
pub(crate) struct Reuse {
    outputs: std::sync::OnceLock<HashMap<String, OutputLine>>,
    /// The state folder and the run whose outputs are read at the first use.
    later: Option<(std::path::PathBuf, String)>,
}

impl Reuse {
    pub(crate) fn read(outputs: HashMap<String, OutputLine>) -> Self {
        Reuse {
            outputs: std::sync::OnceLock::from(outputs),
            later: None,
        }
    }

    pub(crate) fn later(state_dir: &std::path::Path, run_id: &str) -> Self {
        Reuse {
            outputs: std::sync::OnceLock::new(),
            later: Some((state_dir.to_path_buf(), run_id.to_string())),
        }
    }

    fn outputs(&self) -> &HashMap<String, OutputLine> {
        self.outputs.get_or_init(|| match &self.later {
            Some((state_dir, run_id)) => record::read_outputs(state_dir, run_id),
            None => HashMap::new(),
        })
    }

    pub(crate) fn get(&self, stage: &str) -> Option<&OutputLine> {
        self.outputs().get(stage)
    }
}

/// A run to resume from: its id and the outputs it recorded.
pub struct ResumeFrom {
    pub(crate) run_id: String,
    pub(crate) outputs: Reuse,
    /// The `foreach` items it finished (of stages it did not finish).
    pub(crate) items: journal::FinishedItems,
    /// The stage processes it started, to stop those it left running.
    pub(crate) processes: Vec<journal::ProcessLine>,
    /// It did not end on its own (killed, crashed): what it left running of the stages this run
    /// runs again is stopped first. (A run that ended waited for its stages' processes; what
    /// they left behind on purpose is theirs.)
    pub(crate) interrupted: bool,
    /// A dry-run's rehearsal of the run's real path: a stage with work whose fingerprint is
    /// the same as in that run takes the output it recorded instead of an assumed one (the run
    /// is not resumed: nothing that a real run would execute is marked reused).
    pub(crate) rehearsal: bool,
    /// An exclusive lock on the resumed run's `resume.lock`, held until this run ends: one
    /// engine at a time resumes a run (the kernel drops it with the process, a kill included).
    pub(crate) claim: Option<std::fs::File>,
}

/// Errors that stop a run before it starts.
#[derive(Debug, thiserror::Error)]
pub(crate) enum RunError {
    #[error("{0}")]
    Invalid(String),
    #[error("cannot write the run record: {0}")]
    Record(#[from] std::io::Error),
}

/// Run a workflow with validated inputs, recording under the state folder.
pub(crate) fn run(
    workflow: &Workflow,
    runtime: &Runtime,
    options: &RunOptions,
    inputs: Map<String, Value>,
    resume: Option<ResumeFrom>,
) -> Result<RunRecord, RunError> {
    let run_id = record::new_run_id();
    let private = workflow
        .records
        .as_ref()
        .is_some_and(|records| records.private);
    if private && !options.dry_run {
        record::make_private(&runtime.state_dir)?;
    }
    let dir = record::runs_dir(&runtime.state_dir).join(&run_id);
    // `plan --explain` records nothing.
    let files = match options.record {
        true => Some(RunFiles::create(dir.clone())?.with_budget(Some(options.record_budget))),
        false => None,
    };
    let reporter = Reporter::new(options, workflow.stages.len());
    if !options.quiet {
        eprintln!(
            "run {run_id} ({}){}",
            workflow.name,
            if options.dry_run { " [dry-run]" } else { "" }
        );
    }
    let mut executor = Executor::new(workflow, runtime, options, inputs, run_id, reporter);
    executor.record.resumed_from = resume
        .as_ref()
        .filter(|r| !r.rehearsal)
        .map(|r| r.run_id.clone());
    executor.rehearsal = resume
        .as_ref()
        .filter(|r| r.rehearsal)
        .map(|r| r.run_id.clone());
    if let Some(resume) = resume.as_ref().filter(|r| r.interrupted && !r.rehearsal) {
        stop_leftovers(resume, &executor.reporter, options.dry_run)?;
    }
    let (outputs, items, _claim) = match resume {
        Some(resume) => (resume.outputs, resume.items, resume.claim),
        None => Default::default(),
    };
    std::thread::scope(|scope| -> Result<(), RunError> {
        // The plan (2 MB at 10,000 stages) is written while the first stages run rather than
        // before them; a run whose plan cannot be written still runs, and says so.
        let plan = files.as_ref().map(|files| {
            let dir = files.dir.clone();
            scope.spawn(move || write_plan(workflow, &dir))
        });
        match files {
            Some(files) => executor.attach(files)?,
            None => executor.keep_record(),
        }
        executor.execute(outputs, items);
        if let Some(Ok(Err(error))) = plan.map(std::thread::ScopedJoinHandle::join) {
            executor
                .reporter
                .line(&format!("warning: cannot write the run's plan: {error}"));
        }
        Ok(())
    })?;
    if let Some(sweep) = executor.strays.take() {
        let _ = sweep.join();
    }
    executor.reporter.done();
    crate::floor::drop_elsewhere("table-drop", executor.table);
    let record = executor.record;
    if private {
        // The folder is 0700 from the start; the files in it are made 0600 once written.
        record::restrict_tree(&runtime.state_dir);
    }
    Ok(record)
}

/// The graph as it ran, beside its record, for `runs report` and `runs diff` (the workflow may
/// change after the run).
fn write_plan(workflow: &Workflow, dir: &Path) -> std::io::Result<()> {
    let plan = crate::plan::Plan::new(workflow);
    crate::floor::atomic::replace(&dir.join(record::PLAN_FILE), ".plan.", 0o666, |out| {
        plan.write_json(out)
    })
}

/// How long a process a killed run left running has to end after SIGTERM, before SIGKILL.
const LEFTOVER_GRACE: std::time::Duration = std::time::Duration::from_secs(5);

/// Stop what the resumed run left running of the stages (items) it did not finish, which this
/// run is about to run again; say so on the terminal. A dry-run only says what it would stop.
fn stop_leftovers(resume: &ResumeFrom, reporter: &Reporter, dry_run: bool) -> Result<(), RunError> {
    let finished = |stage: &str, item: Option<usize>| {
        resume.outputs.get(stage).is_some()
            || item.is_some_and(|index| resume.items.has_index(stage, index))
    };
    let leftovers = orphans::find(&resume.run_id, &resume.processes, &finished);
    if leftovers.is_empty() {
        return Ok(());
    }
    for what in orphans::describe(&leftovers) {
        reporter.line(&match dry_run {
            true => format!(
                "  (dry-run) run {} left {what}; a resume stops it first",
                resume.run_id
            ),
            false => format!(
                "  run {} left {what}; stopping it (SIGTERM, SIGKILL after {}s) \
                 before the stage runs again",
                resume.run_id,
                LEFTOVER_GRACE.as_secs()
            ),
        });
    }
    if dry_run {
        return Ok(());
    }
    let remaining = orphans::stop(&leftovers, &resume.processes, LEFTOVER_GRACE);
    if remaining.is_empty() {
        reporter.line(&format!(
            "  stopped {} process{} of run {}",
            leftovers.len(),
            if leftovers.len() == 1 { "" } else { "es" },
            resume.run_id
        ));
        return Ok(());
    }
    let pids: Vec<String> = remaining.iter().map(u32::to_string).collect();
    Err(RunError::Invalid(format!(
        "cannot stop process {} of run {}, which would run beside its stage run again; \
         stop it, then resume",
        pids.join(", "),
        resume.run_id
    )))
}

/// Why a workflow's state folder could not be found.
#[derive(Debug, thiserror::Error)]
pub(crate) enum StateDirError {
    /// `[workflow] records.project` failed to render.
    #[error(transparent)]
    Project(#[from] stage_error::RenderError),
    /// The records go under the user's state folder, and there is none.
    #[error(
        "`[workflow] records` puts the records under the user's state folder, but neither \
         XDG_STATE_HOME nor HOME names an absolute folder"
    )]
    NoUserStateDir,
}

/// The state folder a run of `workflow` records in: `explicit` (`--state-dir`) when given, else
/// the user folder its `[workflow] records` names (keyed by the project folder its `project`
/// template renders to, with `inputs` and the allowed `env`), else `default`.
pub(crate) fn state_dir_for(
    workflow: &Workflow,
    inputs: &Map<String, Value>,
    cwd: &Path,
    default: &Path,
    explicit: bool,
) -> Result<PathBuf, StateDirError> {
    use crate::format::RecordsLocation;
    let user = workflow
        .records
        .as_ref()
        .is_some_and(|records| records.location == RecordsLocation::User);
    if explicit || !user {
        return Ok(default.to_path_buf());
    }
    let project = match &workflow.records_project {
        Some(tmpl) => {
            let scope = minijinja::Value::from_serialize(json!({
                "inputs": inputs,
                "env": allowed_env(&workflow.env),
            }));
            let rendered = tmpl
                .render(&scope)
                .map_err(|e| stage_error::Part::RecordsProject.failed(e))?;
            cwd.join(rendered.trim())
        }
        None => cwd.to_path_buf(),
    };
    record::user_state_dir(&project).ok_or(StateDirError::NoUserStateDir)
}

/// Record a run that failed before its first stage (its inputs were invalid, its command line
/// wrong): a run record with status `failed` and the error, so `runs show last` tells what
/// happened to a call nobody watched (a hook's).
pub(crate) fn record_failure(
    workflow: &Workflow,
    runtime: &Runtime,
    options: &RunOptions,
    inputs: Map<String, Value>,
    error: String,
) -> Result<RunRecord, RunError> {
    let run_id = record::new_run_id();
    let dir = record::runs_dir(&runtime.state_dir).join(&run_id);
    let files = RunFiles::create(dir)?;
    let quiet = RunOptions {
        quiet: true,
        json_events: false,
        ..options.clone()
    };
    let reporter = Reporter::new(&quiet, workflow.stages.len());
    write_plan(workflow, &files.dir)?;
    let mut executor = Executor::new(workflow, runtime, options, inputs, run_id, reporter);
    executor.attach(files)?;
    executor.emit(Event::RunStarted {
        workflow: &workflow.name,
        inputs: &executor.record.inputs,
        dry_run: options.dry_run,
    });
    executor.record.error = Some(error);
    executor.finish(RunStatus::Failed);
    Ok(executor.record)
}

/// Run a sub-workflow inside a stage: no record of its own; its stages report under the
/// parent stage's name.
pub(crate) fn run_nested(
    workflow: &Workflow,
    runtime: &Runtime,
    options: &RunOptions,
    inputs: Map<String, Value>,
    parent: &str,
    reporter: &Reporter,
    within: Within,
) -> RunRecord {
    let reporter = reporter.child(parent);
    let mut executor = Executor::new(
        workflow,
        runtime,
        options,
        inputs,
        record::new_run_id(),
        reporter,
    );
    executor.journal = Some(within.journal);
    executor.keep_record();
    executor.execute(Reuse::read(within.outputs), within.items);
    executor.record
}

/// Where a sub-workflow runs in the top-level run: the journal its stages write to, and what
/// the resumed run's journal says they finished (their outputs, their items).
pub(crate) struct Within {
    pub journal: journal::Journal,
    pub outputs: HashMap<String, OutputLine>,
    pub items: journal::FinishedItems,
}

struct Executor<'w, 'r> {
    workflow: &'w Workflow,
    runtime: &'r Runtime<'r>,
    options: &'r RunOptions,
    /// The run as it stands; with a recorder, the run-level fields only until the end, when the
    /// recorder hands the stages back.
    record: RunRecord,
    /// The top-level run's files (a sub-workflow has none), and their folder.
    recorder: Option<Recorder>,
    dir: Option<PathBuf>,
    reporter: Reporter,
    table: Arc<StageTable>,
    started: Instant,
    /// Finally stages are running: the run has ended, and nothing they do changes how.
    finally_phase: bool,
    /// A dry-run rehearsing after this run: the outputs to reuse are its.
    rehearsal: Option<String>,
    /// The write roots that read stages, with the scope they are rendered in once those
    /// stages have finished.
    late_roots: Option<(Arc<LateRoots>, minijinja::Value)>,
    /// A sub-workflow's: the journal of the run it runs in (else the run keeps its own).
    journal: Option<journal::Journal>,
    /// The removal of temporary files killed engines stranded, joined before the run ends.
    strays: Option<std::thread::JoinHandle<Vec<PathBuf>>>,
    /// The stages the reporter watches as running ([`Executor::watch`]).
    watched: Vec<bool>,
}

impl<'w, 'r> Executor<'w, 'r> {
    fn new(
        workflow: &'w Workflow,
        runtime: &'r Runtime<'r>,
        options: &'r RunOptions,
        inputs: Map<String, Value>,
        run_id: String,
        reporter: Reporter,
    ) -> Self {
        let record = RunRecord {
            run_id,
            workflow: workflow.name.clone(),
            status: RunStatus::Running,
            exit: None,
            error: None,
            inputs,
            started_at: record::now_rfc3339(),
            finished_at: None,
            duration_ms: 0,
            dry_run: options.dry_run,
            resumed_from: None,
            cwd: runtime.cwd.display().to_string(),
            files: workflow
                .file_hashes
                .iter()
                .map(|(path, sha256)| FileHash {
                    path: path.clone(),
                    sha256: sha256.clone(),
                })
                .collect(),
            // Made by the recorder (see [`Executor::attach`]), or by [`Executor::keep_record`]
            // for a run without one.
            stages: Default::default(),
            outputs: None,
            output_files: Default::default(),
            usage: UsageTotals::default(),
            holder: Some(holder::Holder::current()),
        };
        let table = Arc::new(StageTable::new(
            workflow
                .stages
                .iter()
                .map(|s| Arc::from(s.id.as_str()))
                .collect(),
        ));
        Executor {
            workflow,
            runtime,
            options,
            record,
            recorder: None,
            dir: None,
            reporter,
            table,
            started: Instant::now(),
            finally_phase: false,
            rehearsal: None,
            late_roots: None,
            journal: None,
            strays: None,
            watched: vec![false; workflow.stages.len()],
        }
    }

    /// Keep the record in `files` from now on: a recorder thread writes it (`run.json` at once).
    /// Records beyond `--keep-runs` are pruned meanwhile (not in a dry-run).
    fn attach(&mut self, files: RunFiles) -> std::io::Result<()> {
        self.dir = Some(files.dir.clone());
        let (keep, keep_bytes) = (self.options.keep_runs, self.options.keep_size);
        let prune = ((keep > 0 || keep_bytes.is_some()) && !self.options.dry_run)
            .then(|| (self.runtime.state_dir.clone(), keep, keep_bytes));
        self.recorder = Some(Recorder::start(
            files,
            self.record.clone(),
            self.stage_ids(),
            self.reporter.clone(),
            prune,
        )?);
        Ok(())
    }

    /// Keep the record's stages here, for a run without a recorder (a sub-workflow's, `plan
    /// --explain`).
    fn keep_record(&mut self) {
        self.record.stages = record::not_run_stages(self.stage_ids());
    }

    /// The stages' ids, shared with the stage table (one copy of each for the run).
    fn stage_ids(&self) -> Vec<Arc<str>> {
        self.table.ids().cloned().collect()
    }

    /// The run-level fields changed: the record says so at its next rewrite.
    fn header_changed(&self) {
        if let Some(recorder) = &self.recorder {
            recorder.header(&self.record);
        }
    }

    /// A run-level event, to the reporter and the record.
    fn emit(&self, event: Event) {
        let event = Stamped {
            event,
            at: record::now_rfc3339(),
            run_id: &self.record.run_id,
        };
        self.reporter.event(&event);
        if let Some(recorder) = &self.recorder {
            recorder.line(&event);
        }
    }

    fn stage_started(&mut self, index: usize, at: String) {
        let stage = &self.workflow.stages[index];
        if self.reporter.wants_events() {
            self.reporter.event(&Stamped {
                event: Event::StageStarted { stage: &stage.id },
                at: at.clone(),
                run_id: &self.record.run_id,
            });
        }
        match &self.recorder {
            Some(recorder) => recorder.started(index, at),
            None => {
                if let Some(entry) = self.record.stages.get_mut(stage.id.as_str()) {
                    entry.status = StageStatus::Running;
                    entry.started_at = Some(at);
                }
            }
        }
    }

    /// A started stage has work to do (in place or on a worker): the reporter shows it as
    /// running and says so if it runs long. A stage whose output is reused is over at once and
    /// is not watched: in a rerun of 10,000 reused stages, adding and removing each from the
    /// watch list was 3% of the scheduling thread's time.
    fn watch(&mut self, index: usize) {
        self.reporter.started(&self.workflow.stages[index].id);
        self.watched[index] = true;
    }

    /// What ordinary stages see as `run`: `status` is `running` (finally stages and `[outputs]`
    /// see [`Self::ended_value`]).
    fn run_value(&self, status: RunStatus) -> minijinja::Value {
        minijinja::Value::from_serialize(json!({
            "id": self.record.run_id,
            "dir": self.dir.as_ref().map(|d| d.display().to_string()),
            "started_at": self.record.started_at,
            "workflow": self.workflow.name,
            "dry_run": self.options.dry_run,
            "status": status.as_str(),
            "exit": self.record.exit,
            "error": Value::Null,
        }))
    }

    /// What finally stages see as `run`: how the run ended (`succeeded`, `exited`, `failed`),
    /// with `exit` and `error`.
    fn ended_value(&self, status: RunStatus) -> minijinja::Value {
        minijinja::Value::from_serialize(json!({
            "id": self.record.run_id,
            "dir": self.dir.as_ref().map(|d| d.display().to_string()),
            "started_at": self.record.started_at,
            "workflow": self.workflow.name,
            "dry_run": self.options.dry_run,
            "status": status.finally_word(),
            "exit": self.record.exit,
            "error": self.record.error,
        }))
    }

    fn finish(&mut self, status: RunStatus) {
        self.record.status = status;
        self.record.finished_at = Some(record::now_rfc3339());
        self.record.duration_ms = self.started.elapsed().as_millis() as u64;
        let record = &self.record;
        self.emit(Event::RunFinished {
            status: status.as_str(),
            exit: record.exit.as_ref(),
            error: record.error.as_deref(),
            duration_ms: record.duration_ms,
            usage: (record.usage.model_calls > 0).then_some(&record.usage),
        });
        if let Some(recorder) = self.recorder.take() {
            let (record, written) = recorder.finish(&self.record);
            self.record = record;
            if let Err(error) = written {
                self.reporter
                    .line(&format!("warning: cannot write run.json: {error}"));
            }
        }
    }

    /// The run, step by step: the scope, the prepared roots, the workflow's lock, the stages
    /// (then the finally stages), the outputs. A step that ends the run early says with what
    /// status (`Err`); the lock is let go only once the record is written.
    fn execute(&mut self, reuse: Reuse, items: journal::FinishedItems) {
        let mut lock = None;
        let status = self
            .execute_steps(&reuse, &items, &mut lock)
            .unwrap_or_else(|ended| ended);
        self.finish(status);
        drop(lock);
    }

    fn execute_steps(
        &mut self,
        reuse: &Reuse,
        items: &journal::FinishedItems,
        lock: &mut Option<locks::DirLock>,
    ) -> Result<RunStatus, RunStatus> {
        let workflow = self.workflow;
        // A dry-run's record is no resume's base: it keeps no journal.
        let journal = self.journal.clone().unwrap_or_else(|| {
            journal::Journal::new(
                &self.record.run_id,
                self.dir.as_deref().filter(|_| !self.options.dry_run),
            )
        });
        self.emit(Event::RunStarted {
            workflow: &workflow.name,
            inputs: &self.record.inputs,
            dry_run: self.options.dry_run,
        });
        let mut scope = self.initial_scope();
        let base = scope.to_value();
        let prepared = self.prepare(&base)?;
        *lock = self.take_workflow_lock(&prepared, &base)?;
        let status = self.run_stages(&prepared, &scope, reuse, items, &journal);
        scope.output = None;
        self.evaluate_outputs(status, &mut scope)?;
        Ok(status)
    }

    /// The scope every template sees; `stages` reads the live table.
    fn initial_scope(&self) -> Scope {
        let workflow = self.workflow;
        Scope {
            inputs: minijinja::Value::from_serialize(&self.record.inputs),
            env: allowed_env(&workflow.env),
            stages: Scope::stages_view(Arc::clone(&self.table)),
            state: minijinja::Value::from_serialize(stage::load_state(
                &self.runtime.state_dir,
                &workflow.name,
            )),
            run: self.run_value(RunStatus::Running),
            item: None,
            index: None,
            output: None,
        }
    }

    /// The write roots and the children's environment; the sweep of what killed engines left.
    fn prepare(&mut self, base: &minijinja::Value) -> Result<stage::Prepared, RunStatus> {
        let mut prepared = stage::Prepared::new(self.workflow, base, &self.runtime.cwd)
            .map_err(|error| self.failed(error.to_string()))?;
        prepared.child_env.extend(self.options.env.iter().cloned());
        self.late_roots = prepared
            .writes
            .late()
            .map(|late| (Arc::clone(late), base.clone()));
        // What killed engines stranded of their temporary files, in the state folder and the write
        // roots: removed beside the run (a top-level run that writes, not a dry-run).
        if self.recorder.is_some() && !self.options.dry_run {
            let mut folders = vec![self.runtime.state_dir.clone()];
            folders.extend(prepared.writes.roots());
            self.strays = crate::floor::strays::sweep_in_background(folders);
        }
        Ok(prepared)
    }

    /// The run fails with this error.
    fn failed(&mut self, error: String) -> RunStatus {
        self.record.error = Some(error);
        RunStatus::Failed
    }

    /// `[workflow] lock`: taken (or waited for), or the run ends as the lock's `busy` says.
    fn take_workflow_lock(
        &mut self,
        prepared: &stage::Prepared,
        base: &minijinja::Value,
    ) -> Result<Option<locks::DirLock>, RunStatus> {
        let Some(lock) = &self.workflow.lock else {
            return Ok(None);
        };
        if self.options.dry_run {
            let path = lock.path.render(base).unwrap_or_default();
            self.reporter
                .line(&format!("  (dry-run) would take lock {path}"));
            return Ok(None);
        }
        let path = match lock.path.render(base) {
            Ok(path) => self.runtime.cwd.join(path),
            Err(error) => return Err(self.failed(format!("lock path: {error}"))),
        };
        // The lock folder is a write like any other: it stays inside `writes`.
        let path = prepared
            .writes
            .check(&path)
            .map_err(|error| self.failed(format!("`[workflow] lock`: {error}")))?;
        let taken = take_lock(
            &path,
            lock.stale_after,
            lock.busy == Busy::Wait,
            &Clock::system(),
            process::Interrupt::global(),
            || {
                self.reporter
                    .line(&format!("  waiting for lock {}", path.display()));
            },
        );
        match taken {
            Ok(LockTry::Taken(held)) => Ok(Some(held)),
            // Ctrl-C while waiting: the run was interrupted, not turned away.
            Ok(LockTry::Interrupted) => Err(RunStatus::Interrupted),
            Ok(LockTry::Busy) => {
                let message = lock
                    .message
                    .as_ref()
                    .and_then(|m| m.render(base).ok())
                    .unwrap_or_else(|| format!("lock {} is held by another run", path.display()));
                if lock.busy == Busy::Fail {
                    return Err(self.failed(message));
                }
                self.reporter.line(&format!("  exit: {message}"));
                self.record.exit = Some(ExitInfo {
                    stage: None,
                    message,
                });
                Err(RunStatus::Exited)
            }
            Err(error) => Err(self.failed(format!("cannot take lock {}: {error}", path.display()))),
        }
    }

    /// The ordinary stages, then (unless the run was interrupted) the finally stages, which
    /// see how it ended; the cache stored at the end.
    fn run_stages(
        &mut self,
        prepared: &stage::Prepared,
        scope: &Scope,
        reuse: &Reuse,
        items: &journal::FinishedItems,
        journal: &journal::Journal,
    ) -> RunStatus {
        let workflow = self.workflow;
        let reporter = self.reporter.clone();
        let rehearsal = self.rehearsal.clone();
        let (runtime, options, table, run_started) = (
            self.runtime,
            self.options,
            Arc::clone(&self.table),
            self.started,
        );
        let runner = |base_scope, cache| StageRunner {
            workflow,
            runtime,
            options,
            prepared,
            base_scope,
            reuse,
            items,
            journal,
            rehearsal: rehearsal.as_deref(),
            reporter: &reporter,
            cache,
            table: Arc::clone(&table),
            raw_stdout: Default::default(),
            lossy_stdout: Default::default(),
            sub_runs: Default::default(),
            run_started,
        };
        let ordinary = runner(
            scope,
            cache::Cache::new(&self.runtime.state_dir, &workflow.name),
        );
        let status = self.schedule(&ordinary, false);
        let mut cache = ordinary.cache;
        if status != RunStatus::Interrupted && workflow.stages.iter().any(|s| s.finally) {
            let _ = cache.flush();
            let mut ended = scope.clone();
            ended.run = self.ended_value(status);
            let finally = runner(&ended, cache);
            self.finally_phase = true;
            self.schedule(&finally, true);
            self.finally_phase = false;
            cache = finally.cache;
        }
        if let Err(error) = cache.close() {
            self.reporter
                .line(&format!("warning: cannot store cache entries: {error}"));
        }
        for warning in cache.take_warnings() {
            self.reporter.line(&format!("warning: {warning}"));
        }
        crate::floor::drop_elsewhere("cache-drop", cache);
        status
    }

    /// `[outputs]`, which also see how the run ended, in the words finally stages read it
    /// (`run.status` is `succeeded`, `exited` or `failed`; `run.exit`, `run.error`).
    fn evaluate_outputs(&mut self, status: RunStatus, scope: &mut Scope) -> Result<(), RunStatus> {
        let workflow = self.workflow;
        if status == RunStatus::Completed || status == RunStatus::Exited {
            scope.run = self.ended_value(status);
            let base = scope.to_value();
            let mut outputs = Map::new();
            for (name, tmpl) in &workflow.outputs {
                match tmpl.eval(&base) {
                    Ok(value) => {
                        outputs.insert(
                            name.clone(),
                            serde_json::to_value(&value).unwrap_or(Value::Null),
                        );
                    }
                    // An early exit, or a stage selection, leaves stages without output;
                    // say so, don't fail.
                    Err(_) if status == RunStatus::Exited || !self.options.left_out.is_empty() => {
                        outputs.insert(name.clone(), Value::Null);
                    }
                    Err(error) => {
                        let error = stage_error::Part::Output(name.clone()).failed(error);
                        return Err(self.failed(error.to_string()));
                    }
                }
            }
            self.record.outputs = Some(Value::Object(outputs));
        } else if status == RunStatus::Failed {
            // A failed run's outputs are those that read a finally stage: finally stages run
            // however the run ended, so what they say is meant for every ending. The others
            // read stages the failure may have left without output, and are not evaluated.
            // They see `run` as finally stages do, `run.error` included.
            scope.run = self.ended_value(status);
            let base = scope.to_value();
            let mut outputs = Map::new();
            for (name, tmpl) in &workflow.outputs {
                let reads_finally = stages_read(workflow, tmpl)
                    .iter()
                    .any(|(i, _)| workflow.stages[*i].finally);
                if !reads_finally {
                    continue;
                }
                // Already failed: an output that cannot be evaluated is null, and the run's
                // error stays the one that failed it.
                let value = tmpl
                    .eval(&base)
                    .ok()
                    .and_then(|value| serde_json::to_value(&value).ok())
                    .unwrap_or(Value::Null);
                outputs.insert(name.clone(), value);
            }
            if !outputs.is_empty() {
                self.record.outputs = Some(Value::Object(outputs));
            }
        }
        Ok(())
    }

    /// The scheduling loop: start ready stages up to `--jobs`, record what ends. It runs the
    /// ordinary stages, or (`finally`) the finally stages, each waiting only for the stages of
    /// its own kind: an ordinary stage never waits for a finally one (`check` proves it), and
    /// every ordinary stage that could run has ended before a finally one starts.
    fn schedule(&mut self, runner: &StageRunner, finally: bool) -> RunStatus {
        let workflow = self.workflow;
        let mut waiting: Vec<usize> = workflow
            .stages
            .iter()
            .map(|s| match s.finally == finally {
                true => s
                    .deps
                    .iter()
                    .filter(|&&d| workflow.stages[d].finally == finally)
                    .count(),
                false => usize::MAX,
            })
            .collect();
        let mut ready: VecDeque<usize> = workflow
            .order
            .iter()
            .copied()
            .filter(|&i| waiting[i] == 0)
            .collect();
        // Stages a batch found to need work: they start without being checked again.
        let mut work: VecDeque<usize> = VecDeque::new();
        let jobs = self.options.jobs.max(1);
        let pool = match rayon::ThreadPoolBuilder::new().num_threads(jobs).build() {
            Ok(pool) => pool,
            Err(error) => {
                self.record.error = Some(format!("cannot start worker threads: {error}"));
                return RunStatus::Failed;
            }
        };
        let (tx, rx) = mpsc::channel::<(usize, StageOutcome)>();
        let mut running = 0usize;
        let mut stop: Option<RunStatus> = None;
        let interrupt = process::Interrupt::global();
        pool.in_place_scope(|scope| {
            let start_on_worker = |index: usize| {
                runner.reporter.working(&runner.workflow.stages[index].id);
                let tx = tx.clone();
                scope.spawn(move |_| {
                    let outcome = runner.run(index);
                    let _ = tx.send((index, outcome));
                });
            };
            loop {
                if interrupt.is_set() && stop.is_none() {
                    stop = Some(RunStatus::Interrupted);
                }
                // A batch computes ahead of the stages' turns, so it stops before a stage that
                // writes an `output.path` (even from a reused output): no file may be written
                // for a stage the run then does not start.
                let batchable = match (stop, running, jobs) {
                    (None, 0, 2..) => ready
                        .iter()
                        .take(BATCH_MAX)
                        .take_while(|&&i| workflow.stages[i].extras().output_path.is_none())
                        .count(),
                    _ => 0,
                };
                if batchable >= BATCH_MIN {
                    let batch: Vec<usize> = ready.drain(..batchable).collect();
                    self.before_waiting(&runner.cache);
                    let outcomes = pool.install(|| run_batch(runner, &batch));
                    // Taken in order, as one by one: a stage with work starts when its turn
                    // comes (while a job is free), and one that ends the run stops the rest.
                    for (index, outcome) in batch.into_iter().zip(outcomes) {
                        match outcome {
                            _ if stop.is_some() => {}
                            Some((at, outcome)) => {
                                self.stage_started(index, at);
                                let verdict = self.absorb(index, outcome);
                                self.settle(index, verdict, &mut waiting, &mut ready, &mut stop);
                            }
                            None if running < jobs => {
                                running += 1;
                                self.stage_started(index, record::now_rfc3339());
                                self.watch(index);
                                self.before_waiting(&runner.cache);
                                start_on_worker(index);
                            }
                            None => work.push_back(index),
                        }
                    }
                    continue;
                }
                // A stage over on this thread: taken next, without a trip through the channel
                // (an outcome is several hundred bytes, copied at each hand-off).
                let mut here = None;
                while stop.is_none() && running < jobs {
                    let (index, checked) = match work.pop_front() {
                        Some(index) => (index, true),
                        None => match ready.pop_front() {
                            Some(index) => (index, false),
                            None => break,
                        },
                    };
                    running += 1;
                    let stage = &workflow.stages[index];
                    self.stage_started(index, record::now_rfc3339());
                    // Handing a stage to a worker and waiting for its result costs two thread
                    // wake-ups, most of the time of a quick stage. A stage that starts no
                    // process and waits on nothing (a template, or no action) is over in
                    // moments, so it runs here; anything else runs on a worker while this
                    // thread keeps the record.
                    if runs_in_place(stage) {
                        self.watch(index);
                        here = Some((index, runner.run(index)));
                        break;
                    }
                    // A stage whose output is reused (or whose `if` is false) is over here as
                    // well; only work goes to a worker.
                    if !checked {
                        if let Some(outcome) = runner.run_if_reused(index) {
                            here = Some((index, outcome));
                            break;
                        }
                    }
                    // What finished before a stage goes to work is on disk before the work
                    // starts, so a kill during a long stage (a process, a model call) leaves
                    // every earlier stage reusable; quick stages still share one write.
                    self.watch(index);
                    self.before_waiting(&runner.cache);
                    start_on_worker(index);
                }
                let (index, outcome) = match here {
                    Some(result) => result,
                    None if running == 0 => break,
                    None => match self.next_result(&rx, &runner.cache) {
                        Some(result) => result,
                        None => break,
                    },
                };
                running -= 1;
                let verdict = self.absorb(index, outcome);
                self.settle(index, verdict, &mut waiting, &mut ready, &mut stop);
            }
        });
        if interrupt.is_set() {
            stop = Some(RunStatus::Interrupted);
        }
        stop.unwrap_or(RunStatus::Completed)
    }

    /// What a finished stage means for the stages after it, or for the run.
    fn settle(
        &mut self,
        index: usize,
        verdict: Verdict,
        waiting: &mut [usize],
        ready: &mut VecDeque<usize>,
        stop: &mut Option<RunStatus>,
    ) {
        match verdict {
            Verdict::Continue => {
                let finally = self.workflow.stages[index].finally;
                for &next in &self.workflow.dependents[index] {
                    if self.workflow.stages[next].finally != finally {
                        continue;
                    }
                    waiting[next] -= 1;
                    if waiting[next] == 0 {
                        ready.push_back(next);
                    }
                }
            }
            // A finally stage's failure is recorded; the stages after it do not run, the others
            // do, and the run ends as it had.
            Verdict::Fail(_) if self.finally_phase => {}
            Verdict::Exit => {
                stop.get_or_insert(RunStatus::Exited);
                self.header_changed();
            }
            Verdict::Fail(error) => {
                if self.record.error.is_none() {
                    let id = &self.workflow.stages[index].id;
                    self.record.error = Some(format!("stage `{id}` failed: {error}"));
                }
                stop.get_or_insert(RunStatus::Failed);
                self.header_changed();
            }
        }
    }

    /// The next finished stage. While none is ready, the cache entries and lines held back
    /// reach their files (the recorder sees to the record).
    fn next_result(
        &mut self,
        rx: &mpsc::Receiver<(usize, StageOutcome)>,
        cache: &cache::Cache,
    ) -> Option<(usize, StageOutcome)> {
        match rx.try_recv() {
            Ok(result) => return Some(result),
            Err(mpsc::TryRecvError::Disconnected) => return None,
            Err(mpsc::TryRecvError::Empty) => {}
        }
        self.before_waiting(cache);
        rx.recv().ok()
    }

    /// What is held back goes out before this thread waits: cache entries and lines to their
    /// files, the record's notes to the recorder.
    fn before_waiting(&mut self, cache: &cache::Cache) {
        let _ = cache.flush();
        self.reporter.flush();
        if let Some(recorder) = &self.recorder {
            recorder.hand_over();
        }
    }

    /// A stage has finished: each late write root that reads it is rendered once every stage it
    /// reads has an output, and admits nothing for the rest of the run when one of them has
    /// none (it was skipped, failed or did not run) or it renders empty.
    fn settle_late_roots(&self, index: usize, has_output: bool) {
        let Some((late, base)) = &self.late_roots else {
            return;
        };
        for (slot, root) in late.waiting() {
            if !root.stages.iter().any(|(i, _)| *i == index) {
                continue;
            }
            if !has_output {
                let id = &self.workflow.stages[index].id;
                late.settle(
                    slot,
                    LateState::Unresolved(format!("stage `{id}`, which it reads, has no output")),
                );
                continue;
            }
            let finished = root.stages.iter().all(|(i, _)| {
                self.table
                    .get(*i)
                    .is_some_and(|s| s.status == "succeeded" || s.status == "cached")
            });
            if !finished {
                continue;
            }
            let state = match self.workflow.writes[root.entry].render(base) {
                Ok(text) if text.trim().is_empty() => {
                    LateState::Unresolved("it renders empty".to_string())
                }
                Ok(text) => LateState::Resolved(self.runtime.cwd.join(text)),
                Err(error) => LateState::Unresolved(stage_error::describe(&error)),
            };
            late.settle(slot, state);
        }
    }

    /// Record a finished stage; say what it means for the run.
    fn absorb(&mut self, index: usize, mut outcome: StageOutcome) -> Verdict {
        let stage = &self.workflow.stages[index];
        let id = stage.id.clone();
        let has_output = outcome.status.has_output();
        // A reused output comes with its hash; anything else is hashed once, here.
        let output_sha = match (outcome.output_sha256.take(), &outcome.output) {
            (Some(sha), Some(_)) => Some(sha),
            (_, Some(output)) => Some(crate::floor::hash::sha256_json_digest(output)),
            (_, None) => None,
        };
        let mut stage_usage = None;
        for call in &outcome.model_calls {
            self.record.usage.add(call);
            stage_usage
                .get_or_insert_with(UsageTotals::default)
                .add(call);
        }
        if !outcome.model_calls.is_empty() {
            self.header_changed();
        }
        let slot_output = match (&outcome.output, has_output) {
            (Some(output), true) => minijinja::Value::from_serialize(output),
            _ => minijinja::Value::from(()),
        };
        // `cached` and `succeeded` carry the same output: only what was produced counts.
        let slot_sha = match (output_sha, has_output) {
            (Some(sha), true) => Sha256Hex::Bytes(sha),
            _ => Sha256Hex::Text(outcome.status.as_str().into()),
        };
        self.table.set(
            index,
            StageSlot {
                output: slot_output,
                status: outcome.status.as_str(),
                sha256: slot_sha,
                assumed: outcome.assumed,
                error: outcome.error.clone(),
            },
        );
        self.settle_late_roots(index, has_output);
        let duration_ms = outcome.duration.as_millis() as u64;
        self.reporter
            .finished(&id, std::mem::take(&mut self.watched[index]));
        if self.reporter.shows_lines() {
            let mark = self.reporter.paint(
                progress::Tone::of(outcome.status, outcome.exit.is_some()),
                outcome.status_mark(),
            );
            // Pieces pushed rather than formatted: a line a stage, 10,000 in a large run.
            let mut line = String::with_capacity(64);
            for piece in ["  ", &mark, " ", &self.reporter.prefix, &id] {
                line.push_str(piece);
            }
            match outcome.status {
                StageStatus::Skipped => line.push_str(" skipped"),
                StageStatus::Cached => line.push_str(" cached"),
                StageStatus::Failed => {
                    line.push_str(&format!(
                        " failed: {}",
                        outcome.error.as_deref().unwrap_or("")
                    ));
                }
                _ => {
                    line.push_str(" (");
                    push_human_duration(&mut line, duration_ms);
                    line.push(')');
                }
            }
            if outcome.assumed {
                line.push_str(" [assumed]");
            }
            self.reporter.stage_line(&line);
            for note in &outcome.notes {
                self.reporter.stage_line(&format!("      {note}"));
            }
        }
        let at = record::now_rfc3339();
        if self.reporter.wants_events() {
            self.reporter.event(&Stamped {
                event: Event::StageFinished {
                    stage: &id,
                    status: outcome.status.as_str(),
                    duration_ms,
                    error: outcome.error.as_deref(),
                    exit: outcome.exit.as_deref(),
                    notes: &outcome.notes,
                    usage: stage_usage.as_ref(),
                },
                at: at.clone(),
                run_id: &self.record.run_id,
            });
        }
        // The output for `outputs.jsonl`, which `resume` reads, written with the entry's
        // fingerprint and output hash.
        let output_line = match (outcome.output.take(), &outcome.fingerprint, output_sha) {
            (Some(output), Some(_), Some(_)) if has_output && !outcome.assumed => Some(output),
            _ => None,
        };
        let mut entry = StageRecord::not_run();
        entry.status = outcome.status;
        entry.duration_ms = duration_ms;
        entry.fingerprint = outcome.fingerprint.take();
        entry.fingerprint_parts = outcome.fingerprint_parts.take();
        entry.output_sha256 = output_sha.filter(|_| has_output).map(Sha256Hex::Bytes);
        entry.attempts = outcome.attempts;
        entry.reused_from = outcome.reused_from.take();
        entry.assumed = outcome.assumed;
        entry.set_details(StageDetails {
            error: outcome.error.clone(),
            reason: outcome.reason.take(),
            items: outcome.items,
            failed_items: outcome.failed_items,
            reused_items: outcome.reused_items,
            item_runs: std::mem::take(&mut outcome.item_runs),
            sub_run: outcome.sub_run.take(),
            model_calls: std::mem::take(&mut outcome.model_calls),
            usage: stage_usage.map(Box::new),
            explain: outcome.explain.take(),
            stderr: outcome
                .stderr
                .take()
                .filter(|_| outcome.status != StageStatus::Failed),
        });
        match &self.recorder {
            Some(recorder) => recorder.finished(Finished {
                index,
                entry,
                exit: outcome.exit.clone(),
                notes: std::mem::take(&mut outcome.notes),
                output: output_line,
                at,
            }),
            None => {
                // A sub-workflow's stage: its output is journaled in the top-level run, so a
                // resume of that run reuses it when the sub-workflow's stage did not finish.
                if let (Some(journal), Some(output), Some(fingerprint)) =
                    (&self.journal, &output_line, &entry.fingerprint)
                {
                    let mut digits = [0u8; 64];
                    let fingerprint = fingerprint.as_str(&mut digits);
                    if let Some(warning) = journal.stage_finished(&id, fingerprint, output) {
                        self.reporter.line(&format!("warning: {warning}"));
                    }
                }
                if let Some(slot) = self.record.stages.get_mut(id.as_str()) {
                    let started_at = slot.started_at.take();
                    *slot = entry;
                    slot.started_at = started_at;
                }
            }
        }

        // Persistent state.
        if !outcome.set_state.is_empty() && !self.options.dry_run {
            if let Err(error) = stage::save_state(
                &self.runtime.state_dir,
                &self.workflow.name,
                &outcome.set_state,
            ) {
                self.reporter
                    .line(&format!("warning: cannot save state: {error}"));
            }
        }
        if outcome.exit.is_some() && self.finally_phase {
            // `check` refuses `exit_if` on a finally stage; nothing else may end the run again.
            return Verdict::Continue;
        }
        if let Some(message) = &outcome.exit {
            self.record.exit = Some(ExitInfo {
                stage: Some(id.clone()),
                message: message.clone(),
            });
            self.reporter.line(&format!("  exit at {id}: {message}"));
            return Verdict::Exit;
        }
        if outcome.status == StageStatus::Failed && outcome.fatal {
            return Verdict::Fail(outcome.error.unwrap_or_default());
        }
        Verdict::Continue
    }
}

/// A batch is checked on the workers when at least this many stages are ready and none is
/// running (fewer would not pay for waking the workers), at most this many at a time (so an
/// interrupt is seen between batches).
const BATCH_MIN: usize = 32;
const BATCH_MAX: usize = 1024;

/// A stage that starts no process and waits on nothing (a template, or no action) runs on the
/// scheduling thread or in a batch, never alone on a worker.
fn runs_in_place(stage: &Stage) -> bool {
    matches!(stage.action, Action::Template(_) | Action::None) && stage.extras().foreach.is_none()
}

/// Ready stages, on all the workers at once: those that run in place are run, the others only
/// checked for reuse. Each outcome comes with when its stage started; `None` for a stage that
/// has work to do, which then starts like any other. None of them writes a file: a template
/// stage's only lasting effect is its cache entry, keyed by its fingerprint, so one computed
/// ahead of a stage that ends the run leaves an entry a later run would have stored alike.
fn run_batch(runner: &StageRunner, batch: &[usize]) -> Vec<Option<(String, StageOutcome)>> {
    use rayon::prelude::*;
    batch
        .par_iter()
        .map(|&index| {
            let at = record::now_rfc3339();
            let outcome = if runs_in_place(&runner.workflow.stages[index]) {
                Some(runner.run(index))
            } else {
                runner.run_if_reused(index)
            };
            outcome.map(|outcome| (at, outcome))
        })
        .collect()
}

enum Verdict {
    Continue,
    Exit,
    /// With the stage's error.
    Fail(String),
}

pub(crate) fn human_duration(ms: u64) -> String {
    let mut text = String::new();
    push_human_duration(&mut text, ms);
    text
}

/// [`human_duration`] onto `text`.
fn push_human_duration(text: &mut String, ms: u64) {
    if ms < 1000 {
        text.push_str(itoa::Buffer::new().format(ms));
        text.push_str("ms");
    } else {
        use std::fmt::Write as _;
        let _ = write!(text, "{:.1}s", ms as f64 / 1000.0);
    }
}

/// The allow-listed environment variables, as templates see them (unset ones are `none`).
fn allowed_env(names: &[String]) -> minijinja::Value {
    let map: std::collections::BTreeMap<String, Option<String>> = names
        .iter()
        .map(|name| (name.clone(), std::env::var(name).ok()))
        .collect();
    minijinja::Value::from_serialize(map)
}

/// The write roots of a run: those that read no stage rendered now, the others (late roots)
/// waiting for the stages they read.
pub(crate) fn write_roots(
    workflow: &Workflow,
    scope: &minijinja::Value,
    cwd: &Path,
) -> Result<WriteRoots, stage_error::RenderError> {
    let mut roots = Vec::new();
    let mut late = Vec::new();
    for (entry, tmpl) in workflow.writes.iter().enumerate() {
        let stages = stages_read(workflow, tmpl);
        if stages.is_empty() {
            roots.push(
                tmpl.render(scope)
                    .map_err(|e| stage_error::Part::Writes.failed(e))?,
            );
        } else {
            late.push(LateRoot {
                entry,
                stages,
                state: LateState::Waiting,
            });
        }
    }
    let roots = WriteRoots::new(cwd, &roots);
    Ok(if late.is_empty() {
        roots
    } else {
        roots.with_late(Arc::new(LateRoots::new(late)))
    })
}

/// The stages a template reads (`stages.<id>...`), by index and id, in the workflow's order.
pub(crate) fn stages_read(
    workflow: &Workflow,
    tmpl: &crate::template::Tmpl,
) -> Vec<(usize, String)> {
    let read: std::collections::BTreeSet<String> = tmpl
        .references()
        .into_iter()
        .filter_map(|path| {
            let mut parts = path.split('.');
            (parts.next() == Some("stages"))
                .then(|| parts.next().map(str::to_string))
                .flatten()
        })
        .collect();
    workflow
        .stages
        .iter()
        .filter(|stage| read.contains(&stage.id))
        .map(|stage| (stage.index, stage.id.clone()))
        .collect()
}

/// How taking the workflow's lock ended.
enum LockTry {
    Taken(locks::DirLock),
    /// Another run holds it, and this run does not wait.
    Busy,
    /// The run was interrupted while it waited.
    Interrupted,
}

/// How often a run waiting for a held lock tries it again.
const LOCK_RETRY: Duration = Duration::from_millis(100);

/// How often a run waiting for a held lock says it still waits: a wait can be long, and a line
/// every retry would bury the rest.
const LOCK_WAIT_ANNOUNCED: Duration = Duration::from_secs(10);

/// Take the lock at `path`. When another run holds it and `wait` is set, try again every
/// [`LOCK_RETRY`] on `clock` until it is let go or `interrupt` is set, calling `waiting` at the
/// first refusal and then at most once every [`LOCK_WAIT_ANNOUNCED`].
fn take_lock(
    path: &Path,
    stale_after: Option<Duration>,
    wait: bool,
    clock: &Clock,
    interrupt: &process::Interrupt,
    mut waiting: impl FnMut(),
) -> std::io::Result<LockTry> {
    let mut announced: Option<Instant> = None;
    loop {
        match locks::try_acquire(path, stale_after)? {
            locks::Attempt::Acquired { lock, .. } => return Ok(LockTry::Taken(lock)),
            locks::Attempt::Busy if !wait => return Ok(LockTry::Busy),
            locks::Attempt::Busy if interrupt.is_set() => return Ok(LockTry::Interrupted),
            locks::Attempt::Busy => {
                if announced.is_none_or(|at| clock.since(at) >= LOCK_WAIT_ANNOUNCED) {
                    waiting();
                    announced = Some(clock.now());
                }
                clock.sleep(LOCK_RETRY);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run_once(dir: &Path) -> RunRecord {
        let engine = crate::Engine::new(&[], dir);
        let workflow = engine.load("chain.toml").expect("the workflow checks");
        let models = Models::load(dir).expect("no model configuration is fine");
        let runtime = Runtime {
            models: &models,
            cwd: dir.to_path_buf(),
            state_dir: dir.join(".stagegraph"),
            previous: None,
        };
        let options = RunOptions {
            jobs: 2,
            quiet: true,
            ..RunOptions::default()
        };
        run(&workflow, &runtime, &options, Map::new(), None).expect("the run starts")
    }

    /// A run allocates each stage's id once: its record's stages and the stage table that
    /// templates read hold the same one, in the workflow's order.
    #[test]
    fn the_record_and_the_stage_table_share_each_id() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("ids.toml"),
            "[workflow]\ndescription = \"d\"\n\n[stages.first]\nshell = \"true\"\n\n\
             [stages.second]\nshell = \"true\"\n",
        )
        .unwrap();
        let engine = crate::Engine::new(&[], dir.path());
        let workflow = engine.load("ids.toml").expect("the workflow checks");
        let models = Models::load(dir.path()).expect("no model configuration is fine");
        let runtime = Runtime {
            models: &models,
            cwd: dir.path().to_path_buf(),
            state_dir: dir.path().join(".stagegraph"),
            previous: None,
        };
        let options = RunOptions::default();
        let reporter = Reporter::new(&options, workflow.stages.len());
        let mut executor = Executor::new(
            &workflow,
            &runtime,
            &options,
            Map::new(),
            "r1".into(),
            reporter,
        );
        executor.keep_record();
        let table: Vec<&Arc<str>> = executor.table.ids().collect();
        let record: Vec<&Arc<str>> = executor.record.stages.keys().collect();
        assert_eq!(table.len(), 2);
        assert_eq!(record.len(), 2);
        for (in_table, in_record) in table.iter().zip(&record) {
            assert!(Arc::ptr_eq(in_table, in_record), "{in_table} is copied");
        }
        assert_eq!([&**record[0], &**record[1]], ["first", "second"]);
    }

    /// A `records.project` that fails to render is a typed error, rendered as the template's.
    #[test]
    fn a_records_project_that_fails_to_render_is_a_typed_error() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("records.toml"),
            "[workflow]\ndescription = \"d\"\nrecords = { location = \"user\", project = \"{{ 1 // 0 }}\" }\n\n[stages.a]\ntemplate = { inline = \"a\" }\n",
        )
        .unwrap();
        let engine = crate::Engine::new(&[], dir.path());
        let workflow = engine.load("records.toml").expect("the workflow checks");
        let state = dir.path().join(".stagegraph");
        match state_dir_for(&workflow, &Map::new(), dir.path(), &state, false) {
            Err(error @ StateDirError::Project(_)) => assert!(
                error
                    .to_string()
                    .starts_with("`[workflow] records.project`"),
                "{error}"
            ),
            other => panic!("{other:?}"),
        }
        assert_eq!(
            state_dir_for(&workflow, &Map::new(), dir.path(), &state, true).unwrap(),
            state
        );
    }

    #[test]
    fn a_rerun_of_a_cached_chain_runs_nothing() {
        // Each stage's fingerprint covers the stage before it; a stage reused from the cache
        // must not look different to the next one than the run that stored it.
        let dir = tempfile::tempdir().expect("a temp dir");
        let stage = |id: &str, after: &str| {
            format!(
                "[stages.{id}]\n{after}shell = \"echo {id} >> ran.txt; echo {id}\"\ncache = true\n"
            )
        };
        let text = [
            stage("a", ""),
            stage("b", "after = [\"a\"]\n"),
            stage("c", "after = [\"b\"]\n"),
        ]
        .join("\n");
        std::fs::write(dir.path().join("chain.toml"), text).expect("write the workflow");

        let first = run_once(dir.path());
        assert_eq!(first.status, RunStatus::Completed);
        for _ in 0..2 {
            let again = run_once(dir.path());
            let statuses: Vec<StageStatus> = again.stages.values().map(|s| s.status).collect();
            assert_eq!(statuses, vec![StageStatus::Cached; 3]);
        }
        let ran = std::fs::read_to_string(dir.path().join("ran.txt")).expect("the stages ran");
        assert_eq!(ran, "a\nb\nc\n");
    }

    /// Holds a lock as another run would, in this process.
    fn held(path: &Path) -> locks::DirLock {
        match locks::try_acquire(path, None).expect("take the lock") {
            locks::Attempt::Acquired { lock, .. } => lock,
            locks::Attempt::Busy => panic!("the lock was free"),
        }
    }

    /// A wait of 35 s on the fake clock says so at once and then at 10, 20 and 30 s, never in
    /// between, and takes the lock at the first try after it is let go.
    #[test]
    fn a_run_waiting_for_a_lock_says_so_at_most_once_every_ten_seconds() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("w.lock.d");
        let clock = Clock::fake();
        {
            let mut other = Some(held(&path));
            // Let go during the 350th retry's sleep, 35 s into the wait.
            clock.on_sleep(move |sleep| {
                if sleep == 350 {
                    other.take();
                }
            });
        }
        let mut said = Vec::new();
        let taken = take_lock(
            &path,
            None,
            true,
            &clock,
            &process::Interrupt::default(),
            || said.push(clock.elapsed()),
        )
        .expect("no error");
        assert!(matches!(taken, LockTry::Taken(_)));
        assert_eq!(
            said,
            [0, 10, 20, 30].map(Duration::from_secs),
            "when the wait was announced"
        );
        assert_eq!(clock.sleeps(), 350, "tried again every 100 ms");
    }

    #[test]
    fn a_lock_wait_ends_at_an_interrupt_and_a_run_that_does_not_wait_is_turned_away() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("w.lock.d");
        let _other = held(&path);
        let clock = Clock::fake();
        let interrupt = Arc::new(process::Interrupt::default());
        {
            let interrupt = Arc::clone(&interrupt);
            clock.on_sleep(move |sleep| {
                if sleep == 3 {
                    interrupt.trigger();
                }
            });
        }
        let mut said = 0;
        let taken = take_lock(&path, None, true, &clock, &interrupt, || said += 1);
        assert!(matches!(taken, Ok(LockTry::Interrupted)));
        assert_eq!((said, clock.sleeps()), (1, 3));
        let mut said = 0;
        let taken = take_lock(
            &path,
            None,
            false,
            &clock,
            &process::Interrupt::default(),
            || said += 1,
        );
        assert!(matches!(taken, Ok(LockTry::Busy)));
        assert_eq!(
            (said, clock.sleeps()),
            (0, 3),
            "it neither waited nor said so"
        );
        assert!(path.exists(), "a lock it did not take was removed");
    }
}
