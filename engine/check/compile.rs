//! Compile: every queued template source into a [`Tmpl`], in one template environment that the
//! compiled templates share (each holds it by reference count; nothing outlives its workflow).
//!
//! Templates that are only text and `{{ a.b }}` lookups never reach minijinja's compiler; text
//! without template syntax stays a literal.

use std::sync::Arc;

use super::gather::Pending;
use super::key::{Field, TemplateKey};
use super::spans::{template_error, template_problem};
use super::Checker;
use crate::diag::DiagnosticKind;
use crate::library::Shelf;
use crate::template::{self, compiled, Tmpl};

impl Checker<'_> {
    /// `pendings[k]` compiled, or `None` where it does not compile (and an error says why).
    /// Also records the names the environment defines, for the reference pass.
    pub(super) fn compile(&mut self, pendings: &[Pending]) -> Vec<Option<Tmpl>> {
        let mut env = template::environment();
        let loader_search = self.search.clone();
        let loader_library = self.raw.library.clone();
        env.set_loader(move |name| {
            Ok(loader_search
                .find_file(&loader_library, Shelf::Templates, name)
                .map(|source| crate::template::bounded_source(&source.text)))
        });
        let mut interpolated: Vec<Option<compiled::Interpolation>> = pendings
            .iter()
            .map(|p| compiled::Interpolation::parse(&p.name, &p.source, p.native))
            .collect();
        // Asked once a source: the loops below and the review of scripts all need it.
        let syntax: Vec<bool> = pendings
            .iter()
            .map(|p| compiled::has_syntax(&p.source))
            .collect();
        let mut failed = vec![false; pendings.len()];
        for (k, (pending, plain)) in pendings.iter().zip(&interpolated).enumerate() {
            if plain.is_some() || pending.native || !syntax[k] {
                continue;
            }
            let added = crate::template::guarded(|| {
                env.add_template_owned(
                    pending.name.clone(),
                    crate::template::bounded_source(&pending.source),
                )
            });
            if let Err(error) = added {
                failed[k] = true;
                let diagnostic = template_error(self.raw, &pending.at, &pending.source, &error);
                self.diags.push(diagnostic);
            }
        }
        self.globals = env.globals().map(|(name, _)| name.to_string()).collect();
        self.check_names(&env, pendings, &failed);
        let env = Arc::new(env);
        let mut templates = Vec::with_capacity(pendings.len());
        for (((pending, plain), failed), syntax) in pendings
            .iter()
            .zip(&mut interpolated)
            .zip(failed)
            .zip(syntax)
        {
            if failed {
                templates.push(None);
                continue;
            }
            let result = if let Some(interpolation) = plain.take() {
                Ok(Tmpl::Interpolated(Box::new(interpolation)))
            } else if pending.native {
                Tmpl::expression(&env, &pending.source)
            } else if !syntax {
                Ok(Tmpl::Literal(pending.source.clone()))
            } else if let Some(expression) = compiled::single_expression(&pending.source)
                .filter(|_| pending.name.starts_with("value:"))
            {
                Tmpl::expression(&env, expression)
            } else {
                Tmpl::text(&env, &pending.name)
            };
            match result {
                Ok(tmpl) => templates.push(Some(tmpl)),
                Err(error) => {
                    let diagnostic = match braced_expression(pending) {
                        Some((inner, braces)) => {
                            let kind = DiagnosticKind::ExpressionInBraces {
                                field: pending.clean_name(),
                                braces,
                            };
                            let mut diagnostic = template_problem(
                                self.raw,
                                &pending.at,
                                &pending.source,
                                None,
                                kind,
                            );
                            diagnostic.help = Some(format!(
                                "write the expression alone: \"{}\"",
                                inner.replace('"', "\\\"")
                            ));
                            diagnostic
                        }
                        None => template_error(self.raw, &pending.at, &pending.source, &error),
                    };
                    self.diags.push(diagnostic);
                    templates.push(None);
                }
            }
        }
        self.review_scripts(pendings);
        templates
    }

    /// The values of shell scripts (and of commands running a shell or an interpreter) that
    /// would be code: errors; those read as arithmetic or names: warnings (at run time such a
    /// value must be an integer or a name).
    fn review_scripts(&mut self, pendings: &[Pending]) {
        use crate::template::shell;
        let mut argvs: std::collections::BTreeMap<usize, Vec<&Pending>> = Default::default();
        for pending in pendings {
            if matches!(
                pending.key,
                TemplateKey::Stage(_, Field::Shell | Field::Command(_))
            ) {
                self.dollar_before_templates(pending);
            }
            match &pending.key {
                TemplateKey::Stage(_, Field::Shell) => self.review_script(pending),
                TemplateKey::Stage(i, Field::Command(_)) => {
                    argvs.entry(*i).or_default().push(pending);
                }
                _ => {}
            }
        }
        for argv in argvs.values() {
            let texts: Vec<String> = argv.iter().map(|p| p.source.clone()).collect();
            let script = (1..texts.len()).find(|&j| shell::script_argument(&texts[..j]) == Some(j));
            if let Some(pending) = script.and_then(|j| argv.get(j)) {
                self.review_script(pending);
            }
            let words: Vec<shell::Word> = texts
                .iter()
                .enumerate()
                .map(|(k, t)| shell::Word::argument(t, k, compiled::has_syntax(t)))
                .collect();
            let mut findings = Vec::new();
            shell::analyze(&words, false, &mut findings);
            for finding in findings {
                let (shell::Use::Code(_), Some(pending)) = (&finding.usage, argv.get(finding.at))
                else {
                    continue;
                };
                if script == Some(finding.at) {
                    continue;
                }
                let message = finding.usage.message(true, None);
                let span = 0..pending.source.len();
                self.diag_span(
                    &pending.at,
                    &pending.source,
                    span,
                    DiagnosticKind::ValueInCode(message),
                );
            }
        }
    }

    /// `${{ x }}` in a command or script, GitHub Actions' spelling: the `$` is not part of the
    /// template, so it stays in the text before the value (a shell then reads `$'value'` or
    /// `$value`). A warning at each, with the template to write instead; a `$` wanted there
    /// can be kept with `{{ '$' ~ x }}`.
    fn dollar_before_templates(&mut self, pending: &Pending) {
        let source = pending.source.as_str();
        let mut from = 0;
        while let Some(found) = source[from..].find("${{") {
            let start = from + found;
            let Some(close) = source[start..].find("}}") else {
                break;
            };
            let end = start + close + 2;
            let template = &source[start + 1..end];
            self.diag_span(
                &pending.at,
                source,
                start..end,
                DiagnosticKind::DollarBeforeTemplate,
            );
            if let Some(last) = self.diags.last_mut() {
                last.severity = crate::diag::Severity::Warning;
                last.help = Some(format!(
                    "drop the `$`: `{template}` is the value (a `$` meant to stay goes inside: \
                     `{{{{ '$' ~ {} }}}}`)",
                    template
                        .trim_start_matches("{{")
                        .trim_end_matches("}}")
                        .trim()
                ));
            }
            from = end;
        }
    }

    fn review_script(&mut self, pending: &Pending) {
        for review in crate::template::shell::review(&pending.source) {
            let code = matches!(review.usage, crate::template::shell::Use::Code(_));
            let mut message = review.usage.message(review.valued, None);
            if !code {
                message.push_str(" at run time, or the stage fails");
            }
            self.diag_span(
                &pending.at,
                &pending.source,
                review.span,
                DiagnosticKind::ValueInCode(message),
            );
            if !code {
                if let Some(last) = self.diags.last_mut() {
                    last.severity = crate::diag::Severity::Warning;
                }
            }
        }
    }
}

/// The expression inside an expression field written the way a template is, `{{ expr }}` or
/// `${{ expr }}` (GitHub Actions' `if: ${{ }}` habit), with the braces it was written in: what
/// it should have been. Asked only of a source that did not compile, so a valid expression is
/// never second-guessed.
fn braced_expression(pending: &Pending) -> Option<(&str, &'static str)> {
    if !pending.native {
        return None;
    }
    let source = pending.source.trim();
    let (source, braces) = match source.strip_prefix('$') {
        Some(rest) => (rest, "${{ }}"),
        None => (source, "{{ }}"),
    };
    let inner = source.strip_prefix("{{")?.strip_suffix("}}")?.trim();
    (!inner.is_empty() && !inner.contains("{{") && !inner.contains("}}")).then_some((inner, braces))
}
