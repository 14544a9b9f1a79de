//! Load: TOML text -> [`RawWorkflow`].
//!
//! Every file is parsed with byte spans kept; the document becomes a JSON value plus a map from
//! each JSON pointer to where it was written, so every later phase can point at a line. Overlays
//! (`extends`) are merged here: the result is one document whose keys each remember the file
//! they came from.

pub(crate) mod documents;
mod effective;
mod split;
mod typed;

use std::collections::HashMap;
use std::ops::Range;
use std::path::Path;
use std::sync::OnceLock;

use serde_json::{Map, Value};
use toml::de::{DeTable, DeValue};

use crate::diag::{did_you_mean, Diagnostic, DiagnosticKind, Location, SourceFile};
use crate::format::{WorkflowFile, ACTION_KEYS};
use crate::library::{Found, Library, SearchPath};
use documents::{Documents, Kept};

/// Where a key of the merged document was written. Kept compact (20 bytes): a workflow of
/// thousands of stages has an origin for every key.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Origin {
    /// Index into [`RawWorkflow::sources`].
    source: u32,
    /// The key's span (or the value's, for array elements).
    key: [u32; 2],
    value: [u32; 2],
}

impl Origin {
    pub(crate) fn new(source: usize, key: Range<usize>, value: Range<usize>) -> Self {
        let narrow = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
        Origin {
            source: narrow(source),
            key: [narrow(key.start), narrow(key.end)],
            value: [narrow(value.start), narrow(value.end)],
        }
    }

    /// Index into [`RawWorkflow::sources`].
    pub(crate) fn source(&self) -> usize {
        self.source as usize
    }

    pub(crate) fn key(&self) -> Range<usize> {
        self.key[0] as usize..self.key[1] as usize
    }

    pub(crate) fn value(&self) -> Range<usize> {
        self.value[0] as usize..self.value[1] as usize
    }

    fn shifted(self, offset: usize) -> Self {
        Origin {
            source: self.source + offset as u32,
            ..self
        }
    }
}

/// JSON pointer -> origin. A workflow of thousands of stages has tens of thousands of pointers:
/// hashed with foldhash, not SipHash (the files hashed are the user's own).
pub(crate) type Origins = foldhash::HashMap<String, Origin>;

/// A workflow document, overlays merged, every key's origin known.
#[derive(Debug, Clone)]
pub struct RawWorkflow {
    pub(crate) name: String,
    pub(crate) doc: Value,
    /// See [`RawWorkflow::origins`].
    origins: OnceLock<Origins>,
    /// The files of the chain, the top overlay first.
    pub(crate) sources: Vec<SourceFile>,
    /// The library of the top file (templates and schemas are looked up there first).
    pub(crate) library: Library,
    /// Stages removed by `disabled = true`, with where that was said.
    pub(crate) disabled: HashMap<String, Origin>,
    /// The typed reading of a kept document, read straight from it: `doc` is then `Null`
    /// until a diagnostic needs it ([`RawWorkflow::need_document`]).
    pub(crate) typed: Option<Box<WorkflowFile>>,
}

impl RawWorkflow {
    /// A file on its own read straight as the typed workflow: no document until a diagnostic
    /// needs one ([`RawWorkflow::need_document`]).
    fn typed(name: String, found: &Found, file: WorkflowFile) -> Self {
        RawWorkflow {
            name,
            doc: Value::Null,
            origins: OnceLock::new(),
            sources: vec![found.source.clone()],
            library: found.library.clone(),
            disabled: HashMap::new(),
            typed: Some(Box::new(file)),
        }
    }

    /// A checked workflow's file read back (`check::kept`): no document until a diagnostic
    /// needs one ([`RawWorkflow::need_document`]).
    pub(crate) fn checked(name: String, source: SourceFile, library: Library) -> Self {
        RawWorkflow {
            name,
            doc: Value::Null,
            origins: OnceLock::new(),
            sources: vec![source],
            library,
            disabled: HashMap::new(),
            typed: None,
        }
    }

    /// The document, parsed again from the file's text if it was read straight as the typed
    /// workflow (a file on its own: the only kind read that way).
    pub(crate) fn need_document(&mut self) {
        if self.doc.is_null() && self.sources.len() == 1 {
            if let Ok((doc, _)) = parse_document(&self.sources[0], 0, false) {
                self.doc = doc;
            }
        }
    }

