//! What flows through the names a template binds, from its syntax tree: the paths read through
//! a `{% set %}` or `{% with %}` alias of a path, a `{% for %}` variable over a path's items, and
//! a filter's `attribute` of a path's items (`map(attribute='name')`, `selectattr('ok')`); the
//! patterns given to the regex filters; ordering comparisons of a path with a literal; and, for
//! every read of a field of a stage's output, whether a guard covers it.
//!
//! A binding is followed only while its value is certain: a name set inside an `if`, a loop or
//! any other block is not followed past that block (it may or may not have been set there), a
//! name set anywhere in a loop's body is not followed before that `set` in the body (an earlier
//! iteration may have set it), and nothing outside a macro, a `call` or a `block` is followed
//! into it (it runs where it is called). What is not followed is not checked, never guessed.

use std::ops::Range;

use minijinja::machinery::{ast, parse, parse_expr, WhitespaceConfig};
use minijinja::syntax::SyntaxConfig;

use super::reads::{chain, Read};

/// How a name came to stand for a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum How {
    /// `{% set x = path %}` or `{% with x = path %}`: the value at the path.
    Alias,
    /// `{% for x in path %}`: an item of the list at the path.
    Item,
    /// `path | map(attribute='a')` and the like: a field of each item of the list.
    Attribute,
}

/// A read of a path through a binding (or a filter's `attribute`).
#[derive(Debug, Clone)]
pub(crate) struct Derived {
    /// The whole path, from the scope's root; its segments are where each is written (those
    /// of the binding, then those of the use).
    pub(crate) read: Read,
    /// How many leading segments come from the binding: a problem among them is the binding's
    /// own read's, reported there.
    pub(crate) through: usize,
    /// The name read through (the filter's name for an `attribute`), and how it was bound.
    pub(crate) name: String,
    pub(crate) how: How,
    /// The path the binding stands for, as written (`stages.scan.output.sources`).
    pub(crate) base: String,
}

/// A literal pattern given to one of the engine's regex filters.
#[derive(Debug, Clone)]
pub(crate) struct Pattern {
    pub(crate) filter: String,
    pub(crate) pattern: String,
    pub(crate) span: Range<usize>,
}

/// An ordering comparison (`<`, `<=`, `>`, `>=`) of a path with a literal.
#[derive(Debug, Clone)]
pub(crate) struct Ordering {
    /// The path compared, from the scope's root (through a binding, where one is followed).
    pub(crate) path: Vec<String>,
    pub(crate) op: &'static str,
    /// The literal: a string's text, or a number as minijinja prints it.
    pub(crate) literal: String,
    /// Whether the literal is a string (else a number).
    pub(crate) string: bool,
    pub(crate) span: Range<usize>,
}

/// A read of a field of a stage's output (`stages.X.output.<field>...`), direct or through a
/// binding.
#[derive(Debug, Clone)]
pub(crate) struct StageRead {
    pub(crate) stage: String,
    pub(crate) path: Vec<String>,
    pub(crate) span: Range<usize>,
    /// Inside `| default`, a test (`is defined`), or the right of an `and` or `or`: whatever
    /// it reads may be missing.
    pub(crate) guarded: bool,
    /// The paths read by the conditions of the `if`s and conditional expressions it is under:
    /// a guard when they decide on the stage.
    pub(crate) conditions: Vec<Vec<String>>,
}

/// What a template's bindings, filters and comparisons say, as far as they are followed.
#[derive(Debug, Default)]
pub(crate) struct Flow {
    pub(crate) derived: Vec<Derived>,
    pub(crate) patterns: Vec<Pattern>,
    pub(crate) orderings: Vec<Ordering>,
    pub(crate) stage_reads: Vec<StageRead>,
}

/// The regex filters of the engine (`functions.rs`), whose first argument is a pattern.
pub(crate) const REGEX_FILTERS: &[&str] = &["regex_match", "regex_findall", "regex_replace"];

/// Whether a template may have something [`Flow`] follows: a cheap look at its text, so a
/// template with no `set`, `for`, `with`, attribute filter, regex filter or ordering pays for no
/// walk at all.
pub(crate) fn wanted(source: &str) -> bool {
    ["set", "for", "with", "map", "attr", "regex_", "<", ">"]
        .iter()
        .any(|needle| source.contains(needle))
}

