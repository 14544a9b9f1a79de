//! References: every name a template reads (inputs, env, stages and their outputs' fields, item,
//! output) resolved, and the edges they add to the graph with the explicit `after`.

use crate::check::Deps;
use std::collections::HashSet;

use foldhash::HashMap;

use super::foreach::ItemOf;
use super::gather::{At, Context, Pending};
use super::key::TemplateKey;
use super::schemas::SchemaOf;
use super::spans::template_error;
use super::{stage_pointer, Checker};
use crate::diag::{did_you_mean, DiagnosticKind};
use crate::library::Shelf;
use crate::template::reads::{self, Read};
use crate::template::{compiled, Tmpl};

impl Checker<'_> {
    /// Each stage's dependencies: its `after` entries and the stages its templates read.
    /// `templates[k]` is the compiled `pendings[k]`, when it compiled.
    pub(super) fn references(
        &mut self,
        ids: &[String],
        index: &HashMap<&str, usize>,
        pendings: &[Pending],
        templates: &[Option<Tmpl>],
        schemas: &[SchemaOf],
    ) -> Vec<Deps> {
        let mut deps: Vec<Vec<usize>> = vec![Vec::new(); ids.len()];
        for (i, (id, def)) in self.file.stages.iter().enumerate() {
            for (position, after) in def.after.iter().enumerate() {
                let pointer = || format!("{}/after/{position}", stage_pointer(id));
                match index.get(after.as_str()) {
                    Some(&j) if j == i => {
                        self.error(DiagnosticKind::AfterItself(id.clone()), &pointer());
                    }
                    Some(&j) => {
                        deps[i].push(j);
                    }
                    None => self.unknown_stage(after, &pointer(), ids),
                }
            }
        }
        // Each stage's templates, then the workflow's, each group in the order of their names.
        let mut of_stage: Vec<Vec<usize>> = vec![Vec::new(); ids.len()];
        let mut of_workflow = Vec::new();
        for (k, pending) in pendings.iter().enumerate() {
            if templates[k].is_none() {
                continue;
            }
            match pending.key.stage() {
                Some(i) => of_stage[i].push(k),
                None => of_workflow.push(k),
            }
        }
        of_stage.push(of_workflow);
        let mut reported = HashSet::new();
        let roots = &compiled::known_roots();
        for group in &mut of_stage {
            if group.len() > 1 {
                group.sort_by_cached_key(|&k| pendings[k].clean_name());
            }
        }
        for (k, own) in of_stage.iter().enumerate().flat_map(|(i, group)| {
            group
                .iter()
                .map(move |&k| (k, (i < ids.len()).then_some(i)))
        }) {
            let pending = &pendings[k];
            if templates[k].is_none() {
                continue;
            }
            let analysis = reads_of(pending);
            self.check_flow(own, pending, &analysis, schemas);
            let included = self.included(pending, analysis.loads);
            let own_reads = analysis.reads.into_iter().map(|read| (pending, read));
            // An included file also sees the names its includer binds (`set`, `with`, loop
            // variables): only what it reads of the scope every template sees is checked.
            let included_reads = included.iter().flat_map(|(child, reads)| {
                reads
                    .iter()
                    .filter(|read| roots.contains(read.path[0].as_str()))
                    .map(move |read| (child, read.clone()))
            });
            for (pending, read) in own_reads.chain(included_reads) {
                let before = self.diags.len();
                let target = self.check_reference(own, pending, &read, index, ids, schemas);
                if matches!(pending.at, At::File(_)) {
                    // A file included by several templates is reported once.
                    self.keep_first_reports(before, &mut reported);
                }
                let Some(target) = target else {
                    continue;
                };
                let Some(own) = own else {
                    // Outputs read stages after the run; no edge needed.
                    continue;
                };
                if target == own {
                    // `stages.<self>` inside its own templates: only `output` makes sense.
                    let kind = DiagnosticKind::RefersToItself(ids[own].clone());
                    self.diag_span(&pending.at, &pending.source, read.span.clone(), kind);
                    if matches!(pending.at, At::File(_)) {
                        self.keep_first_reports(self.diags.len() - 1, &mut reported);
                    }
                } else {
                    deps[own].push(target);
                }
            }
        }
        deps.into_iter()
            .map(|mut stage| {
                stage.sort_unstable();
                stage.dedup();
                stage.into_boxed_slice()
            })
            .collect()
    }

    /// The template files `pending` loads by a literal name (`include`, `import`, `from`,
    /// `extends`), followed through the files they load in turn, each file once: each as a
    /// template of the same stage and context at its own file, with the paths it reads. A file
    /// loaded from an included one that is not there, or that does not parse, is an error at
    /// the including file (the loads of `pending` itself are checked with its literals).
    fn included(
        &mut self,
        pending: &Pending,
        loads: Vec<reads::Load>,
    ) -> Vec<(Pending, Vec<Read>)> {
        if loads.is_empty() {
            return Vec::new();
        }
        let mut out: Vec<(Pending, Vec<Read>)> = Vec::new();
        let mut seen: HashSet<String> = HashSet::new();
        let mut todo: Vec<(Vec<reads::Load>, Option<usize>)> = vec![(loads, None)];
        while let Some((loads, from)) = todo.pop() {
            for load in loads {
                if !seen.insert(load.name.clone()) {
                    continue;
                }
                let found = self
                    .search
                    .find_file(&self.raw.library, Shelf::Templates, &load.name);
                let Some(file) = found else {
                    if let Some(from) = from.filter(|_| !load.ignore_missing) {
                        let (at, source) = (out[from].0.at.clone(), out[from].0.source.clone());
                        self.diag_span(
                            &at,
                            &source,
                            load.span.clone(),
                            DiagnosticKind::TemplateNotFound(load.name.clone()),
                        );
                        self.diags.last_mut().expect("pushed").help = Some(format!(
                            "templates are looked up under `templates/` in {} and along the search path",
                            self.raw.library.display()
                        ));
                    }
                    continue;
                };
                let at = At::File(file.clone());
                let analysis = match reads::of_template(&file.text) {
                    Ok(analysis) => analysis,
                    Err(error) => {
                        let diagnostic = template_error(self.raw, &at, &file.text, &error);
                        self.diags.push(diagnostic);
                        continue;
                    }
                };
                let child = Pending {
                    key: pending.key.clone(),
                    name: pending.name.clone(),
                    source: file.text.to_string(),
                    native: false,
                    context: pending.context,
                    at,
                };
                todo.push((analysis.loads, Some(out.len())));
                out.push((child, analysis.reads));
            }
        }
        out
    }

    /// Drops the diagnostics from `from` on that were already reported at the same place.
    fn keep_first_reports(&mut self, from: usize, reported: &mut HashSet<String>) {
        let mut k = from;
        while k < self.diags.len() {
            let d = &self.diags[k];
            let place = d
                .location
                .as_ref()
                .map(|l| (l.source.path.clone(), l.span.clone()));
            let key = format!("{place:?}|{}|{:?}", d.message(), d.help);
            if reported.insert(key) {
                k += 1;
            } else {
                self.diags.remove(k);
            }
        }
    }

    /// A read of stage `name`, which an overlay disabled: the error is at the overlay's
    /// `disabled` (a line of the repository, where the change was made, even when the base is
    /// built in), and names where the base reads it.
    fn disabled_stage(&mut self, name: &str, read: Option<crate::diag::Location>) {
        let Some(origin) = self.raw.disabled.get(name) else {
            return;
        };
        let overlay = self.raw.sources[origin.source()].clone();
        let read_at = read.map_or_else(
            || "a stage".to_string(),
            |l| {
                let (line, col) = l.source.line_col(l.span.start);
                format!(
                    "{}:{line}:{col}",
                    crate::diag::shown_path(&l.source.path, self.cwd)
                )
            },
        );
        let kind = DiagnosticKind::DisabledStage {
            stage: name.to_string(),
            read_at,
        };
        let mut diagnostic = crate::diag::Diagnostic::error(kind).at(&overlay, origin.key());
        diagnostic.help = Some(format!("remove the reference to `{name}`, or re-enable it"));
        self.diags.push(diagnostic);
    }

    pub(super) fn unknown_stage(&mut self, name: &str, pointer: &str, ids: &[String]) {
        if self.raw.disabled.contains_key(name) {
            let read = self.raw.locate(pointer);
            self.disabled_stage(name, read);
            return;
        }
        let help = did_you_mean(name, ids.iter().map(String::as_str));
        self.error(DiagnosticKind::UnknownStage(name.to_string()), pointer)
            .help = help;
    }

    /// `stages.X.output.<path>` (or `output.<path>` in X's own predicates) against what X can
    /// produce; the error points at the whole path read.
    fn check_output_path(
        &mut self,
        schema: &SchemaOf,
        path: &[&str],
        stage: &str,
        pending: &Pending,
        read: &Read,
    ) {
        if let Err((message, help)) = schema.check_path(path, stage) {
            let span = read.segment(failing_segment(read, path, |p| {
                schema.check_path(p, stage).is_ok()
            }));
            self.diag_span(&pending.at, &pending.source, span, message);
            self.diags.last_mut().expect("pushed").help = help;
        }
    }

    /// `item.<path>` against what is known of the stage's items.
    fn check_item_path(&mut self, own: usize, path: &[&str], pending: &Pending, read: &Read) {
        let Some(first) = path.first().copied() else {
            return;
        };
        let problem = match self.items.get(own) {
            Some(ItemOf::Schema { schema, path: to_items, list }) => {
                let to_items: Vec<&str> = to_items.iter().map(String::as_str).collect();
                let Some(items) = schema.node_at(&to_items) else {
                    return;
                };
                let subject = format!("`item` (an item of `{list}`, per {})", schema.short_name());
                match schema.check_path_in(items, path, &subject, false) {
                    Ok(()) => return,
                    Err(problem) => problem,
                }
            }
            Some(ItemOf::Line { list }) if first.parse::<usize>().is_err() => (
                DiagnosticKind::LineHasNoField {
                    list: list.clone(),
                    field: first.to_string(),
                },
                Some("give the upstream stage `output = { format = \"json\", schema = ... }` to loop over records".into()),
                true,
            ),
            _ => return,
        };
        let (message, help, certain) = problem;
        let span = read.segment(failing_segment(read, path, |p| match self.items.get(own) {
            Some(ItemOf::Schema {
                schema,
                path: to_items,
                ..
            }) => {
                let to_items: Vec<&str> = to_items.iter().map(String::as_str).collect();
                schema
                    .node_at(&to_items)
                    .is_none_or(|items| schema.check_path_in(items, p, "", false).is_ok())
            }
            _ => p.is_empty(),
        }));
        self.diag_span(&pending.at, &pending.source, span, message);
        let diagnostic = self.diags.last_mut().expect("pushed");
        diagnostic.help = help;
        if !certain {
            diagnostic.severity = crate::diag::Severity::Warning;
        }
    }

    /// `run.<field>`: what templates see of the run.
    fn check_run_path(&mut self, path: &[&str], pending: &Pending, read: &Read) {
        const FIELDS: &[&str] = &[
            "id",
            "dir",
            "started_at",
            "workflow",
            "dry_run",
            "status",
            "exit",
            "error",
        ];
        let problem = match path {
            [field, ..] if !FIELDS.contains(field) => Some((
                *field,
                DiagnosticKind::NoRunField((*field).to_string()),
                did_you_mean(field, FIELDS.iter().copied())
                    .unwrap_or_else(|| format!("`run` has {}", FIELDS.join(", "))),
            )),
            ["exit", field, ..] if !["stage", "message"].contains(field) => Some((
                *field,
                DiagnosticKind::NoRunExitField((*field).to_string()),
                did_you_mean(field, ["stage", "message"])
                    .unwrap_or_else(|| "`run.exit` is `{ stage, message }`, or none".into()),
            )),
            _ => None,
        };
        if let Some((needle, message, help)) = problem {
            let at = path.iter().position(|p| *p == needle).unwrap_or(0);
            let span = read.segment(read.path.len() - path.len() + at);
            self.diag_span(&pending.at, &pending.source, span, message);
            self.diags.last_mut().expect("pushed").help = Some(help);
        }
    }

    /// `state.<key>`: a key some stage of the workflow sets with `set_state` (state holds
    /// nothing else). Left alone when an overlay disabled a stage, which may have set it.
    fn check_state_key(&mut self, key: &str, pending: &Pending, read: &Read) {
        if !self.raw.disabled.is_empty()
            || self.file.stages.values().any(|def| {
                def.set_state
                    .as_ref()
                    .is_some_and(|set| set.contains_key(key))
            })
        {
            return;
        }
        let keys: Vec<&str> = self
            .file
            .stages
            .values()
            .flat_map(|def| def.set_state().map(|(k, _)| k.as_str()))
            .collect();
        let help = did_you_mean(key, keys.iter().copied()).unwrap_or_else(|| {
            format!("state holds what stages keep with `set_state = {{ {key} = \"...\" }}`")
        });
        self.diag_span(
            &pending.at,
            &pending.source,
            read.span.clone(),
            DiagnosticKind::StateNeverSet(key.to_string()),
        );
        self.diags.last_mut().expect("pushed").help = Some(help);
    }

    fn check_reference(
        &mut self,
        own: Option<usize>,
        pending: &Pending,
        read: &Read,
        index: &HashMap<&str, usize>,
        ids: &[String],
        schemas: &[SchemaOf],
    ) -> Option<usize> {
        let (context, at, source) = (pending.context, &pending.at, pending.source.as_str());
        let parts: Vec<&str> = read.path.iter().map(String::as_str).collect();
        let span = || read.span.clone();
        let root = parts[0];
        let stage_name = own.map_or("", |i| ids[i].as_str());
        if pending.key == TemplateKey::RecordsProject && matches!(root, "stages" | "state") {
            self.diag_span(
                at,
                source,
                span(),
                DiagnosticKind::ReadBeforeStages {
                    field: "`[workflow] records.project`".into(),
                    root: root.to_string(),
                },
            );
            self.diags.last_mut().expect("pushed").help = Some(
                "the records' folder is chosen when the run starts: read inputs or env".into(),
            );
            return None;
        }
        match root {
            "inputs" => {
                if let Some(input) = parts.get(1) {
                    if !self.file.inputs.contains_key(*input) {
                        let help = did_you_mean(input, self.file.inputs.keys().map(String::as_str));
                        self.diag_span(
                            at,
                            source,
                            span(),
                            DiagnosticKind::UnknownInput((*input).to_string()),
                        );
                        self.diags.last_mut().expect("pushed").help =
                            help.or(Some("declare it under `[inputs]`".into()));
                    }
                }
                None
            }
            "env" => {
                if let Some(var) = parts.get(1) {
                    if !self.file.workflow.env.iter().any(|e| e == var) {
                        self.diag_span(
                            at,
                            source,
                            span(),
                            DiagnosticKind::EnvNotAllowed((*var).to_string()),
                        );
                        self.diags.last_mut().expect("pushed").help = Some(format!(
                            "templates read only the variables listed in `[workflow] env`; add \"{var}\" there{}",
                            did_you_mean(var, self.file.workflow.env.iter().map(String::as_str)).map(|h| format!(", or {h}")).unwrap_or_default()
                        ));
                    }
                }
                None
            }
            "stages" => {
                let target = parts.get(1)?;
                let Some(&target_index) = index.get(*target) else {
                    if self.raw.disabled.contains_key(*target) {
                        // Located as any reference is, then said at the overlay's line.
                        self.diag_span(
                            at,
                            source,
                            span(),
                            DiagnosticKind::UnknownStage((*target).to_string()),
                        );
                        let read = self.diags.pop().and_then(|d| d.location);
                        self.disabled_stage(target, read);
                    } else {
                        let help = did_you_mean(target, ids.iter().map(String::as_str));
                        self.diag_span(
                            at,
                            source,
                            span(),
                            DiagnosticKind::UnknownStage((*target).to_string()),
                        );
                        self.diags.last_mut().expect("pushed").help = help;
                    }
                    return None;
                };
                match parts.get(2) {
                    None | Some(&"status" | &"error") => {}
                    Some(&"output") => {
                        self.check_output_path(
                            &schemas[target_index],
                            &parts[3..],
                            target,
                            pending,
                            read,
                        );
                    }
                    Some(other) => {
                        self.diag_span(
                            at,
                            source,
                            read.segment(2),
                            DiagnosticKind::NoStageField {
                                stage: (*target).to_string(),
                                field: (*other).to_string(),
                            },
                        );
                        self.diags.last_mut().expect("pushed").help =
                            did_you_mean(other, ["output", "status", "error"]);
                    }
                }
                Some(target_index)
            }
            "output" => {
                if context != Context::Output {
                    self.diag_span(at, source, span(), DiagnosticKind::OutputNotBound);
                    self.diags.last_mut().expect("pushed").help = own.map(|_| format!("read another stage's result as `stages.<id>.output`; this is stage `{stage_name}`"));
                } else if let Some(own) = own {
                    self.check_output_path(&schemas[own], &parts[1..], stage_name, pending, read);
                }
                None
            }
            "item" | "index" => {
                if context != Context::Item {
                    let message = match own {
                        Some(i) if self.file.stages[i].foreach.is_some() => {
                            DiagnosticKind::ItemOutsideAction {
                                name: root.to_string(),
                                field: pending
                                    .clean_name()
                                    .rsplit('.')
                                    .next()
                                    .unwrap_or_default()
                                    .to_string(),
                            }
                        }
                        _ => DiagnosticKind::ItemWithoutForeach(root.to_string()),
                    };
                    self.diag_span(at, source, span(), message);
                } else if root == "item" {
                    if let Some(own) = own {
                        self.check_item_path(own, &parts[1..], pending, read);
                    }
                }
                None
            }
            "run" => {
                self.check_run_path(&parts[1..], pending, read);
                None
            }
            "state" => {
                if let Some(key) = parts.get(1) {
                    self.check_state_key(key, pending, read);
                }
                None
            }
            // Functions and globals of the template environment (`now`, `range`, ...).
            other if self.globals.contains(other) => None,
            // Bound inside the template itself (a `set` or `for` the analysis did not follow,
            // such as a `set` inside an `if`).
            other if bound_locally(source, other) => None,
            other if called(source, other) => {
                // A call of a name the environment does not define: a function, misspelt.
                let help = did_you_mean(other, self.globals.iter().map(String::as_str))
                    .unwrap_or_else(|| {
                        // The engine's own (`__concat`, which `~` is written as) are not for users.
                        let mut names: Vec<&str> = self
                            .globals
                            .iter()
                            .map(String::as_str)
                            .filter(|name| !name.starts_with("__"))
                            .collect();
                        names.sort_unstable();
                        format!("the functions are {}", names.join(", "))
                    });
                self.diag_span(
                    at,
                    source,
                    span(),
                    DiagnosticKind::UnknownFunction(other.to_string()),
                );
                self.diags.last_mut().expect("pushed").help = Some(help);
                None
            }
            other => {
                let roots = &compiled::known_roots();
                let help = did_you_mean(other, roots.iter().copied())
                    .or_else(|| root_of_another_tool(other))
                    .unwrap_or_else(|| {
                        "templates see inputs, env, stages, state, run, item, index and output"
                            .into()
                    });
                self.diag_span(
                    at,
                    source,
                    span(),
                    DiagnosticKind::UndefinedVariable(other.to_string()),
                );
                self.diags.last_mut().expect("pushed").help = Some(help);
                None
            }
        }
    }
}

