//! `list` and `check` over the search path: what each workflow is and where it comes from, and
//! the diagnostics of many workflows at once with a count per workflow.

use serde::Deserialize;
use serde_json::Value;

use super::{undefined_models, Engine};
use crate::diag::{has_errors, Diagnostic, DiagnosticKind, Severity};
use crate::library::{Library, Shelf};
use crate::models::Models;
use crate::JSON_VERSION;

/// One workflow on the search path.
#[derive(Debug, Clone)]
pub struct Listing {
    /// Its name.
    pub name: String,
    /// `[workflow] description`, or empty.
    pub description: String,
    /// The library it resolves to.
    pub(crate) library: Library,
    /// Libraries lower on the path with a workflow of the same name, which it overlays.
    pub(crate) overlays: Vec<Library>,
}

impl Listing {
    /// Its entry in `list --format json`.
    pub fn to_json(&self) -> Value {
        serde_json::json!({
            "name": self.name,
            "description": self.description,
            "library": self.library.display(),
            "origin": self.library.origin.to_string(),
            "overlays": self.overlays.iter().map(Library::display).collect::<Vec<_>>(),
        })
    }

    /// Where it comes from: `<library> (<origin>)`, then `, overlays <libraries>` if any.
    pub fn origin(&self) -> String {
        let mut origin = format!("{} ({})", self.library.display(), self.library.origin);
        if !self.overlays.is_empty() {
            origin.push_str(&format!(
                ", overlays {}",
                self.overlays
                    .iter()
                    .map(Library::display)
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        origin
    }
}

/// The diagnostics of `check` over some workflows, each tagged with its workflow, and the
/// count of errors and warnings of each.
#[derive(Debug, Default)]
pub struct CheckReport {
    /// (workflow, errors, warnings), in the order checked.
    pub summary: Vec<(String, usize, usize)>,
    /// Every diagnostic, those outside any workflow (the model configuration) first.
    pub diagnostics: Vec<Diagnostic>,
}

impl CheckReport {
    /// Whether the check failed: an error, or a warning when warnings are denied.
    pub fn failed(&self, deny_warnings: bool) -> bool {
        has_errors(&self.diagnostics)
            || (deny_warnings
                && self
                    .diagnostics
                    .iter()
                    .any(|d| d.severity == Severity::Warning))
    }

    /// `check --format json`: the count per workflow and every diagnostic.
    pub fn to_json(&self) -> Value {
        serde_json::json!({
            "version": JSON_VERSION,
            "workflows": self
                .summary
                .iter()
                .map(|(n, e, w)| serde_json::json!({"name": n, "errors": e, "warnings": w}))
                .collect::<Vec<_>>(),
            "diagnostics": self.diagnostics.iter().map(Diagnostic::to_json).collect::<Vec<_>>(),
        })
    }

    /// The lines that end `check` in text form, one per workflow and one for errors outside
    /// them. They never contradict the exit code: warnings denied fail, and an error outside
    /// every workflow (the model configuration) is counted on its own.
    pub fn verdicts(&self, deny_warnings: bool) -> Vec<String> {
        let mut lines: Vec<String> = self
            .summary
            .iter()
            .map(|(name, errors, warnings)| {
                let verdict = match (*errors, *warnings) {
                    (e, _) if e > 0 => "invalid",
                    (_, w) if w > 0 && deny_warnings => "failed (warnings denied)",
                    _ => "ok",
                };
                format!("{name}: {verdict} ({errors} error(s), {warnings} warning(s))")
            })
            .collect();
        let outside = self.errors_outside();
        if outside > 0 {
            lines.push(format!(
                "check failed: {outside} error(s) outside the workflows"
            ));
        }
        lines
    }

    /// Errors that belong to no workflow.
    pub fn errors_outside(&self) -> usize {
        self.diagnostics
            .iter()
            .filter(|d| d.is_error() && d.workflow.is_none())
            .count()
    }
}

impl Engine {
    /// Every workflow on the search path, by name, with its description.
    pub fn list(&self) -> Vec<Listing> {
        self.search
            .workflows()
            .into_iter()
            .map(|(name, library, overlays)| Listing {
                description: description(&library, &name),
                name,
                library,
                overlays,
            })
            .collect()
    }

    /// Check workflows by name or path (none: every workflow on the search path), with the
    /// model aliases they use checked against the configuration as warnings. `loaded` is told
    /// each one's name once it is read, before it is checked (see [`Engine::load_then`]).
    pub fn check_all(&self, names: &[String], loaded: &dyn Fn(&str)) -> CheckReport {
        let names: Vec<String> = if names.is_empty() {
            self.search.workflow_names()
        } else {
            names.to_vec()
        };
        let mut report = CheckReport::default();
        let models = match Models::load(&self.cwd) {
            Ok(models) => Some(models),
            Err(error) => {
                report
                    .diagnostics
                    .push(Diagnostic::error(DiagnosticKind::ModelConfiguration(
                        error.to_string(),
                    )));
                None
            }
        };
        for name in &names {
            let diagnostics = match self.load_then(name, |name, _| loaded(name)) {
                Ok(workflow) => {
                    let mut diagnostics = workflow.warnings.clone();
                    if let Some(models) = &models {
                        diagnostics.extend(undefined_models(&workflow, models, Severity::Warning));
                    }
                    // Not freed: the process ends soon after, and freeing the stages of a
                    // large workflow one by one takes longer than the exit that reclaims them.
                    std::mem::forget(workflow);
                    diagnostics
                }
                Err(diagnostics) => diagnostics,
            };
            let diagnostics: Vec<Diagnostic> = diagnostics
                .into_iter()
                .map(|mut d| {
                    d.workflow.get_or_insert_with(|| name.clone());
                    d
                })
                .collect();
            let errors = diagnostics.iter().filter(|d| d.is_error()).count();
            let warnings = diagnostics.len() - errors;
            report.summary.push((name.clone(), errors, warnings));
            report.diagnostics.extend(diagnostics);
        }
        report
    }
}

/// `[workflow] description` of a workflow file, read without checking it.
fn description(library: &Library, name: &str) -> String {
    #[derive(Deserialize)]
    struct File {
        workflow: Option<Head>,
    }
    #[derive(Deserialize)]
    struct Head {
        description: Option<String>,
    }
    library
        .read(Shelf::Workflows, &format!("{name}.toml"))
        .and_then(|source| toml::from_str::<File>(&source.text).ok())
        .and_then(|file| file.workflow?.description)
        .unwrap_or_default()
}
