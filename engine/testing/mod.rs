//! `stagegraph test`: golden cases over recordings. A test file (`*.test.toml`) names a workflow
//! and its cases; each case runs in a temporary project of its own (its files, its state
//! folder), in parallel with the others, its model requests answered from recordings. A
//! request with no recording fails the case offline and, under `--record`, is the only one
//! asked of the model: after an edit, only the requests that changed are paid for.
//!
//! The phases: [`file`] reads a test file and checks it against its workflow (a [`file::Suite`]
//! that exists names only stages, outputs and inputs the workflow has), [`case`] runs one case
//! and compares what it did with what it expects, [`report`] writes the results as text, JUnit
//! XML or GitHub annotations.

mod case;
mod file;
mod report;
mod schema;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::diag::{Diagnostic, DiagnosticKind};
use crate::engine::Engine;
use crate::models::Models;

pub use report::{CaseOutcome, CaseReport, TestReport};

/// How a test run treats model requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Recording {
    /// Answer every request from the recordings; a request with none fails its case.
    #[default]
    Offline,
    /// Answer from the recordings what they hold; ask the models the rest and record it.
    Missing,
    /// Ask the models every request and record it anew.
    All,
}

/// What `stagegraph test` is asked to do.
#[derive(Debug, Clone)]
pub struct TestOptions {
    /// Test files and folders holding them; none: the folders of the search path.
    pub paths: Vec<PathBuf>,
    /// Run every test file against this workflow instead of its own (an overlay of it).
    pub workflow: Option<String>,
    /// Cases at once.
    pub jobs: usize,
    /// Whether the models are asked, and what is recorded.
    pub recording: Recording,
    /// Runs of each case.
    pub repeat: usize,
    /// Of the runs, how many must pass (default: all).
    pub min_pass: Option<usize>,
}

impl Default for TestOptions {
    fn default() -> Self {
        TestOptions {
            paths: Vec::new(),
            workflow: None,
            jobs: std::thread::available_parallelism().map_or(2, std::num::NonZero::get),
            recording: Recording::Offline,
            repeat: 1,
            min_pass: None,
        }
    }
}

/// The name every test file ends with.
pub const TEST_SUFFIX: &str = ".test.toml";

impl Engine {
    /// The test files under the given paths (a file as it is, a folder searched for
    /// `*.test.toml`), or beside the workflows of the search path when none is given.
    pub fn test_files(&self, paths: &[PathBuf]) -> Vec<PathBuf> {
        // A folder of the search path is searched to any depth; the project root and the
        // working directory, when no path is given, only at their top (they may hold anything).
        let roots: Vec<(PathBuf, usize)> = if paths.is_empty() {
            let mut roots = vec![(self.project.root.clone(), 1), (self.cwd.clone(), 1)];
            roots.extend(
                self.search
                    .libraries
                    .iter()
                    .filter_map(|library| library.root.clone())
                    .map(|root| (root.join("workflows"), usize::MAX)),
            );
            roots
        } else {
            paths
                .iter()
                .map(|path| (self.cwd.join(path), usize::MAX))
                .collect()
        };
        let mut files = Vec::new();
        for (root, depth) in roots {
            if root.is_file() {
                files.push(root);
                continue;
            }
            let mut found: Vec<PathBuf> = walkdir::WalkDir::new(&root)
                .max_depth(depth)
                .into_iter()
                .filter_map(Result::ok)
                .filter(|entry| {
                    entry.file_type().is_file()
                        && entry.file_name().to_string_lossy().ends_with(TEST_SUFFIX)
                })
                .map(walkdir::DirEntry::into_path)
                .collect();
            found.sort();
            for file in found {
                if !files.contains(&file) {
                    files.push(file);
                }
            }
        }
        files
    }

