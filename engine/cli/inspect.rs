//! The commands that read and print: list, show, check, plan, runs (and eject, which copies,
//! and recordings migrate, which rewrites).

use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use stagegraph::{exit, EjectError, Listing, Plan, RunRecord, JSON_VERSION};

use super::args::{CheckFormat, PlanFormat, RunsAction, RunsFilter, ShowFormat, TextOrJson};
use super::{invalid, pretty, App, Failure};

impl App {
    pub(crate) fn list(&self, format: TextOrJson) -> Result<i32, Failure> {
        let workflows = self.engine.list();
        if format == TextOrJson::Json {
            let listed: Vec<Value> = workflows.iter().map(Listing::to_json).collect();
            let doc = serde_json::json!({ "version": JSON_VERSION, "workflows": listed });
            outln!("{}", serde_json::to_string_pretty(&doc).unwrap_or_default());
            return Ok(exit::SUCCESS);
        }
        if workflows.is_empty() {
            errln!("no workflows on the search path");
        }
        let width = workflows.iter().map(|w| w.name.len()).max().unwrap_or(0);
        for w in &workflows {
            outln!("{:width$}  {}  [{}]", w.name, w.description, w.origin());
        }
        Ok(exit::SUCCESS)
    }

    pub(crate) fn show(
        &self,
        name: &str,
        effective: bool,
        format: ShowFormat,
    ) -> Result<i32, Failure> {
        if !effective {
            let text = self.engine.workflow_text(name).map_err(invalid)?;
            out!("{text}");
            return Ok(exit::SUCCESS);
        }
        let raw = self.engine.load_raw(name).map_err(|d| {
            self.print_diagnostics(&d);
            invalid(format!("workflow `{name}` is invalid"))
        })?;
        match format {
            ShowFormat::Json => {
                let mut doc = Map::new();
                doc.insert("version".into(), JSON_VERSION.into());
                doc.extend(raw.effective_json());
                outln!("{}", serde_json::to_string_pretty(&doc).unwrap_or_default());
            }
            ShowFormat::Toml => out!("{}", raw.effective_toml()),
        }
        Ok(exit::SUCCESS)
    }

    pub(crate) fn check(
        &self,
        names: &[String],
        format: CheckFormat,
        deny_warnings: bool,
    ) -> Result<i32, Failure> {
        // A test file beside its workflow (a glob such as `workflows/*.toml` takes both) is
        // checked by `stagegraph test`, which reads its format.
        let (tests, names): (Vec<&String>, Vec<String>) = {
            let (tests, names): (Vec<&String>, Vec<&String>) =
                names.iter().partition(|name| name.ends_with(".test.toml"));
            (tests, names.into_iter().cloned().collect())
        };
        if format == CheckFormat::Text {
            for test in &tests {
                errln!(
                    "{test}: a test file, skipped (`stagegraph test {test}` checks and runs it)"
                );
            }
        }
        if !tests.is_empty() && names.is_empty() {
            return Ok(exit::SUCCESS);
        }
        let report = self
            .engine
            .check_all(&names, &|_| crate::return_freed_pages_at_once());
        match format {
            CheckFormat::Text => {
                self.print_diagnostics(&report.diagnostics);
                for line in report.verdicts(deny_warnings) {
                    errln!("{line}");
                }
            }
            CheckFormat::Json => outln!("{}", pretty(&report.to_json())),
            CheckFormat::Github => {
                for d in &report.diagnostics {
                    outln!("{}", d.to_github(self.engine.cwd()));
                }
            }
        }
        Ok(if report.failed(deny_warnings) {
            exit::INVALID
        } else {
            exit::SUCCESS
        })
    }

