//! Compile: every queued template source into a [`Tmpl`], in one template environment that the
//! compiled templates share (each holds it by reference count; nothing outlives its workflow).
//!
//! Templates that are only text and `{{ a.b }}` lookups never reach minijinja's compiler; text
//! without template syntax stays a literal.

use std::sync::Arc;

use super::gather::Pending;
use super::spans::template_error;
use super::Checker;
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
        let mut failed = vec![false; pendings.len()];
        for (k, (pending, plain)) in pendings.iter().zip(&interpolated).enumerate() {
            if plain.is_some() || pending.native || !compiled::has_syntax(&pending.source) {
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
        for ((pending, plain), failed) in pendings.iter().zip(&mut interpolated).zip(failed) {
            if failed {
                templates.push(None);
                continue;
            }
            let result = if let Some(interpolation) = plain.take() {
                Ok(Tmpl::Interpolated(Box::new(interpolation)))
            } else if pending.native {
                Tmpl::expression(&env, &pending.source)
            } else if !compiled::has_syntax(&pending.source) {
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
                    let diagnostic = template_error(self.raw, &pending.at, &pending.source, &error);
                    self.diags.push(diagnostic);
                    templates.push(None);
                }
            }
        }
        templates
    }
}