/// The flow of a template's tree.
pub(crate) fn of_tree(tree: &ast::Stmt<'_>) -> Flow {
    let mut walker = Walker::default();
    walker.stmt(tree);
    walker.flow
}

/// The flow of a bare expression.
pub(crate) fn of_expr(expr: &ast::Expr<'_>) -> Flow {
    let mut walker = Walker::default();
    walker.expr(expr);
    walker.flow
}

/// The flow of a template's (or, with `expression`, a bare expression's) source; `None` when
/// it does not parse.
#[allow(clippy::default_constructed_unit_structs)]
pub(crate) fn of_source(source: &str, expression: bool) -> Option<Flow> {
    if expression {
        let expr = super::guarded(|| parse_expr(source)).ok()?;
        return Some(of_expr(&expr));
    }
    let tree = super::guarded(|| {
        parse(
            source,
            "<template>",
            SyntaxConfig::default(),
            WhitespaceConfig::default(),
        )
    })
    .ok()?;
    Some(of_tree(&tree))
}

/// What a bound name stands for.
#[derive(Clone)]
enum Binding {
    Path(Bound),
    /// A value check does not follow.
    Opaque,
}

#[derive(Clone)]
struct Bound {
    path: Vec<String>,
    segments: Vec<Range<usize>>,
    /// Where in `path` an item of a list was taken (a loop's, a filter's): no field is read
    /// there, and a loop over none never gets that far.
    items: Vec<usize>,
    how: How,
    /// The path as written, for messages.
    base: String,
}

struct Scope<'a> {
    names: Vec<(&'a str, Binding)>,
    /// A macro's, a `call`'s or a `block`'s body: run where it is called, so no binding from
    /// outside is followed into it.
    barrier: bool,
}

enum Guard {
    /// Under a condition that reads these paths.
    Paths(Vec<Vec<String>>),
    /// Every read is guarded (`| default`, a test, the right of `and`).
    All,
}

/// A path read, resolved through the bindings.
struct Resolved {
    path: Vec<String>,
    segments: Vec<Range<usize>>,
    span: Range<usize>,
    /// The binding it went through: its name, and what it stands for.
    through: Option<(String, Bound)>,
}

#[derive(Default)]
struct Walker<'a> {
    scopes: Vec<Scope<'a>>,
    guards: Vec<Guard>,
    flow: Flow,
}

fn range(span: minijinja::machinery::Span) -> Range<usize> {
    span.start_offset as usize..span.end_offset as usize
}

/// A path as it is written (`sources[0].name`).
pub(crate) fn shown(path: &[String]) -> String {
    let mut out = String::new();
    for (i, segment) in path.iter().enumerate() {
        if segment.parse::<usize>().is_ok() {
            out.push_str(&format!("[{segment}]"));
        } else {
            if i > 0 {
                out.push('.');
            }
            out.push_str(segment);
        }
    }
    out
}

/// Filters whose value is the list they are given, or a part of it, in another order.
const SAME_ITEMS: &[&str] = &[
    "selectattr",
    "rejectattr",
    "sort",
    "reverse",
    "unique",
    "list",
];
/// Filters whose value is one item of the list they are given.
const ONE_ITEM: &[&str] = &["first", "last"];

/// Names a statement list sets, at any depth: after a block, each may or may not hold what it
/// held before.
fn sets_in<'a>(body: &[ast::Stmt<'a>], out: &mut Vec<&'a str>) {
    for stmt in body {
        match stmt {
            ast::Stmt::Template(t) => sets_in(&t.children, out),
            ast::Stmt::Set(s) => targets(&s.target, out),
            ast::Stmt::SetBlock(s) => {
                targets(&s.target, out);
                sets_in(&s.body, out);
            }
            ast::Stmt::ForLoop(f) => {
                sets_in(&f.body, out);
                sets_in(&f.else_body, out);
            }
            ast::Stmt::IfCond(i) => {
                sets_in(&i.true_body, out);
                sets_in(&i.false_body, out);
            }
            ast::Stmt::WithBlock(w) => sets_in(&w.body, out),
            ast::Stmt::AutoEscape(a) => sets_in(&a.body, out),
            ast::Stmt::FilterBlock(f) => sets_in(&f.body, out),
            ast::Stmt::Block(b) => sets_in(&b.body, out),
            ast::Stmt::Macro(m) => {
                out.push(m.name);
                sets_in(&m.body, out);
            }
            ast::Stmt::CallBlock(c) => sets_in(&c.macro_decl.body, out),
            ast::Stmt::Import(i) => targets(&i.name, out),
            ast::Stmt::FromImport(f) => {
                for (name, alias) in &f.names {
                    targets(alias.as_ref().unwrap_or(name), out);
                }
            }
            ast::Stmt::EmitExpr(_)
            | ast::Stmt::EmitRaw(_)
            | ast::Stmt::Extends(_)
            | ast::Stmt::Include(_)
            | ast::Stmt::Do(_) => {}
        }
    }
}

