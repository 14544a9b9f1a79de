//! `run`, `resume` and `plan --explain` as the command line asks for them: the models (with
//! recordings and budgets), the state folder, the options of the executor, the last real run
//! to compare with or rehearse, and a record even for a run that fails before its first stage.

use std::collections::HashMap;
use std::mem::ManuallyDrop;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use super::{resolve_answers, undefined_models, Engine};
use crate::check::Workflow;
use crate::diag::{Diagnostic, Severity};
use crate::exit;
use crate::models::Models;
use crate::run::record::{self, RunRecord};
use crate::run::{self, ResumeFrom, RunOptions, RunStatus, Runtime};
use crate::selection::StageSelection;

/// What a run is asked to do: the command line's run options, in the library's terms.
#[derive(Debug, Clone, Default)]
pub struct RunRequest {
    /// Walk the graph with no side effects.
    pub dry_run: bool,
    /// With `dry_run`: print every rendered prompt.
    pub show_prompts: bool,
    /// A dry-run that says for each stage whether it would be reused (implies `dry_run`).
    pub explain: bool,
    /// Stages at once (default: the number of cores).
    pub jobs: Option<usize>,
    /// Ignore the cache.
    pub no_cache: bool,
    /// Save every model exchange in this folder (relative to the working directory).
    pub record: Option<PathBuf>,
    /// Answer model requests from recordings in this folder.
    pub replay: Option<PathBuf>,
    /// Only errors on stderr.
    pub quiet: bool,
    /// Events as JSON lines on stdout.
    pub json_events: bool,
    /// Keep the newest N runs of the workflow (0 keeps all) unless `[workflow] records` says.
    pub keep_runs: usize,
    /// Keep the workflow's runs within this many bytes on disk unless `[workflow] records`
    /// says (`keep_size`).
    pub keep_runs_size: Option<u64>,
    /// Spend at most this many USD on model calls.
    pub max_cost: Option<f64>,
    /// `--answer STAGE=VALUE` pairs.
    pub answers: Vec<String>,
    /// Answer every `ask` stage not answered with its `yes` choice.
    pub yes: bool,
    /// Write no run record (`plan --explain`).
    pub no_record: bool,
    /// Off a terminal, say that a stage is still running after this long (default 30 s).
    pub slow_after: Option<std::time::Duration>,
    /// Stages whose output is given instead of produced by their action (a test case's
    /// `[case.stages.<id>]`).
    pub given: HashMap<String, Value>,
    /// Variables added to the environment of every command the run starts.
    pub env: Vec<(String, String)>,
    /// Colour the progress lines on stderr.
    pub color: bool,
    /// The stages to execute (`--only`, `--from`, `--until`); empty: all of them.
    pub selection: StageSelection,
}

/// Why a run did not give a record.
#[derive(Debug)]
pub struct RunFailure {
    /// The exit code it means ([`exit::INVALID`] or [`exit::FAILED`]).
    pub code: i32,
    /// What went wrong; empty when `diagnostics` said it all.
    pub message: String,
    /// Diagnostics to show before the message.
    pub diagnostics: Vec<Diagnostic>,
    /// The record of the failure could not be written: why.
    pub unrecorded: Option<String>,
}

impl RunFailure {
    /// A wrong command line, workflow or configuration.
    pub fn invalid(message: impl Into<String>) -> Self {
        RunFailure {
            code: exit::INVALID,
            message: message.into(),
            diagnostics: Vec::new(),
            unrecorded: None,
        }
    }
}

/// Where a command's runs live: the state folder and whether it was given (`--state-dir`).
#[derive(Debug, Clone)]
pub struct StateDir {
    /// The state folder.
    pub dir: PathBuf,
    /// `--state-dir` was given: it is the only state folder.
    pub explicit: bool,
}

impl StateDir {
    /// Before a run records in `dir`: the project's own state folder, when that is where the
    /// run records and it does not exist yet, is made with its `.gitignore` (runs, cache and
    /// state ignored; ejected workflows and overlays not). A folder given with `--state-dir`
    /// or under the user's state folder is the run's to make as it is.
    pub(crate) fn prepare(&self, dir: &Path) {
        if !self.explicit && dir == self.dir {
            // A folder that cannot be made fails the run where it writes, with the reason.
            let _ = crate::project::ensure_state_dir(dir);
        }
    }

    /// Where recorded runs are looked for: the state folder, then (unless it was given) the
    /// user state folders of `cwd` and its ancestors, for workflows recording there.
    pub fn search(&self, cwd: &Path) -> Vec<PathBuf> {
        let mut dirs = vec![self.dir.clone()];
        if !self.explicit {
            dirs.extend(record::user_state_dirs_above(cwd));
        }
        dirs
    }
}