    /// Every key's origin, by JSON pointer. A chain of overlays has them from the merge. A
    /// workflow of one file finds them when first asked, which is when there is something to
    /// point at: its text, kept in memory, is parsed again and gives the same document. A valid
    /// workflow of 10,000 stages is checked and run without building 50,000 pointers.
    pub(crate) fn origins(&self) -> &Origins {
        self.origins.get_or_init(|| {
            parse_document(&self.sources[0], 0, true)
                .map(|(_, origins)| origins)
                .unwrap_or_default()
        })
    }

    /// The location of a pointer's value, or of the closest enclosing key that has one.
    pub(crate) fn locate(&self, pointer: &str) -> Option<Location> {
        self.locate_with(pointer, Origin::value)
    }

    /// The location of a pointer's key.
    pub(crate) fn locate_key(&self, pointer: &str) -> Option<Location> {
        self.locate_with(pointer, Origin::key)
    }

    fn locate_with(
        &self,
        pointer: &str,
        pick: impl Fn(&Origin) -> Range<usize>,
    ) -> Option<Location> {
        let mut current = pointer;
        loop {
            if let Some(origin) = self.origins().get(current) {
                return Some(Location {
                    source: self.sources[origin.source()].clone(),
                    span: pick(origin),
                });
            }
            let cut = current.rfind('/')?;
            current = &current[..cut];
        }
    }

    /// The top file.
    pub(crate) fn file(&self) -> &SourceFile {
        &self.sources[0]
    }
}

/// Escape one JSON pointer segment.
pub(crate) fn pointer_segment(segment: &str) -> String {
    if !segment.contains(['~', '/']) {
        return segment.to_string();
    }
    segment.replace('~', "~0").replace('/', "~1")
}

/// Load a workflow by name or path, following `extends`.
pub(crate) fn load(
    search: &SearchPath,
    reference: &str,
    cwd: &Path,
) -> Result<RawWorkflow, Vec<Diagnostic>> {
    load_with(search, reference, cwd, None)
}

/// [`load`], reading a file's document from `documents` while its text is unchanged.
pub(crate) fn load_with(
    search: &SearchPath,
    reference: &str,
    cwd: &Path,
    documents: Option<&Documents>,
) -> Result<RawWorkflow, Vec<Diagnostic>> {
    let Some(found) = search.find_workflow(reference, cwd) else {
        // A workflow file beside the user, off the search path (a subfolder of the project),
        // is named by its path.
        let beside = format!("{reference}.toml");
        let help = if !reference.ends_with(".toml") && cwd.join(&beside).is_file() {
            format!("did you mean `./{beside}`? a file off the search path is named by its path")
        } else {
            did_you_mean(
                reference,
                search.workflow_names().iter().map(String::as_str),
            )
            .unwrap_or_else(|| "`stagegraph list` shows the workflows on the search path".into())
        };
        let message = if reference.ends_with(".toml") {
            DiagnosticKind::CannotReadWorkflowFile(reference.to_string())
        } else {
            DiagnosticKind::NoSuchWorkflow(reference.to_string())
        };
        return Err(vec![Diagnostic::error(message).with_help(help)]);
    };
    tracing::info!(
        workflow = reference,
        path = %found.source.path.display(),
        library = found.library.origin,
        "workflow found"
    );
    load_found(search, found, &mut Vec::new(), documents)
}