fn targets<'a>(target: &ast::Expr<'a>, out: &mut Vec<&'a str>) {
    match target {
        ast::Expr::Var(var) => out.push(var.id),
        ast::Expr::List(list) => list.items.iter().for_each(|item| targets(item, out)),
        _ => {}
    }
}

impl<'a> Walker<'a> {
    fn lookup(&self, name: &str) -> Option<Binding> {
        let mut crossed = false;
        for scope in self.scopes.iter().rev() {
            if let Some((_, binding)) = scope.names.iter().rev().find(|(n, _)| *n == name) {
                return Some(if crossed {
                    Binding::Opaque
                } else {
                    binding.clone()
                });
            }
            crossed |= scope.barrier;
        }
        None
    }

    fn bind(&mut self, name: &'a str, binding: Binding) {
        if self.scopes.is_empty() {
            self.scopes.push(Scope {
                names: Vec::new(),
                barrier: false,
            });
        }
        if let Some(scope) = self.scopes.last_mut() {
            scope.names.push((name, binding));
        }
    }

    fn bind_opaque(&mut self, target: &ast::Expr<'a>) {
        let mut names = Vec::new();
        targets(target, &mut names);
        for name in names {
            self.bind(name, Binding::Opaque);
        }
    }

    fn scoped(&mut self, barrier: bool, f: impl FnOnce(&mut Self)) {
        self.scopes.push(Scope {
            names: Vec::new(),
            barrier,
        });
        f(self);
        self.scopes.pop();
    }

