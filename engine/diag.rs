//! Diagnostics: a problem found in a workflow, with the file, the byte span and a suggestion,
//! rendered as a snippet with carets, as JSON, or as GitHub annotations.

use std::fmt::Write as _;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Serialize;

mod kind;

pub use kind::{DiagnosticKind, Escape};

/// A loaded source file, kept so diagnostics can show snippets.
#[derive(Debug, Clone)]
pub(crate) struct SourceFile {
    /// The path shown to users (`<built-in>/workflows/x.toml` for embedded files).
    pub path: PathBuf,
    pub text: Arc<str>,
}

impl SourceFile {
    pub(crate) fn new(path: impl Into<PathBuf>, text: impl Into<Arc<str>>) -> Self {
        SourceFile {
            path: path.into(),
            text: text.into(),
        }
    }

    /// 1-based line and column (in characters) of a byte offset.
    pub(crate) fn line_col(&self, offset: usize) -> (usize, usize) {
        let offset = offset.min(self.text.len());
        let before = &self.text[..floor_char_boundary(&self.text, offset)];
        let line = before.matches('\n').count() + 1;
        let line_start = before.rfind('\n').map_or(0, |i| i + 1);
        let column = before[line_start..].chars().count() + 1;
        (line, column)
    }
}

fn floor_char_boundary(text: &str, mut offset: usize) -> usize {
    while offset > 0 && !text.is_char_boundary(offset) {
        offset -= 1;
    }
    offset
}

/// How bad a diagnostic is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// Worth a look; the workflow still runs (`check --deny-warnings` fails on it).
    Warning,
    /// The workflow is invalid and does not run.
    Error,
}

/// Where a diagnostic points.
#[derive(Debug, Clone)]
pub(crate) struct Location {
    pub source: SourceFile,
    pub span: Range<usize>,
}

/// One problem.
#[derive(Debug, Clone)]
pub struct Diagnostic {
    pub(crate) severity: Severity,
    /// What the problem is. Private with `message`, which is rendered from it when the
    /// diagnostic is built: neither changes without the other.
    kind: DiagnosticKind,
    /// A lowercase fragment that reads after "error: ": the kind, rendered.
    message: String,
    pub(crate) location: Option<Location>,
    /// The label under the carets.
    pub(crate) label: Option<String>,
    /// A suggestion ("did you mean `gate`?").
    pub(crate) help: Option<String>,
    /// The workflow the problem belongs to, when not evident from the location.
    pub(crate) workflow: Option<String>,
}

impl Diagnostic {
    /// An error of this kind, its message rendered from it.
    pub(crate) fn error(kind: DiagnosticKind) -> Self {
        Diagnostic {
            severity: Severity::Error,
            message: kind.to_string(),
            kind,
            location: None,
            label: None,
            help: None,
            workflow: None,
        }
    }

    /// A warning of this kind, its message rendered from it.
    pub(crate) fn warning(kind: DiagnosticKind) -> Self {
        Diagnostic {
            severity: Severity::Warning,
            ..Diagnostic::error(kind)
        }
    }

    pub(crate) fn at(mut self, source: &SourceFile, span: Range<usize>) -> Self {
        self.location = Some(Location {
            source: source.clone(),
            span,
        });
        self
    }

    pub(crate) fn at_opt(self, location: Option<Location>) -> Self {
        match location {
            Some(location) => self.at(&location.source, location.span),
            None => self,
        }
    }

    pub(crate) fn with_help(mut self, help: impl Into<String>) -> Self {
        self.help = Some(help.into());
        self
    }

    pub(crate) fn with_help_opt(mut self, help: Option<String>) -> Self {
        if help.is_some() {
            self.help = help;
        }
        self
    }

    /// Whether it is an error (a workflow with one is invalid), not a warning.
    pub fn is_error(&self) -> bool {
        self.severity == Severity::Error
    }

    /// What the problem is, with the values its message names.
    pub fn kind(&self) -> &DiagnosticKind {
        &self.kind
    }

