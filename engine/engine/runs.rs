//! Recorded runs as the face shows them: the runs of a state folder (`runs`, `runs show`,
//! `runs prune`), a run record read back, and what a caller reads of a record. The record's
//! format and its writing live in `run::record`.

use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use super::StateDir;
use crate::run::record::{self, RunRecord, RunStatus};

impl StateDir {
    /// Every recorded run in the state folders [`StateDir::search`] gives, oldest first, each
    /// with the state folder that holds it.
    pub fn runs(&self, cwd: &Path) -> Vec<(String, PathBuf)> {
        record::list_runs_in(&self.search(cwd))
    }

    /// The folder under the state folder that holds one folder per run.
    pub fn runs_dir(&self) -> PathBuf {
        record::runs_dir(&self.dir)
    }

    /// Resolve `last` or a unique prefix of a run id to the id, with the state folder that
    /// holds the run.
    pub fn locate(&self, cwd: &Path, run_id: &str) -> Result<(String, PathBuf), String> {
        record::locate_run(&self.search(cwd), run_id).map_err(|e| e.to_string())
    }

    /// Keep the newest `keep` runs of each workflow in every state folder searched (0: all),
    /// and of those as many, newest first, as fit in `keep_bytes`; returns the ids removed.
    pub fn prune(&self, cwd: &Path, keep: usize, keep_bytes: Option<u64>) -> Vec<String> {
        self.search(cwd)
            .iter()
            .flat_map(|dir| record::prune(dir, keep, keep_bytes))
            .collect()
    }

    /// Start reading the cache of workflow `name` on another thread, so that a run that follows
    /// finds it read (a rerun of thousands of cached stages reads it while the run is set up).
    pub fn read_ahead(&self, name: &str) {
        crate::run::cache::read_ahead(&self.dir, name);
    }

    /// The name of a project's folder under the user state folder
    /// (`$XDG_STATE_HOME/stagegraph/<key>`), where a workflow with `[workflow] records` keeps
    /// its runs out of the project tree.
    pub fn project_key(project: &Path) -> String {
        record::project_key(project)
    }
}

impl RunRecord {
    /// The record of run `id` in state folder `state_dir`. A record still `running` whose
    /// process is gone is read (and rewritten) as interrupted.
    pub fn read(state_dir: &Path, id: &str) -> Result<RunRecord, String> {
        record::read_record(state_dir, id).map_err(|e| e.to_string())
    }

    /// The record as [`RunRecord::read`] reads it, but for the large outputs kept in files of
    /// their own, left null (a listing of runs reads no output).
    pub fn read_as_written(state_dir: &Path, id: &str) -> Result<RunRecord, String> {
        record::read_record_as_written(state_dir, id).map_err(|e| e.to_string())
    }

    /// The output that stage `stage` of run `id` recorded, if it recorded one.
    pub fn read_output(state_dir: &Path, id: &str, stage: &str) -> Option<Value> {
        record::read_outputs(state_dir, id)
            .remove(stage)
            .map(|line| line.output)
    }

    /// Run `id`'s report (`runs report`): one self-contained HTML page, the same bytes for the
    /// same record.
    pub fn report_html(state_dir: &Path, id: &str) -> Result<String, String> {
        let record = Self::read(state_dir, id)?;
        let dir = record::runs_dir(state_dir).join(id);
        let plan = std::fs::read(dir.join(record::PLAN_FILE))
            .ok()
            .and_then(|bytes| serde_json::from_slice::<Value>(&bytes).ok());
        let outputs = record::read_outputs(state_dir, id);
        Ok(crate::run::report::render(&record, plan.as_ref(), &outputs))
    }

    /// What changed from run `a` to run `b` (`runs diff`), each given by its state folder and
    /// id.
    pub fn diff(a: (&Path, &str), b: (&Path, &str)) -> Result<crate::RunDiff, String> {
        let read = |(dir, id): (&Path, &str)| -> Result<_, String> {
            let record = Self::read(dir, id)?;
            let plan = std::fs::read(record::runs_dir(dir).join(id).join(record::PLAN_FILE))
                .ok()
                .and_then(|bytes| serde_json::from_slice::<Value>(&bytes).ok());
            let after = crate::run::diff::after_of(plan.as_ref());
            Ok((record, record::read_outputs(dir, id), after))
        };
        let (ra, oa, aa) = read(a)?;
        let (rb, ob, ab) = read(b)?;
        let side = |record, outputs, after| crate::run::diff::DiffSide {
            record,
            outputs,
            after,
        };
        Ok(crate::RunDiff::new(
            &side(&ra, &oa, &aa),
            &side(&rb, &ob, &ab),
        ))
    }