impl Engine {
    /// Run a checked workflow with resolved inputs, from a recorded run when `resume` is given.
    /// A dry-run with no `resume` rehearses the last real run. The record is not freed (the
    /// process's exit reclaims the record of thousands of stages at once).
    pub fn run(
        &self,
        workflow: &Workflow,
        inputs: Map<String, Value>,
        request: &RunRequest,
        state: &StateDir,
        resume: Option<ResumeFrom>,
    ) -> Result<ManuallyDrop<RunRecord>, RunFailure> {
        self.run_with_models(workflow, inputs, request, state, resume, None)
    }

    /// [`Engine::run`] with the models given instead of loaded from the configuration.
    pub(crate) fn run_with_models(
        &self,
        workflow: &Workflow,
        inputs: Map<String, Value>,
        request: &RunRequest,
        state: &StateDir,
        resume: Option<ResumeFrom>,
        models: Option<Models>,
    ) -> Result<ManuallyDrop<RunRecord>, RunFailure> {
        // An --answer for no `ask` stage is a wrong command line: rejected before any record.
        let answers = resolve_answers(workflow, &request.answers, request.yes)
            .map_err(|e| RunFailure::invalid(e.message))?;
        let (models, state_dir) = match self.prepare(workflow, &inputs, request, state, models) {
            Ok(prepared) => prepared,
            Err(mut failure) => {
                failure.unrecorded = self
                    .record_early_failure(workflow, inputs, request, state, &failure.message)
                    .err();
                return Err(failure);
            }
        };
        let (given, given_from, left_out) =
            match select(workflow, &request.selection, &state_dir, &request.given) {
                Ok(selected) => selected,
                Err(message) => {
                    let mut failure = RunFailure::invalid(message);
                    failure.unrecorded = self
                        .record_early_failure(workflow, inputs, request, state, &failure.message)
                        .err();
                    return Err(failure);
                }
            };
        log_plan(workflow, &state_dir, &left_out);
        let keep_runs = workflow
            .records
            .as_ref()
            .and_then(|records| records.keep)
            .unwrap_or(request.keep_runs);
        let options = RunOptions {
            answers,
            record: !request.no_record,
            jobs: request
                .jobs
                .unwrap_or_else(|| {
                    std::thread::available_parallelism().map_or(2, std::num::NonZero::get)
                })
                .max(1),
            dry_run: request.dry_run || request.explain,
            explain: request.explain,
            no_cache: request.no_cache,
            show_prompts: request.show_prompts,
            replay: request.replay.is_some(),
            quiet: request.quiet,
            json_events: request.json_events,
            keep_runs,
            keep_size: workflow.records_keep_size.or(request.keep_runs_size),
            record_budget: workflow
                .records_max_size
                .unwrap_or(run::DEFAULT_RECORD_BUDGET),
            slow_after: request.slow_after.unwrap_or(run::SLOW_AFTER),
            given,
            given_from,
            left_out,
            env: request.env.clone(),
            color: request.color,
        };
        let runtime = Runtime {
            models: &models,
            cwd: self.cwd.clone(),
            state_dir: state_dir.clone(),
            previous: if request.explain {
                record::latest_real_run(&state_dir, &workflow.name)
            } else {
                None
            },
        };
        // A dry-run rehearses the real path: stages with work take the last real run's outputs
        // where their fingerprints are unchanged.
        let resume = match resume {
            None if options.dry_run => runtime
                .previous
                .as_ref()
                .map(|previous| previous.run_id.clone())
                .or_else(|| record::latest_real_run_id(&state_dir, &workflow.name))
                .map(|run_id| ResumeFrom {
                    outputs: run::Reuse::later(&state_dir, &run_id),
                    run_id,
                    items: Default::default(),
                    processes: Vec::new(),
                    interrupted: false,
                    rehearsal: true,
                    claim: None,
                }),
            resume => resume,
        };
        run::run(workflow, &runtime, &options, inputs, resume)
            .map(ManuallyDrop::new)
            .map_err(|e| RunFailure {
                code: exit::FAILED,
                message: e.to_string(),
                diagnostics: Vec::new(),
                unrecorded: None,
            })
    }

    /// The models of a run: the configuration, recording or replaying, with its budgets.
    pub(crate) fn models(&self, request: &RunRequest) -> Result<Models, RunFailure> {
        let mut models = Models::load(&self.cwd).map_err(|e| RunFailure::invalid(e.to_string()))?;
        if let Some(dir) = &request.record {
            models.set_record(self.cwd.join(dir));
        }
        if let Some(dir) = &request.replay {
            models.set_replay(self.cwd.join(dir));
        }
        Ok(models)
    }