    /// After a block: what it set is no longer followed.
    fn forget(&mut self, bodies: &[&[ast::Stmt<'a>]]) {
        let mut names = Vec::new();
        for body in bodies {
            sets_in(body, &mut names);
        }
        for name in names {
            self.bind(name, Binding::Opaque);
        }
    }

    fn guarded(&mut self, guard: Guard, f: impl FnOnce(&mut Self)) {
        self.guards.push(guard);
        f(self);
        self.guards.pop();
    }

    fn is_guarded(&self) -> bool {
        self.guards.iter().any(|g| matches!(g, Guard::All))
    }

    fn conditions(&self) -> Vec<Vec<String>> {
        self.guards
            .iter()
            .flat_map(|g| match g {
                Guard::Paths(paths) => paths.clone(),
                Guard::All => Vec::new(),
            })
            .collect()
    }

    /// A chain of lookups, resolved through the bindings: `None` when it is not a chain, or
    /// goes through a name that is not followed.
    fn resolve(&self, expr: &ast::Expr<'a>) -> Option<Resolved> {
        let (path, segments) = chain(expr)?;
        let span = segments[0].start..range(expr.span()).end;
        match self.lookup(&path[0]) {
            None => Some(Resolved {
                path,
                segments,
                span,
                through: None,
            }),
            Some(Binding::Opaque) => None,
            Some(Binding::Path(bound)) => {
                let mut full = bound.path.clone();
                full.extend(path[1..].iter().cloned());
                let mut all = bound.segments.clone();
                all.extend(segments[1..].iter().cloned());
                Some(Resolved {
                    path: full,
                    segments: all,
                    span,
                    through: Some((path[0].clone(), bound)),
                })
            }
        }
    }

    /// What a value bound to a name stands for, when it is a path (or a list filter of one).
    fn value_of(&self, expr: &ast::Expr<'a>, how: How) -> Option<Bound> {
        if let ast::Expr::Filter(f) = expr {
            let inner = self.value_of(f.expr.as_ref()?, how)?;
            if SAME_ITEMS.contains(&f.name) {
                return Some(inner);
            }
            if ONE_ITEM.contains(&f.name) && f.args.is_empty() {
                return Some(inner.item(range(expr.span()), how));
            }
            return None;
        }
        let resolved = self.resolve(expr)?;
        let items = match &resolved.through {
            Some((_, bound)) => bound.items.clone(),
            None => Vec::new(),
        };
        Some(Bound {
            base: shown(&resolved.path),
            path: resolved.path,
            segments: resolved.segments,
            items,
            how,
        })
    }

    /// The paths a condition reads (through the bindings).
    fn paths_read(&self, expr: &ast::Expr<'a>) -> Vec<Vec<String>> {
        let mut paths = Vec::new();
        self.visit_chains(expr, &mut |resolved| paths.push(resolved.path));
        paths
    }

    /// Each chain an expression reads, resolved.
    fn visit_chains(&self, expr: &ast::Expr<'a>, f: &mut dyn FnMut(Resolved)) {
        if matches!(
            expr,
            ast::Expr::Var(_) | ast::Expr::GetAttr(_) | ast::Expr::GetItem(_)
        ) {
            if let Some(resolved) = self.resolve(expr) {
                f(resolved);
                return;
            }
        }
        let mut each = |e: &ast::Expr<'a>| self.visit_chains(e, f);
        match expr {
            ast::Expr::Var(_) | ast::Expr::Const(_) => {}
            ast::Expr::GetAttr(a) => each(&a.expr),
            ast::Expr::GetItem(i) => {
                each(&i.expr);
                each(&i.subscript_expr);
            }
            ast::Expr::Slice(s) => {
                each(&s.expr);
                for part in [&s.start, &s.stop, &s.step].into_iter().flatten() {
                    each(part);
                }
            }
            ast::Expr::UnaryOp(u) => each(&u.expr),
            ast::Expr::BinOp(b) => {
                each(&b.left);
                each(&b.right);
            }
            ast::Expr::Compare(c) => {
                each(&c.expr);
                c.ops.iter().for_each(|op| each(&op.expr));
            }
            ast::Expr::IfExpr(i) => {
                each(&i.test_expr);
                each(&i.true_expr);
                if let Some(other) = &i.false_expr {
                    each(other);
                }
            }
            ast::Expr::Filter(flt) => {
                if let Some(inner) = &flt.expr {
                    each(inner);
                }
                flt.args.iter().for_each(|a| each(arg_expr(a)));
            }
            ast::Expr::Test(t) => {
                each(&t.expr);
                t.args.iter().for_each(|a| each(arg_expr(a)));
            }
            ast::Expr::Call(c) => {
                each(&c.expr);
                c.args.iter().for_each(|a| each(arg_expr(a)));
            }
            ast::Expr::List(l) => l.items.iter().for_each(each),
            ast::Expr::Map(m) => {
                m.keys.iter().for_each(&mut each);
                m.values.iter().for_each(&mut each);
            }
        }
    }

    fn body(&mut self, body: &[ast::Stmt<'a>]) {
        for stmt in body {
            self.stmt(stmt);
        }
    }

    fn stmt(&mut self, stmt: &ast::Stmt<'a>) {
        match stmt {
            ast::Stmt::Template(t) => self.body(&t.children),
            ast::Stmt::EmitExpr(e) => self.expr(&e.expr),
            ast::Stmt::EmitRaw(_) | ast::Stmt::Extends(_) | ast::Stmt::Include(_) => {}
            ast::Stmt::ForLoop(f) => self.for_loop(f),
            ast::Stmt::IfCond(i) => {
                self.expr(&i.expr);
                let paths = self.paths_read(&i.expr);
                self.guarded(Guard::Paths(paths), |w| {
                    w.scoped(false, |w| w.body(&i.true_body));
                    w.scoped(false, |w| w.body(&i.false_body));
                });
                self.forget(&[&i.true_body, &i.false_body]);
            }
            ast::Stmt::WithBlock(block) => {
                self.scoped(false, |w| {
                    for (target, value) in &block.assignments {
                        w.expr(value);
                        match (target, w.value_of(value, How::Alias)) {
                            (ast::Expr::Var(var), Some(bound)) => {
                                w.bind(var.id, Binding::Path(bound));
                            }
                            _ => w.bind_opaque(target),
                        }
                    }
                    w.body(&block.body);
                });
                self.forget(&[&block.body]);
            }
            ast::Stmt::Set(s) => {
                self.expr(&s.expr);
                match (&s.target, self.value_of(&s.expr, How::Alias)) {
                    (ast::Expr::Var(var), Some(bound)) => self.bind(var.id, Binding::Path(bound)),
                    _ => self.bind_opaque(&s.target),
                }
            }
            ast::Stmt::SetBlock(s) => {
                if let Some(filter) = &s.filter {
                    self.expr(filter);
                }
                self.scoped(false, |w| w.body(&s.body));
                self.forget(&[&s.body]);
                self.bind_opaque(&s.target);
            }
            ast::Stmt::AutoEscape(a) => {
                self.expr(&a.enabled);
                self.scoped(false, |w| w.body(&a.body));
                self.forget(&[&a.body]);
            }
            ast::Stmt::FilterBlock(f) => {
                self.expr(&f.filter);
                self.scoped(false, |w| w.body(&f.body));
                self.forget(&[&f.body]);
            }
            ast::Stmt::Block(b) => {
                self.scoped(true, |w| w.body(&b.body));
                self.forget(&[&b.body]);
            }
            ast::Stmt::Macro(m) => {
                self.bind(m.name, Binding::Opaque);
                self.macro_body(m);
            }
            ast::Stmt::CallBlock(c) => {
                self.expr(&c.call.expr);
                c.call.args.iter().for_each(|a| self.expr(arg_expr(a)));
                self.macro_body(&c.macro_decl);
            }
            ast::Stmt::Import(i) => self.bind_opaque(&i.name),
            ast::Stmt::FromImport(f) => {
                for (name, alias) in &f.names {
                    self.bind_opaque(alias.as_ref().unwrap_or(name));
                }
            }
            ast::Stmt::Do(d) => {
                self.expr(&d.call.expr);
                d.call.args.iter().for_each(|a| self.expr(arg_expr(a)));
            }
        }
    }

    fn macro_body(&mut self, m: &ast::Macro<'a>) {
        self.scoped(true, |w| {
            m.defaults.iter().for_each(|d| w.expr(d));
            m.args.iter().for_each(|arg| w.bind_opaque(arg));
            w.body(&m.body);
        });
        self.forget(&[&m.body]);
    }

    fn for_loop(&mut self, f: &ast::ForLoop<'a>) {
        self.expr(&f.iter);
        let item = match &f.target {
            ast::Expr::Var(_) if !f.recursive => self
                .value_of(&f.iter, How::Item)
                .map(|list| list.item(range(f.iter.span()), How::Item)),
            _ => None,
        };
        self.scoped(false, |w| {
            match (&f.target, item) {
                (ast::Expr::Var(var), Some(item)) => w.bind(var.id, Binding::Path(item)),
                (target, _) => w.bind_opaque(target),
            }
            // An earlier iteration may have set them.
            w.forget(&[&f.body]);
            if let Some(filter) = &f.filter_expr {
                w.expr(filter);
            }
            w.body(&f.body);
        });
        self.scoped(false, |w| w.body(&f.else_body));
        self.forget(&[&f.body, &f.else_body]);
    }

    /// A chain read: through a binding, a derived read; of a stage's output field, a stage
    /// read.
    fn chain_read(&mut self, expr: &ast::Expr<'a>) -> bool {
        if chain(expr).is_none() {
            return false;
        }
        let Some(resolved) = self.resolve(expr) else {
            return true;
        };
        // Through a binding of a path past `stages.X.output`, the field was read where the
        // binding was made, and a loop over none never gets to its items.
        let read_here = resolved
            .through
            .as_ref()
            .is_none_or(|(_, bound)| bound.path.len() <= 3 && !bound.items.contains(&3));
        if read_here {
            self.stage_read(&resolved.path, resolved.span.clone());
        }
        if let Some((name, bound)) = resolved.through {
            if resolved.path.len() > bound.path.len() {
                self.flow.derived.push(Derived {
                    through: bound.path.len(),
                    read: Read {
                        path: resolved.path,
                        span: resolved.span,
                        segments: resolved.segments,
                    },
                    name,
                    how: bound.how,
                    base: bound.base,
                });
            }
        }
        true
    }

    /// A read of `stages.X.output.<field>...`.
    fn stage_read(&mut self, path: &[String], span: Range<usize>) {
        if path.len() > 3 && path[0] == "stages" && path[2] == "output" {
            self.flow.stage_reads.push(StageRead {
                stage: path[1].clone(),
                path: path.to_vec(),
                span,
                guarded: self.is_guarded(),
                conditions: self.conditions(),
            });
        }
    }

    fn expr(&mut self, expr: &ast::Expr<'a>) {
        match expr {
            ast::Expr::Var(_) => {
                self.chain_read(expr);
            }
            ast::Expr::GetAttr(attr) => {
                if !self.chain_read(expr) {
                    self.expr(&attr.expr);
                }
            }
            ast::Expr::GetItem(item) => {
                if !self.chain_read(expr) {
                    self.expr(&item.expr);
                    self.expr(&item.subscript_expr);
                }
            }
            ast::Expr::Const(_) => {}
            ast::Expr::Slice(s) => {
                self.expr(&s.expr);
                for part in [&s.start, &s.stop, &s.step].into_iter().flatten() {
                    self.expr(part);
                }
            }
            ast::Expr::UnaryOp(u) => self.expr(&u.expr),
            ast::Expr::BinOp(b) => {
                self.expr(&b.left);
                if matches!(b.op, ast::BinOpKind::ScAnd | ast::BinOpKind::ScOr) {
                    // Whatever the left says, the right is read only when it says so.
                    self.guarded(Guard::All, |w| w.expr(&b.right));
                } else {
                    self.expr(&b.right);
                }
                let op = match b.op {
                    ast::BinOpKind::Lt => Some("<"),
                    ast::BinOpKind::Lte => Some("<="),
                    ast::BinOpKind::Gt => Some(">"),
                    ast::BinOpKind::Gte => Some(">="),
                    _ => None,
                };
                if let Some(op) = op {
                    self.ordering(&b.left, op, &b.right);
                }
            }
            ast::Expr::Compare(c) => {
                self.expr(&c.expr);
                c.ops.iter().for_each(|op| self.expr(&op.expr));
                self.orderings(c);
            }
            ast::Expr::IfExpr(i) => {
                self.expr(&i.test_expr);
                let paths = self.paths_read(&i.test_expr);
                self.guarded(Guard::Paths(paths), |w| {
                    w.expr(&i.true_expr);
                    if let Some(other) = &i.false_expr {
                        w.expr(other);
                    }
                });
            }
            ast::Expr::Filter(f) => self.filter(f),
            ast::Expr::Test(t) => {
                // A test looks at what is there, undefined or none included.
                self.guarded(Guard::All, |w| w.expr(&t.expr));
                t.args.iter().for_each(|a| self.expr(arg_expr(a)));
            }
            ast::Expr::Call(c) => {
                match &c.expr {
                    // `x.items()`: a method of what `x` is, not a field of it.
                    ast::Expr::GetAttr(attr) => self.expr(&attr.expr),
                    other => self.expr(other),
                }
                c.args.iter().for_each(|a| self.expr(arg_expr(a)));
            }
            ast::Expr::List(l) => l.items.iter().for_each(|item| self.expr(item)),
            ast::Expr::Map(m) => {
                m.keys.iter().for_each(|k| self.expr(k));
                m.values.iter().for_each(|v| self.expr(v));
            }
        }
    }

    fn filter(&mut self, f: &ast::Filter<'a>) {
        if let Some(inner) = &f.expr {
            if matches!(f.name, "default" | "d") {
                self.guarded(Guard::All, |w| w.expr(inner));
            } else {
                self.expr(inner);
            }
        }
        f.args.iter().for_each(|a| self.expr(arg_expr(a)));
        if REGEX_FILTERS.contains(&f.name) {
            if let Some(ast::CallArg::Pos(ast::Expr::Const(c))) = f.args.first() {
                if let Some(pattern) = c.value.as_str() {
                    self.flow.patterns.push(Pattern {
                        filter: f.name.to_string(),
                        pattern: pattern.to_string(),
                        span: range(c.span()),
                    });
                }
            }
        }
        self.attribute(f);
    }

    /// `list | map(attribute='a.b')` and the filters that read a field of each item.
    fn attribute(&mut self, f: &ast::Filter<'a>) {
        let kwarg = |name: &str| {
            f.args.iter().find_map(|a| match a {
                ast::CallArg::Kwarg(n, e) if *n == name => Some(e),
                _ => None,
            })
        };
        // A `default` gives the missing field a value.
        if kwarg("default").is_some() {
            return;
        }
        let attribute = match f.name {
            "map" | "sort" | "unique" | "sum" | "min" | "max" => kwarg("attribute"),
            "selectattr" | "rejectattr" | "groupby" => match f.args.first() {
                Some(ast::CallArg::Pos(e)) => Some(e),
                _ => kwarg("attribute"),
            },
            _ => None,
        };
        let Some(ast::Expr::Const(c)) = attribute else {
            return;
        };
        let Some(text) = c.value.as_str() else {
            return;
        };
        if text.is_empty() || text.contains([',', ' ']) {
            return;
        }
        let Some(list) = f
            .expr
            .as_ref()
            .and_then(|inner| self.value_of(inner, How::Attribute))
        else {
            return;
        };
        let span = range(c.span());
        let item = list.item(span.clone(), How::Attribute);
        let mut path = item.path.clone();
        let mut segments = item.segments.clone();
        // Each dotted part at its own bytes, past the opening quote.
        let mut at = span.start + 1;
        for part in text.split('.') {
            path.push(part.to_string());
            segments.push(at..at + part.len());
            at += part.len() + 1;
        }
        // The list was read where it is written: a field of each item is read only when there
        // are items.
        self.flow.derived.push(Derived {
            through: item.path.len(),
            read: Read {
                path,
                span,
                segments,
            },
            name: f.name.to_string(),
            how: How::Attribute,
            base: item.base,
        });
    }

    /// The ordering comparisons of a chain (`a < b <= c`).
    fn orderings(&mut self, c: &ast::Compare<'a>) {
        let mut left = &c.expr;
        for op in &c.ops {
            let shown = match op.op {
                ast::CompareOpKind::Lt => Some("<"),
                ast::CompareOpKind::Lte => Some("<="),
                ast::CompareOpKind::Gt => Some(">"),
                ast::CompareOpKind::Gte => Some(">="),
                _ => None,
            };
            if let Some(shown) = shown {
                self.ordering(left, shown, &op.expr);
            }
            left = &op.expr;
        }
    }

    /// `left op right`, where one side is a path and the other a literal string or number.
    fn ordering(&mut self, left: &ast::Expr<'a>, op: &'static str, right: &ast::Expr<'a>) {
        for (path_side, literal_side) in [(left, right), (right, left)] {
            let ast::Expr::Const(literal) = literal_side else {
                continue;
            };
            let string = literal.value.as_str().is_some();
            if !string && !literal.value.is_number() {
                continue;
            }
            let Some(resolved) = self.resolve(path_side) else {
                continue;
            };
            self.flow.orderings.push(Ordering {
                path: resolved.path,
                op,
                literal: literal
                    .value
                    .as_str()
                    .map_or_else(|| literal.value.to_string(), str::to_string),
                string,
                span: range(literal.span()),
            });
        }
    }
}

impl Bound {
    /// An item of the list this stands for.
    fn item(mut self, at: Range<usize>, how: How) -> Bound {
        self.items.push(self.path.len());
        self.path.push("0".to_string());
        self.segments.push(at);
        self.how = how;
        self
    }
}

fn arg_expr<'e, 'a>(arg: &'e ast::CallArg<'a>) -> &'e ast::Expr<'a> {
    match arg {
        ast::CallArg::Pos(e)
        | ast::CallArg::Kwarg(_, e)
        | ast::CallArg::PosSplat(e)
        | ast::CallArg::KwargSplat(e) => e,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flow(source: &str) -> Flow {
        of_source(source, false).expect("parses")
    }

    fn derived(source: &str) -> Vec<String> {
        flow(source)
            .derived
            .iter()
            .map(|d| shown(&d.read.path))
            .collect()
    }

    #[test]
    fn an_alias_a_loop_variable_and_an_attribute_are_followed_to_their_paths() {
        assert_eq!(
            derived("{% set o = stages.a.output %}{{ o.title }}{% for s in o.sources %}{{ s.meta.size }}{% endfor %}{{ o.sources | map(attribute='meta.name') | join }}"),
            [
                "stages.a.output.title",
                "stages.a.output.sources",
                "stages.a.output.sources[0].meta.size",
                "stages.a.output.sources",
                "stages.a.output.sources[0].meta.name",
            ]
        );
        // Each segment is where it is written: the use's own, the binding's before them.
        let source = "{% set o = stages.a.output %}{{ o.nmae }}";
        let flow = flow(source);
        let read = &flow.derived[0];
        assert_eq!(read.through, 3);
        assert_eq!(&source[read.read.segment(3)], "nmae");
        assert_eq!(&source[read.read.segment(1)], "a");
    }

    #[test]
    fn a_binding_that_may_have_changed_is_not_followed() {
        // Rebound in a branch: after the `if`, either value.
        assert!(derived(
            "{% set o = stages.a.output %}{% if x %}{% set o = stages.b.output %}{% endif %}{{ o.t }}"
        )
        .is_empty());
        // Set later in the loop's body: an earlier iteration's value.
        assert!(derived(
            "{% set o = stages.a.output %}{% for i in xs %}{{ o.t }}{% set o = i %}{% endfor %}"
        )
        .is_empty());
        // Inside a macro: it runs where it is called.
        assert!(derived(
            "{% set o = stages.a.output %}{% macro m() %}{{ o.t }}{% endmacro %}{{ m() }}"
        )
        .is_empty());
        // A filter that is not a list's own, a tuple target, a recursive loop.
        assert!(derived("{% set o = stages.a.output | default({}) %}{{ o.t }}").is_empty());
        assert!(
            derived("{% for k, v in stages.a.output | items %}{{ v.t }}{% endfor %}").is_empty()
        );
        assert!(
            derived("{% for s in stages.a.output.xs recursive %}{{ s.t }}{% endfor %}").is_empty()
        );
        assert!(derived("{{ stages.a.output.xs | map(attribute='t', default=1) }}").is_empty());
        // Set inside a loop's body before it is read there: followed.
        assert_eq!(
            derived(
                "{% for s in stages.a.output.xs %}{% set m = s.meta %}{{ m.size }}{% endfor %}"
            ),
            [
                "stages.a.output.xs[0].meta",
                "stages.a.output.xs[0].meta.size"
            ]
        );
    }

    #[test]
    fn regex_patterns_and_orderings_with_literals_are_listed() {
        let source = "{{ x | regex_replace('(a', '') }}{% if stages.a.output.n > 'x' %}{% endif %}{% set n = stages.a.output.n %}{{ 3 <= n }}";
        let flow = flow(source);
        assert_eq!(flow.patterns.len(), 1);
        assert_eq!(&source[flow.patterns[0].span.clone()], "'(a'");
        let orderings: Vec<(String, &str, String, bool)> = flow
            .orderings
            .iter()
            .map(|o| (shown(&o.path), o.op, o.literal.clone(), o.string))
            .collect();
        assert_eq!(
            orderings,
            [
                ("stages.a.output.n".into(), ">", "x".into(), true),
                ("stages.a.output.n".into(), "<=", "3".into(), false),
            ]
        );
    }

    #[test]
    fn reads_of_a_stage_under_a_guard_are_guarded() {
        // Guarded as check sees it when the conditions read the stage itself.
        let guarded = |source: &str| -> Vec<bool> {
            flow(source)
                .stage_reads
                .iter()
                .map(|r| {
                    r.guarded
                        || r.conditions
                            .iter()
                            .any(|p| p.len() > 1 && p[0] == "stages" && p[1] == r.stage)
                })
                .collect()
        };
        assert_eq!(guarded("{% set n = 1 %}{{ stages.a.output.x }}"), [false]);
        assert_eq!(
            guarded("{% if stages.a.status == 'succeeded' %}{{ stages.a.output.x }}{% else %}{{ stages.a.output.y }}{% endif %}"),
            [true, true]
        );
        assert_eq!(
            guarded("{% if stages.b.status == 'succeeded' %}{{ stages.a.output.x }}{% endif %}"),
            [false]
        );
        assert_eq!(
            guarded("{{ stages.a.output.x | default('') }}{{ stages.a.output.x is defined }}{{ stages.a.output and stages.a.output.x }}{{ stages.a.output.y if stages.a.output else 1 }}"),
            [true, true, true, true]
        );
        assert_eq!(
            guarded("{% set o = stages.a.output %}{{ o.x }}{% if o %}{{ o.y }}{% endif %}"),
            [false, true]
        );
        // A loop over none has no items: what it reads of them is never read.
        assert!(guarded(
            "{% for s in stages.a.output %}{{ s.x }}{% endfor %}{{ stages.a.output | map(attribute='x') }}"
        )
        .is_empty());
        assert_eq!(
            guarded("{% for s in stages.a.output.xs %}{{ s.x }}{% endfor %}"),
            [false]
        );
    }
}
