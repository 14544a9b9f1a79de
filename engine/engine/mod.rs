//! The library's face: find, list, load, check, plan, run and eject workflows.
//!
//! The command line (engine/main.rs) parses arguments, calls these methods, prints what they
//! return and maps it to exit codes; everything else a command does happens here.

mod eject;
mod execute;
mod host;
mod init;
mod inputs;
mod listing;
mod notice;
mod runs;

use std::path::{Path, PathBuf};

use crate::check::{self, Action, Workflow};
use crate::diag::{did_you_mean, Diagnostic, DiagnosticKind, Severity};
use crate::library::SearchPath;
use crate::load::documents::Documents;
use crate::load::{self, RawWorkflow};
use crate::models::Models;
use crate::project::Project;

pub use eject::EjectError;
pub use execute::{RunFailure, RunRequest, StateDir};
pub use host::{
    builtins_schema, config_schema, interrupt, migrate_recordings, reaper, redact,
    register_secrets, release_relocations, spawn_detached, workflow_schema,
};
pub use init::{init, InitError, Initialized};
pub(crate) use inputs::resolve_answers;
pub use inputs::{read_inputs, resume_inputs, InputError};
pub use listing::{CheckReport, Listing};

/// A search path and a working directory: everything needed to find and check workflows.
pub struct Engine {
    /// Where workflows, templates and schemas are looked up.
    pub(crate) search: SearchPath,
    /// The working directory: paths of the command line are relative to it.
    pub(crate) cwd: PathBuf,
    /// Where parsed documents are kept between loads, if anywhere.
    pub(crate) documents: Option<Documents>,
    /// Checks kept in the state folder (`cache/checks`), for the commands that keep documents.
    pub(crate) kept: Option<crate::check::KeptChecks>,
    /// The `--library` folders, relative to `cwd`.
    pub(crate) libraries: Vec<PathBuf>,
    /// The project `cwd` is in: its root anchors the search path and the state folder.
    pub(crate) project: Project,
}

impl Engine {
    /// The search path of `--library` folders, the environment and the project `cwd` is in.
    pub fn new(libraries: &[PathBuf], cwd: &Path) -> Self {
        let project = Project::find(cwd);
        tracing::debug!(
            root = %project.root.display(),
            marker = project.marker.describe(),
            "project root"
        );
        Engine {
            search: SearchPath::from_env(libraries, cwd, &project.root),
            cwd: cwd.to_path_buf(),
            documents: None,
            kept: None,
            libraries: libraries.iter().map(|dir| cwd.join(dir)).collect(),
            project,
        }
    }

    /// The working directory: paths of the command line are relative to it.
    pub fn cwd(&self) -> &Path {
        &self.cwd
    }

    /// The project the working directory is in.
    pub fn project(&self) -> &Project {
        &self.project
    }

    /// Keep parsed documents in the state folder between loads (`cache/documents`), for
    /// commands that write there anyway. While the folder does not exist (and was not named
    /// on the command line), they are held until [`Engine::write_held_documents`] if `hold`
    /// says the command is likely to run again (not a dry-run, which in CI runs once in a fresh
    /// folder), and not kept otherwise.
    pub fn keep_documents(&mut self, state: &StateDir, hold: bool) {
        let dir = state.dir.join("cache").join("documents");
        self.documents = if state.explicit || state.dir.is_dir() {
            self.kept = Some(crate::check::KeptChecks::new(&state.dir));
            Some(Documents::new(dir))
        } else {
            self.kept = hold.then(|| crate::check::KeptChecks::deferred(&state.dir));
            hold.then(|| Documents::deferred(dir))
        };
    }

    /// Write the documents held back while the state folder did not exist, if it does now (the
    /// command made it to record a run).
    pub fn write_held_documents(&self, state: &StateDir) {
        if let Some(documents) = &self.documents {
            documents.write_held(&state.dir);
        }
        if let Some(kept) = &self.kept {
            kept.write_held(&state.dir);
        }
    }