    /// Whether it is an error or a warning.
    pub fn severity(&self) -> Severity {
        self.severity
    }

    /// What is wrong, as a lowercase fragment that reads after "error: ".
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The file it points into, if it points anywhere.
    pub fn file(&self) -> Option<&Path> {
        self.location.as_ref().map(|l| l.source.path.as_path())
    }

    /// 1-based line and column of the start of the span.
    pub fn line_col(&self) -> Option<(usize, usize)> {
        self.location
            .as_ref()
            .map(|l| l.source.line_col(l.span.start))
    }

    /// `file:line:col: error: message` plus a snippet with carets and the help line.
    pub fn render(&self, color: bool) -> String {
        let mut out = String::new();
        let prefix = match self.severity {
            Severity::Error => "error",
            Severity::Warning => "warning",
        };
        let rendered = self.render_snippet(color);
        match rendered {
            Some(snippet) => out.push_str(&snippet),
            None => {
                let _ = writeln!(out, "{prefix}: {}", self.message);
                if let Some(help) = &self.help {
                    let _ = writeln!(out, "  help: {help}");
                }
            }
        }
        out
    }

    fn render_snippet(&self, color: bool) -> Option<String> {
        let location = self.location.as_ref()?;
        let (line, col) = location.source.line_col(location.span.start);
        let report = SnippetReport {
            message: format!(
                "{}:{line}:{col}: {}",
                location.source.path.display(),
                self.message
            ),
            severity: self.severity,
            source: miette::NamedSource::new(
                location.source.path.display().to_string(),
                location.source.text.to_string(),
            ),
            span: clamp_span(&location.source.text, location.span.clone()),
            label: self.label.clone(),
            help: self.help.clone(),
        };
        let handler = if color {
            miette::GraphicalReportHandler::new_themed(miette::GraphicalTheme::unicode())
        } else {
            miette::GraphicalReportHandler::new_themed(miette::GraphicalTheme::unicode_nocolor())
        }
        .with_context_lines(1);
        let mut out = String::new();
        handler.render_report(&mut out, &report).ok()?;
        Some(out)
    }

    /// The JSON form used by `check --format json`.
    pub fn to_json(&self) -> serde_json::Value {
        let (line, column) = self.line_col().unzip();
        serde_json::json!({
            "severity": self.severity,
            "message": self.message,
            "file": self.file().map(|p| p.display().to_string()),
            "line": line,
            "column": column,
            "span": self.location.as_ref().map(|l| [l.span.start, l.span.end]),
            "label": self.label,
            "help": self.help,
            "workflow": self.workflow,
        })
    }

    /// A GitHub Actions workflow command (`::error file=…,line=…,col=…::message`), escaped as
    /// the runner parses it, with `file` relative to `cwd` (the repository root in CI) so the
    /// annotation lands on the pull request's diff.
    pub fn to_github(&self, cwd: &Path) -> String {
        let kind = match self.severity {
            Severity::Error => "error",
            Severity::Warning => "warning",
        };
        let mut message = self.message.clone();
        if let Some(help) = &self.help {
            message.push_str(&format!(" (help: {help})"));
        }
        let data = github_data(&message);
        match (self.file(), self.line_col()) {
            (Some(file), Some((line, col))) => format!(
                "::{kind} file={},line={line},col={col}::{data}",
                github_property(&shown_path(file, cwd))
            ),
            _ => format!("::{kind}::{data}"),
        }
    }
}

/// `path` as a diagnostic shows it: `.` and `..` resolved without reading the disk, then
/// relative to `cwd` when inside it (`workflows/../bases/x.toml` is `bases/x.toml`).
pub(crate) fn shown_path(path: &Path, cwd: &Path) -> String {
    let normal = |path: &Path| {
        let mut out = std::path::PathBuf::new();
        for part in path.components() {
            match part {
                std::path::Component::CurDir => {}
                std::path::Component::ParentDir
                    if matches!(
                        out.components().next_back(),
                        Some(std::path::Component::Normal(_))
                    ) =>
                {
                    out.pop();
                }
                other => out.push(other),
            }
        }
        out
    };
    let path = normal(path);
    let cwd = normal(cwd);
    path.strip_prefix(&cwd)
        .unwrap_or(&path)
        .display()
        .to_string()
}