    /// What a run needs before it starts: its models and its state folder.
    fn prepare(
        &self,
        workflow: &Workflow,
        inputs: &Map<String, Value>,
        request: &RunRequest,
        state: &StateDir,
        models: Option<Models>,
    ) -> Result<(Models, PathBuf), RunFailure> {
        let models = match models {
            Some(models) => models,
            None => self.models(request)?,
        };
        if let Some(usd) = workflow.budget_usd {
            models.set_budget(usd, "budget_usd in [workflow]");
        }
        if let Some(usd) = request.max_cost {
            if !usd.is_finite() || usd < 0.0 {
                return Err(RunFailure::invalid(format!(
                    "--max-cost expects an amount of USD, at least 0, not {usd}"
                )));
            }
            models.set_budget(usd, "--max-cost");
        }
        let missing = undefined_models(workflow, &models, Severity::Error);
        if !missing.is_empty() && request.replay.is_none() {
            let mut failure = RunFailure::invalid(format!(
                "workflow `{}` needs model aliases that no configuration defines",
                workflow.name
            ));
            failure.diagnostics = missing;
            return Err(failure);
        }
        let state_dir = run::state_dir_for(workflow, inputs, &self.cwd, &state.dir, state.explicit)
            .map_err(|error| RunFailure::invalid(error.to_string()))?;
        if !request.no_record {
            state.prepare(&state_dir);
        }
        Ok((models, state_dir))
    }

    /// A run that fails before its first stage still leaves a record saying why (a hook's call
    /// is read afterwards with `runs show last`); `plan --explain` records nothing. The error
    /// is why the record could not be written.
    pub fn record_early_failure(
        &self,
        workflow: &Workflow,
        inputs: Map<String, Value>,
        request: &RunRequest,
        state: &StateDir,
        message: &str,
    ) -> Result<(), String> {
        if request.no_record {
            return Ok(());
        }
        let state_dir =
            run::state_dir_for(workflow, &inputs, &self.cwd, &state.dir, state.explicit)
                .unwrap_or_else(|_| state.dir.clone());
        state.prepare(&state_dir);
        // No stage runs, so no model is needed: a configuration that does not load is no reason
        // to leave the failure unrecorded.
        let Ok(models) = Models::load(&self.cwd).or_else(|_| Models::from_layers(Vec::new()))
        else {
            return Ok(());
        };
        let runtime = Runtime {
            models: &models,
            cwd: self.cwd.clone(),
            state_dir,
            previous: None,
        };
        let options = RunOptions {
            dry_run: request.dry_run || request.explain,
            quiet: true,
            ..RunOptions::default()
        };
        let message = match message {
            "" => "the run did not start".to_string(),
            text => text.to_string(),
        };
        run::record_failure(workflow, &runtime, &options, inputs, message)
            .map(|_| ())
            .map_err(|error| error.to_string())
    }

    /// A recorded run to resume: its record, and the reference (a name, or the file's path)
    /// that finds its workflow again.
    pub fn recorded_run(
        &self,
        state: &StateDir,
        run_id: &str,
    ) -> Result<(RunRecord, String, ResumeFrom), String> {
        let (id, dir) =
            record::locate_run(&state.search(&self.cwd), run_id).map_err(|e| e.to_string())?;
        let previous = record::read_record(&dir, &id).map_err(|e| e.to_string())?;
        // Its stages are still running: a resume now would run them a second time beside them.
        if let Some(holder) = previous.holder.as_ref().filter(|holder| {
            previous.status == RunStatus::Running
                && holder.liveness() == run::holder::Liveness::Alive
        }) {
            return Err(format!(
                "run {id} is still running (process {}); resume it once it has ended",
                holder.pid
            ));
        }
        let run_dir = record::runs_dir(&dir).join(&id);
        let claim = claim_resume(&run_dir).map_err(|error| match error {
            Some(error) => format!(
                "cannot take {}: {error}",
                run_dir.join("resume.lock").display()
            ),
            None => format!(
                "run {id} is being resumed by another engine; a second resume would run its \
                 unfinished stages twice: wait for that one to end"
            ),
        })?;
        let reference = self.resume_reference(&previous);
        // The work of the runs this one resumed too: what a killed resume had not recorded
        // again is in the run it resumed (the newer run's record of a stage wins).
        let mut outputs = std::collections::HashMap::new();
        let mut items = run::journal::FinishedItems::default();
        for run in record::resume_chain(&dir, &previous) {
            outputs.extend(record::read_outputs(&dir, &run));
            items.read_more(&record::runs_dir(&dir).join(&run));
        }
        let interrupted = matches!(previous.status, RunStatus::Interrupted | RunStatus::Running);
        Ok((
            previous,
            reference,
            ResumeFrom {
                run_id: id,
                outputs: run::Reuse::read(outputs),
                items,
                processes: run::journal::read_processes(&run_dir),
                interrupted,
                rehearsal: false,
                claim: Some(claim),
            },
        ))
    }