/// Load a workflow already found.
pub(crate) fn load_found(
    search: &SearchPath,
    found: Found,
    chain: &mut Vec<String>,
    documents: Option<&Documents>,
) -> Result<RawWorkflow, Vec<Diagnostic>> {
    let name = found
        .source
        .path
        .file_stem()
        .map(|s| s.to_string_lossy().to_string())
        .unwrap_or_default();
    let key = found.source.path.display().to_string();
    if chain.contains(&key) {
        chain.push(key);
        return Err(vec![Diagnostic::error(DiagnosticKind::ExtendsLoops(
            chain.clone(),
        ))]);
    }
    chain.push(key);

    // A file loaded as the base of another is merged at once, with its origins; the top file
    // builds them only when it turns out to extend one.
    let base_of_another = chain.len() > 1;
    // A kept document of a file on its own that extends none is read straight as the typed
    // workflow: the JSON document is made (about 7 MB and 6 ms for 10,000 stages) only if a
    // diagnostic needs it.
    let (doc, origins) = match documents {
        // No documents kept (`check`, a dry-run in a fresh folder): the file is read straight
        // as the typed workflow, and the JSON document made only if a diagnostic needs it.
        None if !base_of_another => {
            match read_typed(&found.source).filter(|file| file.workflow.extends.is_none()) {
                Some(file) => return Ok(RawWorkflow::typed(name, &found, file)),
                None => parse_document(&found.source, 0, false)?,
            }
        }
        Some(documents) if !base_of_another => {
            let kept = documents
                .read::<WorkflowFile>(&found.source, |file| file.workflow.extends.is_none())?;
            match kept {
                Kept::Typed(file) => return Ok(RawWorkflow::typed(name, &found, file)),
                Kept::Document(doc) => (doc, Origins::default()),
            }
        }
        _ => parse_document(&found.source, 0, base_of_another)?,
    };
    let extends = doc
        .pointer("/workflow/extends")
        .and_then(Value::as_str)
        .map(str::to_string);
    let mut raw = RawWorkflow {
        name: name.clone(),
        doc,
        origins: if base_of_another {
            OnceLock::from(origins)
        } else {
            OnceLock::new()
        },
        sources: vec![found.source.clone()],
        library: found.library.clone(),
        disabled: HashMap::new(),
        typed: None,
    };
    let Some(base_name) = extends else {
        return Ok(raw);
    };
    let extends_location = raw.locate("/workflow/extends");
    let base_found = if base_name.ends_with(".toml") {
        let dir = found.source.path.parent().unwrap_or(Path::new("."));
        search.find_workflow(&base_name, dir)
    } else {
        let start = match (found.position, base_name == name) {
            (Some(position), true) => position + 1,
            _ => 0,
        };
        search.find_workflow_from(&base_name, start)
    };
    let Some(base_found) = base_found else {
        return Err(vec![Diagnostic::error(DiagnosticKind::NoSuchBase {
            further: base_name == name,
            base: base_name.clone(),
        })
        .at_opt(extends_location)
        .with_help_opt(did_you_mean(
            &base_name,
            search.workflow_names().iter().map(String::as_str),
        ))]);
    };
    let base = match load_found(search, base_found, chain, documents) {
        Ok(base) => base,
        Err(mut diagnostics) => {
            for diagnostic in &mut diagnostics {
                if diagnostic.location.is_none() {
                    *diagnostic = diagnostic.clone().at_opt(extends_location.clone());
                }
            }
            return Err(diagnostics);
        }
    };
    overlay(&mut raw, base)?;
    Ok(raw)
}

/// The typed reading of a file on its own; a large one in parts, on the cores at hand
/// ([`split`]), or with its memory faulted in ahead on one core. (With both, the faulting thread
/// takes a core from the parts: `check` of 10,000 stages took 36.1 ms without it, 38.4 with.)
fn read_typed(source: &SourceFile) -> Option<WorkflowFile> {
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    match split::parts(&source.text) {
        Some(ranges) => split::read_parts(&source.text, &ranges, cores.min(4), typed::read_str)
            .or_else(|| typed::read(source)),
        None => {
            prefault_for(&source.text);
            typed::read(source)
        }
    }
}

/// A key or a table set twice: named, with the line that set it first (the parser says only
/// "duplicate key", at the second).
fn duplicate_key(source: &SourceFile, span: std::ops::Range<usize>) -> Diagnostic {
    let text = &source.text;
    let key = text.get(span.clone()).unwrap_or_default().trim();
    let line_start = text[..span.start].rfind('\n').map_or(0, |at| at + 1);
    let line = text[line_start..].lines().next().unwrap_or_default().trim();
    let before = &text[..line_start];
    let first = if line.starts_with('[') {
        // A table header: the same header earlier in the file.
        before
            .lines()
            .position(|earlier| earlier.trim() == line)
            .map(|index| {
                (
                    index + 1,
                    format!("table `{}`", line.trim_matches(['[', ']'])),
                )
            })
    } else {
        // A key: set earlier in the same table (after the nearest header above it).
        let lines: Vec<&str> = before.lines().collect();
        let table_start = lines
            .iter()
            .rposition(|earlier| earlier.trim_start().starts_with('['))
            .map_or(0, |index| index + 1);
        lines[table_start..]
            .iter()
            .position(|earlier| {
                earlier
                    .trim_start()
                    .strip_prefix(key)
                    .is_some_and(|rest| rest.trim_start().starts_with('='))
            })
            .map(|index| (table_start + index + 1, format!("`{key}`")))
    };
    let message = match &first {
        Some((_, what)) => format!("{what} is set twice"),
        None if key.is_empty() => "duplicate key".to_string(),
        None => format!("`{key}` is set twice"),
    };
    let diagnostic = Diagnostic::error(DiagnosticKind::InvalidToml(message)).at(source, span);
    match first {
        Some((line, _)) => diagnostic.with_help(format!(
            "it is first set at line {line}; a TOML document sets each key and table once: \
             keep one"
        )),
        None => diagnostic,
    }
}

