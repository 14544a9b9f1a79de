//! Flows: what a template reads through the names it binds, checked as the paths they stand
//! for (`{% set o = stages.a.output %}{{ o.nmae }}`, a loop variable's fields, a filter's
//! `attribute`); the patterns given to the regex filters, which must compile; ordering
//! comparisons of a value with a literal of another type; and reads of a field of a stage that
//! may be skipped, under no guard (a warning). What `template::flow` does not follow is not
//! checked here.
//!
//! Only a template that may have any of these pays for them: its flow is found with its reads
//! when its text has a `set`, `for`, `with`, an attribute or regex filter or an ordering, and
//! is looked for otherwise only when it reads a stage that has an `if`.

use crate::check::Deps;

use foldhash::HashMap;

use super::foreach::ItemOf;
use super::gather::{At, Context, Pending};
use super::schemas::SchemaOf;
use super::Checker;
use crate::diag::{DiagnosticKind, Severity};
use crate::template::flow::{self, Derived, Flow, How, Ordering, Pattern, StageRead};
use crate::template::reads::Reads;

/// What is wrong with a path: the problem, a help line, and whether it is certain.
type Problem = (DiagnosticKind, Option<String>, bool);

/// How a path is checked: `Err` with the problem at the first prefix that does not fit.
type Fits<'s> = Box<dyn Fn(&[&str]) -> Result<(), Problem> + 's>;

/// A read of a field of a stage that may be skipped, under no guard in its template: reported
/// once the graph shows no gate before it.
pub(super) struct Unguarded {
    /// The reading stage (none: the workflow's `[outputs]`).
    reader: Option<usize>,
    at: At,
    source: String,
    read: StageRead,
}