    /// `runs show` as text for run `id`: the record, each stage with what it said on stderr and
    /// the start of its output.
    pub fn show_text(state_dir: &Path, id: &str) -> Result<String, String> {
        let record = Self::read(state_dir, id)?;
        Ok(record.to_text(&record::read_outputs(state_dir, id)))
    }

    /// Send the run's trace where `OTEL_EXPORTER_OTLP_ENDPOINT` (or `..._TRACES_ENDPOINT`)
    /// points, as OTLP/HTTP: `None` when neither is set, else how many spans were sent or why
    /// none arrived (a warning: the run's outcome does not change).
    pub fn export_trace(&self) -> Option<Result<usize, String>> {
        match crate::run::otlp::Exporter::from_env(|name| std::env::var(name).ok()) {
            Ok(None) => None,
            Ok(Some(exporter)) => Some(exporter.export(self)),
            Err(error) => Some(Err(error)),
        }
    }

    /// The run's trace as OTLP/JSON (`runs trace`), with the resource the environment gives
    /// (`OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES`).
    pub fn trace_json(&self) -> Value {
        let mut resource = vec![(
            "service.name".to_string(),
            std::env::var("OTEL_SERVICE_NAME").unwrap_or_else(|_| "stagegraph".into()),
        )];
        if let Ok(attributes) = std::env::var("OTEL_RESOURCE_ATTRIBUTES") {
            resource.extend(
                attributes
                    .split(',')
                    .filter_map(|pair| pair.split_once('='))
                    .filter(|(k, _)| k.trim() != "service.name")
                    .map(|(k, v)| (k.trim().to_string(), v.trim().to_string())),
            );
        }
        crate::run::otlp::to_json(&crate::run::otlp::spans(self), &resource)
    }

    /// Each stage's status in this run, `exited` for the stage whose `exit_if` ended it.
    pub fn stage_statuses(&self) -> std::collections::HashMap<String, String> {
        let exit = self.exit.as_ref().and_then(|e| e.stage.as_deref());
        let mut statuses = std::collections::HashMap::new();
        for (id, stage) in &self.stages {
            let status = if exit == Some(&**id) {
                "exited"
            } else {
                stage.status.as_str()
            };
            statuses.insert(id.to_string(), status.to_string());
            // A sub-workflow's stages as `stage/inner`, the one that ended it `exited`.
            if let Some(sub) = &stage.details().sub_run {
                let exit = sub.exit_stage.as_deref();
                for (inner, status) in &sub.stages {
                    let status = match exit == Some(inner.as_str()) {
                        true => "exited",
                        false => status.as_str(),
                    };
                    statuses.insert(format!("{id}/{inner}"), status.to_string());
                }
            }
        }
        statuses
    }

    /// The run's id.
    pub fn run_id(&self) -> &str {
        &self.run_id
    }

    /// The workflow's name.
    pub fn workflow_name(&self) -> &str {
        &self.workflow
    }

    /// How the run ended (or that it is still running).
    pub fn status(&self) -> RunStatus {
        self.status
    }

    /// The inputs the run was given, resolved.
    pub fn inputs(&self) -> &Map<String, Value> {
        &self.inputs
    }

    /// What the run's model calls cost, one line each: the cost paid, and the cost a real run
    /// would pay when the calls were replayed from recordings. Empty when nothing was priced.
    pub fn cost_lines(&self) -> Vec<String> {
        let usage = &self.usage;
        let mut lines = Vec::new();
        if let Some(cost) = usage.cost_usd {
            lines.push(format!("model calls cost ${cost:.4}"));
        }
        if let Some(cost) = usage.estimated_cost_usd {
            lines.push(format!(
                "a real run would cost about ${cost:.4} (as recorded, over {} model call(s))",
                usage.model_calls
            ));
        }
        lines
    }
}
