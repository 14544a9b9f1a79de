//! Names: every filter and test a template or expression uses exists.
//!
//! minijinja looks filters and tests up only when a template runs, so a misspelt `| tojsn`
//! compiles and fails at run time. This pass reads the tags of each compiled template (string
//! literals, comments and `{% raw %}` skipped), collects the names used after `|`, after `is` /
//! `is not` and in `{% filter %}` blocks, and asks the environment about each one: a name is known
//! when rendering it does not fail as unknown. Unknown names are errors with the nearest known name
//! as a suggestion. (A misspelt function is an undefined name, which the reference pass reports.)

use std::collections::HashMap;

use minijinja::{Environment, ErrorKind};

use super::gather::Pending;
use super::spans::template_problem;
use super::Checker;
use crate::diag::{did_you_mean, DiagnosticKind};

/// Filter names offered as suggestions (each is kept only if the environment has it).
const FILTER_NAMES: &[&str] = &[
    "abs",
    "attr",
    "batch",
    "bool",
    "capitalize",
    "chain",
    "count",
    "d",
    "default",
    "dictsort",
    "e",
    "escape",
    "first",
    "float",
    "format",
    "groupby",
    "indent",
    "int",
    "items",
    "join",
    "last",
    "length",
    "lines",
    "list",
    "lower",
    "map",
    "max",
    "min",
    "pprint",
    "reject",
    "rejectattr",
    "replace",
    "reverse",
    "round",
    "safe",
    "select",
    "selectattr",
    "slice",
    "sort",
    "split",
    "string",
    "sum",
    "title",
    "tojson",
    "trim",
    "unique",
    "upper",
    "urlencode",
    "zip",
    "timestamp",
    "duration",
    "path_join",
    "sha256",
    "from_json",
    "merge",
    "flatten",
    "regex_match",
    "regex_findall",
    "regex_replace",
    "basename",
    "dirname",
    "shell_quote",
];

/// Test names offered as suggestions (each is kept only if the environment has it).
const TEST_NAMES: &[&str] = &[
    "boolean",
    "containing",
    "defined",
    "divisibleby",
    "endingwith",
    "eq",
    "equalto",
    "escaped",
    "even",
    "false",
    "filter",
    "float",
    "ge",
    "greaterthan",
    "gt",
    "in",
    "integer",
    "iterable",
    "le",
    "lessthan",
    "lower",
    "lt",
    "mapping",
    "ne",
    "none",
    "number",
    "odd",
    "safe",
    "sameas",
    "sequence",
    "startingwith",
    "string",
    "test",
    "true",
    "undefined",
    "upper",
];

#[derive(Clone, Copy, PartialEq, Eq, Hash)]
enum Kind {
    Filter,
    Test,
}

impl Kind {
    #[cfg(test)]
    fn noun(self) -> &'static str {
        match self {
            Kind::Filter => "filter",
            Kind::Test => "test",
        }
    }
}

/// One use of a name, at a byte offset of the template's source.
struct Use {
    kind: Kind,
    name: String,
    offset: usize,
}

impl Checker<'_> {
    /// Report every filter, test and function used by a compiled template that the environment
    /// does not know.
    pub(super) fn check_names(
        &mut self,
        env: &Environment<'_>,
        pendings: &[Pending],
        failed: &[bool],
    ) {
        let mut known: HashMap<(Kind, String), bool> = HashMap::new();
        for (pending, failed) in pendings.iter().zip(failed) {
            if *failed
                || !(pending.native
                    || pending.source.contains("{{")
                    || pending.source.contains("{%"))
            {
                continue;
            }
            for found in scan(&pending.source, pending.native) {
                let found_known = *known
                    .entry((found.kind, found.name.clone()))
                    .or_insert_with(|| exists(env, found.kind, &found.name));
                if found_known {
                    continue;
                }
                let candidates: Vec<&str> = match found.kind {
                    Kind::Filter => FILTER_NAMES
                        .iter()
                        .copied()
                        .filter(|name| {
                            *known
                                .entry((Kind::Filter, (*name).to_string()))
                                .or_insert_with(|| exists(env, Kind::Filter, name))
                        })
                        .collect(),
                    Kind::Test => TEST_NAMES
                        .iter()
                        .copied()
                        .filter(|name| {
                            *known
                                .entry((Kind::Test, (*name).to_string()))
                                .or_insert_with(|| exists(env, Kind::Test, name))
                        })
                        .collect(),
                };
                let line = pending.source[..found.offset].matches('\n').count() + 1;
                let message = match found.kind {
                    Kind::Filter => DiagnosticKind::UnknownFilter(found.name.clone()),
                    Kind::Test => DiagnosticKind::UnknownTest(found.name.clone()),
                };
                let mut diagnostic =
                    template_problem(self.raw, &pending.at, &pending.source, Some(line), message);
                diagnostic = diagnostic.with_help_opt(did_you_mean(&found.name, candidates));
                self.diags.push(diagnostic);
            }
        }
    }
}

/// Whether the environment has a filter or test of this name.
fn exists(env: &Environment<'_>, kind: Kind, name: &str) -> bool {
    let (probe, unknown) = match kind {
        Kind::Filter => (format!("{{{{ none | {name} }}}}"), ErrorKind::UnknownFilter),
        Kind::Test => (format!("{{{{ none is {name} }}}}"), ErrorKind::UnknownTest),
    };
    match crate::template::guarded(|| env.render_str(&probe, ())) {
        Ok(_) => true,
        Err(error) => error.kind() != unknown,
    }
}

