//! Literals: what a template names in quotes, checked against what can be there.
//!
//! - A comparison of a value whose possible values are known with a string it can never be
//!   (`stages.X.status == 'sucess'`, `run.status == 'succeded'`, an `ask` stage's answer or a
//!   schema `enum` field against a string outside its choices) is always false (or, with `!=`,
//!   always true): an error at the string, with the values it can be; so is a comparison of a
//!   value whose schema says it is never a string (a boolean, a number) with a quoted string.
//! - `{% include %}`, `{% import %}`, `{% from %}` and `{% extends %}` of a template file that is
//!   not there (minijinja loads them only when the template renders).

use std::sync::LazyLock;

use regex::Regex;
use serde_json::Value;

use super::foreach::ItemOf;
use super::gather::{Context, Pending};
use super::key::TemplateKey;
use super::schemas::SchemaOf;
use super::Checker;
use crate::diag::{did_you_mean, DiagnosticKind};
use crate::library::Shelf;
use crate::schema::Schema;
use crate::template::Tmpl;

/// What `stages.X.status` can be (`StageStatus` as templates see it).
pub(crate) const STAGE_STATUSES: &[&str] = &[
    "running",
    "succeeded",
    "cached",
    "skipped",
    "failed",
    "not_run",
];

/// What `run.status` can be: while the run goes (`running`, in ordinary stages), and once it
/// has ended (`succeeded`, `exited`, `failed`, in finally stages and `[outputs]` alike).
pub(crate) const RUN_STATUSES: &[&str] = &["running", "succeeded", "exited", "failed"];

/// What `run.status` can be in a template of this key: `running` in an ordinary stage, how the
/// run ended in a finally stage and in `[outputs]`.
fn run_statuses(file: &crate::format::WorkflowFile, key: &TemplateKey) -> &'static [&'static str] {
    match key {
        TemplateKey::Stage(i, _) if file.stages.get_index(*i).is_some_and(|(_, d)| !d.finally) => {
            &RUN_STATUSES[..1]
        }
        TemplateKey::Stage(..) | TemplateKey::Output(_) => &RUN_STATUSES[1..],
        _ => RUN_STATUSES,
    }
}

const PATH: &str = r"(?:stages\.[a-z][a-z0-9_]*\.(?:status|output(?:\.[A-Za-z_][A-Za-z0-9_]*)*)|run\.status|output(?:\.[A-Za-z_][A-Za-z0-9_]*)*|item(?:\.[A-Za-z_][A-Za-z0-9_]*)*)";

/// `path == 'literal'`, `path != "literal"`, and the same the other way round.
static COMPARISON: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(&format!(
        r#"(?:(?:^|[^\w.])(?P<path>{PATH})\s*(?P<op>==|!=)\s*(?:'(?P<a>[^'\\]*)'|"(?P<b>[^"\\]*)"))|(?:(?:'(?P<c>[^'\\]*)'|"(?P<d>[^"\\]*)")\s*(?P<op2>==|!=)\s*(?P<path2>{PATH}))"#
    ))
    .expect("a valid regex")
});

/// The comparisons of a tag or expression that compare a known path with a plain string: the
/// path, the operator and the string. Where the string or the path goes on (`'a' | upper`,
/// `x ~ 'a'`, `path | lower`, `path.get(...)`), the value compared is another: left alone.
fn comparisons(body: &str) -> Vec<(&str, &str, &str)> {
    let mut found = Vec::new();
    for caps in COMPARISON.captures_iter(body) {
        let whole = caps.get(0).expect("the match");
        let after = body[whole.end()..].trim_start();
        let before = body[..whole.start()].trim_end();
        let (path, op, literal) = if let Some(path) = caps.name("path") {
            if after.starts_with(['|', '~', '+', '[', '.', '(']) {
                continue;
            }
            (
                path,
                caps.name("op"),
                caps.name("a").or_else(|| caps.name("b")),
            )
        } else {
            let Some(path) = caps.name("path2") else {
                continue;
            };
            let goes_on = after.starts_with(['|', '[', '.', '('])
                || after.starts_with(|c: char| c.is_alphanumeric() || c == '_');
            if goes_on || before.ends_with(['|', '~', '+']) {
                continue;
            }
            (
                path,
                caps.name("op2"),
                caps.name("c").or_else(|| caps.name("d")),
            )
        };
        if let (Some(op), Some(literal)) = (op, literal) {
            found.push((path.as_str(), op.as_str(), literal.as_str()));
        }
    }
    found
}