    pub(crate) fn plan(
        &self,
        name: &str,
        format: PlanFormat,
        all_edges: bool,
        run: Option<&str>,
        selection: &stagegraph::StageSelection,
    ) -> Result<i32, Failure> {
        let workflow = self.load(name)?;
        let mut plan = Plan::new(&workflow)
            .with_all_edges(all_edges)
            .with_selection(selection)
            .map_err(invalid)?;
        if let Some(run) = run {
            let (id, dir) = self.state.locate(self.engine.cwd(), run).map_err(invalid)?;
            let record = RunRecord::read(&dir, &id).map_err(invalid)?;
            plan = plan.with_statuses(record.stage_statuses());
        }
        match format {
            PlanFormat::Text => crate::out_text(plan.to_text()),
            PlanFormat::Json => outln!(
                "{}",
                serde_json::to_string_pretty(&plan.to_json()).unwrap_or_default()
            ),
            PlanFormat::Dot => crate::out_text(plan.to_dot()),
            PlanFormat::Mermaid => crate::out_text(plan.to_mermaid()),
        }
        Ok(exit::SUCCESS)
    }

    pub(crate) fn runs(
        &self,
        action: Option<RunsAction>,
        format: TextOrJson,
        filter: &RunsFilter,
    ) -> Result<i32, Failure> {
        let cwd = self.engine.cwd();
        match action {
            None => {
                let ids = self.state.runs(cwd);
                if ids.is_empty() && format == TextOrJson::Text {
                    errln!("no runs in {}", self.state.runs_dir().display());
                }
                let filtered = filter.workflow.is_some() || filter.status.is_some();
                let mut records: Vec<(String, Result<RunRecord, String>)> = ids
                    .into_iter()
                    .map(|(id, dir)| {
                        let record = RunRecord::read_as_written(&dir, &id);
                        (id, record)
                    })
                    .filter(|(_, record)| match record {
                        Ok(r) => {
                            filter
                                .workflow
                                .as_ref()
                                .is_none_or(|name| r.workflow_name() == name)
                                && filter
                                    .status
                                    .is_none_or(|status| status.matches(r.status()))
                        }
                        // An unreadable record matches no filter.
                        Err(_) => !filtered,
                    })
                    .collect();
                if let Some(limit) = filter.limit {
                    let skip = records.len().saturating_sub(limit);
                    records.drain(..skip);
                }
                let mut listed = Vec::new();
                for (id, record) in records {
                    match record {
                        Ok(r) if format == TextOrJson::Json => listed.push(r.listing_json()),
                        Err(error) if format == TextOrJson::Json => {
                            listed.push(serde_json::json!({ "run_id": id, "unreadable": error }));
                        }
                        Ok(r) => outln!("{}", r.listing_line(&id)),
                        Err(error) => outln!("{id}  (unreadable: {error})"),
                    }
                }
                if format == TextOrJson::Json {
                    let doc = serde_json::json!({ "version": JSON_VERSION, "runs": listed });
                    outln!("{}", serde_json::to_string_pretty(&doc).unwrap_or_default());
                }
                Ok(exit::SUCCESS)
            }
            Some(RunsAction::Show {
                run_id,
                format: show_format,
                json,
                stage,
            }) => {
                let json = json || show_format == TextOrJson::Json || format == TextOrJson::Json;
                let (id, dir) = self.state.locate(cwd, &run_id).map_err(invalid)?;
                let r = RunRecord::read(&dir, &id).map_err(invalid)?;
                if let Some(stage) = stage {
                    let output = RunRecord::read_output(&dir, &id, &stage).ok_or_else(|| {
                        invalid(format!("run {id} recorded no output for stage `{stage}`"))
                    })?;
                    match &output {
                        Value::String(text) => out!("{text}"),
                        other => outln!("{}", pretty(other)),
                    }
                } else if json {
                    outln!("{}", pretty(&r.versioned_json()));
                } else {
                    crate::out_text(RunRecord::show_text(&dir, &id).map_err(invalid)?);
                }
                Ok(exit::SUCCESS)
            }
            Some(RunsAction::Report { run_id, output }) => {
                let (id, dir) = self.state.locate(cwd, &run_id).map_err(invalid)?;
                let html = RunRecord::report_html(&dir, &id).map_err(invalid)?;
                let path = match output {
                    Some(path) => cwd.join(path),
                    None => dir.join("runs").join(&id).join("report.html"),
                };
                std::fs::write(&path, html).map_err(|error| Failure {
                    code: exit::FAILED,
                    message: format!("cannot write {}: {error}", path.display()),
                })?;
                outln!("{}", path.display());
                Ok(exit::SUCCESS)
            }
            Some(RunsAction::Diff {
                a,
                b,
                format: diff_format,
            }) => {
                let ((ia, da), (ib, db)) = match b {
                    Some(b) => (
                        self.state.locate(cwd, &a).map_err(invalid)?,
                        self.state.locate(cwd, &b).map_err(invalid)?,
                    ),
                    None => {
                        let later = self.state.locate(cwd, &a).map_err(invalid)?;
                        (self.run_before(cwd, &later)?, later)
                    }
                };
                let diff = RunRecord::diff((&da, &ia), (&db, &ib)).map_err(invalid)?;
                if diff_format == TextOrJson::Json || format == TextOrJson::Json {
                    outln!("{}", pretty(&diff.to_json()));
                } else {
                    crate::out_text(diff.to_text());
                }
                Ok(exit::SUCCESS)
            }
            Some(RunsAction::Trace { run_id, output }) => {
                let (id, dir) = self.state.locate(cwd, &run_id).map_err(invalid)?;
                let r = RunRecord::read(&dir, &id).map_err(invalid)?;
                let text = pretty(&r.trace_json());
                match output {
                    None => outln!("{text}"),
                    Some(path) => {
                        let path = cwd.join(path);
                        std::fs::write(&path, text + "\n").map_err(|error| Failure {
                            code: exit::FAILED,
                            message: format!("cannot write {}: {error}", path.display()),
                        })?;
                    }
                }
                Ok(exit::SUCCESS)
            }
            Some(RunsAction::Prune { keep, keep_size }) => {
                let removed = self.state.prune(cwd, keep, keep_size);
                errln!("removed {} run(s)", removed.len());
                Ok(exit::SUCCESS)
            }
        }
    }