    /// Read and check the test files, then run their cases, telling `finished` of each as it
    /// ends. Diagnostics when a test file (or its workflow) is invalid: then no case runs.
    pub fn test(
        &self,
        files: &[PathBuf],
        options: &TestOptions,
        finished: &(dyn Fn(&CaseReport) + Sync),
    ) -> Result<TestReport, Vec<Diagnostic>> {
        let started = Instant::now();
        let suites = self.suites(files, options)?;
        let mut models = Vec::new();
        for suite in &suites {
            let loaded = Models::load(&suite.dir).map_err(|error| {
                vec![Diagnostic::error(DiagnosticKind::ModelConfiguration(
                    error.to_string(),
                ))]
            })?;
            models.push(loaded);
        }
        let mut work = Vec::new();
        for (s, suite) in suites.iter().enumerate() {
            for c in 0..suite.cases.len() {
                work.push((s, c));
            }
        }
        let next = AtomicUsize::new(0);
        let reports = Mutex::new(Vec::with_capacity(work.len()));
        let jobs = options.jobs.clamp(1, work.len().max(1));
        std::thread::scope(|scope| {
            for _ in 0..jobs {
                scope.spawn(|| loop {
                    let index = next.fetch_add(1, Ordering::Relaxed);
                    let Some(&(s, c)) = work.get(index) else {
                        break;
                    };
                    let report =
                        case::run(self, &suites[s], &suites[s].cases[c], &models[s], options);
                    finished(&report);
                    reports
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .push((index, report));
                });
            }
        });
        let mut reports = reports
            .into_inner()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        reports.sort_by_key(|(index, _)| *index);
        Ok(TestReport::new(
            reports.into_iter().map(|(_, report)| report).collect(),
            started.elapsed(),
        ))
    }

    /// Every test file read and checked, or every problem of every one.
    fn suites(
        &self,
        files: &[PathBuf],
        options: &TestOptions,
    ) -> Result<Vec<file::Suite>, Vec<Diagnostic>> {
        let env: crate::template::compiled::SharedEnvironment =
            Arc::new(crate::template::environment());
        let mut problems = Vec::new();
        let mut suites = Vec::new();
        // A workflow named by several test files is checked once.
        let mut workflows: Vec<(String, Arc<crate::check::Workflow>)> = Vec::new();
        for path in files {
            let parsed = match file::Parsed::read(path, &self.cwd) {
                Ok(parsed) => parsed,
                Err(diagnostics) => {
                    problems.extend(diagnostics);
                    continue;
                }
            };
            let (written, span) = parsed.workflow();
            let reference = match &options.workflow {
                Some(reference) => reference.clone(),
                None => file::workflow_reference(&parsed.dir, written),
            };
            let workflow = match workflows.iter().find(|(r, _)| *r == reference) {
                Some((_, workflow)) => Arc::clone(workflow),
                None => match self.load(&reference) {
                    Ok(workflow) => {
                        let workflow = Arc::new(workflow);
                        workflows.push((reference.clone(), Arc::clone(&workflow)));
                        workflow
                    }
                    Err(diagnostics) => {
                        problems.push(
                            Diagnostic::error(DiagnosticKind::InvalidTest(format!(
                                "workflow `{}` does not load (below)",
                                options.workflow.as_deref().unwrap_or(written)
                            )))
                            .at(&parsed.source, span),
                        );
                        problems.extend(diagnostics);
                        continue;
                    }
                },
            };
            match parsed.check(workflow, &env) {
                Ok(suite) => suites.push(suite),
                Err(diagnostics) => problems.extend(diagnostics),
            }
        }
        if problems.is_empty() {
            Ok(suites)
        } else {
            Err(problems)
        }
    }
}

/// The JSON Schema of a test file (`stagegraph schema test`).
pub fn test_schema() -> serde_json::Value {
    schema::schema()
}

/// A path shown relative to `cwd` when it is below it.
pub(crate) fn shown(path: &Path, cwd: &Path) -> String {
    path.strip_prefix(cwd).unwrap_or(path).display().to_string()
}

/// How long, as the report prints it.
pub(crate) fn seconds(duration: Duration) -> String {
    format!("{:.3}s", duration.as_secs_f64())
}