/// Parse one TOML file into a JSON document and, `with_origins`, the origins of its keys (else
/// none).
pub(crate) fn parse_document(
    source: &SourceFile,
    source_index: usize,
    with_origins: bool,
) -> Result<(Value, Origins), Vec<Diagnostic>> {
    let (table, errors) = DeTable::parse_recoverable(&source.text);
    // One syntax error is one diagnostic: what the parser reports after its first error is
    // mostly the same mistake seen again (an unclosed array swallows the tables after it).
    if let Some(error) = errors
        .into_iter()
        .min_by_key(|error| error.span().map_or(0, |span| span.start))
    {
        let span = error.span().unwrap_or(0..0);
        let message = lowercase_first(error.message().trim());
        let (line, column) = source.line_col(span.start);
        let diagnostic = match unclosed_bracket(&source.text, span.start) {
            // The mistake is where the bracket opened, not where the parser noticed.
            Some((at, bracket)) => {
                let closing = if bracket == '[' { ']' } else { '}' };
                let mut diagnostic = Diagnostic::error(DiagnosticKind::UnclosedBracket(bracket))
                    .at(source, at..at + 1);
                diagnostic.label = Some(format!("opened here; add `{closing}`"));
                diagnostic.help = Some(format!(
                    "the parser noticed at line {line}, column {column}: {message}"
                ));
                diagnostic
            }
            None if message == "duplicate key" => duplicate_key(source, span),
            None => Diagnostic::error(DiagnosticKind::InvalidToml(message)).at(source, span),
        };
        return Err(vec![diagnostic]);
    }
    if !with_origins {
        let doc = convert_table(table.get_ref(), "", source_index, &mut None);
        return Ok((doc, Origins::default()));
    }
    // Sized up front: growing a map of tens of thousands of pointers rehashes them all
    // several times.
    let mut origins =
        Origins::with_capacity_and_hasher(1 + count_entries(table.get_ref()), Default::default());
    let span = table.span();
    origins.insert(String::new(), Origin::new(source_index, span.clone(), span));
    let mut recording = Some(origins);
    let doc = convert_table(table.get_ref(), "", source_index, &mut recording);
    Ok((doc, recording.unwrap_or_default()))
}

/// The memory parsing and checking a large workflow touches, faulted in by another thread
/// while this one parses: a fault costs this thread more than the work it interrupts (page
/// faults were half of `check`'s time at 10,000 stages). Sized by the tables the file opens,
/// about [`BYTES_A_TABLE`] each; a workflow of fewer than a thousand is left alone.
fn prefault_for(text: &str) {
    const BYTES_A_TABLE: usize = 2560;
    let tables = text.matches("\n[").count();
    if tables >= 1_000 {
        crate::floor::prefault::ahead(tables * BYTES_A_TABLE);
    }
}