/// The tags of a template: what is between `{{ }}` and `{% %}`.
static TAG: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"(?s)\{\{(.*?)\}\}|\{%(.*?)%\}").expect("a valid regex"));

/// `{% include "x" %}`, `{% import "x" as y %}`, `{% from "x" import y %}`, `{% extends "x" %}`.
static LOADS: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r#"^\s*-?\s*(?:include|import|from|extends)\s+(?:'([^']*)'|"([^"]*)")(.*)$"#)
        .expect("a valid regex")
});

impl Checker<'_> {
    pub(super) fn check_literals(
        &mut self,
        pendings: &[Pending],
        templates: &[Option<Tmpl>],
        schemas: &[SchemaOf],
    ) {
        for (pending, template) in pendings.iter().zip(templates) {
            if template.is_none() {
                continue;
            }
            let bodies: Vec<&str> = if pending.native {
                vec![pending.source.as_str()]
            } else if !crate::template::compiled::has_syntax(&pending.source) {
                // No tag: no comparison and no load (most sources of a large workflow).
                continue;
            } else {
                TAG.captures_iter(&pending.source)
                    .filter_map(|caps| caps.get(1).or_else(|| caps.get(2)))
                    .map(|m| m.as_str())
                    .collect()
            };
            for body in bodies {
                if !pending.native {
                    self.check_load(pending, body);
                }
                for (path, op, literal) in comparisons(body) {
                    self.check_comparison(pending, path, op, literal, schemas);
                }
            }
        }
    }

    /// A template file a tag loads.
    fn check_load(&mut self, pending: &Pending, body: &str) {
        let Some(caps) = LOADS.captures(body) else {
            return;
        };
        let Some(name) = caps.get(1).or_else(|| caps.get(2)).map(|m| m.as_str()) else {
            return;
        };
        if caps[3].contains("ignore missing")
            || self
                .search
                .find_file(&self.raw.library, Shelf::Templates, name)
                .is_some()
        {
            return;
        }
        let message = DiagnosticKind::TemplateNotFound(name.to_string());
        self.diag_at(&pending.at, &pending.source, name, message);
        self.diags.last_mut().expect("pushed").help = Some(format!(
            "templates are looked up under `templates/` in {} and along the search path",
            self.raw.library.display()
        ));
    }

    fn check_comparison(
        &mut self,
        pending: &Pending,
        path: &str,
        op: &str,
        literal: &str,
        schemas: &[SchemaOf],
    ) {
        let parts: Vec<&str> = path.split('.').collect();
        let own = pending.key.stage();
        let known = match parts.as_slice() {
            ["stages", _, "status"] => {
                Possible::Strings(STAGE_STATUSES.iter().map(|s| (*s).to_string()).collect())
            }
            ["run", "status"] => Possible::Strings(
                run_statuses(self.file, &pending.key)
                    .iter()
                    .map(|s| (*s).to_string())
                    .collect(),
            ),
            ["stages", stage, "output", rest @ ..] => {
                let Some(target) = self.file.stages.get_index_of(*stage) else {
                    return;
                };
                match &schemas[target] {
                    SchemaOf::Known(schema) => possible(schema, rest),
                    _ => return,
                }
            }
            ["output", rest @ ..] if pending.context == Context::Output => {
                match own.map(|i| &schemas[i]) {
                    Some(SchemaOf::Known(schema)) => possible(schema, rest),
                    _ => return,
                }
            }
            ["item", rest @ ..] if pending.context == Context::Item => {
                match own.and_then(|i| self.items.get(i)) {
                    Some(ItemOf::Schema { schema, path, .. }) => {
                        let mut full: Vec<&str> = path.iter().map(String::as_str).collect();
                        full.extend(rest);
                        possible(schema, &full)
                    }
                    _ => return,
                }
            }
            _ => return,
        };
        let always = op != "==";
        let values = match known {
            Possible::Anything => return,
            Possible::Strings(values) => values,
            Possible::NotString(kinds) => {
                let kind = kinds.join(" or ");
                let message = DiagnosticKind::NeverAString {
                    path: path.to_string(),
                    kinds: kinds.clone(),
                    literal: literal.to_string(),
                    always,
                };
                let help = if kinds.iter().any(|k| k == "boolean")
                    && (literal == "true" || literal == "false")
                {
                    format!("compare with `{literal}` without quotes, or test it plainly (`{path}`, `not {path}`)")
                } else if kinds.iter().any(|k| k == "integer" || k == "number")
                    && literal.parse::<f64>().is_ok()
                {
                    format!("compare with the number `{literal}`, without quotes")
                } else {
                    format!("its schema says {kind}")
                };
                let needle = quoted_in(&pending.source, literal);
                self.diag_at(&pending.at, &pending.source, &needle, message);
                self.diags.last_mut().expect("pushed").help = Some(help);
                return;
            }
        };
        if values.is_empty() || values.iter().any(|v| v == literal) {
            return;
        }
        let message = DiagnosticKind::NeverEqual {
            path: path.to_string(),
            literal: literal.to_string(),
            always,
        };
        let help = did_you_mean(literal, values.iter().map(String::as_str)).unwrap_or_else(|| {
            format!(
                "it is one of {}",
                values
                    .iter()
                    .map(|v| format!("`{v}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        });
        let needle = quoted_in(&pending.source, literal);
        self.diag_at(&pending.at, &pending.source, &needle, message);
        self.diags.last_mut().expect("pushed").help = Some(help);
    }
}

/// The literal as it is quoted in the source, so the span lands on it and not on an earlier
/// occurrence of the same word.
fn quoted_in(source: &str, literal: &str) -> String {
    for quote in ['\'', '"'] {
        let quoted = format!("{quote}{literal}{quote}");
        if source.contains(&quoted) {
            return quoted;
        }
    }
    literal.to_string()
}

/// What a node of a schema can be, as far as a comparison with a string goes.
enum Possible {
    /// Only these strings (its `enum` or `const`).
    Strings(Vec<String>),
    /// Never a string: its declared types, none of them `string`.
    NotString(Vec<String>),
    Anything,
}

fn possible(schema: &Schema, path: &[&str]) -> Possible {
    let Some(node) = schema.node_at(path) else {
        return Possible::Anything;
    };
    let values: Vec<&Value> = match (node.get("const"), node.get("enum")) {
        (Some(value), _) => vec![value],
        (None, Some(Value::Array(values))) => values.iter().collect(),
        _ => {
            let kinds = Schema::types_of(node);
            return if kinds.is_empty() || kinds.iter().any(|k| k == "string") {
                Possible::Anything
            } else {
                Possible::NotString(kinds)
            };
        }
    };
    values
        .iter()
        .map(|v| v.as_str().map(str::to_string))
        .collect::<Option<Vec<_>>>()
        .map_or(Possible::Anything, Possible::Strings)
}

#[cfg(test)]
mod tests {
    use super::LOADS;

    fn comparisons(source: &str) -> Vec<(String, String)> {
        super::comparisons(source)
            .into_iter()
            .map(|(path, _, literal)| (path.to_string(), literal.to_string()))
            .collect()
    }

    #[test]
    fn comparisons_with_string_literals_are_found_either_way_round() {
        assert_eq!(
            comparisons("stages.a.status == 'sucess' and 'y' != stages.ask.output"),
            vec![
                ("stages.a.status".to_string(), "sucess".to_string()),
                ("stages.ask.output".to_string(), "y".to_string())
            ]
        );
        assert_eq!(
            comparisons(r#"run.status != "failed""#),
            vec![("run.status".to_string(), "failed".to_string())]
        );
        // Not a path the check knows, or not a plain literal.
        assert!(comparisons("x.output == 'a'").is_empty());
        assert!(comparisons("stages.a.output | lower == 'a'").is_empty());
        assert!(comparisons("'a' == stages.a.output.name | lower").is_empty());
        assert!(comparisons("'a' == stages.a.output.get('x')").is_empty());
        assert!(comparisons("stages.a.output == 'a' | upper").is_empty());
        assert!(comparisons("x ~ 'a' == stages.a.output").is_empty());
    }

    #[test]
    fn loads_are_read_with_their_names() {
        let caps = LOADS
            .captures(r#" include "part.j2" ignore missing "#)
            .unwrap();
        assert_eq!(&caps[2], "part.j2");
        assert!(caps[3].contains("ignore missing"));
        assert!(LOADS.captures(" from 'macros.j2' import row ").is_some());
        assert!(LOADS.captures(" if x == 'include' ").is_none());
    }
}