/// The filters and tests a template (or, `native`, a bare expression) uses.
fn scan(source: &str, native: bool) -> Vec<Use> {
    let mut uses = Vec::new();
    if native {
        scan_tag(source, 0, false, &mut uses);
        return uses;
    }
    let bytes = source.as_bytes();
    let mut at = 0;
    while let Some(open) = source[at..].find('{').map(|i| at + i) {
        let Some(&next) = bytes.get(open + 1) else {
            break;
        };
        let close = match next {
            b'{' => "}}",
            b'%' => "%}",
            b'#' => "#}",
            _ => {
                at = open + 1;
                continue;
            }
        };
        let start = open + 2;
        let Some(end) = find_close(source, start, close) else {
            break;
        };
        if next != b'#' {
            let body = &source[start..end];
            if next == b'%' && body.trim().trim_start_matches('-').trim_start() == "raw" {
                // Nothing inside {% raw %} is template syntax.
                match source[end..].find("endraw") {
                    Some(i) => at = end + i,
                    None => break,
                }
                continue;
            }
            scan_tag(body, start, next == b'%', &mut uses);
        }
        at = end + 2;
    }
    uses
}

/// Where a tag closes, skipping string literals.
fn find_close(source: &str, from: usize, close: &str) -> Option<usize> {
    let bytes = source.as_bytes();
    let mut i = from;
    while i < bytes.len() {
        match bytes[i] {
            quote @ (b'"' | b'\'') => i = skip_string(bytes, i, quote),
            _ if bytes[i..].starts_with(close.as_bytes()) => return Some(i),
            _ => i += 1,
        }
    }
    None
}

fn skip_string(bytes: &[u8], open: usize, quote: u8) -> usize {
    let mut i = open + 1;
    while i < bytes.len() {
        match bytes[i] {
            b'\\' => i += 2,
            b if b == quote => return i + 1,
            _ => i += 1,
        }
    }
    bytes.len()
}

/// A token of a tag: an identifier, or one punctuation character.
enum Token<'a> {
    Ident(&'a str, usize),
    Punct(u8),
}

fn tokens(body: &str, base: usize) -> Vec<Token<'_>> {
    let bytes = body.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if b == b'"' || b == b'\'' {
            i = skip_string(bytes, i, b);
            out.push(Token::Punct(b'"'));
        } else if b.is_ascii_alphabetic() || b == b'_' {
            let start = i;
            while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_') {
                i += 1;
            }
            out.push(Token::Ident(&body[start..i], base + start));
        } else if b.is_ascii_digit() {
            while i < bytes.len()
                && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_' || bytes[i] == b'.')
            {
                i += 1;
            }
            out.push(Token::Punct(b'0'));
        } else if b.is_ascii_whitespace() {
            i += 1;
        } else {
            out.push(Token::Punct(b));
            i += 1;
        }
    }
    out
}

fn scan_tag(body: &str, base: usize, statement: bool, uses: &mut Vec<Use>) {
    let tokens = tokens(body, base);
    let ident = |k: usize| match tokens.get(k) {
        Some(Token::Ident(name, _)) => Some(*name),
        _ => None,
    };
    let punct = |k: usize| match tokens.get(k) {
        Some(Token::Punct(b)) => Some(*b),
        _ => None,
    };
    for (k, token) in tokens.iter().enumerate() {
        let Token::Ident(name, offset) = token else {
            continue;
        };
        let before = k.checked_sub(1);
        let filter_block = statement && k == 1 && ident(0) == Some("filter");
        let after_pipe = before.and_then(punct) == Some(b'|');
        let after_is = before.and_then(ident) == Some("is")
            || (before.and_then(ident) == Some("not")
                && k.checked_sub(2).and_then(ident) == Some("is"));
        let kind = if after_pipe || filter_block {
            Kind::Filter
        } else if after_is && *name != "not" {
            Kind::Test
        } else {
            continue;
        };
        uses.push(Use {
            kind,
            name: (*name).to_string(),
            offset: *offset,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(source: &str) -> Vec<(&'static str, String)> {
        scan(source, false)
            .into_iter()
            .map(|u| (u.kind.noun(), u.name))
            .collect()
    }

    #[test]
    fn finds_filters_and_tests_outside_strings() {
        let found = names(
            "{{ x | tojsn }} {% if y is not definedd %}{{ now() | trim }}{% endif %} {{ \"a | b(\" }} {{ loop.cycle(1) }}",
        );
        assert_eq!(
            found,
            vec![
                ("filter", "tojsn".to_string()),
                ("test", "definedd".to_string()),
                ("filter", "trim".to_string()),
            ]
        );
    }

    #[test]
    fn a_filter_block_names_its_filter_and_macro_calls_name_none() {
        let found = names(
            "{% macro greet(who) %}hi {{ who }}{% endmacro %}{% filter uppr %}{{ greet('x') }}{% endfilter %}",
        );
        assert_eq!(found, vec![("filter", "uppr".to_string())]);
    }

    #[test]
    fn text_beyond_ascii_is_read_without_a_panic() {
        assert_eq!(
            names("{# • é #}• {{ x | tojsn }} ✗ {% if y %}é{% endif %}"),
            vec![("filter", "tojsn".to_string())]
        );
    }

    #[test]
    fn raw_blocks_and_comments_are_not_read() {
        assert!(names("{% raw %}{{ x | nope }}{% endraw %}{# {{ y | nope }} #}").is_empty());
    }

    #[test]
    fn expressions_are_read_whole() {
        let found: Vec<String> = scan("not output.update | boool", true)
            .into_iter()
            .map(|u| u.name)
            .collect();
        assert_eq!(found, vec!["boool".to_string()]);
    }
}
