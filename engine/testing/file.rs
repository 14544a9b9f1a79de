//! A test file (`*.test.toml`) read and checked against its workflow: the proof that every case
//! names stages, outputs and inputs the workflow has, that its assertions compile and its files
//! stay inside the case's project. A [`Suite`] that exists runs without a check of its own.

use std::collections::{BTreeMap, HashMap};
use std::ops::Range;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use serde::Deserialize;
use serde_json::{Map, Value};
use toml::Spanned;

use crate::check::Workflow;
use crate::diag::{did_you_mean, Diagnostic, DiagnosticKind, SourceFile};
use crate::run::RunStatus;
use crate::template::compiled::SharedEnvironment;
use crate::template::Tmpl;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    /// A workflow name on the search path, or a `.toml` path relative to the test file.
    workflow: Spanned<String>,
    /// The recordings of every case that names none (relative to the test file).
    recordings: Option<String>,
    #[serde(default, rename = "case")]
    cases: Vec<RawCase>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCase {
    name: Spanned<String>,
    #[serde(default)]
    inputs: BTreeMap<Spanned<String>, toml::Value>,
    recordings: Option<String>,
    #[serde(default)]
    files: BTreeMap<Spanned<String>, String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    #[serde(default)]
    answers: BTreeMap<Spanned<String>, String>,
    #[serde(default)]
    stages: BTreeMap<Spanned<String>, RawGiven>,
    skip: Option<String>,
    #[serde(default)]
    expect: RawExpect,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawGiven {
    output: toml::Value,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawExpect {
    status: Option<Spanned<String>>,
    exit_stage: Option<Spanned<String>>,
    error: Option<String>,
    #[serde(default)]
    outputs: BTreeMap<Spanned<String>, toml::Value>,
    #[serde(default)]
    files: BTreeMap<Spanned<String>, Spanned<RawFileExpect>>,
    #[serde(default)]
    assert: Vec<Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum RawFileExpect {
    Exact(String),
    Check(RawFileCheck),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFileCheck {
    contains: Option<String>,
    #[serde(default)]
    absent: bool,
}

/// What a case expects of a file of its project.
#[derive(Debug, Clone)]
pub(crate) enum FileExpect {
    Exact(String),
    Contains(String),
    Absent,
}

/// A checked test file.
pub(crate) struct Suite {
    pub source: SourceFile,
    /// The folder of the test file: its relative paths are relative to it.
    pub dir: PathBuf,
    pub workflow: Arc<Workflow>,
    pub cases: Vec<Case>,
}

/// A checked case.
pub(crate) struct Case {
    pub name: String,
    /// 1-based line and column of its `name`.
    pub line: usize,
    pub column: usize,
    pub inputs: Map<String, Value>,
    pub recordings: PathBuf,
    pub files: Vec<(PathBuf, String)>,
    pub env: Vec<(String, String)>,
    pub answers: Vec<String>,
    pub given: HashMap<String, Value>,
    pub skip: Option<String>,
    pub expect: Expect,
}

pub(crate) struct Expect {
    pub status: RunStatus,
    pub exit_stage: Option<String>,
    pub error: Option<String>,
    pub outputs: Vec<(String, Value)>,
    pub files: Vec<(String, FileExpect)>,
    /// Each assertion's source and its compiled expression.
    pub asserts: Vec<(String, Tmpl)>,
}

/// The reference a test file gives for its workflow, as the engine finds it: a `.toml` path
/// resolved against the test file's folder, a name as it is.
pub(crate) fn workflow_reference(dir: &Path, reference: &str) -> String {
    if reference.ends_with(".toml") && !Path::new(reference).is_absolute() {
        dir.join(reference).display().to_string()
    } else {
        reference.to_string()
    }
}

/// The first pass: the text as a test file, its workflow reference with where it is written.
pub(crate) struct Parsed {
    raw: RawFile,
    pub source: SourceFile,
    pub dir: PathBuf,
}

impl Parsed {
    /// Read a test file; diagnostics name it relative to `cwd` when it is below it.
    pub(crate) fn read(path: &Path, cwd: &Path) -> Result<Parsed, Vec<Diagnostic>> {
        let text = std::fs::read_to_string(path).map_err(|error| {
            vec![Diagnostic::error(DiagnosticKind::InvalidTest(format!(
                "cannot read test file `{}`: {error}",
                path.display()
            )))]
        })?;
        let source = SourceFile::new(path.strip_prefix(cwd).unwrap_or(path), text);
        let raw: RawFile = toml::from_str(&source.text).map_err(|error| {
            let message = lowercase_first(error.message().trim());
            vec![at(&source, error.span().unwrap_or(0..0), message)]
        })?;
        let dir = path.parent().map_or_else(PathBuf::new, Path::to_path_buf);
        Ok(Parsed { raw, source, dir })
    }

    /// The workflow reference, and the span of its value.
    pub(crate) fn workflow(&self) -> (&str, Range<usize>) {
        (self.raw.workflow.get_ref(), self.raw.workflow.span())
    }

    /// Check every case against the workflow; every problem is reported.
    pub(crate) fn check(
        self,
        workflow: Arc<Workflow>,
        env: &SharedEnvironment,
    ) -> Result<Suite, Vec<Diagnostic>> {
        let Parsed { raw, source, dir } = self;
        let mut problems = Vec::new();
        let stem = source
            .path
            .file_name()
            .map(|name| name.to_string_lossy().trim_end_matches(".toml").to_string())
            .map(|name| name.trim_end_matches(".test").to_string())
            .unwrap_or_default();
        let default_recordings = raw
            .recordings
            .as_deref()
            .map_or_else(|| dir.join("recordings").join(&stem), |r| dir.join(r));
        let stage_ids: Vec<&str> = workflow.stages.iter().map(|s| s.id.as_str()).collect();
        let output_names: Vec<&str> = workflow.outputs.iter().map(|(n, _)| n.as_str()).collect();
        let mut names: HashMap<String, Range<usize>> = HashMap::new();
        let mut cases = Vec::new();
        for raw_case in raw.cases {
            let mut bad = |span: Range<usize>, message: String, help: Option<String>| {
                problems.push(at(&source, span, message).with_help_opt(help));
            };
            let name = raw_case.name.get_ref().clone();
            if name.trim().is_empty() {
                bad(raw_case.name.span(), "a case needs a name".into(), None);
            }
            if names.insert(name.clone(), raw_case.name.span()).is_some() {
                bad(
                    raw_case.name.span(),
                    format!("a case named `{name}` comes earlier in this file"),
                    Some("give every case a name of its own".into()),
                );
            }
            let mut pairs = Map::new();
            for (key, value) in &raw_case.inputs {
                let value = json_of(value);
                if !workflow.inputs.contains_key(key.get_ref()) {
                    let help =
                        did_you_mean(key.get_ref(), workflow.inputs.keys().map(String::as_str));
                    bad(
                        key.span(),
                        format!(
                            "workflow `{}` has no input `{}`",
                            workflow.name,
                            key.get_ref()
                        ),
                        help,
                    );
                    continue;
                }
                pairs.insert(key.get_ref().clone(), value);
            }
            let inputs = match crate::run::inputs::resolve_inputs(&workflow, Map::new(), &pairs) {
                Ok(inputs) => inputs,
                Err(error) => {
                    bad(
                        raw_case.name.span(),
                        format!("case `{name}`: {}", error.message),
                        None,
                    );
                    Map::new()
                }
            };
            // A stage the case names that the workflow lacks.
            let no_stage = |bad: &mut dyn FnMut(Range<usize>, String, Option<String>),
                            stage: &Spanned<String>| {
                if !stage_ids.contains(&stage.get_ref().as_str()) {
                    let help = did_you_mean(stage.get_ref(), stage_ids.iter().copied());
                    let message = format!(
                        "workflow `{}` has no stage `{}`",
                        workflow.name,
                        stage.get_ref()
                    );
                    bad(stage.span(), message, help);
                }
            };
            let mut given = HashMap::new();
            for (stage, value) in &raw_case.stages {
                no_stage(&mut bad, stage);
                given.insert(stage.get_ref().clone(), json_of(&value.output));
            }
            let mut answers = Vec::new();
            for (stage, value) in &raw_case.answers {
                no_stage(&mut bad, stage);
                answers.push(format!("{}={value}", stage.get_ref()));
            }
            let mut files = Vec::new();
            for (path, text) in &raw_case.files {
                match inside(path.get_ref()) {
                    Some(relative) => files.push((relative, text.clone())),
                    None => bad(
                        path.span(),
                        format!(
                            "`{}` is not a relative path inside the case's project",
                            path.get_ref()
                        ),
                        None,
                    ),
                }
            }
            let expect = raw_case.expect;
            let status = match &expect.status {
                None => RunStatus::Completed,
                Some(status) => match status.get_ref().as_str() {
                    "completed" => RunStatus::Completed,
                    "exited" => RunStatus::Exited,
                    "failed" => RunStatus::Failed,
                    other => {
                        bad(
                            status.span(),
                            format!(
                                "`expect.status` must be \"completed\", \"exited\" or \"failed\", not \"{other}\""
                            ),
                            None,
                        );
                        RunStatus::Completed
                    }
                },
            };
            if let Some(stage) = &expect.exit_stage {
                if !stage_ids.contains(&stage.get_ref().as_str()) {
                    let help = did_you_mean(stage.get_ref(), stage_ids.iter().copied());
                    bad(
                        stage.span(),
                        format!(
                            "workflow `{}` has no stage `{}`",
                            workflow.name,
                            stage.get_ref()
                        ),
                        help,
                    );
                } else if status != RunStatus::Exited {
                    bad(
                        stage.span(),
                        "`exit_stage` needs `status = \"exited\"`".into(),
                        None,
                    );
                }
            }
            let mut outputs = Vec::new();
            for (output, value) in &expect.outputs {
                if !output_names.contains(&output.get_ref().as_str()) {
                    let help = did_you_mean(output.get_ref(), output_names.iter().copied());
                    bad(
                        output.span(),
                        format!(
                            "workflow `{}` declares no output `{}`",
                            workflow.name,
                            output.get_ref()
                        ),
                        help,
                    );
                }
                outputs.push((output.get_ref().clone(), json_of(value)));
            }
            let mut file_expects = Vec::new();
            for (path, check) in &expect.files {
                if inside(path.get_ref()).is_none() {
                    bad(
                        path.span(),
                        format!(
                            "`{}` is not a relative path inside the case's project",
                            path.get_ref()
                        ),
                        None,
                    );
                }
                let check_span = check.span();
                let expected = match check.get_ref() {
                    RawFileExpect::Exact(text) => FileExpect::Exact(text.clone()),
                    RawFileExpect::Check(RawFileCheck {
                        contains: Some(text),
                        absent: false,
                    }) => FileExpect::Contains(text.clone()),
                    RawFileExpect::Check(RawFileCheck {
                        contains: None,
                        absent: true,
                    }) => FileExpect::Absent,
                    RawFileExpect::Check(_) => {
                        bad(
                            check_span,
                            "a file expectation is a string, `{ contains = \"...\" }` or `{ absent = true }`".into(),
                            None,
                        );
                        continue;
                    }
                };
                file_expects.push((path.get_ref().clone(), expected));
            }
            let mut asserts = Vec::new();
            for source_text in &expect.assert {
                match Tmpl::expression(env, source_text.get_ref()) {
                    Ok(compiled) => asserts.push((source_text.get_ref().clone(), compiled)),
                    Err(error) => bad(
                        source_text.span(),
                        format!("this assertion does not compile: {error}"),
                        Some(
                            "write an expression over `run`, `stages`, `outputs` and `inputs`"
                                .into(),
                        ),
                    ),
                }
            }
            let (line, column) = source.line_col(raw_case.name.span().start);
            cases.push(Case {
                name,
                line,
                column,
                inputs,
                recordings: raw_case
                    .recordings
                    .as_deref()
                    .map_or_else(|| default_recordings.clone(), |r| dir.join(r)),
                files,
                env: raw_case.env.into_iter().collect(),
                answers,
                given,
                skip: raw_case.skip,
                expect: Expect {
                    status,
                    exit_stage: expect.exit_stage.map(Spanned::into_inner),
                    error: expect.error,
                    outputs,
                    files: file_expects,
                    asserts,
                },
            });
        }
        if !problems.is_empty() {
            return Err(problems);
        }
        Ok(Suite {
            source,
            dir,
            workflow,
            cases,
        })
    }
}

fn at(source: &SourceFile, span: Range<usize>, message: String) -> Diagnostic {
    Diagnostic::error(DiagnosticKind::InvalidTest(message)).at(source, span)
}

/// A relative path that stays inside the folder it is relative to.
fn inside(path: &str) -> Option<PathBuf> {
    let path = Path::new(path);
    let plain = !path.as_os_str().is_empty()
        && path
            .components()
            .all(|part| matches!(part, Component::Normal(_) | Component::CurDir));
    plain.then(|| path.to_path_buf())
}

fn json_of(value: &toml::Value) -> Value {
    serde_json::to_value(value).unwrap_or(Value::Null)
}

fn lowercase_first(text: &str) -> String {
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => first.to_lowercase().chain(chars).collect(),
        None => String::new(),
    }
}
