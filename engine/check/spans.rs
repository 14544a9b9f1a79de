//! Spans: where in the file a problem found inside a template is, down to the name it is about.

use super::gather::At;
use super::Checker;
use crate::diag::{Diagnostic, DiagnosticKind, Location};
use crate::load::RawWorkflow;

impl Checker<'_> {
    /// An error about `needle` inside the template `source` written at `at`.
    pub(super) fn diag_at(&mut self, at: &At, source: &str, needle: &str, kind: DiagnosticKind) {
        let diagnostic = match at {
            At::Pointer(pointer) => {
                let location = self.raw.locate(pointer).map(|l| narrow(l, source, needle));
                Diagnostic::error(kind).at_opt(location)
            }
            At::File(file) => {
                let span = find_span(&file.text, needle).unwrap_or(0..0);
                Diagnostic::error(kind).at(file, span)
            }
        };
        self.diags.push(diagnostic);
    }
}

impl Checker<'_> {
    /// An error at `span`, a range of the template's `source`: in a template file, that range
    /// of it; in a TOML string, the same occurrence of the same text inside the string as
    /// written (the n-th of its kind in the template is the n-th in the string).
    pub(super) fn diag_span(
        &mut self,
        at: &At,
        source: &str,
        span: std::ops::Range<usize>,
        kind: DiagnosticKind,
    ) {
        let diagnostic = match at {
            At::File(file) if file.text.len() >= span.end && *file.text == *source => {
                Diagnostic::error(kind).at(file, span)
            }
            At::File(file) => {
                let found = source
                    .get(span)
                    .and_then(|needle| find_span(&file.text, needle))
                    .unwrap_or(0..0);
                Diagnostic::error(kind).at(file, found)
            }
            At::Pointer(pointer) => {
                let location = self
                    .raw
                    .locate(pointer)
                    .map(|location| same_occurrence(location, source, span));
                Diagnostic::error(kind).at_opt(location)
            }
        };
        self.diags.push(diagnostic);
    }
}

/// `span` of `source` found inside the located TOML value that wrote `source`: the text of the
/// span, at its rank among the occurrences of that text.
fn same_occurrence(location: Location, source: &str, span: std::ops::Range<usize>) -> Location {
    let Some(needle) = source.get(span.clone()).filter(|n| !n.is_empty()) else {
        return location;
    };
    let rank = source[..span.start].matches(needle).count();
    let text = &location.source.text[location.span.clone()];
    match text
        .match_indices(needle)
        .nth(rank)
        .or_else(|| text.match_indices(needle).next())
    {
        Some((found, _)) => Location {
            span: location.span.start + found..location.span.start + found + needle.len(),
            source: location.source,
        },
        None => narrow(location, source, needle),
    }
}

/// Narrow a location to the first occurrence of `needle` inside the located value.
fn narrow(location: Location, _source: &str, needle: &str) -> Location {
    let text = &location.source.text[location.span.clone()];
    match find_span(text, needle) {
        Some(found) => Location {
            span: location.span.start + found.start..location.span.start + found.end,
            source: location.source,
        },
        None => location,
    }
}

fn find_span(text: &str, needle: &str) -> Option<std::ops::Range<usize>> {
    if needle.is_empty() {
        return None;
    }
    let last = needle.rsplit('.').next().unwrap_or(needle);
    text.find(needle)
        .map(|start| start..start + needle.len())
        .or_else(|| {
            let dotted = format!(".{last}");
            text.find(&dotted)
                .map(|start| start + 1..start + dotted.len())
        })
        .or_else(|| text.find(last).map(|start| start..start + last.len()))
}

pub(crate) fn template_error(
    raw: &RawWorkflow,
    at: &At,
    source: &str,
    error: &minijinja::Error,
) -> Diagnostic {
    let detail = error
        .detail()
        .map_or_else(|| error.kind().to_string(), str::to_string);
    let kind = DiagnosticKind::TemplateDoesNotCompile(detail);
    template_problem(raw, at, source, error.line(), kind)
}

/// An error at a line of a template: the line in its file, or the line's text inside the TOML
/// string it was written in.
pub(crate) fn template_problem(
    raw: &RawWorkflow,
    at: &At,
    source: &str,
    line: Option<usize>,
    kind: DiagnosticKind,
) -> Diagnostic {
    match at {
        At::File(file) => {
            let span = line_span(&file.text, line.unwrap_or(1));
            Diagnostic::error(kind).at(file, span)
        }
        At::Pointer(pointer) => {
            let location = raw.locate(pointer).map(|location| {
                // The template's own line inside the TOML string.
                let in_value = line_span(source, line.unwrap_or(1));
                let value_text = &location.source.text[location.span.clone()];
                let needle = &source[in_value.clone()];
                match value_text.find(needle.trim()) {
                    Some(offset) if !needle.trim().is_empty() => Location {
                        span: location.span.start + offset
                            ..location.span.start + offset + needle.trim().len(),
                        source: location.source,
                    },
                    _ => location,
                }
            });
            Diagnostic::error(kind).at_opt(location)
        }
    }
}

fn line_span(text: &str, line: usize) -> std::ops::Range<usize> {
    let mut start = 0;
    for (i, l) in text.split_inclusive('\n').enumerate() {
        if i + 1 == line {
            return start..start + l.trim_end().len();
        }
        start += l.len();
    }
    0..0
}