impl Checker<'_> {
    /// The flow of one template of stage `own` (none for the workflow's `[outputs]`).
    pub(super) fn check_flow(
        &mut self,
        own: Option<usize>,
        pending: &Pending,
        analysis: &Reads,
        schemas: &[SchemaOf],
    ) {
        let skippable = if pending.native {
            // A bare expression reads a skipped stage's field as undefined, which is false.
            Vec::new()
        } else {
            self.skippable_reads(own, analysis)
        };
        if analysis.flow.is_none() && skippable.is_empty() {
            return;
        }
        let found;
        let flow: &Flow = match &analysis.flow {
            Some(flow) => flow,
            None => match flow::of_source(&pending.source, pending.native) {
                Some(flow) => {
                    found = flow;
                    &found
                }
                None => return,
            },
        };
        for derived in &flow.derived {
            self.check_derived(own, pending, derived, schemas);
        }
        for pattern in &flow.patterns {
            self.check_pattern(pending, pattern);
        }
        for ordering in &flow.orderings {
            self.check_ordering(own, pending, ordering, schemas);
        }
        for read in &flow.stage_reads {
            if !read.guarded
                && skippable.contains(&read.stage)
                && !self.decides(&read.conditions, &read.stage)
            {
                self.unguarded.push(Unguarded {
                    reader: own,
                    at: pending.at.clone(),
                    source: pending.source.clone(),
                    read: read.clone(),
                });
            }
        }
    }

    /// The unguarded reads found, once the graph is known: a read is guarded too when a stage
    /// it runs after (or, for `[outputs]`, any stage) asserts or exits on what the skippable
    /// stage's `if` reads, or on the stage itself (a gate stops the run before the read).
    pub(super) fn report_unguarded(&mut self, deps: &[Deps]) {
        if self.unguarded.is_empty() {
            return;
        }
        // What each stage's assertions and `exit_if` read: the gates a run stops at.
        let gates: Vec<(usize, Vec<Vec<String>>)> = self
            .file
            .stages
            .values()
            .enumerate()
            .filter(|(_, def)| !def.assert.is_empty() || def.exit_if.is_some())
            .map(|(i, def)| {
                let paths = def
                    .assert
                    .iter()
                    .map(|a| a.that.as_str())
                    .chain(def.exit_if.as_deref())
                    .flat_map(paths_of)
                    .collect();
                (i, paths)
            })
            .collect();
        let mut before: HashMap<Option<usize>, Vec<bool>> = HashMap::default();
        for candidate in std::mem::take(&mut self.unguarded) {
            let runs_after = before.entry(candidate.reader).or_insert_with(|| {
                let mut marks = vec![candidate.reader.is_none(); deps.len()];
                if let Some(reader) = candidate.reader {
                    for i in ancestors(deps, reader) {
                        marks[i] = true;
                    }
                }
                marks
            });
            let gated = gates.iter().any(|(i, paths)| {
                runs_after.get(*i).copied().unwrap_or(false)
                    && self.decides(paths, &candidate.read.stage)
            });
            if !gated {
                self.unguarded(&candidate);
            }
        }
    }

    /// The stages `analysis` reads whose `if` can be false, unless the reading stage's own
    /// `if` reads them or what their `if` reads (it then runs only when they may have).
    fn skippable_reads(&self, own: Option<usize>, analysis: &Reads) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for read in &analysis.reads {
            let [root, stage, ..] = read.path.as_slice() else {
                continue;
            };
            if root != "stages" || out.contains(stage) {
                continue;
            }
            let Some(target) = self.file.stages.get_index_of(stage.as_str()) else {
                continue;
            };
            if Some(target) == own {
                continue;
            }
            let Some(condition) = self.file.stages[target].if_.as_deref() else {
                continue;
            };
            if matches!(condition.trim(), "true" | "True") {
                continue;
            }
            let own_condition = own.and_then(|i| self.file.stages[i].if_.as_deref());
            if own_condition.is_some_and(|mine| self.decides(&paths_of(mine), stage)) {
                continue;
            }
            out.push(stage.clone());
        }
        out
    }

    /// A path read through a binding, as the path it stands for; a problem in the binding's
    /// own segments is reported where the binding reads them.
    fn check_derived(
        &mut self,
        own: Option<usize>,
        pending: &Pending,
        derived: &Derived,
        schemas: &[SchemaOf],
    ) {
        let path: Vec<&str> = derived.read.path.iter().map(String::as_str).collect();
        let (from, fits): (usize, Fits<'_>) = match path.as_slice() {
            ["stages", stage, "output", ..] => {
                let Some(target) = self.file.stages.get_index_of(*stage) else {
                    return;
                };
                (3, closed_only(&schemas[target], stage))
            }
            ["output", ..] if pending.context == Context::Output => {
                let Some(own) = own else {
                    return;
                };
                let stage = self.file.stages.get_index(own).map_or("", |(id, _)| id);
                (1, closed_only(&schemas[own], stage))
            }
            ["item", ..] if pending.context == Context::Item => {
                let Some(ItemOf::Schema {
                    schema,
                    path: to_items,
                    list,
                }) = own.and_then(|i| self.items.get(i))
                else {
                    return;
                };
                let to_items: Vec<&str> = to_items.iter().map(String::as_str).collect();
                let Some(items) = schema.node_at(&to_items) else {
                    return;
                };
                let subject = format!("`item` (an item of `{list}`, per {})", schema.short_name());
                (
                    1,
                    Box::new(move |p| schema.check_path_in(items, p, &subject, false)),
                )
            }
            _ => return,
        };
        let Some((at, (kind, help, certain))) =
            ((from + 1)..=path.len()).find_map(|n| fits(&path[from..n]).err().map(|e| (n - 1, e)))
        else {
            return;
        };
        drop(fits);
        if at < derived.through {
            return;
        }
        let what = match derived.how {
            How::Alias => format!("`{}` is `{}`", derived.name, derived.base),
            How::Item => format!("`{}` is an item of `{}`", derived.name, derived.base),
            How::Attribute => format!(
                "`{}` reads it of each item of `{}`",
                derived.name, derived.base
            ),
        };
        let help = Some(match help {
            Some(help) => format!("{help} ({what})"),
            None => what,
        });
        let span = derived.read.segment(at);
        self.diag_span(&pending.at, &pending.source, span, kind);
        let diagnostic = self.diags.last_mut().expect("pushed");
        diagnostic.help = help;
        if !certain {
            diagnostic.severity = Severity::Warning;
        }
    }

    /// A literal pattern of a regex filter: it fails every render when it does not compile.
    fn check_pattern(&mut self, pending: &Pending, pattern: &Pattern) {
        // Parsed, not compiled: a syntax error is what fails every render, and building the
        // automaton of every literal pattern was most of `check`'s time.
        let Err(error) = regex_syntax::ParserBuilder::new()
            .build()
            .parse(&pattern.pattern)
        else {
            return;
        };
        let text = error.to_string();
        let why = text
            .lines()
            .find_map(|line| line.strip_prefix("error: "))
            .unwrap_or(text.lines().last().unwrap_or_default())
            .trim()
            .to_string();
        let kind = DiagnosticKind::InvalidRegex {
            filter: pattern.filter.clone(),
            pattern: pattern.pattern.clone(),
            error: why,
        };
        self.diag_span(&pending.at, &pending.source, pattern.span.clone(), kind);
        self.diags.last_mut().expect("pushed").help = Some(
            "patterns are the syntax of Rust's `regex` crate: a literal `(`, `[`, `*`, `+` or `?` is escaped with `\\`, and look-around and backreferences are not supported".into(),
        );
    }

    /// `path < literal` where the path's schema gives it no type of the literal's.
    fn check_ordering(
        &mut self,
        own: Option<usize>,
        pending: &Pending,
        ordering: &Ordering,
        schemas: &[SchemaOf],
    ) {
        let path: Vec<&str> = ordering.path.iter().map(String::as_str).collect();
        let node_types = match path.as_slice() {
            ["stages", stage, "output", rest @ ..] => {
                let Some(target) = self.file.stages.get_index_of(*stage) else {
                    return;
                };
                match &schemas[target] {
                    SchemaOf::Known(schema) => {
                        schema.node_at(rest).map(crate::schema::Schema::types_of)
                    }
                    _ => None,
                }
            }
            ["output", rest @ ..] if pending.context == Context::Output => {
                match own.map(|i| &schemas[i]) {
                    Some(SchemaOf::Known(schema)) => {
                        schema.node_at(rest).map(crate::schema::Schema::types_of)
                    }
                    _ => None,
                }
            }
            ["item", rest @ ..] if pending.context == Context::Item => {
                match own.and_then(|i| self.items.get(i)) {
                    Some(ItemOf::Schema { schema, path, .. }) => {
                        let mut full: Vec<&str> = path.iter().map(String::as_str).collect();
                        full.extend(rest);
                        schema.node_at(&full).map(crate::schema::Schema::types_of)
                    }
                    _ => None,
                }
            }
            _ => None,
        };
        let Some(kinds) = node_types.filter(|k| !k.is_empty()) else {
            return;
        };
        let literal_kinds: &[&str] = if ordering.string {
            &["string"]
        } else {
            &["integer", "number"]
        };
        if kinds.iter().any(|k| literal_kinds.contains(&k.as_str())) {
            return;
        }
        let literal = if ordering.string {
            format!("'{}'", ordering.literal)
        } else {
            ordering.literal.clone()
        };
        let shown = flow::shown(&ordering.path);
        let numeric = kinds.iter().any(|k| k == "integer" || k == "number");
        let help = if ordering.string && numeric && ordering.literal.trim().parse::<f64>().is_ok() {
            format!(
                "compare with the number `{}`, without quotes",
                ordering.literal.trim()
            )
        } else if ordering.string && numeric {
            format!(
                "its schema says {}: compare it with a number",
                kinds.join(" or ")
            )
        } else if kinds.iter().any(|k| k == "string") {
            format!("compare it with a string, or convert it first (`{shown} | int`)")
        } else {
            format!("its schema says {}", kinds.join(" or "))
        };
        let kind = DiagnosticKind::OrderedAcrossTypes {
            path: shown,
            kinds,
            against: format!("{} {literal}", ordering.op),
            string: ordering.string,
        };
        self.diag_span(&pending.at, &pending.source, ordering.span.clone(), kind);
        self.diags.last_mut().expect("pushed").help = Some(help);
    }

    /// A field of a stage that may be skipped, read under no guard.
    fn unguarded(&mut self, candidate: &Unguarded) {
        let read = &candidate.read;
        let Some(condition) = self
            .file
            .stages
            .get(read.stage.as_str())
            .and_then(|def| def.if_.clone())
        else {
            return;
        };
        let path = flow::shown(&read.path);
        let help = format!(
            "guard it (`{{% if stages.{stage}.status == 'succeeded' %}}`, `{path} | default(...)`), or give this stage a condition that reads `stages.{stage}`",
            stage = read.stage
        );
        let kind = DiagnosticKind::UnguardedRead {
            stage: read.stage.clone(),
            path,
            condition: condition.trim().to_string(),
        };
        self.diag_span(&candidate.at, &candidate.source, read.span.clone(), kind);
        let diagnostic = self.diags.last_mut().expect("pushed");
        diagnostic.help = Some(help);
        diagnostic.severity = Severity::Warning;
    }
}