/// The first `[` or `{` opened on a line before the one holding `upto` and never closed in the
/// whole file (outside strings and comments): the likely cause of a syntax error found at
/// `upto`.
fn unclosed_bracket(text: &str, upto: usize) -> Option<(usize, char)> {
    let line_start = text[..upto.min(text.len())]
        .rfind('\n')
        .map_or(0, |i| i + 1);
    let upto = text.len();
    let bytes = text.as_bytes();
    let mut open: Vec<(usize, char)> = Vec::new();
    let mut i = 0;
    while i < upto {
        let rest = &bytes[i..];
        match bytes[i] {
            b'#' => {
                while i < upto && bytes[i] != b'\n' {
                    i += 1;
                }
                continue;
            }
            b'"' | b'\'' => {
                let quote = bytes[i];
                let triple = rest.len() >= 3 && rest[1] == quote && rest[2] == quote;
                i += if triple { 3 } else { 1 };
                while i < upto {
                    if bytes[i] == b'\\' && quote == b'"' {
                        i += 2;
                        continue;
                    }
                    if !triple && bytes[i] == b'\n' {
                        break;
                    }
                    if bytes[i] == quote
                        && (!triple || bytes[i..].starts_with(&[quote, quote, quote]))
                    {
                        i += if triple { 3 } else { 1 };
                        break;
                    }
                    i += 1;
                }
                continue;
            }
            b'[' => open.push((i, '[')),
            b'{' => open.push((i, '{')),
            b']' | b'}' => {
                open.pop();
            }
            _ => {}
        }
        i += 1;
    }
    open.into_iter().find(|&(at, _)| at < line_start)
}

/// How many keys and array elements a table holds, at every depth: one origin each.
fn count_entries(table: &DeTable<'_>) -> usize {
    fn in_value(value: &DeValue<'_>) -> usize {
        match value {
            DeValue::Table(table) => count_entries(table),
            DeValue::Array(items) => items.iter().map(|i| 1 + in_value(i.get_ref())).sum(),
            _ => 0,
        }
    }
    table.iter().map(|(_, v)| 1 + in_value(v.get_ref())).sum()
}

fn lowercase_first(text: &str) -> String {
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => first.to_lowercase().collect::<String>() + chars.as_str(),
        None => String::new(),
    }
}

/// The document of a table; with `origins`, each key's origin is recorded under its pointer.
fn convert_table(
    table: &DeTable<'_>,
    pointer: &str,
    source: usize,
    origins: &mut Option<Origins>,
) -> Value {
    let mut map = Map::with_capacity(table.len());
    for (key, value) in table {
        let converted = match origins {
            None => convert_value(value.get_ref(), "", source, origins),
            Some(_) => {
                let key_text: &str = key.get_ref();
                let mut child = String::with_capacity(pointer.len() + 1 + key_text.len());
                child.push_str(pointer);
                child.push('/');
                // Escaped only when it must be: most keys have neither `~` nor `/`.
                if key_text.contains(['~', '/']) {
                    child.push_str(&pointer_segment(key_text));
                } else {
                    child.push_str(key_text);
                }
                let converted = convert_value(value.get_ref(), &child, source, origins);
                if let Some(origins) = origins {
                    origins.insert(child, Origin::new(source, key.span(), value.span()));
                }
                converted
            }
        };
        map.insert(key.get_ref().to_string(), converted);
    }
    Value::Object(map)
}

fn convert_value(
    value: &DeValue<'_>,
    pointer: &str,
    source: usize,
    origins: &mut Option<Origins>,
) -> Value {
    match value {
        DeValue::String(s) => Value::String(s.to_string()),
        DeValue::Integer(i) => typed::integer(i).map_or(Value::Null, Value::from),
        DeValue::Float(f) => typed::float(f)
            .and_then(serde_json::Number::from_f64)
            .map_or(Value::Null, Value::Number),
        DeValue::Boolean(b) => Value::Bool(*b),
        DeValue::Datetime(d) => Value::String(d.to_string()),
        DeValue::Array(items) => Value::Array(
            items
                .iter()
                .enumerate()
                .map(|(index, item)| {
                    if origins.is_none() {
                        return convert_value(item.get_ref(), "", source, origins);
                    }
                    let mut child = String::with_capacity(pointer.len() + 4);
                    child.push_str(pointer);
                    child.push('/');
                    let _ = std::fmt::Write::write_fmt(&mut child, format_args!("{index}"));
                    let converted = convert_value(item.get_ref(), &child, source, origins);
                    if let Some(origins) = origins {
                        origins.insert(child, Origin::new(source, item.span(), item.span()));
                    }
                    converted
                })
                .collect(),
        ),
        DeValue::Table(table) => convert_table(table, pointer, source, origins),
    }
}

/// The keys that belong to one kind of action: dropped with it when an overlay swaps actions,
/// and refused by check on a stage of another action.
pub(crate) fn action_companions(action: &str) -> &'static [&'static str] {
    match action {
        "prompt" => &[
            "model",
            "system",
            "prompt_prefix",
            "temperature",
            "max_tokens",
            "repair",
        ],
        "command" | "shell" => &["stdin", "cwd", "env", "ok_codes"],
        "uses" | "workflow" => &["with"],
        _ => &[],
    }
}