    /// How to find a recorded run's workflow again: by name when the search path still leads to
    /// the file the run used, else by that file's path (a run of `stagegraph run flow.toml`).
    fn resume_reference(&self, previous: &RunRecord) -> String {
        let Some(top) = previous.files.first().map(|f| f.path.as_str()) else {
            return previous.workflow.clone();
        };
        let by_name = self.search.find_workflow(&previous.workflow, &self.cwd);
        match by_name {
            Some(found) if found.source.path.display().to_string() == top => {
                previous.workflow.clone()
            }
            _ if top.ends_with(".toml") && Path::new(top).is_file() => top.to_string(),
            _ => previous.workflow.clone(),
        }
    }
}

/// The exclusive lock on `resume.lock` in a run's folder, taken without waiting: `Err(None)`
/// when another process holds it.
fn claim_resume(run_dir: &std::path::Path) -> Result<std::fs::File, Option<std::io::Error>> {
    use std::os::fd::AsRawFd;
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(run_dir.join("resume.lock"))
        .map_err(Some)?;
    // SAFETY: flock on a descriptor this function owns; it touches no memory.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
        return Ok(file);
    }
    let error = std::io::Error::last_os_error();
    if error.raw_os_error() == Some(libc::EWOULDBLOCK) {
        Err(None)
    } else {
        Err(Some(error))
    }
}

/// What a stage selection means for a run: the outputs given (the test case's, and those of
/// the stages upstream of the selection, from the last real run), the run they come from, and
/// the stages left out.
type Selection = (
    HashMap<String, Value>,
    Option<String>,
    std::collections::HashSet<String>,
);

fn select(
    workflow: &Workflow,
    selection: &StageSelection,
    state_dir: &Path,
    given: &HashMap<String, Value>,
) -> Result<Selection, String> {
    if selection.is_empty() {
        return Ok((given.clone(), None, Default::default()));
    }
    let selected = selection.resolve(workflow)?;
    let id = |index: &usize| workflow.stages[*index].id.clone();
    let left_out = (0..workflow.stages.len())
        .filter(|index| !selected.run.contains(index) && !selected.given.contains(index))
        .map(|index| id(&index))
        .collect();
    let mut outputs = given.clone();
    let needed: Vec<String> = selected
        .given
        .iter()
        .map(id)
        .filter(|stage| !given.contains_key(stage))
        .collect();
    if needed.is_empty() {
        return Ok((outputs, None, left_out));
    }
    let Some(last) = record::latest_real_run(state_dir, &workflow.name) else {
        return Err(format!(
            "stage {} upstream of the selection need(s) the output of an earlier run, and `{}` has none in {}; run the whole workflow first, or select with --until",
            quoted(&needed),
            workflow.name,
            state_dir.display()
        ));
    };
    let recorded = record::read_outputs(state_dir, &last.run_id);
    let missing: Vec<String> = needed
        .iter()
        .filter(|stage| !recorded.contains_key(*stage))
        .cloned()
        .collect();
    if !missing.is_empty() {
        return Err(format!(
            "stage {} upstream of the selection has no output in the last run {} (it did not run, or was skipped); run it first, e.g. --until {}",
            quoted(&missing),
            last.run_id,
            missing[0]
        ));
    }
    for stage in needed {
        outputs.insert(stage.clone(), recorded[&stage].output.clone());
    }
    Ok((outputs, Some(last.run_id), left_out))
}

fn quoted(ids: &[String]) -> String {
    ids.iter()
        .map(|id| format!("`{id}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The plan a run follows, wave by wave, at debug level.
fn log_plan(workflow: &Workflow, state_dir: &Path, left_out: &std::collections::HashSet<String>) {
    if !tracing::enabled!(tracing::Level::DEBUG) {
        return;
    }
    tracing::debug!(workflow = %workflow.name, state_dir = %state_dir.display(), "run planned");
    let plan = crate::plan::Plan::new(workflow);
    let named = |wave: &Vec<usize>| -> Vec<&str> {
        wave.iter()
            .map(|&index| workflow.stages[index].id.as_str())
            .filter(|id| !left_out.contains(*id))
            .collect()
    };
    for (number, wave) in plan.waves.iter().enumerate() {
        tracing::debug!(wave = number + 1, stages = ?named(wave), "wave");
    }
    for (number, wave) in plan.finally.iter().enumerate() {
        tracing::debug!(finally_wave = number + 1, stages = ?named(wave), "wave");
    }
}