/// The message of a workflow command: `%`, CR and LF escaped.
fn github_data(text: &str) -> String {
    text.replace('%', "%25")
        .replace('\r', "%0D")
        .replace('\n', "%0A")
}

/// A property value of a workflow command: as data, and `:` and `,` too.
fn github_property(text: &str) -> String {
    github_data(text).replace(':', "%3A").replace(',', "%2C")
}

fn clamp_span(text: &str, span: Range<usize>) -> miette::SourceSpan {
    let start = floor_char_boundary(text, span.start.min(text.len()));
    let end = floor_char_boundary(text, span.end.min(text.len())).max(start);
    (start, end - start).into()
}

#[derive(Debug)]
struct SnippetReport {
    message: String,
    severity: Severity,
    source: miette::NamedSource<String>,
    span: miette::SourceSpan,
    label: Option<String>,
    help: Option<String>,
}

impl std::fmt::Display for SnippetReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for SnippetReport {}

impl miette::Diagnostic for SnippetReport {
    fn severity(&self) -> Option<miette::Severity> {
        Some(match self.severity {
            Severity::Error => miette::Severity::Error,
            Severity::Warning => miette::Severity::Warning,
        })
    }

    fn help<'a>(&'a self) -> Option<Box<dyn std::fmt::Display + 'a>> {
        self.help
            .as_ref()
            .map(|h| Box::new(h) as Box<dyn std::fmt::Display>)
    }

    fn source_code(&self) -> Option<&dyn miette::SourceCode> {
        Some(&self.source)
    }

    fn labels(&self) -> Option<Box<dyn Iterator<Item = miette::LabeledSpan> + '_>> {
        Some(Box::new(std::iter::once(
            miette::LabeledSpan::new_with_span(self.label.clone(), self.span),
        )))
    }
}

/// The closest candidate to a misspelt name, when one is close enough to suggest.
pub(crate) fn nearest<'a>(
    name: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> Option<&'a str> {
    let mut best: Option<(f64, &str)> = None;
    for candidate in candidates {
        let score = strsim::jaro_winkler(name, candidate);
        if score > 0.8 && best.is_none_or(|(s, _)| score > s) {
            best = Some((score, candidate));
        }
    }
    best.map(|(_, candidate)| candidate)
}

/// [`nearest`], said as help.
pub(crate) fn did_you_mean<'a>(
    name: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> Option<String> {
    nearest(name, candidates).map(|candidate| {
        let mut help = format!("did you mean `{candidate}`?");
        // Two names that look the same: say which character is not what it seems.
        let foreign: Vec<String> = name
            .chars()
            .filter(|c| !c.is_ascii() && !candidate.contains(*c))
            .map(|c| format!("`{c}` (U+{:04X})", u32::from(c)))
            .collect();
        if !foreign.is_empty() {
            help.push_str(&format!(
                " `{name}` has {}, which is not ASCII",
                foreign.join(", ")
            ));
        }
        help
    })
}

/// Whether any diagnostic is an error.
pub(crate) fn has_errors(diagnostics: &[Diagnostic]) -> bool {
    diagnostics.iter().any(Diagnostic::is_error)
}

#[cfg(test)]
mod confusable_tests {
    #[test]
    fn a_name_with_a_look_alike_character_says_which_it_is() {
        let help = super::did_you_mean("g\u{430}te", ["gate", "greet"]).expect("a near miss");
        assert_eq!(
            help,
            "did you mean `gate`? `g\u{430}te` has `\u{430}` (U+0430), which is not ASCII"
        );
        assert_eq!(
            super::did_you_mean("gaet", ["gate"]).as_deref(),
            Some("did you mean `gate`?")
        );
    }
}