/// Merge `top` (an overlay) onto `base`, in place in `top`.
fn overlay(top: &mut RawWorkflow, base: RawWorkflow) -> Result<(), Vec<Diagnostic>> {
    let offset = top.sources.len();
    // A base is loaded with its origins (see `load_found`).
    let base_origins = base.origins.into_inner().unwrap_or_default();
    let mut merged_doc = base.doc;
    let mut origins: Origins = base_origins
        .into_iter()
        .map(|(pointer, origin)| (pointer, origin.shifted(offset)))
        .collect();
    let mut disabled: HashMap<String, Origin> = base
        .disabled
        .into_iter()
        .map(|(id, origin)| (id, origin.shifted(offset)))
        .collect();
    let mut diagnostics = Vec::new();
    let base_name = base.name.clone();

    let top_doc = std::mem::take(&mut top.doc);
    let Value::Object(top_sections) = top_doc else {
        return Ok(());
    };
    for (section, value) in top_sections {
        let section_pointer = format!("/{}", pointer_segment(&section));
        match (section.as_str(), value) {
            ("workflow" | "inputs" | "outputs", Value::Object(entries)) => {
                let target = object_at(&mut merged_doc, &section);
                for (key, value) in entries {
                    if section == "workflow" && key == "extends" {
                        continue;
                    }
                    let pointer = format!("{section_pointer}/{}", pointer_segment(&key));
                    let merged_value = match (section.as_str(), target.get(&key), &value) {
                        ("inputs", Some(Value::Object(old)), Value::Object(new)) => {
                            let mut old = old.clone();
                            for (k, v) in new {
                                old.insert(k.clone(), v.clone());
                            }
                            Value::Object(old)
                        }
                        _ => {
                            drop_origins(&mut origins, &pointer);
                            value
                        }
                    };
                    target.insert(key, merged_value);
                    copy_origins(top.origins(), &mut origins, &pointer);
                }
            }
            ("stages", Value::Object(stages)) => {
                for (id, stage) in stages {
                    let pointer = format!("/stages/{}", pointer_segment(&id));
                    let Value::Object(stage) = stage else {
                        continue;
                    };
                    let exists = merged_doc.pointer(&pointer).is_some_and(Value::is_object);
                    if stage.get("disabled").and_then(Value::as_bool) == Some(true) {
                        let origin = top
                            .origins()
                            .get(&format!("{pointer}/disabled"))
                            .copied()
                            .unwrap_or(Origin::new(0, 0..0, 0..0));
                        if !exists {
                            diagnostics.push(
                                Diagnostic::error(DiagnosticKind::CannotDisable {
                                    stage: id.clone(),
                                    base: base_name.clone(),
                                })
                                .at_opt(top.locate_key(&pointer))
                                .with_help_opt(did_you_mean(
                                    &id,
                                    stage_ids(&merged_doc).iter().map(String::as_str),
                                )),
                            );
                            continue;
                        }
                        if let Some(Value::Object(all)) = merged_doc.get_mut("stages") {
                            all.shift_remove(&id);
                        }
                        drop_origins(&mut origins, &pointer);
                        disabled.insert(id, origin);
                        continue;
                    }
                    let has_action = ACTION_KEYS.iter().any(|k| stage.contains_key(*k));
                    if !exists {
                        if !has_action {
                            diagnostics.push(
                                Diagnostic::error(DiagnosticKind::OverlaysNothing {
                                    stage: id.clone(),
                                    base: base_name.clone(),
                                })
                                .at_opt(top.locate_key(&pointer))
                                .with_help_opt(did_you_mean(
                                    &id,
                                    stage_ids(&merged_doc).iter().map(String::as_str),
                                )),
                            );
                            continue;
                        }
                        object_at(&mut merged_doc, "stages")
                            .insert(id.clone(), Value::Object(stage));
                        copy_origins(top.origins(), &mut origins, &pointer);
                        continue;
                    }
                    let Some(Value::Object(target)) = merged_doc.pointer_mut(&pointer) else {
                        continue;
                    };
                    if has_action {
                        for action in ACTION_KEYS {
                            if target.contains_key(action) && !stage.contains_key(action) {
                                target.shift_remove(action);
                                drop_origins(&mut origins, &format!("{pointer}/{action}"));
                                for companion in action_companions(action) {
                                    if !stage.contains_key(*companion) {
                                        target.shift_remove(*companion);
                                        drop_origins(
                                            &mut origins,
                                            &format!("{pointer}/{companion}"),
                                        );
                                    }
                                }
                            }
                        }
                    }
                    for (key, value) in stage {
                        let key_pointer = format!("{pointer}/{}", pointer_segment(&key));
                        drop_origins(&mut origins, &key_pointer);
                        target.insert(key, value);
                    }
                    copy_origins(top.origins(), &mut origins, &pointer);
                }
            }
            (_, value) => {
                // Unknown sections are kept so that `check` reports them against the overlay.
                if let Value::Object(root) = &mut merged_doc {
                    root.insert(section.clone(), value);
                }
                copy_origins(top.origins(), &mut origins, &section_pointer);
            }
        }
    }
    if !diagnostics.is_empty() {
        return Err(diagnostics);
    }
    // The root span belongs to the top file.
    if let Some(origin) = top.origins().get("") {
        origins.insert(String::new(), *origin);
    }
    top.doc = merged_doc;
    top.origins = OnceLock::from(origins);
    top.sources.extend(base.sources);
    top.disabled.extend(disabled);
    Ok(())
}