/// The segment of `read` where `path`, its tail, stops being what `fits` accepts: the index
/// in `read` of the first segment whose prefix does not fit.
fn failing_segment(read: &Read, path: &[&str], fits: impl Fn(&[&str]) -> bool) -> usize {
    let first = read.path.len() - path.len();
    (1..=path.len())
        .find(|&n| !fits(&path[..n]))
        .map_or(first, |n| first + n - 1)
}

/// Every path a queued template reads, each occurrence with its place in the source, and the
/// files it loads.
pub(super) fn reads_of(pending: &Pending) -> reads::Reads {
    let analysis = if pending.native {
        reads::of_expression(&pending.source)
    } else if compiled::has_syntax(&pending.source) {
        reads::of_template(&pending.source).ok()
    } else {
        None
    };
    analysis.unwrap_or_default()
}

/// Whether a template calls `name` as a function (`name(` not after a `.` or a word
/// character).
pub(crate) fn called(source: &str, name: &str) -> bool {
    source.match_indices(name).any(|(at, _)| {
        let before = source[..at].chars().next_back();
        !before.is_some_and(|c| is_word(c) || c == '.')
            && source[at + name.len()..].trim_start().starts_with('(')
    })
}

/// Whether a template binds `name` itself with `{% set %}`, `{% for %}` or `{% macro %}`:
/// `name` as a whole word among the words, commas and parentheses after the keyword.
pub(crate) fn bound_locally(source: &str, name: &str) -> bool {
    source.match_indices("{%").any(|(at, _)| {
        let tag = &source[at + 2..];
        let tag = tag.strip_prefix('-').unwrap_or(tag).trim_start();
        let Some(names) = ["set", "for", "macro"]
            .iter()
            .find_map(|keyword| tag.strip_prefix(keyword))
            .filter(|rest| rest.starts_with(char::is_whitespace))
        else {
            return false;
        };
        let end = names
            .find(|c: char| !(is_word(c) || c.is_whitespace() || c == ',' || c == '('))
            .unwrap_or(names.len());
        names[..end].match_indices(name).any(|(at, _)| {
            let before = names[..at].chars().next_back();
            before.is_some_and(|c| c.is_whitespace() || c == ',' || c == '(')
                && !names[at + name.len()..].starts_with(is_word)
        })
    })
}

fn is_word(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// What GitHub Actions' expression contexts are here, for a template that reads one: no edit
/// distance leads from `needs` to `stages` or from `secrets` to `env`.
fn root_of_another_tool(root: &str) -> Option<String> {
    Some(match root {
        "needs" | "jobs" | "tasks" => {
            format!("another stage's result is `stages.<id>.output` here, not `{root}.<id>`")
        }
        "secrets" | "vars" => format!(
            "`{root}` come from the environment here: list the variable in `[workflow] env` and \
             read `env.NAME`"
        ),
        "matrix" => {
            "a `foreach` stage reads its item as `item` (and its position as `index`)".to_string()
        }
        "github" | "runner" => {
            "the run's own fields are `run.*` (`run.id`, `run.status`, ...)".to_string()
        }
        _ => return None,
    })
}