/// Every stage `stage` runs after, directly or not.
fn ancestors(deps: &[Deps], stage: usize) -> Vec<usize> {
    let mut seen = vec![false; deps.len()];
    let mut todo: Vec<usize> = deps.get(stage).into_iter().flatten().copied().collect();
    let mut out = Vec::new();
    while let Some(i) = todo.pop() {
        if i >= seen.len() || std::mem::replace(&mut seen[i], true) {
            continue;
        }
        out.push(i);
        todo.extend(deps[i].iter().copied());
    }
    out
}

/// How a path read through a binding is checked against what a stage produces: a schema's
/// object is closed only by `additionalProperties: false` (or `unevaluatedProperties`), and a
/// name outside the properties it only lists is a warning when it is a near miss of one.
fn closed_only<'s>(schema: &'s SchemaOf, stage: &'s str) -> Fits<'s> {
    match schema {
        SchemaOf::Known(schema) => {
            Box::new(move |p| schema.check_path_in(&schema.value, p, &schema.short_name(), false))
        }
        other => Box::new(move |p| {
            other
                .check_path(p, stage)
                .map_err(|(kind, help)| (kind, help, true))
        }),
    }
}

/// The paths a bare expression reads.
fn paths_of(source: &str) -> Vec<Vec<String>> {
    crate::template::reads::of_expression(source)
        .map(|r| r.reads.into_iter().map(|r| r.path).collect())
        .unwrap_or_default()
}

impl Checker<'_> {
    /// Whether a condition that reads `paths` (an `if`, an assertion, an `exit_if`, the test
    /// of a conditional) decides on what stage `stage` was decided on: it reads the stage, or
    /// something the stage's `if` reads, or a stage whose own `if` does either.
    fn decides(&self, paths: &[Vec<String>], stage: &str) -> bool {
        let Some(theirs) = self
            .file
            .stages
            .get(stage)
            .and_then(|def| def.if_.as_deref())
            .map(paths_of)
        else {
            return true;
        };
        // The same input, variable or stage: the first two segments.
        let head = |p: &[String]| p.iter().take(2).cloned().collect::<Vec<_>>();
        let direct = |paths: &[Vec<String>]| {
            paths.iter().any(|p| {
                (p.len() > 1 && p[0] == "stages" && p[1] == stage)
                    || theirs.iter().any(|t| head(t) == head(p))
            })
        };
        direct(paths)
            || paths.iter().any(|p| {
                p.len() > 1
                    && p[0] == "stages"
                    && self
                        .file
                        .stages
                        .get(p[1].as_str())
                        .and_then(|def| def.if_.as_deref())
                        .is_some_and(|other| direct(&paths_of(other)))
            })
    }
}