    pub(crate) fn migrate_recordings(&self, dir: &std::path::Path) -> Result<i32, Failure> {
        let dir = self.engine.cwd().join(dir);
        let done = stagegraph::migrate_recordings(&dir).map_err(|message| Failure {
            code: exit::FAILED,
            message,
        })?;
        for (file, reason) in &done.skipped {
            errln!("skipped {file}: {reason}");
        }
        errln!(
            "{}: {} migrated, {} already portable, {} skipped",
            dir.display(),
            done.migrated,
            done.current,
            done.skipped.len()
        );
        Ok(exit::SUCCESS)
    }

    /// The run of the same workflow that started last before `later` (`runs diff RUN`).
    fn run_before(
        &self,
        cwd: &Path,
        later: &(String, PathBuf),
    ) -> Result<(String, PathBuf), Failure> {
        let workflow = RunRecord::read_as_written(&later.1, &later.0)
            .map_err(invalid)?
            .workflow_name()
            .to_string();
        self.state
            .runs(cwd)
            .into_iter()
            .filter(|(id, _)| *id < later.0)
            .rev()
            .find(|(id, dir)| {
                RunRecord::read_as_written(dir, id).is_ok_and(|r| r.workflow_name() == workflow)
            })
            .ok_or_else(|| {
                invalid(format!(
                    "run {} is the first recorded run of `{workflow}`: there is none before it \
                     to compare with\n  help: name both runs: `stagegraph runs diff A B`",
                    later.0
                ))
            })
    }

    pub(crate) fn eject(&self, name: &str) -> Result<i32, Failure> {
        let cwd = self.engine.cwd();
        self.engine
            .eject(name, |path| {
                errln!("wrote {}", path.strip_prefix(cwd).unwrap_or(path).display());
            })
            .map_err(|error| match error {
                EjectError::Write { .. } => Failure {
                    code: exit::FAILED,
                    message: error.to_string(),
                },
                EjectError::AlreadyOwned { .. } => invalid(format!(
                    "{error}\n  help: edit it there; `eject` copies a workflow from outside the \
                     project (the built-in library, ~/.config/stagegraph/, --library) into \
                     .stagegraph/"
                )),
                _ => invalid(error.to_string()),
            })?;
        Ok(exit::SUCCESS)
    }
}