fn stage_ids(doc: &Value) -> Vec<String> {
    doc.get("stages")
        .and_then(Value::as_object)
        .map(|s| s.keys().cloned().collect())
        .unwrap_or_default()
}

fn object_at<'a>(doc: &'a mut Value, section: &str) -> &'a mut Map<String, Value> {
    if !doc.is_object() {
        *doc = Value::Object(Map::new());
    }
    let Value::Object(root) = doc else {
        unreachable!("made an object above")
    };
    let entry = root
        .entry(section.to_string())
        .or_insert_with(|| Value::Object(Map::new()));
    if !entry.is_object() {
        *entry = Value::Object(Map::new());
    }
    match entry {
        Value::Object(map) => map,
        _ => unreachable!("made an object above"),
    }
}

fn drop_origins(origins: &mut Origins, pointer: &str) {
    let prefix = format!("{pointer}/");
    origins.retain(|key, _| key != pointer && !key.starts_with(&prefix));
}

fn copy_origins(from: &Origins, to: &mut Origins, pointer: &str) {
    let prefix = format!("{pointer}/");
    for (key, origin) in from {
        if key == pointer || key.starts_with(&prefix) {
            to.insert(key.clone(), *origin);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load_files(files: &[(&str, &str)], top: &str) -> RawWorkflow {
        let dir = tempfile::tempdir().unwrap();
        for (name, text) in files {
            std::fs::write(dir.path().join(name), text).unwrap();
        }
        load(&SearchPath::new(Vec::new()), top, dir.path()).unwrap()
    }

    #[test]
    fn one_file_finds_its_origins_when_asked() {
        let text =
            "[workflow]\ndescription = \"d\"\n\n[stages.a]\nshell = \"true\"\nafter = [\"b\"]\n";
        let raw = load_files(&[("w.toml", text)], "w.toml");
        assert!(raw.origins.get().is_none(), "not built by loading");
        let at = raw.locate("/stages/a/after/0").unwrap();
        assert_eq!(&text[at.span], "\"b\"");
        let at = raw.locate_key("/stages/a/shell").unwrap();
        assert_eq!(&text[at.span], "shell");
        assert_eq!(raw.origins().len(), 8);
    }

    #[test]
    fn a_chain_has_its_origins_from_the_merge() {
        let base = "[workflow]\ndescription = \"base\"\n\n[stages.a]\nshell = \"true\"\n";
        let top = "[workflow]\nextends = \"base.toml\"\n\n[stages.b]\nshell = \"false\"\n";
        let raw = load_files(&[("base.toml", base), ("top.toml", top)], "top.toml");
        assert!(raw.origins.get().is_some());
        let a = raw.locate_key("/stages/a/shell").unwrap();
        assert!(a.source.path.ends_with("base.toml") && &base[a.span] == "shell");
        let b = raw.locate("/stages/b/shell").unwrap();
        assert!(b.source.path.ends_with("top.toml") && &top[b.span] == "\"false\"");
    }
}