    /// The text of a workflow's file as found on the search path (by name or path), or the
    /// message saying there is none.
    pub fn workflow_text(&self, reference: &str) -> Result<String, String> {
        self.search
            .find_workflow(reference, &self.cwd)
            .map(|found| found.source.text.to_string())
            .ok_or_else(|| self.no_workflow(reference))
    }

    /// Load and check one workflow (by name or path).
    pub fn load(&self, reference: &str) -> Result<Workflow, Vec<Diagnostic>> {
        self.load_then(reference, |_, _| {})
    }

    /// Load and check one workflow, telling `loaded` its name before it is checked, or read
    /// back from its kept check (then with `true`; see `check::kept`).
    pub fn load_then(
        &self,
        reference: &str,
        mut loaded: impl FnMut(&str, bool),
    ) -> Result<Workflow, Vec<Diagnostic>> {
        let Some(kept) = &self.kept else {
            let raw = load::load_with(&self.search, reference, &self.cwd, self.documents.as_ref())?;
            loaded(&raw.name, false);
            return check::check(raw, &self.search, &self.cwd);
        };
        if let Some(entry) = kept.open(reference, &self.cwd, &self.search) {
            loaded(entry.name(), true);
            if let Some(workflow) = entry.workflow(&self.search) {
                tracing::info!(
                    workflow = %workflow.name,
                    path = %workflow.raw.file().path.display(),
                    "workflow found, its check kept (its files are unchanged)"
                );
                return Ok(workflow);
            }
        }
        // Checked through a search path that writes down what it finds, to keep the result.
        let (search, witness) = self.search.witnessed();
        let raw = load::load_with(&search, reference, &self.cwd, self.documents.as_ref())?;
        loaded(&raw.name, false);
        let checked = check::check(raw, &search, &self.cwd);
        if let Some(documents) = &self.documents {
            documents.release_pool();
        }
        if let Ok(workflow) = &checked {
            kept.write(reference, &self.cwd, &self.search, &witness, workflow);
        }
        checked
    }

    /// Load one workflow without checking it: the merged document, overlays applied
    /// (`show --effective`).
    pub fn load_raw(&self, reference: &str) -> Result<RawWorkflow, Vec<Diagnostic>> {
        load::load(&self.search, reference, &self.cwd)
    }

    /// "no workflow named `x`", with the nearest name on the search path.
    pub fn no_workflow(&self, name: &str) -> String {
        let names = self.search.workflow_names();
        match did_you_mean(name, names.iter().map(String::as_str)) {
            Some(help) => format!("no workflow named `{name}`; {help}"),
            None => format!("no workflow named `{name}`"),
        }
    }
}

/// Prompt stages whose model alias no configuration defines (sub-workflows included), as
/// diagnostics of the given severity: a warning for `check`, an error before a run.
pub(crate) fn undefined_models(
    workflow: &Workflow,
    models: &Models,
    severity: Severity,
) -> Vec<Diagnostic> {
    let mut out = Vec::new();
    for stage in &workflow.stages {
        match &stage.action {
            Action::Prompt(prompt) if !models.defines(&prompt.model) => {
                let location = workflow.raw.locate(&format!("/stages/{}/model", stage.id));
                let known: Vec<String> = models
                    .aliases()
                    .into_iter()
                    .map(|(alias, _)| alias)
                    .collect();
                let model = &prompt.model;
                let help = did_you_mean(model, known.iter().map(String::as_str))
                    .unwrap_or_else(|| format!("define it in stagegraph.toml: [models.{model}] provider = \"command\" command = [...]"));
                let mut diagnostic = Diagnostic::error(DiagnosticKind::UndefinedModel {
                    stage: stage.id.clone(),
                    model: model.clone(),
                })
                .at_opt(location)
                .with_help(help);
                diagnostic.severity = severity;
                out.push(diagnostic);
            }
            Action::Workflow { workflow: sub, .. } => {
                out.extend(undefined_models(sub, models, severity));
            }
            _ => {}
        }
    }
    out
}
